/* The container provider (see container.h): the Docker Engine API on its
 * unix socket places one container per sandbox; the box API on a unix
 * socket in a per-generation directory bound into it reaches the box.
 *
 * An operation is a few engine requests (engine_request), each bounded by
 * request_timeout_ms and CONTAINER_REPLY_MAX; what they answer is read by
 * container_engine.c. An engine that fails, hangs or answers oddly is an
 * unknown answer, never "absent". */
#include <dirent.h>
#include <inttypes.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <curl/curl.h>

#include "base/fsx.h"
#include "base/json.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/container.h"
#include "sandbox/placement.h"
#include "sandbox/user_data.h"
#include "skills/skills.h"

#define LABEL_INSTANCE "fawn.instance"
#define ENDPOINT_PREFIX "unix:"
/* The box's files in its run directory (CONTAINER_RUN_DIR inside). */
#define BOX_SOCKET "box.sock"
#define BOX_TOKEN "token"
#define BOX_CONFIG "box.yaml"
/* A box's bearer token: 32 random bytes in hex. */
#define TOKEN_BYTES 32
/* Where the box keeps its own state inside the container: a tmpfs (the
 * root filesystem is read-only), this big at most. */
#define BOX_HOME "/tmp/fawn"
#define BOX_TMPFS_OPTIONS "rw,nosuid,nodev,size=64m"
/* The longest pause between polls of a starting or stopping box (the first
 * is PLACEMENT_SLICE_MS). */
#define BACKOFF_MAX_MS 500
/* One readiness request while a box starts: a box that accepted the
 * connection answers at once when it is up. */
#define ATTEMPT_TIMEOUT_MS 1000
/* A health check's request to the box. */
#define HEALTH_TIMEOUT_MS 5000
/* Bytes of an engine's error reply shown in a message: its first line or two. */
#define ENGINE_SAID_MAX 301
/* An engine request's path: a name, a query of one label filter. */
#define ENGINE_PATH_MAX 512

typedef struct container_provider {
    sbx_provider base;
    container_provider_config c;
    char instance[9]; /* 8 hex digits of the home directory */
} container_provider;

/* Re-raises the current error as code with context in front of it. */
static int err_wrap(int code, const char *context) {
    char why[512];
    snprintf(why, sizeof why, "%s", fawn_errmsg());
    return fawn_err(code, "%s: %s", context, why);
}

/* ---- engine requests ---- */

static size_t on_body(char *data, size_t size, size_t n, void *ud) {
    return fbuf_append(ud, data, size * n) < 0 ? 0 : size * n;
}

/* What a failed transfer means: the engine unreachable or slow (the answer
 * is unknown), or an answer too big to be the engine's. */
static int transfer_err(CURLcode res, const container_provider *cp, const fbuf *body) {
    if (res == CURLE_OPERATION_TIMEDOUT)
        return fawn_err(FAWN_ETIMEDOUT, "the container engine did not answer within %u ms",
                        cp->c.request_timeout_ms);
    if (res == CURLE_WRITE_ERROR && body->len + CURL_MAX_WRITE_SIZE > CONTAINER_REPLY_MAX)
        return fawn_err(FAWN_EPROTO, "the container engine answered more than %zu bytes",
                        CONTAINER_REPLY_MAX);
    return fawn_err(FAWN_EIO, "the container engine at %s: %s", cp->c.socket,
                    curl_easy_strerror(res));
}

static CURLcode request_setup(CURL *h, struct curl_slist *headers, const char *url,
                              const char *method, const char *json_body, fbuf *body,
                              const container_provider *cp) {
    CURLcode e = curl_easy_setopt(h, CURLOPT_UNIX_SOCKET_PATH, cp->c.socket);
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_URL, url);
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)cp->c.request_timeout_ms);
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_body);
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_WRITEDATA, body);
    if (!e)
        e = curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers);
    if (!e && strcmp(method, "POST") == 0)
        e = curl_easy_setopt(h, CURLOPT_POSTFIELDS, json_body ? json_body : "");
    return e;
}

