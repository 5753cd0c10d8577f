/* Following a run: an SSE stream of its events (stream, join) or, for
 * /wait, its final state once it ends. A follower never holds a server
 * thread: with nothing to send it registers a wake-up with the run's log
 * and suspends its connection; the log resumes it when an event arrives,
 * the run ends, or a heartbeat is due.
 *
 * A client resuming with Last-Event-ID gets the events after that id. An id
 * past the run's last event is taken as the last one (cursor_place): the
 * client gets what comes next. The stream of a run that has ended finishes
 * with an end frame, also when the client had seen the stored one (gather);
 * only a gap frame ends a stream without one.
 *
 * A run live on another gateway (several gateways share the store) is
 * followed through the store: its gateway stores its events within
 * 100 ms (run_cluster.c), and the follower, with nothing new, waits for
 * the next look at the store (runs_store_wait) until the run's stored
 * status is final and every stored event is sent. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "gateway/internal.h"

/* Bytes handed to the server per call. The server's write buffer of every
 * follower is this large: 4 KiB keeps a thousand followers of one run
 * within a few MiB (16 KiB cost them 11 MiB more). */
#define FOLLOW_BLOCK_SIZE (4 * 1024)
/* Events formatted ahead of what the client has taken: a reader that joins a
 * long run catches up a few events at a time, so a thousand readers do not
 * each hold the whole history. */
#define FOLLOW_EVENTS_AHEAD 4
/* An output buffer grown past this by one large event is released once sent. */
#define FOLLOW_BUFFER_KEEP (8 * 1024)

typedef struct follower {
    gateway *g;
    struct MHD_Connection *conn;
    gw_follow_spec spec;
    char run_id[37];
    char thread_id[65];
    run_log *log;   /* the live log, or NULL: the events are in the store */
    int64_t cursor; /* the last event id passed over */
    fbuf out;       /* bytes not handed to the server yet */
    size_t out_pos;
    bool finished; /* nothing will follow what is in out */
    bool end_sent; /* an end frame is in out, or was handed out */
    int64_t last_sent_ms;
} follower;

static const struct {
    const char *event;
    unsigned mode;
} event_modes[] = {
    {"values", GW_MODE_VALUES}, {"messages", GW_MODE_MESSAGES}, {"updates", GW_MODE_UPDATES},
    {"custom", GW_MODE_CUSTOM}, {"metadata", GW_MODE_ALWAYS},   {"error", GW_MODE_ALWAYS},
    {"end", GW_MODE_ALWAYS},
};

int gw_stream_modes(unsigned *out, const json_t *stream_mode) {
    static const struct {
        const char *name;
        unsigned mode;
    } names[] = {{"values", GW_MODE_VALUES},
                 {"messages-tuple", GW_MODE_MESSAGES},
                 {"messages", GW_MODE_MESSAGES},
                 {"updates", GW_MODE_UPDATES},
                 {"custom", GW_MODE_CUSTOM}};
    *out = GW_MODE_ALWAYS;
    if (!stream_mode || json_is_null(stream_mode)) {
        *out |= GW_MODE_VALUES;
        return 0;
    }
    json_t *list = json_is_string(stream_mode) ? json_pack("[O]", stream_mode)
                                               : json_incref((json_t *)stream_mode);
    int r = json_is_array(list) ? 0 : fawn_err(FAWN_EINVAL, "stream_mode must be a list");
    size_t i;
    json_t *m;
    json_array_foreach(list, i, m) {
        unsigned bit = 0;
        for (size_t k = 0; k < ARRAY_LEN(names) && json_is_string(m); k++)
            if (strcmp(json_string_value(m), names[k].name) == 0)
                bit = names[k].mode;
        if (r == 0 && !bit)
            r = fawn_err(FAWN_EINVAL, "unsupported_stream_mode: %s",
                         json_is_string(m) ? json_string_value(m) : "(not a name)");
        *out |= bit;
    }
    json_decref(list);
    return r;
}

static bool wanted(const follower *f, const char *event) {
    for (size_t i = 0; i < ARRAY_LEN(event_modes); i++)
        if (strcmp(event, event_modes[i].event) == 0)
            return (f->spec.modes & event_modes[i].mode) != 0;
    return false;
}

/* Takes the result r of adding what to out. What does not fit (out of
 * memory, or past the buffer's limit) ends the stream, logged: a client
 * resumes from the last id it got rather than miss an event unaware. */
static void out_added(follower *f, int r, const char *what) {
    if (r < 0) {
        log_warn("gateway", "run %s: %s not sent: %s", f->run_id, what, fawn_errmsg());
        f->finished = true;
    }
}

static void frame(follower *f, const char *event, const char *data, int64_t id) {
    int r = id > 0
                ? fbuf_printf(&f->out, "event: %s\ndata: %s\nid: %" PRId64 "\n\n", event, data, id)
                : fbuf_printf(&f->out, "event: %s\ndata: %s\n\n", event, data);
    f->end_sent |= r == 0 && strcmp(event, "end") == 0;
    out_added(f, r, event);
}

