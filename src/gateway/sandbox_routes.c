/* /api/sandboxes: what the sandbox manager holds, for those who may read
 * every user's sandboxes (AUTHZ_SANDBOXES_READ: admins). */
#include <string.h>

#include "gateway/internal.h"

static json_t *info_json(const sbx_info *s) {
    json_t *holders = json_object();
    for (int k = 0; holders && k < SBX_HOLD_KINDS; k++)
        json_object_set_new(holders, sbx_holder_name(k), json_integer(s->holders[k]));
    return json_pack("{s:s,s:s,s:s,s:s,s:s,s:o?,s:I,s:b,s:b,s:I,s:I}", "sandbox_id", s->sandbox_id,
                     "user_id", s->user, "thread_id", s->thread, "generation", s->generation,
                     "state", sbx_state_name(s->state), "holders", holders, "idle_ms",
                     (json_int_t)s->idle_ms, "fenced", s->fenced, "destroy_deferred",
                     s->destroy_deferred, "teardown_failures", (json_int_t)s->teardown_failures,
                     "teardown_backoff_ms", (json_int_t)s->teardown_backoff_ms);
}

static int route_sandboxes(gw_request *rq) {
    sbx_info *list = NULL;
    size_t n = 0;
    int r = sbx_list(&list, &n, app_sandboxes(rq->g->app));
    if (r < 0)
        return r;
    json_t *items = json_array();
    for (size_t i = 0; items && i < n; i++)
        json_array_append_new(items, info_json(&list[i]));
    free(list);
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:o?}", "sandboxes", items));
}

const gw_route gw_sandbox_routes[] = {
    {"GET", "/api/sandboxes", route_sandboxes, AUTHZ_SANDBOXES_READ, GW_BODY_NONE, 0, NULL},
};
const size_t gw_sandbox_routes_count = ARRAY_LEN(gw_sandbox_routes);
