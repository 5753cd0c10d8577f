/* The remote provider (see remote.h): a control plane of operator commands
 * places boxes; the box API over TCP reaches them. A control plane that
 * fails, hangs or prints nonsense is an unknown answer, never "absent". */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "base/json.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/placement.h"
#include "sandbox/remote.h"
#include "skills/skills.h"

#define REMOTE_ENDPOINT_PREFIX "tcp:"
/* Arguments copied per command: configuration, but still bounded. */
#define REMOTE_ARGV_MAX 256
/* Bytes of a failing command's stderr kept for the log: its first line. */
#define REMOTE_STDERR_KEEP 512
/* Longest pause between polls of a starting or stopping box. */
#define REMOTE_BACKOFF_MAX_MS 500
/* One readiness request while a box starts: a box that accepted the
 * connection answers at once when it is up. Also how late a cancel during
 * such a request takes effect. */
#define REMOTE_ATTEMPT_TIMEOUT_MS 1000
/* A sandbox id: the first 16 hex digits of sha256("user:thread"). */
#define REMOTE_SANDBOX_ID_LEN 16

enum remote_op { OP_CREATE, OP_STATUS, OP_DESTROY, OP_LIST, OP_COUNT };
static const char *const op_names[OP_COUNT] = {"create", "status", "destroy", "list"};

static const char *const state_names[] = {
    [SBX_ABSENT] = "absent",   [SBX_PENDING] = "pending",         [SBX_RUNNING] = "running",
    [SBX_STOPPED] = "stopped", [SBX_TERMINATING] = "terminating",
};

typedef struct remote_provider {
    sbx_provider base;
    char **argv[OP_COUNT];
    uint32_t command_timeout_ms, start_timeout_ms, health_timeout_ms;
    char **env_passthrough; /* NULL-terminated, or NULL */
    char *home;             /* where users' skills views are, or NULL */
} remote_provider;

/* The variables a command gets (NULL: not set). */
typedef struct command_env {
    const char *sandbox_id, *user, *thread, *generation, *skills_dir;
} command_env;

/* Re-raises the current error as code with context in front of it. */
static int err_wrap(int code, const char *context) {
    char why[512];
    snprintf(why, sizeof why, "%s", fawn_errmsg());
    return fawn_err(code, "%s: %s", context, why);
}

/* ---- running a command ---- */

/* The variables the provider sets, in command_env's order. */
static const char *const env_names[] = {"FAWN_SANDBOX_ID", "FAWN_USER", "FAWN_THREAD",
                                        "FAWN_GENERATION", "FAWN_SKILLS_DIR"};

/* Host variables every command gets: where to find programs and how to
 * speak, never credentials. */
static const char *const host_env_allowed[] = {"PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR"};

/* envp for a command, by allow-list: this process's values of
 * host_env_allowed and of the configured pass-through names, then the
 * variables that the command_env sets. */
typedef struct spawn_env {
    char **envp;
    char *own[ARRAY_LEN(env_names)];
} spawn_env;

static void spawn_env_free(spawn_env *e) {
    for (size_t i = 0; i < ARRAY_LEN(e->own); i++)
        free(e->own[i]);
    free(e->envp);
}

static bool name_listed(const char *entry, size_t len, const char *const *names, size_t n) {
    for (size_t i = 0; names && i < n && names[i]; i++)
        if (strlen(names[i]) == len && strncmp(entry, names[i], len) == 0)
            return true;
    return false;
}

/* Whether the host's NAME=VALUE entry goes to a command. */
static bool host_entry_passes(const char *entry, char *const *passthrough) {
    const char *eq = strchr(entry, '=');
    size_t len = eq ? (size_t)(eq - entry) : 0;
    if (!len || name_listed(entry, len, env_names, ARRAY_LEN(env_names)))
        return false;
    return name_listed(entry, len, host_env_allowed, ARRAY_LEN(host_env_allowed)) ||
           name_listed(entry, len, (const char *const *)passthrough, SIZE_MAX);
}

