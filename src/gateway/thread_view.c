/* What a thread search returns of each thread (LangGraph's select and
 * extract) and which threads it names (ids): the search body's parts a
 * client shapes the answer with, parsed and bounded here (internal.h,
 * "thread search views"). */
#include <stdlib.h>
#include <string.h>

#include "gateway/internal.h"

/* The thread object's fields a search may select, by bit. "context" is a
 * LangGraph field fawn's threads do not have: refused by name. */
static const char *const selectable[] = {"thread_id",        "created_at", "updated_at",
                                         "state_updated_at", "metadata",   "config",
                                         "status",           "values",     "interrupts"};

/* The roots an extract path may start at: the thread object's fields, of
 * values only the title (the one state value a thread object carries). */
static const char *const extract_roots[] = {"thread_id",        "created_at", "updated_at",
                                            "state_updated_at", "metadata",   "config",
                                            "status",           "interrupts", "values"};

void gw_thread_view_clear(gw_thread_view *v) {
    json_decref(v->extract);
    *v = (gw_thread_view){0};
}

static int field_bit(unsigned *bit, const char *name) {
    *bit = 0;
    for (size_t i = 0; name && i < ARRAY_LEN(selectable); i++)
        if (strcmp(name, selectable[i]) == 0) {
            *bit = 1u << i;
            return 0;
        }
    if (name && strcmp(name, "context") == 0)
        return fawn_err(FAWN_EINVAL, "select field 'context' is not supported: fawn threads "
                                     "have no context");
    return fawn_err(FAWN_EINVAL, "select must name thread fields (thread_id, created_at, "
                                 "updated_at, state_updated_at, metadata, config, status, "
                                 "values, interrupts)");
}

static int select_parse(unsigned *fields, const json_t *select) {
    *fields = 0;
    if (!select || json_is_null(select))
        return 0;
    if (!json_is_array(select) || json_array_size(select) > GW_SELECT_FIELDS_MAX)
        return fawn_err(FAWN_EINVAL, "select must be a list of at most %d field names",
                        GW_SELECT_FIELDS_MAX);
    size_t i;
    json_t *name;
    json_array_foreach(select, i, name) {
        unsigned bit;
        int r = field_bit(&bit, json_string_value(name));
        if (r < 0)
            return r;
        *fields |= bit;
    }
    return 0;
}

/* ---- extract paths ---- */

/* One step of a path: a key, or an index into a list. */
typedef struct path_step {
    const char *key; /* points into the path; keylen bytes */
    size_t keylen;
    bool is_index;
    long long index; /* negative: from the end */
} path_step;

static bool key_char(char c) {
    return c != '.' && c != '[' && c != ']' && (unsigned char)c >= 0x20 && c != 0x7f;
}

/* The step at *p (the first one has no leading '.'), moving *p past it. */
static int step_read(path_step *out, const char **p, bool first) {
    *out = (path_step){0};
    const char *s = *p;
    if (!first && *s == '[') {
        bool neg = s[1] == '-';
        const char *d = s + 1 + neg;
        size_t digits = strspn(d, "0123456789");
        if (digits == 0 || digits > GW_EXTRACT_INDEX_DIGITS_MAX || d[digits] != ']')
            return fawn_err(FAWN_EINVAL, "an extract path's index is [digits] or [-digits]");
        out->is_index = true;
        out->index = strtoll(d, NULL, 10) * (neg ? -1 : 1);
        *p = d + digits + 1;
        return 0;
    }
    if (!first && *s++ != '.')
        return fawn_err(FAWN_EINVAL, "an extract path's steps are .key or [index]");
    size_t n = 0;
    while (key_char(s[n]))
        n++;
    if (n == 0)
        return fawn_err(FAWN_EINVAL, "an extract path's keys are not empty");
    out->key = s;
    out->keylen = n;
    *p = s + n;
    return 0;
}

static bool key_is(const path_step *st, const char *name) {
    return !st->is_index && st->keylen == strlen(name) && memcmp(st->key, name, st->keylen) == 0;
}

/* The first steps must name a field of the thread object; of values, only
 * values.title. */
static int root_check(const path_step *first, const path_step *second, bool has_second) {
    bool known = false;
    for (size_t i = 0; i < ARRAY_LEN(extract_roots); i++)
        known = known || key_is(first, extract_roots[i]);
    if (!known)
        return fawn_err(FAWN_EINVAL, "an extract path starts at a thread field");
    if (key_is(first, "values") && !(has_second && key_is(second, "title")))
        return fawn_err(FAWN_EINVAL, "of values, an extract path may name only values.title: "
                                     "the thread's state is at /api/threads/{id}/state");
    return 0;
}

