#include "paths.h"

#include <string.h>

#include "base/base.h"


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
        if ((r = rel_push(out->rel, &len, seg, seg_len)) < 0)
            return r;
    }
}

static int hex_value(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

int vpath_percent_decode(char *out, size_t outsz, const char *in) {
    if (outsz == 0)
        return fawn_err(FAWN_EINVAL, "no room for the decoded path");
    size_t o = 0;
    for (size_t i = 0; in[i]; i++) {
        char c = in[i];
        if (c == '%') {
            int hi = hex_value(in[i + 1]);
            int lo = hi < 0 ? -1 : hex_value(in[i + 2]);
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

static bool has_prefix(const char *s, const char *prefix) {
    return strncmp(s, prefix, strlen(prefix)) == 0;
}

bool vpath_is_staging_name(const char *name) {
    if (has_prefix(name, VPATH_STAGING_WRITE_PREFIX))
        return true;
    size_t n = strlen(name);
    size_t pre = strlen(VPATH_STAGING_UPLOAD_PREFIX), suf = strlen(VPATH_STAGING_UPLOAD_SUFFIX);
    return n >= pre + suf && has_prefix(name, VPATH_STAGING_UPLOAD_PREFIX) &&
           strcmp(name + n - suf, VPATH_STAGING_UPLOAD_SUFFIX) == 0;
}
