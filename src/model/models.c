/* The configured models (model.h, "configured models"). */
#include <stdio.h>
#include <string.h>

#include "model/model.h"
#include "base/json.h"

/* Timeouts a configuration may set, seconds: up to an hour. */
#define MODEL_TIMEOUT_MAX_S 3600
/* max_tokens a configuration may set: past every model's context. */
#define MODEL_MAX_TOKENS_MAX 10000000

struct model_registry {
    model_entry entries[MODEL_REGISTRY_MAX];
    size_t n;
};

static const char *const entry_keys[] = {"name",
                                         "display_name",
                                         "provider",
                                         "fixture",
                                         "model",
                                         "base_url",
                                         "api_key",
                                         "max_tokens",
                                         "context_window",
                                         "stall_timeout_s",
                                         "total_timeout_s",
                                         "supports_thinking",
                                         "supports_vision",
                                         "extra_body",
                                         NULL};

static bool name_valid(const char *s) {
    size_t n = strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-");
    return n > 0 && n <= MODEL_NAME_MAX && !s[n];
}

/* A string field: *out strdup'd (NULL when absent and not required). */
static int string_take(char **out, const json_t *o, const char *key, bool required, size_t i) {
    const json_t *v = json_object_get(o, key);
    if (!v && !required)
        return 0;
    const char *text = json_string_value(v);
    if (!text || !*text)
        return fawn_err(FAWN_ECONFIG, "models[%zu].%s: %s", i, key,
                        v ? "must be a non-empty text" : "is required");
    *out = strdup(text);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int bool_take(bool *out, const json_t *o, const char *key, size_t i) {
    const json_t *v = json_object_get(o, key);
    if (v && !json_is_boolean(v))
        return fawn_err(FAWN_ECONFIG, "models[%zu].%s: must be true or false", i, key);
    *out = json_is_true(v);
    return 0;
}

/* A whole number (config scalars arrive as text) into *out, within max. */
static int number_take(uint32_t *out, const json_t *o, const char *key, uint32_t scale,
                       uint32_t max, size_t i) {
    const json_t *v = json_object_get(o, key);
    if (!v)
        return 0;
    const char *text = json_string_value(v);
    char *end = NULL;
    unsigned long n = text && *text >= '1' && *text <= '9' ? strtoul(text, &end, 10) : 0;
    if (!n || *end || n > max)
        return fawn_err(FAWN_ECONFIG, "models[%zu].%s: must be an integer between 1 and %u", i, key,
                        max);
    *out = (uint32_t)n * scale;
    return 0;
}

static int url_check(const char *url, size_t i) {
    if (strncmp(url, "http://", 7) == 0 || strncmp(url, "https://", 8) == 0)
        return 0;
    return fawn_err(FAWN_ECONFIG, "models[%zu].base_url: must be an http:// or https:// URL", i);
}

static int provider_take(enum model_provider *out, const json_t *o, size_t i) {
    static const char *const names[] = {"openai", "script", "replay", "record"};
    const json_t *v = json_object_get(o, "provider");
    *out = MODEL_OPENAI;
    if (!v)
        return 0;
    for (size_t k = 0; k < ARRAY_LEN(names); k++)
        if (json_is_string(v) && strcmp(json_string_value(v), names[k]) == 0) {
            *out = (enum model_provider)k;
            return 0;
        }
    return fawn_err(FAWN_ECONFIG, "models[%zu].provider: must be openai, script, replay or record",
                    i);
}

static int unknown_key_check(const json_t *o, size_t i) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)o, key, v) {
        bool known = false;
        for (size_t k = 0; entry_keys[k] && !known; k++)
            known = strcmp(key, entry_keys[k]) == 0;
        if (!known)
            return fawn_err(FAWN_ECONFIG, "unknown key models[%zu].%.64s", i, key);
    }
    return 0;
}

