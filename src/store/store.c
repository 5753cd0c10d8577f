/* The store on SQLite (store.h). One writer connection, used under a
 * mutex, and a pool of read-only connections (store_internal.h): every
 * operation is one statement or one transaction, so concurrent callers
 * never see or leave a half-done change, and readers see committed changes
 * only. WAL journal, synchronous NORMAL:
 * a committed change survives the gateway being killed (it is in the WAL
 * before the commit returns); an operating-system crash or power loss can
 * undo the last commits before a WAL checkpoint, never corrupt the
 * database. (FULL, an fsync per commit, cost a run ~3 ms per tool step.) */
#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/fsx.h"
#include "base/json.h"
#include "store/store_internal.h"

/* How long a statement waits for another process's lock before FAWN_EBUSY. */
#define STORE_BUSY_TIMEOUT_MS 5000
/* Rows one search returns at most. */
#define STORE_SEARCH_MAX 1000
/* The PostgreSQL advisory lock every write transaction of every fawn on the
 * database holds (sq_begin_write): what BEGIN IMMEDIATE is on SQLite, the
 * database's one write lock, so a transaction that reads, decides and
 * writes sees no other transaction's writes in between, across gateways.
 * The number is "fawn" in ASCII, a key no other user of the database is
 * likely to take. */
/* The migrations before this one predate the PostgreSQL backend. */
#define STORE_PG_FIRST_MIGRATION 13
#define STORE_PG_WRITE_LOCK "1717663598"

int sq_err(sdb *db, int rc, const char *what) {
    int code = rc == SDB_BUSY ? FAWN_EBUSY : rc == SDB_CONSTRAINT ? FAWN_EEXIST : FAWN_EIO;
    return fawn_err(code, "%s: %s", what, db ? sdb_errmsg(db) : "no connection");
}

int sq_exec(sdb *db, const char *sql, const char *what) {
    int rc = sdb_exec(db, sql);
    return rc == SDB_OK ? 0 : sq_err(db, rc, what);
}

int sq_prepare(sdb *db, sdb_stmt **st, const char *sql) {
    *st = NULL;
    int rc = sdb_prepare(db, st, sql);
    return rc == SDB_OK ? 0 : sq_err(db, rc, "sq_prepare");
}

const char *sq_pick(sdb *db, const char *sqlite_sql, const char *pg_sql) {
    return sdb_kind(db) == SDB_POSTGRES ? pg_sql : sqlite_sql;
}

int sq_begin_write(sdb *db, const char *what) {
    return sq_exec(db,
                   sq_pick(db, "BEGIN IMMEDIATE",
                           "BEGIN; SELECT pg_advisory_xact_lock(" STORE_PG_WRITE_LOCK ")"),
                   what);
}

