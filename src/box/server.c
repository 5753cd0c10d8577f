/* Accept loop, one detached thread per connection, keep-alive and request
 * lifecycle (auth, body framing, unanswered requests, draining). */
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

#include <sodium.h>

#include "box/http.h"
#include "box/http_internal.h"

/* Handlers parse JSON and format replies with shallow stacks; 256 KiB keeps
 * the address space of many connections small. */
#define HTTP_THREAD_STACK ((size_t)256 << 10)
/* After a final response the peer gets this long to take it before close(). */
#define HTTP_LINGER_MS 1000
/* Bytes read and dropped while lingering; a peer sending more is cut off. */
#define HTTP_LINGER_BYTES ((size_t)64 << 10)
/* The 503 for an over-limit connection is written by the accept loop, which
 * must not stall on a peer that does not read. */
#define HTTP_REJECT_TIMEOUT_MS 100
/* Pause before retrying accept() when out of descriptors or memory. */
#define HTTP_ACCEPT_BACKOFF_MS 100
/* Scratch size for dropping unread request bodies. */
#define HTTP_DRAIN_CHUNK 4096

/* The only global state: a stop request and the eventfd that announces it
 * (created by the first http_serve, kept for the life of the process so that
 * a signal handler never writes to a closed descriptor). Both are lock-free
 * atomics, so http_server_stop may touch them from a signal handler. */
static atomic_int stop_requested;
static _Atomic int stop_fd = -1;

typedef struct server {
    http_server_opts opts;
    size_t token_len;
    _Atomic size_t active; /* connection threads alive */
    pthread_mutex_t lock;  /* with `idle`, lets http_serve wait for active == 0 */
    pthread_cond_t idle;
} server;

typedef struct conn_job {
    server *srv;
    http_conn c;
} conn_job;

void http_server_stop(void) {
    int saved_errno = errno;
    atomic_store(&stop_requested, 1);
    int fd = atomic_load(&stop_fd);
    if (fd >= 0) {
        uint64_t one = 1;
        (void)!write(fd, &one, sizeof one);
    }
    errno = saved_errno;
}

static int stop_fd_init(void) {
    if (atomic_load(&stop_fd) >= 0)
        return 0;
    int fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "eventfd");
    int expected = -1;
    if (!atomic_compare_exchange_strong(&stop_fd, &expected, fd))
        close(fd);
    return 0;
}

/* Forgets a stop once the server that honoured it has wound down. */
static void stop_reset(void) {
    uint64_t count;
    (void)!read(atomic_load(&stop_fd), &count, sizeof count);
    atomic_store(&stop_requested, 0);
}

/* ---- one request -------------------------------------------------------- */

static bool request_authorized(const server *srv, const http_request *req) {
    if (!srv->opts.bearer_token)
        return true;
    const char *v = http_header_get(req, "Authorization");
    if (!v || strncasecmp(v, "Bearer ", 7) != 0)
        return false;
    const char *token = v + 7;
    while (*token == ' ')
        token++;
    size_t n = strlen(token);
    return n == srv->token_len && sodium_memcmp(token, srv->opts.bearer_token, n) == 0;
}

static const char *error_code_for_status(int status) {
    switch (status) {
    case 408: return "timeout";
    case 413:
    case 431: return "too_large";
    case 501:
    case 505: return "unsupported";
    default: return "bad_request";
    }
}

/* Parses the head once new bytes may have completed it (or broken a rule). */
static bool head_parse_due(const char *fresh, size_t n, size_t buf_len) {
    return buf_len >= HTTP_MAX_HEAD_BYTES || memchr(fresh, '\n', n) || memchr(fresh, '\0', n);
}

/* Reads until a complete head is in c->buf. The first byte of a request may
 * take idle_timeout_ms; from then on the whole head must arrive within
 * io_timeout_ms, so a trickling client cannot hold the thread. On failure
 * *status is the status to answer with, or 0 to close silently. */
