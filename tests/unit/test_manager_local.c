/* The sandbox manager over the real local provider: commands through a
 * lease, reuse from the warm pool, scope sessions, 50 concurrent
 * acquisitions on 10 threads, fencing, deferred destroy, and a manager
 * killed with SIGKILL whose successor adopts the healthy sandbox it left
 * (ending the shell sessions of the runs that died with it) and removes the
 * fenced one. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "config/config.h"
#include "sandbox/client.h"
#include "sandbox/manager.h"
#include "unit/test_store_open.h"

/* Budget of one command that should end at once. */
#define CALL_MS 15000
/* Concurrent acquirers and the threads they share. */
#define RACERS 50
#define RACE_THREADS 10

typedef struct fx {
    char home[64];
    fawn_config cfg;
    store *st;
    authz_policy *policy;
    sbx_provider *provider;
    sbx_manager *m;
} fx;

static void manager_start(fx *x) {
    sbx_manager_config mc = {.idle_timeout_s = 0, .replicas = 0, .call_timeout_ms = 5000};
    assert_int_equal(local_provider_new(&x->provider, &x->cfg, getenv("FAWN_BIN")), 0);
    int r = sbx_manager_new(&x->m, &mc, x->provider, x->st, x->policy);
    if (r < 0)
        fail_msg("manager: %s", fawn_errmsg());
}

static void manager_stop(fx *x) {
    sbx_manager_free(x->m);
    local_provider_free(x->provider);
    x->m = NULL;
    x->provider = NULL;
}

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-mgr-XXXXXX");
    if (!mkdtemp(x->home) || config_defaults(&x->cfg) < 0)
        return -1;
    free(x->cfg.home);
    x->cfg.home = strdup(x->home);
    char db[128];
    snprintf(db, sizeof db, "%s/fawn.db", x->home);
    if (test_store_open(&x->st, db) < 0 || authz_policy_load(&x->policy, NULL) < 0)
        return -1;
    manager_start(x);
    *state = x;
    return 0;
}

/* Destroys thread's sandbox (if any); false, said, when it could not. */
static bool destroyed(fx *x, const char *thread) {
    enum sbx_destroy_outcome o;
    if (sbx_destroy(&o, x->m, "u1", thread) == 0)
        return true;
    print_error("destroying the sandbox of %s: %s\n", thread, fawn_errmsg());
    return false;
}

/* Destroys every sandbox this test run may have started, then the rest.
 * A sandbox left behind fails the group. */
static int teardown(void **state) {
    fx *x = *state;
    bool clean = true;
    for (int i = 0; i < RACE_THREADS; i++) {
        char thread[16];
        snprintf(thread, sizeof thread, "race-%d", i);
        clean &= destroyed(x, thread);
    }
    static const char *const threads[] = {"t-exec", "t-fence", "t-defer",
                                          "t-kill", "t-keep",  "t-orphan"};
    for (size_t i = 0; i < ARRAY_LEN(threads); i++)
        clean &= destroyed(x, threads[i]);
    manager_stop(x);
    authz_policy_free(x->policy);
    store_close(x->st);
    config_free(&x->cfg);
    char *cmd = strf("rm -rf %s", x->home);
    int r = system(cmd);
    free(cmd);
    free(x);
    return clean ? r : -1;
}

static sbx_lease *acquire(fx *x, const char *thread, const char *scope) {
    sbx_request req = {.who = {.user = "u1", .role = "user"},
                       .thread = thread,
                       .kind = SBX_HOLD_EXECUTION,
                       .scope = scope};
    sbx_lease *l = NULL;
    int r = sbx_acquire(&l, x->m, &req);
    if (r < 0)
        fail_msg("acquire %s: %s", thread, fawn_errmsg());
    return l;
}

/* Runs command through the lease (in its session when it has one). */
static char *run(sbx_lease *l, const char *command) {
    json_t *body = json_pack("{s:s}", "command", command), *reply = NULL;
    if (l->session[0])
        json_object_set_new(body, "session_id", json_string(l->session));
    int status = 0;
    int r = sbx_call(&reply, &status, l, "POST", "/v1/shell/exec", body, CALL_MS);
    json_decref(body);
    if (r < 0 || status != 200)
        fail_msg("exec '%s': %d %s", command, status, r < 0 ? fawn_errmsg() : "");
    char *out = strdup(json_string_value(json_object_get(reply, "stdout")));
    json_decref(reply);
    return out;
}

