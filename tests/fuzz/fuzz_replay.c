/* libFuzzer target for replays (gateway/replay.h): the checkpoint a run
 * body names, and which messages of a state a regenerate or an edit takes.
 * Input: a JSON object, taken as a run body and, when it has them, as
 * {"messages": a state's list, "id": a message id, "text": an edit's
 * replacement}. Besides memory errors and undefined behaviour, it checks
 * that
 * - the checkpoint is accepted as "" or a valid id (with thread_id NULL or
 *   checkpoint.thread_id), or refused with FAWN_EINVAL leaving "" and NULL;
 * - a regenerate takes a visible ai message of that id with no visible ai
 *   message after it, and a visible human message before it, or is
 *   refused (FAWN_ENOENT, FAWN_EBUSY) leaving 0s;
 * - an edit takes the latest visible human message, of that id, and a
 *   later visible ai message, or is refused (FAWN_EBUSY) leaving 0s;
 * - a replayed question is a human message with only type, content, id,
 *   name and additional_kwargs {files?}; every text reads back;
 * - an edit's text is trimmed and non-empty, or refused with nothing. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gateway/replay.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 16384

/* The oracle: replay.h's visibility, written out again. */
static bool shown(const json_t *m, const char *type) {
    const char *t = json_string_value(json_object_get(m, "type"));
    const char *name = json_string_value(json_object_get(m, "name"));
    return t && !strcmp(t, type) &&
           !json_is_true(
               json_object_get(json_object_get(m, "additional_kwargs"), "hide_from_ui")) &&
           !(name && !strcmp(name, "summary"));
}

static bool has_id(const json_t *m, const char *id) {
    const char *own = json_string_value(json_object_get(m, "id"));
    return own && id && !strcmp(own, id);
}

static void check_checkpoint(const json_t *body) {
    char id[STORE_RUN_ID_MAX + 1];
    const char *thread = NULL;
    int r = gw_run_checkpoint_parse(id, &thread, body);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0) {
        check(id[0] == '\0' && thread == NULL);
        return;
    }
    check(id[0] == '\0' || fawn_id_valid(id));
    const json_t *named = json_object_get(json_object_get(body, "checkpoint"), "thread_id");
    check(thread == json_string_value(named));
}

static void check_regenerate(const json_t *m, const char *id) {
    size_t ai = 1, human = 1, n = json_array_size(m);
    int r = gw_replay_pick_regenerate(&ai, &human, m, id);
    check(r == 0 || r == FAWN_ENOENT || r == FAWN_EBUSY);
    if (r < 0) {
        check(ai == 0 && human == 0);
        return;
    }
    check(human < ai && ai < n);
    check(has_id(json_array_get(m, ai), id) && shown(json_array_get(m, ai), "ai"));
    check(shown(json_array_get(m, human), "human"));
    check(json_string_value(json_object_get(json_array_get(m, human), "id")));
    for (size_t i = ai + 1; i < n; i++)
        check(!shown(json_array_get(m, i), "ai"));
}

static void check_edit(const json_t *m, const char *id, const char *text) {
    size_t human = 1, ai = 1, n = json_array_size(m);
    int r = gw_replay_pick_edit(&human, &ai, m, id, text);
    check(r == 0 || r == FAWN_EBUSY || r == FAWN_ENOMEM);
    if (r < 0) {
        check(human == 0 && ai == 0);
        return;
    }
    check(human < ai && ai < n);
    check(has_id(json_array_get(m, human), id) && shown(json_array_get(m, ai), "ai"));
    for (size_t i = human + 1; i < n; i++)
        check(!shown(json_array_get(m, i), "human"));
}

static void check_replayed(const json_t *source) {
    json_t *again = gw_replay_human(source, NULL, NULL);
    check(again != NULL);
    const char *key;
    json_t *v;
    json_object_foreach(again, key, v) {
        check(!strcmp(key, "type") || !strcmp(key, "content") || !strcmp(key, "id") ||
              !strcmp(key, "name") || !strcmp(key, "additional_kwargs"));
    }
    check(!strcmp(json_string_value(json_object_get(again, "type")), "human"));
    json_t *kw = json_object_get(again, "additional_kwargs");
    check(json_object_size(kw) == 0 || json_is_array(json_object_get(kw, "files")));
    check(json_object_size(kw) <= 1);
    json_decref(again);
    char *text = gw_replay_text(source);
    check(text != NULL);
    free(text);
}

static void check_edit_text(const char *replacement) {
    char *text = NULL;
    int r = gw_replay_edit_text(&text, replacement);
    check(r == 0 || r == FAWN_EBUSY);
    if (r < 0) {
        check(text == NULL);
        return;
    }
    size_t n = strlen(text);
    check(n > 0 && !isspace((unsigned char)text[0]) && !isspace((unsigned char)text[n - 1]));
    check(strstr(replacement, text) != NULL);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    json_t *body = json_loadb((const char *)data, size, 0, NULL);
    if (!json_is_object(body)) {
        json_decref(body);
        return 0;
    }
    check_checkpoint(body);
    const json_t *m = json_object_get(body, "messages");
    const char *id = json_string_value(json_object_get(body, "id"));
    const char *text = json_string_value(json_object_get(body, "text"));
    if (json_is_array(m) && id) {
        check_regenerate(m, id);
        check_edit(m, id, text && text[0] ? text : "x");
        size_t i;
        json_t *one;
        json_array_foreach(m, i, one) check_replayed(one);
    }
    if (text)
        check_edit_text(text);
    json_decref(body);
    return 0;
}
