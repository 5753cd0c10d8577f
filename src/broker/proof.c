/* The proof line of a call over the network and the nonces taken (see
 * broker.h): what arrives is untrusted, parsed field by field at fixed
 * offsets. */
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "box/attest.h"
#include "broker/broker.h"

/* Offsets of the fields in a proof line and their lengths. */
#define AT_SANDBOX 5
#define AT_POD_UID (AT_SANDBOX + 17)
#define AT_TIME (AT_POD_UID + 37)
#define TIME_DIGITS 19
#define AT_NONCE (AT_TIME + TIME_DIGITS + 1)
#define AT_MAC (AT_NONCE + 65)

static bool lower_hex(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

static bool spaced(const char *line) {
    return line[AT_POD_UID - 1] == ' ' && line[AT_TIME - 1] == ' ' && line[AT_NONCE - 1] == ' ' &&
           line[AT_MAC - 1] == ' ' && line[BROKER_PROOF_LEN - 1] == '\n';
}

static int parse_time(int64_t *out, const char *digits) {
    *out = 0;
    for (size_t i = 0; i < TIME_DIGITS; i++) {
        if (digits[i] < '0' || digits[i] > '9')
            return fawn_err(FAWN_EPROTO, "the proof's time is not %d digits", TIME_DIGITS);
        int d = digits[i] - '0';
        if (*out > (INT64_MAX - d) / 10)
            return fawn_err(FAWN_EPROTO, "the proof's time is out of range");
        *out = *out * 10 + d;
    }
    return 0;
}

static int parse_fields(broker_proof *out, const char *line) {
    char gen[33];
    memcpy(out->sandbox_id, line + AT_SANDBOX, 16);
    memcpy(out->pod_uid, line + AT_POD_UID, 36);
    memcpy(out->nonce, line + AT_NONCE, 64);
    memcpy(out->mac, line + AT_MAC, 64);
    if (!lower_hex(out->sandbox_id, 16))
        return fawn_err(FAWN_EPROTO, "the proof's sandbox id is not 16 lowercase hex digits");
    if (box_attest_generation(gen, out->pod_uid) < 0)
        return fawn_err(FAWN_EPROTO, "the proof's pod UID is not a lowercase UUID");
    if (!lower_hex(out->nonce, 64) || !lower_hex(out->mac, 64))
        return fawn_err(FAWN_EPROTO, "the proof's nonce and MAC are 64 lowercase hex digits");
    return parse_time(&out->timestamp, line + AT_TIME);
}

int broker_proof_parse(broker_proof *out, const char *line, size_t len) {
    memset(out, 0, sizeof *out);
    int r = len != BROKER_PROOF_LEN || memcmp(line, BROKER_PROOF_MAGIC " ", 5) != 0 || !spaced(line)
                ? fawn_err(FAWN_EPROTO, "not a broker proof line")
                : parse_fields(out, line);
    if (r < 0)
        memset(out, 0, sizeof *out);
    return r;
}

int broker_proof_format(char out[BROKER_PROOF_LEN + 1], const broker_proof *p) {
    out[0] = '\0';
    char gen[33];
    if (strlen(p->sandbox_id) != 16 || !lower_hex(p->sandbox_id, 16) ||
        box_attest_generation(gen, p->pod_uid) < 0 || strlen(p->nonce) != 64 ||
        !lower_hex(p->nonce, 64) || strlen(p->mac) != 64 || !lower_hex(p->mac, 64) ||
        p->timestamp < 0)
        return fawn_err(FAWN_EINVAL, "a malformed proof");
    snprintf(out, BROKER_PROOF_LEN + 1, BROKER_PROOF_MAGIC " %s %s %019" PRId64 " %s %s\n",
             p->sandbox_id, p->pod_uid, p->timestamp, p->nonce, p->mac);
    return 0;
}

/* ---- nonces ---- */

typedef struct nonce_seen {
    char nonce[65];
    int64_t until; /* forgotten after this (seconds since the epoch) */
} nonce_seen;

struct broker_nonces {
    pthread_mutex_t mu;
    size_t n;
    nonce_seen seen[BROKER_NONCES_MAX];
};

int broker_nonces_new(broker_nonces **out) {
    *out = calloc(1, sizeof **out);
    if (!*out)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    pthread_mutex_init(&(*out)->mu, NULL);
    return 0;
}

void broker_nonces_free(broker_nonces *n) {
    if (!n)
        return;
    pthread_mutex_destroy(&n->mu);
    free(n);
}

/* Drops the nonces whose window passed and says whether nonce is among
 * the rest. Called with n->mu held. */
static bool seen_prune(broker_nonces *n, const char *nonce, int64_t now) {
    bool seen = false;
    for (size_t i = 0; i < n->n;) {
        if (n->seen[i].until < now) {
            n->seen[i] = n->seen[--n->n];
            continue;
        }
        seen = seen || strcmp(n->seen[i].nonce, nonce) == 0;
        i++;
    }
    return seen;
}

bool broker_proof_current(int64_t timestamp, int64_t now) {
    return timestamp >= now - BROKER_PROOF_WINDOW_S && timestamp <= now + BROKER_PROOF_WINDOW_S;
}

bool broker_nonce_seen(broker_nonces *n, const char *nonce, int64_t now) {
    pthread_mutex_lock(&n->mu);
    bool seen = seen_prune(n, nonce, now);
    pthread_mutex_unlock(&n->mu);
    return seen;
}

int broker_nonce_admit(broker_nonces *n, const char *nonce, int64_t timestamp, int64_t now) {
    if (!broker_proof_current(timestamp, now))
        return fawn_err(FAWN_ETIMEDOUT, "the proof's time is more than %d s from the gateway's",
                        BROKER_PROOF_WINDOW_S);
    if (strlen(nonce) != 64)
        return fawn_err(FAWN_EINVAL, "a nonce is 64 hex digits");
    pthread_mutex_lock(&n->mu);
    int r = 0;
    if (seen_prune(n, nonce, now))
        r = fawn_err(FAWN_EEXIST, "the proof was used before (a replay)");
    else if (n->n == BROKER_NONCES_MAX)
        r = fawn_err(FAWN_EBUSY, "too many calls within %d s", 2 * BROKER_PROOF_WINDOW_S);
    else {
        memcpy(n->seen[n->n].nonce, nonce, 65);
        n->seen[n->n++].until = timestamp + BROKER_PROOF_WINDOW_S;
    }
    pthread_mutex_unlock(&n->mu);
    return r;
}
