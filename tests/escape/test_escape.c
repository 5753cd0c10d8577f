/* Escape tests: attacks run inside real sandboxes, each asserting that it
 * fails.
 *
 * The group setup starts two sandboxes with the local provider: A (alice/a1),
 * the attacker, and B (bob/b1), its neighbour (each user name ends in a
 * suffix of this run's: the host uid of a sandbox comes from its id, and the
 * tests count that uid's processes, which another run's sandboxes must not
 * share). A's workspace gets the static
 * probe (tests/escape/probe.c), which makes the raw system calls; B's
 * workspace gets a marker file and the temp home a host secret, both world
 * readable so that only the sandbox's isolation keeps them from A. Every test
 * runs its attack through the box API, as an agent's command or as a file
 * operation, and asserts the specific failure, and where it matters, that A,
 * B and the host still work afterwards. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/msg.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/fsx.h"
#include "base/json.h"
#include "config/config.h"
#include "paths/paths.h"
#include "skills/skills.h"
#include "sandbox/client.h"
#include "sandbox/local.h"
#include "sandbox/user_data.h"

/* The attacker's view of its own files. */
#define WS "/mnt/user-data/workspace"
#define PROBE WS "/probe"

/* Limits of the sandboxes under attack: small, so the bombs stay cheap. */
#define LIMIT_MEMORY_MB 256
#define LIMIT_PIDS 128
#define LIMIT_TMP_MB 16
#define LIMIT_FILE_MB 64

/* Ceilings below only a hang reaches (a loaded 2-core host under ASan),
 * never a time the tests measure. */
/* Command timeout for attacks that should end at once. */
#define QUICK_S 30
/* Timeout given to the fork bomb: it must be cut off here. */
#define BOMB_S 5
/* Budget of a box API call beyond its command's own timeout. */
#define CALL_SLACK_MS 30000
/* File API calls must answer, even for planted FIFOs (a call that blocks
 * on one fails the test past this). */
#define FILE_CALL_MS 30000
/* Largest reply accepted from the raw download client. */
#define DOWNLOAD_MAX ((size_t)1 << 20)
/* How long a test waits for processes of the sandboxes to be gone. */
#define STOP_WAIT_MS 30000
/* Random keys tried for the host's message queue: one is free at once
 * unless thousands of queues exist. */
#define MSQ_KEY_ATTEMPTS 64
/* Memory the bomb asks for: far above LIMIT_MEMORY_MB. */
#define BOMB_MIB 2048

/* Host variables that look like secrets: none may reach a command. */
static const char *const secret_env_names[] = {
    "FAWN_ESCAPE_SECRET_TOKEN",
    "ESCAPE_API_KEY",
    "AWS_SECRET_ACCESS_KEY",
    "DATABASE_URL",
};

typedef struct escape_ctx {
    fawn_config cfg;
    char home[64]; /* a mkdtemp under /tmp */
    local_box a, b;
    char a_user[32], b_user[32]; /* "alice-<hex>", "bob-<hex>" */
    char a_user_data[PATH_MAX], a_ws[PATH_MAX], b_ws[PATH_MAX];
    char host_secret_path[PATH_MAX], host_secret[64];
    char b_marker_path[PATH_MAX], b_marker[64];
    char env_secret[33];
    char uploads_marker[64];
    char hostname[256];
    uid_t a_uid, b_uid; /* host uids the sandboxes run as */
    int tcp_fd, tcp_port;
    int ext_fd, ext_port;
    char ext_ip[INET_ADDRSTRLEN];
    int abstract_fd;
    char abstract_name[64];
    int msq_id;
    key_t msq_key;
} escape_ctx;

/* ---- assertions with context ---- */

/* ---- host-side files ---- */

static char *host_read(const char *path) {
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    char *data = NULL;
    size_t len = 0;
    return fawn_read_all(&data, &len, fd, DOWNLOAD_MAX) == 0 ? data : NULL;
}

static void host_write(const char *path, const char *content, mode_t mode) {
    _cleanup_close_ int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                                  mode);
    assert_true(fd >= 0);
    assert_int_equal(fawn_write_all(fd, content, strlen(content)), 0);
    assert_int_equal(fchmod(fd, mode), 0);
}

static bool host_exists(const char *path) {
    struct stat st;
    return lstat(path, &st) == 0;
}

static int copy_file(const char *from, const char *to, mode_t mode) {
    _cleanup_close_ int in = open(from, O_RDONLY | O_CLOEXEC);
    if (in < 0)
        return -1;
    char *data = NULL;
    size_t len = 0;
    if (fawn_read_all(&data, &len, in, (size_t)64 << 20) < 0)
        return -1;
    _cleanup_close_ int out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    int r = out >= 0 && fawn_write_all(out, data, len) == 0 && fchmod(out, mode) == 0 ? 0 : -1;
    free(data);
    return r;
}

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *f) {
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static void rm_tree(const char *path) { nftw(path, rm_entry, 32, FTW_DEPTH | FTW_PHYS); }

/* ---- commands through the box API ---- */

typedef struct run {
    char status[16];
    int exit_code;
    char *out, *err;
} run;

static void run_free(run *r) {
    free(r->out);
    free(r->err);
    memset(r, 0, sizeof *r);
}

static void run_in(run *r, const local_box *box, const char *session, int timeout_s,
                   const char *command) {
    json_t *body = json_pack("{s:s, s:i}", "command", command, "timeout_s", timeout_s);
    if (session)
        json_object_set_new(body, "session_id", json_string(session));
    json_t *reply = NULL;
    int status = 0;
    int rc = box_call(&reply, &status, box->socket_path, "POST", "/v1/shell/exec", body,
                      timeout_s * 1000 + CALL_SLACK_MS);
    json_decref(body);
    if (rc < 0)
        fail_msg("exec of \"%s\" failed: %s", command, fawn_errmsg());
    if (status != 200) {
        char *text = fjson_dump(reply);
        fail_msg("exec of \"%s\": HTTP %d %s", command, status, text ? text : "");
    }
    snprintf(r->status, sizeof r->status, "%s",
             json_string_value(json_object_get(reply, "status")) ?: "?");
    r->exit_code = (int)json_integer_value(json_object_get(reply, "exit_code"));
    r->out = strdup(json_string_value(json_object_get(reply, "stdout")) ?: "");
    r->err = strdup(json_string_value(json_object_get(reply, "stderr")) ?: "");
    json_decref(reply);
}

static void runf(run *r, const local_box *box, int timeout_s, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void runf(run *r, const local_box *box, int timeout_s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *cmd = NULL;
    int n = vasprintf(&cmd, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    run_in(r, box, NULL, timeout_s, cmd);
    free(cmd);
}

static void check_completed(const run *r, int exit_code) {
    if (strcmp(r->status, "completed") != 0 || r->exit_code != exit_code)
        fail_msg("expected completed/%d, got %s/%d\nstdout:\n%s\nstderr:\n%s", exit_code, r->status,
                 r->exit_code, r->out, r->err);
}

/* Runs the probe in A with the given arguments; it must report the attack
 * blocked (exit 0) with `expect` in its output. */
static void probe(const escape_ctx *c, const char *expect, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void probe(const escape_ctx *c, const char *expect, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *args = NULL;
    assert_true(vasprintf(&args, fmt, ap) >= 0);
    va_end(ap);
    run r;
    runf(&r, &c->a, QUICK_S, PROBE " %s", args);
    check_completed(&r, 0);
    check_contains(args, r.out, expect);
    check_lacks(args, r.out, "SUCCEEDED");
    free(args);
    run_free(&r);
}

/* The box still answers and runs commands. */
static void check_usable(const local_box *box, const char *who) {
    run r;
    runf(&r, box, QUICK_S, "echo usable-%s", who);
    check_completed(&r, 0);
    char *want = strf("usable-%s\n", who);
    assert_string_equal(r.out, want);
    free(want);
    run_free(&r);
}

static void check_generation(const local_box *box) {
    json_t *reply = NULL;
    int status = 0;
    assert_int_equal(box_call(&reply, &status, box->socket_path, "GET", "/v1/sandbox", NULL, 5000),
                     0);
    assert_int_equal(status, 200);
    const char *gen = json_string_value(json_object_get(reply, "generation"));
    assert_non_null(gen);
    assert_string_equal(gen, box->generation); /* the same box: it was not killed or restarted */
    json_decref(reply);
}

static void check_host_can_fork(void) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(7);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 7);
}

/* ---- file operations through the box API ---- */

/* POSTs body (consumed) to a file route; returns the HTTP status. */
static int file_call(json_t **reply, const local_box *box, const char *route, json_t *body) {
    int status = 0;
    int rc = box_call(reply, &status, box->socket_path, "POST", route, body, FILE_CALL_MS);
    json_decref(body);
    if (rc < 0)
        fail_msg("%s failed: %s", route, fawn_errmsg());
    return status;
}

static char *reply_text(const json_t *v) {
    char *s = v ? fjson_dump(v) : NULL;
    return s ? s : strdup("");
}

static void check_status(int status, int want, const json_t *reply, const char *what) {
    if (status != want) {
        char *text = reply_text(reply);
        fail_msg("%s: HTTP %d, expected %d: %s", what, status, want, text);
    }
}

/* A read of path must be refused and reveal none of the given strings. */
static void check_read_refused(const escape_ctx *c, const char *path, const char *const *secrets) {
    json_t *reply = NULL;
    int status = file_call(&reply, &c->a, "/v1/file/read", json_pack("{s:s}", "path", path));
    char *text = reply_text(reply);
    if (status < 400)
        fail_msg("read of %s was allowed (HTTP %d): %s", path, status, text);
    for (size_t i = 0; secrets[i]; i++)
        check_lacks(path, text, secrets[i]);
    free(text);
    json_decref(reply);
}

/* GET /v1/file/download?path=<query_path, sent as is>; returns the status
 * and the raw reply in *raw. */
static int download(char **raw, const local_box *box, const char *query_path) {
    _cleanup_close_ int fd = box_connect(box->socket_path);
    assert_true(fd >= 0);
    char *req = strf("GET /v1/file/download?path=%s HTTP/1.1\r\nHost: box\r\n"
                     "Connection: close\r\n\r\n",
                     query_path);
    assert_int_equal(fawn_write_all(fd, req, strlen(req)), 0);
    free(req);
    fbuf b = {.limit = DOWNLOAD_MAX};
    int64_t deadline = fawn_now_ms() + FILE_CALL_MS;
    char chunk[16384];
    for (;;) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            fail_msg("download of %s did not answer within %d ms", query_path, FILE_CALL_MS);
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n <= 0)
            break;
        assert_int_equal(fbuf_append(&b, chunk, (size_t)n), 0);
    }
    assert_int_equal(fbuf_append(&b, "", 1), 0);
    int status = 0;
    if (sscanf(b.data, "HTTP/1.1 %d ", &status) != 1)
        fail_msg("malformed download reply: %s", b.data);
    *raw = fbuf_steal(&b);
    return status;
}

