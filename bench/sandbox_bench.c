/* Benchmarks of fawn's local sandboxes, each against a baseline measured in
 * the same run on the same machine (see bench/sandbox for how to run it):
 *
 *   cold start   launch -> box ready, vs. bwrap --unshare-all ... /bin/true
 *   warm exec    /bin/true through the box API, vs. bare posix_spawn from C
 *                (and vs. python's subprocess.run, measured by bench/sandbox)
 *   managed exec acquire + exec /bin/true + release through the sandbox
 *                manager on a warm thread, vs. the warm exec above
 *   session exec /bin/true in a shell session of a warm box (created once,
 *                as the manager creates a scope's session), vs. the same
 *                command as a one-shot exec, interleaved; and the same for
 *                a command that needs the shell (cd /tmp && /bin/true)
 *   idle memory  proportional and private resident memory per idle box,
 *                and the whole machine's memory delta, for N idle boxes
 *
 * Output: one "name: value" line per figure, ratios last. Not a test. */
#include <errno.h>
#include <unistd.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>

#include "base/base.h"
#include "config/config.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/local.h"
#include "sandbox/manager.h"

extern char **environ;

static double median(double *v, size_t n) {
    for (size_t i = 1; i < n; i++)
        for (size_t j = i; j > 0 && v[j - 1] > v[j]; j--) {
            double t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

static int spawn_wait(char *const argv[]) {
    pid_t pid;
    int st;
    if (posix_spawn(&pid, argv[0], NULL, NULL, argv, environ) != 0)
        return -1;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static double bwrap_cold_us(void) {
    char *argv[] = {
        "/usr/bin/bwrap", "--unshare-all", "--ro-bind", "/usr",      "/usr",   "--symlink",
        "usr/lib",        "/lib",          "--symlink", "usr/lib64", "/lib64", "--symlink",
        "usr/bin",        "/bin",          "--proc",    "/proc",     "--dev",  "/dev",
        "--tmpfs",        "/tmp",          "/bin/true", NULL};
    int64_t t = fawn_now_us();
    if (spawn_wait(argv) != 0) {
        fprintf(stderr, "bwrap failed\n");
        exit(1);
    }
    return (double)(fawn_now_us() - t);
}

static double spawn_true_us(void) {
    char *argv[] = {"/bin/true", NULL};
    int64_t t = fawn_now_us();
    spawn_wait(argv);
    return (double)(fawn_now_us() - t);
}

static void die(const char *what) {
    fprintf(stderr, "bench: %s: %s\n", what, fawn_errmsg());
    exit(1);
}

static double fawn_cold_us(const fawn_config *cfg, const char *thread, local_box *b,
                           netns_pool *pool) {
    local_spec spec = {.cfg = cfg,
                       .user = "bench",
                       .thread = thread,
                       .netns = pool,
                       .fawn_bin = getenv("FAWN_BIN")};
    int64_t t = fawn_now_us();
    if (local_box_ensure(b, &spec) < 0 || !b->started)
        die("starting a sandbox");
    return (double)(fawn_now_us() - t);
}

static double fawn_exec_us(box_conn *c, const json_t *body) {
    json_t *reply = NULL;
    int status = 0;
    int64_t t = fawn_now_us();
    if (box_conn_call(&reply, &status, c, "POST", "/v1/shell/exec", body, 10000) < 0 ||
        status != 200 || json_integer_value(json_object_get(reply, "exit_code")) != 0)
        die("exec /bin/true");
    double us = (double)(fawn_now_us() - t);
    json_decref(reply);
    return us;
}

/* Sums a field ("Pss:", "Private_Dirty:" ...) of /proc/pid/smaps_rollup in kB. */
static long smaps_kb(pid_t pid, const char *field) {
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/smaps_rollup", (int)pid);
    FILE *f = fopen(path, "r");
    long kb = 0;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, field, strlen(field)) == 0)
            kb += atol(line + strlen(field));
    if (f)
        fclose(f);
    return kb;
}

static long mem_available_kb(void) {
    char line[256];
    long kb = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, "MemAvailable:", 13) == 0)
            kb = atol(line + 13);
    if (f)
        fclose(f);
    return kb;
}

