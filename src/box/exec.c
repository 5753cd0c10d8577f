#include "box/exec.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <linux/sched.h>
#include <sys/pidfd.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/base.h"
#include "base/json.h"
#include "box/env.h"
#include "box/init.h"
#include "box/seccomp.h"

#define DEFAULT_CWD "/mnt/user-data/workspace"
/* A session's saved state (cwd + exported variables) is at most this big. */
#define STATE_MAX_BYTES BOX_ENV_BYTES_MAX
/* Read granularity for command output. */
#define READ_CHUNK 65536

/* A one-shot command's init kept alive after the reply by the command's
 * background processes; killed, with them, when the command's deadline
 * passes: a one-shot command's process tree never outlives its timeout. */
typedef struct lingering {
    int pidfd;
    int64_t deadline_ms;
    struct lingering *next;
} lingering;

typedef struct session {
    char id[BOX_SESSION_ID_MAX + 1];
    bool busy;         /* an exec owns the init fields */
    bool deleted;      /* delete requested while busy: the exec frees it */
    bool kill_pending; /* killed while busy before its init started: the exec's
                          init is killed as it starts */
    bool persistent;
    pid_t init_pid; /* 0 when no init runs */
    int init_pidfd;
    int ctl_fd;
    char *cwd;  /* malloc'd; NULL = default */
    char **env; /* malloc'd NAME=VALUE list; NULL = base environment */
    struct session *next;
} session;

struct box_exec_ctx {
    box_exec_config cfg;
    box_init_setup init_setup;
    struct sock_fprog seccomp;
    pthread_mutex_t seccomp_mu; /* guards building seccomp once */
    pthread_mutex_t mu;
    session *sessions; /* persistent sessions only */
    session *oneshots; /* one-shot executions in progress */
    session *spare;    /* a one-shot whose init is idle and its namespace empty */
    lingering *lingering;
    size_t n_sessions;
    bool stopping; /* box_exec_stop: every init is killed, no command starts */
};

/* ---- output capture: the first and last halves of a stream, never more ---- */

typedef struct capture {
    fbuf head;  /* the first half of the cap, grown as output arrives */
    char *tail; /* ring buffer of the last half, allocated once head is full */
    size_t tail_cap, tail_pos, tail_len;
    uint64_t total;
} capture;

static void capture_init(capture *c, uint64_t limit) {
    memset(c, 0, sizeof *c);
    c->head.limit = (size_t)(limit / 2);
    c->tail_cap = (size_t)(limit - limit / 2);
}

static void capture_free(capture *c) {
    fbuf_free(&c->head);
    free(c->tail);
}

static void tail_add(capture *c, const char *data, size_t n) {
    if (!c->tail && !(c->tail = malloc(c->tail_cap)))
        return; /* out of memory: the tail is lost, total still counts it */
    if (n > c->tail_cap) {
        data += n - c->tail_cap;
        n = c->tail_cap;
    }
    size_t first = c->tail_cap - c->tail_pos < n ? c->tail_cap - c->tail_pos : n;
    memcpy(c->tail + c->tail_pos, data, first);
    memcpy(c->tail, data + first, n - first);
    c->tail_pos = (c->tail_pos + n) % c->tail_cap;
    c->tail_len = c->tail_len + n > c->tail_cap ? c->tail_cap : c->tail_len + n;
}

static void capture_add(capture *c, const char *data, size_t n) {
    c->total += n;
    size_t room = c->head.limit - c->head.len;
    size_t h = room < n ? room : n;
    if (h && fbuf_append(&c->head, data, h) < 0)
        h = 0;
    if (n > h)
        tail_add(c, data + h, n - h);
}

/* Renders head, a cut marker when bytes were dropped, and tail, as valid UTF-8. */
static json_t *capture_render(const capture *c, bool *truncated) {
    fbuf raw = {0}, out = {0};
    uint64_t kept = c->head.len + c->tail_len;
    int r = fbuf_append(&raw, c->head.data ? c->head.data : "", c->head.len);
    if (r == 0 && c->total > kept) {
        *truncated = true;
        r = fbuf_printf(&raw, "\n... [output truncated: %llu bytes omitted] ...\n",
                        (unsigned long long)(c->total - kept));
    }
    size_t start = (c->tail_pos + c->tail_cap - c->tail_len) % c->tail_cap;
    size_t first = c->tail_cap - start < c->tail_len ? c->tail_cap - start : c->tail_len;
    if (r == 0 && c->tail_len)
        r = fbuf_append(&raw, c->tail + start, first);
    if (r == 0 && c->tail_len > first)
        r = fbuf_append(&raw, c->tail, c->tail_len - first);
    if (r == 0)
        r = fawn_utf8_sanitize(&out, raw.data ? raw.data : "", raw.len);
    json_t *s = r == 0 ? json_stringn(out.data ? out.data : "", out.len) : NULL;
    fbuf_free(&raw);
    fbuf_free(&out);
    return s;
}

/* ---- context and sessions ---- */

