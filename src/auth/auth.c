#include "auth/auth.h"

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/fsx.h"
#include "base/json.h"
#include "store/store.h"

/* The only header fawn issues or accepts. */
static const char jwt_header[] = "{\"alg\":\"HS256\",\"typ\":\"JWT\"}";
/* A payload (four integer claims) is far smaller than this. */
#define JWT_PAYLOAD_MAX 1024
#define B64_VARIANT sodium_base64_VARIANT_URLSAFE_NO_PADDING

static const char email_domain_suffix[] = "@" AUTH_EMAIL_DOMAIN;

bool auth_username_valid(const char *name) {
    size_t n = strspn(name, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._@+-");
    size_t suffix = sizeof email_domain_suffix - 1;
    bool reserved = n >= suffix && strcasecmp(name + n - suffix, email_domain_suffix) == 0;
    return n > 0 && n <= STORE_NAME_MAX && name[n] == '\0' && !reserved;
}

/* ---- e-mail addresses ---- */

static bool ascii_alnum(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}

static bool ascii_alpha(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }

/* The n bytes before the '@' (none of them NUL). */
static bool local_part_valid(const char *s, size_t n) {
    if (n == 0 || s[0] == '.' || !(ascii_alnum(s[n - 1]) || strchr("_+-", s[n - 1])))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!ascii_alnum(s[i]) && !strchr("_'+-.", s[i]))
            return false;
    return true;
}

/* Labels, each followed by '.', then a last label of letters only. */
static bool domain_valid(const char *d) {
    const char *last = strrchr(d, '.');
    if (!last || last == d || strlen(last + 1) < 2)
        return false;
    for (const char *p = last + 1; *p; p++)
        if (!ascii_alpha(*p))
            return false;
    bool label_start = true;
    for (const char *p = d; p < last; p++) {
        bool ok = *p == '.' ? !label_start : ascii_alnum(*p) || (*p == '-' && !label_start);
        if (!ok)
            return false;
        label_start = *p == '.';
    }
    return true;
}

bool auth_email_valid(const char *s) {
    const char *at = s ? strchr(s, '@') : NULL;
    return at && !strstr(s, "..") && local_part_valid(s, (size_t)(at - s)) && domain_valid(at + 1);
}

void auth_user_email(char out[AUTH_EMAIL_MAX + 1], const char *username, int64_t user_id) {
    if (auth_email_valid(username) && strlen(username) <= AUTH_EMAIL_MAX) {
        snprintf(out, AUTH_EMAIL_MAX + 1, "%s", username);
        return;
    }
    int n = snprintf(out, AUTH_EMAIL_MAX + 1, "%s%s", username, email_domain_suffix);
    if (n < 0 || (size_t)n > AUTH_EMAIL_MAX || !auth_email_valid(out))
        snprintf(out, AUTH_EMAIL_MAX + 1, "user-%lld%s", (long long)user_id, email_domain_suffix);
}

/* Passwords that guessing starts with (compared ignoring case). */
static const char *const common_passwords[] = {
    "password",   "password1", "password123", "12345678", "123456789", "1234567890",
    "qwertyuiop", "qwerty123", "iloveyou",    "11111111", "00000000",  "abc12345",
    "letmein1",   "welcome1",  "admin123",    "changeme", "sunshine",  "football",
    "baseball",   "princess",  "1q2w3e4r",    "passw0rd", "trustno1",  "superman",
};

int auth_password_check(const char *password) {
    size_t n = strlen(password);
    if (n < AUTH_PASSWORD_MIN || n > AUTH_PASSWORD_MAX)
        return fawn_err(FAWN_EINVAL, "a password has %d to %d characters", AUTH_PASSWORD_MIN,
                        AUTH_PASSWORD_MAX);
    for (size_t i = 0; i < ARRAY_LEN(common_passwords); i++)
        if (strcasecmp(password, common_passwords[i]) == 0)
            return fawn_err(FAWN_EINVAL, "this password is too common; choose another");
    return 0;
}

