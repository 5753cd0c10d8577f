/* The store's scheduled tasks and their runs (store.h, "scheduled
 * tasks"). A claim is one write transaction (BEGIN IMMEDIATE: the
 * database's write lock, so two gateways on one file serialize too) that
 * reads the task, decides and writes; every later step names the claim it
 * acts on, so a claimer that lost its claim changes nothing. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "store/store_internal.h"

#define TASK_COLUMNS                                                                               \
    "id, owner_id, title, prompt, schedule_type, schedule_spec, timezone, context_mode, "          \
    "thread_id, status, stop_reason, next_run_at_ms, claim_id, lease_owner, lease_until_ms, "      \
    "last_run_at_ms, last_run_id, last_thread_id, last_error, run_count, created_at_ms, "          \
    "updated_at_ms"

/* A task run as reported: before it is started its own status, after it
 * its agent run's (a run whose thread was deleted since is gone). */
#define RUN_COLUMNS                                                                                \
    "tr.id, tr.task_id, tr.owner_id, tr.thread_id, tr.run_id, tr.scheduled_for_ms, tr.trigger, "   \
    "tr.triggered_by, CASE WHEN tr.status = 'claimed' THEN 'queued' "                              \
    "WHEN tr.status <> 'started' THEN tr.status WHEN r.status IS NULL THEN 'interrupted' "         \
    "WHEN r.status IN ('pending', 'running') THEN 'running' "                                      \
    "WHEN r.status IN ('success', 'interrupted') THEN r.status ELSE 'failed' END, "                \
    "COALESCE(tr.error, CASE WHEN tr.status = 'started' AND r.status IS NULL "                     \
    "THEN 'the run is gone (its thread was deleted)' ELSE r.error END), tr.started_at_ms, "        \
    "COALESCE(tr.ended_at_ms, CASE WHEN r.status NOT IN ('pending', 'running') "                   \
    "THEN r.updated_at_ms END), tr.created_at_ms "                                                 \
    "FROM scheduled_task_runs tr LEFT JOIN runs r ON r.run_id = tr.run_id"

/* A task run that is active: claimed, or started and not ended. */
#define RUN_ACTIVE                                                                                 \
    "(tr.status = 'claimed' OR (tr.status = 'started' AND EXISTS (SELECT 1 FROM runs r WHERE "     \
    "r.run_id = tr.run_id AND r.status IN ('pending', 'running'))))"

#define SKIPPED_ERROR "skipped: a previous run of this task was still active"

void store_task_clear(store_task *t) {
    free(t->title);
    free(t->prompt);
    free(t->stop_reason);
    free(t->last_error);
    memset(t, 0, sizeof *t);
}

void store_task_run_clear(store_task_run *r) {
    free(r->error);
    memset(r, 0, sizeof *r);
}

static void read_task(void *row, sdb_stmt *st) {
    store_task *t = row;
    *t = (store_task){0};
    sq_copy_col(t->id, sizeof t->id, st, 0);
    t->owner_id = sdb_column_int64(st, 1);
    t->title = sq_dup_col(st, 2);
    t->prompt = sq_dup_col(st, 3);
    sq_copy_col(t->schedule_type, sizeof t->schedule_type, st, 4);
    sq_copy_col(t->schedule_spec, sizeof t->schedule_spec, st, 5);
    sq_copy_col(t->timezone, sizeof t->timezone, st, 6);
    sq_copy_col(t->context_mode, sizeof t->context_mode, st, 7);
    sq_copy_col(t->thread_id, sizeof t->thread_id, st, 8);
    sq_copy_col(t->status, sizeof t->status, st, 9);
    t->stop_reason = sq_dup_col(st, 10);
    t->next_run_at_ms = sdb_column_int64(st, 11);
    sq_copy_col(t->claim_id, sizeof t->claim_id, st, 12);
    sq_copy_col(t->lease_owner, sizeof t->lease_owner, st, 13);
    t->lease_until_ms = sdb_column_int64(st, 14);
    t->last_run_at_ms = sdb_column_int64(st, 15);
    sq_copy_col(t->last_run_id, sizeof t->last_run_id, st, 16);
    sq_copy_col(t->last_thread_id, sizeof t->last_thread_id, st, 17);
    t->last_error = sq_dup_col(st, 18);
    t->run_count = sdb_column_int64(st, 19);
    t->created_at_ms = sdb_column_int64(st, 20);
    t->updated_at_ms = sdb_column_int64(st, 21);
}

