#include "gateway/artifacts.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/fsx.h"
#include "base/json.h"
#include "paths/paths.h"
#include "skills/skills.h"

/* A single range is at most "bytes=" and two 20-digit numbers; a longer value
 * is padding or a list and is ignored without being read through. */
#define RANGE_HEADER_MAX 256
#define SHA256_HEX_LEN 64

#define MSG_TRAVERSAL "Access denied: path traversal detected"
/* Where a path goes on inside a .skill archive (DeerFlow's marker). */
#define SKILL_ARCHIVE_MARK ".skill/"
#define MSG_ONLY_OUTPUTS "Only files under " VPATH_USER_DATA "/outputs are allowed"

/* ---- paths ---- */

/* Where a decoded path points, for the caller's choice of refusal. */
enum artifact_place { PLACE_USER_DATA, PLACE_SKILLS, PLACE_ELSEWHERE };

/* The directories of user-data whose files are served. */
static const char *const served_dirs[] = {"workspace", "uploads", "outputs"};

/* True when path has a ".." segment. */
static bool has_dotdot_segment(const char *path) {
    for (const char *s = path; *s;) {
        const char *end = strchrnul(s, '/');
        if (end - s == 2 && s[0] == '.' && s[1] == '.')
            return true;
        s = *end ? end + 1 : end;
    }
    return false;
}

/* Decodes the URL tail once behind a '/' ("mnt/user-data/x" -> "/mnt/user-data/x"). */
static int tail_decode(char decoded[VPATH_MAX], const char *encoded_tail) {
    if (!encoded_tail)
        return fawn_err(FAWN_EINVAL, "Path is required");
    decoded[0] = '/';
    int r = vpath_percent_decode(decoded + 1, VPATH_MAX - 1, encoded_tail);
    if (r < 0)
        return r;
    if (!fawn_utf8_valid(decoded, strlen(decoded)))
        return fawn_err(FAWN_EINVAL, "Path is not valid UTF-8");
    return 0;
}

/* Decodes and resolves the tail against user-data only (decoded keeps the
 * decoded text for messages). A failed path with a ".." segment is the
 * traversal it attempts; a path under another root or none is reported in
 * *place, for the caller to refuse in its own words. */
static int artifact_resolve(vpath_target *t, enum artifact_place *place, char decoded[VPATH_MAX],
                            const vpath_roots *roots, const char *encoded_tail) {
    int r = tail_decode(decoded, encoded_tail);
    if (r < 0)
        return r;
    const vpath_roots user_data_only = {.user_data_fd = roots->user_data_fd, .skills_fd = -1};
    r = vpath_resolve(t, &user_data_only, decoded, false);
    if ((r == FAWN_EINVAL || r == FAWN_EPERM) && has_dotdot_segment(decoded))
        return fawn_err(FAWN_EPERM, MSG_TRAVERSAL);
    /* Without a skills root, FAWN_ENOENT means /mnt/skills and FAWN_EPERM no root at all. */
    *place = r == FAWN_ENOENT ? PLACE_SKILLS : r == FAWN_EPERM ? PLACE_ELSEWHERE : PLACE_USER_DATA;
    return r == FAWN_ENOENT || r == FAWN_EPERM ? 0 : r;
}

static int artifact_not_found(const char *shown) {
    return fawn_err(FAWN_ENOENT, "Artifact not found: %s", shown);
}

static int not_a_file(const char *shown) {
    return fawn_err(FAWN_EINVAL, "Path is not a file: %s", shown);
}

/* ---- media types ---- */

typedef struct media_type {
    const char *ext;  /* lowercase, without the dot */
    const char *type; /* without parameters */
    bool text;        /* served with "; charset=utf-8" */
} media_type;

