/* The gateway's HTTP server: /health, JSON errors, and `fawn serve`
 * stopping cleanly on SIGTERM. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "gateway/internal.h"
#include "gateway/replay.h"
#include "store/store.h"
#include "unit/test_store_open.h"

typedef struct fx {
    char home[64];
    fawn_config cfg;
    store *st;
    app *a;
    gateway *g;
} fx;

static int request(uint32_t port, const char *raw, char *body, size_t bodysz) {
    return loopback_http((uint16_t)port, raw, body, bodysz, 0);
}

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-gateway-XXXXXX");
    if (!mkdtemp(x->home) || config_defaults(&x->cfg) < 0)
        return -1;
    free(x->cfg.home); /* the test's own home, not ./.fawn */
    if (!(x->cfg.home = strdup(x->home)))
        return -1;
    /* No store work of its own while a test runs (the scheduler's looks,
     * the leases' beats): repeated_requests_skip_the_store_for_auth counts
     * the store's operations. */
    x->cfg.schedules.enabled = false;
    x->cfg.cluster.heartbeat_ms = 200000;
    x->cfg.cluster.lease_ms = 600000;
    char path[128];
    snprintf(path, sizeof path, "%s/fawn.db", x->home);
    if (test_store_open(&x->st, path) < 0 || app_open(&x->a, &x->cfg, x->st) < 0)
        return -1;
    /* The free port may be taken by another process before the gateway binds it. */
    for (int attempt = 0; attempt < LOOPBACK_PORT_ATTEMPTS && !x->g; attempt++) {
        x->cfg.server.port = loopback_free_port();
        int r = gateway_start(&x->g, x->a);
        if (r < 0 && r != FAWN_EIO) /* FAWN_EIO: it could not listen there */
            return -1;
    }
    if (!x->g)
        return -1;
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fx *x = *state;
    gateway_quiesce(x->g);
    app_stop(x->a);
    gateway_stop(x->g);
    app_close(x->a);
    store_close(x->st);
    config_free(&x->cfg);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->home);
    int r = system(cmd);
    free(x);
    return r;
}

/* GET /api/v1/auth/me as bearer into body; the status. */
static int me_as(uint32_t port, const char *bearer, char *body, size_t bodysz) {
    char raw[1024];
    snprintf(raw, sizeof raw,
             "GET /api/v1/auth/me HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
             "Connection: close\r\n\r\n",
             bearer);
    return request(port, raw, body, bodysz);
}

/* A repeated authenticated GET does not reach the store for its
 * authentication: the only store operations are the cache's reads of the
 * auth generation (at most one a second, however many requests). */
static void repeated_requests_skip_the_store_for_auth(void **state) {
    fx *x = *state;
    uint32_t port = x->cfg.server.port;
    static const char token[] = "fawn_00112233445566778899aabbccddeeff";
    char hash[65], body[2048];
    fawn_sha256_hex(hash, token, strlen(token));
    store_user u;
    store_token t;
    assert_int_equal(store_user_create(x->st, &u, "cached", "!no-password", "user"), 0);
    assert_int_equal(store_token_create(x->st, &t, u.id, "cli", hash), 0);
    assert_int_equal(me_as(port, token, body, sizeof body), 200); /* verified and kept */
    auth_cache_stats before, after;
    auth_cache_stats_get(&before, x->g->auth_cache);
    uint64_t ops = store_operations(x->st);
    enum { REPEATS = 25 };
    for (int i = 0; i < REPEATS; i++)
        assert_int_equal(me_as(port, token, body, sizeof body), 200);
    auth_cache_stats_get(&after, x->g->auth_cache);
    assert_int_equal(after.hits - before.hits, REPEATS);
    assert_int_equal(after.misses, before.misses);
    assert_int_equal(store_operations(x->st) - ops,
                     after.generation_reads - before.generation_reads);

    /* A role change takes effect on the very next request. */
    assert_non_null(strstr(body, "\"system_role\":\"user\""));
    assert_int_equal(store_user_set_role(x->st, u.id, "viewer"), 0);
    assert_int_equal(me_as(port, token, body, sizeof body), 200);
    assert_non_null(strstr(body, "\"system_role\":\"viewer\""));

    /* The token revoked through the API: refused on the very next request. */
    char raw[512];
    snprintf(raw, sizeof raw,
             "DELETE /api/v1/auth/tokens/%lld HTTP/1.1\r\nHost: x\r\n"
             "Authorization: Bearer %s\r\nConnection: close\r\n\r\n",
             (long long)t.id, token);
    assert_int_equal(request(port, raw, body, sizeof body), 200);
    assert_int_equal(me_as(port, token, body, sizeof body), 401);
    assert_non_null(strstr(body, "token_invalid"));
}

/* A session signed out everywhere (token_version bumped) is refused on
 * the very next request, though the cache had just verified it. */
