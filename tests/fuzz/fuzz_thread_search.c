/* libFuzzer target for the metadata filter of a thread search (POST
 * /api/threads/search): store_thread_search checks the match a client sent
 * and SQLite evaluates it against each thread's metadata. The store is made
 * once, in a temporary directory, with threads of two owners whose metadata
 * holds every JSON type and keys that mean something in a JSON path.
 * Input: the match, as text (what reaches the store) and, when it is a JSON
 * object, as the gateway sends it (compact). Besides memory errors, it
 * checks that
 * - a match is answered or refused (FAWN_EINVAL, FAWN_E2BIG), never with a
 *   database error, and a refusal hands out no rows;
 * - only the owner's threads come back, each holding every key of the match
 *   with the same JSON type, and the same value when that is a string, an
 *   integer, a boolean or null;
 * - every thread of the owner holding all of a match made of such values
 *   comes back. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/base.h"
#include "store/store.h"
#include "fuzz_support.h"

/* Longer inputs only exercise the match's size limit. */
#define FUZZ_INPUT_MAX (2 * STORE_MATCH_MAX)
#define OWNER 1
#define OTHER_OWNER 2

/* Each owner gets a thread with each of these. */
static const char *const metadata[] = {
    "{}",
    "{\"graph_id\":\"lead_agent\",\"assistant_id\":\"lead_agent\"}",
    "{\"graph_id\":\"other\",\"n\":1,\"f\":1.5,\"b\":true,\"no\":false,\"z\":null}",
    "{\"o\":{\"k\":[1,2]},\"a\":[1,\"x\"],\"s\":\"x y\",\"u\":\"\xc3\xa9\",\"\":\"empty\","
    "\"a.b\":\"dot\",\"[0]\":\"bracket\",\"$\":\"dollar\",\"'\":\"quote\",\"*\":\"star\","
    "\"k\x7f\":\"del\",\"/\":\"slash\",\"#\":1}",
    "{\"n\":-1,\"big\":9007199254740993,\"graph_id\":\"lead_agent\",\"s\":\"\"}",
};
#define THREADS ARRAY_LEN(metadata)

static store *st;
static char dir[FUZZ_DIR_MAX];
static json_t *stored[THREADS];

static void teardown(void) {
    store_close(st);
    fuzz_remove_tree(dir);
}

static void setup(void) {
    fuzz_scratch_dir(dir, "search");
    char path[128];
    snprintf(path, sizeof path, "%s/fawn.db", dir);
    check(store_open(&st, path) == 0);
    atexit(teardown);
    for (int64_t owner = OWNER; owner <= OTHER_OWNER; owner++) {
        store_user u;
        char name[16];
        snprintf(name, sizeof name, "user%lld", (long long)owner);
        check(store_user_create(st, &u, name, "hash", "user") == 0 && u.id == owner);
    }
    for (size_t i = 0; i < THREADS; i++) {
        stored[i] = json_loads(metadata[i], 0, NULL);
        check(stored[i] != NULL);
        for (int64_t owner = OWNER; owner <= OTHER_OWNER; owner++) {
            char id[16];
            snprintf(id, sizeof id, "t%zu", i);
            store_thread t;
            bool existed;
            check(store_thread_create(st, &t, &existed, owner, id, metadata[i]) == 0);
            store_thread_clear(&t);
        }
    }
}

/* Whether SQLite's equality of this value is json_equal (reals and
 * containers are compared as SQLite sees them, which this target does
 * not model). */
static bool decidable(const json_t *v) {
    return !json_is_real(v) && !json_is_object(v) && !json_is_array(v);
}

/* 1: thread metadata m holds every key of match alike; 0: it does not;
 * -1: it cannot tell (a key alike in type whose value is not decidable). */
static int holds(const json_t *m, const json_t *match) {
    const char *key;
    json_t *want;
    int verdict = 1;
    json_object_foreach((json_t *)match, key, want) {
        const json_t *have = json_object_get(m, key);
        if (!have || json_typeof(have) != json_typeof(want))
            return 0;
        if (!decidable(want))
            verdict = -1;
        else if (!json_equal(have, want))
            return 0;
    }
    return verdict;
}

static void check_search(const char *match) {
    store_thread *rows = NULL;
    size_t n = 0;
    int r = store_thread_search(st, &rows, &n, OWNER, match, NULL, NULL, 1000, 0);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_E2BIG);
    if (r < 0) {
        check(rows == NULL && n == 0);
        return;
    }
    json_t *m = json_loads(match, JSON_REJECT_DUPLICATES, NULL);
    check(json_is_object(m));
    bool returned[THREADS] = {false};
    for (size_t i = 0; i < n; i++) {
        check(rows[i].owner_id == OWNER);
        size_t k = strtoul(rows[i].id + 1, NULL, 10);
        check(k < THREADS && !returned[k]);
        returned[k] = true;
        check(holds(stored[k], m) != 0);
        store_thread_clear(&rows[i]);
    }
    for (size_t k = 0; k < THREADS; k++)
        check(returned[k] || holds(stored[k], m) != 1);
    free(rows);
    json_decref(m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    if (!st)
        setup();
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    check_search(text);
    json_t *o = json_loadb(text, size, JSON_REJECT_DUPLICATES, NULL);
    char *compact = json_is_object(o) ? json_dumps(o, JSON_COMPACT) : NULL;
    if (compact)
        check_search(compact);
    free(compact);
    json_decref(o);
    free(text);
    return 0;
}
