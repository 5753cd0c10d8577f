#include "box/init.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/securebits.h>

#include "box/seccomp.h"

/* Most argv words and environment entries an exec message carries. */
#define INIT_MAX_WORDS 4096
/* Largest payload accepted (command + environment + argv). */
#define INIT_MAX_PAYLOAD (1024 * 1024)
#define DEFAULT_CWD "/mnt/user-data/workspace"

/* Defines the state-saving EXIT trap of a session shell: on exit, bash writes
 * its cwd and every exported variable, NUL-separated, ending with an empty
 * entry, to fd 3. The box parses that (bounded) to carry the session on.
 * The variables are listed without a subshell (a fork per command): the
 * names of the set variables by their first character ("${!A@}" ... in the
 * order `compgen -e` gives), those with the export attribute kept; quoted,
 * so that the command's IFS does not matter, and with nounset off (`local -`
 * restores the options), under which a prefix no variable has fails. */
static const char session_prelude[] =
    "__fawn_state() { local - __fawn_n; builtin set +u; builtin printf '%s\\0' \"$PWD\"; "
    "for __fawn_n in \"${!A@}\" \"${!B@}\" \"${!C@}\" \"${!D@}\" \"${!E@}\" \"${!F@}\" "
    "\"${!G@}\" \"${!H@}\" \"${!I@}\" \"${!J@}\" \"${!K@}\" \"${!L@}\" \"${!M@}\" \"${!N@}\" "
    "\"${!O@}\" \"${!P@}\" \"${!Q@}\" \"${!R@}\" \"${!S@}\" \"${!T@}\" \"${!U@}\" \"${!V@}\" "
    "\"${!W@}\" \"${!X@}\" \"${!Y@}\" \"${!Z@}\" \"${!_@}\" \"${!a@}\" \"${!b@}\" \"${!c@}\" "
    "\"${!d@}\" \"${!e@}\" \"${!f@}\" \"${!g@}\" \"${!h@}\" \"${!i@}\" \"${!j@}\" \"${!k@}\" "
    "\"${!l@}\" \"${!m@}\" \"${!n@}\" \"${!o@}\" \"${!p@}\" \"${!q@}\" \"${!r@}\" \"${!s@}\" "
    "\"${!t@}\" \"${!u@}\" \"${!v@}\" \"${!w@}\" \"${!x@}\" \"${!y@}\" \"${!z@}\"; do "
    "[[ ${!__fawn_n@a} == *x* ]] && builtin printf '%s=%s\\0' \"$__fawn_n\" \"${!__fawn_n}\"; "
    "done; builtin printf '\\0'; } >&3 2>/dev/null\n"
    "trap __fawn_state EXIT\n";

typedef struct exec_job {
    uint32_t mode;
    int fds[4];
    size_t n_fds;
    const char *cwd;
    const char *command;
    char *argv[INIT_MAX_WORDS + 1];
    char *envp[INIT_MAX_WORDS + 1];
    char *payload;  /* inline in the message buffer, or = mapped */
    char *mapped;   /* the payload memfd's mapping, or NULL */
    bool has_state; /* fds[2] is the session state pipe */
    size_t payload_len;
    char *script; /* mmap'd: prelude + command for sessions */
    size_t script_len;
} exec_job;

static _Noreturn void die(const char *what) {
    char line[256];
    int n = snprintf(line, sizeof line, "fawn init: %s: %s\n", what, strerror(errno));
    if (n > 0)
        (void)!write(STDERR_FILENO, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
    _exit(125);
}

static void set_limit(int resource, uint64_t value) {
    if (value == 0)
        return;
    struct rlimit cur;
    if (getrlimit(resource, &cur) < 0)
        return;
    /* Only lowering is possible without CAP_SYS_RESOURCE, and only lowering is wanted. */
    rlim_t v = (rlim_t)value;
    if (cur.rlim_max != RLIM_INFINITY && v > cur.rlim_max)
        v = cur.rlim_max;
    struct rlimit lim = {.rlim_cur = v, .rlim_max = v};
    if (setrlimit(resource, &lim) < 0)
        die("setrlimit");
}

static void drop_privileges(const box_init_setup *s) {
    if (prctl(PR_SET_SECUREBITS, SECBIT_NOROOT | SECBIT_NOROOT_LOCKED | SECBIT_NO_SETUID_FIXUP |
                                     SECBIT_NO_SETUID_FIXUP_LOCKED | SECBIT_KEEP_CAPS_LOCKED |
                                     SECBIT_NO_CAP_AMBIENT_RAISE |
                                     SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED) < 0)
        die("securebits");
    for (int cap = 0; cap <= s->cap_last; cap++)
        if (prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0 && errno != EINVAL)
            die("capbset_drop");
    if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0 && errno != EINVAL)
        die("ambient caps");
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2] = {{0}};
    if (syscall(SYS_capset, &hdr, data) < 0)
        die("capset");
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
        die("no_new_privs");
    int r = box_seccomp_install(s->seccomp);
    if (r < 0) {
        errno = -r;
        die("seccomp");
    }
}

