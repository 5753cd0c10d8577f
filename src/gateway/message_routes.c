/* What a thread's message rows tell. GET /api/threads/{id}/messages/page:
 * its messages one page at a time, newest first (DeerFlow's canonical chat
 * history); each row is a message of the thread's newest state with its
 * thread-global sequence number; a page goes backwards from before_seq.
 * GET /api/threads/{id}/token-usage: what its model answers cost. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/internal.h"

/* Messages a page holds unless the client asks otherwise (DeerFlow's). */
#define PAGE_DEFAULT 50
/* Who wrote a message, as DeerFlow names callers: the lead agent (a run's
 * input, replies and tool results), or a client's state update. */
#define CALLER_RUN "lead_agent"
#define CALLER_CLIENT "client"

/* Appends one row: {"run_id","seq","content","metadata","created_at"}, the
 * stored message spliced in as it is (never parsed again). */
static int row_append(fbuf *out, const store_message *m) {
    char created[40];
    gw_iso_time(created, m->created_at_ms);
    json_t *env = json_pack("{s:s, s:I, s:{s:s}, s:s}", "run_id", m->run_id, "seq",
                            (json_int_t)m->seq, "metadata", "caller",
                            m->run_id[0] ? CALLER_RUN : CALLER_CLIENT, "created_at", created);
    char *text = env ? json_dumps(env, JSON_COMPACT) : NULL;
    json_decref(env);
    int r = text ? fbuf_printf(out, "{\"content\":%s,%s", m->body, text + 1)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    free(text);
    return r;
}

/* {"data": [rows, oldest first], "has_more", "next_before_seq"}: the next
 * page goes on before the oldest row of this one. */
static int page_compose(fbuf *out, const store_message *m, size_t n, bool more) {
    int r = fbuf_printf(out, "{\"data\":[");
    for (size_t i = 0; r == 0 && i < n; i++) {
        r = i ? fbuf_printf(out, ",") : 0;
        if (r == 0)
            r = row_append(out, &m[i]);
    }
    if (r == 0 && more && n)
        r = fbuf_printf(out, "],\"has_more\":true,\"next_before_seq\":%" PRId64 "}", m[0].seq);
    else if (r == 0)
        r = fbuf_printf(out, "],\"has_more\":false,\"next_before_seq\":null}");
    return r;
}

static int page_args(int64_t *before, int64_t *limit, gw_request *rq) {
    *before = *limit = 0;
    if (gw_query(rq, "after_seq"))
        return fawn_err(FAWN_EINVAL, "after_seq is not supported: pages go backwards (before_seq)");
    int r = gw_query_int(before, rq, "before_seq", 0, 1, INT64_MAX);
    return r < 0 ? r : gw_query_int(limit, rq, "limit", PAGE_DEFAULT, 1, STORE_MESSAGES_PAGE_MAX);
}

static int route_messages_page(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    store_thread_clear(&t);
    if (r < 0)
        return r;
    int64_t before, limit;
    if (page_args(&before, &limit, rq) < 0)
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg());
    store_message *m = NULL;
    size_t n = 0;
    bool more = false;
    fbuf out = {0};
    r = store_message_page(rq->g->st, &m, &n, &more, rq->who.user.id, rq->params[0], before,
                           (size_t)limit, GW_STATE_MESSAGES_MAX);
    if (r == 0)
        r = page_compose(&out, m, n, more);
    for (size_t i = 0; i < n; i++)
        store_message_clear(&m[i]);
    free(m);
    if (r < 0) {
        fbuf_free(&out);
        return r;
    }
    return gw_queue(rq, MHD_HTTP_OK, gw_json_text_response(fbuf_steal(&out)));
}

/* The model of the thread's latest run that counted a lead call (the
 * entry of its token_usage), else the first configured one. */
