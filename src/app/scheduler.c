/* The scheduler (app.h, "scheduled tasks"): one thread that looks for due
 * tasks, claims each occurrence in the store and starts it as a run of
 * the task's owner.
 *
 * Exactly once, whatever dies when:
 *  1. The claim (store_task_claim) is one transaction: it checks the task
 *     is still due for that occurrence, records the task run "claimed"
 *     (unique per occurrence), advances next_run_at past now and leases
 *     the task to this gateway. A crash before it commits changed
 *     nothing: the occurrence is still due after a restart. Another
 *     claimer of the same occurrence finds next_run_at moved on.
 *  2. The run is started with the claim's id in its metadata
 *     (scheduled_task_run_id), then the claim is recorded started
 *     (store_task_claim_started). A crash between the two leaves a claim
 *     whose lease expires (APP_SCHEDULE_LEASE_MS); the next claimer takes
 *     it over (store_task_reclaim, a compare-and-swap), looks for a run
 *     carrying the claim's id (store_task_claim_find_run): found, it only
 *     records it; not found, it starts it. So a claimed occurrence is
 *     neither lost nor started twice.
 *  3. A run started and then cut short by the crash is ended by the run
 *     executor's restart sweep (store_run_abandon_unfinished) and reads
 *     as failed in the task's history; the occurrence is not run again.
 * Occurrences missed while no gateway ran are not caught up one by one
 * (as Vixie cron): the task runs once when it is found due, and its next
 * run is the first occurrence after now. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "app/app_internal.h"
#include "schedule/schedule.h"

/* How long a claim is leased: the claim-to-start step takes milliseconds,
 * and two minutes outlast any pause of a live gateway (DeerFlow's
 * lease_seconds, 120), so only a dead claimer's claim is taken over. */
#define APP_SCHEDULE_LEASE_MS 120000
/* Due tasks one tick handles at most; the rest wait a tick. */
#define APP_SCHEDULE_TICK_MAX 32

struct app_scheduler {
    app *a;
    pthread_t thread;
    bool started;
    pthread_mutex_t mu;
    pthread_cond_t wake; /* a kick, or stopping */
    bool stopping, kicked;
    char lease_owner[80]; /* this gateway: host, process and a random part */
};

/* A claim's run to start. */
typedef struct claim_spec {
    const store_task *task;
    const char *claim_id, *thread_id, *trigger;
} claim_spec;

/* The run's metadata: which task and claim it is (the claim's id is how
 * a later claimer finds it). */
static char *run_metadata(const claim_spec *c) {
    json_t *m = json_pack("{s:s, s:s, s:s}", "scheduled_task_id", c->task->id,
                          "scheduled_task_run_id", c->claim_id, "scheduled_trigger", c->trigger);
    char *text = m ? json_dumps(m, JSON_COMPACT) : NULL;
    json_decref(m);
    return text;
}

/* The owner as they are now, allowed to start runs on threads: a stop
 * reason into why (and FAWN_EPERM) when not. */
static int owner_now(store_user *user, char *why, size_t size, app *a, const store_task *t) {
    int r = store_user_get(a->st, user, t->owner_id);
    if (r == FAWN_ENOENT) {
        snprintf(why, size, "the task's owner no longer exists");
        return fawn_err(FAWN_EPERM, "%s", why);
    }
    if (r < 0)
        return r;
    unsigned need = AUTHZ_THREADS_WRITE | AUTHZ_RUNS_CREATE;
    if ((authz_route_permissions(a->policy, user->role) & need) != need) {
        snprintf(why, size, "the owner's role %s no longer allows threads:write and runs:create",
                 user->role);
        return fawn_err(FAWN_EPERM, "%s", why);
    }
    return 0;
}

/* The thread the run goes to: the task's own (it must still exist), or a
 * new one for this run. */
