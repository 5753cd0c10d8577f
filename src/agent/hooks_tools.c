/* The hooks around tool calls, one section each; their place in the chain
 * is set by the table in hooks.c (agent_hooks). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent_internal.h"
#include "base/json.h"
#include "paths/paths.h"

/* ---- tool output budget: large outputs go to a file, the model gets a synopsis ---- */

/* Outputs longer than this are saved; the synopsis keeps head and tail. */
#define BUDGET_MAX_CHARS 12000
#define BUDGET_HEAD 2000
#define BUDGET_TAIL 1000
#define BUDGET_DIR "/mnt/user-data/outputs/.tool-results"

static void budget_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    agent_next_tool(run, call, next);
    const char *text = call->result.text;
    size_t n = text ? strlen(text) : 0;
    if (n <= BUDGET_MAX_CHARS || strcmp(call->name, "read_file") == 0)
        return;
    char path[256], safe[80];
    size_t k = 0;
    for (const char *p = call->id; *p && k < sizeof safe - 1; p++)
        safe[k++] = fawn_id_valid((char[]){*p, 0}) ? *p : '_';
    safe[k] = '\0';
    snprintf(path, sizeof path, "%s/%s.txt", BUDGET_DIR, k ? safe : "output");
    if (agent_box_write(run, path, text) < 0) {
        /* No sandbox to keep it in (a role without one, say): the model
         * still gets no more than the budget. */
        log_warn("agent", "run %s: tool output not saved: %s", run->p->run_id, fawn_errmsg());
        bool cut;
        char *kept = tool_truncate_middle(text, BUDGET_MAX_CHARS, &cut);
        if (kept) {
            free(call->result.text);
            call->result.text = kept;
            call->result.status.truncated = true;
        }
        return;
    }
    size_t head = fawn_utf8_char_start(text, BUDGET_HEAD),
           tail = fawn_utf8_char_start(text, n - BUDGET_TAIL);
    char *synopsis;
    if (asprintf(&synopsis,
                 "%.*s\n\n... [%zu characters omitted. The whole output (%zu characters) is saved "
                 "in %s; read parts of it with read_file.] ...\n\n%s",
                 (int)head, text, tail - head, n, path, text + tail) < 0)
        return;
    free(call->result.text);
    call->result.text = synopsis;
    call->result.status.truncated = true;
}

const agent_hook hook_tool_output_budget = {.name = "tool_output_budget", .wrap_tool = budget_wrap};

/* ---- remote content: what a web tool brings is neutralized ----
 * A page or a search result is written by whoever runs the site: its text
 * reaches the model neutralized (agent_text_neutralize), errors included,
 * since they can quote the site too. */

static void remote_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    agent_next_tool(run, call, next);
    const tool_def *t = tool_find(call->name);
    const char *text = call->result.text;
    bool remote = t ? t->remote_content : mcp_owns(run->p->mcp, call->name);
    if (!remote || !text)
        return;
    fbuf b = {0};
    char *safe = agent_text_neutralize(&b, text, strlen(text)) == 0
                     ? (b.data ? fbuf_steal(&b) : strdup(""))
                     : NULL;
    fbuf_free(&b);
    if (!safe) {
        call->code = tool_fail(&call->result, TOOL_ERROR, "internal", false,
                               "Error: the result could not be made safe to read");
        return;
    }
    free(call->result.text);
    call->result.text = safe;
}

const agent_hook hook_remote_content = {.name = "remote_content", .wrap_tool = remote_wrap};

/* ---- tool authorization: RBAC `tools`, and sandbox:execute for each call ----
 * Read at each call, not once per run: a role changed while the run goes
 * applies to its next call, the lead's or a sub-agent's. */

/* May the owner, with the role they have now, make this call? 0, or
 * FAWN_EPERM (a gone owner included) with the reason; store errors. */
