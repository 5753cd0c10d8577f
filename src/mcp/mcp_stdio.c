/* stdio MCP servers in the thread's sandbox (mcp_internal.h).
 *
 * Why per thread: the thread's sandbox is already where the run's own
 * commands run, isolated from the gateway (its user, its environment, its
 * files) and from every other thread and user; a server started there sees
 * that thread's files and nothing else, costs no sandbox of its own, and
 * lives no longer than one exchange. Its environment is its configured env
 * alone (with PATH and HOME): the gateway's never reaches it. What it is
 * given is visible to that sandbox's user, as anything in it is: a secret
 * a user must not read belongs to an HTTP server, reached from the gateway.
 *
 * The box API runs a command with no input and answers once it exits, so
 * one exchange is one command: the messages are written to the server's
 * standard input, which is then closed (the specification's shutdown), and
 * what it wrote, one message a line, is read back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp_internal.h"

/* 64 KiB, the box's limit on a command (BOX_COMMAND_MAX): the command
 * carries the messages, a call's arguments included. */
#define MCP_STDIO_COMMAND_MAX ((size_t)64 << 10)
/* What the box keeps of the server's output: a longer answer is refused
 * (the box cuts it in the middle, which no JSON survives). */
#define MCP_STDIO_OUTPUT_MAX 1048576
/* How long past its own timeout the box's answer may take (it kills the
 * command's processes, then answers). */
#define MCP_STDIO_REPLY_MARGIN_S 30
/* Lines of output read at most: messages, and the server's notifications. */
#define MCP_STDIO_LINES_MAX 4096

/* Appends text to b in single quotes, as a shell reads it back. */
static int shell_quote(fbuf *b, const char *text) {
    int r = fbuf_append(b, " '", 2);
    for (const char *p = text; r == 0 && *p; p++)
        r = *p == '\'' ? fbuf_append(b, "'\\''", 4) : fbuf_append(b, p, 1);
    return r == 0 ? fbuf_append(b, "'", 1) : r;
}

/* printf '%s\n' MESSAGES... | env -i ENV... COMMAND ARGS... */
static int command_build(char **out, const mcp_server *srv, char *const *messages, size_t n) {
    *out = NULL;
    fbuf b = {.limit = MCP_STDIO_COMMAND_MAX};
    int r = fbuf_printf(&b, "printf '%%s\\n'");
    for (size_t i = 0; r == 0 && i < n; i++)
        r = shell_quote(&b, messages[i]);
    r = r ? r : fbuf_printf(&b, " | env -i");
    for (size_t i = 0; r == 0 && srv->env[i]; i++)
        r = shell_quote(&b, srv->env[i]);
    r = r ? r : shell_quote(&b, srv->command);
    for (size_t i = 0; r == 0 && srv->args[i]; i++)
        r = shell_quote(&b, srv->args[i]);
    if (r < 0) {
        fbuf_free(&b);
        return r == FAWN_E2BIG ? fawn_err(FAWN_E2BIG,
                                          "the messages for %s are larger than %zu "
                                          "bytes",
                                          srv->name, MCP_STDIO_COMMAND_MAX)
                               : r;
    }
    *out = fbuf_steal(&b);
    return 0;
}

