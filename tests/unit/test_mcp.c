/* The MCP client's parts that need no server: the JSON-RPC reader and
 * writers, the hash that pins a tool, the server configuration (with its
 * redaction), and the pinned tools in the store. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mcp/mcp.h"
#include "mcp/mcp_internal.h"
#include "base/base.h"
#include "support.h"
#include "unit/test_store_open.h"

static int parse(mcp_msg *m, const char *text) { return mcp_msg_parse(m, text, strlen(text)); }

static void test_message_kinds(void **state) {
    (void)state;
    mcp_msg m;
    assert_int_equal(parse(&m, "{\"jsonrpc\":\"2.0\",\"id\":7,\"result\":{\"tools\":[]}}"), 0);
    assert_int_equal(m.kind, MCP_MSG_RESULT);
    assert_true(mcp_msg_answers(&m, 7));
    assert_false(mcp_msg_answers(&m, 8));
    mcp_msg_clear(&m);
    assert_int_equal(
        parse(&m,
              "{\"jsonrpc\":\"2.0\",\"id\":\"7\",\"error\":{\"code\":-32601,\"message\":\"no\"}}"),
        0);
    assert_int_equal(m.kind, MCP_MSG_ERROR);
    assert_int_equal(m.error_code, -32601);
    assert_string_equal(m.error_msg, "no");
    assert_false(mcp_msg_answers(&m, 7)); /* a string id never answers fawn's integer ids */
    mcp_msg_clear(&m);
    assert_int_equal(parse(&m, "{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\","
                               "\"params\":{\"progress\":1}}"),
                     0);
    assert_int_equal(m.kind, MCP_MSG_NOTIFICATION);
    assert_string_equal(m.method, "notifications/progress");
    mcp_msg_clear(&m);
    assert_int_equal(parse(&m, "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"ping\"}"), 0);
    assert_int_equal(m.kind, MCP_MSG_REQUEST);
    assert_false(mcp_msg_answers(&m, 1)); /* a request of the server is no answer */
    mcp_msg_clear(&m);
}

static void test_message_refused(void **state) {
    (void)state;
    static const char *const bad[] = {
        "",
        "null",
        "[{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}}]", /* batches */
        "{\"id\":1,\"result\":{}}",                       /* no jsonrpc */
        "{\"jsonrpc\":\"1.0\",\"id\":1,\"result\":{}}",
        "{\"jsonrpc\":2.0,\"id\":1,\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":null,\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1.5,\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":true,\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"result\":{}}", /* a response without an id */
        "{\"jsonrpc\":\"2.0\",\"id\":1}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{},\"error\":{\"code\":1,\"message\":\"x\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":[]}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":\"text\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"message\":\"x\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"error\":{\"code\":\"1\",\"message\":\"x\"}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"\"}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":3}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"params\":3}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"x\",\"result\":{}}",
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"id\":2,\"result\":{}}", /* duplicate keys */
        "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{}} trailing",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        mcp_msg m;
        POISON(m);
        int r = parse(&m, bad[i]);
        if (r != FAWN_EPROTO)
            fail_msg("accepted or wrong code %d: %s", r, bad[i]);
        assert_null(m.root);
    }
}

static void test_message_bounds(void **state) {
    (void)state;
    mcp_msg m;
    /* nesting past MCP_JSON_DEPTH_MAX, however it is dressed */
    fbuf b = {0};
    assert_int_equal(fbuf_printf(&b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":"), 0);
    for (int i = 0; i < MCP_JSON_DEPTH_MAX; i++)
        assert_int_equal(fbuf_printf(&b, "["), 0);
    for (int i = 0; i < MCP_JSON_DEPTH_MAX; i++)
        assert_int_equal(fbuf_printf(&b, "]"), 0);
    assert_int_equal(fbuf_printf(&b, "}}"), 0);
    assert_int_equal(mcp_msg_parse(&m, b.data, b.len), FAWN_E2BIG);
    fbuf_free(&b);
    /* brackets inside strings do not count */
    assert_int_equal(fbuf_printf(&b, "{\"jsonrpc\":\"2.0\",\"id\":1,\"result\":{\"a\":\""), 0);
    for (int i = 0; i < 2 * MCP_JSON_DEPTH_MAX; i++)
        assert_int_equal(fbuf_printf(&b, "[{\\\""), 0);
    assert_int_equal(fbuf_printf(&b, "\"}}"), 0);
    assert_int_equal(mcp_msg_parse(&m, b.data, b.len), 0);
    mcp_msg_clear(&m);
    fbuf_free(&b);
    /* larger than MCP_MESSAGE_MAX */
    size_t n = MCP_MESSAGE_MAX + 1;
    char *big = malloc(n);
    assert_non_null(big);
    memset(big, ' ', n);
    assert_int_equal(mcp_msg_parse(&m, big, n), FAWN_E2BIG);
    free(big);
}

