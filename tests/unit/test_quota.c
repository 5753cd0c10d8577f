/* Disk quotas of a thread's user-data (src/sandbox/quota.c), the measuring
 * walk under them (base/fsx), uploads against them and what doctor says.
 *
 *   test_quota              the walk and the measured mechanism, in /tmp
 *   test_quota btrfs|ext4|xfs
 *                           a kernel mechanism, each test on a filesystem of
 *                           its own (tests/quota_fs.h); a kind this host
 *                           cannot make skips the whole run, saying why
 *
 * Writes that must meet a kernel limit run in a child without
 * CAP_SYS_RESOURCE, which would let root past a project quota. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"
#include "quota_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/capability.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "base/fsx.h"
#include "base/json.h"
#include "cli/doctor.h"
#include "config/config.h"
#include "gateway/uploads.h"
#include "sandbox/manager.h"
#include "sandbox/quota.h"

#define MiB ((uint64_t)1 << 20)
/* The limit most tests give a user-data. */
#define LIMIT (8 * MiB)
/* What a write past the limit tries to put there. */
#define OVERFLOW (32 * MiB)
/* Blocks a few directories and their metadata take, beyond their files. */
#define DIR_SLACK (256 * 1024)

typedef struct fx {
    test_fs fs;     /* a kernel-quota filesystem, when the test uses one */
    char tmp[64];   /* a plain directory under /tmp otherwise */
    char root[128]; /* where the test works: fs.mnt or tmp */
    int rootfd;
} fx;

/* ---- fixtures ---- */

static int fx_open(fx *x) {
    snprintf(x->root, sizeof x->root, "%s", x->fs.mounted ? x->fs.mnt : x->tmp);
    x->rootfd = open(x->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(x->rootfd >= 0);
    return 0;
}

static int setup_tmp(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->tmp, sizeof x->tmp, "/tmp/fawn-quota-XXXXXX");
    assert_non_null(mkdtemp(x->tmp));
    *state = x;
    return fx_open(x);
}

/* The kind of filesystem a kernel run is about (prestate of its tests). */
typedef struct kind_run {
    enum test_fs_kind kind;
    enum quota_mechanism mechanism; /* what a user-data gets there */
} kind_run;

/* A fresh filesystem of the run's kind for one test. */
static int setup_kind(void **state) {
    const kind_run *k = *state;
    fx *x = calloc(1, sizeof *x);
    char why[256];
    if (!test_fs_make(&x->fs, k->kind, why, sizeof why))
        fail_msg("%s", why); /* main found it could be made */
    *state = x;
    return fx_open(x);
}

/* Replaces x's filesystem by one of another kind. */
static void fx_remake(fx *x, enum test_fs_kind kind) {
    char why[256];
    close(x->rootfd);
    test_fs_remove(&x->fs);
    if (!test_fs_make(&x->fs, kind, why, sizeof why))
        fail_msg("%s", why);
    fx_open(x);
}

static int teardown(void **state) {
    fx *x = *state;
    if (x->rootfd >= 0)
        close(x->rootfd);
    if (x->fs.mounted)
        test_fs_remove(&x->fs);
    if (x->tmp[0])
        test_fs_sh("rm -rf %s", x->tmp);
    free(x);
    return 0;
}

/* ---- helpers ---- */

static void write_file(const char *path, uint64_t bytes) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    static char chunk[64 * 1024];
    memset(chunk, 'q', sizeof chunk);
    for (uint64_t done = 0; done < bytes; done += sizeof chunk)
        assert_int_equal(fawn_write_all(fd, chunk, sizeof chunk), 0);
    close(fd);
}

/* Drops one capability from this process's effective set. */
static void drop_capability(int cap) {
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    memset(d, 0, sizeof d);
    assert_int_equal(syscall(SYS_capget, &h, d), 0);
    d[CAP_TO_INDEX(cap)].effective &= ~CAP_TO_MASK(cap);
    assert_int_equal(syscall(SYS_capset, &h, d), 0);
}

