/* Feishu/Lark event callbacks: authentication, decryption and the event.
 *
 * feishu_callback_parse runs, in order:
 *   1. size bound (FEISHU_CALLBACK_MAX);
 *   2. the signature, when the app has an encrypt key and the request is
 *      signed (feishu_signature_check);
 *   3. the envelope: {"encrypt": ...} is decrypted (feishu_decrypt); a
 *      plaintext body is refused when the app has an encrypt key;
 *   4. the event (feishu_event_read);
 *   5. an unsigned request is accepted with an encrypt key only for a URL
 *      verification (the platform does not sign those);
 *   6. the verification token, compared in constant time. */
#include "channels/feishu_internal.h"

#include <ctype.h>
#include <string.h>

#include <openssl/evp.h>
#include <sodium.h>

#include "base/json.h"

/* A challenge is a UUID; 256 bounds what is echoed back. */
#define FEISHU_CHALLENGE_MAX 256
/* A mention placeholder is "@_user_N" or "@_all". */
#define FEISHU_MENTION_KEY_MAX 32
/* Digits of a Unix timestamp in seconds, with room to spare. */
#define FEISHU_TIMESTAMP_DIGITS_MAX 12
/* AES block and IV size. */
#define FEISHU_AES_BLOCK 16

static void jsonp_decref(json_t **j) { json_decref(*j); }
#define _cleanup_json_ __attribute__((cleanup(jsonp_decref)))

bool feishu_id_valid(const char *s) {
    if (!s)
        return false;
    size_t n = strnlen(s, FEISHU_ID_MAX + 1);
    if (n == 0 || n > FEISHU_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '_' && s[i] != '-')
            return false;
    return true;
}

/* ---- signature ---- */

static int timestamp_parse(int64_t *out, const char *s) {
    *out = 0;
    size_t n = s ? strnlen(s, FEISHU_TIMESTAMP_DIGITS_MAX + 1) : 0;
    if (n == 0 || n > FEISHU_TIMESTAMP_DIGITS_MAX)
        return fawn_err(FAWN_EPERM, "feishu callback: missing or malformed request timestamp");
    int64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9')
            return fawn_err(FAWN_EPERM, "feishu callback: malformed request timestamp");
        v = v * 10 + (s[i] - '0');
    }
    *out = v;
    return 0;
}

int feishu_signature_check(const feishu_request *req, const char *encrypt_key) {
    int64_t ts = 0;
    int r = timestamp_parse(&ts, req->timestamp);
    if (r < 0)
        return r;
    if (ts < req->now_s - FEISHU_SIGNATURE_WINDOW_S || ts > req->now_s + FEISHU_SIGNATURE_WINDOW_S)
        return fawn_err(FAWN_EPERM, "feishu callback: request timestamp outside the %d s window",
                        FEISHU_SIGNATURE_WINDOW_S);
    if (!req->nonce || !req->signature || strlen(req->signature) != 64)
        return fawn_err(FAWN_EPERM, "feishu callback: missing nonce or signature");
    crypto_hash_sha256_state st;
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_init(&st);
    crypto_hash_sha256_update(&st, (const unsigned char *)req->timestamp, strlen(req->timestamp));
    crypto_hash_sha256_update(&st, (const unsigned char *)req->nonce, strlen(req->nonce));
    crypto_hash_sha256_update(&st, (const unsigned char *)encrypt_key, strlen(encrypt_key));
    crypto_hash_sha256_update(&st, (const unsigned char *)req->body, req->body_len);
    crypto_hash_sha256_final(&st, digest);
    char want[65], got[65];
    sodium_bin2hex(want, sizeof want, digest, sizeof digest);
    for (size_t i = 0; i < 64; i++)
        got[i] = (char)tolower((unsigned char)req->signature[i]);
    got[64] = '\0';
    if (sodium_memcmp(want, got, 64) != 0)
        return fawn_err(FAWN_EPERM, "feishu callback: signature does not match");
    return 0;
}

/* ---- decryption ---- */

