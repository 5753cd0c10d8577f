/* Two sandbox managers, two gateways ("gw-a", "gw-b"), on one store and
 * one home, with the real local provider: a sandbox is run by one gateway
 * at a time. Claims and renewals, release at stop, the start sweep that
 * leaves the other gateway's box alone, a release request that hands a
 * sandbox over (and is refused while it is in use), a dead gateway's
 * sandbox taken over with its generation replaced, and a fence one
 * gateway adds seen by the other at once.
 *
 * On SQLite, and on PostgreSQL when FAWN_TEST_PG holds a server's conninfo
 * (scripts/pg-test-server.sh run ...): each case then has a database of
 * its own. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"
#include "config/config.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/manager.h"
#include "unit/test_store_open.h"

/* Budget of one command that should end at once. */
#define CALL_MS 15000
/* Short leases, so that waiting one out stays quick. */
#define HEARTBEAT_MS 100
#define LEASE_MS 500
/* A ceiling on waiting for a heartbeat to be seen: it only catches hangs. */
#define SEEN_WITHIN_MS 20000

typedef struct gateway {
    const char *id;
    sbx_provider *provider;
    sbx_manager *m;
} gateway;

typedef struct fx {
    char home[64];
    char db[128]; /* the store's path (test_store_open) */
    fawn_config cfg;
    store *st;
    authz_policy *policy;
    gateway a, b;
} fx;

static void gateway_start(fx *x, gateway *g) {
    sbx_manager_config mc = {.call_timeout_ms = 5000,
                             .gateway_id = g->id,
                             .heartbeat_ms = HEARTBEAT_MS,
                             .lease_ms = LEASE_MS};
    assert_int_equal(local_provider_new(&g->provider, &x->cfg, getenv("FAWN_BIN")), 0);
    if (sbx_manager_new(&g->m, &mc, g->provider, x->st, x->policy) < 0)
        fail_msg("manager %s: %s", g->id, fawn_errmsg());
}

static void gateway_stop(gateway *g) {
    sbx_manager_free(g->m);
    local_provider_free(g->provider);
    g->m = NULL;
    g->provider = NULL;
}

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-owners-XXXXXX");
    if (!mkdtemp(x->home) || config_defaults(&x->cfg) < 0)
        return -1;
    free(x->cfg.home);
    x->cfg.home = strdup(x->home);
    snprintf(x->db, sizeof x->db, "%s/fawn.db", x->home);
    if (test_store_open(&x->st, x->db) < 0 || authz_policy_load(&x->policy, NULL) < 0)
        return -1;
    x->a.id = "gw-a";
    x->b.id = "gw-b";
    gateway_start(x, &x->a);
    gateway_start(x, &x->b);
    *state = x;
    return 0;
}

static const char *const threads[] = {"t-renew", "t-sweep", "t-hand",
                                      "t-dead",  "t-left",  "t-fence"};

/* Stops both gateways (their ownership given up), then removes every box
 * a case may have started through a third. A box left behind fails it. */
static int teardown(void **state) {
    fx *x = *state;
    if (x->a.m)
        gateway_stop(&x->a);
    if (x->b.m)
        gateway_stop(&x->b);
    gateway cleaner = {.id = "gw-cleanup"};
    gateway_start(x, &cleaner);
    bool clean = true;
    for (size_t i = 0; i < ARRAY_LEN(threads); i++) {
        enum sbx_destroy_outcome o;
        if (sbx_destroy(&o, cleaner.m, "u1", threads[i]) < 0) {
            print_error("destroying %s: %s\n", threads[i], fawn_errmsg());
            clean = false;
        }
    }
    gateway_stop(&cleaner);
    authz_policy_free(x->policy);
    store_close(x->st);
    config_free(&x->cfg);
    char *cmd = strf("rm -rf %s", x->home);
    int r = system(cmd);
    free(cmd);
    free(x);
    return clean ? r : -1;
}

static int try_acquire(sbx_lease **l, gateway *g, const char *thread) {
    sbx_request req = {
        .who = {.user = "u1", .role = "user"}, .thread = thread, .kind = SBX_HOLD_EXECUTION};
    return sbx_acquire(l, g->m, &req);
}

