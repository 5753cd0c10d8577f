/* The local provider with real sandboxes: ids, start and reuse, persistence
 * across restarts, isolation between threads, the host uid, the network,
 * cgroup limits, the environment, and a clean stop. This program is the
 * launcher: every box runs in a clone of it. Each test uses its own thread
 * ids under one temporary home; the group teardown stops every sandbox. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "config/config.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/local.h"
#include "sandbox/user_data.h"

#define WS "/mnt/user-data/workspace"
/* The user of every sandbox here: unique per run (group_setup), so that
 * the host uid a sandbox gets (from its id) is not a sandbox's of another
 * run on this host: the stop test counts that uid's processes. */
static char user_id[32] = "sbx-user-";
#define USER_ID ((const char *)user_id)
/* Budget of one API call whose command should end at once. */
#define CALL_MS 15000
/* Ceiling of a call whose command fills the sandbox's memory until it is
 * killed: seconds on an idle host, minutes on a busy one; only a hang
 * should reach it. */
#define GREEDY_CALL_MS 300000
/* Longest wait for processes to disappear or a box to exit: only a hang
 * reaches it, on a loaded host under ASan. */
#define SETTLE_MS 30000
/* Largest host file or /proc entry read here. */
#define READ_MAX ((size_t)1 << 20)
/* Threads racing to start one sandbox. */
#define ENSURE_RACERS 8
/* Sandboxes one test run may start (each thread id at most once at a time). */
#define MAX_STARTED 32
/* Busy threads, start/stop cycles and the command budget of the tests that
 * start sandboxes from a busy launcher. */
#define CHURN_THREADS 4
#define CHURN_CYCLES 20
#define CHURN_CALL_MS 30000 /* a ceiling: a box deadlocked at its start never answers */
/* Past every allocator's mmap threshold: exercises its large-block locks too. */
#define CHURN_LARGE_BYTES ((size_t)256 << 10)
/* A sandbox limit above what this (sanitized) launcher holds resident, a
 * limit below it, and what a greedy shell tries to hold. */
#define LIMITED_MEMORY_MB 1024
#define SMALL_MEMORY_MB 96
#define GREEDY_BYTES "1500000000"
/* Memory the launcher holds while it starts that sandbox: a gateway's heap
 * is easily this big, and more than the sandbox's limit. */
#define LAUNCHER_BALLAST_BYTES ((size_t)256 << 20)

typedef struct sbx_ctx {
    fawn_config cfg;
    char home[64];
    const char *threads[MAX_STARTED]; /* thread ids to stop at teardown */
    pid_t pids[MAX_STARTED];          /* boxes this program started, to reap */
    size_t n_threads, n_pids;
} sbx_ctx;

/* ---- assertions with context ---- */

static const char *jstr(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

/* ---- sandboxes ---- */

static void remember_thread(sbx_ctx *t, const char *thread) {
    for (size_t i = 0; i < t->n_threads; i++)
        if (strcmp(t->threads[i], thread) == 0)
            return;
    assert_true(t->n_threads < MAX_STARTED);
    t->threads[t->n_threads++] = thread;
}

static void remember_pid(sbx_ctx *t, pid_t pid) {
    if (pid <= 0)
        return;
    assert_true(t->n_pids < MAX_STARTED);
    t->pids[t->n_pids++] = pid;
}

/* Starts (or finds) the sandbox of thread with configuration cfg. */
static void ensure_with(sbx_ctx *t, local_box *box, const fawn_config *cfg, const char *thread) {
    remember_thread(t, thread);
    local_spec spec = {
        .cfg = cfg, .user = USER_ID, .thread = thread, .fawn_bin = getenv("FAWN_BIN")};
    if (local_box_ensure(box, &spec) < 0)
        fail_msg("local_box_ensure %s: %s", thread, fawn_errmsg());
    remember_pid(t, box->pid);
}

static void ensure(sbx_ctx *t, local_box *box, const char *thread) {
    ensure_with(t, box, &t->cfg, thread);
}

/* Waits for a box this program started to exit; true when it did. */
static bool reap(pid_t pid, int timeout_ms) {
    int64_t deadline = fawn_now_ms() + timeout_ms;
    for (;;) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && errno == ECHILD))
            return true;
        if (fawn_now_ms() > deadline)
            return false;
        usleep(10 * 1000);
    }
}

static void stop(sbx_ctx *t, const local_box *box, const char *thread) {
    assert_int_equal(local_box_stop(&t->cfg, USER_ID, thread), 0);
    if (box->pid > 0)
        assert_true(reap(box->pid, SETTLE_MS));
}

/* Runs a one-shot command, waiting at most call_ms for its reply; returns
 * the reply (caller decrefs). */
static json_t *exec_reply_within(const local_box *box, const char *command, int call_ms) {
    json_t *body = json_pack("{s:s}", "command", command), *reply = NULL;
    int status = 0;
    int r = box_call(&reply, &status, box->socket_path, "POST", "/v1/shell/exec", body, call_ms);
    json_decref(body);
    if (r < 0)
        fail_msg("exec %s: %s", command, fawn_errmsg());
    if (status != 200)
        fail_msg("exec %s: status %d", command, status);
    return reply;
}