static int aes_decrypt(unsigned char *out, int *out_len, const unsigned char key[32],
                       const unsigned char *data, size_t len) {
    EVP_CIPHER_CTX *ctx = EVP_CIPHER_CTX_new();
    if (!ctx)
        return fawn_err(FAWN_ENOMEM, "out of memory decrypting a feishu callback");
    int n = 0, tail = 0;
    /* EVP_DecryptFinal_ex checks that the padding is exact PKCS#7. */
    bool ok = EVP_DecryptInit_ex(ctx, EVP_aes_256_cbc(), NULL, key, data) == 1 &&
              EVP_DecryptUpdate(ctx, out, &n, data + FEISHU_AES_BLOCK,
                                (int)(len - FEISHU_AES_BLOCK)) == 1 &&
              EVP_DecryptFinal_ex(ctx, out + n, &tail) == 1;
    EVP_CIPHER_CTX_free(ctx);
    *out_len = ok ? n + tail : 0;
    return ok ? 0
              : fawn_err(FAWN_EPERM, "feishu callback: the body does not decrypt with the "
                                     "configured encrypt key");
}

int feishu_decrypt(char **out, size_t *out_len, const char *encrypt_key, const char *b64) {
    *out = NULL;
    *out_len = 0;
    size_t b64_len = strlen(b64);
    if (b64_len > FEISHU_CALLBACK_MAX)
        return fawn_err(FAWN_E2BIG, "feishu callback: encrypted body larger than %zu bytes",
                        FEISHU_CALLBACK_MAX);
    size_t cap = b64_len / 4 * 3 + 3;
    _cleanup_free_ unsigned char *raw = malloc(cap);
    _cleanup_free_ unsigned char *plain = malloc(cap + FEISHU_AES_BLOCK);
    if (!raw || !plain)
        return fawn_err(FAWN_ENOMEM, "out of memory decrypting a feishu callback");
    size_t raw_len = 0;
    if (sodium_base642bin(raw, cap, b64, b64_len, NULL, &raw_len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0)
        return fawn_err(FAWN_EPERM, "feishu callback: the encrypted body is not base64");
    if (raw_len < 2 * FEISHU_AES_BLOCK || raw_len % FEISHU_AES_BLOCK != 0)
        return fawn_err(FAWN_EPERM, "feishu callback: the encrypted body is not an IV and "
                                    "whole AES blocks");
    unsigned char key[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(key, (const unsigned char *)encrypt_key, strlen(encrypt_key));
    int n = 0;
    int r = aes_decrypt(plain, &n, key, raw, raw_len);
    sodium_memzero(key, sizeof key);
    if (r < 0)
        return r;
    plain[n] = '\0';
    *out_len = (size_t)n;
    *out = (char *)steal_ptr(plain);
    return 0;
}

/* ---- event ---- */

/* A malloc'd copy of obj.key when it is a string (else NULL, not an error
 * unless required). valid (may be NULL) checks it. */
static int string_copy(char **out, const json_t *obj, const char *key, bool required,
                       bool (*valid)(const char *), const char *what) {
    *out = NULL;
    const char *s = NULL;
    int r = fjson_get_string(&s, obj, key, required);
    if (r < 0)
        return fawn_err(FAWN_EINVAL, "feishu event: %s: %s", what, fawn_errmsg());
    if (!s)
        return 0;
    if (valid && !valid(s))
        return fawn_err(FAWN_EINVAL, "feishu event: %s is not a valid id", what);
    *out = strdup(s);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory reading a feishu event");
}

static const json_t *object_at(const json_t *obj, const char *key) {
    const json_t *v = json_object_get(obj, key);
    return json_is_object(v) ? v : NULL;
}

/* Removes every occurrence of key from text (in place), but not where it is
 * the start of a longer placeholder ("@_user_1" in "@_user_12"). */
static void text_remove(char *text, const char *key) {
    size_t k = strlen(key);
    char *at = text;
    while ((at = strstr(at, key)) != NULL) {
        if (isalnum((unsigned char)at[k]) || at[k] == '_')
            at += k;
        else
            memmove(at, at + k, strlen(at + k) + 1);
    }
}

static void text_trim(char *text) {
    size_t n = strlen(text), start = 0;
    while (start < n && isspace((unsigned char)text[start]))
        start++;
    while (n > start && isspace((unsigned char)text[n - 1]))
        n--;
    memmove(text, text + start, n - start);
    text[n - start] = '\0';
}

/* Strips the @-mention placeholders ("@_user_1") the platform puts in text. */
static void mentions_strip(char *text, const json_t *mentions) {
    if (!json_is_array(mentions))
        return;
    size_t n = json_array_size(mentions);
    for (size_t i = 0; i < n && i < FEISHU_MAX_MENTIONS; i++) {
        const char *key = json_string_value(json_object_get(json_array_get(mentions, i), "key"));
        if (key && key[0] == '@' &&
            strnlen(key, FEISHU_MENTION_KEY_MAX + 1) <= FEISHU_MENTION_KEY_MAX)
            text_remove(text, key);
    }
    /* The platform writes "@_all" without listing it. */
    text_remove(text, "@_all");
}

static int resource_add(feishu_message *m, enum feishu_resource_kind kind, const char *key,
                        const char *name) {
    if (m->n_resources >= FEISHU_MAX_RESOURCES)
        return fawn_err(FAWN_E2BIG, "feishu event: more than %d attachments in one message",
                        FEISHU_MAX_RESOURCES);
    if (!feishu_id_valid(key))
        return fawn_err(FAWN_EINVAL, "feishu event: an attachment key is not a valid id");
    feishu_resource *res = &m->resources[m->n_resources];
    res->kind = kind;
    res->key = strdup(key);
    res->name = name ? strndup(name, FEISHU_NAME_MAX) : NULL;
    m->n_resources++;
    if (!res->key || (name && !res->name))
        return fawn_err(FAWN_ENOMEM, "out of memory reading a feishu event");
    return 0;
}

static int text_append(fbuf *b, const char *s) {
    if (!s || !*s)
        return 0;
    int r = fbuf_append(b, s, strlen(s));
    return r == FAWN_E2BIG
               ? fawn_err(FAWN_E2BIG, "feishu event: text longer than %zu bytes", FEISHU_TEXT_MAX)
               : r;
}

/* One element of a rich-text line: text and links as text, images and
 * media as attachments; mentions and emoji are left out. */
static int post_element(feishu_message *m, fbuf *text, const json_t *el) {
    const char *tag = json_string_value(json_object_get(el, "tag"));
    if (!tag)
        return 0;
    if (!strcmp(tag, "text") || !strcmp(tag, "a") || !strcmp(tag, "code_block") ||
        !strcmp(tag, "md"))
        return text_append(text, json_string_value(json_object_get(el, "text")));
    if (!strcmp(tag, "img"))
        return resource_add(m, FEISHU_RESOURCE_IMAGE,
                            json_string_value(json_object_get(el, "image_key")), NULL);
    if (!strcmp(tag, "media"))
        return resource_add(m, FEISHU_RESOURCE_FILE,
                            json_string_value(json_object_get(el, "file_key")), NULL);
    return 0;
}

/* The post body: {"title", "content": [[element...]...]}, possibly under a
 * locale key ({"zh_cn": {...}}). */
static const json_t *post_body(const json_t *content) {
    if (json_object_get(content, "content"))
        return content;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)content, k, v) {
        if (json_is_object(v) && json_object_get(v, "content"))
            return v;
    }
    return NULL;
}

