/* The container provider without an engine: sandbox.container's parsing
 * (FAWN_ECONFIG naming the key), the engine replies' readers, and the
 * provider against a fake engine on a unix socket answering 404s, 500s,
 * garbage, or nothing at all: only the engine's "no such container" is
 * absent; everything else is unknown, and unknown never removes or reuses. */
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

#include "base/base.h"
#include "config/config.h"
#include "sandbox/container.h"
#include "sandbox/manager.h"
#include "unit/fake_http.h"

#define SID "0123456789abcdef"
#define GEN "00112233445566778899aabbccddeeff"
#define CID "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"

#define PODMAN_404                                                                                 \
    "{\"cause\":\"no such container\",\"message\":\"no container with name or ID \\\"x\\\" "       \
    "found: no such container\",\"response\":404}"
#define DOCKER_404 "{\"message\":\"No such container: fawn-x\"}"
#define INSPECT(state, sandbox)                                                                    \
    "{\"Id\":\"" CID "\",\"State\":{\"Status\":\"" state "\"},\"Config\":{\"Labels\":"             \
    "{\"fawn.sandbox\":\"" sandbox "\",\"fawn.generation\":\"" GEN "\"}}}"

/* ---- configuration ---- */

static void refuse_config(const char *json, const char *key) {
    json_error_t jerr;
    json_t *tree = json_loads(json, 0, &jerr);
    assert_non_null(tree);
    container_provider_config c;
    assert_int_equal(container_config_parse(&c, tree, NULL), FAWN_ECONFIG);
    check_contains("config error", fawn_errmsg(), key);
    json_decref(tree);
}

static void test_config(void **state) {
    (void)state;
    json_error_t jerr;
    json_t *tree = json_loads("{\"image\":\"localhost/fawn-box:1\",\"socket\":\"/run/p.sock\","
                              "\"cpus\":\"1.5\",\"request_timeout_s\":\"7\"}",
                              0, &jerr);
    container_provider_config c;
    assert_int_equal(container_config_parse(&c, tree, NULL), 0);
    assert_string_equal(c.image, "localhost/fawn-box:1");
    assert_string_equal(c.socket, "/run/p.sock");
    assert_string_equal(c.api_version, "1.41");
    assert_string_equal(c.network, "bridge");
    assert_int_equal(c.nano_cpus, 1500000000ull);
    assert_int_equal(c.request_timeout_ms, 7000);
    assert_int_equal(c.start_timeout_ms, 120000);
    assert_false(c.podman);
    json_decref(tree);

    refuse_config("{}", "sandbox.container.image");
    refuse_config("{\"image\":\"x\",\"bogus\":\"1\"}", "sandbox.container.bogus");
    refuse_config("{\"image\":\"x y\"}", "sandbox.container.image");
    refuse_config("{\"image\":\"x\",\"socket\":\"relative.sock\"}", "sandbox.container.socket");
    refuse_config("{\"image\":\"x\",\"api_version\":\"v1.41\"}", "sandbox.container.api_version");
    refuse_config("{\"image\":\"x\",\"api_version\":\"1.41.2\"}", "sandbox.container.api_version");
    refuse_config("{\"image\":\"x\",\"cpus\":\"-1\"}", "sandbox.container.cpus");
    refuse_config("{\"image\":\"x\",\"cpus\":\"1.\"}", "sandbox.container.cpus");
    refuse_config("{\"image\":\"x\",\"cpus\":\"257\"}", "sandbox.container.cpus");
    refuse_config("{\"image\":\"x\",\"network\":\"a/b\"}", "sandbox.container.network");
    refuse_config("{\"image\":\"x\",\"start_timeout_s\":\"0\"}",
                  "sandbox.container.start_timeout_s");
    refuse_config("{\"image\":\"x\",\"request_timeout_s\":\"3601\"}",
                  "sandbox.container.request_timeout_s");
    refuse_config("{\"image\":[\"x\"]}", "sandbox.container.image");
    refuse_config("{\"image\":\"x\",\"engine\":\"lxc\"}", "sandbox.container.engine");
    tree = json_loads("{\"image\":\"x\",\"engine\":\"podman\"}", 0, &jerr);
    assert_int_equal(container_config_parse(&c, tree, NULL), 0);
    assert_true(c.podman);
    json_decref(tree);
}

