/* The remote provider with real `fawn box --listen` processes on loopback,
 * placed by tests/remote/loopback-provider.sh: start, health, box API calls
 * with the bearer token, presence states, destroy, listing; control planes
 * that fail in every way (always "unknown", never "absent"); cancellation;
 * and boxes (fake servers) that answer like an attacker would. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "config/config.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/manager.h"
#include "sandbox/remote.h"
#include "unit/test_store_open.h"

#define USER_ID "remote-user"
/* A box API call whose command ends at once. */
#define CALL_MS 15000
/* Longest wait for a process to go or a state to show: only a hang
 * reaches it, on a loaded host under ASan. */
#define SETTLE_MS 30000
/* Health checks in these tests wait this long for a box. */
#define HEALTH_MS 1000
/* A timeout only a hang reaches: an operation given it and ending with
 * another outcome did not wait it out. */
#define HANG_MS 300000

static char tmp[64], state_dir[128], script[PATH_MAX];
static char *create_argv[3], *status_argv[3], *destroy_argv[3], *list_argv[3];
static sbx_provider *prov;

/* What tests/remote/loopback-provider.sh reads from its environment, and the
 * sanitizers' settings for the boxes it starts. */
static char *loopback_passthrough[] = {"LOOPBACK_STATE_DIR", "LOOPBACK_CREATE_DELAY_S",
                                       "LOOPBACK_ENDPOINT",  "FAWN_BIN",
                                       "FAWN_HOME",          "ASAN_OPTIONS",
                                       "UBSAN_OPTIONS",      NULL};

/* The tests' own commands read MARKER (a file they write) from their environment. */
static char *marker_passthrough[] = {"MARKER", NULL};

static remote_provider_config loopback_config(uint32_t start_timeout_ms) {
    return (remote_provider_config){.create_argv = create_argv,
                                    .status_argv = status_argv,
                                    .destroy_argv = destroy_argv,
                                    .list_argv = list_argv,
                                    .command_timeout_ms = 20000,
                                    .start_timeout_ms = start_timeout_ms,
                                    .health_timeout_ms = HEALTH_MS,
                                    .env_passthrough = loopback_passthrough};
}

static int group_setup(void **state) {
    const char *src = getenv("FAWN_SOURCE_DIR");
    if (!getenv("FAWN_BIN")) {
        fprintf(stderr, "FAWN_BIN must name the fawn binary\n");
        return -1;
    }
    snprintf(script, sizeof script, "%s/tests/remote/loopback-provider.sh", src ? src : ".");
    snprintf(tmp, sizeof tmp, "/tmp/fawn-remote-XXXXXX");
    if (!mkdtemp(tmp))
        return -1;
    char home[128];
    snprintf(state_dir, sizeof state_dir, "%s/state", tmp);
    snprintf(home, sizeof home, "%s/home", tmp);
    if (mkdir(state_dir, 0700) < 0 || mkdir(home, 0700) < 0)
        return -1;
    setenv("LOOPBACK_STATE_DIR", state_dir, 1);
    setenv("FAWN_HOME", home, 1);
    char **argvs[] = {create_argv, status_argv, destroy_argv, list_argv};
    const char *ops[] = {"create", "status", "destroy", "list"};
    for (size_t i = 0; i < ARRAY_LEN(argvs); i++) {
        argvs[i][0] = script;
        argvs[i][1] = (char *)ops[i];
        argvs[i][2] = NULL;
    }
    remote_provider_config cfg = loopback_config(15000);
    return remote_provider_new(&prov, &cfg);
}

static int destroy_listed(void *ctx, const char *sandbox_id, const char *generation) {
    prov->destroy(prov->ctx, sandbox_id, "");
    return 0;
}

static int group_teardown(void **state) {
    prov->list(prov->ctx, destroy_listed, NULL);
    remote_provider_free(prov);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp);
    return system(cmd);
}

typedef struct fake_box fake_box;
static fake_box *fakes[4];
static void fake_stop(fake_box *fb);

/* Each test's environment changes and fake boxes end with it, even when it
 * fails. */
static int reset_env(void **state) {
    const char *names[] = {"LOOPBACK_CREATE_DELAY_S", "LOOPBACK_ENDPOINT", "FAWN_USER",
                           "FAWN_GENERATION", "MARKER"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++)
        unsetenv(names[i]);
    for (size_t i = 0; i < ARRAY_LEN(fakes); i++) {
        if (fakes[i])
            fake_stop(fakes[i]);
        free(fakes[i]);
        fakes[i] = NULL;
    }
    return 0;
}

/* ---- helpers ---- */

static void sandbox_id_of(char out[17], const char *thread) {
    assert_int_equal(paths_sandbox_id(out, USER_ID, thread), 0);
}

static bool hex_of_len(const char *s, size_t n) {
    return strlen(s) == n && strspn(s, "0123456789abcdef") == n;
}

static enum sbx_presence probe(sbx_provider *p, const char *sandbox_id, char *gen_out) {
    enum sbx_presence st = SBX_ABSENT;
    char gen[SBX_GENERATION_LEN + 1] = "x";
    assert_int_equal(p->probe(p->ctx, &st, gen, sandbox_id), 0);
    if (gen_out)
        strcpy(gen_out, gen);
    return st;
}

/* Probes until the state is want (or SETTLE_MS passed); returns the last. */
static enum sbx_presence probe_until(const char *sandbox_id, enum sbx_presence want) {
    enum sbx_presence st = SBX_UNKNOWN;
    for (int64_t end = fawn_now_ms() + SETTLE_MS; fawn_now_ms() < end; usleep(50000))
        if ((st = probe(prov, sandbox_id, NULL)) == want)
            break;
    return st;
}

/* The pid recorded in the sandbox's state file (the `fawn box` process). */
static pid_t outer_pid(const char *sandbox_id) {
    char *path = strf("%s/%s/pid", state_dir, sandbox_id);
    FILE *f = fopen(path, "r");
    free(path);
    assert_non_null(f);
    int pid = 0;
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    fclose(f);
    return pid;
}

/* The box itself: PID 1 of the sandbox, the child of the `fawn box` process. */
static pid_t box_pid(const char *sandbox_id) {
    pid_t outer = outer_pid(sandbox_id);
    char *path = strf("/proc/%d/task/%d/children", outer, outer);
    FILE *f = fopen(path, "r");
    free(path);
    assert_non_null(f);
    int pid = 0;
    assert_int_equal(fscanf(f, "%d", &pid), 1);
    fclose(f);
    return pid;
}

static bool process_gone(pid_t pid) {
    char *path = strf("/proc/%d/stat", pid), buf[512] = "";
    FILE *f = fopen(path, "r");
    free(path);
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *close_paren = strrchr(buf, ')');
    return !close_paren || close_paren[2] == 'Z';
}

static void wait_gone(pid_t pid) {
    for (int64_t end = fawn_now_ms() + SETTLE_MS; fawn_now_ms() < end && !process_gone(pid);)
        usleep(20000);
    assert_true(process_gone(pid));
}