static int conn_read_head(http_conn *c, const server *srv, http_request *req, size_t *head_len,
                          int *status) {
    int64_t idle_deadline = fawn_now_ms() + srv->opts.idle_timeout_ms;
    int64_t head_deadline = 0;
    bool parse_due = c->buf_len > 0;
    *status = 0;
    /* Bounded: every pass adds at least one byte to a fixed-size buffer. */
    for (;;) {
        if (parse_due) {
            int r = http_parse_head(req, head_len, status, c->buf, c->buf_len);
            if (r <= 0)
                return r;
        }
        if (c->buf_len > 0 && head_deadline == 0)
            head_deadline = fawn_now_ms() + srv->opts.io_timeout_ms;
        char *fresh = c->buf + c->buf_len;
        ssize_t n = http_conn_recv(c, fresh, HTTP_MAX_HEAD_BYTES - c->buf_len,
                                   c->buf_len > 0 ? head_deadline : idle_deadline, true);
        if (n == FAWN_ETIMEDOUT && c->buf_len > 0) {
            *status = 408;
            return fawn_err(FAWN_ETIMEDOUT, "request head not received within %d ms",
                            srv->opts.io_timeout_ms);
        }
        if (n <= 0)
            return n < 0 ? (int)n : FAWN_EIO;
        c->buf_len += (size_t)n;
        parse_due = head_parse_due(fresh, (size_t)n, c->buf_len);
    }
}

/* Forgets everything about the previous request on this connection. */
static void conn_reset_request(http_conn *c) {
    c->body_left = 0;
    c->keep_alive = c->http10 = c->head_method = c->expect_continue = c->continue_sent = false;
    c->responded = c->streaming = c->chunked = c->stream_ended = false;
}

static void conn_begin_request(http_conn *c, const http_request *req, size_t head_len) {
    const char *expect = http_header_get(req, "Expect");
    c->buf_pos = head_len;
    c->body_left = req->content_length > 0 ? req->content_length : 0;
    c->http10 = req->version_minor == 0;
    c->head_method = strcmp(req->method, "HEAD") == 0;
    c->expect_continue = !c->http10 && expect && strcasecmp(expect, "100-continue") == 0;
    c->keep_alive = req->keep_alive && !c->single_request && !atomic_load(&stop_requested);
}

static void conn_dispatch(const server *srv, http_conn *c, const http_request *req) {
    if (!request_authorized(srv, req)) {
        http_respond_error_headers(c, 401, "WWW-Authenticate: Bearer\r\n", "unauthorized",
                                   "missing or invalid bearer token");
        return;
    }
    srv->opts.handler(c, req, srv->opts.ud);
    if (!c->responded && !c->failed)
        http_respond_error(c, 500, "internal", "the handler sent no response");
}

/* Drops the unread body (already bounded by HTTP_DRAIN_MAX through the
 * response's keep-alive decision) within one io timeout. */
static int conn_discard_body(http_conn *c) {
    size_t buffered = c->buf_len - c->buf_pos;
    size_t take = (uint64_t)c->body_left < buffered ? (size_t)c->body_left : buffered;
    c->buf_pos += take;
    c->body_left -= (int64_t)take;
    int64_t deadline = fawn_now_ms() + c->io_timeout_ms;
    char scratch[HTTP_DRAIN_CHUNK];
    while (c->body_left > 0) {
        size_t want = c->body_left < (int64_t)sizeof scratch ? (size_t)c->body_left
                                                             : sizeof scratch;
        ssize_t n = http_conn_recv(c, scratch, want, deadline, false);
        if (n <= 0)
            return n < 0 ? (int)n : FAWN_EPROTO;
        c->body_left -= n;
    }
    return 0;
}

/* Whether the connection can carry another request after this one. */
static bool conn_finish_request(http_conn *c) {
    if (c->failed || !c->keep_alive || atomic_load(&stop_requested))
        return false;
    if (c->streaming && !c->stream_ended)
        return false;
    if (conn_discard_body(c) < 0)
        return false;
    memmove(c->buf, c->buf + c->buf_pos, c->buf_len - c->buf_pos);
    c->buf_len -= c->buf_pos;
    c->buf_pos = 0;
    return true;
}

/* Serves requests until the connection should close. Returns true when the
 * last request was answered (so the peer deserves a lingering close). */