static void check_download_refused(const escape_ctx *c, const char *query_path,
                                   const char *const *secrets) {
    char *raw = NULL;
    int status = download(&raw, &c->a, query_path);
    if (status == 200)
        fail_msg("download of %s was allowed:\n%s", query_path, raw);
    for (size_t i = 0; secrets[i]; i++)
        check_lacks(query_path, raw, secrets[i]);
    free(raw);
}

/* Symlinks an attacker plants in its workspace, each pointing outside it. */
static void plant_links(const escape_ctx *c) {
    run r;
    runf(&r, &c->a, QUICK_S,
         "cd " WS " && ln -sfn /etc/shadow shadow-link && ln -sfn /etc/passwd passwd-link && "
         "ln -sfn ../../../ up && ln -sfn ../../../etc/passwd rel-passwd-link && "
         "ln -sfn %s secret-link && ln -sfn %s marker-link && ln -sfn /etc etc-link && "
         "ln -sfn /tmp tmp-link && ln -sfn /tmp/fawn-pwned pwn-link && "
         "ln -sfn /proc/self/cmdline cmdline-link && ln -sfn /proc/1/environ environ-link && "
         "ls -l shadow-link up secret-link",
         c->host_secret_path, c->b_marker_path);
    check_completed(&r, 0);
    check_contains("planted links", r.out, "shadow-link -> /etc/shadow");
    run_free(&r);
}

/* ---- host-side listeners the sandbox must not reach ---- */

static int listen_tcp(const char *ip, int *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET};
    socklen_t len = sizeof a;
    if (fd < 0 || inet_pton(AF_INET, ip, &a.sin_addr) != 1 ||
        bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 16) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    *port = ntohs(a.sin_port);
    return fd;
}

static int listen_abstract(const char *name) {
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(name);
    memcpy(a.sun_path + 1, name, n);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 ||
        bind(fd, (struct sockaddr *)&a,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n)) < 0 ||
        listen(fd, 16) < 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* True when a connection is waiting on the listener (it is then dropped). */
static bool pending_connection(int listen_fd) {
    int fd = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return false;
    close(fd);
    return true;
}

/* A listener that works: a connection from the host itself arrives. */
static void check_listener_alive(int listen_fd, const struct sockaddr *to, socklen_t len) {
    int fd = socket(to->sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(connect(fd, to, len), 0);
    struct pollfd p = {.fd = listen_fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 2000), 1);
    assert_true(pending_connection(listen_fd));
    close(fd);
}

static void find_external_ip(char *out, size_t outsz) {
    struct ifaddrs *ifs = NULL;
    out[0] = '\0';
    if (getifaddrs(&ifs) < 0)
        return;
    for (struct ifaddrs *i = ifs; i && !out[0]; i = i->ifa_next)
        if (i->ifa_addr && i->ifa_addr->sa_family == AF_INET && (i->ifa_flags & IFF_UP) &&
            !(i->ifa_flags & IFF_LOOPBACK))
            inet_ntop(AF_INET, &((struct sockaddr_in *)i->ifa_addr)->sin_addr, out,
                      (socklen_t)outsz);
    freeifaddrs(ifs);
}

/* ---- group setup ---- */

static int setup_env_secrets(escape_ctx *c) {
    fawn_random_hex(c->env_secret, 16);
    for (size_t i = 0; i < ARRAY_LEN(secret_env_names); i++) {
        char value[128];
        snprintf(value, sizeof value, "%s%s",
                 strcmp(secret_env_names[i], "DATABASE_URL") == 0 ? "postgres://u:" : "",
                 c->env_secret);
        if (setenv(secret_env_names[i], value, 1) < 0)
            return -1;
    }
    return 0;
}

static int setup_config(escape_ctx *c) {
    if (config_defaults(&c->cfg) < 0)
        return -1;
    free(c->cfg.home);
    free(c->cfg.sandbox.skills_dir);
    c->cfg.home = strdup(c->home);
    c->cfg.sandbox.skills_dir = strf("%s/skills", c->home);
    c->cfg.sandbox.network = FAWN_NET_NONE;
    c->cfg.sandbox.limits.memory_mb = LIMIT_MEMORY_MB;
    c->cfg.sandbox.limits.pids = LIMIT_PIDS;
    c->cfg.sandbox.limits.tmp_size_mb = LIMIT_TMP_MB;
    c->cfg.sandbox.limits.file_size_mb = LIMIT_FILE_MB;
    c->cfg.sandbox.exec_timeout_s = 30;
    char skill[PATH_MAX];
    snprintf(skill, sizeof skill, "%s/skills/demo", c->home);
    if (!c->cfg.home || fsx_mkdir_p(skill, 0755) < 0)
        return -1;
    strcat(skill, "/SKILL.md");
    host_write(skill, "# demo skill\n", 0644);
    return 0;
}

/* user's /mnt/skills made to hold the demo skill, as a run's start makes it. */
static int skills_show_demo(escape_ctx *c, const char *user) {
    skills_dirs dirs = {.shared = c->cfg.sandbox.skills_dir};
    json_t *catalog = json_pack("[{s:s, s:s, s:b}]", "name", "demo", "path", "demo", "enabled", 1);
    int r = catalog ? skills_view_sync(c->home, user, &dirs, catalog) : -1;
    json_decref(catalog);
    if (r < 0)
        print_error("the skills view of %s: %s\n", user, fawn_errmsg());
    return r;
}

static int start_box(local_box *box, escape_ctx *c, const char *user, const char *thread) {
    if (skills_show_demo(c, user) < 0)
        return -1;
    local_spec spec = {.cfg = &c->cfg,
                       .user = user,
                       .thread = thread,
                       .idle_exit_s = 0,
                       .fawn_bin = getenv("FAWN_BIN")};
    int r = local_box_ensure(box, &spec);
    if (r < 0)
        print_error("starting sandbox %s/%s: %s\n", user, thread, fawn_errmsg());
    return r;
}

/* Files the attacker must not reach, and the probe in A's workspace. */
static int setup_files(escape_ctx *c) {
    char hex[33];
    fawn_random_hex(hex, 16);
    snprintf(c->host_secret, sizeof c->host_secret, "HOST-SECRET-%s", hex);
    snprintf(c->host_secret_path, sizeof c->host_secret_path, "%s/host-secret.txt", c->home);
    host_write(c->host_secret_path, c->host_secret, 0644);
    fawn_random_hex(hex, 16);
    snprintf(c->b_marker, sizeof c->b_marker, "B-MARKER-%s", hex);
    snprintf(c->b_marker_path, sizeof c->b_marker_path, "%.4000s/marker.txt", c->b_ws);
    host_write(c->b_marker_path, c->b_marker, 0644);
    fawn_random_hex(hex, 16);
    snprintf(c->uploads_marker, sizeof c->uploads_marker, "UPLOADS-%s", hex);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/uploads/pct-target", c->a_user_data);
    host_write(path, c->uploads_marker, 0644);
    const char *probe_bin = getenv("FAWN_ESCAPE_PROBE");
    if (!probe_bin) {
        print_error("FAWN_ESCAPE_PROBE must name the built escape_probe\n");
        return -1;
    }
    snprintf(path, sizeof path, "%s/probe", c->a_ws);
    if (copy_file(probe_bin, path, 0755) < 0) {
        print_error("copying %s into the workspace: %s\n", probe_bin, strerror(errno));
        return -1;
    }
    struct stat st;
    if (stat(c->a_ws, &st) < 0)
        return -1;
    c->a_uid = st.st_uid;
    if (stat(c->b_ws, &st) < 0)
        return -1;
    c->b_uid = st.st_uid;
    return 0;
}

static int setup_listeners(escape_ctx *c) {
    c->tcp_fd = listen_tcp("127.0.0.1", &c->tcp_port);
    find_external_ip(c->ext_ip, sizeof c->ext_ip);
    c->ext_fd = c->ext_ip[0] ? listen_tcp(c->ext_ip, &c->ext_port) : -1;
    char hex[17];
    fawn_random_hex(hex, 8);
    snprintf(c->abstract_name, sizeof c->abstract_name, "fawn-escape-%s", hex);
    c->abstract_fd = listen_abstract(c->abstract_name);
    /* A key no other queue on the host has (another run's, or one a
     * crashed run left): random ones are tried until one is free. */
    for (int i = 0; i < MSQ_KEY_ATTEMPTS && c->msq_id < 0; i++) {
        uint16_t low;
        fawn_random_bytes(&low, sizeof low);
        c->msq_key = (key_t)(0x46450000 | low);
        c->msq_id = msgget(c->msq_key, IPC_CREAT | IPC_EXCL | 0666);
    }
    return c->tcp_fd >= 0 && c->abstract_fd >= 0 && c->msq_id >= 0 ? 0 : -1;
}

/* The boxes are children of this process: collect them once they exit. */
static void reap_boxes(escape_ctx *c) {
    pid_t *pids[] = {&c->a.pid, &c->b.pid};
    for (size_t i = 0; i < ARRAY_LEN(pids); i++)
        if (*pids[i] > 0 && waitpid(*pids[i], NULL, WNOHANG) == *pids[i])
            *pids[i] = 0;
}

/* Live (not zombie) host processes whose real uid is uid. */
static int count_processes_of(uid_t uid) {
    DIR *d = opendir("/proc");
    if (!d)
        return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9')
            continue;
        char path[300], line[256];
        snprintf(path, sizeof path, "/proc/%s/status", e->d_name);
        FILE *f = fopen(path, "re");
        bool zombie = false, owned = false;
        while (f && fgets(line, sizeof line, f)) {
            if (strncmp(line, "State:", 6) == 0)
                zombie = strchr(line, 'Z') != NULL;
            if (strncmp(line, "Uid:", 4) == 0)
                owned = (uid_t)strtoul(line + 4, NULL, 10) == uid;
        }
        if (f)
            fclose(f);
        n += owned && !zombie;
    }
    closedir(d);
    return n;
}

