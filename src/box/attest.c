/* Per-pod attestation math (see attest.h). */
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "box/attest.h"

/* A secret file: 64 hex digits and a newline or two. */
#define ATTEST_FILE_MAX 128

static bool lower_hex(const char *s, size_t len) {
    if (strlen(s) != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool uuid_valid(const char *s) {
    if (!s || strlen(s) != BOX_ATTEST_POD_UID_LEN)
        return false;
    for (size_t i = 0; i < BOX_ATTEST_POD_UID_LEN; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (dash ? s[i] != '-' : !hex)
            return false;
    }
    return true;
}

bool box_attest_binding_valid(const char *sandbox_id, const char *user, const char *pod_uid) {
    return sandbox_id && lower_hex(sandbox_id, 16) && user && fawn_id_valid(user) &&
           uuid_valid(pod_uid);
}

int box_attest_generation(char out[33], const char *pod_uid) {
    out[0] = '\0';
    if (!uuid_valid(pod_uid))
        return fawn_err(FAWN_EINVAL, "not a pod UID");
    size_t n = 0;
    for (const char *p = pod_uid; *p; p++)
        if (*p != '-')
            out[n++] = *p;
    out[n] = '\0';
    return 0;
}

/* HMAC-SHA256(key, the fields joined by "\n"). */
static void hmac_fields(uint8_t out[crypto_auth_hmacsha256_BYTES], const uint8_t *key,
                        const char *const *fields, size_t n) {
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, BOX_ATTEST_KEY_BYTES);
    for (size_t i = 0; i < n; i++) {
        if (i)
            crypto_auth_hmacsha256_update(&st, (const uint8_t *)"\n", 1);
        crypto_auth_hmacsha256_update(&st, (const uint8_t *)fields[i], strlen(fields[i]));
    }
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof st);
}

int box_attest_pod_secret(uint8_t out[BOX_ATTEST_KEY_BYTES],
                          const uint8_t key[BOX_ATTEST_KEY_BYTES], const char *sandbox_id,
                          const char *user, const char *pod_uid) {
    memset(out, 0, BOX_ATTEST_KEY_BYTES);
    if (!box_attest_binding_valid(sandbox_id, user, pod_uid))
        return fawn_err(FAWN_EINVAL, "malformed attestation binding");
    const char *fields[] = {"fawn-pod-secret-v1", sandbox_id, user, pod_uid};
    hmac_fields(out, key, fields, ARRAY_LEN(fields));
    return 0;
}

int box_attest_pod_token(char out[65], const uint8_t key[BOX_ATTEST_KEY_BYTES],
                         const char *sandbox_id, const char *user, const char *pod_uid) {
    out[0] = '\0';
    if (!box_attest_binding_valid(sandbox_id, user, pod_uid))
        return fawn_err(FAWN_EINVAL, "malformed attestation binding");
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    const char *fields[] = {"fawn-box-token-v1", sandbox_id, pod_uid};
    hmac_fields(mac, key, fields, ARRAY_LEN(fields));
    box_attest_hex(out, mac, sizeof mac);
    sodium_memzero(mac, sizeof mac);
    return 0;
}

int box_attest_proof(char out[BOX_ATTEST_PROOF_HEX + 1], const box_attest *a, const char *nonce) {
    out[0] = '\0';
    if (!nonce || !lower_hex(nonce, BOX_ATTEST_NONCE_HEX))
        return fawn_err(FAWN_EINVAL, "the nonce must be %d lowercase hex digits",
                        BOX_ATTEST_NONCE_HEX);
    if (!box_attest_binding_valid(a->sandbox_id, a->user, a->pod_uid))
        return fawn_err(FAWN_EINVAL, "malformed attestation binding");
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    const char *fields[] = {"fawn-attest-v1", nonce, a->sandbox_id, a->user, a->pod_uid};
    hmac_fields(mac, a->secret, fields, ARRAY_LEN(fields));
    box_attest_hex(out, mac, sizeof mac);
    return 0;
}

int box_attest_call_mac(char out[BOX_ATTEST_PROOF_HEX + 1], const box_attest *a, int64_t timestamp,
                        const char *nonce, const char *request_sha256) {
    out[0] = '\0';
    if (!nonce || !lower_hex(nonce, BOX_ATTEST_NONCE_HEX) || !request_sha256 ||
        !lower_hex(request_sha256, 64) || timestamp < 0)
        return fawn_err(FAWN_EINVAL, "a broker call's nonce and request hash are 64 lowercase "
                                     "hex digits, its time not negative");
    if (!box_attest_binding_valid(a->sandbox_id, a->user, a->pod_uid))
        return fawn_err(FAWN_EINVAL, "malformed attestation binding");
    char when[24];
    snprintf(when, sizeof when, "%lld", (long long)timestamp);
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    const char *fields[] = {"fawn-broker-call-v1", when, nonce, a->sandbox_id, a->user, a->pod_uid,
                            request_sha256};
    hmac_fields(mac, a->secret, fields, ARRAY_LEN(fields));
    box_attest_hex(out, mac, sizeof mac);
    return 0;
}

