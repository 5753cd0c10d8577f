#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"

/* The largest input config_load_* accepts (1 MiB). */
#define TEST_FILE_MAX ((size_t)1 << 20)

/* ---- helpers ---- */

static int load(fawn_config *cfg, const char *yaml) {
    return config_load_string(cfg, yaml, strlen(yaml));
}

static void assert_zeroed(const fawn_config *cfg) {
    static const fawn_config zero;
    assert_memory_equal(cfg, &zero, sizeof zero);
}

static void assert_msg_has(const char *needle) {
    if (!strstr(fawn_errmsg(), needle))
        fail_msg("error message '%s' lacks '%s'", fawn_errmsg(), needle);
}

/* Loading yaml must fail with FAWN_ECONFIG, leave cfg zeroed, and the message
 * must contain every non-NULL needle. */
static void assert_refused(const char *yaml, size_t len, const char *needle, const char *needle2) {
    fawn_config cfg;
    memset(&cfg, 0xa5, sizeof cfg);
    int r = config_load_string(&cfg, yaml, len);
    if (r != FAWN_ECONFIG)
        fail_msg("expected FAWN_ECONFIG for '%.80s', got %d (%s)", yaml, r, fawn_errmsg());
    assert_zeroed(&cfg);
    if (needle)
        assert_msg_has(needle);
    if (needle2)
        assert_msg_has(needle2);
}

static void refuse(const char *yaml, const char *needle) {
    assert_refused(yaml, strlen(yaml), needle, NULL);
}

static void refuse2(const char *yaml, const char *needle, const char *needle2) {
    assert_refused(yaml, strlen(yaml), needle, needle2);
}

static void accept(fawn_config *cfg, const char *yaml) {
    int r = load(cfg, yaml);
    if (r != 0)
        fail_msg("expected '%.120s' to load, got %d: %s", yaml, r, fawn_errmsg());
}

/* Writes "a:\n  b:\n    c: value\n" for path "a.b.c", with an optional
 * extra "key: value" line next to the leaf. */
static void yaml_for_path(char *out, size_t size, const char *path, const char *value,
                          const char *sibling) {
    char segs[128];
    snprintf(segs, sizeof segs, "%s", path);
    size_t used = 0, depth = 0;
    char *save = NULL;
    char *seg = strtok_r(segs, ".", &save);
    while (seg) {
        char *next = strtok_r(NULL, ".", &save);
        if (next)
            used += (size_t)snprintf(out + used, size - used, "%*s%s:\n", (int)depth * 2, "", seg);
        else
            used += (size_t)snprintf(out + used, size - used, "%*s%s: %s\n", (int)depth * 2, "",
                                     seg, value);
        if (!next && sibling)
            used += (size_t)snprintf(out + used, size - used, "%*s%s\n", (int)depth * 2, "",
                                     sibling);
        depth++;
        seg = next;
    }
    assert_true(used < size);
}

