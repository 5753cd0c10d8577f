/* The store: migrations, users, owner-scoped threads, search and its
 * bounds, a held reader that stalls no one else, concurrent writers, and
 * reopening after the writer was killed.
 *
 * The same cases run on SQLite and, when FAWN_TEST_PG holds a libpq
 * conninfo of a server (scripts/pg-test-server.sh run ...), on PostgreSQL:
 * each run of the program then has a database of its own, created by the
 * group's setup (so runs may share a server). A few
 * cases are about SQLite's file (its permissions, a schema-5 file, a
 * progress handler) and run on SQLite only. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <sqlite3.h>

#include "store/db.h"
#include "store/store_internal.h"
#include "store/store.h"
#include "unit/test_store_open.h"

typedef struct fx {
    char dir[64];
    char path[128];
    char pg[512]; /* this case's database's conninfo (PostgreSQL) */
    char pg_name[64];
    store *s;
    int64_t alice, bob;
} fx;

/* Opens another handle on the case's database (a second gateway). */
static int fx_open(fx *x, store **s) {
    return test_pg_server() ? store_open_postgres(s, x->pg) : store_open(s, x->path);
}

static int setup(void **state) {
    static int cases;
    fx *x = calloc(1, sizeof *x);
    snprintf(x->dir, sizeof x->dir, "/tmp/fawn-store-XXXXXX");
    if (!mkdtemp(x->dir))
        return -1;
    snprintf(x->path, sizeof x->path, "%s/db/fawn.db", x->dir);
    if (test_pg_server()) {
        char sql[128];
        snprintf(x->pg_name, sizeof x->pg_name, "fawn_store_%d_%d", (int)getpid(), ++cases);
        snprintf(x->pg, sizeof x->pg, "%s dbname=%s", test_pg_server(), x->pg_name);
        snprintf(sql, sizeof sql, "CREATE DATABASE %s", x->pg_name);
        if (test_pg_admin(sql) < 0)
            return -1;
    }
    if (fx_open(x, &x->s) < 0) {
        fprintf(stderr, "setup: %s\n", fawn_errmsg());
        return -1;
    }
    store_user u;
    if (store_user_create(x->s, &u, "alice", "hash-a", "admin") < 0)
        return -1;
    x->alice = u.id;
    if (store_user_create(x->s, &u, "bob", "hash-b", "user") < 0)
        return -1;
    x->bob = u.id;
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fx *x = *state;
    store_close(x->s);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->dir);
    int r = system(cmd);
    if (test_pg_server()) {
        snprintf(cmd, sizeof cmd, "DROP DATABASE %s WITH (FORCE)", x->pg_name);
        r |= test_pg_admin(cmd);
    }
    free(x);
    return r;
}

static void migrations_bring_schema_current(void **state) {
    fx *x = *state;
    int v = 0;
    assert_int_equal(store_schema_version(x->s, &v), 0);
    assert_int_equal(v, 18); /* 16: run ownership; 17: sandbox ownership; 18: sign-in attempts */
    /* Reopening applies nothing twice. */
    store *again;
    assert_int_equal(fx_open(x, &again), 0);
    assert_int_equal(store_schema_version(again, &v), 0);
    assert_int_equal(v, 18);
    store_close(again);
}

static void users(void **state) {
    fx *x = *state;
    store_user u;
    assert_int_equal(store_user_create(x->s, &u, "alice", "h", "user"), FAWN_EEXIST);
    assert_int_equal(store_user_create(x->s, &u, "", "h", "user"), FAWN_EINVAL);
    assert_int_equal(store_user_get_by_name(x->s, &u, "alice"), 0);
    assert_int_equal(u.id, x->alice);
    assert_string_equal(u.role, "admin");
    int64_t version = u.token_version, n = 0;
    assert_int_equal(store_user_set_password(x->s, x->alice, "hash-a2"), 0);
    assert_int_equal(store_user_get(x->s, &u, x->alice), 0);
    assert_string_equal(u.password_hash, "hash-a2");
    assert_int_equal(u.token_version, version + 1);
    assert_int_equal(store_user_revoke_sessions(x->s, x->alice), 0);
    assert_int_equal(store_user_get(x->s, &u, x->alice), 0);
    assert_int_equal(u.token_version, version + 2);
    assert_int_equal(store_user_get(x->s, &u, 99999), FAWN_ENOENT);
    assert_int_equal(store_user_set_password(x->s, 99999, "x"), FAWN_ENOENT);
    assert_int_equal(store_user_count(x->s, &n, "admin"), 0);
    assert_int_equal(n, 1);
    assert_int_equal(store_user_count(x->s, &n, NULL), 0);
    assert_true(n >= 2);
}

static void usernames_ignore_case(void **state) {
    fx *x = *state;
    store_user u;
    assert_int_equal(store_user_create(x->s, &u, "ALICE", "h", "user"), FAWN_EEXIST);
    assert_int_equal(store_user_get_by_name(x->s, &u, "Alice"), 0);
    assert_int_equal(u.id, x->alice);
    assert_string_equal(u.username, "alice"); /* stored as first written */
}

/* The auth generation moves with every change that can end or alter an
 * authentication, and with nothing else; this handle counts its own. */
static void auth_generation_follows_revocations(void **state) {
    fx *x = *state;
    int64_t g0, g;
    assert_int_equal(store_auth_generation(x->s, &g0), 0);
    uint64_t mine = store_auth_changes(x->s);
    char hash[65];
    store_token t;
    store_user u;
    int64_t id;
    fawn_sha256_hex(hash, "generation", 10);
    assert_int_equal(store_token_create(x->s, &t, x->alice, "gen", hash), 0);
    assert_int_equal(store_token_authenticate(x->s, &u, &id, hash), 0); /* records its use */
    assert_int_equal(store_user_create(x->s, &u, "gen-user", "h", "user"), 0);
    assert_int_equal(store_auth_generation(x->s, &g), 0);
    assert_int_equal(g, g0);
    assert_int_equal(store_auth_changes(x->s), mine);
    /* The same role again changes nothing. */
    assert_int_equal(store_user_set_role(x->s, x->alice, "admin"), 0);
    assert_int_equal(store_auth_generation(x->s, &g), 0);
    assert_int_equal(g, g0);
    assert_int_equal(store_user_set_role(x->s, x->alice, "viewer"), 0);
    assert_int_equal(store_auth_generation(x->s, &g), 0);
    assert_int_equal(g, g0 + 1);
    assert_int_equal(store_user_revoke_sessions(x->s, x->alice), 0);
    assert_int_equal(store_auth_generation(x->s, &g), 0);
    assert_int_equal(g, g0 + 2);
    assert_int_equal(store_user_set_password(x->s, x->alice, "other"), 0);
    assert_int_equal(store_auth_generation(x->s, &g), 0);
    assert_int_equal(g, g0 + 3);
    assert_int_equal(store_token_delete(x->s, x->alice, t.id), 0);
    assert_int_equal(store_auth_generation(x->s, &g), 0);
    assert_int_equal(g, g0 + 4);
    uint64_t moved = store_auth_changes(x->s);
    assert_true(moved > mine);
    /* A failed change (no such user) moves neither. */
    assert_int_equal(store_user_set_role(x->s, 999999, "admin"), FAWN_ENOENT);
    assert_int_equal(store_auth_changes(x->s), moved);
}

static void api_tokens(void **state) {
    fx *x = *state;
    char hash[65];
    store_token t;
    fawn_sha256_hex(hash, "secret-1", 8);
    assert_int_equal(store_token_create(x->s, &t, x->alice, "ci", hash), 0);
    int64_t first = t.id;
    assert_string_equal(t.name, "ci");
    assert_int_equal(t.last_used_at_ms, 0);
    /* The same secret cannot be recorded twice. */
    assert_int_equal(store_token_create(x->s, &t, x->bob, "dup", hash), FAWN_EEXIST);
    assert_int_equal(store_token_create(x->s, &t, x->alice, "", hash), FAWN_EINVAL);

    store_user u;
    int64_t id = 0;
    assert_int_equal(store_token_authenticate(x->s, &u, &id, hash), 0);
    assert_int_equal(u.id, x->alice);
    assert_int_equal(id, first);
    char other[65];
    fawn_sha256_hex(other, "secret-2", 8);
    assert_int_equal(store_token_authenticate(x->s, &u, &id, other), FAWN_ENOENT);

    /* Owner-scoped revocation. */
    assert_int_equal(store_token_delete(x->s, x->bob, first), FAWN_ENOENT);
    store_token *list = NULL;
    size_t n = 0;
    assert_int_equal(store_token_list(x->s, &list, &n, x->alice), 0);
    assert_int_equal(n, 1);
    assert_true(list[0].last_used_at_ms > 0);
    free(list);
    assert_int_equal(store_token_delete(x->s, x->alice, first), 0);
    assert_int_equal(store_token_authenticate(x->s, &u, &id, hash), FAWN_ENOENT);

    /* A cap per user. */
    for (int i = 0; i < STORE_TOKENS_PER_USER_MAX; i++) {
        char secret[32];
        snprintf(secret, sizeof secret, "bulk-%d", i);
        fawn_sha256_hex(hash, secret, strlen(secret));
        assert_int_equal(store_token_create(x->s, &t, x->bob, "bulk", hash), 0);
    }
    fawn_sha256_hex(hash, "one-too-many", 12);
    assert_int_equal(store_token_create(x->s, &t, x->bob, "bulk", hash), FAWN_E2BIG);
    assert_int_equal(store_token_list(x->s, &list, &n, x->bob), 0);
    assert_int_equal(n, STORE_TOKENS_PER_USER_MAX);
    free(list);
}

static void sandbox_records_and_fences(void **state) {
    fx *x = *state;
    const char *gen1 = "0123456789abcdef0123456789abcdef",
               *gen2 = "fedcba9876543210fedcba9876543210";
    store_sandbox sb;
    assert_int_equal(store_sandbox_get(x->s, &sb, "00aa00aa00aa00aa"), FAWN_ENOENT);
    store_sandbox rec = {.sandbox_id = "00aa00aa00aa00aa",
                         .user = "1",
                         .thread = "t-1",
                         .endpoint = "unix:/run/x.sock"};
    strcpy(rec.generation, gen1);
    assert_int_equal(store_sandbox_put(x->s, &rec), 0);
    strcpy(rec.generation, gen2);
    strcpy(rec.token, "secret");
    assert_int_equal(store_sandbox_put(x->s, &rec), 0);
    assert_int_equal(store_sandbox_get(x->s, &sb, "00aa00aa00aa00aa"), 0);
    assert_string_equal(sb.generation, gen2);
    assert_string_equal(sb.thread, "t-1");
    assert_string_equal(sb.endpoint, "unix:/run/x.sock");
    assert_string_equal(sb.token, "secret");
    strcpy(rec.user, "../u");
    assert_int_equal(store_sandbox_put(x->s, &rec), FAWN_EINVAL);
    /* Forgetting an older generation leaves the newer record. */
    assert_int_equal(store_sandbox_forget(x->s, "00aa00aa00aa00aa", gen1), 0);
    assert_int_equal(store_sandbox_get(x->s, &sb, "00aa00aa00aa00aa"), 0);
    assert_int_equal(store_sandbox_forget(x->s, "00aa00aa00aa00aa", ""), 0);
    assert_int_equal(store_sandbox_get(x->s, &sb, "00aa00aa00aa00aa"), FAWN_ENOENT);

    bool fenced = true;
    assert_int_equal(store_fence_exists(x->s, &fenced, "", "00aa00aa00aa00aa", gen1), 0);
    assert_false(fenced);
    assert_int_equal(store_fence_add(x->s, "", "00aa00aa00aa00aa", gen1, "box stopped answering"),
                     0);
    assert_int_equal(store_fence_add(x->s, "", "00aa00aa00aa00aa", gen1, "again"), 0);
    assert_int_equal(store_fence_add(x->s, "r1:lead", "00aa00aa00aa00aa", gen2, "session"), 0);
    assert_int_equal(store_fence_add(x->s, "", "11bb11bb11bb11bb", gen2, "other"), 0);
    assert_int_equal(store_fence_exists(x->s, &fenced, "", "00aa00aa00aa00aa", gen1), 0);
    assert_true(fenced);
    assert_int_equal(store_fence_exists(x->s, &fenced, "", "00aa00aa00aa00aa", gen2), 0);
    assert_false(fenced); /* a scope's fence is not the generation's */
    store_fence *list = NULL;
    size_t n = 0;
    assert_int_equal(store_fence_list(x->s, &list, &n, "00aa00aa00aa00aa"), 0);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].reason, "box stopped answering"); /* the first reason is kept */
    free(list);
    assert_int_equal(store_fence_list(x->s, &list, &n, NULL), 0);
    assert_int_equal(n, 3);
    free(list);
    assert_int_equal(store_fence_remove(x->s, "", "00aa00aa00aa00aa", gen1), 0);
    assert_int_equal(store_fence_remove(x->s, "", "00aa00aa00aa00aa", gen1), FAWN_ENOENT);
    assert_int_equal(store_fence_add(x->s, "", "not-hex-but-way-too-long", gen1, "x"), FAWN_EINVAL);
}

/* Sandbox ownership: a claim takes a free sandbox, keeps one's own,
 * refuses another gateway's live lease and takes an expired one; renewal
 * extends only the renewer's leases; a release request reaches the owner
 * and no one else; a release frees only the releaser's. */
static void sandbox_ownership_leases(void **state) {
    fx *x = *state;
    const char *sid = "00cc00cc00cc00cc";
    store_owner_claim_req a = {.sandbox_id = sid,
                               .user = "1",
                               .thread = "t-1",
                               .gateway = "gw-a",
                               .now_ms = 1000,
                               .lease_ms = 500};
    store_owner_claim_req b = a;
    b.gateway = "gw-b";
    enum store_owner_claim how;
    store_sandbox_owner was;
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &a), 0);
    assert_int_equal(how, STORE_OWNER_FREE);
    assert_string_equal(was.gateway, "");
    b.now_ms = 1400;
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &b), 0);
    assert_int_equal(how, STORE_OWNER_HELD);
    assert_string_equal(was.gateway, "gw-a");
    assert_int_equal(was.lease_until_ms, 1500);
    /* gw-b asks; gw-a sees the request, gw-b does not (it owns nothing). */
    assert_int_equal(store_sandbox_owner_ask(x->s, sid, "gw-b", 1400), 0);
    assert_int_equal(store_sandbox_owner_ask(x->s, sid, "gw-a", 1400), FAWN_ENOENT);
    store_sandbox_owner *asked = NULL;
    size_t n = 0;
    assert_int_equal(store_sandbox_owner_asked(x->s, &asked, &n, "gw-a", 1400), 0);
    assert_int_equal(n, 1);
    assert_string_equal(asked[0].release_asked_by, "gw-b");
    assert_string_equal(asked[0].thread, "t-1");
    free(asked);
    assert_int_equal(store_sandbox_owner_asked(x->s, &asked, &n, "gw-a", 1401), 0);
    assert_int_equal(n, 0); /* a request older than the asker's wait is not one */
    free(asked);
    assert_int_equal(store_sandbox_owner_asked(x->s, &asked, &n, "gw-b", 0), 0);
    assert_int_equal(n, 0);
    free(asked);
    /* gw-a renews (one statement for all its leases); gw-b's renewal
     * touches nothing of gw-a's. */
    assert_int_equal(store_sandbox_owner_renew(x->s, "gw-a", 1450, 500), 0);
    assert_int_equal(store_sandbox_owner_renew(x->s, "gw-b", 1450, 100000), 0);
    b.now_ms = 1900;
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &b), 0);
    assert_int_equal(how, STORE_OWNER_HELD);
    assert_int_equal(was.lease_until_ms, 1950);
    /* Keeping its own leaves the request in place; a release by another
     * gateway frees nothing. */
    a.now_ms = 1900;
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &a), 0);
    assert_int_equal(how, STORE_OWNER_KEPT);
    assert_string_equal(was.release_asked_by, "gw-b");
    assert_int_equal(store_sandbox_owner_release(x->s, sid, "gw-b"), 0);
    assert_int_equal(store_sandbox_owner_get(x->s, &was, sid), 0);
    assert_string_equal(was.gateway, "gw-a");
    /* Expired: gw-b takes it over, with no request left on it. */
    b.now_ms = 2400;
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &b), 0);
    assert_int_equal(how, STORE_OWNER_EXPIRED);
    assert_string_equal(was.gateway, "gw-a");
    assert_int_equal(store_sandbox_owner_get(x->s, &was, sid), 0);
    assert_string_equal(was.gateway, "gw-b");
    assert_string_equal(was.release_asked_by, "");
    assert_int_equal(was.lease_until_ms, 2900);
    a.now_ms = 2401;
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &a), 0);
    assert_int_equal(how, STORE_OWNER_HELD);
    /* Released: free for the next claimer. */
    assert_int_equal(store_sandbox_owner_release_all(x->s, "gw-b"), 0);
    assert_int_equal(store_sandbox_owner_get(x->s, &was, sid), FAWN_ENOENT);
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &a), 0);
    assert_int_equal(how, STORE_OWNER_FREE);
    a.user = "../u";
    assert_int_equal(store_sandbox_owner_claim(x->s, &how, &was, &a), FAWN_EINVAL);
    assert_int_equal(how, STORE_OWNER_HELD);
}