/* The whole configuration path: sandbox.provider container needs the section. */
static void test_config_file(void **state) {
    (void)state;
    fawn_config cfg;
    const char *missing = "sandbox:\n  provider: container\n";
    assert_int_equal(config_load_string(&cfg, missing, strlen(missing)), FAWN_ECONFIG);
    check_contains("config error", fawn_errmsg(), "sandbox.container");
    const char *allow = "sandbox:\n  provider: container\n  network: allowlist\n"
                        "  container:\n    image: x\n";
    assert_int_equal(config_load_string(&cfg, allow, strlen(allow)), FAWN_ECONFIG);
    check_contains("config error", fawn_errmsg(), "sandbox.network");
    const char *ok = "sandbox:\n  provider: container\n  container:\n    image: fawn-box\n";
    assert_int_equal(config_load_string(&cfg, ok, strlen(ok)), 0);
    sbx_provider *p = NULL;
    assert_int_equal(sbx_provider_open(&p, &cfg, NULL), 0);
    assert_string_equal(p->name, "container");
    sbx_provider_close(p);
    config_free(&cfg);
}

/* ---- the engine's replies ---- */

static enum sbx_presence classify(long status, const char *body, int *r) {
    enum sbx_presence st;
    char gen[SBX_GENERATION_LEN + 1];
    POISON(st);
    POISON(gen);
    *r = container_inspect_classify(&st, gen, status, body, body ? strlen(body) : 0, SID);
    if (st != SBX_RUNNING && st != SBX_STOPPED && st != SBX_PENDING && st != SBX_TERMINATING)
        assert_string_equal(gen, "");
    else
        assert_string_equal(gen, GEN);
    return st;
}

static void test_inspect_classify(void **state) {
    (void)state;
    int r;
    assert_int_equal(classify(404, PODMAN_404, &r), SBX_ABSENT);
    assert_int_equal(r, 0);
    assert_int_equal(classify(404, DOCKER_404, &r), SBX_ABSENT);
    assert_int_equal(classify(200, INSPECT("running", SID), &r), SBX_RUNNING);
    assert_int_equal(r, 0);
    assert_int_equal(classify(200, INSPECT("exited", SID), &r), SBX_STOPPED);
    assert_int_equal(classify(200, INSPECT("created", SID), &r), SBX_STOPPED);
    assert_int_equal(classify(200, INSPECT("restarting", SID), &r), SBX_PENDING);
    assert_int_equal(classify(200, INSPECT("removing", SID), &r), SBX_TERMINATING);
    /* Everything else is unknown, never absent. */
    static const struct {
        long status;
        const char *body;
    } unknown[] = {
        {404, "{\"message\":\"page not found\"}"}, /* a 404 that is not about the container */
        {404, "404 page not found"},
        {404, NULL},
        {404, "{\"message\":\"no such image: no such container\"}"},
        {500, PODMAN_404},
        {500, "{\"message\":\"internal error\"}"},
        {409, "{}"},
        {200, "garbage"},
        {200, "[]"},
        {200, "{\"Id\":\"" CID "\",\"State\":{\"Status\":\"running\"}}"},
        {200, INSPECT("running", "fedcba9876543210")}, /* another sandbox's container */
        {200, INSPECT("sleeping", SID)},
        {200, INSPECT("running", "0123")},
        {200, "{\"Id\":\"" CID "\",\"State\":{\"Status\":\"running\"},\"Config\":{\"Labels\":"
              "{\"fawn.sandbox\":\"" SID "\"}}}"},
        {200, "{\"Id\":\"" CID "\",\"Id\":\"" CID "\"}"},
    };
    for (size_t i = 0; i < ARRAY_LEN(unknown); i++) {
        assert_int_equal(classify(unknown[i].status, unknown[i].body, &r), SBX_UNKNOWN);
        assert_int_equal(r, FAWN_EPROTO);
    }
}

