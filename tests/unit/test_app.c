/* The application core: services built once from the configuration, and
 * app_run_start, the one way a run is started on behalf of a user. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "app/app.h"
#include "base/base.h"
#include "config/config.h"
#include "store/store.h"
#include "unit/test_store_open.h"

/* Longest wait for a run that needs no sandbox to end: only catches hangs. */
#define RUN_END_CEILING_MS 60000

typedef struct fx {
    char home[64];
    fawn_config cfg;
    store *st;
    app *a;
    store_user user; /* role "user": may use the model "small" only */
} fx;

static json_t *parse(const char *text) {
    json_t *j = json_loads(text, 0, NULL);
    if (!j)
        fail_msg("test JSON does not parse: %s", text);
    return j;
}

/* A script model named name that answers "hello" once. */
static char *script_model(const char *home, const char *name) {
    char *fixture = strf("%s/%s.json", home, name);
    FILE *f = fopen(fixture, "w");
    assert_non_null(f);
    fputs("{\"replies\":[{\"content\":\"hello\"}]}", f);
    fclose(f);
    char *entry = strf("{\"name\":\"%s\",\"provider\":\"script\",\"fixture\":\"%s\"}", name,
                       fixture);
    free(fixture);
    return entry;
}

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-app-XXXXXX");
    if (!x || !mkdtemp(x->home) || config_defaults(&x->cfg) < 0)
        return -1;
    free(x->cfg.home);
    x->cfg.home = strdup(x->home);
    char *small = script_model(x->home, "small"), *big = script_model(x->home, "big");
    char *models = strf("[%s,%s]", big, small);
    x->cfg.models = parse(models);
    free(models);
    free(small);
    free(big);
    x->cfg.authorization = parse("{\"enabled\": true, \"roles\": {\"user\": {\"models\": "
                                 "{\"allow\": [\"small\"]}}}}");
    char *db = strf("%s/fawn.db", x->home);
    int r = test_store_open(&x->st, db);
    free(db);
    if (r == 0)
        r = store_user_create(x->st, &x->user, "alice", "!", "user");
    bool existed;
    store_thread t;
    if (r == 0)
        r = store_thread_create(x->st, &t, &existed, x->user.id, "t1", NULL);
    store_thread_clear(&t);
    if (r == 0)
        r = app_open(&x->a, &x->cfg, x->st);
    *state = x;
    return r;
}

static int teardown(void **state) {
    fx *x = *state;
    app_close(x->a);
    store_close(x->st);
    char *cmd = strf("rm -rf %s", x->home);
    int r = system(cmd);
    free(cmd);
    config_free(&x->cfg);
    free(x);
    return r;
}

static void a_bad_policy_opens_nothing(void **state) {
    fx *x = *state;
    fawn_config cfg = x->cfg;
    cfg.authorization = parse("{\"roles\": {\"user\": {\"models\": {\"deny\": \"big\"}}}}");
    app *a;
    POISON(a);
    assert_int_equal(app_open(&a, &cfg, x->st), FAWN_ECONFIG);
    assert_null(a);
    check_contains("error", fawn_errmsg(), "authorization.roles.user.models.deny");
    json_decref(cfg.authorization);
}

/* A refused run leaves nothing behind: no run, no thread directories. */
static void a_run_needs_a_model_the_role_may_use(void **state) {
    fx *x = *state;
    char run_id[37];
    POISON(run_id);
    app_run_spec spec = {.thread_id = "t1", .model_name = "big", .recursion_limit = 5};
    assert_int_equal(app_run_start(run_id, x->a, &x->user, &spec), FAWN_EPERM);
    assert_string_equal(run_id, "");
    store_run *runs;
    size_t n;
    assert_int_equal(store_run_list(x->st, &runs, &n, x->user.id, "t1", 10, 0), 0);
    assert_int_equal(n, 0);
    free(runs);
    int fd;
    POISON(fd);
    assert_int_equal(app_thread_files_open(&fd, x->a, x->user.id, "t1", false), FAWN_ENOENT);
    assert_int_equal(fd, -1);
}

/* The run's status once it has ended, waiting for it (ceiling: hangs). */
static void wait_for_end(store_run *run, fx *x, const char *run_id) {
    for (int64_t deadline = fawn_now_ms() + RUN_END_CEILING_MS;;) {
        assert_int_equal(store_run_get(x->st, run, x->user.id, "t1", run_id), 0);
        if (strcmp(run->status, "pending") != 0 && strcmp(run->status, "running") != 0)
            return;
        store_run_clear(run);
        if (fawn_now_ms() > deadline)
            fail_msg("run %s did not end", run_id);
        usleep(10000);
    }
}

static void a_started_run_has_its_files_and_ends(void **state) {
    fx *x = *state;
    char run_id[37];
    json_t *input = parse("[{\"type\":\"human\",\"content\":\"hi\",\"id\":\"h1\"}]");
    app_run_spec spec = {.thread_id = "t1",
                         .model_name = "small",
                         .recursion_limit = 5,
                         .input = input,
                         .kwargs = "{}"};
    assert_int_equal(app_run_start(run_id, x->a, &x->user, &spec), 0);
    json_decref(input);
    assert_int_equal(strlen(run_id), 36);
    int fd;
    assert_int_equal(app_thread_files_open(&fd, x->a, x->user.id, "t1", false), 0);
    assert_true(fd >= 0);
    close(fd);
    store_run run;
    wait_for_end(&run, x, run_id);
    assert_string_equal(run.status, "success");
    store_run_clear(&run);
}

/* After app_stop, no run starts. */
static void a_stopped_app_refuses_runs(void **state) {
    fx *x = *state;
    app_stop(x->a);
    app_stop(x->a); /* again: nothing */
    char run_id[37];
    app_run_spec spec = {
        .thread_id = "t1", .model_name = "small", .recursion_limit = 5, .kwargs = "{}"};
    assert_int_equal(app_run_start(run_id, x->a, &x->user, &spec), FAWN_EBUSY);
    assert_string_equal(run_id, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(a_bad_policy_opens_nothing, setup, teardown),
        cmocka_unit_test_setup_teardown(a_run_needs_a_model_the_role_may_use, setup, teardown),
        cmocka_unit_test_setup_teardown(a_started_run_has_its_files_and_ends, setup, teardown),
        cmocka_unit_test_setup_teardown(a_stopped_app_refuses_runs, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
