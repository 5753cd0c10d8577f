/* The local provider: sandboxes as fresh Linux namespaces on this host. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <stdio.h>
#include <string.h>
#include <grp.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "base/fsx.h"
#include "box/box.h"
#include "base/json.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/egress.h"
#include "sandbox/launch_spec.h"
#include "sandbox/local.h"
#include "sandbox/quota.h"
#include "sandbox/user_data.h"
#include "skills/skills.h"

static int run_path(char *out, const fawn_config *cfg, const char *sandbox_id, const char *ext) {
    int n = snprintf(out, PATH_MAX, "%s/run/%s%s", cfg->home, sandbox_id, ext);
    return n < PATH_MAX ? 0 : fawn_err(FAWN_EINVAL, "home path too long");
}

/* out = dir/name; FAWN_EINVAL when it does not fit in PATH_MAX. */
static int join_path(char out[PATH_MAX], const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    if (a + 1 + b >= PATH_MAX)
        return fawn_err(FAWN_EINVAL, "path too long: %s/%s", dir, name);
    memcpy(out, dir, a);
    out[a] = '/';
    memcpy(out + a + 1, name, b + 1);
    return 0;
}

/* The cgroup of a sandbox: its id plus a hash of the home directory, so two
 * fawn instances on one host (or two test runs) never share a group. */
static int cgroup_name(char out[40], const fawn_config *cfg, const char *sandbox_id) {
    if (strlen(sandbox_id) > 30)
        return fawn_err(FAWN_EINVAL, "sandbox id too long for a cgroup name");
    char home[PATH_MAX], hex[65];
    if (!realpath(cfg->home, home))
        snprintf(home, sizeof home, "%s", cfg->home); /* not created (yet): its name */
    fawn_sha256_hex(hex, home, strlen(home));
    snprintf(out, 40, "%.8s-%s", hex, sandbox_id);
    return 0;
}

/* ---- launching ---- */

typedef struct launch {
    const local_launch_spec *p;
    char dirs[SBX_USER_DATA_PARTS][PATH_MAX]; /* workspace, uploads, outputs */
    char etc[PATH_MAX];                       /* the prepared /etc */
    char broker[PATH_MAX];                    /* the broker's directory, or "" */
    char broker_shim[PATH_MAX];               /* the fawn binary its shims run */
    int pooled_netns;                         /* a ready network namespace, or -1 */
    bool via_helper; /* spawned by a helper process (see spawn_via_helper) */
    uid_t uid;
    gid_t gid; /* the launcher's egid, read before the clone: the child's own is unmapped */
    bool parent_maps_ids; /* root: the parent maps the sandbox to an unprivileged uid */
    bool disk_measured;   /* no kernel quota limits the user-data: the box measures it */
    box_mount_plan plan;
    int go[2], status[2];
    cgroup_handle cg;
} launch;

static void launch_close(launch *l) {
    int *fds[] = {&l->go[0], &l->go[1], &l->status[0], &l->status[1]};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        if (*fds[i] >= 0)
            close(steal_fd(*fds[i]));
}

/* With a broker directory in the spec: its bin/ for the shims and the empty
 * mount point "fawn" (made when missing) go into the plan, with the fawn
 * binary the shims run. */
static int plan_broker(launch *l) {
    if (!l->p->broker_dir)
        return 0;
    char bin[PATH_MAX], mount_point[PATH_MAX];
    snprintf(l->broker, sizeof l->broker, "%s", l->p->broker_dir);
    int r = join_path(bin, l->broker, "bin");
    if (r == 0)
        r = sbx_dir_ensure(bin, 0755);
    if (r == 0)
        r = join_path(mount_point, l->broker, "fawn");
    if (r < 0)
        return r;
    int fd = open(mount_point, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "create %s", mount_point);
    close(fd);
    const char *self = l->p->fawn_bin ? l->p->fawn_bin : "/proc/self/exe";
    if (!realpath(self, l->broker_shim))
        return fawn_err_sys(FAWN_EIO, errno, "resolve %s", self);
    l->plan.broker = l->broker;
    l->plan.broker_shim = l->broker_shim;
    return 0;
}