static void test_create_parse(void **state) {
    (void)state;
    char id[65];
    const char *ok = "{\"Id\":\"" CID "\",\"Warnings\":[]}";
    assert_int_equal(container_create_parse(id, 201, ok, strlen(ok)), 0);
    assert_string_equal(id, CID);
    const char *bad[] = {"{\"Id\":\"abc\"}", "{}", "nope", "{\"Id\":\"" CID "x\"}"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        POISON(id);
        assert_int_equal(container_create_parse(id, 201, bad[i], strlen(bad[i])), FAWN_EPROTO);
        assert_string_equal(id, "");
    }
    assert_int_equal(container_create_parse(id, 500, ok, strlen(ok)), FAWN_EPROTO);
}

typedef struct seen {
    int calls;
    char last[64];
} seen;

static int count_each(void *ctx, const char *sandbox_id, const char *generation) {
    seen *s = ctx;
    s->calls++;
    snprintf(s->last, sizeof s->last, "%s/%s", sandbox_id, generation);
    return 0;
}

static void test_list_parse(void **state) {
    (void)state;
    seen s = {0};
    const char *ok = "[{\"Id\":\"" CID "\",\"Labels\":{\"fawn.sandbox\":\"" SID "\","
                     "\"fawn.generation\":\"" GEN "\"}},"
                     "{\"Labels\":{\"fawn.sandbox\":\"fedcba9876543210\"}}]";
    assert_int_equal(container_list_parse(200, ok, strlen(ok), count_each, &s), 0);
    assert_int_equal(s.calls, 2);
    assert_string_equal(s.last, "fedcba9876543210/");
    /* One bad entry refuses the whole listing before any callback. */
    const char *bad[] = {
        "[{\"Labels\":{\"fawn.sandbox\":\"" SID "\"}},{\"Labels\":{}}]",
        "[{\"Labels\":{\"fawn.sandbox\":\"" SID "\"}},3]",
        "[{\"Labels\":{\"fawn.sandbox\":\"" SID "\",\"fawn.generation\":\"xyz\"}}]",
        "{}",
        "[",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        s.calls = 0;
        assert_int_equal(container_list_parse(200, bad[i], strlen(bad[i]), count_each, &s),
                         FAWN_EPROTO);
        assert_int_equal(s.calls, 0);
    }
    assert_int_equal(container_list_parse(500, "[]", 2, count_each, &s), FAWN_EPROTO);
}

/* ---- the provider against a fake engine ---- */

typedef struct engine_fixture {
    char dir[64], socket[96];
    fawn_config cfg;
    sbx_provider *p;
} engine_fixture;

static engine_fixture *fixture_new(void) {
    engine_fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    snprintf(f->dir, sizeof f->dir, "/tmp/fawn-ctr-unit-XXXXXX");
    assert_non_null(mkdtemp(f->dir));
    snprintf(f->socket, sizeof f->socket, "%s/engine.sock", f->dir);
    assert_int_equal(config_defaults(&f->cfg), 0);
    free(f->cfg.home);
    f->cfg.home = strdup(f->dir);
    container_provider_config c = {
        .request_timeout_ms = 500, .start_timeout_ms = 1500, .cfg = &f->cfg};
    snprintf(c.socket, sizeof c.socket, "%s", f->socket);
    snprintf(c.image, sizeof c.image, "fawn-box");
    snprintf(c.api_version, sizeof c.api_version, "1.41");
    snprintf(c.network, sizeof c.network, "bridge");
    assert_int_equal(container_provider_new(&f->p, &c), 0);
    return f;
}

static void fixture_free(engine_fixture *f) {
    container_provider_free(f->p);
    config_free(&f->cfg);
    unlink(f->socket);
    rmdir(f->dir);
    free(f);
}

