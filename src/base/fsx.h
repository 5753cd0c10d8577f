/* Filesystem helpers that let the kernel enforce confinement.
 *
 * Every path resolved here is resolved relative to a directory fd with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS [| RESOLVE_NO_SYMLINKS]), so
 * "..", absolute symlinks and /proc magic links can never leave that
 * directory, whatever the tree contains. On kernels without openat2 the same
 * rules are applied by walking one component at a time with O_NOFOLLOW. */
#ifndef FAWN_FSX_H
#define FAWN_FSX_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base.h"

enum fsx_follow {
    FSX_NO_SYMLINKS = 0,    /* any symlink in the path fails with FAWN_EPERM */
    FSX_SYMLINKS_BENEATH = 1 /* symlinks allowed if they stay beneath dirfd */
};

/* Opens `rel` (relative, no leading '/') beneath dirfd with open flags `flags`
 * (O_CLOEXEC is always added) and `mode` for O_CREAT. Returns the fd (>= 0) or
 * a negative FAWN_E* code: FAWN_ENOENT, FAWN_EPERM (escape attempt or symlink
 * refused), FAWN_E2BIG (a disk quota or a full disk refused a creation),
 * FAWN_EIO. An empty rel or "." opens dirfd's directory itself. */
int fsx_open_beneath(int dirfd, const char *rel, int flags, mode_t mode, enum fsx_follow follow);

/* Creates every missing directory of `rel` beneath dirfd (mode 0755), never
 * following symlinks. Returns an O_DIRECTORY fd of the last one, or < 0
 * (codes as fsx_open_beneath). */
int fsx_mkdirs_beneath(int dirfd, const char *rel);

/* True when this kernel implements openat2 (probed once). */
bool fsx_have_openat2(void);

/* Creates a directory path on the host (like mkdir -p), mode for new parts. */
int fsx_mkdir_p(const char *path, mode_t mode);

/* Makes path (like mkdir -p, new parts 0700) a directory fit for private
 * state: FAWN_EPERM when it is a symlink, not owned by this user, or
 * writable by its group or by others (anyone who can write there could
 * replace the files kept in it). Its mode is otherwise left as it is. */
int fsx_private_dir(const char *path);

/* Opens path (creating it when missing), a regular file of this user, never
 * through a symlink, and makes it mode 0600 whatever the umask or its mode
 * was. Returns the fd or a negative FAWN_E*. */
int fsx_private_file(const char *path);

/* Removes name (a file, or a directory with everything beneath it) from
 * dirfd, never following a symlink: each directory is opened relative to
 * its parent's fd with O_NOFOLLOW. Any depth, without recursion and with a
 * bounded number of open directories. FAWN_ENOENT when name does not exist;
 * FAWN_EIO when something could not be removed (what could be, is). */
int fsx_remove_tree(int dirfd, const char *name);

/* Bounds of one fsx_tree_usage walk. */
typedef struct fsx_usage_bounds {
    size_t max_entries; /* directory entries examined */
    unsigned max_depth; /* directory levels below the top (one fd and one
                           directory stream are held open per level) */
} fsx_usage_bounds;

/* The bounds fawn measures a thread's user-data with (the gateway before an
 * upload, the box after a command, where no kernel quota holds it): files
 * beyond them cannot be measured, which counts as over the limit (fail
 * closed). 200000 entries hold several large source trees with their
 * dependencies and take well under a second to stat; 128 levels hold any
 * real tree, at one directory stream (32 KiB) per level. */
#define FSX_USER_DATA_MAX_ENTRIES 200000
#define FSX_USER_DATA_MAX_DEPTH 128

/* Adds up into *bytes the disk space (allocated blocks) of dirfd's
 * directory and everything beneath it, never following a symlink nor
 * entering another filesystem mounted below. A file with several hard
 * links counts its share per name, so names within the tree add up to its
 * blocks once. Memory and fds are bounded by b: past max_entries or deeper
 * than max_depth it stops with FAWN_E2BIG and *bytes holds what it counted
 * so far (a lower bound). FAWN_EIO when a directory cannot be read; entries
 * that vanish during the walk are skipped. dirfd is borrowed. */
int fsx_tree_usage(uint64_t *bytes, int dirfd, const fsx_usage_bounds *b);

#endif
