/* Runs, run events and receipts on SQLite (store.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "store/store_internal.h"

static const char *const run_statuses[] = {"pending", "running", "success",
                                           "error",   "timeout", "interrupted"};

static bool run_status_known(const char *status) {
    for (size_t i = 0; status && i < ARRAY_LEN(run_statuses); i++)
        if (strcmp(status, run_statuses[i]) == 0)
            return true;
    return false;
}

void store_run_clear(store_run *r) {
    free(r->kwargs);
    free(r->metadata);
    free(r->error);
    free(r->token_usage);
    memset(r, 0, sizeof *r);
}

#define RUN_COLUMNS                                                                                \
    "run_id, owner_id, thread_id, assistant_id, status, kwargs, metadata, error, created_at_ms, "  \
    "updated_at_ms, gateway_id"
/* What a read gets: the columns above, then what the run cost and whether
 * its cancel was asked for. */
#define RUN_READ_COLUMNS RUN_COLUMNS ", token_usage, cancel_requested"
/* A run that has not ended. */
#define RUN_UNFINISHED "status IN ('pending', 'running')"

static void read_run(void *row, sdb_stmt *st) {
    store_run *r = row;
    memset(r, 0, sizeof *r);
    sq_copy_col(r->run_id, sizeof r->run_id, st, 0);
    r->owner_id = sdb_column_int64(st, 1);
    sq_copy_col(r->thread_id, sizeof r->thread_id, st, 2);
    sq_copy_col(r->assistant_id, sizeof r->assistant_id, st, 3);
    sq_copy_col(r->status, sizeof r->status, st, 4);
    r->kwargs = sq_dup_col(st, 5);
    r->metadata = sq_dup_col(st, 6);
    r->error = sq_dup_col(st, 7);
    r->created_at_ms = sdb_column_int64(st, 8);
    r->updated_at_ms = sdb_column_int64(st, 9);
    sq_copy_col(r->gateway_id, sizeof r->gateway_id, st, 10);
    r->token_usage = sq_dup_col(st, 11);
    r->cancel_requested = sdb_column_int64(st, 12) != 0;
}

/* A row read by read_run lacks a text it must have: memory ran out. */
static int run_row_check(const store_run *r) {
    return r->kwargs && r->metadata && r->token_usage ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Whether a refused insert of run collided with its thread's one active
 * run rather than with a run id in use. A failed read answers false: the
 * caller reports the insert's own error. */
static bool collided_with_active_run(sdb *db, const store_run *run) {
    sdb_stmt *st;
    if (sq_prepare(db, &st,
                   "SELECT NOT EXISTS (SELECT 1 FROM runs WHERE run_id = ?1) AND EXISTS (SELECT 1 "
                   "FROM runs WHERE owner_id = ?2 AND thread_id = ?3 AND " RUN_UNFINISHED ")") < 0)
        return false;
    sdb_bind_text(st, 1, run->run_id);
    sdb_bind_int64(st, 2, run->owner_id);
    sdb_bind_text(st, 3, run->thread_id);
    bool active = sdb_step(st) == SDB_ROW && sdb_column_int64(st, 0) != 0;
    sdb_finalize(st);
    return active;
}

int store_run_create(store *s, const store_run *run) {
    if (!sq_text_ok(run->run_id, STORE_RUN_ID_MAX) || !fawn_id_valid(run->thread_id) ||
        !sq_text_ok(run->assistant_id, 64))
        return fawn_err(FAWN_EINVAL, "bad run id, thread id or assistant id");
    const char *status = run->status[0] ? run->status : "pending";
    if (!run_status_known(status))
        return fawn_err(FAWN_EINVAL, "unknown run status: %s", status);
    sdb_stmt *st;
    int64_t now = fawn_wall_ms();
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "INSERT INTO runs (" RUN_COLUMNS ") "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?9, ?10)");
    if (r == 0) {
        sdb_bind_text(st, 1, run->run_id);
        sdb_bind_int64(st, 2, run->owner_id);
        sdb_bind_text(st, 3, run->thread_id);
        sdb_bind_text(st, 4, run->assistant_id);
        sdb_bind_text(st, 5, status);
        sdb_bind_text(st, 6, run->kwargs ? run->kwargs : "{}");
        sdb_bind_text(st, 7, run->metadata ? run->metadata : "{}");
        sdb_bind_text(st, 8, run->error);
        sdb_bind_int64(st, 9, run->created_at_ms ? run->created_at_ms : now);
        sdb_bind_text(st, 10, run->gateway_id);
        int rc = sdb_step(st);
        bool fk = rc == SDB_CONSTRAINT && sdb_error_is_foreign_key(db);
        sdb_finalize(st);
        r = rc == SDB_DONE ? 0
            : fk           ? fawn_err(FAWN_ENOENT, "no such thread: %s", run->thread_id)
            : rc == SDB_CONSTRAINT && collided_with_active_run(db, run)
                ? fawn_err(FAWN_EBUSY, "Thread %s is busy with another run", run->thread_id)
                : sq_err(db, rc, "create run");
    }
    sq_write_end(s, db);
    return r;
}

