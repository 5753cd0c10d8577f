/* The box API against a real sandbox: the group setup starts one sandbox with
 * the local provider (this test program is its launcher: the box runs in a
 * clone of it), every test talks to it over its unix socket, and the group
 * teardown stops it. Commands, sessions, validation, HTTP framing and the
 * file routes are checked through the API exactly as the gateway uses it. */
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
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "box/exec.h"
#include "config/config.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/local.h"

#define WS "/mnt/user-data/workspace"
#define USER_ID "api-user"
#define THREAD_ID "api-thread"

/* Small limits, so that the limit checks are cheap to reach. */
#define MAX_SESSIONS 4
#define MAX_TIMEOUT_S 60
#define MAX_OUTPUT_BYTES 65536
/* Budget of one API call whose command should end at once. */
#define CALL_MS 15000
/* Largest reply the raw HTTP client accepts. */
#define RAW_REPLY_MAX ((size_t)1 << 20)
/* The JSON body cap of the box (api.c): a body of one byte more is 413. */
#define JSON_BODY_CAP (1024 * 1024)
/* Longest wait for the box to reap a process tree or for the busy flag: a
 * ceiling that only catches a hang, never reached on a busy host. */
#define SETTLE_MS 30000
/* Longest a command waits at a barrier for its peer, as a number of 50 ms
 * naps (at least 10 s): under CALL_MS, so that a peer that never came shows
 * as the command's own output rather than as a call that ran out. */
#define BARRIER_NAPS 200

typedef struct api_ctx {
    fawn_config cfg;
    char home[64];
    char ws_host[PATH_MAX + 16]; /* the workspace's host directory */
    local_box box;
    box_conn conn;
} api_ctx;

/* ---- assertions with context ---- */

static const char *jstr(const json_t *o, const char *key) {
    return json_string_value(json_object_get(o, key));
}

static json_int_t jint(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_integer(v))
        fail_msg("'%s' is not an integer", key);
    return json_integer_value(v);
}

static bool jbool(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_boolean(v))
        fail_msg("'%s' is not a boolean", key);
    return json_is_true(v);
}

static bool is_hex(const char *s, size_t n) {
    if (!s || strlen(s) != n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isxdigit((unsigned char)s[i]) || isupper((unsigned char)s[i]))
            return false;
    return true;
}

/* ---- API calls ---- */

/* One call on the shared keep-alive connection. body is stolen. */
static json_t *call(api_ctx *t, int *status, const char *method, const char *path, json_t *body,
                    int timeout_ms) {
    json_t *reply = NULL;
    int r = box_conn_call(&reply, status, &t->conn, method, path, body, timeout_ms);
    json_decref(body);
    if (r < 0)
        fail_msg("%s %s: %s", method, path, fawn_errmsg());
    return reply;
}

static json_t *call_ok(api_ctx *t, const char *method, const char *path, json_t *body) {
    int status = 0;
    json_t *reply = call(t, &status, method, path, body, CALL_MS);
    if (status != 200) {
        char *text = fjson_dump(reply);
        fail_msg("%s %s: status %d: %s", method, path, status, text);
    }
    return reply;
}

/* Runs body (stolen) on /v1/shell/exec; the reply must be 200. */
static json_t *exec_body(api_ctx *t, json_t *body) {
    return call_ok(t, "POST", "/v1/shell/exec", body);
}

/* Runs a one-shot command with defaults. */
static json_t *run(api_ctx *t, const char *command) {
    return exec_body(t, json_pack("{s:s}", "command", command));
}

/* Runs a command in a session. */
static json_t *run_in(api_ctx *t, const char *session, const char *command) {
    return exec_body(t, json_pack("{s:s, s:s}", "command", command, "session_id", session));
}

/* Runs a command that must complete with exit 0; returns its stdout (caller frees). */
static char *run_stdout(api_ctx *t, const char *session, const char *command) {
    json_t *r = session ? run_in(t, session, command) : run(t, command);
    if (strcmp(jstr(r, "status"), "completed") != 0 || jint(r, "exit_code") != 0) {
        char *text = fjson_dump(r);
        fail_msg("%s: %s", command, text);
    }
    char *out = strdup(jstr(r, "stdout"));
    json_decref(r);
    return out;
}

static void session_create(api_ctx *t, const char *id) {
    json_t *r = call_ok(t, "POST", "/v1/shell/sessions", json_pack("{s:s}", "id", id));
    assert_string_equal(jstr(r, "id"), id);
    json_decref(r);
}

static void session_delete(api_ctx *t, const char *id) {
    char *path = strf("/v1/shell/sessions/%s", id);
    json_decref(call_ok(t, "DELETE", path, NULL));
    free(path);
}

/* Every error reply is {error: string, detail: string}. */
static void check_error_shape(const json_t *reply, const char *what) {
    if (!json_is_string(json_object_get(reply, "error")) ||
        !json_is_string(json_object_get(reply, "detail"))) {
        char *text = fjson_dump(reply);
        fail_msg("%s: not an error reply: %s", what, text ? text : "(null)");
    }
}

/* ---- a raw HTTP client, for bodies that are not JSON and broken framing ---- */

typedef struct raw_reply {
    int status;
    char *body; /* NUL-terminated, dechunked */
    size_t body_len;
} raw_reply;

static void raw_reply_free(raw_reply *r) {
    free(r->body);
    memset(r, 0, sizeof *r);
}