static void test_writers(void **state) {
    (void)state;
    json_t *params = json_pack("{s:s}", "name", "echo");
    char *req = mcp_request_text(42, "tools/call", params);
    char *note = mcp_notification_text("notifications/initialized", NULL);
    json_decref(params);
    mcp_msg m;
    assert_int_equal(parse(&m, req), 0);
    assert_int_equal(m.kind, MCP_MSG_REQUEST);
    assert_int_equal(json_integer_value(m.id), 42);
    assert_string_equal(json_string_value(json_object_get(m.params, "name")), "echo");
    mcp_msg_clear(&m);
    assert_int_equal(parse(&m, note), 0);
    assert_int_equal(m.kind, MCP_MSG_NOTIFICATION);
    assert_null(m.params);
    assert_null(strstr(note, "\"params\""));
    mcp_msg_clear(&m);
    free(req);
    free(note);
}

static void test_tool_hash(void **state) {
    (void)state;
    char a[65], b[65], c[65], d[65], e[65];
    json_t *s1 = json_loads("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"},"
                            "\"y\":{\"type\":\"number\"}}}",
                            0, NULL);
    json_t *s2 = json_loads("{ \"properties\" : {\"y\":{\"type\":\"number\"},\"x\":{\"type\":"
                            "\"string\"}}, \"type\":\"object\" }",
                            0, NULL);
    json_t *s3 = json_loads("{\"type\":\"object\",\"properties\":{\"x\":{\"type\":\"string\"},"
                            "\"y\":{\"type\":\"integer\"}}}",
                            0, NULL);
    assert_int_equal(mcp_tool_hash(a, "Echoes", s1), 0);
    assert_int_equal(mcp_tool_hash(b, "Echoes", s2), 0);
    assert_string_equal(a, b); /* key order and whitespace do not matter */
    assert_int_equal(mcp_tool_hash(c, "Echoes.", s1), 0);
    assert_string_not_equal(a, c); /* a changed description does */
    assert_int_equal(mcp_tool_hash(d, "Echoes", s3), 0);
    assert_string_not_equal(a, d); /* a changed schema, deep inside, does */
    assert_int_equal(mcp_tool_hash(e, NULL, NULL), 0);
    assert_int_equal(strlen(e), 64);
    json_decref(s1);
    json_decref(s2);
    json_decref(s3);
}

static int build(mcp_servers **out, const char *json) {
    json_t *raw = json_loads(json, 0, NULL);
    assert_non_null(raw);
    int r = mcp_servers_build(out, raw, "mcp.servers");
    json_decref(raw);
    return r;
}

static void test_config(void **state) {
    (void)state;
    setenv("FAWN_TEST_MCP_TOKEN", "s3cret", 1);
    mcp_servers *s = NULL;
    assert_int_equal(build(&s,
                           "{\"web\":{\"type\":\"http\",\"url\":\"http://127.0.0.1:9/mcp\","
                           "\"headers\":{\"Authorization\":\"$FAWN_TEST_MCP_TOKEN\"},"
                           "\"tool_call_timeout\":\"2.5\",\"tools\":{\"echo\":{\"enabled\":"
                           "false}}},"
                           "\"local\":{\"command\":\"npx\",\"args\":[\"x\"],\"env\":{\"K\":\"v\"},"
                           "\"tool_name_prefix\":false,\"enabled\":false}}"),
                     0);
    const mcp_server *web = mcp_servers_find(s, "web"), *local = mcp_servers_find(s, "local");
    assert_non_null(web);
    assert_int_equal(web->type, MCP_HTTP);
    assert_string_equal(web->headers[0], "Authorization: s3cret");
    assert_null(web->headers[1]);
    assert_int_equal(web->call_timeout_s, 3);
    assert_int_equal(web->init_timeout_s, MCP_INIT_TIMEOUT_DEFAULT_S);
    assert_string_equal(web->prefix, "web_");
    assert_int_equal(local->type, MCP_STDIO);
    assert_string_equal(local->prefix, "");
    assert_false(local->enabled);
    /* the answer hides env and header values; what is kept is unresolved */
    json_t *shown = mcp_servers_redacted(s->raw);
    char *text = json_dumps(shown, JSON_COMPACT);
    check_lacks("redacted", text, "s3cret");
    check_lacks("redacted", text, "\"v\"");
    check_contains("redacted", text, "\"Authorization\":\"***\"");
    /* "***" sent back keeps the value; "***" for a new key is refused */
    json_t *merged = NULL;
    assert_int_equal(mcp_servers_unmask(&merged, shown, s->raw), 0);
    assert_string_equal(
        json_string_value(json_object_get(
            json_object_get(json_object_get(merged, "web"), "headers"), "Authorization")),
        "$FAWN_TEST_MCP_TOKEN");
    json_object_set_new(json_object_get(json_object_get(shown, "web"), "headers"), "X-New",
                        json_string("***"));
    json_t *refused = NULL;
    assert_int_equal(mcp_servers_unmask(&refused, shown, s->raw), FAWN_EINVAL);
    assert_null(refused);
    /* a $VAR is the configuration file's to name, never the API's */
    json_object_del(json_object_get(json_object_get(shown, "web"), "headers"), "X-New");
    json_object_set_new(json_object_get(json_object_get(shown, "local"), "env"), "K",
                        json_string("$FAWN_TEST_MCP_TOKEN"));
    assert_int_equal(mcp_servers_unmask(&refused, shown, s->raw), FAWN_EINVAL);
    check_contains("refused", fawn_errmsg(), "mcp_servers.local.env.K");
    json_object_set_new(json_object_get(shown, "web"), "url", json_string("$HOME"));
    json_object_set_new(json_object_get(json_object_get(shown, "local"), "env"), "K",
                        json_string("v"));
    assert_int_equal(mcp_servers_unmask(&refused, shown, s->raw), FAWN_EINVAL);
    check_contains("refused", fawn_errmsg(), "mcp_servers.web.url");
    json_decref(merged);
    free(text);
    json_decref(shown);
    mcp_servers_unref(s);
}