static enum sbx_presence probe_with(engine_fixture *f, const response *script, size_t n,
                                    int *served) {
    fake_server *s = script ? server_start_unix(script, n, f->socket) : NULL;
    enum sbx_presence st;
    char gen[SBX_GENERATION_LEN + 1];
    POISON(st);
    assert_int_equal(f->p->probe(f->p->ctx, &st, gen, SID), 0);
    if (s) {
        *served = atomic_load(&s->served);
        char req[256];
        pthread_mutex_lock(&s->lock);
        memcpy(req, s->request, sizeof req - 1);
        req[sizeof req - 1] = '\0';
        pthread_mutex_unlock(&s->lock);
        check_contains("request", req, "GET /v1.41/containers/fawn-");
        check_contains("request", req, "-" SID "/json ");
        server_stop(s);
    }
    if (st != SBX_RUNNING)
        assert_string_equal(gen, "");
    return st;
}

static void test_probe_tristate(void **state) {
    (void)state;
    engine_fixture *f = fixture_new();
    int served = 0;
    response absent[] = {
        {.head = "HTTP/1.1 404 Not Found\r\nContent-Type: application/json", .body = PODMAN_404}};
    assert_int_equal(probe_with(f, absent, 1, &served), SBX_ABSENT);
    response running[] = {{.head = "HTTP/1.1 200 OK", .body = INSPECT("running", SID)}};
    assert_int_equal(probe_with(f, running, 1, &served), SBX_RUNNING);
    const response unknown[] = {
        {.head = "HTTP/1.1 500 Internal Server Error", .body = PODMAN_404},
        {.head = "HTTP/1.1 404 Not Found", .body = "404 page not found"},
        {.head = "HTTP/1.1 200 OK", .body = "{\"Id\": garbage"},
        {.head = "HTTP/1.1 200 OK", .body = INSPECT("running", "fedcba9876543210")},
        {.head = "HTTP/1.1 200 OK\r\nContent-Length: 5000",
         .body = "{\"Id\":",
         .end = END_HANG}, /* too slow */
        {.head = "HTTP/1.1 200 OK", .body = "", .end = END_RESET},
        {.head = "HTTP/1.1 404 Not Found",
         .body = PODMAN_404,
         .chunk = 4,
         .delay_ms = 400}, /* slower still */
        {.head = "not http at all", .body = ""},
    };
    for (size_t i = 0; i < ARRAY_LEN(unknown); i++) {
        assert_int_equal(probe_with(f, &unknown[i], 1, &served), SBX_UNKNOWN);
        assert_int_equal(served, 1);
    }
    /* No engine at all. */
    assert_int_equal(probe_with(f, NULL, 0, &served), SBX_UNKNOWN);
    fixture_free(f);
}

/* Unknown never counts as gone: destroy fails, health is not "dead". */
static void test_destroy_and_health(void **state) {
    (void)state;
    engine_fixture *f = fixture_new();
    response absent[] = {{.head = "HTTP/1.1 404 Not Found", .body = DOCKER_404}};
    fake_server *s = server_start_unix(absent, 1, f->socket);
    assert_int_equal(f->p->destroy(f->p->ctx, SID, GEN), 0);
    assert_int_equal(atomic_load(&s->served), 1); /* inspected, nothing to remove */
    sbx_box box = {.sandbox_id = SID, .generation = GEN};
    snprintf(box.endpoint, sizeof box.endpoint, "unix:%s/none.sock", f->dir);
    assert_int_equal(f->p->health(f->p->ctx, &box), FAWN_ENOENT);
    server_stop(s);

    response broken[] = {
        {.head = "HTTP/1.1 500 Internal Server Error", .body = "{\"message\":\"db locked\"}"}};
    s = server_start_unix(broken, 1, f->socket);
    int r = f->p->destroy(f->p->ctx, SID, GEN);
    assert_true(r < 0);
    r = f->p->health(f->p->ctx, &box);
    assert_true(r < 0 && r != FAWN_ENOENT);
    server_stop(s);

    /* The engine still lists the container after removal: never confirmed gone. */
    response stays[] = {{.head = "HTTP/1.1 200 OK", .body = INSPECT("running", SID)},
                        {.head = "HTTP/1.1 204 No Content", .body = ""},
                        {.head = "HTTP/1.1 200 OK", .body = INSPECT("removing", SID)}};
    s = server_start_unix(stays, ARRAY_LEN(stays), f->socket);
    assert_int_equal(f->p->destroy(f->p->ctx, SID, GEN), FAWN_ETIMEDOUT);
    server_stop(s);

    /* Another generation running: this one is gone. */
    response other[] = {{.head = "HTTP/1.1 200 OK", .body = INSPECT("running", SID)}};
    s = server_start_unix(other, 1, f->socket);
    assert_int_equal(f->p->destroy(f->p->ctx, SID, "ffffffffffffffffffffffffffffffff"), 0);
    assert_int_equal(atomic_load(&s->served), 1);
    server_stop(s);
    fixture_free(f);
}

