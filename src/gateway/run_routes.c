/* Runs (LangGraph Platform shape): start one on a thread (background,
 * streamed or waited for), list, read, join and cancel them; the same
 * without a thread (stateless: a new thread, or config.configurable.thread_id). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "gateway/internal.h"
#include "gateway/replay.h"
#include "paths/paths.h"

/* Runs one listing returns unless the client asks otherwise. */
#define RUNS_LIST_DEFAULT 10
/* How long cancel?wait=1 waits for the run to end before answering 202. */
#define CANCEL_WAIT_MS 30000

/* Options a client may send, and which ones must be null (or false) since
 * fawn does not do what they ask: refused by name, never ignored. */
static const char *const run_keys[] = {"assistant_id",
                                       "input",
                                       "command",
                                       "metadata",
                                       "config",
                                       "context",
                                       "checkpoint_id",
                                       "checkpoint",
                                       "interrupt_before",
                                       "interrupt_after",
                                       "stream_mode",
                                       "stream_subgraphs",
                                       "stream_resumable",
                                       "on_disconnect",
                                       "multitask_strategy",
                                       "webhook",
                                       "on_completion",
                                       "after_seconds",
                                       "feedback_keys",
                                       "if_not_exists",
                                       "checkpoint_during",
                                       "durability",
                                       NULL};
static const char *const unsupported_keys[] = {
    "command",          "interrupt_before",  "interrupt_after", "stream_subgraphs",
    "stream_resumable", "webhook",           "on_completion",   "after_seconds",
    "feedback_keys",    "checkpoint_during", "durability"};

typedef struct run_args {
    json_t *body;
    json_t *input;       /* stored-form human messages */
    const json_t *title; /* input.title (a string or null; borrowed), or NULL */
    char checkpoint_id[STORE_RUN_ID_MAX + 1]; /* the checkpoint to start from; "": the newest */
    const char *checkpoint_thread;            /* checkpoint.thread_id (borrowed), or NULL */
    const char *model;     /* context.model_name or config.configurable.model_name */
    const char *thread_id; /* stateless runs: config.configurable.thread_id */
    int recursion_limit;
    unsigned modes;
    bool cancel_on_disconnect;
    bool interrupt;
    bool create_thread; /* if_not_exists: create */
    char *kwargs, *metadata;
} run_args;

static void run_args_clear(run_args *a) {
    json_decref(a->body);
    json_decref(a->input);
    free(a->kwargs);
    free(a->metadata);
}

/* A value that asks for nothing: absent, null, false, or empty. */
static bool inert(const json_t *v) {
    return !v || json_is_null(v) || json_is_false(v) ||
           (json_is_array(v) && json_array_size(v) == 0) ||
           (json_is_object(v) && json_object_size(v) == 0);
}

static int unsupported(const char *key) {
    return fawn_err(FAWN_EINVAL, "Run option '%s' is not supported", key);
}

static int keys_check(const json_t *body) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)body, key, v) {
        bool known = false;
        for (size_t i = 0; run_keys[i] && !known; i++)
            known = strcmp(key, run_keys[i]) == 0;
        if (!known)
            return unsupported(key);
    }
    for (size_t i = 0; i < ARRAY_LEN(unsupported_keys); i++)
        if (!inert(json_object_get(body, unsupported_keys[i])))
            return unsupported(unsupported_keys[i]);
    return 0;
}

/* One of the allowed words, or dflt when absent. */
static int choice(const char **out, const json_t *body, const char *key, const char *dflt,
                  const char *const *allowed) {
    const json_t *v = json_object_get(body, key);
    *out = dflt;
    if (!v || json_is_null(v))
        return 0;
    for (size_t i = 0; allowed[i]; i++)
        if (json_is_string(v) && strcmp(json_string_value(v), allowed[i]) == 0) {
            *out = allowed[i];
            return 0;
        }
    return fawn_err(FAWN_EINVAL, "Run option '%s' does not support %s", key,
                    json_is_string(v) ? json_string_value(v) : "that value");
}

