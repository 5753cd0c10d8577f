/* Sub-agents: the task tool (agent_internal.h). The lead's task calls of
 * one reply start together, each on a thread of its own that walks the
 * hook chain; at its end, hook_subagents runs the sub-agent's own loop
 * (run.c agent_task_loop) in its own sandbox scope. The run's thread waits
 * for them, and stops the ones past their timeout or of a cancelled run. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"

/* The lead is told this much of a sub-agent's answer (and its sha256) or
 * error: a task's answer never reaches the output budget (12000), which
 * would write to the lead's sandbox from the task's thread. */
#define TASK_BRIEF_MAX 2000
/* Of an unknown type's name, the lead is shown this many bytes (a type's
 * name has at most 64). */
#define TYPE_NAME_SHOWN 64
/* How often the waiting run's thread looks at its cancel flag. */
#define TASK_WAIT_TICK_MS 100
/* The kill of a stopped sub-agent's command. */
#define TASK_KILL_TIMEOUT_MS 5000

typedef struct task_batch {
    pthread_mutex_t lock; /* the lead's event receiver, and `finished` */
    pthread_cond_t changed;
    agent_task *tasks;
    size_t n;
} task_batch;

struct agent_task {
    agent_loop *lead;
    task_batch *batch;
    agent_tool_call *call;
    const subagent_type *type; /* set once its arguments are read */
    unsigned index;            /* the run's n-th sub-agent: its scope */
    sbx_cancel cancel;         /* set to stop it: the run's cancel, or its timeout */
    atomic_bool timed_out;
    int64_t deadline_ms; /* set before its thread starts */
    bool finished;       /* under batch->lock */
    bool killed;         /* its scope's commands were killed (the run's thread only) */
    unsigned steps;      /* task_running events sent (its own thread only) */
    /* its model calls are counted under subagent:<type> (cut to AGENT_USAGE_CALLER_MAX) */
    char caller[sizeof "subagent:" + sizeof((subagent_type *)0)->name];
    pthread_t thread;
    bool thread_started;
};

/* ---- events (every one under the batch's lock: several threads emit) ---- */

/* agent_params' emit of a sub-agent: to the lead's receiver, in turn. */
static void task_emit(void *ctx, const char *event, char *data) {
    agent_task *t = ctx;
    const agent_params *p = t->lead->p;
    if (!data || !p->emit) {
        free(data);
        return;
    }
    pthread_mutex_lock(&t->batch->lock);
    p->emit(p->emit_ctx, event, data);
    pthread_mutex_unlock(&t->batch->lock);
}

/* A custom event {type, task_id, ...fields (stolen)}. */
static void task_event(agent_task *t, const char *type, json_t *fields) {
    json_t *data = fields ? fields : json_object();
    json_object_set_new(data, "type", json_string(type));
    json_object_set_new(data, "task_id", json_string(t->call->id));
    char *text = json_dumps(data, JSON_COMPACT);
    json_decref(data);
    task_emit(t, "custom", text);
}

void agent_task_step(agent_task *task, const json_t *msg) {
    unsigned n = ++task->steps;
    task_event(
        task, "task_running",
        json_pack("{s:O, s:i, s:i}", "message", msg, "message_index", n, "total_messages", n));
}

/* ---- the lead's view ---- */

bool agent_task_lead_cancelled(const agent_task *task) { return agent_cancelled(task->lead); }

const char *agent_task_caller(const agent_task *task) { return task->caller; }

void agent_task_receipt_id(char *out, size_t size, const agent_task *task, const char *call_id) {
    snprintf(out, size, "%s/%s", task->call->id, call_id);
}

const json_t *agent_task_skills(const agent_task *task) {
    return task->type ? task->type->skills : NULL;
}