static char *tmpdir_make(void) {
    char *dir = strdup("/tmp/fawn-test-config-XXXXXX");
    assert_non_null(dir);
    assert_non_null(mkdtemp(dir));
    return dir;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void tmpdir_remove(char *dir) {
    assert_int_equal(nftw(dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
    free(dir);
}

static char *file_write(const char *dir, const char *name, const char *data, size_t len) {
    char *path = NULL;
    assert_true(asprintf(&path, "%s/%s", dir, name) > 0);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(fawn_write_all(fd, data, len), 0);
    close(fd);
    return path;
}

/* ---- defaults ---- */

static void assert_default_values(const fawn_config *cfg) {
    assert_string_equal(cfg->log_level, "info");
    assert_int_equal(cfg->sandbox.network, FAWN_NET_NONE);
    assert_int_equal(cfg->sandbox.n_env, 0);
    assert_int_equal(cfg->sandbox.limits.memory_mb, 1024);
    assert_int_equal(cfg->sandbox.limits.pids, 512);
    assert_int_equal(cfg->sandbox.limits.nproc, 512);
    assert_int_equal(cfg->sandbox.limits.open_files, 1024);
    assert_int_equal(cfg->sandbox.limits.file_size_mb, 1024);
    assert_int_equal(cfg->sandbox.limits.address_space_mb, 4096);
    assert_int_equal(cfg->sandbox.limits.tmp_size_mb, 256);
    assert_int_equal(cfg->sandbox.limits.disk_mb, 10240);
    assert_int_equal(cfg->sandbox.exec_timeout_s, 600);
    assert_int_equal(cfg->sandbox.exec_max_timeout_s, 3600);
    assert_int_equal(cfg->sandbox.exec_max_output_bytes, 1048576);
    assert_int_equal(cfg->sandbox.max_sessions, 16);
    assert_int_equal(cfg->sandbox.idle_timeout_s, 600);
    assert_int_equal(cfg->sandbox.replicas, 32);
    assert_false(cfg->auth.disabled);
    assert_false(cfg->auth.registration_enabled);
    assert_int_equal(cfg->auth.session_ttl_s, 604800);
    assert_false(cfg->auth.cookie_secure);
    assert_int_equal(cfg->uploads.max_files, 10);
    assert_int_equal(cfg->uploads.max_file_size_mb, 50);
    assert_int_equal(cfg->uploads.max_total_size_mb, 100);
    assert_int_equal(cfg->runs.workers, 8);
    assert_int_equal(cfg->runs.queue_max, 256);
    assert_int_equal(cfg->runs.per_user_active_max, 32);
    assert_int_equal(cfg->runs.per_user_running_max, 4);
    assert_int_equal(cfg->server.max_connections, 1024);
    assert_int_equal(cfg->server.max_connections_per_address, 64);
    assert_int_equal(cfg->server.request_head_timeout_s, 30);
    assert_false(cfg->memory.enabled);
    assert_true(cfg->memory.injection_enabled);
    assert_int_equal(cfg->memory.max_facts, 100);
    assert_int_equal(cfg->memory.max_injection_tokens, 2000);
    assert_true(cfg->compaction.enabled);
    assert_true(cfg->compaction.trigger_ratio == 0.8);
    assert_int_equal(cfg->compaction.keep_recent_messages, 10);
    assert_true(cfg->web.fetch_enabled);
    assert_int_equal(cfg->web.fetch_timeout_s, 20);
    assert_int_equal(cfg->web.fetch_max_kb, 2048);
    assert_int_equal(cfg->web.rate_per_minute, 30);
    assert_null(cfg->web.allow);
    assert_null(cfg->web.search);
    assert_null(cfg->authorization);
}

static void test_defaults(void **state) {
    unsetenv("FAWN_HOME");
    fawn_config cfg;
    assert_int_equal(config_defaults(&cfg), 0);
    assert_string_equal(cfg.home, "./.fawn");
    assert_string_equal(cfg.sandbox.skills_dir, "./.fawn/skills");
    assert_default_values(&cfg);
    config_free(&cfg);
    assert_zeroed(&cfg);
    config_free(&cfg); /* freeing twice is harmless */

    setenv("FAWN_HOME", "/srv/fawn/", 1);
    assert_int_equal(config_defaults(&cfg), 0);
    assert_string_equal(cfg.home, "/srv/fawn/");
    assert_string_equal(cfg.sandbox.skills_dir, "/srv/fawn/skills");
    config_free(&cfg);

    setenv("FAWN_HOME", "", 1); /* empty counts as unset */
    assert_int_equal(config_defaults(&cfg), 0);
    assert_string_equal(cfg.home, "./.fawn");
    config_free(&cfg);
    unsetenv("FAWN_HOME");
}

static void test_empty_inputs_are_defaults(void **state) {
    unsetenv("FAWN_HOME");
    static const char *const empties[] = {
        "",       "\n\n",       "# just a comment\n",
        "---\n",  "---\n...\n", "~\n",
        "null\n", "sandbox:\n", "sandbox:\n  limits:\n  environment:\n",
    };
    for (size_t i = 0; i < ARRAY_LEN(empties); i++) {
        fawn_config cfg;
        accept(&cfg, empties[i]);
        assert_string_equal(cfg.home, "./.fawn");
        assert_string_equal(cfg.sandbox.skills_dir, "./.fawn/skills");
        assert_default_values(&cfg);
        config_free(&cfg);
    }
    fawn_config cfg;
    assert_int_equal(config_load_string(&cfg, NULL, 0), 0);
    assert_default_values(&cfg);
    config_free(&cfg);
}

/* ---- a full valid file ---- */

static const char full_yaml[] = "# every key, none at its default\n"
                                "home: /var/lib/fawn\n"
                                "log_level: debug\n"
                                "sandbox:\n"
                                "  network: host\n"
                                "  skills_dir: /opt/skills\n"
                                "  environment:\n"
                                "    LANG: C.UTF-8\n"
                                "    _private1: \"with spaces and: colons\"\n"
                                "    COUNT: 42\n"
                                "    EMPTY: \"\"\n"
                                "  limits:\n"
                                "    memory_mb: 2048\n"
                                "    pids: 100\n"
                                "    nproc: 200\n"
                                "    open_files: 4096\n"
                                "    file_size_mb: 10\n"
                                "    address_space_mb: 8192\n"
                                "    tmp_size_mb: 64\n"
                                "    disk_mb: 512\n"
                                "  exec_timeout_s: 30\n"
                                "  exec_max_timeout_s: 60\n"
                                "  exec_max_output_bytes: 65536\n"
                                "  max_sessions: 4\n";

static void test_full_file(void **state) {
    fawn_config cfg;
    accept(&cfg, full_yaml);
    assert_string_equal(cfg.home, "/var/lib/fawn");
    assert_string_equal(cfg.log_level, "debug");
    assert_int_equal(cfg.sandbox.network, FAWN_NET_HOST);
    assert_string_equal(cfg.sandbox.skills_dir, "/opt/skills");
    assert_int_equal(cfg.sandbox.n_env, 4);
    assert_string_equal(cfg.sandbox.env[0].name, "LANG");
    assert_string_equal(cfg.sandbox.env[0].value, "C.UTF-8");
    assert_string_equal(cfg.sandbox.env[1].name, "_private1");
    assert_string_equal(cfg.sandbox.env[1].value, "with spaces and: colons");
    assert_string_equal(cfg.sandbox.env[2].name, "COUNT");
    assert_string_equal(cfg.sandbox.env[2].value, "42");
    assert_string_equal(cfg.sandbox.env[3].name, "EMPTY");
    assert_string_equal(cfg.sandbox.env[3].value, "");
    assert_int_equal(cfg.sandbox.limits.memory_mb, 2048);
    assert_int_equal(cfg.sandbox.limits.pids, 100);
    assert_int_equal(cfg.sandbox.limits.nproc, 200);
    assert_int_equal(cfg.sandbox.limits.open_files, 4096);
    assert_int_equal(cfg.sandbox.limits.file_size_mb, 10);
    assert_int_equal(cfg.sandbox.limits.address_space_mb, 8192);
    assert_int_equal(cfg.sandbox.limits.tmp_size_mb, 64);
    assert_int_equal(cfg.sandbox.limits.disk_mb, 512);
    assert_int_equal(cfg.sandbox.exec_timeout_s, 30);
    assert_int_equal(cfg.sandbox.exec_max_timeout_s, 60);
    assert_int_equal(cfg.sandbox.exec_max_output_bytes, 65536);
    assert_int_equal(cfg.sandbox.max_sessions, 4);
    config_free(&cfg);
    assert_zeroed(&cfg);
}

static void test_flow_style_and_home_derivation(void **state) {
    fawn_config cfg;
    accept(&cfg, "{home: /data/, sandbox: {limits: {pids: 64}, environment: {A: b}}}");
    assert_string_equal(cfg.home, "/data/");
    assert_string_equal(cfg.sandbox.skills_dir, "/data/skills"); /* follows the file's home */
    assert_int_equal(cfg.sandbox.limits.pids, 64);
    assert_int_equal(cfg.sandbox.limits.memory_mb, 1024); /* untouched keys keep defaults */
    assert_string_equal(cfg.sandbox.env[0].value, "b");
    config_free(&cfg);
}

/* ---- integers ---- */

struct range_case {
    const char *path;
    uint64_t min, max;
    const char *sibling; /* keeps the timeout cross-check satisfied at the edges */
};

static const struct range_case range_cases[] = {
    {"sandbox.limits.memory_mb", 16, 1048576, NULL},
    {"sandbox.limits.pids", 8, 65536, NULL},
    {"sandbox.limits.nproc", 8, 65536, NULL},
    {"sandbox.limits.open_files", 16, 1048576, NULL},
    {"sandbox.limits.file_size_mb", 1, 1048576, NULL},
    {"sandbox.limits.address_space_mb", 0, 4194304, NULL},
    {"sandbox.limits.tmp_size_mb", 1, 65536, NULL},
    {"sandbox.limits.disk_mb", 16, 1048576, NULL},
    {"sandbox.exec_timeout_s", 1, 86400, "exec_max_timeout_s: 86400"},
    {"sandbox.exec_max_timeout_s", 1, 86400, "exec_timeout_s: 1"},
    {"sandbox.exec_max_output_bytes", 1024, 67108864, NULL},
    {"sandbox.max_sessions", 1, 256, NULL},
    {"runs.workers", 1, 256, NULL},
    {"runs.queue_max", 1, 65536, NULL},
    {"runs.per_user_active_max", 1, 65536, NULL},
    {"runs.per_user_running_max", 1, 256, "workers: 256"},
    {"server.max_connections", 16, 65536, "max_connections_per_address: 1"},
    {"server.max_connections_per_address", 1, 65535, "max_connections: 65536"},
    {"server.request_head_timeout_s", 1, 600, NULL},
    {"memory.max_facts", 1, 1000, NULL},
    {"memory.max_injection_tokens", 100, 32000, NULL},
    {"compaction.keep_recent_messages", 1, 1000, NULL},
    {"web.fetch_timeout_s", 1, 300, NULL},
    {"web.fetch_max_kb", 1, 2048, NULL},
    {"web.rate_limit_per_minute", 1, 10000, NULL},
};

static void test_numeric_ranges(void **state) {
    for (size_t i = 0; i < ARRAY_LEN(range_cases); i++) {
        const struct range_case *c = &range_cases[i];
        char yaml[512], value[32], expect[128];
        snprintf(expect, sizeof expect, "must be an integer between %" PRIu64 " and %" PRIu64,
                 c->min, c->max);
        uint64_t ok[] = {c->min, c->max};
        for (size_t j = 0; j < 2; j++) {
            snprintf(value, sizeof value, "%" PRIu64, ok[j]);
            yaml_for_path(yaml, sizeof yaml, c->path, value, c->sibling);
            fawn_config cfg;
            accept(&cfg, yaml);
            config_free(&cfg);
        }
        uint64_t bad[] = {c->min - 1, c->max + 1};
        for (size_t j = 0; j < 2; j++) {
            snprintf(value, sizeof value, "%" PRIu64, bad[j]);
            yaml_for_path(yaml, sizeof yaml, c->path, value, c->sibling);
            refuse2(yaml, c->path, expect);
        }
        yaml_for_path(yaml, sizeof yaml, c->path, "[1]", NULL);
        refuse2(yaml, c->path, "expected a single value, got a sequence");
    }
}

/* A ratio is a plain decimal above 0 and at most 1, with up to three
 * decimals. */
static void test_compaction_ratio(void **state) {
    (void)state;
    static const char *const good[] = {"0.8", "1", "1.0", "0.001", "0.5"};
    static const double values[] = {0.8, 1, 1, 0.001, 0.5};
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        char yaml[128];
        snprintf(yaml, sizeof yaml, "compaction:\n  trigger_ratio: %s\n", good[i]);
        fawn_config cfg;
        accept(&cfg, yaml);
        assert_true(cfg.compaction.trigger_ratio == values[i]);
        config_free(&cfg);
    }
    static const char *const bad[] = {"0",    "0.0",    "1.5", "2",   "-0.5", ".5",  "0.8x",
                                      "1e-1", "0.0001", "nan", "inf", "0x1",  "0,5", "\"\""};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        char yaml[128];
        snprintf(yaml, sizeof yaml, "compaction:\n  trigger_ratio: %s\n", bad[i]);
        refuse2(yaml, "compaction.trigger_ratio", "must be a decimal above 0 and at most 1");
    }
}

static void test_integer_syntax(void **state) {
    static const char *const bad[] = {
        "abc",
        "-1",
        "+2048",
        "2048.0",
        "1e4",
        "0x800",
        "04000",
        "2_048",
        "' 2048'",
        "'2048 '",
        "18446744073709551616",
        "99999999999999999999999999",
        "''",
        "true",
        "\"2048\\t\"",
    };
    char yaml[256];
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        snprintf(yaml, sizeof yaml, "sandbox:\n  limits:\n    memory_mb: %s\n", bad[i]);
        refuse2(yaml,
                "<string>:3: sandbox.limits.memory_mb: must be an integer between 16 and 1048576",
                "(got '");
    }
    /* The exact message format. */
    refuse("sandbox:\n  limits:\n    memory_mb: abc\n", NULL);
    assert_string_equal(fawn_errmsg(), "<string>:3: sandbox.limits.memory_mb: must be an integer "
                                       "between 16 and 1048576 (got 'abc')");
    /* Quoted decimal text is accepted like a plain number. */
    fawn_config cfg;
    accept(&cfg, "sandbox:\n  limits:\n    memory_mb: \"2048\"\n");
    assert_int_equal(cfg.sandbox.limits.memory_mb, 2048);
    config_free(&cfg);
    /* A hostile value is shown cut and with control characters masked. */
    char big[400] = "log_level: \"\\e[31m";
    memset(big + strlen(big), 'x', 300);
    strcpy(big + 318, "\"\n");
    refuse(big, "(got '?[31mxxxx");
    assert_null(strchr(fawn_errmsg(), '\x1b'));
    assert_non_null(strstr(fawn_errmsg(), "...')"));
}

