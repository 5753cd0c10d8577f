/* What the executor and the event log share; no other module includes this. */
#ifndef FAWN_RUNS_INTERNAL_H
#define FAWN_RUNS_INTERNAL_H

#include <pthread.h>
#include <stdio.h>

#include "agent/runs.h"
#include "base/base.h"

/* A new, empty log with one reference (the caller's). */
FAWN_MUST_CHECK int run_log_new(run_log **out, store *st, const char *run_id);
/* Takes another reference. */
void run_log_ref(run_log *l);
/* Appends an event (data stolen; NULL is JSON null) with the next seq and
 * wakes the readers; writes to the store at checkpoints and every few
 * events. One thread appends at a time: the run's own, or one of its
 * sub-agents' while the run's thread waits for them (under their lock). */
FAWN_MUST_CHECK int run_log_append(run_log *l, const char *event, json_t *data);
/* The same with the data already as JSON text (taken; NULL: out of memory). */
FAWN_MUST_CHECK int run_log_append_text(run_log *l, const char *event, char *text);
/* Writes to the store the events it lacks (flushes are serialized: the
 * appending thread's and run_log_flush_stale's). Once another gateway has
 * ended the stored stream (store_event_append's FAWN_ESTALE), they and all
 * later ones are dropped, logged once: 0. */
FAWN_MUST_CHECK int run_log_flush(run_log *l);
/* Flushes when the oldest event not yet stored was appended at or before
 * older_than_ms (fawn_now_ms): a follower through another gateway reads
 * the store, and gets events this late at most. */
void run_log_flush_stale(run_log *l, int64_t older_than_ms);
/* Writes what is left, marks the log ended and wakes every reader. */
void run_log_end(run_log *l);
/* Wakes readers that have waited RUNS_HEARTBEAT_MS or more. */
void run_log_heartbeat(run_log *l, int64_t now_ms);

/* ---- the manager, for its cluster thread (run_cluster.c) ---- */

/* Cancels run_id if it is live here (nothing otherwise). */
void runs_cancel_live(run_manager *m, const char *run_id);
/* Cancels every live run: this gateway lost its lease (self-fence). */
void runs_cancel_all(run_manager *m);
/* Whether any run is live here. */
bool runs_any_live(run_manager *m);
/* Flushes the live logs whose oldest unstored event is older than
 * older_than_ms (run_log_flush_stale). */
void runs_flush_stale(run_manager *m, int64_t older_than_ms);

/* The gateway's life among those sharing the store: every
 * RUNS_STORE_POLL_MS it flushes stale logs, acts on cancel requests for
 * its runs and wakes the readers waiting on the store; every heartbeat_ms
 * it renews its lease and reaps gateways silent for lease_ms. A lease it
 * finds lost (its row reaped, or no beat stored for lease_ms) cancels
 * every live run (runs_cancel_all) before it registers again. */
typedef struct run_cluster run_cluster;
typedef struct run_cluster_config {
    const char *gateway_id; /* copied */
    uint32_t heartbeat_ms, lease_ms;
} run_cluster_config;
/* Registers the gateway, ends the runs its previous process left
 * unfinished, and starts the thread. */
FAWN_MUST_CHECK int run_cluster_start(run_cluster **out, run_manager *m, store *st,
                                      const run_cluster_config *cfg);
/* Stops the thread, wakes every store waiter and removes the gateway's
 * row (NULL is fine; once). The cluster stays valid for run_cluster_free. */
void run_cluster_stop(run_cluster *c);
void run_cluster_free(run_cluster *c);
/* This gateway's id. */
const char *run_cluster_gateway_id(const run_cluster *c);
/* runs_store_wait and runs_store_unwait's registry. */
bool run_cluster_store_wait(run_cluster *c, void (*wake)(void *ctx), void (*suspend)(void *ctx),
                            void *ctx);
void run_cluster_store_unwait(run_cluster *c, void *ctx);

#endif