typedef struct write_outcome {
    uint64_t written;
    int err; /* errno of the write that failed, 0 when all went */
} write_outcome;

/* Writes bytes to path from a child without CAP_SYS_RESOURCE, as a
 * sandbox's command (or an unprivileged gateway) would. */
static write_outcome write_unprivileged(const char *path, uint64_t bytes) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        drop_capability(CAP_SYS_RESOURCE);
        write_outcome o = {0};
        static char chunk[64 * 1024];
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        while (fd >= 0 && o.written < bytes) {
            ssize_t n = write(fd, chunk, sizeof chunk);
            if (n < 0) {
                o.err = errno;
                break;
            }
            o.written += (uint64_t)n;
        }
        if (fd >= 0 && o.err == 0 && fsync(fd) < 0)
            o.err = errno;
        if (fd < 0)
            o.err = errno;
        _exit(write(p[1], &o, sizeof o) == sizeof o ? 0 : 1);
    }
    close(p[1]);
    write_outcome o = {0};
    assert_int_equal(read(p[0], &o, sizeof o), sizeof o);
    close(p[0]);
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    return o;
}

static uint64_t blocks_of(const char *path) {
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    return (uint64_t)st.st_blocks * 512;
}

/* True when dir holds an entry whose name starts with prefix. */
static bool has_entry(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    bool found = false;
    for (struct dirent *e; !found && (e = readdir(d));)
        found = strncmp(e->d_name, prefix, strlen(prefix)) == 0;
    closedir(d);
    return found;
}