/* `fawn box` processes of this test run (their command line names the
 * state directory). */
/* Whether every box has exited: a killed one may take a moment under load
 * (SETTLE_MS at most). */
static bool boxes_gone(void) { return host_procs_gone(state_dir, SETTLE_MS); }

typedef struct listing {
    char ids[8][17], gens[8][SBX_GENERATION_LEN + 1];
    size_t n;
} listing;

static int collect(void *ctx, const char *sandbox_id, const char *generation) {
    listing *l = ctx;
    assert_true(l->n < ARRAY_LEN(l->ids));
    strcpy(l->ids[l->n], sandbox_id);
    strcpy(l->gens[l->n++], generation);
    return 0;
}

static const char *listed_generation(const listing *l, const char *sandbox_id) {
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->ids[i], sandbox_id) == 0)
            return l->gens[i];
    return NULL;
}

static json_t *exec_body(const char *command) {
    json_t *b = json_object();
    json_object_set_new(b, "command", json_string(command));
    return b;
}

/* ---- a fake box: a loopback server that answers what a test says ---- */

/* Stopped and freed by reset_env, so that a failed test leaves none behind. */
struct fake_box {
    int fd;
    uint16_t port;
    pthread_t thread;
    atomic_bool stop;
    const char *reply; /* sent after the request head; NULL: never answers */
    size_t reply_len;
    bool flood;      /* after reply, zeros until the client goes */
    bool hold;       /* after reply, the connection stays open until the client goes */
    char head[4096]; /* the last request head */
    atomic_int connections;
    bool running;
};

static void fake_serve_one(fake_box *fb, int c) {
    size_t len = 0;
    char buf[sizeof fb->head];
    struct pollfd p = {.fd = c, .events = POLLIN};
    while (len < sizeof buf - 1 && !memmem(buf, len, "\r\n\r\n", 4) && poll(&p, 1, 2000) > 0) {
        ssize_t n = read(c, buf + len, sizeof buf - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    memcpy(fb->head, buf, len + 1);
    if (fb->reply)
        send(c, fb->reply, fb->reply_len, MSG_NOSIGNAL);
    static const char zeros[65536];
    while (fb->flood && !atomic_load(&fb->stop) && send(c, zeros, sizeof zeros, MSG_NOSIGNAL) > 0) {
    }
    while ((fb->hold || !fb->reply) && !atomic_load(&fb->stop) && poll(&p, 1, 50) >= 0) {
        char b;
        if (p.revents && read(c, &b, 1) <= 0)
            break;
    }
}

static void *fake_serve(void *arg) {
    fake_box *fb = arg;
    struct pollfd p = {.fd = fb->fd, .events = POLLIN};
    while (!atomic_load(&fb->stop)) {
        if (poll(&p, 1, 50) <= 0)
            continue;
        int c = accept4(fb->fd, NULL, NULL, SOCK_CLOEXEC);
        if (c < 0)
            continue;
        atomic_fetch_add(&fb->connections, 1);
        fake_serve_one(fb, c);
        close(c);
    }
    return NULL;
}

static fake_box *fake_start(const char *reply, size_t reply_len, bool flood, bool hold) {
    size_t slot = 0;
    while (slot < ARRAY_LEN(fakes) && fakes[slot])
        slot++;
    assert_true(slot < ARRAY_LEN(fakes));
    fake_box *fb = fakes[slot] = calloc(1, sizeof *fb);
    assert_non_null(fb);
    *fb = (fake_box){.reply = reply, .reply_len = reply_len, .flood = flood, .hold = hold};
    fb->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(fb->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(fb->fd, 16), 0);
    getsockname(fb->fd, (struct sockaddr *)&a, &alen);
    fb->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&fb->thread, NULL, fake_serve, fb), 0);
    fb->running = true;
    return fb;
}

/* Stops serving (what the fake saw stays readable until the test ends). */
static void fake_stop(fake_box *fb) {
    if (!fb->running)
        return;
    atomic_store(&fb->stop, true);
    pthread_join(fb->thread, NULL);
    close(fb->fd);
    fb->running = false;
}

/* Stops fb and frees it. */
static void fake_free(fake_box *fb) {
    fake_stop(fb);
    for (size_t i = 0; i < ARRAY_LEN(fakes); i++)
        if (fakes[i] == fb)
            fakes[i] = NULL;
    free(fb);
}

static char *fake_host_port(const fake_box *fb) { return strf("127.0.0.1:%u", fb->port); }

/* A reply with a JSON (or not) body of the right length (caller frees). */
static char *http_reply(const char *status_line, const char *body) {
    return strf("HTTP/1.1 %s\r\nContent-Length: %zu\r\n\r\n%s", status_line, strlen(body), body);
}

/* Sets cancel after ms, from another thread. */
typedef struct canceller {
    sbx_cancel *cancel;
    const atomic_int *after; /* NULL, or the count that must reach 1 first */
    int ms;
    pthread_t thread;
} canceller;

static void *cancel_later(void *arg) {
    canceller *c = arg;
    for (int waited = 0; c->after && atomic_load(c->after) < 1 && waited < HANG_MS; waited += 10)
        usleep(10000);
    usleep((useconds_t)c->ms * 1000);
    atomic_store(&c->cancel->cancelled, true);
    return NULL;
}

/* p's create of thread's box, cancelled ms after *after (when not NULL)
 * has reached 1; create's result. */
static int create_cancelled_after(sbx_provider *p, sbx_box *box, const char *thread,
                                  const atomic_int *after, int ms) {
    sbx_cancel cancel = {0};
    canceller c = {.cancel = &cancel, .after = after, .ms = ms};
    assert_int_equal(pthread_create(&c.thread, NULL, cancel_later, &c), 0);
    int r = p->create(p->ctx, box, USER_ID, thread, &cancel);
    pthread_join(c.thread, NULL);
    return r;
}

/* p's create of thread's box, which must succeed. */
static void create_ok(sbx_provider *p, sbx_box *box, const char *thread) {
    int r = p->create(p->ctx, box, USER_ID, thread, NULL);
    if (r != 0)
        fail_msg("create %s: %d (%s)", thread, r, fawn_errmsg());
}

/* ---- the loopback control plane ---- */