static json_t *exec_reply(const local_box *box, const char *command) {
    return exec_reply_within(box, command, CALL_MS);
}

/* Runs a command that must succeed; returns stdout (caller frees). */
static char *run(const local_box *box, const char *command) {
    json_t *reply = exec_reply(box, command);
    const char *status = jstr(reply, "status");
    json_int_t code = json_integer_value(json_object_get(reply, "exit_code"));
    if (!status || strcmp(status, "completed") != 0 || code != 0) {
        char *text = fjson_dump(reply);
        fail_msg("%s: %s", command, text);
    }
    char *out = strdup(jstr(reply, "stdout"));
    json_decref(reply);
    return out;
}

static json_t *describe(const local_box *box) {
    json_t *reply = NULL;
    int status = 0;
    if (box_call(&reply, &status, box->socket_path, "GET", "/v1/sandbox", NULL, CALL_MS) < 0)
        fail_msg("GET /v1/sandbox: %s", fawn_errmsg());
    assert_int_equal(status, 200);
    return reply;
}

static char *cgroup_mode(const local_box *box) {
    json_t *d = describe(box);
    char *mode = strdup(jstr(json_object_get(d, "capabilities"), "cgroup"));
    json_decref(d);
    return mode;
}

/* ---- host side ---- */

static char *host_read(const char *path) {
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    char *data = NULL;
    return fawn_read_all(&data, NULL, fd, READ_MAX) == 0 ? data : NULL;
}

static char *host_path(sbx_ctx *t, const char *thread, const char *rel) {
    char dir[PATH_MAX];
    assert_int_equal(paths_user_data_dir(dir, t->cfg.home, USER_ID, thread), 0);
    return strf("%s/%s", dir, rel);
}

/* The host pid of the one process whose command line contains marker, or 0. */
static pid_t host_find_proc(const char *marker) {
    pid_t pid = 0;
    host_procs_with(marker, &pid);
    return pid;
}

/* Waits until a process carrying marker exists; returns its pid. */
static pid_t host_await_proc(const char *marker) {
    pid_t pid = host_procs_appear(marker, SETTLE_MS) ? host_find_proc(marker) : 0;
    if (pid == 0)
        fail_msg("no host process carries %s", marker);
    return pid;
}

/* Host processes running as uid (real uid). */
static int host_count_uid(uid_t uid) {
    DIR *d = opendir("/proc");
    assert_non_null(d);
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char path[sizeof e->d_name + 16];
        snprintf(path, sizeof path, "/proc/%s", e->d_name);
        struct stat st;
        if (stat(path, &st) == 0 && st.st_uid == uid)
            count++;
    }
    closedir(d);
    return count;
}

/* Starts `sleep` under a recognizable name in the sandbox, in the background. */
static void start_marked_sleep(const local_box *box, const char *marker) {
    char *cmd = strf("(exec -a %s sleep 100) >/dev/null 2>&1 & echo ok", marker);
    free(run(box, cmd));
    free(cmd);
}

/* One numeric field ("Uid:", "Gid:") of /proc/pid/status: all four values. */
static void proc_ids(unsigned long ids[4], pid_t pid, const char *field) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    char *status = host_read(path);
    assert_non_null(status);
    const char *line = strstr(status, field);
    assert_non_null(line);
    assert_int_equal(
        sscanf(line + strlen(field), "%lu %lu %lu %lu", &ids[0], &ids[1], &ids[2], &ids[3]), 4);
    free(status);
}

/* The host uid the local provider gives a sandbox (user_data.h). */
static uid_t expected_uid(const char *sandbox_id) {
    if (geteuid() != 0)
        return geteuid();
    char first[9];
    memcpy(first, sandbox_id, 8);
    first[8] = '\0';
    return (uid_t)(SANDBOX_UID_BASE + strtoul(first, NULL, 16) % SANDBOX_UID_RANGE);
}

/* ---- fixture ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static int group_setup(void **state) {
    sbx_ctx *t = calloc(1, sizeof *t);
    if (!t || config_defaults(&t->cfg) < 0)
        return -1;
    fawn_random_hex(user_id + strlen("sbx-user-"), 6);
    snprintf(t->home, sizeof t->home, "/tmp/fawn-sandbox-XXXXXX");
    if (!mkdtemp(t->home))
        return -1;
    free(t->cfg.home);
    t->cfg.home = strdup(t->home);
    free(t->cfg.sandbox.skills_dir);
    t->cfg.sandbox.skills_dir = strf("%s/skills", t->home);
    t->cfg.sandbox.limits.memory_mb = 512;
    t->cfg.sandbox.limits.pids = 256;
    t->cfg.sandbox.limits.tmp_size_mb = 16;
    *state = t;
    return 0;
}

static int group_teardown(void **state) {
    sbx_ctx *t = *state;
    if (!t)
        return 0;
    int r = 0;
    for (size_t i = 0; i < t->n_threads; i++)
        if (local_box_stop(&t->cfg, USER_ID, t->threads[i]) < 0)
            r = -1;
    for (size_t i = 0; i < t->n_pids; i++)
        reap(t->pids[i], SETTLE_MS);
    nftw(t->home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    config_free(&t->cfg);
    free(t);
    return r;
}

/* ---- ids ---- */