static int open_plan(launch *l) {
    const fawn_config *cfg = l->p->cfg;
    for (size_t i = 0; i < SBX_USER_DATA_PARTS; i++) {
        int r = join_path(l->dirs[i], l->p->user_data, sbx_user_data_parts[i]);
        if (r < 0)
            return r;
    }
    _cleanup_close_ int user_data = open(l->p->user_data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (user_data < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", l->p->user_data);
    l->disk_measured = quota_dir_mechanism(user_data) == QUOTA_MEASURED;
    char run_dir[PATH_MAX];
    int r = join_path(run_dir, cfg->home, "run");
    if (r == 0)
        r = sbx_dir_ensure(run_dir, 0700);
    if (r == 0)
        r = box_etc_prepare(l->etc, run_dir, cfg->sandbox.network != FAWN_NET_HOST);
    if (r < 0)
        return r;
    l->plan = (box_mount_plan){
        .workspace = l->dirs[0],
        .uploads = l->dirs[1],
        .outputs = l->dirs[2],
        .skills = l->p->skills,
        .etc = l->etc,
        .network_none = cfg->sandbox.network != FAWN_NET_HOST,
        .tmp_size_mb = cfg->sandbox.limits.tmp_size_mb,
    };
    return plan_broker(l);
}

/* Binds a listening socket at path (any length) atomically: bind a temporary
 * name in the same directory, then rename it into place. */
static int listen_unix(int *out, const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash)
        return fawn_err(FAWN_EINVAL, "socket path must be absolute or contain a directory");
    *slash = '\0';
    _cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", dir);
    /* Unique: starts of one sandbox hold its lock, and names carry the pid. */
    char tmp_name[64];
    snprintf(tmp_name, sizeof tmp_name, ".%s.%d", slash + 1, (int)getpid());
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", dirfd, tmp_name);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "socket");
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 128) < 0 ||
        fchmodat(dirfd, tmp_name, 0600, 0) < 0 || renameat(dirfd, tmp_name, dirfd, slash + 1) < 0) {
        int e = errno;
        unlinkat(dirfd, tmp_name, 0);
        close(fd);
        return fawn_err_sys(FAWN_EIO, e, "listen on %s", path);
    }
    *out = fd;
    return 0;
}

/* Makes src[i] the descriptor i for every i, whatever numbers they had (a
 * source may sit on another's target, so all move out of the way first). */
static bool install_fds(int *src, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (src[i] < 0 || (src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 64)) < 0)
            return false;
    for (size_t i = 0; i < n; i++)
        if (dup2(src[i], (int)i) < 0)
            return false;
    return true;
}

/* What the parent tells the child once the sandbox's cgroup is in place
 * (after a first byte that says the uid maps are written). */
typedef struct go_msg {
    char cgroup[8]; /* "v2" | "v1" | "none" */
} go_msg;

