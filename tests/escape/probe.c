/* escape_probe: one sandbox escape attempt per run, made with raw system
 * calls from inside a sandbox. Linked statically so it runs whatever the
 * sandbox's /usr holds.
 *
 *   probe ATTACK [ARGS...]
 *
 * Prints exactly one line, "ATTACK: ...", and exits 0 when the attempt failed
 * as it must, 1 when it succeeded (an isolation failure), 2 on bad usage.
 * Failed attempts print the errno as "errno=N (text)" so a caller can assert
 * the exact reason. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/btrfs.h>
#include <linux/capability.h>
#include <linux/keyctl.h>
#include <linux/fs.h>
#include <linux/perf_event.h>
#include <linux/quota.h>
#include <linux/reboot.h>
#include <linux/sched.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/msg.h>
#include <sys/personality.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* Exit statuses: the attack failed (good), it succeeded (isolation broken). */
#define PROBE_BLOCKED 0
#define PROBE_ESCAPED 1
#define PROBE_USAGE 2

/* Memory is grabbed and touched in chunks this large. */
#define BOMB_CHUNK ((size_t)16 << 20)
/* Upper bound on /proc entries and descriptors walked (a pid namespace of a
 * sandbox is small; this only bounds the loops). */
#define WALK_MAX 4096
/* A connect that neither succeeds nor fails within this is reported as failed. */
#define CONNECT_TIMEOUT_MS 2000
/* Room for "/proc/" + a directory entry name (at most 255 bytes) + a suffix. */
#define PROC_PATH_MAX 320
/* Directory climbs attempted from /proc/self/root: more than any real depth. */
#define CLIMB_DEPTH 64
/* Namespaces that /proc/PID/ns exposes. */
static const char *const ns_names[] = {"mnt", "pid", "net", "user", "uts", "ipc", "cgroup", "time"};

/* Prints "name: errno=N (text)" for a failed call (ret < 0), or SUCCEEDED. */
static int verdict(const char *name, long ret, int err) {
    if (ret < 0) {
        printf("%s: errno=%d (%s)\n", name, err, strerror(err));
        return PROBE_BLOCKED;
    }
    printf("%s: SUCCEEDED (returned %ld)\n", name, ret);
    return PROBE_ESCAPED;
}

#define VERDICT(name, call)                                                                        \
    ({                                                                                             \
        errno = 0;                                                                                 \
        long _ret = (long)(call);                                                                  \
        verdict(name, _ret, errno);                                                                \
    })

static int need(int argc, int n) {
    if (argc >= n)
        return 0;
    printf("usage: missing arguments\n");
    return -1;
}

/* ---- privileged system calls the seccomp filter refuses ---- */

static int do_bpf(int argc, char **argv) {
    union bpf_attr attr;
    memset(&attr, 0, sizeof attr);
    attr.map_type = BPF_MAP_TYPE_ARRAY;
    attr.key_size = 4;
    attr.value_size = 4;
    attr.max_entries = 1;
    return VERDICT("bpf", syscall(SYS_bpf, BPF_MAP_CREATE, &attr, sizeof attr));
}

static int do_perf_event_open(int argc, char **argv) {
    struct perf_event_attr a;
    memset(&a, 0, sizeof a);
    a.type = PERF_TYPE_SOFTWARE;
    a.size = sizeof a;
    a.config = PERF_COUNT_SW_CPU_CLOCK;
    a.disabled = 1;
    a.exclude_kernel = 1;
    a.exclude_hv = 1;
    return VERDICT("perf_event_open", syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
}

static int do_keyctl(int argc, char **argv) {
    int r = VERDICT("keyctl",
                    syscall(SYS_keyctl, KEYCTL_GET_KEYRING_ID, KEY_SPEC_SESSION_KEYRING, 0));
    r |= VERDICT("add_key",
                 syscall(SYS_add_key, "user", "fawn-probe", "x", 1, KEY_SPEC_SESSION_KEYRING));
    r |= VERDICT("request_key",
                 syscall(SYS_request_key, "user", "fawn-probe", NULL, KEY_SPEC_SESSION_KEYRING));
    return r;
}

static int do_userfaultfd(int argc, char **argv) {
    return VERDICT("userfaultfd", syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK));
}

static int do_kexec_load(int argc, char **argv) {
    int r = VERDICT("kexec_load", syscall(SYS_kexec_load, 0UL, 0UL, NULL, 0UL));
    r |= VERDICT("kexec_file_load", syscall(SYS_kexec_file_load, -1, -1, 0UL, "", 0UL));
    return r;
}

static int do_init_module(int argc, char **argv) {
    static const char image[64] = "\177ELF";
    int r = VERDICT("init_module", syscall(SYS_init_module, image, sizeof image, ""));
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    r |= VERDICT("finit_module", syscall(SYS_finit_module, fd, "", 0));
    r |= VERDICT("delete_module", syscall(SYS_delete_module, "ext4", O_NONBLOCK));
    return r;
}