static void test_config_refused(void **state) {
    (void)state;
    static const char *const bad[] = {
        "{\"a b\":{\"command\":\"x\"}}",
        "{\"thirty-three-characters-long-xxxx\":{\"command\":\"x\"}}",
        "{\"s\":{\"command\":\"x\",\"surprise\":1}}",
        "{\"s\":{\"type\":\"http\"}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"file:///etc/passwd\"}}",
        "{\"s\":{\"type\":\"ws\",\"url\":\"http://127.0.0.1/\"}}",
        "{\"s\":{}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"http://127.0.0.1/\",\"headers\":{\"X\":\"a\\r\\nB: "
        "c\"}}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"http://127.0.0.1/"
        "\",\"headers\":{\"X\":\"$FAWN_UNSET_VAR_X\"}}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"http://127.0.0.1/\",\"tool_call_timeout\":0}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"http://127.0.0.1/\",\"tool_call_timeout\":\"1e9\"}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"http://127.0.0.1/\",\"tools\":{\"t\":{\"x\":1}}}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"http://127.0.0.1/\",\"tool_name_prefix\":\"a b\"}}",
        "{\"s\":{\"type\":\"http\",\"url\":\"http://127.0.0.1/\",\"enabled\":\"yes\"}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        mcp_servers *s = (mcp_servers *)1;
        int r = build(&s, bad[i]);
        if (r != FAWN_ECONFIG)
            fail_msg("accepted or wrong code %d: %s", r, bad[i]);
        assert_null(s);
    }
}