/* Boxes of this home that answer on their socket. */
static int boxes_running(fx *x) {
    char *dir = strf("%s/run", x->home);
    DIR *d = opendir(dir);
    free(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        size_t len = strlen(e->d_name);
        if (len != 21 || strcmp(e->d_name + 16, ".sock") != 0)
            continue;
        char *path = strf("%s/run/%s", x->home, e->d_name);
        int fd = box_connect(path);
        free(path);
        if (fd >= 0) {
            n++;
            close(fd);
        }
    }
    if (d)
        closedir(d);
    return n;
}

static sbx_info find_info(fx *x, const char *thread) {
    sbx_info *list = NULL, found = {0};
    size_t n = 0;
    assert_int_equal(sbx_list(&list, &n, x->m), 0);
    for (size_t i = 0; i < n; i++)
        if (strcmp(list[i].thread, thread) == 0)
            found = list[i];
    free(list);
    return found;
}

static void commands_run_and_sandboxes_are_reused(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(x, "t-exec", NULL);
    char *out = run(l, "echo hello; id -u");
    assert_string_equal(out, "hello\n0\n");
    free(out);
    char generation[SBX_GENERATION_LEN + 1];
    memcpy(generation, l->box.generation, sizeof generation);
    assert_int_equal(find_info(x, "t-exec").state, SBX_STATE_ACTIVE);
    sbx_release(l);
    assert_int_equal(find_info(x, "t-exec").state, SBX_STATE_IDLE);
    /* The thread's next acquisition reclaims the parked box. */
    l = acquire(x, "t-exec", NULL);
    assert_string_equal(l->box.generation, generation);
    char sandbox_id[17];
    strcpy(sandbox_id, l->box.sandbox_id);
    sbx_release(l);
    /* With no gateway answering (its port held, not listening), `fawn
     * sandbox ls` shows this host's record. */
    int reserved;
    uint16_t port = loopback_reserved_port(&reserved);
    char *config = strf("%s/ls.yaml", x->home);
    char *yaml = strf("home: %s\nserver:\n  port: %u\n", x->home, port);
    FILE *f = fopen(config, "w");
    fputs(yaml, f);
    fclose(f);
    char *cmd = strf("%s sandbox ls --config %s 2>/dev/null", getenv("FAWN_BIN"), config);
    FILE *p = popen(cmd, "r");
    char listing[4096] = "";
    size_t n = fread(listing, 1, sizeof listing - 1, p);
    listing[n] = '\0';
    assert_int_equal(pclose(p), 0);
    close(reserved);
    check_contains("fawn sandbox ls", listing, "t-exec");
    char *row = strstr(listing, sandbox_id);
    assert_non_null(row);
    check_contains("its row", row, "running");
    free(cmd);
    free(yaml);
    free(config);
}

static void scopes_have_their_own_sessions(void **state) {
    fx *x = *state;
    sbx_lease *lead = acquire(x, "t-exec", "run1:lead");
    sbx_lease *again = acquire(x, "t-exec", "run1:lead");
    sbx_lease *sub = acquire(x, "t-exec", "run1:sub1");
    assert_string_equal(lead->session, again->session);
    assert_string_not_equal(lead->session, sub->session);
    free(run(lead, "cd /tmp && export WHO=lead"));
    free(run(sub, "cd /mnt/user-data/workspace && export WHO=sub"));
    char *a = run(again, "echo $WHO $PWD"), *b = run(sub, "echo $WHO $PWD");
    assert_string_equal(a, "lead /tmp\n");
    assert_string_equal(b, "sub /mnt/user-data/workspace\n");
    free(a);
    free(b);
    /* Releasing the sub-agent's scope ends its session only. */
    char sub_session[SBX_SESSION_ID_MAX + 1];
    strcpy(sub_session, sub->session);
    sbx_release(sub);
    json_t *reply = NULL;
    int status = 0;
    assert_int_equal(sbx_call(&reply, &status, lead, "GET", "/v1/shell/sessions", NULL, CALL_MS),
                     0);
    char *listing = json_dumps(reply, 0);
    check_contains("sessions", listing, lead->session);
    check_lacks("sessions", listing, sub_session);
    free(listing);
    json_decref(reply);
    sbx_release(again);
    sbx_release(lead);
}

