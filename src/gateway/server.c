/* The gateway's HTTP server: libmicrohttpd (epoll, a pool of threads) in,
 * the route table out. A connection is first admitted and its request head
 * timed (connections.c). Every request then goes through the same steps, in
 * this order: resolve the /api/langgraph alias, match the route,
 * authenticate (unless public), check the route permissions, check CSRF,
 * then read the body (buffered up to the route's cap, or streamed to the
 * route) and run the handler. */
#include <arpa/inet.h>
#include <dirent.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sodium.h>
#include <sys/resource.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/fsx.h"
#include "base/json.h"
#include "gateway/internal.h"
#include "gateway/uploads.h"

/* A connection idle this long is closed (a request head is due sooner:
 * server.request_head_timeout_s, see connections.c). */
#define GATEWAY_CONNECTION_TIMEOUT_S 60
/* Descriptors the gateway needs besides its connections: the store, the
 * sandboxes' sockets, files being served or uploaded. */
#define GATEWAY_FILES_RESERVE 1024
/* After a request was refused while its body was still to come, this much
 * of it is read and dropped so that the client sees the answer; past it,
 * the answer goes out and the connection is closed. */
#define GATEWAY_DRAIN_MAX ((uint64_t)16 << 20)
/* Routes that take no body still read (and drop) one up to this size. */
#define GATEWAY_IGNORED_BODY_MAX ((size_t)4 << 10)
/* How long a stop waits for requests in progress, and how often it looks. */
#define GATEWAY_STOP_GRACE_MS 30000
#define GATEWAY_STOP_POLL_US 10000
/* The user every request acts as when auth.disabled is set. */
#define GATEWAY_LOCAL_ADMIN "local-admin"
/* Where LangGraph SDK clients configured as DeerFlow's web UI is reach the
 * API: every path under it is the same path under /api. */
#define GATEWAY_LANGGRAPH_PREFIX "/api/langgraph"

static int route_health(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:s,s:s}", "status", "healthy", "service", "fawn"));
}

static const gw_route server_routes[] = {
    {"GET", "/health", route_health, GW_PUBLIC, GW_BODY_NONE, 0, NULL},
};

static const struct {
    const gw_route *table;
    const size_t *count;
} route_families[] = {
    {server_routes, &(const size_t){ARRAY_LEN(server_routes)}},
    {gw_auth_routes, &gw_auth_routes_count},
    {gw_thread_routes, &gw_thread_routes_count},
    {gw_file_routes, &gw_file_routes_count},
    {gw_sandbox_routes, &gw_sandbox_routes_count},
    {gw_model_routes, &gw_model_routes_count},
    {gw_run_routes, &gw_run_routes_count},
    {gw_state_routes, &gw_state_routes_count},
    {gw_web_routes, &gw_web_routes_count},
    {gw_message_routes, &gw_message_routes_count},
    {gw_settings_routes, &gw_settings_routes_count},
    {gw_mcp_routes, &gw_mcp_routes_count},
    {gw_replay_routes, &gw_replay_routes_count},
    {gw_memory_routes, &gw_memory_routes_count},
    {gw_schedule_routes, &gw_schedule_routes_count},
    {gw_channel_routes, &gw_channel_routes_count},
};

/* ---- routing ---- */

static void params_free(char *params[GW_PARAMS_MAX]) {
    for (size_t i = 0; i < GW_PARAMS_MAX; i++) {
        free(params[i]);
        params[i] = NULL;
    }
}

static bool capture(char *params[GW_PARAMS_MAX], size_t *n, const char *from, size_t len) {
    if (len == 0 || *n == GW_PARAMS_MAX)
        return false;
    params[*n] = strndup(from, len);
    return params[(*n)++] != NULL;
}

/* Matches url against pattern segment by segment, capturing "{}" (one
 * segment) and "{*}" (the rest). One trailing '/' on url is tolerated. */
static bool pattern_match(char *params[GW_PARAMS_MAX], const char *pattern, const char *url) {
    size_t n = 0, url_len = strlen(url);
    if (url_len > 1 && url[url_len - 1] == '/')
        url_len--;
    const char *u = url, *end = url + url_len, *p = pattern;
    while (*p && u <= end) {
        if (strcmp(p, "{*}") == 0)
            return capture(params, &n, u, (size_t)(end - u));
        if (strncmp(p, "{}", 2) == 0) {
            const char *seg_end = memchr(u, '/', (size_t)(end - u));
            seg_end = seg_end ? seg_end : end;
            if (!capture(params, &n, u, (size_t)(seg_end - u)))
                return false;
            u = seg_end;
            p += 2;
            continue;
        }
        if (u == end || *u != *p)
            return false;
        u++;
        p++;
    }
    return !*p && u == end;
}

