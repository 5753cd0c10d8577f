/* What runs see of MCP (mcp.h): the pinned tools offered to a role, and
 * one call: authorized, checked against the pin (drift), bounded, its
 * answer turned into a tool result. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp_service.h"

/* A pinned tool that a call names, with its server. */
typedef struct resolved {
    mcp_servers *servers; /* referenced */
    const mcp_server *srv;
    json_t *pin; /* the stored row (new) */
} resolved;

static void resolved_clear(resolved *rv) {
    mcp_servers_unref(rv->servers);
    json_decref(rv->pin);
    memset(rv, 0, sizeof *rv);
}

/* The override of tool of srv (an object), or NULL. */
static const json_t *override_of(const mcp_server *srv, const char *tool) {
    return json_object_get(srv->overrides, tool);
}

static bool tool_disabled(const mcp_server *srv, const char *tool) {
    const json_t *e = json_object_get(override_of(srv, tool), "enabled");
    const char *t = json_string_value(e);
    return json_is_false(e) || (t && strcmp(t, "false") == 0);
}

/* The pinned row named tool in pins, or NULL (borrowed). */
static json_t *pin_find(const json_t *pins, const char *tool) {
    size_t i;
    json_t *p;
    json_array_foreach(pins, i, p) {
        if (strcmp(json_string_value(json_object_get(p, "name")), tool) == 0)
            return p;
    }
    return NULL;
}

/* Finds the pinned tool offered as name: FAWN_ENOENT when none is. */
static int resolve(resolved *rv, mcp_service *s, const char *name) {
    memset(rv, 0, sizeof *rv);
    rv->servers = mcp_service_servers(s);
    for (size_t i = 0; i < rv->servers->n; i++) {
        const mcp_server *srv = &rv->servers->list[i];
        size_t n = strlen(srv->prefix);
        if (strncmp(name, srv->prefix, n) != 0 || !name[n])
            continue;
        json_t *pins = NULL;
        if (store_mcp_tools(s->st, srv->name, &pins) < 0)
            continue;
        json_t *pin = pin_find(pins, name + n);
        if (pin) {
            rv->srv = srv;
            rv->pin = json_incref(pin);
        }
        json_decref(pins);
        if (pin)
            return 0;
    }
    mcp_servers_unref(rv->servers);
    rv->servers = NULL;
    return FAWN_ENOENT;
}

bool mcp_owns(mcp_service *s, const char *name) {
    if (!s)
        return false;
    resolved rv;
    bool owned = resolve(&rv, s, name) == 0;
    resolved_clear(&rv);
    return owned;
}

int mcp_tool_server(char server[MCP_SERVER_NAME_MAX + 1], mcp_service *s, const char *name) {
    server[0] = '\0';
    resolved rv;
    if (!s || resolve(&rv, s, name) < 0)
        return FAWN_ENOENT;
    snprintf(server, MCP_SERVER_NAME_MAX + 1, "%s", rv.srv->name);
    resolved_clear(&rv);
    return 0;
}

/* ---- offered ---- */

/* The schema of one pinned tool, with its override's description. */
static json_t *tool_schema(const mcp_server *srv, const json_t *pin, const char *offered) {
    const char *tool = json_string_value(json_object_get(pin, "name"));
    const json_t *desc = json_object_get(override_of(srv, tool), "description");
    if (!json_is_string(desc))
        desc = json_object_get(pin, "description");
    return json_pack("{s:s, s:{s:s, s:O, s:O}}", "type", "function", "function", "name", offered,
                     "description", desc, "parameters", json_object_get(pin, "input_schema"));
}

