/* /api/scheduled-tasks: the signed-in user's scheduled tasks, in the
 * shapes of DeerFlow's router (routers/scheduled_tasks.py). Every route
 * names the caller as the owner to the store, so another user's task id
 * is 404, for reading, changing and triggering alike. Schedules are
 * checked by src/schedule (sched_validate); a bad field is 422 naming it.
 * Runs start in the application core (app_schedule_trigger, and the
 * scheduler), never here. */
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "gateway/internal.h"
#include "schedule/schedule.h"

/* A page of a task's runs: DeerFlow's default and bound. */
#define TASK_RUNS_DEFAULT 50

/* ---- answers ---- */

static json_t *time_or_null(int64_t ms) {
    if (!ms)
        return json_null();
    char when[40];
    gw_iso_time(when, ms);
    return json_string(when);
}

static json_t *text_or_null(const char *s) { return s && *s ? json_string(s) : json_null(); }

static json_t *task_json(const store_task *t) {
    char owner[24];
    snprintf(owner, sizeof owner, "%lld", (long long)t->owner_id);
    bool once = strcmp(t->schedule_type, SCHED_KIND_ONCE) == 0;
    return json_pack(
        "{s:s, s:s, s:o, s:s, s:s, s:s, s:s, s:s, s:{s:s}, s:s, s:s, s:o, s:s, s:o, s:o, s:o, s:o, "
        "s:o, s:I, s:o, s:o}",
        "id", t->id, "user_id", owner, "thread_id", text_or_null(t->thread_id), "context_mode",
        t->context_mode, "assistant_id", "lead_agent", "title", t->title ? t->title : "", "prompt",
        t->prompt ? t->prompt : "", "schedule_type", t->schedule_type, "schedule_spec",
        once ? "run_at" : "cron", t->schedule_spec, "timezone", t->timezone, "status", t->status,
        "stop_reason", text_or_null(t->stop_reason), "overlap_policy", "skip", "next_run_at",
        time_or_null(t->next_run_at_ms), "last_run_at", time_or_null(t->last_run_at_ms),
        "last_run_id", text_or_null(t->last_run_id), "last_thread_id",
        text_or_null(t->last_thread_id), "last_error", text_or_null(t->last_error), "run_count",
        (json_int_t)t->run_count, "created_at", time_or_null(t->created_at_ms), "updated_at",
        time_or_null(t->updated_at_ms));
}

static json_t *task_run_json(const store_task_run *r) {
    char by[24];
    snprintf(by, sizeof by, "%lld", (long long)r->triggered_by);
    return json_pack(
        "{s:s, s:s, s:s, s:o, s:o, s:s, s:o, s:s, s:o, s:o, s:o, s:o}", "id", r->id, "task_id",
        r->task_id, "thread_id", r->thread_id, "run_id", text_or_null(r->run_id), "scheduled_for",
        time_or_null(r->scheduled_for_ms), "trigger", r->trigger, "triggered_by",
        r->triggered_by ? json_string(by) : json_null(), "status", r->status, "error",
        text_or_null(r->error), "started_at", time_or_null(r->started_at_ms), "finished_at",
        time_or_null(r->ended_at_ms), "created_at", time_or_null(r->created_at_ms));
}

static int respond_task(gw_request *rq, const store_task *t) {
    json_t *body = task_json(t);
    return body ? gw_respond_json(rq, MHD_HTTP_OK, body) : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Answers a list of tasks (cleared and freed). */
static int respond_tasks(gw_request *rq, store_task *tasks, size_t n, int r) {
    json_t *list = r == 0 ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        if (list)
            json_array_append_new(list, task_json(&tasks[i]));
        store_task_clear(&tasks[i]);
    }
    free(tasks);
    if (r < 0)
        return r;
    return list ? gw_respond_json(rq, MHD_HTTP_OK, list) : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* A store or schedule error as DeerFlow answers it: bad input 422. */
static int answer_error(gw_request *rq, int r) {
    if (r == FAWN_EINVAL)
        return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg());
    if (r == FAWN_E2BIG)
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, fawn_errmsg());
    return r;
}

/* ---- reading a body ---- */

/* The string field key of body into *out (NULL when absent). FAWN_EINVAL
 * naming it when present and not a string (null counts as absent). */
static int body_text(const char **out, const json_t *body, const char *key) {
    const json_t *v = json_object_get(body, key);
    *out = json_string_value(v);
    if (v && !json_is_null(v) && !json_is_string(v))
        return fawn_err(FAWN_EINVAL, "%s must be a string", key);
    return 0;
}

/* Copies text into dst (size bytes); FAWN_EINVAL naming field when empty
 * or too long. */