static int post_read(feishu_message *m, fbuf *text, const json_t *content) {
    const json_t *body = post_body(content);
    if (!body)
        return fawn_err(FAWN_EINVAL, "feishu event: a post message without content");
    int r = text_append(text, json_string_value(json_object_get(body, "title")));
    const json_t *lines = json_object_get(body, "content");
    size_t seen = 0, nl = json_array_size(lines);
    for (size_t i = 0; r == 0 && i < nl; i++) {
        const json_t *line = json_array_get(lines, i);
        if (text->len > 0)
            r = text_append(text, "\n");
        for (size_t j = 0; r == 0 && j < json_array_size(line); j++) {
            if (++seen > FEISHU_MAX_POST_ELEMENTS)
                return fawn_err(FAWN_E2BIG, "feishu event: a post of more than %d elements",
                                FEISHU_MAX_POST_ELEMENTS);
            r = post_element(m, text, json_array_get(line, j));
        }
    }
    return r;
}

static int content_by_type(feishu_message *m, fbuf *text, const json_t *c) {
    switch (m->type) {
    case FEISHU_MSG_TEXT: return text_append(text, json_string_value(json_object_get(c, "text")));
    case FEISHU_MSG_IMAGE:
        return resource_add(m, FEISHU_RESOURCE_IMAGE,
                            json_string_value(json_object_get(c, "image_key")), NULL);
    case FEISHU_MSG_FILE:
        return resource_add(m, FEISHU_RESOURCE_FILE,
                            json_string_value(json_object_get(c, "file_key")),
                            json_string_value(json_object_get(c, "file_name")));
    case FEISHU_MSG_POST: return post_read(m, text, c);
    case FEISHU_MSG_OTHER: return 0;
    }
    return 0;
}