json_t *agent_task_schema(const agent_subagents *s) {
    fbuf d = {0};
    int r = fbuf_printf(&d, "Delegate a bounded task to a sub-agent that works in its own context "
                            "(it sees only your prompt) and its own shell session in this "
                            "conversation's sandbox, and answers you with a report. Several task "
                            "calls in one reply run at the same time: use them for independent "
                            "work. Sub-agent types:");
    json_t *names = json_array();
    for (size_t i = 0; r == 0 && names && i < agent_subagents_count(s); i++) {
        const subagent_type *t = agent_subagent_at(s, i);
        r = fbuf_printf(&d, "\n- %s: %s", t->name, t->description);
        json_array_append_new(names, json_string(t->name));
    }
    json_t *schema = r == 0 && names
                         ? json_pack("{s:s, s:{s:s, s:s%, s:{s:s, s:{s:{s:s, s:s}, s:{s:s, s:s}, "
                                     "s:{s:s, s:O}}, s:[s, s, s]}}}",
                                     "type", "function", "function", "name", AGENT_TASK_TOOL,
                                     "description", d.data, d.len, "parameters", "type", "object",
                                     "properties", "description", "type", "string", "description",
                                     "A short (3-5 word) description of the task", "prompt", "type",
                                     "string", "description",
                                     "Everything the sub-agent needs to do the task",
                                     "subagent_type", "type", "string", "enum", names, "required",
                                     "description", "prompt", "subagent_type")
                         : NULL;
    json_decref(names);
    fbuf_free(&d);
    return schema;
}

/* ---- one sub-agent, on its thread, at the end of the chain ---- */

static const char *arg_text(const json_t *args, const char *key) {
    const char *v = json_string_value(json_object_get(args, key));
    return v && *v ? v : NULL;
}

/* The types' names, for an unknown one. */
static char *type_names(const agent_subagents *s) {
    fbuf b = {0};
    for (size_t i = 0; i < agent_subagents_count(s); i++)
        if (fbuf_printf(&b, "%s%s", i ? ", " : "", agent_subagent_at(s, i)->name) < 0) {
            fbuf_free(&b);
            return NULL;
        }
    return fbuf_steal(&b);
}

/* The parameters of the sub-agent: the lead's, in a context of its own. */
static agent_params task_params(agent_task *t, const char *model) {
    agent_params p = *t->lead->p;
    p.model_name = model;
    p.recursion_limit = (int)t->type->max_turns;
    p.input = NULL;
    p.title = NULL;
    p.checkpoint_id = NULL;
    p.cancel = &t->cancel;
    p.emit = task_emit;
    p.emit_ctx = t;
    p.memory = NULL;
    p.subagents = NULL;
    return p;
}

/* What the sub-agent ended as: completed, failed, cancelled or timed_out. */
static const char *task_status(const agent_task *t, const agent_task_end *end) {
    if (atomic_load(&t->timed_out))
        return "timed_out";
    if (end->cancelled)
        return "cancelled";
    return end->answer ? "completed" : "failed";
}

/* The tool result the lead reads, and its facts (the task message's
 * additional_kwargs): status, brief, sha256 of the whole answer. */
static int task_result(tool_result *out, agent_task *t, const char *status,
                       const agent_task_end *end, const char *model) {
    bool cut = false;
    char sha[65] = "";
    char *brief = end->answer ? tool_truncate_middle(end->answer, TASK_BRIEF_MAX, &cut) : NULL;
    if (end->answer)
        fawn_sha256_hex(sha, end->answer, strlen(end->answer));
    int r;
    char *text = NULL;
    if (strcmp(status, "completed") == 0)
        r = tool_succeed(
            out, brief && asprintf(&text, "Task Succeeded. Result: %s", brief) >= 0 ? text : NULL);
    else if (strcmp(status, "timed_out") == 0)
        r = tool_fail(out, TOOL_TIMEOUT, "timeout", true,
                      "Task timed out. Error: the sub-agent did not finish within %u s",
                      t->type->timeout_s);
    else if (strcmp(status, "cancelled") == 0)
        r = tool_fail(out, TOOL_CANCELLED, "cancelled", false, "Task cancelled by user.");
    else
        r = tool_fail(out, TOOL_ERROR, "subagent_failed", true, "Task failed. Error: %.*s",
                      TASK_BRIEF_MAX, end->error ? end->error : "the sub-agent failed");
    out->status.truncated = cut;
    if (r == 0)
        out->facts = json_pack("{s:{s:s, s:s, s:s, s:s?, s:s?, s:s?}}", "subagent",
                               "subagent_status", status, "subagent_type", t->type->name,
                               "subagent_model_name", model, "subagent_result_brief", brief,
                               "subagent_result_sha256", sha[0] ? sha : NULL, "subagent_error",
                               end->answer ? NULL : end->error);
    free(brief);
    return r;
}