/* Own /proc for this namespace, so commands see only their own processes. */
static void mount_own_proc(void) {
    if (unshare(CLONE_NEWNS) < 0)
        die("unshare mount namespace");
    if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        die("mount /proc");
}

/* Makes the init, and so every command it starts, the OOM killer's first
 * pick, never the box. The init is not dumpable, so its /proc files belong to
 * the host's root: it turns dumpable for this one write, while nothing else
 * runs in its namespace and no command can see it. */
static void raise_oom_score(void) {
    prctl(PR_SET_DUMPABLE, 1, 0, 0, 0);
    int fd = open("/proc/self/oom_score_adj", O_WRONLY | O_CLOEXEC);
    if (fd >= 0) {
        (void)!write(fd, "1000", 4);
        close(fd);
    }
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

static int setup_signals(void) {
    struct sigaction dfl = {.sa_handler = SIG_DFL};
    for (int sig = 1; sig < NSIG; sig++)
        if (sig != SIGKILL && sig != SIGSTOP)
            sigaction(sig, &dfl, NULL);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_SETMASK, &set, NULL);
    return signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
}

/* Splits the payload into cwd, command, argv and envp. Returns 0 or -1. */
static int parse_payload(exec_job *j) {
    char *p = j->payload, *end = j->payload + j->payload_len;
    char **lists[2] = {j->argv, j->envp};
    if (j->payload_len == 0 || end[-1] != '\0')
        return -1;
    j->cwd = p;
    p += strlen(p) + 1;
    if (p >= end)
        return -1;
    j->command = p;
    p += strlen(p) + 1;
    for (int l = 0; l < 2; l++) {
        size_t n = 0;
        for (;;) {
            if (p >= end || n >= INIT_MAX_WORDS)
                return -1;
            size_t len = strlen(p);
            char *word = p;
            p += len + 1;
            if (len == 0)
                break;
            lists[l][n++] = word;
        }
        lists[l][n] = NULL;
    }
    return 0;
}