static void test_list_through_engine(void **state) {
    (void)state;
    engine_fixture *f = fixture_new();
    response list[] = {
        {.head = "HTTP/1.1 200 OK",
         .body = "[{\"Labels\":{\"fawn.sandbox\":\"" SID "\",\"fawn.generation\":\"" GEN "\"}}]"}};
    fake_server *s = server_start_unix(list, 1, f->socket);
    seen seen_boxes = {0};
    assert_int_equal(f->p->list(f->p->ctx, count_each, &seen_boxes), 0);
    assert_int_equal(seen_boxes.calls, 1);
    assert_string_equal(seen_boxes.last, SID "/" GEN);
    pthread_mutex_lock(&s->lock);
    check_contains("list request", s->request, "GET /v1.41/containers/json?all=true&filters=");
    check_contains("list request", s->request, "fawn.instance%3D");
    pthread_mutex_unlock(&s->lock);
    server_stop(s);
    fixture_free(f);
}

/* The box API over the unix socket of a box's endpoint, with its token. */
static void test_call_over_unix(void **state) {
    (void)state;
    engine_fixture *f = fixture_new();
    char box_socket[128];
    snprintf(box_socket, sizeof box_socket, "%s/box.sock", f->dir);
    response ok[] = {{.head = "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                              "Content-Length: 14",
                      .body = "{\"ready\":true}"}};
    fake_server *s = server_start_unix(ok, 1, box_socket);
    sbx_box box = {.sandbox_id = SID, .generation = GEN, .token = "tok-123"};
    snprintf(box.endpoint, sizeof box.endpoint, "unix:%s", box_socket);
    json_t *reply = NULL;
    int status = 0;
    assert_int_equal(f->p->call(f->p->ctx, &reply, &status, &box, "GET", "/v1/sandbox", NULL, 5000),
                     0);
    assert_int_equal(status, 200);
    assert_true(json_is_true(json_object_get(reply, "ready")));
    json_decref(reply);
    pthread_mutex_lock(&s->lock);
    check_contains("box request", s->request, "GET /v1/sandbox HTTP/1.1");
    check_contains("box request", s->request, "Authorization: Bearer tok-123\r\n");
    pthread_mutex_unlock(&s->lock);
    /* A token that could split the header is refused before anything is sent. */
    snprintf(box.token, sizeof box.token, "tok\r\nX-Evil: 1");
    assert_int_equal(f->p->call(f->p->ctx, &reply, &status, &box, "GET", "/v1/sandbox", NULL, 5000),
                     FAWN_EINVAL);
    assert_null(reply);
    assert_int_equal(atomic_load(&s->served), 1);
    /* Not a container endpoint. */
    snprintf(box.endpoint, sizeof box.endpoint, "tcp:127.0.0.1:1");
    assert_int_equal(f->p->call(f->p->ctx, &reply, &status, &box, "GET", "/v1/sandbox", NULL, 5000),
                     FAWN_EINVAL);
    server_stop(s);
    unlink(box_socket);
    fixture_free(f);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config),
        cmocka_unit_test(test_config_file),
        cmocka_unit_test(test_inspect_classify),
        cmocka_unit_test(test_create_parse),
        cmocka_unit_test(test_list_parse),
        cmocka_unit_test(test_probe_tristate),
        cmocka_unit_test(test_destroy_and_health),
        cmocka_unit_test(test_list_through_engine),
        cmocka_unit_test(test_call_over_unix),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
