/* The credential broker's server: one listening socket per sandbox, one
 * accepting thread polling them all, one thread per call. A call is
 *   1. read (header, then a body of at most BROKER_REQUEST_MAX, within
 *      BROKER_READ_TIMEOUT_MS),
 *   2. attested (the kernel's word on the peer, sbx_attest_peer),
 *   3. matched to the run holding the sandbox (sbx_holding_find),
 *   4. checked against the CLI's allow-list (broker_policy_check),
 *   5. given a slot (global and per-sandbox limits),
 *   6. run (run.c: fixed binary, no shell, credentials as environment),
 *   7. answered and audited (broker_audit). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker/broker_internal.h"

#ifndef SO_PEERPIDFD
#define SO_PEERPIDFD 77
#endif

/* A request arrives at once from the shim, which reads its stdin before it
 * connects; past this a slow peer is cut (it holds a thread). */
#define BROKER_READ_TIMEOUT_MS 10000
/* Sandboxes with a socket at once; past this the oldest is dropped (its
 * next lease makes it again). */
#define BROKER_SANDBOXES_MAX 4096
/* Connections served at once beyond those running a CLI (being read,
 * attested, answered busy), in all and per sandbox: a sandbox that opens
 * connections and sends nothing holds them until BROKER_READ_TIMEOUT_MS,
 * never the others' share. Past either, a connection is closed unread. */
#define BROKER_CONNECTIONS_SPARE 64
#define BROKER_CONNECTIONS_SPARE_PER_SANDBOX 4
#define BROKER_SOCKET_NAME "broker.sock"

typedef struct listener {
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
    int fd;
    unsigned running;     /* calls running their CLI now */
    unsigned connections; /* connections being served */
} listener;

struct broker {
    broker_config cfg;
    const fawn_config *fcfg;
    sbx_manager *m;
    pthread_mutex_t mu;
    pthread_cond_t idle; /* a connection ended */
    listener *ls;
    size_t n_ls;
    unsigned running, connections;
    int wake[2];
    atomic_bool stopping;
    pthread_t acceptor;
    int audit_fd;
};

typedef struct conn {
    broker *b;
    int fd;
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
} conn;

/* ---- sockets and shims in a sandbox's broker directory ---- */

static int write_shim(int dirfd, const char *name) {
    char tmp[96], text[256];
    snprintf(tmp, sizeof tmp, ".%s.%d", name, (int)gettid());
    int n = snprintf(text, sizeof text,
                     "#!/bin/sh\nexec " SBX_BROKER_MOUNT "/fawn broker-call %s \"$@\"\n", name);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0755);
    int r = fd < 0 ? fawn_err_sys(FAWN_EIO, errno, "create shim %s", name)
                   : fawn_write_all(fd, text, (size_t)n);
    if (fd >= 0 && fchmod(fd, 0755) < 0 && r == 0)
        r = fawn_err_sys(FAWN_EIO, errno, "chmod shim %s", name);
    if (fd >= 0)
        close(fd);
    if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "install shim %s", name);
    if (r < 0)
        unlinkat(dirfd, tmp, 0);
    return r;
}

/* Removes shims of CLIs no longer configured (a call through one would be
 * refused anyway; the sandbox's PATH should not offer it). */
static void remove_stale_shims(broker *b, int dirfd) {
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && !broker_config_find(&b->cfg, de->d_name))
            unlinkat(dirfd, de->d_name, 0);
    closedir(d);
}

static int write_shims(broker *b, const char *dir) {
    char bin[PATH_MAX];
    if (snprintf(bin, sizeof bin, "%s/bin", dir) >= (int)sizeof bin)
        return fawn_err(FAWN_EINVAL, "path too long");
    if (mkdir(bin, 0755) < 0 && errno != EEXIST)
        return fawn_err_sys(FAWN_EIO, errno, "mkdir %s", bin);
    _cleanup_close_ int dirfd = open(bin, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", bin);
    remove_stale_shims(b, dirfd);
    for (size_t i = 0; i < b->cfg.n_clis; i++) {
        int r = write_shim(dirfd, b->cfg.clis[i].name);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Listens at dir/broker.sock (bound under a temporary name, then renamed
 * into place), connectable by the sandbox's uid: only that sandbox sees dir. */
static int listen_in(int *out, const char *dir) {
    *out = -1;
    _cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", dir);
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".broker.%d.sock", (int)gettid());
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", dirfd, tmp);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "socket");
    unlinkat(dirfd, tmp, 0);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 64) < 0 ||
        fchmodat(dirfd, tmp, 0666, 0) < 0 || renameat(dirfd, tmp, dirfd, BROKER_SOCKET_NAME) < 0) {
        int e = errno;
        unlinkat(dirfd, tmp, 0);
        close(fd);
        return fawn_err_sys(FAWN_EIO, e, "listen in %s", dir);
    }
    *out = fd;
    return 0;
}

