/* db.h over SQLite: a thin pass-through to the sqlite3 API, but for its
 * statements: each connection keeps the ones it prepared, and a statement
 * of the same SQL prepared again takes a kept one that is not in use
 * instead of parsing the SQL anew. A finalized kept statement is reset and
 * its bindings cleared for the next use. SQLite prepares a kept statement
 * again by itself when the schema changed under it. */
#include <pthread.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/db_driver.h"

/* Statements one connection keeps (the store has about 300). */
#define LITE_KEPT_MAX 512

/* A statement a connection keeps, by its SQL. */
typedef struct lite_kept {
    uint64_t hash;
    char *sql;
    sqlite3_stmt *h;
    bool in_use;
} lite_kept;

typedef struct lite {
    sdb base;
    sqlite3 *h;
    lite_kept kept[LITE_KEPT_MAX];
    size_t nkept;
} lite;

typedef struct lite_stmt {
    sdb_stmt base;
    sqlite3_stmt *h;
    lite_kept *kept; /* NULL: the statement is the caller's alone */
} lite_stmt;

static sqlite3 *H(sdb *db) { return ((lite *)db)->h; }
static sqlite3_stmt *S(sdb_stmt *st) { return ((lite_stmt *)st)->h; }

/* SQLite's primary result codes are db.h's classes where they match. */
static int lite_class(int rc) {
    switch (rc & 0xff) {
    case SQLITE_OK:
    case SQLITE_ROW:
    case SQLITE_DONE: return rc & 0xff;
    case SQLITE_BUSY:
    case SQLITE_LOCKED: return SDB_BUSY;
    case SQLITE_CONSTRAINT: return SDB_CONSTRAINT;
    default: return SDB_ERROR;
    }
}

static void lite_close(sdb *d) {
    lite *db = (lite *)d;
    for (size_t i = 0; i < db->nkept; i++) {
        sqlite3_finalize(db->kept[i].h);
        free(db->kept[i].sql);
    }
    sqlite3_close(db->h);
    free(db);
}

static int lite_exec(sdb *db, const char *sql) {
    return lite_class(sqlite3_exec(H(db), sql, NULL, NULL, NULL));
}

static const sdb_ops lite_ops;

/* A kept statement of sql not in use, taken for the caller; NULL if none. */
static lite_kept *lite_kept_take(lite *db, const char *sql, uint64_t hash) {
    for (size_t i = 0; i < db->nkept; i++) {
        lite_kept *k = &db->kept[i];
        if (!k->in_use && k->hash == hash && strcmp(k->sql, sql) == 0) {
            k->in_use = true;
            return k;
        }
    }
    return NULL;
}

/* Keeps h, prepared from sql and in use by the caller; NULL when the
 * connection keeps as many as it may (or out of memory): h stays the
 * caller's alone. */
static lite_kept *lite_kept_add(lite *db, const char *sql, uint64_t hash, sqlite3_stmt *h) {
    char *copy = db->nkept < LITE_KEPT_MAX ? strdup(sql) : NULL;
    if (!copy)
        return NULL;
    lite_kept *k = &db->kept[db->nkept++];
    *k = (lite_kept){.hash = hash, .sql = copy, .h = h, .in_use = true};
    return k;
}

static int lite_prepare(sdb *d, sdb_stmt **out, const char *sql) {
    lite *db = (lite *)d;
    lite_stmt *st = calloc(1, sizeof *st);
    if (!st)
        return SDB_ERROR;
    uint64_t hash = sdb_sql_hash(sql);
    st->kept = lite_kept_take(db, sql, hash);
    if (st->kept) {
        st->h = st->kept->h;
    } else {
        int rc = sqlite3_prepare_v3(db->h, sql, -1, SQLITE_PREPARE_PERSISTENT, &st->h, NULL);
        if (rc != SQLITE_OK) {
            free(st);
            return lite_class(rc);
        }
        st->kept = lite_kept_add(db, sql, hash, st->h);
    }
    st->base.ops = &lite_ops;
    *out = &st->base;
    return SDB_OK;
}

