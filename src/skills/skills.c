/* The skills catalog (skills.h): a bounded walk of the skills directory and
 * the front matter of each SKILL.md, read with libyaml. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <yaml.h>

#include "base/fsx.h"
#include "base/json.h"
#include "skills/skills.h"

#define SKILL_FILE "SKILL.md"
/* The category of skills directly in the skills directory: shared by every
 * user, read-only, as DeerFlow's public skills are. */
#define TOP_CATEGORY "public"
/* The category of a user's own skills (under their home directory). */
#define CUSTOM_CATEGORY "custom"

/* ---- front matter ---- */

/* The length of the line at s (without its "\n" or "\r\n"), and where the
 * next one starts, within end. */
static size_t line_len(const char **next, const char *s, const char *end) {
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *stop = nl ? nl : end;
    *next = nl ? nl + 1 : end;
    return (size_t)(stop - s) - (stop > s && stop[-1] == '\r');
}

static bool is_mark(const char *s, size_t n) { return n == 3 && memcmp(s, "---", 3) == 0; }

/* The text between a first line "---" and the next line "---". */
static bool block_find(const char **start, size_t *n, const char *text, size_t len) {
    const char *end = text + len, *next;
    if (!is_mark(text, line_len(&next, text, end)))
        return false;
    *start = next;
    for (const char *line = next; line < end; line = next) {
        size_t l = line_len(&next, line, end);
        if (is_mark(line, l)) {
            *n = (size_t)(line - *start);
            return true;
        }
    }
    return false;
}

static int event_next(yaml_parser_t *p, yaml_event_t *ev) {
    if (yaml_parser_parse(p, ev))
        return 0;
    return fawn_err(FAWN_EINVAL, "the front matter is not YAML: %s",
                    p->problem ? p->problem : "malformed");
}

static bool event_opens(const yaml_event_t *ev) {
    return ev->type == YAML_SEQUENCE_START_EVENT || ev->type == YAML_MAPPING_START_EVENT;
}

static bool event_closes(const yaml_event_t *ev) {
    return ev->type == YAML_SEQUENCE_END_EVENT || ev->type == YAML_MAPPING_END_EVENT;
}

/* Reads past the rest of the node that first (already read) starts. */
static int node_skip(yaml_parser_t *p, const yaml_event_t *first) {
    int r = 0;
    for (size_t depth = event_opens(first); r == 0 && depth > 0;) {
        yaml_event_t ev;
        r = event_next(p, &ev);
        if (r == 0)
            depth = depth + event_opens(&ev) - event_closes(&ev);
        if (r == 0)
            yaml_event_delete(&ev);
    }
    return r;
}

/* A scalar's text as a JSON string (cut to SKILLS_TEXT_MAX), or NULL when
 * it holds a NUL or is not UTF-8. */
static json_t *scalar_text(const yaml_event_t *ev) {
    const char *s = (const char *)ev->data.scalar.value;
    size_t n = ev->data.scalar.length;
    if (memchr(s, '\0', n) || !fawn_utf8_valid(s, n))
        return NULL;
    return json_stringn(s, n > SKILLS_TEXT_MAX ? fawn_utf8_char_start(s, SKILLS_TEXT_MAX) : n);
}

/* The rest of the sequence whose start was just read, as an array of its
 * texts into *out; FAWN_EINVAL when an item is not a text, is empty, or
 * comes after SKILLS_TOOLS_MAX others. */
