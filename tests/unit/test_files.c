#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "box/files.h"
#include "box/files_internal.h"
#include "paths/paths.h"

/* Any test that could block (FIFOs) is killed by SIGALRM after this long. */
#define HANG_GUARD_S 20

#define WS "/mnt/user-data/workspace"

typedef struct fx {
    char root[64];
    int rootfd;
    box_files f;
} fx;

typedef int (*json_op)(json_t **out, const json_t *req, const box_files *f);

/* ---- fixture: a fake /mnt/user-data and /mnt/skills under a mkdtemp dir ---- */

static void host_mkdir(fx *x, const char *rel) {
    if (mkdirat(x->rootfd, rel, 0755) < 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", rel, strerror(errno));
}

static void host_put(fx *x, const char *rel, const void *data, size_t n) {
    int fd = openat(x->rootfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fail_msg("create %s: %s", rel, strerror(errno));
    assert_int_equal(fawn_write_all(fd, data, n), 0);
    close(fd);
}

static void host_puts(fx *x, const char *rel, const char *text) {
    host_put(x, rel, text, strlen(text));
}

/* The file's bytes (caller frees), or NULL when it does not exist. */
static char *host_get(fx *x, const char *rel, size_t *len) {
    int fd = openat(x->rootfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *out = NULL;
    assert_int_equal(fawn_read_all(&out, len, fd, (size_t)64 << 20), 0);
    close(fd);
    return out;
}

static bool host_exists(fx *x, const char *rel) {
    struct stat st;
    return fstatat(x->rootfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

static void host_symlink(fx *x, const char *link_target, const char *rel) {
    if (symlinkat(link_target, x->rootfd, rel) < 0)
        fail_msg("symlink %s: %s", rel, strerror(errno));
}

/* Entries of a host directory other than "." and "..". */
static size_t host_count(fx *x, const char *rel, bool staging_only) {
    int fd = openat(x->rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    DIR *d = fdopendir(fd);
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") &&
            (!staging_only || vpath_is_staging_name(e->d_name)))
            n++;
    }
    closedir(d);
    return n;
}

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->root, sizeof x->root, "/tmp/fawn-files-XXXXXX");
    if (!mkdtemp(x->root))
        return -1;
    x->rootfd = open(x->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    const char *dirs[] = {"user-data",
                          "user-data/workspace",
                          "user-data/uploads",
                          "user-data/outputs",
                          "skills",
                          "skills/demo",
                          "outside"};
    for (size_t i = 0; i < ARRAY_LEN(dirs); i++)
        host_mkdir(x, dirs[i]);
    host_puts(x, "skills/demo/SKILL.md", "# demo skill\n");
    host_puts(x, "outside/secret.txt", "TOP SECRET\n");
    x->f.roots.user_data_fd = openat(x->rootfd, "user-data", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    x->f.roots.skills_fd = openat(x->rootfd, "skills", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    x->f.limits = box_file_limits_default();
    *state = x;
    alarm(HANG_GUARD_S);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static int teardown(void **state) {
    fx *x = *state;
    alarm(0);
    close(x->f.roots.user_data_fd);
    if (x->f.roots.skills_fd >= 0)
        close(x->f.roots.skills_fd);
    close(x->rootfd);
    nftw(x->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(x);
    return 0;
}

/* ---- calling the operations ---- */

static json_t *J(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    json_error_t err;
    json_t *v = json_vpack_ex(&err, 0, fmt, ap);
    va_end(ap);
    if (!v)
        fail_msg("bad test JSON: %s", err.text);
    return v;
}

/* Runs op on req (consumed). *out is set on success only. */
static int run(json_t **out, json_op op, fx *x, json_t *req) {
    *out = NULL;
    int r = op(out, req, &x->f);
    json_decref(req);
    if (r == 0)
        assert_non_null(*out);
    return r;
}

/* Runs op expecting success; returns the reply (caller decrefs). */
static json_t *ok(json_op op, fx *x, json_t *req) {
    json_t *out = NULL;
    int r = run(&out, op, x, req);
    if (r != 0)
        fail_msg("operation failed: %d %s", r, fawn_errmsg());
    return out;
}

/* Runs op expecting the error `code`. */
static void refused(int code, json_op op, fx *x, json_t *req) {
    json_t *out = NULL;
    int r = run(&out, op, x, req);
    if (r != code)
        fail_msg("got %d (%s), want %d", r, fawn_errmsg(), code);
    assert_true(fawn_errmsg()[0] != '\0');
    json_decref(out);
}

static const char *S(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    assert_true(json_is_string(v));
    return json_string_value(v);
}

static json_int_t I(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    assert_true(json_is_integer(v));
    return json_integer_value(v);
}

static bool B(const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    assert_true(json_is_boolean(v));
    return json_is_true(v);
}

/* ---- read ---- */

static void test_read_whole_file(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/workspace/a.txt", "one\ntwo\nthree\n");
    json_t *o = ok(box_file_read, x, J("{s:s}", "path", WS "/a.txt"));
    assert_string_equal(S(o, "path"), WS "/a.txt");
    assert_string_equal(S(o, "content"), "one\ntwo\nthree\n");
    assert_int_equal(I(o, "total_lines"), 3);
    assert_int_equal(I(o, "start_line"), 1);
    assert_int_equal(I(o, "end_line"), 3);
    assert_int_equal(I(o, "size"), 14);
    assert_false(B(o, "truncated"));
    assert_false(B(o, "binary"));
    assert_null(json_object_get(o, "note"));
    json_decref(o);

    /* Normalized path in the reply; no trailing newline still counts the last line. */
    host_puts(x, "user-data/workspace/b.txt", "x\ny");
    o = ok(box_file_read, x, J("{s:s}", "path", "/mnt/user-data//workspace/./sub/../b.txt"));
    assert_string_equal(S(o, "path"), WS "/b.txt");
    assert_int_equal(I(o, "total_lines"), 2);
    json_decref(o);
}

static void test_read_line_ranges(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/workspace/a.txt", "l1\nl2\nl3\nl4\nl5\n");
    json_t *o = ok(box_file_read, x,
                   J("{s:s, s:i, s:i}", "path", WS "/a.txt", "start_line", 2, "end_line", 4));
    assert_string_equal(S(o, "content"), "l2\nl3\nl4\n");
    assert_int_equal(I(o, "start_line"), 2);
    assert_int_equal(I(o, "end_line"), 4);
    assert_int_equal(I(o, "total_lines"), 5);
    json_decref(o);

    o = ok(box_file_read, x,
           J("{s:s, s:i, s:i}", "path", WS "/a.txt", "start_line", 4, "end_line", 99));
    assert_string_equal(S(o, "content"), "l4\nl5\n");
    assert_int_equal(I(o, "end_line"), 5);
    json_decref(o);

    o = ok(box_file_read, x, J("{s:s, s:i}", "path", WS "/a.txt", "start_line", 9));
    assert_string_equal(S(o, "content"), "");
    assert_int_equal(I(o, "end_line"), 8);
    assert_non_null(strstr(S(o, "note"), "exceeds file length"));
    json_decref(o);

    refused(FAWN_EINVAL, box_file_read, x, J("{s:s, s:i}", "path", WS "/a.txt", "start_line", 0));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s, s:i}", "path", WS "/a.txt", "start_line", -3));
    refused(FAWN_EINVAL, box_file_read, x,
            J("{s:s, s:i, s:i}", "path", WS "/a.txt", "start_line", 3, "end_line", 2));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s, s:s}", "path", WS "/a.txt", "start_line", "2"));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s, s:i}", "path", WS "/a.txt", "max_bytes", 0));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s, s:b}", "path", WS "/a.txt", "follow", 1));
    refused(FAWN_EINVAL, box_file_read, x, J("{}"));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:i}", "path", 5));
}

static void test_read_empty_file(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/workspace/empty", "");
    json_t *o = ok(box_file_read, x, J("{s:s}", "path", WS "/empty"));
    assert_string_equal(S(o, "content"), "");
    assert_int_equal(I(o, "total_lines"), 0);
    assert_int_equal(I(o, "end_line"), 0);
    assert_string_equal(S(o, "note"), "file is empty");
    json_decref(o);
}

static void test_read_byte_cap(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/workspace/a.txt", "0123456789\nabcdefghij\nlast\n");
    json_t *o = ok(box_file_read, x, J("{s:s, s:i}", "path", WS "/a.txt", "max_bytes", 15));
    assert_string_equal(S(o, "content"), "0123456789\nabcd");
    assert_true(B(o, "truncated"));
    assert_int_equal(I(o, "end_line"), 2);
    assert_int_equal(I(o, "total_lines"), 3);
    assert_non_null(strstr(S(o, "note"), "start_line"));
    json_decref(o);

    /* The server's limit wins over a larger max_bytes. */
    x->f.limits.read_max_bytes = 5;
    o = ok(box_file_read, x, J("{s:s, s:i}", "path", WS "/a.txt", "max_bytes", 1000));
    assert_string_equal(S(o, "content"), "01234");
    assert_true(B(o, "truncated"));
    json_decref(o);

    /* Exactly at the cap is not truncated. */
    host_puts(x, "user-data/workspace/five", "abcde");
    o = ok(box_file_read, x, J("{s:s}", "path", WS "/five"));
    assert_string_equal(S(o, "content"), "abcde");
    assert_false(B(o, "truncated"));
    json_decref(o);
}

static void test_read_utf8_boundary_cut(void **state) {
    fx *x = *state;
    /* 9 ASCII bytes then a 2-byte and a 4-byte character. */
    host_puts(x, "user-data/workspace/u.txt", "aaaaaaaaa\xc3\xa9\xf0\x9f\x98\x80z\n");
    static const struct {
        int cap;
        const char *want;
    } cases[] = {
        {9, "aaaaaaaaa"},          {10, "aaaaaaaaa"},
        {11, "aaaaaaaaa\xc3\xa9"}, {12, "aaaaaaaaa\xc3\xa9"},
        {14, "aaaaaaaaa\xc3\xa9"}, {15, "aaaaaaaaa\xc3\xa9\xf0\x9f\x98\x80"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        json_t *o = ok(box_file_read, x,
                       J("{s:s, s:i}", "path", WS "/u.txt", "max_bytes", cases[i].cap));
        assert_string_equal(S(o, "content"), cases[i].want);
        assert_true(B(o, "truncated"));
        assert_false(B(o, "binary"));
        json_decref(o);
    }
}

static void test_read_binary(void **state) {
    fx *x = *state;
    host_put(x, "user-data/workspace/nul.bin", "abc\0def\n", 8);
    json_t *o = ok(box_file_read, x, J("{s:s}", "path", WS "/nul.bin"));
    assert_true(B(o, "binary"));
    assert_string_equal(S(o, "content"), "");
    assert_int_equal(I(o, "size"), 8);
    assert_non_null(strstr(S(o, "note"), "binary"));
    json_decref(o);

    host_puts(x, "user-data/workspace/latin1.txt", "caf\xe9\n");
    o = ok(box_file_read, x, J("{s:s}", "path", WS "/latin1.txt"));
    assert_true(B(o, "binary"));
    json_decref(o);

    /* Invalid UTF-8 past the sniffed prefix, inside the requested range. */
    size_t n = 20000;
    char *big = malloc(n);
    memset(big, 'a', n);
    for (size_t i = 99; i < n; i += 100)
        big[i] = '\n';
    big[15000] = '\xff';
    host_put(x, "user-data/workspace/late.txt", big, n);
    o = ok(box_file_read, x, J("{s:s}", "path", WS "/late.txt"));
    assert_true(B(o, "binary"));
    json_decref(o);
    /* A range before the bad byte is text. */
    o = ok(box_file_read, x, J("{s:s, s:i}", "path", WS "/late.txt", "end_line", 10));
    assert_false(B(o, "binary"));
    assert_int_equal(strlen(S(o, "content")), 1000);
    assert_int_equal(I(o, "total_lines"), 200);
    json_decref(o);

    /* A character straddling the 8 KiB sniff boundary is not "invalid". */
    memset(big, 'b', n);
    memcpy(big + 8191, "\xc3\xa9", 2);
    host_put(x, "user-data/workspace/straddle.txt", big, n);
    o = ok(box_file_read, x, J("{s:s}", "path", WS "/straddle.txt"));
    assert_false(B(o, "binary"));
    json_decref(o);
    free(big);
}

static void test_read_not_regular(void **state) {
    fx *x = *state;
    assert_int_equal(mkfifoat(x->rootfd, "user-data/workspace/fifo", 0644), 0);
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", WS "/fifo"));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", WS));

    /* A symlink (beneath the root) to a FIFO does not block either. */
    host_symlink(x, "fifo", "user-data/workspace/to-fifo");
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", WS "/to-fifo"));

    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/user-data/workspace/sock", x->root);
    assert_int_equal(bind(s, (struct sockaddr *)&sa, sizeof sa), 0);
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", WS "/sock"));
    close(s);
    refused(FAWN_ENOENT, box_file_read, x, J("{s:s}", "path", WS "/missing"));
}