static int recursion_limit(const json_t *config) {
    const json_t *v = json_object_get(config, "recursion_limit");
    json_int_t n = json_is_integer(v) ? json_integer_value(v) : 0;
    return n <= 0                    ? AGENT_RECURSION_DEFAULT
           : n > AGENT_RECURSION_MAX ? AGENT_RECURSION_MAX
                                     : (int)n;
}

static int input_take(run_args *a) {
    const json_t *input = json_object_get(a->body, "input");
    if (input && !json_is_null(input) && !json_is_object(input))
        return fawn_err(FAWN_EINVAL, "input must be an object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)input, key, v) {
        if (strcmp(key, "messages") != 0 && strcmp(key, "title") != 0)
            return fawn_err(FAWN_EINVAL, "input.%s is not supported (only messages and title)",
                            key);
    }
    a->title = json_object_get(input, "title");
    if (a->title && !json_is_string(a->title) && !json_is_null(a->title))
        return fawn_err(FAWN_EINVAL, "input.title must be text or null");
    return agent_input_messages(&a->input, json_object_get(input, "messages"));
}

/* The model name a run asks for: context.model_name, else the configurable. */
static int model_take(run_args *a, const json_t *config) {
    const json_t *ctx = json_object_get(a->body, "context");
    if (ctx && !json_is_null(ctx) && !json_is_object(ctx))
        return fawn_err(FAWN_EINVAL, "context must be an object");
    const json_t *name = json_object_get(ctx, "model_name");
    if (!name)
        name = json_object_get(json_object_get(config, "configurable"), "model_name");
    if (name && !json_is_null(name) && !json_is_string(name))
        return fawn_err(FAWN_EINVAL, "model_name must be a string");
    a->model = json_string_value(name);
    return 0;
}

static int options_take(run_args *a, bool streaming) {
    static const char *const disconnect[] = {"cancel", "continue", NULL};
    static const char *const multitask[] = {"reject", "interrupt", NULL};
    static const char *const if_not_exists[] = {"create", "reject", NULL};
    const char *on_disconnect, *strategy, *missing;
    int r = choice(&on_disconnect, a->body, "on_disconnect", streaming ? "cancel" : "continue",
                   disconnect);
    if (r == 0)
        r = choice(&strategy, a->body, "multitask_strategy", "reject", multitask);
    if (r == 0)
        r = choice(&missing, a->body, "if_not_exists", "reject", if_not_exists);
    if (r == 0) {
        a->cancel_on_disconnect = strcmp(on_disconnect, "cancel") == 0;
        a->interrupt = strcmp(strategy, "interrupt") == 0;
        a->create_thread = strcmp(missing, "create") == 0;
    }
    return r;
}

