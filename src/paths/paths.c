#include "paths.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "base/fsx.h"

static bool char_refused(unsigned char c) { return c < 0x20 || c == 0x7f || c == '\\'; }

static bool name_is_dots(const char *name, size_t n) {
    return (n == 1 && name[0] == '.') || (n == 2 && name[0] == '.' && name[1] == '.');
}

/* Finds the next segment of s that is neither empty nor ".": sets *seg and
 * *n and returns the position just past it (at '/' or the end). *n is 0 at
 * the end of the path. */
static const char *next_segment(const char **seg, size_t *n, const char *s) {
    for (;;) {
        while (*s == '/')
            s++;
        const char *end = strchrnul(s, '/');
        *seg = s;
        *n = (size_t)(end - s);
        if (!(*n == 1 && s[0] == '.'))
            return end;
        s = end;
    }
}

static bool segment_is(const char *seg, size_t n, const char *word) {
    return n == strlen(word) && memcmp(seg, word, n) == 0;
}

/* Identifies the root from the leading segments ("mnt" then "user-data" or
 * "skills") and returns the position just past them, or NULL when the path
 * does not start with a root (a ".." before the root also means that). */
static const char *root_skip(enum vpath_root *root, const char *s) {
    const char *seg;
    size_t n;
    s = next_segment(&seg, &n, s);
    if (!segment_is(seg, n, "mnt"))
        return NULL;
    s = next_segment(&seg, &n, s);
    if (segment_is(seg, n, "user-data"))
        *root = VPATH_ROOT_USER_DATA;
    else if (segment_is(seg, n, "skills"))
        *root = VPATH_ROOT_SKILLS;
    else
        return NULL;
    return s;
}

/* Appends segment s[0..n) to rel (length *len), or pops the last segment for
 * "..". Returns FAWN_EINVAL when ".." climbs above the root. */
static int rel_push(char *rel, size_t *len, const char *s, size_t n) {
    if (n == 2 && s[0] == '.' && s[1] == '.') {
        if (*len == 0)
            return fawn_err(FAWN_EINVAL, "path climbs above its root with '..'");
        char *slash = memrchr(rel, '/', *len);
        *len = slash ? (size_t)(slash - rel) : 0;
        rel[*len] = '\0';
        return 0;
    }
    if (*len > 0)
        rel[(*len)++] = '/';
    memcpy(rel + *len, s, n);
    *len += n;
    rel[*len] = '\0';
    return 0;
}

static int check_chars(const char *p, size_t n) {
    size_t seg = 0;
    for (size_t i = 0; i < n; i++) {
        if (char_refused((unsigned char)p[i]))
            return fawn_err(FAWN_EINVAL,
                            "path contains a control character or backslash at byte %zu", i);
        seg = p[i] == '/' ? 0 : seg + 1;
        if (seg > VPATH_NAME_MAX)
            return fawn_err(FAWN_EINVAL, "path component longer than %d bytes", VPATH_NAME_MAX);
    }
    return 0;
}

int vpath_parse(vpath *out, const char *virtual_path) {
    *out = (vpath){.root = VPATH_ROOT_USER_DATA};
    size_t n = strnlen(virtual_path, VPATH_MAX);
    if (n == 0)
        return fawn_err(FAWN_EINVAL, "path is empty");
    if (n >= VPATH_MAX)
        return fawn_err(FAWN_EINVAL, "path longer than %d bytes", VPATH_MAX - 1);
    if (virtual_path[0] != '/')
        return fawn_err(FAWN_EINVAL, "path must be absolute (start with '/')");
    int r = check_chars(virtual_path, n);
    if (r < 0)
        return r;
    const char *s = root_skip(&out->root, virtual_path);
    if (!s)
        return fawn_err(FAWN_EPERM, "path is outside %s and %s", VPATH_USER_DATA, VPATH_SKILLS);
    size_t len = 0;
    out->rel[0] = '\0';
    const char *seg;
    size_t seg_len;
    for (;;) {
        s = next_segment(&seg, &seg_len, s);
        if (seg_len == 0)
            return 0;
        if ((r = rel_push(out->rel, &len, seg, seg_len)) < 0) {
            out->rel[0] = '\0'; /* never half a path */
            return r;
        }
    }
}

