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
 *   or closes a tag or a fence. */
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