static void lifecycle_over_tcp_with_token(void **state) {
    char id[17], id2[17];
    sandbox_id_of(id, "life");
    sandbox_id_of(id2, "life2");
    sbx_box box, box2;
    create_ok(prov, &box, "life");
    assert_string_equal(box.sandbox_id, id);
    assert_true(hex_of_len(box.generation, SBX_GENERATION_LEN));
    check_contains("endpoint", box.endpoint, "tcp:127.0.0.1:");
    assert_int_equal(strlen(box.token), 48);
    assert_int_equal(prov->health(prov->ctx, &box), 0);

    /* The box API over TCP, with the token. */
    json_t *reply = NULL, *body = exec_body("echo hi");
    int status = 0;
    assert_int_equal(
        prov->call(prov->ctx, &reply, &status, &box, "POST", "/v1/shell/exec", body, CALL_MS), 0);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_object_get(reply, "stdout")), "hi\n");
    json_decref(reply);
    /* Without the right token the box refuses. */
    const char *host_port = box.endpoint + 4;
    assert_int_equal(box_call_tcp(&reply, &status, host_port,
                                  "wrong-token-wrong-token-wrong-token-0", "POST", "/v1/shell/exec",
                                  body, CALL_MS),
                     0);
    assert_int_equal(status, 401);
    assert_string_equal(json_string_value(json_object_get(reply, "error")), "unauthorized");
    json_decref(reply);
    assert_int_equal(
        box_call_tcp(&reply, &status, host_port, NULL, "POST", "/v1/shell/exec", body, CALL_MS), 0);
    assert_int_equal(status, 401);
    json_decref(reply);
    json_decref(body);

    char gen[SBX_GENERATION_LEN + 1];
    assert_int_equal(probe(prov, id, gen), SBX_RUNNING);
    assert_string_equal(gen, box.generation);
    /* Another generation at the endpoint is a definite no. */
    sbx_box other = box;
    memset(other.generation, 'f', SBX_GENERATION_LEN);
    assert_int_equal(prov->health(prov->ctx, &other), FAWN_ENOENT);

    create_ok(prov, &box2, "life2");
    assert_string_not_equal(box2.endpoint, box.endpoint);
    listing l = {0};
    assert_int_equal(prov->list(prov->ctx, collect, &l), 0);
    assert_non_null(listed_generation(&l, id));
    assert_string_equal(listed_generation(&l, id), box.generation);
    assert_string_equal(listed_generation(&l, id2), box2.generation);

    assert_int_equal(prov->destroy(prov->ctx, id, box.generation), 0);
    assert_int_equal(probe(prov, id, gen), SBX_ABSENT);
    assert_string_equal(gen, "");
    assert_int_equal(prov->health(prov->ctx, &box), FAWN_ENOENT);
    reply = NULL;
    assert_int_equal(
        prov->call(prov->ctx, &reply, &status, &box, "GET", "/v1/sandbox", NULL, CALL_MS),
        FAWN_EIO);
    assert_null(reply);
    l = (listing){0};
    assert_int_equal(prov->list(prov->ctx, collect, &l), 0);
    assert_null(listed_generation(&l, id));
    assert_non_null(listed_generation(&l, id2));
    /* Destroying what is gone is done at once. */
    assert_int_equal(prov->destroy(prov->ctx, id, ""), 0);
    assert_int_equal(prov->destroy(prov->ctx, id2, ""), 0);
    assert_int_equal(probe(prov, id2, NULL), SBX_ABSENT);
    assert_true(boxes_gone());
}

static void destroy_spares_another_generation(void **state) {
    char id[17];
    sandbox_id_of(id, "spare");
    sbx_box box;
    create_ok(prov, &box, "spare");
    char stale[SBX_GENERATION_LEN + 1];
    memset(stale, 'a', SBX_GENERATION_LEN);
    stale[SBX_GENERATION_LEN] = '\0';
    /* The generation named is not there: nothing to remove. */
    assert_int_equal(prov->destroy(prov->ctx, id, stale), 0);
    assert_int_equal(prov->health(prov->ctx, &box), 0);
    /* Bad ids never reach the control plane. */
    assert_int_equal(prov->destroy(prov->ctx, "../../etc", ""), FAWN_EINVAL);
    assert_int_equal(prov->destroy(prov->ctx, id, "XYZ"), FAWN_EINVAL);
    enum sbx_presence st;
    char gen[SBX_GENERATION_LEN + 1];
    assert_int_equal(prov->probe(prov->ctx, &st, gen, "0123456789ABCDEF"), FAWN_EINVAL);
    assert_int_equal(st, SBX_UNKNOWN);
    sbx_box b;
    assert_int_equal(prov->create(prov->ctx, &b, USER_ID, "../x", NULL), FAWN_EINVAL);
    assert_int_equal(prov->destroy(prov->ctx, id, box.generation), 0);
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
}

static void pending_while_the_box_does_not_answer(void **state) {
    char id[17];
    sandbox_id_of(id, "pending");
    sbx_box box;
    create_ok(prov, &box, "pending");
    pid_t pid = box_pid(id);
    assert_int_equal(kill(pid, SIGSTOP), 0);
    assert_int_equal(probe(prov, id, NULL), SBX_PENDING);
    /* A box that does not answer is unknown, never "gone". It stays stopped
     * until SIGCONT below: only the health check's own timeout ends it. */
    assert_int_equal(prov->health(prov->ctx, &box), FAWN_ETIMEDOUT);
    assert_int_equal(kill(pid, SIGCONT), 0);
    char gen[SBX_GENERATION_LEN + 1];
    assert_int_equal(probe_until(id, SBX_RUNNING), SBX_RUNNING);
    assert_int_equal(probe(prov, id, gen), SBX_RUNNING);
    assert_string_equal(gen, box.generation);
    assert_int_equal(prov->health(prov->ctx, &box), 0);
    assert_int_equal(prov->destroy(prov->ctx, id, box.generation), 0);
    wait_gone(pid);
}

static void stopped_when_the_box_died(void **state) {
    char id[17];
    sandbox_id_of(id, "stopped");
    sbx_box box;
    create_ok(prov, &box, "stopped");
    pid_t outer = outer_pid(id);
    assert_int_equal(kill(box_pid(id), SIGKILL), 0);
    wait_gone(outer);
    char gen[SBX_GENERATION_LEN + 1];
    assert_int_equal(probe(prov, id, gen), SBX_STOPPED);
    assert_string_equal(gen, box.generation);
    assert_int_equal(prov->health(prov->ctx, &box), FAWN_ENOENT);
    /* Leftovers are listed until destroyed. */
    listing l = {0};
    assert_int_equal(prov->list(prov->ctx, collect, &l), 0);
    assert_non_null(listed_generation(&l, id));
    assert_int_equal(prov->destroy(prov->ctx, id, box.generation), 0);
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
}

static void terminating_until_the_box_is_gone(void **state) {
    char id[17];
    sandbox_id_of(id, "terminating");
    sbx_box box;
    create_ok(prov, &box, "terminating");
    sbx_provider *impatient;
    remote_provider_config cfg = loopback_config(1000);
    assert_int_equal(remote_provider_new(&impatient, &cfg), 0);
    /* A stopped `fawn box` keeps its SIGTERM pending: it stays while asked to go. */
    pid_t outer = outer_pid(id);
    assert_int_equal(kill(outer, SIGSTOP), 0);
    assert_int_equal(impatient->destroy(impatient->ctx, id, box.generation), FAWN_ETIMEDOUT);
    check_contains("message", fawn_errmsg(), "terminating");
    assert_int_equal(probe(prov, id, NULL), SBX_TERMINATING);
    assert_int_equal(kill(outer, SIGCONT), 0);
    assert_int_equal(probe_until(id, SBX_ABSENT), SBX_ABSENT);
    assert_int_equal(impatient->destroy(impatient->ctx, id, box.generation), 0);
    wait_gone(outer);
    remote_provider_free(impatient);
}

