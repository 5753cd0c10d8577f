/* The warm pool (manager_internal.h): idle sandboxes torn down after
 * sandbox.idle_timeout_s or past sandbox.replicas, and the keepalive that
 * every box the manager holds hears. */
#include <inttypes.h>
#include <stdlib.h>

#include "sandbox/manager_internal.h"

/* How often the reaper looks for idle sandboxes past their timeout. */
#define SBX_REAP_PERIOD_MS 500
/* A failed idle teardown is tried again after 1 s, then 2 s, 4 s ... up to
 * 5 min: a provider that recovers is noticed soon, one that keeps failing
 * costs a call (and a log line) every 5 minutes per sandbox, and never
 * keeps the entry claimed away from its acquisitions. */
#define SBX_TEARDOWN_BACKOFF_MIN_MS 1000
#define SBX_TEARDOWN_BACKOFF_MAX_MS 300000

/* ---- the warm pool ---- */

static size_t running_count(const sbx_manager *m) {
    size_t n = 0;
    for (const sbx_entry *e = m->entries; e; e = e->next)
        n += mgr_has_box(e);
    return n;
}

/* The idle entry parked longest ago that may be torn down at `now`: not
 * waiting out a teardown backoff and, when timed, parked at or before
 * parked_before_ms. */
static sbx_entry *idle_oldest(sbx_manager *m, bool timed, int64_t parked_before_ms, int64_t now) {
    sbx_entry *oldest = NULL;
    for (sbx_entry *e = m->entries; e; e = e->next) {
        if (!mgr_has_box(e) || e->busy || e->holders_total || e->state != SBX_STATE_IDLE)
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
    int r = mgr_entry_retire(m, e);
    pthread_mutex_lock(&m->mu);
    if (r < 0) {
        e->state = SBX_STATE_IDLE;
        teardown_back_off(e, fawn_now_ms());
    }
    e->refs--;
    mgr_entry_unclaim(m, e);
    mgr_entry_drop_if_unused(m, e);
}

/* Past the replicas cap, evicts the oldest idle sandboxes (never active
 * ones, nor ones backing off). Called with m->mu held. */
void mgr_replicas_enforce(sbx_manager *m) {
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

void *mgr_reaper_main(void *arg) {
    sbx_manager *m = arg;
    pthread_mutex_lock(&m->mu);
    while (!m->stopping) {
        struct timespec until;
        mgr_deadline_in(&until, SBX_REAP_PERIOD_MS);
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
        if (mgr_has_box(e))
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
void mgr_periodic_run(sbx_manager *m, int64_t period_ms, void (*round)(sbx_manager *)) {
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
        mgr_deadline_in(&until, left);
        pthread_cond_timedwait(&m->changed, &m->mu, &until);
    }
    pthread_mutex_unlock(&m->mu);
}

void *mgr_keepalive_main(void *arg) {
    sbx_manager *m = arg;
    mgr_periodic_run(m, (int64_t)m->cfg.idle_timeout_s * 1000 / SBX_KEEPALIVES_PER_TIMEOUT,
                     keepalive_round);
    return NULL;
}
