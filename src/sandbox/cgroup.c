/* Resource limits for sandboxes through cgroups.
 *
 * Discovery reads two kernel files: /proc/self/cgroup (which group this
 * process is in, per hierarchy) and /proc/self/mountinfo (where each
 * hierarchy is mounted, and which part of it). The parsers below are pure
 * functions over that text. A sandbox's group is "<own group>/fawn/<name>"
 * in the cgroup2 hierarchy when it has memory and pids controllers to give,
 * else in the v1 memory and pids hierarchies. */
#include "sandbox/local.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/base.h"

/* Every group path fits the handle's fields; anything longer is refused. */
#define CG_PATH_MAX 512
_Static_assert(CG_PATH_MAX == sizeof(((cgroup_handle *)0)->v2_path), "handle path size");
/* A group path plus "/" and the longest control file name we touch. */
#define CG_FILE_PATH_MAX (CG_PATH_MAX + 64)
/* /proc/self/cgroup has one short line per hierarchy (about 15 on any host). */
#define CG_SELF_MAX ((size_t)64 << 10)
/* mountinfo of a host running thousands of containers stays well below this. */
#define CG_MOUNTINFO_MAX ((size_t)16 << 20)
/* Lines looked at in either file: bounds the work on a hostile or huge input. */
#define CG_MAX_LINES 200000
/* Fields of one mountinfo line: 10 fixed ones plus a few optional tags. */
#define CG_MAX_FIELDS 64
/* Control files we read (cgroup.controllers, subtree_control) are one short line. */
#define CG_CTL_MAX 1024
/* cgroup.procs of one sandbox: about 8 bytes per pid, far above any pids.max we set. */
#define CG_PROCS_MAX ((size_t)1 << 20)
/* Reasons kept for the log line and doctor; paths inside them may be cut. */
#define CG_WHY_MAX 200
/* base keeps error messages up to this size; a propagated one is kept whole. */
#define CG_ERRMSG_MAX 512
/* Creating fawn/<name> races with a destroy removing an empty fawn/; retry that. */
#define CG_CREATE_TRIES 3
/* pidfds held at once while killing; far below any RLIMIT_NOFILE. */
#define CG_KILL_BATCH 64
/* Kill rounds and the pause between them: 1 s in total for SIGKILLed
 * processes to leave the group (they exit within milliseconds). */
#define CG_KILL_ROUNDS 200
#define CG_KILL_PAUSE_MS 5
/* rmdir retries while exiting tasks still pin the group: 1 s in total. */
#define CG_RMDIR_TRIES 200
#define CG_RMDIR_PAUSE_MS 5

/* The groups this process is in, as /proc/self/cgroup shows them ("" = none). */
typedef struct cg_self {
    char v2[CG_PATH_MAX];     /* from the "0::<path>" line */
    char memory[CG_PATH_MAX]; /* from the v1 line listing "memory" */
    char pids[CG_PATH_MAX];   /* from the v1 line listing "pids" */
} cg_self;

/* One cgroup filesystem mount: where it is, and which group is its root. */
typedef struct cg_mount {
    char point[CG_PATH_MAX]; /* "" = not found */
    char root[CG_PATH_MAX];
} cg_mount;

/* The mounts that show this process's own groups. */
typedef struct cg_mounts {
    cg_mount v2;
    cg_mount memory;
    cg_mount pids;
} cg_mounts;

/* The group to create, and whether an existing live group of that name is
 * adopted (to be destroyed by name from another process) or refused. */
typedef struct cg_want {
    const char *name;
    bool adopt;
} cg_want;

typedef struct cg_host {
    cg_self self;
    cg_mounts mounts;
} cg_host;

/* Formats a reason for people into buf; a long path in it may be cut. */
__attribute__((format(printf, 3, 4))) static void cg_say(char *buf, size_t cap, const char *fmt,
                                                         ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, cap, fmt, ap);
    va_end(ap);
}

/* ---- pure text parsing ---- */

/* Splits off the next line of [*pos, end); false at the end. */
static bool cg_next_line(const char **pos, const char *end, const char **line, size_t *n) {
    if (*pos >= end)
        return false;
    const char *nl = memchr(*pos, '\n', (size_t)(end - *pos));
    const char *stop = nl ? nl : end;
    *line = *pos;
    *n = (size_t)(stop - *pos);
    *pos = nl ? nl + 1 : end;
    return true;
}

static bool cg_is_sep(char c) { return c == ',' || c == ' ' || c == '\n'; }

/* True when word is one of the comma-, space- or newline-separated tokens of list[0..n). */
static bool cg_has_token(const char *list, size_t n, const char *word) {
    size_t wn = strlen(word);
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && !cg_is_sep(list[j]))
            j++;
        if (j - i == wn && memcmp(list + i, word, wn) == 0)
            return true;
        i = j + 1;
    }
    return false;
}

