/* Feishu/Lark open platform answers: {code, msg, ...} read defensively. */
#include "channels/feishu_internal.h"

#include <inttypes.h>
#include <string.h>

#include "base/json.h"

/* Characters of the platform's msg quoted in an error: enough to act on. */
#define FEISHU_MSG_SHOWN 200

static void jsonp_decref(json_t **j) { json_decref(*j); }
#define _cleanup_json_ __attribute__((cleanup(jsonp_decref)))

/* The codes fawn acts on; every other non-zero code is FAWN_EPROTO. */
static const struct {
    int64_t code;
    int err;
} code_errors[] = {
    {99991661, FAWN_EPERM}, /* access token missing */
    {99991663, FAWN_EPERM}, /* tenant access token invalid */
    {99991668, FAWN_EPERM}, /* access token invalid */
    {99991677, FAWN_EPERM}, /* access token expired */
    {99991672, FAWN_EPERM}, /* the app lacks the scope */
    {10003, FAWN_EPERM},    /* app_id or app_secret invalid (token call) */
    {10014, FAWN_EPERM},    /* app secret invalid */
    {230002, FAWN_EPERM},   /* the bot is not in the chat */
    {230027, FAWN_EPERM},   /* no permission on the chat or message */
    {99991400, FAWN_EBUSY}, /* request rate limited */
    {230020, FAWN_EBUSY},   /* message rate limited */
    {230025, FAWN_E2BIG},   /* message content too long */
    {234006, FAWN_E2BIG},   /* file larger than the platform accepts */
    {230011, FAWN_ENOENT},  /* the message was recalled */
};

bool feishu_code_is_token_invalid(int64_t code) {
    return code == 99991661 || code == 99991663 || code == 99991668 || code == 99991677;
}

static int code_error(int64_t code) {
    for (size_t i = 0; i < ARRAY_LEN(code_errors); i++)
        if (code_errors[i].code == code)
            return code_errors[i].err;
    return FAWN_EPROTO;
}

static int status_error(long status) {
    if (status == 401 || status == 403)
        return FAWN_EPERM;
    if (status == 404)
        return FAWN_ENOENT;
    if (status == 413)
        return FAWN_E2BIG;
    if (status == 429)
        return FAWN_EBUSY;
    return FAWN_EPROTO;
}

int feishu_reply_check(json_t **out_obj, const char *what, long http_status, const char *body,
                       size_t len) {
    if (out_obj)
        *out_obj = NULL;
    _cleanup_json_ json_t *o = NULL;
    if (len > FEISHU_REPLY_MAX)
        return fawn_err(FAWN_E2BIG, "feishu %s: answer larger than %zu bytes", what,
                        FEISHU_REPLY_MAX);
    if (fjson_parse_object(&o, body, len) < 0) {
        if (http_status >= 200 && http_status < 300)
            return fawn_err(FAWN_EPROTO, "feishu %s: the answer is not a JSON object", what);
        return fawn_err(status_error(http_status), "feishu %s: HTTP %ld", what, http_status);
    }
    const json_t *code = json_object_get(o, "code");
    const char *msg = json_string_value(json_object_get(o, "msg"));
    if (!json_is_integer(code)) {
        if (http_status >= 200 && http_status < 300)
            return fawn_err(FAWN_EPROTO, "feishu %s: the answer has no code", what);
        return fawn_err(status_error(http_status), "feishu %s: HTTP %ld", what, http_status);
    }
    int64_t c = json_integer_value(code);
    if (c != 0) {
        int err = code_error(c);
        if (err == FAWN_EPROTO && http_status >= 300)
            err = status_error(http_status);
        return fawn_err(err, "feishu %s: code %" PRId64 ": %.*s", what, c, FEISHU_MSG_SHOWN,
                        msg ? msg : "(no message)");
    }
    if (http_status < 200 || http_status >= 300)
        return fawn_err(status_error(http_status), "feishu %s: HTTP %ld with code 0", what,
                        http_status);
    if (out_obj)
        *out_obj = steal_ptr(o);
    return 0;
}

int feishu_token_reply_parse(char **out_token, int64_t *out_expire_s, long http_status,
                             const char *body, size_t len) {
    *out_token = NULL;
    *out_expire_s = 0;
    _cleanup_json_ json_t *o = NULL;
    int r = feishu_reply_check(&o, "tenant_access_token", http_status, body, len);
    if (r < 0)
        return r;
    const char *token = NULL;
    int64_t expire = 0;
    /* A token is an opaque printable string ("t-..."); it goes into a header. */
    if (fjson_get_string(&token, o, "tenant_access_token", true) < 0 ||
        fjson_get_int(&expire, o, "expire", true, 1, INT32_MAX) < 0)
        return fawn_err(FAWN_EPROTO, "feishu tenant_access_token: %s", fawn_errmsg());
    size_t n = strnlen(token, FEISHU_TOKEN_MAX + 1);
    if (n == 0 || n > FEISHU_TOKEN_MAX)
        return fawn_err(FAWN_EPROTO, "feishu tenant_access_token: the token has a bad length");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)token[i] <= ' ' || (unsigned char)token[i] >= 0x7f)
            return fawn_err(FAWN_EPROTO,
                            "feishu tenant_access_token: the token has a bad character");
    *out_token = strdup(token);
    if (!*out_token)
        return fawn_err(FAWN_ENOMEM, "out of memory reading a feishu token");
    *out_expire_s = expire;
    return 0;
}

int feishu_data_id_parse(char **out, const char *what, const char *field, long http_status,
                         const char *body, size_t len) {
    *out = NULL;
    _cleanup_json_ json_t *o = NULL;
    int r = feishu_reply_check(&o, what, http_status, body, len);
    if (r < 0)
        return r;
    const char *id = json_string_value(json_object_get(json_object_get(o, "data"), field));
    if (!feishu_id_valid(id))
        return fawn_err(FAWN_EPROTO, "feishu %s: data.%s missing or not a valid id", what, field);
    *out = strdup(id);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory reading a feishu answer");
}
