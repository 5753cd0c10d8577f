#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

/* The text parsers are internal to the module: compile it in to reach them. */
#include "sandbox/cgroup.c"

#include "cli/cli.h"
#include "cli/doctor.h"

#define MIB ((uint64_t)1 << 20)

/* ---- /proc/self/cgroup ---- */

static void parse_self_ok(cg_self *s, const char *text) {
    int r = cg_parse_self(s, text, strlen(text));
    if (r < 0)
        fail_msg("cg_parse_self: %s", fawn_errmsg());
}

static void test_self_v1_only(void **state) {
    cg_self s;
    parse_self_ok(&s, "11:pids:/user.slice/user-1000.slice\n"
                      "10:memory:/user.slice/user-1000.slice/session-2.scope\n"
                      "3:cpu,cpuacct:/elsewhere\n"
                      "1:name=systemd:/user.slice\n");
    assert_string_equal(s.v2, "");
    assert_string_equal(s.memory, "/user.slice/user-1000.slice/session-2.scope");
    assert_string_equal(s.pids, "/user.slice/user-1000.slice");
}

static void test_self_v2_only(void **state) {
    cg_self s;
    parse_self_ok(&s, "0::/system.slice/fawn.service\n");
    assert_string_equal(s.v2, "/system.slice/fawn.service");
    assert_string_equal(s.memory, "");
    assert_string_equal(s.pids, "");
    /* No trailing newline, and a colon inside the path. */
    parse_self_ok(&s, "0::/odd:name");
    assert_string_equal(s.v2, "/odd:name");
}

static void test_self_hybrid_and_comounted(void **state) {
    cg_self s;
    /* This host's shape: v1 controllers plus an empty v2 hierarchy. */
    parse_self_ok(&s, "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/0804f0\n1:cpu:/\n0::/\n");
    assert_string_equal(s.v2, "/");
    assert_string_equal(s.memory, "/process_api/0804f0");
    assert_string_equal(s.pids, "/");
    /* memory and pids co-mounted in one hierarchy; "memory_x" is not "memory". */
    parse_self_ok(&s, "5:memory_x:/no\n3:pids,memory:/both\n");
    assert_string_equal(s.memory, "/both");
    assert_string_equal(s.pids, "/both");
    /* A v1 line with hierarchy id 0 is not the v2 line. */
    parse_self_ok(&s, "0:cpu:/not-v2\n");
    assert_string_equal(s.v2, "");
    parse_self_ok(&s, "");
    assert_string_equal(s.v2, "");
}

static void test_self_malformed(void **state) {
    static const char *const bad[] = {
        "garbage\n",
        "4:memory\n",
        "x:memory:/a\n",
        ":memory:/a\n",
        "4:memory:relative/path\n",
        "4:memory:\n",
        "-1:memory:/a\n",
    };
    cg_self s;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_int_equal(cg_parse_self(&s, bad[i], strlen(bad[i])), FAWN_EINVAL);
    static const char nul[] = "4:memory:/a\0b\n";
    assert_int_equal(cg_parse_self(&s, nul, sizeof nul - 1), FAWN_EINVAL);
}

static void test_self_limits(void **state) {
    cg_self s;
    char line[1024];
    memset(line, 'a', sizeof line);
    memcpy(line, "4:memory:/", 10);
    line[sizeof line - 1] = '\n';
    assert_int_equal(cg_parse_self(&s, line, sizeof line), FAWN_E2BIG);
    /* A long path on a hierarchy we do not use is not an error. */
    memcpy(line, "7:blkio:/", 9);
    assert_int_equal(cg_parse_self(&s, line, sizeof line), 0);
    size_t n = (size_t)CG_MAX_LINES + 1;
    char *many = malloc(n);
    assert_non_null(many);
    memset(many, '\n', n);
    assert_int_equal(cg_parse_self(&s, many, n), FAWN_E2BIG);
    free(many);
}

/* ---- /proc/self/mountinfo ---- */

static const char host_mountinfo[] =
    "22 1 0:21 / / rw,relatime - ext4 /dev/vda rw\n"
    "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n"
    "35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
    "39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids\n"
    "40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n"
    "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";

static void parse_mounts_ok(cg_mounts *m, const char *text, const cg_self *s) {
    int r = cg_parse_mountinfo(m, text, strlen(text), s);
    if (r < 0)
        fail_msg("cg_parse_mountinfo: %s", fawn_errmsg());
}