static int cg_copy(char *dst, size_t cap, const char *src, size_t n) {
    if (n >= cap)
        return FAWN_E2BIG;
    memcpy(dst, src, n);
    dst[n] = '\0';
    return 0;
}

static bool cg_digits(const char *s, size_t n) {
    if (n == 0)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return false;
    return true;
}

/* Parses one "id:controllers:path" line into the slots of out it concerns. */
static int cg_parse_self_line(cg_self *out, const char *line, size_t n, size_t lineno) {
    const char *end = line + n;
    const char *c1 = memchr(line, ':', n);
    const char *c2 = c1 ? memchr(c1 + 1, ':', (size_t)(end - c1 - 1)) : NULL;
    if (!c2 || !cg_digits(line, (size_t)(c1 - line)))
        return fawn_err(FAWN_EINVAL, "/proc/self/cgroup line %zu: expected id:controllers:path",
                        lineno);
    const char *ctl = c1 + 1, *path = c2 + 1;
    size_t ctl_n = (size_t)(c2 - ctl), path_n = (size_t)(end - path);
    if (path_n == 0 || path[0] != '/')
        return fawn_err(FAWN_EINVAL, "/proc/self/cgroup line %zu: path is not absolute", lineno);
    bool v2 = ctl_n == 0 && c1 - line == 1 && line[0] == '0';
    char *slots[] = {v2 ? out->v2 : NULL, cg_has_token(ctl, ctl_n, "memory") ? out->memory : NULL,
                     cg_has_token(ctl, ctl_n, "pids") ? out->pids : NULL};
    for (size_t i = 0; i < ARRAY_LEN(slots); i++)
        if (slots[i] && cg_copy(slots[i], CG_PATH_MAX, path, path_n) < 0)
            return fawn_err(FAWN_E2BIG, "/proc/self/cgroup line %zu: path longer than %d bytes",
                            lineno, CG_PATH_MAX - 1);
    return 0;
}

/* Parses the text of /proc/<pid>/cgroup. FAWN_EINVAL on a malformed line or a
 * NUL byte, FAWN_E2BIG on a path or line count past the limits. */
static int cg_parse_self(cg_self *out, const char *text, size_t len) {
    memset(out, 0, sizeof *out);
    if (memchr(text, '\0', len))
        return fawn_err(FAWN_EINVAL, "/proc/self/cgroup contains a NUL byte");
    const char *pos = text, *end = text + len, *line;
    size_t n, lineno = 0;
    while (cg_next_line(&pos, end, &line, &n)) {
        if (++lineno > CG_MAX_LINES)
            return fawn_err(FAWN_E2BIG, "/proc/self/cgroup has more than %d lines", CG_MAX_LINES);
        if (n == 0)
            continue;
        int r = cg_parse_self_line(out, line, n, lineno);
        if (r < 0)
            return r;
    }
    return 0;
}

/* Decodes mountinfo's octal escapes (\040 space, \011 tab, \012 newline,
 * \134 backslash). A lone backslash or an escape of NUL is FAWN_EINVAL. */
static int cg_unescape(char *dst, size_t cap, const char *s, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned c = (unsigned char)s[i];
        if (c == '\\') {
            if (i + 3 >= n)
                return FAWN_EINVAL;
            unsigned v = 0;
            for (size_t k = 1; k <= 3; k++) {
                if (s[i + k] < '0' || s[i + k] > '7')
                    return FAWN_EINVAL;
                v = v * 8 + (unsigned)(s[i + k] - '0');
            }
            if (v == 0 || v > 255)
                return FAWN_EINVAL;
            c = v;
            i += 3;
        }
        if (o + 1 >= cap)
            return FAWN_E2BIG;
        dst[o++] = (char)c;
    }
    dst[o] = '\0';
    return 0;
}

typedef struct cg_field {
    const char *s;
    size_t n;
} cg_field;

/* Splits a line on spaces; -1 when it has more than max fields. */
static int cg_split(cg_field *f, int max, const char *line, size_t n) {
    int count = 0;
    size_t i = 0;
    while (i < n) {
        size_t j = i;
        while (j < n && line[j] != ' ')
            j++;
        if (count == max)
            return -1;
        f[count++] = (cg_field){line + i, j - i};
        i = j + 1;
    }
    return count;
}

static bool cg_field_is(const cg_field *f, const char *s) {
    return f->n == strlen(s) && memcmp(f->s, s, f->n) == 0;
}

