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
 * root's directory fd, so the kernel enforces the confinement. */
#ifndef FAWN_PATHS_H
#define FAWN_PATHS_H

#include <stdbool.h>
#include <stddef.h>

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
int vpath_parse(vpath *out, const char *virtual_path);

/* Decodes %XX escapes exactly once into out (size outsz). Malformed escapes,
 * %00 and results that do not fit are FAWN_EINVAL. */
int vpath_percent_decode(char *out, size_t outsz, const char *in);

/* True when rel (a vpath rel under user-data) lies in the given top directory
 * ("workspace", "uploads", "outputs"), including the directory itself. */
bool vpath_in_dir(const vpath *p, const char *top);

/* True for a valid single file name: non-empty, not "." or "..", at most
 * VPATH_NAME_MAX bytes, no '/', '\\', NUL or control characters. */
bool vpath_name_valid(const char *name);

/* Names of fawn's staging files: PREFIX<random> for writes,
 * PREFIX<random>SUFFIX for uploads (the gateway's uploads use the same). */
#define VPATH_STAGING_WRITE_PREFIX ".fawn-tmp-"
#define VPATH_STAGING_UPLOAD_PREFIX ".upload-"
#define VPATH_STAGING_UPLOAD_SUFFIX ".part"

/* True for names fawn itself uses for staging files (".upload-*.part",
 * ".fawn-tmp-*"); they are hidden from listings and never served. */
bool vpath_is_staging_name(const char *name);

#endif
