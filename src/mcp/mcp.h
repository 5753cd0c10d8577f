/* mcp: the client of MCP tool servers (Model Context Protocol, revision
 * MCP_PROTOCOL_VERSION), with discovery that is explicit and pinned.
 *
 * Its rules, each with the function that holds it:
 *  - Every message from a server is untrusted: one JSON-RPC 2.0 message of
 *    at most MCP_MESSAGE_MAX bytes and MCP_JSON_DEPTH_MAX levels, whose id
 *    and shape are checked before anything reads it (mcp_msg_parse).
 *  - A server's tools are learnt only by an administrator's explicit act
 *    (mcp_discover), which stores each tool's name, description, input
 *    schema and their hash (mcp_tool_hash). Runs are offered the stored
 *    tools (mcp_tools_offered), never a live list.
 *  - Every call opens a session and reads tools/list first: a tool whose
 *    description or schema no longer hashes as stored is withheld (not
 *    called, flagged "drift" in the store, not offered again) until an
 *    administrator discovers again (mcp_call). A name that is not in the
 *    stored discovery is refused.
 *  - A server the role may not use (RBAC mcp_servers) is neither offered
 *    nor called (mcp_tools_offered, mcp_call).
 *  - A server that dies, hangs, or answers too much or nonsense is a tool
 *    error with its own status, bounded in time (tool_call_timeout_s,
 *    session_init_timeout_s) and size (MCP_MESSAGE_MAX, MCP_RESULT_TEXT_MAX);
 *    a cancelled or late call is told to the server (notifications/cancelled).
 *  - HTTP servers are reached from the gateway with their configured
 *    headers, never through the host's proxy settings, never following a
 *    redirect (mcp_http.c).
 *  - stdio servers never run in the gateway: each exchange starts one in
 *    the thread's sandbox with only its configured environment
 *    (mcp_stdio.c says why per thread); a run's cancel kills it at once.
 *  - sse (the old HTTP+SSE transport) sends its messages only to the
 *    endpoint its event stream names on the server's own origin
 *    (mcp_sse.c).
 *  - An OAuth token an HTTP server refuses with 401 is dropped and the
 *    call tried once more with a fresh one (mcp_call.c).
 *
 * Where servers are configured: mcp.servers in config.yaml, or the file
 * mcp.config_file names (DeerFlow's extensions_config.json shape, its
 * mcpServers key), or — once an administrator has saved one through the
 * API — $FAWN_HOME/mcp_servers.json, which then replaces both.
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_MCP_H
#define FAWN_MCP_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "authz/authz.h"
#include "store/store.h"
#include "tools/tools.h"
#include "base/base.h"

/* The protocol revision fawn speaks (initialize's protocolVersion and the
 * MCP-Protocol-Version header). */
#define MCP_PROTOCOL_VERSION "2025-06-18"
/* 4 MiB: one message of a server. A tools/list of a few hundred tools with
 * rich schemas is well under 1 MiB; a tool's answer is cut to far less
 * (MCP_RESULT_TEXT_MAX) before the model sees it. */
#define MCP_MESSAGE_MAX ((size_t)4 << 20)
/* 64 levels: JSON Schemas nest a dozen deep at most; more is an attack on
 * the recursive parser. */
#define MCP_JSON_DEPTH_MAX 64
/* Servers one configuration names, and tools one server may list. */
#define MCP_SERVERS_MAX 64
#define MCP_TOOLS_MAX 512
/* tools/list pages read at most (each answered with nextCursor). */
#define MCP_LIST_PAGES_MAX 16
/* A server's name: [A-Za-z0-9_-]{1,32}, so "<server>_<tool>" fits the
 * model's 64-character function names. */
#define MCP_SERVER_NAME_MAX 32
/* A tool's name as offered (prefix included): OpenAI's function-name
 * limit. */
#define MCP_TOOL_NAME_MAX 64
/* A tool's description kept: 8 KiB says what any tool does. */
#define MCP_DESCRIPTION_MAX 8192
/* Text of a result the model is told at most (then the run's output
 * budget saves the whole of it as for other tools). */
#define MCP_RESULT_TEXT_MAX ((size_t)256 << 10)
/* Defaults of a server's timeouts (DeerFlow's: 60 s a call, 30 s to start
 * a session), and their ceilings. */
#define MCP_CALL_TIMEOUT_DEFAULT_S 60
#define MCP_INIT_TIMEOUT_DEFAULT_S 30
#define MCP_TIMEOUT_MAX_S 3600
/* The headers one server may be given, and their text. */
#define MCP_HEADERS_MAX 32

/* ---- JSON-RPC messages (mcp_message.c) ---- */

enum mcp_msg_kind {
    MCP_MSG_REQUEST,      /* method and id */
    MCP_MSG_NOTIFICATION, /* method, no id */
    MCP_MSG_RESULT,       /* id and result (an object) */
    MCP_MSG_ERROR,        /* id and error {code, message} */
};

typedef struct mcp_msg {
    enum mcp_msg_kind kind;
    json_t *root;          /* the whole message (owned) */
    const json_t *id;      /* an integer or a string (borrowed from root), or NULL */
    const char *method;    /* requests and notifications */
    const json_t *params;  /* an object or an array, or NULL */
    const json_t *result;  /* results: an object */
    int64_t error_code;    /* errors */
    const char *error_msg; /* errors */
} mcp_msg;

