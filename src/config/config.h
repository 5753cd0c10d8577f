/* Configuration: config.yaml -> a typed, validated fawn_config.
 *
 * Values of the form "$NAME" are read from the environment (an unset variable
 * is an error naming both the key and the variable). Unknown keys, wrong
 * types and out-of-range values are errors naming the full key path
 * ("sandbox.limits.memory_mb"). Every key and its default is documented in
 * config.example.yaml. */
#ifndef FAWN_CONFIG_H
#define FAWN_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

enum fawn_network_mode { FAWN_NET_NONE, FAWN_NET_HOST, FAWN_NET_ALLOWLIST };
enum fawn_provider {
    FAWN_PROVIDER_LOCAL,
    FAWN_PROVIDER_REMOTE,
    FAWN_PROVIDER_CONTAINER,
    FAWN_PROVIDER_KUBERNETES,
};
enum fawn_store_backend { FAWN_STORE_SQLITE, FAWN_STORE_POSTGRES };

/* Most environment variables injected into a sandbox. */
#define CONFIG_MAX_ENV 64

typedef struct fawn_env_var {
    char *name;  /* ^[A-Za-z_][A-Za-z0-9_]*$ */
    char *value; /* already resolved from $VAR */
} fawn_env_var;

typedef struct fawn_sandbox_limits {
    uint64_t memory_mb;        /* cgroup memory limit per sandbox (default 1024) */
    uint64_t pids;             /* cgroup pids limit per sandbox (default 512) */
    uint64_t nproc;            /* RLIMIT_NPROC of every command (default 512) */
    uint64_t open_files;       /* RLIMIT_NOFILE (default 1024) */
    uint64_t file_size_mb;     /* RLIMIT_FSIZE: largest file a command can write (default 1024) */
    uint64_t address_space_mb; /* RLIMIT_AS when no memory cgroup can be used (default 4096;
                                  0 = none: something outside holds the memory) */
    uint64_t tmp_size_mb;      /* size of the sandbox's private /tmp tmpfs (default 256) */
    uint64_t disk_mb;          /* a thread's user-data: workspace, uploads and outputs together
                                  (default 10240; see src/sandbox/quota.h) */
} fawn_sandbox_limits;

/* sandbox.egress: what network allowlist lets commands reach, through the
 * gateway's egress proxy (src/sandbox/egress.h). */
typedef struct fawn_egress_config {
    json_t *allow;              /* sandbox.egress.allow: entries as net_allowlist_parse reads them
                                   (JSON array of strings), or NULL (nothing is reachable) */
    json_t *tls_ports;          /* sandbox.egress.tls_ports: ports whose tunnels must open with a
                                   TLS ClientHello naming the host (JSON array), or NULL: 443 */
    uint32_t max_connections;   /* sandbox.egress.max_connections: one sandbox's at once (32) */
    uint32_t idle_timeout_s;    /* sandbox.egress.idle_timeout_s: a connection with no byte
                                   either way is closed after this (120) */
    uint64_t max_connection_mb; /* sandbox.egress.max_connection_mb: bytes one connection carries,
                                   both ways together (4096) */
} fawn_egress_config;

typedef struct fawn_sandbox_config {
    enum fawn_network_mode network;   /* sandbox.network: none | host | allowlist (default none) */
    fawn_egress_config egress;        /* sandbox.egress.* (network allowlist) */
    char *skills_dir;                 /* sandbox.skills_dir (default "$home/skills") */
    fawn_env_var env[CONFIG_MAX_ENV]; /* sandbox.environment (NAME: value), then the host's
                                         values of sandbox.env_passthrough's names */
    size_t n_env;
    json_t *env_passthrough;        /* sandbox.env_passthrough: host variable names (JSON
                                       array), already folded into env */
    fawn_sandbox_limits limits;     /* sandbox.limits.* */
    uint32_t exec_timeout_s;        /* sandbox.exec_timeout_s: default command timeout (600) */
    uint32_t exec_max_timeout_s;    /* sandbox.exec_max_timeout_s: cap on client timeouts (3600) */
    uint64_t exec_max_output_bytes; /* sandbox.exec_max_output_bytes: per stream (1048576) */
    uint32_t max_sessions;          /* sandbox.max_sessions: shell sessions per box (16) */
    uint32_t
        idle_timeout_s; /* sandbox.idle_timeout_s: a parked sandbox stops after (600; 0 never) */
    uint32_t replicas;  /* sandbox.replicas: running sandboxes kept by evicting idle ones (32; 0 no
                           cap) */
    enum fawn_provider provider; /* sandbox.provider: local | remote | container (local) */
    json_t *remote;              /* sandbox.remote: the remote provider's commands (JSON
                                    tree, see src/sandbox/remote.h), or NULL */
    json_t *kubernetes;          /* sandbox.kubernetes: the Kubernetes provider's settings
                                    (JSON tree, see src/sandbox/kubernetes.h), or NULL */
    json_t *container;           /* sandbox.container: the container provider's engine and
                                    image (JSON tree, see src/sandbox/container.h), or NULL */
} fawn_sandbox_config;

