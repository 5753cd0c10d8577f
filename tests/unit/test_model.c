/* Tests for the model client: SSE parsing, one streamed attempt against a
 * fake OpenAI-compatible server on loopback, failure classification, the
 * retry policy and the circuit breaker. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <curl/curl.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "support.h"
#include "unit/fake_http.h"
#include "model/model_internal.h"
#include "base/json.h"

/* ---- SSE ------------------------------------------------------------------ */

typedef struct events {
    char log[4096]; /* "type=data|" per event, data bytes as sent (NUL included) */
    size_t used;
    int count;
    int stop_at; /* return 7 from the callback at this event (0 = never) */
} events;

static void log_bytes(events *e, const char *data, size_t len) {
    assert_true(len < sizeof e->log - e->used);
    memcpy(e->log + e->used, data, len);
    e->used += len;
    e->log[e->used] = '\0';
}

static int record_event(void *ctx, const char *event, const char *data, size_t len) {
    events *e = ctx;
    log_bytes(e, event, strlen(event));
    log_bytes(e, "=", 1);
    log_bytes(e, data, len);
    log_bytes(e, "|", 1);
    e->count++;
    return e->count == e->stop_at ? 7 : 0;
}

static int feed_split(events *e, const char *stream, size_t len, size_t step) {
    sse_parser p;
    memset(e, 0, sizeof *e);
    sse_init(&p, record_event, e);
    int r = 0;
    for (size_t off = 0; off < len && r == 0; off += step)
        r = sse_feed(&p, stream + off, len - off < step ? len - off : step);
    sse_free(&p);
    return r;
}

static void test_sse_line_ends_and_chunking(void **state) {
    static const char stream[] = "\xEF\xBB\xBF: comment\r\n"
                                 "data: one\r\n\r\n"
                                 "event: tick\rdata:two\rdata:  three\r\r"
                                 "data\n\n"
                                 "id: 5\nretry: 10\n\n"
                                 "event: lonely\n\n"
                                 "data: last\n";
    const char *want = "message=one|tick=two\n three|message=|";
    size_t len = sizeof stream - 1;
    for (size_t step = 1; step <= len; step++) {
        events e;
        assert_int_equal(feed_split(&e, stream, len, step), 0);
        if (strcmp(e.log, want) != 0)
            fail_msg("step %zu: got %s", step, e.log);
    }
}

static void test_sse_crlf_split_between_chunks(void **state) {
    sse_parser p;
    events e = {0};
    sse_init(&p, record_event, &e);
    assert_int_equal(sse_feed(&p, "data: a\r", 8), 0);
    assert_int_equal(sse_feed(&p, "\n", 1), 0); /* the LF of the CRLF, not an empty line */
    assert_int_equal(e.count, 0);
    assert_int_equal(sse_feed(&p, "\r\n", 2), 0);
    assert_string_equal(e.log, "message=a|");
    sse_free(&p);
}

static void test_sse_nul_bytes_and_stop(void **state) {
    static const char stream[] = "data: a\0b\n\ndata: x\n\ndata: y\n\n";
    sse_parser p;
    events e = {.stop_at = 2};
    sse_init(&p, record_event, &e);
    assert_int_equal(sse_feed(&p, stream, sizeof stream - 1), 7);
    assert_int_equal(e.count, 2);
    assert_int_equal(e.used, 22);
    assert_memory_equal(e.log, "message=a\0b|message=x|", 22);
    sse_free(&p);
}

static void test_sse_limits(void **state) {
    size_t big = SSE_LINE_MAX + 16;
    char *line = malloc(big);
    assert_non_null(line);
    memset(line, 'x', big);
    memcpy(line, "data: ", 6);
    line[big - 1] = '\n';
    events e;
    assert_int_equal(feed_split(&e, line, big, big), FAWN_E2BIG);
    assert_int_equal(feed_split(&e, line, big, 4096), FAWN_E2BIG);
    check_contains("line limit", fawn_errmsg(), "line longer");
    free(line);

    /* Many short data lines adding up past the event limit. */
    size_t per = 1000,
           lines = SSE_EVENT_MAX / (per - 6) + 2; /* 994 data bytes and a newline per line */
    fbuf stream = {.limit = SSE_EVENT_MAX * 2};
    char chunk[1001];
    memset(chunk, 'y', sizeof chunk);
    memcpy(chunk, "data:", 5);
    chunk[per - 1] = '\n';
    for (size_t i = 0; i < lines; i++)
        assert_int_equal(fbuf_append(&stream, chunk, per), 0);
    assert_int_equal(feed_split(&e, stream.data, stream.len, 65536), FAWN_E2BIG);
    check_contains("event limit", fawn_errmsg(), "event larger");
    assert_int_equal(e.count, 0);
    fbuf_free(&stream);
}

/* ---- fake OpenAI-compatible server ------------------------------------------------ */

/* ---- attempt fixtures --------------------------------------------------------------- */

#define SSE_HEAD "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream"
/* Timeouts only a hang reaches: an attempt given them that ends otherwise
 * was not ended by them. */
#define HANG_MS 60000

static const char tool_stream[] =
    ": keep-alive\r\n\r\n"
    "data: "
    "{\"id\":\"c1\",\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":"
    "\"Hel\"}}]}\r\n\r\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo \\u00e9\"}}]}\n\n"
    "data: "
    "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_a\",\"type\":"
    "\"function\",\"function\":{\"name\":\"read_\",\"arguments\":\"\"}}]}}]}\n\n"
    "data: "
    "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_b\",\"type\":"
    "\"function\",\"function\":{\"name\":\"bash\",\"arguments\":\"{\\\"cmd\\\":\"}}]}}]}\n\n"
    "data: "
    "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"name\":"
    "\"file\",\"arguments\":\"{\\\"path\\\":\"}}]}}]}\n\n"
    "data: "
    "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{"
    "\"arguments\":\"\\\"ls\\\"}\"}}]}}]}\n\n"
    "data: "
    "{\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{"
    "\"arguments\":\"\\\"/a\\\"}\"}}]}}]}\n\n"
    "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"tool_calls\"}]}\n\n"
    "data: "
    "{\"choices\":[],\"usage\":{\"prompt_tokens\":11,\"completion_tokens\":7,\"total_tokens\":18}}"
    "\n\n"
    "data: [DONE]\n\n";

