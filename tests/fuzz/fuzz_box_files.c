/* libFuzzer target for the box's file requests (src/box/files.c,
 * files_search.c): read, list, find (glob) and grep, whose paths, line
 * ranges, glob patterns and regular expressions a model chooses. The
 * thread's tree is made once in a temporary directory: text, binary and
 * invalid UTF-8 files, nested directories, directories the walks skip, a
 * symlink out of the tree and a skills root. Input: the first byte picks
 * the operation, the rest is the request's JSON object. Besides memory
 * errors, undefined behaviour and hangs, it checks that
 * - a request is answered or refused with FAWN_EINVAL, FAWN_EPERM,
 *   FAWN_ENOENT or FAWN_E2BIG, and a refusal hands out no reply;
 * - every path in an answer is a virtual path at or below the one asked
 *   for, and never the host's;
 * - answers keep their bounds: matches and entries within the limits, grep
 *   line numbers from 1, shown text valid UTF-8 of at most 200 characters
 *   (and "..."), read content within read_max_bytes. */
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "box/files.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 16384
/* grep shows at most this many characters of a line, then "...". */
#define GREP_TEXT_CHARS 200

typedef int (*file_op)(json_t **out, const json_t *req, const box_files *f);
static const file_op ops[] = {box_file_read, box_file_list, box_file_glob, box_file_grep};

static char dir[FUZZ_DIR_MAX];
static box_files files = {.roots = {.user_data_fd = -1, .skills_fd = -1}};

/* The tree, relative to the temporary directory: directories end in '/';
 * "->" makes a symlink. */
static const char *const tree[] = {
    "user-data/",
    "user-data/workspace/",
    "user-data/uploads/",
    "user-data/outputs/",
    "user-data/workspace/src/",
    "user-data/workspace/src/deep/",
    "user-data/workspace/src/deep/er/",
    "user-data/workspace/.git/",
    "user-data/workspace/node_modules/",
    "skills/",
    "skills/public/",
};
static const struct {
    const char *path, *content;
    size_t len;
} tree_files[] = {
#define F(p, c)                                                                                    \
    { p, c, sizeof c - 1 }
    F("user-data/workspace/notes.txt", "one\ntwo\nTODO three\r\nfour\n\nsix"),
    F("user-data/workspace/src/main.c", "int main(void) {\n    return 0; /* TODO */\n}\n"),
    F("user-data/workspace/src/deep/er/x.py", "print('caf\xc3\xa9')\n# \xe2\x98\x95 todo\n"),
    F("user-data/workspace/bin.dat", "\x7f"
                                     "ELF\0\0\0binary"),
    F("user-data/workspace/latin1.txt", "caf\xe9 cr\xe8me\n"),
    F("user-data/workspace/build.log", "TODO in a log\n"),
    F("user-data/workspace/.git/config", "[core] TODO\n"),
    F("user-data/workspace/node_modules/m.js", "// TODO\n"),
    F("user-data/uploads/report.pdf", "%PDF-1.4\n"),
    F("user-data/outputs/summary.md", "# Summary\nTODO: write it\n"),
    F("skills/public/SKILL.md", "---\nname: public\n---\nTODO\n"),
#undef F
};

static void teardown(void) {
    close(files.roots.user_data_fd);
    close(files.roots.skills_fd);
    fuzz_remove_tree(dir);
}

static void setup(void) {
    fuzz_scratch_dir(dir, "files");
    atexit(teardown);
    char path[256];
    for (size_t i = 0; i < ARRAY_LEN(tree); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, tree[i]);
        check(mkdir(path, 0755) == 0);
    }
    for (size_t i = 0; i < ARRAY_LEN(tree_files); i++) {
        snprintf(path, sizeof path, "%s/%s", dir, tree_files[i].path);
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        check(fd >= 0 &&
              write(fd, tree_files[i].content, tree_files[i].len) == (ssize_t)tree_files[i].len);
        close(fd);
    }
    snprintf(path, sizeof path, "%s/user-data/workspace/escape", dir);
    check(symlink("/etc", path) == 0);
    snprintf(path, sizeof path, "%s/user-data/outputs/notes-link.txt", dir);
    check(symlink("../workspace/notes.txt", path) == 0);
    snprintf(path, sizeof path, "%s/user-data", dir);
    files.roots.user_data_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(path, sizeof path, "%s/skills", dir);
    files.roots.skills_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    check(files.roots.user_data_fd >= 0 && files.roots.skills_fd >= 0);
    files.limits = box_file_limits_default();
}

