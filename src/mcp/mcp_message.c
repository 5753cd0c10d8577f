/* JSON-RPC 2.0 messages of MCP (mcp.h): the strict reader and the writers,
 * and the hash that pins a tool. */
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp.h"

/* Whether the JSON text nests deeper than MCP_JSON_DEPTH_MAX, read before
 * jansson (whose own ceiling is far higher) sees it: brackets outside
 * strings are counted. */
static bool too_deep(const char *text, size_t len) {
    size_t depth = 0;
    bool in_string = false, escaped = false;
    for (size_t i = 0; i < len; i++) {
        char c = text[i];
        if (in_string) {
            if (escaped)
                escaped = false;
            else if (c == '\\')
                escaped = true;
            else if (c == '"')
                in_string = false;
        } else if (c == '"') {
            in_string = true;
        } else if (c == '[' || c == '{') {
            if (++depth > MCP_JSON_DEPTH_MAX)
                return true;
        } else if ((c == ']' || c == '}') && depth > 0) {
            depth--;
        }
    }
    return false;
}

/* An id MCP allows: an integer or a string (not null, not a fraction). */
static bool id_valid(const json_t *id) {
    return json_is_integer(id) || (json_is_string(id) && json_string_length(id) <= 256);
}

static int shape_request(mcp_msg *m, const json_t *method, const json_t *id) {
    if (!json_is_string(method) || json_string_length(method) == 0)
        return fawn_err(FAWN_EPROTO, "a JSON-RPC method must be a non-empty string");
    const json_t *params = json_object_get(m->root, "params");
    if (params && !json_is_object(params) && !json_is_array(params))
        return fawn_err(FAWN_EPROTO, "JSON-RPC params must be an object or an array");
    if (json_object_get(m->root, "result") || json_object_get(m->root, "error"))
        return fawn_err(FAWN_EPROTO, "a JSON-RPC request cannot carry a result or an error");
    m->kind = id ? MCP_MSG_REQUEST : MCP_MSG_NOTIFICATION;
    m->method = json_string_value(method);
    m->params = params;
    return 0;
}

static int shape_error(mcp_msg *m, const json_t *error) {
    const json_t *code = json_object_get(error, "code");
    const json_t *message = json_object_get(error, "message");
    if (!json_is_object(error) || !json_is_integer(code) || !json_is_string(message))
        return fawn_err(FAWN_EPROTO,
                        "a JSON-RPC error must be an object with an integer code and a message");
    m->kind = MCP_MSG_ERROR;
    m->error_code = json_integer_value(code);
    m->error_msg = json_string_value(message);
    return 0;
}

static int shape_response(mcp_msg *m, const json_t *id) {
    const json_t *result = json_object_get(m->root, "result");
    const json_t *error = json_object_get(m->root, "error");
    if (!id)
        return fawn_err(FAWN_EPROTO, "a JSON-RPC response needs an id");
    if (!result == !error)
        return fawn_err(FAWN_EPROTO, "a JSON-RPC response carries exactly one of result, error");
    if (error)
        return shape_error(m, error);
    if (!json_is_object(result))
        return fawn_err(FAWN_EPROTO, "an MCP result must be an object");
    m->kind = MCP_MSG_RESULT;
    m->result = result;
    return 0;
}

static int shape_read(mcp_msg *m) {
    if (!json_is_object(m->root))
        return fawn_err(FAWN_EPROTO, "a JSON-RPC message must be an object (no batches)");
    const char *version = json_string_value(json_object_get(m->root, "jsonrpc"));
    if (!version || strcmp(version, "2.0") != 0)
        return fawn_err(FAWN_EPROTO, "jsonrpc must be \"2.0\"");
    const json_t *id = json_object_get(m->root, "id");
    if (id && !id_valid(id))
        return fawn_err(FAWN_EPROTO, "a JSON-RPC id must be an integer or a short string");
    m->id = id;
    const json_t *method = json_object_get(m->root, "method");
    return method ? shape_request(m, method, id) : shape_response(m, id);
}

int mcp_msg_parse(mcp_msg *out, const char *text, size_t len) {
    memset(out, 0, sizeof *out);
    if (len > MCP_MESSAGE_MAX)
        return fawn_err(FAWN_E2BIG, "an MCP message is larger than %zu bytes", MCP_MESSAGE_MAX);
    if (too_deep(text, len))
        return fawn_err(FAWN_E2BIG, "an MCP message nests deeper than %d levels",
                        MCP_JSON_DEPTH_MAX);
    json_error_t e;
    out->root = json_loadb(text, len, JSON_REJECT_DUPLICATES, &e);
    if (!out->root)
        return fawn_err(FAWN_EPROTO, "an MCP message is not JSON: %.80s (at %d)", e.text,
                        e.position);
    int r = shape_read(out);
    if (r < 0)
        mcp_msg_clear(out);
    return r;
}

void mcp_msg_clear(mcp_msg *m) {
    json_decref(m->root);
    memset(m, 0, sizeof *m);
}

bool mcp_msg_answers(const mcp_msg *m, int64_t id) {
    return (m->kind == MCP_MSG_RESULT || m->kind == MCP_MSG_ERROR) && json_is_integer(m->id) &&
           json_integer_value(m->id) == id;
}

static char *message_text(json_t *msg, const char *method, const json_t *params) {
    if (!msg || json_object_set_new(msg, "method", json_string(method)) < 0 ||
        (params && json_object_set(msg, "params", (json_t *)params) < 0)) {
        json_decref(msg);
        return NULL;
    }
    char *text = json_dumps(msg, JSON_COMPACT);
    json_decref(msg);
    return text;
}

char *mcp_request_text(int64_t id, const char *method, const json_t *params) {
    return message_text(json_pack("{s:s, s:I}", "jsonrpc", "2.0", "id", (json_int_t)id), method,
                        params);
}

char *mcp_notification_text(const char *method, const json_t *params) {
    return message_text(json_pack("{s:s}", "jsonrpc", "2.0"), method, params);
}

int mcp_tool_hash(char out[65], const char *description, const json_t *schema) {
    out[0] = '\0';
    json_t *input = schema ? json_incref((json_t *)schema) : json_object();
    json_t *pinned = json_pack("{s:s, s:o}", "description", description ? description : "",
                               "inputSchema", input);
    char *text = pinned ? json_dumps(pinned, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY)
                        : NULL;
    json_decref(pinned);
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    fawn_sha256_hex(out, text, strlen(text));
    free(text);
    return 0;
}