static void test_read_symlinks(void **state) {
    fx *x = *state;
    char outside[256];
    snprintf(outside, sizeof outside, "%s/outside/secret.txt", x->root);
    host_puts(x, "user-data/workspace/a.txt", "inside\n");
    host_symlink(x, "/etc/passwd", "user-data/workspace/abs");
    host_symlink(x, outside, "user-data/workspace/abs-outside");
    host_symlink(x, "../../outside/secret.txt", "user-data/workspace/rel");
    host_symlink(x, "../../../../../../../../etc/passwd", "user-data/workspace/deep-rel");
    host_symlink(x, "loop-b", "user-data/workspace/loop-a");
    host_symlink(x, "loop-a", "user-data/workspace/loop-b");
    host_symlink(x, "nowhere", "user-data/workspace/dangling");
    host_symlink(x, "a.txt", "user-data/workspace/ok-link");
    host_symlink(x, "../workspace/a.txt", "user-data/outputs/ok-link");
    host_symlink(x, "/", "user-data/workspace/rootdir");

    const char *bad[] = {WS "/abs",      WS "/abs-outside", WS "/rel",
                         WS "/deep-rel", WS "/loop-a",      WS "/rootdir/etc/passwd"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        refused(FAWN_EPERM, box_file_read, x, J("{s:s}", "path", bad[i]));
    refused(FAWN_ENOENT, box_file_read, x, J("{s:s}", "path", WS "/dangling"));

    const char *good[] = {WS "/ok-link", "/mnt/user-data/outputs/ok-link"};
    for (size_t i = 0; i < ARRAY_LEN(good); i++) {
        json_t *o = ok(box_file_read, x, J("{s:s}", "path", good[i]));
        assert_string_equal(S(o, "content"), "inside\n");
        json_decref(o);
    }
}

static void test_read_path_attacks(void **state) {
    fx *x = *state;
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", WS "/../../etc/passwd"));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", "/mnt/user-data/../etc/passwd"));
    refused(FAWN_EPERM, box_file_read, x, J("{s:s}", "path", "/etc/passwd"));
    refused(FAWN_EPERM, box_file_read, x, J("{s:s}", "path", "/mnt/user-dataX/workspace/a"));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", "workspace/a.txt"));
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s}", "path", WS "/a\nb"));
    /* JSON may carry a NUL; it must not cut the path short. */
    static const char nul_path[] = WS "/a.txt\0/../../x";
    refused(FAWN_EINVAL, box_file_read, x, J("{s:s%}", "path", nul_path, sizeof nul_path - 1));
    /* Staging files are never served. */
    host_puts(x, "user-data/workspace/.fawn-tmp-0011", "partial");
    host_puts(x, "user-data/workspace/.upload-1.part", "partial");
    refused(FAWN_ENOENT, box_file_read, x, J("{s:s}", "path", WS "/.fawn-tmp-0011"));
    refused(FAWN_ENOENT, box_file_read, x, J("{s:s}", "path", WS "/.upload-1.part"));
}