static int open_dir(int parentfd, const char *name) {
    int fd = openat(parentfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

/* ---- the measuring walk (base/fsx) ---- */

static void usage_counts_each_block_once(void **state) {
    fx *x = *state;
    char *big = strf("%s/big", x->root), *sub = strf("%s/sub", x->root);
    char *again = strf("%s/sub/big-again", x->root), *sym = strf("%s/usr", x->root);
    char *sparse = strf("%s/sparse", x->root);
    write_file(big, MiB);
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(link(big, again), 0);     /* its blocks count once */
    assert_int_equal(symlink("/usr", sym), 0); /* never followed */
    int fd = open(sparse, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_int_equal(ftruncate(fd, (off_t)(64 * MiB)), 0); /* a hole takes no block */
    close(fd);
    uint64_t bytes = 0;
    fsx_usage_bounds b = {.max_entries = 100, .max_depth = 4};
    assert_int_equal(fsx_tree_usage(&bytes, x->rootfd, &b), 0);
    assert_true(bytes >= blocks_of(big));
    assert_true(bytes <= blocks_of(big) + DIR_SLACK);
    free(big), free(sub), free(again), free(sym), free(sparse);
}

static void usage_is_bounded(void **state) {
    fx *x = *state;
    for (int i = 0; i < 10; i++) {
        char *p = strf("%s/f%d", x->root, i);
        write_file(p, 64 * 1024);
        free(p);
    }
    uint64_t bytes = 0;
    fsx_usage_bounds few = {.max_entries = 5, .max_depth = 4};
    assert_int_equal(fsx_tree_usage(&bytes, x->rootfd, &few), FAWN_E2BIG);
    check_contains("bound", fawn_errmsg(), "more than 5 files");
    assert_true(bytes > 0); /* a lower bound */
    char path[256];
    snprintf(path, sizeof path, "%s", x->root);
    for (int depth = 0; depth < 6; depth++) {
        strcat(path, "/d");
        assert_int_equal(mkdir(path, 0755), 0);
    }
    fsx_usage_bounds shallow = {.max_entries = 100, .max_depth = 5};
    assert_int_equal(fsx_tree_usage(&bytes, x->rootfd, &shallow), FAWN_E2BIG);
    check_contains("bound", fawn_errmsg(), "deeper than 5 levels");
    fsx_usage_bounds deep = {.max_entries = 100, .max_depth = 6};
    assert_int_equal(fsx_tree_usage(&bytes, x->rootfd, &deep), 0);
}

/* ---- measured: a filesystem without the quotas fawn uses ---- */

static void measured_where_the_kernel_cannot(void **state) {
    fx *x = *state;
    quota_fs fs;
    quota_probe(&fs, x->rootfd);
    if (fs.mechanism != QUOTA_MEASURED)
        skip(); /* this host's /tmp has kernel quotas: the kernel tests cover it */
    assert_true(fs.detail[0]);
    enum quota_mechanism m = QUOTA_BTRFS;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    assert_int_equal(m, QUOTA_MEASURED);
    struct stat st;
    assert_int_equal(fstatat(x->rootfd, "user-data", &st, AT_SYMLINK_NOFOLLOW), 0);
    assert_true(S_ISDIR(st.st_mode));
    int fd = open_dir(x->rootfd, "user-data");
    assert_int_equal(quota_dir_mechanism(fd), QUOTA_MEASURED);
    uint64_t room = 0;
    assert_int_equal(quota_room(&room, fd, LIMIT), 0);
    assert_true(room <= LIMIT && room >= LIMIT - DIR_SLACK);
    char *big = strf("%s/user-data/big", x->root);
    write_file(big, LIMIT + MiB); /* nothing stops it: it is measured afterwards */
    assert_int_equal(quota_room(&room, fd, LIMIT), 0);
    assert_int_equal(room, 0);
    /* Again: the existing directory is kept as it is. */
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    assert_int_equal(blocks_of(big) >= LIMIT, 1);
    close(fd);
    free(big);
}

static void measured_refuses_what_it_cannot_measure(void **state) {
    fx *x = *state;
    enum quota_mechanism m;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    char path[512];
    int n = snprintf(path, sizeof path, "%s/user-data", x->root);
    for (int depth = 0; depth <= FSX_USER_DATA_MAX_DEPTH && n < 400; depth++)
        n += snprintf(path + n, sizeof path - (size_t)n, "/d");
    assert_int_equal(test_fs_sh("mkdir -p %s", path), 0);
    /* Deeper still, by relative steps from the last one made. */
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int depth = 0; depth <= FSX_USER_DATA_MAX_DEPTH; depth++) {
        assert_int_equal(mkdirat(fd, "d", 0755), 0);
        int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(fd);
        fd = next;
    }
    close(fd);
    fd = open_dir(x->rootfd, "user-data");
    uint64_t room = 1;
    assert_int_equal(quota_room(&room, fd, LIMIT), FAWN_E2BIG);
    check_contains("room", fawn_errmsg(), "cannot be measured (directory tree deeper than");
    assert_int_equal(room, 0);
    close(fd);
}

static void a_symlink_is_not_a_user_data(void **state) {
    fx *x = *state;
    assert_int_equal(symlinkat("/tmp", x->rootfd, "user-data"), 0);
    enum quota_mechanism m;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), FAWN_EINVAL);
}

/* ---- a kernel mechanism ---- */

/* The kind run the test is in, from the mechanism fx's filesystem offers. */
static enum quota_mechanism fx_mechanism(const fx *x) {
    quota_fs fs;
    quota_probe(&fs, x->rootfd);
    assert_int_not_equal(fs.mechanism, QUOTA_MEASURED);
    return fs.mechanism;
}

static uint32_t project_of_path(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    struct fsxattr fa;
    memset(&fa, 0, sizeof fa);
    assert_int_equal(ioctl(fd, FS_IOC_FSGETXATTR, &fa), 0);
    close(fd);
    assert_true(fa.fsx_xflags & FS_XFLAG_PROJINHERIT);
    return fa.fsx_projid;
}

/* What makes a user-data limited: its own subvolume, or its own project
 * that what is made in it inherits. */