/* The route for method and url; *path_known tells whether any route has
 * this path (405 rather than 404). Captures go into rq->params. */
static const gw_route *route_find(gw_request *rq, const char *url, bool *path_known) {
    *path_known = false;
    for (size_t f = 0; f < ARRAY_LEN(route_families); f++) {
        for (size_t i = 0; i < *route_families[f].count; i++) {
            const gw_route *route = &route_families[f].table[i];
            params_free(rq->params);
            if (!pattern_match(rq->params, route->pattern, url))
                continue;
            if (strcmp(route->method, rq->method) == 0)
                return route;
            *path_known = true;
        }
    }
    params_free(rq->params);
    return NULL;
}

/* The path to route for url: /api/langgraph[/...] is /api[/...], one
 * level deep (never twice), so that a client need not be behind a
 * rewriting proxy; everything else is itself. Into *copy (the caller
 * frees) when it differs; FAWN_ENOMEM. */
static int url_unalias(const char **out, char **copy, const char *url) {
    *out = url;
    *copy = NULL;
    size_t n = strlen(GATEWAY_LANGGRAPH_PREFIX);
    if (strncmp(url, GATEWAY_LANGGRAPH_PREFIX, n) != 0 || (url[n] != '/' && url[n] != '\0'))
        return 0;
    if (asprintf(copy, "/api%s", url + n) < 0) {
        *copy = NULL;
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    *out = *copy;
    return 0;
}

/* ---- request steps ---- */

/* Answers a failed step or handler: its status and message, except that
 * server errors show no internals (they are logged). The last answer a
 * request can get: when even it cannot be queued, that is logged too (the
 * server then closes the connection). */
static void respond_error(gw_request *rq, int code, const char *message) {
    if (rq->responded)
        return;
    unsigned status = gw_status_for(code);
    const char *pattern = rq->route ? rq->route->pattern : "?";
    if (status >= 500) {
        log_error("gateway", "%s %s: %s", rq->method, pattern, message);
        message = "Internal server error";
    }
    if (gw_respond_detail(rq, status, message) < 0)
        log_warn("gateway", "%s %s: the %u answer could not be queued: %s", rq->method, pattern,
                 status, fawn_errmsg());
}

static int check_permissions(gw_request *rq) {
    unsigned need = rq->route->access, missing = need & ~rq->who.permissions;
    if (need == GW_PUBLIC || missing == 0)
        return 0;
    char detail[64];
    snprintf(detail, sizeof detail, "Permission denied: %s",
             authz_permission_name(missing & -missing));
    int r = gw_respond_detail(rq, MHD_HTTP_FORBIDDEN, detail);
    return r < 0 ? r : FAWN_EPERM;
}

static int body_prepare(gw_request *rq) {
    const gw_route *route = rq->route;
    if (route->body == GW_BODY_STREAM)
        return route->stream->open(rq);
    const char *length = gw_header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
    size_t max = route->body == GW_BODY_BUFFER ? route->body_max : GATEWAY_IGNORED_BODY_MAX;
    if (length && strtoull(length, NULL, 10) > max)
        return fawn_err(FAWN_E2BIG, "Request body too large: at most %zu bytes", max);
    rq->body.limit = max;
    return 0;
}

/* Whether the client waits for "100 Continue" before it sends its body. */
static bool expects_continue(const gw_request *rq) {
    const char *expect = gw_header(rq, MHD_HTTP_HEADER_EXPECT);
    return expect && strcasecmp(expect, "100-continue") == 0;
}

/* Runs every step that needs only the head, on the path url_unalias
 * gives: an alias is routed, authenticated, authorized and checked for
 * CSRF exactly as its /api path. A refusal is answered here. */
static void request_begin(gw_request *rq, const char *raw_url) {
    const char *url;
    _cleanup_free_ char *copy = NULL;
    if (url_unalias(&url, &copy, raw_url) < 0) {
        respond_error(rq, FAWN_ENOMEM, fawn_errmsg());
        return;
    }
    bool path_known = false;
    rq->route = route_find(rq, url, &path_known);
    bool public = rq->route && rq->route->access == GW_PUBLIC;
    bool api = strncmp(url, "/api/", 5) == 0;
    int r = 0;
    if (!public && (rq->route || api))
        r = gw_authenticate(rq); /* an unknown /api path is 401 before it is 404 */
    if (r == 0 && !rq->route) {
        r = gw_respond_detail(rq, path_known ? MHD_HTTP_METHOD_NOT_ALLOWED : MHD_HTTP_NOT_FOUND,
                              path_known ? "Method Not Allowed" : "Not Found");
        if (r < 0)
            respond_error(rq, r, fawn_errmsg());
        return;
    }
    if (r == 0 && !public)
        r = check_permissions(rq);
    if (r == 0 && !public)
        r = gw_check_csrf(rq);
    if (r == 0)
        r = body_prepare(rq);
    if (r == FAWN_E2BIG && expects_continue(rq)) /* answered before it sends the body */
        rq->deferring = false;
    if (r < 0)
        respond_error(rq, r, fawn_errmsg());
}

static int body_take(gw_request *rq, const char *data, size_t size) {
    switch (rq->route->body) {
    case GW_BODY_STREAM: return rq->route->stream->feed(rq, data, size);
    case GW_BODY_BUFFER:
        if (fbuf_append(&rq->body, data, size) == 0)
            return 0;
        return fawn_err(FAWN_E2BIG, "Request body too large: at most %zu bytes",
                        rq->route->body_max);
    default: /* read and dropped: some clients send "{}" with any request */
        rq->drained += size;
        return rq->drained <= GATEWAY_IGNORED_BODY_MAX
                   ? 0
                   : fawn_err(FAWN_E2BIG, "Request body too large: this route takes none");
    }
}

/* Sends the answer that waited for the body. */
static void pending_flush(gw_request *rq) {
    if (MHD_queue_response(rq->conn, rq->pending_status, rq->pending) != MHD_YES)
        log_warn("gateway", "an answer could not be queued");
    MHD_destroy_response(steal_ptr(rq->pending));
}

/* Drops body bytes that arrive after the answer was decided; past
 * GATEWAY_DRAIN_MAX the answer goes out at once (and the connection is
 * closed after it). */
static void body_drain(gw_request *rq, size_t size) {
    rq->drained += size;
    if (rq->drained > GATEWAY_DRAIN_MAX)
        pending_flush(rq);
}

/* Takes one chunk of the body. An error answers at the end of the body. */
static void request_body(gw_request *rq, const char *data, size_t size) {
    if (rq->pending) {
        body_drain(rq, size);
        return;
    }
    if (rq->responded)
        return;
    int r = body_take(rq, data, size);
    if (r < 0) {
        rq->deferring = true;
        respond_error(rq, r, fawn_errmsg());
        rq->deferring = false;
    }
}

static void request_end(gw_request *rq) {
    if (rq->pending) {
        pending_flush(rq);
        return;
    }
    if (rq->responded)
        return;
    int r = rq->route->handle(rq);
    if (r < 0)
        respond_error(rq, r, fawn_errmsg());
}

/* Whether a refusal decided from the head should wait for the body: when
 * one is coming and is small enough to read. A larger one is refused at
 * once, so that a client waiting for "100 Continue" never sends it. */
static bool head_answer_waits(const gw_request *rq) {
    const char *length = gw_header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length)
        return strtoull(length, NULL, 10) - 1 < GATEWAY_DRAIN_MAX;
    return gw_header(rq, MHD_HTTP_HEADER_TRANSFER_ENCODING) != NULL;
}