/* The gap frame: the reader asked for events no longer kept. */
static void gap(follower *f, int64_t first, int64_t last) {
    json_t *g = json_pack("{s:s, s:s, s:I, s:I, s:I, s:s}", "code", "stream_replay_gap", "run_id",
                          f->run_id, "requested_event_id", (json_int_t)f->cursor,
                          "earliest_available_event_id", (json_int_t)first,
                          "latest_available_event_id", (json_int_t)last, "recovery",
                          "reload_durable_state");
    char *text = g ? json_dumps(g, JSON_COMPACT) : NULL;
    frame(f, "gap", text ? text : "{}", 0);
    free(text);
    json_decref(g);
    f->finished = true;
}

/* /wait's answer: the thread's state once the run has ended (its messages
 * within GW_STATE_MESSAGES_MAX), or its error. */
static void final_state(follower *f) {
    store_run run;
    char *text = NULL;
    if (store_run_get(f->g->st, &run, f->spec.owner_id, f->thread_id, f->run_id) == 0 &&
        strcmp(run.status, "error") == 0) {
        json_t *body = json_pack("{s:s, s:s}", "status", "error", "error",
                                 run.error ? run.error : "the run failed");
        text = body ? json_dumps(body, JSON_COMPACT) : NULL;
        json_decref(body);
    } else {
        store_checkpoint cp;
        size_t omitted;
        if (store_checkpoint_latest(f->g->st, &cp, f->spec.owner_id, f->thread_id) == 0 &&
            store_state_read(f->g->st, &text, &omitted, f->spec.owner_id, f->thread_id, cp.state,
                             GW_STATE_MESSAGES_MAX) < 0)
            log_warn("gateway", "run %s: final state unreadable: %s", f->run_id, fawn_errmsg());
        store_checkpoint_clear(&cp);
    }
    store_run_clear(&run);
    out_added(f, fbuf_append(&f->out, text ? text : "{}", text ? strlen(text) : 2), "final state");
    free(text);
    f->finished = true;
}

/* A values event: the state its data refers to, its messages within
 * GW_VALUES_EVENT_MESSAGES_MAX. Data that is no reference is sent as it
 * is; a state that cannot be read ends the stream. */
static void values_frame(follower *f, const store_event *e) {
    char *state = NULL;
    size_t omitted;
    int r = store_state_read(f->g->st, &state, &omitted, f->spec.owner_id, f->thread_id, e->data,
                             GW_VALUES_EVENT_MESSAGES_MAX);
    if (r == 0 || r == FAWN_EINVAL) {
        frame(f, e->event, r == 0 ? state : e->data, e->seq);
    } else {
        log_warn("gateway", "run %s: state of event %" PRId64 " unreadable: %s", f->run_id, e->seq,
                 fawn_errmsg());
        f->finished = true;
    }
    free(state);
}

/* /wait on a live run: nothing to send until it ends. */
static void gather_end(follower *f) {
    bool done;
    run_log_status(f->log, &f->cursor, &done);
    if (done)
        final_state(f);
}

/* Whether the run's stored status is final (a run that is gone is). */
static int stored_run_ended(bool *ended, follower *f) {
    *ended = false;
    store_run run;
    int r = store_run_get(f->g->st, &run, f->spec.owner_id, f->thread_id, f->run_id);
    *ended = r == FAWN_ENOENT ||
             (r == 0 && strcmp(run.status, "pending") != 0 && strcmp(run.status, "running") != 0);
    store_run_clear(&run);
    return r == FAWN_ENOENT ? 0 : r;
}

/* The next events from the store; *done when there are none and the run
 * has ended (its status is read before the events, so none stored before
 * it ended is missed). */
static int store_fetch(store_event **ev, size_t *n, bool *done, int64_t *first, int64_t *last,
                       follower *f) {
    *done = false;
    int r = store_event_bounds(f->g->st, first, last, f->run_id);
    if (r == 0)
        r = store_event_read(f->g->st, ev, n, f->run_id, f->cursor, FOLLOW_EVENTS_AHEAD);
    if (r < 0 || *n > 0)
        return r;
    free(*ev);
    *ev = NULL;
    bool ended;
    r = stored_run_ended(&ended, f);
    if (r == 0 && ended)
        r = store_event_read(f->g->st, ev, n, f->run_id, f->cursor, FOLLOW_EVENTS_AHEAD);
    *done = r == 0 && ended && *n == 0;
    return r;
}

/* Adds what is new to out; sets finished at the end of the run. */
static void gather(follower *f) {
    if (f->log && !f->spec.sse) {
        gather_end(f);
        return;
    }
    store_event *ev = NULL;
    size_t n = 0;
    bool done = false;
    int64_t first = 0, last = 0;
    int r = f->log ? run_log_fetch(&ev, &n, &done, &first, f->log, f->cursor, FOLLOW_EVENTS_AHEAD)
                   : store_fetch(&ev, &n, &done, &first, &last, f);
    if (r < 0) {
        log_warn("gateway", "run %s: events unreadable: %s", f->run_id, fawn_errmsg());
        f->finished = true;
        return;
    }
    if (f->cursor > 0 && f->cursor < first - 1) {
        gap(f, first, f->log ? first + (int64_t)n - 1 : last);
    } else {
        for (size_t i = 0; i < n && !f->finished; i++) {
            f->cursor = ev[i].seq;
            if (!f->spec.sse || !wanted(f, ev[i].event))
                continue;
            if (strcmp(ev[i].event, "values") == 0)
                values_frame(f, &ev[i]);
            else
                frame(f, ev[i].event, ev[i].data, ev[i].seq);
        }
        if (done && !f->spec.sse)
            final_state(f);
        if (done && f->spec.sse && !f->end_sent)
            frame(f, "end", "null", 0);
        f->finished |= done;
    }
    for (size_t i = 0; i < n; i++)
        free(ev[i].data);
    free(ev);
}

