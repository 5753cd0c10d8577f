#include "config/config.h"

#include <assert.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <libpq-fe.h>
#include <yaml.h>

/* Largest config file accepted: real ones are a few KiB; this bounds parser memory and work. */
#define CONFIG_FILE_MAX ((size_t)1 << 20)
/* A PostgreSQL connection string: host lists, options and TLS file paths
 * fit in far less. */
#define CONFIG_DSN_MAX 4096
/* Most YAML events read from one document: a full config has a few hundred; bounds hostile input.
 */
#define CONFIG_MAX_EVENTS 16384
/* Deepest collection nesting accepted: the schema is three levels deep, so 16 leaves room to grow.
 */
#define CONFIG_MAX_DEPTH 16
/* Longest dotted key path kept for messages: schema paths are far shorter; user names are cut. */
#define CONFIG_PATH_MAX 256
/* Longest environment variable name: real names are short; longer ones are mistakes or abuse. */
#define CONFIG_NAME_MAX 128
/* Characters of an offending value quoted back in a message: enough to recognize it. */
#define CONFIG_SHOW_MAX 48
/* Room for one formatted message before the file/line/key prefix is added. */
#define CONFIG_MSG_MAX 320
/* Keys per schema section: duplicates are tracked in a 64-bit mask. */
#define CONFIG_SECTION_MAX_KEYS 64

/* Used when neither $FAWN_HOME nor the file names a home. */
#define CONFIG_DEFAULT_HOME "./.fawn"
/* Looked up in the working directory when no path is given. */
#define CONFIG_DEFAULT_PATH "./config.yaml"
/* Names the input in messages for config_load_string and for built-in defaults. */
#define CONFIG_STRING_SOURCE "<string>"
#define CONFIG_DEFAULTS_SOURCE "<defaults>"

#define _cleanup_event_ __attribute__((cleanup(yaml_event_delete)))

typedef struct config_parser {
    yaml_parser_t yaml;
    const char *source; /* file name for messages */
    fawn_config *cfg;   /* being filled */
    size_t events;      /* events read so far (CONFIG_MAX_EVENTS) */
    size_t depth;       /* open collections (CONFIG_MAX_DEPTH) */
} config_parser;

/* One scalar value after $VAR resolution, with what a message needs. */
typedef struct config_scalar {
    const char *text;   /* resolved value */
    const char *var;    /* environment variable it came from, or NULL */
    const char *path;   /* dotted key path */
    const char *source; /* file name */
    size_t line;        /* 1-based; 0 when unknown */
} config_scalar;

typedef struct config_key config_key;

/* Validates v and stores it into field (a member of fawn_config). */
typedef int (*config_setter)(void *field, const config_key *key, const config_scalar *v);
/* Reads the entries of a free-form mapping whose start event was consumed. */
typedef int (*config_mapping_parser)(config_parser *p, const char *path);
/* Checks a rule that spans several keys, after the whole file is read. */
typedef int (*config_check)(const fawn_config *cfg, const char *source);

enum config_kind {
    CONFIG_SECTION, /* a mapping of schema keys (children) */
    CONFIG_SCALAR,  /* one value stored by set */
    CONFIG_MAPPING, /* a mapping of user-chosen names read by parse */
    CONFIG_TREE,    /* a free-form mapping kept as JSON (a json_t * at offset) */
    CONFIG_LIST,    /* a free-form sequence kept as JSON (a json_t * at offset) */
};

struct config_key {
    const char *name;
    enum config_kind kind;
    size_t offset;               /* CONFIG_SCALAR, _TREE, _LIST: field offset in fawn_config */
    config_setter set;           /* CONFIG_SCALAR */
    const char *def;             /* CONFIG_SCALAR: default as text; NULL when derived */
    uint64_t min, max;           /* integer setters: accepted range */
    const config_key *children;  /* CONFIG_SECTION: ends with a NULL name */
    config_mapping_parser parse; /* CONFIG_MAPPING */
};

/* ---- messages ---- */

__attribute__((format(printf, 4, 0))) static int
config_vfail(const char *source, size_t line, const char *path, const char *fmt, va_list ap) {
    char msg[CONFIG_MSG_MAX];
    vsnprintf(msg, sizeof msg, fmt, ap);
    char where[32] = "";
    if (line)
        snprintf(where, sizeof where, ":%zu", line);
    if (path)
        return fawn_err(FAWN_ECONFIG, "%s%s: %s: %s", source, where, path, msg);
    return fawn_err(FAWN_ECONFIG, "%s%s: %s", source, where, msg);
}

/* FAWN_ECONFIG with "source:line: path: message" (line and path left out when 0/NULL). */
__attribute__((format(printf, 4, 5))) static int
config_fail(const char *source, size_t line, const char *path, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int r = config_vfail(source, line, path, fmt, ap);
    va_end(ap);
    return r;
}

static size_t event_line(const yaml_event_t *ev) { return ev->start_mark.line + 1; }

/* Copies a user-supplied text for display: printable ASCII only, cut at CONFIG_SHOW_MAX. */
static void text_show(char out[CONFIG_SHOW_MAX + 4], const char *s) {
    size_t n = 0;
    for (; s[n] && n < CONFIG_SHOW_MAX; n++)
        out[n] = (s[n] >= 0x20 && s[n] < 0x7f && s[n] != '\'') ? s[n] : '?';
    strcpy(out + n, s[n] ? "..." : "");
}

/* A value error: the message is followed by what was given ("(got 'abc')"); values
 * taken from the environment are named by their variable, never echoed. */
__attribute__((format(printf, 2, 3))) static int scalar_fail(const config_scalar *v,
                                                             const char *fmt, ...) {
    char msg[CONFIG_MSG_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (v->var)
        return config_fail(v->source, v->line, v->path, "%s (got the value of $%s)", msg, v->var);
    char shown[CONFIG_SHOW_MAX + 4];
    text_show(shown, v->text);
    return config_fail(v->source, v->line, v->path, "%s (got '%s')", msg, shown);
}

static void path_join(char out[CONFIG_PATH_MAX], const char *parent, const char *name) {
    /* A path cut at CONFIG_PATH_MAX still names the key well enough. */
    if (*parent)
        snprintf(out, CONFIG_PATH_MAX, "%s.%s", parent, name);
    else
        snprintf(out, CONFIG_PATH_MAX, "%s", name);
}

/* ---- value setters ---- */

static bool name_valid(const char *s) {
    size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_0123456789");
    return n > 0 && n <= CONFIG_NAME_MAX && s[n] == '\0' && !(s[0] >= '0' && s[0] <= '9');
}

/* Strict decimal: digits only, no sign, no spaces, no leading zeros, no overflow. */
static bool decimal_parse(uint64_t *out, const char *s) {
    size_t n = strspn(s, "0123456789");
    if (n == 0 || s[n] != '\0' || (s[0] == '0' && n > 1))
        return false;
    errno = 0;
    char *end = NULL;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno == ERANGE || *end != '\0')
        return false;
    *out = v;
    return true;
}