/* Fills e (the caller frees it with spawn_env_free, also after an error). */
static int spawn_env_build(spawn_env *e, const command_env *ce, char *const *passthrough) {
    const char *values[] = {ce->sandbox_id, ce->user, ce->thread, ce->generation, ce->skills_dir};
    size_t n = 0, k = 0;
    while (environ && environ[n])
        n++;
    *e = (spawn_env){.envp = calloc(n + ARRAY_LEN(env_names) + 1, sizeof *e->envp)};
    if (!e->envp)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++)
        if (host_entry_passes(environ[i], passthrough))
            e->envp[k++] = environ[i];
    for (size_t j = 0; j < ARRAY_LEN(env_names); j++) {
        if (!values[j])
            continue;
        if (asprintf(&e->own[j], "%s=%s", env_names[j], values[j]) < 0) {
            e->own[j] = NULL;
            return fawn_err(FAWN_ENOMEM, "out of memory");
        }
        e->envp[k++] = e->own[j];
    }
    return 0;
}

/* A started command: its pid (also its process group), a pidfd that
 * becomes readable when it exits, and the read ends of its stdout and
 * stderr (non-blocking). */
typedef struct command {
    pid_t pid;
    int pidfd, out, err;
} command;

static void command_close(command *c) {
    int *fds[] = {&c->pidfd, &c->out, &c->err};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        if (*fds[i] >= 0)
            close(steal_fd(*fds[i]));
}

static int spawn_attrs(posix_spawnattr_t *attr, posix_spawn_file_actions_t *fa, int out_w,
                       int err_w) {
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    int e = posix_spawnattr_setflags(attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                               POSIX_SPAWN_SETSIGDEF);
    if (!e)
        e = posix_spawnattr_setpgroup(attr, 0);
    if (!e)
        e = posix_spawnattr_setsigmask(attr, &none);
    if (!e)
        e = posix_spawnattr_setsigdefault(attr, &all);
    if (!e)
        e = posix_spawn_file_actions_addopen(fa, 0, "/dev/null", O_RDONLY, 0);
    if (!e)
        e = posix_spawn_file_actions_adddup2(fa, out_w, 1);
    if (!e)
        e = posix_spawn_file_actions_adddup2(fa, err_w, 2);
    if (!e)
        e = posix_spawn_file_actions_addclosefrom_np(fa, 3);
    return e ? fawn_err_sys(FAWN_EIO, e, "preparing a control plane command") : 0;
}

/* Starts argv with its stdout and stderr on pipes. */
static int command_start(command *c, const remote_provider *rp, enum remote_op op,
                         const command_env *ce) {
    char **argv = rp->argv[op];
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    spawn_env env = {0};
    posix_spawnattr_t attr;
    posix_spawn_file_actions_t fa;
    posix_spawnattr_init(&attr);
    posix_spawn_file_actions_init(&fa);
    *c = (command){.pid = -1, .pidfd = -1, .out = -1, .err = -1};
    int r = pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0
                ? fawn_err_sys(FAWN_EIO, errno, "pipe")
                : 0;
    if (r == 0)
        r = spawn_attrs(&attr, &fa, out[1], err[1]);
    if (r == 0)
        r = spawn_env_build(&env, ce, rp->env_passthrough);
    int e = r == 0 ? posix_spawnp(&c->pid, argv[0], &fa, &attr, argv, env.envp) : 0;
    if (e)
        r = fawn_err_sys(FAWN_EIO, e, "the control plane's %s command could not be started",
                         op_names[op]);
    spawn_env_free(&env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    int *ends[] = {&out[1], &err[1], &out[0], &err[0]}; /* the read ends stay on success */
    for (size_t i = 0; i < (r < 0 ? 4u : 2u); i++)
        if (*ends[i] >= 0)
            close(*ends[i]);
    if (r < 0)
        return r;
    c->out = out[0];
    c->err = err[0];
    c->pidfd = (int)syscall(SYS_pidfd_open, c->pid, 0);
    fcntl(c->out, F_SETFL, O_NONBLOCK);
    fcntl(c->err, F_SETFL, O_NONBLOCK);
    if (c->pidfd < 0) {
        r = fawn_err_sys(FAWN_EIO, errno, "pidfd_open");
        kill(c->pid, SIGKILL);
        waitpid(c->pid, NULL, 0);
        command_close(c);
    }
    return r;
}

/* Reads what stdout has now into out (bounded by its limit). Returns 1 at
 * EOF, 0 when drained for now, FAWN_E2BIG past the limit. */
static int stdout_read(fbuf *out, int fd) {
    char chunk[16384];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n == 0)
            return 1;
        if (n < 0)
            return errno == EAGAIN || errno == EINTR ? 0 : 1;
        if (fbuf_append(out, chunk, (size_t)n) < 0)
            return FAWN_E2BIG;
    }
}