static int read_cap_last(void) {
    char buf[16] = {0};
    int fd = open("/proc/sys/kernel/cap_last_cap", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 63;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    int v = n > 0 ? atoi(buf) : 63;
    return v > 0 && v < 64 ? v : 63;
}

int box_exec_new(box_exec_ctx **out, const box_exec_config *cfg) {
    *out = NULL;
    box_exec_ctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    ctx->cfg = *cfg;
    ctx->init_setup = (box_init_setup){
        .seccomp = &ctx->seccomp,
        .cap_last = read_cap_last(),
        .rlimit_nofile = cfg->rlimit_nofile,
        .rlimit_fsize = cfg->rlimit_fsize,
        .rlimit_nproc = cfg->rlimit_nproc,
        .rlimit_as = cfg->rlimit_as,
    };
    pthread_mutex_init(&ctx->mu, NULL);
    pthread_mutex_init(&ctx->seccomp_mu, NULL);
    *out = ctx;
    return 0;
}

int box_exec_prepare(box_exec_ctx *ctx) {
    pthread_mutex_lock(&ctx->seccomp_mu);
    int r = ctx->seccomp.filter ? 0 : box_seccomp_build(&ctx->seccomp);
    pthread_mutex_unlock(&ctx->seccomp_mu);
    return r;
}

/* Kills the init (and so its whole namespace) and waits for the kernel to
 * confirm. Returns true when confirmed. Caller owns the session's init. */
static bool init_kill_and_confirm(session *s) {
    if (s->init_pid == 0)
        return true;
    pidfd_send_signal(s->init_pidfd, SIGKILL, NULL, 0);
    struct pollfd p = {.fd = s->init_pidfd, .events = POLLIN};
    int r;
    do {
        r = poll(&p, 1, BOX_KILL_CONFIRM_MS);
    } while (r < 0 && errno == EINTR);
    return r > 0;
}

/* Closes the session's handles on its init. Other threads read those
 * handles under ctx->mu (to signal a busy session), so a session others can
 * see is changed only under it: pass ctx; pass NULL for one no other thread
 * can reach any more. */
static void init_forget(box_exec_ctx *ctx, session *s) {
    if (ctx)
        pthread_mutex_lock(&ctx->mu);
    if (s->init_pid != 0) {
        close(s->init_pidfd);
        close(s->ctl_fd);
        s->init_pid = 0;
        s->init_pidfd = s->ctl_fd = -1;
    }
    if (ctx)
        pthread_mutex_unlock(&ctx->mu);
}

static void session_free(session *s) {
    if (!s)
        return;
    init_kill_and_confirm(s);
    init_forget(NULL, s);
    free(s->cwd);
    box_env_free(s->env);
    free(s);
}

void box_exec_free(box_exec_ctx *ctx) {
    if (!ctx)
        return;
    for (session *s = ctx->sessions, *next; s; s = next) {
        next = s->next;
        session_free(s);
    }
    session_free(ctx->spare);
    for (lingering *l = ctx->lingering, *next; l; l = next) {
        next = l->next;
        pidfd_send_signal(l->pidfd, SIGKILL, NULL, 0);
        close(l->pidfd);
        free(l);
    }
    free(ctx->seccomp.filter);
    pthread_mutex_destroy(&ctx->mu);
    pthread_mutex_destroy(&ctx->seccomp_mu);
    free(ctx);
}

static session *session_find(box_exec_ctx *ctx, const char *id) {
    for (session *s = ctx->sessions; s; s = s->next)
        if (!s->deleted && strcmp(s->id, id) == 0)
            return s;
    return NULL;
}

static session *session_alloc(const char *id, bool persistent) {
    session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    snprintf(s->id, sizeof s->id, "%s", id);
    s->persistent = persistent;
    s->init_pidfd = s->ctl_fd = -1;
    return s;
}

static json_t *session_describe(const session *s) {
    return json_pack("{s:s, s:b, s:s, s:b}", "id", s->id, "busy", s->busy, "cwd",
                     s->cwd ? s->cwd : DEFAULT_CWD, "running_init", s->init_pid != 0);
}

int box_session_create(json_t **out, box_exec_ctx *ctx, const char *id) {
    *out = NULL;
    char fresh[33];
    if (!id) {
        fawn_random_hex(fresh, 16);
        id = fresh;
    } else if (!fawn_id_valid(id)) {
        return fawn_err(FAWN_EINVAL, "'id' must match [A-Za-z0-9_-]{1,64}");
    }
    pthread_mutex_lock(&ctx->mu);
    session *s = session_find(ctx, id);
    bool existed = s != NULL;
    int r = 0;
    if (!s && ctx->n_sessions >= ctx->cfg.max_sessions) {
        r = fawn_err(FAWN_E2BIG, "at most %u shell sessions per sandbox", ctx->cfg.max_sessions);
    } else if (!s) {
        if (!(s = session_alloc(id, true))) {
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        } else {
            s->next = ctx->sessions;
            ctx->sessions = s;
            ctx->n_sessions++;
        }
    }
    if (r == 0) {
        *out = session_describe(s);
        json_object_set_new(*out, "existed", json_boolean(existed));
    }
    pthread_mutex_unlock(&ctx->mu);
    return r;
}

static void session_unlink(box_exec_ctx *ctx, session *s) {
    for (session **pp = &ctx->sessions; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            ctx->n_sessions--;
            return;
        }
    }
}