static void test_exec_timeout_cross_check(void **state) {
    refuse2("sandbox:\n  exec_timeout_s: 7200\n", "sandbox.exec_timeout_s",
            "must not exceed sandbox.exec_max_timeout_s (7200 > 3600)");
    refuse("sandbox:\n  exec_max_timeout_s: 300\n", "(600 > 300)");
    fawn_config cfg;
    accept(&cfg, "sandbox:\n  exec_timeout_s: 3600\n  exec_max_timeout_s: 3600\n");
    assert_int_equal(cfg.sandbox.exec_timeout_s, 3600);
    config_free(&cfg);
}

static void test_runs_running_cap_derived_and_checked(void **state) {
    static const struct {
        const char *yaml;
        uint32_t workers, running_max;
    } cases[] = {
        {"runs:\n  workers: 1\n", 1, 1},
        {"runs:\n  workers: 3\n", 3, 1},
        {"runs:\n  workers: 16\n", 16, 8},
        {"runs:\n  workers: 2\n  per_user_running_max: 2\n", 2, 2},
        {"runs:\n  per_user_running_max: 1\n", 8, 1},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        fawn_config cfg;
        accept(&cfg, cases[i].yaml);
        assert_int_equal(cfg.runs.workers, cases[i].workers);
        assert_int_equal(cfg.runs.per_user_running_max, cases[i].running_max);
        config_free(&cfg);
    }
    refuse2("runs:\n  per_user_running_max: 9\n", "runs.per_user_running_max",
            "must not exceed runs.workers (9 > 8)");
    refuse("runs:\n  workers: 2\n  per_user_running_max: 3\n", "(3 > 2)");
}