static int field_copy(char *dst, size_t size, const char *text, const char *field) {
    if (!text[0] || strlen(text) >= size)
        return fawn_err(FAWN_EINVAL, "%s must be 1 to %zu bytes", field, size - 1);
    memcpy(dst, text, strlen(text) + 1);
    return 0;
}

/* A malloc'd copy of a required text field (1..max bytes of UTF-8). */
static int field_dup(char **dst, const char *text, const char *field, size_t max) {
    if (!text || !text[0] || strlen(text) > max || !fawn_utf8_valid(text, strlen(text)))
        return fawn_err(FAWN_EINVAL, "%s must be 1 to %zu bytes of text", field, max);
    free(*dst);
    *dst = strdup(text);
    return *dst ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* schedule_spec's text for kind: {"cron": "..."} or {"run_at": "..."}. */
static int spec_read(char *dst, size_t size, const json_t *spec, const char *kind) {
    bool once = strcmp(kind, SCHED_KIND_ONCE) == 0;
    const char *key = once ? "run_at" : "cron";
    if (!json_is_object(spec))
        return fawn_err(FAWN_EINVAL, "schedule_spec must be an object with %s", key);
    const char *text = json_string_value(json_object_get(spec, key));
    if (!text)
        return fawn_err(FAWN_EINVAL, "%s schedule requires schedule_spec.%s (a string)", kind, key);
    if (once)
        return field_copy(dst, size, text, "schedule_spec.run_at");
    return sched_cron_normalize(dst, size, text) < 0
               ? fawn_err(FAWN_EINVAL, "schedule_spec.cron: %s", fawn_errmsg())
               : 0;
}

/* context_mode and thread_id of t from body (each only when present):
 * reuse_thread needs a thread of the caller's (404 otherwise);
 * fresh_thread_per_run has none. */
static int context_read(store_task *t, gw_request *rq, const json_t *body) {
    const char *mode, *thread;
    int r = body_text(&mode, body, "context_mode");
    if (r == 0)
        r = body_text(&thread, body, "thread_id");
    if (r == 0 && mode && strcmp(mode, "fresh_thread_per_run") != 0 &&
        strcmp(mode, "reuse_thread") != 0)
        r = fawn_err(FAWN_EINVAL, "context_mode must be fresh_thread_per_run or reuse_thread");
    if (r == 0 && mode)
        snprintf(t->context_mode, sizeof t->context_mode, "%s", mode);
    if (r == 0 && thread && !fawn_id_valid(thread))
        r = fawn_err(FAWN_EINVAL, "thread_id must match [A-Za-z0-9_-]{1,64}");
    if (r == 0 && thread)
        snprintf(t->thread_id, sizeof t->thread_id, "%s", thread);
    if (r < 0)
        return r;
    if (strcmp(t->context_mode, "fresh_thread_per_run") == 0) {
        t->thread_id[0] = '\0';
        return 0;
    }
    if (!t->thread_id[0])
        return fawn_err(FAWN_EINVAL, "reuse_thread requires thread_id");
    store_thread th;
    r = store_thread_get(rq->g->st, &th, rq->who.user.id, t->thread_id);
    store_thread_clear(&th);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "Thread not found") : r;
}

/* title, prompt, schedule_spec and timezone of t from body, each when
 * present (all required when creating). */
static int fields_read(store_task *t, const json_t *body, bool create) {
    const char *title, *prompt, *zone;
    int r = body_text(&title, body, "title");
    if (r == 0)
        r = body_text(&prompt, body, "prompt");
    if (r == 0)
        r = body_text(&zone, body, "timezone");
    if (r == 0 && (title || create))
        r = field_dup(&t->title, title, "title", STORE_TASK_TITLE_MAX);
    if (r == 0 && (prompt || create))
        r = field_dup(&t->prompt, prompt, "prompt", STORE_TASK_PROMPT_MAX);
    if (r == 0 && (zone || create))
        r = zone ? field_copy(t->timezone, sizeof t->timezone, zone, "timezone")
                 : fawn_err(FAWN_EINVAL, "timezone is required");
    const json_t *spec = json_object_get(body, "schedule_spec");
    if (r == 0 && (spec || create))
        r = spec_read(t->schedule_spec, sizeof t->schedule_spec, spec, t->schedule_type);
    return r;
}

/* Sets t's next run from its schedule at now (422 naming what is wrong);
 * a task that had ended and now has a run ahead is enabled again. */
static int schedule_arm(store_task *t) {
    int r = sched_validate(&t->next_run_at_ms, t->schedule_type, t->schedule_spec, t->timezone,
                           fawn_wall_ms());
    if (r == 0 && (strcmp(t->status, "completed") == 0 || strcmp(t->status, "stopped") == 0)) {
        snprintf(t->status, sizeof t->status, "enabled");
        free(t->stop_reason);
        t->stop_reason = NULL;
    }
    return r;
}

/* ---- routes ---- */

