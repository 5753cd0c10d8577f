/* Retries and the circuit breaker: model_complete runs model_attempt
 * (model_openai.c) until success or its failure class's budget is spent.
 * Every budget and delay comes from the retry policy table in model.h.
 * Calls down into model_openai.c and model_classify.c; neither calls back. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "model/model.h"

/* 50 ms: slice of the default sleep; bounds how late cancellation is seen. */
#define MODEL_SLEEP_SLICE_MS 50

int model_attempt_budget(enum model_failure why) {
    switch (why) {
    case MODEL_FAIL_TRANSIENT: return MODEL_RETRY_TRANSIENT_ATTEMPTS;
    case MODEL_FAIL_BURST: return MODEL_RETRY_BURST_ATTEMPTS;
    case MODEL_FAIL_STALLED: return MODEL_RETRY_STALLED_ATTEMPTS;
    default: return 1;
    }
}

int64_t model_backoff_ms(enum model_failure why, int64_t previous_ms, uint64_t random) {
    int64_t base = why == MODEL_FAIL_BURST ? MODEL_BACKOFF_BURST_BASE_MS : MODEL_BACKOFF_BASE_MS;
    int64_t high = previous_ms > MODEL_BACKOFF_CAP_MS ? MODEL_BACKOFF_CAP_MS * MODEL_BACKOFF_GROWTH
                                                      : previous_ms * MODEL_BACKOFF_GROWTH;
    if (high < base)
        high = base;
    if (high > MODEL_BACKOFF_CAP_MS)
        high = MODEL_BACKOFF_CAP_MS;
    return base + (int64_t)(random % (uint64_t)(high - base + 1));
}

/* ---- circuit breaker ------------------------------------------------------------ */

void model_breaker_init(model_breaker *b) {
    memset(b, 0, sizeof *b);
    pthread_mutex_init(&b->lock, NULL);
    b->state = MODEL_BREAKER_CLOSED;
}

void model_breaker_destroy(model_breaker *b) { pthread_mutex_destroy(&b->lock); }

int model_breaker_admit(model_breaker *b, int64_t *wait_ms, int64_t now_ms) {
    pthread_mutex_lock(&b->lock);
    *wait_ms = 0;
    if (b->state == MODEL_BREAKER_OPEN && now_ms - b->opened_at_ms >= MODEL_BREAKER_OPEN_MS) {
        b->state = MODEL_BREAKER_HALF_OPEN;
        b->probe_in_flight = false;
    }
    int r = 0;
    if (b->state == MODEL_BREAKER_OPEN) {
        *wait_ms = b->opened_at_ms + MODEL_BREAKER_OPEN_MS - now_ms;
        r = FAWN_EBUSY;
    } else if (b->state == MODEL_BREAKER_HALF_OPEN) {
        if (b->probe_in_flight)
            r = FAWN_EBUSY;
        else
            b->probe_in_flight = true;
    }
    pthread_mutex_unlock(&b->lock);
    return r;
}

void model_breaker_record(model_breaker *b, enum model_failure outcome, int64_t now_ms) {
    pthread_mutex_lock(&b->lock);
    if (outcome == MODEL_OK) {
        b->state = MODEL_BREAKER_CLOSED;
        b->failures = 0;
    } else if (outcome == MODEL_FAIL_TRANSIENT || outcome == MODEL_FAIL_STALLED) {
        b->failures++;
        if (b->state == MODEL_BREAKER_HALF_OPEN || b->failures >= MODEL_BREAKER_THRESHOLD) {
            b->state = MODEL_BREAKER_OPEN;
            b->opened_at_ms = now_ms;
        }
    }
    b->probe_in_flight = false;
    pthread_mutex_unlock(&b->lock);
}

/* ---- retry loop ------------------------------------------------------------------ */

