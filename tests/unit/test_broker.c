/* The credential broker's parts that need no sandbox: broker.* read and
 * checked, the allow-list, and the wire format (every truncation of a
 * valid message refused, malformed lengths, NULs, counts past the cap). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/json.h"
#include "broker/broker.h"
#include "config/config.h"
#include "fake_provider.h"
#include "unit/test_store_open.h"

static broker_config *parse_yaml(const char *yaml, int *r) {
    fawn_config cfg;
    *r = config_load_string(&cfg, yaml, strlen(yaml));
    if (*r < 0)
        return NULL;
    broker_config *c = calloc(1, sizeof *c);
    *r = broker_config_parse(c, cfg.broker);
    config_free(&cfg);
    if (*r < 0) {
        free(c);
        return NULL;
    }
    return c;
}

static void config_drop(broker_config *c) {
    broker_config_free(c);
    free(c);
}

static const char
    *const good = "broker:\n"
                  "  max_concurrent: 4\n"
                  "  clis:\n"
                  "    - name: lark-cli\n"
                  "      binary: /usr/local/bin/lark-cli\n"
                  "      allow: [\"im +messages-send\", \"calendar events list\", docs]\n"
                  "      timeout_s: 30\n"
                  "      env:\n"
                  "        LARKSUITE_CLI_CONFIG_DIR: dir\n"
                  "        LARK_TOKEN: file:token\n"
                  "        LANG: value:C.UTF-8\n";

static void test_config_read(void **state) {
    (void)state;
    int r;
    broker_config *c = parse_yaml(good, &r);
    assert_int_equal(r, 0);
    assert_int_equal(c->n_clis, 1);
    assert_int_equal(c->max_concurrent, 4);
    assert_int_equal(c->max_concurrent_per_sandbox, BROKER_CONCURRENT_PER_SANDBOX_DEFAULT);
    const broker_cli *cli = broker_config_find(c, "lark-cli");
    assert_non_null(cli);
    assert_null(broker_config_find(c, "lark"));
    assert_int_equal(cli->timeout_s, 30);
    assert_int_equal(cli->n_rules, 3);
    assert_string_equal(cli->rules[1].text, "calendar events list");
    assert_int_equal(cli->n_env, 3);
    config_drop(c);
    /* No section: no CLIs, defaults. */
    c = parse_yaml("log_level: info\n", &r);
    assert_int_equal(r, 0);
    assert_int_equal(c->n_clis, 0);
    config_drop(c);
}

static void test_config_refused(void **state) {
    (void)state;
    static const char *const bad[][2] = {
        {"broker: {clis: [{name: x, binary: bin/x, allow: [a]}]}", "absolute"},
        {"broker: {clis: [{name: x, binary: /a/../x, allow: [a]}]}", "absolute"},
        {"broker: {clis: [{name: x, binary: /x}]}", "allow"},
        {"broker: {clis: [{name: x, binary: /x, allow: []}]}", "allow"},
        {"broker: {clis: [{name: ../x, binary: /x, allow: [a]}]}", "name"},
        {"broker: {clis: [{name: .x, binary: /x, allow: [a]}]}", "name"},
        {"broker: {clis: [{name: x, binary: /x, allow: [a]}, {name: x, binary: /y, allow: [a]}]}",
         "twice"},
        {"broker: {clis: [{name: x, binary: /x, allow: [a], env: {T: token}}]}", "file:"},
        {"broker: {clis: [{name: x, binary: /x, allow: [a], env: {T: \"file:../t\"}}]}", "file:"},
        {"broker: {clis: [{name: x, binary: /x, allow: [a], env: {1T: dir}}]}", "variable"},
        {"broker: {clis: [{name: x, binary: /x, allow: [a], timeout_s: 0}]}", "timeout_s"},
        {"broker: {max_concurrent: 100000, clis: []}", "max_concurrent"},
        {"broker: {max_concurrent: -1}", "max_concurrent"},
        {"broker: {clis: [{name: x, binary: /x, allow: [\"a b c d e f g h i\"]}]}", "words"},
        {"broker: [1]", "map"},
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        int r;
        broker_config *c = parse_yaml(bad[i][0], &r);
        if (c)
            fail_msg("accepted: %s", bad[i][0]);
        assert_int_equal(r, FAWN_ECONFIG);
        check_contains(bad[i][0], fawn_errmsg(), bad[i][1]);
    }
}