static _Noreturn void child_fail(const launch *l, const char *what, const char *detail) {
    dprintf(l->status[1], "error %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    _exit(1);
}

/* In the cloned child: becomes the sandbox's PID 1 and serves the box API.
 * Runs the box in this copy of the launcher rather than exec'ing a new one,
 * which is what makes a cold start cheap (README, "What a sandbox is"). */
static _Noreturn void child_main(launch *l) {
    char err[512] = "";
    go_msg go;
    char mapped;
    close(l->go[1]);
    close(l->status[0]);
    if (read(l->go[0], &mapped, 1) != 1)
        _exit(1);
    box_host_dirs dirs;
    if (box_isolate_open_dirs(&dirs, &l->plan, err, sizeof err) < 0)
        child_fail(l, err, NULL);
    if (!l->parent_maps_ids && box_write_id_maps(0, l->uid, l->gid, true) < 0)
        child_fail(l, "writing uid map", strerror(errno));
    /* Become the namespace's uid 0 (the mapped host uid) and drop the
     * launcher's supplementary groups, which could grant host file access. */
    if ((l->parent_maps_ids && setgroups(0, NULL) < 0) || setresgid(0, 0, 0) < 0 ||
        setresuid(0, 0, 0) < 0)
        child_fail(l, "becoming the sandbox user", strerror(errno));
    setsid();
    if (box_isolate_enter(&l->plan, &dirs, err, sizeof err) < 0)
        child_fail(l, err, NULL);
    int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
    int order[] = {devnull, l->p->log_fd, l->p->log_fd, l->p->listen_fd, l->status[1], l->go[0]};
    if (!install_fds(order, ARRAY_LEN(order)))
        child_fail(l, "dup2", strerror(errno));
    l->status[1] = 4;
    /* After the last change of credentials (which clears it), and before the
     * last read from the launcher: a launcher that died before finds the go
     * pipe closed, one that dies after kills the box. */
    if (l->p->die_with_launcher)
        prctl(PR_SET_PDEATHSIG, SIGKILL);
    /* The parent placed this process in its cgroup meanwhile. */
    if (read(5, &go, sizeof go) != (ssize_t)sizeof go)
        _exit(1);
    go.cgroup[sizeof go.cgroup - 1] = '\0';
    syscall(SYS_close_range, 5, ~0U, 0); /* the go pipe, and anything else */
    box_settings settings;
    if (box_settings_from_config(&settings, l->p->cfg, go.cgroup) < 0)
        child_fail(l, "settings", fawn_errmsg());
    settings.idle_exit_s = l->p->idle_exit_s;
    settings.disk_measured = l->disk_measured;
    /* This process is a copy of its launcher: commands must not read the
     * launcher's command line as PID 1's. */
    if (fawn_set_cmdline("fawn box") < 0)
        child_fail(l, "hiding the launcher's command line", fawn_errmsg());
    box_serve_opts o = {.listen_fd = 3,
                        .status_fd = 4,
                        .token = l->p->token,
                        .settings = &settings,
                        .attest = l->p->attest,
                        .generation = l->p->generation};
    _exit(box_serve(&o) < 0 ? 1 : 0);
}

/* Reads the box's first status line: "ready <generation>" or "error <why>". */
static int await_ready(launch *l, char generation[33]) {
    char line[600];
    size_t len = 0;
    int64_t deadline = fawn_now_ms() + SANDBOX_START_TIMEOUT_MS;
    while (len < sizeof line - 1 && !memchr(line, '\n', len)) {
        struct pollfd p = {.fd = l->status[0], .events = POLLIN};
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0 || poll(&p, 1, (int)left) <= 0)
            return fawn_err(FAWN_ETIMEDOUT, "the sandbox did not start within %d ms",
                            SANDBOX_START_TIMEOUT_MS);
        ssize_t n = read(l->status[0], line + len, sizeof line - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    line[len] = '\0';
    line[strcspn(line, "\n")] = '\0';
    if (strncmp(line, "ready ", 6) == 0 && strlen(line + 6) == 32) {
        memcpy(generation, line + 6, 33);
        return 0;
    }
    return fawn_err(FAWN_EIO, "the sandbox failed to start: %s",
                    strncmp(line, "error ", 6) == 0 ? line + 6 : "it exited without a reason");
}

/* Clones the child into its namespaces. A network namespace from the pool
 * (or, for network allowlist, the one its proxy listens in, which it must
 * have) is entered by this (single) thread just for the clone, so the
 * child inherits it; otherwise the clone creates one. */
static pid_t clone_child(const launch *l) {
    int flags = CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWIPC | CLONE_NEWUTS | SIGCHLD;
    if (l->via_helper)
        flags |= CLONE_PARENT; /* the box is the launcher's child, not the helper's */
    enum fawn_network_mode mode = l->p->cfg->sandbox.network;
    _cleanup_close_ int home = l->pooled_netns >= 0
                                   ? open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)
                                   : -1;
    if (home < 0 || setns(l->pooled_netns, CLONE_NEWNET) < 0) {
        if (mode == FAWN_NET_ALLOWLIST) /* never without its proxy */
            return -1;
        int own = mode == FAWN_NET_NONE ? CLONE_NEWNET : 0;
        return (pid_t)syscall(SYS_clone, flags | own, NULL, NULL, NULL, 0);
    }
    pid_t pid = (pid_t)syscall(SYS_clone, flags, NULL, NULL, NULL, 0);
    if (pid != 0 && setns(home, CLONE_NEWNET) < 0) {
        /* This process would go on in the sandbox's network: nothing sane is left. */
        log_error("sandbox", "cannot return to the host network namespace: %s", strerror(errno));
        abort();
    }
    return pid;
}

/* Clones the child, maps its ids, puts it in its cgroup while it builds its
 * mounts, and waits for its box to report ready. */
static int spawn(launch *l, pid_t *pid_out, char generation[33]) {
    const fawn_sandbox_config *sc = &l->p->cfg->sandbox;
    if (pipe2(l->go, O_CLOEXEC) < 0 || pipe2(l->status, O_CLOEXEC) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "pipe");
    pid_t pid = clone_child(l);
    if (pid < 0)
        return fawn_err_sys(FAWN_EIO, errno, "clone (are user namespaces enabled?)");
    if (pid == 0)
        child_main(l);
    close(steal_fd(l->go[0]));
    close(steal_fd(l->status[1]));
    int r = 0;
    if (l->parent_maps_ids && box_write_id_maps(pid, l->uid, l->uid, false) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "writing the sandbox's uid map");
    /* The child builds its mounts while the cgroup is set up here. */
    if (r == 0 && write(l->go[1], "m", 1) != 1)
        r = fawn_err_sys(FAWN_EIO, errno, "starting the sandbox");
    char group[40];
    if (r == 0)
        r = cgroup_name(group, l->p->cfg, l->p->sandbox_id);
    if (r == 0)
        r = cgroup_setup(&l->cg, group, pid, sc->limits.memory_mb << 20, sc->limits.pids);
    if (r == FAWN_EEXIST) {
        /* A previous box of this sandbox is still there without answering:
         * it must not share the thread's files with the new one. Its cgroup
         * holds all of it. */
        local_launch_cleanup(l->p->cfg, l->p->sandbox_id);
        r = cgroup_setup(&l->cg, group, pid, sc->limits.memory_mb << 20, sc->limits.pids);
    }
    go_msg go = {0};
    snprintf(go.cgroup, sizeof go.cgroup, "%s",
             l->cg.mode == CGROUP_V2   ? "v2"
             : l->cg.mode == CGROUP_V1 ? "v1"
                                       : "none");
    if (r == 0 && write(l->go[1], &go, sizeof go) != (ssize_t)sizeof go)
        r = fawn_err_sys(FAWN_EIO, errno, "starting the sandbox");
    if (r == 0)
        r = await_ready(l, generation);
    *pid_out = pid;
    if (r < 0) {
        kill(pid, SIGKILL);
        if (!l->via_helper) /* else the launcher, its parent, reaps it */
            waitpid(pid, NULL, 0);
        cgroup_destroy(&l->cg);
    }
    return r;
}

/* A box cloned from its launcher carries the launcher's resident memory, which
 * counts in the OOM killer's choice: past this the launch goes through the
 * helper, so the box stays small next to its commands. */
#define CLONE_LAUNCHER_RSS_MAX_KB (32 * 1024)

/* True when this process may run the box in a clone of itself: it runs a
 * single thread (else the clone would copy locks other threads hold, like
 * malloc's, into a box that runs library code without exec) and is small
 * (against the sandbox's memory limit too). */
static bool may_clone_self(const fawn_config *cfg) {
    char buf[4096];
    int fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    buf[n > 0 ? n : 0] = '\0';
    const char *threads = strstr(buf, "\nThreads:"), *rss = strstr(buf, "\nVmRSS:");
    if (!threads || !rss || strtol(threads + 10, NULL, 10) != 1)
        return false;
    long long kb = strtoll(rss + 8, NULL, 10);
    long long limit_kb = (long long)(cfg->sandbox.limits.memory_mb << 10) / 4;
    return kb <= CLONE_LAUNCHER_RSS_MAX_KB && kb <= limit_kb;
}

/* What the launch helper reports to its launcher. */
typedef struct helper_result {
    int code;
    pid_t pid;
    char generation[33];
    char message[256];
} helper_result;

/* Descriptor numbers in the launch helper (fawn sandbox launch-helper). */
enum { HELPER_LISTEN_FD = 3, HELPER_LOG_FD, HELPER_RESULT_FD, HELPER_SPEC_FD, HELPER_NETNS_FD };

static int write_spec(int *out, const local_launch_spec *spec) {
    json_t *j = launch_spec_to_json(spec);
    _cleanup_free_ char *text = j ? fjson_dump(j) : NULL;
    json_decref(j);
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *out = memfd_create("fawn-launch", MFD_CLOEXEC);
    if (*out < 0)
        return fawn_err_sys(FAWN_EIO, errno, "memfd_create");
    int r = fawn_write_all(*out, text, strlen(text));
    if (r == 0 && lseek(*out, 0, SEEK_SET) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "lseek");
    return r;
}

static int start_helper(pid_t *helper, const launch *l, int spec_fd, int result_fd) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    int from[] = {l->p->listen_fd, l->p->log_fd, result_fd, spec_fd, l->pooled_netns};
    size_t n = l->pooled_netns >= 0 ? 5 : 4;
    /* Moved above every target first, so no source is overwritten early. */
    for (size_t i = 0; i < n; i++)
        posix_spawn_file_actions_adddup2(&fa, from[i], 100 + (int)i);
    for (size_t i = 0; i < n; i++)
        posix_spawn_file_actions_adddup2(&fa, 100 + (int)i, HELPER_LISTEN_FD + (int)i);
    const char *bin = l->p->fawn_bin ? l->p->fawn_bin : "/proc/self/exe";
    char *argv[] = {"fawn", "sandbox", "launch-helper", n == 5 ? "netns" : NULL, NULL};
    extern char **environ;
    int e = posix_spawn(helper, bin, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return e ? fawn_err_sys(FAWN_EIO, e, "starting the launch helper %s", bin) : 0;
}

/* From a multithreaded launcher, a raw clone would copy whatever locks other
 * threads hold (malloc's, libc's thread list) into the box, and the box
 * would carry the launcher's memory. So the launcher execs a fresh fawn
 * (posix_spawn: safe from any thread) that launches the box as the
 * launcher's child (CLONE_PARENT) and reports back. */
static int spawn_via_helper(launch *l, pid_t *pid_out, char generation[33]) {
    _cleanup_close_ int spec_fd = -1;
    int res[2] = {-1, -1};
    pid_t helper = -1;
    int r = write_spec(&spec_fd, l->p);
    if (r == 0 && pipe2(res, O_CLOEXEC) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "pipe");
    if (r == 0)
        r = start_helper(&helper, l, spec_fd, res[1]);
    if (res[1] >= 0)
        close(res[1]);
    helper_result hr = {.code = FAWN_EIO};
    bool got = r == 0 && read(res[0], &hr, sizeof hr) == (ssize_t)sizeof hr;
    if (res[0] >= 0)
        close(res[0]);
    if (helper > 0)
        waitpid(helper, NULL, 0);
    if (r < 0)
        return r;
    if (!got)
        return fawn_err(FAWN_EIO, "the sandbox launch helper died");
    if (hr.code < 0 && hr.pid > 0)
        waitpid(hr.pid, NULL, 0); /* the helper killed it; it is ours to reap */
    if (hr.code < 0)
        return fawn_err(hr.code, "%.255s", hr.message);
    *pid_out = hr.pid;
    memcpy(generation, hr.generation, 33);
    return 0;
}

int local_launch_helper_main(bool have_netns) {
    _cleanup_free_ char *json = NULL;
    size_t len = 0;
    launch_spec_copy copy;
    helper_result hr = {0};
    hr.code = fawn_read_all(&json, &len, HELPER_SPEC_FD, 1 << 20);
    if (hr.code == 0)
        hr.code = launch_spec_from_json(&copy, json, len);
    if (hr.code == 0) {
        copy.spec.listen_fd = HELPER_LISTEN_FD;
        copy.spec.log_fd = HELPER_LOG_FD;
        launch l = {.p = &copy.spec,
                    .parent_maps_ids = geteuid() == 0,
                    .go = {-1, -1},
                    .status = {-1, -1},
                    .via_helper = true,
                    .pooled_netns = have_netns ? HELPER_NETNS_FD : -1};
        l.uid = sbx_host_uid(copy.spec.sandbox_id);
        l.gid = getegid();
        hr.code = open_plan(&l);
        if (hr.code == 0)
            hr.code = spawn(&l, &hr.pid, hr.generation);
        launch_close(&l);
        launch_spec_free(&copy);
    }
    snprintf(hr.message, sizeof hr.message, "%s", fawn_errmsg());
    return fawn_write_all(HELPER_RESULT_FD, &hr, sizeof hr) == 0 ? 0 : 1;
}

/* Tells that a sandbox's files are measured although the kernel could limit
 * them: its user-data was made before quotas were available here. */
static void log_unlimited_user_data(const local_launch_spec *spec) {
    quota_fs fs;
    quota_probe_path(&fs, spec->user_data);
    if (fs.mechanism != QUOTA_MEASURED)
        log_warn("sandbox",
                 "sandbox %s: its files predate disk quotas here (%s), so they are "
                 "measured, not limited by the kernel",
                 spec->sandbox_id, quota_mechanism_name(fs.mechanism));
}

int local_launch(pid_t *pid, char generation[33], const local_launch_spec *spec) {
    *pid = 0;
    generation[0] = '\0';
    if (!fawn_id_valid(spec->sandbox_id))
        return fawn_err(FAWN_EINVAL, "bad sandbox id");
    launch l = {.p = spec,
                .parent_maps_ids = geteuid() == 0,
                .go = {-1, -1},
                .status = {-1, -1},
                .pooled_netns = -1};
    l.uid = sbx_host_uid(spec->sandbox_id);
    l.gid = getegid();
    enum quota_mechanism mechanism;
    int r = sbx_user_data_make(&mechanism, spec->cfg, spec->user_data, l.uid);
    if (r == 0 && mechanism == QUOTA_MEASURED)
        log_unlimited_user_data(spec);
    if (r == 0)
        r = open_plan(&l);
    if (r == 0 && spec->netns && spec->cfg->sandbox.network == FAWN_NET_NONE)
        l.pooled_netns = netns_pool_take(spec->netns);
    if (r == 0 && spec->cfg->sandbox.network == FAWN_NET_ALLOWLIST)
        r = spec->egress_netns > STDERR_FILENO &&
                    (l.pooled_netns = fcntl(spec->egress_netns, F_DUPFD_CLOEXEC, 3)) >= 0
                ? 0
                : fawn_err(FAWN_EINVAL, "network allowlist needs the namespace its proxy "
                                        "listens in (egress_netns_new)");
    if (r == 0)
        r = may_clone_self(spec->cfg) ? spawn(&l, pid, generation)
                                      : spawn_via_helper(&l, pid, generation);
    if (l.pooled_netns >= 0)
        close(l.pooled_netns);
    launch_close(&l);
    return r;
}

void local_launch_cleanup(const fawn_config *cfg, const char *sandbox_id) {
    cgroup_handle cg;
    char group[40];
    if (cgroup_name(group, cfg, sandbox_id) == 0 && cgroup_setup(&cg, group, 0, 0, 0) == 0)
        cgroup_destroy(&cg);
}

static int open_log(int *out, const fawn_config *cfg, const char *sandbox_id) {
    char path[PATH_MAX];
    int r = run_path(path, cfg, sandbox_id, ".log");
    if (r < 0)
        return r;
    *out = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
    return *out < 0 ? fawn_err_sys(FAWN_EIO, errno, "open %s", path) : 0;
}

static int start_box(local_box *out, const local_spec *spec, const char *user_data) {
    _cleanup_close_ int log_fd = -1, listen_fd = -1, netns = -1, egress_fd = -1;
    char skills[PATH_MAX], broker[PATH_MAX] = "";
    int r = skills_view_ensure(skills, spec->cfg->home, spec->user);
    if (r == 0 && local_broker_configured(spec->cfg))
        r = local_broker_dir(broker, spec->cfg, out->sandbox_id);
    if (r == 0 && spec->cfg->sandbox.network == FAWN_NET_ALLOWLIST)
        r = egress_netns_new(&netns, &egress_fd);
    if (r == 0)
        r = open_log(&log_fd, spec->cfg, out->sandbox_id);
    if (r == 0) {
        unlink(out->socket_path);
        r = listen_unix(&listen_fd, out->socket_path);
    }
    local_launch_spec ls = {.cfg = spec->cfg,
                            .sandbox_id = out->sandbox_id,
                            .user_data = user_data,
                            .skills = skills,
                            .listen_fd = listen_fd,
                            .log_fd = log_fd,
                            .idle_exit_s = spec->idle_exit_s,
                            .netns = spec->netns,
                            .egress_netns = netns,
                            .fawn_bin = spec->fawn_bin,
                            .broker_dir = broker[0] ? broker : NULL};
    if (r == 0)
        r = local_launch(&out->pid, out->generation, &ls);
    if (r < 0)
        unlink(out->socket_path);
    out->started = r == 0;
    if (r == 0)
        out->egress_fd = steal_fd(egress_fd);
    return r;
}

/* A running box answers GET /v1/sandbox; fills generation when it does. */
static bool box_alive(local_box *b) {
    json_t *reply = NULL;
    int status = 0;
    int r = box_call(&reply, &status, b->socket_path, "GET", "/v1/sandbox", NULL, 2000);
    const char *gen = json_string_value(json_object_get(reply, "generation"));
    bool ok = r == 0 && status == 200 && gen && strlen(gen) == 32;
    if (ok)
        memcpy(b->generation, gen, 33);
    json_decref(reply);
    return ok;
}

static int lock_sandbox(int *out, const fawn_config *cfg, const char *sandbox_id) {
    char path[PATH_MAX];
    int r = run_path(path, cfg, sandbox_id, ".lock");
    if (r < 0)
        return r;
    *out = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (*out < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", path);
    while (flock(*out, LOCK_EX) < 0)
        if (errno != EINTR)
            return fawn_err_sys(FAWN_EIO, errno, "lock %s", path);
    return 0;
}

/* Fills out's id and socket path for sandbox_id and takes its lock. */
static int prepare_id(local_box *out, const fawn_config *cfg, const char *sandbox_id,
                      int *lock_fd) {
    memset(out, 0, sizeof *out);
    char run_dir[PATH_MAX];
    int r = strlen(sandbox_id) == 16 && strspn(sandbox_id, "0123456789abcdef") == 16
                ? 0
                : fawn_err(FAWN_EINVAL, "a sandbox id is 16 hex digits");
    if (r == 0)
        memcpy(out->sandbox_id, sandbox_id, 17);
    if (r == 0 && snprintf(run_dir, sizeof run_dir, "%s/run", cfg->home) >= (int)sizeof run_dir)
        r = fawn_err(FAWN_EINVAL, "home path too long");
    if (r == 0)
        r = sbx_dir_ensure(run_dir, 0700);
    if (r == 0)
        r = run_path(out->socket_path, cfg, out->sandbox_id, ".sock");
    if (r == 0)
        r = lock_sandbox(lock_fd, cfg, out->sandbox_id);
    return r;
}

static int prepare(local_box *out, const fawn_config *cfg, const char *user, const char *thread,
                   int *lock_fd) {
    char sandbox_id[17];
    int r = paths_sandbox_id(sandbox_id, user, thread);
    return r < 0 ? r : prepare_id(out, cfg, sandbox_id, lock_fd);
}

int local_box_ensure(local_box *out, const local_spec *spec) {
    *out = (local_box){0};
    _cleanup_close_ int lock_fd = -1;
    char user_data[PATH_MAX];
    int r = prepare(out, spec->cfg, spec->user, spec->thread, &lock_fd);
    out->egress_fd = -1;
    if (r == 0)
        r = paths_user_data_dir(user_data, spec->cfg->home, spec->user, spec->thread);
    if (r < 0 || box_alive(out))
        return r;
    return start_box(out, spec, user_data);
}

int local_box_stop(const fawn_config *cfg, const char *user, const char *thread) {
    char sandbox_id[17];
    int r = paths_sandbox_id(sandbox_id, user, thread);
    return r < 0 ? r : local_box_stop_id(cfg, sandbox_id);
}

bool local_broker_configured(const fawn_config *cfg) {
    return json_array_size(json_object_get(cfg->broker, "clis")) > 0;
}

int local_broker_dir(char out[PATH_MAX], const fawn_config *cfg, const char *sandbox_id) {
    out[0] = '\0';
    if (strlen(sandbox_id) != 16 || strspn(sandbox_id, "0123456789abcdef") != 16)
        return fawn_err(FAWN_EINVAL, "a sandbox id is 16 hex digits");
    char dir[PATH_MAX];
    int n = snprintf(dir, sizeof dir, "%s/run/broker", cfg->home);
    int r = n < PATH_MAX ? sbx_dir_ensure(dir, 0755) : fawn_err(FAWN_EINVAL, "home path too long");
    if (r == 0)
        r = join_path(out, dir, sandbox_id);
    if (r == 0)
        r = sbx_dir_ensure(out, 0755);
    return r;
}

int local_socket_path(char out[PATH_MAX], const fawn_config *cfg, const char *sandbox_id) {
    out[0] = '\0';
    return run_path(out, cfg, sandbox_id, ".sock");
}

int local_box_stop_id(const fawn_config *cfg, const char *sandbox_id) {
    _cleanup_close_ int lock_fd = -1;
    local_box b;
    int r = prepare_id(&b, cfg, sandbox_id, &lock_fd);
    if (r < 0)
        return r;
    json_t *reply = NULL;
    int status = 0;
    if (box_call(&reply, &status, b.socket_path, "POST", "/v1/sandbox/shutdown", NULL, 5000) == 0)
        json_decref(reply);
    unlink(b.socket_path);
    local_launch_cleanup(cfg, b.sandbox_id);
    return 0;
}

/* ---- attesting a broker caller ---- */

/* The inode of /proc/<pid>/ns/pid ("self" when pid is 0), or 0. */
static ino_t pidns_of(pid_t pid) {
    char path[64];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/ns/pid", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/ns/pid");
    struct stat st;
    return stat(path, &st) == 0 ? st.st_ino : 0;
}

/* How many pid namespaces /proc/<pid>/status's NSpid line names, or 0. */
static size_t pidns_depth(pid_t pid) {
    char path[64];
    if (pid > 0)
        snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    else
        snprintf(path, sizeof path, "/proc/self/status");
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int r = fd >= 0 ? fawn_read_all(&text, &len, fd, 1 << 16) : -1;
    if (fd >= 0)
        close(fd);
    const char *line = r == 0 ? strstr(text, "\nNSpid:") : NULL;
    if (!line)
        return 0;
    size_t n = 0;
    for (const char *p = line + 7; *p && *p != '\n'; p++)
        if ((*p == ' ' || *p == '\t') && p[1] >= '0' && p[1] <= '9')
            n++;
    return n;
}

/* Where the peer's /proc/<pid>/cgroup puts it: 1 in the group named group
 * (a line whose path has ".../fawn/<group>" as its last or a middle
 * component), -1 in another fawn sandbox's group or in none of fawn's
 * while `some` of fawn's exists, 0 when it cannot tell. */
static int cgroup_member(pid_t pid, const char *group) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    int r = fd >= 0 ? fawn_read_all(&text, &len, fd, 1 << 16) : -1;
    if (fd >= 0)
        close(fd);
    if (r < 0)
        return 0;
    char needle[64];
    snprintf(needle, sizeof needle, "/fawn/%s", group);
    size_t nlen = strlen(needle);
    bool any_fawn = false;
    for (char *line = text; line && *line;) {
        char *end = strchr(line, '\n');
        if (end)
            *end = '\0';
        for (const char *at = strstr(line, needle); at; at = strstr(at + 1, needle))
            if (at[nlen] == '\0' || at[nlen] == '/')
                return 1;
        any_fawn |= strstr(line, "/fawn/") != NULL;
        line = end ? end + 1 : NULL;
    }
    return any_fawn ? -1 : 0;
}