static void test_invalid_ids_refused(void **state) {
    sbx_ctx *t = *state;
    static const char *const bad[] = {"", "../x", "a/b", "..", "x\ny"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        local_box box;
        local_spec spec = {
            .cfg = &t->cfg, .user = USER_ID, .thread = bad[i], .fawn_bin = getenv("FAWN_BIN")};
        assert_int_equal(local_box_ensure(&box, &spec), FAWN_EINVAL);
        spec = (local_spec){.cfg = &t->cfg, .user = bad[i], .thread = "t"};
        POISON(box);
        assert_int_equal(local_box_ensure(&box, &spec), FAWN_EINVAL);
        /* Refused, the box is still defined: no pid to reap, nothing started. */
        assert_int_equal(box.pid, 0);
        assert_false(box.started);
        assert_string_equal(box.socket_path, "");
        assert_int_equal(local_box_stop(&t->cfg, bad[i], "t"), FAWN_EINVAL);
    }
    /* A box that is not there: no reply, status 0. */
    json_t *reply;
    int status;
    POISON(reply);
    POISON(status);
    char *nowhere = strf("%s/no-such.sock", t->home);
    assert_true(box_call(&reply, &status, nowhere, "GET", "/v1/sandbox", NULL, CALL_MS) < 0);
    assert_null(reply);
    assert_int_equal(status, 0);
    free(nowhere);
    /* Nothing was created for them. */
    char *users = strf("%s/users", t->home);
    DIR *d = opendir(users);
    if (d) {
        for (struct dirent *e; (e = readdir(d));)
            if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
                assert_string_equal(e->d_name, USER_ID);
        closedir(d);
    }
    free(users);
}

/* ---- lifecycle ---- */

static void test_ensure_reuses_running_box(void **state) {
    sbx_ctx *t = *state;
    local_box a, b;
    ensure(t, &a, "reuse");
    assert_true(a.started);
    assert_true(a.pid > 0);
    char expected_id[17];
    assert_int_equal(paths_sandbox_id(expected_id, USER_ID, "reuse"), 0);
    assert_string_equal(a.sandbox_id, expected_id);
    ensure(t, &b, "reuse");
    assert_false(b.started);
    assert_int_equal(b.pid, 0);
    assert_string_equal(a.generation, b.generation);
    assert_string_equal(a.socket_path, b.socket_path);
    json_t *d = describe(&b);
    assert_string_equal(jstr(d, "generation"), a.generation);
    json_decref(d);
    stop(t, &a, "reuse");
    /* Stopping twice is not an error. */
    assert_int_equal(local_box_stop(&t->cfg, USER_ID, "reuse"), 0);
}

typedef struct racer {
    sbx_ctx *t;
    local_box box;
    int r;
    char err[256];
} racer;

static void *ensure_thread(void *arg) {
    racer *x = arg;
    local_spec spec = {
        .cfg = &x->t->cfg, .user = USER_ID, .thread = "race", .fawn_bin = getenv("FAWN_BIN")};
    x->r = local_box_ensure(&x->box, &spec);
    if (x->r < 0)
        snprintf(x->err, sizeof x->err, "%s", fawn_errmsg());
    return NULL;
}

static void test_concurrent_ensure_one_box(void **state) {
    sbx_ctx *t = *state;
    remember_thread(t, "race");
    racer racers[ENSURE_RACERS];
    pthread_t th[ENSURE_RACERS];
    for (int i = 0; i < ENSURE_RACERS; i++) {
        racers[i] = (racer){.t = t};
        assert_int_equal(pthread_create(&th[i], NULL, ensure_thread, &racers[i]), 0);
    }
    for (int i = 0; i < ENSURE_RACERS; i++)
        pthread_join(th[i], NULL);
    int started = 0;
    local_box *first = NULL;
    for (int i = 0; i < ENSURE_RACERS; i++) {
        if (racers[i].r < 0)
            fail_msg("racer %d: %s", i, racers[i].err);
        remember_pid(t, racers[i].box.pid);
        started += racers[i].box.started;
        if (racers[i].box.started)
            first = &racers[i].box;
    }
    assert_int_equal(started, 1);
    for (int i = 0; i < ENSURE_RACERS; i++)
        assert_string_equal(racers[i].box.generation, first->generation);
    char *out = run(first, "echo one");
    assert_string_equal(out, "one\n");
    free(out);
    stop(t, first, "race");
}

typedef struct churn {
    atomic_bool stop;
    bool spawn_threads; /* else: allocate and free memory */
} churn;

static void *idle_thread(void *arg) { return arg; }

/* Keeps this process busy the way a gateway is while a sandbox starts:
 * threads come and go, memory is allocated and freed. */
