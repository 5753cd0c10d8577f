/* Servers as configured (mcp_internal.h): DeerFlow's mcpServers entries,
 * validated key by key (unknown keys are errors), $VAR values resolved
 * from the environment, and the redaction the API answers with. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp_internal.h"

#define MASKED "***"

static const char *const server_keys[] = {"enabled",
                                          "type",
                                          "transport",
                                          "command",
                                          "args",
                                          "env",
                                          "url",
                                          "headers",
                                          "description",
                                          "tool_name_prefix",
                                          "tools",
                                          "tool_call_timeout",
                                          "tool_call_timeout_s",
                                          "session_init_timeout",
                                          "session_init_timeout_s",
                                          "oauth",
                                          "routing",
                                          NULL};

static bool name_valid(const char *name, size_t max) {
    size_t n = strlen(name);
    if (n == 0 || n > max)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)name[i]) && name[i] != '_' && name[i] != '-')
            return false;
    return true;
}

/* A "$VAR" value from the environment (VAR unset: an error); any other
 * text as it is. */
static int value_resolve(const char **out, const char *text, const char *where) {
    *out = text;
    if (text[0] != '$')
        return 0;
    const char *v = getenv(text + 1);
    if (!v)
        return fawn_err(FAWN_ECONFIG, "%s: the environment variable %.64s is not set", where,
                        text + 1);
    *out = v;
    return 0;
}

/* A boolean: true/false, or their text (YAML scalars come as text). */
static int bool_read(bool *out, const json_t *v, const char *where) {
    const char *t = json_string_value(v);
    *out = false;
    if (json_is_boolean(v))
        *out = json_is_true(v);
    else if (t && (strcmp(t, "true") == 0 || strcmp(t, "false") == 0))
        *out = t[0] == 't';
    else
        return fawn_err(FAWN_ECONFIG, "%s: must be true or false", where);
    return 0;
}

/* Seconds in 1..MCP_TIMEOUT_MAX_S (a number or its text; fractions round up). */
static int seconds_read(uint32_t *out, const json_t *v, const char *where) {
    double d = -1;
    const char *t = json_string_value(v);
    char *end = NULL;
    if (json_is_number(v))
        d = json_number_value(v);
    else if (t && *t && ((d = strtod(t, &end)), *end != '\0'))
        d = -1;
    if (!(d > 0 && d <= MCP_TIMEOUT_MAX_S))
        return fawn_err(FAWN_ECONFIG, "%s: must be seconds, more than 0 and at most %d", where,
                        MCP_TIMEOUT_MAX_S);
    *out = (uint32_t)d + ((double)(uint32_t)d < d);
    return 0;
}

static int type_read(mcp_server *srv, const json_t *v, const char *where) {
    const char *t = json_string_value(v);
    if (!t)
        return fawn_err(FAWN_ECONFIG, "%s: must be stdio, sse or http", where);
    if (strcmp(t, "stdio") == 0)
        srv->type = MCP_STDIO;
    else if (strcmp(t, "sse") == 0)
        srv->type = MCP_SSE;
    else if (strcmp(t, "http") == 0 || strcmp(t, "streamable_http") == 0 ||
             strcmp(t, "streamable-http") == 0)
        srv->type = MCP_HTTP;
    else
        return fawn_err(FAWN_ECONFIG, "%s: must be stdio, sse or http", where);
    return 0;
}

