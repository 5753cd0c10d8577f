/* Disk quotas: how much a thread's user-data (workspace, uploads and
 * outputs together) may hold, sandbox.limits.disk_mb.
 *
 * Rules (each enforced here, in one place):
 * - The kernel holds the limit where the filesystem under $FAWN_HOME allows
 *   it (quota_probe decides): on btrfs with quotas enabled, a user-data is a
 *   subvolume with a qgroup limit on the bytes it references; on ext4 or XFS
 *   with enforced project quotas, it is a project of its own with a block
 *   hard limit, inherited by everything created beneath it. A write past
 *   the limit fails with EDQUOT (ENOSPC on XFS) for every writer: the
 *   sandbox's commands, which can change neither a file's project nor a
 *   qgroup, and fawn's own writes (uploads). Both need fawn to hold
 *   CAP_SYS_ADMIN in the host's user namespace (root).
 * - A user-data is limited from the moment it appears: quota_dir_ensure
 *   builds it under a temporary name and renames it into place, so no file
 *   is ever written into it unlimited.
 * - Everywhere else fawn measures (QUOTA_MEASURED): a bounded walk adds up
 *   the tree's blocks. Uploads past the limit are refused (quota_room) and
 *   the box reports a sandbox over its limit after each command, but a
 *   command can write past the limit while it runs. A user-data created
 *   before kernel quotas were available stays measured (a btrfs directory
 *   cannot become a subvolume in place).
 *
 * Project ids: a user-data takes a random free id in QUOTA_PROJID_MIN ..
 * QUOTA_PROJID_MIN + QUOTA_PROJID_SPAN - 1 and keeps it as its own project
 * attribute (the directory is the record). An id is free when nothing is
 * charged to it; after claiming one, fawn checks that its directory is the
 * only inode charged, so two claims of one id (two gateways, another tool)
 * both move on to other ids. Under a directory an administrator put in a
 * project of their own (inherited), a thread's project cannot nest: fawn
 * measures there instead. */
#ifndef FAWN_SANDBOX_QUOTA_H
#define FAWN_SANDBOX_QUOTA_H

#include <stdint.h>
#include "base/base.h"

/* First project id fawn gives a user-data: far above the small ids
 * administrators number by hand in /etc/projid. */
#define QUOTA_PROJID_MIN 0x40000000u
/* How many ids fawn draws from: random draws collide rarely among this many. */
#define QUOTA_PROJID_SPAN 0x3fffffffu

enum quota_mechanism {
    QUOTA_MEASURED, /* no kernel limit: fawn measures the tree */
    QUOTA_BTRFS,    /* a btrfs subvolume with a qgroup limit */
    QUOTA_PROJECT,  /* an ext4/XFS project with a block hard limit */
};

/* A reason or a description, for doctor and the log. */
#define QUOTA_DETAIL_MAX 256

/* What a filesystem offers to a user-data created in it. */
typedef struct quota_fs {
    enum quota_mechanism mechanism;
    char detail[QUOTA_DETAIL_MAX]; /* the filesystem, and why it is measured when it is */
} quota_fs;

/* "btrfs", "project" or "measured". */
const char *quota_mechanism_name(enum quota_mechanism m);

/* What the filesystem of dirfd (any directory on it) offers: a kernel
 * mechanism only when it is enabled, enforced, and fawn may set limits.
 * Never fails: whatever rules the kernel out makes it QUOTA_MEASURED with
 * the reason in detail. Reads only (statfs, quota state, sysfs). */
void quota_probe(quota_fs *out, int dirfd);

/* The same for path, or the nearest of its ancestors that exists (a home
 * not created yet will be created there). */
void quota_probe_path(quota_fs *out, const char *path);

/* Makes parentfd/name (a single name) a directory whose tree the mechanism
 * in *applied holds to limit_bytes. A missing one is created limited (mode
 * 0755, owned by this process) by the mechanism quota_probe finds; an
 * existing one keeps its mechanism and gets limit_bytes again (the
 * configuration may have changed). A symlink or non-directory in its place
 * is FAWN_EINVAL; FAWN_EIO when the kernel refuses a step (nothing is left
 * half made). parentfd is borrowed. */
FAWN_MUST_CHECK int quota_dir_ensure(enum quota_mechanism *applied, int parentfd, const char *name,
                                     uint64_t limit_bytes);

/* The mechanism that limits the existing directory dirfd (as
 * quota_dir_ensure left it): QUOTA_MEASURED when no kernel quota does. */
enum quota_mechanism quota_dir_mechanism(int dirfd);

/* The bytes dirfd's tree holds, by walking it (FSX_USER_DATA_MAX_* bounds,
 * base/fsx.h). Past them, or at a directory it cannot read, FAWN_E2BIG
 * "The thread's files cannot be measured (why)" with *used a lower bound:
 * files that cannot be measured count as over the limit. */
FAWN_MUST_CHECK int quota_measure(uint64_t *used, int dirfd);

/* How many bytes fawn's own writes may still add to dirfd's tree under
 * limit_bytes (0 when it is full or over). UINT64_MAX under btrfs
 * qgroups, which hold every writer to the limit: a write past it fails
 * with EDQUOT. Project usage comes from the kernel's count; a measured
 * tree is walked (errors as quota_measure). */
FAWN_MUST_CHECK int quota_room(uint64_t *room, int dirfd, uint64_t limit_bytes);

#endif
