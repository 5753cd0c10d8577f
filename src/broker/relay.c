/* A pod's relay (broker.h): the box's side of the shim where the broker is
 * reached over the network. The box's commands connect to the socket in
 * the directory their sandbox mounts at SBX_BROKER_MOUNT, as with the local
 * provider; the relay, outside their namespaces and holding the pod's
 * secret file they cannot see, forwards each request to the broker with a
 * proof line and hands back the broker's reply as it came. It checks
 * nothing of the request (the broker does); it only bounds it. */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <sodium.h>

#include "box/attest.h"
#include "broker/broker_internal.h"

/* Calls relayed at once: the broker runs two per sandbox by default and
 * answers the rest "busy"; a few more are only waiting on the network. */
#define RELAY_CALLS_MAX 8
/* A request arrives at once (the shim reads stdin before it connects). */
#define RELAY_READ_MS 10000
/* Connecting to the broker: it is in the cluster, a few ms away. */
#define RELAY_CONNECT_MS 5000
/* The broker answers once the CLI ended: its longest timeout and a margin. */
#define RELAY_REPLY_MS ((int64_t)(BROKER_TIMEOUT_S_MAX + 60) * 1000)
/* A broker address "HOST:PORT". */
#define RELAY_ADDRESS_MAX 256

struct broker_relay {
    char dir[PATH_MAX], attest_file[PATH_MAX], address[RELAY_ADDRESS_MAX];
    char sandbox_id[17], user[65], pod_uid[37];
    int listen_fd, wake[2];
    pthread_t acceptor;
    bool acceptor_started;
    pthread_mutex_t mu;
    pthread_cond_t idle; /* a call ended */
    unsigned active;
    atomic_bool stopping;
};

typedef struct relay_conn {
    broker_relay *r;
    int fd;
} relay_conn;

/* Splits HOST:PORT ("[v6]:PORT" too) for getaddrinfo. */
static int address_split(char host[RELAY_ADDRESS_MAX], char port[8], const char *address) {
    const char *colon = strrchr(address, ':');
    size_t n = colon ? (size_t)(colon - address) : 0;
    if (!colon || n == 0 || n >= RELAY_ADDRESS_MAX || strlen(colon + 1) == 0 ||
        strlen(colon + 1) > 5)
        return fawn_err(FAWN_EINVAL, "the broker's address must be HOST:PORT");
    bool v6 = address[0] == '[' && address[n - 1] == ']';
    snprintf(host, RELAY_ADDRESS_MAX, "%.*s", (int)(n - 2 * v6), address + v6);
    snprintf(port, 8, "%s", colon + 1);
    return 0;
}