/* Waits up to STOP_WAIT_MS for every process of both sandboxes to be gone;
 * returns how many of A's and B's are left. */
static void wait_sandboxes_gone(escape_ctx *c, int *left_a, int *left_b) {
    int64_t deadline = fawn_now_ms() + STOP_WAIT_MS;
    for (;;) {
        reap_boxes(c);
        *left_a = c->a_uid ? count_processes_of(c->a_uid) : 0;
        *left_b = c->b_uid ? count_processes_of(c->b_uid) : 0;
        if (*left_a + *left_b == 0 || fawn_now_ms() >= deadline)
            return;
        usleep(50 * 1000);
    }
}

/* Asks user's box to stop, as far as it can: the caller deals with what a
 * failed stop leaves (said here). */
static void stop_box(escape_ctx *c, const char *user, const char *thread) {
    if (local_box_stop(&c->cfg, user, thread) < 0)
        print_error("stopping sandbox %s/%s: %s\n", user, thread, fawn_errmsg());
}

/* Stops both sandboxes; whatever a failed stop left running is killed
 * through the boxes this process started (each is its pid namespace's
 * init, so its death ends everything inside). */
static void stop_sandboxes(escape_ctx *c) {
    stop_box(c, c->a_user, "a1");
    stop_box(c, c->b_user, "b1");
    int left_a, left_b;
    wait_sandboxes_gone(c, &left_a, &left_b);
    if (left_a + left_b == 0)
        return;
    pid_t pids[] = {c->a.pid, c->b.pid};
    for (size_t i = 0; i < ARRAY_LEN(pids); i++)
        if (pids[i] > 0)
            kill(pids[i], SIGKILL);
    wait_sandboxes_gone(c, &left_a, &left_b);
    /* The cgroups a failed stop could not remove. */
    stop_box(c, c->a_user, "a1");
    stop_box(c, c->b_user, "b1");
}

/* Stops the sandboxes and removes everything setup made (as far as it got). */
static void escape_release(escape_ctx *c) {
    if (!c)
        return;
    if (c->cfg.home)
        stop_sandboxes(c);
    int fds[] = {c->tcp_fd, c->ext_fd, c->abstract_fd};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    if (c->msq_id >= 0)
        msgctl(c->msq_id, IPC_RMID, NULL);
    for (size_t i = 0; i < ARRAY_LEN(secret_env_names); i++)
        unsetenv(secret_env_names[i]);
    if (c->home[0])
        rm_tree(c->home);
    config_free(&c->cfg);
    free(c);
}

static int setup_all(escape_ctx *c) {
    c->tcp_fd = c->ext_fd = c->abstract_fd = c->msq_id = -1;
    snprintf(c->home, sizeof c->home, "/tmp/fawn-escape.XXXXXX");
    if (!mkdtemp(c->home)) {
        c->home[0] = '\0';
        return -1;
    }
    if (setup_env_secrets(c) < 0 || setup_config(c) < 0 ||
        gethostname(c->hostname, sizeof c->hostname) < 0)
        return -1;
    char suffix[13];
    fawn_random_hex(suffix, 6);
    snprintf(c->a_user, sizeof c->a_user, "alice-%s", suffix);
    snprintf(c->b_user, sizeof c->b_user, "bob-%s", suffix);
    if (start_box(&c->a, c, c->a_user, "a1") < 0 || start_box(&c->b, c, c->b_user, "b1") < 0)
        return -1;
    char b_user_data[PATH_MAX];
    if (paths_user_data_dir(c->a_user_data, c->cfg.home, c->a_user, "a1") < 0 ||
        paths_user_data_dir(b_user_data, c->cfg.home, c->b_user, "b1") < 0)
        return -1;
    snprintf(c->a_ws, sizeof c->a_ws, "%.4000s/workspace", c->a_user_data);
    snprintf(c->b_ws, sizeof c->b_ws, "%.4000s/workspace", b_user_data);
    return setup_files(c) < 0 || setup_listeners(c) < 0 ? -1 : 0;
}

static int escape_setup(void **state) {
    escape_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    if (setup_all(c) < 0) {
        escape_release(c);
        return -1;
    }
    *state = c;
    return 0;
}

static int escape_teardown(void **state) {
    escape_release(*state);
    return 0;
}

/* ---- reading the host ---- */

static void test_host_shadow_absent(void **state) {
    escape_ctx *c = *state;
    /* ENOENT, not EACCES: the host's /etc is not there at all. */
    probe(c, "read_file: errno=2 ", "read_file /etc/shadow");
    probe(c, "read_file: errno=2 ", "read_file /etc/gshadow");
    probe(c, "read_file: errno=2 ", "read_file /etc/sudoers");
    check_read_refused(c, "/etc/shadow", (const char *const[]){"root:", NULL});
}

static void test_etc_passwd_is_the_sandbox_own(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, "cat /etc/passwd");
    check_completed(&r, 0);
    check_contains("sandbox passwd", r.out, "root:x:0:0:");
    char *host = host_read("/etc/passwd");
    assert_non_null(host);
    assert_string_not_equal(r.out, host);
    /* No host account other than root and nobody shows up. */
    char *save = NULL;
    for (char *line = strtok_r(host, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char *colon = strchr(line, ':');
        if (!colon || strncmp(line, "root:", 5) == 0 || strncmp(line, "nobody:", 7) == 0)
            continue;
        colon[1] = '\0';
        char *at_start = strf("\n%s", line);
        char *with_nl = strf("\n%s", r.out);
        check_lacks("host account in the sandbox's /etc/passwd", with_nl, at_start);
        free(at_start);
        free(with_nl);
    }
    free(host);
    run_free(&r);
}

static void test_host_secret_by_absolute_path(void **state) {
    escape_ctx *c = *state;
    probe(c, "read_file: errno=2 ", "read_file %s", c->host_secret_path);
    run r;
    runf(&r, &c->a, QUICK_S,
         "cat %s; ls -la %s; find / -path /proc -prune -o -path /usr -prune -o "
         "-name host-secret.txt -print 2>/dev/null",
         c->host_secret_path, c->home);
    check_lacks("cat host secret", r.out, c->host_secret);
    check_lacks("find host secret", r.out, "host-secret.txt");
    run_free(&r);
    check_read_refused(c, c->host_secret_path, (const char *const[]){c->host_secret, NULL});
    check_download_refused(c, c->host_secret_path, (const char *const[]){c->host_secret, NULL});
}

static void test_sibling_marker_via_dotdot(void **state) {
    escape_ctx *c = *state;
    /* Positive control: B itself can read its marker. */
    run r;
    run_in(&r, &c->b, NULL, QUICK_S, "cat " WS "/marker.txt");
    check_completed(&r, 0);
    assert_string_equal(r.out, c->b_marker);
    run_free(&r);
    /* From A's workspace, climb any number of levels towards B's. */
    char *users_tail = strf("users/%s/threads/b1/user-data/workspace/marker.txt", c->b_user);
    const char *const tails[] = {
        users_tail,
        users_tail + strlen("users/"),
        "threads/b1/user-data/workspace/marker.txt",
        "b1/user-data/workspace/marker.txt",
    };
    fbuf cmd = {0};
    assert_int_equal(fbuf_printf(&cmd, "cd " WS " && cat"), 0);
    for (int depth = 1; depth <= 10; depth++)
        for (size_t t = 0; t < ARRAY_LEN(tails); t++) {
            assert_int_equal(fbuf_printf(&cmd, " "), 0);
            for (int d = 0; d < depth; d++)
                assert_int_equal(fbuf_printf(&cmd, "../"), 0);
            assert_int_equal(fbuf_printf(&cmd, "%s", tails[t]), 0);
        }
    assert_int_equal(fbuf_printf(&cmd, " 2>/dev/null; echo done"), 0);
    run_in(&r, &c->a, NULL, QUICK_S, cmd.data);
    check_completed(&r, 0);
    check_lacks("B's marker via ../", r.out, c->b_marker);
    assert_string_equal(r.out, "done\n");
    fbuf_free(&cmd);
    run_free(&r);
    const char *const secrets[] = {c->b_marker, NULL};
    char *climb = strf(WS "/../../../../%s", users_tail + strlen("users/"));
    check_read_refused(c, climb, secrets);
    free(climb);
    climb = strf(WS "/../../../%s", users_tail);
    check_read_refused(c, climb, secrets);
    free(climb);
    free(users_tail);
}

static void test_sibling_marker_via_host_path(void **state) {
    escape_ctx *c = *state;
    probe(c, "read_file: errno=2 ", "read_file %s", c->b_marker_path);
    const char *const secrets[] = {c->b_marker, NULL};
    check_read_refused(c, c->b_marker_path, secrets);
    check_download_refused(c, c->b_marker_path, secrets);
    /* Nowhere in A's filesystem (outside /proc and the shared system dirs). */
    run r;
    runf(&r, &c->a, QUICK_S,
         "grep -rslF -e %s /mnt /tmp /run /home /root /opt /var /etc /dev/shm 2>/dev/null; "
         "echo searched",
         c->b_marker);
    check_completed(&r, 0);
    assert_string_equal(r.out, "searched\n");
    run_free(&r);
}

static void test_write_outside_user_data(void **state) {
    escape_ctx *c = *state;
    static const char *const targets[] = {
        "/x",
        "/usr/x",
        "/usr/bin/x",
        "/etc/x",
        "/etc/passwd",
        "/etc/ssl/x",
        "/mnt/x",
        "/mnt/user-data/x",
        "/mnt/skills/x",
        "/mnt/skills/demo/SKILL.md",
        "/run/x",
        "/run/fawn-box",
        "/home/x",
        "/root/x",
        "/opt/x",
        "/var/x",
        "/lib/x",
        "/bin/x",
        "/sbin/x",
        "/dev/x",
        "/proc/x",
    };
    fbuf cmd = {0};
    assert_int_equal(fbuf_printf(&cmd, "for f in"), 0);
    for (size_t i = 0; i < ARRAY_LEN(targets); i++)
        assert_int_equal(fbuf_printf(&cmd, " %s", targets[i]), 0);
    assert_int_equal(fbuf_printf(&cmd, "; do " PROBE " write_file $f || echo \"WROTE $f\"; "
                                       "mkdir $f.d 2>/dev/null && echo \"MKDIR $f.d\"; done; true"),
                     0);
    run r;
    run_in(&r, &c->a, NULL, QUICK_S, cmd.data);
    fbuf_free(&cmd);
    check_completed(&r, 0);
    check_lacks("writes outside user-data", r.out, "WROTE");
    check_lacks("mkdir outside user-data", r.out, "MKDIR");
    check_contains("read-only /usr", r.out, "write_file: errno=30 ");
    run_free(&r);
    /* Nothing appeared on the host either. */
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/x", c->a_user_data);
    assert_false(host_exists(path));
    snprintf(path, sizeof path, "%s/skills/x", c->home);
    assert_false(host_exists(path));
    snprintf(path, sizeof path, "%s/users/%s/skills-view/x", c->home, c->a_user);
    assert_false(host_exists(path));
    char *skill = strf("%s/skills/demo/SKILL.md", c->home);
    char *content = host_read(skill);
    assert_non_null(content);
    assert_string_equal(content, "# demo skill\n");
    free(content);
    free(skill);
}