static int tools_read(json_t **out, yaml_parser_t *p) {
    *out = json_array();
    int r = *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    for (bool end = false; r == 0 && !end;) {
        yaml_event_t ev;
        if ((r = event_next(p, &ev)) < 0)
            break;
        end = ev.type == YAML_SEQUENCE_END_EVENT;
        json_t *text = !end && ev.type == YAML_SCALAR_EVENT ? scalar_text(&ev) : NULL;
        if (!end &&
            (!text || json_string_length(text) == 0 || json_array_size(*out) == SKILLS_TOOLS_MAX))
            r = fawn_err(FAWN_EINVAL, SKILLS_KEY_TOOLS " is not a list of at most %d names",
                         SKILLS_TOOLS_MAX);
        if (r == 0 && text && json_array_append(*out, text) < 0)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        json_decref(text);
        yaml_event_delete(&ev);
    }
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

/* The value (its first event already read) of key: a text, the list of
 * allowed-tools, or NULL for a nested value (read past). */
static int value_read(json_t **out, yaml_parser_t *p, const yaml_event_t *key,
                      const yaml_event_t *value) {
    *out = NULL;
    bool tools = key->type == YAML_SCALAR_EVENT &&
                 strcmp((const char *)key->data.scalar.value, SKILLS_KEY_TOOLS) == 0;
    if (tools && value->type == YAML_SEQUENCE_START_EVENT)
        return tools_read(out, p);
    if (tools)
        return fawn_err(FAWN_EINVAL, SKILLS_KEY_TOOLS " is not a list");
    *out = value->type == YAML_SCALAR_EVENT ? scalar_text(value) : NULL;
    return node_skip(p, value);
}

/* The kind of a value whose first event is ev, as validation names it. */
static const char *value_kind(const yaml_event_t *ev) {
    switch (ev->type) {
    case YAML_SCALAR_EVENT: return ev->data.scalar.length > SKILLS_TEXT_MAX ? "long text" : "text";
    case YAML_SEQUENCE_START_EVENT: return "list";
    case YAML_MAPPING_START_EVENT: return "mapping";
    default: return "alias";
    }
}

/* One key and its value, or the mapping's end (*done); kinds (or NULL)
 * gets the kind of each key's first value. */
static int pair_read(json_t *obj, json_t *kinds, bool *done, yaml_parser_t *p) {
    yaml_event_t key, value;
    int r = event_next(p, &key);
    if (r < 0)
        return r;
    *done = key.type == YAML_MAPPING_END_EVENT;
    if (!*done && (r = node_skip(p, &key)) == 0 && (r = event_next(p, &value)) == 0) {
        json_t *v = NULL;
        r = value_read(&v, p, &key, &value);
        const char *k = key.type == YAML_SCALAR_EVENT ? (const char *)key.data.scalar.value : NULL;
        bool keep = v && k && strlen(k) == key.data.scalar.length &&
                    fawn_utf8_valid(k, strlen(k)) && !json_object_get(obj, k);
        if (keep)
            json_object_set(obj, k, v);
        bool named = k && strlen(k) == key.data.scalar.length && fawn_utf8_valid(k, strlen(k));
        if (r == 0 && kinds && named && !json_object_get(kinds, k))
            json_object_set_new(kinds, k, json_string(value_kind(&value)));
        json_decref(v);
        yaml_event_delete(&value);
    }
    yaml_event_delete(&key);
    return r;
}

/* Expects events of the given types in turn; a stream without a document
 * (an empty block) sets *empty. */
static int mapping_open(bool *empty, yaml_parser_t *p) {
    static const yaml_event_type_t want[] = {YAML_STREAM_START_EVENT, YAML_DOCUMENT_START_EVENT,
                                             YAML_MAPPING_START_EVENT};
    *empty = false;
    int r = 0;
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(want) && !*empty; i++) {
        yaml_event_t ev;
        if ((r = event_next(p, &ev)) < 0)
            break;
        *empty = i == 1 && ev.type == YAML_STREAM_END_EVENT;
        if (!*empty && ev.type != want[i])
            r = fawn_err(FAWN_EINVAL, "the front matter is not a YAML mapping");
        yaml_event_delete(&ev);
    }
    return r;
}

/* skills_front_matter, with the kind of every top-level key's value into
 * kinds (or NULL). */
static int front_matter_read(json_t **out, json_t *kinds, const char *text, size_t len) {
    *out = NULL;
    const char *block;
    size_t n;
    if (!block_find(&block, &n, text, len))
        return fawn_err(FAWN_ENOENT, "no front matter");
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)block, n);
    json_t *obj = json_object();
    bool empty = false, done = false;
    int r = obj ? mapping_open(&empty, &p) : fawn_err(FAWN_ENOMEM, "out of memory");
    while (r == 0 && !empty && !done)
        r = pair_read(obj, kinds, &done, &p);
    yaml_parser_delete(&p);
    if (r < 0) {
        json_decref(obj);
        return r;
    }
    *out = obj;
    return 0;
}

int skills_front_matter(json_t **out, const char *text, size_t len) {
    return front_matter_read(out, NULL, text, len);
}

/* ---- validation of a SKILL.md written through the API ---- */

/* The front matter keys DeerFlow accepts. */
static const char *const known_keys[] = {"name",           "description",      "license",
                                         SKILLS_KEY_TOOLS, "required-secrets", "secrets-autonomous",
                                         "metadata",       "compatibility",    "version",
                                         "author"};

