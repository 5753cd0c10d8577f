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
    char *saved_path; /* $FAWN_HOME/mcp_servers.json */
};

/* The configuration in force, referenced (mcp_servers_unref it). */
mcp_servers *mcp_service_servers(mcp_service *s);
/* tools/list, every page, into *out (new array of the tools as listed). */
FAWN_MUST_CHECK int mcp_list_tools(json_t **out, mcp_session *ses, int64_t deadline_ms);
/* The name tool of srv is offered as ("" when it cannot be a function name). */
void mcp_offered_name(char out[MCP_TOOL_NAME_MAX + 1], const mcp_server *srv, const char *tool);

#endif
