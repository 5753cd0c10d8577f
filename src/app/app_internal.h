/* What the application core's files share (app.c, scheduler.c); no other
 * module includes this. */
#ifndef FAWN_APP_INTERNAL_H
#define FAWN_APP_INTERNAL_H

#include "agent/agent.h"
#include "app/app.h"
#include "research/research.h"

typedef struct app_scheduler app_scheduler;

struct app {
    const fawn_config *cfg;
    store *st;
    char gateway_id[CONFIG_GATEWAY_ID_MAX + 1]; /* cluster.gateway_id, or its default */
    authz_policy *policy;                       /* every authorization decision */
    model_registry *models;                     /* the configured models */
    agent_subagents *subagents;                 /* the sub-agent types runs may delegate to */
    web_service *web;                           /* the web tools' allow-list, limits and rate */
    mcp_service *mcp;                           /* MCP tool servers and their pinned tools */
    sbx_provider *provider;                     /* where sandboxes run */
    sbx_manager *sandboxes;                     /* the one way to a sandbox */
    struct broker *broker;                      /* the credential broker (broker.clis), or NULL */
    run_manager *runs;                          /* agent runs and their event logs */
    app_scheduler *scheduler; /* scheduled tasks (NULL: schedules.enabled is false) */
};

/* Starts the scheduler's thread over a's services (a is borrowed). */
FAWN_MUST_CHECK int app_scheduler_start(app_scheduler **out, app *a);
/* Stops the thread and waits for it (NULL is fine); later ticks do
 * nothing. Calling it again does nothing. */
void app_scheduler_stop(app_scheduler *sc);
/* app_scheduler_stop, then frees it (NULL is fine). */
void app_scheduler_free(app_scheduler *sc);

#endif