static void check_limited_unit(const fx *x, enum quota_mechanism m, const char *name) {
    char *dir = strf("%s/%s", x->root, name), *sub = strf("%s/%s/sub", x->root, name);
    struct stat st;
    assert_int_equal(stat(dir, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0755);
    if (m == QUOTA_BTRFS) {
        assert_int_equal(st.st_ino, 256); /* the root of a subvolume */
    } else {
        uint32_t id = project_of_path(dir);
        assert_true(id >= QUOTA_PROJID_MIN && id - QUOTA_PROJID_MIN < QUOTA_PROJID_SPAN);
        assert_int_equal(mkdir(sub, 0755), 0);
        assert_int_equal(project_of_path(sub), id); /* inherited */
    }
    free(dir), free(sub);
}

static void kernel_user_data_is_limited(void **state) {
    fx *x = *state;
    enum quota_mechanism want = fx_mechanism(x), m = QUOTA_MEASURED;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    assert_int_equal(m, want);
    assert_false(has_entry(x->root, ".user-data.new-")); /* built aside, renamed in */
    check_limited_unit(x, m, "user-data");
    int fd = open_dir(x->rootfd, "user-data");
    assert_int_equal(quota_dir_mechanism(fd), want);
    char *big = strf("%s/user-data/big", x->root);
    write_outcome o = write_unprivileged(big, OVERFLOW);
    if (o.err != EDQUOT && o.err != ENOSPC)
        fail_msg("a write past the limit ended with errno %d after %llu bytes", o.err,
                 (unsigned long long)o.written);
    assert_true(blocks_of(big) <= LIMIT);
    uint64_t room = 0;
    assert_int_equal(quota_room(&room, fd, LIMIT), 0);
    /* btrfs holds every writer, fawn too; a project's count says it is full. */
    assert_true(m == QUOTA_BTRFS ? room == UINT64_MAX : room < MiB);
    /* A larger limit applies to the same directory at once. */
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", 4 * LIMIT), 0);
    char *more = strf("%s/user-data/more", x->root);
    o = write_unprivileged(more, LIMIT);
    assert_int_equal(o.err, 0);
    assert_int_equal(o.written, LIMIT);
    close(fd);
    free(big), free(more);
}

static void each_user_data_has_its_own_limit(void **state) {
    fx *x = *state;
    enum quota_mechanism m;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "a", LIMIT), 0);
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "b", LIMIT), 0);
    if (m == QUOTA_PROJECT) {
        char *a = strf("%s/a", x->root), *b = strf("%s/b", x->root);
        assert_int_not_equal(project_of_path(a), project_of_path(b));
        free(a), free(b);
    }
    char *fill = strf("%s/a/fill", x->root), *half = strf("%s/b/half", x->root);
    write_outcome o = write_unprivileged(fill, OVERFLOW);
    assert_int_not_equal(o.err, 0);
    o = write_unprivileged(half, LIMIT / 2); /* a full neighbour takes nothing from b */
    assert_int_equal(o.err, 0);
    free(fill), free(half);
}

static void older_directory_stays_measured(void **state) {
    fx *x = *state;
    assert_int_equal(mkdirat(x->rootfd, "user-data", 0755), 0); /* made before quotas */
    enum quota_mechanism m = QUOTA_BTRFS;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    assert_int_equal(m, QUOTA_MEASURED);
    char *big = strf("%s/user-data/big", x->root);
    write_file(big, 2 * MiB);
    int fd = open_dir(x->rootfd, "user-data");
    uint64_t room = 0;
    assert_int_equal(quota_room(&room, fd, LIMIT), 0);
    assert_true(room <= LIMIT - 2 * MiB);
    close(fd);
    free(big);
}

/* Under a directory in an administrator's project (inherited), a thread's
 * own project cannot nest (a rename into it would fail): measured there. */
static void admin_project_above_is_measured(void **state) {
    fx *x = *state;
    if (fx_mechanism(x) != QUOTA_PROJECT)
        return; /* btrfs runs: there are no projects */
    assert_int_equal(mkdirat(x->rootfd, "admin", 0755), 0);
    int admin = open_dir(x->rootfd, "admin");
    struct fsxattr fa;
    memset(&fa, 0, sizeof fa);
    assert_int_equal(ioctl(admin, FS_IOC_FSGETXATTR, &fa), 0);
    fa.fsx_projid = 42;
    fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
    assert_int_equal(ioctl(admin, FS_IOC_FSSETXATTR, &fa), 0);
    quota_fs fs;
    quota_probe(&fs, admin);
    assert_int_equal(fs.mechanism, QUOTA_MEASURED);
    check_contains("probe", fs.detail, "in project 42");
    enum quota_mechanism m = QUOTA_PROJECT;
    assert_int_equal(quota_dir_ensure(&m, admin, "user-data", LIMIT), 0);
    assert_int_equal(m, QUOTA_MEASURED);
    char *ud = strf("%s/admin/user-data", x->root);
    assert_int_equal(project_of_path(ud), 42); /* still the administrator's */
    close(admin);
    free(ud);
}

