/* Running one brokered call: the CLI's fixed binary, no shell, cwd "/", an
 * environment made only of its configured entries (credentials read from
 * the user's credential directory), its own process group, killed on
 * timeout, on the lease's end and when the broker stops. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "broker/broker_internal.h"

/* How long output is still read after the CLI exited, from processes it
 * left behind holding its stdout or stderr: a moment for a last write. */
#define BROKER_EXIT_GRACE_MS 500

static void refuse(run_result *out, const char *why) {
    snprintf(out->refusal, sizeof out->refusal, "%s", why);
    out->exit_code = BROKER_EXIT_REFUSED;
    fbuf_free(&out->err);
    if (fbuf_printf(&out->err, "fawn broker: %s\n", out->refusal) < 0)
        log_debug("broker", "refusal message not kept");
}

/* Opens home/users/<user>/credentials/<cli> one component at a time, no symlinks. */
static int credentials_open(int *out, const char *home, const char *user, const char *cli) {
    const char *parts[] = {"users", user, "credentials", cli};
    int fd = open(home, O_PATH | O_DIRECTORY | O_CLOEXEC);
    for (size_t i = 0; fd >= 0 && i < ARRAY_LEN(parts); i++) {
        int next = openat(fd, parts[i], O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        close(fd);
        fd = next;
    }
    *out = fd;
    return fd < 0 ? fawn_err_sys(FAWN_ENOENT, errno, "credential directory") : 0;
}

static int read_credential(char **value, int dirfd, const char *name) {
    *value = NULL;
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(FAWN_ENOENT, errno, "credential file %s", name);
    size_t len = 0;
    int r = fawn_read_all(value, &len, fd, BROKER_CREDENTIAL_MAX);
    close(fd);
    if (r == 0 && len && (*value)[len - 1] == '\n')
        (*value)[--len] = '\0';
    if (r == 0 && strlen(*value) != len) {
        free(*value);
        *value = NULL;
        r = fawn_err(FAWN_EINVAL, "credential file %s holds a NUL byte", name);
    }
    return r;
}

static char *env_entry(const char *name, const char *value) {
    char *s = NULL;
    return asprintf(&s, "%s=%s", name, value) < 0 ? NULL : s;
}

static void env_free(char **env) {
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

/* The CLI's environment: a fixed PATH and HOME, then its entries. */
static int env_build(char ***out, const run_ctx *c) {
    *out = NULL;
    const broker_cli *cli = c->cli;
    char **env = calloc(cli->n_env + 3, sizeof *env);
    _cleanup_close_ int dirfd = -1;
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s/users/%s/credentials/%s", c->home, c->user, cli->name);
    int r = env ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    size_t n = 0;
    if (r == 0 && (env[n++] = strdup("PATH=/usr/local/bin:/usr/bin:/bin")) == NULL)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < cli->n_env; i++) {
        const broker_env *e = &cli->env[i];
        _cleanup_free_ char *value = NULL;
        if (e->kind != BROKER_ENV_VALUE && dirfd < 0)
            r = credentials_open(&dirfd, c->home, c->user, cli->name);
        if (r == 0 && e->kind == BROKER_ENV_FILE)
            r = read_credential(&value, dirfd, e->value);
        if (r == 0)
            r = (env[n++] = env_entry(e->name, e->kind == BROKER_ENV_DIR ? dir
                                               : value                   ? value
                                                                         : e->value))
                    ? 0
                    : fawn_err(FAWN_ENOMEM, "out of memory");
    }
    if (r < 0) {
        env_free(env);
        return r;
    }
    *out = env;
    return 0;
}

typedef struct proc {
    pid_t pid;
    int in, out, err; /* our ends, -1 once closed */
    int pidfd;        /* readable once it exited (not reaped: its group id stays its own) */
} proc;

/* Starts the CLI in a process group of its own, its standard streams on
 * the given descriptors, with the default signal dispositions and mask.
 * Returns 0 or an errno value (posix_spawn's convention). */
static int exec_cli(pid_t *pid, const run_ctx *c, char **env, int in, int out, int err) {
    char **argv = calloc(c->req->argc + 2, sizeof *argv);
    if (!argv)
        return ENOMEM;
    argv[0] = c->cli->name;
    for (size_t i = 0; i < c->req->argc; i++)
        argv[i + 1] = c->req->argv[i];
    posix_spawn_file_actions_t fa;
    posix_spawnattr_t attr;
    sigset_t none, all;
    sigemptyset(&none);
    sigfillset(&all);
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_adddup2(&fa, in, 0);
    posix_spawn_file_actions_adddup2(&fa, out, 1);
    posix_spawn_file_actions_adddup2(&fa, err, 2);
    posix_spawn_file_actions_addchdir_np(&fa, "/");
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                        POSIX_SPAWN_SETSIGDEF);
    posix_spawnattr_setpgroup(&attr, 0);
    posix_spawnattr_setsigmask(&attr, &none);
    posix_spawnattr_setsigdefault(&attr, &all);
    int e = posix_spawn(pid, c->cli->binary, &fa, &attr, argv, env);
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
    free(argv);
    return e;
}

static int spawn(proc *p, const run_ctx *c, char **env) {
    int in[2] = {-1, -1}, out[2] = {-1, -1}, err[2] = {-1, -1};
    *p = (proc){.pid = -1, .in = -1, .out = -1, .err = -1, .pidfd = -1};
    int e = pipe2(in, O_CLOEXEC) < 0 || pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0
                ? errno
                : exec_cli(&p->pid, c, env, in[0], out[1], err[1]);
    int *ends[] = {&in[0], &out[1], &err[1]};
    for (size_t i = 0; i < ARRAY_LEN(ends); i++)
        if (*ends[i] >= 0)
            close(*ends[i]);
    p->in = in[1];
    p->out = out[0];
    p->err = err[0];
    if (p->in >= 0)
        fcntl(p->in, F_SETFL, O_NONBLOCK);
    if (e != 0) {
        p->pid = -1;
        return fawn_err_sys(FAWN_EIO, e, "run %s", c->cli->binary);
    }
    p->pidfd = (int)syscall(SYS_pidfd_open, p->pid, 0);
    if (p->pidfd < 0) {
        kill(-p->pid, SIGKILL);
        return fawn_err_sys(FAWN_EIO, errno, "pidfd_open");
    }
    return 0;
}