int auth_password_hash(char out[AUTH_HASH_MAX], const char *password) {
    out[0] = '\0';
    size_t n = strlen(password);
    if (n < AUTH_PASSWORD_MIN || n > AUTH_PASSWORD_MAX)
        return fawn_err(FAWN_EINVAL, "a password has %d to %d characters", AUTH_PASSWORD_MIN,
                        AUTH_PASSWORD_MAX);
    char hash[crypto_pwhash_STRBYTES];
    if (sodium_init() < 0)
        return fawn_err(FAWN_EIO, "libsodium could not be initialized");
    if (crypto_pwhash_str_alg(hash, password, n, crypto_pwhash_OPSLIMIT_INTERACTIVE,
                              crypto_pwhash_MEMLIMIT_INTERACTIVE,
                              crypto_pwhash_ALG_ARGON2ID13) != 0)
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
    *out = NULL;
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
    if (!ok)
        *c = (auth_claims){0}; /* no claim of a refused token survives */
    return ok ? 0 : invalid();
}

int auth_jwt_verify(auth_claims *out, const unsigned char secret[AUTH_SECRET_BYTES],
                    const char *token, int64_t now) {
    *out = (auth_claims){0};
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

static int secret_from_env(unsigned char out[AUTH_SECRET_BYTES], const char *hex) {
    size_t len = 0;
    unsigned char buf[256];
    if (strlen(hex) < 2 * AUTH_SECRET_BYTES ||
        sodium_hex2bin(buf, sizeof buf, hex, strlen(hex), NULL, &len, NULL) != 0 ||
        len < AUTH_SECRET_BYTES)
        return fawn_err(FAWN_EINVAL, "%s must be at least %d hex digits", AUTH_SECRET_ENV,
                        2 * AUTH_SECRET_BYTES);
    memcpy(out, buf, AUTH_SECRET_BYTES);
    sodium_memzero(buf, sizeof buf);
    return 0;
}

static int secret_read(unsigned char out[AUTH_SECRET_BYTES], int fd, const char *path) {
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", path);
    if (!S_ISREG(st.st_mode) || (st.st_mode & 077) || st.st_uid != geteuid())
        return fawn_err(FAWN_EPERM, "%s must be a regular file of this user, mode 0600", path);
    if (st.st_size != AUTH_SECRET_BYTES || read(fd, out, AUTH_SECRET_BYTES) != AUTH_SECRET_BYTES)
        return fawn_err(FAWN_EINVAL, "%s must hold exactly %d bytes", path, AUTH_SECRET_BYTES);
    return 0;
}

/* Writes a new secret to a temporary file and links it into place: the
 * name appears complete or not at all, and only one start's secret wins. */
static int secret_create(const char *home, const char *path) {
    char tmp[4096];
    if (snprintf(tmp, sizeof tmp, "%s/.jwt.secret.XXXXXX", home) >= (int)sizeof tmp)
        return fawn_err(FAWN_EINVAL, "home path too long");
    _cleanup_close_ int fd = mkostemp(tmp, O_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "create %s", tmp);
    unsigned char secret[AUTH_SECRET_BYTES];
    randombytes_buf(secret, sizeof secret);
    int r = fchmod(fd, 0600) == 0 ? fawn_write_all(fd, secret, sizeof secret)
                                  : fawn_err_sys(FAWN_EIO, errno, "chmod %s", tmp);
    sodium_memzero(secret, sizeof secret);
    if (r == 0 && fsync(fd) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "fsync %s", tmp);
    if (r == 0 && link(tmp, path) < 0 && errno != EEXIST)
        r = fawn_err_sys(FAWN_EIO, errno, "create %s", path);
    unlink(tmp);
    return r;
}

int auth_secret_load(unsigned char out[AUTH_SECRET_BYTES], const char *home) {
    sodium_memzero(out, AUTH_SECRET_BYTES);
    const char *env = getenv(AUTH_SECRET_ENV);
    if (env && *env)
        return secret_from_env(out, env);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/%s", home, AUTH_SECRET_FILE) >= (int)sizeof path)
        return fawn_err(FAWN_EINVAL, "home path too long");
    int r = fsx_private_dir(home);
    _cleanup_close_ int fd = r == 0 ? open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC) : -1;
    if (r == 0 && fd < 0 && errno == ENOENT && (r = secret_create(home, path)) == 0)
        fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (r == 0 && fd < 0)
        r = fawn_err_sys(errno == ELOOP ? FAWN_EPERM : FAWN_EIO, errno, "open %s", path);
    return r < 0 ? r : secret_read(out, fd, path);
}