int store_run_get(store *s, store_run *out, int64_t owner_id, const char *thread_id,
                  const char *run_id) {
    memset(out, 0, sizeof *out);
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " RUN_READ_COLUMNS " FROM runs WHERE run_id = ?1 AND owner_id = ?2 "
                       "AND thread_id = ?3");
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        sdb_bind_int64(st, 2, owner_id);
        sdb_bind_text(st, 3, thread_id);
        r = sq_step_row(db, st, "get run", "Run not found");
        if (r == 0) {
            read_run(out, st);
            r = run_row_check(out);
        }
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0)
        store_run_clear(out);
    return r;
}

int store_run_list(store *s, store_run **out, size_t *n, int64_t owner_id, const char *thread_id,
                   size_t limit, size_t offset) {
    *out = NULL;
    *n = 0;
    limit = limit < 1 ? 1 : limit > STORE_RUNS_LIST_MAX ? STORE_RUNS_LIST_MAX : limit;
    fbuf rows = {0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " RUN_READ_COLUMNS
                       " FROM runs WHERE owner_id = ?1 AND thread_id = ?2 "
                       "ORDER BY created_at_ms DESC, rowid DESC LIMIT ?3 OFFSET ?4");
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        sdb_bind_text(st, 2, thread_id);
        sdb_bind_int64(st, 3, (int64_t)limit);
        sdb_bind_int64(st, 4, (int64_t)offset);
        r = sq_rows_read(db, &rows, st, sizeof(store_run), read_run, "list runs");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    store_run *runs = (store_run *)rows.data;
    for (size_t i = 0; r == 0 && i < rows.len / sizeof *runs; i++)
        r = run_row_check(&runs[i]);
    if (r < 0)
        for (size_t i = 0; i < rows.len / sizeof *runs; i++)
            store_run_clear(&runs[i]);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_run), r);
}

int store_run_set_status(store *s, const char *run_id, const char *status, const char *error) {
    if (!run_status_known(status))
        return fawn_err(FAWN_EINVAL, "unknown run status: %s", status ? status : "(null)");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "UPDATE runs SET status = ?2, error = ?3, updated_at_ms = ?4 "
                       "WHERE run_id = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        sdb_bind_text(st, 2, status);
        sdb_bind_text(st, 3, error);
        sdb_bind_int64(st, 4, fawn_wall_ms());
        r = sq_step_done(db, st, true, "set run status");
    }
    sq_write_end(s, db);
    return r;
}

/* Whether usage is a list of at most STORE_USAGE_BUCKETS_MAX objects. */
static bool usage_valid(const char *usage) {
    json_t *list = usage ? json_loads(usage, 0, NULL) : NULL;
    bool ok = json_is_array(list) && json_array_size(list) <= STORE_USAGE_BUCKETS_MAX;
    for (size_t i = 0; ok && i < json_array_size(list); i++)
        ok = json_is_object(json_array_get(list, i));
    json_decref(list);
    return ok;
}

int store_run_set_usage(store *s, const char *run_id, const char *usage) {
    if (!usage_valid(usage))
        return fawn_err(FAWN_EINVAL, "a run's token usage is a list of at most %d objects",
                        STORE_USAGE_BUCKETS_MAX);
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "UPDATE runs SET token_usage = ?2 WHERE run_id = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        sdb_bind_text(st, 2, usage);
        r = sq_step_done(db, st, true, "set run token usage");
    }
    sq_write_end(s, db);
    return r;
}