/* The JSON-in-a-string `content`, read by message type. */
static int content_read(feishu_message *m, const json_t *message) {
    const char *raw = json_string_value(json_object_get(message, "content"));
    if (!raw)
        return fawn_err(FAWN_EINVAL, "feishu event: message.content is not a string");
    _cleanup_json_ json_t *c = NULL;
    if (m->type != FEISHU_MSG_OTHER && fjson_parse_object(&c, raw, strlen(raw)) < 0)
        return fawn_err(FAWN_EINVAL, "feishu event: message.content is not a JSON object");
    fbuf text = {.limit = FEISHU_TEXT_MAX};
    int r = content_by_type(m, &text, c);
    if (r < 0) {
        fbuf_free(&text);
        return r;
    }
    m->text = text.data ? fbuf_steal(&text) : strdup("");
    if (!m->text)
        return fawn_err(FAWN_ENOMEM, "out of memory reading a feishu event");
    mentions_strip(m->text, json_object_get(message, "mentions"));
    text_trim(m->text);
    return 0;
}

static const struct {
    const char *name;
    enum feishu_msg_type type;
} msg_types[] = {{"text", FEISHU_MSG_TEXT},
                 {"image", FEISHU_MSG_IMAGE},
                 {"file", FEISHU_MSG_FILE},
                 {"post", FEISHU_MSG_POST}};

static int message_kind(feishu_message *m, const json_t *message) {
    const char *chat = json_string_value(json_object_get(message, "chat_type"));
    if (!chat)
        return fawn_err(FAWN_EINVAL, "feishu event: message.chat_type missing");
    /* p2p is a direct chat; every other kind (group, topic_group) is a group. */
    m->chat_type = !strcmp(chat, "p2p") ? FEISHU_CHAT_P2P : FEISHU_CHAT_GROUP;
    int r = string_copy(&m->type_name, message, "message_type", true, feishu_id_valid,
                        "message.message_type");
    if (r < 0)
        return r;
    m->type = FEISHU_MSG_OTHER;
    for (size_t i = 0; i < ARRAY_LEN(msg_types); i++)
        if (!strcmp(m->type_name, msg_types[i].name))
            m->type = msg_types[i].type;
    return 0;
}

/* event of an im.message.receive_v1; a message from a bot (this one's own
 * included) is ignored, so the app never answers itself. */