static void read_run(void *row, sdb_stmt *st) {
    store_task_run *r = row;
    *r = (store_task_run){0};
    sq_copy_col(r->id, sizeof r->id, st, 0);
    sq_copy_col(r->task_id, sizeof r->task_id, st, 1);
    r->owner_id = sdb_column_int64(st, 2);
    sq_copy_col(r->thread_id, sizeof r->thread_id, st, 3);
    sq_copy_col(r->run_id, sizeof r->run_id, st, 4);
    r->scheduled_for_ms = sdb_column_int64(st, 5);
    sq_copy_col(r->trigger, sizeof r->trigger, st, 6);
    r->triggered_by = sdb_column_int64(st, 7);
    sq_copy_col(r->status, sizeof r->status, st, 8);
    r->error = sq_dup_col(st, 9);
    r->started_at_ms = sdb_column_int64(st, 10);
    r->ended_at_ms = sdb_column_int64(st, 11);
    r->created_at_ms = sdb_column_int64(st, 12);
}

/* Binds text, or NULL for NULL and "". */
static void bind_opt(sdb_stmt *st, int i, const char *text) {
    if (text && *text)
        sdb_bind_text(st, i, text);
    else
        sdb_bind_text(st, i, NULL);
}

static void bind_opt_ms(sdb_stmt *st, int i, int64_t ms) {
    if (ms)
        sdb_bind_int64(st, i, ms);
    else
        sdb_bind_null(st, i);
}

static bool one_of(const char *v, const char *a, const char *b, const char *c, const char *d) {
    return strcmp(v, a) == 0 || strcmp(v, b) == 0 || (c && strcmp(v, c) == 0) ||
           (d && strcmp(v, d) == 0);
}

static bool utf8_text_ok(const char *v, size_t max) {
    return v && sq_text_ok(v, max) && fawn_utf8_valid(v, strlen(v));
}

/* The fields a client sets are within their bounds. */
static int task_check(const store_task *t) {
    if (!sq_text_ok(t->id, STORE_TASK_ID_MAX))
        return fawn_err(FAWN_EINVAL, "bad task id");
    if (!utf8_text_ok(t->title, STORE_TASK_TITLE_MAX))
        return fawn_err(FAWN_EINVAL, "title is 1 to %d bytes of UTF-8 text", STORE_TASK_TITLE_MAX);
    if (!utf8_text_ok(t->prompt, STORE_TASK_PROMPT_MAX))
        return fawn_err(FAWN_EINVAL, "prompt is 1 to %d bytes of UTF-8 text",
                        STORE_TASK_PROMPT_MAX);
    if (!one_of(t->schedule_type, "once", "cron", NULL, NULL) ||
        !sq_text_ok(t->schedule_spec, STORE_TASK_SPEC_MAX) ||
        !sq_text_ok(t->timezone, STORE_TASK_ZONE_MAX))
        return fawn_err(FAWN_EINVAL, "bad schedule");
    if (!one_of(t->context_mode, "fresh_thread_per_run", "reuse_thread", NULL, NULL) ||
        (t->thread_id[0] && !fawn_id_valid(t->thread_id)))
        return fawn_err(FAWN_EINVAL, "bad context_mode or thread_id");
    if (!one_of(t->status, "enabled", "paused", "completed", "stopped"))
        return fawn_err(FAWN_EINVAL, "bad status");
    if (t->stop_reason && strlen(t->stop_reason) > STORE_TASK_ERROR_MAX)
        return fawn_err(FAWN_EINVAL, "stop reason too long");
    return 0;
}

/* Binds the client's fields to ?1..?10 (title … next_run_at). */
static void bind_fields(sdb_stmt *st, const store_task *t) {
    sdb_bind_text(st, 1, t->title);
    sdb_bind_text(st, 2, t->prompt);
    sdb_bind_text(st, 3, t->schedule_type);
    sdb_bind_text(st, 4, t->schedule_spec);
    sdb_bind_text(st, 5, t->timezone);
    sdb_bind_text(st, 6, t->context_mode);
    bind_opt(st, 7, t->thread_id);
    sdb_bind_text(st, 8, t->status);
    bind_opt(st, 9, t->stop_reason);
    bind_opt_ms(st, 10, t->next_run_at_ms);
}