static void test_skeleton_dirs_hold_no_host_files(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, "find /root /home /opt /run -mindepth 1; ls -A /var");
    check_completed(&r, 0);
    assert_string_equal(r.out, "tmp\n"); /* /var holds only the /tmp link */
    run_free(&r);
}

/* ---- /proc ---- */

static void test_proc_init_unreachable(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, PROBE " proc_init");
    check_completed(&r, 0);
    check_contains("proc_init", r.out, "open:fd/3=13");
    check_contains("proc_init", r.out, "readlink:root=13");
    check_lacks("proc_init", r.out, "=0 ");
    check_lacks("proc_init", r.out, "=0\n");
    run_free(&r);
    /* Commands run under an init in a pid namespace of their own: not the
     * box's, not B's, not a session's. */
    unsigned long ns[3] = {0};
    for (int i = 0; i < 3; i++) {
        if (i == 2) {
            json_t *reply = NULL;
            assert_int_equal(file_call(&reply, &c->a, "/v1/shell/sessions",
                                       json_pack("{s:s}", "id", "ns-probe")),
                             200);
            json_decref(reply);
        }
        run_in(&r, i == 1 ? &c->b : &c->a, i == 2 ? "ns-probe" : NULL, QUICK_S,
               "readlink /proc/self/ns/pid");
        check_completed(&r, 0);
        if (sscanf(r.out, "pid:[%lu]", &ns[i]) != 1)
            fail_msg("pid namespace: %s", r.out);
        run_free(&r);
    }
    char path[64], link[64];
    snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)c->a.pid);
    ssize_t n = readlink(path, link, sizeof link - 1);
    assert_true(n > 0);
    link[n] = '\0';
    unsigned long box_ns = 0;
    assert_int_equal(sscanf(link, "pid:[%lu]", &box_ns), 1);
    assert_int_not_equal(ns[0], box_ns);
    assert_int_not_equal(ns[0], ns[1]);
    assert_int_not_equal(ns[0], ns[2]);
    json_t *reply = NULL;
    int status = 0;
    assert_int_equal(box_call(&reply, &status, c->a.socket_path, "DELETE",
                              "/v1/shell/sessions/ns-probe", NULL, 5000),
                     0);
    json_decref(reply);
}

/* The command's init is a copy of the process that started the sandbox: its
 * command line (host paths, a gateway's options, the first command) must not
 * show through /proc/1/cmdline. */
static void test_launcher_command_line_hidden(void **state) {
    escape_ctx *c = *state;
    char host[4096] = "", exe[PATH_MAX] = "", seen[4096] = "";
    char *cmdline = host_read("/proc/self/cmdline");
    assert_non_null(cmdline);
    snprintf(host, sizeof host, "%s", cmdline); /* argv[0], as the launcher was started */
    free(cmdline);
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    assert_true(n > 0);
    exe[n] = '\0';
    run r;
    runf(&r, &c->a, QUICK_S, "tr '\\0' '\\n' < /proc/1/cmdline; cat /proc/1/comm");
    bool completed = strcmp(r.status, "completed") == 0;
    snprintf(seen, sizeof seen, "%s", r.out);
    run_free(&r);
    assert_true(completed);
    check_lacks("init command line", seen, exe);
    check_lacks("init command line", seen, host);
}

/* A client-chosen working directory outside the sandbox's tree does not
 * lead anywhere: the directory is entered inside the sandbox. */
static void test_exec_cwd_outside(void **state) {
    escape_ctx *c = *state;
    const char *cwds[] = {c->home, "/proc/1/root", "/proc/1/cwd", "/proc/self/root/../../..",
                          c->a_ws};
    for (size_t i = 0; i < ARRAY_LEN(cwds); i++) {
        json_t *body = json_pack("{s:s, s:s, s:i}", "command", "pwd; ls -A; cat host-secret.txt",
                                 "cwd", cwds[i], "timeout_s", QUICK_S);
        json_t *reply = NULL;
        int status = 0;
        assert_int_equal(box_call(&reply, &status, c->a.socket_path, "POST", "/v1/shell/exec", body,
                                  QUICK_S * 1000 + CALL_SLACK_MS),
                         0);
        json_decref(body);
        char out[8192];
        snprintf(out, sizeof out, "%s",
                 or_empty(json_string_value(json_object_get(reply, "stdout"))));
        json_decref(reply);
        check_lacks(cwds[i], out, c->host_secret);
        check_lacks(cwds[i], out, "host-secret.txt");
        check_lacks(cwds[i], out, "/tmp/fawn-escape");
    }
}

static void test_proc_walk_every_root_and_fd(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S,
         "sleep 5 >/dev/null 2>&1 & s=$!; " PROBE " proc_walk %s %s %s/probe; rc=$?; kill $s; "
         "exit $rc",
         c->host_secret_path, c->b_marker_path, c->a_ws);
    check_completed(&r, 0);
    check_contains("proc_walk", r.out, " 0 escapes");
    check_lacks("proc_walk", r.out, "SUCCEEDED");
    run_free(&r);
}

static void test_proc_self_root_escape(void **state) {
    escape_ctx *c = *state;
    probe(c, "root unchanged, 3 paths unreachable", "proc_self_root %s %s %s/probe",
          c->host_secret_path, c->b_marker_path, c->a_ws);
}

/* ---- the box's file API and planted links ---- */

static void test_file_api_read_through_symlinks(void **state) {
    escape_ctx *c = *state;
    plant_links(c);
    /* The box is PID 1 of its namespace and a copy of its launcher: its
     * /proc/self and /proc/1 hold the launcher's environment. */
    const char *const secrets[] = {"root:x:0:0",  c->host_secret, c->b_marker,
                                   c->env_secret, "PATH=",        NULL};
    static const char *const links[] = {
        "shadow-link",          "passwd-link",  "up/etc/passwd",        "up/etc/hostname",
        "rel-passwd-link",      "secret-link",  "marker-link",          "etc-link/passwd",
        "cmdline-link",         "environ-link", "up/proc/self/environ", "up/proc/1/environ",
        "up/proc/self/cmdline",
    };
    for (size_t i = 0; i < ARRAY_LEN(links); i++) {
        char *path = strf(WS "/%s", links[i]);
        check_read_refused(c, path, secrets);
        free(path);
    }
}

static void test_file_api_write_through_symlinks(void **state) {
    escape_ctx *c = *state;
    plant_links(c);
    static const char *const targets[][2] = {
        /* path written through the API, file that must not appear in the sandbox */
        {WS "/pwn-link", "/tmp/fawn-pwned"},
        {WS "/tmp-link/fawn-pwned-dir", "/tmp/fawn-pwned-dir"},
        {WS "/up/tmp/fawn-pwned-up", "/tmp/fawn-pwned-up"},
        {WS "/etc-link/fawn-pwned-etc", "/etc/fawn-pwned-etc"},
    };
    for (size_t i = 0; i < ARRAY_LEN(targets); i++) {
        for (int append = 0; append <= 1; append++) {
            json_t *reply = NULL;
            int status = file_call(&reply, &c->a, "/v1/file/write",
                                   json_pack("{s:s, s:s, s:b}", "path", targets[i][0], "content",
                                             "pwned", "append", append));
            char *text = reply_text(reply);
            if (status < 400)
                fail_msg("write through %s was allowed: %s", targets[i][0], text);
            free(text);
            json_decref(reply);
        }
        run r;
        runf(&r, &c->a, QUICK_S, "test -e %s && echo EXISTS; true", targets[i][1]);
        check_completed(&r, 0);
        check_lacks(targets[i][1], r.out, "EXISTS");
        run_free(&r);
    }
    /* The host secret behind secret-link is untouched. */
    json_t *reply = NULL;
    int status = file_call(&reply, &c->a, "/v1/file/write",
                           json_pack("{s:s, s:s}", "path", WS "/secret-link", "content", "pwned"));
    json_decref(reply);
    char *secret = host_read(c->host_secret_path);
    assert_non_null(secret);
    assert_string_equal(secret, c->host_secret);
    free(secret);
    /* If the write was accepted, it replaced the link itself, nothing behind it. */
    if (status == 200) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/secret-link", c->a_ws);
        struct stat st;
        assert_int_equal(lstat(path, &st), 0);
        assert_true(S_ISREG(st.st_mode));
    }
}

static void test_file_api_download_through_symlinks(void **state) {
    escape_ctx *c = *state;
    plant_links(c);
    const char *const secrets[] = {"root:x:0:0",  c->host_secret, c->b_marker,
                                   c->env_secret, "PATH=",        NULL};
    static const char *const links[] = {"passwd-link",  "up/etc/passwd",   "rel-passwd-link",
                                        "secret-link",  "marker-link",     "cmdline-link",
                                        "environ-link", "etc-link/passwd", "up/proc/self/environ"};
    for (size_t i = 0; i < ARRAY_LEN(links); i++) {
        char *path = strf(WS "/%s", links[i]);
        check_download_refused(c, path, secrets);
        free(path);
    }
}