static const model_entry *thread_model(gw_request *rq, const char *thread_id) {
    store_run *runs = NULL;
    size_t n = 0;
    const model_registry *models = app_models(rq->g->app);
    const char *name = NULL;
    json_t *usage = NULL;
    if (store_run_list(rq->g->st, &runs, &n, rq->who.user.id, thread_id, 1, 0) == 0 && n)
        usage = json_loads(runs[0].token_usage, 0, NULL);
    size_t i;
    json_t *e;
    json_array_foreach(usage, i, e) {
        const char *caller = json_string_value(json_object_get(e, "caller"));
        if (!name && caller && strcmp(caller, "lead") == 0)
            name = json_string_value(json_object_get(e, "model"));
    }
    const model_entry *model = name ? model_registry_get(models, name) : NULL;
    json_decref(usage);
    for (i = 0; i < n; i++)
        store_run_clear(&runs[i]);
    free(runs);
    return model ? model : model_registry_resolve(models, NULL);
}

/* DeerFlow's context_usage: what the thread's newest state takes of its
 * model's context window (agent_context_tokens), or null when the model
 * has no context_window. */
static int context_usage_json(json_t **out, gw_request *rq, const char *thread_id) {
    *out = NULL;
    const model_entry *model = thread_model(rq, thread_id);
    if (!model || !model->context_window)
        return 0;
    json_t *values = NULL;
    char checkpoint[STORE_RUN_ID_MAX + 1];
    int64_t tokens = 0;
    int r = agent_state_load(&values, checkpoint, rq->g->st, rq->who.user.id, thread_id);
    if (r == 0)
        r = agent_context_tokens(&tokens, values);
    json_decref(values);
    /* A percentage to a tenth (rounded down), as DeerFlow gives it. */
    double percent = (double)(tokens * 1000 / model->context_window) / 10;
    *out = r == 0 ? json_pack("{s:I, s:I, s:f}", "token_count", (json_int_t)tokens,
                              "max_context_tokens", (json_int_t)model->context_window, "percentage",
                              percent)
                  : NULL;
    return r;
}

/* DeerFlow's ThreadTokenUsageResponse (store_thread_token_usage). */
static json_t *usage_json(const char *thread_id, const store_token_usage *u, json_t *context) {
    json_t *by_model = json_object();
    for (size_t i = 0; by_model && i < u->n_models; i++)
        json_object_set_new(by_model, u->models[i].model,
                            json_pack("{s:I, s:I}", "tokens", (json_int_t)u->models[i].tokens,
                                      "runs", (json_int_t)u->models[i].runs));
    return json_pack("{s:s, s:I, s:I, s:I, s:I, s:o?, s:{s:I, s:I, s:I}, s:o?}", "thread_id",
                     thread_id, "total_tokens", (json_int_t)u->total_tokens, "total_input_tokens",
                     (json_int_t)u->input_tokens, "total_output_tokens",
                     (json_int_t)u->output_tokens, "total_runs", (json_int_t)u->runs, "by_model",
                     by_model, "by_caller", "lead_agent", (json_int_t)u->lead_agent_tokens,
                     "subagent", (json_int_t)u->subagent_tokens, "middleware",
                     (json_int_t)u->middleware_tokens, "context_usage", context);
}

static int route_token_usage(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    store_thread_clear(&t);
    store_token_usage u;
    json_t *context = NULL;
    if (r == 0)
        r = store_thread_token_usage(rq->g->st, &u, rq->who.user.id, rq->params[0]);
    if (r == 0)
        r = context_usage_json(&context, rq, rq->params[0]);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, usage_json(rq->params[0], &u, context));
}

const gw_route gw_message_routes[] = {
    {"GET", "/api/threads/{}/messages/page", route_messages_page, AUTHZ_RUNS_READ, GW_BODY_NONE, 0,
     NULL},
    {"GET", "/api/threads/{}/token-usage", route_token_usage, AUTHZ_THREADS_READ, GW_BODY_NONE, 0,
     NULL},
};
const size_t gw_message_routes_count = ARRAY_LEN(gw_message_routes);