static int owner_task_count(sdb *db, int64_t *n, int64_t owner_id) {
    *n = 0;
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "SELECT count(*) FROM scheduled_tasks WHERE owner_id = ?1");
    if (r < 0)
        return r;
    sdb_bind_int64(st, 1, owner_id);
    int rc = sdb_step(st);
    *n = rc == SDB_ROW ? sdb_column_int64(st, 0) : 0;
    sdb_finalize(st);
    return rc == SDB_ROW ? 0 : sq_err(db, rc, "count tasks");
}

static int task_insert(sdb *db, const store_task *t) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO scheduled_tasks (title, prompt, schedule_type, schedule_spec, "
                       "timezone, context_mode, thread_id, status, stop_reason, next_run_at_ms, "
                       "id, owner_id, created_at_ms, updated_at_ms) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?13)");
    if (r < 0)
        return r;
    bind_fields(st, t);
    sdb_bind_text(st, 11, t->id);
    sdb_bind_int64(st, 12, t->owner_id);
    sdb_bind_int64(st, 13, fawn_wall_ms());
    return sq_step_done(db, st, false, "create task");
}

int store_task_create(store *s, const store_task *t) {
    int r = task_check(t);
    if (r < 0)
        return r;
    sdb *db = sq_write_begin(s);
    r = sq_begin_write(db, "begin create task");
    if (r == 0) {
        int64_t n;
        r = owner_task_count(db, &n, t->owner_id);
        if (r == 0 && n >= STORE_TASKS_PER_OWNER_MAX)
            r = fawn_err(FAWN_E2BIG, "a user holds at most %d scheduled tasks",
                         STORE_TASKS_PER_OWNER_MAX);
        if (r == 0)
            r = task_insert(db, t);
        r = sq_end_transaction(db, r);
    }
    sq_write_end(s, db);
    return r;
}

#define TASK_BY_ID                                                                                 \
    "SELECT " TASK_COLUMNS " FROM scheduled_tasks WHERE id = ?1 AND (?2 = 0 OR owner_id = ?2)"

/* The task id (of owner_id, when not 0) on db; with lock, inside a write
 * transaction, its row stays locked until the transaction ends (PostgreSQL:
 * FOR UPDATE; another gateway's single-statement change of the task waits,
 * as SQLite's write lock makes every writer wait). */
static int task_get_locked(sdb *db, store_task *out, int64_t owner_id, const char *id, bool lock) {
    *out = (store_task){0};
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       lock ? sq_pick(db, TASK_BY_ID, TASK_BY_ID " FOR UPDATE") : TASK_BY_ID);
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, id);
    sdb_bind_int64(st, 2, owner_id);
    r = sq_step_row(db, st, "read task", "Scheduled task not found");
    if (r == 0)
        read_task(out, st);
    sdb_finalize(st);
    return r;
}

static int task_get_on(sdb *db, store_task *out, int64_t owner_id, const char *id) {
    return task_get_locked(db, out, owner_id, id, false);
}

int store_task_get(store *s, store_task *out, int64_t owner_id, const char *id) {
    *out = (store_task){0};
    if (owner_id <= 0)
        return fawn_err(FAWN_ENOENT, "Scheduled task not found");
    sdb *db = sq_read_begin(s);
    int r = task_get_on(db, out, owner_id, id);
    sq_read_end(s, db);
    return r;
}

/* Hands the rows of a prepared, bound query of tasks to the caller. */
static int tasks_read(store *s, sdb *db, store_task **out, size_t *n, sdb_stmt *st) {
    fbuf rows = {0};
    int r = sq_rows_read(db, &rows, st, sizeof(store_task), read_task, "list tasks");
    sdb_finalize(st);
    (void)s;
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_task), r);
}

int store_task_list(store *s, store_task **out, size_t *n, int64_t owner_id,
                    const char *thread_id) {
    *out = NULL;
    *n = 0;
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT " TASK_COLUMNS " FROM scheduled_tasks WHERE owner_id = ?1 AND "
                       "(?2 IS NULL OR thread_id = ?2) ORDER BY created_at_ms DESC, id DESC "
                       "LIMIT ?3");
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        bind_opt(st, 2, thread_id);
        sdb_bind_int64(st, 3, STORE_TASKS_PER_OWNER_MAX);
        r = tasks_read(s, db, out, n, st);
    }
    sq_read_end(s, db);
    return r;
}