/* The caller's task of the route's first capture. */
static int task_resolve(store_task *out, gw_request *rq) {
    *out = (store_task){0};
    const char *id = rq->params[0];
    if (strlen(id) > STORE_TASK_ID_MAX || !fawn_id_valid(id))
        return fawn_err(FAWN_ENOENT, "Scheduled task not found");
    return store_task_get(rq->g->st, out, rq->who.user.id, id);
}

static int route_task_list(gw_request *rq) {
    store_task *tasks;
    size_t n;
    int r = store_task_list(rq->g->st, &tasks, &n, rq->who.user.id, NULL);
    return respond_tasks(rq, tasks, n, r);
}

static int route_thread_tasks(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    store_task *tasks = NULL;
    size_t n = 0;
    if (r == 0)
        r = store_task_list(rq->g->st, &tasks, &n, rq->who.user.id, t.id);
    store_thread_clear(&t);
    return respond_tasks(rq, tasks, n, r);
}

/* A new task from a create body. */
static int task_from(store_task *t, gw_request *rq, const json_t *body) {
    *t = (store_task){.owner_id = rq->who.user.id};
    char hex[37];
    fawn_random_uuid(hex);
    snprintf(t->id, sizeof t->id, "task-%.8s%.4s%.4s%.4s%.12s", hex, hex + 9, hex + 14, hex + 19,
             hex + 24);
    snprintf(t->status, sizeof t->status, "enabled");
    snprintf(t->context_mode, sizeof t->context_mode, "fresh_thread_per_run");
    const char *kind;
    int r = body_text(&kind, body, "schedule_type");
    if (r == 0 && (!kind || (strcmp(kind, SCHED_KIND_ONCE) != 0 && strcmp(kind, SCHED_KIND_CRON))))
        r = fawn_err(FAWN_EINVAL, "schedule_type must be once or cron");
    if (r == 0)
        snprintf(t->schedule_type, sizeof t->schedule_type, "%s", kind);
    if (r == 0)
        r = fields_read(t, body, true);
    if (r == 0)
        r = context_read(t, rq, body);
    return r == 0 ? schedule_arm(t) : r;
}

static int route_task_create(gw_request *rq) {
    json_t *body;
    store_task t = {0};
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = task_from(&t, rq, body);
    json_decref(body);
    if (r == 0)
        r = store_task_create(rq->g->st, &t);
    if (r == 0) {
        app_schedule_kick(rq->g->app);
        r = respond_task(rq, &t);
    }
    store_task_clear(&t);
    return r < 0 ? answer_error(rq, r) : 0;
}

static int route_task_get(gw_request *rq) {
    store_task t;
    int r = task_resolve(&t, rq);
    if (r == 0)
        r = respond_task(rq, &t);
    store_task_clear(&t);
    return r;
}

/* Changes what a PATCH body names; a changed schedule or zone re-arms
 * the task. schedule_type cannot change (as DeerFlow). */
static int task_patch(store_task *t, gw_request *rq, const json_t *body) {
    if (json_object_get(body, "schedule_type"))
        return fawn_err(FAWN_EINVAL, "schedule_type cannot be changed");
    int r = fields_read(t, body, false);
    if (r == 0)
        r = context_read(t, rq, body);
    if (r == 0 && (json_object_get(body, "schedule_spec") || json_object_get(body, "timezone")))
        r = schedule_arm(t);
    return r;
}

static int route_task_patch(gw_request *rq) {
    json_t *body = NULL;
    store_task t;
    int r = task_resolve(&t, rq);
    if (r == 0)
        r = gw_body_json(&body, rq);
    if (r == 0)
        r = task_patch(&t, rq, body);
    json_decref(body);
    if (r == 0)
        r = store_task_update(rq->g->st, &t);
    if (r == 0) {
        app_schedule_kick(rq->g->app);
        r = respond_task(rq, &t);
    }
    store_task_clear(&t);
    return r < 0 ? answer_error(rq, r) : 0;
}

static int route_task_delete(gw_request *rq) {
    store_task t;
    int r = task_resolve(&t, rq);
    if (r == 0)
        r = store_task_delete(rq->g->st, rq->who.user.id, t.id);
    if (r == 0)
        r = gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:s, s:b}", "id", t.id, "deleted", 1));
    store_task_clear(&t);
    return r;
}

/* Pause: the scheduler skips it. Resume: enabled again from now on (a
 * cron task's next occurrence after now; a once task keeps its time, and
 * one whose time has passed cannot resume). */
