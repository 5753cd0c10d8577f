#include "box/files.h"

#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <sodium.h>

#include "base/fsx.h"
#include "base/json.h"
#include "box/files_internal.h"
#include "paths/paths.h"

/* Bytes moved per read()/write(): amortizes system calls and fits on any thread stack. */
#define FILES_CHUNK 16384
/* A NUL byte in this many leading bytes marks a file as binary (git's and grep's heuristic). */
#define FILES_SNIFF_BYTES 8192
/* read stops counting lines past this offset: a longer scan costs more than a read is worth,
 * and download serves such files whole. */
#define READ_SCAN_MAX_BYTES ((uint64_t)512 << 20)
/* list shows at most two levels, like the ls tool it serves. */
#define LIST_MAX_DEPTH 2
/* glob and grep do not enter directories deeper than this; real projects are far shallower. */
#define WALK_MAX_DEPTH 64
/* Directory entries one list, glob or grep looks at before stopping with truncated=true. */
#define WALK_MAX_VISITS 100000
/* Results returned when the request does not say (the tools' defaults). */
#define GLOB_DEFAULT_RESULTS 200
#define GREP_DEFAULT_RESULTS 100
/* One matcher state per pattern component, kept in a 64-bit set (plus the accepting state). */
#define GLOB_MAX_PARTS 63
/* grep skips larger files: they are data or generated, not text to search. */
#define GREP_MAX_FILE_BYTES ((size_t)1 << 20)
/* grep skips longer lines (minified code, data) and cuts shown text to GREP_TEXT_MAX_CHARS. */
#define GREP_MAX_LINE_CHARS 2000
#define GREP_TEXT_MAX_CHARS 200
/* One search reads at most this much text; a larger search belongs in a command. */
#define GREP_MAX_TOTAL_BYTES ((uint64_t)256 << 20)
/* Regular expressions longer than this are not hand-written searches. */
#define GREP_MAX_PATTERN_BYTES 4096
/* PCRE2 work per line: about a millisecond of backtracking, then the line counts as a limit hit. */
#define GREP_MATCH_LIMIT 100000
#define GREP_DEPTH_LIMIT 10000
#define GREP_HEAP_LIMIT_KIB 16384
/* Lines on which a pattern may hit its match limit before the search gives up on it. */
#define GREP_MAX_LIMIT_HITS 20
/* Random bytes in a staging file name: collisions are negligible and still retried. */
#define STAGING_RANDOM_BYTES 8
#define STAGING_ATTEMPTS 8
/* A virtual path as shown to clients: root, '/', rel. */
#define SHOWN_MAX (VPATH_MAX + sizeof VPATH_USER_DATA + 1)

/* ---- targets: a parsed virtual path and the directory fd of its root ---- */

typedef struct target {
    vpath vp;
    int rootfd;
    char shown[SHOWN_MAX];
} target;

static const char *const rw_dirs[] = {"workspace", "uploads", "outputs"};

static bool target_writable(const vpath *vp) {
    for (size_t i = 0; i < ARRAY_LEN(rw_dirs); i++) {
        if (vpath_in_dir(vp, rw_dirs[i]) && strcmp(vp->rel, rw_dirs[i]) != 0)
            return true;
    }
    return false;
}

/* Parses path and picks its root fd. Writes are refused under /mnt/skills
 * and anywhere but inside the three read-write directories. */
static int target_resolve(target *t, const box_files *f, const char *path, bool for_write) {
    int r = vpath_parse(&t->vp, path);
    if (r < 0)
        return r;
    bool skills = t->vp.root == VPATH_ROOT_SKILLS;
    snprintf(t->shown, sizeof t->shown, "%s%s%s", skills ? VPATH_SKILLS : VPATH_USER_DATA,
             t->vp.rel[0] ? "/" : "", t->vp.rel);
    if (skills && for_write)
        return fawn_err(FAWN_EPERM, "%s is read-only: %s", VPATH_SKILLS, t->shown);
    if (skills && f->skills_fd < 0)
        return fawn_err(FAWN_ENOENT, "no such file or directory: %s", t->shown);
    if (for_write && !target_writable(&t->vp))
        return fawn_err(FAWN_EPERM,
                        "writes are allowed only inside %s/workspace, uploads or outputs: %s",
                        VPATH_USER_DATA, t->shown);
    t->rootfd = skills ? f->skills_fd : f->user_data_fd;
    return 0;
}

static const char *target_name(const target *t) {
    const char *slash = strrchr(t->vp.rel, '/');
    return slash ? slash + 1 : t->vp.rel;
}

/* Restates an fsx open failure with the virtual path instead of the relative one. */
static int target_open_err(int code, const target *t) {
    if (code == FAWN_ENOENT)
        return fawn_err(code, "no such file or directory: %s", t->shown);
    if (code == FAWN_EPERM)
        return fawn_err(code, "access refused (outside its root, or through a symlink): %s",
                        t->shown);
    return code;
}