/* The "shocker" attack: open an inode by handle, bypassing path lookup. */
static int do_open_by_handle_at(int argc, char **argv) {
    struct {
        struct file_handle fh;
        unsigned char data[MAX_HANDLE_SZ];
    } h;
    memset(&h, 0, sizeof h);
    int mount_id = 0;
    h.fh.handle_bytes = MAX_HANDLE_SZ;
    int r = VERDICT("name_to_handle_at",
                    syscall(SYS_name_to_handle_at, AT_FDCWD, "/", &h.fh, &mount_id, 0));
    /* inode 2 (an ext4 root), generation 0: what shocker brute-forces from. */
    h.fh.handle_bytes = 8;
    h.fh.handle_type = 1;
    uint32_t ino_gen[2] = {2, 0};
    memcpy(h.fh.f_handle, ino_gen, sizeof ino_gen);
    int root = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    r |= VERDICT("open_by_handle_at", syscall(SYS_open_by_handle_at, root, &h.fh, O_RDONLY));
    return r;
}

/* struct io_uring_params is 120 bytes; zeroed, it asks for defaults. */
static int do_io_uring_setup(int argc, char **argv) {
    uint64_t params[16];
    memset(params, 0, sizeof params);
    return VERDICT("io_uring_setup", syscall(SYS_io_uring_setup, 4, params));
}

static int do_personality(int argc, char **argv) {
    int r = VERDICT("personality", syscall(SYS_personality, PER_LINUX | ADDR_NO_RANDOMIZE));
    r |= VERDICT("personality_exec_data", syscall(SYS_personality, PER_LINUX | READ_IMPLIES_EXEC));
    return r;
}

/* Privileged calls that change the host rather than the sandbox. */
static int do_host_calls(int argc, char **argv) {
    char buf[64];
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    int r = VERDICT("syslog", syscall(SYS_syslog, 3 /* READ_ALL */, buf, sizeof buf));
    r |= VERDICT("clock_settime", syscall(SYS_clock_settime, CLOCK_REALTIME, &now));
    r |= VERDICT("iopl", syscall(SYS_iopl, 3));
    r |= VERDICT("ioperm", syscall(SYS_ioperm, 0x80UL, 1UL, 1));
    r |= VERDICT("reboot", syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
                                   LINUX_REBOOT_CMD_CAD_OFF, NULL));
    r |= VERDICT("acct", syscall(SYS_acct, "/tmp/fawn-probe-acct"));
    r |= VERDICT("swapon", syscall(SYS_swapon, "/dev/null", 0));
    r |= VERDICT("sethostname", sethostname("escaped", 7));
    return r;
}

/* ---- mounts ---- */

static int do_mount_tmpfs(int argc, char **argv) {
    mkdir("/tmp/fawn-probe-mnt", 0755);
    return VERDICT("mount_tmpfs", mount("none", "/tmp/fawn-probe-mnt", "tmpfs", 0, "size=1m"));
}

static int do_mount_proc(int argc, char **argv) {
    mkdir("/tmp/fawn-probe-proc", 0755);
    return VERDICT("mount_proc", mount("proc", "/tmp/fawn-probe-proc", "proc", 0, NULL));
}

static int do_mount_bind(int argc, char **argv) {
    mkdir("/tmp/fawn-probe-bind", 0755);
    return VERDICT("mount_bind", mount("/", "/tmp/fawn-probe-bind", NULL, MS_BIND | MS_REC, NULL));
}

static int do_remount_rw(int argc, char **argv) {
    int r = VERDICT("remount_root_rw", mount(NULL, "/", NULL, MS_REMOUNT | MS_BIND, NULL));
    r |= VERDICT("remount_usr_rw", mount(NULL, "/usr", NULL, MS_REMOUNT | MS_BIND, NULL));
    struct mount_attr attr = {.attr_clr = MOUNT_ATTR_RDONLY};
    r |= VERDICT("mount_setattr_rw",
                 syscall(SYS_mount_setattr, AT_FDCWD, "/", 0, &attr, sizeof attr));
    return r;
}

static int do_new_mount_api(int argc, char **argv) {
    int r = VERDICT("fsopen", syscall(SYS_fsopen, "tmpfs", 0));
    r |= VERDICT("open_tree", syscall(SYS_open_tree, AT_FDCWD, "/", OPEN_TREE_CLONE));
    r |= VERDICT("move_mount", syscall(SYS_move_mount, AT_FDCWD, "/mnt/user-data/workspace",
                                       AT_FDCWD, "/tmp", 0));
    return r;
}

static int do_umount(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    return VERDICT("umount", umount2(argv[2], MNT_DETACH));
}

/* ---- namespaces and roots ---- */

static const struct {
    const char *name;
    int flag;
} ns_flags[] = {
    {"user", CLONE_NEWUSER},     {"mnt", CLONE_NEWNS},    {"pid", CLONE_NEWPID},
    {"net", CLONE_NEWNET},       {"ipc", CLONE_NEWIPC},   {"uts", CLONE_NEWUTS},
    {"cgroup", CLONE_NEWCGROUP}, {"time", CLONE_NEWTIME},
};

