/* Replays (replay.h): the checkpoint a run names, and which messages a
 * regenerate or an edit may take. */
#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "gateway/replay.h"

/* ---- the checkpoint a run names ---- */

/* A checkpoint id as a run names one into out: null (none) or a valid id. */
static int id_take(char out[STORE_RUN_ID_MAX + 1], const json_t *v, const char *shown) {
    out[0] = '\0';
    if (!v || json_is_null(v))
        return 0;
    const char *s = json_string_value(v);
    if (!s || strlen(s) != json_string_length(v) || !fawn_id_valid(s))
        return fawn_err(FAWN_EINVAL, "%s must be a checkpoint id ([A-Za-z0-9_-]{1,64})", shown);
    snprintf(out, STORE_RUN_ID_MAX + 1, "%s", s);
    return 0;
}

/* LangGraph's checkpoint config: its id, in the root namespace only. */
static int checkpoint_object(char out[STORE_RUN_ID_MAX + 1], const char **thread_id,
                             const json_t *cp) {
    static const char *const keys[] = {"checkpoint_id", "checkpoint_ns", "checkpoint_map",
                                       "thread_id", NULL};
    out[0] = '\0';
    if (!json_is_object(cp))
        return fawn_err(FAWN_EINVAL, "checkpoint must be an object");
    const json_t *ns = json_object_get(cp, "checkpoint_ns");
    const json_t *map = json_object_get(cp, "checkpoint_map");
    int r = fjson_check_keys(cp, keys);
    if (r == 0 && ns && !json_is_null(ns) && !(json_is_string(ns) && json_string_length(ns) == 0))
        r = fawn_err(FAWN_EINVAL, "checkpoint.checkpoint_ns must be \"\" (the root namespace, "
                                  "the only one fawn has)");
    if (r == 0 && map && !json_is_null(map) && !(json_is_object(map) && !json_object_size(map)))
        r = fawn_err(FAWN_EINVAL, "checkpoint.checkpoint_map is not supported (fawn has only "
                                  "the root namespace)");
    if (r == 0)
        r = fjson_get_string(thread_id, cp, "thread_id", false);
    return r == 0 ? id_take(out, json_object_get(cp, "checkpoint_id"), "checkpoint.checkpoint_id")
                  : r;
}

int gw_run_checkpoint_parse(char out[STORE_RUN_ID_MAX + 1], const char **thread_id,
                            const json_t *body) {
    out[0] = '\0';
    *thread_id = NULL;
    char by_id[STORE_RUN_ID_MAX + 1], in_object[STORE_RUN_ID_MAX + 1] = "";
    int r = id_take(by_id, json_object_get(body, "checkpoint_id"), "checkpoint_id");
    const json_t *cp = json_object_get(body, "checkpoint");
    if (r == 0 && cp && !json_is_null(cp))
        r = checkpoint_object(in_object, thread_id, cp);
    if (r == 0 && by_id[0] && in_object[0] && strcmp(by_id, in_object) != 0)
        r = fawn_err(FAWN_EINVAL,
                     "checkpoint_id and checkpoint.checkpoint_id name different checkpoints");
    if (r < 0) {
        *thread_id = NULL;
        return r;
    }
    snprintf(out, STORE_RUN_ID_MAX + 1, "%s", by_id[0] ? by_id : in_object);
    return 0;
}

/* ---- messages ---- */

/* No such message. */
#define NONE SIZE_MAX

static const char *id_of(const json_t *m) { return json_string_value(json_object_get(m, "id")); }

static bool id_is(const json_t *m, const char *id) {
    const char *own = id_of(m);
    return own && id && strcmp(own, id) == 0;
}

/* Whether m is a visible message of type (replay.h). */
static bool visible(const json_t *m, const char *type) {
    const char *t = json_string_value(json_object_get(m, "type"));
    const char *name = json_string_value(json_object_get(m, "name"));
    const json_t *hide = json_object_get(json_object_get(m, "additional_kwargs"), "hide_from_ui");
    return t && strcmp(t, type) == 0 && !json_is_true(hide) && !(name && !strcmp(name, "summary"));
}

/* The index of the last visible message of type before index `before`. */
static size_t last_visible(const json_t *messages, const char *type, size_t before) {
    for (size_t i = before; i-- > 0;)
        if (visible(json_array_get(messages, i), type))
            return i;
    return NONE;
}

char *gw_replay_text(const json_t *message) {
    const json_t *c = json_object_get(message, "content");
    if (json_is_string(c))
        return strdup(json_string_value(c));
    fbuf b = {0};
    int r = 0;
    size_t i;
    json_t *part;
    json_array_foreach(c, i, part) {
        const char *type = json_string_value(json_object_get(part, "type"));
        const char *text = json_string_value(json_object_get(part, "text"));
        if (r == 0 && type && text && strcmp(type, "text") == 0)
            r = fbuf_append(&b, text, strlen(text));
    }
    if (r < 0) {
        fbuf_free(&b);
        return NULL;
    }
    return fbuf_steal(&b);
}

