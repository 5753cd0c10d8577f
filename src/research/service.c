/* The research tools' service (research.h): web.* read once, and a token
 * bucket per user for web.rate_limit_per_minute. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "research/research.h"

/* A user's allowance: tokens (in thousandths of a call, so the refill of a
 * millisecond is not rounded away) as of at_ms. */
typedef struct rate_bucket {
    char user[65];
    int64_t milli_tokens;
    int64_t at_ms;
} rate_bucket;

struct web_service {
    bool fetch_enabled;
    bool search_enabled;
    web_search_config search;
    net_allowlist allow;
    web_fetch_limits fetch;
    int64_t per_minute;
    pthread_mutex_t lock;
    rate_bucket *buckets; /* WEB_RATE_USERS_MAX of them, user "" when free */
};

int web_service_open(web_service **out, const fawn_web_config *cfg) {
    *out = NULL;
    web_service *s = calloc(1, sizeof *s);
    rate_bucket *buckets = calloc(WEB_RATE_USERS_MAX, sizeof *buckets);
    if (!s || !buckets) {
        free(s);
        free(buckets);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    int r = net_allowlist_parse(&s->allow, cfg->allow, "web.allow");
    if (r == 0 && cfg->search) {
        r = web_search_config_parse(&s->search, cfg->search, "web.search");
        s->search_enabled = r == 0;
    }
    if (r < 0) {
        net_allowlist_free(&s->allow);
        free(s);
        free(buckets);
        return r;
    }
    s->fetch_enabled = cfg->fetch_enabled;
    s->fetch = (web_fetch_limits){.max_bytes = (size_t)cfg->fetch_max_kb * 1024,
                                  .timeout_ms = (int)cfg->fetch_timeout_s * 1000};
    s->per_minute = cfg->rate_per_minute;
    s->buckets = buckets;
    pthread_mutex_init(&s->lock, NULL);
    *out = s;
    return 0;
}

void web_service_free(web_service *s) {
    if (!s)
        return;
    net_allowlist_free(&s->allow);
    web_search_config_free(&s->search);
    pthread_mutex_destroy(&s->lock);
    free(s->buckets);
    free(s);
}

bool web_service_fetch_enabled(const web_service *s) { return s && s->fetch_enabled; }
const web_search_config *web_service_search(const web_service *s) {
    return s && s->search_enabled ? &s->search : NULL;
}
const net_allowlist *web_service_allow(const web_service *s) { return &s->allow; }
web_fetch_limits web_service_fetch_limits(const web_service *s) { return s->fetch; }

/* user's bucket, or a fresh one in place of the free or longest idle slot. */
static rate_bucket *bucket_of(web_service *s, const char *user, int64_t now) {
    rate_bucket *idle = &s->buckets[0];
    for (size_t i = 0; i < WEB_RATE_USERS_MAX; i++) {
        rate_bucket *b = &s->buckets[i];
        if (strcmp(b->user, user) == 0 && b->user[0])
            return b;
        if (!b->user[0] || (idle->user[0] && b->at_ms < idle->at_ms))
            idle = b;
    }
    snprintf(idle->user, sizeof idle->user, "%s", user);
    idle->milli_tokens = s->per_minute * 1000;
    idle->at_ms = now;
    return idle;
}

int web_service_admit(int64_t *retry_after_ms, web_service *s, const char *user) {
    *retry_after_ms = 0;
    int64_t now = fawn_now_ms(), full = s->per_minute * 1000;
    pthread_mutex_lock(&s->lock);
    rate_bucket *b = bucket_of(s, user && user[0] ? user : "-", now);
    /* per_minute calls in 60000 ms: per_minute thousandths of a call a ms. */
    int64_t refill = (now - b->at_ms) * s->per_minute / 60;
    if (b->milli_tokens + refill >= full) {
        b->milli_tokens = full;
        b->at_ms = now;
    } else {
        /* Only the time turned into tokens is spent: a remainder counts later. */
        b->milli_tokens += refill;
        b->at_ms += refill * 60 / s->per_minute;
    }
    int r = 0;
    if (b->milli_tokens >= 1000) {
        b->milli_tokens -= 1000;
    } else {
        *retry_after_ms = ((1000 - b->milli_tokens) * 60 + s->per_minute - 1) / s->per_minute;
        r = fawn_err(FAWN_EBUSY, "more than %lld web calls a minute", (long long)s->per_minute);
    }
    pthread_mutex_unlock(&s->lock);
    return r;
}
