/* The run loop (agent.h): model call, tool calls, checkpoint; repeat. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"

static const char lead_prompt[] =
    "You are fawn's lead agent. You work for the user in a Linux sandbox that holds this "
    "conversation's files:\n"
    "- /mnt/user-data/uploads: files the user gave you\n"
    "- /mnt/user-data/workspace: your scratch space\n"
    "- /mnt/user-data/outputs: files you hand back; present every file you create there with "
    "present_files before you finish\n"
    "Use absolute paths. Read a file before you change it. Tool results are JSON documents "
    "{\"tool_status\": {...}, \"output\": \"...\"}: the status tells whether the call worked. "
    "Ask for clarification when the request is ambiguous.";

void agent_outcome_clear(agent_outcome *o) {
    free(o->error);
    memset(o, 0, sizeof *o);
}

/* A new message as the three stream modes carry it (a sub-agent's: as a
 * task_running event). */
static void emit_message(agent_loop *run, const char *node, json_t *msg) {
    if (run->task) {
        agent_task_step(run->task, msg);
        return;
    }
    agent_emit_tuple(run, node, msg);
    agent_emit(run, "updates", json_pack("{s:{s:[O]}}", node, "messages", msg));
}

/* The end of a streamed reply: a last chunk with its tool calls and finish
 * reason (its text has gone out as it came). */
static void emit_stream_end(agent_loop *run, const json_t *ai) {
    json_t *chunk = json_pack("{s:s, s:s, s:O, s:O, s:O, s:{}}", "type", "AIMessageChunk",
                              "content", "", "id", json_object_get(ai, "id"), "tool_calls",
                              json_object_get(ai, "tool_calls"), "response_metadata",
                              json_object_get(ai, "response_metadata"), "additional_kwargs");
    agent_emit_tuple(run, "model", chunk);
    json_decref(chunk);
}

/* ---- state ---- */

/* The state the run starts from (its checkpoint_id, else the newest). */
static int load_state(agent_loop *run) {
    return agent_state_load_at(&run->values, run->checkpoint_id, run->p->st, run->p->owner_id,
                               run->p->thread_id, run->p->checkpoint_id);
}

/* Writes the state as a new checkpoint (source: input, model, loop or
 * final). With state_out, its state reference is handed there (the caller
 * frees it): the values event carries it. */
static int checkpoint(agent_loop *run, const char *source, int step, char **state_out) {
    if (run->task) /* a sub-agent's messages are its own, never the thread's */
        return 0;
    json_t *meta = json_pack("{s:s, s:i, s:s}", "source", source, "step", step, "run_id",
                             run->p->run_id);
    char *metadata = meta ? json_dumps(meta, JSON_COMPACT) : NULL;
    json_decref(meta);
    int r = agent_state_save(run->checkpoint_id, state_out, run->p->st, run->p->owner_id,
                             run->p->thread_id, run->checkpoint_id, run->p->run_id, run->values,
                             metadata);
    free(metadata);
    return r;
}

/* A checkpoint, then the values event with its state's reference. */
static int checkpoint_and_emit(agent_loop *run, const char *source, int step) {
    if (run->task)
        return 0;
    char *state = NULL;
    int r = checkpoint(run, source, step, &state);
    agent_emit_text(run, "values", state);
    return r;
}

static bool name_listed(const json_t *names, const char *name) {
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) {
        if (strcmp(json_string_value(n), name) == 0)
            return true;
    }
    return false;
}

/* Appends to list the pinned MCP tools the role may use (of names only,
 * when not NULL). */
static void mcp_tools_add(json_t *list, const agent_params *p, const json_t *names) {
    json_t *offered = json_array();
    mcp_tools_offered(offered, p->mcp, p->policy, p->role);
    size_t i;
    json_t *schema;
    json_array_foreach(offered, i, schema) {
        const char *name = json_string_value(
            json_object_get(json_object_get(schema, "function"), "name"));
        if (!names || name_listed(names, name))
            json_array_append(list, schema);
    }
    json_decref(offered);
}

/* The schemas of the tools the run's role may use: the built-in ones
 * offered (of names only, when not NULL), the pinned MCP tools, and task
 * when the run offers it. */