int store_task_update(store *s, const store_task *t) {
    int r = task_check(t);
    if (r < 0)
        return r;
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    r = sq_prepare(db, &st,
                   "UPDATE scheduled_tasks SET title = ?1, prompt = ?2, schedule_type = ?3, "
                   "schedule_spec = ?4, timezone = ?5, context_mode = ?6, thread_id = ?7, "
                   "status = ?8, stop_reason = ?9, next_run_at_ms = ?10, updated_at_ms = ?11 "
                   "WHERE id = ?12 AND owner_id = ?13");
    if (r == 0) {
        bind_fields(st, t);
        sdb_bind_int64(st, 11, fawn_wall_ms());
        sdb_bind_text(st, 12, t->id);
        sdb_bind_int64(st, 13, t->owner_id);
        r = sq_step_done(db, st, true, "update task");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(r, "Scheduled task not found") : r;
}

int store_task_delete(store *s, int64_t owner_id, const char *id) {
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "DELETE FROM scheduled_tasks WHERE id = ?1 AND owner_id = ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, owner_id);
        r = sq_step_done(db, st, true, "delete task");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(r, "Scheduled task not found") : r;
}

int store_task_run_list(store *s, store_task_run **out, size_t *n, int64_t owner_id,
                        const char *task_id, size_t limit, size_t offset) {
    *out = NULL;
    *n = 0;
    limit = limit < 1 ? 1 : limit > STORE_TASK_RUNS_LIST_MAX ? STORE_TASK_RUNS_LIST_MAX : limit;
    sdb *db = sq_read_begin(s);
    store_task t;
    int r = owner_id > 0 ? task_get_on(db, &t, owner_id, task_id)
                         : fawn_err(FAWN_ENOENT, "Scheduled task not found");
    store_task_clear(&t);
    sdb_stmt *st = NULL;
    if (r == 0)
        r = sq_prepare(db, &st,
                       "SELECT " RUN_COLUMNS " WHERE tr.task_id = ?1 "
                       "ORDER BY tr.created_at_ms DESC, tr.rowid DESC LIMIT ?2 OFFSET ?3");
    if (r == 0) {
        sdb_bind_text(st, 1, task_id);
        sdb_bind_int64(st, 2, (int64_t)limit);
        sdb_bind_int64(st, 3, (int64_t)(offset > INT32_MAX ? INT32_MAX : offset));
        fbuf rows = {0};
        r = sq_rows_read(db, &rows, st, sizeof(store_task_run), read_run, "list task runs");
        sdb_finalize(st);
        r = sq_rows_hand_out((void **)out, n, &rows, sizeof(store_task_run), r);
    }
    sq_read_end(s, db);
    return r;
}

/* A count query with task_id bound to ?1 when not NULL. */
static int count_on(sdb *db, int64_t *out, const char *sql, const char *task_id) {
    *out = 0;
    sdb_stmt *st;
    int r = sq_prepare(db, &st, sql);
    if (r < 0)
        return r;
    if (task_id)
        sdb_bind_text(st, 1, task_id);
    int rc = sdb_step(st);
    *out = rc == SDB_ROW ? sdb_column_int64(st, 0) : 0;
    sdb_finalize(st);
    return rc == SDB_ROW ? 0 : sq_err(db, rc, "count task runs");
}

#define COUNT_ACTIVE "SELECT count(*) FROM scheduled_task_runs tr WHERE " RUN_ACTIVE
#define COUNT_TASK_ACTIVE COUNT_ACTIVE " AND tr.task_id = ?1"

int store_task_runs_active(store *s, int64_t *out) {
    sdb *db = sq_read_begin(s);
    int r = count_on(db, out, COUNT_ACTIVE, NULL);
    sq_read_end(s, db);
    return r;
}

int store_task_due(store *s, store_task **out, size_t *n, int64_t now_ms, size_t limit) {
    *out = NULL;
    *n = 0;
    limit = limit < 1 ? 1 : limit > STORE_TASKS_PER_OWNER_MAX ? STORE_TASKS_PER_OWNER_MAX : limit;
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT " TASK_COLUMNS " FROM scheduled_tasks WHERE "
                       "(status = 'enabled' AND next_run_at_ms <= ?1 AND claim_id IS NULL AND "
                       "(lease_until_ms IS NULL OR lease_until_ms < ?1)) OR "
                       "(claim_id IS NOT NULL AND (lease_until_ms IS NULL OR lease_until_ms < ?1)) "
                       "ORDER BY next_run_at_ms LIMIT ?2");
    if (r == 0) {
        sdb_bind_int64(st, 1, now_ms);
        sdb_bind_int64(st, 2, (int64_t)limit);
        r = tasks_read(s, db, out, n, st);
    }
    sq_read_end(s, db);
    return r;
}

