/* The sandbox manager (manager.h). One mutex guards the table of entries;
 * provider calls run outside it, on an entry claimed with its `busy` flag,
 * so that work on one sandbox is serialized while other sandboxes proceed.
 * Every decision to hand a box out goes through sbx_reusable. */
#include "sandbox/manager.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "paths/paths.h"

/* How often a waiting acquirer looks at its cancel flag. */
#define SBX_WAIT_SLICE_MS 20
/* How often the reaper looks for idle sandboxes past their timeout. */
#define SBX_REAP_PERIOD_MS 500
/* Scope sessions one sandbox tracks: a run's lead agent and sub-agents,
 * well within the box's own cap (sandbox.max_sessions). */
#define SBX_SCOPES_MAX 32
/* Shell sessions an adopted box may report: its own cap
 * (sandbox.max_sessions) is at most 256; a longer list is a broken box. */
#define SBX_ADOPT_SESSIONS_MAX 256
/* Creates asked of a provider that keeps handing back fenced boxes. */
#define SBX_CREATE_ATTEMPTS 3
/* Whole-generation fences use the empty scope. */
#define SBX_WHOLE ""
/* A failed idle teardown is tried again after 1 s, then 2 s, 4 s ... up to
 * 5 min: a provider that recovers is noticed soon, one that keeps failing
 * costs a call (and a log line) every 5 minutes per sandbox, and never
 * keeps the entry claimed away from its acquisitions. */
#define SBX_TEARDOWN_BACKOFF_MIN_MS 1000
#define SBX_TEARDOWN_BACKOFF_MAX_MS 300000
/* Ownership leases when the configuration leaves them at 0: the defaults
 * of cluster.heartbeat_ms and cluster.lease_ms. */
#define SBX_HEARTBEAT_DEFAULT_MS 2000
#define SBX_LEASE_DEFAULT_MS 10000
/* An asker tries its claim again this many times per heartbeat while it
 * waits for another gateway to let a sandbox go. */
#define SBX_CLAIM_TRIES_PER_HEARTBEAT 4

typedef struct scope_session {
    char scope[SBX_SCOPE_MAX + 1];
    char session[SBX_SESSION_ID_MAX + 1];
    char generation[SBX_GENERATION_LEN + 1]; /* the box generation the session lives in */
    unsigned holders;
    bool fenced; /* abandoned: the next acquisition of the scope gets a new session */
} scope_session;

struct sbx_entry {
    char user[65], thread[65];
    sbx_box box; /* box.generation is "" when no box runs */
    enum sbx_state state;
    unsigned holders[SBX_HOLD_KINDS];
    unsigned holders_total;
    bool busy; /* claimed: a provider call for it is in progress */
    bool destroy_deferred;
    bool fenced; /* its generation is fenced (also recorded in the store) */
    int64_t idle_since_ms;
    unsigned teardown_failures;  /* idle teardowns failed in a row */
    int64_t teardown_backoff_ms; /* the wait after the last of them (0: none) */
    int64_t teardown_retry_ms;   /* no idle teardown is tried before this */
    unsigned refs;               /* leases and claimants: the entry is not freed while > 0 */
    scope_session scopes[SBX_SCOPES_MAX];
    size_t n_scopes;
    sbx_entry *next;
};

/* A fence as the manager keeps it in memory (the store holds the durable
 * copy and the reason). */
typedef struct fence_key {
    char scope[SBX_SCOPE_MAX + 1];
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
} fence_key;

/* A box the start sweep left to another gateway whose lease was live. */
typedef struct left_box {
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
} left_box;

struct sbx_manager {
    sbx_manager_config cfg; /* heartbeat_ms and lease_ms never 0; gateway_id is gateway */
    char gateway[STORE_GATEWAY_MAX + 1];
    sbx_provider *p;
    store *st;
    const authz_policy *policy;
    pthread_mutex_t fence_mu; /* guards fences; never held while taking mu */
    fence_key *fences;
    size_t n_fences, cap_fences;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* an entry was released from busy, or the reaper must stop */
    sbx_entry *entries;
    pthread_t reaper;
    pthread_t keepalive;
    bool keepalive_started;
    pthread_t heartbeat;
    bool heartbeat_started;
    left_box *left; /* the start sweep's, then the heartbeat's alone */
    size_t n_left, cap_left;
    bool stopping;
    sbx_bound_fn bound_fn; /* set once before the first acquisition (sbx_manager_on_bound) */
    void *bound_ctx;
};

/* ---- helpers ---- */

static bool has_box(const sbx_entry *e) { return e->box.generation[0] != '\0'; }