/* One line: "unshare: user=E mnt=E ..." with each errno (0 = it worked). */
static int do_unshare(int argc, char **argv) {
    int escaped = 0;
    printf("unshare:");
    for (size_t i = 0; i < sizeof ns_flags / sizeof ns_flags[0]; i++) {
        errno = 0;
        int r = unshare(ns_flags[i].flag);
        printf(" %s=%d", ns_flags[i].name, r < 0 ? errno : 0);
        escaped |= r == 0;
    }
    printf("\n");
    return escaped ? PROBE_ESCAPED : PROBE_BLOCKED;
}

static int do_clone_newuser(int argc, char **argv) {
    errno = 0;
    long pid = syscall(SYS_clone, (unsigned long)(CLONE_NEWUSER | CLONE_NEWNS | SIGCHLD), NULL,
                       NULL, NULL, 0UL);
    if (pid == 0)
        _exit(0);
    int e = errno;
    if (pid > 0)
        waitpid((pid_t)pid, NULL, 0);
    int r = verdict("clone_newuser", pid, e);
    struct clone_args args;
    memset(&args, 0, sizeof args);
    args.flags = CLONE_NEWUSER | CLONE_NEWNS;
    args.exit_signal = SIGCHLD;
    errno = 0;
    pid = syscall(SYS_clone3, &args, sizeof args);
    if (pid == 0)
        _exit(0);
    e = errno;
    if (pid > 0)
        waitpid((pid_t)pid, NULL, 0);
    return r | verdict("clone3_newuser", pid, e);
}

/* "setns PID": opens /proc/PID/ns/X and joins it, for every X. One line with
 * the errno of each (of the open when it fails, else of setns). */
static int do_setns(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    int escaped = 0;
    printf("setns %s:", argv[2]);
    for (size_t i = 0; i < sizeof ns_names / sizeof ns_names[0]; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/%s/ns/%s", argv[2], ns_names[i]);
        errno = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        int r = fd < 0 ? -1 : setns(fd, 0);
        printf(" %s=%d", ns_names[i], r < 0 ? errno : 0);
        escaped |= r == 0;
        if (fd >= 0)
            close(fd);
    }
    printf("\n");
    return escaped ? PROBE_ESCAPED : PROBE_BLOCKED;
}

static int do_pivot_root(int argc, char **argv) {
    mkdir("/tmp/fawn-probe-old", 0755);
    return VERDICT("pivot_root", syscall(SYS_pivot_root, "/tmp", "/tmp/fawn-probe-old"));
}

static int do_chroot(int argc, char **argv) {
    mkdir("/tmp/fawn-probe-jail", 0755);
    return VERDICT("chroot", chroot("/tmp/fawn-probe-jail"));
}

static bool same_file(const struct stat *a, const struct stat *b) {
    return a->st_dev == b->st_dev && a->st_ino == b->st_ino;
}

/* Climbs far above /proc/self/root and opens each path given (host paths
 * that must stay unreachable) relative to where it ended up and through
 * /proc/self/root. */
static int do_proc_self_root(int argc, char **argv) {
    struct stat root, here;
    if (stat("/", &root) < 0 || chdir("/proc/self/root") < 0) {
        printf("proc_self_root: setup failed: %s\n", strerror(errno));
        return PROBE_USAGE;
    }
    for (int i = 0; i < CLIMB_DEPTH; i++)
        (void)!chdir("..");
    if (stat(".", &here) < 0 || !same_file(&root, &here)) {
        printf("proc_self_root: SUCCEEDED climbed above the sandbox root\n");
        return PROBE_ESCAPED;
    }
    for (int i = 2; i < argc; i++) {
        char via[4096];
        snprintf(via, sizeof via, "/proc/self/root/../../..%s", argv[i]);
        const char *tries[] = {argv[i] + strspn(argv[i], "/"), via};
        for (size_t t = 0; t < 2; t++) {
            int fd = open(tries[t], O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                printf("proc_self_root: SUCCEEDED opened %s\n", tries[t]);
                return PROBE_ESCAPED;
            }
        }
    }
    printf("proc_self_root: errno=%d (%s) root unchanged, %d paths unreachable\n", ENOENT,
           strerror(ENOENT), argc - 2);
    return PROBE_BLOCKED;
}

/* Everything a command could use to reach PID 1 (its init): each must fail.
 * One line with the errno of each attempt. */
