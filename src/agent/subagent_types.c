/* Sub-agent types (agent.h): the built-in general-purpose and bash, then
 * the configuration's custom ones, each checked once at start. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"

/* Turns a sub-agent may take by default (DeerFlow's figures). */
#define GENERAL_TURNS 150
#define BASH_TURNS 60
/* The most turns, and the longest prompt and description, a custom type may set. */
#define CUSTOM_TURNS_MAX AGENT_RECURSION_MAX
#define CUSTOM_PROMPT_MAX (32 * 1024)
#define CUSTOM_DESCRIPTION_MAX 1024
/* Custom types at most: each is listed in the task tool's description. */
#define CUSTOM_TYPES_MAX 32

struct agent_subagents {
    fawn_subagents_config limits; /* custom left NULL: the types below hold it */
    subagent_type *types;
    size_t n;
};

static const char general_prompt[] =
    "You are a sub-agent of fawn's lead agent. You were given one task; do it completely with "
    "the tools you have, in the Linux sandbox that holds this conversation's files "
    "(/mnt/user-data/uploads, /mnt/user-data/workspace, /mnt/user-data/outputs). You cannot ask "
    "the user anything. Your final answer goes to the lead agent, not to the user: make it a "
    "short, factual report of what you did and found, with the paths of any files you wrote.";

static const char bash_prompt[] =
    "You are a command-line sub-agent of fawn's lead agent. Run the shell commands the task "
    "needs in the Linux sandbox (your shell keeps its working directory and environment "
    "between commands), check their results, and answer the lead agent with a short report "
    "of what ran and what it printed that matters. You cannot ask the user anything.";

static const char *const general_tools[] = {"bash",       "ls",          "read_file",
                                            "write_file", "str_replace", "glob",
                                            "grep",       "web_search",  "web_fetch"};
static const char *const bash_tools[] = {"bash", "ls", "read_file", "write_file", "str_replace"};

/* Tools a sub-agent is never given: it cannot delegate, ask the user or
 * hand files to the user (the lead does). */
static bool tool_reserved(const char *name) {
    return strcmp(name, AGENT_TASK_TOOL) == 0 || strcmp(name, "ask_clarification") == 0 ||
           strcmp(name, "present_files") == 0;
}

static json_t *names_array(const char *const *names, size_t n) {
    json_t *a = json_array();
    for (size_t i = 0; a && i < n; i++)
        json_array_append_new(a, json_string(names[i]));
    return a;
}

static int builtin_set(subagent_type *t, const char *name, const char *description,
                       const char *prompt, json_t *tools, uint32_t turns) {
    snprintf(t->name, sizeof t->name, "%s", name);
    t->description = strdup(description);
    t->system_prompt = strdup(prompt);
    t->tools = tools;
    t->max_turns = turns;
    return t->description && t->system_prompt && t->tools ? 0
                                                          : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int builtins_add(agent_subagents *s) {
    int r = builtin_set(&s->types[s->n++], "general-purpose",
                        "A capable agent for a bounded task of exploration and action: several "
                        "independent tasks run in parallel, each in its own context and shell.",
                        general_prompt, names_array(general_tools, ARRAY_LEN(general_tools)),
                        GENERAL_TURNS);
    if (r == 0)
        r = builtin_set(&s->types[s->n++], "bash",
                        "A command-line specialist: runs a bounded shell workflow in its own "
                        "shell session and reports what it found.",
                        bash_prompt, names_array(bash_tools, ARRAY_LEN(bash_tools)), BASH_TURNS);
    return r;
}

/* ---- custom types ---- */

static int custom_fail(size_t i, const char *key, const char *what) {
    return fawn_err(FAWN_ECONFIG, "subagents.custom[%zu].%s: %s", i, key, what);
}

static int text_get(char **out, const json_t *v, size_t i, const char *key, size_t max,
                    bool required) {
    *out = NULL;
    if (!v)
        return required ? custom_fail(i, key, "is required") : 0;
    if (!json_is_string(v) || json_string_length(v) == 0 || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v))
        return custom_fail(i, key, "must be a non-empty text without NUL, of bounded length");
    *out = strdup(json_string_value(v));
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* A count: the configuration gives its scalars as text, decimal digits here. */
static int count_get(uint32_t *out, const json_t *v, size_t i, const char *key, uint32_t def,
                     uint32_t max) {
    *out = def;
    if (!v)
        return 0;
    const char *text = json_string_value(v);
    uint64_t n = 0;
    bool ok = text && *text && strlen(text) <= 10;
    for (const char *c = text; ok && *c; c++) {
        ok = *c >= '0' && *c <= '9';
        n = n * 10 + (uint64_t)(*c - '0');
    }
    if (!ok || n < 1 || n > max)
        return fawn_err(FAWN_ECONFIG, "subagents.custom[%zu].%s: must be an integer in 1..%u", i,
                        key, max);
    *out = (uint32_t)n;
    return 0;
}

/* tools: names of built-in tools a sub-agent may have; skills: skill
 * names. Each an array of distinct names, or absent. */
static int names_get(json_t **out, const json_t *v, size_t i, const char *key, bool tools) {
    *out = NULL;
    if (!v)
        return 0;
    if (!json_is_array(v))
        return custom_fail(i, key, "must be a list of names");
    size_t k;
    json_t *n;
    json_array_foreach(v, k, n) {
        const char *name = json_string_value(n);
        if (!name || !fawn_id_valid(name))
            return custom_fail(i, key, "must be a list of names ([A-Za-z0-9_-]{1,64})");
        if (tools && (!tool_find(name) || tool_reserved(name)))
            return fawn_err(FAWN_ECONFIG,
                            "subagents.custom[%zu].tools: %s is not a tool a sub-agent may have", i,
                            name);
    }
    *out = json_deep_copy(v);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int model_get(subagent_type *t, const json_t *v, size_t i, const model_registry *models) {
    const char *name = v ? json_string_value(v) : "inherit";
    if (!name)
        return custom_fail(i, "model", "must be a model name or inherit");
    if (strcmp(name, "inherit") != 0 && !model_registry_get(models, name))
        return fawn_err(FAWN_ECONFIG, "subagents.custom[%zu].model: no model is named %s", i, name);
    snprintf(t->model, sizeof t->model, "%s", strcmp(name, "inherit") == 0 ? "" : name);
    return 0;
}

static const char *const custom_keys[] = {"name",   "description", "system_prompt", "tools",
                                          "skills", "model",       "max_turns",     "timeout_s"};

static int keys_check(const json_t *o, size_t i) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        bool known = false;
        for (size_t k = 0; k < ARRAY_LEN(custom_keys); k++)
            known |= strcmp(key, custom_keys[k]) == 0;
        if (!known)
            return custom_fail(i, key, "is not a key of a sub-agent type");
    }
    return 0;
}

