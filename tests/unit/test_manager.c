/* The sandbox manager against a fault-injecting provider: the sandbox:execute
 * gate, leases and holders, per-thread serialization, cancellation, the warm
 * pool (idle timeout, replicas cap), generations, health on reuse,
 * quarantine fences (persistent, retired only on confirmed absence), scoped
 * shell sessions, and reconciliation after a restart. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "authz/authz.h"
#include "base/base.h"
#include "sandbox/manager.h"
#include "store/store.h"
#include "support.h"
#include "tools/tools.h"
#include "unit/fake_provider.h"
#include "unit/test_store_open.h"

#define SANDBOX_DENIED "Sandbox execution is not permitted for your role"

/* Roles: admin and user may execute; restricted may not. */
#define POLICY_ROLES                                                                               \
    "\"default_role\": \"user\", \"roles\": {\"admin\": {}, \"user\": {},"                         \
    " \"restricted\": {\"sandbox\": {\"allow\": false}}}"
#define POLICY_ENABLED "{\"enabled\": true, \"fail_closed\": true, " POLICY_ROLES "}"
#define POLICY_FAIL_OPEN "{\"enabled\": true, \"fail_closed\": false, " POLICY_ROLES "}"
#define POLICY_DISABLED "{\"enabled\": false, \"fail_closed\": true, " POLICY_ROLES "}"

/* Leases a test may hold at once (teardown releases what a failed test left). */
#define FX_LEASES_MAX 64
/* Acquisitions and threads of the concurrency test. */
#define CONCURRENT_ACQUIRERS 50
#define CONCURRENT_THREADS 10
/* A create delay only a hang outlasts: a create given it ends early only
 * when something ends it. */
#define SLOW_CREATE_MS 60000
/* Ceiling of a wait for what the manager does on its own: only a hang
 * reaches it. */
#define SETTLE_MS 30000

typedef struct fx {
    char dir[64];
    char path[128];
    store *st;
    fake_provider *fp;
    authz_policy *pol;
    sbx_manager *m;
    sbx_manager_config cfg;
    sbx_lease *held[FX_LEASES_MAX];
} fx;

/* ---- helpers ---- */

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

/* Polls cond every 10 ms for up to ms milliseconds; its last value. */
#define WAIT_FOR(cond, ms)                                                                         \
    ({                                                                                             \
        int64_t _deadline = fawn_now_ms() + (ms);                                                  \
        bool _ok;                                                                                  \
        while (!(_ok = (cond)) && fawn_now_ms() < _deadline)                                       \
            sleep_ms(10);                                                                          \
        _ok;                                                                                       \
    })

static authz_policy *policy_from(const char *text) {
    json_error_t jerr;
    json_t *j = json_loads(text, 0, &jerr);
    if (!j)
        fail_msg("policy JSON does not parse (%s): %s", jerr.text, text);
    authz_policy *p = NULL;
    int r = authz_policy_load(&p, j);
    json_decref(j);
    if (r != 0)
        fail_msg("policy does not load (%d): %s", r, fawn_errmsg());
    return p;
}

static void hold(fx *x, sbx_lease *l) {
    for (size_t i = 0; i < FX_LEASES_MAX; i++)
        if (!x->held[i]) {
            x->held[i] = l;
            return;
        }
    fail_msg("test holds too many leases");
}

static void unhold(fx *x, sbx_lease *l) {
    for (size_t i = 0; i < FX_LEASES_MAX; i++)
        if (x->held[i] == l)
            x->held[i] = NULL;
}

static void give_back(fx *x, sbx_lease *l) {
    unhold(x, l);
    sbx_release(l);
}

static void manager_start(fx *x) {
    int r = sbx_manager_new(&x->m, &x->cfg, fake_provider_iface(x->fp), x->st, x->pol);
    if (r != 0)
        fail_msg("sbx_manager_new: %d %s", r, fawn_errmsg());
}

static void manager_stop(fx *x) {
    for (size_t i = 0; i < FX_LEASES_MAX; i++)
        if (x->held[i])
            give_back(x, x->held[i]);
    sbx_manager_free(x->m);
    x->m = NULL;
}

static void reconfigure(fx *x, uint32_t idle_timeout_s, uint32_t replicas) {
    manager_stop(x);
    x->cfg.idle_timeout_s = idle_timeout_s;
    x->cfg.replicas = replicas;
    manager_start(x);
}

static void use_policy(fx *x, const char *text) {
    manager_stop(x);
    authz_policy_free(x->pol);
    x->pol = policy_from(text);
    manager_start(x);
}

static int acquire_as(fx *x, sbx_lease **out, const char *user, const char *role,
                      const char *thread, const char *scope, enum sbx_holder kind,
                      sbx_decision *decision, const sbx_cancel *cancel) {
    sbx_request req = {.who = {.user = user, .role = role},
                       .thread = thread,
                       .kind = kind,
                       .scope = scope,
                       .decision = decision,
                       .cancel = cancel};
    *out = NULL;
    int r = sbx_acquire(out, x->m, &req);
    if (r == 0) {
        assert_non_null(*out);
        hold(x, *out);
    }
    return r;
}

/* alice (role user) takes thread's sandbox, for kind and scope. */
static sbx_lease *take_kind(fx *x, const char *thread, const char *scope, enum sbx_holder kind) {
    sbx_lease *l = NULL;
    int r = acquire_as(x, &l, "alice", "user", thread, scope, kind, NULL, NULL);
    if (r != 0)
        fail_msg("acquire %s (scope %s): %d %s", thread, scope ? scope : "-", r, fawn_errmsg());
    return l;
}

static sbx_lease *take(fx *x, const char *thread, const char *scope) {
    return take_kind(x, thread, scope, SBX_HOLD_EXECUTION);
}

/* The generation alice's thread gets after acquire and release (parked). */
static void park(fx *x, char generation[SBX_GENERATION_LEN + 1], const char *thread) {
    sbx_lease *l = take(x, thread, NULL);
    snprintf(generation, SBX_GENERATION_LEN + 1, "%s", l->box.generation);
    give_back(x, l);
}

static void sid(char out[17], const char *thread) { fake_sandbox_id(out, "alice", thread); }

/* An acquisition of alice's thread (role user) on a thread of its own, so
 * that a test can act while it is under way: cancel it, wait until it
 * sleeps, bound the wait for it. */
typedef struct acquisition {
    fx *x;
    const char *thread;
    enum sbx_holder kind;
    sbx_cancel cancel;
    atomic_int tid; /* the thread's kernel id, once it runs */
    atomic_bool done;
    int rc;
    sbx_lease *lease;
    pthread_t t;
} acquisition;

static void *acquisition_main(void *arg) {
    acquisition *a = arg;
    atomic_store(&a->tid, (int)syscall(SYS_gettid));
    sbx_request req = {.who = {.user = "alice", .role = "user"},
                       .thread = a->thread,
                       .kind = a->kind,
                       .cancel = &a->cancel};
    a->rc = sbx_acquire(&a->lease, a->x->m, &req);
    atomic_store(&a->done, true);
    return NULL;
}

static void acquisition_start(acquisition *a, fx *x, const char *thread, enum sbx_holder kind) {
    *a = (acquisition){.x = x, .thread = thread, .kind = kind, .rc = 1};
    assert_int_equal(pthread_create(&a->t, NULL, acquisition_main, a), 0);
}

/* Waits for it to end; its result (a lease it got is the fixture's to give back). */
static int acquisition_join(acquisition *a) {
    pthread_join(a->t, NULL);
    if (a->rc == 0)
        hold(a->x, a->lease);
    return a->rc;
}

/* Whether thread tid of this process sleeps: waits on a lock or a condition. */
static bool thread_sleeps(int tid) {
    char path[64], stat[512];
    snprintf(path, sizeof path, "/proc/self/task/%d/stat", tid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, stat, sizeof stat - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return false;
    stat[n] = '\0';
    const char *paren = strrchr(stat, ')'); /* the state follows the command name */
    return paren && paren[1] == ' ' && paren[2] == 'S';
}

/* Waits up to ms until the acquisition sleeps inside sbx_acquire (it takes
 * no lock and waits for nothing but the manager on its way there), or has
 * ended; false when neither happened. */
static bool acquisition_waits(acquisition *a, int ms) {
    return WAIT_FOR(
        atomic_load(&a->done) || (atomic_load(&a->tid) && thread_sleeps(atomic_load(&a->tid))), ms);
}

/* What sbx_list says about user's thread; false when it is not listed. */
static bool info_of(fx *x, sbx_info *out, const char *user, const char *thread) {
    sbx_info *all = NULL;
    size_t n = 0;
    int r = sbx_list(&all, &n, x->m);
    if (r != 0)
        fail_msg("sbx_list: %d %s", r, fawn_errmsg());
    bool found = false;
    for (size_t i = 0; i < n && !found; i++)
        if (strcmp(all[i].user, user) == 0 && strcmp(all[i].thread, thread) == 0) {
            *out = all[i];
            found = true;
        }
    free(all);
    return found;
}

static size_t listed_count(fx *x) {
    sbx_info *all = NULL;
    size_t n = 0;
    assert_int_equal(sbx_list(&all, &n, x->m), 0);
    free(all);
    return n;
}

static bool listed(fx *x, const char *thread) {
    sbx_info i;
    return info_of(x, &i, "alice", thread);
}

static unsigned holders_total(const sbx_info *i) {
    unsigned n = 0;
    for (int k = 0; k < SBX_HOLD_KINDS; k++)
        n += i->holders[k];
    return n;
}

/* Nothing holds thread's sandbox: it is unlisted, or listed idle with no holders. */
static void expect_not_held(fx *x, const char *thread) {
    sbx_info i;
    if (!info_of(x, &i, "alice", thread))
        return;
    if (i.state == SBX_STATE_ACTIVE || holders_total(&i) != 0)
        fail_msg("%s is still held: state %s, %u holders", thread, sbx_state_name(i.state),
                 holders_total(&i));
}

static bool fence_in_store(fx *x, const char *scope, const char *sandbox_id,
                           const char *generation) {
    bool exists = false;
    int r = store_fence_exists(x->st, &exists, scope, sandbox_id, generation);
    if (r != 0)
        fail_msg("store_fence_exists: %d %s", r, fawn_errmsg());
    return exists;
}

static void random_generation(char out[SBX_GENERATION_LEN + 1]) {
    fawn_random_hex(out, SBX_GENERATION_LEN / 2);
}

static bool is_lower_hex(const char *s, size_t len) {
    if (strlen(s) != len)
        return false;
    for (size_t i = 0; i < len; i++)
        if (fawn_hex_digit(s[i]) < 0 || (s[i] >= 'A' && s[i] <= 'F'))
            return false;
    return true;
}

/* ---- fixture ---- */

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    if (!x)
        return -1;
    snprintf(x->dir, sizeof x->dir, "/tmp/fawn-manager-XXXXXX");
    if (!mkdtemp(x->dir))
        return -1;
    snprintf(x->path, sizeof x->path, "%s/fawn.db", x->dir);
    if (test_store_open(&x->st, x->path) != 0)
        return -1;
    x->fp = fake_provider_new();
    x->pol = policy_from(POLICY_ENABLED);
    x->cfg = (sbx_manager_config){.idle_timeout_s = 600, .replicas = 0, .call_timeout_ms = 1000};
    if (!x->fp || sbx_manager_new(&x->m, &x->cfg, fake_provider_iface(x->fp), x->st, x->pol) != 0)
        return -1;
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fx *x = *state;
    if (x->m)
        manager_stop(x);
    fake_provider_free(x->fp);
    authz_policy_free(x->pol);
    store_close(x->st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->dir);
    int r = system(cmd);
    free(x);
    return r;
}

/* ---- the gate ---- */