static void raw_send(int fd, const char *data, size_t len) {
    for (size_t off = 0; off < len;) {
        ssize_t n = send(fd, data + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            fail_msg("send: %s", strerror(errno));
        off += (size_t)n;
    }
}

/* Reads until the box closes the connection (requests say Connection: close). */
static void raw_read_all(fbuf *in, int fd, int timeout_ms) {
    int64_t deadline = fawn_now_ms() + timeout_ms;
    char chunk[16384];
    for (;;) {
        int64_t left = deadline - fawn_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            fail_msg("the box did not close the connection within %d ms", timeout_ms);
        ssize_t n = recv(fd, chunk, sizeof chunk, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        if (fbuf_append(in, chunk, (size_t)n) < 0)
            fail_msg("reply larger than %zu bytes", in->limit);
    }
}

static void raw_dechunk(raw_reply *out, const char *b, size_t len) {
    fbuf body = {.limit = RAW_REPLY_MAX};
    for (size_t in = 0;;) {
        const char *crlf = memmem(b + in, len - in, "\r\n", 2);
        assert_non_null(crlf);
        size_t n = strtoul(b + in, NULL, 16);
        in = (size_t)(crlf - b) + 2;
        if (n == 0)
            break;
        assert_true(in + n + 2 <= len);
        assert_int_equal(fbuf_append(&body, b + in, n), 0);
        in += n + 2;
    }
    out->body_len = body.len;
    out->body = fbuf_steal(&body);
}

static void raw_parse(raw_reply *out, const fbuf *in) {
    assert_non_null(in->data);
    const char *sep = memmem(in->data, in->len, "\r\n\r\n", 4);
    if (!sep)
        fail_msg("no complete reply head in: %.200s", in->data);
    if (sscanf(in->data, "HTTP/1.1 %d ", &out->status) != 1)
        fail_msg("bad status line: %.80s", in->data);
    const char *b = sep + 4;
    size_t len = in->len - (size_t)(b - in->data);
    char *head = strndup(in->data, (size_t)(sep - in->data));
    bool chunked = strcasestr(head, "\r\nTransfer-Encoding: chunked") != NULL;
    free(head);
    if (chunked) {
        raw_dechunk(out, b, len);
    } else {
        out->body = strndup(b, len);
        out->body_len = len;
    }
}

/* Sends request bytes on a new connection and reads the whole reply. */
static void raw_exchange(raw_reply *out, api_ctx *t, const char *request, size_t len) {
    memset(out, 0, sizeof *out);
    int fd = box_connect(t->box.socket_path);
    if (fd < 0)
        fail_msg("connect: %s", fawn_errmsg());
    raw_send(fd, request, len);
    fbuf in = {.limit = RAW_REPLY_MAX};
    raw_read_all(&in, fd, CALL_MS);
    close(fd);
    raw_parse(out, &in);
    fbuf_free(&in);
}

/* A complete request with a body and Connection: close. */
static void raw_request(raw_reply *out, api_ctx *t, const char *method, const char *target,
                        const void *body, size_t len) {
    fbuf req = {0};
    assert_int_equal(fbuf_printf(&req,
                                 "%s %s HTTP/1.1\r\nHost: box\r\nConnection: close\r\n"
                                 "Content-Length: %zu\r\n\r\n",
                                 method, target, len),
                     0);
    assert_int_equal(fbuf_append(&req, body, len), 0);
    raw_exchange(out, t, req.data, req.len);
    fbuf_free(&req);
}

/* A request whose answer must be an error status with a JSON error body. */
static void expect_raw_error(api_ctx *t, const char *method, const char *target, const char *body,
                             size_t len, int status) {
    raw_reply r;
    raw_request(&r, t, method, target, body, len);
    if (r.status != status)
        fail_msg("%s %s %.120s: expected %d, got %d: %s", method, target, body, status, r.status,
                 r.body);
    json_t *reply = NULL;
    if (fjson_parse_object(&reply, r.body, r.body_len) < 0)
        fail_msg("%s %s: error reply is not JSON: %s", method, target, r.body);
    check_error_shape(reply, target);
    json_decref(reply);
    raw_reply_free(&r);
}

/* An exec body (JSON text) that must be refused with status. */
static void expect_exec_error(api_ctx *t, const char *body, int status) {
    expect_raw_error(t, "POST", "/v1/shell/exec", body, strlen(body), status);
}

/* An exec body (JSON value, stolen) that must be refused with status. */
static void expect_exec_error_json(api_ctx *t, json_t *body, int status) {
    char *text = fjson_dump(body);
    json_decref(body);
    assert_non_null(text);
    expect_exec_error(t, text, status);
    free(text);
}

/* ---- host helpers ---- */

static char *host_read(const char *path) {
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return NULL;
    char *data = NULL;
    return fawn_read_all(&data, NULL, fd, RAW_REPLY_MAX) == 0 ? data : NULL;
}

static int host_count_procs(const char *marker) { return host_procs_with(marker, NULL); }

/* ---- group setup ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void replace_string(char **field, const char *value) {
    free(*field);
    *field = strdup(value);
}

static int group_setup(void **state) {
    api_ctx *t = calloc(1, sizeof *t);
    if (!t || config_defaults(&t->cfg) < 0)
        return -1;
    snprintf(t->home, sizeof t->home, "/tmp/fawn-box-api-XXXXXX");
    if (!mkdtemp(t->home))
        return -1;
    replace_string(&t->cfg.home, t->home);
    char *skills = strf("%s/skills", t->home);
    replace_string(&t->cfg.sandbox.skills_dir, skills);
    free(skills);
    t->cfg.sandbox.max_sessions = MAX_SESSIONS;
    t->cfg.sandbox.exec_max_timeout_s = MAX_TIMEOUT_S;
    t->cfg.sandbox.exec_timeout_s = 30;
    t->cfg.sandbox.exec_max_output_bytes = MAX_OUTPUT_BYTES;
    t->cfg.sandbox.limits.memory_mb = 512;
    t->cfg.sandbox.limits.pids = 256;
    t->cfg.sandbox.limits.tmp_size_mb = 16;
    char user_data[PATH_MAX];
    if (paths_user_data_dir(user_data, t->cfg.home, USER_ID, THREAD_ID) < 0)
        return -1;
    snprintf(t->ws_host, sizeof t->ws_host, "%s/workspace", user_data);
    local_spec spec = {
        .cfg = &t->cfg, .user = USER_ID, .thread = THREAD_ID, .fawn_bin = getenv("FAWN_BIN")};
    if (local_box_ensure(&t->box, &spec) < 0) {
        fprintf(stderr, "local_box_ensure: %s\n", fawn_errmsg());
        return -1;
    }
    box_conn_init(&t->conn, t->box.socket_path);
    *state = t;
    return 0;
}

/* Reaps a box this program started, waiting for it to exit. */
static void reap_box(pid_t pid) {
    if (pid <= 0)
        return;
    int64_t deadline = fawn_now_ms() + SETTLE_MS;
    while (waitpid(pid, NULL, WNOHANG) == 0 && fawn_now_ms() < deadline)
        usleep(10 * 1000);
}

static int group_teardown(void **state) {
    api_ctx *t = *state;
    if (!t)
        return 0;
    box_conn_close(&t->conn);
    int r = local_box_stop(&t->cfg, USER_ID, THREAD_ID);
    reap_box(t->box.pid);
    nftw(t->home, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    config_free(&t->cfg);
    free(t);
    return r;
}

/* After each test: no session is left for the next one, even when the test
 * failed midway. */
static int delete_all_sessions(void **state) {
    api_ctx *t = *state;
    json_t *list = NULL;
    int status = 0;
    if (box_conn_call(&list, &status, &t->conn, "GET", "/v1/shell/sessions", NULL, CALL_MS) < 0)
        return -1;
    int r = 0;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(list, "sessions"), i, s) {
        char *path = strf("/v1/shell/sessions/%s", jstr(s, "id"));
        json_t *reply = NULL;
        if (box_conn_call(&reply, &status, &t->conn, "DELETE", path, NULL, CALL_MS) < 0)
            r = -1; /* a session left behind: the next test would not start clean */
        json_decref(reply);
        free(path);
    }
    json_decref(list);
    return r;
}

/* ---- GET /v1/sandbox ---- */

static void test_describe(void **state) {
    api_ctx *t = *state;
    json_t *d = call_ok(t, "GET", "/v1/sandbox", NULL);
    assert_true(jbool(d, "ready"));
    assert_true(is_hex(jstr(d, "generation"), 32));
    assert_string_equal(jstr(d, "generation"), t->box.generation);
    assert_non_null(jstr(d, "version"));
    assert_true(jint(d, "started_at_ms") > 0);
    json_t *caps = json_object_get(d, "capabilities");
    assert_true(json_is_object(caps));
    assert_true(jbool(caps, "shell_sessions"));
    assert_string_equal(jstr(caps, "network"), "none");
    const char *cg = jstr(caps, "cgroup");
    assert_non_null(cg);
    assert_true(strcmp(cg, "v1") == 0 || strcmp(cg, "v2") == 0 || strcmp(cg, "none") == 0);
    json_t *limits = json_object_get(caps, "limits");
    assert_true(json_is_object(limits));
    assert_int_equal(jint(limits, "max_sessions"), MAX_SESSIONS);
    assert_int_equal(jint(limits, "max_timeout_s"), MAX_TIMEOUT_S);
    assert_int_equal(jint(limits, "max_output_bytes"), MAX_OUTPUT_BYTES);
    assert_true(jint(limits, "upload_max_bytes") > 0);
    if (strcmp(cg, "none") != 0) {
        assert_int_equal(jint(limits, "memory_bytes"), (json_int_t)512 << 20);
        assert_int_equal(jint(limits, "pids_max"), 256);
    }
    json_decref(d);
}

/* ---- exec ---- */

static void test_exec_reply_shape(void **state) {
    api_ctx *t = *state;
    json_t *r = run(t, "echo out; echo err >&2; exit 3");
    assert_string_equal(jstr(r, "status"), "completed");
    assert_int_equal(jint(r, "exit_code"), 3);
    assert_string_equal(jstr(r, "stdout"), "out\n");
    assert_string_equal(jstr(r, "stderr"), "err\n");
    assert_false(jbool(r, "truncated"));
    json_int_t ms = jint(r, "duration_ms");
    assert_true(ms >= 0 && ms < CALL_MS);
    assert_null(json_object_get(r, "session_id"));
    json_decref(r);
    /* A plain command (exec'd without a shell) behaves the same. */
    r = run(t, "echo plain words");
    assert_string_equal(jstr(r, "stdout"), "plain words\n");
    json_decref(r);
    r = run(t, "/nonexistent/binary");
    assert_int_equal(jint(r, "exit_code"), 127);
    check_contains("missing binary", jstr(r, "stderr"), "not found");
    json_decref(r);
}

static void test_exec_default_cwd_and_stdin(void **state) {
    api_ctx *t = *state;
    char *out = run_stdout(t, NULL, "pwd");
    assert_string_equal(out, WS "\n");
    free(out);
    /* stdin is /dev/null: cat ends on its own, with nothing. Had it waited
     * for input, its timeout would have ended it ("timeout"), if the call's
     * budget had not run out first. */
    json_t *r = run(t, "cat");
    assert_string_equal(jstr(r, "status"), "completed");
    assert_int_equal(jint(r, "exit_code"), 0);
    assert_string_equal(jstr(r, "stdout"), "");
    json_decref(r);
    out = run_stdout(t, NULL, "readlink /proc/self/fd/0; read x || echo eof");
    assert_string_equal(out, "/dev/null\neof\n");
    free(out);
}

/* What docs/box-api.md promises about a command's process: its own PID
 * namespace under an init, no capabilities, no_new_privs, seccomp, its own
 * session, and oom_score_adj 1000 so that the OOM killer picks it first. */
static void test_exec_runs_under_init(void **state) {
    api_ctx *t = *state;
    char *out = run_stdout(t, NULL,
                           "grep -E '^(CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs|"
                           "Seccomp):' /proc/self/status");
    static const char *const want[] = {
        "CapInh:\t0000000000000000\n",
        "CapPrm:\t0000000000000000\n",
        "CapEff:\t0000000000000000\n",
        "CapBnd:\t0000000000000000\n",
        "CapAmb:\t0000000000000000\n",
        "NoNewPrivs:\t1\n",
        "Seccomp:\t2\n",
    };
    for (size_t i = 0; i < ARRAY_LEN(want); i++)
        check_contains("status", out, want[i]);
    free(out);
    /* Only the init and the command's own processes are visible. */
    out = run_stdout(t, NULL,
                     "ps -e -o pid=,comm= | sort -n | awk '{print $1}' | head -1; "
                     "test $(ps -e -o pid= | wc -l) -le 6 && echo few");
    assert_string_equal(out, "1\nfew\n");
    free(out);
    out = run_stdout(t, NULL, "test $(ps -o sid= -p $$) -eq $$ && echo own-session");
    assert_string_equal(out, "own-session\n");
    free(out);
    out = run_stdout(t, NULL, "cat /proc/self/oom_score_adj");
    assert_string_equal(out, "1000\n");
    free(out);
}

static void test_exec_env_and_cwd(void **state) {
    api_ctx *t = *state;
    json_t *r = exec_body(t, json_pack("{s:s, s:{s:s, s:s}}", "command",
                                       "printf '%s|%s|%s' \"$FOO\" \"$EMPTY\" \"$HOME\"", "env",
                                       "FOO", "bar baz", "EMPTY", ""));
    assert_string_equal(jstr(r, "stdout"), "bar baz||/tmp");
    json_decref(r);
    /* Request variables replace the base environment's. */
    r = exec_body(t, json_pack("{s:s, s:{s:s}}", "command", "echo $HOME", "env", "HOME", "/x"));
    assert_string_equal(jstr(r, "stdout"), "/x\n");
    json_decref(r);
    r = exec_body(t, json_pack("{s:s, s:s}", "command", "pwd", "cwd", "/tmp"));
    assert_string_equal(jstr(r, "stdout"), "/tmp\n");
    json_decref(r);
    r = exec_body(t, json_pack("{s:s, s:s}", "command", "pwd", "cwd", "/mnt/user-data/outputs"));
    assert_string_equal(jstr(r, "stdout"), "/mnt/user-data/outputs\n");
    json_decref(r);
    /* Commands are found in the command's PATH, with or without a shell:
     * "ls" alone runs without one, "ls;" with one. */
    const char *forms[] = {"ls", "ls;"};
    for (size_t i = 0; i < ARRAY_LEN(forms); i++) {
        r = exec_body(t,
                      json_pack("{s:s, s:{s:s}}", "command", forms[i], "env", "PATH", "/nowhere"));
        assert_int_equal(jint(r, "exit_code"), 127);
        json_decref(r);
        r = exec_body(t,
                      json_pack("{s:s, s:{s:s}}", "command", forms[i], "env", "PATH", "/usr/bin"));
        assert_int_equal(jint(r, "exit_code"), 0);
        json_decref(r);
    }
}

/* A cwd that does not exist (or is not a directory) is not an error: the
 * init falls back to the workspace (init.c exec_command), and the command
 * runs there. */
static void test_exec_missing_cwd_falls_back(void **state) {
    api_ctx *t = *state;
    static const char *const cwds[] = {"/nonexistent/dir", WS "/no-such-subdir", "/etc/hostname"};
    for (size_t i = 0; i < ARRAY_LEN(cwds); i++) {
        json_t *r = exec_body(t, json_pack("{s:s, s:s}", "command", "pwd", "cwd", cwds[i]));
        assert_string_equal(jstr(r, "status"), "completed");
        assert_int_equal(jint(r, "exit_code"), 0);
        assert_string_equal(jstr(r, "stdout"), WS "\n");
        json_decref(r);
    }
}

static void test_exec_exit_codes(void **state) {
    api_ctx *t = *state;
    for (int code = 0; code <= 255; code++) {
        char cmd[32];
        snprintf(cmd, sizeof cmd, "exit %d", code);
        json_t *r = run(t, cmd);
        assert_string_equal(jstr(r, "status"), "completed");
        assert_int_equal(jint(r, "exit_code"), code);
        json_decref(r);
    }
}

static void test_exec_killed_by_signal(void **state) {
    api_ctx *t = *state;
    json_t *r = run(t, "echo before; kill -9 $$; echo after");
    assert_string_equal(jstr(r, "status"), "killed");
    assert_int_equal(jint(r, "exit_code"), 137);
    assert_string_equal(jstr(r, "stdout"), "before\n");
    json_decref(r);
    r = run(t, "kill -TERM $$");
    assert_string_equal(jstr(r, "status"), "killed");
    assert_int_equal(jint(r, "exit_code"), 128 + 15);
    json_decref(r);
}

/* The reply comes when the command ends, not when the background process
 * that holds its stdout does: that process is still alive after the reply. */
static void test_exec_background_does_not_hold_reply(void **state) {
    api_ctx *t = *state;
    char marker[32] = "bghold-";
    fawn_random_hex(marker + 7, 6);
    char *cmd = strf("(exec -a %s sleep 300) & echo started", marker);
    json_t *r = run(t, cmd);
    free(cmd);
    assert_string_equal(jstr(r, "status"), "completed");
    assert_string_equal(jstr(r, "stdout"), "started\n");
    json_decref(r);
    assert_true(host_procs_appear(marker, SETTLE_MS)); /* it outlived the reply */
    /* The box keeps serving other commands meanwhile. */
    char *out = run_stdout(t, NULL, "echo next");
    assert_string_equal(out, "next\n");
    free(out);
}

/* A one-shot command's background processes live until its deadline, not
 * past it: then the box kills them with their init. The deadline is long
 * enough that the reply (which does not wait for them) comes well before
 * it even on a busy host. */
static void test_exec_background_dies_at_deadline(void **state) {
    api_ctx *t = *state;
    char marker[32] = "bgmark-";
    fawn_random_hex(marker + 7, 6);
    char *cmd = strf("(exec -a %s sleep 300) >/dev/null 2>&1 & echo started", marker);
    json_t *r = exec_body(t, json_pack("{s:s, s:i}", "command", cmd, "timeout_s", 8));
    free(cmd);
    assert_string_equal(jstr(r, "status"), "completed");
    assert_string_equal(jstr(r, "stdout"), "started\n");
    json_decref(r);
    assert_true(host_procs_appear(marker, SETTLE_MS)); /* alive after the reply */
    assert_true(host_procs_gone(marker, 8000 + SETTLE_MS));
}

static void test_exec_output_bounded(void **state) {
    api_ctx *t = *state;
    const int total = 5000000, cap = 4096;
    json_t *r = exec_body(
        t, json_pack("{s:s, s:i}", "command", "yes | head -c 5000000", "max_output_bytes", cap));
    assert_string_equal(jstr(r, "status"), "completed");
    assert_true(jbool(r, "truncated"));
    const char *out = jstr(r, "stdout");
    char marker[96];
    snprintf(marker, sizeof marker, "\n... [output truncated: %d bytes omitted] ...\n",
             total - cap);
    check_contains("truncated stdout", out, marker);
    size_t len = strlen(out);
    assert_int_equal(len, (size_t)cap + strlen(marker));
    /* The head and the tail are the stream's own bytes. */
    assert_memory_equal(out, "y\ny\ny\n", 6);
    assert_memory_equal(out + len - 6, "y\ny\ny\n", 6);
    const char *cut = strstr(out, marker);
    assert_int_equal((size_t)(cut - out), (size_t)cap / 2);
    json_decref(r);
    /* Under the cap nothing is marked. */
    r = exec_body(t, json_pack("{s:s, s:i}", "command", "head -c 4096 /dev/zero | tr '\\0' a",
                               "max_output_bytes", cap));
    assert_false(jbool(r, "truncated"));
    assert_int_equal(strlen(jstr(r, "stdout")), 4096);
    json_decref(r);
    /* stderr is capped on its own. */
    r = exec_body(t, json_pack("{s:s, s:i}", "command", "yes e | head -c 100000 >&2; echo ok",
                               "max_output_bytes", cap));
    assert_true(jbool(r, "truncated"));
    assert_string_equal(jstr(r, "stdout"), "ok\n");
    check_contains("stderr", jstr(r, "stderr"), "[output truncated: 95904 bytes omitted]");
    json_decref(r);
}

static void test_exec_invalid_utf8(void **state) {
    api_ctx *t = *state;
    json_t *r = run(t, "printf 'a\\xffb\\xc3'; printf 'x\\0y\\xed\\xa0\\x80z' >&2");
    assert_string_equal(jstr(r, "stdout"), "a\xEF\xBF\xBD"
                                           "b\xEF\xBF\xBD");
    const char *err = jstr(r, "stderr");
    assert_non_null(err);
    assert_true(fawn_utf8_valid(err, strlen(err)));
    assert_memory_equal(err, "x\xEF\xBF\xBDy", 5);
    assert_true(err[strlen(err) - 1] == 'z');
    check_lacks("stderr", err, "\xed\xa0\x80");
    json_decref(r);
    /* Valid multibyte output passes unchanged. */
    r = run(t, "printf 'h\\xc3\\xa9 \\xe2\\x82\\xac \\xf0\\x9f\\x90\\xb1'");
    assert_string_equal(jstr(r, "stdout"), "h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x90\xb1");
    json_decref(r);
}

static void test_exec_timeout(void **state) {
    api_ctx *t = *state;
    /* The timeout ended it: its status says so, and what it would have
     * printed after its sleep is missing. */
    json_t *r = exec_body(
        t, json_pack("{s:s, s:i}", "command", "echo begun; sleep 30; echo after", "timeout_s", 1));
    assert_string_equal(jstr(r, "status"), "timeout");
    assert_int_equal(jint(r, "exit_code"), 124);
    assert_string_equal(jstr(r, "stdout"), "begun\n");
    /* The box counts from before it set the deadline: never less than it. */
    assert_true(jint(r, "duration_ms") >= 1000);
    json_decref(r);
    /* A plain command (no shell) is cut off the same way. */
    r = exec_body(t, json_pack("{s:s, s:i}", "command", "sleep 30", "timeout_s", 1));
    assert_string_equal(jstr(r, "status"), "timeout");
    assert_int_equal(jint(r, "exit_code"), 124);
    json_decref(r);
}

/* A daemon that double-forks and setsid's away from the command still dies
 * with it: the timeout kills the init, and with it the PID namespace. */
static void test_exec_timeout_kills_whole_tree(void **state) {
    api_ctx *t = *state;
    char marker[40], hb_host[sizeof t->ws_host + 8];
    fawn_random_hex(marker, 8);
    snprintf(hb_host, sizeof hb_host, "%s/hb", t->ws_host);
    unlink(hb_host);
    /* Written aside and renamed: the kill never leaves the file truncated. */
    char *cmd = strf("(setsid sh -c 'while :; do date +%%s%%N > " WS "/hb.new; mv " WS "/hb.new " WS
                     "/hb; sleep 0.1; done; "
                     ": %s' &) ; sleep 30",
                     marker);
    json_t *r = exec_body(t, json_pack("{s:s, s:i}", "command", cmd, "timeout_s", 1));
    free(cmd);
    assert_string_equal(jstr(r, "status"), "timeout");
    assert_int_equal(jint(r, "exit_code"), 124);
    json_decref(r);
    usleep(500 * 1000);
    char *first = host_read(hb_host);
    assert_non_null(first); /* the daemon did run */
    assert_true(strlen(first) > 10);
    usleep(400 * 1000);
    char *second = host_read(hb_host);
    assert_non_null(second);
    assert_string_equal(first, second);
    free(first);
    free(second);
    assert_int_equal(host_count_procs(marker), 0);
    /* A new command sees no leftover shell or sleep. */
    char *ps = run_stdout(t, NULL, "ps ax -o comm=");
    for (char *line = strtok(ps, "\n"); line; line = strtok(NULL, "\n")) {
        assert_string_not_equal(line, "sh");
        assert_string_not_equal(line, "sleep");
    }
    free(ps);
}

/* ---- validation ---- */

static void test_exec_validation(void **state) {
    api_ctx *t = *state;
    expect_exec_error(t, "not json", 400);
    expect_exec_error(t, "{\"command\": \"echo\"", 400);
    expect_exec_error(t, "[\"echo\"]", 400);
    expect_exec_error(t, "\"echo\"", 400);
    expect_exec_error(t, "{\"command\": \"echo\", \"command\": \"id\"}", 400);
    expect_exec_error(t, "{\"command\": \"echo\", \"shell\": true}", 400);
    expect_exec_error(t, "{}", 400);
    expect_exec_error(t, "", 400);
    expect_exec_error(t, "{\"command\": \"\"}", 400);
    expect_exec_error(t, "{\"command\": 42}", 400);
    expect_exec_error(t, "{\"command\": null}", 400);
    expect_exec_error(t, "{\"command\": \"echo a\\u0000b\"}", 400);
    char *big = malloc(BOX_COMMAND_MAX + 2);
    memset(big, 'a', BOX_COMMAND_MAX + 1);
    big[BOX_COMMAND_MAX + 1] = '\0';
    expect_exec_error_json(t, json_pack("{s:s}", "command", big), 400);
    big[BOX_COMMAND_MAX - 5] = '\0'; /* "echo " + this is exactly the maximum */
    char *max = strf("echo %s", big);
    json_t *r = exec_body(t, json_pack("{s:s, s:s}", "command", max, "cwd", WS));
    assert_string_equal(jstr(r, "status"), "completed");
    assert_int_equal(strlen(jstr(r, "stdout")), BOX_COMMAND_MAX - 5 + 1);
    json_decref(r);
    free(max);
    free(big);
}

static void test_exec_validation_numbers(void **state) {
    api_ctx *t = *state;
    static const char *const bad[] = {
        "{\"command\": \"true\", \"timeout_s\": 0}",
        "{\"command\": \"true\", \"timeout_s\": -1}",
        "{\"command\": \"true\", \"timeout_s\": 61}",
        "{\"command\": \"true\", \"timeout_s\": 99999999999999999}",
        "{\"command\": \"true\", \"timeout_s\": \"5\"}",
        "{\"command\": \"true\", \"timeout_s\": 1.5}",
        "{\"command\": \"true\", \"timeout_s\": true}",
        "{\"command\": \"true\", \"max_output_bytes\": 1023}",
        "{\"command\": \"true\", \"max_output_bytes\": 0}",
        "{\"command\": \"true\", \"max_output_bytes\": 65537}",
        "{\"command\": \"true\", \"max_output_bytes\": \"4096\"}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        expect_exec_error(t, bad[i], 400);
    /* The bounds themselves are accepted. */
    json_t *r = exec_body(t, json_pack("{s:s, s:i, s:i}", "command", "true", "timeout_s",
                                       MAX_TIMEOUT_S, "max_output_bytes", BOX_OUTPUT_MIN));
    assert_string_equal(jstr(r, "status"), "completed");
    json_decref(r);
    r = exec_body(t, json_pack("{s:s, s:i, s:i}", "command", "true", "timeout_s", 1,
                               "max_output_bytes", MAX_OUTPUT_BYTES));
    assert_string_equal(jstr(r, "status"), "completed");
    json_decref(r);
}

static void test_exec_validation_env(void **state) {
    api_ctx *t = *state;
    static const char *const bad[] = {
        "{\"command\": \"true\", \"env\": \"A=1\"}",
        "{\"command\": \"true\", \"env\": [\"A=1\"]}",
        "{\"command\": \"true\", \"env\": {\"A\": 1}}",
        "{\"command\": \"true\", \"env\": {\"A\": null}}",
        "{\"command\": \"true\", \"env\": {\"A\": {\"x\": \"y\"}}}",
        "{\"command\": \"true\", \"env\": {\"A\": \"a\\u0000b\"}}",
        "{\"command\": \"true\", \"env\": {\"1A\": \"x\"}}",
        "{\"command\": \"true\", \"env\": {\"A-B\": \"x\"}}",
        "{\"command\": \"true\", \"env\": {\"A=B\": \"x\"}}",
        "{\"command\": \"true\", \"env\": {\"\": \"x\"}}",
        "{\"command\": \"true\", \"env\": {\"A B\": \"x\"}}",
        "{\"command\": \"true\", \"env\": {\"\\u00e9\": \"x\"}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        expect_exec_error(t, bad[i], 400);
    json_t *env = json_object();
    for (int i = 0; i <= BOX_REQUEST_ENV_MAX; i++) {
        char name[16];
        snprintf(name, sizeof name, "V%d", i);
        json_object_set_new(env, name, json_string("x"));
    }
    expect_exec_error_json(t, json_pack("{s:s, s:O}", "command", "true", "env", env), 400);
    /* Exactly the maximum is fine. */
    json_object_del(env, "V0");
    json_t *r = exec_body(t, json_pack("{s:s, s:o}", "command", "echo $V64", "env", env));
    assert_string_equal(jstr(r, "stdout"), "x\n");
    json_decref(r);
}

static void test_exec_validation_session_and_cwd(void **state) {
    api_ctx *t = *state;
    static const char *const bad[] = {
        "{\"command\": \"true\", \"session_id\": \"a/b\"}",
        "{\"command\": \"true\", \"session_id\": \"../x\"}",
        "{\"command\": \"true\", \"session_id\": \"\"}",
        "{\"command\": \"true\", \"session_id\": \"a b\"}",
        "{\"command\": \"true\", \"session_id\": 7}",
        "{\"command\": \"true\", \"cwd\": \"relative/dir\"}",
        "{\"command\": \"true\", \"cwd\": \"\"}",
        "{\"command\": \"true\", \"cwd\": 1}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        expect_exec_error(t, bad[i], 400);
    char long_id[BOX_SESSION_ID_MAX + 2];
    memset(long_id, 's', sizeof long_id - 1);
    long_id[sizeof long_id - 1] = '\0';
    expect_exec_error_json(t, json_pack("{s:s, s:s}", "command", "true", "session_id", long_id),
                           400);
    expect_exec_error(t, "{\"command\": \"true\", \"session_id\": \"no-such-session\"}", 404);
}

/* The status of a bodiless request, which must be an error reply. */
static int route_status(api_ctx *t, const char *method, const char *target) {
    raw_reply r;
    raw_request(&r, t, method, target, "", 0);
    json_t *reply = NULL;
    if (fjson_parse_object(&reply, r.body, r.body_len) < 0)
        fail_msg("%s %s: reply is not JSON: %s", method, target, r.body);
    check_error_shape(reply, target);
    json_decref(reply);
    int status = r.status;
    raw_reply_free(&r);
    return status;
}

static void test_routes_and_methods(void **state) {
    api_ctx *t = *state;
    static const struct {
        const char *method, *target;
        int status;
    } cases[] = {
        /* No such route. */
        {"GET", "/v1/nothing", 404},
        {"GET", "/", 404},
        {"POST", "/v1/sandbox/", 404},
        {"GET", "/v1/shell/sessions/", 404},
        {"POST", "/v1/file/readx", 404},
        /* A known route with the wrong method is 405 (docs/box-api.md). */
        {"GET", "/v1/file/read", 405},
        {"PUT", "/v1/file/write", 405},
        {"GET", "/v1/shell/sessions/abc/kill", 405},
        {"PUT", "/v1/shell/sessions/abc", 405},
        {"GET", "/v1/shell/exec", 405},
        {"DELETE", "/v1/shell/exec", 405},
        {"POST", "/v1/sandbox", 405},
        {"DELETE", "/v1/shell/sessions", 405},
        {"GET", "/v1/sandbox/shutdown", 405},
        {"POST", "/v1/file/download?path=/mnt/user-data/workspace/x", 405},
    };
    fbuf wrong = {0};
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        int status = route_status(t, cases[i].method, cases[i].target);
        if (status != cases[i].status)
            assert_int_equal(fbuf_printf(&wrong, "%s %s: %d, expected %d\n", cases[i].method,
                                         cases[i].target, status, cases[i].status),
                             0);
    }
    if (wrong.len)
        fail_msg("wrong statuses:\n%s", wrong.data);
}

static void test_json_body_cap(void **state) {
    api_ctx *t = *state;
    /* The head alone announces too much: refused before a byte is read. */
    char *head = strf("POST /v1/shell/exec HTTP/1.1\r\nHost: box\r\nConnection: close\r\n"
                      "Content-Length: %d\r\n\r\n",
                      JSON_BODY_CAP + 1);
    raw_reply r;
    raw_exchange(&r, t, head, strlen(head));
    assert_int_equal(r.status, 413);
    json_t *reply = NULL;
    assert_int_equal(fjson_parse_object(&reply, r.body, r.body_len), 0);
    check_error_shape(reply, "413");
    json_decref(reply);
    raw_reply_free(&r);
    free(head);
    /* The box still serves. */
    json_decref(call_ok(t, "GET", "/v1/sandbox", NULL));
}

static void expect_head_rejected(api_ctx *t, const char *request, size_t len, int min_status,
                                 int max_status) {
    raw_reply r;
    raw_exchange(&r, t, request, len);
    if (r.status < min_status || r.status > max_status)
        fail_msg("%.60s: status %d", request, r.status);
    json_t *reply = NULL;
    assert_int_equal(fjson_parse_object(&reply, r.body, r.body_len), 0);
    check_error_shape(reply, "malformed head");
    json_decref(reply);
    raw_reply_free(&r);
}

static void test_malformed_http(void **state) {
    api_ctx *t = *state;
    static const char *const heads[] = {
        "GARBAGE\r\n\r\n",
        "GET /v1/sandbox\r\n\r\n",
        "GET v1/sandbox HTTP/1.1\r\n\r\n",
        "GET /v1/sandbox HTTP/2.0\r\n\r\n",
        "GET /v1/sandbox HTTP/1.1\nHost: x\n\n",
        "POST /v1/shell/exec HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello",
        "POST /v1/shell/exec HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "POST /v1/shell/exec HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "GET /v1/sandbox HTTP/1.1\r\n folded: header\r\n\r\n",
    };
    for (size_t i = 0; i < ARRAY_LEN(heads); i++)
        expect_head_rejected(t, heads[i], strlen(heads[i]), 400, 505);
    /* A NUL byte in the head. */
    static const char nul_head[] = "GET /v1/sandbox HTTP/1.1\r\nX: a\0b\r\n\r\n";
    expect_head_rejected(t, nul_head, sizeof nul_head - 1, 400, 400);
    /* A header far over the head limit. */
    size_t n = 40000;
    char *huge = malloc(n + 64);
    int k = snprintf(huge, 64, "GET /v1/sandbox HTTP/1.1\r\nX-Big: ");
    memset(huge + k, 'a', n);
    memcpy(huge + k + n, "\r\n\r\n", 5);
    expect_head_rejected(t, huge, (size_t)k + n + 4, 431, 431);
    free(huge);
    /* Too many headers. */
    fbuf many = {0};
    assert_int_equal(fbuf_printf(&many, "GET /v1/sandbox HTTP/1.1\r\n"), 0);
    for (int i = 0; i < 40; i++)
        assert_int_equal(fbuf_printf(&many, "X-H%d: v\r\n", i), 0);
    assert_int_equal(fbuf_printf(&many, "\r\n"), 0);
    expect_head_rejected(t, many.data, many.len, 431, 431);
    fbuf_free(&many);
    /* The box keeps serving, on the shared connection and on new ones. */
    json_t *d = call_ok(t, "GET", "/v1/sandbox", NULL);
    assert_true(jbool(d, "ready"));
    json_decref(d);
    raw_reply r;
    raw_request(&r, t, "GET", "/v1/sandbox", "", 0);
    assert_int_equal(r.status, 200);
    raw_reply_free(&r);
}

/* ---- sessions ---- */

static void test_session_create(void **state) {
    api_ctx *t = *state;
    json_t *r = call_ok(t, "POST", "/v1/shell/sessions", json_pack("{s:s}", "id", "s-create"));
    assert_string_equal(jstr(r, "id"), "s-create");
    assert_false(jbool(r, "existed"));
    assert_false(jbool(r, "busy"));
    assert_string_equal(jstr(r, "cwd"), WS);
    json_decref(r);
    r = call_ok(t, "POST", "/v1/shell/sessions", json_pack("{s:s}", "id", "s-create"));
    assert_true(jbool(r, "existed"));
    json_decref(r);
    /* Without an id, one is generated. */
    r = call_ok(t, "POST", "/v1/shell/sessions", json_object());
    const char *gen = jstr(r, "id");
    assert_true(is_hex(gen, 32));
    assert_false(jbool(r, "existed"));
    char *gen_id = strdup(gen);
    json_decref(r);
    json_t *list = call_ok(t, "GET", "/v1/shell/sessions", NULL);
    json_t *arr = json_object_get(list, "sessions");
    assert_int_equal(json_array_size(arr), 2);
    json_decref(list);
    session_delete(t, gen_id);
    session_delete(t, "s-create");
    free(gen_id);
    /* Bad bodies. */
    int status = 0;
    r = call(t, &status, "POST", "/v1/shell/sessions", json_pack("{s:s}", "id", "a/b"), CALL_MS);
    assert_int_equal(status, 400);
    check_error_shape(r, "bad id");
    json_decref(r);
    r = call(t, &status, "POST", "/v1/shell/sessions", json_pack("{s:s, s:i}", "id", "x", "y", 1),
             CALL_MS);
    assert_int_equal(status, 400);
    json_decref(r);
    r = call(t, &status, "POST", "/v1/shell/sessions", json_pack("{s:i}", "id", 5), CALL_MS);
    assert_int_equal(status, 400);
    json_decref(r);
}

static void test_session_state_persists(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-state");
    free(run_stdout(t, "s-state",
                    "mkdir -p " WS "/sub && cd " WS "/sub && export KEEP='a b' "
                    "&& LOCAL=1 && export GONE=x"));
    char *out = run_stdout(t, "s-state", "pwd; echo \"$KEEP|${LOCAL-unset}|$GONE\"");
    assert_string_equal(out, WS "/sub\na b|unset|x\n");
    free(out);
    free(run_stdout(t, "s-state", "unset GONE; cd /tmp"));
    out = run_stdout(t, "s-state", "pwd; echo \"${GONE-removed}|$KEEP\"");
    assert_string_equal(out, "/tmp\nremoved|a b\n");
    free(out);
    /* State survives a failing command and an explicit exit. */
    json_t *r = run_in(t, "s-state", "export AFTER=1; cd " WS "; exit 5");
    assert_int_equal(jint(r, "exit_code"), 5);
    assert_string_equal(jstr(r, "session_id"), "s-state");
    json_decref(r);
    out = run_stdout(t, "s-state", "pwd; echo $AFTER");
    assert_string_equal(out, WS "\n1\n");
    free(out);
    /* A request cwd applies to that command and becomes the session's. */
    r = exec_body(t, json_pack("{s:s, s:s, s:s}", "command", "pwd", "session_id", "s-state", "cwd",
                               "/mnt/user-data/outputs"));
    assert_string_equal(jstr(r, "stdout"), "/mnt/user-data/outputs\n");
    json_decref(r);
    /* Request env applies to one command only, unless the command exports it. */
    r = exec_body(t, json_pack("{s:s, s:s, s:{s:s}}", "command", "echo $ONCE", "session_id",
                               "s-state", "env", "ONCE", "1"));
    assert_string_equal(jstr(r, "stdout"), "1\n");
    json_decref(r);
    session_delete(t, "s-state");
}

/* What a command run as "grep PPid /proc/self/status" prints when the init
 * (PID 1 of the command's namespace) started it itself, with no shell between. */
#define PPID_OF_INIT "PPid:\t1\n"

/* Plain words in a session run without a shell, as one-shot ones do: in the
 * session's cwd, with its variables, leaving its state as it was. */
static void test_session_plain_command_direct(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-plain");
    free(run_stdout(t, "s-plain", "mkdir -p " WS "/pd && cd " WS "/pd && export PV='x y'"));
    char *out = run_stdout(t, "s-plain", "grep PPid /proc/self/status");
    assert_string_equal(out, PPID_OF_INIT);
    free(out);
    out = run_stdout(t, "s-plain", "/bin/pwd");
    assert_string_equal(out, WS "/pd\n");
    free(out);
    out = run_stdout(t, "s-plain", "printenv PV");
    assert_string_equal(out, "x y\n");
    free(out);
    /* A failing or missing program reports as under bash, and keeps the state. */
    json_t *r = run_in(t, "s-plain", "ls /no-such-dir");
    assert_int_equal(jint(r, "exit_code"), 2);
    json_decref(r);
    r = run_in(t, "s-plain", "no-such-program-here");
    assert_int_equal(jint(r, "exit_code"), 127);
    check_contains("missing program", jstr(r, "stderr"), "command not found");
    json_decref(r);
    out = run_stdout(t, "s-plain", "pwd; echo \"$PV\"");
    assert_string_equal(out, WS "/pd\nx y\n");
    free(out);
    /* Shell syntax and builtins still go through the session's shell. */
    out = run_stdout(t, "s-plain", "cd /tmp");
    free(out);
    out = run_stdout(t, "s-plain", "/bin/pwd");
    assert_string_equal(out, "/tmp\n");
    free(out);
    session_delete(t, "s-plain");
}

/* A plain-words command gets PWD, the cwd it runs in, as bash exports it. */
static void test_plain_command_sees_pwd(void **state) {
    api_ctx *t = *state;
    char *out = run_stdout(t, NULL, "printenv PWD");
    assert_string_equal(out, WS "\n");
    free(out);
    json_t *r = exec_body(t, json_pack("{s:s, s:s, s:{s:s}}", "command", "printenv PWD", "cwd",
                                       "/tmp", "env", "PWD", "/elsewhere"));
    assert_string_equal(jstr(r, "stdout"), "/tmp\n");
    json_decref(r);
    session_create(t, "s-pwd");
    free(run_stdout(t, "s-pwd", "cd /mnt/user-data/outputs"));
    out = run_stdout(t, "s-pwd", "printenv PWD");
    assert_string_equal(out, "/mnt/user-data/outputs\n");
    free(out);
    session_delete(t, "s-pwd");
}

/* A script without "#!" run as plain words is run by the shell, as bash
 * runs it, in a session as in a one-shot command. */
static void test_plain_command_script_without_interpreter(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-script");
    free(run_stdout(t, "s-script",
                    "cd " WS " && printf 'echo \"from script: $0 $1 $2\"\\n' > bare.sh && "
                    "chmod +x bare.sh"));
    char *out = run_stdout(t, "s-script", "./bare.sh one two");
    assert_string_equal(out, "from script: ./bare.sh one two\n");
    free(out);
    out = run_stdout(t, NULL, WS "/bare.sh x");
    assert_string_equal(out, "from script: " WS "/bare.sh x \n");
    free(out);
    session_delete(t, "s-script");
}

/* The shell of a session's command reports the state without starting any
 * other process: PIDs are handed out in order in the session's namespace, so
 * the next command's shell has the next one. */
static void test_session_state_without_subshell(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-pids");
    char *first = run_stdout(t, "s-pids", "echo $$");
    char *second = run_stdout(t, "s-pids", "echo $$");
    assert_int_equal(atol(second), atol(first) + 1);
    free(first);
    free(second);
    session_delete(t, "s-pids");
}

/* The state is reported whatever the command did to the shell's IFS and
 * options (nounset included). */
static void test_session_state_after_ifs_and_nounset(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-opts");
    free(run_stdout(t, "s-opts", "set -euo pipefail; IFS=,; cd /tmp; export OPT_KEPT='a,b c'"));
    char *out = run_stdout(t, "s-opts", "pwd; echo \"$OPT_KEPT\"");
    assert_string_equal(out, "/tmp\na,b c\n");
    free(out);
    session_delete(t, "s-opts");
}

/* A session command with a request cwd or variables runs under the shell,
 * which reports the cwd as the session's (and the variables as part of its
 * environment), exactly as for any other command. */
static void test_session_request_cwd_env_use_shell(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-req");
    json_t *r = exec_body(t, json_pack("{s:s, s:s, s:s}", "command", "grep PPid /proc/self/status",
                                       "session_id", "s-req", "cwd", "/mnt/user-data/outputs"));
    assert_string_equal(jstr(r, "status"), "completed");
    assert_string_not_equal(jstr(r, "stdout"), PPID_OF_INIT);
    json_decref(r);
    char *out = run_stdout(t, "s-req", "/bin/pwd");
    assert_string_equal(out, "/mnt/user-data/outputs\n");
    free(out);
    r = exec_body(t, json_pack("{s:s, s:s, s:{s:s}}", "command", "printenv ONCE", "session_id",
                               "s-req", "env", "ONCE", "1"));
    assert_string_equal(jstr(r, "stdout"), "1\n");
    json_decref(r);
    session_delete(t, "s-req");
}

static void test_sessions_isolated(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-one");
    session_create(t, "s-two");
    free(run_stdout(t, "s-one", "export ONLY_ONE=1; cd /tmp"));
    char *out = run_stdout(t, "s-two", "pwd; echo \"${ONLY_ONE-none}\"");
    assert_string_equal(out, WS "\nnone\n");
    free(out);
    out = run_stdout(t, "s-one", "pwd; echo $ONLY_ONE");
    assert_string_equal(out, "/tmp\n1\n");
    free(out);
    /* One-shot commands see neither. */
    out = run_stdout(t, NULL, "pwd; echo \"${ONLY_ONE-none}\"");
    assert_string_equal(out, WS "\nnone\n");
    free(out);
    session_delete(t, "s-one");
    session_delete(t, "s-two");
}

typedef struct exec_job {
    const char *socket_path;
    const char *session;
    const char *command;
    int status;
    json_t *reply;
} exec_job;

static void *exec_thread(void *arg) {
    exec_job *j = arg;
    json_t *body = json_pack("{s:s, s:s}", "command", j->command, "session_id", j->session);
    if (box_call(&j->reply, &j->status, j->socket_path, "POST", "/v1/shell/exec", body, CALL_MS) <
        0)
        j->status = -1;
    json_decref(body);
    return NULL;
}

/* A shell command that waits (at most BARRIER_NAPS naps) for the workspace
 * file name, then prints "<said>" if it is there. Caller frees. */
static char *barrier_command(const char *name, const char *said) {
    return strf("i=0; while [ ! -e " WS "/%s ] && [ $i -lt %d ]; do sleep 0.05; i=$((i+1)); "
                "done; test -e " WS "/%s && echo %s",
                name, BARRIER_NAPS, name, said);
}

/* Removes the workspace file name through the host, if it is there. */
static void host_unlink_ws(api_ctx *t, const char *name) {
    char path[sizeof t->ws_host + 32];
    snprintf(path, sizeof path, "%s/%s", t->ws_host, name);
    unlink(path);
}

/* Two sessions' commands run at the same time: each marks that it started
 * and waits for the other's mark. Run one after the other, the first would
 * give up waiting and print nothing. */
static void test_sessions_run_concurrently(void **state) {
    api_ctx *t = *state;
    static const char *const ids[2] = {"s-par1", "s-par2"};
    static const char *const marks[2] = {"par1-started", "par2-started"};
    exec_job jobs[2];
    char *commands[2];
    for (int i = 0; i < 2; i++) {
        session_create(t, ids[i]);
        host_unlink_ws(t, marks[i]);
        char *wait = barrier_command(marks[1 - i], "met");
        commands[i] = strf("touch " WS "/%s; %s", marks[i], wait);
        free(wait);
        jobs[i] = (exec_job){
            .socket_path = t->box.socket_path, .session = ids[i], .command = commands[i]};
    }
    pthread_t th[2];
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&th[i], NULL, exec_thread, &jobs[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 2; i++) {
        assert_int_equal(jobs[i].status, 200);
        assert_string_equal(jstr(jobs[i].reply, "stdout"), "met\n");
        json_decref(jobs[i].reply);
        free(commands[i]);
        host_unlink_ws(t, marks[i]);
        session_delete(t, ids[i]);
    }
}

static bool session_busy(api_ctx *t, const char *id) {
    json_t *list = call_ok(t, "GET", "/v1/shell/sessions", NULL);
    bool busy = false;
    size_t i;
    json_t *s;
    json_array_foreach(json_object_get(list, "sessions"), i, s) if (strcmp(jstr(s, "id"), id) == 0)
        busy = jbool(s, "busy");
    json_decref(list);
    return busy;
}

/* Waits until session id is busy; true when it became so. */
static bool session_becomes_busy(api_ctx *t, const char *id) {
    for (int64_t deadline = fawn_now_ms() + SETTLE_MS; !session_busy(t, id); usleep(5 * 1000))
        if (fawn_now_ms() > deadline)
            return false;
    return true;
}

/* A second command on a busy session is refused. The first one is held at a
 * barrier until the refusal came, so it cannot end before the second call. */
static void test_session_busy_conflict(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-busy");
    host_unlink_ws(t, "busy-release");
    char *command = barrier_command("busy-release", "done");
    exec_job job = {.socket_path = t->box.socket_path, .session = "s-busy", .command = command};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, exec_thread, &job), 0);
    bool busy = session_becomes_busy(t, "s-busy");
    int status = 0;
    json_t *r = call(t, &status, "POST", "/v1/shell/exec",
                     json_pack("{s:s, s:s}", "command", "echo second", "session_id", "s-busy"),
                     CALL_MS);
    char release[sizeof t->ws_host + 16];
    snprintf(release, sizeof release, "%s/busy-release", t->ws_host);
    int fd = open(release, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    pthread_join(th, NULL);
    free(command);
    assert_true(fd >= 0);
    close(fd);
    host_unlink_ws(t, "busy-release");
    assert_true(busy);
    assert_int_equal(status, 409);
    check_error_shape(r, "busy");
    json_decref(r);
    assert_int_equal(job.status, 200);
    assert_string_equal(jstr(job.reply, "stdout"), "done\n");
    json_decref(job.reply);
    assert_false(session_busy(t, "s-busy"));
    session_delete(t, "s-busy");
}

static void test_session_timeout_isolated(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-a");
    session_create(t, "s-b");
    char *pid = run_stdout(t, "s-b", "sleep 100 >/dev/null 2>&1 & echo $!");
    pid[strcspn(pid, "\n")] = '\0';
    free(run_stdout(t, "s-a", "mkdir -p " WS "/a-dir && cd " WS "/a-dir && export AV=7"));
    json_t *r = exec_body(t, json_pack("{s:s, s:s, s:i}", "command", "sleep 30", "session_id",
                                       "s-a", "timeout_s", 1));
    assert_string_equal(jstr(r, "status"), "timeout");
    assert_int_equal(jint(r, "exit_code"), 124);
    json_decref(r);
    char *cmd = strf("kill -0 %s && echo alive", pid);
    char *out = run_stdout(t, "s-b", cmd);
    assert_string_equal(out, "alive\n");
    free(out);
    free(cmd);
    out = run_stdout(t, "s-a", "pwd; echo $AV");
    assert_string_equal(out, WS "/a-dir\n7\n");
    free(out);
    free(pid);
    session_delete(t, "s-a");
    session_delete(t, "s-b");
}

static void test_session_kill(void **state) {
    api_ctx *t = *state;
    char marker[24];
    fawn_random_hex(marker, 6);
    session_create(t, "s-kill");
    char *cmd = strf("cd /tmp; export KV=1; (exec -a sleeper-%s sleep 100) >/dev/null 2>&1 & "
                     "echo started",
                     marker);
    char *out = run_stdout(t, "s-kill", cmd);
    free(cmd);
    assert_string_equal(out, "started\n");
    free(out);
    assert_true(host_procs_appear(marker, SETTLE_MS)); /* the subshell may not have exec'd yet */
    assert_int_equal(host_count_procs(marker), 1);
    out = run_stdout(t, "s-kill", "ps ax -o args=");
    check_contains("before kill", out, marker);
    free(out);
    json_t *r = call_ok(t, "POST", "/v1/shell/sessions/s-kill/kill", NULL);
    assert_true(jbool(r, "ok"));
    json_decref(r);
    assert_true(host_procs_gone(marker, SETTLE_MS));
    /* The session lives on, with its state, without its processes. */
    out = run_stdout(t, "s-kill", "pwd; echo $KV; ps ax -o args=");
    check_contains("after kill", out, "/tmp\n1\n");
    check_lacks("after kill", out, marker);
    free(out);
    int status = 0;
    r = call(t, &status, "POST", "/v1/shell/sessions/nope/kill", NULL, CALL_MS);
    assert_int_equal(status, 404);
    json_decref(r);
    session_delete(t, "s-kill");
}

/* A kill ends the command the session is running, at once. */
static void test_session_kill_running_command(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-kill-run");
    exec_job job = {.socket_path = t->box.socket_path,
                    .session = "s-kill-run",
                    .command = "echo begun; sleep 30"};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, exec_thread, &job), 0);
    bool busy = session_becomes_busy(t, "s-kill-run");
    json_decref(call_ok(t, "POST", "/v1/shell/sessions/s-kill-run/kill", NULL));
    pthread_join(th, NULL);
    assert_true(busy);
    /* "killed", not "completed": the kill ended it, not its 30 s. */
    assert_int_equal(job.status, 200);
    assert_string_equal(jstr(job.reply, "status"), "killed");
    assert_int_equal(jint(job.reply, "exit_code"), 137);
    json_decref(job.reply);
    char *out = run_stdout(t, "s-kill-run", "echo usable");
    assert_string_equal(out, "usable\n");
    free(out);
    session_delete(t, "s-kill-run");
}

/* A session's plain command is killed by a session kill, and the session
 * goes on with its state. */
static void test_session_kill_plain_command(void **state) {
    api_ctx *t = *state;
    session_create(t, "s-kill-plain");
    free(run_stdout(t, "s-kill-plain", "cd /tmp && export KP=1"));
    exec_job job = {
        .socket_path = t->box.socket_path, .session = "s-kill-plain", .command = "sleep 30"};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, exec_thread, &job), 0);
    bool busy = session_becomes_busy(t, "s-kill-plain");
    json_decref(call_ok(t, "POST", "/v1/shell/sessions/s-kill-plain/kill", NULL));
    pthread_join(th, NULL);
    assert_true(busy);
    assert_int_equal(job.status, 200);
    assert_string_equal(jstr(job.reply, "status"), "killed");
    assert_int_equal(jint(job.reply, "exit_code"), 137);
    json_decref(job.reply);
    char *out = run_stdout(t, "s-kill-plain", "pwd; echo $KP");
    assert_string_equal(out, "/tmp\n1\n");
    free(out);
    session_delete(t, "s-kill-plain");
}

