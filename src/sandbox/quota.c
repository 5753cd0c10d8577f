/* Disk quotas of a thread's user-data: btrfs qgroups, ext4/XFS project
 * quotas, or a measuring walk (see quota.h for the rules). */
#include "sandbox/quota.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/btrfs.h>
#include <linux/btrfs_tree.h>
#include <linux/capability.h>
#include <linux/dqblk_xfs.h>
#include <linux/fs.h>
#include <linux/magic.h>
#include <linux/quota.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>

#include "base/base.h"
#include "base/fsx.h"

/* Random project ids tried before giving up: with ids this sparse, a
 * second draw is already rare. */
#define QUOTA_PROJID_ATTEMPTS 16
/* Random hex digits in the temporary name a user-data is built under. */
#define QUOTA_TMP_RANDOM_BYTES 8
/* Where the kernel lists a btrfs filesystem's qgroups once quotas are enabled. */
#define QUOTA_BTRFS_SYSFS "/sys/fs/btrfs"
/* A 64-bit number in decimal (20 digits) and a newline. */
#define QUOTA_SYSFS_NUMBER_MAX 32

const char *quota_mechanism_name(enum quota_mechanism m) {
    switch (m) {
    case QUOTA_BTRFS: return "btrfs";
    case QUOTA_PROJECT: return "project";
    case QUOTA_MEASURED: break;
    }
    return "measured";
}

/* ---- may fawn set limits at all ---- */

/* True when this process runs in the host's user namespace: limits are set
 * only by CAP_SYS_ADMIN there. */
static bool in_host_userns(void) {
    _cleanup_close_ int fd = open("/proc/self/uid_map", O_RDONLY | O_CLOEXEC);
    char buf[128];
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (n <= 0)
        return false;
    buf[n] = '\0';
    unsigned long inner = 1, outer = 1, count = 0;
    int used = 0;
    return sscanf(buf, "%lu %lu %lu%n", &inner, &outer, &count, &used) == 3 && inner == 0 &&
           outer == 0 && count == 4294967295UL && buf[used + strspn(buf + used, " \n")] == '\0';
}

static bool have_sys_admin(void) {
    struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
    struct __user_cap_data_struct d[_LINUX_CAPABILITY_U32S_3];
    memset(d, 0, sizeof d);
    if (syscall(SYS_capget, &h, d) < 0)
        return false;
    return d[CAP_TO_INDEX(CAP_SYS_ADMIN)].effective & CAP_TO_MASK(CAP_SYS_ADMIN);
}

/* ---- btrfs: a subvolume with a qgroup limit ---- */

