/* The capability cache (see caps_cache.h). */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sandbox/caps_cache.h"

enum caps_known { CAPS_NONE, CAPS_YES, CAPS_NO };

typedef struct caps_entry {
    char identity[CAPS_IDENTITY_MAX];
    enum caps_known known;
    int64_t expires_ms; /* on the cache's clock */
    char detail[CAPS_DETAIL_MAX];
    bool probing;
    bool invalidated;  /* during the probe in flight: its answer is not kept */
    uint64_t done_seq; /* probes finished */
    int last_code;     /* the last finished probe's result, for its waiters */
    bool last_supported;
    char last_detail[CAPS_DETAIL_MAX];
    int64_t used_ms; /* for eviction */
} caps_entry;

struct caps_cache {
    caps_cache_config cfg;
    pthread_mutex_t mu;
    pthread_cond_t done;
    caps_entry entries[CAPS_CACHE_ENTRIES_MAX];
    size_t n;
};

static int64_t now(const caps_cache *c) {
    return c->cfg.now_ms ? c->cfg.now_ms(c->cfg.clock_ctx) : fawn_now_ms();
}

int caps_cache_new(caps_cache **out, const caps_cache_config *cfg) {
    *out = NULL;
    if (cfg->positive_ttl_ms <= 0 || cfg->negative_ttl_ms <= 0 || cfg->probe_timeout_ms <= 0)
        return fawn_err(FAWN_EINVAL, "capability cache lifetimes and probe timeout must be > 0");
    caps_cache *c = calloc(1, sizeof *c);
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    c->cfg = *cfg;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->done, &attr);
    pthread_condattr_destroy(&attr);
    *out = c;
    return 0;
}

void caps_cache_free(caps_cache *c) {
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->done);
    free(c);
}

static caps_entry *entry_find(caps_cache *c, const char *identity) {
    for (size_t i = 0; i < c->n; i++)
        if (strcmp(c->entries[i].identity, identity) == 0)
            return &c->entries[i];
    return NULL;
}

/* identity's entry, made (evicting the least recently used idle one when
 * full); NULL when every entry is being probed. */
static caps_entry *entry_get(caps_cache *c, const char *identity) {
    caps_entry *e = entry_find(c, identity);
    if (e)
        return e;
    if (c->n < CAPS_CACHE_ENTRIES_MAX) {
        e = &c->entries[c->n++];
    } else {
        for (size_t i = 0; i < c->n; i++)
            if (!c->entries[i].probing && (!e || c->entries[i].used_ms < e->used_ms))
                e = &c->entries[i];
        if (!e)
            return NULL;
    }
    *e = (caps_entry){0};
    snprintf(e->identity, sizeof e->identity, "%s", identity);
    return e;
}

static void detail_set(char *detail, const char *text) {
    if (detail)
        snprintf(detail, CAPS_DETAIL_MAX, "%s", text);
}

/* Waits (m->mu held) until the probe in flight finishes or the caller's
 * deadline passes. */
static int probe_await(caps_cache *c, caps_entry *e, bool *supported, char *detail) {
    uint64_t seq = e->done_seq;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    int64_t ns = ts.tv_nsec + (int64_t)(c->cfg.probe_timeout_ms % 1000) * 1000000;
    ts.tv_sec += c->cfg.probe_timeout_ms / 1000 + ns / 1000000000;
    ts.tv_nsec = ns % 1000000000;
    while (e->done_seq == seq)
        if (pthread_cond_timedwait(&c->done, &c->mu, &ts) == ETIMEDOUT && e->done_seq == seq) {
            detail_set(detail, "the capability probe in flight did not answer in time");
            return fawn_err(FAWN_ETIMEDOUT,
                            "the capability probe of %.200s did not answer within %d ms",
                            e->identity, c->cfg.probe_timeout_ms);
        }
    *supported = e->last_supported;
    detail_set(detail, e->last_detail);
    return e->last_code < 0 ? fawn_err(e->last_code, "%s", e->last_detail) : 0;
}

/* Runs the probe (m->mu not held) and publishes its answer. */
static int probe_run(caps_cache *c, caps_entry *e, bool *supported, char *detail,
                     caps_probe_fn probe, void *probe_ctx) {
    char why[CAPS_DETAIL_MAX] = "";
    bool yes = false;
    e->probing = true;
    e->invalidated = false;
    pthread_mutex_unlock(&c->mu);
    int r = probe(probe_ctx, &yes, why, c->cfg.probe_timeout_ms);
    if (r < 0)
        snprintf(why, sizeof why, "%s", fawn_errmsg());
    pthread_mutex_lock(&c->mu);
    e->probing = false;
    if (r == 0 && !e->invalidated) {
        e->known = yes ? CAPS_YES : CAPS_NO;
        e->expires_ms = now(c) + (yes ? c->cfg.positive_ttl_ms : c->cfg.negative_ttl_ms);
        snprintf(e->detail, sizeof e->detail, "%s", why);
    }
    e->last_code = r;
    e->last_supported = r == 0 && yes;
    snprintf(e->last_detail, sizeof e->last_detail, "%s", why);
    e->done_seq++;
    pthread_cond_broadcast(&c->done);
    *supported = r == 0 && yes;
    detail_set(detail, why);
    return r < 0 ? fawn_err(r, "%s", why) : 0;
}

int caps_cache_get(caps_cache *c, bool *supported, char *detail, bool *probed, const char *identity,
                   caps_probe_fn probe, void *probe_ctx) {
    *supported = false;
    detail_set(detail, "");
    if (probed)
        *probed = false;
    if (!identity || strlen(identity) >= CAPS_IDENTITY_MAX)
        return fawn_err(FAWN_EINVAL, "capability identity too long");
    pthread_mutex_lock(&c->mu);
    caps_entry *e = entry_get(c, identity);
    int r;
    if (!e) {
        r = fawn_err(FAWN_EBUSY, "too many capability probes in flight");
    } else if (e->probing) {
        r = probe_await(c, e, supported, detail);
    } else if (e->known != CAPS_NONE && now(c) < e->expires_ms) {
        *supported = e->known == CAPS_YES;
        detail_set(detail, e->detail);
        r = 0;
    } else {
        e->known = CAPS_NONE;
        if (probed)
            *probed = true;
        r = probe_run(c, e, supported, detail, probe, probe_ctx);
    }
    if (e)
        e->used_ms = now(c);
    pthread_mutex_unlock(&c->mu);
    return r;
}

void caps_cache_invalidate(caps_cache *c, const char *identity) {
    pthread_mutex_lock(&c->mu);
    caps_entry *e = identity ? entry_find(c, identity) : NULL;
    if (e) {
        e->known = CAPS_NONE;
        e->invalidated = e->probing;
    }
    pthread_mutex_unlock(&c->mu);
}