/* ---- claims ---- */

static bool lease_held(const store_task *t, int64_t now_ms) {
    return t->lease_owner[0] && t->lease_until_ms >= now_ms;
}

/* What a claim of t does, from the task as read in the transaction. */
static int claim_decide(sdb *db, enum store_claim *out, const store_task *t,
                        const store_claim_req *q) {
    bool scheduled = strcmp(q->trigger, "scheduled") == 0;
    if (scheduled && (strcmp(t->status, "enabled") != 0 || t->next_run_at_ms != q->due_ms ||
                      t->claim_id[0] || lease_held(t, q->now_ms))) {
        *out = STORE_CLAIM_LOST;
        return 0;
    }
    int64_t n;
    int r = count_on(db, &n, COUNT_TASK_ACTIVE, t->id);
    if (r < 0)
        return r;
    if (!scheduled && (t->claim_id[0] || lease_held(t, q->now_ms) || n > 0)) {
        *out = STORE_CLAIM_ACTIVE;
        return 0;
    }
    if (n > 0) {
        *out = STORE_CLAIM_SKIPPED;
        return 0;
    }
    r = count_on(db, &n, COUNT_ACTIVE, NULL);
    *out = n >= q->max_active ? STORE_CLAIM_FULL : STORE_CLAIM_TAKEN;
    return r;
}

/* Inserts the task run of a claim, status "claimed" or "skipped";
 * FAWN_EEXIST when the occurrence (or the claim id) is already recorded.
 * The conflict is no error of the statement (ON CONFLICT DO NOTHING): on
 * PostgreSQL a failed statement would end the claim's transaction. */
static int claim_run_insert(sdb *db, const store_claim_req *q, bool skipped) {
    bool scheduled = strcmp(q->trigger, "scheduled") == 0;
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO scheduled_task_runs (id, task_id, owner_id, thread_id, "
                       "scheduled_for_ms, trigger, triggered_by, status, error, started_at_ms, "
                       "ended_at_ms, created_at_ms) SELECT ?1, id, owner_id, ?2, ?3, ?4, ?5, ?6, "
                       "?7, ?8, ?8, ?9 FROM scheduled_tasks WHERE id = ?10 "
                       "ON CONFLICT DO NOTHING");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, q->claim_id);
    sdb_bind_text(st, 2, q->thread_id);
    sdb_bind_int64(st, 3, scheduled ? q->due_ms : q->now_ms);
    sdb_bind_text(st, 4, q->trigger);
    bind_opt_ms(st, 5, q->triggered_by);
    sdb_bind_text(st, 6, skipped ? "skipped" : "claimed");
    bind_opt(st, 7, skipped ? SKIPPED_ERROR : NULL);
    bind_opt_ms(st, 8, skipped ? q->now_ms : 0);
    sdb_bind_int64(st, 9, q->now_ms);
    sdb_bind_text(st, 10, q->task_id);
    r = sq_step_done(db, st, true, "record task run");
    return r == FAWN_ENOENT ? fawn_err(FAWN_EEXIST, "the occurrence is already recorded") : r;
}

/* The task's side of a claim: taken (claim and lease), and for a
 * scheduled occurrence, next_run_at advanced (a once task skipped is
 * stopped: its one occurrence is gone). */
static int claim_task_update(sdb *db, const store_claim_req *q, bool taken) {
    bool scheduled = strcmp(q->trigger, "scheduled") == 0;
    sdb_stmt *st;
    int r = sq_prepare(
        db, &st,
        "UPDATE scheduled_tasks SET claim_id = ?1, lease_owner = ?2, lease_until_ms = ?3, "
        "next_run_at_ms = CASE WHEN ?4 <> 0 THEN ?5 ELSE next_run_at_ms END, "
        "status = CASE WHEN ?6 = 0 AND schedule_type = 'once' THEN 'stopped' ELSE status END, "
        "stop_reason = CASE WHEN ?6 = 0 AND schedule_type = 'once' THEN ?7 ELSE stop_reason END, "
        "updated_at_ms = ?8 WHERE id = ?9");
    if (r < 0)
        return r;
    bind_opt(st, 1, taken ? q->claim_id : NULL);
    bind_opt(st, 2, taken ? q->lease_owner : NULL);
    bind_opt_ms(st, 3, taken ? q->now_ms + q->lease_ms : 0);
    sdb_bind_int64(st, 4, scheduled);
    bind_opt_ms(st, 5, q->next_ms);
    sdb_bind_int64(st, 6, taken);
    sdb_bind_text(st, 7, SKIPPED_ERROR);
    sdb_bind_int64(st, 8, fawn_wall_ms());
    sdb_bind_text(st, 9, q->task_id);
    return sq_step_done(db, st, true, "claim task");
}