static int kwargs_take(run_args *a) {
    json_t *meta = json_object_get(a->body, "metadata");
    if (meta && !json_is_null(meta) && !json_is_object(meta))
        return fawn_err(FAWN_EINVAL, "metadata must be an object");
    json_t *kw = json_pack("{s:O?, s:O?, s:O?, s:O?, s:i, s:s*}", "stream_mode",
                           json_object_get(a->body, "stream_mode"), "config",
                           json_object_get(a->body, "config"), "context",
                           json_object_get(a->body, "context"), "input",
                           json_object_get(a->body, "input"), "recursion_limit", a->recursion_limit,
                           "checkpoint_id", a->checkpoint_id[0] ? a->checkpoint_id : NULL);
    a->kwargs = kw ? json_dumps(kw, JSON_COMPACT) : NULL;
    json_decref(kw);
    a->metadata = json_is_object(meta) ? json_dumps(meta, JSON_COMPACT) : NULL;
    return a->kwargs ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Reads and checks a run request: FAWN_EINVAL (422) naming what is wrong. */
static int run_args_read(run_args *a, gw_request *rq, bool streaming) {
    int r = gw_body_json(&a->body, rq);
    if (r == 0)
        r = keys_check(a->body);
    const char *assistant = json_string_value(json_object_get(a->body, "assistant_id"));
    if (r == 0 && assistant && strcmp(assistant, AGENT_ASSISTANT_ID) != 0)
        r = fawn_err(FAWN_EINVAL, "Unknown assistant_id '%s' (fawn serves %s)", assistant,
                     AGENT_ASSISTANT_ID);
    const json_t *config = json_object_get(a->body, "config");
    if (r == 0 && config && !json_is_null(config) && !json_is_object(config))
        r = fawn_err(FAWN_EINVAL, "config must be an object");
    if (r == 0)
        r = input_take(a);
    if (r == 0)
        r = model_take(a, config);
    if (r == 0)
        r = gw_stream_modes(&a->modes, json_object_get(a->body, "stream_mode"));
    if (r == 0)
        r = options_take(a, streaming);
    if (r == 0)
        r = gw_run_checkpoint_parse(a->checkpoint_id, &a->checkpoint_thread, a->body);
    a->recursion_limit = recursion_limit(config);
    a->thread_id = json_string_value(
        json_object_get(json_object_get(config, "configurable"), "thread_id"));
    if (r == 0)
        r = kwargs_take(a);
    return r;
}

/* A count of a token_usage entry: 0 unless a positive integer. */
static int64_t usage_count(const json_t *entry, const char *key) {
    const json_t *v = json_object_get(entry, key);
    return json_is_integer(v) && json_integer_value(v) > 0 ? json_integer_value(v) : 0;
}

/* Adds what entry counts to the {input_tokens, output_tokens,
 * total_tokens, calls} object of key in map. */
static void usage_add_to(json_t *map, const char *key, const json_t *entry) {
    static const char *const counts[] = {"input_tokens", "output_tokens", "total_tokens", "calls"};
    json_t *sum = json_object_get(map, key);
    if (!sum && json_object_set_new(map, key, sum = json_object()) < 0)
        return;
    for (size_t i = 0; i < ARRAY_LEN(counts); i++)
        json_object_set_new(
            sum, counts[i],
            json_integer(usage_count(sum, counts[i]) + usage_count(entry, counts[i])));
}

/* DeerFlow's token fields of a run record (total_input_tokens,
 * total_output_tokens, total_tokens, llm_call_count, lead_agent_tokens,
 * subagent_tokens, middleware_tokens), and fawn's breakdowns by model and
 * by caller, summed from the run's token_usage (store_run). */
static json_t *run_usage_json(const char *usage) {
    json_t *list = usage ? json_loads(usage, 0, NULL) : NULL;
    json_t *by_model = json_object(), *by_caller = json_object();
    int64_t in = 0, out = 0, total = 0, calls = 0, bucket[3] = {0};
    size_t i;
    json_t *e;
    json_array_foreach(list, i, e) {
        const char *caller = json_string_value(json_object_get(e, "caller"));
        const char *model = json_string_value(json_object_get(e, "model"));
        in += usage_count(e, "input_tokens");
        out += usage_count(e, "output_tokens");
        total += usage_count(e, "total_tokens");
        calls += usage_count(e, "calls");
        bucket[!caller || strcmp(caller, "lead") == 0 ? 0
               : strncmp(caller, "subagent:", 9) == 0 ? 1
                                                      : 2] += usage_count(e, "total_tokens");
        usage_add_to(by_model, model ? model : "", e);
        usage_add_to(by_caller, caller ? caller : "", e);
    }
    json_decref(list);
    return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:o?, s:o?}", "total_input_tokens",
                     (json_int_t)in, "total_output_tokens", (json_int_t)out, "total_tokens",
                     (json_int_t)total, "llm_call_count", (json_int_t)calls, "lead_agent_tokens",
                     (json_int_t)bucket[0], "subagent_tokens", (json_int_t)bucket[1],
                     "middleware_tokens", (json_int_t)bucket[2], "token_usage_by_model", by_model,
                     "token_usage_by_caller", by_caller);
}