static const media_type media_types[] = {
    {"txt", "text/plain", true},
    {"log", "text/plain", true},
    {"md", "text/markdown", true},
    {"markdown", "text/markdown", true},
    {"csv", "text/csv", true},
    {"tsv", "text/tab-separated-values", true},
    {"json", "application/json", true},
    {"jsonl", "application/jsonl", true},
    {"ipynb", "application/x-ipynb+json", true},
    {"html", "text/html", true},
    {"htm", "text/html", true},
    {"xhtml", "application/xhtml+xml", true},
    {"svg", "image/svg+xml", true},
    {"xml", "application/xml", true},
    {"yaml", "application/yaml", true},
    {"yml", "application/yaml", true},
    {"toml", "application/toml", true},
    {"ini", "text/plain", true},
    {"py", "text/x-python", true},
    {"js", "text/javascript", true},
    {"mjs", "text/javascript", true},
    {"ts", "text/plain", true},
    {"tsx", "text/plain", true},
    {"jsx", "text/plain", true},
    {"css", "text/css", true},
    {"sh", "text/x-sh", true},
    {"c", "text/x-c", true},
    {"h", "text/x-c", true},
    {"cpp", "text/x-c++", true},
    {"go", "text/plain", true},
    {"rs", "text/plain", true},
    {"java", "text/x-java", true},
    {"sql", "application/sql", true},
    {"tex", "text/x-tex", true},
    {"pdf", "application/pdf", false},
    {"png", "image/png", false},
    {"jpg", "image/jpeg", false},
    {"jpeg", "image/jpeg", false},
    {"gif", "image/gif", false},
    {"webp", "image/webp", false},
    {"bmp", "image/bmp", false},
    {"ico", "image/vnd.microsoft.icon", false},
    {"mp3", "audio/mpeg", false},
    {"wav", "audio/wav", false},
    {"ogg", "audio/ogg", false},
    {"m4a", "audio/mp4", false},
    {"mp4", "video/mp4", false},
    {"webm", "video/webm", false},
    {"mov", "video/quicktime", false},
    {"zip", "application/zip", false},
    {"gz", "application/gzip", false},
    {"tar", "application/x-tar", false},
    {"docx", "application/vnd.openxmlformats-officedocument.wordprocessingml.document", false},
    {"xlsx", "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", false},
    {"pptx", "application/vnd.openxmlformats-officedocument.presentationml.presentation", false},
};

static const media_type octet_stream = {"", "application/octet-stream", false};

/* The type for a file name by its extension; a leading dot alone (".env") is no extension. */
static const media_type *media_type_for(const char *name) {
    const char *dot = strrchr(name, '.');
    if (!dot || dot == name)
        return &octet_stream;
    for (size_t i = 0; i < ARRAY_LEN(media_types); i++) {
        if (strcasecmp(dot + 1, media_types[i].ext) == 0)
            return &media_types[i];
    }
    return &octet_stream;
}

/* Types a browser would run in the application's origin: HTML and any XML. */
static bool media_type_active(const char *type) {
    size_t n = strlen(type);
    return strcmp(type, "text/html") == 0 || strcmp(type, "application/xml") == 0 ||
           strcmp(type, "text/xml") == 0 || (n > 4 && strcmp(type + n - 4, "+xml") == 0);
}

/* ---- Content-Disposition ---- */

/* Appends to a fixed buffer sized for its worst case; a would-be overflow stops appending. */
typedef struct text_out {
    char *buf;
    size_t cap, len;
} text_out;

static void text_put(text_out *o, const char *s) {
    size_t n = strlen(s);
    if (o->len + n >= o->cap)
        return;
    memcpy(o->buf + o->len, s, n + 1);
    o->len += n;
}

/* Characters RFC 5987 values keep as they are (those urllib's quote keeps). */
static bool rfc5987_plain(unsigned char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' ||
           c == '.' || c == '_' || c == '~';
}

/* Characters the quoted ASCII fallback keeps; everything else becomes '_'. */
static bool fallback_plain(unsigned char c) {
    return c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && c != '%';
}

static void disposition_build(char *out, size_t cap, bool attachment, const char *name) {
    text_out o = {.buf = out, .cap = cap};
    out[0] = '\0';
    text_put(&o, attachment ? "attachment; filename=\"" : "inline; filename=\"");
    for (const unsigned char *p = (const unsigned char *)name; *p; p++)
        text_put(&o, fallback_plain(*p) ? (char[]){(char)*p, '\0'} : "_");
    text_put(&o, "\"; filename*=UTF-8''");
    for (const unsigned char *p = (const unsigned char *)name; *p; p++) {
        char esc[4];
        if (rfc5987_plain(*p))
            snprintf(esc, sizeof esc, "%c", *p);
        else
            snprintf(esc, sizeof esc, "%%%02X", *p);
        text_put(&o, esc);
    }
}

/* ---- Range ---- */

static int range_ignored(const char *why) {
    return fawn_err(FAWN_ENOENT, "Range header ignored: %s", why);
}

static int range_unsatisfiable(uint64_t size) {
    return fawn_err(FAWN_E2BIG, "Requested range is not satisfiable (size %llu)",
                    (unsigned long long)size);
}

static bool is_digit(char c) { return c >= '0' && c <= '9'; }

