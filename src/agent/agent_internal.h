/* The run loop's insides: the run's state and the hook chain. Only the
 * agent's own files include this.
 *
 * The files call one way, downward:
 *   runs.c → run.c → hooks.c → hooks_tools.c → run_context.c
 * run.c also calls run_context.c and messages.c; runs.c calls
 * hooks_memory.c's agent_memory_extract after a run; the gateway calls
 * hooks_compact.c's agent_compact; every model call is counted through
 * usage.c (agent_usage_add, agent_usage_count); the hooks reach the run
 * only through run_context.c (agent_next_model/tool, agent_stop, events,
 * the sandbox), which walks the chain run.c put in agent_loop.hooks. */
#ifndef FAWN_AGENT_INTERNAL_H
#define FAWN_AGENT_INTERNAL_H

#include "agent/agent.h"
#include "tools/tools.h"
#include "skills/skills.h"
#include "base/base.h"

/* One model call as hooks see it. */
typedef struct agent_model_call {
    json_t *request;   /* OpenAI messages: this call's own array, whose elements are
                          shared with later calls: hooks replace elements, never edit them */
    json_t *tools;     /* tool schemas offered */
    model_reply reply; /* filled by the call */
    enum model_failure why;
    int code; /* 0, or the failure's FAWN_E* (its message in error) */
    char *error;
    struct agent_loop *run;
    char ai_id[40]; /* the id the reply's message gets (and its streamed chunks) */
    bool streamed;  /* text of the reply went out as chunks */
} agent_model_call;

/* One sub-agent at work (hooks_subagents.c). */
typedef struct agent_task agent_task;

/* One tool call as hooks see it. */
typedef struct agent_tool_call {
    const char *id;
    const char *name;
    const json_t *args;
    tool_result result;
    int code;         /* the tool, or a hook answering for it, failed outright: FAWN_E* */
    agent_task *task; /* a task call started by agent_tasks_run: the sub-agent it runs */
    bool done;        /* answered already (agent_tasks_run): the run loop leaves it */
} agent_tool_call;

/* A hook: any member may be NULL. before_* and sandbox_acquired run first
 * to last in the chain; wrap_* nest, the first outermost: each calls
 * agent_next_model/tool with `next` to go on down the chain (or does not,
 * to answer itself); after_* run last to first. A before_model that sets
 * call->code (and call->error, malloc'd) fails the call: the hooks after it
 * and the model are not called, and the run ends with that error. The
 * chain and the order each point runs it in are in hooks.c (agent_hooks).
 *
 * The task calls of one reply walk wrap_tool at the same time, each on a
 * thread of its own (agent_tasks_run), while the run's thread waits: for a
 * call to a tool it does not handle, a wrap_tool reads the run's state and
 * never changes it. */
typedef struct agent_hook {
    const char *name;
    void (*before_agent)(struct agent_loop *run);
    void (*sandbox_acquired)(struct agent_loop *run); /* the run has just taken its sandbox */
    void (*before_model)(struct agent_loop *run, agent_model_call *call);
    void (*wrap_model)(struct agent_loop *run, agent_model_call *call, size_t next);
    void (*after_model)(struct agent_loop *run, json_t *ai_message);
    void (*wrap_tool)(struct agent_loop *run, agent_tool_call *call, size_t next);
    void (*after_agent)(struct agent_loop *run);
} agent_hook;