static listener *listener_find(broker *b, const char *sandbox_id) {
    for (size_t i = 0; i < b->n_ls; i++)
        if (strcmp(b->ls[i].sandbox_id, sandbox_id) == 0)
            return &b->ls[i];
    return NULL;
}

/* Installs fd as sandbox_id's listener (replacing an older generation's).
 * Called with b->mu held. */
static void listener_put(broker *b, const sbx_box *box, int fd) {
    listener *l = listener_find(b, box->sandbox_id);
    if (!l && b->n_ls == BROKER_SANDBOXES_MAX) {
        close(b->ls[0].fd);
        memmove(&b->ls[0], &b->ls[1], (b->n_ls - 1) * sizeof *b->ls);
        b->n_ls--;
    }
    if (!l) {
        l = &b->ls[b->n_ls++];
        *l = (listener){.fd = -1};
        memcpy(l->sandbox_id, box->sandbox_id, sizeof l->sandbox_id);
    }
    if (l->fd >= 0)
        close(l->fd);
    l->fd = fd;
    memcpy(l->generation, box->generation, sizeof l->generation);
    char c = 1;
    if (write(b->wake[1], &c, 1) < 0 && errno != EAGAIN)
        log_warn("broker", "waking the acceptor: %s", strerror(errno));
}

void broker_sandbox_bound(void *ctx, const char *user, const char *thread, const sbx_box *box) {
    broker *b = ctx;
    (void)user;
    (void)thread;
    pthread_mutex_lock(&b->mu);
    listener *l = listener_find(b, box->sandbox_id);
    bool current = l && l->fd >= 0 && strcmp(l->generation, box->generation) == 0;
    pthread_mutex_unlock(&b->mu);
    if (current)
        return;
    char dir[PATH_MAX];
    int fd = -1;
    int r = sbx_broker_dir(dir, b->m, box->sandbox_id);
    if (r == 0)
        r = write_shims(b, dir);
    if (r == 0)
        r = listen_in(&fd, dir);
    if (r < 0) {
        log_warn("broker", "sandbox %s: no credential broker: %s", box->sandbox_id, fawn_errmsg());
        return;
    }
    pthread_mutex_lock(&b->mu);
    listener_put(b, box, fd);
    pthread_mutex_unlock(&b->mu);
}

/* ---- serving one connection ---- */

/* Reads exactly n bytes before deadline; FAWN_ETIMEDOUT, FAWN_EPROTO at EOF. */
static int read_full(int fd, void *buf, size_t n, int64_t deadline) {
    size_t got = 0;
    while (got < n) {
        int64_t left = deadline - fawn_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) == 0)
            return fawn_err(FAWN_ETIMEDOUT, "the request did not arrive in time");
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return fawn_err(FAWN_EPROTO, "the caller closed before its request was whole");
        got += (size_t)k;
    }
    return 0;
}

static int read_request(broker_request *req, int fd) {
    memset(req, 0, sizeof *req);
    uint8_t hdr[BROKER_HEADER_LEN];
    int64_t deadline = fawn_now_ms() + BROKER_READ_TIMEOUT_MS;
    size_t len = 0;
    int r = read_full(fd, hdr, sizeof hdr, deadline);
    if (r == 0)
        r = broker_header_parse(&len, hdr, BROKER_REQUEST_MAX);
    if (r < 0)
        return r;
    _cleanup_free_ uint8_t *body = malloc(len ? len : 1);
    if (!body)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    r = read_full(fd, body, len, deadline);
    return r < 0 ? r : broker_request_parse(req, body, len);
}

