/* The run executor (runs.h): a queue (its policy is run_queue.c's), a pool
 * of workers, the live runs. */
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "agent/run_queue.h"
#include "agent/runs_internal.h"
#include "base/json.h"

/* How long an interrupting run waits for the one it replaces to end. */
#define RUNS_INTERRUPT_WAIT_MS 30000
/* 5 s: the kill of a cancelled run's command. */
#define RUNS_KILL_TIMEOUT_MS 5000

typedef struct run_entry {
    struct run_entry *next_live;
    runq_item item; /* its place in the queue (under the manager's lock) */
    char run_id[37];
    int64_t owner_id;
    char thread_id[65];
    char user_dir[65];
    char role[STORE_ROLE_MAX + 1];
    char model[MODEL_NAME_MAX + 1];
    bool has_model;
    int recursion_limit;
    json_t *input;
    json_t *title;                            /* or NULL */
    char checkpoint_id[STORE_RUN_ID_MAX + 1]; /* "": the newest */
    bool no_clarification;
    sbx_cancel cancel;
    run_log *log;         /* the entry's reference */
    bool succeeded;       /* the run ended in success (memory reads its turn) */
    unsigned model_calls; /* the run's calls to its model */
    char last_checkpoint[STORE_RUN_ID_MAX + 1]; /* the run's last checkpoint */
    agent_usage usage;                          /* what the run's model calls cost */
} run_entry;

static run_entry *entry_of(runq_item *it) {
    return (run_entry *)((char *)it - offsetof(run_entry, item));
}

struct run_manager {
    store *st;
    sbx_manager *sandboxes;
    const model_registry *models;
    const authz_policy *policy;
    pthread_mutex_t lock;
    pthread_cond_t work;  /* a run was queued, or stopping */
    pthread_cond_t ended; /* a run ended */
    pthread_cond_t tick;  /* wakes the heartbeat thread early (stopping) */
    runs_limits limits;
    runq *queue;
    run_entry *live; /* queued and running runs */
    bool stopping;
    pthread_t *workers; /* limits.workers */
    size_t n_workers;   /* started */
    pthread_t heartbeat;
    bool heartbeat_started;
    bool workers_ended;   /* runs_stop joined them: the heartbeat thread may end */
    sbx_cancel stop;      /* set by runs_stop: ends the memory calls after runs */
    run_cluster *cluster; /* this gateway among those sharing the store */
};

static void entry_free(run_entry *e) {
    agent_usage_destroy(&e->usage);
    json_decref(e->input);
    json_decref(e->title);
    run_log_close(e->log);
    free(e);
}

static run_entry *live_find_locked(run_manager *m, int64_t owner, const char *thread,
                                   const char *run_id) {
    for (run_entry *e = m->live; e; e = e->next_live)
        if (e->owner_id == owner && strcmp(e->thread_id, thread) == 0 &&
            (!run_id || strcmp(e->run_id, run_id) == 0))
            return e;
    return NULL;
}

static void live_remove_locked(run_manager *m, run_entry *gone) {
    for (run_entry **p = &m->live; *p; p = &(*p)->next_live)
        if (*p == gone) {
            *p = gone->next_live;
            return;
        }
}

/* ---- one run, on a worker ---- */

/* A worker writes a run's records and events whatever fails: each write
 * below that fails is logged naming the run (a worker answers to no one
 * who could do more), and the next one is tried. run_log_flush logs its
 * own failures. */

/* agent_params' emit: the run's events go to its log. */
static void emit_to_log(void *ctx, const char *event, char *data) {
    run_entry *e = ctx;
    if (run_log_append_text(e->log, event, data) < 0)
        log_warn("runs", "run %s: %s event not recorded: %s", e->run_id, event, fawn_errmsg());
}

/* Appends event (data taken) to e's log. */
static void event_record(run_entry *e, const char *event, json_t *data) {
    if (run_log_append(e->log, event, data) < 0)
        log_warn("runs", "run %s: %s event not recorded: %s", e->run_id, event, fawn_errmsg());
}