/* vpath_percent_decode's work; on failure out may hold part of the result. */
static int percent_decode(char *out, size_t outsz, const char *in) {
    if (outsz == 0)
        return fawn_err(FAWN_EINVAL, "no room for the decoded path");
    size_t o = 0;
    for (size_t i = 0; in[i]; i++) {
        char c = in[i];
        if (c == '%') {
            int hi = fawn_hex_digit(in[i + 1]);
            int lo = hi < 0 ? -1 : fawn_hex_digit(in[i + 2]);
            if (lo < 0)
                return fawn_err(FAWN_EINVAL, "malformed percent escape at byte %zu", i);
            c = (char)(hi * 16 + lo);
            if (c == '\0')
                return fawn_err(FAWN_EINVAL, "percent-encoded NUL (%%00) refused");
            i += 2;
        }
        if (o + 1 >= outsz)
            return fawn_err(FAWN_EINVAL, "decoded path longer than %zu bytes", outsz - 1);
        out[o++] = c;
    }
    out[o] = '\0';
    return 0;
}

int vpath_percent_decode(char *out, size_t outsz, const char *in) {
    int r = percent_decode(out, outsz, in);
    if (r < 0 && outsz > 0)
        out[0] = '\0'; /* never half a path */
    return r;
}

bool vpath_in_dir(const vpath *p, const char *top) {
    if (p->root != VPATH_ROOT_USER_DATA)
        return false;
    size_t n = strlen(top);
    if (n == 0 || strncmp(p->rel, top, n) != 0)
        return false;
    return p->rel[n] == '\0' || p->rel[n] == '/';
}

bool vpath_name_valid(const char *name) {
    size_t n = strnlen(name, VPATH_NAME_MAX + 1);
    if (n == 0 || n > VPATH_NAME_MAX || name_is_dots(name, n))
        return false;
    for (size_t i = 0; i < n; i++) {
        if (name[i] == '/' || char_refused((unsigned char)name[i]))
            return false;
    }
    return true;
}

bool vpath_is_staging_name(const char *name) { return fsx_is_staging_name(name); }

/* ---- host layout of a thread's files ---- */

static int ids_check(const char *user, const char *thread) {
    if (!fawn_id_valid(user) || !fawn_id_valid(thread))
        return fawn_err(FAWN_EINVAL, "user and thread ids must match [A-Za-z0-9_-]{1,64}");
    return 0;
}

int paths_sandbox_id(char out[PATHS_SANDBOX_ID_LEN + 1], const char *user, const char *thread) {
    out[0] = '\0';
    int r = ids_check(user, thread);
    if (r < 0)
        return r;
    char key[160], hex[65]; /* two ids of at most 64 bytes, a colon, a NUL */
    int n = snprintf(key, sizeof key, "%s:%s", user, thread);
    fawn_sha256_hex(hex, key, (size_t)n);
    memcpy(out, hex, PATHS_SANDBOX_ID_LEN);
    out[PATHS_SANDBOX_ID_LEN] = '\0';
    return 0;
}

int paths_user_data_dir(char out[PATH_MAX], const char *home, const char *user,
                        const char *thread) {
    out[0] = '\0';
    int r = ids_check(user, thread);
    if (r < 0)
        return r;
    int n = snprintf(out, PATH_MAX, "%s/users/%s/threads/%s/user-data", home, user, thread);
    if (n < PATH_MAX)
        return 0;
    out[0] = '\0';
    return fawn_err(FAWN_EINVAL, "home path too long");
}

/* ---- confinement: virtual paths opened beneath their root's directory fd ---- */

/* The directories a write may land in. */
static const char *const rw_dirs[] = {"workspace", "uploads", "outputs"};

static bool writable(const vpath *vp) {
    for (size_t i = 0; i < ARRAY_LEN(rw_dirs); i++) {
        if (vpath_in_dir(vp, rw_dirs[i]) && strcmp(vp->rel, rw_dirs[i]) != 0)
            return true;
    }
    return false;
}

/* Parses path and picks its root fd. Writes are refused under /mnt/skills
 * and anywhere but inside the three read-write directories. */
int vpath_resolve(vpath_target *t, const vpath_roots *roots, const char *path, bool for_write) {
    *t = (vpath_target){.rootfd = -1};
    int r = vpath_parse(&t->vp, path);
    if (r < 0)
        return r;
    bool skills = t->vp.root == VPATH_ROOT_SKILLS;
    snprintf(t->shown, sizeof t->shown, "%s%s%s", skills ? VPATH_SKILLS : VPATH_USER_DATA,
             t->vp.rel[0] ? "/" : "", t->vp.rel);
    if (skills && for_write)
        return fawn_err(FAWN_EPERM, "%s is read-only: %s", VPATH_SKILLS, t->shown);
    if (skills && roots->skills_fd < 0)
        return fawn_err(FAWN_ENOENT, "no such file or directory: %s", t->shown);
    if (for_write && !writable(&t->vp))
        return fawn_err(FAWN_EPERM,
                        "writes are allowed only inside %s/workspace, uploads or outputs: %s",
                        VPATH_USER_DATA, t->shown);
    t->rootfd = skills ? roots->skills_fd : roots->user_data_fd;
    return 0;
}