static void test_file_api_list_find_grep_do_not_follow(void **state) {
    escape_ctx *c = *state;
    plant_links(c);
    json_t *reply = NULL;
    int status = file_call(&reply, &c->a, "/v1/file/list",
                           json_pack("{s:s, s:i}", "path", WS, "max_depth", 2));
    check_status(status, 200, reply, "list");
    char *text = reply_text(json_object_get(reply, "entries"));
    check_contains("list", text, "etc-link");
    check_lacks("list through etc-link", text, "etc-link/");
    check_lacks("list through up", text, "up/");
    check_lacks("list through tmp-link", text, "tmp-link/");
    free(text);
    json_decref(reply);

    status = file_call(&reply, &c->a, "/v1/file/find",
                       json_pack("{s:s, s:s}", "path", WS, "pattern", "**/passwd"));
    check_status(status, 200, reply, "find");
    text = reply_text(json_object_get(reply, "matches"));
    check_lacks("find through links", text, "passwd");
    free(text);
    json_decref(reply);

    const char *const patterns[] = {"nologin", "root:x:0", "HOST-SECRET", "B-MARKER",
                                    c->env_secret};
    for (size_t i = 0; i < ARRAY_LEN(patterns); i++) {
        status = file_call(&reply, &c->a, "/v1/file/grep",
                           json_pack("{s:s, s:s, s:b, s:i}", "path", WS, "pattern", patterns[i],
                                     "literal", 1, "max_results", 50));
        check_status(status, 200, reply, patterns[i]);
        text = reply_text(json_object_get(reply, "matches"));
        assert_string_equal(text, "[]");
        free(text);
        json_decref(reply);
    }
}

static void test_file_api_dot_segments(void **state) {
    escape_ctx *c = *state;
    const char *const secrets[] = {"root:x:0:0", "sandbox", NULL};
    static const char *const paths[] = {
        WS "/../../../etc/passwd",
        WS "/../../etc/passwd",
        "/mnt/user-data/../etc/passwd",
        WS "/./../../../../../../etc/hostname",
        "/mnt/skills/../../etc/passwd",
        "/mnt/user-data/workspace/..\\..\\..\\etc\\passwd",
        "//etc/passwd",
        "/mnt/user-data/workspace/../../../proc/self/cmdline",
        "etc/passwd",
        "/mnt/user-data/workspace/../../..",
        "/mnt/user-data/workspace\n/../../etc/passwd",
    };
    for (size_t i = 0; i < ARRAY_LEN(paths); i++)
        check_read_refused(c, paths[i], secrets);
    json_t *reply = NULL;
    int status = file_call(
        &reply, &c->a, "/v1/file/write",
        json_pack("{s:s, s:s}", "path", WS "/../../../tmp/fawn-dotdot", "content", "pwned"));
    json_decref(reply);
    assert_true(status >= 400);
    status = file_call(&reply, &c->a, "/v1/file/list",
                       json_pack("{s:s}", "path", "/mnt/user-data/.."));
    json_decref(reply);
    assert_true(status >= 400);
    run r;
    runf(&r, &c->a, QUICK_S, "test -e /tmp/fawn-dotdot && echo EXISTS; true");
    check_lacks("dot-segment write", r.out, "EXISTS");
    run_free(&r);
}

static void test_file_api_percent_escapes_not_decoded(void **state) {
    escape_ctx *c = *state;
    const char *const secrets[] = {"root:x:0:0", c->uploads_marker, NULL};
    /* Decoded, these would reach uploads/pct-target or /etc/passwd. */
    check_read_refused(c, WS "/%2e%2e/uploads/pct-target", secrets);
    check_read_refused(c, WS "/%2E%2E/uploads/pct-target", secrets);
    check_read_refused(c, WS "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", secrets);
    check_read_refused(c, WS "%2f..%2f..%2f..%2fetc%2fpasswd", secrets);
    check_read_refused(c, "%2fetc%2fpasswd", secrets);
    /* A write creates the literal name, never a file above the workspace. */
    json_t *reply = NULL;
    int status = file_call(
        &reply, &c->a, "/v1/file/write",
        json_pack("{s:s, s:s}", "path", WS "/%2e%2e/pct-written", "content", "literal"));
    json_decref(reply);
    char up[PATH_MAX + 32], literal[PATH_MAX + 32];
    snprintf(up, sizeof up, "%s/pct-written", c->a_user_data);
    snprintf(literal, sizeof literal, "%s/%%2e%%2e/pct-written", c->a_ws);
    assert_false(host_exists(up));
    assert_int_equal(host_exists(literal), status == 200);
}

static void test_file_download_decodes_once(void **state) {
    escape_ctx *c = *state;
    const char *const secrets[] = {"root:x:0:0", c->uploads_marker, NULL};
    /* %25 decodes to '%', leaving a literal "%2e%2e" directory name. */
    char *raw = NULL;
    int status = download(&raw, &c->a, WS "/%252e%252e/uploads/pct-target");
    assert_int_equal(status, 404);
    check_lacks("double-encoded dot segment", raw, c->uploads_marker);
    free(raw);
    check_download_refused(c, WS "/%2e%2e/%2e%2e/%2e%2e/etc/passwd", secrets);
    check_download_refused(c, WS "/%2E%2E%2F%2E%2E%2F%2E%2E%2Fetc%2Fpasswd", secrets);
    check_download_refused(c, "%2Fetc%2Fpasswd", secrets);
    check_download_refused(c, WS "/..%2f..%2f..%2fproc%2fself%2fenviron",
                           (const char *const[]){c->env_secret, "PATH=", NULL});
    check_download_refused(c, WS "/%00/../../etc/passwd", secrets);
}

static void test_file_api_absolute_host_paths(void **state) {
    escape_ctx *c = *state;
    char *own = strf("%s/probe", c->a_ws);
    const char *const secrets[] = {c->host_secret, c->b_marker, "ELF", NULL};
    check_read_refused(c, c->host_secret_path, secrets);
    check_read_refused(c, c->b_marker_path, secrets);
    check_read_refused(c, own, secrets); /* even A's own files are not reachable by host path */
    check_read_refused(c, "/proc/self/environ", (const char *const[]){c->env_secret, NULL});
    check_read_refused(c, "/proc/1/environ", (const char *const[]){c->env_secret, NULL});
    check_read_refused(c, "/run/fawn-box", secrets);
    char *planted = strf("%s/fawn-written", c->home);
    json_t *reply = NULL;
    assert_true(file_call(&reply, &c->a, "/v1/file/write",
                          json_pack("{s:s, s:s}", "path", planted, "content", "pwned")) >= 400);
    json_decref(reply);
    assert_false(host_exists(planted));
    assert_true(file_call(&reply, &c->a, "/v1/file/list", json_pack("{s:s}", "path", c->home)) >=
                400);
    json_decref(reply);
    assert_true(file_call(&reply, &c->a, "/v1/file/grep",
                          json_pack("{s:s, s:s}", "path", "/", "pattern", "root")) >= 400);
    json_decref(reply);
    assert_true(file_call(&reply, &c->a, "/v1/file/find",
                          json_pack("{s:s, s:s}", "path", "/etc", "pattern", "*")) >= 400);
    json_decref(reply);
    free(planted);
    free(own);
}

static void test_file_api_fifo_does_not_hang(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, "mkfifo " WS "/fifo && echo made");
    check_completed(&r, 0);
    run_free(&r);
    /* Each call fails the test unless it answers within FILE_CALL_MS. */
    json_t *reply = NULL;
    assert_true(file_call(&reply, &c->a, "/v1/file/read", json_pack("{s:s}", "path", WS "/fifo")) >=
                400);
    json_decref(reply);
    assert_int_equal(file_call(&reply, &c->a, "/v1/file/grep",
                               json_pack("{s:s, s:s}", "path", WS, "pattern", "x")),
                     200);
    json_decref(reply);
    char *raw = NULL;
    assert_true(download(&raw, &c->a, WS "/fifo") >= 400);
    free(raw);
    runf(&r, &c->a, QUICK_S, "rm -f " WS "/fifo");
    run_free(&r);
}

/* ---- links ---- */

static void test_hardlink_across_mounts(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, "echo t > /tmp/fawn-hl-src");
    run_free(&r);
    probe(c, "link: errno=18 ", "link /etc/hostname " WS "/hl-etc");
    probe(c, "link: errno=18 ", "link /usr/bin/su " WS "/hl-su");
    probe(c, "link: errno=18 ", "link /tmp/fawn-hl-src " WS "/hl-tmp");
    probe(c, "link: errno=18 ", "link /mnt/skills/demo/SKILL.md " WS "/hl-skill");
    runf(&r, &c->a, QUICK_S, "ln /etc/hostname " WS "/hl-ln; echo rc=$?");
    check_contains("ln /etc/hostname", r.err, "cross-device");
    check_contains("ln /etc/hostname", r.out, "rc=1");
    run_free(&r);
    static const char *const names[] = {"hl-etc", "hl-su", "hl-tmp", "hl-skill", "hl-ln"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        char path[PATH_MAX + 32];
        snprintf(path, sizeof path, "%s/%s", c->a_ws, names[i]);
        assert_false(host_exists(path));
    }
}

static void test_hardlink_inside_then_api_write(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S,
         "cd " WS " && printf original > hl-orig && ln -f hl-orig hl-alias && stat -c %%h hl-orig");
    check_completed(&r, 0);
    assert_string_equal(r.out, "2\n");
    run_free(&r);
    static const char *const modes[] = {"replace", "append"};
    for (int append = 0; append <= 1; append++) {
        json_t *reply = NULL;
        int status = file_call(&reply, &c->a, "/v1/file/write",
                               json_pack("{s:s, s:s, s:b}", "path", WS "/hl-alias", "content",
                                         "changed", "append", append));
        json_decref(reply);
        char p1[PATH_MAX + 32], p2[PATH_MAX + 32];
        snprintf(p1, sizeof p1, "%s/hl-orig", c->a_ws);
        snprintf(p2, sizeof p2, "%s/hl-alias", c->a_ws);
        char *orig = host_read(p1), *alias = host_read(p2);
        assert_non_null(orig);
        assert_non_null(alias);
        /* Refused, or written as a new file: the other name never changes. */
        if (strcmp(orig, "original") != 0)
            fail_msg("%s write through a hard link changed the other name: \"%s\"", modes[append],
                     orig);
        if (status == 200 && append == 0)
            assert_string_equal(alias, "changed");
        else if (status != 200)
            assert_string_equal(alias, "original");
        free(orig);
        free(alias);
        if (status == 200)
            break; /* the names are no longer linked */
    }
}

/* ---- processes and signals ---- */

static void test_ptrace_init(void **state) {
    escape_ctx *c = *state;
    probe(c, "ptrace_attach: errno=1 ", "ptrace_attach 1");
    probe(c, "ptrace_seize: errno=1 ", "ptrace_attach 1");
    probe(c, "process_vm_readv: errno=1 ", "process_vm_readv 1");
}