typedef struct fawn_server_config {
    char *host;               /* server.host: IPv4 address to listen on (default 127.0.0.1) */
    uint32_t port;            /* server.port (default 8001) */
    uint32_t threads;         /* server.threads: request threads (default 4) */
    uint32_t max_connections; /* server.max_connections: open at once (1024) */
    uint32_t max_connections_per_address; /* server.max_connections_per_address: of them,
                                             from one client address (64; trusted proxies
                                             are exempt) */
    uint32_t request_head_timeout_s;      /* server.request_head_timeout_s: a connection
                                             sends its request head within this (30) */
    json_t *trusted_proxies; /* server.trusted_proxies: addresses whose X-Forwarded-For is
                                believed (JSON array of strings), or NULL */
} fawn_server_config;

typedef struct fawn_auth_config {
    bool disabled;             /* auth.disabled: everyone is the local admin (default false;
                                  refused when FAWN_ENV=production) */
    bool registration_enabled; /* auth.registration_enabled: POST /api/v1/auth/register (false) */
    uint32_t session_ttl_s;    /* auth.session_ttl_s: session lifetime (604800 = 7 days) */
    bool cookie_secure;        /* auth.cookie_secure: mark cookies Secure (behind TLS) (false) */
} fawn_auth_config;

typedef struct fawn_uploads_config {
    uint32_t max_files;         /* uploads.max_files per request (10) */
    uint64_t max_file_size_mb;  /* uploads.max_file_size_mb (50) */
    uint64_t max_total_size_mb; /* uploads.max_total_size_mb per request (100) */
} fawn_uploads_config;

typedef struct fawn_runs_config {
    uint32_t workers;              /* runs.workers: runs executing at once (8) */
    uint32_t queue_max;            /* runs.queue_max: runs waiting for a worker, all users (256) */
    uint32_t per_user_active_max;  /* runs.per_user_active_max: one user's runs waiting or
                                      running (32) */
    uint32_t per_user_running_max; /* runs.per_user_running_max: workers one user holds at once
                                      (half of runs.workers, at least 1) */
} fawn_runs_config;

typedef struct fawn_memory_config {
    bool enabled;                  /* memory.enabled: facts are read from each finished turn by
                                      one more model call (false) */
    bool injection_enabled;        /* memory.injection_enabled: runs give the model the user's
                                      facts (true; only while memory.enabled) */
    uint32_t max_facts;            /* memory.max_facts: facts kept per user (100) */
    uint32_t max_injection_tokens; /* memory.max_injection_tokens: budget of the facts given
                                      to the model (2000) */
} fawn_memory_config;

typedef struct fawn_subagents_config {
    bool enabled;            /* subagents.enabled: the lead agent may delegate with `task` (true) */
    uint32_t max_concurrent; /* subagents.max_concurrent: sub-agents one model reply starts (3) */
    uint32_t max_per_run;    /* subagents.max_per_run: sub-agents one run starts in all (6) */
    uint32_t timeout_s;      /* subagents.timeout_s: a sub-agent's time, unless its type sets
                                one (1800) */
    /* subagents.custom: the custom types as JSON (an array of objects, as
     * authorization), or NULL; src/agent validates it. */
    json_t *custom;
} fawn_subagents_config;
typedef struct fawn_compaction_config {
    bool enabled;                  /* compaction.enabled: a run whose context passes the share
                                      below of its model's context_window has its older turns
                                      summarized (true; models without context_window never) */
    double trigger_ratio;          /* compaction.trigger_ratio: that share, 0 < r <= 1 (0.8) */
    uint32_t keep_recent_messages; /* compaction.keep_recent_messages: newest messages always
                                      sent whole (10) */
} fawn_compaction_config;

