#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "authz/authz.h"
#include "base/base.h"
#include "support.h"

#define SANDBOX_DENIED "Sandbox execution is not permitted for your role"

/* The three roles of the documented example. */
#define EXAMPLE_ROLES                                                                              \
    "\"roles\": {"                                                                                 \
    "  \"admin\": {\"tools\": {\"allow\": \"*\"}, \"routes\": {\"allow\": \"*\"},"                 \
    "              \"models\": {\"allow\": \"*\"}},"                                               \
    "  \"user\": {\"tools\": {\"allow\": \"*\", \"deny\": [\"update_agent\"]},"                    \
    "             \"routes\": {\"allow\": \"*\"}},"                                                \
    "  \"guest\": {\"tools\": {\"allow\": [\"read_file\"]},"                                       \
    "              \"routes\": {\"allow\": [\"threads:read\", \"runs:read\"]},"                    \
    "              \"models\": {\"allow\": [\"small\"]}}}"

static json_t *json_parse(const char *text) {
    json_error_t jerr;
    json_t *j = json_loads(text, JSON_DECODE_ANY | JSON_ALLOW_NUL, &jerr);
    if (!j)
        fail_msg("test JSON does not parse (%s): %s", jerr.text, text);
    return j;
}

static authz_policy *load_json(json_t *j) {
    authz_policy *p = NULL;
    int r = authz_policy_load(&p, j);
    json_decref(j);
    if (r != 0)
        fail_msg("load failed (%d): %s", r, fawn_errmsg());
    assert_non_null(p);
    return p;
}

static authz_policy *load_text(const char *text) { return load_json(json_parse(text)); }

/* Loading j must fail with FAWN_ECONFIG and a message containing want. */
static void expect_config_error_json(json_t *j, const char *what, const char *want) {
    authz_policy *p = NULL;
    int r = authz_policy_load(&p, j);
    json_decref(j);
    if (r != FAWN_ECONFIG)
        fail_msg("%s: expected FAWN_ECONFIG, got %d (%s)", what, r, fawn_errmsg());
    assert_null(p);
    check_contains(what, fawn_errmsg(), want);
}

static void expect_config_error(const char *text, const char *want) {
    expect_config_error_json(json_parse(text), text, want);
}

static void expect_denied(const authz_policy *p, const char *role, enum authz_resource res,
                          const char *name) {
    int r = authz_check(p, role, res, name);
    if (r != FAWN_EPERM)
        fail_msg("role %s, item %s: expected denial, got %d", role ? role : "(null)", name, r);
    check_contains(name, fawn_errmsg(), "Permission denied");
}

static void expect_allowed(const authz_policy *p, const char *role, enum authz_resource res,
                           const char *name) {
    int r = authz_check(p, role, res, name);
    if (r != 0)
        fail_msg("role %s, item %s: expected allow, got %d (%s)", role ? role : "(null)", name, r,
                 fawn_errmsg());
}

/* ---- absent and disabled ---- */