static void cancel_during_the_create_command(void **state) {
    char id[17];
    sandbox_id_of(id, "cancel-cmd");
    /* The command and its deadline outlast any test: only the cancel ends it. */
    sbx_provider *patient;
    remote_provider_config cfg = loopback_config(15000);
    cfg.command_timeout_ms = HANG_MS;
    assert_int_equal(remote_provider_new(&patient, &cfg), 0);
    setenv("LOOPBACK_CREATE_DELAY_S", "300", 1);
    sbx_box box;
    assert_int_equal(create_cancelled_after(patient, &box, "cancel-cmd", NULL, 700),
                     FAWN_ECANCELED);
    remote_provider_free(patient);
    unsetenv("LOOPBACK_CREATE_DELAY_S");
    /* The box the command had started was removed. */
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
    assert_true(boxes_gone());
    /* Cancelled before anything starts: nothing runs at all. */
    sbx_cancel cancel = {.cancelled = true};
    assert_int_equal(prov->create(prov->ctx, &box, USER_ID, "cancel-cmd", &cancel), FAWN_ECANCELED);
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
}

static void cancel_while_waiting_for_the_box(void **state) {
    char id[17];
    sandbox_id_of(id, "cancel-wait");
    fake_box *fb = fake_start(NULL, 0, false, true); /* accepts, never answers */
    char *endpoint = strf("tcp:127.0.0.1:%u", fb->port);
    setenv("LOOPBACK_ENDPOINT", endpoint, 1);
    sbx_box box;
    /* Cancelled while the provider waits for the box it has reached. */
    assert_int_equal(create_cancelled_after(prov, &box, "cancel-wait", &fb->connections, 200),
                     FAWN_ECANCELED);
    assert_true(atomic_load(&fb->connections) >= 1);
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
    assert_true(boxes_gone());

    /* Without cancel, the start gives up after its timeout, and cleans up. */
    sbx_provider *impatient;
    remote_provider_config cfg = loopback_config(1000);
    assert_int_equal(remote_provider_new(&impatient, &cfg), 0);
    assert_int_equal(impatient->create(impatient->ctx, &box, USER_ID, "cancel-wait", NULL),
                     FAWN_ETIMEDOUT);
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
    assert_true(boxes_gone());
    remote_provider_free(impatient);
    unsetenv("LOOPBACK_ENDPOINT");
    free(endpoint);
    fake_stop(fb);
}

static void malicious_box_during_create(void **state) {
    char id[17];
    sandbox_id_of(id, "evil-start");
    static const char garbage[] = "HTTP/1.1 200 OK\r\nContent-Length: 7\r\n\r\n[1,2,3]";
    fake_box *fb = fake_start(garbage, sizeof garbage - 1, false, false);
    char *endpoint = strf("tcp:127.0.0.1:%u", fb->port);
    setenv("LOOPBACK_ENDPOINT", endpoint, 1);
    /* Refused at once, not waited out: the start's deadline is out of reach,
     * so the refusal can only come from the box's answer. */
    sbx_provider *patient;
    remote_provider_config cfg = loopback_config(HANG_MS);
    assert_int_equal(remote_provider_new(&patient, &cfg), 0);
    sbx_box box;
    assert_int_equal(patient->create(patient->ctx, &box, USER_ID, "evil-start", NULL), FAWN_EPROTO);
    assert_true(atomic_load(&fb->connections) >= 1);
    remote_provider_free(patient);
    unsetenv("LOOPBACK_ENDPOINT");
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
    assert_true(boxes_gone());
    free(endpoint);
    fake_stop(fb);
}

/* ---- control planes that fail ---- */

#define SH(script)                                                                                 \
    { "/bin/sh", "-c", script, NULL }

/* A provider whose four commands are argv (a short command timeout). */
static sbx_provider *broken_provider(char **argv) {
    remote_provider_config cfg = {.create_argv = argv,
                                  .status_argv = argv,
                                  .destroy_argv = argv,
                                  .list_argv = argv,
                                  .command_timeout_ms = 300,
                                  .start_timeout_ms = 300,
                                  .health_timeout_ms = HEALTH_MS};
    sbx_provider *p;
    assert_int_equal(remote_provider_new(&p, &cfg), 0);
    return p;
}

static void unreachable_control_plane_is_unknown(void **state) {
    char *cases[][4] = {
        {"/nonexistent/fawn-control-plane", NULL},
        {"/bin/false", NULL},
        {"/bin/echo", "garbage", NULL},
        SH("echo '{\"state\": \"absent\"'"),                  /* cut short */
        SH("echo '{\"state\": \"absent\"}'; exit 1"),         /* fine output, failed */
        SH("echo '{\"state\": \"absent\"}'; kill -9 $$"),     /* killed */
        SH("sleep 300"),                                      /* hangs */
        SH("echo '{\"state\": \"absent\"}'; exec sleep 300"), /* prints, then hangs */
        SH("echo '{\"state\": \"running\"}'"),                /* running without generation */
        SH("echo '{\"state\": \"gone\"}'"),                   /* no such state */
        SH("echo '{\"state\": \"absent\", \"extra\": 1}'"),   /* unknown field */
        SH("echo '{\"state\": \"absent\", \"state\": \"absent\"}'"), /* duplicate key */
        SH("echo '{\"state\": \"absent\"}{\"state\": \"absent\"}'"), /* two objects */
        SH("echo '[{\"state\": \"absent\"}]'"),
        SH("echo '{\"state\": 0}'"),
        SH("printf '%s' '{\"state\": \"absent\\u0000\"}'"), /* NUL escaped */
        SH("printf '{\"state\": \"absent\"}\\0'"),          /* NUL byte */
        SH("echo '{\"state\": \"stopped\", \"generation\": \"../../../etc/passwd\"}'"),
        SH("printf '{\"state\": \"absent\", \"endpoint\": \"'; head -c 70000 /dev/zero | tr '\\0' "
           "a; printf '\"}'"), /* oversized */
        SH(""),                /* prints nothing */
    };
    /* The hanging commands outlast any test: only the deadline ends them. */
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        sbx_provider *p = broken_provider(cases[i]);
        char gen[SBX_GENERATION_LEN + 1];
        enum sbx_presence st = probe(p, "0123456789abcdef", gen);
        if (st != SBX_UNKNOWN)
            fail_msg("case %zu (%s): probe says %d, not unknown", i,
                     cases[i][2] ? cases[i][2] : cases[i][0], st);
        assert_string_equal(gen, "");
        sbx_box box;
        assert_true(p->create(p->ctx, &box, USER_ID, "broken", NULL) < 0);
        assert_true(p->destroy(p->ctx, "0123456789abcdef", "") < 0);
        listing l = {0};
        assert_true(p->list(p->ctx, collect, &l) < 0);
        assert_int_equal(l.n, 0);
        remote_provider_free(p);
    }
}

