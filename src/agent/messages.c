/* Messages: the stored form (LangChain's dict shape: type human/ai/tool,
 * content, tool_calls, tool_call_id, id, additional_kwargs) and the request
 * form sent to an OpenAI-compatible model. */
#include <stdio.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"
#include "paths/paths.h"

/* Longest message id a client may choose. */
#define MESSAGE_ID_MAX 128

void agent_message_id(char out[40]) { fawn_random_uuid(out); }

/* Text content: a string, or a list of parts ({"type":"text","text"} and
 * others) as LangChain sends them. */
static bool content_valid(const json_t *c) {
    if (json_is_string(c))
        return true;
    if (!json_is_array(c))
        return false;
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        if (!json_is_object(part) || !json_is_string(json_object_get(part, "type")))
            return false;
    }
    return true;
}

/* An ai message's tool_calls: absent, or a list of {id, name, args}. */
static bool tool_calls_valid(const json_t *calls) {
    if (!calls || json_is_null(calls))
        return true;
    if (!json_is_array(calls))
        return false;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        if (!json_is_string(json_object_get(c, "id")) ||
            !json_is_string(json_object_get(c, "name")) || !json_object_get(c, "args"))
            return false;
    }
    return true;
}

int agent_message_check(const json_t *m, const char *shown) {
    static const char *const types[] = {"human", "ai", "tool", "system"};
    const char *type = json_string_value(json_object_get(m, "type"));
    bool known = false;
    for (size_t i = 0; type && i < ARRAY_LEN(types); i++)
        known = known || strcmp(type, types[i]) == 0;
    if (!known)
        return fawn_err(FAWN_EINVAL, "%s: type must be human, ai, tool or system", shown);
    if (!content_valid(json_object_get(m, "content")))
        return fawn_err(FAWN_EINVAL, "%s.content: must be text or a list of parts", shown);
    const json_t *id = json_object_get(m, "id");
    if (id && !json_is_null(id) && !json_is_string(id))
        return fawn_err(FAWN_EINVAL, "%s.id: must be a string", shown);
    if (strcmp(type, "ai") == 0 && !tool_calls_valid(json_object_get(m, "tool_calls")))
        return fawn_err(FAWN_EINVAL, "%s.tool_calls: must be a list of {id, name, args}", shown);
    if (strcmp(type, "tool") == 0 && !json_is_string(json_object_get(m, "tool_call_id")))
        return fawn_err(FAWN_EINVAL, "%s.tool_call_id: must be a string", shown);
    return 0;
}

/* A JSON string that is a valid file name (no NUL inside either). */
static bool file_name_valid(const json_t *name) {
    const char *text = json_string_value(name);
    return text && strlen(text) == json_string_length(name) && vpath_name_valid(text);
}

/* What a file entry of additional_kwargs.files keeps: its name, size,
 * virtual path and upload status (others are dropped), each checked. */