static void *churn_thread(void *arg) {
    churn *c = arg;
    while (!atomic_load(&c->stop)) {
        if (c->spawn_threads) {
            pthread_t th;
            if (pthread_create(&th, NULL, idle_thread, NULL) == 0)
                pthread_join(th, NULL);
        } else {
            void *p[16];
            for (size_t i = 0; i < ARRAY_LEN(p); i++)
                p[i] = malloc(i == 0 ? CHURN_LARGE_BYTES : 64 + i * 512);
            for (size_t i = 0; i < ARRAY_LEN(p); i++)
                free(p[i]);
        }
    }
    return NULL;
}

/* One start, command and stop of thread's sandbox; false (with why) on failure. */
static bool start_run_stop(sbx_ctx *t, const char *thread, char *why, size_t whysz) {
    local_box box;
    local_spec spec = {
        .cfg = &t->cfg, .user = USER_ID, .thread = thread, .fawn_bin = getenv("FAWN_BIN")};
    int64_t start = fawn_now_ms();
    if (local_box_ensure(&box, &spec) < 0) {
        snprintf(why, whysz, "start: %s (after %lld ms)", fawn_errmsg(),
                 (long long)(fawn_now_ms() - start));
        return false;
    }
    json_t *body = json_pack("{s:s}", "command", "echo up"), *reply = NULL;
    int status = 0;
    int r = box_call(&reply, &status, box.socket_path, "POST", "/v1/shell/exec", body,
                     CHURN_CALL_MS);
    json_decref(body);
    bool ok = r == 0 && status == 200 && strcmp(jstr(reply, "stdout"), "up\n") == 0;
    if (!ok)
        snprintf(why, whysz, "exec after a good start: %s", r < 0 ? fawn_errmsg() : "bad reply");
    json_decref(reply);
    if (local_box_stop(&t->cfg, USER_ID, thread) < 0) {
        snprintf(why, whysz, "stop: %s", fawn_errmsg());
        ok = false;
    }
    if (box.pid > 0 && !reap(box.pid, SETTLE_MS)) {
        snprintf(why, whysz, "the box did not exit after stop");
        ok = false;
    }
    return ok;
}

/* A launcher with other threads at work (like a gateway serving requests)
 * can start sandboxes: the cloned child must neither wait for, nor on locks
 * held by, threads it does not have. */
static void starts_while_churning(sbx_ctx *t, const char *thread, bool spawn_threads) {
    churn c = {.spawn_threads = spawn_threads};
    pthread_t th[CHURN_THREADS];
    for (size_t i = 0; i < ARRAY_LEN(th); i++)
        assert_int_equal(pthread_create(&th[i], NULL, churn_thread, &c), 0);
    remember_thread(t, thread);
    char why[600] = "";
    int cycle = 0;
    bool ok = true;
    for (; ok && cycle < CHURN_CYCLES; cycle++)
        ok = start_run_stop(t, thread, why, sizeof why);
    atomic_store(&c.stop, true);
    for (size_t i = 0; i < ARRAY_LEN(th); i++)
        pthread_join(th[i], NULL);
    if (!ok)
        fail_msg("start %d of %d while other threads %s: %s", cycle, CHURN_CYCLES,
                 spawn_threads ? "create threads" : "allocate", why);
}

static void test_starts_while_threads_start(void **state) {
    starts_while_churning(*state, "churn-threads", true);
}

static void test_starts_while_threads_allocate(void **state) {
    starts_while_churning(*state, "churn-malloc", false);
}

static void test_files_persist_across_restart(void **state) {
    sbx_ctx *t = *state;
    local_box a, b;
    ensure(t, &a, "persist");
    free(run(&a, "mkdir -p " WS "/keep && echo kept > " WS "/keep/file && "
                 "echo out > /mnt/user-data/outputs/o.txt && echo tmp > /tmp/t.txt"));
    stop(t, &a, "persist");
    char *path = host_path(t, "persist", "workspace/keep/file");
    char *data = host_read(path);
    assert_non_null(data);
    assert_string_equal(data, "kept\n");
    free(data);
    free(path);
    ensure(t, &b, "persist");
    assert_true(b.started);
    assert_string_not_equal(a.generation, b.generation);
    char *out = run(&b, "cat " WS "/keep/file /mnt/user-data/outputs/o.txt; "
                        "cat /tmp/t.txt 2>/dev/null || echo no-tmp");
    /* The workspace and outputs persist; /tmp is the sandbox's own tmpfs. */
    assert_string_equal(out, "kept\nout\nno-tmp\n");
    free(out);
    stop(t, &b, "persist");
}

static void test_threads_isolated(void **state) {
    sbx_ctx *t = *state;
    local_box x, y;
    ensure(t, &x, "iso-x");
    ensure(t, &y, "iso-y");
    assert_string_not_equal(x.sandbox_id, y.sandbox_id);
    assert_string_not_equal(x.socket_path, y.socket_path);
    free(run(&x, "echo x-private > " WS "/x-only.txt"));
    char *out = run(&y, "ls -A " WS "; grep -rs x-private /mnt /tmp; echo end");
    assert_string_equal(out, "end\n");
    free(out);
    /* The host paths of x's files do not exist in y. */
    char *x_host = host_path(t, "iso-x", "workspace/x-only.txt");
    char *cmd = strf("cat %s; ls %s", x_host, t->home);
    json_t *r = exec_reply(&y, cmd);
    check_lacks("y's view", jstr(r, "stdout"), "x-private");
    check_contains("y's view", jstr(r, "stderr"), "No such file or directory");
    json_decref(r);
    free(cmd);
    free(x_host);
    out = run(&x, "cat " WS "/x-only.txt");
    assert_string_equal(out, "x-private\n");
    free(out);
    stop(t, &x, "iso-x");
    stop(t, &y, "iso-y");
}