static void reply(int fd, int code, unsigned flags, const char *out, size_t out_len,
                  const char *err, size_t err_len) {
    fbuf msg = {.limit = BROKER_REPLY_MAX + BROKER_HEADER_LEN};
    broker_reply rep = {.exit_code = code,
                        .flags = flags,
                        .out = out,
                        .out_len = out_len,
                        .err = err,
                        .err_len = err_len};
    int r = broker_reply_encode(&msg, &rep);
    int flags_fd = fcntl(fd, F_GETFL);
    if (flags_fd >= 0)
        (void)fcntl(fd, F_SETFL, flags_fd & ~O_NONBLOCK);
    for (size_t sent = 0; r == 0 && sent < msg.len;) {
        ssize_t n = send(fd, msg.data + sent, msg.len - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            r = fawn_err_sys(FAWN_EIO, errno, "send");
        else
            sent += (size_t)n;
    }
    if (r < 0)
        log_debug("broker", "the reply was not delivered: %s", fawn_errmsg());
    fbuf_free(&msg);
}

static void refuse(int fd, int code, const char *why) {
    char text[512];
    int n = snprintf(text, sizeof text, "fawn broker: %s\n", why);
    reply(fd, code, 0, NULL, 0, text, (size_t)(n < (int)sizeof text ? n : (int)sizeof text - 1));
}

static int peer_of(sbx_peer *out, int fd) {
    struct ucred cred;
    socklen_t len = sizeof cred;
    *out = (sbx_peer){.pidfd = -1};
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "SO_PEERCRED");
    /* The kernel's pidfd of the connecting process (Linux 6.5+); before
     * that, one opened now: a process that holds this pid while every fact
     * is read, so the facts are one process's, though a peer that exited
     * and whose pid a process of the sandbox took at once would pass. */
    int pidfd = -1;
    len = sizeof pidfd;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERPIDFD, &pidfd, &len) < 0)
        pidfd = (int)syscall(SYS_pidfd_open, cred.pid, 0);
    *out = (sbx_peer){.pid = cred.pid, .uid = cred.uid, .gid = cred.gid, .pidfd = pidfd};
    return 0;
}

/* Steps 2-3: the caller is a process of the socket's sandbox, held by a run. */
static int admit(conn *c, sbx_holding *who, int *code, char *why, size_t whysz) {
    sbx_peer peer;
    enum sbx_attestation a = SBX_ATTEST_UNKNOWN;
    if (peer_of(&peer, c->fd) == 0 && sbx_attest_peer(&a, c->b->m, c->sandbox_id, &peer) < 0)
        a = SBX_ATTEST_UNKNOWN;
    if (peer.pidfd >= 0)
        close(peer.pidfd);
    *code = BROKER_EXIT_REFUSED;
    if (a == SBX_REFUSED) {
        if (sbx_fence_generation(c->b->m, c->sandbox_id, c->generation,
                                 "a broker caller failed attestation") < 0)
            log_warn("broker", "sandbox %s: the fence is not durable", c->sandbox_id);
        snprintf(why, whysz,
                 "the caller is not a process of this sandbox (attestation refused; "
                 "the sandbox is quarantined)");
        return FAWN_EPERM;
    }
    if (a != SBX_ATTESTED) {
        snprintf(why, whysz, "the caller could not be attested (refused: unknown is not yes)");
        return FAWN_EPERM;
    }
    if (sbx_holding_find(who, c->b->m, c->sandbox_id, c->generation) < 0) {
        snprintf(why, whysz,
                 "no run holds this sandbox now: credentials are usable only while "
                 "a run leases it");
        return FAWN_EPERM;
    }
    return 0;
}

/* Step 5: a slot, or busy. */
static bool slot_take(broker *b, const char *sandbox_id) {
    pthread_mutex_lock(&b->mu);
    listener *l = listener_find(b, sandbox_id);
    bool ok = l && b->running < b->cfg.max_concurrent &&
              l->running < b->cfg.max_concurrent_per_sandbox;
    if (ok) {
        b->running++;
        l->running++;
    }
    pthread_mutex_unlock(&b->mu);
    return ok;
}

static void slot_give(broker *b, const char *sandbox_id) {
    pthread_mutex_lock(&b->mu);
    listener *l = listener_find(b, sandbox_id);
    b->running--;
    if (l && l->running)
        l->running--;
    pthread_mutex_unlock(&b->mu);
}

/* Writes why (formatted) and returns FAWN_EPERM: a refusal. */
static int deny(char *why, size_t whysz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int deny(char *why, size_t whysz, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whysz, fmt, ap);
    va_end(ap);
    return FAWN_EPERM;
}

/* Steps 2-5: 0 with *cli, *who and rec->rule set and a slot taken; else
 * the refusal's exit code in *code and its reason in why. */
static int authorize(const broker_cli **cli, sbx_holding *who, audit_record *rec, int *code,
                     conn *c, const broker_request *req, char *why, size_t whysz) {
    broker *b = c->b;
    *cli = NULL;
    *code = BROKER_EXIT_REFUSED;
    int r = admit(c, who, code, why, whysz);
    if (r < 0)
        return r;
    if (!(*cli = broker_config_find(&b->cfg, req->name)))
        return deny(why, whysz, "%s is not a brokered command", req->name);
    if (!(rec->rule = broker_policy_check(*cli, req->argv, req->argc)))
        return deny(why, whysz,
                    "this %s subcommand is not allowed here (only what broker.clis allows)",
                    (*cli)->name);
    if (!slot_take(b, c->sandbox_id)) {
        *code = BROKER_EXIT_BUSY;
        return deny(why, whysz, "busy: too many brokered calls at once; try again later");
    }
    return 0;
}

