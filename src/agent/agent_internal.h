/* The run loop's insides: the run's state and the hook chain. Only the
 * agent's own files include this. */
#ifndef FAWN_AGENT_INTERNAL_H
#define FAWN_AGENT_INTERNAL_H

#include "agent/agent.h"
#include "tools/tools.h"

/* One model call as hooks see it. */
typedef struct agent_model_call {
    json_t *request;   /* OpenAI messages: this call's own array, whose elements are
                          shared with later calls: hooks replace elements, never edit them */
    json_t *tools;     /* tool schemas offered */
    model_reply reply; /* filled by the call */
    enum model_failure why;
    int code;          /* 0, or the failure's FAWN_E* (its message in error) */
    char *error;
    struct agent_loop *run;
    char ai_id[40];    /* the id the reply's message gets (and its streamed chunks) */
    bool streamed;     /* text of the reply went out as chunks */
} agent_model_call;

/* One tool call as hooks see it. */
typedef struct agent_tool_call {
    const char *id;
    const char *name;
    const json_t *args;
    tool_result result;
    int code;          /* a tool that failed outright (not its status): FAWN_E* */
} agent_tool_call;

typedef struct agent_loop {
    const agent_params *p;
    const model_entry *model;
    json_t *values;     /* the thread state: {messages, title?, artifacts} */
    json_t *messages;   /* values.messages (borrowed) */
    json_t *tools;      /* schemas of the tools the role may use */
    json_t *request;    /* the system prompt and messages[0..request_upto) in request form */
    size_t request_upto;
    tool_env env;
    sbx_decision decision;
    char scope[SBX_SCOPE_MAX + 1];
    unsigned model_calls;
    char checkpoint_id[STORE_RUN_ID_MAX + 1]; /* the last one written */
    bool stop;              /* a hook ended the run after this step */
    char stop_reason[32];
    char *error;            /* set by a hook: the run ends with status error */
    /* hook state */
    json_t *reads;          /* read-before-write: path → sha256 of the file as read */
    json_t *presented;      /* paths presented with present_files */
    json_t *outputs_before; /* delivery check: outputs when the sandbox was first used */
    json_t *recent_calls;   /* loop detection: hashes of the latest tool calls */
    bool empty_retried;
} agent_loop;

/* A hook: any member may be NULL. wrap_* call agent_next_model/tool with
 * `next` to go on down the chain (or do not, to answer themselves). */
typedef struct agent_hook {
    const char *name;
    void (*before_agent)(agent_loop *run);
    void (*before_model)(agent_loop *run, agent_model_call *call);
    void (*wrap_model)(agent_loop *run, agent_model_call *call, size_t next);
    void (*after_model)(agent_loop *run, json_t *ai_message);
    void (*wrap_tool)(agent_loop *run, agent_tool_call *call, size_t next);
    void (*after_agent)(agent_loop *run);
} agent_hook;

/* The chain, in order (hooks.c). before_* and wrap_* run first to last
 * (the first wrap is outermost); after_* run last to first. */
extern const agent_hook *const agent_hooks[];
extern const size_t agent_hooks_count;

extern const agent_hook hook_input_sanitization, hook_dangling_tool_calls, hook_model_errors,
    hook_empty_final_retry, hook_finish_reasons, hook_loop_detection, hook_tool_output_budget,
    hook_tool_authorization, hook_read_before_write, hook_clarification, hook_tool_errors,
    hook_title, hook_delivery_check;

/* Continues a model call at hook index next (the model itself at the end). */
void agent_next_model(agent_loop *run, agent_model_call *call, size_t next);
/* Continues a tool call at hook index next (the tool itself at the end). */
void agent_next_tool(agent_loop *run, agent_tool_call *call, size_t next);

/* Ends the run after this step with stop_reason (and error, when not NULL:
 * the run's status becomes error). */
void agent_stop(agent_loop *run, const char *stop_reason, const char *error_fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Emits a custom event {type, ...fields} (fields stolen, may be NULL). */
void agent_emit_custom(agent_loop *run, const char *type, json_t *fields);
/* A box command run once (not in the run's session) on the run's sandbox:
 * stdout into *out (caller frees). */
int agent_box_exec(char **out, agent_loop *run, const char *command);
/* Writes text to a file in the sandbox. */
int agent_box_write(agent_loop *run, const char *path, const char *text);

/* Records what outputs holds (the delivery check's "before"); called when
 * the run first takes its sandbox. */
void agent_delivery_snapshot(agent_loop *run);

/* {"type":"ai", ...} with id from a model reply (new). */
json_t *agent_ai_message(const model_reply *reply, const char *model_name, const char *id);
/* {"type":"tool", ...} from a tool result (new). */
json_t *agent_tool_message(const agent_tool_call *call);
/* Appends to request the OpenAI request form of messages[from..]: human →
 * user, ai → assistant with tool_calls, tool → a JSON projection
 * {"tool_status", "output"} of its status and exact text. */
int agent_request_extend(json_t *request, const json_t *messages, size_t from);

#endif