/* Writes a claim decided *out; an occurrence already recorded (the
 * unique index) is not run again: the task only moves past it. */
static int claim_write(sdb *db, enum store_claim *out, const store_claim_req *q) {
    if (*out != STORE_CLAIM_TAKEN && *out != STORE_CLAIM_SKIPPED)
        return 0;
    bool taken = *out == STORE_CLAIM_TAKEN;
    int r = claim_run_insert(db, q, !taken);
    if (r == FAWN_EEXIST && strcmp(q->trigger, "scheduled") == 0) {
        log_warn("store", "task %s: occurrence %lld already recorded; moving past it", q->task_id,
                 (long long)q->due_ms);
        *out = STORE_CLAIM_LOST;
        taken = false;
        r = 0;
    }
    return r < 0 ? r : claim_task_update(db, q, taken);
}

static bool claim_req_ok(const store_claim_req *q) {
    return q->task_id && q->trigger && one_of(q->trigger, "scheduled", "manual", NULL, NULL) &&
           sq_text_ok(q->claim_id, STORE_TASK_ID_MAX) && q->thread_id &&
           fawn_id_valid(q->thread_id) && sq_text_ok(q->lease_owner, 79) && q->lease_ms > 0;
}

int store_task_claim(store *s, enum store_claim *out, store_task *task, const store_claim_req *q) {
    *out = STORE_CLAIM_LOST;
    if (task)
        *task = (store_task){0};
    if (!claim_req_ok(q))
        return fawn_err(FAWN_EINVAL, "bad claim");
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin claim");
    if (r == 0) {
        store_task t;
        r = task_get_locked(db, &t, q->owner_id, q->task_id, true);
        if (r == 0)
            r = claim_decide(db, out, &t, q);
        store_task_clear(&t);
        if (r == 0)
            r = claim_write(db, out, q);
        r = sq_end_transaction(db, r);
    }
    if (r == 0 && task)
        r = task_get_on(db, task, 0, q->task_id);
    sq_write_end(s, db);
    if (r < 0)
        *out = STORE_CLAIM_LOST;
    return r;
}

int store_task_reclaim(store *s, const char *task_id, const char *claim_id, const char *lease_owner,
                       int64_t now_ms, int64_t lease_ms) {
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "UPDATE scheduled_tasks SET lease_owner = ?1, lease_until_ms = ?2 "
                       "WHERE id = ?3 AND claim_id = ?4 AND "
                       "(lease_until_ms IS NULL OR lease_until_ms < ?5)");
    if (r == 0) {
        sdb_bind_text(st, 1, lease_owner);
        sdb_bind_int64(st, 2, now_ms + lease_ms);
        sdb_bind_text(st, 3, task_id);
        sdb_bind_text(st, 4, claim_id);
        sdb_bind_int64(st, 5, now_ms);
        r = sq_step_done(db, st, true, "reclaim task");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ESTALE, "the claim was taken or finished") : r;
}

