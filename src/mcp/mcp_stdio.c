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
 * what it wrote, one message a line, is read back.
 *
 * A run's exchange runs in a shell session of its own (a scope
 * "<run id>:mcp-<n>", fresh for each exchange: nothing the model defined in
 * the run's session stands between the gateway and the server), watched
 * while it runs: once the run is cancelled the session's processes are
 * killed (sbx_kill_scope) and the call answers cancelled at once. A
 * discovery (no run, no cancel) runs as a one-shot command. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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
/* How often a running exchange looks at its run's cancel flag: a cancel
 * stops the server within this. */
#define MCP_STDIO_CANCEL_POLL_MS 100
/* Once cancelled, the session is killed again this often until the
 * exchange has ended (a kill that came before the command started finds
 * nothing to kill). */
#define MCP_STDIO_KILL_AGAIN_MS 1000
/* How long the box may take to confirm one kill. */
#define MCP_STDIO_KILL_TIMEOUT_MS 10000

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

/* ---- an exchange's own session, killed when the run is cancelled ---- */

typedef struct cancel_watch {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t wake;
    bool done;
    const atomic_bool *cancel;
    sbx_manager *m;
    const char *user, *thread_id, *server;
    char scope[SBX_SCOPE_MAX + 1];
} cancel_watch;

/* Sets *ts to now + ms on the watch's (monotonic) clock. */
static void deadline_in(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    ts->tv_sec += ms / 1000 + ts->tv_nsec / 1000000000L;
    ts->tv_nsec %= 1000000000L;
}

static void *watch_main(void *arg) {
    cancel_watch *w = arg;
    pthread_mutex_lock(&w->lock);
    while (!w->done) {
        int next_ms = MCP_STDIO_CANCEL_POLL_MS;
        if (atomic_load(w->cancel)) {
            pthread_mutex_unlock(&w->lock);
            int r = sbx_kill_scope(w->m, w->user, w->thread_id, w->scope,
                                   MCP_STDIO_KILL_TIMEOUT_MS);
            if (r < 0 && r != FAWN_ENOENT)
                log_warn("mcp", "%s: the cancelled exchange could not be killed: %s", w->server,
                         fawn_errmsg());
            pthread_mutex_lock(&w->lock);
            next_ms = MCP_STDIO_KILL_AGAIN_MS;
        }
        struct timespec until;
        deadline_in(&until, next_ms);
        if (!w->done)
            pthread_cond_timedwait(&w->wake, &w->lock, &until);
    }
    pthread_mutex_unlock(&w->lock);
    return NULL;
}

static int watch_start(cancel_watch *w) {
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->wake, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&w->lock, NULL);
    int e = pthread_create(&w->thread, NULL, watch_main, w);
    if (e) {
        pthread_cond_destroy(&w->wake);
        pthread_mutex_destroy(&w->lock);
        return fawn_err(FAWN_ENOMEM, "no thread to watch the exchange's cancel: %s", strerror(e));
    }
    return 0;
}

static void watch_stop(cancel_watch *w) {
    pthread_mutex_lock(&w->lock);
    w->done = true;
    pthread_cond_signal(&w->wake);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    pthread_cond_destroy(&w->wake);
    pthread_mutex_destroy(&w->lock);
}

/* The scope of an exchange of the run whose scope is run_scope
 * ("<run id>:<agent>"): "<run id>:mcp-<n>", n new for each. */
static int scope_make(char out[SBX_SCOPE_MAX + 1], const char *run_scope) {
    static atomic_uint_fast64_t exchanges;
    const char *colon = strchr(run_scope, ':');
    if (!colon)
        return fawn_err(FAWN_EINVAL, "the run's scope %.64s names no run", run_scope);
    uint64_t n = atomic_fetch_add(&exchanges, 1) + 1;
    snprintf(out, SBX_SCOPE_MAX + 1, "%.*s:mcp-%llu", (int)(colon - run_scope), run_scope,
             (unsigned long long)n);
    return 0;
}

/* Runs the box request body on a lease of a session of its own, killed
 * once env's run is cancelled: the box's answer into *reply, *status. */
static int exec_watched(json_t **reply, int *status, tool_env *env, const mcp_server *srv,
                        json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    cancel_watch w = {.cancel = env->cancel,
                      .m = env->sandboxes,
                      .user = env->req.who.user,
                      .thread_id = env->req.thread,
                      .server = srv->name};
    int r = scope_make(w.scope, env->req.scope);
    sbx_request req = env->req;
    req.scope = w.scope;
    sbx_lease *lease = NULL;
    if (r == 0)
        r = sbx_acquire(&lease, env->sandboxes, &req);
    if (r == 0)
        r = json_object_set_new(body, "session_id", json_string(lease->session)) == 0
                ? 0
                : fawn_err(FAWN_ENOMEM, "out of memory");
    bool watching = r == 0 && (r = watch_start(&w)) == 0;
    if (r == 0 && !atomic_load(env->cancel))
        r = sbx_call(reply, status, lease, "POST", "/v1/shell/exec", body, timeout_ms);
    if (watching)
        watch_stop(&w);
    sbx_release(lease); /* the last holder of the scope: its session ends */
    return r;
}

int mcp_stdio_run(json_t **out, tool_env *env, const mcp_server *srv, char *const *messages,
                  size_t n, uint32_t timeout_s) {
    *out = NULL;
    if (!env)
        return fawn_err(FAWN_EUNSUP,
                        "the MCP server %s runs over stdio in a thread's sandbox: "
                        "only a run (or a discovery through the API) has one",
                        srv->name);
    if (env->cancel && atomic_load(env->cancel))
        return fawn_err(FAWN_ECANCELED, "cancelled");
    char *command = NULL;
    int r = command_build(&command, srv, messages, n);
    sbx_lease *lease = NULL;
    if (r == 0) /* the run's own hold on its sandbox, taken as any tool takes it */
        r = tool_env_lease(&lease, env);
    json_t *body = r == 0
                       ? json_pack("{s:s, s:I, s:i}", "command", command, "timeout_s",
                                   (json_int_t)timeout_s, "max_output_bytes", MCP_STDIO_OUTPUT_MAX)
                       : NULL;
    if (r == 0 && !body)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    /* Never the run's session: a fresh shell, a session of its own when a
     * cancel may stop it, else a one-shot command. */
    json_t *reply = NULL;
    int status = 0;
    int timeout_ms = (int)(timeout_s + MCP_STDIO_REPLY_MARGIN_S) * 1000;
    if (r == 0 && env->cancel && env->req.scope)
        r = exec_watched(&reply, &status, env, srv, body, timeout_ms);
    else if (r == 0)
        r = sbx_call(&reply, &status, lease, "POST", "/v1/shell/exec", body, timeout_ms);
    if (r == 0 && env->cancel && atomic_load(env->cancel))
        r = fawn_err(FAWN_ECANCELED, "cancelled");
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