/* s without the ASCII white space at both ends: *len bytes from *start. */
static void trimmed(const char **start, size_t *len, const char *s) {
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        n--;
    *start = s;
    *len = n;
}

/* Whether m is an answer of complete text: visible ai, some text, no tool
 * calls. */
static bool terminal_text(const json_t *m) {
    const json_t *calls = json_object_get(m, "tool_calls");
    const json_t *kw_calls = json_object_get(json_object_get(m, "additional_kwargs"), "tool_calls");
    char *text = visible(m, "ai") ? gw_replay_text(m) : NULL;
    const char *start;
    size_t len = 0;
    if (text)
        trimmed(&start, &len, text);
    free(text);
    return len > 0 && json_array_size(calls) == 0 && json_array_size(kw_calls) == 0;
}

int gw_replay_pick_regenerate(size_t *ai, size_t *human, const json_t *messages,
                              const char *message_id) {
    *ai = *human = 0;
    size_t n = json_array_size(messages), target = NONE;
    for (size_t i = 0; i < n && target == NONE; i++)
        if (id_is(json_array_get(messages, i), message_id))
            target = i;
    if (target == NONE)
        return fawn_err(FAWN_ENOENT, "Message %s not found", message_id);
    if (!visible(json_array_get(messages, target), "ai"))
        return fawn_err(FAWN_EBUSY, "Only visible assistant messages can be regenerated");
    if (last_visible(messages, "ai", n) != target)
        return fawn_err(FAWN_EBUSY, "Only the latest assistant message can be regenerated");
    size_t h = last_visible(messages, "human", target);
    if (h == NONE)
        return fawn_err(FAWN_EBUSY, "Could not find the user message for this assistant response");
    if (!id_of(json_array_get(messages, h)))
        return fawn_err(FAWN_EBUSY, "The source user message is missing an id");
    *ai = target;
    *human = h;
    return 0;
}

int gw_replay_latest_human(size_t *human, const json_t *messages) {
    *human = last_visible(messages, "human", json_array_size(messages));
    if (*human != NONE && id_of(json_array_get(messages, *human)))
        return 0;
    *human = 0;
    return fawn_err(FAWN_ENOENT, "The thread has no user message to run again");
}

/* Whether text (trimmed) is the trimmed text of m already. */
static int text_unchanged(bool *out, const json_t *m, const char *text) {
    *out = false;
    char *own = gw_replay_text(m);
    if (!own)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    const char *start;
    size_t len;
    trimmed(&start, &len, own);
    *out = len == strlen(text) && memcmp(start, text, len) == 0;
    free(own);
    return 0;
}

int gw_replay_pick_edit(size_t *human, size_t *ai, const json_t *messages, const char *human_id,
                        const char *text) {
    *human = *ai = 0;
    size_t n = json_array_size(messages), h = last_visible(messages, "human", n), a = NONE;
    if (h == NONE || !id_is(json_array_get(messages, h), human_id))
        return fawn_err(FAWN_EBUSY, "Only the latest completed user turn can be edited");
    for (size_t i = h + 1; i < n; i++)
        if (visible(json_array_get(messages, i), "ai"))
            a = i;
    if (a == NONE || !terminal_text(json_array_get(messages, a)))
        return fawn_err(FAWN_EBUSY, "Only completed assistant text turns can be edited");
    if (!id_of(json_array_get(messages, a)))
        return fawn_err(FAWN_EBUSY, "The source assistant message is missing an id");
    bool same;
    int r = text_unchanged(&same, json_array_get(messages, h), text);
    if (r == 0 && same)
        r = fawn_err(FAWN_EBUSY, "Edited message is unchanged");
    if (r < 0)
        return r;
    *human = h;
    *ai = a;
    return 0;
}

json_t *gw_replay_human(const json_t *source, const char *id, const char *text) {
    const json_t *files = json_object_get(json_object_get(source, "additional_kwargs"), "files");
    const json_t *name = json_object_get(source, "name");
    json_t *own = json_object_get(source, "content");
    json_t *content = text  ? json_pack("[{s:s, s:s}]", "type", "text", "text", text)
                      : own ? json_incref(own)
                            : json_string("");
    if (!content)
        return NULL;
    return json_pack("{s:s, s:o, s:s*, s:{s:O*}, s:O*}", "type", "human", "content", content, "id",
                     id ? id : id_of(source), "additional_kwargs", "files",
                     json_is_array(files) ? files : NULL, "name",
                     json_is_string(name) ? name : NULL);
}

int gw_replay_edit_text(char **out, const char *replacement) {
    const char *start;
    size_t len;
    trimmed(&start, &len, replacement);
    *out = len ? strndup(start, len) : NULL;
    if (!len)
        return fawn_err(FAWN_EBUSY, "Edited message cannot be empty");
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}