static int run_thread(app *a, const claim_spec *c, char *why, size_t size) {
    store_thread t;
    int r;
    if (strcmp(c->task->context_mode, "reuse_thread") == 0) {
        r = store_thread_get(a->st, &t, c->task->owner_id, c->thread_id);
        if (r == FAWN_ENOENT)
            snprintf(why, size, "the task's thread %s no longer exists", c->thread_id);
    } else {
        bool existed;
        char meta[STORE_TASK_ID_MAX + 40];
        snprintf(meta, sizeof meta, "{\"scheduled_task_id\":\"%s\"}", c->task->id);
        r = store_thread_create(a->st, &t, &existed, c->task->owner_id, c->thread_id, meta);
    }
    store_thread_clear(&t);
    return r;
}

/* Starts the run of a claim as its owner; records it started, or failed
 * (stopping the task when it can never run: its owner or thread is gone,
 * or the role no longer allows it). */
static int claim_start(char run_id[37], app *a, const claim_spec *c) {
    run_id[0] = '\0';
    char why[256] = "";
    store_user user;
    int r = owner_now(&user, why, sizeof why, a, c->task);
    if (r == 0)
        r = run_thread(a, c, why, sizeof why);
    json_t *input = NULL, *msgs = json_pack("[{s:s, s:s}]", "type", "human", "content",
                                            c->task->prompt ? c->task->prompt : "");
    if (r == 0)
        r = msgs ? agent_input_messages(&input, msgs) : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(msgs);
    char *metadata = r == 0 ? run_metadata(c) : NULL;
    if (r == 0 && !metadata)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    app_run_spec spec = {.thread_id = c->thread_id,
                         .recursion_limit = AGENT_RECURSION_DEFAULT,
                         .input = input,
                         .kwargs = "{}",
                         .metadata = metadata,
                         .no_clarification = true};
    if (r == 0)
        r = app_run_start(run_id, a, &user, &spec);
    json_decref(input);
    free(metadata);
    int64_t now = fawn_wall_ms();
    if (r == 0) {
        if (store_task_claim_started(a->st, c->task->id, c->claim_id, run_id, now) < 0)
            log_warn("schedule", "task %s: run %s started; %s", c->task->id, run_id, fawn_errmsg());
        log_info("schedule", "task %s: %s run %s on thread %s", c->task->id, c->trigger, run_id,
                 c->thread_id);
        return 0;
    }
    char error[512];
    snprintf(error, sizeof error, "%s", fawn_errmsg());
    bool stop = why[0] || r == FAWN_EPERM;
    if (store_task_claim_failed(a->st, c->task->id, c->claim_id, error,
                                stop ? (why[0] ? why : error) : NULL, now) < 0)
        log_warn("schedule", "task %s: failure not recorded: %s", c->task->id, fawn_errmsg());
    log_warn("schedule", "task %s: %s run not started: %s%s", c->task->id, c->trigger, error,
             stop ? " (task stopped)" : "");
    return fawn_err(r, "%s", error);
}

/* The thread a new claim of t uses. */
static void claim_thread(char out[65], const store_task *t) {
    if (strcmp(t->context_mode, "reuse_thread") == 0 && t->thread_id[0])
        snprintf(out, 65, "%s", t->thread_id);
    else
        fawn_random_uuid(out);
}

/* Stops a task whose schedule can no longer be computed (say, its zone
 * was removed from the host). */
static void task_stop(app *a, store_task *t, const char *why) {
    snprintf(t->status, sizeof t->status, "stopped");
    free(t->stop_reason);
    t->stop_reason = strdup(why);
    t->next_run_at_ms = 0;
    if (store_task_update(a->st, t) < 0)
        log_warn("schedule", "task %s: not stopped: %s", t->id, fawn_errmsg());
    log_warn("schedule", "task %s stopped: %s", t->id, why);
}

/* Claims t's due occurrence and starts it. false when the budget is full
 * (the rest wait for the next tick). */
