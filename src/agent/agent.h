/* agent: one run of the lead agent over a thread. The model is called with
 * the thread's messages; the tools it asks for run in the thread's sandbox;
 * each step is written to the store as a checkpoint and reported as events.
 *
 * Steps go through an ordered chain of hooks (agent_internal.h) that guard
 * the model's input, its replies and the tool calls; which hooks there are
 * and the order they run in is written once, at the table agent_hooks in
 * hooks.c.
 *
 * Every out-parameter is set on every path, failures included (NULL, "",
 * an empty outcome before anything can fail); agent_state_save's
 * checkpoint_id alone keeps its value (the parent's id) when it fails. */
#ifndef FAWN_AGENT_H
#define FAWN_AGENT_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "model/model.h"
#include "authz/authz.h"
#include "mcp/mcp.h"
#include "research/research.h"
#include "sandbox/manager.h"
#include "store/store.h"
#include "base/base.h"

/* Model calls per run by default, and the most a client may ask for. */
#define AGENT_RECURSION_DEFAULT 100
#define AGENT_RECURSION_MAX 1000
/* The assistant every run uses. */
#define AGENT_ASSISTANT_ID "lead_agent"

/* Receives the run's events: event is "values", "messages", "updates" or
 * "custom"; data is the event's data as compact JSON text, malloc'd: the
 * callee takes it. A values event's data is the state's reference
 * (store.h), not the state: whoever sends it reads the state through it
 * (store_state_read), so a step costs the event log a few bytes, not the
 * whole conversation. Called on the run's thread. */
typedef void (*agent_emit_fn)(void *ctx, const char *event, char *data);

typedef struct agent_subagents agent_subagents;
/* ---- token accounting (usage.c) ----
 * What a run's model calls cost, by caller and model: "lead" (the lead
 * agent), "subagent:<type>", "middleware:<what>" (calls hooks make:
 * compaction summaries, memory extraction). Calls come from several
 * threads (sub-agents run on their own): the sums are guarded by a lock. */

/* Callers' names are short words; longer ones are cut. */
#define AGENT_USAGE_CALLER_MAX 64
/* (caller, model) pairs counted apart; past AGENT_USAGE_BUCKETS_MAX - 3, a
 * new pair is counted under its caller's class ("lead", "subagent:other",
 * "middleware:other") and model "", for which the last three are kept. */
#define AGENT_USAGE_BUCKETS_MAX STORE_USAGE_BUCKETS_MAX

typedef struct agent_usage_bucket {
    char caller[AGENT_USAGE_CALLER_MAX + 1];
    char model[MODEL_NAME_MAX + 1];
    int64_t input_tokens, output_tokens, calls;
} agent_usage_bucket;

typedef struct agent_usage {
    pthread_mutex_t lock;
    agent_usage_bucket buckets[AGENT_USAGE_BUCKETS_MAX];
    size_t n;
} agent_usage;

void agent_usage_init(agent_usage *u);
void agent_usage_destroy(agent_usage *u);
/* Counts one model call of caller to model with reply's usage (a reply
 * without usage counts the call, with no tokens). Safe from any thread;
 * u NULL counts nothing. */
void agent_usage_count(agent_usage *u, const char *caller, const char *model,
                       const model_reply *reply);
/* The counts as the JSON list a run record keeps (store_run.token_usage):
 * *out malloc'd text. FAWN_ENOMEM. */
FAWN_MUST_CHECK int agent_usage_json(char **out, agent_usage *u);

typedef struct agent_params {
    store *st;
    sbx_manager *sandboxes;
    const model_registry *models;
    const authz_policy *policy;
    int64_t owner_id;
    const char *user_dir; /* the owner's directory name (sandbox principal) */
    const char *role;     /* RBAC role read when the run was accepted */
    const char *thread_id;
    const char *run_id;
    const char *model_name;     /* requested model, or NULL for the first */
    int recursion_limit;        /* 1..AGENT_RECURSION_MAX */
    uint32_t command_timeout_s; /* a bash command's timeout (> 0) */
    const char *skills_dir;     /* sandbox.skills_dir: the skills offered (NULL: none) */
    const char *home;    /* $FAWN_HOME: the owner's own skills and skills view (NULL: none) */
    const json_t *input; /* messages to add first (array), or NULL */
    const json_t *title; /* the title (a string, or null) the input sets, or NULL */
    /* The checkpoint of the thread the run starts from (NULL or "": the
     * newest). From an older one, the run forks: its checkpoints follow
     * that one, and the later ones stay in the history. */
    const char *checkpoint_id;
    const sbx_cancel *cancel; /* set to stop the run (it ends as interrupted) */
    agent_emit_fn emit;
    void *emit_ctx;
    /* memory.*: the owner's facts go to the model when enabled and
     * injection_enabled (NULL: memory is off). */
    const fawn_memory_config *memory;
    /* The sub-agent types the lead may delegate to with `task` (NULL, or
     * not enabled: no task tool). */
    const agent_subagents *subagents;
    /* compaction.* (NULL: never compacted). */
    const fawn_compaction_config *compaction;
    agent_usage *usage; /* where the run's model calls are counted (NULL: not counted) */
    web_service *web;   /* the web tools' service (NULL: no web tools) */
    /* ask_clarification is not offered, and a call of it is denied: no one
     * is there to answer (a scheduled task's run). */
    bool no_clarification;
    mcp_service *mcp; /* the pinned tools of MCP servers (NULL: none) */
} agent_params;

