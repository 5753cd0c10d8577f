/* Disk quotas of a thread's user-data (src/sandbox/quota.c), the measuring
 * walk under them (base/fsx), uploads against them and what doctor says.
 * The kernel mechanisms are tried on filesystems of the test's own
 * (tests/quota_fs.h); a kind this host cannot mount is skipped with the
 * reason. Writes that must meet a kernel limit run in a child without
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
#include "gateway/uploads.h"
#include "sandbox/quota.h"

#define MiB ((uint64_t)1 << 20)
/* The limit most tests give a user-data. */
#define LIMIT (8 * MiB)
/* What a write past the limit tries to put there. */
#define OVERFLOW (32 * MiB)
/* Blocks a few directories and their metadata take, beyond their files. */
#define DIR_SLACK (256 * 1024)

typedef struct fx {
    test_fs fs;            /* a kernel-quota filesystem, when the test uses one */
    char tmp[64];          /* a plain directory under /tmp otherwise */
    char root[128];        /* where the test works: fs.mnt or tmp */
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

/* A filesystem of kind, or a skip with the reason. */
static void fx_kernel(fx *x, enum test_fs_kind kind) {
    char why[256];
    if (!test_fs_make(&x->fs, kind, why, sizeof why)) {
        print_message("# skipped: %s\n", why);
        skip();
    }
    close(x->rootfd);
    fx_open(x);
}

static int teardown(void **state) {
    fx *x = *state;
    if (x->rootfd >= 0)
        close(x->rootfd);
    if (x->fs.mounted)
        test_fs_remove(&x->fs);
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
    assert_int_equal(link(big, again), 0); /* its blocks count once */
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

/* ---- btrfs ---- */

static void btrfs_user_data_is_a_limited_subvolume(void **state) {
    fx *x = *state;
    fx_kernel(x, TEST_FS_BTRFS_QUOTA);
    quota_fs fs;
    quota_probe(&fs, x->rootfd);
    assert_int_equal(fs.mechanism, QUOTA_BTRFS);
    check_contains("probe", fs.detail, "btrfs with quotas");
    enum quota_mechanism m = QUOTA_MEASURED;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    assert_int_equal(m, QUOTA_BTRFS);
    assert_false(has_entry(x->root, ".user-data.new-")); /* built aside, renamed in */
    int fd = open_dir(x->rootfd, "user-data");
    struct stat st;
    assert_int_equal(fstat(fd, &st), 0);
    assert_int_equal(st.st_ino, 256); /* the root of a subvolume */
    assert_int_equal(st.st_mode & 0777, 0755);
    uint64_t room = 0;
    assert_int_equal(quota_room(&room, fd, LIMIT), 0);
    assert_int_equal(room, UINT64_MAX); /* the kernel holds every writer, fawn too */
    char *big = strf("%s/user-data/big", x->root);
    write_outcome o = write_unprivileged(big, OVERFLOW);
    assert_int_equal(o.err, EDQUOT);
    assert_true(blocks_of(big) <= LIMIT);
    /* A larger limit applies to the same subvolume at once. */
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", 4 * LIMIT), 0);
    char *more = strf("%s/user-data/more", x->root);
    o = write_unprivileged(more, LIMIT);
    assert_int_equal(o.err, 0);
    assert_int_equal(o.written, LIMIT);
    close(fd);
    free(big), free(more);
}

static void btrfs_older_directory_stays_measured(void **state) {
    fx *x = *state;
    fx_kernel(x, TEST_FS_BTRFS_QUOTA);
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

static void btrfs_without_quotas_is_measured(void **state) {
    fx *x = *state;
    fx_kernel(x, TEST_FS_BTRFS);
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

/* Probes from a child without CAP_SYS_ADMIN: limits cannot be set there. */
static void kernel_quotas_need_cap_sys_admin(void **state) {
    fx *x = *state;
    fx_kernel(x, TEST_FS_BTRFS_QUOTA);
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

/* ---- ext4 and XFS project quotas ---- */

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

static void project_quota(fx *x, enum test_fs_kind kind) {
    fx_kernel(x, kind);
    quota_fs fs;
    quota_probe(&fs, x->rootfd);
    assert_int_equal(fs.mechanism, QUOTA_PROJECT);
    enum quota_mechanism m = QUOTA_MEASURED;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "a", LIMIT), 0);
    assert_int_equal(m, QUOTA_PROJECT);
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "b", LIMIT), 0);
    assert_false(has_entry(x->root, ".a.new-"));
    char *a = strf("%s/a", x->root), *b = strf("%s/b", x->root), *sub = strf("%s/a/sub", x->root);
    uint32_t pa = project_of_path(a), pb = project_of_path(b);
    assert_true(pa >= QUOTA_PROJID_MIN && pa - QUOTA_PROJID_MIN < QUOTA_PROJID_SPAN);
    assert_int_not_equal(pa, pb); /* each its own project */
    assert_int_equal(mkdir(sub, 0755), 0);
    assert_int_equal(project_of_path(sub), pa); /* inherited */
    char *big = strf("%s/a/sub/big", x->root);
    write_outcome o = write_unprivileged(big, OVERFLOW);
    assert_true(o.err == EDQUOT || o.err == ENOSPC);
    assert_true(blocks_of(big) <= LIMIT);
    int fd = open_dir(x->rootfd, "a");
    uint64_t room = 1;
    assert_int_equal(quota_room(&room, fd, LIMIT), 0);
    assert_true(room < MiB); /* the kernel's count: the file filled it */
    close(fd);
    free(a), free(b), free(sub), free(big);
}

static void ext4_project_quota(void **state) { project_quota(*state, TEST_FS_EXT4_PROJECT); }
static void xfs_project_quota(void **state) { project_quota(*state, TEST_FS_XFS_PROJECT); }

/* ---- uploads against the limit ---- */

/* Streams bytes as one uploaded file into user-data/uploads; the batch's
 * result code (0 when it committed). */
static int upload_bytes(fx *x, uint64_t room, uint64_t bytes) {
    int ud = open_dir(x->rootfd, "user-data");
    mkdirat(ud, "uploads", 0755);
    int up = open_dir(ud, "uploads");
    upload_limits lim = {.max_files = 4, .max_file_size = 1024 * MiB,
                         .max_total_size = 1024 * MiB, .disk_room = room};
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
    fx_kernel(x, TEST_FS_BTRFS_QUOTA);
    enum quota_mechanism m;
    assert_int_equal(quota_dir_ensure(&m, x->rootfd, "user-data", LIMIT), 0);
    int ud = open_dir(x->rootfd, "user-data");
    uint64_t room = 0;
    assert_int_equal(quota_room(&room, ud, LIMIT), 0);
    close(ud);
    assert_int_equal(upload_bytes(x, room, OVERFLOW), FAWN_E2BIG);
    check_contains("upload", fawn_errmsg(), "No room for the upload");
    char *uploads = strf("%s/user-data/uploads", x->root);
    assert_false(has_entry(uploads, ".upload-")); /* the staging file is gone */
    assert_false(has_entry(uploads, "data.bin"));
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

/* ---- doctor ---- */

static void doctor_tells_the_mechanism(void **state) {
    fx *x = *state;
    doctor_report r;
    doctor_probe(&r, x->root);
    if (r.quota.mechanism == QUOTA_MEASURED) {
        assert_false(r.checks[DOCTOR_DISK_QUOTA].ok);
        check_contains("without", r.checks[DOCTOR_DISK_QUOTA].without, "measured");
    }
    fx_kernel(x, TEST_FS_BTRFS_QUOTA);
    char *home = strf("%s/not-created-yet/home", x->root); /* its nearest ancestor counts */
    doctor_probe(&r, home);
    assert_true(r.checks[DOCTOR_DISK_QUOTA].ok);
    assert_string_equal(r.checks[DOCTOR_DISK_QUOTA].name, "disk_quota");
    assert_int_equal(r.quota.mechanism, QUOTA_BTRFS);
    json_t *j = NULL;
    assert_int_equal(doctor_to_json(&j, &r), 0);
    json_t *dq = json_object_get(j, "disk_quota");
    assert_string_equal(json_string_value(json_object_get(dq, "mechanism")), "btrfs");
    check_contains("detail", json_string_value(json_object_get(dq, "detail")), "subvolume");
    json_decref(j);
    free(home);
}

#define T(f) cmocka_unit_test_setup_teardown(f, setup_tmp, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(usage_counts_each_block_once),
        T(usage_is_bounded),
        T(measured_where_the_kernel_cannot),
        T(measured_refuses_what_it_cannot_measure),
        T(a_symlink_is_not_a_user_data),
        T(btrfs_user_data_is_a_limited_subvolume),
        T(btrfs_older_directory_stays_measured),
        T(btrfs_without_quotas_is_measured),
        T(kernel_quotas_need_cap_sys_admin),
        T(ext4_project_quota),
        T(xfs_project_quota),
        T(upload_past_the_kernel_limit_leaves_nothing),
        T(upload_past_measured_room_is_refused),
        T(doctor_tells_the_mechanism),
    };
    return cmocka_run_group_tests_name("quota", tests, NULL, NULL);
}