static json_t *run_json(const store_run *run) {
    char created[40], updated[40];
    gw_iso_time(created, run->created_at_ms);
    gw_iso_time(updated, run->updated_at_ms);
    json_t *kwargs = json_loads(run->kwargs, 0, NULL);
    json_t *meta = json_loads(run->metadata, 0, NULL);
    json_t *out = json_pack(
        "{s:s, s:s, s:s, s:s, s:s, s:s, s:o, s:o, s:s, s:s?}", "run_id", run->run_id, "thread_id",
        run->thread_id, "assistant_id", run->assistant_id, "created_at", created, "updated_at",
        updated, "status", run->status, "metadata", meta ? meta : json_object(), "kwargs",
        kwargs ? kwargs : json_object(), "multitask_strategy", "reject", "error", run->error);
    json_t *usage = run_usage_json(run->token_usage);
    if (out && usage)
        json_object_update(out, usage);
    json_decref(usage);
    return out;
}

/* The thread a run goes to: the route's, or for stateless runs the one the
 * config names (created when missing), or a new one. A run from a
 * checkpoint needs a thread that has it: none is created for it. */
static int run_thread(store_thread *t, gw_request *rq, const run_args *a, bool stateless) {
    *t = (store_thread){0};
    bool may_create = !a->checkpoint_id[0];
    if (!stateless) {
        int r = gw_thread_resolve(t, rq, false);
        if (r == FAWN_ENOENT && a->create_thread && may_create)
            r = gw_thread_resolve(t, rq, true);
        return r;
    }
    char id[65];
    if (a->thread_id && !fawn_id_valid(a->thread_id))
        return fawn_err(FAWN_EINVAL,
                        "config.configurable.thread_id must match [A-Za-z0-9_-]{1,64}");
    if (!may_create)
        return a->thread_id ? store_thread_get(rq->g->st, t, rq->who.user.id, a->thread_id)
                            : fawn_err(FAWN_ENOENT, "Checkpoint %s not found", a->checkpoint_id);
    if (a->thread_id)
        snprintf(id, sizeof id, "%s", a->thread_id);
    else
        fawn_random_uuid(id);
    bool existed;
    return store_thread_create(rq->g->st, t, &existed, rq->who.user.id, id, NULL);
}

/* The checkpoint a run starts from, when it names one: the thread's own
 * (another thread's or user's is not found, 404), named with its own
 * thread id when the client says which (422 otherwise). */
static int run_checkpoint_check(gw_request *rq, const run_args *a, const store_thread *t) {
    if (!a->checkpoint_id[0])
        return 0;
    if (a->checkpoint_thread && strcmp(a->checkpoint_thread, t->id) != 0)
        return fawn_err(FAWN_EINVAL, "checkpoint.thread_id must be the run's thread");
    store_checkpoint cp;
    int r = store_checkpoint_get(rq->g->st, &cp, rq->who.user.id, t->id, a->checkpoint_id);
    store_checkpoint_clear(&cp);
    return r;
}

enum run_answer { ANSWER_RUN, ANSWER_STREAM, ANSWER_WAIT };

static int answer(gw_request *rq, enum run_answer how, const run_args *a, const char *thread_id,
                  const char *run_id) {
    if (how == ANSWER_RUN) {
        store_run run;
        int r = store_run_get(rq->g->st, &run, rq->who.user.id, thread_id, run_id);
        if (r < 0)
            return r;
        json_t *body = run_json(&run);
        store_run_clear(&run);
        return gw_respond_json(rq, MHD_HTTP_OK, body);
    }
    char location[192];
    snprintf(location, sizeof location, "/api/threads/%s/runs/%s", thread_id, run_id);
    gw_follow_spec spec = {.run_id = run_id,
                           .thread_id = thread_id,
                           .owner_id = rq->who.user.id,
                           .modes = a->modes,
                           .sse = how == ANSWER_STREAM,
                           .cancel_on_disconnect = a->cancel_on_disconnect,
                           .content_location = how == ANSWER_STREAM ? location : NULL};
    return gw_respond_follow(rq, &spec);
}

