/* app: the application core. It builds the services every front-end
 * shares — the authorization policy, the model registry, the sandbox
 * provider and its manager, the run executor — once, owns them, and says
 * in one place how a run is started on behalf of a user. The HTTP gateway
 * is one front-end of it; IM channels and the scheduler are others, and
 * they start runs through app_run_start exactly as the HTTP API does.
 *
 * Every out-parameter is set on every path, failures included (NULL, -1,
 * "" before anything can fail). */
#ifndef FAWN_APP_H
#define FAWN_APP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/runs.h"
#include "authz/authz.h"
#include "config/config.h"
#include "mcp/mcp.h"
#include "sandbox/manager.h"
#include "store/store.h"
#include "base/base.h"

typedef struct app app;

/* Builds the services from cfg over st: loads the authorization policy
 * and the models (FAWN_ECONFIG naming the key for a bad value), says how
 * the threads' disk limit is held, opens the configured sandbox provider and its
 * manager (which adopts or removes the sandboxes a previous process left
 * running) and starts the run executor's workers. cfg and st are borrowed
 * and must outlive the app. Close it with app_close. */
FAWN_MUST_CHECK int app_open(app **out, const fawn_config *cfg, store *st);

/* Stops the run executor: live runs end as interrupted, their followers
 * get their last events, and later app_run_start calls are refused.
 * Front-ends call it once they accept no new requests and before they wait
 * for the ones in progress. Calling it again does nothing. */
void app_stop(app *a);

/* app_stop, then frees every service (NULL is fine). */
void app_close(app *a);

/* The services, borrowed for the app's lifetime. */
const fawn_config *app_config(const app *a);
store *app_store(const app *a);
const authz_policy *app_policy(const app *a);
const model_registry *app_models(const app *a);
sbx_manager *app_sandboxes(const app *a);
const sbx_provider *app_provider(const app *a);
run_manager *app_runs(const app *a);
mcp_service *app_mcp(const app *a);
/* This gateway's id among those sharing the store (cluster.gateway_id, or
 * "<hostname>:<server.port>"). */
const char *app_gateway_id(const app *a);

/* A run to start on behalf of a user, on one of the user's threads. */
typedef struct app_run_spec {
    const char *thread_id;     /* an existing thread of the user */
    const char *model_name;    /* NULL: the first model */
    int recursion_limit;       /* 1..AGENT_RECURSION_MAX */
    const json_t *input;       /* stored-form human messages to add (copied) */
    const json_t *title;       /* the title (a string, or null) the input sets, or NULL (copied) */
    const char *checkpoint_id; /* the thread's checkpoint to start from; NULL or "": the newest */
    const char *kwargs;        /* JSON object text stored with the run */
    const char *metadata;      /* JSON object text, or NULL */
    bool interrupt;            /* cancel the thread's active run first, instead of refusing */
    bool no_clarification;     /* ask_clarification is neither offered nor run: nobody is
                                  there to answer (scheduled runs) */
} app_run_spec;

/* Starts a run on behalf of user: the model must be one the user's role
 * may use (FAWN_ENOENT when no model is configured, authz_check's error
 * when the role may not), the thread's files are made as its sandbox will
 * mount them, then the run is queued (runs_start: FAWN_EBUSY when the
 * thread is busy or a limit is reached). run_id gets the new run's id. */
FAWN_MUST_CHECK int app_run_start(char run_id[37], app *a, const store_user *user,
                                  const app_run_spec *spec);

/* ---- scheduled tasks (scheduler.c) ----
 * The scheduler: a thread that, every schedules.poll_interval_s or when
 * woken, claims the due occurrences of tasks in the store (store.h,
 * "scheduled tasks") and starts each as a run of its owner through
 * app_run_start, with the owner's role as it is then. A run is started
 * at most once per occurrence whatever dies when: see scheduler.c. */

/* What a manual trigger did. */
enum app_trigger {
    APP_TRIGGER_STARTED, /* the run is started (run_id) */
    APP_TRIGGER_ACTIVE,  /* the task's previous run is still active */
    APP_TRIGGER_FULL,    /* schedules.max_concurrent_runs runs are active */
};

/* Runs user's task task_id now (a trial run; a paused task stays
 * paused), as user, recording user as who triggered it, under the same
 * budget as scheduled runs. FAWN_ENOENT when user has no such task; a
 * run that could not start is recorded failed and its error returned
 * (FAWN_EPERM when the user's role may not run it). run_id gets the run
 * and thread_id its thread on APP_TRIGGER_STARTED. */
FAWN_MUST_CHECK int app_schedule_trigger(enum app_trigger *out, char run_id[37], char thread_id[65],
                                         app *a, const store_user *user, const char *task_id);

/* Tells the scheduler a task changed: it looks for due tasks now. */
void app_schedule_kick(app *a);

/* Opens the user-data directory of the user's thread (caller closes
 * *fd_out); with create, makes it first as a sandbox start would
 * (FAWN_ENOENT without create when the thread has no files yet). */
FAWN_MUST_CHECK int app_thread_files_open(int *fd_out, const app *a, int64_t user_id,
                                          const char *thread_id, bool create);

/* ---- uploads (app_uploads.c), for every front-end that stores files in a
 * thread (the HTTP upload route, the IM channels) ---- */

/* Opens (O_DIRECTORY, never through a symlink) the uploads directory of
 * the user's thread into *out (caller closes), making the thread's files
 * first with create; with room, tells how many bytes the thread's files
 * may still grow by (sandbox.limits.disk_mb). FAWN_ENOENT without create
 * when there is none; FAWN_EINVAL when it is not a directory. */
FAWN_MUST_CHECK int app_uploads_dir_open(int *out, uint64_t *room, const app *a, int64_t user_id,
                                         const char *thread_id, bool create);

/* Copies the files an upload just committed (upload_batch_commit's
 * "files" array; each file read from uploads_dirfd without following a
 * symlink) into the user's thread's sandbox, under an upload lease, when
 * the provider does not share the host's thread files. Nothing is copied
 * (0, *copied false) when it does, when there are no files, or when the
 * user's role does not hold sandbox:execute (no command of theirs runs in
 * a sandbox to read them). *copied is true when they were copied. Errors:
 * the acquisition's or the box's (FAWN_EIO). */
FAWN_MUST_CHECK int app_uploads_sync(bool *copied, app *a, const store_user *user,
                                     const char *thread_id, int uploads_dirfd, const json_t *files);

#endif