static void test_read_skills(void **state) {
    fx *x = *state;
    json_t *o = ok(box_file_read, x, J("{s:s}", "path", "/mnt/skills/demo/SKILL.md"));
    assert_string_equal(S(o, "content"), "# demo skill\n");
    assert_string_equal(S(o, "path"), "/mnt/skills/demo/SKILL.md");
    json_decref(o);
    close(x->f.roots.skills_fd);
    x->f.roots.skills_fd = -1;
    refused(FAWN_ENOENT, box_file_read, x, J("{s:s}", "path", "/mnt/skills/demo/SKILL.md"));
}

static void test_read_huge_sparse_file_bounded(void **state) {
    fx *x = *state;
    /* Text first, then a hole far past the scan bound: read must stop counting. */
    char head[8192];
    memset(head, 'x', sizeof head);
    for (size_t i = 1; i < sizeof head; i += 2)
        head[i] = '\n';
    host_put(x, "user-data/workspace/huge", head, sizeof head);
    int fd = openat(x->rootfd, "user-data/workspace/huge", O_WRONLY | O_CLOEXEC);
    assert_int_equal(ftruncate(fd, (off_t)600 << 20), 0);
    close(fd);
    json_t *o = ok(box_file_read, x, J("{s:s, s:i}", "path", WS "/huge", "end_line", 3));
    assert_string_equal(S(o, "content"), "x\nx\nx\n");
    assert_int_equal(I(o, "size"), (json_int_t)600 << 20);
    assert_int_equal(I(o, "total_lines"), 4097); /* 4096 lines, then one line of NULs */
    assert_non_null(strstr(S(o, "note"), "scanned"));
    json_decref(o);
}

/* ---- write ---- */

static void test_write_creates_parents(void **state) {
    fx *x = *state;
    json_t *o = ok(box_file_write, x,
                   J("{s:s, s:s}", "path", WS "/new/deep/file.txt", "content", "hello\n"));
    assert_string_equal(S(o, "path"), WS "/new/deep/file.txt");
    assert_int_equal(I(o, "bytes_written"), 6);
    assert_int_equal(I(o, "size"), 6);
    json_decref(o);
    size_t n;
    char *got = host_get(x, "user-data/workspace/new/deep/file.txt", &n);
    assert_string_equal(got, "hello\n");
    free(got);
    assert_int_equal(host_count(x, "user-data/workspace/new/deep", true), 0);

    o = ok(box_file_write, x,
           J("{s:s, s:s}", "path", "/mnt/user-data/outputs/r.md", "content", ""));
    assert_int_equal(I(o, "size"), 0);
    json_decref(o);
}

static void test_write_atomic_replace(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/workspace/run.sh", "old contents that are longer\n");
    assert_int_equal(fchmodat(x->rootfd, "user-data/workspace/run.sh", 0755, 0), 0);
    struct stat before;
    assert_int_equal(fstatat(x->rootfd, "user-data/workspace/run.sh", &before, 0), 0);
    json_t *o = ok(box_file_write, x, J("{s:s, s:s}", "path", WS "/run.sh", "content", "new\n"));
    assert_int_equal(I(o, "size"), 4);
    json_decref(o);
    size_t n;
    char *got = host_get(x, "user-data/workspace/run.sh", &n);
    assert_string_equal(got, "new\n");
    free(got);
    struct stat after;
    assert_int_equal(fstatat(x->rootfd, "user-data/workspace/run.sh", &after, 0), 0);
    assert_int_equal(after.st_mode & 0777, 0755);
    assert_true(after.st_ino != before.st_ino); /* a new inode was renamed into place */
    assert_int_equal(host_count(x, "user-data/workspace", true), 0);
}

static void test_write_append(void **state) {
    fx *x = *state;
    json_t *o = ok(box_file_write, x,
                   J("{s:s, s:s, s:b}", "path", WS "/log.txt", "content", "a\n", "append", 1));
    assert_int_equal(I(o, "size"), 2);
    json_decref(o);
    o = ok(box_file_write, x,
           J("{s:s, s:s, s:b}", "path", WS "/log.txt", "content", "bc\n", "append", 1));
    assert_int_equal(I(o, "bytes_written"), 3);
    assert_int_equal(I(o, "size"), 5);
    json_decref(o);
    size_t n;
    char *got = host_get(x, "user-data/workspace/log.txt", &n);
    assert_string_equal(got, "a\nbc\n");
    free(got);
}

static void test_write_base64(void **state) {
    fx *x = *state;
    json_t *o = ok(
        box_file_write, x,
        J("{s:s, s:s, s:s}", "path", WS "/b.bin", "content", "AAEC/w==", "encoding", "base64"));
    assert_int_equal(I(o, "bytes_written"), 4);
    json_decref(o);
    size_t n;
    char *got = host_get(x, "user-data/workspace/b.bin", &n);
    assert_int_equal(n, 4);
    assert_memory_equal(got, "\x00\x01\x02\xff", 4);
    free(got);
    o = ok(box_file_write, x,
           J("{s:s, s:s, s:s}", "path", WS "/wrapped", "content", "aGVs\r\nbG8=", "encoding",
             "base64"));
    assert_int_equal(I(o, "bytes_written"), 5);
    json_decref(o);

    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s, s:s}", "path", WS "/c", "content", "not base64!", "encoding", "base64"));
    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s, s:s}", "path", WS "/c", "content", "QQ", "encoding", "base64"));
    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s, s:s}", "path", WS "/c", "content", "x", "encoding", "latin-1"));
    assert_false(host_exists(x, "user-data/workspace/c"));
}

static void test_write_size_limit(void **state) {
    fx *x = *state;
    x->f.limits.write_max_bytes = 16;
    json_t *o = ok(box_file_write, x,
                   J("{s:s, s:s}", "path", WS "/sixteen", "content", "0123456789abcdef"));
    json_decref(o);
    refused(FAWN_E2BIG, box_file_write, x,
            J("{s:s, s:s}", "path", WS "/big", "content", "0123456789abcdefg"));
    refused(FAWN_E2BIG, box_file_write, x,
            J("{s:s, s:s, s:b}", "path", WS "/big", "content", "0123456789abcdefg", "append", 1));
    /* 17 decoded bytes, and far more. */
    refused(FAWN_E2BIG, box_file_write, x,
            J("{s:s, s:s, s:s}", "path", WS "/big", "content",
              "MDEyMzQ1Njc4OWFiY2RlZmc=", "encoding", "base64"));
    char b64[4001];
    memset(b64, 'Q', 4000);
    b64[4000] = '\0';
    refused(FAWN_E2BIG, box_file_write, x,
            J("{s:s, s:s, s:s}", "path", WS "/big", "content", b64, "encoding", "base64"));
    assert_false(host_exists(x, "user-data/workspace/big"));
    assert_int_equal(host_count(x, "user-data/workspace", true), 0);
}