/* Reads one chunk of stderr (one: it has no bound), keeping the first
 * REMOTE_STDERR_KEEP - 1 bytes in head. Returns 1 at EOF, else 0. */
static int stderr_read(char *head, size_t *head_len, int fd) {
    char chunk[4096];
    ssize_t n = read(fd, chunk, sizeof chunk);
    if (n <= 0)
        return n == 0 || (errno != EAGAIN && errno != EINTR);
    size_t keep = REMOTE_STDERR_KEEP - 1 - *head_len;
    keep = (size_t)n < keep ? (size_t)n : keep;
    memcpy(head + *head_len, chunk, keep);
    *head_len += keep;
    return 0;
}

/* Collects c's output until it exits (0), its deadline passes
 * (FAWN_ETIMEDOUT), cancel is set (FAWN_ECANCELED) or stdout overflows
 * (FAWN_E2BIG). */
static int command_collect(fbuf *out, char *err_head, size_t *err_len, command *c, int64_t deadline,
                           const sbx_cancel *cancel) {
    struct pollfd p[3] = {{.fd = c->out, .events = POLLIN},
                          {.fd = c->err, .events = POLLIN},
                          {.fd = c->pidfd, .events = POLLIN}};
    for (;;) {
        if (placement_cancelled(cancel))
            return FAWN_ECANCELED;
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0)
            return FAWN_ETIMEDOUT;
        if (poll(p, 3, left < PLACEMENT_SLICE_MS ? (int)left : PLACEMENT_SLICE_MS) < 0) {
            if (errno == EINTR)
                continue;
            return fawn_err_sys(FAWN_EIO, errno, "poll");
        }
        int r = p[0].revents ? stdout_read(out, p[0].fd) : 0;
        if (r < 0)
            return r;
        if (r == 1)
            p[0].fd = -1;
        if (p[1].revents && stderr_read(err_head, err_len, p[1].fd) == 1)
            p[1].fd = -1;
        if (p[2].revents) /* exited: what it wrote is in the pipe */
            return p[0].fd >= 0 && stdout_read(out, p[0].fd) < 0 ? FAWN_E2BIG : 0;
    }
}

/* Logs the first line of a failing command's stderr, control characters
 * replaced. */
static void log_stderr(enum remote_op op, char *head, size_t len) {
    head[len] = '\0';
    head[strcspn(head, "\n")] = '\0';
    for (char *s = head; *s; s++)
        if ((unsigned char)*s < 0x20 || *s == 0x7f)
            *s = '?';
    if (head[0])
        log_warn("sandbox", "the control plane's %s command said: %s", op_names[op], head);
}

/* What c's end means as an error (0 when it exited 0). */
static int command_status(int wstatus, enum remote_op op, uint32_t timeout_ms, int collected) {
    const char *name = op_names[op];
    switch (collected) {
    case FAWN_ECANCELED: return placement_cancelled_err();
    case FAWN_ETIMEDOUT:
        return fawn_err(FAWN_ETIMEDOUT,
                        "the control plane's %s command did not finish within %u ms", name,
                        timeout_ms);
    case FAWN_E2BIG:
        return fawn_err(FAWN_EPROTO, "the control plane's %s command printed more than %zu bytes",
                        name, REMOTE_COMMAND_OUTPUT_MAX);
    default: break;
    }
    if (collected < 0)
        return collected;
    if (WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0)
        return 0;
    if (WIFEXITED(wstatus))
        return fawn_err(FAWN_EIO, "the control plane's %s command failed (exit status %d)", name,
                        WEXITSTATUS(wstatus));
    return fawn_err(FAWN_EIO, "the control plane's %s command was killed by signal %d", name,
                    WIFSIGNALED(wstatus) ? WTERMSIG(wstatus) : 0);
}