static bool key_known(const char *key) {
    for (size_t i = 0; i < ARRAY_LEN(known_keys); i++)
        if (strcmp(key, known_keys[i]) == 0)
            return true;
    return false;
}

/* Every key of kinds is a known one. */
static int keys_check(const json_t *kinds) {
    const char *key;
    json_t *kind;
    json_object_foreach((json_t *)kinds, key, kind) {
        if (!key_known(key))
            return fawn_err(FAWN_EINVAL, "Unexpected key in SKILL.md frontmatter: %.64s", key);
    }
    return 0;
}

static bool kind_is(const json_t *kinds, const char *key, const char *kind) {
    const char *k = json_string_value(json_object_get(kinds, key));
    return k && strcmp(k, kind) == 0;
}

/* name: present, text, a valid skill name equal to the one asked for. */
static int name_check(const json_t *fm, const json_t *kinds, const char *name) {
    const char *given = json_string_value(json_object_get(fm, "name"));
    if (!json_object_get(kinds, "name"))
        return fawn_err(FAWN_EINVAL, "Missing 'name' in frontmatter");
    if (!kind_is(kinds, "name", "text") || !given)
        return fawn_err(FAWN_EINVAL, "Name must be a string");
    if (!skills_name_valid(given))
        return fawn_err(FAWN_EINVAL,
                        "Name should be hyphen-case (lowercase letters, digits and "
                        "single hyphens inside), at most %d characters",
                        SKILLS_NAME_MAX);
    if (strcmp(given, name) != 0)
        return fawn_err(FAWN_EINVAL, "Frontmatter name '%s' must match requested skill name '%s'",
                        given, name);
    return 0;
}

/* description: present, text of at most SKILLS_TEXT_MAX bytes, no angle
 * brackets. */
static int description_check(const json_t *fm, const json_t *kinds) {
    const char *d = json_string_value(json_object_get(fm, "description"));
    if (!json_object_get(kinds, "description"))
        return fawn_err(FAWN_EINVAL, "Missing 'description' in frontmatter");
    if (kind_is(kinds, "description", "long text"))
        return fawn_err(FAWN_EINVAL, "Description is too long (at most %d bytes)", SKILLS_TEXT_MAX);
    if (!kind_is(kinds, "description", "text") || !d)
        return fawn_err(FAWN_EINVAL, "Description must be a string");
    if (strpbrk(d, "<>"))
        return fawn_err(FAWN_EINVAL, "Description cannot contain angle brackets (< or >)");
    return 0;
}

/* required-secrets, when present, is a list; secrets-autonomous a boolean. */
static int secrets_check(const json_t *fm, const json_t *kinds) {
    static const char *const booleans[] = {"true", "false", "True", "False", "TRUE", "FALSE"};
    if (json_object_get(kinds, "required-secrets") && !kind_is(kinds, "required-secrets", "list"))
        return fawn_err(FAWN_EINVAL, "required-secrets in SKILL.md must be a list");
    const char *autonomous = json_string_value(json_object_get(fm, "secrets-autonomous"));
    bool ok = !json_object_get(kinds, "secrets-autonomous");
    for (size_t i = 0; !ok && autonomous && i < ARRAY_LEN(booleans); i++)
        ok = strcmp(autonomous, booleans[i]) == 0;
    return ok ? 0 : fawn_err(FAWN_EINVAL, "secrets-autonomous in SKILL.md must be a boolean");
}

int skills_doc_check(const char *name, const char *text, size_t len) {
    if (len > SKILLS_HEAD_MAX)
        return fawn_err(FAWN_EINVAL, "SKILL.md is larger than %zu bytes", SKILLS_HEAD_MAX);
    if (memchr(text, '\0', len) || !fawn_utf8_valid(text, len))
        return fawn_err(FAWN_EINVAL, "SKILL.md is not UTF-8 text");
    json_t *fm = NULL, *kinds = json_object();
    int r = kinds ? front_matter_read(&fm, kinds, text, len)
                  : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == FAWN_ENOENT)
        r = fawn_err(FAWN_EINVAL, "No YAML frontmatter found");
    if (r == 0)
        r = keys_check(kinds);
    if (r == 0)
        r = name_check(fm, kinds, name);
    if (r == 0)
        r = description_check(fm, kinds);
    if (r == 0)
        r = secrets_check(fm, kinds);
    json_decref(fm);
    json_decref(kinds);
    return r;
}

