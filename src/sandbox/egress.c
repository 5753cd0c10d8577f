/* The egress proxy of allowlist sandboxes (see egress.h): their network
 * namespaces, the gateway-side listener of each, and one thread per
 * connection that reads the request, decides, connects and relays.
 *
 * A connection's life: accepted (the sandbox's cap checked) -> its head
 * read within EGRESS_HEAD_TIMEOUT_MS -> the target decided and resolved,
 * each address checked, the first allowed one connected -> for CONNECT
 * the answer and, on a TLS port, the ClientHello checked -> bytes relayed
 * until either side ends, the idle timeout or the byte cap -> closed and
 * logged. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "box/box.h"
#include "sandbox/egress.h"

/* Stack of a connection's thread: its buffers are on the heap; 256 KiB
 * leaves getaddrinfo and the sanitizers room. */
#define EGRESS_THREAD_STACK (256 * 1024)
/* Connections of all sandboxes at once: each holds a thread and two
 * descriptors; past this new ones are answered 503. */
#define EGRESS_CONNECTIONS_MAX 4096
/* Bytes moved per read in the relay. */
#define EGRESS_RELAY_CHUNK 16384
/* Pending connections a sandbox's listener queues. */
#define EGRESS_BACKLOG 64

/* ---- policy ---- */

static int tls_ports_parse(egress_policy *out, const json_t *list) {
    if (!list) {
        out->tls_ports[0] = 443;
        out->n_tls_ports = 1;
        return 0;
    }
    if (!json_is_array(list) || json_array_size(list) > EGRESS_TLS_PORTS_MAX)
        return fawn_err(FAWN_ECONFIG,
                        "sandbox.egress.tls_ports: must be a list of at most %d ports",
                        EGRESS_TLS_PORTS_MAX);
    for (size_t i = 0; i < json_array_size(list); i++) {
        const char *t = json_string_value(json_array_get(list, i));
        char *end = NULL;
        long v = t && *t >= '0' && *t <= '9' ? strtol(t, &end, 10) : -1;
        if (v < 1 || v > 65535 || *end)
            return fawn_err(FAWN_ECONFIG, "sandbox.egress.tls_ports[%zu]: must be a port 1..65535",
                            i);
        out->tls_ports[out->n_tls_ports++] = (uint16_t)v;
    }
    return 0;
}

int egress_policy_from_config(egress_policy *out, const fawn_config *cfg) {
    memset(out, 0, sizeof *out);
    const fawn_egress_config *ec = &cfg->sandbox.egress;
    int r = net_allowlist_parse(&out->allow, ec->allow, "sandbox.egress.allow");
    if (r == 0)
        r = tls_ports_parse(out, ec->tls_ports);
    out->limits = (egress_limits){
        .max_connections = ec->max_connections,
        .idle_timeout_ms = (int)(ec->idle_timeout_s > INT32_MAX / 1000 ? INT32_MAX
                                                                       : ec->idle_timeout_s * 1000),
        .max_bytes = ec->max_connection_mb << 20,
    };
    if (r < 0)
        egress_policy_free(out);
    return r;
}

void egress_policy_free(egress_policy *p) {
    net_allowlist_free(&p->allow);
    memset(p, 0, sizeof *p);
}

static bool tls_port(const egress_policy *p, uint16_t port) {
    for (size_t i = 0; i < p->n_tls_ports; i++)
        if (p->tls_ports[i] == port)
            return true;
    return false;
}

/* ---- the namespace ---- */

typedef struct netns_job {
    int netns_fd, listen_fd, code, err;
    const char *what;
} netns_job;

static int listen_loopback(void) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(EGRESS_PROXY_PORT)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 &&
        (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, EGRESS_BACKLOG) < 0)) {
        int e = errno;
        close(fd);
        errno = e;
        return -1;
    }
    return fd;
}