int store_run_own_set_status(store *s, const char *run_id, const char *gateway_id,
                             const char *status, const char *error, const char *thread_status) {
    if (!run_status_known(status))
        return fawn_err(FAWN_EINVAL, "unknown run status: %s", status ? status : "(null)");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin");
    if (r == 0)
        r = sq_prepare(db, &st,
                       "UPDATE runs SET status = ?3, error = ?4, updated_at_ms = ?5 "
                       "WHERE run_id = ?1 AND gateway_id = ?2 AND " RUN_UNFINISHED);
    if (r == 0) {
        const char *texts[] = {run_id, gateway_id, status};
        sq_bind_texts(st, texts, ARRAY_LEN(texts));
        sdb_bind_text(st, 4, error);
        sdb_bind_int64(st, 5, fawn_wall_ms());
        r = sq_step_done(db, st, true, "set run status");
    }
    if (r == 0 && thread_status)
        r = sq_prepare(db, &st,
                       "UPDATE threads SET status = ?2 WHERE EXISTS (SELECT 1 FROM runs WHERE "
                       "runs.run_id = ?1 AND runs.owner_id = threads.owner_id "
                       "AND runs.thread_id = threads.id)");
    if (r == 0 && thread_status) {
        const char *texts[] = {run_id, thread_status};
        sq_bind_texts(st, texts, ARRAY_LEN(texts));
        r = sq_step_done(db, st, false, "set thread status");
    }
    if (r == FAWN_ENOENT)
        fawn_err(FAWN_ENOENT, "run %s is not %s's unfinished run", run_id, gateway_id);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    return r;
}

/* Runs one statement of sq_runs_end, texts bound to ?1.. (and now, when
 * not 0, to the next one); *changed (may be NULL) gets the rows changed. */
static int runs_end_step(sdb *db, size_t *changed, const char *sql, const char *const *texts,
                         size_t n, int64_t now) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st, sql);
    if (r < 0)
        return r;
    sq_bind_texts(st, texts, n);
    if (now)
        sdb_bind_int64(st, (int)n + 1, now);
    int rc = sdb_step(st);
    if (changed)
        *changed = rc == SDB_DONE ? (size_t)sdb_changes(db) : 0;
    sdb_finalize(st);
    return rc == SDB_DONE ? 0 : sq_err(db, rc, "end runs");
}

int sq_runs_end(sdb *db, size_t *n, const char *where, const char *arg, const char *reason) {
    *n = 0;
    json_t *error = json_pack("{s:s, s:s}", "error", "RunError", "message", reason);
    char *data = error ? json_dumps(error, JSON_COMPACT) : NULL;
    json_decref(error);
    if (!data)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    /* ?1 is arg (in where); an event goes after the run's last stored one. */
    char events_sql[512], threads_sql[384], runs_sql[256];
    snprintf(events_sql, sizeof events_sql,
             "INSERT INTO run_events (run_id, seq, event, data) SELECT run_id, coalesce((SELECT "
             "max(seq) FROM run_events e WHERE e.run_id = runs.run_id), 0) + 1, ?2, ?3 "
             "FROM runs WHERE " RUN_UNFINISHED " AND (%s)",
             where);
    snprintf(threads_sql, sizeof threads_sql,
             "UPDATE threads SET status = 'idle' WHERE EXISTS (SELECT 1 FROM runs WHERE "
             "runs.owner_id = threads.owner_id AND runs.thread_id = threads.id AND "
             "runs." RUN_UNFINISHED " AND (%s))",
             where);
    snprintf(runs_sql, sizeof runs_sql,
             "UPDATE runs SET status = 'error', error = ?2, updated_at_ms = ?3 "
             "WHERE " RUN_UNFINISHED " AND (%s)",
             where);
    const char *error_event[] = {arg, "error", data}, *end_event[] = {arg, "end", "null"};
    const char *run_texts[] = {arg, reason};
    int r = runs_end_step(db, NULL, events_sql, error_event, 3, 0);
    if (r == 0)
        r = runs_end_step(db, NULL, events_sql, end_event, 3, 0);
    if (r == 0)
        r = runs_end_step(db, NULL, threads_sql, run_texts, 1, 0);
    if (r == 0)
        r = runs_end_step(db, n, runs_sql, run_texts, 2, fawn_wall_ms());
    free(data);
    return r;
}

