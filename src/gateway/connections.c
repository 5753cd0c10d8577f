/* Who may hold a connection, and for how long without sending a request.
 *
 * - One client address holds at most server.max_connections_per_address
 *   connections at once (conns_admit refuses the next one before it is set
 *   up; conn_started closes one that raced past it). Trusted proxies are
 *   exempt: each speaks for many clients, and limits them itself.
 * - A request head must have arrived within server.request_head_timeout_s of
 *   the moment the connection was accepted, or of the end of the previous
 *   response on it (gw_conns_head_awaited). The time counts from then,
 *   whatever arrives meanwhile: a byte now and then does not extend it. Past
 *   it the connection is shut down (deadlines_sweep, on the watcher thread).
 * - Once a head has arrived (gw_conns_head_arrived) no deadline applies: a
 *   request may then take as long as it needs (an upload, an SSE follower),
 *   bounded by the server's idle timeout alone.
 *
 * - A file sent with sendfile (gw_conns_file_sending) that shrinks below
 *   what the response promised would leave the connection waiting for
 *   bytes that never come (libmicrohttpd sends nothing more and waits for
 *   the socket): while one is being sent, the watcher looks at its size
 *   every CONNS_FILE_CHECK_MS and shuts the connection down when it has
 *   shrunk (files_sweep), so the download ends short.
 *
 * Every open connection has a record here, created when libmicrohttpd
 * reports it started and removed when it reports it closed, which it does
 * before it closes the socket: shutdown() under the table's lock therefore
 * never reaches a descriptor that was closed, or reused. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <pthread.h>
#include <search.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>

#include "gateway/internal.h"

/* Deadlines are kept to within this much; a flood of connections with as
 * many distinct deadlines does not make the watcher look more often than
 * ten times a second. */
#define CONNS_SWEEP_MIN_MS 100
/* How often the size of a file being sent is looked at: a truncated
 * download ends within a second, for one fstat per download per second. */
#define CONNS_FILE_CHECK_MS 1000

typedef struct conn_record {
    struct conn_record *prev, *next;
    int fd;
    char addr[64];            /* the peer's address, as text */
    bool counted;             /* holds one of its address's connections */
    int64_t head_deadline_ms; /* monotonic; 0: no head is awaited */
    int file_fd;              /* the fd of the file being sent (borrowed); -1: none */
    dev_t file_dev;           /* that file's identity: the fd may have been closed, */
    ino_t file_ino;           /* and its number reused, before the record is cleared */
    uint64_t file_end;        /* the response's last byte + 1 in that file */
} conn_record;

/* Connections of one address (a node of the tsearch tree). */
typedef struct addr_count {
    char addr[64];
    uint32_t count;
    bool refusal_logged; /* the cap was reported since the count was last below it */
} addr_count;

struct gw_conns {
    const gateway *g;
    uint32_t per_address_max;
    int64_t head_timeout_ms;
    pthread_mutex_t lock;
    pthread_cond_t wake; /* on CLOCK_MONOTONIC */
    pthread_t watcher;
    bool watching; /* the watcher thread runs */
    bool stopping;
    int64_t next_sweep_ms; /* when the watcher looks next; INT64_MAX: when woken */
    conn_record *open;     /* every open connection */
    void *by_address;      /* tsearch tree of addr_count */
};

static int addr_compare(const void *a, const void *b) {
    return strcmp(((const addr_count *)a)->addr, ((const addr_count *)b)->addr);
}

static void address_text(char out[64], const struct sockaddr *sa) {
    snprintf(out, 64, "unknown");
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, 64);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, 64);
}

/* The count of addr's connections; NULL when it has none. Lock held. */
static addr_count *count_find(gw_conns *t, const char *addr) {
    addr_count key;
    snprintf(key.addr, sizeof key.addr, "%s", addr);
    void *node = tfind(&key, &t->by_address, addr_compare);
    return node ? *(addr_count **)node : NULL;
}

/* Whether addr may open one more connection. Lock held. */
static bool address_has_room(gw_conns *t, const char *addr) {
    if (gw_proxy_trusted(t->g, addr))
        return true;
    const addr_count *c = count_find(t, addr);
    return !c || c->count < t->per_address_max;
}

/* Takes one of addr's connections: false when it holds them all (or when
 * out of memory). Lock held. */
