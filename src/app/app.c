/* The application core: the services, built once in dependency order, and
 * the one way a run is started on behalf of a user. */
#include "app/app.h"
#include "app/app_internal.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "base/base.h"
#include "paths/paths.h"
#include "sandbox/quota.h"
#include "broker/broker.h"

/* Health checks and session requests the sandbox manager sends a box. */
#define APP_SANDBOX_CALL_TIMEOUT_MS 5000

/* Says once how the threads' disk limit is held on this host
 * (sandbox/quota.h). */
static void disk_quota_log(const fawn_config *cfg) {
    quota_fs fs;
    quota_probe_path(&fs, cfg->home);
    unsigned long long mb = (unsigned long long)cfg->sandbox.limits.disk_mb;
    if (fs.mechanism == QUOTA_MEASURED)
        log_warn("app",
                 "disk quota: measured, not held by the kernel (%s); uploads that would take a "
                 "thread past sandbox.limits.disk_mb (%llu MiB) are refused and a command that "
                 "went past it is told so, but a command can write past it while it runs",
                 fs.detail, mb);
    else
        log_info("app", "disk quota: %s, %llu MiB per thread (%s)",
                 quota_mechanism_name(fs.mechanism), mb, fs.detail);
}

/* The sandbox manager over the configured provider, owning sandboxes as
 * this gateway; it adopts or removes the sandboxes a previous process left
 * running (not another live gateway's). */
static int sandboxes_start(app *a) {
    const fawn_sandbox_config *sc = &a->cfg->sandbox;
    sbx_manager_config mc = {.idle_timeout_s = sc->idle_timeout_s,
                             .replicas = sc->replicas,
                             .call_timeout_ms = APP_SANDBOX_CALL_TIMEOUT_MS,
                             .gateway_id = a->gateway_id,
                             .heartbeat_ms = a->cfg->cluster.heartbeat_ms,
                             .lease_ms = a->cfg->cluster.lease_ms};
    int r = sbx_provider_open(&a->provider, a->cfg, NULL);
    if (r == 0)
        r = sbx_manager_new(&a->sandboxes, &mc, a->provider, a->st, a->policy);
    return r < 0 ? r : broker_new(&a->broker, a->cfg, a->sandboxes);
}

/* The run executor, sized by the configuration's runs section. */
static int executor_start(app *a) {
    const fawn_runs_config *rc = &a->cfg->runs;
    runs_limits limits = {.workers = rc->workers,
                          .queue_max = rc->queue_max,
                          .per_user_active_max = rc->per_user_active_max,
                          .per_user_running_max = rc->per_user_running_max,
                          .command_timeout_s = a->cfg->sandbox.exec_timeout_s,
                          .memory = &a->cfg->memory,
                          .compaction = &a->cfg->compaction,
                          .skills_dir = a->cfg->sandbox.skills_dir,
                          .home = a->cfg->home,
                          .subagents = a->subagents,
                          .web = a->web,
                          .mcp = a->mcp,
                          .gateway_id = a->gateway_id,
                          .heartbeat_ms = a->cfg->cluster.heartbeat_ms,
                          .lease_ms = a->cfg->cluster.lease_ms};
    return runs_new(&a->runs, a->st, a->sandboxes, a->models, a->policy, &limits);
}

/* cluster.gateway_id, or "<hostname>:<port>": stable across restarts, and
 * distinct for two gateways of one host (they listen on different ports).
 * A hostname outside the id's alphabet is cut where it leaves it. */