int box_session_kill(box_exec_ctx *ctx, const char *id) {
    pthread_mutex_lock(&ctx->mu);
    session *s = session_find(ctx, id);
    bool own = s && !s->busy;
    if (own)
        s->busy = true; /* hold the session while its init dies */
    else if (s && s->init_pid)
        pidfd_send_signal(s->init_pidfd, SIGKILL, NULL, 0); /* its running exec reports it */
    else if (s)
        s->kill_pending = true; /* its exec is still starting the init */
    pthread_mutex_unlock(&ctx->mu);
    if (!s)
        return fawn_err(FAWN_ENOENT, "no such session: %s", id);
    if (!own)
        return 0;
    bool confirmed = init_kill_and_confirm(s);
    if (confirmed)
        init_forget(ctx, s);
    pthread_mutex_lock(&ctx->mu);
    s->busy = false;
    bool drop = s->deleted; /* deleted meanwhile: freed here, as by an exec */
    if (drop)
        session_unlink(ctx, s);
    pthread_mutex_unlock(&ctx->mu);
    if (drop)
        session_free(s);
    return confirmed ? 0 : fawn_err(FAWN_ETIMEDOUT, "the session's processes did not die in time");
}

int box_session_delete(box_exec_ctx *ctx, const char *id) {
    pthread_mutex_lock(&ctx->mu);
    session *s = session_find(ctx, id);
    session *to_free = NULL;
    if (s && s->busy) {
        s->deleted = true; /* the running exec frees it when it returns */
        if (s->init_pid)
            pidfd_send_signal(s->init_pidfd, SIGKILL, NULL, 0);
    } else if (s) {
        session_unlink(ctx, s);
        to_free = s;
    }
    pthread_mutex_unlock(&ctx->mu);
    session_free(to_free);
    return s ? 0 : fawn_err(FAWN_ENOENT, "no such session: %s", id);
}

json_t *box_session_list(box_exec_ctx *ctx) {
    json_t *list = json_array();
    pthread_mutex_lock(&ctx->mu);
    for (session *s = ctx->sessions; s; s = s->next)
        if (!s->deleted)
            json_array_append_new(list, session_describe(s));
    pthread_mutex_unlock(&ctx->mu);
    return json_pack("{s:o}", "sessions", list);
}

/* ---- request validation ---- */

static int parse_env(box_exec_request *req, const json_t *env) {
    if (!env || json_is_null(env))
        return 0;
    if (!json_is_object(env))
        return fawn_err(FAWN_EINVAL, "'env' must be an object of strings");
    if (json_object_size(env) > BOX_REQUEST_ENV_MAX)
        return fawn_err(FAWN_EINVAL, "'env' has more than %d variables", BOX_REQUEST_ENV_MAX);
    req->env = calloc(json_object_size(env) + 1, sizeof *req->env);
    if (!req->env)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    size_t total = 0;
    const char *name;
    json_t *v;
    json_object_foreach((json_t *)env, name, v) {
        if (!box_env_name_valid(name, strlen(name)))
            return fawn_err(FAWN_EINVAL, "'env' has an invalid variable name '%.64s'", name);
        if (!json_is_string(v) || strlen(json_string_value(v)) != json_string_length(v))
            return fawn_err(FAWN_EINVAL, "'env.%s' must be a string without NUL bytes", name);
        total += strlen(name) + json_string_length(v) + 2;
        if (total > BOX_ENV_BYTES_MAX)
            return fawn_err(FAWN_EINVAL, "'env' is larger than %d bytes", BOX_ENV_BYTES_MAX);
        if (asprintf(&req->env[req->n_env], "%s=%s", name, json_string_value(v)) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
        req->n_env++;
    }
    return 0;
}

static int parse_strings(box_exec_request *req, const json_t *body) {
    int r = fjson_get_string(&req->command, body, "command", true);
    if (r == 0 && (req->command[0] == '\0' || strlen(req->command) > BOX_COMMAND_MAX))
        r = fawn_err(FAWN_EINVAL, "'command' must be 1 to %d bytes", BOX_COMMAND_MAX);
    if (r == 0)
        r = fjson_get_string(&req->session_id, body, "session_id", false);
    if (r == 0 && req->session_id && !fawn_id_valid(req->session_id))
        r = fawn_err(FAWN_EINVAL, "'session_id' must match [A-Za-z0-9_-]{1,64}");
    if (r == 0)
        r = fjson_get_string(&req->cwd, body, "cwd", false);
    if (r == 0 && req->cwd && (req->cwd[0] != '/' || strlen(req->cwd) >= 4096))
        r = fawn_err(FAWN_EINVAL, "'cwd' must be an absolute path");
    return r;
}

int box_exec_request_parse(box_exec_request *req, const json_t *body, const box_exec_ctx *ctx) {
    static const char *const keys[] = {"command",   "session_id",       "env", "cwd",
                                       "timeout_s", "max_output_bytes", NULL};
    memset(req, 0, sizeof *req);
    int64_t timeout = 0, max_out = 0;
    int r = fjson_check_keys(body, keys);
    if (r == 0)
        r = parse_strings(req, body);
    if (r == 0)
        r = fjson_get_int(&timeout, body, "timeout_s", false, 1, ctx->cfg.max_timeout_s);
    if (r == 0)
        r = fjson_get_int(&max_out, body, "max_output_bytes", false, BOX_OUTPUT_MIN,
                          (int64_t)ctx->cfg.max_output_bytes);
    if (r == 0)
        r = parse_env(req, json_object_get(body, "env"));
    req->timeout_s = (uint32_t)timeout;
    req->max_output_bytes = (uint64_t)max_out;
    return r;
}

/* ---- launching ---- */

/* Bash builtins and keywords: a command starting with one needs the shell. */
static const char *const shell_words[] = {
    "!",         ".",        ":",       "[",       "[[",     "alias",   "bg",       "bind",
    "break",     "builtin",  "caller",  "case",    "cd",     "command", "compgen",  "complete",
    "compopt",   "continue", "coproc",  "declare", "dirs",   "disown",  "do",       "done",
    "echo",      "elif",     "else",    "enable",  "esac",   "eval",    "exec",     "exit",
    "export",    "false",    "fc",      "fg",      "fi",     "for",     "function", "getopts",
    "hash",      "help",     "history", "if",      "in",     "jobs",    "kill",     "let",
    "local",     "logout",   "mapfile", "popd",    "printf", "pushd",   "pwd",      "read",
    "readarray", "readonly", "return",  "select",  "set",    "shift",   "shopt",    "source",
    "suspend",   "test",     "then",    "time",    "times",  "trap",    "true",     "type",
    "typeset",   "ulimit",   "umask",   "unalias", "unset",  "until",   "wait",     "while",
};

static bool plain_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           strchr("_./,:=+@%-", c) != NULL;
}