static const char text_stream[] =
    "data: {\"choices\":[{\"delta\":{\"content\":\"ok\"},\"finish_reason\":\"stop\"}]}\n\n"
    "data: [DONE]\n\n";

typedef struct call {
    fake_server *server;
    char base_url[64];
    model_config cfg;
    json_t *messages, *tools, *extra;
    model_reply reply;
    enum model_failure why;
    int64_t retry_after_ms;
    fbuf streamed;
    atomic_bool cancel;
} call;

static void on_delta(void *ctx, const char *text, size_t len) {
    call *c = ctx;
    assert_int_equal(fbuf_append(&c->streamed, text, len), 0);
}

static call *call_new(const response *script, size_t n) {
    call *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->server = server_start(script, n);
    snprintf(c->base_url, sizeof c->base_url, "http://127.0.0.1:%u/v1/", c->server->port);
    c->messages = json_pack("[{s:s, s:s}]", "role", "user", "content", "hi");
    c->tools = json_pack("[{s:s, s:{s:s}}]", "type", "function", "function", "name", "bash");
    c->extra = json_pack("{s:{s:s}, s:s}", "thinking", "type", "enabled", "stream", "ignored");
    c->cfg = (model_config){.name = "my-model",
                            .model = "provider-id",
                            .base_url = c->base_url,
                            .api_key = "sk-test",
                            .max_tokens = 256,
                            .stall_timeout_ms = 2000,
                            .total_timeout_ms = 10000,
                            .extra_body = c->extra};
    c->reply.prompt_tokens = -1;
    return c;
}

static int call_attempt(call *c) {
    return model_attempt(&c->reply, &c->why, &c->retry_after_ms, &c->cfg, c->messages, c->tools,
                         on_delta, c, &c->cancel);
}

static void call_free(call *c) {
    server_stop(c->server);
    model_reply_clear(&c->reply);
    json_decref(c->messages);
    json_decref(c->tools);
    json_decref(c->extra);
    fbuf_free(&c->streamed);
    free(c);
}

static void check_tool_reply(call *c) {
    json_t *m = c->reply.message;
    assert_string_equal(json_string_value(json_object_get(m, "role")), "assistant");
    assert_string_equal(json_string_value(json_object_get(m, "content")), "Hello \xc3\xa9");
    json_t *calls = json_object_get(m, "tool_calls");
    assert_int_equal(json_array_size(calls), 2);
    json_t *a = json_array_get(calls, 0), *b = json_array_get(calls, 1);
    assert_string_equal(json_string_value(json_object_get(a, "id")), "call_a");
    assert_string_equal(json_string_value(json_object_get(a, "type")), "function");
    assert_string_equal(json_string_value(json_object_get(json_object_get(a, "function"), "name")),
                        "read_file");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(a, "function"), "arguments")),
        "{\"path\":\"/a\"}");
    assert_string_equal(json_string_value(json_object_get(b, "id")), "call_b");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(b, "function"), "arguments")),
        "{\"cmd\":\"ls\"}");
    assert_string_equal(c->reply.finish_reason, "tool_calls");
    assert_int_equal(c->reply.prompt_tokens, 11);
    assert_int_equal(c->reply.completion_tokens, 7);
    assert_string_equal(c->streamed.data, "Hello \xc3\xa9");
}

static void test_attempt_streams_tool_calls(void **state) {
    static const size_t chunkings[] = {0, 1, 3, 17, 64};
    for (size_t i = 0; i < ARRAY_LEN(chunkings); i++) {
        response script[] = {{SSE_HEAD, tool_stream, chunkings[i], 0, END_CLOSE}};
        call *c = call_new(script, 1);
        int r = call_attempt(c);
        if (r != 0)
            fail_msg("chunk %zu: %s", chunkings[i], fawn_errmsg());
        assert_int_equal(c->why, MODEL_OK);
        check_tool_reply(c);
        call_free(c);
    }
}

/* A response read whole (model_response_read) gives the reply a transfer
 * of the same bytes gives. */
static void test_response_read_matches_attempt(void **state) {
    call c = {.cfg = {.name = "my-model"}};
    static const char head[] = SSE_HEAD "\r\n\r\n";
    model_response resp = {.status = 200,
                           .head = head,
                           .head_len = strlen(head),
                           .body = tool_stream,
                           .body_len = strlen(tool_stream)};
    assert_int_equal(
        model_response_read(&c.reply, &c.why, &c.retry_after_ms, &c.cfg, &resp, on_delta, &c), 0);
    assert_int_equal(c.why, MODEL_OK);
    assert_int_equal(c.retry_after_ms, -1);
    check_tool_reply(&c);
    model_reply_clear(&c.reply);
    fbuf_free(&c.streamed);
}

/* Usage counts are believed within 0 … MODEL_USAGE_TOKENS_MAX only: a
 * server's INT64_MAX must not overflow a sum of counts downstream. */