static void lite_bind_text(sdb_stmt *st, int i, const char *v) {
    sqlite3_bind_text(S(st), i, v, -1, SQLITE_TRANSIENT);
}
static void lite_bind_int64(sdb_stmt *st, int i, int64_t v) { sqlite3_bind_int64(S(st), i, v); }
static void lite_bind_double(sdb_stmt *st, int i, double v) { sqlite3_bind_double(S(st), i, v); }
static void lite_bind_null(sdb_stmt *st, int i) { sqlite3_bind_null(S(st), i); }
static int lite_bind_count(sdb_stmt *st) { return sqlite3_bind_parameter_count(S(st)); }
static int lite_step(sdb_stmt *st) { return lite_class(sqlite3_step(S(st))); }
static void lite_reset(sdb_stmt *st) { sqlite3_reset(S(st)); }
static void lite_finalize(sdb_stmt *s) {
    lite_stmt *st = (lite_stmt *)s;
    if (st->kept) {
        sqlite3_reset(st->h);
        sqlite3_clear_bindings(st->h);
        st->kept->in_use = false;
    } else {
        sqlite3_finalize(st->h);
    }
    free(st);
}
static const char *lite_column_text(sdb_stmt *st, int col) {
    return (const char *)sqlite3_column_text(S(st), col);
}
static int64_t lite_column_int64(sdb_stmt *st, int col) { return sqlite3_column_int64(S(st), col); }
static double lite_column_double(sdb_stmt *st, int col) {
    return sqlite3_column_double(S(st), col);
}
static bool lite_column_is_null(sdb_stmt *st, int col) {
    return sqlite3_column_type(S(st), col) == SQLITE_NULL;
}
static int64_t lite_changes(sdb *db) { return sqlite3_changes(H(db)); }
static const char *lite_errmsg(sdb *db) { return sqlite3_errmsg(H(db)); }
static bool lite_error_is_foreign_key(sdb *db) {
    return sqlite3_extended_errcode(H(db)) == SQLITE_CONSTRAINT_FOREIGNKEY;
}

static bool lite_notified(sdb *db) { return false; }

static const sdb_ops lite_ops = {
    .kind = SDB_SQLITE,
    .close = lite_close,
    .exec = lite_exec,
    .prepare = lite_prepare,
    .bind_text = lite_bind_text,
    .bind_int64 = lite_bind_int64,
    .bind_double = lite_bind_double,
    .bind_null = lite_bind_null,
    .bind_count = lite_bind_count,
    .step = lite_step,
    .reset = lite_reset,
    .finalize = lite_finalize,
    .column_text = lite_column_text,
    .column_int64 = lite_column_int64,
    .column_double = lite_column_double,
    .column_is_null = lite_column_is_null,
    .changes = lite_changes,
    .errmsg = lite_errmsg,
    .error_is_foreign_key = lite_error_is_foreign_key,
    .notified = lite_notified,
};

/* SQLite's count of its own memory takes one mutex, shared by every
 * connection, at each allocation; nothing here reads that count. Turned
 * off before SQLite starts (later, SQLite refuses and nothing changes). */
static void lite_configure(void) { sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0); }

int sdb_sqlite_open(sdb **out, const char *path, bool writable, int busy_timeout_ms) {
    static pthread_once_t configured = PTHREAD_ONCE_INIT;
    pthread_once(&configured, lite_configure);
    *out = NULL;
    lite *db = calloc(1, sizeof *db);
    if (!db)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    db->base.ops = &lite_ops;
    int flags = (writable ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE : SQLITE_OPEN_READONLY) |
                SQLITE_OPEN_FULLMUTEX | SQLITE_OPEN_NOFOLLOW;
    int rc = sqlite3_open_v2(path, &db->h, flags, NULL);
    if (rc != SQLITE_OK) {
        int r = fawn_err(lite_class(rc) == SDB_BUSY ? FAWN_EBUSY : FAWN_EIO, "open database: %s",
                         db->h ? sqlite3_errmsg(db->h) : sqlite3_errstr(rc));
        lite_close(&db->base);
        return r;
    }
    sqlite3_busy_timeout(db->h, busy_timeout_ms);
    *out = &db->base;
    return 0;
}

sqlite3 *sdb_sqlite_handle(sdb *db) { return H(db); }