int sq_begin_read(sdb *db, const char *what) {
    return sq_exec(db, sq_pick(db, "BEGIN", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"),
                   what);
}

int sq_end_transaction(sdb *db, int r) {
    r = r == 0 ? sq_exec(db, "COMMIT", "commit") : r;
    if (r < 0)
        (void)sdb_exec(db, "ROLLBACK");
    return r;
}

/* ---- connections ---- */

sdb *sq_write_begin(store *s) {
    if (s->kind == SDB_POSTGRES)
        return sq_read_begin(s);
    pthread_mutex_lock(&s->mu);
    atomic_fetch_add_explicit(&s->operations, 1, memory_order_relaxed);
    return s->db;
}

/* A rolled-back change counts too: a cache then checks again for nothing,
 * which costs one query, never a stale answer. On PostgreSQL the auth
 * generation's trigger notifies (NOTIFY fawn_auth) every connection that
 * listens, this store's included, when its change commits. */
void sq_write_end(store *s, sdb *db) {
    if (s->kind == SDB_POSTGRES) {
        sq_read_end(s, db);
        return;
    }
    if (s->auth_dirty) {
        s->auth_dirty = false;
        sq_auth_changed(s);
    }
    pthread_mutex_unlock(&s->mu);
}

/* A free connection of the pool, taken (s->pool_mu held). */
static sdb *pool_take_locked(store *s) {
    for (;;) {
        for (size_t i = 0; i < s->pool_size; i++)
            if (!s->reader_busy[i]) {
                s->reader_busy[i] = true;
                return s->readers[i];
            }
        pthread_cond_wait(&s->pool_free, &s->pool_mu);
    }
}

/* On PostgreSQL, a connection the server dropped while it sat in the pool
 * is re-established before it is handed out, so that a database restart
 * costs no caller an error. */
sdb *sq_read_begin(store *s) {
    atomic_fetch_add_explicit(&s->operations, 1, memory_order_relaxed);
    pthread_mutex_lock(&s->pool_mu);
    sdb *db = pool_take_locked(s);
    pthread_mutex_unlock(&s->pool_mu);
    if (s->kind == SDB_POSTGRES)
        sdb_pg_revive_idle(db);
    return db;
}

/* On PostgreSQL a change of the auth generation made on db (its own
 * notification came back) returns once every other store's watcher has
 * seen it (sq_watch_acks_wait), after db is back in the pool. */
void sq_read_end(store *s, sdb *db) {
    bool own_change = s->kind == SDB_POSTGRES && sdb_pg_notified_self(db);
    if (sdb_notified(db))
        sq_auth_changed(s);
    pthread_mutex_lock(&s->pool_mu);
    for (size_t i = 0; i < s->pool_size; i++)
        if (s->readers[i] == db)
            s->reader_busy[i] = false;
    pthread_cond_signal(&s->pool_free);
    pthread_mutex_unlock(&s->pool_mu);
    if (own_change)
        sq_watch_acks_wait(s);
}

/* The schema version: SQLite keeps it in user_version, PostgreSQL in a
 * one-row table (migrate creates it). */
static int schema_version(sdb *db, int *out) {
    *out = 0;
    sdb_stmt *st;
    int r = sq_prepare(
        db, &st,
        sq_pick(db, "PRAGMA user_version", "SELECT coalesce(max(version), 0) FROM fawn_schema"));
    if (r == 0) {
        int rc = sdb_step(st);
        r = rc == SDB_ROW ? 0 : sq_err(db, rc == SDB_DONE ? SDB_ERROR : rc, "schema version");
        *out = r == 0 ? (int)sdb_column_int64(st, 0) : 0;
        sdb_finalize(st);
    }
    return r;
}

int store_schema_version(store *s, int *out) {
    *out = 0;
    sdb *db = sq_read_begin(s);
    int r = schema_version(db, out);
    sq_read_end(s, db);
    return r;
}

int store_auth_generation(store *s, int64_t *out) {
    *out = 0;
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st, "SELECT value FROM auth_generation WHERE id = 1");
    if (r == 0) {
        int rc = sdb_step(st);
        r = rc == SDB_ROW ? 0 : sq_err(db, rc == SDB_DONE ? SDB_ERROR : rc, "auth generation");
        *out = r == 0 ? sdb_column_int64(st, 0) : 0;
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

void sq_auth_changed(store *s) { atomic_fetch_add(&s->auth_changes, 2); }

/* Odd: other processes' changes cannot be watched now (sq_watch_start), so
 * each answer is a number never answered before. */
uint64_t store_auth_changes(store *s) {
    uint64_t changes = atomic_load(&s->auth_changes);
    return changes & 1 ? atomic_fetch_add(&s->auth_changes, 2) + 2 : changes;
}

bool store_shared(const store *s) { return s->kind == SDB_POSTGRES; }

uint64_t store_operations(store *s) {
    return atomic_load_explicit(&s->operations, memory_order_relaxed);
}

/* Records version v as the schema's, inside the migration's transaction. */
static int schema_version_set(sdb *db, int v) {
    char sql[160];
    if (sdb_kind(db) == SDB_POSTGRES)
        snprintf(sql, sizeof sql, "DELETE FROM fawn_schema; INSERT INTO fawn_schema VALUES (%d)",
                 v);
    else
        snprintf(sql, sizeof sql, "PRAGMA user_version = %d", v);
    return sq_exec(db, sql, "migration version");
}

/* Applies migration v (from version v to v + 1), in the open transaction. */
static int migration_apply(sdb *db, int v) {
    const sq_migration *m = &sq_migrations[v];
    bool pg = sdb_kind(db) == SDB_POSTGRES;
    char *derived = NULL;
    int r = pg && !m->pg ? sq_pg_ddl(&derived, m->sql) : 0;
    if (r == 0)
        r = sq_exec(db, !pg ? m->sql : m->pg ? m->pg : derived, "migration");
    free(derived);
    /* The data steps of the migrations that predate the PostgreSQL backend
     * move rows a PostgreSQL database cannot have had then. */
    if (r == 0 && m->data && !(pg && v < STORE_PG_FIRST_MIGRATION))
        r = m->data(db);
    return r == 0 ? schema_version_set(db, v + 1) : r;
}

/* Brings the database up to the latest migration, one transaction per
 * migration. Each reads the version inside its write transaction, so
 * gateways starting together on one PostgreSQL apply each migration once. */
static int migrate(sdb *db) {
    int latest = (int)sq_migrations_count;
    for (;;) {
        int version = 0;
        int r = sq_begin_write(db, "begin migration");
        if (r == 0 && sdb_kind(db) == SDB_POSTGRES)
            r = sq_exec(db, "CREATE TABLE IF NOT EXISTS fawn_schema (version BIGINT NOT NULL)",
                        "schema version table");
        if (r == 0)
            r = schema_version(db, &version);
        if (r == 0 && version > latest)
            r = fawn_err(FAWN_EINVAL, "the database is at schema %d, newer than this fawn (%d)",
                         version, latest);
        bool done = r == 0 && version == latest;
        if (r == 0 && !done)
            r = migration_apply(db, version);
        r = sq_end_transaction(db, r);
        if (r < 0 || done)
            return r;
    }
}

/* Password and token hashes and every conversation live in the database:
 * its directory must be private, and the database and the journal files
 * SQLite keeps beside it (which take the database's mode) 0600. */
static int make_private(const char *path) {
    char dir[4096];
    if (strlen(path) + sizeof "-wal" > sizeof dir)
        return fawn_err(FAWN_EINVAL, "database path too long");
    strcpy(dir, path);
    const char *d = dirname(dir);
    int r = fsx_private_dir(d);
    static const char *const suffixes[] = {"", "-wal", "-shm"};
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(suffixes); i++) {
        char file[4096];
        snprintf(file, sizeof file, "%s%s", path, suffixes[i]);
        if (i > 0 && access(file, F_OK) < 0)
            continue;
        int fd = fsx_private_file(file);
        r = fd < 0 ? fd : 0;
        if (fd >= 0)
            close(fd);
    }
    return r;
}

/* SQLite calls this for each row the writer changes, those of triggers
 * included: the auth generation's row changes only through the triggers
 * of migration 14, i.e. whenever an authentication may have changed. */
static void writer_row_changed(void *cls, int op, const char *db, const char *table,
                               sqlite3_int64 row) {
    (void)op, (void)db, (void)row;
    if (strcmp(table, "auth_generation") == 0)
        ((store *)cls)->auth_dirty = true;
}

/* The writer (configured, migrated), then the readers: a reader opened
 * before the database is in WAL mode and at the latest schema could see
 * neither. */
static int sqlite_connections_open(store *s, const char *path) {
    int r = sdb_sqlite_open(&s->db, path, true, STORE_BUSY_TIMEOUT_MS);
    if (r == 0)
        r = sq_exec(s->db,
                    "PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;"
                    "PRAGMA foreign_keys = ON;",
                    "configure database");
    if (r == 0)
        r = migrate(s->db);
    if (r == 0)
        sqlite3_update_hook(sdb_sqlite_handle(s->db), writer_row_changed, s);
    for (size_t i = 0; r == 0 && i < STORE_READERS; i++)
        r = sdb_sqlite_open(&s->readers[i], path, false, STORE_BUSY_TIMEOUT_MS);
    return r;
}

/* Every connection of the pool: the first migrates the database (under the
 * write lock) before the others are opened. A statement waits at most
 * STORE_BUSY_TIMEOUT_MS for a row lock (then FAWN_EBUSY, as on SQLite). */
static int pg_connections_open(store *s, const char *conninfo) {
    int r = 0;
    for (size_t i = 0; r == 0 && i < STORE_PG_CONNECTIONS; i++) {
        r = sdb_pg_open(&s->readers[i], conninfo);
        char set[96];
        snprintf(set, sizeof set,
                 "SET lock_timeout = %d; SET client_min_messages = warning; LISTEN fawn_auth",
                 STORE_BUSY_TIMEOUT_MS);
        if (r == 0)
            r = sq_exec(s->readers[i], set, "configure connection");
        if (r == 0 && i == 0)
            r = migrate(s->readers[0]);
    }
    return r;
}

static store *store_new(sdb_backend kind, size_t pool_size) {
    store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->kind = kind;
    s->pool_size = pool_size;
    pthread_mutex_init(&s->mu, NULL);
    pthread_mutex_init(&s->pool_mu, NULL);
    pthread_cond_init(&s->pool_free, NULL);
    return s;
}

int store_open(store **out, const char *path) {
    *out = NULL;
    int r = make_private(path);
    if (r < 0)
        return r;
    store *s = store_new(SDB_SQLITE, STORE_READERS);
    if (!s)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    r = sqlite_connections_open(s, path);
    if (r < 0) {
        store_close(s);
        return r;
    }
    *out = s;
    return 0;
}

int store_open_postgres(store **out, const char *conninfo) {
    *out = NULL;
    if (!conninfo || !conninfo[0])
        return fawn_err(FAWN_EINVAL, "a PostgreSQL connection string is required");
    store *s = store_new(SDB_POSTGRES, STORE_PG_CONNECTIONS);
    if (!s)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = pg_connections_open(s, conninfo);
    if (r == 0)
        r = sq_watch_start(s, conninfo);
    if (r < 0) {
        store_close(s);
        return r;
    }
    *out = s;
    return 0;
}

void store_close(store *s) {
    if (!s)
        return;
    sq_watch_stop(s);
    for (size_t i = 0; i < STORE_POOL_MAX; i++)
        sdb_close(s->readers[i]);
    sdb_close(s->db);
    pthread_cond_destroy(&s->pool_free);
    pthread_mutex_destroy(&s->pool_mu);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

/* ---- users ---- */

bool sq_text_ok(const char *v, size_t max) { return v && v[0] && strlen(v) <= max; }

void sq_copy_col(char *dst, size_t size, sdb_stmt *st, int col) {
    const char *v = sdb_column_text(st, col);
    snprintf(dst, size, "%s", v ? (const char *)v : "");
}

char *sq_dup_col(sdb_stmt *st, int col) {
    const char *v = sdb_column_text(st, col);
    return v ? strdup((const char *)v) : NULL;
}

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

/* Runs a prepared statement that returns no rows; FAWN_ENOENT when it was
 * expected to change one row and changed none. */
int sq_step_done(sdb *db, sdb_stmt *st, bool must_change, const char *what) {
    int rc = sdb_step(st);
    int changed = sdb_changes(db);
    sdb_finalize(st);
    if (rc != SDB_DONE)
        return sq_err(db, rc, what);
    return must_change && changed == 0 ? fawn_err(FAWN_ENOENT, "%s: no such row", what) : 0;
}

int sq_step_row(sdb *db, sdb_stmt *st, const char *what, const char *missing_fmt, ...) {
    int rc = sdb_step(st);
    if (rc == SDB_ROW)
        return 0;
    if (rc != SDB_DONE)
        return sq_err(db, rc, what);
    char missing[256];
    va_list ap;
    va_start(ap, missing_fmt);
    vsnprintf(missing, sizeof missing, missing_fmt, ap);
    va_end(ap);
    return fawn_err(FAWN_ENOENT, "%s", missing);
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

/* ---- threads ---- */

static const char *const thread_statuses[] = {"idle", "busy", "interrupted", "error"};

/* A column of the thread's newest checkpoint (checkpoints_by_seq finds it). */
#define NEWEST_CHECKPOINT(col)                                                                     \
    "(SELECT " col " FROM checkpoints c WHERE c.owner_id = threads.owner_id AND c.thread_id = "    \
    "threads.id ORDER BY c.seq DESC LIMIT 1)"
#define THREAD_COLUMNS_WITH(title)                                                                 \
    "id, owner_id, status, metadata, created_at_ms, updated_at_ms, " NEWEST_CHECKPOINT(            \
        title) ", " NEWEST_CHECKPOINT("c.created_at_ms")
/* The title of the state, when it is a string. */
#define LITE_TITLE                                                                                 \
    "CASE WHEN json_type(c.state_values, '$.title') = 'text' THEN "                                \
    "json_extract(c.state_values, '$.title') END"
#define PG_TITLE                                                                                   \
    "CASE WHEN jsonb_typeof(c.state_values::jsonb -> 'title') = 'string' THEN "                    \
    "c.state_values::jsonb ->> 'title' END"
/* A query on threads: "SELECT <thread columns> <rest>", in db's dialect. */
#define THREAD_QUERY(db, rest)                                                                     \
    sq_pick(db, "SELECT " THREAD_COLUMNS_WITH(LITE_TITLE) " " rest,                                \
            "SELECT " THREAD_COLUMNS_WITH(PG_TITLE) " " rest)

void store_thread_clear(store_thread *t) {
    free(t->metadata);
    free(t->title);
    memset(t, 0, sizeof *t);
}

static int read_thread(store_thread *t, sdb_stmt *st) {
    memset(t, 0, sizeof *t);
    sq_copy_col(t->id, sizeof t->id, st, 0);
    t->owner_id = sdb_column_int64(st, 1);
    sq_copy_col(t->status, sizeof t->status, st, 2);
    const char *m = sdb_column_text(st, 3);
    t->metadata = strdup(m ? (const char *)m : "{}");
    t->created_at_ms = sdb_column_int64(st, 4);
    t->updated_at_ms = sdb_column_int64(st, 5);
    bool titled = !sdb_column_is_null(st, 6);
    t->title = titled ? sq_dup_col(st, 6) : NULL;
    t->state_updated_at_ms = sdb_column_int64(st, 7);
    return t->metadata && (t->title || !titled) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Whether v nests at most levels objects and arrays deep (a scalar: 0). */
static bool json_nests_within(const json_t *v, int levels) {
    if (!json_is_object(v) && !json_is_array(v))
        return true;
    if (levels == 0)
        return false;
    const char *key;
    json_t *child;
    size_t i;
    json_object_foreach((json_t *)v, key, child) {
        if (!json_nests_within(child, levels - 1))
            return false;
    }
    json_array_foreach(v, i, child) {
        if (!json_nests_within(child, levels - 1))
            return false;
    }
    return true;
}

/* A metadata text must be a JSON object within STORE_METADATA_MAX and
 * STORE_JSON_DEPTH_MAX. */
static int check_metadata(const char *metadata) {
    if (!metadata)
        return 0;
    size_t n = strlen(metadata);
    if (n > STORE_METADATA_MAX)
        return fawn_err(FAWN_E2BIG, "metadata is larger than %d bytes", STORE_METADATA_MAX);
    json_t *o = NULL;
    int r = fjson_parse_object(&o, metadata, n);
    bool shallow = json_nests_within(o, STORE_JSON_DEPTH_MAX);
    json_decref(o);
    if (r < 0)
        return fawn_err(FAWN_EINVAL, "metadata must be a JSON object");
    return shallow
               ? 0
               : fawn_err(FAWN_E2BIG, "metadata nests deeper than %d levels", STORE_JSON_DEPTH_MAX);
}

static int check_thread_args(const char *id, const char *metadata) {
    if (!fawn_id_valid(id))
        return fawn_err(FAWN_EINVAL, "thread id must match [A-Za-z0-9_-]{1,64}");
    return check_metadata(metadata);
}

static int thread_get_on(sdb *db, store_thread *out, int64_t owner_id, const char *id) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st, THREAD_QUERY(db, "FROM threads WHERE id = ?1 AND owner_id = ?2"));
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, id);
    sdb_bind_int64(st, 2, owner_id);
    r = sq_step_row(db, st, "get thread", "no such thread: %s", id);
    if (r == 0)
        r = read_thread(out, st);
    sdb_finalize(st);
    return r;
}

int store_thread_create(store *s, store_thread *out, bool *existed, int64_t owner_id,
                        const char *id, const char *metadata) {
    *out = (store_thread){0};
    *existed = false;
    int r = check_thread_args(id, metadata);
    if (r < 0)
        return r;
    sdb_stmt *st;
    int64_t now = fawn_wall_ms();
    sdb *db = sq_write_begin(s);
    r = sq_prepare(db, &st,
                   "INSERT INTO threads (id, owner_id, metadata, created_at_ms, updated_at_ms) "
                   "VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT(owner_id, id) DO NOTHING");
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, owner_id);
        sdb_bind_text(st, 3, metadata ? metadata : "{}");
        sdb_bind_int64(st, 4, now);
        int rc = sdb_step(st);
        *existed = sdb_changes(db) == 0;
        sdb_finalize(st);
        r = rc == SDB_DONE ? 0 : sq_err(db, rc, "create thread");
    }
    if (r == 0)
        r = thread_get_on(db, out, owner_id, id);
    sq_write_end(s, db);
    return r;
}

