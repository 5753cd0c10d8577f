/* The MCP service (mcp.h): the configuration in force and where it comes
 * from, explicit discovery, drift, and the administrator's configuration
 * routes. Calls and the offered tools are in mcp_call.c. */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "mcp/mcp_service.h"
#include "base/fsx.h"

/* The file an administrator's saved configuration goes to, in $FAWN_HOME. */
#define MCP_SAVED_FILE "mcp_servers.json"
/* 1 MiB: a configuration of MCP_SERVERS_MAX servers with their headers. */
#define MCP_CONFIG_FILE_MAX ((size_t)1 << 20)

static const char *const section_keys[] = {"servers", "config_file", NULL};

mcp_servers *mcp_service_servers(mcp_service *s) {
    pthread_mutex_lock(&s->lock);
    mcp_servers *cur = s->cur;
    atomic_fetch_add(&cur->refs, 1);
    pthread_mutex_unlock(&s->lock);
    return cur;
}

/* A JSON file's mcpServers (DeerFlow's extensions_config.json shape) into
 * *out (new). FAWN_ENOENT when there is no file. */
static int file_servers(json_t **out, const char *path) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return errno == ENOENT ? FAWN_ENOENT : fawn_err(FAWN_ECONFIG, "%s: cannot be read", path);
    char *text = NULL;
    size_t len = 0;
    int r = fawn_read_all(&text, &len, fd, MCP_CONFIG_FILE_MAX);
    close(fd);
    json_t *doc = r == 0 ? json_loadb(text, len, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(text);
    const json_t *servers = json_object_get(doc, "mcpServers");
    if (!json_is_object(doc) || (servers && !json_is_object(servers))) {
        json_decref(doc);
        return fawn_err(FAWN_ECONFIG, "%s: must be a JSON object whose mcpServers is a mapping",
                        path);
    }
    *out = servers ? json_incref((json_t *)servers) : json_object();
    json_decref(doc);
    return 0;
}

/* Where the servers come from: the saved file, else mcp.config_file, else
 * mcp.servers. */
static int servers_load(mcp_servers **out, const json_t *section, const char *saved) {
    json_t *raw = NULL;
    const char *source = saved;
    int r = file_servers(&raw, saved);
    const char *config_file = json_string_value(json_object_get(section, "config_file"));
    if (r == FAWN_ENOENT && config_file) {
        source = config_file;
        if ((r = file_servers(&raw, config_file)) == FAWN_ENOENT)
            r = fawn_err(FAWN_ECONFIG, "mcp.config_file: %s does not exist", config_file);
    }
    if (r == FAWN_ENOENT) {
        source = "mcp.servers";
        raw = json_incref(json_object_get(section, "servers"));
        r = 0;
    }
    if (r == 0)
        r = mcp_servers_build(out, raw, source);
    json_decref(raw);
    return r;
}

int mcp_service_open(mcp_service **out, const json_t *section, store *st, const char *home) {
    *out = NULL;
    if (section && !json_is_object(section))
        return fawn_err(FAWN_ECONFIG, "mcp: must be a mapping");
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)section, key, v) {
        bool known = false;
        for (size_t i = 0; section_keys[i]; i++)
            known |= strcmp(key, section_keys[i]) == 0;
        if (!known)
            return fawn_err(FAWN_ECONFIG, "mcp.%.64s: unknown key", key);
    }
    if (json_object_get(section, "config_file") &&
        !json_is_string(json_object_get(section, "config_file")))
        return fawn_err(FAWN_ECONFIG, "mcp.config_file: must be a path");
    mcp_service *s = calloc(1, sizeof *s);
    if (!s || asprintf(&s->saved_path, "%s/%s", home ? home : ".", MCP_SAVED_FILE) < 0) {
        free(s);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    s->st = st;
    s->home = home;
    pthread_mutex_init(&s->lock, NULL);
    pthread_mutex_init(&s->oauth_lock, NULL);
    s->tokens = json_object();
    int r = s->tokens ? servers_load(&s->cur, section, s->saved_path)
                      : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        mcp_service_free(s);
        return r;
    }
    *out = s;
    return 0;
}

void mcp_service_free(mcp_service *s) {
    if (!s)
        return;
    mcp_servers_unref(s->cur);
    json_decref(s->tokens);
    pthread_mutex_destroy(&s->oauth_lock);
    pthread_mutex_destroy(&s->lock);
    free(s->saved_path);
    free(s);
}

/* ---- discovery ---- */

/* The offered name of tool of srv into out ("" when it does not make a
 * function name a model accepts: [A-Za-z0-9_-]{1,64}). */
