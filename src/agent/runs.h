/* runs: the run executor and the event log.
 *
 * - Executor: a bounded pool of workers; one run is one worker at a time,
 *   given by run_queue.h's policy (fair turns across users, per-user caps).
 *   A thread has at most one active run: another is refused (reject) or
 *   replaces it after cancelling it (interrupt).
 * - Event log: every run's events in order, with ids 1, 2, ...; kept in
 *   memory while the run is live (the latest RUN_EVENTS_RETAINED) and
 *   written to the store as the run goes (at every checkpoint, and at the
 *   end), so a reader that comes late, or after a restart, reads them
 *   there. Readers never hold a thread: they ask for what is new and, when
 *   nothing is, register a wake-up and return.
 *
 * Every out-parameter is set on every path, failures included (NULL, 0,
 * false, "" before anything can fail). */
#ifndef FAWN_RUNS_H
#define FAWN_RUNS_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "agent/agent.h"
#include "base/base.h"

/* Events of one run kept for readers (in memory and in the store); a
 * reader that asks for an older one gets a gap. */
#define RUN_EVENTS_RETAINED 4096
/* Idle readers get a heartbeat this often. */
#define RUNS_HEARTBEAT_MS 15000
/* How often what another gateway does is looked for in the store: cancel
 * requests for this gateway's runs, and new events of runs followed here
 * but run elsewhere (a follower's wait, a cancel's wait). 100 ms adds at
 * most that to a cross-gateway cancel or stream, for one indexed query a
 * tick while a run is live (none when nothing is). */
#define RUNS_STORE_POLL_MS 100
/* Events one fetch returns at most (callers may ask for fewer). */
#define RUN_FETCH_MAX 256

typedef struct run_manager run_manager;
typedef struct run_log run_log;

/* The executor's sizes (the configuration's runs.*; each at least 1), and
 * what its runs' commands may take. How waiting runs are admitted and
 * ordered is run_queue.h's. */
typedef struct runs_limits {
    uint32_t workers;              /* runs executing at once */
    uint32_t queue_max;            /* runs waiting for a worker, all users together */
    uint32_t per_user_active_max;  /* one user's runs waiting or running */
    uint32_t per_user_running_max; /* workers one user holds at once */
    uint32_t command_timeout_s;    /* a tool's command (sandbox.exec_timeout_s) */
    /* memory.* (borrowed; NULL: off): a run that ends in success has its
     * turn read for facts by agent_memory_extract, on its worker, after
     * its stream has ended and its thread is free. */
    const fawn_memory_config *memory;
    const char *skills_dir;           /* the skills runs offer (borrowed; NULL: none) */
    const char *home;                 /* $FAWN_HOME, where users' own skills are (borrowed) */
    const agent_subagents *subagents; /* what runs may delegate to (borrowed; NULL: nothing) */
    web_service *web;                 /* the web tools' service (borrowed; NULL: none) */
    mcp_service *mcp;                 /* the MCP tool servers (borrowed; NULL: none) */
    const fawn_compaction_config *compaction; /* compaction.* (borrowed; NULL: off) */
    /* Several gateways on one store (cluster.*): this gateway's id (copied;
     * NULL: "local"), how often it renews its lease and how long a silent
     * gateway keeps its runs (0: 2000 and 10000 ms). */
    const char *gateway_id;
    uint32_t heartbeat_ms, lease_ms;
} runs_limits;

/* Registers this gateway in the store, ends the runs a previous process
 * of the same gateway id left unfinished (other gateways' runs are left
 * alone), and starts limits->workers workers and the gateway's heartbeat
 * (run_cluster.c). Everything passed is borrowed and must outlive the
 * manager, except limits (copied). FAWN_EINVAL for a limit of 0. */
FAWN_MUST_CHECK int runs_new(run_manager **out, store *st, sbx_manager *sandboxes,
                             const model_registry *models, const authz_policy *policy,
                             const runs_limits *limits);
/* Cancels every run, waits for the workers and ends every log (waking
 * every reader); later runs_start calls are refused. The manager stays
 * valid for runs_free. Readers' log references stay valid until they close
 * them. Calling it again does nothing. */
void runs_stop(run_manager *m);
/* runs_stop, then frees the manager (NULL is fine). */
void runs_free(run_manager *m);