static int integer_read(uint64_t *out, const config_key *key, uint64_t max,
                        const config_scalar *v) {
    uint64_t n = 0;
    if (!decimal_parse(&n, v->text) || n < key->min || n > max)
        return scalar_fail(v, "must be an integer between %" PRIu64 " and %" PRIu64, key->min, max);
    *out = n;
    return 0;
}

static int set_u64(void *field, const config_key *key, const config_scalar *v) {
    return integer_read(field, key, key->max, v);
}

static int set_u32(void *field, const config_key *key, const config_scalar *v) {
    uint64_t n = 0;
    int r = integer_read(&n, key, key->max < UINT32_MAX ? key->max : UINT32_MAX, v);
    if (r == 0)
        *(uint32_t *)field = (uint32_t)n;
    return r;
}

static int set_string(void *field, const config_key *key, const config_scalar *v) {
    if (!*v->text)
        return scalar_fail(v, "must not be empty");
    char *copy = strdup(v->text);
    if (!copy)
        return fawn_err(FAWN_ENOMEM, "out of memory copying %s", v->path);
    char **slot = field;
    free(*slot);
    *slot = copy;
    return 0;
}

static int set_log_level(void *field, const config_key *key, const config_scalar *v) {
    enum fawn_log_level level;
    if (fawn_log_parse_level(&level, v->text) < 0)
        return scalar_fail(v, "must be one of debug|info|warn|error");
    return set_string(field, key, v);
}

static int set_bool(void *field, const config_key *key, const config_scalar *v) {
    bool value = strcmp(v->text, "true") == 0;
    if (!value && strcmp(v->text, "false") != 0)
        return scalar_fail(v, "must be true or false");
    *(bool *)field = value;
    return 0;
}

/* Digits a ratio may have after its point: a thousandth is finer than any
 * threshold needs. */
#define CONFIG_RATIO_DECIMALS_MAX 3

/* A share written as a decimal ("0.8", "1", "1.0"): above 0, at most 1. */
static int set_ratio(void *field, const config_key *key, const config_scalar *v) {
    (void)key;
    const char *t = v->text;
    size_t whole = strspn(t, "0123456789");
    size_t frac = t[whole] == '.' ? strspn(t + whole + 1, "0123456789") : 0;
    size_t len = whole + (t[whole] == '.' ? 1 + frac : 0);
    double r = whole && !t[len] && frac <= CONFIG_RATIO_DECIMALS_MAX ? strtod(t, NULL) : -1;
    if (!(r > 0 && r <= 1))
        return scalar_fail(v, "must be a decimal above 0 and at most 1 (e.g. 0.8)");
    *(double *)field = r;
    return 0;
}

static const char *const network_names[] = {
    [FAWN_NET_NONE] = "none", [FAWN_NET_HOST] = "host", [FAWN_NET_ALLOWLIST] = "allowlist"};

static int set_provider(void *field, const config_key *key, const config_scalar *v) {
    if (strcmp(v->text, "local") == 0)
        *(enum fawn_provider *)field = FAWN_PROVIDER_LOCAL;
    else if (strcmp(v->text, "remote") == 0)
        *(enum fawn_provider *)field = FAWN_PROVIDER_REMOTE;
    else if (strcmp(v->text, "container") == 0)
        *(enum fawn_provider *)field = FAWN_PROVIDER_CONTAINER;
    else if (strcmp(v->text, "kubernetes") == 0)
        *(enum fawn_provider *)field = FAWN_PROVIDER_KUBERNETES;
    else
        return scalar_fail(v, "must be one of local|remote|container|kubernetes");
    return 0;
}

static int set_store_backend(void *field, const config_key *key, const config_scalar *v) {
    if (strcmp(v->text, "sqlite") == 0)
        *(enum fawn_store_backend *)field = FAWN_STORE_SQLITE;
    else if (strcmp(v->text, "postgres") == 0)
        *(enum fawn_store_backend *)field = FAWN_STORE_POSTGRES;
    else
        return scalar_fail(v, "must be one of sqlite|postgres");
    return 0;
}

/* A libpq connection string, checked by libpq's own parser (its message
 * names what is wrong; the value itself, which may hold a password, is
 * not repeated). */
static int set_dsn(void *field, const config_key *key, const config_scalar *v) {
    if (strlen(v->text) > CONFIG_DSN_MAX)
        return config_fail(v->source, v->line, v->path, "is longer than %d bytes", CONFIG_DSN_MAX);
    char *err = NULL;
    PQconninfoOption *opts = PQconninfoParse(v->text, &err);
    if (!opts) {
        int r = config_fail(v->source, v->line, v->path, "is not a libpq connection string: %s",
                            err ? strtok(err, "\n") : "out of memory");
        PQfreemem(err);
        return r;
    }
    PQconninfoFree(opts);
    return set_string(field, key, v);
}

/* A gateway id names the gateway in the store and in logs: a short name of
 * letters, digits and . _ : - (an allow-list: no spaces, quotes or slashes). */
static int set_gateway_id(void *field, const config_key *key, const config_scalar *v) {
    size_t n = strlen(v->text);
    bool ok = n >= 1 && n <= CONFIG_GATEWAY_ID_MAX;
    for (size_t i = 0; ok && i < n; i++)
        ok = isalnum((unsigned char)v->text[i]) || strchr("._:-", v->text[i]);
    if (!ok)
        return scalar_fail(v, "must be 1 to %d of A-Z a-z 0-9 . _ : -", CONFIG_GATEWAY_ID_MAX);
    return set_string(field, key, v);
}

static int set_network(void *field, const config_key *key, const config_scalar *v) {
    for (size_t i = 0; i < ARRAY_LEN(network_names); i++) {
        if (strcmp(v->text, network_names[i]) == 0) {
            *(enum fawn_network_mode *)field = (enum fawn_network_mode)i;
            return 0;
        }
    }
    return scalar_fail(v, "must be one of none|host|allowlist");
}

/* ---- schema ---- */

static int parse_sandbox_environment(config_parser *p, const char *path);

#define KEY_SCALAR(n, field, setter, d)                                                            \
    {                                                                                              \
        .name = (n), .kind = CONFIG_SCALAR, .offset = offsetof(fawn_config, field),                \
        .set = (setter), .def = (d)                                                                \
    }
#define KEY_INT(n, field, setter, d, lo, hi)                                                       \
    {                                                                                              \
        .name = (n), .kind = CONFIG_SCALAR, .offset = offsetof(fawn_config, field),                \
        .set = (setter), .def = (d), .min = (lo), .max = (hi)                                      \
    }
#define KEY_SECTION(n, table)                                                                      \
    { .name = (n), .kind = CONFIG_SECTION, .children = (table) }
#define KEY_MAPPING(n, parser)                                                                     \
    { .name = (n), .kind = CONFIG_MAPPING, .parse = (parser) }
#define KEY_TREE(n, field)                                                                         \
    { .name = (n), .kind = CONFIG_TREE, .offset = offsetof(fawn_config, field) }