/* True when the group `own` lies inside the mount whose root group is `root`. */
static bool cg_root_covers(const char *root, const char *own) {
    if (own[0] != '/')
        return false;
    if (strcmp(root, "/") == 0)
        return true;
    size_t n = strlen(root);
    return strncmp(own, root, n) == 0 && (own[n] == '\0' || own[n] == '/');
}

/* Keeps the first mount that shows our group. */
static void cg_pick(cg_mount *slot, const cg_mount *m, const char *own) {
    if (slot->point[0] == '\0' && cg_root_covers(m->root, own))
        *slot = *m;
}

/* Reads the mount of one mountinfo line if it is a cgroup filesystem. */
static int cg_parse_mount_line(cg_mounts *out, const char *line, size_t n, size_t lineno,
                               const cg_self *self) {
    cg_field f[CG_MAX_FIELDS];
    int count = cg_split(f, CG_MAX_FIELDS, line, n);
    int dash = 6;
    while (dash < count && !cg_field_is(&f[dash], "-"))
        dash++;
    if (count < 0 || dash + 3 >= count)
        return fawn_err(FAWN_EINVAL, "/proc/self/mountinfo line %zu: malformed", lineno);
    bool v2 = cg_field_is(&f[dash + 1], "cgroup2");
    bool v1 = cg_field_is(&f[dash + 1], "cgroup");
    if (!v1 && !v2)
        return 0;
    cg_mount m;
    if (cg_unescape(m.root, sizeof m.root, f[3].s, f[3].n) < 0 ||
        cg_unescape(m.point, sizeof m.point, f[4].s, f[4].n) < 0 || m.root[0] != '/' ||
        m.point[0] != '/')
        return fawn_err(FAWN_EINVAL, "/proc/self/mountinfo line %zu: bad or overlong path", lineno);
    const cg_field *opts = &f[dash + 3];
    if (v2)
        cg_pick(&out->v2, &m, self->v2);
    if (v1 && cg_has_token(opts->s, opts->n, "memory"))
        cg_pick(&out->memory, &m, self->memory);
    if (v1 && cg_has_token(opts->s, opts->n, "pids"))
        cg_pick(&out->pids, &m, self->pids);
    return 0;
}

/* Parses the text of /proc/self/mountinfo, keeping for v2, v1 memory and v1
 * pids the first mount whose root contains the matching group of self.
 * FAWN_EINVAL on a malformed line or NUL byte, FAWN_E2BIG past the limits. */
static int cg_parse_mountinfo(cg_mounts *out, const char *text, size_t len, const cg_self *self) {
    memset(out, 0, sizeof *out);
    if (memchr(text, '\0', len))
        return fawn_err(FAWN_EINVAL, "/proc/self/mountinfo contains a NUL byte");
    const char *pos = text, *end = text + len, *line;
    size_t n, lineno = 0;
    while (cg_next_line(&pos, end, &line, &n)) {
        if (++lineno > CG_MAX_LINES)
            return fawn_err(FAWN_E2BIG, "/proc/self/mountinfo has more than %d lines",
                            CG_MAX_LINES);
        if (n == 0)
            continue;
        int r = cg_parse_mount_line(out, line, n, lineno, self);
        if (r < 0)
            return r;
    }
    return 0;
}

/* True when path is absolute and has no "." or ".." component (a group
 * outside our cgroup namespace shows as "/../.."). */