/* Steps 6-7 for an authorized call (its slot is given back here). */
static void run_and_answer(conn *c, const broker_cli *cli, const broker_request *req,
                           const sbx_holding *who, audit_record *rec) {
    broker *b = c->b;
    run_result res;
    run_ctx rc = {.m = b->m,
                  .home = b->fcfg->home,
                  .cli = cli,
                  .req = req,
                  .user = who->user,
                  .sandbox_id = c->sandbox_id,
                  .generation = c->generation,
                  .stop = &b->stopping};
    broker_run(&res, &rc);
    slot_give(b, c->sandbox_id);
    reply(c->fd, res.exit_code, res.flags, res.out.data, res.out.len, res.err.data, res.err.len);
    rec->exit_code = res.exit_code;
    rec->out_bytes = res.out_total;
    rec->err_bytes = res.err_total;
    rec->flags = res.flags;
    rec->refusal = res.refusal[0] ? res.refusal : NULL;
    broker_audit(b->audit_fd, rec);
    run_result_free(&res);
}

static void serve_call(conn *c) {
    broker_request req;
    sbx_holding who = {0};
    audit_record rec = {.sandbox_id = c->sandbox_id, .who = &who};
    char why[300];
    const broker_cli *cli = NULL;
    int code = BROKER_EXIT_REFUSED;
    int64_t start = fawn_now_ms();
    int r = read_request(&req, c->fd);
    if (r < 0)
        snprintf(why, sizeof why, "%s",
                 r == FAWN_E2BIG ? "the request is larger than 1 MiB" : fawn_errmsg());
    rec.cli = req.name;
    rec.argc = req.argc;
    rec.in_bytes = req.in_len;
    if (r == 0)
        r = authorize(&cli, &who, &rec, &code, c, &req, why, sizeof why);
    if (r == 0) {
        rec.ms = fawn_now_ms() - start; /* rewritten below once it ran */
        run_and_answer(c, cli, &req, &who, &rec);
    } else {
        refuse(c->fd, code, why);
        rec.refusal = why;
        rec.exit_code = code;
        rec.ms = fawn_now_ms() - start;
        broker_audit(c->b->audit_fd, &rec);
    }
    broker_request_clear(&req);
}

static void *conn_main(void *arg) {
    conn *c = arg;
    serve_call(c);
    close(c->fd);
    pthread_mutex_lock(&c->b->mu);
    listener *l = listener_find(c->b, c->sandbox_id);
    if (l && l->connections)
        l->connections--;
    c->b->connections--;
    pthread_cond_broadcast(&c->b->idle);
    pthread_mutex_unlock(&c->b->mu);
    free(c);
    return NULL;
}