static int do_proc_init(int argc, char **argv) {
    static const char *const opens[] = {"environ", "mem",  "maps", "fd/0",   "fd/1",
                                        "fd/2",    "fd/3", "fd/4", "root/.", "cwd/."};
    static const char *const links[] = {"root", "cwd", "exe", "fd/3"};
    int escaped = 0;
    printf("proc_init:");
    for (size_t i = 0; i < sizeof opens / sizeof opens[0]; i++) {
        char path[64];
        snprintf(path, sizeof path, "/proc/1/%s", opens[i]);
        errno = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
        printf(" open:%s=%d", opens[i], fd < 0 ? errno : 0);
        escaped |= fd >= 0;
        if (fd >= 0)
            close(fd);
    }
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++) {
        char path[64], target[256];
        snprintf(path, sizeof path, "/proc/1/%s", links[i]);
        errno = 0;
        ssize_t n = readlink(path, target, sizeof target);
        printf(" readlink:%s=%d", links[i], n < 0 ? errno : 0);
        escaped |= n >= 0;
    }
    printf("\n");
    return escaped ? PROBE_ESCAPED : PROBE_BLOCKED;
}

static bool numeric(const char *s) {
    if (!*s)
        return false;
    for (; *s; s++)
        if (*s < '0' || *s > '9')
            return false;
    return true;
}

typedef struct walk {
    int procs, roots, fds, escapes;
    struct stat root;
    pid_t self;
    char why[512];
} walk;

/* Counts an escape; the first one's description is kept for the report. */
static void walk_escape(walk *w, const char *what, const char *path, const char *detail) {
    if (w->escapes++ == 0)
        snprintf(w->why, sizeof w->why, "%s %.200s %.200s", what, path, detail);
}

/* /proc/P/root must be this root (or unreachable) and must not lead to any
 * of the given host paths. */
static void walk_root(walk *w, const char *pid, int argc, char **argv) {
    char path[PROC_PATH_MAX], target[256];
    snprintf(path, sizeof path, "/proc/%s/root", pid);
    ssize_t n = readlink(path, target, sizeof target - 1);
    struct stat st;
    if (n < 0 && stat(path, &st) < 0)
        return;
    w->roots++;
    if (n >= 0) {
        target[n] = '\0';
        if (strcmp(target, "/") != 0)
            walk_escape(w, "root link", path, target);
    }
    if (stat(path, &st) == 0 && !same_file(&st, &w->root))
        walk_escape(w, "another root", path, "");
    for (int i = 2; i < argc; i++) {
        char via[4096];
        snprintf(via, sizeof via, "%s%s", path, argv[i]);
        int fd = open(via, O_RDONLY | O_CLOEXEC);
        if (fd >= 0) {
            close(fd);
            walk_escape(w, "opened", via, "");
        }
    }
}

/* Another process's descriptors must not hand out sockets (the box's
 * listening socket, an init's control channel). */
static void walk_fds(walk *w, const char *pid) {
    if (atoi(pid) == w->self)
        return;
    char dir[PROC_PATH_MAX];
    snprintf(dir, sizeof dir, "/proc/%s/fd", pid);
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct dirent *e;
    for (int i = 0; i < WALK_MAX && (e = readdir(d)); i++) {
        if (!numeric(e->d_name))
            continue;
        char path[2 * PROC_PATH_MAX], target[256];
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0)
            continue;
        target[n] = '\0';
        w->fds++;
        if (strncmp(target, "socket:", 7) == 0)
            walk_escape(w, "reachable socket", path, target);
        else if (atoi(pid) == 1)
            walk_escape(w, "init descriptor", path, target);
    }
    closedir(d);
}

static int do_proc_walk(int argc, char **argv) {
    walk w = {.self = getpid()};
    if (stat("/", &w.root) < 0)
        return PROBE_USAGE;
    DIR *d = opendir("/proc");
    if (!d) {
        printf("proc_walk: cannot open /proc: %s\n", strerror(errno));
        return PROBE_USAGE;
    }
    struct dirent *e;
    for (int i = 0; i < WALK_MAX && (e = readdir(d)); i++) {
        if (!numeric(e->d_name))
            continue;
        w.procs++;
        walk_root(&w, e->d_name, argc, argv);
        walk_fds(&w, e->d_name);
    }
    closedir(d);
    if (w.escapes) {
        printf("proc_walk: SUCCEEDED %s (%d escapes)\n", w.why, w.escapes);
        return PROBE_ESCAPED;
    }
    printf("proc_walk: %d processes, %d roots, %d fds checked, 0 escapes\n", w.procs, w.roots,
           w.fds);
    return PROBE_BLOCKED;
}

/* ---- processes ---- */

static int do_ptrace_attach(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    pid_t pid = (pid_t)atoi(argv[2]);
    errno = 0;
    long r = syscall(SYS_ptrace, 16 /* PTRACE_ATTACH */, pid, NULL, NULL);
    int e = errno;
    if (r == 0)
        syscall(SYS_ptrace, 17 /* PTRACE_DETACH */, pid, NULL, NULL);
    int out = verdict("ptrace_attach", r, e);
    errno = 0;
    r = syscall(SYS_ptrace, 0x4206 /* PTRACE_SEIZE */, pid, NULL, NULL);
    e = errno;
    if (r == 0)
        syscall(SYS_ptrace, 17, pid, NULL, NULL);
    return out | verdict("ptrace_seize", r, e);
}