static void gate_denies_role_without_sandbox_execute(void **state) {
    fx *x = *state;
    int ops = fake_total_ops(x->fp);
    const char *scopes[] = {NULL, "r1:lead"};
    for (int kind = 0; kind < SBX_HOLD_KINDS; kind++)
        for (size_t s = 0; s < ARRAY_LEN(scopes); s++) {
            sbx_lease *l = NULL;
            int r = acquire_as(x, &l, "alice", "restricted", "t1", scopes[s], kind, NULL, NULL);
            if (r != FAWN_EPERM)
                fail_msg("kind %s: expected FAWN_EPERM, got %d (%s)", sbx_holder_name(kind), r,
                         fawn_errmsg());
            assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
            assert_null(l);
        }
    /* Nothing was started or touched. */
    assert_int_equal(fake_total_ops(x->fp), ops);
    assert_int_equal(fake_running_count(x->fp), 0);
    assert_int_equal(listed_count(x), 0);
    /* The same user with a role that may execute gets a sandbox. */
    sbx_lease *l = take(x, "t1", NULL);
    assert_true(is_lower_hex(l->box.generation, SBX_GENERATION_LEN));
    char id[17];
    sid(id, "t1");
    assert_string_equal(l->box.sandbox_id, id);
    assert_string_equal(l->session, "");
    assert_int_equal(fake_get_counts(x->fp).creates_done, 1);
}

