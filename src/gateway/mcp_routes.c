/* MCP administration (DeerFlow's routers/mcp.py, and fawn's explicit
 * discovery): every route needs mcp:admin, which only administrators hold.
 * The configuration's secrets never leave in an answer (env and header
 * values "***", OAuth secrets null); a PUT or PATCH is saved to
 * $FAWN_HOME/mcp_servers.json and in force at once (src/mcp). */
#include <string.h>
#include <unistd.h>

#include "gateway/internal.h"
#include "mcp/mcp.h"
#include "paths/paths.h"

/* 1 MiB: a configuration of MCP_SERVERS_MAX servers with their headers. */
#define MCP_BODY_MAX ((size_t)1 << 20)

static int route_config_get(gw_request *rq) {
    json_t *cfg = NULL;
    int r = mcp_config_get(&cfg, app_mcp(rq->g->app));
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, cfg);
}

/* PUT (replace) or PATCH (one server's enabled), then the new config. */
static int config_write(gw_request *rq, bool patch) {
    json_t *body = NULL;
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = patch ? mcp_config_patch(app_mcp(rq->g->app), body)
                  : mcp_config_put(app_mcp(rq->g->app), body);
    json_decref(body);
    return r < 0 ? r : route_config_get(rq);
}

static int route_config_put(gw_request *rq) { return config_write(rq, false); }
static int route_config_patch(gw_request *rq) { return config_write(rq, true); }

static int route_cache_reset(gw_request *rq) {
    mcp_cache_reset(app_mcp(rq->g->app));
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:b, s:s}", "success", 1, "message",
                                     "MCP caches reset; pinned tools change only by discovery"));
}

/* A server that could not be reached or answered nonsense is the
 * upstream's failure: 502 (504 when it did not answer in time). A stdio
 * server is discovered in the administrator's own sandbox of the thread
 * MCP_DISCOVERY_THREAD (made on first use), as the administrator, with
 * /mnt/skills as a run of theirs would find it. */
static int route_discover(gw_request *rq) {
    json_t *out = NULL;
    char user[24];
    paths_user_dir_name(user, rq->who.user.id);
    int fd = -1;
    int r = app_thread_files_open(&fd, rq->g->app, rq->who.user.id, MCP_DISCOVERY_THREAD, true);
    if (fd >= 0)
        close(fd);
    if (r == 0 && gw_skills_view_sync(rq) < 0)
        log_warn("mcp", "discovery: /mnt/skills not brought up to date: %s", fawn_errmsg());
    sbx_decision decision = {0};
    tool_env env = {
        .sandboxes = app_sandboxes(rq->g->app),
        .req = {.who = {.user = user, .role = rq->who.user.role},
                .thread = MCP_DISCOVERY_THREAD,
                .kind = SBX_HOLD_EXECUTION,
                .decision = &decision},
        .command_timeout_s = rq->g->cfg->sandbox.exec_timeout_s,
    };
    if (r == 0)
        r = mcp_discover(&out, app_mcp(rq->g->app), rq->params[0], &env);
    tool_env_end(&env);
    if (r == FAWN_EIO || r == FAWN_EPROTO || r == FAWN_E2BIG || r == FAWN_EUNSUP ||
        r == FAWN_ECANCELED || r == FAWN_EPERM)
        return gw_respond_detail(rq, MHD_HTTP_BAD_GATEWAY, fawn_errmsg());
    if (r == FAWN_ETIMEDOUT)
        return gw_respond_detail(rq, MHD_HTTP_GATEWAY_TIMEOUT, fawn_errmsg());
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, out);
}

static int route_drift(gw_request *rq) {
    json_t *out = NULL;
    int r = mcp_drift(&out, app_mcp(rq->g->app), rq->params[0]);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, out);
}

const gw_route gw_mcp_routes[] = {
    {"GET", "/api/mcp/config", route_config_get, AUTHZ_MCP_ADMIN, GW_BODY_NONE, 0, NULL},
    {"PUT", "/api/mcp/config", route_config_put, AUTHZ_MCP_ADMIN, GW_BODY_BUFFER, MCP_BODY_MAX,
     NULL},
    {"PATCH", "/api/mcp/config", route_config_patch, AUTHZ_MCP_ADMIN, GW_BODY_BUFFER, MCP_BODY_MAX,
     NULL},
    {"POST", "/api/mcp/cache/reset", route_cache_reset, AUTHZ_MCP_ADMIN, GW_BODY_NONE, 0, NULL},
    {"POST", "/api/mcp/servers/{}/discover", route_discover, AUTHZ_MCP_ADMIN, GW_BODY_NONE, 0,
     NULL},
    {"GET", "/api/mcp/servers/{}/drift", route_drift, AUTHZ_MCP_ADMIN, GW_BODY_NONE, 0, NULL},
};
const size_t gw_mcp_routes_count = ARRAY_LEN(gw_mcp_routes);