static int run_create(gw_request *rq, enum run_answer how, bool stateless) {
    run_args a = {0};
    int r = run_args_read(&a, rq, how == ANSWER_STREAM);
    if (r == FAWN_EINVAL) {
        run_args_clear(&a);
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg());
    }
    store_thread t = {0};
    if (r == 0)
        r = run_thread(&t, rq, &a, stateless);
    if (r == 0)
        r = run_checkpoint_check(rq, &a, &t);
    char run_id[37] = "";
    app_run_spec spec = {.thread_id = t.id,
                         .model_name = a.model,
                         .recursion_limit = a.recursion_limit,
                         .input = a.input,
                         .title = a.title,
                         .checkpoint_id = a.checkpoint_id,
                         .kwargs = a.kwargs,
                         .metadata = a.metadata,
                         .interrupt = a.interrupt};
    if (r == 0)
        r = app_run_start(run_id, rq->g->app, &rq->who.user, &spec);
    if (r == 0)
        r = answer(rq, how, &a, t.id, run_id);
    store_thread_clear(&t);
    run_args_clear(&a);
    return r == FAWN_EINVAL ? gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg())
                            : r;
}

static int route_run_create(gw_request *rq) { return run_create(rq, ANSWER_RUN, false); }
static int route_run_stream(gw_request *rq) { return run_create(rq, ANSWER_STREAM, false); }
static int route_run_wait(gw_request *rq) { return run_create(rq, ANSWER_WAIT, false); }
static int route_stateless_run(gw_request *rq) { return run_create(rq, ANSWER_RUN, true); }
static int route_stateless_stream(gw_request *rq) { return run_create(rq, ANSWER_STREAM, true); }
static int route_stateless_wait(gw_request *rq) { return run_create(rq, ANSWER_WAIT, true); }

/* ---- reading runs ---- */

/* The run named by the route's second capture, on the route's thread. */
static int run_resolve(store_run *out, gw_request *rq) {
    *out = (store_run){0};
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    store_thread_clear(&t);
    if (r == 0)
        r = store_run_get(rq->g->st, out, rq->who.user.id, rq->params[0], rq->params[1]);
    return r;
}

static int route_run_list(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    store_thread_clear(&t);
    int64_t limit = 0, offset = 0;
    if (r == 0)
        r = gw_query_int(&limit, rq, "limit", RUNS_LIST_DEFAULT, 0, STORE_RUNS_LIST_MAX);
    if (r == 0)
        r = gw_query_int(&offset, rq, "offset", 0, 0, INT32_MAX);
    if (r == FAWN_EINVAL)
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg());
    store_run *runs = NULL;
    size_t n = 0;
    if (r == 0)
        r = store_run_list(rq->g->st, &runs, &n, rq->who.user.id, rq->params[0], (size_t)limit,
                           (size_t)offset);
    if (r < 0)
        return r;
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        json_array_append_new(list, run_json(&runs[i]));
        store_run_clear(&runs[i]);
    }
    free(runs);
    return gw_respond_json(rq, MHD_HTTP_OK, list);
}

static int route_run_get(gw_request *rq) {
    store_run run;
    int r = run_resolve(&run, rq);
    if (r < 0)
        return r;
    json_t *body = run_json(&run);
    store_run_clear(&run);
    return gw_respond_json(rq, MHD_HTTP_OK, body);
}

/* GET .../runs/{id}/workspace-changes: DeerFlow's per-run file change
 * summary. fawn records no such summary, and says so in DeerFlow's shape
 * (available false), for any run of the caller's (include_files and
 * include_diff change nothing then). */