static void gate_disabled_policy_checks_nothing(void **state) {
    fx *x = *state;
    use_policy(x, POLICY_DISABLED);
    const char *roles[] = {"restricted", "intruder", "", NULL};
    for (size_t i = 0; i < ARRAY_LEN(roles); i++) {
        sbx_lease *l = NULL;
        int r = acquire_as(x, &l, "alice", roles[i], "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
        if (r != 0)
            fail_msg("role %s: expected allowed with authorization disabled, got %d (%s)",
                     roles[i] ? roles[i] : "(null)", r, fawn_errmsg());
        give_back(x, l);
    }
    assert_int_equal(fake_get_counts(x->fp).creates_done, 1);
}

static void gate_unknown_role_follows_fail_closed(void **state) {
    fx *x = *state;
    int ops = fake_total_ops(x->fp);
    sbx_lease *l = NULL;
    assert_int_equal(
        acquire_as(x, &l, "alice", "intruder", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL),
        FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_null(l);
    assert_int_equal(fake_total_ops(x->fp), ops);

    use_policy(x, POLICY_FAIL_OPEN);
    int r = acquire_as(x, &l, "alice", "intruder", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
    if (r != 0)
        fail_msg("unknown role with fail_closed false: expected allowed, got %d (%s)", r,
                 fawn_errmsg());
    /* A configured role without sandbox:execute stays denied under fail-open. */
    sbx_lease *denied = NULL;
    assert_int_equal(
        acquire_as(x, &denied, "alice", "restricted", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL),
        FAWN_EPERM);
    assert_null(denied);
}

static void gate_decision_is_made_once_per_run(void **state) {
    fx *x = *state;
    /* A run that started allowed keeps its decision when the role changes. */
    sbx_decision run = {0};
    sbx_lease *l = NULL;
    assert_int_equal(acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, &run, NULL),
                     0);
    assert_true(run.made);
    assert_int_equal(run.result, 0);
    give_back(x, l);
    int r = acquire_as(x, &l, "alice", "restricted", "t1", NULL, SBX_HOLD_EXECUTION, &run, NULL);
    if (r != 0)
        fail_msg("the run's decision (allow) must be reused, got %d (%s)", r, fawn_errmsg());
    give_back(x, l);

    /* The next run decides anew. */
    sbx_decision next = {0};
    assert_int_equal(
        acquire_as(x, &l, "alice", "restricted", "t1", NULL, SBX_HOLD_EXECUTION, &next, NULL),
        FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_true(next.made);
    assert_int_equal(next.result, FAWN_EPERM);

    /* A run that started denied stays denied, touching nothing. */
    int ops = fake_total_ops(x->fp);
    r = acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, &next, NULL);
    assert_int_equal(r, FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_null(l);
    assert_int_equal(fake_total_ops(x->fp), ops);
    assert_int_equal(fake_get_counts(x->fp).creates_done, 1);
}

static void gate_checks_reuse_of_a_held_sandbox(void **state) {
    fx *x = *state;
    sbx_lease *held = take(x, "t1", NULL);
    int ops = fake_total_ops(x->fp);
    /* The user's role changed: the next acquisition (no run decision) is denied. */
    sbx_lease *l = NULL;
    assert_int_equal(
        acquire_as(x, &l, "alice", "restricted", "t1", NULL, SBX_HOLD_UPLOAD, NULL, NULL),
        FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_null(l);
    assert_int_equal(fake_total_ops(x->fp), ops);
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    assert_int_equal(i.holders[SBX_HOLD_EXECUTION], 1);
    assert_int_equal(i.holders[SBX_HOLD_UPLOAD], 0);

    /* Parked, it is not handed to the denied role either, and stays as it was. */
    char generation[SBX_GENERATION_LEN + 1];
    snprintf(generation, sizeof generation, "%s", held->box.generation);
    give_back(x, held);
    ops = fake_total_ops(x->fp);
    assert_int_equal(
        acquire_as(x, &l, "alice", "restricted", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL),
        FAWN_EPERM);
    assert_int_equal(fake_total_ops(x->fp), ops);
    assert_true(fake_generation_running(x->fp, generation));
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_IDLE);
}

static void acquire_rejects_bad_names(void **state) {
    fx *x = *state;
    char long_id[66];
    memset(long_id, 'a', 65);
    long_id[65] = '\0';
    char long_scope[140];
    snprintf(long_scope, sizeof long_scope, "%s:lead", long_id);
    const char *bad_ids[] = {"",       "..",      "../etc", "a/b",   "al ice",
                             "%2e%2e", "alice\n", "t\\1",   "x\x01", "\xc3\xa9t\xc3\xa9",
                             long_id};
    const char *bad_scopes[] = {"",          "lead",         "r1:",      ":lead",
                                "r1:lead:x", "r1/../x:lead", "r1:le ad", "%2e%2e:lead",
                                "r1:lead\n", long_scope};
    int ops = fake_total_ops(x->fp);
    sbx_lease *l = NULL;
    for (size_t i = 0; i < ARRAY_LEN(bad_ids); i++) {
        int r = acquire_as(x, &l, bad_ids[i], "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
        if (r != FAWN_EINVAL)
            fail_msg("user \"%s\": expected FAWN_EINVAL, got %d", bad_ids[i], r);
        r = acquire_as(x, &l, "alice", "user", bad_ids[i], NULL, SBX_HOLD_EXECUTION, NULL, NULL);
        if (r != FAWN_EINVAL)
            fail_msg("thread \"%s\": expected FAWN_EINVAL, got %d", bad_ids[i], r);
    }
    for (size_t i = 0; i < ARRAY_LEN(bad_scopes); i++) {
        int r = acquire_as(x, &l, "alice", "user", "t1", bad_scopes[i], SBX_HOLD_EXECUTION, NULL,
                           NULL);
        if (r != FAWN_EINVAL)
            fail_msg("scope \"%s\": expected FAWN_EINVAL, got %d", bad_scopes[i], r);
    }
    assert_int_equal(fake_get_counts(x->fp).creates, 0);
    assert_int_equal(fake_total_ops(x->fp), ops);
    assert_int_equal(listed_count(x), 0);

    /* The longest valid names are accepted. */
    char max_id[65], max_scope[SBX_SCOPE_MAX + 1];
    memset(max_id, 'z', 64);
    max_id[64] = '\0';
    snprintf(max_scope, sizeof max_scope, "%s:%s", max_id, max_id);
    assert_int_equal(strlen(max_scope), SBX_SCOPE_MAX);
    int r = acquire_as(x, &l, max_id, "user", max_id, max_scope, SBX_HOLD_EXECUTION, NULL, NULL);
    if (r != 0)
        fail_msg("64-character user, thread and scope parts: %d %s", r, fawn_errmsg());
    assert_string_equal(l->scope, max_scope);
    char max_sid[17];
    fake_sandbox_id(max_sid, max_id, max_id);
    assert_string_equal(l->box.sandbox_id, max_sid);
}

/* A refused acquisition still sets the lease pointer (so releasing what the
 * caller got is safe), a refused destroy its outcome, and a tool's box call
 * through a refused lease no reply and status 0. */
static void refusals_leave_out_parameters_defined(void **state) {
    fx *x = *state;
    sbx_request req = {
        .who = {.user = "alice", .role = "restricted"}, .thread = "t1", .kind = SBX_HOLD_EXECUTION};
    sbx_lease *l;
    POISON(l);
    assert_int_equal(sbx_acquire(&l, x->m, &req), FAWN_EPERM);
    assert_null(l);
    sbx_release(l);
    enum sbx_destroy_outcome outcome;
    POISON(outcome);
    assert_int_equal(sbx_destroy(&outcome, x->m, "alice", "../t1"), FAWN_EINVAL);
    assert_int_equal(outcome, SBX_DESTROYED);
    tool_env env = {.sandboxes = x->m, .req = req};
    POISON(l);
    assert_int_equal(tool_env_lease(&l, &env), FAWN_EPERM);
    assert_null(l);
    json_t *reply;
    int status;
    POISON(reply);
    POISON(status);
    assert_int_equal(tool_box_call(&reply, &status, &env, "GET", "/v1/sandbox", NULL, 1000),
                     FAWN_EPERM);
    assert_null(reply);
    assert_int_equal(status, 0);
    tool_env_end(&env);
}

/* ---- leases ---- */

typedef struct acquirer {
    fx *x;
    pthread_barrier_t *start;
    int index;
    int rc;
    char generation[SBX_GENERATION_LEN + 1];
} acquirer;

static void *acquirer_run(void *arg) {
    acquirer *a = arg;
    char thread[16];
    snprintf(thread, sizeof thread, "t%d", a->index % CONCURRENT_THREADS);
    sbx_request req = {.who = {.user = "alice", .role = "user"},
                       .thread = thread,
                       .kind = (enum sbx_holder)(a->index % SBX_HOLD_KINDS)};
    pthread_barrier_wait(a->start);
    sbx_lease *l = NULL;
    a->rc = sbx_acquire(&l, a->x->m, &req);
    if (a->rc == 0) {
        snprintf(a->generation, sizeof a->generation, "%s", l->box.generation);
        sleep_ms(2);
        sbx_release(l);
    }
    return NULL;
}

static void acquisitions_serialize_per_thread_and_run_in_parallel_across(void **state) {
    fx *x = *state;
    fake_hold_creates(x->fp);
    acquirer a[CONCURRENT_ACQUIRERS];
    pthread_t tid[CONCURRENT_ACQUIRERS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, CONCURRENT_ACQUIRERS);
    for (int i = 0; i < CONCURRENT_ACQUIRERS; i++) {
        a[i] = (acquirer){.x = x, .start = &start, .index = i, .rc = 1};
        assert_int_equal(pthread_create(&tid[i], NULL, acquirer_run, &a[i]), 0);
    }
    /* Every thread's create is under way at once: none waits for another
     * thread's (they are held until all have begun). */
    bool all_at_once = fake_wait_held_creates(x->fp, CONCURRENT_THREADS, SETTLE_MS);
    fake_release_creates(x->fp);
    for (int i = 0; i < CONCURRENT_ACQUIRERS; i++)
        pthread_join(tid[i], NULL);
    pthread_barrier_destroy(&start);
    if (!all_at_once)
        fail_msg("the creates of %d threads were never under way at once: acquisitions are "
                 "serialized across threads",
                 CONCURRENT_THREADS);
    for (int i = 0; i < CONCURRENT_ACQUIRERS; i++) {
        if (a[i].rc != 0)
            fail_msg("acquirer %d: %d", i, a[i].rc);
        /* Every acquirer of one thread got the same box. */
        assert_string_equal(a[i].generation, a[i % CONCURRENT_THREADS].generation);
    }
    fake_counts c = fake_get_counts(x->fp);
    assert_int_equal(c.creates, CONCURRENT_THREADS);
    assert_int_equal(c.creates_done, CONCURRENT_THREADS);
    assert_int_equal(fake_running_count(x->fp), CONCURRENT_THREADS);
    assert_int_equal(fake_max_creates_per_id(x->fp), 1);
    assert_int_equal(fake_max_ops_per_id(x->fp), 1);
    if (fake_max_creates_overall(x->fp) < 2)
        fail_msg("creates for different threads never overlapped: acquisitions are serialized "
                 "across threads");
    assert_int_equal(listed_count(x), CONCURRENT_THREADS);
    for (int t = 0; t < CONCURRENT_THREADS; t++) {
        char thread[16];
        snprintf(thread, sizeof thread, "t%d", t);
        sbx_info i;
        assert_true(info_of(x, &i, "alice", thread));
        assert_int_equal(i.state, SBX_STATE_IDLE);
        assert_int_equal(holders_total(&i), 0);
        assert_string_equal(i.generation, a[t].generation);
    }
}

static void holders_keep_the_sandbox_active_until_the_last_release(void **state) {
    fx *x = *state;
    sbx_lease *run = take_kind(x, "t1", NULL, SBX_HOLD_EXECUTION);
    sbx_lease *upload = take_kind(x, "t1", NULL, SBX_HOLD_UPLOAD);
    sbx_lease *fork = take_kind(x, "t1", NULL, SBX_HOLD_FORK);
    assert_string_equal(upload->box.generation, run->box.generation);
    assert_string_equal(fork->box.generation, run->box.generation);
    char generation[SBX_GENERATION_LEN + 1];
    snprintf(generation, sizeof generation, "%s", run->box.generation);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);

    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    assert_string_equal(i.generation, generation);
    assert_string_equal(i.sandbox_id, run->box.sandbox_id);
    assert_int_equal(i.holders[SBX_HOLD_EXECUTION], 1);
    assert_int_equal(i.holders[SBX_HOLD_UPLOAD], 1);
    assert_int_equal(i.holders[SBX_HOLD_FORK], 1);
    assert_int_equal(i.idle_ms, 0);
    assert_false(i.fenced);
    assert_false(i.destroy_deferred);

    give_back(x, run);
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    assert_int_equal(i.holders[SBX_HOLD_EXECUTION], 0);
    assert_int_equal(i.holders[SBX_HOLD_UPLOAD], 1);
    give_back(x, upload);
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    assert_int_equal(holders_total(&i), 1);
    give_back(x, fork);

    /* The last release parks it: still running, nothing destroyed. */
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_IDLE);
    assert_int_equal(holders_total(&i), 0);
    assert_true(fake_generation_running(x->fp, generation));
    assert_int_equal(fake_get_counts(x->fp).destroys, 0);
    sleep_ms(40);
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_true(i.idle_ms >= 20);

    /* The thread's next acquisition reuses the parked box. */
    sbx_lease *again = take(x, "t1", NULL);
    assert_string_equal(again->box.generation, generation);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    assert_int_equal(i.idle_ms, 0);
    /* A release of NULL is nothing. */
    sbx_release(NULL);
}

static void users_with_the_same_thread_name_get_separate_sandboxes(void **state) {
    fx *x = *state;
    sbx_lease *alice = take(x, "t1", NULL);
    sbx_lease *bob = NULL;
    assert_int_equal(acquire_as(x, &bob, "bob", "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL),
                     0);
    assert_string_not_equal(alice->box.sandbox_id, bob->box.sandbox_id);
    assert_string_not_equal(alice->box.generation, bob->box.generation);
    char alice_generation[SBX_GENERATION_LEN + 1];
    snprintf(alice_generation, sizeof alice_generation, "%s", alice->box.generation);
    give_back(x, alice);
    give_back(x, bob);
    /* Bob tearing down his t1 leaves alice's alone. */
    enum sbx_destroy_outcome out = SBX_DESTROY_DEFERRED;
    assert_int_equal(sbx_destroy(&out, x->m, "bob", "t1"), 0);
    assert_int_equal(out, SBX_DESTROYED);
    assert_true(fake_generation_running(x->fp, alice_generation));
    assert_true(listed(x, "t1"));
}

/* ---- destroy ---- */

static void destroy_while_held_is_deferred_until_the_last_release(void **state) {
    fx *x = *state;
    sbx_lease *a = take_kind(x, "t1", NULL, SBX_HOLD_EXECUTION);
    sbx_lease *b = take_kind(x, "t1", NULL, SBX_HOLD_UPLOAD);
    char generation[SBX_GENERATION_LEN + 1];
    snprintf(generation, sizeof generation, "%s", a->box.generation);

    enum sbx_destroy_outcome out = SBX_DESTROYED;
    assert_int_equal(sbx_destroy(&out, x->m, "alice", "t1"), 0);
    assert_int_equal(out, SBX_DESTROY_DEFERRED);
    assert_true(fake_generation_running(x->fp, generation));
    assert_int_equal(fake_get_counts(x->fp).destroys, 0);
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_true(i.destroy_deferred);
    assert_int_equal(holders_total(&i), 2);

    /* While the destroy waits, no new holder is admitted. */
    sbx_lease *late = NULL;
    assert_int_equal(acquire_as(x, &late, "alice", "user", "t1", NULL, SBX_HOLD_FORK, NULL, NULL),
                     FAWN_EBUSY);
    assert_null(late);

    give_back(x, a);
    assert_true(fake_generation_running(x->fp, generation));
    give_back(x, b);
    if (!WAIT_FOR(!fake_generation_present(x->fp, generation), SETTLE_MS))
        fail_msg("the deferred destroy did not happen after the last release");
    assert_true(WAIT_FOR(!listed(x, "t1"), SETTLE_MS));

    /* The next acquisition starts a fresh generation. */
    sbx_lease *c = take(x, "t1", NULL);
    assert_string_not_equal(c->box.generation, generation);
    assert_int_equal(fake_get_counts(x->fp).creates_done, 2);
}

static void destroy_without_holders_is_immediate_and_failures_surface(void **state) {
    fx *x = *state;
    char g1[SBX_GENERATION_LEN + 1];
    park(x, g1, "t1");
    enum sbx_destroy_outcome out = SBX_DESTROY_DEFERRED;
    assert_int_equal(sbx_destroy(&out, x->m, "alice", "t1"), 0);
    assert_int_equal(out, SBX_DESTROYED);
    assert_false(fake_generation_present(x->fp, g1));
    assert_false(listed(x, "t1"));

    /* A destroy the provider cannot finish is the caller's error; a later call finishes it. */
    char g2[SBX_GENERATION_LEN + 1];
    park(x, g2, "t1");
    assert_string_not_equal(g1, g2);
    fake_set_destroy_failures(x->fp, 2, FAWN_EIO, true);
    int destroys = fake_get_counts(x->fp).destroys;
    assert_int_equal(sbx_destroy(&out, x->m, "alice", "t1"), FAWN_EIO);
    assert_true(fake_generation_present(x->fp, g2));
    assert_int_equal(sbx_destroy(&out, x->m, "alice", "t1"), FAWN_EIO);
    assert_true(fake_generation_present(x->fp, g2));
    out = SBX_DESTROY_DEFERRED;
    int r = sbx_destroy(&out, x->m, "alice", "t1");
    if (r != 0)
        fail_msg("third destroy (provider works again): %d %s", r, fawn_errmsg());
    assert_int_equal(out, SBX_DESTROYED);
    assert_false(fake_generation_present(x->fp, g2));
    assert_int_equal(fake_get_counts(x->fp).destroys - destroys, 3);
    assert_int_equal(fake_running_count(x->fp), 0);
}

static void failed_deferred_destroy_is_retried_and_blocks_nothing(void **state) {
    fx *x = *state;
    /* A later destroy call retries the teardown the last release could not do. */
    sbx_lease *l = take(x, "t1", NULL);
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", l->box.generation);
    enum sbx_destroy_outcome out = SBX_DESTROYED;
    assert_int_equal(sbx_destroy(&out, x->m, "alice", "t1"), 0);
    assert_int_equal(out, SBX_DESTROY_DEFERRED);
    fake_set_destroy_failures(x->fp, 1, FAWN_EIO, false);
    give_back(x, l);
    assert_true(fake_generation_present(x->fp, g1));
    out = SBX_DESTROY_DEFERRED;
    assert_int_equal(sbx_destroy(&out, x->m, "alice", "t1"), 0);
    assert_int_equal(out, SBX_DESTROYED);
    assert_false(fake_generation_present(x->fp, g1));
    l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g1);
    give_back(x, l);

    /* Without that call, the thread is not left answering "busy" with no holder left. */
    l = take(x, "t2", NULL);
    char g2[SBX_GENERATION_LEN + 1];
    snprintf(g2, sizeof g2, "%s", l->box.generation);
    assert_int_equal(sbx_destroy(&out, x->m, "alice", "t2"), 0);
    assert_int_equal(out, SBX_DESTROY_DEFERRED);
    fake_set_destroy_failures(x->fp, 1, FAWN_EIO, false);
    give_back(x, l);
    int r = acquire_as(x, &l, "alice", "user", "t2", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
    if (r == FAWN_EBUSY)
        fail_msg("every holder is gone, yet the acquisition answers FAWN_EBUSY (%s)",
                 fawn_errmsg());
    assert_int_equal(r, 0);
    /* The destroy that was asked for is not undone: the old box is not handed out. */
    assert_string_not_equal(l->box.generation, g2);
    assert_false(fake_generation_present(x->fp, g2));
}

/* ---- cancellation ---- */

static void cancelled_create_starts_nothing(void **state) {
    fx *x = *state;
    /* Only the cancel, reaching the provider, can end this create early. */
    fake_hold_creates(x->fp);
    acquisition a;
    acquisition_start(&a, x, "t1", SBX_HOLD_EXECUTION);
    bool started = fake_wait_held_creates(x->fp, 1, SETTLE_MS);
    atomic_store(&a.cancel.cancelled, true);
    bool ended = WAIT_FOR(atomic_load(&a.done), SETTLE_MS);
    fake_release_creates(x->fp);
    int r = acquisition_join(&a);
    if (!started)
        fail_msg("the acquisition's create never began");
    if (!ended)
        fail_msg("the cancel flag did not reach the provider: its create went on");
    assert_int_equal(r, FAWN_ECANCELED);
    assert_null(a.lease);
    fake_counts n = fake_get_counts(x->fp);
    assert_int_equal(n.creates, 1);
    if (n.creates_done != 0)
        fail_msg("the cancel flag did not reach the provider: its create finished the box");
    assert_int_equal(fake_running_count(x->fp), 0);
    expect_not_held(x, "t1");

    sbx_lease *next = take(x, "t1", NULL);
    assert_true(fake_generation_running(x->fp, next->box.generation));
}

static void cancelled_acquisition_parks_what_it_started(void **state) {
    fx *x = *state;
    fake_set_create_delay(x->fp, 0, false); /* the provider finishes regardless */
    fake_hold_creates(x->fp);
    acquisition a;
    acquisition_start(&a, x, "t1", SBX_HOLD_EXECUTION);
    bool started = fake_wait_held_creates(x->fp, 1, SETTLE_MS);
    /* The cancel lands while the provider starts the box. */
    atomic_store(&a.cancel.cancelled, true);
    fake_release_creates(x->fp);
    int r = acquisition_join(&a);
    if (!started)
        fail_msg("the acquisition's create never began");
    assert_int_equal(r, FAWN_ECANCELED);
    assert_null(a.lease);
    /* The box the provider finished is the manager's, parked, not bound. */
    assert_int_equal(fake_running_count(x->fp), 1);
    sbx_info i;
    if (!info_of(x, &i, "alice", "t1"))
        fail_msg("a box started for a cancelled acquisition runs unowned");
    assert_int_equal(i.state, SBX_STATE_IDLE);
    assert_int_equal(holders_total(&i), 0);
    assert_true(fake_generation_running(x->fp, i.generation));

    fake_set_create_delay(x->fp, 0, true);
    sbx_lease *next = take(x, "t1", NULL);
    assert_string_equal(next->box.generation, i.generation);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
}

static void cancelled_acquisition_hands_its_sandbox_to_a_waiting_one(void **state) {
    fx *x = *state;
    fake_set_create_delay(x->fp, 0, false); /* the provider finishes regardless */
    fake_hold_creates(x->fp);
    acquisition a, w;
    acquisition_start(&a, x, "t1", SBX_HOLD_EXECUTION);
    bool started = fake_wait_held_creates(x->fp, 1, SETTLE_MS);
    /* Another acquisition of the thread comes while the box starts, and waits. */
    acquisition_start(&w, x, "t1", SBX_HOLD_EXECUTION);
    bool waiting = acquisition_waits(&w, SETTLE_MS);
    /* Then the first one is cancelled, before its box answers. */
    atomic_store(&a.cancel.cancelled, true);
    fake_release_creates(x->fp);
    int r = acquisition_join(&a);
    int rw = acquisition_join(&w);
    if (!started || !waiting)
        fail_msg("the create never began (%d) or the second acquisition never waited (%d)", started,
                 waiting);
    assert_int_equal(r, FAWN_ECANCELED);
    assert_null(a.lease);
    if (rw != 0)
        fail_msg("the waiting acquisition failed: %d", rw);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
    assert_true(fake_generation_running(x->fp, w.lease->box.generation));
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    assert_int_equal(i.holders[SBX_HOLD_EXECUTION], 1);
    assert_string_equal(i.generation, w.lease->box.generation);
    give_back(x, w.lease);
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_IDLE);
}

static void failed_create_is_returned_and_leaves_nothing_held(void **state) {
    fx *x = *state;
    fake_set_create_error(x->fp, FAWN_ETIMEDOUT);
    sbx_lease *l = NULL;
    assert_int_equal(acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL),
                     FAWN_ETIMEDOUT);
    assert_null(l);
    assert_int_equal(fake_running_count(x->fp), 0);
    expect_not_held(x, "t1");
    fake_set_create_error(x->fp, 0);
    l = take(x, "t1", NULL);
    assert_true(fake_generation_running(x->fp, l->box.generation));
}

static void precancelled_acquisition_starts_nothing(void **state) {
    fx *x = *state;
    sbx_cancel cancel = {true};
    sbx_lease *l = NULL;
    assert_int_equal(
        acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, &cancel),
        FAWN_ECANCELED);
    assert_null(l);
    assert_int_equal(fake_running_count(x->fp), 0);
    expect_not_held(x, "t1");
}

