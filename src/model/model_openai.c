/* One streamed OpenAI-compatible chat completion through libcurl. Calls down
 * into sse.c (the stream) and model_classify.c (failure classes, Retry-After);
 * the retry loop in model_retry.c calls this file, never the reverse. */
#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "base/json.h"
#include "model/model_internal.h"

/* 50 ms: poll slice of the transfer loop; bounds how late cancellation is seen. */
#define MODEL_POLL_MS 50
/* 240 s: default stall timeout (stream_chunk_timeout of the configuration). */
#define MODEL_STALL_DEFAULT_MS 240000
/* 15 min: default ceiling of one attempt (long generations stream for minutes). */
#define MODEL_TOTAL_DEFAULT_MS 900000
/* 30 s: TCP and TLS connection setup. */
#define MODEL_CONNECT_MS 30000
/* 256 bytes: tool call ids and function names are short identifiers. */
#define MODEL_TOOL_ID_MAX 256
/* 2048 bytes: longest base_url accepted. */
#define MODEL_URL_MAX 2048
/* 200 bytes: how much of a server's error message is quoted. */
#define MODEL_QUOTE_MAX 200

typedef struct tool_acc {
    fbuf id, name, args;
} tool_acc;

typedef struct attempt {
    const model_config *cfg;
    model_delta_fn on_delta;
    void *ctx;
    const atomic_bool *cancel;
    CURL *curl;
    sse_parser sse;
    fbuf content;
    tool_acc tools[MODEL_TOOL_CALLS_MAX];
    int ntools; /* highest tool index seen + 1 */
    fbuf error_body;
    size_t received;
    int64_t start_ms, last_byte_ms;
    int64_t retry_after_ms, retry_after_ms_header;
    bool done;
    char finish_reason[32];
    int64_t prompt_tokens, completion_tokens;
    int fail_code; /* set once by a callback; the message is in fawn_errmsg */
    enum model_failure fail_why;
} attempt;

void model_reply_clear(model_reply *reply) {
    json_decref(reply->message);
    memset(reply, 0, sizeof *reply);
    reply->prompt_tokens = -1;
    reply->completion_tokens = -1;
}

/* Records the first failure of a callback; later ones keep the first. */
static int attempt_fail(attempt *a, enum model_failure why, int code) {
    if (!a->fail_code) {
        a->fail_code = code;
        a->fail_why = why;
    }
    return a->fail_code;
}

static const char *model_label(const attempt *a) { return a->cfg->name; }

/* The error code of a server-reported failure class. */
static int failure_code(enum model_failure why) {
    if (why == MODEL_FAIL_AUTH || why == MODEL_FAIL_QUOTA)
        return FAWN_EPERM;
    return why == MODEL_FAIL_BURST ? FAWN_EBUSY : FAWN_EIO;
}

/* ---- stream chunks ---------------------------------------------------------- */

static int acc_append(attempt *a, fbuf *b, json_t *piece, const char *what) {
    if (!json_is_string(piece))
        return 0;
    int r = fbuf_append(b, json_string_value(piece), json_string_length(piece));
    if (r == FAWN_E2BIG)
        return attempt_fail(a, MODEL_FAIL_FATAL,
                            fawn_err(FAWN_E2BIG, "model %s: %s longer than %zu bytes",
                                     model_label(a), what, b->limit));
    return r < 0 ? attempt_fail(a, MODEL_FAIL_FATAL, r) : 0;
}

static int tool_index(attempt *a, json_t *call) {
    json_t *index = json_object_get(call, "index");
    if (json_is_integer(index))
        return json_integer_value(index) < 0 || json_integer_value(index) >= MODEL_TOOL_CALLS_MAX
                   ? -1
                   : (int)json_integer_value(index);
    /* Providers that omit the index send one call per id. */
    const char *id = json_string_value(json_object_get(call, "id"));
    if (id && *id)
        return a->ntools < MODEL_TOOL_CALLS_MAX ? a->ntools : -1;
    return a->ntools > 0 ? a->ntools - 1 : 0;
}

