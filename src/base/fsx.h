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
#include <sys/stat.h>

#include "base.h"

enum fsx_follow {
    FSX_NO_SYMLINKS = 0,    /* any symlink in the path fails with FAWN_EPERM */
    FSX_SYMLINKS_BENEATH = 1 /* symlinks allowed if they stay beneath dirfd */
};

/* Opens `rel` (relative, no leading '/') beneath dirfd with open flags `flags`
 * (O_CLOEXEC is always added) and `mode` for O_CREAT. Returns the fd (>= 0) or
 * a negative FAWN_E* code: FAWN_ENOENT, FAWN_EPERM (escape attempt or symlink
 * refused), FAWN_EIO. An empty rel or "." opens dirfd's directory itself. */
int fsx_open_beneath(int dirfd, const char *rel, int flags, mode_t mode, enum fsx_follow follow);

/* Creates every missing directory of `rel` beneath dirfd (mode 0755), never
 * following symlinks. Returns an O_DIRECTORY fd of the last one, or < 0. */
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

#endif