static sbx_lease *acquire(gateway *g, const char *thread) {
    sbx_lease *l = NULL;
    if (try_acquire(&l, g, thread) < 0)
        fail_msg("%s acquires %s: %s", g->id, thread, fawn_errmsg());
    return l;
}

static char *run(sbx_lease *l, const char *command) {
    json_t *body = json_pack("{s:s}", "command", command), *reply = NULL;
    int status = 0;
    int r = sbx_call(&reply, &status, l, "POST", "/v1/shell/exec", body, CALL_MS);
    json_decref(body);
    if (r < 0 || status != 200)
        fail_msg("exec '%s': %d %s", command, status, r < 0 ? fawn_errmsg() : "");
    char *out = strdup(json_string_value(json_object_get(reply, "stdout")));
    json_decref(reply);
    return out;
}

static void sandbox_id_of(char out[17], const char *thread) {
    assert_int_equal(paths_sandbox_id(out, "u1", thread), 0);
}

/* The gateway that owns thread's sandbox ("" nobody). */
static void owner_of(char out[STORE_GATEWAY_MAX + 1], fx *x, const char *thread) {
    char sid[17];
    sandbox_id_of(sid, thread);
    store_sandbox_owner o;
    int r = store_sandbox_owner_get(x->st, &o, sid);
    assert_true(r == 0 || r == FAWN_ENOENT);
    snprintf(out, STORE_GATEWAY_MAX + 1, "%s", o.gateway);
}

/* The generation a box answers with on thread's socket in the shared home,
 * "" when none answers. */
static void running_generation(char out[SBX_GENERATION_LEN + 1], fx *x, const char *thread) {
    char sid[17];
    sandbox_id_of(sid, thread);
    out[0] = '\0';
    char *socket = strf("%s/run/%s.sock", x->home, sid);
    json_t *reply = NULL;
    int status = 0;
    if (box_call(&reply, &status, socket, "GET", "/v1/sandbox", NULL, 5000) == 0 && status == 200)
        snprintf(out, SBX_GENERATION_LEN + 1, "%s",
                 or_empty(json_string_value(json_object_get(reply, "generation"))));
    json_decref(reply);
    free(socket);
}

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* A gateway's heartbeat renews its lease; its claim is another gateway's
 * HELD; stopping gives ownership up, and the next gateway replaces the box
 * it left rather than use it. */
static void leases_are_renewed_and_given_up_at_stop(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(&x->a, "t-renew");
    char old[SBX_GENERATION_LEN + 1], sid[17], owner[STORE_GATEWAY_MAX + 1];
    memcpy(old, l->box.generation, sizeof old);
    sandbox_id_of(sid, "t-renew");
    store_sandbox_owner o;
    assert_int_equal(store_sandbox_owner_get(x->st, &o, sid), 0);
    assert_string_equal(o.gateway, "gw-a");
    int64_t first_until = o.lease_until_ms;
    for (int waited = 0; o.lease_until_ms == first_until; waited += 20) {
        if (waited > SEEN_WITHIN_MS)
            fail_msg("gw-a never renewed its lease");
        sleep_ms(20);
        assert_int_equal(store_sandbox_owner_get(x->st, &o, sid), 0);
    }
    assert_true(o.lease_until_ms > first_until);
    enum store_owner_claim how;
    store_sandbox_owner was;
    store_owner_claim_req q = {.sandbox_id = sid,
                               .user = "u1",
                               .thread = "t-renew",
                               .gateway = "gw-b",
                               .now_ms = fawn_wall_ms(),
                               .lease_ms = LEASE_MS};
    assert_int_equal(store_sandbox_owner_claim(x->st, &how, &was, &q), 0);
    assert_int_equal(how, STORE_OWNER_HELD);
    sbx_release(l);
    gateway_stop(&x->a);
    owner_of(owner, x, "t-renew");
    assert_string_equal(owner, "");
    char running[SBX_GENERATION_LEN + 1];
    running_generation(running, x, "t-renew");
    assert_string_equal(running, old); /* parked, left running at stop */
    l = acquire(&x->b, "t-renew");
    assert_string_not_equal(l->box.generation, old);
    owner_of(owner, x, "t-renew");
    assert_string_equal(owner, "gw-b");
    char *out = run(l, "echo b");
    assert_string_equal(out, "b\n");
    free(out);
    sbx_release(l);
}

