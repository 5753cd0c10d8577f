/* The sandbox manager (manager.h): fences, entries, acquisition, release,
 * start and stop. One mutex guards the table of entries; provider calls run
 * outside it, on an entry claimed with its `busy` flag, so that work on one
 * sandbox is serialized while other sandboxes proceed. Every decision to
 * hand a box out goes through sbx_reusable. */
#include "sandbox/manager.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "paths/paths.h"
#include "sandbox/manager_internal.h"

/* Creates asked of a provider that keeps handing back fenced boxes. */
#define SBX_CREATE_ATTEMPTS 3

/* Ownership leases when the configuration leaves them at 0: the defaults
 * of cluster.heartbeat_ms and cluster.lease_ms. */
#define SBX_HEARTBEAT_DEFAULT_MS 2000
#define SBX_LEASE_DEFAULT_MS 10000

/* ---- helpers ---- */

void mgr_deadline_in(struct timespec *ts, int64_t ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (ms % 1000) * 1000000;
    if (ts->tv_nsec >= 1000000000) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000;
    }
}

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
int mgr_fence_add(sbx_manager *m, const char *scope, const char *sandbox_id, const char *generation,
                  const char *reason) {
    fence_remember(m, scope, sandbox_id, generation);
    int r = store_fence_add(m->st, scope, sandbox_id, generation, reason);
    if (r < 0)
        log_warn("sandbox", "sandbox %s generation %.8s: fence (%s) kept in memory only: %s",
                 sandbox_id, generation, reason, fawn_errmsg());
    return r;
}

