/* The local provider for the sandbox manager: boxes in fresh namespaces on
 * this host (local.c), reached through their unix sockets under
 * $FAWN_HOME/run. A box is absent once its socket is gone and its cgroup
 * (when cgroups are in use) has been emptied and removed.
 *
 * With network allowlist the provider runs the egress proxy (egress.h):
 * a box it started has its listener there until it is destroyed; a box it
 * did not start (another process's, or one from before a restart) has no
 * proxy, so it is not healthy and is not adopted: it is stopped and
 * started anew. */
#include <dirent.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/client.h"
#include "sandbox/egress.h"
#include "sandbox/local.h"
#include "sandbox/manager.h"

/* How long a presence or health probe waits for the box. */
#define LOCAL_PROBE_TIMEOUT_MS 2000
#define LOCAL_ENDPOINT_PREFIX "unix:"
/* Sandbox sockets the listing examines at most. */
#define LOCAL_LIST_MAX 100000
/* How long a stopped box gets to exit before it is killed, and how often
 * its exit is looked for. */
#define LOCAL_EXIT_WAIT_MS 5000
#define LOCAL_EXIT_POLL_US 2000

/* A box this process started: its child, to be reaped when it exits. */
typedef struct child_box {
    char sandbox_id[17];
    pid_t pid;
} child_box;

/* A kept-alive connection to a box, opened to the generation it names. */
typedef struct cached_conn {
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
    box_conn conn;
    bool in_use;
} cached_conn;

/* Connections kept alive at once: one per recently used box. */
#define LOCAL_CONNS_MAX 64

typedef struct local_provider {
    sbx_provider base;
    const fawn_config *cfg;
    const char *fawn_bin;
    pthread_mutex_t mu; /* guards children and conns */
    child_box *children;
    size_t n_children, cap_children;
    cached_conn conns[LOCAL_CONNS_MAX];
    egress_proxy *egress; /* network allowlist: the boxes' proxy, else NULL */
} local_provider;

/* Takes box's cached connection (or a free slot for one), marking it in
 * use; NULL when every slot is busy. */
static cached_conn *conn_take(local_provider *lp, const sbx_box *box, const char *socket_path) {
    cached_conn *found = NULL, *spare = NULL;
    pthread_mutex_lock(&lp->mu);
    for (size_t i = 0; i < LOCAL_CONNS_MAX && !found; i++) {
        cached_conn *c = &lp->conns[i];
        if (c->in_use)
            continue;
        if (strcmp(c->sandbox_id, box->sandbox_id) == 0)
            found = c;
        else if (!spare || (c->conn.fd < 0 && spare->conn.fd >= 0))
            spare = c;
    }
    cached_conn *c = found ? found : spare;
    if (c && (!found || strcmp(c->generation, box->generation) != 0)) {
        if (c->conn.fd >= 0)
            box_conn_close(&c->conn);
        box_conn_init(&c->conn, socket_path);
        memcpy(c->sandbox_id, box->sandbox_id, sizeof c->sandbox_id);
        memcpy(c->generation, box->generation, sizeof c->generation);
    }
    if (c)
        c->in_use = true;
    pthread_mutex_unlock(&lp->mu);
    return c;
}

static void conn_give_back(local_provider *lp, cached_conn *c) {
    pthread_mutex_lock(&lp->mu);
    c->in_use = false;
    pthread_mutex_unlock(&lp->mu);
}

/* Whether the box still holds the kept-alive connection it last answered
 * on as box->generation: a box that exited has closed it. */
static bool conn_alive(local_provider *lp, const sbx_box *box) {
    bool alive = false;
    pthread_mutex_lock(&lp->mu);
    for (size_t i = 0; i < LOCAL_CONNS_MAX; i++) {
        cached_conn *c = &lp->conns[i];
        if (c->in_use || c->conn.fd < 0 || strcmp(c->sandbox_id, box->sandbox_id) != 0 ||
            strcmp(c->generation, box->generation) != 0)
            continue;
        struct pollfd p = {.fd = c->conn.fd, .events = POLLIN};
        alive = poll(&p, 1, 0) == 0;
        break;
    }
    pthread_mutex_unlock(&lp->mu);
    return alive;
}