typedef struct run_request {
    int64_t owner_id;
    const char *user_dir; /* owner directory name */
    const char *role;
    const char *thread_id;
    const char *model_name;    /* NULL: the first model */
    int recursion_limit;       /* 1..AGENT_RECURSION_MAX */
    const json_t *input;       /* stored-form human messages to add (copied) */
    const json_t *title;       /* the title (a string, or null) the input sets, or NULL (copied) */
    const char *checkpoint_id; /* the thread's checkpoint to start from; NULL or "": the newest */
    const char *kwargs;        /* JSON object text stored with the run */
    const char *metadata;      /* JSON object text, or NULL */
    bool interrupt;            /* multitask_strategy interrupt: cancel the active run first */
    bool no_clarification;     /* the run never offers or runs ask_clarification */
} run_request;

/* Records a pending run, marks the thread busy and queues the run; its
 * first event, metadata {run_id, thread_id}, is already in its log. run_id
 * gets a new UUID. The run starts when run_queue.h's policy gives it a
 * worker. FAWN_EBUSY when the thread has an active run (reject), the user
 * has per_user_active_max runs already, the queue is full or the manager
 * is stopping; store errors otherwise. */
FAWN_MUST_CHECK int runs_start(char run_id[37], run_manager *m, const run_request *rq);

/* Asks a live run of the owner's thread to stop (it ends as interrupted:
 * a run still waiting for a worker at once, a model call aborts at once, a
 * running command is killed). A run another gateway runs gets a stored
 * cancel request, which that gateway acts on within RUNS_STORE_POLL_MS.
 * With wait_ms, waits up to that long for it to end: 0 when it has,
 * FAWN_ETIMEDOUT when not yet. FAWN_ENOENT when no such run is live here
 * or unfinished in the store (another user's run id included). */
FAWN_MUST_CHECK int runs_cancel(run_manager *m, int64_t owner_id, const char *thread_id,
                                const char *run_id, int64_t wait_ms);

/* Whether the owner's thread has an active run, here or (as stored) on
 * another gateway; a store that cannot say answers busy. */
bool runs_thread_busy(run_manager *m, int64_t owner_id, const char *thread_id);

/* The live log of run_id (a new reference; run_log_close it), or NULL when
 * the run is not live (its events are then all in the store). */
run_log *runs_log_open(run_manager *m, const char *run_id);
void run_log_close(run_log *l);

/* The log's events after seq `after` (any seq from 0; at or past the last
 * event: none): *out is a malloc'd array of *n (at
 * most max, itself at most RUN_FETCH_MAX; free each data, then the array). *done says the log
 * has ended (after the events returned, there will be no more); *first is
 * the oldest seq still retained (a reader asking for less has a gap). */
FAWN_MUST_CHECK int run_log_fetch(store_event **out, size_t *n, bool *done, int64_t *first,
                                  run_log *l, int64_t after, size_t max);

/* The seq of the log's latest event and whether the log has ended. */
void run_log_status(run_log *l, int64_t *last, bool *done);

/* Registers wake(ctx) to be called once when an event after seq `after`
 * arrives, the log ends, or RUNS_HEARTBEAT_MS pass; suspend(ctx) is called
 * right after registering, under the log's lock, so wake never comes
 * before it. Both run under the log's lock: they must not call back into
 * the log. Returns false without registering when such an event is
 * already there or the log has ended. */
bool run_log_wait(run_log *l, int64_t after, void (*wake)(void *ctx), void (*suspend)(void *ctx),
                  void *ctx);
/* Forgets ctx's registration, if any (a reader that goes away). */
void run_log_unwait(run_log *l, void *ctx);

/* For a reader of a run that is not live here (its events are in the
 * store, written by the gateway that runs it): registers wake(ctx) to be
 * called once within RUNS_STORE_POLL_MS, when the reader looks in the
 * store again; suspend(ctx) as run_log_wait's. Returns false without
 * registering when the manager has stopped. */
bool runs_store_wait(run_manager *m, void (*wake)(void *ctx), void (*suspend)(void *ctx),
                     void *ctx);
/* Forgets ctx's registration, if any. */
void runs_store_unwait(run_manager *m, void *ctx);

#endif