static void test_mountinfo_hybrid(void **state) {
    cg_self s;
    parse_self_ok(&s, "8:pids:/\n4:memory:/process_api/0804f0\n0::/\n");
    cg_mounts m;
    parse_mounts_ok(&m, host_mountinfo, &s);
    assert_string_equal(m.v2.point, "/sys/fs/cgroup/unified");
    assert_string_equal(m.memory.point, "/sys/fs/cgroup/memory");
    assert_string_equal(m.memory.root, "/");
    assert_string_equal(m.pids.point, "/sys/fs/cgroup/pids");
    char dir[CG_PATH_MAX], why[CG_WHY_MAX];
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m.memory, s.memory, why, sizeof why), 0);
    assert_string_equal(dir, "/sys/fs/cgroup/memory/process_api/0804f0");
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m.pids, s.pids, why, sizeof why), 0);
    assert_string_equal(dir, "/sys/fs/cgroup/pids");
}

static void test_mountinfo_v1_only(void **state) {
    cg_self s;
    parse_self_ok(&s, "8:pids:/a\n4:memory:/b\n");
    cg_mounts m;
    parse_mounts_ok(&m,
                    "35 31 0:32 / /cg/mem rw - cgroup cgroup rw,memory\n"
                    "39 31 0:36 / /cg/pids rw shared:7 master:2 - cgroup none rw,pids\n",
                    &s);
    assert_string_equal(m.v2.point, "");
    assert_string_equal(m.memory.point, "/cg/mem");
    assert_string_equal(m.pids.point, "/cg/pids");
}

static void test_mountinfo_v2_only(void **state) {
    cg_self s;
    parse_self_ok(&s, "0::/system.slice/fawn.service\n");
    cg_mounts m;
    parse_mounts_ok(&m,
                    "30 23 0:26 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - "
                    "cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot\n",
                    &s);
    assert_string_equal(m.v2.point, "/sys/fs/cgroup");
    /* "memory_recursiveprot" is a cgroup2 option, not a v1 memory mount. */
    assert_string_equal(m.memory.point, "");
    char dir[CG_PATH_MAX], why[CG_WHY_MAX];
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m.v2, s.v2, why, sizeof why), 0);
    assert_string_equal(dir, "/sys/fs/cgroup/system.slice/fawn.service");
}

static void test_mountinfo_escapes(void **state) {
    cg_self s;
    parse_self_ok(&s, "4:memory:/my group/x\\y\n0::/\n");
    cg_mounts m;
    parse_mounts_ok(
        &m,
        "35 31 0:32 /my\\040group /mnt/cg\\040mem\\011tab rw - cgroup cgroup rw,memory\n"
        "41 31 0:38 / /mnt/back\\134slash rw - cgroup2 cgroup2 rw\n",
        &s);
    assert_string_equal(m.memory.root, "/my group");
    assert_string_equal(m.memory.point, "/mnt/cg mem\ttab");
    assert_string_equal(m.v2.point, "/mnt/back\\slash");
    char dir[CG_PATH_MAX], why[CG_WHY_MAX];
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m.memory, s.memory, why, sizeof why), 0);
    assert_string_equal(dir, "/mnt/cg mem\ttab/x\\y");
}

static void test_mountinfo_picks_covering_root(void **state) {
    cg_self s;
    parse_self_ok(&s, "4:memory:/docker/abc\n");
    cg_mounts m;
    /* "/docker/ab" is a string prefix of our group but not an ancestor. */
    parse_mounts_ok(&m,
                    "35 31 0:32 /docker/ab /wrong rw - cgroup cgroup rw,memory\n"
                    "36 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                    "37 31 0:32 / /later rw - cgroup cgroup rw,memory\n",
                    &s);
    assert_string_equal(m.memory.point, "/sys/fs/cgroup/memory");
    char dir[CG_PATH_MAX], why[CG_WHY_MAX];
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m.memory, s.memory, why, sizeof why), 0);
    assert_string_equal(dir, "/sys/fs/cgroup/memory");
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m.memory, "/docker/abc/sub", why, sizeof why),
                     0);
    assert_string_equal(dir, "/sys/fs/cgroup/memory/sub");
    /* No mount shows a group outside every root. */
    parse_self_ok(&s, "4:memory:/elsewhere\n");
    parse_mounts_ok(
        &m, "36 31 0:32 /docker/abc /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n", &s);
    assert_string_equal(m.memory.point, "");
}