static bool conn_serve(const server *srv, http_conn *c) {
    /* Bounded by the timeouts: each pass serves one request or ends. */
    for (;;) {
        http_request req;
        size_t head_len = 0;
        int status = 0;
        conn_reset_request(c);
        if (conn_read_head(c, srv, &req, &head_len, &status) < 0) {
            if (status == 0)
                return false;
            http_respond_error(c, status, error_code_for_status(status), "%s", fawn_errmsg());
            return true;
        }
        conn_begin_request(c, &req, head_len);
        conn_dispatch(srv, c, &req);
        if (!conn_finish_request(c))
            return c->responded && !c->failed;
    }
}

/* Half-closes, then reads and drops what the peer still sends for a moment,
 * so that unread input does not turn close() into a reset that destroys the
 * response in flight. */
static void conn_linger(http_conn *c) {
    if (shutdown(c->fd, SHUT_WR) < 0)
        return;
    int linger_ms = c->io_timeout_ms < HTTP_LINGER_MS ? c->io_timeout_ms : HTTP_LINGER_MS;
    int64_t deadline = fawn_now_ms() + linger_ms;
    char scratch[HTTP_DRAIN_CHUNK];
    for (size_t dropped = 0; dropped < HTTP_LINGER_BYTES;) {
        ssize_t n = http_conn_recv(c, scratch, sizeof scratch, deadline, false);
        if (n <= 0)
            return;
        dropped += (size_t)n;
    }
}

static void server_release(server *srv) {
    pthread_mutex_lock(&srv->lock);
    if (atomic_fetch_sub(&srv->active, 1) == 1)
        pthread_cond_broadcast(&srv->idle);
    pthread_mutex_unlock(&srv->lock);
}

static void *conn_thread(void *arg) {
    conn_job *job = arg;
    server *srv = job->srv;
    if (conn_serve(srv, &job->c))
        conn_linger(&job->c);
    close(job->c.fd);
    free(job->c.buf);
    free(job);
    server_release(srv);
    return NULL;
}

/* ---- accepting ---------------------------------------------------------- */

static void server_reject_busy(const server *srv, int fd) {
    http_conn c = {.fd = fd, .stop_fd = -1, .io_timeout_ms = HTTP_REJECT_TIMEOUT_MS};
    http_respond_error(&c, 503, "busy", "too many connections (limit %zu)",
                       srv->opts.max_connections);
    shutdown(fd, SHUT_WR);
    char scratch[HTTP_DRAIN_CHUNK];
    (void)!recv(fd, scratch, sizeof scratch, MSG_DONTWAIT);
    close(fd);
}

static int conn_job_new(conn_job **out, server *srv, int fd) {
    conn_job *job = calloc(1, sizeof *job);
    char *buf = malloc(HTTP_MAX_HEAD_BYTES);
    if (!job || !buf) {
        free(job);
        free(buf);
        return fawn_err(FAWN_ENOMEM, "out of memory for a connection");
    }
    job->srv = srv;
    job->c = (http_conn){.fd = fd,
                         .stop_fd = atomic_load(&stop_fd),
                         .io_timeout_ms = srv->opts.io_timeout_ms,
                         .buf = buf};
    *out = job;
    return 0;
}

/* Starts a detached thread with every signal blocked (signals are for the
 * main thread) and a small stack. */
static int conn_thread_start(conn_job *job) {
    pthread_attr_t attr;
    if (pthread_attr_init(&attr) != 0)
        return fawn_err(FAWN_ENOMEM, "pthread_attr_init failed");
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, HTTP_THREAD_STACK);
    sigset_t all, saved;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &saved);
    pthread_t tid;
    int e = pthread_create(&tid, &attr, conn_thread, job);
    pthread_sigmask(SIG_SETMASK, &saved, NULL);
    pthread_attr_destroy(&attr);
    if (e != 0)
        return fawn_err_sys(FAWN_EIO, e, "pthread_create");
    return 0;
}

