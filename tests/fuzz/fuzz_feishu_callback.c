/* libFuzzer target for feishu_callback_parse: a Feishu/Lark event callback,
 * untrusted, through signature, decryption, token check and the event
 * parser. Input: the first byte picks the mode, the rest is the body.
 *   bit 0: the app has an encrypt key;
 *   bit 1: the harness signs the request correctly (else it is unsigned);
 *   bit 2: the harness encrypts the rest with the key into {"encrypt": ...}
 *          (so the fuzzer reaches the event parser behind decryption);
 *   bit 3: the rest goes to feishu_decrypt as an `encrypt` field instead.
 * Besides memory errors and undefined behaviour, it checks what the
 * channel layer relies on: a failure leaves nothing behind; an accepted
 * callback carries the configured token; a message's ids and keys pass
 * feishu_id_valid (they go into API paths), its attachments and text are
 * bounded and its text is valid UTF-8. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "base/json.h"
#include "channels/feishu_internal.h"
#include "fuzz_support.h"

#define KEY "fuzz-encrypt-key"
#define TOKEN "fuzz-token"
#define NOW 1700000000

/* {"encrypt": base64(iv + AES-256-CBC(plain))} with a fixed IV. */
static char *envelope(const uint8_t *plain, size_t n) {
    unsigned char key[32], iv[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
    crypto_hash_sha256(key, (const unsigned char *)KEY, strlen(KEY));
    unsigned char *buf = malloc(16 + n + 32);
    check(buf != NULL);
    memcpy(buf, iv, 16);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int len = 0, tail = 0;
    check(EVP_EncryptInit_ex(ctx, EVP_aes_256_cbc(), NULL, key, iv) == 1);
    check(EVP_EncryptUpdate(ctx, buf + 16, &len, plain, (int)n) == 1);
    check(EVP_EncryptFinal_ex(ctx, buf + 16 + len, &tail) == 1);
    EVP_CIPHER_CTX_free(ctx);
    size_t total = 16 + (size_t)len + (size_t)tail;
    size_t b64_len = sodium_base64_encoded_len(total, sodium_base64_VARIANT_ORIGINAL);
    char *out = malloc(b64_len + 16);
    check(out != NULL);
    memcpy(out, "{\"encrypt\":\"", 12);
    sodium_bin2base64(out + 12, b64_len, buf, total, sodium_base64_VARIANT_ORIGINAL);
    strcat(out, "\"}");
    free(buf);
    return out;
}

static void check_message(const feishu_message *m) {
    check(feishu_id_valid(m->event_id) && feishu_id_valid(m->sender_open_id));
    check(feishu_id_valid(m->chat_id) && feishu_id_valid(m->message_id));
    check(feishu_id_valid(m->type_name));
    check(m->text && strlen(m->text) <= FEISHU_TEXT_MAX);
    check(fawn_utf8_valid(m->text, strlen(m->text)));
    check(m->n_resources <= FEISHU_MAX_RESOURCES);
    for (size_t i = 0; i < m->n_resources; i++) {
        check(feishu_id_valid(m->resources[i].key));
        check(!m->resources[i].name || strlen(m->resources[i].name) <= FEISHU_NAME_MAX);
    }
}

static void decrypt_only(const uint8_t *data, size_t size) {
    char *b64 = strndup((const char *)data, size);
    check(b64 != NULL);
    char *out = NULL;
    size_t len = 0;
    int r = feishu_decrypt(&out, &len, KEY, b64);
    check(r == 0 ? out != NULL && strlen(out) <= len : out == NULL && len == 0);
    free(out);
    free(b64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FEISHU_CALLBACK_MAX)
        return 0;
    uint8_t mode = data[0];
    if (mode & 8) {
        decrypt_only(data + 1, size - 1);
        return 0;
    }
    /* The raw body may hold NUL bytes: copied whole, its length kept. */
    size_t body_len = size - 1;
    char *body = (mode & 4) ? envelope(data + 1, size - 1) : malloc(size);
    check(body != NULL);
    if (mode & 4) {
        body_len = strlen(body);
    } else {
        memcpy(body, data + 1, body_len);
        body[body_len] = '\0';
    }
    char ts[16] = "1700000000", sig[65] = "", *all = NULL;
    if (mode & 2) {
        check(asprintf(&all, "%s%s%s", ts, "nonce", KEY) >= 0);
        crypto_hash_sha256_state st;
        unsigned char d[32];
        crypto_hash_sha256_init(&st);
        crypto_hash_sha256_update(&st, (const unsigned char *)all, strlen(all));
        crypto_hash_sha256_update(&st, (const unsigned char *)body, body_len);
        crypto_hash_sha256_final(&st, d);
        sodium_bin2hex(sig, sizeof sig, d, sizeof d);
        free(all);
    }
    feishu_request req = {.timestamp = (mode & 2) ? ts : NULL,
                          .nonce = (mode & 2) ? "nonce" : NULL,
                          .signature = (mode & 2) ? sig : NULL,
                          .body = body,
                          .body_len = body_len,
                          .now_s = NOW};
    feishu_secrets secrets = {.verification_token = TOKEN, .encrypt_key = (mode & 1) ? KEY : NULL};
    feishu_callback cb;
    int r = feishu_callback_parse(&cb, &secrets, &req);
    if (r < 0) {
        check(cb.kind == 0 && !cb.challenge && !cb.event_type && !cb.msg.event_id &&
              cb.msg.n_resources == 0);
    } else if (cb.kind == FEISHU_CALLBACK_CHALLENGE) {
        check(cb.challenge && *cb.challenge);
        char *answer = NULL;
        check(feishu_challenge_answer(&answer, cb.challenge) == 0);
        free(answer);
    } else if (cb.kind == FEISHU_CALLBACK_MESSAGE) {
        check_message(&cb.msg);
    } else {
        check(cb.kind == FEISHU_CALLBACK_IGNORED && !cb.msg.message_id);
    }
    /* The token check itself: a body with another token never passes. */
    if (r == 0 && !(mode & 1)) {
        char *token = NULL;
        feishu_callback again;
        check(feishu_event_read(&again, &token, body, body_len) == 0);
        check(token && !strcmp(token, TOKEN));
        free(token);
        feishu_callback_free(&again);
    }
    feishu_callback_free(&cb);
    free(body);
    return 0;
}