int store_thread_get(store *s, store_thread *out, int64_t owner_id, const char *id) {
    *out = (store_thread){0};
    if (!fawn_id_valid(id))
        return fawn_err(FAWN_ENOENT, "no such thread");
    sdb *db = sq_read_begin(s);
    int r = thread_get_on(db, out, owner_id, id);
    sq_read_end(s, db);
    return r;
}

/* Updates one column of the owner's thread (and updated_at). */
static int thread_update(store *s, int64_t owner_id, const char *id, const char *sql,
                         const char *value, const char *what) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, sql);
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, owner_id);
        sdb_bind_text(st, 3, value);
        sdb_bind_int64(st, 4, fawn_wall_ms());
        r = sq_step_done(db, st, true, what);
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "no such thread: %s", id) : r;
}

int store_thread_set_metadata(store *s, int64_t owner_id, const char *id, const char *metadata) {
    int r = check_thread_args(id, metadata);
    if (r == 0 && !metadata)
        r = fawn_err(FAWN_EINVAL, "metadata is required");
    return r < 0 ? r
                 : thread_update(s, owner_id, id,
                                 "UPDATE threads SET metadata = ?3, updated_at_ms = ?4 "
                                 "WHERE id = ?1 AND owner_id = ?2",
                                 metadata, "set metadata");
}

