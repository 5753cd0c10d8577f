/* The hook chain (agent_internal.h) and the hooks about messages and model
 * calls; the tool hooks are in hooks_tools.c. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"
#include "paths/paths.h"

/* The chain: the one place that orders the hooks. Each point walks it by
 * the rule at agent_hook (before_* and sandbox_acquired first to last,
 * wrap_* nested with the first outermost, after_* last to first), so the
 * hooks run as:
 *   before_agent      dangling_tool_calls, then skills
 *   sandbox_acquired  delivery_check (outputs as the run found them)
 *   before_model      compact, then input_sanitization, then uploads, then memory
 *   wrap_model        model_errors > empty_final_retry > the model
 *   after_model       finish_reasons, then loop_detection
 *   wrap_tool         tool_output_budget > remote_content > tool_authorization > skills
 *                     > read_before_write
 *                     > delivery_check > loop_detection > clarification
 *                     > tool_errors > mcp (calls of pinned MCP tools)
                     > subagents (task calls) > the tool
 *   after_agent       title, then delivery_check
 * So a reply cut for length or safety has its tool calls cleared before
 * loop detection counts them; an empty reply is retried inside the model
 * error handling, which sees only the retry's result; tool_errors gives
 * every outer hook a result to read; a denied call is never checked for
 * read-before-write; the budget saves the text every inner hook wrote,
 * a web page's already neutralized (so reading the saved file back gives
 * no more than the model was told); the
 * uploads note goes before the fenced user text, outside the fence; the
 * memory context goes after the system prompt, fenced on its own; the
 * compacted request (a summary instead of older messages) is what every
 * other hook sees, so the current user message is fenced in it; a task
 * call is authorized, checked against the active skill and counted for
 * loops like any other before its sub-agent starts. */
const agent_hook *const agent_hooks[] = {
    &hook_compact,
    &hook_input_sanitization,
    &hook_uploads,
    &hook_tool_output_budget,
    &hook_remote_content,
    &hook_dangling_tool_calls,
    &hook_model_errors,
    &hook_tool_authorization,
    &hook_skills,
    &hook_read_before_write,
    &hook_delivery_check,
    &hook_title,
    &hook_loop_detection,
    &hook_empty_final_retry,
    &hook_finish_reasons,
    &hook_clarification,
    &hook_tool_errors,
    &hook_memory,
    &hook_mcp,
    &hook_subagents,
};
const size_t agent_hooks_count = ARRAY_LEN(agent_hooks);

/* A sub-agent's chain: the lead's, less what is about the thread and the
 * user (its history, uploads, title, memory, delivery, clarification) and
 * delegation. */
const agent_hook *const agent_task_hooks[] = {
    &hook_tool_output_budget,
    &hook_remote_content,
    &hook_model_errors,
    &hook_tool_authorization,
    &hook_skills,
    &hook_read_before_write,
    &hook_loop_detection,
    &hook_empty_final_retry,
    &hook_finish_reasons,
    &hook_tool_errors,
    &hook_mcp,
};
const size_t agent_task_hooks_count = ARRAY_LEN(agent_task_hooks);

/* ---- input sanitization: the latest user text, fenced (request only) ----
 * Whatever the shape of the message's content, its text is fenced the same
 * way: a string is the text part of a list of one (agent_input_fence). */

#define INPUT_BEGIN "<<<BEGIN USER INPUT>>>"
#define INPUT_END "<<<END USER INPUT>>>"

/* Where the defanging of one message's text stands: the last byte written
 * and how many times in a row it came. */
typedef struct fence_run {
    unsigned char last;
    unsigned repeat;
} fence_run;

/* Bytes of the control character at p (C0 but tab and newline, DEL, or
 * C1: U+0080 to U+009F), 0 for any other character; end bounds p. */
static size_t control_len(const unsigned char *p, const unsigned char *end) {
    if ((*p < 0x20 && *p != '\n' && *p != '\t') || *p == 0x7f)
        return 1;
    return *p == 0xc2 && p + 1 < end && p[1] >= 0x80 && p[1] <= 0x9f ? 2 : 0;
}

/* Whether the '<' at p opens something a reader could take for markup: a
 * tag, a closing tag, a declaration or a chat template's token ("<|"). */