static int file_entry(json_t **out, const json_t *f, size_t i, size_t k) {
    *out = NULL;
    const json_t *name = json_object_get(f, "filename"), *size = json_object_get(f, "size");
    const json_t *path = json_object_get(f, "path"), *status = json_object_get(f, "status");
    const char *bad = !json_is_object(f)       ? ""
                      : !file_name_valid(name) ? ".filename"
                      : size && !(json_is_integer(size) && json_integer_value(size) >= 0) ? ".size"
                      : path && !(json_is_string(path) && json_string_length(path) <= VPATH_MAX)
                          ? ".path"
                      : status && !(json_is_string(status) &&
                                    json_string_length(status) <= AGENT_FILE_STATUS_MAX)
                          ? ".status"
                          : NULL;
    if (bad)
        return fawn_err(FAWN_EINVAL,
                        "input.messages[%zu].additional_kwargs.files[%zu]%s: not a file entry "
                        "({filename, size?, path?, status?})",
                        i, k, bad);
    *out = json_pack("{s:O, s:O*, s:O*, s:O*}", "filename", name, "size", size, "path", path,
                     "status", status);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* The additional_kwargs a stored human message keeps: files, the
 * attachments a client uploaded with it (DeerFlow's UI sends them), at
 * most AGENT_MESSAGE_FILES_MAX; other keys are dropped. */
static int kwargs_keep(json_t **out, const json_t *in, size_t i) {
    *out = json_object();
    const json_t *kw = json_object_get(in, "additional_kwargs");
    const json_t *files = json_object_get(kw, "files");
    int r = *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && kw && !json_is_null(kw) && !json_is_object(kw))
        r = fawn_err(FAWN_EINVAL, "input.messages[%zu].additional_kwargs: must be an object", i);
    if (r == 0 && files && !json_is_null(files) &&
        (!json_is_array(files) || json_array_size(files) > AGENT_MESSAGE_FILES_MAX))
        r = fawn_err(FAWN_EINVAL,
                     "input.messages[%zu].additional_kwargs.files: must be a list of at most %d "
                     "file entries",
                     i, AGENT_MESSAGE_FILES_MAX);
    json_t *kept = r == 0 && json_array_size(files) ? json_array() : NULL;
    for (size_t k = 0; r == 0 && k < json_array_size(files); k++) {
        json_t *entry;
        r = file_entry(&entry, json_array_get(files, k), i, k);
        if (r == 0)
            json_array_append_new(kept, entry);
    }
    if (r == 0 && kept)
        json_object_set(*out, "files", kept);
    json_decref(kept);
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

static int human_message(json_t **out, const json_t *in, size_t i) {
    if (!json_is_object(in))
        return fawn_err(FAWN_EINVAL, "input.messages[%zu]: must be an object", i);
    const char *type = json_string_value(json_object_get(in, "type"));
    const char *role = json_string_value(json_object_get(in, "role"));
    const char *kind = type ? type : role;
    if (!kind || (strcmp(kind, "human") != 0 && strcmp(kind, "user") != 0))
        return fawn_err(FAWN_EINVAL, "input.messages[%zu]: only human (user) messages can be sent",
                        i);
    const json_t *content = json_object_get(in, "content");
    if (!content_valid(content))
        return fawn_err(FAWN_EINVAL, "input.messages[%zu].content: must be text or a list of parts",
                        i);
    json_t *kwargs;
    int r = kwargs_keep(&kwargs, in, i);
    if (r < 0)
        return r;
    const char *given = json_string_value(json_object_get(in, "id"));
    char id[40];
    agent_message_id(id);
    bool keep = given && given[0] && strlen(given) <= MESSAGE_ID_MAX;
    *out = json_pack("{s:s, s:O, s:s, s:o, s:{}}", "type", "human", "content", content, "id",
                     keep ? given : id, "additional_kwargs", kwargs, "response_metadata");
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int agent_input_messages(json_t **out, const json_t *input) {
    *out = json_array();
    if (!*out)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (input && !json_is_array(input)) {
        json_decref(*out);
        *out = NULL;
        return fawn_err(FAWN_EINVAL, "input.messages must be a list");
    }
    size_t i;
    json_t *m;
    json_array_foreach(input, i, m) {
        json_t *h = NULL;
        int r = human_message(&h, m, i);
        if (r < 0) {
            json_decref(*out);
            *out = NULL;
            return r;
        }
        json_array_append_new(*out, h);
    }
    return 0;
}

/* The stored form of one OpenAI tool call: {name, args, id, type}. args
 * that are not a JSON object stay as their text (the tool refuses them). */
static json_t *stored_tool_call(const json_t *c) {
    const json_t *fn = json_object_get(c, "function");
    const char *text = json_string_value(json_object_get(fn, "arguments"));
    json_t *args = text && text[0] ? json_loads(text, JSON_DECODE_ANY, NULL) : json_object();
    if (!json_is_object(args)) {
        json_decref(args);
        args = json_string(text ? text : "");
    }
    return json_pack("{s:O, s:o, s:O, s:s}", "name", json_object_get(fn, "name"), "args", args,
                     "id", json_object_get(c, "id"), "type", "tool_call");
}

json_t *agent_ai_message(const model_reply *reply, const char *model_name, const char *id) {
    const json_t *msg = reply->message;
    json_t *calls = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, c) {
        json_array_append_new(calls, stored_tool_call(c));
    }
    json_t *out = json_pack("{s:s, s:s, s:s, s:o, s:[], s:{}, s:{s:s, s:s}}", "type", "ai",
                            "content", json_string_value(json_object_get(msg, "content")) ?: "",
                            "id", id, "tool_calls", calls, "invalid_tool_calls",
                            "additional_kwargs", "response_metadata", "finish_reason",
                            reply->finish_reason, "model_name", model_name);
    if (out && reply->prompt_tokens >= 0)
        json_object_set_new(
            out, "usage_metadata",
            json_pack("{s:I, s:I, s:I}", "input_tokens", (json_int_t)reply->prompt_tokens,
                      "output_tokens", (json_int_t)reply->completion_tokens, "total_tokens",
                      (json_int_t)(reply->prompt_tokens + reply->completion_tokens)));
    return out;
}

json_t *agent_tool_message(const agent_tool_call *call) {
    char id[40];
    agent_message_id(id);
    const tool_status *st = &call->result.status;
    json_t *m = json_pack("{s:s, s:s, s:s, s:s, s:s, s:s, s:{s:o}, s:{}}", "type", "tool",
                          "content", call->result.text ? call->result.text : "", "tool_call_id",
                          call->id, "name", call->name, "id", id, "status",
                          st->outcome == TOOL_SUCCESS ? "success" : "error", "additional_kwargs",
                          "tool_status", tool_status_json(st), "response_metadata");
    /* A task's sub-agent facts (status, brief, sha256) go with its message. */
    json_t *subagent = json_object_get(call->result.facts, "subagent");
    if (m && json_is_object(subagent))
        json_object_update(json_object_get(m, "additional_kwargs"), subagent);
    return m;
}

/* The request-only projection of a stored tool message: its exact text and
 * its status as one JSON document, so the status survives any provider. */
static json_t *tool_projection(const json_t *m) {
    json_t *status = json_object_get(json_object_get(m, "additional_kwargs"), "tool_status");
    json_t *doc = json_pack("{s:O?, s:O}", "tool_status", status, "output",
                            json_object_get(m, "content"));
    char *text = doc ? json_dumps(doc, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    json_t *out = json_pack("{s:s, s:O, s:s}", "role", "tool", "tool_call_id",
                            json_object_get(m, "tool_call_id"), "content", text ? text : "");
    free(text);
    return out;
}

static json_t *assistant_request(const json_t *m) {
    json_t *out = json_pack("{s:s, s:O}", "role", "assistant", "content",
                            json_object_get(m, "content"));
    const json_t *calls = json_object_get(m, "tool_calls");
    if (!out || json_array_size(calls) == 0)
        return out;
    json_t *list = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        const json_t *args = json_object_get(c, "args");
        char *text = json_is_string(args) ? strdup(json_string_value(args))
                                          : json_dumps(args, JSON_COMPACT);
        json_array_append_new(list, json_pack("{s:O, s:s, s:{s:O, s:s}}", "id",
                                              json_object_get(c, "id"), "type", "function",
                                              "function", "name", json_object_get(c, "name"),
                                              "arguments", text ? text : "{}"));
        free(text);
    }
    json_object_set_new(out, "tool_calls", list);
    return out;
}

int agent_request_extend(json_t *request, const json_t *messages, size_t from) {
    for (size_t i = from; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        char shown[48];
        snprintf(shown, sizeof shown, "the thread's message %zu", i);
        int r = agent_message_check(m, shown);
        if (r < 0)
            return r;
        const char *type = json_string_value(json_object_get(m, "type"));
        json_t *req = NULL;
        if (strcmp(type, "human") == 0)
            req = json_pack("{s:s, s:O}", "role", "user", "content", json_object_get(m, "content"));
        else if (strcmp(type, "ai") == 0)
            req = assistant_request(m);
        else if (strcmp(type, "tool") == 0)
            req = tool_projection(m);
        else
            continue;
        if (!req || json_array_append_new(request, req) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}