static void test_session_delete(void **state) {
    api_ctx *t = *state;
    char marker[24];
    fawn_random_hex(marker, 6);
    session_create(t, "s-del");
    char *cmd = strf("(exec -a sleeper-%s sleep 100) >/dev/null 2>&1 & echo ok", marker);
    free(run_stdout(t, "s-del", cmd));
    free(cmd);
    assert_true(host_procs_appear(marker, SETTLE_MS));
    assert_int_equal(host_count_procs(marker), 1);
    session_delete(t, "s-del");
    assert_true(host_procs_gone(marker, SETTLE_MS));
    int status = 0;
    json_t *r = call(t, &status, "POST", "/v1/shell/exec",
                     json_pack("{s:s, s:s}", "command", "true", "session_id", "s-del"), CALL_MS);
    assert_int_equal(status, 404);
    check_error_shape(r, "deleted");
    json_decref(r);
    r = call(t, &status, "DELETE", "/v1/shell/sessions/s-del", NULL, CALL_MS);
    assert_int_equal(status, 404);
    json_decref(r);
    /* The id can be used again, as a fresh session. */
    session_create(t, "s-del");
    char *out = run_stdout(t, "s-del", "pwd");
    assert_string_equal(out, WS "\n");
    free(out);
    session_delete(t, "s-del");
}

