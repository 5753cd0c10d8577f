#include "auth/auth.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "base/json.h"

/* The only header fawn issues or accepts. */
static const char jwt_header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
/* A payload (four integer claims) is far smaller than this. */
#define JWT_PAYLOAD_MAX 1024
#define B64_VARIANT sodium_base64_VARIANT_URLSAFE_NO_PADDING

int auth_password_hash(char out[AUTH_HASH_MAX], const char *password) {
    size_t n = strlen(password);
    if (n < AUTH_PASSWORD_MIN || n > AUTH_PASSWORD_MAX)
        return fawn_err(FAWN_EINVAL, "a password has %d to %d characters", AUTH_PASSWORD_MIN,
                        AUTH_PASSWORD_MAX);
    char hash[crypto_pwhash_STRBYTES];
    if (sodium_init() < 0)
        return fawn_err(FAWN_EIO, "libsodium could not be initialized");
    if (crypto_pwhash_str_alg(hash, password, n, crypto_pwhash_OPSLIMIT_INTERACTIVE,
                              crypto_pwhash_MEMLIMIT_INTERACTIVE, crypto_pwhash_ALG_ARGON2ID13) != 0)
        return fawn_err(FAWN_ENOMEM, "not enough memory to hash a password");
    if (strlen(hash) >= AUTH_HASH_MAX)
        return fawn_err(FAWN_EIO, "password hash longer than expected");
    strcpy(out, hash);
    return 0;
}

int auth_password_verify(const char *hash, const char *password) {
    size_t n = strlen(password);
    if (strlen(hash) >= crypto_pwhash_STRBYTES || n > AUTH_PASSWORD_MAX ||
        crypto_pwhash_str_verify(hash, password, n) != 0)
        return fawn_err(FAWN_EPERM, "wrong password");
    return 0;
}

/* Appends the base64url (no padding) form of data to b. */
static int append_b64(fbuf *b, const void *data, size_t n) {
    size_t cap = sodium_base64_encoded_len(n, B64_VARIANT);
    char *tmp = malloc(cap);
    if (!tmp)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sodium_bin2base64(tmp, cap, data, n, B64_VARIANT);
    int r = fbuf_append(b, tmp, strlen(tmp));
    free(tmp);
    return r;
}

static void sign(unsigned char mac[crypto_auth_hmacsha256_BYTES],
                 const unsigned char secret[AUTH_SECRET_BYTES], const char *data, size_t n) {
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, secret, AUTH_SECRET_BYTES);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)data, n);
    crypto_auth_hmacsha256_final(&st, mac);
}

int auth_jwt_sign(char **out, const unsigned char secret[AUTH_SECRET_BYTES], const auth_claims *c) {
    char payload[JWT_PAYLOAD_MAX];
    snprintf(payload, sizeof payload, "{\"sub\":\"%lld\",\"ver\":%lld,\"iat\":%lld,\"exp\":%lld}",
             (long long)c->user_id, (long long)c->token_version, (long long)c->issued_at,
             (long long)c->expires_at);
    fbuf b = {.limit = AUTH_TOKEN_MAX};
    unsigned char mac[crypto_auth_hmacsha256_BYTES];
    int r = append_b64(&b, jwt_header, strlen(jwt_header));
    if (r == 0 && (r = fbuf_append(&b, ".", 1)) == 0)
        r = append_b64(&b, payload, strlen(payload));
    if (r == 0) {
        sign(mac, secret, b.data, b.len);
        if ((r = fbuf_append(&b, ".", 1)) == 0)
            r = append_b64(&b, mac, sizeof mac);
    }
    if (r < 0) {
        fbuf_free(&b);
        return r;
    }
    *out = fbuf_steal(&b);
    return *out ? 0 : FAWN_ENOMEM;
}

static int invalid(void) { return fawn_err(FAWN_EPERM, "token_invalid"); }

/* Decodes base64url text[0..n) into out (size outsz); returns the length or -1. */
static ssize_t b64_decode(unsigned char *out, size_t outsz, const char *text, size_t n) {
    size_t len = 0;
    if (sodium_base642bin(out, outsz, text, n, NULL, &len, NULL, B64_VARIANT) != 0)
        return -1;
    return (ssize_t)len;
}

static bool get_int(int64_t *out, const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        return false;
    *out = json_integer_value(v);
    return true;
}

static int parse_claims(auth_claims *c, const char *payload, size_t n) {
    json_t *o = NULL;
    if (fjson_parse_object(&o, payload, n) < 0)
        return invalid();
    const char *sub = json_string_value(json_object_get(o, "sub"));
    char *end = NULL;
    long long id = sub && *sub ? strtoll(sub, &end, 10) : 0;
    bool ok = sub && *sub && *end == '\0' && id > 0 && get_int(&c->token_version, o, "ver") &&
              get_int(&c->issued_at, o, "iat") && get_int(&c->expires_at, o, "exp");
    c->user_id = id;
    json_decref(o);
    return ok ? 0 : invalid();
}

int auth_jwt_verify(auth_claims *out, const unsigned char secret[AUTH_SECRET_BYTES],
                    const char *token, int64_t now) {
    size_t n = strnlen(token, AUTH_TOKEN_MAX + 1);
    const char *dot1 = memchr(token, '.', n);
    const char *dot2 = dot1 ? memchr(dot1 + 1, '.', n - (size_t)(dot1 + 1 - token)) : NULL;
    if (n > AUTH_TOKEN_MAX || !dot2 || memchr(dot2 + 1, '.', n - (size_t)(dot2 + 1 - token)))
        return invalid();
    /* The header must be exactly fawn's: no algorithm is negotiated. */
    unsigned char header[64], payload[JWT_PAYLOAD_MAX], mac[crypto_auth_hmacsha256_BYTES + 1];
    ssize_t hl = b64_decode(header, sizeof header, token, (size_t)(dot1 - token));
    if (hl != (ssize_t)strlen(jwt_header) || memcmp(header, jwt_header, (size_t)hl) != 0)
        return invalid();
    ssize_t ml = b64_decode(mac, sizeof mac, dot2 + 1, n - (size_t)(dot2 + 1 - token));
    if (ml != crypto_auth_hmacsha256_BYTES)
        return invalid();
    unsigned char expected[crypto_auth_hmacsha256_BYTES];
    sign(expected, secret, token, (size_t)(dot2 - token));
    if (sodium_memcmp(expected, mac, sizeof expected) != 0)
        return invalid();
    ssize_t pl = b64_decode(payload, sizeof payload, dot1 + 1, (size_t)(dot2 - dot1 - 1));
    if (pl <= 0 || parse_claims(out, (const char *)payload, (size_t)pl) < 0)
        return invalid();
    return out->expires_at > now ? 0 : fawn_err(FAWN_ETIMEDOUT, "token_expired");
}
