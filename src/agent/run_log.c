/* The event log of one run (runs.h): a ring of the latest events in
 * memory, written through to the store in batches, and the readers
 * waiting for what comes next. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "agent/runs_internal.h"

/* Events written to the store at once at most; a batch is also written at
 * every "values" event (a checkpoint), every custom event (a sub-agent's
 * steps are read from the store by task id while the run goes) and at the
 * end. */
#define LOG_BATCH 64

typedef struct log_waiter {
    void (*wake)(void *ctx);
    void *ctx;
    int64_t since_ms;
} log_waiter;

struct run_log {
    pthread_mutex_t lock;
    pthread_mutex_t flush_lock; /* held through a flush: one writes at a time */
    int refs;
    char run_id[37];
    store *st;
    store_event *ring; /* seq s lives at (s - 1) % ring_cap; grows to RUN_EVENTS_RETAINED */
    size_t ring_cap;
    int64_t last_seq;
    int64_t persisted_seq;     /* written to the store up to here */
    int64_t unstored_since_ms; /* when the oldest event not stored was appended (0: none) */
    bool ended_elsewhere;      /* the stored stream was ended by another gateway */
    bool done;
    log_waiter *waiters;
    size_t n_waiters, cap_waiters;
};

int run_log_new(run_log **out, store *st, const char *run_id) {
    *out = NULL;
    run_log *l = calloc(1, sizeof *l);
    if (!l)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    pthread_mutex_init(&l->lock, NULL);
    pthread_mutex_init(&l->flush_lock, NULL);
    l->refs = 1;
    l->st = st;
    snprintf(l->run_id, sizeof l->run_id, "%s", run_id);
    *out = l;
    return 0;
}

void run_log_ref(run_log *l) {
    pthread_mutex_lock(&l->lock);
    l->refs++;
    pthread_mutex_unlock(&l->lock);
}

void run_log_close(run_log *l) {
    if (!l)
        return;
    pthread_mutex_lock(&l->lock);
    bool last = --l->refs == 0;
    pthread_mutex_unlock(&l->lock);
    if (!last)
        return;
    for (size_t i = 0; i < l->ring_cap; i++)
        free(l->ring[i].data);
    free(l->ring);
    free(l->waiters);
    pthread_mutex_destroy(&l->flush_lock);
    pthread_mutex_destroy(&l->lock);
    free(l);
}

static int64_t first_retained(const run_log *l) {
    return l->last_seq > RUN_EVENTS_RETAINED ? l->last_seq - RUN_EVENTS_RETAINED + 1 : 1;
}

/* Wakes every waiter (or only those waiting since before `older_than`). */
static void wake_locked(run_log *l, int64_t older_than) {
    size_t kept = 0;
    for (size_t i = 0; i < l->n_waiters; i++) {
        if (older_than && l->waiters[i].since_ms > older_than)
            l->waiters[kept++] = l->waiters[i];
        else
            l->waiters[i].wake(l->waiters[i].ctx);
    }
    l->n_waiters = kept;
}

static void batch_free(store_event *batch, size_t n) {
    for (size_t i = 0; batch && i < n; i++)
        free(batch[i].data);
    free(batch);
}

/* A copy of the n events from seq `from` on (l->lock held); NULL when out
 * of memory. */
static store_event *batch_copy(const run_log *l, int64_t from, size_t n) {
    store_event *batch = calloc(n, sizeof *batch);
    bool copied = batch != NULL;
    for (size_t i = 0; copied && i < n; i++) {
        const store_event *e = &l->ring[(from - 1 + (int64_t)i) % (int64_t)l->ring_cap];
        batch[i] = *e;
        copied = (batch[i].data = strdup(e->data)) != NULL;
    }
    if (!copied) {
        batch_free(batch, n);
        return NULL;
    }
    return batch;
}