static int child_add(local_provider *lp, const char *sandbox_id, pid_t pid) {
    pthread_mutex_lock(&lp->mu);
    int r = 0;
    if (lp->n_children == lp->cap_children) {
        size_t cap = lp->cap_children ? 2 * lp->cap_children : 16;
        child_box *grown = realloc(lp->children, cap * sizeof *grown);
        if (grown) {
            lp->children = grown;
            lp->cap_children = cap;
        } else {
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        }
    }
    if (r == 0) {
        child_box *c = &lp->children[lp->n_children++];
        memcpy(c->sandbox_id, sandbox_id, sizeof c->sandbox_id);
        c->pid = pid;
    }
    pthread_mutex_unlock(&lp->mu);
    return r;
}

/* Takes sandbox_id's child pid out of the table (0 when it is not ours). */
static pid_t child_take(local_provider *lp, const char *sandbox_id) {
    pid_t pid = 0;
    pthread_mutex_lock(&lp->mu);
    for (size_t i = 0; i < lp->n_children; i++) {
        if (strcmp(lp->children[i].sandbox_id, sandbox_id) == 0) {
            pid = lp->children[i].pid;
            lp->children[i] = lp->children[--lp->n_children];
            break;
        }
    }
    pthread_mutex_unlock(&lp->mu);
    return pid;
}

/* Reaps a stopped box of ours: waits for it to exit, killing it past
 * LOCAL_EXIT_WAIT_MS. Its exit is the proof that it is gone. */
static int child_reap(pid_t pid) {
    for (int64_t deadline = fawn_now_ms() + LOCAL_EXIT_WAIT_MS;;) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return 0;
        if (r < 0 && errno != EINTR)
            return fawn_err_sys(FAWN_EIO, errno, "wait for box %d", (int)pid);
        if (fawn_now_ms() >= deadline) {
            kill(pid, SIGKILL);
            deadline = INT64_MAX;
        }
        usleep(LOCAL_EXIT_POLL_US);
    }
}

static const char *socket_of(const sbx_box *box) {
    size_t n = strlen(LOCAL_ENDPOINT_PREFIX);
    return strncmp(box->endpoint, LOCAL_ENDPOINT_PREFIX, n) == 0 ? box->endpoint + n : NULL;
}

/* The generation a box answers with, or an error (FAWN_ENOENT: nothing
 * listens on path; others: unknown). */
static int box_generation(char generation[SBX_GENERATION_LEN + 1], const char *path) {
    int fd = box_connect(path);
    if (fd < 0)
        return fawn_err(FAWN_ENOENT, "no box listens");
    close(fd);
    json_t *reply = NULL;
    int status = 0;
    int r = box_call(&reply, &status, path, "GET", "/v1/sandbox", NULL, LOCAL_PROBE_TIMEOUT_MS);
    const char *gen = json_string_value(json_object_get(reply, "generation"));
    if (r == 0 && (status != 200 || !gen || strlen(gen) != SBX_GENERATION_LEN))
        r = fawn_err(FAWN_EPROTO, "the box did not tell its generation");
    if (r == 0)
        memcpy(generation, gen, SBX_GENERATION_LEN + 1);
    json_decref(reply);
    return r;
}

static int local_create(void *ctx, sbx_box *out, const char *user, const char *thread,
                        const sbx_cancel *cancel) {
    *out = (sbx_box){0};
    local_provider *lp = ctx;
    if (cancel && atomic_load(&cancel->cancelled))
        return fawn_err(FAWN_ECANCELED, "the acquisition was cancelled");
    /* The manager keeps the boxes it holds alive with requests (and stops
     * idle ones itself); a box no manager talks to for the idle timeout
     * (the gateway stopped, crashed, or its home is gone) exits. */
    local_spec spec = {.cfg = lp->cfg,
                       .user = user,
                       .thread = thread,
                       .fawn_bin = lp->fawn_bin,
                       .idle_exit_s = lp->cfg->sandbox.idle_timeout_s};
    local_box lb;
    int r = local_box_ensure(&lb, &spec);
    if (r == 0 && lp->egress && !lb.started && !egress_proxy_serves(lp->egress, lb.sandbox_id)) {
        /* Running without this gateway's proxy: started anew, with it. */
        r = local_box_stop_id(lp->cfg, lb.sandbox_id);
        if (r == 0)
            r = local_box_ensure(&lb, &spec);
    }
    if (r == 0 && lb.started && lb.pid > 0)
        r = child_add(lp, lb.sandbox_id, lb.pid);
    if (r == 0 && lb.egress_fd >= 0 && lp->egress)
        r = egress_proxy_add(lp->egress, lb.sandbox_id, steal_fd(lb.egress_fd));
    if (lb.egress_fd >= 0)
        close(lb.egress_fd);
    if (r < 0)
        return r;
    memcpy(out->sandbox_id, lb.sandbox_id, sizeof out->sandbox_id);
    memcpy(out->generation, lb.generation, sizeof out->generation);
    if (snprintf(out->endpoint, sizeof out->endpoint, LOCAL_ENDPOINT_PREFIX "%s", lb.socket_path) >=
        (int)sizeof out->endpoint)
        return fawn_err(FAWN_EINVAL, "socket path too long");
    return 0;
}