static void test_write_refused_places(void **state) {
    fx *x = *state;
    refused(FAWN_EPERM, box_file_write, x,
            J("{s:s, s:s}", "path", "/mnt/skills/demo/SKILL.md", "content", "pwned"));
    refused(FAWN_EPERM, box_file_write, x,
            J("{s:s, s:s}", "path", "/mnt/skills/new", "content", "x"));
    refused(FAWN_EPERM, box_file_write, x,
            J("{s:s, s:s}", "path", "/mnt/user-data/top.txt", "content", "x"));
    refused(FAWN_EPERM, box_file_write, x, J("{s:s, s:s}", "path", WS, "content", "x"));
    refused(FAWN_EPERM, box_file_write, x, J("{s:s, s:s}", "path", "/etc/passwd", "content", "x"));
    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s}", "path", WS "/../../etc/passwd", "content", "x"));
    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s}", "path", WS "/.fawn-tmp-1", "content", "x"));
    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s}", "path", WS "/.upload-1.part", "content", "x"));
    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s, s:s}", "path", WS "/a", "content", "x", "mode", "0777"));
    refused(FAWN_EINVAL, box_file_write, x, J("{s:s}", "path", WS "/a"));
    refused(FAWN_EINVAL, box_file_write, x,
            J("{s:s, s:s%}", "path", WS "/a", "content", "a\0b", (size_t)3));
    size_t n;
    char *skill = host_get(x, "skills/demo/SKILL.md", &n);
    assert_string_equal(skill, "# demo skill\n");
    free(skill);
    assert_false(host_exists(x, "user-data/top.txt"));
}

static void assert_secret_intact(fx *x) {
    size_t n;
    char *got = host_get(x, "outside/secret.txt", &n);
    assert_string_equal(got, "TOP SECRET\n");
    free(got);
    struct stat st;
    assert_int_equal(fstatat(x->rootfd, "outside", &st, 0), 0);
    assert_int_equal(host_count(x, "outside", false), 1);
}

static void write_both_refused(int code, fx *x, const char *path) {
    refused(code, box_file_write, x, J("{s:s, s:s}", "path", path, "content", "pwned\n"));
    refused(code, box_file_write, x,
            J("{s:s, s:s, s:b}", "path", path, "content", "pwned\n", "append", 1));
}

static void test_write_symlink_attacks(void **state) {
    fx *x = *state;
    char outside[256], outside_dir[256], outside_new[256];
    snprintf(outside, sizeof outside, "%s/outside/secret.txt", x->root);
    snprintf(outside_dir, sizeof outside_dir, "%s/outside", x->root);
    snprintf(outside_new, sizeof outside_new, "%s/outside/created.txt", x->root);
    host_puts(x, "user-data/workspace/a.txt", "inside\n");
    host_symlink(x, outside, "user-data/workspace/abs");
    host_symlink(x, "/etc/passwd", "user-data/workspace/passwd");
    host_symlink(x, "../../outside/secret.txt", "user-data/workspace/rel");
    host_symlink(x, "a.txt", "user-data/workspace/inner-link");
    host_symlink(x, outside_new, "user-data/workspace/dangling");
    host_symlink(x, "../../outside/created.txt", "user-data/workspace/dangling-rel");
    host_symlink(x, outside_dir, "user-data/workspace/linkdir");
    host_symlink(x, "../../outside", "user-data/workspace/linkdir-rel");
    host_symlink(x, "/", "user-data/workspace/slash");

    const char *targets[] = {WS "/abs",        WS "/passwd",   WS "/rel",
                             WS "/inner-link", WS "/dangling", WS "/dangling-rel"};
    for (size_t i = 0; i < ARRAY_LEN(targets); i++)
        write_both_refused(FAWN_EPERM, x, targets[i]);
    const char *through_dirs[] = {WS "/linkdir/secret.txt", WS "/linkdir/new.txt",
                                  WS "/linkdir-rel/new.txt", WS "/linkdir/sub/new.txt",
                                  WS "/slash/tmp/pwned"};
    for (size_t i = 0; i < ARRAY_LEN(through_dirs); i++)
        write_both_refused(FAWN_EPERM, x, through_dirs[i]);

    assert_secret_intact(x);
    /* The symlinks themselves are untouched. */
    char buf[256];
    ssize_t k = readlinkat(x->rootfd, "user-data/workspace/inner-link", buf, sizeof buf);
    assert_int_equal(k, 5);
    size_t n;
    char *inside = host_get(x, "user-data/workspace/a.txt", &n);
    assert_string_equal(inside, "inside\n");
    free(inside);
    assert_int_equal(host_count(x, "user-data/workspace", true), 0);
}

static void test_write_hard_link_attack(void **state) {
    fx *x = *state;
    assert_int_equal(
        linkat(x->rootfd, "outside/secret.txt", x->rootfd, "user-data/workspace/hl", 0), 0);
    write_both_refused(FAWN_EPERM, x, WS "/hl");
    assert_secret_intact(x);
}

static void test_write_not_regular(void **state) {
    fx *x = *state;
    host_mkdir(x, "user-data/workspace/dir");
    write_both_refused(FAWN_EINVAL, x, WS "/dir");
    assert_int_equal(mkfifoat(x->rootfd, "user-data/workspace/fifo", 0644), 0);
    write_both_refused(FAWN_EINVAL, x, WS "/fifo");
    /* A file where a parent directory should be. */
    host_puts(x, "user-data/workspace/file", "x");
    refused(FAWN_EPERM, box_file_write, x,
            J("{s:s, s:s}", "path", WS "/file/child", "content", "x"));
}

/* ---- list ---- */

static json_t *entry_named(const json_t *entries, const char *path) {
    size_t i;
    json_t *e;
    json_array_foreach(entries, i, e) {
        if (strcmp(S(e, "path"), path) == 0)
            return e;
    }
    return NULL;
}

static void make_tree(fx *x) {
    host_mkdir(x, "user-data/workspace/src");
    host_mkdir(x, "user-data/workspace/src/lib");
    host_mkdir(x, "user-data/workspace/src-b");
    host_mkdir(x, "user-data/workspace/.git");
    host_mkdir(x, "user-data/workspace/node_modules");
    host_puts(x, "user-data/workspace/README.md", "# readme\n");
    host_puts(x, "user-data/workspace/src/main.py", "print('hello')\n");
    host_puts(x, "user-data/workspace/src/lib/deep.py", "x = 1\n");
    host_puts(x, "user-data/workspace/.git/config", "[core]\n");
    host_puts(x, "user-data/workspace/node_modules/m.js", "x\n");
    host_puts(x, "user-data/workspace/.fawn-tmp-abc", "partial");
    host_puts(x, "user-data/workspace/src/.upload-9.part", "partial");
    host_symlink(x, "/etc", "user-data/workspace/etc-link");
}

static void test_list_tree(void **state) {
    fx *x = *state;
    make_tree(x);
    json_t *o = ok(box_file_list, x, J("{s:s}", "path", WS));
    assert_string_equal(S(o, "path"), WS);
    assert_false(B(o, "truncated"));
    const json_t *entries = json_object_get(o, "entries");
    static const char *const want[] = {WS "/README.md", WS "/etc-link",    WS "/src",
                                       WS "/src/lib",   WS "/src/main.py", WS "/src-b"};
    assert_int_equal(json_array_size(entries), ARRAY_LEN(want));
    for (size_t i = 0; i < ARRAY_LEN(want); i++)
        assert_string_equal(S(json_array_get(entries, i), "path"), want[i]);
    json_t *e = entry_named(entries, WS "/README.md");
    assert_string_equal(S(e, "type"), "file");
    assert_string_equal(S(e, "name"), "README.md");
    assert_int_equal(I(e, "size"), 9);
    assert_string_equal(S(entry_named(entries, WS "/src"), "type"), "dir");
    assert_string_equal(S(entry_named(entries, WS "/etc-link"), "type"), "symlink");
    json_decref(o);

    o = ok(box_file_list, x, J("{s:s, s:i}", "path", WS, "max_depth", 1));
    assert_int_equal(json_array_size(json_object_get(o, "entries")), 4);
    json_decref(o);
    refused(FAWN_EINVAL, box_file_list, x, J("{s:s, s:i}", "path", WS, "max_depth", 3));
    refused(FAWN_EINVAL, box_file_list, x, J("{s:s, s:i}", "path", WS, "max_depth", 0));
    refused(FAWN_EINVAL, box_file_list, x, J("{s:s, s:s}", "path", WS, "hidden", "yes"));
}