/* Probes from a child without CAP_SYS_ADMIN: limits cannot be set there. */
static void kernel_quotas_need_cap_sys_admin(void **state) {
    fx *x = *state;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        drop_capability(CAP_SYS_ADMIN);
        quota_fs fs;
        quota_probe(&fs, x->rootfd);
        _exit(fs.mechanism == QUOTA_MEASURED && strstr(fs.detail, "CAP_SYS_ADMIN") ? 0 : 1);
    }
    int st = 0;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

static void btrfs_without_quotas_is_measured(void **state) {
    fx *x = *state;
    fx_remake(x, TEST_FS_BTRFS);
    quota_fs fs;
    quota_probe(&fs, x->rootfd);
    assert_int_equal(fs.mechanism, QUOTA_MEASURED);
    check_contains("probe", fs.detail, "btrfs without quotas");
    enum quota_mechanism m = QUOTA_BTRFS;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    assert_int_equal(m, QUOTA_MEASURED);
    struct stat st;
    assert_int_equal(fstatat(x->rootfd, "user-data", &st, 0), 0);
    assert_int_not_equal(st.st_ino, 256); /* a plain directory */
}

/* ---- uploads against the limit ---- */

/* Streams bytes as one uploaded file into user-data/uploads; the batch's
 * result code (0 when it committed). */
static int upload_bytes(fx *x, uint64_t room, uint64_t bytes) {
    int ud = open_dir(x->rootfd, "user-data");
    mkdirat(ud, "uploads", 0755);
    int up = open_dir(ud, "uploads");
    upload_limits lim = {.max_files = 4,
                         .max_file_size = 1024 * MiB,
                         .max_total_size = 1024 * MiB,
                         .disk_room = room};
    upload_batch *b = NULL;
    assert_int_equal(upload_batch_begin(&b, up, &lim), 0);
    static char chunk[256 * 1024];
    int r = upload_file_begin(b, "data.bin");
    for (uint64_t done = 0; r == 0 && done < bytes; done += sizeof chunk)
        r = upload_file_write(b, chunk, sizeof chunk);
    if (r == 0)
        r = upload_file_end(b);
    json_t *res = NULL;
    r = r == 0 ? upload_batch_commit(b, &res, "t1") : (upload_batch_abort(b), r);
    json_decref(res);
    close(up);
    close(ud);
    return r;
}

static void upload_past_the_kernel_limit_leaves_nothing(void **state) {
    fx *x = *state;
    enum quota_mechanism m;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    int ud = open_dir(x->rootfd, "user-data");
    uint64_t room = 0;
    assert_int_equal(quota_room(&room, ud, LIMIT), 0);
    close(ud);
    /* The kernel refuses a write (btrfs; a project when fawn lacks
     * CAP_SYS_RESOURCE), or the room is short first (a project). */
    assert_int_equal(upload_bytes(x, room, OVERFLOW), FAWN_E2BIG);
    char *uploads = strf("%s/user-data/uploads", x->root);
    assert_false(has_entry(uploads, ".upload-")); /* the staging file is gone */
    assert_false(has_entry(uploads, "data.bin"));
    ud = open_dir(x->rootfd, "user-data");
    assert_int_equal(quota_room(&room, ud, LIMIT), 0);
    close(ud);
    assert_int_equal(upload_bytes(x, room, MiB), 0); /* the room is back */
    free(uploads);
}

