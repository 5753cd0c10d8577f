/* The sandbox's view of the skills (skills.h): per-user copies of the
 * enabled skills a role may use, built in a staging directory and swapped
 * into the directory sandboxes mount read-only at /mnt/skills. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsx.h"
#include "skills/skills.h"

/* Names beside the view, in the user's directory: the view, where the next
 * one is built (a crash leaves it; the next sync removes it), and the lock
 * that serializes syncs. */
#define VIEW_NAME "skills-view"
#define STAGING_NAME ".skills-view.staging"
#define LOCK_NAME ".skills-view.lock"
/* The signature of the sources the view was last built from (see
 * view_signature): a sync whose sources have the same one has nothing to
 * do. Removed before a rebuild, written after one succeeded. */
#define MANIFEST_NAME ".skills-view.manifest"
/* Sandboxes run as another host uid: the view is readable by all, and
 * writable by no one but fawn (and mounted read-only). */
#define VIEW_DIR_MODE 0755
#define VIEW_FILE_MODE 0644
#define VIEW_EXEC_MODE 0755
/* Bytes one read moves while a file is copied. */
#define COPY_CHUNK ((size_t)64 << 10)

int skills_view_path(char out[PATH_MAX], const json_t *skill) {
    out[0] = '\0';
    const char *name = json_string_value(json_object_get(skill, "name"));
    const char *path = json_string_value(json_object_get(skill, "path"));
    bool custom = json_is_true(json_object_get(skill, "custom"));
    if (!path || !path[0] || path[0] == '/' || strstr(path, "..") ||
        (custom && !skills_name_valid(name)))
        return fawn_err(FAWN_EINVAL, "a skill without a valid path");
    int n = custom ? snprintf(out, PATH_MAX, SKILLS_VIEW_CUSTOM "/%s", name)
                   : snprintf(out, PATH_MAX, "%s", path);
    if (n < 0 || n >= PATH_MAX) {
        out[0] = '\0';
        return fawn_err(FAWN_EINVAL, "skill path too long");
    }
    return 0;
}

/* The user's directory under home (made when missing), O_DIRECTORY. */
static int user_dir_open(const char *home, const char *user) {
    if (!fawn_id_valid(user))
        return fawn_err(FAWN_EINVAL, "invalid user");
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, "users/%s", user);
    _cleanup_close_ int homefd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (homefd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open the home directory");
    return fsx_mkdirs_beneath(homefd, rel);
}

/* The directory name in dirfd, created (mode) when missing, never through
 * a symlink: O_DIRECTORY fd or < 0. */
static int subdir_make(int dirfd, const char *name, mode_t mode, bool *made) {
    *made = mkdirat(dirfd, name, mode) == 0;
    if (!*made && errno != EEXIST)
        return fawn_err_sys(FAWN_EIO, errno, "create %s", name);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", name);
    if (*made && fchmod(fd, mode) < 0) {
        int e = errno;
        close(fd);
        return fawn_err_sys(FAWN_EIO, e, "chmod %s", name);
    }
    return fd;
}

int skills_view_ensure(char out[PATH_MAX], const char *home, const char *user) {
    out[0] = '\0';
    _cleanup_close_ int userfd = user_dir_open(home, user);
    if (userfd < 0)
        return userfd;
    bool made;
    _cleanup_close_ int view = subdir_make(userfd, VIEW_NAME, VIEW_DIR_MODE, &made);
    if (view < 0)
        return view;
    if (snprintf(out, PATH_MAX, "%s/users/%s/" VIEW_NAME, home, user) >= PATH_MAX) {
        out[0] = '\0';
        return fawn_err(FAWN_EINVAL, "home path too long");
    }
    return 0;
}

/* ---- copying a skill's tree, within bounds ---- */

typedef struct budget {
    size_t entries;
    uint64_t bytes;
} budget;

static int budget_entry(budget *b) {
    if (++b->entries > SKILLS_VIEW_ENTRIES_MAX)
        return fawn_err(FAWN_E2BIG, "the skills in the sandbox would hold more than %d files",
                        SKILLS_VIEW_ENTRIES_MAX);
    return 0;
}

static int budget_bytes(budget *b, uint64_t n) {
    b->bytes += n;
    if (b->bytes > SKILLS_VIEW_BYTES_MAX)
        return fawn_err(FAWN_E2BIG, "the skills in the sandbox would hold more than %llu bytes",
                        (unsigned long long)SKILLS_VIEW_BYTES_MAX);
    return 0;
}