static void test_upload_size_cross_check(void **state) {
    refuse2("uploads:\n  max_file_size_mb: 200\n", "uploads.max_file_size_mb",
            "must not exceed uploads.max_total_size_mb (200 > 100)");
}

static void test_connection_caps_cross_check(void **state) {
    refuse2("server:\n  max_connections: 64\n", "server.max_connections_per_address",
            "must be below server.max_connections (64 >= 64)");
    refuse("server:\n  max_connections_per_address: 2000\n", "(2000 >= 1024)");
    fawn_config cfg;
    accept(&cfg, "server:\n  max_connections: 16\n  max_connections_per_address: 15\n");
    assert_int_equal(cfg.server.max_connections_per_address, 15);
    config_free(&cfg);
}

static void test_booleans(void **state) {
    fawn_config cfg;
    accept(&cfg, "auth:\n  disabled: true\n  registration_enabled: true\n  cookie_secure: false\n");
    assert_true(cfg.auth.disabled);
    assert_true(cfg.auth.registration_enabled);
    assert_false(cfg.auth.cookie_secure);
    config_free(&cfg);
    refuse("auth:\n  disabled: yes\n", "auth.disabled: must be true or false (got 'yes')");
    refuse("auth:\n  disabled: 1\n", "must be true or false");
    refuse("auth:\n  disabled:\n", "auth.disabled: a value is required");
}

/* The authorization section is kept as a JSON tree for src/authz to judge. */
static void test_authorization_tree(void **state) {
    fawn_config cfg;
    setenv("FAWN_TEST_ROLE", "from-env", 1);
    accept(&cfg, "authorization:\n"
                 "  enabled: true\n"
                 "  default_role: $FAWN_TEST_ROLE\n"
                 "  roles:\n"
                 "    guest:\n"
                 "      tools: {allow: [read_file, \"true\"], deny: []}\n"
                 "      models: {allow: false}\n"
                 "      skills: {allow: 5, deny: ~}\n"
                 "    admin:\n");
    unsetenv("FAWN_TEST_ROLE");
    char *text = json_dumps(cfg.authorization, JSON_SORT_KEYS | JSON_COMPACT);
    assert_string_equal(text, "{\"default_role\":\"from-env\",\"enabled\":true,\"roles\":"
                              "{\"admin\":null,\"guest\":{\"models\":{\"allow\":false},"
                              "\"skills\":{\"allow\":\"5\",\"deny\":null},\"tools\":{\"allow\":"
                              "[\"read_file\",\"true\"],\"deny\":[]}}}}");
    free(text);
    config_free(&cfg);
    accept(&cfg, "authorization:\n");
    assert_null(cfg.authorization); /* empty is absent */
    config_free(&cfg);
    refuse("authorization:\n  roles: {a: 1, a: 2}\n", "authorization.roles.a: duplicate key");
    refuse("authorization:\n  roles:\n    [x]: 1\n",
           "authorization.roles: keys must be single values");
    refuse("authorization:\n  x: $FAWN_TEST_UNSET_VAR\n",
           "authorization.x: environment variable $FAWN_TEST_UNSET_VAR is not set");
    refuse("authorization: [1]\n", "authorization: expected a mapping");
    refuse("models: {a: 1}\n", "models: expected a sequence");
    refuse("authorization:\n  a: &x 1\n  b: *x\n", "anchors and aliases are not allowed");
}

/* ---- keys and types ---- */

static void test_unknown_keys(void **state) {
    refuse("serve: 1\n", "<string>:1: unknown key serve");
    refuse("sandbox:\n  foo: 1\n", "<string>:2: unknown key sandbox.foo");
    refuse("sandbox:\n  limits:\n    memory: 1\n", "unknown key sandbox.limits.memory");
    refuse("Log_Level: info\n", "unknown key Log_Level"); /* keys are case-sensitive */
    refuse("\"log_level\\0x\": info\n", "contains a NUL byte");
    refuse("? [a, b]\n: 1\n", "keys must be single values");
    refuse("\"\\e]0;pwn\\a\": 1\n", "unknown key ?]0;pwn?");
}

static void test_wrong_types(void **state) {
    refuse2("sandbox: 5\n", "sandbox: expected a mapping, got a single value", "<string>:1:");
    refuse2("sandbox: [a]\n", "sandbox: expected a mapping, got a sequence", NULL);
    refuse("sandbox:\n  limits: 1024\n", "sandbox.limits: expected a mapping");
    refuse("log_level: {a: 1}\n", "log_level: expected a single value, got a mapping");
    refuse("log_level: [info]\n", "log_level: expected a single value, got a sequence");
    refuse("sandbox:\n  network:\n    mode: none\n", "sandbox.network: expected a single value");
    refuse("sandbox:\n  environment: [A, B]\n", "sandbox.environment: expected a mapping");
    refuse("sandbox:\n  environment: A=b\n", "sandbox.environment: expected a mapping");
    refuse("sandbox:\n  environment:\n    A: {b: 1}\n",
           "sandbox.environment.A: expected a single value, got a mapping");
    refuse("sandbox:\n  environment:\n    A: [1]\n", "sandbox.environment.A: expected a single");
    refuse("sandbox:\n  environment:\n    [A]: 1\n", "sandbox.environment: names must be single");
    refuse("home:\n", "home: a value is required");
    refuse("home: ~\n", "home: a value is required");
    refuse("home: ''\n", "home: must not be empty");
    refuse("sandbox:\n  skills_dir: \"\"\n", "sandbox.skills_dir: must not be empty");
    refuse("sandbox:\n  environment:\n    A:\n", "sandbox.environment.A: a value is required");
    refuse("home: \"/a\\0/b\"\n", "home: contains a NUL byte");
}

