/* The store's driver layer: what the store's queries need from a database,
 * over SQLite (db_sqlite.c) and PostgreSQL through libpq (db_pg.c). The
 * store's files write each query once against this interface; only the
 * schema's DDL and a few expressions differ per backend (sq_dialect).
 *
 * Statements are written in SQLite's parameter style, `?N` (or `?`, numbered
 * in order); the PostgreSQL driver rewrites them to `$N` outside quoted
 * text. A statement is prepared, bound, stepped row by row and finalized,
 * like an sqlite3_stmt:
 *
 *     sdb_stmt *st;
 *     int r = sq_prepare(db, &st, "SELECT a, b FROM t WHERE id = ?1");
 *     sdb_bind_int64(st, 1, id);
 *     while ((rc = sdb_step(st)) == SDB_ROW) ... sdb_column_text(st, 0) ...
 *     sdb_finalize(st);
 *
 * sdb_step answers SDB_ROW (a row is readable), SDB_DONE, or an error class
 * (SDB_BUSY, SDB_CONSTRAINT, SDB_ERROR) whose text sdb_errmsg tells until
 * the connection's next statement; sq_err turns it into a FAWN_E* code.
 * A connection is used by one thread at a time (the store's pool hands it
 * out). Bound texts are copied. */
#ifndef FAWN_STORE_DB_H
#define FAWN_STORE_DB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sdb sdb;
typedef struct sdb_stmt sdb_stmt;

typedef enum sdb_backend { SDB_SQLITE, SDB_POSTGRES } sdb_backend;

/* Step and exec answers (the values are SQLite's, so its driver passes
 * them through). */
enum {
    SDB_OK = 0,
    SDB_ERROR = 1,
    SDB_BUSY = 5,        /* locked by another writer, deadlock, serialization failure */
    SDB_CONSTRAINT = 19, /* a unique, foreign key, not null or check constraint */
    SDB_ROW = 100,
    SDB_DONE = 101,
};

/* Opens a SQLite connection to path (created when create), read-only when
 * !writable; FAWN_EIO (message set) on failure. *out is closed with
 * sdb_close. */
int sdb_sqlite_open(sdb **out, const char *path, bool writable, int busy_timeout_ms);
/* The sqlite3 handle of a SQLite connection (for tests that hook it). */
struct sqlite3 *sdb_sqlite_handle(sdb *db);
/* Opens a PostgreSQL connection from a libpq conninfo string. */
int sdb_pg_open(sdb **out, const char *conninfo);
/* The server process of a PostgreSQL connection: what a notification it
 * sends names as its sender. */
int sdb_pg_backend_pid(sdb *db);
/* Re-establishes db when the server closed it while it sat idle in its
 * pool (a restart, a failover, a cut network): its next statement then
 * runs instead of failing. Call it only between transactions. */
void sdb_pg_revive_idle(sdb *db);
/* Whether a notification sent by this PostgreSQL connection's own
 * transaction came back to it (it LISTENs on the channel) since the last
 * call: its change has committed. */
bool sdb_pg_notified_self(sdb *db);
/* Waits on a PostgreSQL connection that LISTENs and runs no statement:
 * 1 when a notification sent by a server process other than ignore[0..n)
 * arrived, 0 when wake_fd became readable or timeout_ms (-1: no limit)
 * passed first (or only ignored senders notified), FAWN_EIO (message set)
 * when the connection is lost. What arrived is taken: sdb_notified does
 * not see it again. */
int sdb_pg_wait(sdb *db, const int *ignore, size_t n, int wake_fd, int timeout_ms);
/* Closes db (NULL is fine); unfinished statements must be finalized first. */
void sdb_close(sdb *db);
sdb_backend sdb_kind(const sdb *db);

/* Runs sql (several statements allowed, no parameters, rows ignored):
 * SDB_OK or an error class. */
int sdb_exec(sdb *db, const char *sql);
/* Prepares one statement: SDB_OK (with *st) or an error class. */
int sdb_prepare(sdb *db, sdb_stmt **st, const char *sql);
/* Parameters, from 1. A NULL text binds NULL (a text NULL on PostgreSQL,
 * where `?1 IS NULL` needs a type; sdb_bind_null's NULL takes the type of
 * its place, e.g. an integer column). */
void sdb_bind_text(sdb_stmt *st, int i, const char *v);
void sdb_bind_int64(sdb_stmt *st, int i, int64_t v);
void sdb_bind_double(sdb_stmt *st, int i, double v);
void sdb_bind_null(sdb_stmt *st, int i);
/* How many parameters the statement takes. */
int sdb_bind_count(sdb_stmt *st);
/* The next row: SDB_ROW, SDB_DONE or an error class. */
int sdb_step(sdb_stmt *st);
/* Makes st runnable again from its first row, keeping its bindings. */
void sdb_reset(sdb_stmt *st);
/* Frees st (NULL is fine). */
void sdb_finalize(sdb_stmt *st);
/* Columns of the current row, from 0. A text is valid until the next step
 * (NULL for SQL NULL); numbers of a NULL are 0; booleans read as 0 or 1. */
const char *sdb_column_text(sdb_stmt *st, int col);
int64_t sdb_column_int64(sdb_stmt *st, int col);
double sdb_column_double(sdb_stmt *st, int col);
bool sdb_column_is_null(sdb_stmt *st, int col);
/* Rows the connection's last finished statement inserted, updated or
 * deleted. */
int64_t sdb_changes(sdb *db);
/* The last error's text, and whether it was a foreign key violation. */
const char *sdb_errmsg(sdb *db);
/* Whether a notification (PostgreSQL's NOTIFY, on a channel the connection
 * LISTENs to) arrived since the last call; SQLite: never. */
bool sdb_notified(sdb *db);
bool sdb_error_is_foreign_key(sdb *db);

#endif