/* Runs op's command with ce and parses the JSON object it prints into *out
 * (caller decrefs). cancel may be NULL. */
static int command_run(json_t **out, const remote_provider *rp, enum remote_op op,
                       const command_env *ce, const sbx_cancel *cancel) {
    *out = NULL;
    command c;
    int r = command_start(&c, rp, op, ce);
    if (r < 0)
        return r;
    fbuf text = {.limit = REMOTE_COMMAND_OUTPUT_MAX};
    char err_head[REMOTE_STDERR_KEEP];
    size_t err_len = 0;
    int collected = command_collect(&text, err_head, &err_len, &c,
                                    fawn_now_ms() + rp->command_timeout_ms, cancel);
    if (collected < 0) { /* it goes with everything it started in its group */
        kill(-c.pid, SIGKILL);
        kill(c.pid, SIGKILL);
    }
    int wstatus = 0;
    pid_t w;
    while ((w = waitpid(c.pid, &wstatus, 0)) < 0 && errno == EINTR) {
    }
    if (w < 0 && collected == 0) /* reaped elsewhere (SIGCHLD ignored?): its outcome is unknown */
        collected = fawn_err_sys(FAWN_EIO, errno, "the control plane's %s command's exit status",
                                 op_names[op]);
    command_close(&c);
    r = command_status(wstatus, op, rp->command_timeout_ms, collected);
    if (r < 0)
        log_stderr(op, err_head, err_len);
    if (r == 0) {
        json_error_t jerr;
        *out = json_loadb(text.data ? text.data : "", text.len, JSON_REJECT_DUPLICATES, &jerr);
        if (!json_is_object(*out)) {
            json_decref(steal_ptr(*out));
            r = fawn_err(FAWN_EPROTO, "the control plane's %s command did not print a JSON object",
                         op_names[op]);
        }
    }
    fbuf_free(&text);
    return r;
}

/* ---- reading what commands print ---- */

/* FAWN_EPROTO naming op for an output error (the current message). */
static int output_err(enum remote_op op) {
    char context[64];
    snprintf(context, sizeof context, "the control plane's %s command", op_names[op]);
    return err_wrap(FAWN_EPROTO, context);
}

/* An optional generation field: "" when absent. */
static int get_generation(char generation[SBX_GENERATION_LEN + 1], const json_t *o,
                          enum remote_op op) {
    const char *g = "";
    if (fjson_get_string(&g, o, "generation", false) < 0)
        return output_err(op);
    if (g[0] && !placement_hex_valid(g, SBX_GENERATION_LEN))
        return fawn_err(FAWN_EPROTO,
                        "the control plane's %s command printed a generation that is "
                        "not 32 lowercase hex digits",
                        op_names[op]);
    snprintf(generation, SBX_GENERATION_LEN + 1, "%s", g);
    return 0;
}

int remote_create_parse(sbx_box *box, const json_t *o) {
    static const char *const keys[] = {"endpoint", "token", "generation", NULL};
    const char *endpoint, *token;
    box->endpoint[0] = box->token[0] = box->generation[0] = '\0';
    if (fjson_check_keys(o, keys) < 0 || fjson_get_string(&endpoint, o, "endpoint", true) < 0 ||
        fjson_get_string(&token, o, "token", true) < 0)
        return output_err(OP_CREATE);
    size_t prefix = strlen(REMOTE_ENDPOINT_PREFIX);
    if (strncmp(endpoint, REMOTE_ENDPOINT_PREFIX, prefix) != 0 || !endpoint[prefix] ||
        strlen(endpoint) >= sizeof box->endpoint)
        return fawn_err(FAWN_EPROTO, "the control plane's create command printed an endpoint "
                                     "that is not tcp:HOST:PORT");
    if (!box_tcp_token_valid(token))
        return fawn_err(FAWN_EPROTO, "the control plane's create command printed a token that is "
                                     "not 1 to 127 visible ASCII characters");
    snprintf(box->endpoint, sizeof box->endpoint, "%s", endpoint);
    snprintf(box->token, sizeof box->token, "%s", token);
    return get_generation(box->generation, o, OP_CREATE);
}

