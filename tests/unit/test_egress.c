/* The egress proxy's parsers and its decision on targets (src/sandbox/egress.h);
 * the proxy under attack from a real sandbox is tests/escape/test_escape_egress.c. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <string.h>

#include "config/config.h"
#include "sandbox/egress.h"

/* ---- request heads ---- */

static int parse(egress_request *r, const char *head) {
    return egress_request_parse(r, head, strlen(head));
}

static void test_connect_parsed(void **state) {
    egress_request r;
    assert_int_equal(parse(&r, "CONNECT Registry.NPMJS.org:443 HTTP/1.1\r\nHost: x\r\n\r\nextra"),
                     0);
    assert_true(r.connect);
    assert_false(r.literal);
    assert_string_equal(r.host, "registry.npmjs.org");
    assert_int_equal(r.port, 443);
    assert_int_equal(r.head_len,
                     strlen("CONNECT Registry.NPMJS.org:443 HTTP/1.1\r\nHost: x\r\n\r\n"));
    assert_null(r.forward);
    egress_request_clear(&r);
    assert_int_equal(parse(&r, "CONNECT [::1]:8443 HTTP/1.1\r\n\r\n"), 0);
    assert_true(r.literal);
    assert_string_equal(r.host, "::1");
    assert_int_equal(r.port, 8443);
    egress_request_clear(&r);
    assert_int_equal(parse(&r, "CONNECT 10.0.0.5:22 HTTP/1.0\r\n\r\n"), 0);
    assert_true(r.literal);
    egress_request_clear(&r);
}

static void test_connect_refused_forms(void **state) {
    const char *const bad[] = {
        "CONNECT example.com HTTP/1.1\r\n\r\n",                  /* no port */
        "CONNECT example.com:0 HTTP/1.1\r\n\r\n",                /* port 0 */
        "CONNECT example.com:65536 HTTP/1.1\r\n\r\n",            /* past 65535 */
        "CONNECT exa_mple.com:443 HTTP/1.1\r\n\r\n",             /* not a DNS name */
        "CONNECT [fe80::1%eth0]:443 HTTP/1.1\r\n\r\n",           /* a zone */
        "CONNECT [::1:443 HTTP/1.1\r\n\r\n",                     /* no bracket */
        "CONNECT example.com:443 HTTP/2.0\r\n\r\n",              /* version */
        "CONNECT example.com:443 HTTP/1.1\nHost: x\r\n\r\n",     /* bare LF */
        "CONNECT example.com:443 HTTP/1.1\r\nA: b\rc\r\n\r\n",   /* bare CR */
        "connect example.com:443 HTTP/1.1\r\n\r\n",              /* method case */
        "GET /index.html HTTP/1.1\r\nHost: example.com\r\n\r\n", /* origin form */
        "GET https://example.com/ HTTP/1.1\r\n\r\n",             /* scheme */
        "GET http://user:pw@example.com/ HTTP/1.1\r\n\r\n",      /* user info */
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        egress_request r;
        POISON(r);
        if (parse(&r, bad[i]) != FAWN_EINVAL)
            fail_msg("accepted: %s", bad[i]);
        assert_null(r.forward);
    }
}

static void test_plain_forwarded_in_origin_form(void **state) {
    egress_request r;
    assert_int_equal(parse(&r, "GET http://Deb.Debian.org/debian/dists?x=1 HTTP/1.1\r\n"
                               "Host: deb.debian.org:80\r\nUser-Agent: t\r\n"
                               "Proxy-Authorization: Basic eA==\r\nConnection: keep-alive\r\n"
                               "Proxy-Connection: keep-alive\r\n\r\n"),
                     0);
    assert_false(r.connect);
    assert_string_equal(r.host, "deb.debian.org");
    assert_int_equal(r.port, 80);
    assert_string_equal(r.forward, "GET /debian/dists?x=1 HTTP/1.1\r\nUser-Agent: t\r\n"
                                   "Host: deb.debian.org:80\r\nConnection: close\r\n\r\n");
    assert_int_equal(r.forward_len, strlen(r.forward));
    egress_request_clear(&r);
    assert_int_equal(parse(&r, "POST http://127.0.0.1:8080?q HTTP/1.1\r\nContent-Length: 5\r\n\r\n"
                               "hello"),
                     0);
    assert_true(r.literal);
    assert_int_equal(r.port, 8080);
    assert_int_equal(r.content_length, 5);
    check_contains("forward", r.forward, "POST /?q HTTP/1.1\r\n");
    check_contains("forward", r.forward, "Content-Length: 5\r\n");
    egress_request_clear(&r);
}