/* ---- identity ---- */

static void test_runs_as_unprivileged_host_uid(void **state) {
    sbx_ctx *t = *state;
    local_box box, other;
    ensure(t, &box, "uid");
    char marker[32] = "uidprobe-";
    fawn_random_hex(marker + 9, 6);
    start_marked_sleep(&box, marker);
    pid_t pid = host_await_proc(marker);
    uid_t want = expected_uid(box.sandbox_id);
    assert_int_not_equal(want, 0);
    unsigned long uids[4], gids[4];
    proc_ids(uids, pid, "Uid:");
    proc_ids(gids, pid, "Gid:");
    for (int i = 0; i < 4; i++) {
        assert_int_not_equal(uids[i], 0);
        assert_int_equal(uids[i], want);
        assert_int_not_equal(gids[i], 0);
    }
    /* The box itself runs as that uid too. */
    if (box.pid > 0) {
        proc_ids(uids, box.pid, "Uid:");
        assert_int_equal(uids[0], want);
    }
    /* Inside, it is the namespace's root; on the host, files are the sandbox uid's. */
    char *out = run(&box, "id -u; touch " WS "/owned; mkdir " WS "/owned-dir");
    assert_string_equal(out, "0\n");
    free(out);
    static const char *const made[] = {"workspace/owned", "workspace/owned-dir", "workspace"};
    for (size_t i = 0; i < ARRAY_LEN(made); i++) {
        char *path = host_path(t, "uid", made[i]);
        struct stat st;
        assert_int_equal(lstat(path, &st), 0);
        assert_int_equal(st.st_uid, want);
        free(path);
    }
    /* Another thread's sandbox runs as another uid. */
    ensure(t, &other, "uid-other");
    if (geteuid() == 0)
        assert_int_not_equal(expected_uid(other.sandbox_id), want);
    stop(t, &box, "uid");
    stop(t, &other, "uid-other");
}

/* ---- network ---- */

/* Interface names of a /proc/net/dev text, one per line, sorted as listed. */
static char *interfaces(const char *net_dev) {
    fbuf names = {0};
    const char *line = net_dev;
    for (int n = 0; line && *line; n++) {
        const char *colon = strchr(line, ':'), *eol = strchr(line, '\n');
        if (n >= 2 && colon && (!eol || colon < eol)) {
            const char *s = line;
            while (*s == ' ')
                s++;
            assert_int_equal(fbuf_printf(&names, "%.*s\n", (int)(colon - s), s), 0);
        }
        line = eol ? eol + 1 : NULL;
    }
    return fbuf_steal(&names);
}

static void test_network_none(void **state) {
    sbx_ctx *t = *state;
    local_box box;
    ensure(t, &box, "net-none");
    json_t *d = describe(&box);
    assert_string_equal(jstr(json_object_get(d, "capabilities"), "network"), "none");
    json_decref(d);
    char *dev = run(&box, "cat /proc/net/dev");
    char *names = interfaces(dev);
    assert_string_equal(names, "lo\n");
    free(names);
    free(dev);
    /* Loopback is up: a closed port refuses, it is not unreachable. */
    json_t *r = exec_reply(&box, "exec 3<>/dev/tcp/127.0.0.1/1");
    assert_int_not_equal(json_integer_value(json_object_get(r, "exit_code")), 0);
    check_contains("loopback", jstr(r, "stderr"), "Connection refused");
    json_decref(r);
    /* And a listener on loopback is reachable from another process. */
    char *out = run(&box, "command -v python3 >/dev/null || { echo skip; exit 0; }; "
                          "python3 -c 'import socket; s=socket.socket(); "
                          "s.bind((\"127.0.0.1\", 0)); s.listen(); "
                          "c=socket.create_connection(s.getsockname()); print(\"connected\")'");
    assert_true(strcmp(out, "connected\n") == 0 || strcmp(out, "skip\n") == 0);
    free(out);
    /* Nothing beyond it. */
    r = exec_reply(&box, "exec 3<>/dev/tcp/1.1.1.1/80");
    assert_int_not_equal(json_integer_value(json_object_get(r, "exit_code")), 0);
    check_contains("outside", jstr(r, "stderr"), "Network is unreachable");
    json_decref(r);
    stop(t, &box, "net-none");
}

/* Sandboxes started with namespaces prepared ahead get them, one each:
 * only loopback, up; none shared with the host or with each other. */
