/* glob and grep: bounded walks of a directory tree that never follow
 * symlinks (see box/files.h). */
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "base/fsx.h"
#include "base/json.h"
#include "box/files_internal.h"

/* glob and grep do not enter directories deeper than this; real projects are far shallower. */
#define WALK_MAX_DEPTH 64
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
    if (!files_name_addressable(name))
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
    _cleanup_close_ int fd = openat(dirfd, name,
                                    O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
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
    int r = files_names_read(&nm, dirfd, &w->budget, &w->cut, walk_keep);
    for (size_t i = 0; r == 0 && i < nm.n && !w->stop; i++)
        r = walk_entry(w, dirfd, nm.v[i], states, depth);
    files_names_free(&nm);
    return r;
}

static void walker_init(walker *w, const glob_pat *pat, walk_visit_fn visit, void *ud,
                        const char *base_shown) {
    *w = (walker){.pat = pat, .visit = visit, .ud = ud, .budget = WALK_MAX_VISITS};
    size_t room = files_rel_room(base_shown);
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
    char path[VPATH_SHOWN_MAX];
    snprintf(path, sizeof path, "%s/%s", g->base, w->rel);
    if (json_array_append_new(g->matches, json_string(path)) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory collecting matches");
    return 0;
}

int box_file_glob(json_t **out, const json_t *req, const box_files *f) {
    *out = NULL;
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
    vpath_target t;
    _cleanup_close_ int dirfd = -1;
    if ((r = glob_pat_parse(&pat, pattern, "pattern")) < 0 ||
        (r = vpath_resolve(&t, &f->roots, path, false)) < 0 || (r = vpath_open_dir(&dirfd, &t)) < 0)
        return r;
    glob_run g = {
        .matches = json_array(),
        .include_dirs = include_dirs,
        .base = t.shown,
        .max = results_max(max_results, GLOB_DEFAULT_RESULTS, f->limits.glob_max_results)};
    if (!g.matches)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    walker w;
    walker_init(&w, &pat, glob_visit, &g, t.shown);
    r = walk_dir(&w, dirfd, glob_start(&pat), 0);
    if (r < 0) {
        json_decref(g.matches);
        return r;
    }
    return files_reply_set(
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
        size_t k = files_utf8_char_at(p + i, n - i);
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
    if (n > 4 * GREP_MAX_LINE_CHARS || files_utf8_count_chars(p, n) > GREP_MAX_LINE_CHARS)
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
    _cleanup_close_ int fd = openat(dirfd, name,
                                    O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    char path[VPATH_SHOWN_MAX];
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

static int grep_search(grep_run *g, const vpath_target *t, const glob_pat *filter) {
    struct stat st;
    int r = vpath_stat(&st, t);
    _cleanup_close_ int fd = -1;
    if (r == 0 && S_ISREG(st.st_mode)) {
        if ((r = vpath_open_regular(&fd, &st, t)) < 0)
            return r;
        return grep_fd(g, fd, t->shown);
    }
    if (r < 0 || (r = vpath_open_dir(&fd, t)) < 0)
        return r;
    walker w;
    walker_init(&w, filter, grep_visit, g, t->shown);
    r = walk_dir(&w, fd, filter ? glob_start(filter) : 0, 0);
    g->truncated |= w.cut;
    return r;
}

int box_file_grep(json_t **out, const json_t *req, const box_files *f) {
    *out = NULL;
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
    vpath_target t;
    if ((glob && (r = grep_filter_parse(&filter, glob)) < 0) ||
        (r = grep_compile(&g, pattern, literal, case_sensitive)) < 0 ||
        (r = vpath_resolve(&t, &f->roots, path, false)) < 0)
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
    return files_reply_set(out, v);
}
