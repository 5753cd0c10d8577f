#include "authz/authz.h"

#include <stdio.h>
#include <string.h>

#include "base/base.h"

/* Roles per policy: deployments use a handful, and a check scans them all. */
#define AUTHZ_ROLES_MAX 64
/* Role names follow the user id rule, [A-Za-z0-9_-]{1,64} (fawn_id_valid). */
#define AUTHZ_ROLE_NAME_MAX 64
/* Entries per allow/deny list: more than any catalogue of tools or models,
 * and small enough that the linear scan of a check stays cheap. */
#define AUTHZ_NAMES_MAX 1024
/* Bytes per listed name: longer than any tool, model, skill or server name. */
#define AUTHZ_NAME_MAX 256
/* A key path in a message: "authorization.roles.<64>.mcp_servers.allow[1023]"
 * plus an unknown key shown up to AUTHZ_SHOWN_MAX bytes fits. */
#define AUTHZ_PATH_MAX 192
/* Bytes of an untrusted name echoed back in a message. */
#define AUTHZ_SHOWN_MAX 64

#define AUTHZ_SECTION "authorization"
#define AUTHZ_WILDCARD "*"
#define AUTHZ_LOG "authz"
#define AUTHZ_DEFAULT_ROLE "user"
#define AUTHZ_SANDBOX_EXECUTE "execute"

/* Route permission names; index i is the bit 1u << i. */
static const char *const route_names[] = {
    "threads:read", "threads:write",  "threads:delete", "runs:create", "runs:read",
    "runs:cancel",  "sandboxes:read", "skills:write",   "mcp:admin",   "channels:admin",
};
_Static_assert(ARRAY_LEN(route_names) == 10 && AUTHZ_ROUTES_ALL == (1u << 6) - 1 &&
                   AUTHZ_ROUTES_ADMIN == ((1u << 6) | (1u << 7) | (1u << 8) | (1u << 9)),
               "one name per route permission bit");

static const char *const sandbox_names[] = {AUTHZ_SANDBOX_EXECUTE};

/* How a resource appears in the configuration and in messages. */
typedef struct resource_desc {
    const char *key;          /* key under a role */
    const char *item;         /* one item of it, for messages */
    const char *const *known; /* the only names its lists accept, or NULL for any */
    size_t known_len;
    const char *known_list; /* known, for messages */
} resource_desc;

static const resource_desc resources[AUTHZ_RESOURCE_COUNT] = {
    [AUTHZ_TOOLS] = {"tools", "tool", NULL, 0, NULL},
    [AUTHZ_MODELS] = {"models", "model", NULL, 0, NULL},
    [AUTHZ_SKILLS] = {"skills", "skill", NULL, 0, NULL},
    [AUTHZ_SANDBOX] = {"sandbox", "sandbox action", sandbox_names, ARRAY_LEN(sandbox_names),
                       AUTHZ_SANDBOX_EXECUTE},
    [AUTHZ_MCP_SERVERS] = {"mcp_servers", "MCP server", NULL, 0, NULL},
    [AUTHZ_ROUTES] = {"routes", "route permission", route_names, ARRAY_LEN(route_names),
                      "threads:read, threads:write, threads:delete, runs:create, runs:read, "
                      "runs:cancel, sandboxes:read, skills:write, mcp:admin, channels:admin"},
};
#define RESOURCE_KEY_LIST "tools, models, skills, sandbox, mcp_servers, routes"

static const char *const section_keys[] = {"enabled", "fail_closed", "default_role", "roles", NULL};
#define SECTION_KEY_LIST "enabled, fail_closed, default_role, roles"
static const char *const rule_keys[] = {"allow", "deny", NULL};
#define RULE_KEY_LIST "allow, deny"

/* A list of names; `all` when it covers every name ("*"). */
typedef struct name_set {
    bool all;
    size_t len;
    char **names;
} name_set;

/* One role's policy for one resource. */
typedef struct resource_rule {
    bool restricted; /* false: no policy configured, every name is allowed */
    name_set allow;
    name_set deny;
} resource_rule;

typedef struct authz_role {
    char name[AUTHZ_ROLE_NAME_MAX + 1];
    resource_rule rules[AUTHZ_RESOURCE_COUNT];
} authz_role;

struct authz_policy {
    bool enabled;
    bool fail_closed;
    const authz_role *default_role; /* one of roles */
    size_t role_count;
    authz_role roles[AUTHZ_ROLES_MAX];
};