/* True when cmd is only words of characters no shell treats specially and
 * its first word is not a shell builtin: then exec'ing the words directly
 * means exactly what `bash -c` would, without starting a shell. */
static bool is_plain_command(const char *cmd) {
    bool any = false;
    for (const char *p = cmd; *p; p++) {
        if (*p == ' ')
            continue;
        if (!plain_char(*p))
            return false;
        any = true;
    }
    if (!any)
        return false;
    while (*cmd == ' ')
        cmd++;
    size_t len = strcspn(cmd, " ");
    if (memchr(cmd, '=', len))
        return false;
    for (size_t i = 0; i < ARRAY_LEN(shell_words); i++)
        if (strlen(shell_words[i]) == len && strncmp(cmd, shell_words[i], len) == 0)
            return false;
    return true;
}

static bool overridden(const char *entry, const box_exec_request *req) {
    size_t name_len = strcspn(entry, "=");
    for (size_t j = 0; j < req->n_env; j++)
        if (strncmp(req->env[j], entry, name_len + 1) == 0)
            return true;
    return false;
}

/* Appends the environment of one exec: base entries (the session's, or the
 * box's) that the request does not replace, then the request's, then the
 * empty terminating entry. */
static int append_env(fbuf *b, char *const *base, const box_exec_request *req) {
    int r = 0;
    for (size_t i = 0; r == 0 && base && base[i]; i++)
        if (!overridden(base[i], req))
            r = fbuf_append(b, base[i], strlen(base[i]) + 1);
    for (size_t j = 0; r == 0 && j < req->n_env; j++)
        r = fbuf_append(b, req->env[j], strlen(req->env[j]) + 1);
    return r == 0 ? fbuf_append(b, "", 1) : r;
}

/* Payload of an exec message (see init.h). */
static int build_payload(fbuf *b, const char *cwd, const char *command, bool direct,
                         char *const *base_env, const box_exec_request *req) {
    int r = fbuf_append(b, cwd, strlen(cwd) + 1);
    if (r == 0)
        r = fbuf_append(b, command, strlen(command) + 1);
    if (r == 0 && direct) {
        char *words = strdup(command), *save = NULL;
        if (!words)
            return fawn_err(FAWN_ENOMEM, "out of memory");
        for (char *w = strtok_r(words, " ", &save); w && r == 0; w = strtok_r(NULL, " ", &save))
            r = fbuf_append(b, w, strlen(w) + 1);
        free(words);
    }
    if (r == 0)
        r = fbuf_append(b, "", 1);
    if (r == 0)
        r = append_env(b, base_env, req);
    return r < 0 ? fawn_err(FAWN_E2BIG, "command and environment are too large") : 0;
}

/* Forks an init as PID 1 of a new PID namespace. clone3 is used directly
 * (not fork) so the namespace does not touch the calling thread's
 * pid_for_children and the pidfd arrives atomically; the child therefore
 * runs without libc's fork handlers, and box_init_main never allocates. */