/* The server's output, one message a line, into *out. */
static int lines_read(json_t **out, const char *text, const mcp_server *srv) {
    *out = json_array();
    int r = *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    size_t lines = 0;
    for (const char *p = text; r == 0 && *p;) {
        size_t n = strcspn(p, "\n");
        if (++lines > MCP_STDIO_LINES_MAX)
            r = fawn_err(FAWN_E2BIG, "%s wrote more than %d lines", srv->name, MCP_STDIO_LINES_MAX);
        mcp_msg m = {0};
        if (r == 0 && n > 0 && (r = mcp_msg_parse(&m, p, n)) == 0)
            r = json_array_append(*out, m.root) == 0 ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
        else if (r == FAWN_EPROTO)
            r = fawn_err(FAWN_EPROTO, "%s wrote what is not an MCP message: %s", srv->name,
                         fawn_errmsg());
        mcp_msg_clear(&m);
        p += n + (p[n] == '\n');
    }
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

/* The box's answer: the output when the command ran to its end. */
static int reply_take(json_t **out, const json_t *reply, int status, const mcp_server *srv,
                      uint32_t timeout_s) {
    const char *st = json_string_value(json_object_get(reply, "status"));
    const char *text = json_string_value(json_object_get(reply, "stdout"));
    if (status != 200 || !st || !text)
        return fawn_err(FAWN_EIO, "the sandbox could not run %s (HTTP %d)", srv->name, status);
    if (strcmp(st, "timeout") == 0)
        return fawn_err(FAWN_ETIMEDOUT, "%s did not answer within %u s", srv->name, timeout_s);
    if (json_is_true(json_object_get(reply, "truncated")))
        return fawn_err(FAWN_E2BIG, "%s wrote more than %d bytes", srv->name,
                        MCP_STDIO_OUTPUT_MAX / 2);
    const char *err = json_string_value(json_object_get(reply, "stderr"));
    if (!*text) /* what it said of why: the server's own words, bounded */
        return fawn_err(FAWN_EPROTO, "%s ended (exit code %d) without answering: %.300s", srv->name,
                        (int)json_integer_value(json_object_get(reply, "exit_code")),
                        err ? err : "");
    return lines_read(out, text, srv);
}

int mcp_stdio_run(json_t **out, tool_env *env, const mcp_server *srv, char *const *messages,
                  size_t n, uint32_t timeout_s) {
    *out = NULL;
    if (!env)
        return fawn_err(FAWN_EUNSUP,
                        "the MCP server %s runs over stdio in a thread's sandbox: "
                        "only a run (or a discovery through the API) has one",
                        srv->name);
    char *command = NULL;
    int r = command_build(&command, srv, messages, n);
    sbx_lease *lease = NULL;
    if (r == 0)
        r = tool_env_lease(&lease, env);
    json_t *body = r == 0
                       ? json_pack("{s:s, s:I, s:i}", "command", command, "timeout_s",
                                   (json_int_t)timeout_s, "max_output_bytes", MCP_STDIO_OUTPUT_MAX)
                       : NULL;
    /* A fresh shell, never the run's session: nothing the model defined
     * there (a function named env or printf) stands between the gateway
     * and the server. So a cancelled run's exchange is not killed with
     * the run's commands: it ends at its timeout at the latest. */
    json_t *reply = NULL;
    int status = 0;
    if (r == 0)
        r = body ? sbx_call(&reply, &status, lease, "POST", "/v1/shell/exec", body,
                            (int)(timeout_s + MCP_STDIO_REPLY_MARGIN_S) * 1000)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = reply_take(out, reply, status, srv, timeout_s);
    json_decref(reply);
    json_decref(body);
    free(command);
    return r;
}

int mcp_stdio_answer(mcp_msg *out, const json_t *msgs, int64_t id, const mcp_server *srv) {
    memset(out, 0, sizeof *out);
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        char *text = json_dumps(m, JSON_COMPACT);
        int r = text ? mcp_msg_parse(out, text, strlen(text)) : fawn_err(FAWN_ENOMEM, "oom");
        free(text);
        if (r < 0)
            return r;
        if (mcp_msg_answers(out, id))
            return 0;
        mcp_msg_clear(out);
    }
    return fawn_err(FAWN_EPROTO, "%s ended without answering", srv->name);
}

/* One exchange: initialize, initialized, then method (id 2) with params;
 * its answer into *out once initialize was answered. */
static int exchange(mcp_msg *out, tool_env *env, const mcp_server *srv, const char *method,
                    const json_t *params, uint32_t timeout_s) {
    memset(out, 0, sizeof *out);
    json_t *init = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_VERSION,
                             "capabilities", "clientInfo", "name", "fawn", "version", "1");
    char *messages[3] = {init ? mcp_request_text(1, "initialize", init) : NULL,
                         mcp_notification_text("notifications/initialized", NULL),
                         mcp_request_text(2, method, params)};
    json_decref(init);
    json_t *msgs = NULL;
    int r = messages[0] && messages[1] && messages[2]
                ? mcp_stdio_run(&msgs, env, srv, messages, 3, timeout_s)
                : fawn_err(FAWN_ENOMEM, "out of memory");
    mcp_msg first = {0};
    if (r == 0 && (r = mcp_stdio_answer(&first, msgs, 1, srv)) == 0 &&
        (first.kind != MCP_MSG_RESULT ||
         !json_is_string(json_object_get(first.result, "protocolVersion"))))
        r = fawn_err(FAWN_EPROTO, "%s did not accept initialize", srv->name);
    if (r == 0)
        r = mcp_stdio_answer(out, msgs, 2, srv);
    mcp_msg_clear(&first);
    json_decref(msgs);
    for (size_t i = 0; i < 3; i++)
        free(messages[i]);
    return r;
}

/* A page of tools/list from a stdio server: one exchange of its own. */
typedef struct stdio_pager {
    tool_env *env;
    const mcp_server *srv;
} stdio_pager;

static int stdio_page(mcp_msg *m, void *ctx, json_t *params) {
    stdio_pager *sp = ctx;
    return exchange(m, sp->env, sp->srv, "tools/list", params,
                    sp->srv->init_timeout_s + sp->srv->call_timeout_s);
}

int mcp_stdio_list(json_t **out, tool_env *env, const mcp_server *srv) {
    stdio_pager sp = {.env = env, .srv = srv};
    return mcp_tools_collect(out, srv->name, stdio_page, &sp);
}

int mcp_stdio_call(mcp_msg *out, tool_env *env, const mcp_server *srv, const char *tool,
                   const json_t *args) {
    json_t *params = json_pack("{s:s, s:O}", "name", tool, "arguments", args);
    int r = params ? exchange(out, env, srv, "tools/call", params,
                              srv->init_timeout_s + srv->call_timeout_s)
                   : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(params);
    return r;
}
