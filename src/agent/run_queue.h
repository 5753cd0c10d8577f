/* run_queue: the run executor's scheduling policy — which runs are admitted,
 * and which waiting run a free worker takes next. Every front-end's runs
 * (HTTP API, web UI, IM channels, scheduled tasks) reach it through
 * runs_start, so this is the one place the policy lives. It is bookkeeping
 * only: no threads, locks, I/O or clock; the caller serializes every call
 * (runs.c holds its manager's lock).
 *
 * Rules, each with the function that enforces it:
 * - Admission (runq_add): a user has at most per_user_active_max runs
 *   admitted (waiting or running), and at most queue_max runs wait, all
 *   users together; a run beyond either is refused with FAWN_EBUSY, so one
 *   user's threads cannot fill the queue every user shares, and the memory
 *   waiting runs hold stays bounded.
 * - Running cap (runq_take): a user holds at most per_user_running_max
 *   workers at once; their other runs wait even while a worker is free, so
 *   the remaining workers start other users' runs at once instead of after
 *   one user's long runs.
 * - Turns (runq_take): a free worker goes to the user with a waiting run
 *   who holds the fewest workers; among equals, to the one whose turn comes
 *   first. A user joins the turn order at its back and goes to its back
 *   again each time one of their runs starts; a user at the running cap is
 *   passed over and keeps their place. So workers are shared evenly among
 *   the users with waiting runs, and a user's backlog never holds back
 *   another user's run: a user with one waiting run and a user with thirty
 *   alternate, and a user who holds no worker gets the next one that frees.
 * - One user's runs start in the order they were added (runq_take). */
#ifndef FAWN_RUN_QUEUE_H
#define FAWN_RUN_QUEUE_H

#include <stdint.h>

#include "agent/runs.h"
#include "base/base.h"

/* Where a run is: not in the queue, admitted but not yet startable,
 * waiting for a worker, or on one. */
enum runq_state { RUNQ_OUT, RUNQ_ADDED, RUNQ_WAITING, RUNQ_RUNNING };

/* One run's place in the queue, embedded in the caller's run record. Its
 * fields belong to run_queue.c; others only read state. */
typedef struct runq_item {
    struct runq_item *next; /* the owner's next waiting run */
    int64_t owner_id;
    enum runq_state state;
} runq_item;

typedef struct runq runq;

/* An empty queue under limits (copied; workers is not used here, every
 * other limit at least 1, else FAWN_EINVAL). Free with runq_free. */
FAWN_MUST_CHECK int runq_new(runq **out, const runs_limits *limits);
/* Frees the queue's own records (NULL is fine); the items are the caller's. */
void runq_free(runq *q);

/* Admits it as owner's run (state RUNQ_ADDED): counted against the limits
 * but not started until runq_ready. FAWN_EBUSY (a message for the user)
 * when owner has per_user_active_max runs admitted or queue_max runs wait;
 * FAWN_ENOMEM. *it is overwritten first, whatever the result. */
FAWN_MUST_CHECK int runq_add(runq *q, runq_item *it, int64_t owner_id);
/* Makes an added run startable (RUNQ_WAITING), behind its owner's others. */
void runq_ready(runq *q, runq_item *it);
/* The waiting run a free worker starts next (now RUNQ_RUNNING), by the
 * rules above; NULL when no waiting run may start. */
runq_item *runq_take(runq *q);
/* Takes it out of the queue (RUNQ_OUT) in any state: a run that ended, or
 * one that was refused or cancelled before it started. Nothing for
 * RUNQ_OUT. */
void runq_remove(runq *q, runq_item *it);

#endif
