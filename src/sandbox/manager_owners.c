/* One gateway runs a sandbox at a time (manager_internal.h): this
 * gateway's ownership claimed and given up, the heartbeat that renews it
 * and honors other gateways' requests, and the start's reconciliation with
 * the boxes the provider lists. */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "sandbox/manager_internal.h"

/* Shell sessions an adopted box may report: its own cap
 * (sandbox.max_sessions) is at most 256; a longer list is a broken box. */
#define SBX_ADOPT_SESSIONS_MAX 256
/* An asker tries its claim again this many times per heartbeat while it
 * waits for another gateway to let a sandbox go. */
#define SBX_CLAIM_TRIES_PER_HEARTBEAT 4

/* ---- ownership: one gateway runs a sandbox at a time ---- */

/* Gives up this gateway's ownership of sandbox_id. A failure is logged:
 * the lease is then renewed on (the sandbox is given up when another
 * gateway asks for it) or runs out with this process. */
void mgr_ownership_release(sbx_manager *m, const char *sandbox_id) {
    if (store_sandbox_owner_release(m->st, sandbox_id, m->gateway) < 0)
        log_warn("sandbox", "sandbox %s: ownership not given up: %s", sandbox_id, fawn_errmsg());
}

/* Tears e's box down (e claimed by the caller, m->mu not held) and gives
 * up its ownership. */
int mgr_entry_retire(sbx_manager *m, sbx_entry *e) {
    int r = mgr_has_box(e) ? mgr_entry_teardown(m, e) : 0;
    if (r == 0)
        mgr_ownership_release(m, e->box.sandbox_id);
    return r;
}