/* One request to the engine: *status and body (limit CONTAINER_REPLY_MAX;
 * the caller frees it, also after an error). json_body may be NULL.
 * FAWN_EIO when the engine cannot be reached, FAWN_ETIMEDOUT when it does
 * not answer in time, FAWN_EPROTO for an answer too big. */
static int engine_request(long *status, fbuf *body, const container_provider *cp,
                          const char *method, const char *path, const char *json_body) {
    *status = 0;
    *body = (fbuf){.limit = CONTAINER_REPLY_MAX};
    int r = fawn_curl_init();
    if (r < 0)
        return r;
    char url[ENGINE_PATH_MAX + 64];
    if ((size_t)snprintf(url, sizeof url, "http://engine/v%s%s", cp->c.api_version, path) >=
        sizeof url)
        return fawn_err(FAWN_EINVAL, "engine request path too long");
    CURL *h = curl_easy_init();
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    if (!h || !headers) {
        curl_easy_cleanup(h);
        curl_slist_free_all(headers);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    CURLcode e = request_setup(h, headers, url, method, json_body, body, cp);
    if (!e)
        e = curl_easy_perform(h);
    if (!e)
        e = curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
    r = e ? transfer_err(e, cp, body) : 0;
    curl_easy_cleanup(h);
    curl_slist_free_all(headers);
    return r;
}

/* ---- names and places ---- */

static void container_name(char out[CONTAINER_NAME_MAX + 1], const container_provider *cp,
                           const char *sandbox_id) {
    snprintf(out, CONTAINER_NAME_MAX + 1, "fawn-%s-%s", cp->instance, sandbox_id);
}

/* The host directory bound at CONTAINER_RUN_DIR for one generation. */
static int run_dir_path(char out[PATH_MAX], const container_provider *cp, const char *sandbox_id,
                        const char *generation) {
    int n = snprintf(out, PATH_MAX, "%s/run/ctr-%s-%s", cp->c.cfg->home, sandbox_id, generation);
    return n < PATH_MAX ? 0 : fawn_err(FAWN_EINVAL, "home path too long");
}

/* Removes the run directories of sandbox_id's generation (of every
 * generation when ""): what a box wrote there is never followed. */
static void run_dirs_remove(const container_provider *cp, const char *sandbox_id,
                            const char *generation) {
    char dir[PATH_MAX], prefix[64];
    snprintf(dir, sizeof dir, "%s/run", cp->c.cfg->home);
    snprintf(prefix, sizeof prefix, "ctr-%s-%s", sandbox_id, generation);
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = dfd >= 0 ? fdopendir(dup(dfd)) : NULL;
    struct dirent *de;
    while (d && (de = readdir(d)))
        if (strncmp(de->d_name, prefix, strlen(prefix)) == 0 &&
            strlen(de->d_name) == strlen("ctr-") + 16 + 1 + SBX_GENERATION_LEN &&
            fsx_remove_tree(dfd, de->d_name) < 0)
            log_warn("sandbox", "sandbox %s: removing %s/%s: %s", sandbox_id, dir, de->d_name,
                     fawn_errmsg());
    if (d)
        closedir(d);
}

/* ---- what the engine knows ---- */

static int inspect(enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                   const container_provider *cp, const char *sandbox_id) {
    char name[CONTAINER_NAME_MAX + 1], path[ENGINE_PATH_MAX];
    container_name(name, cp, sandbox_id);
    snprintf(path, sizeof path, "/containers/%s/json", name);
    long status;
    fbuf body;
    int r = engine_request(&status, &body, cp, "GET", path, NULL);
    if (r == 0)
        r = container_inspect_classify(state, generation, status, body.data, body.len, sandbox_id);
    fbuf_free(&body);
    if (r < 0) {
        *state = SBX_UNKNOWN;
        generation[0] = '\0';
    }
    return r;
}

static int container_probe(void *ctx, enum sbx_presence *state,
                           char generation[SBX_GENERATION_LEN + 1], const char *sandbox_id) {
    *state = SBX_UNKNOWN;
    generation[0] = '\0';
    if (!placement_hex_valid(sandbox_id, 16))
        return fawn_err(FAWN_EINVAL, "invalid sandbox id");
    if (inspect(state, generation, ctx, sandbox_id) < 0)
        log_warn("sandbox", "sandbox %s: presence unknown: %s", sandbox_id, fawn_errmsg());
    return 0;
}

/* ---- the box ---- */

static const char *endpoint_path(const sbx_box *box) {
    size_t n = strlen(ENDPOINT_PREFIX);
    return strncmp(box->endpoint, ENDPOINT_PREFIX, n) == 0 ? box->endpoint + n : NULL;
}

/* Whether box answers, ready. FAWN_EIO: not (yet); FAWN_EPROTO: a broken
 * answer or the token refused; others from box_call_unix. */
static int box_ready(const sbx_box *box, int timeout_ms) {
    const char *socket_path = endpoint_path(box);
    if (!socket_path)
        return fawn_err(FAWN_EINVAL, "not a container sandbox endpoint");
    json_t *reply = NULL;
    int status = 0;
    int r = box_call_unix(&reply, &status, socket_path, box->token, "GET", "/v1/sandbox", NULL,
                          timeout_ms);
    r = placement_box_answer(NULL, r, status, reply);
    json_decref(reply);
    return r;
}

/* After a failed readiness request: FAWN_EIO when the container is gone
 * or stopped (waiting longer is pointless), else 0. */
static int still_starting(const container_provider *cp, const sbx_box *box) {
    enum sbx_presence state;
    char gen[SBX_GENERATION_LEN + 1];
    if (inspect(&state, gen, cp, box->sandbox_id) < 0)
        return 0;
    if (state == SBX_RUNNING || state == SBX_PENDING)
        return strcmp(gen, box->generation) == 0
                   ? 0
                   : fawn_err(FAWN_EIO, "another generation of the container is running");
    return fawn_err(FAWN_EIO, "the container stopped before its box answered");
}

/* Waits until the box answers on its socket. */
static int box_await(const container_provider *cp, const sbx_box *box, const sbx_cancel *cancel) {
    int64_t deadline = fawn_now_ms() + cp->c.start_timeout_ms;
    int delay = PLACEMENT_SLICE_MS;
    for (;;) {
        if (placement_cancelled(cancel))
            return placement_cancelled_err();
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0)
            return fawn_err(FAWN_ETIMEDOUT, "the sandbox did not answer within %u ms",
                            cp->c.start_timeout_ms);
        int r = box_ready(box, left < ATTEMPT_TIMEOUT_MS ? (int)left : ATTEMPT_TIMEOUT_MS);
        if (r == 0)
            return 0;
        if (r != FAWN_EIO && r != FAWN_ETIMEDOUT)
            return r;
        if ((r = still_starting(cp, box)) < 0 || (r = placement_pause(delay, deadline, cancel)) < 0)
            return r;
        delay = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
    }
}