int store_thread_set_status(store *s, int64_t owner_id, const char *id, const char *status) {
    bool known = false;
    for (size_t i = 0; status && i < ARRAY_LEN(thread_statuses) && !known; i++)
        known = strcmp(status, thread_statuses[i]) == 0;
    if (!known)
        return fawn_err(FAWN_EINVAL, "status must be idle, busy, interrupted or error");
    return thread_update(s, owner_id, id,
                         "UPDATE threads SET status = ?3, updated_at_ms = ?4 "
                         "WHERE id = ?1 AND owner_id = ?2",
                         status, "set status");
}

int store_thread_delete(store *s, int64_t owner_id, const char *id) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "DELETE FROM threads WHERE id = ?1 AND owner_id = ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, owner_id);
        r = sq_step_done(db, st, true, "delete thread");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "no such thread: %s", id) : r;
}

/* A metadata match is bounded (store.h), and the keys it names go into a
 * JSON path, quoted: no quotes, backslashes or control characters. */
static int check_match(const char *match) {
    size_t len = strlen(match);
    if (len > STORE_MATCH_MAX)
        return fawn_err(FAWN_E2BIG, "the metadata to match is larger than %d bytes",
                        STORE_MATCH_MAX);
    json_t *o = NULL;
    int r = fjson_parse_object(&o, match, len);
    if (r == 0 && json_object_size(o) > STORE_MATCH_KEYS_MAX)
        r = fawn_err(FAWN_E2BIG, "the metadata to match names more than %d keys",
                     STORE_MATCH_KEYS_MAX);
    if (r == 0 && !json_nests_within(o, STORE_JSON_DEPTH_MAX))
        r = fawn_err(FAWN_E2BIG, "the metadata to match nests deeper than %d levels",
                     STORE_JSON_DEPTH_MAX);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        (void)v;
        for (const char *c = key; r == 0 && *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
                r = fawn_err(FAWN_EINVAL, "metadata keys to match must not hold quotes, "
                                          "backslashes or control characters");
    }
    json_decref(o);
    return r;
}