static int call_permitted(agent_loop *run, const char *tool) {
    if (run->p->no_clarification && strcmp(tool, AGENT_CLARIFICATION_TOOL) == 0)
        return fawn_err(FAWN_EPERM, "%s is not available: no one can answer in this run",
                        AGENT_CLARIFICATION_TOOL);
    store_user owner;
    int r = store_user_get(run->p->st, &owner, run->p->owner_id);
    if (r == FAWN_ENOENT)
        return fawn_err(FAWN_EPERM, "Permission denied: the run's user no longer exists");
    if (r == 0)
        r = authz_check(run->p->policy, owner.role, AUTHZ_TOOLS, tool);
    const tool_def *t = tool_find(tool);
    if (r == 0 && t && t->sandbox)
        r = authz_sandbox_execute(run->p->policy, owner.role);
    char server[MCP_SERVER_NAME_MAX + 1];
    if (r == 0 && !t && mcp_tool_server(server, run->p->mcp, tool) == 0)
        r = authz_check(run->p->policy, owner.role, AUTHZ_MCP_SERVERS, server);
    return r;
}

static void authz_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    if (call_permitted(run, call->name) < 0) {
        call->code = tool_fail(&call->result, TOOL_DENIED, "denied", false, "Error: %s",
                               fawn_errmsg());
        return;
    }
    agent_next_tool(run, call, next);
}

const agent_hook hook_tool_authorization = {.name = "tool_authorization", .wrap_tool = authz_wrap};

/* ---- read before write: an existing file is changed only as it was read ---- */

/* The normalized form of a virtual path (the key reads are kept under). */
static bool normalized(char out[VPATH_MAX + 32], const char *path) {
    vpath vp;
    if (!path || vpath_parse(&vp, path) < 0)
        return false;
    snprintf(out, VPATH_MAX + 32, "%s/%s",
             vp.root == VPATH_ROOT_SKILLS ? VPATH_SKILLS : VPATH_USER_DATA, vp.rel);
    return true;
}

/* The sha256 of the file at path as it is now: 0, FAWN_ENOENT when it does
 * not exist, another code when it cannot be read whole. */
static int current_sha(char sha[65], agent_loop *run, const char *path) {
    json_t *body = json_pack("{s:s}", "path", path);
    json_t *reply = NULL;
    int status = 0;
    int r = body ? tool_box_call(&reply, &status, &run->env, "POST", "/v1/file/read", body,
                                 AGENT_BOX_CALL_TIMEOUT_MS)
                 : FAWN_ENOMEM;
    json_decref(body);
    const json_t *content = json_object_get(reply, "content");
    if (r == 0 && status == 404)
        r = FAWN_ENOENT;
    else if (r == 0 && (status != 200 || !json_is_string(content) ||
                        json_is_true(json_object_get(reply, "truncated")) ||
                        json_is_true(json_object_get(reply, "binary"))))
        r = FAWN_EIO;
    if (r == 0)
        fawn_sha256_hex(sha, json_string_value(content), json_string_length(content));
    json_decref(reply);
    return r;
}

static void rbw_record(agent_loop *run, const json_t *facts) {
    char key[VPATH_MAX + 32];
    const char *read = json_string_value(json_object_get(facts, "read"));
    const char *written = json_string_value(json_object_get(facts, "written"));
    const json_t *sha = json_object_get(facts, "sha256");
    if (normalized(key, read ? read : written)) {
        if (sha)
            json_object_set(run->reads, key, (json_t *)sha);
        else
            json_object_del(run->reads, key);
    }
}

static void rbw_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    bool writes = strcmp(call->name, "write_file") == 0 || strcmp(call->name, "str_replace") == 0;
    char key[VPATH_MAX + 32], sha[65];
    const char *path = json_string_value(json_object_get(call->args, "path"));
    if (writes && normalized(key, path)) {
        int r = current_sha(sha, run, key);
        const char *seen = json_string_value(json_object_get(run->reads, key));
        if (r != FAWN_ENOENT && (r < 0 || !seen || strcmp(seen, sha) != 0)) {
            call->code = tool_fail(&call->result, TOOL_ERROR, "blocked", true,
                                   "Error: %s exists and %s; read it with read_file before "
                                   "changing it",
                                   key,
                                   seen ? "has changed since you read it" : "you have not read it");
            return;
        }
    }
    agent_next_tool(run, call, next);
    if (call->result.status.outcome == TOOL_SUCCESS && call->result.facts)
        rbw_record(run, call->result.facts);
}