/* The endpoint part: model, base_url, api_key, limits, extra_body. */
static int endpoint_load(model_entry *e, const json_t *o, size_t i) {
    bool needed = e->provider == MODEL_OPENAI || e->provider == MODEL_RECORD;
    char *model = NULL, *base_url = NULL, *api_key = NULL;
    int r = string_take(&model, o, "model", needed, i);
    if (r == 0)
        r = string_take(&base_url, o, "base_url", needed, i);
    if (r == 0 && base_url)
        r = url_check(base_url, i);
    if (r == 0)
        r = string_take(&api_key, o, "api_key", false, i);
    if (r == 0)
        r = number_take(&e->cfg.max_tokens, o, "max_tokens", 1, MODEL_MAX_TOKENS_MAX, i);
    if (r == 0)
        r = number_take(&e->context_window, o, "context_window", 1, MODEL_MAX_TOKENS_MAX, i);
    if (r == 0)
        r = number_take(&e->cfg.stall_timeout_ms, o, "stall_timeout_s", 1000, MODEL_TIMEOUT_MAX_S,
                        i);
    if (r == 0)
        r = number_take(&e->cfg.total_timeout_ms, o, "total_timeout_s", 1000, MODEL_TIMEOUT_MAX_S,
                        i);
    const json_t *extra = json_object_get(o, "extra_body");
    if (r == 0 && extra && !json_is_object(extra))
        r = fawn_err(FAWN_ECONFIG, "models[%zu].extra_body: must be a mapping", i);
    e->extra_body = extra ? json_deep_copy(extra) : NULL;
    e->cfg = (model_config){.name = e->name,
                            .model = model,
                            .base_url = base_url,
                            .api_key = api_key,
                            .max_tokens = e->cfg.max_tokens,
                            .stall_timeout_ms = e->cfg.stall_timeout_ms,
                            .total_timeout_ms = e->cfg.total_timeout_ms,
                            .extra_body = e->extra_body};
    return r;
}

/* The fixture of an offline or recording model, read now. */
static int fixture_take(model_entry *e, const json_t *o, size_t i) {
    bool needed = e->provider != MODEL_OPENAI;
    char *path = NULL;
    int r = string_take(&path, o, "fixture", needed, i);
    if (r == 0 && path && !needed)
        r = fawn_err(FAWN_ECONFIG, "models[%zu].fixture: only for script, replay or record", i);
    if (r == 0 && path)
        r = model_fixture_load(&e->fixture, path, e->provider);
    if (r == FAWN_ECONFIG && path)
        r = fawn_err(FAWN_ECONFIG, "models[%zu].fixture: %s", i, fawn_errmsg());
    free(path);
    return r;
}

static int entry_load(model_entry *e, const json_t *o, size_t i) {
    if (!json_is_object(o))
        return fawn_err(FAWN_ECONFIG, "models[%zu]: must be a mapping", i);
    int r = unknown_key_check(o, i);
    if (r == 0)
        r = string_take(&e->name, o, "name", true, i);
    if (r == 0 && !name_valid(e->name))
        r = fawn_err(FAWN_ECONFIG, "models[%zu].name: 1 to %d letters, digits or . _ -", i,
                     MODEL_NAME_MAX);
    if (r == 0)
        r = string_take(&e->display_name, o, "display_name", false, i);
    if (r == 0)
        r = provider_take(&e->provider, o, i);
    if (r == 0)
        r = endpoint_load(e, o, i);
    if (r == 0)
        r = bool_take(&e->supports_thinking, o, "supports_thinking", i);
    if (r == 0)
        r = bool_take(&e->supports_vision, o, "supports_vision", i);
    if (r == 0)
        r = fixture_take(e, o, i);
    return r;
}

/* The model used when none is configured. */
static int entry_demo(model_entry *e) {
    e->name = strdup(MODEL_DEMO_NAME);
    e->display_name = strdup("Demo (scripted, offline)");
    e->provider = MODEL_SCRIPT;
    e->cfg.name = e->name;
    if (!e->name || !e->display_name)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return model_fixture_demo(&e->fixture);
}