static int container_health(void *ctx, const sbx_box *box) {
    enum sbx_presence state;
    char gen[SBX_GENERATION_LEN + 1];
    int r = inspect(&state, gen, ctx, box->sandbox_id);
    if (r < 0)
        return err_wrap(FAWN_EIO, "the sandbox's container");
    if (state != SBX_RUNNING || strcmp(gen, box->generation) != 0)
        return fawn_err(FAWN_ENOENT, "the sandbox's container does not run this generation");
    return box_ready(box, HEALTH_TIMEOUT_MS);
}

/* ---- removing ---- */

/* Whether generation (any when "") is gone, given what inspect said. */
static bool gone(enum sbx_presence state, const char *seen, const char *generation) {
    return state == SBX_ABSENT ||
           (state != SBX_UNKNOWN && generation[0] && seen[0] && strcmp(seen, generation) != 0);
}

/* Asks the engine to remove the container under sandbox_id's name, with
 * its anonymous volumes, whatever its state. */
static int remove_request(const container_provider *cp, const char *sandbox_id) {
    char name[CONTAINER_NAME_MAX + 1], path[ENGINE_PATH_MAX];
    container_name(name, cp, sandbox_id);
    snprintf(path, sizeof path, "/containers/%s?force=true&v=true", name);
    long status;
    fbuf body;
    int r = engine_request(&status, &body, cp, "DELETE", path, NULL);
    /* 204 removed; 404 gone already; 409 a removal is under way. */
    if (r == 0 && status != 204 && status != 404 && status != 409)
        r = fawn_err(FAWN_EIO, "the container engine answered a removal with status %ld", status);
    fbuf_free(&body);
    return r;
}

