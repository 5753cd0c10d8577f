#include "cli/doctor.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <seccomp.h>
#include <signal.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/fsx.h"
#include "base/json.h"

/* A real probe answers in milliseconds; one silent this long is hung. */
#define DOCTOR_PROBE_TIMEOUT_MS 5000
/* Where the pivot_root probe mounts its tmpfs; only inside its own mount namespace. */
#define DOCTOR_PIVOT_DIR "/tmp"
/* The pivot_root probe's tmpfs holds one empty directory. */
#define DOCTOR_PIVOT_TMPFS_OPTS "size=64k,mode=0700"
/* Room for the titles of every required feature in one message. */
#define DOCTOR_MISSING_MAX 256

/* What a child sends back over its pipe (same binary, so a raw struct). */
typedef struct probe_answer {
    bool ok;
    char detail[DOCTOR_DETAIL_MAX];
    cgroup_caps cgroup; /* filled by the cgroup probe only */
    quota_fs quota;     /* filled by the disk quota probe only */
} probe_answer;

/* ---- probes: each runs in a forked child ---- */

static bool probe_fail(probe_answer *a, const char *what, int e) {
    snprintf(a->detail, sizeof a->detail, "%s: %s%s", what, strerror(e),
             e == ENOSPC ? " (a user.max_*_namespaces sysctl is 0 or reached)" : "");
    return false;
}

/* rc is a syscall's result, errno still set by it. */
static bool probe_call(probe_answer *a, long rc, const char *what) {
    return rc >= 0 || probe_fail(a, what, errno);
}

static int probe_write(const char *path, const char *text) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int r = fawn_write_all(fd, text, strlen(text)) < 0 ? -EIO : 0;
    close(fd);
    return r;
}

/* Enters a new user namespace mapping our uid and gid to root in it, as the
 * local provider does before every other namespace. */
static bool probe_enter_userns(probe_answer *a) {
    uid_t uid = geteuid();
    gid_t gid = getegid();
    if (unshare(CLONE_NEWUSER) < 0)
        return probe_fail(a, "unshare(CLONE_NEWUSER)", errno);
    int r = probe_write("/proc/self/setgroups", "deny");
    if (r < 0 && r != -ENOENT)
        return probe_fail(a, "write /proc/self/setgroups", -r);
    char map[48];
    snprintf(map, sizeof map, "0 %u 1", (unsigned)uid);
    if ((r = probe_write("/proc/self/uid_map", map)) < 0)
        return probe_fail(a, "write /proc/self/uid_map", -r);
    snprintf(map, sizeof map, "0 %u 1", (unsigned)gid);
    if ((r = probe_write("/proc/self/gid_map", map)) < 0)
        return probe_fail(a, "write /proc/self/gid_map", -r);
    return true;
}

static bool probe_unshare(probe_answer *a, int flag, const char *what) {
    return probe_enter_userns(a) && probe_call(a, unshare(flag), what);
}

static void probe_user_ns(probe_answer *a, const char *home) { a->ok = probe_enter_userns(a); }

static void probe_mount_ns(probe_answer *a, const char *home) {
    a->ok = probe_unshare(a, CLONE_NEWNS, "unshare(CLONE_NEWNS)") &&
            probe_call(a, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL),
                       "make / private in the new mount namespace");
}

static void probe_pid_ns(probe_answer *a, const char *home) {
    if (!probe_unshare(a, CLONE_NEWPID, "unshare(CLONE_NEWPID)"))
        return;
    pid_t pid = fork();
    if (pid < 0) {
        probe_fail(a, "fork into the new pid namespace", errno);
        return;
    }
    if (pid == 0)
        _exit(getpid() == 1 ? 0 : 1);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0) {
        if (errno != EINTR) {
            probe_fail(a, "waitpid", errno);
            return;
        }
    }
    a->ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
    if (!a->ok)
        snprintf(a->detail, sizeof a->detail,
                 "the first process of the new pid namespace is not pid 1");
}