static void tool_acc_init(tool_acc *t) {
    t->id.limit = MODEL_TOOL_ID_MAX;
    t->name.limit = MODEL_TOOL_ID_MAX;
    t->args.limit = MODEL_TOOL_ARGS_MAX;
}

static int attempt_tool_delta(attempt *a, json_t *call) {
    if (!json_is_object(call))
        return 0;
    int i = tool_index(a, call);
    if (i < 0)
        return attempt_fail(a, MODEL_FAIL_FATAL,
                            fawn_err(FAWN_E2BIG, "model %s: more than %d tool calls in one reply",
                                     model_label(a), MODEL_TOOL_CALLS_MAX));
    while (a->ntools <= i)
        tool_acc_init(&a->tools[a->ntools++]);
    tool_acc *t = &a->tools[i];
    json_t *id = json_object_get(call, "id");
    if (t->id.len == 0 && json_is_string(id) && acc_append(a, &t->id, id, "tool call id"))
        return a->fail_code;
    json_t *fn = json_object_get(call, "function");
    json_t *name = json_object_get(fn, "name");
    /* Some providers repeat the whole name in every chunk. */
    bool repeated = json_is_string(name) && t->name.len == json_string_length(name) &&
                    (t->name.len == 0 ||
                     memcmp(t->name.data, json_string_value(name), t->name.len) == 0);
    if (!repeated && acc_append(a, &t->name, name, "tool name"))
        return a->fail_code;
    return acc_append(a, &t->args, json_object_get(fn, "arguments"), "tool arguments");
}

static int attempt_choice(attempt *a, json_t *choice) {
    json_t *delta = json_object_get(choice, "delta");
    json_t *content = json_object_get(delta, "content");
    if (json_is_string(content) && json_string_length(content) > 0) {
        if (acc_append(a, &a->content, content, "reply"))
            return a->fail_code;
        if (a->on_delta)
            a->on_delta(a->ctx, json_string_value(content), json_string_length(content));
    }
    json_t *calls = json_object_get(delta, "tool_calls");
    size_t n = json_array_size(calls);
    for (size_t k = 0; k < n; k++)
        if (attempt_tool_delta(a, json_array_get(calls, k)))
            return a->fail_code;
    const char *finish = json_string_value(json_object_get(choice, "finish_reason"));
    if (finish)
        snprintf(a->finish_reason, sizeof a->finish_reason, "%s", finish);
    return 0;
}

/* A token count the server sent: 0 … MODEL_USAGE_TOKENS_MAX, else -1 (not
 * believed, as if not sent). */
static int64_t usage_count(json_int_t n) {
    return n >= 0 && n <= MODEL_USAGE_TOKENS_MAX ? (int64_t)n : -1;
}

static void attempt_usage(attempt *a, json_t *usage) {
    json_t *prompt = json_object_get(usage, "prompt_tokens");
    json_t *completion = json_object_get(usage, "completion_tokens");
    if (json_is_integer(prompt))
        a->prompt_tokens = usage_count(json_integer_value(prompt));
    if (json_is_integer(completion))
        a->completion_tokens = usage_count(json_integer_value(completion));
}

/* Copies a server's message into out with control characters replaced, cut
 * to MODEL_QUOTE_MAX bytes. */
static void quote_message(char *out, size_t size, const char *msg) {
    size_t n = 0;
    for (; msg && msg[n] && n + 1 < size && n < MODEL_QUOTE_MAX; n++)
        out[n] = iscntrl((unsigned char)msg[n]) ? ' ' : msg[n];
    out[n] = '\0';
}

static int attempt_stream_error(attempt *a, json_t *error) {
    const char *text = json_string_value(json_object_get(error, "message"));
    char quoted[MODEL_QUOTE_MAX + 1];
    quote_message(quoted, sizeof quoted, text ? text : "error in stream");
    json_t *doc = json_pack("{s:O}", "error", error);
    _cleanup_free_ char *body = doc ? fjson_dump(doc) : NULL;
    json_decref(doc);
    enum model_failure why = body ? model_classify_http(0, body, strlen(body))
                                  : MODEL_FAIL_TRANSIENT;
    return attempt_fail(
        a, why,
        fawn_err(failure_code(why), "model %s: error in stream: %s", model_label(a), quoted));
}