/* libmicrohttpd calls this once when the head has arrived, then once per
 * body chunk, then once more at the end. */
static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_data_size, void **req_cls) {
    gw_request *rq = *req_cls;
    if (!rq) {
        rq = calloc(1, sizeof *rq);
        if (!rq)
            return MHD_NO;
        *rq = (gw_request){.g = cls, .conn = c, .method = method};
        *req_cls = rq;
        atomic_fetch_add(&rq->g->in_flight, 1);
        gw_conns_head_arrived(rq->g->conns, c);
        rq->deferring = head_answer_waits(rq);
        request_begin(rq, url);
        rq->deferring = false;
        return MHD_YES;
    }
    if (*upload_data_size) {
        request_body(rq, upload_data, *upload_data_size);
        *upload_data_size = 0;
        return MHD_YES;
    }
    request_end(rq);
    return MHD_YES;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **req_cls,
                         enum MHD_RequestTerminationCode toe) {
    gateway *g = cls;
    gw_conns_head_awaited(g->conns, c);
    gw_request *rq = *req_cls;
    if (!rq)
        return;
    if (rq->route && rq->route->body == GW_BODY_STREAM)
        rq->route->stream->close(rq);
    if (rq->pending)
        MHD_destroy_response(rq->pending);
    params_free(rq->params);
    fbuf_free(&rq->body);
    atomic_fetch_sub(&rq->g->in_flight, 1);
    free(rq);
    *req_cls = NULL;
}