static void test_list_roots_and_errors(void **state) {
    fx *x = *state;
    json_t *o = ok(box_file_list, x, J("{s:s, s:i}", "path", "/mnt/user-data", "max_depth", 1));
    assert_int_equal(json_array_size(json_object_get(o, "entries")), 3);
    json_decref(o);
    o = ok(box_file_list, x, J("{s:s}", "path", "/mnt/skills"));
    assert_non_null(entry_named(json_object_get(o, "entries"), "/mnt/skills/demo/SKILL.md"));
    json_decref(o);
    host_puts(x, "user-data/workspace/f", "x");
    refused(FAWN_EINVAL, box_file_list, x, J("{s:s}", "path", WS "/f"));
    refused(FAWN_ENOENT, box_file_list, x, J("{s:s}", "path", WS "/nope"));
    host_symlink(x, "/etc", "user-data/workspace/etc-link");
    host_symlink(x, "../../outside", "user-data/workspace/out-link");
    refused(FAWN_EPERM, box_file_list, x, J("{s:s}", "path", WS "/etc-link"));
    refused(FAWN_EPERM, box_file_list, x, J("{s:s}", "path", WS "/out-link"));
    refused(FAWN_EINVAL, box_file_list, x, J("{s:s}", "path", WS "/../.."));
}

static void test_list_limits_and_odd_names(void **state) {
    fx *x = *state;
    char name[64];
    for (int i = 0; i < 10; i++) {
        snprintf(name, sizeof name, "user-data/workspace/f%02d", i);
        host_puts(x, name, "x");
    }
    host_puts(x, "user-data/workspace/bad\nname", "x");
    host_puts(x, "user-data/workspace/bad\\name", "x");
    host_puts(x, "user-data/workspace/bad\xffname", "x");
    json_t *o = ok(box_file_list, x, J("{s:s}", "path", WS));
    assert_int_equal(json_array_size(json_object_get(o, "entries")), 10);
    assert_false(B(o, "truncated"));
    json_decref(o);
    x->f.limits.list_max_entries = 3;
    o = ok(box_file_list, x, J("{s:s}", "path", WS));
    const json_t *entries = json_object_get(o, "entries");
    assert_int_equal(json_array_size(entries), 3);
    assert_string_equal(S(json_array_get(entries, 0), "path"), WS "/f00");
    assert_true(B(o, "truncated"));
    json_decref(o);
}

/* ---- glob ---- */

static bool has_string(const json_t *arr, const char *s) {
    size_t i;
    json_t *v;
    json_array_foreach(arr, i, v) {
        if (strcmp(json_string_value(v), s) == 0)
            return true;
    }
    return false;
}

static json_t *glob_ok(fx *x, const char *pattern, bool include_dirs) {
    return ok(box_file_glob, x,
              J("{s:s, s:s, s:b}", "path", WS, "pattern", pattern, "include_dirs", include_dirs));
}

static void test_glob_patterns(void **state) {
    fx *x = *state;
    make_tree(x);
    host_puts(x, "user-data/workspace/top.py", "x");
    host_puts(x, "user-data/workspace/.hidden.py", "x");
    host_puts(x, "user-data/workspace/a1.txt", "x");
    host_puts(x, "user-data/workspace/b2.txt", "x");
    host_puts(x, "user-data/workspace/run.log", "x");
    host_mkdir(x, "user-data/workspace/.venv");
    host_mkdir(x, "user-data/workspace/dist");
    host_mkdir(x, "user-data/workspace/build");
    host_puts(x, "user-data/workspace/.venv/v.py", "x");
    host_puts(x, "user-data/workspace/dist/d.py", "x");
    host_puts(x, "user-data/workspace/build/b.py", "x");
    host_puts(x, "user-data/workspace/node_modules/n.py", "x");
    host_puts(x, "user-data/workspace/.fawn-tmp-x.py", "x");

    json_t *o = glob_ok(x, "*.py", false);
    const json_t *m = json_object_get(o, "matches");
    assert_int_equal(json_array_size(m), 1);
    assert_string_equal(json_string_value(json_array_get(m, 0)), WS "/top.py");
    assert_false(B(o, "truncated"));
    json_decref(o);

    o = glob_ok(x, "**/*.py", false);
    m = json_object_get(o, "matches");
    assert_int_equal(json_array_size(m), 3);
    assert_true(has_string(m, WS "/top.py"));
    assert_true(has_string(m, WS "/src/main.py"));
    assert_true(has_string(m, WS "/src/lib/deep.py"));
    json_decref(o);

    o = glob_ok(x, "src/**/*.py", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 2);
    json_decref(o);
    o = glob_ok(x, "?1.txt", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 1);
    json_decref(o);
    o = glob_ok(x, "[ab][0-9].txt", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 2);
    json_decref(o);
    o = glob_ok(x, "*.log", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 0);
    json_decref(o);
    o = glob_ok(x, ".*.py", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 1);
    json_decref(o);

    o = glob_ok(x, "src*", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 0);
    json_decref(o);
    o = glob_ok(x, "src*", true);
    m = json_object_get(o, "matches");
    assert_int_equal(json_array_size(m), 2);
    assert_true(has_string(m, WS "/src-b"));
    json_decref(o);
}

static void test_glob_symlinks_not_followed(void **state) {
    fx *x = *state;
    char outside_dir[256];
    snprintf(outside_dir, sizeof outside_dir, "%s/outside", x->root);
    host_symlink(x, "/etc", "user-data/workspace/etc-link");
    host_symlink(x, "/", "user-data/workspace/slash");
    host_symlink(x, outside_dir, "user-data/workspace/out-abs");
    host_symlink(x, "../../outside", "user-data/workspace/out-rel");
    host_symlink(x, ".", "user-data/workspace/self");
    json_t *o = glob_ok(x, "**/passwd", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 0);
    json_decref(o);
    o = glob_ok(x, "**/secret.txt", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 0);
    json_decref(o);
    /* The links are entries themselves (never entered). */
    o = glob_ok(x, "**", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 5);
    assert_false(B(o, "truncated"));
    json_decref(o);
    refused(FAWN_EPERM, box_file_glob, x, J("{s:s, s:s}", "path", WS "/out-abs", "pattern", "*"));
    refused(FAWN_EPERM, box_file_glob, x, J("{s:s, s:s}", "path", WS "/etc-link", "pattern", "*"));
}

static void test_glob_limits(void **state) {
    fx *x = *state;
    char name[64];
    for (int i = 0; i < 30; i++) {
        snprintf(name, sizeof name, "user-data/workspace/f%02d.txt", i);
        host_puts(x, name, "x");
    }
    json_t *o = ok(box_file_glob, x,
                   J("{s:s, s:s, s:i}", "path", WS, "pattern", "*.txt", "max_results", 5));
    const json_t *m = json_object_get(o, "matches");
    assert_int_equal(json_array_size(m), 5);
    assert_string_equal(json_string_value(json_array_get(m, 0)), WS "/f00.txt");
    assert_true(B(o, "truncated"));
    json_decref(o);
    o = ok(box_file_glob, x,
           J("{s:s, s:s, s:i}", "path", WS, "pattern", "*.txt", "max_results", 30));
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 30);
    assert_false(B(o, "truncated"));
    json_decref(o);
    o = ok(box_file_glob, x,
           J("{s:s, s:s, s:i}", "path", WS, "pattern", "*.txt", "max_results", -1));
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 30);
    json_decref(o);
    x->f.limits.glob_max_results = 7;
    o = ok(box_file_glob, x,
           J("{s:s, s:s, s:i}", "path", WS, "pattern", "*.txt", "max_results", 100));
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 7);
    assert_true(B(o, "truncated"));
    json_decref(o);
    o = ok(box_file_glob, x,
           J("{s:s, s:s, s:i}", "path", WS, "pattern", "*.txt", "max_results", 0));
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 7);
    json_decref(o);
}