static void server_offer(json_t *list, mcp_service *s, const mcp_server *srv,
                         const authz_policy *policy, const char *role) {
    json_t *pins = NULL;
    if (store_mcp_tools(s->st, srv->name, &pins) < 0) {
        log_warn("mcp", "%s: pinned tools not read: %s", srv->name, fawn_errmsg());
        return;
    }
    size_t i;
    json_t *pin;
    json_array_foreach(pins, i, pin) {
        const char *tool = json_string_value(json_object_get(pin, "name"));
        char offered[MCP_TOOL_NAME_MAX + 1];
        mcp_offered_name(offered, srv, tool);
        if (!offered[0] || !json_is_null(json_object_get(pin, "drift")) ||
            tool_disabled(srv, tool) || authz_check(policy, role, AUTHZ_TOOLS, offered) < 0)
            continue;
        json_array_append_new(list, tool_schema(srv, pin, offered));
    }
    json_decref(pins);
}

void mcp_tools_offered(json_t *list, mcp_service *s, const authz_policy *policy, const char *role) {
    if (!s)
        return;
    mcp_servers *servers = mcp_service_servers(s);
    for (size_t i = 0; i < servers->n; i++) {
        const mcp_server *srv = &servers->list[i];
        if (srv->enabled && authz_check(policy, role, AUTHZ_MCP_SERVERS, srv->name) == 0)
            server_offer(list, s, srv, policy, role);
    }
    mcp_servers_unref(servers);
}

/* ---- drift ---- */

/* The listed tool named tool, or NULL (borrowed). */
static const json_t *listed_find(const json_t *listed, const char *tool) {
    size_t i;
    json_t *t;
    json_array_foreach(listed, i, t) {
        const char *name = json_string_value(json_object_get(t, "name"));
        if (name && strcmp(name, tool) == 0)
            return t;
    }
    return NULL;
}

/* What the server lists now for a pinned tool, when it differs from the
 * pin: a new drift object; NULL when it is as pinned. */
static json_t *drift_of(const json_t *pin, const json_t *now) {
    if (!now)
        return json_pack("{s:I, s:b}", "seen_at_ms", (json_int_t)fawn_wall_ms(), "removed", 1);
    const json_t *desc = json_object_get(now, "description");
    const json_t *schema = json_object_get(now, "inputSchema");
    char hash[65] = "";
    if (json_is_string(desc) || !desc)
        if (mcp_tool_hash(hash, json_string_value(desc), json_is_object(schema) ? schema : NULL) <
            0)
            return NULL;
    if (json_is_object(schema) &&
        strcmp(hash, json_string_value(json_object_get(pin, "hash"))) == 0)
        return NULL;
    const char *was = json_string_value(json_object_get(pin, "description"));
    bool desc_changed = !json_is_string(desc) ? *was != '\0' : strcmp(json_string_value(desc), was);
    return json_pack("{s:I, s:s, s:b, s:b, s:s, s:O?, s:s?}", "seen_at_ms",
                     (json_int_t)fawn_wall_ms(), "hash", hash[0] ? hash : "unreadable",
                     "description_changed", desc_changed, "schema_changed",
                     !json_equal(schema, json_object_get(pin, "input_schema")), "old_description",
                     was, "description", json_is_string(desc) ? desc : NULL, "input_schema",
                     json_is_object(schema) ? NULL : "not an object");
}

/* Compares every pinned tool of srv with what the server lists now and
 * flags the ones that drifted (new drift only). Whether tool drifted. */
static bool drift_check(mcp_service *s, const mcp_server *srv, const json_t *listed,
                        const char *tool) {
    json_t *pins = NULL;
    bool drifted = false;
    if (store_mcp_tools(s->st, srv->name, &pins) < 0)
        return true; /* fail closed: the pin could not be read */
    size_t i;
    json_t *pin;
    json_array_foreach(pins, i, pin) {
        const char *name = json_string_value(json_object_get(pin, "name"));
        json_t *d = drift_of(pin, listed_find(listed, name));
        if (d && strcmp(name, tool) == 0)
            drifted = true;
        if (d && json_is_null(json_object_get(pin, "drift"))) {
            log_warn("mcp",
                     "%s: tool %s changed since it was discovered: withheld until an "
                     "administrator discovers again",
                     srv->name, name);
            if (store_mcp_drift_set(s->st, srv->name, name, d) < 0)
                log_warn("mcp", "%s: drift of %s not recorded: %s", srv->name, name, fawn_errmsg());
        }
        json_decref(d);
    }
    json_decref(pins);
    return drifted;
}