static void test_usage_counts_out_of_range_not_believed(void **state) {
    static const struct {
        const char *prompt, *completion;
        int64_t want_prompt, want_completion;
    } cases[] = {
        {"9223372036854775807", "1", -1, 1},
        {"1099511627776", "1099511627777", MODEL_USAGE_TOKENS_MAX, -1},
        {"-5", "0", -1, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char body[512];
        snprintf(body, sizeof body,
                 "data: {\"choices\":[{\"delta\":{\"content\":\"x\"},\"finish_reason\":\"stop\"}],"
                 "\"usage\":{\"prompt_tokens\":%s,\"completion_tokens\":%s}}\n\n",
                 cases[i].prompt, cases[i].completion);
        model_response resp = {.status = 200, .body = body, .body_len = strlen(body)};
        model_config cfg = {.name = "my-model"};
        model_reply reply;
        enum model_failure why;
        int64_t retry_after_ms;
        assert_int_equal(
            model_response_read(&reply, &why, &retry_after_ms, &cfg, &resp, NULL, NULL), 0);
        assert_int_equal(reply.prompt_tokens, cases[i].want_prompt);
        assert_int_equal(reply.completion_tokens, cases[i].want_completion);
        model_reply_clear(&reply);
    }
}

static void test_attempt_request_shape(void **state) {
    response script[] = {{SSE_HEAD, text_stream, 0, 0, END_CLOSE}};
    call *c = call_new(script, 1);
    assert_int_equal(call_attempt(c), 0);
    assert_null(json_object_get(c->reply.message, "tool_calls"));
    assert_string_equal(c->reply.finish_reason, "stop");
    assert_int_equal(c->reply.prompt_tokens, -1);
    const char *req = c->server->request;
    check_contains("request line", req, "POST /v1/chat/completions HTTP/1.1");
    check_contains("auth", req, "Authorization: Bearer sk-test");
    const char *body = strstr(req, "\r\n\r\n");
    assert_non_null(body);
    json_t *doc = json_loads(body + 4, 0, NULL);
    assert_non_null(doc);
    assert_string_equal(json_string_value(json_object_get(doc, "model")), "provider-id");
    assert_true(json_is_true(json_object_get(doc, "stream")));
    assert_true(
        json_is_true(json_object_get(json_object_get(doc, "stream_options"), "include_usage")));
    assert_int_equal(json_integer_value(json_object_get(doc, "max_tokens")), 256);
    assert_int_equal(json_array_size(json_object_get(doc, "messages")), 1);
    assert_int_equal(json_array_size(json_object_get(doc, "tools")), 1);
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(doc, "thinking"), "type")), "enabled");
    json_decref(doc);
    call_free(c);
}

typedef struct http_case {
    const char *head;
    const char *body;
    enum model_failure why;
    int code;
    const char *message;
    int64_t retry_after_ms;
} http_case;

static void test_attempt_http_errors(void **state) {
    static const http_case cases[] = {
        {"HTTP/1.1 401 Unauthorized",
         "{\"error\":{\"message\":\"invalid api key\",\"type\":\"invalid_request_error\"}}",
         MODEL_FAIL_AUTH, FAWN_EPERM, "model my-model: HTTP 401: invalid api key", -1},
        {"HTTP/1.1 403 Forbidden", "nope", MODEL_FAIL_AUTH, FAWN_EPERM, "model my-model: HTTP 403",
         -1},
        {"HTTP/1.1 429 Too Many Requests",
         "{\"error\":{\"message\":\"You exceeded your current "
         "quota\",\"code\":\"insufficient_quota\"}}",
         MODEL_FAIL_QUOTA, FAWN_EPERM, "HTTP 429: You exceeded", -1},
        /* The decision reads the code, not the wording. */
        {"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2",
         "{\"error\":{\"message\":\"insufficient quota, "
         "billing\",\"code\":\"rate_limit_exceeded\"}}",
         MODEL_FAIL_BURST, FAWN_EBUSY, "HTTP 429", 2000},
        {"HTTP/1.1 429 Too Many Requests\r\nretry-after-ms: 1500\r\nRetry-After: 9", "{}",
         MODEL_FAIL_BURST, FAWN_EBUSY, "HTTP 429", 1500},
        {"HTTP/1.1 503 Service Unavailable\r\nRetry-After: Wed, 21 Oct 2015 07:28:00 GMT",
         "<html>busy</html>", MODEL_FAIL_TRANSIENT, FAWN_EIO, "HTTP 503", 0},
        {"HTTP/1.1 500 Internal Server Error", "{\"error\":{\"message\":\"line1\\nline2\\u0007\"}}",
         MODEL_FAIL_TRANSIENT, FAWN_EIO, "HTTP 500: line1 line2 ", -1},
        {"HTTP/1.1 408 Request Timeout", "", MODEL_FAIL_TRANSIENT, FAWN_EIO, "HTTP 408", -1},
        {"HTTP/1.1 409 Conflict", "", MODEL_FAIL_TRANSIENT, FAWN_EIO, "HTTP 409", -1},
        {"HTTP/1.1 425 Too Early", "", MODEL_FAIL_TRANSIENT, FAWN_EIO, "HTTP 425", -1},
        {"HTTP/1.1 402 Payment Required", "", MODEL_FAIL_QUOTA, FAWN_EPERM, "HTTP 402", -1},
        {"HTTP/1.1 400 Bad Request",
         "{\"error\":{\"message\":\"context too long\",\"code\":\"context_length_exceeded\"}}",
         MODEL_FAIL_FATAL, FAWN_EIO, "HTTP 400: context too long", -1},
        {"HTTP/1.1 404 Not Found", "", MODEL_FAIL_FATAL, FAWN_EIO, "HTTP 404", -1},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        response script[] = {{cases[i].head, cases[i].body, 0, 0, END_CLOSE}};
        call *c = call_new(script, 1);
        assert_int_equal(call_attempt(c), cases[i].code);
        if (c->why != cases[i].why)
            fail_msg("%s: class %s", cases[i].head, model_failure_name(c->why));
        check_contains(cases[i].head, fawn_errmsg(), cases[i].message);
        check_lacks("control characters", fawn_errmsg(), "\n");
        assert_int_equal(c->retry_after_ms, cases[i].retry_after_ms);
        assert_null(c->reply.message);
        call_free(c);
    }
}

