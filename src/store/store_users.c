/* Users and their API tokens (store.h). */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "store/store_internal.h"

#define USER_COLUMNS "id, username, password_hash, role, token_version, created_at_ms"

/* Reads USER_COLUMNS starting at column first. */
static void read_user_at(store_user *u, sdb_stmt *st, int first) {
    u->id = sdb_column_int64(st, first);
    sq_copy_col(u->username, sizeof u->username, st, first + 1);
    sq_copy_col(u->password_hash, sizeof u->password_hash, st, first + 2);
    sq_copy_col(u->role, sizeof u->role, st, first + 3);
    u->token_version = sdb_column_int64(st, first + 4);
    u->created_at_ms = sdb_column_int64(st, first + 5);
}

static void read_user(store_user *u, sdb_stmt *st) { read_user_at(u, st, 0); }

/* Runs a prepared query expecting at most one user row. */
static int one_user(sdb *db, store_user *out, sdb_stmt *st, const char *what) {
    int r = sq_step_row(db, st, what, "no such user");
    if (r == 0)
        read_user(out, st);
    sdb_finalize(st);
    return r;
}

int store_user_create(store *s, store_user *out, const char *username, const char *password_hash,
                      const char *role) {
    *out = (store_user){0};
    if (!sq_text_ok(username, STORE_NAME_MAX) || !sq_text_ok(password_hash, STORE_HASH_MAX) ||
        !sq_text_ok(role, STORE_ROLE_MAX))
        return fawn_err(FAWN_EINVAL, "username, password hash and role are required and bounded");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "INSERT INTO users (username, password_hash, role, created_at_ms) "
                       "VALUES (?1, ?2, ?3, ?4) RETURNING " USER_COLUMNS);
    if (r == 0) {
        sdb_bind_text(st, 1, username);
        sdb_bind_text(st, 2, password_hash);
        sdb_bind_text(st, 3, role);
        sdb_bind_int64(st, 4, fawn_wall_ms());
        r = one_user(db, out, st, "create user");
        if (r == FAWN_EEXIST)
            r = fawn_err(FAWN_EEXIST, "username '%s' is taken", username);
    }
    sq_write_end(s, db);
    return r;
}

int store_user_get(store *s, store_user *out, int64_t id) {
    *out = (store_user){0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st, "SELECT " USER_COLUMNS " FROM users WHERE id = ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, id);
        r = one_user(db, out, st, "get user");
    }
    sq_read_end(s, db);
    return r;
}

/* The one user that `SELECT USER_COLUMNS FROM users <where>` finds with
 * text bound to ?1. */
static int user_find(store *s, store_user *out, const char *lite_where, const char *pg_where,
                     const char *text) {
    *out = (store_user){0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    char sql[256];
    snprintf(sql, sizeof sql, "SELECT " USER_COLUMNS " FROM users %s",
             sq_pick(db, lite_where, pg_where));
    int r = sq_prepare(db, &st, sql);
    if (r == 0) {
        sdb_bind_text(st, 1, text);
        r = one_user(db, out, st, "get user");
    }
    sq_read_end(s, db);
    return r;
}

int store_user_get_by_name(store *s, store_user *out, const char *username) {
    return user_find(s, out, "WHERE username = ?1 COLLATE NOCASE",
                     "WHERE lower(username) = lower(?1)", username);
}

int store_user_get_by_role(store *s, store_user *out, const char *role) {
    return user_find(s, out, "WHERE role = ?1 ORDER BY id LIMIT 1",
                     "WHERE role = ?1 ORDER BY id LIMIT 1", role);
}

int store_user_count(store *s, int64_t *out, const char *role) {
    *out = 0;
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st, "SELECT count(*) FROM users WHERE ?1 IS NULL OR role = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, role);
        int rc = sdb_step(st);
        r = rc == SDB_ROW ? 0 : sq_err(db, rc, "count users");
        *out = r == 0 ? sdb_column_int64(st, 0) : 0;
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_user_set_password(store *s, int64_t id, const char *password_hash) {
    if (!sq_text_ok(password_hash, STORE_HASH_MAX))
        return fawn_err(FAWN_EINVAL, "password hash is required and bounded");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "UPDATE users SET password_hash = ?2, token_version = token_version + 1 "
                       "WHERE id = ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, id);
        sdb_bind_text(st, 2, password_hash);
        r = sq_step_done(db, st, true, "set password");
    }
    sq_write_end(s, db);
    return r;
}

int store_user_set_role(store *s, int64_t id, const char *role) {
    if (!sq_text_ok(role, STORE_ROLE_MAX))
        return fawn_err(FAWN_EINVAL, "role is required and bounded");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "UPDATE users SET role = ?2 WHERE id = ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, id);
        sdb_bind_text(st, 2, role);
        r = sq_step_done(db, st, true, "set role");
    }
    sq_write_end(s, db);
    return r;
}

int store_user_revoke_sessions(store *s, int64_t id) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "UPDATE users SET token_version = token_version + 1 WHERE id = ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, id);
        r = sq_step_done(db, st, true, "revoke sessions");
    }
    sq_write_end(s, db);
    return r;
}
/* ---- API tokens ---- */