static const broker_rule *check(const broker_cli *cli, const char *const *args, size_t n) {
    return broker_policy_check(cli, (char *const *)args, n);
}

static void test_allow_list(void **state) {
    (void)state;
    int r;
    broker_config *c = parse_yaml(good, &r);
    const broker_cli *cli = broker_config_find(c, "lark-cli");
    const char *ok1[] = {"im", "+messages-send", "--chat", "oc_1", "--text", "hi"};
    const broker_rule *rule = check(cli, ok1, ARRAY_LEN(ok1));
    assert_non_null(rule);
    assert_string_equal(rule->text, "im +messages-send");
    const char *ok2[] = {"docs"};
    assert_non_null(check(cli, ok2, 1));
    /* Word for word: no partial word, no option before the subcommand, no
     * shorter prefix of a rule, no other subcommand of an allowed group. */
    const char *no[][3] = {{"im", "+messages-sendx", NULL},
                           {"--profile", "im", "+messages-send"},
                           {"im", NULL, NULL},
                           {"im", "+messages-delete", NULL},
                           {"calendar", "events", "delete"},
                           {"doc", NULL, NULL},
                           {"DOCS", NULL, NULL},
                           {"auth", "login", NULL}};
    for (size_t i = 0; i < ARRAY_LEN(no); i++) {
        size_t n = 0;
        while (n < 3 && no[i][n])
            n++;
        if (check(cli, no[i], n))
            fail_msg("allowed: %s %s", no[i][0], n > 1 ? no[i][1] : "");
    }
    assert_null(check(cli, NULL, 0));
    config_drop(c);
}

static void test_wire_round_trip(void **state) {
    (void)state;
    char *argv[] = {"im", "+messages-send", "", "--text=h\xc3\xa9"};
    fbuf msg = {0};
    assert_int_equal(broker_request_encode(&msg, "lark-cli", argv, 4, "in\0put", 6), 0);
    size_t len = 0;
    assert_int_equal(broker_header_parse(&len, (uint8_t *)msg.data, BROKER_REQUEST_MAX), 0);
    assert_int_equal(len, msg.len - BROKER_HEADER_LEN);
    broker_request req;
    const uint8_t *body = (uint8_t *)msg.data + BROKER_HEADER_LEN;
    assert_int_equal(broker_request_parse(&req, body, len), 0);
    assert_string_equal(req.name, "lark-cli");
    assert_int_equal(req.argc, 4);
    assert_string_equal(req.argv[2], "");
    assert_string_equal(req.argv[3], "--text=h\xc3\xa9");
    assert_null(req.argv[4]);
    assert_int_equal(req.in_len, 6);
    assert_memory_equal(req.in, "in\0put", 6);
    broker_request_clear(&req);
    /* Every truncation, and a byte too many, is refused. */
    for (size_t n = 0; n < len; n++) {
        uint8_t *cut = malloc(n ? n : 1);
        memcpy(cut, body, n);
        assert_int_equal(broker_request_parse(&req, cut, n), FAWN_EPROTO);
        free(cut);
    }
    uint8_t *more = malloc(len + 1);
    memcpy(more, body, len);
    more[len] = 0;
    assert_int_equal(broker_request_parse(&req, more, len + 1), FAWN_EPROTO);
    free(more);
    fbuf_free(&msg);

    broker_reply rep = {.exit_code = 126,
                        .flags = BROKER_STDOUT_TRUNCATED,
                        .out = "o",
                        .out_len = 1,
                        .err = "no\n",
                        .err_len = 3};
    assert_int_equal(broker_reply_encode(&msg, &rep), 0);
    broker_reply back;
    assert_int_equal(broker_reply_parse(&back, (uint8_t *)msg.data + BROKER_HEADER_LEN,
                                        msg.len - BROKER_HEADER_LEN),
                     0);
    assert_int_equal(back.exit_code, 126);
    assert_int_equal(back.flags, BROKER_STDOUT_TRUNCATED);
    assert_memory_equal(back.err, "no\n", 3);
    assert_int_equal(broker_reply_parse(&back, (uint8_t *)msg.data + BROKER_HEADER_LEN,
                                        msg.len - BROKER_HEADER_LEN - 1),
                     FAWN_EPROTO);
    fbuf_free(&msg);
}