#define KEY_LIST(n, field)                                                                         \
    { .name = (n), .kind = CONFIG_LIST, .offset = offsetof(fawn_config, field) }

static const config_key limits_keys[] = {
    /* 16 MiB runs a shell; 1 TiB is past any single host we target. */
    KEY_INT("memory_mb", sandbox.limits.memory_mb, set_u64, "1024", 16, 1048576),
    /* 8 lets a shell pipeline run; 65536 is far past any real workload. */
    KEY_INT("pids", sandbox.limits.pids, set_u64, "512", 8, 65536),
    KEY_INT("nproc", sandbox.limits.nproc, set_u64, "512", 8, 65536),
    /* 16 covers stdio plus a few files; 1048576 is the kernel's default nr_open. */
    KEY_INT("open_files", sandbox.limits.open_files, set_u64, "1024", 16, 1048576),
    /* 1 MiB up to 1 TiB. */
    KEY_INT("file_size_mb", sandbox.limits.file_size_mb, set_u64, "1024", 1, 1048576),
    /* 64 MiB maps a dynamic shell; 4 TiB is past any host. 0: none, for boxes whose memory
     * something outside holds (a container's cgroup: the container provider's boxes). */
    KEY_INT("address_space_mb", sandbox.limits.address_space_mb, set_u64, "4096", 0, 4194304),
    /* 1 MiB up to 64 GiB of RAM-backed /tmp. */
    KEY_INT("tmp_size_mb", sandbox.limits.tmp_size_mb, set_u64, "256", 1, 65536),
    /* 10 GiB holds a cloned repository with its dependencies and build
     * outputs, or a data set of a few GiB; 16 MiB still holds the
     * directories and a few small files; 1 TiB up to a disk. */
    KEY_INT("disk_mb", sandbox.limits.disk_mb, set_u64, "10240", 16, 1048576),
    {0},
};

static const config_key egress_keys[] = {
    KEY_LIST("allow", sandbox.egress.allow),
    KEY_LIST("tls_ports", sandbox.egress.tls_ports),
    /* A package manager opens a few connections at once (apt 1 per mirror,
     * pip and npm up to 16): 32 leaves room; each costs the gateway a thread
     * and two descriptors, so 1024 bounds what one sandbox can make it hold. */
    KEY_INT("max_connections", sandbox.egress.max_connections, set_u32, "32", 1, 1024),
    /* A download or a stalled mirror answers well within 2 minutes; a held
     * connection that says nothing only costs a slot. A day at most. */
    KEY_INT("idle_timeout_s", sandbox.egress.idle_timeout_s, set_u32, "120", 1, 86400),
    /* 4 GiB carries any package or image layer; it bounds what one
     * connection moves through the gateway. 1 TiB at most. */
    KEY_INT("max_connection_mb", sandbox.egress.max_connection_mb, set_u64, "4096", 1, 1048576),
    {0},
};

static const config_key sandbox_keys[] = {
    KEY_SCALAR("network", sandbox.network, set_network, "none"),
    KEY_SECTION("egress", egress_keys),
    KEY_SCALAR("skills_dir", sandbox.skills_dir, set_string, NULL),
    KEY_MAPPING("environment", parse_sandbox_environment),
    KEY_LIST("env_passthrough", sandbox.env_passthrough),
    KEY_SECTION("limits", limits_keys),
    /* One second up to one day. */
    KEY_INT("exec_timeout_s", sandbox.exec_timeout_s, set_u32, "600", 1, 86400),
    KEY_INT("exec_max_timeout_s", sandbox.exec_max_timeout_s, set_u32, "3600", 1, 86400),
    /* 1 KiB shows an error message; 64 MiB is the largest buffer fawn holds (FBUF_DEFAULT_LIMIT).
     */
    KEY_INT("exec_max_output_bytes", sandbox.exec_max_output_bytes, set_u64, "1048576", 1024,
            67108864),
    /* At least one shell; 256 bounds the processes one box may keep alive. */
    KEY_INT("max_sessions", sandbox.max_sessions, set_u32, "16", 1, 256),
    /* Up to a week; 0 keeps parked sandboxes until evicted or destroyed. */
    KEY_INT("idle_timeout_s", sandbox.idle_timeout_s, set_u32, "600", 0, 604800),
    /* 0 = no cap; 100000 is past any single host. */
    KEY_INT("replicas", sandbox.replicas, set_u32, "32", 0, 100000),
    KEY_SCALAR("provider", sandbox.provider, set_provider, "local"),
    KEY_TREE("remote", sandbox.remote),
    KEY_TREE("kubernetes", sandbox.kubernetes),
    KEY_TREE("container", sandbox.container),
    {0},
};

static const config_key server_keys[] = {
    KEY_SCALAR("host", server.host, set_string, "127.0.0.1"),
    /* Any unprivileged-or-not TCP port. */
    KEY_INT("port", server.port, set_u32, "8001", 1, 65535),
    /* One thread still serves; 256 is far past the cores of any gateway host. */
    KEY_INT("threads", server.threads, set_u32, "4", 1, 256),
    /* Each connection costs a descriptor and up to 32 KiB of buffers: 1024 is
     * 32 MiB; 16 still serves a browser; 65536 is past one process's descriptors
     * on most hosts. */
    KEY_INT("max_connections", server.max_connections, set_u32, "1024", 16, 65536),
    /* A browser opens at most 6 connections to a host; 64 also lets one client
     * stream its 32 active runs at once, and leaves 15 of 16 slots of the
     * default to other addresses. */
    KEY_INT("max_connections_per_address", server.max_connections_per_address, set_u32, "64", 1,
            65535),
    /* A head is a few KiB sent at once: any real client sends it within a second;
     * 30 s allows for a stalled mobile link and frees a held slot twice a minute;
     * 600 s is the longest a slot may be held without a request. */
    KEY_INT("request_head_timeout_s", server.request_head_timeout_s, set_u32, "30", 1, 600),
    KEY_LIST("trusted_proxies", server.trusted_proxies),
    {0},
};

static const config_key auth_keys[] = {
    KEY_SCALAR("disabled", auth.disabled, set_bool, "false"),
    KEY_SCALAR("registration_enabled", auth.registration_enabled, set_bool, "false"),
    /* Five minutes up to one year. */
    KEY_INT("session_ttl_s", auth.session_ttl_s, set_u32, "604800", 300, 31536000),
    KEY_SCALAR("cookie_secure", auth.cookie_secure, set_bool, "false"),
    {0},
};

static const config_key uploads_keys[] = {
    /* One file up to 1000 per request. */
    KEY_INT("max_files", uploads.max_files, set_u32, "10", 1, 1000),
    /* 1 MiB up to 64 GiB. */
    KEY_INT("max_file_size_mb", uploads.max_file_size_mb, set_u64, "50", 1, 65536),
    KEY_INT("max_total_size_mb", uploads.max_total_size_mb, set_u64, "100", 1, 65536),
    {0},
};