/* ---- warm pool ---- */

static void idle_sandbox_is_torn_down_after_the_idle_timeout(void **state) {
    fx *x = *state;
    reconfigure(x, 1, 0);
    sbx_lease *active = take(x, "t2", NULL);
    char idle[SBX_GENERATION_LEN + 1];
    /* Read before the box is parked: the time since is at most how long it
     * was parked, so this lower bound holds however slow the host. */
    int64_t before_parking = fawn_now_ms();
    park(x, idle, "t1");
    if (!WAIT_FOR(!fake_generation_present(x->fp, idle), SETTLE_MS))
        fail_msg("the idle sandbox was not torn down within %d ms of a 1 s idle timeout",
                 SETTLE_MS);
    assert_true(fawn_now_ms() - before_parking >= 900);
    assert_true(WAIT_FOR(!listed(x, "t1"), SETTLE_MS));
    /* An active sandbox is never reaped. */
    assert_true(fake_generation_running(x->fp, active->box.generation));
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t2"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    /* The thread's next acquisition starts a new one. */
    sbx_lease *next = take(x, "t1", NULL);
    assert_string_not_equal(next->box.generation, idle);
}

static void idle_timeout_zero_keeps_parked_sandboxes(void **state) {
    fx *x = *state;
    reconfigure(x, 0, 0);
    char idle[SBX_GENERATION_LEN + 1];
    park(x, idle, "t1");
    sleep_ms(1500);
    assert_true(fake_generation_running(x->fp, idle));
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_IDLE);
    assert_int_equal(fake_get_counts(x->fp).destroys, 0);
}

/* alice's acquisition of thread, bounded: past `ms` it is cancelled (and
 * *out stays NULL). */
static int acquire_within(fx *x, sbx_lease **out, const char *thread, int ms) {
    acquisition a;
    *out = NULL;
    acquisition_start(&a, x, thread, SBX_HOLD_EXECUTION);
    bool done = WAIT_FOR(atomic_load(&a.done), ms);
    atomic_store(&a.cancel.cancelled, true);
    int r = acquisition_join(&a);
    if (!done && r != 0)
        fail_msg("acquiring %s did not complete within %d ms", thread, ms);
    *out = a.lease;
    return r;
}

/* A parked box is torn down only once it has been parked for the idle
 * timeout, however long the host has been up: a timeout longer than the
 * uptime is not "no timeout". With a destroy that always fails, tearing it
 * down early would also keep its entry claimed from the acquisitions. */
static void idle_timeout_longer_than_the_uptime_reaps_nothing(void **state) {
    fx *x = *state;
    reconfigure(x, (uint32_t)(fawn_now_ms() / 1000) + 3600, 0);
    char g[SBX_GENERATION_LEN + 1];
    park(x, g, "t1");
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    for (int i = 0; i < 3; i++) {
        sleep_ms(600); /* a reaper pass */
        sbx_lease *l = NULL;
        assert_int_equal(acquire_within(x, &l, "t1", 30000), 0);
        assert_string_equal(l->box.generation, g);
        give_back(x, l);
    }
    assert_int_equal(fake_get_counts(x->fp).destroys, 0);
}

/* A parked box whose teardown keeps failing is tried once per backoff step
 * (1 s, 2 s, 4 s ...), never in between, and stays available to its
 * thread meanwhile. */
static void failing_idle_teardown_backs_off(void **state) {
    fx *x = *state;
    reconfigure(x, 1, 0);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    char g[SBX_GENERATION_LEN + 1];
    park(x, g, "t1");
    for (unsigned seen = 0; seen < 3;) {
        sbx_info i = {0};
        int before = fake_get_counts(x->fp).destroys;
        if (!WAIT_FOR(info_of(x, &i, "alice", "t1") && i.teardown_failures > seen, 30000))
            fail_msg("no teardown failure after %u within 30 s", seen);
        int after = fake_get_counts(x->fp).destroys;
        seen = i.teardown_failures;
        /* Each failure doubles the wait (from 1 s)... */
        assert_int_equal(i.teardown_backoff_ms, (int64_t)1000 << (seen - 1));
        /* ... and no destroy is tried but one per step (the next may have begun). */
        if (before > (int)seen + 1 || after < (int)seen)
            fail_msg("%d..%d destroys for %u backoff steps", before, after, seen);
    }
    sbx_lease *l = NULL;
    assert_int_equal(acquire_within(x, &l, "t1", 30000), 0);
    assert_string_equal(l->box.generation, g);
    give_back(x, l);
    /* Once the provider recovers, the next step tears it down. */
    fake_set_destroy_failures(x->fp, 0, 0, false);
    if (!WAIT_FOR(!fake_generation_present(x->fp, g), 60000))
        fail_msg("the parked box was not torn down once destroys worked again");
}

/* A box exits once nothing has talked to it for the idle timeout, so the
 * manager talks to every box it holds a few times per timeout; with no
 * idle timeout, boxes never exit on their own and hear nothing. */
static void keepalive_reaches_every_box_the_manager_holds(void **state) {
    fx *x = *state;
    reconfigure(x, 2, 0);
    sbx_lease *l = take(x, "t1", NULL);
    int before = fake_call_count(x->fp, "GET", "/v1/sandbox");
    if (!WAIT_FOR(fake_call_count(x->fp, "GET", "/v1/sandbox") >= before + 3, 30000))
        fail_msg("a held box heard %d keepalives in 30 s of a 2 s idle timeout",
                 fake_call_count(x->fp, "GET", "/v1/sandbox") - before);
    give_back(x, l);
    reconfigure(x, 0, 0);
    l = take(x, "t1", NULL);
    before = fake_call_count(x->fp, "GET", "/v1/sandbox");
    sleep_ms(1500);
    assert_int_equal(fake_call_count(x->fp, "GET", "/v1/sandbox"), before);
}

static void replicas_cap_evicts_the_oldest_idle_never_an_active_one(void **state) {
    fx *x = *state;
    reconfigure(x, 600, 2);
    char g1[SBX_GENERATION_LEN + 1], g2[SBX_GENERATION_LEN + 1];
    park(x, g1, "t1");
    sleep_ms(10);
    park(x, g2, "t2");
    sleep_ms(10);
    sbx_lease *t3 = take(x, "t3", NULL);
    if (!WAIT_FOR(!fake_generation_present(x->fp, g1), SETTLE_MS))
        fail_msg("past the cap, the oldest idle sandbox was not torn down");
    assert_true(fake_generation_running(x->fp, g2));
    assert_true(fake_generation_running(x->fp, t3->box.generation));
    assert_int_equal(fake_running_count(x->fp), 2);
    assert_false(listed(x, "t1"));

    /* With every sandbox active, the cap evicts nothing. */
    sbx_lease *t2 = take(x, "t2", NULL);
    assert_string_equal(t2->box.generation, g2);
    sbx_lease *t4 = take(x, "t4", NULL);
    sleep_ms(100);
    assert_true(fake_generation_running(x->fp, g2));
    assert_true(fake_generation_running(x->fp, t3->box.generation));
    assert_true(fake_generation_running(x->fp, t4->box.generation));
    assert_int_equal(fake_get_counts(x->fp).destroys_done, 1);
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t2"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);

    /* Parked while over the cap: it is the oldest idle one, so it goes. */
    char g3[SBX_GENERATION_LEN + 1];
    snprintf(g3, sizeof g3, "%s", t3->box.generation);
    give_back(x, t3);
    if (!WAIT_FOR(!fake_generation_present(x->fp, g3), SETTLE_MS))
        fail_msg("a sandbox parked past the cap was kept");
    assert_true(fake_generation_running(x->fp, g2));
    assert_true(fake_generation_running(x->fp, t4->box.generation));
    assert_false(listed(x, "t3"));
    assert_true(info_of(x, &i, "alice", "t4"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
}

typedef struct churner {
    fx *x;
    unsigned seed;
    int64_t until_ms;
    atomic_int *errors;
    atomic_int *torn_while_held;
} churner;

static void *churn(void *arg) {
    churner *c = arg;
    while (fawn_now_ms() < c->until_ms) {
        char thread[16];
        snprintf(thread, sizeof thread, "t%u", rand_r(&c->seed) % 4);
        sbx_request req = {.who = {.user = "alice", .role = "user"},
                           .thread = thread,
                           .kind = (enum sbx_holder)(rand_r(&c->seed) % SBX_HOLD_KINDS)};
        sbx_lease *l = NULL;
        if (sbx_acquire(&l, c->x->m, &req) != 0) {
            atomic_fetch_add(c->errors, 1);
            continue;
        }
        if (!fake_generation_running(c->x->fp, l->box.generation))
            atomic_fetch_add(c->torn_while_held, 1);
        sleep_ms((int)(rand_r(&c->seed) % 6));
        if (!fake_generation_running(c->x->fp, l->box.generation))
            atomic_fetch_add(c->torn_while_held, 1);
        sbx_release(l);
        sbx_info *all = NULL;
        size_t n = 0;
        if (sbx_list(&all, &n, c->x->m) != 0)
            atomic_fetch_add(c->errors, 1);
        free(all);
        sleep_ms((int)(rand_r(&c->seed) % 25));
    }
    return NULL;
}

static void held_sandboxes_survive_reaper_and_cap_churn(void **state) {
    fx *x = *state;
    reconfigure(x, 1, 2);
    fake_set_create_delay(x->fp, 3, true);
    enum { CHURNERS = 6 };
    atomic_int errors = 0, torn = 0;
    churner c[CHURNERS];
    pthread_t t[CHURNERS];
    int64_t until = fawn_now_ms() + 2500;
    for (int i = 0; i < CHURNERS; i++) {
        c[i] = (churner){x, (unsigned)(i + 1) * 7919u, until, &errors, &torn};
        assert_int_equal(pthread_create(&t[i], NULL, churn, &c[i]), 0);
    }
    for (int i = 0; i < CHURNERS; i++)
        pthread_join(t[i], NULL);
    assert_int_equal(atomic_load(&errors), 0);
    assert_int_equal(atomic_load(&torn), 0);
    assert_int_equal(fake_max_ops_per_id(x->fp), 1);
    assert_int_equal(fake_max_creates_per_id(x->fp), 1);
    /* Everything left running is known to the manager (nothing unowned). */
    size_t listed_n = listed_count(x);
    assert_true((size_t)fake_running_count(x->fp) <= listed_n);
}

/* ---- health on reuse ---- */

static void dead_sandbox_is_replaced_on_reuse(void **state) {
    fx *x = *state;
    char g1[SBX_GENERATION_LEN + 1], id[17];
    sid(id, "t1");
    park(x, g1, "t1");
    fake_kill(x->fp, id); /* its process exited behind the manager's back */
    sbx_lease *l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g1);
    assert_true(fake_generation_running(x->fp, l->box.generation));
    assert_false(fake_generation_running(x->fp, g1));
    char g2[SBX_GENERATION_LEN + 1];
    snprintf(g2, sizeof g2, "%s", l->box.generation);
    give_back(x, l);

    /* Running but definitely not answering: dropped as well. */
    fake_set_health(x->fp, g2, FAWN_ENOENT);
    l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g2);
    assert_false(fake_generation_running(x->fp, g2));
    assert_int_equal(fake_running_count(x->fp), 1);
    assert_int_equal(fake_get_counts(x->fp).creates_done, 3);
}