static void a_command_past_its_deadline_goes_with_its_children(void **state) {
    char *marker = strf("sleep 97.%u", unique_number());
    char *text = strf("%s & %s & wait", marker, marker);
    char *argv[] = SH(text);
    sbx_provider *p = broken_provider(argv);
    assert_int_equal(probe(p, "0123456789abcdef", NULL), SBX_UNKNOWN);
    assert_true(host_procs_gone(marker, SETTLE_MS));
    remote_provider_free(p);
    free(text);
    free(marker);
}

static void background_children_do_not_hold_a_command(void **state) {
    /* The box a create starts lives on with the command's stdout. The child
     * outlasts the command's deadline: waiting for it would end in "unknown". */
    char *marker = strf("sleep 98.%u", unique_number());
    char *text = strf("echo '{\"state\": \"absent\"}'; %s & exit 0", marker);
    char *argv[] = SH(text);
    remote_provider_config cfg = {.create_argv = argv,
                                  .status_argv = argv,
                                  .destroy_argv = argv,
                                  .list_argv = argv,
                                  .command_timeout_ms = 60000,
                                  .start_timeout_ms = 300};
    sbx_provider *p;
    assert_int_equal(remote_provider_new(&p, &cfg), 0);
    assert_int_equal(probe(p, "0123456789abcdef", NULL), SBX_ABSENT);
    /* The command was done while its child still ran. */
    pid_t child = 0;
    assert_true(host_procs_appear(marker, SETTLE_MS));
    assert_int_equal(host_procs_with(marker, &child), 1);
    assert_int_equal(kill(child, SIGKILL), 0);
    remote_provider_free(p);
    free(text);
    free(marker);
}

static void commands_get_their_environment(void **state) {
    char marker[160];
    snprintf(marker, sizeof marker, "%s/destroyed", tmp);
    setenv("FAWN_USER", "inherited", 1);
    setenv("FAWN_GENERATION", "inherited", 1);
    setenv("MARKER", marker, 1);
    setenv("GITHUB_PAT", "ghp_secret", 1);
    /* status answers "stopped" with the sandbox id twice as generation, and
     * fails when inherited FAWN_* variables leak in; destroy records
     * FAWN_GENERATION, after which status says absent. Only MARKER is passed
     * through: create records whether the host's GITHUB_PAT reached it. */
    char *status[] = SH("[ -z \"${FAWN_USER+x}${FAWN_THREAD+x}${FAWN_GENERATION+x}\" ] || exit 9; "
                        "if [ -e \"$MARKER\" ]; then echo '{\"state\": \"absent\"}'; else "
                        "printf '{\"state\": \"stopped\", \"generation\": \"%s%s\"}' "
                        "\"$FAWN_SANDBOX_ID\" \"$FAWN_SANDBOX_ID\"; fi");
    char *destroy[] = SH("[ -z \"${FAWN_USER+x}${FAWN_THREAD+x}\" ] || exit 9; "
                         "printf %s-%s \"$FAWN_SANDBOX_ID\" \"$FAWN_GENERATION\" > \"$MARKER\"; "
                         "echo '{}'");
    char *create[] = SH("printf '%s %s %s %s %s' \"$FAWN_USER\" \"$FAWN_THREAD\" "
                        "\"$FAWN_SANDBOX_ID\" \"${GITHUB_PAT-unset}\" \"$FAWN_SKILLS_DIR\" > "
                        "\"$MARKER.create\"; "
                        "echo '{\"endpoint\": \"tcp:127.0.0.1:1\"}'");
    remote_provider_config cfg = {.create_argv = create,
                                  .status_argv = status,
                                  .destroy_argv = destroy,
                                  .list_argv = status,
                                  .command_timeout_ms = 5000,
                                  .start_timeout_ms = 2000,
                                  .env_passthrough = marker_passthrough,
                                  .home = tmp};
    sbx_provider *p;
    assert_int_equal(remote_provider_new(&p, &cfg), 0);
    const char *id = "0123456789abcdef";
    char gen[SBX_GENERATION_LEN + 1];
    assert_int_equal(probe(p, id, gen), SBX_STOPPED);
    assert_string_equal(gen, "0123456789abcdef0123456789abcdef");
    assert_int_equal(p->destroy(p->ctx, id, gen), 0);
    char *content = NULL;
    int fd = open(marker, O_RDONLY);
    assert_int_equal(fawn_read_all(&content, NULL, fd, 1024), 0);
    close(fd);
    assert_string_equal(content, "0123456789abcdef-0123456789abcdef0123456789abcdef");
    free(content);
    assert_int_equal(probe(p, id, NULL), SBX_ABSENT);

    /* create sees the user and thread, and the user's skills view (made
     * for it); its output lacks a token: refused. */
    unlink(marker);
    sbx_box box;
    char sid[17], *create_marker = strf("%s.create", marker), *expect;
    sandbox_id_of(sid, "env");
    assert_int_equal(p->create(p->ctx, &box, USER_ID, "env", NULL), FAWN_EPROTO);
    fd = open(create_marker, O_RDONLY);
    assert_int_equal(fawn_read_all(&content, NULL, fd, 1024), 0);
    close(fd);
    expect = strf("%s env %s unset %s/users/%s/skills-view", USER_ID, sid, tmp, USER_ID);
    assert_string_equal(content, expect);
    struct stat view;
    char *view_path = strf("%s/users/%s/skills-view", tmp, USER_ID);
    assert_int_equal(stat(view_path, &view), 0);
    assert_true(S_ISDIR(view.st_mode));
    free(view_path);
    free(content);
    free(expect);
    free(create_marker);
    unsetenv("FAWN_USER");
    unsetenv("FAWN_GENERATION");
    unsetenv("GITHUB_PAT");
    remote_provider_free(p);
}

static void create_output_is_checked_and_undone(void **state) {
    char marker[160];
    snprintf(marker, sizeof marker, "%s/undone", tmp);
    setenv("MARKER", marker, 1);
    char *status[] = SH("if [ -e \"$MARKER\" ]; then echo '{\"state\": \"absent\"}'; else "
                        "echo '{\"state\": \"pending\"}'; fi");
    char *destroy[] = SH("touch \"$MARKER\"; echo '{}'");
    const char *outputs[] = {
        "{\"endpoint\": \"tcp:127.0.0.1:1\", \"token\": \"a\\r\\nInjected: yes\"}",
        "{\"endpoint\": \"tcp:127.0.0.1:1\", \"token\": \"\"}",
        "{\"endpoint\": \"http://127.0.0.1:1\", \"token\": \"t\"}",
        "{\"endpoint\": \"tcp:\", \"token\": \"t\"}",
        "{\"endpoint\": \"tcp:localhost:1\", \"token\": \"t\"}",
        "{\"endpoint\": \"tcp:127.0.0.1:1\", \"token\": \"t\", \"generation\": \"ABC\"}",
        "{\"endpoint\": \"tcp:127.0.0.1:1\", \"token\": \"t\", \"user\": \"root\"}",
        "{\"endpoint\": 5, \"token\": \"t\"}",
    };
    for (size_t i = 0; i < ARRAY_LEN(outputs); i++) {
        char *script_text = strf("cat <<'EOF'\n%s\nEOF", outputs[i]);
        char *create[] = SH(script_text);
        remote_provider_config cfg = {.create_argv = create,
                                      .status_argv = status,
                                      .destroy_argv = destroy,
                                      .list_argv = status,
                                      .command_timeout_ms = 5000,
                                      .start_timeout_ms = 2000,
                                      .env_passthrough = marker_passthrough};
        sbx_provider *p;
        assert_int_equal(remote_provider_new(&p, &cfg), 0);
        unlink(marker);
        sbx_box box;
        int r = p->create(p->ctx, &box, USER_ID, "undo", NULL);
        if (r != FAWN_EPROTO && r != FAWN_EINVAL)
            fail_msg("output %zu: create gave %d (%s)", i, r, fawn_errmsg());
        /* The failed start was removed. */
        assert_int_equal(access(marker, F_OK), 0);
        remote_provider_free(p);
        free(script_text);
    }
}

