/* libFuzzer target for what a client sends as a run's input, and what the
 * replay model hashes. The input is taken as JSON (any text); when it parses,
 * it goes through agent_input_messages (a list of human messages, or a
 * refusal) and model_conversation_hash (the normalizer of stored
 * conversations: UUIDs, dates, timestamps). Besides memory errors, it checks
 * that
 * - agent_input_messages returns 0 with a list of human messages as long as
 *   the input list, or FAWN_EINVAL with no list;
 * - the hash is 64 lowercase hex digits, and the same for the input and for
 *   the messages made from it when every message was kept (ids and keys
 *   other than type and content are not hashed);
 * - a kept message's additional_kwargs holds files alone, at most
 *   AGENT_MESSAGE_FILES_MAX entries, each with a valid file name and only
 *   the keys filename, size, path and status;
 * - the note that tells the model about those files (all of them listed in
 *   the uploads directory) has '<' only in its own two tags: no name opens
 *   or closes a tag or a fence;
 * - the message's content as fenced for the model keeps its shape (text or
 *   a list whose other parts stay, in order), and its text parts read in
 *   order start with the begin marker, end with the end marker, hold no
 *   other "<<<" or ">>>" and no control character but tab and newline. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"
#include "agent/agent_internal.h"
#include "paths/paths.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536

static void check(int ok) {
    if (!ok)
        abort();
}

static void check_hash(const char hash[65]) {
    check(strlen(hash) == 64);
    check(strspn(hash, "0123456789abcdef") == 64);
}

/* The note for files, every one of them listed as a file. */
static void check_note(const json_t *files) {
    json_t *entries = json_array();
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        json_array_append_new(entries,
                              json_pack("{s:O, s:s, s:i}", "name", json_object_get(f, "filename"),
                                        "type", "file", "size", 1));
    }
    char *note = NULL;
    check(agent_uploads_note(&note, files, entries) == 0);
    check((note != NULL) == (json_array_size(files) > 0));
    size_t opens = 0;
    for (const char *p = note; p && *p; p++)
        opens += *p == '<';
    check(!note || (opens == 2 && strncmp(note, "<uploaded_files>\n", 17) == 0 &&
                    strstr(note, "\n</uploaded_files>") == note + strlen(note) - 18));
    free(note);
    json_decref(entries);
}

#define FENCE_BEGIN "<<<BEGIN USER INPUT>>>\n"
#define FENCE_END "\n<<<END USER INPUT>>>"

static size_t count_of(const char *text, size_t len, const char *what) {
    size_t n = 0;
    for (size_t i = 0; i + 3 <= len; i++)
        n += memcmp(text + i, what, 3) == 0;
    return n;
}

/* A text part's text, or NULL (as the fence tells them apart). */
static const json_t *text_of(const json_t *part) {
    const char *type = json_string_value(json_object_get(part, "type"));
    const json_t *text = json_object_get(part, "text");
    return type && strcmp(type, "text") == 0 && json_is_string(text) ? text : NULL;
}

/* The k-th part of content that is not text, or NULL. */
static const json_t *other_part(const json_t *content, size_t k) {
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        if (!text_of(part) && k-- == 0)
            return part;
    }
    return NULL;
}

/* The fence of content: its text parts (all of it, for a string) read in
 * order, the other parts where they were. */
static void check_fence(const json_t *content) {
    json_t *fenced = NULL;
    check(agent_input_fence(&fenced, content) == 0);
    check(json_is_string(content) ? json_is_string(fenced) : json_is_array(fenced));
    fbuf all = {0};
    size_t others = 0, i;
    json_t *part;
    if (json_is_string(fenced))
        check(fbuf_append(&all, json_string_value(fenced), json_string_length(fenced)) == 0);
    json_array_foreach(fenced, i, part) {
        const json_t *text = text_of(part);
        if (text)
            check(fbuf_append(&all, json_string_value(text), json_string_length(text)) == 0);
        else
            check(part == other_part(content, others++)); /* as it was */
    }
    check(!json_is_array(content) || other_part(content, others) == NULL);
    size_t n = all.len, begin = strlen(FENCE_BEGIN), end = strlen(FENCE_END);
    check(n >= begin + end && memcmp(all.data, FENCE_BEGIN, begin) == 0 &&
          memcmp(all.data + n - end, FENCE_END, end) == 0);
    check(count_of(all.data, n, "<<<") == 2 && count_of(all.data, n, ">>>") == 2);
    for (size_t k = 0; k < n; k++) {
        unsigned char c = (unsigned char)all.data[k];
        check(c >= 0x20 || c == '\n' || c == '\t');
        check(c != 0x7f && !(c == 0xc2 && k + 1 < n && (unsigned char)all.data[k + 1] >= 0x80 &&
                             (unsigned char)all.data[k + 1] <= 0x9f));
    }
    fbuf_free(&all);
    json_decref(fenced);
}

static void check_kwargs(const json_t *m) {
    const json_t *kw = json_object_get(m, "additional_kwargs");
    const json_t *files = json_object_get(kw, "files");
    check(json_is_object(kw) && json_object_size(kw) == (files ? 1u : 0u));
    check(!files ||
          (json_array_size(files) > 0 && json_array_size(files) <= AGENT_MESSAGE_FILES_MAX));
    size_t i;
    json_t *f;
    json_array_foreach(files, i, f) {
        check(vpath_name_valid(json_string_value(json_object_get(f, "filename"))));
        const char *key;
        json_t *v;
        json_object_foreach(f, key, v) {
            check(strcmp(key, "filename") == 0 || strcmp(key, "size") == 0 ||
                  strcmp(key, "path") == 0 || strcmp(key, "status") == 0);
        }
    }
    if (files)
        check_note(files);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    json_t *in = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!in)
        return 0;
    json_t *out = NULL;
    int r = agent_input_messages(&out, in);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_ENOMEM);
    char a[65], b[65];
    if (r == 0) {
        check(json_is_array(out));
        check(json_array_size(out) == json_array_size(in));
        size_t i;
        json_t *m;
        json_array_foreach(out, i, m) {
            check(strcmp(json_string_value(json_object_get(m, "type")), "human") == 0);
            check_kwargs(m);
            check_fence(json_object_get(m, "content"));
        }
        check(model_conversation_hash(a, out) == 0);
        check_hash(a);
    } else {
        check(out == NULL);
    }
    if (json_is_array(in) && model_conversation_hash(b, in) == 0)
        check_hash(b);
    json_decref(out);
    json_decref(in);
    return 0;
}