static void test_mountinfo_malformed(void **state) {
    static const char *const bad[] = {
        "35 31 0:32 / /cg rw cgroup cgroup rw,memory\n",         /* no "-" separator */
        "35 31 0:32 / /cg rw - cgroup cgroup\n",                 /* no super options */
        "35 31 0:32 / /cg\\04 rw - cgroup cgroup rw,memory\n",   /* cut escape */
        "35 31 0:32 / /cg\\999 rw - cgroup cgroup rw,memory\n",  /* not octal */
        "35 31 0:32 / /cg\\000x rw - cgroup cgroup rw,memory\n", /* escaped NUL */
        "35 31 0:32 / /cg\\777 rw - cgroup cgroup rw,memory\n",  /* past a byte */
        "35 31 0:32 / /cg\\ rw - cgroup cgroup rw,memory\n",     /* lone backslash */
        "35 31 0:32 / relative rw - cgroup2 cgroup2 rw\n",       /* relative point */
        "35 31 0:32\n",
    };
    cg_self s;
    parse_self_ok(&s, "4:memory:/\n0::/\n");
    cg_mounts m;
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_int_equal(cg_parse_mountinfo(&m, bad[i], strlen(bad[i]), &s), FAWN_EINVAL);
    static const char nul[] = "41 31 0:38 / /cg\0x rw - cgroup2 cgroup2 rw\n";
    assert_int_equal(cg_parse_mountinfo(&m, nul, sizeof nul - 1, &s), FAWN_EINVAL);
    /* An overlong mount point, and a line with more fields than any real one. */
    char line[2048];
    int n = snprintf(line, sizeof line, "41 31 0:38 / /%0700d rw - cgroup2 cgroup2 rw\n", 0);
    assert_int_equal(cg_parse_mountinfo(&m, line, (size_t)n, &s), FAWN_EINVAL);
    fbuf b = {0};
    assert_int_equal(fbuf_printf(&b, "41 31 0:38 / /cg rw"), 0);
    for (int i = 0; i < CG_MAX_FIELDS; i++)
        assert_int_equal(fbuf_printf(&b, " tag:%d", i), 0);
    assert_int_equal(fbuf_printf(&b, " - cgroup2 cgroup2 rw\n"), 0);
    assert_int_equal(cg_parse_mountinfo(&m, b.data, b.len, &s), FAWN_EINVAL);
    fbuf_free(&b);
    /* Lines of other filesystems are not decoded, so their oddities do not matter. */
    static const char other[] = "22 1 0:21 / /x\\9 rw - ext4 /dev/vda rw\n";
    assert_int_equal(cg_parse_mountinfo(&m, other, strlen(other), &s), 0);
}

static void test_group_dir(void **state) {
    cg_mount m = {.point = "/sys/fs/cgroup", .root = "/"};
    char dir[CG_PATH_MAX], why[CG_WHY_MAX];
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m, "/", why, sizeof why), 0);
    assert_string_equal(dir, "/sys/fs/cgroup");
    /* A group outside our cgroup namespace shows as "/../..". */
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m, "/../../x", why, sizeof why), FAWN_EINVAL);
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m, "/a/./b", why, sizeof why), FAWN_EINVAL);
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m, "/a/..", why, sizeof why), FAWN_EINVAL);
    assert_int_equal(cg_group_dir(dir, sizeof dir, &m, "relative", why, sizeof why), FAWN_EINVAL);
    char tiny[20];
    assert_int_equal(cg_group_dir(tiny, sizeof tiny, &m, "/a-rather-long-group", why, sizeof why),
                     FAWN_E2BIG);
}

/* ---- argument checks ---- */

static void test_setup_refuses_bad_names(void **state) {
    char long_name[66];
    memset(long_name, 'a', 65);
    long_name[65] = '\0';
    const char *const bad[] = {
        "",     "..",     "../x", "a/b", "a b", "a\nb", "a.b", "%2e%2e", "\xc3\xa9t\xc3\xa9",
        "a\\b", long_name};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        cgroup_handle h;
        memset(&h, 0x5a, sizeof h);
        assert_int_equal(cgroup_setup(&h, bad[i], getpid(), 64 * MIB, 16), FAWN_EINVAL);
        assert_int_equal(h.mode, CGROUP_NONE);
        assert_string_equal(h.v1_memory, "");
    }
    cgroup_handle h;
    assert_int_equal(cgroup_setup(&h, NULL, getpid(), 0, 0), FAWN_EINVAL);
}

static void test_setup_refuses_bad_pid(void **state) {
    cgroup_handle h;
    assert_int_equal(cgroup_setup(&h, "fine", -1, 0, 0), FAWN_EINVAL);
    assert_int_equal(cgroup_setup(&h, "fine", -5, 0, 0), FAWN_EINVAL);
    cgroup_destroy(&h); /* safe on CGROUP_NONE */
    assert_int_equal(h.mode, CGROUP_NONE);
}