static void create_waits_for_the_generation_it_was_told(void **state) {
    char *body = strf("{\"ready\": true, \"generation\": \"%032d\"}", 7);
    char *answer = http_reply("200 OK", body);
    fake_box *fb = fake_start(answer, strlen(answer), false, false);
    char *mine = strf("%032d", 7), *other = strf("%032d", 8);
    const char *told[] = {mine, other, ""};
    int want[] = {0, FAWN_ETIMEDOUT, 0};
    char *status[] = SH("echo '{\"state\": \"absent\"}'"), *destroy[] = SH("echo '{}'");
    for (size_t i = 0; i < ARRAY_LEN(told); i++) {
        char *text = strf("printf '{\"endpoint\": \"tcp:127.0.0.1:%u\", \"token\": \"t\"%s%s%s}'",
                          fb->port, told[i][0] ? ", \"generation\": \"" : "", told[i],
                          told[i][0] ? "\"" : "");
        char *create[] = SH(text);
        remote_provider_config cfg = {.create_argv = create,
                                      .status_argv = status,
                                      .destroy_argv = destroy,
                                      .list_argv = status,
                                      .command_timeout_ms = 5000,
                                      .start_timeout_ms = 1000};
        sbx_provider *p;
        assert_int_equal(remote_provider_new(&p, &cfg), 0);
        sbx_box box;
        int r = p->create(p->ctx, &box, USER_ID, "told", NULL);
        if (r != want[i])
            fail_msg("told '%s': create gave %d (%s)", told[i], r, fawn_errmsg());
        if (r == 0) {
            /* The box's own answer, whatever create said or left out. */
            assert_string_equal(box.generation, mine);
            assert_string_equal(box.token, "t");
        }
        remote_provider_free(p);
        free(text);
    }
    fake_stop(fb);
    check_contains("request", fb->head, "\r\nAuthorization: Bearer t\r\n");
    free(mine);
    free(other);
    free(body);
    free(answer);
}

static void provider_config_is_checked(void **state) {
    sbx_provider *p = NULL;
    char *empty[] = {NULL}, *blank[] = {"", NULL};
    remote_provider_config cfg = loopback_config(1000);
    cfg.command_timeout_ms = 0;
    assert_int_equal(remote_provider_new(&p, &cfg), FAWN_EINVAL);
    cfg = loopback_config(0);
    assert_int_equal(remote_provider_new(&p, &cfg), FAWN_EINVAL);
    cfg = loopback_config(1000);
    cfg.list_argv = NULL;
    assert_int_equal(remote_provider_new(&p, &cfg), FAWN_EINVAL);
    cfg.list_argv = empty;
    assert_int_equal(remote_provider_new(&p, &cfg), FAWN_EINVAL);
    cfg.list_argv = blank;
    assert_int_equal(remote_provider_new(&p, &cfg), FAWN_EINVAL);
    assert_null(p);
    /* The argv is copied: the caller's may go. */
    char *argv[] = {strdup("/bin/echo"), strdup("{\"state\": \"absent\"}"), NULL};
    cfg = loopback_config(1000);
    cfg.status_argv = argv;
    assert_int_equal(remote_provider_new(&p, &cfg), 0);
    free(argv[0]);
    free(argv[1]);
    assert_int_equal(probe(p, "0123456789abcdef", NULL), SBX_ABSENT);
    remote_provider_free(p);
    remote_provider_free(NULL);
}

/* ---- boxes that answer like an attacker ---- */

static void malicious_replies_are_refused(void **state) {
    char huge_head[20000];
    memset(huge_head, 'a', sizeof huge_head);
    memcpy(huge_head, "HTTP/1.1 200 OK\r\nX: ", 20);
    static const char nul_body[] = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\n{}\0x";
    char *not_json = http_reply("200 OK", "hello"), *array = http_reply("200 OK", "[]"),
         *nul_escaped = http_reply("200 OK", "{\"a\": \"\\u0000\"}");
    struct {
        const char *reply;
        size_t len;
        bool flood, hold;
        int want;
    } cases[] = {
        {not_json, 0, false, false, FAWN_EPROTO},
        {array, 0, false, false, FAWN_EPROTO},
        {nul_escaped, 0, false, false, FAWN_EPROTO},
        {nul_body, sizeof nul_body - 1, false, false, FAWN_EPROTO},
        {"HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\n{}", 0, false, false, FAWN_EPROTO},
        {"HTTP/1.1 200 OK\r\n\r\n{}", 0, false, false, FAWN_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}{}", 0, false, false, FAWN_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n{}", 0, false, false, FAWN_EPROTO},
        {"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 0, false,
         false, FAWN_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\n{}", 0, false, false, FAWN_EPROTO},
        {"", 0, false, false, FAWN_EPROTO}, /* closes at once */
        /* Limits, with the connection held open: only the limit can end them. */
        {huge_head, sizeof huge_head, false, true, FAWN_EPROTO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 999999999999\r\n\r\n", 0, true, true, FAWN_EPROTO},
        {NULL, 0, false, true, FAWN_ETIMEDOUT}, /* never answers */
    };
    const char *token = "0123456789abcdef0123456789abcdef";
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        size_t len = cases[i].len ? cases[i].len : cases[i].reply ? strlen(cases[i].reply) : 0;
        fake_box *fb = fake_start(cases[i].reply, len, cases[i].flood, cases[i].hold);
        char *hp = fake_host_port(fb);
        json_t *reply = (json_t *)1;
        /* A refusal must not wait for the timeout: it is out of reach. */
        int status = 0, timeout = cases[i].want == FAWN_ETIMEDOUT ? 2000 : HANG_MS;
        int r = box_call_tcp(&reply, &status, hp, token, "GET", "/v1/sandbox", NULL, timeout);
        if (r != cases[i].want)
            fail_msg("case %zu: %d (%s), wanted %d", i, r, fawn_errmsg(), cases[i].want);
        assert_null(reply);
        fake_free(fb);
        free(hp);
    }
    free(not_json);
    free(array);
    free(nul_escaped);
}

