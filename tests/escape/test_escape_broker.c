/* The credential broker against a real local sandbox, attacked as a
 * command inside it (or a process beside it) would: the CLI runs with the
 * user's credentials and its output reaches the sandbox, the credentials
 * never do; a subcommand off the allow-list, an oversize request, a call
 * with no run holding the sandbox and a forged peer are refused; output is
 * truncated and flagged, a timeout answers 124, a lease that goes kills the
 * call; another user's sandbox has its own socket only; every call is
 * audited without its secrets. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <sched.h>
#include <sys/stat.h>
#include <sys/un.h>

#include "base/json.h"
#include "broker/broker.h"
#include "config/config.h"
#include "paths/paths.h"
#include "sandbox/manager.h"
#include "sandbox/user_data.h"

/* Budget of one command: a ceiling only a hang reaches. */
#define CALL_MS 60000
#define WAIT_MS 30000
#define TOKEN_U1 "tok-u1-7f3a9c"
#define TOKEN_U2 "tok-u2-51d0be"

typedef struct fx {
    char home[64];
    fawn_config cfg;
    store *st;
    authz_policy *policy;
    sbx_provider *provider;
    sbx_manager *m;
    broker *b;
} fx;

static void put_file(const char *path, const char *text, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    assert_true(fd >= 0);
    assert_int_equal(fawn_write_all(fd, text, strlen(text)), 0);
    close(fd);
}

static void put_credentials(fx *x, const char *user, const char *token) {
    char *cmd = strf("mkdir -p -m 700 %s/users/%s/credentials/fake-cli", x->home, user);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    char *path = strf("%s/users/%s/credentials/fake-cli/token", x->home, user);
    put_file(path, token, 0600);
    free(path);
}

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-broker-XXXXXX");
    if (!mkdtemp(x->home))
        return -1;
    const char *src = getenv("FAWN_SOURCE_DIR");
    char *yaml = strf("home: %s\n"
                      "broker:\n"
                      "  max_concurrent_per_sandbox: 4\n"
                      "  clis:\n"
                      "    - name: fake-cli\n"
                      "      binary: %s/tests/broker/fake_cli.sh\n"
                      "      allow: [echo, big, fail, sleep]\n"
                      "      env:\n"
                      "        FAKE_TOKEN: file:token\n"
                      "        FAKE_DIR: dir\n"
                      "        FAKE_PIDFILE: value:%s/cli.pid\n"
                      "    - name: slow-cli\n"
                      "      binary: %s/tests/broker/fake_cli.sh\n"
                      "      allow: [sleep]\n"
                      "      timeout_s: 1\n"
                      "      env:\n"
                      "        FAKE_PIDFILE: value:%s/slow.pid\n",
                      x->home, src, x->home, src, x->home);
    int r = config_load_string(&x->cfg, yaml, strlen(yaml));
    free(yaml);
    if (r < 0)
        fail_msg("config: %s", fawn_errmsg());
    put_credentials(x, "u1", TOKEN_U1 "\n");
    /* A shim left from a configuration that named another CLI. */
    char sid[17];
    assert_int_equal(paths_sandbox_id(sid, "u1", "t-main"), 0);
    char *stale = strf("mkdir -p %s/run/broker/%s/bin && touch %s/run/broker/%s/bin/old-cli",
                       x->home, sid, x->home, sid);
    assert_int_equal(system(stale), 0);
    free(stale);
    put_credentials(x, "u2", TOKEN_U2);
    char db[128];
    snprintf(db, sizeof db, "%s/fawn.db", x->home);
    sbx_manager_config mc = {.call_timeout_ms = 5000};
    if (store_open(&x->st, db) < 0 || authz_policy_load(&x->policy, NULL) < 0 ||
        local_provider_new(&x->provider, &x->cfg, getenv("FAWN_BIN")) < 0 ||
        sbx_manager_new(&x->m, &mc, x->provider, x->st, x->policy) < 0 ||
        broker_new(&x->b, &x->cfg, x->m) < 0)
        fail_msg("setup: %s", fawn_errmsg());
    assert_non_null(x->b);
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fx *x = *state;
    static const char *const threads[][2] = {{"u1", "t-main"},   {"u1", "t-forged"},
                                             {"u2", "t-other"},  {"u1", "t-revoke"},
                                             {"u1", "t-victim"}, {"u2", "t-intruder"}};
    for (size_t i = 0; i < ARRAY_LEN(threads); i++) {
        enum sbx_destroy_outcome o;
        if (sbx_destroy(&o, x->m, threads[i][0], threads[i][1]) < 0)
            print_error("destroy %s: %s\n", threads[i][1], fawn_errmsg());
    }
    broker_free(x->b);
    sbx_manager_free(x->m);
    local_provider_free(x->provider);
    authz_policy_free(x->policy);
    store_close(x->st);
    config_free(&x->cfg);
    char *cmd = strf("rm -rf %s", x->home);
    int r = system(cmd);
    free(cmd);
    free(x);
    return r;
}

