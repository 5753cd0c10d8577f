#include "fsx.h"

#include <dirent.h>
#include <errno.h>
#include <linux/openat2.h>
#include <string.h>
#include <sys/syscall.h>

/* Longest relative path accepted; matches PATH_MAX. */
#define FSX_PATH_MAX 4096
/* Deepest directory tree fsx_remove_tree descends: one fd is held open per
 * level, so this bounds the fds it uses; deeper trees are left in place. */
#define FSX_REMOVE_DEPTH_MAX 128

static int map_errno(int e, const char *rel) {
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return fawn_err(FAWN_ENOENT, "no such file or directory: %s", rel);
    case EXDEV:
    case ELOOP:
    case EPERM:
    case EACCES:
        return fawn_err(FAWN_EPERM, "access refused (outside its root, or through a symlink): %s",
                        rel);
    case EEXIST:
        return fawn_err(FAWN_EEXIST, "already exists: %s", rel);
    case EISDIR:
        return fawn_err(FAWN_EINVAL, "is a directory: %s", rel);
    case ENAMETOOLONG:
        return fawn_err(FAWN_EINVAL, "path too long: %s", rel);
    case EDQUOT:
    case ENOSPC:
        return fawn_err_sys(FAWN_E2BIG, e, "no room for %s", rel);
    default:
        return fawn_err_sys(FAWN_EIO, e, "open %s", rel);
    }
}

static int openat2_once(int dirfd, const char *rel, int flags, mode_t mode, uint64_t resolve) {
    struct open_how how = {.flags = (uint64_t)flags, .mode = mode, .resolve = resolve};
    return (int)syscall(SYS_openat2, dirfd, rel, &how, sizeof how);
}

bool fsx_have_openat2(void) {
    static int cached = -1;
    if (cached < 0) {
        int fd = openat2_once(AT_FDCWD, ".", O_PATH | O_CLOEXEC, 0, 0);
        cached = fd >= 0 || errno != ENOSYS;
        if (fd >= 0)
            close(fd);
    }
    return cached;
}

/* Fallback: walk components with O_NOFOLLOW; ".." is refused outright. */
static int walk_open(int dirfd, const char *rel, int flags, mode_t mode) {
    char buf[FSX_PATH_MAX];
    size_t n = strlen(rel);
    if (n >= sizeof buf)
        return fawn_err(FAWN_EINVAL, "path too long");
    memcpy(buf, rel, n + 1);
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (cur < 0)
        return fawn_err_sys(FAWN_EIO, errno, "dup");
    char *save = NULL;
    char *part = strtok_r(buf, "/", &save);
    while (part) {
        char *next = strtok_r(NULL, "/", &save);
        if (strcmp(part, "..") == 0) {
            close(cur);
            return fawn_err(FAWN_EPERM, "'..' refused: %s", rel);
        }
        int f = next ? (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) : (flags | O_NOFOLLOW | O_CLOEXEC);
        int fd = openat(cur, part, f, mode);
        int e = errno;
        close(cur);
        if (fd < 0)
            return map_errno(e, rel);
        cur = fd;
        part = next;
    }
    return cur;
}

int fsx_open_beneath(int dirfd, const char *rel, int flags, mode_t mode, enum fsx_follow follow) {
    if (rel[0] == '/')
        return fawn_err(FAWN_EINVAL, "path must be relative: %s", rel);
    if (strlen(rel) >= FSX_PATH_MAX)
        return fawn_err(FAWN_EINVAL, "path too long");
    const char *target = rel[0] ? rel : ".";
    if (!fsx_have_openat2())
        return walk_open(dirfd, target, flags, mode);
    uint64_t resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV;
    if (follow == FSX_NO_SYMLINKS)
        resolve |= RESOLVE_NO_SYMLINKS;
    int fd;
    do {
        fd = openat2_once(dirfd, target, flags | O_CLOEXEC, mode, resolve);
    } while (fd < 0 && errno == EAGAIN);
    if (fd < 0 && errno == EXDEV) {
        /* RESOLVE_NO_XDEV also refuses legitimate bind mounts below dirfd
         * (the sandbox's user-data dirs); retry without it, still beneath. */
        resolve &= ~(uint64_t)RESOLVE_NO_XDEV;
        do {
            fd = openat2_once(dirfd, target, flags | O_CLOEXEC, mode, resolve);
        } while (fd < 0 && errno == EAGAIN);
    }
    if (fd < 0)
        return map_errno(errno, rel);
    return fd;
}