static void test_glob_bad_patterns(void **state) {
    fx *x = *state;
    const char *bad[] = {"", "/etc/*", "../*", "a/../../*", "."};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        refused(FAWN_EINVAL, box_file_glob, x, J("{s:s, s:s}", "path", WS, "pattern", bad[i]));
    char many[256] = "";
    for (int i = 0; i < 64; i++)
        strcat(many, "a/");
    strcat(many, "b");
    refused(FAWN_EINVAL, box_file_glob, x, J("{s:s, s:s}", "path", WS, "pattern", many));
    refused(FAWN_EINVAL, box_file_glob, x, J("{s:s}", "path", WS));
    refused(FAWN_EINVAL, box_file_glob, x,
            J("{s:s, s:s, s:i}", "path", WS, "pattern", "*", "depth", 3));
    refused(FAWN_EINVAL, box_file_glob, x,
            J("{s:s, s:s}", "path", WS "/../../etc", "pattern", "*"));
}

static void test_glob_depth_bound(void **state) {
    fx *x = *state;
    char rel[1024];
    size_t len = (size_t)snprintf(rel, sizeof rel, "user-data/workspace");
    for (int i = 0; i < 70; i++) {
        len += (size_t)snprintf(rel + len, sizeof rel - len, "/d");
        host_mkdir(x, rel);
        if (i == 10 || i == 69) {
            char file[1100];
            snprintf(file, sizeof file, "%s/deep.txt", rel);
            host_puts(x, file, "needle\n");
        }
    }
    json_t *o = glob_ok(x, "**/deep.txt", false);
    assert_int_equal(json_array_size(json_object_get(o, "matches")), 1);
    assert_true(B(o, "truncated"));
    json_decref(o);
}

/* ---- grep ---- */

static json_t *grep_ok(fx *x, json_t *req) { return ok(box_file_grep, x, req); }

static size_t match_count(const json_t *o) {
    return json_array_size(json_object_get(o, "matches"));
}

static void test_grep_basics(void **state) {
    fx *x = *state;
    make_tree(x);
    host_puts(x, "user-data/workspace/notes.txt", "first\nHello world\nnothing\r\nhello again\r\n");
    host_puts(x, "user-data/workspace/a.c", "int abc;\nint a.c;\n");
    host_puts(x, "user-data/workspace/run.log", "hello from a log\n");
    host_puts(x, "user-data/workspace/node_modules/x.txt", "hello\n");
    json_t *o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "hello"));
    const json_t *m = json_object_get(o, "matches");
    assert_int_equal(json_array_size(m), 3);
    const json_t *first = json_array_get(m, 0);
    assert_string_equal(S(first, "path"), WS "/notes.txt");
    assert_int_equal(I(first, "line"), 2);
    assert_string_equal(S(first, "text"), "Hello world");
    assert_string_equal(S(json_array_get(m, 1), "text"), "hello again");
    assert_int_equal(I(json_array_get(m, 1), "line"), 4);
    assert_string_equal(S(json_array_get(m, 2), "path"), WS "/src/main.py");
    assert_false(B(o, "truncated"));
    json_decref(o);

    o = grep_ok(x, J("{s:s, s:s, s:b}", "path", WS, "pattern", "hello", "case_sensitive", 1));
    assert_int_equal(match_count(o), 2);
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s, s:s}", "path", WS, "pattern", "hello", "glob", "*.py"));
    assert_int_equal(match_count(o), 1);
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s, s:s}", "path", WS, "pattern", "x", "glob", "src/lib/*.py"));
    assert_int_equal(match_count(o), 1);
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "a.c"));
    assert_int_equal(match_count(o), 2);
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s, s:b}", "path", WS, "pattern", "a.c", "literal", 1));
    assert_int_equal(match_count(o), 1);
    assert_int_equal(I(json_array_get(json_object_get(o, "matches"), 0), "line"), 2);
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s, s:b}", "path", WS, "pattern", "(unclosed", "literal", 1));
    assert_int_equal(match_count(o), 0);
    json_decref(o);
    /* A single file as the path. */
    o = grep_ok(x, J("{s:s, s:s}", "path", WS "/notes.txt", "pattern", "^first$"));
    assert_int_equal(match_count(o), 1);
    assert_string_equal(S(json_array_get(json_object_get(o, "matches"), 0), "path"),
                        WS "/notes.txt");
    json_decref(o);
}

static void test_grep_refusals(void **state) {
    fx *x = *state;
    json_t *out = NULL;
    assert_int_equal(
        run(&out, box_file_grep, x, J("{s:s, s:s}", "path", WS, "pattern", "(unclosed")),
        FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "Invalid regex pattern"));
    refused(FAWN_EINVAL, box_file_grep, x, J("{s:s, s:s}", "path", WS, "pattern", ""));
    refused(FAWN_EINVAL, box_file_grep, x,
            J("{s:s, s:s, s:s}", "path", WS, "pattern", "a", "glob", "/abs"));
    refused(FAWN_EINVAL, box_file_grep, x,
            J("{s:s, s:s, s:s}", "path", WS, "pattern", "a", "x", "y"));
    refused(FAWN_EINVAL, box_file_grep, x,
            J("{s:s, s:s}", "path", WS "/../../etc", "pattern", "root"));
    refused(FAWN_EPERM, box_file_grep, x, J("{s:s, s:s}", "path", "/etc", "pattern", "root"));
    assert_int_equal(mkfifoat(x->rootfd, "user-data/workspace/fifo", 0644), 0);
    refused(FAWN_EINVAL, box_file_grep, x, J("{s:s, s:s}", "path", WS "/fifo", "pattern", "x"));
    char *long_pattern = malloc(5000);
    memset(long_pattern, 'a', 4999);
    long_pattern[4999] = '\0';
    refused(FAWN_EINVAL, box_file_grep, x, J("{s:s, s:s}", "path", WS, "pattern", long_pattern));
    free(long_pattern);
}

static void test_grep_skips(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/workspace/small.txt", "needle\n");
    /* 2 MB file: skipped whole. */
    size_t big_n = 2 << 20;
    char *big = malloc(big_n);
    memset(big, 'z', big_n);
    memcpy(big, "needle\n", 7);
    host_put(x, "user-data/workspace/big.txt", big, big_n);
    free(big);
    /* Binary (NUL in the first 8 KiB). */
    host_put(x, "user-data/workspace/bin.dat", "needle\n\0\n", 9);
    /* A line longer than 2000 characters is skipped; other lines of the file are not. */
    char line[3000];
    memset(line, 'y', sizeof line);
    memcpy(line, "needle", 6);
    line[sizeof line - 1] = '\n';
    host_put(x, "user-data/workspace/long.txt", line, sizeof line);
    int fd = openat(x->rootfd, "user-data/workspace/long.txt", O_WRONLY | O_APPEND);
    assert_int_equal(fawn_write_all(fd, "needle short\n", 13), 0);
    close(fd);
    /* Invalid UTF-8 does not break matching; shown text is made valid. */
    host_puts(x, "user-data/workspace/latin1.txt", "caf\xe9 needle\n");
    /* FIFOs in the tree are skipped without blocking. */
    assert_int_equal(mkfifoat(x->rootfd, "user-data/workspace/zz-fifo", 0644), 0);

    json_t *o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "needle"));
    const json_t *m = json_object_get(o, "matches");
    assert_int_equal(json_array_size(m), 3);
    assert_string_equal(S(json_array_get(m, 0), "path"), WS "/latin1.txt");
    assert_string_equal(S(json_array_get(m, 0), "text"), "caf\xef\xbf\xbd needle");
    assert_string_equal(S(json_array_get(m, 1), "path"), WS "/long.txt");
    assert_int_equal(I(json_array_get(m, 1), "line"), 2);
    assert_string_equal(S(json_array_get(m, 2), "path"), WS "/small.txt");
    json_decref(o);
}