static bool address_take(gw_conns *t, const char *addr) {
    addr_count *c = count_find(t, addr);
    if (!c) {
        if (!(c = calloc(1, sizeof *c)))
            return false;
        snprintf(c->addr, sizeof c->addr, "%s", addr);
        if (!tsearch(c, &t->by_address, addr_compare)) {
            free(c);
            return false;
        }
    }
    if (c->count < t->per_address_max) {
        c->count++;
        return true;
    }
    if (!c->refusal_logged)
        log_warn("gateway",
                 "%s holds %u connections, the most one address may: more are "
                 "refused (server.max_connections_per_address)",
                 addr, c->count);
    c->refusal_logged = true;
    return false;
}

/* Gives back one of addr's connections. Lock held. */
static void address_release(gw_conns *t, const char *addr) {
    addr_count *c = count_find(t, addr);
    if (!c)
        return;
    c->refusal_logged = false;
    if (--c->count > 0)
        return;
    tdelete(c, &t->by_address, addr_compare);
    free(c);
}

/* Awaits a head on r from now on; wakes the watcher when it sleeps past the
 * new deadline. Lock held. */
static void head_await(gw_conns *t, conn_record *r) {
    r->head_deadline_ms = fawn_now_ms() + t->head_timeout_ms;
    if (r->head_deadline_ms < t->next_sweep_ms)
        pthread_cond_signal(&t->wake);
}

/* Stops watching r's file. Lock held. */
static void file_forget(conn_record *r) { r->file_fd = -1; }

/* ---- libmicrohttpd callbacks ---- */

enum MHD_Result gw_conns_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen) {
    gw_conns *t = cls;
    char text[64];
    address_text(text, addr);
    pthread_mutex_lock(&t->lock);
    bool room = address_has_room(t, text);
    pthread_mutex_unlock(&t->lock);
    return room ? MHD_YES : MHD_NO;
}

/* Records a new connection; one over its address's cap (admitted by another
 * thread at the same moment) is shut down at once. */
static void conn_started(gw_conns *t, struct MHD_Connection *c, void **socket_context) {
    const union MHD_ConnectionInfo *fd = MHD_get_connection_info(c,
                                                                 MHD_CONNECTION_INFO_CONNECTION_FD);
    const union MHD_ConnectionInfo *peer = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    conn_record *r = fd ? calloc(1, sizeof *r) : NULL;
    if (!r) { /* untracked, it would escape both limits: refused */
        if (fd)
            shutdown(fd->connect_fd, SHUT_RDWR);
        return;
    }
    r->fd = fd->connect_fd;
    r->file_fd = -1;
    address_text(r->addr, peer ? peer->client_addr : NULL);
    pthread_mutex_lock(&t->lock);
    bool trusted = gw_proxy_trusted(t->g, r->addr);
    r->counted = !trusted && address_take(t, r->addr);
    if (!trusted && !r->counted)
        shutdown(r->fd, SHUT_RDWR);
    r->next = t->open;
    if (t->open)
        t->open->prev = r;
    t->open = r;
    head_await(t, r);
    pthread_mutex_unlock(&t->lock);
    *socket_context = r;
}

static void conn_closed(gw_conns *t, void **socket_context) {
    conn_record *r = *socket_context;
    if (!r)
        return;
    pthread_mutex_lock(&t->lock);
    if (r->counted)
        address_release(t, r->addr);
    if (r->prev)
        r->prev->next = r->next;
    else
        t->open = r->next;
    if (r->next)
        r->next->prev = r->prev;
    file_forget(r);
    pthread_mutex_unlock(&t->lock);
    free(r);
    *socket_context = NULL;
}

void gw_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code) {
    if (code == MHD_CONNECTION_NOTIFY_STARTED)
        conn_started(cls, c, socket_context);
    else if (code == MHD_CONNECTION_NOTIFY_CLOSED)
        conn_closed(cls, socket_context);
}

static conn_record *record_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(
        c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info ? info->socket_context : NULL;
}

void gw_conns_head_arrived(gw_conns *t, struct MHD_Connection *c) {
    conn_record *r = record_of(c);
    if (!r)
        return;
    pthread_mutex_lock(&t->lock);
    r->head_deadline_ms = 0;
    pthread_mutex_unlock(&t->lock);
}

void gw_conns_head_awaited(gw_conns *t, struct MHD_Connection *c) {
    conn_record *r = record_of(c);
    if (!r)
        return;
    pthread_mutex_lock(&t->lock);
    file_forget(r);
    head_await(t, r);
    pthread_mutex_unlock(&t->lock);
}

int gw_conns_file_sending(gw_conns *t, struct MHD_Connection *c, int fd, uint64_t end) {
    conn_record *r = record_of(c);
    if (!r)
        return 0; /* refused at its start: shut down already */
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat a file being sent");
    pthread_mutex_lock(&t->lock);
    r->file_fd = fd;
    r->file_dev = st.st_dev;
    r->file_ino = st.st_ino;
    r->file_end = end;
    if (t->next_sweep_ms > fawn_now_ms() + CONNS_FILE_CHECK_MS) /* it sleeps past a check */
        pthread_cond_signal(&t->wake);
    pthread_mutex_unlock(&t->lock);
    return 0;
}