static const config_key runs_keys[] = {
    /* A run spends most of its time waiting for a model or a command, so a
     * few workers go far; one still runs everything in turn, and 256 threads
     * are far past what one gateway's models and sandboxes sustain. */
    KEY_INT("workers", runs.workers, set_u32, "8", 1, 256),
    /* Each waiting run holds its input (up to the run routes' 1 MiB body),
     * so 256 bounds them to a few hundred MiB at worst; 65536 is the most a
     * host could hold. Past it a new run is refused (409). */
    KEY_INT("queue_max", runs.queue_max, set_u32, "256", 1, 65536),
    /* One user's many threads cannot fill the queue every user shares. */
    KEY_INT("per_user_active_max", runs.per_user_active_max, set_u32, "32", 1, 65536),
    /* Derived when absent (config_derive): half the workers, so one user's
     * long runs leave the other half to start other users' runs at once. */
    KEY_INT("per_user_running_max", runs.per_user_running_max, set_u32, NULL, 1, 256),
    {0},
};

static const config_key memory_keys[] = {
    /* Off unless asked for: it costs one more model call after each run. */
    KEY_SCALAR("enabled", memory.enabled, set_bool, "false"),
    KEY_SCALAR("injection_enabled", memory.injection_enabled, set_bool, "true"),
    /* One fact up to STORE_FACTS_MAX (1000), which bounds every listing. */
    KEY_INT("max_facts", memory.max_facts, set_u32, "100", 1, 1000),
    /* 100 tokens hold a few facts; 32000 is a large share of any context
     * window, past which the facts would crowd out the conversation. */
    KEY_INT("max_injection_tokens", memory.max_injection_tokens, set_u32, "2000", 100, 32000),
    {0},
};

static const config_key subagents_keys[] = {
    KEY_SCALAR("enabled", subagents.enabled, set_bool, "true"),
    /* Each sub-agent holds a worker thread, a shell session and model
     * calls; 16 at once is past what one reply can usefully split into. */
    KEY_INT("max_concurrent", subagents.max_concurrent, set_u32, "3", 1, 16),
    KEY_INT("max_per_run", subagents.max_per_run, set_u32, "6", 1, 50),
    /* A day: past any task one model reply should wait for. */
    KEY_INT("timeout_s", subagents.timeout_s, set_u32, "1800", 1, 86400),
    KEY_LIST("custom", subagents.custom),
    {0},
};

static const config_key compaction_keys[] = {
    KEY_SCALAR("enabled", compaction.enabled, set_bool, "true"),
    /* 0.8 leaves a fifth of the window for the reply and the turns that
     * come before the next check. */
    KEY_SCALAR("trigger_ratio", compaction.trigger_ratio, set_ratio, "0.8"),
    /* 1 keeps at least the newest message; 1000 is past any window worth
     * compacting. */
    KEY_INT("keep_recent_messages", compaction.keep_recent_messages, set_u32, "10", 1, 1000),
    {0},
};

static const config_key web_keys[] = {
    KEY_SCALAR("fetch_enabled", web.fetch_enabled, set_bool, "true"),
    /* A second reaches a nearby page; 300 s is past any page worth waiting
     * for while a run holds its worker. */
    KEY_INT("fetch_timeout_s", web.fetch_timeout_s, set_u32, "20", 1, 300),
    /* 1 KiB up to 2 MiB, the largest page turned into text (WEB_HTML_MAX). */
    KEY_INT("fetch_max_kb", web.fetch_max_kb, set_u64, "2048", 1, 2048),
    /* A researching run makes a call every few seconds; 10000 a minute is
     * past any model's pace, so it only bounds what a loop can send. */
    KEY_INT("rate_limit_per_minute", web.rate_per_minute, set_u32, "30", 1, 10000),
    KEY_LIST("allow", web.allow),
    KEY_TREE("search", web.search),
    {0},
};

static const config_key schedules_keys[] = {
    KEY_SCALAR("enabled", schedules.enabled, set_bool, "true"),
    /* DeerFlow's bounds: each run holds a worker of runs.workers. */
    KEY_INT("max_concurrent_runs", schedules.max_concurrent_runs, set_u32, "3", 1, 32),
    /* A task runs at most this late after its minute; 60 s is the
     * finest a schedule can be, so polling slower would skip minutes. */
    KEY_INT("poll_interval_s", schedules.poll_interval_s, set_u32, "5", 1, 30),
    {0},
};

static const config_key store_postgres_keys[] = {
    KEY_SCALAR("dsn", store.postgres_dsn, set_dsn, NULL),
    {0},
};

static const config_key store_keys[] = {
    KEY_SCALAR("backend", store.backend, set_store_backend, "sqlite"),
    KEY_SECTION("postgres", store_postgres_keys),
    {0},
};

static const config_key cluster_keys[] = {
    KEY_SCALAR("gateway_id", cluster.gateway_id, set_gateway_id, NULL),
    /* 100 ms is past any store's round trip; a minute still notices a
     * dead gateway within the hour's first minutes. */
    KEY_INT("heartbeat_ms", cluster.heartbeat_ms, set_u32, "2000", 100, 60000),
    /* A second is past a heartbeat's round trip; ten minutes leaves a dead
     * gateway's runs waiting that long, past which no one waits. */
    KEY_INT("lease_ms", cluster.lease_ms, set_u32, "10000", 1000, 600000),
    {0},
};

static const config_key root_keys[] = {
    KEY_SCALAR("home", home, set_string, NULL),
    KEY_SCALAR("log_level", log_level, set_log_level, "info"),
    KEY_SECTION("server", server_keys),
    KEY_SECTION("sandbox", sandbox_keys),
    KEY_SECTION("auth", auth_keys),
    KEY_SECTION("uploads", uploads_keys),
    KEY_SECTION("runs", runs_keys),
    KEY_SECTION("memory", memory_keys),
    KEY_SECTION("subagents", subagents_keys),
    KEY_SECTION("compaction", compaction_keys),
    KEY_SECTION("web", web_keys),
    KEY_SECTION("schedules", schedules_keys),
    KEY_SECTION("store", store_keys),
    KEY_SECTION("cluster", cluster_keys),
    KEY_TREE("authorization", authorization),
    KEY_LIST("models", models),
    KEY_TREE("mcp", mcp),
    KEY_TREE("broker", broker),
    KEY_TREE("channels", channels),
    {0},
};

static int check_exec_timeouts(const fawn_config *cfg, const char *source) {
    const fawn_sandbox_config *sb = &cfg->sandbox;
    if (sb->exec_timeout_s <= sb->exec_max_timeout_s)
        return 0;
    return config_fail(source, 0, "sandbox.exec_timeout_s",
                       "must not exceed sandbox.exec_max_timeout_s (%" PRIu32 " > %" PRIu32 ")",
                       sb->exec_timeout_s, sb->exec_max_timeout_s);
}