static int start_init(box_exec_ctx *ctx, session *s) {
    int r = box_exec_prepare(ctx);
    if (r < 0)
        return r;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "socketpair");
    int pidfd = -1;
    struct clone_args args = {
        .flags = CLONE_NEWPID | CLONE_PIDFD,
        .pidfd = (uint64_t)(uintptr_t)&pidfd,
        .exit_signal = SIGCHLD,
    };
    long pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid < 0) {
        int e = errno;
        close(sv[0]);
        close(sv[1]);
        return fawn_err_sys(FAWN_EIO, e, "clone3(CLONE_NEWPID)");
    }
    if (pid == 0)
        box_init_main(&ctx->init_setup, sv[1]);
    close(sv[1]);
    pthread_mutex_lock(&ctx->mu);
    s->init_pid = (pid_t)pid;
    s->init_pidfd = pidfd;
    s->ctl_fd = sv[0];
    if (ctx->stopping || s->kill_pending) /* its command ends killed */
        pidfd_send_signal(pidfd, SIGKILL, NULL, 0);
    pthread_mutex_unlock(&ctx->mu);
    return 0;
}

typedef struct pipes {
    int out[2], err[2], state[2];
} pipes;

/* Sends an exec message: the pipes (and the state pipe of a session's
 * shell), the payload inline when it is small, else in a memfd. */
static int send_job(session *s, uint32_t mode, const fbuf *payload, const pipes *p) {
    bool inline_payload = payload->len <= INIT_INLINE_MAX;
    _cleanup_close_ int memfd = -1;
    if (!inline_payload) {
        memfd = memfd_create("fawn-exec", MFD_CLOEXEC);
        if (memfd < 0)
            return fawn_err_sys(FAWN_EIO, errno, "memfd_create");
        int r = fawn_write_all(memfd, payload->data, payload->len);
        if (r < 0)
            return r;
    }
    bool has_state = p->state[1] >= 0;
    int fds[4] = {p->out[1], p->err[1]};
    uint32_t n = 2;
    if (has_state)
        fds[n++] = p->state[1];
    if (!inline_payload)
        fds[n++] = memfd;
    init_exec_msg m = {.magic = INIT_MSG_MAGIC,
                       .mode = mode,
                       .n_fds = n,
                       .payload_len = (uint32_t)payload->len,
                       .inline_payload = inline_payload,
                       .has_state = has_state};
    char cbuf[CMSG_SPACE(sizeof fds)];
    memset(cbuf, 0, sizeof cbuf);
    struct iovec iov[2] = {
        {.iov_base = &m, .iov_len = sizeof m},
        {.iov_base = payload->data, .iov_len = inline_payload ? payload->len : 0}};
    struct msghdr mh = {.msg_iov = iov,
                        .msg_iovlen = 2,
                        .msg_control = cbuf,
                        .msg_controllen = CMSG_SPACE(n * sizeof(int))};
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    ssize_t expect = (ssize_t)(sizeof m + iov[1].iov_len);
    if (sendmsg(s->ctl_fd, &mh, MSG_NOSIGNAL) != expect)
        return fawn_err_sys(FAWN_EIO, errno, "sending the command to its init");
    return 0;
}

/* ---- waiting ---- */

typedef struct run_state {
    capture out, err;
    fbuf state;
    bool state_overflow;
    bool want_state;              /* a session's shell reports its state on fd_state */
    int64_t deadline_ms;          /* the command's deadline */
    int fd_out, fd_err, fd_state; /* read ends, -1 when closed */
    bool have_status;
    init_status_msg status;
    bool init_gone;
} run_state;

/* Reads at most this many chunks per wakeup, so a command that writes
 * without pause cannot keep the box from checking its deadline. */
#define PUMP_MAX_CHUNKS 4

/* Reads what is available on *fd (closing it at EOF) into cap, or into
 * state when cap is NULL; a state over STATE_MAX_BYTES is marked overflowed. */
static void pump(run_state *st, int *fd, capture *cap) {
    char buf[READ_CHUNK];
    for (int i = 0; i < PUMP_MAX_CHUNKS; i++) {
        ssize_t n = read(*fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno == EAGAIN)
            return;
        if (n <= 0) {
            close(*fd);
            *fd = -1;
            return;
        }
        if (cap)
            capture_add(cap, buf, (size_t)n);
        else if (!st->state_overflow && fbuf_append(&st->state, buf, (size_t)n) < 0)
            st->state_overflow = true;
    }
}

static void pump_all(run_state *st) {
    if (st->fd_out >= 0)
        pump(st, &st->fd_out, &st->out);
    if (st->fd_err >= 0)
        pump(st, &st->fd_err, &st->err);
    if (st->fd_state >= 0)
        pump(st, &st->fd_state, NULL);
}

static void read_status(run_state *st, int ctl) {
    init_status_msg m;
    ssize_t n = recv(ctl, &m, sizeof m, MSG_DONTWAIT);
    if (n == (ssize_t)sizeof m && m.magic == INIT_MSG_MAGIC) {
        st->status = m;
        st->have_status = true;
    } else if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
        st->init_gone = true;
    }
}