/* ---- the walk ---- */

/* The first SKILLS_HEAD_MAX bytes of fd. */
static int head_read(char **out, size_t *n, int fd) {
    *n = 0;
    *out = malloc(SKILLS_HEAD_MAX);
    if (!*out)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    while (*n < SKILLS_HEAD_MAX) {
        ssize_t got = read(fd, *out + *n, SKILLS_HEAD_MAX - *n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            return got < 0 ? fawn_err_sys(FAWN_EIO, errno, "read " SKILL_FILE) : 0;
        *n += (size_t)got;
    }
    return 0;
}

/* The regular file SKILL.md beneath fd (rel: "" or a skill's path), open
 * for reading, or < 0. */
static int doc_open(int fd, const char *rel) {
    char path[2 * NAME_MAX + sizeof SKILL_FILE + 2];
    if ((size_t)snprintf(path, sizeof path, "%s%s" SKILL_FILE, rel, rel[0] ? "/" : "") >=
        sizeof path)
        return fawn_err(FAWN_EINVAL, "skill path too long");
    int md = fsx_open_beneath(fd, path, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, FSX_NO_SYMLINKS);
    struct stat st;
    if (md >= 0 && (fstat(md, &st) < 0 || !S_ISREG(st.st_mode))) {
        close(md);
        return fawn_err(FAWN_ENOENT, "no regular " SKILL_FILE);
    }
    return md;
}

/* {name, category, description, license, path, allowed_tools?} of the skill
 * in directory fd, or NULL when it holds no regular SKILL.md or its front
 * matter is malformed (its tool restriction could not be read). */
static json_t *skill_read(int fd, const char *name, const char *category, const char *path) {
    _cleanup_close_ int md = doc_open(fd, "");
    if (md < 0)
        return NULL;
    char *head = NULL;
    size_t n = 0;
    json_t *fm = NULL;
    int r = head_read(&head, &n, md);
    if (r == 0 && (r = skills_front_matter(&fm, head, n)) == FAWN_ENOENT)
        r = 0;
    free(head);
    const char *description = json_string_value(json_object_get(fm, "description"));
    const char *license = json_string_value(json_object_get(fm, "license"));
    json_t *skill = r < 0 ? NULL
                          : json_pack("{s:s, s:s, s:s, s:s, s:s, s:O*}", "name", name, "category",
                                      category, "description", description ? description : "",
                                      "license", license ? license : "", "path", path,
                                      "allowed_tools", json_object_get(fm, SKILLS_KEY_TOOLS));
    json_decref(fm);
    return skill;
}

/* A name a listing shows: not hidden, UTF-8, no control characters. */
static bool name_shown(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || name[0] == '.' || !fawn_utf8_valid(name, n))
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return false;
    return true;
}

typedef struct walk {
    json_t *list;
    size_t seen;     /* directory entries looked at */
    const char *top; /* the category of the skills at the top */
    bool flat;       /* only the top: no category directories */
} walk;

static bool walk_full(const walk *w) {
    return w->seen >= SKILLS_ENTRIES_MAX || json_array_size(w->list) >= SKILLS_LIST_MAX;
}

static int walk_dir(walk *w, int dirfd, const char *category);

/* One entry of a directory: a skill, or (at the top) a category of them. */
static int walk_entry(walk *w, int dirfd, const char *name, const char *category) {
    struct stat st;
    if (!name_shown(name) || fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
        !S_ISDIR(st.st_mode))
        return 0;
    _cleanup_close_ int fd = fsx_open_beneath(dirfd, name, O_RDONLY | O_DIRECTORY, 0,
                                              FSX_NO_SYMLINKS);
    if (fd < 0)
        return 0;
    char path[2 * NAME_MAX + 2];
    snprintf(path, sizeof path, "%s%s%s", category ? category : "", category ? "/" : "", name);
    json_t *skill = skill_read(fd, name, category ? category : w->top, path);
    if (skill)
        return json_array_append_new(w->list, skill) == 0 ? 0
                                                          : fawn_err(FAWN_ENOMEM, "out of memory");
    return category || w->flat ? 0 : walk_dir(w, fd, name);
}