/* ---- the answer ---- */

/* Bytes a base64 text of n characters decodes to. */
static size_t base64_bytes(size_t n) { return n / 4 * 3; }

static int part_render(fbuf *b, const json_t *part) {
    const char *type = json_string_value(json_object_get(part, "type")) ?: "";
    const char *mime = json_string_value(json_object_get(part, "mimeType")) ?: "unknown type";
    if (strcmp(type, "text") == 0)
        return fbuf_printf(b, "%s", json_string_value(json_object_get(part, "text")) ?: "");
    if (strcmp(type, "image") == 0 || strcmp(type, "audio") == 0)
        return fbuf_printf(b, "[%s: %.100s, %zu bytes]", type, mime,
                           base64_bytes(json_string_length(json_object_get(part, "data"))));
    if (strcmp(type, "resource_link") == 0)
        return fbuf_printf(b, "[resource link: %.500s (%.100s)]",
                           json_string_value(json_object_get(part, "uri")) ?: "", mime);
    if (strcmp(type, "resource") == 0) {
        const json_t *res = json_object_get(part, "resource");
        const char *uri = json_string_value(json_object_get(res, "uri")) ?: "";
        const char *rmime = json_string_value(json_object_get(res, "mimeType")) ?: "unknown type";
        const json_t *text = json_object_get(res, "text");
        if (json_is_string(text))
            return fbuf_printf(b, "[resource: %.500s (%.100s), %zu bytes]\n%s", uri, rmime,
                               json_string_length(text), json_string_value(text));
        return fbuf_printf(b, "[resource: %.500s (%.100s), %zu bytes]", uri, rmime,
                           base64_bytes(json_string_length(json_object_get(res, "blob"))));
    }
    return fbuf_printf(b, "[content of type %.40s]", type);
}

/* The result's content as text: parts one per line, structuredContent
 * when there is no content. */