enum wait_outcome { WAIT_DONE, WAIT_TIMEOUT, WAIT_INIT_DIED };

static enum wait_outcome wait_command(run_state *st, const session *s, int64_t deadline_ms) {
    while (!st->have_status) {
        struct pollfd p[5] = {
            {.fd = st->fd_out, .events = POLLIN},    {.fd = st->fd_err, .events = POLLIN},
            {.fd = st->fd_state, .events = POLLIN},  {.fd = s->ctl_fd, .events = POLLIN},
            {.fd = s->init_pidfd, .events = POLLIN},
        };
        int64_t left = deadline_ms - fawn_now_ms();
        if (left <= 0)
            return WAIT_TIMEOUT;
        int r = poll(p, 5, left > 60000 ? 60000 : (int)left);
        if (r < 0 && errno != EINTR)
            return WAIT_INIT_DIED;
        pump_all(st);
        if (p[3].revents)
            read_status(st, s->ctl_fd);
        if (!st->have_status && (st->init_gone || p[4].revents))
            return WAIT_INIT_DIED;
    }
    pump_all(st); /* everything the command wrote before exiting is in the pipes */
    return WAIT_DONE;
}

/* ---- session state ---- */

static bool state_entry_kept(const char *entry) {
    static const char *const dropped[] = {"_=", "SHLVL=", "PWD="};
    for (size_t i = 0; i < ARRAY_LEN(dropped); i++)
        if (strncmp(entry, dropped[i], strlen(dropped[i])) == 0)
            return false;
    return box_env_name_valid(entry, strcspn(entry, "=")) && strchr(entry, '=');
}

/* Parses "cwd\0NAME=VALUE\0...\0\0" into the session; a partial or
 * malformed dump leaves the session as it was. */
static void session_take_state(session *s, const fbuf *st) {
    const char *p = st->data, *end = st->data + st->len;
    if (!p || st->len < 3 || end[-1] != '\0' || end[-2] != '\0' || p[0] != '/')
        return;
    char **env = calloc(BOX_ENV_MAX + 1, sizeof *env);
    char *cwd = strdup(p);
    size_t n = 0;
    for (p += strlen(p) + 1; env && cwd && p < end && *p; p += strlen(p) + 1)
        if (n < BOX_ENV_MAX && state_entry_kept(p) && !(env[n++] = strdup(p)))
            goto fail;
    if (!env || !cwd)
        goto fail;
    free(s->cwd);
    box_env_free(s->env);
    s->cwd = cwd;
    s->env = env;
    return;
fail:
    free(cwd);
    box_env_free(env);
}

/* ---- running ---- */

static bool init_alive(const session *s) {
    struct pollfd p = {.fd = s->init_pidfd, .events = POLLIN};
    return s->init_pid && poll(&p, 1, 0) == 0;
}

/* A one-shot execution reuses the parked init when there is one: its
 * namespace held nothing but the init when the last command ended, and
 * commands cannot change the init or its mounts, so it is as clean as a new
 * one. Called with ctx->mu held. */
static session *oneshot_take(box_exec_ctx *ctx, session **stale) {
    session *s = ctx->spare;
    ctx->spare = NULL;
    if (s && init_alive(s))
        return s;
    *stale = s;
    return session_alloc("oneshot", false);
}

static int session_acquire(session **out, box_exec_ctx *ctx, const char *id) {
    session *stale = NULL;
    pthread_mutex_lock(&ctx->mu);
    if (ctx->stopping) {
        pthread_mutex_unlock(&ctx->mu);
        return fawn_err(FAWN_EBUSY, "the box is stopping");
    }
    session *s = id ? session_find(ctx, id) : oneshot_take(ctx, &stale);
    int r = 0;
    if (!s)
        r = id ? fawn_err(FAWN_ENOENT, "no such session: %s", id) : fawn_err(FAWN_ENOMEM, "oom");
    else if (s->busy)
        r = fawn_err(FAWN_EBUSY, "session %s is already running a command", id);
    if (r == 0) {
        s->busy = true;
        if (!s->persistent) { /* listed while it runs, so a stop can reach it */
            s->next = ctx->oneshots;
            ctx->oneshots = s;
        }
        *out = s;
    }
    pthread_mutex_unlock(&ctx->mu);
    session_free(stale);
    /* A session whose init was killed (a kill request, the OOM killer)
     * starts a new one, keeping its state. */
    if (r == 0 && (*out)->persistent && (*out)->init_pid && !init_alive(*out))
        init_forget(ctx, *out);
    return r;
}

static void oneshot_unlink(box_exec_ctx *ctx, session *s) {
    for (session **pp = &ctx->oneshots; *pp; pp = &(*pp)->next) {
        if (*pp == s) {
            *pp = s->next;
            s->next = NULL;
            return;
        }
    }
}