/* Accepts on l (b->mu held) and starts its connection's thread. */
static void accept_one(broker *b, listener *l) {
    int fd = accept4(l->fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    bool room = b->connections < b->cfg.max_concurrent + BROKER_CONNECTIONS_SPARE &&
                l->connections <
                    b->cfg.max_concurrent_per_sandbox + BROKER_CONNECTIONS_SPARE_PER_SANDBOX;
    conn *c = room ? calloc(1, sizeof *c) : NULL;
    pthread_t t;
    pthread_attr_t attr;
    if (c) {
        *c = (conn){.b = b, .fd = fd};
        memcpy(c->sandbox_id, l->sandbox_id, sizeof c->sandbox_id);
        memcpy(c->generation, l->generation, sizeof c->generation);
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        if (pthread_create(&t, &attr, conn_main, c) == 0) {
            b->connections++;
            l->connections++;
            c = NULL;
            fd = -1;
        }
        pthread_attr_destroy(&attr);
    }
    free(c);
    if (fd >= 0) {
        log_warn("broker", "sandbox %s: connection dropped: %u being served", l->sandbox_id,
                 b->connections);
        close(fd);
    }
}

static void *acceptor_main(void *arg) {
    broker *b = arg;
    struct pollfd *p = NULL;
    for (;;) {
        pthread_mutex_lock(&b->mu);
        if (atomic_load(&b->stopping)) {
            pthread_mutex_unlock(&b->mu);
            break;
        }
        size_t n = b->n_ls;
        struct pollfd *grown = realloc(p, (n + 1) * sizeof *p);
        if (grown)
            p = grown;
        for (size_t i = 0; grown && i < n; i++)
            p[i + 1] = (struct pollfd){.fd = b->ls[i].fd, .events = POLLIN};
        pthread_mutex_unlock(&b->mu);
        if (!grown)
            break;
        p[0] = (struct pollfd){.fd = b->wake[0], .events = POLLIN};
        if (poll(p, n + 1, -1) < 0 && errno != EINTR)
            break;
        char drain[64];
        if (p[0].revents)
            while (read(b->wake[0], drain, sizeof drain) > 0) {
            }
        pthread_mutex_lock(&b->mu);
        for (size_t i = 0; i < n && i < b->n_ls && !atomic_load(&b->stopping); i++)
            if (p[i + 1].revents && b->ls[i].fd == p[i + 1].fd)
                accept_one(b, &b->ls[i]);
        pthread_mutex_unlock(&b->mu);
    }
    free(p);
    return NULL;
}

static int audit_open(int *out, const char *home) {
    char path[PATH_MAX];
    *out = -1;
    if (snprintf(path, sizeof path, "%s/audit", home) >= (int)sizeof path)
        return fawn_err(FAWN_EINVAL, "home path too long");
    if (mkdir(path, 0700) < 0 && errno != EEXIST)
        return fawn_err_sys(FAWN_EIO, errno, "mkdir %s", path);
    strncat(path, "/broker.log", sizeof path - strlen(path) - 1);
    *out = open(path, O_WRONLY | O_CREAT | O_APPEND | O_NOFOLLOW | O_CLOEXEC, 0600);
    return *out < 0 ? fawn_err_sys(FAWN_EIO, errno, "open %s", path) : 0;
}

int broker_new(broker **out, const fawn_config *cfg, sbx_manager *m) {
    *out = NULL;
    broker *b = calloc(1, sizeof *b);
    if (!b)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    b->wake[0] = b->wake[1] = b->audit_fd = -1;
    int r = broker_config_parse(&b->cfg, cfg->broker);
    if (r == 0 && b->cfg.n_clis > 0 && !sbx_broker_supported(m))
        r = fawn_err(FAWN_ECONFIG, "broker.clis: the sandbox provider cannot host the credential "
                                   "broker (it needs sandbox.provider: local)");
    if (r < 0 || b->cfg.n_clis == 0) {
        broker_config_free(&b->cfg);
        free(b);
        return r;
    }
    b->fcfg = cfg;
    b->m = m;
    b->ls = calloc(BROKER_SANDBOXES_MAX, sizeof *b->ls);
    pthread_mutex_init(&b->mu, NULL);
    pthread_cond_init(&b->idle, NULL);
    r = b->ls ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && pipe2(b->wake, O_CLOEXEC | O_NONBLOCK) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "pipe");
    if (r == 0)
        r = audit_open(&b->audit_fd, cfg->home);
    if (r == 0 && pthread_create(&b->acceptor, NULL, acceptor_main, b) != 0)
        r = fawn_err(FAWN_EIO, "cannot start the broker's thread");
    if (r < 0) {
        b->acceptor = 0;
        broker_free(b);
        return r;
    }
    sbx_manager_on_bound(m, broker_sandbox_bound, b);
    *out = b;
    return 0;
}

void broker_free(broker *b) {
    if (!b)
        return;
    pthread_mutex_lock(&b->mu);
    atomic_store(&b->stopping, true);
    pthread_mutex_unlock(&b->mu);
    if (b->wake[1] >= 0 && write(b->wake[1], "x", 1) < 0)
        log_debug("broker", "waking the acceptor: %s", strerror(errno));
    if (b->acceptor)
        pthread_join(b->acceptor, NULL);
    if (b->m)
        sbx_manager_on_bound(b->m, NULL, NULL);
    /* Calls end once their lease goes or their timeout passes. */
    pthread_mutex_lock(&b->mu);
    while (b->connections > 0)
        pthread_cond_wait(&b->idle, &b->mu);
    pthread_mutex_unlock(&b->mu);
    for (size_t i = 0; i < b->n_ls; i++)
        close(b->ls[i].fd);
    for (int i = 0; i < 2; i++)
        if (b->wake[i] >= 0)
            close(b->wake[i]);
    if (b->audit_fd >= 0)
        close(b->audit_fd);
    pthread_mutex_destroy(&b->mu);
    pthread_cond_destroy(&b->idle);
    broker_config_free(&b->cfg);
    free(b->ls);
    free(b);
}
