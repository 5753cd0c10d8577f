/* What a web client asks before it shows a page: which optional features
 * fawn has, and the settings pages' read routes (DeerFlow's shapes), each
 * answered as it is in this fawn. The memory routes are memory_routes.c's. */
#include "gateway/internal.h"
#include "skills/skills.h"

/* Why the Lark integration answers "not installed". */
#define LARK_ABSENT "fawn has no Lark CLI integration"

/* Optional features of DeerFlow's UI: custom agents, live browser control
 * and durable MCP tasks. fawn has none of them. */
static int route_features(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:{s:b}, s:{s:b}, s:{s:b}}", "agents_api", "enabled", 0,
                                     "browser_control", "enabled", 0, "mcp_tasks", "enabled", 0));
}

/* Follow-up suggestions after an answer: fawn makes none. */
static int route_suggestions_config(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:b, s:i}", "enabled", 0, "max_suggestions", 0));
}

/* MCP servers the agent may use: fawn connects to none. */
static int route_mcp_config(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:{}}", "mcp_servers"));
}

/* The skills in the skills directory that the caller's role may use
 * (authorization skills rules). They are files in every sandbox's
 * /mnt/skills, read-only: the agent is not given them (enabled false), and
 * no one edits them here (editable false). */
static int route_skills(gw_request *rq) {
    json_t *found = NULL;
    int r = skills_list(&found, rq->g->cfg->sandbox.skills_dir);
    if (r < 0)
        return r;
    json_t *list = json_array();
    size_t i;
    json_t *skill;
    json_array_foreach(found, i, skill) {
        const char *name = json_string_value(json_object_get(skill, "name"));
        if (!list || authz_check(app_policy(rq->g->app), rq->who.user.role, AUTHZ_SKILLS, name) < 0)
            continue;
        json_object_set_new(skill, "enabled", json_false());
        json_object_set_new(skill, "editable", json_false());
        json_array_append(list, skill);
    }
    json_decref(found);
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:o?}", "skills", list));
}

/* IM channels a user can bind: fawn has none, so there are no providers
 * and no connections. */
static int route_channel_providers(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:b, s:[]}", "enabled", 0, "providers"));
}

static int route_channel_connections(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:[]}", "connections"));
}

/* The Lark/Feishu CLI integration: not installed, not configured. */
static int route_lark_status(gw_request *rq) {
    return gw_respond_json(
        rq, MHD_HTTP_OK,
        json_pack("{s:b, s:s, s:n, s:n, s:b, s:b, s:n, s:n, s:i, s:i, s:[], s:[], s:s,"
                  " s:{s:b, s:n, s:n, s:s}, s:{s:s, s:s, s:n, s:b}, s:s, s:b, s:s}",
                  "installed", 0, "version", "", "manifest_version", "latest_available_version",
                  "runtime_version_mismatch", 0, "app_configured", 0, "app_id", "app_brand",
                  "skills_expected", 0, "skills_installed", 0, "installed_skills", "enabled_skills",
                  "install_path", "", "cli", "available", 0, "path", "version", "error",
                  LARK_ABSENT, "auth", "status", "not_configured", "message", LARK_ABSENT, "user",
                  "verified", 0, "sandbox_runtime_mode", "none", "sandbox_runtime_ready", 0,
                  "sandbox_runtime_detail", LARK_ABSENT));
}

#define READ_ROUTE(path, fn)                                                                       \
    { "GET", path, fn, GW_SIGNED_IN, GW_BODY_NONE, 0, NULL }

const gw_route gw_settings_routes[] = {
    READ_ROUTE("/api/features", route_features),
    READ_ROUTE("/api/suggestions/config", route_suggestions_config),
    READ_ROUTE("/api/mcp/config", route_mcp_config),
    READ_ROUTE("/api/skills", route_skills),
    READ_ROUTE("/api/channels/providers", route_channel_providers),
    READ_ROUTE("/api/channels/connections", route_channel_connections),
    READ_ROUTE("/api/integrations/lark/status", route_lark_status),
};
const size_t gw_settings_routes_count = ARRAY_LEN(gw_settings_routes);