static void threads_are_owner_scoped_and_idempotent(void **state) {
    fx *x = *state;
    store_thread t;
    bool existed = true;
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->alice, "t-1", "{\"a\":1}"), 0);
    assert_false(existed);
    assert_string_equal(t.metadata, "{\"a\":1}");
    assert_string_equal(t.status, "idle");
    store_thread_clear(&t);
    /* Same id, same owner: the stored thread, untouched. */
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->alice, "t-1", "{\"b\":2}"), 0);
    assert_true(existed);
    assert_string_equal(t.metadata, "{\"a\":1}");
    store_thread_clear(&t);
    /* Another owner's thread is invisible, and the same id is theirs to use. */
    assert_int_equal(store_thread_get(x->s, &t, x->bob, "t-1"), FAWN_ENOENT);
    assert_int_equal(store_thread_set_metadata(x->s, x->bob, "t-1", "{}"), FAWN_ENOENT);
    assert_int_equal(store_thread_delete(x->s, x->bob, "t-1"), FAWN_ENOENT);
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->bob, "t-1", "{\"bob\":1}"), 0);
    assert_false(existed);
    store_thread_clear(&t);
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "t-1"), 0);
    assert_string_equal(t.metadata, "{\"a\":1}");
    store_thread_clear(&t);
    assert_int_equal(store_thread_delete(x->s, x->bob, "t-1"), 0);
    /* Bad input. */
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->alice, "../x", NULL), FAWN_EINVAL);
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->alice, "t-2", "[1]"), FAWN_EINVAL);
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->alice, "t-2", "{bad"), FAWN_EINVAL);
    assert_int_equal(store_thread_set_status(x->s, x->alice, "t-1", "weird"), FAWN_EINVAL);
    /* Updates and delete. */
    assert_int_equal(store_thread_set_metadata(x->s, x->alice, "t-1", "{\"c\":3}"), 0);
    assert_int_equal(store_thread_set_status(x->s, x->alice, "t-1", "busy"), 0);
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "t-1"), 0);
    assert_string_equal(t.metadata, "{\"c\":3}");
    assert_string_equal(t.status, "busy");
    store_thread_clear(&t);
    assert_int_equal(store_thread_delete(x->s, x->alice, "t-1"), 0);
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "t-1"), FAWN_ENOENT);
}

static size_t search(fx *x, int64_t owner, const char *match, const char *status, char *ids,
                     size_t idsz) {
    store_thread *rows;
    size_t n;
    assert_int_equal(store_thread_search(x->s, &rows, &n, owner, match, status, NULL, 100, 0), 0);
    ids[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        strncat(ids, rows[i].id, idsz - strlen(ids) - 2);
        strcat(ids, " ");
        store_thread_clear(&rows[i]);
    }
    free(rows);
    return n;
}

static void search_matches_metadata_exactly(void **state) {
    fx *x = *state;
    store_thread t;
    bool existed;
    const char *meta[][2] = {{"s-1", "{\"k\":\"v\",\"n\":1}"},
                             {"s-2", "{\"k\":\"v\",\"n\":\"1\"}"},
                             {"s-3", "{\"k\":\"w\"}"},
                             {"s-4", "{\"k\":\"v\",\"o\":{\"x\":[1,2]}}"}};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(store_thread_create(x->s, &t, &existed, x->bob, meta[i][0], meta[i][1]),
                         0);
        store_thread_clear(&t);
    }
    char ids[256];
    assert_int_equal(search(x, x->bob, "{\"k\":\"v\"}", NULL, ids, sizeof ids), 3);
    /* The number 1 is not the string "1". */
    assert_int_equal(search(x, x->bob, "{\"n\":1}", NULL, ids, sizeof ids), 1);
    assert_string_equal(ids, "s-1 ");
    assert_int_equal(search(x, x->bob, "{\"o\":{\"x\":[1,2]}}", NULL, ids, sizeof ids), 1);
    assert_int_equal(search(x, x->bob, "{\"missing\":null}", NULL, ids, sizeof ids), 0);
    assert_int_equal(search(x, x->bob, NULL, "busy", ids, sizeof ids), 0);
    assert_int_equal(search(x, x->bob, NULL, NULL, ids, sizeof ids), 4);
    assert_int_equal(search(x, x->alice, "{\"k\":\"v\"}", NULL, ids, sizeof ids), 0);
    store_thread *rows;
    size_t n;
    assert_int_equal(
        store_thread_search(x->s, &rows, &n, x->bob, "{\"a\\\"b\":1}", NULL, NULL, 10, 0),
        FAWN_EINVAL);
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->bob, NULL, NULL, NULL, 2, 1), 0);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++)
        store_thread_clear(&rows[i]);
    free(rows);
}

/* A match is bounded in keys and bytes before anything is searched: a
 * match of thousands of keys costs every thread searched a lookup each. */
static void search_matches_are_bounded(void **state) {
    fx *x = *state;
    fbuf match = {0};
    assert_int_equal(fbuf_printf(&match, "{"), 0);
    for (int i = 0; i <= STORE_MATCH_KEYS_MAX; i++)
        assert_int_equal(fbuf_printf(&match, "%s\"k%d\":1", i ? "," : "", i), 0);
    assert_int_equal(fbuf_printf(&match, "}"), 0);
    store_thread *rows;
    size_t n;
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->bob, match.data, NULL, NULL, 10, 0),
                     FAWN_E2BIG);
    assert_null(rows);
    assert_int_equal(n, 0);
    char big[STORE_MATCH_MAX + 64];
    snprintf(big, sizeof big, "{\"k\":\"%0*d\"}", STORE_MATCH_MAX, 0);
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->bob, big, NULL, NULL, 10, 0),
                     FAWN_E2BIG);
    /* At the bounds, the search runs. */
    match.len = 0;
    assert_int_equal(fbuf_printf(&match, "{"), 0);
    for (int i = 0; i < STORE_MATCH_KEYS_MAX; i++)
        assert_int_equal(fbuf_printf(&match, "%s\"k%d\":1", i ? "," : "", i), 0);
    assert_int_equal(fbuf_printf(&match, "}"), 0);
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->bob, match.data, NULL, NULL, 10, 0),
                     0);
    assert_int_equal(n, 0);
    free(rows);
    fbuf_free(&match);
}

/* {"d":[[...]]}: an object whose value nests arrays `levels` - 1 deep. */
static char *nested(int levels) {
    fbuf b = {0};
    assert_int_equal(fbuf_printf(&b, "{\"d\":"), 0);
    for (int i = 1; i < levels; i++)
        assert_int_equal(fbuf_printf(&b, "["), 0);
    assert_int_equal(fbuf_printf(&b, "1"), 0);
    for (int i = 1; i < levels; i++)
        assert_int_equal(fbuf_printf(&b, "]"), 0);
    assert_int_equal(fbuf_printf(&b, "}"), 0);
    return fbuf_steal(&b);
}

/* Metadata and matches nest at most STORE_JSON_DEPTH_MAX levels: SQLite's
 * JSON functions refuse documents nested past 2000 levels, which jansson
 * accepts, so both are refused as too large before SQLite sees them. */
static void metadata_and_matches_nest_within_bounds(void **state) {
    fx *x = *state;
    store_thread t;
    bool existed;
    store_thread *rows;
    size_t n;
    char *too_deep = nested(2001), *deepest = nested(STORE_JSON_DEPTH_MAX);
    char *over = nested(STORE_JSON_DEPTH_MAX + 1);
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->bob, "deep", too_deep), FAWN_E2BIG);
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->bob, "deep", over), FAWN_E2BIG);
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->bob, "deep", deepest), 0);
    store_thread_clear(&t);
    assert_int_equal(store_thread_set_metadata(x->s, x->bob, "deep", over), FAWN_E2BIG);
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->bob, too_deep, NULL, NULL, 10, 0),
                     FAWN_E2BIG);
    assert_null(rows);
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->bob, over, NULL, NULL, 10, 0),
                     FAWN_E2BIG);
    char ids[64];
    assert_int_equal(search(x, x->bob, deepest, NULL, ids, sizeof ids), 1);
    assert_string_equal(ids, "deep ");
    assert_int_equal(search(x, x->bob, "{\"k\":1}", NULL, ids, sizeof ids), 0);
    free(too_deep);
    free(deepest);
    free(over);
}

/* A reader stopped inside a statement step, on demand: the first step of
 * any reader after `armed` is set waits there until `release`. */
typedef struct read_gate {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool armed, held, release;
} read_gate;

static int gate_progress(void *arg) {
    read_gate *g = arg;
    pthread_mutex_lock(&g->mu);
    if (g->armed) {
        g->armed = false;
        g->held = true;
        pthread_cond_broadcast(&g->cv);
        while (!g->release)
            pthread_cond_wait(&g->cv, &g->mu);
    }
    pthread_mutex_unlock(&g->mu);
    return 0;
}

/* Waits until *flag is set, with a ceiling that only catches a hang. */
static bool gate_wait(read_gate *g, const bool *flag) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 120;
    pthread_mutex_lock(&g->mu);
    int rc = 0;
    while (!*flag && rc == 0)
        rc = pthread_cond_timedwait(&g->cv, &g->mu, &until);
    bool ok = *flag;
    pthread_mutex_unlock(&g->mu);
    return ok;
}

typedef struct gate_call {
    fx *x;
    read_gate *g;
    int result;
    bool done;
} gate_call;

static void *long_search(void *arg) {
    gate_call *c = arg;
    store_thread *rows;
    size_t n;
    c->result = store_thread_search(c->x->s, &rows, &n, c->x->bob, "{\"k\":\"v\"}", NULL, NULL, 100,
                                    0);
    for (size_t i = 0; c->result == 0 && i < n; i++)
        store_thread_clear(&rows[i]);
    free(rows);
    return NULL;
}

/* Another user's read and a write while the search is held. */
static void *other_user_calls(void *arg) {
    gate_call *c = arg;
    store_thread t;
    c->result = store_thread_get(c->x->s, &t, c->x->alice, "held-1");
    store_thread_clear(&t);
    if (c->result == 0)
        c->result = store_thread_set_status(c->x->s, c->x->alice, "held-1", "busy");
    pthread_mutex_lock(&c->g->mu);
    c->done = true;
    pthread_cond_broadcast(&c->g->cv);
    pthread_mutex_unlock(&c->g->mu);
    return NULL;
}

/* One search held inside its statement holds one read connection, not the
 * store: another user's thread read and a write complete meanwhile. */
static void a_held_read_stalls_no_other_caller(void **state) {
    fx *x = *state;
    store_thread t;
    bool existed;
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->alice, "held-1", NULL), 0);
    store_thread_clear(&t);
    read_gate g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};
    for (size_t i = 0; i < STORE_READERS; i++)
        sqlite3_progress_handler(sdb_sqlite_handle(x->s->readers[i]), 1, gate_progress, &g);
    g.armed = true;
    gate_call search_call = {.x = x, .g = &g}, other = {.x = x, .g = &g};
    pthread_t searcher, caller;
    assert_int_equal(pthread_create(&searcher, NULL, long_search, &search_call), 0);
    assert_true(gate_wait(&g, &g.held));
    assert_int_equal(pthread_create(&caller, NULL, other_user_calls, &other), 0);
    bool completed = gate_wait(&g, &other.done);
    pthread_mutex_lock(&g.mu);
    g.release = true;
    pthread_cond_broadcast(&g.cv);
    pthread_mutex_unlock(&g.mu);
    pthread_join(caller, NULL);
    pthread_join(searcher, NULL);
    for (size_t i = 0; i < STORE_READERS; i++)
        sqlite3_progress_handler(sdb_sqlite_handle(x->s->readers[i]), 0, NULL, NULL);
    assert_true(completed);
    assert_int_equal(other.result, 0);
    assert_int_equal(search_call.result, 0);
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "held-1"), 0);
    assert_string_equal(t.status, "busy");
    store_thread_clear(&t);
}

typedef struct writer {
    fx *x;
    int index;
    int failures;
} writer;

static void *write_threads(void *arg) {
    writer *w = arg;
    char id[32];
    for (int i = 0; i < 50; i++) {
        store_thread t;
        bool existed;
        snprintf(id, sizeof id, "w%d-%d", w->index, i);
        if (store_thread_create(w->x->s, &t, &existed, w->x->alice, id, "{\"w\":1}") < 0 || existed)
            w->failures++;
        else
            store_thread_clear(&t);
    }
    return NULL;
}

static void concurrent_writers_lose_nothing(void **state) {
    fx *x = *state;
    pthread_t th[8];
    writer w[8];
    for (int i = 0; i < 8; i++) {
        w[i] = (writer){.x = x, .index = i};
        assert_int_equal(pthread_create(&th[i], NULL, write_threads, &w[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(w[i].failures, 0);
    }
    store_thread *rows;
    size_t n;
    assert_int_equal(
        store_thread_search(x->s, &rows, &n, x->alice, "{\"w\":1}", NULL, NULL, 1000, 0), 0);
    assert_int_equal(n, 400);
    for (size_t i = 0; i < n; i++)
        store_thread_clear(&rows[i]);
    free(rows);
}

/* A process killed right after its commits: every committed row is there
 * when the database is opened again, and it opens cleanly. */
static void killed_writer_restarts_cleanly(void **state) {
    fx *x = *state;
    int ready[2];
    assert_int_equal(pipe(ready), 0);
    pid_t pid = fork();
    if (pid == 0) {
        store *s;
        if (fx_open(x, &s) < 0)
            _exit(1);
        for (int i = 0; i < 20; i++) {
            char id[16];
            store_thread t;
            bool existed;
            snprintf(id, sizeof id, "k-%d", i);
            if (store_thread_create(s, &t, &existed, x->bob, id, NULL) < 0)
                _exit(1);
        }
        (void)!write(ready[1], "r", 1);
        pause();
        _exit(0);
    }
    char c;
    assert_int_equal(read(ready[0], &c, 1), 1);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    store *s;
    assert_int_equal(fx_open(x, &s), 0);
    store_thread t;
    for (int i = 0; i < 20; i++) {
        char id[16];
        snprintf(id, sizeof id, "k-%d", i);
        assert_int_equal(store_thread_get(s, &t, x->bob, id), 0);
        store_thread_clear(&t);
    }
    store_close(s);
    close(ready[0]);
    close(ready[1]);
}

/* ---- runs, events, checkpoints, receipts ---- */

static void make_thread(fx *x, int64_t owner, const char *id) {
    store_thread t;
    bool existed;
    assert_int_equal(store_thread_create(x->s, &t, &existed, owner, id, NULL), 0);
    store_thread_clear(&t);
}

static void add_run(fx *x, int64_t owner, const char *thread, const char *run_id) {
    store_run r = {.owner_id = owner};
    snprintf(r.run_id, sizeof r.run_id, "%s", run_id);
    snprintf(r.thread_id, sizeof r.thread_id, "%s", thread);
    snprintf(r.assistant_id, sizeof r.assistant_id, "lead_agent");
    r.kwargs = "{\"stream_mode\":[\"values\"]}";
    assert_int_equal(store_run_create(x->s, &r), 0);
}

static void runs_are_owner_and_thread_scoped(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "rt1");
    make_thread(x, x->bob, "rt1");
    store_run r = {.owner_id = x->alice};
    snprintf(r.run_id, sizeof r.run_id, "ra0");
    snprintf(r.thread_id, sizeof r.thread_id, "missing");
    snprintf(r.assistant_id, sizeof r.assistant_id, "lead_agent");
    assert_int_equal(store_run_create(x->s, &r), FAWN_ENOENT);
    add_run(x, x->alice, "rt1", "ra1");
    assert_int_equal(store_run_set_status(x->s, "ra1", "success", NULL), 0);
    add_run(x, x->alice, "rt1", "ra2");
    snprintf(r.thread_id, sizeof r.thread_id, "rt1");
    snprintf(r.run_id, sizeof r.run_id, "ra1");
    assert_int_equal(store_run_create(x->s, &r), FAWN_EEXIST);
    store_run got;
    assert_int_equal(store_run_get(x->s, &got, x->alice, "rt1", "ra1"), 0);
    assert_string_equal(got.status, "success");
    assert_string_equal(got.kwargs, "{\"stream_mode\":[\"values\"]}");
    assert_null(got.error);
    store_run_clear(&got);
    /* Another owner's thread of the same id does not see it. */
    assert_int_equal(store_run_get(x->s, &got, x->bob, "rt1", "ra1"), FAWN_ENOENT);
    assert_int_equal(store_run_set_status(x->s, "ra1", "bogus", NULL), FAWN_EINVAL);
    assert_int_equal(store_run_set_status(x->s, "ra2", "running", NULL), 0);
    store_run *list;
    size_t n;
    assert_int_equal(store_run_list(x->s, &list, &n, x->alice, "rt1", 10, 0), 0);
    assert_int_equal(n, 2);
    assert_string_equal(list[0].run_id, "ra2"); /* newest first */
    for (size_t i = 0; i < n; i++)
        store_run_clear(&list[i]);
    free(list);
    /* A restart ends what the gateway left running (another gateway's
     * run is left alone), frees its thread, and ends its stream. */
    assert_int_equal(store_thread_set_status(x->s, x->alice, "rt1", "busy"), 0);
    size_t abandoned = 0;
    assert_int_equal(store_run_abandon_unfinished(x->s, &abandoned, "gw-b", "gateway restarted"),
                     0);
    assert_int_equal(abandoned, 0);
    assert_int_equal(store_run_abandon_unfinished(x->s, &abandoned, "", "gateway restarted"), 0);
    assert_int_equal(abandoned, 1);
    store_event *ev;
    size_t nev;
    assert_int_equal(store_event_read(x->s, &ev, &nev, "ra2", 0, 10), 0);
    assert_int_equal(nev, 2);
    assert_string_equal(ev[0].event, "error");
    assert_non_null(strstr(ev[0].data, "gateway restarted"));
    assert_string_equal(ev[1].event, "end");
    assert_true(ev[1].seq == 2);
    for (size_t i = 0; i < nev; i++)
        free(ev[i].data);
    free(ev);
    assert_int_equal(store_run_get(x->s, &got, x->alice, "rt1", "ra2"), 0);
    assert_string_equal(got.status, "error");
    assert_string_equal(got.error, "gateway restarted");
    store_run_clear(&got);
    store_thread t;
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "rt1"), 0);
    assert_string_equal(t.status, "idle");
    store_thread_clear(&t);
}