void mcp_offered_name(char out[MCP_TOOL_NAME_MAX + 1], const mcp_server *srv, const char *tool) {
    out[0] = '\0';
    size_t prefix = strlen(srv->prefix), n = strlen(tool);
    if (prefix + n == 0 || prefix + n > MCP_TOOL_NAME_MAX)
        return;
    for (const char *p = tool; *p; p++)
        if (!(isalnum((unsigned char)*p) || *p == '_' || *p == '-'))
            return;
    memcpy(out, srv->prefix, prefix);
    memcpy(out + prefix, tool, n + 1);
}

/* One listed tool as discovery pins it ({name, description, input_schema,
 * hash}), or NULL with *why set when it cannot be pinned. */
static json_t *tool_pin(const json_t *t, const char **why) {
    const char *name = json_string_value(json_object_get(t, "name"));
    const json_t *desc = json_object_get(t, "description");
    const json_t *schema = json_object_get(t, "inputSchema");
    char hash[65];
    *why = NULL;
    if (!name || !*name || strlen(name) > STORE_MCP_NAME_MAX)
        *why = "no name, or a name longer than 128 bytes";
    else if (desc && !json_is_string(desc))
        *why = "a description that is not text";
    else if (desc && json_string_length(desc) > MCP_DESCRIPTION_MAX)
        *why = "a description longer than 8192 bytes";
    else if (!json_is_object(schema))
        *why = "an inputSchema that is not an object";
    if (*why)
        return NULL;
    if (mcp_tool_hash(hash, json_string_value(desc), schema) < 0)
        return NULL;
    return json_pack("{s:s, s:s, s:O, s:s}", "name", name, "description",
                     json_string_value(desc) ?: "", "input_schema", schema, "hash", hash);
}