static void probe_net_ns(probe_answer *a, const char *home) {
    a->ok = probe_unshare(a, CLONE_NEWNET, "unshare(CLONE_NEWNET)");
}

static void probe_ipc_ns(probe_answer *a, const char *home) {
    a->ok = probe_unshare(a, CLONE_NEWIPC, "unshare(CLONE_NEWIPC)");
}

static void probe_uts_ns(probe_answer *a, const char *home) {
    static const char name[] = "fawn-doctor";
    a->ok = probe_unshare(a, CLONE_NEWUTS, "unshare(CLONE_NEWUTS)") &&
            probe_call(a, sethostname(name, sizeof name - 1), "sethostname in the new namespace");
}

/* Pivots into an empty tmpfs, the way the local provider gives a sandbox its root. */
static void probe_pivot_root(probe_answer *a, const char *home) {
    a->ok = probe_unshare(a, CLONE_NEWNS, "unshare(CLONE_NEWNS)") &&
            probe_call(a, mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL), "make / private") &&
            probe_call(a,
                       mount("tmpfs", DOCTOR_PIVOT_DIR, "tmpfs", MS_NOSUID | MS_NODEV,
                             DOCTOR_PIVOT_TMPFS_OPTS),
                       "mount a tmpfs on " DOCTOR_PIVOT_DIR) &&
            probe_call(a, mkdir(DOCTOR_PIVOT_DIR "/old", 0700), "mkdir in the tmpfs") &&
            probe_call(a, chdir(DOCTOR_PIVOT_DIR), "chdir " DOCTOR_PIVOT_DIR) &&
            probe_call(a, syscall(SYS_pivot_root, ".", "old"), "pivot_root") &&
            probe_call(a, chdir("/"), "chdir / after pivot_root") &&
            probe_call(a, umount2("/old", MNT_DETACH), "detach the old root");
}

/* Loads a filter that makes getppid fail with EPERM, and checks that it does. */
static void probe_seccomp(probe_answer *a, const char *home) {
    int mode = prctl(PR_GET_SECCOMP, 0, 0, 0, 0);
    if (mode < 0) {
        probe_fail(a, "prctl(PR_GET_SECCOMP)", errno);
        return;
    }
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx) {
        snprintf(a->detail, sizeof a->detail, "seccomp_init failed");
        return;
    }
    int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(getppid), 0);
    if (r == 0)
        r = seccomp_load(ctx);
    seccomp_release(ctx);
    if (r < 0) {
        probe_fail(a, "load a seccomp filter", -r);
        return;
    }
    errno = 0;
    long got = syscall(SYS_getppid);
    a->ok = got == -1 && errno == EPERM;
    if (!a->ok)
        snprintf(a->detail, sizeof a->detail, "a loaded seccomp filter did not take effect");
    else if (mode == 2)
        snprintf(a->detail, sizeof a->detail,
                 "fawn already runs under a seccomp filter; sandbox filters stack on it");
}

static void probe_no_new_privs(probe_answer *a, const char *home) {
    a->ok = probe_call(a, prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "prctl(PR_SET_NO_NEW_PRIVS)");
    if (a->ok && prctl(PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) != 1) {
        a->ok = false;
        snprintf(a->detail, sizeof a->detail, "no_new_privs was set but does not read back");
    }
}

static void probe_cgroups(probe_answer *a, const char *home) {
    cgroup_probe(&a->cgroup);
    a->ok = a->cgroup.mode != CGROUP_NONE;
    _Static_assert(sizeof a->detail == sizeof a->cgroup.detail, "detail sizes differ");
    memcpy(a->detail, a->cgroup.detail, sizeof a->detail);
}

static void probe_openat2(probe_answer *a, const char *home) {
    a->ok = fsx_have_openat2();
    if (!a->ok)
        snprintf(a->detail, sizeof a->detail, "openat2: not implemented by this kernel");
}

