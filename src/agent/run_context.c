/* What a hook may ask of its run (agent_internal.h): go on down the chain
 * (the model or the tool at its end), stop the run, emit an event, use the
 * run's sandbox. The run loop (run.c) and the hooks (hooks.c,
 * hooks_tools.c) call this file; it calls neither: it walks the chain the
 * run put in agent_loop.hooks. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"

bool agent_cancelled(const agent_loop *run) {
    if (run->task && agent_task_lead_cancelled(run->task))
        return true;
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

/* ---- events ---- */

void agent_emit_text(agent_loop *run, const char *event, char *text) {
    if (text && run->p->emit)
        run->p->emit(run->p->emit_ctx, event, text);
    else
        free(text);
}

void agent_emit(agent_loop *run, const char *event, json_t *data) {
    agent_emit_text(run, event, data ? json_dumps(data, JSON_COMPACT) : NULL);
    json_decref(data);
}

void agent_emit_tuple(agent_loop *run, const char *node, json_t *msg) {
    agent_emit(run, "messages",
               json_pack("[O, {s:s, s:s, s:s}]", msg, "langgraph_node", node, "run_id",
                         run->p->run_id, "thread_id", run->p->thread_id));
}

void agent_emit_custom(agent_loop *run, const char *type, json_t *fields) {
    json_t *data = fields ? fields : json_object();
    json_object_set_new(data, "type", json_string(type));
    agent_emit(run, "custom", data);
}

/* ---- the sandbox ---- */

int agent_box_exec(char **out, agent_loop *run, const char *command) {
    *out = NULL;
    sbx_lease *lease;
    int r = tool_env_lease(&lease, &run->env);
    json_t *body = r == 0 ? json_pack("{s:s, s:i}", "command", command, "timeout_s",
                                      AGENT_BOX_COMMAND_TIMEOUT_S)
                          : NULL;
    json_t *reply = NULL;
    int status = 0;
    if (r == 0)
        r = body ? sbx_call(&reply, &status, lease, "POST", "/v1/shell/exec", body,
                            AGENT_BOX_CALL_TIMEOUT_MS)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    const char *text = json_string_value(json_object_get(reply, "stdout"));
    if (r == 0 &&
        (status != 200 || !text || json_integer_value(json_object_get(reply, "exit_code")) != 0))
        r = fawn_err(FAWN_EIO, "sandbox command failed (%d)", status);
    if (r == 0 && !(*out = strdup(text)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(reply);
    return r;
}

int agent_box_list(json_t **entries, agent_loop *run, const char *dir) {
    *entries = NULL;
    json_t *body = json_pack("{s:s, s:i}", "path", dir, "max_depth", 1);
    json_t *reply = NULL;
    int status = 0;
    int r = body ? tool_box_call(&reply, &status, &run->env, "POST", "/v1/file/list", body,
                                 AGENT_BOX_CALL_TIMEOUT_MS)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    json_t *list = json_object_get(reply, "entries");
    if (r == 0 && (status != 200 || !json_is_array(list)))
        r = fawn_err(FAWN_EIO, "sandbox listing failed (%d)", status);
    if (r == 0)
        *entries = json_incref(list);
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

/* ---- the chain's ends: the model and the tool ---- */

/* Streamed text of the reply being generated, as an AIMessageChunk of the
 * message it will become (same id). */
static void model_delta_event(void *ctx, const char *text, size_t len) {
    agent_model_call *call = ctx;
    json_t *chunk = json_pack("{s:s, s:s%, s:s, s:[], s:{}, s:{}}", "type", "AIMessageChunk",
                              "content", text, len, "id", call->ai_id, "tool_call_chunks",
                              "additional_kwargs", "response_metadata");
    agent_emit_tuple(call->run, "model", chunk);
    json_decref(chunk);
    call->streamed = true;
}

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
    model_request req = {.conversation = run->messages,
                         .messages = call->request,
                         .tools = call->tools,
                         .call_index = run->model_calls++};
    /* A sub-agent's replies go out whole, as task_running events. */
    model_hooks hooks = {.on_retry = model_retry_event,
                         .on_delta = run->task ? NULL : model_delta_event,
                         .ctx = call};
    call->code = model_entry_complete(&call->reply, &call->why, run->model, &req, &hooks,
                                      run->p->cancel ? &run->p->cancel->cancelled : NULL);
    if (call->code < 0)
        call->error = strdup(fawn_errmsg());
    else
        agent_usage_add(run, NULL, run->model->name, &call->reply);
}

void agent_next_model(agent_loop *run, agent_model_call *call, size_t next) {
    for (size_t i = next; i < run->hooks_count; i++)
        if (run->hooks[i]->wrap_model) {
            run->hooks[i]->wrap_model(run, call, i + 1);
            return;
        }
    call_model(run, call);
}

void agent_next_tool(agent_loop *run, agent_tool_call *call, size_t next) {
    for (size_t i = next; i < run->hooks_count; i++)
        if (run->hooks[i]->wrap_tool) {
            run->hooks[i]->wrap_tool(run, call, i + 1);
            return;
        }
    tool_result_clear(&call->result);
    call->code = tool_run(&call->result, &run->env, call->name, call->args);
}
