/* What the sandbox manager's files share (manager.h is the contract; no
 * other module includes this):
 *   manager.c         fences, entries, acquisition, release, start and stop
 *   manager_owners.c  one gateway per sandbox: ownership, the heartbeat, and
 *                     the start's reconciliation with the provider's boxes
 *   manager_pool.c    the warm pool's reaper and the keepalive
 *   manager_broker.c  what the credential broker asks of the manager
 * One mutex (m->mu) guards the table of entries; provider calls run outside
 * it, on an entry claimed with its `busy` flag. Each function says whether
 * it expects m->mu held. */
#ifndef FAWN_SANDBOX_MANAGER_INTERNAL_H
#define FAWN_SANDBOX_MANAGER_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "sandbox/manager.h"

/* How often a waiting acquirer looks at its cancel flag. */
#define SBX_WAIT_SLICE_MS 20
/* Scope sessions one sandbox tracks: a run's lead agent and sub-agents,
 * well within the box's own cap (sandbox.max_sessions). */
#define SBX_SCOPES_MAX 32
/* Whole-generation fences use the empty scope. */
#define SBX_WHOLE ""

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

/* Whether e runs a box (its generation is "" when none does). */
static inline bool mgr_has_box(const sbx_entry *e) { return e->box.generation[0] != '\0'; }

/* Whether cancel (may be NULL) is set. */
static inline bool mgr_cancelled(const sbx_cancel *c) { return c && atomic_load(&c->cancelled); }

/* ---- manager.c ---- */

/* *ts = CLOCK_MONOTONIC now + ms (for pthread_cond_timedwait on m->changed). */
void mgr_deadline_in(struct timespec *ts, int64_t ms);
/* Fences (scope, sandbox_id, generation) in memory, then in the store;
 * answers (and logs the failure of) the store's write. */
int mgr_fence_add(sbx_manager *m, const char *scope, const char *sandbox_id, const char *generation,
                  const char *reason);
/* Retires the fence k from the store, then from memory. */
void mgr_fence_remove(sbx_manager *m, const fence_key *k);
/* A malloc'd copy of this process's fences of sandbox_id (all when NULL). */
int mgr_fences_copy(fence_key **out, size_t *n, sbx_manager *m, const char *sandbox_id);
/* The entry of sandbox_id, or NULL (m->mu held). */
sbx_entry *mgr_entry_find(sbx_manager *m, const char *sandbox_id);
/* The entry of sandbox_id, made for (user, thread) when there is none;
 * NULL when out of memory (m->mu held). */
sbx_entry *mgr_entry_get(sbx_manager *m, const char *sandbox_id, const char *user,
                         const char *thread);
/* Ends the caller's claim on e and wakes the waiters (m->mu held). */
void mgr_entry_unclaim(sbx_manager *m, sbx_entry *e);
/* Frees e when nothing refers to it and it holds no box (m->mu held). */
void mgr_entry_drop_if_unused(sbx_manager *m, sbx_entry *e);
/* Destroys (sandbox_id, generation) through the provider; once it is
 * absent, forgets its record and retires its fences. Failures are logged. */
int mgr_box_destroy(sbx_manager *m, const char *sandbox_id, const char *generation);
/* Tears down e's box (e claimed, m->mu not held); e then holds none. */
int mgr_entry_teardown(sbx_manager *m, sbx_entry *e);
/* 0 once box proved it is user's sandbox's (or the provider does not
 * attest); otherwise it is fenced and destroyed, and an error answered. */
int mgr_box_attested(sbx_manager *m, const sbx_box *box, const char *user);
/* Ends one shell session of box: 0 once it is gone. */
int mgr_session_end(sbx_manager *m, const sbx_box *box, const char *session);

/* ---- manager_owners.c ---- */

/* Claims sandbox_id for this gateway, asking a live owner to let it go
 * and waiting for it (cancel may end the wait); *changed_hands when it was
 * not this gateway's already. */
int mgr_ownership_claim(bool *changed_hands, sbx_manager *m, const char *sandbox_id,
                        const char *user, const char *thread, const sbx_cancel *cancel);
/* Gives up this gateway's ownership of sandbox_id (a failure is logged). */
void mgr_ownership_release(sbx_manager *m, const char *sandbox_id);
/* Tears e's box down (e claimed, m->mu not held) and gives up its ownership. */
int mgr_entry_retire(sbx_manager *m, sbx_entry *e);
/* After a claim that changed hands: the generations run before are fenced. */
int mgr_previous_generations_fence(sbx_manager *m, const sbx_entry *e);
/* The ownership heartbeat's thread (arg: the manager), until m->stopping. */
void *mgr_heartbeat_main(void *arg);
/* At start: adopts, leaves or removes each box the provider lists, and
 * retires the fences of generations no longer running. */
void mgr_reconcile(sbx_manager *m);

/* ---- manager_pool.c ---- */

/* Past sandbox.replicas running boxes, evicts the oldest idle ones (m->mu held). */
void mgr_replicas_enforce(sbx_manager *m);
/* The idle reaper's thread (arg: the manager), until m->stopping. */
void *mgr_reaper_main(void *arg);
/* The keepalive's thread (arg: the manager), until m->stopping. */
void *mgr_keepalive_main(void *arg);
/* Runs round (m->mu held) every period_ms until the manager stops. */
void mgr_periodic_run(sbx_manager *m, int64_t period_ms, void (*round)(sbx_manager *));

#endif