static void test_pidfd_getfd_init_channel(void **state) {
    escape_ctx *c = *state;
    /* fd 3 of the init is its control channel to the box. */
    probe(c, "pidfd_getfd: errno=1 ", "pidfd_getfd 1 3");
}

static void test_ptrace_sibling(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S,
         "sleep 5 >/dev/null 2>&1 & s=$!; " PROBE " ptrace_attach $s; a=$?; " PROBE
         " process_vm_readv $s; b=$?; kill $s; exit $((a | b))");
    check_completed(&r, 0);
    check_contains("ptrace sibling", r.out, "ptrace_attach: errno=1 ");
    check_contains("ptrace sibling", r.out, "ptrace_seize: errno=1 ");
    check_contains("process_vm_readv sibling", r.out, "process_vm_readv: errno=1 ");
    run_free(&r);
}

static void test_kill_init(void **state) {
    escape_ctx *c = *state;
    run r;
    /* Had the init died, the kernel would have killed this shell with it. */
    runf(&r, &c->a, QUICK_S,
         "kill -9 1; kill -TERM 1; kill -STOP 1; kill -SEGV 1; sleep 0.3; echo survived");
    check_completed(&r, 0);
    check_contains("kill -9 1", r.out, "survived");
    run_free(&r);
    json_t *reply = NULL;
    assert_int_equal(
        file_call(&reply, &c->a, "/v1/shell/sessions", json_pack("{s:s}", "id", "killer")), 200);
    json_decref(reply);
    run_in(&r, &c->a, "killer", QUICK_S, "kill -9 1; sleep 0.3; echo survived");
    check_completed(&r, 0);
    check_contains("kill -9 1 in a session", r.out, "survived");
    run_free(&r);
    run_in(&r, &c->a, "killer", QUICK_S, "echo still-here");
    check_completed(&r, 0);
    assert_string_equal(r.out, "still-here\n");
    run_free(&r);
    int status = 0;
    assert_int_equal(box_call(&reply, &status, c->a.socket_path, "DELETE",
                              "/v1/shell/sessions/killer", NULL, 5000),
                     0);
    json_decref(reply);
    check_usable(&c->a, "a");
    check_generation(&c->a);
}

static void test_signal_the_box(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, "kill -9 -1; kill -TERM -1; echo after");
    check_contains("kill -1", r.out, "after");
    run_free(&r);
    /* Host pids are not in the sandbox's pid namespace (small pids could
     * collide with the sandbox's own and are skipped). */
    pid_t host_pids[] = {c->a.pid, c->b.pid, getpid(), getppid()};
    for (size_t i = 0; i < ARRAY_LEN(host_pids); i++)
        if (host_pids[i] > 1000)
            probe(c, "kill: errno=3 ", "kill %d 0", (int)host_pids[i]);
    check_generation(&c->a);
    check_generation(&c->b);
    check_usable(&c->a, "a");
}

/* ---- mounts, namespaces, roots ---- */

static void test_mount_syscalls(void **state) {
    escape_ctx *c = *state;
    probe(c, "mount_tmpfs: errno=1 ", "mount_tmpfs");
    probe(c, "mount_proc: errno=1 ", "mount_proc");
    probe(c, "mount_bind: errno=1 ", "mount_bind");
    probe(c, "remount_root_rw: errno=1 ", "remount_rw");
    probe(c, "mount_setattr_rw: errno=1 ", "remount_rw");
    probe(c, "fsopen: errno=1 ", "new_mount_api");
    probe(c, "open_tree: errno=1 ", "new_mount_api");
    probe(c, "move_mount: errno=1 ", "new_mount_api");
    run r;
    runf(&r, &c->a, QUICK_S, "grep -c fawn-probe /proc/self/mountinfo; touch /usr/x 2>&1");
    check_contains("no probe mounts", r.out, "0\n");
    check_contains("/usr still read-only", r.out, "Read-only file system");
    run_free(&r);
}

static void test_umount_workspace_and_proc(void **state) {
    escape_ctx *c = *state;
    probe(c, "umount: errno=1 ", "umount /mnt/user-data/workspace");
    /* Under the command's /proc lies the box's: unmounting it would expose the box. */
    probe(c, "umount: errno=1 ", "umount /proc");
    probe(c, "umount: errno=1 ", "umount /usr");
    probe(c, "umount: errno=1 ", "umount /");
}

static void test_unshare(void **state) {
    escape_ctx *c = *state;
    probe(c, "unshare: user=1 mnt=1 pid=1 net=1 ipc=1 uts=1 cgroup=1 time=1\n", "unshare");
    run r;
    runf(&r, &c->a, QUICK_S, "unshare -Ur id; echo rc=$?");
    check_lacks("unshare -Ur", r.out, "rc=0");
    run_free(&r);
}

static void test_clone_new_user_namespace(void **state) {
    escape_ctx *c = *state;
    probe(c, "clone_newuser: errno=1 ", "clone_newuser");
    /* clone3 hides its flags from the filter: it is refused outright. */
    probe(c, "clone3_newuser: errno=38 ", "clone_newuser");
}

static void test_setns(void **state) {
    escape_ctx *c = *state;
    probe(c, "setns self: mnt=1 pid=1 net=1 user=1 uts=1 ipc=1 cgroup=1 time=1\n", "setns self");
    probe(c, "setns 1: mnt=13 pid=13 net=13 user=13 uts=13 ipc=13 cgroup=13 time=13\n", "setns 1");
    run r;
    runf(&r, &c->a, QUICK_S, "nsenter -t 1 -a true; echo rc=$?");
    check_lacks("nsenter", r.out, "rc=0");
    run_free(&r);
}

static void test_pivot_root(void **state) {
    escape_ctx *c = *state;
    probe(c, "pivot_root: errno=1 ", "pivot_root");
}

static void test_chroot(void **state) {
    escape_ctx *c = *state;
    probe(c, "chroot: errno=1 ", "chroot");
    run r;
    runf(&r, &c->a, QUICK_S, "chroot / /bin/true; echo rc=$?");
    check_lacks("chroot binary", r.out, "rc=0");
    run_free(&r);
}

/* ---- network ---- */

static void test_host_loopback_tcp(void **state) {
    escape_ctx *c = *state;
    probe(c, "tcp_connect: errno=111 ", "tcp_connect 127.0.0.1 %d", c->tcp_port);
    run r;
    runf(&r, &c->a, QUICK_S, "exec 3<>/dev/tcp/127.0.0.1/%d && echo CONNECTED; echo tried",
         c->tcp_port);
    check_lacks("bash /dev/tcp", r.out, "CONNECTED");
    run_free(&r);
    assert_false(pending_connection(c->tcp_fd));
    struct sockaddr_in to = {.sin_family = AF_INET,
                             .sin_port = htons((uint16_t)c->tcp_port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    check_listener_alive(c->tcp_fd, (struct sockaddr *)&to, sizeof to);
}

static void test_host_external_address(void **state) {
    escape_ctx *c = *state;
    if (c->ext_fd < 0)
        skip();
    run r;
    runf(&r, &c->a, QUICK_S, PROBE " tcp_connect %s %d", c->ext_ip, c->ext_port);
    check_completed(&r, 0);
    check_contains("external address", r.out, "tcp_connect: errno=");
    run_free(&r);
    assert_false(pending_connection(c->ext_fd));
}

static void test_host_abstract_unix_socket(void **state) {
    escape_ctx *c = *state;
    probe(c, "unix_connect: errno=111 ", "unix_connect @%s", c->abstract_name);
    assert_false(pending_connection(c->abstract_fd));
    struct sockaddr_un to = {.sun_family = AF_UNIX};
    size_t n = strlen(c->abstract_name);
    memcpy(to.sun_path + 1, c->abstract_name, n);
    check_listener_alive(c->abstract_fd, (struct sockaddr *)&to,
                         (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + n));
}

static void test_only_loopback_interface(void **state) {
    escape_ctx *c = *state;
    probe(c, "ifaces: lo\n", "ifaces");
    run r;
    runf(&r, &c->a, QUICK_S,
         "tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' '; ls /sys/class/net 2>&1");
    check_completed(&r, 2);
    check_contains("interfaces", r.out, "lo\n");
    assert_int_equal(strncmp(r.out, "lo\n", 3), 0);
    check_contains("no /sys", r.out, "No such file");
    run_free(&r);
}

/* ---- resources ---- */

static void test_memory_bomb(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, 30, PROBE " mem_bomb %d", BOMB_MIB);
    check_lacks("memory bomb", r.out, "SUCCEEDED");
    bool oom_killed = strcmp(r.status, "killed") == 0 && r.exit_code == 137;
    bool refused = strcmp(r.status, "completed") == 0 && r.exit_code == 0 &&
                   strstr(r.out, "errno=12 ");
    if (!oom_killed && !refused)
        fail_msg("memory bomb: %s/%d\n%s%s", r.status, r.exit_code, r.out, r.err);
    run_free(&r);
    check_generation(&c->a); /* the OOM killer took the bomb, not the box */
    check_usable(&c->a, "a");
    check_usable(&c->b, "b");
    check_host_can_fork();
}

static void test_tmp_fill_bounded(void **state) {
    escape_ctx *c = *state;
    static const char *const dirs[] = {"/tmp", "/dev/shm"};
    for (size_t i = 0; i < ARRAY_LEN(dirs); i++) {
        run r;
        runf(&r, &c->a, 30,
             "dd if=/dev/zero of=%s/fill bs=1M count=200 2>&1; stat -c 'size=%%s' %s/fill; "
             "rm -f %s/fill",
             dirs[i], dirs[i], dirs[i]);
        check_completed(&r, 0);
        check_contains(dirs[i], r.out, "No space left on device");
        const char *size = strstr(r.out, "size=");
        assert_non_null(size);
        assert_true(strtoull(size + 5, NULL, 10) <= (uint64_t)LIMIT_TMP_MB << 20);
        run_free(&r);
    }
}

static void test_workspace_file_size_bounded(void **state) {
    escape_ctx *c = *state;
    uint64_t limit = (uint64_t)LIMIT_FILE_MB << 20;
    probe(c, "fsize: errno=27 ", "fsize " WS "/big-probe %llu", (unsigned long long)limit);
    run r;
    runf(&r, &c->a, 30, "dd if=/dev/zero of=" WS "/big bs=1M seek=%d count=8", LIMIT_FILE_MB - 4);
    if (r.exit_code == 0)
        fail_msg("dd past the file size limit succeeded: %s", r.err);
    run_free(&r);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/big", c->a_ws);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true((uint64_t)st.st_size <= limit);
    unlink(path);
    snprintf(path, sizeof path, "%s/big-probe", c->a_ws);
    unlink(path);
}

static void test_fork_bomb(void **state) {
    escape_ctx *c = *state;
    run r;
    int64_t started = fawn_now_ms();
    runf(&r, &c->a, BOMB_S, ":(){ :|:& };:");
    run_free(&r);
    /* Contained: the host and the neighbour work while A's bomb is live. */
    usleep(500 * 1000);
    check_host_can_fork();
    check_usable(&c->b, "b");
    /* Bounded: the bomb's whole tree is killed at its command's deadline.
     * Processes of A's host uid then are only the box and a spare init. */
    int left = -1;
    while (fawn_now_ms() - started < BOMB_S * 1000 + STOP_WAIT_MS) {
        left = count_processes_of(c->a_uid);
        if (fawn_now_ms() - started > BOMB_S * 1000 && left <= 2)
            break;
        usleep(200 * 1000);
    }
    if (left > 2)
        fail_msg("%d processes of the fork bomb outlived its %d s timeout", left - 2, BOMB_S);
    check_usable(&c->a, "a");
}

/* ---- privileges ---- */

static void test_setuid_gives_no_capabilities(void **state) {
    escape_ctx *c = *state;
    probe(c, "eff=0 prm=0 inh=0 bnd=0 amb=0 nnp=1", "setuid");
    probe(c, "setuid: capset errno=1\n", "setuid");
}

static void test_setuid_binaries(void **state) {
    escape_ctx *c = *state;
    /* A setuid-root binary put there by the host, and one the sandbox makes. */
    char path[PATH_MAX + 32], probe_host[PATH_MAX + 32];
    snprintf(probe_host, sizeof probe_host, "%s/probe", c->a_ws);
    snprintf(path, sizeof path, "%s/suid-root", c->a_ws);
    run r;
    if (geteuid() == 0) {
        assert_int_equal(copy_file(probe_host, path, 0755), 0);
        assert_int_equal(chown(path, 0, 0), 0);
        assert_int_equal(chmod(path, 04755), 0);
        runf(&r, &c->a, QUICK_S, WS "/suid-root caps");
        check_completed(&r, 0);
        check_contains("setuid-root copy", r.out, "eff=0 prm=0 inh=0 bnd=0 amb=0 nnp=1");
        run_free(&r);
    }
    runf(&r, &c->a, QUICK_S,
         "cp " PROBE " " WS "/suid-own && chmod 6755 " WS "/suid-own && " WS "/suid-own caps");
    check_completed(&r, 0);
    check_contains("sandbox-made setuid", r.out, "eff=0 prm=0 inh=0 bnd=0 amb=0 nnp=1");
    run_free(&r);
    snprintf(path, sizeof path, "%s/suid-own", c->a_ws);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_uid, c->a_uid); /* on the host it belongs to the sandbox's uid */
    assert_int_not_equal(st.st_uid, 0);
}