int remote_status_parse(enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                        const json_t *o) {
    static const char *const keys[] = {"state", "generation", "endpoint", "token", NULL};
    const char *name, *ignored;
    *state = SBX_UNKNOWN;
    generation[0] = '\0';
    if (fjson_check_keys(o, keys) < 0 || fjson_get_string(&name, o, "state", true) < 0 ||
        fjson_get_string(&ignored, o, "endpoint", false) < 0 ||
        fjson_get_string(&ignored, o, "token", false) < 0)
        return output_err(OP_STATUS);
    int r = get_generation(generation, o, OP_STATUS);
    if (r < 0)
        return r;
    for (size_t i = 0; i < ARRAY_LEN(state_names); i++) {
        if (strcmp(name, state_names[i]) != 0)
            continue;
        if (i == SBX_RUNNING && !generation[0])
            return fawn_err(FAWN_EPROTO, "the control plane's status command reported a running "
                                         "sandbox without its generation");
        if (i == SBX_ABSENT)
            generation[0] = '\0';
        *state = (enum sbx_presence)i;
        return 0;
    }
    generation[0] = '\0';
    return fawn_err(FAWN_EPROTO, "the control plane's status command printed an unknown state");
}

static int status_run(const remote_provider *rp, enum sbx_presence *state,
                      char generation[SBX_GENERATION_LEN + 1], const char *sandbox_id) {
    *state = SBX_UNKNOWN;
    generation[0] = '\0';
    json_t *o = NULL;
    command_env ce = {.sandbox_id = sandbox_id};
    int r = command_run(&o, rp, OP_STATUS, &ce, NULL);
    if (r == 0)
        r = remote_status_parse(state, generation, o);
    json_decref(o);
    if (r < 0) {
        *state = SBX_UNKNOWN;
        generation[0] = '\0';
    }
    return r;
}

/* ---- the box ---- */

static const char *endpoint_host(const sbx_box *box) {
    size_t n = strlen(REMOTE_ENDPOINT_PREFIX);
    return strncmp(box->endpoint, REMOTE_ENDPOINT_PREFIX, n) == 0 ? box->endpoint + n : NULL;
}

/* The generation box's endpoint answers with. FAWN_ENOENT: nothing
 * listens; FAWN_EPROTO: a broken answer (or the token refused); FAWN_EIO:
 * not ready; others from box_call_tcp. */
static int box_identity(char generation[SBX_GENERATION_LEN + 1], const sbx_box *box,
                        int timeout_ms) {
    const char *host_port = endpoint_host(box);
    if (!host_port)
        return fawn_err(FAWN_EINVAL, "not a remote sandbox endpoint");
    json_t *reply = NULL;
    int status = 0;
    int r = box_call_tcp(&reply, &status, host_port, box->token[0] ? box->token : NULL, "GET",
                         "/v1/sandbox", NULL, timeout_ms);
    r = placement_box_answer(generation, r, status, reply);
    json_decref(reply);
    return r;
}

/* Waits until box answers as its generation (or, when that is "", as any:
 * box->generation gets it). Refused connections, timeouts and a box not
 * ready (or answering as another generation) are waited out; a broken
 * answer is not. */
static int box_await(sbx_box *box, const remote_provider *rp, const sbx_cancel *cancel) {
    int64_t deadline = fawn_now_ms() + rp->start_timeout_ms;
    int delay = PLACEMENT_SLICE_MS;
    for (;;) {
        if (placement_cancelled(cancel))
            return placement_cancelled_err();
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0)
            return fawn_err(FAWN_ETIMEDOUT, "the sandbox did not answer within %u ms",
                            rp->start_timeout_ms);
        char gen[SBX_GENERATION_LEN + 1];
        int r = box_identity(
            gen, box, left < REMOTE_ATTEMPT_TIMEOUT_MS ? (int)left : REMOTE_ATTEMPT_TIMEOUT_MS);
        if (r == 0 && (!box->generation[0] || strcmp(gen, box->generation) == 0)) {
            memcpy(box->generation, gen, sizeof gen);
            return 0;
        }
        if (r < 0 && r != FAWN_ENOENT && r != FAWN_EIO && r != FAWN_ETIMEDOUT)
            return r;
        if ((r = placement_pause(delay, deadline, cancel)) < 0)
            return r;
        delay = delay * 2 > REMOTE_BACKOFF_MAX_MS ? REMOTE_BACKOFF_MAX_MS : delay * 2;
    }
}