static sbx_lease *acquire(fx *x, const char *user, const char *thread, enum sbx_holder kind,
                          const char *scope) {
    sbx_request req = {
        .who = {.user = user, .role = "user"}, .thread = thread, .kind = kind, .scope = scope};
    sbx_lease *l = NULL;
    if (sbx_acquire(&l, x->m, &req) < 0)
        fail_msg("acquire %s: %s", thread, fawn_errmsg());
    return l;
}

/* Runs command in l's sandbox; returns stdout + "\n--stderr--\n" + stderr. */
static char *run(sbx_lease *l, const char *command) {
    json_t *body = json_pack("{s:s}", "command", command), *reply = NULL;
    if (l->session[0])
        json_object_set_new(body, "session_id", json_string(l->session));
    int status = 0;
    int r = sbx_call(&reply, &status, l, "POST", "/v1/shell/exec", body, CALL_MS);
    json_decref(body);
    if (r < 0 || status != 200)
        fail_msg("exec '%s': %d %s", command, status, r < 0 ? fawn_errmsg() : "");
    char *out = strf("%s\n--stderr--\n%s",
                     or_empty(json_string_value(json_object_get(reply, "stdout"))),
                     or_empty(json_string_value(json_object_get(reply, "stderr"))));
    json_decref(reply);
    return out;
}

/* The broker's audit log, whole ("" when it cannot be read). Caller frees. */
static char *audit_text(fx *x) {
    char *path = strf("%s/audit/broker.log", x->home);
    char *text = NULL;
    size_t len = 0;
    FILE *f = fopen(path, "re");
    free(path);
    if (!f || getdelim(&text, &len, '\0', f) < 0) {
        free(text);
        text = strdup("");
    }
    if (f)
        fclose(f);
    return text;
}

/* How many lines of the audit log hold both who and what (in that order). */
static size_t audit_count(fx *x, const char *who, const char *what) {
    char *text = audit_text(x);
    size_t n = 0;
    for (const char *at = strstr(text, who); at; at = strstr(at + 1, who)) {
        const char *end = strchr(at, '\n');
        const char *hit = strstr(at, what);
        n += hit && (!end || hit < end);
    }
    free(text);
    return n;
}

static void test_cli_runs_with_the_users_credentials(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(x, "u1", "t-main", SBX_HOLD_EXECUTION, "run1:lead");
    char *out = run(l, "echo hi | fake-cli echo --to someone; echo rc=$?");
    check_contains("output", out, "args: echo --to someone");
    check_contains("output", out, "token=" TOKEN_U1);
    check_contains("stdin forwarded", out, "hi");
    check_contains("cwd not forwarded", out, "cwd=/\n");
    check_contains("exit code", out, "rc=0");
    free(out);
    out = run(l, "fake-cli fail; echo rc=$?");
    check_contains("stderr replayed", out, "failing on purpose");
    check_contains("exit code replayed", out, "rc=3");
    free(out);
    /* The credentials are nowhere the sandbox can read. */
    out = run(l, "grep -rsl -D skip " TOKEN_U1 " /mnt /tmp /etc /home /root /run /opt; echo rc=$?; "
                 "ls -a /mnt/broker /mnt/broker/bin");
    check_lacks("grep finds nothing", out, "rc=0");
    check_lacks("grep finds nothing", out, "/mnt/broker/bin/");
    check_lacks("credential file", out, "token\n");
    check_contains("shim", out, "fake-cli");
    check_lacks("a shim no longer configured", out, "old-cli");
    free(out);
    char *cmd = strf("ls %s/users 2>&1; echo rc=$?", x->home);
    out = run(l, cmd);
    free(cmd);
    check_lacks("home", out, "u1");
    free(out);
    /* Off the allow-list: refused, not run. */
    out = run(l,
              "fake-cli --config /etc/shadow echo; echo rc=$?; fake-cli secrets dump; echo rc=$?");
    check_contains("refused", out, "rc=126");
    check_contains("message", out, "not allowed");
    check_lacks("not run", out, "token=");
    free(out);
    /* Oversize request. */
    out = run(l, "head -c 2000000 /dev/zero | fake-cli echo | wc -c; echo rc=${PIPESTATUS[1]}");
    check_contains("refused", out, "rc=126");
    check_contains("message", out, "larger than 1 MiB");
    free(out);
    /* Output past 4 MiB: truncated and flagged. */
    out = run(l, "fake-cli big | wc -c");
    check_contains("stderr flag", out, "stdout was truncated");
    unsigned long n = strtoul(out, NULL, 10);
    assert_true(n == BROKER_OUTPUT_MAX);
    free(out);
    /* Timeout: 124. */
    out = run(l, "slow-cli sleep; echo rc=$?");
    check_contains("timeout", out, "rc=124");
    free(out);
    sbx_release(l);
    char *audit = audit_text(x);
    check_contains("audit", audit, "user=u1 thread=t-main run=run1:lead");
    check_contains("audit", audit, "cli=fake-cli subcommand=\"echo\" args=3 exit=0");
    check_contains("audit", audit, "subcommand=\"-\" args=3 exit=126");
    check_contains("audit", audit, "truncated=stdout");
    check_contains("audit", audit, "cli=slow-cli subcommand=\"sleep\" args=1 exit=124");
    check_lacks("audit: argument values", audit, "someone");
    check_lacks("audit: arguments off the list", audit, "shadow");
    check_lacks("audit: secrets", audit, TOKEN_U1);
    free(audit);
}