const char *vpath_target_name(const vpath_target *t) {
    const char *slash = strrchr(t->vp.rel, '/');
    return slash ? slash + 1 : t->vp.rel;
}

/* Restates an fsx open failure with the virtual path instead of the relative one. */
static int open_err(int code, const vpath_target *t) {
    if (code == FAWN_ENOENT)
        return fawn_err(code, "no such file or directory: %s", t->shown);
    if (code == FAWN_EPERM)
        return fawn_err(code, "access refused (outside its root, or through a symlink): %s",
                        t->shown);
    return code;
}

/* Stats t without opening it (O_PATH has no side effects on devices or FIFOs). */
int vpath_stat(struct stat *st, const vpath_target *t) {
    *st = (struct stat){0};
    _cleanup_close_ int fd = fsx_open_beneath(t->rootfd, t->vp.rel, O_PATH, 0,
                                              FSX_SYMLINKS_BENEATH);
    if (fd < 0)
        return open_err(fd, t);
    if (fstat(fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    return 0;
}

/* Opens t's regular file for reading: symlinks only beneath the root. Other
 * file types are refused before they are opened (no device side effects), and
 * again after, never blocking on a FIFO swapped in meanwhile nor acquiring a
 * controlling tty. Stores the fd and its stat. */
int vpath_open_regular(int *fd_out, struct stat *st, const vpath_target *t) {
    *fd_out = -1;
    *st = (struct stat){0};
    if (vpath_is_staging_name(vpath_target_name(t)))
        return fawn_err(FAWN_ENOENT, "no such file or directory: %s", t->shown);
    int r = vpath_stat(st, t);
    if (r < 0)
        return r;
    if (!S_ISREG(st->st_mode))
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", t->shown);
    _cleanup_close_ int fd = fsx_open_beneath(
        t->rootfd, t->vp.rel, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, FSX_SYMLINKS_BENEATH);
    if (fd < 0)
        return open_err(fd, t);
    if (fstat(fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    if (!S_ISREG(st->st_mode))
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", t->shown);
    *fd_out = steal_fd(fd);
    return 0;
}

int vpath_open_dir(int *fd_out, const vpath_target *t) {
    *fd_out = -1;
    _cleanup_close_ int pfd = fsx_open_beneath(t->rootfd, t->vp.rel, O_PATH, 0,
                                               FSX_SYMLINKS_BENEATH);
    if (pfd < 0)
        return open_err(pfd, t);
    struct stat st;
    if (fstat(pfd, &st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    if (!S_ISDIR(st.st_mode))
        return fawn_err(FAWN_EINVAL, "not a directory: %s", t->shown);
    int fd = openat(pfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(errno == EACCES ? FAWN_EPERM : FAWN_EIO, errno, "open %s", t->shown);
    *fd_out = fd;
    return 0;
}

/* Creates t's missing parent directories without following any symlink and
 * returns an fd of the parent. Staging names are reserved. */
int vpath_open_parent(int *fd_out, const vpath_target *t) {
    *fd_out = -1;
    const char *name = vpath_target_name(t);
    if (vpath_is_staging_name(name))
        return fawn_err(FAWN_EINVAL, "reserved file name: %s", t->shown);
    char parent[VPATH_MAX];
    size_t n = (size_t)(name - t->vp.rel) - 1; /* writable targets always have a parent */
    memcpy(parent, t->vp.rel, n);
    parent[n] = '\0';
    int fd = fsx_mkdirs_beneath(t->rootfd, parent);
    if (fd < 0)
        return open_err(fd, t);
    *fd_out = fd;
    return 0;
}

/* A file that may be written over: the rule the staging-file writer applies. */
int vpath_check_writable(const struct stat *st, const char *shown) {
    return fsx_check_replaceable(st, shown);
}

int vpath_check_existing(bool *exists, mode_t *mode, int dirfd, const char *name,
                         const char *shown) {
    *exists = false;
    *mode = 0;
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT)
            return fawn_err_sys(FAWN_EIO, errno, "stat %s", shown);
        *exists = false;
        return 0;
    }
    *exists = true;
    *mode = st.st_mode;
    return vpath_check_writable(&st, shown);
}

void paths_user_dir_name(char out[24], int64_t user_id) {
    snprintf(out, 24, "%lld", (long long)user_id);
}