/* Retires a fence: from the store first, then from memory. */
void mgr_fence_remove(sbx_manager *m, const fence_key *k) {
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
int mgr_fences_copy(fence_key **out, size_t *n, sbx_manager *m, const char *sandbox_id) {
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

sbx_entry *mgr_entry_find(sbx_manager *m, const char *sandbox_id) {
    for (sbx_entry *e = m->entries; e; e = e->next)
        if (strcmp(e->box.sandbox_id, sandbox_id) == 0)
            return e;
    return NULL;
}

sbx_entry *mgr_entry_get(sbx_manager *m, const char *sandbox_id, const char *user,
                         const char *thread) {
    sbx_entry *e = mgr_entry_find(m, sandbox_id);
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
void mgr_entry_drop_if_unused(sbx_manager *m, sbx_entry *e) {
    if (e->refs || e->busy || mgr_has_box(e) || e->holders_total)
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
        if (mgr_cancelled(cancel))
            return fawn_err(FAWN_ECANCELED, "the acquisition was cancelled");
        struct timespec until;
        mgr_deadline_in(&until, SBX_WAIT_SLICE_MS);
        pthread_cond_timedwait(&m->changed, &m->mu, &until);
    }
    e->busy = true;
    return 0;
}

void mgr_entry_unclaim(sbx_manager *m, sbx_entry *e) {
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
    if (mgr_fences_copy(&fences, &n, m, sandbox_id) < 0)
        return;
    for (size_t i = 0; i < n; i++)
        if (strcmp(fences[i].generation, generation) == 0)
            mgr_fence_remove(m, &fences[i]);
    free(fences);
}

/* Destroys (sandbox_id, generation) through the provider and, once it is
 * confirmed absent, forgets its record and retires its fences. A record
 * that cannot be forgotten is logged, not returned: the box is gone, a
 * record without its box is never adopted, and the next start replaces it.
 * A failed destroy is logged too, so a caller with nothing else to do may
 * drop the result. */
int mgr_box_destroy(sbx_manager *m, const char *sandbox_id, const char *generation) {
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
int mgr_entry_teardown(sbx_manager *m, sbx_entry *e) {
    char generation[SBX_GENERATION_LEN + 1];
    memcpy(generation, e->box.generation, sizeof generation);
    int r = mgr_box_destroy(m, e->box.sandbox_id, generation);
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
int mgr_box_attested(sbx_manager *m, const sbx_box *box, const char *user) {
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
    (void)mgr_fence_add(m, SBX_WHOLE, box->sandbox_id, box->generation, why);
    if (mgr_box_destroy(m, box->sandbox_id, box->generation) < 0)
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
            return mgr_box_attested(m, out, e->user);
        if ((r = mgr_box_destroy(m, out->sandbox_id, out->generation)) < 0)
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
        mgr_box_destroy(m, box.sandbox_id, box.generation);
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
        mgr_fence_add(m, SBX_WHOLE, e->box.sandbox_id, e->box.generation,
                      "health unknown on reuse");
    return false;
}

/* Makes sure e (claimed) has a box that may be handed out. A box that may
 * not is torn down first, even while others hold it: their leases name its
 * generation, so nothing they do acts on the new one. */
static int box_ensure(sbx_manager *m, sbx_entry *e, const sbx_cancel *cancel) {
    if (mgr_has_box(e) && box_reusable_now(m, e))
        return 0;
    if (mgr_has_box(e)) {
        int r = mgr_entry_teardown(m, e);
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
        mgr_fence_add(m, scope, e->box.sandbox_id, e->box.generation,
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
    int r = mgr_ownership_claim(&changed_hands, m, e->box.sandbox_id, e->user, e->thread,
                                req->cancel);
    bool owned = r == 0;
    if (r == 0 && changed_hands)
        r = mgr_previous_generations_fence(m, e);
    if (r == 0)
        r = box_ensure(m, e, req->cancel);
    if (r < 0 && owned && !mgr_has_box(e))
        mgr_ownership_release(m, e->box.sandbox_id);
    if (r == 0 && mgr_cancelled(req->cancel))
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
    sbx_entry *e = mgr_entry_get(m, sandbox_id, req->who.user, req->thread);
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
        mgr_entry_unclaim(m, e);
    if (r == 0)
        mgr_replicas_enforce(m);
    e->refs--;
    mgr_entry_drop_if_unused(m, e);
    pthread_mutex_unlock(&m->mu);
    if (r == 0 && req->kind == SBX_HOLD_EXECUTION && m->bound_fn)
        m->bound_fn(m->bound_ctx, req->who.user, req->thread, &(*out)->box);
    return r;
}

/* ---- release, fences, calls ---- */

/* Ends one shell session of box: 0 once it is gone (404: gone already). */
int mgr_session_end(sbx_manager *m, const sbx_box *box, const char *session) {
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
    if (mgr_session_end(m, box, session) < 0)
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
    bool last = e->holders_total == 0 && mgr_has_box(e);
    bool deferred = e->destroy_deferred;
    pthread_mutex_unlock(&m->mu);

    if (ended[0])
        scope_session_end(m, &e->box, ended);
    bool teardown = last && (deferred || !sbx_reusable(m, e->box.sandbox_id, e->box.generation));
    if (teardown && mgr_entry_retire(m, e) < 0 && deferred) /* never handed out again: */
        mgr_fence_add(m, SBX_WHOLE, e->box.sandbox_id, e->box.generation,
                      "destroy requested; teardown failed");

    pthread_mutex_lock(&m->mu);
    if (last) {
        e->destroy_deferred = false; /* done, or fenced for the next acquisition to finish */
        e->state = SBX_STATE_IDLE;
        e->idle_since_ms = fawn_now_ms();
    }
    mgr_entry_unclaim(m, e);
    if (last)
        mgr_replicas_enforce(m); /* e may be evicted, not freed: this lease still counts in refs */
    e->refs--;
    mgr_entry_drop_if_unused(m, e);
    pthread_mutex_unlock(&m->mu);
    free(l);
}

int sbx_fence(sbx_lease *l, bool scope_only, const char *reason) {
    if (scope_only && !l->scope[0])
        return fawn_err(FAWN_EINVAL, "the lease has no scope to fence");
    sbx_manager *m = l->m;
    const char *scope = scope_only ? l->scope : SBX_WHOLE;
    int r = mgr_fence_add(m, scope, l->box.sandbox_id, l->box.generation, reason);
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
    sbx_entry *e = mgr_entry_find(m, sandbox_id);
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
        mgr_fence_add(m, scope, box.sandbox_id, box.generation, "a kill's outcome is unknown");
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
    int r = mgr_ownership_claim(&changed_hands, m, e->box.sandbox_id, e->user, e->thread, NULL);
    if (r == 0)
        r = mgr_box_destroy(m, e->box.sandbox_id, "");
    if (r == 0)
        mgr_ownership_release(m, e->box.sandbox_id);
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
    sbx_entry *e = mgr_entry_get(m, sandbox_id, user, thread);
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
        r = mgr_has_box(e) ? mgr_entry_retire(m, e) : unknown_destroy(m, e);
    pthread_mutex_lock(&m->mu);
    mgr_entry_unclaim(m, e);
    e->refs--;
    mgr_entry_drop_if_unused(m, e);
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
        count += mgr_has_box(e);
    sbx_info *list = calloc(count ? count : 1, sizeof *list);
    size_t i = 0;
    int64_t now = fawn_now_ms();
    for (sbx_entry *e = m->entries; list && e; e = e->next)
        if (mgr_has_box(e))
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
        mgr_reconcile(m);
    int err = r == 0 ? pthread_create(&m->reaper, NULL, mgr_reaper_main, m) : 0;
    if (err)
        r = fawn_err_sys(FAWN_EIO, err, "start the sandbox reaper");
    if (r < 0) {
        manager_destroy(m);
        return r;
    }
    err = cfg->idle_timeout_s ? pthread_create(&m->keepalive, NULL, mgr_keepalive_main, m) : 0;
    m->keepalive_started = cfg->idle_timeout_s && !err;
    if (err) {
        sbx_manager_free(m);
        return fawn_err_sys(FAWN_EIO, err, "start the sandbox keepalive");
    }
    err = pthread_create(&m->heartbeat, NULL, mgr_heartbeat_main, m);
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