/* Every key of the match object equals the thread's value (JSON types
 * too). The match is parsed once per search (the materialized m), not once
 * per thread. */
#define LITE_MATCH_CTE "WITH m AS MATERIALIZED (SELECT key, value, type FROM json_each(?2)) "
#define LITE_MATCH_CLAUSE                                                                          \
    "NOT EXISTS (SELECT 1 FROM m WHERE "                                                           \
    "json_extract(threads.metadata, '$.\"' || m.key || '\"') IS NOT m.value "                      \
    "OR json_type(threads.metadata, '$.\"' || m.key || '\"') IS NOT m.type)"
#define PG_MATCH_CTE "WITH m AS MATERIALIZED (SELECT key, value FROM jsonb_each(?2::jsonb)) "
#define PG_MATCH_CLAUSE                                                                            \
    "NOT EXISTS (SELECT 1 FROM m WHERE "                                                           \
    "(threads.metadata::jsonb -> m.key) IS DISTINCT FROM m.value)"

/* A search's ids are a JSON array of at most STORE_SEARCH_IDS_MAX thread ids. */
static int check_ids(const char *ids) {
    json_t *list = json_loads(ids, 0, NULL);
    int r = json_is_array(list) ? 0 : fawn_err(FAWN_EINVAL, "the ids to search are not a list");
    if (r == 0 && json_array_size(list) > STORE_SEARCH_IDS_MAX)
        r = fawn_err(FAWN_E2BIG, "a search names at most %d ids", STORE_SEARCH_IDS_MAX);
    size_t i;
    json_t *id;
    json_array_foreach(r == 0 ? list : NULL, i, id) {
        if (!json_is_string(id) || !fawn_id_valid(json_string_value(id)))
            r = fawn_err(FAWN_EINVAL, "thread ids to search must match [A-Za-z0-9_-]{1,64}");
    }
    json_decref(list);
    return r;
}