/* Writes to the store what e's log has not written yet, before its thread
 * is freed: a client that then reads the stored events sees them all. */
static void events_store(run_entry *e) {
    if (run_log_flush(e->log) < 0) /* logged by run_log_flush; run_log_end tries again */
        log_debug("runs", "run %s: last events not stored yet", e->run_id);
}

/* Sets e's record to status (error: its message, or NULL), and with
 * thread_status (not NULL) its thread's, unless the run is no longer this
 * gateway's to write (another ended it: FAWN_ENOENT, returned). */
static int status_record(run_manager *m, const run_entry *e, const char *status, const char *error,
                         const char *thread_status) {
    int r = store_run_own_set_status(m->st, e->run_id, run_cluster_gateway_id(m->cluster), status,
                                     error, thread_status);
    if (r == FAWN_ENOENT)
        log_warn("runs", "run %s: ended meanwhile by another gateway; %s not recorded", e->run_id,
                 status);
    else if (r < 0)
        log_warn("runs", "run %s: status %s not recorded: %s", e->run_id, status, fawn_errmsg());
    return r;
}

/* The thread status after a run that ended with run_status. */
static const char *thread_status_after(const char *run_status) {
    return strcmp(run_status, "error") == 0 ? "error" : "idle";
}

/* What the agent is given to run e (or to read its turn, with cancel). */
static agent_params params_of(run_manager *m, run_entry *e, const sbx_cancel *cancel) {
    return (agent_params){
        .st = m->st,
        .sandboxes = m->sandboxes,
        .models = m->models,
        .policy = m->policy,
        .owner_id = e->owner_id,
        .user_dir = e->user_dir,
        .role = e->role,
        .thread_id = e->thread_id,
        .run_id = e->run_id,
        .model_name = e->has_model ? e->model : NULL,
        .recursion_limit = e->recursion_limit,
        .command_timeout_s = m->limits.command_timeout_s,
        .skills_dir = m->limits.skills_dir,
        .home = m->limits.home,
        .input = e->input,
        .title = e->title,
        .checkpoint_id = e->checkpoint_id,
        .cancel = cancel,
        .emit = emit_to_log,
        .emit_ctx = e,
        .memory = m->limits.memory,
        .subagents = m->limits.subagents,
        .web = m->limits.web,
        .mcp = m->limits.mcp,
        .compaction = m->limits.compaction,
        .usage = &e->usage,
        .no_clarification = e->no_clarification,
    };
}

/* The role e's owner has as e starts (not the one it was accepted with):
 * FAWN_EPERM when the owner is gone. */
static int role_at_start(run_manager *m, run_entry *e) {
    store_user owner;
    int r = store_user_get(m->st, &owner, e->owner_id);
    if (r == FAWN_ENOENT)
        return fawn_err(FAWN_EPERM, "the run's user no longer exists");
    if (r == 0)
        snprintf(e->role, sizeof e->role, "%s", owner.role);
    return r;
}

/* Writes what e's model calls have cost so far to its record. */
static void usage_record(run_manager *m, run_entry *e) {
    char *usage = NULL;
    if (agent_usage_json(&usage, &e->usage) < 0 || store_run_set_usage(m->st, e->run_id, usage) < 0)
        log_warn("runs", "run %s: token usage not recorded: %s", e->run_id, fawn_errmsg());
    free(usage);
}