/* The sysfs directory of fd's filesystem's qgroups into out. */
static int btrfs_qgroups_dir(char out[PATH_MAX], int fd) {
    struct btrfs_ioctl_fs_info_args info;
    memset(&info, 0, sizeof info);
    if (ioctl(fd, BTRFS_IOC_FS_INFO, &info) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "BTRFS_IOC_FS_INFO");
    const unsigned char *u = info.fsid;
    snprintf(out, PATH_MAX,
             QUOTA_BTRFS_SYSFS "/%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-"
                               "%02x%02x%02x%02x%02x%02x/qgroups",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
    return 0;
}

static void btrfs_probe(quota_fs *out, int fd) {
    char dir[PATH_MAX];
    if (btrfs_qgroups_dir(dir, fd) < 0) {
        snprintf(out->detail, sizeof out->detail, "btrfs, unidentified: %s", fawn_errmsg());
    } else if (access(dir, F_OK) < 0) {
        snprintf(out->detail, sizeof out->detail,
                 "btrfs without quotas (btrfs quota enable MOUNTPOINT turns them on)");
    } else {
        out->mechanism = QUOTA_BTRFS;
        snprintf(out->detail, sizeof out->detail,
                 "btrfs with quotas: each thread's user-data is a subvolume with a qgroup limit");
    }
}

/* The id of the subvolume fd is in (unprivileged). */
static int btrfs_subvolume_id(uint64_t *id, int fd) {
    struct btrfs_ioctl_ino_lookup_args a;
    memset(&a, 0, sizeof a);
    a.objectid = BTRFS_FIRST_FREE_OBJECTID;
    if (ioctl(fd, BTRFS_IOC_INO_LOOKUP, &a) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "BTRFS_IOC_INO_LOOKUP");
    *id = a.treeid;
    return 0;
}

/* The limit on referenced bytes of subvolume id, as the kernel lists it
 * (0 when it cannot be read). */
static uint64_t btrfs_limit_now(int fd, uint64_t id) {
    char dir[PATH_MAX], path[PATH_MAX + 64], buf[QUOTA_SYSFS_NUMBER_MAX];
    if (btrfs_qgroups_dir(dir, fd) < 0)
        return 0;
    snprintf(path, sizeof path, "%s/0_%" PRIu64 "/max_referenced", dir, id);
    _cleanup_close_ int f = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = f >= 0 ? read(f, buf, sizeof buf - 1) : -1;
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return strtoull(buf, NULL, 10);
}

/* Limits the bytes the subvolume at fd (its top directory) references. */
static int btrfs_limit(int fd, uint64_t bytes) {
    uint64_t id = 0;
    int r = btrfs_subvolume_id(&id, fd);
    if (r < 0 || btrfs_limit_now(fd, id) == bytes)
        return r;
    struct btrfs_ioctl_qgroup_limit_args a;
    memset(&a, 0, sizeof a);
    a.qgroupid = id; /* level 0: the subvolume's own qgroup */
    a.lim.flags = BTRFS_QGROUP_LIMIT_MAX_RFER;
    a.lim.max_rfer = bytes;
    if (ioctl(fd, BTRFS_IOC_QGROUP_LIMIT, &a) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "setting the qgroup limit of subvolume %" PRIu64, id);
    return 0;
}

static bool btrfs_is_subvolume(int fd) {
    struct stat st;
    return fstat(fd, &st) == 0 && st.st_ino == BTRFS_FIRST_FREE_OBJECTID;
}

static int btrfs_subvolume_create(int parentfd, const char *name) {
    struct btrfs_ioctl_vol_args a;
    memset(&a, 0, sizeof a);
    snprintf(a.name, sizeof a.name, "%s", name);
    if (ioctl(parentfd, BTRFS_IOC_SUBVOL_CREATE, &a) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "creating the btrfs subvolume %s", name);
    return 0;
}

/* ---- ext4/XFS: a project with a block hard limit ---- */

static long project_quotactl(int fd, int cmd, uint32_t id, void *addr) {
    return syscall(SYS_quotactl_fd, fd, QCMD(cmd, PRJQUOTA), id, addr);
}

static bool fawn_projid(uint32_t id) {
    return id >= QUOTA_PROJID_MIN && id - QUOTA_PROJID_MIN < QUOTA_PROJID_SPAN;
}

/* The project the directory fd passes on to what is made in it that is not
 * fawn's (0 when none): one set up by an administrator, in which a
 * thread's own project cannot nest. */
static uint32_t project_inherited_other(int fd) {
    struct fsxattr fa;
    memset(&fa, 0, sizeof fa);
    if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0 || !(fa.fsx_xflags & FS_XFLAG_PROJINHERIT))
        return 0;
    return fawn_projid(fa.fsx_projid) ? 0 : fa.fsx_projid;
}

static void project_probe(quota_fs *out, int fd, const char *fs) {
    struct fs_quota_statv st;
    memset(&st, 0, sizeof st);
    st.qs_version = FS_QSTATV_VERSION1;
    uint32_t other = 0;
    if (project_quotactl(fd, Q_XGETQSTATV, 0, &st) < 0) {
        int e = errno;
        snprintf(out->detail, sizeof out->detail,
                 "%s without enforced project quotas (%s; they need the filesystem's project "
                 "and quota features, the %s mount option and Linux 5.14)",
                 fs, strerror(e), strcmp(fs, "xfs") == 0 ? "pquota" : "prjquota");
    } else if (!(st.qs_flags & FS_QUOTA_PDQ_ENFD)) {
        snprintf(out->detail, sizeof out->detail,
                 "%s counts project quotas without enforcing them (mount option %s)", fs,
                 strcmp(fs, "xfs") == 0 ? "pquota" : "prjquota");
    } else if ((other = project_inherited_other(fd)) != 0) {
        snprintf(out->detail, sizeof out->detail,
                 "%s with project quotas, but this directory is in project %" PRIu32
                 ", in which a thread's own project cannot nest",
                 fs, other);
    } else {
        out->mechanism = QUOTA_PROJECT;
        snprintf(out->detail, sizeof out->detail,
                 "%s with project quotas: each thread's user-data is a project with a block limit",
                 fs);
    }
}