static void session_release(box_exec_ctx *ctx, session *s) {
    pthread_mutex_lock(&ctx->mu);
    s->busy = false;
    s->kill_pending = false;
    if (!s->persistent)
        oneshot_unlink(ctx, s);
    bool park = !s->persistent && s->init_pid && !ctx->spare;
    bool drop = (!s->persistent && !park) || s->deleted;
    if (park)
        ctx->spare = s;
    if (s->persistent && s->deleted)
        session_unlink(ctx, s);
    pthread_mutex_unlock(&ctx->mu);
    if (drop)
        session_free(s);
}

static void init_kill(const session *s) {
    if (s && s->init_pid)
        pidfd_send_signal(s->init_pidfd, SIGKILL, NULL, 0);
}

void box_exec_stop(box_exec_ctx *ctx) {
    pthread_mutex_lock(&ctx->mu);
    ctx->stopping = true;
    for (session *s = ctx->sessions; s; s = s->next)
        init_kill(s);
    for (session *s = ctx->oneshots; s; s = s->next)
        init_kill(s);
    init_kill(ctx->spare);
    for (lingering *l = ctx->lingering; l; l = l->next)
        pidfd_send_signal(l->pidfd, SIGKILL, NULL, 0);
    pthread_mutex_unlock(&ctx->mu);
}

void box_exec_trim(box_exec_ctx *ctx) {
    pthread_mutex_lock(&ctx->mu);
    session *spare = ctx->spare;
    ctx->spare = NULL;
    pthread_mutex_unlock(&ctx->mu);
    session_free(spare);
}

static void pipes_close(pipes *p) {
    int *all[] = {p->out, p->err, p->state};
    for (size_t i = 0; i < ARRAY_LEN(all); i++)
        for (int k = 0; k < 2; k++)
            if (all[i][k] >= 0)
                close(steal_fd(all[i][k]));
}

static int pipes_open(pipes *p, bool with_state) {
    *p = (pipes){{-1, -1}, {-1, -1}, {-1, -1}};
    if (pipe2(p->out, O_CLOEXEC) < 0 || pipe2(p->err, O_CLOEXEC) < 0 ||
        (with_state && pipe2(p->state, O_CLOEXEC) < 0)) {
        int e = errno;
        pipes_close(p);
        return fawn_err_sys(FAWN_EIO, e, "pipe");
    }
    fcntl(p->out[0], F_SETFL, O_NONBLOCK);
    fcntl(p->err[0], F_SETFL, O_NONBLOCK);
    if (with_state)
        fcntl(p->state[0], F_SETFL, O_NONBLOCK);
    return 0;
}

/* True when the command runs without a shell: plain words (see
 * is_plain_command). In a session, only when the request sets neither cwd nor
 * variables: then the command cannot change the session's state (a program
 * cannot change its parent shell's cwd or variables, and plain words hold no
 * builtin, assignment or background job), so there is none to read back and
 * the session stays as it was. Under a shell a request's cwd and variables
 * become part of the state the shell reports; such a command still runs
 * under one. */
static bool run_direct(const session *s, const box_exec_request *req) {
    if (s->persistent && (req->cwd || req->n_env))
        return false;
    return is_plain_command(req->command);
}

/* Starts the command: init (if needed), then the exec message. */
static int launch(box_exec_ctx *ctx, session *s, const box_exec_request *req, pipes *p,
                  bool direct) {
    uint32_t mode = direct ? INIT_RUN_DIRECT : s->persistent ? INIT_RUN_SESSION : INIT_RUN_SHELL;
    const char *cwd = req->cwd ? req->cwd : s->cwd ? s->cwd : DEFAULT_CWD;
    fbuf payload = {.limit = BOX_COMMAND_MAX + 2 * BOX_ENV_BYTES_MAX + 8192};
    int r = build_payload(&payload, cwd, req->command, direct, s->env ? s->env : ctx->cfg.base_env,
                          req);
    if (r == 0 && s->init_pid == 0)
        r = start_init(ctx, s);
    if (r == 0)
        r = send_job(s, mode, &payload, p);
    fbuf_free(&payload);
    return r;
}

static json_t *reply_for(run_state *st, enum wait_outcome outcome, bool kill_confirmed,
                         int64_t start_ms, const session *s) {
    const char *status = "completed", *error = NULL;
    int exit_code = 0;
    if (outcome == WAIT_TIMEOUT) {
        status = kill_confirmed ? "timeout" : "error";
        exit_code = 124;
        if (!kill_confirmed)
            error = "the command timed out and its termination could not be confirmed";
    } else if (outcome == WAIT_INIT_DIED) {
        status = "killed";
        exit_code = 137;
    } else if (st->status.spawn_errno) {
        status = "error";
        exit_code = 126;
        error = strerror(st->status.spawn_errno);
    } else if (WIFSIGNALED(st->status.wait_status)) {
        status = "killed";
        exit_code = 128 + WTERMSIG(st->status.wait_status);
    } else {
        exit_code = WEXITSTATUS(st->status.wait_status);
    }
    bool truncated = false;
    json_t *out = capture_render(&st->out, &truncated);
    json_t *err = capture_render(&st->err, &truncated);
    json_t *reply = json_pack("{s:s, s:i, s:o*, s:o*, s:b, s:I}", "status", status, "exit_code",
                              exit_code, "stdout", out, "stderr", err, "truncated", truncated,
                              "duration_ms", (json_int_t)(fawn_now_ms() - start_ms));
    if (reply && s->persistent)
        json_object_set_new(reply, "session_id", json_string(s->id));
    if (reply && error)
        json_object_set_new(reply, "error", json_string(error));
    return reply;
}