int store_run_abandon_unfinished(store *s, size_t *n, const char *gateway_id, const char *reason) {
    size_t ended = 0;
    if (n)
        *n = 0;
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin");
    if (r == 0)
        r = gateway_id ? sq_runs_end(db, &ended, "gateway_id = ?1", gateway_id, reason)
                       : sq_runs_end(db, &ended, "?1 IS NOT NULL", "", reason);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    if (r == 0 && n)
        *n = ended;
    return r;
}

int store_run_active(store *s, store_run *out, int64_t owner_id, const char *thread_id) {
    memset(out, 0, sizeof *out);
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " RUN_READ_COLUMNS " FROM runs WHERE owner_id = ?1 "
                       "AND thread_id = ?2 AND " RUN_UNFINISHED);
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        sdb_bind_text(st, 2, thread_id);
        r = sq_step_row(db, st, "active run", "Thread %s has no active run", thread_id);
        if (r == 0) {
            read_run(out, st);
            r = run_row_check(out);
        }
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0)
        store_run_clear(out);
    return r;
}

int store_run_request_cancel(store *s, int64_t owner_id, const char *thread_id,
                             const char *run_id) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "UPDATE runs SET cancel_requested = 1 WHERE run_id = ?1 AND owner_id = ?2 "
                       "AND thread_id = ?3 AND " RUN_UNFINISHED);
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        sdb_bind_int64(st, 2, owner_id);
        sdb_bind_text(st, 3, thread_id);
        r = sq_step_done(db, st, true, "request run cancel");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "run %s is not active", run_id) : r;
}

static void read_run_id(void *row, sdb_stmt *st) { sq_copy_col(row, 37, st, 0); }

int store_run_cancel_requests(store *s, char (**out)[37], size_t *n, const char *gateway_id) {
    *out = NULL;
    *n = 0;
    fbuf rows = {0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT run_id FROM runs WHERE gateway_id = ?1 AND cancel_requested = 1 "
                       "AND " RUN_UNFINISHED);
    if (r == 0) {
        sdb_bind_text(st, 1, gateway_id);
        r = sq_rows_read(db, &rows, st, 37, read_run_id, "cancel requests");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return sq_rows_hand_out((void **)out, n, &rows, 37, r);
}

/* ---- events ---- */

/* FAWN_ESTALE when the run's stored stream has ended (its last event is
 * `end`): nothing follows an end, a late write of a gateway whose run
 * another one ended (store_gateway_reap) included. */
static int stream_open(sdb *db, const char *run_id) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT event FROM run_events WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, run_id);
    int rc = sdb_step(st);
    const char *last = rc == SDB_ROW ? sdb_column_text(st, 0) : NULL;
    bool ended = last && strcmp(last, "end") == 0;
    if (rc != SDB_ROW && rc != SDB_DONE)
        r = sq_err(db, rc, "read the run's last event");
    sdb_finalize(st);
    if (r == 0 && ended)
        r = fawn_err(FAWN_ESTALE, "run %s has ended: nothing follows its end", run_id);
    return r;
}

int store_event_append(store *s, const char *run_id, const store_event *events, size_t n) {
    if (n == 0)
        return 0;
    sdb_stmt *st = NULL;
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin");
    if (r == 0)
        r = stream_open(db, run_id);
    if (r == 0)
        r = sq_prepare(db, &st,
                       "INSERT INTO run_events (run_id, seq, event, data) "
                       "VALUES (?1, ?2, ?3, ?4)");
    for (size_t i = 0; r == 0 && i < n; i++) {
        sdb_bind_text(st, 1, run_id);
        sdb_bind_int64(st, 2, events[i].seq);
        sdb_bind_text(st, 3, events[i].event);
        sdb_bind_text(st, 4, events[i].data ? events[i].data : "null");
        int rc = sdb_step(st);
        r = rc == SDB_DONE ? 0 : sq_err(db, rc, "append run events");
        sdb_reset(st);
    }
    sdb_finalize(st);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    return r;
}

static void read_event(void *row, sdb_stmt *st) {
    store_event *e = row;
    e->seq = sdb_column_int64(st, 0);
    sq_copy_col(e->event, sizeof e->event, st, 1);
    e->data = sq_dup_col(st, 2);
}