static int check_upload_sizes(const fawn_config *cfg, const char *source) {
    const fawn_uploads_config *u = &cfg->uploads;
    if (u->max_file_size_mb <= u->max_total_size_mb)
        return 0;
    return config_fail(source, 0, "uploads.max_file_size_mb",
                       "must not exceed uploads.max_total_size_mb (%" PRIu64 " > %" PRIu64 ")",
                       u->max_file_size_mb, u->max_total_size_mb);
}

static int check_remote_provider(const fawn_config *cfg, const char *source) {
    if (cfg->sandbox.provider == FAWN_PROVIDER_CONTAINER && !cfg->sandbox.container)
        return config_fail(source, 0, "sandbox.container",
                           "is required when sandbox.provider is container");
    if (cfg->sandbox.provider != FAWN_PROVIDER_REMOTE || cfg->sandbox.remote)
        return 0;
    return config_fail(source, 0, "sandbox.remote", "is required when sandbox.provider is remote");
}

static int check_store_backend(const fawn_config *cfg, const char *source) {
    if (cfg->store.backend != FAWN_STORE_POSTGRES || cfg->store.postgres_dsn)
        return 0;
    return config_fail(source, 0, "store.postgres.dsn",
                       "is required when store.backend is postgres");
}

/* A lease must outlive a late heartbeat or two: a gateway that misses one
 * beat (a slow store, a busy host) is not yet taken for dead. */
static int check_cluster_lease(const fawn_config *cfg, const char *source) {
    const fawn_cluster_config *c = &cfg->cluster;
    if ((uint64_t)c->lease_ms >= 3 * (uint64_t)c->heartbeat_ms)
        return 0;
    return config_fail(source, 0, "cluster.lease_ms",
                       "must be at least 3 times cluster.heartbeat_ms (%" PRIu32 " < 3 * %" PRIu32
                       ")",
                       c->lease_ms, c->heartbeat_ms);
}

/* A cap on one user's workers above the workers there are would say
 * something the gateway cannot do. 0: not given (derived later). */
static int check_runs_running_max(const fawn_config *cfg, const char *source) {
    const fawn_runs_config *rc = &cfg->runs;
    if (rc->per_user_running_max <= rc->workers)
        return 0;
    return config_fail(source, 0, "runs.per_user_running_max",
                       "must not exceed runs.workers (%" PRIu32 " > %" PRIu32 ")",
                       rc->per_user_running_max, rc->workers);
}

/* One address must never be able to hold every connection slot. */
static int check_connection_caps(const fawn_config *cfg, const char *source) {
    const fawn_server_config *sv = &cfg->server;
    if (sv->max_connections_per_address < sv->max_connections)
        return 0;
    return config_fail(source, 0, "server.max_connections_per_address",
                       "must be below server.max_connections (%" PRIu32 " >= %" PRIu32 ")",
                       sv->max_connections_per_address, sv->max_connections);
}

/* A remote box's network is its host's: no egress proxy of this gateway can
 * stand between its commands and the network. */
static int check_remote_network(const fawn_config *cfg, const char *source) {
    if (cfg->sandbox.provider == FAWN_PROVIDER_LOCAL || cfg->sandbox.network != FAWN_NET_ALLOWLIST)
        return 0;
    return config_fail(source, 0, "sandbox.network",
                       "allowlist needs sandbox.provider local (a remote, container or Kubernetes "
                       "provider's sandboxes reach the network outside this gateway's proxy)");
}

static const config_check config_checks[] = {
    check_exec_timeouts,    check_upload_sizes,    check_remote_provider, check_remote_network,
    check_runs_running_max, check_connection_caps, check_store_backend,   check_cluster_lease};

static void *key_field(fawn_config *cfg, const config_key *key) {
    return (char *)cfg + key->offset;
}

/* ---- events ---- */

static int parser_syntax_error(const config_parser *p) {
    const yaml_parser_t *y = &p->yaml;
    const char *problem = y->problem ? y->problem : "unknown error";
    if (y->error == YAML_MEMORY_ERROR)
        return fawn_err(FAWN_ENOMEM, "%s: out of memory parsing YAML", p->source);
    if (y->error == YAML_READER_ERROR)
        return config_fail(p->source, 0, NULL, "invalid text at byte %zu: %s", y->problem_offset,
                           problem);
    return fawn_err(FAWN_ECONFIG, "%s:%zu:%zu: YAML syntax error: %s%s%s%s", p->source,
                    y->problem_mark.line + 1, y->problem_mark.column + 1, problem,
                    y->context ? " (" : "", y->context ? y->context : "", y->context ? ")" : "");
}

static const yaml_char_t *event_anchor(const yaml_event_t *ev) {
    switch (ev->type) {
    case YAML_SCALAR_EVENT: return ev->data.scalar.anchor;
    case YAML_MAPPING_START_EVENT: return ev->data.mapping_start.anchor;
    case YAML_SEQUENCE_START_EVENT: return ev->data.sequence_start.anchor;
    default: return NULL;
    }
}

/* Refuses anchors and aliases (no expansion bombs) and tracks nesting depth. */
static int event_check(config_parser *p, const yaml_event_t *ev, const char *path) {
    if (ev->type == YAML_ALIAS_EVENT || event_anchor(ev))
        return config_fail(p->source, event_line(ev), path,
                           "YAML anchors and aliases are not allowed");
    if (ev->type == YAML_MAPPING_START_EVENT || ev->type == YAML_SEQUENCE_START_EVENT) {
        if (++p->depth > CONFIG_MAX_DEPTH)
            return config_fail(p->source, event_line(ev), path, "nested deeper than %d levels",
                               CONFIG_MAX_DEPTH);
    } else if (ev->type == YAML_MAPPING_END_EVENT || ev->type == YAML_SEQUENCE_END_EVENT) {
        p->depth--;
    }
    return 0;
}

/* Reads the next event into *ev (which the caller deletes). Every loop over the
 * document calls this, so CONFIG_MAX_EVENTS bounds them all. */
static int parser_next(config_parser *p, yaml_event_t *ev, const char *path) {
    if (++p->events > CONFIG_MAX_EVENTS)
        return config_fail(p->source, 0, NULL, "more than %d YAML nodes", CONFIG_MAX_EVENTS);
    if (!yaml_parser_parse(&p->yaml, ev))
        return parser_syntax_error(p);
    return event_check(p, ev, path);
}

static const char *event_kind(const yaml_event_t *ev) {
    switch (ev->type) {
    case YAML_MAPPING_START_EVENT: return "a mapping";
    case YAML_SEQUENCE_START_EVENT: return "a sequence";
    default: return "a single value";
    }
}

/* A plain empty, "~" or "null" scalar: YAML's null. */
static bool event_is_null(const yaml_event_t *ev) {
    if (ev->type != YAML_SCALAR_EVENT || ev->data.scalar.style != YAML_PLAIN_SCALAR_STYLE)
        return false;
    const char *s = (const char *)ev->data.scalar.value;
    return !*s || !strcmp(s, "~") || !strcmp(s, "null") || !strcmp(s, "Null") || !strcmp(s, "NULL");
}