/* ---- the operations ---- */

/* Whether generation (any when "") is gone, given what status said. */
static bool gone(enum sbx_presence state, const char *seen, const char *generation) {
    return state == SBX_ABSENT || (generation[0] && seen[0] && strcmp(seen, generation) != 0);
}

/* Runs status until it confirms generation is gone. */
static int absent_await(const remote_provider *rp, const char *sandbox_id, const char *generation) {
    int64_t deadline = fawn_now_ms() + rp->start_timeout_ms;
    int delay = PLACEMENT_SLICE_MS;
    for (;;) {
        enum sbx_presence state;
        char seen[SBX_GENERATION_LEN + 1];
        if (status_run(rp, &state, seen, sandbox_id) == 0 && gone(state, seen, generation))
            return 0;
        if (fawn_now_ms() >= deadline)
            return fawn_err(FAWN_ETIMEDOUT,
                            "the sandbox was not confirmed gone within %u ms "
                            "(last state: %s)",
                            rp->start_timeout_ms,
                            state == SBX_UNKNOWN ? "unknown" : state_names[state]);
        placement_pause(delay, deadline, NULL);
        delay = delay * 2 > REMOTE_BACKOFF_MAX_MS ? REMOTE_BACKOFF_MAX_MS : delay * 2;
    }
}

static int remote_destroy(void *ctx, const char *sandbox_id, const char *generation) {
    const remote_provider *rp = ctx;
    if (!placement_hex_valid(sandbox_id, REMOTE_SANDBOX_ID_LEN) ||
        (generation[0] && !placement_hex_valid(generation, SBX_GENERATION_LEN)))
        return fawn_err(FAWN_EINVAL, "invalid sandbox id or generation");
    enum sbx_presence state;
    char seen[SBX_GENERATION_LEN + 1];
    if (status_run(rp, &state, seen, sandbox_id) == 0 && gone(state, seen, generation))
        return 0;
    static const char *const no_keys[] = {NULL};
    command_env ce = {.sandbox_id = sandbox_id, .generation = generation[0] ? generation : NULL};
    json_t *o = NULL;
    int r = command_run(&o, rp, OP_DESTROY, &ce, NULL);
    if (r == 0 && fjson_check_keys(o, no_keys) < 0)
        r = output_err(OP_DESTROY);
    json_decref(o);
    return r < 0 ? r : absent_await(rp, sandbox_id, generation);
}

/* After a failed start: removes what create began, keeping the error. */
static int create_undo(const remote_provider *rp, const sbx_box *box, int r) {
    char why[512];
    snprintf(why, sizeof why, "%s", fawn_errmsg());
    if (remote_destroy((void *)rp, box->sandbox_id, box->generation) < 0)
        log_warn("sandbox", "sandbox %s: removing a failed start: %s", box->sandbox_id,
                 fawn_errmsg());
    return fawn_err(r, "%s", why);
}

static int remote_create(void *ctx, sbx_box *out, const char *user, const char *thread,
                         const sbx_cancel *cancel) {
    *out = (sbx_box){0};
    const remote_provider *rp = ctx;
    sbx_box box = {0};
    int r = paths_sandbox_id(box.sandbox_id, user, thread);
    if (r < 0)
        return r;
    if (placement_cancelled(cancel))
        return placement_cancelled_err();
    char skills[PATH_MAX];
    if (rp->home && (r = skills_view_ensure(skills, rp->home, user)) < 0)
        return r;
    command_env ce = {.sandbox_id = box.sandbox_id,
                      .user = user,
                      .thread = thread,
                      .skills_dir = rp->home ? skills : NULL};
    json_t *o = NULL;
    r = command_run(&o, rp, OP_CREATE, &ce, cancel);
    if (r == 0)
        r = remote_create_parse(&box, o);
    json_decref(o);
    if (r == 0)
        r = box_await(&box, rp, cancel);
    if (r < 0)
        return create_undo(rp, &box, r);
    *out = box;
    return 0;
}