static int custom_add(agent_subagents *s, const json_t *o, size_t i, const model_registry *models) {
    if (!json_is_object(o))
        return fawn_err(FAWN_ECONFIG, "subagents.custom[%zu]: must be a mapping", i);
    subagent_type *t = &s->types[s->n];
    const char *name = json_string_value(json_object_get(o, "name"));
    int r = keys_check(o, i);
    if (r == 0 && (!name || !fawn_id_valid(name)))
        r = custom_fail(i, "name", "is required: [A-Za-z0-9_-]{1,64}");
    if (r == 0 && agent_subagent_type(s, name))
        r = custom_fail(i, "name", "names a type that already exists");
    if (r < 0)
        return r;
    snprintf(t->name, sizeof t->name, "%s", name);
    s->n++; /* from here, freed with the others whatever fails */
    r = text_get(&t->description, json_object_get(o, "description"), i, "description",
                 CUSTOM_DESCRIPTION_MAX, true);
    if (r == 0)
        r = text_get(&t->system_prompt, json_object_get(o, "system_prompt"), i, "system_prompt",
                     CUSTOM_PROMPT_MAX, true);
    if (r == 0)
        r = names_get(&t->tools, json_object_get(o, "tools"), i, "tools", true);
    if (r == 0 && !t->tools)
        r = (t->tools = names_array(general_tools, ARRAY_LEN(general_tools)))
                ? 0
                : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = names_get(&t->skills, json_object_get(o, "skills"), i, "skills", false);
    if (r == 0)
        r = model_get(t, json_object_get(o, "model"), i, models);
    if (r == 0)
        r = count_get(&t->max_turns, json_object_get(o, "max_turns"), i, "max_turns", GENERAL_TURNS,
                      CUSTOM_TURNS_MAX);
    if (r == 0)
        r = count_get(&t->timeout_s, json_object_get(o, "timeout_s"), i, "timeout_s",
                      s->limits.timeout_s, AGENT_TASK_TIMEOUT_MAX_S);
    return r;
}

/* ---- the set ---- */

int agent_subagents_new(agent_subagents **out, const fawn_subagents_config *cfg,
                        const model_registry *models) {
    *out = NULL;
    size_t custom = json_array_size(cfg->custom);
    if (cfg->custom && !json_is_array(cfg->custom))
        return fawn_err(FAWN_ECONFIG, "subagents.custom: must be a list");
    if (custom > CUSTOM_TYPES_MAX)
        return fawn_err(FAWN_ECONFIG, "subagents.custom: at most %d types", CUSTOM_TYPES_MAX);
    agent_subagents *s = calloc(1, sizeof *s);
    if (s)
        s->types = calloc(2 + custom, sizeof *s->types);
    if (!s || !s->types) {
        free(s);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    s->limits = *cfg;
    s->limits.custom = NULL;
    int r = builtins_add(s);
    for (size_t i = 0; r == 0 && i < custom; i++)
        r = custom_add(s, json_array_get(cfg->custom, i), i, models);
    for (size_t i = 0; i < s->n; i++)
        if (!s->types[i].timeout_s)
            s->types[i].timeout_s = cfg->timeout_s;
    if (r < 0) {
        agent_subagents_free(s);
        return r;
    }
    *out = s;
    return 0;
}

void agent_subagents_free(agent_subagents *s) {
    if (!s)
        return;
    for (size_t i = 0; i < s->n; i++) {
        free(s->types[i].description);
        free(s->types[i].system_prompt);
        json_decref(s->types[i].tools);
        json_decref(s->types[i].skills);
    }
    free(s->types);
    free(s);
}

bool agent_subagents_enabled(const agent_subagents *s) { return s && s->limits.enabled; }

const fawn_subagents_config *agent_subagents_limits(const agent_subagents *s) { return &s->limits; }

size_t agent_subagents_count(const agent_subagents *s) { return s ? s->n : 0; }

const subagent_type *agent_subagent_at(const agent_subagents *s, size_t i) {
    return s && i < s->n ? &s->types[i] : NULL;
}

const subagent_type *agent_subagent_type(const agent_subagents *s, const char *name) {
    for (size_t i = 0; s && name && i < s->n; i++)
        if (strcmp(s->types[i].name, name) == 0)
            return &s->types[i];
    return NULL;
}