static void task_end_event(agent_task *t, const char *status, const tool_result *res) {
    const json_t *facts = json_object_get(res->facts, "subagent");
    char type[32];
    snprintf(type, sizeof type, "task_%s", status);
    task_event(t, type,
               json_pack("{s:s, s:O?, s:O?, s:O?}", "status", status, "result",
                         json_object_get(facts, "subagent_result_brief"), "error",
                         json_object_get(facts, "subagent_error"), "model_name",
                         json_object_get(facts, "subagent_model_name")));
}

static int task_execute(tool_result *out, agent_task *t) {
    const agent_subagents *s = t->lead->p->subagents;
    const char *description = arg_text(t->call->args, "description");
    const char *prompt = arg_text(t->call->args, "prompt");
    const char *type = arg_text(t->call->args, "subagent_type");
    if (!description || !prompt || !type)
        return tool_fail(out, TOOL_ERROR, "invalid_arguments", true,
                         "Error: task needs description, prompt and subagent_type (texts)");
    if (!(t->type = agent_subagent_type(s, type))) {
        char *names = type_names(s);
        int r = tool_fail(out, TOOL_ERROR, "invalid_arguments", true,
                          "Task failed. Error: Unknown subagent type '%.64s'. Available: %s", type,
                          names ? names : "");
        free(names);
        return r;
    }
    const char *model = t->type->model[0] ? t->type->model : t->lead->model->name;
    task_event(t, "task_started",
               json_pack("{s:s, s:s, s:s}", "description", description, "subagent_type",
                         t->type->name, "model_name", model));
    snprintf(t->caller, sizeof t->caller, "subagent:%s", t->type->name);
    agent_params p = task_params(t, model);
    char scope[SBX_SCOPE_MAX + 1];
    agent_task_scope(scope, p.run_id, t->index);
    agent_task_end end;
    agent_task_loop(&end, &p, t, scope, t->type->system_prompt, t->type->tools, prompt);
    const char *status = task_status(t, &end);
    int r = task_result(out, t, status, &end, model);
    if (r == 0)
        task_end_event(t, status, out);
    agent_task_end_clear(&end);
    return r;
}

static void subagents_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    if (!call->task || strcmp(call->name, AGENT_TASK_TOOL) != 0) {
        agent_next_tool(run, call, next);
        return;
    }
    tool_result_clear(&call->result);
    call->code = task_execute(&call->result, call->task);
}

const agent_hook hook_subagents = {.name = "subagents", .wrap_tool = subagents_wrap};

/* ---- the batch, on the run's thread ---- */

static void *task_main(void *arg) {
    agent_task *t = arg;
    agent_next_tool(t->lead, t->call, 0);
    pthread_mutex_lock(&t->batch->lock);
    t->finished = true;
    pthread_cond_broadcast(&t->batch->changed);
    pthread_mutex_unlock(&t->batch->lock);
    return NULL;
}

/* A task call past a limit: answered, never started. */
static void answer_limit(agent_tool_call *call, const char *what, unsigned limit,
                         const char *advice) {
    call->code = tool_fail(&call->result, TOOL_ERROR, "limit", true,
                           "Error: [SUBAGENT LIMIT REACHED] %s %u sub-agents; this task was not "
                           "started. %s",
                           what, limit, advice);
    call->done = true;
}

/* Stops t (its loop sees cancel) and kills its scope's command, once. */
static void task_stop(agent_task *t, bool timed_out) {
    if (timed_out)
        atomic_store(&t->timed_out, true);
    atomic_store(&t->cancel.cancelled, true);
    if (t->killed)
        return;
    t->killed = true;
    const agent_params *p = t->lead->p;
    char scope[SBX_SCOPE_MAX + 1];
    agent_task_scope(scope, p->run_id, t->index);
    int r = sbx_kill_scope(p->sandboxes, p->user_dir, p->thread_id, scope, TASK_KILL_TIMEOUT_MS);
    if (r < 0 && r != FAWN_ENOENT)
        log_warn("agent", "run %s: sub-agent %u's command not killed: %s", p->run_id, t->index,
                 fawn_errmsg());
}