int store_thread_search(store *s, store_thread **out, size_t *n, int64_t owner_id,
                        const char *match, const char *status, const char *ids, size_t limit,
                        size_t offset) {
    *out = NULL;
    *n = 0;
    int r = match ? check_match(match) : 0;
    if (r == 0 && ids)
        r = check_ids(ids);
    if (r < 0)
        return r;
    limit = limit < 1 ? 1 : limit > STORE_SEARCH_MAX ? STORE_SEARCH_MAX : limit;
    store_thread *rows = calloc(limit, sizeof *rows);
    if (!rows)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    r = sq_prepare(
        db, &st,
        sq_pick(
            db,
            LITE_MATCH_CTE "SELECT " THREAD_COLUMNS_WITH(
                LITE_TITLE) " FROM threads WHERE "
                            "owner_id = ?1 AND (?3 IS NULL OR status = ?3) AND (?2 IS NULL "
                            "OR " LITE_MATCH_CLAUSE ") AND (?6 IS NULL OR id IN (SELECT value FROM "
                            "json_each(?6))) ORDER BY updated_at_ms DESC, id LIMIT ?4 OFFSET ?5",
            PG_MATCH_CTE "SELECT " THREAD_COLUMNS_WITH(
                PG_TITLE) " FROM threads WHERE "
                          "owner_id = ?1 AND (?3::text IS NULL OR status = ?3) AND (?2::jsonb "
                          "IS NULL OR " PG_MATCH_CLAUSE ") AND (?6::jsonb IS NULL OR id IN "
                          "(SELECT jsonb_array_elements_text(?6::jsonb))) "
                          "ORDER BY updated_at_ms DESC, id LIMIT ?4 OFFSET ?5"));
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        sdb_bind_text(st, 2, match);
        sdb_bind_text(st, 3, status);
        sdb_bind_int64(st, 4, (int64_t)limit);
        sdb_bind_int64(st, 5, (int64_t)offset);
        sdb_bind_text(st, 6, ids);
        int rc;
        while (r == 0 && (rc = sdb_step(st)) == SDB_ROW && *n < limit)
            r = read_thread(&rows[(*n)++], st);
        if (r == 0 && rc != SDB_DONE && rc != SDB_ROW)
            r = sq_err(db, rc, "search threads");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0) {
        for (size_t i = 0; i < *n; i++)
            store_thread_clear(&rows[i]);
        free(rows);
        *n = 0;
        return r;
    }
    *out = rows;
    return 0;
}