bool box_attest_proof_equal(const char *received, const char *expected) {
    char a[BOX_ATTEST_PROOF_HEX] = {0}, b[BOX_ATTEST_PROOF_HEX] = {0};
    bool lengths = received && expected && strlen(received) == BOX_ATTEST_PROOF_HEX &&
                   strlen(expected) == BOX_ATTEST_PROOF_HEX;
    if (lengths) {
        memcpy(a, received, sizeof a);
        memcpy(b, expected, sizeof b);
    }
    /* Compared whatever the lengths, so the time says nothing about them. */
    bool same = sodium_memcmp(a, b, sizeof a) == 0;
    return lengths && same;
}

int box_attest_request_parse(char nonce[BOX_ATTEST_NONCE_HEX + 1], const char *body, size_t len) {
    static const char *const keys[] = {"nonce", NULL};
    nonce[0] = '\0';
    if (len > BOX_ATTEST_BODY_MAX)
        return fawn_err(FAWN_EINVAL, "the attestation request is larger than %d bytes",
                        BOX_ATTEST_BODY_MAX);
    json_t *o = NULL;
    const char *n = NULL;
    int r = fjson_parse_object(&o, body, len);
    if (r == 0)
        r = fjson_check_keys(o, keys);
    if (r == 0)
        r = fjson_get_string(&n, o, "nonce", true);
    if (r == 0 && !lower_hex(n, BOX_ATTEST_NONCE_HEX))
        r = fawn_err(FAWN_EINVAL, "'nonce' must be %d lowercase hex digits", BOX_ATTEST_NONCE_HEX);
    if (r == 0)
        memcpy(nonce, n, BOX_ATTEST_NONCE_HEX + 1);
    json_decref(o);
    return r < 0 ? fawn_err(FAWN_EINVAL, "%s", fawn_errmsg()) : 0;
}

void box_attest_hex(char *out, const uint8_t *bytes, size_t n) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[bytes[i] >> 4];
        out[2 * i + 1] = digits[bytes[i] & 15];
    }
    out[2 * n] = '\0';
}

int box_attest_unhex(uint8_t *out, size_t n, const char *text) {
    if (strlen(text) != 2 * n)
        return fawn_err(FAWN_EINVAL, "expected %zu hex digits", 2 * n);
    for (size_t i = 0; i < n; i++) {
        int hi = fawn_hex_digit(text[2 * i]), lo = fawn_hex_digit(text[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return fawn_err(FAWN_EINVAL, "expected %zu hex digits", 2 * n);
        out[i] = (uint8_t)(hi << 4 | lo);
    }
    return 0;
}

int box_attest_load(box_attest *out, const char *secret_path, const char *sandbox_id,
                    const char *user, const char *pod_uid) {
    memset(out, 0, sizeof *out);
    if (!box_attest_binding_valid(sandbox_id, user, pod_uid))
        return fawn_err(FAWN_EINVAL,
                        "FAWN_SANDBOX_ID, FAWN_USER and FAWN_POD_UID must name the sandbox "
                        "(16 hex), its user and the pod's UID");
    _cleanup_close_ int fd = open(secret_path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", secret_path);
    char text[ATTEST_FILE_MAX + 1];
    ssize_t n = read(fd, text, ATTEST_FILE_MAX);
    if (n < 0)
        return fawn_err_sys(FAWN_EIO, errno, "read %s", secret_path);
    while (n > 0 && (text[n - 1] == '\n' || text[n - 1] == '\r'))
        n--;
    text[n] = '\0';
    int r = strlen(text) == (size_t)n ? box_attest_unhex(out->secret, sizeof out->secret, text)
                                      : FAWN_EINVAL;
    sodium_memzero(text, sizeof text);
    if (r < 0)
        return fawn_err(FAWN_EINVAL, "%s must hold the pod's secret as %d hex digits", secret_path,
                        2 * BOX_ATTEST_KEY_BYTES);
    snprintf(out->sandbox_id, sizeof out->sandbox_id, "%s", sandbox_id);
    snprintf(out->user, sizeof out->user, "%s", user);
    snprintf(out->pod_uid, sizeof out->pod_uid, "%s", pod_uid);
    return 0;
}
