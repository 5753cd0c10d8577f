/* channels/feishu: event callbacks (signature, decryption, token, the
 * im.message.receive_v1 event) and the open platform client against a fake
 * platform on loopback, both written from the platform's documented shapes. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"

#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "channels/feishu_internal.h"
#include "channels/platform.h"
#include "unit/fake_http.h"

#define KEY "test-encrypt-key"
#define TOKEN "test-verification-token"
#define NOW 1700000000

/* ---- helpers: what the platform does ---- */

/* base64(iv + AES-256-CBC(sha256(key), iv, plain)) as the platform sends it.
 * bad_pad leaves the padding out and breaks the last byte. */
static char *encrypt_with(const char *key, const char *plain, bool bad_pad) {
    unsigned char k[32], iv[16];
    crypto_hash_sha256(k, (const unsigned char *)key, strlen(key));
    /* A fixed IV per text: each case decrypts (or fails) the same way every run. */
    unsigned char seed[32];
    crypto_hash_sha256(seed, (const unsigned char *)plain, strlen(plain));
    memcpy(iv, seed, sizeof iv);
    size_t n = strlen(plain);
    size_t padded = bad_pad ? (n + 15) / 16 * 16 : n + 16;
    unsigned char *buf = calloc(1, 16 + padded + 16);
    assert_non_null(buf);
    memcpy(buf, iv, 16);
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    int len = 0, tail = 0;
    assert_int_equal(EVP_EncryptInit_ex(ctx, EVP_aes_256_cbc(), NULL, k, iv), 1);
    unsigned char *src = (unsigned char *)strdup(plain);
    if (bad_pad) {
        EVP_CIPHER_CTX_set_padding(ctx, 0);
        src = realloc(src, padded);
        memset(src + n, 0x00, padded - n); /* zero padding is not PKCS#7 */
        n = padded;
    }
    assert_int_equal(EVP_EncryptUpdate(ctx, buf + 16, &len, src, (int)n), 1);
    assert_int_equal(EVP_EncryptFinal_ex(ctx, buf + 16 + len, &tail), 1);
    EVP_CIPHER_CTX_free(ctx);
    free(src);
    size_t total = 16 + (size_t)len + (size_t)tail;
    size_t b64_len = sodium_base64_encoded_len(total, sodium_base64_VARIANT_ORIGINAL);
    char *b64 = malloc(b64_len);
    sodium_bin2base64(b64, b64_len, buf, total, sodium_base64_VARIANT_ORIGINAL);
    free(buf);
    return b64;
}

static char *envelope(const char *key, const char *plain) {
    char *b64 = encrypt_with(key, plain, false);
    char *body = strf("{\"encrypt\":\"%s\"}", b64);
    free(b64);
    return body;
}

static void sign(char out[65], const char *ts, const char *nonce, const char *key,
                 const char *body) {
    char *all = strf("%s%s%s%s", ts, nonce, key, body);
    fawn_sha256_hex(out, all, strlen(all));
    free(all);
}

static char *message_event(const char *token, const char *type, const char *content_json,
                           const char *sender_type) {
    json_t *ev = json_pack(
        "{s:s,s:{s:s,s:s,s:s,s:s},s:{s:{s:{s:s},s:s},s:{s:s,s:s,s:s,s:s,s:s,s:[{s:s,s:s}]}}}",
        "schema", "2.0", "header", "event_id", "5e3702a84e847582be8db7fb73283c02", "event_type",
        "im.message.receive_v1", "token", token, "app_id", "cli_a", "event", "sender", "sender_id",
        "open_id", "ou_7d8a6e6df7621556ce0d21922b676706", "sender_type", sender_type, "message",
        "message_id", "om_5ce6d572455d361153b7cb51da133945", "chat_id",
        "oc_5ce6d572455d361153b7xx51da133945", "chat_type", "group", "message_type", type,
        "content", content_json, "mentions", "key", "@_user_1", "name", "fawn");
    assert_non_null(ev);
    char *s = json_dumps(ev, JSON_COMPACT);
    json_decref(ev);
    return s;
}

static int parse_signed(feishu_callback *cb, const char *key, const char *body, const char *sig,
                        int64_t ts_offset) {
    char ts[32], mine[65];
    snprintf(ts, sizeof ts, "%lld", (long long)(NOW + ts_offset));
    sign(mine, ts, "n0nce", key, body);
    feishu_request req = {.timestamp = ts,
                          .nonce = "n0nce",
                          .signature = sig ? sig : mine,
                          .body = body,
                          .body_len = strlen(body),
                          .now_s = NOW};
    feishu_secrets s = {.verification_token = TOKEN, .encrypt_key = KEY};
    return feishu_callback_parse(cb, &s, &req);
}

static int parse_plain(feishu_callback *cb, const feishu_secrets *s, const char *body) {
    feishu_request req = {.body = body, .body_len = strlen(body), .now_s = NOW};
    return feishu_callback_parse(cb, s, &req);
}

/* ---- signature and decryption ---- */

static void signatures_are_checked_in_their_window(void **state) {
    (void)state;
    const char *body = "{\"encrypt\":\"abc\"}";
    char sig[65], upper[65];
    sign(sig, "1700000000", "n", KEY, body);
    feishu_request req = {.timestamp = "1700000000",
                          .nonce = "n",
                          .signature = sig,
                          .body = body,
                          .body_len = strlen(body),
                          .now_s = NOW};
    assert_int_equal(feishu_signature_check(&req, KEY), 0);
    for (int i = 0; i < 65; i++)
        upper[i] = (char)toupper((unsigned char)sig[i]);
    req.signature = upper;
    assert_int_equal(feishu_signature_check(&req, KEY), 0);
    req.signature = sig;
    assert_int_equal(feishu_signature_check(&req, "another-key"), FAWN_EPERM);
    req.body_len--; /* one byte of the body changed */
    assert_int_equal(feishu_signature_check(&req, KEY), FAWN_EPERM);
    req.body_len++;
    req.now_s = NOW + FEISHU_SIGNATURE_WINDOW_S + 1; /* a replay, later */
    assert_int_equal(feishu_signature_check(&req, KEY), FAWN_EPERM);
    req.now_s = NOW - FEISHU_SIGNATURE_WINDOW_S - 1;
    assert_int_equal(feishu_signature_check(&req, KEY), FAWN_EPERM);
    req.now_s = NOW;
    const char *bad_ts[] = {NULL, "", "17e8", "-1", "1700000000000000"};
    for (size_t i = 0; i < ARRAY_LEN(bad_ts); i++) {
        req.timestamp = bad_ts[i];
        assert_int_equal(feishu_signature_check(&req, KEY), FAWN_EPERM);
    }
    req.timestamp = "1700000000";
    req.nonce = NULL;
    assert_int_equal(feishu_signature_check(&req, KEY), FAWN_EPERM);
    req.nonce = "n";
    req.signature = "abc";
    assert_int_equal(feishu_signature_check(&req, KEY), FAWN_EPERM);
}

