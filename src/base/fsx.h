/* Filesystem helpers that let the kernel enforce confinement.
 *
 * Every path resolved here is resolved relative to a directory fd with
 * openat2(RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS [| RESOLVE_NO_SYMLINKS]), so
 * "..", absolute symlinks and /proc magic links can never leave that
 * directory, whatever the tree contains. On kernels without openat2 the same
 * rules are applied by walking one component at a time with O_NOFOLLOW.
 *
 * fsx also holds fawn's one staging-file writer (fsx_staged_*, below): every
 * file fawn writes whole is written under a staging name and renamed into
 * place by it. */
#ifndef FAWN_FSX_H
#define FAWN_FSX_H

#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>

#include "base.h"
#include "base/base.h"

enum fsx_follow {
    FSX_NO_SYMLINKS = 0,     /* any symlink in the path fails with FAWN_EPERM */
    FSX_SYMLINKS_BENEATH = 1 /* symlinks allowed if they stay beneath dirfd */
};

/* Opens `rel` (relative, no leading '/') beneath dirfd with open flags `flags`
 * (O_CLOEXEC is always added) and `mode` for O_CREAT. Returns the fd (>= 0) or
 * a negative FAWN_E* code: FAWN_ENOENT, FAWN_EPERM (escape attempt or symlink
 * refused), FAWN_E2BIG (a disk quota or a full disk refused a creation),
 * FAWN_EIO. An empty rel or "." opens dirfd's directory itself. */
FAWN_MUST_CHECK int fsx_open_beneath(int dirfd, const char *rel, int flags, mode_t mode,
                                     enum fsx_follow follow);

/* Creates every missing directory of `rel` beneath dirfd (mode 0755), never
 * following symlinks. Returns an O_DIRECTORY fd of the last one, or < 0
 * (codes as fsx_open_beneath). */
FAWN_MUST_CHECK int fsx_mkdirs_beneath(int dirfd, const char *rel);

/* True when this kernel implements openat2 (probed once). */
bool fsx_have_openat2(void);

/* Creates a directory path on the host (like mkdir -p), mode for new parts. */
FAWN_MUST_CHECK int fsx_mkdir_p(const char *path, mode_t mode);

/* Makes path (like mkdir -p, new parts 0700) a directory fit for private
 * state: FAWN_EPERM when it is a symlink, not owned by this user, or
 * writable by its group or by others (anyone who can write there could
 * replace the files kept in it). Its mode is otherwise left as it is. */
FAWN_MUST_CHECK int fsx_private_dir(const char *path);

/* Opens path (creating it when missing), a regular file of this user, never
 * through a symlink, and makes it mode 0600 whatever the umask or its mode
 * was. Returns the fd or a negative FAWN_E*. */
FAWN_MUST_CHECK int fsx_private_file(const char *path);

/* Removes name (a file, or a directory with everything beneath it) from
 * dirfd, never following a symlink: each directory is opened relative to
 * its parent's fd with O_NOFOLLOW. Any depth, without recursion and with a
 * bounded number of open directories. FAWN_ENOENT when name does not exist;
 * FAWN_EIO when something could not be removed (what could be, is). */
FAWN_MUST_CHECK int fsx_remove_tree(int dirfd, const char *name);

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
FAWN_MUST_CHECK int fsx_tree_usage(uint64_t *bytes, int dirfd, const fsx_usage_bounds *b);

/* ---- staging files: a file is written whole under a staging name, then put in place ----
 *
 * Every file fawn writes whole (a box write, a streamed upload to the box or
 * the gateway, an artifact edit) goes through these functions, and no file is
 * written whole any other way:
 *
 *   fsx_staged s = {0};
 *   r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, FSX_USER_FILE_MODE);
 *   r = fsx_staged_write(&s, data, n);         (as often as needed)
 *   r = fsx_staged_commit(&st, &s, "name", FSX_COMMIT_REPLACE, shown);
 *   fsx_staged_abort(&s);                      (always; a no-op once placed)
 *
 * Readers of the final name see the old file or the new one, never a mix;
 * until the commit the old file is untouched, and after an abort no staging
 * file is left (a crash may leave one: its name is hidden by
 * fsx_is_staging_name and never served).
 *
 * Names. A staging file is created in the final name's directory under a
 * fresh random name of one of the forms below (O_CREAT | O_EXCL |
 * O_NOFOLLOW: never an existing entry, never through a symlink). These forms
 * are made here and recognized here only; paths/ reserves and hides them
 * through fsx_is_staging_name.
 *
 * Mode and owner. A new file gets exactly the mode given to fsx_staged_open,
 * whatever the process umask. A file that replaces another keeps the
 * replaced file's permission bits (mode & 0777: set-id and sticky bits are
 * never carried over to new bytes) and, where the process may set them (as
 * root), its owner and group; where it may not, the file belongs to the
 * process. Until the commit the staging file is mode 0600.
 *
 * Durability. The commit flushes the file (fsync), sets its mode and owner,
 * renames it over the final name, and flushes the directory, so a crash
 * after it returns keeps the new file. A failed flush of the directory
 * comes after the rename and is logged, not returned: the file is in place.
 *
 * Errors, the same for every step and every caller:
 *   FAWN_E2BIG  the kernel refused for a full disk or a disk quota (ENOSPC,
 *               EDQUOT; XFS project quotas answer ENOSPC too);
 *   FAWN_EPERM  the kernel refused access (EACCES, EPERM, EROFS), or the
 *               final name is a symlink or a file with several hard links;
 *   FAWN_EINVAL the final name is a directory or another non-regular file;
 *   FAWN_EEXIST the final name exists and the commit may not replace it;
 *   FAWN_EBUSY  the staging name no longer names the file written (something
 *               else in the directory removed or replaced it; try again);
 *   FAWN_ENOENT the directory was removed;
 *   FAWN_EIO    anything else. */