typedef struct agent_outcome {
    char status[16];      /* success | error | interrupted */
    char stop_reason[32]; /* "" or loop_capped, model_length_capped, safety_capped,
                             recursion_limit, clarification */
    char *error;          /* why the run failed (malloc'd), or NULL */
    unsigned model_calls; /* calls made to the model */
    char checkpoint_id[STORE_RUN_ID_MAX + 1]; /* the run's last checkpoint ("" when none) */
} agent_outcome;

void agent_outcome_clear(agent_outcome *o);

/* Runs the agent until the model gives a final answer, a hook stops it,
 * the recursion limit is hit, or cancel is set. Every step is
 * checkpointed, every tool call has a receipt. The first run of a thread
 * without a checkpoint first writes the thread's empty state as its root
 * checkpoint (metadata source "input", step -1): the state before the
 * first message, which a run may start from again. Returns 0 with *out filled
 * (status error included: a failed run is a result, not an error of this
 * call); a negative code when the run could not even start (no model, the
 * store failed). */
FAWN_MUST_CHECK int agent_run(agent_outcome *out, const agent_params *p);

/* Whether m has the shape of a stored message: an object whose type is
 * human, ai, tool or system, whose content is text or a list of parts, an
 * ai message's tool_calls (if any) a list of {id, name, args} with string
 * id and name, a tool message's tool_call_id a string, and its id (if any)
 * a string. Runs send every such message to the model (system ones
 * excepted), so a state update may store only these. FAWN_EINVAL naming
 * `shown` (e.g. "values.messages[2]") and what is wrong. */
FAWN_MUST_CHECK int agent_message_check(const json_t *m, const char *shown);

/* Files one input message may name as its attachments, and the longest
 * upload status text kept for each. */
#define AGENT_MESSAGE_FILES_MAX 100
#define AGENT_FILE_STATUS_MAX 32

/* Turns input messages of a request (LangChain dicts {type|role, content},
 * or OpenAI-style {role, content}) into stored human messages with ids.
 * Of a message's additional_kwargs only files is kept: at most
 * AGENT_MESSAGE_FILES_MAX entries {filename (a valid file name), size?
 * (an integer >= 0), path? (text of at most VPATH_MAX bytes), status? (text
 * of at most AGENT_FILE_STATUS_MAX bytes)}, other keys of an entry
 * dropped; the uploads hook tells the model about them. FAWN_EINVAL naming
 * the first bad message. *out is a new array. */
FAWN_MUST_CHECK int agent_input_messages(json_t **out, const json_t *input);

/* Reads the turn the run of p has just finished (the thread's state at
 * checkpoint_id, the run's last: a later run of the thread does not
 * change it) with one more call to the run's model (call_index: the calls
 * the run made; a script fixture answers its next reply), and adds the facts
 * it answers to the owner's memory (memory_facts_parse; a fact already
 * kept is skipped, and the rest once memory.max_facts are kept). Does
 * nothing unless p->memory->enabled. Never fails: what goes wrong (the
 * model, a malformed answer, the store) is logged naming the run. */
void agent_memory_extract(const agent_params *p, const char *checkpoint_id, unsigned call_index);

/* ---- compaction on demand (hooks_compact.c) ---- */

typedef struct agent_compact_outcome {
    bool compacted;
    char reason[32];           /* when not: below_threshold, not_enough_messages */
    size_t removed_messages;   /* messages the model is no longer sent (the summary covers them) */
    size_t preserved_messages; /* messages it is still sent whole */
    int64_t total_tokens;      /* what the summary cost */
    char checkpoint_id[STORE_RUN_ID_MAX + 1]; /* the checkpoint written ("" when none) */
} agent_compact_outcome;

/* Summarizes the older messages of p's thread (its owner's newest state)
 * with p's model as a run's compaction does (hooks_compact.c), whether
 * the context passes compaction.trigger_ratio or not unless !force, and
 * writes the state with the summary as the thread's next checkpoint. Uses
 * p's st, models, model_name, owner_id, thread_id and compaction (the rest
 * may be zero). FAWN_EPERM when compaction is disabled; FAWN_EBUSY when the
 * thread got a checkpoint meanwhile (a run, an update); the model's and
 * the store's errors. The caller keeps runs off the thread. */
FAWN_MUST_CHECK int agent_compact(agent_compact_outcome *out, const agent_params *p, bool force);