/* The entries of dirfd (category: the directory's, NULL at the top). */
static int walk_dir(walk *w, int dirfd, const char *category) {
    int copy = dup(dirfd);
    DIR *d = copy >= 0 ? fdopendir(copy) : NULL;
    if (!d) {
        if (copy >= 0)
            close(copy);
        return fawn_err_sys(FAWN_EIO, errno, "read the skills directory");
    }
    struct dirent *e;
    int r = 0;
    while (r == 0 && !walk_full(w) && (e = readdir(d))) {
        w->seen++;
        r = walk_entry(w, dirfd, e->d_name, category);
    }
    closedir(d);
    return r;
}

static int skill_cmp(const void *a, const void *b) {
    const json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
    int c = strcmp(json_string_value(json_object_get(x, "category")),
                   json_string_value(json_object_get(y, "category")));
    return c ? c
             : strcmp(json_string_value(json_object_get(x, "name")),
                      json_string_value(json_object_get(y, "name")));
}

/* list sorted in place, by category then name. */
static int list_sort(json_t *list) {
    size_t n = json_array_size(list);
    json_t **items = calloc(n ? n : 1, sizeof *items);
    if (!items)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        items[i] = json_incref(json_array_get(list, i));
    qsort(items, n, sizeof *items, skill_cmp);
    json_array_clear(list);
    for (size_t i = 0; i < n; i++)
        json_array_append_new(list, items[i]);
    free(items);
    return 0;
}

/* The skills under dir whose top-level ones are of category top (flat: no
 * category directories below). */
static int list_in(json_t **out, const char *dir, const char *top, bool flat) {
    *out = NULL;
    walk w = {.list = json_array(), .top = top, .flat = flat};
    if (!w.list)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = fd >= 0 || errno == ENOENT ? 0
                                       : fawn_err_sys(FAWN_EIO, errno, "open the skills directory");
    if (r == 0 && fd >= 0)
        r = walk_dir(&w, fd, NULL);
    if (r == 0)
        r = list_sort(w.list);
    if (r < 0) {
        json_decref(w.list);
        return r;
    }
    *out = w.list;
    return 0;
}

/* ---- names, the catalog a role sees, a skill's text ---- */

bool skills_name_valid(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > SKILLS_NAME_MAX || name[0] == '-' || name[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-';
        if (!ok || (c == '-' && name[i + 1] == '-'))
            return false;
    }
    return true;
}

int skills_list(json_t **out, const char *dir) { return list_in(out, dir, TOP_CATEGORY, false); }

int skills_custom_list(json_t **out, const char *dir) {
    return list_in(out, dir, CUSTOM_CATEGORY, true);
}

/* The skills of found that role may use appended to list, with their
 * state, and editable (and custom) when custom. */