static void test_session_limit(void **state) {
    api_ctx *t = *state;
    char id[16];
    for (int i = 0; i < MAX_SESSIONS; i++) {
        snprintf(id, sizeof id, "s-lim%d", i);
        session_create(t, id);
    }
    int status = 0;
    json_t *r = call(t, &status, "POST", "/v1/shell/sessions", json_pack("{s:s}", "id", "s-over"),
                     CALL_MS);
    assert_int_equal(status, 413);
    check_error_shape(r, "limit");
    json_decref(r);
    /* An existing id is still answered. */
    r = call_ok(t, "POST", "/v1/shell/sessions", json_pack("{s:s}", "id", "s-lim0"));
    assert_true(jbool(r, "existed"));
    json_decref(r);
    /* One-shot commands do not count against the limit. */
    free(run_stdout(t, NULL, "true"));
    session_delete(t, "s-lim0");
    session_create(t, "s-over");
    session_delete(t, "s-over");
    for (int i = 1; i < MAX_SESSIONS; i++) {
        snprintf(id, sizeof id, "s-lim%d", i);
        session_delete(t, id);
    }
}

/* ---- files through HTTP ---- */

static void test_files_round_trip(void **state) {
    api_ctx *t = *state;
    json_t *r = call_ok(
        t, "POST", "/v1/file/write",
        json_pack("{s:s, s:s}", "path", WS "/api/note.txt", "content", "line one\nline two\n"));
    assert_int_equal(jint(r, "bytes_written"), 18);
    json_decref(r);
    r = call_ok(t, "POST", "/v1/file/read", json_pack("{s:s}", "path", WS "/api/note.txt"));
    assert_string_equal(jstr(r, "content"), "line one\nline two\n");
    assert_int_equal(jint(r, "total_lines"), 2);
    json_decref(r);
    /* The command sees what the API wrote, and the API what the command wrote. */
    char *out = run_stdout(t, NULL,
                           "cat " WS "/api/note.txt; printf 'from cmd' > " WS "/api/cmd.txt");
    assert_string_equal(out, "line one\nline two\n");
    free(out);
    r = call_ok(t, "POST", "/v1/file/read", json_pack("{s:s}", "path", WS "/api/cmd.txt"));
    assert_string_equal(jstr(r, "content"), "from cmd");
    json_decref(r);
    r = call_ok(t, "POST", "/v1/file/list", json_pack("{s:s}", "path", WS "/api"));
    assert_int_equal(json_array_size(json_object_get(r, "entries")), 2);
    json_decref(r);
    /* Errors come as JSON with the documented statuses. */
    int status = 0;
    r = call(t, &status, "POST", "/v1/file/read", json_pack("{s:s}", "path", WS "/missing"),
             CALL_MS);
    assert_int_equal(status, 404);
    check_error_shape(r, "missing");
    json_decref(r);
    r = call(t, &status, "POST", "/v1/file/read", json_pack("{s:s}", "path", "/etc/passwd"),
             CALL_MS);
    assert_int_equal(status, 403);
    json_decref(r);
    r = call(t, &status, "POST", "/v1/file/write",
             json_pack("{s:s, s:s}", "path", WS "/../../etc/x", "content", "x"), CALL_MS);
    assert_int_equal(status, 400);
    json_decref(r);
}

