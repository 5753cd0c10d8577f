/* A filesystem of a test's own, for disk quotas the host's filesystems may
 * lack: a sparse image file in a fresh directory under /tmp, formatted and
 * loop-mounted there (mount -o loop, whose loop device detaches itself at
 * unmount). Names come from mkdtemp and loop devices from the kernel, so
 * tests run in parallel. test_fs_remove undoes everything on every path.
 * Needs root, util-linux and the mkfs tool of the kind; without them (or a
 * kernel that cannot mount the kind) test_fs_make says why, to skip. */
#ifndef FAWN_TESTS_QUOTA_FS_H
#define FAWN_TESTS_QUOTA_FS_H

#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

enum test_fs_kind {
    TEST_FS_BTRFS_QUOTA,  /* btrfs with quotas enabled */
    TEST_FS_BTRFS,        /* btrfs, quotas off */
    TEST_FS_EXT4_PROJECT, /* ext4 with the project and quota features, mounted prjquota */
    TEST_FS_XFS_PROJECT,  /* XFS mounted pquota */
};

typedef struct test_fs {
    char dir[64]; /* the test's own directory: the image and the mount point */
    char image[96];
    char mnt[96]; /* where the filesystem is mounted */
    bool mounted;
} test_fs;

static const struct test_fs_recipe {
    const char *name;
    const char *tool;  /* the mkfs program */
    const char *mkfs;  /* its options */
    const char *size;  /* sparse; mkfs.xfs refuses less than 300 MiB */
    const char *mount; /* mount options beyond "loop" */
} test_fs_recipes[] = {
    [TEST_FS_BTRFS_QUOTA] = {"btrfs with quotas", "mkfs.btrfs", "-q -f", "256M", ""},
    [TEST_FS_BTRFS] = {"btrfs", "mkfs.btrfs", "-q -f", "256M", ""},
    [TEST_FS_EXT4_PROJECT] = {"ext4 with project quotas", "mkfs.ext4",
                              "-q -F -O quota,project -E quotatype=prjquota", "128M", ",prjquota"},
    [TEST_FS_XFS_PROJECT] = {"xfs with project quotas", "mkfs.xfs", "-q -f", "320M", ",pquota"},
};

/* Runs a shell command; its exit status (-1 when it could not run). */
static inline int test_fs_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline int test_fs_sh(const char *fmt, ...) {
    char cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(cmd, sizeof cmd, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= sizeof cmd)
        return -1;
    int st = system(cmd);
    return st == -1 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

/* Unmounts (lazily when something still holds it: a sandbox's mount
 * namespace lets go when its last process exits) and removes everything. */
static inline void test_fs_remove(test_fs *fs) {
    if (fs->mounted && test_fs_sh("umount %s 2>/dev/null", fs->mnt) != 0)
        test_fs_sh("umount -l %s", fs->mnt);
    fs->mounted = false;
    if (fs->image[0])
        unlink(fs->image);
    if (fs->mnt[0])
        rmdir(fs->mnt);
    if (fs->dir[0])
        rmdir(fs->dir);
    memset(fs, 0, sizeof *fs);
}

/* Formats and mounts a filesystem of kind at fs->mnt; false (with why, and
 * nothing left behind) when this host cannot. */
static inline bool test_fs_make(test_fs *fs, enum test_fs_kind kind, char *why, size_t whysz) {
    const struct test_fs_recipe *r = &test_fs_recipes[kind];
    memset(fs, 0, sizeof *fs);
    if (geteuid() != 0) {
        snprintf(why, whysz, "%s: needs root (loop devices, mount)", r->name);
        return false;
    }
    if (test_fs_sh("command -v %s >/dev/null 2>&1", r->tool) != 0) {
        snprintf(why, whysz, "%s: %s is not installed", r->name, r->tool);
        return false;
    }
    snprintf(fs->dir, sizeof fs->dir, "/tmp/fawn-testfs-XXXXXX");
    if (!mkdtemp(fs->dir)) {
        snprintf(why, whysz, "%s: mkdtemp failed", r->name);
        fs->dir[0] = '\0';
        return false;
    }
    snprintf(fs->image, sizeof fs->image, "%s/image", fs->dir);
    snprintf(fs->mnt, sizeof fs->mnt, "%s/mnt", fs->dir);
    const char *failed = mkdir(fs->mnt, 0755) < 0                                   ? "mkdir"
                         : test_fs_sh("truncate -s %s %s", r->size, fs->image) != 0 ? "truncate"
                         : test_fs_sh("%s %s %s >/dev/null 2>&1", r->tool, r->mkfs, fs->image) != 0
                             ? r->tool
                         : test_fs_sh("mount -o loop%s %s %s 2>/dev/null", r->mount, fs->image,
                                      fs->mnt) != 0
                             ? "mount (this kernel may lack it)"
                             : NULL;
    fs->mounted = !failed;
    if (!failed && kind == TEST_FS_BTRFS_QUOTA &&
        test_fs_sh("btrfs quota enable %s >/dev/null 2>&1", fs->mnt) != 0)
        failed = "btrfs quota enable";
    if (failed) {
        snprintf(why, whysz, "%s: %s failed", r->name, failed);
        test_fs_remove(fs);
        return false;
    }
    return true;
}

#endif