static void stop_all(const fawn_config *cfg, int n) {
    char thread[32];
    for (int i = 0; i < n; i++) {
        snprintf(thread, sizeof thread, "t%d", i);
        if (local_box_stop(cfg, "bench", thread) < 0)
            die("stopping a sandbox");
    }
    while (waitpid(-1, NULL, WNOHANG) > 0) {
    }
}

/* Threads whose sandboxes the cold-start rounds start and stop in turn. */
#define COLD_THREADS 8

/* Median cold start of a thread's sandbox (the thread exists, its sandbox
 * is not running), with or without a pool of ready network namespaces (as a
 * long-running launcher keeps, filling it between starts). */
static double fawn_cold_median(const fawn_config *cfg, int rounds, netns_pool *pool) {
    double *v = calloc((size_t)rounds, sizeof *v);
    char thread[32];
    for (int i = -COLD_THREADS; i < rounds; i++) {
        local_box b;
        snprintf(thread, sizeof thread, "cold%d", (i + COLD_THREADS) % COLD_THREADS);
        if (pool && netns_pool_fill(pool) < 0) /* between starts, as a launcher does */
            die("filling the netns pool");
        double us = fawn_cold_us(cfg, thread, &b, pool);
        if (i >= 0) /* the first pass creates the threads' directories */
            v[i] = us;
        if (local_box_stop(cfg, "bench", thread) < 0) /* a box left would skew the next start */
            die("stopping a sandbox");
        while (waitpid(-1, NULL, WNOHANG) > 0) {
        }
    }
    double m = median(v, (size_t)rounds);
    free(v);
    return m;
}

static void bench_cold(const fawn_config *cfg, int rounds) {
    double *theirs = calloc((size_t)rounds, sizeof *theirs);
    for (int i = 0; i < rounds; i++)
        theirs[i] = bwrap_cold_us();
    double c = median(theirs, (size_t)rounds);
    free(theirs);
    double plain = fawn_cold_median(cfg, rounds, NULL);
    netns_pool *pool = NULL;
    if (netns_pool_new(&pool, 4) < 0)
        die("netns pool");
    double pooled = fawn_cold_median(cfg, rounds, pool);
    netns_pool_free(pool);
    printf("bwrap_cold_us: %.0f\n"
           "cold_start_us: %.0f (creating the network namespace during the start)\n"
           "cold_start_ratio_vs_bwrap: %.2f\n"
           "cold_start_pooled_netns_us: %.0f (network namespace prepared before the start)\n"
           "cold_start_pooled_netns_ratio_vs_bwrap: %.2f (target <= 0.5)\n",
           c, plain, plain / c, pooled, pooled / c);
}

static const char *sandbox_id_of(const char *user, const char *thread) {
    static char id[17];
    if (paths_sandbox_id(id, user, thread) < 0)
        die("sandbox id");
    return id;
}

/* One acquire + exec + release of /bin/true through the manager. */
static double managed_exec_us(sbx_manager *m, const json_t *body) {
    sbx_request req = {
        .who = {.user = "bench", .role = "user"}, .thread = "managed", .kind = SBX_HOLD_EXECUTION};
    int64_t t = fawn_now_us();
    sbx_lease *l = NULL;
    json_t *reply = NULL;
    int status = 0;
    if (sbx_acquire(&l, m, &req) < 0 ||
        sbx_call(&reply, &status, l, "POST", "/v1/shell/exec", body, 10000) < 0 || status != 200)
        die("managed exec");
    sbx_release(l);
    double us = (double)(fawn_now_us() - t);
    json_decref(reply);
    return us;
}

/* The manager's cost on the hot path: acquire + exec + release against the
 * bare warm exec (a kept-alive connection) on the same box. */