static void unknown_health_fences_and_replaces_the_generation(void **state) {
    fx *x = *state;
    char g1[SBX_GENERATION_LEN + 1], id[17];
    sid(id, "t1");
    park(x, g1, "t1");
    /* Unknown health and a provider that cannot destroy: the generation is
     * fenced, the acquisition fails with the provider's error, nothing is handed out. */
    fake_set_health(x->fp, g1, FAWN_ETIMEDOUT);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    sbx_lease *l = NULL;
    int r = acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
    if (r == 0)
        fail_msg("a sandbox of unknown health that could not be destroyed was handed out (%s)",
                 l->box.generation);
    assert_int_equal(r, FAWN_EIO);
    assert_null(l);
    assert_true(fence_in_store(x, "", id, g1));
    assert_false(sbx_reusable(x->m, id, g1));
    assert_true(fake_generation_present(x->fp, g1));

    /* Once the provider can destroy it, the next acquisition does, and starts afresh. */
    fake_set_destroy_failures(x->fp, 0, 0, false);
    l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g1);
    assert_false(fake_generation_present(x->fp, g1));
    assert_false(fence_in_store(x, "", id, g1));
    assert_true(sbx_reusable(x->m, id, l->box.generation));
    char g2[SBX_GENERATION_LEN + 1];
    snprintf(g2, sizeof g2, "%s", l->box.generation);
    give_back(x, l);

    /* Unknown health with a working provider: replaced in one acquisition. */
    fake_set_health(x->fp, g2, FAWN_ETIMEDOUT);
    l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g2);
    assert_false(fake_generation_present(x->fp, g2));
    assert_false(fence_in_store(x, "", id, g2));
}

/* ---- generations and fences ---- */

static void stale_lease_never_acts_on_the_new_generation(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *old = take(x, "t1", NULL);
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", old->box.generation);
    fake_kill(x->fp, id);
    /* The held box died: the next acquisition gets a new generation. */
    sbx_lease *cur = take(x, "t1", NULL);
    char g2[SBX_GENERATION_LEN + 1];
    snprintf(g2, sizeof g2, "%s", cur->box.generation);
    if (strcmp(g2, g1) == 0)
        fail_msg("the held sandbox's box died, yet the next acquisition was handed the dead "
                 "generation %s",
                 g1);
    assert_true(fake_generation_running(x->fp, g2));

    /* What the old lease reports is about its own generation. */
    fake_fail_calls(x->fp, "POST", "/v1/shell/exec", 1, FAWN_EIO);
    json_t *reply = NULL;
    int status = 0;
    int r = sbx_call(&reply, &status, old, "POST", "/v1/shell/exec", NULL, 1000);
    json_decref(reply);
    assert_int_not_equal(r, 0);
    assert_int_equal(sbx_fence(old, false, "stale holder lost its command"), 0);
    assert_false(fence_in_store(x, "", id, g2));
    assert_true(sbx_reusable(x->m, id, g2));

    /* Its release neither parks nor tears down the current generation. */
    give_back(x, old);
    assert_true(fake_generation_running(x->fp, g2));
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_string_equal(i.generation, g2);
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    assert_int_equal(i.holders[SBX_HOLD_EXECUTION], 1);
    assert_false(i.fenced);
    give_back(x, cur);
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_IDLE);
    sbx_lease *again = take(x, "t1", NULL);
    assert_string_equal(again->box.generation, g2);
}

static void scope_session_follows_the_generation(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *lead = take(x, "t1", "r1:lead");
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", lead->box.generation);
    give_back(x, lead);
    fake_kill(x->fp, id);
    lead = take(x, "t1", "r1:lead");
    assert_string_not_equal(lead->box.generation, g1);
    /* The scope's session lives in the box that answers now. */
    if (!fake_session_exists(x->fp, id, lead->session))
        fail_msg("scope session %s was not created in the new generation", lead->session);
}

static void a_fence_on_another_generation_does_not_block_this_one(void **state) {
    fx *x = *state;
    char g1[SBX_GENERATION_LEN + 1], old[SBX_GENERATION_LEN + 1], id[17];
    sid(id, "t1");
    park(x, g1, "t1");
    manager_stop(x);
    /* Records of the previous process: an older generation fenced (and not
     * provably gone: the provider can neither tell nor destroy during the
     * start), and one scope's fence on the current generation. */
    random_generation(old);
    assert_int_equal(store_fence_add(x->st, "", id, old, "uncertain kill"), 0);
    assert_int_equal(store_fence_add(x->st, "r9:lead", id, g1, "session lost"), 0);
    fake_set_probe_unknown(x->fp, true);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    manager_start(x);
    fake_set_probe_unknown(x->fp, false);
    fake_set_destroy_failures(x->fp, 0, 0, false);
    assert_true(fence_in_store(x, "", id, old));
    assert_false(sbx_reusable(x->m, id, old));
    assert_true(sbx_reusable(x->m, id, g1));

    int creates = fake_get_counts(x->fp).creates;
    sbx_lease *l = take(x, "t1", NULL);
    assert_string_equal(l->box.generation, g1);
    assert_int_equal(fake_get_counts(x->fp).creates, creates);
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_false(i.fenced);
    /* Only the fenced scope gets a new session. */
    sbx_lease *scoped = take(x, "t1", "r9:lead");
    assert_string_equal(scoped->box.generation, g1);
}

static void fenced_generation_is_never_handed_out_again(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *l = take(x, "t1", NULL);
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", l->box.generation);
    assert_int_equal(sbx_fence(l, false, "kill could not be confirmed"), 0);
    assert_false(sbx_reusable(x->m, id, g1));
    assert_true(fence_in_store(x, "", id, g1));
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_true(i.fenced);
    /* Its last release tears it down (the provider confirms it gone): the fence retires. */
    give_back(x, l);
    if (!WAIT_FOR(!fake_generation_present(x->fp, g1), SETTLE_MS))
        fail_msg("the last release of a fenced sandbox did not tear it down");
    assert_true(WAIT_FOR(!fence_in_store(x, "", id, g1), SETTLE_MS));
    assert_false(listed(x, "t1"));

    l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g1);
    assert_false(fake_generation_present(x->fp, g1));
    /* Retired only once the provider confirmed the fenced generation gone. */
    assert_false(fence_in_store(x, "", id, g1));
    assert_true(sbx_reusable(x->m, id, l->box.generation));
    assert_int_equal(fake_get_counts(x->fp).creates_done, 2);
}

static void fenced_held_sandbox_is_not_handed_to_another_holder(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *l = take(x, "t1", NULL);
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", l->box.generation);
    assert_int_equal(sbx_fence(l, false, "kill could not be confirmed"), 0);
    sbx_lease *other = NULL;
    int r = acquire_as(x, &other, "alice", "user", "t1", NULL, SBX_HOLD_UPLOAD, NULL, NULL);
    if (r == 0 && strcmp(other->box.generation, g1) == 0)
        fail_msg("a fenced generation still held by its first holder was handed to another");
    give_back(x, l);
    if (r == 0)
        give_back(x, other);
    /* Once its holder is gone it is torn down, and the fence retires. */
    sbx_lease *next = take(x, "t1", NULL);
    assert_string_not_equal(next->box.generation, g1);
    assert_false(fake_generation_present(x->fp, g1));
    assert_false(fence_in_store(x, "", id, g1));
}

static void fence_stays_while_the_fenced_box_cannot_be_destroyed(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *l = take(x, "t1", NULL);
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", l->box.generation);
    assert_int_equal(sbx_fence(l, false, "command outcome unknown"), 0);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, true);
    give_back(x, l);

    for (int attempt = 0; attempt < 2; attempt++) {
        int destroys = fake_get_counts(x->fp).destroys;
        int r = acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
        if (r == 0)
            fail_msg("attempt %d: got a lease on %s while the fenced box could not be destroyed",
                     attempt, l->box.generation);
        assert_int_equal(r, FAWN_EIO);
        assert_true(fence_in_store(x, "", id, g1));
        assert_false(sbx_reusable(x->m, id, g1));
        assert_true(fake_generation_present(x->fp, g1));
        /* Each acquisition tries the destroy again. */
        assert_true(fake_get_counts(x->fp).destroys > destroys);
    }

    fake_set_destroy_failures(x->fp, 0, 0, false);
    l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g1);
    assert_false(fake_generation_present(x->fp, g1));
    assert_false(fence_in_store(x, "", id, g1));
}

static void partial_destroy_is_retried_until_done(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *l = take(x, "t1", NULL);
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", l->box.generation);
    assert_int_equal(sbx_fence(l, false, "kill unconfirmed"), 0);
    fake_set_destroy_failures(x->fp, 2, FAWN_EIO, true);
    int destroys = fake_get_counts(x->fp).destroys;
    give_back(x, l);

    int failures = 0, r = 0;
    for (int attempt = 0; attempt < 4; attempt++) {
        r = acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
        if (r == 0)
            break;
        assert_int_equal(r, FAWN_EIO);
        assert_true(fence_in_store(x, "", id, g1));
        failures++;
    }
    if (r != 0)
        fail_msg("the destroy was not retried to completion: %d", r);
    if (failures == 0)
        fail_msg("a failing destroy of the fenced box was not returned to any acquisition");
    assert_string_not_equal(l->box.generation, g1);
    assert_false(fake_generation_present(x->fp, g1));
    assert_false(fence_in_store(x, "", id, g1));
    assert_true(fake_get_counts(x->fp).destroys - destroys >= 3);
}