static void test_network_namespace_pool(void **state) {
    sbx_ctx *t = *state;
    netns_pool *pool = NULL;
    assert_int_equal(netns_pool_new(&pool, 2), 0);
    assert_int_equal(netns_pool_fill(pool), 0);
    const char *threads[] = {"pool-a", "pool-b"};
    char *ns[2];
    local_box box[2];
    for (int i = 0; i < 2; i++) {
        remember_thread(t, threads[i]);
        local_spec spec = {.cfg = &t->cfg,
                           .user = USER_ID,
                           .thread = threads[i],
                           .netns = pool,
                           .fawn_bin = getenv("FAWN_BIN")};
        if (local_box_ensure(&box[i], &spec) < 0)
            fail_msg("local_box_ensure %s: %s", threads[i], fawn_errmsg());
        remember_pid(t, box[i].pid);
        char *dev = run(&box[i], "cat /proc/net/dev");
        char *names = interfaces(dev);
        assert_string_equal(names, "lo\n");
        free(names);
        free(dev);
        json_t *r = exec_reply(&box[i], "exec 3<>/dev/tcp/127.0.0.1/1");
        check_contains("loopback up", jstr(r, "stderr"), "Connection refused");
        json_decref(r);
        ns[i] = run(&box[i], "readlink /proc/self/ns/net");
    }
    /* Both came from the pool, which is now empty. */
    assert_int_equal(netns_pool_take(pool), -1);
    assert_string_not_equal(ns[0], ns[1]);
    char host[64] = "";
    ssize_t n = readlink("/proc/self/ns/net", host, sizeof host - 1);
    assert_true(n > 0);
    host[n] = '\0';
    for (int i = 0; i < 2; i++) {
        check_lacks("host namespace", ns[i], host);
        free(ns[i]);
        stop(t, &box[i], threads[i]);
    }
    netns_pool_free(pool);
}

static void test_network_host(void **state) {
    sbx_ctx *t = *state;
    fawn_config cfg = t->cfg; /* shallow: t->cfg keeps ownership */
    cfg.sandbox.network = FAWN_NET_HOST;
    local_box box;
    ensure_with(t, &box, &cfg, "net-host");
    json_t *d = describe(&box);
    assert_string_equal(jstr(json_object_get(d, "capabilities"), "network"), "host");
    json_decref(d);
    char *host_dev = host_read("/proc/net/dev");
    assert_non_null(host_dev);
    char *want = interfaces(host_dev);
    char *dev = run(&box, "cat /proc/net/dev");
    char *got = interfaces(dev);
    assert_string_equal(got, want);
    free(got);
    free(dev);
    free(want);
    free(host_dev);
    stop(t, &box, "net-host");
}

/* ---- cgroups ---- */

/* The cgroup name local.c gives a sandbox: 8 hex of sha256(realpath(home)), '-', id. */
static void group_name(char out[40], sbx_ctx *t, const char *sandbox_id) {
    char real[PATH_MAX], hex[65];
    assert_non_null(realpath(t->home, real));
    fawn_sha256_hex(hex, real, strlen(real));
    snprintf(out, 40, "%.8s-%s", hex, sandbox_id);
}

/* Host directories of the cgroups (in any hierarchy) pid is in whose path
 * ends with name, one per line. */
static char *cgroup_dirs(pid_t pid, const char *name) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    char *text = host_read(path);
    assert_non_null(text);
    fbuf dirs = {0};
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line;
         line = strtok_r(NULL, "\n", &save)) {
        char *ctrl = strchr(line, ':');
        char *cg = ctrl ? strchr(ctrl + 1, ':') : NULL;
        if (!cg || !strstr(cg, name))
            continue;
        *cg++ = '\0';
        ctrl++;
        const char *mount = "/sys/fs/cgroup";
        char v1[64];
        struct stat st;
        if (*ctrl == '\0') {
            if (stat("/sys/fs/cgroup/unified", &st) == 0)
                mount = "/sys/fs/cgroup/unified";
        } else {
            snprintf(v1, sizeof v1, "/sys/fs/cgroup/%s",
                     strncmp(ctrl, "name=", 5) == 0 ? ctrl + 5 : ctrl);
            mount = v1;
        }
        assert_int_equal(fbuf_printf(&dirs, "%s%s\n", mount, cg), 0);
    }
    free(text);
    return fbuf_steal(&dirs);
}

static void test_cgroup_placement(void **state) {
    sbx_ctx *t = *state;
    local_box box;
    ensure(t, &box, "cgroup");
    char *mode = cgroup_mode(&box);
    if (strcmp(mode, "none") == 0) {
        free(mode);
        stop(t, &box, "cgroup");
        skip();
    }
    free(mode);
    assert_true(box.pid > 0);
    char name[40];
    group_name(name, t, box.sandbox_id);
    char *box_dirs = cgroup_dirs(box.pid, name);
    check_contains("box cgroup", box_dirs, "/fawn/");
    check_contains("box cgroup", box_dirs, name);
    /* Every listed group exists, and a command runs in the same groups. */
    char *copy = strdup(box_dirs);
    for (char *save = NULL, *dir = strtok_r(copy, "\n", &save); dir;
         dir = strtok_r(NULL, "\n", &save)) {
        struct stat st;
        if (stat(dir, &st) < 0)
            fail_msg("cgroup %s: %s", dir, strerror(errno));
    }
    free(copy);
    char marker[32] = "cgprobe-";
    fawn_random_hex(marker + 8, 6);
    start_marked_sleep(&box, marker);
    char *cmd_dirs = cgroup_dirs(host_await_proc(marker), name);
    assert_string_equal(cmd_dirs, box_dirs);
    free(cmd_dirs);
    stop(t, &box, "cgroup");
    /* The groups are removed with the sandbox. */
    for (char *save = NULL, *dir = strtok_r(box_dirs, "\n", &save); dir;
         dir = strtok_r(NULL, "\n", &save)) {
        struct stat st;
        if (stat(dir, &st) == 0)
            fail_msg("cgroup %s is left after stop", dir);
    }
    free(box_dirs);
}