/* Sleeps ms, in slices; false (early) once cancel is set. */
static bool sleep_uncancelled(int64_t ms, const sbx_cancel *cancel) {
    for (int64_t left = ms; left > 0 && !mgr_cancelled(cancel); left -= SBX_WAIT_SLICE_MS) {
        int64_t slice = left < SBX_WAIT_SLICE_MS ? left : SBX_WAIT_SLICE_MS;
        struct timespec ts = {.tv_sec = 0, .tv_nsec = (long)slice * 1000000};
        nanosleep(&ts, NULL);
    }
    return !mgr_cancelled(cancel);
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
int mgr_ownership_claim(bool *changed_hands, sbx_manager *m, const char *sandbox_id,
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
int mgr_previous_generations_fence(sbx_manager *m, const sbx_entry *e) {
    store_sandbox rec;
    int r = store_sandbox_get(m->st, &rec, e->box.sandbox_id);
    if (r == FAWN_ENOENT)
        r = 0;
    if (r == 0 && rec.generation[0])
        r = mgr_fence_add(m, SBX_WHOLE, e->box.sandbox_id, rec.generation,
                          "the sandbox changed hands");
    if (r == 0 && mgr_has_box(e) && strcmp(e->box.generation, rec.generation) != 0)
        r = mgr_fence_add(m, SBX_WHOLE, e->box.sandbox_id, e->box.generation,
                          "the sandbox changed hands");
    return r;
}

/* ---- heartbeat: ownership leases renewed, other gateways' requests honored ---- */

/* Lets another gateway have sandbox o when nothing here holds or works on
 * it: its box torn down, then its ownership given up. One in use stays
 * this gateway's (the asker gives up after its wait). */
static void handover_if_unused(sbx_manager *m, const store_sandbox_owner *o) {
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = mgr_entry_find(m, o->sandbox_id);
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
        r = mgr_entry_retire(m, e);
    else
        mgr_ownership_release(m, o->sandbox_id);
    if (r == 0)
        log_info("sandbox", "sandbox %s (thread %s) let go for gateway %s", o->sandbox_id,
                 o->thread, o->release_asked_by);
    if (!e)
        return;
    pthread_mutex_lock(&m->mu);
    e->state = SBX_STATE_IDLE; /* a box whose teardown failed stays parked, and ours */
    e->refs--;
    mgr_entry_unclaim(m, e);
    mgr_entry_drop_if_unused(m, e);
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
    sbx_entry *e = mgr_entry_get(m, k->sandbox_id, row.user, row.thread);
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
        mgr_fence_add(m, SBX_WHOLE, k->sandbox_id, k->generation, "its gateway's lease expired");
        settled = mgr_box_destroy(m, k->sandbox_id, k->generation) == 0;
        if (settled)
            log_info("sandbox", "sandbox %s of dead gateway %s removed", k->sandbox_id,
                     row.gateway);
    }
    if (!mgr_has_box(e))
        mgr_ownership_release(m, k->sandbox_id);
    pthread_mutex_lock(&m->mu);
    e->refs--;
    mgr_entry_unclaim(m, e);
    mgr_entry_drop_if_unused(m, e);
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

void *mgr_heartbeat_main(void *arg) {
    sbx_manager *m = arg;
    mgr_periodic_run(m, m->cfg.heartbeat_ms, heartbeat_round);
    return NULL;
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
        r = id && fawn_id_valid(id) ? mgr_session_end(m, box, id)
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
        if (adopt && mgr_box_attested(m, &box, rec->user) < 0)
            return false; /* fenced, and destroyed when the provider could */
        if (health < 0 &&
            health != FAWN_ENOENT) /* unknown: never trusted, even if it answers later */
            mgr_fence_add(m, SBX_WHOLE, sandbox_id, generation, "health unknown at start");
    }
    if (adopt && sessions_end_all(m, &box) < 0) {
        log_warn("sandbox",
                 "sandbox %s: the sessions of a previous run could not be ended (%s); "
                 "not adopted",
                 sandbox_id, fawn_errmsg());
        adopt = false;
    }
    sbx_entry *e = adopt ? mgr_entry_get(m, sandbox_id, rec->user, rec->thread) : NULL;
    if (e) {
        e->box = box;
        e->state = SBX_STATE_IDLE;
        e->idle_since_ms = fawn_now_ms();
        log_info("sandbox", "sandbox %s (thread %s) adopted from a previous run", sandbox_id,
                 rec->thread);
    } else if (mgr_box_destroy(m, sandbox_id, generation) == 0) {
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
        mgr_fence_add(m, SBX_WHOLE, sandbox_id, generation, "its gateway's lease expired");
    if (!reconcile_owned(m, sandbox_id, generation, recorded ? &rec : NULL))
        mgr_ownership_release(m, sandbox_id);
    return 0;
}

/* Fences of generations no longer running retire once the provider
 * confirms it: absent, or running another generation. */
static void reconcile_fences(sbx_manager *m) {
    fence_key *fences = NULL;
    size_t n = 0;
    if (mgr_fences_copy(&fences, &n, m, NULL) < 0)
        return;
    for (size_t i = 0; i < n; i++) {
        const fence_key *f = &fences[i];
        sbx_entry *e = mgr_entry_find(m, f->sandbox_id);
        if (e && strcmp(e->box.generation, f->generation) == 0)
            continue; /* a scope fence of an adopted box: it stays with the box */
        enum sbx_presence state = SBX_UNKNOWN;
        char running[SBX_GENERATION_LEN + 1] = "";
        if (m->p->probe(m->p->ctx, &state, running, f->sandbox_id) < 0)
            continue;
        if (state == SBX_ABSENT || (state == SBX_RUNNING && strcmp(running, f->generation) != 0))
            mgr_fence_remove(m, f);
    }
    free(fences);
}

void mgr_reconcile(sbx_manager *m) {
    if (m->p->list(m->p->ctx, reconcile_box, m) < 0)
        log_warn("sandbox", "cannot list the %s provider's sandboxes: %s", m->p->name,
                 fawn_errmsg());
    reconcile_fences(m);
}