/* Reads the len bytes of text as one JSON-RPC 2.0 message: an object with
 * "jsonrpc": "2.0" that is exactly one of a request (method, id), a
 * notification (method, no id), a result (id, result object) or an error
 * (id, error with an integer code and a string message). Ids are integers
 * or strings (never null, a fraction or a boolean); batches (arrays) are
 * refused, as MCP revision 2025-06-18 has none. FAWN_E2BIG past
 * MCP_MESSAGE_MAX or MCP_JSON_DEPTH_MAX; FAWN_EPROTO naming what is wrong
 * for anything else. Clear *out with mcp_msg_clear. */
FAWN_MUST_CHECK int mcp_msg_parse(mcp_msg *out, const char *text, size_t len);
void mcp_msg_clear(mcp_msg *m);
/* Whether m answers the request numbered id. */
bool mcp_msg_answers(const mcp_msg *m, int64_t id);
/* A request {"jsonrpc":"2.0","id":id,"method":method,"params"?} as text
 * (malloc'd), params borrowed and left out when NULL; NULL when out of
 * memory. */
char *mcp_request_text(int64_t id, const char *method, const json_t *params);
/* A notification (no id), likewise. */
char *mcp_notification_text(const char *method, const json_t *params);

/* The hash that pins a tool: sha256 (hex) of the compact, key-sorted JSON
 * {"description": description or "", "inputSchema": schema or {}}. Any
 * change of either changes it; key order and whitespace do not. FAWN_ENOMEM. */
FAWN_MUST_CHECK int mcp_tool_hash(char out[65], const char *description, const json_t *schema);

/* ---- the service ---- */

typedef struct mcp_service mcp_service;

/* Opens the service over the configuration's mcp section (a JSON object
 * {servers?, config_file?}, or NULL), the store (the pinned discoveries)
 * and home ($FAWN_HOME, where an administrator's saved configuration is
 * kept). FAWN_ECONFIG naming the key for a bad server. All borrowed. */
FAWN_MUST_CHECK int mcp_service_open(mcp_service **out, const json_t *section, store *st,
                                     const char *home);
void mcp_service_free(mcp_service *s);

/* The thread a stdio server's discovery runs in: each administrator's own
 * sandbox for it (no conversation has it). */
#define MCP_DISCOVERY_THREAD "mcp-discovery"

/* Runs initialize and tools/list on server name (a stdio server in env's
 * sandbox: FAWN_EUNSUP when env is NULL) and stores what it lists
 * as the server's pinned tools (replacing the earlier ones, clearing their
 * drift). *out is {server, tools: [{name, offered_as, description, hash}],
 * removed: [names no longer listed]} (new). FAWN_ENOENT for a server not
 * configured; transport and protocol errors as mcp_call says. */
FAWN_MUST_CHECK int mcp_discover(json_t **out, mcp_service *s, const char *name, tool_env *env);

/* The pinned tools of server name and their drift: {server, tools: [{name,
 * hash, drift: null | {seen_at_ms, description?, old_description?,
 * hash}}]} (new). FAWN_ENOENT for a server not configured. */
FAWN_MUST_CHECK int mcp_drift(json_t **out, mcp_service *s, const char *name);

/* The schemas ({"type":"function",...}) of the pinned tools role may use:
 * enabled servers policy lets role use (mcp_servers), tools not disabled
 * by an override, not drifted, and that RBAC `tools` allows by their
 * offered name. Appended to list. Store errors are logged: a run goes on
 * without them. */
void mcp_tools_offered(json_t *list, mcp_service *s, const authz_policy *policy, const char *role);

/* Whether name is an offered name (prefix included) of a pinned tool of a
 * configured server: what mcp_call answers. */
bool mcp_owns(mcp_service *s, const char *name);
/* The server of the pinned tool offered as name into server: 0, or
 * FAWN_ENOENT (server "") when name is no such tool (s may be NULL). */
FAWN_MUST_CHECK int mcp_tool_server(char server[MCP_SERVER_NAME_MAX + 1], mcp_service *s,
                                    const char *name);

/* Calls the tool offered as name with args for role (a stdio server's in
 * env's sandbox, the run's: per thread). Fills out always
 * (status included); returns 0, or FAWN_ENOMEM when even that failed.
 * Its status: denied (a server role may not use, or a tool not in the
 * stored discovery), drift (withheld: the server lists it differently
 * now), timeout, cancelled (cancel set), transport (the server could not
 * be reached, died, or broke the protocol), too_large, unsupported, or
 * tool_error (the server's isError). Text content is kept, images and
 * resources summarized by their type and size. out->facts holds
 * {"evidence": {server, tool, schema_hash}}. */
FAWN_MUST_CHECK int mcp_call(tool_result *out, mcp_service *s, const authz_policy *policy,
                             const char *role, const char *name, const json_t *args, tool_env *env,
                             const atomic_bool *cancel);

/* The configuration in force as DeerFlow's API answers it: {mcp_servers:
 * {name: {...}}} with env and header values and OAuth secrets replaced by
 * "***" (new). */
FAWN_MUST_CHECK int mcp_config_get(json_t **out, mcp_service *s);
/* Replaces every server (body {mcp_servers: {...}}): "***" keeps the value
 * the key had (FAWN_EINVAL when it had none). Validated as the config file
 * is, then saved to $FAWN_HOME/mcp_servers.json and in force at once. */
FAWN_MUST_CHECK int mcp_config_put(mcp_service *s, const json_t *body);
/* Enables or disables one server (body {server_name, enabled}), saved as
 * mcp_config_put saves. FAWN_ENOENT for a server not configured. */
FAWN_MUST_CHECK int mcp_config_patch(mcp_service *s, const json_t *body);
/* Drops what the service keeps in memory between calls (OAuth tokens);
 * pinned discoveries stay (only mcp_discover changes them). */
void mcp_cache_reset(mcp_service *s);

#endif