static int set_status(gw_request *rq, bool pause) {
    store_task t;
    int r = task_resolve(&t, rq);
    if (r == 0 && pause)
        snprintf(t.status, sizeof t.status, "paused");
    else if (r == 0 && strcmp(t.schedule_type, SCHED_KIND_CRON) == 0)
        r = schedule_arm(&t);
    else if (r == 0 && t.next_run_at_ms <= fawn_wall_ms())
        r = fawn_err(FAWN_EINVAL, "schedule_spec.run_at has passed: change it to resume");
    if (r == 0 && !pause) {
        snprintf(t.status, sizeof t.status, "enabled");
        free(t.stop_reason);
        t.stop_reason = NULL;
    }
    if (r == 0)
        r = store_task_update(rq->g->st, &t);
    if (r == 0) {
        app_schedule_kick(rq->g->app);
        r = respond_task(rq, &t);
    }
    store_task_clear(&t);
    return r < 0 ? answer_error(rq, r) : 0;
}

static int route_task_pause(gw_request *rq) { return set_status(rq, true); }
static int route_task_resume(gw_request *rq) { return set_status(rq, false); }

/* A trial run now, as the caller (who must own the task: the store is
 * asked for the caller's task only), under the scheduled-run budget:
 * 409 when its previous run is active or the budget is full. */
static int route_task_trigger(gw_request *rq) {
    const char *id = rq->params[0];
    if (strlen(id) > STORE_TASK_ID_MAX || !fawn_id_valid(id))
        return fawn_err(FAWN_ENOENT, "Scheduled task not found");
    enum app_trigger how;
    char run_id[37], thread_id[65];
    int r = app_schedule_trigger(&how, run_id, thread_id, rq->g->app, &rq->who.user, id);
    if (r == FAWN_ENOENT || r == FAWN_EPERM)
        return r;
    if (r < 0)
        return gw_respond_detail(rq, MHD_HTTP_BAD_GATEWAY, fawn_errmsg());
    if (how == APP_TRIGGER_ACTIVE)
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, "task already has an active run");
    if (how == APP_TRIGGER_FULL)
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, "global concurrent-run limit reached");
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:s, s:b, s:s, s:s}", "id", id, "triggered", 1, "run_id",
                                     run_id, "thread_id", thread_id));
}

static int route_task_runs(gw_request *rq) {
    int64_t limit = 0, offset = 0;
    int r = gw_query_int(&limit, rq, "limit", TASK_RUNS_DEFAULT, 1, STORE_TASK_RUNS_LIST_MAX);
    if (r == 0)
        r = gw_query_int(&offset, rq, "offset", 0, 0, INT32_MAX);
    if (r < 0)
        return answer_error(rq, r);
    store_task t;
    r = task_resolve(&t, rq);
    store_task_clear(&t);
    store_task_run *runs = NULL;
    size_t n = 0;
    if (r == 0)
        r = store_task_run_list(rq->g->st, &runs, &n, rq->who.user.id, rq->params[0], (size_t)limit,
                                (size_t)offset);
    json_t *list = r == 0 ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        if (list)
            json_array_append_new(list, task_run_json(&runs[i]));
        store_task_run_clear(&runs[i]);
    }
    free(runs);
    if (r < 0)
        return r;
    return list ? gw_respond_json(rq, MHD_HTTP_OK, list) : fawn_err(FAWN_ENOMEM, "out of memory");
}

#define TASK_BODY GW_BODY_BUFFER, GW_JSON_BODY_MAX, NULL
#define NO_BODY GW_BODY_NONE, 0, NULL

const gw_route gw_schedule_routes[] = {
    {"GET", "/api/scheduled-tasks", route_task_list, AUTHZ_THREADS_READ, NO_BODY},
    {"POST", "/api/scheduled-tasks", route_task_create, AUTHZ_THREADS_WRITE, TASK_BODY},
    {"GET", "/api/scheduled-tasks/{}", route_task_get, AUTHZ_THREADS_READ, NO_BODY},
    {"PATCH", "/api/scheduled-tasks/{}", route_task_patch, AUTHZ_THREADS_WRITE, TASK_BODY},
    {"DELETE", "/api/scheduled-tasks/{}", route_task_delete, AUTHZ_THREADS_WRITE, NO_BODY},
    {"POST", "/api/scheduled-tasks/{}/pause", route_task_pause, AUTHZ_THREADS_WRITE, NO_BODY},
    {"POST", "/api/scheduled-tasks/{}/resume", route_task_resume, AUTHZ_THREADS_WRITE, NO_BODY},
    {"POST", "/api/scheduled-tasks/{}/trigger", route_task_trigger, AUTHZ_THREADS_WRITE, NO_BODY},
    {"GET", "/api/scheduled-tasks/{}/runs", route_task_runs, AUTHZ_THREADS_READ, NO_BODY},
    {"GET", "/api/threads/{}/scheduled-tasks", route_thread_tasks, AUTHZ_THREADS_READ, NO_BODY},
};
const size_t gw_schedule_routes_count = ARRAY_LEN(gw_schedule_routes);
