/* Sandboxes and fences (store.h): the record of each sandbox's box, and
 * the generations fenced from reuse. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store/store_internal.h"

#define SANDBOX_COLUMNS "sandbox_id, \"user\", thread, generation, endpoint, token, created_at_ms"

static bool sandbox_args_ok(const char *sandbox_id, const char *generation) {
    return sq_text_ok(sandbox_id, 16) && generation && strlen(generation) <= 32;
}

int store_sandbox_put(store *s, const store_sandbox *sb) {
    if (!sandbox_args_ok(sb->sandbox_id, sb->generation) || !fawn_id_valid(sb->user) ||
        !fawn_id_valid(sb->thread) || !memchr(sb->endpoint, 0, sizeof sb->endpoint) ||
        !memchr(sb->token, 0, sizeof sb->token))
        return fawn_err(FAWN_EINVAL, "bad sandbox record");
    char now[24];
    snprintf(now, sizeof now, "%" PRId64, fawn_wall_ms());
    const char *texts[] = {sb->sandbox_id, sb->user,  sb->thread, sb->generation,
                           sb->endpoint,   sb->token, now};
    return sq_exec_texts(s,
                         "INSERT INTO sandboxes (sandbox_id, \"user\", thread, generation, "
                         "endpoint, token, created_at_ms) "
                         "VALUES (?1, ?2, ?3, ?4, ?5, ?6, CAST(?7 AS BIGINT)) "
                         "ON CONFLICT (sandbox_id) DO UPDATE SET \"user\" = excluded.\"user\", "
                         "thread = excluded.thread, generation = excluded.generation, "
                         "endpoint = excluded.endpoint, token = excluded.token, "
                         "created_at_ms = excluded.created_at_ms",
                         texts, ARRAY_LEN(texts), false, "record sandbox");
}

static void read_sandbox(void *row, sdb_stmt *st) {
    store_sandbox *out = row;
    sq_copy_col(out->sandbox_id, sizeof out->sandbox_id, st, 0);
    sq_copy_col(out->user, sizeof out->user, st, 1);
    sq_copy_col(out->thread, sizeof out->thread, st, 2);
    sq_copy_col(out->generation, sizeof out->generation, st, 3);
    sq_copy_col(out->endpoint, sizeof out->endpoint, st, 4);
    sq_copy_col(out->token, sizeof out->token, st, 5);
    out->created_at_ms = sdb_column_int64(st, 6);
}

int store_sandbox_get(store *s, store_sandbox *out, const char *sandbox_id) {
    *out = (store_sandbox){0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st, "SELECT " SANDBOX_COLUMNS " FROM sandboxes WHERE sandbox_id = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, sandbox_id);
        r = sq_step_row(db, st, "get sandbox", "no record of sandbox %s", sandbox_id);
        if (r == 0)
            read_sandbox(out, st);
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_sandbox_list(store *s, store_sandbox **out, size_t *n) {
    *out = NULL;
    *n = 0;
    fbuf rows = {.limit = STORE_SANDBOXES_MAX * sizeof(store_sandbox)};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " SANDBOX_COLUMNS " FROM sandboxes ORDER BY sandbox_id LIMIT ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, STORE_SANDBOXES_MAX);
        r = sq_rows_read(db, &rows, st, sizeof(store_sandbox), read_sandbox, "list sandboxes");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_sandbox), r);
}

int store_sandbox_forget(store *s, const char *sandbox_id, const char *generation) {
    const char *texts[] = {sandbox_id, generation ? generation : ""};
    return sq_exec_texts(
        s, "DELETE FROM sandboxes WHERE sandbox_id = ?1 AND (?2 = '' OR generation = ?2)", texts,
        ARRAY_LEN(texts), false, "forget sandbox");
}

static bool fence_args_ok(const char *scope, const char *sandbox_id, const char *generation) {
    return scope && strlen(scope) < sizeof(((store_fence *)0)->scope) &&
           sandbox_args_ok(sandbox_id, generation);
}

int store_fence_add(store *s, const char *scope, const char *sandbox_id, const char *generation,
                    const char *reason) {
    if (!fence_args_ok(scope, sandbox_id, generation))
        return fawn_err(FAWN_EINVAL, "bad fence");
    char now[24], why[256];
    snprintf(now, sizeof now, "%" PRId64, fawn_wall_ms());
    snprintf(why, sizeof why, "%s", reason ? reason : "");
    const char *texts[] = {scope, sandbox_id, generation, why, now};
    return sq_exec_texts(
        s,
        "INSERT INTO sandbox_fences (scope, sandbox_id, generation, reason, "
        "created_at_ms) VALUES (?1, ?2, ?3, ?4, CAST(?5 AS BIGINT)) ON CONFLICT DO NOTHING",
        texts, ARRAY_LEN(texts), false, "add fence");
}

int store_fence_exists(store *s, bool *out, const char *scope, const char *sandbox_id,
                       const char *generation) {
    *out = false;
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT 1 FROM sandbox_fences WHERE scope = ?1 AND sandbox_id = ?2 "
                       "AND generation = ?3");
    if (r == 0) {
        const char *texts[] = {scope, sandbox_id, generation};
        sq_bind_texts(st, texts, ARRAY_LEN(texts));
        int rc = sdb_step(st);
        r = rc == SDB_ROW || rc == SDB_DONE ? 0 : sq_err(db, rc, "check fence");
        *out = rc == SDB_ROW;
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_fence_remove(store *s, const char *scope, const char *sandbox_id,
                       const char *generation) {
    const char *texts[] = {scope, sandbox_id, generation};
    return sq_exec_texts(s,
                         "DELETE FROM sandbox_fences WHERE scope = ?1 AND sandbox_id = ?2 AND "
                         "generation = ?3",
                         texts, ARRAY_LEN(texts), true, "remove fence");
}

static void read_fence(void *row, sdb_stmt *st) {
    store_fence *f = row;
    sq_copy_col(f->scope, sizeof f->scope, st, 0);
    sq_copy_col(f->sandbox_id, sizeof f->sandbox_id, st, 1);
    sq_copy_col(f->generation, sizeof f->generation, st, 2);
    sq_copy_col(f->reason, sizeof f->reason, st, 3);
    f->created_at_ms = sdb_column_int64(st, 4);
}

int store_fence_list(store *s, store_fence **out, size_t *n, const char *sandbox_id) {
    *out = NULL;
    *n = 0;
    fbuf rows = {.limit = STORE_FENCES_MAX * sizeof(store_fence)};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT scope, sandbox_id, generation, reason, created_at_ms FROM "
                       "sandbox_fences WHERE ?1 IS NULL OR sandbox_id = ?1 "
                       "ORDER BY created_at_ms, rowid LIMIT ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, sandbox_id);
        sdb_bind_int64(st, 2, STORE_FENCES_MAX);
        r = sq_rows_read(db, &rows, st, sizeof(store_fence), read_fence, "list fences");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_fence), r);
}