/* The forms of staging names. */
enum fsx_staging_kind {
    FSX_STAGING_WRITE,  /* ".fawn-tmp-<random>": a file written whole at once */
    FSX_STAGING_UPLOAD, /* ".upload-<random>.part": a file streamed from a client */
};

/* Bytes of the longest staging name with its NUL (".upload-", 16 hex
 * digits, ".part"). */
#define FSX_STAGING_NAME_SIZE 32

/* The mode of a file fawn creates among a thread's files: its owner writes
 * it, and the sandbox, which may run as another user, reads it. */
#define FSX_USER_FILE_MODE 0644

/* One staging file. Zero it before use: fsx_staged_abort is then safe on
 * every path. Plain data (it may be copied or moved while no call runs). */
typedef struct fsx_staged {
    int dirfd;   /* the directory (borrowed) */
    int fd;      /* open for writing, or -1 after fsx_staged_flush */
    mode_t mode; /* the mode of a new file */
    dev_t dev;   /* identity of the file created */
    ino_t ino;
    bool placed;                      /* renamed into place: nothing left to remove */
    char name[FSX_STAGING_NAME_SIZE]; /* "" when none was created */
} fsx_staged;

/* True when name has the form of a staging name of that kind (the random
 * part may be anything, empty included). */
bool fsx_staging_name_is(const char *name, enum fsx_staging_kind kind);

/* True when name has the form of any staging name. */
bool fsx_is_staging_name(const char *name);

/* Whether an existing file (st from a stat that did not follow it) may be
 * replaced or written over, with shown naming it in messages: FAWN_EPERM
 * for a symlink or a file with several hard links (one planted to a file
 * elsewhere), FAWN_EINVAL for anything but a regular file. */
FAWN_MUST_CHECK int fsx_check_replaceable(const struct stat *st, const char *shown);

/* Creates a staging file of that kind in dirfd (borrowed; it must outlive
 * s) that will become a new file of the given mode, and opens it for
 * writing. *s is reset first; on failure nothing was created. Errors as
 * above; FAWN_EIO also when no free name was found after a few tries. */
FAWN_MUST_CHECK int fsx_staged_open(fsx_staged *s, int dirfd, enum fsx_staging_kind kind,
                                    mode_t mode);

/* Appends n bytes to the open staging file. FAWN_EINVAL when it is not
 * open; errors as above. */
FAWN_MUST_CHECK int fsx_staged_write(fsx_staged *s, const void *data, size_t n);

/* Flushes the staging file to disk (fsync) and closes it, so that many can
 * wait for their commit without holding a descriptor each. 0 when it is
 * already closed; errors as above (a full disk may only show here). */
FAWN_MUST_CHECK int fsx_staged_flush(fsx_staged *s);

/* Flags of fsx_staged_commit. */
enum {
    FSX_COMMIT_REPLACE = 1,        /* replace an existing regular file; else FAWN_EEXIST */
    FSX_COMMIT_DEFER_DIR_SYNC = 2, /* the caller calls fsx_dir_sync once after several commits */
};

/* Puts the staging file in place as `name` (a single name in its directory;
 * shown names it in messages): flushes it, checks that the staging name
 * still names the file written and that name is absent or replaceable
 * (fsx_check_replaceable; FAWN_EEXIST without FSX_COMMIT_REPLACE), sets its
 * mode and owner, renames it over name (never following a symlink there)
 * and flushes the directory. Stores the placed file's stat in *st. On
 * failure name is unchanged and the staging file is left for
 * fsx_staged_abort. Errors as above. */
FAWN_MUST_CHECK int fsx_staged_commit(struct stat *st, fsx_staged *s, const char *name,
                                      unsigned flags, const char *shown);

/* Closes the staging file and removes it unless it was placed; resets *s.
 * Safe on a zeroed fsx_staged and after a failed open or a commit. */
void fsx_staged_abort(fsx_staged *s);

/* Flushes dirfd's directory after the commits made with
 * FSX_COMMIT_DEFER_DIR_SYNC; a failure is logged (the files are in place). */
void fsx_dir_sync(int dirfd, const char *shown);

#endif