/* The memory limit of a sandbox's box, for the given limit in MiB. */
static void check_memory_limit_reported(const local_box *box, uint64_t memory_mb) {
    json_t *d = describe(box);
    json_t *limits = json_object_get(json_object_get(d, "capabilities"), "limits");
    assert_int_equal(json_integer_value(json_object_get(limits, "memory_bytes")),
                     (json_int_t)(memory_mb << 20));
    json_decref(d);
}

/* Runs a command that grows without bound: it must be the one killed, and
 * the box must keep serving. */
static void check_greedy_command_killed(const local_box *box, const char *command) {
    json_t *r = exec_reply_within(box, command, GREEDY_CALL_MS);
    assert_string_equal(jstr(r, "status"), "killed");
    assert_int_equal(json_integer_value(json_object_get(r, "exit_code")), 137);
    check_lacks("greedy", jstr(r, "stdout"), "survived");
    json_decref(r);
    char *out = run(box, "echo still here");
    assert_string_equal(out, "still here\n");
    free(out);
}

static bool skip_without_cgroup(sbx_ctx *t, const local_box *box, const char *thread) {
    char *mode = cgroup_mode(box);
    bool none = strcmp(mode, "none") == 0;
    free(mode);
    if (none)
        stop(t, box, thread);
    return none;
}

/* A command that touches more than memory_mb is killed by the OOM killer. */
static void test_memory_limit_enforced(void **state) {
    sbx_ctx *t = *state;
    fawn_config cfg = t->cfg;
    cfg.sandbox.limits.memory_mb = LIMITED_MEMORY_MB;
    local_box box;
    ensure_with(t, &box, &cfg, "memory");
    if (skip_without_cgroup(t, &box, "memory"))
        skip();
    check_memory_limit_reported(&box, LIMITED_MEMORY_MB);
    /* tail keeps its never-ending last line in memory: it grows at once. */
    check_greedy_command_killed(&box, "tail /dev/zero");
    check_greedy_command_killed(&box, "a=$(head -c " GREEDY_BYTES " /dev/zero | tr '\\0' x); "
                                      "echo survived ${#a}");
    stop(t, &box, "memory");
}

/* docs/box-api.md: "the OOM killer picks commands, never the box". The box
 * and every init are clones of the launcher and share its resident memory,
 * so a launcher bigger than the sandbox's limit must not make the box the
 * OOM killer's choice. */
static void test_memory_limit_spares_box_of_big_launcher(void **state) {
    sbx_ctx *t = *state;
    fawn_config cfg = t->cfg;
    cfg.sandbox.limits.memory_mb = SMALL_MEMORY_MB;
    char *ballast = malloc(LAUNCHER_BALLAST_BYTES);
    assert_non_null(ballast);
    memset(ballast, 0x5a, LAUNCHER_BALLAST_BYTES);
    local_box box;
    ensure_with(t, &box, &cfg, "memory-big-launcher");
    free(ballast);
    if (skip_without_cgroup(t, &box, "memory-big-launcher"))
        skip();
    check_memory_limit_reported(&box, SMALL_MEMORY_MB);
    check_greedy_command_killed(&box, "tail /dev/zero");
    stop(t, &box, "memory-big-launcher");
}

/* ---- environment ---- */

/* Host variables that carry credentials without a telltale word in their
 * names: none may reach a command unless configuration names it. */
static const char *const leaky_host_vars[] = {
    "GITHUB_PAT",
    "DB_PWD",
    "POSTGRES_URL",
    "HTTPS_PROXY",
    "SLACK_WEBHOOK_URL",
    "AZURE_STORAGE_CONNECTION_STRING",
    "NPM_RC",
    "HOSTPLAIN_VAR",
};