static void test_system_setuid_tools(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S,
         "su -c 'grep CapEff /proc/self/status' root 2>&1; echo su=$?; "
         "passwd -d root >/dev/null 2>&1; echo passwd=$?; "
         "mount -t tmpfs none /mnt >/dev/null 2>&1; echo mount=$?; "
         "umount /usr >/dev/null 2>&1; echo umount=$?; "
         "grep -c ' /mnt tmpfs' /proc/self/mounts");
    check_lacks("passwd", r.out, "passwd=0");
    check_lacks("mount", r.out, "mount=0");
    check_lacks("umount", r.out, "umount=0");
    /* If su ran at all, it gained nothing. */
    const char *eff = strstr(r.out, "CapEff:");
    if (eff)
        check_contains("su", eff, "CapEff:\t0000000000000000");
    size_t len = strlen(r.out);
    assert_true(len >= 3 && strcmp(r.out + len - 3, "\n0\n") == 0); /* no tmpfs on /mnt */
    run_free(&r);
}

static void test_uid_is_not_host_root(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, "cat /proc/self/uid_map /proc/self/gid_map; touch " WS "/owned");
    check_completed(&r, 0);
    unsigned inner = 1, outer = 0, count = 0, g_inner = 1, g_outer = 0, g_count = 0;
    assert_int_equal(
        sscanf(r.out, "%u %u %u %u %u %u", &inner, &outer, &count, &g_inner, &g_outer, &g_count),
        6);
    assert_int_equal(inner, 0);
    assert_int_equal(count, 1); /* exactly one uid: no other host uid is reachable */
    assert_int_equal(g_count, 1);
    assert_int_not_equal(outer, 0);
    assert_int_not_equal(g_outer, 0);
    assert_int_equal(outer, c->a_uid);
    if (geteuid() == 0)
        assert_true(outer >= SANDBOX_UID_BASE && outer < SANDBOX_UID_BASE + SANDBOX_UID_RANGE);
    assert_int_not_equal(c->a_uid, c->b_uid);
    run_free(&r);
    char path[PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/owned", c->a_ws);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_uid, c->a_uid);
}

static void test_raise_rlimits(void **state) {
    escape_ctx *c = *state;
    probe(c, "setrlimit: nofile=1 fsize=1 nproc=1\n", "setrlimit");
}

static void test_lower_oom_score(void **state) {
    escape_ctx *c = *state;
    /* A command that made itself unkillable would make the OOM killer pick the box. */
    probe(c, "write_file: errno=13 ", "write_file /proc/self/oom_score_adj -1000");
}

/* ---- devices and terminals ---- */

static void test_mknod(void **state) {
    escape_ctx *c = *state;
    probe(c, "mknod: errno=1 ", "mknod /tmp/sda b 8 0");
    probe(c, "mknod: errno=1 ", "mknod " WS "/mem c 1 1");
    probe(c, "mknod: errno=1 ", "mknod /dev/shm/vda b 254 0");
}

static void test_raw_devices_absent(void **state) {
    escape_ctx *c = *state;
    static const char *const devs[] = {"/dev/mem", "/dev/kmem",    "/dev/port", "/dev/sda",
                                       "/dev/vda", "/dev/nvme0n1", "/dev/xvda", "/dev/kmsg"};
    for (size_t i = 0; i < ARRAY_LEN(devs); i++)
        probe(c, "read_file: errno=2 ", "read_file %s", devs[i]);
    probe(c, "write_file: errno=30 ", "write_file /dev/sda");
    run r;
    runf(&r, &c->a, QUICK_S, "ls -A /dev | tr '\\n' ' '; find / -xdev -type b 2>/dev/null");
    check_completed(&r, 0);
    assert_string_equal(r.out, "fd full null random shm stderr stdin stdout tty urandom zero ");
    run_free(&r);
}

static void test_tiocsti(void **state) {
    escape_ctx *c = *state;
    probe(c, "tiocsti: errno=1 ", "tiocsti");
}

static void test_tioclinux(void **state) {
    escape_ctx *c = *state;
    probe(c, "tioclinux: errno=1 ", "tioclinux");
}

/* ---- system calls the seccomp filter refuses ---- */

static void test_bpf(void **state) { probe(*state, "bpf: errno=1 ", "bpf"); }

static void test_perf_event_open(void **state) {
    probe(*state, "perf_event_open: errno=1 ", "perf_event_open");
}

static void test_keyctl(void **state) {
    probe(*state, "keyctl: errno=1 ", "keyctl");
    probe(*state, "add_key: errno=1 ", "keyctl");
    probe(*state, "request_key: errno=1 ", "keyctl");
}

static void test_userfaultfd(void **state) {
    probe(*state, "userfaultfd: errno=1 ", "userfaultfd");
}

static void test_kexec_load(void **state) {
    probe(*state, "kexec_load: errno=1 ", "kexec_load");
    probe(*state, "kexec_file_load: errno=1 ", "kexec_load");
}

static void test_init_module(void **state) {
    probe(*state, "init_module: errno=1 ", "init_module");
    probe(*state, "finit_module: errno=1 ", "init_module");
    probe(*state, "delete_module: errno=1 ", "init_module");
}

static void test_open_by_handle_at(void **state) {
    probe(*state, "name_to_handle_at: errno=1 ", "open_by_handle_at");
    probe(*state, "open_by_handle_at: errno=1 ", "open_by_handle_at");
}

static void test_io_uring_setup(void **state) {
    probe(*state, "io_uring_setup: errno=1 ", "io_uring_setup");
}

static void test_personality(void **state) {
    escape_ctx *c = *state;
    probe(c, "personality: errno=1 ", "personality");
    probe(c, "personality_exec_data: errno=1 ", "personality");
    run r;
    runf(&r, &c->a, QUICK_S, "setarch $(uname -m) -R true; echo rc=$?");
    check_lacks("setarch -R", r.out, "rc=0");
    run_free(&r);
}

static void test_host_privileged_calls(void **state) {
    escape_ctx *c = *state;
    static const char *const calls[] = {"syslog", "clock_settime", "iopl",   "ioperm",
                                        "reboot", "acct",          "swapon", "sethostname"};
    run r;
    runf(&r, &c->a, QUICK_S, PROBE " host_calls");
    check_completed(&r, 0);
    for (size_t i = 0; i < ARRAY_LEN(calls); i++) {
        char *want = strf("%s: errno=1 ", calls[i]);
        check_contains(calls[i], r.out, want);
        free(want);
    }
    run_free(&r);
}

/* ---- /proc/sys and friends ---- */

static void test_sysctl_writes(void **state) {
    escape_ctx *c = *state;
    char *core_before = host_read("/proc/sys/kernel/core_pattern");
    static const char *const knobs[] = {
        "/proc/sys/kernel/hostname", "/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe",
        "/proc/sys/vm/drop_caches", "/proc/sys/kernel/domainname"};
    for (size_t i = 0; i < ARRAY_LEN(knobs); i++)
        probe(c, "write_file: errno=", "write_file %s escaped", knobs[i]);
    run r;
    runf(&r, &c->a, QUICK_S,
         "echo escaped > /proc/sys/kernel/hostname; hostname escaped2 2>/dev/null; hostname");
    assert_string_equal(r.out, "sandbox\n");
    run_free(&r);
    char host[256];
    assert_int_equal(gethostname(host, sizeof host), 0);
    assert_string_equal(host, c->hostname);
    char *core_after = host_read("/proc/sys/kernel/core_pattern");
    if (core_before && core_after)
        assert_string_equal(core_before, core_after);
    free(core_before);
    free(core_after);
}