static void revoked_session_refused_at_once(void **state) {
    fx *x = *state;
    uint32_t port = x->cfg.server.port;
    store_user u;
    assert_int_equal(store_user_create(x->st, &u, "session", "!no-password", "user"), 0);
    int64_t now = fawn_wall_ms() / 1000;
    auth_claims c = {.user_id = u.id,
                     .token_version = u.token_version,
                     .issued_at = now,
                     .expires_at = now + 3600};
    char *jwt = NULL, body[2048];
    assert_int_equal(auth_jwt_sign(&jwt, x->g->secret, &c), 0);
    assert_int_equal(me_as(port, jwt, body, sizeof body), 200);
    assert_int_equal(me_as(port, jwt, body, sizeof body), 200); /* from the cache */
    assert_int_equal(store_user_revoke_sessions(x->st, u.id), 0);
    assert_int_equal(me_as(port, jwt, body, sizeof body), 401);
    free(jwt);
}

static void health_is_public(void **state) {
    fx *x = *state;
    char body[256];
    assert_int_equal(request(x->cfg.server.port,
                             "GET /health HTTP/1.1\r\nHost: x\r\n"
                             "Connection: close\r\n\r\n",
                             body, sizeof body),
                     200);
    assert_string_equal(body, "{\"status\":\"healthy\",\"service\":\"fawn\"}");
}

static void errors_have_a_detail(void **state) {
    fx *x = *state;
    char body[256];
    uint32_t port = x->cfg.server.port;
    assert_int_equal(request(port, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                             body, sizeof body),
                     404);
    assert_string_equal(body, "{\"detail\":\"Not Found\"}");
    assert_int_equal(request(port,
                             "POST /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             "Content-Length: 5\r\n\r\nhello",
                             body, sizeof body),
                     405);
    assert_string_equal(body, "{\"detail\":\"Method Not Allowed\"}");
    /* Garbage is refused by the HTTP layer (an error or a closed connection,
     * never a 2xx); the server keeps serving. */
    int garbage = request(port, "NONSENSE\r\n\r\n", body, sizeof body);
    assert_true(garbage == 0 || garbage >= 400);
    assert_int_equal(request(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                             body, sizeof body),
                     200);
}

static void bad_address_refused(void **state) {
    fx *x = *state;
    fawn_config cfg = x->cfg;
    cfg.server.host = "localhost.example";
    app *a;
    assert_int_equal(app_open(&a, &cfg, x->st), 0);
    gateway *g = (gateway *)&cfg; /* poisoned: the failure must set it */
    assert_int_equal(gateway_start(&g, a), FAWN_EINVAL);
    assert_null(g);
    app_close(a);
}

/* What loopback_spawn runs: `fawn serve --config CONFIG`, whose port is
 * $FAWN_TEST_PORT. */
static void exec_serve(uint16_t port, void *config) {
    char text[8];
    snprintf(text, sizeof text, "%u", port);
    setenv("FAWN_TEST_PORT", text, 1);
    execl(getenv("FAWN_BIN"), "fawn", "serve", "--config", (char *)config, (char *)NULL);
}

/* Ceiling of serve's exit after SIGTERM: only a hang reaches it. */
#define SERVE_STOP_MS 60000

/* `fawn serve`: answers, then stops on SIGTERM with exit status 0. */
static void serve_stops_on_sigterm(void **state) {
    fx *x = *state;
    char config[128], home[128];
    snprintf(config, sizeof config, "%s/serve.yaml", x->home);
    snprintf(home, sizeof home, "%s/serve-home", x->home);
    FILE *f = fopen(config, "w");
    fprintf(f, "home: %s\nserver:\n  port: $FAWN_TEST_PORT\n", home);
    fclose(f);
    uint16_t port;
    pid_t pid = loopback_spawn(&port, exec_serve, config);
    int status = request(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n", NULL,
                         0);
    assert_int_equal(status, 200);
    kill(pid, SIGTERM);
    int st;
    if (!reap_within(&st, pid, SERVE_STOP_MS))
        fail_msg("fawn serve still ran %d ms after SIGTERM (killed)", SERVE_STOP_MS);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char db[160];
    snprintf(db, sizeof db, "%s/fawn.db", home);
    struct stat sb;
    assert_int_equal(stat(db, &sb), 0);
}

/* The gateway's rule over two gateways on one database: attempts spread
 * over both add up, a lockout holds on both, others are not affected, a
 * success forgets the count, and an attacker cycling addresses neither
 * grows the table past its bound nor evicts a locked address. (Counts per
 * backend, PostgreSQL included: test_store's signin cases.) */
