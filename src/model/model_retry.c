/* Failure classification, retry policy and circuit breaker for model calls. */
#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "model/model.h"
#include "base/json.h"

/* 1000 ms: base of the decorrelated jitter. */
#define MODEL_BACKOFF_BASE_MS 1000
/* 5000 ms: base for burst rate limits, which need longer to clear. */
#define MODEL_BACKOFF_BURST_BASE_MS 5000
/* 8000 ms: ceiling of the jitter. */
#define MODEL_BACKOFF_CAP_MS 8000
/* 50 ms: slice of the default sleep; bounds how late cancellation is seen. */
#define MODEL_SLEEP_SLICE_MS 50
/* 10^9 s (~31 years): larger delta-seconds are clamped before converting to ms. */
#define MODEL_RETRY_AFTER_SECONDS_MAX 1000000000LL

const char *model_failure_name(enum model_failure why) {
    switch (why) {
    case MODEL_OK: return "ok";
    case MODEL_FAIL_QUOTA: return "quota";
    case MODEL_FAIL_AUTH: return "auth";
    case MODEL_FAIL_BURST: return "burst";
    case MODEL_FAIL_TRANSIENT: return "transient";
    case MODEL_FAIL_STALLED: return "stalled";
    case MODEL_FAIL_CANCELLED: return "cancelled";
    case MODEL_FAIL_FATAL: return "fatal";
    }
    return "fatal";
}

/* Classification of an error response, first matching row wins. "code" is
 * error.code or error.type of the OpenAI-style body {"error":{...}}; status 0
 * is an error object sent inside a 200 event stream.
 *
 *   status                 | code / type                                 | class
 *   -----------------------+---------------------------------------------+----------
 *   any                    | insufficient_quota, billing_hard_limit_     | quota
 *                          | reached, billing_not_active, quota_exceeded |
 *   402                    | any                                         | quota
 *   401, 403               | any                                         | auth
 *   0                      | invalid_api_key, authentication_error,      | auth
 *                          | permission_error                            |
 *   429                    | any other                                   | burst
 *   0                      | rate_limit_exceeded, rate_limit_error       | burst
 *   408, 409, 425, 5xx, 0  | any other                                   | transient
 *   anything else          | any                                         | fatal
 */
static const char *const quota_codes[] = {"insufficient_quota", "billing_hard_limit_reached",
                                          "billing_not_active", "quota_exceeded", NULL};
static const char *const auth_codes[] = {"invalid_api_key", "authentication_error",
                                         "permission_error", NULL};
static const char *const burst_codes[] = {"rate_limit_exceeded", "rate_limit_error", NULL};

static bool code_in(const char *code, const char *type, const char *const *list) {
    for (size_t i = 0; list[i]; i++)
        if ((code && strcmp(code, list[i]) == 0) || (type && strcmp(type, list[i]) == 0))
            return true;
    return false;
}

enum model_failure model_classify_http(long status, const char *error_body, size_t len) {
    json_t *doc = error_body ? json_loadb(error_body, len, 0, NULL) : NULL;
    json_t *error = json_object_get(doc, "error");
    const char *code = json_string_value(json_object_get(error, "code"));
    const char *type = json_string_value(json_object_get(error, "type"));
    enum model_failure why;
    if (code_in(code, type, quota_codes) || status == 402)
        why = MODEL_FAIL_QUOTA;
    else if (status == 401 || status == 403 || (status == 0 && code_in(code, type, auth_codes)))
        why = MODEL_FAIL_AUTH;
    else if (status == 429 || (status == 0 && code_in(code, type, burst_codes)))
        why = MODEL_FAIL_BURST;
    else if (status == 0 || status == 408 || status == 409 || status == 425 ||
             (status >= 500 && status <= 599))
        why = MODEL_FAIL_TRANSIENT;
    else
        why = MODEL_FAIL_FATAL;
    json_decref(doc);
    return why;
}

int model_attempt_budget(enum model_failure why) {
    switch (why) {
    case MODEL_FAIL_TRANSIENT: return 3;
    case MODEL_FAIL_BURST:
    case MODEL_FAIL_STALLED: return 2;
    default: return 1;
    }
}

int64_t model_parse_retry_after(const char *value, int64_t now_wall_ms) {
    while (*value == ' ' || *value == '\t')
        value++;
    if (isdigit((unsigned char)*value)) {
        long long seconds = 0;
        const char *p = value;
        for (; isdigit((unsigned char)*p); p++)
            if (seconds < MODEL_RETRY_AFTER_SECONDS_MAX)
                seconds = seconds * 10 + (*p - '0');
        while (*p == ' ' || *p == '\t')
            p++;
        if (*p != '\0')
            return -1;
        return (seconds < MODEL_RETRY_AFTER_SECONDS_MAX ? seconds : MODEL_RETRY_AFTER_SECONDS_MAX) * 1000;
    }
    time_t when = curl_getdate(value, NULL);
    if (when == (time_t)-1)
        return -1;
    int64_t ms = (int64_t)when * 1000 - now_wall_ms;
    return ms > 0 ? ms : 0;
}

int64_t model_backoff_ms(enum model_failure why, int64_t previous_ms, uint64_t random) {
    int64_t base = why == MODEL_FAIL_BURST ? MODEL_BACKOFF_BURST_BASE_MS : MODEL_BACKOFF_BASE_MS;
    int64_t high = previous_ms > MODEL_BACKOFF_CAP_MS ? MODEL_BACKOFF_CAP_MS * 3 : previous_ms * 3;
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
                      enum model_failure why, int64_t retry_after_ms, int code, const char *failure) {
    if (retry_after_ms > MODEL_RETRY_AFTER_MAX_MS)
        return fawn_err(code, "%s (the server asked to wait %lld s)", failure,
                        (long long)(retry_after_ms / 1000));
    *wait_ms = retry_after_ms >= 0 ? retry_after_ms : model_backoff_ms(why, *previous_ms, h->random(h->clock_ctx));
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
            return fawn_err(FAWN_ECANCELED, "model %s: cancelled while waiting to retry", cfg->name);
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
        return fawn_err(FAWN_EBUSY,
                        "model %s: temporarily unavailable after repeated failures (retry in %lld s)",
                        cfg->name, (long long)((wait_ms + 999) / 1000));
    }
    int r = complete_attempts(out, why, cfg, messages, tools, &h, cancel);
    if (breaker)
        model_breaker_record(breaker, r == 0 ? MODEL_OK : *why, h.now_ms(h.clock_ctx));
    return r;
}