static const char *skip_ows(const char *p) {
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

/* Reads the decimal digits at *p into *out and moves *p past them; false on
 * overflow. The caller has checked that a digit is there. */
static bool range_number(uint64_t *out, const char **p) {
    uint64_t v = 0;
    const char *s = *p;
    for (; is_digit(*s); s++) {
        unsigned d = (unsigned)(*s - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *out = v;
    *p = s;
    return true;
}

/* The positions of one range-spec; has_first false means a suffix range. */
typedef struct range_spec {
    bool has_first, has_last;
    uint64_t first, last;
} range_spec;

/* Parses "A-B", "A-" or "-N" filling the whole of p (spaces around it allowed). */
static int range_spec_parse(range_spec *rs, const char *p) {
    p = skip_ows(p);
    if ((rs->has_first = is_digit(*p)) && !range_number(&rs->first, &p))
        return range_ignored("number too large");
    if (*p++ != '-')
        return range_ignored("not a byte range");
    if ((rs->has_last = is_digit(*p)) && !range_number(&rs->last, &p))
        return range_ignored("number too large");
    p = skip_ows(p);
    if (*p == ',')
        return range_ignored("several ranges");
    if (*p != '\0')
        return range_ignored("not a byte range");
    if (!rs->has_first && !rs->has_last)
        return range_ignored("not a byte range");
    if (rs->has_first && rs->has_last && rs->last < rs->first)
        return range_ignored("last position before first");
    return 0;
}

int artifact_range_parse(uint64_t *start, uint64_t *len, const char *header, uint64_t size) {
    *start = *len = 0;
    static const char unit[] = "bytes=";
    if (!header || strnlen(header, RANGE_HEADER_MAX + 1) > RANGE_HEADER_MAX)
        return range_ignored("absent or too long");
    if (strncasecmp(header, unit, sizeof unit - 1) != 0)
        return range_ignored("not a byte range");
    range_spec rs = {0};
    int r = range_spec_parse(&rs, header + sizeof unit - 1);
    if (r < 0)
        return r;
    if (!rs.has_first) {
        if (rs.last == 0 || size == 0)
            return range_unsatisfiable(size);
        *len = rs.last < size ? rs.last : size;
        *start = size - *len;
        return 0;
    }
    if (rs.first >= size)
        return range_unsatisfiable(size);
    uint64_t end = rs.has_last && rs.last < size - 1 ? rs.last : size - 1;
    *start = rs.first;
    *len = end - rs.first + 1;
    return 0;
}

/* ---- GET ---- */

static bool served_dir(const vpath *vp) {
    for (size_t i = 0; i < ARRAY_LEN(served_dirs); i++) {
        if (vpath_in_dir(vp, served_dirs[i]))
            return true;
    }
    return false;
}

static int get_resolve(vpath_target *t, const vpath_roots *roots, const char *encoded_tail) {
    char decoded[VPATH_MAX];
    enum artifact_place place = PLACE_ELSEWHERE;
    int r = artifact_resolve(t, &place, decoded, roots, encoded_tail);
    if (r < 0)
        return r;
    if (place == PLACE_SKILLS)
        return artifact_not_found(decoded);
    if (place == PLACE_ELSEWHERE)
        return fawn_err(FAWN_EINVAL, "Path must start with %s", VPATH_USER_DATA);
    if (!served_dir(&t->vp))
        return artifact_not_found(t->shown);
    return 0;
}

/* Restates an open failure for the client. */
static int get_open_err(int code, const vpath_target *t) {
    switch (code) {
    case FAWN_ENOENT: return artifact_not_found(t->shown);
    case FAWN_EINVAL: return not_a_file(t->shown);
    case FAWN_EPERM: return fawn_err(FAWN_EPERM, MSG_TRAVERSAL);
    default: return code;
    }
}

/* Sets status, offset, length and content_range from the Range header. */
static void get_apply_range(artifact_response *out, const char *range_header) {
    uint64_t start = 0, len = 0;
    int r = artifact_range_parse(&start, &len, range_header, out->size);
    if (r == 0) {
        out->status = 206;
        out->offset = start;
        out->length = len;
        snprintf(out->content_range, sizeof out->content_range, "bytes %llu-%llu/%llu",
                 (unsigned long long)start, (unsigned long long)(start + len - 1),
                 (unsigned long long)out->size);
    } else if (r == FAWN_E2BIG) {
        out->status = 416;
        snprintf(out->content_range, sizeof out->content_range, "bytes */%llu",
                 (unsigned long long)out->size);
    } else {
        out->status = 200;
        out->length = out->size;
    }
}

/* Fills out for the file name of size bytes open as fd (taken). */
static void get_fill(artifact_response *out, const char *name, uint64_t size, int fd,
                     const char *range_header, bool download) {
    const media_type *mt = media_type_for(name);
    snprintf(out->content_type, sizeof out->content_type, "%s%s", mt->type,
             mt->text ? "; charset=utf-8" : "");
    disposition_build(out->content_disposition, sizeof out->content_disposition,
                      download || media_type_active(mt->type), name);
    out->size = size;
    get_apply_range(out, range_header);
    if (out->status != 416)
        out->fd = fd;
    else
        close(fd);
}

/* The n bytes of data in an anonymous memory file, open for reading at
 * *fd: an archive member is served as a file is. */
static int memory_file(int *fd, const char *data, size_t n) {
    *fd = memfd_create("skill-member", MFD_CLOEXEC);
    if (*fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "memfd_create");
    int r = fawn_write_all(*fd, data, n);
    if (r < 0) {
        close(*fd);
        *fd = -1;
    }
    return r;
}

/* A file inside a .skill archive of the user-data (DeerFlow's
 * outputs/x.skill/SKILL.md): the archive at the path up to the marker,
 * the member after it, read within the archive bounds (skills.h). */
static int get_member(artifact_response *out, const vpath_roots *roots, const vpath_target *t,
                      const char *range_header, bool download) {
    const char *mark = strstr(t->shown, SKILL_ARCHIVE_MARK);
    char archive[VPATH_SHOWN_MAX];
    snprintf(archive, sizeof archive, "%.*s", (int)(mark - t->shown + strlen(".skill")), t->shown);
    const char *member = mark + strlen(SKILL_ARCHIVE_MARK);
    const vpath_roots user_data_only = {.user_data_fd = roots->user_data_fd, .skills_fd = -1};
    vpath_target at;
    struct stat st;
    _cleanup_close_ int fd = -1;
    char *zip = NULL, *data = NULL;
    size_t len = 0, n = 0;
    int r = vpath_resolve(&at, &user_data_only, archive, false);
    if (r == 0 && (r = vpath_open_regular(&fd, &st, &at)) < 0)
        r = get_open_err(r, &at);
    if (r == 0 && (r = fawn_read_all(&zip, &len, fd, SKILLS_ARCHIVE_MAX)) == FAWN_E2BIG)
        r = fawn_err(FAWN_EINVAL, "Skill archive is larger than %zu bytes", SKILLS_ARCHIVE_MAX);
    if (r == 0)
        r = skills_archive_member(&data, &n, zip, len, member);
    int mfd = -1;
    if (r == 0)
        r = memory_file(&mfd, data, n);
    free(zip);
    free(data);
    if (r < 0)
        return r;
    const char *slash = strrchr(member, '/');
    get_fill(out, slash ? slash + 1 : member, n, mfd, range_header, download);
    return 0;
}

int artifact_get(artifact_response *out, const vpath_roots *roots, const char *encoded_tail,
                 const char *range_header, bool download) {
    *out = (artifact_response){.fd = -1};
    vpath_target t;
    int r = get_resolve(&t, roots, encoded_tail);
    if (r < 0)
        return r;
    _cleanup_close_ int fd = -1;
    struct stat st;
    if ((r = vpath_open_regular(&fd, &st, &t)) < 0)
        return strstr(t.shown, SKILL_ARCHIVE_MARK)
                   ? get_member(out, roots, &t, range_header, download)
                   : get_open_err(r, &t);
    get_fill(out, vpath_target_name(&t), (uint64_t)st.st_size, steal_fd(fd), range_header,
             download);
    return 0;
}

int artifact_body_read(size_t *n, const artifact_response *a, uint64_t pos, char *buf, size_t max) {
    *n = 0;
    if (pos >= a->length)
        return 0;
    size_t want = a->length - pos < max ? (size_t)(a->length - pos) : max;
    ssize_t got;
    do
        got = pread(a->fd, buf, want, (off_t)(a->offset + pos));
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return fawn_err(FAWN_EIO, "artifact unreadable at byte %" PRIu64 ": %s", a->offset + pos,
                        strerror(errno));
    if (got == 0)
        return fawn_err(FAWN_EIO,
                        "artifact shrank while being sent: it ends before byte %" PRIu64
                        " of %" PRIu64,
                        a->offset + pos, a->size);
    *n = (size_t)got;
    return 0;
}

/* ---- PUT: the request ---- */

static int sha256_hex_check(const char *hex) {
    if (!hex || strlen(hex) != SHA256_HEX_LEN)
        return fawn_err(FAWN_EINVAL, "expected_sha256 must be 64 lowercase hex digits");
    for (size_t i = 0; i < SHA256_HEX_LEN; i++) {
        if (!is_digit(hex[i]) && !(hex[i] >= 'a' && hex[i] <= 'f'))
            return fawn_err(FAWN_EINVAL, "expected_sha256 must be 64 lowercase hex digits");
    }
    return 0;
}

static int put_content_check(const char *content, size_t len) {
    if (len > ARTIFACT_EDIT_MAX_BYTES)
        return fawn_err(FAWN_E2BIG, "Artifact is too large to edit (at most %zu bytes)",
                        ARTIFACT_EDIT_MAX_BYTES);
    if (len > 0 && !content)
        return fawn_err(FAWN_EINVAL, "content is required");
    if (len > 0 && memchr(content, '\0', len))
        return fawn_err(FAWN_EUNSUP, "Binary content cannot be saved as an artifact");
    if (len > 0 && !fawn_utf8_valid(content, len))
        return fawn_err(FAWN_EUNSUP, "Only UTF-8 text can be saved as an artifact");
    return 0;
}

static int put_resolve(vpath_target *t, const vpath_roots *roots, const char *encoded_tail) {
    char decoded[VPATH_MAX];
    enum artifact_place place = PLACE_ELSEWHERE;
    int r = artifact_resolve(t, &place, decoded, roots, encoded_tail);
    if (r < 0)
        return r;
    if (place != PLACE_USER_DATA || !vpath_in_dir(&t->vp, "outputs") ||
        strcmp(t->vp.rel, "outputs") == 0)
        return fawn_err(FAWN_EINVAL, MSG_ONLY_OUTPUTS);
    return 0;
}

/* ---- PUT: opening the file without following symlinks ---- */

/* A symlink on the way to an edited file is never followed; one whose target
 * leaves user-data is reported as the escape it is. */
static int put_symlink_err(const vpath_target *t) {
    struct stat st;
    if (vpath_stat(&st, t) == FAWN_EPERM)
        return fawn_err(FAWN_EPERM, MSG_TRAVERSAL);
    return fawn_err(FAWN_EINVAL, "Symlinked artifacts cannot be edited: %s", t->shown);
}

static int put_open_dir(int *dirfd, const vpath_target *t) {
    const char *name = vpath_target_name(t);
    char parent[VPATH_MAX];
    size_t n = (size_t)(name - t->vp.rel) - 1; /* strictly under outputs: there is a parent */
    memcpy(parent, t->vp.rel, n);
    parent[n] = '\0';
    int fd = fsx_open_beneath(t->rootfd, parent, O_RDONLY | O_DIRECTORY, 0, FSX_NO_SYMLINKS);
    if (fd == FAWN_ENOENT)
        return artifact_not_found(t->shown);
    if (fd == FAWN_EPERM)
        return put_symlink_err(t);
    if (fd < 0)
        return fd;
    *dirfd = fd;
    return 0;
}

static int put_open_err(int e, const vpath_target *t) {
    if (e == ENOENT)
        return artifact_not_found(t->shown);
    if (e == ELOOP)
        return put_symlink_err(t);
    if (e == ENXIO || e == EISDIR || e == ENODEV)
        return not_a_file(t->shown);
    return fawn_err_sys(e == EACCES ? FAWN_EPERM : FAWN_EIO, e, "open %s", t->shown);
}

/* Opens the file for reading without following it. Its type is checked
 * before the open (no device or FIFO side effects) and again after. */
static int put_open_file(int *fd_out, struct stat *st, int dirfd, const vpath_target *t) {
    const char *name = vpath_target_name(t);
    if (vpath_is_staging_name(name))
        return artifact_not_found(t->shown);
    if (fstatat(dirfd, name, st, AT_SYMLINK_NOFOLLOW) < 0)
        return put_open_err(errno, t);
    if (S_ISLNK(st->st_mode))
        return put_symlink_err(t);
    if (!S_ISREG(st->st_mode))
        return not_a_file(t->shown);
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return put_open_err(errno, t);
    *fd_out = fd;
    if (fstat(fd, st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    if (st->st_nlink == 0) /* another save renamed its file over this one just now */
        return fawn_err(FAWN_ESTALE, "Artifact changed since it was opened: %s", t->shown);
    return vpath_check_writable(st, t->shown);
}

/* Takes the file's save lock without waiting, then checks that its name
 * still refers to it: a save that won the lock first has renamed another
 * file over the name, and this request's check would be against old bytes. */
static int put_lock(int fd, const struct stat *st, int dirfd, const vpath_target *t) {
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        if (errno == EWOULDBLOCK)
            return fawn_err(FAWN_EBUSY, "Artifact is being saved by another request: %s", t->shown);
        return fawn_err_sys(FAWN_EIO, errno, "lock %s", t->shown);
    }
    struct stat now;
    bool same = false;
    if (fstatat(dirfd, vpath_target_name(t), &now, AT_SYMLINK_NOFOLLOW) == 0)
        same = now.st_dev == st->st_dev && now.st_ino == st->st_ino;
    else if (errno != ENOENT)
        return fawn_err_sys(FAWN_EIO, errno, "stat %s", t->shown);
    if (!same)
        return fawn_err(FAWN_ESTALE, "Artifact changed since it was opened: %s", t->shown);
    return 0;
}

/* Reads the current bytes through fd and compares their hash with the client's. */
static int put_check_current(int fd, const struct stat *st, const char *expected,
                             const vpath_target *t) {
    if ((uint64_t)st->st_size > ARTIFACT_EDIT_MAX_BYTES)
        return fawn_err(FAWN_E2BIG, "Artifact is too large to edit: %s", t->shown);
    _cleanup_free_ char *cur = NULL;
    size_t n = 0;
    int r = fawn_read_all(&cur, &n, fd, ARTIFACT_EDIT_MAX_BYTES);
    if (r == FAWN_E2BIG) /* it grew past the limit after the stat above */
        return fawn_err(FAWN_E2BIG, "Artifact is too large to edit: %s", t->shown);
    if (r < 0)
        return r;
    if (memchr(cur, '\0', n))
        return fawn_err(FAWN_EUNSUP, "Binary artifacts cannot be edited: %s", t->shown);
    if (!fawn_utf8_valid(cur, n))
        return fawn_err(FAWN_EUNSUP, "Only UTF-8 text artifacts can be edited: %s", t->shown);
    char hex[SHA256_HEX_LEN + 1];
    fawn_sha256_hex(hex, cur, n);
    if (memcmp(hex, expected, SHA256_HEX_LEN) != 0)
        return fawn_err(FAWN_ESTALE, "Artifact changed since it was opened: %s", t->shown);
    return 0;
}

/* ---- PUT: the atomic replacement ---- */

/* Writes the new bytes to a staging file beside the file and renames it over
 * the file (base/fsx.h: it keeps the file's permission bits and, where the
 * gateway may set it, its owner); the staging file is gone afterwards. */
static int put_replace(int dirfd, const char *data, size_t len, const vpath_target *t) {
    fsx_staged s = {0};
    struct stat st;
    int r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, FSX_USER_FILE_MODE);
    if (r == 0)
        r = fsx_staged_write(&s, data, len);
    if (r == 0)
        r = fsx_staged_commit(&st, &s, vpath_target_name(t), FSX_COMMIT_REPLACE, t->shown);
    fsx_staged_abort(&s);
    return r;
}

int artifact_put(artifact_put_result *out, const vpath_roots *roots, const char *encoded_tail,
                 const char *content, size_t content_len, const char *expected_sha256) {
    *out = (artifact_put_result){0};
    int r;
    if ((r = sha256_hex_check(expected_sha256)) < 0 ||
        (r = put_content_check(content, content_len)) < 0)
        return r;
    vpath_target t;
    _cleanup_close_ int dirfd = -1;
    _cleanup_close_ int fd = -1; /* holds the save lock until return */
    struct stat st;
    if ((r = put_resolve(&t, roots, encoded_tail)) < 0 || (r = put_open_dir(&dirfd, &t)) < 0 ||
        (r = put_open_file(&fd, &st, dirfd, &t)) < 0 || (r = put_lock(fd, &st, dirfd, &t)) < 0 ||
        (r = put_check_current(fd, &st, expected_sha256, &t)) < 0 ||
        (r = put_replace(dirfd, content, content_len, &t)) < 0)
        return r;
    snprintf(out->path, sizeof out->path, "%s", t.shown);
    fawn_sha256_hex(out->sha256, content_len ? content : "", content_len);
    out->size = content_len;
    return 0;
}