#define TOKEN_COLUMNS "id, user_id, name, created_at_ms, coalesce(last_used_at_ms, 0)"

static void read_token(store_token *t, sdb_stmt *st) {
    t->id = sdb_column_int64(st, 0);
    t->user_id = sdb_column_int64(st, 1);
    sq_copy_col(t->name, sizeof t->name, st, 2);
    t->created_at_ms = sdb_column_int64(st, 3);
    t->last_used_at_ms = sdb_column_int64(st, 4);
}

int store_token_create(store *s, store_token *out, int64_t user_id, const char *name,
                       const char *token_hash) {
    *out = (store_token){0};
    if (!sq_text_ok(name, STORE_TOKEN_NAME_MAX) || !sq_text_ok(token_hash, 64))
        return fawn_err(FAWN_EINVAL, "a token name of 1 to %d bytes is required",
                        STORE_TOKEN_NAME_MAX);
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    /* The count and the insert are one statement, in a write transaction:
     * concurrent creations cannot pass the cap together (on PostgreSQL a
     * statement alone does not see the rows another is inserting). */
    int r = sq_begin_write(db, "begin create token");
    if (r == 0)
        r = sq_prepare(db, &st,
                       "INSERT INTO api_tokens (user_id, name, token_hash, created_at_ms) "
                       "SELECT ?1, ?2, ?3, ?4 WHERE (SELECT count(*) FROM api_tokens "
                       "WHERE user_id = ?1) < ?5 RETURNING " TOKEN_COLUMNS);
    if (r == 0) {
        sdb_bind_int64(st, 1, user_id);
        sdb_bind_text(st, 2, name);
        sdb_bind_text(st, 3, token_hash);
        sdb_bind_int64(st, 4, fawn_wall_ms());
        sdb_bind_int64(st, 5, STORE_TOKENS_PER_USER_MAX);
        int rc = sdb_step(st);
        r = rc == SDB_ROW    ? 0
            : rc == SDB_DONE ? fawn_err(FAWN_E2BIG, "a user may hold at most %d API tokens",
                                        STORE_TOKENS_PER_USER_MAX)
                             : sq_err(db, rc, "create token");
        if (r == 0)
            read_token(out, st);
        sdb_finalize(st);
    }
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    return r;
}

int store_token_list(store *s, store_token **out, size_t *n, int64_t user_id) {
    *out = NULL;
    *n = 0;
    store_token *rows = calloc(STORE_TOKENS_PER_USER_MAX, sizeof *rows);
    if (!rows)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " TOKEN_COLUMNS " FROM api_tokens WHERE user_id = ?1 "
                       "ORDER BY id LIMIT ?2");
    if (r == 0) {
        sdb_bind_int64(st, 1, user_id);
        sdb_bind_int64(st, 2, STORE_TOKENS_PER_USER_MAX);
        int rc;
        while ((rc = sdb_step(st)) == SDB_ROW && *n < STORE_TOKENS_PER_USER_MAX)
            read_token(&rows[(*n)++], st);
        if (rc != SDB_DONE && rc != SDB_ROW)
            r = sq_err(db, rc, "list tokens");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0) {
        free(rows);
        *n = 0;
        return r;
    }
    *out = rows;
    return 0;
}

int store_token_delete(store *s, int64_t user_id, int64_t id) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "DELETE FROM api_tokens WHERE id = ?1 AND user_id = ?2");
    if (r == 0) {
        sdb_bind_int64(st, 1, id);
        sdb_bind_int64(st, 2, user_id);
        r = sq_step_done(db, st, true, "delete token");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "no such token: %" PRId64, id) : r;
}

/* Records that token id was used at now, unless it was recorded less than
 * STORE_TOKEN_USE_RESOLUTION_MS ago: a busy client then costs no write
 * (and no fsync) per request. Best effort: the answer does not depend on it. */
static void token_use_record(store *s, int64_t id, int64_t last_used, int64_t now) {
    if (now - last_used < STORE_TOKEN_USE_RESOLUTION_MS)
        return;
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    if (sq_prepare(db, &st, "UPDATE api_tokens SET last_used_at_ms = ?2 WHERE id = ?1") == 0) {
        sdb_bind_int64(st, 1, id);
        sdb_bind_int64(st, 2, now);
        sdb_step(st);
        sdb_finalize(st);
    }
    sq_write_end(s, db);
}

int store_token_authenticate(store *s, store_user *user, int64_t *token_id,
                             const char *token_hash) {
    *user = (store_user){0};
    *token_id = 0;
    int64_t last_used = 0;
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(
        db, &st,
        "SELECT t.id, coalesce(t.last_used_at_ms, 0), u.id, u.username, "
        "u.password_hash, u.role, u.token_version, u.created_at_ms "
        "FROM api_tokens t JOIN users u ON u.id = t.user_id WHERE t.token_hash = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, token_hash);
        r = sq_step_row(db, st, "authenticate token", "unknown API token");
        if (r == 0) {
            *token_id = sdb_column_int64(st, 0);
            last_used = sdb_column_int64(st, 1);
            read_user_at(user, st, 2);
        }
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r == 0)
        token_use_record(s, *token_id, last_used, fawn_wall_ms());
    return r;
}