/* gw-b starting on gw-a's home while gw-a runs leaves gw-a's box alone:
 * gw-a reuses the very generation it parked. */
static void start_sweep_leaves_another_gateways_box(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(&x->a, "t-sweep");
    char generation[SBX_GENERATION_LEN + 1];
    memcpy(generation, l->box.generation, sizeof generation);
    sbx_release(l);
    gateway_stop(&x->b);
    gateway_start(x, &x->b);
    char running[SBX_GENERATION_LEN + 1];
    running_generation(running, x, "t-sweep");
    assert_string_equal(running, generation);
    l = acquire(&x->a, "t-sweep");
    assert_string_equal(l->box.generation, generation);
    sbx_release(l);
    sbx_info *list = NULL;
    size_t n = 0;
    assert_int_equal(sbx_list(&list, &n, x->b.m), 0);
    assert_int_equal(n, 0); /* gw-b adopted nothing of gw-a's */
    free(list);
}

/* While gw-a holds the sandbox, gw-b's acquisition waits and fails with
 * FAWN_EBUSY naming gw-a, and gw-a's box runs on. Once gw-a releases it,
 * gw-b's request makes gw-a let go: gw-b runs a new generation, gw-a's is
 * gone and gw-a no longer lists it. */
static void release_request_hands_a_sandbox_over(void **state) {
    fx *x = *state;
    sbx_lease *held = acquire(&x->a, "t-hand");
    char old[SBX_GENERATION_LEN + 1];
    memcpy(old, held->box.generation, sizeof old);
    sbx_lease *l = NULL;
    assert_int_equal(try_acquire(&l, &x->b, "t-hand"), FAWN_EBUSY);
    assert_null(l);
    check_contains("the refusal", fawn_errmsg(), "gw-a");
    char *out = run(held, "echo still a");
    assert_string_equal(out, "still a\n");
    free(out);
    sbx_release(held);
    l = acquire(&x->b, "t-hand");
    assert_string_not_equal(l->box.generation, old);
    char running[SBX_GENERATION_LEN + 1], owner[STORE_GATEWAY_MAX + 1];
    running_generation(running, x, "t-hand");
    assert_string_equal(running, l->box.generation);
    owner_of(owner, x, "t-hand");
    assert_string_equal(owner, "gw-b");
    sbx_info *list = NULL;
    size_t n = 0;
    assert_int_equal(sbx_list(&list, &n, x->a.m), 0);
    assert_int_equal(n, 0);
    free(list);
    sbx_release(l);
    /* And back: gw-b lets go of it the same way. */
    l = acquire(&x->a, "t-hand");
    owner_of(owner, x, "t-hand");
    assert_string_equal(owner, "gw-a");
    sbx_release(l);
}

/* Stops both gateways, then runs gw-a in a child process that acquires
 * thread's sandbox and is killed (SIGKILL) holding it; old is the
 * generation it ran. */
static void gw_a_dies_holding(fx *x, const char *thread, char old[SBX_GENERATION_LEN + 1]) {
    gateway_stop(&x->a);
    gateway_stop(&x->b);
    int pipefd[2];
    assert_int_equal(pipe(pipefd), 0);
    pid_t child = fork();
    if (child == 0) {
        store *own = NULL;
        if (test_store_open(&own, x->db) < 0)
            _exit(1);
        x->st = own;
        gateway_start(x, &x->a);
        sbx_lease *l = acquire(&x->a, thread);
        (void)!write(pipefd[1], l->box.generation, SBX_GENERATION_LEN);
        pause(); /* killed here, holding its lease */
        _exit(0);
    }
    close(pipefd[1]);
    memset(old, 0, SBX_GENERATION_LEN + 1);
    assert_int_equal(read(pipefd[0], old, SBX_GENERATION_LEN), SBX_GENERATION_LEN);
    close(pipefd[0]);
    kill(child, SIGKILL);
    waitpid(child, NULL, 0);
}

/* gw-a dies (SIGKILL) holding a sandbox; gw-b's acquisition waits out the
 * lease, fences the dead gateway's generation and runs a new one: the old
 * box is removed, never used by two gateways. */