static void bodies_decrypt_only_exactly(void **state) {
    (void)state;
    const char *plain = "{\"challenge\":\"c-1\",\"token\":\"t\",\"type\":\"url_verification\"}";
    char *b64 = encrypt_with(KEY, plain, false);
    char *out = NULL;
    size_t len = 0;
    assert_int_equal(feishu_decrypt(&out, &len, KEY, b64), 0);
    assert_string_equal(out, plain);
    assert_int_equal(len, strlen(plain));
    free(out);
    assert_int_equal(feishu_decrypt(&out, &len, "wrong-key", b64), FAWN_EPERM);
    assert_null(out);
    b64[strlen(b64) - 6] = '\0'; /* cut: no longer whole blocks, nor base64 */
    assert_int_equal(feishu_decrypt(&out, &len, KEY, b64), FAWN_EPERM);
    free(b64);
    b64 = encrypt_with(KEY, "0123456789abcdef0123", true);
    assert_int_equal(feishu_decrypt(&out, &len, KEY, b64), FAWN_EPERM);
    free(b64);
    const char *junk[] = {"", "!!!!", "AAAA", "AAAAAAAAAAAAAAAAAAAAAA==", "AAAA AAAA"};
    for (size_t i = 0; i < ARRAY_LEN(junk); i++)
        assert_int_equal(feishu_decrypt(&out, &len, KEY, junk[i]), FAWN_EPERM);
    assert_null(out);
}

/* ---- the whole callback, as an attacker would try it ---- */

static void url_verification_is_answered_with_its_challenge(void **state) {
    (void)state;
    char *plain = strf("{\"challenge\":\"ajls384kdjx98XX\",\"token\":\"%s\",\"type\":"
                       "\"url_verification\"}",
                       TOKEN);
    char *body = envelope(KEY, plain);
    feishu_secrets s = {.verification_token = TOKEN, .encrypt_key = KEY};
    feishu_callback cb;
    assert_int_equal(parse_plain(&cb, &s, body), 0); /* the platform does not sign these */
    assert_int_equal(cb.kind, FEISHU_CALLBACK_CHALLENGE);
    char *answer = NULL;
    assert_int_equal(feishu_challenge_answer(&answer, cb.challenge), 0);
    assert_string_equal(answer, "{\"challenge\":\"ajls384kdjx98XX\"}");
    free(answer);
    feishu_callback_free(&cb);
    free(body);
    /* The same with the wrong token inside, or encrypted with another key. */
    free(plain);
    plain = strf("{\"challenge\":\"x\",\"token\":\"guess\",\"type\":\"url_verification\"}");
    body = envelope(KEY, plain);
    assert_int_equal(parse_plain(&cb, &s, body), FAWN_EPERM);
    assert_int_equal(cb.kind, 0);
    assert_null(cb.challenge);
    free(body);
    body = envelope("attacker-key", plain);
    assert_int_equal(parse_plain(&cb, &s, body), FAWN_EPERM);
    free(body);
    /* No encrypt key: plaintext, token checked. */
    feishu_secrets plain_only = {.verification_token = TOKEN};
    char *ok = strf("{\"challenge\":\"c\",\"token\":\"%s\",\"type\":\"url_verification\"}", TOKEN);
    assert_int_equal(parse_plain(&cb, &plain_only, ok), 0);
    assert_string_equal(cb.challenge, "c");
    feishu_callback_free(&cb);
    assert_int_equal(parse_plain(&cb, &plain_only, plain), FAWN_EPERM);
    free(ok);
    free(plain);
}

static void signed_encrypted_events_are_read(void **state) {
    (void)state;
    char *plain = message_event(TOKEN, "text",
                                "{\"text\":\"@_user_1 hello @_user_12 there @_all \"}", "user");
    char *body = envelope(KEY, plain);
    feishu_callback cb;
    assert_int_equal(parse_signed(&cb, KEY, body, NULL, -30), 0);
    assert_int_equal(cb.kind, FEISHU_CALLBACK_MESSAGE);
    const feishu_message *m = &cb.msg;
    assert_string_equal(m->event_id, "5e3702a84e847582be8db7fb73283c02");
    assert_string_equal(m->sender_open_id, "ou_7d8a6e6df7621556ce0d21922b676706");
    assert_string_equal(m->chat_id, "oc_5ce6d572455d361153b7xx51da133945");
    assert_string_equal(m->message_id, "om_5ce6d572455d361153b7cb51da133945");
    assert_int_equal(m->chat_type, FEISHU_CHAT_GROUP);
    assert_int_equal(m->type, FEISHU_MSG_TEXT);
    /* @_user_1 (the one listed) and @_all go; @_user_12 is not @_user_1 */
    assert_string_equal(m->text, "hello @_user_12 there");
    assert_int_equal(m->n_resources, 0);
    feishu_callback_free(&cb);
    free(body);
    free(plain);
}