static int do_process_vm_readv(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    char buf[16];
    struct iovec local = {buf, sizeof buf}, remote = {(void *)0x400000, sizeof buf};
    return VERDICT("process_vm_readv",
                   syscall(SYS_process_vm_readv, atoi(argv[2]), &local, 1UL, &remote, 1UL, 0UL));
}

/* Steals descriptor FD of process PID (the init's control socket is fd 3). */
static int do_pidfd_getfd(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    errno = 0;
    long pidfd = syscall(SYS_pidfd_open, atoi(argv[2]), 0);
    if (pidfd < 0)
        return verdict("pidfd_getfd", pidfd, errno);
    return VERDICT("pidfd_getfd", syscall(SYS_pidfd_getfd, (int)pidfd, atoi(argv[3]), 0));
}

static int do_kill(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    return VERDICT("kill", kill((pid_t)atoi(argv[2]), atoi(argv[3])));
}

/* ---- files, devices, terminals ---- */

static int do_read_file(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    errno = 0;
    int fd = open(argv[2], O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return verdict("read_file", -1, errno);
    char buf[64];
    errno = 0;
    ssize_t n = read(fd, buf, sizeof buf);
    int e = errno;
    close(fd);
    return verdict("read_file", n, e);
}

static int do_write_file(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    errno = 0;
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
    if (fd < 0)
        return verdict("write_file", -1, errno);
    const char *data = argc > 3 ? argv[3] : "x";
    errno = 0;
    ssize_t n = write(fd, data, strlen(data));
    int e = errno;
    close(fd);
    return verdict("write_file", n, e);
}

static int do_link(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    return VERDICT("link", link(argv[2], argv[3]));
}

/* "mknod PATH b|c MAJOR MINOR" */
static int do_mknod(int argc, char **argv) {
    if (need(argc, 6) < 0)
        return PROBE_USAGE;
    mode_t type = argv[3][0] == 'b' ? S_IFBLK : S_IFCHR;
    dev_t dev = makedev((unsigned)atoi(argv[4]), (unsigned)atoi(argv[5]));
    return VERDICT("mknod", mknod(argv[2], type | 0666, dev));
}

/* Pushes a character into the input queue of the terminal on fd 0, and of
 * /dev/tty when one opens. The errno reported is fd 0's. */
static int do_tiocsti(int argc, char **argv) {
    char c = '#';
    errno = 0;
    int r = ioctl(0, TIOCSTI, &c);
    int e = errno;
    int tty = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
    if (tty >= 0 && ioctl(tty, TIOCSTI, &c) == 0)
        r = 0;
    if (tty >= 0)
        close(tty);
    return verdict("tiocsti", r, e);
}

static int do_tioclinux(int argc, char **argv) {
    char sub[2] = {6 /* TIOCL_GETSHIFTSTATE */, 0};
    return VERDICT("tioclinux", ioctl(0, TIOCLINUX, sub));
}

/* Writes past RLIMIT_FSIZE with SIGXFSZ ignored: "fsize PATH OFFSET". */
static int do_fsize(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    signal(SIGXFSZ, SIG_IGN);
    int fd = open(argv[2], O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        printf("fsize: cannot create %s: %s\n", argv[2], strerror(errno));
        return PROBE_USAGE;
    }
    errno = 0;
    ssize_t n = pwrite(fd, "x", 1, (off_t)strtoll(argv[3], NULL, 10));
    int e = errno;
    close(fd);
    return verdict("fsize", n, e);
}

/* ---- disk quotas ---- */

/* Makes a btrfs subvolume (and a snapshot of DIR) named NAME in DIR:
 * "btrfs_subvol DIR NAME". A new subvolume would have a qgroup of its own,
 * outside the thread's limit. The errno reported is the first call's. */
static int do_btrfs_subvol(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    int dir = open(argv[2], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0) {
        printf("btrfs_subvol: cannot open %s: %s\n", argv[2], strerror(errno));
        return PROBE_USAGE;
    }
    struct btrfs_ioctl_vol_args v1;
    struct btrfs_ioctl_vol_args_v2 v2;
    memset(&v1, 0, sizeof v1);
    memset(&v2, 0, sizeof v2);
    snprintf(v1.name, sizeof v1.name, "%s", argv[3]);
    snprintf(v2.name, sizeof v2.name, "%s-v2", argv[3]);
    errno = 0;
    int r = ioctl(dir, BTRFS_IOC_SUBVOL_CREATE, &v1);
    int e = errno;
    v2.fd = dir;
    if (ioctl(dir, BTRFS_IOC_SUBVOL_CREATE_V2, &v2) == 0 ||
        ioctl(dir, BTRFS_IOC_SNAP_CREATE_V2, &v2) == 0)
        r = 0;
    v1.fd = dir;
    if (ioctl(dir, BTRFS_IOC_SNAP_CREATE, &v1) == 0)
        r = 0;
    close(dir);
    return verdict("btrfs_subvol", r, e);
}

/* Moves PATH out of its project: "projid PATH ID" sets project ID and
 * clears the inherit flag. */
static int do_projid(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        printf("projid: cannot open %s: %s\n", argv[2], strerror(errno));
        return PROBE_USAGE;
    }
    struct fsxattr fa;
    memset(&fa, 0, sizeof fa);
    errno = 0;
    int r = ioctl(fd, FS_IOC_FSGETXATTR, &fa);
    if (r == 0) {
        fa.fsx_projid = (unsigned)strtoul(argv[3], NULL, 10);
        fa.fsx_xflags &= ~(unsigned)FS_XFLAG_PROJINHERIT;
        r = ioctl(fd, FS_IOC_FSSETXATTR, &fa);
    }
    int e = errno;
    close(fd);
    return verdict("projid", r, e);
}