/* The scalar's text; fails when it holds a NUL byte (it would be silently cut). */
static int event_text(const char **out, const config_parser *p, const yaml_event_t *ev,
                      const char *path) {
    const char *s = (const char *)ev->data.scalar.value;
    if (strlen(s) != ev->data.scalar.length)
        return config_fail(p->source, event_line(ev), path, "contains a NUL byte");
    *out = s;
    return 0;
}

/* Resolves "$NAME" from the environment and "$$..." to a literal "$...". */
static int scalar_resolve(config_scalar *out, const config_parser *p, const yaml_event_t *ev,
                          const char *path) {
    const char *raw = NULL;
    int r = event_text(&raw, p, ev, path);
    if (r < 0)
        return r;
    *out = (config_scalar){.text = raw, .path = path, .source = p->source, .line = event_line(ev)};
    if (event_is_null(ev))
        return config_fail(p->source, out->line, path, "a value is required");
    if (raw[0] == '$' && raw[1] == '$') {
        out->text = raw + 1;
    } else if (raw[0] == '$' && name_valid(raw + 1)) {
        out->text = getenv(raw + 1);
        out->var = raw + 1;
        if (!out->text)
            return config_fail(p->source, out->line, path, "environment variable $%s is not set",
                               out->var);
    }
    return 0;
}

/* ---- document walk ---- */

static int parse_section(config_parser *p, const config_key *table, const char *path);
static int parse_tree(config_parser *p, const config_key *key, const char *path, bool mapping);

static int parse_scalar(config_parser *p, const config_key *key, const yaml_event_t *ev,
                        const char *path) {
    if (ev->type != YAML_SCALAR_EVENT)
        return config_fail(p->source, event_line(ev), path, "expected a single value, got %s",
                           event_kind(ev));
    config_scalar v;
    int r = scalar_resolve(&v, p, ev, path);
    if (r < 0)
        return r;
    return key->set(key_field(p->cfg, key), key, &v);
}

/* Sections and mappings accept null ("sandbox:" with nothing under it) as empty. */
static int parse_value(config_parser *p, const config_key *key, const char *path) {
    _cleanup_event_ yaml_event_t ev = {0};
    int r = parser_next(p, &ev, path);
    if (r < 0)
        return r;
    if (key->kind == CONFIG_SCALAR)
        return parse_scalar(p, key, &ev, path);
    if (event_is_null(&ev))
        return 0;
    if (key->kind == CONFIG_LIST)
        return ev.type == YAML_SEQUENCE_START_EVENT
                   ? parse_tree(p, key, path, false)
                   : config_fail(p->source, event_line(&ev), path, "expected a sequence, got %s",
                                 event_kind(&ev));
    if (ev.type != YAML_MAPPING_START_EVENT)
        return config_fail(p->source, event_line(&ev), path, "expected a mapping, got %s",
                           event_kind(&ev));
    if (key->kind == CONFIG_SECTION)
        return parse_section(p, key->children, path);
    if (key->kind == CONFIG_TREE)
        return parse_tree(p, key, path, true);
    return key->parse(p, path);
}

/* Finds the schema entry named by a key event; unknown keys are errors. */
static int section_find(size_t *out, const config_parser *p, const config_key *table,
                        const yaml_event_t *ev, const char *path) {
    if (ev->type != YAML_SCALAR_EVENT)
        return config_fail(p->source, event_line(ev), *path ? path : NULL,
                           "keys must be single values, got %s", event_kind(ev));
    const char *name = NULL;
    int r = event_text(&name, p, ev, *path ? path : NULL);
    if (r < 0)
        return r;
    for (size_t i = 0; table[i].name; i++) {
        if (strcmp(table[i].name, name) == 0) {
            *out = i;
            return 0;
        }
    }
    char shown[CONFIG_SHOW_MAX + 4], full[CONFIG_PATH_MAX];
    text_show(shown, name);
    path_join(full, path, shown);
    return config_fail(p->source, event_line(ev), NULL, "unknown key %s", full);
}

static int parse_section(config_parser *p, const config_key *table, const char *path) {
    uint64_t seen = 0;
    for (;;) {
        _cleanup_event_ yaml_event_t key = {0};
        int r = parser_next(p, &key, *path ? path : NULL);
        if (r < 0 || key.type == YAML_MAPPING_END_EVENT)
            return r;
        size_t i = 0;
        r = section_find(&i, p, table, &key, path);
        if (r < 0)
            return r;
        char child[CONFIG_PATH_MAX];
        path_join(child, path, table[i].name);
        assert(i < CONFIG_SECTION_MAX_KEYS);
        if (seen & ((uint64_t)1 << i))
            return config_fail(p->source, event_line(&key), child, "duplicate key");
        seen |= (uint64_t)1 << i;
        r = parse_value(p, &table[i], child);
        if (r < 0)
            return r;
    }
}

/* ---- sandbox.environment ---- */

static int env_name_check(const char **out, const config_parser *p, const yaml_event_t *ev,
                          const char *path) {
    const fawn_sandbox_config *sb = &p->cfg->sandbox;
    const char *name = NULL;
    if (ev->type != YAML_SCALAR_EVENT)
        return config_fail(p->source, event_line(ev), path, "names must be single values, got %s",
                           event_kind(ev));
    int r = event_text(&name, p, ev, path);
    if (r < 0)
        return r;
    char shown[CONFIG_SHOW_MAX + 4];
    text_show(shown, name);
    if (!name_valid(name))
        return config_fail(p->source, event_line(ev), path,
                           "'%s' is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, at most %d)",
                           shown, CONFIG_NAME_MAX);
    for (size_t i = 0; i < sb->n_env; i++)
        if (strcmp(sb->env[i].name, name) == 0)
            return config_fail(p->source, event_line(ev), path, "duplicate variable %s", shown);
    if (sb->n_env == CONFIG_MAX_ENV)
        return config_fail(p->source, event_line(ev), path, "more than %d variables",
                           CONFIG_MAX_ENV);
    *out = name;
    return 0;
}

static int env_append(fawn_sandbox_config *sb, const char *name, const char *value) {
    char *n = strdup(name), *v = strdup(value);
    if (!n || !v) {
        free(n);
        free(v);
        return fawn_err(FAWN_ENOMEM, "out of memory copying sandbox.environment.%s", name);
    }
    sb->env[sb->n_env++] = (fawn_env_var){.name = n, .value = v};
    return 0;
}

static int env_entry_parse(config_parser *p, const yaml_event_t *key, const char *path) {
    const char *name = NULL;
    int r = env_name_check(&name, p, key, path);
    if (r < 0)
        return r;
    char entry[CONFIG_PATH_MAX];
    path_join(entry, path, name);
    _cleanup_event_ yaml_event_t value = {0};
    r = parser_next(p, &value, entry);
    if (r < 0)
        return r;
    if (value.type != YAML_SCALAR_EVENT)
        return config_fail(p->source, event_line(&value), entry, "expected a single value, got %s",
                           event_kind(&value));
    config_scalar v;
    r = scalar_resolve(&v, p, &value, entry);
    if (r < 0)
        return r;
    return env_append(&p->cfg->sandbox, name, v.text);
}