/* Inspects until generation is confirmed gone. */
static int absent_await(const container_provider *cp, const char *sandbox_id,
                        const char *generation) {
    int64_t deadline = fawn_now_ms() + cp->c.start_timeout_ms;
    int delay = PLACEMENT_SLICE_MS;
    for (;;) {
        enum sbx_presence state;
        char seen[SBX_GENERATION_LEN + 1];
        int r = inspect(&state, seen, cp, sandbox_id);
        if (r == 0 && gone(state, seen, generation))
            return 0;
        if (fawn_now_ms() >= deadline)
            return r < 0 ? err_wrap(FAWN_ETIMEDOUT, "the container was not confirmed gone")
                         : fawn_err(FAWN_ETIMEDOUT,
                                    "the container was not confirmed gone "
                                    "within %u ms",
                                    cp->c.start_timeout_ms);
        (void)placement_pause(delay, deadline, NULL);
        delay = delay * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : delay * 2;
    }
}

static int container_destroy(void *ctx, const char *sandbox_id, const char *generation) {
    const container_provider *cp = ctx;
    if (!placement_hex_valid(sandbox_id, 16) ||
        (generation[0] && !placement_hex_valid(generation, SBX_GENERATION_LEN)))
        return fawn_err(FAWN_EINVAL, "invalid sandbox id or generation");
    enum sbx_presence state;
    char seen[SBX_GENERATION_LEN + 1];
    int r = inspect(&state, seen, cp, sandbox_id);
    bool already = r == 0 && gone(state, seen, generation);
    if (r == 0 && !already)
        r = remove_request(cp, sandbox_id);
    if (r == 0 && !already)
        r = absent_await(cp, sandbox_id, generation);
    if (r == 0)
        run_dirs_remove(cp, sandbox_id, generation);
    return r;
}

/* ---- creating ---- */

/* The box's configuration (the YAML subset config.c reads; strings as JSON
 * strings, which YAML reads the same): the gateway's limits and command
 * environment, its network mode. No address-space limit: the container's
 * memory cgroup holds the box and its commands (and an RLIMIT_AS would
 * refuse the large reservations of sanitizer builds). */