static void deadline_in(struct timespec *ts, int64_t ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

static bool cancelled(const sbx_cancel *c) { return c && atomic_load(&c->cancelled); }

static bool scope_valid(const char *scope) {
    const char *colon = scope ? strchr(scope, ':') : NULL;
    if (!colon || (size_t)(colon - scope) > 64)
        return false;
    char run[65];
    memcpy(run, scope, (size_t)(colon - scope));
    run[colon - scope] = '\0';
    return fawn_id_valid(run) && fawn_id_valid(colon + 1);
}

/* ---- fences: written through to the store, read from memory ---- */

static bool fence_match(const fence_key *f, const char *scope, const char *sandbox_id,
                        const char *generation) {
    return strcmp(f->generation, generation) == 0 && strcmp(f->sandbox_id, sandbox_id) == 0 &&
           (!scope || strcmp(f->scope, scope) == 0);
}

static bool fence_exists(sbx_manager *m, const char *scope, const char *sandbox_id,
                         const char *generation) {
    bool found = false;
    pthread_mutex_lock(&m->fence_mu);
    for (size_t i = 0; i < m->n_fences && !found; i++)
        found = fence_match(&m->fences[i], scope, sandbox_id, generation);
    pthread_mutex_unlock(&m->fence_mu);
    return found;
}

static void fence_remember(sbx_manager *m, const char *scope, const char *sandbox_id,
                           const char *generation) {
    pthread_mutex_lock(&m->fence_mu);
    bool known = false;
    for (size_t i = 0; i < m->n_fences && !known; i++)
        known = fence_match(&m->fences[i], scope, sandbox_id, generation);
    if (!known && m->n_fences == m->cap_fences) {
        size_t cap = m->cap_fences ? 2 * m->cap_fences : 16;
        fence_key *grown = realloc(m->fences, cap * sizeof *grown);
        if (grown) {
            m->fences = grown;
            m->cap_fences = cap;
        }
    }
    if (!known && m->n_fences < m->cap_fences) {
        fence_key *f = &m->fences[m->n_fences++];
        snprintf(f->scope, sizeof f->scope, "%s", scope);
        snprintf(f->sandbox_id, sizeof f->sandbox_id, "%s", sandbox_id);
        snprintf(f->generation, sizeof f->generation, "%s", generation);
    }
    pthread_mutex_unlock(&m->fence_mu);
}

/* Adds the fence in memory (so this process honors it even when the store
 * fails), then durably; returns the store's answer, and logs a failure, so
 * callers that can do no more than this process's fence may drop it. */
static int fence_add(sbx_manager *m, const char *scope, const char *sandbox_id,
                     const char *generation, const char *reason) {
    fence_remember(m, scope, sandbox_id, generation);
    int r = store_fence_add(m->st, scope, sandbox_id, generation, reason);
    if (r < 0)
        log_warn("sandbox", "sandbox %s generation %.8s: fence (%s) kept in memory only: %s",
                 sandbox_id, generation, reason, fawn_errmsg());
    return r;
}

/* Retires a fence: from the store first, then from memory. */
static void fence_remove(sbx_manager *m, const fence_key *k) {
    int r = store_fence_remove(m->st, k->scope, k->sandbox_id, k->generation);
    if (r < 0 && r != FAWN_ENOENT)
        return; /* kept: retried at the next teardown or start */
    pthread_mutex_lock(&m->fence_mu);
    for (size_t i = 0; i < m->n_fences; i++) {
        if (fence_match(&m->fences[i], k->scope, k->sandbox_id, k->generation)) {
            m->fences[i] = m->fences[--m->n_fences];
            break;
        }
    }
    pthread_mutex_unlock(&m->fence_mu);
}

/* A copy of the fences (of sandbox_id, or all when NULL). */
static int fences_copy(fence_key **out, size_t *n, sbx_manager *m, const char *sandbox_id) {
    pthread_mutex_lock(&m->fence_mu);
    *out = calloc(m->n_fences ? m->n_fences : 1, sizeof **out);
    *n = 0;
    for (size_t i = 0; *out && i < m->n_fences; i++)
        if (!sandbox_id || strcmp(m->fences[i].sandbox_id, sandbox_id) == 0)
            (*out)[(*n)++] = m->fences[i];
    pthread_mutex_unlock(&m->fence_mu);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int fences_load(sbx_manager *m) {
    store_fence *stored = NULL;
    size_t n = 0;
    int r = store_fence_list(m->st, &stored, &n, NULL);
    for (size_t i = 0; r == 0 && i < n; i++)
        fence_remember(m, stored[i].scope, stored[i].sandbox_id, stored[i].generation);
    free(stored);
    return r;
}

/* Another gateway may have fenced the generation since this process
 * loaded its fences: the store's word is read on every decision (one
 * primary-key lookup), and a fence found there is kept in memory too. */
bool sbx_reusable(sbx_manager *m, const char *sandbox_id, const char *generation) {
    if (fence_exists(m, SBX_WHOLE, sandbox_id, generation))
        return false;
    bool fenced = true;
    if (store_fence_exists(m->st, &fenced, SBX_WHOLE, sandbox_id, generation) < 0) {
        log_warn("sandbox", "sandbox %s generation %.8s: fence unknown, not reused: %s", sandbox_id,
                 generation, fawn_errmsg());
        return false;
    }
    if (fenced)
        fence_remember(m, SBX_WHOLE, sandbox_id, generation);
    return !fenced;
}

/* ---- entries (under m->mu) ---- */

static sbx_entry *entry_find(sbx_manager *m, const char *sandbox_id) {
    for (sbx_entry *e = m->entries; e; e = e->next)
        if (strcmp(e->box.sandbox_id, sandbox_id) == 0)
            return e;
    return NULL;
}

static sbx_entry *entry_get(sbx_manager *m, const char *sandbox_id, const char *user,
                            const char *thread) {
    sbx_entry *e = entry_find(m, sandbox_id);
    if (e)
        return e;
    e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    snprintf(e->user, sizeof e->user, "%s", user);
    snprintf(e->thread, sizeof e->thread, "%s", thread);
    snprintf(e->box.sandbox_id, sizeof e->box.sandbox_id, "%s", sandbox_id);
    e->state = SBX_STATE_IDLE;
    e->next = m->entries;
    m->entries = e;
    return e;
}

/* Frees e when nothing refers to it and it holds no box. */
static void entry_drop_if_unused(sbx_manager *m, sbx_entry *e) {
    if (e->refs || e->busy || has_box(e) || e->holders_total)
        return;
    for (sbx_entry **pp = &m->entries; *pp; pp = &(*pp)->next) {
        if (*pp == e) {
            *pp = e->next;
            free(e);
            return;
        }
    }
}

/* Waits until no one else works on e, then claims it. FAWN_ECANCELED when
 * cancel is set first. Called with m->mu held; e->refs counts the caller. */
static int entry_claim(sbx_manager *m, sbx_entry *e, const sbx_cancel *cancel) {
    while (e->busy) {
        if (cancelled(cancel))
            return fawn_err(FAWN_ECANCELED, "the acquisition was cancelled");
        struct timespec until;
        deadline_in(&until, SBX_WAIT_SLICE_MS);
        pthread_cond_timedwait(&m->changed, &m->mu, &until);
    }
    e->busy = true;
    return 0;
}

static void entry_unclaim(sbx_manager *m, sbx_entry *e) {
    e->busy = false;
    pthread_cond_broadcast(&m->changed);
}

/* ---- teardown ---- */

/* Retires every fence of (sandbox_id, generation), this process's and
 * those another gateway added: the provider confirmed that generation is
 * absent. */
static void fences_retire(sbx_manager *m, const char *sandbox_id, const char *generation) {
    store_fence *stored = NULL;
    size_t n_stored = 0;
    if (store_fence_list(m->st, &stored, &n_stored, sandbox_id) == 0)
        for (size_t i = 0; i < n_stored; i++)
            if (strcmp(stored[i].generation, generation) == 0)
                fence_remember(m, stored[i].scope, sandbox_id, generation);
    free(stored);
    fence_key *fences = NULL;
    size_t n = 0;
    if (fences_copy(&fences, &n, m, sandbox_id) < 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (strcmp(fences[i].generation, generation) == 0)
            fence_remove(m, &fences[i]);
    free(fences);
}

/* Destroys (sandbox_id, generation) through the provider and, once it is
 * confirmed absent, forgets its record and retires its fences. A record
 * that cannot be forgotten is logged, not returned: the box is gone, a
 * record without its box is never adopted, and the next start replaces it.
 * A failed destroy is logged too, so a caller with nothing else to do may
 * drop the result. */
static int box_destroy(sbx_manager *m, const char *sandbox_id, const char *generation) {
    int r = m->p->destroy(m->p->ctx, sandbox_id, generation);
    if (r < 0) {
        log_warn("sandbox", "sandbox %s generation %.8s: destroy failed: %s", sandbox_id,
                 generation, fawn_errmsg());
        return r;
    }
    if (store_sandbox_forget(m->st, sandbox_id, generation) < 0)
        log_warn("sandbox", "sandbox %s generation %.8s: record not forgotten: %s", sandbox_id,
                 generation, fawn_errmsg());
    fences_retire(m, sandbox_id, generation);
    return 0;
}

/* Tears down e's box; e is claimed by the caller (m->mu not held). On
 * success e holds no box. */
static int entry_teardown(sbx_manager *m, sbx_entry *e) {
    char generation[SBX_GENERATION_LEN + 1];
    memcpy(generation, e->box.generation, sizeof generation);
    int r = box_destroy(m, e->box.sandbox_id, generation);
    if (r < 0)
        return r;
    pthread_mutex_lock(&m->mu);
    if (strcmp(e->box.generation, generation) == 0) {
        e->box.generation[0] = '\0';
        e->fenced = false;
        e->destroy_deferred = false;
        e->n_scopes = 0;
        e->state = SBX_STATE_IDLE;
        e->teardown_failures = 0;
        e->teardown_backoff_ms = e->teardown_retry_ms = 0;
    }
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* ---- ownership: one gateway runs a sandbox at a time ---- */

/* Gives up this gateway's ownership of sandbox_id. A failure is logged:
 * the lease is then renewed on (the sandbox is given up when another
 * gateway asks for it) or runs out with this process. */
static void ownership_release(sbx_manager *m, const char *sandbox_id) {
    if (store_sandbox_owner_release(m->st, sandbox_id, m->gateway) < 0)
        log_warn("sandbox", "sandbox %s: ownership not given up: %s", sandbox_id, fawn_errmsg());
}

/* Tears e's box down (e claimed by the caller, m->mu not held) and gives
 * up its ownership. */
static int entry_retire(sbx_manager *m, sbx_entry *e) {
    int r = has_box(e) ? entry_teardown(m, e) : 0;
    if (r == 0)
        ownership_release(m, e->box.sandbox_id);
    return r;
}

/* Sleeps ms, in slices; false (early) once cancel is set. */
static bool sleep_uncancelled(int64_t ms, const sbx_cancel *cancel) {
    for (int64_t left = ms; left > 0 && !cancelled(cancel); left -= SBX_WAIT_SLICE_MS) {
        int64_t slice = left < SBX_WAIT_SLICE_MS ? left : SBX_WAIT_SLICE_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice * 1000000};
        nanosleep(&ts, NULL);
    }
    return !cancelled(cancel);
}

/* Asks the gateway holding q's sandbox to let it go (once per wait); a
 * sandbox let go meanwhile (FAWN_ENOENT) needs no asking. */
static int ownership_ask(bool *asked, sbx_manager *m, const store_owner_claim_req *q,
                         const char *owner) {
    if (*asked)
        return 0;
    int r = store_sandbox_owner_ask(m->st, q->sandbox_id, m->gateway, q->now_ms);
    if (r == FAWN_ENOENT)
        return 0;
    *asked = r == 0;
    if (r == 0)
        log_info("sandbox", "sandbox %s (thread %s): asked gateway %s to let it go", q->sandbox_id,
                 q->thread, owner);
    return r;
}

/* Claims the sandbox for this gateway. Held by another live gateway: asks
 * it to let go and tries again SBX_CLAIM_TRIES_PER_HEARTBEAT times a
 * heartbeat, for one lease and one heartbeat (by then a live owner has
 * seen the request, and a dead one's lease has run out); then FAWN_EBUSY
 * naming the owner. *changed_hands: it was not this gateway's already.
 * FAWN_ECANCELED when cancel is set while waiting. */
static int ownership_claim(bool *changed_hands, sbx_manager *m, const char *sandbox_id,
                           const char *user, const char *thread, const sbx_cancel *cancel) {
    *changed_hands = false;
    store_owner_claim_req q = {.sandbox_id = sandbox_id,
                               .user = user,
                               .thread = thread,
                               .gateway = m->gateway,
                               .lease_ms = m->cfg.lease_ms};
    int64_t give_up = fawn_now_ms() + m->cfg.lease_ms + m->cfg.heartbeat_ms;
    int64_t retry_ms = m->cfg.heartbeat_ms / SBX_CLAIM_TRIES_PER_HEARTBEAT;
    enum store_owner_claim how;
    store_sandbox_owner was;
    bool asked = false;
    int r;
    while ((q.now_ms = fawn_wall_ms(), r = store_sandbox_owner_claim(m->st, &how, &was, &q)) == 0 &&
           how == STORE_OWNER_HELD) {
        if ((r = ownership_ask(&asked, m, &q, was.gateway)) < 0)
            return r;
        if (fawn_now_ms() >= give_up)
            return fawn_err(FAWN_EBUSY, "the sandbox of thread %s is in use on gateway %s", thread,
                            was.gateway);
        if (!sleep_uncancelled(retry_ms > 0 ? retry_ms : 1, cancel))
            return fawn_err(FAWN_ECANCELED, "the acquisition was cancelled");
    }
    *changed_hands = r == 0 && how != STORE_OWNER_KEPT;
    return r;
}

/* After a claim that changed hands, nothing that ran in the sandbox
 * before is trusted: the generation the store records for it (a box
 * another gateway, or an earlier process, ran) and e's own are fenced in
 * the store before this gateway uses it (box_ensure then replaces them). */
static int previous_generations_fence(sbx_manager *m, const sbx_entry *e) {
    store_sandbox rec;
    int r = store_sandbox_get(m->st, &rec, e->box.sandbox_id);
    if (r == FAWN_ENOENT)
        r = 0;
    if (r == 0 && rec.generation[0])
        r = fence_add(m, SBX_WHOLE, e->box.sandbox_id, rec.generation, "the sandbox changed hands");
    if (r == 0 && has_box(e) && strcmp(e->box.generation, rec.generation) != 0)
        r = fence_add(m, SBX_WHOLE, e->box.sandbox_id, e->box.generation,
                      "the sandbox changed hands");
    return r;
}

/* ---- the warm pool ---- */

static size_t running_count(const sbx_manager *m) {
    size_t n = 0;
    for (const sbx_entry *e = m->entries; e; e = e->next)
        n += has_box(e);
    return n;
}

/* The idle entry parked longest ago that may be torn down at `now`: not
 * waiting out a teardown backoff and, when timed, parked at or before
 * parked_before_ms. */
static sbx_entry *idle_oldest(sbx_manager *m, bool timed, int64_t parked_before_ms, int64_t now) {
    sbx_entry *oldest = NULL;
    for (sbx_entry *e = m->entries; e; e = e->next) {
        if (!has_box(e) || e->busy || e->holders_total || e->state != SBX_STATE_IDLE)
            continue;
        if (e->teardown_retry_ms > now || (timed && e->idle_since_ms > parked_before_ms))
            continue;
        if (!oldest || e->idle_since_ms < oldest->idle_since_ms)
            oldest = e;
    }
    return oldest;
}

/* After a failed idle teardown: the next one waits twice as long as the
 * last (SBX_TEARDOWN_BACKOFF_MIN_MS .. _MAX_MS). Called with m->mu held. */
static void teardown_back_off(sbx_entry *e, int64_t now) {
    int64_t wait = e->teardown_backoff_ms ? 2 * e->teardown_backoff_ms
                                          : SBX_TEARDOWN_BACKOFF_MIN_MS;
    e->teardown_backoff_ms = wait < SBX_TEARDOWN_BACKOFF_MAX_MS ? wait
                                                                : SBX_TEARDOWN_BACKOFF_MAX_MS;
    e->teardown_retry_ms = now + e->teardown_backoff_ms;
    e->teardown_failures++;
    log_warn("sandbox",
             "sandbox %s (thread %s): teardown failed %u time(s) in a row; next try "
             "in %" PRId64 " s",
             e->box.sandbox_id, e->thread, e->teardown_failures, e->teardown_backoff_ms / 1000);
}

/* Tears down one idle entry chosen under m->mu (claimed there). A failure
 * leaves it parked, backing off. */
static void idle_evict(sbx_manager *m, sbx_entry *e, const char *why) {
    e->busy = true;
    e->state = SBX_STATE_STOPPING;
    e->refs++;
    pthread_mutex_unlock(&m->mu);
    log_info("sandbox", "sandbox %s (thread %s): %s", e->box.sandbox_id, e->thread, why);
    int r = entry_retire(m, e);
    pthread_mutex_lock(&m->mu);
    if (r < 0) {
        e->state = SBX_STATE_IDLE;
        teardown_back_off(e, fawn_now_ms());
    }
    e->refs--;
    entry_unclaim(m, e);
    entry_drop_if_unused(m, e);
}

/* Past the replicas cap, evicts the oldest idle sandboxes (never active
 * ones, nor ones backing off). Called with m->mu held. */
static void replicas_enforce(sbx_manager *m) {
    size_t attempts = running_count(m); /* each eviction that fails is tried once */
    while (m->cfg.replicas && attempts-- && running_count(m) > m->cfg.replicas) {
        sbx_entry *e = idle_oldest(m, false, 0, fawn_now_ms());
        if (!e)
            return;
        idle_evict(m, e, "evicted: more running sandboxes than sandbox.replicas");
    }
}

/* Tears down the sandboxes parked for idle_timeout_s, each at most once
 * per pass (one that fails backs off). Called with m->mu held. */
static void idle_reap(sbx_manager *m) {
    int64_t now = fawn_now_ms();
    int64_t parked_before = now - (int64_t)m->cfg.idle_timeout_s * 1000;
    sbx_entry *e;
    while (!m->stopping && (e = idle_oldest(m, true, parked_before, now)))
        idle_evict(m, e, "idle timeout");
}

static void *reaper_main(void *arg) {
    sbx_manager *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stopping) {
        struct timespec until;
        deadline_in(&until, SBX_REAP_PERIOD_MS);
        pthread_cond_timedwait(&m->changed, &m->mu, &until);
        if (!m->stopping && m->cfg.idle_timeout_s)
            idle_reap(m);
    }
    pthread_mutex_unlock(&m->mu);
    return NULL;
}

/* ---- keepalive: the boxes the manager holds hear from it ---- */

/* Copies of the boxes of every entry (malloc'd, caller frees); called with
 * m->mu held. */
static sbx_box *boxes_copy(sbx_manager *m, size_t *n) {
    *n = running_count(m);
    sbx_box *boxes = calloc(*n ? *n : 1, sizeof *boxes);
    size_t i = 0;
    for (sbx_entry *e = m->entries; boxes && e; e = e->next)
        if (has_box(e))
            boxes[i++] = e->box;
    return boxes;
}

/* One request to each box the manager holds (m->mu held, released during
 * the requests). Only the request matters, not its answer: a box that does
 * not answer is the acquisitions' business (health on reuse). */
static void keepalive_round(sbx_manager *m) {
    size_t n = 0;
    sbx_box *boxes = boxes_copy(m, &n);
    pthread_mutex_unlock(&m->mu);
    for (size_t i = 0; boxes && i < n; i++) {
        json_t *reply = NULL;
        int status = 0;
        m->p->call(m->p->ctx, &reply, &status, &boxes[i], "GET", "/v1/sandbox", NULL,
                   (int)m->cfg.call_timeout_ms);
        json_decref(reply);
    }
    free(boxes);
    pthread_mutex_lock(&m->mu);
}

/* Runs round (called with m->mu held) every period_ms until the manager
 * stops. */
static void periodic_run(sbx_manager *m, int64_t period_ms, void (*round)(sbx_manager *)) {
    int64_t due = fawn_now_ms() + period_ms;
    pthread_mutex_lock(&m->mu);
    while (!m->stopping) {
        int64_t left = due - fawn_now_ms();
        if (left <= 0) {
            round(m);
            due = fawn_now_ms() + period_ms;
            continue;
        }
        struct timespec until;
        deadline_in(&until, left);
        pthread_cond_timedwait(&m->changed, &m->mu, &until);
    }
    pthread_mutex_unlock(&m->mu);
}

static void *keepalive_main(void *arg) {
    sbx_manager *m = arg;
    periodic_run(m, (int64_t)m->cfg.idle_timeout_s * 1000 / SBX_KEEPALIVES_PER_TIMEOUT,
                 keepalive_round);
    return NULL;
}

/* ---- heartbeat: ownership leases renewed, other gateways' requests honored ---- */

/* Lets another gateway have sandbox o when nothing here holds or works on
 * it: its box torn down, then its ownership given up. One in use stays
 * this gateway's (the asker gives up after its wait). */
static void handover_if_unused(sbx_manager *m, const store_sandbox_owner *o) {
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = entry_find(m, o->sandbox_id);
    bool in_use = e && (e->busy || e->holders_total);
    if (e && !in_use) {
        e->busy = true;
        e->refs++;
        e->state = SBX_STATE_STOPPING;
    }
    pthread_mutex_unlock(&m->mu);
    if (in_use)
        return;
    int r = 0;
    if (e)
        r = entry_retire(m, e);
    else
        ownership_release(m, o->sandbox_id);
    if (r == 0)
        log_info("sandbox", "sandbox %s (thread %s) let go for gateway %s", o->sandbox_id,
                 o->thread, o->release_asked_by);
    if (!e)
        return;
    pthread_mutex_lock(&m->mu);
    e->state = SBX_STATE_IDLE; /* a box whose teardown failed stays parked, and ours */
    e->refs--;
    entry_unclaim(m, e);
    entry_drop_if_unused(m, e);
    pthread_mutex_unlock(&m->mu);
}

/* Claims k's sandbox, whose owner's lease has run out, and fences and
 * removes the box left there, unless an acquisition here works on it
 * (it claims and replaces the box itself). True once nothing is left to
 * do: the box removed, its sandbox let go, or this gateway's now. */
static bool left_box_settle(sbx_manager *m, const left_box *k) {
    store_sandbox_owner row;
    int r = store_sandbox_owner_get(m->st, &row, k->sandbox_id);
    if (r < 0 || strcmp(row.gateway, m->gateway) == 0 || row.lease_until_ms > fawn_wall_ms())
        return r == FAWN_ENOENT || (r == 0 && strcmp(row.gateway, m->gateway) == 0);
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = entry_get(m, k->sandbox_id, row.user, row.thread);
    bool idle = e && !e->busy && !e->holders_total;
    if (idle) {
        e->busy = true;
        e->refs++;
    }
    pthread_mutex_unlock(&m->mu);
    if (!idle)
        return e != NULL;
    store_owner_claim_req q = {.sandbox_id = k->sandbox_id,
                               .user = row.user,
                               .thread = row.thread,
                               .gateway = m->gateway,
                               .now_ms = fawn_wall_ms(),
                               .lease_ms = m->cfg.lease_ms};
    enum store_owner_claim how;
    store_sandbox_owner was; /* not row: q points into it */
    r = store_sandbox_owner_claim(m->st, &how, &was, &q);
    bool settled = r == 0 && how != STORE_OWNER_HELD;
    if (settled && how == STORE_OWNER_EXPIRED) {
        fence_add(m, SBX_WHOLE, k->sandbox_id, k->generation, "its gateway's lease expired");
        settled = box_destroy(m, k->sandbox_id, k->generation) == 0;
        if (settled)
            log_info("sandbox", "sandbox %s of dead gateway %s removed", k->sandbox_id,
                     row.gateway);
    }
    if (!has_box(e))
        ownership_release(m, k->sandbox_id);
    pthread_mutex_lock(&m->mu);
    e->refs--;
    entry_unclaim(m, e);
    entry_drop_if_unused(m, e);
    pthread_mutex_unlock(&m->mu);
    return settled;
}

/* The boxes the start sweep left alone: once their gateway's lease runs
 * out (it died, perhaps this gateway's own previous process under another
 * id), they are removed as the sweep would have removed them. */
static void left_boxes_settle(sbx_manager *m) {
    size_t kept = 0;
    for (size_t i = 0; i < m->n_left; i++)
        if (!left_box_settle(m, &m->left[i]))
            m->left[kept++] = m->left[i];
    m->n_left = kept;
}

/* One heartbeat (m->mu held, released meanwhile): every lease renewed in
 * one statement, the requests no older than an asker's wait honored, and
 * the boxes left to a gateway that died removed. */
static void heartbeat_round(sbx_manager *m) {
    pthread_mutex_unlock(&m->mu);
    int64_t now = fawn_wall_ms();
    if (store_sandbox_owner_renew(m->st, m->gateway, now, m->cfg.lease_ms) < 0)
        log_warn("sandbox", "sandbox ownership leases not renewed: %s", fawn_errmsg());
    store_sandbox_owner *asked = NULL;
    size_t n = 0;
    int64_t since = now - m->cfg.lease_ms - m->cfg.heartbeat_ms;
    if (store_sandbox_owner_asked(m->st, &asked, &n, m->gateway, since) < 0)
        log_warn("sandbox", "other gateways' requests for sandboxes unread: %s", fawn_errmsg());
    for (size_t i = 0; i < n; i++)
        handover_if_unused(m, &asked[i]);
    free(asked);
    left_boxes_settle(m);
    pthread_mutex_lock(&m->mu);
}

static void *heartbeat_main(void *arg) {
    sbx_manager *m = arg;
    periodic_run(m, m->cfg.heartbeat_ms, heartbeat_round);
    return NULL;
}

/* ---- acquisition ---- */

static int gate(sbx_manager *m, const sbx_request *req) {
    sbx_decision *d = req->decision;
    if (d && d->made)
        return d->result == 0
                   ? 0
                   : fawn_err(FAWN_EPERM, "Sandbox execution is not permitted for your role");
    int r = authz_sandbox_execute(m->policy, req->who.role);
    if (r < 0 && r != FAWN_EPERM)
        r = fawn_err(FAWN_EPERM, "Sandbox execution is not permitted for your role");
    if (d) {
        d->made = true;
        d->result = r;
    }
    return r;
}

static int request_check(char sandbox_id[17], const sbx_request *req) {
    if (req->kind >= SBX_HOLD_KINDS)
        return fawn_err(FAWN_EINVAL, "unknown holder kind");
    if (req->scope && !scope_valid(req->scope))
        return fawn_err(FAWN_EINVAL, "a scope is RUN:AGENT, each [A-Za-z0-9_-]{1,64}");
    return paths_sandbox_id(sandbox_id, req->who.user, req->thread);
}

/* With a provider that attests its boxes: 0 once box proved it is user's
 * sandbox's. A refusal or an unknown answer fences the generation
 * persistently (a pod refused once is never used again, across restarts)
 * and destroys the box; the fence stays until the provider confirms it
 * absent. */
static int box_attested(sbx_manager *m, const sbx_box *box, const char *user) {
    if (!m->p->attest)
        return 0;
    enum sbx_attestation a = SBX_ATTEST_UNKNOWN;
    if (m->p->attest(m->p->ctx, &a, box, user) < 0)
        a = SBX_ATTEST_UNKNOWN;
    if (a == SBX_ATTESTED)
        return 0;
    const char *why = a == SBX_REFUSED ? "attestation refused" : "attestation unknown";
    log_warn("sandbox", "sandbox %s generation %s: %s; fenced", box->sandbox_id, box->generation,
             why);
    (void)fence_add(m, SBX_WHOLE, box->sandbox_id, box->generation, why);
    if (box_destroy(m, box->sandbox_id, box->generation) < 0)
        log_warn("sandbox", "sandbox %s: removing the unattested box: %s", box->sandbox_id,
                 fawn_errmsg());
    return fawn_err(a == SBX_REFUSED ? FAWN_EPERM : FAWN_EIO,
                    "the sandbox's box failed attestation (%s)", why);
}

/* Asks the provider for a box that may be handed out: a create answer of
 * another sandbox is refused, and a fenced generation it hands back (a
 * box it still had running) is destroyed and asked for again. */
static int box_start(sbx_box *out, sbx_manager *m, const sbx_entry *e, const sbx_cancel *cancel) {
    for (int attempt = 0;; attempt++) {
        *out = (sbx_box){0};
        int r = m->p->create(m->p->ctx, out, e->user, e->thread, cancel);
        if (r < 0)
            return r;
        if (strcmp(out->sandbox_id, e->box.sandbox_id) != 0 ||
            strlen(out->generation) != SBX_GENERATION_LEN) {
            m->p->destroy(m->p->ctx, out->sandbox_id, out->generation);
            return fawn_err(FAWN_EPROTO, "the provider answered for another sandbox");
        }
        if (sbx_reusable(m, out->sandbox_id, out->generation))
            return box_attested(m, out, e->user);
        if ((r = box_destroy(m, out->sandbox_id, out->generation)) < 0)
            return r;
        if (attempt == SBX_CREATE_ATTEMPTS - 1)
            return fawn_err(FAWN_EIO, "the provider keeps handing back a fenced sandbox");
    }
}

/* Starts a fresh box for e (claimed; m->mu not held) and records it. */
static int box_create(sbx_manager *m, sbx_entry *e, const sbx_cancel *cancel) {
    sbx_box box;
    int r = box_start(&box, m, e, cancel);
    if (r < 0)
        return r;
    store_sandbox rec = {0};
    snprintf(rec.sandbox_id, sizeof rec.sandbox_id, "%s", box.sandbox_id);
    snprintf(rec.user, sizeof rec.user, "%s", e->user);
    snprintf(rec.thread, sizeof rec.thread, "%s", e->thread);
    memcpy(rec.generation, box.generation, sizeof rec.generation);
    snprintf(rec.endpoint, sizeof rec.endpoint, "%s", box.endpoint);
    snprintf(rec.token, sizeof rec.token, "%s", box.token);
    r = store_sandbox_put(m->st, &rec);
    if (r < 0) { /* unrecorded, it would be a stray after a restart */
        box_destroy(m, box.sandbox_id, box.generation);
        return r;
    }
    pthread_mutex_lock(&m->mu);
    e->box = box;
    e->fenced = false;
    e->n_scopes = 0;
    pthread_mutex_unlock(&m->mu);
    return 0;
}

/* Whether e's box may be handed out again: not fenced, and answering as
 * its generation. A definite "dead" or an unknown answer means no. */
static bool box_reusable_now(sbx_manager *m, sbx_entry *e) {
    if (!sbx_reusable(m, e->box.sandbox_id, e->box.generation))
        return false;
    int r = m->p->health(m->p->ctx, &e->box);
    if (r == 0)
        return true;
    if (r != FAWN_ENOENT) /* unknown: fenced, so no path ever trusts it again */
        fence_add(m, SBX_WHOLE, e->box.sandbox_id, e->box.generation, "health unknown on reuse");
    return false;
}

/* Makes sure e (claimed) has a box that may be handed out. A box that may
 * not is torn down first, even while others hold it: their leases name its
 * generation, so nothing they do acts on the new one. */
static int box_ensure(sbx_manager *m, sbx_entry *e, const sbx_cancel *cancel) {
    if (has_box(e) && box_reusable_now(m, e))
        return 0;
    if (has_box(e)) {
        int r = entry_teardown(m, e);
        if (r < 0)
            return r;
    }
    return box_create(m, e, cancel);
}

/* The scope's session record in e, or NULL. */
static scope_session *scope_find(sbx_entry *e, const char *scope) {
    for (size_t i = 0; i < e->n_scopes; i++)
        if (strcmp(e->scopes[i].scope, scope) == 0)
            return &e->scopes[i];
    return NULL;
}

static void scope_remove(sbx_entry *e, scope_session *s) { *s = e->scopes[--e->n_scopes]; }

static bool scope_usable(sbx_manager *m, const sbx_entry *e, const scope_session *s) {
    return !s->fenced && strcmp(s->generation, e->box.generation) == 0 &&
           !fence_exists(m, s->scope, e->box.sandbox_id, e->box.generation);
}

/* Creates the scope's session in e's box. An exchange that fails midway
 * leaves its outcome unknown: the scope (only) is fenced. */
static int scope_session_create(sbx_manager *m, sbx_entry *e, const char *scope,
                                char session[SBX_SESSION_ID_MAX + 1]) {
    char hex[33];
    fawn_random_hex(hex, 16);
    snprintf(session, SBX_SESSION_ID_MAX + 1, "scope-%s", hex);
    json_t *body = json_pack("{s:s}", "id", session), *reply = NULL;
    int status = 0;
    int r = body ? m->p->call(m->p->ctx, &reply, &status, &e->box, "POST", "/v1/shell/sessions",
                              body, (int)m->cfg.call_timeout_ms)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    json_decref(reply);
    if (r == FAWN_EIO || r == FAWN_ETIMEDOUT || r == FAWN_EPROTO) {
        fence_add(m, scope, e->box.sandbox_id, e->box.generation,
                  "shell session creation outcome unknown");
        return r;
    }
    if (r == 0 && status != 200 && status != 201)
        r = fawn_err(FAWN_EIO, "the box refused a shell session (HTTP %d)", status);
    return r;
}

/* Binds the scope's session (existing or new) for one more holder. */
static int scope_acquire(sbx_manager *m, sbx_entry *e, const char *scope,
                         char session[SBX_SESSION_ID_MAX + 1]) {
    pthread_mutex_lock(&m->mu);
    scope_session *s = scope_find(e, scope);
    if (s && !scope_usable(m, e, s) && s->holders == 0) {
        scope_remove(e, s); /* abandoned: replaced below */
        s = NULL;
    }
    if (s && scope_usable(m, e, s)) {
        s->holders++;
        memcpy(session, s->session, SBX_SESSION_ID_MAX + 1);
        pthread_mutex_unlock(&m->mu);
        return 0;
    }
    bool full = !s && e->n_scopes == SBX_SCOPES_MAX;
    pthread_mutex_unlock(&m->mu);
    if (s || full)
        return fawn_err(s ? FAWN_EBUSY : FAWN_E2BIG,
                        s ? "the scope's session is fenced while still held"
                          : "too many scopes in one sandbox");
    int r = scope_session_create(m, e, scope, session);
    if (r < 0)
        return r;
    pthread_mutex_lock(&m->mu);
    s = &e->scopes[e->n_scopes++];
    *s = (scope_session){.holders = 1};
    snprintf(s->scope, sizeof s->scope, "%s", scope);
    memcpy(s->session, session, sizeof s->session);
    memcpy(s->generation, e->box.generation, sizeof s->generation);
    pthread_mutex_unlock(&m->mu);
    return 0;
}

static int lease_new(sbx_lease **out, sbx_manager *m, sbx_entry *e, const sbx_request *req,
                     const char *session) {
    sbx_lease *l = calloc(1, sizeof *l);
    if (!l)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    l->m = m;
    l->entry = e;
    l->kind = req->kind;
    snprintf(l->scope, sizeof l->scope, "%s", req->scope ? req->scope : "");
    snprintf(l->session, sizeof l->session, "%s", session);
    pthread_mutex_lock(&m->mu);
    l->box = e->box;
    e->holders[req->kind]++;
    e->holders_total++;
    e->state = SBX_STATE_ACTIVE;
    e->refs++; /* the lease's */
    pthread_mutex_unlock(&m->mu);
    *out = l;
    return 0;
}

/* Work done on a claimed entry without m->mu: this gateway's ownership,
 * a box that may be handed out, then the scope's session. Ownership
 * claimed for a sandbox left without a box is given up again. */
static int acquire_claimed(char session[SBX_SESSION_ID_MAX + 1], sbx_manager *m, sbx_entry *e,
                           const sbx_request *req) {
    if (e->destroy_deferred)
        return fawn_err(FAWN_EBUSY, "the sandbox is being destroyed once its holders finish");
    bool idle_before = e->holders_total == 0;
    if (idle_before) {
        pthread_mutex_lock(&m->mu);
        e->state = SBX_STATE_STARTING;
        pthread_mutex_unlock(&m->mu);
    }
    bool changed_hands = false;
    int r = ownership_claim(&changed_hands, m, e->box.sandbox_id, e->user, e->thread, req->cancel);
    bool owned = r == 0;
    if (r == 0 && changed_hands)
        r = previous_generations_fence(m, e);
    if (r == 0)
        r = box_ensure(m, e, req->cancel);
    if (r < 0 && owned && !has_box(e))
        ownership_release(m, e->box.sandbox_id);
    if (r == 0 && cancelled(req->cancel))
        r = fawn_err(FAWN_ECANCELED, "the acquisition was cancelled");
    if (r == 0 && req->scope)
        r = scope_acquire(m, e, req->scope, session);
    if (r < 0 && idle_before) {
        pthread_mutex_lock(&m->mu);
        e->state = SBX_STATE_IDLE; /* a box started for it stays parked */
        e->idle_since_ms = fawn_now_ms();
        pthread_mutex_unlock(&m->mu);
    }
    return r;
}

int sbx_acquire(sbx_lease **out, sbx_manager *m, const sbx_request *req) {
    *out = NULL;
    char sandbox_id[17];
    int r = gate(m, req);
    if (r == 0)
        r = request_check(sandbox_id, req);
    if (r < 0)
        return r;
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = entry_get(m, sandbox_id, req->who.user, req->thread);
    if (!e) {
        pthread_mutex_unlock(&m->mu);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    e->refs++;
    r = entry_claim(m, e, req->cancel);
    bool claimed = r == 0;
    pthread_mutex_unlock(&m->mu);
    char session[SBX_SESSION_ID_MAX + 1] = "";
    if (r == 0)
        r = acquire_claimed(session, m, e, req);
    if (r == 0)
        r = lease_new(out, m, e, req, session);
    pthread_mutex_lock(&m->mu);
    if (claimed)
        entry_unclaim(m, e);
    if (r == 0)
        replicas_enforce(m);
    e->refs--;
    entry_drop_if_unused(m, e);
    pthread_mutex_unlock(&m->mu);
    if (r == 0 && req->kind == SBX_HOLD_EXECUTION && m->bound_fn)
        m->bound_fn(m->bound_ctx, req->who.user, req->thread, &(*out)->box);
    return r;
}

/* ---- release, fences, calls ---- */

/* Ends one shell session of box: 0 once it is gone (404: gone already). */
static int session_end(sbx_manager *m, const sbx_box *box, const char *session) {
    char path[sizeof "/v1/shell/sessions/" + SBX_SESSION_ID_MAX];
    snprintf(path, sizeof path, "/v1/shell/sessions/%s", session);
    json_t *reply = NULL;
    int status = 0;
    int r = m->p->call(m->p->ctx, &reply, &status, box, "DELETE", path, NULL,
                       (int)m->cfg.call_timeout_ms);
    json_decref(reply);
    if (r == 0 && status != 200 && status != 404)
        r = fawn_err(FAWN_EIO, "the box refused to end session %s (HTTP %d)", session, status);
    return r;
}

/* Ends the scope's session in the box (its processes die with it). */
static void scope_session_end(sbx_manager *m, const sbx_box *box, const char *session) {
    if (session_end(m, box, session) < 0)
        log_warn("sandbox", "sandbox %s: ending session %s failed: %s", box->sandbox_id, session,
                 fawn_errmsg());
}

/* Drops l's hold on its scope; fills `ended` with the session to end when
 * it was the scope's last holder. Called with m->mu held. */
static void scope_release(sbx_entry *e, const sbx_lease *l, char ended[SBX_SESSION_ID_MAX + 1]) {
    scope_session *s = l->scope[0] ? scope_find(e, l->scope) : NULL;
    if (!s || strcmp(s->session, l->session) != 0 || --s->holders > 0)
        return;
    if (strcmp(s->generation, e->box.generation) == 0)
        memcpy(ended, s->session, SBX_SESSION_ID_MAX + 1);
    scope_remove(e, s);
}

void sbx_release(sbx_lease *l) {
    if (!l)
        return;
    sbx_manager *m = l->m;
    sbx_entry *e = l->entry;
    char ended[SBX_SESSION_ID_MAX + 1] = "";
    pthread_mutex_lock(&m->mu);
    entry_claim(m, e, NULL); /* e->refs still counts this lease */
    e->holders[l->kind]--;
    e->holders_total--;
    scope_release(e, l, ended);
    bool last = e->holders_total == 0 && has_box(e);
    bool deferred = e->destroy_deferred;
    pthread_mutex_unlock(&m->mu);

    if (ended[0])
        scope_session_end(m, &e->box, ended);
    bool teardown = last && (deferred || !sbx_reusable(m, e->box.sandbox_id, e->box.generation));
    if (teardown && entry_retire(m, e) < 0 && deferred) /* never handed out again: */
        fence_add(m, SBX_WHOLE, e->box.sandbox_id, e->box.generation,
                  "destroy requested; teardown failed");

    pthread_mutex_lock(&m->mu);
    if (last) {
        e->destroy_deferred = false; /* done, or fenced for the next acquisition to finish */
        e->state = SBX_STATE_IDLE;
        e->idle_since_ms = fawn_now_ms();
    }
    entry_unclaim(m, e);
    if (last)
        replicas_enforce(m); /* e may be evicted, not freed: this lease still counts in refs */
    e->refs--;
    entry_drop_if_unused(m, e);
    pthread_mutex_unlock(&m->mu);
    free(l);
}

int sbx_fence(sbx_lease *l, bool scope_only, const char *reason) {
    if (scope_only && !l->scope[0])
        return fawn_err(FAWN_EINVAL, "the lease has no scope to fence");
    sbx_manager *m = l->m;
    const char *scope = scope_only ? l->scope : SBX_WHOLE;
    int r = fence_add(m, scope, l->box.sandbox_id, l->box.generation, reason);
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = l->entry;
    if (strcmp(e->box.generation, l->box.generation) == 0) {
        scope_session *s = scope_only ? scope_find(e, l->scope) : NULL;
        if (s && strcmp(s->session, l->session) == 0)
            s->fenced = true;
        else if (!scope_only)
            e->fenced = true;
    }
    pthread_mutex_unlock(&m->mu);
    log_warn("sandbox", "sandbox %s generation %.8s%s%s fenced: %s", l->box.sandbox_id,
             l->box.generation, scope_only ? " scope " : "", scope_only ? l->scope : "", reason);
    return r;
}

/* A request whose exchange failed midway left its outcome unknown: the
 * generation is fenced before the error is returned. */
static int call_outcome(sbx_lease *l, int r) {
    if (r != FAWN_EIO && r != FAWN_ETIMEDOUT && r != FAWN_EPROTO)
        return r;
    char message[256];
    snprintf(message, sizeof message, "%s", fawn_errmsg());
    /* A fence the store refuses still holds in this process (fence_add logs it). */
    if (sbx_fence(l, false, "the box stopped answering during a request") < 0)
        log_debug("sandbox", "sandbox %s: the fence is not durable", l->box.sandbox_id);
    return fawn_err(r, "%s", message);
}

int sbx_call(json_t **reply, int *status, sbx_lease *l, const char *method, const char *path,
             const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    sbx_manager *m = l->m;
    return call_outcome(
        l, m->p->call(m->p->ctx, reply, status, &l->box, method, path, body, timeout_ms));
}

int sbx_call_file(json_t **reply, int *status, sbx_lease *l, const char *method, const char *path,
                  int file_fd, uint64_t size, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    sbx_manager *m = l->m;
    if (!m->p->call_file)
        return fawn_err(FAWN_EUNSUP, "the %s provider cannot send files", m->p->name);
    return call_outcome(l, m->p->call_file(m->p->ctx, reply, status, &l->box, method, path, file_fd,
                                           size, timeout_ms));
}

/* The box and session of scope in sandbox_id while a lease holds it. */
static bool scope_held(sbx_box *box, char session[SBX_SESSION_ID_MAX + 1], sbx_manager *m,
                       const char *sandbox_id, const char *scope) {
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = entry_find(m, sandbox_id);
    scope_session *s = e ? scope_find(e, scope) : NULL;
    bool held = s && s->holders > 0 && strcmp(s->generation, e->box.generation) == 0;
    if (held) {
        *box = e->box;
        memcpy(session, s->session, SBX_SESSION_ID_MAX + 1);
    }
    pthread_mutex_unlock(&m->mu);
    return held;
}

int sbx_kill_scope(sbx_manager *m, const char *user, const char *thread, const char *scope,
                   int timeout_ms) {
    char sandbox_id[17], session[SBX_SESSION_ID_MAX + 1];
    sbx_box box;
    int r = paths_sandbox_id(sandbox_id, user, thread);
    if (r < 0)
        return r;
    if (!scope_valid(scope) || !scope_held(&box, session, m, sandbox_id, scope))
        return fawn_err(FAWN_ENOENT, "no lease holds that scope");
    char path[sizeof "/v1/shell/sessions//kill" + SBX_SESSION_ID_MAX];
    snprintf(path, sizeof path, "/v1/shell/sessions/%s/kill", session);
    json_t *reply = NULL;
    int status = 0;
    r = m->p->call(m->p->ctx, &reply, &status, &box, "POST", path, NULL, timeout_ms);
    json_decref(reply);
    if (r == 0 && status == 404)
        return fawn_err(FAWN_ENOENT, "the box has no session %s", session);
    if (r == 0 && status != 200)
        r = fawn_err(FAWN_EIO, "the box did not confirm the kill (HTTP %d)", status);
    if (r == FAWN_EIO || r == FAWN_ETIMEDOUT || r == FAWN_EPROTO) {
        char message[256];
        snprintf(message, sizeof message, "%s", fawn_errmsg());
        fence_add(m, scope, box.sandbox_id, box.generation, "a kill's outcome is unknown");
        log_warn("sandbox", "sandbox %s generation %.8s scope %s fenced: %s", box.sandbox_id,
                 box.generation, scope, message);
        r = fawn_err(r, "%s", message);
    }
    return r;
}

/* Removes whatever the provider may still have of e's sandbox, which this
 * manager runs no box of (e claimed, m->mu not held): once this gateway
 * owns it, so that another gateway's box is never removed under it. */
static int unknown_destroy(sbx_manager *m, sbx_entry *e) {
    bool changed_hands = false;
    int r = ownership_claim(&changed_hands, m, e->box.sandbox_id, e->user, e->thread, NULL);
    if (r == 0)
        r = box_destroy(m, e->box.sandbox_id, "");
    if (r == 0)
        ownership_release(m, e->box.sandbox_id);
    return r;
}

int sbx_destroy(enum sbx_destroy_outcome *outcome, sbx_manager *m, const char *user,
                const char *thread) {
    *outcome = SBX_DESTROYED;
    char sandbox_id[17];
    int r = paths_sandbox_id(sandbox_id, user, thread);
    if (r < 0)
        return r;
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = entry_get(m, sandbox_id, user, thread);
    if (!e) {
        pthread_mutex_unlock(&m->mu);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    e->refs++;
    entry_claim(m, e, NULL);
    if (e->holders_total) {
        e->destroy_deferred = true;
        *outcome = SBX_DESTROY_DEFERRED;
    }
    pthread_mutex_unlock(&m->mu);
    if (*outcome == SBX_DESTROYED)
        r = has_box(e) ? entry_retire(m, e) : unknown_destroy(m, e);
    pthread_mutex_lock(&m->mu);
    entry_unclaim(m, e);
    e->refs--;
    entry_drop_if_unused(m, e);
    pthread_mutex_unlock(&m->mu);
    return r;
}

/* ---- observability ---- */

static void info_fill(sbx_info *out, sbx_manager *m, const sbx_entry *e, int64_t now) {
    *out = (sbx_info){.state = e->state,
                      .destroy_deferred = e->destroy_deferred,
                      .teardown_failures = e->teardown_failures,
                      .teardown_backoff_ms = e->teardown_backoff_ms};
    snprintf(out->user, sizeof out->user, "%s", e->user);
    snprintf(out->thread, sizeof out->thread, "%s", e->thread);
    snprintf(out->sandbox_id, sizeof out->sandbox_id, "%s", e->box.sandbox_id);
    memcpy(out->generation, e->box.generation, sizeof out->generation);
    memcpy(out->holders, e->holders, sizeof out->holders);
    out->idle_ms = e->state == SBX_STATE_IDLE && !e->holders_total ? now - e->idle_since_ms : 0;
    /* this process's fences only: no store round trip under m->mu */
    out->fenced = e->fenced || fence_exists(m, SBX_WHOLE, e->box.sandbox_id, e->box.generation);
}

int sbx_list(sbx_info **out, size_t *n, sbx_manager *m) {
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&m->mu);
    size_t count = 0;
    for (sbx_entry *e = m->entries; e; e = e->next)
        count += has_box(e);
    sbx_info *list = calloc(count ? count : 1, sizeof *list);
    size_t i = 0;
    int64_t now = fawn_now_ms();
    for (sbx_entry *e = m->entries; list && e; e = e->next)
        if (has_box(e))
            info_fill(&list[i++], m, e, now);
    pthread_mutex_unlock(&m->mu);
    if (!list)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *out = list;
    *n = i;
    return 0;
}

const char *sbx_state_name(enum sbx_state s) {
    static const char *const names[] = {[SBX_STATE_STARTING] = "starting",
                                        [SBX_STATE_ACTIVE] = "active",
                                        [SBX_STATE_IDLE] = "idle",
                                        [SBX_STATE_STOPPING] = "stopping"};
    return (unsigned)s < ARRAY_LEN(names) ? names[s] : "unknown";
}

const char *sbx_holder_name(enum sbx_holder k) {
    static const char *const names[] = {
        [SBX_HOLD_EXECUTION] = "execution", [SBX_HOLD_UPLOAD] = "upload", [SBX_HOLD_FORK] = "fork"};
    return (unsigned)k < ARRAY_LEN(names) ? names[k] : "unknown";
}

/* ---- start and stop: reconciling with what the provider has ---- */

/* Ends every shell session in box, each with its processes: a box adopted
 * after a restart has no live scope, so each of its sessions belonged to a
 * run that died with the previous process. 0 only when all are gone; the
 * listing is the box's, so it is checked (ids as the box API allows). */
static int sessions_end_all(sbx_manager *m, const sbx_box *box) {
    json_t *reply = NULL;
    int status = 0;
    int r = m->p->call(m->p->ctx, &reply, &status, box, "GET", "/v1/shell/sessions", NULL,
                       (int)m->cfg.call_timeout_ms);
    json_t *list = json_object_get(reply, "sessions");
    if (r == 0 &&
        (status != 200 || !json_is_array(list) || json_array_size(list) > SBX_ADOPT_SESSIONS_MAX))
        r = fawn_err(FAWN_EPROTO, "the box did not list its shell sessions");
    for (size_t i = 0; r == 0 && i < json_array_size(list); i++) {
        const char *id = json_string_value(json_object_get(json_array_get(list, i), "id"));
        r = id && fawn_id_valid(id) ? session_end(m, box, id)
                                    : fawn_err(FAWN_EPROTO, "the box listed a malformed session");
    }
    json_decref(reply);
    return r;
}

/* A box of this gateway (or nobody's) the provider lists: adopted into the
 * warm pool (true) when the store records it at that generation for a
 * (user, thread) (rec, NULL when none), it is not fenced, it answers and
 * its shell sessions (all a dead run's) could be ended; destroyed otherwise
 * (a stray, or untrusted). */
static bool reconcile_owned(sbx_manager *m, const char *sandbox_id, const char *generation,
                            const store_sandbox *rec) {
    sbx_box box = {0};
    bool adopt = false;
    if (generation[0] && rec && strcmp(rec->generation, generation) == 0 &&
        sbx_reusable(m, sandbox_id, generation)) {
        snprintf(box.sandbox_id, sizeof box.sandbox_id, "%s", sandbox_id);
        memcpy(box.generation, rec->generation, sizeof box.generation);
        memcpy(box.endpoint, rec->endpoint, sizeof box.endpoint);
        memcpy(box.token, rec->token, sizeof box.token);
        int health = m->p->health(m->p->ctx, &box);
        adopt = health == 0;
        if (adopt && box_attested(m, &box, rec->user) < 0)
            return false; /* fenced, and destroyed when the provider could */
        if (health < 0 &&
            health != FAWN_ENOENT) /* unknown: never trusted, even if it answers later */
            fence_add(m, SBX_WHOLE, sandbox_id, generation, "health unknown at start");
    }
    if (adopt && sessions_end_all(m, &box) < 0) {
        log_warn("sandbox",
                 "sandbox %s: the sessions of a previous run could not be ended (%s); "
                 "not adopted",
                 sandbox_id, fawn_errmsg());
        adopt = false;
    }
    sbx_entry *e = adopt ? entry_get(m, sandbox_id, rec->user, rec->thread) : NULL;
    if (e) {
        e->box = box;
        e->state = SBX_STATE_IDLE;
        e->idle_since_ms = fawn_now_ms();
        log_info("sandbox", "sandbox %s (thread %s) adopted from a previous run", sandbox_id,
                 rec->thread);
    } else if (box_destroy(m, sandbox_id, generation) == 0) {
        log_info("sandbox", "sandbox %s left by a previous run removed", sandbox_id);
    }
    return e != NULL;
}

/* Claims a listed box's sandbox for this gateway, for the (user, thread)
 * its record (rec, or NULL) or its ownership names; a box neither names
 * is nobody's (STORE_OWNER_FREE, nothing claimed). */
static int reconcile_claim(enum store_owner_claim *how, store_sandbox_owner *was, sbx_manager *m,
                           const char *sandbox_id, const store_sandbox *rec) {
    *how = STORE_OWNER_HELD;
    store_sandbox_owner row;
    int r = rec ? 0 : store_sandbox_owner_get(m->st, &row, sandbox_id);
    *was = (store_sandbox_owner){0};
    if (r == FAWN_ENOENT) {
        *how = STORE_OWNER_FREE;
        return 0;
    }
    store_owner_claim_req q = {.sandbox_id = sandbox_id,
                               .user = rec ? rec->user : row.user,
                               .thread = rec ? rec->thread : row.thread,
                               .gateway = m->gateway,
                               .now_ms = fawn_wall_ms(),
                               .lease_ms = m->cfg.lease_ms};
    return r < 0 ? r : store_sandbox_owner_claim(m->st, how, was, &q);
}

/* Keeps a box left to another gateway for the heartbeat to look at again
 * (left_boxes_settle); one that does not fit is left to its own idle
 * timeout, as before. */
static void left_box_remember(sbx_manager *m, const char *sandbox_id, const char *generation) {
    if (m->n_left == m->cap_left) {
        size_t cap = m->cap_left ? 2 * m->cap_left : 16;
        left_box *grown = realloc(m->left, cap * sizeof *grown);
        if (!grown)
            return;
        m->left = grown;
        m->cap_left = cap;
    }
    left_box *k = &m->left[m->n_left++];
    snprintf(k->sandbox_id, sizeof k->sandbox_id, "%s", sandbox_id);
    snprintf(k->generation, sizeof k->generation, "%s", generation);
}

/* A box the provider lists (on a home several gateways share, theirs
 * too): another live gateway's is left alone, as is one whose owner
 * cannot be read; one whose owner's lease expired is fenced and removed;
 * the rest go through reconcile_owned, and the ownership of what it does
 * not adopt is given up. */
static int reconcile_box(void *ctx, const char *sandbox_id, const char *generation) {
    sbx_manager *m = ctx;
    store_sandbox rec;
    bool recorded = store_sandbox_get(m->st, &rec, sandbox_id) == 0;
    enum store_owner_claim how;
    store_sandbox_owner was;
    if (reconcile_claim(&how, &was, m, sandbox_id, recorded ? &rec : NULL) < 0) {
        log_warn("sandbox", "sandbox %s: its owner is unknown (%s); left alone", sandbox_id,
                 fawn_errmsg());
        return 0;
    }
    if (how == STORE_OWNER_HELD) {
        log_info("sandbox", "sandbox %s is gateway %s's; left alone", sandbox_id, was.gateway);
        left_box_remember(m, sandbox_id, generation);
        return 0;
    }
    if (how == STORE_OWNER_EXPIRED && generation[0])
        fence_add(m, SBX_WHOLE, sandbox_id, generation, "its gateway's lease expired");
    if (!reconcile_owned(m, sandbox_id, generation, recorded ? &rec : NULL))
        ownership_release(m, sandbox_id);
    return 0;
}

/* Fences of generations no longer running retire once the provider
 * confirms it: absent, or running another generation. */
static void reconcile_fences(sbx_manager *m) {
    fence_key *fences = NULL;
    size_t n = 0;
    if (fences_copy(&fences, &n, m, NULL) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const fence_key *f = &fences[i];
        sbx_entry *e = entry_find(m, f->sandbox_id);
        if (e && strcmp(e->box.generation, f->generation) == 0)
            continue; /* a scope fence of an adopted box: it stays with the box */
        enum sbx_presence state = SBX_UNKNOWN;
        char running[SBX_GENERATION_LEN + 1] = "";
        if (m->p->probe(m->p->ctx, &state, running, f->sandbox_id) < 0)
            continue;
        if (state == SBX_ABSENT || (state == SBX_RUNNING && strcmp(running, f->generation) != 0))
            fence_remove(m, f);
    }
    free(fences);
}

static void reconcile(sbx_manager *m) {
    if (m->p->list(m->p->ctx, reconcile_box, m) < 0)
        log_warn("sandbox", "cannot list the %s provider's sandboxes: %s", m->p->name,
                 fawn_errmsg());
    reconcile_fences(m);
}

/* Frees m and everything it holds (the reaper is not running). */
static void manager_destroy(sbx_manager *m) {
    while (m->entries) {
        sbx_entry *e = m->entries;
        m->entries = e->next;
        free(e);
    }
    free(m->fences);
    free(m->left);
    pthread_cond_destroy(&m->changed);
    pthread_mutex_destroy(&m->fence_mu);
    pthread_mutex_destroy(&m->mu);
    free(m);
}

static int cond_init_monotonic(pthread_cond_t *c) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    int r = pthread_cond_init(c, &attr);
    pthread_condattr_destroy(&attr);
    return r;
}

/* cfg with its ownership settings filled in: the gateway id (copied into
 * m->gateway) and the default heartbeat and lease for 0. */
static int config_apply(sbx_manager *m, const sbx_manager_config *cfg) {
    const char *gateway = cfg->gateway_id ? cfg->gateway_id : SBX_GATEWAY_DEFAULT;
    if (!gateway[0] || strlen(gateway) > STORE_GATEWAY_MAX)
        return fawn_err(FAWN_EINVAL, "a gateway id is 1..%d bytes", STORE_GATEWAY_MAX);
    snprintf(m->gateway, sizeof m->gateway, "%s", gateway);
    m->cfg = *cfg;
    m->cfg.gateway_id = m->gateway;
    if (!m->cfg.heartbeat_ms)
        m->cfg.heartbeat_ms = SBX_HEARTBEAT_DEFAULT_MS;
    if (!m->cfg.lease_ms)
        m->cfg.lease_ms = SBX_LEASE_DEFAULT_MS;
    return 0;
}

int sbx_manager_new(sbx_manager **out, const sbx_manager_config *cfg, sbx_provider *provider,
                    store *st, const authz_policy *policy) {
    *out = NULL;
    sbx_manager *m = calloc(1, sizeof *m);
    if (!m)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *m = (sbx_manager){.p = provider, .st = st, .policy = policy};
    if (config_apply(m, cfg) < 0) {
        free(m);
        return FAWN_EINVAL;
    }
    pthread_mutex_init(&m->mu, NULL);
    pthread_mutex_init(&m->fence_mu, NULL);
    cond_init_monotonic(&m->changed);
    int r = fences_load(m); /* without them nothing could be trusted */
    if (r == 0)
        reconcile(m);
    int err = r == 0 ? pthread_create(&m->reaper, NULL, reaper_main, m) : 0;
    if (err)
        r = fawn_err_sys(FAWN_EIO, err, "start the sandbox reaper");
    if (r < 0) {
        manager_destroy(m);
        return r;
    }
    err = cfg->idle_timeout_s ? pthread_create(&m->keepalive, NULL, keepalive_main, m) : 0;
    m->keepalive_started = cfg->idle_timeout_s && !err;
    if (err) {
        sbx_manager_free(m);
        return fawn_err_sys(FAWN_EIO, err, "start the sandbox keepalive");
    }
    err = pthread_create(&m->heartbeat, NULL, heartbeat_main, m);
    m->heartbeat_started = !err;
    if (err) {
        sbx_manager_free(m);
        return fawn_err_sys(FAWN_EIO, err, "start the sandbox ownership heartbeat");
    }
    *out = m;
    return 0;
}

void sbx_manager_free(sbx_manager *m) {
    if (!m)
        return;
    pthread_mutex_lock(&m->mu);
    m->stopping = true;
    pthread_cond_broadcast(&m->changed);
    pthread_mutex_unlock(&m->mu);
    pthread_join(m->reaper, NULL);
    if (m->keepalive_started)
        pthread_join(m->keepalive, NULL);
    if (m->heartbeat_started)
        pthread_join(m->heartbeat, NULL);
    if (store_sandbox_owner_release_all(m->st, m->gateway) < 0)
        log_warn("sandbox", "sandbox ownership not given up (the leases run out): %s",
                 fawn_errmsg());
    manager_destroy(m);
}

/* ---- what the credential broker needs ---- */

void sbx_manager_on_bound(sbx_manager *m, sbx_bound_fn fn, void *ctx) {
    m->bound_fn = fn;
    m->bound_ctx = ctx;
}

/* The scope of one execution lease of e's, "" when none has one. Called with m->mu held. */
static void holding_scope(char out[SBX_SCOPE_MAX + 1], const sbx_entry *e) {
    out[0] = '\0';
    for (size_t i = 0; i < e->n_scopes && !out[0]; i++)
        if (e->scopes[i].holders > 0 && !e->scopes[i].fenced)
            snprintf(out, SBX_SCOPE_MAX + 1, "%s", e->scopes[i].scope);
}

int sbx_holding_find(sbx_holding *out, sbx_manager *m, const char *sandbox_id,
                     const char *generation) {
    memset(out, 0, sizeof *out);
    int r = FAWN_ENOENT;
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = entry_find(m, sandbox_id);
    if (e && e->holders[SBX_HOLD_EXECUTION] > 0 && !e->fenced && !e->destroy_deferred &&
        strcmp(e->box.generation, generation) == 0) {
        snprintf(out->user, sizeof out->user, "%s", e->user);
        snprintf(out->thread, sizeof out->thread, "%s", e->thread);
        holding_scope(out->scope, e);
        r = 0;
    }
    pthread_mutex_unlock(&m->mu);
    if (r == 0 && !sbx_reusable(m, sandbox_id, generation)) {
        memset(out, 0, sizeof *out);
        r = FAWN_ENOENT;
    }
    return r == 0 ? 0 : fawn_err(r, "no run holds sandbox %s now", sandbox_id);
}

int sbx_fence_generation(sbx_manager *m, const char *sandbox_id, const char *generation,
                         const char *reason) {
    int r = fence_add(m, SBX_WHOLE, sandbox_id, generation, reason);
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = entry_find(m, sandbox_id);
    if (e && strcmp(e->box.generation, generation) == 0)
        e->fenced = true;
    pthread_mutex_unlock(&m->mu);
    log_warn("sandbox", "sandbox %s generation %.8s fenced: %s", sandbox_id, generation, reason);
    return r;
}

bool sbx_broker_supported(const sbx_manager *m) {
    return (m->p->broker_dir && m->p->attest_peer) || m->p->attest_remote;
}

bool sbx_broker_remote(const sbx_manager *m) { return m->p->attest_remote != NULL; }

int sbx_attest_remote(enum sbx_attestation *out, sbx_manager *m, const sbx_remote_caller *caller) {
    *out = SBX_ATTEST_UNKNOWN;
    if (!m->p->attest_remote)
        return fawn_err(FAWN_EUNSUP, "the %s provider cannot attest a caller", m->p->name);
    int r = m->p->attest_remote(m->p->ctx, out, caller);
    if (r < 0)
        *out = SBX_ATTEST_UNKNOWN;
    return r;
}

int sbx_broker_dir(char out[PATH_MAX], sbx_manager *m, const char *sandbox_id) {
    out[0] = '\0';
    if (!m->p->broker_dir)
        return fawn_err(FAWN_EUNSUP, "the %s provider has no credential broker", m->p->name);
    return m->p->broker_dir(m->p->ctx, out, sandbox_id);
}

int sbx_attest_peer(enum sbx_attestation *out, sbx_manager *m, const char *sandbox_id,
                    const sbx_peer *peer) {
    *out = SBX_ATTEST_UNKNOWN;
    if (!m->p->attest_peer)
        return fawn_err(FAWN_EUNSUP, "the %s provider cannot attest a caller", m->p->name);
    int r = m->p->attest_peer(m->p->ctx, out, sandbox_id, peer);
    if (r < 0)
        *out = SBX_ATTEST_UNKNOWN;
    return r;
}