static void forged_callbacks_are_refused(void **state) {
    (void)state;
    char *plain = message_event(TOKEN, "text", "{\"text\":\"rm -rf\"}", "user");
    char *body = envelope(KEY, plain);
    feishu_callback cb;
    feishu_secrets s = {.verification_token = TOKEN, .encrypt_key = KEY};
    /* unsigned event with an encrypt key */
    assert_int_equal(parse_plain(&cb, &s, body), FAWN_EPERM);
    /* a signature made with a guessed key, and a bad signature */
    char forged[65];
    sign(forged, "1700000000", "n0nce", "guess", body);
    assert_int_equal(parse_signed(&cb, KEY, body, forged, 0), FAWN_EPERM);
    assert_int_equal(parse_signed(&cb, KEY, body,
                                  "0000000000000000000000000000000000000000000000"
                                  "000000000000000000",
                                  0),
                     FAWN_EPERM);
    /* a real signature, replayed outside the window */
    assert_int_equal(parse_signed(&cb, KEY, body, NULL, -FEISHU_SIGNATURE_WINDOW_S - 5),
                     FAWN_EPERM);
    /* the plaintext event itself, signed, while the app has an encrypt key */
    assert_int_equal(parse_signed(&cb, KEY, plain, NULL, 0), FAWN_EPERM);
    free(body);
    /* encrypted with another key but signed with ours (signature checks the
     * ciphertext only) */
    body = envelope("attacker-key", plain);
    assert_int_equal(parse_signed(&cb, KEY, body, NULL, 0), FAWN_EPERM);
    free(body);
    free(plain);
    /* a wrong key passes the padding check about once in 256 bodies: those
     * are refused as unauthenticated too, never read as events */
    for (int i = 0; i < 1024; i++) {
        char *junk = strf("{\"n\":%d}", i);
        char *enc = envelope("attacker-key", junk);
        assert_int_equal(parse_signed(&cb, KEY, enc, NULL, 0), FAWN_EPERM);
        free(enc);
        free(junk);
    }
    /* the right key, the wrong verification token inside */
    plain = message_event("guess", "text", "{\"text\":\"hi\"}", "user");
    body = envelope(KEY, plain);
    assert_int_equal(parse_signed(&cb, KEY, body, NULL, 0), FAWN_EPERM);
    free(body);
    free(plain);
    /* no encrypt key: the token is all there is */
    feishu_secrets plain_only = {.verification_token = TOKEN};
    plain = message_event("guess", "text", "{\"text\":\"hi\"}", "user");
    assert_int_equal(parse_plain(&cb, &plain_only, plain), FAWN_EPERM);
    free(plain);
    plain = message_event(TOKEN, "text", "{\"text\":\"hi\"}", "user");
    assert_int_equal(parse_plain(&cb, &plain_only, plain), 0);
    feishu_callback_free(&cb);
    /* an encrypted body when fawn has no key to check it with */
    body = envelope(KEY, plain);
    assert_int_equal(parse_plain(&cb, &plain_only, body), FAWN_EPERM);
    free(body);
    /* no token configured at all: nothing is accepted */
    feishu_secrets none = {.verification_token = ""};
    assert_int_equal(parse_plain(&cb, &none, plain), FAWN_EPERM);
    free(plain);
    /* a body past the bound is not even hashed */
    char *big = calloc(1, FEISHU_CALLBACK_MAX + 2);
    memset(big, ' ', FEISHU_CALLBACK_MAX + 1);
    assert_int_equal(parse_plain(&cb, &plain_only, big), FAWN_E2BIG);
    free(big);
}

/* ---- the event ---- */

static int read_event(feishu_callback *cb, const char *json) {
    char *token = NULL;
    int r = feishu_event_read(cb, &token, json, strlen(json));
    if (r == 0)
        assert_string_equal(token, TOKEN);
    free(token);
    return r;
}

static void message_types_are_read(void **state) {
    (void)state;
    feishu_callback cb;
    char *ev = message_event(TOKEN, "image", "{\"image_key\":\"img_v3_02ab-cd_ef\"}", "user");
    assert_int_equal(read_event(&cb, ev), 0);
    assert_int_equal(cb.msg.type, FEISHU_MSG_IMAGE);
    assert_int_equal(cb.msg.n_resources, 1);
    assert_int_equal(cb.msg.resources[0].kind, FEISHU_RESOURCE_IMAGE);
    assert_string_equal(cb.msg.resources[0].key, "img_v3_02ab-cd_ef");
    assert_null(cb.msg.resources[0].name);
    assert_string_equal(cb.msg.text, "");
    feishu_callback_free(&cb);
    free(ev);
    ev = message_event(TOKEN, "file",
                       "{\"file_key\":\"file_v3_00ab\",\"file_name\":\"../../etc/passwd\"}",
                       "user");
    assert_int_equal(read_event(&cb, ev), 0);
    assert_int_equal(cb.msg.resources[0].kind, FEISHU_RESOURCE_FILE);
    assert_string_equal(cb.msg.resources[0].key, "file_v3_00ab");
    /* passed on as sent: the upload writer names the file, not the parser */
    assert_string_equal(cb.msg.resources[0].name, "../../etc/passwd");
    feishu_callback_free(&cb);
    free(ev);
    ev = message_event(TOKEN, "post",
                       "{\"title\":\"Report\",\"content\":[[{\"tag\":\"at\",\"user_id\":\"@_user_"
                       "1\"},{\"tag\":\"text\",\"text\":\" see \"},{\"tag\":\"a\",\"text\":"
                       "\"this\",\"href\":\"http://x\"}],[{\"tag\":\"img\",\"image_key\":\"img_"
                       "1\"},{\"tag\":\"media\",\"file_key\":\"file_2\"},{\"tag\":\"emotion\"}]]}",
                       "user");
    assert_int_equal(read_event(&cb, ev), 0);
    assert_int_equal(cb.msg.type, FEISHU_MSG_POST);
    assert_string_equal(cb.msg.text, "Report\n see this");
    assert_int_equal(cb.msg.n_resources, 2);
    assert_string_equal(cb.msg.resources[0].key, "img_1");
    assert_int_equal(cb.msg.resources[1].kind, FEISHU_RESOURCE_FILE);
    feishu_callback_free(&cb);
    free(ev);
    ev = message_event(TOKEN, "audio", "{\"file_key\":\"f\"}", "user");
    assert_int_equal(read_event(&cb, ev), 0);
    assert_int_equal(cb.kind, FEISHU_CALLBACK_MESSAGE);
    assert_int_equal(cb.msg.type, FEISHU_MSG_OTHER);
    assert_string_equal(cb.msg.type_name, "audio");
    feishu_callback_free(&cb);
    free(ev);
}

static void bots_and_other_events_are_ignored(void **state) {
    (void)state;
    feishu_callback cb;
    char *ev = message_event(TOKEN, "text", "{\"text\":\"echo\"}", "app");
    assert_int_equal(read_event(&cb, ev), 0);
    assert_int_equal(cb.kind, FEISHU_CALLBACK_IGNORED);
    assert_null(cb.msg.message_id);
    feishu_callback_free(&cb);
    free(ev);
    char *other = strf("{\"schema\":\"2.0\",\"header\":{\"event_id\":\"e1\",\"event_type\":"
                       "\"im.chat.member.bot.added_v1\",\"token\":\"%s\"},\"event\":{}}",
                       TOKEN);
    assert_int_equal(read_event(&cb, other), 0);
    assert_int_equal(cb.kind, FEISHU_CALLBACK_IGNORED);
    assert_string_equal(cb.event_type, "im.chat.member.bot.added_v1");
    feishu_callback_free(&cb);
    free(other);
}