/* Whether every started task has finished (lock held). */
static bool all_finished_locked(const task_batch *b) {
    for (size_t i = 0; i < b->n; i++)
        if (b->tasks[i].thread_started && !b->tasks[i].finished)
            return false;
    return true;
}

/* Waits until every task has finished, stopping the late ones and every
 * one of a cancelled run. */
static void batch_wait(agent_loop *run, task_batch *b) {
    pthread_mutex_lock(&b->lock);
    while (!all_finished_locked(b)) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += TASK_WAIT_TICK_MS * 1000000L;
        until.tv_sec += until.tv_nsec / 1000000000L;
        until.tv_nsec %= 1000000000L;
        pthread_cond_timedwait(&b->changed, &b->lock, &until);
        int64_t now = fawn_now_ms();
        bool cancelled = agent_cancelled(run);
        for (size_t i = 0; i < b->n; i++) {
            agent_task *t = &b->tasks[i];
            bool late = t->deadline_ms && now >= t->deadline_ms;
            if (t->thread_started && !t->finished && (cancelled || late)) {
                pthread_mutex_unlock(&b->lock);
                task_stop(t, late && !cancelled);
                pthread_mutex_lock(&b->lock);
            }
        }
    }
    pthread_mutex_unlock(&b->lock);
}

/* Gives each admitted task call its task; the others are answered. */
static size_t batch_admit(agent_loop *run, task_batch *b, agent_tool_call *calls, size_t n) {
    const fawn_subagents_config *lim = agent_subagents_limits(run->p->subagents);
    size_t admitted = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(calls[i].name, AGENT_TASK_TOOL) != 0)
            continue;
        if (admitted >= lim->max_concurrent)
            answer_limit(&calls[i], "one reply starts at most", lim->max_concurrent,
                         "Call it again once the others have answered.");
        else if (run->tasks_started >= lim->max_per_run)
            answer_limit(&calls[i], "a run starts at most", lim->max_per_run,
                         "Do the rest yourself.");
        else {
            agent_task *t = &b->tasks[admitted++];
            *t = (agent_task){
                .lead = run, .batch = b, .call = &calls[i], .index = ++run->tasks_started};
            calls[i].task = t;
        }
    }
    return admitted;
}

void agent_tasks_run(agent_loop *run, agent_tool_call *calls, size_t n) {
    if (run->task || !agent_subagents_enabled(run->p->subagents))
        return;
    size_t wanted = 0;
    for (size_t i = 0; i < n; i++)
        wanted += strcmp(calls[i].name, AGENT_TASK_TOOL) == 0;
    if (!wanted)
        return;
    task_batch b = {.tasks = calloc(wanted, sizeof *b.tasks)};
    if (!b.tasks) /* each task call goes through the chain on the run's thread: an error */
        return;
    pthread_mutex_init(&b.lock, NULL);
    pthread_cond_init(&b.changed, NULL);
    b.n = batch_admit(run, &b, calls, n);
    for (size_t i = 0; i < b.n; i++) {
        agent_task *t = &b.tasks[i];
        const subagent_type *type = agent_subagent_type(
            run->p->subagents, json_string_value(json_object_get(t->call->args, "subagent_type")));
        uint32_t timeout_s = type ? type->timeout_s
                                  : agent_subagents_limits(run->p->subagents)->timeout_s;
        t->deadline_ms = fawn_now_ms() + (int64_t)timeout_s * 1000;
        t->thread_started = pthread_create(&t->thread, NULL, task_main, t) == 0;
        if (!t->thread_started)
            t->call->code = tool_fail(&t->call->result, TOOL_ERROR, "internal", true,
                                      "Error: the sub-agent could not be started");
    }
    batch_wait(run, &b);
    for (size_t i = 0; i < b.n; i++) {
        if (b.tasks[i].thread_started)
            pthread_join(b.tasks[i].thread, NULL);
        b.tasks[i].call->done = true;
        b.tasks[i].call->task = NULL;
    }
    pthread_cond_destroy(&b.changed);
    pthread_mutex_destroy(&b.lock);
    free(b.tasks);
}
