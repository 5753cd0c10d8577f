/* What the store's files share (store.h is the contract; no other module
 * includes this). The store's queries are written once, over the driver
 * layer of db.h, and run on SQLite or PostgreSQL (store.backend).
 *
 * SQLite:
 * Connections: one writer and a small pool of read-only readers on the
 * same WAL database. Every function that changes the database takes the
 * writer (sq_write_begin: its mutex serializes writes, and a read that must
 * see its own write in the same step); every function that only reads takes
 * a reader (sq_read_begin). WAL lets readers proceed while the writer
 * commits and while other readers run, so one long query holds one reader,
 * not the store. The helpers below take the connection they run on and
 * expect the caller to hold it. */
#ifndef FAWN_STORE_SQLITE_INTERNAL_H
#define FAWN_STORE_SQLITE_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"
#include "store/db.h"
#include "store/store.h"

/* Read-only connections: a request thread holds one for one query, so a
 * few keep every reader of a small gateway going while one search or
 * history read runs long, without a cache per connection each (SQLite's
 * page cache is per connection). */
#define STORE_READERS 4
/* PostgreSQL connections of one store, each used for reads and writes: a
 * few more than SQLite's readers, as writes run side by side too, and few
 * enough that several gateways stay well inside the server's default
 * max_connections (100). */
#define STORE_PG_CONNECTIONS 6
#define STORE_POOL_MAX (STORE_PG_CONNECTIONS > STORE_READERS ? STORE_PG_CONNECTIONS : STORE_READERS)

struct store {
    sdb_backend kind;
    sdb *db;            /* SQLite: the writer (PostgreSQL: NULL) */
    pthread_mutex_t mu; /* held while the writer is in use */
    /* SQLite: read-only connections; PostgreSQL: every connection */
    sdb *readers[STORE_POOL_MAX];
    bool reader_busy[STORE_POOL_MAX];
    size_t pool_size;
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_free; /* a reader was handed back */
    /* Set (under mu) when the writer's statement changed auth_generation;
     * sq_write_end, after the commit, turns it into auth_changes. */
    bool auth_dirty;
    /* store_auth_changes: moves by 2 per change; odd while another
     * process's changes cannot be watched (sq_watch_start) */
    _Atomic uint64_t auth_changes;
    _Atomic uint64_t operations; /* store_operations */
    struct sq_watch *watch;      /* PostgreSQL: the auth watcher, or NULL */
};

/* Counts a change of the auth generation (store_auth_changes). */
void sq_auth_changed(store *s);
/* PostgreSQL: starts the auth watcher (store_watch.c): a connection of
 * its own that LISTENs on fawn_auth and a thread that counts each
 * notification with sq_auth_changed as it arrives, so that a revocation
 * committed by another gateway reaches this store's auth cache without
 * waiting for a query. While that connection is down (it is opened again
 * every STORE_WATCH_RETRY_MS), auth_changes is odd: store_auth_changes
 * then answers a new number each call and no cached credential is fresh.
 * FAWN_EIO when the first connection fails, FAWN_ENOMEM. */
FAWN_MUST_CHECK int sq_watch_start(store *s, const char *conninfo);
/* Waits until every store watching the database (each a watcher
 * connection the server lists as open) has seen the auth generation as it
 * is now, STORE_WATCH_ACK_WAIT_MS at most: called after this store's own
 * change committed, so that when the change's caller answers its client,
 * every other gateway already refuses what it revoked. Failures and the
 * time limit are logged, not returned: the change has committed, and the
 * caches' recheck bounds what a late gateway misses. */
void sq_watch_acks_wait(store *s);
/* Stops and frees the watcher (none is fine). */
void sq_watch_stop(store *s);

/* A connection to change the database with: SQLite's writer, with s->mu
 * held until sq_write_end, which (the transaction being over by then)
 * counts a change of the auth generation; on PostgreSQL one of the pool (writes from
 * several connections and gateways run at once: a read-modify-write is one
 * statement or a transaction begun with sq_begin_write). */
sdb *sq_write_begin(store *s);
void sq_write_end(store *s, sdb *db);
/* A connection of the pool for reading (waits until one is free); hand it
 * back with sq_read_end. */
sdb *sq_read_begin(store *s);
void sq_read_end(store *s, sdb *db);

/* The text for db's backend: SQLite's or PostgreSQL's. The one place a
 * query's dialect is chosen. */
const char *sq_pick(sdb *db, const char *sqlite_sql, const char *pg_sql);
/* Begins a write transaction: SQLite's BEGIN IMMEDIATE (the database's
 * write lock); on PostgreSQL BEGIN and the store's advisory write lock,
 * which every write transaction of every gateway takes: transactions that
 * read, decide and write run one at a time, as on SQLite. */
FAWN_MUST_CHECK int sq_begin_write(sdb *db, const char *what);
/* Begins a read-only transaction that sees one snapshot throughout. */
FAWN_MUST_CHECK int sq_begin_read(sdb *db, const char *what);