static void test_sysrq_kcore_kmsg(void **state) {
    escape_ctx *c = *state;
    /* Absent on kernels built without them; refused where present. */
    probe(c, "write_file: errno=", "write_file /proc/sysrq-trigger b");
    probe(c, "read_file: errno=", "read_file /proc/kcore");
    probe(c, "read_file: errno=", "read_file /proc/kmsg");
    run r;
    runf(&r, &c->a, QUICK_S, "dmesg >/dev/null 2>&1; echo rc=$?");
    check_lacks("dmesg", r.out, "rc=0");
    run_free(&r);
}

/* ---- what a command can see of the host and the box ---- */

static void test_environment_has_no_host_secrets(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S, "env; tr '\\0' '\\n' < /proc/self/environ");
    check_completed(&r, 0);
    check_contains("env", r.out, "HOME=/tmp");
    check_lacks("env", r.out, c->env_secret);
    for (size_t i = 0; i < ARRAY_LEN(secret_env_names); i++)
        check_lacks("env", r.out, secret_env_names[i]);
    run_free(&r);
}

static void test_box_socket_unreachable(void **state) {
    escape_ctx *c = *state;
    run r;
    runf(&r, &c->a, QUICK_S,
         "find /run /tmp /mnt /dev /var /home /root /opt /etc -type s 2>/dev/null; echo end");
    check_completed(&r, 0);
    assert_string_equal(r.out, "end\n");
    run_free(&r);
    probe(c, "unix_connect: errno=2 ", "unix_connect %s", c->a.socket_path);
    probe(c, "unix_connect: errno=2 ", "unix_connect %s", c->b.socket_path);
    /* Only stdin, stdout and stderr reach a command, run directly or by a shell. */
    probe(c, "fds: 0=/dev/null 1=pipe:", "fds");
    runf(&r, &c->a, QUICK_S, "true; " PROBE " fds");
    check_completed(&r, 0);
    check_contains("fds through bash", r.out, "fds: 0=/dev/null 1=pipe:");
    run_free(&r);
}

static void test_host_ipc_namespace(void **state) {
    escape_ctx *c = *state;
    assert_int_equal(msgget(c->msq_key, 0), c->msq_id); /* it exists on the host */
    probe(c, "msgget: errno=2 ", "msgget %d", (int)c->msq_key);
    run r;
    runf(&r, &c->a, QUICK_S, "ipcs -q");
    char *key = strf("0x%08x", (unsigned)c->msq_key);
    check_lacks("ipcs", r.out, key);
    free(key);
    run_free(&r);
}

static void test_sessions_isolated(void **state) {
    escape_ctx *c = *state;
    char secret[33], marker[64];
    fawn_random_hex(secret, 16);
    snprintf(marker, sizeof marker, "sleep 31.%u", unique_number());
    json_t *reply = NULL;
    assert_int_equal(
        file_call(&reply, &c->a, "/v1/shell/sessions", json_pack("{s:s}", "id", "s-secret")), 200);
    json_decref(reply);
    assert_int_equal(
        file_call(&reply, &c->a, "/v1/shell/sessions", json_pack("{s:s}", "id", "s-spy")), 200);
    json_decref(reply);
    char *cmd = strf("export SECRET_X=%s; %s >/dev/null 2>&1 & echo started", secret, marker);
    run r;
    run_in(&r, &c->a, "s-secret", QUICK_S, cmd);
    free(cmd);
    check_completed(&r, 0);
    run_free(&r);
    /* Positive control: the owning session sees its process and variable. */
    run_in(&r, &c->a, "s-secret", QUICK_S, "ps -eo args; env");
    check_contains("own session", r.out, marker);
    check_contains("own session", r.out, secret);
    run_free(&r);
    static const char spy[] = "ps -eo args; for f in /proc/[0-9]*/environ /proc/[0-9]*/cmdline; do "
                              "tr '\\0' '\\n' < $f; done 2>/dev/null; env";
    run_in(&r, &c->a, "s-spy", QUICK_S, spy);
    check_lacks("other session", r.out, marker);
    check_lacks("other session", r.out, secret);
    run_free(&r);
    run_in(&r, &c->a, NULL, QUICK_S, spy);
    check_lacks("one-shot exec", r.out, marker);
    check_lacks("one-shot exec", r.out, secret);
    run_free(&r);
    run_in(&r, &c->b, NULL, QUICK_S, spy);
    check_lacks("sandbox B", r.out, marker);
    check_lacks("sandbox B", r.out, secret);
    run_free(&r);
    static const char *const ids[] = {"s-secret", "s-spy"};
    for (size_t i = 0; i < ARRAY_LEN(ids); i++) {
        char *route = strf("/v1/shell/sessions/%s", ids[i]);
        int status = 0;
        assert_int_equal(box_call(&reply, &status, c->a.socket_path, "DELETE", route, NULL, 5000),
                         0);
        assert_int_equal(status, 200);
        json_decref(reply);
        free(route);
    }
}

/* ---- shutting down ---- */

static void test_stop_leaves_no_process(void **state) {
    escape_ctx *c = *state;
    /* A daemon that tries to outlive its sandbox; A still holds whatever the
     * earlier attacks left running. */
    run r;
    run_in(&r, &c->b, NULL, QUICK_S, "(setsid nohup sleep 600 >/dev/null 2>&1 &); echo planted");
    check_completed(&r, 0);
    run_free(&r);
    assert_true(count_processes_of(c->a_uid) > 0);
    assert_true(count_processes_of(c->b_uid) > 1);
    assert_int_equal(local_box_stop(&c->cfg, c->a_user, "a1"), 0);
    assert_int_equal(local_box_stop(&c->cfg, c->b_user, "b1"), 0);
    int left_a, left_b;
    wait_sandboxes_gone(c, &left_a, &left_b);
    if (left_a || left_b)
        fail_msg("%d processes of A and %d of B outlived local_box_stop", left_a, left_b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_shadow_absent),
        cmocka_unit_test(test_etc_passwd_is_the_sandbox_own),
        cmocka_unit_test(test_host_secret_by_absolute_path),
        cmocka_unit_test(test_sibling_marker_via_dotdot),
        cmocka_unit_test(test_sibling_marker_via_host_path),
        cmocka_unit_test(test_write_outside_user_data),
        cmocka_unit_test(test_skeleton_dirs_hold_no_host_files),
        cmocka_unit_test(test_proc_init_unreachable),
        cmocka_unit_test(test_launcher_command_line_hidden),
        cmocka_unit_test(test_exec_cwd_outside),
        cmocka_unit_test(test_proc_walk_every_root_and_fd),
        cmocka_unit_test(test_proc_self_root_escape),
        cmocka_unit_test(test_file_api_read_through_symlinks),
        cmocka_unit_test(test_file_api_write_through_symlinks),
        cmocka_unit_test(test_file_api_download_through_symlinks),
        cmocka_unit_test(test_file_api_list_find_grep_do_not_follow),
        cmocka_unit_test(test_file_api_dot_segments),
        cmocka_unit_test(test_file_api_percent_escapes_not_decoded),
        cmocka_unit_test(test_file_download_decodes_once),
        cmocka_unit_test(test_file_api_absolute_host_paths),
        cmocka_unit_test(test_file_api_fifo_does_not_hang),
        cmocka_unit_test(test_hardlink_across_mounts),
        cmocka_unit_test(test_hardlink_inside_then_api_write),
        cmocka_unit_test(test_ptrace_init),
        cmocka_unit_test(test_pidfd_getfd_init_channel),
        cmocka_unit_test(test_ptrace_sibling),
        cmocka_unit_test(test_kill_init),
        cmocka_unit_test(test_signal_the_box),
        cmocka_unit_test(test_mount_syscalls),
        cmocka_unit_test(test_umount_workspace_and_proc),
        cmocka_unit_test(test_unshare),
        cmocka_unit_test(test_clone_new_user_namespace),
        cmocka_unit_test(test_setns),
        cmocka_unit_test(test_pivot_root),
        cmocka_unit_test(test_chroot),
        cmocka_unit_test(test_host_loopback_tcp),
        cmocka_unit_test(test_host_external_address),
        cmocka_unit_test(test_host_abstract_unix_socket),
        cmocka_unit_test(test_only_loopback_interface),
        cmocka_unit_test(test_setuid_gives_no_capabilities),
        cmocka_unit_test(test_setuid_binaries),
        cmocka_unit_test(test_system_setuid_tools),
        cmocka_unit_test(test_uid_is_not_host_root),
        cmocka_unit_test(test_raise_rlimits),
        cmocka_unit_test(test_lower_oom_score),
        cmocka_unit_test(test_mknod),
        cmocka_unit_test(test_raw_devices_absent),
        cmocka_unit_test(test_tiocsti),
        cmocka_unit_test(test_tioclinux),
        cmocka_unit_test(test_bpf),
        cmocka_unit_test(test_perf_event_open),
        cmocka_unit_test(test_keyctl),
        cmocka_unit_test(test_userfaultfd),
        cmocka_unit_test(test_kexec_load),
        cmocka_unit_test(test_init_module),
        cmocka_unit_test(test_open_by_handle_at),
        cmocka_unit_test(test_io_uring_setup),
        cmocka_unit_test(test_personality),
        cmocka_unit_test(test_host_privileged_calls),
        cmocka_unit_test(test_sysctl_writes),
        cmocka_unit_test(test_sysrq_kcore_kmsg),
        cmocka_unit_test(test_environment_has_no_host_secrets),
        cmocka_unit_test(test_box_socket_unreachable),
        cmocka_unit_test(test_host_ipc_namespace),
        cmocka_unit_test(test_sessions_isolated),
        cmocka_unit_test(test_memory_bomb),
        cmocka_unit_test(test_tmp_fill_bounded),
        cmocka_unit_test(test_workspace_file_size_bounded),
        /* Last: a bomb that outlived its timeout would disturb what follows. */
        cmocka_unit_test(test_fork_bomb),
        cmocka_unit_test(test_stop_leaves_no_process),
    };
    return cmocka_run_group_tests_name("escape", tests, escape_setup, escape_teardown);
}
