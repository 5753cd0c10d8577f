#include "fsx.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>

/* Longest relative path accepted; matches PATH_MAX. */
#define FSX_PATH_MAX 4096
/* Directories fsx_remove_tree holds open at once, whatever the depth of the
 * tree: deeper levels are reached again from the top (a tree of depth D
 * costs about D * D / (2 * this) opens). 32 keeps a thousand-level tree
 * under 20 000 opens and the memory a few KiB. */
#define FSX_REMOVE_OPEN_MAX 32
/* Passes over a tree that keep removing something before fsx_remove_tree
 * gives up: a writer racing the removal cannot keep it busy forever. */
#define FSX_REMOVE_PASSES_MAX 1000000

static int map_errno(int e, const char *rel) {
    switch (e) {
    case ENOENT:
    case ENOTDIR: return fawn_err(FAWN_ENOENT, "no such file or directory: %s", rel);
    case EXDEV:
    case ELOOP:
    case EPERM:
    case EACCES:
        return fawn_err(FAWN_EPERM, "access refused (outside its root, or through a symlink): %s",
                        rel);
    case EEXIST: return fawn_err(FAWN_EEXIST, "already exists: %s", rel);
    case EISDIR: return fawn_err(FAWN_EINVAL, "is a directory: %s", rel);
    case ENAMETOOLONG: return fawn_err(FAWN_EINVAL, "path too long: %s", rel);
    case EDQUOT:
    case ENOSPC: return fawn_err_sys(FAWN_E2BIG, e, "no room for %s", rel);
    default: return fawn_err_sys(FAWN_EIO, e, "open %s", rel);
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
        int f = next ? (O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)
                     : (flags | O_NOFOLLOW | O_CLOEXEC);
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

int fsx_private_dir(const char *path) {
    int r = fsx_mkdir_p(path, 0700);
    struct stat st;
    if (r == 0 && lstat(path, &st) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "stat %s", path);
    if (r < 0)
        return r;
    if (!S_ISDIR(st.st_mode) || st.st_uid != geteuid())
        return fawn_err(FAWN_EPERM, "%s must be a directory of this user (uid %u), not a symlink",
                        path, (unsigned)geteuid());
    if (st.st_mode & (S_IWGRP | S_IWOTH))
        return fawn_err(FAWN_EPERM,
                        "%s is writable by other users (mode %04o): make it 0700 "
                        "(chmod go-w)",
                        path, (unsigned)(st.st_mode & 07777));
    return 0;
}

int fsx_private_file(const char *path) {
    int fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY, 0600);
    if (fd < 0)
        return fawn_err_sys(errno == ELOOP ? FAWN_EPERM : FAWN_EIO, errno, "open %s", path);
    struct stat st;
    int r = fstat(fd, &st) < 0 ? fawn_err_sys(FAWN_EIO, errno, "stat %s", path) : 0;
    if (r == 0 && (!S_ISREG(st.st_mode) || st.st_uid != geteuid()))
        r = fawn_err(FAWN_EPERM, "%s must be a regular file of this user", path);
    if (r == 0 && fchmod(fd, 0600) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "chmod %s", path);
    if (r < 0) {
        close(fd);
        return r;
    }
    return fd;
}

/* One open level of a removal: the directory and the subdirectory of it
 * being emptied ("" when none). */
typedef struct remove_level {
    DIR *dir;
    char child[NAME_MAX + 1];
} remove_level;

/* The window of open levels of one pass; levels[0] may be below the top. */
typedef struct remove_pass {
    remove_level levels[FSX_REMOVE_OPEN_MAX];
    size_t n;
    bool window_moved; /* levels above levels[0] were closed */
    size_t removed;    /* entries removed */
} remove_pass;

static int level_push(remove_pass *p, int parent, const char *name) {
    int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return e == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, e, "open directory %s", name);
    }
    if (p->n == FSX_REMOVE_OPEN_MAX) {
        closedir(p->levels[0].dir);
        memmove(&p->levels[0], &p->levels[1], (p->n - 1) * sizeof p->levels[0]);
        p->n--;
        p->window_moved = true;
    }
    p->levels[p->n++] = (remove_level){.dir = d};
    return 0;
}

/* Removes name from dirfd: a file, or an empty directory. *descend is set
 * when it is a directory that still has entries. */
