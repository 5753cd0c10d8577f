/* What a web client asks before it shows a page: which optional features
 * fawn has (DeerFlow's shapes), each answered as it is in this fawn. */
#include "gateway/internal.h"

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

const gw_route gw_settings_routes[] = {
    {"GET", "/api/features", route_features, GW_SIGNED_IN, GW_BODY_NONE, 0, NULL},
    {"GET", "/api/suggestions/config", route_suggestions_config, GW_SIGNED_IN, GW_BODY_NONE, 0,
     NULL},
};
const size_t gw_settings_routes_count = ARRAY_LEN(gw_settings_routes);
