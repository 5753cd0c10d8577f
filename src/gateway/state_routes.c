/* Thread state (LangGraph Platform shape): the latest checkpoint, its
 * history, updates by the client; and the one assistant, lead_agent. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "gateway/internal.h"

/* Checkpoints one history request returns unless the client asks otherwise,
 * and at most (DeerFlow's bounds). */
#define HISTORY_DEFAULT 10
#define HISTORY_MAX 100

static json_t *checkpoint_ref(const char *thread_id, const char *checkpoint_id) {
    if (!checkpoint_id || !checkpoint_id[0])
        return json_null();
    return json_pack("{s:s, s:s, s:s}", "thread_id", thread_id, "checkpoint_ns", "",
                     "checkpoint_id", checkpoint_id);
}

/* {next, tasks, metadata, created_at, checkpoint, parent_checkpoint,
 * checkpoint_id, parent_checkpoint_id, interrupts}: the state object
 * (LangGraph's objects and DeerFlow's flat ids) but its values. */
static json_t *state_fields(const char *thread_id, const store_checkpoint *cp) {
    char created[40] = "";
    json_t *meta = cp ? json_loads(cp->metadata, 0, NULL) : NULL;
    if (cp)
        gw_iso_time(created, cp->created_at_ms);
    const char *id = cp ? cp->checkpoint_id : NULL;
    const char *parent = cp && cp->parent_id[0] ? cp->parent_id : NULL;
    return json_pack("{s:[], s:[], s:o, s:s?, s:o, s:o, s:s?, s:s?, s:[]}", "next", "tasks",
                     "metadata", meta ? meta : json_object(), "created_at", cp ? created : NULL,
                     "checkpoint", checkpoint_ref(thread_id, id), "parent_checkpoint",
                     checkpoint_ref(thread_id, parent), "checkpoint_id", id, "parent_checkpoint_id",
                     parent, "interrupts");
}

/* Appends the state object of cp to out, its values the state read
 * (values, JSON text: spliced in as it is, not parsed again). */
static int state_append(fbuf *out, const char *thread_id, const store_checkpoint *cp,
                        const char *values) {
    json_t *fields = state_fields(thread_id, cp);
    char *text = fields ? json_dumps(fields, JSON_COMPACT) : NULL;
    json_decref(fields);
    int r = text ? fbuf_printf(out, "{\"values\":") : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = fbuf_append(out, values ? values : "{}", values ? strlen(values) : 2);
    if (r == 0)
        r = fbuf_printf(out, ",%s", text + 1); /* the fields, after their opening brace */
    free(text);
    return r;
}

/* Answers 200 with out's text (taken), or r. */
static int respond_text(gw_request *rq, fbuf *out, int r) {
    if (r < 0) {
        fbuf_free(out);
        return r;
    }
    return gw_queue(rq, MHD_HTTP_OK, gw_json_text_response(fbuf_steal(out)));
}

static int route_state_get(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    store_checkpoint cp;
    char *values = NULL;
    size_t omitted;
    fbuf out = {0};
    r = store_checkpoint_latest(rq->g->st, &cp, rq->who.user.id, t.id);
    if (r == 0)
        r = store_state_read(rq->g->st, &values, &omitted, rq->who.user.id, t.id, cp.state,
                             GW_STATE_MESSAGES_MAX);
    if (r == 0 || r == FAWN_ENOENT)
        r = state_append(&out, t.id, r == 0 ? &cp : NULL, values);
    free(values);
    store_checkpoint_clear(&cp);
    store_thread_clear(&t);
    return respond_text(rq, &out, r);
}

/* The checkpoint id a history request starts before: "before" as an id
 * or as a config {"configurable": {"checkpoint_id"}}. */
static const char *before_id(const json_t *body) {
    const json_t *before = json_object_get(body, "before");
    if (json_is_string(before))
        return json_string_value(before);
    return json_string_value(
        json_object_get(json_object_get(before, "configurable"), "checkpoint_id"));
}

/* The states of list[0..n) as a JSON array into out, while their messages
 * fit in GW_STATE_MESSAGES_MAX together: the first always (its older
 * messages left out if it alone is larger), a later one only whole. The
 * client asks for the next page before the last one answered. */
