#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/base.h"
#include "gateway/artifacts.h"
#include "paths/paths.h"
#include "support.h"

/* A test that could block (a FIFO) is killed by SIGALRM after this long. */
#define HANG_GUARD_S 20
/* Saves racing for one file in the concurrency test. */
#define RACERS 8

#define OUT "mnt/user-data/outputs/"
#define TRAVERSAL "Access denied: path traversal detected"
#define ONLY_OUTPUTS "Only files under /mnt/user-data/outputs are allowed"
#define WRONG_SHA "0000000000000000000000000000000000000000000000000000000000000000"

typedef struct fx {
    char root[64];
    int rootfd;
    vpath_roots roots;
} fx;

/* ---- fixture: user-data with its three directories, a skills root, a secret outside ---- */

static void host_mkdir(fx *x, const char *rel) {
    if (mkdirat(x->rootfd, rel, 0755) < 0 && errno != EEXIST)
        fail_msg("mkdir %s: %s", rel, strerror(errno));
}

static void host_put_mode(fx *x, const char *rel, const void *data, size_t n, mode_t mode) {
    int fd = openat(x->rootfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    if (fd < 0)
        fail_msg("create %s: %s", rel, strerror(errno));
    assert_int_equal(fawn_write_all(fd, data, n), 0);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void host_puts(fx *x, const char *rel, const char *text) {
    host_put_mode(x, rel, text, strlen(text), 0644);
}

/* The file's bytes (caller frees), or NULL when it cannot be opened. */
static char *host_get(fx *x, const char *rel, size_t *len) {
    int fd = openat(x->rootfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *out = NULL;
    assert_int_equal(fawn_read_all(&out, len, fd, (size_t)64 << 20), 0);
    close(fd);
    return out;
}

static void check_host_text(fx *x, const char *rel, const char *want) {
    size_t n = 0;
    char *got = host_get(x, rel, &n);
    if (!got)
        fail_msg("%s is missing", rel);
    assert_int_equal(n, strlen(want));
    assert_memory_equal(got, want, n);
    free(got);
}

static void host_symlink(fx *x, const char *target, const char *rel) {
    if (symlinkat(target, x->rootfd, rel) < 0)
        fail_msg("symlink %s: %s", rel, strerror(errno));
}

static size_t host_count_staging(fx *x, const char *rel) {
    int fd = openat(x->rootfd, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    DIR *d = fdopendir(fd);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += vpath_is_staging_name(e->d_name);
    closedir(d);
    return n;
}

static void sha_of(char out[65], const char *text) { fawn_sha256_hex(out, text, strlen(text)); }

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->root, sizeof x->root, "/tmp/fawn-artifacts-XXXXXX");
    if (!x || !mkdtemp(x->root))
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
    x->roots.user_data_fd = openat(x->rootfd, "user-data", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    /* A skills root is present: artifacts must not reach it anyway. */
    x->roots.skills_fd = openat(x->rootfd, "skills", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
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
    close(x->roots.user_data_fd);
    close(x->roots.skills_fd);
    close(x->rootfd);
    nftw(x->root, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(x);
    return 0;
}

/* ---- GET helpers ---- */

/* GETs tail and fails unless it succeeds; the caller closes out->fd (when >= 0). */
static void get_ok(artifact_response *out, fx *x, const char *tail, const char *range,
                   bool download) {
    int r = artifact_get(out, &x->roots, tail, range, download);
    if (r != 0)
        fail_msg("GET %s: %d %s", tail, r, fawn_errmsg());
}

/* Reads the response's body as a sender does, three bytes at a time. */
static void check_body(const artifact_response *res, const char *want) {
    size_t n = strlen(want), got = 0, step = 0;
    assert_int_equal(res->length, n);
    char buf[256];
    assert_true(n < sizeof buf);
    do {
        assert_int_equal(artifact_body_read(&step, res, got, buf + got, 3), 0);
        got += step;
    } while (step > 0);
    assert_int_equal(got, n);
    assert_memory_equal(buf, want, n);
}

/* A refusal: the code, the message fragment, no fd, and no host path in the message. */
static void check_get_refused(fx *x, const char *tail, int code, const char *msg) {
    artifact_response res;
    int r = artifact_get(&res, &x->roots, tail, NULL, false);
    if (r != code)
        fail_msg("GET %s: expected %d, got %d (%s)", tail, code, r, fawn_errmsg());
    assert_int_equal(res.fd, -1);
    if (msg && !strstr(fawn_errmsg(), msg))
        fail_msg("GET %s: expected \"%s\" in \"%s\"", tail, msg, fawn_errmsg());
    if (strstr(fawn_errmsg(), x->root))
        fail_msg("GET %s: host path in \"%s\"", tail, fawn_errmsg());
}

/* ---- GET ---- */

static void test_get_each_root(void **state) {
    fx *x = *state;
    static const char *const dirs[] = {"workspace", "uploads", "outputs"};
    for (size_t i = 0; i < ARRAY_LEN(dirs); i++) {
        char rel[64], tail[96], text[64];
        snprintf(rel, sizeof rel, "user-data/%s/f.txt", dirs[i]);
        snprintf(text, sizeof text, "hello from %s\n", dirs[i]);
        host_puts(x, rel, text);
        snprintf(tail, sizeof tail, "mnt/user-data/%s/f.txt", dirs[i]);
        artifact_response res;
        get_ok(&res, x, tail, NULL, false);
        assert_int_equal(res.status, 200);
        assert_int_equal(res.size, strlen(text));
        assert_int_equal(res.offset, 0);
        assert_string_equal(res.content_range, "");
        check_body(&res, text);
        close(res.fd);
    }
}

static void test_get_nested_and_encoded(void **state) {
    fx *x = *state;
    host_mkdir(x, "user-data/outputs/sub dir");
    host_puts(x, "user-data/outputs/sub dir/caf\xc3\xa9.txt", "nested\n");
    artifact_response res;
    get_ok(&res, x, OUT "sub%20dir/caf%C3%A9.txt", NULL, false);
    check_body(&res, "nested\n");
    close(res.fd);
    /* A leading slash, "." and "//" are normalized away. */
    get_ok(&res, x, "/mnt/user-data//outputs/./sub%20dir/x/../caf%c3%a9.txt", NULL, false);
    check_body(&res, "nested\n");
    close(res.fd);
}

typedef struct type_case {
    const char *name;
    const char *type;
    bool attachment;
} type_case;

static void test_get_content_types(void **state) {
    fx *x = *state;
    static const type_case cases[] = {
        {"a.txt", "text/plain; charset=utf-8", false},
        {"a.md", "text/markdown; charset=utf-8", false},
        {"a.csv", "text/csv; charset=utf-8", false},
        {"a.json", "application/json; charset=utf-8", false},
        {"a.py", "text/x-python; charset=utf-8", false},
        {"a.js", "text/javascript; charset=utf-8", false},
        {"a.css", "text/css; charset=utf-8", false},
        {"a.yaml", "application/yaml; charset=utf-8", false},
        {"a.html", "text/html; charset=utf-8", true},
        {"a.HTM", "text/html; charset=utf-8", true},
        {"a.xhtml", "application/xhtml+xml; charset=utf-8", true},
        {"a.svg", "image/svg+xml; charset=utf-8", true},
        {"a.xml", "application/xml; charset=utf-8", true},
        {"a.pdf", "application/pdf", false},
        {"a.png", "image/png", false},
        {"a.JPG", "image/jpeg", false},
        {"a.jpeg", "image/jpeg", false},
        {"a.gif", "image/gif", false},
        {"a.webp", "image/webp", false},
        {"a.mp3", "audio/mpeg", false},
        {"a.mp4", "video/mp4", false},
        {"a.wav", "audio/wav", false},
        {"a.zip", "application/zip", false},
        {"noext", "application/octet-stream", false},
        {".env", "application/octet-stream", false},
        {"a.unknownext", "application/octet-stream", false},
        {"a.html.txt", "text/plain; charset=utf-8", false},
        {"a.txt.html", "text/html; charset=utf-8", true},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char rel[64], tail[96], want[128];
        snprintf(rel, sizeof rel, "user-data/outputs/%s", cases[i].name);
        host_puts(x, rel, "<x/>");
        snprintf(tail, sizeof tail, OUT "%s", cases[i].name);
        artifact_response res;
        get_ok(&res, x, tail, NULL, false);
        if (strcmp(res.content_type, cases[i].type) != 0)
            fail_msg("%s: type %s, expected %s", cases[i].name, res.content_type, cases[i].type);
        snprintf(want, sizeof want, "%s; filename=\"%s\"; filename*=UTF-8''%s",
                 cases[i].attachment ? "attachment" : "inline", cases[i].name, cases[i].name);
        assert_string_equal(res.content_disposition, want);
        close(res.fd);
    }
}

static void test_get_download_forces_attachment(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/a.txt", "text");
    host_puts(x, "user-data/outputs/p.html", "<script>alert(1)</script>");
    artifact_response res;
    get_ok(&res, x, OUT "a.txt", NULL, true);
    assert_string_equal(res.content_disposition,
                        "attachment; filename=\"a.txt\"; filename*=UTF-8''a.txt");
    close(res.fd);
    get_ok(&res, x, OUT "a.txt", NULL, false);
    assert_string_equal(res.content_disposition,
                        "inline; filename=\"a.txt\"; filename*=UTF-8''a.txt");
    close(res.fd);
    get_ok(&res, x, OUT "p.html", NULL, false);
    assert_string_equal(res.content_disposition,
                        "attachment; filename=\"p.html\"; filename*=UTF-8''p.html");
    close(res.fd);
}

static void test_get_disposition_escapes_names(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/r\xc3\xa9p ort \"x\";%.txt", "x");
    artifact_response res;
    get_ok(&res, x, OUT "r%C3%A9p%20ort%20%22x%22%3B%25.txt", NULL, false);
    assert_string_equal(res.content_disposition,
                        "inline; filename=\"r__p ort _x_;_.txt\"; "
                        "filename*=UTF-8''r%C3%A9p%20ort%20%22x%22%3B%25.txt");
    close(res.fd);
    /* The longest name fits. */
    char name[VPATH_NAME_MAX + 1], rel[VPATH_NAME_MAX + 32], tail[3 * VPATH_NAME_MAX + 32];
    memset(name, '"', VPATH_NAME_MAX);
    name[VPATH_NAME_MAX] = '\0';
    snprintf(rel, sizeof rel, "user-data/outputs/%s", name);
    host_puts(x, rel, "x");
    size_t o = (size_t)snprintf(tail, sizeof tail, OUT);
    for (size_t i = 0; i < VPATH_NAME_MAX; i++)
        o += (size_t)snprintf(tail + o, sizeof tail - o, "%%22");
    get_ok(&res, x, tail, NULL, true);
    assert_int_equal(strlen(res.content_disposition),
                     strlen("attachment; filename=\"\"; filename*=UTF-8''") + 4 * VPATH_NAME_MAX);
    close(res.fd);
}

/* A file truncated while it is being sent: what is left is read, then the
 * read fails, so the sender ends the response short instead of waiting. */
static void test_get_body_of_a_file_that_shrinks(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/s.txt", "0123456789abcdefghijklmnopqrstuvwxyz");
    artifact_response res;
    get_ok(&res, x, OUT "s.txt", "bytes=10-29", false);
    char buf[64];
    size_t n = 0;
    assert_int_equal(artifact_body_read(&n, &res, 0, buf, 4), 0);
    assert_int_equal(n, 4);
    assert_memory_equal(buf, "abcd", 4);
    int fd = openat(x->rootfd, "user-data/outputs/s.txt", O_WRONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, 16), 0);
    close(fd);
    assert_int_equal(artifact_body_read(&n, &res, 4, buf, sizeof buf), 0);
    assert_int_equal(n, 2); /* bytes 14 and 15, the last ones left */
    assert_memory_equal(buf, "ef", 2);
    n = 1;
    assert_int_equal(artifact_body_read(&n, &res, 6, buf, sizeof buf), FAWN_EIO);
    assert_int_equal(n, 0);
    assert_non_null(strstr(fawn_errmsg(), "shrank"));
    /* Past the promised length there is nothing to read, and no error. */
    assert_int_equal(artifact_body_read(&n, &res, 20, buf, sizeof buf), 0);
    assert_int_equal(n, 0);
    close(res.fd);
}

static void test_get_ranges(void **state) {
    fx *x = *state;
    char text[101];
    for (int i = 0; i < 100; i++)
        text[i] = (char)('a' + i % 26);
    text[100] = '\0';
    host_puts(x, "user-data/outputs/r.txt", text);
    artifact_response res;

    get_ok(&res, x, OUT "r.txt", "bytes=10-19", false);
    assert_int_equal(res.status, 206);
    assert_string_equal(res.content_range, "bytes 10-19/100");
    assert_int_equal(res.offset, 10);
    check_body(&res, "klmnopqrst");
    close(res.fd);

    get_ok(&res, x, OUT "r.txt", "bytes=95-", false);
    assert_int_equal(res.status, 206);
    assert_string_equal(res.content_range, "bytes 95-99/100");
    check_body(&res, "rstuv");
    close(res.fd);

    get_ok(&res, x, OUT "r.txt", "bytes=-3", false);
    assert_int_equal(res.status, 206);
    assert_string_equal(res.content_range, "bytes 97-99/100");
    check_body(&res, "tuv");
    close(res.fd);

    get_ok(&res, x, OUT "r.txt", "bytes=100-", false);
    assert_int_equal(res.status, 416);
    assert_int_equal(res.fd, -1);
    assert_int_equal(res.length, 0);
    assert_string_equal(res.content_range, "bytes */100");

    static const char *const ignored[] = {"bytes=0-1,5-6",
                                          "bytes=0-1, 5-6",
                                          "bytes=5-1",
                                          "bytes=abc",
                                          "bytes=",
                                          "items=0-1",
                                          "bytes=+1-2",
                                          "bytes=99999999999999999999-",
                                          "bytes=0-99999999999999999999"};
    for (size_t i = 0; i < ARRAY_LEN(ignored); i++) {
        get_ok(&res, x, OUT "r.txt", ignored[i], false);
        if (res.status != 200)
            fail_msg("%s: status %u, expected 200", ignored[i], res.status);
        assert_int_equal(res.offset, 0);
        assert_int_equal(res.length, 100);
        assert_string_equal(res.content_range, "");
        close(res.fd);
    }
}

static void test_get_empty_file_ranges(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/empty.txt", "");
    artifact_response res;
    get_ok(&res, x, OUT "empty.txt", NULL, false);
    assert_int_equal(res.status, 200);
    assert_int_equal(res.length, 0);
    close(res.fd);
    get_ok(&res, x, OUT "empty.txt", "bytes=0-", false);
    assert_int_equal(res.status, 416);
    assert_string_equal(res.content_range, "bytes */0");
    assert_int_equal(res.fd, -1);
}

static void test_get_refuses_paths(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/ok.txt", "ok");
    host_mkdir(x, "user-data/outputs/sub");
    host_mkdir(x, "user-data/outputs/%2e%2e");
    check_get_refused(x, "mnt/user-data/%2e%2e/%2e%2e/etc/passwd", FAWN_EPERM, TRAVERSAL);
    check_get_refused(x, "mnt/user-data/../../etc/passwd", FAWN_EPERM, TRAVERSAL);
    check_get_refused(x, OUT "%2E%2E/%2E%2E/%2E%2E/outside/secret.txt", FAWN_EPERM, TRAVERSAL);
    check_get_refused(x, "mnt/user-data/outputs%2f..%2f..%2f..%2foutside/secret.txt", FAWN_EPERM,
                      TRAVERSAL);
    check_get_refused(x, "%2e%2e/%2e%2e/etc/passwd", FAWN_EPERM, TRAVERSAL);
    check_get_refused(x, "etc/passwd", FAWN_EINVAL, "Path must start with /mnt/user-data");
    check_get_refused(x, "", FAWN_EINVAL, "Path must start with /mnt/user-data");
    check_get_refused(x, "mnt/user-dataX/outputs/ok.txt", FAWN_EINVAL, "Path must start");
    /* Decoded once: "%252e%252e" names a directory literally called "%2e%2e". */
    check_get_refused(x, OUT "%252e%252e/ok.txt", FAWN_ENOENT,
                      "Artifact not found: /mnt/user-data/outputs/%2e%2e/ok.txt");
    check_get_refused(x, OUT "ok.txt%00.png", FAWN_EINVAL, NULL);
    check_get_refused(x, OUT "ok%2", FAWN_EINVAL, NULL);
    check_get_refused(x, OUT "%ff.txt", FAWN_EINVAL, "UTF-8");
    check_get_refused(x, OUT "a%5c..%5cok.txt", FAWN_EINVAL, NULL);
    check_get_refused(x, OUT "a%0Ab", FAWN_EINVAL, NULL);
    check_get_refused(x, OUT "missing.txt", FAWN_ENOENT,
                      "Artifact not found: /mnt/user-data/outputs/missing.txt");
    check_get_refused(x, OUT "ok.txt/more", FAWN_ENOENT, "Artifact not found");
    check_get_refused(x, "mnt/user-data/outputs", FAWN_EINVAL, "Path is not a file");
    check_get_refused(x, OUT "sub", FAWN_EINVAL, "Path is not a file: /mnt/user-data/outputs/sub");
    check_get_refused(x, "mnt/user-data", FAWN_ENOENT, "Artifact not found");
    check_get_refused(x, "mnt/skills/demo/SKILL.md", FAWN_ENOENT, "Artifact not found");
    check_get_refused(x, "mnt/user-data/outputs/../../skills/demo/SKILL.md", FAWN_EPERM, TRAVERSAL);
    /* Over-long input is refused, not cut. */
    char *longtail = malloc(2 * VPATH_MAX);
    memset(longtail, 'a', 2 * VPATH_MAX - 1);
    longtail[2 * VPATH_MAX - 1] = '\0';
    memcpy(longtail, OUT, strlen(OUT));
    check_get_refused(x, longtail, FAWN_EINVAL, NULL);
    free(longtail);
}

static void test_get_symlinks(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/real.txt", "real\n");
    host_symlink(x, "/etc/passwd", "user-data/outputs/passwd");
    host_symlink(x, "../../outside/secret.txt", "user-data/outputs/secret.txt");
    host_symlink(x, "/etc", "user-data/outputs/etcdir");
    host_symlink(x, "real.txt", "user-data/outputs/alias.txt");
    check_get_refused(x, OUT "passwd", FAWN_EPERM, TRAVERSAL);
    check_get_refused(x, OUT "secret.txt", FAWN_EPERM, TRAVERSAL);
    check_get_refused(x, OUT "etcdir/passwd", FAWN_EPERM, TRAVERSAL);
    /* A symlink that stays inside user-data is followed. */
    artifact_response res;
    get_ok(&res, x, OUT "alias.txt", NULL, false);
    check_body(&res, "real\n");
    close(res.fd);
}

static void test_get_hides_staging_and_special_files(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/.fawn-tmp-0123456789abcdef", "partial");
    host_puts(x, "user-data/uploads/.upload-0123.part", "partial");
    check_get_refused(x, OUT ".fawn-tmp-0123456789abcdef", FAWN_ENOENT, "Artifact not found");
    check_get_refused(x, "mnt/user-data/uploads/.upload-0123.part", FAWN_ENOENT,
                      "Artifact not found");
    /* A FIFO is refused without blocking (the alarm guards against a hang). */
    assert_int_equal(mkfifoat(x->rootfd, "user-data/outputs/pipe", 0644), 0);
    check_get_refused(x, OUT "pipe", FAWN_EINVAL, "Path is not a file");
}

/* ---- Range parsing ---- */

typedef struct range_case {
    const char *header;
    uint64_t size;
    int code;
    uint64_t start, len;
} range_case;

static void test_range_parse(void **state) {
    static const range_case cases[] = {
        {"bytes=0-9", 100, 0, 0, 10},
        {"bytes=90-", 100, 0, 90, 10},
        {"bytes=-10", 100, 0, 90, 10},
        {"bytes=-1000", 100, 0, 0, 100},
        {"bytes=50-1000", 100, 0, 50, 50},
        {"bytes=99-99", 100, 0, 99, 1},
        {"bytes=0-0", 1, 0, 0, 1},
        {"BYTES=1-2", 100, 0, 1, 2},
        {"bytes= 1-2\t", 100, 0, 1, 2},
        {"bytes=007-008", 100, 0, 7, 2},
        {"bytes=0-18446744073709551615", 100, 0, 0, 100},
        {"bytes=-18446744073709551615", 100, 0, 0, 100},
        {"bytes=-1", UINT64_MAX, 0, UINT64_MAX - 1, 1},
        {"bytes=0-", UINT64_MAX, 0, 0, UINT64_MAX},
        {"bytes=100-", 100, FAWN_E2BIG, 0, 0},
        {"bytes=100-200", 100, FAWN_E2BIG, 0, 0},
        {"bytes=-0", 100, FAWN_E2BIG, 0, 0},
        {"bytes=0-", 0, FAWN_E2BIG, 0, 0},
        {"bytes=-5", 0, FAWN_E2BIG, 0, 0},
        {"bytes=18446744073709551615-", 100, FAWN_E2BIG, 0, 0},
        {"bytes=18446744073709551616-", 100, FAWN_ENOENT, 0, 0},
        {"bytes=99999999999999999999-", 100, FAWN_ENOENT, 0, 0},
        {"bytes=0-99999999999999999999", 100, FAWN_ENOENT, 0, 0},
        {"bytes=-99999999999999999999", 100, FAWN_ENOENT, 0, 0},
        {"bytes=0-1,5-6", 100, FAWN_ENOENT, 0, 0},
        {"bytes=0-1,", 100, FAWN_ENOENT, 0, 0},
        {"bytes=,0-1", 100, FAWN_ENOENT, 0, 0},
        {"bytes=5-4", 100, FAWN_ENOENT, 0, 0},
        {"bytes=", 100, FAWN_ENOENT, 0, 0},
        {"bytes=-", 100, FAWN_ENOENT, 0, 0},
        {"bytes=--1", 100, FAWN_ENOENT, 0, 0},
        {"bytes=1", 100, FAWN_ENOENT, 0, 0},
        {"bytes=+1-2", 100, FAWN_ENOENT, 0, 0},
        {"bytes=1-+2", 100, FAWN_ENOENT, 0, 0},
        {"bytes=1 -2", 100, FAWN_ENOENT, 0, 0},
        {"bytes=0x10-", 100, FAWN_ENOENT, 0, 0},
        {"bytes=1-2x", 100, FAWN_ENOENT, 0, 0},
        {"bytes=1.5-2", 100, FAWN_ENOENT, 0, 0},
        {"bytes 0-1", 100, FAWN_ENOENT, 0, 0},
        {"items=0-1", 100, FAWN_ENOENT, 0, 0},
        {"byte=0-1", 100, FAWN_ENOENT, 0, 0},
        {"", 100, FAWN_ENOENT, 0, 0},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        uint64_t start = 7777, len = 7777;
        int r = artifact_range_parse(&start, &len, cases[i].header, cases[i].size);
        if (r != cases[i].code)
            fail_msg("\"%s\" (size %llu): %d, expected %d", cases[i].header,
                     (unsigned long long)cases[i].size, r, cases[i].code);
        if (r == 0 && (start != cases[i].start || len != cases[i].len))
            fail_msg("\"%s\": %llu+%llu, expected %llu+%llu", cases[i].header,
                     (unsigned long long)start, (unsigned long long)len,
                     (unsigned long long)cases[i].start, (unsigned long long)cases[i].len);
        if (r != 0)
            assert_true(start == 0 && len == 0); /* defined, never a stale range */
    }
    uint64_t start = 0, len = 0;
    assert_int_equal(artifact_range_parse(&start, &len, NULL, 100), FAWN_ENOENT);
    /* Long values (leading zeros, padding) are ignored, not scanned forever. */
    char big[1024];
    memset(big, '0', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    memcpy(big, "bytes=", 6);
    big[sizeof big - 2] = '-';
    assert_int_equal(artifact_range_parse(&start, &len, big, 100), FAWN_ENOENT);
}

/* ---- PUT helpers ---- */

static int put(fx *x, const char *tail, const char *content, const char *sha) {
    artifact_put_result res;
    return artifact_put(&res, &x->roots, tail, content, strlen(content), sha);
}

static void check_put_refused(fx *x, const char *tail, const char *content, size_t len,
                              const char *sha, int code, const char *msg) {
    artifact_put_result res;
    int r = artifact_put(&res, &x->roots, tail, content, len, sha);
    if (r != code)
        fail_msg("PUT %s: expected %d, got %d (%s)", tail, code, r, fawn_errmsg());
    if (msg && !strstr(fawn_errmsg(), msg))
        fail_msg("PUT %s: expected \"%s\" in \"%s\"", tail, msg, fawn_errmsg());
    if (strstr(fawn_errmsg(), x->root))
        fail_msg("PUT %s: host path in \"%s\"", tail, fawn_errmsg());
}

/* ---- PUT ---- */

static void test_put_replaces_atomically(void **state) {
    fx *x = *state;
    host_mkdir(x, "user-data/outputs/sub");
    const char *old = "# old notes\n";
    host_put_mode(x, "user-data/outputs/sub/note.md", old, strlen(old), 0640);
    struct stat before, after;
    assert_int_equal(fstatat(x->rootfd, "user-data/outputs/sub/note.md", &before, 0), 0);
    char sha[65];
    sha_of(sha, old);
    const char *fresh = "# new notes \xc3\xa9\xe2\x9c\x93\n";
    artifact_put_result res;
    int r = artifact_put(&res, &x->roots, OUT "sub/n%6Fte.md", fresh, strlen(fresh), sha);
    if (r != 0)
        fail_msg("PUT: %d %s", r, fawn_errmsg());
    assert_string_equal(res.path, "/mnt/user-data/outputs/sub/note.md");
    char want[65];
    sha_of(want, fresh);
    assert_string_equal(res.sha256, want);
    assert_int_equal(res.size, strlen(fresh));
    check_host_text(x, "user-data/outputs/sub/note.md", fresh);
    assert_int_equal(fstatat(x->rootfd, "user-data/outputs/sub/note.md", &after, 0), 0);
    assert_int_equal(after.st_mode & 07777, 0640);
    assert_true(after.st_ino != before.st_ino); /* a new file renamed into place */
    assert_int_equal(host_count_staging(x, "user-data/outputs/sub"), 0);

    /* The next save states the new hash; the old one is now stale. */
    assert_int_equal(put(x, OUT "sub/note.md", "third\n", want), 0);
    assert_int_equal(put(x, OUT "sub/note.md", "fourth\n", sha), FAWN_ESTALE);
    check_host_text(x, "user-data/outputs/sub/note.md", "third\n");
}

static void test_put_empty_and_largest(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/a.txt", "something");
    char sha[65];
    sha_of(sha, "something");
    artifact_put_result res;
    assert_int_equal(artifact_put(&res, &x->roots, OUT "a.txt", "", 0, sha), 0);
    assert_int_equal(res.size, 0);
    sha_of(sha, "");
    assert_string_equal(res.sha256, sha);
    check_host_text(x, "user-data/outputs/a.txt", "");

    char *big = malloc(ARTIFACT_EDIT_MAX_BYTES + 2);
    memset(big, 'a', ARTIFACT_EDIT_MAX_BYTES + 1);
    big[ARTIFACT_EDIT_MAX_BYTES + 1] = '\0';
    check_put_refused(x, OUT "a.txt", big, ARTIFACT_EDIT_MAX_BYTES + 1, sha, FAWN_E2BIG, NULL);
    check_host_text(x, "user-data/outputs/a.txt", "");
    assert_int_equal(artifact_put(&res, &x->roots, OUT "a.txt", big, ARTIFACT_EDIT_MAX_BYTES, sha),
                     0);
    assert_int_equal(res.size, ARTIFACT_EDIT_MAX_BYTES);
    /* A current file over the limit cannot be edited either. */
    host_put_mode(x, "user-data/outputs/huge.txt", big, ARTIFACT_EDIT_MAX_BYTES + 1, 0644);
    char huge_sha[65];
    fawn_sha256_hex(huge_sha, big, ARTIFACT_EDIT_MAX_BYTES + 1);
    check_put_refused(x, OUT "huge.txt", "x", 1, huge_sha, FAWN_E2BIG, NULL);
    free(big);
}

static void test_put_stale_leaves_file(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/a.txt", "current\n");
    char sha[65];
    sha_of(sha, "something else\n");
    check_put_refused(x, OUT "a.txt", "new", 3, sha, FAWN_ESTALE,
                      "Artifact changed since it was opened");
    check_host_text(x, "user-data/outputs/a.txt", "current\n");
    assert_int_equal(host_count_staging(x, "user-data/outputs"), 0);
}

static void test_put_bad_sha(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/a.txt", "current\n");
    static const char *const bad[] = {
        "",
        "abc",
        "000000000000000000000000000000000000000000000000000000000000000",   /* 63 */
        "00000000000000000000000000000000000000000000000000000000000000000", /* 65 */
        "A000000000000000000000000000000000000000000000000000000000000000",  /* uppercase */
        "g000000000000000000000000000000000000000000000000000000000000000",
        " 000000000000000000000000000000000000000000000000000000000000000",
        NULL,
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        check_put_refused(x, OUT "a.txt", "new", 3, bad[i], FAWN_EINVAL, "expected_sha256");
    check_host_text(x, "user-data/outputs/a.txt", "current\n");
}

static void test_put_only_outputs(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/uploads/x.txt", "upload\n");
    host_puts(x, "user-data/workspace/x.txt", "work\n");
    char up[65], ws[65], secret[65];
    sha_of(up, "upload\n");
    sha_of(ws, "work\n");
    sha_of(secret, "TOP SECRET\n");
    check_put_refused(x, "mnt/user-data/uploads/x.txt", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, "mnt/user-data/workspace/x.txt", "n", 1, ws, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, OUT "%2e%2e/uploads/x.txt", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, OUT "..%2Fuploads%2Fx.txt", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, "mnt/user-data/outputs", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, OUT, "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, OUT ".", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, "mnt/user-data/outputsX/a.txt", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, "mnt/skills/demo/SKILL.md", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, "etc/passwd", "n", 1, up, FAWN_EINVAL, ONLY_OUTPUTS);
    check_put_refused(x, "mnt/user-data/../../etc/passwd", "n", 1, WRONG_SHA, FAWN_EPERM,
                      TRAVERSAL);
    check_put_refused(x, OUT "%2e%2e/%2e%2e/outside/secret.txt", "n", 1, secret, FAWN_EPERM,
                      TRAVERSAL);
    check_put_refused(x, OUT "a%00b", "n", 1, up, FAWN_EINVAL, NULL);
    check_host_text(x, "user-data/uploads/x.txt", "upload\n");
    check_host_text(x, "user-data/workspace/x.txt", "work\n");
    check_host_text(x, "outside/secret.txt", "TOP SECRET\n");
}

static void test_put_missing(void **state) {
    fx *x = *state;
    char sha[65];
    sha_of(sha, "");
    check_put_refused(x, OUT "missing.txt", "n", 1, sha, FAWN_ENOENT,
                      "Artifact not found: /mnt/user-data/outputs/missing.txt");
    check_put_refused(x, OUT "nodir/missing.txt", "n", 1, sha, FAWN_ENOENT, "Artifact not found");
    struct stat st;
    assert_int_equal(fstatat(x->rootfd, "user-data/outputs/missing.txt", &st, 0), -1);
    assert_int_equal(fstatat(x->rootfd, "user-data/outputs/nodir", &st, 0), -1);
    /* Staging files are not editable artifacts. */
    host_puts(x, "user-data/outputs/.fawn-tmp-0123456789abcdef", "");
    check_put_refused(x, OUT ".fawn-tmp-0123456789abcdef", "n", 1, sha, FAWN_ENOENT, NULL);
}

static void test_put_refuses_binary(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/a.txt", "text\n");
    char sha[65];
    sha_of(sha, "text\n");
    check_put_refused(x, OUT "a.txt", "a\0b", 3, sha, FAWN_EUNSUP, NULL);
    check_put_refused(x, OUT "a.txt", "\xff\xfe", 2, sha, FAWN_EUNSUP, NULL);
    check_put_refused(x, OUT "a.txt", "\xc0\xaf", 2, sha, FAWN_EUNSUP, NULL); /* overlong '/' */
    check_put_refused(x, OUT "a.txt", "caf\xc3", 4, sha, FAWN_EUNSUP, NULL);  /* cut sequence */
    check_host_text(x, "user-data/outputs/a.txt", "text\n");
    /* A binary current file is not edited as text. */
    host_put_mode(x, "user-data/outputs/b.bin", "text\0more", 9, 0644);
    char bsha[65];
    fawn_sha256_hex(bsha, "text\0more", 9);
    check_put_refused(x, OUT "b.bin", "text", 4, bsha, FAWN_EUNSUP, NULL);
    host_put_mode(x, "user-data/outputs/latin1.txt", "caf\xe9", 4, 0644);
    fawn_sha256_hex(bsha, "caf\xe9", 4);
    check_put_refused(x, OUT "latin1.txt", "text", 4, bsha, FAWN_EUNSUP, NULL);
}

static void test_put_refuses_links_and_specials(void **state) {
    fx *x = *state;
    char secret[65], real[65], sha[65];
    sha_of(secret, "TOP SECRET\n");
    host_puts(x, "user-data/outputs/real.txt", "real\n");
    sha_of(real, "real\n");
    host_symlink(x, "/etc/passwd", "user-data/outputs/passwd");
    host_symlink(x, "../../outside/secret.txt", "user-data/outputs/secret.txt");
    host_symlink(x, "/", "user-data/outputs/rootdir");
    host_symlink(x, "real.txt", "user-data/outputs/alias.txt");
    host_symlink(x, "../uploads", "user-data/outputs/updir");
    host_puts(x, "user-data/uploads/u.txt", "upload\n");
    host_symlink(x, "gone.txt", "user-data/outputs/dangling.txt");
    /* A wrong hash for /etc/passwd: a refusal must come before the hash check. */
    check_put_refused(x, OUT "passwd", "x", 1, WRONG_SHA, FAWN_EPERM, TRAVERSAL);
    check_put_refused(x, OUT "secret.txt", "x", 1, secret, FAWN_EPERM, TRAVERSAL);
    check_put_refused(x, OUT "rootdir/etc/passwd", "x", 1, WRONG_SHA, FAWN_EPERM, TRAVERSAL);
    check_put_refused(x, OUT "alias.txt", "x", 1, real, FAWN_EINVAL, "Symlinked");
    sha_of(sha, "upload\n");
    check_put_refused(x, OUT "updir/u.txt", "x", 1, sha, FAWN_EINVAL, "Symlinked");
    check_put_refused(x, OUT "dangling.txt", "x", 1, sha, FAWN_EINVAL, "Symlinked");
    check_host_text(x, "outside/secret.txt", "TOP SECRET\n");
    check_host_text(x, "user-data/outputs/real.txt", "real\n");
    check_host_text(x, "user-data/uploads/u.txt", "upload\n");
    char target[64];
    ssize_t n = readlinkat(x->rootfd, "user-data/outputs/alias.txt", target, sizeof target);
    assert_int_equal(n, 8);

    /* A hard link: the other name must keep its bytes. */
    host_puts(x, "user-data/workspace/orig.txt", "linked\n");
    assert_int_equal(linkat(x->rootfd, "user-data/workspace/orig.txt", x->rootfd,
                            "user-data/outputs/hard.txt", 0),
                     0);
    sha_of(sha, "linked\n");
    check_put_refused(x, OUT "hard.txt", "x", 1, sha, FAWN_EPERM, "hard links");
    check_host_text(x, "user-data/workspace/orig.txt", "linked\n");
    check_host_text(x, "user-data/outputs/hard.txt", "linked\n");

    host_mkdir(x, "user-data/outputs/dir");
    check_put_refused(x, OUT "dir", "x", 1, sha, FAWN_EINVAL, "Path is not a file");
    assert_int_equal(mkfifoat(x->rootfd, "user-data/outputs/pipe", 0644), 0);
    check_put_refused(x, OUT "pipe", "x", 1, sha, FAWN_EINVAL, "Path is not a file");
    assert_int_equal(host_count_staging(x, "user-data/outputs"), 0);
}

/* flock() is interposed so a test can act in the window between the save
 * opening the file and locking it. */
static fx *hook_fx;
static void (*before_flock)(fx *x);

int flock(int fd, int op) {
    void (*hook)(fx *) = before_flock;
    before_flock = NULL;
    if (hook)
        hook(hook_fx);
    return (int)syscall(SYS_flock, fd, op);
}

/* Another save completes meanwhile: new bytes renamed over the name. */
static void other_save_renames(fx *x) {
    host_puts(x, "user-data/outputs/other.tmp", "other save\n");
    assert_int_equal(
        renameat(x->rootfd, "user-data/outputs/other.tmp", x->rootfd, "user-data/outputs/doc.txt"),
        0);
}

static void test_put_lost_race_is_stale(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/doc.txt", "base\n");
    char sha[65];
    sha_of(sha, "base\n");
    hook_fx = x;
    before_flock = other_save_renames;
    /* The opened file still holds "base\n", but the name no longer refers to it. */
    check_put_refused(x, OUT "doc.txt", "mine\n", 5, sha, FAWN_ESTALE, "changed");
    assert_null(before_flock);
    check_host_text(x, "user-data/outputs/doc.txt", "other save\n");
    assert_int_equal(host_count_staging(x, "user-data/outputs"), 0);
}

static void test_put_locked_is_busy(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/doc.txt", "base\n");
    char sha[65];
    sha_of(sha, "base\n");
    int fd = openat(x->rootfd, "user-data/outputs/doc.txt", O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(flock(fd, LOCK_EX), 0);
    check_put_refused(x, OUT "doc.txt", "mine\n", 5, sha, FAWN_EBUSY, "another request");
    check_host_text(x, "user-data/outputs/doc.txt", "base\n");
    close(fd);
    assert_int_equal(put(x, OUT "doc.txt", "mine\n", sha), 0);
    check_host_text(x, "user-data/outputs/doc.txt", "mine\n");
}

static void test_put_write_failure_leaves_nothing(void **state) {
    fx *x = *state;
    host_puts(x, "user-data/outputs/doc.txt", "base\n");
    char sha[65];
    sha_of(sha, "base\n");
    /* Files may not grow past 2 bytes: writing the staging file fails. */
    struct rlimit saved, tiny = {.rlim_cur = 2, .rlim_max = RLIM_INFINITY};
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &saved), 0);
    tiny.rlim_max = saved.rlim_max;
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &tiny), 0);
    artifact_put_result res;
    int r = artifact_put(&res, &x->roots, OUT "doc.txt", "a longer text\n", 14, sha);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &saved), 0);
    signal(SIGXFSZ, old_handler);
    assert_int_equal(r, FAWN_EIO);
    check_host_text(x, "user-data/outputs/doc.txt", "base\n");
    assert_int_equal(host_count_staging(x, "user-data/outputs"), 0);
}

typedef struct racer {
    fx *x;
    pthread_barrier_t *start;
    const char *sha;
    char content[32];
    int result;
    char message[256];
} racer;

static void *race_put(void *arg) {
    racer *rc = arg;
    pthread_barrier_wait(rc->start);
    artifact_put_result res;
    rc->result = artifact_put(&res, &rc->x->roots, OUT "race.txt", rc->content, strlen(rc->content),
                              rc->sha);
    snprintf(rc->message, sizeof rc->message, "%s", fawn_errmsg());
    return NULL;
}

static void test_put_concurrent_one_wins(void **state) {
    fx *x = *state;
    for (int round = 0; round < 20; round++) {
        host_puts(x, "user-data/outputs/race.txt", "base\n");
        char sha[65];
        sha_of(sha, "base\n");
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, RACERS);
        racer rc[RACERS];
        pthread_t th[RACERS];
        for (int i = 0; i < RACERS; i++) {
            rc[i] = (racer){.x = x, .start = &start, .sha = sha};
            snprintf(rc[i].content, sizeof rc[i].content, "writer %d\n", i);
            assert_int_equal(pthread_create(&th[i], NULL, race_put, &rc[i]), 0);
        }
        int wins = 0, winner = -1;
        for (int i = 0; i < RACERS; i++) {
            pthread_join(th[i], NULL);
            if (rc[i].result == 0) {
                wins++;
                winner = i;
            } else if (rc[i].result != FAWN_ESTALE && rc[i].result != FAWN_EBUSY) {
                fail_msg("racer %d: unexpected %d (%s)", i, rc[i].result, rc[i].message);
            }
        }
        pthread_barrier_destroy(&start);
        assert_int_equal(wins, 1);
        check_host_text(x, "user-data/outputs/race.txt", rc[winner].content);
        assert_int_equal(host_count_staging(x, "user-data/outputs"), 0);
    }
}

