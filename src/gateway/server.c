/* HTTP glue: libmicrohttpd in, JSON out. Errors have DeerFlow's shape,
 * {"detail": ...}. */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <string.h>

#include "base/json.h"
#include "gateway/gateway.h"

/* Connections served at once; more wait in the kernel's accept queue. */
#define GATEWAY_MAX_CONNECTIONS 1024
/* A connection idle this long is closed. */
#define GATEWAY_CONNECTION_TIMEOUT_S 60

struct gateway {
    struct MHD_Daemon *daemon;
    const fawn_config *cfg;
    store *st;
};

/* Marks a request whose first callback has been seen. */
static int request_started;

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *body) {
    char *text = body ? fjson_dump(body) : NULL;
    json_decref(body);
    if (!text)
        return MHD_NO;
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, "Cache-Control", "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result respond_detail(struct MHD_Connection *c, unsigned status,
                                      const char *detail) {
    return respond_json(c, status, json_pack("{s:s}", "detail", detail));
}

typedef enum MHD_Result (*route_fn)(gateway *g, struct MHD_Connection *c);

static enum MHD_Result route_health(gateway *g, struct MHD_Connection *c) {
    return respond_json(c, MHD_HTTP_OK, json_pack("{s:s}", "status", "ok"));
}

static const struct {
    const char *method, *path;
    route_fn fn;
} routes[] = {
    {"GET", "/health", route_health},
};

static enum MHD_Result dispatch(gateway *g, struct MHD_Connection *c, const char *url,
                                const char *method) {
    bool known = false;
    for (size_t i = 0; i < ARRAY_LEN(routes); i++) {
        if (strcmp(url, routes[i].path) != 0)
            continue;
        if (strcmp(method, routes[i].method) == 0)
            return routes[i].fn(g, c);
        known = true;
    }
    return known ? respond_detail(c, MHD_HTTP_METHOD_NOT_ALLOWED, "Method Not Allowed")
                 : respond_detail(c, MHD_HTTP_NOT_FOUND, "Not Found");
}

/* libmicrohttpd calls this once when the head has arrived, then once per
 * body chunk, then once more: the answer goes out on the last call. Routes
 * that take no body discard one (a later route reads its own, capped). */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_data_size,
                                  void **req_cls) {
    if (!*req_cls) {
        *req_cls = &request_started;
        return MHD_YES;
    }
    if (*upload_data_size) {
        *upload_data_size = 0;
        return MHD_YES;
    }
    return dispatch(cls, c, url, method);
}

int gateway_start(gateway **out, const fawn_config *cfg, store *st) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)cfg->server.port)};
    if (inet_pton(AF_INET, cfg->server.host, &addr.sin_addr) != 1)
        return fawn_err(FAWN_EINVAL, "server.host must be an IPv4 address, got '%s'",
                        cfg->server.host);
    gateway *g = calloc(1, sizeof *g);
    if (!g)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    g->cfg = cfg;
    g->st = st;
    g->daemon = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME, 0, NULL, NULL,
        on_request, g, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&addr,
        MHD_OPTION_THREAD_POOL_SIZE, (unsigned)cfg->server.threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)GATEWAY_MAX_CONNECTIONS,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)GATEWAY_CONNECTION_TIMEOUT_S, MHD_OPTION_END);
    if (!g->daemon) {
        free(g);
        return fawn_err(FAWN_EIO, "cannot listen on %s:%u", cfg->server.host, cfg->server.port);
    }
    *out = g;
    return 0;
}

void gateway_stop(gateway *g) {
    if (!g)
        return;
    MHD_quiesce_daemon(g->daemon); /* no new connections; requests in progress go on */
    MHD_stop_daemon(g->daemon);
    free(g);
}