static void the_token_goes_in_one_header(void **state) {
    char *ok = http_reply("200 OK", "{\"ok\": true}");
    fake_box *fb = fake_start(ok, strlen(ok), false, false);
    char *hp = fake_host_port(fb);
    json_t *reply = NULL;
    int status = 0;
    const char *token = "0123456789abcdef0123456789abcdef";
    assert_int_equal(box_call_tcp(&reply, &status, hp, token, "GET", "/v1/sandbox", NULL, 3000), 0);
    assert_int_equal(status, 200);
    assert_true(json_is_true(json_object_get(reply, "ok")));
    json_decref(reply);
    check_contains("request", fb->head, "GET /v1/sandbox HTTP/1.1\r\n");
    check_contains("request", fb->head,
                   "\r\nAuthorization: Bearer 0123456789abcdef0123456789abcdef\r\n");
    /* Tokens that could split the header never leave. */
    const char *bad_tokens[] = {
        "a\r\nX-Injected: 1", "", "tok en", "t\x7f",
        ("0123456789012345678901234567890123456789012345678901234567890123"
         "0123456789012345678901234567890123456789012345678901234567890123")};
    int before = atomic_load(&fb->connections);
    for (size_t i = 0; i < ARRAY_LEN(bad_tokens); i++)
        assert_int_equal(
            box_call_tcp(&reply, &status, hp, bad_tokens[i], "GET", "/v1/sandbox", NULL, 3000),
            FAWN_EINVAL);
    assert_int_equal(atomic_load(&fb->connections), before);
    /* Endpoints: numeric IPv4:PORT or [IPv6]:PORT only. */
    const char *bad_endpoints[] = {
        "127.0.0.1",
        "127.0.0.1:",
        "127.0.0.1:0",
        "127.0.0.1:65536",
        "127.0.0.1:80x",
        "127.0.0.1:-80",
        "127.0.0.1:+80",
        "localhost:80",
        "::1:80",
        "[::1]",
        "[127.0.0.1]:80",
        ":80",
        "[]:80",
        " 127.0.0.1:80",
        "127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.127.0.0.1.1:80"};
    for (size_t i = 0; i < ARRAY_LEN(bad_endpoints); i++)
        if (box_call_tcp(&reply, &status, bad_endpoints[i], token, "GET", "/", NULL, 1000) !=
            FAWN_EINVAL)
            fail_msg("endpoint '%s' accepted", bad_endpoints[i]);
    free(hp);
    fake_stop(fb);
    /* Nothing listening: refused, which is a definite answer. */
    char *closed = strf("127.0.0.1:%u", fb->port);
    assert_int_equal(box_call_tcp(&reply, &status, closed, token, "GET", "/", NULL, 1000),
                     FAWN_ENOENT);
    free(closed);
    free(ok);
}

/* A one-shot IPv6 loopback server that answers {} (when ::1 can be bound). */
static void *answer_once(void *arg) {
    int fd = *(int *)arg, c = accept4(fd, NULL, NULL, SOCK_CLOEXEC);
    char buf[4096];
    struct pollfd p = {.fd = c, .events = POLLIN};
    if (c >= 0 && poll(&p, 1, 2000) > 0 && read(c, buf, sizeof buf) > 0) {
        static const char ok[] = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}";
        send(c, ok, sizeof ok - 1, MSG_NOSIGNAL);
    }
    if (c >= 0)
        close(c);
    return NULL;
}

static void ipv6_endpoints(void **state) {
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    socklen_t alen = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        if (fd >= 0)
            close(fd);
        skip(); /* no IPv6 loopback on this host */
    }
    assert_int_equal(listen(fd, 4), 0);
    getsockname(fd, (struct sockaddr *)&a, &alen);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, answer_once, &fd), 0);
    char *hp = strf("[::1]:%u", ntohs(a.sin6_port));
    json_t *reply = NULL;
    int status = 0;
    int r = box_call_tcp(&reply, &status, hp, "token", "GET", "/v1/sandbox", NULL, 3000);
    pthread_join(t, NULL);
    close(fd);
    assert_int_equal(r, 0);
    assert_int_equal(status, 200);
    json_decref(reply);
    /* Nothing listens there any more. */
    assert_int_equal(box_call_tcp(&reply, &status, hp, "token", "GET", "/", NULL, 1000),
                     FAWN_ENOENT);
    free(hp);
}

static void health_tells_dead_from_unknown(void **state) {
    char other[SBX_GENERATION_LEN + 1];
    memset(other, 'b', SBX_GENERATION_LEN);
    other[SBX_GENERATION_LEN] = '\0';
    char *body = strf("{\"ready\": true, \"generation\": \"%s\"}", other);
    char *another = http_reply("200 OK", body);
    free(body);
    body = strf("{\"ready\": true, \"generation\": \"%032d\"}", 0);
    char *mine = http_reply("200 OK", body);
    free(body);
    char *bad_gen = http_reply("200 OK", "{\"ready\": true, \"generation\": \"../../x\"}");
    char *not_ready = http_reply(
        "200 OK", "{\"ready\": false, \"generation\": \"00000000000000000000000000000000\"}");
    struct {
        const char *reply;
        int want;
    } cases[] = {
        {mine, 0},
        {another, FAWN_ENOENT},
        {bad_gen, FAWN_EPROTO},
        {not_ready, FAWN_EIO},
        {"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\n{}", FAWN_EPROTO},
        {"HTTP/1.1 503 Busy\r\nContent-Length: 2\r\n\r\n{}", FAWN_EIO},
        {"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello", FAWN_EPROTO},
        {NULL, FAWN_ETIMEDOUT},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        fake_box *fb = fake_start(cases[i].reply, cases[i].reply ? strlen(cases[i].reply) : 0,
                                  false, !cases[i].reply);
        sbx_box box = {.sandbox_id = "0123456789abcdef"};
        snprintf(box.endpoint, sizeof box.endpoint, "tcp:127.0.0.1:%u", fb->port);
        snprintf(box.token, sizeof box.token, "0123456789abcdef0123456789abcdef");
        snprintf(box.generation, sizeof box.generation, "%032d", 0);
        int r = prov->health(prov->ctx, &box);
        if (r != cases[i].want)
            fail_msg("case %zu: health %d (%s), wanted %d", i, r, fawn_errmsg(), cases[i].want);
        fake_free(fb);
        if (i == 0) /* and once the box is gone, the connection is refused */
            assert_int_equal(prov->health(prov->ctx, &box), FAWN_ENOENT);
    }
    sbx_box local = {.sandbox_id = "0123456789abcdef", .endpoint = "unix:/tmp/x.sock"};
    int r = prov->health(prov->ctx, &local);
    assert_true(r < 0 && r != FAWN_ENOENT);
    json_t *reply = NULL;
    int status;
    assert_int_equal(prov->call(prov->ctx, &reply, &status, &local, "GET", "/", NULL, 1000),
                     FAWN_EINVAL);
    free(another);
    free(mine);
    free(bad_gen);
    free(not_ready);
}