static void run_execute(run_manager *m, run_entry *e) {
    /* A run another gateway ended before it started never runs here. */
    if (status_record(m, e, "running", NULL, NULL) == FAWN_ENOENT)
        atomic_store(&e->cancel.cancelled, true);
    agent_params p = params_of(m, e, &e->cancel);
    agent_outcome out;
    int r = atomic_load(&e->cancel.cancelled) ? FAWN_ECANCELED : role_at_start(m, e);
    if (r == 0)
        r = agent_run(&out, &p);
    if (r < 0) {
        memset(&out, 0, sizeof out);
        bool stopped = r == FAWN_ECANCELED;
        snprintf(out.status, sizeof out.status, "%s", stopped ? "interrupted" : "error");
        out.error = strdup(stopped ? "Run cancelled" : fawn_errmsg());
    }
    /* The record is final before the stream ends: a client that has seen
     * `end` reads the run's final status and cost. */
    usage_record(m, e);
    (void)status_record(m, e, out.status, strcmp(out.status, "success") == 0 ? NULL : out.error,
                        thread_status_after(out.status));
    if (out.stop_reason[0])
        event_record(
            e, "custom",
            json_pack("{s:s, s:s}", "type", "run_stopped", "stop_reason", out.stop_reason));
    if (strcmp(out.status, "error") == 0)
        event_record(e, "error",
                     json_pack("{s:s, s:s}", "error", "RunError", "message",
                               out.error ? out.error : "the run failed"));
    event_record(e, "end", NULL);
    events_store(e);
    log_info("runs", "run %s on thread %s: %s%s%s", e->run_id, e->thread_id, out.status,
             out.stop_reason[0] ? " / " : "", out.stop_reason);
    e->succeeded = strcmp(out.status, "success") == 0;
    e->model_calls = out.model_calls;
    snprintf(e->last_checkpoint, sizeof e->last_checkpoint, "%s", out.checkpoint_id);
    agent_outcome_clear(&out);
}

/* Takes the run the queue's policy names, until the manager stops (runs
 * still waiting then are runs_stop's). */
static void *worker_main(void *arg) {
    run_manager *m = arg;
    pthread_mutex_lock(&m->lock);
    for (;;) {
        runq_item *it = NULL;
        while (!m->stopping && !(it = runq_take(m->queue)))
            pthread_cond_wait(&m->work, &m->lock);
        if (!it)
            break;
        run_entry *e = entry_of(it);
        pthread_mutex_unlock(&m->lock);
        run_execute(m, e);
        /* The thread is free before the stream ends: a client that has seen
         * `end` may start the next run at once. */
        pthread_mutex_lock(&m->lock);
        runq_remove(m->queue, it);
        live_remove_locked(m, e);
        pthread_cond_broadcast(&m->ended);
        pthread_mutex_unlock(&m->lock);
        run_log_end(e->log);
        /* The run is over for its clients (its record, its stream, its
         * thread): reading its turn for memory holds this worker only. */
        if (e->succeeded) {
            agent_params p = params_of(m, e, &m->stop);
            agent_memory_extract(&p, e->last_checkpoint, e->model_calls);
            if (p.memory && p.memory->enabled)
                usage_record(m, e); /* with the extraction's call */
        }
        entry_free(e);
        pthread_mutex_lock(&m->lock);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* What killing a run's commands needs of it, copied under the lock so the
 * kill happens unlocked. */
typedef struct kill_target {
    char run_id[37];
    char thread_id[65];
    char user_dir[65];
} kill_target;

static kill_target kill_target_of(const run_entry *e) {
    kill_target k;
    memcpy(k.run_id, e->run_id, sizeof k.run_id);
    memcpy(k.thread_id, e->thread_id, sizeof k.thread_id);
    memcpy(k.user_dir, e->user_dir, sizeof k.user_dir);
    return k;
}

static void kill_commands(run_manager *m, const kill_target *k);

/* Kills again, once, the commands of every cancelled run still going: a
 * cancel that came just before its command started would otherwise miss
 * it. */
static void kill_cancelled_locked(run_manager *m) {
    kill_target *copies = calloc(m->limits.workers, sizeof *copies);
    if (!copies)
        return; /* the next round tries again */
    size_t n = 0;
    for (run_entry *e = m->live; e && n < m->limits.workers; e = e->next_live)
        if (e->item.state == RUNQ_RUNNING && atomic_load(&e->cancel.cancelled))
            copies[n++] = kill_target_of(e);
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < n; i++)
        kill_commands(m, &copies[i]);
    free(copies);
    pthread_mutex_lock(&m->lock);
}

/* Every second (and when a deferred cancel wakes it): heartbeats for idle
 * readers, and kills for cancelled runs,
 * until the workers have ended (a stop cancels every run: a command that
 * started just after the stop's own kill is killed here). */
static void *heartbeat_main(void *arg) {
    run_manager *m = arg;
    pthread_mutex_lock(&m->lock);
    while (!m->workers_ended) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += 1;
        pthread_cond_timedwait(&m->tick, &m->lock, &until);
        int64_t now = fawn_now_ms();
        for (run_entry *e = m->live; e; e = e->next_live)
            run_log_heartbeat(e->log, now);
        if (!m->workers_ended)
            kill_cancelled_locked(m);
    }
    pthread_mutex_unlock(&m->lock);
    return NULL;
}

