/* libFuzzer target for what a model endpoint answers (model_openai.c): the
 * header lines (Retry-After, retry-after-ms), the error body of a failed
 * status and, for a successful one, the SSE stream of chat-completion chunks
 * turned into a reply (text deltas, tool call fragments, finish reason,
 * usage, errors sent inside the stream); then the reply as the agent stores
 * it and sends it back to the model.
 *
 * Input: the first byte picks the status; the rest is the header lines up
 * to the first empty line ("\n\n"), then the body (all body when there is
 * no empty line). Besides memory errors and undefined behaviour, it checks
 * that
 * - a success and only a success has class MODEL_OK and a message; a
 *   failure leaves no reply, and a failed status is classified as
 *   model_classify_http classifies its body;
 * - a reply's text is exactly the deltas streamed, within MODEL_CONTENT_MAX,
 *   and its tool calls (at most MODEL_TOOL_CALLS_MAX) have an id, a
 *   non-empty name and arguments within their limits;
 * - the stored message has the same tool calls, and its request form gives
 *   each one's arguments back (the same text, or the same JSON object). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/base.h"
#include "model/model_internal.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536
/* Tool call ids and names are cut at this many bytes (model_openai.c). */
#define TOOL_ID_MAX 256

static const long statuses[] = {200, 200, 200, 200, 200, 200, 200, 206,
                                400, 401, 402, 403, 408, 429, 500, 503};

static void on_delta(void *ctx, const char *text, size_t len) {
    check(len > 0);
    check(fbuf_append(ctx, text, len) == 0);
}

static void check_string(const json_t *v, size_t min, size_t max) {
    check(json_is_string(v));
    check(json_string_length(v) >= min && json_string_length(v) <= max);
    check(strlen(json_string_value(v)) == json_string_length(v));
}

static void check_tool_call(const json_t *c) {
    const json_t *fn = json_object_get(c, "function");
    check_string(json_object_get(c, "id"), 1, TOOL_ID_MAX);
    check(strcmp(json_string_value(json_object_get(c, "type")), "function") == 0);
    check_string(json_object_get(fn, "name"), 1, TOOL_ID_MAX);
    check_string(json_object_get(fn, "arguments"), 0, MODEL_TOOL_ARGS_MAX);
}

/* The arguments the request form sends back: the model's text when it is
 * not a JSON object, else the same object. */
static void check_arguments_kept(const char *sent, const char *back) {
    json_t *a = json_loads(sent, JSON_DECODE_ANY, NULL);
    if (!json_is_object(a)) {
        check(!sent[0] || strcmp(sent, back) == 0);
    } else {
        json_t *b = json_loads(back, 0, NULL);
        check(json_equal(a, b));
        json_decref(b);
    }
    json_decref(a);
}

/* The reply as the agent stores it and as the next request sends it. */
static void check_stored(const model_reply *reply) {
    const json_t *calls = json_object_get(reply->message, "tool_calls");
    json_t *ai = agent_ai_message(reply, "fuzz", "fuzz-id");
    check(ai != NULL);
    check(json_array_size(json_object_get(ai, "tool_calls")) == json_array_size(calls));
    json_t *messages = json_pack("[O]", ai), *request = json_array();
    check(messages && request && agent_request_extend(request, messages, 0) == 0);
    check(json_array_size(request) == 1);
    const json_t *back = json_object_get(json_array_get(request, 0), "tool_calls");
    check(json_array_size(back) == json_array_size(calls));
    for (size_t i = 0; i < json_array_size(calls); i++) {
        const json_t *sent = json_object_get(json_array_get(calls, i), "function");
        const json_t *got = json_object_get(json_array_get(back, i), "function");
        check(json_equal(json_object_get(sent, "name"), json_object_get(got, "name")));
        check_arguments_kept(json_string_value(json_object_get(sent, "arguments")),
                             json_string_value(json_object_get(got, "arguments")));
    }
    json_decref(request);
    json_decref(messages);
    json_decref(ai);
}

static void check_reply(const model_reply *reply, const fbuf *deltas) {
    const json_t *m = reply->message;
    check(json_is_object(m));
    check(strcmp(json_string_value(json_object_get(m, "role")), "assistant") == 0);
    const json_t *content = json_object_get(m, "content");
    check_string(content, 0, MODEL_CONTENT_MAX);
    check(json_string_length(content) == deltas->len);
    check(deltas->len == 0 || memcmp(json_string_value(content), deltas->data, deltas->len) == 0);
    const json_t *calls = json_object_get(m, "tool_calls");
    size_t n_calls = json_array_size(calls);
    check(!calls || (n_calls >= 1 && n_calls <= MODEL_TOOL_CALLS_MAX));
    check(deltas->len > 0 || calls);
    for (size_t i = 0; i < json_array_size(calls); i++)
        check_tool_call(json_array_get(calls, i));
    check(strlen(reply->finish_reason) < sizeof reply->finish_reason);
    check_stored(reply);
}

static void split(model_response *resp, const char *data, size_t size) {
    const char *blank = NULL;
    for (size_t i = 0; i + 1 < size && !blank; i++)
        if (data[i] == '\n' && data[i + 1] == '\n')
            blank = data + i;
    resp->head = data;
    resp->head_len = blank ? (size_t)(blank - data) + 1 : 0;
    resp->body = blank ? blank + 2 : data;
    resp->body_len = size - (size_t)(resp->body - data);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FUZZ_INPUT_MAX)
        return 0;
    /* An exact-size copy: a read past the input is caught. */
    char *copy = malloc(size - 1 ? size - 1 : 1);
    check(copy != NULL);
    memcpy(copy, data + 1, size - 1);
    model_response resp = {.status = statuses[data[0] % ARRAY_LEN(statuses)]};
    split(&resp, copy, size - 1);
    model_config cfg = {.name = "fuzz"};
    model_reply reply;
    enum model_failure why;
    int64_t retry_after_ms;
    fbuf deltas = {0};
    int r = model_response_read(&reply, &why, &retry_after_ms, &cfg, &resp, on_delta, &deltas);
    check(r == 0 || r == FAWN_EPERM || r == FAWN_EBUSY || r == FAWN_EPROTO || r == FAWN_E2BIG ||
          r == FAWN_EIO);
    check((r == 0) == (why == MODEL_OK) && (r == 0) == (reply.message != NULL));
    check(retry_after_ms >= -1);
    if (resp.status < 200 || resp.status > 299)
        check(r < 0 && why == model_classify_http(resp.status, resp.body, resp.body_len));
    if (r == 0)
        check_reply(&reply, &deltas);
    model_reply_clear(&reply);
    fbuf_free(&deltas);
    free(copy);
    return 0;
}