typedef struct racer {
    fx *x;
    int index;
    char generation[SBX_GENERATION_LEN + 1];
    int result;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    char thread[16];
    snprintf(thread, sizeof thread, "race-%d", r->index % RACE_THREADS);
    sbx_request req = {
        .who = {.user = "u1", .role = "user"}, .thread = thread, .kind = SBX_HOLD_EXECUTION};
    sbx_lease *l = NULL;
    r->result = sbx_acquire(&l, r->x->m, &req);
    if (r->result == 0) {
        memcpy(r->generation, l->box.generation, sizeof r->generation);
        usleep(20000); /* hold it while others arrive */
        sbx_release(l);
    }
    return NULL;
}

/* 50 concurrent acquisitions on 10 threads start exactly 10 sandboxes. */
static void concurrent_acquisitions_share_one_sandbox_per_thread(void **state) {
    fx *x = *state;
    int before = boxes_running(x);
    racer racers[RACERS];
    pthread_t tids[RACERS];
    for (int i = 0; i < RACERS; i++) {
        racers[i] = (racer){.x = x, .index = i};
        assert_int_equal(pthread_create(&tids[i], NULL, race, &racers[i]), 0);
    }
    for (int i = 0; i < RACERS; i++)
        pthread_join(tids[i], NULL);
    for (int i = 0; i < RACERS; i++) {
        assert_int_equal(racers[i].result, 0);
        assert_string_equal(racers[i].generation, racers[i % RACE_THREADS].generation);
    }
    for (int i = 0; i < RACE_THREADS; i++)
        for (int j = i + 1; j < RACE_THREADS; j++)
            assert_string_not_equal(racers[i].generation, racers[j].generation);
    assert_int_equal(boxes_running(x) - before, RACE_THREADS);
}

/* A fenced sandbox is destroyed at its last release and never handed out:
 * the next acquisition gets a new generation, and the fence retires. */
static void fenced_sandbox_is_replaced(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(x, "t-fence", NULL);
    char old[SBX_GENERATION_LEN + 1];
    memcpy(old, l->box.generation, sizeof old);
    assert_int_equal(sbx_fence(l, false, "test: outcome unknown"), 0);
    assert_false(sbx_reusable(x->m, l->box.sandbox_id, old));
    char sandbox_id[17];
    strcpy(sandbox_id, l->box.sandbox_id);
    sbx_release(l);
    bool fenced = true;
    assert_int_equal(store_fence_exists(x->st, &fenced, "", sandbox_id, old), 0);
    assert_false(fenced); /* retired: the provider confirmed the box is gone */
    l = acquire(x, "t-fence", NULL);
    assert_string_not_equal(l->box.generation, old);
    char *out = run(l, "echo fresh");
    assert_string_equal(out, "fresh\n");
    free(out);
    sbx_release(l);
}

static void destroy_waits_for_holders(void **state) {
    fx *x = *state;
    sbx_lease *upload = acquire(x, "t-defer", NULL);
    enum sbx_destroy_outcome outcome;
    assert_int_equal(sbx_destroy(&outcome, x->m, "u1", "t-defer"), 0);
    assert_int_equal(outcome, SBX_DESTROY_DEFERRED);
    char *out = run(upload, "echo still here");
    assert_string_equal(out, "still here\n");
    free(out);
    assert_true(find_info(x, "t-defer").destroy_deferred);
    char *socket = strdup(upload->box.endpoint + strlen("unix:"));
    sbx_release(upload);
    int fd = box_connect(socket);
    assert_true(fd < 0); /* torn down at the last release */
    free(socket);
    assert_string_equal(find_info(x, "t-defer").thread, "");
}

/* A manager process is killed with SIGKILL while it holds one sandbox
 * healthy and parked and another fenced. Its successor adopts the first
 * (no new start) and removes the second. */