int store_event_read(store *s, store_event **out, size_t *n, const char *run_id, int64_t after,
                     size_t limit) {
    *out = NULL;
    *n = 0;
    fbuf rows = {0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT seq, event, data FROM run_events WHERE run_id = ?1 AND seq > ?2 "
                       "ORDER BY seq LIMIT ?3");
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        sdb_bind_int64(st, 2, after);
        sdb_bind_int64(st, 3, (int64_t)limit);
        r = sq_rows_read(db, &rows, st, sizeof(store_event), read_event, "read run events");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    store_event *ev = (store_event *)rows.data;
    size_t count = rows.len / sizeof *ev;
    for (size_t i = 0; r == 0 && i < count; i++)
        if (!ev[i].data)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0)
        for (size_t i = 0; i < count; i++)
            free(ev[i].data);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_event), r);
}

int store_event_bounds(store *s, int64_t *first, int64_t *last, const char *run_id) {
    *first = *last = 0;
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT coalesce(min(seq), 0), coalesce(max(seq), 0) FROM run_events "
                       "WHERE run_id = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        int rc = sdb_step(st);
        if (rc == SDB_ROW) {
            *first = sdb_column_int64(st, 0);
            *last = sdb_column_int64(st, 1);
        } else {
            r = sq_err(db, rc, "run event bounds");
        }
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_event_prune(store *s, const char *run_id, int64_t keep) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "DELETE FROM run_events WHERE run_id = ?1 AND seq <= "
                       "(SELECT max(seq) FROM run_events WHERE run_id = ?1) - ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        sdb_bind_int64(st, 2, keep);
        r = sq_step_done(db, st, false, "prune run events");
    }
    sq_write_end(s, db);
    return r;
}

/* ---- receipts ---- */

int store_receipt_add(store *s, const store_receipt *rc) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "INSERT INTO receipts (run_id, tool_call_id, tool_name, status, "
                       "args_sha256, output_sha256, output_bytes, created_at_ms, evidence) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)");
    if (r == 0) {
        const char *texts[] = {rc->run_id, rc->tool_call_id, rc->tool_name,
                               rc->status, rc->args_sha256,  rc->output_sha256};
        sq_bind_texts(st, texts, ARRAY_LEN(texts));
        sdb_bind_int64(st, 7, rc->output_bytes);
        sdb_bind_int64(st, 8, rc->created_at_ms ? rc->created_at_ms : fawn_wall_ms());
        sdb_bind_text(st, 9, rc->evidence);
        r = sq_step_done(db, st, false, "add receipt");
    }
    sq_write_end(s, db);
    return r;
}

static void read_receipt(void *row, sdb_stmt *st) {
    store_receipt *rc = row;
    memset(rc, 0, sizeof *rc);
    sq_copy_col(rc->run_id, sizeof rc->run_id, st, 0);
    sq_copy_col(rc->tool_call_id, sizeof rc->tool_call_id, st, 1);
    sq_copy_col(rc->tool_name, sizeof rc->tool_name, st, 2);
    sq_copy_col(rc->status, sizeof rc->status, st, 3);
    sq_copy_col(rc->args_sha256, sizeof rc->args_sha256, st, 4);
    sq_copy_col(rc->output_sha256, sizeof rc->output_sha256, st, 5);
    rc->output_bytes = sdb_column_int64(st, 6);
    rc->created_at_ms = sdb_column_int64(st, 7);
    rc->evidence = sq_dup_col(st, 8);
}

int store_receipt_list(store *s, store_receipt **out, size_t *n, const char *run_id) {
    *out = NULL;
    *n = 0;
    fbuf rows = {0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT run_id, tool_call_id, tool_name, status, args_sha256, "
                       "output_sha256, output_bytes, created_at_ms, evidence FROM receipts "
                       "WHERE run_id = ?1 ORDER BY rowid");
    if (r == 0) {
        sdb_bind_text(st, 1, run_id);
        r = sq_rows_read(db, &rows, st, sizeof(store_receipt), read_receipt, "list receipts");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_receipt), r);
}

void store_receipts_free(store_receipt *rcs, size_t n) {
    for (size_t i = 0; rcs && i < n; i++)
        free(rcs[i].evidence);
    free(rcs);
}