static void test_files_upload_download(void **state) {
    api_ctx *t = *state;
    /* Binary content, with NUL and invalid UTF-8. */
    unsigned char data[3000];
    for (size_t i = 0; i < sizeof data; i++)
        data[i] = (unsigned char)(i * 7 + 3);
    raw_reply r;
    raw_request(&r, t, "POST", "/v1/file/upload?path=" WS "/up/blob.bin", data, sizeof data);
    if (r.status != 200)
        fail_msg("upload: %d %s", r.status, r.body);
    raw_reply_free(&r);
    /* Existing target without overwrite: 409; with it: replaced. */
    raw_request(&r, t, "POST", "/v1/file/upload?path=" WS "/up/blob.bin", "x", 1);
    assert_int_equal(r.status, 409);
    raw_reply_free(&r);
    raw_request(&r, t, "GET", "/v1/file/download?path=" WS "/up/blob.bin", "", 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, sizeof data);
    assert_memory_equal(r.body, data, sizeof data);
    raw_reply_free(&r);
    char *out = run_stdout(
        t, NULL, "wc -c < " WS "/up/blob.bin; od -An -tu1 -N3 " WS "/up/blob.bin | tr -s ' '");
    assert_string_equal(out, "3000\n 3 10 17\n");
    free(out);
    /* What a command writes downloads as is. */
    free(run_stdout(t, NULL, "printf 'cmd\\001\\377' > " WS "/up/from-cmd"));
    raw_request(&r, t, "GET", "/v1/file/download?path=" WS "/up/from-cmd", "", 0);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, 5);
    assert_memory_equal(r.body, "cmd\001\377", 5);
    raw_reply_free(&r);
    /* Percent-decoded once: %2e%2e is "..", which climbs; %252e is literal. */
    raw_request(&r, t, "GET", "/v1/file/download?path=" WS "/%2e%2e/%2e%2e/etc/passwd", "", 0);
    assert_true(r.status == 400 || r.status == 403);
    raw_reply_free(&r);
    raw_request(&r, t, "GET", "/v1/file/download?path=" WS "/%252e%252e", "", 0);
    assert_int_equal(r.status, 404);
    raw_reply_free(&r);
    raw_request(&r, t, "POST", "/v1/file/upload?path=/mnt/skills/x", "x", 1);
    assert_int_equal(r.status, 403);
    raw_reply_free(&r);
}