/* headers: {Name: value}, each a header a request may carry. */
static int headers_read(mcp_server *srv, const json_t *v, const char *where) {
    if (!json_is_object(v) || json_object_size(v) > MCP_HEADERS_MAX)
        return fawn_err(FAWN_ECONFIG, "%s: must be a mapping of at most %d headers", where,
                        MCP_HEADERS_MAX);
    size_t i = 0;
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)v, key, value) {
        const char *text = json_string_value(value);
        int r = text ? value_resolve(&text, text, where)
                     : fawn_err(FAWN_ECONFIG, "%s.%.64s: must be text", where, key);
        if (r < 0)
            return r;
        if (!name_valid(key, 64) || strpbrk(text, "\r\n"))
            return fawn_err(FAWN_ECONFIG, "%s.%.64s: not a header name and value", where, key);
        if (asprintf(&srv->headers[i++], "%s: %s", key, text) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

static int url_read(mcp_server *srv, const json_t *v, const char *where) {
    const char *t = json_string_value(v);
    int r = t ? value_resolve(&t, t, where) : fawn_err(FAWN_ECONFIG, "%s: must be text", where);
    if (r < 0)
        return r;
    if (strncmp(t, "http://", 7) != 0 && strncmp(t, "https://", 8) != 0)
        return fawn_err(FAWN_ECONFIG, "%s: must be an http or https URL", where);
    if (strlen(t) > 2048 || strpbrk(t, " \r\n\t"))
        return fawn_err(FAWN_ECONFIG, "%s: not a URL fawn uses", where);
    srv->url = strdup(t);
    return srv->url ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* tool_name_prefix: true (the default, "<server>_"), false (none), or a
 * text of its own. */
static int prefix_read(mcp_server *srv, const json_t *v, const char *where) {
    bool on;
    const char *t = json_string_value(v);
    if (bool_read(&on, v, where) == 0) {
        if (!on)
            srv->prefix[0] = '\0';
        return 0;
    }
    if (!t || (*t && !name_valid(t, MCP_SERVER_NAME_MAX)))
        return fawn_err(FAWN_ECONFIG, "%s: must be true, false or [A-Za-z0-9_-]{0,%d}", where,
                        MCP_SERVER_NAME_MAX);
    snprintf(srv->prefix, sizeof srv->prefix, "%s", t);
    return 0;
}

/* tools: {tool: {description?, enabled?}}. */
static int overrides_read(mcp_server *srv, const json_t *v, const char *where) {
    if (!json_is_object(v))
        return fawn_err(FAWN_ECONFIG, "%s: must be a mapping of tool names", where);
    const char *key;
    json_t *o;
    json_object_foreach((json_t *)v, key, o) {
        bool enabled;
        const json_t *d = json_object_get(o, "description"), *e = json_object_get(o, "enabled");
        if (!json_is_object(o) || (d && !json_is_string(d)) ||
            (e && bool_read(&enabled, e, where) < 0) ||
            json_object_size(o) != (size_t)(d != NULL) + (e != NULL))
            return fawn_err(FAWN_ECONFIG, "%s.%.64s: must be {description?, enabled?}", where, key);
    }
    srv->overrides = json_deep_copy(v);
    return srv->overrides ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int key_known(const char *key) {
    for (size_t i = 0; server_keys[i]; i++)
        if (strcmp(server_keys[i], key) == 0)
            return 1;
    return 0;
}

/* ---- oauth ---- */

static const char *const oauth_keys[] = {"enabled",
                                         "token_url",
                                         "grant_type",
                                         "client_id",
                                         "client_secret",
                                         "refresh_token",
                                         "scope",
                                         "audience",
                                         "token_field",
                                         "token_type_field",
                                         "expires_in_field",
                                         "default_token_type",
                                         "refresh_skew_seconds",
                                         "extra_token_params",
                                         NULL};

void mcp_oauth_free(mcp_oauth *o) {
    if (!o)
        return;
    char **texts[] = {&o->token_url,
                      &o->client_id,
                      &o->client_secret,
                      &o->refresh_token,
                      &o->scope,
                      &o->audience,
                      &o->token_field,
                      &o->token_type_field,
                      &o->expires_in_field,
                      &o->default_token_type};
    for (size_t i = 0; i < ARRAY_LEN(texts); i++)
        free(*texts[i]);
    json_decref(o->extra);
    free(o);
}

/* A text of the oauth entry ($VAR resolved) into *dst, or dflt when
 * absent (NULL: stays NULL). */
static int oauth_text(char **dst, const json_t *entry, const char *key, const char *dflt,
                      const char *where) {
    const json_t *v = json_object_get(entry, key);
    const char *t = json_string_value(v);
    int r = 0;
    if (v && !json_is_null(v) && !t)
        return fawn_err(FAWN_ECONFIG, "%s.%s: must be text", where, key);
    if (t && (r = value_resolve(&t, t, where)) < 0)
        return r;
    if (t && (strlen(t) > 8192 || strpbrk(t, "\r\n")))
        return fawn_err(FAWN_ECONFIG, "%s.%s: not a value fawn sends", where, key);
    t = t && *t ? t : dflt;
    if (t && !(*dst = strdup(t)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return 0;
}

static int oauth_fields(mcp_oauth *o, const json_t *v, const char *where) {
    struct {
        char **dst;
        const char *key, *dflt;
    } texts[] = {{&o->token_url, "token_url", NULL},
                 {&o->client_id, "client_id", NULL},
                 {&o->client_secret, "client_secret", NULL},
                 {&o->refresh_token, "refresh_token", NULL},
                 {&o->scope, "scope", NULL},
                 {&o->audience, "audience", NULL},
                 {&o->token_field, "token_field", "access_token"},
                 {&o->token_type_field, "token_type_field", "token_type"},
                 {&o->expires_in_field, "expires_in_field", "expires_in"},
                 {&o->default_token_type, "default_token_type", "Bearer"}};
    int r = 0;
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(texts); i++)
        r = oauth_text(texts[i].dst, v, texts[i].key, texts[i].dflt, where);
    const char *grant = json_string_value(json_object_get(v, "grant_type"));
    if (r == 0 && grant && strcmp(grant, "refresh_token") == 0)
        o->grant = MCP_GRANT_REFRESH_TOKEN;
    else if (r == 0 && grant && strcmp(grant, "client_credentials") != 0)
        r = fawn_err(FAWN_ECONFIG, "%s.grant_type: must be client_credentials or refresh_token",
                     where);
    const json_t *skew = json_object_get(v, "refresh_skew_seconds");
    o->refresh_skew_s = 60;
    if (r == 0 && skew)
        r = seconds_read(&o->refresh_skew_s, skew, where);
    return r;
}

/* extra_token_params: {name: text}, each $VAR resolved. */
static int oauth_extra(mcp_oauth *o, const json_t *v, const char *where) {
    o->extra = json_object();
    if (!o->extra)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_object(v) || json_object_size(v) > 32)
        return fawn_err(FAWN_ECONFIG,
                        "%s.extra_token_params: must be a mapping of at most 32 "
                        "texts",
                        where);
    const char *key;
    json_t *value;
    json_object_foreach((json_t *)v, key, value) {
        const char *t = json_string_value(value);
        int r = t ? value_resolve(&t, t, where)
                  : fawn_err(FAWN_ECONFIG, "%s.extra_token_params.%.64s: must be text", where, key);
        if (r < 0)
            return r;
        if (json_object_set_new(o->extra, key, json_string(t)) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

static int oauth_check(const mcp_oauth *o, const char *where) {
    if (!o->token_url ||
        (strncmp(o->token_url, "http://", 7) != 0 && strncmp(o->token_url, "https://", 8) != 0))
        return fawn_err(FAWN_ECONFIG, "%s.token_url: must be an http or https URL", where);
    if (o->grant == MCP_GRANT_CLIENT_CREDENTIALS && (!o->client_id || !o->client_secret))
        return fawn_err(FAWN_ECONFIG, "%s: client_credentials needs client_id and client_secret",
                        where);
    if (o->grant == MCP_GRANT_REFRESH_TOKEN && !o->refresh_token)
        return fawn_err(FAWN_ECONFIG, "%s.refresh_token: is required for the refresh_token grant",
                        where);
    return 0;
}

int mcp_oauth_read(mcp_oauth **out, const json_t *v, const char *where) {
    *out = NULL;
    if (!json_is_object(v))
        return fawn_err(FAWN_ECONFIG, "%s: must be a mapping", where);
    const char *key;
    json_t *x;
    json_object_foreach((json_t *)v, key, x) {
        bool known = false;
        for (size_t i = 0; oauth_keys[i]; i++)
            known |= strcmp(oauth_keys[i], key) == 0;
        if (!known)
            return fawn_err(FAWN_ECONFIG, "%s.%.64s: unknown key", where, key);
    }
    bool enabled = true;
    const json_t *e = json_object_get(v, "enabled");
    if (e && bool_read(&enabled, e, where) < 0)
        return FAWN_ECONFIG;
    if (!enabled)
        return 0;
    mcp_oauth *o = calloc(1, sizeof *o);
    if (!o)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = oauth_fields(o, v, where);
    if (r == 0)
        r = oauth_extra(o, json_object_get(v, "extra_token_params"), where);
    if (r == 0)
        r = oauth_check(o, where);
    if (r < 0) {
        mcp_oauth_free(o);
        return r;
    }
    if (o->refresh_token)
        fawn_sha256_hex(o->refresh_sha256, o->refresh_token, strlen(o->refresh_token));
    *out = o;
    return 0;
}

/* One key of a server's entry. */
static int server_key(mcp_server *srv, const char *key, const json_t *v, const char *where) {
    if (strcmp(key, "enabled") == 0)
        return bool_read(&srv->enabled, v, where);
    if (strcmp(key, "type") == 0 || strcmp(key, "transport") == 0)
        return type_read(srv, v, where);
    if (strcmp(key, "url") == 0)
        return url_read(srv, v, where);
    if (strcmp(key, "headers") == 0)
        return headers_read(srv, v, where);
    if (strcmp(key, "tool_name_prefix") == 0)
        return prefix_read(srv, v, where);
    if (strcmp(key, "tools") == 0)
        return overrides_read(srv, v, where);
    if (strncmp(key, "tool_call_timeout", 17) == 0)
        return seconds_read(&srv->call_timeout_s, v, where);
    if (strncmp(key, "session_init_timeout", 20) == 0)
        return json_is_null(v) ? 0 : seconds_read(&srv->init_timeout_s, v, where);
    if (strcmp(key, "oauth") == 0)
        return json_is_null(v) ? 0 : mcp_oauth_read(&srv->oauth, v, where);
    /* command, args, env: read by the stdio transport (not built yet);
     * their shapes are checked. */
    if ((strcmp(key, "args") == 0 && !json_is_array(v)) ||
        (strcmp(key, "env") == 0 && !json_is_object(v) && !json_is_null(v)) ||
        ((strcmp(key, "command") == 0 || strcmp(key, "description") == 0) && !json_is_string(v) &&
         !json_is_null(v)))
        return fawn_err(FAWN_ECONFIG, "%s: has the wrong type", where);
    return 0;
}

static void list_free(char **list) {
    for (size_t i = 0; list && list[i]; i++)
        free(list[i]);
    free(list);
}

/* command and args of a stdio server. */
static int command_read(mcp_server *srv, const json_t *entry, const char *where) {
    const char *cmd = json_string_value(json_object_get(entry, "command"));
    const json_t *args = json_object_get(entry, "args");
    if (!cmd || !*cmd || strlen(cmd) > 4096)
        return fawn_err(FAWN_ECONFIG, "%s.command: is required for type stdio", where);
    if (args && (!json_is_array(args) || json_array_size(args) > 256))
        return fawn_err(FAWN_ECONFIG, "%s.args: must be a list of at most 256 texts", where);
    srv->command = strdup(cmd);
    srv->args = calloc(json_array_size(args) + 1, sizeof *srv->args);
    if (!srv->command || !srv->args)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(args); i++) {
        const char *a = json_string_value(json_array_get(args, i));
        if (!a || strlen(a) > 4096)
            return fawn_err(FAWN_ECONFIG, "%s.args[%zu]: must be text", where, i);
        if (!(srv->args[i] = strdup(a)))
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

static bool env_name_valid(const char *k) {
    if (!*k || strlen(k) > 128 || isdigit((unsigned char)*k))
        return false;
    for (const char *p = k; *p; p++)
        if (!isalnum((unsigned char)*p) && *p != '_')
            return false;
    return true;
}

/* env of a stdio server: the whole environment it gets, with PATH and
 * HOME when it names none. */
static int env_read(mcp_server *srv, const json_t *env, const char *where) {
    if (env && !json_is_null(env) && (!json_is_object(env) || json_object_size(env) > 128))
        return fawn_err(FAWN_ECONFIG, "%s.env: must be a mapping of at most 128 variables", where);
    size_t n = 0;
    srv->env = calloc(json_object_size(env) + 3, sizeof *srv->env);
    if (!srv->env)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)env, key, v) {
        const char *t = json_string_value(v);
        int r = t && env_name_valid(key)
                    ? value_resolve(&t, t, where)
                    : fawn_err(FAWN_ECONFIG, "%s.env.%.64s: a variable's name and text", where,
                               key);
        if (r < 0)
            return r;
        if (asprintf(&srv->env[n++], "%s=%s", key, t) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    if (!json_object_get(env, "PATH") &&
        !(srv->env[n++] = strdup("PATH=/usr/local/bin:/usr/bin:/bin")))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (!json_object_get(env, "HOME") && !(srv->env[n++] = strdup("HOME=/tmp")))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return 0;
}

static int server_read(mcp_server *srv, const char *name, const json_t *entry, const char *source) {
    char where[160];
    snprintf(where, sizeof where, "%s.%s", source, name);
    if (!name_valid(name, MCP_SERVER_NAME_MAX))
        return fawn_err(FAWN_ECONFIG, "%.120s: a server's name is [A-Za-z0-9_-]{1,%d}", where,
                        MCP_SERVER_NAME_MAX);
    if (!json_is_object(entry))
        return fawn_err(FAWN_ECONFIG, "%s: must be a mapping", where);
    *srv = (mcp_server){.enabled = true,
                        .type = MCP_STDIO,
                        .call_timeout_s = MCP_CALL_TIMEOUT_DEFAULT_S,
                        .init_timeout_s = MCP_INIT_TIMEOUT_DEFAULT_S};
    snprintf(srv->name, sizeof srv->name, "%s", name);
    snprintf(srv->prefix, sizeof srv->prefix, "%s_", name);
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)entry, key, v) {
        char at[240];
        snprintf(at, sizeof at, "%s.%.64s", where, key);
        if (!key_known(key))
            return fawn_err(FAWN_ECONFIG, "%s: unknown key", at);
        int r = server_key(srv, key, v, at);
        if (r < 0)
            return r;
    }
    if (srv->type != MCP_STDIO && !srv->url)
        return fawn_err(FAWN_ECONFIG, "%s.url: is required for type %s", where,
                        srv->type == MCP_SSE ? "sse" : "http");
    if (srv->type == MCP_STDIO) {
        int r = command_read(srv, entry, where);
        return r < 0 ? r : env_read(srv, json_object_get(entry, "env"), where);
    }
    return 0;
}

static void server_free(mcp_server *srv) {
    free(srv->command);
    list_free(srv->args);
    list_free(srv->env);
    mcp_oauth_free(srv->oauth);
    free(srv->url);
    for (size_t i = 0; srv->headers[i]; i++)
        free(srv->headers[i]);
    json_decref(srv->overrides);
}

void mcp_servers_unref(mcp_servers *s) {
    if (!s || atomic_fetch_sub(&s->refs, 1) != 1)
        return;
    for (size_t i = 0; i < s->n; i++)
        server_free(&s->list[i]);
    free(s->list);
    json_decref(s->raw);
    free(s);
}

int mcp_servers_build(mcp_servers **out, const json_t *raw, const char *source) {
    *out = NULL;
    if (raw && !json_is_object(raw))
        return fawn_err(FAWN_ECONFIG, "%s: must be a mapping of server names", source);
    if (json_object_size(raw) > MCP_SERVERS_MAX)
        return fawn_err(FAWN_ECONFIG, "%s: at most %d servers", source, MCP_SERVERS_MAX);
    mcp_servers *s = calloc(1, sizeof *s);
    if (!s || !(s->raw = raw ? json_deep_copy(raw) : json_object()) ||
        !(s->list = calloc(json_object_size(raw) + 1, sizeof *s->list))) {
        if (s)
            json_decref(s->raw);
        free(s);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    atomic_init(&s->refs, 1);
    const char *name;
    json_t *entry;
    int r = 0;
    json_object_foreach(s->raw, name, entry) {
        if ((r = server_read(&s->list[s->n], name, entry, source)) < 0) {
            server_free(&s->list[s->n]);
            break;
        }
        s->n++;
    }
    if (r < 0) {
        mcp_servers_unref(s);
        return r;
    }
    *out = s;
    return 0;
}

const mcp_server *mcp_servers_find(const mcp_servers *s, const char *name) {
    for (size_t i = 0; s && i < s->n; i++)
        if (strcmp(s->list[i].name, name) == 0)
            return &s->list[i];
    return NULL;
}

/* ---- redaction ---- */

static const char *const oauth_secrets[] = {"client_secret", "refresh_token", NULL};

static void mask_values(json_t *obj) {
    const char *key;
    json_t *v;
    json_object_foreach(obj, key, v) { json_object_set_new(obj, key, json_string(MASKED)); }
}

json_t *mcp_servers_redacted(const json_t *raw) {
    json_t *copy = json_deep_copy(raw);
    const char *name;
    json_t *srv;
    json_object_foreach(copy, name, srv) {
        mask_values(json_object_get(srv, "env"));
        mask_values(json_object_get(srv, "headers"));
        json_t *oauth = json_object_get(srv, "oauth");
        for (size_t i = 0; json_is_object(oauth) && oauth_secrets[i]; i++)
            if (json_object_get(oauth, oauth_secrets[i]))
                json_object_set_new(oauth, oauth_secrets[i], json_null());
    }
    return copy;
}

/* Each "***" of incoming[key] (a mapping) becomes old[key]'s value. */
static int unmask_map(json_t *incoming, const json_t *old, const char *where) {
    const char *key;
    json_t *v;
    json_object_foreach(incoming, key, v) {
        if (!json_is_string(v) || strcmp(json_string_value(v), MASKED) != 0)
            continue;
        json_t *was = json_object_get(old, key);
        if (!was)
            return fawn_err(FAWN_EINVAL,
                            "%s.%.64s: \"***\" keeps a value, and there is none; "
                            "give the value",
                            where, key);
        json_object_set(incoming, key, was);
    }
    return 0;
}

/* OAuth secrets: null (or absent) keeps the old one, "" clears it. */
static void unmask_oauth(json_t *incoming, const json_t *old) {
    for (size_t i = 0; json_is_object(incoming) && oauth_secrets[i]; i++) {
        json_t *v = json_object_get(incoming, oauth_secrets[i]);
        const json_t *was = json_object_get(old, oauth_secrets[i]);
        if ((!v || json_is_null(v)) && was)
            json_object_set(incoming, oauth_secrets[i], (json_t *)was);
        else if (json_is_string(v) && json_string_length(v) == 0)
            json_object_del(incoming, oauth_secrets[i]);
    }
}

/* A "$VAR" in v (any depth) that was not at the same place in old: the
 * environment of the gateway is the operator's, named in files only, never
 * chosen through the API (it could send a secret of the gateway's
 * environment to a server, or into a sandbox). */
static int var_check(const json_t *v, const json_t *old, const char *where) {
    const char *t = json_string_value(v);
    if (t)
        return t[0] != '$' || (json_is_string(old) && strcmp(json_string_value(old), t) == 0)
                   ? 0
                   : fawn_err(FAWN_EINVAL,
                              "%s: a $VARIABLE is named in the configuration file, "
                              "not through the API",
                              where);
    char at[320];
    if (json_is_object(v)) {
        const char *key;
        json_t *x;
        json_object_foreach((json_t *)v, key, x) {
            snprintf(at, sizeof at, "%.200s.%.64s", where, key);
            int r = var_check(x, json_object_get(old, key), at);
            if (r < 0)
                return r;
        }
    }
    for (size_t i = 0; json_is_array(v) && i < json_array_size(v); i++) {
        snprintf(at, sizeof at, "%.200s[%zu]", where, i);
        int r = var_check(json_array_get(v, i), json_array_get(old, i), at);
        if (r < 0)
            return r;
    }
    return 0;
}

int mcp_servers_unmask(json_t **out, const json_t *incoming, const json_t *raw) {
    *out = json_deep_copy(incoming);
    if (!*out)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    const char *name;
    json_t *srv;
    int r = 0;
    json_object_foreach(*out, name, srv) {
        const json_t *old = json_object_get(raw, name);
        char where[160];
        snprintf(where, sizeof where, "mcp_servers.%.64s", name);
        for (size_t i = 0; r == 0 && i < 2; i++) {
            const char *k = i ? "headers" : "env";
            char at[200];
            snprintf(at, sizeof at, "%s.%s", where, k);
            if (json_is_object(json_object_get(srv, k)))
                r = unmask_map(json_object_get(srv, k), json_object_get(old, k), at);
        }
        if (r == 0)
            unmask_oauth(json_object_get(srv, "oauth"), json_object_get(old, "oauth"));
        if (r == 0)
            r = var_check(srv, old, where);
        if (r < 0)
            break;
    }
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}