static void test_no_lease_no_credentials(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(x, "u1", "t-revoke", SBX_HOLD_EXECUTION, "run2:lead");
    char *out = run(l, "nohup fake-cli sleep >/dev/null 2>&1 & echo started");
    free(out);
    char *pidfile = strf("%s/cli.pid", x->home);
    int64_t until = fawn_now_ms() + WAIT_MS;
    while (access(pidfile, F_OK) != 0 && fawn_now_ms() < until)
        usleep(20000);
    assert_int_equal(access(pidfile, F_OK), 0);
    free(pidfile);
    sbx_release(l); /* the call in progress is killed */
    char *audit = NULL;
    until = fawn_now_ms() + WAIT_MS;
    do {
        free(audit);
        usleep(20000);
        audit = audit_text(x);
    } while (!strstr(audit, "thread=t-revoke") && fawn_now_ms() < until);
    check_contains("killed", audit, "exit=125");
    check_contains("why", audit, "lease on this sandbox ended");
    free(audit);
    /* An upload hold is no run's lease: a call now is refused. */
    l = acquire(x, "u1", "t-revoke", SBX_HOLD_UPLOAD, NULL);
    out = run(l, "fake-cli echo </dev/null; echo rc=$?");
    check_contains("refused", out, "rc=126");
    check_contains("message", out, "no run holds this sandbox");
    check_lacks("not run", out, "token=");
    free(out);
    sbx_release(l);
}

/* Past max_concurrent_per_sandbox (4) running calls, the next is answered
 * busy (75) and runs nothing; the running ones end with the lease. */
static void test_busy(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(x, "u1", "t-busy", SBX_HOLD_EXECUTION, "run3:lead");
    char *pidfile = strf("%s/cli.pid", x->home);
    unlink(pidfile);
    char *out = run(l, "for i in 1 2 3 4; do nohup fake-cli sleep >/dev/null 2>&1 & done");
    free(out);
    /* Each running call's CLI appends its pid: wait for the four. */
    size_t lines = 0;
    for (int64_t until = fawn_now_ms() + WAIT_MS; lines < 4 && fawn_now_ms() < until;) {
        usleep(20000);
        int fd = open(pidfile, O_RDONLY | O_CLOEXEC);
        char *text = NULL;
        size_t len = 0;
        lines = 0;
        if (fd >= 0 && fawn_read_all(&text, &len, fd, 4096) == 0)
            for (size_t i = 0; i < len; i++)
                lines += text[i] == '\n';
        if (fd >= 0)
            close(fd);
        free(text);
    }
    assert_int_equal(lines, 4);
    free(pidfile);
    out = run(l, "fake-cli echo </dev/null; echo rc=$?");
    check_contains("busy", out, "rc=75");
    check_contains("message", out, "busy");
    check_lacks("not run", out, "token=");
    free(out);
    sbx_release(l);
    int64_t until = fawn_now_ms() + WAIT_MS;
    size_t killed;
    while ((killed = audit_count(x, "thread=t-busy", "exit=125")) != 4 && fawn_now_ms() <= until)
        usleep(20000);
    char *audit = audit_text(x);
    check_contains("busy audited", audit, "thread=t-busy run=run3:lead");
    check_contains("busy audited", audit, "exit=75");
    assert_int_equal(killed, 4); /* the lease went: each running call was killed */
    free(audit);
}