static int remove_one(remove_pass *p, bool *descend, int dirfd, const char *name) {
    *descend = false;
    int r = unlinkat(dirfd, name, 0);
    if (r < 0 && (errno == EISDIR || errno == EPERM)) { /* EPERM: a directory, or immutable */
        int first = errno;
        r = unlinkat(dirfd, name, AT_REMOVEDIR);
        if (r < 0 && errno == ENOTDIR)
            errno = first;
    }
    if (r == 0) {
        p->removed++;
        return 0;
    }
    if (errno == ENOENT)
        return 0;
    if (errno == ENOTEMPTY || errno == EEXIST) {
        *descend = true;
        return 0;
    }
    return fawn_err_sys(FAWN_EIO, errno, "remove %s", name);
}

/* Reads the top level on from where it was: removes what it can, and
 * opens the first subdirectory that has entries. *done when the top level
 * has been read to its end. */
static int level_advance(remove_pass *p, bool *done) {
    remove_level *top = &p->levels[p->n - 1];
    *done = false;
    struct dirent *e;
    while ((errno = 0, e = readdir(top->dir))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        bool descend;
        int r = remove_one(p, &descend, dirfd(top->dir), e->d_name);
        if (r < 0)
            return r;
        if (!descend)
            continue;
        snprintf(top->child, sizeof top->child, "%s", e->d_name);
        return level_push(p, dirfd(top->dir), e->d_name);
    }
    if (errno)
        return fawn_err_sys(FAWN_EIO, errno, "read directory");
    *done = true;
    return 0;
}

/* Closes the top level (read to its end) and removes it from its parent,
 * which then reads on. */
static int level_pop(remove_pass *p) {
    closedir(p->levels[--p->n].dir);
    if (p->n == 0)
        return 0;
    remove_level *parent = &p->levels[p->n - 1];
    bool descend;
    int r = remove_one(p, &descend, dirfd(parent->dir), parent->child);
    parent->child[0] = '\0';
    return r;
}

/* One depth-first pass emptying directory name of dirfd as far as it can. */
static int remove_pass_run(remove_pass *p, int dirfd, const char *name) {
    int r = level_push(p, dirfd, name);
    while (r == 0 && p->n > 0) {
        bool done;
        r = level_advance(p, &done);
        if (r == 0 && done)
            r = level_pop(p);
    }
    while (p->n > 0)
        closedir(p->levels[--p->n].dir);
    return r;
}

int fsx_remove_tree(int dirfd, const char *name) {
    remove_pass p = {0};
    bool descend;
    int r = remove_one(&p, &descend, dirfd, name);
    if (r == 0 && !descend && p.removed == 0)
        return fawn_err(FAWN_ENOENT, "%s does not exist", name);
    for (size_t pass = 0; r == 0 && descend; pass++) {
        p = (remove_pass){0};
        r = remove_pass_run(&p, dirfd, name);
        if (r == 0)
            r = remove_one(&p, &descend, dirfd, name);
        if (r == 0 && descend && (p.removed == 0 || pass == FSX_REMOVE_PASSES_MAX))
            r = fawn_err(FAWN_EIO,
                         "%s could not be emptied (entries keep appearing or cannot "
                         "be removed)",
                         name);
    }
    return r;
}

/* ---- tree usage ---- */