/* A run of gw owned by it, on owner's thread. */
static void add_owned_run(fx *x, int64_t owner, const char *thread, const char *run_id,
                          const char *gw) {
    store_run r = {.owner_id = owner, .kwargs = "{}"};
    snprintf(r.run_id, sizeof r.run_id, "%s", run_id);
    snprintf(r.thread_id, sizeof r.thread_id, "%s", thread);
    snprintf(r.assistant_id, sizeof r.assistant_id, "lead_agent");
    snprintf(r.gateway_id, sizeof r.gateway_id, "%s", gw);
    assert_int_equal(store_run_create(x->s, &r), 0);
}

static void assert_run_status(fx *x, int64_t owner, const char *thread, const char *run_id,
                              const char *status) {
    store_run got;
    assert_int_equal(store_run_get(x->s, &got, owner, thread, run_id), 0);
    assert_string_equal(got.status, status);
    store_run_clear(&got);
}

/* One unfinished run per thread, whichever gateway runs it; a run's
 * status is written only by its own gateway while it is unfinished. */
static void runs_are_owned_by_their_gateway(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "ot1");
    add_owned_run(x, x->alice, "ot1", "oa1", "gw-a");
    store_run r = {.owner_id = x->alice, .kwargs = "{}"};
    snprintf(r.run_id, sizeof r.run_id, "ob1");
    snprintf(r.thread_id, sizeof r.thread_id, "ot1");
    snprintf(r.assistant_id, sizeof r.assistant_id, "lead_agent");
    snprintf(r.gateway_id, sizeof r.gateway_id, "gw-b");
    assert_int_equal(store_run_create(x->s, &r), FAWN_EBUSY); /* the thread's run is gw-a's */
    store_run active;
    assert_int_equal(store_run_active(x->s, &active, x->alice, "ot1"), 0);
    assert_string_equal(active.run_id, "oa1");
    assert_string_equal(active.gateway_id, "gw-a");
    assert_false(active.cancel_requested);
    store_run_clear(&active);
    assert_int_equal(store_run_active(x->s, &active, x->bob, "ot1"), FAWN_ENOENT);
    /* Another gateway cannot write it; its own can, with its thread. */
    assert_int_equal(store_run_own_set_status(x->s, "oa1", "gw-b", "success", NULL, "idle"),
                     FAWN_ENOENT);
    assert_int_equal(store_run_own_set_status(x->s, "oa1", "gw-a", "running", NULL, NULL), 0);
    assert_int_equal(store_run_own_set_status(x->s, "oa1", "gw-a", "bogus", NULL, NULL),
                     FAWN_EINVAL);
    assert_int_equal(store_thread_set_status(x->s, x->alice, "ot1", "busy"), 0);
    assert_int_equal(store_run_own_set_status(x->s, "oa1", "gw-a", "error", "boom", "error"), 0);
    store_thread t;
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "ot1"), 0);
    assert_string_equal(t.status, "error");
    store_thread_clear(&t);
    /* Ended: not even its own gateway writes it again. */
    assert_int_equal(store_run_own_set_status(x->s, "oa1", "gw-a", "success", NULL, "idle"),
                     FAWN_ENOENT);
    assert_run_status(x, x->alice, "ot1", "oa1", "error");
    assert_int_equal(store_run_create(x->s, &r), 0); /* the thread is free */
}

/* A cancel asked for through any gateway reaches the run's own gateway,
 * only for the run's owner and while it is unfinished. */
static void cancel_requests_reach_the_runs_gateway(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "ct1");
    make_thread(x, x->bob, "ct2");
    add_owned_run(x, x->alice, "ct1", "ca1", "gw-a");
    add_owned_run(x, x->bob, "ct2", "cb1", "gw-a");
    assert_int_equal(store_run_request_cancel(x->s, x->bob, "ct1", "ca1"), FAWN_ENOENT);
    assert_int_equal(store_run_request_cancel(x->s, x->alice, "ct2", "cb1"), FAWN_ENOENT);
    char(*ids)[37];
    size_t n;
    assert_int_equal(store_run_cancel_requests(x->s, &ids, &n, "gw-a"), 0);
    assert_int_equal(n, 0);
    free(ids);
    assert_int_equal(store_run_request_cancel(x->s, x->alice, "ct1", "ca1"), 0);
    assert_int_equal(store_run_cancel_requests(x->s, &ids, &n, "gw-b"), 0);
    assert_int_equal(n, 0);
    free(ids);
    assert_int_equal(store_run_cancel_requests(x->s, &ids, &n, "gw-a"), 0);
    assert_int_equal(n, 1);
    assert_string_equal(ids[0], "ca1");
    free(ids);
    assert_int_equal(store_run_own_set_status(x->s, "ca1", "gw-a", "interrupted", NULL, NULL), 0);
    assert_int_equal(store_run_cancel_requests(x->s, &ids, &n, "gw-a"), 0);
    assert_int_equal(n, 0); /* ended: nothing left to cancel */
    free(ids);
    assert_int_equal(store_run_request_cancel(x->s, x->alice, "ct1", "ca1"), FAWN_ENOENT);
    assert_int_equal(store_run_own_set_status(x->s, "cb1", "gw-a", "success", NULL, NULL), 0);
}

/* A gateway silent past its lease is reaped by another: its unfinished
 * runs end (error and end events after the stored ones, threads idle);
 * a live gateway's runs and finished runs are left alone; the reaped
 * gateway's heartbeat finds its lease lost. */
static void silent_gateways_are_reaped(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "gt1");
    make_thread(x, x->alice, "gt2");
    make_thread(x, x->alice, "gt3");
    assert_int_equal(store_gateway_register(x->s, "gw-a", 1000), 0);
    assert_int_equal(store_gateway_register(x->s, "gw-b", 1000), 0);
    assert_int_equal(store_gateway_register(x->s, "", 1000), FAWN_EINVAL);
    add_owned_run(x, x->alice, "gt1", "ga1", "gw-a");
    add_owned_run(x, x->alice, "gt2", "gb1", "gw-b");
    add_owned_run(x, x->alice, "gt3", "ga2", "gw-a");
    assert_int_equal(store_run_own_set_status(x->s, "ga2", "gw-a", "success", NULL, NULL), 0);
    assert_int_equal(store_thread_set_status(x->s, x->alice, "gt1", "busy"), 0);
    store_event ev[] = {{.seq = 1, .event = "metadata", .data = "{}"},
                        {.seq = 2, .event = "values", .data = "null"}};
    assert_int_equal(store_event_append(x->s, "ga1", ev, 2), 0);
    /* Within the lease: nothing. */
    size_t gateways, runs;
    assert_int_equal(store_gateway_beat(x->s, "gw-b", 5000), 0);
    assert_int_equal(store_gateway_reap(x->s, &gateways, &runs, "gw-b", 5500, 5000, "gone"), 0);
    assert_int_equal(gateways, 0); /* runs of no gateway (other tests') may end here */
    assert_run_status(x, x->alice, "gt1", "ga1", "pending");
    /* gw-a silent for 5 s: gw-b reaps it; gw-b never reaps itself. */
    assert_int_equal(store_gateway_reap(x->s, &gateways, &runs, "gw-b", 6001, 5000, "gone"), 0);
    assert_int_equal(gateways, 1);
    assert_int_equal(runs, 1);
    assert_run_status(x, x->alice, "gt1", "ga1", "error");
    assert_run_status(x, x->alice, "gt2", "gb1", "pending");
    assert_run_status(x, x->alice, "gt3", "ga2", "success");
    store_event *got;
    size_t n;
    assert_int_equal(store_event_read(x->s, &got, &n, "ga1", 2, 10), 0);
    assert_int_equal(n, 2);
    assert_true(got[0].seq == 3 && strcmp(got[0].event, "error") == 0);
    assert_non_null(strstr(got[0].data, "gone"));
    assert_true(got[1].seq == 4 && strcmp(got[1].event, "end") == 0);
    for (size_t i = 0; i < n; i++)
        free(got[i].data);
    free(got);
    store_thread t;
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "gt1"), 0);
    assert_string_equal(t.status, "idle");
    store_thread_clear(&t);
    /* The old owner: its lease is gone, its writes change nothing. */
    assert_int_equal(store_gateway_beat(x->s, "gw-a", 6100), FAWN_ESTALE);
    assert_int_equal(store_run_own_set_status(x->s, "ga1", "gw-a", "success", NULL, "idle"),
                     FAWN_ENOENT);
    assert_run_status(x, x->alice, "gt1", "ga1", "error");
    /* Nothing follows the end the reaper stored: its late events neither. */
    store_event late[] = {{.seq = 5, .event = "values", .data = "null"},
                          {.seq = 6, .event = "end", .data = "null"}};
    assert_int_equal(store_event_append(x->s, "ga1", late, 2), FAWN_ESTALE);
    int64_t first, last;
    assert_int_equal(store_event_bounds(x->s, &first, &last, "ga1"), 0);
    assert_int_equal(last, 4);
    /* A run of no known gateway (older than ownership) is reaped too. */
    make_thread(x, x->alice, "gt4");
    add_owned_run(x, x->alice, "gt4", "gz1", "");
    assert_int_equal(store_gateway_reap(x->s, &gateways, &runs, "gw-b", 6200, 5000, "gone"), 0);
    assert_int_equal(gateways, 0);
    assert_int_equal(runs, 1);
    assert_run_status(x, x->alice, "gt4", "gz1", "error");
    /* A clean stop removes the row: the next beat finds it gone. */
    assert_int_equal(store_gateway_remove(x->s, "gw-b"), 0);
    assert_int_equal(store_gateway_beat(x->s, "gw-b", 6300), FAWN_ESTALE);
    /* A store no other gateway shares: a start ends every gateway's runs. */
    make_thread(x, x->alice, "gt5");
    add_owned_run(x, x->alice, "gt5", "gc1", "gw-c");
    assert_int_equal(store_run_abandon_unfinished(x->s, &runs, NULL, "restarted"), 0);
    assert_true(runs >= 1);
    assert_run_status(x, x->alice, "gt5", "gc1", "error");
}

static void run_events_append_read_prune(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "rt2");
    add_run(x, x->alice, "rt2", "rb1");
    store_event ev[5];
    for (int i = 0; i < 5; i++) {
        ev[i].seq = i + 1;
        snprintf(ev[i].event, sizeof ev[i].event, "values");
        ev[i].data = "{\"n\":1}";
    }
    assert_int_equal(store_event_append(x->s, "rb1", ev, 5), 0);
    /* A duplicate seq fails the whole batch. */
    assert_int_equal(store_event_append(x->s, "rb1", ev, 1), FAWN_EEXIST);
    store_event *got;
    size_t n;
    assert_int_equal(store_event_read(x->s, &got, &n, "rb1", 2, 2), 0);
    assert_int_equal(n, 2);
    assert_int_equal(got[0].seq, 3);
    assert_string_equal(got[1].data, "{\"n\":1}");
    for (size_t i = 0; i < n; i++)
        free(got[i].data);
    free(got);
    int64_t first, last;
    assert_int_equal(store_event_prune(x->s, "rb1", 2), 0);
    assert_int_equal(store_event_bounds(x->s, &first, &last, "rb1"), 0);
    assert_int_equal(first, 4);
    assert_int_equal(last, 5);
    assert_int_equal(store_event_bounds(x->s, &first, &last, "none"), 0);
    assert_int_equal(first, 0);
}

/* A thread carries its newest state's title (a string) and when that
 * state was written, in a get and in a search; a search may name ids. */
static void threads_carry_their_title_and_ids_narrow_a_search(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "tt1");
    make_thread(x, x->alice, "tt2");
    store_thread t;
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "tt1"), 0);
    assert_null(t.title);
    assert_int_equal(t.state_updated_at_ms, 0);
    store_thread_clear(&t);
    const char *states[] = {"{\"messages\":[],\"title\":\"First\"}",
                            "{\"messages\":[],\"title\":\"Second \\u00e9\"}",
                            "{\"messages\":[],\"title\":7}"};
    store_checkpoint c = {.created_at_ms = 1234};
    for (size_t i = 0; i < ARRAY_LEN(states); i++) {
        json_t *values = json_loads(states[i], 0, NULL);
        snprintf(c.checkpoint_id, sizeof c.checkpoint_id, "tc%zu", i);
        c.created_at_ms += 1;
        assert_int_equal(
            store_checkpoint_put(x->s, NULL, x->alice, i == 2 ? "tt2" : "tt1", &c, values), 0);
        json_decref(values);
    }
    assert_int_equal(store_thread_get(x->s, &t, x->alice, "tt1"), 0);
    assert_string_equal(t.title, "Second \xc3\xa9"); /* the newest checkpoint's */
    assert_int_equal(t.state_updated_at_ms, 1236);
    store_thread_clear(&t);
    store_thread *rows;
    size_t n;
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->alice, NULL, NULL, "[\"tt2\"]", 10, 0),
                     0);
    assert_int_equal(n, 1);
    assert_string_equal(rows[0].id, "tt2");
    assert_null(rows[0].title); /* a title that is not text is none */
    assert_int_equal(rows[0].state_updated_at_ms, 1237);
    store_thread_clear(&rows[0]);
    free(rows);
    /* Another owner's ids name nothing; bad ids are refused. */
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->bob, NULL, NULL, "[\"tt1\"]", 10, 0),
                     0);
    assert_int_equal(n, 0);
    free(rows);
    const char *bad[] = {"{}", "[1]", "[\"../x\"]", "[\"\"]", "not json"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        assert_int_equal(store_thread_search(x->s, &rows, &n, x->alice, NULL, NULL, bad[i], 10, 0),
                         FAWN_EINVAL);
        assert_null(rows);
    }
    fbuf many = {0};
    assert_int_equal(fbuf_printf(&many, "["), 0);
    for (int i = 0; i <= STORE_SEARCH_IDS_MAX; i++)
        assert_int_equal(fbuf_printf(&many, "%s\"id%d\"", i ? "," : "", i), 0);
    assert_int_equal(fbuf_printf(&many, "]"), 0);
    assert_int_equal(store_thread_search(x->s, &rows, &n, x->alice, NULL, NULL, many.data, 10, 0),
                     FAWN_E2BIG);
    fbuf_free(&many);
}