static void test_store_pins(void **state) {
    (void)state;
    char dir[] = "/tmp/fawn-test-mcp-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *path = strf("%s/fawn.db", dir);
    store *st = NULL;
    assert_int_equal(test_store_open(&st, path), 0);
    json_t *pins = json_loads("[{\"name\":\"echo\",\"description\":\"d\",\"input_schema\":{},"
                              "\"hash\":\"h1\"},{\"name\":\"add\",\"description\":\"\","
                              "\"input_schema\":{\"type\":\"object\"},\"hash\":\"h2\"}]",
                              0, NULL);
    assert_int_equal(store_mcp_tools_replace(st, "srv", pins), 0);
    json_t *drift = json_pack("{s:s}", "description", "changed");
    assert_int_equal(store_mcp_drift_set(st, "srv", "echo", drift), 0);
    assert_int_equal(store_mcp_drift_set(st, "srv", "nope", drift), FAWN_ENOENT);
    assert_int_equal(store_mcp_drift_set(st, "other", "echo", drift), FAWN_ENOENT);
    json_t *got = NULL;
    assert_int_equal(store_mcp_tools(st, "srv", &got), 0);
    assert_int_equal(json_array_size(got), 2);
    json_t *echo = json_array_get(got, 1); /* by name: add, echo */
    assert_string_equal(json_string_value(json_object_get(echo, "name")), "echo");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(echo, "drift"), "description")),
        "changed");
    assert_true(json_is_null(json_object_get(json_array_get(got, 0), "drift")));
    json_decref(got);
    /* a new discovery replaces the pins and clears the drift */
    json_array_remove(pins, 1);
    assert_int_equal(store_mcp_tools_replace(st, "srv", pins), 0);
    assert_int_equal(store_mcp_tools(st, "srv", &got), 0);
    assert_int_equal(json_array_size(got), 1);
    assert_true(json_is_null(json_object_get(json_array_get(got, 0), "drift")));
    json_decref(got);
    assert_int_equal(store_mcp_tools(st, "other", &got), 0);
    assert_int_equal(json_array_size(got), 0);
    json_decref(got);
    /* a bad entry leaves the earlier pins as they were */
    json_t *bad = json_loads("[{\"name\":\"x\",\"description\":\"d\",\"input_schema\":{},"
                             "\"hash\":\"h\"},{\"name\":\"\"}]",
                             0, NULL);
    assert_int_equal(store_mcp_tools_replace(st, "srv", bad), FAWN_EINVAL);
    assert_int_equal(store_mcp_tools(st, "srv", &got), 0);
    assert_int_equal(json_array_size(got), 1);
    assert_string_equal(json_string_value(json_object_get(json_array_get(got, 0), "name")), "echo");
    json_decref(got);
    json_decref(bad);
    json_decref(drift);
    json_decref(pins);
    /* a rotated refresh token is kept for the configured one it replaced */
    char *token = NULL;
    assert_int_equal(store_mcp_refresh_get(st, &token, "srv", "sha-a"), FAWN_ENOENT);
    assert_null(token);
    assert_int_equal(store_mcp_refresh_set(st, "srv", "sha-a", "rotated-1"), 0);
    assert_int_equal(store_mcp_refresh_set(st, "srv", "sha-a", "rotated-2"), 0);
    assert_int_equal(store_mcp_refresh_get(st, &token, "srv", "sha-a"), 0);
    assert_string_equal(token, "rotated-2");
    free(token);
    /* the operator configured another one since: the saved one is not used */
    assert_int_equal(store_mcp_refresh_get(st, &token, "srv", "sha-b"), FAWN_ENOENT);
    assert_int_equal(store_mcp_refresh_set(st, "srv", "sha-a", ""), FAWN_EINVAL);
    store_close(st);
    char *cmd = strf("rm -rf '%s'", dir);
    assert_int_equal(system(cmd), 0);
    free(cmd);
    free(path);
}

/* The endpoint event of the old SSE transport: resolved against the
 * server's URL, held to its origin. */
static void endpoint_ok(const char *base, const char *data, const char *want) {
    char *url = NULL;
    assert_int_equal(mcp_sse_endpoint(&url, base, data, strlen(data)), 0);
    assert_string_equal(url, want);
    free(url);
}

static void endpoint_refused(const char *base, const char *data, size_t len) {
    char *url = (char *)"unset";
    assert_int_equal(mcp_sse_endpoint(&url, base, data, len), FAWN_EPROTO);
    assert_null(url);
}

static void test_sse_endpoint(void **state) {
    (void)state;
    const char *base = "http://127.0.0.1:3001/sse";
    endpoint_ok(base, "/message?sessionId=ab-12", "http://127.0.0.1:3001/message?sessionId=ab-12");
    endpoint_ok(base, "message?x=1", "http://127.0.0.1:3001/message?x=1");
    endpoint_ok(base, "http://127.0.0.1:3001/m", "http://127.0.0.1:3001/m");
    endpoint_ok("https://mcp.example/a/sse", "https://MCP.example:443/b",
                "https://MCP.example:443/b");
    endpoint_ok("http://mcp.example/sse", "../../m", "http://mcp.example/m");
    /* Another host, port or scheme; a scheme-relative URL to another host. */
    const char *refused[] = {"http://127.0.0.2:3001/message",
                             "http://127.0.0.1:3002/message",
                             "https://127.0.0.1:3001/message",
                             "//evil.example/message",
                             "http://localhost:3001/message",
                             "ftp://127.0.0.1:3001/m",
                             "http://user:pw@127.0.0.1:3001/m",
                             "http://127.0.0.1:3001@evil.example/m",
                             "file:///etc/passwd",
                             "javascript:alert(1)"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        endpoint_refused(base, refused[i], strlen(refused[i]));
    /* Not a URL fawn takes: empty, spaces, controls, a NUL, too long. */
    endpoint_refused(base, "", 0);
    endpoint_refused(base, "/a b", 4);
    endpoint_refused(base, "/a\nb", 4);
    endpoint_refused(base, "/a\0b", 4);
    char *longer = malloc(3000);
    assert_non_null(longer);
    memset(longer, 'a', 3000);
    longer[0] = '/';
    endpoint_refused(base, longer, 3000);
    free(longer);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_message_kinds),  cmocka_unit_test(test_message_refused),
        cmocka_unit_test(test_message_bounds), cmocka_unit_test(test_writers),
        cmocka_unit_test(test_tool_hash),      cmocka_unit_test(test_config),
        cmocka_unit_test(test_config_refused), cmocka_unit_test(test_store_pins),
        cmocka_unit_test(test_sse_endpoint),
    };
    return cmocka_run_group_tests_name("mcp", tests, NULL, NULL);
}