static void test_top_level_not_mapping(void **state) {
    refuse("- a\n- b\n", "the top level must be a mapping");
    refuse("just words\n", "the top level must be a mapping");
    refuse("42\n", "the top level must be a mapping");
    refuse("log_level: info\n---\nlog_level: debug\n", "only one YAML document");
}

static void test_duplicate_keys(void **state) {
    refuse("log_level: info\nlog_level: debug\n", "<string>:2: log_level: duplicate key");
    refuse("sandbox:\n  limits:\n    pids: 9\n    pids: 10\n",
           "<string>:4: sandbox.limits.pids: duplicate key");
    refuse("sandbox: {}\nsandbox: {}\n", "sandbox: duplicate key");
    refuse("sandbox:\n  environment:\n    A: 1\n    A: 2\n",
           "sandbox.environment: duplicate variable A");
}

static void test_enums(void **state) {
    refuse("log_level: verbose\n",
           "log_level: must be one of debug|info|warn|error (got 'verbose')");
    refuse("log_level: INFO\n", "log_level: must be one of");
    refuse("sandbox:\n  network: bridge\n",
           "<string>:2: sandbox.network: must be one of none|host|allowlist (got 'bridge')");
    refuse("sandbox:\n  network: \"host \"\n",
           "sandbox.network: must be one of none|host|allowlist");
    static const char *const levels[] = {"debug", "info", "warn", "error"};
    for (size_t i = 0; i < ARRAY_LEN(levels); i++) {
        char yaml[64];
        snprintf(yaml, sizeof yaml, "log_level: %s\n", levels[i]);
        fawn_config cfg;
        accept(&cfg, yaml);
        assert_string_equal(cfg.log_level, levels[i]);
        config_free(&cfg);
    }
}

/* ---- sandbox.environment ---- */

static void test_env_names(void **state) {
    static const char *const bad[] = {"1ABC",    "A-B",          "\"A B\"",   "\"\"",
                                      "\"A=B\"", "\"\\u00c4B\"", "\"A\\nB\"", "\"$A\""};
    char yaml[256];
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        snprintf(yaml, sizeof yaml, "sandbox:\n  environment:\n    %s: x\n", bad[i]);
        refuse2(yaml, "<string>:3: sandbox.environment:", "is not a valid variable name");
    }
    char name[200];
    memset(name, 'N', sizeof name - 1);
    name[sizeof name - 1] = '\0';
    snprintf(yaml, sizeof yaml, "sandbox:\n  environment:\n    %s: x\n", name);
    refuse(yaml, "is not a valid variable name");
    refuse("sandbox:\n  environment:\n    \"A\\0B\": x\n", "contains a NUL byte");
    refuse("sandbox:\n  environment:\n    A: \"x\\0y\"\n",
           "sandbox.environment.A: contains a NUL byte");
}

static void env_yaml(char *out, size_t size, size_t n) {
    size_t used = (size_t)snprintf(out, size, "sandbox:\n  environment:\n");
    for (size_t i = 0; i < n; i++)
        used += (size_t)snprintf(out + used, size - used, "    VAR_%zu: value%zu\n", i, i);
    assert_true(used < size);
}

static void test_env_count(void **state) {
    char yaml[8192];
    env_yaml(yaml, sizeof yaml, CONFIG_MAX_ENV);
    fawn_config cfg;
    accept(&cfg, yaml);
    assert_int_equal(cfg.sandbox.n_env, CONFIG_MAX_ENV);
    assert_string_equal(cfg.sandbox.env[CONFIG_MAX_ENV - 1].name, "VAR_63");
    assert_string_equal(cfg.sandbox.env[CONFIG_MAX_ENV - 1].value, "value63");
    config_free(&cfg);
    env_yaml(yaml, sizeof yaml, CONFIG_MAX_ENV + 1);
    refuse2(yaml, "sandbox.environment: more than 64 variables", "<string>:67:");
}

/* sandbox.env_passthrough: host values only for the names it lists, after
 * sandbox.environment (which wins for a name both give), unset ones skipped. */
static void test_env_passthrough(void **state) {
    (void)state;
    setenv("FAWN_TEST_PASS_A", "from host", 1);
    setenv("FAWN_TEST_PASS_B", "host value ignored", 1);
    setenv("FAWN_TEST_NOT_NAMED", "never", 1);
    unsetenv("FAWN_TEST_PASS_UNSET");
    fawn_config cfg;
    accept(&cfg, "sandbox:\n"
                 "  env_passthrough: [FAWN_TEST_PASS_A, FAWN_TEST_PASS_UNSET, FAWN_TEST_PASS_B]\n"
                 "  environment:\n"
                 "    FAWN_TEST_PASS_B: configured\n");
    assert_int_equal(cfg.sandbox.n_env, 2);
    assert_string_equal(cfg.sandbox.env[0].name, "FAWN_TEST_PASS_B");
    assert_string_equal(cfg.sandbox.env[0].value, "configured");
    assert_string_equal(cfg.sandbox.env[1].name, "FAWN_TEST_PASS_A");
    assert_string_equal(cfg.sandbox.env[1].value, "from host");
    config_free(&cfg);
    refuse2("sandbox:\n  env_passthrough: [\"BAD NAME\"]\n", "sandbox.env_passthrough",
            "not a valid variable name");
    refuse2("sandbox:\n  env_passthrough: [[A]]\n", "sandbox.env_passthrough",
            "not a valid variable name");
    unsetenv("FAWN_TEST_PASS_A");
    unsetenv("FAWN_TEST_PASS_B");
    unsetenv("FAWN_TEST_NOT_NAMED");
}

/* ---- $VAR substitution ---- */

