/* What the credential broker asks of the sandbox manager
 * (manager_internal.h): which run holds a sandbox, fencing a generation
 * that failed attestation, and the provider's attestation of a caller. */
#include <stdio.h>
#include <string.h>

#include "sandbox/manager_internal.h"

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
    sbx_entry *e = mgr_entry_find(m, sandbox_id);
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
    int r = mgr_fence_add(m, SBX_WHOLE, sandbox_id, generation, reason);
    pthread_mutex_lock(&m->mu);
    sbx_entry *e = mgr_entry_find(m, sandbox_id);
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