/* The workers and the heartbeat thread. */
static int threads_start(run_manager *m) {
    m->workers = calloc(m->limits.workers, sizeof *m->workers);
    if (!m->workers)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < m->limits.workers; i++, m->n_workers++)
        if (pthread_create(&m->workers[i], NULL, worker_main, m) != 0)
            return fawn_err(FAWN_EIO, "cannot start a run worker");
    if (pthread_create(&m->heartbeat, NULL, heartbeat_main, m) != 0)
        return fawn_err(FAWN_EIO, "cannot start the heartbeat thread");
    m->heartbeat_started = true;
    return 0;
}

int runs_new(run_manager **out, store *st, sbx_manager *sandboxes, const model_registry *models,
             const authz_policy *policy, const runs_limits *limits) {
    *out = NULL;
    if (!limits->workers || !limits->command_timeout_s)
        return fawn_err(FAWN_EINVAL, "runs need at least one worker and a command timeout");
    run_manager *m = calloc(1, sizeof *m);
    if (!m)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *m = (run_manager){
        .st = st, .sandboxes = sandboxes, .models = models, .policy = policy, .limits = *limits};
    pthread_mutex_init(&m->lock, NULL);
    pthread_cond_init(&m->work, NULL);
    pthread_cond_init(&m->ended, NULL);
    pthread_cond_init(&m->tick, NULL);
    run_cluster_config cc = {.gateway_id = limits->gateway_id,
                             .heartbeat_ms = limits->heartbeat_ms,
                             .lease_ms = limits->lease_ms};
    int r = runq_new(&m->queue, limits);
    if (r == 0)
        r = run_cluster_start(&m->cluster, m, st, &cc);
    if (r == 0)
        r = threads_start(m);
    if (r < 0) {
        runs_free(m);
        return r;
    }
    *out = m;
    return 0;
}

static void kill_scope(run_manager *m, const kill_target *k, const char *scope) {
    int r = sbx_kill_scope(m->sandboxes, k->user_dir, k->thread_id, scope, RUNS_KILL_TIMEOUT_MS);
    if (r < 0 && r != FAWN_ENOENT)
        log_warn("runs", "run %s: a command of %s could not be killed: %s", k->run_id, scope,
                 fawn_errmsg());
}

/* Kills the commands a cancelled run may be waiting for: its scopes' shell
 * sessions (the lead's and each sub-agent's; a scope no lease holds costs
 * a lookup), through the manager's record of the leases the run holds (no
 * acquisition: stopping never passes the gate again). */
static void kill_commands(run_manager *m, const kill_target *k) {
    char scope[SBX_SCOPE_MAX + 1];
    agent_scope(scope, k->run_id);
    kill_scope(m, k, scope);
    unsigned tasks = agent_subagents_enabled(m->limits.subagents)
                         ? agent_subagents_limits(m->limits.subagents)->max_per_run
                         : 0;
    for (unsigned i = 1; i <= tasks; i++) {
        agent_task_scope(scope, k->run_id, i);
        kill_scope(m, k, scope);
    }
}