static void test_null_section_is_disabled(void **state) {
    authz_policy *p = NULL;
    assert_int_equal(authz_policy_load(&p, NULL), 0);
    assert_non_null(p);
    assert_false(authz_enabled(p));
    expect_allowed(p, "nobody", AUTHZ_TOOLS, "update_agent");
    expect_allowed(p, NULL, AUTHZ_SANDBOX, "execute");
    assert_int_equal(authz_route_permissions(p, "nobody"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_sandbox_execute(p, "nobody"), 0);
    authz_policy_free(p);

    p = load_json(json_null());
    assert_false(authz_enabled(p));
    authz_policy_free(p);

    p = load_text("{}");
    assert_false(authz_enabled(p));
    assert_int_equal(authz_route_permissions(p, ""), AUTHZ_ROUTES_ALL);
    authz_policy_free(p);
    authz_policy_free(NULL);
}

static void test_disabled_grants_everything(void **state) {
    authz_policy *p = load_text("{\"enabled\": false, \"fail_closed\": true, " EXAMPLE_ROLES "}");
    assert_false(authz_enabled(p));
    expect_allowed(p, "guest", AUTHZ_TOOLS, "bash");
    expect_allowed(p, "guest", AUTHZ_MODELS, "large");
    expect_allowed(p, "user", AUTHZ_TOOLS, "update_agent");
    expect_allowed(p, "intruder", AUTHZ_TOOLS, "bash");
    assert_int_equal(authz_route_permissions(p, "guest"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_route_permissions(p, "intruder"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_sandbox_execute(p, "intruder"), 0);
    authz_policy_free(p);
}

static void test_enabled_default_roles(void **state) {
    authz_policy *p = load_text("{\"enabled\": true}");
    assert_true(authz_enabled(p));
    expect_allowed(p, "admin", AUTHZ_TOOLS, "update_agent");
    expect_allowed(p, "user", AUTHZ_MCP_SERVERS, "github");
    expect_allowed(p, NULL, AUTHZ_SKILLS, "pdf");
    assert_int_equal(authz_route_permissions(p, "user"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_check(p, "guest", AUTHZ_TOOLS, "bash"), FAWN_EPERM);
    assert_int_equal(authz_route_permissions(p, "guest"), 0);
    authz_policy_free(p);

    p = load_text("{\"enabled\": true, \"default_role\": \"admin\"}");
    expect_allowed(p, "", AUTHZ_TOOLS, "bash");
    authz_policy_free(p);
}

/* ---- the example roles ---- */

static void test_example_admin(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, " EXAMPLE_ROLES "}");
    expect_allowed(p, "admin", AUTHZ_TOOLS, "update_agent");
    expect_allowed(p, "admin", AUTHZ_TOOLS, "bash");
    expect_allowed(p, "admin", AUTHZ_MODELS, "large");
    expect_allowed(p, "admin", AUTHZ_SKILLS, "anything");
    assert_int_equal(authz_route_permissions(p, "admin"), AUTHZ_ROUTES_ALL | AUTHZ_ROUTES_ADMIN);
    assert_int_equal(authz_sandbox_execute(p, "admin"), 0);
    authz_policy_free(p);
}

static void test_example_user(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, " EXAMPLE_ROLES "}");
    expect_denied(p, "user", AUTHZ_TOOLS, "update_agent");
    check_contains("message", fawn_errmsg(), "user");
    check_contains("message", fawn_errmsg(), "update_agent");
    expect_allowed(p, "user", AUTHZ_TOOLS, "bash");
    expect_allowed(p, "user", AUTHZ_TOOLS, "update_agent_v2");
    expect_allowed(p, "user", AUTHZ_TOOLS, "update_agen");
    expect_allowed(p, "user", AUTHZ_MODELS, "large"); /* no models policy: unrestricted */
    assert_int_equal(authz_route_permissions(p, "user"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_sandbox_execute(p, "user"), 0);
    /* NULL and "" act as default_role (user). */
    expect_denied(p, NULL, AUTHZ_TOOLS, "update_agent");
    expect_denied(p, "", AUTHZ_TOOLS, "update_agent");
    expect_allowed(p, NULL, AUTHZ_TOOLS, "bash");
    assert_int_equal(authz_route_permissions(p, NULL), AUTHZ_ROUTES_ALL);
    authz_policy_free(p);
}

static void test_example_guest(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, " EXAMPLE_ROLES "}");
    expect_allowed(p, "guest", AUTHZ_TOOLS, "read_file");
    expect_denied(p, "guest", AUTHZ_TOOLS, "bash");
    check_contains("message", fawn_errmsg(), "guest");
    check_contains("message", fawn_errmsg(), "tool 'bash'");
    expect_denied(p, "guest", AUTHZ_TOOLS, "write_file");
    expect_denied(p, "guest", AUTHZ_TOOLS, "READ_FILE");
    expect_denied(p, "guest", AUTHZ_TOOLS, "read_file ");
    expect_denied(p, "guest", AUTHZ_TOOLS, "read_fil");
    expect_denied(p, "guest", AUTHZ_TOOLS, "");
    expect_denied(p, "guest", AUTHZ_TOOLS, "*");
    expect_allowed(p, "guest", AUTHZ_MODELS, "small");
    expect_denied(p, "guest", AUTHZ_MODELS, "large");
    check_contains("message", fawn_errmsg(), "model 'large'");
    expect_allowed(p, "guest", AUTHZ_SKILLS, "pdf");
    expect_allowed(p, "guest", AUTHZ_MCP_SERVERS, "github");
    assert_int_equal(authz_sandbox_execute(p, "guest"), 0);
    assert_int_equal(authz_route_permissions(p, "guest"), AUTHZ_THREADS_READ | AUTHZ_RUNS_READ);
    expect_allowed(p, "guest", AUTHZ_ROUTES, "threads:read");
    expect_denied(p, "guest", AUTHZ_ROUTES, "threads:delete");
    /* Role names are exact. */
    assert_int_equal(authz_check(p, "Guest", AUTHZ_TOOLS, "read_file"), FAWN_EPERM);
    check_contains("message", fawn_errmsg(), "not configured");
    authz_policy_free(p);

    p = load_text("{\"enabled\": true, \"default_role\": \"guest\", " EXAMPLE_ROLES "}");
    expect_denied(p, NULL, AUTHZ_TOOLS, "bash");
    expect_allowed(p, "", AUTHZ_TOOLS, "read_file");
    assert_int_equal(authz_route_permissions(p, ""), AUTHZ_THREADS_READ | AUTHZ_RUNS_READ);
    authz_policy_free(p);
}

/* ---- allow and deny ---- */

static void test_deny_beats_allow(void **state) {
    authz_policy *p = load_text(
        "{\"enabled\": true, \"roles\": {\"user\": {"
        "  \"tools\": {\"allow\": [\"a\", \"b\"], \"deny\": [\"b\"]},"
        "  \"models\": {\"allow\": \"*\", \"deny\": [\"x\"]},"
        "  \"skills\": {\"deny\": [\"*\"]},"
        "  \"mcp_servers\": {\"allow\": [\"*\"], \"deny\": [\"*\"]},"
        "  \"sandbox\": {\"allow\": true, \"deny\": [\"execute\"]},"
        "  \"routes\": {\"allow\": \"*\", \"deny\": [\"threads:delete\", \"runs:cancel\"]}}}}");
    expect_allowed(p, "user", AUTHZ_TOOLS, "a");
    expect_denied(p, "user", AUTHZ_TOOLS, "b");
    expect_denied(p, "user", AUTHZ_TOOLS, "c");
    expect_denied(p, "user", AUTHZ_MODELS, "x");
    expect_allowed(p, "user", AUTHZ_MODELS, "y");
    expect_denied(p, "user", AUTHZ_SKILLS, "pdf");
    expect_denied(p, "user", AUTHZ_MCP_SERVERS, "github");
    assert_int_equal(authz_sandbox_execute(p, "user"), FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_int_equal(authz_route_permissions(p, "user"),
                     AUTHZ_ROUTES_ALL & ~(AUTHZ_THREADS_DELETE | AUTHZ_RUNS_CANCEL));
    expect_denied(p, "user", AUTHZ_ROUTES, "runs:cancel");
    authz_policy_free(p);
}

static void test_allow_forms(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, \"roles\": {\"user\": {"
                                "  \"tools\": {\"allow\": false},"
                                "  \"models\": {\"allow\": []},"
                                "  \"skills\": {\"allow\": true},"
                                "  \"mcp_servers\": {\"allow\": \"*\"},"
                                "  \"sandbox\": {},"
                                "  \"routes\": {\"allow\": false}},"
                                " \"lister\": {"
                                "  \"tools\": {\"allow\": [\"x\", \"*\"]},"
                                "  \"models\": {\"allow\": [\"*\"], \"deny\": []},"
                                "  \"sandbox\": {\"allow\": []},"
                                "  \"routes\": {\"allow\": [\"runs:create\"], \"deny\": []}}}}");
    expect_denied(p, "user", AUTHZ_TOOLS, "read_file");
    expect_denied(p, "user", AUTHZ_MODELS, "small");
    expect_allowed(p, "user", AUTHZ_SKILLS, "pdf");
    expect_allowed(p, "user", AUTHZ_MCP_SERVERS, "github");
    assert_int_equal(authz_sandbox_execute(p, "user"), 0);
    assert_int_equal(authz_route_permissions(p, "user"), 0);

    expect_allowed(p, "lister", AUTHZ_TOOLS, "y");
    expect_allowed(p, "lister", AUTHZ_MODELS, "large");
    assert_int_equal(authz_sandbox_execute(p, "lister"), FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    expect_denied(p, "lister", AUTHZ_SANDBOX, "execute");
    assert_int_equal(authz_route_permissions(p, "lister"), AUTHZ_RUNS_CREATE);
    authz_policy_free(p);
}

static void test_role_without_policy_is_unrestricted(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, \"roles\": {\"user\": null, \"plain\": {},"
                                " \"toolless\": {\"tools\": {\"allow\": false}}}}");
    static const enum authz_resource all[] = {AUTHZ_TOOLS,   AUTHZ_MODELS,      AUTHZ_SKILLS,
                                              AUTHZ_SANDBOX, AUTHZ_MCP_SERVERS, AUTHZ_ROUTES};
    for (size_t i = 0; i < ARRAY_LEN(all); i++) {
        expect_allowed(p, "user", all[i], "anything");
        expect_allowed(p, "plain", all[i], "anything");
    }
    expect_denied(p, "toolless", AUTHZ_TOOLS, "anything");
    expect_allowed(p, "toolless", AUTHZ_MODELS, "anything");
    assert_int_equal(authz_route_permissions(p, "plain"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_route_permissions(p, "toolless"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_sandbox_execute(p, "toolless"), 0);
    authz_policy_free(p);
}

/* ---- malformed configuration ---- */

typedef struct bad_case {
    const char *json;
    const char *message;
} bad_case;

static void test_malformed_config(void **state) {
    static const bad_case cases[] = {
        /* singular aliases and unknown resources */
        {"{\"roles\": {\"user\": {\"tool\": {\"allow\": \"*\"}}}}",
         "authorization.roles.user.tool: unknown resource; valid resources: tools, models, "
         "skills, sandbox, mcp_servers, routes"},
        {"{\"roles\": {\"user\": {\"model\": {}}}}", "authorization.roles.user.model: unknown"},
        {"{\"roles\": {\"user\": {\"route\": {}}}}", "authorization.roles.user.route: unknown"},
        {"{\"roles\": {\"user\": {\"skill\": {}}}}", "authorization.roles.user.skill: unknown"},
        {"{\"roles\": {\"user\": {\"mcp_server\": {}}}}",
         "authorization.roles.user.mcp_server: unknown resource"},
        {"{\"roles\": {\"user\": {\"files\": {}}}}", "authorization.roles.user.files: unknown"},
        {"{\"roles\": {\"user\": {\"Tools\": {}}}}", "authorization.roles.user.Tools: unknown"},
        {"{\"roles\": {\"user\": {\"\": {}}}}", "authorization.roles.user.: unknown resource"},
        /* allow */
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": null}}}}",
         "authorization.roles.user.tools.allow: must be \"*\", true, false or a list of names"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": \"5\"}}}}",
         "authorization.roles.user.tools.allow: a single value must be \"*\""},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": \"read_file\"}}}}",
         "authorization.roles.user.tools.allow: a single value"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": \"**\"}}}}",
         "authorization.roles.user.tools.allow: a single value"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": \"*\\u0000x\"}}}}",
         "authorization.roles.user.tools.allow: a single value"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": {}}}}}",
         "authorization.roles.user.tools.allow: must be"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": 5}}}}",
         "authorization.roles.user.tools.allow: must be"},
        /* deny */
        {"{\"roles\": {\"user\": {\"tools\": {\"deny\": null}}}}",
         "authorization.roles.user.tools.deny: must be a list of names"},
        {"{\"roles\": {\"user\": {\"tools\": {\"deny\": \"*\"}}}}",
         "authorization.roles.user.tools.deny: must be a list of names"},
        {"{\"roles\": {\"user\": {\"tools\": {\"deny\": true}}}}",
         "authorization.roles.user.tools.deny: must be a list of names"},
        {"{\"roles\": {\"user\": {\"models\": {\"deny\": \"update_agent\"}}}}",
         "authorization.roles.user.models.deny: must be a list of names"},
        /* resource policy shape */
        {"{\"roles\": {\"user\": {\"tools\": {\"allo\": \"*\"}}}}",
         "authorization.roles.user.tools.allo: unknown key; valid keys: allow, deny"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": \"*\", \"denied\": []}}}}",
         "authorization.roles.user.tools.denied: unknown key"},
        {"{\"roles\": {\"user\": {\"tools\": null}}}",
         "authorization.roles.user.tools: must be a mapping with allow and/or deny"},
        {"{\"roles\": {\"user\": {\"tools\": \"*\"}}}",
         "authorization.roles.user.tools: must be a mapping"},
        {"{\"roles\": {\"user\": {\"tools\": [\"read_file\"]}}}",
         "authorization.roles.user.tools: must be a mapping"},
        /* list items */
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": [\"read_file\", \"\"]}}}}",
         "authorization.roles.user.tools.allow[1]: must be a non-empty string"},
        {"{\"roles\": {\"user\": {\"tools\": {\"deny\": [\"\"]}}}}",
         "authorization.roles.user.tools.deny[0]: must be a non-empty string"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": [null]}}}}",
         "authorization.roles.user.tools.allow[0]: must be a non-empty string"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": [[\"a\"]]}}}}",
         "authorization.roles.user.tools.allow[0]: must be a non-empty string"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": [true]}}}}",
         "authorization.roles.user.tools.allow[0]: must be a non-empty string"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": [\"a\\u0000b\"]}}}}",
         "authorization.roles.user.tools.allow[0]: must not contain NUL bytes"},
        {"{\"roles\": {\"user\": {\"tools\": {\"allow\": [\"a\", \"b\\nc\"]}}}}",
         "authorization.roles.user.tools.allow[1]: must not contain control characters"},
        /* route permissions and the sandbox action */
        {"{\"roles\": {\"user\": {\"routes\": {\"allow\": [\"threads:reed\"]}}}}",
         "authorization.roles.user.routes.allow[0]: unknown route permission 'threads:reed'; "
         "valid: threads:read, threads:write, threads:delete, runs:create, runs:read, "
         "runs:cancel"},
        {"{\"roles\": {\"user\": {\"routes\": "
         "{\"allow\": [\"threads:read\", \"THREADS:WRITE\"]}}}}",
         "authorization.roles.user.routes.allow[1]: unknown route permission 'THREADS:WRITE'"},
        {"{\"roles\": {\"user\": {\"routes\": {\"deny\": [\"runs:delete\"]}}}}",
         "authorization.roles.user.routes.deny[0]: unknown route permission"},
        {"{\"roles\": {\"user\": {\"routes\": {\"allow\": [\"threads\"]}}}}",
         "authorization.roles.user.routes.allow[0]: unknown route permission"},
        {"{\"roles\": {\"user\": {\"sandbox\": {\"deny\": [\"exec\"]}}}}",
         "authorization.roles.user.sandbox.deny[0]: unknown sandbox action 'exec'; valid: "
         "execute"},
        /* top level */
        {"{\"enabled\": \"yes\"}", "authorization.enabled: must be true or false"},
        {"{\"enabled\": \"true\"}", "authorization.enabled: must be true or false"},
        {"{\"enabled\": null}", "authorization.enabled: must be true or false"},
        {"{\"fail_closed\": \"false\"}", "authorization.fail_closed: must be true or false"},
        {"{\"fail_closed\": 0}", "authorization.fail_closed: must be true or false"},
        {"{\"provider\": {}}",
         "authorization.provider: unknown key; valid keys: enabled, fail_closed, default_role, "
         "roles"},
        {"{\"enable\": true}", "authorization.enable: unknown key"},
        {"[]", "authorization: must be a mapping"},
        {"\"enabled\"", "authorization: must be a mapping"},
        /* default_role */
        {"{\"default_role\": \"boss\"}",
         "authorization.default_role: role 'boss' is not defined in authorization.roles"},
        {"{\"default_role\": \"guest\", \"roles\": {\"user\": {}}}",
         "authorization.default_role: role 'guest' is not defined"},
        {"{\"roles\": {\"admin\": {}}}", "authorization.default_role: role 'user' is not defined"},
        {"{\"roles\": {}}", "authorization.default_role: role 'user' is not defined"},
        {"{\"default_role\": \"\"}", "authorization.default_role: must be a non-empty role name"},
        {"{\"default_role\": null}", "authorization.default_role: must be a non-empty role name"},
        {"{\"default_role\": [\"user\"]}", "authorization.default_role: must be a non-empty"},
        {"{\"default_role\": \"user\\u0000x\"}", "authorization.default_role: must be a non-empty"},
        /* roles and role names */
        {"{\"roles\": null}", "authorization.roles: must be a mapping of role names"},
        {"{\"roles\": [\"user\"]}", "authorization.roles: must be a mapping of role names"},
        {"{\"roles\": {\"\": {}, \"user\": {}}}", "authorization.roles: role name '' is invalid"},
        {"{\"roles\": {\"user\": {}, \"bad name\": {}}}",
         "authorization.roles: role name 'bad name' is invalid"},
        {"{\"roles\": {\"user\": {}, \"../admin\": {}}}",
         "authorization.roles: role name '../admin' is invalid"},
        {"{\"roles\": {\"user\": {}, \"r\\u00f4le\": {}}}",
         "authorization.roles: role name '(unprintable name)' is invalid"},
        {"{\"roles\": {\"user\": \"5\"}}",
         "authorization.roles.user: must be a mapping of resources to policies, or empty"},
        {"{\"roles\": {\"user\": [\"tools\"]}}", "authorization.roles.user: must be a mapping"},
        {"{\"roles\": {\"user\": true}}", "authorization.roles.user: must be a mapping"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        expect_config_error(cases[i].json, cases[i].message);
}

/* A key that shows terminal escapes is not echoed back. */
static void test_malformed_key_not_echoed(void **state) {
    expect_config_error("{\"roles\": {\"user\": {\"\\u001b[31mtools\": {}}}}",
                        "authorization.roles.user.(unprintable name): unknown resource");
    check_lacks("message", fawn_errmsg(), "\x1b");
    expect_config_error("{\"roles\": {\"user\": {\"tools\": {\"allow\": [\"a\\u001bb\"]}}}}",
                        "must not contain control characters");
    check_lacks("message", fawn_errmsg(), "\x1b");
}

/* Object keys with a NUL byte must not pass for the name before the NUL. */
static void test_keys_with_nul(void **state) {
    json_t *j = json_parse("{\"roles\": {\"user\": {}}}");
    json_t *user = json_object_get(json_object_get(j, "roles"), "user");
    assert_int_equal(json_object_setn_new(user, "tools\0x", 7, json_object()), 0);
    expect_config_error_json(j, "key tools\\0x",
                             "authorization.roles.user.(unprintable name): unknown resource");

    j = json_parse("{\"roles\": {\"user\": {}}}");
    assert_int_equal(json_object_setn_new(json_object_get(j, "roles"), "admin\0x", 7, json_null()),
                     0);
    expect_config_error_json(j, "role admin\\0x",
                             "authorization.roles: role name '(unprintable name)'");

    j = json_parse("{\"roles\": {\"user\": {\"tools\": {}}}}");
    json_t *tools = json_object_get(json_object_get(json_object_get(j, "roles"), "user"), "tools");
    assert_int_equal(json_object_setn_new(tools, "deny\0x", 6, json_string("*")), 0);
    expect_config_error_json(j, "key deny\\0x",
                             "authorization.roles.user.tools.(unprintable name): unknown key");

    j = json_parse("{}");
    assert_int_equal(json_object_setn_new(j, "enabled\0x", 9, json_true()), 0);
    expect_config_error_json(j, "key enabled\\0x", "authorization.(unprintable name): unknown key");
}

/* count distinct names of name_len bytes: the index, padded with 'a'. */
static json_t *list_of_names(size_t count, size_t name_len) {
    json_t *list = json_array();
    char *name = malloc(name_len + 1);
    assert_non_null(list);
    assert_non_null(name);
    for (size_t i = 0; i < count; i++) {
        char index[32];
        int n = snprintf(index, sizeof index, "%zu", i);
        assert_true((size_t)n <= name_len);
        memset(name, 'a', name_len);
        memcpy(name, index, (size_t)n);
        name[name_len] = '\0';
        assert_int_equal(json_array_append_new(list, json_string(name)), 0);
    }
    free(name);
    return list;
}

/* {"enabled": true, "roles": {"user": {"tools": {<key>: list}}}} */
static json_t *section_with_tools_list(const char *key, json_t *list) {
    json_t *j = json_parse("{\"enabled\": true, \"roles\": {\"user\": {\"tools\": {}}}}");
    json_t *tools = json_object_get(json_object_get(json_object_get(j, "roles"), "user"), "tools");
    assert_int_equal(json_object_set_new(tools, key, list), 0);
    return j;
}

static void test_list_limits(void **state) {
    /* 1024 names load; the last one is found. */
    authz_policy *p = load_json(section_with_tools_list("allow", list_of_names(1024, 16)));
    json_t *probe = list_of_names(1024, 16);
    expect_allowed(p, "user", AUTHZ_TOOLS, json_string_value(json_array_get(probe, 1023)));
    expect_allowed(p, "user", AUTHZ_TOOLS, json_string_value(json_array_get(probe, 0)));
    json_decref(probe);
    expect_denied(p, "user", AUTHZ_TOOLS, "not-listed");
    authz_policy_free(p);

    expect_config_error_json(section_with_tools_list("allow", list_of_names(1025, 16)),
                             "1025 allow names",
                             "authorization.roles.user.tools.allow: at most 1024");
    expect_config_error_json(section_with_tools_list("deny", list_of_names(100000, 8)),
                             "100000 deny names",
                             "authorization.roles.user.tools.deny: at most 1024");

    p = load_json(section_with_tools_list("allow", list_of_names(2, 256)));
    authz_policy_free(p);
    expect_config_error_json(section_with_tools_list("deny", list_of_names(2, 257)), "257 bytes",
                             "authorization.roles.user.tools.deny[0]: must be at most 256 bytes");
    expect_config_error_json(section_with_tools_list("allow", list_of_names(1, 1 << 20)), "1 MiB",
                             "authorization.roles.user.tools.allow[0]: must be at most 256 bytes");
}

/* {"roles": {...count roles named r<i>..., "user": {}}} */
static json_t *section_with_roles(size_t count, size_t name_len) {
    json_t *j = json_parse("{\"roles\": {\"user\": {}}}");
    json_t *roles = json_object_get(j, "roles");
    char name[128];
    for (size_t i = 1; i < count; i++) {
        int n = snprintf(name, sizeof name, "r%zu", i);
        memset(name + n, 'x', name_len - (size_t)n);
        name[name_len] = '\0';
        assert_int_equal(json_object_set_new(roles, name, json_object()), 0);
    }
    return j;
}

static void test_role_limits(void **state) {
    authz_policy *p = load_json(section_with_roles(64, 64));
    authz_policy_free(p);
    expect_config_error_json(section_with_roles(65, 8), "65 roles",
                             "authorization.roles: at most 64 roles");
    expect_config_error_json(section_with_roles(2, 65), "65-byte role name",
                             "authorization.roles: role name '(name too long to show)'");
    check_contains("message", fawn_errmsg(), "is invalid");
}

/* A failure after some names were copied frees them (checked by ASan). */
static void test_failure_after_partial_load(void **state) {
    expect_config_error("{\"roles\": {\"user\": {\"tools\": {\"allow\": [\"a\", \"b\"], "
                        "\"deny\": [\"c\", \"d\", \"\"]}}, \"admin\": {\"models\": {}}}}",
                        "deny[2]: must be a non-empty string");
    expect_config_error("{\"roles\": {\"admin\": {\"tools\": {\"allow\": [\"a\"]}}, "
                        "\"user\": {\"tools\": {}}}, \"default_role\": \"root\"}",
                        "role 'root' is not defined");
}

/* ---- unknown roles ---- */

static void test_unknown_role_fail_closed(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, \"fail_closed\": true, " EXAMPLE_ROLES "}");
    assert_int_equal(authz_check(p, "intruder", AUTHZ_TOOLS, "read_file"), FAWN_EPERM);
    check_contains("message", fawn_errmsg(), "Permission denied");
    check_contains("message", fawn_errmsg(), "'intruder'");
    check_contains("message", fawn_errmsg(), "not configured");
    assert_int_equal(authz_route_permissions(p, "intruder"), 0);
    assert_int_equal(authz_sandbox_execute(p, "intruder"), FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);

    /* A hostile role name is not echoed. */
    assert_int_equal(authz_check(p, "x\r\nX-Injected: 1", AUTHZ_TOOLS, "bash"), FAWN_EPERM);
    check_lacks("message", fawn_errmsg(), "\n");
    check_contains("message", fawn_errmsg(), "(invalid role name)");
    assert_int_equal(authz_route_permissions(p, "admin\n"), 0);
    assert_int_equal(authz_route_permissions(p, "ADMIN"), 0);
    authz_policy_free(p);
}

/* Runs fn with stderr sent to a file and returns what was written (caller
 * frees); *ok gets fn's verdict, checked only once stderr is back. The file
 * and its directory are removed before fn runs. */
static char *capture_stderr(bool (*fn)(const authz_policy *), const authz_policy *p, bool *ok) {
    char dir[] = "/tmp/fawn-authz-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char *path = strf("%s/stderr", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(rmdir(dir), 0);
    free(path);
    fflush(stderr);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    *ok = fn(p);
    fflush(stderr);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    assert_true(lseek(fd, 0, SEEK_SET) == 0);
    char *text = NULL;
    size_t len = 0;
    assert_int_equal(fawn_read_all(&text, &len, fd, 1 << 20), 0);
    close(fd);
    return text;
}

static size_t count_occurrences(const char *text, const char *needle) {
    size_t n = 0;
    for (const char *at = text; (at = strstr(at, needle)); at += strlen(needle))
        n++;
    return n;
}

static bool call_check_once(const authz_policy *p) {
    return authz_check(p, "intruder", AUTHZ_TOOLS, "bash") == 0;
}

static bool call_route_permissions_once(const authz_policy *p) {
    return authz_route_permissions(p, "intruder") == AUTHZ_ROUTES_ALL;
}

static bool call_sandbox_execute_once(const authz_policy *p) {
    return authz_sandbox_execute(p, "intruder") == 0;
}

static bool call_known_roles(const authz_policy *p) {
    return authz_check(p, "guest", AUTHZ_TOOLS, "bash") == FAWN_EPERM &&
           authz_check(p, NULL, AUTHZ_TOOLS, "bash") == 0;
}

static void test_unknown_role_fail_open(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, \"fail_closed\": false, " EXAMPLE_ROLES "}");
    fawn_log_set_level(FAWN_LOG_INFO);
    bool (*const calls[])(const authz_policy *) = {call_check_once, call_route_permissions_once,
                                                   call_sandbox_execute_once};
    for (size_t i = 0; i < ARRAY_LEN(calls); i++) {
        bool ok = false;
        char *log = capture_stderr(calls[i], p, &ok);
        assert_true(ok);
        assert_int_equal(count_occurrences(log, "not configured"), 1);
        check_contains("warning", log, "warn");
        check_contains("warning", log, "'intruder'");
        free(log);
    }
    /* Fail-open does not loosen the rules of roles that exist. */
    bool ok = false;
    char *log = capture_stderr(call_known_roles, p, &ok);
    assert_true(ok);
    assert_int_equal(count_occurrences(log, "not configured"), 0);
    free(log);
    assert_int_equal(authz_route_permissions(p, "guest"), AUTHZ_THREADS_READ | AUTHZ_RUNS_READ);
    authz_policy_free(p);
}

/* ---- the sandbox gate, names, misuse ---- */

static void test_sandbox_execute(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, \"default_role\": \"nobox\", \"roles\": {"
                                "  \"box\": {\"sandbox\": {\"allow\": [\"execute\"]}},"
                                "  \"nobox\": {\"sandbox\": {\"allow\": false}},"
                                "  \"denied\": {\"sandbox\": {\"deny\": [\"execute\"]}},"
                                "  \"free\": {\"tools\": {\"allow\": false}}}}");
    assert_int_equal(authz_sandbox_execute(p, "box"), 0);
    assert_int_equal(authz_sandbox_execute(p, "free"), 0);
    assert_int_equal(authz_sandbox_execute(p, "nobox"), FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_int_equal(authz_sandbox_execute(p, "denied"), FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_int_equal(authz_sandbox_execute(p, NULL), FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    assert_int_equal(authz_sandbox_execute(p, ""), FAWN_EPERM);
    assert_int_equal(authz_sandbox_execute(p, "unknown"), FAWN_EPERM);
    assert_string_equal(fawn_errmsg(), SANDBOX_DENIED);
    authz_policy_free(p);
}

static void test_permission_name(void **state) {
    assert_string_equal(authz_permission_name(AUTHZ_THREADS_READ), "threads:read");
    assert_string_equal(authz_permission_name(AUTHZ_THREADS_WRITE), "threads:write");
    assert_string_equal(authz_permission_name(AUTHZ_THREADS_DELETE), "threads:delete");
    assert_string_equal(authz_permission_name(AUTHZ_RUNS_CREATE), "runs:create");
    assert_string_equal(authz_permission_name(AUTHZ_RUNS_READ), "runs:read");
    assert_string_equal(authz_permission_name(AUTHZ_RUNS_CANCEL), "runs:cancel");
    assert_null(authz_permission_name(0));
    assert_null(authz_permission_name(AUTHZ_THREADS_READ | AUTHZ_THREADS_WRITE));
    assert_null(authz_permission_name(AUTHZ_ROUTES_ALL));
    assert_string_equal(authz_permission_name(AUTHZ_SANDBOXES_READ), "sandboxes:read");
    assert_string_equal(authz_permission_name(AUTHZ_SKILLS_WRITE), "skills:write");
    assert_string_equal(authz_permission_name(AUTHZ_MCP_ADMIN), "mcp:admin");
    assert_string_equal(authz_permission_name(AUTHZ_CHANNELS_ADMIN), "channels:admin");
    assert_null(authz_permission_name(1u << 10));
    assert_null(authz_permission_name(1u << 31));
    assert_null(authz_permission_name(UINT_MAX));
    /* Every name a route permission bit has is accepted in config. */
    for (unsigned bit = 1; bit & (AUTHZ_ROUTES_ALL | AUTHZ_ROUTES_ADMIN); bit <<= 1) {
        char *text = strf("{\"enabled\": true, \"roles\": {\"user\": {\"routes\": "
                          "{\"allow\": [\"%s\"]}}}}",
                          authz_permission_name(bit));
        authz_policy *p = load_text(text);
        assert_int_equal(authz_route_permissions(p, "user"), bit);
        authz_policy_free(p);
        free(text);
    }
}

static void test_misuse_is_not_allowed(void **state) {
    authz_policy *p = load_text("{\"enabled\": false}");
    assert_int_equal(authz_check(p, "user", AUTHZ_RESOURCE_COUNT, "x"), FAWN_EINVAL);
    assert_int_equal(authz_check(p, "user", (enum authz_resource) - 1, "x"), FAWN_EINVAL);
    assert_int_equal(authz_check(p, "user", AUTHZ_TOOLS, NULL), FAWN_EINVAL);
    assert_int_equal(authz_check(NULL, "user", AUTHZ_TOOLS, "x"), FAWN_EINVAL);
    assert_int_equal(authz_route_permissions(NULL, "user"), 0);
    assert_int_equal(authz_sandbox_execute(NULL, "user"), FAWN_EINVAL);
    assert_false(authz_enabled(NULL));
    authz_policy_free(p);
}

/* ---- concurrency ---- */

/* Checks per thread: enough to overlap many calls across threads. */
#define THREAD_CHECKS 20000
#define THREADS 4

static void *hammer(void *arg) {
    const authz_policy *p = arg;
    uintptr_t wrong = 0;
    for (int i = 0; i < THREAD_CHECKS; i++) {
        wrong += authz_check(p, "guest", AUTHZ_TOOLS, "read_file") != 0;
        wrong += authz_check(p, "guest", AUTHZ_TOOLS, "bash") != FAWN_EPERM;
        wrong += authz_check(p, "user", AUTHZ_TOOLS, "update_agent") != FAWN_EPERM;
        wrong += authz_route_permissions(p, "guest") != (AUTHZ_THREADS_READ | AUTHZ_RUNS_READ);
        wrong += authz_sandbox_execute(p, "admin") != 0;
    }
    return (void *)wrong;
}

static void test_concurrent_checks(void **state) {
    authz_policy *p = load_text("{\"enabled\": true, " EXAMPLE_ROLES "}");
    pthread_t threads[THREADS];
    for (int i = 0; i < THREADS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, hammer, p), 0);
    for (int i = 0; i < THREADS; i++) {
        void *wrong = NULL;
        assert_int_equal(pthread_join(threads[i], &wrong), 0);
        assert_int_equal((uintptr_t)wrong, 0);
    }
    authz_policy_free(p);
}

/* Administration permissions are never implied: the admin role holds them
 * whatever the policy, another role only by naming them. */
static void test_admin_permissions_are_explicit(void **state) {
    authz_policy *p = NULL;
    assert_int_equal(authz_policy_load(&p, NULL), 0);
    assert_int_equal(authz_route_permissions(p, "admin"), AUTHZ_ROUTES_ALL | AUTHZ_ROUTES_ADMIN);
    assert_int_equal(authz_route_permissions(p, "user"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_route_permissions(p, "nobody"), AUTHZ_ROUTES_ALL);
    authz_policy_free(p);
    p = load_text("{\"enabled\": true, \"fail_closed\": false, \"roles\": {"
                  "\"admin\": {\"routes\": {\"allow\": [\"threads:read\"]}},"
                  "\"star\": {\"routes\": {\"allow\": \"*\"}},"
                  "\"ops\": {\"routes\": {\"allow\": [\"sandboxes:read\"]}},"
                  "\"denied\": {\"routes\": {\"allow\": [\"sandboxes:read\"], "
                  "\"deny\": [\"sandboxes:read\"]}}, \"user\": {}}}");
    assert_int_equal(authz_route_permissions(p, "admin"), AUTHZ_THREADS_READ | AUTHZ_ROUTES_ADMIN);
    assert_int_equal(authz_route_permissions(p, "star"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_route_permissions(p, "ops"), AUTHZ_SANDBOXES_READ);
    assert_int_equal(authz_route_permissions(p, "denied"), 0);
    assert_int_equal(authz_route_permissions(p, "user"), AUTHZ_ROUTES_ALL);
    assert_int_equal(authz_route_permissions(p, "stranger"), AUTHZ_ROUTES_ALL);
    assert_string_equal(authz_permission_name(AUTHZ_SANDBOXES_READ), "sandboxes:read");
    authz_policy_free(p);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_null_section_is_disabled),
        cmocka_unit_test(test_disabled_grants_everything),
        cmocka_unit_test(test_enabled_default_roles),
        cmocka_unit_test(test_example_admin),
        cmocka_unit_test(test_example_user),
        cmocka_unit_test(test_example_guest),
        cmocka_unit_test(test_deny_beats_allow),
        cmocka_unit_test(test_allow_forms),
        cmocka_unit_test(test_role_without_policy_is_unrestricted),
        cmocka_unit_test(test_malformed_config),
        cmocka_unit_test(test_malformed_key_not_echoed),
        cmocka_unit_test(test_keys_with_nul),
        cmocka_unit_test(test_list_limits),
        cmocka_unit_test(test_role_limits),
        cmocka_unit_test(test_failure_after_partial_load),
        cmocka_unit_test(test_unknown_role_fail_closed),
        cmocka_unit_test(test_unknown_role_fail_open),
        cmocka_unit_test(test_sandbox_execute),
        cmocka_unit_test(test_permission_name),
        cmocka_unit_test(test_misuse_is_not_allowed),
        cmocka_unit_test(test_concurrent_checks),
        cmocka_unit_test(test_admin_permissions_are_explicit),
    };
    return cmocka_run_group_tests_name("authz", tests, NULL, NULL);
}