static void test_attempt_stream_failures(void **state) {
    static const struct {
        const char *body;
        enum model_failure why;
        int code;
        const char *message;
    } cases[] = {
        {"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n", MODEL_FAIL_TRANSIENT,
         FAWN_EPROTO, "before the reply was complete"},
        {"data: {\"choices\":[{\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
         MODEL_FAIL_TRANSIENT, FAWN_EPROTO, "empty reply"},
        {"data: {not json\n\n", MODEL_FAIL_TRANSIENT, FAWN_EPROTO, "not a JSON object"},
        {"data: {\"error\":{\"message\":\"overloaded\",\"type\":\"server_error\"}}\n\n",
         MODEL_FAIL_TRANSIENT, FAWN_EIO, "error in stream: overloaded"},
        {"data: {\"error\":{\"message\":\"slow down\",\"code\":\"rate_limit_exceeded\"}}\n\n",
         MODEL_FAIL_BURST, FAWN_EBUSY, "slow down"},
        {"data: {\"error\":{\"message\":\"no money\",\"code\":\"insufficient_quota\"}}\n\n",
         MODEL_FAIL_QUOTA, FAWN_EPERM, "no money"},
        {"data: "
         "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":64,\"id\":\"x\",\"function\":{"
         "\"name\":\"a\"}}]}}]}\n\n",
         MODEL_FAIL_FATAL, FAWN_E2BIG, "more than 64 tool calls"},
        {"data: "
         "{\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"x\",\"function\":{"
         "\"arguments\":\"{}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\ndata: [DONE]\n\n",
         MODEL_FAIL_TRANSIENT, FAWN_EPROTO, "without a function name"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        response script[] = {{SSE_HEAD, cases[i].body, 5, 0, END_CLOSE}};
        call *c = call_new(script, 1);
        assert_int_equal(call_attempt(c), cases[i].code);
        if (c->why != cases[i].why)
            fail_msg("case %zu: class %s (%s)", i, model_failure_name(c->why), fawn_errmsg());
        check_contains("stream failure", fawn_errmsg(), cases[i].message);
        assert_null(c->reply.message);
        call_free(c);
    }
}

static void test_attempt_oversized_arguments(void **state) {
    /* One tool call whose arguments pass MODEL_TOOL_ARGS_MAX over many chunks. */
    fbuf body = {0};
    char piece[8300];
    memset(piece, 'a', sizeof piece);
    size_t chunks = MODEL_TOOL_ARGS_MAX / 8000 + 2;
    for (size_t i = 0; i < chunks; i++)
        assert_int_equal(
            fbuf_printf(
                &body,
                "data: {\"choices\":[{\"delta\":{\"tool_calls\":[{\"index\":0,"
                "\"id\":\"c\",\"function\":{\"name\":\"w\",\"arguments\":\"%.8000s\"}}]}}]}\n\n",
                piece),
            0);
    response script[] = {{SSE_HEAD, body.data, 65536, 0, END_CLOSE}};
    call *c = call_new(script, 1);
    assert_int_equal(call_attempt(c), FAWN_E2BIG);
    assert_int_equal(c->why, MODEL_FAIL_FATAL);
    check_contains("args cap", fawn_errmsg(), "tool arguments longer than");
    call_free(c);
    fbuf_free(&body);
}

static void test_attempt_stall(void **state) {
    response script[] = {
        {SSE_HEAD, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", 0, 0, END_HANG}};
    call *c = call_new(script, 1);
    c->cfg.stall_timeout_ms = 300;
    c->cfg.total_timeout_ms = HANG_MS;
    int64_t start = fawn_now_ms();
    assert_int_equal(call_attempt(c), FAWN_ETIMEDOUT);
    int64_t took = fawn_now_ms() - start;
    /* The stall timeout ended it (the total one is out of reach)... */
    assert_int_equal(c->why, MODEL_FAIL_STALLED);
    check_contains("stall", fawn_errmsg(), "stalled");
    /* ...and not before the stream had been silent that long. */
    assert_true(took >= 300);
    call_free(c);
}

static void test_attempt_total_timeout(void **state) {
    /* Bytes keep coming (so no stall) but the reply never completes. */
    static char slow[4096];
    for (size_t i = 0; i + 3 < sizeof slow; i += 3)
        memcpy(slow + i, ":\n\n", 3);
    response script[] = {{SSE_HEAD, slow, 3, 20, END_HANG}};
    call *c = call_new(script, 1);
    c->cfg.stall_timeout_ms = 1000;
    c->cfg.total_timeout_ms = 400;
    assert_int_equal(call_attempt(c), FAWN_ETIMEDOUT);
    assert_int_equal(c->why, MODEL_FAIL_TRANSIENT);
    check_contains("total", fawn_errmsg(), "no complete reply within 400 ms");
    call_free(c);
}

static void test_attempt_connection_reset(void **state) {
    response script[] = {
        {SSE_HEAD, "data: {\"choices\":[{\"delta\":{\"content\":\"x\"}}]}\n\n", 0, 0, END_RESET}};
    call *c = call_new(script, 1);
    int r = call_attempt(c);
    assert_true(r == FAWN_EIO || r == FAWN_EPROTO);
    assert_int_equal(c->why, MODEL_FAIL_TRANSIENT);
    call_free(c);
}

static void test_attempt_connection_refused(void **state) {
    response script[] = {{SSE_HEAD, text_stream, 0, 0, END_CLOSE}};
    call *c = call_new(script, 1);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    snprintf(c->base_url, sizeof c->base_url, "http://127.0.0.1:%u/v1", ntohs(a.sin_port));
    assert_int_equal(call_attempt(c), FAWN_EIO);
    assert_int_equal(c->why, MODEL_FAIL_TRANSIENT);
    check_contains("refused", fawn_errmsg(), "model my-model: ");
    close(fd);
    call_free(c);
}

typedef struct canceller {
    call *c;
    int after_ms;
} canceller;

static void *cancel_later(void *arg) {
    canceller *k = arg;
    sleep_ms(k->after_ms);
    atomic_store(&k->c->cancel, true);
    return NULL;
}

static void test_attempt_cancel_in_flight(void **state) {
    static char slow[2048];
    for (size_t i = 0; i + 3 < sizeof slow; i += 3)
        memcpy(slow + i, ":\n\n", 3);
    /* The stream drips for 20 s and then hangs; the timeouts are out of reach. */
    response script[] = {{SSE_HEAD, slow, 3, 30, END_HANG}};
    call *c = call_new(script, 1);
    c->cfg.stall_timeout_ms = HANG_MS;
    c->cfg.total_timeout_ms = HANG_MS;
    canceller k = {.c = c, .after_ms = 300};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, cancel_later, &k), 0);
    assert_int_equal(call_attempt(c), FAWN_ECANCELED);
    pthread_join(t, NULL);
    assert_int_equal(c->why, MODEL_FAIL_CANCELLED);
    /* The cancel ended the request in flight: the client hung up mid-stream. */
    for (int64_t end = fawn_now_ms() + HANG_MS;
         !atomic_load(&c->server->hung_up_midway) && fawn_now_ms() < end;)
        sleep_ms(10);
    if (!atomic_load(&c->server->hung_up_midway))
        fail_msg("the cancelled request did not end before its stream did");
    call_free(c);
}

static void test_attempt_bad_config(void **state) {
    response script[] = {{SSE_HEAD, text_stream, 0, 0, END_CLOSE}};
    call *c = call_new(script, 1);
    c->cfg.api_key = "sk\r\nX-Evil: 1";
    assert_int_equal(call_attempt(c), FAWN_EINVAL);
    check_contains("header injection", fawn_errmsg(), "line break");
    c->cfg.api_key = "k";
    c->cfg.base_url = "file:///etc";
    assert_int_not_equal(call_attempt(c), 0);
    assert_int_equal(c->why, MODEL_FAIL_FATAL);
    assert_int_equal(atomic_load(&c->server->served), 0);
    call_free(c);
}

/* ---- classification, Retry-After, jitter ------------------------------------------- */

static enum model_failure classify(long status, const char *body) {
    return model_classify_http(status, body, body ? strlen(body) : 0);
}

static void test_classify_table(void **state) {
    assert_int_equal(classify(401, NULL), MODEL_FAIL_AUTH);
    assert_int_equal(classify(403, "{\"error\":{\"code\":\"insufficient_quota\"}}"),
                     MODEL_FAIL_QUOTA);
    assert_int_equal(classify(429, "{\"error\":{\"type\":\"insufficient_quota\"}}"),
                     MODEL_FAIL_QUOTA);
    assert_int_equal(classify(429, "{\"error\":{\"message\":\"insufficient_quota\"}}"),
                     MODEL_FAIL_BURST);
    assert_int_equal(classify(429, "garbage"), MODEL_FAIL_BURST);
    assert_int_equal(classify(502, NULL), MODEL_FAIL_TRANSIENT);
    assert_int_equal(classify(599, NULL), MODEL_FAIL_TRANSIENT);
    assert_int_equal(classify(418, NULL), MODEL_FAIL_FATAL);
    assert_int_equal(classify(0, "{\"error\":{\"type\":\"authentication_error\"}}"),
                     MODEL_FAIL_AUTH);
    assert_int_equal(classify(0, "{\"error\":{}}"), MODEL_FAIL_TRANSIENT);
    assert_int_equal(model_attempt_budget(MODEL_FAIL_TRANSIENT), 3);
    assert_int_equal(model_attempt_budget(MODEL_FAIL_BURST), 2);
    assert_int_equal(model_attempt_budget(MODEL_FAIL_STALLED), 2);
    assert_int_equal(model_attempt_budget(MODEL_FAIL_QUOTA), 1);
    assert_int_equal(model_attempt_budget(MODEL_FAIL_AUTH), 1);
    assert_int_equal(model_attempt_budget(MODEL_FAIL_CANCELLED), 1);
    assert_int_equal(model_attempt_budget(MODEL_FAIL_FATAL), 1);
}

static void test_retry_after_parse(void **state) {
    int64_t now = 1445412480000LL; /* Wed, 21 Oct 2015 07:28:00 GMT */
    assert_int_equal(model_parse_retry_after("5", now), 5000);
    assert_int_equal(model_parse_retry_after(" 12 ", now), 12000);
    assert_int_equal(model_parse_retry_after("0", now), 0);
    assert_int_equal(model_parse_retry_after("Wed, 21 Oct 2015 07:28:30 GMT", now), 30000);
    assert_int_equal(model_parse_retry_after("Wed, 21 Oct 2015 07:27:00 GMT", now), 0);
    assert_int_equal(model_parse_retry_after("99999999999999999999999", now), 1000000000LL * 1000);
    assert_int_equal(model_parse_retry_after("Wed, 21 Oct 2015015015 07:28:00 GMT", now),
                     1000000000LL * 1000);
    assert_int_equal(model_parse_retry_after("Wed, 21 Oct 1901 07:28:00 GMT", now), 0);
    assert_int_equal(model_parse_retry_after("-1", now), -1);
    assert_int_equal(model_parse_retry_after("5s", now), -1);
    assert_int_equal(model_parse_retry_after("soon", now), -1);
    assert_int_equal(model_parse_retry_after("", now), -1);
}

static void test_backoff_bounds(void **state) {
    bool low = false, high = false;
    int64_t prev = 0;
    for (uint64_t i = 0; i < 2000; i++) {
        uint64_t rnd = i * 0x9E3779B97F4A7C15ULL;
        int64_t w = model_backoff_ms(MODEL_FAIL_TRANSIENT, prev, rnd);
        int64_t hi = prev * 3 > 8000 ? 8000 : prev * 3 < 1000 ? 1000 : prev * 3;
        assert_true(w >= 1000 && w <= hi);
        low |= w < 1100;
        high |= w > 7900;
        prev = w;
    }
    assert_true(low && high);
    assert_int_equal(model_backoff_ms(MODEL_FAIL_TRANSIENT, 0, 12345), 1000);
    assert_int_equal(model_backoff_ms(MODEL_FAIL_TRANSIENT, INT64_MAX, UINT64_MAX),
                     1000 + UINT64_MAX % 7001);
    for (uint64_t i = 0; i < 100; i++) {
        int64_t w = model_backoff_ms(MODEL_FAIL_BURST, 8000, i * 7919);
        assert_true(w >= 5000 && w <= 8000);
    }
}

/* ---- circuit breaker ------------------------------------------------------------------ */

static void test_breaker_states(void **state) {
    model_breaker b;
    int64_t wait;
    model_breaker_init(&b);
    for (int i = 0; i < MODEL_BREAKER_THRESHOLD - 1; i++) {
        assert_int_equal(model_breaker_admit(&b, &wait, 1000), 0);
        model_breaker_record(&b, MODEL_FAIL_TRANSIENT, 1000);
    }
    /* Burst and non-retriable failures do not count. */
    model_breaker_record(&b, MODEL_FAIL_BURST, 1000);
    model_breaker_record(&b, MODEL_FAIL_AUTH, 1000);
    assert_int_equal(model_breaker_admit(&b, &wait, 1000), 0);
    model_breaker_record(&b, MODEL_FAIL_STALLED, 2000);
    assert_int_equal(model_breaker_admit(&b, &wait, 2000), FAWN_EBUSY);
    assert_int_equal(wait, MODEL_BREAKER_OPEN_MS);
    assert_int_equal(model_breaker_admit(&b, &wait, 2000 + MODEL_BREAKER_OPEN_MS - 1), FAWN_EBUSY);
    assert_int_equal(wait, 1);
    /* Half-open: one probe, the rest wait. */
    assert_int_equal(model_breaker_admit(&b, &wait, 2000 + MODEL_BREAKER_OPEN_MS), 0);
    assert_int_equal(model_breaker_admit(&b, &wait, 2000 + MODEL_BREAKER_OPEN_MS), FAWN_EBUSY);
    model_breaker_record(&b, MODEL_FAIL_TRANSIENT, 70000);
    assert_int_equal(model_breaker_admit(&b, &wait, 70000), FAWN_EBUSY);
    assert_int_equal(wait, MODEL_BREAKER_OPEN_MS);
    /* A probe cancelled by its caller frees the slot without closing. */
    assert_int_equal(model_breaker_admit(&b, &wait, 130000), 0);
    model_breaker_record(&b, MODEL_FAIL_CANCELLED, 130000);
    assert_int_equal(b.state, MODEL_BREAKER_HALF_OPEN);
    assert_int_equal(model_breaker_admit(&b, &wait, 130001), 0);
    model_breaker_record(&b, MODEL_OK, 130002);
    assert_int_equal(b.state, MODEL_BREAKER_CLOSED);
    assert_int_equal(model_breaker_admit(&b, &wait, 130003), 0);
    assert_int_equal(model_breaker_admit(&b, &wait, 130003), 0);
    model_breaker_destroy(&b);
}

typedef struct prober {
    model_breaker *b;
    atomic_int *admitted;
    atomic_bool *go;
} prober;

static void *probe_thread(void *arg) {
    prober *p = arg;
    int64_t wait;
    while (!atomic_load(p->go))
        ;
    if (model_breaker_admit(p->b, &wait, 100000) == 0)
        atomic_fetch_add(p->admitted, 1);
    return NULL;
}

static void test_breaker_one_probe_across_threads(void **state) {
    model_breaker b;
    model_breaker_init(&b);
    for (int i = 0; i < MODEL_BREAKER_THRESHOLD; i++)
        model_breaker_record(&b, MODEL_FAIL_TRANSIENT, 0);
    atomic_int admitted = 0;
    atomic_bool go = false;
    pthread_t threads[8];
    prober p = {&b, &admitted, &go};
    for (size_t i = 0; i < ARRAY_LEN(threads); i++)
        assert_int_equal(pthread_create(&threads[i], NULL, probe_thread, &p), 0);
    atomic_store(&go, true);
    for (size_t i = 0; i < ARRAY_LEN(threads); i++)
        pthread_join(threads[i], NULL);
    assert_int_equal(atomic_load(&admitted), 1);
    model_breaker_destroy(&b);
}

/* ---- model_complete -------------------------------------------------------------------- */

typedef struct fake_clock {
    int64_t now;
    int64_t waits[8];
    int nwaits;
    bool cancel_in_sleep;
    model_retry_info retries[8];
    char messages[8][256];
    char reasons[8][32];
    int nretries;
} fake_clock;

static bool fake_sleep(void *ctx, int64_t ms, const atomic_bool *cancel) {
    fake_clock *k = ctx;
    if (k->nwaits < 8)
        k->waits[k->nwaits++] = ms;
    k->now += ms;
    return k->cancel_in_sleep;
}

static int64_t fake_now(void *ctx) { return ((fake_clock *)ctx)->now; }
static uint64_t fake_random(void *ctx) { return 0; } /* always the base of the range */

static void record_retry(void *ctx, const model_retry_info *info) {
    fake_clock *k = ctx;
    int i = k->nretries++;
    if (i >= (int)ARRAY_LEN(k->retries))
        return; /* only the first ones are kept; all are counted */
    k->retries[i] = *info;
    snprintf(k->messages[i], sizeof k->messages[0], "%s", info->message);
    snprintf(k->reasons[i], sizeof k->reasons[0], "%s", info->reason);
    k->retries[i].message = k->messages[i];
    k->retries[i].reason = k->reasons[i];
}

static int complete(call *c, fake_clock *k, model_breaker *b) {
    model_hooks hooks = {.on_delta = NULL,
                         .on_retry = record_retry,
                         .ctx = k,
                         .sleep_ms = fake_sleep,
                         .now_ms = fake_now,
                         .random = fake_random,
                         .clock_ctx = k};
    return model_complete(&c->reply, &c->why, &c->cfg, c->messages, c->tools, b, &hooks,
                          &c->cancel);
}

static void test_complete_retries_then_succeeds(void **state) {
    response script[] = {
        {"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1", "{}", 0, 0, END_CLOSE},
        {"HTTP/1.1 500 Internal Server Error", "{\"error\":{\"message\":\"boom\"}}", 0, 0,
         END_CLOSE},
        {SSE_HEAD, tool_stream, 9, 0, END_CLOSE},
    };
    call *c = call_new(script, ARRAY_LEN(script));
    fake_clock k = {.now = 5000};
    assert_int_equal(complete(c, &k, NULL), 0);
    assert_int_equal(atomic_load(&c->server->served), 3);
    assert_int_equal(k.nretries, 2);
    assert_int_equal(k.retries[0].attempt, 1);
    assert_int_equal(k.retries[0].max_attempts, 3);
    assert_int_equal(k.retries[0].wait_ms, 1000); /* Retry-After, exactly */
    assert_string_equal(k.retries[0].reason, "transient");
    check_contains("retry message", k.retries[0].message, "HTTP 503");
    assert_int_equal(k.retries[1].attempt, 2);
    assert_int_equal(k.retries[1].wait_ms, 1000); /* jitter with random 0: the base */
    check_contains("retry message", k.retries[1].message, "HTTP 500: boom");
    assert_int_equal(k.nwaits, 2);
    assert_int_equal(c->why, MODEL_OK);
    assert_non_null(c->reply.message);
    call_free(c);
}

static void test_complete_no_retry_for_auth_and_quota(void **state) {
    static const char *heads[] = {"HTTP/1.1 401 Unauthorized", "HTTP/1.1 429 Too Many Requests"};
    static const char *bodies[] = {"{}", "{\"error\":{\"code\":\"insufficient_quota\"}}"};
    for (size_t i = 0; i < 2; i++) {
        response script[] = {{heads[i], bodies[i], 0, 0, END_CLOSE}};
        call *c = call_new(script, 1);
        fake_clock k = {0};
        assert_int_equal(complete(c, &k, NULL), FAWN_EPERM);
        assert_int_equal(atomic_load(&c->server->served), 1);
        assert_int_equal(k.nretries, 0);
        call_free(c);
    }
}

static void test_complete_burst_budget_and_long_retry_after(void **state) {
    response burst[] = {{"HTTP/1.1 429 Too Many Requests", "{}", 0, 0, END_CLOSE}};
    call *c = call_new(burst, 1);
    fake_clock k = {0};
    model_breaker b;
    model_breaker_init(&b);
    assert_int_equal(complete(c, &k, &b), FAWN_EBUSY);
    assert_int_equal(atomic_load(&c->server->served), 2);
    assert_int_equal(k.nretries, 1);
    assert_int_equal(k.retries[0].max_attempts, 2);
    assert_int_equal(k.retries[0].wait_ms, 5000); /* burst base, first wait */
    assert_string_equal(k.retries[0].reason, "burst");
    assert_int_equal(b.failures, 0); /* burst does not count toward the breaker */
    call_free(c);

    response patient[] = {
        {"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 3600", "{}", 0, 0, END_CLOSE}};
    c = call_new(patient, 1);
    k = (fake_clock){0};
    assert_int_equal(complete(c, &k, &b), FAWN_EIO);
    check_contains("long wait", fawn_errmsg(), "HTTP 503");
    assert_int_equal(atomic_load(&c->server->served), 1);
    assert_int_equal(k.nwaits, 0);
    assert_int_equal(b.failures, 1);
    model_breaker_destroy(&b);
    call_free(c);
}

static void test_complete_stall_budget(void **state) {
    response script[] = {{SSE_HEAD, ": hi\n\n", 0, 0, END_HANG}};
    call *c = call_new(script, 1);
    c->cfg.stall_timeout_ms = 200;
    fake_clock k = {0};
    assert_int_equal(complete(c, &k, NULL), FAWN_ETIMEDOUT);
    assert_int_equal(c->why, MODEL_FAIL_STALLED);
    assert_int_equal(atomic_load(&c->server->served), 2);
    assert_int_equal(k.nretries, 1);
    assert_int_equal(k.retries[0].max_attempts, 2);
    assert_string_equal(k.retries[0].reason, "stalled");
    call_free(c);
}

static void test_complete_cancel_while_waiting(void **state) {
    response script[] = {{"HTTP/1.1 502 Bad Gateway", "", 0, 0, END_CLOSE}};
    call *c = call_new(script, 1);
    fake_clock k = {.cancel_in_sleep = true};
    assert_int_equal(complete(c, &k, NULL), FAWN_ECANCELED);
    assert_int_equal(c->why, MODEL_FAIL_CANCELLED);
    assert_int_equal(atomic_load(&c->server->served), 1);
    call_free(c);
}

static void test_complete_breaker_opens_and_probes(void **state) {
    response script[] = {{"HTTP/1.1 500 Internal Server Error", "{}", 0, 0, END_CLOSE}};
    call *c = call_new(script, 1);
    fake_clock k = {.now = 1000};
    model_breaker b;
    model_breaker_init(&b);
    for (int i = 0; i < MODEL_BREAKER_THRESHOLD; i++)
        assert_int_equal(complete(c, &k, &b), FAWN_EIO);
    int served = atomic_load(&c->server->served);
    assert_int_equal(served, MODEL_BREAKER_THRESHOLD * 3);
    assert_int_equal(complete(c, &k, &b), FAWN_EBUSY);
    check_contains("open", fawn_errmsg(), "temporarily unavailable");
    assert_int_equal(atomic_load(&c->server->served), served); /* nothing was sent */
    k.now += MODEL_BREAKER_OPEN_MS;
    assert_int_equal(complete(c, &k, &b), FAWN_EIO); /* the probe runs, fails, reopens */
    assert_int_equal(atomic_load(&c->server->served), served + 3);
    assert_int_equal(b.state, MODEL_BREAKER_OPEN);
    model_breaker_destroy(&b);
    call_free(c);
}

/* ---- configured models ---- */

static int registry_from(model_registry **out, const char *json_text) {
    json_t *list = json_text ? json_loads(json_text, 0, NULL) : NULL;
    int r = model_registry_load(out, list);
    json_decref(list);
    return r;
}

static void registry_loads_and_resolves(void **state) {
    model_registry *reg = NULL;
    assert_int_equal(registry_from(&reg, "[{\"name\":\"a\",\"model\":\"m-a\","
                                         "\"base_url\":\"http://127.0.0.1:1/v1\","
                                         "\"max_tokens\":\"100\",\"stall_timeout_s\":\"5\","
                                         "\"supports_vision\":true,\"extra_body\":{\"x\":\"1\"}},"
                                         "{\"name\":\"b.2\",\"display_name\":\"B\","
                                         "\"model\":\"m-b\",\"base_url\":\"https://h/v1\"}]"),
                     0);
    assert_int_equal(model_registry_count(reg), 2);
    const model_entry *a = model_registry_get(reg, "a");
    assert_non_null(a);
    assert_string_equal(a->display_name, "a");
    assert_string_equal(a->cfg.model, "m-a");
    assert_int_equal(a->cfg.max_tokens, 100);
    assert_int_equal(a->cfg.stall_timeout_ms, 5000);
    assert_true(a->supports_vision);
    assert_false(a->supports_thinking);
    assert_string_equal(json_string_value(json_object_get(a->cfg.extra_body, "x")), "1");
    assert_string_equal(model_registry_resolve(reg, "b.2")->display_name, "B");
    /* An unknown name falls back to the first model. */
    assert_ptr_equal(model_registry_resolve(reg, "nope"), a);
    assert_ptr_equal(model_registry_resolve(reg, NULL), a);
    assert_null(model_registry_get(reg, "nope"));
    model_registry_free(reg);
    /* Without models, the built-in offline demo model. */
    assert_int_equal(registry_from(&reg, NULL), 0);
    assert_int_equal(model_registry_count(reg), 1);
    const model_entry *demo = model_registry_resolve(reg, "a");
    assert_non_null(demo);
    assert_string_equal(demo->name, MODEL_DEMO_NAME);
    assert_int_equal(demo->provider, MODEL_SCRIPT);
    model_registry_free(reg);
}

static void registry_refuses_bad_lists(void **state) {
    static const struct {
        const char *json, *needle;
    } bad[] = {
        {"[{\"model\":\"m\",\"base_url\":\"http://h\"}]", "models[0].name: is required"},
        {"[{\"name\":\"a/b\",\"model\":\"m\",\"base_url\":\"http://h\"}]", "models[0].name"},
        {"[{\"name\":\"a\",\"base_url\":\"http://h\"}]", "models[0].model: is required"},
        {"[{\"name\":\"a\",\"model\":\"m\",\"base_url\":\"file:///etc\"}]",
         "models[0].base_url: must be an http"},
        {"[{\"name\":\"a\",\"model\":\"m\",\"base_url\":\"http://h\",\"max_tokens\":\"0\"}]",
         "models[0].max_tokens"},
        {"[{\"name\":\"a\",\"model\":\"m\",\"base_url\":\"http://h\",\"supports_vision\":\"yes\"}]",
         "models[0].supports_vision: must be true or false"},
        {"[{\"name\":\"a\",\"model\":\"m\",\"base_url\":\"http://h\",\"tempature\":\"1\"}]",
         "unknown key models[0].tempature"},
        {"[{\"name\":\"a\",\"model\":\"m\",\"base_url\":\"http://h\"},"
         "{\"name\":\"a\",\"model\":\"m\",\"base_url\":\"http://h\"}]",
         "models[1].name: 'a' is already models[0]"},
        {"[\"a\"]", "models[0]: must be a mapping"},
        {"{}", "models: must be a list"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        model_registry *reg = NULL;
        assert_int_equal(registry_from(&reg, bad[i].json), FAWN_ECONFIG);
        if (!strstr(fawn_errmsg(), bad[i].needle))
            fail_msg("'%s' lacks '%s'", fawn_errmsg(), bad[i].needle);
    }
}

/* A reply variable the caller never set is neither read nor freed: every
 * failing attempt or completion (bad configuration, an open breaker) sets
 * it, so clearing it afterwards is safe. */
static void failures_leave_the_reply_defined(void **state) {
    model_config cfg = {.name = "m"}; /* no model id: refused before any request */
    json_t *messages = json_array();
    model_reply reply;
    enum model_failure why;
    int64_t retry_after_ms;
    POISON(reply);
    POISON(why);
    POISON(retry_after_ms);
    assert_int_equal(
        model_attempt(&reply, &why, &retry_after_ms, &cfg, messages, NULL, NULL, NULL, NULL),
        FAWN_EINVAL);
    assert_null(reply.message);
    assert_int_equal(reply.prompt_tokens, -1);
    assert_int_equal(why, MODEL_FAIL_FATAL);
    assert_int_equal(retry_after_ms, -1);
    model_reply_clear(&reply);
    POISON(reply);
    assert_int_equal(model_complete(&reply, &why, &cfg, messages, NULL, NULL, NULL, NULL),
                     FAWN_EINVAL);
    assert_null(reply.message);
    model_reply_clear(&reply);
    model_breaker b;
    model_breaker_init(&b);
    for (int i = 0; i < MODEL_BREAKER_THRESHOLD; i++)
        model_breaker_record(&b, MODEL_FAIL_TRANSIENT, fawn_now_ms());
    POISON(reply);
    assert_int_equal(model_complete(&reply, &why, &cfg, messages, NULL, &b, NULL, NULL),
                     FAWN_EBUSY);
    assert_null(reply.message);
    assert_string_equal(reply.finish_reason, "");
    model_reply_clear(&reply);
    model_breaker_destroy(&b);
    json_decref(messages);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(registry_loads_and_resolves),
        cmocka_unit_test(registry_refuses_bad_lists),
        cmocka_unit_test(test_sse_line_ends_and_chunking),
        cmocka_unit_test(test_sse_crlf_split_between_chunks),
        cmocka_unit_test(test_sse_nul_bytes_and_stop),
        cmocka_unit_test(test_sse_limits),
        cmocka_unit_test(test_attempt_streams_tool_calls),
        cmocka_unit_test(test_response_read_matches_attempt),
        cmocka_unit_test(test_usage_counts_out_of_range_not_believed),
        cmocka_unit_test(test_attempt_request_shape),
        cmocka_unit_test(test_attempt_http_errors),
        cmocka_unit_test(test_attempt_stream_failures),
        cmocka_unit_test(test_attempt_oversized_arguments),
        cmocka_unit_test(test_attempt_stall),
        cmocka_unit_test(test_attempt_total_timeout),
        cmocka_unit_test(test_attempt_connection_reset),
        cmocka_unit_test(test_attempt_connection_refused),
        cmocka_unit_test(test_attempt_cancel_in_flight),
        cmocka_unit_test(test_attempt_bad_config),
        cmocka_unit_test(test_classify_table),
        cmocka_unit_test(test_retry_after_parse),
        cmocka_unit_test(test_backoff_bounds),
        cmocka_unit_test(test_breaker_states),
        cmocka_unit_test(test_breaker_one_probe_across_threads),
        cmocka_unit_test(test_complete_retries_then_succeeds),
        cmocka_unit_test(test_complete_no_retry_for_auth_and_quota),
        cmocka_unit_test(test_complete_burst_budget_and_long_retry_after),
        cmocka_unit_test(test_complete_stall_budget),
        cmocka_unit_test(test_complete_cancel_while_waiting),
        cmocka_unit_test(test_complete_breaker_opens_and_probes),
        cmocka_unit_test(failures_leave_the_reply_defined),
    };
    return cmocka_run_group_tests_name("model", tests, NULL, NULL);
}