static void create_answer_with_a_fenced_generation_is_refused(void **state) {
    fx *x = *state;
    char id[17], fenced[SBX_GENERATION_LEN + 1];
    sid(id, "t1");
    /* A fence the previous process left, which this start cannot retire. */
    manager_stop(x);
    random_generation(fenced);
    assert_int_equal(store_fence_add(x->st, "", id, fenced, "quarantined earlier"), 0);
    fake_set_probe_unknown(x->fp, true);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    manager_start(x);
    fake_set_probe_unknown(x->fp, false);
    fake_set_destroy_failures(x->fp, 0, 0, false);
    assert_false(sbx_reusable(x->m, id, fenced));
    /* The fenced box turns up answering, so the provider's create hands it back. */
    fake_plant_as(x->fp, fenced, "alice", "t1");
    sbx_lease *l = NULL;
    int r = acquire_as(x, &l, "alice", "user", "t1", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
    if (r == 0 && strcmp(l->box.generation, fenced) == 0)
        fail_msg("a fenced generation from the provider's create was handed out");
    /* It could be destroyed, so this acquisition goes on to a fresh generation. */
    if (r != 0)
        fail_msg("the fenced box was destroyed, yet the acquisition failed: %d %s", r,
                 fawn_errmsg());
    assert_string_not_equal(l->box.generation, fenced);
    assert_true(sbx_reusable(x->m, id, l->box.generation));
    assert_false(fake_generation_present(x->fp, fenced));
    assert_false(fence_in_store(x, "", id, fenced));
    assert_int_equal(fake_running_count(x->fp), 1);
}

static void transport_failure_in_a_call_fences_the_generation(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *l = take(x, "t1", NULL);
    /* Definite answers, success or not, fence nothing. */
    json_t *reply = NULL;
    int status = 0;
    assert_int_equal(sbx_call(&reply, &status, l, "GET", "/v1/sandbox", NULL, 1000), 0);
    assert_int_equal(status, 200);
    assert_string_equal(json_string_value(json_object_get(reply, "generation")), l->box.generation);
    json_decref(reply);
    reply = NULL;
    assert_int_equal(sbx_call(&reply, &status, l, "DELETE", "/v1/shell/sessions/none", NULL, 1000),
                     0);
    assert_int_equal(status, 404);
    json_decref(reply);
    assert_true(sbx_reusable(x->m, id, l->box.generation));
    give_back(x, l);

    const int codes[] = {FAWN_EIO, FAWN_ETIMEDOUT, FAWN_EPROTO};
    for (size_t c = 0; c < ARRAY_LEN(codes); c++) {
        l = take(x, "t1", NULL);
        char g[SBX_GENERATION_LEN + 1];
        snprintf(g, sizeof g, "%s", l->box.generation);
        fake_fail_calls(x->fp, "POST", "/v1/shell/exec", 1, codes[c]);
        json_t *body = json_pack("{s:s}", "command", "rm -rf /mnt/user-data/workspace/x");
        reply = NULL;
        int r = sbx_call(&reply, &status, l, "POST", "/v1/shell/exec", body, 1000);
        json_decref(body);
        json_decref(reply);
        assert_int_equal(r, codes[c]);
        if (!fence_in_store(x, "", id, g))
            fail_msg("%s mid-exchange did not fence the generation", fawn_strerror(codes[c]));
        assert_false(sbx_reusable(x->m, id, g));
        give_back(x, l);
        l = take(x, "t1", NULL);
        assert_string_not_equal(l->box.generation, g);
        give_back(x, l);
    }
}

/* ---- scopes ---- */

static void each_scope_gets_its_own_session(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *lead = take(x, "t1", "r1:lead");
    assert_true(strncmp(lead->session, "scope-", 6) == 0);
    assert_true(is_lower_hex(lead->session + 6, 32));
    assert_string_equal(lead->scope, "r1:lead");
    assert_true(fake_session_exists(x->fp, id, lead->session));

    sbx_lease *lead2 = take(x, "t1", "r1:lead");
    assert_string_equal(lead2->session, lead->session);
    assert_int_equal(fake_get_counts(x->fp).sessions_created, 1);

    sbx_lease *sub = take(x, "t1", "r1:sub1");
    sbx_lease *sub2 = take(x, "t1", "r1:sub1");
    assert_string_not_equal(sub->session, lead->session);
    assert_string_equal(sub2->session, sub->session);
    assert_int_equal(fake_get_counts(x->fp).sessions_created, 2);
    assert_int_equal(fake_session_count(x->fp, id), 2);
    sbx_lease *plain = take(x, "t1", NULL);
    assert_string_equal(plain->session, "");
    assert_string_equal(plain->box.generation, lead->box.generation);
    assert_string_equal(sub->box.generation, lead->box.generation);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);

    char sub_session[SBX_SESSION_ID_MAX + 1], lead_session[SBX_SESSION_ID_MAX + 1];
    snprintf(sub_session, sizeof sub_session, "%s", sub->session);
    snprintf(lead_session, sizeof lead_session, "%s", lead->session);
    char *sub_delete = strf("/v1/shell/sessions/%s", sub_session);
    give_back(x, sub);
    assert_true(fake_session_exists(x->fp, id, sub_session));
    assert_int_equal(fake_call_count(x->fp, "DELETE", sub_delete), 0);
    give_back(x, sub2);
    assert_int_equal(fake_call_count(x->fp, "DELETE", sub_delete), 1);
    assert_false(fake_session_exists(x->fp, id, sub_session));
    assert_true(fake_session_exists(x->fp, id, lead_session));
    assert_int_equal(fake_call_count(x->fp, "DELETE", "/v1/shell/sessions/"), 1);
    free(sub_delete);

    give_back(x, lead);
    give_back(x, lead2);
    assert_false(fake_session_exists(x->fp, id, lead_session));
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_ACTIVE);
    give_back(x, plain);
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_IDLE);

    /* A scope acquired again after it ended gets a session again. */
    sub = take(x, "t1", "r1:sub1");
    assert_true(fake_session_exists(x->fp, id, sub->session));
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
}

static void scope_fence_replaces_only_that_scopes_session(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *lead = take(x, "t1", "r1:lead");
    sbx_lease *sub = take(x, "t1", "r1:sub1");
    char g1[SBX_GENERATION_LEN + 1], old[SBX_SESSION_ID_MAX + 1];
    snprintf(g1, sizeof g1, "%s", sub->box.generation);
    snprintf(old, sizeof old, "%s", sub->session);

    assert_int_equal(sbx_fence(sub, true, "command outcome unknown"), 0);
    assert_true(fence_in_store(x, "r1:sub1", id, g1));
    assert_false(fence_in_store(x, "", id, g1));
    assert_false(fence_in_store(x, "r1:lead", id, g1));
    assert_true(sbx_reusable(x->m, id, g1));
    give_back(x, sub);

    sub = take(x, "t1", "r1:sub1");
    assert_string_equal(sub->box.generation, g1);
    assert_string_not_equal(sub->session, old);
    assert_true(fake_session_exists(x->fp, id, sub->session));
    assert_true(fake_session_exists(x->fp, id, lead->session));
    sbx_lease *lead2 = take(x, "t1", "r1:lead");
    assert_string_equal(lead2->session, lead->session);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
}

/* Stopping a scope's commands goes through the session its lease holds:
 * no acquisition (no gate, no health check, nothing started or created),
 * also while a destroy waits for the holders (an acquisition would be
 * refused then). */
static void killing_a_scope_acquires_nothing(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *l = take(x, "t1", "r1:lead");
    char kill_path[128];
    snprintf(kill_path, sizeof kill_path, "/v1/shell/sessions/%s/kill", l->session);
    fake_counts before = fake_get_counts(x->fp);
    assert_int_equal(sbx_kill_scope(x->m, "alice", "t1", "r1:lead", 1000), 0);
    enum sbx_destroy_outcome o;
    assert_int_equal(sbx_destroy(&o, x->m, "alice", "t1"), 0);
    assert_int_equal(o, SBX_DESTROY_DEFERRED);
    assert_int_equal(sbx_kill_scope(x->m, "alice", "t1", "r1:lead", 1000), 0);
    assert_int_equal(fake_call_count(x->fp, "POST", kill_path), 2);
    fake_counts after = fake_get_counts(x->fp);
    assert_int_equal(after.health_checks, before.health_checks);
    assert_int_equal(after.creates, before.creates);
    assert_int_equal(after.sessions_created, before.sessions_created);
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(holders_total(&i), 1);
    /* A scope no lease holds has nothing running: nothing is sent. */
    int ops = fake_total_ops(x->fp);
    assert_int_equal(sbx_kill_scope(x->m, "alice", "t1", "r2:lead", 1000), FAWN_ENOENT);
    assert_int_equal(sbx_kill_scope(x->m, "alice", "t2", "r1:lead", 1000), FAWN_ENOENT);
    assert_int_equal(sbx_kill_scope(x->m, "alice", "t1", "not a scope", 1000), FAWN_ENOENT);
    assert_int_equal(fake_total_ops(x->fp), ops);
    /* A kill whose outcome is unknown fences the scope, not the sandbox. */
    fake_fail_calls(x->fp, "POST", kill_path, 1, FAWN_EIO);
    assert_int_equal(sbx_kill_scope(x->m, "alice", "t1", "r1:lead", 1000), FAWN_EIO);
    assert_true(fence_in_store(x, "r1:lead", id, l->box.generation));
    assert_false(fence_in_store(x, "", id, l->box.generation));
    give_back(x, l);
}

static void broken_session_creation_fences_the_scope_not_the_sandbox(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    sbx_lease *plain = take(x, "t1", NULL);
    char g1[SBX_GENERATION_LEN + 1];
    snprintf(g1, sizeof g1, "%s", plain->box.generation);

    fake_fail_calls(x->fp, "POST", "/v1/shell/sessions", 1, FAWN_EIO);
    sbx_lease *l = NULL;
    int r = acquire_as(x, &l, "alice", "user", "t1", "r2:lead", SBX_HOLD_EXECUTION, NULL, NULL);
    char broken[SBX_SESSION_ID_MAX + 1];
    fake_last_session_request(x->fp, broken);
    assert_true(broken[0] != '\0');
    assert_true(fence_in_store(x, "r2:lead", id, g1));
    assert_false(fence_in_store(x, "", id, g1));
    assert_true(sbx_reusable(x->m, id, g1));
    if (r != 0) {
        assert_int_equal(r, FAWN_EIO);
        assert_null(l);
        l = take(x, "t1", "r2:lead");
    }
    assert_string_equal(l->box.generation, g1);
    assert_string_not_equal(l->session, broken);
    assert_true(fake_session_exists(x->fp, id, l->session));
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
}

typedef struct scoper {
    fx *x;
    pthread_barrier_t *start;
    char scope[SBX_SCOPE_MAX + 1];
    int rc;
    sbx_lease *lease;
} scoper;

static void *scoper_run(void *arg) {
    scoper *s = arg;
    sbx_request req = {.who = {.user = "alice", .role = "user"},
                       .thread = "t1",
                       .kind = SBX_HOLD_EXECUTION,
                       .scope = s->scope};
    pthread_barrier_wait(s->start);
    s->rc = sbx_acquire(&s->lease, s->x->m, &req);
    return NULL;
}

