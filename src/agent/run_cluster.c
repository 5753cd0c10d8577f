/* The gateway among those sharing one store (runs_internal.h): its lease,
 * renewed every heartbeat_ms; the reaping of gateways silent for
 * lease_ms (their unfinished runs end, store_gateway_reap); the self-fence
 * of a gateway that finds its own lease lost; and, every
 * RUNS_STORE_POLL_MS, what crosses gateways through the store: cancel
 * requests for runs live here, events of runs live here that a follower
 * elsewhere waits for, and the wake-up of readers here that wait for
 * events another gateway stores.
 *
 * Never two gateways executing one run: a gateway is reaped only after
 * lease_ms without a stored beat, and a gateway that has not stored a
 * beat for lease_ms (the store unreachable) or finds its row gone cancels
 * every run it has, as the other gateway may already have ended them. A
 * run's final writes are conditional on its owner and its being
 * unfinished (store_run_own_set_status), so a late old owner changes
 * nothing. */
#include <stdlib.h>
#include <string.h>

#include "agent/runs_internal.h"

/* Events appended and not yet stored are written after this long at most:
 * a follower through another gateway sees them this late. 100 ms is one
 * store transaction a tick per live run that has new events, and none for
 * a run whose checkpoints and batches already stored them. */
#define CLUSTER_FLUSH_AGE_MS 100
#define CLUSTER_DEFAULT_HEARTBEAT_MS 2000
#define CLUSTER_DEFAULT_LEASE_MS 10000

typedef struct store_waiter {
    void (*wake)(void *ctx);
    void *ctx;
} store_waiter;

struct run_cluster {
    run_manager *m;
    store *st;
    char gateway_id[STORE_GATEWAY_ID_MAX + 1];
    int64_t heartbeat_ms, lease_ms;
    pthread_mutex_t lock;
    pthread_cond_t tick; /* wakes the thread early (stopping) */
    bool stopping;
    bool started; /* the thread runs */
    pthread_t thread;
    int64_t beat_ok_ms;   /* the last beat stored (fawn_now_ms) */
    int64_t next_beat_ms; /* when the next beat and reap are due */
    store_waiter *waiters;
    size_t n_waiters, cap_waiters;
};

/* Wakes every reader waiting on the store (lock held). */
static void waiters_wake_locked(run_cluster *c) {
    for (size_t i = 0; i < c->n_waiters; i++)
        c->waiters[i].wake(c->waiters[i].ctx);
    c->n_waiters = 0;
}

/* Ends, everywhere, the runs of gateways silent for the lease. */
static void reap(run_cluster *c) {
    size_t gateways = 0, runs = 0;
    if (store_gateway_reap(c->st, &gateways, &runs, c->gateway_id, fawn_wall_ms(), c->lease_ms,
                           "the gateway running it stopped") < 0)
        log_warn("runs", "gateways not reaped: %s", fawn_errmsg());
    else if (gateways || runs)
        log_warn("runs", "%zu silent gateway(s) reaped, %zu of their run(s) ended as error",
                 gateways, runs);
}

/* Cancels every live run, then registers again: the lease was lost. */
static void fence(run_cluster *c, const char *why) {
    log_warn("runs", "gateway %s: %s; its runs are cancelled", c->gateway_id, why);
    runs_cancel_all(c->m);
    if (store_gateway_register(c->st, c->gateway_id, fawn_wall_ms()) == 0)
        c->beat_ok_ms = fawn_now_ms();
    else
        log_warn("runs", "gateway %s not registered again: %s", c->gateway_id, fawn_errmsg());
}

/* The heartbeat: renews the lease (or fences), then reaps. */
static void beat(run_cluster *c, int64_t now) {
    int r = store_gateway_beat(c->st, c->gateway_id, fawn_wall_ms());
    if (r == 0)
        c->beat_ok_ms = now;
    if (r == FAWN_ESTALE)
        fence(c, "its lease was taken (another gateway took it for dead)");
    else if (r < 0 && now - c->beat_ok_ms >= c->lease_ms)
        fence(c, "no heartbeat stored for a whole lease");
    else if (r < 0)
        log_warn("runs", "gateway %s: heartbeat not stored: %s", c->gateway_id, fawn_errmsg());
    if (r == 0)
        reap(c);
}

/* Cancels the live runs whose cancel was asked for through another
 * gateway. */
static void cancel_requested(run_cluster *c) {
    char(*ids)[37] = NULL;
    size_t n = 0;
    if (store_run_cancel_requests(c->st, &ids, &n, c->gateway_id) < 0) {
        log_warn("runs", "cancel requests unreadable: %s", fawn_errmsg());
        return;
    }
    for (size_t i = 0; i < n; i++) {
        log_info("runs", "run %s: cancel asked for through another gateway", ids[i]);
        runs_cancel_live(c->m, ids[i]);
    }
    free(ids);
}