static int recv_job(exec_job *j, int ctl, char *inline_buf) {
    init_exec_msg m;
    char cbuf[CMSG_SPACE(4 * sizeof(int))];
    struct iovec iov[2] = {{.iov_base = &m, .iov_len = sizeof m},
                           {.iov_base = inline_buf, .iov_len = INIT_INLINE_MAX}};
    struct msghdr mh = {
        .msg_iov = iov, .msg_iovlen = 2, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
    ssize_t n = recvmsg(ctl, &mh, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return 0; /* the box closed the channel */
    struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
    size_t fds_needed = 2 + (m.has_state ? 1 : 0) + (m.inline_payload ? 0 : 1);
    if (n < (ssize_t)sizeof m || m.magic != INIT_MSG_MAGIC || !c || c->cmsg_type != SCM_RIGHTS ||
        m.n_fds != fds_needed || c->cmsg_len != CMSG_LEN(m.n_fds * sizeof(int)) ||
        m.payload_len == 0 || m.payload_len > INIT_MAX_PAYLOAD ||
        (m.inline_payload && (size_t)n != sizeof m + m.payload_len))
        return -1;
    j->mode = m.mode;
    j->has_state = m.has_state;
    j->n_fds = m.n_fds;
    memcpy(j->fds, CMSG_DATA(c), m.n_fds * sizeof(int));
    j->payload_len = m.payload_len;
    if (m.inline_payload) {
        j->payload = inline_buf;
    } else {
        j->mapped = mmap(NULL, m.payload_len, PROT_READ | PROT_WRITE, MAP_PRIVATE,
                         j->fds[j->n_fds - 1], 0);
        if (j->mapped == MAP_FAILED) {
            j->mapped = NULL;
            return -1;
        }
        j->payload = j->mapped;
    }
    return parse_payload(j) < 0 ? -1 : 1;
}

static void release_job(exec_job *j) {
    for (size_t i = 0; i < j->n_fds; i++)
        close(j->fds[i]);
    if (j->mapped)
        munmap(j->mapped, j->payload_len);
    if (j->script)
        munmap(j->script, j->script_len);
    memset(j, 0, sizeof *j);
}

static int build_session_script(exec_job *j) {
    size_t plen = sizeof session_prelude - 1, clen = strlen(j->command);
    j->script_len = plen + clen + 2;
    j->script = mmap(NULL, j->script_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                     0);
    if (j->script == MAP_FAILED) {
        j->script = NULL;
        return -1;
    }
    memcpy(j->script, session_prelude, plen);
    memcpy(j->script + plen, j->command, clen);
    j->script[plen + clen] = '\n';
    j->script[plen + clen + 1] = '\0';
    return 0;
}

static const char *shell_path(void) {
    return access("/bin/bash", X_OK) == 0 ? "/bin/bash" : "/bin/sh";
}

/* The command's PATH (not this process's), or the shell's default. */
static const char *path_of(char *const *envp) {
    for (size_t i = 0; envp[i]; i++)
        if (strncmp(envp[i], "PATH=", 5) == 0)
            return envp[i] + 5;
    return "/usr/bin:/bin";
}

/* execve()s path with argv; a file the kernel cannot run (a script without
 * "#!") is run by the shell instead, as bash does. Returns only on failure.
 * The shell's argv is built in static memory, not on the stack of the init
 * (a box thread's small stack, cloned): the vfork child writes it while the
 * init waits, and nothing else uses it. */
static void exec_file(const char *path, char *const *argv, char *const *envp) {
    static char *sh_argv[INIT_MAX_WORDS + 2];
    execve(path, argv, envp);
    if (errno != ENOEXEC)
        return;
    size_t n = 0;
    sh_argv[n++] = (char *)shell_path();
    sh_argv[n++] = (char *)path;
    for (size_t i = 1; argv[i] && n <= INIT_MAX_WORDS; i++)
        sh_argv[n++] = argv[i];
    sh_argv[n] = NULL;
    execve(sh_argv[0], sh_argv, envp);
    errno = ENOEXEC;
}

/* execve()s argv[0] as bash would find it: as given when it holds a '/',
 * else in each directory of the command's PATH. Returns only on failure,
 * with errno ENOENT when nothing was found (EACCES when something was found
 * but could not be run, ENOEXEC when neither it nor the shell for it could
 * be). Allocation-free: runs in a vfork child. */
static void exec_in_path(char *const *argv, char *const *envp) {
    if (strchr(argv[0], '/')) {
        exec_file(argv[0], argv, envp);
        return;
    }
    bool denied = false;
    char candidate[PATH_MAX];
    size_t name_len = strlen(argv[0]);
    for (const char *dir = path_of(envp);; dir++) {
        size_t len = strcspn(dir, ":");
        const char *d = len ? dir : "."; /* an empty entry means the cwd */
        size_t dlen = len ? len : 1;
        if (dlen + 1 + name_len < sizeof candidate) {
            memcpy(candidate, d, dlen);
            candidate[dlen] = '/';
            memcpy(candidate + dlen + 1, argv[0], name_len + 1);
            exec_file(candidate, argv, envp);
            if (errno == ENOEXEC)
                return;
            denied |= errno == EACCES;
        }
        dir += len;
        if (*dir == '\0')
            break;
    }
    errno = denied ? EACCES : ENOENT;
}

/* Sets PWD in envp to the cwd, as bash exports it to what it runs (the
 * physical path: the box passes no PWD to a shell either). The entry is
 * static and envp has room for one more entry (INIT_MAX_WORDS + 1 slots):
 * the vfork child writes both while the init waits, allocation-free. */
static void env_put_pwd(char **envp) {
    static char entry[sizeof "PWD=" + PATH_MAX];
    memcpy(entry, "PWD=", 4);
    if (!getcwd(entry + 4, sizeof entry - 4))
        return;
    size_t i = 0;
    while (envp[i] && strncmp(envp[i], "PWD=", 4) != 0)
        i++;
    if (!envp[i] && i >= INIT_MAX_WORDS)
        return;
    if (!envp[i])
        envp[i + 1] = NULL;
    envp[i] = entry;
}

/* In the command's process: never returns. */
static _Noreturn void exec_command(exec_job *j) {
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    setsid();
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull < 0 || dup2(devnull, 0) < 0 || dup2(j->fds[0], 1) < 0 || dup2(j->fds[1], 2) < 0)
        _exit(125);
    int keep = 3;
    if (j->has_state) {
        if (dup2(j->fds[2], 3) < 0)
            _exit(125);
        keep = 4;
    }
    syscall(SYS_close_range, keep, ~0U, 0);
    if (chdir(j->cwd) < 0 && chdir(DEFAULT_CWD) < 0 && chdir("/") < 0)
        _exit(125);
    if (j->mode == INIT_RUN_DIRECT) {
        env_put_pwd(j->envp);
        exec_in_path(j->argv, j->envp);
        int e = errno;
        dprintf(2, "%s: %s\n", j->argv[0], e == ENOENT ? "command not found" : strerror(e));
        _exit(e == ENOENT ? 127 : 126);
    }
    const char *sh = shell_path();
    const char *script = j->mode == INIT_RUN_SESSION ? j->script : j->command;
    char *argv[] = {(char *)sh, "--noprofile", "--norc", "-c", (char *)script, NULL};
    char *sh_argv[] = {(char *)sh, "-c", (char *)script, NULL};
    execve(sh, strcmp(sh, "/bin/bash") == 0 ? argv : sh_argv, j->envp);
    dprintf(2, "fawn: cannot run %s: %s\n", sh, strerror(errno));
    _exit(126);
}

/* vfork: the init was cloned without libc's fork handlers, so it must not
 * go through fork(); the child only makes system calls before execve. */
static pid_t start_job(exec_job *j) {
    if (j->mode == INIT_RUN_SESSION && build_session_script(j) < 0)
        return -1;
    pid_t pid = vfork();
    if (pid == 0)
        exec_command(j);
    return pid;
}

static void send_status(int ctl, int wait_status, int spawn_errno, bool namespace_empty) {
    init_status_msg m = {.magic = INIT_MSG_MAGIC,
                         .wait_status = wait_status,
                         .spawn_errno = spawn_errno,
                         .namespace_empty = namespace_empty};
    (void)!send(ctl, &m, sizeof m, MSG_NOSIGNAL);
}

/* Reaps every exited child and reports the command's status once it has
 * exited. Returns false when no child is left: every process of the
 * namespace is a descendant of the init (orphans are reparented to it), so
 * the namespace then holds nothing but the init. */
static bool reap(int ctl, pid_t *command) {
    bool exited = false, alive = true;
    int status = 0;
    for (;;) {
        int st;
        pid_t pid = waitpid(-1, &st, WNOHANG);
        if (pid <= 0) {
            alive = !(pid < 0 && errno == ECHILD);
            break;
        }
        if (pid == *command) {
            *command = 0;
            status = st;
            exited = true;
        }
    }
    if (exited)
        send_status(ctl, status, 0, !alive);
    return alive;
}

static void serve(int ctl, int sigfd) {
    /* Inline payloads land here (mapped once: an init never mallocs). */
    char *inline_buf = mmap(NULL, INIT_INLINE_MAX, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (inline_buf == MAP_FAILED)
        die("mmap");
    bool ctl_open = true;
    pid_t command = 0;
    exec_job job = {0};
    for (;;) {
        struct pollfd p[2] = {{.fd = sigfd, .events = POLLIN},
                              {.fd = ctl_open && command == 0 ? ctl : -1, .events = POLLIN}};
        if (poll(p, 2, -1) < 0 && errno != EINTR)
            die("poll");
        if (p[0].revents) {
            struct signalfd_siginfo si;
            while (read(sigfd, &si, sizeof si) > 0) {
            }
            bool alive = reap(ctl, &command);
            if (!alive && !ctl_open)
                _exit(0);
        }
        if (p[1].revents) {
            int r = recv_job(&job, ctl, inline_buf);
            if (r == 0) {
                ctl_open = false;
                close(ctl);
                if (!reap(ctl, &command))
                    _exit(0);
                continue;
            }
            command = r > 0 ? start_job(&job) : -1;
            int e = r > 0 ? errno : EPROTO;
            release_job(&job); /* the command holds its own copies now */
            if (command < 0) {
                send_status(ctl, 0, e, false);
                command = 0;
            }
        }
    }
}

_Noreturn void box_init_main(const box_init_setup *setup, int ctl_fd) {
    /* Keep only stdio and the control channel: nothing of the box's
     * (its listening socket, other sessions' channels) stays reachable. */
    if (dup2(ctl_fd, 3) < 0)
        die("dup2");
    syscall(SYS_close_range, 4, ~0U, 0);
    ctl_fd = 3;
    mount_own_proc();
    raise_oom_score();
    int sigfd = setup_signals();
    if (sigfd < 0)
        die("signalfd");
    set_limit(RLIMIT_NOFILE, setup->rlimit_nofile);
    set_limit(RLIMIT_FSIZE, setup->rlimit_fsize);
    set_limit(RLIMIT_NPROC, setup->rlimit_nproc);
    set_limit(RLIMIT_AS, setup->rlimit_as);
    struct rlimit no_core = {0, 0};
    setrlimit(RLIMIT_CORE, &no_core);
    drop_privileges(setup);
    serve(ctl_fd, sigfd);
    _exit(0);
}