/* The fawn project id of the directory fd; FAWN_ENOENT when it has none. */
static int project_of(uint32_t *id, int fd) {
    struct fsxattr fa;
    memset(&fa, 0, sizeof fa);
    if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "FS_IOC_FSGETXATTR");
    if (!(fa.fsx_xflags & FS_XFLAG_PROJINHERIT) || !fawn_projid(fa.fsx_projid))
        return fawn_err(FAWN_ENOENT, "not a fawn project");
    *id = fa.fsx_projid;
    return 0;
}

/* Gives the directory fd project id, inherited by what is created in it. */
static int project_set(int fd, uint32_t id) {
    struct fsxattr fa;
    memset(&fa, 0, sizeof fa);
    if (ioctl(fd, FS_IOC_FSGETXATTR, &fa) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "FS_IOC_FSGETXATTR");
    fa.fsx_projid = id;
    fa.fsx_xflags |= FS_XFLAG_PROJINHERIT;
    if (ioctl(fd, FS_IOC_FSSETXATTR, &fa) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "setting project id %" PRIu32, id);
    return 0;
}

/* What is charged to project id (zeros for an id never used). */
static int project_usage(struct if_dqblk *q, int fd, uint32_t id) {
    memset(q, 0, sizeof *q);
    if (project_quotactl(fd, Q_GETQUOTA, id, q) == 0 || errno == ENOENT || errno == ESRCH)
        return 0;
    return fawn_err_sys(FAWN_EIO, errno, "reading the usage of project %" PRIu32, id);
}

/* Tries id for the new, empty directory fd: it must be free, and once set
 * the directory must be the only inode charged to it. */
static int project_try(bool *won, int fd, uint32_t id) {
    struct if_dqblk q;
    *won = false;
    int r = project_usage(&q, fd, id);
    if (r < 0 || q.dqb_curinodes || q.dqb_curspace)
        return r;
    if ((r = project_set(fd, id)) < 0 || (r = project_usage(&q, fd, id)) < 0)
        return r;
    *won = q.dqb_curinodes == 1;
    return 0;
}

/* Gives the new, empty directory fd a project id of its own. */
static int project_claim(uint32_t *id, int fd) {
    for (int attempt = 0; attempt < QUOTA_PROJID_ATTEMPTS; attempt++) {
        uint32_t draw = 0;
        fawn_random_bytes(&draw, sizeof draw);
        *id = QUOTA_PROJID_MIN + draw % QUOTA_PROJID_SPAN;
        bool won = false;
        int r = project_try(&won, fd, *id);
        if (r < 0 || won)
            return r;
    }
    return fawn_err(FAWN_EIO, "no free project id after %d attempts", QUOTA_PROJID_ATTEMPTS);
}

/* Sets project id's block hard limit to bytes (rounded up to the kernel's
 * 1 KiB quota blocks), unless it already is. */
static int project_limit(int fd, uint32_t id, uint64_t bytes) {
    uint64_t blocks = (bytes + QIF_DQBLKSIZE - 1) >> QIF_DQBLKSIZE_BITS;
    struct if_dqblk q;
    int r = project_usage(&q, fd, id);
    if (r < 0 || q.dqb_bhardlimit == blocks)
        return r;
    memset(&q, 0, sizeof q);
    q.dqb_bhardlimit = blocks;
    q.dqb_valid = QIF_BLIMITS;
    if (project_quotactl(fd, Q_SETQUOTA, id, &q) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "setting the limit of project %" PRIu32, id);
    return 0;
}

/* ---- what a filesystem offers ---- */