typedef struct fawn_web_config {
    bool fetch_enabled;       /* web.fetch_enabled: the web_fetch tool is offered (true) */
    uint32_t fetch_timeout_s; /* web.fetch_timeout_s: one fetch, redirects included (20) */
    uint64_t fetch_max_kb;    /* web.fetch_max_kb: body bytes of a page kept (2048) */
    uint32_t rate_per_minute; /* web.rate_limit_per_minute: web tool calls of one user (30) */
    json_t *allow;            /* web.allow: internal hosts and ranges the web tools may reach
                                 (JSON array of strings, see src/research), or NULL */
    /* web.search: the search backend as JSON (an object), or NULL: no
     * web_search; src/research validates it. */
    json_t *search;
} fawn_web_config;

typedef struct fawn_schedules_config {
    bool enabled;                 /* schedules.enabled: the scheduler runs due tasks (true; a
                                     manual trigger works either way) */
    uint32_t max_concurrent_runs; /* schedules.max_concurrent_runs: scheduled-task runs active
                                     at once, all users, triggers included (3) */
    uint32_t poll_interval_s;     /* schedules.poll_interval_s: the scheduler looks for due
                                     tasks at least this often (5) */
} fawn_schedules_config;

typedef struct fawn_store_config {
    enum fawn_store_backend backend; /* store.backend: sqlite | postgres (sqlite: $home/fawn.db) */
    char *postgres_dsn; /* store.postgres.dsn: a libpq connection string or URI ($VAR like
                           any value: it may hold a password); required for postgres */
} fawn_store_config;

/* Several gateways on one PostgreSQL store (docs/cluster.md). */
#define CONFIG_GATEWAY_ID_MAX 64
typedef struct fawn_cluster_config {
    char *gateway_id;      /* cluster.gateway_id: this gateway's name among those sharing the
                              store, 1..64 of [A-Za-z0-9._:-]; NULL: "<hostname>:<port>" */
    uint32_t heartbeat_ms; /* cluster.heartbeat_ms: how often it renews its leases (2000) */
    uint32_t lease_ms;     /* cluster.lease_ms: a gateway silent this long is taken for dead:
                              its runs are ended and its sandboxes may be taken (10000; at
                              least 3 heartbeats) */
} fawn_cluster_config;

typedef struct fawn_config {
    char *home;      /* home: state directory (default $FAWN_HOME or ./.fawn) */
    char *log_level; /* log_level: debug|info|warn|error (default info) */
    fawn_server_config server;
    fawn_sandbox_config sandbox;
    fawn_auth_config auth;
    fawn_uploads_config uploads;
    fawn_runs_config runs;
    fawn_memory_config memory;
    fawn_subagents_config subagents;
    fawn_compaction_config compaction;
    fawn_web_config web;
    fawn_schedules_config schedules;
    fawn_store_config store;
    fawn_cluster_config cluster;
    /* authorization: the section as JSON (mappings -> objects, sequences ->
     * arrays, plain true/false -> booleans, plain null -> null, other
     * scalars -> strings), or NULL when absent; src/authz validates it. */
    json_t *authorization;
    /* models: the model list as JSON (an array of objects, as above), or
     * NULL when absent; src/agent validates it. */
    json_t *models;
    /* mcp: the MCP section as JSON ({servers?, config_file?}), or NULL
     * when absent; src/mcp validates it. */
    json_t *mcp;
    /* broker: the credential broker section as JSON ({clis, max_concurrent,
     * max_concurrent_per_sandbox}), or NULL when absent; src/broker
     * validates it. */
    json_t *broker;
    /* channels: the IM channels section as JSON (an object), or NULL when
     * absent; src/channels validates the shared keys and each adapter its
     * own channels.<platform> object (`$VAR` values already resolved). */
    json_t *channels;
} fawn_config;

/* Fills *cfg with every default (home from $FAWN_HOME or "./.fawn").
 * Caller releases with config_free. */
FAWN_MUST_CHECK int config_defaults(fawn_config *cfg);

/* Loads the YAML file at path over the defaults. A missing file is
 * FAWN_ENOENT; any invalid content is FAWN_ECONFIG with a message naming the
 * key (and line). On error *cfg is left freed and zeroed. */
FAWN_MUST_CHECK int config_load_file(fawn_config *cfg, const char *path);

/* Same as config_load_file, from a YAML text in memory (for tests). */
FAWN_MUST_CHECK int config_load_string(fawn_config *cfg, const char *yaml, size_t len);

/* Resolves which file to load: explicit path, else $FAWN_CONFIG, else
 * ./config.yaml if it exists, else none (defaults only). What the commands
 * call: it also sets the process's log level to log_level. */
FAWN_MUST_CHECK int config_load(fawn_config *cfg, const char *explicit_path);

/* Releases everything config_* allocated and zeroes *cfg. */
void config_free(fawn_config *cfg);

#endif