static void server_admit(server *srv, int fd) {
    if (atomic_load(&srv->active) >= srv->opts.max_connections) {
        server_reject_busy(srv, fd);
        return;
    }
    int one = 1;
    /* Fails harmlessly on unix sockets; on TCP, chunks must not wait for ACKs. */
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    conn_job *job = NULL;
    atomic_fetch_add(&srv->active, 1);
    int r = conn_job_new(&job, srv, fd);
    if (r == 0 && conn_thread_start(job) < 0) {
        /* No thread to be had (the sandbox's process limit is exhausted, say
         * by a fork bomb): serve one request here, so a kill or a shutdown
         * can still get through. */
        log_warn("http", "serving a connection on the accept thread: %s", fawn_errmsg());
        job->c.single_request = true;
        conn_thread(job);
        return;
    }
    if (r < 0) {
        log_warn("http", "cannot serve a connection: %s", fawn_errmsg());
        if (job)
            free(job->c.buf);
        free(job);
        server_release(srv);
        server_reject_busy(srv, fd);
    }
}

static bool accept_error_transient(int e) {
    switch (e) {
    case EINTR:
    case EAGAIN:
    case ECONNABORTED:
    case EPROTO:
    case EPERM:
    case ENETDOWN:
    case ENOPROTOOPT:
    case EHOSTDOWN:
    case ENONET:
    case EHOSTUNREACH:
    case EOPNOTSUPP:
    case ENETUNREACH: return true;
    default: return false;
    }
}

static bool accept_error_exhaustion(int e) {
    return e == EMFILE || e == ENFILE || e == ENOBUFS || e == ENOMEM;
}

static int server_accept_one(server *srv) {
    int fd = accept4(srv->opts.listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd >= 0) {
        server_admit(srv, fd);
        return 0;
    }
    int e = errno;
    if (accept_error_transient(e))
        return 0;
    if (!accept_error_exhaustion(e))
        return fawn_err_sys(FAWN_EIO, e, "accept");
    log_warn("http", "accept: %s; pausing", strerror(e));
    struct pollfd p = {.fd = atomic_load(&stop_fd), .events = POLLIN};
    (void)poll(&p, 1, HTTP_ACCEPT_BACKOFF_MS);
    return 0;
}

static int server_accept_loop(server *srv) {
    /* Runs until a stop or a failure of the listening socket. */
    for (;;) {
        if (atomic_load(&stop_requested))
            return 0;
        struct pollfd p[2] = {{.fd = srv->opts.listen_fd, .events = POLLIN},
                              {.fd = atomic_load(&stop_fd), .events = POLLIN}};
        if (poll(p, 2, -1) < 0) {
            if (errno == EINTR)
                continue;
            return fawn_err_sys(FAWN_EIO, errno, "poll on the listening socket");
        }
        if (p[1].revents)
            return 0;
        if (p[0].revents & (POLLERR | POLLHUP | POLLNVAL))
            return fawn_err(FAWN_EIO, "the listening socket failed");
        int r = server_accept_one(srv);
        if (r < 0)
            return r;
    }
}

static int server_opts_check(const http_server_opts *o) {
    if (o->listen_fd < 0 || !o->handler)
        return fawn_err(FAWN_EINVAL, "http server needs a listening socket and a handler");
    if (o->max_connections == 0 || o->idle_timeout_ms <= 0 || o->io_timeout_ms <= 0)
        return fawn_err(FAWN_EINVAL, "http server limits and timeouts must be positive");
    if (o->bearer_token && o->bearer_token[0] == '\0')
        return fawn_err(FAWN_EINVAL, "empty bearer token");
    return 0;
}

int http_serve(const http_server_opts *opts) {
    int r = server_opts_check(opts);
    if (r == 0)
        r = stop_fd_init();
    if (r < 0)
        return r;
    server srv = {.opts = *opts,
                  .token_len = opts->bearer_token ? strlen(opts->bearer_token) : 0,
                  .lock = PTHREAD_MUTEX_INITIALIZER,
                  .idle = PTHREAD_COND_INITIALIZER};
    r = server_accept_loop(&srv);
    /* Wake idle connections (also after a failure), then wait for all. */
    http_server_stop();
    pthread_mutex_lock(&srv.lock);
    while (atomic_load(&srv.active) > 0)
        pthread_cond_wait(&srv.idle, &srv.lock);
    pthread_mutex_unlock(&srv.lock);
    pthread_mutex_destroy(&srv.lock);
    pthread_cond_destroy(&srv.idle);
    stop_reset();
    return r;
}