int mcp_tools_collect(json_t **out, const char *server, mcp_list_page_fn page, void *ctx) {
    *out = json_array();
    int r = *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_t *cursor = NULL;
    for (int n = 0; r == 0 && n < MCP_LIST_PAGES_MAX; n++) {
        json_t *params = cursor ? json_pack("{s:O}", "cursor", cursor) : NULL;
        json_decref(cursor);
        cursor = NULL;
        mcp_msg m = {0};
        r = page(&m, ctx, params);
        json_decref(params);
        const json_t *tools = json_object_get(m.result, "tools");
        if (r == 0 && m.kind == MCP_MSG_ERROR)
            r = fawn_err(FAWN_EPROTO, "%s: tools/list failed: %.200s", server, m.error_msg);
        else if (r == 0 && (m.kind != MCP_MSG_RESULT || !json_is_array(tools)))
            r = fawn_err(FAWN_EPROTO, "%s answered tools/list without a tools list", server);
        else if (r == 0 && json_array_size(*out) + json_array_size(tools) > MCP_TOOLS_MAX)
            r = fawn_err(FAWN_E2BIG, "%s lists more than %d tools", server, MCP_TOOLS_MAX);
        if (r == 0)
            json_array_extend(*out, (json_t *)tools);
        const json_t *next = json_object_get(m.result, "nextCursor");
        cursor = r == 0 && json_is_string(next) ? json_incref((json_t *)next) : NULL;
        mcp_msg_clear(&m);
        if (!cursor)
            break;
    }
    json_decref(cursor);
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

/* A page of tools/list over an HTTP session. */
typedef struct http_pager {
    mcp_session *ses;
    int64_t deadline_ms;
} http_pager;

static int http_page(mcp_msg *m, void *ctx, json_t *params) {
    http_pager *hp = ctx;
    return mcp_session_request(m, hp->ses, "tools/list", params, hp->deadline_ms);
}

int mcp_list_tools(json_t **out, mcp_session *ses, int64_t deadline_ms) {
    http_pager hp = {.ses = ses, .deadline_ms = deadline_ms};
    return mcp_tools_collect(out, ses->srv->name, http_page, &hp);
}

/* What was listed, pinned: *pins for the store, *view for the answer. */
static int pins_build(json_t **pins, json_t *view, const mcp_server *srv, const json_t *listed) {
    *pins = json_array();
    json_t *shown = json_array(), *skipped = json_array();
    int r = *pins && shown && skipped ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    size_t i;
    json_t *t;
    json_array_foreach(listed, i, t) {
        const char *why = NULL;
        char offered[MCP_TOOL_NAME_MAX + 1] = "";
        json_t *pin = r == 0 ? tool_pin(t, &why) : NULL;
        if (pin)
            mcp_offered_name(offered, srv, json_string_value(json_object_get(pin, "name")));
        if (pin && !offered[0])
            why = "its name, with the prefix, is not [A-Za-z0-9_-]{1,64}";
        const char *name = json_string_value(json_object_get(t, "name"));
        if (!pin || !offered[0]) {
            json_array_append_new(skipped, json_pack("{s:s?, s:s}", "name", name, "reason",
                                                     why ? why : "out of memory"));
            json_decref(pin);
            continue;
        }
        json_array_append_new(shown,
                              json_pack("{s:s, s:s, s:O, s:O}", "name", name, "offered_as", offered,
                                        "description", json_object_get(pin, "description"), "hash",
                                        json_object_get(pin, "hash")));
        json_array_append_new(*pins, pin);
    }
    json_object_set_new(view, "tools", shown);
    json_object_set_new(view, "skipped", skipped);
    return r;
}

/* The names pinned before that the new pins no longer have. */
static json_t *removed_names(const json_t *before, const json_t *pins) {
    json_t *gone = json_array();
    size_t i, k;
    json_t *old, *pin;
    json_array_foreach(before, i, old) {
        const char *name = json_string_value(json_object_get(old, "name"));
        bool kept = false;
        json_array_foreach(pins, k, pin) {
            kept |= strcmp(name, json_string_value(json_object_get(pin, "name"))) == 0;
        }
        if (!kept)
            json_array_append_new(gone, json_string(name));
    }
    return gone;
}

/* tools/list of an HTTP server in one session; *unauthorized when it
 * answered 401. */
static int http_listed(json_t **listed, bool *unauthorized, mcp_service *s, const mcp_server *srv) {
    *listed = NULL;
    mcp_session ses = {0};
    char *auth = NULL;
    int r = mcp_oauth_header(&auth, s, srv, NULL);
    if (r == 0)
        r = mcp_session_open(&ses, srv, auth, NULL);
    if (r == 0)
        r = mcp_list_tools(listed, &ses, fawn_now_ms() + (int64_t)srv->call_timeout_s * 1000);
    *unauthorized = r == FAWN_EPERM && ses.refused == 401;
    mcp_session_close(&ses);
    free(auth);
    return r;
}

/* tools/list of srv, over its transport: an OAuth token refused with 401
 * is dropped and the list asked once more with a fresh one (as mcp_call
 * does). */
static int listed_of(json_t **listed, mcp_service *s, const mcp_server *srv, tool_env *env) {
    *listed = NULL;
    if (srv->type == MCP_STDIO)
        return mcp_stdio_list(listed, env, srv);
    bool unauthorized;
    int r = http_listed(listed, &unauthorized, s, srv);
    if (unauthorized && srv->oauth) {
        mcp_oauth_forget(s, srv->name);
        r = http_listed(listed, &unauthorized, s, srv);
    }
    return r;
}

static int discover_on(json_t **out, mcp_service *s, const mcp_server *srv, tool_env *env) {
    json_t *listed = NULL, *pins = NULL, *before = NULL;
    int r = listed_of(&listed, s, srv, env);
    if (r == FAWN_EPERM)
        mcp_oauth_forget(s, srv->name);
    *out = r == 0 ? json_pack("{s:s}", "server", srv->name) : NULL;
    if (r == 0 && !*out)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = pins_build(&pins, *out, srv, listed);
    if (r == 0)
        r = store_mcp_tools(s->st, srv->name, &before);
    if (r == 0)
        r = store_mcp_tools_replace(s->st, srv->name, pins);
    if (r == 0)
        json_object_set_new(*out, "removed", removed_names(before, pins));
    json_decref(listed);
    json_decref(pins);
    json_decref(before);
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

int mcp_discover(json_t **out, mcp_service *s, const char *name, tool_env *env) {
    *out = NULL;
    mcp_servers *servers = mcp_service_servers(s);
    const mcp_server *srv = mcp_servers_find(servers, name);
    int r = srv ? discover_on(out, s, srv, env)
                : fawn_err(FAWN_ENOENT, "no MCP server named %.64s is configured", name);
    mcp_servers_unref(servers);
    return r;
}

int mcp_drift(json_t **out, mcp_service *s, const char *name) {
    *out = NULL;
    mcp_servers *servers = mcp_service_servers(s);
    const mcp_server *srv = mcp_servers_find(servers, name);
    json_t *tools = NULL;
    int r = srv ? store_mcp_tools(s->st, name, &tools)
                : fawn_err(FAWN_ENOENT, "no MCP server named %.64s is configured", name);
    mcp_servers_unref(servers);
    json_t *list = r == 0 ? json_array() : NULL;
    size_t i;
    json_t *t;
    json_array_foreach(list ? tools : NULL, i, t) {
        json_array_append_new(list,
                              json_pack("{s:O, s:O, s:O, s:O}", "name", json_object_get(t, "name"),
                                        "hash", json_object_get(t, "hash"), "discovered_at_ms",
                                        json_object_get(t, "discovered_at_ms"), "drift",
                                        json_object_get(t, "drift")));
    }
    json_decref(tools);
    if (r == 0 && !(*out = json_pack("{s:s, s:o}", "server", name, "tools", list)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    return r;
}

/* ---- the administrator's configuration ---- */

int mcp_config_get(json_t **out, mcp_service *s) {
    mcp_servers *servers = mcp_service_servers(s);
    json_t *shown = mcp_servers_redacted(servers->raw);
    mcp_servers_unref(servers);
    *out = shown ? json_pack("{s:o}", "mcp_servers", shown) : NULL;
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Writes raw as $FAWN_HOME/mcp_servers.json ({"mcpServers": raw}, mode
 * 0600: it may hold secrets). */
static int saved_write(mcp_service *s, const json_t *raw) {
    json_t *doc = json_pack("{s:O}", "mcpServers", raw);
    char *text = doc ? json_dumps(doc, JSON_INDENT(2) | JSON_SORT_KEYS) : NULL;
    json_decref(doc);
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int dirfd = open(s->home ? s->home : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    fsx_staged st = {0};
    struct stat placed;
    int r = dirfd >= 0 ? fsx_staged_open(&st, dirfd, FSX_STAGING_WRITE, 0600)
                       : fawn_err(FAWN_EIO, "%s cannot be opened", s->home ? s->home : ".");
    if (r == 0)
        r = fsx_staged_write(&st, text, strlen(text));
    if (r == 0)
        r = fsx_staged_commit(&placed, &st, MCP_SAVED_FILE, FSX_COMMIT_REPLACE, MCP_SAVED_FILE);
    fsx_staged_abort(&st);
    if (dirfd >= 0)
        close(dirfd);
    free(text);
    return r;
}

/* Validates raw, saves it and puts it in force (under the lock: one
 * writer at a time). */
static int config_replace_locked(mcp_service *s, const json_t *raw) {
    mcp_servers *next = NULL;
    int r = mcp_servers_build(&next, raw, "mcp_servers");
    if (r == FAWN_ECONFIG)
        r = fawn_err(FAWN_EINVAL, "%s", fawn_errmsg());
    if (r == 0)
        r = saved_write(s, raw);
    if (r < 0) {
        mcp_servers_unref(next);
        return r;
    }
    mcp_servers_unref(s->cur);
    s->cur = next;
    mcp_oauth_forget(s, NULL);
    return 0;
}

int mcp_config_put(mcp_service *s, const json_t *body) {
    const json_t *incoming = json_object_get(body, "mcp_servers");
    if (!json_is_object(body) || !json_is_object(incoming) || json_object_size(body) != 1)
        return fawn_err(FAWN_EINVAL, "the body is {\"mcp_servers\": {name: server, ...}}");
    pthread_mutex_lock(&s->lock);
    json_t *raw = NULL;
    int r = mcp_servers_unmask(&raw, incoming, s->cur->raw);
    if (r == 0)
        r = config_replace_locked(s, raw);
    pthread_mutex_unlock(&s->lock);
    json_decref(raw);
    return r;
}

int mcp_config_patch(mcp_service *s, const json_t *body) {
    const char *name = json_string_value(json_object_get(body, "server_name"));
    const json_t *enabled = json_object_get(body, "enabled");
    if (!name || !json_is_boolean(enabled) || json_object_size(body) != 2)
        return fawn_err(FAWN_EINVAL, "the body is {\"server_name\": text, \"enabled\": bool}");
    pthread_mutex_lock(&s->lock);
    json_t *raw = json_deep_copy(s->cur->raw);
    json_t *srv = json_object_get(raw, name);
    int r = !raw   ? fawn_err(FAWN_ENOMEM, "out of memory")
            : !srv ? fawn_err(FAWN_ENOENT, "MCP server '%.64s' not found", name)
                   : json_object_set(srv, "enabled", (json_t *)enabled);
    if (r == 0)
        r = config_replace_locked(s, raw);
    pthread_mutex_unlock(&s->lock);
    json_decref(raw);
    return r;
}

void mcp_cache_reset(mcp_service *s) {
    /* Sessions last one call: the OAuth tokens are all that is kept. */
    mcp_oauth_forget(s, NULL);
}