static void throttle_locks_out_across_gateways(void **state) {
    char dir[] = "/tmp/fawn-throttle-XXXXXX", path[64], cmd[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/fawn.db", dir);
    store *gw[2];
    assert_int_equal(store_open(&gw[0], path), 0);
    assert_int_equal(store_open(&gw[1], path), 0);
    int64_t now = 1000, wait;
    for (int i = 0; i < GW_THROTTLE_FAILURES; i++) {
        assert_int_equal(gw_throttle_attempt(&wait, gw[i % 2], "10.0.0.1", now + i), 0);
        assert_int_equal(wait, 0); /* the 5th itself is still checked */
    }
    int64_t last = now + GW_THROTTLE_FAILURES - 1;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(gw_throttle_attempt(&wait, gw[i], "10.0.0.1", last), 0);
        assert_int_equal(wait, GW_THROTTLE_LOCKOUT_S);
        assert_int_equal(gw_throttle_attempt(&wait, gw[i], "10.0.0.1", last + 100), 0);
        assert_int_equal(wait, GW_THROTTLE_LOCKOUT_S - 100);
    }
    assert_int_equal(gw_throttle_attempt(&wait, gw[1], "10.0.0.2", last), 0);
    assert_int_equal(wait, 0);
    assert_int_equal(gw_throttle_attempt(&wait, gw[1], "10.0.0.1", last + GW_THROTTLE_LOCKOUT_S),
                     0);
    assert_int_equal(wait, 0);

    /* Attempts spread wider than the window never add up to a lockout. */
    for (int i = 0; i < 3 * GW_THROTTLE_FAILURES; i++) {
        assert_int_equal(gw_throttle_attempt(&wait, gw[i % 2], "10.0.0.3",
                                             now + (int64_t)i * GW_THROTTLE_LOCKOUT_S),
                         0);
        assert_int_equal(wait, 0);
    }

    /* A success on one gateway forgets what both counted. */
    for (int i = 0; i < GW_THROTTLE_FAILURES - 1; i++)
        assert_int_equal(gw_throttle_attempt(&wait, gw[i % 2], "10.0.0.4", now), 0);
    gw_throttle_succeed(gw[0], "10.0.0.4");
    for (int i = 0; i < 2; i++) {
        assert_int_equal(gw_throttle_attempt(&wait, gw[1], "10.0.0.4", now), 0);
        assert_int_equal(wait, 0);
    }

    /* Cycling through more addresses than are kept. */
    for (int i = 0; i < GW_THROTTLE_FAILURES; i++)
        assert_int_equal(gw_throttle_attempt(&wait, gw[0], "10.9.9.9", now), 0);
    for (int i = 0; i < 4096 + 64; i++) {
        char addr[32];
        snprintf(addr, sizeof addr, "fd00::%x", i);
        assert_int_equal(gw_throttle_attempt(&wait, gw[i % 2], addr, now + 1), 0);
    }
    int64_t kept;
    assert_int_equal(store_signin_addresses(gw[1], &kept), 0);
    assert_int_equal(kept, 4096);
    assert_int_equal(gw_throttle_attempt(&wait, gw[1], "10.9.9.9", now + 1), 0);
    assert_true(wait > 0);
    /* An address no store keeps is refused, not counted as nobody. */
    assert_int_equal(gw_throttle_attempt(&wait, gw[0], "", now), FAWN_EINVAL);
    assert_int_equal(wait, 0);
    store_close(gw[0]);
    store_close(gw[1]);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    assert_int_equal(system(cmd), 0);
}

static void form_fields_decode_once(void **state) {
    char out[16];
    const char *body = "a=1&username=al%69ce+b&password=p%2541&empty=&x";
    assert_int_equal(gw_form_field(out, sizeof out, body, strlen(body), "username"), 0);
    assert_string_equal(out, "alice b");
    assert_int_equal(gw_form_field(out, sizeof out, body, strlen(body), "password"), 0);
    assert_string_equal(out, "p%41"); /* decoded exactly once */
    assert_int_equal(gw_form_field(out, sizeof out, body, strlen(body), "empty"), 0);
    assert_string_equal(out, "");
    assert_int_equal(gw_form_field(out, sizeof out, body, strlen(body), "x"), FAWN_ENOENT);
    assert_int_equal(gw_form_field(out, sizeof out, body, strlen(body), "missing"), FAWN_ENOENT);
    static const char *const bad[] = {"username=%00", "username=%4", "username=%zz",
                                      "username=0123456789abcdef"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        POISON(out);
        assert_int_equal(gw_form_field(out, sizeof out, bad[i], strlen(bad[i]), "username"),
                         FAWN_EINVAL);
        assert_string_equal(out, ""); /* never half a value */
    }
    POISON(out);
    assert_int_equal(gw_form_field(out, sizeof out, body, strlen(body), "missing"), FAWN_ENOENT);
    assert_string_equal(out, "");
    /* The length bounds the scan: bytes past it are not read. */
    assert_int_equal(gw_form_field(out, sizeof out, "username=ab", 10, "username"), 0);
    assert_string_equal(out, "a");
}