static void put_u32(fbuf *b, uint32_t v) {
    uint8_t w[4] = {(uint8_t)(v >> 24), (uint8_t)(v >> 16), (uint8_t)(v >> 8), (uint8_t)v};
    assert_int_equal(fbuf_append(b, w, 4), 0);
}

static void test_wire_refuses_malformed(void **state) {
    (void)state;
    size_t len = 0;
    uint8_t hdr[BROKER_HEADER_LEN] = {'F', 'W', 'B', '1', 0x00, 0x10, 0x00, 0x01};
    assert_int_equal(broker_header_parse(&len, hdr, BROKER_REQUEST_MAX), FAWN_E2BIG);
    hdr[5] = 0x10;
    hdr[6] = 0;
    hdr[7] = 0;
    assert_int_equal(broker_header_parse(&len, hdr, BROKER_REQUEST_MAX), 0);
    assert_int_equal(len, BROKER_REQUEST_MAX);
    memcpy(hdr, "POST", 4);
    assert_int_equal(broker_header_parse(&len, hdr, BROKER_REQUEST_MAX), FAWN_EPROTO);

    broker_request req;
    struct {
        const char *name;
        uint32_t argc;
        const char *arg; /* with its NUL when nul is set */
        bool nul;
        uint32_t claimed; /* an argument length claimed, 0: the real one */
    } cases[] = {
        {"x/y", 0, NULL, false, 0},         {"", 0, NULL, false, 0},
        {".hidden", 0, NULL, false, 0},     {"x", BROKER_ARGS_MAX + 1, NULL, false, 0},
        {"x", 1, "a\0b", true, 0},          {"x", 1, "abc", false, 0xffffffffu},
        {"x", 0xffffffffu, NULL, false, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        fbuf b = {0};
        size_t n = strlen(cases[i].name);
        uint8_t n16[2] = {0, (uint8_t)n};
        assert_int_equal(fbuf_append(&b, n16, 2), 0);
        assert_int_equal(fbuf_append(&b, cases[i].name, n), 0);
        put_u32(&b, cases[i].argc);
        if (cases[i].arg) {
            size_t alen = cases[i].nul ? 3 : strlen(cases[i].arg);
            put_u32(&b, cases[i].claimed ? cases[i].claimed : (uint32_t)alen);
            assert_int_equal(fbuf_append(&b, cases[i].arg, alen), 0);
        }
        put_u32(&b, 0);
        assert_int_equal(broker_request_parse(&req, (uint8_t *)b.data, b.len), FAWN_EPROTO);
        fbuf_free(&b);
    }
}

/* A provider without broker support (no per-sandbox directory, no
 * attestation) cannot host configured CLIs: the gateway does not start,
 * rather than run without attestation. With no CLI there is no broker. */
#define P_SID "0123456789abcdef"
#define P_UID "0f8a2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
#define NONCE1 "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"
#define NONCE2 "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"

static broker_proof proof_fixture(void) {
    broker_proof p = {.timestamp = 1700000000};
    snprintf(p.sandbox_id, sizeof p.sandbox_id, P_SID);
    snprintf(p.pod_uid, sizeof p.pod_uid, P_UID);
    snprintf(p.nonce, sizeof p.nonce, NONCE1);
    snprintf(p.mac, sizeof p.mac, NONCE2);
    return p;
}

/* A proof line round-trips; every byte changed, every truncation and every
 * malformed field is refused. */
static void test_proof_line(void **state) {
    (void)state;
    broker_proof p = proof_fixture(), q;
    char line[BROKER_PROOF_LEN + 1];
    assert_int_equal(broker_proof_format(line, &p), 0);
    assert_int_equal(strlen(line), BROKER_PROOF_LEN);
    assert_int_equal(broker_proof_parse(&q, line, BROKER_PROOF_LEN), 0);
    assert_memory_equal(&p, &q, sizeof p);
    for (size_t i = 0; i < BROKER_PROOF_LEN; i++) {
        char bad[BROKER_PROOF_LEN + 1];
        memcpy(bad, line, sizeof bad);
        bad[i] = 'X';
        assert_int_equal(broker_proof_parse(&q, bad, BROKER_PROOF_LEN), FAWN_EPROTO);
        assert_string_equal(q.sandbox_id, ""); /* zeroed on failure */
        assert_int_equal(broker_proof_parse(&q, line, i), FAWN_EPROTO);
    }
    /* Uppercase hex, a time past INT64_MAX, a line too long. */
    char bad[BROKER_PROOF_LEN + 2];
    memcpy(bad, line, BROKER_PROOF_LEN + 1);
    bad[5] = 'A';
    assert_int_equal(broker_proof_parse(&q, bad, BROKER_PROOF_LEN), FAWN_EPROTO);
    memcpy(bad, line, BROKER_PROOF_LEN + 1);
    memcpy(bad + 59, "9999999999999999999", 19);
    assert_int_equal(broker_proof_parse(&q, bad, BROKER_PROOF_LEN), FAWN_EPROTO);
    memcpy(bad, line, BROKER_PROOF_LEN + 1);
    bad[BROKER_PROOF_LEN] = '\n';
    assert_int_equal(broker_proof_parse(&q, bad, BROKER_PROOF_LEN + 1), FAWN_EPROTO);
    /* Nothing malformed is written either. */
    p.pod_uid[3] = 'G';
    assert_int_equal(broker_proof_format(line, &p), FAWN_EINVAL);
    assert_string_equal(line, "");
    p = proof_fixture();
    p.timestamp = -1;
    assert_int_equal(broker_proof_format(line, &p), FAWN_EINVAL);
}

/* A proof is taken once, and only near the gateway's time; a full table
 * refuses rather than forgets. */
static void test_nonces_refuse_replay(void **state) {
    (void)state;
    broker_nonces *n = NULL;
    const int64_t now = 1700000000, w = BROKER_PROOF_WINDOW_S;
    assert_int_equal(broker_nonces_new(&n), 0);
    assert_int_equal(broker_nonce_admit(n, NONCE1, now, now), 0);
    assert_true(broker_nonce_seen(n, NONCE1, now + 1));
    assert_false(broker_nonce_seen(n, NONCE2, now + 1));
    assert_int_equal(broker_nonce_admit(n, NONCE1, now, now + 1), FAWN_EEXIST);
    assert_int_equal(broker_nonce_admit(n, NONCE1, now, now + w), FAWN_EEXIST);
    /* Past its window the nonce is forgotten, and its proof refused by time. */
    assert_false(broker_nonce_seen(n, NONCE1, now + w + 1));
    assert_false(broker_proof_current(now, now + w + 1));
    assert_true(broker_proof_current(now - w, now));
    assert_int_equal(broker_nonce_admit(n, NONCE1, now, now + w + 1), FAWN_ETIMEDOUT);
    assert_int_equal(broker_nonce_admit(n, NONCE2, now - w - 1, now), FAWN_ETIMEDOUT);
    assert_int_equal(broker_nonce_admit(n, NONCE2, now + w + 1, now), FAWN_ETIMEDOUT);
    assert_int_equal(broker_nonce_admit(n, NONCE2, now + w, now), 0);
    assert_int_equal(broker_nonce_admit(n, NONCE2, now, now), FAWN_EEXIST);
    broker_nonces_free(n);
    assert_int_equal(broker_nonces_new(&n), 0);
    char nonce[65];
    for (int i = 0; i < BROKER_NONCES_MAX; i++) {
        snprintf(nonce, sizeof nonce, "%064x", i);
        assert_int_equal(broker_nonce_admit(n, nonce, now, now), 0);
    }
    snprintf(nonce, sizeof nonce, "%064x", BROKER_NONCES_MAX);
    assert_int_equal(broker_nonce_admit(n, nonce, now, now), FAWN_EBUSY);
    /* Once their window passed, there is room again. */
    assert_int_equal(broker_nonce_admit(n, nonce, now + w + 1, now + w + 1), 0);
    broker_nonces_free(n);
}

/* A port of 127.0.0.1 free a moment ago. */
static int free_port(void) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    close(fd);
    return ntohs(a.sin_port);
}

