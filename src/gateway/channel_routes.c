/* /api/channels: the IM channels' API (DeerFlow's routers/channels.py and
 * channel_connections.py). The rules live in src/channels; this file only
 * connects them to requests. Bindings are the caller's own (another
 * user's connection id is 404); runtime credentials need channels:admin
 * and are never answered back. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "channels/channels.h"
#include "gateway/internal.h"

static int need_channels(channels **out, gw_request *rq) {
    *out = __atomic_load_n(&rq->g->channels, __ATOMIC_ACQUIRE);
    return *out ? 0 : fawn_err(FAWN_ENOENT, "IM channels are not running");
}

static int route_status(gw_request *rq) {
    channels *c;
    json_t *out = NULL;
    int r = need_channels(&c, rq);
    if (r == 0)
        r = channels_status(&out, c);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, out);
}

/* DeerFlow's provider list: {"enabled", "providers": [{"name", "state",
 * "running"}]} of the platforms that are configured. */
static int route_providers(gw_request *rq) {
    channels *c = __atomic_load_n(&rq->g->channels, __ATOMIC_ACQUIRE);
    json_t *status = NULL, *list = json_array();
    int r = c ? channels_status(&status, c) : 0;
    const char *name;
    json_t *v;
    json_object_foreach(json_object_get(status, "channels"), name, v) {
        if (json_is_true(json_object_get(v, "configured")))
            json_array_append_new(list, json_pack("{s:s, s:O, s:O}", "name", name, "state",
                                                  json_object_get(v, "state"), "running",
                                                  json_object_get(v, "running")));
    }
    json_decref(status);
    if (r < 0) {
        json_decref(list);
        return r;
    }
    return gw_respond_json(
        rq, MHD_HTTP_OK,
        json_pack("{s:b, s:o}", "enabled", json_array_size(list) > 0, "providers", list));
}

static int route_connect(gw_request *rq) {
    channels *c;
    json_t *out = NULL;
    int r = need_channels(&c, rq);
    if (r == 0)
        r = channels_connect_code(&out, c, &rq->who.user, rq->params[0]);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, out);
}

static int route_connections(gw_request *rq) {
    channels *c = __atomic_load_n(&rq->g->channels, __ATOMIC_ACQUIRE);
    json_t *out = NULL;
    int r = c ? channels_connections(&out, c, &rq->who.user)
              : ((out = json_pack("{s:[]}", "connections")) ? 0 : FAWN_ENOMEM);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, out);
}

static int route_unbind(gw_request *rq) {
    channels *c;
    int r = need_channels(&c, rq);
    if (r == 0)
        r = channels_unbind(c, &rq->who.user, rq->params[0]);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:b}", "success", 1));
}

static int route_runtime_set(gw_request *rq) {
    channels *c;
    json_t *body = NULL, *out = NULL;
    int r = need_channels(&c, rq);
    if (r == 0)
        r = gw_body_json(&body, rq);
    const json_t *settings = json_object_get(body, "settings");
    if (r == 0)
        r = channels_runtime_config(&out, c, rq->params[0], settings ? settings : body);
    json_decref(body);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, out);
}

static int route_runtime_delete(gw_request *rq) {
    channels *c;
    json_t *out = NULL;
    int r = need_channels(&c, rq);
    if (r == 0)
        r = channels_runtime_config(&out, c, rq->params[0], NULL);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, out);
}

typedef struct header_list {
    ch_http_header items[CH_HTTP_HEADERS_MAX];
    char *names[CH_HTTP_HEADERS_MAX];
    size_t n;
} header_list;

static enum MHD_Result header_add(void *ctx, enum MHD_ValueKind kind, const char *key,
                                  const char *value) {
    header_list *h = ctx;
    (void)kind;
    if (h->n == CH_HTTP_HEADERS_MAX || !key || !value)
        return h->n == CH_HTTP_HEADERS_MAX ? MHD_NO : MHD_YES;
    char *name = strdup(key);
    if (!name)
        return MHD_NO;
    for (char *p = name; *p; p++)
        *p = (char)tolower((unsigned char)*p);
    h->names[h->n] = name;
    h->items[h->n] = (ch_http_header){name, value};
    h->n++;
    return MHD_YES;
}

static int route_events(gw_request *rq) {
    channels *c;
    int r = need_channels(&c, rq);
    if (r < 0)
        return r;
    header_list h = {0};
    MHD_get_connection_values(rq->conn, MHD_HEADER_KIND, header_add, &h);
    ch_http_request req = {.method = rq->method,
                           .headers = h.items,
                           .n_headers = h.n,
                           .body = rq->body.data ? rq->body.data : "",
                           .body_len = rq->body.len};
    ch_http_response resp;
    r = channels_http_event(&resp, c, rq->params[0], &req);
    for (size_t i = 0; i < h.n; i++)
        free(h.names[i]);
    if (r < 0)
        return r;
    struct MHD_Response *m = MHD_create_response_from_buffer(
        resp.body_len, resp.body ? resp.body : (void *)"", MHD_RESPMEM_MUST_COPY);
    if (m)
        MHD_add_response_header(m, MHD_HTTP_HEADER_CONTENT_TYPE,
                                resp.content_type ? resp.content_type : "application/json");
    free(resp.body);
    free(resp.content_type);
    if (!m)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return gw_queue(rq, resp.status ? resp.status : MHD_HTTP_OK, m);
}

#define NO_BODY GW_BODY_NONE, 0, NULL
#define JSON_BODY GW_BODY_BUFFER, GW_JSON_BODY_MAX, NULL

const gw_route gw_channel_routes[] = {
    {"GET", "/api/channels", route_status, GW_SIGNED_IN, NO_BODY},
    {"GET", "/api/channels/providers", route_providers, AUTHZ_THREADS_READ, NO_BODY},
    {"GET", "/api/channels/connections", route_connections, AUTHZ_THREADS_READ, NO_BODY},
    {"DELETE", "/api/channels/connections/{}", route_unbind, GW_SIGNED_IN, NO_BODY},
    {"POST", "/api/channels/{}/connect", route_connect, AUTHZ_RUNS_CREATE, NO_BODY},
    {"POST", "/api/channels/{}/runtime-config", route_runtime_set, AUTHZ_CHANNELS_ADMIN, JSON_BODY},
    {"DELETE", "/api/channels/{}/runtime-config", route_runtime_delete, AUTHZ_CHANNELS_ADMIN,
     NO_BODY},
    {"POST", "/api/channels/{}/events", route_events, GW_PUBLIC, GW_BODY_BUFFER, CH_HTTP_BODY_MAX,
     NULL},
};
const size_t gw_channel_routes_count = ARRAY_LEN(gw_channel_routes);