const agent_hook hook_read_before_write = {.name = "read_before_write", .wrap_tool = rbw_wrap};

/* ---- delivery check: what is written to outputs must be presented ---- */

#define OUTPUTS_LISTING                                                                            \
    "cd /mnt/user-data/outputs 2>/dev/null || exit 0; find . -path ./.tool-results -prune -o "     \
    "-type f -printf '%P\\t%s %T@\\n'"

/* {path: "size mtime"} of the files under outputs, or NULL. */
static json_t *outputs_listing(agent_loop *run) {
    char *text = NULL;
    if (agent_box_exec(&text, run, OUTPUTS_LISTING) < 0) {
        log_warn("agent", "run %s: outputs not listed: %s", run->p->run_id, fawn_errmsg());
        return NULL;
    }
    json_t *files = json_object();
    for (char *line = strtok(text, "\n"); files && line; line = strtok(NULL, "\n")) {
        char *tab = strchr(line, '\t');
        if (tab) {
            *tab = '\0';
            json_object_set_new(files, line, json_string(tab + 1));
        }
    }
    free(text);
    return files;
}

/* Records what outputs holds before the run writes to it. */
static void delivery_sandbox_acquired(agent_loop *run) {
    if (!run->outputs_before)
        run->outputs_before = outputs_listing(run);
}

static void delivery_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    agent_next_tool(run, call, next);
    const json_t *paths = json_object_get(call->result.facts, "presented");
    json_t *artifacts = json_object_get(run->values, "artifacts");
    size_t i;
    json_t *p;
    json_array_foreach(paths, i, p) {
        json_array_append(run->presented, p);
        bool known = false;
        size_t k;
        json_t *a;
        json_array_foreach(artifacts, k, a) { known |= json_equal(a, p); }
        if (!known)
            json_array_append(artifacts, p);
    }
}

static bool was_presented(const agent_loop *run, const char *path) {
    size_t i;
    json_t *p;
    json_array_foreach(run->presented, i, p) {
        if (strcmp(json_string_value(p), path) == 0)
            return true;
    }
    return false;
}

static void delivery_after_agent(agent_loop *run) {
    if (!run->outputs_before || run->error || agent_cancelled(run))
        return;
    json_t *after = outputs_listing(run);
    fbuf missing = {0};
    int r = 0;
    const char *name;
    json_t *v;
    json_object_foreach(after, name, v) {
        char path[VPATH_MAX + 64];
        snprintf(path, sizeof path, "/mnt/user-data/outputs/%s", name);
        if (r == 0 && !json_equal(v, json_object_get(run->outputs_before, name)) &&
            !was_presented(run, path))
            r = fbuf_printf(&missing, "%s%s", missing.len ? ", " : "", path);
    }
    if (missing.len || r < 0) /* a list that could not be made still names a miss */
        agent_stop(run, "",
                   "Artifact delivery incomplete: %s written to outputs but never "
                   "presented",
                   r < 0 ? "files" : missing.data);
    fbuf_free(&missing);
    json_decref(after);
}

const agent_hook hook_delivery_check = {.name = "delivery_check",
                                        .sandbox_acquired = delivery_sandbox_acquired,
                                        .wrap_tool = delivery_wrap,
                                        .after_agent = delivery_after_agent};

/* ---- loop detection: the same call again and again ---- */

/* Calls remembered, and how often one may repeat among them. */
#define LOOP_WINDOW 20
#define LOOP_WARN 3
#define LOOP_STOP 5