/* Writes a checkpoint of (owner, thread) by run ("" for a client's
 * update) at time ms whose messages are the given JSON texts. */
static void put_messages(fx *x, int64_t owner, const char *thread, const char *run, int64_t ms,
                         const char *const *msgs, size_t n) {
    static int counter;
    store_checkpoint c = {.created_at_ms = ms};
    snprintf(c.checkpoint_id, sizeof c.checkpoint_id, "pm%d", ++counter);
    snprintf(c.run_id, sizeof c.run_id, "%s", run);
    json_t *values = json_pack("{s:[]}", "messages");
    for (size_t i = 0; i < n; i++)
        json_array_append_new(json_object_get(values, "messages"), json_loads(msgs[i], 0, NULL));
    assert_int_equal(store_checkpoint_put(x->s, NULL, owner, thread, &c, values), 0);
    json_decref(values);
}

/* A page's seqs as "1 3 4 " and its run ids as "r1 r2 - " ("-" for ""). */
static void page_text(char seqs[128], char runs[128], const store_message *m, size_t n) {
    seqs[0] = runs[0] = '\0';
    for (size_t i = 0; i < n; i++) {
        snprintf(seqs + strlen(seqs), 128 - strlen(seqs), "%" PRId64 " ", m[i].seq);
        snprintf(runs + strlen(runs), 128 - strlen(runs), "%s ",
                 m[i].run_id[0] ? m[i].run_id : "-");
    }
}

static void page_free(store_message *m, size_t n) {
    for (size_t i = 0; i < n; i++)
        store_message_clear(&m[i]);
    free(m);
}

/* A page holds the newest messages of the thread's newest state below a
 * seq, oldest first, each with the run that wrote it and when; a message
 * a client replaced is a new row, the old one is no longer listed. */
static void message_pages_walk_the_newest_state_backwards(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "mp1");
    store_message *m;
    size_t n;
    bool more = true;
    char seqs[128], runs[128];
    assert_int_equal(store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 0, 50, SIZE_MAX), 0);
    assert_int_equal(n, 0);
    assert_false(more);
    free(m);
    const char *m1 = "{\"type\":\"human\",\"content\":\"one\",\"id\":\"1\"}",
               *m2 = "{\"type\":\"ai\",\"content\":\"two\",\"id\":\"2\"}",
               *m3 = "{\"type\":\"human\",\"content\":\"three\",\"id\":\"3\"}",
               *m4 = "{\"type\":\"ai\",\"content\":\"four\",\"id\":\"4\"}",
               *m2b = "{\"type\":\"ai\",\"content\":\"two, edited\",\"id\":\"2\"}";
    put_messages(x, x->alice, "mp1", "r1", 100, (const char *[]){m1, m2}, 2);
    put_messages(x, x->alice, "mp1", "r2", 200, (const char *[]){m1, m2, m3, m4}, 4);
    put_messages(x, x->alice, "mp1", "", 300, (const char *[]){m1, m2b, m3, m4}, 4);
    assert_int_equal(store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 0, 50, SIZE_MAX), 0);
    page_text(seqs, runs, m, n);
    assert_string_equal(seqs, "1 3 4 5 ");
    assert_string_equal(runs, "r1 r2 r2 - ");
    assert_false(more);
    assert_int_equal(m[0].created_at_ms, 100);
    assert_int_equal(m[3].created_at_ms, 300);
    assert_string_equal(m[3].body, m2b);
    page_free(m, n);
    /* Backwards, two at a time. */
    assert_int_equal(store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 0, 2, SIZE_MAX), 0);
    page_text(seqs, runs, m, n);
    assert_string_equal(seqs, "4 5 ");
    assert_true(more);
    page_free(m, n);
    assert_int_equal(store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 4, 2, SIZE_MAX), 0);
    page_text(seqs, runs, m, n);
    assert_string_equal(seqs, "1 3 ");
    assert_false(more);
    page_free(m, n);
    assert_int_equal(store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 1, 2, SIZE_MAX), 0);
    assert_int_equal(n, 0);
    assert_false(more);
    free(m);
    /* A byte bound: the newest message always, then only what fits. */
    assert_int_equal(store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 0, 50, 1), 0);
    page_text(seqs, runs, m, n);
    assert_string_equal(seqs, "5 ");
    assert_true(more);
    page_free(m, n);
    assert_int_equal(
        store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 0, 50, strlen(m2b) + strlen(m4)),
        0);
    page_text(seqs, runs, m, n);
    assert_string_equal(seqs, "4 5 ");
    assert_true(more);
    page_free(m, n);
    /* The limit is clamped. */
    assert_int_equal(store_message_page(x->s, &m, &n, &more, x->alice, "mp1", 0, 0, SIZE_MAX), 0);
    assert_int_equal(n, 1);
    page_free(m, n);
    /* Another owner's thread, a missing one and a bad id are missing. */
    const char *ids[] = {"mp1", "missing", "../x"};
    for (size_t i = 0; i < ARRAY_LEN(ids); i++) {
        m = (store_message *)"poison";
        more = true;
        assert_int_equal(
            store_message_page(x->s, &m, &n, &more, i ? x->alice : x->bob, ids[i], 0, 50, SIZE_MAX),
            FAWN_ENOENT);
        assert_null(m);
        assert_int_equal(n, 0);
        assert_false(more);
    }
}

/* Token usage sums the answers runs wrote, per model; counts that are not
 * positive integers are 0, a sum past INT64_MAX stays there, a client's
 * own messages and another owner's thread count nothing. */
static void token_usage_sums_what_runs_wrote(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "tu1");
    const char *a1 = "{\"type\":\"ai\",\"id\":\"a1\",\"response_metadata\":{\"model_name\":\"m1\"},"
                     "\"usage_metadata\":{\"input_tokens\":10,\"output_tokens\":5,"
                     "\"total_tokens\":15}}",
               *a2 = "{\"type\":\"ai\",\"id\":\"a2\",\"response_metadata\":{\"model_name\":\"m2\"},"
                     "\"usage_metadata\":{\"input_tokens\":\"7\",\"output_tokens\":-3,"
                     "\"total_tokens\":1.5}}",
               *a3 = "{\"type\":\"ai\",\"id\":\"a3\",\"response_metadata\":{\"model_name\":\"m1\"},"
                     "\"usage_metadata\":{\"total_tokens\":9223372036854775807}}",
               *h = "{\"type\":\"human\",\"id\":\"h\",\"usage_metadata\":{\"total_tokens\":5}}",
               *own = "{\"type\":\"ai\",\"id\":\"own\",\"usage_metadata\":{\"total_tokens\":5}}";
    store_token_usage u;
    assert_int_equal(store_thread_token_usage(x->s, &u, x->alice, "tu1"), 0);
    assert_int_equal(u.total_tokens, 0);
    assert_int_equal(u.n_models, 0);
    put_messages(x, x->alice, "tu1", "r1", 100, (const char *[]){h, a1}, 2);
    put_messages(x, x->alice, "tu1", "r2", 200, (const char *[]){h, a1, a2}, 3);
    put_messages(x, x->alice, "tu1", "", 300, (const char *[]){h, a1, a2, own}, 4);
    assert_int_equal(store_thread_token_usage(x->s, &u, x->alice, "tu1"), 0);
    assert_int_equal(u.input_tokens, 10);
    assert_int_equal(u.output_tokens, 5);
    assert_int_equal(u.total_tokens, 15);
    assert_int_equal(u.runs, 2);
    assert_int_equal(u.n_models, 2);
    assert_string_equal(u.models[0].model, "m1");
    assert_int_equal(u.models[0].tokens, 15);
    assert_int_equal(u.models[0].runs, 1);
    assert_string_equal(u.models[1].model, "m2");
    assert_int_equal(u.models[1].tokens, 0);
    put_messages(x, x->alice, "tu1", "r3", 400, (const char *[]){h, a1, a2, own, a3}, 5);
    assert_int_equal(store_thread_token_usage(x->s, &u, x->alice, "tu1"), 0);
    assert_int_equal(u.total_tokens, INT64_MAX);
    assert_int_equal(u.runs, 3);
    assert_int_equal(store_thread_token_usage(x->s, &u, x->bob, "tu1"), 0);
    assert_int_equal(u.total_tokens, 0);
    assert_int_equal(u.runs, 0);
}

/* A run's token usage is a bounded list of objects, kept with the run and
 * read back with it; the thread's usage adds its runs' sub-agent and
 * middleware entries (not their lead entries: the lead's answers are the
 * thread's messages) to the lead's answers, by caller and model. */
static void token_usage_adds_what_runs_recorded_besides_the_lead(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "tu2");
    add_run(x, x->alice, "tu2", "ru1");
    store_run r;
    assert_int_equal(store_run_get(x->s, &r, x->alice, "tu2", "ru1"), 0);
    assert_string_equal(r.token_usage, "[]");
    store_run_clear(&r);
    assert_int_equal(store_run_set_usage(x->s, "ru1", "{}"), FAWN_EINVAL);
    assert_int_equal(store_run_set_usage(x->s, "ru1", "[1]"), FAWN_EINVAL);
    assert_int_equal(store_run_set_usage(x->s, "ru1", "[{}"), FAWN_EINVAL);
    assert_int_equal(store_run_set_usage(x->s, "gone", "[]"), FAWN_ENOENT);
    char big[64 * (STORE_USAGE_BUCKETS_MAX + 1) + 8] = "[";
    for (int i = 0; i <= STORE_USAGE_BUCKETS_MAX; i++)
        strcat(big, i ? ",{}" : "{}");
    strcat(big, "]");
    assert_int_equal(store_run_set_usage(x->s, "ru1", big), FAWN_EINVAL);
    const char *usage =
        "[{\"caller\":\"lead\",\"model\":\"m1\",\"input_tokens\":100,\"output_tokens\":50,"
        "\"total_tokens\":150,\"calls\":1},"
        "{\"caller\":\"subagent:bash\",\"model\":\"m2\",\"input_tokens\":20,\"output_tokens\":10,"
        "\"total_tokens\":30,\"calls\":2},"
        "{\"caller\":\"middleware:compaction\",\"model\":\"m1\",\"input_tokens\":4,"
        "\"output_tokens\":3,\"total_tokens\":7,\"calls\":1}]";
    assert_int_equal(store_run_set_usage(x->s, "ru1", usage), 0);
    store_run *list;
    size_t n;
    assert_int_equal(store_run_list(x->s, &list, &n, x->alice, "tu2", 10, 0), 0);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].token_usage, usage);
    store_run_clear(&list[0]);
    free(list);
    const char *a1 = "{\"type\":\"ai\",\"id\":\"a1\",\"response_metadata\":{\"model_name\":\"m1\"},"
                     "\"usage_metadata\":{\"input_tokens\":10,\"output_tokens\":5,"
                     "\"total_tokens\":15}}";
    put_messages(x, x->alice, "tu2", "ru1", 100, (const char *[]){a1}, 1);
    store_token_usage u;
    assert_int_equal(store_thread_token_usage(x->s, &u, x->alice, "tu2"), 0);
    assert_int_equal(u.input_tokens, 34);
    assert_int_equal(u.output_tokens, 18);
    assert_int_equal(u.total_tokens, 52);
    assert_int_equal(u.lead_agent_tokens, 15);
    assert_int_equal(u.subagent_tokens, 30);
    assert_int_equal(u.middleware_tokens, 7);
    assert_int_equal(u.runs, 1);
    assert_int_equal(u.n_models, 2);
    assert_string_equal(u.models[0].model, "m2");
    assert_int_equal(u.models[0].tokens, 30);
    assert_string_equal(u.models[1].model, "m1");
    assert_int_equal(u.models[1].tokens, 22);
    assert_int_equal(u.models[1].runs, 1);
    assert_int_equal(store_thread_token_usage(x->s, &u, x->bob, "tu2"), 0);
    assert_int_equal(u.total_tokens, 0);
}

static void checkpoints_and_receipts_follow_the_thread(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "rt3");
    add_run(x, x->alice, "rt3", "rc1");
    store_checkpoint c = {0};
    json_t *empty = json_pack("{s:[]}", "messages");
    store_checkpoint latest;
    assert_int_equal(store_checkpoint_latest(x->s, &latest, x->alice, "rt3"), FAWN_ENOENT);
    for (int i = 0; i < STORE_CHECKPOINTS_KEPT + 5; i++) {
        snprintf(c.checkpoint_id, sizeof c.checkpoint_id, "c%d", i);
        assert_int_equal(store_checkpoint_put(x->s, NULL, x->alice, "rt3", &c, empty), 0);
    }
    assert_int_equal(store_checkpoint_put(x->s, NULL, x->bob, "rt3", &c, empty), FAWN_ENOENT);
    json_decref(empty);
    assert_int_equal(store_checkpoint_latest(x->s, &latest, x->alice, "rt3"), 0);
    char want[16];
    snprintf(want, sizeof want, "c%d", STORE_CHECKPOINTS_KEPT + 4);
    assert_string_equal(latest.checkpoint_id, want);
    store_checkpoint_clear(&latest);
    store_checkpoint *list;
    size_t n;
    assert_int_equal(store_checkpoint_list(x->s, &list, &n, x->alice, "rt3", want, 1000), 0);
    assert_int_equal(n, STORE_CHECKPOINTS_KEPT - 1); /* older ones were pruned */
    for (size_t i = 0; i < n; i++)
        store_checkpoint_clear(&list[i]);
    free(list);
    store_receipt rc = {.output_bytes = 3};
    snprintf(rc.run_id, sizeof rc.run_id, "rc1");
    snprintf(rc.tool_call_id, sizeof rc.tool_call_id, "call_1");
    snprintf(rc.tool_name, sizeof rc.tool_name, "bash");
    snprintf(rc.status, sizeof rc.status, "success");
    assert_int_equal(store_receipt_add(x->s, &rc), 0);
    assert_int_equal(store_receipt_add(x->s, &rc), FAWN_EEXIST);
    /* A receipt may keep evidence, a JSON object; anything else is refused. */
    snprintf(rc.tool_call_id, sizeof rc.tool_call_id, "call_2");
    rc.evidence = "{\"final_url\":\"https://example.org/\"}";
    assert_int_equal(store_receipt_add(x->s, &rc), 0);
    snprintf(rc.tool_call_id, sizeof rc.tool_call_id, "call_3");
    rc.evidence = "{not json";
    assert_int_not_equal(store_receipt_add(x->s, &rc), 0);
    store_receipt *rcs;
    assert_int_equal(store_receipt_list(x->s, &rcs, &n, "rc1"), 0);
    assert_int_equal(n, 2);
    assert_string_equal(rcs[0].tool_name, "bash");
    assert_null(rcs[0].evidence);
    assert_string_equal(rcs[1].evidence, "{\"final_url\":\"https://example.org/\"}");
    store_receipts_free(rcs, n);
    /* Deleting the thread deletes its runs, events, checkpoints and receipts. */
    assert_int_equal(store_thread_delete(x->s, x->alice, "rt3"), 0);
    store_run got;
    assert_int_equal(store_run_get(x->s, &got, x->alice, "rt3", "rc1"), FAWN_ENOENT);
    assert_int_equal(store_receipt_list(x->s, &rcs, &n, "rc1"), 0);
    assert_int_equal(n, 0);
    store_receipts_free(rcs, n);
    make_thread(x, x->alice, "rt3");
    assert_int_equal(store_checkpoint_latest(x->s, &latest, x->alice, "rt3"), FAWN_ENOENT);
}

/* ---- where a message came into a lineage ---- */

/* Writes checkpoint id (after parent, by run) whose messages are the JSON
 * list text msgs. */
static void put_link(fx *x, const char *thread, const char *id, const char *parent, const char *run,
                     const char *msgs) {
    store_checkpoint c = {0};
    snprintf(c.checkpoint_id, sizeof c.checkpoint_id, "%s", id);
    snprintf(c.parent_id, sizeof c.parent_id, "%s", parent);
    snprintf(c.run_id, sizeof c.run_id, "%s", run);
    json_t *values = json_pack("{s:o}", "messages", json_loads(msgs, 0, NULL));
    assert_non_null(values);
    assert_int_equal(store_checkpoint_put(x->s, NULL, x->alice, thread, &c, values), 0);
    json_decref(values);
}