static void dead_gateways_sandbox_is_taken_over(void **state) {
    fx *x = *state;
    char old[SBX_GENERATION_LEN + 1];
    gw_a_dies_holding(x, "t-dead", old);
    gateway_start(x, &x->b);
    sbx_lease *l = acquire(&x->b, "t-dead");
    assert_string_not_equal(l->box.generation, old);
    char running[SBX_GENERATION_LEN + 1], owner[STORE_GATEWAY_MAX + 1], sid[17];
    running_generation(running, x, "t-dead");
    assert_string_equal(running, l->box.generation);
    owner_of(owner, x, "t-dead");
    assert_string_equal(owner, "gw-b");
    sandbox_id_of(sid, "t-dead");
    bool fenced = true;
    assert_int_equal(store_fence_exists(x->st, &fenced, "", sid, old), 0);
    assert_false(fenced); /* retired once the dead gateway's box was confirmed gone */
    char *out = run(l, "echo survivor");
    assert_string_equal(out, "survivor\n");
    free(out);
    sbx_release(l);
    gateway_start(x, &x->a);
}

/* gw-b starts while the lease of gw-a, just killed, may still be live: the
 * sweep leaves its box alone then, and gw-b's heartbeat removes it once the
 * lease has run out, without anyone needing the sandbox. */
static void dead_gateways_box_is_removed_once_its_lease_runs_out(void **state) {
    fx *x = *state;
    char old[SBX_GENERATION_LEN + 1], running[SBX_GENERATION_LEN + 1];
    gw_a_dies_holding(x, "t-left", old);
    gateway_start(x, &x->b);
    running_generation(running, x, "t-left");
    for (int waited = 0; strcmp(running, old) == 0; waited += 20) {
        if (waited > SEEN_WITHIN_MS)
            fail_msg("the dead gateway's box still runs");
        sleep_ms(20);
        running_generation(running, x, "t-left");
    }
    assert_string_equal(running, "");
    char owner[STORE_GATEWAY_MAX + 1];
    owner_of(owner, x, "t-left");
    for (int waited = 0; owner[0]; waited += 20) { /* gw-b let it go once the box was gone */
        if (waited > SEEN_WITHIN_MS)
            fail_msg("the sandbox stays %s's", owner);
        sleep_ms(20);
        owner_of(owner, x, "t-left");
    }
    gateway_start(x, &x->a);
}

/* A fence gw-b adds is seen by gw-a at once, not after a restart: the
 * broker's check on a held generation fails, and gw-a's next acquisition
 * replaces the fenced box. */
static void fence_added_by_one_gateway_is_seen_by_the_other(void **state) {
    fx *x = *state;
    sbx_lease *l = acquire(&x->a, "t-fence");
    char old[SBX_GENERATION_LEN + 1], sid[17];
    memcpy(old, l->box.generation, sizeof old);
    memcpy(sid, l->box.sandbox_id, sizeof sid);
    sbx_holding h;
    assert_int_equal(sbx_holding_find(&h, x->a.m, sid, old), 0);
    assert_true(sbx_reusable(x->a.m, sid, old));
    assert_int_equal(sbx_fence_generation(x->b.m, sid, old, "test: fenced by gw-b"), 0);
    assert_false(sbx_reusable(x->a.m, sid, old));
    assert_int_equal(sbx_holding_find(&h, x->a.m, sid, old), FAWN_ENOENT);
    sbx_release(l); /* the last holder of a fenced generation tears it down */
    l = acquire(&x->a, "t-fence");
    assert_string_not_equal(l->box.generation, old);
    bool fenced = true;
    assert_int_equal(store_fence_exists(x->st, &fenced, "", sid, old), 0);
    assert_false(fenced); /* retired once the old box was confirmed gone */
    sbx_release(l);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(leases_are_renewed_and_given_up_at_stop, setup, teardown),
        cmocka_unit_test_setup_teardown(start_sweep_leaves_another_gateways_box, setup, teardown),
        cmocka_unit_test_setup_teardown(release_request_hands_a_sandbox_over, setup, teardown),
        cmocka_unit_test_setup_teardown(dead_gateways_sandbox_is_taken_over, setup, teardown),
        cmocka_unit_test_setup_teardown(dead_gateways_box_is_removed_once_its_lease_runs_out, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(fence_added_by_one_gateway_is_seen_by_the_other, setup,
                                        teardown),
    };
    return cmocka_run_group_tests_name(test_pg_server() ? "manager_owners_pg" : "manager_owners",
                                       tests, NULL, NULL);
}