void local_attest_peer(enum sbx_attestation *out, const fawn_config *cfg, const char *sandbox_id,
                       const sbx_peer *peer) {
    *out = SBX_ATTEST_UNKNOWN;
    char group[40];
    if (peer->pid <= 0 || cgroup_name(group, cfg, sandbox_id) < 0)
        return;
    ino_t ns = pidns_of(peer->pid), own = pidns_of(0);
    size_t depth = pidns_depth(peer->pid), own_depth = pidns_depth(0);
    if (!ns || !own || !depth || !own_depth)
        return;
    /* A process of this host's pid namespace (or of an outer one) is no
     * sandbox's: a box is PID 1 of a namespace below it (its commands may be
     * deeper still). */
    if (ns == own || depth <= own_depth || peer->uid != sbx_host_uid(sandbox_id)) {
        log_warn("sandbox",
                 "sandbox %s: broker peer pid %d uid %u is not its process (pid namespace %s, "
                 "depth %zu, more than %zu expected; uid %u expected)",
                 sandbox_id, (int)peer->pid, (unsigned)peer->uid,
                 ns == own ? "the host's" : "a child", depth, own_depth,
                 (unsigned)sbx_host_uid(sandbox_id));
        *out = SBX_REFUSED;
        return;
    }
    int member = cgroup_member(peer->pid, group);
    if (member <= 0) {
        log_warn("sandbox", "sandbox %s: broker peer pid %d is %s", sandbox_id, (int)peer->pid,
                 member < 0 ? "in another cgroup" : "in no cgroup of fawn's (cannot tell)");
        *out = member < 0 ? SBX_REFUSED : SBX_ATTEST_UNKNOWN;
        return;
    }
    /* Everything read belonged to the peer only if it still runs (a pid is
     * not reused while its process lives). */
    if (peer->pidfd < 0 || syscall(SYS_pidfd_send_signal, peer->pidfd, 0, NULL, 0) < 0)
        return;
    *out = SBX_ATTESTED;
}
