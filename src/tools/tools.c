/* The tool registry, structured status and the sandbox access tools share. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "tools/tools_internal.h"

static const tool_def *const builtin_tools[] = {
    &tool_bash,      &tool_ls,   &tool_read_file,     &tool_write_file,        &tool_str_replace,
    &tool_glob,      &tool_grep, &tool_present_files, &tool_ask_clarification, &tool_web_search,
    &tool_web_fetch,
};

size_t tool_count(void) { return ARRAY_LEN(builtin_tools); }

const tool_def *tool_at(size_t i) { return i < ARRAY_LEN(builtin_tools) ? builtin_tools[i] : NULL; }

const tool_def *tool_find(const char *name) {
    for (size_t i = 0; name && i < ARRAY_LEN(builtin_tools); i++)
        if (strcmp(builtin_tools[i]->name, name) == 0)
            return builtin_tools[i];
    return NULL;
}

bool tool_offered(const tool_def *t, const web_service *web) {
    return !t->offered || t->offered(web);
}

json_t *tool_openai_schema(const tool_def *t) {
    json_t *params = json_loads(t->parameters, 0, NULL);
    if (!params)
        return NULL;
    return json_pack("{s:s, s:{s:s, s:s, s:o}}", "type", "function", "function", "name", t->name,
                     "description", t->description, "parameters", params);
}

const char *tool_outcome_name(enum tool_outcome o) {
    static const char *const names[] = {"success", "error", "timeout", "denied", "cancelled"};
    return (unsigned)o < ARRAY_LEN(names) ? names[o] : "error";
}

json_t *tool_status_json(const tool_status *st) {
    json_t *j = json_pack(
        "{s:s, s:s?, s:o, s:b, s:I, s:b}", "status", tool_outcome_name(st->outcome), "error_type",
        st->error_type[0] ? st->error_type : NULL, "exit_code",
        st->exit_code >= 0 ? json_integer(st->exit_code) : json_null(), "recoverable",
        st->recoverable, "duration_ms", (json_int_t)st->duration_ms, "truncated", st->truncated);
    if (j && st->retry_after_ms > 0)
        json_object_set_new(j, "retry_after_ms", json_integer(st->retry_after_ms));
    return j;
}

void tool_result_clear(tool_result *r) {
    free(r->text);
    json_decref(r->facts);
    memset(r, 0, sizeof *r);
}

int tool_fail(tool_result *r, enum tool_outcome o, const char *error_type, bool recoverable,
              const char *fmt, ...) {
    free(r->text);
    va_list ap;
    va_start(ap, fmt);
    if (vasprintf(&r->text, fmt, ap) < 0)
        r->text = NULL;
    va_end(ap);
    r->status.outcome = o;
    snprintf(r->status.error_type, sizeof r->status.error_type, "%s", error_type);
    r->status.recoverable = recoverable;
    return r->text ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int tool_succeed(tool_result *r, char *text) {
    free(r->text);
    r->text = text;
    r->status.outcome = TOOL_SUCCESS;
    r->status.error_type[0] = '\0';
    r->status.recoverable = false;
    return text ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int tool_env_lease(sbx_lease **out, tool_env *env) {
    *out = NULL;
    if (!env->lease) {
        int r = sbx_acquire(&env->lease, env->sandboxes, &env->req);
        if (r < 0)
            return r;
        if (env->on_acquire)
            env->on_acquire(env->on_acquire_ctx, env);
    }
    *out = env->lease;
    return 0;
}

void tool_env_end(tool_env *env) {
    sbx_release(env->lease);
    env->lease = NULL;
}

int tool_box_call(json_t **reply, int *status, tool_env *env, const char *method, const char *path,
                  const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    sbx_lease *lease;
    int r = tool_env_lease(&lease, env);
    return r < 0 ? r : sbx_call(reply, status, lease, method, path, body, timeout_ms);
}

int tool_sandbox_failure(tool_result *out, int code) {
    if (code == FAWN_EPERM)
        return tool_fail(out, TOOL_DENIED, "denied", false, "Error: %s", fawn_errmsg());
    if (code == FAWN_ECANCELED)
        return tool_fail(out, TOOL_CANCELLED, "cancelled", false, "Error: cancelled");
    if (code == FAWN_ETIMEDOUT)
        return tool_fail(out, TOOL_TIMEOUT, "timeout", false,
                         "Error: the sandbox did not answer "
                         "in time: %s",
                         fawn_errmsg());
    return tool_fail(out, TOOL_ERROR, "sandbox", false, "Error: sandbox unavailable: %s",
                     fawn_errmsg());
}

int tool_box_failure(tool_result *out, int http_status, const json_t *reply) {
    const char *detail = json_string_value(json_object_get(reply, "detail"));
    detail = detail ? detail : "the sandbox refused the request";
    switch (http_status) {
    case 400: return tool_fail(out, TOOL_ERROR, "invalid_arguments", true, "Error: %s", detail);
    case 403: return tool_fail(out, TOOL_ERROR, "permission", true, "Error: %s", detail);
    case 404: return tool_fail(out, TOOL_ERROR, "not_found", true, "Error: %s", detail);
    case 409: return tool_fail(out, TOOL_ERROR, "conflict", true, "Error: %s", detail);
    case 413: return tool_fail(out, TOOL_ERROR, "too_large", true, "Error: %s", detail);
    default: return tool_fail(out, TOOL_ERROR, "sandbox", false, "Error: %s", detail);
    }
}

int tool_run(tool_result *out, tool_env *env, const char *name, const json_t *args) {
    memset(out, 0, sizeof *out);
    out->status.exit_code = -1;
    int64_t start = fawn_now_ms();
    const tool_def *t = tool_find(name);
    int r;
    if (!t || !tool_offered(t, env->web))
        r = tool_fail(out, TOOL_ERROR, "unknown_tool", true, "Error: Tool '%s' does not exist",
                      name ? name : "");
    else if (!json_is_object(args))
        r = tool_fail(out, TOOL_ERROR, "invalid_arguments", true,
                      "Error: the arguments of %s must be a JSON object", name);
    else if (env->cancel && atomic_load(env->cancel))
        r = tool_fail(out, TOOL_CANCELLED, "cancelled", false, "Error: cancelled");
    else
        r = t->run(out, env, args);
    out->status.duration_ms = fawn_now_ms() - start;
    return r;
}

char *tool_truncate_middle(const char *text, size_t max, bool *truncated) {
    size_t n = strlen(text);
    *truncated = n > max;
    if (n <= max)
        return strdup(text);
    size_t head = fawn_utf8_char_start(text, max / 2);
    size_t tail = fawn_utf8_char_start(text, n - (max - max / 2));
    char *out;
    if (asprintf(&out, "%.*s\n\n... [middle truncated: %zu chars omitted] ...\n\n%s", (int)head,
                 text, tail - head, text + tail) < 0)
        return NULL;
    return out;
}

/* What tool_arg_* returns once res holds its refusal: 1, or tool_fail's
 * failure to fill it. */
static int arg_refused(int filled) { return filled < 0 ? filled : 1; }

int tool_arg_string(const char **out, tool_result *res, const json_t *args, const char *key,
                    bool required) {
    json_t *v = json_object_get(args, key);
    *out = NULL;
    if (!v || json_is_null(v)) {
        if (!required)
            return 0;
        return arg_refused(tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                                     "Error: missing required argument '%s'", key));
    }
    if (!json_is_string(v)) {
        return arg_refused(tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                                     "Error: argument '%s' must be a string", key));
    }
    *out = json_string_value(v);
    return 0;
}

int tool_arg_int(int64_t *out, tool_result *res, const json_t *args, const char *key, int64_t dflt,
                 int64_t min, int64_t max) {
    json_t *v = json_object_get(args, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max) {
        return arg_refused(tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                                     "Error: argument '%s' must be an integer from %lld to %lld",
                                     key, (long long)min, (long long)max));
    }
    *out = json_integer_value(v);
    return 0;
}

int tool_arg_bool(bool *out, tool_result *res, const json_t *args, const char *key) {
    json_t *v = json_object_get(args, key);
    *out = false;
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        return arg_refused(tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                                     "Error: argument '%s' must be true or false", key));
    }
    *out = json_is_true(v);
    return 0;
}