int store_task_claim_get(store *s, store_task_run *out, const char *claim_id) {
    *out = (store_task_run){0};
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "SELECT " RUN_COLUMNS " WHERE tr.id = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, claim_id);
        r = sq_step_row(db, st, "read claim", "no claim %s", claim_id);
        if (r == 0)
            read_run(out, st);
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_task_claim_find_run(store *s, char run_id[37], int64_t owner_id, const char *thread_id,
                              const char *claim_id) {
    run_id[0] = '\0';
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       sq_pick(db,
                               "SELECT run_id FROM runs WHERE owner_id = ?1 AND thread_id = ?2 "
                               "AND json_extract(metadata, '$.scheduled_task_run_id') = ?3 "
                               "LIMIT 1",
                               "SELECT run_id FROM runs WHERE owner_id = ?1 AND thread_id = ?2 "
                               "AND metadata::jsonb ->> 'scheduled_task_run_id' = ?3 LIMIT 1"));
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        sdb_bind_text(st, 2, thread_id);
        sdb_bind_text(st, 3, claim_id);
        int rc = sdb_step(st);
        if (rc == SDB_ROW)
            sq_copy_col(run_id, 37, st, 0);
        r = rc == SDB_ROW || rc == SDB_DONE ? 0 : sq_err(db, rc, "find claimed run");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

/* Binds a claim end's parameters: ?1 claim, ?2 text, ?3 now, ?4 task,
 * ?5 stop reason, ?6 the wall clock. */
static void bind_end(sdb_stmt *st, const char *task_id, const char *claim_id, const char *text,
                     const char *stop, int64_t now_ms) {
    sdb_bind_text(st, 1, claim_id);
    bind_opt(st, 2, text);
    sdb_bind_int64(st, 3, now_ms);
    if (sdb_bind_count(st) >= 4) {
        sdb_bind_text(st, 4, task_id);
        bind_opt(st, 5, stop);
        sdb_bind_int64(st, 6, fawn_wall_ms());
    }
}

/* Ends a claim in one transaction: its run row, then the task (fenced by
 * the claim: a task that no longer holds it keeps what it has, and the
 * run is still recorded: FAWN_ESTALE). */
static int claim_end(store *s, const char *task_id, const char *claim_id, const char *run_sql,
                     const char *task_sql, const char *text, const char *stop, int64_t now_ms) {
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin end claim");
    if (r < 0) {
        sq_write_end(s, db);
        return r;
    }
    sdb_stmt *st = NULL;
    if ((r = sq_prepare(db, &st, run_sql)) == 0) {
        bind_end(st, task_id, claim_id, text, stop, now_ms);
        r = sq_step_done(db, st, false, "end task run");
    }
    if (r == 0 && (r = sq_prepare(db, &st, task_sql)) == 0) {
        bind_end(st, task_id, claim_id, text, stop, now_ms);
        r = sq_step_done(db, st, true, "end claim");
    }
    bool stale = r == FAWN_ENOENT;
    r = sq_end_transaction(db, stale ? 0 : r);
    sq_write_end(s, db);
    return r == 0 && stale ? fawn_err(FAWN_ESTALE, "the task no longer holds claim %s", claim_id)
                           : r;
}

int store_task_claim_started(store *s, const char *task_id, const char *claim_id,
                             const char *run_id, int64_t now_ms) {
    return claim_end(
        s, task_id, claim_id,
        "UPDATE scheduled_task_runs SET status = 'started', run_id = ?2, started_at_ms = ?3 "
        "WHERE id = ?1 AND status = 'claimed'",
        "UPDATE scheduled_tasks SET claim_id = NULL, lease_owner = NULL, lease_until_ms = NULL, "
        "last_run_at_ms = ?3, last_run_id = ?2, last_thread_id = (SELECT thread_id FROM "
        "scheduled_task_runs WHERE id = ?1), last_error = ?5, run_count = run_count + 1, "
        "status = CASE WHEN schedule_type = 'once' AND (SELECT trigger FROM scheduled_task_runs "
        "WHERE id = ?1) = 'scheduled' THEN 'completed' ELSE status END, updated_at_ms = ?6 "
        "WHERE id = ?4 AND claim_id = ?1",
        run_id, NULL, now_ms);
}

int store_task_claim_failed(store *s, const char *task_id, const char *claim_id, const char *error,
                            const char *stop_reason, int64_t now_ms) {
    return claim_end(
        s, task_id, claim_id,
        "UPDATE scheduled_task_runs SET status = 'failed', error = ?2, started_at_ms = ?3, "
        "ended_at_ms = ?3 WHERE id = ?1 AND status = 'claimed'",
        "UPDATE scheduled_tasks SET claim_id = NULL, lease_owner = NULL, lease_until_ms = NULL, "
        "last_error = ?2, status = CASE WHEN ?5 IS NOT NULL THEN 'stopped' ELSE status END, "
        "stop_reason = COALESCE(?5, stop_reason), updated_at_ms = ?6 "
        "WHERE id = ?4 AND claim_id = ?1",
        error, stop_reason, now_ms);
}