typedef struct agent_loop {
    const agent_params *p;
    const agent_hook *const *hooks; /* the chain the run walks: agent_hooks */
    size_t hooks_count;
    const model_entry *model;
    json_t *values;   /* the thread state: {messages, title?, artifacts} */
    json_t *messages; /* values.messages (borrowed) */
    json_t *tools;    /* schemas of the tools the role may use */
    json_t *request;  /* the system prompt and messages[0..request_upto) in request form */
    size_t request_upto;
    tool_env env;
    sbx_decision decision;
    char scope[SBX_SCOPE_MAX + 1];
    unsigned model_calls;
    char checkpoint_id[STORE_RUN_ID_MAX + 1]; /* the last one written */
    bool stop;                                /* a hook ended the run after this step */
    char stop_reason[32];
    char *error; /* set by a hook: the run ends with status error */
    /* hook state */
    json_t *reads;          /* read-before-write: path → sha256 of the file as read */
    json_t *presented;      /* paths presented with present_files */
    json_t *outputs_before; /* delivery check: outputs when the sandbox was first used */
    json_t *recent_calls;   /* loop detection: hashes of the latest tool calls */
    bool empty_retried;
    bool uploads_checked; /* uploads: the input's attachments were looked up */
    char *uploads_note;   /* uploads: what the model is told of them, or NULL */
    bool memory_checked;  /* memory: the owner's facts were read */
    char *memory_context; /* memory: the hidden context given to the model, or NULL */
    json_t *skill_tools;  /* skills: allowed-tools of the active skill, or NULL (no limit) */
    char skill[SKILLS_NAME_MAX + 1]; /* skills: the active skill's name, or "" */
    agent_task *task;                /* the sub-agent this loop runs, or NULL: the lead */
    unsigned tasks_started;          /* sub-agents the run has started (the lead's loop) */
    const char *caller;              /* token accounting: NULL (the lead) or "subagent:<type>" */
    bool compact_failed;             /* compaction: a summary failed; not tried again this run */
} agent_loop;

/* The chains (hooks.c): the order the lead's loop walks the hooks in, and
 * a sub-agent's. */
extern const agent_hook *const agent_hooks[];
extern const size_t agent_hooks_count;
extern const agent_hook *const agent_task_hooks[];
extern const size_t agent_task_hooks_count;

/* The hooks, by the file that defines them. */
extern const agent_hook hook_input_sanitization, hook_uploads, hook_dangling_tool_calls,
    hook_model_errors, hook_empty_final_retry, hook_finish_reasons, hook_title; /* hooks.c */
extern const agent_hook hook_memory;                                            /* hooks_memory.c */
extern const agent_hook hook_tool_output_budget, hook_remote_content, hook_tool_authorization,
    hook_read_before_write, hook_delivery_check, hook_loop_detection, hook_clarification,
    hook_tool_errors;                   /* hooks_tools.c */
extern const agent_hook hook_skills;    /* hooks_skills.c */
extern const agent_hook hook_subagents; /* hooks_subagents.c */
extern const agent_hook hook_compact;   /* hooks_compact.c */
extern const agent_hook hook_mcp;       /* hooks_tools.c */

/* ---- run_context.c: what a hook may ask of its run ---- */

/* 30 s: the run's own bookkeeping calls to the sandbox (listings,
 * read-before-write checks, saved tool outputs). */
#define AGENT_BOX_CALL_TIMEOUT_MS 30000
/* What such a call asks its command to take at most, inside that. */
#define AGENT_BOX_COMMAND_TIMEOUT_S 30

/* Continues a model call at hook index next of run->hooks (the model
 * itself at the end). */
void agent_next_model(agent_loop *run, agent_model_call *call, size_t next);
/* Continues a tool call at hook index next of run->hooks (the tool itself
 * at the end). */
void agent_next_tool(agent_loop *run, agent_tool_call *call, size_t next);

/* Whether the run has been asked to stop (agent_params.cancel; for a
 * sub-agent, also the run it works for). */
bool agent_cancelled(const agent_loop *run);
/* Ends the run after this step with stop_reason (and error, when not NULL:
 * the run's status becomes error; a first error is kept). */