static int local_probe(void *ctx, enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                       const char *sandbox_id) {
    local_provider *lp = ctx;
    char path[PATH_MAX];
    struct stat st;
    *state = SBX_UNKNOWN;
    generation[0] = '\0';
    if (local_socket_path(path, lp->cfg, sandbox_id) < 0)
        return 0;
    if (lstat(path, &st) < 0) {
        *state = errno == ENOENT ? SBX_ABSENT : SBX_UNKNOWN;
        return 0;
    }
    int r = box_generation(generation, path);
    *state = r == 0 ? SBX_RUNNING : r == FAWN_ENOENT ? SBX_STOPPED : SBX_UNKNOWN;
    return 0;
}

/* Alive when the box holds the connection it last answered on as this
 * generation; otherwise asked for its generation. */
static int local_health(void *ctx, const sbx_box *box) {
    const char *path = socket_of(box);
    if (!path)
        return fawn_err(FAWN_EINVAL, "not a local box");
    local_provider *lp = ctx;
    if (lp->egress && !egress_proxy_serves(lp->egress, box->sandbox_id))
        return fawn_err(FAWN_ENOENT, "no egress proxy serves it");
    if (conn_alive(ctx, box))
        return 0;
    char generation[SBX_GENERATION_LEN + 1];
    int r = box_generation(generation, path);
    if (r == 0 && strcmp(generation, box->generation) != 0)
        return fawn_err(FAWN_ENOENT, "another generation answers");
    return r;
}

/* Stops the box if it runs `generation` (any when ""), then confirms the
 * sandbox is absent. Another generation running means the one asked for
 * is gone: it is left alone. */
static int local_destroy(void *ctx, const char *sandbox_id, const char *generation) {
    local_provider *lp = ctx;
    enum sbx_presence state;
    char running[SBX_GENERATION_LEN + 1];
    local_probe(ctx, &state, running, sandbox_id);
    if (state == SBX_ABSENT)
        return 0;
    if (state == SBX_RUNNING && generation[0] && strcmp(running, generation) != 0)
        return 0;
    int r = local_box_stop_id(lp->cfg, sandbox_id);
    if (lp->egress)
        egress_proxy_remove(lp->egress, sandbox_id);
    pid_t child = child_take(lp, sandbox_id);
    if (r == 0 && child > 0)
        r = child_reap(child);
    if (r < 0)
        return r;
    local_probe(ctx, &state, running, sandbox_id);
    return state == SBX_ABSENT
               ? 0
               : fawn_err(FAWN_EIO, "sandbox %s is still there after a stop", sandbox_id);
}

static bool sandbox_socket_name(char sandbox_id[17], const char *name) {
    size_t n = strlen(name);
    if (n != 16 + strlen(".sock") || strcmp(name + 16, ".sock") != 0 ||
        strspn(name, "0123456789abcdef") != 16)
        return false;
    memcpy(sandbox_id, name, 16);
    sandbox_id[16] = '\0';
    return true;
}

static int local_list(void *ctx, int (*each)(void *, const char *, const char *), void *each_ctx) {
    local_provider *lp = ctx;
    char dir[PATH_MAX];
    if (snprintf(dir, sizeof dir, "%s/run", lp->cfg->home) >= (int)sizeof dir)
        return fawn_err(FAWN_EINVAL, "home path too long");
    DIR *d = opendir(dir);
    if (!d)
        return errno == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, errno, "open %s", dir);
    int r = 0;
    struct dirent *e;
    for (size_t seen = 0; r == 0 && seen < LOCAL_LIST_MAX && (e = readdir(d)); seen++) {
        char sandbox_id[17], generation[SBX_GENERATION_LEN + 1];
        enum sbx_presence state;
        if (!sandbox_socket_name(sandbox_id, e->d_name))
            continue;
        local_probe(ctx, &state, generation, sandbox_id);
        if (state != SBX_ABSENT)
            r = each(each_ctx, sandbox_id, generation);
    }
    closedir(d);
    return r;
}