static int message_read(feishu_callback *cb, const json_t *event) {
    const json_t *sender = object_at(event, "sender");
    const json_t *message = object_at(event, "message");
    if (!sender || !message)
        return fawn_err(FAWN_EINVAL, "feishu event: event.sender or event.message missing");
    const char *sender_type = json_string_value(json_object_get(sender, "sender_type"));
    if (sender_type && strcmp(sender_type, "user") != 0) {
        cb->kind = FEISHU_CALLBACK_IGNORED;
        return 0;
    }
    feishu_message *m = &cb->msg;
    int r = string_copy(&m->sender_open_id, object_at(sender, "sender_id"), "open_id", true,
                        feishu_id_valid, "sender.sender_id.open_id");
    if (r == 0)
        r = string_copy(&m->message_id, message, "message_id", true, feishu_id_valid,
                        "message.message_id");
    if (r == 0)
        r = string_copy(&m->chat_id, message, "chat_id", true, feishu_id_valid, "message.chat_id");
    if (r == 0)
        r = message_kind(m, message);
    if (r == 0)
        r = content_read(m, message);
    if (r == 0)
        cb->kind = FEISHU_CALLBACK_MESSAGE;
    return r;
}

static bool challenge_valid(const char *s) {
    return s && *s && strnlen(s, FEISHU_CHALLENGE_MAX + 1) <= FEISHU_CHALLENGE_MAX;
}

/* Schema 2.0: {schema, header: {event_id, event_type, token, ...}, event}. */
static int schema2_read(feishu_callback *cb, char **token, const json_t *root) {
    const json_t *header = object_at(root, "header");
    if (!header)
        return fawn_err(FAWN_EINVAL, "feishu event: header missing");
    int r = string_copy(token, header, "token", false, NULL, "header.token");
    if (r == 0)
        r = string_copy(&cb->event_type, header, "event_type", true, NULL, "header.event_type");
    if (r < 0)
        return r;
    cb->kind = FEISHU_CALLBACK_IGNORED;
    if (strcmp(cb->event_type, "im.message.receive_v1") != 0)
        return 0;
    r = string_copy(&cb->msg.event_id, header, "event_id", true, feishu_id_valid,
                    "header.event_id");
    const json_t *event = object_at(root, "event");
    if (r == 0 && !event)
        r = fawn_err(FAWN_EINVAL, "feishu event: event missing");
    return r < 0 ? r : message_read(cb, event);
}

static int event_root(feishu_callback *cb, char **token, const json_t *root) {
    const char *type = json_string_value(json_object_get(root, "type"));
    if (type && !strcmp(type, "url_verification")) {
        int r = string_copy(&cb->challenge, root, "challenge", true, challenge_valid, "challenge");
        if (r == 0)
            r = string_copy(token, root, "token", false, NULL, "token");
        cb->kind = FEISHU_CALLBACK_CHALLENGE;
        return r;
    }
    const char *schema = json_string_value(json_object_get(root, "schema"));
    if (schema && !strcmp(schema, "2.0"))
        return schema2_read(cb, token, root);
    /* Schema 1.0 events are not subscribed to; still authenticated below. */
    cb->kind = FEISHU_CALLBACK_IGNORED;
    return string_copy(token, root, "token", false, NULL, "token");
}

int feishu_event_read(feishu_callback *out, char **token, const char *json, size_t len) {
    memset(out, 0, sizeof *out);
    *token = NULL;
    _cleanup_json_ json_t *root = NULL;
    if (fjson_parse_object(&root, json, len) < 0)
        return fawn_err(FAWN_EINVAL, "feishu event: not a JSON object");
    int r = event_root(out, token, root);
    if (r < 0) {
        feishu_callback_free(out);
        free(*token);
        *token = NULL;
    }
    return r;
}

void feishu_callback_free(feishu_callback *cb) {
    feishu_message *m = &cb->msg;
    free(cb->challenge);
    free(cb->event_type);
    free(m->event_id);
    free(m->sender_open_id);
    free(m->chat_id);
    free(m->message_id);
    free(m->type_name);
    free(m->text);
    for (size_t i = 0; i < m->n_resources; i++) {
        free(m->resources[i].key);
        free(m->resources[i].name);
    }
    memset(cb, 0, sizeof *cb);
}

/* ---- the whole callback ---- */