static void test_grep_text_cut(void **state) {
    fx *x = *state;
    char line[700];
    memset(line, 'q', sizeof line);
    /* 300 two-byte characters after the match word: cut at 200 characters. */
    size_t n = 0;
    memcpy(line, "match ", 6);
    n = 6;
    for (int i = 0; i < 300; i++, n += 2)
        memcpy(line + n, "\xc3\xa9", 2);
    line[n++] = '\n';
    host_put(x, "user-data/workspace/wide.txt", line, n);
    json_t *o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "match"));
    const char *text = S(json_array_get(json_object_get(o, "matches"), 0), "text");
    assert_int_equal(strlen(text), 6 + 194 * 2 + 3);
    assert_string_equal(text + strlen(text) - 3, "...");
    assert_true(fawn_utf8_valid(text, strlen(text)));
    json_decref(o);
}

static void test_grep_result_limits(void **state) {
    fx *x = *state;
    fbuf b = {0};
    for (int i = 0; i < 700; i++)
        assert_int_equal(fbuf_printf(&b, "hit %d\n", i), 0);
    host_put(x, "user-data/workspace/many.txt", b.data, b.len);
    fbuf_free(&b);
    json_t *o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "hit"));
    assert_int_equal(match_count(o), 100);
    assert_true(B(o, "truncated"));
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s, s:i}", "path", WS, "pattern", "hit", "max_results", 1000));
    assert_int_equal(match_count(o), 500);
    assert_true(B(o, "truncated"));
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s, s:i}", "path", WS, "pattern", "hit 69", "max_results", -5));
    assert_int_equal(match_count(o), 11); /* 69, 690..699 */
    assert_false(B(o, "truncated"));
    json_decref(o);
}

static void test_grep_catastrophic_regex_bounded(void **state) {
    fx *x = *state;
    fbuf b = {0};
    for (int i = 0; i < 40; i++)
        assert_int_equal(fbuf_printf(&b, "%s!\n", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), 0);
    host_put(x, "user-data/workspace/evil.txt", b.data, b.len);
    fbuf_free(&b);
    /* The backtracking limit ended the search, as its note says. */
    json_t *o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "^(a|aa)+$"));
    assert_int_equal(match_count(o), 0);
    assert_true(B(o, "truncated"));
    assert_non_null(strstr(S(o, "note"), "backtracking limit"));
    json_decref(o);
}

static void test_grep_symlinks_not_followed(void **state) {
    fx *x = *state;
    char outside[256], outside_dir[256];
    snprintf(outside, sizeof outside, "%s/outside/secret.txt", x->root);
    snprintf(outside_dir, sizeof outside_dir, "%s/outside", x->root);
    host_symlink(x, outside, "user-data/workspace/abs");
    host_symlink(x, "../../outside/secret.txt", "user-data/workspace/rel");
    host_symlink(x, outside_dir, "user-data/workspace/dir-link");
    host_symlink(x, "/etc", "user-data/workspace/etc");
    json_t *o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "SECRET"));
    assert_int_equal(match_count(o), 0);
    json_decref(o);
    o = grep_ok(x, J("{s:s, s:s}", "path", WS, "pattern", "root"));
    assert_int_equal(match_count(o), 0);
    json_decref(o);
    refused(FAWN_EPERM, box_file_grep, x, J("{s:s, s:s}", "path", WS "/abs", "pattern", "SECRET"));
    refused(FAWN_EPERM, box_file_grep, x, J("{s:s, s:s}", "path", WS "/rel", "pattern", "SECRET"));
    refused(FAWN_EPERM, box_file_grep, x,
            J("{s:s, s:s}", "path", WS "/dir-link", "pattern", "SECRET"));
}

/* ---- upload ---- */

typedef struct mem_reader {
    const char *data;
    size_t len, pos;
    size_t chunk;  /* largest piece handed out per call */
    int fail_code; /* returned once the data runs out, instead of 0 */
    int calls;
} mem_reader;

static ssize_t mem_read(void *ctx, void *buf, size_t n) {
    mem_reader *m = ctx;
    m->calls++;
    if (m->pos == m->len)
        return m->fail_code ? fawn_err(m->fail_code, "peer gone") : 0;
    size_t k = m->len - m->pos;
    if (k > n)
        k = n;
    if (m->chunk && k > m->chunk)
        k = m->chunk;
    memcpy(buf, m->data + m->pos, k);
    m->pos += k;
    return (ssize_t)k;
}

static int upload(json_t **out, fx *x, const char *path, bool overwrite, int64_t length,
                  mem_reader *m) {
    *out = NULL;
    return box_file_upload_stream(out, &x->f, path, overwrite, length, mem_read, m);
}

static void test_upload_happy(void **state) {
    fx *x = *state;
    size_t n = 100000;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i * 7);
    mem_reader m = {.data = data, .len = n, .chunk = 777};
    json_t *o = NULL;
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/sub/data.bin", false, (int64_t)n, &m),
                     0);
    char sha[65];
    fawn_sha256_hex(sha, data, n);
    assert_string_equal(S(o, "sha256"), sha);
    assert_int_equal(I(o, "size"), (json_int_t)n);
    assert_string_equal(S(o, "path"), "/mnt/user-data/uploads/sub/data.bin");
    json_decref(o);
    size_t got_n;
    char *got = host_get(x, "user-data/uploads/sub/data.bin", &got_n);
    assert_int_equal(got_n, n);
    assert_memory_equal(got, data, n);
    free(got);
    assert_int_equal(host_count(x, "user-data/uploads/sub", false), 1);

    /* Empty upload. */
    mem_reader empty = {.data = "", .len = 0};
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/empty", false, 0, &empty), 0);
    assert_int_equal(I(o, "size"), 0);
    json_decref(o);
    free(data);
}

static void test_upload_overwrite(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/uploads/a.txt", "original");
    mem_reader m = {.data = "replacement", .len = 11};
    json_t *o = NULL;
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/a.txt", false, 11, &m), FAWN_EEXIST);
    assert_int_equal(m.calls, 0);
    size_t n;
    char *got = host_get(x, "user-data/uploads/a.txt", &n);
    assert_string_equal(got, "original");
    free(got);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/a.txt", true, 11, &m), 0);
    json_decref(o);
    got = host_get(x, "user-data/uploads/a.txt", &n);
    assert_string_equal(got, "replacement");
    free(got);
    assert_int_equal(host_count(x, "user-data/uploads", false), 1);
}

/* An upload that replaces a file keeps its permission bits; a new one is
 * 0644 whatever the umask (base/fsx.h's staging-file writer). */