/* A FAWN_E* code and message for a driver's error class rc on db (NULL:
 * no connection): busy → FAWN_EBUSY, constraint → FAWN_EEXIST, else
 * FAWN_EIO ("what: detail"). */
FAWN_MUST_CHECK int sq_err(sdb *db, int rc, const char *what);
/* Runs sql (several statements allowed), no rows expected. */
FAWN_MUST_CHECK int sq_exec(sdb *db, const char *sql, const char *what);
/* Prepares one statement (the caller finalizes it). */
FAWN_MUST_CHECK int sq_prepare(sdb *db, sdb_stmt **st, const char *sql);
/* Runs and finalizes a statement that returns no rows; FAWN_ENOENT when
 * must_change and no row changed. */
FAWN_MUST_CHECK int sq_step_done(sdb *db, sdb_stmt *st, bool must_change, const char *what);
/* Steps st to the one row it looks for: 0 on a row (the caller reads it
 * from st), FAWN_ENOENT with the message missing_fmt makes when there is
 * none, the database's error (saying what failed) otherwise. */
FAWN_MUST_CHECK int sq_step_row(sdb *db, sdb_stmt *st, const char *what, const char *missing_fmt,
                                ...) __attribute__((format(printf, 4, 5)));
/* Ends the transaction begun on db: COMMIT when r == 0, else ROLLBACK (and
 * r, the first error, is kept). Returns the result. */
FAWN_MUST_CHECK int sq_end_transaction(sdb *db, int r);
/* v is non-empty and at most max bytes. */
bool sq_text_ok(const char *v, size_t max);
/* Copies a text column into dst (size bytes, always terminated; "" for NULL). */
void sq_copy_col(char *dst, size_t size, sdb_stmt *st, int col);
/* A text column as a new string (NULL for NULL, and when memory ran out). */
char *sq_dup_col(sdb_stmt *st, int col);

/* Reads one row of a query into a row struct. */
typedef void (*sq_row_reader)(void *row, sdb_stmt *st);
/* Steps st (the caller finalizes it), appending each row, read by read into
 * a row_size struct, to rows. */
FAWN_MUST_CHECK int sq_rows_read(sdb *db, fbuf *rows, sdb_stmt *st, size_t row_size,
                                 sq_row_reader read, const char *what);
/* Hands rows to the caller as an array of *n (when r == 0) or frees them;
 * returns r. */
FAWN_MUST_CHECK int sq_rows_hand_out(void **out, size_t *n, fbuf *rows, size_t row_size, int r);
/* Binds texts[0..n) to ?1..?n (static: they must outlive the statement). */
void sq_bind_texts(sdb_stmt *st, const char *const *texts, size_t n);
/* Prepares sql, binds texts and runs it on the writer (the one helper that
 * takes a connection itself). */
FAWN_MUST_CHECK int sq_exec_texts(store *s, const char *sql, const char *const *texts, size_t n,
                                  bool must_change, const char *what);

/* Migration 6's step over the data (store_state.c), on the writer inside
 * the migration's transaction: the messages of every checkpoint and every
 * stored values event become message rows of their thread, the checkpoint
 * lists them as spans and the event holds the state's reference. */
FAWN_MUST_CHECK int sq_state_migrate_messages(sdb *db);

/* Ends the unfinished runs that `where` names (an SQL condition on runs'
 * columns, with arg bound to ?1), inside the caller's write transaction:
 * an error event (reason) and an end event after each one's last stored
 * event, their threads idle, their status error with reason. *n is how
 * many runs ended. store_run_abandon_unfinished's and store_gateway_reap's
 * one way of ending a run no gateway will finish. */
FAWN_MUST_CHECK int sq_runs_end(sdb *db, size_t *n, const char *where, const char *arg,
                                const char *reason);

/* Numbered migrations (store_migrations.c): sq_migrations[i] brings a
 * database from version i to i + 1: its SQL, then (when not NULL) a step
 * over the data, in the same transaction. Append only; never edit one
 * that has shipped. */
typedef struct sq_migration {
    const char *sql; /* SQLite's */
    int (*data)(sdb *db);
    /* PostgreSQL's, where it is more than sq_pg_ddl(sql): the same tables,
     * columns and keys; NULL when sq_pg_ddl says it */
    const char *pg;
} sq_migration;
extern const sq_migration sq_migrations[];
extern const size_t sq_migrations_count;

/* PostgreSQL's DDL for sqlite_ddl (store_ddl.c), in *out (caller frees):
 * INTEGER is BIGINT (a rowid alias, INTEGER PRIMARY KEY [AUTOINCREMENT],
 * an identity), REAL is DOUBLE PRECISION, json_valid(c) is c::jsonb IS
 * NOT NULL, c COLLATE NOCASE is lower(c), `user` is quoted, WITHOUT ROWID
 * goes, and the tables listed in insertion order get a rowid identity
 * column, as SQLite's rowid. Literals are copied as they are. */
int sq_pg_ddl(char **out, const char *sqlite_ddl);

#endif