static void bench_managed(const fawn_config *cfg, int rounds) {
    char db[PATH_MAX];
    snprintf(db, sizeof db, "%s/fawn.db", cfg->home);
    store *st = NULL;
    authz_policy *policy = NULL;
    sbx_provider *provider = NULL;
    sbx_manager *m = NULL;
    sbx_manager_config mc = {.idle_timeout_s = 600, .replicas = 0, .call_timeout_ms = 5000};
    if (store_open(&st, db) < 0 || authz_policy_load(&policy, NULL) < 0 ||
        local_provider_new(&provider, cfg, getenv("FAWN_BIN")) < 0 ||
        sbx_manager_new(&m, &mc, provider, st, policy) < 0)
        die("manager");
    json_t *body = json_pack("{s:s}", "command", "/bin/true");
    for (int i = 0; i < 50; i++) /* starts the box, warms up */
        managed_exec_us(m, body);
    char socket_path[PATH_MAX];
    if (local_socket_path(socket_path, cfg, sandbox_id_of("bench", "managed")) < 0)
        die("the managed box's socket path");
    box_conn conn;
    box_conn_init(&conn, socket_path);
    double *managed = calloc((size_t)rounds, sizeof *managed);
    double *bare = calloc((size_t)rounds, sizeof *bare);
    for (int i = 0; i < 50; i++)
        fawn_exec_us(&conn, body);
    for (int i = 0; i < rounds; i++)
        bare[i] = fawn_exec_us(&conn, body);
    for (int i = 0; i < rounds; i++)
        managed[i] = managed_exec_us(m, body);
    box_conn_close(&conn);
    double med = median(managed, (size_t)rounds), base = median(bare, (size_t)rounds);
    printf("managed_exec_us: %.0f (acquire + exec + release on a warm thread)\n"
           "managed_exec_per_s: %.0f\nbare_exec_same_box_us: %.0f\n"
           "managed_exec_ratio_vs_bare_exec: %.2f (target < 1.10)\n",
           med, 1e6 / med, base, med / base);
    free(bare);
    enum sbx_destroy_outcome o;
    if (sbx_destroy(&o, m, "bench", "managed") < 0)
        die("destroying the managed sandbox");
    sbx_manager_free(m);
    local_provider_free(provider);
    authz_policy_free(policy);
    store_close(st);
    json_decref(body);
    free(managed);
}

static void bench_warm(const fawn_config *cfg, int rounds) {
    local_box b;
    fawn_cold_us(cfg, "warm", &b, NULL);
    json_t *body = json_pack("{s:s}", "command", "/bin/true");
    box_conn conn;
    box_conn_init(&conn, b.socket_path);
    double *ours = calloc((size_t)rounds, sizeof *ours),
           *spawn = calloc((size_t)rounds, sizeof *spawn);
    for (int i = 0; i < 50; i++) /* warm up both */
        fawn_exec_us(&conn, body), spawn_true_us();
    /* Separate phases, so neither run's background work lands on the other. */
    for (int i = 0; i < rounds; i++)
        ours[i] = fawn_exec_us(&conn, body);
    for (int i = 0; i < rounds; i++)
        spawn[i] = spawn_true_us();
    box_conn_close(&conn);
    double a = median(ours, (size_t)rounds), s = median(spawn, (size_t)rounds);
    printf("warm_exec_us: %.0f\nposix_spawn_us: %.0f\nwarm_exec_ratio_vs_posix_spawn: %.2f (target "
           "<= 1.3)\n",
           a, s, a / s);
    json_decref(body);
    free(ours);
    free(spawn);
    if (local_box_stop(cfg, "bench", "warm") < 0)
        die("stopping the warm sandbox");
}

/* Creates shell session id in the box behind c, as the sandbox manager
 * creates a scope's session. */
static void session_create(box_conn *c, const char *id) {
    json_t *body = json_pack("{s:s}", "id", id), *reply = NULL;
    int status = 0;
    if (box_conn_call(&reply, &status, c, "POST", "/v1/shell/sessions", body, 10000) < 0 ||
        (status != 200 && status != 201))
        die("creating a shell session");
    json_decref(reply);
    json_decref(body);
}

/* Medians of command in session "bench" and as a one-shot exec on the box
 * behind c, taking turns so the machine's noise hits both. */
static void session_pair(double *in_session_us, double *oneshot_us, box_conn *c,
                         const char *command, int rounds) {
    json_t *oneshot = json_pack("{s:s}", "command", command);
    json_t *in_session = json_pack("{s:s, s:s}", "command", command, "session_id", "bench");
    double *ses = calloc((size_t)rounds, sizeof *ses), *one = calloc((size_t)rounds, sizeof *one);
    for (int i = 0; i < 50; i++) /* warm up both */
        fawn_exec_us(c, in_session), fawn_exec_us(c, oneshot);
    for (int i = 0; i < rounds; i++) {
        ses[i] = fawn_exec_us(c, in_session);
        one[i] = fawn_exec_us(c, oneshot);
    }
    *in_session_us = median(ses, (size_t)rounds);
    *oneshot_us = median(one, (size_t)rounds);
    json_decref(oneshot);
    json_decref(in_session);
    free(ses);
    free(one);
}