static int attempt_chunk(attempt *a, json_t *chunk) {
    json_t *error = json_object_get(chunk, "error");
    if (json_is_object(error))
        return attempt_stream_error(a, error);
    json_t *usage = json_object_get(chunk, "usage");
    if (json_is_object(usage))
        attempt_usage(a, usage);
    json_t *choice = json_array_get(json_object_get(chunk, "choices"), 0);
    return json_is_object(choice) ? attempt_choice(a, choice) : 0;
}

static int attempt_on_event(void *ctx, const char *event, const char *data, size_t len) {
    attempt *a = ctx;
    if (a->done)
        return 0;
    if (len == 6 && memcmp(data, "[DONE]", 6) == 0) {
        a->done = true;
        return 0;
    }
    json_error_t jerr;
    json_t *chunk = json_loadb(data, len, JSON_REJECT_DUPLICATES, &jerr);
    if (!json_is_object(chunk)) {
        json_decref(chunk);
        return attempt_fail(
            a, MODEL_FAIL_TRANSIENT,
            fawn_err(FAWN_EPROTO, "model %s: stream chunk is not a JSON object", model_label(a)));
    }
    int r = attempt_chunk(a, chunk);
    json_decref(chunk);
    return r;
}

/* ---- libcurl callbacks ------------------------------------------------------ */

static long attempt_status(const attempt *a) {
    long status = 0;
    curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &status);
    return status;
}

/* Takes n bytes of a response with this status: an error body is kept, a
 * stream is parsed. Returns n, or 0 once the attempt has failed. */
static size_t attempt_body(attempt *a, long status, const char *ptr, size_t n) {
    a->last_byte_ms = fawn_now_ms();
    a->received += n;
    if (a->received > MODEL_STREAM_MAX) {
        attempt_fail(a, MODEL_FAIL_FATAL,
                     fawn_err(FAWN_E2BIG, "model %s: response larger than %zu bytes",
                              model_label(a), (size_t)MODEL_STREAM_MAX));
        return 0;
    }
    if (status < 200 || status > 299) {
        size_t room = MODEL_ERROR_BODY_MAX - a->error_body.len;
        if (fbuf_append(&a->error_body, ptr, n < room ? n : room) < 0) {
            attempt_fail(a, MODEL_FAIL_FATAL, fawn_err(FAWN_ENOMEM, "out of memory"));
            return 0;
        }
        return n;
    }
    int r = sse_feed(&a->sse, ptr, n);
    if (r != 0 && !a->fail_code) { /* a limit of the SSE parser itself */
        char reason[256];
        snprintf(reason, sizeof reason, "%s", fawn_errmsg());
        attempt_fail(a, MODEL_FAIL_FATAL, fawn_err(r, "model %s: %s", model_label(a), reason));
    }
    return r == 0 ? n : 0;
}

static size_t attempt_on_body(char *ptr, size_t size, size_t nmemb, void *ctx) {
    attempt *a = ctx;
    return attempt_body(a, attempt_status(a), ptr, size * nmemb);
}

/* The value of header `name` in line (trimmed, into out), or false. */
static bool header_value(char *out, size_t size, const char *line, size_t len, const char *name) {
    size_t name_len = strlen(name);
    if (len <= name_len || strncasecmp(line, name, name_len) != 0 || line[name_len] != ':')
        return false;
    const char *v = line + name_len + 1, *end = line + len;
    while (v < end && (*v == ' ' || *v == '\t'))
        v++;
    while (end > v && isspace((unsigned char)end[-1]))
        end--;
    size_t n = (size_t)(end - v) < size - 1 ? (size_t)(end - v) : size - 1;
    memcpy(out, v, n);
    out[n] = '\0';
    return true;
}