int run_log_flush(run_log *l) {
    pthread_mutex_lock(&l->flush_lock);
    pthread_mutex_lock(&l->lock);
    int64_t from = l->persisted_seq + 1, to = l->last_seq;
    if (from < first_retained(l))
        from = first_retained(l);
    size_t n = to >= from && !l->ended_elsewhere ? (size_t)(to - from + 1) : 0;
    store_event *batch = n ? batch_copy(l, from, n) : NULL;
    bool dropped = l->ended_elsewhere;
    pthread_mutex_unlock(&l->lock);
    int r = n && !batch ? fawn_err(FAWN_ENOMEM, "out of memory") : 0;
    if (r == 0 && n)
        r = store_event_append(l->st, l->run_id, batch, n);
    if (r == 0 && n && (size_t)(to % LOG_BATCH) < n)
        r = store_event_prune(l->st, l->run_id, RUN_EVENTS_RETAINED);
    batch_free(batch, n);
    /* A stream another gateway ended takes none of these events, nor any
     * later: they are dropped, not tried again. */
    if (r == FAWN_ESTALE) {
        log_warn("runs", "run %s: ended by another gateway; its events from %" PRId64 " on dropped",
                 l->run_id, from);
        dropped = true;
        r = 0;
    }
    pthread_mutex_lock(&l->lock);
    if (r == 0) {
        l->ended_elsewhere = dropped;
        l->persisted_seq = to;
        l->unstored_since_ms = l->last_seq > to ? fawn_now_ms() : 0;
    }
    pthread_mutex_unlock(&l->lock);
    pthread_mutex_unlock(&l->flush_lock);
    if (r < 0)
        log_warn("runs", "run %s: events not stored: %s", l->run_id, fawn_errmsg());
    return r;
}

void run_log_flush_stale(run_log *l, int64_t older_than_ms) {
    pthread_mutex_lock(&l->lock);
    bool stale = l->unstored_since_ms && l->unstored_since_ms <= older_than_ms;
    pthread_mutex_unlock(&l->lock);
    if (stale && run_log_flush(l) < 0) /* logged by run_log_flush; the next tick tries again */
        log_debug("runs", "run %s: stale events not stored yet", l->run_id);
}

/* Grows the ring (it starts small; most runs have few events) until it
 * holds RUN_EVENTS_RETAINED, after which it wraps. Growth happens only
 * before the first wrap, so every event keeps its place. */
static int ring_make_room(run_log *l) {
    if ((size_t)l->last_seq < l->ring_cap || l->ring_cap == RUN_EVENTS_RETAINED)
        return 0;
    size_t cap = l->ring_cap ? l->ring_cap * 2 : 64;
    cap = cap > RUN_EVENTS_RETAINED ? RUN_EVENTS_RETAINED : cap;
    store_event *ring = realloc(l->ring, cap * sizeof *ring);
    if (!ring)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    memset(ring + l->ring_cap, 0, (cap - l->ring_cap) * sizeof *ring);
    l->ring = ring;
    l->ring_cap = cap;
    return 0;
}

int run_log_append(run_log *l, const char *event, json_t *data) {
    char *text = data ? json_dumps(data, JSON_COMPACT | JSON_ENCODE_ANY) : strdup("null");
    json_decref(data);
    return run_log_append_text(l, event, text);
}

int run_log_append_text(run_log *l, const char *event, char *text) {
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    pthread_mutex_lock(&l->lock);
    int r = ring_make_room(l);
    if (r < 0) {
        pthread_mutex_unlock(&l->lock);
        free(text);
        return r;
    }
    int64_t seq = ++l->last_seq;
    store_event *slot = &l->ring[(seq - 1) % (int64_t)l->ring_cap];
    free(slot->data);
    slot->seq = seq;
    snprintf(slot->event, sizeof slot->event, "%s", event);
    slot->data = text;
    if (!l->unstored_since_ms)
        l->unstored_since_ms = fawn_now_ms();
    wake_locked(l, 0);
    bool flush = strcmp(event, "values") == 0 || strcmp(event, "metadata") == 0 ||
                 strcmp(event, "custom") == 0 || seq - l->persisted_seq >= LOG_BATCH;
    pthread_mutex_unlock(&l->lock);
    return flush ? run_log_flush(l) : 0;
}