static int route_run_workspace_changes(gw_request *rq) {
    store_run run;
    int r = run_resolve(&run, rq);
    store_run_clear(&run);
    if (r < 0)
        return r;
    return gw_respond_json(
        rq, MHD_HTTP_OK,
        json_pack("{s:b, s:i, s:{s:i, s:i, s:i, s:i, s:i, s:i, s:b}, s:[], s:{}}", "available", 0,
                  "version", 1, "summary", "created", 0, "modified", 0, "deleted", 0,
                  "symlink_created", 0, "additions", 0, "deletions", 0, "truncated", 0, "files",
                  "limits"));
}

/* The stream modes a run was started with (its kwargs). */
static unsigned run_modes(const store_run *run) {
    json_t *kw = json_loads(run->kwargs, 0, NULL);
    unsigned modes = 0;
    if (gw_stream_modes(&modes, json_object_get(kw, "stream_mode")) < 0)
        modes = GW_MODE_ALWAYS | GW_MODE_VALUES;
    json_decref(kw);
    return modes;
}

static int follow_existing(gw_request *rq, bool sse) {
    int64_t after = 0;
    store_run run;
    int r = run_resolve(&run, rq);
    if (r < 0)
        return r;
    r = gw_event_id_parse(&after, gw_header(rq, "Last-Event-ID"));
    gw_follow_spec spec = {.run_id = run.run_id,
                           .thread_id = run.thread_id,
                           .owner_id = rq->who.user.id,
                           .modes = run_modes(&run),
                           .after = after,
                           .sse = sse};
    if (r == 0)
        r = gw_respond_follow(rq, &spec);
    store_run_clear(&run);
    return r;
}

/* GET .../join: the final state (JSON), or the events when the client
 * asks for text/event-stream. */
static int route_run_join(gw_request *rq) {
    const char *accept = gw_header(rq, "Accept");
    return follow_existing(rq, accept && strstr(accept, "text/event-stream"));
}

static int route_run_join_stream(gw_request *rq) { return follow_existing(rq, true); }

/* 409 for a run that has ended (or was never known to the executor):
 * "Run <id> is not cancellable (status: <status>)", the words DeerFlow's
 * UI looks for to take a stop that came too late as done. */
static int respond_not_cancellable(gw_request *rq, const store_run *run) {
    char detail[STORE_RUN_ID_MAX + 64];
    snprintf(detail, sizeof detail, "Run %s is not cancellable (status: %s)", run->run_id,
             run->status);
    return gw_respond_detail(rq, MHD_HTTP_CONFLICT, detail);
}

static int route_run_cancel(gw_request *rq) {
    store_run run;
    int r = run_resolve(&run, rq);
    if (r < 0)
        return r;
    bool finished = strcmp(run.status, "pending") != 0 && strcmp(run.status, "running") != 0;
    const char *wait = gw_query(rq, "wait");
    const char *action = gw_query(rq, "action");
    if (action && strcmp(action, "interrupt") != 0) {
        store_run_clear(&run);
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT,
                                 "Cancel action 'rollback' is not supported");
    }
    bool waiting = wait && (strcmp(wait, "1") == 0 || strcmp(wait, "true") == 0);
    if (!finished)
        r = runs_cancel(app_runs(rq->g->app), rq->who.user.id, rq->params[0], rq->params[1],
                        waiting ? CANCEL_WAIT_MS : 0);
    if (!finished && r == FAWN_ENOENT) { /* it ended meanwhile: say how */
        store_run_clear(&run);
        r = run_resolve(&run, rq);
        finished = r == 0;
    }
    if (finished) {
        r = respond_not_cancellable(rq, &run);
        store_run_clear(&run);
        return r;
    }
    store_run_clear(&run);
    if (r == 0 && waiting) {
        struct MHD_Response *resp = MHD_create_response_from_buffer(0, "", MHD_RESPMEM_PERSISTENT);
        return resp ? gw_queue(rq, MHD_HTTP_NO_CONTENT, resp) : FAWN_ENOMEM;
    }
    if (r < 0 && r != FAWN_ETIMEDOUT)
        return r;
    return gw_respond_json(rq, MHD_HTTP_ACCEPTED, json_pack("{s:s}", "status", "cancelling"));
}