/* Appends, for each name of sandbox.env_passthrough that sandbox.environment
 * does not set, the host's value when the host has one. */
static int env_passthrough_apply(fawn_config *cfg, const char *source) {
    fawn_sandbox_config *sb = &cfg->sandbox;
    const json_t *names = sb->env_passthrough;
    for (size_t i = 0; i < json_array_size(names); i++) {
        const char *name = json_string_value(json_array_get(names, i));
        if (!name || !name_valid(name))
            return config_fail(source, 0, "sandbox.env_passthrough",
                               "entry %zu is not a valid variable name ([A-Za-z_][A-Za-z0-9_]*, "
                               "at most %d)",
                               i, CONFIG_NAME_MAX);
        bool set = false;
        for (size_t j = 0; j < sb->n_env && !set; j++)
            set = strcmp(sb->env[j].name, name) == 0;
        const char *value = getenv(name);
        if (set || !value)
            continue;
        if (sb->n_env == CONFIG_MAX_ENV)
            return config_fail(source, 0, "sandbox.env_passthrough",
                               "sandbox.environment and it together name more than %d variables",
                               CONFIG_MAX_ENV);
        int r = env_append(sb, name, value);
        if (r < 0)
            return r;
    }
    return 0;
}

static int parse_sandbox_environment(config_parser *p, const char *path) {
    for (;;) {
        _cleanup_event_ yaml_event_t key = {0};
        int r = parser_next(p, &key, path);
        if (r < 0 || key.type == YAML_MAPPING_END_EVENT)
            return r;
        r = env_entry_parse(p, &key, path);
        if (r < 0)
            return r;
    }
}

/* ---- authorization: a free-form tree kept as JSON ---- */

static int tree_parse(json_t **out, config_parser *p, const yaml_event_t *ev, const char *path);

static int tree_add(json_t *container, const char *key, json_t *value) {
    int r = key ? json_object_set_new(container, key, value)
                : json_array_append_new(container, value);
    return r == 0 ? 0 : fawn_err(FAWN_ENOMEM, "out of memory reading the authorization section");
}

static int tree_key(const char **out, config_parser *p, const yaml_event_t *ev, const json_t *obj,
                    const char *path) {
    if (ev->type != YAML_SCALAR_EVENT)
        return config_fail(p->source, event_line(ev), path, "keys must be single values, got %s",
                           event_kind(ev));
    int r = event_text(out, p, ev, path);
    if (r < 0 || !json_object_get(obj, *out))
        return r;
    char shown[CONFIG_SHOW_MAX + 4], full[CONFIG_PATH_MAX];
    text_show(shown, *out);
    path_join(full, path, shown);
    return config_fail(p->source, event_line(ev), full, "duplicate key");
}

/* Reads entries until the collection ends: key/value pairs into an object,
 * items into an array. */
static int tree_collection(json_t *container, config_parser *p, const char *path) {
    bool mapping = json_is_object(container);
    for (;;) {
        _cleanup_event_ yaml_event_t ev = {0};
        int r = parser_next(p, &ev, path);
        if (r < 0 || ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT)
            return r;
        const char *key = NULL;
        char child[CONFIG_PATH_MAX];
        _cleanup_event_ yaml_event_t value_ev = {0};
        const yaml_event_t *value_at = &ev;
        if (mapping) {
            if ((r = tree_key(&key, p, &ev, container, path)) < 0)
                return r;
            path_join(child, path, key);
            if ((r = parser_next(p, &value_ev, child)) < 0)
                return r;
            value_at = &value_ev;
        } else {
            snprintf(child, sizeof child, "%s[%zu]", path, json_array_size(container));
        }
        json_t *value = NULL;
        if ((r = tree_parse(&value, p, value_at, child)) < 0 ||
            (r = tree_add(container, key, value)) < 0)
            return r;
    }
}

static int tree_scalar(json_t **out, const config_parser *p, const yaml_event_t *ev,
                       const char *path) {
    bool plain = ev->data.scalar.style == YAML_PLAIN_SCALAR_STYLE;
    const char *raw = (const char *)ev->data.scalar.value;
    config_scalar v;
    int r = 0;
    if (event_is_null(ev))
        *out = json_null();
    else if (plain && (!strcmp(raw, "true") || !strcmp(raw, "false")))
        *out = json_boolean(raw[0] == 't');
    else if ((r = scalar_resolve(&v, p, ev, path)) == 0)
        *out = json_string(v.text);
    if (r == 0 && !*out)
        r = fawn_err(FAWN_ENOMEM, "out of memory reading %s", path);
    return r;
}

static int tree_parse(json_t **out, config_parser *p, const yaml_event_t *ev, const char *path) {
    if (ev->type == YAML_SCALAR_EVENT)
        return tree_scalar(out, p, ev, path);
    json_t *container = ev->type == YAML_MAPPING_START_EVENT ? json_object() : json_array();
    if (!container)
        return fawn_err(FAWN_ENOMEM, "out of memory reading %s", path);
    int r = tree_collection(container, p, path);
    if (r < 0)
        json_decref(container);
    else
        *out = container;
    return r;
}

/* A free-form section (its start event consumed): a mapping kept as a JSON
 * object, a sequence as an array, for the module that owns its meaning to
 * validate. */
static int parse_tree(config_parser *p, const config_key *key, const char *path, bool mapping) {
    json_t *section = mapping ? json_object() : json_array();
    if (!section)
        return fawn_err(FAWN_ENOMEM, "out of memory reading %s", path);
    int r = tree_collection(section, p, path);
    if (r < 0) {
        json_decref(section);
        return r;
    }
    json_t **field = key_field(p->cfg, key);
    json_decref(*field);
    *field = section;
    return 0;
}

/* ---- stream ---- */

static int parse_root(config_parser *p) {
    _cleanup_event_ yaml_event_t ev = {0};
    int r = parser_next(p, &ev, NULL);
    if (r < 0 || event_is_null(&ev))
        return r;
    if (ev.type != YAML_MAPPING_START_EVENT)
        return config_fail(p->source, event_line(&ev), NULL,
                           "the top level must be a mapping of keys, got %s", event_kind(&ev));
    return parse_section(p, root_keys, "");
}

/* An empty stream is the defaults; more than one document is refused. */
static int parse_stream(config_parser *p) {
    _cleanup_event_ yaml_event_t stream = {0};
    _cleanup_event_ yaml_event_t doc = {0};
    _cleanup_event_ yaml_event_t doc_end = {0};
    _cleanup_event_ yaml_event_t next = {0};
    int r = parser_next(p, &stream, NULL);
    if (r == 0)
        r = parser_next(p, &doc, NULL);
    if (r < 0 || doc.type == YAML_STREAM_END_EVENT)
        return r;
    r = parse_root(p);
    if (r == 0)
        r = parser_next(p, &doc_end, NULL);
    if (r == 0)
        r = parser_next(p, &next, NULL);
    if (r == 0 && next.type != YAML_STREAM_END_EVENT)
        return config_fail(p->source, event_line(&next), NULL, "only one YAML document is allowed");
    return r;
}