void run_log_end(run_log *l) {
    /* run_log_flush logs a failure; readers get every event from memory
     * while the log lives. */
    if (run_log_flush(l) < 0)
        log_debug("runs", "run %s: ended with events not stored", l->run_id);
    pthread_mutex_lock(&l->lock);
    l->done = true;
    wake_locked(l, 0);
    pthread_mutex_unlock(&l->lock);
}

void run_log_heartbeat(run_log *l, int64_t now_ms) {
    pthread_mutex_lock(&l->lock);
    wake_locked(l, now_ms - RUNS_HEARTBEAT_MS);
    pthread_mutex_unlock(&l->lock);
}

int run_log_fetch(store_event **out, size_t *n, bool *done, int64_t *first, run_log *l,
                  int64_t after, size_t max) {
    *out = NULL;
    *n = 0;
    pthread_mutex_lock(&l->lock);
    *first = first_retained(l);
    if (after > l->last_seq) /* a reader past the end gets nothing, and no overflow */
        after = l->last_seq;
    int64_t from = after < *first ? *first : after + 1;
    size_t count = l->last_seq >= from ? (size_t)(l->last_seq - from + 1) : 0;
    max = max > RUN_FETCH_MAX ? RUN_FETCH_MAX : max;
    count = count > max ? max : count;
    *done = l->done && from + (int64_t)count > l->last_seq;
    store_event *ev = count ? calloc(count, sizeof *ev) : NULL;
    int r = count && !ev ? fawn_err(FAWN_ENOMEM, "out of memory") : 0;
    for (size_t i = 0; ev && i < count; i++) {
        ev[i] = l->ring[(from - 1 + (int64_t)i) % (int64_t)l->ring_cap];
        ev[i].data = strdup(ev[i].data);
        if (!ev[i].data)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
    }
    pthread_mutex_unlock(&l->lock);
    if (r < 0) {
        for (size_t i = 0; ev && i < count; i++)
            free(ev[i].data);
        free(ev);
        return r;
    }
    *out = ev;
    *n = count;
    return 0;
}

bool run_log_wait(run_log *l, int64_t after, void (*wake)(void *ctx), void (*suspend)(void *ctx),
                  void *ctx) {
    pthread_mutex_lock(&l->lock);
    bool wait = !l->done && l->last_seq <= after;
    if (wait && l->n_waiters == l->cap_waiters) {
        size_t cap = l->cap_waiters ? l->cap_waiters * 2 : 8;
        log_waiter *w = realloc(l->waiters, cap * sizeof *w);
        if (w) {
            l->waiters = w;
            l->cap_waiters = cap;
        } else {
            wait = false; /* the reader polls again rather than never waking */
        }
    }
    if (wait) {
        l->waiters[l->n_waiters++] = (log_waiter){wake, ctx, fawn_now_ms()};
        suspend(ctx);
    }
    pthread_mutex_unlock(&l->lock);
    return wait;
}

void run_log_unwait(run_log *l, void *ctx) {
    pthread_mutex_lock(&l->lock);
    size_t kept = 0;
    for (size_t i = 0; i < l->n_waiters; i++)
        if (l->waiters[i].ctx != ctx)
            l->waiters[kept++] = l->waiters[i];
    l->n_waiters = kept;
    pthread_mutex_unlock(&l->lock);
}

void run_log_status(run_log *l, int64_t *last, bool *done) {
    pthread_mutex_lock(&l->lock);
    *last = l->last_seq;
    *done = l->done;
    pthread_mutex_unlock(&l->lock);
}
