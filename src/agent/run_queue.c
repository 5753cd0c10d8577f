/* The run executor's scheduling policy (run_queue.h). Users with admitted
 * runs are one list in turn order; each keeps its waiting runs oldest
 * first. The list holds at most queue_max + workers users (each has a run
 * waiting or running), so walking it stays cheap. */
#include "agent/run_queue.h"

#include <assert.h>
#include <inttypes.h>
#include <stdlib.h>

typedef struct runq_user {
    struct runq_user *next; /* turn order */
    int64_t owner_id;
    uint32_t active; /* admitted runs: added, waiting or running */
    uint32_t running;
    runq_item *head, *tail; /* waiting runs, oldest first */
} runq_user;

struct runq {
    runs_limits limits;
    runq_user *users; /* every user with an admitted run, in turn order */
    uint32_t waiting; /* admitted runs not started, all users */
};

int runq_new(runq **out, const runs_limits *limits) {
    *out = NULL;
    if (!limits->queue_max || !limits->per_user_active_max || !limits->per_user_running_max)
        return fawn_err(FAWN_EINVAL, "run queue limits must be at least 1");
    runq *q = calloc(1, sizeof *q);
    if (!q)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    q->limits = *limits;
    *out = q;
    return 0;
}

void runq_free(runq *q) {
    if (!q)
        return;
    while (q->users) {
        runq_user *u = q->users;
        q->users = u->next;
        free(u);
    }
    free(q);
}

/* The link that points at owner's record, or the list's end when owner has
 * none. */
static runq_user **user_slot(runq *q, int64_t owner_id) {
    runq_user **p = &q->users;
    while (*p && (*p)->owner_id != owner_id)
        p = &(*p)->next;
    return p;
}

/* Puts u at the back of the turn order (u is in no list). */
static void user_append(runq *q, runq_user *u) {
    runq_user **p = &q->users;
    while (*p)
        p = &(*p)->next;
    u->next = NULL;
    *p = u;
}

int runq_add(runq *q, runq_item *it, int64_t owner_id) {
    *it = (runq_item){.owner_id = owner_id, .state = RUNQ_OUT};
    runq_user **slot = user_slot(q, owner_id);
    runq_user *u = *slot;
    if (u && u->active >= q->limits.per_user_active_max)
        return fawn_err(FAWN_EBUSY, "You have %" PRIu32 " runs in progress; wait for one to end",
                        q->limits.per_user_active_max);
    if (q->waiting >= q->limits.queue_max)
        return fawn_err(FAWN_EBUSY, "Too many runs are waiting; try again later");
    if (!u) {
        u = calloc(1, sizeof *u);
        if (!u)
            return fawn_err(FAWN_ENOMEM, "out of memory");
        u->owner_id = owner_id;
        *slot = u; /* the list's end: a new user's turn comes last */
    }
    u->active++;
    q->waiting++;
    it->state = RUNQ_ADDED;
    return 0;
}

void runq_ready(runq *q, runq_item *it) {
    assert(it->state == RUNQ_ADDED);
    runq_user *u = *user_slot(q, it->owner_id);
    it->next = NULL;
    if (u->tail)
        u->tail->next = it;
    else
        u->head = it;
    u->tail = it;
    it->state = RUNQ_WAITING;
}

/* The link to the user whose waiting run starts next: below the running
 * cap, holding the fewest workers, first in turn order among equals; NULL
 * when there is none. */
static runq_user **next_turn(runq *q) {
    runq_user **best = NULL;
    for (runq_user **p = &q->users; *p; p = &(*p)->next) {
        const runq_user *u = *p;
        if (u->head && u->running < q->limits.per_user_running_max &&
            (!best || u->running < (*best)->running))
            best = p;
    }
    return best;
}

runq_item *runq_take(runq *q) {
    runq_user **p = next_turn(q);
    if (!p)
        return NULL;
    runq_user *u = *p;
    runq_item *it = u->head;
    u->head = it->next;
    if (!u->head)
        u->tail = NULL;
    it->next = NULL;
    it->state = RUNQ_RUNNING;
    u->running++;
    q->waiting--;
    *p = u->next;
    user_append(q, u); /* their turn is over */
    return it;
}

/* Unlinks a waiting it from u's waiting runs. */
static void waiting_unlink(runq_user *u, runq_item *it) {
    runq_item *prev = NULL;
    for (runq_item **p = &u->head; *p; prev = *p, p = &(*p)->next)
        if (*p == it) {
            *p = it->next;
            if (u->tail == it)
                u->tail = prev;
            return;
        }
}

void runq_remove(runq *q, runq_item *it) {
    if (it->state == RUNQ_OUT)
        return;
    runq_user **slot = user_slot(q, it->owner_id);
    runq_user *u = *slot;
    assert(u);
    if (it->state == RUNQ_RUNNING)
        u->running--;
    else
        q->waiting--;
    if (it->state == RUNQ_WAITING)
        waiting_unlink(u, it);
    it->next = NULL;
    it->state = RUNQ_OUT;
    if (--u->active == 0) {
        *slot = u->next;
        free(u);
    }
}