/* Ends e, a run no worker took, as interrupted with why (lock held; it is
 * dropped around the store writes): out of the queue, its record and its
 * thread's status final, then its log ended, then e freed. As a worker's
 * run, e stays live (its thread claimed) until its records are final. */
static void entry_end_unstarted_locked(run_manager *m, run_entry *e, const char *why) {
    runq_remove(m->queue, &e->item);
    pthread_mutex_unlock(&m->lock);
    (void)status_record(m, e, "interrupted", why, "idle");
    event_record(e, "end", NULL);
    events_store(e);
    pthread_mutex_lock(&m->lock);
    live_remove_locked(m, e);
    pthread_cond_broadcast(&m->ended);
    pthread_mutex_unlock(&m->lock);
    run_log_end(e->log);
    entry_free(e);
    pthread_mutex_lock(&m->lock);
}

/* Stops e (lock held). A run still waiting ends at once, and e is freed;
 * a running one's worker ends it, its commands killed here (unlocked). */
static void cancel_entry(run_manager *m, run_entry *e) {
    atomic_store(&e->cancel.cancelled, true);
    if (e->item.state == RUNQ_WAITING) {
        entry_end_unstarted_locked(m, e, "Run cancelled");
        return;
    }
    kill_target k = kill_target_of(e);
    pthread_mutex_unlock(&m->lock);
    kill_commands(m, &k);
    pthread_mutex_lock(&m->lock);
}

/* Stops e (lock held) as cancel_entry does, but leaves the kill of its
 * commands to the heartbeat thread, woken now: the cluster thread, which
 * must keep beating, never waits for a kill. */
static void cancel_entry_deferred_locked(run_manager *m, run_entry *e) {
    atomic_store(&e->cancel.cancelled, true);
    if (e->item.state == RUNQ_WAITING)
        entry_end_unstarted_locked(m, e, "Run cancelled");
    else
        pthread_cond_broadcast(&m->tick);
}

/* Waits (lock held) until no run named run_id (any of the thread's when
 * NULL) is live, up to wait_ms. */
static int wait_ended_locked(run_manager *m, int64_t owner, const char *thread, const char *run_id,
                             int64_t wait_ms) {
    int64_t deadline = fawn_now_ms() + wait_ms;
    while (live_find_locked(m, owner, thread, run_id)) {
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0)
            return fawn_err(FAWN_ETIMEDOUT, "the run has not ended yet");
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_sec += left / 1000;
        until.tv_nsec += (left % 1000) * 1000000;
        if (until.tv_nsec >= 1000000000) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000;
        }
        pthread_cond_timedwait(&m->ended, &m->lock, &until);
    }
    return 0;
}

static run_entry *waiting_first_locked(run_manager *m) {
    run_entry *e = m->live;
    while (e && e->item.state != RUNQ_WAITING)
        e = e->next_live;
    return e;
}

void runs_stop(run_manager *m) {
    pthread_mutex_lock(&m->lock);
    bool first = !m->stopping;
    m->stopping = true;
    atomic_store(&m->stop.cancelled, true);
    for (run_entry *e = m->live; e; e = e->next_live)
        atomic_store(&e->cancel.cancelled, true);
    pthread_cond_broadcast(&m->work);
    pthread_cond_broadcast(&m->tick);
    if (first)
        kill_cancelled_locked(m);
    pthread_mutex_unlock(&m->lock);
    if (!first)
        return;
    for (size_t i = 0; i < m->n_workers; i++)
        pthread_join(m->workers[i], NULL);
    pthread_mutex_lock(&m->lock);
    m->workers_ended = true;
    pthread_cond_broadcast(&m->tick);
    pthread_mutex_unlock(&m->lock);
    if (m->heartbeat_started)
        pthread_join(m->heartbeat, NULL);
    /* Runs still waiting never started: they end as interrupted. A run
     * runs_start has not made waiting yet is ended there. */
    pthread_mutex_lock(&m->lock);
    for (run_entry *e = waiting_first_locked(m); e; e = waiting_first_locked(m))
        entry_end_unstarted_locked(m, e, "the gateway stopped");
    pthread_mutex_unlock(&m->lock);
    run_cluster_stop(m->cluster);
}

