/* What the SQLite store's files share (store.h is the contract; no other
 * module includes this). Every helper expects the caller to hold s->mu. */
#ifndef FAWN_STORE_SQLITE_INTERNAL_H
#define FAWN_STORE_SQLITE_INTERNAL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>

#include "store/store.h"

struct store {
    sqlite3 *db;
    pthread_mutex_t mu;
};

/* A FAWN_E* code and message for SQLite result rc: busy/locked →
 * FAWN_EBUSY, constraint → FAWN_EEXIST, else FAWN_EIO ("what: detail"). */
int sq_err(store *s, int rc, const char *what);
/* Runs sql (several statements allowed), no rows expected. */
int sq_exec(store *s, const char *sql, const char *what);
/* Prepares one statement (the caller finalizes it). */
int sq_prepare(store *s, sqlite3_stmt **st, const char *sql);
/* Runs and finalizes a statement that returns no rows; FAWN_ENOENT when
 * must_change and no row changed. */
int sq_step_done(store *s, sqlite3_stmt *st, bool must_change, const char *what);
/* v is non-empty and at most max bytes. */
bool sq_text_ok(const char *v, size_t max);
/* Copies a text column into dst (size bytes, always terminated; "" for NULL). */
void sq_copy_col(char *dst, size_t size, sqlite3_stmt *st, int col);

/* Reads one row of a query into a row struct. */
typedef void (*sq_row_reader)(void *row, sqlite3_stmt *st);
/* Steps st (the caller finalizes it), appending each row, read by read into
 * a row_size struct, to rows. */
int sq_rows_read(store *s, fbuf *rows, sqlite3_stmt *st, size_t row_size, sq_row_reader read,
                 const char *what);
/* Hands rows to the caller as an array of *n (when r == 0) or frees them;
 * returns r. */
int sq_rows_hand_out(void **out, size_t *n, fbuf *rows, size_t row_size, int r);
/* Binds texts[0..n) to ?1..?n (static: they must outlive the statement). */
void sq_bind_texts(sqlite3_stmt *st, const char *const *texts, size_t n);
/* Prepares sql, binds texts, runs it under s->mu (the one helper that
 * locks). */
int sq_exec_texts(store *s, const char *sql, const char *const *texts, size_t n,
                  bool must_change, const char *what);

#endif