/* Clears PATH's project-inherit flag through FS_IOC_SETFLAGS (chattr -P),
 * so that files made in it would belong to no project: "projinherit_off PATH". */
static int do_projinherit_off(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        printf("projinherit_off: cannot open %s: %s\n", argv[2], strerror(errno));
        return PROBE_USAGE;
    }
    int flags = 0;
    errno = 0;
    int r = ioctl(fd, FS_IOC_GETFLAGS, &flags);
    if (r == 0 && !(flags & FS_PROJINHERIT_FL)) {
        printf("projinherit_off: %s does not inherit a project\n", argv[2]);
        close(fd);
        return PROBE_USAGE;
    }
    if (r == 0) {
        flags &= ~FS_PROJINHERIT_FL;
        r = ioctl(fd, FS_IOC_SETFLAGS, &flags);
    }
    int e = errno;
    close(fd);
    return verdict("projinherit_off", r, e);
}

/* Lifts the project quota of PATH's filesystem: "quotactl_fd PATH ID". */
static int do_quotactl_fd(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    int fd = open(argv[2], O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        printf("quotactl_fd: cannot open %s: %s\n", argv[2], strerror(errno));
        return PROBE_USAGE;
    }
    struct if_dqblk q;
    memset(&q, 0, sizeof q);
    q.dqb_valid = QIF_BLIMITS; /* zero limits: none */
    long r = syscall(SYS_quotactl_fd, fd, QCMD(Q_SETQUOTA, PRJQUOTA),
                     (unsigned)strtoul(argv[3], NULL, 10), &q);
    int e = errno;
    close(fd);
    return verdict("quotactl_fd", r, e);
}

/* Creates COUNT files of SIZE bytes in DIR until one fails: "many_files
 * DIR COUNT SIZE". Small files cost a filesystem metadata and blocks that a
 * disk limit must count too. */
static int do_many_files(int argc, char **argv) {
    if (need(argc, 5) < 0)
        return PROBE_USAGE;
    long count = strtol(argv[3], NULL, 10), size = strtol(argv[4], NULL, 10);
    static char block[65536];
    if (size < 0 || (size_t)size > sizeof block)
        return PROBE_USAGE;
    char path[4096];
    for (long i = 0; i < count; i++) {
        snprintf(path, sizeof path, "%s/f%ld", argv[2], i);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        int e = errno;
        if (fd >= 0 && write(fd, block, (size_t)size) != size) {
            e = errno;
            close(fd);
            fd = -1;
        }
        if (fd < 0 || close(fd) < 0) {
            printf("many_files: file %ld: ", i);
            return verdict("many_files", -1, e);
        }
    }
    return verdict("many_files", count, 0);
}

/* ---- memory ---- */

/* "mem_bomb MIB": maps and touches MIB MiB. A kill by the OOM killer prints
 * nothing; running out of address space reports ENOMEM. */
static int do_mem_bomb(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    size_t want = (size_t)strtoull(argv[2], NULL, 10) << 20, got = 0;
    long page = sysconf(_SC_PAGESIZE);
    while (got < want) {
        char *p = mmap(NULL, BOMB_CHUNK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                       0);
        if (p == MAP_FAILED) {
            printf("mem_bomb: errno=%d (%s) after %zu MiB\n", errno, strerror(errno), got >> 20);
            return PROBE_BLOCKED;
        }
        for (size_t off = 0; off < BOMB_CHUNK; off += (size_t)page)
            p[off] = 1;
        got += BOMB_CHUNK;
    }
    printf("mem_bomb: SUCCEEDED touched %zu MiB\n", got >> 20);
    return PROBE_ESCAPED;
}

/* ---- privileges ---- */

/* Reads "Name:\tHEX" from /proc/self/status; ~0 when absent. */
static unsigned long long status_hex(const char *name) {
    FILE *f = fopen("/proc/self/status", "re");
    char line[256];
    unsigned long long v = ~0ULL;
    size_t n = strlen(name);
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, name, n) == 0 && line[n] == ':')
            v = strtoull(line + n + 1, NULL, 16);
    if (f)
        fclose(f);
    return v;
}