static void close_fd(int *fd) {
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

/* Reads what fd has into keep (up to BROKER_OUTPUT_MAX; the rest counted
 * and dropped); closes fd at EOF. */
static void drain(int *fd, fbuf *keep, size_t *total, unsigned *flags, unsigned flag) {
    char buf[65536];
    ssize_t n = read(*fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN))
        return;
    if (n <= 0) {
        close_fd(fd);
        return;
    }
    *total += (size_t)n;
    size_t room = BROKER_OUTPUT_MAX - keep->len;
    size_t take = (size_t)n < room ? (size_t)n : room;
    if (take && fbuf_append(keep, buf, take) < 0)
        take = 0;
    if (take < (size_t)n)
        *flags |= flag;
}

/* Why the call must end now, or NULL. */
static const char *must_stop(const run_ctx *c, int64_t deadline, int *code) {
    sbx_holding who;
    if (atomic_load(c->stop)) {
        *code = BROKER_EXIT_REVOKED;
        return "the broker is stopping";
    }
    if (sbx_holding_find(&who, c->m, c->sandbox_id, c->generation) < 0) {
        *code = BROKER_EXIT_REVOKED;
        return "the run's lease on this sandbox ended: the call was killed";
    }
    if (fawn_now_ms() >= deadline) {
        *code = BROKER_EXIT_TIMEOUT;
        return "the command ran past its timeout and was killed";
    }
    return NULL;
}

static void pump(run_result *out, proc *p, const run_ctx *c) {
    size_t fed = 0;
    int64_t deadline = fawn_now_ms() + (int64_t)c->cli->timeout_s * 1000;
    if (c->req->in_len == 0)
        close_fd(&p->in);
    bool exited = false;
    int64_t exited_at = 0;
    while (p->out >= 0 || p->err >= 0 || !exited) {
        /* It exited and left something holding its output: what that
         * writes within the grace is kept, then the group is killed. */
        if (exited && fawn_now_ms() - exited_at >= BROKER_EXIT_GRACE_MS)
            break;
        int code = 0;
        const char *why = must_stop(c, deadline, &code);
        if (why) {
            kill(-p->pid, SIGKILL);
            snprintf(out->refusal, sizeof out->refusal, "%s", why);
            out->exit_code = code;
            break;
        }
        struct pollfd f[4] = {{.fd = p->out, .events = POLLIN},
                              {.fd = p->err, .events = POLLIN},
                              {.fd = p->in, .events = POLLOUT},
                              {.fd = exited ? -1 : p->pidfd, .events = POLLIN}};
        if (poll(f, 4, BROKER_LEASE_POLL_MS) < 0 && errno != EINTR)
            break;
        if (!exited && f[3].revents) {
            exited = true;
            exited_at = fawn_now_ms();
        }
        if (f[0].revents)
            drain(&p->out, &out->out, &out->out_total, &out->flags, BROKER_STDOUT_TRUNCATED);
        if (f[1].revents)
            drain(&p->err, &out->err, &out->err_total, &out->flags, BROKER_STDERR_TRUNCATED);
        if (f[2].revents & (POLLERR | POLLHUP))
            close_fd(&p->in);
        else if (f[2].revents) {
            ssize_t n = write(p->in, c->req->in + fed, c->req->in_len - fed);
            if (n > 0 && (fed += (size_t)n) == c->req->in_len)
                close_fd(&p->in);
            else if (n < 0 && errno != EAGAIN && errno != EINTR)
                close_fd(&p->in);
        }
    }
    close_fd(&p->in);
    close_fd(&p->out);
    close_fd(&p->err);
}

void broker_run(run_result *out, const run_ctx *c) {
    memset(out, 0, sizeof *out);
    out->out.limit = out->err.limit = BROKER_OUTPUT_MAX + 512;
    char **env = NULL;
    int r = env_build(&env, c);
    if (r < 0) {
        char why[200];
        snprintf(why, sizeof why,
                 "no credentials for %s (%s); an operator puts them in "
                 "$FAWN_HOME/users/<user>/credentials/<cli>/",
                 c->cli->name, fawn_errmsg());
        refuse(out, why);
        return;
    }
    proc p;
    r = spawn(&p, c, env);
    env_free(env);
    if (r < 0) {
        refuse(out, fawn_errmsg());
        close_fd(&p.in);
        close_fd(&p.out);
        close_fd(&p.err);
        if (p.pid > 0) /* killed when its pidfd could not be had */
            while (waitpid(p.pid, NULL, 0) < 0 && errno == EINTR) {
            }
        return;
    }
    pump(out, &p, c);
    /* Whatever it left in its group goes too; its leader, not reaped yet,
     * keeps the group's id from being reused meanwhile. */
    kill(-p.pid, SIGKILL);
    close(p.pidfd);
    int status = 0;
    while (waitpid(p.pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (out->refusal[0]) {
        if (fbuf_printf(&out->err, "fawn broker: %s\n", out->refusal) < 0)
            log_debug("broker", "message not kept");
        return;
    }
    out->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void run_result_free(run_result *r) {
    fbuf_free(&r->out);
    fbuf_free(&r->err);
}