static int local_call(void *ctx, json_t **reply, int *status, const sbx_box *box,
                      const char *method, const char *path, const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    const char *socket_path = socket_of(box);
    if (!socket_path)
        return fawn_err(FAWN_EINVAL, "not a local box");
    cached_conn *c = conn_take(ctx, box, socket_path);
    if (!c) /* every kept connection is busy: a connection of its own */
        return box_call(reply, status, socket_path, method, path, body, timeout_ms);
    int r = box_conn_call(reply, status, &c->conn, method, path, body, timeout_ms);
    conn_give_back(ctx, c);
    return r;
}

static int local_call_file(void *ctx, json_t **reply, int *status, const sbx_box *box,
                           const char *method, const char *path, int file_fd, uint64_t size,
                           int timeout_ms) {
    *reply = NULL;
    *status = 0;
    const char *socket_path = socket_of(box);
    if (!socket_path)
        return fawn_err(FAWN_EINVAL, "not a local box");
    _cleanup_close_ int fd = box_connect(socket_path);
    if (fd < 0)
        return fawn_err(FAWN_EIO, "the box is unreachable");
    return box_fd_call_file(reply, status, fd, NULL, method, path, file_fd, size,
                            fawn_now_ms() + timeout_ms);
}

/* The proxy of network allowlist, from sandbox.egress; refused where
 * sandbox namespaces cannot be made (not root). */
static int egress_start(egress_proxy **out, const fawn_config *cfg) {
    *out = NULL;
    if (geteuid() != 0)
        return fawn_err(FAWN_EUNSUP, "sandbox.network allowlist needs fawn to run as root (the "
                                     "gateway makes each sandbox's network namespace)");
    egress_policy policy;
    int r = egress_policy_from_config(&policy, cfg);
    return r < 0 ? r : egress_proxy_new(out, &policy);
}

static int local_broker_dir_op(void *ctx, char out[PATH_MAX], const char *sandbox_id) {
    local_provider *lp = ctx;
    return local_broker_dir(out, lp->cfg, sandbox_id);
}

static int local_attest(void *ctx, enum sbx_attestation *out, const char *sandbox_id,
                        const sbx_peer *peer) {
    local_provider *lp = ctx;
    local_attest_peer(out, lp->cfg, sandbox_id, peer);
    return 0;
}

int local_provider_new(sbx_provider **out, const fawn_config *cfg, const char *fawn_bin) {
    *out = NULL;
    local_provider *lp = calloc(1, sizeof *lp);
    if (!lp)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    lp->cfg = cfg;
    lp->fawn_bin = fawn_bin;
    int r = cfg->sandbox.network == FAWN_NET_ALLOWLIST ? egress_start(&lp->egress, cfg) : 0;
    if (r < 0) {
        free(lp);
        return r;
    }
    pthread_mutex_init(&lp->mu, NULL);
    for (size_t i = 0; i < LOCAL_CONNS_MAX; i++)
        lp->conns[i].conn.fd = -1;
    lp->base = (sbx_provider){.name = "local",
                              .ctx = lp,
                              .create = local_create,
                              .probe = local_probe,
                              .health = local_health,
                              .destroy = local_destroy,
                              .list = local_list,
                              .call = local_call,
                              .call_file = local_call_file,
                              .shares_host_files = true,
                              .broker_dir = local_broker_dir_op,
                              .attest_peer = local_attest};
    *out = &lp->base;
    return 0;
}

void local_provider_free(sbx_provider *p) {
    if (!p)
        return;
    local_provider *lp = p->ctx;
    egress_proxy_free(lp->egress);
    for (size_t i = 0; i < LOCAL_CONNS_MAX; i++)
        box_conn_close(&lp->conns[i].conn);
    pthread_mutex_destroy(&lp->mu);
    free(lp->children);
    free(lp);
}