/* Copies the bytes of in to out, counted against b. */
static int bytes_copy(int out, int in, budget *b) {
    char *buf = malloc(COPY_CHUNK);
    int r = buf ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    while (r == 0) {
        ssize_t got = read(in, buf, COPY_CHUNK);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            r = fawn_err_sys(FAWN_EIO, errno, "read a skill's file");
        if (got <= 0)
            break;
        r = budget_bytes(b, (uint64_t)got);
        for (ssize_t done = 0; r == 0 && done < got;) {
            ssize_t put = write(out, buf + done, (size_t)(got - done));
            if (put < 0 && errno != EINTR)
                r = fawn_err_sys(FAWN_EIO, errno, "write the skills view");
            done += put > 0 ? put : 0;
        }
    }
    free(buf);
    return r;
}

/* A new copy of the regular file name of src in dst (executable when the
 * source is executable by its owner; no other bit carried over). */
static int file_copy(int dst, int src, const char *name, budget *b) {
    _cleanup_close_ int in = openat(src, name,
                                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    struct stat st;
    if (in < 0 || fstat(in, &st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open a skill's file");
    if (!S_ISREG(st.st_mode))
        return 0;
    mode_t mode = st.st_mode & S_IXUSR ? VIEW_EXEC_MODE : VIEW_FILE_MODE;
    _cleanup_close_ int out = openat(dst, name,
                                     O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode);
    if (out < 0 || fchmod(out, mode) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "create a file in the skills view");
    return bytes_copy(out, in, b);
}

static int dir_copy(int dst, int src, unsigned depth, budget *b);

/* A new copy of the directory name of src (and its tree) in dst. */
static int subdir_copy(int dst, int src, const char *name, unsigned depth, budget *b) {
    if (depth >= SKILLS_VIEW_DEPTH_MAX)
        return fawn_err(FAWN_E2BIG, "a skill's tree is deeper than %d levels",
                        SKILLS_VIEW_DEPTH_MAX);
    _cleanup_close_ int in = openat(src, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (in < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open a skill's directory");
    bool made;
    _cleanup_close_ int out = subdir_make(dst, name, VIEW_DIR_MODE, &made);
    if (out >= 0 && !made)
        return fawn_err(FAWN_EIO, "a directory of the skills view was made twice");
    return out < 0 ? out : dir_copy(out, in, depth + 1, b);
}

/* One entry of src copied into dst: directories and regular files only; a
 * symlink, FIFO, socket or device is left out, never followed or opened. */
static int entry_copy(int dst, int src, const char *name, unsigned depth, budget *b) {
    struct stat st;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    if (fstatat(src, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return errno == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, errno, "stat a skill's file");
    if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
        return 0;
    int r = budget_entry(b);
    if (r == 0)
        r = S_ISDIR(st.st_mode) ? subdir_copy(dst, src, name, depth, b)
                                : file_copy(dst, src, name, b);
    return r;
}

/* Calls each(ctx, name) for every entry of dir (read through a copy of the
 * fd, so dir stays as it is), until one fails. */
static int dir_each(int dir, int (*each)(void *ctx, const char *name), void *ctx) {
    int copy = dup(dir);
    DIR *d = copy >= 0 ? fdopendir(copy) : NULL;
    if (!d) {
        if (copy >= 0)
            close(copy);
        return fawn_err_sys(FAWN_EIO, errno, "read a skill's directory");
    }
    struct dirent *e;
    int r = 0;
    while (r == 0 && (e = readdir(d)))
        r = each(ctx, e->d_name);
    closedir(d);
    return r;
}

typedef struct copy_ctx {
    int dst, src;
    unsigned depth;
    budget *b;
} copy_ctx;

static int copy_each(void *ctx, const char *name) {
    copy_ctx *c = ctx;
    return entry_copy(c->dst, c->src, name, c->depth, c->b);
}

static int dir_copy(int dst, int src, unsigned depth, budget *b) {
    copy_ctx c = {.dst = dst, .src = src, .depth = depth, .b = b};
    return dir_each(src, copy_each, &c);
}

/* ---- staging the view ---- */

/* The directory in stage that holds the entry at rel (its parents made),
 * and rel's last component in *base: O_DIRECTORY fd or < 0. */
static int parent_make(const char **base, int stage, char rel[PATH_MAX]) {
    char *slash = strrchr(rel, '/');
    *base = slash ? slash + 1 : rel;
    if (!slash) {
        int fd = fcntl(stage, F_DUPFD_CLOEXEC, 0);
        return fd >= 0 ? fd : fawn_err_sys(FAWN_EIO, errno, "dup");
    }
    *slash = '\0';
    int fd = fsx_mkdirs_beneath(stage, rel);
    *slash = '/';
    return fd;
}

/* Whether the user's own skills have no place in stage: a shared skill
 * holds the directory they would go in. */
static bool custom_blocked(int stage) {
    return faccessat(stage, SKILLS_VIEW_CUSTOM "/SKILL.md", F_OK, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Copies the catalog entry skill from dirs into stage at its view path. */
static int skill_stage(int stage, const skills_dirs *dirs, const json_t *skill, budget *b) {
    char rel[PATH_MAX];
    bool custom = json_is_true(json_object_get(skill, "custom"));
    const char *dir = custom ? dirs->custom : dirs->shared;
    int r = skills_view_path(rel, skill);
    if (r < 0 || !dir)
        return r < 0 ? r : fawn_err(FAWN_EINVAL, "no directory for skill %s", rel);
    if (custom && custom_blocked(stage)) {
        log_warn("skills", "user skill %s left out of the sandbox: a shared skill is at %s", rel,
                 SKILLS_VIEW_CUSTOM);
        return 0;
    }
    _cleanup_close_ int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int src = root < 0
                                  ? -1
                                  : fsx_open_beneath(
                                        root, json_string_value(json_object_get(skill, "path")),
                                        O_RDONLY | O_DIRECTORY, 0, FSX_NO_SYMLINKS);
    if (src < 0)
        return fawn_err(FAWN_EIO, "skill %s cannot be read", rel);
    const char *base = NULL;
    _cleanup_close_ int parent = parent_make(&base, stage, rel);
    if (parent < 0)
        return parent;
    bool made;
    _cleanup_close_ int dst = subdir_make(parent, base, VIEW_DIR_MODE, &made);
    if (dst >= 0 && !made) {
        log_warn("skills", "skill %s left out of the sandbox: another skill is there", rel);
        return 0;
    }
    return dst < 0 ? dst : dir_copy(dst, src, 1, b);
}

/* The enabled skills of catalog copied into stage. */
static int view_stage(int stage, const skills_dirs *dirs, const json_t *catalog) {
    budget b = {0};
    size_t i;
    json_t *skill;
    int r = 0;
    json_array_foreach(catalog, i, skill) {
        if (r == 0 && skills_offered(skill))
            r = skill_stage(stage, dirs, skill, &b);
    }
    return r;
}

/* ---- swapping it in ---- */

/* The names in dirfd (but "." and "..") into a new array *out. */
static int names_read(json_t **out, int dirfd) {
    *out = json_array();
    int copy = dup(dirfd);
    DIR *d = copy >= 0 && *out ? fdopendir(copy) : NULL;
    if (!d) {
        if (copy >= 0)
            close(copy);
        return fawn_err_sys(FAWN_EIO, errno, "read the skills view");
    }
    struct dirent *e;
    int r = 0;
    while (r == 0 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            json_array_append_new(*out, json_string(e->d_name)) < 0)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
    closedir(d);
    return r;
}

/* Puts stage's entry name in view: exchanged with the one there (which
 * stays in stage, removed with it), or moved in when there is none. */
static int entry_swap(int view, int stage, const char *name) {
    if (renameat2(stage, name, view, name, RENAME_EXCHANGE) == 0)
        return 0;
    if (errno == EINVAL) { /* a filesystem without exchange */
        int r = fsx_remove_tree(view, name);
        if (r < 0 && r != FAWN_ENOENT)
            return r;
    } else if (errno != ENOENT) {
        return fawn_err_sys(FAWN_EIO, errno, "swap %s into the skills view", name);
    }
    if (renameat2(stage, name, view, name, RENAME_NOREPLACE) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "move %s into the skills view", name);
    return 0;
}

/* view's entries become stage's: what stage lacks is removed, the rest
 * swapped in one entry at a time. */
static int view_swap(int view, int stage) {
    json_t *old = NULL, *fresh = NULL, *name;
    int r = names_read(&old, view);
    if (r == 0)
        r = names_read(&fresh, stage);
    size_t i;
    struct stat st;
    json_array_foreach(old, i, name) {
        const char *n = json_string_value(name);
        if (r == 0 && fstatat(stage, n, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT &&
            (r = fsx_remove_tree(view, n)) == FAWN_ENOENT)
            r = 0;
    }
    json_array_foreach(fresh, i, name) {
        if (r == 0)
            r = entry_swap(view, stage, json_string_value(name));
    }
    json_decref(old);
    json_decref(fresh);
    return r;
}

/* Nothing stale stays visible: view emptied, or when that fails, closed to
 * everyone but its owner (mode 0) until a sync succeeds. */
static void view_close(int view) {
    json_t *names = NULL, *name;
    int r = names_read(&names, view);
    size_t i;
    json_array_foreach(names, i, name) {
        int gone = fsx_remove_tree(view, json_string_value(name));
        if (r == 0 && gone < 0 && gone != FAWN_ENOENT)
            r = gone;
    }
    json_decref(names);
    if (r < 0 && fchmod(view, 0) < 0)
        log_error("skills", "the skills view could be neither emptied nor closed: %s",
                  strerror(errno));
}

/* ---- skipping a rebuild that would change nothing ----
 * A view's sources are summed up by what stat says of every entry of every
 * enabled skill's tree (name, type, size, inode, change and modification
 * times: a file fawn replaces gets a new inode, one edited in place new
 * times) and by the catalog (view paths): no file is read. A source that
 * changes while a view is built changes the signature the next sync
 * computes, which then rebuilds it. */

static int sig_dir(fbuf *sig, int dir, unsigned depth, size_t *seen);

/* What st says of the entry name, as one line of sig. */
static int sig_stat(fbuf *sig, const struct stat *st, const char *name, unsigned depth) {
    return fbuf_printf(sig, "%u %zu:%s %o %lld %llu %lld.%09ld %lld.%09ld\n", depth, strlen(name),
                       name, (unsigned)st->st_mode, (long long)st->st_size,
                       (unsigned long long)st->st_ino, (long long)st->st_mtim.tv_sec,
                       st->st_mtim.tv_nsec, (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
}

/* One entry of dir summed up into sig (a directory with its tree). */
static int sig_entry(fbuf *sig, int dir, const char *name, unsigned depth, size_t *seen) {
    struct stat st;
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return 0;
    if (++*seen > SKILLS_VIEW_ENTRIES_MAX || depth > SKILLS_VIEW_DEPTH_MAX)
        return fawn_err(FAWN_E2BIG, "a skill's tree passes the view's bounds");
    if (fstatat(dir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat a skill's file");
    int r = sig_stat(sig, &st, name, depth);
    if (r < 0 || !S_ISDIR(st.st_mode))
        return r;
    _cleanup_close_ int sub = openat(dir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    return sub < 0 ? fawn_err_sys(FAWN_EIO, errno, "open a skill's directory")
                   : sig_dir(sig, sub, depth + 1, seen);
}

typedef struct sig_ctx {
    fbuf *sig;
    int dir;
    unsigned depth;
    size_t *seen;
} sig_ctx;

static int sig_each(void *ctx, const char *name) {
    sig_ctx *c = ctx;
    return sig_entry(c->sig, c->dir, name, c->depth, c->seen);
}

static int sig_dir(fbuf *sig, int dir, unsigned depth, size_t *seen) {
    sig_ctx c = {.sig = sig, .dir = dir, .depth = depth, .seen = seen};
    return dir_each(dir, sig_each, &c);
}

/* The catalog entry skill (enabled), its view path and its tree, summed
 * up into sig. */
static int sig_skill(fbuf *sig, const skills_dirs *dirs, const json_t *skill, size_t *seen) {
    bool custom = json_is_true(json_object_get(skill, "custom"));
    const char *dir = custom ? dirs->custom : dirs->shared;
    char rel[PATH_MAX];
    int r = skills_view_path(rel, skill);
    if (r < 0 || !dir)
        return r < 0 ? r : fawn_err(FAWN_EINVAL, "no directory for skill %s", rel);
    _cleanup_close_ int root = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    _cleanup_close_ int src = root < 0
                                  ? -1
                                  : fsx_open_beneath(
                                        root, json_string_value(json_object_get(skill, "path")),
                                        O_RDONLY | O_DIRECTORY, 0, FSX_NO_SYMLINKS);
    struct stat st;
    if (src < 0 || fstat(src, &st) < 0)
        return fawn_err(FAWN_EIO, "skill %s cannot be read", rel);
    r = fbuf_printf(sig, "skill %d %zu:%s\n", custom, strlen(rel), rel);
    if (r == 0)
        r = sig_stat(sig, &st, rel, 0);
    return r < 0 ? r : sig_dir(sig, src, 1, seen);
}

/* The signature of the view catalog's enabled skills would make (64 hex
 * digits) into out; an error when a source cannot be summed up (the
 * rebuild then says what is wrong). */
static int view_signature(char out[65], const skills_dirs *dirs, const json_t *catalog) {
    fbuf sig = {0};
    size_t seen = 0, i;
    json_t *skill;
    int r = fbuf_printf(&sig, "fawn skills view 1\n");
    json_array_foreach(catalog, i, skill) {
        if (r == 0 && skills_offered(skill))
            r = sig_skill(&sig, dirs, skill, &seen);
    }
    if (r == 0)
        fawn_sha256_hex(out, sig.data, sig.len);
    fbuf_free(&sig);
    return r;
}

/* Whether the manifest in userfd records sig. */
static bool manifest_matches(int userfd, const char sig[65]) {
    _cleanup_close_ int fd = openat(userfd, MANIFEST_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    char got[66];
    ssize_t n = fd < 0 ? -1 : read(fd, got, sizeof got);
    return n == 64 && memcmp(got, sig, 64) == 0;
}

/* Records sig as the manifest in userfd (through the staging writer). */
static int manifest_write(int userfd, const char sig[65]) {
    fsx_staged s = {0};
    struct stat st;
    int r = fsx_staged_open(&s, userfd, FSX_STAGING_WRITE, 0600);
    if (r == 0)
        r = fsx_staged_write(&s, sig, 64);
    if (r == 0)
        r = fsx_staged_commit(&st, &s, MANIFEST_NAME, FSX_COMMIT_REPLACE, MANIFEST_NAME);
    fsx_staged_abort(&s);
    return r;
}

/* Builds the next view in a fresh staging directory of userfd and swaps it
 * into view. */
static int view_rebuild(int userfd, int view, const skills_dirs *dirs, const json_t *catalog) {
    int r = fsx_remove_tree(userfd, STAGING_NAME);
    if (r < 0 && r != FAWN_ENOENT)
        return r;
    bool made;
    _cleanup_close_ int stage = subdir_make(userfd, STAGING_NAME, VIEW_DIR_MODE, &made);
    if (stage < 0)
        return stage;
    r = view_stage(stage, dirs, catalog);
    if (r == 0)
        r = view_swap(view, stage);
    int gone = fsx_remove_tree(userfd, STAGING_NAME);
    if (gone < 0 && gone != FAWN_ENOENT)
        log_warn("skills", "the skills view's staging directory was left: %s", fawn_errmsg());
    return r;
}

int skills_view_sync(const char *home, const char *user, const skills_dirs *dirs,
                     const json_t *catalog) {
    _cleanup_close_ int userfd = user_dir_open(home, user);
    if (userfd < 0)
        return userfd;
    _cleanup_close_ int lock = openat(userfd, LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC,
                                      0600);
    if (lock < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open the skills view's lock");
    while (flock(lock, LOCK_EX) < 0)
        if (errno != EINTR)
            return fawn_err_sys(FAWN_EIO, errno, "lock the skills view");
    bool made;
    _cleanup_close_ int view = subdir_make(userfd, VIEW_NAME, VIEW_DIR_MODE, &made);
    if (view < 0)
        return view;
    char sig[65];
    bool summed = view_signature(sig, dirs, catalog) == 0;
    if (summed && manifest_matches(userfd, sig))
        return 0;
    int r = unlinkat(userfd, MANIFEST_NAME, 0) == 0 || errno == ENOENT
                ? view_rebuild(userfd, view, dirs, catalog)
                : fawn_err_sys(FAWN_EIO, errno, "remove the skills view's manifest");
    if (r == 0 && fchmod(view, VIEW_DIR_MODE) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "open the skills view");
    if (r == 0 && summed && manifest_write(userfd, sig) < 0)
        log_warn("skills", "the skills view is rebuilt at each run: %s", fawn_errmsg());
    if (r < 0) {
        char why[256];
        snprintf(why, sizeof why, "%s", fawn_errmsg());
        view_close(view);
        return fawn_err(r, "%s", why);
    }
    return 0;
}