/* A body that is not one JSON object hands out no object: a route that
 * decrefs what it got after the failure decrefs NULL. */
static void refused_json_bodies_leave_no_object(void **state) {
    static const char *const bad[] = {"[1]", "{\"a\":", "\"text\""};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        gw_request rq = {.body = {.data = (char *)bad[i], .len = strlen(bad[i])}};
        json_t *body;
        POISON(body);
        assert_int_equal(gw_body_json(&body, &rq), FAWN_EINVAL);
        assert_null(body);
        json_decref(body);
    }
}

/* X-Forwarded-For is believed only from trusted proxies, and only up to
 * the first address that is not one. */
static void forwarded_client_from_trusted_proxies_only(void **state) {
    char trusted[2][64] = {"127.0.0.1", "10.0.0.2"};
    char out[64];
    gw_forwarded_client(out, "127.0.0.1", "203.0.113.9", trusted, 2);
    assert_string_equal(out, "203.0.113.9");
    /* A client cannot pick its address through an untrusted peer. */
    gw_forwarded_client(out, "198.51.100.1", "203.0.113.9", trusted, 2);
    assert_string_equal(out, "198.51.100.1");
    /* Through two proxies: the rightmost untrusted entry; what the client
     * itself wrote further left is ignored. */
    gw_forwarded_client(out, "127.0.0.1", "1.1.1.1, 203.0.113.9 ,10.0.0.2", trusted, 2);
    assert_string_equal(out, "203.0.113.9");
    gw_forwarded_client(out, "127.0.0.1", "2001:db8::0001", trusted, 2);
    assert_string_equal(out, "2001:db8::1"); /* canonical form: one throttle entry per client */
    /* Anything but addresses: the peer. */
    static const char *const junk[] = {"",
                                       "evil",
                                       "1.1.1.1,,10.0.0.2",
                                       ",10.0.0.2",
                                       "unknown, 1.2.3.4x",
                                       "1.2.3.4; rm -rf",
                                       "2001:db8::1%eth0",
                                       ("11111111111111111111111111111111111111111111111111111111"
                                        "11111111111")};
    for (size_t i = 0; i < ARRAY_LEN(junk); i++) {
        gw_forwarded_client(out, "127.0.0.1", junk[i], trusted, 2);
        assert_string_equal(out, "127.0.0.1");
    }
    /* Entries left of the client's are the client's own words: never read. */
    gw_forwarded_client(out, "127.0.0.1", "garbage,,2.2.2.2", trusted, 2);
    assert_string_equal(out, "2.2.2.2");
    gw_forwarded_client(out, "127.0.0.1", NULL, trusted, 2);
    assert_string_equal(out, "127.0.0.1");
    gw_forwarded_client(out, "127.0.0.1", "203.0.113.9", trusted, 0);
    assert_string_equal(out, "127.0.0.1");
}

/* The authority a browser addressed: X-Forwarded-Host's first entry from
 * a trusted proxy, the Host header from anyone else. */
static void forwarded_host_from_trusted_proxies_only(void **state) {
    char out[64];
    gw_forwarded_host(out, sizeof out, "127.0.0.1:8001", " localhost:3000 , 127.0.0.1:8001", true);
    assert_string_equal(out, "localhost:3000");
    gw_forwarded_host(out, sizeof out, "127.0.0.1:8001", "localhost:3000", false);
    assert_string_equal(out, "127.0.0.1:8001");
    gw_forwarded_host(out, sizeof out, "127.0.0.1:8001", NULL, true);
    assert_string_equal(out, "127.0.0.1:8001");
    /* Nothing usable is no authority at all, so no Origin matches it. */
    static const char *const empty[] = {"", " ", ",localhost:3000", "\t, x"};
    for (size_t i = 0; i < ARRAY_LEN(empty); i++) {
        gw_forwarded_host(out, sizeof out, "127.0.0.1:8001", empty[i], true);
        assert_string_equal(out, "");
    }
    gw_forwarded_host(out, sizeof out, NULL, NULL, false);
    assert_string_equal(out, "");
    char small[8];
    gw_forwarded_host(small, sizeof small, "localhost:3000", NULL, false);
    assert_string_equal(small, "");
}

static void event_ids_parse_with_bounds(void **state) {
    static const struct {
        const char *text;
        int64_t id;
    } good[] = {
        {NULL, 0},
        {"", 0},
        {"-1", 0},
        {"0", 0},
        {"1", 1},
        {"007", 7},
        {"9223372036854775807", INT64_MAX},
        {"00000000000000000000009223372036854775807", INT64_MAX},
    };
    static const char *const bad[] = {
        "9223372036854775808",
        "18446744073709551616",
        "99999999999999999999999",
        "-2",
        "-0",
        "+1",
        " 1",
        "1 ",
        "1.5",
        "1e3",
        "0x10",
        "abc",
        "1-0",
        "--1",
        "-",
    };
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        int64_t id = -1;
        assert_int_equal(gw_event_id_parse(&id, good[i].text), 0);
        assert_int_equal(id, good[i].id);
    }
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int64_t id = -1;
        assert_int_equal(gw_event_id_parse(&id, bad[i]), FAWN_EINVAL);
        assert_int_equal(id, 0);
        assert_non_null(strstr(fawn_errmsg(), "Last-Event-ID"));
    }
}