/* Stats t without opening it (O_PATH has no side effects on devices or FIFOs). */
static int target_stat(struct stat *st, const target *t) {
    _cleanup_close_ int fd =
        fsx_open_beneath(t->rootfd, t->vp.rel, O_PATH, 0, FSX_SYMLINKS_BENEATH);
    if (fd < 0)
        return target_open_err(fd, t);
    if (fstat(fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    return 0;
}

/* Opens t's regular file for reading: symlinks only beneath the root. Other
 * file types are refused before they are opened (no device side effects), and
 * again after, never blocking on a FIFO swapped in meanwhile nor acquiring a
 * controlling tty. Stores the fd and its stat. */
static int target_open_regular(int *fd_out, struct stat *st, const target *t) {
    if (vpath_is_staging_name(target_name(t)))
        return fawn_err(FAWN_ENOENT, "no such file or directory: %s", t->shown);
    int r = target_stat(st, t);
    if (r < 0)
        return r;
    if (!S_ISREG(st->st_mode))
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", t->shown);
    _cleanup_close_ int fd = fsx_open_beneath(
        t->rootfd, t->vp.rel, O_RDONLY | O_NOCTTY | O_NONBLOCK, 0, FSX_SYMLINKS_BENEATH);
    if (fd < 0)
        return target_open_err(fd, t);
    if (fstat(fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    if (!S_ISREG(st->st_mode))
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", t->shown);
    *fd_out = steal_fd(fd);
    return 0;
}

static int target_open_dir(int *fd_out, const target *t) {
    _cleanup_close_ int pfd =
        fsx_open_beneath(t->rootfd, t->vp.rel, O_PATH, 0, FSX_SYMLINKS_BENEATH);
    if (pfd < 0)
        return target_open_err(pfd, t);
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
static int target_open_parent(int *fd_out, const target *t) {
    const char *name = target_name(t);
    if (vpath_is_staging_name(name))
        return fawn_err(FAWN_EINVAL, "reserved file name: %s", t->shown);
    char parent[VPATH_MAX];
    size_t n = (size_t)(name - t->vp.rel) - 1; /* writable targets always have a parent */
    memcpy(parent, t->vp.rel, n);
    parent[n] = '\0';
    int fd = fsx_mkdirs_beneath(t->rootfd, parent);
    if (fd < 0)
        return target_open_err(fd, t);
    *fd_out = fd;
    return 0;
}

/* A file that may be written over: regular, not a symlink, one link only (a
 * hard link planted to some other file must not be written through). */
static int check_writable_stat(const struct stat *st, const char *shown) {
    if (S_ISLNK(st->st_mode))
        return fawn_err(FAWN_EPERM, "refusing to write through a symlink: %s", shown);
    if (!S_ISREG(st->st_mode))
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", shown);
    if (st->st_nlink != 1)
        return fawn_err(FAWN_EPERM, "refusing to write to a file with several hard links: %s",
                        shown);
    return 0;
}

static int check_existing(bool *exists, mode_t *mode, int dirfd, const char *name,
                          const char *shown) {
    struct stat st;
    if (fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno != ENOENT)
            return fawn_err_sys(FAWN_EIO, errno, "stat %s", shown);
        *exists = false;
        return 0;
    }
    *exists = true;
    *mode = st.st_mode;
    return check_writable_stat(&st, shown);
}

static int reply_set(json_t **out, json_t *v) {
    if (!v)
        return fawn_err(FAWN_ENOMEM, "building the reply failed");
    *out = v;
    return 0;
}

/* ---- UTF-8 ---- */

static size_t utf8_seq_len(unsigned char c) {
    if (c < 0x80)
        return 1;
    if ((c & 0xE0) == 0xC0)
        return 2;
    if ((c & 0xF0) == 0xE0)
        return 3;
    if ((c & 0xF8) == 0xF0)
        return 4;
    return 1;
}

/* Length of s[0..n) without a multi-byte sequence cut off at its end. */
static size_t utf8_whole_prefix(const char *s, size_t n) {
    for (size_t back = 1; back <= 4 && back <= n; back++) {
        unsigned char c = (unsigned char)s[n - back];
        if ((c & 0xC0) == 0x80)
            continue;
        return utf8_seq_len(c) > back ? n - back : n;
    }
    return n;
}

/* Length of the valid character at s (at most n bytes), or 0 when invalid. */
static size_t utf8_char_at(const char *s, size_t n) {
    size_t k = utf8_seq_len((unsigned char)s[0]);
    return k <= n && fawn_utf8_valid(s, k) ? k : 0;
}

static size_t utf8_count_chars(const char *s, size_t n) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        chars += ((unsigned char)s[i] & 0xC0) != 0x80;
    return chars;
}

/* ---- read ---- */

static const char *const read_keys[] = {"path", "start_line", "end_line", "max_bytes", NULL};

typedef struct read_scan {
    int64_t start, end; /* requested 1-based inclusive range */
    size_t cap;         /* content bytes allowed */
    fbuf content;       /* bytes of the range, at most cap */
    int64_t line;       /* line the next byte belongs to */
    int64_t last_line;  /* last line with bytes in content (0: none) */
    uint64_t scanned;   /* bytes read so far */
    char last_byte;
    bool truncated; /* content reached cap */
    bool scan_cut;  /* stopped counting at READ_SCAN_MAX_BYTES */
} read_scan;

static int read_opts_get(read_scan *s, const char **path, const json_t *req, const box_files *f) {
    int64_t max_bytes = INT64_MAX;
    s->start = 1;
    s->end = INT64_MAX;
    int r;
    if ((r = fjson_check_keys(req, read_keys)) < 0 ||
        (r = fjson_get_string(path, req, "path", true)) < 0 ||
        (r = fjson_get_int(&s->start, req, "start_line", false, 1, INT64_MAX)) < 0 ||
        (r = fjson_get_int(&s->end, req, "end_line", false, 1, INT64_MAX)) < 0 ||
        (r = fjson_get_int(&max_bytes, req, "max_bytes", false, 1, INT64_MAX)) < 0)
        return r;
    if (s->end < s->start)
        return fawn_err(FAWN_EINVAL, "end_line (%lld) is before start_line (%lld)",
                        (long long)s->end, (long long)s->start);
    s->cap = (uint64_t)max_bytes < f->limits.read_max_bytes ? (size_t)max_bytes
                                                            : f->limits.read_max_bytes;
    s->line = 1;
    return 0;
}

/* Adds one piece of a line (the line's end or all of a chunk) to content. */
static int read_scan_take(read_scan *s, const char *p, size_t n) {
    if (s->line < s->start || s->line > s->end || s->truncated)
        return 0;
    size_t room = s->cap - s->content.len;
    size_t take = n < room ? n : room;
    if (take > 0) {
        int r = fbuf_append(&s->content, p, take);
        if (r < 0)
            return r;
        s->last_line = s->line;
    }
    s->truncated = take < n;
    return 0;
}

static int read_scan_chunk(read_scan *s, const char *p, size_t n) {
    while (n > 0) {
        const char *nl = memchr(p, '\n', n);
        size_t piece = nl ? (size_t)(nl - p) + 1 : n;
        int r = read_scan_take(s, p, piece);
        if (r < 0)
            return r;
        s->line += nl != NULL;
        p += piece;
        n -= piece;
    }
    return 0;
}

/* Streams the file once with a fixed buffer: collects the range and counts lines. */
static int read_scan_fd(read_scan *s, int fd, uint64_t size) {
    char buf[FILES_CHUNK];
    while (s->scanned < READ_SCAN_MAX_BYTES) {
        uint64_t left = READ_SCAN_MAX_BYTES - s->scanned;
        ssize_t n = read(fd, buf, left < sizeof buf ? (size_t)left : sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fawn_err_sys(FAWN_EIO, errno, "read");
        if (n == 0)
            return 0;
        s->scanned += (uint64_t)n;
        s->last_byte = buf[n - 1];
        int r = read_scan_chunk(s, buf, (size_t)n);
        if (r < 0)
            return r;
    }
    s->scan_cut = size > s->scanned;
    return 0;
}

static int64_t read_total_lines(const read_scan *s) {
    if (s->scanned == 0)
        return 0;
    return s->line - 1 + (s->last_byte != '\n');
}

/* Binary: a NUL byte, or invalid UTF-8, in the first FILES_SNIFF_BYTES. */
static int read_sniff_binary(bool *binary, int fd, uint64_t size) {
    char buf[FILES_SNIFF_BYTES];
    ssize_t n;
    do {
        n = pread(fd, buf, sizeof buf, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0)
        return fawn_err_sys(FAWN_EIO, errno, "read");
    size_t len = (size_t)n;
    size_t whole = len < size ? utf8_whole_prefix(buf, len) : len;
    *binary = memchr(buf, '\0', len) != NULL || !fawn_utf8_valid(buf, whole);
    return 0;
}

static void read_note(char *note, size_t n, const read_scan *s, int64_t total) {
    note[0] = '\0';
    if (total == 0 && !s->scan_cut)
        snprintf(note, n, "file is empty");
    else if (s->last_line == 0 && s->scan_cut)
        snprintf(note, n,
                 "start_line %lld is beyond the first %llu MiB, where read stops looking; "
                 "download the file instead",
                 (long long)s->start, (unsigned long long)(READ_SCAN_MAX_BYTES >> 20));
    else if (s->last_line == 0)
        snprintf(note, n, "start_line %lld exceeds file length (%lld lines)", (long long)s->start,
                 (long long)total);
    else if (s->truncated)
        snprintf(note, n,
                 "content truncated at %zu bytes; read a smaller range with "
                 "start_line/end_line (the file has %s%lld lines)",
                 s->content.len, s->scan_cut ? "at least " : "", (long long)total);
    else if (s->scan_cut)
        snprintf(note, n, "only the first %llu MiB were scanned; total_lines counts lines in them",
                 (unsigned long long)(READ_SCAN_MAX_BYTES >> 20));
}

static int read_reply(json_t **out, const target *t, const read_scan *s, uint64_t size,
                      bool binary) {
    int64_t total = binary ? 0 : read_total_lines(s);
    int64_t end = binary || s->last_line == 0 ? s->start - 1 : s->last_line;
    char note[256];
    if (binary)
        snprintf(note, sizeof note,
                 "binary file (%llu bytes): content not shown; download it instead",
                 (unsigned long long)size);
    else
        read_note(note, sizeof note, s, total);
    const char *content = binary || !s->content.data ? "" : s->content.data;
    size_t len = binary ? 0 : s->content.len;
    json_t *v = json_pack("{s:s, s:s%, s:I, s:I, s:I, s:b, s:b, s:I}", "path", t->shown, "content",
                          content, len, "total_lines", (json_int_t)total, "start_line",
                          (json_int_t)s->start, "end_line", (json_int_t)end, "truncated",
                          !binary && s->truncated, "binary", binary, "size", (json_int_t)size);
    if (v && note[0] && json_object_set_new(v, "note", json_string(note)) < 0) {
        json_decref(v);
        v = NULL;
    }
    return reply_set(out, v);
}

int box_file_read(json_t **out, const json_t *req, const box_files *f) {
    read_scan s = {0};
    const char *path = NULL;
    int r = read_opts_get(&s, &path, req, f);
    target t;
    if (r < 0 || (r = target_resolve(&t, f, path, false)) < 0)
        return r;
    struct stat st;
    _cleanup_close_ int fd = -1;
    if ((r = target_open_regular(&fd, &st, &t)) < 0)
        return r;
    uint64_t size = (uint64_t)st.st_size;
    bool binary = false;
    if ((r = read_sniff_binary(&binary, fd, size)) == 0 && !binary)
        r = read_scan_fd(&s, fd, size);
    if (r == 0 && !binary) {
        if (s.truncated || s.scan_cut)
            s.content.len = utf8_whole_prefix(s.content.data, s.content.len);
        binary = !fawn_utf8_valid(s.content.data, s.content.len);
    }
    if (r == 0)
        r = read_reply(out, &t, &s, size, binary);
    fbuf_free(&s.content);
    return r;
}

/* ---- staging files: write beside the target, then rename into place ---- */

typedef struct staged {
    int dirfd; /* borrowed */
    int fd;
    bool placed; /* renamed into place: nothing left to remove */
    char name[VPATH_NAME_MAX + 1];
} staged;

static int errno_code(int e) {
    return e == EACCES || e == EPERM || e == EROFS ? FAWN_EPERM : FAWN_EIO;
}

static int staged_open(staged *s, int dirfd, const char *prefix, const char *suffix) {
    *s = (staged){.dirfd = dirfd, .fd = -1};
    for (int i = 0; i < STAGING_ATTEMPTS; i++) {
        char hex[2 * STAGING_RANDOM_BYTES + 1];
        fawn_random_hex(hex, STAGING_RANDOM_BYTES);
        snprintf(s->name, sizeof s->name, "%s%s%s", prefix, hex, suffix);
        s->fd = openat(dirfd, s->name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (s->fd >= 0)
            return 0;
        if (errno != EEXIST) {
            int e = errno;
            s->name[0] = '\0';
            return fawn_err_sys(errno_code(e), e, "create a staging file");
        }
    }
    s->name[0] = '\0';
    return fawn_err(FAWN_EIO, "no free staging file name after %d attempts", STAGING_ATTEMPTS);
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

/* Flushes the staging file and renames it to `dest` (replacing an existing
 * one only when replace is true). Stores the final stat in *st. */
static int staged_commit(staged *s, struct stat *st, const char *dest, bool replace,
                         const char *shown) {
    if (fsync(s->fd) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "fsync %s", shown);
    if (fstat(s->fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", shown);
    int rc = replace ? renameat(s->dirfd, s->name, s->dirfd, dest)
                     : rename_noreplace(s->dirfd, s->name, dest);
    if (rc < 0 && errno == EEXIST)
        return fawn_err(FAWN_EEXIST, "already exists: %s", shown);
    if (rc < 0 && (errno == EISDIR || errno == ENOTDIR || errno == ENOTEMPTY))
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", shown);
    if (rc < 0)
        return fawn_err_sys(errno_code(errno), errno, "rename into %s", shown);
    s->placed = true;
    return 0;
}

/* Closes the staging file and removes it unless it was placed. */
static void staged_close(staged *s) {
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (!s->placed && s->name[0])
        unlinkat(s->dirfd, s->name, 0);
}

/* ---- write ---- */

static const char *const write_keys[] = {"path", "content", "append", "encoding", NULL};

static int write_too_big(size_t limit) {
    return fawn_err(FAWN_E2BIG, "content is larger than the %zu-byte write limit", limit);
}

/* Bytes that base64 text of n bytes decodes to (line breaks ignored), so
 * the size limit is checked before anything is allocated. */
static size_t base64_decoded_len(const char *s, size_t n) {
    size_t chars = 0;
    for (size_t i = 0; i < n; i++)
        chars += s[i] != '\r' && s[i] != '\n' && s[i] != '=';
    return chars / 4 * 3 + (chars % 4 ? chars % 4 - 1 : 0);
}

/* Turns content into the bytes to write; *owned is set (caller frees) for base64. */
static int write_decode(const char **data, size_t *len, char **owned, const char *content,
                        const char *encoding, size_t limit) {
    size_t n = strlen(content);
    if (strcmp(encoding, "utf-8") == 0) {
        *data = content;
        *len = n;
        return n > limit ? write_too_big(limit) : 0;
    }
    if (strcmp(encoding, "base64") != 0)
        return fawn_err(FAWN_EINVAL, "'encoding' must be \"utf-8\" or \"base64\"");
    size_t room = base64_decoded_len(content, n);
    if (room > limit)
        return write_too_big(limit);
    if (!(*owned = malloc(room + 1)))
        return fawn_err(FAWN_ENOMEM, "out of memory decoding content");
    if (sodium_base642bin((unsigned char *)*owned, room + 1, content, n, "\r\n", len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0)
        return fawn_err(FAWN_EINVAL, "'content' is not valid base64");
    *data = *owned;
    return 0;
}

/* Atomic replace: a staging file in the same directory, renamed over the target. */
static int write_replace(struct stat *st, int dirfd, const target *t, const char *data,
                         size_t len) {
    bool exists = false;
    mode_t mode = 0;
    int r = check_existing(&exists, &mode, dirfd, target_name(t), t->shown);
    staged s;
    if (r < 0 || (r = staged_open(&s, dirfd, VPATH_STAGING_WRITE_PREFIX, "")) < 0)
        return r;
    if (exists && fchmod(s.fd, mode & 0777) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "chmod %s", t->shown);
    if (r == 0)
        r = fawn_write_all(s.fd, data, len);
    if (r == 0)
        r = staged_commit(&s, st, target_name(t), true, t->shown);
    staged_close(&s);
    return r;
}

static int write_open_err(int e, const target *t) {
    if (e == ELOOP)
        return fawn_err(FAWN_EPERM, "refusing to write through a symlink: %s", t->shown);
    if (e == ENXIO || e == EISDIR || e == ENODEV)
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", t->shown);
    if (e == EEXIST)
        return fawn_err(FAWN_EBUSY, "%s changed while being opened; try again", t->shown);
    return fawn_err_sys(errno_code(e), e, "open %s", t->shown);
}

static int write_append(struct stat *st, int dirfd, const target *t, const char *data, size_t len) {
    const char *name = target_name(t);
    _cleanup_close_ int fd =
        openat(dirfd, name, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        fd = openat(dirfd, name, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    0644);
    if (fd < 0)
        return write_open_err(errno, t);
    if (fstat(fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    int r = check_writable_stat(st, t->shown);
    if (r == 0)
        r = fawn_write_all(fd, data, len);
    if (r == 0 && fstat(fd, st) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    return r;
}

int box_file_write(json_t **out, const json_t *req, const box_files *f) {
    const char *path = NULL, *content = NULL, *encoding = "utf-8";
    bool append = false;
    int r;
    if ((r = fjson_check_keys(req, write_keys)) < 0 ||
        (r = fjson_get_string(&path, req, "path", true)) < 0 ||
        (r = fjson_get_string(&content, req, "content", true)) < 0 ||
        (r = fjson_get_bool(&append, req, "append", false)) < 0 ||
        (r = fjson_get_string(&encoding, req, "encoding", false)) < 0)
        return r;
    const char *data = NULL;
    size_t len = 0;
    _cleanup_free_ char *owned = NULL;
    if ((r = write_decode(&data, &len, &owned, content, encoding, f->limits.write_max_bytes)) < 0)
        return r;
    target t;
    _cleanup_close_ int dirfd = -1;
    if ((r = target_resolve(&t, f, path, true)) < 0 || (r = target_open_parent(&dirfd, &t)) < 0)
        return r;
    struct stat st;
    r = append ? write_append(&st, dirfd, &t, data, len) : write_replace(&st, dirfd, &t, data, len);
    if (r < 0)
        return r;
    return reply_set(out, json_pack("{s:s, s:I, s:I}", "path", t.shown, "bytes_written",
                                    (json_int_t)len, "size", (json_int_t)st.st_size));
}

/* ---- directory reading shared by list, glob and grep ---- */

typedef bool (*name_filter)(const char *name);

typedef struct names {
    char **v;
    size_t n, cap;
} names;

static void names_free(names *nm) {
    for (size_t i = 0; i < nm->n; i++)
        free(nm->v[i]);
    free(nm->v);
    *nm = (names){0};
}

static int names_push(names *nm, const char *name) {
    if (nm->n == nm->cap) {
        size_t cap = nm->cap ? nm->cap * 2 : 32;
        char **v = realloc(nm->v, cap * sizeof *v);
        if (!v)
            return fawn_err(FAWN_ENOMEM, "out of memory reading a directory");
        nm->v = v;
        nm->cap = cap;
    }
    if (!(nm->v[nm->n] = strdup(name)))
        return fawn_err(FAWN_ENOMEM, "out of memory reading a directory");
    nm->n++;
    return 0;
}

static int cmp_strp(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* Names the API can address and show: valid UTF-8 file names, not staging files. */
static bool name_addressable(const char *name) {
    return vpath_name_valid(name) && fawn_utf8_valid(name, strlen(name)) &&
           !vpath_is_staging_name(name);
}

/* Reads the names in dirfd that keep() accepts, sorted. Every name read is
 * charged to *budget; when it runs out *cut is set and reading stops. */
static int names_read(names *out, int dirfd, size_t *budget, bool *cut, name_filter keep) {
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return 0; /* unreadable directories are skipped, like vanished ones */
    }
    int r = 0;
    struct dirent *e;
    while (r == 0 && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (*budget == 0) {
            *cut = true;
            break;
        }
        (*budget)--;
        if (keep(e->d_name))
            r = names_push(out, e->d_name);
    }
    closedir(d);
    if (out->n > 1)
        qsort(out->v, out->n, sizeof *out->v, cmp_strp);
    return r;
}

/* Joins base and name into buf (size bufsz); false when it does not fit. */
static bool path_join(char *buf, size_t bufsz, const char *base, const char *name) {
    int n = snprintf(buf, bufsz, "%s%s%s", base, base[0] ? "/" : "", name);
    return n >= 0 && (size_t)n < bufsz;
}

/* Room for a path below a directory shown as `shown` so that the full
 * virtual path still parses (shorter than VPATH_MAX). */
static size_t rel_room(const char *shown) {
    size_t used = strlen(shown) + 2; /* '/' and NUL */
    return used < VPATH_MAX ? VPATH_MAX - used + 1 : 0;
}

/* ---- list ---- */

static const char *const list_keys[] = {"path", "max_depth", NULL};

typedef struct list_entry {
    char *rel; /* path below the listed directory */
    const char *type;
    int64_t size;
} list_entry;

typedef struct list_state {
    list_entry *v;
    size_t n, cap;
    size_t budget;
    bool cut;
    size_t room; /* bytes a rel may take (rel_room) */
} list_state;

static bool list_keep(const char *name) {
    return name_addressable(name) && strcmp(name, ".git") != 0 && strcmp(name, "node_modules") != 0;
}

static const char *list_type(mode_t mode) {
    if (S_ISREG(mode))
        return "file";
    if (S_ISDIR(mode))
        return "dir";
    if (S_ISLNK(mode))
        return "symlink";
    return "other";
}

static void list_state_free(list_state *ls) {
    for (size_t i = 0; i < ls->n; i++)
        free(ls->v[i].rel);
    free(ls->v);
}

static int list_push(list_state *ls, const char *rel, const struct stat *st) {
    if (ls->n == ls->cap) {
        size_t cap = ls->cap ? ls->cap * 2 : 64;
        list_entry *v = realloc(ls->v, cap * sizeof *v);
        if (!v)
            return fawn_err(FAWN_ENOMEM, "out of memory listing a directory");
        ls->v = v;
        ls->cap = cap;
    }
    char *copy = strdup(rel);
    if (!copy)
        return fawn_err(FAWN_ENOMEM, "out of memory listing a directory");
    ls->v[ls->n++] =
        (list_entry){copy, list_type(st->st_mode), S_ISREG(st->st_mode) ? st->st_size : 0};
    return 0;
}

/* Lists dirfd (whose entries are shown below `prefix`), entering real
 * subdirectories (never symlinks) while depth < max_depth. */
static int list_dir(list_state *ls, int dirfd, const char *prefix, int depth, int max_depth) {
    names nm = {0};
    int r = names_read(&nm, dirfd, &ls->budget, &ls->cut, list_keep);
    for (size_t i = 0; r == 0 && i < nm.n; i++) {
        char rel[VPATH_MAX];
        struct stat st;
        if (fstatat(dirfd, nm.v[i], &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !path_join(rel, ls->room, prefix, nm.v[i]))
            continue; /* vanished, or too long to address */
        r = list_push(ls, rel, &st);
        if (r < 0 || !S_ISDIR(st.st_mode) || depth >= max_depth)
            continue;
        int sub = openat(dirfd, nm.v[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (sub >= 0) {
            r = list_dir(ls, sub, rel, depth + 1, max_depth);
            close(sub);
        }
    }
    names_free(&nm);
    return r;
}

/* Tree order: a directory's entries right after it ('/' sorts first). */
static int cmp_tree(const void *a, const void *b) {
    const unsigned char *x = (const unsigned char *)((const list_entry *)a)->rel;
    const unsigned char *y = (const unsigned char *)((const list_entry *)b)->rel;
    for (;; x++, y++) {
        unsigned cx = *x == '/' ? 1 : *x, cy = *y == '/' ? 1 : *y;
        if (cx != cy)
            return cx < cy ? -1 : 1;
        if (cx == 0)
            return 0;
    }
}

static json_t *list_entry_json(const list_entry *e, const char *shown) {
    char path[SHOWN_MAX];
    snprintf(path, sizeof path, "%s/%s", shown, e->rel);
    const char *slash = strrchr(e->rel, '/');
    return json_pack("{s:s, s:s, s:s, s:I}", "name", slash ? slash + 1 : e->rel, "path", path,
                     "type", e->type, "size", (json_int_t)e->size);
}

static int list_reply(json_t **out, list_state *ls, const target *t, size_t max_entries) {
    if (ls->n > 1)
        qsort(ls->v, ls->n, sizeof *ls->v, cmp_tree);
    json_t *entries = json_array();
    for (size_t i = 0; entries && i < ls->n && i < max_entries; i++) {
        if (json_array_append_new(entries, list_entry_json(&ls->v[i], t->shown)) < 0) {
            json_decref(entries);
            entries = NULL;
        }
    }
    bool truncated = ls->cut || ls->n > max_entries;
    return reply_set(out, json_pack("{s:s, s:o, s:b}", "path", t->shown, "entries", entries,
                                    "truncated", truncated));
}

int box_file_list(json_t **out, const json_t *req, const box_files *f) {
    const char *path = NULL;
    int64_t max_depth = LIST_MAX_DEPTH;
    int r;
    if ((r = fjson_check_keys(req, list_keys)) < 0 ||
        (r = fjson_get_string(&path, req, "path", true)) < 0 ||
        (r = fjson_get_int(&max_depth, req, "max_depth", false, 1, LIST_MAX_DEPTH)) < 0)
        return r;
    target t;
    _cleanup_close_ int dirfd = -1;
    if ((r = target_resolve(&t, f, path, false)) < 0 || (r = target_open_dir(&dirfd, &t)) < 0)
        return r;
    list_state ls = {.budget = WALK_MAX_VISITS, .room = rel_room(t.shown)};
    r = list_dir(&ls, dirfd, "", 1, (int)max_depth);
    if (r == 0)
        r = list_reply(out, &ls, &t, f->limits.list_max_entries);
    list_state_free(&ls);
    return r;
}

/* ---- glob patterns: components matched with fnmatch, "**" spans directories ---- */

typedef struct glob_pat {
    char *buf;
    const char *part[GLOB_MAX_PARTS];
    size_t n;
} glob_pat;

static bool is_globstar(const char *part) { return strcmp(part, "**") == 0; }

static void glob_pat_free(glob_pat *g) { free(g->buf); }

/* Splits a relative pattern into components ("." dropped, "**" runs merged). */
static int glob_pat_parse(glob_pat *g, const char *pattern, const char *key) {
    *g = (glob_pat){0};
    if (!pattern[0])
        return fawn_err(FAWN_EINVAL, "'%s' must not be empty", key);
    if (pattern[0] == '/')
        return fawn_err(FAWN_EINVAL, "'%s' must be relative to 'path'", key);
    if (strlen(pattern) >= VPATH_MAX)
        return fawn_err(FAWN_EINVAL, "'%s' is longer than %d bytes", key, VPATH_MAX - 1);
    if (!(g->buf = strdup(pattern)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    char *save = NULL;
    for (char *p = strtok_r(g->buf, "/", &save); p; p = strtok_r(NULL, "/", &save)) {
        if (strcmp(p, ".") == 0 || (is_globstar(p) && g->n > 0 && is_globstar(g->part[g->n - 1])))
            continue;
        if (strcmp(p, "..") == 0)
            return fawn_err(FAWN_EINVAL, "'..' is not allowed in '%s'", key);
        if (g->n == GLOB_MAX_PARTS)
            return fawn_err(FAWN_EINVAL, "'%s' has more than %d components", key, GLOB_MAX_PARTS);
        g->part[g->n++] = p;
    }
    if (g->n == 0)
        return fawn_err(FAWN_EINVAL, "'%s' matches nothing", key);
    return 0;
}

/* The matcher is a small NFA: state i means "part[i] is next"; state n accepts. */
static uint64_t glob_closure(const glob_pat *g, uint64_t states) {
    for (size_t i = 0; i < g->n; i++) {
        if ((states >> i & 1) && is_globstar(g->part[i]))
            states |= (uint64_t)1 << (i + 1);
    }
    return states;
}

static uint64_t glob_start(const glob_pat *g) { return glob_closure(g, 1); }

static uint64_t glob_step(const glob_pat *g, uint64_t states, const char *name) {
    uint64_t next = 0;
    for (size_t i = 0; i < g->n; i++) {
        if (!(states >> i & 1))
            continue;
        if (is_globstar(g->part[i]))
            next |= (uint64_t)1 << i;
        else if (fnmatch(g->part[i], name, FNM_PATHNAME | FNM_PERIOD) == 0)
            next |= (uint64_t)1 << (i + 1);
    }
    return glob_closure(g, next);
}

static bool glob_accepts(const glob_pat *g, uint64_t states) { return states >> g->n & 1; }

/* True while some deeper path could still match. */
static bool glob_live(const glob_pat *g, uint64_t states) {
    return (states & (((uint64_t)1 << g->n) - 1)) != 0;
}

/* ---- tree walk for glob and grep ---- */

typedef struct walker walker;
typedef int (*walk_visit_fn)(walker *w, int dirfd, const char *name, const struct stat *st);

struct walker {
    const glob_pat *pat; /* NULL: every entry matches, every directory is entered */
    walk_visit_fn visit; /* called for each matching entry */
    void *ud;
    size_t budget;       /* entries still allowed */
    bool cut;            /* a walk bound was hit */
    bool stop;           /* the visitor has what it needs */
    char rel[VPATH_MAX]; /* path of the current entry below the base */
    size_t rel_len, room;
};

static const char *const walk_skip_names[] = {".git", "node_modules", ".venv", "dist", "build"};

static bool walk_keep(const char *name) {
    if (!name_addressable(name))
        return false;
    for (size_t i = 0; i < ARRAY_LEN(walk_skip_names); i++) {
        if (strcmp(name, walk_skip_names[i]) == 0)
            return false;
    }
    size_t n = strlen(name);
    return !(n >= 4 && strcmp(name + n - 4, ".log") == 0);
}

static int walk_dir(walker *w, int dirfd, uint64_t states, int depth);

static int walk_descend(walker *w, int dirfd, const char *name, uint64_t states, int depth) {
    if (depth >= WALK_MAX_DEPTH) {
        w->cut = true;
        return 0;
    }
    _cleanup_close_ int fd =
        openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    return fd < 0 ? 0 : walk_dir(w, fd, states, depth);
}

static int walk_entry(walker *w, int dirfd, const char *name, uint64_t states, int depth) {
    struct stat st;
    size_t saved = w->rel_len;
    int n = snprintf(w->rel + saved, w->room - saved, "%s%s", saved ? "/" : "", name);
    if (n < 0 || (size_t)n >= w->room - saved ||
        fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        w->rel[saved] = '\0';
        return 0; /* too long to address, or vanished */
    }
    w->rel_len += (size_t)n;
    uint64_t next = w->pat ? glob_step(w->pat, states, name) : 0;
    int r = 0;
    if (!w->pat || glob_accepts(w->pat, next))
        r = w->visit(w, dirfd, name, &st);
    if (r == 0 && !w->stop && S_ISDIR(st.st_mode) && (!w->pat || glob_live(w->pat, next)))
        r = walk_descend(w, dirfd, name, next, depth + 1);
    w->rel_len = saved;
    w->rel[saved] = '\0';
    return r;
}

/* Visits dirfd's entries in name order, depth first, never through a symlink. */
static int walk_dir(walker *w, int dirfd, uint64_t states, int depth) {
    names nm = {0};
    int r = names_read(&nm, dirfd, &w->budget, &w->cut, walk_keep);
    for (size_t i = 0; r == 0 && i < nm.n && !w->stop; i++)
        r = walk_entry(w, dirfd, nm.v[i], states, depth);
    names_free(&nm);
    return r;
}

static void walker_init(walker *w, const glob_pat *pat, walk_visit_fn visit, void *ud,
                        const char *base_shown) {
    *w = (walker){.pat = pat, .visit = visit, .ud = ud, .budget = WALK_MAX_VISITS};
    size_t room = rel_room(base_shown);
    w->room = room < sizeof w->rel ? room : sizeof w->rel;
}

static size_t results_max(int64_t asked, size_t def, size_t cap) {
    uint64_t n = asked <= 0 ? def : (uint64_t)asked;
    return n < cap ? (size_t)n : cap;
}

/* ---- glob ---- */

static const char *const glob_keys[] = {"path", "pattern", "include_dirs", "max_results", NULL};

typedef struct glob_run {
    json_t *matches;
    size_t max;
    bool include_dirs;
    bool truncated;
    const char *base;
} glob_run;

static int glob_visit(walker *w, int dirfd, const char *name, const struct stat *st) {
    glob_run *g = w->ud;
    if (S_ISDIR(st->st_mode) && !g->include_dirs)
        return 0;
    if (json_array_size(g->matches) >= g->max) {
        g->truncated = w->stop = true;
        return 0;
    }
    char path[SHOWN_MAX];
    snprintf(path, sizeof path, "%s/%s", g->base, w->rel);
    if (json_array_append_new(g->matches, json_string(path)) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory collecting matches");
    return 0;
}

int box_file_glob(json_t **out, const json_t *req, const box_files *f) {
    const char *path = NULL, *pattern = NULL;
    bool include_dirs = false;
    int64_t max_results = 0;
    int r;
    if ((r = fjson_check_keys(req, glob_keys)) < 0 ||
        (r = fjson_get_string(&path, req, "path", true)) < 0 ||
        (r = fjson_get_string(&pattern, req, "pattern", true)) < 0 ||
        (r = fjson_get_bool(&include_dirs, req, "include_dirs", false)) < 0 ||
        (r = fjson_get_int(&max_results, req, "max_results", false, INT64_MIN, INT64_MAX)) < 0)
        return r;
    __attribute__((cleanup(glob_pat_free))) glob_pat pat = {0};
    target t;
    _cleanup_close_ int dirfd = -1;
    if ((r = glob_pat_parse(&pat, pattern, "pattern")) < 0 ||
        (r = target_resolve(&t, f, path, false)) < 0 || (r = target_open_dir(&dirfd, &t)) < 0)
        return r;
    glob_run g = {.matches = json_array(),
                  .include_dirs = include_dirs,
                  .base = t.shown,
                  .max =
                      results_max(max_results, GLOB_DEFAULT_RESULTS, f->limits.glob_max_results)};
    if (!g.matches)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    walker w;
    walker_init(&w, &pat, glob_visit, &g, t.shown);
    r = walk_dir(&w, dirfd, glob_start(&pat), 0);
    if (r < 0) {
        json_decref(g.matches);
        return r;
    }
    return reply_set(
        out, json_pack("{s:o, s:b}", "matches", g.matches, "truncated", g.truncated || w.cut));
}

/* ---- grep ---- */

static const char *const grep_keys[] = {"path",           "pattern",     "glob", "literal",
                                        "case_sensitive", "max_results", NULL};

typedef struct grep_run {
    pcre2_code *code;
    pcre2_match_data *md;
    pcre2_match_context *mctx;
    json_t *matches;
    size_t max;
    char *buf;           /* GREP_MAX_FILE_BYTES + 1 */
    uint64_t bytes_left; /* of GREP_MAX_TOTAL_BYTES */
    int limit_hits;
    bool truncated;
    bool stop;
    const char *note;
    const char *base;
} grep_run;

static void grep_run_free(grep_run *g) {
    pcre2_match_data_free(g->md);
    pcre2_match_context_free(g->mctx);
    pcre2_code_free(g->code);
    json_decref(g->matches);
    free(g->buf);
}

static int grep_compile(grep_run *g, const char *pattern, bool literal, bool case_sensitive) {
    if (!pattern[0])
        return fawn_err(FAWN_EINVAL, "'pattern' must not be empty");
    if (strlen(pattern) > GREP_MAX_PATTERN_BYTES)
        return fawn_err(FAWN_EINVAL, "'pattern' is longer than %d bytes", GREP_MAX_PATTERN_BYTES);
    /* Files may hold invalid UTF-8: MATCH_INVALID_UTF makes such bytes unmatchable, not errors. */
    uint32_t opts = PCRE2_UTF | PCRE2_MATCH_INVALID_UTF;
    opts |= literal ? PCRE2_LITERAL : PCRE2_NEVER_BACKSLASH_C;
    opts |= case_sensitive ? 0 : PCRE2_CASELESS;
    int err = 0;
    PCRE2_SIZE off = 0;
    g->code = pcre2_compile((PCRE2_SPTR)pattern, PCRE2_ZERO_TERMINATED, opts, &err, &off, NULL);
    if (!g->code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return fawn_err(FAWN_EINVAL, "Invalid regex pattern: %s (at offset %zu)", (char *)msg,
                        (size_t)off);
    }
    g->md = pcre2_match_data_create_from_pattern(g->code, NULL);
    g->mctx = pcre2_match_context_create(NULL);
    if (!g->md || !g->mctx)
        return fawn_err(FAWN_ENOMEM, "out of memory compiling the pattern");
    pcre2_set_match_limit(g->mctx, GREP_MATCH_LIMIT);
    pcre2_set_depth_limit(g->mctx, GREP_DEPTH_LIMIT);
    pcre2_set_heap_limit(g->mctx, GREP_HEAP_LIMIT_KIB);
    return 0;
}

/* Up to GREP_TEXT_MAX_CHARS characters of a line as valid UTF-8 (invalid
 * bytes become U+FFFD), with "..." when cut. */
static int grep_text(fbuf *b, const char *p, size_t n) {
    size_t chars = 0;
    int r = 0;
    for (size_t i = 0; r == 0 && i < n; chars++) {
        if (chars == GREP_TEXT_MAX_CHARS)
            return fbuf_append(b, "...", 3);
        size_t k = utf8_char_at(p + i, n - i);
        r = k ? fbuf_append(b, p + i, k) : fbuf_append(b, "\xEF\xBF\xBD", 3);
        i += k ? k : 1;
    }
    return r;
}

static int grep_add(grep_run *g, const char *path, int64_t line, const char *p, size_t n) {
    if (json_array_size(g->matches) >= g->max) {
        g->truncated = g->stop = true;
        return 0;
    }
    fbuf text = {0};
    int r = grep_text(&text, p, n);
    json_t *m = r < 0 ? NULL
                      : json_pack("{s:s, s:I, s:s%}", "path", path, "line", (json_int_t)line,
                                  "text", text.data ? text.data : "", text.len);
    fbuf_free(&text);
    if (r < 0)
        return r;
    if (json_array_append_new(g->matches, m) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory collecting matches");
    return 0;
}

static int grep_line(grep_run *g, const char *path, int64_t line, const char *p, size_t n) {
    if (n > 4 * GREP_MAX_LINE_CHARS || utf8_count_chars(p, n) > GREP_MAX_LINE_CHARS)
        return 0;
    int rc = pcre2_match(g->code, (PCRE2_SPTR)p, n, 0, 0, g->md, g->mctx);
    if (rc == PCRE2_ERROR_MATCHLIMIT || rc == PCRE2_ERROR_DEPTHLIMIT ||
        rc == PCRE2_ERROR_HEAPLIMIT) {
        if (++g->limit_hits >= GREP_MAX_LIMIT_HITS) {
            g->truncated = g->stop = true;
            g->note = "search stopped: the pattern hit its backtracking limit on too many lines; "
                      "simplify it";
        }
        return 0;
    }
    return rc < 0 ? 0 : grep_add(g, path, line, p, n);
}

/* Searches one file's text (skipped when binary), line by line. */
static int grep_buffer(grep_run *g, const char *path, const char *buf, size_t n) {
    if (memchr(buf, '\0', n < FILES_SNIFF_BYTES ? n : FILES_SNIFF_BYTES))
        return 0;
    int r = 0;
    int64_t line = 1;
    for (size_t pos = 0; r == 0 && pos < n && !g->stop; line++) {
        const char *nl = memchr(buf + pos, '\n', n - pos);
        size_t end = nl ? (size_t)(nl - buf) : n;
        size_t len = end - pos;
        if (len > 0 && buf[pos + len - 1] == '\r')
            len--;
        r = grep_line(g, path, line, buf + pos, len);
        pos = end + 1;
    }
    return r;
}

/* Reads at most GREP_MAX_FILE_BYTES + 1 bytes of fd into g->buf: the count,
 * or -1 on a read error (the file is then skipped). */
static ssize_t grep_read(grep_run *g, int fd) {
    size_t n = 0;
    while (n <= GREP_MAX_FILE_BYTES) {
        ssize_t k = read(fd, g->buf + n, GREP_MAX_FILE_BYTES + 1 - n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0)
            return -1;
        if (k == 0)
            break;
        n += (size_t)k;
    }
    return (ssize_t)n;
}

/* Greps the regular file fd (already opened without following symlinks). */
static int grep_fd(grep_run *g, int fd, const char *path) {
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size > GREP_MAX_FILE_BYTES)
        return 0;
    ssize_t got = grep_read(g, fd);
    if (got < 0 || (size_t)got > GREP_MAX_FILE_BYTES)
        return 0;
    size_t n = (size_t)got;
    if (n > g->bytes_left) {
        g->truncated = g->stop = true;
        g->note = "search stopped after reading its byte budget; narrow 'path' or 'glob'";
        return 0;
    }
    g->bytes_left -= n;
    return grep_buffer(g, path, g->buf, n);
}

static int grep_visit(walker *w, int dirfd, const char *name, const struct stat *st) {
    grep_run *g = w->ud;
    if (!S_ISREG(st->st_mode) || (uint64_t)st->st_size > GREP_MAX_FILE_BYTES)
        return 0;
    _cleanup_close_ int fd =
        openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char path[SHOWN_MAX];
    snprintf(path, sizeof path, "%s/%s", g->base, w->rel);
    int r = grep_fd(g, fd, path);
    w->stop = g->stop;
    return r;
}

/* A glob without '/' ("*.py") filters by file name anywhere below the base;
 * one with '/' filters by the path below it. */
static int grep_filter_parse(glob_pat *pat, const char *glob) {
    if (strchr(glob, '/'))
        return glob_pat_parse(pat, glob, "glob");
    char anywhere[VPATH_MAX];
    if (snprintf(anywhere, sizeof anywhere, "**/%s", glob) >= (int)sizeof anywhere)
        return fawn_err(FAWN_EINVAL, "'glob' is longer than %d bytes", VPATH_MAX - 4);
    return glob_pat_parse(pat, glob[0] ? anywhere : glob, "glob");
}

static int grep_search(grep_run *g, const target *t, const glob_pat *filter) {
    struct stat st;
    int r = target_stat(&st, t);
    _cleanup_close_ int fd = -1;
    if (r == 0 && S_ISREG(st.st_mode)) {
        if ((r = target_open_regular(&fd, &st, t)) < 0)
            return r;
        return grep_fd(g, fd, t->shown);
    }
    if (r < 0 || (r = target_open_dir(&fd, t)) < 0)
        return r;
    walker w;
    walker_init(&w, filter, grep_visit, g, t->shown);
    r = walk_dir(&w, fd, filter ? glob_start(filter) : 0, 0);
    g->truncated |= w.cut;
    return r;
}

int box_file_grep(json_t **out, const json_t *req, const box_files *f) {
    const char *path = NULL, *pattern = NULL, *glob = NULL;
    bool literal = false, case_sensitive = false;
    int64_t max_results = 0;
    int r;
    if ((r = fjson_check_keys(req, grep_keys)) < 0 ||
        (r = fjson_get_string(&path, req, "path", true)) < 0 ||
        (r = fjson_get_string(&pattern, req, "pattern", true)) < 0 ||
        (r = fjson_get_string(&glob, req, "glob", false)) < 0 ||
        (r = fjson_get_bool(&literal, req, "literal", false)) < 0 ||
        (r = fjson_get_bool(&case_sensitive, req, "case_sensitive", false)) < 0 ||
        (r = fjson_get_int(&max_results, req, "max_results", false, INT64_MIN, INT64_MAX)) < 0)
        return r;
    __attribute__((cleanup(glob_pat_free))) glob_pat filter = {0};
    __attribute__((cleanup(grep_run_free)))
    grep_run g = {.max = results_max(max_results, GREP_DEFAULT_RESULTS, f->limits.grep_max_results),
                  .bytes_left = GREP_MAX_TOTAL_BYTES};
    target t;
    if ((glob && (r = grep_filter_parse(&filter, glob)) < 0) ||
        (r = grep_compile(&g, pattern, literal, case_sensitive)) < 0 ||
        (r = target_resolve(&t, f, path, false)) < 0)
        return r;
    g.base = t.shown;
    g.matches = json_array();
    g.buf = malloc(GREP_MAX_FILE_BYTES + 1);
    if (!g.matches || !g.buf)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if ((r = grep_search(&g, &t, glob ? &filter : NULL)) < 0)
        return r;
    json_t *v = json_pack("{s:O, s:b}", "matches", g.matches, "truncated", g.truncated);
    if (v && g.note && json_object_set_new(v, "note", json_string(g.note)) < 0) {
        json_decref(v);
        v = NULL;
    }
    return reply_set(out, v);
}

/* ---- streamed upload and download ---- */

/* Copies exactly length body bytes into fd, hashing them. */
static int upload_copy(char sha256_hex[65], int fd, uint64_t length, box_body_read_fn read_body,
                       void *ctx) {
    crypto_hash_sha256_state h;
    crypto_hash_sha256_init(&h);
    char buf[FILES_CHUNK];
    for (uint64_t done = 0; done < length;) {
        size_t want = length - done < sizeof buf ? (size_t)(length - done) : sizeof buf;
        ssize_t n = read_body(ctx, buf, want);
        if (n < 0)
            return (int)n;
        if (n == 0)
            return fawn_err(FAWN_EPROTO, "request body ended after %llu of %llu bytes",
                            (unsigned long long)done, (unsigned long long)length);
        if ((size_t)n > want)
            return fawn_err(FAWN_EPROTO, "body reader returned more bytes than asked for");
        crypto_hash_sha256_update(&h, (const unsigned char *)buf, (unsigned long long)n);
        int r = fawn_write_all(fd, buf, (size_t)n);
        if (r < 0)
            return r;
        done += (uint64_t)n;
    }
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256_final(&h, digest);
    sodium_bin2hex(sha256_hex, 65, digest, sizeof digest);
    return 0;
}

int box_file_upload_stream(json_t **out, const box_files *f, const char *path, bool overwrite,
                           int64_t content_length, box_body_read_fn read_body, void *ctx) {
    if (content_length < 0)
        return fawn_err(FAWN_EINVAL, "Content-Length is required");
    if ((uint64_t)content_length > f->limits.upload_max_bytes)
        return fawn_err(FAWN_E2BIG, "upload of %lld bytes is over the %zu-byte limit",
                        (long long)content_length, f->limits.upload_max_bytes);
    target t;
    _cleanup_close_ int dirfd = -1;
    int r;
    if ((r = target_resolve(&t, f, path, true)) < 0 || (r = target_open_parent(&dirfd, &t)) < 0)
        return r;
    bool exists = false;
    mode_t mode = 0;
    if ((r = check_existing(&exists, &mode, dirfd, target_name(&t), t.shown)) < 0)
        return r;
    if (exists && !overwrite)
        return fawn_err(FAWN_EEXIST, "already exists: %s (pass overwrite=true to replace it)",
                        t.shown);
    staged s;
    if ((r = staged_open(&s, dirfd, VPATH_STAGING_UPLOAD_PREFIX, VPATH_STAGING_UPLOAD_SUFFIX)) < 0)
        return r;
    char sha[65];
    struct stat st;
    r = upload_copy(sha, s.fd, (uint64_t)content_length, read_body, ctx);
    if (r == 0)
        r = staged_commit(&s, &st, target_name(&t), overwrite, t.shown);
    staged_close(&s);
    if (r < 0)
        return r;
    return reply_set(out, json_pack("{s:s, s:I, s:s}", "path", t.shown, "size",
                                    (json_int_t)st.st_size, "sha256", sha));
}

int box_file_download_open(int *fd_out, uint64_t *size_out, const box_files *f, const char *path) {
    target t;
    struct stat st;
    _cleanup_close_ int fd = -1;
    int r;
    if ((r = target_resolve(&t, f, path, false)) < 0 || (r = target_open_regular(&fd, &st, &t)) < 0)
        return r;
    if ((uint64_t)st.st_size > f->limits.download_max_bytes)
        return fawn_err(FAWN_E2BIG, "%s is %lld bytes, over the %zu-byte download limit", t.shown,
                        (long long)st.st_size, f->limits.download_max_bytes);
    *size_out = (uint64_t)st.st_size;
    *fd_out = steal_fd(fd);
    return 0;
}

int box_file_download_copy(int fd, uint64_t size, box_chunk_write_fn write_chunk, void *ctx) {
    char buf[FILES_CHUNK];
    for (uint64_t done = 0; done < size;) {
        size_t want = size - done < sizeof buf ? (size_t)(size - done) : sizeof buf;
        ssize_t n = read(fd, buf, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fawn_err_sys(FAWN_EIO, errno, "read");
        if (n == 0)
            return fawn_err(FAWN_EIO, "file shrank while being sent (%llu of %llu bytes)",
                            (unsigned long long)done, (unsigned long long)size);
        int r = write_chunk(ctx, buf, (size_t)n);
        if (r < 0)
            return r;
        done += (uint64_t)n;
    }
    return 0;
}

box_file_limits box_file_limits_default(void) {
    return (box_file_limits){
        .read_max_bytes = (size_t)1 << 20,
        .write_max_bytes = (size_t)10 << 20,
        .upload_max_bytes = (size_t)100 << 20,
        .download_max_bytes = (size_t)100 << 20,
        .list_max_entries = 1000,
        .glob_max_results = 1000,
        .grep_max_results = 500,
    };
}
