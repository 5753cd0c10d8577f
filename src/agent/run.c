/* The run loop (agent.h): model call, tool calls, checkpoint; repeat. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"

/* 30 s: the run's own bookkeeping commands in the sandbox (snapshots). */
#define AGENT_BOX_CALL_TIMEOUT_MS 30000

static const char system_prompt[] =
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

static bool cancelled(const agent_loop *run) {
    return run->p->cancel && atomic_load(&run->p->cancel->cancelled);
}

void agent_stop(agent_loop *run, const char *stop_reason, const char *error_fmt, ...) {
    run->stop = true;
    snprintf(run->stop_reason, sizeof run->stop_reason, "%s", stop_reason);
    if (error_fmt && !run->error) {
        va_list ap;
        va_start(ap, error_fmt);
        if (vasprintf(&run->error, error_fmt, ap) < 0)
            run->error = NULL;
        va_end(ap);
    }
}

/* Hands text (taken) to the run's event receiver. */
static void emit_text(agent_loop *run, const char *event, char *text) {
    if (text && run->p->emit)
        run->p->emit(run->p->emit_ctx, event, text);
    else
        free(text);
}

static void emit(agent_loop *run, const char *event, json_t *data) {
    emit_text(run, event, data ? json_dumps(data, JSON_COMPACT) : NULL);
    json_decref(data);
}

void agent_emit_custom(agent_loop *run, const char *type, json_t *fields) {
    json_t *data = fields ? fields : json_object();
    json_object_set_new(data, "type", json_string(type));
    emit(run, "custom", data);
}

/* A new message as the three stream modes carry it. */
/* A messages-tuple event: [message or chunk, metadata]. */
static void emit_tuple(agent_loop *run, const char *node, json_t *msg) {
    emit(run, "messages",
         json_pack("[O, {s:s, s:s, s:s}]", msg, "langgraph_node", node, "run_id", run->p->run_id,
                   "thread_id", run->p->thread_id));
}

static void emit_message(agent_loop *run, const char *node, json_t *msg) {
    emit_tuple(run, node, msg);
    emit(run, "updates", json_pack("{s:{s:[O]}}", node, "messages", msg));
}

/* Streamed text of the reply being generated, as an AIMessageChunk of the
 * message it will become (same id). */
static void model_delta_event(void *ctx, const char *text, size_t len) {
    agent_model_call *call = ctx;
    json_t *chunk = json_pack("{s:s, s:s%, s:s, s:[], s:{}, s:{}}", "type", "AIMessageChunk",
                              "content", text, len, "id", call->ai_id, "tool_call_chunks",
                              "additional_kwargs", "response_metadata");
    emit_tuple(call->run, "model", chunk);
    json_decref(chunk);
    call->streamed = true;
}

/* The end of a streamed reply: a last chunk with its tool calls and finish
 * reason (its text has gone out as it came). */
static void emit_stream_end(agent_loop *run, const json_t *ai) {
    json_t *chunk = json_pack("{s:s, s:s, s:O, s:O, s:O, s:{}}", "type", "AIMessageChunk",
                              "content", "", "id", json_object_get(ai, "id"), "tool_calls",
                              json_object_get(ai, "tool_calls"), "response_metadata",
                              json_object_get(ai, "response_metadata"), "additional_kwargs");
    emit_tuple(run, "model", chunk);
    json_decref(chunk);
}



/* ---- the sandbox, for hooks ---- */

