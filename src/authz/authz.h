/* authz: role-based authorization. The one place that decides whether a
 * role may use a tool, model, skill, MCP server, a route permission, or
 * execute in a sandbox.
 *
 * The policy comes from the `authorization:` section of config.yaml:
 *
 *   authorization:
 *     enabled: false        # disabled: every check allows
 *     fail_closed: true     # an unknown role is denied (true) or allowed (false)
 *     default_role: user    # role of principals that carry none; must be in roles
 *     roles:                # default {admin: {}, user: {}}
 *       guest:
 *         tools: {allow: [read_file]}
 *         routes: {allow: ["threads:read", "runs:read"]}
 *
 * Per role and resource: allow absent, "*" or true = all; false or [] = none;
 * otherwise a list of names ("*" in it = all). deny is a list of names ("*" in
 * it = all) and always wins over allow. A role without a policy for a
 * resource is unrestricted for it.
 *
 * A loaded policy is immutable: every function below may be called from any
 * number of threads at once without locking. authz_policy_load sets
 * *out on every path (NULL when it fails). */
#ifndef FAWN_AUTHZ_H
#define FAWN_AUTHZ_H

#include <jansson.h>
#include <stdbool.h>
#include "base/base.h"

typedef struct authz_policy authz_policy;

/* The resources a role policy can restrict, one per key under a role. */
enum authz_resource {
    AUTHZ_TOOLS,
    AUTHZ_MODELS,
    AUTHZ_SKILLS,
    AUTHZ_SANDBOX,
    AUTHZ_MCP_SERVERS,
    AUTHZ_ROUTES,
    AUTHZ_RESOURCE_COUNT
};

/* Route permissions as bits. The first six are a user's: every role holds
 * them unless its routes policy says otherwise. The administration
 * permissions (AUTHZ_ROUTES_ADMIN) are never implied: the role named
 * AUTHZ_ADMIN_ROLE holds them whatever the policy (its users administer
 * fawn), any other role only when its routes allow list names them. */
enum {
    AUTHZ_THREADS_READ = 1u << 0,
    AUTHZ_THREADS_WRITE = 1u << 1,
    AUTHZ_THREADS_DELETE = 1u << 2,
    AUTHZ_RUNS_CREATE = 1u << 3,
    AUTHZ_RUNS_READ = 1u << 4,
    AUTHZ_RUNS_CANCEL = 1u << 5,
    AUTHZ_ROUTES_ALL = 0x3f,
    AUTHZ_SANDBOXES_READ = 1u << 6, /* every user's sandboxes, as the manager holds them */
    AUTHZ_SKILLS_WRITE = 1u << 7,   /* enable or disable a skill for everyone */
    AUTHZ_MCP_ADMIN = 1u << 8,      /* MCP servers' configuration and discovery */
    AUTHZ_CHANNELS_ADMIN = 1u << 9, /* IM channels' credentials and state */
    AUTHZ_ROUTES_ADMIN = AUTHZ_SANDBOXES_READ | AUTHZ_SKILLS_WRITE | AUTHZ_MCP_ADMIN |
                         AUTHZ_CHANNELS_ADMIN,
};

/* The role whose users administer fawn (the first user's). */
#define AUTHZ_ADMIN_ROLE "admin"

/* Validates the `authorization:` section (as converted from YAML: mappings
 * are objects, sequences arrays, true/false booleans, null/~/empty null, every
 * other scalar a string) and compiles it into *out, which the caller frees
 * with authz_policy_free. section NULL means the section was absent: a
 * disabled policy with the default roles. The section is only read; the
 * policy keeps no reference to it.
 * Errors: FAWN_ECONFIG with a message that starts with the full key path
 * ("authorization.roles.guest.tools.allow: ..."), FAWN_ENOMEM. *out is left
 * untouched on failure. */
FAWN_MUST_CHECK int authz_policy_load(authz_policy **out, const json_t *section);

/* Frees a policy from authz_policy_load; NULL is a no-op. */
void authz_policy_free(authz_policy *p);

/* True when authorization.enabled is true. */
bool authz_enabled(const authz_policy *p);

/* Decides whether `role` may use item `name` of resource `res`.
 * Returns 0 when allowed and FAWN_EPERM with a "Permission denied: ..."
 * message when denied. A disabled policy allows everything. A NULL or empty
 * role means default_role. A role that is not configured cannot be decided:
 * it is denied when fail_closed (the message names the role) and allowed
 * otherwise, with one warning logged per call. FAWN_EINVAL when p or name
 * is NULL or res is not a resource (a programmer error, never an allow). */
FAWN_MUST_CHECK int authz_check(const authz_policy *p, const char *role, enum authz_resource res,
                                const char *name);

/* The route permission bits `role` holds, to evaluate once per request.
 * Of the user permissions: all when the policy is disabled or the role has
 * no routes policy. A NULL or empty role means default_role. A role that is
 * not configured holds none when fail_closed and all otherwise (with one
 * warning logged per call). Administration permissions as said above. 0
 * for a NULL policy. */
unsigned authz_route_permissions(const authz_policy *p, const char *role);

/* "threads:read", "threads:write", "threads:delete", "runs:create",
 * "runs:read", "runs:cancel", "sandboxes:read", "skills:write" or "mcp:admin" for exactly one of
 * the AUTHZ_* route bits; NULL for anything else (0, several bits, unknown bits). Static storage.
 */
const char *authz_permission_name(unsigned bit);

/* The sandbox gate, called before every sandbox acquisition and reuse: may
 * `role` execute in a sandbox (resource sandbox, item "execute")? Same rules
 * as authz_check. Returns 0, or FAWN_EPERM with the message exactly
 * "Sandbox execution is not permitted for your role" (also for a role that
 * is not configured under fail_closed). FAWN_EINVAL when p is NULL. */
FAWN_MUST_CHECK int authz_sandbox_execute(const authz_policy *p, const char *role);

#endif