static void gateway_id_resolve(app *a) {
    const fawn_config *cfg = a->cfg;
    if (cfg->cluster.gateway_id) {
        snprintf(a->gateway_id, sizeof a->gateway_id, "%s", cfg->cluster.gateway_id);
        return;
    }
    char host[CONFIG_GATEWAY_ID_MAX + 1] = "";
    if (gethostname(host, sizeof host) < 0)
        host[0] = '\0';
    host[sizeof host - 1] = '\0';
    size_t n = strspn(host, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_");
    host[n > 48 ? 48 : n] = '\0';
    snprintf(a->gateway_id, sizeof a->gateway_id, "%s:%" PRIu32, host[0] ? host : "gateway",
             cfg->server.port);
}

int app_open(app **out, const fawn_config *cfg, store *st) {
    *out = NULL;
    app *a = calloc(1, sizeof *a);
    if (!a)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    a->cfg = cfg;
    a->st = st;
    gateway_id_resolve(a);
    int r = authz_policy_load(&a->policy, cfg->authorization);
    if (r == 0)
        r = model_registry_load(&a->models, cfg->models);
    if (r == 0)
        r = agent_subagents_new(&a->subagents, &cfg->subagents, a->models);
    if (r == 0)
        r = web_service_open(&a->web, &cfg->web);
    if (r == 0)
        r = mcp_service_open(&a->mcp, cfg->mcp, st, cfg->home);
    if (r == 0) {
        disk_quota_log(cfg);
        r = sandboxes_start(a);
    }
    if (r == 0)
        r = executor_start(a);
    if (r == 0 && cfg->schedules.enabled)
        r = app_scheduler_start(&a->scheduler, a);
    if (r < 0) {
        app_close(a);
        return r;
    }
    *out = a;
    return 0;
}

void app_stop(app *a) {
    if (!a)
        return;
    app_scheduler_stop(a->scheduler); /* no run starts after this */
    runs_stop(a->runs);
}

void app_close(app *a) {
    if (!a)
        return;
    app_scheduler_free(a->scheduler);
    runs_free(a->runs);
    broker_free(a->broker);
    sbx_manager_free(a->sandboxes);
    sbx_provider_close(a->provider);
    agent_subagents_free(a->subagents);
    web_service_free(a->web);
    mcp_service_free(a->mcp);
    model_registry_free(a->models);
    authz_policy_free(a->policy);
    free(a);
}

const fawn_config *app_config(const app *a) { return a->cfg; }
store *app_store(const app *a) { return a->st; }
const authz_policy *app_policy(const app *a) { return a->policy; }
const model_registry *app_models(const app *a) { return a->models; }
sbx_manager *app_sandboxes(const app *a) { return a->sandboxes; }
const sbx_provider *app_provider(const app *a) { return a->provider; }
run_manager *app_runs(const app *a) { return a->runs; }
mcp_service *app_mcp(const app *a) { return a->mcp; }
const char *app_gateway_id(const app *a) { return a->gateway_id; }

/* The model the run will use must be one the role may use. */
static int model_allowed(const app *a, const char *role, const char *name) {
    const model_entry *e = model_registry_resolve(a->models, name);
    if (!e)
        return fawn_err(FAWN_ENOENT, "no model is configured");
    return authz_check(a->policy, role, AUTHZ_MODELS, e->name);
}

int app_thread_files_open(int *fd_out, const app *a, int64_t user_id, const char *thread_id,
                          bool create) {
    char owner[24];
    paths_user_dir_name(owner, user_id);
    return sbx_user_data_open(fd_out, a->cfg, owner, thread_id, create);
}

int app_run_start(char run_id[37], app *a, const store_user *user, const app_run_spec *spec) {
    run_id[0] = '\0';
    int r = model_allowed(a, user->role, spec->model_name);
    int fd = -1;
    if (r == 0) /* the thread's directories exist before its sandbox mounts them */
        r = app_thread_files_open(&fd, a, user->id, spec->thread_id, true);
    if (fd >= 0)
        close(fd);
    if (r < 0)
        return r;
    char owner[24];
    paths_user_dir_name(owner, user->id);
    run_request req = {.owner_id = user->id,
                       .user_dir = owner,
                       .role = user->role,
                       .thread_id = spec->thread_id,
                       .model_name = spec->model_name,
                       .recursion_limit = spec->recursion_limit,
                       .input = spec->input,
                       .title = spec->title,
                       .checkpoint_id = spec->checkpoint_id,
                       .kwargs = spec->kwargs,
                       .metadata = spec->metadata,
                       .interrupt = spec->interrupt,
                       .no_clarification = spec->no_clarification};
    return runs_start(run_id, a->runs, &req);
}
