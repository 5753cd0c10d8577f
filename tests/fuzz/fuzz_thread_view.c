/* libFuzzer target for what a thread search body shapes (POST
 * /api/threads/search): select, extract and its paths, and ids. Input: a
 * search body (parsed as JSON when it is an object) and, as text, one
 * extract path. Besides memory errors and undefined behaviour (an index
 * past the list, a negative one), it checks that
 * - select and extract are accepted or refused with FAWN_EINVAL, and a
 *   refusal leaves the view empty;
 * - an accepted view applied to a thread object keeps only the fields it
 *   selects (all when it selects none), plus "extracted" holding exactly
 *   its aliases, each the value its path names in the thread (or null);
 * - an accepted path is at most GW_EXTRACT_PATH_MAX bytes and starts at a
 *   field of the thread object; values are reached only through
 *   values.title;
 * - ids are accepted (as a list of valid thread ids, or nothing) or
 *   refused with FAWN_EINVAL, leaving no text. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gateway/internal.h"
#include "fuzz_support.h"

/* Longer inputs only exercise the bounds on paths, aliases and lists. */
#define FUZZ_INPUT_MAX 8192

/* A thread object as a search answers it, with lists and nesting to walk. */
static const char thread_text[] =
    "{\"thread_id\":\"t1\",\"created_at\":\"2026-01-01T00:00:00.000000+00:00\","
    "\"updated_at\":\"2026-01-01T00:00:00.000000+00:00\",\"state_updated_at\":"
    "\"2026-01-01T00:00:00.000000+00:00\",\"metadata\":{\"tags\":[\"a\",[\"b\",{\"c\":1}]],"
    "\"o\":{\"k\":{\"\":0,\"x y\":true}},\"n\":null},\"status\":\"idle\",\"config\":{},"
    "\"values\":{\"title\":\"T\",\"secret\":\"never extracted\"},\"interrupts\":{}}";

static void check_view(const json_t *body) {
    gw_thread_view v;
    int r = gw_thread_view_parse(&v, body);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0) {
        check(v.fields == 0 && v.extract == NULL);
        return;
    }
    json_t *original = json_loads(thread_text, 0, NULL);
    check(original != NULL);
    json_t *shaped = gw_thread_view_apply(json_deep_copy(original), &v);
    check(shaped != NULL);
    const char *key;
    json_t *value;
    json_object_foreach(shaped, key, value) {
        if (strcmp(key, "extracted") == 0) {
            check(v.extract != NULL);
            continue;
        }
        check(json_equal(value, json_object_get(original, key)));
    }
    if (v.fields == 0)
        check(json_object_size(shaped) == json_object_size(original) + (v.extract != NULL));
    json_t *extracted = json_object_get(shaped, "extracted");
    check(json_object_size(extracted) == json_object_size(v.extract));
    json_object_foreach(v.extract, key, value) {
        const char *path = json_string_value(value);
        check(path && strlen(path) <= GW_EXTRACT_PATH_MAX);
        check(strncmp(path, "values", 6) != 0 || strncmp(path, "values.title", 12) == 0);
        const json_t *want = gw_extract_value(original, path);
        const json_t *got = json_object_get(extracted, key);
        check(got && (want ? json_equal(got, want) : json_is_null(got)));
        check(!json_is_string(got) || strcmp(json_string_value(got), "never extracted") != 0);
    }
    json_decref(shaped);
    json_decref(original);
    gw_thread_view_clear(&v);
}

static void check_ids(const json_t *ids) {
    char *text = NULL;
    int r = gw_thread_ids_parse(&text, ids);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0 || !text) {
        check(text == NULL);
        return;
    }
    json_t *list = json_loads(text, 0, NULL);
    check(json_is_array(list) && json_array_size(list) <= STORE_SEARCH_IDS_MAX);
    size_t i;
    json_t *id;
    json_array_foreach(list, i, id) { check(fawn_id_valid(json_string_value(id))); }
    json_decref(list);
    free(text);
}

static void check_path(const char *path) {
    int r = gw_extract_path_check(path);
    check(r == 0 || r == FAWN_EINVAL);
    json_t *thread = json_loads(thread_text, 0, NULL);
    const json_t *v = gw_extract_value(thread, path);
    check(r == 0 || v == NULL);
    check(r < 0 || strlen(path) <= GW_EXTRACT_PATH_MAX);
    json_decref(thread);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    check_path(text);
    json_t *body = json_loadb(text, size, 0, NULL);
    if (json_is_object(body)) {
        check_view(body);
        check_ids(json_object_get(body, "ids"));
    }
    json_decref(body);
    free(text);
    return 0;
}