static void concurrent_acquisitions_of_scopes_get_one_session_each(void **state) {
    fx *x = *state;
    enum { SCOPERS = 12, SCOPES = 4 };
    char id[17];
    sid(id, "t1");
    fake_set_create_delay(x->fp, 10, true);
    scoper s[SCOPERS];
    pthread_t t[SCOPERS];
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, SCOPERS);
    for (int i = 0; i < SCOPERS; i++) {
        s[i] = (scoper){.x = x, .start = &start, .rc = 1};
        snprintf(s[i].scope, sizeof s[i].scope, "r1:%s%d", i % SCOPES ? "sub" : "lead", i % SCOPES);
        assert_int_equal(pthread_create(&t[i], NULL, scoper_run, &s[i]), 0);
    }
    for (int i = 0; i < SCOPERS; i++) {
        pthread_join(t[i], NULL);
        if (s[i].rc == 0)
            hold(x, s[i].lease);
    }
    pthread_barrier_destroy(&start);
    for (int i = 0; i < SCOPERS; i++) {
        if (s[i].rc != 0)
            fail_msg("scope %s: %d", s[i].scope, s[i].rc);
        assert_string_equal(s[i].lease->session, s[i % SCOPES].lease->session);
        assert_true(fake_session_exists(x->fp, id, s[i].lease->session));
        for (int j = 0; j < SCOPES; j++)
            if (j != i % SCOPES)
                assert_string_not_equal(s[i].lease->session, s[j].lease->session);
    }
    assert_int_equal(fake_get_counts(x->fp).sessions_created, SCOPES);
    assert_int_equal(fake_session_count(x->fp, id), SCOPES);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
}

static void session_refused_by_the_box_fences_nothing(void **state) {
    fx *x = *state;
    char id[17];
    sid(id, "t1");
    for (int i = 0; i < FAKE_SESSIONS_MAX; i++) {
        char scope[32];
        snprintf(scope, sizeof scope, "r1:agent%d", i);
        take(x, "t1", scope);
    }
    /* One session too many: the box answers 413, a definite refusal. */
    sbx_lease *l = NULL;
    int r = acquire_as(x, &l, "alice", "user", "t1", "r1:onemore", SBX_HOLD_EXECUTION, NULL, NULL);
    assert_int_not_equal(r, 0);
    assert_null(l);
    char g[SBX_GENERATION_LEN + 1];
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    snprintf(g, sizeof g, "%s", i.generation);
    assert_false(fence_in_store(x, "", id, g));
    assert_false(fence_in_store(x, "r1:onemore", id, g));
    assert_true(sbx_reusable(x->m, id, g));
    assert_int_equal(holders_total(&i), FAKE_SESSIONS_MAX);
}

static void cancelled_waiter_gets_nothing(void **state) {
    fx *x = *state;
    fake_hold_creates(x->fp);
    acquisition first, waiter;
    acquisition_start(&first, x, "t1", SBX_HOLD_EXECUTION);
    bool started = fake_wait_held_creates(x->fp, 1, SETTLE_MS);
    /* A second acquisition waits for the first one's create, and is cancelled. */
    acquisition_start(&waiter, x, "t1", SBX_HOLD_UPLOAD);
    bool waiting = acquisition_waits(&waiter, SETTLE_MS);
    atomic_store(&waiter.cancel.cancelled, true);
    bool ended = WAIT_FOR(atomic_load(&waiter.done), SETTLE_MS); /* the create is still held */
    fake_release_creates(x->fp);
    int r = acquisition_join(&waiter);
    int rf = acquisition_join(&first);
    if (!started || !waiting)
        fail_msg("the create never began (%d) or the second acquisition never waited (%d)", started,
                 waiting);
    if (!ended)
        fail_msg("the cancelled acquisition went on waiting for the sandbox");
    assert_int_equal(rf, 0);
    assert_int_equal(r, FAWN_ECANCELED);
    assert_null(waiter.lease);
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.holders[SBX_HOLD_EXECUTION], 1);
    assert_int_equal(i.holders[SBX_HOLD_UPLOAD], 0);
    assert_int_equal(fake_get_counts(x->fp).creates, 1);
}

/* sbx_destroy of alice's thread on a thread of its own. */
typedef struct destroyer {
    fx *x;
    const char *thread;
    atomic_int tid;
    atomic_bool done;
    int rc;
    enum sbx_destroy_outcome outcome;
} destroyer;

static void *destroyer_main(void *arg) {
    destroyer *d = arg;
    atomic_store(&d->tid, (int)syscall(SYS_gettid));
    d->rc = sbx_destroy(&d->outcome, d->x->m, "alice", d->thread);
    atomic_store(&d->done, true);
    return NULL;
}

static void destroy_racing_a_slow_create_leaves_nothing_unowned(void **state) {
    fx *x = *state;
    fake_hold_creates(x->fp);
    acquisition w;
    acquisition_start(&w, x, "t1", SBX_HOLD_EXECUTION);
    bool started = fake_wait_held_creates(x->fp, 1, SETTLE_MS);
    /* The destroy comes while the box starts: it waits for the start. */
    destroyer d = {.x = x, .thread = "t1", .rc = 1, .outcome = SBX_DESTROYED};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, destroyer_main, &d), 0);
    bool waiting = WAIT_FOR(atomic_load(&d.done) ||
                                (atomic_load(&d.tid) && thread_sleeps(atomic_load(&d.tid))),
                            SETTLE_MS);
    fake_release_creates(x->fp);
    pthread_join(t, NULL);
    acquisition_join(&w);
    if (!started || !waiting)
        fail_msg("the create never began (%d) or the destroy never waited (%d)", started, waiting);
    int r = d.rc;
    enum sbx_destroy_outcome out = d.outcome;
    if (r != 0)
        fail_msg("destroy during a start: %d %s", r, fawn_errmsg());
    if (w.rc == 0 && out == SBX_DESTROYED)
        fail_msg("destroy reported done while the starting acquisition got the sandbox (%s)",
                 w.lease->box.generation);
    if (w.rc == 0) {
        char g[SBX_GENERATION_LEN + 1];
        snprintf(g, sizeof g, "%s", w.lease->box.generation);
        give_back(x, w.lease);
        assert_true(WAIT_FOR(!fake_generation_present(x->fp, g), SETTLE_MS));
    }
    assert_int_equal(fake_running_count(x->fp), 0);
    expect_not_held(x, "t1");
}

/* ---- restart ---- */

static void restart_adopts_recorded_boxes_and_cleans_the_rest(void **state) {
    fx *x = *state;
    char g1[SBX_GENERATION_LEN + 1], g2[SBX_GENERATION_LEN + 1], g6[SBX_GENERATION_LEN + 1];
    char s1[17], s2[17], s4[17], s5[17];
    sid(s1, "t1");
    sid(s2, "t2");
    sid(s4, "t4");
    sid(s5, "t5");
    park(x, g1, "t1");
    park(x, g2, "t2");
    park(x, g6, "t6");
    char g7[SBX_GENERATION_LEN + 1], s7[17];
    sid(s7, "t7");
    park(x, g7, "t7");
    manager_stop(x);
    fake_kill(x->fp, s7); /* exited while nobody watched: leftovers remain */
    /* Left by the previous process or appearing meanwhile: */
    assert_int_equal(store_fence_add(x->st, "", s2, g2, "outcome unknown at shutdown"), 0);
    fake_set_health(x->fp, g6, FAWN_ETIMEDOUT);
    char stray[SBX_GENERATION_LEN + 1], g4[SBX_GENERATION_LEN + 1], other[SBX_GENERATION_LEN + 1];
    fake_plant(x->fp, stray, "mallory", "stray");
    fake_plant(x->fp, g4, "alice", "t4");
    random_generation(other);
    store_sandbox rec = {.user = "alice", .thread = "t4"};
    snprintf(rec.sandbox_id, sizeof rec.sandbox_id, "%s", s4);
    snprintf(rec.generation, sizeof rec.generation, "%s", other);
    snprintf(rec.endpoint, sizeof rec.endpoint, "unix:/nonexistent/fake-%s.sock", s4);
    assert_int_equal(store_sandbox_put(x->st, &rec), 0);
    char absent[SBX_GENERATION_LEN + 1];
    random_generation(absent);
    assert_int_equal(store_fence_add(x->st, "", s5, absent, "gone already"), 0);
    int creates = fake_get_counts(x->fp).creates;

    manager_start(x);
    if (!WAIT_FOR(fake_running_count(x->fp) == 1 && !fake_generation_present(x->fp, stray) &&
                      !fake_generation_present(x->fp, g2) && !fake_generation_present(x->fp, g4) &&
                      !fake_generation_present(x->fp, g6) && !fake_generation_present(x->fp, g7),
                  2000))
        fail_msg("after the restart: %d running; stray %d, fenced %d, unrecorded generation %d, "
                 "unknown health %d, stopped %d present",
                 fake_running_count(x->fp), fake_generation_present(x->fp, stray),
                 fake_generation_present(x->fp, g2), fake_generation_present(x->fp, g4),
                 fake_generation_present(x->fp, g6), fake_generation_present(x->fp, g7));
    assert_true(fake_generation_running(x->fp, g1));
    assert_true(WAIT_FOR(!fence_in_store(x, "", s2, g2), SETTLE_MS));
    assert_true(WAIT_FOR(!fence_in_store(x, "", s5, absent), SETTLE_MS));

    /* The recorded healthy box is in the warm pool: no create to reuse it. */
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_int_equal(i.state, SBX_STATE_IDLE);
    assert_string_equal(i.generation, g1);
    assert_string_equal(i.sandbox_id, s1);
    sbx_lease *l = take(x, "t1", NULL);
    assert_string_equal(l->box.generation, g1);
    assert_int_equal(fake_get_counts(x->fp).creates, creates);
}

/* A shell session left in sandbox_id's box (generation) by someone the
 * manager no longer knows: a run that died with the previous process. */
static void leave_session(fx *x, const char *sandbox_id, const char *generation, const char *id) {
    sbx_provider *p = fake_provider_iface(x->fp);
    sbx_box box = {0};
    snprintf(box.sandbox_id, sizeof box.sandbox_id, "%s", sandbox_id);
    snprintf(box.generation, sizeof box.generation, "%s", generation);
    json_t *body = json_pack("{s:s}", "id", id), *reply = NULL;
    int status = 0;
    assert_int_equal(
        p->call(p->ctx, &reply, &status, &box, "POST", "/v1/shell/sessions", body, 1000), 0);
    assert_int_equal(status, 200);
    json_decref(body);
    json_decref(reply);
}

/* After a restart no scope is live, so every shell session in an adopted
 * box is a dead run's: adoption ends them all (their processes with them).
 * A box whose sessions cannot all be ended is destroyed, not adopted. */
static void adoption_ends_the_sessions_of_dead_runs(void **state) {
    fx *x = *state;
    char g1[SBX_GENERATION_LEN + 1], g2[SBX_GENERATION_LEN + 1], s1[17], s2[17];
    sid(s1, "t1");
    sid(s2, "t2");
    park(x, g1, "t1");
    park(x, g2, "t2");
    manager_stop(x);
    leave_session(x, s1, g1, "scope-dead1");
    leave_session(x, s1, g1, "another-client");
    leave_session(x, s2, g2, "scope-dead2");
    fake_fail_calls(x->fp, "DELETE", "/v1/shell/sessions/scope-dead2", 1, FAWN_EIO);

    manager_start(x);
    assert_int_equal(fake_session_count(x->fp, s1), 0);
    sbx_info i;
    assert_true(info_of(x, &i, "alice", "t1"));
    assert_string_equal(i.generation, g1);
    assert_int_equal(i.state, SBX_STATE_IDLE);
    assert_false(fake_generation_present(x->fp, g2));
    assert_false(listed(x, "t2"));
    /* The adopted box serves the thread's next run, with a session of its own. */
    sbx_lease *l = take(x, "t1", "r9:lead");
    assert_string_equal(l->box.generation, g1);
    assert_int_equal(fake_session_count(x->fp, s1), 1);
    assert_true(fake_session_exists(x->fp, s1, l->session));
}