/* Leaves the URL exactly as sent: each route decodes its captures once. */
static size_t url_keep_raw(void *cls, struct MHD_Connection *c, char *s) { return strlen(s); }

/* ---- start and stop ---- */

/* Removes what a crash can leave under one user's threads directory:
 * threads whose deletion was cut short, and upload staging files. */
static void sweep_user_threads(int threads_fd) {
    DIR *d = fdopendir(threads_fd);
    if (!d) {
        close(threads_fd);
        return;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, GW_DELETED_PREFIX, strlen(GW_DELETED_PREFIX)) == 0) {
            if (fsx_remove_tree(dirfd(d), e->d_name) < 0)
                log_warn("gateway", "cannot finish deleting a thread: %s", fawn_errmsg());
            continue;
        }
        if (!fawn_id_valid(e->d_name))
            continue;
        char rel[NAME_MAX + sizeof "/user-data/uploads"];
        snprintf(rel, sizeof rel, "%s/user-data/uploads", e->d_name);
        _cleanup_close_ int uploads = fsx_open_beneath(dirfd(d), rel, O_RDONLY | O_DIRECTORY, 0,
                                                       FSX_NO_SYMLINKS);
        size_t removed = 0;
        if (uploads >= 0 && uploads_sweep_staging(uploads, &removed) == 0 && removed)
            log_info("gateway", "removed %zu unfinished upload(s) of thread %s", removed,
                     e->d_name);
    }
    closedir(d);
}

static void sweep_crash_leftovers(const fawn_config *cfg) {
    char path[4096];
    snprintf(path, sizeof path, "%s/users", cfg->home);
    DIR *users = opendir(path);
    if (!users)
        return;
    struct dirent *e;
    while ((e = readdir(users))) {
        if (!fawn_id_valid(e->d_name))
            continue;
        char rel[NAME_MAX + sizeof "/threads"];
        snprintf(rel, sizeof rel, "%s/threads", e->d_name);
        int threads = fsx_open_beneath(dirfd(users), rel, O_RDONLY | O_DIRECTORY, 0,
                                       FSX_NO_SYMLINKS);
        if (threads >= 0)
            sweep_user_threads(threads);
    }
    closedir(users);
}

/* auth.disabled: everyone acts as one admin, created on first use with a
 * password hash no password matches. */
static int local_admin_ensure(gateway *g) {
    if (getenv("FAWN_ENV") && strcmp(getenv("FAWN_ENV"), "production") == 0)
        return fawn_err(FAWN_ECONFIG, "auth.disabled is refused when FAWN_ENV=production");
    store_user u;
    int r = store_user_get_by_name(g->st, &u, GATEWAY_LOCAL_ADMIN);
    if (r == FAWN_ENOENT)
        r = store_user_create(g->st, &u, GATEWAY_LOCAL_ADMIN, "!no-password", AUTHZ_ADMIN_ROLE);
    if (r < 0)
        return r;
    if (strcmp(u.role, AUTHZ_ADMIN_ROLE) != 0)
        return fawn_err(FAWN_ECONFIG, "user %s exists and is not an admin", GATEWAY_LOCAL_ADMIN);
    g->local_admin_id = u.id;
    log_warn("gateway", "auth.disabled: every request acts as the admin %s, without signing in",
             GATEWAY_LOCAL_ADMIN);
    return 0;
}

/* What the HTTP front-end adds to the app before the first request. */
static int gateway_prepare(gateway *g) {
    int r = gw_trusted_proxies_load(g, g->cfg->server.trusted_proxies);
    if (r == 0)
        r = auth_secret_load(g->secret, g->cfg->home);
    if (r == 0) /* unknown users are checked against this, for equal timing */
        r = auth_password_hash(g->dummy_hash, "fawn-no-such-user");
    if (r == 0)
        r = auth_cache_new(&g->auth_cache, g->st);
    if (r == 0)
        r = gw_conns_new(&g->conns, g);
    if (r == 0 && g->cfg->auth.disabled)
        r = local_admin_ensure(g);
    if (r == 0)
        sweep_crash_leftovers(g->cfg);
    return r;
}