static void test_environment(void **state) {
    sbx_ctx *t = *state;
    static const char secret[] = "sk-live-0123456789abcdef";
    for (size_t i = 0; i < ARRAY_LEN(leaky_host_vars); i++)
        setenv(leaky_host_vars[i], secret, 1);
    setenv("PASSED_THROUGH", "named by the operator", 1);
    fawn_config cfg = t->cfg;
    cfg.sandbox.n_env = 3;
    cfg.sandbox.env[0] = (fawn_env_var){.name = "INJECTED_VAR", .value = "hello injected"};
    cfg.sandbox.env[1] = (fawn_env_var){.name = "HOME", .value = "/mnt/user-data/workspace"};
    /* What config_load folds in for sandbox.env_passthrough: [PASSED_THROUGH]. */
    cfg.sandbox.env[2] = (fawn_env_var){.name = "PASSED_THROUGH",
                                        .value = getenv("PASSED_THROUGH")};
    local_box box;
    ensure_with(t, &box, &cfg, "env");
    for (size_t i = 0; i < ARRAY_LEN(leaky_host_vars); i++)
        unsetenv(leaky_host_vars[i]);
    unsetenv("PASSED_THROUGH");
    char *out = run(&box, "env");
    check_contains("env", out, "\nINJECTED_VAR=hello injected\n");
    check_contains("env", out, "\nHOME=/mnt/user-data/workspace\n");
    check_contains("env", out, "PASSED_THROUGH=named by the operator\n");
    check_contains("env", out, "PATH=/usr/local/sbin:");
    check_contains("env", out, "TERM=xterm-256color\n");
    for (size_t i = 0; i < ARRAY_LEN(leaky_host_vars); i++)
        check_lacks("env", out, leaky_host_vars[i]);
    check_lacks("env", out, secret);
    check_lacks("env", out, "FAWN_");
    check_lacks("env", out, "ASAN_OPTIONS");
    free(out);
    /* Nor can a command find the secret in the box's own environment. */
    json_t *r = exec_reply(&box, "cat /proc/1/environ; grep -rs "
                                 "sk-live /proc/*/environ");
    check_lacks("environ", jstr(r, "stdout"), secret);
    json_decref(r);
    stop(t, &box, "env");
}

/* ---- stop ---- */

static void test_stop_leaves_nothing(void **state) {
    sbx_ctx *t = *state;
    local_box box;
    ensure(t, &box, "stop");
    char oneshot[32] = "stopmark-", sess[32] = "stopsess-";
    fawn_random_hex(oneshot + 9, 6);
    fawn_random_hex(sess + 9, 6);
    start_marked_sleep(&box, oneshot);
    json_t *reply = NULL, *body = json_pack("{s:s}", "id", "keep");
    int status = 0;
    assert_int_equal(
        box_call(&reply, &status, box.socket_path, "POST", "/v1/shell/sessions", body, CALL_MS), 0);
    assert_int_equal(status, 200);
    json_decref(reply);
    json_decref(body);
    char *cmd = strf("(exec -a %s sleep 100) >/dev/null 2>&1 & echo ok", sess);
    body = json_pack("{s:s, s:s}", "command", cmd, "session_id", "keep");
    assert_int_equal(
        box_call(&reply, &status, box.socket_path, "POST", "/v1/shell/exec", body, CALL_MS), 0);
    assert_int_equal(status, 200);
    json_decref(reply);
    json_decref(body);
    free(cmd);
    host_await_proc(oneshot);
    host_await_proc(sess);
    char *cg = NULL;
    if (box.pid > 0) {
        char name[40];
        group_name(name, t, box.sandbox_id);
        cg = cgroup_dirs(box.pid, name);
    }
    uid_t uid = expected_uid(box.sandbox_id);
    assert_true(host_count_uid(uid) >= 3); /* the box, an init, a sleep at least */
    stop(t, &box, "stop");
    assert_true(host_procs_gone(oneshot, SETTLE_MS));
    assert_true(host_procs_gone(sess, SETTLE_MS));
    /* Nothing at all runs as the sandbox's uid any more. */
    assert_int_equal(host_count_uid(uid), 0);
    struct stat st;
    assert_int_equal(lstat(box.socket_path, &st), -1);
    assert_int_equal(errno, ENOENT);
    for (char *save = NULL, *dir = cg ? strtok_r(cg, "\n", &save) : NULL; dir;
         dir = strtok_r(NULL, "\n", &save))
        if (stat(dir, &st) == 0)
            fail_msg("cgroup %s is left after stop", dir);
    free(cg);
    /* The socket answers no more. */
    assert_int_equal(box_call(&reply, &status, box.socket_path, "GET", "/v1/sandbox", NULL, 1000),
                     FAWN_EIO);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_invalid_ids_refused),
        cmocka_unit_test(test_ensure_reuses_running_box),
        cmocka_unit_test(test_starts_while_threads_start),
        cmocka_unit_test(test_starts_while_threads_allocate),
        cmocka_unit_test(test_concurrent_ensure_one_box),
        cmocka_unit_test(test_files_persist_across_restart),
        cmocka_unit_test(test_threads_isolated),
        cmocka_unit_test(test_runs_as_unprivileged_host_uid),
        cmocka_unit_test(test_network_none),
        cmocka_unit_test(test_network_host),
        cmocka_unit_test(test_network_namespace_pool),
        cmocka_unit_test(test_cgroup_placement),
        cmocka_unit_test(test_memory_limit_enforced),
        cmocka_unit_test(test_memory_limit_spares_box_of_big_launcher),
        cmocka_unit_test(test_environment),
        cmocka_unit_test(test_stop_leaves_nothing),
    };
    return cmocka_run_group_tests_name("sandbox", tests, group_setup, group_teardown);
}