static json_t *allowed_tools(const agent_params *p, const json_t *names) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < tool_count(); i++) {
        const tool_def *t = tool_at(i);
        if ((!names || name_listed(names, t->name)) && tool_offered(t, p->web) &&
            !(p->no_clarification && strcmp(t->name, AGENT_CLARIFICATION_TOOL) == 0) &&
            authz_check(p->policy, p->role, AUTHZ_TOOLS, t->name) == 0)
            json_array_append_new(list, tool_openai_schema(t));
    }
    if (list && p->mcp)
        mcp_tools_add(list, p, names);
    if (list && agent_subagents_enabled(p->subagents) &&
        authz_check(p->policy, p->role, AUTHZ_TOOLS, AGENT_TASK_TOOL) == 0)
        json_array_append_new(list, agent_task_schema(p->subagents));
    return list;
}

static void record_receipt(agent_loop *run, const agent_tool_call *call) {
    store_receipt rc = {0};
    snprintf(rc.run_id, sizeof rc.run_id, "%s", run->p->run_id);
    if (run->task)
        agent_task_receipt_id(rc.tool_call_id, sizeof rc.tool_call_id, run->task, call->id);
    else
        snprintf(rc.tool_call_id, sizeof rc.tool_call_id, "%s", call->id);
    snprintf(rc.tool_name, sizeof rc.tool_name, "%s", call->name);
    snprintf(rc.status, sizeof rc.status, "%s", tool_outcome_name(call->result.status.outcome));
    char *args = json_dumps(call->args, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    fawn_sha256_hex(rc.args_sha256, args ? args : "", args ? strlen(args) : 0);
    free(args);
    const char *text = call->result.text ? call->result.text : "";
    fawn_sha256_hex(rc.output_sha256, text, strlen(text));
    rc.output_bytes = (int64_t)strlen(text);
    json_t *evidence = json_object_get(call->result.facts, "evidence");
    rc.evidence = evidence ? json_dumps(evidence, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (store_receipt_add(run->p->st, &rc) < 0)
        log_warn("agent", "run %s: receipt of %s not recorded: %s", run->p->run_id, call->id,
                 fawn_errmsg());
    free(rc.evidence);
}

/* ---- one step ---- */

/* Calls the model through the hooks; the AI message is appended. Returns
 * the message (borrowed) or NULL when the run must end. */
static json_t *model_step(agent_loop *run) {
    agent_model_call call = {.tools = run->tools, .run = run};
    agent_message_id(call.ai_id);
    if (agent_request_extend(run->request, run->messages, run->request_upto) == 0)
        run->request_upto = json_array_size(run->messages);
    call.request = json_copy(run->request);
    for (size_t i = 0; i < run->hooks_count && call.code == 0; i++)
        if (run->hooks[i]->before_model)
            run->hooks[i]->before_model(run, &call);
    if (call.code == 0)
        agent_next_model(run, &call, 0);
    json_t *ai = NULL;
    if (call.code == 0 && call.reply.message) {
        ai = agent_ai_message(&call.reply, run->model->name, call.ai_id);
        for (size_t i = run->hooks_count; ai && i-- > 0;)
            if (run->hooks[i]->after_model)
                run->hooks[i]->after_model(run, ai);
    } else if (!run->error && !agent_cancelled(run)) {
        agent_stop(run, "", "%s", call.error ? call.error : "the model call failed");
    }
    json_decref(call.request);
    model_reply_clear(&call.reply);
    free(call.error);
    if (!ai)
        return NULL;
    json_array_append_new(run->messages, ai);
    if (call.streamed) {
        emit_stream_end(run, ai);
        agent_emit(run, "updates", json_pack("{s:{s:[O]}}", "model", "messages", ai));
    } else {
        emit_message(run, "model", ai);
    }
    return ai;
}

/* Answers each call of calls[0..n) not answered yet, in order, through
 * the hooks. */
static void tools_call(agent_loop *run, agent_tool_call *calls, size_t n) {
    for (size_t i = 0; i < n; i++) {
        agent_tool_call *call = &calls[i];
        if (call->done)
            continue;
        if (agent_cancelled(run))
            call->code = tool_fail(&call->result, TOOL_CANCELLED, "cancelled", false,
                                   "Error: cancelled");
        else
            agent_next_tool(run, call, 0);
        call->done = true;
    }
}

/* Runs every tool call of ai through the hooks (the task calls first, at
 * the same time), appending the results in the order of the calls. */
static void tool_step(agent_loop *run, const json_t *ai) {
    const json_t *list = json_object_get(ai, "tool_calls");
    size_t n = json_array_size(list);
    agent_tool_call *calls = calloc(n ? n : 1, sizeof *calls);
    if (!calls) {
        agent_stop(run, "", "out of memory running the tool calls");
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const json_t *c = json_array_get(list, i);
        calls[i] = (agent_tool_call){
            .id = json_string_value(json_object_get(c, "id")) ?: "",
            .name = json_string_value(json_object_get(c, "name")) ?: "",
            .args = json_object_get(c, "args"),
        };
    }
    agent_tasks_run(run, calls, n);
    tools_call(run, calls, n);
    for (size_t i = 0; i < n; i++) {
        agent_tool_call *call = &calls[i];
        if (call->code < 0) /* not even an error text could be made: the message is empty */
            log_warn("agent", "run %s: tool %s gave no answer: %s", run->p->run_id, call->name,
                     fawn_errmsg());
        json_t *msg = agent_tool_message(call);
        record_receipt(run, call);
        tool_result_clear(&call->result);
        if (msg) {
            json_array_append_new(run->messages, msg);
            emit_message(run, "tools", msg);
        }
    }
    free(calls);
}

/* ---- the run's own hook points (model_step walks before_model and
 * after_model; run_context.c the wrap_* chains) ---- */

static void hooks_before_agent(agent_loop *run) {
    for (size_t i = 0; i < run->hooks_count; i++)
        if (run->hooks[i]->before_agent)
            run->hooks[i]->before_agent(run);
}

static void hooks_after_agent(agent_loop *run) {
    for (size_t i = run->hooks_count; i-- > 0;)
        if (run->hooks[i]->after_agent)
            run->hooks[i]->after_agent(run);
}

/* tool_env's on_acquire: the run has just taken its sandbox. */
static void hooks_sandbox_acquired(void *ctx, tool_env *env) {
    agent_loop *run = ctx;
    (void)env;
    for (size_t i = 0; i < run->hooks_count; i++)
        if (run->hooks[i]->sandbox_acquired)
            run->hooks[i]->sandbox_acquired(run);
}

/* The loop's tool environment (over run->scope, which the caller set with
 * its hooks), the hooks' own state and the system prompt. */
static void run_setup(agent_loop *run, const agent_params *p, const char *prompt) {
    run->env = (tool_env){
        .sandboxes = p->sandboxes,
        .req = {.who = {.user = p->user_dir, .role = p->role},
                .thread = p->thread_id,
                .kind = SBX_HOLD_EXECUTION,
                .scope = run->scope,
                .decision = &run->decision,
                .cancel = p->cancel},
        .cancel = p->cancel ? &p->cancel->cancelled : NULL,
        .command_timeout_s = p->command_timeout_s,
        .web = p->web,
        .on_acquire = hooks_sandbox_acquired,
        .on_acquire_ctx = run,
    };
    run->reads = json_object();
    run->presented = json_array();
    run->request = json_pack("[{s:s, s:s}]", "role", "system", "content", prompt);
    run->recent_calls = json_array();
}

static void run_free(agent_loop *run) {
    tool_env_end(&run->env);
    json_decref(run->values);
    json_decref(run->tools);
    json_decref(run->request);
    json_decref(run->reads);
    json_decref(run->presented);
    json_decref(run->outputs_before);
    json_decref(run->recent_calls);
    json_decref(run->skill_tools);
    free(run->uploads_note);
    free(run->memory_context);
    free(run->error);
}

/* The loop; returns 0 or a store failure. */
static int run_loop(agent_loop *run) {
    int step = 0;
    while (!run->stop) {
        if (agent_cancelled(run))
            return 0;
        if ((int)run->model_calls >= run->p->recursion_limit) {
            agent_stop(run, "recursion_limit", "Recursion limit of %d model calls reached",
                       run->p->recursion_limit);
            break;
        }
        json_t *ai = model_step(run);
        if (!ai)
            break;
        bool tools = json_array_size(json_object_get(ai, "tool_calls")) > 0;
        /* The model's reply is kept before its tools run: a crash during a
         * command loses no message (the next run answers the cut call). */
        int r = tools ? checkpoint(run, "model", step + 1, NULL) : 0;
        if (r < 0)
            return r;
        if (tools)
            tool_step(run, ai);
        r = checkpoint_and_emit(run, "loop", ++step);
        if (r < 0)
            return r;
        if (!tools)
            break;
    }
    return 0;
}

static void outcome_fill(agent_outcome *out, agent_loop *run) {
    const char *status = run->error ? "error" : agent_cancelled(run) ? "interrupted" : "success";
    snprintf(out->status, sizeof out->status, "%s", status);
    snprintf(out->stop_reason, sizeof out->stop_reason, "%s", run->stop_reason);
    out->error = run->error;
    out->model_calls = run->model_calls;
    snprintf(out->checkpoint_id, sizeof out->checkpoint_id, "%s", run->checkpoint_id);
    run->error = NULL;
    if (!out->error && agent_cancelled(run))
        out->error = strdup("Run cancelled");
}

int agent_run(agent_outcome *out, const agent_params *p) {
    memset(out, 0, sizeof *out);
    agent_loop run = {.p = p};
    run.model = model_registry_resolve(p->models, p->model_name);
    if (!run.model)
        return fawn_err(FAWN_ENOENT, "no model is configured");
    run.hooks = agent_hooks;
    run.hooks_count = agent_hooks_count;
    agent_scope(run.scope, p->run_id);
    run_setup(&run, p, lead_prompt);
    int r = load_state(&run);
    if (r == 0 && !run.checkpoint_id[0]) /* the thread's root: its state before any message */
        r = checkpoint(&run, "input", -1, NULL);
    run.messages = json_object_get(run.values, "messages");
    run.tools = r == 0 ? allowed_tools(p, NULL) : NULL;
    if (r == 0 && (!run.tools || !run.reads || !run.presented || !run.recent_calls || !run.request))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        hooks_before_agent(&run);
    size_t k;
    json_t *m;
    json_array_foreach(r == 0 ? p->input : NULL, k, m) {
        json_array_append(run.messages, m);
        emit_message(&run, "input", m);
    }
    if (r == 0 && p->title && json_object_set(run.values, "title", (json_t *)p->title) < 0)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = checkpoint_and_emit(&run, "input", 0);
    if (r == 0)
        r = run_loop(&run);
    if (r == 0)
        hooks_after_agent(&run);
    if (r == 0)
        r = checkpoint_and_emit(&run, "final", -1);
    if (r == 0)
        outcome_fill(out, &run);
    run_free(&run);
    return r;
}

/* ---- a sub-agent ---- */

void agent_task_end_clear(agent_task_end *end) {
    free(end->answer);
    free(end->error);
    memset(end, 0, sizeof *end);
}

/* The text of an AI message: its content string, or its text parts. */
static char *reply_text(const json_t *ai) {
    const json_t *content = json_object_get(ai, "content");
    if (json_is_string(content))
        return strdup(json_string_value(content));
    fbuf b = {0};
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        const char *text = json_string_value(json_object_get(part, "text"));
        if (text && fbuf_printf(&b, "%s", text) < 0) {
            fbuf_free(&b);
            return NULL;
        }
    }
    return b.data ? fbuf_steal(&b) : strdup("");
}

static void task_end_fill(agent_task_end *end, agent_loop *run) {
    end->cancelled = agent_cancelled(run);
    end->error = run->error;
    run->error = NULL;
    const json_t *last = json_array_get(run->messages, json_array_size(run->messages) - 1);
    if (!end->error && !end->cancelled &&
        strcmp(json_string_value(json_object_get(last, "type")) ?: "", "ai") == 0)
        end->answer = reply_text(last);
    if (!end->error && !end->cancelled && !end->answer)
        end->error = strdup(run->stop_reason[0] ? run->stop_reason : "no final answer");
}

void agent_task_loop(agent_task_end *end, const agent_params *p, agent_task *task,
                     const char *scope, const char *system_prompt, const json_t *tools,
                     const char *prompt) {
    memset(end, 0, sizeof *end);
    agent_loop run = {.p = p,
                      .task = task,
                      .caller = agent_task_caller(task),
                      .hooks = agent_task_hooks,
                      .hooks_count = agent_task_hooks_count};
    snprintf(run.scope, sizeof run.scope, "%s", scope);
    run.model = model_registry_resolve(p->models, p->model_name);
    run_setup(&run, p, system_prompt);
    char id[40];
    agent_message_id(id);
    run.values = json_pack("{s:[{s:s, s:s, s:s}], s:[]}", "messages", "type", "human", "content",
                           prompt, "id", id, "artifacts");
    run.messages = json_object_get(run.values, "messages");
    run.tools = allowed_tools(p, tools);
    if (!run.model || !run.values || !run.tools || !run.reads || !run.presented ||
        !run.recent_calls || !run.request) {
        end->error = strdup(run.model ? "out of memory" : "no model is configured");
        run_free(&run);
        return;
    }
    hooks_before_agent(&run);
    if (run_loop(&run) == 0)
        hooks_after_agent(&run);
    task_end_fill(end, &run);
    run_free(&run);
}