static void upload_past_measured_room_is_refused(void **state) {
    fx *x = *state;
    enum quota_mechanism m;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    assert_int_equal(upload_bytes(x, MiB, 2 * MiB), FAWN_E2BIG);
    check_contains("upload", fawn_errmsg(), "would exceed their disk limit");
    char *uploads = strf("%s/user-data/uploads", x->root);
    assert_false(has_entry(uploads, ".upload-"));
    assert_false(has_entry(uploads, "data.bin"));
    assert_int_equal(upload_bytes(x, MiB, MiB / 2), 0);
    free(uploads);
}

/* ---- a thread's files (sbx_user_data_open) ---- */

/* The host uid of the sandbox of ("alice", "t1") when fawn runs as root:
 * 2000000000 + 0xb51a, from its id b076b51a... (sha256("alice:t1")). */
#define ALICE_T1_HOST_UID 2000046362u

/* A thread's files are made as a sandbox start makes them: limited from
 * the moment they appear, the three directories owned by the sandbox. */
static void thread_files_are_made_as_a_start_makes_them(void **state) {
    fx *x = *state;
    fawn_config cfg;
    assert_int_equal(config_defaults(&cfg), 0);
    free(cfg.home);
    cfg.home = strf("%s/home", x->root);
    cfg.sandbox.limits.disk_mb = LIMIT / MiB;
    int fd;
    POISON(fd);
    assert_int_equal(sbx_user_data_open(&fd, &cfg, "alice", "t1", false), FAWN_ENOENT);
    assert_int_equal(fd, -1);
    POISON(fd);
    assert_int_equal(sbx_user_data_open(&fd, &cfg, "alice", "../t1", true), FAWN_EINVAL);
    assert_int_equal(fd, -1);
    assert_int_equal(sbx_user_data_open(&fd, &cfg, "alice", "t1", true), 0);
    quota_fs fs;
    quota_probe(&fs, x->rootfd);
    assert_int_equal(quota_dir_mechanism(fd), fs.mechanism);
    uid_t owner = geteuid() == 0 ? ALICE_T1_HOST_UID : geteuid();
    static const char *const parts[] = {"workspace", "uploads", "outputs"};
    for (size_t i = 0; i < ARRAY_LEN(parts); i++) {
        struct stat st;
        assert_int_equal(fstatat(fd, parts[i], &st, AT_SYMLINK_NOFOLLOW), 0);
        assert_true(S_ISDIR(st.st_mode));
        assert_int_equal(st.st_uid, owner);
    }
    close(fd);
    char *big = strf("%s/users/alice/threads/t1/user-data/workspace/big", cfg.home);
    if (fs.mechanism != QUOTA_MEASURED) { /* the kernel holds it to the configured limit */
        write_outcome o = write_unprivileged(big, OVERFLOW);
        assert_true(o.err == EDQUOT || o.err == ENOSPC);
        assert_true(blocks_of(big) <= LIMIT);
    }
    /* Opened again, existing files are kept as they are. */
    assert_int_equal(sbx_user_data_open(&fd, &cfg, "alice", "t1", false), 0);
    assert_int_equal(quota_dir_mechanism(fd), fs.mechanism);
    close(fd);
    free(big);
    config_free(&cfg);
}

/* ---- doctor ---- */

static void doctor_says_measured(void **state) {
    fx *x = *state;
    doctor_report r;
    /* Complete also when the host lacks what the local provider needs. */
    int probed = doctor_probe(&r, x->root);
    assert_true(probed == 0 || probed == FAWN_EUNSUP);
    if (r.quota.mechanism != QUOTA_MEASURED)
        return; /* this host's /tmp has kernel quotas: the kernel runs cover it */
    assert_false(r.checks[DOCTOR_DISK_QUOTA].ok);
    assert_string_equal(r.checks[DOCTOR_DISK_QUOTA].name, "disk_quota");
    check_contains("without", r.checks[DOCTOR_DISK_QUOTA].without, "measured");
    json_t *j = NULL;
    assert_int_equal(doctor_to_json(&j, &r), 0);
    json_t *dq = json_object_get(j, "disk_quota");
    assert_string_equal(json_string_value(json_object_get(dq, "mechanism")), "measured");
    json_decref(j);
}