static int box_config_write(int fd, const fawn_config *cfg) {
    const fawn_sandbox_config *s = &cfg->sandbox;
    const fawn_sandbox_limits *l = &s->limits;
    fbuf b = {.limit = (size_t)1 << 20};
    int r = fbuf_printf(&b,
                        "sandbox:\n  network: %s\n  max_sessions: %u\n  exec_timeout_s: %u\n"
                        "  exec_max_timeout_s: %u\n  exec_max_output_bytes: %" PRIu64 "\n"
                        "  limits:\n    memory_mb: %" PRIu64 "\n    pids: %" PRIu64 "\n"
                        "    nproc: %" PRIu64 "\n    open_files: %" PRIu64 "\n"
                        "    file_size_mb: %" PRIu64 "\n    address_space_mb: 0\n"
                        "    tmp_size_mb: %" PRIu64 "\n    disk_mb: %" PRIu64 "\n",
                        s->network == FAWN_NET_NONE ? "none" : "host", s->max_sessions,
                        s->exec_timeout_s, s->exec_max_timeout_s, s->exec_max_output_bytes,
                        l->memory_mb, l->pids, l->nproc, l->open_files, l->file_size_mb,
                        l->tmp_size_mb, l->disk_mb);
    if (r == 0 && s->n_env)
        r = fbuf_printf(&b, "  environment:\n");
    for (size_t i = 0; r == 0 && i < s->n_env; i++) {
        json_t *v = json_string(s->env[i].value);
        char *text = v ? json_dumps(v, JSON_ENCODE_ANY) : NULL;
        r = text ? fbuf_printf(&b, "    %s: %s\n", s->env[i].name, text) : FAWN_ENOMEM;
        free(text);
        json_decref(v);
    }
    if (r == 0)
        r = fawn_write_all(fd, b.data, b.len);
    fbuf_free(&b);
    return r < 0 ? fawn_err(r, "writing the box's configuration") : 0;
}

/* A file of the run directory, mode 0400, owned by uid (when root). */
static int run_file_write(int dirfd, const char *name, uid_t uid, const char *text,
                          const fawn_config *cfg) {
    _cleanup_close_ int fd = openat(dirfd, name,
                                    O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0400);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "create %s", name);
    int r = text ? fawn_write_all(fd, text, strlen(text)) : box_config_write(fd, cfg);
    if (r == 0 && geteuid() == 0 && fchown(fd, uid, uid) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "chown %s", name);
    return r;
}

/* Makes the generation's run directory: the token and the configuration,
 * the directory the box's (uid's) own, for its socket. */
static int run_dir_make(char dir[PATH_MAX], const container_provider *cp, const sbx_box *box,
                        uid_t uid) {
    int r = run_dir_path(dir, cp, box->sandbox_id, box->generation);
    char parent[PATH_MAX];
    snprintf(parent, sizeof parent, "%s/run", cp->c.cfg->home);
    if (r == 0)
        r = fsx_private_dir(parent);
    if (r == 0 && mkdir(dir, 0700) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "mkdir %s", dir);
    if (r < 0)
        return r;
    _cleanup_close_ int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dfd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", dir);
    char token[BOX_TCP_TOKEN_MAX + 2];
    snprintf(token, sizeof token, "%s\n", box->token);
    r = run_file_write(dfd, BOX_TOKEN, uid, token, cp->c.cfg);
    if (r == 0)
        r = run_file_write(dfd, BOX_CONFIG, uid, NULL, cp->c.cfg);
    if (r == 0 && geteuid() == 0 && fchown(dfd, uid, uid) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "chown %s", dir);
    return r;
}

static json_t *bind_mount(const char *source, const char *target, bool read_only) {
    return json_pack("{s:s, s:s, s:s, s:b}", "Type", "bind", "Source", source, "Target", target,
                     "ReadOnly", read_only);
}

static json_t *ulimit(const char *name, uint64_t value) {
    return json_pack("{s:s, s:I, s:I}", "Name", name, "Soft", (json_int_t)value, "Hard",
                     (json_int_t)value);
}