void runs_free(run_manager *m) {
    if (!m)
        return;
    runs_stop(m);
    pthread_cond_destroy(&m->work);
    pthread_cond_destroy(&m->ended);
    pthread_cond_destroy(&m->tick);
    pthread_mutex_destroy(&m->lock);
    runq_free(m->queue);
    run_cluster_free(m->cluster);
    free(m->workers);
    free(m);
}

/* ---- starting, cancelling ---- */

static int entry_new(run_entry **out, run_manager *m, const run_request *rq) {
    run_entry *e = calloc(1, sizeof *e);
    if (!e)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    agent_usage_init(&e->usage);
    fawn_random_uuid(e->run_id);
    e->owner_id = rq->owner_id;
    snprintf(e->thread_id, sizeof e->thread_id, "%s", rq->thread_id);
    snprintf(e->user_dir, sizeof e->user_dir, "%s", rq->user_dir);
    snprintf(e->role, sizeof e->role, "%s", rq->role ? rq->role : "");
    e->has_model = rq->model_name != NULL;
    snprintf(e->model, sizeof e->model, "%s", rq->model_name ? rq->model_name : "");
    e->recursion_limit = rq->recursion_limit;
    e->no_clarification = rq->no_clarification;
    e->input = rq->input ? json_deep_copy(rq->input) : json_array();
    e->title = rq->title ? json_deep_copy(rq->title) : NULL;
    snprintf(e->checkpoint_id, sizeof e->checkpoint_id, "%s",
             rq->checkpoint_id ? rq->checkpoint_id : "");
    int r = e->input && (e->title || !rq->title) ? run_log_new(&e->log, m->st, e->run_id)
                                                 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        entry_free(e);
        return r;
    }
    *out = e;
    return 0;
}

/* Claims the thread for e (lock held): refuses or interrupts the active
 * run; then admits e to the queue (not yet startable). */
static int claim_thread_locked(run_manager *m, run_entry *e, bool interrupt) {
    run_entry *active = live_find_locked(m, e->owner_id, e->thread_id, NULL);
    if (active && !interrupt)
        return fawn_err(FAWN_EBUSY, "Thread %s is busy with run %s", e->thread_id, active->run_id);
    if (active) {
        cancel_entry(m, active);
        int r = wait_ended_locked(m, e->owner_id, e->thread_id, NULL, RUNS_INTERRUPT_WAIT_MS);
        if (r < 0)
            return fawn_err(FAWN_EBUSY, "Thread %s: the interrupted run has not ended yet",
                            e->thread_id);
    }
    if (m->stopping)
        return fawn_err(FAWN_EBUSY, "The gateway is stopping");
    int r = runq_add(m->queue, &e->item, e->owner_id);
    if (r < 0)
        return r;
    e->next_live = m->live;
    m->live = e;
    return 0;
}

/* The store's record of e, the thread marked busy, the metadata event. */
static int record_run(run_manager *m, run_entry *e, const run_request *rq) {
    store_run row = {
        .owner_id = e->owner_id, .kwargs = (char *)rq->kwargs, .metadata = (char *)rq->metadata};
    snprintf(row.run_id, sizeof row.run_id, "%s", e->run_id);
    snprintf(row.thread_id, sizeof row.thread_id, "%s", e->thread_id);
    snprintf(row.assistant_id, sizeof row.assistant_id, "%s", AGENT_ASSISTANT_ID);
    snprintf(row.gateway_id, sizeof row.gateway_id, "%s", run_cluster_gateway_id(m->cluster));
    int r = store_run_create(m->st, &row);
    if (r == 0)
        r = store_thread_set_status(m->st, e->owner_id, e->thread_id, "busy");
    if (r == 0)
        r = run_log_append(e->log, "metadata",
                           json_pack("{s:s, s:s}", "run_id", e->run_id, "thread_id", e->thread_id));
    return r;
}