static void test_var_substitution(void **state) {
    setenv("FAWN_TEST_MEM", "2048", 1);
    setenv("FAWN_TEST_HOME", "/from/env", 1);
    setenv("FAWN_TEST_SECRET", "s3cr3t value", 1);
    setenv("FAWN_TEST_LEVEL", "warn", 1);
    fawn_config cfg;
    accept(&cfg, "home: $FAWN_TEST_HOME\n"
                 "log_level: \"$FAWN_TEST_LEVEL\"\n"
                 "sandbox:\n"
                 "  environment:\n"
                 "    TOKEN: $FAWN_TEST_SECRET\n"
                 "    LITERAL: $$FAWN_TEST_SECRET\n"
                 "    DOLLAR: $\n"
                 "    DOLLARS: $$\n"
                 "    NOT_A_NAME: $1abc\n"
                 "    INSIDE: a$FAWN_TEST_SECRET\n"
                 "    SUFFIX: $FAWN_TEST_SECRET/x\n"
                 "  limits:\n"
                 "    memory_mb: $FAWN_TEST_MEM\n");
    assert_string_equal(cfg.home, "/from/env");
    assert_string_equal(cfg.sandbox.skills_dir, "/from/env/skills");
    assert_string_equal(cfg.log_level, "warn");
    assert_int_equal(cfg.sandbox.limits.memory_mb, 2048);
    static const char *const expect[][2] = {
        {"TOKEN", "s3cr3t value"},
        {"LITERAL", "$FAWN_TEST_SECRET"},
        {"DOLLAR", "$"},
        {"DOLLARS", "$"},
        {"NOT_A_NAME", "$1abc"},
        {"INSIDE", "a$FAWN_TEST_SECRET"},
        {"SUFFIX", "$FAWN_TEST_SECRET/x"},
    };
    assert_int_equal(cfg.sandbox.n_env, ARRAY_LEN(expect));
    for (size_t i = 0; i < ARRAY_LEN(expect); i++) {
        assert_string_equal(cfg.sandbox.env[i].name, expect[i][0]);
        assert_string_equal(cfg.sandbox.env[i].value, expect[i][1]);
    }
    config_free(&cfg);
    unsetenv("FAWN_TEST_MEM");
    unsetenv("FAWN_TEST_HOME");
    unsetenv("FAWN_TEST_SECRET");
    unsetenv("FAWN_TEST_LEVEL");
}

static void test_var_errors(void **state) {
    unsetenv("FAWN_TEST_UNSET");
    refuse2("sandbox:\n  limits:\n    pids: $FAWN_TEST_UNSET\n",
            "<string>:3: sandbox.limits.pids:", "environment variable $FAWN_TEST_UNSET is not set");
    refuse2("sandbox:\n  environment:\n    KEY: $FAWN_TEST_UNSET\n", "sandbox.environment.KEY",
            "$FAWN_TEST_UNSET");
    refuse2("home: $FAWN_TEST_UNSET\n", "home:", "$FAWN_TEST_UNSET");
    /* A bad value from the environment is named by its variable, never echoed. */
    setenv("FAWN_TEST_BAD", "hunter2-secret", 1);
    refuse2("sandbox:\n  limits:\n    memory_mb: $FAWN_TEST_BAD\n",
            "sandbox.limits.memory_mb: must be an integer", "(got the value of $FAWN_TEST_BAD)");
    assert_null(strstr(fawn_errmsg(), "hunter2"));
    refuse2("log_level: $FAWN_TEST_BAD\n", "log_level: must be one of", "$FAWN_TEST_BAD");
    setenv("FAWN_TEST_BAD", "", 1);
    refuse2("home: $FAWN_TEST_BAD\n", "home: must not be empty", "$FAWN_TEST_BAD");
    unsetenv("FAWN_TEST_BAD");
}

/* ---- hostile input ---- */

static void test_aliases_refused(void **state) {
    refuse("log_level: &lvl info\n", "anchors and aliases are not allowed");
    refuse("log_level: *lvl\n", "log_level: YAML anchors and aliases are not allowed");
    refuse("sandbox: &s {}\n", "anchors and aliases");
    refuse("sandbox:\n  environment:\n    A: &a x\n    B: *a\n", "anchors and aliases");
    refuse("&root {log_level: info}\n", "anchors and aliases");
    refuse("sandbox:\n  environment: !!map &m {}\n", "anchors and aliases");
    /* The classic expansion bomb never expands. */
    refuse("a: &a [\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\",\"lol\"]\n"
           "b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
           "c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]\n"
           "d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]\n",
           NULL);
}

static void test_oversized(void **state) {
    char *big = malloc(TEST_FILE_MAX + 2);
    assert_non_null(big);
    memset(big, ' ', TEST_FILE_MAX + 1);
    big[0] = '#';
    big[TEST_FILE_MAX - 1] = '\n';
    fawn_config cfg;
    assert_int_equal(config_load_string(&cfg, big, TEST_FILE_MAX), 0); /* exactly the limit */
    config_free(&cfg);
    assert_refused(big, TEST_FILE_MAX + 1, "<string>: larger than 1048576 bytes", NULL);

    char *dir = tmpdir_make();
    char *path = file_write(dir, "big.yaml", big, TEST_FILE_MAX + 1);
    assert_int_equal(config_load_file(&cfg, path), FAWN_ECONFIG);
    assert_zeroed(&cfg);
    assert_msg_has("larger than 1048576 bytes");
    assert_msg_has(path);
    free(path);
    tmpdir_remove(dir);
    free(big);
}

static char *nested(const char *prefix, const char *open, const char *close, size_t depth) {
    size_t plen = strlen(prefix), olen = strlen(open), clen = strlen(close);
    char *s = malloc(plen + depth * (olen + clen) + 1);
    assert_non_null(s);
    char *p = s;
    memcpy(p, prefix, plen);
    p += plen;
    for (size_t i = 0; i < depth; i++, p += olen)
        memcpy(p, open, olen);
    for (size_t i = 0; i < depth; i++, p += clen)
        memcpy(p, close, clen);
    *p = '\0';
    return s;
}

static void test_deep_nesting(void **state) {
    static const struct {
        const char *prefix, *open, *close;
    } shapes[] = {
        {"", "[", "]"},
        {"", "{a: ", "}"},
        {"sandbox: ", "[", "]"},
        {"sandbox:\n  limits: ", "{a: ", "}"},
        {"sandbox:\n  environment:\n    A: ", "[", "]"},
        {"log_level: ", "{x: ", "}"},
    };
    for (size_t i = 0; i < ARRAY_LEN(shapes); i++) {
        char *s = nested(shapes[i].prefix, shapes[i].open, shapes[i].close, 100000);
        refuse(s, NULL);
        free(s);
    }
    char *unbalanced = nested("sandbox: ", "[", "", 200000);
    refuse(unbalanced, NULL);
    free(unbalanced);
}

