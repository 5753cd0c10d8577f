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
/* Writes to the store the events it lacks. Only the thread that appends
 * calls it. */
FAWN_MUST_CHECK int run_log_flush(run_log *l);
/* Writes what is left, marks the log ended and wakes every reader. */
void run_log_end(run_log *l);
/* Wakes readers that have waited RUNS_HEARTBEAT_MS or more. */
void run_log_heartbeat(run_log *l, int64_t now_ms);

#endif