/* Refusals still set what they hand out: no descriptor, an empty save
 * result (test_range_parse checks ranges). */
static void test_failures_leave_out_parameters_defined(void **state) {
    fx *x = *state;
    char sha[65];
    sha_of(sha, "");
    artifact_put_result put;
    POISON(put);
    assert_int_equal(artifact_put(&put, &x->roots, OUT "missing.txt", "n", 1, sha), FAWN_ENOENT);
    assert_string_equal(put.path, "");
    assert_int_equal(put.size, 0);
    POISON(put);
    assert_int_equal(artifact_put(&put, &x->roots, OUT "a.txt", "n", 1, "bad"), FAWN_EINVAL);
    assert_string_equal(put.sha256, "");
    artifact_response get;
    POISON(get);
    assert_int_equal(artifact_get(&get, &x->roots, "mnt/user-data/../../etc/passwd", NULL, false),
                     FAWN_EPERM);
    assert_int_equal(get.fd, -1);
}

#define T(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        T(test_get_each_root),
        T(test_get_nested_and_encoded),
        T(test_get_content_types),
        T(test_get_download_forces_attachment),
        T(test_get_disposition_escapes_names),
        T(test_get_ranges),
        T(test_get_body_of_a_file_that_shrinks),
        T(test_get_empty_file_ranges),
        T(test_get_refuses_paths),
        T(test_get_symlinks),
        T(test_get_hides_staging_and_special_files),
        cmocka_unit_test(test_range_parse),
        T(test_put_replaces_atomically),
        T(test_put_empty_and_largest),
        T(test_put_stale_leaves_file),
        T(test_put_bad_sha),
        T(test_put_only_outputs),
        T(test_put_missing),
        T(test_put_refuses_binary),
        T(test_put_refuses_links_and_specials),
        T(test_put_lost_race_is_stale),
        T(test_put_locked_is_busy),
        T(test_put_write_failure_leaves_nothing),
        T(test_put_concurrent_one_wins),
        T(test_failures_leave_out_parameters_defined),
    };
    return cmocka_run_group_tests_name("artifacts", tests, NULL, NULL);
}