static bool default_sleep(void *clock_ctx, int64_t ms, const atomic_bool *cancel) {
    int64_t end = fawn_now_ms() + ms;
    for (int64_t now = fawn_now_ms(); now < end; now = fawn_now_ms()) {
        if (cancel && atomic_load(cancel))
            return true;
        int64_t slice = end - now < MODEL_SLEEP_SLICE_MS ? end - now : MODEL_SLEEP_SLICE_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice * 1000000L};
        nanosleep(&ts, NULL);
    }
    return cancel && atomic_load(cancel);
}

static int64_t default_now(void *clock_ctx) { return fawn_now_ms(); }

static uint64_t default_random(void *clock_ctx) {
    uint64_t v;
    fawn_random_bytes(&v, sizeof v);
    return v;
}

static model_hooks hooks_with_defaults(const model_hooks *given) {
    model_hooks h = given ? *given : (model_hooks){0};
    if (!h.sleep_ms)
        h.sleep_ms = default_sleep;
    if (!h.now_ms)
        h.now_ms = default_now;
    if (!h.random)
        h.random = default_random;
    return h;
}

/* Decides the wait before the next attempt. When the server asks for too
 * long a wait, returns the failure's code with its message extended. */
static int retry_wait(int64_t *wait_ms, int64_t *previous_ms, const model_hooks *h,
                      enum model_failure why, int64_t retry_after_ms, int code,
                      const char *failure) {
    if (retry_after_ms > MODEL_RETRY_AFTER_MAX_MS)
        return fawn_err(code, "%s (the server asked to wait %lld s)", failure,
                        (long long)(retry_after_ms / 1000));
    *wait_ms = retry_after_ms >= 0 ? retry_after_ms
                                   : model_backoff_ms(why, *previous_ms, h->random(h->clock_ctx));
    *previous_ms = *wait_ms;
    return 0;
}

static int complete_attempts(model_reply *out, enum model_failure *why, const model_config *cfg,
                             const json_t *messages, const json_t *tools, const model_hooks *h,
                             const atomic_bool *cancel) {
    int64_t previous_ms = 0;
    for (int attempt = 1;; attempt++) {
        int64_t retry_after_ms = -1, wait_ms = 0;
        int r = model_attempt(out, why, &retry_after_ms, cfg, messages, tools, h->on_delta, h->ctx,
                              cancel);
        int budget = model_attempt_budget(*why);
        if (r == 0 || attempt >= budget)
            return r;
        char failure[512];
        snprintf(failure, sizeof failure, "%s", fawn_errmsg());
        if (retry_wait(&wait_ms, &previous_ms, h, *why, retry_after_ms, r, failure) < 0)
            return r;
        model_retry_info info = {attempt, budget, wait_ms, model_failure_name(*why), failure};
        if (h->on_retry)
            h->on_retry(h->ctx, &info);
        if (h->sleep_ms(h->clock_ctx, wait_ms, cancel)) {
            *why = MODEL_FAIL_CANCELLED;
            return fawn_err(FAWN_ECANCELED, "model %s: cancelled while waiting to retry",
                            cfg->name);
        }
    }
}

int model_complete(model_reply *out, enum model_failure *why, const model_config *cfg,
                   const json_t *messages, const json_t *tools, model_breaker *breaker,
                   const model_hooks *hooks, const atomic_bool *cancel) {
    enum model_failure local;
    if (!why)
        why = &local;
    *out = (model_reply){.prompt_tokens = -1, .completion_tokens = -1};
    model_hooks h = hooks_with_defaults(hooks);
    int64_t wait_ms;
    if (breaker && model_breaker_admit(breaker, &wait_ms, h.now_ms(h.clock_ctx)) < 0) {
        *why = MODEL_FAIL_TRANSIENT;
        return fawn_err(
            FAWN_EBUSY,
            "model %s: temporarily unavailable after repeated failures (retry in %lld s)",
            cfg->name, (long long)((wait_ms + 999) / 1000));
    }
    int r = complete_attempts(out, why, cfg, messages, tools, &h, cancel);
    if (breaker)
        model_breaker_record(breaker, r == 0 ? MODEL_OK : *why, h.now_ms(h.clock_ctx));
    return r;
}