/* What the engine is asked to run: the hardening of container.h. */
static json_t *host_config(const container_provider *cp, const char *user_data, const char *skills,
                           const char *run_dir) {
    const fawn_sandbox_config *s = &cp->c.cfg->sandbox;
    json_int_t memory = (json_int_t)(s->limits.memory_mb << 20);
    json_t *security = json_pack("[s,s]", "no-new-privileges", "seccomp=unconfined");
    if (security && cp->c.podman && json_array_append_new(security, json_string("unmask=ALL")) < 0)
        json_decref(steal_ptr(security));
    if (!security)
        return NULL;
    return json_pack(
        "{s:s, s:[s], s:o, s:[], s:[], s:b, s:b, s:[o,o,o], s:{s:s}, s:I, s:I, s:I, "
        "s:I, s:[o,o], s:{s:s}, s:b}",
        "NetworkMode", s->network == FAWN_NET_NONE ? "none" : cp->c.network, "CapDrop", "ALL",
        "SecurityOpt", security, "MaskedPaths", "ReadonlyPaths", "ReadonlyRootfs", 1, "Privileged",
        0, "Mounts", bind_mount(user_data, "/mnt/user-data", false),
        bind_mount(skills, "/mnt/skills", true), bind_mount(run_dir, CONTAINER_RUN_DIR, false),
        "Tmpfs", "/tmp", BOX_TMPFS_OPTIONS, "Memory", memory, "MemorySwap", memory, "PidsLimit",
        (json_int_t)s->limits.pids, "NanoCpus", (json_int_t)cp->c.nano_cpus, "Ulimits",
        ulimit("nofile", s->limits.open_files), ulimit("nproc", s->limits.nproc), "RestartPolicy",
        "Name", "no", "AutoRemove", 0);
}

static json_t *create_body(const container_provider *cp, const sbx_box *box, uid_t uid,
                           const char *user_data, const char *skills, const char *run_dir) {
    char user[32], idle[16];
    snprintf(user, sizeof user, "%u:%u", (unsigned)uid, (unsigned)uid);
    snprintf(idle, sizeof idle, "%u", cp->c.cfg->sandbox.idle_timeout_s);
    json_t *hc = host_config(cp, user_data, skills, run_dir);
    if (!hc)
        return NULL;
    return json_pack(
        "{s:s, s:[s], s:[s,s,s,s,s,s,s,s,s,s,s,s,s], s:[s], s:s, s:s, s:{s:s,s:s,s:s}, s:o}",
        "Image", cp->c.image, "Entrypoint", "/usr/bin/fawn", "Cmd", "box", "--listen",
        "unix:" CONTAINER_RUN_DIR "/" BOX_SOCKET, "--token-file", CONTAINER_RUN_DIR "/" BOX_TOKEN,
        "--config", CONTAINER_RUN_DIR "/" BOX_CONFIG, "--user-data", "/mnt/user-data",
        "--skills-dir", "/mnt/skills", "--idle-exit", idle, "Env", "FAWN_HOME=" BOX_HOME, "User",
        user, "WorkingDir", "/", "Labels", LABEL_INSTANCE, cp->instance, "fawn.sandbox",
        box->sandbox_id, "fawn.generation", box->generation, "HostConfig", hc);
}

/* The start of what the engine answered, for a log line or an error
 * message: printable ASCII only (the rest shown as '?'). */
static const char *engine_said(char out[ENGINE_SAID_MAX], const fbuf *reply) {
    size_t n = reply->len < ENGINE_SAID_MAX - 1 ? reply->len : ENGINE_SAID_MAX - 1;
    for (size_t i = 0; i < n; i++)
        out[i] = reply->data[i] >= 0x20 && reply->data[i] < 0x7f ? reply->data[i] : '?';
    out[n] = '\0';
    return out;
}

/* Creates and starts the container from body (consumed). */
static int container_run(const container_provider *cp, const sbx_box *box, json_t *body) {
    char *text = body ? fjson_dump(body) : NULL;
    json_decref(body);
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    char name[CONTAINER_NAME_MAX + 1], path[ENGINE_PATH_MAX], id[65], said[ENGINE_SAID_MAX];
    container_name(name, cp, box->sandbox_id);
    snprintf(path, sizeof path, "/containers/create?name=%s", name);
    long status;
    fbuf reply;
    int r = engine_request(&status, &reply, cp, "POST", path, text);
    free(text);
    if (r == 0 && (r = container_create_parse(id, status, reply.data, reply.len)) < 0)
        log_warn("sandbox", "sandbox %s: the engine said: %s", box->sandbox_id,
                 engine_said(said, &reply));
    fbuf_free(&reply);
    if (r < 0)
        return r;
    snprintf(path, sizeof path, "/containers/%s/start", id);
    if ((r = engine_request(&status, &reply, cp, "POST", path, NULL)) == 0 && status != 204 &&
        status != 304)
        r = fawn_err(FAWN_EIO, "the container engine answered a start with status %ld: %s", status,
                     engine_said(said, &reply));
    fbuf_free(&reply);
    return r;
}