/* Makes e, recorded, startable (lock held); a run cancelled, or whose
 * manager began stopping, while it was being recorded ends here instead. */
static void queue_ready_locked(run_manager *m, run_entry *e) {
    runq_ready(m->queue, &e->item);
    if (m->stopping)
        entry_end_unstarted_locked(m, e, "the gateway stopped");
    else if (atomic_load(&e->cancel.cancelled))
        entry_end_unstarted_locked(m, e, "Run cancelled");
    else
        pthread_cond_signal(&m->work);
}

/* Whether the owner's run has ended, as stored: 0 when it has,
 * FAWN_ETIMEDOUT when it has not within wait_ms (looked at every
 * RUNS_STORE_POLL_MS). */
static int wait_stored_end(run_manager *m, int64_t owner, const char *thread, const char *run_id,
                           int64_t wait_ms) {
    int64_t deadline = fawn_now_ms() + wait_ms;
    for (;;) {
        store_run run;
        int r = store_run_get(m->st, &run, owner, thread, run_id);
        bool ended = r == 0 && strcmp(run.status, "pending") != 0 &&
                     strcmp(run.status, "running") != 0;
        store_run_clear(&run);
        if (ended || r == FAWN_ENOENT)
            return 0;
        if (fawn_now_ms() >= deadline)
            return fawn_err(FAWN_ETIMEDOUT, "the run has not ended yet");
        nanosleep(&(struct timespec){.tv_nsec = RUNS_STORE_POLL_MS * 1000000L}, NULL);
    }
}

/* multitask_strategy interrupt against the thread's active run when
 * another gateway runs it: asks for its cancel and waits for it to end.
 * FAWN_EBUSY when it has not ended within RUNS_INTERRUPT_WAIT_MS. */
static int interrupt_elsewhere(run_manager *m, const run_entry *e) {
    store_run active;
    int r = store_run_active(m->st, &active, e->owner_id, e->thread_id);
    if (r == FAWN_ENOENT)
        return 0; /* it ended meanwhile */
    if (r == 0)
        r = store_run_request_cancel(m->st, e->owner_id, e->thread_id, active.run_id);
    if (r == 0 || r == FAWN_ENOENT)
        r = wait_stored_end(m, e->owner_id, e->thread_id, active.run_id, RUNS_INTERRUPT_WAIT_MS);
    store_run_clear(&active);
    return r == FAWN_ETIMEDOUT
               ? fawn_err(FAWN_EBUSY, "Thread %s: the interrupted run has not ended yet",
                          e->thread_id)
               : r;
}

int runs_start(char run_id[37], run_manager *m, const run_request *rq) {
    run_id[0] = '\0';
    run_entry *e = NULL;
    int r = entry_new(&e, m, rq);
    if (r < 0)
        return r;
    pthread_mutex_lock(&m->lock);
    r = claim_thread_locked(m, e, rq->interrupt);
    pthread_mutex_unlock(&m->lock);
    if (r < 0) {
        entry_free(e);
        return r;
    }
    r = record_run(m, e, rq);
    if (r == FAWN_EBUSY && rq->interrupt && interrupt_elsewhere(m, e) == 0)
        r = record_run(m, e, rq);
    pthread_mutex_lock(&m->lock);
    if (r < 0) {
        runq_remove(m->queue, &e->item);
        live_remove_locked(m, e);
        pthread_cond_broadcast(&m->ended);
    } else {
        memcpy(run_id, e->run_id, 37);
        queue_ready_locked(m, e);
    }
    pthread_mutex_unlock(&m->lock);
    if (r < 0)
        entry_free(e);
    return r;
}