/* The checkpoint where message came into head's lineage: its id, parent
 * and run as "id<parent:run". */
static int origin_of(fx *x, char out[256], const char *head, const char *message) {
    store_checkpoint first;
    memset(&first, 0xA5, sizeof first);
    int r = store_checkpoint_origin(x->s, &first, x->alice, "lin", head, message);
    snprintf(out, 256, "%s<%s:%s", first.checkpoint_id, first.parent_id, first.run_id);
    if (r < 0)
        assert_null(first.state);
    store_checkpoint_clear(&first);
    return r;
}

#define H1 "{\"type\":\"human\",\"id\":\"h1\",\"content\":\"one\"}"
#define A1 "{\"type\":\"ai\",\"id\":\"a1\",\"content\":\"first\"}"
#define H2 "{\"type\":\"human\",\"id\":\"h2\",\"content\":\"two\"}"
#define A2 "{\"type\":\"ai\",\"id\":\"a2\",\"content\":\"second\"}"
#define A2B "{\"type\":\"ai\",\"id\":\"a2b\",\"content\":\"second, again\"}"

/* A thread forked at c2 (c3-c4 the old turn, c5-c6 its regenerate): a
 * message's origin is found on the head's own lineage, never on a
 * sibling's; by id, whatever its content became; only for the owner's
 * thread; and a lineage that breaks off or loops is refused. */
static void message_origins_follow_the_lineage(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "lin");
    make_thread(x, x->alice, "other");
    put_link(x, "lin", "root", "", "r1", "[]");
    put_link(x, "lin", "c1", "root", "r1", "[" H1 "]");
    put_link(x, "lin", "c2", "c1", "r1", "[" H1 "," A1 "]");
    put_link(x, "lin", "c3", "c2", "r2", "[" H1 "," A1 "," H2 "]");
    put_link(x, "lin", "c4", "c3", "r2", "[" H1 "," A1 "," H2 "," A2 "]");
    put_link(x, "lin", "c5", "c2", "r3", "[" H1 "," A1 "," H2 "]");
    put_link(x, "lin", "c6", "c5", "r3", "[" H1 "," A1 "," H2 "," A2B "]");
    char got[256];
    assert_int_equal(origin_of(x, got, "c6", "h2"), 0);
    assert_string_equal(got, "c5<c2:r3");
    assert_int_equal(origin_of(x, got, "c4", "h2"), 0);
    assert_string_equal(got, "c3<c2:r2");
    assert_int_equal(origin_of(x, got, "c6", "a2b"), 0);
    assert_string_equal(got, "c6<c5:r3");
    assert_int_equal(origin_of(x, got, "c6", "h1"), 0);
    assert_string_equal(got, "c1<root:r1");
    /* A message of the other branch, or of none, is not the head's. */
    assert_int_equal(origin_of(x, got, "c6", "a2"), FAWN_ENOENT);
    assert_int_equal(origin_of(x, got, "c6", "nothing"), FAWN_ENOENT);
    assert_int_equal(origin_of(x, got, "missing", "h1"), FAWN_ENOENT);
    /* A message replaced (same id, new content) is still the same message. */
    put_link(x, "lin", "c7", "c6", "",
             "[" H1 "," A1 ",{\"type\":\"human\",\"id\":\"h2\",\"content\":\"2\"}," A2B "]");
    assert_int_equal(origin_of(x, got, "c7", "h2"), 0);
    assert_string_equal(got, "c5<c2:r3");
    /* Only the owner's thread's checkpoints are found. */
    store_checkpoint c;
    assert_int_equal(store_checkpoint_get(x->s, &c, x->alice, "lin", "c6"), 0);
    assert_string_equal(c.parent_id, "c5");
    store_checkpoint_clear(&c);
    const struct {
        int64_t owner;
        const char *thread, *id;
    } none[] = {{x->bob, "lin", "c6"}, {x->alice, "other", "c6"},  {x->alice, "lin", "c66"},
                {x->alice, "lin", ""}, {x->alice, "bad/id", "c6"}, {x->alice, "lin", NULL}};
    for (size_t i = 0; i < sizeof none / sizeof none[0]; i++) {
        memset(&c, 0xA5, sizeof c);
        assert_int_equal(store_checkpoint_get(x->s, &c, none[i].owner, none[i].thread, none[i].id),
                         FAWN_ENOENT);
        assert_null(c.state);
        store_checkpoint_clear(&c);
        memset(&c, 0xA5, sizeof c);
        assert_int_equal(
            store_checkpoint_origin(x->s, &c, none[i].owner, none[i].thread, "c6", "h1") == 0,
            none[i].owner == x->alice && !strcmp(none[i].thread, "lin"));
        store_checkpoint_clear(&c);
    }
    /* A parent no longer kept: where the message came in is unknown. */
    put_link(x, "lin", "g1", "gone", "r4", "[{\"type\":\"human\",\"id\":\"g\",\"content\":\"g\"}]");
    put_link(x, "lin", "g2", "g1", "r4", "[{\"type\":\"human\",\"id\":\"g\",\"content\":\"g\"}]");
    assert_int_equal(origin_of(x, got, "g2", "g"), FAWN_ENOENT);
    /* A lineage that loops is walked no further than the checkpoints kept. */
    put_link(x, "lin", "y1", "y2", "r5", "[{\"type\":\"human\",\"id\":\"y\",\"content\":\"y\"}]");
    put_link(x, "lin", "y2", "y1", "r5", "[{\"type\":\"human\",\"id\":\"y\",\"content\":\"y\"}]");
    assert_int_equal(origin_of(x, got, "y2", "y"), FAWN_EIO);
}

/* ---- thread state: each message stored once ---- */

/* How many message rows the thread has, and their bytes. */
static int64_t message_rows(fx *x, int64_t owner, const char *thread, int64_t *bytes) {
    sdb *db = sq_read_begin(x->s);
    sdb_stmt *st;
    assert_int_equal(sdb_prepare(db, &st,
                                 "SELECT count(*), coalesce(sum(bytes), 0) FROM "
                                 "thread_messages WHERE owner_id = ?1 AND thread_id = ?2"),
                     SDB_OK);
    sdb_bind_int64(st, 1, owner);
    sdb_bind_text(st, 2, thread);
    assert_int_equal(sdb_step(st), SDB_ROW);
    int64_t n = sdb_column_int64(st, 0);
    if (bytes)
        *bytes = sdb_column_int64(st, 1);
    sdb_finalize(st);
    sq_read_end(x->s, db);
    return n;
}

/* A message of about size bytes. */
static json_t *big_message(const char *type, int i, size_t size) {
    char *text = malloc(size + 1);
    memset(text, 'a' + i % 26, size);
    text[size] = '\0';
    char id[32];
    snprintf(id, sizeof id, "m%d", i);
    json_t *m = json_pack("{s:s, s:s, s:s}", "type", type, "id", id, "content", text);
    free(text);
    return m;
}

/* Writes values as a checkpoint named id; *ref (may be NULL) gets its reference. */
static void put_state(fx *x, int64_t owner, const char *thread, const char *id,
                      const json_t *values, char **ref) {
    store_checkpoint c = {0};
    snprintf(c.checkpoint_id, sizeof c.checkpoint_id, "%s", id);
    assert_int_equal(store_checkpoint_put(x->s, ref, owner, thread, &c, values), 0);
}

/* The state ref names, within max bytes of messages, parsed. */
static json_t *read_state(fx *x, int64_t owner, const char *thread, const char *ref, size_t max,
                          size_t *omitted) {
    char *text;
    assert_int_equal(store_state_read(x->s, &text, omitted, owner, thread, ref, max), 0);
    json_t *v = json_loads(text, 0, NULL);
    assert_non_null(v);
    free(text);
    return v;
}

/* A conversation that grows by a large message per checkpoint stores each
 * message once: the rows hold about the bytes of its messages, not the
 * sum over checkpoints, and each state reads back whole or, bounded, its
 * newest messages. */
static void checkpoints_store_each_message_once(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "once");
    json_t *values = json_pack("{s:[], s:s, s:[]}", "messages", "title", "t", "artifacts");
    json_t *msgs = json_object_get(values, "messages");
    enum { STEPS = 40, SIZE = 20000 };
    size_t message_bytes = 0;
    char *first_ref = NULL, *ref = NULL;
    for (int i = 0; i < STEPS; i++) {
        json_array_append_new(msgs, big_message(i % 2 ? "tool" : "ai", i, SIZE));
        char *text = json_dumps(json_array_get(msgs, i), JSON_COMPACT);
        message_bytes += strlen(text);
        free(text);
        char id[16];
        snprintf(id, sizeof id, "o%d", i);
        free(ref);
        put_state(x, x->alice, "once", id, values, &ref);
        if (i == 0)
            first_ref = strdup(ref);
    }
    int64_t bytes;
    assert_int_equal(message_rows(x, x->alice, "once", &bytes), STEPS);
    assert_int_equal((size_t)bytes, message_bytes);
    /* A reference is a few bytes: values and one span. */
    assert_true(strlen(ref) < 128);
    size_t omitted;
    json_t *whole = read_state(x, x->alice, "once", ref, SIZE_MAX, &omitted);
    assert_int_equal(omitted, 0);
    assert_true(json_equal(whole, values));
    json_decref(whole);
    json_t *early = read_state(x, x->alice, "once", first_ref, SIZE_MAX, &omitted);
    assert_int_equal(json_array_size(json_object_get(early, "messages")), 1);
    json_decref(early);
    /* Bounded: the newest five fit, the 35 older ones are counted. */
    json_t *newest = read_state(x, x->alice, "once", ref, 5 * (SIZE + 64), &omitted);
    assert_int_equal(omitted, STEPS - 5);
    assert_int_equal(json_integer_value(json_object_get(newest, "messages_omitted")), STEPS - 5);
    assert_int_equal(json_array_size(json_object_get(newest, "messages")), 5);
    assert_true(json_equal(json_array_get(json_object_get(newest, "messages"), 4),
                           json_array_get(msgs, STEPS - 1)));
    assert_string_equal(json_string_value(json_object_get(newest, "title")), "t");
    json_decref(newest);
    store_checkpoint latest;
    assert_int_equal(store_checkpoint_latest(x->s, &latest, x->alice, "once"), 0);
    assert_string_equal(latest.state, ref);
    store_checkpoint_clear(&latest);
    free(first_ref);
    free(ref);
    json_decref(values);
}

/* A message replaced (POST state) is a new row: the new state lists it in
 * its place, an older state still reads the old one until the last
 * checkpoint listing it is pruned, and then its row goes. Deleting the
 * thread deletes every row. */
static void replaced_messages_stay_until_no_checkpoint_lists_them(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "edit");
    json_t *values = json_pack("{s:[o, o, o]}", "messages", big_message("human", 0, 10),
                               big_message("ai", 1, 10), big_message("human", 2, 10));
    char *before = NULL, *after = NULL;
    put_state(x, x->alice, "edit", "e0", values, &before);
    json_t *msgs = json_object_get(values, "messages");
    json_object_set_new(json_array_get(msgs, 1), "content", json_string("edited"));
    put_state(x, x->alice, "edit", "e1", values, &after);
    assert_int_equal(message_rows(x, x->alice, "edit", NULL), 4);
    size_t omitted;
    json_t *now = read_state(x, x->alice, "edit", after, SIZE_MAX, &omitted);
    assert_true(json_equal(now, values));
    json_decref(now);
    json_t *then = read_state(x, x->alice, "edit", before, SIZE_MAX, &omitted);
    assert_string_equal(json_string_value(json_object_get(
                            json_array_get(json_object_get(then, "messages"), 1), "content")),
                        "bbbbbbbbbb");
    json_decref(then);
    /* The same message twice in one state is one row, listed twice. */
    json_array_append(msgs, json_array_get(msgs, 0));
    for (int i = 2; i < STORE_CHECKPOINTS_KEPT + 2; i++) {
        char id[16];
        snprintf(id, sizeof id, "e%d", i);
        put_state(x, x->alice, "edit", id, values, NULL);
    }
    /* e0, the only one listing the message before its edit, was pruned. */
    assert_int_equal(message_rows(x, x->alice, "edit", NULL), 3);
    store_checkpoint latest;
    assert_int_equal(store_checkpoint_latest(x->s, &latest, x->alice, "edit"), 0);
    now = read_state(x, x->alice, "edit", latest.state, SIZE_MAX, &omitted);
    assert_true(json_equal(now, values));
    assert_int_equal(json_array_size(json_object_get(now, "messages")), 4);
    json_decref(now);
    store_checkpoint_clear(&latest);
    /* Values of another shape are refused. */
    json_t *bad = json_pack("{s:s}", "messages", "not a list");
    store_checkpoint c = {.checkpoint_id = "bad"};
    char *ref = (char *)"poison";
    assert_int_equal(store_checkpoint_put(x->s, &ref, x->alice, "edit", &c, bad), FAWN_EINVAL);
    assert_null(ref);
    json_decref(bad);
    assert_int_equal(store_thread_delete(x->s, x->alice, "edit"), 0);
    assert_int_equal(message_rows(x, x->alice, "edit", NULL), 0);
    free(before);
    free(after);
    json_decref(values);
}

/* The two states a schema 5 database holds whole, oldest first. */
static const char *const v5_states[] = {
    "{\"messages\":[{\"type\":\"human\",\"content\":\"hi\",\"id\":\"a\"}],\"title\":\"x\"}",
    "{\"messages\":[{\"type\":\"human\",\"content\":\"hi\",\"id\":\"a\"},"
    "{\"type\":\"ai\",\"content\":\"hello\",\"id\":\"b\"}],\"title\":\"x\",\"artifacts\":[]}",
};

/* A database at path as schema 5 left it: a user's thread t5 with two
 * checkpoints and a run r5 whose values events hold whole states. */