static void gateway_free(gateway *g) {
    gw_conns_free(g->conns);
    auth_cache_free(g->auth_cache);
    sodium_memzero(g->secret, sizeof g->secret);
    pthread_mutex_destroy(&g->setup_lock);
    free(g);
}

/* Raises the soft limit on open files so that server.max_connections can
 * all be open besides GATEWAY_FILES_RESERVE others, as far as the hard
 * limit allows; says so when it does not. */
static void files_limit_raise(const fawn_server_config *s) {
    struct rlimit rl;
    rlim_t want = (rlim_t)s->max_connections + GATEWAY_FILES_RESERVE;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
        return;
    rl.rlim_cur = rl.rlim_max != RLIM_INFINITY && rl.rlim_max < want ? rl.rlim_max : want;
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur < want)
        log_warn("gateway",
                 "open files are limited to %llu: server.max_connections %u needs %llu; "
                 "raise the limit (ulimit -n, LimitNOFILE=) or lower server.max_connections",
                 (unsigned long long)rl.rlim_cur, s->max_connections, (unsigned long long)want);
}

/* The process's setsockopt, in place of the C library's (libmicrohttpd's
 * calls reach it too): TCP_CORK is answered as done and never reaches the
 * kernel; every other option is set as asked.
 *
 * libmicrohttpd corks a connection around each file it sends with
 * sendfile (128 KiB per call) and pushes the end out by setting
 * TCP_NODELAY. On Linux, over loopback (a reverse proxy on the same host,
 * bench/gateway), that corked send costs about a quarter of the requests/s
 * of a 1 MiB artifact: 0.74x nginx's with it, 1.02x without. Uncorked,
 * the connection keeps TCP_NODELAY, so each sendfile goes out at once in
 * full segments, and the headers, sent on their own either way, are not
 * delayed. Nothing in fawn corks a socket. */
int setsockopt(int fd, int level, int name, const void *value, socklen_t len) {
    if (level == IPPROTO_TCP && name == TCP_CORK)
        return 0;
    return (int)syscall(SYS_setsockopt, fd, level, name, value, len);
}

static struct MHD_Daemon *daemon_start(gateway *g, const struct sockaddr_in *addr) {
    const fawn_server_config *s = &g->cfg->server;
    files_limit_raise(s);
    return MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL | MHD_USE_ITC | MHD_ALLOW_SUSPEND_RESUME, 0,
        gw_conns_admit, g->conns, on_request, g, MHD_OPTION_SOCK_ADDR,
        (const struct sockaddr *)addr, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->threads,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)s->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
        (unsigned)GATEWAY_CONNECTION_TIMEOUT_S, MHD_OPTION_NOTIFY_CONNECTION, gw_conns_notify,
        g->conns, MHD_OPTION_NOTIFY_COMPLETED, on_completed, g, MHD_OPTION_UNESCAPE_CALLBACK,
        url_keep_raw, g, MHD_OPTION_END);
}

int gateway_start(gateway **out, app *a) {
    *out = NULL;
    const fawn_config *cfg = app_config(a);
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)cfg->server.port)};
    if (inet_pton(AF_INET, cfg->server.host, &addr.sin_addr) != 1)
        return fawn_err(FAWN_EINVAL, "server.host must be an IPv4 address, got '%s'",
                        cfg->server.host);
    gateway *g = calloc(1, sizeof *g);
    if (!g)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    g->app = a;
    g->cfg = cfg;
    g->st = app_store(a);
    pthread_mutex_init(&g->setup_lock, NULL);
    int r = gateway_prepare(g);
    if (r == 0 && !(g->daemon = daemon_start(g, &addr)))
        r = fawn_err(FAWN_EIO, "cannot listen on %s:%u", cfg->server.host, cfg->server.port);
    if (r < 0) {
        gateway_free(g);
        return r;
    }
    *out = g;
    return 0;
}

void gateway_set_channels(gateway *g, struct channels *ch) {
    __atomic_store_n(&g->channels, ch, __ATOMIC_RELEASE);
}

void gateway_quiesce(gateway *g) {
    if (g)
        MHD_quiesce_daemon(g->daemon);
}

void gateway_stop(gateway *g) {
    if (!g)
        return;
    MHD_quiesce_daemon(g->daemon); /* in case gateway_quiesce was not called */
    int64_t deadline = fawn_now_ms() + GATEWAY_STOP_GRACE_MS;
    while (atomic_load(&g->in_flight) > 0 && fawn_now_ms() < deadline)
        usleep(GATEWAY_STOP_POLL_US);
    MHD_stop_daemon(g->daemon);
    gateway_free(g);
}