void quota_probe(quota_fs *out, int dirfd) {
    memset(out, 0, sizeof *out);
    struct statfs sf;
    if (fstatfs(dirfd, &sf) < 0) {
        snprintf(out->detail, sizeof out->detail, "statfs: %s", strerror(errno));
        return;
    }
    if (sf.f_type == BTRFS_SUPER_MAGIC)
        btrfs_probe(out, dirfd);
    else if (sf.f_type == EXT4_SUPER_MAGIC || sf.f_type == XFS_SUPER_MAGIC)
        project_probe(out, dirfd, sf.f_type == XFS_SUPER_MAGIC ? "xfs" : "ext4");
    else
        snprintf(out->detail, sizeof out->detail,
                 "a filesystem (type 0x%lx) without the quotas fawn uses (btrfs, ext4, XFS)",
                 (unsigned long)sf.f_type);
    if (out->mechanism != QUOTA_MEASURED && (!have_sys_admin() || !in_host_userns())) {
        out->mechanism = QUOTA_MEASURED;
        snprintf(out->detail, sizeof out->detail, "%s",
                 "quotas are enabled, but setting limits needs CAP_SYS_ADMIN in the host's "
                 "user namespace (run fawn as root)");
    }
}

/* Cuts dir to its parent ("a/b" -> "a", "/a" -> "/", "a" -> "."); false
 * when it has none. */
static bool path_parent(char *dir) {
    char *slash = strrchr(dir, '/');
    if (!slash) {
        bool more = strcmp(dir, ".") != 0;
        strcpy(dir, ".");
        return more;
    }
    if (slash == dir) {
        bool more = dir[1] != '\0';
        dir[1] = '\0';
        return more;
    }
    *slash = '\0';
    return true;
}

