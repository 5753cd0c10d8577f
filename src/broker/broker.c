/* The credential broker's server: one listening socket per sandbox (or,
 * for boxes that call over the network, one TCP socket for all), one
 * accepting thread polling them all, one thread per call. A call is
 *   1. read (over TCP its proof line first; header, then a body of at most
 *      BROKER_REQUEST_MAX, within BROKER_READ_TIMEOUT_MS),
 *   2. attested (the kernel's word on the peer, sbx_attest_peer; over TCP
 *      its proof, sbx_attest_remote, and its nonce taken once),
 *   3. matched to the run holding the sandbox (sbx_holding_find),
 *   4. checked against the CLI's allow-list (broker_policy_check),
 *   5. given a slot (global and per-sandbox limits),
 *   6. run (run.c: fixed binary, no shell, credentials as environment),
 *   7. answered and audited (broker_audit). */
#include <arpa/inet.h>
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
#include <time.h>
#include <unistd.h>

#include "box/attest.h"
#include "sandbox/client.h"

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

typedef struct listener {
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
    int fd;
    unsigned running;     /* calls running their CLI now */
    unsigned connections; /* connections being served */
} listener;

/* Connections being served over TCP from one source address: a pod's, as a
 * listener's count is a sandbox's, so that one pod holding connections
 * open never takes the others' share. */
typedef struct tcp_peer {
    char address[INET6_ADDRSTRLEN];
    unsigned connections;
} tcp_peer;
/* Addresses with connections at once: never more than connections in all. */
#define BROKER_PEERS_MAX (BROKER_CONCURRENT_MAX + BROKER_CONNECTIONS_SPARE)

struct broker {
    broker_config cfg;
    const fawn_config *fcfg;
    sbx_manager *m;
    pthread_mutex_t mu;
    pthread_cond_t idle; /* a connection ended */
    listener *ls;
    size_t n_ls;
    unsigned running, connections;
    int tcp_fd;            /* broker.listen's socket, or -1 */
    broker_nonces *nonces; /* with tcp_fd */
    tcp_peer *peers;       /* TCP connections being served, per source address */
    size_t n_peers;
    int wake[2];
    atomic_bool stopping;
    pthread_t acceptor;
    int audit_fd;
};

typedef struct conn {
    broker *b;
    int fd;
    bool remote;                    /* over TCP: the sandbox is what its proof attests */
    char address[INET6_ADDRSTRLEN]; /* a remote caller's IP address */
    char sandbox_id[17];            /* "" until a remote caller is attested */
    char generation[SBX_GENERATION_LEN + 1];
} conn;

/* ---- a sandbox's listener ---- */

/* Writes the configured CLIs' shims into dir/bin. */
static int write_shims(broker *b, const char *dir) {
    char *names[BROKER_CLIS_MAX];
    for (size_t i = 0; i < b->cfg.n_clis; i++)
        names[i] = b->cfg.clis[i].name;
    return broker_shims_write(dir, names, b->cfg.n_clis);
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
        if (b->ls[0].fd >= 0)
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
    bool remote = sbx_broker_remote(b->m);
    bool current = l && (remote || l->fd >= 0) && strcmp(l->generation, box->generation) == 0;
    if (!current && remote)
        listener_put(b, box, -1); /* its calls come over TCP: an entry for its limits */
    pthread_mutex_unlock(&b->mu);
    if (current || remote)
        return;
    char dir[PATH_MAX];
    int fd = -1;
    int r = sbx_broker_dir(dir, b->m, box->sandbox_id);
    if (r == 0)
        r = write_shims(b, dir);
    if (r == 0)
        r = broker_socket_listen(&fd, dir);
    if (r < 0) {
        log_warn("broker", "sandbox %s: no credential broker: %s", box->sandbox_id, fawn_errmsg());
        return;
    }
    pthread_mutex_lock(&b->mu);
    listener_put(b, box, fd);
    pthread_mutex_unlock(&b->mu);
}

/* ---- serving one connection ---- */

/* Reads the request (over TCP, its proof line first) and parses it; the
 * hash of the request message into sha (remote calls only). */