/* Connects fd to ai before deadline. */
static int connect_one(const struct addrinfo *ai, int64_t deadline) {
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return -1;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    int64_t left = deadline - fawn_now_ms();
    int err = 0;
    socklen_t len = sizeof err;
    if (left <= 0 || poll(&p, 1, (int)left) != 1 ||
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0 || err != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int broker_connect(int *out, const broker_relay *r) {
    *out = -1;
    char host[RELAY_ADDRESS_MAX], port[8];
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
    int r0 = address_split(host, port, r->address);
    if (r0 < 0)
        return r0;
    int g = getaddrinfo(host, port, &hints, &ai);
    if (g != 0)
        return fawn_err(FAWN_EIO, "%s: %s", r->address, gai_strerror(g));
    int64_t deadline = fawn_now_ms() + RELAY_CONNECT_MS;
    for (const struct addrinfo *a = ai; a && *out < 0; a = a->ai_next)
        *out = connect_one(a, deadline);
    freeaddrinfo(ai);
    return *out >= 0 ? 0 : fawn_err(FAWN_EIO, "cannot connect to %s", r->address);
}

/* The proof line for msg, with the pod's secret read now. */
static int proof_line(char out[BROKER_PROOF_LEN + 1], const broker_relay *r, const fbuf *msg) {
    box_attest a;
    broker_proof p = {.timestamp = (int64_t)time(NULL)};
    char sha[65];
    out[0] = '\0';
    int rc = box_attest_load(&a, r->attest_file, r->sandbox_id, r->user, r->pod_uid);
    if (rc < 0)
        return rc;
    fawn_sha256_hex(sha, msg->data, msg->len);
    fawn_random_hex(p.nonce, 32);
    snprintf(p.sandbox_id, sizeof p.sandbox_id, "%s", r->sandbox_id);
    snprintf(p.pod_uid, sizeof p.pod_uid, "%s", r->pod_uid);
    rc = box_attest_call_mac(p.mac, &a, p.timestamp, p.nonce, sha);
    sodium_memzero(&a, sizeof a);
    return rc < 0 ? rc : broker_proof_format(out, &p);
}

/* Forwards msg with its proof and reads the broker's reply into reply. */
static int forward(fbuf *reply, const broker_relay *r, const fbuf *msg) {
    char line[BROKER_PROOF_LEN + 1];
    _cleanup_close_ int up = -1;
    int rc = proof_line(line, r, msg);
    if (rc < 0)
        return fawn_err(rc, "the pod's attestation secret cannot be used: %s", fawn_errmsg());
    if ((rc = broker_connect(&up, r)) < 0)
        return fawn_err(rc, "the credential broker cannot be reached: %s", fawn_errmsg());
    rc = broker_send_all(up, line, BROKER_PROOF_LEN);
    if (rc == 0)
        rc = broker_send_all(up, msg->data, msg->len);
    if (rc == 0)
        rc = broker_read_message(reply, up, BROKER_REPLY_MAX, fawn_now_ms() + RELAY_REPLY_MS);
    return rc < 0 ? fawn_err(rc, "no answer from the credential broker") : 0;
}

static void relay_call(broker_relay *r, int fd) {
    fbuf msg = {.limit = BROKER_REQUEST_MAX + BROKER_HEADER_LEN};
    fbuf reply = {.limit = BROKER_REPLY_MAX + BROKER_HEADER_LEN};
    int rc = broker_read_message(&msg, fd, BROKER_REQUEST_MAX, fawn_now_ms() + RELAY_READ_MS);
    if (rc == FAWN_E2BIG)
        broker_send_refusal(fd, BROKER_EXIT_REFUSED, "the request is larger than 1 MiB");
    else if (rc < 0)
        broker_send_refusal(fd, BROKER_EXIT_REFUSED, fawn_errmsg());
    else if ((rc = forward(&reply, r, &msg)) < 0) {
        log_warn("broker", "relaying a call: %s", fawn_errmsg());
        broker_send_refusal(fd, BROKER_EXIT_REFUSED, fawn_errmsg());
    } else if (broker_send_all(fd, reply.data, reply.len) < 0)
        log_debug("broker", "the reply was not delivered: %s", fawn_errmsg());
    fbuf_free(&msg);
    fbuf_free(&reply);
}

static void *relay_conn_main(void *arg) {
    relay_conn *c = arg;
    broker_relay *r = c->r;
    relay_call(r, c->fd);
    close(c->fd);
    free(c);
    pthread_mutex_lock(&r->mu);
    r->active--;
    pthread_cond_broadcast(&r->idle);
    pthread_mutex_unlock(&r->mu);
    return NULL;
}

/* Accepts one call and starts its thread; past RELAY_CALLS_MAX it is
 * answered busy at once. */
static void relay_accept(broker_relay *r) {
    int fd = accept4(r->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0)
        return;
    pthread_mutex_lock(&r->mu);
    bool room = r->active < RELAY_CALLS_MAX;
    relay_conn *c = room ? malloc(sizeof *c) : NULL;
    pthread_t t;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    if (c) {
        *c = (relay_conn){.r = r, .fd = fd};
        if (pthread_create(&t, &attr, relay_conn_main, c) == 0) {
            r->active++;
            c = NULL;
            fd = -1;
        }
    }
    pthread_attr_destroy(&attr);
    pthread_mutex_unlock(&r->mu);
    free(c);
    if (fd >= 0) {
        broker_send_refusal(fd, BROKER_EXIT_BUSY,
                            "busy: too many brokered calls at once; try again later");
        close(fd);
    }
}

static void *relay_acceptor_main(void *arg) {
    broker_relay *r = arg;
    while (!atomic_load(&r->stopping)) {
        struct pollfd p[2] = {{.fd = r->wake[0], .events = POLLIN},
                              {.fd = r->listen_fd, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            break;
        if (p[1].revents && !atomic_load(&r->stopping))
            relay_accept(r);
    }
    return NULL;
}

/* Splits "a,b" into names (pointing into text, which it cuts), each a
 * valid command name. */
static int names_split(char **names, size_t *n, char *text) {
    *n = 0;
    char *save = NULL;
    for (char *t = strtok_r(text, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
        size_t len = strlen(t);
        if (*n == BROKER_CLIS_MAX || len == 0 || len > 64 || t[0] == '.' ||
            strspn(t, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") != len)
            return fawn_err(FAWN_EINVAL, "--broker-clis: a list of at most %d command names",
                            BROKER_CLIS_MAX);
        names[(*n)++] = t;
    }
    return 0;
}

static int relay_copy(broker_relay *r, const broker_relay_config *cfg) {
    char host[RELAY_ADDRESS_MAX], port[8];
    if (!cfg->dir || !cfg->address || !cfg->attest_file || !cfg->sandbox_id || !cfg->user ||
        !cfg->pod_uid || !cfg->clis)
        return fawn_err(FAWN_EINVAL, "an incomplete relay configuration");
    if (strlen(cfg->address) >= sizeof r->address || address_split(host, port, cfg->address) < 0)
        return fawn_err(FAWN_EINVAL, "--broker: HOST:PORT of the credential broker");
    if (!box_attest_binding_valid(cfg->sandbox_id, cfg->user, cfg->pod_uid))
        return fawn_err(FAWN_EINVAL, "the relay needs the pod's sandbox id, user and UID");
    if (snprintf(r->dir, sizeof r->dir, "%s", cfg->dir) >= (int)sizeof r->dir ||
        snprintf(r->attest_file, sizeof r->attest_file, "%s", cfg->attest_file) >=
            (int)sizeof r->attest_file)
        return fawn_err(FAWN_EINVAL, "path too long");
    snprintf(r->address, sizeof r->address, "%s", cfg->address);
    snprintf(r->sandbox_id, sizeof r->sandbox_id, "%s", cfg->sandbox_id);
    snprintf(r->user, sizeof r->user, "%s", cfg->user);
    snprintf(r->pod_uid, sizeof r->pod_uid, "%s", cfg->pod_uid);
    return 0;
}

/* Starts the acceptor with every signal blocked in it (and in the call
 * threads it starts): signals stay the launcher's main thread's. */
static int acceptor_start(broker_relay *r) {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, &old);
    r->acceptor_started = pthread_create(&r->acceptor, NULL, relay_acceptor_main, r) == 0;
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r->acceptor_started ? 0 : fawn_err(FAWN_EIO, "cannot start the relay's thread");
}

int broker_relay_start(broker_relay **out, const broker_relay_config *cfg) {
    *out = NULL;
    broker_relay *r = calloc(1, sizeof *r);
    if (!r)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    r->listen_fd = r->wake[0] = r->wake[1] = -1;
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->idle, NULL);
    char *names[BROKER_CLIS_MAX];
    size_t n = 0;
    _cleanup_free_ char *list = cfg->clis ? strdup(cfg->clis) : NULL;
    int rc = relay_copy(r, cfg);
    if (rc == 0)
        rc = list ? names_split(names, &n, list) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (rc == 0)
        rc = broker_shims_write(r->dir, names, n);
    if (rc == 0)
        rc = broker_socket_listen(&r->listen_fd, r->dir);
    if (rc == 0 && pipe2(r->wake, O_CLOEXEC | O_NONBLOCK) < 0)
        rc = fawn_err_sys(FAWN_EIO, errno, "pipe");
    if (rc == 0)
        rc = acceptor_start(r);
    if (rc < 0) {
        broker_relay_stop(r);
        return rc;
    }
    *out = r;
    return 0;
}

void broker_relay_stop(broker_relay *r) {
    if (!r)
        return;
    atomic_store(&r->stopping, true);
    if (r->wake[1] >= 0 && write(r->wake[1], "x", 1) < 0)
        log_debug("broker", "waking the relay: %s", strerror(errno));
    if (r->acceptor_started)
        pthread_join(r->acceptor, NULL);
    pthread_mutex_lock(&r->mu);
    while (r->active > 0)
        pthread_cond_wait(&r->idle, &r->mu);
    pthread_mutex_unlock(&r->mu);
    int *fds[] = {&r->listen_fd, &r->wake[0], &r->wake[1]};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        if (*fds[i] >= 0)
            close(*fds[i]);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->idle);
    free(r);
}