/* ---- the watcher ---- */

/* Shuts down every connection past its head deadline; returns the earliest
 * deadline still ahead (INT64_MAX: none). Lock held. */
static int64_t deadlines_sweep(gw_conns *t, int64_t now) {
    int64_t next = INT64_MAX;
    size_t closed = 0;
    for (conn_record *r = t->open; r; r = r->next) {
        if (r->head_deadline_ms == 0)
            continue;
        if (r->head_deadline_ms <= now) {
            shutdown(r->fd, SHUT_RDWR); /* the server sees the end and closes it */
            r->head_deadline_ms = 0;
            closed++;
        } else if (r->head_deadline_ms < next) {
            next = r->head_deadline_ms;
        }
    }
    if (closed)
        log_debug("gateway", "closed %zu connection(s) that sent no request within %" PRId64 " s",
                  closed, t->head_timeout_ms / 1000);
    return next;
}

/* Shuts down every connection whose file being sent has shrunk below what
 * its response promised; returns when to look again (INT64_MAX: no file is
 * being sent). Lock held. */
static int64_t files_sweep(gw_conns *t, int64_t now) {
    bool sending = false;
    for (conn_record *r = t->open; r; r = r->next) {
        struct stat st;
        if (r->file_fd < 0)
            continue;
        if (fstat(r->file_fd, &st) < 0 || st.st_dev != r->file_dev || st.st_ino != r->file_ino) {
            file_forget(r); /* sent and closed already */
            continue;
        }
        if ((uint64_t)st.st_size >= r->file_end) {
            sending = true;
            continue;
        }
        log_warn("gateway", "a file shrank while it was being sent: the download ends short");
        shutdown(r->fd, SHUT_RDWR); /* the server sees the end and closes it */
        file_forget(r);
    }
    return sending ? now + CONNS_FILE_CHECK_MS : INT64_MAX;
}

static void wait_until(gw_conns *t, int64_t mono_ms) {
    if (mono_ms == INT64_MAX) {
        pthread_cond_wait(&t->wake, &t->lock);
        return;
    }
    struct timespec ts = {.tv_sec = mono_ms / 1000, .tv_nsec = (mono_ms % 1000) * 1000000};
    pthread_cond_timedwait(&t->wake, &t->lock, &ts);
}

static void *watcher_main(void *arg) {
    gw_conns *t = arg;
    pthread_mutex_lock(&t->lock);
    while (!t->stopping) {
        int64_t now = fawn_now_ms(), next = deadlines_sweep(t, now);
        int64_t files_next = files_sweep(t, now);
        next = files_next < next ? files_next : next;
        if (next != INT64_MAX && next < now + CONNS_SWEEP_MIN_MS)
            next = now + CONNS_SWEEP_MIN_MS;
        t->next_sweep_ms = next;
        wait_until(t, next);
    }
    pthread_mutex_unlock(&t->lock);
    return NULL;
}

/* ---- lifetime ---- */

int gw_conns_new(gw_conns **out, const gateway *g) {
    *out = NULL;
    gw_conns *t = calloc(1, sizeof *t);
    if (!t)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    t->g = g;
    t->per_address_max = g->cfg->server.max_connections_per_address;
    t->head_timeout_ms = (int64_t)g->cfg->server.request_head_timeout_s * 1000;
    t->next_sweep_ms = INT64_MAX;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&t->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&t->lock, NULL);
    int e = pthread_create(&t->watcher, NULL, watcher_main, t);
    if (e != 0) {
        gw_conns_free(t);
        return fawn_err(FAWN_EIO, "cannot start the connection watcher: %s", strerror(e));
    }
    t->watching = true;
    *out = t;
    return 0;
}

void gw_conns_free(gw_conns *t) {
    if (!t)
        return;
    if (t->watching) {
        pthread_mutex_lock(&t->lock);
        t->stopping = true;
        pthread_cond_signal(&t->wake);
        pthread_mutex_unlock(&t->lock);
        pthread_join(t->watcher, NULL);
    }
    tdestroy(t->by_address, free); /* empty once the server has stopped */
    while (t->open) {
        conn_record *r = t->open;
        t->open = r->next;
        file_forget(r);
        free(r);
    }
    pthread_cond_destroy(&t->wake);
    pthread_mutex_destroy(&t->lock);
    free(t);
}