/* ---- lists of rows ---- */

/* Steps st (the caller finalizes it) and appends each row, read by read
 * into a row_size struct, to rows. */
int sq_rows_read(sdb *db, fbuf *rows, sdb_stmt *st, size_t row_size, sq_row_reader read,
                 const char *what) {
    void *row = malloc(row_size);
    int r = row ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    int rc = SDB_DONE;
    while (r == 0 && (rc = sdb_step(st)) == SDB_ROW) {
        read(row, st);
        r = fbuf_append(rows, row, row_size);
    }
    if (r == 0 && rc != SDB_DONE)
        r = sq_err(db, rc, what);
    free(row);
    return r;
}

/* Hands rows to the caller as an array of *n (r == 0), or frees them. */
int sq_rows_hand_out(void **out, size_t *n, fbuf *rows, size_t row_size, int r) {
    if (r < 0) {
        fbuf_free(rows);
        return r;
    }
    *n = rows->len / row_size;
    *out = fbuf_steal(rows);
    return 0;
}

/* ---- sandboxes and fences ---- */

/* Binds the text arguments of a statement from ?1 on. */
void sq_bind_texts(sdb_stmt *st, const char *const *texts, size_t n) {
    for (size_t i = 0; i < n; i++)
        sdb_bind_text(st, (int)i + 1, texts[i]);
}

/* Prepares sql, binds texts and runs it under the lock. */
int sq_exec_texts(store *s, const char *sql, const char *const *texts, size_t n, bool must_change,
                  const char *what) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, sql);
    if (r == 0) {
        sq_bind_texts(st, texts, n);
        r = sq_step_done(db, st, must_change, what);
    }
    sq_write_end(s, db);
    return r;
}

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