static void hostile_events_are_refused(void **state) {
    (void)state;
    feishu_callback cb;
    const char *bad_ids[] = {"om_../../x", "om_1/resources", "", "om 1", "om_1?type=file"};
    for (size_t i = 0; i < ARRAY_LEN(bad_ids); i++) {
        char *content = strf("{\"image_key\":\"%s\"}", bad_ids[i]);
        char *ev = message_event(TOKEN, "image", content, "user");
        assert_int_equal(read_event(&cb, ev), FAWN_EINVAL);
        assert_null(cb.msg.event_id);
        free(ev);
        free(content);
    }
    char *ev = message_event(TOKEN, "text", "not json", "user");
    assert_int_equal(read_event(&cb, ev), FAWN_EINVAL);
    free(ev);
    fbuf post = {0};
    assert_int_equal(fbuf_printf(&post, "{\"content\":[["), 0);
    for (int i = 0; i <= FEISHU_MAX_RESOURCES; i++)
        assert_int_equal(
            fbuf_printf(&post, "%s{\"tag\":\"img\",\"image_key\":\"img_%d\"}", i ? "," : "", i), 0);
    assert_int_equal(fbuf_printf(&post, "]]}"), 0);
    ev = message_event(TOKEN, "post", post.data, "user");
    assert_int_equal(read_event(&cb, ev), FAWN_E2BIG);
    free(ev);
    fbuf_free(&post);
    const char *junk[] = {"[]", "{\"schema\":\"2.0\"}",
                          "{\"schema\":\"2.0\",\"header\":{\"event_type\":\"im.message.receive_"
                          "v1\",\"event_id\":\"e\"}}",
                          "{\"type\":\"url_verification\",\"challenge\":7}"};
    for (size_t i = 0; i < ARRAY_LEN(junk); i++) {
        char *token = NULL;
        assert_int_equal(feishu_event_read(&cb, &token, junk[i], strlen(junk[i])), FAWN_EINVAL);
        assert_null(token);
    }
}

/* ---- answers of the platform ---- */

static void answers_map_to_errors(void **state) {
    (void)state;
    static const struct {
        long status;
        const char *body;
        int want;
    } cases[] = {
        {200, "{\"code\":0,\"msg\":\"success\",\"data\":{}}", 0},
        {400, "{\"code\":99991663,\"msg\":\"Invalid access token\"}", FAWN_EPERM},
        {400, "{\"code\":230002,\"msg\":\"Bot is not in the chat\"}", FAWN_EPERM},
        {429, "{\"code\":99991400,\"msg\":\"request trigger frequency limit\"}", FAWN_EBUSY},
        {400, "{\"code\":234006,\"msg\":\"file size exceed the max value\"}", FAWN_E2BIG},
        {400, "{\"code\":1234567,\"msg\":\"something new\"}", FAWN_EPROTO},
        {404, "{\"code\":1234567,\"msg\":\"not found\"}", FAWN_ENOENT},
        {502, "<html>bad gateway</html>", FAWN_EPROTO},
        {429, "", FAWN_EBUSY},
        {403, "", FAWN_EPERM},
        {200, "<html>ok</html>", FAWN_EPROTO},
        {200, "{\"msg\":\"no code\"}", FAWN_EPROTO},
        {200, "{\"code\":\"0\"}", FAWN_EPROTO},
        {500, "{\"code\":0}", FAWN_EPROTO},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        int r = feishu_reply_check(NULL, "message send", cases[i].status, cases[i].body,
                                   strlen(cases[i].body));
        if (r != cases[i].want)
            fail_msg("case %zu: %d (%s)", i, r, fawn_errmsg());
    }
    const char *unknown = "{\"code\":1234567,\"msg\":\"something new\"}";
    assert_int_equal(feishu_reply_check(NULL, "message send", 400, unknown, strlen(unknown)),
                     FAWN_EPROTO);
    assert_non_null(strstr(fawn_errmsg(), "message send: code 1234567: something new"));
    char *token = NULL;
    int64_t expire = 0;
    const char *t = "{\"code\":0,\"msg\":\"ok\",\"tenant_access_token\":\"t-abc\",\"expire\":7200}";
    assert_int_equal(feishu_token_reply_parse(&token, &expire, 200, t, strlen(t)), 0);
    assert_string_equal(token, "t-abc");
    assert_int_equal(expire, 7200);
    free(token);
    const char *bad_tokens[] = {"{\"code\":0,\"expire\":7200}",
                                "{\"code\":0,\"tenant_access_token\":\"t\\r\\nX: 1\",\"expire\":1}",
                                "{\"code\":0,\"tenant_access_token\":\"t\",\"expire\":0}",
                                "{\"code\":10014,\"msg\":\"app secret invalid\"}"};
    for (size_t i = 0; i < ARRAY_LEN(bad_tokens); i++) {
        assert_true(feishu_token_reply_parse(&token, &expire, 200, bad_tokens[i],
                                             strlen(bad_tokens[i])) < 0);
        assert_null(token);
    }
    char *id = NULL;
    const char *d = "{\"code\":0,\"data\":{\"message_id\":\"om_1/../x\"}}";
    assert_int_equal(feishu_data_id_parse(&id, "send", "message_id", 200, d, strlen(d)),
                     FAWN_EPROTO);
    assert_null(id);
}

/* ---- the client against a fake platform ---- */

#define R(h, b)                                                                                    \
    { .head = (h), .body = (b) }
#define JSON_OK "HTTP/1.1 200 OK\r\nContent-Type: application/json"
#define TOKEN_OK "{\"code\":0,\"msg\":\"ok\",\"tenant_access_token\":\"t-first\",\"expire\":7200}"

static feishu_client *client_at(const fake_server *s) {
    char *base = strf("http://127.0.0.1:%u/", s->port);
    feishu_client *c = NULL;
    feishu_client_config cfg = {.api_base = base, .app_id = "cli_a1", .app_secret = "s3cret"};
    assert_int_equal(feishu_client_new(&c, &cfg), 0);
    free(base);
    return c;
}

static char *last_request(fake_server *s) {
    pthread_mutex_lock(&s->lock);
    char *copy = strdup(s->request);
    pthread_mutex_unlock(&s->lock);
    return copy;
}

static json_t *request_json(const char *request) {
    const char *body = strstr(request, "\r\n\r\n");
    assert_non_null(body);
    json_t *doc = json_loads(body + 4, 0, NULL);
    assert_non_null(doc);
    return doc;
}

static void token_is_fetched_once_and_cached(void **state) {
    (void)state;
    const response script[] = {R(JSON_OK, TOKEN_OK)};
    fake_server *s = server_start(script, 1);
    feishu_client *c = client_at(s);
    char *t1 = NULL, *t2 = NULL;
    assert_int_equal(feishu_token_get(&t1, c), 0);
    char *req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/auth/v3/tenant_access_token/internal HTTP"));
    json_t *body = request_json(req);
    assert_string_equal(json_string_value(json_object_get(body, "app_id")), "cli_a1");
    assert_string_equal(json_string_value(json_object_get(body, "app_secret")), "s3cret");
    json_decref(body);
    free(req);
    assert_int_equal(feishu_token_get(&t2, c), 0);
    assert_string_equal(t1, "t-first");
    assert_string_equal(t2, "t-first");
    assert_int_equal(atomic_load(&s->served), 1);
    free(t1);
    free(t2);
    feishu_client_free(c);
    server_stop(s);
    /* refused credentials */
    const response refused[] = {R(JSON_OK, "{\"code\":10014,\"msg\":\"app secret invalid\"}")};
    s = server_start(refused, 1);
    c = client_at(s);
    assert_int_equal(feishu_token_get(&t1, c), FAWN_EPERM);
    assert_null(t1);
    assert_non_null(strstr(fawn_errmsg(), "app secret invalid"));
    feishu_client_free(c);
    server_stop(s);
}