/* A command in a shell session against the same command as a one-shot exec
 * on the same warm box: /bin/true (plain words), then a command that needs
 * the shell (whose state the session's shell reports as it exits). */
static void bench_session(const fawn_config *cfg, int rounds) {
    local_box b;
    fawn_cold_us(cfg, "session", &b, NULL);
    box_conn conn;
    box_conn_init(&conn, b.socket_path);
    session_create(&conn, "bench");
    double a, o, sa, so;
    session_pair(&a, &o, &conn, "/bin/true", rounds);
    session_pair(&sa, &so, &conn, "cd /tmp && /bin/true", rounds);
    box_conn_close(&conn);
    printf("session_exec_us: %.0f (/bin/true in a shell session)\noneshot_exec_us: %.0f (the same, "
           "no session, taking turns)\nsession_exec_ratio_vs_oneshot: %.2f (target <= 1.20)\n",
           a, o, a / o);
    printf("session_shell_exec_us: %.0f (cd /tmp && /bin/true in a shell session)\n"
           "oneshot_shell_exec_us: %.0f (the same, no session, taking turns)\n"
           "session_shell_exec_ratio_vs_oneshot: %.2f\n",
           sa, so, sa / so);
    if (local_box_stop(cfg, "bench", "session") < 0)
        die("stopping the session sandbox");
}

static void bench_idle(const fawn_config *cfg, int n) {
    long before = mem_available_kb();
    pid_t *pids = calloc((size_t)n, sizeof *pids);
    char thread[32];
    for (int i = 0; i < n; i++) {
        local_box b;
        snprintf(thread, sizeof thread, "t%d", i);
        fawn_cold_us(cfg, thread, &b, NULL);
        pids[i] = b.pid;
    }
    sleep(3); /* let every box settle (and trim) */
    long pss = 0, priv = 0, rss = 0;
    for (int i = 0; i < n; i++) {
        pss += smaps_kb(pids[i], "Pss:");
        priv += smaps_kb(pids[i], "Private_Clean:") + smaps_kb(pids[i], "Private_Dirty:");
        rss += smaps_kb(pids[i], "Rss:");
    }
    long delta = before - mem_available_kb();
    printf("idle_sandboxes: %d (all started without error)\n", n);
    printf("idle_pss_kib_per_sandbox: %.0f (target < 1024)\nidle_private_kib_per_sandbox: %.0f\n"
           "idle_rss_kib_per_sandbox: %.0f (counts shared library pages in every box)\n"
           "idle_total_pss_mib: %.1f\nsystem_memory_delta_kib_per_sandbox: %.0f (includes kernel "
           "namespaces, mounts, sockets)\n",
           (double)pss / n, (double)priv / n, (double)rss / n, (double)pss / 1024,
           (double)delta / n);
    stop_all(cfg, n);
    free(pids);
}

int main(int argc, char **argv) {
    int rounds = argc > 1 ? atoi(argv[1]) : 200, idle = argc > 2 ? atoi(argv[2]) : 200;
    char home[] = "/tmp/fawn-bench-XXXXXX";
    if (!mkdtemp(home))
        return 1;
    fawn_config cfg;
    if (config_defaults(&cfg) < 0)
        die("config");
    free(cfg.home);
    cfg.home = strdup(home);
    printf("machine: %ld cores\n", sysconf(_SC_NPROCESSORS_ONLN));
    bench_cold(&cfg, rounds / 4 > 10 ? rounds / 4 : 10);
    bench_warm(&cfg, rounds);
    bench_managed(&cfg, rounds);
    bench_session(&cfg, rounds);
    bench_idle(&cfg, idle);
    config_free(&cfg);
    char cmd[64];
    snprintf(cmd, sizeof cmd, "rm -rf %s", home);
    return system(cmd) == 0 ? 0 : 1;
}