static int attest_remote_never(void *ctx, enum sbx_attestation *out,
                               const sbx_remote_caller *caller) {
    (void)ctx;
    (void)caller;
    *out = SBX_ATTEST_UNKNOWN;
    return 0;
}

static int broker_dir_none(void *ctx, char out[PATH_MAX], const char *sandbox_id) {
    (void)ctx;
    (void)sandbox_id;
    out[0] = '\0';
    return FAWN_EUNSUP;
}

static int attest_peer_never(void *ctx, enum sbx_attestation *out, const char *sandbox_id,
                             const sbx_peer *peer) {
    (void)ctx;
    (void)sandbox_id;
    (void)peer;
    *out = SBX_ATTEST_UNKNOWN;
    return 0;
}

static void test_broker_needs_a_provider_that_attests(void **state) {
    (void)state;
    char home[] = "/tmp/fawn-broker-unit-XXXXXX";
    assert_non_null(mkdtemp(home));
    char *db = strf("%s/fawn.db", home);
    store *st = NULL;
    authz_policy *policy = NULL;
    sbx_manager *m = NULL;
    fake_provider *fp = fake_provider_new();
    sbx_manager_config mc = {.call_timeout_ms = 1000};
    assert_int_equal(test_store_open(&st, db), 0);
    assert_int_equal(authz_policy_load(&policy, NULL), 0);
    assert_int_equal(sbx_manager_new(&m, &mc, fake_provider_iface(fp), st, policy), 0);
    assert_false(sbx_broker_supported(m));
    fawn_config cfg;
    const char *yaml = "broker: {clis: [{name: x, binary: /bin/true, allow: [a]}]}\n";
    assert_int_equal(config_load_string(&cfg, yaml, strlen(yaml)), 0);
    broker *b = (broker *)1;
    assert_int_equal(broker_new(&b, &cfg, m), FAWN_ECONFIG);
    assert_null(b);
    check_contains("message", fawn_errmsg(), "sandbox.provider: local");
    config_free(&cfg);
    assert_int_equal(config_load_string(&cfg, "log_level: info\n", 16), 0);
    b = (broker *)1;
    assert_int_equal(broker_new(&b, &cfg, m), 0);
    assert_null(b);
    config_free(&cfg);
    sbx_manager_free(m);
    /* A provider whose boxes call over the network needs broker.listen,
     * and only it may have one. */
    fake_provider_iface(fp)->attest_remote = attest_remote_never;
    assert_int_equal(sbx_manager_new(&m, &mc, fake_provider_iface(fp), st, policy), 0);
    assert_true(sbx_broker_remote(m));
    assert_int_equal(config_load_string(&cfg, yaml, strlen(yaml)), 0);
    assert_int_equal(broker_new(&b, &cfg, m), FAWN_ECONFIG);
    check_contains("message", fawn_errmsg(), "broker.listen: required");
    config_free(&cfg);
    char *tcp = strf("home: %s\nbroker: {listen: '127.0.0.1:%d', clis: [{name: x, binary: "
                     "/bin/true, allow: [a]}]}\n",
                     home, free_port());
    assert_int_equal(config_load_string(&cfg, tcp, strlen(tcp)), 0);
    assert_int_equal(broker_new(&b, &cfg, m), 0);
    assert_non_null(b);
    broker_free(b);
    config_free(&cfg);
    sbx_manager_free(m);
    fake_provider_iface(fp)->attest_remote = NULL;
    fake_provider_iface(fp)->broker_dir = broker_dir_none;
    fake_provider_iface(fp)->attest_peer = attest_peer_never;
    assert_int_equal(sbx_manager_new(&m, &mc, fake_provider_iface(fp), st, policy), 0);
    assert_int_equal(config_load_string(&cfg, tcp, strlen(tcp)), 0);
    assert_int_equal(broker_new(&b, &cfg, m), FAWN_ECONFIG);
    check_contains("message", fawn_errmsg(), "broker.listen: only for");
    config_free(&cfg);
    free(tcp);
    sbx_manager_free(m);
    fake_provider_free(fp);
    authz_policy_free(policy);
    store_close(st);
    char *cmd = strf("rm -rf %s", home);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(db);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_config_read),
        cmocka_unit_test(test_config_refused),
        cmocka_unit_test(test_allow_list),
        cmocka_unit_test(test_wire_round_trip),
        cmocka_unit_test(test_wire_refuses_malformed),
        cmocka_unit_test(test_broker_needs_a_provider_that_attests),
        cmocka_unit_test(test_proof_line),
        cmocka_unit_test(test_nonces_refuse_replay),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
