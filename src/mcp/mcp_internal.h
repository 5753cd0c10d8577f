/* The MCP client's insides; only src/mcp includes this.
 *   mcp_config.c   servers as configured: validated, $VAR resolved, redacted
 *   mcp_http.c     one session over streamable HTTP (initialize, requests,
 *                  notifications/cancelled, DELETE at the end), or over
 *   mcp_sse.c      the old HTTP+SSE transport (an event stream held open,
 *                  messages POSTed to the endpoint it names)
 *   mcp_stdio.c    stdio servers, one box command an exchange, in the thread's sandbox
 *   mcp_oauth.c    OAuth tokens of HTTP servers
 *   mcp_service.c  the configuration in force, discovery, drift, the config routes
 *   mcp_call.c     the offered tools, calls, results */
#ifndef FAWN_MCP_INTERNAL_H
#define FAWN_MCP_INTERNAL_H

#include <curl/curl.h>
#include <stdatomic.h>

#include "mcp/mcp.h"

enum mcp_transport { MCP_STDIO, MCP_SSE, MCP_HTTP };
enum mcp_grant { MCP_GRANT_CLIENT_CREDENTIALS, MCP_GRANT_REFRESH_TOKEN };

/* A server's OAuth (DeerFlow's McpOAuthConfig): texts $VAR resolved. */
typedef struct mcp_oauth {
    enum mcp_grant grant;
    char *token_url, *client_id, *client_secret, *refresh_token, *scope, *audience;
    char *token_field, *token_type_field, *expires_in_field, *default_token_type;
    uint32_t refresh_skew_s;
    json_t *extra;           /* extra_token_params: {name: text}; never over the grant's own */
    char refresh_sha256[65]; /* of the configured refresh token ("" without one) */
} mcp_oauth;

typedef struct mcp_server {
    char name[MCP_SERVER_NAME_MAX + 1];
    bool enabled;
    enum mcp_transport type;
    char *url;                            /* http: the endpoint ($VAR resolved) */
    char *headers[MCP_HEADERS_MAX + 1];   /* "Name: value" ($VAR resolved), NULL-ended */
    char prefix[MCP_SERVER_NAME_MAX + 2]; /* "" or "<name>_" (or a configured text) */
    json_t *overrides;                    /* tools: name -> {description?, enabled?} */
    uint32_t call_timeout_s, init_timeout_s;
    mcp_oauth *oauth; /* NULL: none (or oauth.enabled false) */
    /* stdio: the command, its arguments and its whole environment
     * ("NAME=value", $VAR resolved), each list NULL-ended (malloc'd) */
    char *command;
    char **args;
    char **env;
} mcp_server;

/* A configuration in force: immutable once built, shared by the calls
 * that took it (refs) while a PUT may replace it. */
typedef struct mcp_servers {
    atomic_uint refs;
    json_t *raw; /* {name: server config as given, $VAR unresolved} */
    mcp_server *list;
    size_t n;
} mcp_servers;

/* Validates raw ({name: server}) and builds a configuration of it (refs
 * 1). source names the place in messages ("mcp.servers"). FAWN_ECONFIG
 * naming the key. raw is copied. */
FAWN_MUST_CHECK int mcp_servers_build(mcp_servers **out, const json_t *raw, const char *source);
void mcp_servers_unref(mcp_servers *s);
const mcp_server *mcp_servers_find(const mcp_servers *s, const char *name);
/* raw with every env and header value "***" and OAuth secrets null (new). */
json_t *mcp_servers_redacted(const json_t *raw);
/* incoming's servers with each "***" replaced by what raw had at its place
 * (new); FAWN_EINVAL naming the key when raw had nothing there, or for a
 * "$VAR" value raw did not have at the same place. */
FAWN_MUST_CHECK int mcp_servers_unmask(json_t **out, const json_t *incoming, const json_t *raw);

/* Reads a server's oauth entry into *out (NULL when absent or disabled).
 * FAWN_ECONFIG naming the key. (mcp_config.c) */
FAWN_MUST_CHECK int mcp_oauth_read(mcp_oauth **out, const json_t *v, const char *where);
void mcp_oauth_free(mcp_oauth *o);

/* 16 MiB: what one POST's answer (streamable HTTP), or one session's
 * event stream (sse), may bring in all, progress notifications of a long
 * call included; a message itself is at most MCP_MESSAGE_MAX. */
#define MCP_STREAM_MAX ((size_t)16 << 20)

typedef struct mcp_sse_conn mcp_sse_conn;

/* One session with a server (mcp_http.c). */
typedef struct mcp_session {
    const mcp_server *srv;
    const char *authorization; /* "Authorization: <type> <token>" from OAuth, or NULL */
    const atomic_bool *cancel;
    char session_id[256]; /* Mcp-Session-Id the server gave, or "" */
    int64_t next_id;
    bool open;
    long refused;      /* 401 or 403: the HTTP status that refused the credentials, else 0 */
    mcp_sse_conn *sse; /* type sse: the event stream (mcp_sse.c) */
} mcp_session;

