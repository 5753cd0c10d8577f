/* The box API: routing, request validation and replies (docs/box-api.md). */
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>

#include "base/fsx.h"
#include "base/json.h"
#include "box/attest.h"
#include "box/box.h"
#include "box/http.h"

#define BOX_VERSION "1"
/* After this long without requests the box lets its spare init go and
 * returns freed memory to the kernel. */
#define IDLE_TRIM_MS 10000
/* JSON bodies other than file writes are small; 1 MiB is generous. */
#define JSON_BODY_MAX (1024 * 1024)
/* The thread's directories, bound into the sandbox from the host: their
 * blocks count against its disk limit, and once the host deletes one (the
 * thread, or the whole home, is gone) the box has nothing left to serve. */
static const char *const user_data_dirs[] = {"/mnt/user-data/workspace", "/mnt/user-data/uploads",
                                             "/mnt/user-data/outputs"};
#define USER_DATA_DIRS ARRAY_LEN(user_data_dirs)
/* Connections served at once (503 beyond): a manager needs a few per box. */
#define BOX_CONNECTIONS_MAX 64

typedef struct box_state {
    const box_settings *settings;
    const box_attest *attest; /* NULL: this box answers no attestation challenge */
    box_exec_ctx *exec;
    box_files files;
    char generation[33];
    int64_t started_ms;
    pthread_mutex_t requests_mu;
    const http_conn *requests[BOX_CONNECTIONS_MAX]; /* requests in progress (NULL: free) */
    atomic_llong last_activity_ms;
    int idle_stop[2]; /* box_serve writes to [1] when it returns; the idle watch ends */
    int user_data[USER_DATA_DIRS]; /* O_PATH handles on user_data_dirs (-1: not watched) */
} box_state;

static void respond_owned(http_conn *c, int code, json_t *reply) {
    if (code < 0)
        http_respond_failure(c, code);
    else
        http_respond_json(c, 200, reply);
    json_decref(reply);
}

/* Reads and parses a JSON object body no larger than limit. */
static int read_json(json_t **out, http_conn *c, size_t limit) {
    *out = NULL;
    _cleanup_free_ char *body = NULL;
    size_t len = 0;
    int r = http_body_read_all(&body, &len, c, limit);
    if (r < 0)
        return r;
    return fjson_parse_object(out, len ? body : "{}", len ? len : 2);
}

static json_t *describe(const box_state *b) {
    const box_settings *s = b->settings;
    return json_pack(
        "{s:b, s:s, s:s, s:I, s:{s:b, s:s, s:s, s:s, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}}}",
        "ready", 1, "version", BOX_VERSION, "generation", b->generation, "started_at_ms",
        (json_int_t)b->started_ms, "capabilities", "shell_sessions", 1, "network", s->network,
        "cgroup", s->cgroup, "disk_quota", s->disk_measured ? "measured" : "kernel", "limits",
        "disk_bytes", (json_int_t)s->disk_limit_bytes, "memory_bytes", (json_int_t)s->memory_bytes,
        "pids_max", (json_int_t)s->pids_max, "max_sessions", (json_int_t)s->exec.max_sessions,
        "max_timeout_s", (json_int_t)s->exec.max_timeout_s, "max_output_bytes",
        (json_int_t)s->exec.max_output_bytes, "upload_max_bytes",
        (json_int_t)s->files.upload_max_bytes);
}

/* After a command, where no kernel quota holds the thread's files: measures
 * them and tells in the reply when they hold more than the limit, or more
 * files than can be measured. */