/* Which disk quota a thread's user-data under home gets (sandbox/quota.h). */
static void probe_disk_quota(probe_answer *a, const char *home) {
    quota_probe_path(&a->quota, home);
    a->ok = a->quota.mechanism != QUOTA_MEASURED;
    _Static_assert(sizeof a->detail >= sizeof a->quota.detail, "detail sizes differ");
    memcpy(a->detail, a->quota.detail, sizeof a->quota.detail);
}

static void probe_pidfd_open(probe_answer *a, const char *home) {
    int fd = (int)syscall(SYS_pidfd_open, getpid(), 0);
    a->ok = probe_call(a, fd, "pidfd_open");
    if (fd >= 0)
        close(fd);
}

/* ---- the feature table ---- */

static const struct doctor_feature_info {
    const char *name;
    const char *title;
    bool required;
    const char *without;
    void (*probe)(probe_answer *a, const char *home);
} features[DOCTOR_N_FEATURES] = {
    [DOCTOR_USER_NS] = {"user_namespace", "user namespaces", true,
                        "no user namespaces: the local provider cannot start sandboxes; use a "
                        "remote box",
                        probe_user_ns},
    [DOCTOR_MOUNT_NS] = {"mount_namespace", "mount namespaces", true,
                         "no mount namespaces: the local provider cannot give a sandbox its own "
                         "filesystem and cannot start; use a remote box",
                         probe_mount_ns},
    [DOCTOR_PID_NS] = {"pid_namespace", "pid namespaces", true,
                       "no pid namespaces: the local provider cannot start sandboxes (fawn box "
                       "must be pid 1 of its sandbox); use a remote box",
                       probe_pid_ns},
    [DOCTOR_NET_NS] = {"network_namespace", "network namespaces", false,
                       "no network namespace: sandbox.network must be 'host'; fawn refuses "
                       "'none'",
                       probe_net_ns},
    [DOCTOR_IPC_NS] = {"ipc_namespace", "ipc namespaces", true,
                       "no ipc namespace: the local provider gives every sandbox its own and "
                       "cannot start sandboxes; use a remote box",
                       probe_ipc_ns},
    [DOCTOR_UTS_NS] = {"uts_namespace", "uts namespaces", true,
                       "no uts namespace: the local provider gives every sandbox its own hostname "
                       "and cannot start sandboxes; use a remote box",
                       probe_uts_ns},
    [DOCTOR_PIVOT_ROOT] = {"pivot_root", "pivot_root", true,
                           "no pivot_root: the local provider cannot give a sandbox its own root "
                           "and cannot start; use a remote box",
                           probe_pivot_root},
    [DOCTOR_SECCOMP] = {"seccomp", "seccomp", true,
                        "no seccomp: the local provider cannot filter system calls and does not "
                        "start sandboxes; use a remote box",
                        probe_seccomp},
    [DOCTOR_NO_NEW_PRIVS] = {"no_new_privs", "no_new_privs", true,
                             "no no_new_privs: the local provider sets it before its seccomp "
                             "filter and cannot start sandboxes; use a remote box",
                             probe_no_new_privs},
    [DOCTOR_CGROUPS] = {"cgroups", "cgroups", false,
                        "no cgroups: memory and process limits fall back to "
                        "RLIMIT_AS/RLIMIT_NPROC",
                        probe_cgroups},
    [DOCTOR_OPENAT2] = {"openat2", "openat2", false,
                        "no openat2: path confinement falls back to component-by-component "
                        "O_NOFOLLOW walking",
                        probe_openat2},
    [DOCTOR_PIDFD_OPEN] = {"pidfd_open", "pidfd_open", false,
                           "no pidfd_open: sandbox processes are signalled by pid, which a "
                           "recycled pid could misdirect",
                           probe_pidfd_open},
    [DOCTOR_DISK_QUOTA] = {"disk_quota", "disk quotas", false,
                           "no kernel disk quota for $FAWN_HOME: a thread's files are measured; "
                           "uploads past sandbox.limits.disk_mb are refused and a command is "
                           "told when it went past, but it can write past it while it runs",
                           probe_disk_quota},
};

