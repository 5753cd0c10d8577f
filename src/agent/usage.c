/* Token accounting (agent.h): a run's model calls summed by caller and
 * model, under a lock (sub-agents count from their own threads). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"

/* Buckets kept for the three classes a full table folds new pairs into. */
#define USAGE_FOLD_BUCKETS 3

void agent_usage_init(agent_usage *u) {
    memset(u, 0, sizeof *u);
    pthread_mutex_init(&u->lock, NULL);
}

void agent_usage_destroy(agent_usage *u) { pthread_mutex_destroy(&u->lock); }

/* The bucket a caller is folded into: "lead", "subagent:other" or
 * "middleware:other" (each its own). */
static const char *caller_class(const char *caller) {
    if (strcmp(caller, "lead") == 0)
        return "lead";
    return strncmp(caller, "subagent:", 9) == 0 ? "subagent:other" : "middleware:other";
}

/* The bucket of (caller, model), made when new (lock held); a table past
 * its pairs' share folds a new pair into its class's bucket. */
static agent_usage_bucket *bucket_find(agent_usage *u, const char *caller, const char *model) {
    for (size_t i = 0; i < u->n; i++)
        if (strcmp(u->buckets[i].caller, caller) == 0 && strcmp(u->buckets[i].model, model) == 0)
            return &u->buckets[i];
    bool folded = strcmp(caller, caller_class(caller)) == 0 && model[0] == '\0';
    if (u->n >= AGENT_USAGE_BUCKETS_MAX - USAGE_FOLD_BUCKETS && !folded)
        return bucket_find(u, caller_class(caller), "");
    if (u->n == AGENT_USAGE_BUCKETS_MAX) /* only the three folds come this far */
        return &u->buckets[u->n - 1];
    agent_usage_bucket *b = &u->buckets[u->n++];
    snprintf(b->caller, sizeof b->caller, "%s", caller);
    snprintf(b->model, sizeof b->model, "%s", model);
    return b;
}

void agent_usage_count(agent_usage *u, const char *caller, const char *model,
                       const model_reply *reply) {
    if (!u)
        return;
    char name[AGENT_USAGE_CALLER_MAX + 1], model_name[MODEL_NAME_MAX + 1];
    snprintf(name, sizeof name, "%s", caller ? caller : "lead");
    snprintf(model_name, sizeof model_name, "%s", model ? model : "");
    pthread_mutex_lock(&u->lock);
    agent_usage_bucket *b = bucket_find(u, name, model_name);
    b->calls++;
    /* Counts are at most MODEL_USAGE_TOKENS_MAX each: no sum overflows. */
    b->input_tokens += reply->prompt_tokens > 0 ? reply->prompt_tokens : 0;
    b->output_tokens += reply->completion_tokens > 0 ? reply->completion_tokens : 0;
    pthread_mutex_unlock(&u->lock);
}

int agent_usage_json(char **out, agent_usage *u) {
    *out = NULL;
    json_t *list = json_array();
    pthread_mutex_lock(&u->lock);
    for (size_t i = 0; list && i < u->n; i++) {
        const agent_usage_bucket *b = &u->buckets[i];
        json_array_append_new(list, json_pack("{s:s, s:s, s:I, s:I, s:I, s:I}", "caller", b->caller,
                                              "model", b->model, "input_tokens",
                                              (json_int_t)b->input_tokens, "output_tokens",
                                              (json_int_t)b->output_tokens, "total_tokens",
                                              (json_int_t)(b->input_tokens + b->output_tokens),
                                              "calls", (json_int_t)b->calls));
    }
    pthread_mutex_unlock(&u->lock);
    *out = list ? json_dumps(list, JSON_COMPACT) : NULL;
    json_decref(list);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

void agent_usage_add(agent_loop *run, const char *caller, const char *model,
                     const model_reply *reply) {
    agent_usage_count(run->p->usage, caller ? caller : run->caller, model, reply);
}