static void test_malformed(void **state) {
    refuse("log_level: info\nsandbox: {limits: {pids: 9]}\n",
           "<string>:2:27: YAML syntax error: did not find expected ',' or '}'");
    refuse("sandbox:\n  limits:\n    pids: 9\n   nproc: 9\n", "<string>:4:4: YAML syntax error");
    refuse("log_level: \"bad \\q escape\"\n", "<string>:1:17: YAML syntax error");
    refuse("sandbox:\n  limits: {memory_mb: 100\n", "<string>:3:1: YAML syntax error");
    refuse("log_level: 'info\n", "YAML syntax error");
    refuse("sandbox:\n\tlimits: {}\n", "<string>:2:");
    refuse("log_level: \xff\xfe\n", "invalid text at byte");
    refuse("log_level: \xc0\xaf\n", "invalid text");
    assert_refused("log_level: info\n\0sandbox: 1\n", 28, "<string>:", NULL); /* raw NUL */
    refuse("%YAML 9.9\n---\nlog_level: info\n", "YAML syntax error");
}

/* ---- files ---- */

static void test_load_file(void **state) {
    char *dir = tmpdir_make();
    char *path = file_write(dir, "config.yaml", full_yaml, strlen(full_yaml));
    fawn_config cfg;
    assert_int_equal(config_load_file(&cfg, path), 0);
    assert_int_equal(cfg.sandbox.limits.memory_mb, 2048);
    config_free(&cfg);

    /* Messages name the file and the line. */
    char *bad = file_write(dir, "bad.yaml", "\n\nlog_level: loud\n", 17);
    assert_int_equal(config_load_file(&cfg, bad), FAWN_ECONFIG);
    char expect[512];
    snprintf(expect, sizeof expect, "%s:3: log_level: must be one of", bad);
    assert_msg_has(expect);

    char *missing = NULL;
    assert_true(asprintf(&missing, "%s/nope.yaml", dir) > 0);
    assert_int_equal(config_load_file(&cfg, missing), FAWN_ENOENT);
    assert_zeroed(&cfg);

    /* Not a regular file: a directory, a FIFO (must not block), a symlink to a device. */
    assert_int_equal(config_load_file(&cfg, dir), FAWN_ECONFIG);
    assert_msg_has("not a regular file");
    char *fifo = NULL, *link = NULL, *good_link = NULL;
    assert_true(asprintf(&fifo, "%s/fifo", dir) > 0);
    assert_int_equal(mkfifo(fifo, 0600), 0);
    assert_int_equal(config_load_file(&cfg, fifo), FAWN_ECONFIG);
    assert_msg_has("not a regular file");
    assert_true(asprintf(&link, "%s/zero", dir) > 0);
    assert_int_equal(symlink("/dev/zero", link), 0);
    assert_int_equal(config_load_file(&cfg, link), FAWN_ECONFIG);
    assert_zeroed(&cfg);
    /* A symlink to a regular file is an ordinary way to install a config. */
    assert_true(asprintf(&good_link, "%s/link.yaml", dir) > 0);
    assert_int_equal(symlink(path, good_link), 0);
    assert_int_equal(config_load_file(&cfg, good_link), 0);
    assert_string_equal(cfg.log_level, "debug");
    config_free(&cfg);

    free(path);
    free(bad);
    free(missing);
    free(fifo);
    free(link);
    free(good_link);
    tmpdir_remove(dir);
}