static void test_warn_once(void **state) {
    char dir[] = "/tmp/fawn-cgtest-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/stderr", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    int saved = dup(STDERR_FILENO);
    dup2(fd, STDERR_FILENO);
    atomic_store(&cg_warned, false);
    cg_warn_once("why two", "why one");
    cg_warn_once("again", "again");
    dup2(saved, STDERR_FILENO);
    close(saved);
    char text[2048] = "";
    ssize_t n = pread(fd, text, sizeof text - 1, 0);
    close(fd);
    unlink(path);
    rmdir(dir);
    assert_true(n > 0);
    text[n] = '\0';
    assert_non_null(strstr(text, "no usable cgroup (v2: why two; v1: why one); sandboxes fall "
                                 "back to rlimits only (RLIMIT_AS, RLIMIT_NPROC)"));
    assert_null(strstr(text, "again"));
    assert_int_equal(strchr(text, '\n') - text, (long)strlen(text) - 1); /* one line */
}

static void read_file(char *buf, size_t cap, const char *dir, const char *file) {
    char path[CG_FILE_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        fail_msg("open %s: %s", path, strerror(errno));
    ssize_t n = read(fd, buf, cap - 1);
    close(fd);
    assert_true(n >= 0);
    buf[n] = '\0';
}

/* ---- v2 logic against a fake cgroup2 tree (this host has no v2 controllers) ---- */

static void put_file(const char *dir, const char *file, const char *text) {
    char path[CG_FILE_PATH_MAX];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void test_v2_fake_tree(void **state) {
    char root[] = "/tmp/fawn-cgtest-XXXXXX";
    assert_non_null(mkdtemp(root));
    char svc[128], top[256], got[64], why[CG_WHY_MAX];
    snprintf(svc, sizeof svc, "%s/svc", root);
    snprintf(top, sizeof top, "%s/fawn", svc);
    assert_int_equal(mkdir(svc, 0700), 0);
    assert_int_equal(mkdir(top, 0700), 0);
    put_file(svc, "cgroup.controllers", "cpu io\n");
    put_file(svc, "cgroup.subtree_control", "");
    put_file(top, "cgroup.subtree_control", "");
    cg_host host;
    memset(&host, 0, sizeof host);
    snprintf(host.self.v2, sizeof host.self.v2, "/svc");
    snprintf(host.mounts.v2.point, sizeof host.mounts.v2.point, "%s", root);
    snprintf(host.mounts.v2.root, sizeof host.mounts.v2.root, "/");

    cgroup_handle h = {.mode = CGROUP_NONE};
    const cg_want box = {.name = "box", .adopt = false};
    /* Without memory and pids to give, v2 is refused with the reason. */
    assert_int_equal(cg_v2_create(h.v2_path, sizeof h.v2_path, &host, &box, why, sizeof why),
                     -ENOTSUP);
    assert_non_null(strstr(why, "without memory and pids"));
    assert_string_equal(h.v2_path, "");

    put_file(svc, "cgroup.controllers", "cpu memory io pids\n");
    assert_int_equal(cg_v2_create(h.v2_path, sizeof h.v2_path, &host, &box, why, sizeof why), 0);
    char want[CG_PATH_MAX];
    snprintf(want, sizeof want, "%s/box", top);
    assert_string_equal(h.v2_path, want);
    /* Controllers were enabled on the way down. */
    read_file(got, sizeof got, svc, "cgroup.subtree_control");
    assert_string_equal(got, "+memory +pids");
    read_file(got, sizeof got, top, "cgroup.subtree_control");
    assert_string_equal(got, "+memory +pids");

    put_file(h.v2_path, "memory.max", "");
    put_file(h.v2_path, "memory.swap.max", "");
    put_file(h.v2_path, "pids.max", "");
    put_file(h.v2_path, "cgroup.procs", "");
    assert_int_equal(cg_v2_configure(&h, 4242, 64 * MIB, 16), 0);
    read_file(got, sizeof got, h.v2_path, "memory.max");
    assert_string_equal(got, "67108864");
    read_file(got, sizeof got, h.v2_path, "memory.swap.max");
    assert_string_equal(got, "0");
    read_file(got, sizeof got, h.v2_path, "pids.max");
    assert_string_equal(got, "16");
    read_file(got, sizeof got, h.v2_path, "cgroup.procs");
    assert_string_equal(got, "4242");
    /* A control file that cannot be written is an error naming it. */
    unlink(want);
    char pids_max[CG_FILE_PATH_MAX];
    snprintf(pids_max, sizeof pids_max, "%s/pids.max", h.v2_path);
    unlink(pids_max);
    assert_int_equal(mkdir(pids_max, 0700), 0);
    assert_int_equal(cg_v2_configure(&h, 4242, 0, 16), FAWN_EIO);
    assert_non_null(strstr(fawn_errmsg(), "pids.max"));
    assert_int_equal(nftw(root, remove_entry, 16, FTW_DEPTH | FTW_PHYS), 0);
}

/* ---- real groups on this host ---- */

typedef struct live {
    pid_t child; /* the process put in the group, or -1 */
    pid_t pgid;  /* its process group, which its own children share */
    int go;      /* write end of the pipe the child waits on */
    cgroup_handle h;
} live;

static int live_setup(void **state) {
    live *l = calloc(1, sizeof *l);
    if (!l)
        return -1;
    l->child = -1;
    l->pgid = -1;
    l->go = -1;
    *state = l;
    return 0;
}

static int live_teardown(void **state) {
    live *l = *state;
    cgroup_destroy(&l->h);
    /* Whatever a failed test left behind, orphans included, goes too. */
    if (l->pgid > 0)
        kill(-l->pgid, SIGKILL);
    if (l->child > 0) {
        kill(l->child, SIGKILL);
        waitpid(l->child, NULL, 0);
    }
    if (l->go >= 0)
        close(l->go);
    free(l);
    return 0;
}

static void body_sleep(void) {
    for (;;)
        pause();
}

/* Forks until refused; exits with the number of children it made. */
static void body_fork_many(void) {
    int made = 0;
    for (int i = 0; i < 32; i++) {
        pid_t p = fork();
        if (p == 0)
            body_sleep();
        if (p < 0)
            break;
        made++;
    }
    _exit(made);
}

/* Touches 256 MiB; exits 0 only if no memory limit stopped it. */
static void body_eat_memory(void) {
    size_t n = 256 * MIB;
    char *p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1,
                   0);
    if (p == MAP_FAILED)
        _exit(3);
    for (size_t i = 0; i < n; i += 4096)
        p[i] = 1;
    _exit(0);
}

/* Forks a child, leader of its own process group and with stdout and stderr
 * on /dev/null (so no orphan holds the test's output open), that waits for
 * one byte on a pipe, then runs body. */
static pid_t spawn_waiting(int *go, void (*body)(void)) {
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        setpgid(0, 0);
        int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
        dup2(null_fd, STDOUT_FILENO);
        dup2(null_fd, STDERR_FILENO);
        close(p[1]);
        char c;
        if (read(p[0], &c, 1) == 1)
            body();
        body_sleep();
    }
    setpgid(pid, pid);
    close(p[0]);
    *go = p[1];
    return pid;
}