/* A search's select keeps only the fields it names; extract adds each
 * alias's value (null when its path leads nowhere); both are bounded and
 * refuse what fawn's threads do not have. */
static void thread_views_select_and_extract(void **state) {
    json_t *body = json_loads("{\"select\":[\"thread_id\",\"values\"],\"extract\":{"
                              "\"t\":\"values.title\",\"last\":\"metadata.tags[-1]\","
                              "\"first\":\"metadata.tags[0]\",\"deep\":\"metadata.o.k\","
                              "\"gone\":\"metadata.tags[5]\",\"who\":\"thread_id\"}}",
                              0, NULL);
    gw_thread_view v;
    assert_int_equal(gw_thread_view_parse(&v, body), 0);
    json_decref(body);
    json_t *thread = json_loads("{\"thread_id\":\"t1\",\"created_at\":\"x\",\"status\":\"idle\","
                                "\"metadata\":{\"tags\":[\"a\",\"b\"],\"o\":{\"k\":1}},"
                                "\"values\":{\"title\":\"Hi\"},\"config\":{},\"interrupts\":{}}",
                                0, NULL);
    json_t *want = json_loads("{\"thread_id\":\"t1\",\"values\":{\"title\":\"Hi\"},\"extracted\":"
                              "{\"t\":\"Hi\",\"last\":\"b\",\"first\":\"a\",\"deep\":1,"
                              "\"gone\":null,\"who\":\"t1\"}}",
                              0, NULL);
    thread = gw_thread_view_apply(thread, &v);
    assert_true(json_equal(thread, want));
    json_decref(thread);
    json_decref(want);
    gw_thread_view_clear(&v);
    /* No select, no extract: the thread as it is. */
    body = json_object();
    assert_int_equal(gw_thread_view_parse(&v, body), 0);
    assert_int_equal(v.fields, 0);
    assert_null(v.extract);
    json_decref(body);
    static const char *const bad[] = {
        "{\"select\":[\"context\"]}",
        "{\"select\":[\"nope\"]}",
        "{\"select\":\"thread_id\"}",
        "{\"select\":[1]}",
        "{\"select\":[\"status\",\"status\",\"status\",\"status\",\"status\",\"status\",\"status\","
        "\"status\",\"status\",\"status\",\"status\",\"status\",\"status\",\"status\",\"status\","
        "\"status\",\"status\",\"status\",\"status\",\"status\",\"status\"]}",
        "{\"extract\":[]}",
        "{\"extract\":{\"a\":1}}",
        "{\"extract\":{\"\":\"thread_id\"}}",
        "{\"extract\":{\"a\\u0001\":\"thread_id\"}}",
        "{\"extract\":{\"a\":\"values.messages[-1]\"}}",
        "{\"extract\":{\"a\":\"values\"}}",
        "{\"extract\":{\"a\":\"secrets.x\"}}",
        "{\"extract\":{\"a\":\"metadata..x\"}}",
        "{\"extract\":{\"a\":\"metadata.x[\"}}",
        "{\"extract\":{\"a\":\"metadata.x[1e3]\"}}",
        "{\"extract\":{\"a\":\"metadata.x[1234567890]\"}}",
        "{\"extract\":{\"a\":\"[0]\"}}",
        "{\"extract\":{\"a\":\"metadata.\"}}",
        "{\"extract\":{\"a\":\"metadata]\"}}",
        "{\"extract\":{\"1\":\"status\",\"2\":\"status\",\"3\":\"status\",\"4\":\"status\","
        "\"5\":\"status\",\"6\":\"status\",\"7\":\"status\",\"8\":\"status\",\"9\":\"status\","
        "\"10\":\"status\",\"11\":\"status\"}}",
        "{\"extract\":{\"a\":\"metadata.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a\"}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        body = json_loads(bad[i], 0, NULL);
        assert_non_null(body);
        v.fields = 7;
        assert_int_equal(gw_thread_view_parse(&v, body), FAWN_EINVAL);
        assert_int_equal(v.fields, 0);
        assert_null(v.extract);
        json_decref(body);
    }
    char longest[GW_EXTRACT_PATH_MAX + 2];
    snprintf(longest, sizeof longest, "metadata.%0*d", GW_EXTRACT_PATH_MAX - 9, 0);
    assert_int_equal(gw_extract_path_check(longest), 0);
    strcat(longest, "1");
    assert_int_equal(gw_extract_path_check(longest), FAWN_EINVAL);
    assert_int_equal(gw_extract_path_check(NULL), FAWN_EINVAL);
}