void agent_stop(agent_loop *run, const char *stop_reason, const char *error_fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Hands text (taken, may be NULL) to the run's event receiver as event. */
void agent_emit_text(agent_loop *run, const char *event, char *data);
/* Emits data (taken, may be NULL) as compact JSON. */
void agent_emit(agent_loop *run, const char *event, json_t *data);
/* A messages event: [msg or chunk (borrowed), {langgraph_node: node, run_id,
 * thread_id}]. */
void agent_emit_tuple(agent_loop *run, const char *node, json_t *msg);
/* Emits a custom event {type, ...fields} (fields stolen, may be NULL). */
void agent_emit_custom(agent_loop *run, const char *type, json_t *fields);
/* A box command run once (not in the run's session) on the run's sandbox
 * (taken on first use): its stdout into *out (caller frees; NULL on
 * failure). FAWN_EIO when it does not exit 0; sandbox errors. */
FAWN_MUST_CHECK int agent_box_exec(char **out, agent_loop *run, const char *command);
/* The entries of directory dir (a virtual path) in the run's sandbox
 * (taken on first use), as the box lists them one level deep: a new array
 * of {name, path, type, size} into *entries (caller decrefs; NULL on
 * failure). FAWN_EIO when the box refuses; sandbox errors. */
FAWN_MUST_CHECK int agent_box_list(json_t **entries, agent_loop *run, const char *dir);
/* Writes text to a file in the run's sandbox (taken on first use).
 * FAWN_EIO when the box refuses; sandbox errors. */
FAWN_MUST_CHECK int agent_box_write(agent_loop *run, const char *path, const char *text);

/* ---- usage.c ---- */

/* Counts one model call of the run (agent_usage_count on the run's
 * agent_params.usage) by caller (NULL: run->caller, the lead when that is
 * NULL too) to model. Safe from any thread. */
void agent_usage_add(agent_loop *run, const char *caller, const char *model,
                     const model_reply *reply);

/* ---- hooks_compact.c ---- */

/* The thread state's key that keeps the summary: {"summary": text,
 * "through": the id of the last message it covers, "messages": how many
 * messages it covers}. */
#define AGENT_COMPACT_KEY "compaction"
/* What a token is taken for when the context is estimated, bytes. */
#define AGENT_COMPACT_BYTES_PER_TOKEN 4

/* Where the messages[from..) of a thread split for a summary, keeping
 * keep_recent: the summary covers [from, split), the model is sent
 * [split, n) whole. split is at most n - keep_recent (from when there are
 * no more), never the index of a tool message (its call stays with it)
 * and never right after an AI message with tool calls (its results stay
 * with it). */
size_t agent_compact_split(const json_t *messages, size_t from, size_t keep_recent);
/* Whether a request of request_bytes passes ratio of context_window
 * (tokens; 0: unknown, never). */
bool agent_compact_due(size_t request_bytes, uint32_t context_window, double ratio);
/* The summary values (the thread state) keep for messages, and where it
 * ends: *from is the index after the message its "through" names, and
 * *summary (borrowed) its text; *from 0 and *summary NULL when values
 * keep none, or the message it names is not in messages (a fork, an
 * edit). */
void agent_compact_find(const char **summary, size_t *from, const json_t *values,
                        const json_t *messages);

/* ---- hooks.c ---- */

/* The request form of a user message's content, fenced: its text (a
 * string, or the text parts {"type": "text", "text": ...} of a list, read
 * as one text in order) between "<<<BEGIN USER INPUT>>>\n" and
 * "\n<<<END USER INPUT>>>", with control characters (C0 but tab and
 * newline, DEL, C1) dropped and a space before every third '<' or '>' in a
 * row, so nothing in it can open or close the fence. A string gives a
 * string; a list gives a list with that text in text parts where it was
 * (adjacent ones as one), its other parts as they are, and the markers in
 * text parts of their own where it does not start or end with text: a
 * list of one text part gives the text a string gives. *out is new (NULL
 * on failure); FAWN_EINVAL for other content, FAWN_ENOMEM. */
FAWN_MUST_CHECK int agent_input_fence(json_t **out, const json_t *content);

/* Appends the n bytes of text to b defanged as agent_input_fence defangs
 * the user's text (read on from a newline): what is written holds neither
 * "<<<" nor ">>>", so untrusted text between fawn's markers cannot open or
 * close one. */
FAWN_MUST_CHECK int agent_text_defang(fbuf *b, const char *text, size_t n);

/* Appends the n bytes of untrusted text from outside (a web page, a search
 * result) to b as agent_text_defang does, and with every '<' that opens
 * markup (a letter, '/', '!', '?' or '|' after it) written "&lt;": a page
 * cannot open or close fawn's markers, nor pass for a tag fawn or a chat
 * template gives meaning to ("<system>", "</uploaded_files>", "<|im_start|>"). */
FAWN_MUST_CHECK int agent_text_neutralize(fbuf *b, const char *text, size_t n);

/* Appends text as a JSON string whose '<' and '>' are escaped too. */
FAWN_MUST_CHECK int agent_text_quote(fbuf *b, const char *text);

/* Files one uploads note names; past it, it says how many more there are. */
#define AGENT_UPLOADS_NOTE_FILES_MAX 10

/* What the model is told of the files attached to the user's message:
 * files is its additional_kwargs.files (as agent_input_messages keeps it),
 * entries the uploads directory's listing (agent_box_list). Only files the
 * listing has as regular files are named (each once), by their virtual
 * path as a JSON string whose '<' and '>' are escaped (so no name can
 * close the note), with the size listed. *out (malloc'd) is NULL when no
 * file is named. */
FAWN_MUST_CHECK int agent_uploads_note(char **out, const json_t *files, const json_t *entries);

/* ---- run.c: a sub-agent's loop ---- */

/* How a sub-agent's loop ended. */
typedef struct agent_task_end {
    char *answer; /* the text of its last reply (malloc'd), or NULL */
    char *error;  /* why it failed (malloc'd), or NULL */
    bool cancelled;
} agent_task_end;

void agent_task_end_clear(agent_task_end *end);

/* Runs a sub-agent to its end in a context of its own: p (the lead's
 * parameters with the sub-agent's model, turns, cancel and emit), the
 * chain agent_task_hooks, system_prompt, the tools it may use (names;
 * RBAC `tools` filters them too) and the task's prompt as its only human
 * message; its commands run in sandbox scope `scope`. Nothing goes to the
 * thread's state: each new message goes to agent_task_step. */
void agent_task_loop(agent_task_end *end, const agent_params *p, agent_task *task,
                     const char *scope, const char *system_prompt, const json_t *tools,
                     const char *prompt);

/* ---- hooks_subagents.c ---- */

/* Starts the task calls among calls[0..n) of the lead's reply, each on a
 * thread of its own walking the chain (the sub-agent runs at its end), and
 * waits for them all: at most subagents.max_concurrent per reply and
 * subagents.max_per_run per run start, the others are answered at once;
 * a sub-agent past its timeout, or of a run cancelled, is stopped and its
 * commands killed. Each task call ends answered (done). Does nothing in a
 * sub-agent's loop or when the run offers no task tool. */
void agent_tasks_run(agent_loop *run, agent_tool_call *calls, size_t n);
/* Whether the run the sub-agent works for has been cancelled (its own
 * cancel flag follows within a moment; a sub-agent's loop reads both). */
bool agent_task_lead_cancelled(const agent_task *task);
/* The caller its model calls are counted under: "subagent:<type>". */
const char *agent_task_caller(const agent_task *task);
/* A sub-agent's new message (borrowed): a task_running event. */
void agent_task_step(agent_task *task, const json_t *msg);
/* The id receipts of the sub-agent's tool calls are filed under: "<task
 * call id>/<tool call id>" (out holds STORE receipt ids). */
void agent_task_receipt_id(char *out, size_t size, const agent_task *task, const char *call_id);
/* The schema of the task tool for the lead (new), naming the types of s. */
json_t *agent_task_schema(const agent_subagents *s);
/* The skills a sub-agent is offered (its type's list), or NULL: all. */
const json_t *agent_task_skills(const agent_task *task);

/* ---- messages.c ---- */

/* {"type":"ai", ...} with id from a model reply (new). */
json_t *agent_ai_message(const model_reply *reply, const char *model_name, const char *id);
/* {"type":"tool", ...} from a tool result (new). */
json_t *agent_tool_message(const agent_tool_call *call);
/* Appends to request the OpenAI request form of messages[from..]: human →
 * user, ai → assistant with tool_calls, tool → a JSON projection
 * {"tool_status", "output"} of its status and exact text; system messages
 * are left out. FAWN_EINVAL for a message agent_message_check refuses. */
FAWN_MUST_CHECK int agent_request_extend(json_t *request, const json_t *messages, size_t from);

#endif
