/* The capability cache: what a provisioner (a Kubernetes API server with
 * one set of credentials) can do, probed and remembered.
 *
 * Rules (each enforced by caps_cache_get unless named otherwise):
 * - Only confirmed answers are kept: "supported" for positive_ttl_ms,
 *   "not supported" for negative_ttl_ms, each per identity (the API server
 *   and the credentials' identity: one cluster's answer never stands for
 *   another's, nor one service account's for another's).
 * - An unknown answer (timeout, 5xx, malformed reply) is not a negative:
 *   it is returned as an error and nothing is remembered, so the next
 *   caller probes again.
 * - One probe in flight per identity: concurrent callers wait for it and
 *   share its answer, whatever it is.
 * - Nobody waits longer than probe_timeout_ms: a caller whose wait ends
 *   first gets FAWN_ETIMEDOUT (unknown), and the probe itself is given that
 *   timeout.
 * - A failure that says a cached answer is stale drops it
 *   (caps_cache_invalidate): the next caller probes.
 * - Times come from the clock given (a fake one in tests); waits for a
 *   probe in flight are on the real monotonic clock. */
#ifndef FAWN_SANDBOX_CAPS_CACHE_H
#define FAWN_SANDBOX_CAPS_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Identities remembered: one per provider in practice; past this the
 * oldest entry not being probed is forgotten. */
#define CAPS_CACHE_ENTRIES_MAX 64
/* Bytes of an identity (an API server URL and a credential hash). */
#define CAPS_IDENTITY_MAX 512
/* Bytes of the reason kept with an answer (for errors and logs). */
#define CAPS_DETAIL_MAX 256

/* A probe: 0 with *supported and a reason in detail when the provisioner
 * gave a confirmed answer; a negative FAWN_E* code when it could not tell.
 * It must return within timeout_ms. */
typedef int (*caps_probe_fn)(void *probe_ctx, bool *supported, char detail[CAPS_DETAIL_MAX],
                             int timeout_ms);

typedef struct caps_cache_config {
    int64_t positive_ttl_ms;            /* > 0 */
    int64_t negative_ttl_ms;            /* > 0 */
    int probe_timeout_ms;               /* > 0 */
    int64_t (*now_ms)(void *clock_ctx); /* NULL: fawn_now_ms */
    void *clock_ctx;
} caps_cache_config;

typedef struct caps_cache caps_cache;

/* FAWN_EINVAL for a zero ttl or timeout. */
FAWN_MUST_CHECK int caps_cache_new(caps_cache **out, const caps_cache_config *cfg);
void caps_cache_free(caps_cache *c);

/* What identity can do: 0 with *supported (and its reason in detail, which
 * may be NULL) from a live cached answer or from probe(probe_ctx), run by
 * this caller or shared with the caller already running it. Unknown:
 * the probe's error, or FAWN_ETIMEDOUT when the shared probe outlasted
 * probe_timeout_ms (*supported false, detail the reason). *probed tells
 * whether this call ran the probe (may be NULL). */
FAWN_MUST_CHECK int caps_cache_get(caps_cache *c, bool *supported, char *detail, bool *probed,
                                   const char *identity, caps_probe_fn probe, void *probe_ctx);

/* Forgets identity's answer (a probe in flight still answers its waiters,
 * but its answer is not kept). */
void caps_cache_invalidate(caps_cache *c, const char *identity);

#endif