static size_t attempt_on_header(char *line, size_t size, size_t nmemb, void *ctx) {
    attempt *a = ctx;
    size_t n = size * nmemb;
    char value[128];
    a->last_byte_ms = fawn_now_ms();
    if (n >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        a->retry_after_ms = -1;
        a->retry_after_ms_header = -1;
    } else if (header_value(value, sizeof value, line, n, "retry-after-ms")) {
        char *end;
        double ms = strtod(value, &end);
        if (end != value && *end == '\0' && ms >= 0 && ms < 1e12)
            a->retry_after_ms_header = (int64_t)ms;
    } else if (header_value(value, sizeof value, line, n, "retry-after")) {
        a->retry_after_ms = model_parse_retry_after(value, fawn_wall_ms());
    }
    return n;
}

static int attempt_on_progress(void *ctx, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal,
                               curl_off_t ulnow) {
    attempt *a = ctx;
    if (a->fail_code)
        return 1;
    if (!a->cancel || !atomic_load(a->cancel))
        return 0;
    attempt_fail(a, MODEL_FAIL_CANCELLED,
                 fawn_err(FAWN_ECANCELED, "model %s: request cancelled", model_label(a)));
    return 1;
}

/* ---- request ------------------------------------------------------------------ */

static int build_body(char **out, const model_config *cfg, const json_t *messages,
                      const json_t *tools) {
    json_t *body = json_is_object(cfg->extra_body) ? json_deep_copy(cfg->extra_body)
                                                   : json_object();
    if (!body)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = json_object_set_new(body, "model", json_string(cfg->model));
    r |= json_object_set(body, "messages", (json_t *)messages);
    if (json_array_size(tools) > 0)
        r |= json_object_set(body, "tools", (json_t *)tools);
    r |= json_object_set_new(body, "stream", json_true());
    r |= json_object_set_new(body, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (cfg->max_tokens > 0)
        r |= json_object_set_new(body, "max_tokens", json_integer(cfg->max_tokens));
    *out = r ? NULL : fjson_dump(body);
    json_decref(body);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int check_config(const model_config *cfg, const json_t *messages) {
    if (!cfg->name || !*cfg->name)
        return fawn_err(FAWN_EINVAL, "model configuration without a name");
    const char *label = cfg->name;
    if (!cfg->model || !*cfg->model || !cfg->base_url)
        return fawn_err(FAWN_EINVAL, "model %s: model and base_url are required", label);
    if (strlen(cfg->base_url) > MODEL_URL_MAX)
        return fawn_err(FAWN_EINVAL, "model %s: base_url longer than %d bytes", label,
                        MODEL_URL_MAX);
    if (cfg->api_key && strpbrk(cfg->api_key, "\r\n"))
        return fawn_err(FAWN_EINVAL, "model %s: api_key contains a line break", label);
    if (!json_is_array(messages))
        return fawn_err(FAWN_EINVAL, "model %s: messages must be an array", label);
    return 0;
}

static struct curl_slist *build_headers(const model_config *cfg) {
    struct curl_slist *list = NULL, *next;
    const char *fixed[] = {"Content-Type: application/json", "Accept: text/event-stream",
                           "Expect:"};
    for (size_t i = 0; i < ARRAY_LEN(fixed); i++) {
        if (!(next = curl_slist_append(list, fixed[i])))
            goto fail;
        list = next;
    }
    if (cfg->api_key && *cfg->api_key) {
        _cleanup_free_ char *auth = NULL;
        if (asprintf(&auth, "Authorization: Bearer %s", cfg->api_key) < 0 ||
            !(next = curl_slist_append(list, auth)))
            goto fail;
        list = next;
    }
    return list;
fail:
    curl_slist_free_all(list);
    return NULL;
}

static int setup_curl(attempt *a, const char *url, const char *body, struct curl_slist *headers,
                      char *errbuf) {
    CURL *h = a->curl;
    uint32_t stall = a->cfg->stall_timeout_ms ? a->cfg->stall_timeout_ms : MODEL_STALL_DEFAULT_MS;
    int r = 0;
    r |= curl_easy_setopt(h, CURLOPT_URL, url);
    r |= curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
    r |= curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    r |= curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    r |= curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body));
    r |= curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    r |= curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, attempt_on_body);
    r |= curl_easy_setopt(h, CURLOPT_WRITEDATA, a);
    r |= curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, attempt_on_header);
    r |= curl_easy_setopt(h, CURLOPT_HEADERDATA, a);
    r |= curl_easy_setopt(h, CURLOPT_XFERINFOFUNCTION, attempt_on_progress);
    r |= curl_easy_setopt(h, CURLOPT_XFERINFODATA, a);
    r |= curl_easy_setopt(h, CURLOPT_NOPROGRESS, 0L);
    r |= curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
    r |= curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS,
                          (long)(stall < MODEL_CONNECT_MS ? stall : MODEL_CONNECT_MS));
    r |= curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    return r ? fawn_err(FAWN_EIO, "model %s: cannot configure the HTTP client", model_label(a)) : 0;
}