static bool due_dispatch(app_scheduler *sc, store_task *t, int64_t now) {
    app *a = sc->a;
    int64_t next = 0;
    if (strcmp(t->schedule_type, SCHED_KIND_CRON) == 0 &&
        sched_next(&next, t->schedule_type, t->schedule_spec, t->timezone, now) < 0) {
        task_stop(a, t, fawn_errmsg());
        return true;
    }
    char claim_id[37], thread_id[65], run_id[37];
    fawn_random_uuid(claim_id);
    claim_thread(thread_id, t);
    store_claim_req q = {.task_id = t->id,
                         .trigger = "scheduled",
                         .due_ms = t->next_run_at_ms,
                         .next_ms = next,
                         .claim_id = claim_id,
                         .thread_id = thread_id,
                         .lease_owner = sc->lease_owner,
                         .now_ms = now,
                         .lease_ms = APP_SCHEDULE_LEASE_MS,
                         .max_active = a->cfg->schedules.max_concurrent_runs};
    enum store_claim how;
    store_task claimed;
    if (store_task_claim(a->st, &how, &claimed, &q) < 0) {
        log_warn("schedule", "task %s: not claimed: %s", t->id, fawn_errmsg());
        return true;
    }
    if (how == STORE_CLAIM_TAKEN) {
        claim_spec c = {&claimed, claim_id, thread_id, "scheduled"};
        (void)claim_start(run_id, a, &c); /* a failure is recorded with the task */
    } else if (how == STORE_CLAIM_SKIPPED)
        log_info("schedule", "task %s: skipped, its previous run is still active", t->id);
    store_task_clear(&claimed);
    return how != STORE_CLAIM_FULL;
}

/* Takes over t's claim, whose claimer died: records the run it started,
 * or starts it. */
static void orphan_recover(app_scheduler *sc, store_task *t, int64_t now) {
    app *a = sc->a;
    if (store_task_reclaim(a->st, t->id, t->claim_id, sc->lease_owner, now, APP_SCHEDULE_LEASE_MS) <
        0)
        return; /* someone else has it */
    store_task_run claim;
    char run_id[37] = "";
    int r = store_task_claim_get(a->st, &claim, t->claim_id);
    if (r == 0)
        r = store_task_claim_find_run(a->st, run_id, t->owner_id, claim.thread_id, t->claim_id);
    if (r == 0 && run_id[0]) {
        log_info("schedule", "task %s: claim %s had started run %s", t->id, t->claim_id, run_id);
        if (store_task_claim_started(a->st, t->id, t->claim_id, run_id, now) < 0)
            log_warn("schedule", "task %s: %s", t->id, fawn_errmsg());
    } else if (r == 0) {
        log_info("schedule", "task %s: starting claim %s its claimer left", t->id, t->claim_id);
        claim_spec c = {t, t->claim_id, claim.thread_id, claim.trigger};
        (void)claim_start(run_id, a, &c);
    } else
        log_warn("schedule", "task %s: claim %s: %s", t->id, t->claim_id, fawn_errmsg());
    store_task_run_clear(&claim);
}

/* One look at the store: every due task, every orphaned claim. */
static void tick(app_scheduler *sc) {
    int64_t now = fawn_wall_ms();
    store_task *due;
    size_t n;
    if (store_task_due(sc->a->st, &due, &n, now, APP_SCHEDULE_TICK_MAX) < 0) {
        log_warn("schedule", "due tasks not read: %s", fawn_errmsg());
        return;
    }
    bool room = true;
    for (size_t i = 0; i < n; i++) {
        if (due[i].claim_id[0])
            orphan_recover(sc, &due[i], now);
        else if (room)
            room = due_dispatch(sc, &due[i], now);
        store_task_clear(&due[i]);
    }
    free(due);
}

