/* tools: what an agent's model may call. Every tool runs in the thread's
 * sandbox through the sandbox manager (its lease is taken on first use), and
 * reports a structured status of its own making: recovery decisions read
 * that status, never the text.
 *
 * Names, parameters and limits follow DeerFlow's tools: bash, ls, glob,
 * grep, read_file, write_file, str_replace, present_files,
 * ask_clarification; and web_search and web_fetch, which the gateway runs
 * itself (never with a sandbox's network) through the research service.
 *
 * Every out-parameter is set on every path, failures included (NULL, 0, a
 * zeroed result before anything can fail); tool_fail alone writes into a
 * result the caller has already set. */
#ifndef FAWN_TOOLS_H
#define FAWN_TOOLS_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "research/research.h"
#include "sandbox/manager.h"
#include "base/base.h"

/* Output limits (characters of text returned to the model). */
#define TOOL_BASH_OUTPUT_MAX 20000 /* middle-truncated */
#define TOOL_READ_OUTPUT_MAX 50000
#define TOOL_WRITE_MAX (80 * 1024) /* bytes write_file accepts */
#define TOOL_GLOB_DEFAULT 200
#define TOOL_GLOB_MAX 1000
#define TOOL_GREP_DEFAULT 100
#define TOOL_GREP_MAX 500
/* How long past a command's own timeout its reply may take: the box kills
 * the command's processes, then answers. */
#define TOOL_BASH_REPLY_MARGIN_S 30

enum tool_outcome {
    TOOL_SUCCESS,
    TOOL_ERROR,
    TOOL_TIMEOUT,
    TOOL_DENIED,
    TOOL_CANCELLED,
};

/* What a tool says of its own run. error_type is a short word ("" on
 * success): invalid_arguments, not_found, permission, exit_code, timeout,
 * sandbox, denied, cancelled, blocked, internal, unknown_tool; an MCP
 * tool's (src/mcp): tool_error, drift, auth, too_large, transport,
 * unsupported. */
typedef struct tool_status {
    enum tool_outcome outcome;
    char error_type[32];
    int exit_code;          /* bash: the command's code; -1 when none */
    int64_t retry_after_ms; /* rate_limited: when a call may succeed again; 0 when unknown */
    bool recoverable;       /* the model can fix it by calling differently */
    int64_t duration_ms;
    bool truncated; /* the text is shortened */
} tool_status;

typedef struct tool_result {
    char *text; /* exactly what the model is told (malloc'd) */
    tool_status status;
    /* Facts other parts of the run rely on, or NULL: read_file of a whole
     * file {"read": path, "sha256"}; write_file/str_replace {"written": path,
     * "sha256" of the whole new content (absent for appends)};
     * present_files {"presented": [paths]}; the agent's task tool
     * {"subagent": {...}}, what its message's additional_kwargs carry;
     * web_fetch and web_search {"evidence": {...}}, what the call's receipt
     * keeps (the URLs asked and reached, the content's hash); an MCP tool
     * {"evidence": {server, tool, schema_hash}}. */
    json_t *facts;
} tool_result;

/* "success", "error", "timeout", "denied", "cancelled". */
const char *tool_outcome_name(enum tool_outcome o);
/* The status as a JSON object {status, error_type, exit_code, recoverable,
 * duration_ms, truncated, and retry_after_ms when known} (new reference). */
json_t *tool_status_json(const tool_status *st);
/* Frees r->text and r->facts and zeroes r. */
void tool_result_clear(tool_result *r);
/* Sets r to a failed result with text printed from fmt (ownership of the
 * text goes to r). Returns 0 so tools can `return tool_fail(...)`. */
FAWN_MUST_CHECK int tool_fail(tool_result *r, enum tool_outcome o, const char *error_type,
                              bool recoverable, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));

/* Where tools run: one per agent run. The lease is taken on first use and
 * kept until tool_env_end. */
typedef struct tool_env {
    sbx_manager *sandboxes;
    sbx_request req;  /* who, thread, scope, decision, cancel: the caller fills it */
    sbx_lease *lease; /* NULL until a tool needs the sandbox */
    const atomic_bool *cancel;
    uint32_t command_timeout_s; /* a bash command's timeout (sandbox.exec_timeout_s) */
    web_service *web;           /* the web tools' service (NULL: no web tools) */
    /* Called once, right after the lease is first taken (the delivery
     * check snapshots outputs then); may be NULL. */
    void (*on_acquire)(void *ctx, struct tool_env *env);
    void *on_acquire_ctx;
} tool_env;

/* The sandbox lease, taken now if needed. FAWN_EPERM when the role may not
 * use a sandbox; other codes when none could be had. */
FAWN_MUST_CHECK int tool_env_lease(sbx_lease **out, tool_env *env);
/* Releases the lease, if any. */
void tool_env_end(tool_env *env);

/* A box API call on the run's sandbox: reply is the JSON answer (caller
 * decrefs), status its HTTP status. Lease failures are returned as is. */
FAWN_MUST_CHECK int tool_box_call(json_t **reply, int *status, tool_env *env, const char *method,
                                  const char *path, const json_t *body, int timeout_ms);

typedef struct tool_def {
    const char *name;
    const char *description;
    const char *parameters; /* JSON Schema of the arguments, as text */
    bool sandbox;           /* it works in the sandbox: each call needs sandbox:execute */
    /* Its text comes from outside (a web page, a search engine): the agent
     * neutralizes it before the model reads it. */
    bool remote_content;
    /* Whether it is offered with this service (NULL: always). */
    bool (*offered)(const web_service *web);
    /* Runs the tool with args (a JSON object). Always fills out (status
     * included); returns 0, or FAWN_ENOMEM when even that failed. */
    int (*run)(tool_result *out, tool_env *env, const json_t *args);
} tool_def;

/* The built-in tools, in the order they are offered. */
size_t tool_count(void);
const tool_def *tool_at(size_t i);
/* The tool named name, or NULL. */
const tool_def *tool_find(const char *name);
/* Whether t is offered where web is the web tools' service (may be NULL). */
bool tool_offered(const tool_def *t, const web_service *web);
/* {"type":"function","function":{"name","description","parameters"}} for t
 * (new reference; NULL when out of memory). */
json_t *tool_openai_schema(const tool_def *t);

/* Runs tool name with args, timing it: unknown tools and arguments that
 * are not an object become recoverable errors. */
FAWN_MUST_CHECK int tool_run(tool_result *out, tool_env *env, const char *name, const json_t *args);

/* Sets r to success with text (taken; NULL means out of memory). */
FAWN_MUST_CHECK int tool_succeed(tool_result *r, char *text);

/* Middle truncation: keeps the first and last parts of text so the result
 * is at most max characters plus a marker naming what was left out.
 * Returns a new string; *truncated says whether anything was cut. */
char *tool_truncate_middle(const char *text, size_t max, bool *truncated);

#endif
