/* The fawn binary as a user runs it: `fawn sandbox exec/stop`, `fawn doctor`,
 * and `fawn box --listen` (remote placement over TCP with a bearer token). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"

/* Longest wait for a box to answer or to go away: a ceiling that only
 * catches a hang, never reached on a busy host. */
#define SETTLE_MS 30000

static char home[64];

/* Runs `fawn ARGS` with FAWN_HOME=home; returns its exit status and stores
 * its stdout (up to outsz-1 bytes) in out when out is not NULL. */
static int run_fawn(char *out, size_t outsz, const char *args) {
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "FAWN_HOME=%s %s %s", home, getenv("FAWN_BIN"), args);
    FILE *p = popen(cmd, "r");
    assert_non_null(p);
    size_t n = out ? fread(out, 1, outsz - 1, p) : 0;
    if (out)
        out[n] = '\0';
    else
        while (fgetc(p) != EOF) {
        }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int setup(void **state) {
    snprintf(home, sizeof home, "/tmp/fawn-cli-XXXXXX");
    return mkdtemp(home) ? 0 : -1;
}

static int teardown(void **state) {
    run_fawn(NULL, 0, "sandbox stop --user u --thread t >/dev/null 2>&1");
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", home);
    return system(cmd);
}

static void exec_propagates_exit_code_and_output(void **state) {
    char out[256];
    assert_int_equal(
        run_fawn(out, sizeof out, "sandbox exec --user u --thread t -- 'echo hi; exit 3'"), 3);
    assert_string_equal(out, "hi\n");
    assert_int_equal(run_fawn(NULL, 0, "sandbox exec --user u --thread t -- true"), 0);
}

/* The timeout ended the command: exit 124, and what it would have printed
 * after its sleep is missing. */
static void exec_timeout_exits_124(void **state) {
    char out[256];
    assert_int_equal(run_fawn(out, sizeof out,
                              "sandbox exec --user u --thread t --timeout 1 -- "
                              "'echo begun; sleep 30; echo after' 2>/dev/null"),
                     124);
    assert_string_equal(out, "begun\n");
}

static void files_persist_between_invocations_and_stop(void **state) {
    char out[256];
    assert_int_equal(
        run_fawn(NULL, 0,
                 "sandbox exec --user u --thread t -- 'echo kept > /mnt/user-data/workspace/f'"),
        0);
    assert_int_equal(run_fawn(NULL, 0, "sandbox stop --user u --thread t"), 0);
    assert_int_equal(
        run_fawn(out, sizeof out,
                 "sandbox exec --user u --thread t -- 'cat /mnt/user-data/workspace/f'"),
        0);
    assert_string_equal(out, "kept\n");
}

static void session_state_persists_between_invocations(void **state) {
    char out[256];
    assert_int_equal(
        run_fawn(NULL, 0, "sandbox exec --user u --thread t --session s -- 'cd /tmp; export X=42'"),
        0);
    assert_int_equal(
        run_fawn(out, sizeof out, "sandbox exec --user u --thread t --session s -- 'echo $PWD $X'"),
        0);
    assert_string_equal(out, "/tmp 42\n");
    assert_int_equal(
        run_fawn(out, sizeof out, "sandbox exec --user u --thread t -- 'echo $PWD ${X:-unset}'"),
        0);
    assert_string_equal(out, "/mnt/user-data/workspace unset\n");
}

static void bad_arguments_exit_2(void **state) {
    assert_int_equal(run_fawn(NULL, 0, "sandbox exec --user u -- true 2>/dev/null"), 2);
    assert_int_equal(run_fawn(NULL, 0, "sandbox exec --user u --thread t 2>/dev/null"), 2);
    assert_int_equal(
        run_fawn(NULL, 0, "sandbox exec --user u --thread t --timeout 0 -- true 2>/dev/null"), 2);
    assert_int_equal(run_fawn(NULL, 0, "nosuchcommand 2>/dev/null"), 2);
    /* A thread id that would climb out of the home directory. */
    assert_int_equal(
        run_fawn(NULL, 0, "sandbox exec --user u --thread ../../x -- true 2>/dev/null"), 1);
}

static void doctor_reports_ready_host(void **state) {
    char out[8192];
    assert_int_equal(run_fawn(out, sizeof out, "doctor --json"), 0);
    assert_non_null(strstr(out, "\"local_provider_ready\": true"));
}

/* ---- fawn box --listen ---- */

/* What loopback_spawn runs: `fawn box --listen 127.0.0.1:PORT` with these. */
typedef struct box_cmd {
    const char *token_path, *user_data;
    const char *idle_exit; /* --idle-exit's value, or NULL */
} box_cmd;