static void test_plain_host_must_match(void **state) {
    const char *const bad[] = {
        "GET http://a.example/ HTTP/1.1\r\nHost: b.example\r\n\r\n",
        "GET http://a.example/ HTTP/1.1\r\nHost: a.example:8080\r\n\r\n",
        "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nHost: a.example\r\n\r\n",
        "GET http://a.example/ HTTP/1.1\r\nHost: a.example\r\nTransfer-Encoding: chunked\r\n\r\n",
        "GET http://a.example/ HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n",
        "GET http://a.example/ HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
        "GET http://a.example/ HTTP/1.1\r\nBad Header: x\r\n\r\n",
        "GET http://a.example/ HTTP/1.1\r\n folded: x\r\n\r\n",
        "GET http://a.example/a b HTTP/1.1\r\n\r\n",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        egress_request r;
        if (parse(&r, bad[i]) != FAWN_EINVAL)
            fail_msg("accepted: %s", bad[i]);
    }
    egress_request r;
    assert_int_equal(parse(&r, "GET http://A.example/ HTTP/1.1\r\nHost: a.EXAMPLE\r\n\r\n"), 0);
    egress_request_clear(&r);
}

static void test_head_bounds(void **state) {
    egress_request r;
    assert_int_equal(parse(&r, "CONNECT a.example:443 HTTP/1.1\r\n"), FAWN_E2BIG);
    /* A head that never ends within EGRESS_HEAD_MAX is refused, not awaited. */
    char *big = calloc(1, EGRESS_HEAD_MAX + 64);
    strcpy(big, "GET http://a.example/ HTTP/1.1\r\nX: ");
    memset(big + strlen(big), 'a', EGRESS_HEAD_MAX + 16);
    assert_int_equal(parse(&r, big), FAWN_EINVAL);
    free(big);
    fbuf many = {0};
    assert_int_equal(fbuf_printf(&many, "CONNECT a.example:443 HTTP/1.1\r\n"), 0);
    for (int i = 0; i <= EGRESS_HEADERS_MAX; i++)
        assert_int_equal(fbuf_printf(&many, "X%d: y\r\n", i), 0);
    assert_int_equal(fbuf_printf(&many, "\r\n"), 0);
    assert_int_equal(parse(&r, many.data), FAWN_EINVAL);
    fbuf_free(&many);
}

/* ---- ClientHello ---- */

/* A minimal TLS 1.2 ClientHello naming sni (none when NULL), in out. */
static size_t hello(uint8_t *out, const char *sni, bool twice) {
    uint8_t body[1024];
    size_t n = 0;
    body[n++] = 3, body[n++] = 3;
    memset(body + n, 7, 32), n += 32;
    body[n++] = 0;                                                    /* session id */
    body[n++] = 0, body[n++] = 2, body[n++] = 0x13, body[n++] = 0x01; /* one suite */
    body[n++] = 1, body[n++] = 0;                                     /* null compression */
    size_t ext_at = n;
    n += 2;
    for (int k = 0; sni && k < (twice ? 2 : 1); k++) {
        size_t len = strlen(sni);
        body[n++] = 0, body[n++] = 0; /* server_name */
        body[n++] = (uint8_t)((len + 5) >> 8), body[n++] = (uint8_t)(len + 5);
        body[n++] = (uint8_t)((len + 3) >> 8), body[n++] = (uint8_t)(len + 3);
        body[n++] = 0;
        body[n++] = (uint8_t)(len >> 8), body[n++] = (uint8_t)len;
        memcpy(body + n, sni, len), n += len;
    }
    body[n++] = 0, body[n++] = 0x2b, body[n++] = 0, body[n++] = 3; /* supported_versions */
    body[n++] = 2, body[n++] = 3, body[n++] = 4;
    body[ext_at] = (uint8_t)((n - ext_at - 2) >> 8), body[ext_at + 1] = (uint8_t)(n - ext_at - 2);
    size_t m = 0;
    out[m++] = 22, out[m++] = 3, out[m++] = 1;
    out[m++] = (uint8_t)((n + 4) >> 8), out[m++] = (uint8_t)(n + 4);
    out[m++] = 1, out[m++] = 0, out[m++] = (uint8_t)(n >> 8), out[m++] = (uint8_t)n;
    memcpy(out + m, body, n);
    return m + n;
}