static int remote_probe(void *ctx, enum sbx_presence *state,
                        char generation[SBX_GENERATION_LEN + 1], const char *sandbox_id) {
    *state = SBX_UNKNOWN;
    generation[0] = '\0';
    if (!placement_hex_valid(sandbox_id, REMOTE_SANDBOX_ID_LEN))
        return fawn_err(FAWN_EINVAL, "invalid sandbox id");
    if (status_run(ctx, state, generation, sandbox_id) < 0)
        log_warn("sandbox", "sandbox %s: presence unknown: %s", sandbox_id, fawn_errmsg());
    return 0;
}

static int remote_health(void *ctx, const sbx_box *box) {
    const remote_provider *rp = ctx;
    char gen[SBX_GENERATION_LEN + 1];
    int r = box_identity(gen, box, (int)rp->health_timeout_ms);
    if (r < 0)
        return r;
    return strcmp(gen, box->generation) == 0
               ? 0
               : fawn_err(FAWN_ENOENT, "another generation of the sandbox answers");
}

/* One listing entry, checked. */
static int list_entry(const char **id, const char **gen, const json_t *e) {
    static const char *const keys[] = {"sandbox_id", "generation", NULL};
    *gen = "";
    if (!json_is_object(e) || fjson_check_keys(e, keys) < 0 ||
        fjson_get_string(id, e, "sandbox_id", true) < 0 ||
        fjson_get_string(gen, e, "generation", false) < 0)
        return json_is_object(e) ? output_err(OP_LIST)
                                 : fawn_err(FAWN_EPROTO, "the control plane's list command "
                                                         "printed an entry that is not an object");
    if (!placement_hex_valid(*id, REMOTE_SANDBOX_ID_LEN) ||
        ((*gen)[0] && !placement_hex_valid(*gen, SBX_GENERATION_LEN)))
        return fawn_err(FAWN_EPROTO, "the control plane's list command printed an invalid "
                                     "sandbox id or generation");
    return 0;
}

int remote_list_parse(const json_t *o,
                      int (*each)(void *each_ctx, const char *sandbox_id, const char *generation),
                      void *each_ctx) {
    static const char *const keys[] = {"sandboxes", NULL};
    json_t *boxes = json_object_get(o, "sandboxes");
    int r = 0;
    if (fjson_check_keys(o, keys) < 0 || !json_is_array(boxes))
        r = fawn_err(FAWN_EPROTO, "the control plane's list command printed no sandboxes array");
    const char *id, *gen;
    /* Every entry is checked before any is reported. */
    for (size_t i = 0; r == 0 && i < json_array_size(boxes); i++)
        r = list_entry(&id, &gen, json_array_get(boxes, i));
    for (size_t i = 0; r == 0 && i < json_array_size(boxes); i++)
        if (list_entry(&id, &gen, json_array_get(boxes, i)) == 0)
            r = each(each_ctx, id, gen);
    return r;
}

static int remote_list(void *ctx,
                       int (*each)(void *each_ctx, const char *sandbox_id, const char *generation),
                       void *each_ctx) {
    command_env ce = {0};
    json_t *o = NULL;
    int r = command_run(&o, ctx, OP_LIST, &ce, NULL);
    if (r == 0)
        r = remote_list_parse(o, each, each_ctx);
    json_decref(o);
    return r;
}

static int remote_call(void *ctx, json_t **reply, int *status, const sbx_box *box,
                       const char *method, const char *path, const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    const char *host_port = endpoint_host(box);
    if (!host_port)
        return fawn_err(FAWN_EINVAL, "not a remote sandbox endpoint");
    int r = box_call_tcp(reply, status, host_port, box->token[0] ? box->token : NULL, method, path,
                         body, timeout_ms);
    return r == FAWN_ENOENT ? err_wrap(FAWN_EIO, "the sandbox is unreachable") : r;
}