static int read_request(broker_request *req, char proof[BROKER_PROOF_LEN], char sha[65],
                        const conn *c) {
    memset(req, 0, sizeof *req);
    sha[0] = '\0';
    int64_t deadline = fawn_now_ms() + BROKER_READ_TIMEOUT_MS;
    fbuf msg = {.limit = BROKER_REQUEST_MAX + BROKER_HEADER_LEN};
    int r = c->remote ? broker_read_full(c->fd, proof, BROKER_PROOF_LEN, deadline) : 0;
    if (r == 0)
        r = broker_read_message(&msg, c->fd, BROKER_REQUEST_MAX, deadline);
    if (r == 0 && c->remote)
        fawn_sha256_hex(sha, msg.data, msg.len);
    if (r == 0)
        r = broker_request_parse(req, (const uint8_t *)msg.data + BROKER_HEADER_LEN,
                                 msg.len - BROKER_HEADER_LEN);
    fbuf_free(&msg);
    return r;
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

/* The provider's answer on a remote caller held by a run; a refusal fences
 * the generation. 0 when attested. */
static int attest_remote(conn *c, const broker_proof *p, const char *gen, const char *sha,
                         const sbx_holding *who, char *why, size_t whysz) {
    sbx_remote_caller rc = {.sandbox_id = p->sandbox_id,
                            .generation = gen,
                            .user = who->user,
                            .address = c->address,
                            .timestamp = p->timestamp,
                            .nonce = p->nonce,
                            .mac = p->mac,
                            .request_sha256 = sha};
    enum sbx_attestation a = SBX_ATTEST_UNKNOWN;
    if (sbx_attest_remote(&a, c->b->m, &rc) < 0)
        a = SBX_ATTEST_UNKNOWN;
    if (a == SBX_REFUSED) {
        snprintf(c->sandbox_id, sizeof c->sandbox_id, "%s", p->sandbox_id);
        if (sbx_fence_generation(c->b->m, p->sandbox_id, gen,
                                 "a broker caller failed attestation") < 0)
            log_warn("broker", "sandbox %s: the fence is not durable", p->sandbox_id);
        return deny(why, whysz,
                    "the caller's proof is not this sandbox's pod's (attestation refused; "
                    "the sandbox is quarantined)");
    }
    if (a != SBX_ATTESTED)
        return deny(why, whysz, "the caller could not be attested (refused: unknown is not yes)");
    return 0;
}

/* Steps 2-3 over TCP: the proof names a sandbox a run holds, the provider
 * attests it by its records, and the proof is taken once. */
static int admit_remote(conn *c, const char proof[BROKER_PROOF_LEN], const char *sha,
                        sbx_holding *who, char *why, size_t whysz) {
    broker_proof p;
    char gen[SBX_GENERATION_LEN + 1] = "";
    int64_t now = (int64_t)time(NULL);
    if (broker_proof_parse(&p, proof, BROKER_PROOF_LEN) < 0)
        return deny(why, whysz, "%s", fawn_errmsg());
    if (!broker_proof_current(p.timestamp, now))
        return deny(why, whysz, "the call's proof is not from now (clocks %d s apart or more)",
                    BROKER_PROOF_WINDOW_S);
    if (broker_nonce_seen(c->b->nonces, p.nonce, now))
        return deny(why, whysz, "the proof was used before (a replay)");
    if (box_attest_generation(gen, p.pod_uid) < 0 ||
        sbx_holding_find(who, c->b->m, p.sandbox_id, gen) < 0) {
        memset(who, 0, sizeof *who);
        return deny(why, whysz,
                    "no run holds this sandbox's pod now: credentials are usable only while "
                    "a run leases it");
    }
    int r = attest_remote(c, &p, gen, sha, who, why, whysz);
    if (r < 0) {
        memset(who, 0, sizeof *who);
        return r;
    }
    snprintf(c->sandbox_id, sizeof c->sandbox_id, "%s", p.sandbox_id);
    snprintf(c->generation, sizeof c->generation, "%s", gen);
    r = broker_nonce_admit(c->b->nonces, p.nonce, p.timestamp, now);
    if (r == FAWN_EBUSY)
        return deny(why, whysz, "busy: too many brokered calls at once; try again later");
    return r < 0 ? deny(why, whysz, "%s", fawn_errmsg()) : 0;
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

/* Steps 2-5: 0 with *cli, *who and rec->rule set and a slot taken; else
 * the refusal's exit code in *code and its reason in why. */
static int authorize(const broker_cli **cli, sbx_holding *who, audit_record *rec, int *code,
                     conn *c, const broker_request *req, const char *proof, const char *sha,
                     char *why, size_t whysz) {
    broker *b = c->b;
    *cli = NULL;
    *code = BROKER_EXIT_REFUSED;
    int r = c->remote ? admit_remote(c, proof, sha, who, why, whysz)
                      : admit(c, who, code, why, whysz);
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
    broker_send_reply(c->fd, res.exit_code, res.flags, res.out.data, res.out.len, res.err.data,
                      res.err.len);
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
    char why[300], proof[BROKER_PROOF_LEN], sha[65];
    const broker_cli *cli = NULL;
    int code = BROKER_EXIT_REFUSED;
    int64_t start = fawn_now_ms();
    int r = read_request(&req, proof, sha, c);
    if (r < 0)
        snprintf(why, sizeof why, "%s",
                 r == FAWN_E2BIG ? "the request is larger than 1 MiB" : fawn_errmsg());
    rec.cli = req.name;
    rec.argc = req.argc;
    rec.in_bytes = req.in_len;
    if (r == 0)
        r = authorize(&cli, &who, &rec, &code, c, &req, proof, sha, why, sizeof why);
    if (r == 0) {
        rec.ms = fawn_now_ms() - start; /* rewritten below once it ran */
        run_and_answer(c, cli, &req, &who, &rec);
    } else {
        broker_send_refusal(c->fd, code, why);
        rec.refusal = why;
        rec.exit_code = code;
        rec.ms = fawn_now_ms() - start;
        broker_audit(c->b->audit_fd, &rec);
    }
    broker_request_clear(&req);
}

/* A connection from address begins, if it has room (b->mu held). */
static bool peer_enter(broker *b, const char *address) {
    tcp_peer *p = NULL;
    for (size_t i = 0; i < b->n_peers && !p; i++)
        if (strcmp(b->peers[i].address, address) == 0)
            p = &b->peers[i];
    if (!p && b->n_peers < BROKER_PEERS_MAX) {
        p = &b->peers[b->n_peers++];
        *p = (tcp_peer){0};
        snprintf(p->address, sizeof p->address, "%s", address);
    }
    if (!p ||
        p->connections >= b->cfg.max_concurrent_per_sandbox + BROKER_CONNECTIONS_SPARE_PER_SANDBOX)
        return false;
    p->connections++;
    return true;
}

/* A connection from address ended (b->mu held). */
static void peer_leave(broker *b, const char *address) {
    for (size_t i = 0; i < b->n_peers; i++)
        if (strcmp(b->peers[i].address, address) == 0 && --b->peers[i].connections == 0) {
            b->peers[i] = b->peers[--b->n_peers];
            return;
        }
}

static void *conn_main(void *arg) {
    conn *c = arg;
    serve_call(c);
    close(c->fd);
    pthread_mutex_lock(&c->b->mu);
    listener *l = c->remote ? NULL : listener_find(c->b, c->sandbox_id);
    if (l && l->connections)
        l->connections--;
    if (c->remote)
        peer_leave(c->b, c->address);
    c->b->connections--;
    pthread_cond_broadcast(&c->b->idle);
    pthread_mutex_unlock(&c->b->mu);
    free(c);
    return NULL;
}

/* Starts c's thread (b->mu held); false (c is the caller's) when it cannot. */
static bool conn_start(conn *c) {
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    bool ok = pthread_create(&t, &attr, conn_main, c) == 0;
    pthread_attr_destroy(&attr);
    if (ok)
        c->b->connections++;
    return ok;
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
    if (c) {
        *c = (conn){.b = b, .fd = fd};
        memcpy(c->sandbox_id, l->sandbox_id, sizeof c->sandbox_id);
        memcpy(c->generation, l->generation, sizeof c->generation);
        if (conn_start(c)) {
            l->connections++;
            c = NULL;
            fd = -1;
        }
    }
    free(c);
    if (fd >= 0) {
        log_warn("broker", "sandbox %s: connection dropped: %u being served", l->sandbox_id,
                 b->connections);
        close(fd);
    }
}

/* The numeric text of a peer's IP address (an IPv4 address mapped into
 * IPv6 written as IPv4, as the API reports pod IPs). */
static void address_text(char out[INET6_ADDRSTRLEN], const struct sockaddr_storage *sa) {
    out[0] = '\0';
    if (sa->ss_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, INET6_ADDRSTRLEN);
    else if (sa->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        if (IN6_IS_ADDR_V4MAPPED(a))
            inet_ntop(AF_INET, &a->s6_addr[12], out, INET6_ADDRSTRLEN);
        else
            inet_ntop(AF_INET6, a, out, INET6_ADDRSTRLEN);
    }
}

/* Accepts on the TCP socket (b->mu held): which sandbox calls is known
 * only once its proof is read, so these connections count in all and per
 * source address. */
static void accept_remote(broker *b) {
    struct sockaddr_storage sa;
    socklen_t len = sizeof sa;
    int fd = accept4(b->tcp_fd, (struct sockaddr *)&sa, &len, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    char address[INET6_ADDRSTRLEN];
    address_text(address, &sa);
    bool room = b->connections < b->cfg.max_concurrent + BROKER_CONNECTIONS_SPARE &&
                peer_enter(b, address);
    conn *c = room ? calloc(1, sizeof *c) : NULL;
    if (c) {
        *c = (conn){.b = b, .fd = fd, .remote = true};
        memcpy(c->address, address, sizeof c->address);
        if (conn_start(c)) {
            c = NULL;
            fd = -1;
        }
    }
    if (room && fd >= 0)
        peer_leave(b, address);
    free(c);
    if (fd >= 0) {
        log_warn("broker", "a connection over TCP dropped: %u being served", b->connections);
        close(fd);
    }
}

/* The acceptor's poll set: the wake pipe, the TCP socket (-1: none), then
 * each listener's socket (-1 for a sandbox served over TCP). */
#define POLL_FIXED 2

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
        struct pollfd *grown = realloc(p, (n + POLL_FIXED) * sizeof *p);
        if (grown)
            p = grown;
        for (size_t i = 0; grown && i < n; i++)
            p[i + POLL_FIXED] = (struct pollfd){.fd = b->ls[i].fd, .events = POLLIN};
        pthread_mutex_unlock(&b->mu);
        if (!grown)
            break;
        p[0] = (struct pollfd){.fd = b->wake[0], .events = POLLIN};
        p[1] = (struct pollfd){.fd = b->tcp_fd, .events = POLLIN};
        if (poll(p, n + POLL_FIXED, -1) < 0 && errno != EINTR)
            break;
        char drain[64];
        if (p[0].revents)
            while (read(b->wake[0], drain, sizeof drain) > 0) {
            }
        pthread_mutex_lock(&b->mu);
        if (p[1].revents && !atomic_load(&b->stopping))
            accept_remote(b);
        for (size_t i = 0; i < n && i < b->n_ls && !atomic_load(&b->stopping); i++)
            if (p[i + POLL_FIXED].revents && b->ls[i].fd == p[i + POLL_FIXED].fd)
                accept_one(b, &b->ls[i]);
        pthread_mutex_unlock(&b->mu);
    }
    free(p);
    return NULL;
}

/* Listens on broker.listen ("IP:PORT", numeric) for boxes that call over
 * the network. */
static int tcp_listen(int *out, const char *address) {
    *out = -1;
    struct sockaddr_storage sa;
    socklen_t len = 0;
    int r = box_tcp_endpoint_parse(&sa, &len, address);
    if (r < 0)
        return fawn_err(FAWN_ECONFIG, "broker.listen: %s is not IP:PORT", address);
    int fd = socket(sa.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&sa, len) < 0 || listen(fd, 128) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return fawn_err_sys(FAWN_ECONFIG, e, "broker.listen: cannot listen on %s", address);
    }
    *out = fd;
    return 0;
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

/* broker.* into *out, checked against what m's provider can host. */
static int config_read(broker_config *out, const fawn_config *cfg, const sbx_manager *m) {
    int r = broker_config_parse(out, cfg->broker);
    if (r < 0 || out->n_clis == 0)
        return r;
    if (!sbx_broker_supported(m))
        return fawn_err(FAWN_ECONFIG, "broker.clis: the sandbox provider cannot host the "
                                      "credential broker (it needs sandbox.provider: local or "
                                      "kubernetes)");
    if (sbx_broker_remote(m) && !out->listen)
        return fawn_err(FAWN_ECONFIG, "broker.listen: required by this sandbox provider (its "
                                      "sandboxes call the broker over the network)");
    if (!sbx_broker_remote(m) && out->listen)
        return fawn_err(FAWN_ECONFIG, "broker.listen: only for a sandbox provider whose "
                                      "sandboxes call the broker over the network");
    return 0;
}

int broker_new(broker **out, const fawn_config *cfg, sbx_manager *m) {
    *out = NULL;
    broker *b = calloc(1, sizeof *b);
    if (!b)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    b->wake[0] = b->wake[1] = b->audit_fd = b->tcp_fd = -1;
    int r = config_read(&b->cfg, cfg, m);
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
    if (r == 0 && b->cfg.listen)
        r = tcp_listen(&b->tcp_fd, b->cfg.listen);
    if (r == 0 && b->cfg.listen)
        r = broker_nonces_new(&b->nonces);
    if (r == 0 && b->cfg.listen && !(b->peers = calloc(BROKER_PEERS_MAX, sizeof *b->peers)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
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
        if (b->ls[i].fd >= 0)
            close(b->ls[i].fd);
    if (b->tcp_fd >= 0)
        close(b->tcp_fd);
    broker_nonces_free(b->nonces);
    free(b->peers);
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
