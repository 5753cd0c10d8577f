/* Sign-in throttling (store.h): one row per client address with attempts
 * in its counting window or a lockout not yet over. An attempt is one write
 * transaction, on every backend the database's one write lock: read the
 * row, decide, write it back, prune. */
#include <string.h>

#include "store/store_internal.h"

typedef struct signin_row {
    int64_t attempts; /* in the window that began at window_start_s */
    int64_t window_start_s;
    int64_t locked_until_s;
} signin_row;

/* The rule's one statement: row after an attempt at now_s. A window that
 * is over starts again; the rule's attempts-th attempt of a window locks
 * the address out for window_s and starts the count again. */
static signin_row signin_counted(signin_row row, int64_t now_s, const store_signin_rule *rule) {
    if (row.attempts == 0 || now_s - row.window_start_s >= rule->window_s)
        row = (signin_row){.window_start_s = now_s, .locked_until_s = row.locked_until_s};
    if (++row.attempts >= rule->attempts) {
        row.locked_until_s = now_s + rule->window_s;
        row.attempts = 0;
    }
    return row;
}

/* address's row, or an empty one. */
static int signin_read(sdb *db, signin_row *out, const char *address) {
    *out = (signin_row){0};
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT attempts, window_start_s, locked_until_s FROM signin_attempts "
                       "WHERE address = ?1");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, address);
    int rc = sdb_step(st);
    if (rc == SDB_ROW)
        *out = (signin_row){.attempts = sdb_column_int64(st, 0),
                            .window_start_s = sdb_column_int64(st, 1),
                            .locked_until_s = sdb_column_int64(st, 2)};
    else if (rc != SDB_DONE)
        r = sq_err(db, rc, "read sign-in attempts");
    sdb_finalize(st);
    return r;
}

static int signin_write(sdb *db, const char *address, const signin_row *row, int64_t now_s) {
    sdb_stmt *st;
    int r = sq_prepare(
        db, &st,
        "INSERT INTO signin_attempts (address, attempts, window_start_s, locked_until_s, "
        "last_seen_s) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (address) DO UPDATE SET "
        "attempts = ?2, window_start_s = ?3, locked_until_s = ?4, last_seen_s = ?5");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, address);
    sdb_bind_int64(st, 2, row->attempts);
    sdb_bind_int64(st, 3, row->window_start_s);
    sdb_bind_int64(st, 4, row->locked_until_s);
    sdb_bind_int64(st, 5, now_s);
    return sq_step_done(db, st, false, "count sign-in attempt");
}

/* Drops the rows whose window and lockout are both over: last seen a
 * whole window ago means the window began at least that long ago. */
static int signin_prune_over(sdb *db, int64_t now_s, const store_signin_rule *rule) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "DELETE FROM signin_attempts WHERE last_seen_s <= ?1 "
                       "AND locked_until_s <= ?2");
    if (r < 0)
        return r;
    sdb_bind_int64(st, 1, now_s - rule->window_s);
    sdb_bind_int64(st, 2, now_s);
    return sq_step_done(db, st, false, "prune sign-in attempts");
}

/* Past addresses_max rows, drops the excess: those not locked out first,
 * then those seen longest ago; never keep's row. */
static int signin_prune_excess(sdb *db, const char *keep, int64_t now_s,
                               const store_signin_rule *rule) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "SELECT count(*) FROM signin_attempts");
    if (r < 0)
        return r;
    int rc = sdb_step(st);
    int64_t excess = rc == SDB_ROW ? sdb_column_int64(st, 0) - rule->addresses_max : 0;
    sdb_finalize(st);
    if (rc != SDB_ROW)
        return sq_err(db, rc, "count sign-in addresses");
    if (excess <= 0)
        return 0;
    r = sq_prepare(db, &st,
                   "DELETE FROM signin_attempts WHERE address IN (SELECT address FROM "
                   "signin_attempts WHERE address <> ?1 ORDER BY locked_until_s > ?2, "
                   "last_seen_s LIMIT ?3)");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, keep);
    sdb_bind_int64(st, 2, now_s);
    sdb_bind_int64(st, 3, excess);
    return sq_step_done(db, st, false, "bound sign-in addresses");
}

/* The attempt's steps, in the open write transaction. */
static int signin_attempt_in(sdb *db, int64_t *wait_s, const char *address, int64_t now_s,
                             const store_signin_rule *rule) {
    signin_row row;
    int r = signin_read(db, &row, address);
    if (r < 0)
        return r;
    if (row.locked_until_s > now_s) {
        *wait_s = row.locked_until_s - now_s;
        return 0;
    }
    row = signin_counted(row, now_s, rule);
    if ((r = signin_write(db, address, &row, now_s)) < 0 ||
        (r = signin_prune_over(db, now_s, rule)) < 0)
        return r;
    return signin_prune_excess(db, address, now_s, rule);
}

int store_signin_attempt(store *s, int64_t *wait_s, const char *address, int64_t now_s,
                         const store_signin_rule *rule) {
    *wait_s = 0;
    if (!sq_text_ok(address, STORE_SIGNIN_ADDRESS_MAX))
        return fawn_err(FAWN_EINVAL, "a client address of 1 to %d bytes is required",
                        STORE_SIGNIN_ADDRESS_MAX);
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin sign-in attempt");
    if (r == 0)
        r = signin_attempt_in(db, wait_s, address, now_s, rule);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    if (r < 0)
        *wait_s = 0;
    return r;
}

int store_signin_forget(store *s, const char *address) {
    const char *texts[] = {address};
    if (!sq_text_ok(address, STORE_SIGNIN_ADDRESS_MAX))
        return fawn_err(FAWN_EINVAL, "a client address of 1 to %d bytes is required",
                        STORE_SIGNIN_ADDRESS_MAX);
    return sq_exec_texts(s, "DELETE FROM signin_attempts WHERE address = ?1", texts, 1, false,
                         "forget sign-in attempts");
}

int store_signin_addresses(store *s, int64_t *out) {
    *out = 0;
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st, "SELECT count(*) FROM signin_attempts");
    if (r == 0) {
        int rc = sdb_step(st);
        r = rc == SDB_ROW ? 0 : sq_err(db, rc, "count sign-in addresses");
        *out = r == 0 ? sdb_column_int64(st, 0) : 0;
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}