static void restart_fences_a_box_of_unknown_health_it_cannot_destroy(void **state) {
    fx *x = *state;
    char g6[SBX_GENERATION_LEN + 1], s6[17];
    sid(s6, "t6");
    park(x, g6, "t6");
    manager_stop(x);
    fake_set_health(x->fp, g6, FAWN_ETIMEDOUT);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    manager_start(x);
    /* Neither adopted nor removed: its state is uncertain, so it is fenced. */
    assert_true(fake_generation_present(x->fp, g6));
    if (sbx_reusable(x->m, s6, g6))
        fail_msg("a box whose health was unknown at the start, and that could not be "
                 "destroyed, is not fenced");
    assert_true(fence_in_store(x, "", s6, g6));
    /* Even once it answers again it is never handed out. */
    fake_set_health(x->fp, g6, 0);
    fake_set_destroy_failures(x->fp, 0, 0, false);
    sbx_lease *l = NULL;
    int r = acquire_as(x, &l, "alice", "user", "t6", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
    if (r == 0 && strcmp(l->box.generation, g6) == 0)
        fail_msg("the box of unknown health was handed out after the restart");
    assert_int_equal(r, 0);
    assert_false(fake_generation_present(x->fp, g6));
    assert_false(fence_in_store(x, "", s6, g6));
}

/* ---- attestation ---- */

/* An attested box is handed out; one refused or of unknown attestation is
 * fenced (persistently), destroyed, and the acquisition fails. */
static void attestation_gates_every_new_box(void **state) {
    fx *x = *state;
    char s1[17];
    sid(s1, "t1");
    fake_set_attestation(x->fp, true, SBX_ATTESTED);
    sbx_lease *l = take(x, "t1", NULL);
    assert_int_equal(fake_get_counts(x->fp).attests, 1);
    give_back(x, l);
    /* Reuse of the parked box does not ask again (same generation, healthy). */
    give_back(x, take(x, "t1", NULL));
    assert_int_equal(fake_get_counts(x->fp).attests, 1);

    const enum sbx_attestation bad[] = {SBX_REFUSED, SBX_ATTEST_UNKNOWN};
    const int codes[] = {FAWN_EPERM, FAWN_EIO};
    const char *threads[] = {"t2", "t3"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char s[17];
        sid(s, threads[i]);
        fake_set_attestation(x->fp, true, bad[i]);
        fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false); /* the box lingers */
        sbx_lease *none = NULL;
        assert_int_equal(
            acquire_as(x, &none, "alice", "user", threads[i], NULL, SBX_HOLD_EXECUTION, NULL, NULL),
            codes[i]);
        assert_null(none);
        store_fence *fences = NULL;
        size_t n = 0;
        assert_int_equal(store_fence_list(x->st, &fences, &n, s), 0);
        assert_int_equal(n, 1);
        assert_string_equal(fences[0].reason,
                            bad[i] == SBX_REFUSED ? "attestation refused" : "attestation unknown");
        assert_false(sbx_reusable(x->m, s, fences[0].generation));
        char gen[SBX_GENERATION_LEN + 1];
        snprintf(gen, sizeof gen, "%s", fences[0].generation);
        free(fences);
        /* After a restart the box, still there, is neither adopted nor
         * attested again: its fence holds. */
        int attests = fake_get_counts(x->fp).attests;
        manager_stop(x);
        fake_set_attestation(x->fp, true, SBX_ATTESTED);
        manager_start(x);
        assert_true(fake_generation_present(x->fp, gen));
        assert_true(fence_in_store(x, "", s, gen));
        /* The parked boxes (t1, and t2 after the first round) are attested
         * again before they are adopted. */
        assert_int_equal(fake_get_counts(x->fp).attests, attests + 1 + (int)i);
        /* Once the provider can remove it, the next acquisition gets a new box. */
        fake_set_destroy_failures(x->fp, 0, 0, false);
        sbx_lease *fresh = take(x, threads[i], NULL);
        assert_string_not_equal(fresh->box.generation, gen);
        assert_false(fake_generation_present(x->fp, gen));
        assert_false(fence_in_store(x, "", s, gen));
        give_back(x, fresh);
    }
}

/* A box adopted after a restart is attested first; one refused then is
 * fenced and removed, never adopted. */
static void attestation_gates_adoption(void **state) {
    fx *x = *state;
    char g1[SBX_GENERATION_LEN + 1], s1[17];
    sid(s1, "t1");
    park(x, g1, "t1");
    manager_stop(x);
    fake_set_attestation(x->fp, true, SBX_REFUSED);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    manager_start(x);
    assert_int_equal(fake_get_counts(x->fp).attests, 1);
    assert_true(fence_in_store(x, "", s1, g1));
    assert_int_equal(listed_count(x), 0);
    fake_set_destroy_failures(x->fp, 0, 0, false);
    fake_set_attestation(x->fp, true, SBX_ATTESTED);
    sbx_lease *l = take(x, "t1", NULL);
    assert_string_not_equal(l->box.generation, g1);
    assert_false(fence_in_store(x, "", s1, g1));
}

static void restart_keeps_fences_it_cannot_retire(void **state) {
    fx *x = *state;
    char g2[SBX_GENERATION_LEN + 1], s2[17], s5[17], absent[SBX_GENERATION_LEN + 1];
    sid(s2, "t2");
    sid(s5, "t5");
    park(x, g2, "t2");
    manager_stop(x);
    assert_int_equal(store_fence_add(x->st, "", s2, g2, "outcome unknown at shutdown"), 0);
    random_generation(absent);
    assert_int_equal(store_fence_add(x->st, "", s5, absent, "maybe gone"), 0);

    /* The provider can neither tell nor destroy: both fences survive. */
    fake_set_probe_unknown(x->fp, true);
    fake_set_destroy_failures(x->fp, -1, FAWN_EIO, false);
    manager_start(x);
    sleep_ms(200);
    assert_true(fence_in_store(x, "", s2, g2));
    assert_true(fence_in_store(x, "", s5, absent));
    assert_true(fake_generation_present(x->fp, g2));
    assert_false(sbx_reusable(x->m, s2, g2));
    sbx_lease *l = NULL;
    int r = acquire_as(x, &l, "alice", "user", "t2", NULL, SBX_HOLD_EXECUTION, NULL, NULL);
    if (r == 0)
        fail_msg("handed out %s while the fenced box could not be destroyed", l->box.generation);
    assert_null(l);

    /* The next start, with a working provider, finishes the job. */
    manager_stop(x);
    fake_set_probe_unknown(x->fp, false);
    fake_set_destroy_failures(x->fp, 0, 0, false);
    manager_start(x);
    assert_true(WAIT_FOR(!fake_generation_present(x->fp, g2), SETTLE_MS));
    assert_true(WAIT_FOR(!fence_in_store(x, "", s2, g2), SETTLE_MS));
    assert_true(WAIT_FOR(!fence_in_store(x, "", s5, absent), SETTLE_MS));
    assert_int_equal(fake_running_count(x->fp), 0);
}

static void names_of_states_and_holders(void **state) {
    assert_string_equal(sbx_state_name(SBX_STATE_STARTING), "starting");
    assert_string_equal(sbx_state_name(SBX_STATE_ACTIVE), "active");
    assert_string_equal(sbx_state_name(SBX_STATE_IDLE), "idle");
    assert_string_equal(sbx_state_name(SBX_STATE_STOPPING), "stopping");
    assert_string_equal(sbx_holder_name(SBX_HOLD_EXECUTION), "execution");
    assert_string_equal(sbx_holder_name(SBX_HOLD_UPLOAD), "upload");
    assert_string_equal(sbx_holder_name(SBX_HOLD_FORK), "fork");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(gate_denies_role_without_sandbox_execute, setup, teardown),
        cmocka_unit_test_setup_teardown(attestation_gates_every_new_box, setup, teardown),
        cmocka_unit_test_setup_teardown(attestation_gates_adoption, setup, teardown),
        cmocka_unit_test_setup_teardown(gate_disabled_policy_checks_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(gate_unknown_role_follows_fail_closed, setup, teardown),
        cmocka_unit_test_setup_teardown(gate_decision_is_made_once_per_run, setup, teardown),
        cmocka_unit_test_setup_teardown(gate_checks_reuse_of_a_held_sandbox, setup, teardown),
        cmocka_unit_test_setup_teardown(acquire_rejects_bad_names, setup, teardown),
        cmocka_unit_test_setup_teardown(refusals_leave_out_parameters_defined, setup, teardown),
        cmocka_unit_test_setup_teardown(
            acquisitions_serialize_per_thread_and_run_in_parallel_across, setup, teardown),
        cmocka_unit_test_setup_teardown(holders_keep_the_sandbox_active_until_the_last_release,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(users_with_the_same_thread_name_get_separate_sandboxes,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(destroy_while_held_is_deferred_until_the_last_release,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(destroy_without_holders_is_immediate_and_failures_surface,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(failed_deferred_destroy_is_retried_and_blocks_nothing,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(cancelled_create_starts_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(cancelled_acquisition_parks_what_it_started, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(cancelled_acquisition_hands_its_sandbox_to_a_waiting_one,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(failed_create_is_returned_and_leaves_nothing_held, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(precancelled_acquisition_starts_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_sandbox_is_torn_down_after_the_idle_timeout, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(idle_timeout_zero_keeps_parked_sandboxes, setup, teardown),
        cmocka_unit_test_setup_teardown(idle_timeout_longer_than_the_uptime_reaps_nothing, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(failing_idle_teardown_backs_off, setup, teardown),
        cmocka_unit_test_setup_teardown(keepalive_reaches_every_box_the_manager_holds, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(replicas_cap_evicts_the_oldest_idle_never_an_active_one,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(held_sandboxes_survive_reaper_and_cap_churn, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(dead_sandbox_is_replaced_on_reuse, setup, teardown),
        cmocka_unit_test_setup_teardown(unknown_health_fences_and_replaces_the_generation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(stale_lease_never_acts_on_the_new_generation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(scope_session_follows_the_generation, setup, teardown),
        cmocka_unit_test_setup_teardown(a_fence_on_another_generation_does_not_block_this_one,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(fenced_generation_is_never_handed_out_again, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(fenced_held_sandbox_is_not_handed_to_another_holder, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(fence_stays_while_the_fenced_box_cannot_be_destroyed, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(partial_destroy_is_retried_until_done, setup, teardown),
        cmocka_unit_test_setup_teardown(create_answer_with_a_fenced_generation_is_refused, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(transport_failure_in_a_call_fences_the_generation, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(each_scope_gets_its_own_session, setup, teardown),
        cmocka_unit_test_setup_teardown(scope_fence_replaces_only_that_scopes_session, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(broken_session_creation_fences_the_scope_not_the_sandbox,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(killing_a_scope_acquires_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(concurrent_acquisitions_of_scopes_get_one_session_each,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(session_refused_by_the_box_fences_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(cancelled_waiter_gets_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(destroy_racing_a_slow_create_leaves_nothing_unowned, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(restart_adopts_recorded_boxes_and_cleans_the_rest, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(adoption_ends_the_sessions_of_dead_runs, setup, teardown),
        cmocka_unit_test_setup_teardown(restart_fences_a_box_of_unknown_health_it_cannot_destroy,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(restart_keeps_fences_it_cannot_retire, setup, teardown),
        cmocka_unit_test(names_of_states_and_holders),
    };
    return cmocka_run_group_tests_name("manager", tests, NULL, NULL);
}