/* One walk: the open directories from the top down to the current one. */
typedef struct usage_walk {
    DIR **open;     /* max_depth + 1 slots */
    unsigned depth; /* how many are open */
    size_t seen;    /* entries examined */
    dev_t dev;      /* the top's filesystem */
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
    usage_walk w = {.open = calloc((size_t)b->max_depth + 1, sizeof(DIR *)),
                    .dev = st.st_dev,
                    .bytes = usage_share(&st),
                    .b = b};
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

/* ---- staging files ---- */

/* Random bytes in a staging name: a collision is negligible, and still retried. */
#define STAGING_RANDOM_BYTES 8
#define STAGING_ATTEMPTS 8
/* The mode of a staging file until its commit: nobody else reads a half-written file. */
#define STAGING_MODE 0600

/* The forms of staging names, made and recognized from this table only. */
typedef struct staging_form {
    const char *prefix, *suffix;
} staging_form;

#define STAGING_WRITE_PREFIX ".fawn-tmp-"
#define STAGING_UPLOAD_PREFIX ".upload-"
#define STAGING_UPLOAD_SUFFIX ".part"

static const staging_form staging_forms[] = {
    [FSX_STAGING_WRITE] = {STAGING_WRITE_PREFIX, ""},
    [FSX_STAGING_UPLOAD] = {STAGING_UPLOAD_PREFIX, STAGING_UPLOAD_SUFFIX},
};

_Static_assert(sizeof STAGING_UPLOAD_PREFIX - 1 + 2 * STAGING_RANDOM_BYTES +
                           sizeof STAGING_UPLOAD_SUFFIX <=
                       FSX_STAGING_NAME_SIZE &&
                   sizeof STAGING_WRITE_PREFIX + 2 * STAGING_RANDOM_BYTES <= FSX_STAGING_NAME_SIZE,
               "FSX_STAGING_NAME_SIZE holds every staging name");

bool fsx_staging_name_is(const char *name, enum fsx_staging_kind kind) {
    const staging_form *f = &staging_forms[kind];
    size_t n = strlen(name), pre = strlen(f->prefix), suf = strlen(f->suffix);
    return n >= pre + suf && strncmp(name, f->prefix, pre) == 0 &&
           strcmp(name + n - suf, f->suffix) == 0;
}

bool fsx_is_staging_name(const char *name) {
    for (size_t k = 0; k < ARRAY_LEN(staging_forms); k++) {
        if (fsx_staging_name_is(name, (enum fsx_staging_kind)k))
            return true;
    }
    return false;
}

int fsx_check_replaceable(const struct stat *st, const char *shown) {
    if (S_ISLNK(st->st_mode))
        return fawn_err(FAWN_EPERM, "refusing to write through a symlink: %s", shown);
    if (!S_ISREG(st->st_mode))
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", shown);
    if (st->st_nlink != 1)
        return fawn_err(FAWN_EPERM, "refusing to write to a file with several hard links: %s",
                        shown);
    return 0;
}

/* The one mapping of a staging step's failure e (see fsx.h); the message
 * reads "<what> <shown>: <strerror>". */
static int staging_err(int e, const char *what, const char *shown) {
    int code;
    switch (e) {
    case EDQUOT:
    case ENOSPC: code = FAWN_E2BIG; break;
    case EACCES:
    case EPERM:
    case EROFS: code = FAWN_EPERM; break;
    case ENOENT: code = FAWN_ENOENT; break;
    case EEXIST: return fawn_err(FAWN_EEXIST, "already exists: %s", shown);
    case EISDIR:
    case ENOTDIR:
    case ENOTEMPTY: return fawn_err(FAWN_EINVAL, "not a regular file: %s", shown);
    default: code = FAWN_EIO;
    }
    return fawn_err_sys(code, e, "%s%s%s", what, shown[0] ? " " : "", shown);
}

static bool staged_same(const fsx_staged *s, const struct stat *st) {
    return S_ISREG(st->st_mode) && st->st_dev == s->dev && st->st_ino == s->ino;
}

/* Creates one staging file under a fresh name; -1 with errno when taken. */
static int staged_create(fsx_staged *s, const staging_form *f) {
    char hex[2 * STAGING_RANDOM_BYTES + 1];
    fawn_random_hex(hex, STAGING_RANDOM_BYTES);
    snprintf(s->name, sizeof s->name, "%s%s%s", f->prefix, hex, f->suffix);
    return openat(s->dirfd, s->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                  STAGING_MODE);
}

int fsx_staged_open(fsx_staged *s, int dirfd, enum fsx_staging_kind kind, mode_t mode) {
    *s = (fsx_staged){.dirfd = dirfd, .fd = -1, .mode = mode & 0777};
    int fd = -1;
    for (int i = 0; fd < 0 && i < STAGING_ATTEMPTS; i++) {
        fd = staged_create(s, &staging_forms[kind]);
        int e = errno;
        if (fd < 0 && e != EEXIST) {
            s->name[0] = '\0';
            return staging_err(e, "create a staging file", "");
        }
    }
    if (fd < 0) {
        s->name[0] = '\0';
        return fawn_err(FAWN_EIO, "no free staging file name after %d tries", STAGING_ATTEMPTS);
    }
    s->fd = fd;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        int e = errno;
        fsx_staged_abort(s);
        return staging_err(e, "stat a staging file", "");
    }
    s->dev = st.st_dev;
    s->ino = st.st_ino;
    return 0;
}

int fsx_staged_write(fsx_staged *s, const void *data, size_t n) {
    if (!s->name[0] || s->fd < 0)
        return fawn_err(FAWN_EINVAL, "no staging file is open for writing");
    return fawn_write_all(s->fd, data, n);
}

static int staged_flush(fsx_staged *s, const char *shown) {
    if (s->fd < 0)
        return 0;
    int fd = steal_fd(s->fd);
    int r = fsync(fd) < 0 ? staging_err(errno, "flush", shown) : 0;
    if (close(fd) < 0 && r == 0)
        r = staging_err(errno, "close", shown);
    return r;
}

int fsx_staged_flush(fsx_staged *s) { return staged_flush(s, "a staging file"); }