/* Hands a one-shot init whose namespace still has processes over to the
 * lingering list (its channel is closed: it exits once they are gone). */
static void linger(box_exec_ctx *ctx, session *s, int64_t deadline_ms) {
    lingering *l = malloc(sizeof *l);
    if (!l) {
        init_kill_and_confirm(s);
        init_forget(ctx, s);
        return;
    }
    pthread_mutex_lock(&ctx->mu);
    *l = (lingering){.pidfd = s->init_pidfd, .deadline_ms = deadline_ms};
    close(s->ctl_fd);
    s->init_pid = 0;
    s->init_pidfd = s->ctl_fd = -1;
    l->next = ctx->lingering;
    ctx->lingering = l;
    pthread_mutex_unlock(&ctx->mu);
}

void box_exec_reap(box_exec_ctx *ctx) {
    int64_t now = fawn_now_ms();
    pthread_mutex_lock(&ctx->mu);
    for (lingering **pp = &ctx->lingering; *pp;) {
        lingering *l = *pp;
        struct pollfd p = {.fd = l->pidfd, .events = POLLIN};
        if (poll(&p, 1, 0) > 0) {
            *pp = l->next;
            close(l->pidfd);
            free(l);
            continue;
        }
        if (now >= l->deadline_ms)
            pidfd_send_signal(l->pidfd, SIGKILL, NULL, 0);
        pp = &l->next;
    }
    pthread_mutex_unlock(&ctx->mu);
}

static enum wait_outcome run_started(box_exec_ctx *ctx, run_state *st, session *s,
                                     uint32_t timeout_s, bool *kill_confirmed) {
    int64_t deadline = fawn_now_ms() + (int64_t)timeout_s * 1000;
    enum wait_outcome outcome = wait_command(st, s, deadline);
    st->deadline_ms = deadline;
    *kill_confirmed = true;
    if (outcome == WAIT_TIMEOUT)
        *kill_confirmed = init_kill_and_confirm(s);
    if (outcome == WAIT_DONE && st->want_state && !st->state_overflow)
        session_take_state(s, &st->state);
    bool keep = outcome == WAIT_DONE && (s->persistent || st->status.namespace_empty);
    if (!keep && outcome == WAIT_DONE && !s->persistent)
        linger(ctx, s, st->deadline_ms);
    else if (!keep)
        init_forget(ctx, s);
    return outcome;
}

/* Hands the read ends to st and closes the box's copies of the write ends,
 * so only the command holds them. */
static void pipes_hand_over(pipes *p, run_state *st) {
    int *write_ends[] = {&p->out[1], &p->err[1], &p->state[1]};
    for (size_t i = 0; i < ARRAY_LEN(write_ends); i++)
        if (*write_ends[i] >= 0)
            close(steal_fd(*write_ends[i]));
    st->fd_out = steal_fd(p->out[0]);
    st->fd_err = steal_fd(p->err[0]);
    st->fd_state = steal_fd(p->state[0]);
}

static void run_state_free(run_state *st) {
    int fds[] = {st->fd_out, st->fd_err, st->fd_state};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        if (fds[i] >= 0)
            close(fds[i]);
    capture_free(&st->out);
    capture_free(&st->err);
    fbuf_free(&st->state);
}

int box_exec_run(json_t **out, box_exec_ctx *ctx, const box_exec_request *req) {
    *out = NULL;
    session *s = NULL;
    int r = session_acquire(&s, ctx, req->session_id);
    if (r < 0)
        return r;
    int64_t start = fawn_now_ms();
    uint64_t limit = req->max_output_bytes ? req->max_output_bytes : ctx->cfg.max_output_bytes;
    run_state st = {
        .state = {.limit = STATE_MAX_BYTES}, .fd_out = -1, .fd_err = -1, .fd_state = -1};
    bool direct = run_direct(s, req);
    st.want_state = s->persistent && !direct;
    pipes p;
    r = pipes_open(&p, st.want_state);
    capture_init(&st.out, limit);
    capture_init(&st.err, limit);
    if (r == 0)
        r = launch(ctx, s, req, &p, direct);
    if (r == 0) {
        pipes_hand_over(&p, &st);
        bool confirmed;
        uint32_t timeout = req->timeout_s ? req->timeout_s : ctx->cfg.default_timeout_s;
        enum wait_outcome outcome = run_started(ctx, &st, s, timeout, &confirmed);
        if (!(*out = reply_for(&st, outcome, confirmed, start, s)))
            r = fawn_err(FAWN_ENOMEM, "out of memory building the reply");
    } else if (s->init_pid) {
        init_kill_and_confirm(s);
        init_forget(ctx, s);
    }
    pipes_close(&p);
    run_state_free(&st);
    session_release(ctx, s);
    return r;
}