static int history_fill(fbuf *out, gw_request *rq, const char *thread_id,
                        const store_checkpoint *list, size_t n) {
    size_t used = 0;
    int r = fbuf_printf(out, "[");
    for (size_t i = 0; r == 0 && i < n; i++) {
        char *values = NULL;
        size_t omitted;
        r = store_state_read(rq->g->st, &values, &omitted, rq->who.user.id, thread_id,
                             list[i].state, GW_STATE_MESSAGES_MAX - used);
        if (r == 0 && i > 0 && omitted > 0) {
            free(values);
            break;
        }
        if (r == 0) {
            size_t len = strlen(values); /* its messages and a little more */
            used = len < GW_STATE_MESSAGES_MAX - used ? used + len : GW_STATE_MESSAGES_MAX;
            r = i > 0 ? fbuf_printf(out, ",") : 0;
        }
        if (r == 0)
            r = state_append(out, thread_id, &list[i], values);
        free(values);
    }
    return r == 0 ? fbuf_printf(out, "]") : r;
}

static int route_history(gw_request *rq) {
    static const char *const keys[] = {"limit", "before", "metadata", "checkpoint", NULL};
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    json_t *body = NULL;
    int64_t limit = HISTORY_DEFAULT;
    r = gw_body_json(&body, rq);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = fjson_get_int(&limit, body, "limit", false, 1, HISTORY_MAX);
    store_checkpoint *list = NULL;
    size_t n = 0;
    if (r == 0)
        r = store_checkpoint_list(rq->g->st, &list, &n, rq->who.user.id, t.id, before_id(body),
                                  (size_t)limit);
    json_decref(body);
    fbuf out = {0};
    if (r == 0)
        r = history_fill(&out, rq, t.id, list, n);
    for (size_t i = 0; i < n; i++)
        store_checkpoint_clear(&list[i]);
    free(list);
    store_thread_clear(&t);
    if (r == FAWN_EINVAL) {
        fbuf_free(&out);
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg());
    }
    return respond_text(rq, &out, r);
}

/* ---- updates ---- */

/* Replaces messages with the same id, appends the others (LangGraph's
 * add_messages). Every message must pass agent_message_check. */
static int merge_messages(json_t *stored, const json_t *update) {
    if (!json_is_array(update))
        return fawn_err(FAWN_EINVAL, "values.messages must be a list");
    size_t i;
    json_t *m;
    json_array_foreach(update, i, m) {
        char shown[40];
        snprintf(shown, sizeof shown, "values.messages[%zu]", i);
        int r = agent_message_check(m, shown);
        if (r < 0)
            return r;
        const char *id = json_string_value(json_object_get(m, "id"));
        bool replaced = false;
        size_t k;
        json_t *old;
        json_array_foreach(stored, k, old) {
            const char *old_id = json_string_value(json_object_get(old, "id"));
            if (!replaced && id && old_id && strcmp(id, old_id) == 0) {
                json_array_set(stored, k, m);
                replaced = true;
            }
        }
        if (!replaced)
            json_array_append(stored, m);
    }
    return 0;
}

static int apply_update(json_t *values, const json_t *update) {
    if (!json_is_object(update))
        return fawn_err(FAWN_EINVAL, "values must be an object");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)update, key, v) {
        int r = 0;
        if (strcmp(key, "messages") == 0)
            r = merge_messages(json_object_get(values, "messages"), v);
        else if (strcmp(key, "title") == 0 && (json_is_string(v) || json_is_null(v)))
            r = json_object_set(values, key, v);
        else
            r = fawn_err(FAWN_EINVAL, "values.%s cannot be updated", key);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The thread's state with update applied, saved as a new checkpoint whose
 * id goes to checkpoint_id. */
static int state_update(char checkpoint_id[STORE_RUN_ID_MAX + 1], gw_request *rq,
                        const char *thread_id, const json_t *update) {
    json_t *values = NULL;
    char parent[STORE_RUN_ID_MAX + 1];
    int r = agent_state_load(&values, parent, rq->g->st, rq->who.user.id, thread_id);
    if (r == 0)
        r = apply_update(values, update);
    if (r == 0)
        r = agent_state_save(checkpoint_id, NULL, rq->g->st, rq->who.user.id, thread_id, parent,
                             NULL, values, "{\"source\":\"update\"}");
    json_decref(values);
    return r;
}

static int route_state_update(gw_request *rq) {
    static const char *const keys[] = {"values", "as_node", "checkpoint", "checkpoint_id", NULL};
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    json_t *body = NULL;
    char id[STORE_RUN_ID_MAX + 1];
    r = runs_thread_busy(app_runs(rq->g->app), rq->who.user.id, t.id)
            ? fawn_err(FAWN_EBUSY, "Thread %s has a run in progress", t.id)
            : gw_body_json(&body, rq);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = state_update(id, rq, t.id, json_object_get(body, "values"));
    json_t *answer = r == 0 ? json_pack("{s:o}", "checkpoint", checkpoint_ref(t.id, id)) : NULL;
    json_decref(body);
    store_thread_clear(&t);
    if (r == FAWN_EINVAL)
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg());
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, answer);
}

/* ---- compaction on demand ---- */