static bool tag_open(const unsigned char *p, const unsigned char *end) {
    return *p == '<' && p + 1 < end &&
           (isalpha(p[1]) || p[1] == '/' || p[1] == '!' || p[1] == '?' || p[1] == '|');
}

/* Appends the n bytes of text to b, going on from run: control characters
 * are dropped and a third '<' or '>' in a row gets a space before it, so
 * what is written, read on from what run saw, holds neither "<<<" nor
 * ">>>": nothing in it can open or close the fence. With tags, a '<' that
 * opens markup is written "&lt;". */
static int defang_append(fbuf *b, fence_run *run, const char *text, size_t n, bool tags) {
    const unsigned char *p = (const unsigned char *)text, *end = p + n;
    int r = 0;
    while (r == 0 && p < end) {
        size_t skip = control_len(p, end);
        if (skip) {
            p += skip;
            continue;
        }
        if (tags && tag_open(p, end)) {
            r = fbuf_append(b, "&lt;", 4);
            run->last = ';';
            run->repeat = 1;
            p++;
            continue;
        }
        if ((*p == '<' || *p == '>') && *p == run->last && run->repeat == 2) {
            r = fbuf_append(b, " ", 1);
            run->last = ' ';
        }
        run->repeat = *p == run->last ? run->repeat + 1 : 1;
        run->last = *p;
        if (r == 0)
            r = fbuf_append(b, p++, 1);
    }
    return r;
}

int agent_text_defang(fbuf *b, const char *text, size_t n) {
    fence_run run = {.last = '\n'};
    return defang_append(b, &run, text, n, false);
}

int agent_text_neutralize(fbuf *b, const char *text, size_t n) {
    fence_run run = {.last = '\n'};
    return defang_append(b, &run, text, n, true);
}

/* The text of a text part ({"type": "text", "text": "..."}), or NULL. */
static const json_t *part_text(const json_t *part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    const json_t *text = json_object_get(part, "text");
    return type && strcmp(type, "text") == 0 && json_is_string(text) ? text : NULL;
}

/* Appends what b holds to parts as a text part and empties b; nothing when
 * b is empty. */
static int text_flush(json_t *parts, fbuf *b) {
    if (b->len == 0)
        return 0;
    json_t *part = json_pack("{s:s, s:s%}", "type", "text", "text", b->data, b->len);
    fbuf_free(b);
    if (!part || json_array_append_new(parts, part) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return 0;
}

/* parts fenced into *out (a new list): their text, read as one text in
 * order, defanged and between the markers, in text parts where it was;
 * the other parts as they are, between them. */
static int parts_fence(json_t **out, const json_t *parts) {
    fbuf b = {0};
    fence_run run = {.last = '\n'}; /* what the begin marker ends with */
    *out = json_array();
    int r = *out ? fbuf_printf(&b, "%s\n", INPUT_BEGIN) : fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < json_array_size(parts); i++) {
        json_t *part = json_array_get(parts, i);
        const json_t *text = part_text(part);
        if (text)
            r = defang_append(&b, &run, json_string_value(text), json_string_length(text), false);
        else if ((r = text_flush(*out, &b)) == 0 && json_array_append(*out, part) < 0)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
    }
    r = r ? r : fbuf_printf(&b, "\n%s", INPUT_END);
    r = r ? r : text_flush(*out, &b);
    fbuf_free(&b);
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

int agent_input_fence(json_t **out, const json_t *content) {
    *out = NULL;
    if (!json_is_string(content) && !json_is_array(content))
        return fawn_err(FAWN_EINVAL, "a user message's content is text or a list of parts");
    json_t *parts = json_is_string(content)
                        ? json_pack("[{s:s, s:O}]", "type", "text", "text", content)
                        : json_incref((json_t *)content);
    json_t *fenced = NULL;
    int r = parts ? parts_fence(&fenced, parts) : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(parts);
    if (r == 0 && json_is_string(content)) {
        *out = json_incref(json_object_get(json_array_get(fenced, 0), "text"));
        json_decref(fenced);
    } else {
        *out = fenced;
    }
    return r;
}

/* The call fails (the model is not called) rather than go unfenced. */
static void sanitize_fail(agent_model_call *call, int code) {
    call->code = code;
    free(call->error);
    if (asprintf(&call->error, "the user's message could not be fenced: %s", fawn_errmsg()) < 0)
        call->error = NULL;
}

static void sanitize_before_model(agent_loop *run, agent_model_call *call) {
    for (size_t i = json_array_size(call->request); i-- > 0;) {
        json_t *m = json_array_get(call->request, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "user") != 0)
            continue;
        json_t *content;
        int r = agent_input_fence(&content, json_object_get(m, "content"));
        json_t *safe = r == 0 ? json_pack("{s:s, s:O}", "role", "user", "content", content) : NULL;
        json_decref(content);
        if (r == 0 && (!safe || json_array_set_new(call->request, i, safe) < 0))
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        if (r < 0)
            sanitize_fail(call, r);
        return;
    }
}