/* Transport failures worth retrying: the server may answer next time. */
static bool curl_code_transient(CURLcode c) {
    switch (c) {
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_CONNECT:
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_HTTP3: return true;
    default: return false;
    }
}

/* Runs the transfer, watching the cancel flag, the stall and total timeouts. */
static int attempt_transfer(attempt *a, CURLcode *result) {
    CURLM *m = curl_multi_init();
    if (!m || curl_multi_add_handle(m, a->curl) != CURLM_OK) {
        curl_multi_cleanup(m);
        return fawn_err(FAWN_ENOMEM, "model %s: cannot start the HTTP client", model_label(a));
    }
    int64_t stall = a->cfg->stall_timeout_ms ? a->cfg->stall_timeout_ms : MODEL_STALL_DEFAULT_MS;
    int64_t total = a->cfg->total_timeout_ms ? a->cfg->total_timeout_ms : MODEL_TOTAL_DEFAULT_MS;
    int running = 1;
    *result = CURLE_OK;
    while (running && !a->fail_code) {
        if (curl_multi_perform(m, &running) != CURLM_OK) {
            attempt_fail(a, MODEL_FAIL_TRANSIENT,
                         fawn_err(FAWN_EIO, "model %s: HTTP client failure", model_label(a)));
            break;
        }
        int64_t now = fawn_now_ms();
        if (a->fail_code || !running)
            break;
        if (a->cancel && atomic_load(a->cancel))
            attempt_fail(a, MODEL_FAIL_CANCELLED,
                         fawn_err(FAWN_ECANCELED, "model %s: request cancelled", model_label(a)));
        else if (now - a->last_byte_ms >= stall)
            attempt_fail(a, MODEL_FAIL_STALLED,
                         fawn_err(FAWN_ETIMEDOUT, "model %s: stream stalled (no data for %lld ms)",
                                  model_label(a), (long long)stall));
        else if (now - a->start_ms >= total)
            attempt_fail(a, MODEL_FAIL_TRANSIENT,
                         fawn_err(FAWN_ETIMEDOUT, "model %s: no complete reply within %lld ms",
                                  model_label(a), (long long)total));
        else
            curl_multi_poll(m, NULL, 0, MODEL_POLL_MS, NULL);
    }
    int pending;
    for (CURLMsg *msg; (msg = curl_multi_info_read(m, &pending));)
        if (msg->msg == CURLMSG_DONE)
            *result = msg->data.result;
    curl_multi_remove_handle(m, a->curl);
    curl_multi_cleanup(m);
    return 0;
}

/* ---- outcome ------------------------------------------------------------------ */

static int attempt_http_error(attempt *a, enum model_failure *why, long status) {
    const char *body = a->error_body.data ? a->error_body.data : "";
    *why = model_classify_http(status, body, a->error_body.len);
    json_t *doc = json_loadb(body, a->error_body.len, 0, NULL);
    json_t *error = json_object_get(doc, "error");
    const char *text = json_string_value(json_object_get(error, "message"));
    if (!text)
        text = json_string_value(error);
    char quoted[MODEL_QUOTE_MAX + 1];
    quote_message(quoted, sizeof quoted, text ? text : "");
    json_decref(doc);
    return fawn_err(failure_code(*why), "model %s: HTTP %ld%s%s", model_label(a), status,
                    quoted[0] ? ": " : "", quoted);
}