/* Opens a session: (sse: the event stream and its endpoint, then)
 * initialize, then notifications/initialized, within the server's init
 * timeout. FAWN_EUNSUP for stdio (mcp_stdio.c runs those);
 * FAWN_ETIMEDOUT, FAWN_ECANCELED, FAWN_EIO (unreachable, an HTTP error),
 * FAWN_EPROTO (a message that is not a valid answer), FAWN_E2BIG. */
FAWN_MUST_CHECK int mcp_session_open(mcp_session *s, const mcp_server *srv,
                                     const char *authorization, const atomic_bool *cancel);
/* Sends a request and reads its answer (a result or an error) into *out,
 * until deadline_ms (fawn_now_ms's clock). A request that times out or is
 * cancelled is told to the server with notifications/cancelled. Errors as
 * mcp_session_open. */
FAWN_MUST_CHECK int mcp_session_request(mcp_msg *out, mcp_session *s, const char *method,
                                        const json_t *params, int64_t deadline_ms);
/* Ends the session (DELETE with its id, best effort; sse: the stream is
 * closed). Call it after mcp_session_open whatever that returned. */
void mcp_session_close(mcp_session *s);

/* The options every request to an MCP server has (mcp_http.c): no
 * redirect, no proxy, no .netrc, http and https only. */
void mcp_curl_defaults(CURL *c);
/* A request's headers: the server's configured ones, the OAuth
 * Authorization, the protocol's; Content-Type for a post; accept (NULL:
 * "Accept: application/json, text/event-stream"). NULL when out of memory. */
struct curl_slist *mcp_curl_headers(const mcp_session *s, bool post, const char *accept);

/* ---- the old HTTP+SSE transport (mcp_sse.c) ---- */

/* The URL an endpoint event's data (len bytes) names, resolved against
 * base (the server's URL) into *out (malloc'd): FAWN_EPROTO when it is not
 * a URL, is longer than MCP_SSE_ENDPOINT_MAX, carries credentials, or is
 * of another origin (scheme, host, port) than base. */
FAWN_MUST_CHECK int mcp_sse_endpoint(char **out, const char *base, const char *data, size_t len);
/* GETs s->srv->url as an event stream (s->sse) and reads it until its
 * endpoint event, until deadline_ms. Errors as mcp_session_open. */
FAWN_MUST_CHECK int mcp_sse_connect(mcp_session *s, int64_t deadline_ms);
/* POSTs text to the endpoint and, when want_id is not 0, reads the stream
 * until the message answering it (into *answer), until deadline_ms. */
FAWN_MUST_CHECK int mcp_sse_exchange(mcp_msg *answer, mcp_session *s, const char *text,
                                     int64_t want_id, int64_t deadline_ms);
/* Closes the stream and frees s->sse (NULL is fine). */
void mcp_sse_close(mcp_session *s);

/* ---- stdio (mcp_stdio.c) ----
 * A stdio server runs in the thread's sandbox (env's, per thread), never in
 * the gateway: each exchange is one box command that starts it with only
 * its configured environment, writes it the messages (one a line), closes
 * its input and reads what it wrote until it exits (or its timeout). A
 * run's exchange runs in a shell session of its own, killed as soon as
 * env->cancel is set (FAWN_ECANCELED). */

/* Runs srv with the n messages (texts, one JSON message each) as its
 * input; the messages it answered with into *out (a new array of their
 * texts' parses, in order). FAWN_EUNSUP without a sandbox (env NULL),
 * FAWN_ECANCELED (env->cancel set: the server was killed),
 * FAWN_ETIMEDOUT, FAWN_E2BIG (too long an input or output), FAWN_EPROTO
 * (a line that is not a JSON-RPC message), sandbox errors. */
FAWN_MUST_CHECK int mcp_stdio_run(json_t **out, tool_env *env, const mcp_server *srv,
                                  char *const *messages, size_t n, uint32_t timeout_s);
/* One tools/list request with params (NULL, or {"cursor"}): its answer
 * into *m (cleared by the caller whatever the result). */
typedef int (*mcp_list_page_fn)(mcp_msg *m, void *ctx, json_t *params);

/* Every page of server's tools/list, each asked through page: *out the
 * tools in order (a new array). At most MCP_LIST_PAGES_MAX pages and
 * MCP_TOOLS_MAX tools (FAWN_E2BIG); an answer that is an error or holds no
 * tools list is FAWN_EPROTO naming server. */
FAWN_MUST_CHECK int mcp_tools_collect(json_t **out, const char *server, mcp_list_page_fn page,
                                      void *ctx);
/* tools/list (every page) of srv run in env's sandbox, into *out (new). */
FAWN_MUST_CHECK int mcp_stdio_list(json_t **out, tool_env *env, const mcp_server *srv);
/* tools/call of tool with args on srv run in env's sandbox: its answer
 * into *out (a result or an error). */
FAWN_MUST_CHECK int mcp_stdio_call(mcp_msg *out, tool_env *env, const mcp_server *srv,
                                   const char *tool, const json_t *args);
/* The answer to request id among msgs (from mcp_stdio_run) into *out;
 * FAWN_EPROTO naming the server when there is none. */
FAWN_MUST_CHECK int mcp_stdio_answer(mcp_msg *out, const json_t *msgs, int64_t id,
                                     const mcp_server *srv);

#endif