void quota_probe_path(quota_fs *out, const char *path) {
    char dir[PATH_MAX];
    snprintf(dir, sizeof dir, "%s", path[0] ? path : ".");
    int fd;
    while ((fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0 && errno == ENOENT &&
           path_parent(dir))
        ;
    if (fd < 0) {
        memset(out, 0, sizeof *out);
        snprintf(out->detail, sizeof out->detail, "%.200s: %s", dir, strerror(errno));
        return;
    }
    quota_probe(out, fd);
    close(fd);
}

/* ---- one directory ---- */

enum quota_mechanism quota_dir_mechanism(int dirfd) {
    quota_fs fs;
    quota_probe(&fs, dirfd);
    uint32_t id = 0;
    if (fs.mechanism == QUOTA_BTRFS && btrfs_is_subvolume(dirfd))
        return QUOTA_BTRFS;
    if (fs.mechanism == QUOTA_PROJECT && project_of(&id, dirfd) == 0)
        return QUOTA_PROJECT;
    return QUOTA_MEASURED;
}

/* Gives an existing directory its limit again; *applied its mechanism. */
static int dir_refresh(enum quota_mechanism *applied, int fd, uint64_t limit_bytes) {
    uint32_t id = 0;
    *applied = quota_dir_mechanism(fd);
    if (*applied == QUOTA_BTRFS)
        return btrfs_limit(fd, limit_bytes);
    if (*applied == QUOTA_PROJECT) {
        int r = project_of(&id, fd);
        return r < 0 ? r : project_limit(fd, id, limit_bytes);
    }
    return 0;
}

/* Limits the freshly made, empty directory tmp in parentfd. */
static int dir_limit_new(int parentfd, const char *tmp, enum quota_mechanism m,
                         uint64_t limit_bytes) {
    _cleanup_close_ int fd = openat(parentfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fchmod(fd, 0755) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "preparing %s", tmp);
    uint32_t id = 0;
    int r = 0;
    if (m == QUOTA_BTRFS)
        r = btrfs_limit(fd, limit_bytes);
    else if (m == QUOTA_PROJECT && (r = project_claim(&id, fd)) == 0)
        r = project_limit(fd, id, limit_bytes);
    return r;
}

/* Creates parentfd/name limited: built under a temporary name, then renamed
 * into place (FAWN_EEXIST when another creator was first). */
static int dir_create(int parentfd, const char *name, uint64_t limit_bytes) {
    quota_fs fs;
    quota_probe(&fs, parentfd);
    if (fs.mechanism == QUOTA_MEASURED) {
        if (mkdirat(parentfd, name, 0755) < 0)
            return errno == EEXIST ? fawn_err(FAWN_EEXIST, "%s exists", name)
                                   : fawn_err_sys(FAWN_EIO, errno, "mkdir %s", name);
        return 0;
    }
    char hex[2 * QUOTA_TMP_RANDOM_BYTES + 1], tmp[NAME_MAX + 1];
    fawn_random_hex(hex, QUOTA_TMP_RANDOM_BYTES);
    if (snprintf(tmp, sizeof tmp, ".%s.new-%s", name, hex) >= (int)sizeof tmp)
        return fawn_err(FAWN_EINVAL, "directory name too long: %s", name);
    int r = fs.mechanism == QUOTA_BTRFS        ? btrfs_subvolume_create(parentfd, tmp)
            : mkdirat(parentfd, tmp, 0755) < 0 ? fawn_err_sys(FAWN_EIO, errno, "mkdir %s", tmp)
                                               : 0;
    if (r < 0)
        return r;
    r = dir_limit_new(parentfd, tmp, fs.mechanism, limit_bytes);
    if (r == 0 && renameat2(parentfd, tmp, parentfd, name, RENAME_NOREPLACE) < 0)
        r = errno == EEXIST ? fawn_err(FAWN_EEXIST, "%s exists", name)
                            : fawn_err_sys(FAWN_EIO, errno, "rename into %s", name);
    if (r < 0) /* still empty: rmdir removes a subvolume too */
        unlinkat(parentfd, tmp, AT_REMOVEDIR);
    return r;
}

/* Two passes: one may create the directory, the next opens it. */
#define QUOTA_ENSURE_PASSES 2

int quota_dir_ensure(enum quota_mechanism *applied, int parentfd, const char *name,
                     uint64_t limit_bytes) {
    *applied = QUOTA_MEASURED;
    for (int pass = 0; pass < QUOTA_ENSURE_PASSES; pass++) {
        _cleanup_close_ int fd = openat(parentfd, name,
                                        O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd >= 0)
            return dir_refresh(applied, fd, limit_bytes);
        if (errno == ENOTDIR || errno == ELOOP)
            return fawn_err(FAWN_EINVAL, "%s is not a directory", name);
        if (errno != ENOENT)
            return fawn_err_sys(FAWN_EIO, errno, "open %s", name);
        int r = dir_create(parentfd, name, limit_bytes);
        if (r < 0 && r != FAWN_EEXIST)
            return r;
    }
    return fawn_err(FAWN_EIO, "%s vanished while it was being created", name);
}

int quota_measure(uint64_t *used, int dirfd) {
    fsx_usage_bounds b = {.max_entries = FSX_USER_DATA_MAX_ENTRIES,
                          .max_depth = FSX_USER_DATA_MAX_DEPTH};
    int r = fsx_tree_usage(used, dirfd, &b);
    if (r == 0 || r == FAWN_ENOMEM)
        return r;
    /* Past a bound, or a directory the walk cannot read: unknown, which is
     * not under the limit. */
    char why[QUOTA_DETAIL_MAX];
    snprintf(why, sizeof why, "%s", fawn_errmsg());
    return fawn_err(FAWN_E2BIG, "The thread's files cannot be measured (%s)", why);
}

int quota_room(uint64_t *room, int dirfd, uint64_t limit_bytes) {
    *room = 0;
    uint64_t used = 0;
    uint32_t id = 0;
    struct if_dqblk q;
    int r = 0;
    switch (quota_dir_mechanism(dirfd)) {
    case QUOTA_BTRFS: *room = UINT64_MAX; return 0;
    case QUOTA_PROJECT:
        if ((r = project_of(&id, dirfd)) == 0 && (r = project_usage(&q, dirfd, id)) == 0)
            used = q.dqb_curspace;
        break;
    case QUOTA_MEASURED: r = quota_measure(&used, dirfd); break;
    }
    if (r == 0)
        *room = used < limit_bytes ? limit_bytes - used : 0;
    return r;
}