/* ---- messages ---- */

/* s when it is short printable ASCII and safe to echo in a message; a
 * placeholder otherwise. */
static const char *text_shown(const char *s) {
    size_t n = strnlen(s, AUTHZ_SHOWN_MAX + 1);
    if (n > AUTHZ_SHOWN_MAX)
        return "(name too long to show)";
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
            return "(unprintable name)";
    return s;
}

/* A role name from a caller, echoed only when it is a valid role name. */
static const char *role_shown(const char *role) {
    return fawn_id_valid(role) ? role : "(invalid role name)";
}

/* FAWN_ECONFIG with "path: message". */
static int config_error(const char *path, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static int config_error(const char *path, const char *fmt, ...) {
    char msg[AUTHZ_PATH_MAX * 2];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return fawn_err(FAWN_ECONFIG, "%s: %s", path, msg);
}

/* out = "path.key", the key shown only when printable. */
static void path_join(char out[AUTHZ_PATH_MAX], const char *path, const char *key) {
    /* A path cut at AUTHZ_PATH_MAX still names the key well enough. */
    if (snprintf(out, AUTHZ_PATH_MAX, "%s.%s", path, text_shown(key)) >= AUTHZ_PATH_MAX)
        out[AUTHZ_PATH_MAX - 1] = '\0';
}

/* True when the object key of key_len bytes has no NUL byte in it. */
static bool key_clean(const char *key, size_t key_len) { return strlen(key) == key_len; }

/* An object key as text_shown shows it; a key with a NUL byte is not shown. */
static const char *key_shown(const char *key, size_t key_len) {
    return key_clean(key, key_len) ? text_shown(key) : "(unprintable name)";
}

/* FAWN_ECONFIG naming the first key of obj that is not in `allowed`
 * (NULL-terminated); `what` and `valid` describe the accepted keys. */
static int keys_check(const json_t *obj, const char *path, const char *const *allowed,
                      const char *what, const char *valid) {
    const char *key;
    size_t key_len;
    json_t *v;
    json_object_keylen_foreach((json_t *)obj, key, key_len, v) {
        (void)v;
        bool known = false;
        for (const char *const *a = allowed; *a && !known; a++)
            known = key_clean(key, key_len) && strcmp(*a, key) == 0;
        if (!known) {
            char child[AUTHZ_PATH_MAX];
            path_join(child, path, key_shown(key, key_len));
            return config_error(child, "unknown %s; valid %ss: %s", what, what, valid);
        }
    }
    return 0;
}

/* ---- loading ---- */

static void name_set_free(name_set *s) {
    for (size_t i = 0; i < s->len; i++)
        free(s->names[i]);
    free(s->names);
}

/* True when name is one the resource's lists accept. */
static bool resource_name_known(const resource_desc *desc, const char *name) {
    if (!desc->known || strcmp(name, AUTHZ_WILDCARD) == 0)
        return true;
    for (size_t i = 0; i < desc->known_len; i++)
        if (strcmp(desc->known[i], name) == 0)
            return true;
    return false;
}

/* Checks one listed name: a non-empty string of at most AUTHZ_NAME_MAX bytes
 * without NUL or control characters, known to the resource when it has a
 * fixed set of names. */
static int name_check(const json_t *v, const char *path, const resource_desc *desc) {
    if (!json_is_string(v) || json_string_length(v) == 0)
        return config_error(path, "must be a non-empty string");
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    if (n > AUTHZ_NAME_MAX)
        return config_error(path, "must be at most %d bytes", AUTHZ_NAME_MAX);
    if (strlen(s) != n)
        return config_error(path, "must not contain NUL bytes");
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return config_error(path, "must not contain control characters");
    if (!resource_name_known(desc, s))
        return config_error(path, "unknown %s '%s'; valid: %s", desc->item, text_shown(s),
                            desc->known_list);
    return 0;
}

/* Loads a JSON array of names into out (which must be empty); "*" sets all. */
static int name_set_load(name_set *out, const json_t *list, const char *path,
                         const resource_desc *desc) {
    size_t n = json_array_size(list);
    if (n > AUTHZ_NAMES_MAX)
        return config_error(path, "at most %d names allowed, got %zu", AUTHZ_NAMES_MAX, n);
    if (n > 0 && !(out->names = calloc(n, sizeof *out->names)))
        return fawn_err(FAWN_ENOMEM, "out of memory loading %s", path);
    for (size_t i = 0; i < n; i++) {
        char child[AUTHZ_PATH_MAX];
        snprintf(child, sizeof child, "%s[%zu]", path, i);
        const json_t *v = json_array_get(list, i);
        int r = name_check(v, child, desc);
        if (r < 0)
            return r;
        const char *s = json_string_value(v);
        if (strcmp(s, AUTHZ_WILDCARD) == 0) {
            out->all = true;
            continue;
        }
        if (!(out->names[out->len] = strdup(s)))
            return fawn_err(FAWN_ENOMEM, "out of memory loading %s", path);
        out->len++;
    }
    return 0;
}

/* allow: absent, "*" or true = all; false = none; or a list of names. */
static int allow_load(name_set *out, const json_t *v, const char *path, const resource_desc *desc) {
    if (!v || json_is_true(v)) {
        out->all = true;
        return 0;
    }
    if (json_is_false(v))
        return 0;
    if (json_is_string(v)) {
        if (strcmp(json_string_value(v), AUTHZ_WILDCARD) != 0 ||
            json_string_length(v) != strlen(AUTHZ_WILDCARD))
            return config_error(path, "a single value must be \"*\"; write names as a list");
        out->all = true;
        return 0;
    }
    if (!json_is_array(v))
        return config_error(path, "must be \"*\", true, false or a list of names");
    return name_set_load(out, v, path, desc);
}

/* deny: absent (nothing) or a list of names. */
static int deny_load(name_set *out, const json_t *v, const char *path, const resource_desc *desc) {
    if (!v)
        return 0;
    if (!json_is_array(v))
        return config_error(path, "must be a list of names");
    return name_set_load(out, v, path, desc);
}

static int rule_load(resource_rule *rule, const json_t *v, const char *path,
                     const resource_desc *desc) {
    if (!json_is_object(v))
        return config_error(path, "must be a mapping with allow and/or deny");
    int r = keys_check(v, path, rule_keys, "key", RULE_KEY_LIST);
    if (r < 0)
        return r;
    rule->restricted = true;
    char child[AUTHZ_PATH_MAX];
    path_join(child, path, "allow");
    if ((r = allow_load(&rule->allow, json_object_get(v, "allow"), child, desc)) < 0)
        return r;
    path_join(child, path, "deny");
    return deny_load(&rule->deny, json_object_get(v, "deny"), child, desc);
}

/* The resource a clean role key names, or AUTHZ_RESOURCE_COUNT. */
static enum authz_resource resource_find(const char *key, size_t key_len) {
    for (int i = 0; i < AUTHZ_RESOURCE_COUNT; i++)
        if (key_clean(key, key_len) && strcmp(resources[i].key, key) == 0)
            return (enum authz_resource)i;
    return AUTHZ_RESOURCE_COUNT;
}

/* Loads a role's value: null (no policies) or a mapping of resources. */
static int role_rules_load(authz_role *role, const json_t *v, const char *path) {
    if (json_is_null(v))
        return 0;
    if (!json_is_object(v))
        return config_error(path, "must be a mapping of resources to policies, or empty");
    const char *key;
    size_t key_len;
    json_t *rule;
    json_object_keylen_foreach((json_t *)v, key, key_len, rule) {
        char child[AUTHZ_PATH_MAX];
        path_join(child, path, key_shown(key, key_len));
        enum authz_resource res = resource_find(key, key_len);
        if (res == AUTHZ_RESOURCE_COUNT)
            return config_error(child, "unknown resource; valid resources: %s", RESOURCE_KEY_LIST);
        int r = rule_load(&role->rules[res], rule, child, &resources[res]);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Adds a role named `name` (key_len bytes) to p; its rules come from v
 * (NULL = none). */
static int role_add(authz_policy *p, const char *name, size_t key_len, const json_t *v,
                    const char *roles_path) {
    if (!key_clean(name, key_len) || !fawn_id_valid(name))
        return config_error(roles_path,
                            "role name '%s' is invalid: use 1-%d characters of A-Z a-z 0-9 _ -",
                            key_shown(name, key_len), AUTHZ_ROLE_NAME_MAX);
    authz_role *role = &p->roles[p->role_count++];
    snprintf(role->name, sizeof role->name, "%s", name);
    if (!v)
        return 0;
    char path[AUTHZ_PATH_MAX];
    path_join(path, roles_path, name);
    return role_rules_load(role, v, path);
}

static int roles_load(authz_policy *p, const json_t *roles) {
    static const char path[] = AUTHZ_SECTION ".roles";
    if (!roles) {
        int r = role_add(p, "admin", strlen("admin"), NULL, path);
        return r < 0 ? r : role_add(p, "user", strlen("user"), NULL, path);
    }
    if (!json_is_object(roles))
        return config_error(path, "must be a mapping of role names to policies");
    if (json_object_size(roles) > AUTHZ_ROLES_MAX)
        return config_error(path, "at most %d roles allowed, got %zu", AUTHZ_ROLES_MAX,
                            json_object_size(roles));
    const char *key;
    size_t key_len;
    json_t *v;
    json_object_keylen_foreach((json_t *)roles, key, key_len, v) {
        int r = role_add(p, key, key_len, v, path);
        if (r < 0)
            return r;
    }
    return 0;
}

/* The configured role named exactly `name`, or NULL. */
static const authz_role *role_lookup(const authz_policy *p, const char *name) {
    for (size_t i = 0; i < p->role_count; i++)
        if (strcmp(p->roles[i].name, name) == 0)
            return &p->roles[i];
    return NULL;
}

static int default_role_load(authz_policy *p, const json_t *section) {
    static const char path[] = AUTHZ_SECTION ".default_role";
    const json_t *v = section ? json_object_get(section, "default_role") : NULL;
    const char *name = AUTHZ_DEFAULT_ROLE;
    if (v) {
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            strlen(json_string_value(v)) != json_string_length(v))
            return config_error(path, "must be a non-empty role name");
        name = json_string_value(v);
    }
    if (!(p->default_role = role_lookup(p, name)))
        return config_error(path, "role '%s' is not defined in " AUTHZ_SECTION ".roles",
                            text_shown(name));
    return 0;
}

static int bool_load(bool *out, const json_t *section, const char *key) {
    const json_t *v = json_object_get(section, key);
    if (!v)
        return 0;
    if (!json_is_boolean(v)) {
        char path[AUTHZ_PATH_MAX];
        path_join(path, AUTHZ_SECTION, key);
        return config_error(path, "must be true or false");
    }
    *out = json_is_true(v);
    return 0;
}

static int policy_parse(authz_policy *p, const json_t *section) {
    if (section && json_is_null(section))
        section = NULL;
    if (section && !json_is_object(section))
        return config_error(AUTHZ_SECTION, "must be a mapping");
    int r = 0;
    if (section) {
        if ((r = keys_check(section, AUTHZ_SECTION, section_keys, "key", SECTION_KEY_LIST)) < 0 ||
            (r = bool_load(&p->enabled, section, "enabled")) < 0 ||
            (r = bool_load(&p->fail_closed, section, "fail_closed")) < 0)
            return r;
    }
    if ((r = roles_load(p, section ? json_object_get(section, "roles") : NULL)) < 0)
        return r;
    return default_role_load(p, section);
}

int authz_policy_load(authz_policy **out, const json_t *section) {
    *out = NULL;
    authz_policy *p = calloc(1, sizeof *p);
    if (!p)
        return fawn_err(FAWN_ENOMEM, "out of memory loading " AUTHZ_SECTION);
    p->fail_closed = true;
    int r = policy_parse(p, section);
    if (r < 0) {
        authz_policy_free(p);
        return r;
    }
    *out = p;
    return 0;
}

void authz_policy_free(authz_policy *p) {
    if (!p)
        return;
    for (size_t i = 0; i < p->role_count; i++) {
        for (int res = 0; res < AUTHZ_RESOURCE_COUNT; res++) {
            name_set_free(&p->roles[i].rules[res].allow);
            name_set_free(&p->roles[i].rules[res].deny);
        }
    }
    free(p);
}

/* ---- decisions ---- */

bool authz_enabled(const authz_policy *p) { return p && p->enabled; }

static bool name_set_has(const name_set *s, const char *name) {
    if (s->all)
        return true;
    for (size_t i = 0; i < s->len; i++)
        if (strcmp(s->names[i], name) == 0)
            return true;
    return false;
}

static bool rule_allows(const resource_rule *rule, const char *name) {
    if (!rule->restricted)
        return true;
    return !name_set_has(&rule->deny, name) && name_set_has(&rule->allow, name);
}

/* The role a principal acts as: default_role for NULL or "", else the
 * configured role of that name; NULL when there is none. */
static const authz_role *policy_role_find(const authz_policy *p, const char *role) {
    if (!role || !*role)
        return p->default_role;
    return role_lookup(p, role);
}

/* A role the policy cannot decide for: what fail_closed says, with a warning
 * when the request is let through. */
static bool unknown_role_allowed(const authz_policy *p, const char *role) {
    if (p->fail_closed)
        return false;
    log_warn(AUTHZ_LOG,
             "role '%s' is not configured; allowed because " AUTHZ_SECTION ".fail_closed is false",
             role_shown(role));
    return true;
}

/* Whether `found` (the lookup of `role`, NULL when unknown) may use name. */
static bool role_allows(const authz_policy *p, const authz_role *found, const char *role,
                        enum authz_resource res, const char *name) {
    if (!found)
        return unknown_role_allowed(p, role);
    return rule_allows(&found->rules[res], name);
}

int authz_check(const authz_policy *p, const char *role, enum authz_resource res,
                const char *name) {
    if (!p || !name || (unsigned)res >= AUTHZ_RESOURCE_COUNT)
        return fawn_err(FAWN_EINVAL, "invalid authorization request");
    if (!p->enabled)
        return 0;
    const authz_role *found = policy_role_find(p, role);
    if (role_allows(p, found, role, res, name))
        return 0;
    if (!found)
        return fawn_err(FAWN_EPERM, "Permission denied: role '%s' is not configured",
                        role_shown(role));
    return fawn_err(FAWN_EPERM, "Permission denied: role '%s' may not use %s '%s'", found->name,
                    resources[res].item, text_shown(name));
}

/* The user route permissions of role (see authz_route_permissions). */
static unsigned user_route_permissions(const authz_policy *p, const char *role) {
    if (!p->enabled)
        return AUTHZ_ROUTES_ALL;
    const authz_role *found = policy_role_find(p, role);
    if (!found)
        return unknown_role_allowed(p, role) ? AUTHZ_ROUTES_ALL : 0;
    unsigned bits = 0;
    for (size_t i = 0; i < ARRAY_LEN(route_names); i++)
        if ((1u << i) & AUTHZ_ROUTES_ALL &&
            rule_allows(&found->rules[AUTHZ_ROUTES], route_names[i]))
            bits |= 1u << i;
    return bits;
}

/* The administration permissions of role: all for AUTHZ_ADMIN_ROLE, else
 * those its routes allow list names (never through "*" or no policy). */
static unsigned admin_route_permissions(const authz_policy *p, const char *role) {
    if (role && strcmp(role, AUTHZ_ADMIN_ROLE) == 0)
        return AUTHZ_ROUTES_ADMIN;
    const authz_role *found = p->enabled ? policy_role_find(p, role) : NULL;
    const resource_rule *rule = found ? &found->rules[AUTHZ_ROUTES] : NULL;
    unsigned bits = 0;
    for (size_t i = 0; rule && rule->restricted && i < ARRAY_LEN(route_names); i++) {
        const char *name = route_names[i];
        bool named = false;
        for (size_t k = 0; k < rule->allow.len && !named; k++)
            named = strcmp(rule->allow.names[k], name) == 0;
        if ((1u << i) & AUTHZ_ROUTES_ADMIN && named && !name_set_has(&rule->deny, name))
            bits |= 1u << i;
    }
    return bits;
}

unsigned authz_route_permissions(const authz_policy *p, const char *role) {
    if (!p)
        return 0;
    return user_route_permissions(p, role) | admin_route_permissions(p, role);
}

const char *authz_permission_name(unsigned bit) {
    for (size_t i = 0; i < ARRAY_LEN(route_names); i++)
        if (bit == 1u << i)
            return route_names[i];
    return NULL;
}

int authz_sandbox_execute(const authz_policy *p, const char *role) {
    if (!p)
        return fawn_err(FAWN_EINVAL, "invalid authorization request");
    if (!p->enabled)
        return 0;
    if (role_allows(p, policy_role_find(p, role), role, AUTHZ_SANDBOX, AUTHZ_SANDBOX_EXECUTE))
        return 0;
    return fawn_err(FAWN_EPERM, "Sandbox execution is not permitted for your role");
}