/* The host directories the container binds: the thread's user-data (made
 * as a sandbox start makes it) and the user's skills view. */
static int host_dirs(char user_data[PATH_MAX], char skills[PATH_MAX], const container_provider *cp,
                     const char *user, const char *thread) {
    int fd = -1;
    int r = sbx_user_data_open(&fd, cp->c.cfg, user, thread, true);
    if (fd >= 0)
        close(fd);
    if (r == 0)
        r = paths_user_data_dir(user_data, cp->c.cfg->home, user, thread);
    if (r == 0)
        r = skills_view_ensure(skills, cp->c.cfg->home, user);
    return r;
}

/* Removes a container left under the sandbox's name (the manager asks for
 * a new box only when it has none it can use). */
static int leftover_remove(const container_provider *cp, const char *sandbox_id) {
    enum sbx_presence state;
    char gen[SBX_GENERATION_LEN + 1];
    int r = inspect(&state, gen, cp, sandbox_id);
    if (r < 0)
        return err_wrap(r, "the container engine");
    return state == SBX_ABSENT ? 0 : container_destroy((void *)cp, sandbox_id, "");
}

static int start(sbx_box *box, const container_provider *cp, const char *user, const char *thread,
                 const sbx_cancel *cancel) {
    char user_data[PATH_MAX], skills[PATH_MAX], run_dir[PATH_MAX];
    uid_t uid = sbx_host_uid(box->sandbox_id);
    int r = host_dirs(user_data, skills, cp, user, thread);
    if (r == 0)
        r = run_dir_make(run_dir, cp, box, uid);
    if (r == 0)
        r = container_run(cp, box, create_body(cp, box, uid, user_data, skills, run_dir));
    if (r == 0)
        r = box_await(cp, box, cancel);
    return r;
}

/* box's endpoint: the socket in its generation's run directory. */
static int endpoint_make(sbx_box *box, const container_provider *cp) {
    char run_dir[PATH_MAX];
    int r = run_dir_path(run_dir, cp, box->sandbox_id, box->generation);
    size_t n = strlen(run_dir);
    if (r == 0 && strlen(ENDPOINT_PREFIX) + n + sizeof "/" BOX_SOCKET > sizeof box->endpoint)
        r = fawn_err(FAWN_EINVAL, "home path too long");
    if (r < 0)
        return r;
    char *e = box->endpoint;
    memcpy(e, ENDPOINT_PREFIX, strlen(ENDPOINT_PREFIX));
    memcpy(e + strlen(ENDPOINT_PREFIX), run_dir, n);
    memcpy(e + strlen(ENDPOINT_PREFIX) + n, "/" BOX_SOCKET, sizeof "/" BOX_SOCKET);
    return 0;
}

static int container_create(void *ctx, sbx_box *out, const char *user, const char *thread,
                            const sbx_cancel *cancel) {
    *out = (sbx_box){0};
    const container_provider *cp = ctx;
    sbx_box box = {0};
    int r = paths_sandbox_id(box.sandbox_id, user, thread);
    if (r < 0)
        return r;
    if (placement_cancelled(cancel))
        return placement_cancelled_err();
    if ((r = leftover_remove(cp, box.sandbox_id)) < 0)
        return r;
    fawn_random_hex(box.generation, SBX_GENERATION_LEN / 2);
    fawn_random_hex(box.token, TOKEN_BYTES);
    if ((r = endpoint_make(&box, cp)) == 0)
        if (r == 0)
            r = start(&box, cp, user, thread, cancel);
    if (r < 0) {
        char why[512];
        snprintf(why, sizeof why, "%s", fawn_errmsg());
        if (container_destroy(ctx, box.sandbox_id, box.generation) < 0)
            log_warn("sandbox", "sandbox %s: removing a failed start: %s", box.sandbox_id,
                     fawn_errmsg());
        return fawn_err(r, "%s", why);
    }
    *out = box;
    return 0;
}