/* The virtual path the request names, normalized, into base ("" when the
 * request has none that parses). */
static void request_base(char base[VPATH_SHOWN_MAX], const json_t *req) {
    vpath vp;
    const char *path = json_string_value(json_object_get(req, "path"));
    base[0] = '\0';
    if (path && vpath_parse(&vp, path) == 0)
        snprintf(base, VPATH_SHOWN_MAX, "%s%s%s",
                 vp.root == VPATH_ROOT_SKILLS ? VPATH_SKILLS : VPATH_USER_DATA,
                 vp.rel[0] ? "/" : "", vp.rel);
}

/* A path of an answer: a virtual path at or below base, not the host's. */
static void check_path(const json_t *v, const char *base) {
    const char *path = json_string_value(v);
    check(path != NULL && !strstr(path, dir));
    vpath vp;
    check(vpath_parse(&vp, path) == 0);
    size_t n = strlen(base);
    check(base[0] && strncmp(path, base, n) == 0 && (path[n] == '\0' || path[n] == '/'));
}

static void check_list(const json_t *out, const char *base, const char *key, size_t max) {
    const json_t *list = json_object_get(out, key);
    check(json_is_array(list) && json_array_size(list) <= max);
    check(json_is_boolean(json_object_get(out, "truncated")));
    size_t i;
    const json_t *e;
    json_array_foreach(list, i, e) {
        check_path(json_is_string(e) ? e : json_object_get(e, "path"), base);
    }
}

static void check_grep(const json_t *out, const char *base) {
    check_list(out, base, "matches", files.limits.grep_max_results);
    size_t i;
    const json_t *m;
    json_array_foreach(json_object_get(out, "matches"), i, m) {
        const char *text = json_string_value(json_object_get(m, "text"));
        size_t len = json_string_length(json_object_get(m, "text"));
        check(json_integer_value(json_object_get(m, "line")) >= 1);
        check(text && fawn_utf8_valid(text, len) && len <= 4 * GREP_TEXT_CHARS + 3);
    }
}

static void check_answer(size_t op, const json_t *req, const json_t *out) {
    char base[VPATH_SHOWN_MAX];
    request_base(base, req);
    check(json_is_object(out));
    if (ops[op] == box_file_read) {
        check_path(json_object_get(out, "path"), base);
        check(json_string_length(json_object_get(out, "content")) <= files.limits.read_max_bytes);
    } else if (ops[op] == box_file_list) {
        check_path(json_object_get(out, "path"), base);
        check_list(out, base, "entries", files.limits.list_max_entries);
    } else if (ops[op] == box_file_glob) {
        check_list(out, base, "matches", files.limits.glob_max_results);
    } else {
        check_grep(out, base);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FUZZ_INPUT_MAX)
        return 0;
    json_t *req = json_loadb((const char *)data + 1, size - 1, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(req)) { /* the box refuses anything else before any operation */
        json_decref(req);
        return 0;
    }
    if (files.roots.user_data_fd < 0)
        setup();
    size_t op = data[0] % ARRAY_LEN(ops);
    static char poison;
    json_t *out = (json_t *)&poison; /* the operation must set it on every path */
    int r = ops[op](&out, req, &files);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_EPERM || r == FAWN_ENOENT || r == FAWN_E2BIG);
    if (r < 0)
        check(out == NULL);
    else
        check_answer(op, req, out);
    json_decref(out);
    json_decref(req);
    return 0;
}
