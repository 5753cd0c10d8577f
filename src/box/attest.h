/* Per-pod attestation: how a gateway learns that the box answering at an
 * address is the pod it created for a sandbox (docs/box-api.md, POST
 * /v1/attest; docs/kubernetes.md).
 *
 * Rules (each enforced by the function named):
 * - A pod's secret is bound to (sandbox id, user, pod UID): the gateway
 *   derives it from a key only it holds (box_attest_pod_secret) once the
 *   pod exists, and gives it to that pod alone (its Secret). A secret read
 *   by another pod, or for another sandbox or user, proves nothing.
 * - The proof is HMAC-SHA256(secret, a fresh nonce and the binding), so a
 *   recorded answer never answers another challenge (box_attest_proof).
 * - Every field of the binding has a character set without the separator,
 *   so no two bindings hash alike (box_attest_binding_valid).
 * - Proofs are compared in constant time (box_attest_proof_equal).
 * - A credential broker call from a pod carries a MAC of the same secret
 *   over its time, a fresh nonce, the binding and the request's hash
 *   (box_attest_call_mac): the secret itself never leaves the pod, and a
 *   MAC proves one request only.
 *
 * Shared by the box (which answers) and the Kubernetes provider (which
 * asks): both compute the same bytes from the same functions. */
#ifndef FAWN_BOX_ATTEST_H
#define FAWN_BOX_ATTEST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Bytes of a pod secret and of the gateway's key: HMAC-SHA256's key size. */
#define BOX_ATTEST_KEY_BYTES 32
/* A nonce: 32 random bytes as 64 lowercase hex digits (a fresh one per
 * challenge; guessing one is hopeless). */
#define BOX_ATTEST_NONCE_HEX 64
/* A proof: HMAC-SHA256 as 64 lowercase hex digits. */
#define BOX_ATTEST_PROOF_HEX 64
/* A pod UID as the API gives it: a UUID, 36 characters. */
#define BOX_ATTEST_POD_UID_LEN 36
/* Largest POST /v1/attest body: {"nonce": "<64 hex>"} with room for spaces. */
#define BOX_ATTEST_BODY_MAX 256

/* What a box answers attestation challenges with. */
typedef struct box_attest {
    uint8_t secret[BOX_ATTEST_KEY_BYTES];
    char sandbox_id[17];                      /* 16 lowercase hex */
    char user[65];                            /* [A-Za-z0-9_-]{1,64} */
    char pod_uid[BOX_ATTEST_POD_UID_LEN + 1]; /* lowercase UUID */
} box_attest;

/* True when sandbox_id (16 lowercase hex), user ([A-Za-z0-9_-]{1,64}) and
 * pod_uid (a lowercase UUID: 8-4-4-4-12 hex) are well formed. */
bool box_attest_binding_valid(const char *sandbox_id, const char *user, const char *pod_uid);

/* The generation of a pod's box: its UID's 32 hex digits without dashes.
 * FAWN_EINVAL when pod_uid is not a lowercase UUID (out is "" then). */
FAWN_MUST_CHECK int box_attest_generation(char out[33], const char *pod_uid);

/* The pod's secret: HMAC-SHA256(key, "fawn-pod-secret-v1\n" sandbox_id "\n"
 * user "\n" pod_uid). FAWN_EINVAL for a malformed binding (out zeroed). */
FAWN_MUST_CHECK int box_attest_pod_secret(uint8_t out[BOX_ATTEST_KEY_BYTES],
                                          const uint8_t key[BOX_ATTEST_KEY_BYTES],
                                          const char *sandbox_id, const char *user,
                                          const char *pod_uid);

/* The box's bearer token for a pod, as 64 hex digits: HMAC-SHA256(key,
 * "fawn-box-token-v1\n" sandbox_id "\n" pod_uid), so a gateway that
 * restarts knows it without storing it. FAWN_EINVAL as above (out ""). */
FAWN_MUST_CHECK int box_attest_pod_token(char out[65], const uint8_t key[BOX_ATTEST_KEY_BYTES],
                                         const char *sandbox_id, const char *user,
                                         const char *pod_uid);

/* The proof for nonce: hex of HMAC-SHA256(a->secret, "fawn-attest-v1\n"
 * nonce "\n" sandbox_id "\n" user "\n" pod_uid). FAWN_EINVAL for a nonce
 * that is not 64 lowercase hex digits or a malformed binding (out ""). */
FAWN_MUST_CHECK int box_attest_proof(char out[BOX_ATTEST_PROOF_HEX + 1], const box_attest *a,
                                     const char *nonce);

/* A broker call's MAC (src/broker/relay.c sends it, the Kubernetes
 * provider checks it): hex of HMAC-SHA256(a->secret, "fawn-broker-call-v1\n"
 * timestamp "\n" nonce "\n" sandbox_id "\n" user "\n" pod_uid "\n"
 * request_sha256), timestamp in decimal seconds since the epoch.
 * FAWN_EINVAL for a nonce or request_sha256 that is not 64 lowercase hex
 * digits, a negative timestamp or a malformed binding (out ""). */
FAWN_MUST_CHECK int box_attest_call_mac(char out[BOX_ATTEST_PROOF_HEX + 1], const box_attest *a,
                                        int64_t timestamp, const char *nonce,
                                        const char *request_sha256);

/* Constant-time comparison of a proof received (any string, untrusted)
 * with the expected one: true only when both are 64 characters and equal. */
bool box_attest_proof_equal(const char *received, const char *expected);

/* Parses a POST /v1/attest body (untrusted: len bytes, not terminated):
 * exactly {"nonce": "<64 lowercase hex>"}. FAWN_EINVAL naming what is
 * wrong (nonce "" then). */
FAWN_MUST_CHECK int box_attest_request_parse(char nonce[BOX_ATTEST_NONCE_HEX + 1], const char *body,
                                             size_t len);

/* Reads a pod's attestation: the secret from secret_path (64 hex digits,
 * a trailing newline allowed; the file a pod's Secret mounts) and the
 * binding given. FAWN_EINVAL for a malformed file or binding, FAWN_EIO when
 * it cannot be read. */
FAWN_MUST_CHECK int box_attest_load(box_attest *out, const char *secret_path,
                                    const char *sandbox_id, const char *user, const char *pod_uid);

/* Hex of bytes n (out holds 2n + 1); and back: FAWN_EINVAL unless text is
 * exactly 2n lowercase or uppercase hex digits. */
void box_attest_hex(char *out, const uint8_t *bytes, size_t n);
FAWN_MUST_CHECK int box_attest_unhex(uint8_t *out, size_t n, const char *text);

#endif