/* One tick (unlocked). */
static void tick(run_cluster *c) {
    int64_t now = fawn_now_ms();
    if (runs_any_live(c->m)) {
        runs_flush_stale(c->m, now - CLUSTER_FLUSH_AGE_MS);
        cancel_requested(c);
    }
    if (now >= c->next_beat_ms) {
        beat(c, now);
        c->next_beat_ms = now + c->heartbeat_ms;
    }
}

static void *cluster_main(void *arg) {
    run_cluster *c = arg;
    pthread_mutex_lock(&c->lock);
    while (!c->stopping) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += RUNS_STORE_POLL_MS * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&c->tick, &c->lock, &until);
        waiters_wake_locked(c);
        if (c->stopping)
            break;
        pthread_mutex_unlock(&c->lock);
        tick(c);
        pthread_mutex_lock(&c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* The gateway's row, the runs its previous process left unfinished
 * ended (on a store no other gateway shares, every unfinished run: the
 * previous process may have had another id, another port), and a first
 * reap (runs of no gateway alive, such as those older than gateway
 * ownership, end now rather than at the first beat). */
static int gateway_register(run_cluster *c) {
    size_t abandoned = 0;
    int r = store_gateway_register(c->st, c->gateway_id, fawn_wall_ms());
    if (r == 0)
        r = store_run_abandon_unfinished(c->st, &abandoned,
                                         store_shared(c->st) ? c->gateway_id : NULL,
                                         "the gateway stopped during the run");
    if (r == 0 && abandoned)
        log_warn("runs", "%zu run(s) left unfinished by the previous gateway marked as error",
                 abandoned);
    c->beat_ok_ms = fawn_now_ms();
    c->next_beat_ms = c->beat_ok_ms + c->heartbeat_ms; /* registering was this beat */
    if (r == 0)
        reap(c);
    return r;
}

int run_cluster_start(run_cluster **out, run_manager *m, store *st, const run_cluster_config *cfg) {
    *out = NULL;
    run_cluster *c = calloc(1, sizeof *c);
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    c->m = m;
    c->st = st;
    snprintf(c->gateway_id, sizeof c->gateway_id, "%s",
             cfg->gateway_id && cfg->gateway_id[0] ? cfg->gateway_id : "local");
    c->heartbeat_ms = cfg->heartbeat_ms ? cfg->heartbeat_ms : CLUSTER_DEFAULT_HEARTBEAT_MS;
    c->lease_ms = cfg->lease_ms ? cfg->lease_ms : CLUSTER_DEFAULT_LEASE_MS;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->tick, NULL);
    int r = gateway_register(c);
    if (r == 0 && pthread_create(&c->thread, NULL, cluster_main, c) != 0)
        r = fawn_err(FAWN_EIO, "cannot start the gateway's heartbeat thread");
    c->started = r == 0;
    if (r < 0) {
        run_cluster_free(c);
        return r;
    }
    *out = c;
    return 0;
}

void run_cluster_stop(run_cluster *c) {
    if (!c)
        return;
    pthread_mutex_lock(&c->lock);
    bool first = !c->stopping;
    c->stopping = true;
    waiters_wake_locked(c);
    pthread_cond_broadcast(&c->tick);
    pthread_mutex_unlock(&c->lock);
    if (!first)
        return;
    if (c->started)
        pthread_join(c->thread, NULL);
    if (c->started && store_gateway_remove(c->st, c->gateway_id) < 0)
        log_warn("runs", "gateway %s: row not removed: %s", c->gateway_id, fawn_errmsg());
}

void run_cluster_free(run_cluster *c) {
    if (!c)
        return;
    run_cluster_stop(c);
    pthread_cond_destroy(&c->tick);
    pthread_mutex_destroy(&c->lock);
    free(c->waiters);
    free(c);
}

const char *run_cluster_gateway_id(const run_cluster *c) { return c->gateway_id; }

bool run_cluster_store_wait(run_cluster *c, void (*wake)(void *ctx), void (*suspend)(void *ctx),
                            void *ctx) {
    pthread_mutex_lock(&c->lock);
    bool wait = !c->stopping;
    if (wait && c->n_waiters == c->cap_waiters) {
        size_t cap = c->cap_waiters ? c->cap_waiters * 2 : 8;
        store_waiter *w = realloc(c->waiters, cap * sizeof *w);
        if (w) {
            c->waiters = w;
            c->cap_waiters = cap;
        } else {
            wait = false; /* the reader looks again rather than never waking */
        }
    }
    if (wait) {
        c->waiters[c->n_waiters++] = (store_waiter){wake, ctx};
        suspend(ctx);
    }
    pthread_mutex_unlock(&c->lock);
    return wait;
}

void run_cluster_store_unwait(run_cluster *c, void *ctx) {
    pthread_mutex_lock(&c->lock);
    size_t kept = 0;
    for (size_t i = 0; i < c->n_waiters; i++)
        if (c->waiters[i].ctx != ctx)
            c->waiters[kept++] = c->waiters[i];
    c->n_waiters = kept;
    pthread_mutex_unlock(&c->lock);
}