int agent_box_exec(char **out, agent_loop *run, const char *command) {
    *out = NULL;
    sbx_lease *lease;
    int r = tool_env_lease(&lease, &run->env);
    json_t *body = r == 0 ? json_pack("{s:s, s:i}", "command", command, "timeout_s", 30) : NULL;
    json_t *reply = NULL;
    int status = 0;
    if (r == 0)
        r = body ? sbx_call(&reply, &status, lease, "POST", "/v1/shell/exec", body,
                            AGENT_BOX_CALL_TIMEOUT_MS)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    const char *text = json_string_value(json_object_get(reply, "stdout"));
    if (r == 0 && (status != 200 || !text ||
                   json_integer_value(json_object_get(reply, "exit_code")) != 0))
        r = fawn_err(FAWN_EIO, "sandbox command failed (%d)", status);
    if (r == 0 && !(*out = strdup(text)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(reply);
    return r;
}

int agent_box_write(agent_loop *run, const char *path, const char *text) {
    json_t *body = json_pack("{s:s, s:s}", "path", path, "content", text);
    json_t *reply = NULL;
    int status = 0;
    int r = body ? tool_box_call(&reply, &status, &run->env, "POST", "/v1/file/write", body,
                                 AGENT_BOX_CALL_TIMEOUT_MS)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    json_decref(reply);
    return r == 0 && status != 200 ? fawn_err(FAWN_EIO, "sandbox write failed (%d)", status) : r;
}

/* ---- the chain ---- */

static void model_retry_event(void *ctx, const model_retry_info *info) {
    agent_model_call *call = ctx;
    agent_emit_custom(call->run, "llm_retry",
                      json_pack("{s:i, s:i, s:I, s:s, s:s}", "attempt", info->attempt,
                                "max_attempts", info->max_attempts, "wait_ms",
                                (json_int_t)info->wait_ms, "reason", info->reason, "message",
                                info->message));
}

/* The model itself: the end of the wrap_model chain. */
static void call_model(agent_loop *run, agent_model_call *call) {
    model_reply_clear(&call->reply);
    free(call->error);
    call->error = NULL;
    model_request req = {.conversation = run->messages, .messages = call->request,
                         .tools = call->tools, .call_index = run->model_calls++};
    model_hooks hooks = {.on_retry = model_retry_event, .on_delta = model_delta_event,
                         .ctx = call};
    call->code = model_entry_complete(&call->reply, &call->why, run->model, &req, &hooks,
                                      run->p->cancel ? &run->p->cancel->cancelled : NULL);
    if (call->code < 0)
        call->error = strdup(fawn_errmsg());
}

void agent_next_model(agent_loop *run, agent_model_call *call, size_t next) {
    for (size_t i = next; i < agent_hooks_count; i++)
        if (agent_hooks[i]->wrap_model) {
            agent_hooks[i]->wrap_model(run, call, i + 1);
            return;
        }
    call_model(run, call);
}

void agent_next_tool(agent_loop *run, agent_tool_call *call, size_t next) {
    for (size_t i = next; i < agent_hooks_count; i++)
        if (agent_hooks[i]->wrap_tool) {
            agent_hooks[i]->wrap_tool(run, call, i + 1);
            return;
        }
    tool_result_clear(&call->result);
    call->code = tool_run(&call->result, &run->env, call->name, call->args);
}

/* ---- state ---- */

static int load_state(agent_loop *run) {
    return agent_state_load(&run->values, run->checkpoint_id, run->p->st, run->p->owner_id,
                            run->p->thread_id);
}

/* Writes the state as a new checkpoint (source: input, model, loop or
 * final). With state_out, its state reference is handed there (the caller
 * frees it): the values event carries it. */
static int checkpoint(agent_loop *run, const char *source, int step, char **state_out) {
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
    char *state = NULL;
    int r = checkpoint(run, source, step, &state);
    emit_text(run, "values", state);
    return r;
}

/* The schemas of the tools the run's role may use. */
static json_t *allowed_tools(const agent_params *p) {
    json_t *list = json_array();
    for (size_t i = 0; list && i < tool_count(); i++) {
        const tool_def *t = tool_at(i);
        if (authz_check(p->policy, p->role, AUTHZ_TOOLS, t->name) == 0)
            json_array_append_new(list, tool_openai_schema(t));
    }
    return list;
}

static void record_receipt(agent_loop *run, const agent_tool_call *call) {
    store_receipt rc = {0};
    snprintf(rc.run_id, sizeof rc.run_id, "%s", run->p->run_id);
    snprintf(rc.tool_call_id, sizeof rc.tool_call_id, "%s", call->id);
    snprintf(rc.tool_name, sizeof rc.tool_name, "%s", call->name);
    snprintf(rc.status, sizeof rc.status, "%s", tool_outcome_name(call->result.status.outcome));
    char *args = json_dumps(call->args, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY);
    fawn_sha256_hex(rc.args_sha256, args ? args : "", args ? strlen(args) : 0);
    free(args);
    const char *text = call->result.text ? call->result.text : "";
    fawn_sha256_hex(rc.output_sha256, text, strlen(text));
    rc.output_bytes = (int64_t)strlen(text);
    if (store_receipt_add(run->p->st, &rc) < 0)
        log_warn("agent", "run %s: receipt of %s not recorded: %s", run->p->run_id, call->id,
                 fawn_errmsg());
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
    for (size_t i = 0; i < agent_hooks_count; i++)
        if (agent_hooks[i]->before_model)
            agent_hooks[i]->before_model(run, &call);
    agent_next_model(run, &call, 0);
    json_t *ai = NULL;
    if (call.code == 0 && call.reply.message) {
        ai = agent_ai_message(&call.reply, run->model->name, call.ai_id);
        for (size_t i = agent_hooks_count; ai && i-- > 0;)
            if (agent_hooks[i]->after_model)
                agent_hooks[i]->after_model(run, ai);
    } else if (!run->error && !cancelled(run)) {
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
        emit(run, "updates", json_pack("{s:{s:[O]}}", "model", "messages", ai));
    } else {
        emit_message(run, "model", ai);
    }
    return ai;
}

/* Runs every tool call of ai through the hooks, appending the results. */
static void tool_step(agent_loop *run, const json_t *ai) {
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(ai, "tool_calls"), i, c) {
        agent_tool_call call = {
            .id = json_string_value(json_object_get(c, "id")) ?: "",
            .name = json_string_value(json_object_get(c, "name")) ?: "",
            .args = json_object_get(c, "args"),
        };
        if (cancelled(run))
            tool_fail(&call.result, TOOL_CANCELLED, "cancelled", false, "Error: cancelled");
        else
            agent_next_tool(run, &call, 0);
        json_t *msg = agent_tool_message(&call);
        record_receipt(run, &call);
        tool_result_clear(&call.result);
        if (msg) {
            json_array_append_new(run->messages, msg);
            emit_message(run, "tools", msg);
        }
    }
}

static void delivery_snapshot_on_acquire(void *ctx, tool_env *env) {
    (void)env;
    agent_delivery_snapshot(ctx);
}

static void run_setup(agent_loop *run, const agent_params *p) {
    agent_scope(run->scope, p->run_id);
    run->env = (tool_env){
        .sandboxes = p->sandboxes,
        .req = {.who = {.user = p->user_dir, .role = p->role}, .thread = p->thread_id,
                .kind = SBX_HOLD_EXECUTION, .scope = run->scope, .decision = &run->decision,
                .cancel = p->cancel},
        .cancel = p->cancel ? &p->cancel->cancelled : NULL,
        .command_timeout_s = p->command_timeout_s,
        .on_acquire = delivery_snapshot_on_acquire,
        .on_acquire_ctx = run,
    };
    run->reads = json_object();
    run->presented = json_array();
    run->request = json_pack("[{s:s, s:s}]", "role", "system", "content", system_prompt);
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
    free(run->error);
}

/* The loop; returns 0 or a store failure. */
static int run_loop(agent_loop *run) {
    int step = 0;
    while (!run->stop) {
        if (cancelled(run))
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
    const char *status = run->error ? "error" : cancelled(run) ? "interrupted" : "success";
    snprintf(out->status, sizeof out->status, "%s", status);
    snprintf(out->stop_reason, sizeof out->stop_reason, "%s", run->stop_reason);
    out->error = run->error;
    run->error = NULL;
    if (!out->error && cancelled(run))
        out->error = strdup("Run cancelled");
}

int agent_run(agent_outcome *out, const agent_params *p) {
    memset(out, 0, sizeof *out);
    agent_loop run = {.p = p};
    run.model = model_registry_resolve(p->models, p->model_name);
    if (!run.model)
        return fawn_err(FAWN_ENOENT, "no model is configured");
    run_setup(&run, p);
    int r = load_state(&run);
    run.messages = json_object_get(run.values, "messages");
    run.tools = r == 0 ? allowed_tools(p) : NULL;
    if (r == 0 && (!run.tools || !run.reads || !run.presented || !run.recent_calls || !run.request))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < agent_hooks_count; i++)
        if (agent_hooks[i]->before_agent)
            agent_hooks[i]->before_agent(&run);
    size_t k;
    json_t *m;
    json_array_foreach(r == 0 ? p->input : NULL, k, m) {
        json_array_append(run.messages, m);
        emit_message(&run, "input", m);
    }
    if (r == 0)
        r = checkpoint_and_emit(&run, "input", 0);
    if (r == 0)
        r = run_loop(&run);
    for (size_t i = agent_hooks_count; r == 0 && i-- > 0;)
        if (agent_hooks[i]->after_agent)
            agent_hooks[i]->after_agent(&run);
    if (r == 0)
        r = checkpoint_and_emit(&run, "final", -1);
    if (r == 0)
        outcome_fill(out, &run);
    run_free(&run);
    return r;
}