static void exec_box(uint16_t port, void *ctx) {
    const box_cmd *b = ctx;
    char listen[32];
    snprintf(listen, sizeof listen, "127.0.0.1:%u", port);
    setenv("FAWN_HOME", home, 1); /* the test's own, not ./.fawn */
    execl(getenv("FAWN_BIN"), "fawn", "box", "--listen", listen, "--token-file", b->token_path,
          "--user-data", b->user_data, b->idle_exit ? "--idle-exit" : (char *)NULL, b->idle_exit,
          (char *)NULL);
}

static void box_over_tcp_requires_the_bearer_token(void **state) {
    char token_path[128], user_data[128];
    snprintf(user_data, sizeof user_data, "%s/remote-user-data", home);
    snprintf(token_path, sizeof token_path, "%s/token", home);
    const char *token = "0123456789abcdef0123456789abcdef-test";
    FILE *f = fopen(token_path, "w");
    fputs(token, f);
    fclose(f);
    uint16_t port;
    pid_t pid = loopback_spawn(&port, exec_box, &(box_cmd){token_path, user_data, NULL});
    char req[1024], body[4096];
    const char *exec_body =
        "{\"command\":\"echo over-tcp > /mnt/user-data/outputs/o; cat /mnt/user-data/outputs/o\"}";
    snprintf(req, sizeof req,
             "POST /v1/shell/exec HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(exec_body), exec_body);
    assert_int_equal(loopback_http((uint16_t)port, req, body, sizeof body, 5000), 401);
    snprintf(req, sizeof req,
             "POST /v1/shell/exec HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Authorization: Bearer wrong-token-wrong-token-wrong-token\r\n"
             "Content-Length: %zu\r\n\r\n%s",
             strlen(exec_body), exec_body);
    assert_int_equal(loopback_http((uint16_t)port, req, body, sizeof body, 5000), 401);
    snprintf(req, sizeof req,
             "POST /v1/shell/exec HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Authorization: Bearer %s\r\nContent-Length: %zu\r\n\r\n%s",
             token, strlen(exec_body), exec_body);
    assert_int_equal(loopback_http((uint16_t)port, req, body, sizeof body, 5000), 200);
    assert_non_null(strstr(body, "over-tcp"));
    /* The file landed in the given user-data directory on the host. */
    char host_file[192], *content = NULL;
    snprintf(host_file, sizeof host_file, "%s/outputs/o", user_data);
    int fd = open(host_file, O_RDONLY);
    assert_true(fd >= 0);
    assert_int_equal(fawn_read_all(&content, NULL, fd, 1024), 0);
    close(fd);
    assert_string_equal(content, "over-tcp\n");
    free(content);
    kill(pid, SIGTERM);
    int st;
    if (!reap_within(&st, pid, SETTLE_MS))
        fail_msg("fawn box still ran %d ms after SIGTERM (killed)", SETTLE_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

/* The sandbox a `fawn box --listen` runs dies with it, even by SIGKILL:
 * nothing is left serving without its launcher. */
static void box_dies_with_its_launcher(void **state) {
    char token_path[128], user_data[128];
    snprintf(user_data, sizeof user_data, "%s/orphan-user-data", home);
    snprintf(token_path, sizeof token_path, "%s/orphan-token", home);
    FILE *f = fopen(token_path, "w");
    fputs("0123456789abcdef0123456789abcdef-orphan", f);
    fclose(f);
    uint16_t port;
    pid_t pid = loopback_spawn(&port, exec_box, &(box_cmd){token_path, user_data, NULL});
    char req[256], body[256];
    snprintf(req, sizeof req, "GET /v1/sandbox HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
    int status = 0;
    for (int64_t deadline = fawn_now_ms() + SETTLE_MS; status != 401 && fawn_now_ms() < deadline;
         usleep(20000))
        status = loopback_http((uint16_t)port, req, body, sizeof body, 2000);
    assert_int_equal(status, 401); /* the box answers (and wants its token) */
    char path[64], children[256] = "";
    snprintf(path, sizeof path, "/proc/%d/task/%d/children", (int)pid, (int)pid);
    f = fopen(path, "r");
    assert_non_null(f);
    assert_non_null(fgets(children, sizeof children, f));
    fclose(f);
    pid_t box = (pid_t)atoi(children);
    assert_true(box > 0);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    bool gone = false;
    for (int64_t deadline = fawn_now_ms() + SETTLE_MS; !gone && fawn_now_ms() < deadline;
         usleep(20000)) {
        char stat_path[64], *stat = NULL;
        snprintf(stat_path, sizeof stat_path, "/proc/%d/stat", (int)box);
        int fd = open(stat_path, O_RDONLY);
        gone = fd < 0 || (fawn_read_all(&stat, NULL, fd, 4096) == 0 && strstr(stat, ") Z "));
        if (fd >= 0)
            close(fd);
        free(stat);
    }
    assert_true(gone);
    assert_true(loopback_http((uint16_t)port, req, body, sizeof body, 2000) <= 0); /* no answer */
}

/* With --idle-exit, a `fawn box --listen` nobody with its token talks to
 * exits: requests without the token (401) do not keep it alive. */
static void box_over_tcp_exits_when_nobody_talks_to_it(void **state) {
    char token_path[128], listen[64], user_data[128];
    snprintf(user_data, sizeof user_data, "%s/idle-user-data", home);
    snprintf(token_path, sizeof token_path, "%s/idle-token", home);
    const char *token = "0123456789abcdef0123456789abcdef-idle";
    FILE *f = fopen(token_path, "w");
    fputs(token, f);
    fclose(f);
    uint16_t port;
    pid_t pid = loopback_spawn(&port, exec_box, &(box_cmd){token_path, user_data, "3"});
    snprintf(listen, sizeof listen, "127.0.0.1:%u", port);
    char req[512], body[1024];
    snprintf(req, sizeof req,
             "GET /v1/sandbox HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
             "Authorization: Bearer %s\r\n\r\n",
             token);
    int status = 0;
    for (int64_t deadline = fawn_now_ms() + SETTLE_MS; status != 200 && fawn_now_ms() < deadline;
         usleep(20000))
        status = loopback_http((uint16_t)port, req, body, sizeof body, 2000);
    assert_int_equal(status, 200);
    const char *anonymous = "GET /v1/sandbox HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    int st = 0;
    pid_t done = 0;
    for (int64_t deadline = fawn_now_ms() + 30000; done == 0 && fawn_now_ms() < deadline;
         usleep(100000)) {
        loopback_http((uint16_t)port, anonymous, body, sizeof body, 1000);
        done = waitpid(pid, &st, WNOHANG);
    }
    if (done != pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("fawn box --idle-exit 3 still runs 30 s after its last authorized request");
    }
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "box --listen %s --token-file %s --idle-exit -1 2>/dev/null", listen,
             token_path);
    assert_int_equal(run_fawn(NULL, 0, cmd), 2);
}

static void box_refuses_short_token(void **state) {
    char cmd[512];
    snprintf(cmd, sizeof cmd, "sh -c 'echo short > %s/short' && true", home);
    assert_int_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "box --listen 127.0.0.1:%d --token-file %s/short 2>/dev/null",
             loopback_free_port(), home);
    assert_int_equal(run_fawn(NULL, 0, cmd), 2);
}

/* Writes text to home/name and returns "< home/name" for a command line. */
static const char *stdin_from(const char *name, const char *text) {
    static char redirect[160];
    char path[128];
    snprintf(path, sizeof path, "%s/%s", home, name);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
    snprintf(redirect, sizeof redirect, "< %s", path);
    return redirect;
}

/* `fawn user add`: the password comes from stdin and is stored hashed. */
static void user_add_creates_a_hashed_user(void **state) {
    char out[256], args[512], cmd[512];
    snprintf(args, sizeof args, "user add --username ada --admin %s",
             stdin_from("pw1", "secret-pass-1\n"));
    assert_int_equal(run_fawn(out, sizeof out, args), 0);
    assert_non_null(strstr(out, "created admin ada"));
    /* A taken name, a bad name, a short password. */
    snprintf(args, sizeof args, "user add --username ada %s 2>/dev/null",
             stdin_from("pw2", "secret-pass-2\n"));
    assert_int_equal(run_fawn(NULL, 0, args), 1);
    snprintf(args, sizeof args, "user add --username '../x' %s 2>/dev/null",
             stdin_from("pw2", "secret-pass-2\n"));
    assert_int_equal(run_fawn(NULL, 0, args), 2);
    snprintf(args, sizeof args, "user add --username bob %s 2>/dev/null",
             stdin_from("pw3", "short\n"));
    assert_int_equal(run_fawn(NULL, 0, args), 1);
    /* The database holds a hash, not the password. */
    snprintf(cmd, sizeof cmd, "grep -c secret-pass-1 %s/fawn.db >/dev/null", home);
    assert_int_not_equal(system(cmd), 0);
    snprintf(cmd, sizeof cmd, "grep -c argon2id %s/fawn.db >/dev/null", home);
    assert_int_equal(system(cmd), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(exec_propagates_exit_code_and_output),
        cmocka_unit_test(exec_timeout_exits_124),
        cmocka_unit_test(files_persist_between_invocations_and_stop),
        cmocka_unit_test(session_state_persists_between_invocations),
        cmocka_unit_test(bad_arguments_exit_2),
        cmocka_unit_test(doctor_reports_ready_host),
        cmocka_unit_test(box_over_tcp_requires_the_bearer_token),
        cmocka_unit_test(box_dies_with_its_launcher),
        cmocka_unit_test(box_over_tcp_exits_when_nobody_talks_to_it),
        cmocka_unit_test(box_refuses_short_token),
        cmocka_unit_test(user_add_creates_a_hashed_user),
    };
    return cmocka_run_group_tests_name("cli", tests, setup, teardown);
}