/* ids: a list of thread ids, bounded; empty or absent names every thread. */
static void thread_ids_are_checked(void **state) {
    char *ids;
    json_t *v = json_loads("[\"a\",\"b-1\"]", 0, NULL);
    assert_int_equal(gw_thread_ids_parse(&ids, v), 0);
    assert_string_equal(ids, "[\"a\",\"b-1\"]");
    free(ids);
    json_decref(v);
    v = json_array();
    assert_int_equal(gw_thread_ids_parse(&ids, v), 0);
    assert_null(ids);
    assert_int_equal(gw_thread_ids_parse(&ids, NULL), 0);
    assert_null(ids);
    for (int i = 0; i <= STORE_SEARCH_IDS_MAX; i++)
        json_array_append_new(v, json_string("x"));
    assert_int_equal(gw_thread_ids_parse(&ids, v), FAWN_EINVAL);
    json_decref(v);
    static const char *const bad[] = {"[1]", "[\"../x\"]", "[\"\"]", "[null]", "\"a\"", "{}"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        v = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        ids = (char *)"poison";
        assert_int_equal(gw_thread_ids_parse(&ids, v), FAWN_EINVAL);
        assert_null(ids);
        json_decref(v);
    }
}

/* Query counts (messages/page, runs list) are digits only, within bounds. */
static void query_decimals_parse_with_bounds(void **state) {
    int64_t v = -1;
    assert_int_equal(gw_decimal_parse(&v, "50", 1, 200), 0);
    assert_int_equal(v, 50);
    assert_int_equal(gw_decimal_parse(&v, "0007", 1, 200), 0);
    assert_int_equal(v, 7);
    assert_int_equal(gw_decimal_parse(&v, "9223372036854775807", 1, INT64_MAX), 0);
    assert_int_equal(v, INT64_MAX);
    assert_int_equal(gw_decimal_parse(&v, "5", 5, 5), 0);
    assert_int_equal(gw_decimal_parse(&v, "9", 5, 5), FAWN_EINVAL); /* a digit over max */
    assert_int_equal(gw_decimal_parse(&v, "10", 0, 5), FAWN_EINVAL);
    static const char *const bad[] = {NULL,
                                      "",
                                      "0",
                                      "201",
                                      "-1",
                                      "+5",
                                      " 5",
                                      "5 ",
                                      "5x",
                                      "1e2",
                                      "0x1",
                                      "%35",
                                      "9223372036854775808",
                                      "99999999999999999999999"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        v = -1;
        assert_int_equal(gw_decimal_parse(&v, bad[i], 1, i < 12 ? 200 : INT64_MAX), FAWN_EINVAL);
        assert_int_equal(v, 0);
    }
}

/* The checkpoint a run names: checkpoint_id or LangGraph's checkpoint
 * config, of the root namespace; null, {} and a null id mean the newest
 * state; anything else is refused, leaving nothing. */
static void run_checkpoints_parse(void **state) {
    static const struct {
        const char *body, *want, *thread;
    } good[] = {
        {"{}", "", NULL},
        {"{\"checkpoint\":null,\"checkpoint_id\":null}", "", NULL},
        {"{\"checkpoint\":{}}", "", NULL},
        {"{\"checkpoint\":{\"checkpoint_id\":null,\"checkpoint_ns\":\"\",\"checkpoint_map\":null}}",
         "", NULL},
        {"{\"checkpoint_id\":\"c-1_A\"}", "c-1_A", NULL},
        {"{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"checkpoint_ns\":\"\",\"checkpoint_map\":{}}}",
         "c1", NULL},
        {"{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"thread_id\":\"t1\"}}", "c1", "t1"},
        {"{\"checkpoint_id\":\"c1\",\"checkpoint\":{\"checkpoint_id\":\"c1\"}}", "c1", NULL},
        {"{\"checkpoint_id\":\"c1\",\"checkpoint\":{\"checkpoint_id\":null}}", "c1", NULL},
    };
    char id[STORE_RUN_ID_MAX + 1];
    const char *thread;
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        json_t *body = json_loads(good[i].body, 0, NULL);
        assert_int_equal(gw_run_checkpoint_parse(id, &thread, body), 0);
        assert_string_equal(id, good[i].want);
        if (good[i].thread)
            assert_string_equal(thread, good[i].thread);
        else
            assert_null(thread);
        json_decref(body);
    }
    static const char *const bad[] = {
        "{\"checkpoint_id\":\"\"}",
        "{\"checkpoint_id\":\"a/b\"}",
        "{\"checkpoint_id\":\"../c\"}",
        "{\"checkpoint_id\":\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\"}",
        "{\"checkpoint_id\":7}",
        "{\"checkpoint_id\":[\"c1\"]}",
        "{\"checkpoint\":\"c1\"}",
        "{\"checkpoint\":[]}",
        "{\"checkpoint\":{\"checkpoint_id\":\"c 1\"}}",
        "{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"checkpoint_ns\":\"tools\"}}",
        "{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"checkpoint_ns\":5}}",
        "{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"checkpoint_map\":{\"\":\"c1\"}}}",
        "{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"checkpoint_map\":[]}}",
        "{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"thread_id\":5}}",
        "{\"checkpoint\":{\"checkpoint_id\":\"c1\",\"parent\":\"c0\"}}",
        "{\"checkpoint_id\":\"c1\",\"checkpoint\":{\"checkpoint_id\":\"c2\"}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        json_t *body = json_loads(bad[i], 0, NULL);
        assert_non_null(body);
        memset(id, 'x', sizeof id);
        thread = "poison";
        assert_int_equal(gw_run_checkpoint_parse(id, &thread, body), FAWN_EINVAL);
        assert_string_equal(id, "");
        assert_null(thread);
        json_decref(body);
    }
    /* A NUL inside the id is not a shorter id. */
    json_t *nul = json_pack("{s:s%}", "checkpoint_id", "c1\0x", (size_t)4);
    assert_int_equal(gw_run_checkpoint_parse(id, &thread, nul), FAWN_EINVAL);
    json_decref(nul);
}