/* Constant time whatever the lengths: both sides are hashed first. */
static bool token_equal(const char *a, const char *b) {
    unsigned char ha[crypto_hash_sha256_BYTES], hb[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(ha, (const unsigned char *)a, strlen(a));
    crypto_hash_sha256(hb, (const unsigned char *)b, strlen(b));
    return sodium_memcmp(ha, hb, sizeof ha) == 0;
}

/* The plaintext event: the decrypted `encrypt` field, or the body itself. */
static int envelope_open(char **out, size_t *out_len, const feishu_request *req,
                         const char *encrypt_key) {
    *out = NULL;
    *out_len = 0;
    _cleanup_json_ json_t *outer = NULL;
    if (fjson_parse_object(&outer, req->body, req->body_len) < 0)
        return fawn_err(FAWN_EINVAL, "feishu callback: the body is not a JSON object");
    const json_t *enc = json_object_get(outer, "encrypt");
    if (enc && !json_is_string(enc))
        return fawn_err(FAWN_EINVAL, "feishu callback: encrypt is not a string");
    if (enc && !*encrypt_key)
        return fawn_err(FAWN_EPERM, "feishu callback: an encrypted body, but "
                                    "channels.feishu.encrypt_key is not set");
    if (!enc && *encrypt_key)
        return fawn_err(FAWN_EPERM, "feishu callback: a plaintext body, but the app has an "
                                    "encrypt key");
    if (enc) {
        int r = feishu_decrypt(out, out_len, encrypt_key, json_string_value(enc));
        /* A wrong key passes the padding check one time in 256 and yields
         * noise: what is not a JSON object did not come from the platform. */
        _cleanup_json_ json_t *inner = NULL;
        if (r == 0 && fjson_parse_object(&inner, *out, *out_len) < 0) {
            free(*out);
            *out = NULL;
            *out_len = 0;
            r = fawn_err(FAWN_EPERM, "feishu callback: the body does not decrypt with the "
                                     "configured encrypt key");
        }
        return r;
    }
    *out = strndup(req->body, req->body_len);
    *out_len = req->body_len;
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory reading a feishu callback");
}

static int origin_check(const feishu_callback *cb, const char *token, const feishu_secrets *s,
                        bool has_key, bool is_signed) {
    if (has_key && !is_signed && cb->kind != FEISHU_CALLBACK_CHALLENGE)
        return fawn_err(FAWN_EPERM, "feishu callback: an event without a signature");
    if (!token || !token_equal(token, s->verification_token))
        return fawn_err(FAWN_EPERM, "feishu callback: the verification token does not match");
    return 0;
}

int feishu_callback_parse(feishu_callback *out, const feishu_secrets *secrets,
                          const feishu_request *req) {
    memset(out, 0, sizeof *out);
    const char *key = secrets->encrypt_key ? secrets->encrypt_key : "";
    if (!secrets->verification_token || !*secrets->verification_token)
        return fawn_err(FAWN_EPERM, "feishu callback: no verification token configured");
    if (req->body_len > FEISHU_CALLBACK_MAX)
        return fawn_err(FAWN_E2BIG, "feishu callback: body larger than %zu bytes",
                        FEISHU_CALLBACK_MAX);
    bool has_key = *key != '\0', is_signed = req->signature != NULL;
    int r = 0;
    if (has_key && is_signed && (r = feishu_signature_check(req, key)) < 0)
        return r;
    _cleanup_free_ char *plain = NULL;
    _cleanup_free_ char *token = NULL;
    size_t plain_len = 0;
    if ((r = envelope_open(&plain, &plain_len, req, key)) < 0 ||
        (r = feishu_event_read(out, &token, plain, plain_len)) < 0)
        return r;
    if ((r = origin_check(out, token, secrets, has_key, is_signed)) < 0)
        feishu_callback_free(out);
    return r;
}

int feishu_challenge_answer(char **out, const char *challenge) {
    *out = NULL;
    _cleanup_json_ json_t *o = json_pack("{s:s}", "challenge", challenge);
    *out = o ? fjson_dump(o) : NULL;
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory answering a feishu challenge");
}