/* Prints the capability sets; true when all are empty and no_new_privs is set. */
static bool caps_empty(const char *name) {
    unsigned long long eff = status_hex("CapEff"), prm = status_hex("CapPrm"),
                       inh = status_hex("CapInh"), bnd = status_hex("CapBnd"),
                       amb = status_hex("CapAmb"), nnp = status_hex("NoNewPrivs");
    printf("%s: euid=%d eff=%llx prm=%llx inh=%llx bnd=%llx amb=%llx nnp=%llx\n", name,
           (int)geteuid(), eff, prm, inh, bnd, amb, nnp);
    return eff == 0 && prm == 0 && inh == 0 && bnd == 0 && amb == 0 && nnp == 1;
}

static int do_caps(int argc, char **argv) {
    return caps_empty("caps") ? PROBE_BLOCKED : PROBE_ESCAPED;
}

/* Tries to become someone else and to raise capabilities; then reports the
 * capability sets, which must still be empty. */
static int do_setuid(int argc, char **argv) {
    errno = 0;
    int r0 = setuid(0), e0 = errno;
    errno = 0;
    int r1 = setresuid(0, 0, 0), e1 = errno;
    errno = 0;
    int r2 = setuid(1000), e2 = errno;
    struct __user_cap_header_struct hdr = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct data[2];
    memset(data, 0xff, sizeof data);
    errno = 0;
    long r3 = syscall(SYS_capset, &hdr, data);
    int e3 = errno;
    fprintf(stderr, "setuid(0)=%d/%d setresuid(0)=%d/%d setuid(1000)=%d/%d\n", r0, e0, r1, e1, r2,
            e2);
    bool empty = caps_empty("setuid_caps");
    printf("setuid: capset errno=%d\n", r3 < 0 ? e3 : 0);
    return empty && r3 < 0 ? PROBE_BLOCKED : PROBE_ESCAPED;
}

/* Raising hard limits needs CAP_SYS_RESOURCE. One line with each errno. */
static int do_setrlimit(int argc, char **argv) {
    static const struct {
        const char *name;
        int res;
    } lims[] = {{"nofile", RLIMIT_NOFILE}, {"fsize", RLIMIT_FSIZE}, {"nproc", RLIMIT_NPROC}};
    int escaped = 0;
    printf("setrlimit:");
    for (size_t i = 0; i < sizeof lims / sizeof lims[0]; i++) {
        struct rlimit cur;
        getrlimit(lims[i].res, &cur);
        struct rlimit up = {RLIM_INFINITY, RLIM_INFINITY};
        errno = 0;
        int r = cur.rlim_max == RLIM_INFINITY ? 0 : setrlimit(lims[i].res, &up);
        printf(" %s=%d", lims[i].name, r < 0 ? errno : 0);
        escaped |= r == 0;
    }
    printf("\n");
    return escaped ? PROBE_ESCAPED : PROBE_BLOCKED;
}

/* ---- network and IPC ---- */

static int connect_bounded(int fd, const struct sockaddr *sa, socklen_t len) {
    int r = connect(fd, sa, len);
    if (r == 0 || errno != EINPROGRESS)
        return r;
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    if (poll(&p, 1, CONNECT_TIMEOUT_MS) <= 0) {
        errno = ETIMEDOUT;
        return -1;
    }
    int err = 0;
    socklen_t el = sizeof err;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &el);
    errno = err;
    return err ? -1 : 0;
}

/* "tcp_connect ADDR PORT" (IPv4 or IPv6). */
static int do_tcp_connect(int argc, char **argv) {
    if (need(argc, 4) < 0)
        return PROBE_USAGE;
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)atoi(argv[3]))};
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[3]))};
    bool v6 = strchr(argv[2], ':') != NULL;
    if (v6 ? inet_pton(AF_INET6, argv[2], &a6.sin6_addr) != 1
           : inet_pton(AF_INET, argv[2], &a4.sin_addr) != 1) {
        printf("tcp_connect: bad address %s\n", argv[2]);
        return PROBE_USAGE;
    }
    int fd = socket(v6 ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return verdict("tcp_connect", -1, errno);
    int r = v6 ? connect_bounded(fd, (struct sockaddr *)&a6, sizeof a6)
               : connect_bounded(fd, (struct sockaddr *)&a4, sizeof a4);
    int e = errno;
    close(fd);
    return verdict("tcp_connect", r, e);
}

/* "unix_connect PATH" or "unix_connect @NAME" (abstract). */
static int do_unix_connect(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    size_t n = strlen(argv[2]);
    if (n >= sizeof a.sun_path) {
        printf("unix_connect: path too long\n");
        return PROBE_USAGE;
    }
    memcpy(a.sun_path, argv[2], n);
    if (argv[2][0] == '@')
        a.sun_path[0] = '\0';
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + n + (argv[2][0] != '@'));
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int r = fd < 0 ? -1 : connect_bounded(fd, (struct sockaddr *)&a, len);
    int e = errno;
    if (fd >= 0)
        close(fd);
    return verdict("unix_connect", r, e);
}