static void doctor_says_which_kernel_mechanism(void **state) {
    fx *x = *state;
    enum quota_mechanism want = fx_mechanism(x);
    char *home = strf("%s/not-created-yet/home", x->root); /* its nearest ancestor counts */
    doctor_report r;
    int probed = doctor_probe(&r, home); /* complete either way, as above */
    assert_true(probed == 0 || probed == FAWN_EUNSUP);
    assert_true(r.checks[DOCTOR_DISK_QUOTA].ok);
    assert_int_equal(r.quota.mechanism, want);
    json_t *j = NULL;
    assert_int_equal(doctor_to_json(&j, &r), 0);
    json_t *dq = json_object_get(j, "disk_quota");
    assert_string_equal(json_string_value(json_object_get(dq, "mechanism")),
                        quota_mechanism_name(want));
    json_decref(j);
    free(home);
}

/* ---- runs ---- */

#define PLAIN(f) cmocka_unit_test_setup_teardown(f, setup_tmp, teardown)
#define KERNEL(f, k) cmocka_unit_test_prestate_setup_teardown(f, setup_kind, teardown, k)

static int run_plain(void) {
    const struct CMUnitTest tests[] = {
        PLAIN(usage_counts_each_block_once),
        PLAIN(usage_is_bounded),
        PLAIN(measured_where_the_kernel_cannot),
        PLAIN(measured_refuses_what_it_cannot_measure),
        PLAIN(a_symlink_is_not_a_user_data),
        PLAIN(upload_past_measured_room_is_refused),
        PLAIN(thread_files_are_made_as_a_start_makes_them),
        PLAIN(doctor_says_measured),
    };
    return cmocka_run_group_tests_name("quota", tests, NULL, NULL);
}

static const struct kind_name {
    const char *name;
    kind_run run;
} kinds[] = {
    {"btrfs", {TEST_FS_BTRFS_QUOTA, QUOTA_BTRFS}},
    {"ext4", {TEST_FS_EXT4_PROJECT, QUOTA_PROJECT}},
    {"xfs", {TEST_FS_XFS_PROJECT, QUOTA_PROJECT}},
};

/* The kernel tests on filesystems of kind k; the whole run is skipped (TAP
 * "1..0 # SKIP") when this host cannot make one. */
static int run_kernel(const struct kind_name *k) {
    test_fs fs;
    char why[256];
    if (!test_fs_make(&fs, k->run.kind, why, sizeof why)) {
        printf("1..0 # SKIP %s\n", why);
        return 0;
    }
    test_fs_remove(&fs);
    void *run = (void *)&k->run;
    const struct CMUnitTest all[] = {
        KERNEL(kernel_user_data_is_limited, run),
        KERNEL(each_user_data_has_its_own_limit, run),
        KERNEL(older_directory_stays_measured, run),
        KERNEL(kernel_quotas_need_cap_sys_admin, run),
        KERNEL(admin_project_above_is_measured, run),
        KERNEL(upload_past_the_kernel_limit_leaves_nothing, run),
        KERNEL(doctor_says_which_kernel_mechanism, run),
        KERNEL(thread_files_are_made_as_a_start_makes_them, run),
        KERNEL(btrfs_without_quotas_is_measured, run), /* last: btrfs runs only */
    };
    size_t n = k->run.mechanism == QUOTA_BTRFS ? ARRAY_LEN(all) : ARRAY_LEN(all) - 1;
    char *name = strf("quota_%s", k->name);
    int failed = _cmocka_run_group_tests(name, all, n, NULL, NULL);
    free(name);
    return failed;
}

int main(int argc, char **argv) {
    if (argc == 1)
        return run_plain();
    for (size_t i = 0; argc == 2 && i < ARRAY_LEN(kinds); i++)
        if (strcmp(argv[1], kinds[i].name) == 0)
            return run_kernel(&kinds[i]);
    fprintf(stderr, "usage: test_quota [btrfs|ext4|xfs]\n");
    return 2;
}