static void entry_free(model_entry *e) {
    free(e->name);
    free(e->display_name);
    free((char *)e->cfg.model);
    free((char *)e->cfg.base_url);
    free((char *)e->cfg.api_key);
    json_decref(e->extra_body);
    model_fixture_free(e->fixture);
    if (e->breaker)
        model_breaker_destroy(e->breaker);
    free(e->breaker);
    memset(e, 0, sizeof *e);
}

int model_registry_load(model_registry **out, const json_t *list) {
    *out = NULL;
    if (list && (!json_is_array(list) || json_array_size(list) > MODEL_REGISTRY_MAX))
        return fawn_err(FAWN_ECONFIG, "models: must be a list of at most %d models",
                        MODEL_REGISTRY_MAX);
    model_registry *reg = calloc(1, sizeof *reg);
    if (!reg)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = 0;
    for (size_t i = 0; r == 0 && i < json_array_size(list); i++) {
        model_entry *e = &reg->entries[reg->n++];
        r = entry_load(e, json_array_get(list, i), i);
        if (r == 0 && !e->display_name && !(e->display_name = strdup(e->name)))
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        for (size_t j = 0; r == 0 && j < i; j++)
            if (strcmp(reg->entries[j].name, e->name) == 0)
                r = fawn_err(FAWN_ECONFIG, "models[%zu].name: '%s' is already models[%zu]", i,
                             e->name, j);
        if (r == 0 && (e->provider == MODEL_OPENAI || e->provider == MODEL_RECORD)) {
            e->breaker = malloc(sizeof *e->breaker);
            if (e->breaker)
                model_breaker_init(e->breaker);
            else
                r = fawn_err(FAWN_ENOMEM, "out of memory");
        }
    }
    if (r == 0 && reg->n == 0) {
        reg->n = 1;
        r = entry_demo(&reg->entries[0]);
    }
    if (r < 0) {
        model_registry_free(reg);
        return r;
    }
    *out = reg;
    return 0;
}

void model_registry_free(model_registry *r) {
    if (!r)
        return;
    for (size_t i = 0; i < r->n; i++)
        entry_free(&r->entries[i]);
    free(r);
}

size_t model_registry_count(const model_registry *r) { return r->n; }

const model_entry *model_registry_at(const model_registry *r, size_t i) {
    return i < r->n ? &r->entries[i] : NULL;
}

const model_entry *model_registry_get(const model_registry *r, const char *name) {
    for (size_t i = 0; name && i < r->n; i++)
        if (strcmp(r->entries[i].name, name) == 0)
            return &r->entries[i];
    return NULL;
}

const model_entry *model_registry_resolve(const model_registry *r, const char *name) {
    const model_entry *e = model_registry_get(r, name);
    if (e || r->n == 0)
        return e;
    if (name)
        log_warn("model", "unknown model '%.64s': using '%s'", name, r->entries[0].name);
    return &r->entries[0];
}

int model_entry_complete(model_reply *out, enum model_failure *why, const model_entry *e,
                         const model_request *req, const model_hooks *hooks,
                         const atomic_bool *cancel) {
    enum model_failure local;
    why = why ? why : &local;
    *out = (model_reply){.prompt_tokens = -1, .completion_tokens = -1};
    *why = MODEL_OK;
    if (e->provider == MODEL_SCRIPT || e->provider == MODEL_REPLAY) {
        int r = model_fixture_answer(out, e->fixture, e->name, req);
        *why = r < 0 ? MODEL_FAIL_FATAL : MODEL_OK;
        return r;
    }
    int r = model_complete(out, why, &e->cfg, req->messages, req->tools, e->breaker, hooks, cancel);
    if (r == 0 && e->provider == MODEL_RECORD && model_fixture_record(e->fixture, req, out) < 0)
        log_warn("model", "model %s: recording failed: %s", e->name, fawn_errmsg());
    return r;
}