/* The tokens the messages of a thread state (values) take as the model is
 * sent them (the summary instead of the messages it covers), estimated at
 * AGENT_COMPACT_BYTES_PER_TOKEN bytes a token. FAWN_EINVAL for a message
 * agent_message_check refuses; FAWN_ENOMEM. */
FAWN_MUST_CHECK int agent_context_tokens(int64_t *tokens, const json_t *values);

/* A new message id (a UUID) in out. */
void agent_message_id(char out[40]);

/* ---- thread state (state.c) ---- */

/* The thread's newest state, whole: *values is a new object whose
 * messages and artifacts are lists (the empty state when the thread has no
 * checkpoint yet, then checkpoint_id is ""); checkpoint_id gets its
 * checkpoint's id. FAWN_EIO when the stored state is not an object;
 * store errors. */
FAWN_MUST_CHECK int agent_state_load(json_t **values, char checkpoint_id[STORE_RUN_ID_MAX + 1],
                                     store *st, int64_t owner_id, const char *thread_id);
/* The same for the state of checkpoint `at` of the thread (NULL or "":
 * its newest, as agent_state_load); FAWN_ENOENT when the thread has no
 * checkpoint `at` (any more). */
FAWN_MUST_CHECK int agent_state_load_at(json_t **values, char checkpoint_id[STORE_RUN_ID_MAX + 1],
                                        store *st, int64_t owner_id, const char *thread_id,
                                        const char *at);
/* Writes values as the thread's next checkpoint, after parent_id ("" or
 * NULL for none), by run_id (or NULL), with metadata (JSON object text);
 * checkpoint_id gets the new id (it may be parent_id's own buffer) and
 * *state (may be NULL) its state reference (malloc'd: what a values event
 * holds, store.h); on failure checkpoint_id is left as it was. NULL metadata is taken for an
 * allocation that failed (FAWN_ENOMEM). */
FAWN_MUST_CHECK int agent_state_save(char checkpoint_id[STORE_RUN_ID_MAX + 1], char **state,
                                     store *st, int64_t owner_id, const char *thread_id,
                                     const char *parent_id, const char *run_id,
                                     const json_t *values, const char *metadata);
/* The sandbox scope of a run's lead agent (its own shell session). */
void agent_scope(char out[SBX_SCOPE_MAX + 1], const char *run_id);
/* The sandbox scope of the n-th sub-agent (1, 2, ...) a run starts: a shell
 * session of its own beside the lead's. */
void agent_task_scope(char out[SBX_SCOPE_MAX + 1], const char *run_id, unsigned n);

/* ---- sub-agents (subagent_types.c) ---- */

/* The tool the lead delegates with: task(description, prompt, subagent_type). */
#define AGENT_TASK_TOOL "task"
/* The tool that asks the user a question (tools/tool_meta.c). */
#define AGENT_CLARIFICATION_TOOL "ask_clarification"
/* The longest a sub-agent may be given (subagents.timeout_s, a type's timeout_s). */
#define AGENT_TASK_TIMEOUT_MAX_S 86400

/* A kind of sub-agent: its own system prompt, tools and limits. */
typedef struct subagent_type {
    char name[65];       /* [A-Za-z0-9_-]{1,64} */
    char *description;   /* what the lead is told of it */
    char *system_prompt; /* the sub-agent's own */
    json_t *tools;       /* names of the built-in tools it may have (RBAC applies too) */
    json_t *skills;      /* names of the skills it is offered, or NULL: every one the lead is */
    char model[MODEL_NAME_MAX + 1]; /* its model, or "": the lead's */
    uint32_t max_turns;             /* model calls it may make */
    uint32_t timeout_s;             /* how long it may take */
} subagent_type;

/* The types from the configuration's subagents section: the built-in
 * general-purpose (bash, ls, read_file, write_file, str_replace, glob,
 * grep; 150 turns) and bash (bash, ls, read_file, write_file, str_replace;
 * 60 turns), then each of subagents.custom ({name, description,
 * system_prompt, tools?, skills?, model? (a configured model or inherit),
 * max_turns?, timeout_s?}). A sub-agent never has task, ask_clarification
 * or present_files. FAWN_ECONFIG naming the bad key; FAWN_ENOMEM. */
FAWN_MUST_CHECK int agent_subagents_new(agent_subagents **out, const fawn_subagents_config *cfg,
                                        const model_registry *models);
void agent_subagents_free(agent_subagents *s);
/* Whether runs offer the task tool (s not NULL and subagents.enabled). */
bool agent_subagents_enabled(const agent_subagents *s);
/* The limits (subagents.*; its custom is NULL). */
const fawn_subagents_config *agent_subagents_limits(const agent_subagents *s);
/* The types, in the order the lead is told of them. */
size_t agent_subagents_count(const agent_subagents *s);
const subagent_type *agent_subagent_at(const agent_subagents *s, size_t i);
/* The type named name, or NULL. */
const subagent_type *agent_subagent_type(const agent_subagents *s, const char *name);

#endif