/* Opens the staging file again by its name, checking before and after the
 * open that the name still names the file created (check, open, check
 * again: nothing else is opened, not even a FIFO or a device). */
static int staged_reopen(int *fd, struct stat *st, const fsx_staged *s, const char *shown) {
    *fd = -1;
    if (fstatat(s->dirfd, s->name, st, AT_SYMLINK_NOFOLLOW) == 0 && staged_same(s, st))
        *fd = openat(s->dirfd, s->name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (*fd >= 0 && fstat(*fd, st) == 0 && staged_same(s, st))
        return 0;
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
    return fawn_err(FAWN_EBUSY,
                    "the staging file of %s was removed or replaced while being "
                    "written; try again",
                    shown);
}

/* Looks at what name holds now: *old is set to it when it exists. */
static int staged_check_final(bool *exists, struct stat *old, const fsx_staged *s, const char *name,
                              unsigned flags, const char *shown) {
    *exists = false;
    if (fstatat(s->dirfd, name, old, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : staging_err(errno, "stat", shown);
    *exists = true;
    if (!(flags & FSX_COMMIT_REPLACE))
        return fawn_err(FAWN_EEXIST, "already exists: %s", shown);
    return fsx_check_replaceable(old, shown);
}

/* Gives fd (whose stat is cur) the replaced file's permission bits and,
 * where this process may, its owner; or the new file's mode. */
static int staged_set_attributes(int fd, const struct stat *cur, const struct stat *old,
                                 mode_t mode, const char *shown) {
    if (old && (old->st_uid != cur->st_uid || old->st_gid != cur->st_gid) &&
        fchown(fd, old->st_uid, old->st_gid) < 0)
        log_debug("fsx", "%s keeps this process's owner: %s", shown, strerror(errno));
    if (fchmod(fd, old ? old->st_mode & 0777 : mode) < 0)
        return staging_err(errno, "set the mode of", shown);
    return 0;
}

/* renameat2(RENAME_NOREPLACE), or on filesystems without it, link() which
 * refuses an existing name just as atomically. Sets errno on failure. */
static int rename_noreplace(int dirfd, const char *from, const char *to) {
    if (renameat2(dirfd, from, dirfd, to, RENAME_NOREPLACE) == 0)
        return 0;
    if (errno != EINVAL && errno != ENOSYS)
        return -1;
    if (linkat(dirfd, from, dirfd, to, 0) < 0)
        return -1;
    unlinkat(dirfd, from, 0);
    return 0;
}

static int staged_rename(const fsx_staged *s, const char *name, unsigned flags, const char *shown) {
    int rc = flags & FSX_COMMIT_REPLACE ? renameat(s->dirfd, s->name, s->dirfd, name)
                                        : rename_noreplace(s->dirfd, s->name, name);
    return rc < 0 ? staging_err(errno, "rename into", shown) : 0;
}

int fsx_staged_commit(struct stat *st, fsx_staged *s, const char *name, unsigned flags,
                      const char *shown) {
    *st = (struct stat){0};
    if (!s->name[0] || s->placed)
        return fawn_err(FAWN_EINVAL, "no staging file to put in place as %s", shown);
    _cleanup_close_ int fd = -1;
    struct stat cur, old;
    bool exists = false;
    int r;
    if ((r = staged_flush(s, shown)) < 0 || (r = staged_reopen(&fd, &cur, s, shown)) < 0 ||
        (r = staged_check_final(&exists, &old, s, name, flags, shown)) < 0 ||
        (r = staged_set_attributes(fd, &cur, exists ? &old : NULL, s->mode, shown)) < 0)
        return r;
    if (fstat(fd, st) < 0)
        return staging_err(errno, "stat", shown);
    if ((r = staged_rename(s, name, flags, shown)) < 0) {
        *st = (struct stat){0};
        return r;
    }
    s->placed = true;
    if (!(flags & FSX_COMMIT_DEFER_DIR_SYNC))
        fsx_dir_sync(s->dirfd, shown);
    return 0;
}

void fsx_staged_abort(fsx_staged *s) {
    if (s->name[0]) {
        if (s->fd >= 0)
            close(s->fd);
        if (!s->placed && unlinkat(s->dirfd, s->name, 0) < 0 && errno != ENOENT)
            log_warn("fsx", "removing staging file %s: %s", s->name, strerror(errno));
    }
    *s = (fsx_staged){.fd = -1};
}

void fsx_dir_sync(int dirfd, const char *shown) {
    if (fsync(dirfd) < 0)
        log_warn("fsx", "flushing the directory of %s: %s", shown, strerror(errno));
}