/* ---- a new start ---- */

static void test_restart_new_generation(void **state) {
    api_ctx *t = *state;
    char before[33];
    memcpy(before, t->box.generation, sizeof before);
    box_conn_close(&t->conn);
    assert_int_equal(local_box_stop(&t->cfg, USER_ID, THREAD_ID), 0);
    reap_box(t->box.pid);
    local_spec spec = {
        .cfg = &t->cfg, .user = USER_ID, .thread = THREAD_ID, .fawn_bin = getenv("FAWN_BIN")};
    if (local_box_ensure(&t->box, &spec) < 0)
        fail_msg("local_box_ensure: %s", fawn_errmsg());
    assert_true(t->box.started);
    box_conn_init(&t->conn, t->box.socket_path);
    json_t *d = call_ok(t, "GET", "/v1/sandbox", NULL);
    assert_true(is_hex(jstr(d, "generation"), 32));
    assert_string_not_equal(jstr(d, "generation"), before);
    assert_string_equal(jstr(d, "generation"), t->box.generation);
    json_decref(d);
    /* Files written before the restart are still there. */
    char *out = run_stdout(t, NULL, "cat " WS "/api/note.txt");
    assert_string_equal(out, "line one\nline two\n");
    free(out);
}

/* Commands (with their environment) over 32 KiB reach the init another way
 * than short ones; both run, one-shot and in a session. */