static void release(int *go) {
    assert_int_equal(write(*go, "g", 1), 1);
    close(*go);
    *go = -1;
}

/* Reaps pid within 10 s (a regression must fail the test, not hang it). */
static int wait_exit(pid_t pid) {
    int status = 0;
    for (int i = 0; i < 1000; i++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        assert_int_equal(r, 0);
        usleep(10000);
    }
    fail_msg("process %d did not exit within 10 s", (int)pid);
    return -1;
}

static void setup_ok(cgroup_handle *h, const char *name, pid_t pid, uint64_t mem, uint64_t pids) {
    int r = cgroup_setup(h, name, pid, mem, pids);
    if (r < 0)
        fail_msg("cgroup_setup: %s", fawn_errmsg());
    /* This host has usable cgroups (v1 as root): CGROUP_NONE is a failure here. */
    if (h->mode == CGROUP_NONE)
        fail_msg("cgroup_setup fell back to CGROUP_NONE on a host with usable cgroups");
}

static bool ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static bool dir_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

static void test_roundtrip(void **state) {
    live *l = *state;
    l->pgid = l->child = spawn_waiting(&l->go, body_sleep);
    /* A name of the largest allowed length. */
    char name[65];
    int n = snprintf(name, sizeof name, "rt-%d-", (int)getpid());
    memset(name + n, 'x', 64 - (size_t)n);
    name[64] = '\0';
    setup_ok(&l->h, name, l->child, 64 * MIB, 16);

    char proc[64], text[4096], suffix[80];
    snprintf(proc, sizeof proc, "/proc/%d/cgroup", (int)l->child);
    int fd = open(proc, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    ssize_t len = read(fd, text, sizeof text - 1);
    close(fd);
    assert_true(len > 0);
    cg_self s;
    assert_int_equal(cg_parse_self(&s, text, (size_t)len), 0);
    snprintf(suffix, sizeof suffix, "/fawn/%s", name);

    char dirs[2][CG_PATH_MAX];
    char got[64];
    if (l->h.mode == CGROUP_V2) {
        assert_true(ends_with(s.v2, suffix));
        assert_true(ends_with(l->h.v2_path, suffix));
        read_file(got, sizeof got, l->h.v2_path, "memory.max");
        assert_string_equal(got, "67108864\n");
        read_file(got, sizeof got, l->h.v2_path, "pids.max");
        assert_string_equal(got, "16\n");
        snprintf(dirs[0], sizeof dirs[0], "%s", l->h.v2_path);
        snprintf(dirs[1], sizeof dirs[1], "%s", l->h.v2_path);
    } else {
        assert_int_equal(l->h.mode, CGROUP_V1);
        assert_true(ends_with(s.memory, suffix));
        assert_true(ends_with(s.pids, suffix));
        read_file(got, sizeof got, l->h.v1_memory, "memory.limit_in_bytes");
        assert_string_equal(got, "67108864\n");
        read_file(got, sizeof got, l->h.v1_pids, "pids.max");
        assert_string_equal(got, "16\n");
        snprintf(dirs[0], sizeof dirs[0], "%s", l->h.v1_memory);
        snprintf(dirs[1], sizeof dirs[1], "%s", l->h.v1_pids);
    }
    assert_true(dir_exists(dirs[0]) && dir_exists(dirs[1]));

    cgroup_destroy(&l->h);
    assert_int_equal(l->h.mode, CGROUP_NONE);
    int status = wait_exit(l->child);
    l->child = -1;
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
    assert_false(dir_exists(dirs[0]));
    assert_false(dir_exists(dirs[1]));
    cgroup_destroy(&l->h); /* a second destroy is harmless */
}

static void test_pids_limit_enforced(void **state) {
    live *l = *state;
    l->pgid = l->child = spawn_waiting(&l->go, body_fork_many);
    char name[32];
    snprintf(name, sizeof name, "pids-%d", (int)getpid());
    setup_ok(&l->h, name, l->child, 0, 16);
    release(&l->go);
    int status = wait_exit(l->child);
    l->child = -1;
    assert_true(WIFEXITED(status));
    /* 16 tasks in all: the child itself and 15 of its own. */
    assert_int_equal(WEXITSTATUS(status), 15);
    /* destroy kills the 15 left behind (no longer our children) and removes the group. */
    char dir[CG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", l->h.mode == CGROUP_V2 ? l->h.v2_path : l->h.v1_pids);
    cgroup_destroy(&l->h);
    assert_false(dir_exists(dir));
}

static void test_memory_limit_enforced(void **state) {
    live *l = *state;
    l->pgid = l->child = spawn_waiting(&l->go, body_eat_memory);
    char name[32];
    snprintf(name, sizeof name, "mem-%d", (int)getpid());
    setup_ok(&l->h, name, l->child, 64 * MIB, 0);
    release(&l->go);
    int status = wait_exit(l->child);
    l->child = -1;
    /* The OOM killer ends it; it never gets to exit normally. */
    assert_true(WIFSIGNALED(status));
    assert_int_equal(WTERMSIG(status), SIGKILL);
}

static void test_name_in_use_refused(void **state) {
    live *l = *state;
    l->pgid = l->child = spawn_waiting(&l->go, body_sleep);
    char name[32];
    snprintf(name, sizeof name, "dup-%d", (int)getpid());
    setup_ok(&l->h, name, l->child, 0, 16);
    int go = -1;
    pid_t other = spawn_waiting(&go, body_sleep);
    char proc[64], text[4096];
    snprintf(proc, sizeof proc, "/proc/%d/cgroup", (int)other);
    cgroup_handle second;
    int r = cgroup_setup(&second, name, other, 0, 16);
    int fd = open(proc, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, text, sizeof text - 1) : -1;
    if (fd >= 0)
        close(fd);
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
    close(go);
    assert_int_equal(r, FAWN_EEXIST);
    assert_int_equal(second.mode, CGROUP_NONE);
    /* The second process was not moved, and the live group keeps its process. */
    assert_true(n > 0);
    text[n] = '\0';
    assert_null(strstr(text, name));
    assert_int_equal(kill(l->child, 0), 0);
    char dir[CG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", l->h.mode == CGROUP_V2 ? l->h.v2_path : l->h.v1_memory);
    assert_true(dir_exists(dir));
}

static void test_stale_group_replaced(void **state) {
    live *l = *state;
    l->pgid = l->child = spawn_waiting(&l->go, body_sleep);
    char name[32];
    snprintf(name, sizeof name, "stale-%d", (int)getpid());
    setup_ok(&l->h, name, l->child, 0, 16);
    /* The sandbox dies without a destroy: its group stays, empty. */
    kill(l->child, SIGKILL);
    waitpid(l->child, NULL, 0);
    memset(&l->h, 0, sizeof l->h);
    l->pgid = l->child = spawn_waiting(&l->go, body_sleep);
    setup_ok(&l->h, name, l->child, 0, 16);
    char proc[64], text[4096];
    snprintf(proc, sizeof proc, "/proc/%d/cgroup", (int)l->child);
    int fd = open(proc, O_RDONLY | O_CLOEXEC);
    ssize_t n = read(fd, text, sizeof text - 1);
    close(fd);
    assert_true(n > 0);
    text[n] = '\0';
    assert_non_null(strstr(text, name));
}

static void test_destroy_by_name(void **state) {
    live *l = *state;
    l->pgid = l->child = spawn_waiting(&l->go, body_sleep);
    char name[32];
    snprintf(name, sizeof name, "byname-%d", (int)getpid());
    setup_ok(&l->h, name, l->child, 0, 16);
    /* Another process knows only the name: pid 0 adopts the live group. */
    cgroup_handle other;
    setup_ok(&other, name, 0, 0, 0);
    assert_int_equal(other.mode, l->h.mode);
    assert_string_equal(other.v2_path, l->h.v2_path);
    assert_string_equal(other.v1_memory, l->h.v1_memory);
    assert_int_equal(kill(l->child, 0), 0);
    cgroup_destroy(&other);
    int status = wait_exit(l->child);
    l->child = -1;
    assert_true(WIFSIGNALED(status));
    char dir[CG_PATH_MAX];
    snprintf(dir, sizeof dir, "%s", l->h.mode == CGROUP_V2 ? l->h.v2_path : l->h.v1_memory);
    assert_false(dir_exists(dir));
    cgroup_destroy(&l->h); /* the first handle's group is already gone: harmless */
}

static void test_probe_usable_and_clean(void **state) {
    cgroup_caps caps;
    cgroup_probe(&caps);
    if (caps.mode == CGROUP_NONE)
        fail_msg("cgroup_probe: %s", caps.detail);
    assert_true(caps.memory);
    assert_true(caps.pids);
    assert_true(caps.detail[0] != '\0');
    /* The test group is gone again. */
    cg_host host;
    assert_int_equal(cg_host_load(&host), 0);
    char base[CG_PATH_MAX], why[CG_WHY_MAX], leaf[CG_FILE_PATH_MAX];
    const cg_mount *m = caps.mode == CGROUP_V2 ? &host.mounts.v2 : &host.mounts.memory;
    const char *own = caps.mode == CGROUP_V2 ? host.self.v2 : host.self.memory;
    assert_int_equal(cg_group_dir(base, sizeof base, m, own, why, sizeof why), 0);
    snprintf(leaf, sizeof leaf, "%s/fawn/probe-%d", base, (int)getpid());
    assert_false(dir_exists(leaf));
}

/* ---- doctor ---- */

static void test_doctor_probe_host(void **state) {
    doctor_report r;
    int rc = doctor_probe(&r, "/tmp");
    for (size_t i = 0; i < DOCTOR_N_FEATURES; i++)
        if (!r.checks[i].ok)
            print_message("# %s missing: %s\n", r.checks[i].name, r.checks[i].detail);
    assert_int_equal(rc, 0);
    assert_true(r.local_ready);
    assert_true(r.checks[DOCTOR_USER_NS].ok);
    assert_true(r.checks[DOCTOR_MOUNT_NS].ok);
    assert_true(r.checks[DOCTOR_PID_NS].ok);
    assert_true(r.checks[DOCTOR_PIVOT_ROOT].ok);
    assert_true(r.checks[DOCTOR_SECCOMP].ok);
    assert_true(r.checks[DOCTOR_CGROUPS].ok);
    assert_int_not_equal(r.cgroup.mode, CGROUP_NONE);
    assert_string_equal(r.checks[DOCTOR_USER_NS].name, "user_namespace");
    assert_true(r.checks[DOCTOR_USER_NS].required);
    assert_false(r.checks[DOCTOR_NET_NS].required);
    assert_false(r.checks[DOCTOR_CGROUPS].required);
    assert_true(r.checks[DOCTOR_SECCOMP].required);
    for (size_t i = 0; i < DOCTOR_N_FEATURES; i++)
        assert_non_null(r.checks[i].without);
}

static char *capture_print(const doctor_report *r) {
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    assert_non_null(f);
    doctor_print(f, r);
    fclose(f);
    return text;
}

static void test_doctor_reports_missing(void **state) {
    doctor_report r;
    assert_int_equal(doctor_probe(&r, "/tmp"), 0);
    char *text = capture_print(&r);
    assert_non_null(strstr(text, "user namespaces"));
    assert_non_null(strstr(text, "local provider: ready"));
    free(text);

    /* As a host without user namespaces and with a detail that is not UTF-8 would report. */
    r.checks[DOCTOR_USER_NS].ok = false;
    snprintf(r.checks[DOCTOR_USER_NS].detail, DOCTOR_DETAIL_MAX, "bad \xff\xfe bytes");
    r.checks[DOCTOR_NET_NS].ok = false;
    r.local_ready = false;
    text = capture_print(&r);
    assert_non_null(strstr(text, "no user namespaces: the local provider cannot start sandboxes; "
                                 "use a remote box"));
    assert_non_null(strstr(text, "no network namespace: sandbox.network must be 'host'"));
    assert_non_null(strstr(text, "cannot start sandboxes here (missing: user namespaces)"));
    free(text);

    json_t *j = NULL;
    assert_int_equal(doctor_to_json(&j, &r), 0);
    assert_false(json_is_true(json_object_get(j, "local_provider_ready")));
    json_t *user = json_object_get(json_object_get(j, "features"), "user_namespace");
    assert_string_equal(json_string_value(json_object_get(user, "status")), "missing");
    assert_string_equal(json_string_value(json_object_get(user, "detail")), "bad ?? bytes");
    assert_true(json_is_true(json_object_get(user, "required")));
    json_t *seccomp = json_object_get(json_object_get(j, "features"), "seccomp");
    assert_string_equal(json_string_value(json_object_get(seccomp, "status")), "ok");
    const char *mode = json_string_value(json_object_get(json_object_get(j, "cgroup"), "mode"));
    assert_true(strcmp(mode, "v1") == 0 || strcmp(mode, "v2") == 0);
    assert_int_equal(json_object_size(json_object_get(j, "features")), DOCTOR_N_FEATURES);
    json_decref(j);
}

/* Runs cli_doctor with stdout sent to a file; returns its status and output. */
static int run_cli_doctor(char **out, int argc, char **argv) {
    char dir[] = "/tmp/fawn-cgtest-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/stdout", dir);
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    int null_fd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_true(null_fd >= 0);
    fflush(stdout);
    int saved_out = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    dup2(fd, STDOUT_FILENO);
    dup2(null_fd, STDERR_FILENO);
    int rc = cli_doctor(argc, argv);
    fflush(stdout);
    dup2(saved_out, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    close(saved_out);
    close(saved_err);
    close(null_fd);
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    *out = calloc(1, (size_t)st.st_size + 1);
    assert_non_null(*out);
    assert_int_equal(pread(fd, *out, (size_t)st.st_size, 0), st.st_size);
    close(fd);
    unlink(path);
    rmdir(dir);
    return rc;
}

static void test_cli_doctor(void **state) {
    char *argv_bad[] = {"doctor", "--bogus", NULL};
    char *out = NULL;
    assert_int_equal(run_cli_doctor(&out, 2, argv_bad), 2);
    assert_string_equal(out, "");
    free(out);

    char *argv_help[] = {"doctor", "--help", NULL};
    assert_int_equal(run_cli_doctor(&out, 2, argv_help), 0);
    assert_non_null(strstr(out, "usage: fawn doctor [--json]"));
    free(out);

    char *argv_json[] = {"doctor", "--json", NULL};
    assert_int_equal(run_cli_doctor(&out, 2, argv_json), 0);
    json_error_t err;
    json_t *j = json_loads(out, 0, &err);
    if (!j)
        fail_msg("doctor --json printed invalid JSON: %s", err.text);
    assert_true(json_is_true(json_object_get(j, "local_provider_ready")));
    json_decref(j);
    free(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_self_v1_only),
        cmocka_unit_test(test_self_v2_only),
        cmocka_unit_test(test_self_hybrid_and_comounted),
        cmocka_unit_test(test_self_malformed),
        cmocka_unit_test(test_self_limits),
        cmocka_unit_test(test_mountinfo_hybrid),
        cmocka_unit_test(test_mountinfo_v1_only),
        cmocka_unit_test(test_mountinfo_v2_only),
        cmocka_unit_test(test_mountinfo_escapes),
        cmocka_unit_test(test_mountinfo_picks_covering_root),
        cmocka_unit_test(test_mountinfo_malformed),
        cmocka_unit_test(test_group_dir),
        cmocka_unit_test(test_setup_refuses_bad_names),
        cmocka_unit_test(test_setup_refuses_bad_pid),
        cmocka_unit_test(test_warn_once),
        cmocka_unit_test(test_v2_fake_tree),
        cmocka_unit_test_setup_teardown(test_roundtrip, live_setup, live_teardown),
        cmocka_unit_test_setup_teardown(test_pids_limit_enforced, live_setup, live_teardown),
        cmocka_unit_test_setup_teardown(test_memory_limit_enforced, live_setup, live_teardown),
        cmocka_unit_test_setup_teardown(test_name_in_use_refused, live_setup, live_teardown),
        cmocka_unit_test_setup_teardown(test_stale_group_replaced, live_setup, live_teardown),
        cmocka_unit_test_setup_teardown(test_destroy_by_name, live_setup, live_teardown),
        cmocka_unit_test(test_probe_usable_and_clean),
        cmocka_unit_test(test_doctor_probe_host),
        cmocka_unit_test(test_doctor_reports_missing),
        cmocka_unit_test(test_cli_doctor),
    };
    return cmocka_run_group_tests_name("sandbox_cgroup", tests, NULL, NULL);
}