const agent_hook hook_input_sanitization = {.name = "input_sanitization",
                                            .before_model = sanitize_before_model};

/* ---- uploads: the model is told which files came with the message ----
 * A client attaches files to a message by uploading them to the thread and
 * naming them in the message's additional_kwargs.files. The run's input
 * message is sent to the model with a note before its text that names
 * those of them the uploads directory holds (request only: the stored
 * message keeps the user's words). Files of earlier messages are not
 * named again: the agent lists /mnt/user-data/uploads when it needs them. */

#define UPLOADS_DIR VPATH_USER_DATA "/uploads"

int agent_text_quote(fbuf *b, const char *text) {
    json_t *s = json_string(text);
    char *q = s ? json_dumps(s, JSON_ENCODE_ANY) : NULL;
    json_decref(s);
    int r = q ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    for (const char *p = q; r == 0 && *p; p++)
        r = *p == '<'   ? fbuf_printf(b, "\\u003c")
            : *p == '>' ? fbuf_printf(b, "\\u003e")
                        : fbuf_append(b, p, 1);
    free(q);
    return r;
}

/* The listing's regular file named name, or NULL. */
static const json_t *listed_file(const json_t *entries, const char *name) {
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        const char *type = json_string_value(json_object_get(e, "type"));
        const char *n = json_string_value(json_object_get(e, "name"));
        if (type && n && strcmp(type, "file") == 0 && strcmp(n, name) == 0)
            return e;
    }
    return NULL;
}

/* Whether files[0..k) names name already. */
static bool named_before(const json_t *files, size_t k, const char *name) {
    for (size_t i = 0; i < k; i++) {
        const char *n = json_string_value(json_object_get(json_array_get(files, i), "filename"));
        if (n && strcmp(n, name) == 0)
            return true;
    }
    return false;
}

/* Lines "- <path> (<size> bytes)" of the attached files the listing holds. */
static int note_lines(fbuf *b, size_t *named, size_t *more, const json_t *files,
                      const json_t *entries) {
    *named = *more = 0;
    int r = 0;
    for (size_t k = 0; r == 0 && k < json_array_size(files); k++) {
        const char *name = json_string_value(json_object_get(json_array_get(files, k), "filename"));
        const json_t *e = name && !named_before(files, k, name) ? listed_file(entries, name) : NULL;
        if (!e)
            continue;
        if (*named == AGENT_UPLOADS_NOTE_FILES_MAX) {
            (*more)++;
            continue;
        }
        char path[VPATH_MAX + sizeof UPLOADS_DIR + 1];
        snprintf(path, sizeof path, "%s/%s", UPLOADS_DIR, name);
        r = fbuf_printf(b, "- ");
        if (r == 0)
            r = agent_text_quote(b, path);
        if (r == 0)
            r = fbuf_printf(b, " (%lld bytes)\n",
                            (long long)json_integer_value(json_object_get(e, "size")));
        (*named)++;
    }
    return r;
}

int agent_uploads_note(char **out, const json_t *files, const json_t *entries) {
    *out = NULL;
    fbuf lines = {0}, b = {0};
    size_t named, more;
    int r = note_lines(&lines, &named, &more, files, entries);
    if (r < 0 || named == 0) {
        fbuf_free(&lines);
        return r;
    }
    r = fbuf_printf(&b,
                    "<uploaded_files>\nThe user attached these files to this message; they "
                    "are in " UPLOADS_DIR ":\n%s",
                    lines.data);
    if (r == 0 && more)
        r = fbuf_printf(&b, "... and %zu more, not named here: list " UPLOADS_DIR " to see them.\n",
                        more);
    if (r == 0)
        r = fbuf_printf(&b, "Read the files you need (read_file, or bash for other formats) "
                            "before you answer.\n</uploaded_files>");
    fbuf_free(&lines);
    if (r < 0) {
        fbuf_free(&b);
        return r;
    }
    *out = fbuf_steal(&b);
    return 0;
}

