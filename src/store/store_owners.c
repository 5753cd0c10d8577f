/* Sandbox ownership (store.h): which gateway may run each sandbox, until
 * when, and which gateway asked it to let go. */
#include <string.h>

#include "store/store_internal.h"

#define OWNER_COLUMNS                                                                              \
    "sandbox_id, \"user\", thread, gateway, lease_until_ms, release_asked_by, "                    \
    "release_asked_at_ms FROM sandbox_owners"

static void read_owner(void *row, sdb_stmt *st) {
    store_sandbox_owner *out = row;
    sq_copy_col(out->sandbox_id, sizeof out->sandbox_id, st, 0);
    sq_copy_col(out->user, sizeof out->user, st, 1);
    sq_copy_col(out->thread, sizeof out->thread, st, 2);
    sq_copy_col(out->gateway, sizeof out->gateway, st, 3);
    out->lease_until_ms = sdb_column_int64(st, 4);
    sq_copy_col(out->release_asked_by, sizeof out->release_asked_by, st, 5);
    out->release_asked_at_ms = sdb_column_int64(st, 6);
}

/* The row of sandbox_id on db (FAWN_ENOENT when none; *out zeroed then). */
static int owner_get_on(sdb *db, store_sandbox_owner *out, const char *sandbox_id) {
    *out = (store_sandbox_owner){0};
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "SELECT " OWNER_COLUMNS " WHERE sandbox_id = ?1");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, sandbox_id);
    r = sq_step_row(db, st, "read sandbox owner", "nobody owns sandbox %s", sandbox_id);
    if (r == 0)
        read_owner(out, st);
    sdb_finalize(st);
    return r;
}

static enum store_owner_claim claim_decide(const store_sandbox_owner *was,
                                           const store_owner_claim_req *q) {
    if (!was->gateway[0])
        return STORE_OWNER_FREE;
    if (strcmp(was->gateway, q->gateway) == 0)
        return STORE_OWNER_KEPT;
    return was->lease_until_ms <= q->now_ms ? STORE_OWNER_EXPIRED : STORE_OWNER_HELD;
}

/* Writes what claim_decide decided: a kept lease is extended (a release
 * request on it stays: the owner honors it once the sandbox is idle); a
 * new owner starts with no request. */
static int claim_write(sdb *db, enum store_owner_claim how, const store_owner_claim_req *q) {
    if (how == STORE_OWNER_HELD)
        return 0;
    sdb_stmt *st;
    int r = sq_prepare(
        db, &st,
        how == STORE_OWNER_KEPT
            ? "UPDATE sandbox_owners SET lease_until_ms = ?5 WHERE sandbox_id = ?1 AND gateway = ?4"
            : "INSERT INTO sandbox_owners (sandbox_id, \"user\", thread, gateway, lease_until_ms) "
              "VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (sandbox_id) DO UPDATE SET "
              "\"user\" = excluded.\"user\", thread = excluded.thread, gateway = "
              "excluded.gateway, lease_until_ms = excluded.lease_until_ms, "
              "release_asked_by = '', release_asked_at_ms = 0");
    if (r < 0)
        return r;
    const char *texts[] = {q->sandbox_id, q->user, q->thread, q->gateway};
    sq_bind_texts(st, texts, ARRAY_LEN(texts));
    sdb_bind_int64(st, 5, q->now_ms + q->lease_ms);
    return sq_step_done(db, st, true, "claim sandbox");
}

static bool gateway_ok(const char *gateway) { return sq_text_ok(gateway, STORE_GATEWAY_MAX); }

static bool claim_req_ok(const store_owner_claim_req *q) {
    return sq_text_ok(q->sandbox_id, 16) && q->user && fawn_id_valid(q->user) && q->thread &&
           fawn_id_valid(q->thread) && gateway_ok(q->gateway) && q->lease_ms > 0;
}

