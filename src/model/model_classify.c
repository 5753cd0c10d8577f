/* Failure classes: names, the classification of an error response, and the
 * Retry-After value a server sends with it. Calls nothing else in src/model:
 * the single attempt (model_openai.c) and the retry loop (model_retry.c)
 * both call down into it. */
#include <ctype.h>
#include <curl/curl.h>
#include <string.h>
#include <time.h>

#include "model/model.h"

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
        return (seconds < MODEL_RETRY_AFTER_SECONDS_MAX ? seconds : MODEL_RETRY_AFTER_SECONDS_MAX) *
               1000;
    }
    time_t when = curl_getdate(value, NULL);
    if (when == (time_t)-1)
        return -1;
    int64_t delta_s = (int64_t)when - now_wall_ms / 1000;
    if (delta_s >= MODEL_RETRY_AFTER_SECONDS_MAX)
        return (int64_t)MODEL_RETRY_AFTER_SECONDS_MAX * 1000;
    if (delta_s < 0)
        return 0;
    int64_t ms = (int64_t)when * 1000 - now_wall_ms;
    return ms > 0 ? ms : 0;
}