static void *scheduler_main(void *arg) {
    app_scheduler *sc = arg;
    uint32_t poll_s = sc->a->cfg->schedules.poll_interval_s;
    pthread_mutex_lock(&sc->mu);
    while (!sc->stopping) {
        pthread_mutex_unlock(&sc->mu);
        tick(sc);
        pthread_mutex_lock(&sc->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += poll_s;
        while (!sc->stopping && !sc->kicked &&
               pthread_cond_timedwait(&sc->wake, &sc->mu, &until) == 0)
            ;
        sc->kicked = false;
    }
    pthread_mutex_unlock(&sc->mu);
    return NULL;
}

int app_scheduler_start(app_scheduler **out, app *a) {
    *out = NULL;
    app_scheduler *sc = calloc(1, sizeof *sc);
    if (!sc)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sc->a = a;
    char host[40] = "", nonce[37];
    gethostname(host, sizeof host - 1);
    fawn_random_uuid(nonce);
    snprintf(sc->lease_owner, sizeof sc->lease_owner, "%.39s:%d:%.8s", host, (int)getpid(), nonce);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&sc->mu, NULL);
    pthread_cond_init(&sc->wake, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&sc->thread, NULL, scheduler_main, sc) != 0) {
        app_scheduler_free(sc);
        return fawn_err(FAWN_EIO, "cannot start the scheduler's thread");
    }
    sc->started = true;
    log_info("schedule", "scheduler started (%s): at most %u runs at once, looking every %u s",
             sc->lease_owner, a->cfg->schedules.max_concurrent_runs,
             a->cfg->schedules.poll_interval_s);
    *out = sc;
    return 0;
}

void app_scheduler_stop(app_scheduler *sc) {
    if (!sc)
        return;
    pthread_mutex_lock(&sc->mu);
    bool join = sc->started && !sc->stopping;
    sc->stopping = true;
    pthread_cond_broadcast(&sc->wake);
    pthread_mutex_unlock(&sc->mu);
    if (join)
        pthread_join(sc->thread, NULL);
}

void app_scheduler_free(app_scheduler *sc) {
    if (!sc)
        return;
    app_scheduler_stop(sc);
    pthread_cond_destroy(&sc->wake);
    pthread_mutex_destroy(&sc->mu);
    free(sc);
}

void app_schedule_kick(app *a) {
    app_scheduler *sc = a->scheduler;
    if (!sc)
        return;
    pthread_mutex_lock(&sc->mu);
    sc->kicked = true;
    pthread_cond_broadcast(&sc->wake);
    pthread_mutex_unlock(&sc->mu);
}

int app_schedule_trigger(enum app_trigger *out, char run_id[37], char thread_id[65], app *a,
                         const store_user *user, const char *task_id) {
    *out = APP_TRIGGER_ACTIVE;
    run_id[0] = thread_id[0] = '\0';
    store_task t;
    int r = store_task_get(a->st, &t, user->id, task_id);
    char claim_id[37];
    fawn_random_uuid(claim_id);
    if (r == 0)
        claim_thread(thread_id, &t);
    store_task_clear(&t);
    char lease_owner[80];
    snprintf(lease_owner, sizeof lease_owner, "trigger:%.60s",
             a->scheduler ? a->scheduler->lease_owner : "no-scheduler");
    store_claim_req q = {.task_id = task_id,
                         .owner_id = user->id,
                         .trigger = "manual",
                         .triggered_by = user->id,
                         .claim_id = claim_id,
                         .thread_id = thread_id,
                         .lease_owner = lease_owner,
                         .now_ms = fawn_wall_ms(),
                         .lease_ms = APP_SCHEDULE_LEASE_MS,
                         .max_active = a->cfg->schedules.max_concurrent_runs};
    enum store_claim how = STORE_CLAIM_LOST;
    store_task claimed = {0};
    if (r == 0)
        r = store_task_claim(a->st, &how, &claimed, &q);
    if (r == 0 && how == STORE_CLAIM_TAKEN) {
        claim_spec c = {&claimed, claim_id, thread_id, "manual"};
        r = claim_start(run_id, a, &c);
        *out = APP_TRIGGER_STARTED;
    } else if (r == 0)
        *out = how == STORE_CLAIM_FULL ? APP_TRIGGER_FULL : APP_TRIGGER_ACTIVE;
    store_task_clear(&claimed);
    return r;
}