int store_sandbox_owner_claim(store *s, enum store_owner_claim *out, store_sandbox_owner *was,
                              const store_owner_claim_req *q) {
    *out = STORE_OWNER_HELD;
    *was = (store_sandbox_owner){0};
    if (!claim_req_ok(q))
        return fawn_err(FAWN_EINVAL, "bad sandbox claim");
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin sandbox claim");
    if (r == 0) {
        r = owner_get_on(db, was, q->sandbox_id);
        if (r == FAWN_ENOENT)
            r = 0;
        enum store_owner_claim how = claim_decide(was, q);
        if (r == 0)
            r = claim_write(db, how, q);
        r = sq_end_transaction(db, r);
        if (r == 0)
            *out = how;
    }
    sq_write_end(s, db);
    return r;
}

int store_sandbox_owner_renew(store *s, const char *gateway, int64_t now_ms, int64_t lease_ms) {
    if (!gateway_ok(gateway) || lease_ms <= 0)
        return fawn_err(FAWN_EINVAL, "bad lease renewal");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "UPDATE sandbox_owners SET lease_until_ms = ?1 WHERE gateway = ?2");
    if (r == 0) {
        sdb_bind_int64(st, 1, now_ms + lease_ms);
        sdb_bind_text(st, 2, gateway);
        r = sq_step_done(db, st, false, "renew sandbox leases");
    }
    sq_write_end(s, db);
    return r;
}

int store_sandbox_owner_release(store *s, const char *sandbox_id, const char *gateway) {
    const char *texts[] = {sandbox_id, gateway};
    return sq_exec_texts(s, "DELETE FROM sandbox_owners WHERE sandbox_id = ?1 AND gateway = ?2",
                         texts, ARRAY_LEN(texts), false, "release sandbox");
}

int store_sandbox_owner_release_all(store *s, const char *gateway) {
    const char *texts[] = {gateway};
    return sq_exec_texts(s, "DELETE FROM sandbox_owners WHERE gateway = ?1", texts,
                         ARRAY_LEN(texts), false, "release sandboxes");
}

int store_sandbox_owner_ask(store *s, const char *sandbox_id, const char *asker, int64_t now_ms) {
    if (!sq_text_ok(sandbox_id, 16) || !gateway_ok(asker))
        return fawn_err(FAWN_EINVAL, "bad release request");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "UPDATE sandbox_owners SET release_asked_by = ?2, release_asked_at_ms = ?3 "
                       "WHERE sandbox_id = ?1 AND gateway <> ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, sandbox_id);
        sdb_bind_text(st, 2, asker);
        sdb_bind_int64(st, 3, now_ms);
        r = sq_step_done(db, st, true, "ask for a sandbox");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(r, "no other gateway owns sandbox %s", sandbox_id) : r;
}

int store_sandbox_owner_asked(store *s, store_sandbox_owner **out, size_t *n, const char *gateway,
                              int64_t since_ms) {
    *out = NULL;
    *n = 0;
    fbuf rows = {.limit = STORE_SANDBOXES_MAX * sizeof(store_sandbox_owner)};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " OWNER_COLUMNS " WHERE gateway = ?1 AND release_asked_by <> '' "
                       "AND release_asked_at_ms >= ?2 ORDER BY sandbox_id LIMIT ?3");
    if (r == 0) {
        sdb_bind_text(st, 1, gateway);
        sdb_bind_int64(st, 2, since_ms);
        sdb_bind_int64(st, 3, STORE_SANDBOXES_MAX);
        r = sq_rows_read(db, &rows, st, sizeof(store_sandbox_owner), read_owner,
                         "list asked sandboxes");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_sandbox_owner), r);
}

int store_sandbox_owner_get(store *s, store_sandbox_owner *out, const char *sandbox_id) {
    sdb *db = sq_read_begin(s);
    int r = owner_get_on(db, out, sandbox_id);
    sq_read_end(s, db);
    return r;
}