static int64_t make_v5_database(const char *path) {
    store *s;
    assert_int_equal(store_open(&s, path), 0);
    store_user u;
    assert_int_equal(store_user_create(s, &u, "old", "h", "user"), 0);
    store_thread t;
    bool existed;
    assert_int_equal(store_thread_create(s, &t, &existed, u.id, "t5", NULL), 0);
    store_thread_clear(&t);
    store_run run = {
        .owner_id = u.id, .run_id = "r5", .thread_id = "t5", .assistant_id = "lead_agent"};
    assert_int_equal(store_run_create(s, &run), 0);
    store_close(s);
    char sql[2048];
    snprintf(sql, sizeof sql,
             "DROP TABLE memory_facts;"
             "DROP TABLE thread_messages; ALTER TABLE checkpoints DROP COLUMN message_spans;"
             "DROP TABLE skill_states;"
             "ALTER TABLE runs DROP COLUMN token_usage;"
             "ALTER TABLE receipts DROP COLUMN evidence;"
             "DROP TABLE scheduled_task_runs; DROP TABLE scheduled_tasks;"
             "DROP TABLE mcp_tools; DROP TABLE mcp_refresh_tokens;"
             "DROP TRIGGER auth_user_changed; DROP TRIGGER auth_user_deleted;"
             "DROP TRIGGER auth_token_changed; DROP TRIGGER auth_token_deleted;"
             "DROP TABLE auth_generation;"
             "DROP TABLE channel_bindings; DROP TABLE channel_connect_codes;"
             "DROP TABLE channel_threads; DROP TABLE channel_inbox; DROP TABLE channel_settings;"
             "DROP INDEX runs_one_active_per_thread; DROP INDEX runs_by_gateway;"
             "ALTER TABLE runs DROP COLUMN gateway_id; ALTER TABLE runs DROP COLUMN "
             "cancel_requested; DROP TABLE gateways;"
             "DROP TABLE sandbox_owners;"
             "DROP TABLE signin_attempts; DROP TABLE auth_watchers;"
             "PRAGMA user_version = 5;"
             "INSERT INTO checkpoints VALUES (%" PRId64 ", 't5', 'c1', '', 'r5', 1, '%s', '{}', 1);"
             "INSERT INTO checkpoints VALUES (%" PRId64
             ", 't5', 'c2', 'c1', 'r5', 2, '%s', '{}', 2);"
             "INSERT INTO run_events VALUES ('r5', 1, 'metadata', '{\"run_id\":\"r5\"}');"
             "INSERT INTO run_events VALUES ('r5', 2, 'values', '%s');"
             "INSERT INTO run_events VALUES ('r5', 3, 'values', 'null');",
             u.id, v5_states[0], u.id, v5_states[1], v5_states[1]);
    sqlite3 *raw;
    assert_int_equal(sqlite3_open(path, &raw), SQLITE_OK);
    assert_int_equal(sqlite3_exec(raw, sql, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(raw);
    return u.id;
}

/* A database of schema 5 (whole states in checkpoints and values events)
 * opened by this fawn: its states become message rows and references that
 * read back the same. */
static void migration_moves_whole_states_into_message_rows(void **state) {
    fx *x = *state;
    char path[160];
    snprintf(path, sizeof path, "%s/old/fawn.db", x->dir);
    int64_t owner = make_v5_database(path);
    store *s;
    assert_int_equal(store_open(&s, path), 0);
    int v;
    assert_int_equal(store_schema_version(s, &v), 0);
    assert_int_equal(v, 18);
    store_checkpoint *list;
    size_t n, omitted;
    assert_int_equal(store_checkpoint_list(s, &list, &n, owner, "t5", NULL, 10), 0);
    assert_int_equal(n, 2);
    for (size_t i = 0; i < n; i++) {
        char *text;
        assert_int_equal(store_state_read(s, &text, &omitted, owner, "t5", list[i].state, SIZE_MAX),
                         0);
        json_t *got = json_loads(text, 0, NULL), *want = json_loads(v5_states[1 - i], 0, NULL);
        assert_true(json_equal(got, want));
        json_decref(got);
        json_decref(want);
        free(text);
        store_checkpoint_clear(&list[i]);
    }
    free(list);
    /* The rows it made carry the run and time of the oldest checkpoint
     * that lists each. */
    store_message *m;
    bool more;
    assert_int_equal(store_message_page(s, &m, &n, &more, owner, "t5", 0, 10, SIZE_MAX), 0);
    assert_int_equal(n, 2);
    assert_string_equal(m[0].run_id, "r5");
    assert_int_equal(m[0].created_at_ms, 1);
    assert_int_equal(m[1].seq, 2);
    assert_int_equal(m[1].created_at_ms, 2);
    for (size_t i = 0; i < n; i++)
        store_message_clear(&m[i]);
    free(m);
    store_event *ev;
    assert_int_equal(store_event_read(s, &ev, &n, "r5", 0, 10), 0);
    assert_int_equal(n, 3);
    assert_string_equal(ev[0].data, "{\"run_id\":\"r5\"}");
    assert_string_equal(ev[1].data,
                        "{\"values\":{\"title\":\"x\",\"artifacts\":[]},\"messages\":[[1,2]]}");
    assert_string_equal(ev[2].data, "null"); /* not a state: left as it was */
    for (size_t i = 0; i < n; i++)
        free(ev[i].data);
    free(ev);
    store_close(s);
}

/* Fills an out-parameter with bytes no store function would write, as an
 * uninitialized stack variable may hold. */
#define POISON(v) memset(&(v), 0xA5, sizeof(v))

/* Every out-parameter is set on every failing path too, so that a caller
 * that clears what it got (store_thread_clear, store_run_clear, ...) never
 * frees garbage: another owner's ids, missing ids and invalid ids. */
static void failures_leave_out_parameters_defined(void **state) {
    fx *x = *state;
    make_thread(x, x->alice, "mine");
    store_thread t;
    const char *ids[] = {"mine", "missing", "bad/id"};
    for (size_t i = 0; i < 3; i++) {
        POISON(t);
        assert_int_equal(store_thread_get(x->s, &t, x->bob, ids[i]), FAWN_ENOENT);
        assert_null(t.metadata);
        store_thread_clear(&t);
    }
    bool existed;
    POISON(t);
    POISON(existed);
    assert_int_equal(store_thread_create(x->s, &t, &existed, x->bob, "bad/id", NULL), FAWN_EINVAL);
    assert_null(t.metadata);
    assert_false(existed);
    store_run run;
    POISON(run);
    assert_int_equal(store_run_get(x->s, &run, x->bob, "mine", "r-none"), FAWN_ENOENT);
    store_run_clear(&run);
    store_checkpoint c;
    POISON(c);
    assert_int_equal(store_checkpoint_latest(x->s, &c, x->bob, "mine"), FAWN_ENOENT);
    assert_null(c.state);
    store_checkpoint_clear(&c);
    store_user u;
    POISON(u);
    assert_int_equal(store_user_get_by_name(x->s, &u, "nobody"), FAWN_ENOENT);
    assert_int_equal(u.id, 0);
    POISON(u);
    assert_int_equal(store_user_create(x->s, &u, "", "h", "user"), FAWN_EINVAL);
    assert_int_equal(u.id, 0);
    int64_t token_id;
    POISON(u);
    POISON(token_id);
    assert_int_not_equal(store_token_authenticate(x->s, &u, &token_id, "00"), 0);
    assert_int_equal(token_id, 0);
    assert_int_equal(u.id, 0);
    store_sandbox sb;
    POISON(sb);
    assert_int_equal(store_sandbox_get(x->s, &sb, "0000000000000000"), FAWN_ENOENT);
    assert_string_equal(sb.sandbox_id, "");
}

static void mode_is(const char *path, mode_t want) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    if ((st.st_mode & 07777) != want)
        fail_msg("%s: mode %04o, want %04o", path, (unsigned)(st.st_mode & 07777), (unsigned)want);
}

/* Skill states: the last one set for a name wins; a bad name is refused. */
static void skill_states_keep_the_last_setting(void **state) {
    fx *x = *state;
    json_t *states = (json_t *)"poison";
    assert_int_equal(store_skill_states(x->s, &states), 0);
    assert_int_equal(json_object_size(states), 0);
    json_decref(states);
    assert_int_equal(store_skill_state_set(x->s, "pdf", false), 0);
    assert_int_equal(store_skill_state_set(x->s, "web", true), 0);
    assert_int_equal(store_skill_state_set(x->s, "web", false), 0);
    assert_int_equal(store_skill_state_set(x->s, "pdf", true), 0);
    char longest[STORE_SKILL_NAME_MAX + 2];
    memset(longest, 'a', sizeof longest - 1);
    longest[sizeof longest - 1] = '\0';
    assert_int_equal(store_skill_state_set(x->s, longest, true), FAWN_EINVAL);
    assert_int_equal(store_skill_state_set(x->s, "", true), FAWN_EINVAL);
    assert_int_equal(store_skill_states(x->s, &states), 0);
    char *dump = json_dumps(states, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(dump, "{\"pdf\":true,\"web\":false}");
    free(dump);
    json_decref(states);
}

/* The database and its journal files are 0600 whatever the umask and
 * whatever they were; a directory other users may write to is refused. */
static void database_is_private(void **state) {
    fx *x = *state;
    char dir[128], path[160], wal[168];
    snprintf(dir, sizeof dir, "%s/home", x->dir);
    snprintf(path, sizeof path, "%s/fawn.db", dir);
    snprintf(wal, sizeof wal, "%s-wal", path);
    mode_t old_mask = umask(0);
    assert_int_equal(mkdir(dir, 0755), 0);
    store *s = NULL;
    assert_int_equal(store_open(&s, path), 0);
    store_user u;
    assert_int_equal(store_user_create(s, &u, "carol", "hash-c", "user"), 0);
    mode_is(path, 0600);
    mode_is(wal, 0600);
    store_close(s);
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(store_open(&s, path), 0);
    mode_is(path, 0600);
    store_close(s);
    static const mode_t open_to_others[] = {0777, 0775, 0757, 01777};
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(chmod(dir, open_to_others[i]), 0);
        s = NULL;
        assert_int_equal(store_open(&s, path), FAWN_EPERM);
        assert_null(s);
        assert_non_null(strstr(fawn_errmsg(), "writable by other users"));
    }
    umask(old_mask);
}

static store_fact fact_of(const char *content, const char *category, double confidence) {
    store_fact f = {.confidence = confidence};
    snprintf(f.content, sizeof f.content, "%s", content);
    snprintf(f.category, sizeof f.category, "%s", category);
    snprintf(f.source, sizeof f.source, "manual");
    return f;
}

/* Facts are the owner's alone: another owner neither lists, edits nor
 * deletes them by id; duplicates (case and spaces aside) and a full memory
 * are refused. */
static void memory_facts_are_owner_scoped_and_bounded(void **state) {
    fx *x = *state;
    store_fact f = fact_of("Prefers  Rust over Go", "preference", 0.9), got;
    assert_int_equal(store_fact_add(x->s, &got, x->alice, &f, 3), 0);
    assert_memory_equal(got.id, "fact_", 5);
    assert_int_equal(strlen(got.id), 37);
    assert_string_equal(got.source, "manual");
    assert_true(got.created_at_ms > 0);
    store_fact dup = fact_of(" prefers rust OVER go ", "context", 0.5);
    assert_int_equal(store_fact_add(x->s, NULL, x->alice, &dup, 3), FAWN_EEXIST);
    assert_int_equal(store_fact_add(x->s, NULL, x->bob, &dup, 3), 0); /* bob's own */
    store_fact more = fact_of("Works on fawn", "context", 0.7);
    assert_int_equal(store_fact_add(x->s, NULL, x->alice, &more, 3), 0);
    more = fact_of("Lives in Lyon", "personal", 0.6);
    assert_int_equal(store_fact_add(x->s, NULL, x->alice, &more, 3), 0);
    more = fact_of("A fourth fact", "context", 0.6);
    assert_int_equal(store_fact_add(x->s, NULL, x->alice, &more, 3), FAWN_E2BIG);

    store_fact *list;
    size_t n;
    assert_int_equal(store_fact_list(x->s, &list, &n, x->alice), 0);
    assert_int_equal(n, 3);
    assert_string_equal(list[0].content, "Prefers  Rust over Go");
    free(list);

    /* Bob knows alice's id: it is not his. */
    store_fact out;
    assert_int_equal(store_fact_update(x->s, &out, x->bob, got.id, "mine now", NULL, -1),
                     FAWN_ENOENT);
    assert_string_equal(out.id, "");
    assert_int_equal(store_fact_delete(x->s, x->bob, got.id), FAWN_ENOENT);
    assert_int_equal(store_fact_update(x->s, &out, x->alice, got.id, NULL, "knowledge", 0.4), 0);
    assert_string_equal(out.content, "Prefers  Rust over Go");
    assert_string_equal(out.category, "knowledge");
    assert_true(out.confidence > 0.39 && out.confidence < 0.41);
    assert_int_equal(store_fact_update(x->s, NULL, x->alice, got.id, "works ON fawn", NULL, -1),
                     FAWN_EEXIST);
    assert_int_equal(store_fact_update(x->s, NULL, x->alice, got.id, NULL, "Bad Category", -1),
                     FAWN_EINVAL);
    assert_int_equal(store_fact_update(x->s, NULL, x->alice, got.id, NULL, NULL, 1.5), FAWN_EINVAL);
    assert_int_equal(store_fact_delete(x->s, x->alice, got.id), 0);
    assert_int_equal(store_fact_list(x->s, &list, &n, x->bob), 0);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].content, " prefers rust OVER go ");
    free(list);
    assert_int_equal(store_fact_replace(x->s, x->bob, NULL, 0, 3), 0);
    assert_int_equal(store_fact_list(x->s, &list, &n, x->bob), 0);
    assert_int_equal(n, 0);
    free(list);
}

/* Invalid facts are refused before anything is stored. */
static void memory_facts_are_validated(void **state) {
    fx *x = *state;
    static const char *const bad_contents[] = {"", "   \t\n", "\xff\xfe invalid"};
    for (size_t i = 0; i < ARRAY_LEN(bad_contents); i++) {
        store_fact f = fact_of(bad_contents[i], "context", 0.5);
        assert_int_equal(store_fact_add(x->s, NULL, x->bob, &f, 10), FAWN_EINVAL);
    }
    static const char *const bad_categories[] = {"", "UPPER", "a b", "<script>",
                                                 "abcdefghijklmnopqrstuvwxyz0123456"};
    for (size_t i = 0; i < ARRAY_LEN(bad_categories); i++) {
        store_fact f = fact_of("ok", "context", 0.5);
        memcpy(f.category, bad_categories[i], strlen(bad_categories[i]) + 1);
        assert_int_equal(store_fact_add(x->s, NULL, x->bob, &f, 10), FAWN_EINVAL);
    }
    store_fact f = fact_of("ok", "context", -0.1);
    assert_int_equal(store_fact_add(x->s, NULL, x->bob, &f, 10), FAWN_EINVAL);
    f.confidence = 0.0 / 0.0;
    assert_int_equal(store_fact_add(x->s, NULL, x->bob, &f, 10), FAWN_EINVAL);
    store_fact *list;
    size_t n;
    assert_int_equal(store_fact_list(x->s, &list, &n, x->bob), 0);
    assert_int_equal(n, 0);
    free(list);
}

/* An import replaces the owner's facts all at once, or not at all. */
static void memory_import_is_all_or_nothing(void **state) {
    fx *x = *state;
    store_fact keep = fact_of("Kept when an import fails", "context", 0.5);
    assert_int_equal(store_fact_add(x->s, NULL, x->bob, &keep, 10), 0);
    store_fact facts[3] = {fact_of("one", "context", 0.5), fact_of("two", "goal", 0.6),
                           fact_of("ONE", "context", 0.5)};
    assert_int_equal(store_fact_replace(x->s, x->bob, facts, 3, 10), FAWN_EEXIST);
    assert_int_equal(store_fact_replace(x->s, x->bob, facts, 3, 2), FAWN_E2BIG);
    facts[2] = fact_of("three", "Not Valid", 0.5);
    assert_int_equal(store_fact_replace(x->s, x->bob, facts, 3, 10), FAWN_EINVAL);
    store_fact *list;
    size_t n;
    assert_int_equal(store_fact_list(x->s, &list, &n, x->bob), 0);
    assert_int_equal(n, 1);
    assert_string_equal(list[0].content, "Kept when an import fails");
    free(list);
    facts[2] = fact_of("three", "context", 0.5);
    facts[0].created_at_ms = 1000;
    assert_int_equal(store_fact_replace(x->s, x->bob, facts, 3, 10), 0);
    assert_int_equal(store_fact_list(x->s, &list, &n, x->bob), 0);
    assert_int_equal(n, 3);
    assert_string_equal(list[0].content, "one");
    assert_int_equal(list[0].created_at_ms, 1000);
    free(list);
    assert_int_equal(store_fact_replace(x->s, x->bob, NULL, 0, 10), 0);
}

/* ---- scheduled tasks ---- */

static void make_task(fx *x, int64_t owner, const char *id, int64_t next_ms) {
    store_task t = {.owner_id = owner,
                    .title = "Daily digest",
                    .prompt = "Summarize my day",
                    .next_run_at_ms = next_ms};
    snprintf(t.id, sizeof t.id, "%s", id);
    snprintf(t.schedule_type, sizeof t.schedule_type, "cron");
    snprintf(t.schedule_spec, sizeof t.schedule_spec, "* * * * *");
    snprintf(t.timezone, sizeof t.timezone, "UTC");
    snprintf(t.context_mode, sizeof t.context_mode, "fresh_thread_per_run");
    snprintf(t.status, sizeof t.status, "enabled");
    assert_int_equal(store_task_create(x->s, &t), 0);
}

static store_claim_req claim_req(const char *task, const char *trigger, const char *claim,
                                 const char *lease_owner, int64_t due, int64_t now) {
    return (store_claim_req){.task_id = task,
                             .trigger = trigger,
                             .due_ms = due,
                             .next_ms = due + 60000,
                             .claim_id = claim,
                             .thread_id = "sth",
                             .lease_owner = lease_owner,
                             .now_ms = now,
                             .lease_ms = 120000,
                             .max_active = 3};
}