static int catalog_add(json_t *list, json_t *found, const json_t *states,
                       const authz_policy *policy, const char *role, bool custom) {
    size_t i;
    json_t *skill;
    json_array_foreach(found, i, skill) {
        const char *name = json_string_value(json_object_get(skill, "name"));
        if (authz_check(policy, role, AUTHZ_SKILLS, name) < 0)
            continue;
        const json_t *state = json_object_get(states, name);
        json_object_set_new(skill, "enabled", json_boolean(!json_is_false(state)));
        json_object_set_new(skill, "editable", json_boolean(custom));
        json_object_set_new(skill, "custom", json_boolean(custom));
        if (json_array_append(list, skill) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

int skills_catalog(json_t **out, const skills_dirs *dirs, const json_t *states,
                   const authz_policy *policy, const char *role) {
    *out = NULL;
    json_t *shared = NULL, *custom = NULL, *list = json_array();
    int r = list ? skills_list(&shared, dirs->shared) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && dirs->custom)
        r = skills_custom_list(&custom, dirs->custom);
    if (r == 0)
        r = catalog_add(list, shared, states, policy, role, false);
    if (r == 0)
        r = catalog_add(list, custom, states, policy, role, true);
    json_decref(shared);
    json_decref(custom);
    if (r < 0) {
        json_decref(list);
        return r;
    }
    *out = list;
    return 0;
}

bool skills_offered(const json_t *skill) { return json_is_true(json_object_get(skill, "enabled")); }

json_t *skills_find(const json_t *catalog, const char *name) {
    size_t i;
    json_t *skill;
    json_array_foreach(catalog, i, skill) {
        const char *n = json_string_value(json_object_get(skill, "name"));
        if (name && n && strcmp(n, name) == 0)
            return skill;
    }
    return NULL;
}

json_t *skills_view(const json_t *skill) {
    return json_pack(
        "{s:O, s:O, s:O, s:O, s:O, s:O}", "name", json_object_get(skill, "name"), "description",
        json_object_get(skill, "description"), "license", json_object_get(skill, "license"),
        "category", json_object_get(skill, "category"), "enabled",
        json_object_get(skill, "enabled"), "editable", json_object_get(skill, "editable"));
}

/* At most SKILLS_DOC_MAX bytes of fd into *out (NUL-terminated), cut on a
 * character boundary; *cut when there was more. */
static int doc_read(char **out, bool *cut, int fd) {
    *cut = false;
    char *text = malloc(SKILLS_DOC_MAX + 2);
    size_t n = 0;
    int r = text ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    while (r == 0 && n < SKILLS_DOC_MAX + 1) {
        ssize_t got = read(fd, text + n, SKILLS_DOC_MAX + 1 - n);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            r = fawn_err_sys(FAWN_EIO, errno, "read " SKILL_FILE);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    if (r == 0 && n > SKILLS_DOC_MAX) {
        *cut = true;
        n = fawn_utf8_char_start(text, SKILLS_DOC_MAX);
    }
    if (r == 0 && (memchr(text, '\0', n) || !fawn_utf8_valid(text, n)))
        r = fawn_err(FAWN_EINVAL, SKILL_FILE " is not UTF-8 text");
    if (r < 0) {
        free(text);
        return r;
    }
    text[n] = '\0';
    *out = text;
    return 0;
}

int skills_doc_read(char **out, bool *cut, const skills_dirs *dirs, const json_t *skill) {
    *out = NULL;
    *cut = false;
    const char *path = json_string_value(json_object_get(skill, "path"));
    const char *dir = json_is_true(json_object_get(skill, "custom")) ? dirs->custom : dirs->shared;
    if (!dir)
        return fawn_err(FAWN_ENOENT, "no skills directory");
    _cleanup_close_ int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0 || !path)
        return fawn_err_sys(FAWN_ENOENT, errno, "open the skills directory");
    _cleanup_close_ int md = doc_open(fd, path);
    return md < 0 ? md : doc_read(out, cut, md);
}

/* ---- a user's own skills ---- */

int skills_user_dir(char out[PATH_MAX], const char *home, const char *user) {
    if ((size_t)snprintf(out, PATH_MAX, "%s/" SKILLS_USER_REL, home, user) >= PATH_MAX) {
        out[0] = '\0';
        return fawn_err(FAWN_EINVAL, "home path too long");
    }
    return 0;
}

int skills_custom_write(const char *home, const char *user, const char *name, const char *text,
                        size_t len) {
    if (!skills_name_valid(name) || !fawn_id_valid(user))
        return fawn_err(FAWN_EINVAL, "invalid skill name");
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, SKILLS_USER_REL "/%s", user, name);
    _cleanup_close_ int homefd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (homefd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open the home directory");
    _cleanup_close_ int dirfd = fsx_mkdirs_beneath(homefd, rel);
    if (dirfd < 0)
        return dirfd;
    fsx_staged s = {0};
    struct stat st;
    int r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, FSX_USER_FILE_MODE);
    if (r == 0)
        r = fsx_staged_write(&s, text, len);
    if (r == 0)
        r = fsx_staged_commit(&st, &s, SKILL_FILE, FSX_COMMIT_REPLACE, SKILL_FILE);
    fsx_staged_abort(&s);
    return r;
}

int skills_custom_remove(const char *home, const char *user, const char *name) {
    if (!skills_name_valid(name) || !fawn_id_valid(user))
        return fawn_err(FAWN_ENOENT, "no such skill");
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, SKILLS_USER_REL, user);
    _cleanup_close_ int homefd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int skillsfd = homefd < 0
                                       ? -1
                                       : fsx_open_beneath(homefd, rel, O_RDONLY | O_DIRECTORY, 0,
                                                          FSX_NO_SYMLINKS);
    _cleanup_close_ int fd = skillsfd < 0 ? -1
                                          : fsx_open_beneath(skillsfd, name, O_RDONLY | O_DIRECTORY,
                                                             0, FSX_NO_SYMLINKS);
    if (fd < 0 || unlinkat(fd, SKILL_FILE, 0) < 0)
        return fawn_err(FAWN_ENOENT, "Custom skill '%s' not found", name);
    if (unlinkat(skillsfd, name, AT_REMOVEDIR) < 0) /* a file left beside it: the skill is gone */
        log_warn("skills", "%s: directory of the removed skill %s kept: %s", rel, name,
                 strerror(errno));
    return 0;
}
