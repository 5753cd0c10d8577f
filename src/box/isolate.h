/* Building a sandbox's world: called in a child freshly cloned into new
 * user, mount, pid, ipc, uts (and, for network "none", net) namespaces,
 * before it becomes `fawn box`. Only system calls run here, so it is safe
 * after clone() in a multithreaded parent. */
#ifndef FAWN_BOX_ISOLATE_H
#define FAWN_BOX_ISOLATE_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef struct box_mount_plan {
    const char *workspace;  /* host directories, opened in the child's mount namespace */
    const char *uploads;
    const char *outputs;
    const char *skills;     /* missing: /mnt/skills stays an empty read-only dir */
    const char *etc;        /* the prepared /etc (box_etc_prepare) */
    bool network_none;  /* bring up loopback in the new net namespace; keep host resolv.conf out */
    uint64_t tmp_size_mb;
} box_mount_plan;

/* The plan's directories, opened by the child while it still has the
 * launcher's host identity (the sandbox's own uid may not be able to reach
 * them), before the root tmpfs covers /tmp (where $FAWN_HOME may live). */
typedef struct box_host_dirs {
    int workspace, uploads, outputs, skills; /* skills may be -1 */
    int etc;
} box_host_dirs;

/* Opens the plan's directories (no symlink as last component). Returns 0, or
 * -1 with a message in err. */
int box_isolate_open_dirs(box_host_dirs *out, const box_mount_plan *plan, char *err, size_t errsz);

/* Turns the calling process (PID 1 of new namespaces, with its uid/gid maps
 * already written) into the sandbox: private mounts, a read-only tmpfs root
 * with read-only system directories and a minimal /etc, the thread's
 * user-data read-write (nosuid, nodev), skills read-only, the prepared /etc, private /tmp and
 * /dev/shm, a fresh /proc, a minimal /dev, pivot_root, hostname "sandbox",
 * loopback up. On failure writes a message to err (size errsz) and returns
 * -1; the caller must then exit. */
int box_isolate_enter(const box_mount_plan *plan, const box_host_dirs *dirs, char *err,
                      size_t errsz);

/* Writes "0 outer 1" maps for pid. Called by a privileged parent mapping to
 * another uid (setgroups stays allowed so the child can drop the parent's
 * supplementary groups), or by an unprivileged child itself with pid 0
 * ("self"), which the kernel only allows with setgroups denied first.
 * Returns 0 or -errno. */
int box_write_id_maps(pid_t pid, uid_t outer_uid, gid_t outer_gid, bool deny_setgroups);

/* Brings up the loopback interface of the calling thread's network
 * namespace (nothing to do when it is up). Returns 0 or -1 with errno. */
int box_isolate_loopback_up(void);

#endif