/* A conversation: a question, a hidden reminder, an answer with a tool
 * call, its result, the answer; a second question and its answer; then
 * a summary and a hidden message no one sees. */
static const char conversation[] =
    "[{\"type\":\"human\",\"id\":\"h1\",\"content\":\"one\"},"
    "{\"type\":\"human\",\"id\":\"hidden\",\"content\":\"x\",\"additional_kwargs\":"
    "{\"hide_from_ui\":true}},"
    "{\"type\":\"ai\",\"id\":\"a1t\",\"content\":\"\",\"tool_calls\":[{\"id\":\"c\",\"name\":"
    "\"ls\",\"args\":{}}]},"
    "{\"type\":\"tool\",\"id\":\"t1\",\"tool_call_id\":\"c\",\"content\":\"ok\"},"
    "{\"type\":\"ai\",\"id\":\"a1\",\"content\":\"first\"},"
    "{\"type\":\"human\",\"id\":\"h2\",\"name\":\"me\",\"content\":[{\"type\":\"text\",\"text\":"
    "\" two \"},{\"type\":\"image_url\",\"image_url\":\"x\"},{\"type\":\"text\",\"text\":\"!\"}],"
    "\"additional_kwargs\":{\"files\":[{\"filename\":\"a.txt\"}],\"other\":1}},"
    "{\"type\":\"ai\",\"id\":\"a2\",\"content\":[{\"type\":\"text\",\"text\":\"second\"}]},"
    "{\"type\":\"ai\",\"id\":\"sum\",\"name\":\"summary\",\"content\":\"s\"},"
    "{\"type\":\"ai\",\"id\":\"hid\",\"content\":\"h\",\"additional_kwargs\":{\"hide_from_ui\":"
    "true}}]";

/* Which messages a regenerate and an edit may take (DeerFlow's rules), and
 * the question a replay sends again. */