static int config_parse(fawn_config *cfg, const char *source, const char *text, size_t len) {
    config_parser p = {.source = source, .cfg = cfg};
    if (!yaml_parser_initialize(&p.yaml))
        return fawn_err(FAWN_ENOMEM, "out of memory starting the YAML parser");
    yaml_parser_set_input_string(&p.yaml, (const unsigned char *)text, len);
    int r = parse_stream(&p);
    yaml_parser_delete(&p.yaml);
    return r;
}

/* ---- assembly ---- */

static int defaults_apply(fawn_config *cfg, const config_key *table, const char *parent) {
    for (const config_key *k = table; k->name; k++) {
        char path[CONFIG_PATH_MAX];
        path_join(path, parent, k->name);
        int r = 0;
        if (k->kind == CONFIG_SECTION)
            r = defaults_apply(cfg, k->children, path);
        else if (k->kind == CONFIG_SCALAR && k->def)
            r = k->set(
                key_field(cfg, k), k,
                &(config_scalar){.text = k->def, .path = path, .source = CONFIG_DEFAULTS_SOURCE});
        if (r < 0)
            return r;
    }
    return 0;
}

/* Every default except the ones derived from other keys (config_derive). */
static int config_init(fawn_config *cfg) {
    const char *home = getenv("FAWN_HOME");
    cfg->home = strdup(home && *home ? home : CONFIG_DEFAULT_HOME);
    if (!cfg->home)
        return fawn_err(FAWN_ENOMEM, "out of memory copying home");
    return defaults_apply(cfg, root_keys, "");
}

static int config_derive(fawn_config *cfg) {
    fawn_runs_config *rc = &cfg->runs;
    if (!rc->per_user_running_max)
        rc->per_user_running_max = rc->workers > 1 ? rc->workers / 2 : 1;
    if (cfg->sandbox.skills_dir)
        return 0;
    size_t n = strlen(cfg->home);
    const char *sep = cfg->home[n - 1] == '/' ? "" : "/";
    if (asprintf(&cfg->sandbox.skills_dir, "%s%sskills", cfg->home, sep) < 0) {
        cfg->sandbox.skills_dir = NULL;
        return fawn_err(FAWN_ENOMEM, "out of memory building sandbox.skills_dir");
    }
    return 0;
}

static int config_run_checks(const fawn_config *cfg, const char *source) {
    for (size_t i = 0; i < ARRAY_LEN(config_checks); i++) {
        int r = config_checks[i](cfg, source);
        if (r < 0)
            return r;
    }
    return 0;
}

static int config_build(fawn_config *cfg, const char *source, const char *text, size_t len) {
    if (len > CONFIG_FILE_MAX)
        return config_fail(source, 0, NULL, "larger than %zu bytes", CONFIG_FILE_MAX);
    int r = config_init(cfg);
    if (r == 0)
        r = config_parse(cfg, source, text ? text : "", len);
    if (r == 0)
        r = config_run_checks(cfg, source);
    if (r == 0)
        r = env_passthrough_apply(cfg, source);
    if (r == 0)
        r = config_derive(cfg);
    return r;
}

static int config_load_text(fawn_config *cfg, const char *source, const char *text, size_t len) {
    memset(cfg, 0, sizeof *cfg);
    int r = config_build(cfg, source, text, len);
    if (r < 0)
        config_free(cfg);
    return r;
}

/* Reads a regular file of at most CONFIG_FILE_MAX bytes (never blocks on a FIFO). */
static int config_read_file(char **out, size_t *len, const char *path) {
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0 && errno == ENOENT)
        return fawn_err(FAWN_ENOENT, "config file %s does not exist", path);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", path);
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", path);
    if (!S_ISREG(st.st_mode))
        return config_fail(path, 0, NULL, "not a regular file");
    int r = fawn_read_all(out, len, fd, CONFIG_FILE_MAX);
    if (r == FAWN_E2BIG)
        return config_fail(path, 0, NULL, "larger than %zu bytes", CONFIG_FILE_MAX);
    return r;
}

int config_defaults(fawn_config *cfg) {
    memset(cfg, 0, sizeof *cfg);
    int r = config_init(cfg);
    if (r == 0)
        r = config_derive(cfg);
    if (r < 0)
        config_free(cfg);
    return r;
}

int config_load_string(fawn_config *cfg, const char *yaml, size_t len) {
    return config_load_text(cfg, CONFIG_STRING_SOURCE, yaml, len);
}

int config_load_file(fawn_config *cfg, const char *path) {
    memset(cfg, 0, sizeof *cfg);
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int r = config_read_file(&text, &len, path);
    if (r < 0)
        return r;
    return config_load_text(cfg, path, text, len);
}

/* Resolves and loads the configuration file (see config_load). */
static int config_resolve(fawn_config *cfg, const char *explicit_path) {
    if (explicit_path)
        return config_load_file(cfg, explicit_path);
    const char *env = getenv("FAWN_CONFIG");
    if (env && *env)
        return config_load_file(cfg, env);
    int r = config_load_file(cfg, CONFIG_DEFAULT_PATH);
    return r == FAWN_ENOENT ? config_defaults(cfg) : r;
}

int config_load(fawn_config *cfg, const char *explicit_path) {
    int r = config_resolve(cfg, explicit_path);
    enum fawn_log_level level;
    if (r == 0 && cfg->log_level && fawn_log_parse_level(&level, cfg->log_level) == 0)
        fawn_log_set_level(level);
    return r;
}

void config_free(fawn_config *cfg) {
    free(cfg->home);
    free(cfg->log_level);
    free(cfg->server.host);
    free(cfg->store.postgres_dsn);
    free(cfg->cluster.gateway_id);
    free(cfg->sandbox.skills_dir);
    json_decref(cfg->authorization);
    json_decref(cfg->models);
    json_decref(cfg->subagents.custom);
    json_decref(cfg->web.allow);
    json_decref(cfg->web.search);
    json_decref(cfg->mcp);
    json_decref(cfg->broker);
    json_decref(cfg->channels);
    json_decref(cfg->server.trusted_proxies);
    json_decref(cfg->sandbox.remote);
    json_decref(cfg->sandbox.kubernetes);
    json_decref(cfg->sandbox.container);
    json_decref(cfg->sandbox.env_passthrough);
    json_decref(cfg->sandbox.egress.allow);
    json_decref(cfg->sandbox.egress.tls_ports);
    for (size_t i = 0; i < cfg->sandbox.n_env && i < CONFIG_MAX_ENV; i++) {
        free(cfg->sandbox.env[i].name);
        free(cfg->sandbox.env[i].value);
    }
    memset(cfg, 0, sizeof *cfg);
}
