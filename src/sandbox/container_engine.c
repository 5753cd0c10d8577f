/* The container provider's side of the Docker Engine API (container.h):
 * reading what the engine answers. Every reply is untrusted: its size was
 * bounded when it was read (container.c), and here each field is checked
 * before anything uses it. */
#include <string.h>
#include <strings.h>

#include "base/json.h"
#include "sandbox/container.h"

#define LABEL_SANDBOX "fawn.sandbox"
#define LABEL_GENERATION "fawn.generation"
/* The engine's words for "not there": Docker's message "No such container:
 * NAME", Podman's cause "no such container". */
#define NO_SUCH_CONTAINER "no such container"
#define SANDBOX_ID_LEN 16
#define CONTAINER_ID_LEN 64

static bool hex_exact(const char *s, size_t len) {
    if (!s || strlen(s) != len)
        return false;
    return strspn(s, "0123456789abcdef") == len;
}

/* body as a JSON value of the wanted type (caller decrefs), or NULL. */
static json_t *parse(const char *body, size_t len, json_type type) {
    json_error_t jerr;
    json_t *v = body ? json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr) : NULL;
    if (v && json_typeof(v) != type) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* Whether a 404's body is the engine saying the container does not exist. */
static bool says_no_such_container(const char *body, size_t len) {
    json_t *o = parse(body, len, JSON_OBJECT);
    const char *msg = json_string_value(json_object_get(o, "message"));
    const char *cause = json_string_value(json_object_get(o, "cause"));
    size_t n = strlen(NO_SUCH_CONTAINER);
    bool yes = (cause && strcmp(cause, NO_SUCH_CONTAINER) == 0) ||
               (msg && strncasecmp(msg, NO_SUCH_CONTAINER ":", n + 1) == 0);
    json_decref(o);
    return yes;
}

/* The engine's container states and what they mean here. */
static const struct {
    const char *name;
    enum sbx_presence state;
} engine_states[] = {
    {"running", SBX_RUNNING},
    {"created", SBX_STOPPED},
    {"exited", SBX_STOPPED},
    {"dead", SBX_STOPPED},
    {"restarting", SBX_PENDING},
    {"removing", SBX_TERMINATING},
    {"paused", SBX_TERMINATING},
    {"stopping", SBX_TERMINATING},
    /* Podman's own words for a container that is not running. */
    {"configured", SBX_STOPPED},
    {"initialized", SBX_STOPPED},
    {"stopped", SBX_STOPPED},
};

static int state_of(enum sbx_presence *state, const char *name) {
    for (size_t i = 0; name && i < ARRAY_LEN(engine_states); i++)
        if (strcmp(name, engine_states[i].name) == 0) {
            *state = engine_states[i].state;
            return 0;
        }
    return fawn_err(FAWN_EPROTO, "the engine reported an unknown container state");
}

/* Labels (a JSON object) that name sandbox_id (when not NULL) and a
 * generation: the generation's text, or "" when it is missing and
 * !required. */
static int labels_read(const char **sandbox, const char **generation, const json_t *labels,
                       bool required) {
    *sandbox = json_string_value(json_object_get(labels, LABEL_SANDBOX));
    *generation = json_string_value(json_object_get(labels, LABEL_GENERATION));
    if (!json_is_object(labels) || !hex_exact(*sandbox, SANDBOX_ID_LEN))
        return fawn_err(FAWN_EPROTO,
                        "the container does not carry a valid " LABEL_SANDBOX " label");
    if (!*generation && !required && !json_object_get(labels, LABEL_GENERATION)) {
        *generation = "";
        return 0;
    }
    if (!hex_exact(*generation, SBX_GENERATION_LEN))
        return fawn_err(FAWN_EPROTO,
                        "the container does not carry a valid " LABEL_GENERATION " label");
    return 0;
}

static int inspect_read(enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                        const json_t *o, const char *sandbox_id) {
    const json_t *config = json_object_get(o, "Config");
    const json_t *st = json_object_get(o, "State");
    const char *id = json_string_value(json_object_get(o, "Id"));
    const char *sandbox, *gen;
    if (!hex_exact(id, CONTAINER_ID_LEN) || !json_is_object(config) || !json_is_object(st))
        return fawn_err(FAWN_EPROTO, "the engine's inspect reply lacks Id, Config or State");
    int r = labels_read(&sandbox, &gen, json_object_get(config, "Labels"), true);
    if (r < 0)
        return r;
    if (strcmp(sandbox, sandbox_id) != 0)
        return fawn_err(FAWN_EPROTO, "the container under this sandbox's name is another "
                                     "sandbox's");
    if ((r = state_of(state, json_string_value(json_object_get(st, "Status")))) < 0)
        return r;
    memcpy(generation, gen, SBX_GENERATION_LEN + 1);
    return 0;
}

int container_inspect_classify(enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                               long status, const char *body, size_t len, const char *sandbox_id) {
    *state = SBX_UNKNOWN;
    generation[0] = '\0';
    if (status == 404 && says_no_such_container(body, len)) {
        *state = SBX_ABSENT;
        return 0;
    }
    if (status != 200)
        return fawn_err(FAWN_EPROTO, "the engine answered an inspect with status %ld", status);
    json_t *o = parse(body, len, JSON_OBJECT);
    int r = o ? inspect_read(state, generation, o, sandbox_id)
              : fawn_err(FAWN_EPROTO, "the engine's inspect reply is not a JSON object");
    json_decref(o);
    if (r < 0) {
        *state = SBX_UNKNOWN;
        generation[0] = '\0';
    }
    return r;
}

int container_create_parse(char id[65], long status, const char *body, size_t len) {
    id[0] = '\0';
    json_t *o = status == 201 ? parse(body, len, JSON_OBJECT) : NULL;
    const char *v = json_string_value(json_object_get(o, "Id"));
    int r = hex_exact(v, CONTAINER_ID_LEN)
                ? 0
                : fawn_err(FAWN_EPROTO, "the engine did not create the container (status %ld)",
                           status);
    if (r == 0)
        memcpy(id, v, CONTAINER_ID_LEN + 1);
    json_decref(o);
    return r;
}

int container_list_parse(long status, const char *body, size_t len,
                         int (*each)(void *each_ctx, const char *sandbox_id,
                                     const char *generation),
                         void *each_ctx) {
    json_t *list = status == 200 ? parse(body, len, JSON_ARRAY) : NULL;
    int r = list ? 0
                 : fawn_err(FAWN_EPROTO, "the engine did not list containers (status %ld)", status);
    if (r == 0 && json_array_size(list) > CONTAINER_LIST_MAX)
        r = fawn_err(FAWN_EPROTO, "the engine listed more than %d containers", CONTAINER_LIST_MAX);
    const char *sandbox, *gen;
    /* Every entry is checked before any is reported. */
    for (size_t i = 0; r == 0 && i < json_array_size(list); i++) {
        const json_t *e = json_array_get(list, i);
        r = json_is_object(e) ? labels_read(&sandbox, &gen, json_object_get(e, "Labels"), false)
                              : fawn_err(FAWN_EPROTO, "the engine listed a non-object");
    }
    for (size_t i = 0; r == 0 && i < json_array_size(list); i++)
        if (labels_read(&sandbox, &gen, json_object_get(json_array_get(list, i), "Labels"),
                        false) == 0)
            r = each(each_ctx, sandbox, gen);
    json_decref(list);
    return r;
}