static int do_ifaces(int argc, char **argv) {
    struct if_nameindex *ifs = if_nameindex();
    if (!ifs) {
        printf("ifaces: if_nameindex failed: %s\n", strerror(errno));
        return PROBE_USAGE;
    }
    int others = 0;
    printf("ifaces:");
    for (int i = 0; i < WALK_MAX && ifs[i].if_index; i++) {
        printf(" %s", ifs[i].if_name);
        others += strcmp(ifs[i].if_name, "lo") != 0;
    }
    printf("\n");
    if_freenameindex(ifs);
    return others ? PROBE_ESCAPED : PROBE_BLOCKED;
}

/* "msgget KEY": a host SysV message queue must not be visible. */
static int do_msgget(int argc, char **argv) {
    if (need(argc, 3) < 0)
        return PROBE_USAGE;
    return VERDICT("msgget", msgget((key_t)strtol(argv[2], NULL, 0), 0));
}

/* ---- descriptors ---- */

/* Lists this process's descriptors; anything beyond 0, 1, 2 leaked in. */
static int do_fds(int argc, char **argv) {
    DIR *d = opendir("/proc/self/fd");
    if (!d) {
        printf("fds: cannot list: %s\n", strerror(errno));
        return PROBE_USAGE;
    }
    int self = dirfd(d), extra = 0;
    char list[512] = "";
    size_t len = 0;
    struct dirent *e;
    for (int i = 0; i < WALK_MAX && (e = readdir(d)); i++) {
        if (!numeric(e->d_name) || atoi(e->d_name) == self)
            continue;
        char target[128] = "";
        char path[PROC_PATH_MAX];
        snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, target, sizeof target - 1);
        target[n > 0 ? n : 0] = '\0';
        if (atoi(e->d_name) > 2)
            extra++;
        int w = snprintf(list + len, sizeof list - len, " %s=%s", e->d_name, target);
        if (w > 0 && (size_t)w < sizeof list - len)
            len += (size_t)w;
    }
    closedir(d);
    printf("fds:%s%s\n", list, extra ? " SUCCEEDED inherited extra descriptors" : "");
    return extra ? PROBE_ESCAPED : PROBE_BLOCKED;
}

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
} attacks[] = {
    {"bpf", do_bpf},
    {"perf_event_open", do_perf_event_open},
    {"keyctl", do_keyctl},
    {"userfaultfd", do_userfaultfd},
    {"kexec_load", do_kexec_load},
    {"init_module", do_init_module},
    {"open_by_handle_at", do_open_by_handle_at},
    {"io_uring_setup", do_io_uring_setup},
    {"personality", do_personality},
    {"host_calls", do_host_calls},
    {"mount_tmpfs", do_mount_tmpfs},
    {"mount_proc", do_mount_proc},
    {"mount_bind", do_mount_bind},
    {"remount_rw", do_remount_rw},
    {"new_mount_api", do_new_mount_api},
    {"umount", do_umount},
    {"unshare", do_unshare},
    {"clone_newuser", do_clone_newuser},
    {"setns", do_setns},
    {"pivot_root", do_pivot_root},
    {"chroot", do_chroot},
    {"proc_self_root", do_proc_self_root},
    {"proc_init", do_proc_init},
    {"proc_walk", do_proc_walk},
    {"ptrace_attach", do_ptrace_attach},
    {"process_vm_readv", do_process_vm_readv},
    {"pidfd_getfd", do_pidfd_getfd},
    {"kill", do_kill},
    {"read_file", do_read_file},
    {"write_file", do_write_file},
    {"link", do_link},
    {"mknod", do_mknod},
    {"tiocsti", do_tiocsti},
    {"tioclinux", do_tioclinux},
    {"fsize", do_fsize},
    {"mem_bomb", do_mem_bomb},
    {"caps", do_caps},
    {"setuid", do_setuid},
    {"setrlimit", do_setrlimit},
    {"tcp_connect", do_tcp_connect},
    {"unix_connect", do_unix_connect},
    {"ifaces", do_ifaces},
    {"msgget", do_msgget},
    {"fds", do_fds},
    {"btrfs_subvol", do_btrfs_subvol},
    {"projid", do_projid},
    {"quotactl_fd", do_quotactl_fd},
    {"many_files", do_many_files},
    {"projinherit_off", do_projinherit_off},
};

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        printf("usage: probe ATTACK [ARGS...]\n");
        return PROBE_USAGE;
    }
    for (size_t i = 0; i < sizeof attacks / sizeof attacks[0]; i++)
        if (strcmp(argv[1], attacks[i].name) == 0)
            return attacks[i].run(argc, argv);
    printf("%s: unknown attack\n", argv[1]);
    return PROBE_USAGE;
}