/* ---- running one probe in a child ---- */

enum probe_outcome { PROBE_ANSWERED, PROBE_LOST, PROBE_TIMED_OUT };

static enum probe_outcome doctor_read_answer(probe_answer *a, int fd) {
    char *buf = (char *)a;
    size_t got = 0;
    int64_t deadline = fawn_now_ms() + DOCTOR_PROBE_TIMEOUT_MS;
    while (got < sizeof *a) {
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0)
            return PROBE_TIMED_OUT;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int r = poll(&pfd, 1, (int)left);
        if (r < 0 && errno == EINTR)
            continue;
        if (r == 0)
            return PROBE_TIMED_OUT;
        ssize_t n = r < 0 ? -1 : read(fd, buf + got, sizeof *a - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return PROBE_LOST;
        got += (size_t)n;
    }
    return PROBE_ANSWERED;
}

static void doctor_describe_loss(probe_answer *a, enum probe_outcome outcome, int status) {
    memset(a, 0, sizeof *a);
    if (outcome == PROBE_TIMED_OUT)
        snprintf(a->detail, sizeof a->detail, "the probe did not finish within %d ms",
                 DOCTOR_PROBE_TIMEOUT_MS);
    else if (WIFSIGNALED(status))
        snprintf(a->detail, sizeof a->detail, "the probe was killed by signal %d (%s)",
                 WTERMSIG(status), strsignal(WTERMSIG(status)));
    else
        snprintf(a->detail, sizeof a->detail, "the probe exited with status %d without answering",
                 WEXITSTATUS(status));
}

/* Runs fn in a forked child, kills it at the deadline, always reaps it. */
static void doctor_run_probe(probe_answer *a, void (*fn)(probe_answer *, const char *),
                             const char *home) {
    memset(a, 0, sizeof *a);
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0) {
        probe_fail(a, "pipe2", errno);
        return;
    }
    pid_t pid = fork();
    if (pid < 0) {
        int e = errno;
        close(p[0]);
        close(p[1]);
        probe_fail(a, "fork", e);
        return;
    }
    if (pid == 0) {
        close(p[0]);
        probe_answer mine;
        memset(&mine, 0, sizeof mine);
        fn(&mine, home);
        _exit(fawn_write_all(p[1], &mine, sizeof mine) == 0 ? 0 : 1);
    }
    close(p[1]);
    enum probe_outcome outcome = doctor_read_answer(a, p[0]);
    close(p[0]);
    if (outcome != PROBE_ANSWERED)
        kill(pid, SIGKILL);
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (outcome != PROBE_ANSWERED)
        doctor_describe_loss(a, outcome, status);
    a->detail[sizeof a->detail - 1] = '\0';
    a->cgroup.detail[sizeof a->cgroup.detail - 1] = '\0';
    a->quota.detail[sizeof a->quota.detail - 1] = '\0';
}

/* ---- public ---- */

/* Lists the titles of the missing required features ("" when none). */
static void doctor_missing_required(char *buf, size_t cap, const doctor_report *r) {
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < DOCTOR_N_FEATURES && used < cap; i++) {
        const doctor_check *c = &r->checks[i];
        if (!c->required || c->ok)
            continue;
        int n = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", c->title);
        used += n > 0 ? (size_t)n : 0;
    }
}