static void messages_are_sent_replied_and_updated(void **state) {
    (void)state;
    const response script[] = {
        R(JSON_OK, TOKEN_OK),
        R(JSON_OK, "{\"code\":0,\"msg\":\"success\",\"data\":{\"message_id\":\"om_new1\"}}"),
        R(JSON_OK, "{\"code\":0,\"msg\":\"success\",\"data\":{\"message_id\":\"om_new2\"}}"),
        R(JSON_OK, "{\"code\":0,\"msg\":\"success\",\"data\":{}}"),
    };
    fake_server *s = server_start(script, ARRAY_LEN(script));
    feishu_client *c = client_at(s);
    char *content = NULL, *id = NULL;
    assert_int_equal(feishu_text_content(&content, "hi \"there\""), 0);
    assert_int_equal(feishu_message_send(&id, c, "oc_chat1", "text", content), 0);
    assert_string_equal(id, "om_new1");
    free(id);
    char *req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/im/v1/messages?receive_id_type=chat_id HTTP"));
    assert_non_null(strstr(req, "Authorization: Bearer t-first\r\n"));
    json_t *body = request_json(req);
    assert_string_equal(json_string_value(json_object_get(body, "receive_id")), "oc_chat1");
    assert_string_equal(json_string_value(json_object_get(body, "msg_type")), "text");
    assert_string_equal(json_string_value(json_object_get(body, "content")),
                        "{\"text\":\"hi \\\"there\\\"\"}");
    json_decref(body);
    free(req);
    free(content);
    assert_int_equal(feishu_card_content(&content, "**working**", "running bash"), 0);
    assert_int_equal(feishu_message_reply(&id, c, "om_in1", "interactive", content), 0);
    assert_string_equal(id, "om_new2");
    req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/im/v1/messages/om_in1/reply HTTP"));
    free(req);
    assert_int_equal(feishu_card_update(c, id, content), 0);
    req = last_request(s);
    assert_non_null(strstr(req, "PATCH /open-apis/im/v1/messages/om_new2 HTTP"));
    body = request_json(req);
    json_t *card = json_loads(json_string_value(json_object_get(body, "content")), 0, NULL);
    assert_non_null(card);
    assert_true(json_is_true(json_object_get(json_object_get(card, "config"), "update_multi")));
    json_decref(card);
    json_decref(body);
    free(req);
    free(id);
    free(content);
    assert_int_equal(atomic_load(&s->served), 4); /* one token for three calls */
    /* ids that would change the path never leave */
    assert_int_equal(feishu_message_send(&id, c, "oc_1/../../x", "text", "{}"), FAWN_EINVAL);
    assert_int_equal(feishu_card_update(c, "om_1?x=1", "{}"), FAWN_EINVAL);
    assert_int_equal(atomic_load(&s->served), 4);
    feishu_client_free(c);
    server_stop(s);
}

static void an_invalid_token_is_renewed_once(void **state) {
    (void)state;
    const response script[] = {
        R(JSON_OK, TOKEN_OK),
        R("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json",
          "{\"code\":99991663,\"msg\":\"Invalid access token for authorization\"}"),
        R(JSON_OK, "{\"code\":0,\"tenant_access_token\":\"t-second\",\"expire\":7200}"),
        R(JSON_OK, "{\"code\":0,\"data\":{\"message_id\":\"om_ok\"}}"),
    };
    fake_server *s = server_start(script, ARRAY_LEN(script));
    feishu_client *c = client_at(s);
    char *id = NULL;
    assert_int_equal(feishu_message_send(&id, c, "oc_1", "text", "{\"text\":\"x\"}"), 0);
    assert_string_equal(id, "om_ok");
    char *req = last_request(s);
    assert_non_null(strstr(req, "Authorization: Bearer t-second\r\n"));
    free(req);
    free(id);
    feishu_client_free(c);
    server_stop(s);
    /* refused twice: an error, not a loop */
    const response twice[] = {
        R(JSON_OK, TOKEN_OK),
        R("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json",
          "{\"code\":99991663,\"msg\":\"Invalid access token\"}"),
        R(JSON_OK, TOKEN_OK),
        R("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json",
          "{\"code\":99991663,\"msg\":\"Invalid access token\"}"),
    };
    s = server_start(twice, ARRAY_LEN(twice));
    c = client_at(s);
    assert_int_equal(feishu_message_send(&id, c, "oc_1", "text", "{\"text\":\"x\"}"), FAWN_EPERM);
    assert_int_equal(atomic_load(&s->served), 4);
    feishu_client_free(c);
    server_stop(s);
}

static int scratch_fd(void) {
    char path[] = "/tmp/fawn-feishu-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    unlink(path);
    return fd;
}

static void resources_download_into_an_fd_with_a_cap(void **state) {
    (void)state;
    const response script[] = {
        R(JSON_OK, TOKEN_OK),
        R("HTTP/1.1 200 OK\r\nContent-Type: image/png", "\x89PNG-bytes-of-an-image"),
    };
    fake_server *s = server_start(script, ARRAY_LEN(script));
    feishu_client *c = client_at(s);
    int fd = scratch_fd();
    size_t n = 0;
    assert_int_equal(feishu_resource_download(&n, c, "om_1", "img_2", FEISHU_RESOURCE_IMAGE, fd,
                                              FEISHU_DOWNLOAD_MAX),
                     0);
    assert_int_equal(n, 22);
    char buf[64] = {0};
    assert_int_equal(pread(fd, buf, sizeof buf, 0), 22);
    assert_string_equal(buf, "\x89PNG-bytes-of-an-image");
    char *req = last_request(s);
    assert_non_null(strstr(req, "GET /open-apis/im/v1/messages/om_1/resources/img_2?type=image"));
    free(req);
    close(fd);
    /* past the cap: E2BIG */
    fd = scratch_fd();
    assert_int_equal(
        feishu_resource_download(&n, c, "om_1", "file_2", FEISHU_RESOURCE_FILE, fd, 10),
        FAWN_E2BIG);
    assert_int_equal(n, 0);
    req = last_request(s);
    assert_non_null(strstr(req, "resources/file_2?type=file"));
    free(req);
    close(fd);
    feishu_client_free(c);
    server_stop(s);
    /* an error answer is an error, and nothing of it lands in the file */
    const response gone[] = {
        R(JSON_OK, TOKEN_OK),
        R("HTTP/1.1 400 Bad Request\r\nContent-Type: application/json",
          "{\"code\":234003,\"msg\":\"File not in msg.\"}"),
    };
    s = server_start(gone, ARRAY_LEN(gone));
    c = client_at(s);
    fd = scratch_fd();
    assert_int_equal(feishu_resource_download(&n, c, "om_1", "file_2", FEISHU_RESOURCE_FILE, fd,
                                              FEISHU_DOWNLOAD_MAX),
                     FAWN_EPROTO);
    assert_non_null(strstr(fawn_errmsg(), "File not in msg."));
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_size, 0);
    close(fd);
    feishu_client_free(c);
    server_stop(s);
}