static void test_exec_long_command(void **state) {
    api_ctx *t = *state;
    size_t n = 40000;
    char *word = malloc(n + 1);
    assert_non_null(word);
    memset(word, 'x', n);
    word[n] = '\0';
    char *cmd = strf("echo %s | wc -c", word);
    free(word);
    session_create(t, "s-long");
    const char *where[] = {NULL, "s-long"};
    for (size_t i = 0; i < ARRAY_LEN(where); i++) {
        char *out = run_stdout(t, where[i], cmd);
        assert_string_equal(out, "40001\n");
        free(out);
    }
    free(cmd);
    session_delete(t, "s-long");
}

/* ---- a box's own end ---- */

/* The group's box and connection, while a test talks to a box of its own. */
typedef struct kept_box {
    local_box box;
    box_conn conn;
} kept_box;

/* Starts the box of thread (with idle_exit_s) in place of the group's one. */
static void lone_box_begin(api_ctx *t, kept_box *keep, const char *thread, uint32_t idle_exit_s) {
    keep->box = t->box;
    keep->conn = t->conn;
    local_spec spec = {.cfg = &t->cfg,
                       .user = USER_ID,
                       .thread = thread,
                       .idle_exit_s = idle_exit_s,
                       .fawn_bin = getenv("FAWN_BIN")};
    if (local_box_ensure(&t->box, &spec) < 0)
        fail_msg("local_box_ensure: %s", fawn_errmsg());
    assert_true(t->box.started && t->box.pid > 0);
    box_conn_init(&t->conn, t->box.socket_path);
}