static void tasks_are_owner_scoped_and_checked(void **state) {
    fx *x = *state;
    make_task(x, x->alice, "task-own", 5000);
    store_task t;
    assert_int_equal(store_task_get(x->s, &t, x->bob, "task-own"), FAWN_ENOENT);
    assert_int_equal(store_task_get(x->s, &t, x->alice, "task-own"), 0);
    assert_string_equal(t.title, "Daily digest");
    assert_true(t.next_run_at_ms == 5000);
    t.owner_id = x->bob; /* bob cannot change or delete alice's task */
    assert_int_equal(store_task_update(x->s, &t), FAWN_ENOENT);
    assert_int_equal(store_task_delete(x->s, x->bob, "task-own"), FAWN_ENOENT);
    t.owner_id = x->alice;
    snprintf(t.status, sizeof t.status, "running");
    assert_int_equal(store_task_update(x->s, &t), FAWN_EINVAL);
    snprintf(t.status, sizeof t.status, "paused");
    free(t.title);
    t.title = strdup("");
    assert_int_equal(store_task_update(x->s, &t), FAWN_EINVAL);
    free(t.title);
    t.title = strdup("\xff\xfe");
    assert_int_equal(store_task_update(x->s, &t), FAWN_EINVAL);
    store_task_clear(&t);
    store_task *list;
    size_t n;
    assert_int_equal(store_task_list(x->s, &list, &n, x->bob, NULL), 0);
    assert_int_equal(n, 0);
    free(list);
    store_task_run *runs;
    assert_int_equal(store_task_run_list(x->s, &runs, &n, x->bob, "task-own", 10, 0), FAWN_ENOENT);
    assert_int_equal(store_task_delete(x->s, x->alice, "task-own"), 0);
}

/* One occurrence, two claimers; the winner dies before starting the run;
 * a later claimer takes the claim over once its lease has expired, finds
 * the run started (or not) and records it once. */
static void claims_run_each_occurrence_once(void **state) {
    fx *x = *state;
    make_task(x, x->alice, "task-c", 1000000);
    enum store_claim how;
    store_task t;
    store_claim_req q = claim_req("task-c", "scheduled", "c1", "g1", 1000000, 1000500);
    assert_int_equal(store_task_claim(x->s, &how, &t, &q), 0);
    assert_int_equal(how, STORE_CLAIM_TAKEN);
    assert_string_equal(t.claim_id, "c1");
    assert_true(t.next_run_at_ms == 1060000);
    store_task_clear(&t);
    q = claim_req("task-c", "scheduled", "c2", "g2", 1000000, 1000600);
    assert_int_equal(store_task_claim(x->s, &how, NULL, &q), 0);
    assert_int_equal(how, STORE_CLAIM_LOST);
    /* leased: not due; the lease expired: due again, as an orphan claim */
    store_task *due;
    size_t n;
    assert_int_equal(store_task_due(x->s, &due, &n, 1070000, 10), 0);
    assert_int_equal(n, 0);
    free(due);
    int64_t later = 1000500 + 120000 + 1;
    assert_int_equal(store_task_due(x->s, &due, &n, later, 10), 0);
    assert_int_equal(n, 1);
    assert_string_equal(due[0].claim_id, "c1");
    store_task_clear(&due[0]);
    free(due);
    assert_int_equal(store_task_reclaim(x->s, "task-c", "c1", "g2", later, 120000), 0);
    assert_int_equal(store_task_reclaim(x->s, "task-c", "c1", "g3", later + 1, 120000),
                     FAWN_ESTALE);
    char run_id[37];
    make_thread(x, x->alice, "sth");
    assert_int_equal(store_task_claim_find_run(x->s, run_id, x->alice, "sth", "c1"), 0);
    assert_string_equal(run_id, "");
    store_run r = {
        .owner_id = x->alice, .metadata = "{\"scheduled_task_run_id\":\"c1\"}", .kwargs = "{}"};
    snprintf(r.run_id, sizeof r.run_id, "sr1");
    snprintf(r.thread_id, sizeof r.thread_id, "sth");
    snprintf(r.assistant_id, sizeof r.assistant_id, "lead_agent");
    assert_int_equal(store_run_create(x->s, &r), 0);
    assert_int_equal(store_task_claim_find_run(x->s, run_id, x->alice, "sth", "c1"), 0);
    assert_string_equal(run_id, "sr1");
    assert_int_equal(store_task_claim_started(x->s, "task-c", "c1", "sr1", later), 0);
    /* the first claimer wakes up: its claim is gone */
    assert_int_equal(store_task_claim_started(x->s, "task-c", "c1", "sr1", later), FAWN_ESTALE);
    assert_int_equal(store_task_get(x->s, &t, x->alice, "task-c"), 0);
    assert_string_equal(t.claim_id, "");
    assert_true(t.run_count == 1);
    assert_string_equal(t.last_run_id, "sr1");
    store_task_clear(&t);
    int64_t active;
    assert_int_equal(store_task_runs_active(x->s, &active), 0);
    assert_true(active == 1);
    /* the next occurrence while that run is active: skipped */
    q = claim_req("task-c", "scheduled", "c3", "g2", 1060000, later + 10);
    assert_int_equal(store_task_claim(x->s, &how, &t, &q), 0);
    assert_int_equal(how, STORE_CLAIM_SKIPPED);
    assert_true(t.next_run_at_ms == 1120000);
    assert_string_equal(t.claim_id, "");
    store_task_clear(&t);
    /* a manual trigger while it is active: refused, nothing recorded */
    q = claim_req("task-c", "manual", "c4", "g2", 0, later + 20);
    assert_int_equal(store_task_claim(x->s, &how, NULL, &q), 0);
    assert_int_equal(how, STORE_CLAIM_ACTIVE);
    assert_int_equal(store_run_set_status(x->s, "sr1", "success", NULL), 0);
    assert_int_equal(store_task_runs_active(x->s, &active), 0);
    assert_true(active == 0);
    q.max_active = 0; /* the budget is full: nothing changes */
    assert_int_equal(store_task_claim(x->s, &how, NULL, &q), 0);
    assert_int_equal(how, STORE_CLAIM_FULL);
    q.max_active = 3;
    q.triggered_by = x->alice;
    assert_int_equal(store_task_claim(x->s, &how, NULL, &q), 0);
    assert_int_equal(how, STORE_CLAIM_TAKEN);
    assert_int_equal(
        store_task_claim_failed(x->s, "task-c", "c4", "no model", "the role changed", later + 30),
        0);
    assert_int_equal(store_task_get(x->s, &t, x->alice, "task-c"), 0);
    assert_string_equal(t.status, "stopped");
    assert_string_equal(t.stop_reason, "the role changed");
    assert_true(t.next_run_at_ms == 1120000);
    /* an occurrence already run is never run again, even if re-armed */
    snprintf(t.status, sizeof t.status, "enabled");
    t.next_run_at_ms = 1000000;
    assert_int_equal(store_task_update(x->s, &t), 0);
    store_task_clear(&t);
    q = claim_req("task-c", "scheduled", "c5", "g2", 1000000, later + 40);
    assert_int_equal(store_task_claim(x->s, &how, &t, &q), 0);
    assert_int_equal(how, STORE_CLAIM_LOST);
    assert_true(t.next_run_at_ms == 1060000);
    store_task_clear(&t);
    store_task_run *runs;
    assert_int_equal(store_task_run_list(x->s, &runs, &n, x->alice, "task-c", 10, 0), 0);
    assert_int_equal(n, 3); /* manual c4 failed, c3 skipped, c1 success */
    assert_string_equal(runs[0].status, "failed");
    assert_string_equal(runs[0].trigger, "manual");
    assert_true(runs[0].triggered_by == x->alice);
    assert_string_equal(runs[1].status, "skipped");
    assert_string_equal(runs[2].status, "success");
    assert_string_equal(runs[2].run_id, "sr1");
    for (size_t i = 0; i < n; i++)
        store_task_run_clear(&runs[i]);
    free(runs);
    assert_int_equal(store_task_delete(x->s, x->alice, "task-c"), 0);
}

typedef struct claimer {
    store *s;
    char claim[16];
    enum store_claim how;
} claimer;

static void *claim_main(void *arg) {
    claimer *c = arg;
    store_claim_req q = claim_req("task-race", "scheduled", c->claim, c->claim, 2000000, 2000001);
    if (store_task_claim(c->s, &c->how, NULL, &q) < 0)
        c->how = (enum store_claim) - 1;
    return NULL;
}

/* Eight claimers, on two handles of the database (two gateways): one
 * takes the occurrence. */
static void concurrent_claimers_take_one(void **state) {
    fx *x = *state;
    make_task(x, x->alice, "task-race", 2000000);
    store *other;
    assert_int_equal(fx_open(x, &other), 0);
    claimer c[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        c[i] = (claimer){.s = i % 2 ? other : x->s};
        snprintf(c[i].claim, sizeof c[i].claim, "race%d", i);
        assert_int_equal(pthread_create(&th[i], NULL, claim_main, &c[i]), 0);
    }
    int taken = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_true(c[i].how == STORE_CLAIM_TAKEN || c[i].how == STORE_CLAIM_LOST);
        taken += c[i].how == STORE_CLAIM_TAKEN;
    }
    assert_int_equal(taken, 1);
    store_close(other);
    assert_int_equal(store_task_delete(x->s, x->alice, "task-race"), 0);
}

/* A gateway taking over an orphaned claim (its lease expired). */
typedef struct reclaimer {
    store *s;
    char owner[16];
    int result;
} reclaimer;

static void *reclaim_main(void *arg) {
    reclaimer *c = arg;
    c->result = store_task_reclaim(c->s, "task-orphan", "orph", c->owner, 3000000, 120000);
    return NULL;
}

/* Eight gateways (threads on two handles) take over the same expired
 * claim at once: one does, the others are told the claim moved on. */
static void concurrent_reclaimers_take_one(void **state) {
    fx *x = *state;
    make_task(x, x->alice, "task-orphan", 2000000);
    store_claim_req q = claim_req("task-orphan", "scheduled", "orph", "dead", 2000000, 2000001);
    enum store_claim how;
    assert_int_equal(store_task_claim(x->s, &how, NULL, &q), 0);
    assert_int_equal(how, STORE_CLAIM_TAKEN);
    store *other;
    assert_int_equal(fx_open(x, &other), 0);
    reclaimer c[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        c[i] = (reclaimer){.s = i % 2 ? other : x->s};
        snprintf(c[i].owner, sizeof c[i].owner, "gw%d", i);
        assert_int_equal(pthread_create(&th[i], NULL, reclaim_main, &c[i]), 0);
    }
    int won = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_true(c[i].result == 0 || c[i].result == FAWN_ESTALE);
        won += c[i].result == 0;
    }
    assert_int_equal(won, 1);
    store_close(other);
}

typedef struct token_maker {
    store *s;
    int64_t user;
    int index, made, refused;
} token_maker;

static void *make_tokens(void *arg) {
    token_maker *m = arg;
    for (int i = 0; i < STORE_TOKENS_PER_USER_MAX / 2; i++) {
        char name[32], hash[65];
        snprintf(name, sizeof name, "t%d-%d", m->index, i);
        snprintf(hash, sizeof hash, "%064d", m->index * 1000 + i);
        store_token t;
        int r = store_token_create(m->s, &t, m->user, name, hash);
        m->made += r == 0;
        m->refused += r == FAWN_E2BIG;
    }
    return NULL;
}

/* Four creators on two handles, each trying half the cap: the count and
 * the insert are one step, so together they never pass the cap. */
static void token_cap_holds_across_gateways(void **state) {
    fx *x = *state;
    store_user u;
    assert_int_equal(store_user_create(x->s, &u, "carol", "hash-c", "user"), 0);
    store *other;
    assert_int_equal(fx_open(x, &other), 0);
    token_maker m[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        m[i] = (token_maker){.s = i % 2 ? other : x->s, .user = u.id, .index = i};
        assert_int_equal(pthread_create(&th[i], NULL, make_tokens, &m[i]), 0);
    }
    int made = 0, refused = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        made += m[i].made;
        refused += m[i].refused;
    }
    assert_int_equal(made, STORE_TOKENS_PER_USER_MAX);
    assert_int_equal(refused, STORE_TOKENS_PER_USER_MAX);
    store_close(other);
}

/* A gateway's sign-in attempts from one address, all at one moment. */
typedef struct signin_racer {
    store *s;
    int admitted, refused, errors;
} signin_racer;

static const store_signin_rule signin_rule = {.attempts = 5, .window_s = 300, .addresses_max = 8};

static void *signin_race_main(void *arg) {
    signin_racer *r = arg;
    for (int i = 0; i < 10; i++) {
        int64_t wait;
        if (store_signin_attempt(r->s, &wait, "192.0.2.7", 1000, &signin_rule) < 0)
            r->errors++;
        else if (wait == 0)
            r->admitted++;
        else
            r->refused++;
    }
    return NULL;
}

/* Attempts racing on two gateways: exactly the rule's number get through,
 * however they interleave; the lockout is seen by both. */
static void signin_attempts_race_across_gateways(void **state) {
    fx *x = *state;
    store *other;
    assert_int_equal(fx_open(x, &other), 0);
    signin_racer r[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        r[i] = (signin_racer){.s = i % 2 ? other : x->s};
        assert_int_equal(pthread_create(&th[i], NULL, signin_race_main, &r[i]), 0);
    }
    int admitted = 0, refused = 0;
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(r[i].errors, 0);
        admitted += r[i].admitted;
        refused += r[i].refused;
    }
    assert_int_equal(admitted, signin_rule.attempts);
    assert_int_equal(refused, 40 - signin_rule.attempts);
    int64_t wait;
    assert_int_equal(store_signin_attempt(x->s, &wait, "192.0.2.7", 1100, &signin_rule), 0);
    assert_int_equal(wait, 200);
    assert_int_equal(store_signin_forget(other, "192.0.2.7"), 0);
    assert_int_equal(store_signin_attempt(x->s, &wait, "192.0.2.7", 1100, &signin_rule), 0);
    assert_int_equal(wait, 0);
    store_close(other);
}

/* The table keeps at most addresses_max rows: over ones go first, then
 * those seen longest ago, a locked-out address last. */
static void signin_addresses_are_bounded(void **state) {
    fx *x = *state;
    int64_t wait, kept;
    for (int i = 0; i < 5; i++)
        assert_int_equal(store_signin_attempt(x->s, &wait, "192.0.2.1", 1000, &signin_rule), 0);
    for (int i = 0; i < 100; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "198.51.100.%d", i);
        assert_int_equal(store_signin_attempt(x->s, &wait, addr, 1001 + i, &signin_rule), 0);
        assert_int_equal(store_signin_addresses(x->s, &kept), 0);
        assert_true(kept <= signin_rule.addresses_max);
    }
    assert_int_equal(store_signin_attempt(x->s, &wait, "192.0.2.1", 1101, &signin_rule), 0);
    assert_int_equal(wait, 199); /* still locked out */
    /* Once the windows and the lockout are over, one attempt clears them. */
    assert_int_equal(store_signin_attempt(x->s, &wait, "203.0.113.1", 2000, &signin_rule), 0);
    assert_int_equal(store_signin_addresses(x->s, &kept), 0);
    assert_int_equal(kept, 1);
    char long_addr[STORE_SIGNIN_ADDRESS_MAX + 2];
    memset(long_addr, '1', sizeof long_addr - 1);
    long_addr[sizeof long_addr - 1] = 0;
    assert_int_equal(store_signin_attempt(x->s, &wait, long_addr, 2000, &signin_rule), FAWN_EINVAL);
    assert_int_equal(store_signin_forget(x->s, ""), FAWN_EINVAL);
}

/* A gateway receiving (or claiming) one IM event. */
typedef struct inbox_racer {
    store *s;
    int64_t seq; /* 0: deliver the event; else claim this item */
    int result;
    bool won;
} inbox_racer;

static void *inbox_race_main(void *arg) {
    inbox_racer *c = arg;
    if (c->seq == 0) {
        store_ch_inbox_req q = {.provider = "feishu",
                                .event_id = "ev-race",
                                .chat_key = "chat-race",
                                .message = "{\"text\":\"hi\"}",
                                .queue = true,
                                .max_queued = 8,
                                .now_ms = 1000};
        enum store_ch_inbox_add how;
        c->result = store_ch_inbox_add(c->s, &how, &q);
        c->won = c->result == 0 && how == STORE_CH_ADDED;
    } else {
        c->result = store_ch_inbox_claim(c->s, &c->won, c->seq);
    }
    return NULL;
}

/* Runs eight racers on two handles; answers how many won. */
static int inbox_race(fx *x, store *other, int64_t seq) {
    inbox_racer c[8];
    pthread_t th[8];
    for (int i = 0; i < 8; i++) {
        c[i] = (inbox_racer){.s = i % 2 ? other : x->s, .seq = seq};
        assert_int_equal(pthread_create(&th[i], NULL, inbox_race_main, &c[i]), 0);
    }
    int won = 0;
    for (int i = 0; i < 8; i++) {
        pthread_join(th[i], NULL);
        assert_int_equal(c[i].result, 0);
        won += c[i].won;
    }
    return won;
}