static void a_redirect_is_not_followed(void **state) {
    (void)state;
    const response script[] = {
        R("HTTP/1.1 302 Found\r\nLocation: http://169.254.169.254/latest/meta-data", ""),
    };
    fake_server *s = server_start(script, 1);
    feishu_client *c = client_at(s);
    char *t = NULL;
    assert_int_equal(feishu_token_get(&t, c), FAWN_EPROTO);
    assert_int_equal(atomic_load(&s->served), 1);
    feishu_client_free(c);
    server_stop(s);
}

static void images_and_files_upload_within_their_caps(void **state) {
    (void)state;
    const response script[] = {
        R(JSON_OK, TOKEN_OK),
        R(JSON_OK, "{\"code\":0,\"data\":{\"image_key\":\"img_v3_up\"}}"),
        R(JSON_OK, "{\"code\":0,\"data\":{\"file_key\":\"file_v3_up\"}}"),
    };
    fake_server *s = server_start(script, ARRAY_LEN(script));
    feishu_client *c = client_at(s);
    int fd = scratch_fd();
    assert_int_equal(fawn_write_all(fd, "IMAGEDATA", 9), 0);
    char *key = NULL;
    assert_int_equal(feishu_image_upload(&key, c, fd, "chart.png"), 0);
    assert_string_equal(key, "img_v3_up");
    free(key);
    char *req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/im/v1/images HTTP"));
    assert_non_null(strstr(req, "name=\"image_type\"\r\n\r\nmessage\r\n"));
    assert_non_null(strstr(req, "name=\"image\"; filename=\"chart.png\""));
    assert_non_null(strstr(req, "IMAGEDATA"));
    free(req);
    assert_int_equal(feishu_file_upload(&key, c, fd, "report.pdf"), 0);
    assert_string_equal(key, "file_v3_up");
    free(key);
    req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/im/v1/files HTTP"));
    assert_non_null(strstr(req, "name=\"file_type\"\r\n\r\npdf\r\n"));
    assert_non_null(strstr(req, "name=\"file_name\"\r\n\r\nreport.pdf\r\n"));
    free(req);
    int served = atomic_load(&s->served);
    /* past the platform's caps, empty, or a name fawn will not send: nothing leaves */
    assert_int_equal(ftruncate(fd, (off_t)FEISHU_IMAGE_UPLOAD_MAX + 1), 0);
    assert_int_equal(feishu_image_upload(&key, c, fd, "big.png"), FAWN_E2BIG);
    assert_int_equal(ftruncate(fd, (off_t)FEISHU_FILE_UPLOAD_MAX + 1), 0);
    assert_int_equal(feishu_file_upload(&key, c, fd, "big.bin"), FAWN_E2BIG);
    assert_int_equal(ftruncate(fd, 0), 0);
    assert_int_equal(feishu_file_upload(&key, c, fd, "empty.txt"), FAWN_EINVAL);
    assert_int_equal(ftruncate(fd, 4), 0);
    assert_int_equal(feishu_file_upload(&key, c, fd, "a\"\r\nX-Evil: 1"), FAWN_EINVAL);
    assert_int_equal(feishu_file_upload(&key, c, fd, "../x"), FAWN_EINVAL);
    assert_null(key);
    assert_int_equal(atomic_load(&s->served), served);
    close(fd);
    feishu_client_free(c);
    server_stop(s);
}

static void clients_need_a_base_and_credentials(void **state) {
    (void)state;
    feishu_client *c = NULL;
    feishu_client_config bad[] = {
        {.api_base = "ftp://open.feishu.cn", .app_id = "a", .app_secret = "b"},
        {.api_base = "https://open.feishu.cn", .app_id = "", .app_secret = "b"},
        {.api_base = "https://open.feishu.cn", .app_id = "a", .app_secret = NULL},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        assert_int_equal(feishu_client_new(&c, &bad[i]), FAWN_EINVAL);
        assert_null(c);
    }
}

/* ---- settings ---- */

static int settings_of(feishu_settings *out, const char *section, const char *runtime) {
    json_t *a = section ? json_loads(section, 0, NULL) : NULL;
    json_t *b = runtime ? json_loads(runtime, 0, NULL) : NULL;
    assert_true(!section || a);
    assert_true(!runtime || b);
    int r = feishu_settings_read(out, a, b);
    json_decref(a);
    json_decref(b);
    return r;
}

static void settings_are_read_strictly(void **state) {
    (void)state;
    feishu_settings s;
    assert_int_equal(settings_of(&s, NULL, NULL), FAWN_ENOENT);
    assert_int_equal(settings_of(&s,
                                 "{\"enabled\":false,\"app_id\":\"cli_a\",\"app_secret\":"
                                 "\"x\",\"verification_token\":\"v\"}",
                                 NULL),
                     FAWN_ENOENT);
    assert_null(s.app_id);
    assert_int_equal(settings_of(&s,
                                 "{\"app_id\":\"cli_a\",\"app_secret\":\"x\","
                                 "\"verification_token\":\"v\"}",
                                 NULL),
                     0);
    assert_string_equal(s.api_base, FEISHU_DEFAULT_API_BASE);
    assert_true(s.stream_cards);
    assert_null(s.encrypt_key);
    feishu_settings_free(&s);
    /* runtime values win; an empty one clears */
    assert_int_equal(settings_of(&s,
                                 "{\"app_id\":\"cli_a\",\"app_secret\":\"x\","
                                 "\"encrypt_key\":\"old\",\"stream_cards\":false}",
                                 "{\"app_secret\":\"y\",\"verification_token\":\"v2\","
                                 "\"encrypt_key\":\"\",\"api_base\":\"https://open.larksuite."
                                 "com\"}"),
                     0);
    assert_string_equal(s.app_secret, "y");
    assert_string_equal(s.verification_token, "v2");
    assert_null(s.encrypt_key);
    assert_string_equal(s.api_base, "https://open.larksuite.com");
    assert_false(s.stream_cards);
    feishu_settings_free(&s);
    static const struct {
        const char *section, *runtime, *needle;
        int want;
    } bad[] = {
        {"{\"app_id\":\"cli_a\",\"app_secret\":\"x\"}", NULL, "verification_token", FAWN_ECONFIG},
        {"{\"app_id\":\"cli_a\",\"app_secret\":\"x\",\"verification_token\":\"v\","
         "\"api_base\":\"file:///etc/passwd\"}",
         NULL, "api_base", FAWN_ECONFIG},
        {"{\"app_id\":\"cli/../a\",\"app_secret\":\"x\",\"verification_token\":\"v\"}", NULL,
         "app_id", FAWN_ECONFIG},
        {"{\"webhook\":\"x\"}", NULL, "channels.feishu.webhook", FAWN_ECONFIG},
        {"{\"enabled\":\"yes\"}", NULL, "enabled", FAWN_ECONFIG},
        {"{\"app_id\":7}", NULL, "app_id", FAWN_ECONFIG},
        {NULL, "{\"enabled\":true}", "enabled", FAWN_ECONFIG},
        {"{\"app_id\":\"cli_a\",\"app_secret\":\"x\",\"verification_token\":\"v\","
         "\"api_base\":\"http://127.0.0.1:9\"}",
         NULL, "allow_insecure", FAWN_ECONFIG},
        {"{\"app_id\":\"cli_a\",\"app_secret\":\"x\",\"verification_token\":\"v\"}",
         "{\"allow_insecure\":true}", "allow_insecure", FAWN_ECONFIG},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int r = settings_of(&s, bad[i].section, bad[i].runtime);
        if (r != bad[i].want || !strstr(fawn_errmsg(), bad[i].needle))
            fail_msg("case %zu: %d %s", i, r, fawn_errmsg());
        assert_null(s.app_id);
    }
}