/* On its own thread: the thread's namespace is discarded with it. */
static void *netns_make(void *arg) {
    netns_job *j = arg;
    if (unshare(CLONE_NEWNET) < 0)
        j->what = "unshare(CLONE_NEWNET)";
    else if (box_isolate_loopback_up() < 0)
        j->what = "bringing up loopback";
    else if ((j->netns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
        j->what = "open /proc/thread-self/ns/net";
    else if ((j->listen_fd = listen_loopback()) < 0)
        j->what = "listening on the proxy's port";
    j->err = j->what ? errno : 0;
    return NULL;
}

int egress_netns_new(int *netns_fd, int *listen_fd) {
    *netns_fd = *listen_fd = -1;
    if (geteuid() != 0)
        return fawn_err(FAWN_EUNSUP, "sandbox.network allowlist needs fawn to run as root (it "
                                     "makes each sandbox's network namespace)");
    netns_job j = {.netns_fd = -1, .listen_fd = -1};
    pthread_t t;
    int e = pthread_create(&t, NULL, netns_make, &j);
    if (e)
        return fawn_err_sys(FAWN_EIO, e, "starting a thread");
    pthread_join(t, NULL);
    if (j.what) {
        if (j.netns_fd >= 0)
            close(j.netns_fd);
        return fawn_err_sys(j.err == EPERM ? FAWN_EUNSUP : FAWN_EIO, j.err,
                            "a sandbox network namespace: %s", j.what);
    }
    *netns_fd = j.netns_fd;
    *listen_fd = j.listen_fd;
    return 0;
}

/* ---- the proxy's tables ---- */

typedef struct egress_conn egress_conn;

typedef struct egress_sandbox {
    char id[65];
    int listen_fd;     /* -1 once closed (by the accepting thread) */
    bool removed;      /* being removed: no new connection, listener to close */
    unsigned conns;    /* live connections */
    egress_conn *live; /* their list */
    struct egress_sandbox *next;
} egress_sandbox;

struct egress_conn {
    egress_proxy *p;
    egress_sandbox *sb;
    int client, upstream;
    egress_conn *next;
};

struct egress_proxy {
    egress_policy policy;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* a listener closed, a connection ended */
    egress_sandbox *sandboxes;
    unsigned conns; /* all sandboxes' */
    int wake[2];    /* tells the accepting thread the table changed */
    bool stopping;
    pthread_t acceptor;
};

static void wake_acceptor(egress_proxy *p) {
    char c = 0;
    ssize_t n = write(p->wake[1], &c, 1);
    (void)n; /* a full pipe already wakes it */
}

static egress_sandbox *sandbox_find(egress_proxy *p, const char *id) {
    for (egress_sandbox *s = p->sandboxes; s; s = s->next)
        if (!s->removed && strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

/* ---- audit ---- */

typedef struct conn_state {
    egress_conn *c;
    egress_request req;
    char addr[INET6_ADDRSTRLEN + 8]; /* the address connected to, "-" before */
    uint64_t up, down;               /* bytes client->upstream, upstream->client */
    char buf[EGRESS_HEAD_MAX];
    size_t len;
} conn_state;

/* "host:port" of the request, an IPv6 address in brackets. */
static const char *target_text(char *out, size_t outsz, const egress_request *r) {
    bool v6 = strchr(r->host, ':') != NULL;
    snprintf(out, outsz, "%s%s%s:%u", v6 ? "[" : "", r->host[0] ? r->host : "?", v6 ? "]" : "",
             (unsigned)r->port);
    return out;
}

static void audit_refused(const conn_state *s, const char *why) {
    char target[NET_HOST_MAX + 16];
    log_info("egress", "sandbox %s %s %s via %s: refused (%s)", s->c->sb->id,
             s->req.connect ? "CONNECT" : "http", target_text(target, sizeof target, &s->req),
             s->addr, why);
}

/* ---- a connection ---- */

/* Writes an HTTP answer to the sandbox's client (best effort: it may be
 * gone). What it sent and nobody read is discarded first: a close with
 * unread bytes would reset the connection and lose the answer. */
static void answer(int fd, int status, const char *reason, const char *why) {
    char text[512];
    for (int i = 0; i < 8 && recv(fd, text, sizeof text, MSG_DONTWAIT) > 0; i++) {
    }
    int n = snprintf(text, sizeof text,
                     "HTTP/1.1 %d %s\r\nContent-Type: text/plain\r\nConnection: close\r\n"
                     "Content-Length: %zu\r\n\r\n%s\n",
                     status, reason, strlen(why) + 1, why);
    if (n > 0 && (size_t)n < sizeof text)
        (void)!send(fd, text, (size_t)n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Waits for fd to be ready for events until deadline_ms (monotonic). */
static bool wait_fd(int fd, short events, int64_t deadline_ms) {
    for (;;) {
        int64_t left = deadline_ms - fawn_now_ms();
        if (left <= 0)
            return false;
        struct pollfd pf = {.fd = fd, .events = events};
        int n = poll(&pf, 1, left > INT32_MAX ? INT32_MAX : (int)left);
        if (n > 0)
            return true;
        if (n < 0 && errno != EINTR)
            return false;
    }
}

/* Reads more of what the client sends into s->buf within the deadline. */
static int read_more(conn_state *s, int64_t deadline_ms) {
    if (s->len >= sizeof s->buf)
        return FAWN_E2BIG;
    if (!wait_fd(s->c->client, POLLIN, deadline_ms))
        return FAWN_ETIMEDOUT;
    ssize_t n = recv(s->c->client, s->buf + s->len, sizeof s->buf - s->len, 0);
    if (n <= 0)
        return FAWN_EIO;
    s->len += (size_t)n;
    return 0;
}

static int read_head(conn_state *s) {
    int64_t deadline = fawn_now_ms() + EGRESS_HEAD_TIMEOUT_MS;
    for (;;) {
        int r = egress_request_parse(&s->req, s->buf, s->len);
        if (r != FAWN_E2BIG)
            return r;
        r = read_more(s, deadline);
        if (r < 0)
            return fawn_err(r, "the request head did not arrive whole");
    }
}

static bool send_all(int fd, const void *data, size_t n, int timeout_ms) {
    const char *p = data;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) {
            if (!wait_fd(fd, POLLOUT, deadline))
                return false;
            continue;
        }
        if (w <= 0)
            return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static void addr_text(char *out, size_t outsz, const struct sockaddr *sa) {
    char ip[INET6_ADDRSTRLEN] = "?";
    uint16_t port = 0;
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const void *)sa;
        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof ip);
        port = ntohs(a->sin_port);
        snprintf(out, outsz, "%s:%u", ip, (unsigned)port);
    } else {
        const struct sockaddr_in6 *a = (const void *)sa;
        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof ip);
        port = ntohs(a->sin6_port);
        snprintf(out, outsz, "[%s]:%u", ip, (unsigned)port);
    }
}

/* Sets c's upstream descriptor where egress_proxy_remove can shut it
 * (closing the one it had), under the lock. */
static void set_upstream(egress_conn *c, int fd) {
    pthread_mutex_lock(&c->p->mu);
    if (c->upstream >= 0)
        close(c->upstream);
    c->upstream = fd;
    if (fd >= 0 && c->sb->removed)
        shutdown(fd, SHUT_RDWR);
    pthread_mutex_unlock(&c->p->mu);
}

/* A non-blocking connect of c's upstream to sa, finished within
 * EGRESS_CONNECT_TIMEOUT_MS (a removal cuts it short). */
static bool connect_to(egress_conn *c, const struct sockaddr *sa, socklen_t len) {
    int fd = socket(sa->sa_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return false;
    set_upstream(c, fd);
    if (connect(fd, sa, len) == 0)
        return true;
    int err = 0;
    socklen_t el = sizeof err;
    if (errno == EINPROGRESS && wait_fd(fd, POLLOUT, fawn_now_ms() + EGRESS_CONNECT_TIMEOUT_MS) &&
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el) == 0 && err == 0)
        return true;
    set_upstream(c, -1);
    return false;
}

/* Resolves the target, checks every address, connects to the first
 * allowed one. On failure the client has been answered and the refusal
 * logged. */
static int open_upstream(conn_state *s) {
    const egress_policy *pol = &s->c->p->policy;
    char port[8];
    snprintf(port, sizeof port, "%u", (unsigned)s->req.port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_NUMERICSERV | (s->req.literal ? AI_NUMERICHOST : 0)};
    struct addrinfo *res = NULL;
    if (getaddrinfo(s->req.host, port, &hints, &res) != 0) {
        audit_refused(s, "the name does not resolve");
        answer(s->c->client, 502, "Bad Gateway", "the name does not resolve");
        return -1;
    }
    bool any_allowed = false, connected = false;
    int n = 0;
    for (struct addrinfo *a = res; a && !connected && n < EGRESS_ADDRS_MAX; a = a->ai_next, n++) {
        if (a->ai_family != AF_INET && a->ai_family != AF_INET6)
            continue;
        addr_text(s->addr, sizeof s->addr, a->ai_addr);
        if (!net_connect_allowed(&pol->allow, NULL, a->ai_addr))
            continue; /* a private address no listed range holds */
        any_allowed = true;
        connected = connect_to(s->c, a->ai_addr, a->ai_addrlen);
    }
    freeaddrinfo(res);
    if (!any_allowed) {
        audit_refused(s, "it resolves only to addresses that are neither public nor in a listed "
                         "range");
        answer(s->c->client, 403, "Forbidden", "the address is not allowed");
        return -1;
    }
    if (!connected) {
        audit_refused(s, "the connection failed");
        answer(s->c->client, 502, "Bad Gateway", "the connection failed");
        return -1;
    }
    return 0;
}

/* On a TLS port: the ClientHello must name the CONNECT host (or nothing,
 * for an address). */
static int check_hello(conn_state *s) {
    int64_t deadline = fawn_now_ms() + EGRESS_HEAD_TIMEOUT_MS;
    char sni[NET_HOST_MAX + 1];
    int r;
    while ((r = egress_tls_sni(sni, (const uint8_t *)s->buf, s->len)) == FAWN_E2BIG) {
        if (read_more(s, deadline) < 0) {
            audit_refused(s, "no whole TLS ClientHello arrived");
            return -1;
        }
    }
    if (r < 0) {
        char why[160];
        snprintf(why, sizeof why, "not a TLS ClientHello on a TLS port: %s", fawn_errmsg());
        audit_refused(s, why);
        return -1;
    }
    bool ok = s->req.literal ? sni[0] == '\0' : strcmp(sni, s->req.host) == 0;
    if (!ok) {
        char why[NET_HOST_MAX + 64];
        snprintf(why, sizeof why, "the TLS server name '%s' is not the CONNECT host",
                 sni[0] ? sni : "(none)");
        audit_refused(s, why);
        return -1;
    }
    return 0;
}

/* What arrived after the head and goes upstream first. */
static bool forward_rest(conn_state *s, size_t from, size_t n) {
    if (n == 0)
        return true;
    s->up += n;
    return send_all(s->c->upstream, s->buf + from, n, s->c->p->policy.limits.idle_timeout_ms);
}

/* The CONNECT answer, and on a TLS port the ClientHello's check. */
static int start_tunnel(conn_state *s) {
    static const char ok[] = "HTTP/1.1 200 Connection established\r\n\r\n";
    size_t rest = s->len - s->req.head_len;
    memmove(s->buf, s->buf + s->req.head_len, rest);
    s->len = rest;
    if (!send_all(s->c->client, ok, sizeof ok - 1, EGRESS_HEAD_TIMEOUT_MS))
        return -1;
    if (tls_port(&s->c->p->policy, s->req.port) && check_hello(s) < 0)
        return -1;
    return forward_rest(s, 0, s->len) ? 0 : -1;
}

/* The rewritten head and the part of the body that came with it. */
static int start_plain(conn_state *s) {
    size_t body = s->len - s->req.head_len;
    if (body > s->req.content_length)
        body = (size_t)s->req.content_length; /* a second request: dropped */
    s->req.content_length -= body;
    s->up += s->req.forward_len;
    if (!send_all(s->c->upstream, s->req.forward, s->req.forward_len,
                  s->c->p->policy.limits.idle_timeout_ms))
        return -1;
    return forward_rest(s, s->req.head_len, body) ? 0 : -1;
}

/* Moves one read's bytes from one side to the other: the bytes moved, 0
 * at the end of that direction (a reset included), RELAY_NOTHING when
 * nothing was there, -1 when the other side cannot take them. */
#define RELAY_NOTHING (-2)
static ssize_t relay_once(int from, int to, char *buf, size_t cap, int timeout_ms) {
    ssize_t n = recv(from, buf, cap, MSG_DONTWAIT);
    if (n < 0)
        return errno == EAGAIN || errno == EINTR ? RELAY_NOTHING : 0;
    if (n > 0 && !send_all(to, buf, (size_t)n, timeout_ms))
        return -1;
    return n;
}

/* Relays until both directions end, the idle timeout passes, the byte cap
 * is reached or the sandbox is removed; returns why it stopped. For plain
 * http, only the declared body's bytes go upstream. */
static const char *relay(conn_state *s) {
    const egress_limits *lim = &s->c->p->policy.limits;
    egress_conn *c = s->c;
    bool up_open = s->req.connect || s->req.content_length > 0, down_open = true;
    _cleanup_free_ char *buf = malloc(EGRESS_RELAY_CHUNK);
    if (!buf)
        return "out of memory";
    while (down_open) {
        struct pollfd pf[2] = {{.fd = c->upstream, .events = POLLIN},
                               {.fd = up_open ? c->client : -1, .events = POLLIN}};
        int n = poll(pf, 2, lim->idle_timeout_ms);
        if (n == 0)
            return "idle timeout";
        if (n < 0 && errno != EINTR)
            return "poll failed";
        if (pf[1].revents) {
            size_t cap = EGRESS_RELAY_CHUNK;
            if (!s->req.connect && s->req.content_length < cap)
                cap = (size_t)s->req.content_length;
            ssize_t m = relay_once(c->client, c->upstream, buf, cap, lim->idle_timeout_ms);
            if (m == RELAY_NOTHING)
                m = 0, pf[1].revents = 0;
            else if (m < 0)
                return "write to the target failed";
            if (m == 0 && pf[1].revents) {
                up_open = false;
                shutdown(c->upstream, SHUT_WR);
            }
            s->up += (uint64_t)m;
            if (!s->req.connect && (s->req.content_length -= (uint64_t)m) == 0)
                up_open = false;
        }
        if (pf[0].revents) {
            ssize_t m = relay_once(c->upstream, c->client, buf, EGRESS_RELAY_CHUNK,
                                   lim->idle_timeout_ms);
            if (m < 0 && m != RELAY_NOTHING)
                return "write to the sandbox failed";
            down_open = m != 0;
            s->down += (uint64_t)(m > 0 ? m : 0);
        }
        if (s->up + s->down > lim->max_bytes)
            return "byte cap reached";
    }
    return "the target ended it";
}

static void serve(conn_state *s) {
    egress_conn *c = s->c;
    snprintf(s->addr, sizeof s->addr, "-");
    if (read_head(s) < 0) {
        char why[256];
        snprintf(why, sizeof why, "bad request: %s", fawn_errmsg());
        audit_refused(s, why);
        answer(c->client, 400, "Bad Request", fawn_errmsg());
        return;
    }
    if (!egress_target_listed(&c->p->policy, s->req.host, s->req.literal, s->req.port)) {
        audit_refused(s, "not in sandbox.egress.allow");
        answer(c->client, 403, "Forbidden", "the host is not in the sandbox's allow-list");
        return;
    }
    if (open_upstream(s) < 0)
        return;
    if ((s->req.connect ? start_tunnel(s) : start_plain(s)) < 0)
        return;
    char target[NET_HOST_MAX + 16];
    target_text(target, sizeof target, &s->req);
    const char *kind = s->req.connect ? "CONNECT" : "http";
    log_info("egress", "sandbox %s %s %s via %s: allowed", c->sb->id, kind, target, s->addr);
    const char *end = relay(s);
    log_info("egress",
             "sandbox %s %s %s via %s: closed (%s), %" PRIu64 " bytes sent, %" PRIu64 " received",
             c->sb->id, kind, target, s->addr, end, s->up, s->down);
}

/* Unlinks c from its sandbox and closes its descriptors (under the lock,
 * so egress_proxy_remove never shuts a reused number). */
static void conn_end(egress_conn *c) {
    egress_proxy *p = c->p;
    pthread_mutex_lock(&p->mu);
    for (egress_conn **at = &c->sb->live; *at; at = &(*at)->next) {
        if (*at == c) {
            *at = c->next;
            break;
        }
    }
    c->sb->conns--;
    p->conns--;
    close(c->client);
    if (c->upstream >= 0)
        close(c->upstream);
    c->upstream = -1;
    pthread_cond_broadcast(&p->changed);
    pthread_mutex_unlock(&p->mu);
    free(c);
}

static void *conn_main(void *arg) {
    egress_conn *c = arg;
    conn_state *s = calloc(1, sizeof *s);
    if (s) {
        s->c = c;
        serve(s);
        egress_request_clear(&s->req);
        free(s);
    }
    conn_end(c);
    return NULL;
}

/* ---- accepting ---- */

/* Registers a new connection of sb, or says why it cannot be served. */
static egress_conn *conn_new(egress_proxy *p, egress_sandbox *sb, int fd, const char **why) {
    *why = NULL;
    if (sb->removed)
        *why = "the sandbox is being removed";
    else if (sb->conns >= p->policy.limits.max_connections)
        *why = "the sandbox's connection cap (sandbox.egress.max_connections) is reached";
    else if (p->conns >= EGRESS_CONNECTIONS_MAX)
        *why = "the gateway's egress connection cap is reached";
    egress_conn *c = *why ? NULL : calloc(1, sizeof *c);
    if (!*why && !c)
        *why = "out of memory";
    if (!c)
        return NULL;
    *c = (egress_conn){.p = p, .sb = sb, .client = fd, .upstream = -1, .next = sb->live};
    sb->live = c;
    sb->conns++;
    p->conns++;
    return c;
}

static void conn_start(egress_proxy *p, egress_sandbox *sb, int fd) {
    const char *why;
    pthread_mutex_lock(&p->mu);
    egress_conn *c = conn_new(p, sb, fd, &why);
    pthread_mutex_unlock(&p->mu);
    if (!c) {
        log_info("egress", "sandbox %s connection: refused (%s)", sb->id, why);
        answer(fd, 503, "Service Unavailable", why);
        close(fd);
        return;
    }
    pthread_attr_t attr;
    pthread_t t;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, EGRESS_THREAD_STACK);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    int e = pthread_create(&t, &attr, conn_main, c);
    pthread_attr_destroy(&attr);
    if (e) {
        log_warn("egress", "sandbox %s connection: refused (no thread: %s)", sb->id, strerror(e));
        answer(fd, 503, "Service Unavailable", "no thread");
        conn_end(c);
    }
}

/* Closes the listeners of removed sandboxes (their remover waits for it)
 * and fills pf with the others'. Under the lock. */
static size_t listeners_collect(egress_proxy *p, struct pollfd *pf, egress_sandbox **sbs,
                                size_t cap) {
    size_t n = 0;
    for (egress_sandbox **at = &p->sandboxes; *at;) {
        egress_sandbox *s = *at;
        if (s->removed && s->listen_fd >= 0) {
            close(steal_fd(s->listen_fd));
            pthread_cond_broadcast(&p->changed);
        }
        if (!s->removed && n < cap) {
            pf[n] = (struct pollfd){.fd = s->listen_fd, .events = POLLIN};
            sbs[n++] = s;
        }
        at = &s->next;
    }
    return n;
}

/* Sandboxes one proxy serves at once: every running sandbox of a gateway
 * (sandbox.replicas is at most 100000; past this many a start fails). */
#define EGRESS_SANDBOXES_MAX 4096
/* How long the acceptor waits when the process is out of descriptors:
 * long enough not to spin, short enough that a freed one is used soon. */
#define EGRESS_FD_WAIT_MS 100

static void accept_ready(egress_proxy *p, struct pollfd *pf, egress_sandbox **sbs, size_t n) {
    for (size_t i = 0; i < n; i++) {
        if (!pf[i].revents)
            continue;
        int fd = accept4(pf[i].fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (fd >= 0) {
            conn_start(p, sbs[i], fd);
        } else if (errno == EMFILE || errno == ENFILE) {
            /* The connection stays queued and poll would report it at once
             * again: wait for descriptors to free rather than spin. */
            log_warn("egress", "out of file descriptors: waiting to accept");
            usleep(EGRESS_FD_WAIT_MS * 1000);
            return;
        }
    }
}

static void *accept_main(void *arg) {
    egress_proxy *p = arg;
    struct pollfd *pf = calloc(EGRESS_SANDBOXES_MAX + 1, sizeof *pf);
    egress_sandbox **sbs = calloc(EGRESS_SANDBOXES_MAX, sizeof *sbs);
    for (;;) {
        pthread_mutex_lock(&p->mu);
        size_t n = pf && sbs ? listeners_collect(p, pf + 1, sbs, EGRESS_SANDBOXES_MAX) : 0;
        bool stop = p->stopping;
        pthread_mutex_unlock(&p->mu);
        if (stop || !pf || !sbs)
            break;
        pf[0] = (struct pollfd){.fd = p->wake[0], .events = POLLIN};
        if (poll(pf, n + 1, -1) < 0 && errno != EINTR)
            break;
        if (pf[0].revents) {
            char drain[64];
            while (read(p->wake[0], drain, sizeof drain) > 0) {
            }
            continue; /* the table changed: the listeners in pf may be closed */
        }
        accept_ready(p, pf + 1, sbs, n);
    }
    free(pf);
    free(sbs);
    return NULL;
}

/* ---- the proxy ---- */

int egress_proxy_new(egress_proxy **out, egress_policy *policy) {
    *out = NULL;
    egress_proxy *p = calloc(1, sizeof *p);
    if (!p) {
        egress_policy_free(policy);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    p->policy = *policy;
    memset(policy, 0, sizeof *policy);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->changed, NULL);
    p->wake[0] = p->wake[1] = -1;
    int e = pipe2(p->wake, O_CLOEXEC | O_NONBLOCK) < 0 ? errno : 0;
    if (!e)
        e = pthread_create(&p->acceptor, NULL, accept_main, p);
    if (e) {
        for (int i = 0; i < 2; i++)
            if (p->wake[i] >= 0)
                close(p->wake[i]);
        egress_policy_free(&p->policy);
        free(p);
        return fawn_err_sys(FAWN_EIO, e, "starting the egress proxy");
    }
    *out = p;
    return 0;
}

/* Marks s removed, shuts its connections and waits until the accepting
 * thread closed its listener and every connection ended. Under the lock. */
static void sandbox_drain(egress_proxy *p, egress_sandbox *s) {
    s->removed = true;
    for (egress_conn *c = s->live; c; c = c->next) {
        shutdown(c->client, SHUT_RDWR);
        if (c->upstream >= 0)
            shutdown(c->upstream, SHUT_RDWR);
    }
    wake_acceptor(p);
    while (s->listen_fd >= 0 || s->conns > 0)
        pthread_cond_wait(&p->changed, &p->mu);
    for (egress_sandbox **at = &p->sandboxes; *at; at = &(*at)->next) {
        if (*at == s) {
            *at = s->next;
            break;
        }
    }
    free(s);
    pthread_cond_broadcast(&p->changed);
}

int egress_proxy_add(egress_proxy *p, const char *sandbox_id, int listen_fd) {
    egress_sandbox *s = calloc(1, sizeof *s);
    if (!s || strlen(sandbox_id) >= sizeof s->id) {
        free(s);
        close(listen_fd);
        return fawn_err(s ? FAWN_EINVAL : FAWN_ENOMEM, "cannot serve sandbox %.64s", sandbox_id);
    }
    snprintf(s->id, sizeof s->id, "%s", sandbox_id);
    s->listen_fd = listen_fd;
    pthread_mutex_lock(&p->mu);
    egress_sandbox *old = sandbox_find(p, sandbox_id);
    if (old)
        sandbox_drain(p, old);
    s->next = p->sandboxes;
    p->sandboxes = s;
    wake_acceptor(p);
    pthread_mutex_unlock(&p->mu);
    return 0;
}

bool egress_proxy_serves(egress_proxy *p, const char *sandbox_id) {
    pthread_mutex_lock(&p->mu);
    bool found = sandbox_find(p, sandbox_id) != NULL;
    pthread_mutex_unlock(&p->mu);
    return found;
}

void egress_proxy_remove(egress_proxy *p, const char *sandbox_id) {
    pthread_mutex_lock(&p->mu);
    egress_sandbox *s = sandbox_find(p, sandbox_id);
    if (s)
        sandbox_drain(p, s);
    pthread_mutex_unlock(&p->mu);
}

void egress_proxy_free(egress_proxy *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    while (p->sandboxes) {
        egress_sandbox *s = p->sandboxes;
        while (s && s->removed) /* another thread's removal: it finishes it */
            s = s->next;
        if (s)
            sandbox_drain(p, s);
        else
            pthread_cond_wait(&p->changed, &p->mu);
    }
    p->stopping = true;
    wake_acceptor(p);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->acceptor, NULL);
    close(p->wake[0]);
    close(p->wake[1]);
    pthread_cond_destroy(&p->changed);
    pthread_mutex_destroy(&p->mu);
    egress_policy_free(&p->policy);
    free(p);
}
