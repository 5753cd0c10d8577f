/* Memory in the run: the owner's facts given to the model (the memory
 * hook), and facts read from a finished turn (agent_memory_extract).
 *
 * The facts reach the model as hidden context: the memory module's text
 * (memory_context: dated, fenced, within memory.max_injection_tokens) is
 * added to the system prompt of each model request of the run, read from
 * the store once per run and never written to the thread's messages. */
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "memory/memory.h"

/* Whether the run gives the model its owner's facts. */
static bool injecting(const agent_params *p) {
    return p->memory && p->memory->enabled && p->memory->injection_enabled;
}

/* Reads the owner's facts and makes the context, once per run. */
static void memory_context_make(agent_loop *run) {
    run->memory_checked = true;
    store_fact *facts = NULL;
    size_t n = 0;
    size_t budget = (size_t)run->p->memory->max_injection_tokens * MEMORY_BYTES_PER_TOKEN;
    if (store_fact_list(run->p->st, &facts, &n, run->p->owner_id) < 0 ||
        memory_context(&run->memory_context, facts, n, budget, fawn_wall_ms()) < 0)
        log_warn("agent", "run %s: the model is not given the user's memory: %s", run->p->run_id,
                 fawn_errmsg());
    free(facts);
}

/* The request's system prompt (its first message) with the context after
 * it: the element is replaced, never edited (it is shared with later
 * calls). */
static void memory_before_model(agent_loop *run, agent_model_call *call) {
    if (!injecting(run->p))
        return;
    if (!run->memory_checked)
        memory_context_make(run);
    const json_t *sys = json_array_get(call->request, 0);
    const char *role = json_string_value(json_object_get(sys, "role"));
    const char *prompt = json_string_value(json_object_get(sys, "content"));
    if (!run->memory_context || !role || strcmp(role, "system") != 0 || !prompt)
        return;
    json_t *with = json_pack("{s:s, s:s++}", "role", "system", "content", prompt, "\n\n",
                             run->memory_context);
    if (!with || json_array_set_new(call->request, 0, with) < 0)
        log_warn("agent", "run %s: the model is not given the user's memory: out of memory",
                 run->p->run_id);
}

const agent_hook hook_memory = {.name = "memory", .before_model = memory_before_model};

/* ---- extraction ---- */

/* The answer's text of one call of the run's model with request (OpenAI
 * messages), or NULL (logged). */
static char *extract_answer(const agent_params *p, const json_t *request, unsigned call_index) {
    const model_entry *model = model_registry_resolve(p->models, p->model_name);
    /* What replay and record fixtures key on: the call's own question, so
     * it is never taken for one of the run's calls. */
    json_t *conversation = json_pack("[{s:s, s:O}]", "type", "human", "content",
                                     json_object_get(json_array_get(request, 1), "content"));
    model_request req = {
        .conversation = conversation, .messages = request, .call_index = call_index};
    model_reply reply = {0};
    enum model_failure why;
    int r = model && conversation
                ? model_entry_complete(&reply, &why, model, &req, &(model_hooks){0},
                                       p->cancel ? &p->cancel->cancelled : NULL)
                : fawn_err(FAWN_ENOENT, "no model");
    if (r == 0)
        agent_usage_count(p->usage, "middleware:memory", model->name, &reply);
    const char *text = json_string_value(json_object_get(reply.message, "content"));
    char *answer = r == 0 && text ? strdup(text) : NULL;
    if (r < 0 || !text)
        log_warn("agent", "run %s: memory: the model gave no answer: %s", p->run_id,
                 r < 0 ? fawn_errmsg() : "no text");
    model_reply_clear(&reply);
    json_decref(conversation);
    return answer;
}

/* Adds the facts to the owner's memory: one already kept is skipped, and
 * the rest once memory.max_facts are kept. How many were added. */
static size_t facts_keep(const agent_params *p, const store_fact *facts, size_t n) {
    size_t added = 0;
    for (size_t i = 0; i < n; i++) {
        int r = store_fact_add(p->st, NULL, p->owner_id, &facts[i], p->memory->max_facts);
        if (r == FAWN_E2BIG)
            break;
        if (r == 0)
            added++;
        else if (r != FAWN_EEXIST)
            log_warn("agent", "run %s: memory: a fact was not kept: %s", p->run_id, fawn_errmsg());
    }
    return added;
}

/* The extraction request for the thread's state at checkpoint_id, or NULL
 * (logged, or the turn had nothing to read). */
static json_t *extract_request(const agent_params *p, const char *checkpoint_id) {
    json_t *values = NULL, *request = NULL;
    char checkpoint[STORE_RUN_ID_MAX + 1];
    store_fact *known = NULL;
    size_t n = 0;
    int r = checkpoint_id[0] ? agent_state_load_at(&values, checkpoint, p->st, p->owner_id,
                                                   p->thread_id, checkpoint_id)
                             : fawn_err(FAWN_ENOENT, "the run wrote no checkpoint");
    if (r == 0)
        r = store_fact_list(p->st, &known, &n, p->owner_id);
    if (r < 0)
        log_warn("agent", "run %s: memory: the turn is not read: %s", p->run_id, fawn_errmsg());
    else if (memory_extract_request(&request, json_object_get(values, "messages"), known, n) < 0)
        log_debug("agent", "run %s: memory: %s", p->run_id, fawn_errmsg());
    free(known);
    json_decref(values);
    return request;
}

void agent_memory_extract(const agent_params *p, const char *checkpoint_id, unsigned call_index) {
    if (!p->memory || !p->memory->enabled)
        return;
    json_t *request = extract_request(p, checkpoint_id);
    char *answer = request ? extract_answer(p, request, call_index) : NULL;
    store_fact *facts = NULL;
    size_t n = 0;
    if (answer && memory_facts_parse(&facts, &n, answer, strlen(answer), p->thread_id) < 0)
        log_warn("agent", "run %s: memory: the model's answer is ignored: %s", p->run_id,
                 fawn_errmsg());
    else if (answer)
        log_info("agent", "run %s: memory: %zu of %zu facts answered kept", p->run_id,
                 facts_keep(p, facts, n), n);
    free(facts);
    free(answer);
    json_decref(request);
}
