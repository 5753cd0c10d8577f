/* The service's state, shared by mcp_service.c and mcp_call.c only. */
#ifndef FAWN_MCP_SERVICE_H
#define FAWN_MCP_SERVICE_H

#include <ctype.h>
#include <errno.h>
#include <pthread.h>

#include "mcp/mcp_internal.h"

struct mcp_service {
    pthread_mutex_t lock; /* cur, and one configuration writer at a time */
    mcp_servers *cur;     /* the configuration in force */
    store *st;
    const char *home;
    char *saved_path;           /* $FAWN_HOME/mcp_servers.json */
    pthread_mutex_t oauth_lock; /* tokens, and one token fetch at a time */
    json_t *tokens;             /* server -> {header, expires_at_ms} (mcp_oauth.c) */
};

/* The configuration in force, referenced (mcp_servers_unref it). */
mcp_servers *mcp_service_servers(mcp_service *s);
/* tools/list, every page, into *out (new array of the tools as listed). */
FAWN_MUST_CHECK int mcp_list_tools(json_t **out, mcp_session *ses, int64_t deadline_ms);
/* The name tool of srv is offered as ("" when it cannot be a function name). */
void mcp_offered_name(char out[MCP_TOOL_NAME_MAX + 1], const mcp_server *srv, const char *tool);

/* The Authorization header line of srv's OAuth ("Authorization: <type>
 * <token>") into *out (malloc'd; NULL when srv has none): the cached token
 * while it is not within refresh_skew_seconds of expiring, else one
 * fetched now. FAWN_EIO, FAWN_EPROTO, FAWN_ETIMEDOUT, FAWN_ECANCELED naming
 * the endpoint (never a secret). (mcp_oauth.c) */
FAWN_MUST_CHECK int mcp_oauth_header(char **out, mcp_service *s, const mcp_server *srv,
                                     const atomic_bool *cancel);
/* Drops the cached token of server (NULL: every one). */
void mcp_oauth_forget(mcp_service *s, const char *server);

#endif