/* Parses path into steps[0..*n). */
static int path_parse(path_step steps[GW_EXTRACT_STEPS_MAX], size_t *n, const char *path) {
    *n = 0;
    if (!path || strlen(path) > GW_EXTRACT_PATH_MAX)
        return fawn_err(FAWN_EINVAL, "an extract path is text of at most %d bytes",
                        GW_EXTRACT_PATH_MAX);
    const char *p = path;
    int r = 0;
    while (r == 0 && (*n == 0 || *p)) {
        if (*n == GW_EXTRACT_STEPS_MAX)
            return fawn_err(FAWN_EINVAL, "an extract path has at most %d steps",
                            GW_EXTRACT_STEPS_MAX);
        r = step_read(&steps[*n], &p, *n == 0);
        *n += r == 0;
    }
    if (r == 0)
        r = root_check(&steps[0], &steps[1], *n > 1);
    return r;
}

int gw_extract_path_check(const char *path) {
    path_step steps[GW_EXTRACT_STEPS_MAX];
    size_t n;
    return path_parse(steps, &n, path);
}

static const json_t *step_take(const json_t *v, const path_step *st) {
    if (st->is_index) {
        long long size = (long long)json_array_size(v);
        long long at = st->index < 0 ? size + st->index : st->index;
        return json_is_array(v) && at >= 0 && at < size ? json_array_get(v, (size_t)at) : NULL;
    }
    return json_is_object(v) ? json_object_getn(v, st->key, st->keylen) : NULL;
}

const json_t *gw_extract_value(const json_t *obj, const char *path) {
    path_step steps[GW_EXTRACT_STEPS_MAX];
    size_t n;
    if (path_parse(steps, &n, path) < 0)
        return NULL;
    const json_t *v = obj;
    for (size_t i = 0; v && i < n; i++)
        v = step_take(v, &steps[i]);
    return v;
}

static bool alias_valid(const char *alias) {
    size_t n = strlen(alias);
    if (n == 0 || n > GW_EXTRACT_ALIAS_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)alias[i] < 0x20 || alias[i] == 0x7f)
            return false;
    return true;
}

static int extract_parse(json_t **out, const json_t *extract) {
    *out = NULL;
    if (!extract || json_is_null(extract))
        return 0;
    if (!json_is_object(extract) || json_object_size(extract) > GW_EXTRACT_PATHS_MAX)
        return fawn_err(FAWN_EINVAL, "extract must be an object of at most %d alias: path pairs",
                        GW_EXTRACT_PATHS_MAX);
    const char *alias;
    json_t *path;
    json_object_foreach((json_t *)extract, alias, path) {
        if (!alias_valid(alias))
            return fawn_err(FAWN_EINVAL, "an extract alias is 1 to %d bytes of printable text",
                            GW_EXTRACT_ALIAS_MAX);
        int r = gw_extract_path_check(json_string_value(path));
        if (r < 0)
            return r;
    }
    *out = json_deep_copy(extract);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int gw_thread_view_parse(gw_thread_view *out, const json_t *body) {
    *out = (gw_thread_view){0};
    int r = select_parse(&out->fields, json_object_get(body, "select"));
    if (r == 0)
        r = extract_parse(&out->extract, json_object_get(body, "extract"));
    if (r < 0)
        gw_thread_view_clear(out);
    return r;
}

json_t *gw_thread_view_apply(json_t *thread, const gw_thread_view *v) {
    if (!thread)
        return NULL;
    json_t *extracted = v->extract ? json_object() : NULL;
    const char *alias;
    json_t *path;
    json_object_foreach(v->extract, alias, path) {
        const json_t *found = gw_extract_value(thread, json_string_value(path));
        json_object_set_new(extracted, alias, found ? json_deep_copy(found) : json_null());
    }
    for (size_t i = 0; v->fields && i < ARRAY_LEN(selectable); i++)
        if (!(v->fields & (1u << i)))
            json_object_del(thread, selectable[i]);
    if (extracted)
        json_object_set_new(thread, "extracted", extracted);
    return thread;
}

int gw_thread_ids_parse(char **out, const json_t *ids) {
    *out = NULL;
    if (!ids || json_is_null(ids) || (json_is_array(ids) && json_array_size(ids) == 0))
        return 0;
    if (!json_is_array(ids) || json_array_size(ids) > STORE_SEARCH_IDS_MAX)
        return fawn_err(FAWN_EINVAL, "ids must be a list of at most %d thread ids",
                        STORE_SEARCH_IDS_MAX);
    size_t i;
    json_t *id;
    json_array_foreach(ids, i, id) {
        if (!json_is_string(id) || !fawn_id_valid(json_string_value(id)))
            return fawn_err(FAWN_EINVAL, "ids[%zu] must match [A-Za-z0-9_-]{1,64}", i);
    }
    *out = json_dumps(ids, JSON_COMPACT);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}