/* GET .../receipts: the evidence of every tool call of the run. */
static int route_run_receipts(gw_request *rq) {
    store_run run;
    int r = run_resolve(&run, rq);
    store_run_clear(&run);
    store_receipt *rcs = NULL;
    size_t n = 0;
    if (r == 0)
        r = store_receipt_list(rq->g->st, &rcs, &n, rq->params[1]);
    if (r < 0)
        return r;
    json_t *list = json_array();
    for (size_t i = 0; i < n; i++) {
        char created[40];
        gw_iso_time(created, rcs[i].created_at_ms);
        json_t *evidence = rcs[i].evidence ? json_loads(rcs[i].evidence, 0, NULL) : NULL;
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:s, s:s, s:s, s:I, s:s, s:o?}", "tool_call_id",
                            rcs[i].tool_call_id, "tool_name", rcs[i].tool_name, "status",
                            rcs[i].status, "args_sha256", rcs[i].args_sha256, "output_sha256",
                            rcs[i].output_sha256, "output_bytes", (json_int_t)rcs[i].output_bytes,
                            "created_at", created, "evidence", evidence));
    }
    store_receipts_free(rcs, n);
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:o}", "receipts", list));
}

/* ---- GET .../events: a run's stored events, filtered ---- */

/* Events one answer holds by default and at most (DeerFlow's figures). */
#define EVENTS_LIMIT_DEFAULT 500
#define EVENTS_LIMIT_MAX 2000
/* Event types one filter may name. */
#define EVENTS_TYPES_MAX 16

/* What an event is for readers: a custom event by its own type (a
 * sub-agent's task_* in category subagent), another by its name. */
static json_t *event_json(const store_run *run, const store_event *ev) {
    json_t *content = json_loads(ev->data ? ev->data : "null", JSON_DECODE_ANY, NULL);
    const char *custom = strcmp(ev->event, "custom") == 0
                             ? json_string_value(json_object_get(content, "type"))
                             : NULL;
    const char *type = custom ? custom : ev->event;
    const char *category = !custom                            ? ev->event
                           : strncmp(custom, "task_", 5) == 0 ? "subagent"
                                                              : "custom";
    json_t *task = json_object_get(content, "task_id");
    json_t *out = json_pack("{s:I, s:s, s:s, s:s, s:s, s:o*, s:{s:O?}}", "seq", (json_int_t)ev->seq,
                            "run_id", run->run_id, "thread_id", run->thread_id, "event_type", type,
                            "category", category, "content", content, "metadata", "task_id",
                            json_is_string(task) ? task : NULL);
    json_t *meta = json_object_get(out, "metadata");
    if (meta && json_is_null(json_object_get(meta, "task_id")))
        json_object_del(meta, "task_id");
    return out;
}

static bool event_wanted(const json_t *e, char *const *types, size_t n_types, const char *task) {
    const char *type = json_string_value(json_object_get(e, "event_type"));
    bool ok = n_types == 0;
    for (size_t i = 0; i < n_types && !ok; i++)
        ok = strcmp(types[i], type) == 0;
    const char *id = json_string_value(json_object_get(json_object_get(e, "metadata"), "task_id"));
    return ok && (!task || (id && strcmp(id, task) == 0));
}

/* Appends to list the events of store after seq `after` that pass the
 * filters, until it holds limit; *last gets the last seq read. */
static int events_collect(json_t *list, int64_t *last, gw_request *rq, const store_run *run,
                          int64_t after, size_t limit, char *const *types, size_t n_types) {
    *last = after;
    for (;;) {
        store_event *ev = NULL;
        size_t n = 0;
        int r = store_event_read(rq->g->st, &ev, &n, run->run_id, *last, RUN_FETCH_MAX);
        for (size_t i = 0; i < n; i++) {
            json_t *e = r == 0 ? event_json(run, &ev[i]) : NULL;
            if (e && json_array_size(list) < limit &&
                event_wanted(e, types, n_types, gw_query(rq, "task_id")))
                json_array_append(list, e);
            json_decref(e);
            *last = ev[i].seq;
            free(ev[i].data);
        }
        free(ev);
        if (r < 0 || n < RUN_FETCH_MAX || json_array_size(list) >= limit)
            return r;
    }
}

