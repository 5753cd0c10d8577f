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
#include <libgen.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/fsx.h"
#include "store/store_internal.h"

/* How long a statement waits for another process's lock before FAWN_EBUSY. */
#define STORE_BUSY_TIMEOUT_MS 5000
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

/* ---- statement helpers ---- */

bool sq_text_ok(const char *v, size_t max) { return v && v[0] && strlen(v) <= max; }

void sq_copy_col(char *dst, size_t size, sdb_stmt *st, int col) {
    const char *v = sdb_column_text(st, col);
    snprintf(dst, size, "%s", v ? (const char *)v : "");
}

char *sq_dup_col(sdb_stmt *st, int col) {
    const char *v = sdb_column_text(st, col);
    return v ? strdup((const char *)v) : NULL;
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