/* ---- listing and calls ---- */

static int container_list(void *ctx,
                          int (*each)(void *each_ctx, const char *sandbox_id,
                                      const char *generation),
                          void *each_ctx) {
    const container_provider *cp = ctx;
    char filter[64], path[ENGINE_PATH_MAX];
    snprintf(filter, sizeof filter, "{\"label\":[\"" LABEL_INSTANCE "=%s\"]}", cp->instance);
    char *escaped = curl_easy_escape(NULL, filter, 0);
    if (!escaped)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    snprintf(path, sizeof path, "/containers/json?all=true&filters=%s", escaped);
    curl_free(escaped);
    long status;
    fbuf body;
    int r = engine_request(&status, &body, cp, "GET", path, NULL);
    if (r == 0)
        r = container_list_parse(status, body.data, body.len, each, each_ctx);
    fbuf_free(&body);
    return r;
}

static int container_call(void *ctx, json_t **reply, int *status, const sbx_box *box,
                          const char *method, const char *path, const json_t *body,
                          int timeout_ms) {
    (void)ctx;
    *reply = NULL;
    *status = 0;
    const char *socket_path = endpoint_path(box);
    if (!socket_path)
        return fawn_err(FAWN_EINVAL, "not a container sandbox endpoint");
    return box_call_unix(reply, status, socket_path, box->token, method, path, body, timeout_ms);
}

static int container_call_file(void *ctx, json_t **reply, int *status, const sbx_box *box,
                               const char *method, const char *path, int file_fd, uint64_t size,
                               int timeout_ms) {
    (void)ctx;
    *reply = NULL;
    *status = 0;
    const char *socket_path = endpoint_path(box);
    if (!socket_path)
        return fawn_err(FAWN_EINVAL, "not a container sandbox endpoint");
    return box_call_file_unix(reply, status, socket_path, box->token, method, path, file_fd, size,
                              timeout_ms);
}

/* ---- the provider ---- */

int container_provider_new(sbx_provider **out, const container_provider_config *cfg) {
    *out = NULL;
    if (!cfg->cfg || !cfg->request_timeout_ms || !cfg->start_timeout_ms || !cfg->socket[0] ||
        !cfg->image[0] || !cfg->api_version[0] || cfg->request_timeout_ms > INT32_MAX)
        return fawn_err(FAWN_EINVAL, "the container provider needs a configuration, an engine "
                                     "socket, an image and positive timeouts");
    container_provider *cp = calloc(1, sizeof *cp);
    if (!cp)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    cp->base = (sbx_provider){.name = "container",
                              .ctx = cp,
                              .create = container_create,
                              .probe = container_probe,
                              .health = container_health,
                              .destroy = container_destroy,
                              .list = container_list,
                              .call = container_call,
                              .call_file = container_call_file,
                              /* the user-data is bound, not copied */
                              .shares_host_files = true};
    cp->c = *cfg;
    char home[PATH_MAX], hex[65];
    if (!realpath(cfg->cfg->home, home))
        snprintf(home, sizeof home, "%s", cfg->cfg->home);
    fawn_sha256_hex(hex, home, strlen(home));
    snprintf(cp->instance, sizeof cp->instance, "%.8s", hex);
    *out = &cp->base;
    return 0;
}

void container_provider_free(sbx_provider *p) {
    if (p)
        free(p->ctx);
}