static void test_other_users_sandbox_has_its_own_socket(void **state) {
    fx *x = *state;
    sbx_lease *a = acquire(x, "u1", "t-main", SBX_HOLD_EXECUTION, NULL);
    sbx_lease *b = acquire(x, "u2", "t-other", SBX_HOLD_EXECUTION, NULL);
    char *cmd = strf("test -e %s/run/broker/%s/broker.sock && echo SEEN; fake-cli echo </dev/null",
                     x->home, a->box.sandbox_id);
    char *out = run(b, cmd);
    free(cmd);
    check_lacks("the other socket", out, "SEEN");
    check_contains("own credentials", out, "token=" TOKEN_U2);
    check_lacks("not u1's", out, TOKEN_U1);
    free(out);
    sbx_release(b);
    sbx_release(a);
}

/* A host pid of a process of sandbox_id (its cgroup names it), or 0. */
static pid_t pid_in_sandbox(const char *sandbox_id) {
    DIR *d = opendir("/proc");
    struct dirent *de;
    pid_t found = 0;
    char *needle = strf("-%s", sandbox_id);
    while (d && !found && (de = readdir(d))) {
        if (de->d_name[0] < '1' || de->d_name[0] > '9')
            continue;
        char path[300];
        snprintf(path, sizeof path, "/proc/%s/cgroup", de->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        char *text = NULL;
        size_t len = 0;
        if (fd >= 0 && fawn_read_all(&text, &len, fd, 1 << 16) == 0 && strstr(text, "/fawn/") &&
            strstr(text, needle))
            found = (pid_t)atoi(de->d_name);
        if (fd >= 0)
            close(fd);
        free(text);
    }
    if (d)
        closedir(d);
    free(needle);
    return found;
}

/* Moves this process into every cgroup of pid's (v1 hierarchies and v2). */
static bool join_cgroups_of(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    char *text = NULL;
    size_t len = 0;
    bool ok = fd >= 0 && fawn_read_all(&text, &len, fd, 1 << 16) == 0;
    if (fd >= 0)
        close(fd);
    bool joined = false;
    for (char *line = ok ? strtok(text, "\n") : NULL; line; line = strtok(NULL, "\n")) {
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || !strstr(c2, "/fawn/"))
            continue;
        *c2 = '\0';
        char *procs = c1[1] ? strf("/sys/fs/cgroup/%s%s/cgroup.procs", c1 + 1, c2 + 1)
                            : strf("/sys/fs/cgroup%s/cgroup.procs", c2 + 1);
        int w = open(procs, O_WRONLY | O_CLOEXEC);
        joined |= w >= 0 && write(w, "0", 1) == 1;
        if (w >= 0)
            close(w);
        free(procs);
    }
    free(text);
    return joined;
}

/* Sends a fake-cli request to the socket of l's sandbox from a forked
 * process that first becomes what become() makes it; returns the reply. */