/* ---- through config.yaml and the manager ---- */

static int provider_from_yaml(sbx_provider **out, const char *yaml) {
    fawn_config cfg;
    int r = config_load_string(&cfg, yaml, strlen(yaml));
    if (r == 0)
        r = sbx_provider_open(out, &cfg, NULL);
    config_free(&cfg);
    return r;
}

static void config_chooses_the_provider(void **state) {
    char *yaml = strf("sandbox:\n  provider: remote\n  remote:\n"
                      "    create_command: [%s, create]\n    status_command: [%s, status]\n"
                      "    destroy_command: [%s, destroy]\n    list_command: [%s, list]\n"
                      "    command_timeout_s: 20\n    env_passthrough: [KUBECONFIG]\n",
                      script, script, script, script);
    sbx_provider *p = NULL;
    assert_int_equal(provider_from_yaml(&p, yaml), 0);
    assert_string_equal(p->name, "remote");
    sbx_provider_close(p);
    free(yaml);
    assert_int_equal(provider_from_yaml(&p, ""), 0);
    assert_string_equal(p->name, "local");
    sbx_provider_close(p);
    static const struct {
        const char *yaml, *needle;
    } bad[] = {
        {"sandbox:\n  provider: remote\n", "sandbox.remote: is required"},
        {"sandbox:\n  provider: docker\n", "must be one of local|remote"},
        {"sandbox:\n  provider: remote\n  remote:\n    create_command: [x]\n",
         "sandbox.remote.status_command: must be a list"},
        {"sandbox:\n  provider: remote\n  remote:\n    create_command: []\n",
         "sandbox.remote.create_command: must be a list of 1 to"},
        {"sandbox:\n  provider: remote\n  remote:\n    create_command: [a, '']\n",
         "sandbox.remote.create_command[1]: must be a non-empty word"},
        {"sandbox:\n  provider: remote\n  remote:\n    create_comand: [a]\n",
         "unknown key sandbox.remote.create_comand"},
        {"sandbox:\n  provider: remote\n  remote:\n    create_command: [a]\n"
         "    status_command: [a]\n    destroy_command: [a]\n    list_command: [a]\n"
         "    env_passthrough: [\"A=B\"]\n",
         "sandbox.remote.env_passthrough[0]: not a valid variable name"},
        {"sandbox:\n  provider: remote\n  remote:\n    create_command: [a]\n"
         "    status_command: [a]\n    destroy_command: [a]\n    list_command: [a]\n"
         "    start_timeout_s: 0\n",
         "sandbox.remote.start_timeout_s: must be an integer between 1 and"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int r = provider_from_yaml(&p, bad[i].yaml);
        assert_int_equal(r, FAWN_ECONFIG);
        check_contains("message", fawn_errmsg(), bad[i].needle);
    }
}

/* The manager drives remote placement through the same contract: a lease
 * runs commands over TCP, a release parks the box, a restarted manager
 * adopts it, and a destroy leaves nothing running. */
static void manager_over_remote_placement(void **state) {
    char *db = strf("%s/manager.db", tmp);
    store *st = NULL;
    authz_policy *policy = NULL;
    sbx_manager *m = NULL;
    sbx_manager_config mc = {.idle_timeout_s = 0, .call_timeout_ms = 5000};
    assert_int_equal(test_store_open(&st, db), 0);
    assert_int_equal(authz_policy_load(&policy, NULL), 0);
    assert_int_equal(sbx_manager_new(&m, &mc, prov, st, policy), 0);
    sbx_request req = {.who = {.user = USER_ID, .role = "user"},
                       .thread = "managed",
                       .kind = SBX_HOLD_EXECUTION,
                       .scope = "run1:lead"};
    sbx_lease *l = NULL;
    assert_int_equal(sbx_acquire(&l, m, &req), 0);
    check_contains("endpoint", l->box.endpoint, "tcp:127.0.0.1:");
    json_t *body = exec_body("echo over tcp"), *reply = NULL;
    json_object_set_new(body, "session_id", json_string(l->session));
    int status = 0;
    assert_int_equal(sbx_call(&reply, &status, l, "POST", "/v1/shell/exec", body, CALL_MS), 0);
    assert_string_equal(json_string_value(json_object_get(reply, "stdout")), "over tcp\n");
    json_decref(reply);
    json_decref(body);
    char generation[SBX_GENERATION_LEN + 1];
    strcpy(generation, l->box.generation);
    sbx_release(l);
    sbx_manager_free(m);

    assert_int_equal(sbx_manager_new(&m, &mc, prov, st, policy), 0);
    req.scope = NULL;
    assert_int_equal(sbx_acquire(&l, m, &req), 0);
    assert_string_equal(l->box.generation, generation); /* adopted, not started anew */
    sbx_release(l);
    enum sbx_destroy_outcome outcome;
    assert_int_equal(sbx_destroy(&outcome, m, USER_ID, "managed"), 0);
    assert_int_equal(outcome, SBX_DESTROYED);
    char id[17];
    sandbox_id_of(id, "managed");
    assert_int_equal(probe(prov, id, NULL), SBX_ABSENT);
    sbx_manager_free(m);
    authz_policy_free(policy);
    store_close(st);
    free(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(lifecycle_over_tcp_with_token, reset_env),
        cmocka_unit_test_teardown(config_chooses_the_provider, reset_env),
        cmocka_unit_test_teardown(manager_over_remote_placement, reset_env),
        cmocka_unit_test_teardown(destroy_spares_another_generation, reset_env),
        cmocka_unit_test_teardown(pending_while_the_box_does_not_answer, reset_env),
        cmocka_unit_test_teardown(stopped_when_the_box_died, reset_env),
        cmocka_unit_test_teardown(terminating_until_the_box_is_gone, reset_env),
        cmocka_unit_test_teardown(cancel_during_the_create_command, reset_env),
        cmocka_unit_test_teardown(cancel_while_waiting_for_the_box, reset_env),
        cmocka_unit_test_teardown(malicious_box_during_create, reset_env),
        cmocka_unit_test_teardown(unreachable_control_plane_is_unknown, reset_env),
        cmocka_unit_test_teardown(a_command_past_its_deadline_goes_with_its_children, reset_env),
        cmocka_unit_test_teardown(background_children_do_not_hold_a_command, reset_env),
        cmocka_unit_test_teardown(commands_get_their_environment, reset_env),
        cmocka_unit_test_teardown(create_output_is_checked_and_undone, reset_env),
        cmocka_unit_test_teardown(create_waits_for_the_generation_it_was_told, reset_env),
        cmocka_unit_test_teardown(provider_config_is_checked, reset_env),
        cmocka_unit_test_teardown(malicious_replies_are_refused, reset_env),
        cmocka_unit_test_teardown(the_token_goes_in_one_header, reset_env),
        cmocka_unit_test_teardown(ipv6_endpoints, reset_env),
        cmocka_unit_test_teardown(health_tells_dead_from_unknown, reset_env),
    };
    return cmocka_run_group_tests_name("remote", tests, group_setup, group_teardown);
}