/* Removes what is left of thread's box, and puts the group's one back. */
static void lone_box_end(api_ctx *t, kept_box *keep, const char *thread) {
    box_conn_close(&t->conn);
    int stopped = local_box_stop(&t->cfg, USER_ID, thread);
    reap_box(t->box.pid);
    t->box = keep->box;
    t->conn = keep->conn;
    assert_int_equal(stopped, 0);
}

/* Waits up to timeout_ms for a box this program started to exit. */
static bool box_exited(pid_t pid, int timeout_ms) {
    for (int64_t deadline = fawn_now_ms() + timeout_ms;; usleep(20 * 1000)) {
        pid_t r = waitpid(pid, NULL, WNOHANG);
        if (r == pid || (r < 0 && kill(pid, 0) < 0 && errno == ESRCH))
            return true;
        if (fawn_now_ms() > deadline)
            return false;
    }
}

/* Starts `sleep <n>` in the background of session id; returns its command
 * line (caller frees), which names it among the host's processes. */
static char *session_job(api_ctx *t, const char *id, int n) {
    session_create(t, id);
    char *job = strf("sleep %d", n);
    char *command = strf("%s >/dev/null 2>&1 &", job);
    free(run_stdout(t, id, command));
    free(command);
    assert_true(host_procs_appear(job, SETTLE_MS));
    return job;
}

/* A box nobody talks to has no manager: past its idle time it exits, and
 * what its sessions ran in the background ends with it. A request in
 * progress is talking: a command longer than the idle time completes. */
static void test_box_exits_when_nobody_talks_to_it(void **state) {
    api_ctx *t = *state;
    kept_box keep;
    lone_box_begin(t, &keep, "idle-thread", 5);
    char *job = session_job(t, "s-idle", (int)unique_number());
    char *out = run_stdout(t, NULL, "sleep 7; echo done");
    assert_string_equal(out, "done\n");
    free(out);
    box_conn_close(&t->conn);
    if (!box_exited(t->box.pid, 30000))
        fail_msg("a box with a session but no client did not exit past its 5 s idle time");
    if (!host_procs_gone(job, SETTLE_MS))
        fail_msg("%s outlived its box", job);
    free(job);
    lone_box_end(t, &keep, "idle-thread");
}

static int rm_tree(const char *path) { return nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

/* A box whose user-data the host deleted (its thread or the whole home is
 * gone) exits at once, idle time or not, and its sessions' jobs with it. */
static void test_box_exits_when_its_user_data_is_deleted(void **state) {
    api_ctx *t = *state;
    kept_box keep;
    lone_box_begin(t, &keep, "gone-thread", 0);
    char *job = session_job(t, "s-gone", (int)unique_number());
    char *thread_dir = strf("%s/users/%s/threads/gone-thread", t->home, USER_ID);
    assert_int_equal(rm_tree(thread_dir), 0);
    if (!box_exited(t->box.pid, 30000))
        fail_msg("a box whose user-data was deleted did not exit");
    if (!host_procs_gone(job, SETTLE_MS))
        fail_msg("%s outlived its box", job);
    free(thread_dir);
    free(job);
    lone_box_end(t, &keep, "gone-thread");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_describe, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_reply_shape, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_default_cwd_and_stdin, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_runs_under_init, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_env_and_cwd, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_long_command, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_missing_cwd_falls_back, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_exit_codes, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_killed_by_signal, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_background_does_not_hold_reply, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_background_dies_at_deadline, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_output_bounded, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_invalid_utf8, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_timeout, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_timeout_kills_whole_tree, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_validation, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_validation_numbers, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_validation_env, delete_all_sessions),
        cmocka_unit_test_teardown(test_exec_validation_session_and_cwd, delete_all_sessions),
        cmocka_unit_test_teardown(test_routes_and_methods, delete_all_sessions),
        cmocka_unit_test_teardown(test_json_body_cap, delete_all_sessions),
        cmocka_unit_test_teardown(test_malformed_http, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_create, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_state_persists, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_plain_command_direct, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_request_cwd_env_use_shell, delete_all_sessions),
        cmocka_unit_test_teardown(test_plain_command_sees_pwd, delete_all_sessions),
        cmocka_unit_test_teardown(test_plain_command_script_without_interpreter,
                                  delete_all_sessions),
        cmocka_unit_test_teardown(test_session_state_without_subshell, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_state_after_ifs_and_nounset, delete_all_sessions),
        cmocka_unit_test_teardown(test_sessions_isolated, delete_all_sessions),
        cmocka_unit_test_teardown(test_sessions_run_concurrently, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_busy_conflict, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_timeout_isolated, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_kill, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_kill_running_command, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_kill_plain_command, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_delete, delete_all_sessions),
        cmocka_unit_test_teardown(test_session_limit, delete_all_sessions),
        cmocka_unit_test_teardown(test_files_round_trip, delete_all_sessions),
        cmocka_unit_test_teardown(test_files_upload_download, delete_all_sessions),
        cmocka_unit_test_teardown(test_restart_new_generation, delete_all_sessions),
        cmocka_unit_test(test_box_exits_when_nobody_talks_to_it),
        cmocka_unit_test(test_box_exits_when_its_user_data_is_deleted),
    };
    return cmocka_run_group_tests_name("box_api", tests, group_setup, group_teardown);
}