static void test_sni_read(void **state) {
    uint8_t b[2048];
    char sni[NET_HOST_MAX + 1];
    size_t n = hello(b, "Registry.npmjs.org", false);
    assert_int_equal(egress_tls_sni(sni, b, n), 0);
    assert_string_equal(sni, "registry.npmjs.org");
    /* Each shorter prefix asks for more. */
    for (size_t k = 0; k < n; k++)
        assert_int_equal(egress_tls_sni(sni, b, k), FAWN_E2BIG);
    n = hello(b, NULL, false);
    assert_int_equal(egress_tls_sni(sni, b, n), 0);
    assert_string_equal(sni, "");
}

static void test_sni_refused_forms(void **state) {
    uint8_t b[2048];
    char sni[NET_HOST_MAX + 1];
    size_t n = hello(b, "a.example", true); /* two server names */
    assert_int_equal(egress_tls_sni(sni, b, n), FAWN_EINVAL);
    n = hello(b, "10.0.0.1", false); /* an address is no server name */
    assert_int_equal(egress_tls_sni(sni, b, n), FAWN_EINVAL);
    n = hello(b, "a\x01.example", false);
    assert_int_equal(egress_tls_sni(sni, b, n), FAWN_EINVAL);
    n = hello(b, "a.example", false);
    b[5] = 2; /* a ServerHello */
    assert_int_equal(egress_tls_sni(sni, b, n), FAWN_EINVAL);
    n = hello(b, "a.example", false);
    b[8] += 1; /* the hello claims more than its record */
    assert_int_equal(egress_tls_sni(sni, b, n), FAWN_EINVAL);
    n = hello(b, "a.example", false);
    b[0] = 23; /* application data */
    assert_int_equal(egress_tls_sni(sni, b, n), FAWN_EINVAL);
    static const char plain[] = "GET / HTTP/1.1\r\n\r\n";
    assert_int_equal(egress_tls_sni(sni, (const uint8_t *)plain, strlen(plain)), FAWN_EINVAL);
}

/* ---- the decision on targets ---- */

static void policy_of(egress_policy *p, const char *allow_json) {
    fawn_config cfg;
    assert_int_equal(config_defaults(&cfg), 0);
    cfg.sandbox.egress.allow = json_loads(allow_json, 0, NULL);
    assert_non_null(cfg.sandbox.egress.allow);
    assert_int_equal(egress_policy_from_config(p, &cfg), 0);
    config_free(&cfg);
}