static int content_render(char **out, const json_t *result) {
    *out = NULL;
    fbuf b = {.limit = MCP_MESSAGE_MAX};
    const json_t *content = json_object_get(result, "content");
    int r = 0;
    size_t i;
    json_t *part;
    json_array_foreach(content, i, part) {
        if (r == 0 && i > 0)
            r = fbuf_printf(&b, "\n");
        if (r == 0)
            r = part_render(&b, part);
    }
    const json_t *structured = json_object_get(result, "structuredContent");
    if (r == 0 && json_array_size(content) == 0 && structured) {
        char *text = json_dumps(structured, JSON_COMPACT);
        r = text ? fbuf_printf(&b, "%s", text) : fawn_err(FAWN_ENOMEM, "out of memory");
        free(text);
    }
    if (r < 0) {
        fbuf_free(&b);
        return r;
    }
    *out = b.data ? fbuf_steal(&b) : strdup("");
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* A tools/call answer as the result: isError → tool_error. */
static int answer_take(tool_result *out, const mcp_msg *m) {
    if (m->kind == MCP_MSG_ERROR)
        return tool_fail(out, TOOL_ERROR, "tool_error", true,
                         "Error: the MCP server refused the "
                         "call (%" PRId64 "): %.2000s",
                         m->error_code, m->error_msg);
    const json_t *content = json_object_get(m->result, "content");
    if (content && !json_is_array(content))
        return tool_fail(out, TOOL_ERROR, "transport", true,
                         "Error: the MCP server's answer has no content list");
    char *text = NULL;
    if (content_render(&text, m->result) < 0)
        return tool_fail(out, TOOL_ERROR, "too_large", true,
                         "Error: the MCP server's answer could not be read: %s", fawn_errmsg());
    bool cut = false;
    char *kept = tool_truncate_middle(text, MCP_RESULT_TEXT_MAX, &cut);
    free(text);
    bool failed = json_is_true(json_object_get(m->result, "isError"));
    int r = failed ? tool_fail(out, TOOL_ERROR, "tool_error", true, "%s", kept ? kept : "")
                   : tool_succeed(out, kept ? strdup(kept) : NULL);
    free(kept);
    out->status.truncated = cut;
    return r;
}

/* A transport failure as the result. */
static int failure_take(tool_result *out, int code, const char *tool) {
    const char *msg = fawn_errmsg();
    switch (code) {
    case FAWN_ETIMEDOUT:
        return tool_fail(out, TOOL_TIMEOUT, "timeout", true, "Error: %s timed out: %s", tool, msg);
    case FAWN_ECANCELED:
        return tool_fail(out, TOOL_CANCELLED, "cancelled", false, "Error: cancelled");
    case FAWN_E2BIG: return tool_fail(out, TOOL_ERROR, "too_large", true, "Error: %s", msg);
    case FAWN_EUNSUP: return tool_fail(out, TOOL_ERROR, "unsupported", false, "Error: %s", msg);
    case FAWN_EPERM: return tool_fail(out, TOOL_ERROR, "auth", true, "Error: %s", msg);
    case FAWN_ENOMEM: return tool_fail(out, TOOL_ERROR, "internal", false, "Error: out of memory");
    default: return tool_fail(out, TOOL_ERROR, "transport", true, "Error: %s", msg);
    }
}

/* A stdio server's call: list, check the pin, call, each in the sandbox. */
static int call_stdio(tool_result *out, mcp_service *s, const resolved *rv, const json_t *args,
                      tool_env *env) {
    const char *tool = json_string_value(json_object_get(rv->pin, "name"));
    json_t *listed = NULL;
    int r = mcp_stdio_list(&listed, env, rv->srv);
    bool drifted = r == 0 && drift_check(s, rv->srv, listed, tool);
    json_decref(listed);
    if (drifted)
        return tool_fail(out, TOOL_DENIED, "drift", false,
                         "Error: the MCP tool %s changed on its server since it was discovered; "
                         "it is withheld until an administrator discovers it again",
                         tool);
    mcp_msg m = {0};
    if (r == 0)
        r = mcp_stdio_call(&m, env, rv->srv, tool, args);
    r = r == 0 ? answer_take(out, &m) : failure_take(out, r, tool);
    mcp_msg_clear(&m);
    return r;
}

/* One attempt over HTTP: a session with the token in force, the pin
 * checked, then the call; its answer into *m. *drifted when the tool is
 * withheld (not called); *unauthorized when the server answered 401. */
static int http_attempt(mcp_msg *m, bool *drifted, bool *unauthorized, mcp_service *s,
                        const resolved *rv, const json_t *args, const atomic_bool *cancel) {
    memset(m, 0, sizeof *m);
    *drifted = *unauthorized = false;
    const char *tool = json_string_value(json_object_get(rv->pin, "name"));
    mcp_session ses = {0};
    json_t *listed = NULL;
    char *auth = NULL;
    int r = mcp_oauth_header(&auth, s, rv->srv, cancel);
    if (r == 0)
        r = mcp_session_open(&ses, rv->srv, auth, cancel);
    int64_t deadline = fawn_now_ms() + (int64_t)rv->srv->call_timeout_s * 1000;
    if (r == 0)
        r = mcp_list_tools(&listed, &ses, deadline);
    if (r == 0)
        *drifted = drift_check(s, rv->srv, listed, tool);
    json_decref(listed);
    bool calling = r == 0 && !*drifted;
    json_t *params = calling ? json_pack("{s:s, s:O}", "name", tool, "arguments", args) : NULL;
    if (calling)
        r = params ? mcp_session_request(m, &ses, "tools/call", params, deadline)
                   : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(params);
    *unauthorized = r == FAWN_EPERM && ses.refused == 401;
    mcp_session_close(&ses);
    free(auth);
    return r;
}

/* An HTTP server's call. A 401 drops the cached OAuth token (it was
 * revoked, or the server restarted) and the call is tried once more with a
 * fresh one: the server refused the first before running anything. A
 * second refusal is the answer (auth), and its token is dropped too. */
static int call_http(tool_result *out, mcp_service *s, const resolved *rv, const json_t *args,
                     const atomic_bool *cancel) {
    const char *tool = json_string_value(json_object_get(rv->pin, "name"));
    mcp_msg m;
    bool drifted, unauthorized;
    int r = http_attempt(&m, &drifted, &unauthorized, s, rv, args, cancel);
    if (unauthorized && rv->srv->oauth) {
        log_info("mcp", "%s: the server refused its OAuth token; trying once with a fresh one",
                 rv->srv->name);
        mcp_oauth_forget(s, rv->srv->name);
        mcp_msg_clear(&m);
        r = http_attempt(&m, &drifted, &unauthorized, s, rv, args, cancel);
    }
    if (r == FAWN_EPERM) /* a token the server no longer takes: the next call fetches one */
        mcp_oauth_forget(s, rv->srv->name);
    if (drifted)
        r = tool_fail(out, TOOL_DENIED, "drift", false,
                      "Error: the MCP tool %s changed on its server since it was discovered; "
                      "it is withheld until an administrator discovers it again",
                      tool);
    else
        r = r == 0 ? answer_take(out, &m) : failure_take(out, r, tool);
    mcp_msg_clear(&m);
    return r;
}

static int call_run(tool_result *out, mcp_service *s, const resolved *rv, const json_t *args,
                    tool_env *env, const atomic_bool *cancel) {
    return rv->srv->type == MCP_STDIO ? call_stdio(out, s, rv, args, env)
                                      : call_http(out, s, rv, args, cancel);
}

/* Whether role may call the resolved tool now: 0, or a denied result. */
static int call_permitted(tool_result *out, const resolved *rv, const authz_policy *policy,
                          const char *role) {
    const char *tool = json_string_value(json_object_get(rv->pin, "name"));
    if (!rv->srv->enabled)
        return tool_fail(out, TOOL_DENIED, "denied", false, "Error: the MCP server %s is disabled",
                         rv->srv->name);
    if (authz_check(policy, role, AUTHZ_MCP_SERVERS, rv->srv->name) < 0)
        return tool_fail(out, TOOL_DENIED, "denied", false, "Error: %s", fawn_errmsg());
    if (tool_disabled(rv->srv, tool))
        return tool_fail(out, TOOL_DENIED, "denied", false, "Error: the MCP tool %s is disabled",
                         tool);
    if (!json_is_null(json_object_get(rv->pin, "drift")))
        return tool_fail(out, TOOL_DENIED, "drift", false,
                         "Error: the MCP tool %s changed on its server since it was discovered; "
                         "it is withheld until an administrator discovers it again",
                         tool);
    return 1;
}

int mcp_call(tool_result *out, mcp_service *s, const authz_policy *policy, const char *role,
             const char *name, const json_t *args, tool_env *env, const atomic_bool *cancel) {
    memset(out, 0, sizeof *out);
    resolved rv;
    if (!s || resolve(&rv, s, name) < 0)
        return tool_fail(out, TOOL_DENIED, "denied", false,
                         "Error: %.64s is not a tool of a discovered MCP server", name);
    int r = call_permitted(out, &rv, policy, role);
    if (r == 1)
        r = json_is_object(args) ? call_run(out, s, &rv, args, env, cancel)
                                 : tool_fail(out, TOOL_ERROR, "invalid_arguments", true,
                                             "Error: the arguments must be an object");
    if (r == 0 && !out->facts)
        out->facts = json_pack("{s:{s:s, s:O, s:O}}", "evidence", "server", rv.srv->name, "tool",
                               json_object_get(rv.pin, "name"), "schema_hash",
                               json_object_get(rv.pin, "hash"));
    resolved_clear(&rv);
    return r;
}