/* ---- the adapter (platform.h) ---- */

static ch_platform *adapter_at(const fake_server *s, bool with_key, bool stream_cards) {
    fawn_config cfg = {0};
    char *base = strf("http://127.0.0.1:%u", s ? s->port : 9);
    cfg.channels = json_pack("{s:{s:s,s:s,s:s,s:s,s:b,s:b}}", "feishu", "app_id", "cli_a1",
                             "app_secret", "s3cret", "verification_token", TOKEN, "api_base", base,
                             "stream_cards", stream_cards, "allow_insecure", 1);
    if (with_key)
        json_object_set_new(json_object_get(cfg.channels, "feishu"), "encrypt_key",
                            json_string(KEY));
    ch_platform *p = NULL;
    assert_int_equal(ch_provider_feishu.open(&p, &cfg, NULL), 0);
    json_decref(cfg.channels);
    free(base);
    return p;
}

typedef struct http_result {
    ch_http_response resp;
    ch_inbound **msgs;
    size_t n;
} http_result;

static void http_result_free(http_result *h) {
    for (size_t i = 0; i < h->n; i++)
        ch_inbound_free(h->msgs[i]);
    free(h->msgs);
    free(h->resp.body);
    free(h->resp.content_type);
    memset(h, 0, sizeof *h);
}

/* POSTs body to the adapter, signed with key (NULL: unsigned). */
static http_result post_to(ch_platform *p, const char *method, const char *body, const char *key) {
    char ts[32], sig[65];
    snprintf(ts, sizeof ts, "%lld", (long long)(fawn_wall_ms() / 1000));
    if (key)
        sign(sig, ts, "nonce-1", key, body);
    ch_http_header headers[] = {{"content-type", "application/json"},
                                {"x-lark-request-timestamp", ts},
                                {"x-lark-request-nonce", "nonce-1"},
                                {"x-lark-signature", sig}};
    ch_http_request req = {.method = method,
                           .headers = headers,
                           .n_headers = key ? 4 : 1,
                           .body = body,
                           .body_len = strlen(body)};
    http_result h = {0};
    assert_int_equal(p->ops->handle_http(p, &req, &h.resp, &h.msgs, &h.n), 0);
    return h;
}

static void the_callback_route_answers_as_the_platform_expects(void **state) {
    (void)state;
    ch_platform *p = adapter_at(NULL, true, true);
    char *plain = strf("{\"challenge\":\"ch-1\",\"token\":\"%s\",\"type\":\"url_verification\"}",
                       TOKEN);
    char *body = envelope(KEY, plain);
    http_result h = post_to(p, "POST", body, NULL);
    assert_int_equal(h.resp.status, 200);
    assert_string_equal(h.resp.body, "{\"challenge\":\"ch-1\"}");
    assert_int_equal(h.n, 0);
    http_result_free(&h);
    free(body);
    free(plain);
    /* a text message, signed and encrypted: one normalized message */
    plain = message_event(TOKEN, "text", "{\"text\":\"@_user_1 what is 2+2?\"}", "user");
    body = envelope(KEY, plain);
    h = post_to(p, "POST", body, KEY);
    assert_int_equal(h.resp.status, 200);
    assert_int_equal(h.n, 1);
    ch_inbound *m = h.msgs[0];
    assert_string_equal(m->event_id, "5e3702a84e847582be8db7fb73283c02");
    assert_string_equal(m->message_id, "om_5ce6d572455d361153b7cb51da133945");
    assert_string_equal(m->chat_id, "oc_5ce6d572455d361153b7xx51da133945");
    assert_string_equal(m->sender_id, "ou_7d8a6e6df7621556ce0d21922b676706");
    assert_true(m->is_group);
    assert_string_equal(m->text, "what is 2+2?");
    assert_int_equal(m->n_attachments, 0);
    http_result_free(&h);
    /* the same, unsigned or signed with another key: 401 and nothing */
    h = post_to(p, "POST", body, NULL);
    assert_int_equal(h.resp.status, 401);
    assert_int_equal(h.n, 0);
    http_result_free(&h);
    h = post_to(p, "POST", body, "guess");
    assert_int_equal(h.resp.status, 401);
    assert_int_equal(h.n, 0);
    http_result_free(&h);
    h = post_to(p, "POST", plain, KEY); /* signed, but not encrypted */
    assert_int_equal(h.resp.status, 401);
    http_result_free(&h);
    free(body);
    free(plain);
    /* a file and an image as attachments; a type fawn cannot read as a note */
    plain = message_event(TOKEN, "file", "{\"file_key\":\"file_v3_1\",\"file_name\":\"a.pdf\"}",
                          "user");
    body = envelope(KEY, plain);
    h = post_to(p, "POST", body, KEY);
    assert_int_equal(h.n, 1);
    assert_int_equal(h.msgs[0]->n_attachments, 1);
    assert_int_equal(h.msgs[0]->attachments[0].kind, CH_ATTACH_FILE);
    assert_string_equal(h.msgs[0]->attachments[0].ref, "file_v3_1");
    assert_string_equal(h.msgs[0]->attachments[0].name, "a.pdf");
    assert_string_equal(h.msgs[0]->text, "");
    http_result_free(&h);
    free(body);
    free(plain);
    plain = message_event(TOKEN, "sticker", "{\"file_key\":\"f\"}", "user");
    body = envelope(KEY, plain);
    h = post_to(p, "POST", body, KEY);
    assert_int_equal(h.n, 1);
    assert_non_null(strstr(h.msgs[0]->text, "sticker message"));
    http_result_free(&h);
    free(body);
    free(plain);
    /* the bot's own message: acknowledged, nothing to run */
    plain = message_event(TOKEN, "text", "{\"text\":\"echo\"}", "app");
    body = envelope(KEY, plain);
    h = post_to(p, "POST", body, KEY);
    assert_int_equal(h.resp.status, 200);
    assert_int_equal(h.n, 0);
    http_result_free(&h);
    /* another method, and a body that is not JSON */
    h = post_to(p, "GET", body, KEY);
    assert_int_equal(h.resp.status, 405);
    http_result_free(&h);
    h = post_to(p, "POST", "{not json", KEY);
    assert_int_equal(h.resp.status, 400);
    assert_int_equal(h.n, 0);
    http_result_free(&h);
    free(body);
    free(plain);
    p->ops->destroy(p);
}