int fsx_mkdirs_beneath(int dirfd, const char *rel) {
    char buf[FSX_PATH_MAX];
    size_t n = strlen(rel);
    if (n >= sizeof buf)
        return fawn_err(FAWN_EINVAL, "path too long");
    memcpy(buf, rel, n + 1);
    int cur = fcntl(dirfd, F_DUPFD_CLOEXEC, 3);
    if (cur < 0)
        return fawn_err_sys(FAWN_EIO, errno, "dup");
    char *save = NULL;
    for (char *part = strtok_r(buf, "/", &save); part; part = strtok_r(NULL, "/", &save)) {
        if (strcmp(part, "..") == 0 || strcmp(part, ".") == 0) {
            close(cur);
            return fawn_err(FAWN_EPERM, "dot segment refused: %s", rel);
        }
        if (mkdirat(cur, part, 0755) < 0 && errno != EEXIST) {
            int e = errno;
            close(cur);
            return map_errno(e, rel);
        }
        int fd = openat(cur, part, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        int e = errno;
        close(cur);
        if (fd < 0)
            return map_errno(e == ENOTDIR || e == ELOOP ? EPERM : e, rel);
        cur = fd;
    }
    return cur;
}

int fsx_mkdir_p(const char *path, mode_t mode) {
    char buf[FSX_PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof buf)
        return fawn_err(FAWN_EINVAL, "bad directory path");
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return fawn_err_sys(FAWN_EIO, errno, "mkdir %s", buf);
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return fawn_err_sys(FAWN_EIO, errno, "mkdir %s", buf);
    return 0;
}

static int remove_entry(int dirfd, const char *name, unsigned depth);

/* Empties the directory open as fd (which this closes). */
static int remove_children(int fd, unsigned depth) {
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return fawn_err_sys(FAWN_EIO, errno, "read directory");
    }
    int r = 0;
    struct dirent *e;
    while (r == 0 && (errno = 0, e = readdir(d))) {
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            r = remove_entry(dirfd(d), e->d_name, depth + 1);
    }
    if (r == 0 && errno)
        r = fawn_err_sys(FAWN_EIO, errno, "read directory");
    closedir(d);
    return r;
}

static int remove_entry(int dirfd, const char *name, unsigned depth) {
    if (unlinkat(dirfd, name, 0) == 0)
        return 0;
    if (errno == ENOENT)
        return depth == 0 ? fawn_err(FAWN_ENOENT, "%s does not exist", name) : 0;
    if (errno != EISDIR && errno != EPERM)
        return fawn_err_sys(FAWN_EIO, errno, "remove %s", name);
    if (depth >= FSX_REMOVE_DEPTH_MAX)
        return fawn_err(FAWN_E2BIG, "directory tree deeper than %d levels", FSX_REMOVE_DEPTH_MAX);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", name);
    int r = remove_children(fd, depth);
    if (r == 0 && unlinkat(dirfd, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        r = fawn_err_sys(FAWN_EIO, errno, "remove %s", name);
    return r;
}

int fsx_remove_tree(int dirfd, const char *name) { return remove_entry(dirfd, name, 0); }

/* ---- tree usage ---- */

/* One walk: the open directories from the top down to the current one. */
typedef struct usage_walk {
    DIR **open;      /* max_depth + 1 slots */
    unsigned depth;  /* how many are open */
    size_t seen;     /* entries examined */
    dev_t dev;       /* the top's filesystem */
    uint64_t bytes;
    const fsx_usage_bounds *b;
} usage_walk;

/* The blocks of st that one of its names accounts for. */
static uint64_t usage_share(const struct stat *st) {
    uint64_t bytes = (uint64_t)st->st_blocks * 512;
    return !S_ISDIR(st->st_mode) && st->st_nlink > 1 ? bytes / st->st_nlink : bytes;
}

/* Makes the directory open as fd (which this takes) the current one. */
static int usage_enter(usage_walk *w, int fd) {
    DIR *d = fdopendir(fd);
    if (!d) {
        int e = errno;
        close(fd);
        return fawn_err_sys(FAWN_EIO, e, "read directory");
    }
    w->open[w->depth++] = d;
    return 0;
}

/* Counts name (an entry of d) and enters it when it is a directory. */
static int usage_count(usage_walk *w, DIR *d, const char *name) {
    struct stat st;
    if (fstatat(dirfd(d), name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, errno, "stat %s", name);
    if (st.st_dev != w->dev) /* another filesystem is mounted here */
        return 0;
    w->bytes += usage_share(&st);
    if (!S_ISDIR(st.st_mode))
        return 0;
    if (w->depth > w->b->max_depth)
        return fawn_err(FAWN_E2BIG, "directory tree deeper than %u levels", w->b->max_depth);
    int fd = openat(dirfd(d), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, errno, "open %s", name);
    return usage_enter(w, fd);
}

/* Reads the next entry of the current directory, leaving it at its end. */
static int usage_step(usage_walk *w) {
    DIR *d = w->open[w->depth - 1];
    errno = 0;
    struct dirent *e = readdir(d);
    if (!e) {
        int err = errno;
        closedir(d);
        w->depth--;
        return err ? fawn_err_sys(FAWN_EIO, err, "read directory") : 0;
    }
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
        return 0;
    if (++w->seen > w->b->max_entries)
        return fawn_err(FAWN_E2BIG, "more than %zu files", w->b->max_entries);
    return usage_count(w, d, e->d_name);
}

int fsx_tree_usage(uint64_t *bytes, int dirfd, const fsx_usage_bounds *b) {
    *bytes = 0;
    struct stat st;
    if (fstat(dirfd, &st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat the directory to measure");
    usage_walk w = {.open = calloc((size_t)b->max_depth + 1, sizeof(DIR *)), .dev = st.st_dev,
                    .bytes = usage_share(&st), .b = b};
    if (!w.open)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = fd < 0 ? fawn_err_sys(FAWN_EIO, errno, "open the directory to measure")
                   : usage_enter(&w, fd);
    while (r == 0 && w.depth > 0)
        r = usage_step(&w);
    while (w.depth > 0)
        closedir(w.open[--w.depth]);
    free(w.open);
    *bytes = w.bytes;
    return r;
}