/* The attachments of the run's input: its last message's files. */
static const json_t *input_files(const agent_loop *run) {
    size_t n = json_array_size(run->p->input);
    const json_t *last = n ? json_array_get(run->p->input, n - 1) : NULL;
    return json_object_get(json_object_get(last, "additional_kwargs"), "files");
}

/* Looks the attachments up in the sandbox, once per run. */
static void uploads_note_make(agent_loop *run) {
    run->uploads_checked = true;
    const json_t *files = input_files(run);
    json_t *entries = NULL;
    if (json_array_size(files) == 0)
        return;
    if (agent_box_list(&entries, run, UPLOADS_DIR) < 0 ||
        agent_uploads_note(&run->uploads_note, files, entries) < 0)
        log_warn("agent", "run %s: the model is not told of the attached files: %s", run->p->run_id,
                 fawn_errmsg());
    json_decref(entries);
}

/* content with note before it and a blank line: at the start of its text,
 * or in a first part of its own (the same text, read in order). */
static json_t *noted(const json_t *content, const char *note) {
    if (json_is_string(content))
        return json_sprintf("%s\n\n%s", note, json_string_value(content));
    json_t *parts = json_pack("[{s:s, s:s+}]", "type", "text", "text", note, "\n\n");
    if (parts && json_is_array(content))
        json_array_extend(parts, (json_t *)content);
    return parts;
}

static void uploads_before_model(agent_loop *run, agent_model_call *call) {
    if (!run->uploads_checked)
        uploads_note_make(run);
    if (!run->uploads_note)
        return;
    for (size_t i = json_array_size(call->request); i-- > 0;) {
        json_t *m = json_array_get(call->request, i);
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role || strcmp(role, "user") != 0)
            continue;
        json_t *content = noted(json_object_get(m, "content"), run->uploads_note);
        if (content)
            json_array_set_new(call->request, i,
                               json_pack("{s:s, s:o}", "role", "user", "content", content));
        return;
    }
}

const agent_hook hook_uploads = {.name = "uploads", .before_model = uploads_before_model};

/* ---- dangling tool calls: every call gets a result ---- */

#define DANGLING_TEXT "[Tool call was interrupted and did not return a result.]"

static bool has_result(const json_t *messages, size_t from, const char *call_id) {
    for (size_t i = from; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        const char *id = json_string_value(json_object_get(m, "tool_call_id"));
        if (id && strcmp(id, call_id) == 0)
            return true;
    }
    return false;
}

static json_t *placeholder(const json_t *tool_call) {
    tool_status st = {.outcome = TOOL_CANCELLED, .exit_code = -1};
    snprintf(st.error_type, sizeof st.error_type, "interrupted");
    char id[40];
    agent_message_id(id);
    return json_pack("{s:s, s:s, s:O, s:O, s:s, s:s, s:{s:o}, s:{}}", "type", "tool", "content",
                     DANGLING_TEXT, "tool_call_id", json_object_get(tool_call, "id"), "name",
                     json_object_get(tool_call, "name"), "id", id, "status", "error",
                     "additional_kwargs", "tool_status", tool_status_json(&st),
                     "response_metadata");
}

static void dangling_before_agent(agent_loop *run) {
    json_t *messages = run->messages;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        size_t k, at = i + 1;
        json_t *c;
        json_array_foreach(json_object_get(m, "tool_calls"), k, c) {
            const char *id = json_string_value(json_object_get(c, "id"));
            if (id && !has_result(messages, i + 1, id))
                json_array_insert_new(messages, at++, placeholder(c));
        }
    }
}

const agent_hook hook_dangling_tool_calls = {.name = "dangling_tool_calls",
                                             .before_agent = dangling_before_agent};

/* ---- model errors: a failed call ends the run with a visible message ---- */