static void test_load_resolution(void **state) {
    unsetenv("FAWN_HOME");
    char *dir = tmpdir_make();
    int cwd = open(".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(cwd >= 0);
    assert_int_equal(chdir(dir), 0);
    char *env_file = file_write(dir, "env.yaml", "log_level: warn\n", 16);
    char *explicit_file = file_write(dir, "explicit.yaml", "log_level: error\n", 17);
    fawn_config cfg;

    unsetenv("FAWN_CONFIG");
    assert_int_equal(config_load(&cfg, NULL), 0); /* nothing anywhere: defaults */
    assert_default_values(&cfg);
    config_free(&cfg);

    char *local = file_write(dir, "config.yaml", "log_level: debug\n", 17);
    assert_int_equal(config_load(&cfg, NULL), 0);
    assert_string_equal(cfg.log_level, "debug");
    config_free(&cfg);

    setenv("FAWN_CONFIG", env_file, 1);
    assert_int_equal(config_load(&cfg, NULL), 0);
    assert_string_equal(cfg.log_level, "warn");
    config_free(&cfg);

    assert_int_equal(config_load(&cfg, explicit_file), 0);
    assert_string_equal(cfg.log_level, "error");
    config_free(&cfg);

    assert_int_equal(config_load(&cfg, "/nonexistent/fawn.yaml"), FAWN_ENOENT);
    assert_zeroed(&cfg);
    setenv("FAWN_CONFIG", "/nonexistent/fawn.yaml", 1);
    assert_int_equal(config_load(&cfg, NULL), FAWN_ENOENT);

    /* A broken ./config.yaml is an error, not a silent fall back to defaults. */
    unsetenv("FAWN_CONFIG");
    free(file_write(dir, "config.yaml", "bogus: 1\n", 9));
    assert_int_equal(config_load(&cfg, NULL), FAWN_ECONFIG);
    assert_msg_has("unknown key bogus");
    assert_zeroed(&cfg);

    assert_int_equal(fchdir(cwd), 0);
    close(cwd);
    free(env_file);
    free(explicit_file);
    free(local);
    tmpdir_remove(dir);
}

/* ---- config.example.yaml ---- */

static void test_example_file(void **state) {
    const char *src = getenv("FAWN_SOURCE_DIR");
    if (!src)
        fail_msg("FAWN_SOURCE_DIR must name the source tree holding config.example.yaml");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.example.yaml", src);
    unsetenv("FAWN_HOME");
    fawn_config cfg;
    int r = config_load_file(&cfg, path);
    if (r != 0)
        fail_msg("%s does not load: %s", path, fawn_errmsg());
    /* It documents the defaults: loading it changes nothing. */
    assert_string_equal(cfg.home, "./.fawn");
    assert_string_equal(cfg.sandbox.skills_dir, "./.fawn/skills");
    assert_default_values(&cfg);
    config_free(&cfg);

    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    char *text = NULL;
    assert_int_equal(fawn_read_all(&text, NULL, fd, TEST_FILE_MAX), 0);
    close(fd);
    static const char *const keys[] = {
        "home:",
        "log_level:",
        "sandbox:",
        "network:",
        "skills_dir:",
        "environment:",
        "limits:",
        "memory_mb:",
        "pids:",
        "nproc:",
        "open_files:",
        "file_size_mb:",
        "address_space_mb:",
        "tmp_size_mb:",
        "disk_mb:",
        "exec_timeout_s:",
        "exec_max_timeout_s:",
        "exec_max_output_bytes:",
        "max_sessions:",
        "auth:",
        "disabled:",
        "registration_enabled:",
        "session_ttl_s:",
        "cookie_secure:",
        "uploads:",
        "max_files:",
        "max_file_size_mb:",
        "max_total_size_mb:",
        "idle_timeout_s:",
        "replicas:",
        "provider:",
        "remote:",
        "create_command:",
        "status_command:",
        "destroy_command:",
        "list_command:",
        "command_timeout_s:",
        "start_timeout_s:",
        "trusted_proxies:",
        "max_connections:",
        "max_connections_per_address:",
        "request_head_timeout_s:",
        "models:",
        "base_url:",
        "api_key:",
        "max_tokens:",
        "stall_timeout_s:",
        "total_timeout_s:",
        "supports_thinking:",
        "supports_vision:",
        "extra_body:",
        "display_name:",
        "authorization:",
        "enabled:",
        "fail_closed:",
        "default_role:",
        "roles:",
        "runs:",
        "workers:",
        "queue_max:",
        "per_user_active_max:",
        "per_user_running_max:",
        "memory:",
        "injection_enabled:",
        "max_facts:",
        "max_injection_tokens:",
        "web:",
        "fetch_enabled:",
        "fetch_timeout_s:",
        "fetch_max_kb:",
        "gateway_id:",
        "heartbeat_ms:",
        "lease_ms:",
        "rate_limit_per_minute:",
        "allow:",
    };
    for (size_t i = 0; i < ARRAY_LEN(keys); i++)
        if (!strstr(text, keys[i]))
            fail_msg("config.example.yaml does not document %s", keys[i]);
    free(text);
}

/* store.backend: sqlite by default; postgres needs a DSN libpq can parse,
 * which may come from the environment and is never echoed in a message. */
static void test_store_backend(void **state) {
    (void)state;
    fawn_config cfg;
    accept(&cfg, "log_level: info\n");
    assert_int_equal(cfg.store.backend, FAWN_STORE_SQLITE);
    assert_null(cfg.store.postgres_dsn);
    config_free(&cfg);
    accept(&cfg, "store:\n  backend: postgres\n  postgres:\n    dsn: host=/run/pg dbname=fawn\n");
    assert_int_equal(cfg.store.backend, FAWN_STORE_POSTGRES);
    assert_string_equal(cfg.store.postgres_dsn, "host=/run/pg dbname=fawn");
    config_free(&cfg);
    setenv("FAWN_TEST_DSN", "postgresql://fawn:s3cret@localhost/fawn", 1);
    accept(&cfg, "store:\n  backend: postgres\n  postgres:\n    dsn: $FAWN_TEST_DSN\n");
    assert_string_equal(cfg.store.postgres_dsn, "postgresql://fawn:s3cret@localhost/fawn");
    config_free(&cfg);
    unsetenv("FAWN_TEST_DSN");
    refuse("store:\n  backend: mysql\n", "store.backend");
    refuse("store:\n  backend: postgres\n", "store.postgres.dsn");
    refuse("store:\n  postgres:\n    dsn: \"host=x pasword=s3cret\"\n", "store.postgres.dsn");
    assert_null(strstr(fawn_errmsg(), "s3cret"));
    refuse("store:\n  postgres:\n    dsn: \"host='unterminated\"\n", "store.postgres.dsn");
}

/* cluster.*: a gateway id is a short name from an allow-list; a lease
 * outlives three heartbeats. */
static void test_cluster(void **state) {
    (void)state;
    fawn_config cfg;
    accept(&cfg, "log_level: info\n");
    assert_null(cfg.cluster.gateway_id);
    assert_int_equal(cfg.cluster.heartbeat_ms, 2000);
    assert_int_equal(cfg.cluster.lease_ms, 10000);
    config_free(&cfg);
    accept(&cfg, "cluster:\n  gateway_id: gw-a.example:8001\n  heartbeat_ms: 500\n"
                 "  lease_ms: 1500\n");
    assert_string_equal(cfg.cluster.gateway_id, "gw-a.example:8001");
    assert_int_equal(cfg.cluster.heartbeat_ms, 500);
    assert_int_equal(cfg.cluster.lease_ms, 1500);
    config_free(&cfg);
    refuse("cluster:\n  gateway_id: \"gw a\"\n", "cluster.gateway_id");
    refuse("cluster:\n  gateway_id: ../gw\n", "cluster.gateway_id");
    refuse("cluster:\n  gateway_id: "
           "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\n",
           "cluster.gateway_id");
    refuse("cluster:\n  heartbeat_ms: 2000\n  lease_ms: 5999\n", "cluster.lease_ms");
    refuse("cluster:\n  heartbeat_ms: 50\n", "cluster.heartbeat_ms");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cluster),
        cmocka_unit_test(test_store_backend),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_inputs_are_defaults),
        cmocka_unit_test(test_full_file),
        cmocka_unit_test(test_flow_style_and_home_derivation),
        cmocka_unit_test(test_numeric_ranges),
        cmocka_unit_test(test_compaction_ratio),
        cmocka_unit_test(test_connection_caps_cross_check),
        cmocka_unit_test(test_integer_syntax),
        cmocka_unit_test(test_exec_timeout_cross_check),
        cmocka_unit_test(test_unknown_keys),
        cmocka_unit_test(test_wrong_types),
        cmocka_unit_test(test_top_level_not_mapping),
        cmocka_unit_test(test_duplicate_keys),
        cmocka_unit_test(test_enums),
        cmocka_unit_test(test_env_names),
        cmocka_unit_test(test_env_count),
        cmocka_unit_test(test_env_passthrough),
        cmocka_unit_test(test_var_substitution),
        cmocka_unit_test(test_var_errors),
        cmocka_unit_test(test_aliases_refused),
        cmocka_unit_test(test_oversized),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_malformed),
        cmocka_unit_test(test_load_file),
        cmocka_unit_test(test_load_resolution),
        cmocka_unit_test(test_example_file),
        cmocka_unit_test(test_upload_size_cross_check),
        cmocka_unit_test(test_runs_running_cap_derived_and_checked),
        cmocka_unit_test(test_booleans),
        cmocka_unit_test(test_authorization_tree),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