/* DeerFlow's ThreadCompactResponse. */
static json_t *compact_json(const char *thread_id, const agent_compact_outcome *o) {
    return json_pack(
        "{s:s, s:b, s:s?, s:I, s:I, s:b, s:s?, s:I}", "thread_id", thread_id, "compacted",
        o->compacted, "reason", o->reason[0] ? o->reason : NULL, "removed_message_count",
        (json_int_t)o->removed_messages, "preserved_message_count",
        (json_int_t)o->preserved_messages, "summary_updated", o->compacted, "checkpoint_id",
        o->checkpoint_id[0] ? o->checkpoint_id : NULL, "total_tokens", (json_int_t)o->total_tokens);
}

/* Summarizes the thread's older messages for the model now (agent_compact)
 * with the model the body names ({force?, model_name?, agent_name?}: fawn
 * has one agent, agent_name changes nothing; force defaults to
 * true: whether or not the context passes compaction.trigger_ratio). The
 * model answers while the request waits (the model's own timeouts bound
 * it). 409 while a run is active or when compaction is disabled. */
static int route_compact(gw_request *rq) {
    static const char *const keys[] = {"force", "model_name", "agent_name", NULL};
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    json_t *body = NULL;
    bool force = true;
    const char *model = NULL;
    agent_compact_outcome o;
    r = runs_thread_busy(app_runs(rq->g->app), rq->who.user.id, t.id)
            ? fawn_err(FAWN_EBUSY, "Thread has a run in flight. Compact after the run finishes.")
            : gw_body_json(&body, rq);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = fjson_get_bool(&force, body, "force", false);
    if (r == 0)
        r = fjson_get_string(&model, body, "model_name", false);
    const model_entry *e = r == 0 ? model_registry_resolve(app_models(rq->g->app), model) : NULL;
    if (r == 0 && e)
        r = authz_check(app_policy(rq->g->app), rq->who.user.role, AUTHZ_MODELS, e->name);
    agent_params p = {.st = rq->g->st,
                      .models = app_models(rq->g->app),
                      .owner_id = rq->who.user.id,
                      .thread_id = t.id,
                      .model_name = e ? e->name : NULL,
                      .compaction = &app_config(rq->g->app)->compaction};
    if (r == 0)
        r = agent_compact(&o, &p, force);
    json_t *answer = r == 0 ? compact_json(t.id, &o) : NULL;
    json_decref(body);
    store_thread_clear(&t);
    if (r == FAWN_EINVAL)
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg());
    if (r == FAWN_EPERM && !p.compaction->enabled)
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, "Context compaction is disabled.");
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, answer);
}

/* ---- assistants ---- */

static json_t *assistant_json(void) {
    return json_pack("{s:s, s:s, s:s, s:s, s:{}, s:{}, s:{}, s:i, s:s, s:s}", "assistant_id",
                     AGENT_ASSISTANT_ID, "graph_id", AGENT_ASSISTANT_ID, "name", AGENT_ASSISTANT_ID,
                     "description",
                     "fawn's lead agent: works in the thread's sandbox with its tools", "config",
                     "metadata", "context", "version", 1, "created_at", "1970-01-01T00:00:00Z",
                     "updated_at", "1970-01-01T00:00:00Z");
}

static int route_assistants_search(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("[o]", assistant_json()));
}

static int route_assistant_get(gw_request *rq) {
    if (strcmp(rq->params[0], AGENT_ASSISTANT_ID) != 0)
        return fawn_err(FAWN_ENOENT, "Assistant not found");
    return gw_respond_json(rq, MHD_HTTP_OK, assistant_json());
}

const gw_route gw_state_routes[] = {
    {"GET", "/api/threads/{}/state", route_state_get, AUTHZ_THREADS_READ, GW_BODY_NONE, 0, NULL},
    {"POST", "/api/threads/{}/state", route_state_update, AUTHZ_THREADS_WRITE, GW_BODY_BUFFER,
     GW_JSON_BODY_MAX, NULL},
    {"POST", "/api/threads/{}/compact", route_compact, AUTHZ_THREADS_WRITE, GW_BODY_BUFFER,
     GW_JSON_BODY_MAX, NULL},
    {"POST", "/api/threads/{}/history", route_history, AUTHZ_THREADS_READ, GW_BODY_BUFFER,
     GW_JSON_BODY_MAX, NULL},
    {"POST", "/api/assistants/search", route_assistants_search, GW_SIGNED_IN, GW_BODY_BUFFER,
     GW_JSON_BODY_MAX, NULL},
    {"GET", "/api/assistants/{}", route_assistant_get, GW_SIGNED_IN, GW_BODY_NONE, 0, NULL},
};
const size_t gw_state_routes_count = ARRAY_LEN(gw_state_routes);