static void test_only_listed_targets(void **state) {
    egress_policy p;
    policy_of(&p, "[\"deb.debian.org:80\", \"Registry.npmjs.org\", \"10.0.0.0/24:8080\","
                  " \"[2001:db8::/32]:443\"]");
    assert_int_equal(p.n_tls_ports, 1);
    assert_int_equal(p.tls_ports[0], 443);
    assert_int_equal(p.limits.max_connections, 32);
    assert_true(egress_target_listed(&p, "deb.debian.org", false, 80));
    assert_false(egress_target_listed(&p, "deb.debian.org", false, 443));
    assert_true(egress_target_listed(&p, "registry.npmjs.org", false, 443));
    assert_true(egress_target_listed(&p, "registry.npmjs.org", false, 22));
    assert_false(egress_target_listed(&p, "evil.npmjs.org", false, 443));
    assert_false(egress_target_listed(&p, "npmjs.org", false, 443));
    assert_true(egress_target_listed(&p, "10.0.0.5", true, 8080));
    assert_false(egress_target_listed(&p, "10.0.0.5", true, 8081));
    assert_false(egress_target_listed(&p, "10.0.1.5", true, 8080));
    assert_true(egress_target_listed(&p, "2001:db8::1", true, 443));
    /* A public address is not enough: only what the list names. */
    assert_false(egress_target_listed(&p, "93.184.216.34", true, 80));
    assert_false(egress_target_listed(&p, "1.1.1.1", true, 443));
    assert_false(egress_target_listed(&p, "169.254.169.254", true, 80));
    /* A name that is an address in a listed range is still a name. */
    assert_false(egress_target_listed(&p, "10.0.0.5", false, 8080));
    egress_policy_free(&p);
}

static void test_policy_config_errors(void **state) {
    fawn_config cfg;
    egress_policy p;
    assert_int_equal(config_defaults(&cfg), 0);
    cfg.sandbox.egress.allow = json_pack("[s]", "http://x");
    assert_int_equal(egress_policy_from_config(&p, &cfg), FAWN_ECONFIG);
    check_contains("message", fawn_errmsg(), "sandbox.egress.allow[0]");
    json_decref(cfg.sandbox.egress.allow);
    cfg.sandbox.egress.allow = NULL;
    cfg.sandbox.egress.tls_ports = json_pack("[s,s]", "443", "70000");
    assert_int_equal(egress_policy_from_config(&p, &cfg), FAWN_ECONFIG);
    check_contains("message", fawn_errmsg(), "sandbox.egress.tls_ports[1]");
    config_free(&cfg);
}

static void test_config_keys(void **state) {
    fawn_config cfg;
    const char *yaml = "sandbox:\n  network: allowlist\n  egress:\n    allow: [\"a.example:443\"]\n"
                       "    tls_ports: [443, 8443]\n    max_connections: 4\n"
                       "    idle_timeout_s: 30\n    max_connection_mb: 64\n";
    assert_int_equal(config_load_string(&cfg, yaml, strlen(yaml)), 0);
    assert_int_equal(cfg.sandbox.network, FAWN_NET_ALLOWLIST);
    assert_int_equal(json_array_size(cfg.sandbox.egress.allow), 1);
    assert_string_equal(json_string_value(json_array_get(cfg.sandbox.egress.tls_ports, 1)), "8443");
    assert_int_equal(cfg.sandbox.egress.max_connections, 4);
    egress_policy p;
    assert_int_equal(egress_policy_from_config(&p, &cfg), 0);
    assert_int_equal(p.limits.idle_timeout_ms, 30000);
    assert_int_equal(p.limits.max_bytes, (uint64_t)64 << 20);
    assert_int_equal(p.n_tls_ports, 2);
    egress_policy_free(&p);
    config_free(&cfg);
    const char *remote = "sandbox:\n  network: allowlist\n  provider: remote\n  remote: {}\n";
    assert_int_equal(config_load_string(&cfg, remote, strlen(remote)), FAWN_ECONFIG);
    check_contains("message", fawn_errmsg(), "allowlist needs sandbox.provider local");
    const char *zero = "sandbox:\n  egress:\n    max_connections: 0\n";
    assert_int_equal(config_load_string(&cfg, zero, strlen(zero)), FAWN_ECONFIG);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_connect_parsed),
        cmocka_unit_test(test_connect_refused_forms),
        cmocka_unit_test(test_plain_forwarded_in_origin_form),
        cmocka_unit_test(test_plain_host_must_match),
        cmocka_unit_test(test_head_bounds),
        cmocka_unit_test(test_sni_read),
        cmocka_unit_test(test_sni_refused_forms),
        cmocka_unit_test(test_only_listed_targets),
        cmocka_unit_test(test_policy_config_errors),
        cmocka_unit_test(test_config_keys),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