int runs_cancel(run_manager *m, int64_t owner_id, const char *thread_id, const char *run_id,
                int64_t wait_ms) {
    pthread_mutex_lock(&m->lock);
    run_entry *e = live_find_locked(m, owner_id, thread_id, run_id);
    if (e)
        cancel_entry(m, e);
    int r = e && wait_ms > 0 ? wait_ended_locked(m, owner_id, thread_id, run_id, wait_ms) : 0;
    pthread_mutex_unlock(&m->lock);
    if (e)
        return r;
    r = store_run_request_cancel(m->st, owner_id, thread_id, run_id);
    return r == 0 && wait_ms > 0 ? wait_stored_end(m, owner_id, thread_id, run_id, wait_ms) : r;
}

bool runs_thread_busy(run_manager *m, int64_t owner_id, const char *thread_id) {
    pthread_mutex_lock(&m->lock);
    bool busy = live_find_locked(m, owner_id, thread_id, NULL) != NULL;
    pthread_mutex_unlock(&m->lock);
    if (busy)
        return true;
    store_run active;
    int r = store_run_active(m->st, &active, owner_id, thread_id);
    store_run_clear(&active);
    return r != FAWN_ENOENT; /* another gateway's run, or the store cannot say: busy */
}

run_log *runs_log_open(run_manager *m, const char *run_id) {
    pthread_mutex_lock(&m->lock);
    run_log *l = NULL;
    for (run_entry *e = m->live; e && !l; e = e->next_live)
        if (strcmp(e->run_id, run_id) == 0) {
            l = e->log;
            run_log_ref(l);
        }
    pthread_mutex_unlock(&m->lock);
    return l;
}

/* ---- for the cluster thread (runs_internal.h) ---- */

void runs_cancel_live(run_manager *m, const char *run_id) {
    pthread_mutex_lock(&m->lock);
    run_entry *e = m->live;
    while (e && strcmp(e->run_id, run_id) != 0)
        e = e->next_live;
    if (e && !atomic_load(&e->cancel.cancelled))
        cancel_entry_deferred_locked(m, e);
    pthread_mutex_unlock(&m->lock);
}

static run_entry *live_uncancelled_locked(run_manager *m) {
    run_entry *e = m->live;
    while (e && atomic_load(&e->cancel.cancelled))
        e = e->next_live;
    return e;
}

void runs_cancel_all(run_manager *m) {
    pthread_mutex_lock(&m->lock);
    for (run_entry *e = live_uncancelled_locked(m); e; e = live_uncancelled_locked(m))
        cancel_entry_deferred_locked(m, e);
    pthread_mutex_unlock(&m->lock);
}

bool runs_any_live(run_manager *m) {
    pthread_mutex_lock(&m->lock);
    bool any = m->live != NULL;
    pthread_mutex_unlock(&m->lock);
    return any;
}

void runs_flush_stale(run_manager *m, int64_t older_than_ms) {
    pthread_mutex_lock(&m->lock);
    size_t n = 0;
    for (run_entry *e = m->live; e; e = e->next_live)
        n++;
    run_log **logs = n ? calloc(n, sizeof *logs) : NULL;
    size_t k = 0;
    for (run_entry *e = m->live; logs && e; e = e->next_live) {
        run_log_ref(e->log);
        logs[k++] = e->log;
    }
    pthread_mutex_unlock(&m->lock);
    for (size_t i = 0; i < k; i++) {
        run_log_flush_stale(logs[i], older_than_ms);
        run_log_close(logs[i]);
    }
    free(logs);
}

bool runs_store_wait(run_manager *m, void (*wake)(void *ctx), void (*suspend)(void *ctx),
                     void *ctx) {
    return run_cluster_store_wait(m->cluster, wake, suspend, ctx);
}

void runs_store_unwait(run_manager *m, void *ctx) { run_cluster_store_unwait(m->cluster, ctx); }