/* Takes a cursor past the run's last event back to that event. */
static void cursor_place(follower *f) {
    int64_t first = 0, last = 0;
    bool done = false;
    if (f->log)
        run_log_status(f->log, &last, &done);
    else if (store_event_bounds(f->g->st, &first, &last, f->run_id) < 0)
        return; /* the store fails: gather says so */
    if (f->cursor > last)
        f->cursor = last;
}

static void follower_wake(void *ctx) { MHD_resume_connection(((follower *)ctx)->conn); }
static void follower_suspend(void *ctx) { MHD_suspend_connection(((follower *)ctx)->conn); }

static ssize_t hand_out(follower *f, char *buf, size_t max) {
    size_t n = f->out.len - f->out_pos;
    n = n > max ? max : n;
    memcpy(buf, f->out.data + f->out_pos, n);
    f->out_pos += n;
    if (f->out_pos == f->out.len) {
        f->out.len = f->out_pos = 0;
        if (f->out.cap > FOLLOW_BUFFER_KEEP)
            fbuf_free(&f->out);
    }
    f->last_sent_ms = fawn_now_ms();
    return (ssize_t)n;
}

static ssize_t follower_read(void *cls, uint64_t pos, char *buf, size_t max) {
    follower *f = cls;
    for (int round = 0; round < 2; round++) {
        if (f->out.len > f->out_pos)
            return hand_out(f, buf, max);
        if (f->finished)
            return MHD_CONTENT_READER_END_OF_STREAM;
        gather(f);
        if (f->out.len > f->out_pos || f->finished)
            continue;
        if (fawn_now_ms() - f->last_sent_ms >= RUNS_HEARTBEAT_MS) {
            out_added(f, fbuf_printf(&f->out, "%s", f->spec.sse ? ": heartbeat\n\n" : " "),
                      "heartbeat");
            continue;
        }
        if (f->log && run_log_wait(f->log, f->cursor, follower_wake, follower_suspend, f))
            return 0;
        if (!f->log && runs_store_wait(app_runs(f->g->app), follower_wake, follower_suspend, f))
            return 0;
    }
    return f->out.len > f->out_pos ? hand_out(f, buf, max) : 0;
}

static void follower_free(void *cls) {
    follower *f = cls;
    if (f->log) {
        run_log_unwait(f->log, f);
        run_log_close(f->log);
    } else {
        runs_store_unwait(app_runs(f->g->app), f);
    }
    if (!f->finished && f->spec.cancel_on_disconnect &&
        runs_cancel(app_runs(f->g->app), f->spec.owner_id, f->thread_id, f->run_id, 0) == 0)
        log_info("gateway", "run %s cancelled: its client went away", f->run_id);
    fbuf_free(&f->out);
    free(f);
}

int gw_event_id_parse(int64_t *out, const char *text) {
    *out = 0;
    if (!text || !*text || strcmp(text, "-1") == 0)
        return 0;
    int64_t n = 0;
    for (const char *p = text; *p; p++) {
        int digit = *p - '0';
        if (digit < 0 || digit > 9 || n > (INT64_MAX - digit) / 10)
            return fawn_err(FAWN_EINVAL,
                            "Last-Event-ID must be an event id: decimal digits, "
                            "at most %" PRId64 " (or -1 for the first event)",
                            INT64_MAX);
        n = n * 10 + digit;
    }
    *out = n;
    return 0;
}

int gw_respond_follow(gw_request *rq, const gw_follow_spec *spec) {
    follower *f = calloc(1, sizeof *f);
    if (!f)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *f = (follower){.g = rq->g,
                    .conn = rq->conn,
                    .spec = *spec,
                    .cursor = spec->after,
                    .last_sent_ms = fawn_now_ms()};
    snprintf(f->run_id, sizeof f->run_id, "%s", spec->run_id);
    snprintf(f->thread_id, sizeof f->thread_id, "%s", spec->thread_id);
    f->spec.run_id = f->run_id;
    f->spec.thread_id = f->thread_id;
    f->spec.content_location = NULL;
    f->log = runs_log_open(app_runs(rq->g->app), f->run_id);
    cursor_place(f);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, FOLLOW_BLOCK_SIZE,
                                                               follower_read, f, follower_free);
    if (!r) {
        follower_free(f);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE,
                            spec->sse ? "text/event-stream" : "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (spec->content_location)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_LOCATION, spec->content_location);
    return gw_queue(rq, MHD_HTTP_OK, r);
}