static void forged_call(fx *x, sbx_lease *l, bool (*become)(void *), void *arg, broker_reply *rep,
                        char **got) {
    (void)x;
    /* Reached through a descriptor of its directory opened while still
     * root: the sandbox's uid could not pass $FAWN_HOME/run on its own. */
    char *dir = strf("%s/run/broker/%s", x->home, l->box.sandbox_id);
    int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    assert_true(dirfd >= 0);
    free(dir);
    char *path = strf("/proc/self/fd/%d/broker.sock", dirfd);
    char *argv[] = {"echo"};
    fbuf req = {0};
    assert_int_equal(broker_request_encode(&req, "fake-cli", argv, 1, NULL, 0), 0);
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    if (pid == 0) {
        close(p[0]);
        struct sockaddr_un addr = {.sun_family = AF_UNIX};
        snprintf(addr.sun_path, sizeof addr.sun_path, "%s", path);
        int fd = socket(AF_UNIX, SOCK_STREAM, 0);
        if (!become(arg) || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0 ||
            write(fd, req.data, req.len) != (ssize_t)req.len)
            _exit(1);
        char buf[4096];
        ssize_t n;
        while ((n = read(fd, buf, sizeof buf)) > 0)
            if (write(p[1], buf, (size_t)n) != n)
                _exit(1);
        _exit(0);
    }
    close(p[1]);
    size_t len = 0;
    assert_int_equal(fawn_read_all(got, &len, p[0], 1 << 16), 0);
    close(p[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    assert_int_equal(WEXITSTATUS(status), 0);
    assert_true(len > BROKER_HEADER_LEN);
    assert_int_equal(
        broker_reply_parse(rep, (uint8_t *)*got + BROKER_HEADER_LEN, len - BROKER_HEADER_LEN), 0);
    free(path);
    close(dirfd);
    fbuf_free(&req);
}

static bool become_uid(void *arg) {
    uid_t uid = *(uid_t *)arg;
    return setresgid(uid, uid, uid) == 0 && setresuid(uid, uid, uid) == 0;
}

typedef struct other_box {
    pid_t box_pid; /* a process of the other sandbox */
    uid_t uid;     /* the attacked sandbox's uid */
} other_box;

/* Becomes a process of the other sandbox (its pid namespace and cgroups)
 * that has taken the attacked sandbox's uid: every fact but the cgroup
 * agrees with the attacked sandbox. */
static bool become_other_sandbox(void *arg) {
    other_box *o = arg;
    char ns[64];
    snprintf(ns, sizeof ns, "/proc/%d/ns/pid", (int)o->box_pid);
    int fd = open(ns, O_RDONLY | O_CLOEXEC);
    if (fd < 0 || setns(fd, CLONE_NEWPID) < 0)
        return false;
    pid_t child = fork(); /* the one that enters the namespace */
    if (child > 0) {
        int status = 0;
        waitpid(child, &status, 0);
        _exit(WIFEXITED(status) ? WEXITSTATUS(status) : 1);
    }
    return child == 0 && join_cgroups_of(o->box_pid) && become_uid(&o->uid);
}

/* A process of another user's sandbox, with this sandbox's uid, on this
 * sandbox's socket (as if the path had leaked into it): refused, and this
 * sandbox fenced. */
static void test_other_sandbox_process_refused(void **state) {
    fx *x = *state;
    sbx_lease *a = acquire(x, "u1", "t-victim", SBX_HOLD_EXECUTION, NULL);
    sbx_lease *b = acquire(x, "u2", "t-intruder", SBX_HOLD_EXECUTION, NULL);
    other_box o = {.box_pid = pid_in_sandbox(b->box.sandbox_id),
                   .uid = sbx_host_uid(a->box.sandbox_id)};
    assert_true(o.box_pid > 0);
    broker_reply rep;
    char *got = NULL;
    forged_call(x, a, become_other_sandbox, &o, &rep, &got);
    assert_int_equal(rep.exit_code, BROKER_EXIT_REFUSED);
    char *err = strndup(rep.err, rep.err_len);
    check_contains("refusal", err, "not a process of this sandbox");
    free(err);
    free(got);
    assert_false(sbx_reusable(x->m, a->box.sandbox_id, a->box.generation));
    assert_true(sbx_reusable(x->m, b->box.sandbox_id, b->box.generation));
    sbx_release(b);
    sbx_release(a);
}

/* A host process with the sandbox's own uid, on the sandbox's socket: the
 * kernel says it is not in the sandbox; refused, and the sandbox fenced. */
static void test_forged_peer_refused_and_quarantined(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(x, "u1", "t-forged", SBX_HOLD_EXECUTION, NULL);
    uid_t uid = sbx_host_uid(l->box.sandbox_id);
    broker_reply rep;
    char *got = NULL;
    forged_call(x, l, become_uid, &uid, &rep, &got);
    assert_int_equal(rep.exit_code, BROKER_EXIT_REFUSED);
    char *err = strndup(rep.err, rep.err_len);
    check_contains("refusal", err, "not a process of this sandbox");
    free(err);
    free(got);
    assert_false(sbx_reusable(x->m, l->box.sandbox_id, l->box.generation));
    /* In the store: a restarted gateway never reuses it either. */
    bool durable = false;
    assert_int_equal(store_fence_exists(x->st, &durable, "", l->box.sandbox_id, l->box.generation),
                     0);
    assert_true(durable);
    /* Its own commands get nothing either from now on. */
    char *out = run(l, "fake-cli echo </dev/null; echo rc=$?");
    check_contains("refused", out, "rc=126");
    check_lacks("not run", out, "token=");
    free(out);
    sbx_release(l);
}

int main(void) {
    if (geteuid() != 0) {
        printf("1..0 # SKIP the credential broker's attestation needs root (per-sandbox uids)\n");
        return 0;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cli_runs_with_the_users_credentials),
        cmocka_unit_test(test_no_lease_no_credentials),
        cmocka_unit_test(test_busy),
        cmocka_unit_test(test_other_users_sandbox_has_its_own_socket),
        cmocka_unit_test(test_forged_peer_refused_and_quarantined),
        cmocka_unit_test(test_other_sandbox_process_refused),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
