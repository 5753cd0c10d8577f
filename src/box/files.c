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
/* read stops counting lines past this offset: a longer scan costs more than a read is worth,
 * and download serves such files whole. */
#define READ_SCAN_MAX_BYTES ((uint64_t)512 << 20)
/* list shows at most two levels, like the ls tool it serves. */
#define LIST_MAX_DEPTH 2

int files_reply_set(json_t **out, json_t *v) {
    *out = NULL;
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
size_t files_utf8_char_at(const char *s, size_t n) {
    size_t k = utf8_seq_len((unsigned char)s[0]);
    return k <= n && fawn_utf8_valid(s, k) ? k : 0;
}

size_t files_utf8_count_chars(const char *s, size_t n) {
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

static int read_reply(json_t **out, const vpath_target *t, const read_scan *s, uint64_t size,
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
    return files_reply_set(out, v);
}

int box_file_read(json_t **out, const json_t *req, const box_files *f) {
    *out = NULL;
    read_scan s = {0};
    const char *path = NULL;
    int r = read_opts_get(&s, &path, req, f);
    vpath_target t;
    if (r < 0 || (r = vpath_resolve(&t, &f->roots, path, false)) < 0)
        return r;
    struct stat st;
    _cleanup_close_ int fd = -1;
    if ((r = vpath_open_regular(&fd, &st, &t)) < 0)
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

/* A refused write: by permission, or for the thread's disk quota or a
 * full disk (a size limit, answered 413). */
static int errno_code(int e) {
    if (e == EDQUOT || e == ENOSPC)
        return FAWN_E2BIG;
    return e == EACCES || e == EPERM || e == EROFS ? FAWN_EPERM : FAWN_EIO;
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

/* Atomic replace: a staging file beside the target, renamed over it (base/fsx.h). */
static int write_replace(struct stat *st, int dirfd, const vpath_target *t, const char *data,
                         size_t len) {
    fsx_staged s = {0};
    int r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, FSX_USER_FILE_MODE);
    if (r == 0)
        r = fsx_staged_write(&s, data, len);
    if (r == 0)
        r = fsx_staged_commit(st, &s, vpath_target_name(t), FSX_COMMIT_REPLACE, t->shown);
    fsx_staged_abort(&s);
    return r;
}

static int write_open_err(int e, const vpath_target *t) {
    if (e == ELOOP)
        return fawn_err(FAWN_EPERM, "refusing to write through a symlink: %s", t->shown);
    if (e == ENXIO || e == EISDIR || e == ENODEV)
        return fawn_err(FAWN_EINVAL, "not a regular file: %s", t->shown);
    if (e == EEXIST)
        return fawn_err(FAWN_EBUSY, "%s changed while being opened; try again", t->shown);
    return fawn_err_sys(errno_code(e), e, "open %s", t->shown);
}

static int write_append(struct stat *st, int dirfd, const vpath_target *t, const char *data,
                        size_t len) {
    const char *name = vpath_target_name(t);
    _cleanup_close_ int fd = openat(
        dirfd, name, O_WRONLY | O_APPEND | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT)
        fd = openat(dirfd, name, O_WRONLY | O_APPEND | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC,
                    FSX_USER_FILE_MODE);
    if (fd < 0)
        return write_open_err(errno, t);
    if (fstat(fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    int r = vpath_check_writable(st, t->shown);
    if (r == 0)
        r = fawn_write_all(fd, data, len);
    if (r == 0 && fstat(fd, st) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    return r;
}

int box_file_write(json_t **out, const json_t *req, const box_files *f) {
    *out = NULL;
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
    vpath_target t;
    _cleanup_close_ int dirfd = -1;
    if ((r = vpath_resolve(&t, &f->roots, path, true)) < 0 ||
        (r = vpath_open_parent(&dirfd, &t)) < 0)
        return r;
    struct stat st;
    r = append ? write_append(&st, dirfd, &t, data, len) : write_replace(&st, dirfd, &t, data, len);
    if (r < 0)
        return r;
    return files_reply_set(out, json_pack("{s:s, s:I, s:I}", "path", t.shown, "bytes_written",
                                          (json_int_t)len, "size", (json_int_t)st.st_size));
}

/* ---- directory reading shared by list, glob and grep ---- */

void files_names_free(names *nm) {
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
bool files_name_addressable(const char *name) {
    return vpath_name_valid(name) && fawn_utf8_valid(name, strlen(name)) &&
           !vpath_is_staging_name(name);
}

/* Reads the names in dirfd that keep() accepts, sorted. Every name read is
 * charged to *budget; when it runs out *cut is set and reading stops. */
int files_names_read(names *out, int dirfd, size_t *budget, bool *cut, name_filter keep) {
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
size_t files_rel_room(const char *shown) {
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
    return files_name_addressable(name) && strcmp(name, ".git") != 0 &&
           strcmp(name, "node_modules") != 0;
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
    ls->v[ls->n++] = (list_entry){copy, list_type(st->st_mode),
                                  S_ISREG(st->st_mode) ? st->st_size : 0};
    return 0;
}

/* Lists dirfd (whose entries are shown below `prefix`), entering real
 * subdirectories (never symlinks) while depth < max_depth. */
static int list_dir(list_state *ls, int dirfd, const char *prefix, int depth, int max_depth) {
    names nm = {0};
    int r = files_names_read(&nm, dirfd, &ls->budget, &ls->cut, list_keep);
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
    files_names_free(&nm);
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
    char path[VPATH_SHOWN_MAX];
    if (snprintf(path, sizeof path, "%s/%s", shown, e->rel) >= (int)sizeof path)
        return NULL; /* cannot happen: list_push keeps rel within files_rel_room */
    const char *slash = strrchr(e->rel, '/');
    return json_pack("{s:s, s:s, s:s, s:I}", "name", slash ? slash + 1 : e->rel, "path", path,
                     "type", e->type, "size", (json_int_t)e->size);
}

static int list_reply(json_t **out, list_state *ls, const vpath_target *t, size_t max_entries) {
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
    return files_reply_set(out, json_pack("{s:s, s:o, s:b}", "path", t->shown, "entries", entries,
                                          "truncated", truncated));
}

int box_file_list(json_t **out, const json_t *req, const box_files *f) {
    *out = NULL;
    const char *path = NULL;
    int64_t max_depth = LIST_MAX_DEPTH;
    int r;
    if ((r = fjson_check_keys(req, list_keys)) < 0 ||
        (r = fjson_get_string(&path, req, "path", true)) < 0 ||
        (r = fjson_get_int(&max_depth, req, "max_depth", false, 1, LIST_MAX_DEPTH)) < 0)
        return r;
    vpath_target t;
    _cleanup_close_ int dirfd = -1;
    if ((r = vpath_resolve(&t, &f->roots, path, false)) < 0 || (r = vpath_open_dir(&dirfd, &t)) < 0)
        return r;
    list_state ls = {.budget = WALK_MAX_VISITS, .room = files_rel_room(t.shown)};
    r = list_dir(&ls, dirfd, "", 1, (int)max_depth);
    if (r == 0)
        r = list_reply(out, &ls, &t, f->limits.list_max_entries);
    list_state_free(&ls);
    return r;
}

/* ---- streamed upload and download ---- */

/* Copies exactly length body bytes into the staging file, hashing them. */
static int upload_copy(char sha256_hex[65], fsx_staged *s, uint64_t length,
                       box_body_read_fn read_body, void *ctx) {
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
        int r = fsx_staged_write(s, buf, (size_t)n);
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
    *out = NULL;
    if (content_length < 0)
        return fawn_err(FAWN_EINVAL, "Content-Length is required");
    if ((uint64_t)content_length > f->limits.upload_max_bytes)
        return fawn_err(FAWN_E2BIG, "upload of %lld bytes is over the %zu-byte limit",
                        (long long)content_length, f->limits.upload_max_bytes);
    vpath_target t;
    _cleanup_close_ int dirfd = -1;
    int r;
    if ((r = vpath_resolve(&t, &f->roots, path, true)) < 0 ||
        (r = vpath_open_parent(&dirfd, &t)) < 0)
        return r;
    bool exists = false;
    mode_t mode = 0;
    if ((r = vpath_check_existing(&exists, &mode, dirfd, vpath_target_name(&t), t.shown)) < 0)
        return r;
    if (exists && !overwrite)
        return fawn_err(FAWN_EEXIST, "already exists: %s (pass overwrite=true to replace it)",
                        t.shown);
    fsx_staged s = {0};
    char sha[65];
    struct stat st;
    r = fsx_staged_open(&s, dirfd, FSX_STAGING_UPLOAD, FSX_USER_FILE_MODE);
    if (r == 0)
        r = upload_copy(sha, &s, (uint64_t)content_length, read_body, ctx);
    if (r == 0)
        r = fsx_staged_commit(&st, &s, vpath_target_name(&t), overwrite ? FSX_COMMIT_REPLACE : 0,
                              t.shown);
    fsx_staged_abort(&s);
    if (r < 0)
        return r;
    return files_reply_set(out, json_pack("{s:s, s:I, s:s}", "path", t.shown, "size",
                                          (json_int_t)st.st_size, "sha256", sha));
}

int box_file_download_open(int *fd_out, uint64_t *size_out, const box_files *f, const char *path) {
    *fd_out = -1;
    *size_out = 0;
    vpath_target t;
    struct stat st;
    _cleanup_close_ int fd = -1;
    int r;
    if ((r = vpath_resolve(&t, &f->roots, path, false)) < 0 ||
        (r = vpath_open_regular(&fd, &st, &t)) < 0)
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