static void test_upload_modes(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/uploads/run.sh", "old");
    assert_int_equal(fchmodat(x->rootfd, "user-data/uploads/run.sh", 0750, 0), 0);
    mem_reader m = {.data = "new", .len = 3};
    json_t *o = NULL;
    mode_t was = umask(077);
    int r = upload(&o, x, "/mnt/user-data/uploads/run.sh", true, 3, &m);
    json_decref(o);
    mem_reader fresh = {.data = "new", .len = 3};
    int r2 = upload(&o, x, "/mnt/user-data/uploads/fresh.txt", false, 3, &fresh);
    json_decref(o);
    umask(was);
    assert_int_equal(r, 0);
    assert_int_equal(r2, 0);
    struct stat st;
    assert_int_equal(fstatat(x->rootfd, "user-data/uploads/run.sh", &st, 0), 0);
    assert_int_equal(st.st_mode & 07777, 0750);
    assert_int_equal(fstatat(x->rootfd, "user-data/uploads/fresh.txt", &st, 0), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_int_equal(host_count(x, "user-data/uploads", true), 0);
}

static void test_upload_short_body_leaves_nothing(void **state) {
    fx *x = *state;
    mem_reader m = {.data = "only ten b", .len = 10};
    json_t *o = NULL;
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/cut.bin", false, 100, &m), FAWN_EPROTO);
    assert_null(o);
    mem_reader gone = {.data = "12345", .len = 5, .fail_code = FAWN_ETIMEDOUT};
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/cut.bin", false, 100, &gone),
                     FAWN_ETIMEDOUT);
    /* A failed overwrite keeps the old file. */
    host_puts(x, "user-data/uploads/keep.txt", "keep");
    mem_reader again = {.data = "xx", .len = 2};
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/keep.txt", true, 50, &again),
                     FAWN_EPROTO);
    assert_int_equal(host_count(x, "user-data/uploads", false), 1);
    size_t n;
    char *got = host_get(x, "user-data/uploads/keep.txt", &n);
    assert_string_equal(got, "keep");
    free(got);
}

static void test_upload_refusals(void **state) {
    fx *x = *state;
    mem_reader m = {.data = "data", .len = 4};
    json_t *o = NULL;
    x->f.limits.upload_max_bytes = 3;
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/big", false, 4, &m), FAWN_E2BIG);
    assert_int_equal(m.calls, 0);
    x->f.limits = box_file_limits_default();
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/x", false, -1, &m), FAWN_EINVAL);
    assert_int_equal(upload(&o, x, "/mnt/skills/x", true, 4, &m), FAWN_EPERM);
    assert_int_equal(upload(&o, x, "/mnt/user-data/x", true, 4, &m), FAWN_EPERM);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/../../x", true, 4, &m), FAWN_EINVAL);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/.upload-1.part", true, 4, &m),
                     FAWN_EINVAL);

    char outside[256];
    snprintf(outside, sizeof outside, "%s/outside/secret.txt", x->root);
    host_symlink(x, outside, "user-data/uploads/abs");
    host_symlink(x, "../../outside", "user-data/uploads/dir");
    assert_int_equal(linkat(x->rootfd, "outside/secret.txt", x->rootfd, "user-data/uploads/hl", 0),
                     0);
    assert_int_equal(mkfifoat(x->rootfd, "user-data/uploads/fifo", 0644), 0);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/abs", true, 4, &m), FAWN_EPERM);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/abs", false, 4, &m), FAWN_EPERM);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/dir/new", true, 4, &m), FAWN_EPERM);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/hl", true, 4, &m), FAWN_EPERM);
    assert_int_equal(upload(&o, x, "/mnt/user-data/uploads/fifo", true, 4, &m), FAWN_EINVAL);
    assert_int_equal(m.calls, 0);
    assert_secret_intact(x);
    assert_int_equal(host_count(x, "user-data/uploads", true), 0);
}

/* ---- download ---- */

static int sink_write(void *ctx, const void *data, size_t n) { return fbuf_append(ctx, data, n); }

static void test_download(void **state) {
    fx *x = *state;
    size_t n = 50000;
    char *data = malloc(n);
    for (size_t i = 0; i < n; i++)
        data[i] = (char)(i % 251);
    host_put(x, "user-data/outputs/report.bin", data, n);
    int fd = -1;
    uint64_t size = 0;
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/user-data/outputs/report.bin"),
                     0);
    assert_int_equal(size, n);
    fbuf sink = {0};
    assert_int_equal(box_file_download_copy(fd, size, sink_write, &sink), 0);
    assert_int_equal(sink.len, n);
    assert_memory_equal(sink.data, data, n);
    fbuf_free(&sink);
    /* A file that shrank under the sender is an error, not a short success. */
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    assert_int_equal(box_file_download_copy(fd, size + 10, sink_write, &sink), FAWN_EIO);
    assert_int_equal(sink.len, n);
    fbuf_free(&sink);
    /* Never more than size, even if the file is longer. */
    assert_int_equal(lseek(fd, 0, SEEK_SET), 0);
    assert_int_equal(box_file_download_copy(fd, 10, sink_write, &sink), 0);
    assert_int_equal(sink.len, 10);
    fbuf_free(&sink);
    close(fd);
    free(data);

    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/skills/demo/SKILL.md"), 0);
    close(fd);
}

static void test_download_refusals(void **state) {
    fx *x = *state;
    int fd = -1;
    uint64_t size = 0;
    host_puts(x, "user-data/outputs/r.txt", "12345");
    x->f.limits.download_max_bytes = 4;
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/user-data/outputs/r.txt"),
                     FAWN_E2BIG);
    x->f.limits = box_file_limits_default();
    assert_int_equal(mkfifoat(x->rootfd, "user-data/outputs/fifo", 0644), 0);
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/user-data/outputs/fifo"),
                     FAWN_EINVAL);
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/user-data/outputs"),
                     FAWN_EINVAL);
    host_symlink(x, "/etc/passwd", "user-data/outputs/pw");
    host_symlink(x, "../../outside/secret.txt", "user-data/outputs/sec");
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/user-data/outputs/pw"),
                     FAWN_EPERM);
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/user-data/outputs/sec"),
                     FAWN_EPERM);
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/mnt/user-data/../etc/passwd"),
                     FAWN_EINVAL);
    assert_int_equal(box_file_download_open(&fd, &size, &x->f, "/etc/passwd"), FAWN_EPERM);
    assert_int_equal(fd, -1);
}

static void test_limits_default(void **state) {
    box_file_limits l = box_file_limits_default();
    assert_int_equal(l.read_max_bytes, 1 << 20);
    assert_int_equal(l.write_max_bytes, 10 << 20);
    assert_int_equal(l.upload_max_bytes, 100 << 20);
    assert_int_equal(l.download_max_bytes, 100 << 20);
    assert_int_equal(l.list_max_entries, 1000);
    assert_int_equal(l.glob_max_results, 1000);
    assert_int_equal(l.grep_max_results, 500);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_read_whole_file),
        T(test_read_line_ranges),
        T(test_read_empty_file),
        T(test_read_byte_cap),
        T(test_read_utf8_boundary_cut),
        T(test_read_binary),
        T(test_read_not_regular),
        T(test_read_symlinks),
        T(test_read_path_attacks),
        T(test_read_skills),
        T(test_read_huge_sparse_file_bounded),
        T(test_write_creates_parents),
        T(test_write_atomic_replace),
        T(test_write_append),
        T(test_write_base64),
        T(test_write_size_limit),
        T(test_write_refused_places),
        T(test_write_symlink_attacks),
        T(test_write_hard_link_attack),
        T(test_write_not_regular),
        T(test_list_tree),
        T(test_list_roots_and_errors),
        T(test_list_limits_and_odd_names),
        T(test_glob_patterns),
        T(test_glob_symlinks_not_followed),
        T(test_glob_limits),
        T(test_glob_bad_patterns),
        T(test_glob_depth_bound),
        T(test_grep_basics),
        T(test_grep_refusals),
        T(test_grep_skips),
        T(test_grep_text_cut),
        T(test_grep_result_limits),
        T(test_grep_catastrophic_regex_bounded),
        T(test_grep_symlinks_not_followed),
        T(test_upload_happy),
        T(test_upload_overwrite),
        T(test_upload_modes),
        T(test_upload_short_body_leaves_nothing),
        T(test_upload_refusals),
        T(test_download),
        T(test_download_refusals),
        cmocka_unit_test(test_limits_default),
    };
    return cmocka_run_group_tests_name("files", tests, NULL, NULL);
}