static bool cg_group_path_valid(const char *path) {
    if (path[0] != '/')
        return false;
    for (const char *p = path; *p;) {
        while (*p == '/')
            p++;
        size_t n = strcspn(p, "/");
        if ((n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
            return false;
        p += n;
    }
    return true;
}

/* The directory of group `own` under mount m. FAWN_EINVAL when own is not
 * shown by m, FAWN_E2BIG when the result is too long; why says which. */
static int cg_group_dir(char *out, size_t cap, const cg_mount *m, const char *own, char *why,
                        size_t wn) {
    if (!cg_group_path_valid(own) || !cg_root_covers(m->root, own)) {
        cg_say(why, wn, "group %s is outside the mount at %s", own, m->point);
        return FAWN_EINVAL;
    }
    const char *rel = strcmp(m->root, "/") == 0 ? own : own + strlen(m->root);
    if (strcmp(rel, "/") == 0)
        rel = "";
    const char *point = strcmp(m->point, "/") == 0 ? "" : m->point;
    int n = snprintf(out, cap, "%s%s", point, rel);
    if (n < 0 || (size_t)n >= cap) {
        cg_say(why, wn, "path of group %s is too long", own);
        return FAWN_E2BIG;
    }
    if (out[0] == '\0')
        snprintf(out, cap, "/");
    return 0;
}

/* ---- cgroupfs access (return 0 or -errno; never touch the error message) ---- */

static int cg_file(char *out, const char *dir, const char *file) {
    int n = snprintf(out, CG_FILE_PATH_MAX, "%s/%s", dir, file);
    return n < 0 || n >= CG_FILE_PATH_MAX ? -ENAMETOOLONG : 0;
}

static int cg_write(const char *dir, const char *file, const char *text) {
    char path[CG_FILE_PATH_MAX];
    if (cg_file(path, dir, file) < 0)
        return -ENAMETOOLONG;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    size_t len = strlen(text);
    ssize_t w = write(fd, text, len);
    int e = w < 0 ? errno : EIO;
    close(fd);
    return w == (ssize_t)len ? 0 : -e;
}

/* Reads a short control file into buf (NUL-terminated, cut at cap - 1). */
static int cg_read_small(char *buf, size_t cap, const char *dir, const char *file) {
    char path[CG_FILE_PATH_MAX];
    if (cg_file(path, dir, file) < 0)
        return -ENAMETOOLONG;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = read(fd, buf, cap - 1);
    int e = errno;
    close(fd);
    if (n < 0)
        return -e;
    buf[n] = '\0';
    return 0;
}

static bool cg_exists(const char *dir, const char *file) {
    char path[CG_FILE_PATH_MAX];
    return cg_file(path, dir, file) == 0 && access(path, F_OK) == 0;
}

static void cg_pause_ms(long ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Reads the pids listed in dir/cgroup.procs into a malloc'd array (caller frees). */
static int cg_read_pids(pid_t **out, size_t *count, const char *dir) {
    *out = NULL;
    *count = 0;
    char path[CG_FILE_PATH_MAX];
    if (cg_file(path, dir, "cgroup.procs") < 0)
        return -ENAMETOOLONG;
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    _cleanup_free_ char *text = NULL;
    size_t len;
    if (fawn_read_all(&text, &len, fd, CG_PROCS_MAX) < 0)
        return -EIO;
    /* Every pid takes at least two bytes ("1\n"), so len / 2 + 1 slots suffice. */
    pid_t *pids = calloc(len / 2 + 1, sizeof *pids);
    if (!pids)
        return -ENOMEM;
    const char *pos = text, *end = text + len, *line;
    size_t n;
    while (cg_next_line(&pos, end, &line, &n)) {
        long long v = 0;
        bool ok = cg_digits(line, n) && n <= 10;
        for (size_t i = 0; ok && i < n; i++)
            v = v * 10 + (line[i] - '0');
        if (ok && v > 0 && v <= INT_MAX)
            pids[(*count)++] = (pid_t)v;
    }
    *out = pids;
    return 0;
}

/* ---- creating groups ---- */

/* Enables memory and pids for the children of a v2 group unless they are. */
static int cg_v2_enable(const char *dir) {
    char cur[CG_CTL_MAX];
    int r = cg_read_small(cur, sizeof cur, dir, "cgroup.subtree_control");
    if (r < 0)
        return r;
    if (cg_has_token(cur, strlen(cur), "memory") && cg_has_token(cur, strlen(cur), "pids"))
        return 0;
    return cg_write(dir, "cgroup.subtree_control", "+memory +pids");
}

/* mkdir, replacing a group of the same name left empty by an earlier run
 * (rmdir only succeeds on a group without processes, so a live one stays),
 * or keeping an existing one as it is when adopting. */
static int cg_mkdir_fresh(const char *path, bool adopt) {
    if (mkdir(path, 0755) == 0)
        return 0;
    if (errno != EEXIST)
        return -errno;
    if (adopt)
        return 0;
    if (rmdir(path) < 0)
        return -errno;
    return mkdir(path, 0755) == 0 ? 0 : -errno;
}

static int cg_why_errno(char *why, size_t wn, int neg_errno, const char *what, const char *path) {
    cg_say(why, wn, "%s %s: %s", what, path, strerror(-neg_errno));
    return neg_errno;
}

/* One attempt at base/fawn/<name>; v2 enables the controllers on the way. */
static int cg_create_once(const char *top, const char *leaf, const char *base, bool v2, bool adopt,
                          char *why, size_t wn) {
    int r = v2 ? cg_v2_enable(base) : 0;
    if (r == -EBUSY) {
        cg_say(why, wn, "group %s has processes, so it cannot enable controllers for children",
               base);
        return r;
    }
    if (r < 0)
        return cg_why_errno(why, wn, r, "enable memory and pids in", base);
    if (mkdir(top, 0755) < 0 && errno != EEXIST)
        return cg_why_errno(why, wn, -errno, "mkdir", top);
    r = v2 ? cg_v2_enable(top) : 0;
    if (r < 0)
        return cg_why_errno(why, wn, r, "enable memory and pids in", top);
    r = cg_mkdir_fresh(leaf, adopt);
    if (r == -EBUSY) {
        cg_say(why, wn, "group %s exists and still has processes", leaf);
        return -EEXIST;
    }
    return r < 0 ? cg_why_errno(why, wn, r, "mkdir", leaf) : 0;
}

/* Creates base/fawn/<name> into leaf. Returns 0 or -errno with why set;
 * -EBUSY means only that base has processes of its own. */
static int cg_create_leaf(char *leaf, size_t cap, const char *base, const cg_want *want, bool v2,
                          char *why, size_t wn) {
    char top[CG_PATH_MAX];
    int n1 = snprintf(top, sizeof top, "%s/fawn", base);
    int n2 = snprintf(leaf, cap, "%s/%s", top, want->name);
    if (n1 < 0 || (size_t)n1 >= sizeof top || n2 < 0 || (size_t)n2 >= cap) {
        leaf[0] = '\0';
        cg_say(why, wn, "group path under %s is too long", base);
        return -ENAMETOOLONG;
    }
    int r = -ENOENT;
    /* ENOENT may mean a concurrent destroy removed an empty fawn/ between two
     * steps; a retry then succeeds (any other ENOENT just repeats quickly). */
    for (int attempt = 0; attempt < CG_CREATE_TRIES && r == -ENOENT; attempt++)
        r = cg_create_once(top, leaf, base, v2, want->adopt, why, wn);
    if (r < 0)
        leaf[0] = '\0';
    return r;
}

/* Removes a group (retrying while exiting tasks pin it), then its fawn/
 * parent if no other sandbox uses it. Never touches the error message. */
static void cg_remove_dir(const char *leaf) {
    if (!leaf[0])
        return;
    int tries = 0;
    while (rmdir(leaf) < 0 && errno != ENOENT) {
        if (errno != EBUSY || ++tries >= CG_RMDIR_TRIES) {
            log_warn("cgroup", "cannot remove %s: %s", leaf, strerror(errno));
            return;
        }
        cg_pause_ms(CG_RMDIR_PAUSE_MS);
    }
    char top[CG_PATH_MAX];
    snprintf(top, sizeof top, "%s", leaf);
    char *slash = strrchr(top, '/');
    if (slash && slash != top) {
        *slash = '\0';
        /* Fails with EBUSY while other sandboxes' groups remain; that is fine. */
        (void)rmdir(top);
    }
}

/* The directory of this process's own v2 group, when it offers memory and pids. */
static int cg_v2_base(char *base, size_t cap, const cg_host *host, char *why, size_t wn) {
    if (!host->self.v2[0]) {
        cg_say(why, wn, "no '0::' line in /proc/self/cgroup");
        return -ENOENT;
    }
    if (!host->mounts.v2.point[0]) {
        cg_say(why, wn, "no cgroup2 mount shows group %s", host->self.v2);
        return -ENOENT;
    }
    int r = cg_group_dir(base, cap, &host->mounts.v2, host->self.v2, why, wn);
    if (r < 0)
        return -EINVAL;
    char ctl[CG_CTL_MAX];
    r = cg_read_small(ctl, sizeof ctl, base, "cgroup.controllers");
    if (r < 0)
        return cg_why_errno(why, wn, r, "read cgroup.controllers of", base);
    size_t n = strlen(ctl);
    if (!cg_has_token(ctl, n, "memory") || !cg_has_token(ctl, n, "pids")) {
        ctl[strcspn(ctl, "\n")] = '\0';
        cg_say(why, wn, "%s offers controllers \"%s\", without memory and pids", base, ctl);
        return -ENOTSUP;
    }
    return 0;
}

/* Creates the v2 group under our own group, or beside it when our own group
 * has processes (v2 forbids controllers in a group with processes, and our
 * own process is never moved). Returns 0 or -errno with why set. */
static int cg_v2_create(char *leaf, size_t cap, const cg_host *host, const cg_want *want, char *why,
                        size_t wn) {
    char base[CG_PATH_MAX];
    int r = cg_v2_base(base, sizeof base, host, why, wn);
    if (r < 0)
        return r;
    r = cg_create_leaf(leaf, cap, base, want, true, why, wn);
    char *slash = strrchr(base, '/');
    /* The mount's root group is the top we may use: never go above it. */
    if (r != -EBUSY || strcmp(base, host->mounts.v2.point) == 0 || !slash || slash == base)
        return r;
    char own_why[CG_WHY_MAX];
    snprintf(own_why, sizeof own_why, "%s", why);
    *slash = '\0';
    r = cg_create_leaf(leaf, cap, base, want, true, why, wn);
    if (r < 0) {
        char sibling_why[CG_WHY_MAX];
        snprintf(sibling_why, sizeof sibling_why, "%s", why);
        cg_say(why, wn, "%s; beside it: %s", own_why, sibling_why);
    }
    return r;
}

/* Creates the v1 group of one controller ("memory" or "pids"). */
static int cg_v1_create_one(char *leaf, size_t cap, const cg_mount *m, const char *own,
                            const char *controller, const char *limit_file, const cg_want *want,
                            char *why, size_t wn) {
    leaf[0] = '\0';
    if (!own[0]) {
        cg_say(why, wn, "no %s line in /proc/self/cgroup", controller);
        return -ENOENT;
    }
    if (!m->point[0]) {
        cg_say(why, wn, "no %s controller mount shows group %s", controller, own);
        return -ENOENT;
    }
    char base[CG_PATH_MAX];
    if (cg_group_dir(base, sizeof base, m, own, why, wn) < 0)
        return -EINVAL;
    int r = cg_create_leaf(leaf, cap, base, want, false, why, wn);
    if (r == 0 && !cg_exists(leaf, limit_file)) {
        cg_say(why, wn, "%s has no %s", leaf, limit_file);
        cg_remove_dir(leaf);
        leaf[0] = '\0';
        return -ENOTSUP;
    }
    return r;
}

/* Creates the v1 memory and pids groups into h (both or neither). *memory_ok
 * and *pids_ok tell which controller worked. Returns 0 or -errno with why set. */
static int cg_v1_create(cgroup_handle *h, const cg_host *host, const cg_want *want, bool *memory_ok,
                        bool *pids_ok, char *why, size_t wn) {
    char mem_why[CG_WHY_MAX] = "", pids_why[CG_WHY_MAX] = "";
    int rm = cg_v1_create_one(h->v1_memory, sizeof h->v1_memory, &host->mounts.memory,
                              host->self.memory, "memory", "memory.limit_in_bytes", want, mem_why,
                              sizeof mem_why);
    int rp = 0;
    bool shared = rm == 0 && strcmp(host->self.memory, host->self.pids) == 0 &&
                  strcmp(host->mounts.memory.point, host->mounts.pids.point) == 0;
    if (shared)
        snprintf(h->v1_pids, sizeof h->v1_pids, "%s", h->v1_memory);
    else
        rp = cg_v1_create_one(h->v1_pids, sizeof h->v1_pids, &host->mounts.pids, host->self.pids,
                              "pids", "pids.max", want, pids_why, sizeof pids_why);
    *memory_ok = rm == 0;
    *pids_ok = rp == 0 && (!shared || cg_exists(h->v1_pids, "pids.max"));
    if (*memory_ok && *pids_ok)
        return 0;
    cg_say(why, wn, "%s%s%s", mem_why, mem_why[0] && pids_why[0] ? "; " : "", pids_why);
    if (shared && !*pids_ok)
        cg_say(why, wn, "%s has no pids.max", h->v1_pids);
    cg_remove_dir(h->v1_memory);
    if (!shared)
        cg_remove_dir(h->v1_pids);
    h->v1_memory[0] = h->v1_pids[0] = '\0';
    return rm < 0 ? rm : rp < 0 ? rp : -ENOTSUP;
}

/* ---- configuring, killing, removing ---- */

static int cg_set(const char *dir, const char *file, uint64_t value) {
    char text[24];
    snprintf(text, sizeof text, "%" PRIu64, value);
    int r = cg_write(dir, file, text);
    if (r == 0)
        return 0;
    int code = r == -ESRCH                   ? FAWN_ENOENT
               : r == -EACCES || r == -EPERM ? FAWN_EPERM
               : r == -EINVAL                ? FAWN_EINVAL
                                             : FAWN_EIO;
    return fawn_err_sys(code, -r, "cgroup: write %s to %s/%s", text, dir, file);
}

static int cg_v2_configure(const cgroup_handle *h, pid_t pid, uint64_t memory_bytes,
                           uint64_t max_pids) {
    const char *d = h->v2_path;
    int r = 0;
    if (memory_bytes) {
        r = cg_set(d, "memory.max", memory_bytes);
        if (r == 0 && cg_exists(d, "memory.swap.max"))
            r = cg_set(d, "memory.swap.max", 0);
    }
    if (r == 0 && max_pids)
        r = cg_set(d, "pids.max", max_pids);
    return r < 0 || pid == 0 ? r : cg_set(d, "cgroup.procs", (uint64_t)pid);
}

static int cg_v1_configure(const cgroup_handle *h, pid_t pid, uint64_t memory_bytes,
                           uint64_t max_pids) {
    int r = 0;
    if (memory_bytes) {
        r = cg_set(h->v1_memory, "memory.limit_in_bytes", memory_bytes);
        /* Memory+swap accounting is often off (swapaccount=0); the plain
         * limit then still holds, so a failure here is not an error. */
        if (r == 0) {
            char text[24];
            snprintf(text, sizeof text, "%" PRIu64, memory_bytes);
            (void)cg_write(h->v1_memory, "memory.memsw.limit_in_bytes", text);
        }
    }
    if (r == 0 && max_pids)
        r = cg_set(h->v1_pids, "pids.max", max_pids);
    if (r == 0 && pid)
        r = cg_set(h->v1_memory, "cgroup.procs", (uint64_t)pid);
    if (r == 0 && pid && strcmp(h->v1_pids, h->v1_memory) != 0)
        r = cg_set(h->v1_pids, "cgroup.procs", (uint64_t)pid);
    return r;
}

static bool cg_pid_listed(const pid_t *pids, size_t n, pid_t pid) {
    for (size_t i = 0; i < n; i++)
        if (pids[i] == pid)
            return true;
    return false;
}

/* SIGKILLs a batch of listed pids. Each is pinned with a pidfd first and only
 * signalled if still listed in the group afterwards, so a pid recycled by an
 * unrelated process is never hit. Without pidfd_open, plain kill() is used. */
static void cg_kill_batch(const char *dir, const pid_t *pids, size_t n) {
    int fds[CG_KILL_BATCH];
    for (size_t i = 0; i < n; i++) {
        fds[i] = (int)syscall(SYS_pidfd_open, pids[i], 0);
        if (fds[i] < 0 && errno == ENOSYS)
            kill(pids[i], SIGKILL);
    }
    pid_t *now = NULL;
    size_t count = 0;
    bool listed = cg_read_pids(&now, &count, dir) == 0;
    for (size_t i = 0; i < n; i++) {
        if (fds[i] < 0)
            continue;
        if (listed && cg_pid_listed(now, count, pids[i]))
            (void)syscall(SYS_pidfd_send_signal, fds[i], SIGKILL, NULL, 0);
        close(fds[i]);
    }
    free(now);
}

/* Kills every process of a group: cgroup.kill when the kernel has it, else
 * SIGKILL to each listed pid, until the group is empty (bounded). */
static void cg_kill_all(const char *dir) {
    if (!dir[0])
        return;
    for (int round = 0; round < CG_KILL_ROUNDS; round++) {
        pid_t *pids = NULL;
        size_t n = 0;
        if (cg_read_pids(&pids, &n, dir) < 0 || n == 0) {
            free(pids);
            return;
        }
        if (cg_write(dir, "cgroup.kill", "1") < 0)
            for (size_t i = 0; i < n; i += CG_KILL_BATCH)
                cg_kill_batch(dir, pids + i, n - i < CG_KILL_BATCH ? n - i : CG_KILL_BATCH);
        free(pids);
        cg_pause_ms(CG_KILL_PAUSE_MS);
    }
    log_warn("cgroup", "%s still has processes after %d ms of SIGKILL", dir,
             CG_KILL_ROUNDS * CG_KILL_PAUSE_MS);
}

void cgroup_destroy(cgroup_handle *h) {
    if (h->mode == CGROUP_V2) {
        cg_kill_all(h->v2_path);
        cg_remove_dir(h->v2_path);
    } else if (h->mode == CGROUP_V1) {
        bool shared = strcmp(h->v1_memory, h->v1_pids) == 0;
        cg_kill_all(h->v1_memory);
        if (!shared)
            cg_kill_all(h->v1_pids);
        cg_remove_dir(h->v1_memory);
        if (!shared)
            cg_remove_dir(h->v1_pids);
    }
    memset(h, 0, sizeof *h);
}

/* ---- public entry points ---- */

static atomic_bool cg_warned;

static void cg_warn_once(const char *why_v2, const char *why_v1) {
    if (atomic_exchange(&cg_warned, true))
        return;
    log_warn("cgroup",
             "no usable cgroup (v2: %s; v1: %s); sandboxes fall back to rlimits only "
             "(RLIMIT_AS, RLIMIT_NPROC)",
             why_v2, why_v1);
}

static int cg_host_load(cg_host *host) {
    _cleanup_free_ char *self = NULL;
    _cleanup_free_ char *mounts = NULL;
    size_t self_n = 0, mounts_n = 0;
    _cleanup_close_ int fd_self = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC);
    if (fd_self < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open /proc/self/cgroup");
    int r = fawn_read_all(&self, &self_n, fd_self, CG_SELF_MAX);
    if (r == 0)
        r = cg_parse_self(&host->self, self, self_n);
    if (r < 0)
        return r;
    _cleanup_close_ int fd_mounts = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd_mounts < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open /proc/self/mountinfo");
    r = fawn_read_all(&mounts, &mounts_n, fd_mounts, CG_MOUNTINFO_MAX);
    return r < 0 ? r : cg_parse_mountinfo(&host->mounts, mounts, mounts_n, &host->self);
}

/* Removes what a failed configuration left (killing a pid that was already
 * moved in: it must not run unconfined by accident) and keeps the error. */
static int cg_undo(cgroup_handle *h, int code) {
    char msg[CG_ERRMSG_MAX];
    snprintf(msg, sizeof msg, "%s", fawn_errmsg());
    cgroup_destroy(h);
    return fawn_err(code, "%s", msg);
}

int cgroup_setup(cgroup_handle *h, const char *name, pid_t pid, uint64_t memory_bytes,
                 uint64_t max_pids) {
    memset(h, 0, sizeof *h);
    if (!name || !fawn_id_valid(name))
        return fawn_err(FAWN_EINVAL, "cgroup name must be 1 to 64 characters of [A-Za-z0-9_-]");
    if (pid < 0)
        return fawn_err(FAWN_EINVAL, "cgroup: invalid pid %d", (int)pid);
    /* pid 0 moves nothing in and adopts an existing group of that name, so
     * another process can cgroup_destroy a sandbox by name. */
    const cg_want want = {.name = name, .adopt = pid == 0};
    char why_v2[CG_WHY_MAX] = "", why_v1[CG_WHY_MAX] = "";
    cg_host host;
    if (cg_host_load(&host) < 0) {
        snprintf(why_v2, sizeof why_v2, "%s", fawn_errmsg());
        snprintf(why_v1, sizeof why_v1, "%s", fawn_errmsg());
        cg_warn_once(why_v2, why_v1);
        return 0;
    }
    int r = cg_v2_create(h->v2_path, sizeof h->v2_path, &host, &want, why_v2, sizeof why_v2);
    if (r == 0) {
        h->mode = CGROUP_V2;
        r = cg_v2_configure(h, pid, memory_bytes, max_pids);
        return r < 0 ? cg_undo(h, r) : 0;
    }
    if (r == -EEXIST)
        return fawn_err(FAWN_EEXIST, "cgroup: %s", why_v2);
    bool memory_ok, pids_ok;
    r = cg_v1_create(h, &host, &want, &memory_ok, &pids_ok, why_v1, sizeof why_v1);
    if (r == 0) {
        h->mode = CGROUP_V1;
        r = cg_v1_configure(h, pid, memory_bytes, max_pids);
        return r < 0 ? cg_undo(h, r) : 0;
    }
    memset(h, 0, sizeof *h);
    if (r == -EEXIST)
        return fawn_err(FAWN_EEXIST, "cgroup: %s", why_v1);
    cg_warn_once(why_v2, why_v1);
    return 0;
}

/* The directory holding a group (its fawn/ parent), for messages. */
static const char *cg_parent_of(char *buf, size_t cap, const char *leaf) {
    snprintf(buf, cap, "%s", leaf);
    char *slash = strrchr(buf, '/');
    if (slash)
        *slash = '\0';
    return buf;
}

void cgroup_probe(cgroup_caps *out) {
    memset(out, 0, sizeof *out);
    cg_host host;
    if (cg_host_load(&host) < 0) {
        cg_say(out->detail, sizeof out->detail, "cannot read own cgroups: %s", fawn_errmsg());
        return;
    }
    char name[32];
    snprintf(name, sizeof name, "probe-%d", (int)getpid());
    const cg_want want = {.name = name, .adopt = false};
    char why_v2[CG_WHY_MAX] = "", why_v1[CG_WHY_MAX] = "";
    char where[CG_PATH_MAX], where2[CG_PATH_MAX];
    cgroup_handle h = {.mode = CGROUP_NONE};
    if (cg_v2_create(h.v2_path, sizeof h.v2_path, &host, &want, why_v2, sizeof why_v2) == 0) {
        *out = (cgroup_caps){.mode = CGROUP_V2, .memory = true, .pids = true};
        cg_say(out->detail, sizeof out->detail, "v2: memory and pids under %s",
               cg_parent_of(where, sizeof where, h.v2_path));
        h.mode = CGROUP_V2;
        cgroup_destroy(&h);
        return;
    }
    if (cg_v1_create(&h, &host, &want, &out->memory, &out->pids, why_v1, sizeof why_v1) == 0) {
        out->mode = CGROUP_V1;
        cg_say(out->detail, sizeof out->detail, "v1: memory under %s, pids under %s (v2: %s)",
               cg_parent_of(where, sizeof where, h.v1_memory),
               cg_parent_of(where2, sizeof where2, h.v1_pids), why_v2);
        h.mode = CGROUP_V1;
        cgroup_destroy(&h);
        return;
    }
    cg_say(out->detail, sizeof out->detail, "v2: %s; v1: %s", why_v2, why_v1);
}
