/* Virtual paths: the one place that decides what a path a client or an agent
 * sends means. A virtual path names a file under one of the sandbox roots:
 *
 *   /mnt/user-data/workspace/...   rw
 *   /mnt/user-data/uploads/...     rw
 *   /mnt/user-data/outputs/...     rw
 *   /mnt/skills/...                ro
 *
 * Parsing never touches the filesystem; it produces a root and a normalized
 * relative path that callers then open with fsx_open_beneath() against the
 * root's directory fd, so the kernel enforces the confinement.
 *
 * Every out-parameter is set on every path, failures included: descriptors
 * are -1 and stats zero until a call succeeds, and a decoded or parsed path
 * is never left half written (it is "" when the call fails). */
#ifndef FAWN_PATHS_H
#define FAWN_PATHS_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include "base/base.h"

#define VPATH_USER_DATA "/mnt/user-data"
#define VPATH_SKILLS "/mnt/skills"
/* Longest virtual path accepted, in bytes. */
#define VPATH_MAX 4096
/* Longest single component (file name), in bytes. */
#define VPATH_NAME_MAX 255

enum vpath_root {
    VPATH_ROOT_USER_DATA, /* rel is relative to /mnt/user-data (may be "" or "workspace/...") */
    VPATH_ROOT_SKILLS,    /* rel is relative to /mnt/skills; read-only */
};

typedef struct vpath {
    enum vpath_root root;
    char rel[VPATH_MAX]; /* normalized, no leading '/', no "." or ".." segments; "" = the root */
} vpath;

/* Parses an absolute virtual path. Collapses "." and ".." segments and
 * repeated slashes; a ".." that would climb above /mnt/user-data or
 * /mnt/skills, a path outside both, NUL/control characters, backslashes,
 * components over VPATH_NAME_MAX and paths over VPATH_MAX are refused with
 * FAWN_EINVAL (FAWN_EPERM for paths outside the roots). No percent-decoding. */
FAWN_MUST_CHECK int vpath_parse(vpath *out, const char *virtual_path);

/* Decodes %XX escapes exactly once into out (size outsz). Malformed escapes,
 * %00 and results that do not fit are FAWN_EINVAL. */
FAWN_MUST_CHECK int vpath_percent_decode(char *out, size_t outsz, const char *in);

/* True when rel (a vpath rel under user-data) lies in the given top directory
 * ("workspace", "uploads", "outputs"), including the directory itself. */
bool vpath_in_dir(const vpath *p, const char *top);

/* True for a valid single file name: non-empty, not "." or "..", at most
 * VPATH_NAME_MAX bytes, no '/', '\\', NUL or control characters. */
bool vpath_name_valid(const char *name);

/* True for names fawn itself uses for staging files (".upload-*.part",
 * ".fawn-tmp-*", made by base/fsx.h's staging-file writer and recognized by
 * its fsx_is_staging_name); they are hidden from listings and never served. */
bool vpath_is_staging_name(const char *name);

/* ---- host layout of a thread's files ----
 * Under $FAWN_HOME, a thread's files are users/{uid}/threads/{tid}/user-data
 * (workspace/, uploads/ and outputs/ in it), and its sandbox has one id
 * wherever it is placed. {uid} and {tid} match [A-Za-z0-9_-]{1,64}
 * (fawn_id_valid): anything else is FAWN_EINVAL, so neither can name a
 * path outside its directory. */

/* Hex digits of a sandbox id. */
#define PATHS_SANDBOX_ID_LEN 16

/* The sandbox id of (user, thread) into out: the first 16 hex digits of
 * sha256("user:thread"). FAWN_EINVAL (out "") for invalid ids. */
FAWN_MUST_CHECK int paths_sandbox_id(char out[PATHS_SANDBOX_ID_LEN + 1], const char *user,
                                     const char *thread);

/* The host directory of (user, thread)'s user-data under home into out:
 * home/users/user/threads/thread/user-data. FAWN_EINVAL (out "") for
 * invalid ids or a result longer than PATH_MAX. Touches no file. */
FAWN_MUST_CHECK int paths_user_data_dir(char out[PATH_MAX], const char *home, const char *user,
                                        const char *thread);

/* ---- confinement: the one place a virtual path is opened ----
 * A virtual path is resolved against the directory fds of its roots (inside
 * a sandbox: /mnt/user-data and /mnt/skills; on the host: a thread's
 * user-data directory and the skills directory) and opened with
 * fsx_open_beneath, so the kernel keeps every open beneath its root. */

typedef struct vpath_roots {
    int user_data_fd; /* O_DIRECTORY fd of the user-data root */
    int skills_fd;    /* O_DIRECTORY fd of the skills root, or -1 when there is none */
} vpath_roots;

/* A virtual path as shown to clients: root, '/', rel. */
#define VPATH_SHOWN_MAX (VPATH_MAX + sizeof VPATH_USER_DATA + 1)

typedef struct vpath_target {
    vpath vp;
    int rootfd;                  /* the root's fd (borrowed from vpath_roots) */
    char shown[VPATH_SHOWN_MAX]; /* the normalized virtual path, for messages */
} vpath_target;

/* Parses path and picks its root. With for_write, refuses (FAWN_EPERM)
 * /mnt/skills and anything but paths inside workspace/, uploads/ or
 * outputs/ (not those directories themselves). FAWN_ENOENT for /mnt/skills
 * when there is no skills root; parse errors as vpath_parse. */
FAWN_MUST_CHECK int vpath_resolve(vpath_target *t, const vpath_roots *roots, const char *path,
                                  bool for_write);

/* The last component of t ("" for a root). */
const char *vpath_target_name(const vpath_target *t);

/* Stats t without opening it (no side effects on devices or FIFOs); symlinks
 * are followed only while they stay beneath the root. */
FAWN_MUST_CHECK int vpath_stat(struct stat *st, const vpath_target *t);

/* Opens t's regular file for reading (symlinks only beneath the root). Other
 * file types are refused (FAWN_EINVAL) before they are opened and again
 * after, never blocking on a FIFO nor acquiring a controlling tty; staging
 * names are FAWN_ENOENT. Stores the fd (caller closes) and its stat. */
FAWN_MUST_CHECK int vpath_open_regular(int *fd_out, struct stat *st, const vpath_target *t);

/* Opens t's directory for reading (symlinks only beneath the root);
 * FAWN_EINVAL when it is not a directory. Caller closes *fd_out. */
FAWN_MUST_CHECK int vpath_open_dir(int *fd_out, const vpath_target *t);

/* Creates t's missing parent directories without following any symlink and
 * opens the parent (caller closes). Staging names are refused (FAWN_EINVAL). */
FAWN_MUST_CHECK int vpath_open_parent(int *fd_out, const vpath_target *t);

/* Whether an existing file may be written over: FAWN_EPERM for a symlink or
 * a file with several hard links (one planted to a file elsewhere),
 * FAWN_EINVAL for anything but a regular file. */
FAWN_MUST_CHECK int vpath_check_writable(const struct stat *st, const char *shown);

/* Looks up name in dirfd without following it: *exists tells whether it is
 * there, *mode its type, and an existing one must pass vpath_check_writable. */
FAWN_MUST_CHECK int vpath_check_existing(bool *exists, mode_t *mode, int dirfd, const char *name,
                                         const char *shown);

/* ---- host layout ---- */

/* The name of a user's directory under $FAWN_HOME/users: the decimal user
 * id (the HTTP API shows the same string as the user's id). */
void paths_user_dir_name(char out[24], int64_t user_id);

#endif