static void successor_adopts_and_cleans(void **state) {
    fx *x = *state;
    manager_stop(x);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        manager_start(x);
        sbx_lease *keep = acquire(x, "t-keep", NULL), *kill_me = acquire(x, "t-kill", NULL);
        if (sbx_fence(kill_me, false, "test: uncertain before the crash") < 0)
            _exit(1); /* nothing written: the parent's read fails */
        char line[2 * (SBX_GENERATION_LEN + 1)];
        snprintf(line, sizeof line, "%s %s", keep->box.generation, kill_me->box.generation);
        sbx_release(keep);
        (void)!write(pipefd[1], line, strlen(line));
        pause(); /* killed here, holding kill_me */
        _exit(0);
    }
    close(pipefd[1]);
    char line[2 * (SBX_GENERATION_LEN + 1)] = "";
    assert_true(read(pipefd[0], line, sizeof line - 1) > 0);
    close(pipefd[0]);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    char kept[SBX_GENERATION_LEN + 1], fenced_gen[SBX_GENERATION_LEN + 1];
    assert_int_equal(sscanf(line, "%32s %32s", kept, fenced_gen), 2);

    manager_start(x);
    sbx_info keep = find_info(x, "t-keep");
    assert_string_equal(keep.generation, kept);
    assert_int_equal(keep.state, SBX_STATE_IDLE);
    assert_string_equal(find_info(x, "t-kill").thread, ""); /* removed, not adopted */
    sbx_lease *l = acquire(x, "t-keep", NULL);
    assert_string_equal(l->box.generation, kept);
    sbx_release(l);
    l = acquire(x, "t-kill", NULL);
    assert_string_not_equal(l->box.generation, fenced_gen);
    bool fenced = true;
    assert_int_equal(store_fence_exists(x->st, &fenced, "", l->box.sandbox_id, fenced_gen), 0);
    assert_false(fenced);
    sbx_release(l);
}

/* A manager process is killed with SIGKILL while a run's scope holds a
 * shell session with a job in the background. Its successor adopts the
 * box and ends that session: the job dies with it. */
static void successor_ends_the_sessions_of_dead_runs(void **state) {
    fx *x = *state;
    char *seconds = strf("%u", unique_number()); /* names this test's job */
    char *job = strf("sleep %s", seconds);
    manager_stop(x);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        manager_start(x);
        sbx_lease *l = acquire(x, "t-orphan", "run1:lead");
        char *command = strf("sleep %s >/dev/null 2>&1 &", seconds);
        free(run(l, command));
        (void)!write(pipefd[1], l->box.generation, SBX_GENERATION_LEN);
        pause(); /* killed here, the run still holding its lease */
        _exit(0);
    }
    close(pipefd[1]);
    char generation[SBX_GENERATION_LEN + 1] = "";
    assert_int_equal(read(pipefd[0], generation, SBX_GENERATION_LEN), SBX_GENERATION_LEN);
    close(pipefd[0]);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
    assert_true(host_procs_appear(job, 30000));

    manager_start(x);
    assert_string_equal(find_info(x, "t-orphan").generation, generation);
    if (!host_procs_gone(job, 30000))
        fail_msg("the dead run's background job still runs after its box was adopted");
    sbx_lease *l = acquire(x, "t-orphan", "run2:lead");
    assert_string_equal(l->box.generation, generation);
    json_t *reply = NULL;
    int status = 0;
    assert_int_equal(sbx_call(&reply, &status, l, "GET", "/v1/shell/sessions", NULL, CALL_MS), 0);
    json_t *sessions = json_object_get(reply, "sessions");
    assert_int_equal(json_array_size(sessions), 1); /* run2's own */
    assert_string_equal(json_string_value(json_object_get(json_array_get(sessions, 0), "id")),
                        l->session);
    json_decref(reply);
    sbx_release(l);
    free(job);
    free(seconds);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(commands_run_and_sandboxes_are_reused),
        cmocka_unit_test(scopes_have_their_own_sessions),
        cmocka_unit_test(concurrent_acquisitions_share_one_sandbox_per_thread),
        cmocka_unit_test(fenced_sandbox_is_replaced),
        cmocka_unit_test(destroy_waits_for_holders),
        cmocka_unit_test(successor_adopts_and_cleans),
        cmocka_unit_test(successor_ends_the_sessions_of_dead_runs),
    };
    return cmocka_run_group_tests_name("manager_local", tests, setup, teardown);
}