static void disk_report(json_t *reply, const box_settings *s) {
    if (!s->disk_measured || !reply)
        return;
    const fsx_usage_bounds bounds = {.max_entries = FSX_USER_DATA_MAX_ENTRIES,
                                     .max_depth = FSX_USER_DATA_MAX_DEPTH};
    uint64_t used = 0;
    bool complete = true;
    for (size_t i = 0; i < USER_DATA_DIRS; i++) {
        _cleanup_close_ int fd = open(user_data_dirs[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        uint64_t n = 0;
        if (fd < 0 || fsx_tree_usage(&n, fd, &bounds) < 0)
            complete = false;
        used += n;
    }
    if (complete && used <= s->disk_limit_bytes)
        return;
    json_object_set_new(reply, "disk",
                        json_pack("{s:I, s:I, s:b}", "used_bytes", (json_int_t)used, "limit_bytes",
                                  (json_int_t)s->disk_limit_bytes, "complete", complete));
}

static void handle_exec(http_conn *c, box_state *b) {
    json_t *body = NULL, *reply = NULL;
    box_exec_request req = {0};
    int r = read_json(&body, c, JSON_BODY_MAX);
    if (r == 0)
        r = box_exec_request_parse(&req, body, b->exec);
    if (r == 0)
        r = box_exec_run(&reply, b->exec, &req);
    if (r == 0)
        disk_report(reply, b->settings);
    for (size_t i = 0; i < req.n_env; i++)
        free(req.env[i]);
    free(req.env);
    json_decref(body);
    respond_owned(c, r, reply);
}

static void handle_session_create(http_conn *c, box_state *b) {
    static const char *const keys[] = {"id", NULL};
    json_t *body = NULL, *reply = NULL;
    const char *id = NULL;
    int r = read_json(&body, c, JSON_BODY_MAX);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = fjson_get_string(&id, body, "id", false);
    if (r == 0)
        r = box_session_create(&reply, b->exec, id);
    json_decref(body);
    respond_owned(c, r, reply);
}

/* /v1/shell/sessions/{id}[/kill] */
static void handle_session_path(http_conn *c, const http_request *req, box_state *b) {
    char id[BOX_SESSION_ID_MAX + 2];
    const char *rest = req->path + strlen("/v1/shell/sessions/");
    size_t n = strcspn(rest, "/");
    if (n == 0 || n >= sizeof id) {
        http_respond_error(c, 404, "not_found", "no such route");
        return;
    }
    memcpy(id, rest, n);
    id[n] = '\0';
    const char *tail = rest + n;
    int r;
    if (strcmp(req->method, "DELETE") == 0 && *tail == '\0')
        r = box_session_delete(b->exec, id);
    else if (strcmp(req->method, "POST") == 0 && strcmp(tail, "/kill") == 0)
        r = box_session_kill(b->exec, id);
    else {
        http_respond_error(c, 405, "method_not_allowed",
                           "use DELETE .../{id} or POST .../{id}/kill");
        return;
    }
    respond_owned(c, r, r == 0 ? json_pack("{s:b, s:s}", "ok", 1, "id", id) : NULL);
}

typedef int (*file_op)(json_t **out, const json_t *req, const box_files *f);

static void handle_file_op(http_conn *c, box_state *b, file_op op) {
    /* A write carries up to write_max_bytes, base64 inflates by 4/3. */
    size_t limit = b->files.limits.write_max_bytes / 3 * 4 + JSON_BODY_MAX;
    json_t *body = NULL, *reply = NULL;
    int r = read_json(&body, c, limit);
    if (r == 0)
        r = op(&reply, body, &b->files);
    json_decref(body);
    respond_owned(c, r, reply);
}

static void route_describe(http_conn *c, const http_request *req, box_state *b, file_op op) {
    json_t *d = describe(b);
    respond_owned(c, d ? 0 : FAWN_ENOMEM, d);
}

/* Ends every command, then the server (which waits for the requests in
 * progress: with their commands killed, none of them lasts). */
static void box_stop(box_state *b) {
    box_exec_stop(b->exec);
    http_server_stop();
}

static void route_shutdown(http_conn *c, const http_request *req, box_state *b, file_op op) {
    respond_owned(c, 0, json_pack("{s:b}", "ok", 1));
    box_stop(b);
}

static void route_exec(http_conn *c, const http_request *req, box_state *b, file_op op) {
    handle_exec(c, b);
}

static void route_session_create(http_conn *c, const http_request *req, box_state *b, file_op op) {
    handle_session_create(c, b);
}

static void route_session_list(http_conn *c, const http_request *req, box_state *b, file_op op) {
    respond_owned(c, 0, box_session_list(b->exec));
}

static void route_file(http_conn *c, const http_request *req, box_state *b, file_op op) {
    handle_file_op(c, b, op);
}

static void route_upload(http_conn *c, const http_request *req, box_state *b, file_op op) {
    box_file_upload(c, req, &b->files);
}

static void route_download(http_conn *c, const http_request *req, box_state *b, file_op op) {
    box_file_download(c, req, &b->files);
}

/* POST /v1/attest: the proof that this box is the pod its gateway created
 * (box/attest.h). A box started without attestation has none to give. */
static void route_attest(http_conn *c, const http_request *req, box_state *b, file_op op) {
    if (!b->attest) {
        http_respond_error(c, 404, "not_found", "this box was started without attestation");
        return;
    }
    _cleanup_free_ char *body = NULL;
    size_t len = 0;
    char nonce[BOX_ATTEST_NONCE_HEX + 1], proof[BOX_ATTEST_PROOF_HEX + 1];
    int r = http_body_read_all(&body, &len, c, BOX_ATTEST_BODY_MAX);
    if (r == 0)
        r = box_attest_request_parse(nonce, body ? body : "", len);
    if (r == 0)
        r = box_attest_proof(proof, b->attest, nonce);
    respond_owned(c, r,
                  r == 0 ? json_pack("{s:s, s:s, s:s}", "proof", proof, "sandbox_id",
                                     b->attest->sandbox_id, "pod_uid", b->attest->pod_uid)
                         : NULL);
}

typedef void (*route_fn)(http_conn *c, const http_request *req, box_state *b, file_op op);

static const struct {
    const char *method, *path;
    route_fn fn;
    file_op op; /* for route_file */
} routes[] = {
    {"GET", "/v1/sandbox", route_describe, NULL},
    {"POST", "/v1/attest", route_attest, NULL},
    {"POST", "/v1/sandbox/shutdown", route_shutdown, NULL},
    {"POST", "/v1/shell/exec", route_exec, NULL},
    {"POST", "/v1/shell/sessions", route_session_create, NULL},
    {"GET", "/v1/shell/sessions", route_session_list, NULL},
    {"POST", "/v1/file/read", route_file, box_file_read},
    {"POST", "/v1/file/write", route_file, box_file_write},
    {"POST", "/v1/file/list", route_file, box_file_list},
    {"POST", "/v1/file/find", route_file, box_file_glob},
    {"POST", "/v1/file/grep", route_file, box_file_grep},
    {"POST", "/v1/file/upload", route_upload, NULL},
    {"GET", "/v1/file/download", route_download, NULL},
};

/* A known path with another method is 405, an unknown path 404. */
static void route(http_conn *c, const http_request *req, box_state *b) {
    bool known = false;
    for (size_t i = 0; i < ARRAY_LEN(routes); i++) {
        if (strcmp(req->path, routes[i].path) != 0)
            continue;
        if (strcmp(req->method, routes[i].method) == 0) {
            routes[i].fn(c, req, b, routes[i].op);
            return;
        }
        known = true;
    }
    if (known)
        http_respond_error(c, 405, "method_not_allowed", "%s is not allowed on %.200s", req->method,
                           req->path);
    else if (strncmp(req->path, "/v1/shell/sessions/", 19) == 0)
        handle_session_path(c, req, b);
    else
        http_respond_error(c, 404, "not_found", "no route for %s %.200s", req->method, req->path);
}

/* Records a request in progress on c; its slot, for request_end. */
static int request_begin(box_state *b, const http_conn *c) {
    int slot = -1;
    pthread_mutex_lock(&b->requests_mu);
    for (int i = 0; i < BOX_CONNECTIONS_MAX && slot < 0; i++)
        if (!b->requests[i])
            b->requests[slot = i] = c;
    pthread_mutex_unlock(&b->requests_mu);
    return slot;
}

static void request_end(box_state *b, int slot) {
    if (slot < 0)
        return;
    pthread_mutex_lock(&b->requests_mu);
    b->requests[slot] = NULL;
    pthread_mutex_unlock(&b->requests_mu);
}

/* Whether a request is in progress for a client still waiting for it (one
 * whose client left talks to nobody). */
static bool requests_attended(box_state *b) {
    bool attended = false;
    pthread_mutex_lock(&b->requests_mu);
    for (int i = 0; i < BOX_CONNECTIONS_MAX && !attended; i++)
        attended = b->requests[i] && http_client_waiting(b->requests[i]);
    pthread_mutex_unlock(&b->requests_mu);
    return attended;
}

/* Only requests that passed authentication get here: each one is a client
 * talking to the box, as long as it waits for the answer. */
static void handle(http_conn *c, const http_request *req, void *ud) {
    box_state *b = ud;
    atomic_store(&b->last_activity_ms, fawn_now_ms());
    int slot = request_begin(b, c);
    route(c, req, b);
    if (http_client_waiting(c))
        atomic_store(&b->last_activity_ms, fawn_now_ms());
    request_end(b, slot);
}

/* Whether the host deleted one of the thread's directories: a directory
 * removed keeps no link, and the box's handle on it says so. */
static bool user_data_deleted(const box_state *b) {
    for (size_t i = 0; i < USER_DATA_DIRS; i++) {
        struct stat st;
        if (b->user_data[i] >= 0 && fstat(b->user_data[i], &st) == 0 && st.st_nlink == 0)
            return true;
    }
    return false;
}

/* Once a second: hands memory freed by finished requests back to the
 * kernel (an idle box should cost next to nothing); stops the box at once
 * when its user-data is deleted, and once no request has come for
 * idle_exit_s (when set), whatever its sessions hold: the manager that
 * wants a box talks to it more often than that, so a box nobody talks to
 * has no manager. A request in progress counts as talking while its client
 * waits for the answer. */
static void *idle_watch(void *arg) {
    box_state *b = arg;
    int64_t limit_ms = (int64_t)b->settings->idle_exit_s * 1000;
    int64_t trimmed_at = 0;
    const char *why = NULL;
    /* Off the start-up path: the box reports ready before this is done. */
    if (box_exec_prepare(b->exec) < 0)
        log_error("box", "%s", fawn_errmsg());
    while (!why) {
        struct pollfd p = {.fd = b->idle_stop[0], .events = POLLIN};
        if (poll(&p, 1, 1000) != 0)
            return NULL;
        box_exec_reap(b->exec);
        bool busy = requests_attended(b);
        int64_t last = atomic_load(&b->last_activity_ms);
        if (busy)
            atomic_store(&b->last_activity_ms, last = fawn_now_ms());
        if (!busy && trimmed_at < last && fawn_now_ms() - last >= IDLE_TRIM_MS) {
            box_exec_trim(b->exec);
            malloc_trim(0);
            trimmed_at = fawn_now_ms();
        }
        if (user_data_deleted(b))
            why = "its user-data directory was deleted";
        else if (limit_ms > 0 && !busy && fawn_now_ms() - last >= limit_ms)
            why = "no request came within its idle time";
    }
    log_info("box", "%s (idle time %us): exiting", why, b->settings->idle_exit_s);
    box_stop(b);
    return NULL;
}

static void on_stop_signal(int sig) { http_server_stop(); }

/* Handles on the thread's directories for user_data_deleted (one that
 * cannot be opened is not watched). */
static void user_data_watch(box_state *b) {
    for (size_t i = 0; i < USER_DATA_DIRS; i++)
        b->user_data[i] = open(user_data_dirs[i], O_PATH | O_DIRECTORY | O_CLOEXEC);
}

static void user_data_unwatch(box_state *b) {
    for (size_t i = 0; i < USER_DATA_DIRS; i++)
        if (b->user_data[i] >= 0)
            close(b->user_data[i]);
}

static int open_roots(box_files *f) {
    f->roots.user_data_fd = open("/mnt/user-data", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f->roots.user_data_fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open /mnt/user-data");
    f->roots.skills_fd = open("/mnt/skills", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    return 0;
}

static int start_idle_watch(box_state *b, pthread_t *t) {
    if (pipe2(b->idle_stop, O_CLOEXEC) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "pipe");
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    int e = pthread_create(t, &attr, idle_watch, b);
    pthread_attr_destroy(&attr);
    return e ? fawn_err_sys(FAWN_EIO, e, "pthread_create") : 0;
}

static void stop_idle_watch(box_state *b, pthread_t t) {
    if (b->idle_stop[1] < 0)
        return;
    (void)!write(b->idle_stop[1], "x", 1);
    pthread_join(t, NULL);
    close(b->idle_stop[0]);
    close(b->idle_stop[1]);
}

/* Tells the launcher the box serves. A box that cannot tell it is given
 * up by its launcher, so it does not serve either: the error is returned. */
static int report_ready(int status_fd, const char *generation) {
    if (status_fd < 0)
        return 0;
    char line[64];
    int n = snprintf(line, sizeof line, "ready %s\n", generation);
    int r = fawn_write_all(status_fd, line, (size_t)n);
    close(status_fd);
    return r;
}

/* One arena and a fixed mmap threshold: freed request memory goes back to the
 * kernel instead of lingering per thread. */
static void tune_malloc(void) {
    mallopt(M_ARENA_MAX, 1);
    mallopt(M_MMAP_THRESHOLD, 64 * 1024);
    mallopt(M_TRIM_THRESHOLD, 128 * 1024);
}

int box_serve(const box_serve_opts *o) {
    tune_malloc();
    /* Commands must never read or trace the box's memory. */
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
    /* Inits are reaped by the kernel; their end is observed through pidfds. */
    signal(SIGCHLD, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    struct sigaction stop = {.sa_handler = on_stop_signal};
    sigaction(SIGTERM, &stop, NULL);
    sigaction(SIGINT, &stop, NULL);

    box_state b = {.settings = o->settings,
                   .attest = o->attest,
                   .started_ms = fawn_wall_ms(),
                   .idle_stop = {-1, -1},
                   .requests_mu = PTHREAD_MUTEX_INITIALIZER,
                   .user_data = {-1, -1, -1}};
    pthread_t watcher;
    if (o->generation)
        snprintf(b.generation, sizeof b.generation, "%s", o->generation);
    else
        fawn_random_hex(b.generation, 16);
    atomic_store(&b.last_activity_ms, fawn_now_ms());
    b.files.limits = o->settings->files;
    int r = open_roots(&b.files);
    user_data_watch(&b);
    if (r == 0)
        r = box_exec_new(&b.exec, &o->settings->exec);
    if (r == 0)
        r = start_idle_watch(&b, &watcher);
    if (r < 0) {
        if (o->status_fd >= 0)
            dprintf(o->status_fd, "error %s\n", fawn_errmsg());
        box_exec_free(b.exec);
        user_data_unwatch(&b);
        return r;
    }
    r = report_ready(o->status_fd, b.generation);
    if (r < 0)
        log_error("box", "cannot report ready: %s", fawn_errmsg());
    http_server_opts hopts = {
        .listen_fd = o->listen_fd,
        .bearer_token = o->token,
        .max_connections = BOX_CONNECTIONS_MAX,
        .idle_timeout_ms = 60000,
        .io_timeout_ms = 30000,
        .handler = handle,
        .ud = &b,
    };
    if (r == 0)
        r = http_serve(&hopts);
    stop_idle_watch(&b, watcher);
    box_exec_free(b.exec);
    user_data_unwatch(&b);
    return r;
}