static int route_run_events(gw_request *rq) {
    int64_t limit = 0, after = 0, last = 0;
    int r = gw_query_int(&limit, rq, "limit", EVENTS_LIMIT_DEFAULT, 1, EVENTS_LIMIT_MAX);
    if (r == 0)
        r = gw_query_int(&after, rq, "after_seq", 0, 0, INT64_MAX);
    char *types_text = strdup(gw_query(rq, "event_types") ?: "");
    char *types[EVENTS_TYPES_MAX];
    size_t n_types = 0;
    for (char *save = NULL, *t = strtok_r(types_text, ",", &save); r == 0 && t;
         t = strtok_r(NULL, ",", &save))
        if (n_types < EVENTS_TYPES_MAX)
            types[n_types++] = t;
        else
            r = fawn_err(FAWN_EINVAL, "event_types names at most %d types", EVENTS_TYPES_MAX);
    if (r == FAWN_EINVAL || !types_text) {
        free(types_text);
        return types_text ? gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg())
                          : FAWN_ENOMEM;
    }
    store_run run;
    r = run_resolve(&run, rq);
    json_t *list = json_array();
    if (r == 0 && list)
        r = events_collect(list, &last, rq, &run, after, (size_t)limit, types, n_types);
    store_run_clear(&run);
    free(types_text);
    if (r < 0 || !list) {
        json_decref(list);
        return r < 0 ? r : FAWN_ENOMEM;
    }
    return gw_respond_json(rq, MHD_HTTP_OK, list);
}

#define RUN_BODY GW_BODY_BUFFER, GW_JSON_BODY_MAX, NULL
#define NO_BODY GW_BODY_NONE, 0, NULL

const gw_route gw_run_routes[] = {
    {"POST", "/api/threads/{}/runs", route_run_create, AUTHZ_RUNS_CREATE, RUN_BODY},
    {"POST", "/api/threads/{}/runs/stream", route_run_stream, AUTHZ_RUNS_CREATE, RUN_BODY},
    {"POST", "/api/threads/{}/runs/wait", route_run_wait, AUTHZ_RUNS_CREATE, RUN_BODY},
    {"GET", "/api/threads/{}/runs", route_run_list, AUTHZ_RUNS_READ, NO_BODY},
    {"GET", "/api/threads/{}/runs/{}", route_run_get, AUTHZ_RUNS_READ, NO_BODY},
    {"GET", "/api/threads/{}/runs/{}/join", route_run_join, AUTHZ_RUNS_READ, NO_BODY},
    {"GET", "/api/threads/{}/runs/{}/stream", route_run_join_stream, AUTHZ_RUNS_READ, NO_BODY},
    {"GET", "/api/threads/{}/runs/{}/receipts", route_run_receipts, AUTHZ_RUNS_READ, NO_BODY},
    {"GET", "/api/threads/{}/runs/{}/events", route_run_events, AUTHZ_RUNS_READ, NO_BODY},
    {"GET", "/api/threads/{}/runs/{}/workspace-changes", route_run_workspace_changes,
     AUTHZ_RUNS_READ, NO_BODY},
    {"POST", "/api/threads/{}/runs/{}/cancel", route_run_cancel, AUTHZ_RUNS_CANCEL, NO_BODY},
    {"POST", "/api/runs", route_stateless_run, AUTHZ_RUNS_CREATE, RUN_BODY},
    {"POST", "/api/runs/stream", route_stateless_stream, AUTHZ_RUNS_CREATE, RUN_BODY},
    {"POST", "/api/runs/wait", route_stateless_wait, AUTHZ_RUNS_CREATE, RUN_BODY},
};
const size_t gw_run_routes_count = ARRAY_LEN(gw_run_routes);