static void replays_pick_the_latest_visible_turn(void **state) {
    json_t *m = json_loads(conversation, 0, NULL);
    assert_non_null(m);
    size_t ai = 9, human = 9;
    assert_int_equal(gw_replay_pick_regenerate(&ai, &human, m, "a2"), 0);
    assert_int_equal(ai, 6);
    assert_int_equal(human, 5);
    static const struct {
        const char *id;
        int code;
    } refused[] = {{"a1", FAWN_EBUSY},  {"a1t", FAWN_EBUSY}, {"h2", FAWN_EBUSY},
                   {"sum", FAWN_EBUSY}, {"hid", FAWN_EBUSY}, {"t1", FAWN_EBUSY},
                   {"zz", FAWN_ENOENT}, {"", FAWN_ENOENT}};
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        ai = human = 9;
        assert_int_equal(gw_replay_pick_regenerate(&ai, &human, m, refused[i].id), refused[i].code);
        assert_int_equal(ai + human, 0);
    }
    assert_int_equal(gw_replay_latest_human(&human, m), 0);
    assert_int_equal(human, 5);
    /* Edit: the latest question, answered with text; the text must change. */
    assert_int_equal(gw_replay_pick_edit(&human, &ai, m, "h2", "two ?"), 0);
    assert_int_equal(human, 5);
    assert_int_equal(ai, 6);
    assert_int_equal(gw_replay_pick_edit(&human, &ai, m, "h2", "two !"), FAWN_EBUSY);
    assert_string_equal(fawn_errmsg(), "Edited message is unchanged");
    assert_int_equal(gw_replay_pick_edit(&human, &ai, m, "h1", "uno"), FAWN_EBUSY);
    assert_string_equal(fawn_errmsg(), "Only the latest completed user turn can be edited");
    assert_int_equal(gw_replay_pick_edit(&human, &ai, m, "hidden", "x"), FAWN_EBUSY);
    /* The question a replay sends: files kept, other keys dropped. */
    json_t *again = gw_replay_human(json_array_get(m, 5), NULL, NULL);
    json_t *want = json_loads("{\"type\":\"human\",\"id\":\"h2\",\"name\":\"me\",\"content\":"
                              "[{\"type\":\"text\",\"text\":\" two \"},{\"type\":\"image_url\","
                              "\"image_url\":\"x\"},{\"type\":\"text\",\"text\":\"!\"}],"
                              "\"additional_kwargs\":{\"files\":[{\"filename\":\"a.txt\"}]}}",
                              0, NULL);
    assert_true(json_equal(again, want));
    json_decref(again);
    json_decref(want);
    again = gw_replay_human(json_array_get(m, 0), "new", "uno");
    want = json_loads("{\"type\":\"human\",\"id\":\"new\",\"content\":[{\"type\":\"text\","
                      "\"text\":\"uno\"}],\"additional_kwargs\":{}}",
                      0, NULL);
    assert_true(json_equal(again, want));
    json_decref(again);
    json_decref(want);
    char *text = gw_replay_text(json_array_get(m, 5));
    assert_string_equal(text, " two !");
    free(text);
    assert_int_equal(gw_replay_edit_text(&text, " \t two words\r\n "), 0);
    assert_string_equal(text, "two words");
    free(text);
    text = (char *)"poison";
    assert_int_equal(gw_replay_edit_text(&text, " \n\t "), FAWN_EBUSY);
    assert_null(text);
    json_decref(m);
    /* An answer that still calls tools is not a turn to edit; no question, nothing to take. */
    m = json_loads("[{\"type\":\"human\",\"id\":\"h\",\"content\":\"q\"},{\"type\":\"ai\",\"id\":"
                   "\"a\",\"content\":\"calling\",\"tool_calls\":[{\"id\":\"c\",\"name\":\"ls\","
                   "\"args\":{}}]}]",
                   0, NULL);
    assert_int_equal(gw_replay_pick_edit(&human, &ai, m, "h", "q2"), FAWN_EBUSY);
    assert_string_equal(fawn_errmsg(), "Only completed assistant text turns can be edited");
    json_array_remove(m, 0);
    assert_int_equal(gw_replay_pick_regenerate(&ai, &human, m, "a"), FAWN_EBUSY);
    human = 9;
    assert_int_equal(gw_replay_latest_human(&human, m), FAWN_ENOENT);
    assert_int_equal(human, 0);
    json_decref(m);
}

/* The process's setsockopt (server.c): a request to cork a TCP socket is
 * answered as done and the socket stays uncorked; any other option is set
 * as asked, and a bad descriptor is still refused. */
static void sockets_are_never_corked(void **state) {
    (void)state;
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    int on = 1, got = -1;
    socklen_t len = sizeof got;
    assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_CORK, &on, sizeof on), 0);
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_CORK, &got, &len), 0);
    assert_int_equal(got, 0);
    assert_int_equal(setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &on, sizeof on), 0);
    got = -1;
    len = sizeof got;
    assert_int_equal(getsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &got, &len), 0);
    assert_int_equal(got, 1);
    close(fd);
    errno = 0;
    assert_int_equal(setsockopt(-1, SOL_SOCKET, SO_REUSEADDR, &on, sizeof on), -1);
    assert_int_equal(errno, EBADF);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(forwarded_client_from_trusted_proxies_only),
        cmocka_unit_test(forwarded_host_from_trusted_proxies_only),
        cmocka_unit_test(throttle_locks_out_across_gateways),
        cmocka_unit_test(form_fields_decode_once),
        cmocka_unit_test(event_ids_parse_with_bounds),
        cmocka_unit_test(sockets_are_never_corked),
        cmocka_unit_test(query_decimals_parse_with_bounds),
        cmocka_unit_test(refused_json_bodies_leave_no_object),
        cmocka_unit_test(thread_views_select_and_extract),
        cmocka_unit_test(thread_ids_are_checked),
        cmocka_unit_test(run_checkpoints_parse),
        cmocka_unit_test(replays_pick_the_latest_visible_turn),
        cmocka_unit_test(health_is_public),
        cmocka_unit_test(repeated_requests_skip_the_store_for_auth),
        cmocka_unit_test(revoked_session_refused_at_once),
        cmocka_unit_test(errors_have_a_detail),
        cmocka_unit_test(bad_address_refused),
        cmocka_unit_test(serve_stops_on_sigterm),
    };
    return cmocka_run_group_tests_name("gateway", tests, setup, teardown);
}