static void model_errors_wrap(agent_loop *run, agent_model_call *call, size_t next) {
    agent_next_model(run, call, next);
    if (call->code == 0)
        return;
    if (call->why == MODEL_FAIL_CANCELLED || call->code == FAWN_ECANCELED) {
        agent_stop(run, "", NULL);
        return;
    }
    const char *why = call->error ? call->error : "unknown error";
    agent_stop(run, "", "Model %s failed (%s): %s", run->model->name, model_failure_name(call->why),
               why);
    model_reply_clear(&call->reply);
    char *text;
    if (asprintf(&text, "Error: the model could not answer (%s): %s", model_failure_name(call->why),
                 why) < 0)
        return;
    call->reply.message = json_pack("{s:s, s:s}", "role", "assistant", "content", text);
    call->reply.prompt_tokens = call->reply.completion_tokens = -1;
    snprintf(call->reply.finish_reason, sizeof call->reply.finish_reason, "error");
    call->code = call->reply.message ? 0 : call->code;
    free(text);
}

const agent_hook hook_model_errors = {.name = "model_errors", .wrap_model = model_errors_wrap};

/* ---- empty final reply: retried once after a tool result ---- */

static bool blank(const char *s) {
    for (; s && *s; s++)
        if (!isspace((unsigned char)*s))
            return false;
    return true;
}

static bool empty_final(const agent_model_call *call) {
    const json_t *msg = call->reply.message;
    return call->code == 0 && json_array_size(json_object_get(msg, "tool_calls")) == 0 &&
           blank(json_string_value(json_object_get(msg, "content")));
}

static void empty_retry_wrap(agent_loop *run, agent_model_call *call, size_t next) {
    agent_next_model(run, call, next);
    const json_t *last = json_array_get(run->messages, json_array_size(run->messages) - 1);
    const char *type = json_string_value(json_object_get(last, "type"));
    if (!empty_final(call) || !type || strcmp(type, "tool") != 0)
        return;
    if (!run->empty_retried) {
        run->empty_retried = true;
        agent_next_model(run, call, next);
        if (!empty_final(call))
            return;
    }
    json_object_set_new(call->reply.message, "content",
                        json_string("Error: the model returned an empty reply after a tool "
                                    "result, twice."));
    agent_stop(run, "", "The model returned an empty final reply");
}

const agent_hook hook_empty_final_retry = {.name = "empty_final_retry",
                                           .wrap_model = empty_retry_wrap};

/* ---- finish reasons: length and content_filter end the run ---- */

static void finish_after_model(agent_loop *run, json_t *ai) {
    const char *why = json_string_value(
        json_object_get(json_object_get(ai, "response_metadata"), "finish_reason"));
    if (!why)
        return;
    if (strcmp(why, "length") == 0) {
        json_array_clear(json_object_get(ai, "tool_calls"));
        agent_stop(run, "model_length_capped", NULL);
    } else if (strcmp(why, "content_filter") == 0) {
        json_array_clear(json_object_get(ai, "tool_calls"));
        agent_stop(run, "safety_capped", NULL);
    }
}

const agent_hook hook_finish_reasons = {.name = "finish_reasons",
                                        .after_model = finish_after_model};

/* ---- title: from the first user message ---- */

#define TITLE_MAX 50

/* The text of a message's content (a string, or the first text part). */
static const char *content_text(const json_t *m) {
    const json_t *c = json_object_get(m, "content");
    if (json_is_string(c))
        return json_string_value(c);
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *t = json_string_value(json_object_get(part, "text"));
        if (t)
            return t;
    }
    return "";
}

static void title_after_agent(agent_loop *run) {
    if (json_object_get(run->values, "title"))
        return;
    const json_t *first = NULL;
    bool answered = false;
    size_t i;
    json_t *m;
    json_array_foreach(run->messages, i, m) {
        const char *type = json_string_value(json_object_get(m, "type"));
        if (type && strcmp(type, "human") == 0 && !first)
            first = m;
        answered |= type && strcmp(type, "ai") == 0;
    }
    if (!first || !answered)
        return;
    const char *text = content_text(first);
    while (isspace((unsigned char)*text))
        text++;
    size_t n = strlen(text), cut = n > TITLE_MAX ? TITLE_MAX : n;
    cut = cut < n ? fawn_utf8_char_start(text, cut) : cut;
    char title[TITLE_MAX + 8];
    snprintf(title, sizeof title, "%.*s%s", (int)cut, text, cut < n ? "..." : "");
    for (char *p = title; *p; p++)
        if ((unsigned char)*p < 0x20)
            *p = ' ';
    json_object_set_new(run->values, "title", json_string(title[0] ? title : "New Conversation"));
}

const agent_hook hook_title = {.name = "title", .after_agent = title_after_agent};