/* One IM event delivered to eight gateways at once is queued once, and
 * the queued item is claimed by one of eight claimers. */
static void inbox_events_are_queued_and_claimed_once(void **state) {
    fx *x = *state;
    store *other;
    assert_int_equal(fx_open(x, &other), 0);
    assert_int_equal(inbox_race(x, other, 0), 1);
    store_ch_item *items;
    size_t n;
    assert_int_equal(store_ch_inbox_list(x->s, &items, &n, "queued", 10), 0);
    assert_int_equal(n, 1);
    int64_t seq = items[0].seq;
    store_ch_item_clear(&items[0]);
    free(items);
    assert_int_equal(inbox_race(x, other, seq), 1);
    assert_int_equal(store_ch_inbox_list(x->s, &items, &n, "claimed", 10), 0);
    assert_int_equal(n, 1);
    assert_int_equal(items[0].seq, seq);
    store_ch_item_clear(&items[0]);
    free(items);
    assert_int_equal(store_ch_inbox_finish(x->s, seq, false), 0);
    store_close(other);
}

typedef struct opener {
    const char *conninfo;
    store *s;
    int result;
} opener;

static void *open_main(void *arg) {
    opener *o = arg;
    o->result = store_open_postgres(&o->s, o->conninfo);
    return NULL;
}

/* Four gateways start together on a new PostgreSQL database: each opens
 * it, and every migration was applied once (a second run of one would
 * fail on its CREATE TABLE). */
static void gateways_starting_together_migrate_once(void **state) {
    fx *x = *state;
    char name[80], sql[128], conninfo[600];
    snprintf(name, sizeof name, "%s_fresh", x->pg_name);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    assert_int_equal(test_pg_admin(sql), 0);
    snprintf(conninfo, sizeof conninfo, "%s dbname=%s", test_pg_server(), name);
    opener o[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        o[i] = (opener){.conninfo = conninfo};
        assert_int_equal(pthread_create(&th[i], NULL, open_main, &o[i]), 0);
    }
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        assert_int_equal(o[i].result, 0);
        int v = 0;
        assert_int_equal(store_schema_version(o[i].s, &v), 0);
        assert_int_equal(v, (int)sq_migrations_count);
        store_close(o[i].s);
    }
    snprintf(sql, sizeof sql, "DROP DATABASE %s WITH (FORCE)", name);
    assert_int_equal(test_pg_admin(sql), 0);
}

/* A restart of the server (here: every connection of the store ended by
 * the server) costs no caller an error: the pooled connections are
 * re-established before they are handed out. */
static void dropped_connections_are_revived(void **state) {
    fx *x = *state;
    char sql[256];
    snprintf(sql, sizeof sql,
             "SELECT pg_terminate_backend(pid, 10000) FROM pg_stat_activity "
             "WHERE datname = '%s' AND pid <> pg_backend_pid()",
             x->pg_name);
    assert_int_equal(test_pg_admin(sql), 0);
    int version = 0;
    assert_int_equal(store_schema_version(x->s, &version), 0);
    assert_int_equal(version, (int)sq_migrations_count);
    store_user u;
    assert_int_equal(store_user_create(x->s, &u, "after-restart", "hash", "user"), 0);
}

/* The one integer a one-row, one-column statement answers, or -1. */
static int64_t sdb_single(sdb *db, const char *sql, const char *text) {
    sdb_stmt *st;
    if (sdb_prepare(db, &st, sql) != SDB_OK)
        return -1;
    if (sdb_bind_count(st) > 0) {
        if (text)
            sdb_bind_text(st, 1, text);
        else
            sdb_bind_null(st, 1);
    }
    int64_t v = sdb_step(st) == SDB_ROW ? sdb_column_int64(st, 0) : -1;
    sdb_finalize(st);
    return v;
}

/* Steps sql with ?1 bound to 1: its step's result, and on a row its column
 * col in *v. */
static int row_where_a_is_1(sdb *db, const char *sql, int col, int64_t *v) {
    sdb_stmt *st;
    *v = -1;
    int rc = sdb_prepare(db, &st, sql);
    if (rc != SDB_OK)
        return rc;
    sdb_bind_int64(st, 1, 1);
    rc = sdb_step(st);
    if (rc == SDB_ROW)
        *v = sdb_column_int64(st, col);
    sdb_finalize(st);
    return rc;
}

/* Runs 600 distinct statements on table (two rows), more than a connection
 * keeps prepared, each answering as its SQL does. */
static void many_distinct_statements(sdb *db, const char *table) {
    char sql[96];
    for (int i = 0; i < 600; i++) {
        snprintf(sql, sizeof sql, "SELECT %d + count(*) FROM %s", i, table);
        assert_int_equal(sdb_single(db, sql, NULL), i + 2);
    }
}

/* Statements run by name once prepared on a connection answer as their SQL
 * does: with a parameter bound as text or as NULL, past the number the
 * connection keeps prepared, after a table they read changed shape (run
 * outside a transaction: repeated at once; inside one: the transaction's
 * error, and fine after it), and in a transaction on a connection
 * re-established since they were prepared. */
static void prepared_statements_answer_as_their_sql(void **state) {
    fx *x = *state;
    sdb *db;
    assert_int_equal(sdb_pg_open(&db, x->pg), 0);
    assert_int_equal(sdb_exec(db, "CREATE TABLE prep (a BIGINT, b TEXT)"), SDB_OK);
    assert_int_equal(sdb_exec(db, "INSERT INTO prep VALUES (1, 'one'), (2, NULL)"), SDB_OK);
    const char *by_b = "SELECT coalesce(max(a), 0) FROM prep WHERE b IS NOT DISTINCT FROM ?1";
    for (int round = 0; round < 3; round++) {
        assert_int_equal(sdb_single(db, by_b, "one"), 1);
        assert_int_equal(sdb_single(db, by_b, NULL), 2);
        assert_int_equal(sdb_single(db, by_b, "none"), 0);
    }
    const char *row = "SELECT * FROM prep WHERE a = ?1";
    int64_t v;
    assert_int_equal(row_where_a_is_1(db, row, 0, &v), SDB_ROW);
    assert_int_equal(sdb_exec(db, "ALTER TABLE prep ADD COLUMN c BIGINT DEFAULT 7"), SDB_OK);
    assert_int_equal(row_where_a_is_1(db, row, 2, &v), SDB_ROW);
    assert_int_equal(v, 7);
    assert_int_equal(sdb_exec(db, "ALTER TABLE prep ADD COLUMN d BIGINT DEFAULT 8"), SDB_OK);
    assert_int_equal(sdb_exec(db, "BEGIN"), SDB_OK);
    assert_int_equal(row_where_a_is_1(db, row, 3, &v), SDB_ERROR);
    assert_int_equal(sdb_exec(db, "ROLLBACK"), SDB_OK);
    assert_int_equal(row_where_a_is_1(db, row, 3, &v), SDB_ROW);
    assert_int_equal(v, 8);
    many_distinct_statements(db, "prep");
    char sql[96];
    snprintf(sql, sizeof sql, "SELECT pg_terminate_backend(%d, 10000)", sdb_pg_backend_pid(db));
    assert_int_equal(test_pg_admin(sql), 0);
    sdb_pg_revive_idle(db);
    assert_int_equal(sdb_exec(db, "BEGIN"), SDB_OK);
    assert_int_equal(sdb_single(db, by_b, "one"), 1);
    assert_int_equal(sdb_exec(db, "COMMIT"), SDB_OK);
    sdb_close(db);
}

/* The one integer the next row of st holds, or -1 past its last row. */
static int64_t next_int(sdb_stmt *st) {
    return sdb_step(st) == SDB_ROW ? sdb_column_int64(st, 0) : -1;
}

/* A SQLite connection keeps its statements: the same SQL prepared while
 * one is in use gets a statement of its own; a kept one taken again keeps
 * no binding from its last use; it sees a column added since; past the
 * number kept, statements still answer; closing the connection finalizes
 * every kept one (a leak otherwise). */
static void kept_statements_answer_as_their_sql(void **state) {
    fx *x = *state;
    char path[192];
    snprintf(path, sizeof path, "%s/kept.db", x->dir);
    sdb *db;
    assert_int_equal(sdb_sqlite_open(&db, path, true, 1000), 0);
    assert_int_equal(sdb_exec(db, "CREATE TABLE kept (a INTEGER, b TEXT)"), SDB_OK);
    assert_int_equal(sdb_exec(db, "INSERT INTO kept VALUES (1, 'one'), (2, NULL)"), SDB_OK);
    const char *in_order = "SELECT a FROM kept ORDER BY a";
    sdb_stmt *outer, *inner;
    for (int round = 0; round < 2; round++) {
        assert_int_equal(sdb_prepare(db, &outer, in_order), SDB_OK);
        assert_int_equal(next_int(outer), 1);
        assert_int_equal(sdb_prepare(db, &inner, in_order), SDB_OK);
        assert_int_equal(next_int(inner), 1);
        assert_int_equal(next_int(inner), 2);
        sdb_finalize(inner);
        assert_int_equal(next_int(outer), 2);
        assert_int_equal(next_int(outer), -1);
        sdb_finalize(outer);
    }
    const char *by_b = "SELECT coalesce(max(a), 0) FROM kept WHERE b IS ?1";
    assert_int_equal(sdb_single(db, by_b, "one"), 1);
    sdb_stmt *st;
    assert_int_equal(sdb_prepare(db, &st, by_b), SDB_OK);
    assert_int_equal(next_int(st), 2); /* unbound: NULL, not the last use's 'one' */
    sdb_finalize(st);
    const char *row = "SELECT * FROM kept WHERE a = ?1";
    int64_t v;
    assert_int_equal(row_where_a_is_1(db, row, 0, &v), SDB_ROW);
    assert_int_equal(sdb_exec(db, "ALTER TABLE kept ADD COLUMN c INTEGER DEFAULT 7"), SDB_OK);
    assert_int_equal(row_where_a_is_1(db, row, 2, &v), SDB_ROW);
    assert_int_equal(v, 7);
    many_distinct_statements(db, "kept");
    assert_int_equal(sdb_single(db, by_b, "one"), 1);
    sdb_close(db);
}

/* sq_pg_ddl: each dialect word of the migrations rewritten for PostgreSQL;
 * a word that only looks like one, literals and numbers copied as they are. */
static void pg_ddl_rewrites_each_dialect_word(void **state) {
    (void)state;
    static const struct {
        const char *sqlite, *pg;
    } cases[] = {
        {"CREATE TABLE t (  id INTEGER PRIMARY KEY,  n INTEGER NOT NULL DEFAULT 0);",
         "CREATE TABLE t (  id BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"
         "  n BIGINT NOT NULL DEFAULT 0);"},
        {"seq INTEGER PRIMARY KEY AUTOINCREMENT,",
         "seq BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,"},
        {"c REAL NOT NULL CHECK (c >= 0)", "c DOUBLE PRECISION NOT NULL CHECK (c >= 0)"},
        {"m TEXT CHECK (m IS NULL OR json_valid(m))",
         "m TEXT CHECK (m IS NULL OR m::jsonb IS NOT NULL)"},
        {"ON users(username COLLATE NOCASE);", "ON users(lower(username));"},
        {"PRIMARY KEY (run_id, seq)) WITHOUT ROWID;", "PRIMARY KEY (run_id, seq));"},
        {"  user TEXT NOT NULL,  user_id INTEGER,  users_seen INTEGER",
         "  \"user\" TEXT NOT NULL,  user_id BIGINT,  users_seen BIGINT"},
        {"CREATE TABLE runs (  run_id TEXT PRIMARY KEY);",
         "CREATE TABLE runs (  rowid BIGINT GENERATED ALWAYS AS IDENTITY,  run_id TEXT PRIMARY "
         "KEY);"},
        {"CREATE TABLE runs_archive (  x INTEGER);", "CREATE TABLE runs_archive (  x BIGINT);"},
        {"DEFAULT 'INTEGER user json_valid(x) it''s REAL' CHECK (n IN (0, 10))",
         "DEFAULT 'INTEGER user json_valid(x) it''s REAL' CHECK (n IN (0, 10))"},
        {"INTEGERS REALLY 'open", "INTEGERS REALLY 'open"},
        {"", ""},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char *out = NULL;
        assert_int_equal(sq_pg_ddl(&out, cases[i].sqlite), 0);
        assert_string_equal(out, cases[i].pg);
        free(out);
    }
}

/* The cases on both backends. */
#define COMMON_TESTS                                                                               \
    cmocka_unit_test(migrations_bring_schema_current), cmocka_unit_test(users),                    \
        cmocka_unit_test(usernames_ignore_case), cmocka_unit_test(api_tokens),                     \
        cmocka_unit_test(auth_generation_follows_revocations),                                     \
        cmocka_unit_test(sandbox_records_and_fences), cmocka_unit_test(sandbox_ownership_leases),  \
        cmocka_unit_test(threads_are_owner_scoped_and_idempotent),                                 \
        cmocka_unit_test(search_matches_metadata_exactly),                                         \
        cmocka_unit_test(search_matches_are_bounded),                                              \
        cmocka_unit_test(metadata_and_matches_nest_within_bounds),                                 \
        cmocka_unit_test(concurrent_writers_lose_nothing),                                         \
        cmocka_unit_test(killed_writer_restarts_cleanly),                                          \
        cmocka_unit_test(runs_are_owner_and_thread_scoped),                                        \
        cmocka_unit_test(run_events_append_read_prune),                                            \
        cmocka_unit_test(runs_are_owned_by_their_gateway),                                         \
        cmocka_unit_test(cancel_requests_reach_the_runs_gateway),                                  \
        cmocka_unit_test(silent_gateways_are_reaped),                                              \
        cmocka_unit_test(threads_carry_their_title_and_ids_narrow_a_search),                       \
        cmocka_unit_test(message_pages_walk_the_newest_state_backwards),                           \
        cmocka_unit_test(token_usage_sums_what_runs_wrote),                                        \
        cmocka_unit_test(token_usage_adds_what_runs_recorded_besides_the_lead),                    \
        cmocka_unit_test(checkpoints_and_receipts_follow_the_thread),                              \
        cmocka_unit_test(message_origins_follow_the_lineage),                                      \
        cmocka_unit_test(checkpoints_store_each_message_once),                                     \
        cmocka_unit_test(replaced_messages_stay_until_no_checkpoint_lists_them),                   \
        cmocka_unit_test(failures_leave_out_parameters_defined),                                   \
        cmocka_unit_test(memory_facts_are_owner_scoped_and_bounded),                               \
        cmocka_unit_test(memory_facts_are_validated),                                              \
        cmocka_unit_test(memory_import_is_all_or_nothing),                                         \
        cmocka_unit_test(skill_states_keep_the_last_setting),                                      \
        cmocka_unit_test(tasks_are_owner_scoped_and_checked),                                      \
        cmocka_unit_test(claims_run_each_occurrence_once),                                         \
        cmocka_unit_test(concurrent_claimers_take_one),                                            \
        cmocka_unit_test(concurrent_reclaimers_take_one),                                          \
        cmocka_unit_test(token_cap_holds_across_gateways),                                         \
        cmocka_unit_test(signin_attempts_race_across_gateways),                                    \
        cmocka_unit_test(signin_addresses_are_bounded),                                            \
        cmocka_unit_test(inbox_events_are_queued_and_claimed_once),
/* About SQLite's file and connections. */
#define SQLITE_TESTS                                                                               \
    cmocka_unit_test(a_held_read_stalls_no_other_caller),                                          \
        cmocka_unit_test(migration_moves_whole_states_into_message_rows),                          \
        cmocka_unit_test(database_is_private),                                                     \
        cmocka_unit_test(kept_statements_answer_as_their_sql),                                     \
        cmocka_unit_test(pg_ddl_rewrites_each_dialect_word),

/* About several gateways on one PostgreSQL database. */
#define POSTGRES_TESTS                                                                             \
    cmocka_unit_test(gateways_starting_together_migrate_once),                                     \
        cmocka_unit_test(dropped_connections_are_revived),                                         \
        cmocka_unit_test(prepared_statements_answer_as_their_sql),

int main(void) {
    const struct CMUnitTest on_sqlite[] = {COMMON_TESTS SQLITE_TESTS};
    const struct CMUnitTest on_postgres[] = {COMMON_TESTS POSTGRES_TESTS};
    if (test_pg_server())
        return cmocka_run_group_tests_name("store on PostgreSQL", on_postgres, setup, teardown);
    return cmocka_run_group_tests_name("store", on_sqlite, setup, teardown);
}