static void call_hash(char out[65], const json_t *call) {
    json_t *key = json_pack("{s:O?, s:O?}", "name", json_object_get(call, "name"), "args",
                            json_object_get(call, "args"));
    char *text = key ? json_dumps(key, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    fawn_sha256_hex(out, text ? text : "", text ? strlen(text) : 0);
    free(text);
    json_decref(key);
}

static size_t times_seen(const agent_loop *run, const char *hash) {
    size_t n = 0, i;
    json_t *h;
    json_array_foreach(run->recent_calls, i, h) { n += strcmp(json_string_value(h), hash) == 0; }
    return n;
}

static void loop_after_model(agent_loop *run, json_t *ai) {
    json_t *calls = json_object_get(ai, "tool_calls");
    size_t i;
    json_t *c;
    bool capped = false;
    json_array_foreach(calls, i, c) {
        char hash[65];
        call_hash(hash, c);
        json_array_append_new(run->recent_calls, json_string(hash));
        while (json_array_size(run->recent_calls) > LOOP_WINDOW)
            json_array_remove(run->recent_calls, 0);
        capped |= times_seen(run, hash) >= LOOP_STOP;
    }
    if (!capped)
        return;
    json_array_clear(calls);
    agent_stop(run, "loop_capped", NULL);
}

static void loop_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    agent_next_tool(run, call, next);
    json_t *c = json_pack("{s:s, s:O}", "name", call->name, "args", call->args);
    char hash[65];
    call_hash(hash, c);
    json_decref(c);
    size_t n = times_seen(run, hash);
    char *text;
    if (n < LOOP_WARN || !call->result.text ||
        asprintf(&text,
                 "%s\n\n[Warning: you have made this exact call %zu times. Change your "
                 "approach; at %d the run stops.]",
                 call->result.text, n, LOOP_STOP) < 0)
        return;
    free(call->result.text);
    call->result.text = text;
}

const agent_hook hook_loop_detection = {
    .name = "loop_detection", .after_model = loop_after_model, .wrap_tool = loop_wrap};

/* ---- clarification: the run stops for the user's answer ---- */

static void clarification_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    agent_next_tool(run, call, next);
    if (strcmp(call->name, "ask_clarification") == 0 && call->result.status.outcome == TOOL_SUCCESS)
        agent_stop(run, "clarification", NULL);
}

const agent_hook hook_clarification = {.name = "clarification", .wrap_tool = clarification_wrap};

/* ---- tool errors: a tool that failed outright still answers ---- */

#define TOOL_ERROR_DETAIL_MAX 500

static void tool_errors_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    agent_next_tool(run, call, next);
    if (call->code == 0 && call->result.text)
        return;
    int code = call->code ? call->code : FAWN_ENOMEM;
    call->code = tool_fail(&call->result, TOOL_ERROR, "internal", false,
                           "Error: Tool '%s' failed with %s: %.*s", call->name, fawn_strerror(code),
                           TOOL_ERROR_DETAIL_MAX, fawn_errmsg());
}

const agent_hook hook_tool_errors = {.name = "tool_errors", .wrap_tool = tool_errors_wrap};

/* ---- MCP: a call of a pinned MCP tool is answered by its server ----
 * mcp_call holds the rest: the role's mcp_servers, the pin (drift), the
 * call's timeout and the run's cancel. */

static void mcp_wrap(agent_loop *run, agent_tool_call *call, size_t next) {
    const agent_params *p = run->p;
    if (!p->mcp || tool_find(call->name) || !mcp_owns(p->mcp, call->name)) {
        agent_next_tool(run, call, next);
        return;
    }
    tool_result_clear(&call->result);
    int64_t start = fawn_now_ms();
    call->code = mcp_call(&call->result, p->mcp, p->policy, p->role, call->name, call->args,
                          &run->env, p->cancel ? &p->cancel->cancelled : NULL);
    call->result.status.duration_ms = fawn_now_ms() - start;
}

const agent_hook hook_mcp = {.name = "mcp", .wrap_tool = mcp_wrap};