int doctor_probe(doctor_report *out, const char *home) {
    memset(out, 0, sizeof *out);
    for (size_t i = 0; i < DOCTOR_N_FEATURES; i++) {
        const struct doctor_feature_info *f = &features[i];
        doctor_check *c = &out->checks[i];
        probe_answer a;
        doctor_run_probe(&a, f->probe, home);
        c->name = f->name;
        c->title = f->title;
        c->required = f->required;
        c->without = f->without;
        c->ok = a.ok;
        memcpy(c->detail, a.detail, sizeof c->detail);
        if (i == DOCTOR_CGROUPS)
            out->cgroup = a.cgroup;
        if (i == DOCTOR_DISK_QUOTA)
            out->quota = a.quota;
    }
    char missing[DOCTOR_MISSING_MAX];
    doctor_missing_required(missing, sizeof missing, out);
    out->local_ready = missing[0] == '\0';
    if (out->local_ready)
        return 0;
    return fawn_err(FAWN_EUNSUP, "the local provider cannot start sandboxes here; missing: %s",
                    missing);
}

void doctor_print(FILE *out, const doctor_report *r) {
    fprintf(out, "isolation features of this host:\n\n");
    for (size_t i = 0; i < DOCTOR_N_FEATURES; i++) {
        const doctor_check *c = &r->checks[i];
        const char *status = c->ok ? "ok" : "missing";
        if (c->detail[0])
            fprintf(out, "  %-19s %-8s %s\n", c->title, status, c->detail);
        else
            fprintf(out, "  %-19s %s\n", c->title, status);
        if (!c->ok)
            fprintf(out, "  %-19s %-8s -> %s\n", "", "", c->without);
    }
    char missing[DOCTOR_MISSING_MAX];
    doctor_missing_required(missing, sizeof missing, r);
    if (missing[0])
        fprintf(out,
                "\nlocal provider: cannot start sandboxes here (missing: %s); use a remote box\n",
                missing);
    else
        fprintf(out, "\nlocal provider: ready\n");
}

/* A detail as a JSON string: bytes that are not UTF-8 (a path can hold any)
 * become '?', so the report always serializes. */
static json_t *doctor_json_text(const char *s) {
    char buf[DOCTOR_DETAIL_MAX];
    size_t n = strnlen(s, sizeof buf - 1);
    memcpy(buf, s, n);
    buf[n] = '\0';
    if (!fawn_utf8_valid(buf, n))
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)buf[i] >= 0x80)
                buf[i] = '?';
    return json_string(buf);
}

static const char *doctor_mode_name(enum cgroup_mode mode) {
    return mode == CGROUP_V2 ? "v2" : mode == CGROUP_V1 ? "v1" : "none";
}

int doctor_to_json(json_t **out, const doctor_report *r) {
    *out = NULL;
    json_t *features_obj = json_object();
    for (size_t i = 0; features_obj && i < DOCTOR_N_FEATURES; i++) {
        const doctor_check *c = &r->checks[i];
        json_t *f = json_pack("{s:s, s:b, s:o, s:s}", "status", c->ok ? "ok" : "missing",
                              "required", c->required, "detail", doctor_json_text(c->detail),
                              "without", c->without);
        if (!f || json_object_set_new(features_obj, c->name, f) < 0) {
            json_decref(features_obj);
            features_obj = NULL;
        }
    }
    json_t *cgroup = json_pack("{s:s, s:b, s:b, s:o}", "mode", doctor_mode_name(r->cgroup.mode),
                               "memory", r->cgroup.memory, "pids", r->cgroup.pids, "detail",
                               doctor_json_text(r->cgroup.detail));
    json_t *quota = json_pack("{s:s, s:o}", "mechanism", quota_mechanism_name(r->quota.mechanism),
                              "detail", doctor_json_text(r->quota.detail));
    json_t *root = json_pack("{s:b, s:O, s:O, s:O}", "local_provider_ready", r->local_ready,
                             "features", features_obj, "cgroup", cgroup, "disk_quota", quota);
    json_decref(features_obj);
    json_decref(cgroup);
    json_decref(quota);
    if (!root)
        return fawn_err(FAWN_ENOMEM, "out of memory building the doctor report");
    *out = root;
    return 0;
}