static int remote_call_file(void *ctx, json_t **reply, int *status, const sbx_box *box,
                            const char *method, const char *path, int file_fd, uint64_t size,
                            int timeout_ms) {
    *reply = NULL;
    *status = 0;
    const char *host_port = endpoint_host(box);
    if (!host_port)
        return fawn_err(FAWN_EINVAL, "not a remote sandbox endpoint");
    int r = box_call_file_tcp(reply, status, host_port, box->token[0] ? box->token : NULL, method,
                              path, file_fd, size, timeout_ms);
    return r == FAWN_ENOENT ? err_wrap(FAWN_EIO, "the sandbox is unreachable") : r;
}

/* ---- creating the provider ---- */

static void argv_free(char **argv) {
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

/* Copies a NULL-terminated list of n strings (NULL when n is 0). */
static int strings_copy(char ***out, char *const *list, size_t n) {
    *out = NULL;
    if (n == 0)
        return 0;
    char **copy = calloc(n + 1, sizeof *copy);
    for (size_t i = 0; copy && i < n; i++)
        if (!(copy[i] = strdup(list[i]))) {
            argv_free(copy);
            copy = NULL;
        }
    if (!copy)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *out = copy;
    return 0;
}

static int argv_copy(char ***out, char *const *argv, enum remote_op op) {
    size_t n = 0;
    while (argv && n <= REMOTE_ARGV_MAX && argv[n])
        n++;
    if (n == 0 || n > REMOTE_ARGV_MAX || !argv[0][0]) {
        *out = NULL;
        return fawn_err(FAWN_EINVAL,
                        "the remote provider's %s command must be a list of 1 to %d "
                        "arguments",
                        op_names[op], REMOTE_ARGV_MAX);
    }
    return strings_copy(out, argv, n);
}

int remote_provider_new(sbx_provider **out, const remote_provider_config *cfg) {
    *out = NULL;
    if (cfg->command_timeout_ms == 0 || cfg->start_timeout_ms == 0 ||
        cfg->health_timeout_ms > INT32_MAX)
        return fawn_err(FAWN_EINVAL, "the remote provider's command and start timeouts must be "
                                     "positive, its health timeout below 2^31 ms");
    remote_provider *rp = calloc(1, sizeof *rp);
    if (!rp)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    rp->base = (sbx_provider){.name = "remote",
                              .ctx = rp,
                              .create = remote_create,
                              .probe = remote_probe,
                              .health = remote_health,
                              .destroy = remote_destroy,
                              .list = remote_list,
                              .call = remote_call,
                              .call_file = remote_call_file,
                              .shares_host_files = false};
    rp->command_timeout_ms = cfg->command_timeout_ms;
    rp->start_timeout_ms = cfg->start_timeout_ms;
    rp->health_timeout_ms = cfg->health_timeout_ms ? cfg->health_timeout_ms
                                                   : REMOTE_HEALTH_TIMEOUT_MS;
    char **const *argvs[OP_COUNT] = {&cfg->create_argv, &cfg->status_argv, &cfg->destroy_argv,
                                     &cfg->list_argv};
    size_t n_pass = 0;
    while (cfg->env_passthrough && cfg->env_passthrough[n_pass])
        n_pass++;
    int r = strings_copy(&rp->env_passthrough, cfg->env_passthrough, n_pass);
    if (r == 0 && cfg->home && !(rp->home = strdup(cfg->home)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    for (int op = 0; op < OP_COUNT; op++) {
        if (r == 0)
            r = argv_copy(&rp->argv[op], *argvs[op], (enum remote_op)op);
        if (r < 0) {
            remote_provider_free(&rp->base);
            return r;
        }
    }
    *out = &rp->base;
    return 0;
}

void remote_provider_free(sbx_provider *p) {
    if (!p)
        return;
    remote_provider *rp = p->ctx;
    for (int op = 0; op < OP_COUNT; op++)
        argv_free(rp->argv[op]);
    argv_free(rp->env_passthrough);
    free(rp->home);
    free(rp);
}
