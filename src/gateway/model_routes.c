/* /api/models: the configured models a caller's role may use. */
#include <string.h>

#include "model/model.h"
#include "gateway/internal.h"

static json_t *model_json(const model_entry *e) {
    return json_pack("{s:s,s:s,s:s,s:b,s:b}", "name", e->name, "display_name", e->display_name,
                     "model", e->cfg.model, "supports_thinking", e->supports_thinking,
                     "supports_vision", e->supports_vision);
}

static bool model_allowed(const gw_request *rq, const model_entry *e) {
    return authz_check(app_policy(rq->g->app), rq->who.user.role, AUTHZ_MODELS, e->name) == 0;
}

/* token_usage.enabled: every answer of a model that reports its usage
 * carries it (usage_metadata of the AI message), always. */
static int route_models(gw_request *rq) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < model_registry_count(app_models(rq->g->app)); i++) {
        const model_entry *e = model_registry_at(app_models(rq->g->app), i);
        if (model_allowed(rq, e))
            json_array_append_new(list, model_json(e));
    }
    return gw_respond_json(
        rq, MHD_HTTP_OK, json_pack("{s:o?, s:{s:b}}", "models", list, "token_usage", "enabled", 1));
}

static int route_model(gw_request *rq) {
    const model_entry *e = model_registry_get(app_models(rq->g->app), rq->params[0]);
    if (!e)
        return fawn_err(FAWN_ENOENT, "Model not found");
    if (!model_allowed(rq, e))
        return gw_respond_detail(rq, MHD_HTTP_FORBIDDEN, fawn_errmsg());
    return gw_respond_json(rq, MHD_HTTP_OK, model_json(e));
}

const gw_route gw_model_routes[] = {
    {"GET", "/api/models", route_models, GW_SIGNED_IN, GW_BODY_NONE, 0, NULL},
    {"GET", "/api/models/{}", route_model, GW_SIGNED_IN, GW_BODY_NONE, 0, NULL},
};
const size_t gw_model_routes_count = ARRAY_LEN(gw_model_routes);