static int attempt_tool_json(json_t **out, attempt *a, tool_acc *t) {
    char generated[32];
    const char *id = t->id.data;
    if (!id || !*id) {
        char hex[25];
        fawn_random_hex(hex, 12);
        snprintf(generated, sizeof generated, "call_%s", hex);
        id = generated;
    }
    if (t->name.len == 0) {
        *out = NULL;
        return fawn_err(FAWN_EPROTO, "model %s: tool call without a function name", model_label(a));
    }
    *out = json_pack("{s:s, s:s, s:{s:s%, s:s%}}", "id", id, "type", "function", "function", "name",
                     t->name.data, t->name.len, "arguments", t->args.data ? t->args.data : "",
                     t->args.len);
    return *out ? 0
                : fawn_err(FAWN_EPROTO, "model %s: tool call is not valid UTF-8", model_label(a));
}

static int attempt_message(json_t **out, attempt *a) {
    json_t *msg = json_pack("{s:s, s:s%}", "role", "assistant", "content",
                            a->content.data ? a->content.data : "", a->content.len);
    json_t *calls = json_array();
    if (!msg || !calls) {
        json_decref(msg);
        json_decref(calls);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    for (int i = 0; i < a->ntools; i++) {
        json_t *call;
        int r = attempt_tool_json(&call, a, &a->tools[i]);
        if (r < 0 || json_array_append_new(calls, call) < 0) {
            json_decref(msg);
            json_decref(calls);
            return r < 0 ? r : fawn_err(FAWN_ENOMEM, "out of memory");
        }
    }
    if (json_array_size(calls) > 0)
        json_object_set(msg, "tool_calls", calls);
    json_decref(calls);
    *out = msg;
    return 0;
}

/* What a response with this status, read whole, makes: the reply, or the
 * failure a callback recorded, the HTTP error or a broken stream. */
static int attempt_response_outcome(model_reply *out, enum model_failure *why, attempt *a,
                                    long status) {
    if (a->fail_code) {
        *why = a->fail_why;
        return a->fail_code;
    }
    if (status < 200 || status > 299)
        return attempt_http_error(a, why, status);
    *why = MODEL_FAIL_TRANSIENT;
    if (!a->done && !a->finish_reason[0])
        return fawn_err(FAWN_EPROTO, "model %s: stream ended before the reply was complete",
                        model_label(a));
    if (a->content.len == 0 && a->ntools == 0)
        return fawn_err(FAWN_EPROTO, "model %s: empty reply", model_label(a));
    int r = attempt_message(&out->message, a);
    if (r < 0)
        return r;
    snprintf(out->finish_reason, sizeof out->finish_reason, "%s", a->finish_reason);
    out->prompt_tokens = a->prompt_tokens;
    out->completion_tokens = a->completion_tokens;
    *why = MODEL_OK;
    return 0;
}

static int attempt_outcome(model_reply *out, enum model_failure *why, attempt *a, CURLcode result,
                           const char *errbuf) {
    if (!a->fail_code && result != CURLE_OK) {
        *why = curl_code_transient(result) ? MODEL_FAIL_TRANSIENT : MODEL_FAIL_FATAL;
        return fawn_err(result == CURLE_OPERATION_TIMEDOUT ? FAWN_ETIMEDOUT : FAWN_EIO,
                        "model %s: %s", model_label(a),
                        errbuf[0] ? errbuf : curl_easy_strerror(result));
    }
    return attempt_response_outcome(out, why, a, attempt_status(a));
}

static void attempt_free(attempt *a) {
    sse_free(&a->sse);
    fbuf_free(&a->content);
    fbuf_free(&a->error_body);
    for (int i = 0; i < a->ntools; i++) {
        fbuf_free(&a->tools[i].id);
        fbuf_free(&a->tools[i].name);
        fbuf_free(&a->tools[i].args);
    }
    if (a->curl)
        curl_easy_cleanup(a->curl);
}

static int attempt_run(model_reply *out, enum model_failure *why, attempt *a,
                       const json_t *messages, const json_t *tools) {
    const model_config *cfg = a->cfg;
    _cleanup_free_ char *body = NULL, *url = NULL;
    int r = build_body(&body, cfg, messages, tools);
    if (r < 0)
        return r;
    size_t base_len = strlen(cfg->base_url);
    while (base_len > 0 && cfg->base_url[base_len - 1] == '/')
        base_len--;
    if (asprintf(&url, "%.*s/chat/completions", (int)base_len, cfg->base_url) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    struct curl_slist *headers = build_headers(cfg);
    if (!headers || !(a->curl = curl_easy_init())) {
        curl_slist_free_all(headers);
        return fawn_err(FAWN_ENOMEM, "model %s: cannot start the HTTP client", model_label(a));
    }
    char errbuf[CURL_ERROR_SIZE] = "";
    CURLcode result = CURLE_OK;
    r = setup_curl(a, url, body, headers, errbuf);
    if (r == 0)
        r = attempt_transfer(a, &result);
    if (r == 0)
        r = attempt_outcome(out, why, a, result, errbuf);
    curl_slist_free_all(headers);
    return r;
}

/* A fresh attempt for cfg; NULL when out of memory. */
static attempt *attempt_new(const model_config *cfg, model_delta_fn on_delta, void *ctx,
                            const atomic_bool *cancel) {
    attempt *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->cfg = cfg;
    a->on_delta = on_delta;
    a->ctx = ctx;
    a->cancel = cancel;
    a->content.limit = MODEL_CONTENT_MAX;
    a->error_body.limit = MODEL_ERROR_BODY_MAX;
    a->start_ms = a->last_byte_ms = fawn_now_ms();
    a->retry_after_ms = a->retry_after_ms_header = -1;
    a->prompt_tokens = a->completion_tokens = -1;
    sse_init(&a->sse, attempt_on_event, a);
    return a;
}

/* Ends an attempt that came to r: the wait the server asked for, the reply
 * cleared on failure, the attempt freed. Returns r. */
static int attempt_end(model_reply *out, int64_t *retry_after_ms, attempt *a, int r) {
    *retry_after_ms = a->retry_after_ms_header >= 0 ? a->retry_after_ms_header : a->retry_after_ms;
    if (r < 0)
        model_reply_clear(out);
    attempt_free(a);
    free(a);
    return r;
}

int model_attempt(model_reply *out, enum model_failure *why, int64_t *retry_after_ms,
                  const model_config *cfg, const json_t *messages, const json_t *tools,
                  model_delta_fn on_delta, void *ctx, const atomic_bool *cancel) {
    *out = (model_reply){.prompt_tokens = -1, .completion_tokens = -1};
    *why = MODEL_FAIL_FATAL;
    *retry_after_ms = -1;
    int r = check_config(cfg, messages);
    if (r < 0)
        return r;
    if (fawn_curl_init() < 0)
        return fawn_err(FAWN_EIO, "model %s: HTTP client initialization failed", cfg->name);
    attempt *a = attempt_new(cfg, on_delta, ctx, cancel);
    if (!a)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (cancel && atomic_load(cancel)) {
        *why = MODEL_FAIL_CANCELLED;
        r = fawn_err(FAWN_ECANCELED, "model %s: request cancelled", model_label(a));
    } else {
        r = attempt_run(out, why, a, messages, tools);
    }
    return attempt_end(out, retry_after_ms, a, r);
}

int model_response_read(model_reply *out, enum model_failure *why, int64_t *retry_after_ms,
                        const model_config *cfg, const model_response *resp,
                        model_delta_fn on_delta, void *ctx) {
    *out = (model_reply){.prompt_tokens = -1, .completion_tokens = -1};
    *why = MODEL_FAIL_FATAL;
    *retry_after_ms = -1;
    attempt *a = attempt_new(cfg, on_delta, ctx, NULL);
    if (!a)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t off = 0, n; off < resp->head_len; off += n) {
        const char *nl = memchr(resp->head + off, '\n', resp->head_len - off);
        n = nl ? (size_t)(nl - resp->head) + 1 - off : resp->head_len - off;
        attempt_on_header((char *)resp->head + off, 1, n, a);
    }
    if (resp->body_len > 0)
        attempt_body(a, resp->status, resp->body, resp->body_len);
    return attempt_end(out, retry_after_ms, a, attempt_response_outcome(out, why, a, resp->status));
}