static void replies_stream_as_a_card_and_files_go_back(void **state) {
    (void)state;
    const response script[] = {
        R(JSON_OK, TOKEN_OK),
        R(JSON_OK, "{\"code\":0,\"data\":{\"message_id\":\"om_card\"}}"),
        R(JSON_OK, "{\"code\":0,\"data\":{}}"),
        R(JSON_OK, "{\"code\":0,\"data\":{\"file_key\":\"file_up\"}}"),
        R(JSON_OK, "{\"code\":0,\"data\":{\"message_id\":\"om_file\"}}"),
        R(JSON_OK, "{\"code\":0,\"data\":{\"message_id\":\"om_text\"}}"),
    };
    fake_server *s = server_start(script, ARRAY_LEN(script));
    ch_platform *p = adapter_at(s, false, true);
    ch_target to = {.chat_id = "oc_c1", .sender_id = "ou_u1", .message_id = "om_in1"};
    char *ref = NULL;
    assert_int_equal(p->ops->send_text(p, &to, "Working...", true, true, &ref), 0);
    assert_string_equal(ref, "om_card");
    char *req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/im/v1/messages/om_in1/reply HTTP"));
    assert_non_null(strstr(req, "interactive"));
    free(req);
    assert_int_equal(p->ops->update_text(p, &to, ref, "**4**", true), 0);
    req = last_request(s);
    assert_non_null(strstr(req, "PATCH /open-apis/im/v1/messages/om_card HTTP"));
    assert_non_null(strstr(req, "**4**"));
    assert_null(strstr(req, "working")); /* final: the streaming note is gone */
    free(req);
    free(ref);
    int fd = scratch_fd();
    assert_int_equal(fawn_write_all(fd, "col1,col2\n", 10), 0);
    assert_int_equal(p->ops->send_file(p, &to, CH_ATTACH_FILE, "data.csv", fd, 10), 0);
    req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/im/v1/messages/om_in1/reply HTTP"));
    assert_non_null(strstr(req, "file_up"));
    free(req);
    assert_int_equal(p->ops->send_file(p, &to, CH_ATTACH_FILE, "huge.bin", fd,
                                       (uint64_t)FEISHU_FILE_UPLOAD_MAX + 1),
                     FAWN_E2BIG);
    close(fd);
    ch_target chat = {.chat_id = "oc_c1", .sender_id = "ou_u1"};
    assert_int_equal(p->ops->send_text(p, &chat, "plain words", false, false, NULL), 0);
    req = last_request(s);
    assert_non_null(strstr(req, "POST /open-apis/im/v1/messages?receive_id_type=chat_id HTTP"));
    assert_non_null(strstr(req, "plain words"));
    free(req);
    assert_int_equal(atomic_load(&s->served), 6);
    p->ops->destroy(p);
    server_stop(s);
}

static void attachments_download_through_the_adapter(void **state) {
    (void)state;
    const response script[] = {
        R(JSON_OK, TOKEN_OK),
        R("HTTP/1.1 200 OK\r\nContent-Type: application/octet-stream", "0123456789abcdef"),
    };
    fake_server *s = server_start(script, ARRAY_LEN(script));
    ch_platform *p = adapter_at(s, false, true);
    ch_inbound *m = NULL;
    assert_int_equal(ch_inbound_new(&m), 0);
    m->message_id = strdup("om_in9");
    assert_int_equal(ch_inbound_add_attachment(m, CH_ATTACH_IMAGE, NULL, "img_k9"), 0);
    int fd = scratch_fd();
    uint64_t size = 0;
    assert_int_equal(p->ops->download(p, m, &m->attachments[0], fd, 1024, &size), 0);
    assert_int_equal(size, 16);
    char *req = last_request(s);
    assert_non_null(
        strstr(req, "GET /open-apis/im/v1/messages/om_in9/resources/img_k9?type=image"));
    free(req);
    close(fd);
    fd = scratch_fd();
    assert_int_equal(p->ops->download(p, m, &m->attachments[0], fd, 8, &size), FAWN_E2BIG);
    assert_int_equal(size, 0);
    close(fd);
    ch_inbound_free(m);
    p->ops->destroy(p);
    server_stop(s);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(signatures_are_checked_in_their_window),
        cmocka_unit_test(bodies_decrypt_only_exactly),
        cmocka_unit_test(url_verification_is_answered_with_its_challenge),
        cmocka_unit_test(signed_encrypted_events_are_read),
        cmocka_unit_test(forged_callbacks_are_refused),
        cmocka_unit_test(message_types_are_read),
        cmocka_unit_test(bots_and_other_events_are_ignored),
        cmocka_unit_test(hostile_events_are_refused),
        cmocka_unit_test(answers_map_to_errors),
        cmocka_unit_test(token_is_fetched_once_and_cached),
        cmocka_unit_test(messages_are_sent_replied_and_updated),
        cmocka_unit_test(an_invalid_token_is_renewed_once),
        cmocka_unit_test(resources_download_into_an_fd_with_a_cap),
        cmocka_unit_test(a_redirect_is_not_followed),
        cmocka_unit_test(images_and_files_upload_within_their_caps),
        cmocka_unit_test(clients_need_a_base_and_credentials),
        cmocka_unit_test(settings_are_read_strictly),
        cmocka_unit_test(the_callback_route_answers_as_the_platform_expects),
        cmocka_unit_test(replies_stream_as_a_card_and_files_go_back),
        cmocka_unit_test(attachments_download_through_the_adapter),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
