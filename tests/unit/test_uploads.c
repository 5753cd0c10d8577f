#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "gateway/uploads.h"
#include "support.h"

#define TID "thread-1"
#define OUTSIDE_TEXT "outside, must not change"

typedef struct fx {
    char root[64];
    int rootfd; /* the mkdtemp dir: uploads/ and outside/ */
    int upfd;   /* uploads/ */
} fx;

/* ---- fixture ---- */

/* The limits fawn ships with (config.example.yaml: uploads.*). */
#define TEST_MAX_FILES 10
static const upload_limits limits = {.max_files = TEST_MAX_FILES,
                                     .max_file_size = (uint64_t)50 << 20,
                                     .max_total_size = (uint64_t)100 << 20,
                                     .disk_room = UINT64_MAX};

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    assert_non_null(x);
    strcpy(x->root, "/tmp/fawn-test-uploads-XXXXXX");
    assert_non_null(mkdtemp(x->root));
    x->rootfd = open(x->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(x->rootfd >= 0);
    assert_int_equal(mkdirat(x->rootfd, "uploads", 0755), 0);
    assert_int_equal(mkdirat(x->rootfd, "outside", 0755), 0);
    x->upfd = openat(x->rootfd, "uploads", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(x->upfd >= 0);
    *state = x;
    return 0;
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static int teardown(void **state) {
    fx *x = *state;
    close(x->upfd);
    close(x->rootfd);
    nftw(x->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(x);
    return 0;
}

static void host_put(int dirfd, const char *rel, const char *text) {
    int fd = openat(dirfd, rel, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        fail_msg("create %s: %s", rel, strerror(errno));
    assert_int_equal(fawn_write_all(fd, text, strlen(text)), 0);
    close(fd);
}

/* The file's bytes as a string (caller frees), or NULL when it does not exist. */
static char *host_get(int dirfd, const char *rel) {
    int fd = openat(dirfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return NULL;
    char *data = NULL;
    size_t len = 0;
    assert_int_equal(fawn_read_all(&data, &len, fd, 1 << 20), 0);
    close(fd);
    return data;
}

static void assert_file_text(int dirfd, const char *rel, const char *want) {
    char *got = host_get(dirfd, rel);
    if (!got)
        fail_msg("%s is missing", rel);
    assert_string_equal(got, want);
    free(got);
}

static bool host_exists(int dirfd, const char *rel) {
    struct stat st;
    return fstatat(dirfd, rel, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* Entries in uploads/ other than "." and "..", staging files counted apart. */
static size_t count_entries(fx *x, size_t *staging) {
    int fd = openat(x->upfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fdopendir(fd);
    assert_non_null(d);
    size_t n = 0;
    *staging = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        n++;
        *staging += strncmp(e->d_name, ".upload-", 8) == 0;
    }
    closedir(d);
    return n;
}

static void assert_no_staging(fx *x) {
    size_t staging;
    count_entries(x, &staging);
    assert_int_equal(staging, 0);
}

/* The name of the one staging file in uploads/ (caller frees). */
static char *staging_name(fx *x) {
    int fd = openat(x->upfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fdopendir(fd);
    assert_non_null(d);
    char *name = NULL;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, ".upload-", 8) == 0) {
            assert_null(name);
            name = strdup(e->d_name);
        }
    }
    closedir(d);
    assert_non_null(name);
    return name;
}

typedef struct upfile {
    const char *name;
    const char *data;
} upfile;

/* Uploads files in one request; commits when every call succeeded, else aborts. */
static int upload(fx *x, const upload_limits *lim, const upfile *files, size_t n, json_t **res) {
    upload_batch *b = NULL;
    int r = upload_batch_begin(&b, x->upfd, lim);
    assert_int_equal(r, 0);
    for (size_t i = 0; r == 0 && i < n; i++) {
        r = upload_file_begin(b, files[i].name);
        if (r == 0)
            r = upload_file_write(b, files[i].data, strlen(files[i].data));
        if (r == 0)
            r = upload_file_end(b);
    }
    if (r < 0) {
        upload_batch_abort(b);
        return r;
    }
    return upload_batch_commit(b, res, TID);
}

static json_t *file_at(json_t *res, size_t i) {
    json_t *f = json_array_get(json_object_get(res, "files"), i);
    assert_non_null(f);
    return f;
}

static const char *str_at(json_t *obj, const char *key) {
    const char *s = json_string_value(json_object_get(obj, key));
    if (!s)
        fail_msg("no string %s", key);
    return s;
}

static void assert_skipped(json_t *res, const char *name) {
    assert_false(json_boolean_value(json_object_get(res, "success")));
    json_t *sk = json_object_get(res, "skipped_files");
    assert_int_equal(json_array_size(sk), 1);
    assert_string_equal(json_string_value(json_array_get(sk, 0)), name);
    assert_int_equal(json_array_size(json_object_get(res, "files")), 0);
    assert_non_null(strstr(str_at(res, "message"), "skipped 1 unsafe file(s)"));
}

/* ---- upload ---- */

static void test_two_files(void **state) {
    fx *x = *state;
    upfile in[] = {{"a.txt", "alpha"}, {"notes.md", "# beta\n"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 2, &res), 0);
    assert_true(json_boolean_value(json_object_get(res, "success")));
    assert_string_equal(str_at(res, "message"), "Successfully uploaded 2 file(s)");
    assert_int_equal(json_array_size(json_object_get(res, "skipped_files")), 0);
    json_t *f = file_at(res, 0);
    assert_string_equal(str_at(f, "filename"), "a.txt");
    assert_int_equal(json_integer_value(json_object_get(f, "size")), 5);
    assert_string_equal(str_at(f, "path"), "/mnt/user-data/uploads/a.txt");
    assert_string_equal(str_at(f, "virtual_path"), "/mnt/user-data/uploads/a.txt");
    assert_string_equal(str_at(f, "artifact_url"),
                        "/api/threads/" TID "/artifacts/mnt/user-data/uploads/a.txt");
    assert_null(json_object_get(f, "original_filename"));
    json_decref(res);
    assert_file_text(x->upfd, "a.txt", "alpha");
    assert_file_text(x->upfd, "notes.md", "# beta\n");
    struct stat st;
    assert_int_equal(fstatat(x->upfd, "a.txt", &st, 0), 0);
    assert_int_equal(st.st_mode & 07777, 0644);
    assert_no_staging(x);

    json_t *list = NULL;
    assert_int_equal(uploads_list(&list, x->upfd, TID), 0);
    assert_int_equal(json_integer_value(json_object_get(list, "count")), 2);
    json_t *l0 = file_at(list, 0), *l1 = file_at(list, 1);
    assert_string_equal(str_at(l0, "filename"), "a.txt");
    assert_string_equal(str_at(l0, "extension"), ".txt");
    assert_int_equal(json_integer_value(json_object_get(l0, "size")), 5);
    assert_true(json_is_real(json_object_get(l0, "modified")));
    assert_true(json_real_value(json_object_get(l0, "modified")) > 1e9);
    assert_string_equal(str_at(l0, "virtual_path"), "/mnt/user-data/uploads/a.txt");
    assert_string_equal(str_at(l1, "filename"), "notes.md");
    assert_string_equal(str_at(l1, "extension"), ".md");
    assert_null(json_object_get(list, "truncated"));
    json_decref(list);
}

static void test_chunked_writes(void **state) {
    fx *x = *state;
    char want[3000];
    for (size_t i = 0; i < sizeof want - 1; i++)
        want[i] = (char)('a' + i % 26);
    want[sizeof want - 1] = '\0';
    upload_batch *b = NULL;
    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, "chunks.bin"), 0);
    for (size_t off = 0; off < sizeof want - 1; off += 7) {
        size_t n = sizeof want - 1 - off < 7 ? sizeof want - 1 - off : 7;
        assert_int_equal(upload_file_write(b, want + off, n), 0);
    }
    assert_int_equal(upload_file_write(b, "", 0), 0);
    assert_int_equal(upload_file_end(b), 0);
    json_t *res = NULL;
    assert_int_equal(upload_batch_commit(b, &res, TID), 0);
    assert_int_equal(json_integer_value(json_object_get(file_at(res, 0), "size")), sizeof want - 1);
    json_decref(res);
    assert_file_text(x->upfd, "chunks.bin", want);
    assert_no_staging(x);
}

static void test_duplicate_names(void **state) {
    fx *x = *state;
    upfile in[] = {
        {"a.txt", "1"},          {"dir/a.txt", "2"},      {"a.txt", "3"}, {"a_1.txt", "4"},
        {"archive.tar.gz", "5"}, {"archive.tar.gz", "6"}, {".env", "7"},  {".env", "8"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, ARRAY_LEN(in), &res), 0);
    static const char *const names[] = {"a.txt",     "a_1.txt",        "a_2.txt",
                                        "a_1_1.txt", "archive.tar.gz", "archive.tar_1.gz",
                                        ".env",      ".env_1"};
    for (size_t i = 0; i < ARRAY_LEN(names); i++) {
        json_t *f = file_at(res, i);
        assert_string_equal(str_at(f, "filename"), names[i]);
        json_t *orig = json_object_get(f, "original_filename");
        if (strcmp(names[i], in[i].name) == 0)
            assert_null(orig);
        else
            assert_string_equal(json_string_value(orig), strrchr(in[i].name, '/')
                                                             ? strrchr(in[i].name, '/') + 1
                                                             : in[i].name);
        assert_file_text(x->upfd, names[i], in[i].data);
    }
    assert_string_equal(str_at(file_at(res, 1), "original_filename"), "a.txt");
    json_decref(res);
    assert_no_staging(x);
}

static void test_duplicate_of_longest_name_refused(void **state) {
    fx *x = *state;
    char name[256];
    memset(name, 'n', 255);
    name[255] = '\0';
    upfile in[] = {{name, "1"}, {name, "2"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 2, &res), FAWN_EINVAL);
    assert_false(host_exists(x->upfd, name));
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 0);
}

static void test_traversal_stored_inside(void **state) {
    fx *x = *state;
    upfile in[] = {{"../../etc/passwd", "root:x"}, {"/abs/../../shadow", "s"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 2, &res), 0);
    assert_string_equal(str_at(file_at(res, 0), "filename"), "passwd");
    assert_string_equal(str_at(file_at(res, 1), "filename"), "shadow");
    json_decref(res);
    assert_file_text(x->upfd, "passwd", "root:x");
    assert_file_text(x->upfd, "shadow", "s");
    assert_false(host_exists(x->rootfd, "passwd"));
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 2);
}

static void test_refused_names(void **state) {
    fx *x = *state;
    char longname[300];
    memset(longname, 'x', 256);
    longname[256] = '\0';
    static const char *const bad_fixed[] = {
        "",
        ".",
        "..",
        "a\\b",
        "ok\x01.txt",
        "tab\tname",
        "del\x7f",
        "\xff\xfe.txt",
        "\xc0\xaf",         /* overlong '/' */
        "\xed\xa0\x80.txt", /* surrogate */
        ".upload-x.part",
        ".fawn-tmp-abc",
        "dir/",
        "a/..",
        "x/.",
        "..\\..\\win.ini",
        "esc\x1b[31m.txt",
    };
    for (size_t i = 0; i <= ARRAY_LEN(bad_fixed); i++) {
        const char *name = i < ARRAY_LEN(bad_fixed) ? bad_fixed[i] : longname;
        upfile in[] = {{"good.txt", "good"}, {name, "bad"}};
        json_t *res = NULL;
        int r = upload(x, &limits, in, 2, &res);
        if (r != FAWN_EINVAL)
            fail_msg("name #%zu: got %d, want FAWN_EINVAL", i, r);
        const char *msg = fawn_errmsg();
        assert_non_null(strstr(msg, "Filename"));
        for (const char *p = msg; *p; p++)
            assert_true((unsigned char)*p >= 0x20 && *p != 0x7f);
        size_t staging;
        assert_int_equal(count_entries(x, &staging), 0);
    }
    upfile empty[] = {{"", "x"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, empty, 1, &res), FAWN_EINVAL);
    assert_string_equal(fawn_errmsg(), "Filename is empty");
    upfile ctl[] = {{"a\x01", "x"}};
    assert_int_equal(upload(x, &limits, ctl, 1, &res), FAWN_EINVAL);
    assert_string_equal(fawn_errmsg(), "Filename contains a control character");
}

static void test_unicode_name_and_url(void **state) {
    fx *x = *state;
    upfile in[] = {{"a b#?%\xc3\xa9~.txt", "u"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 1, &res), 0);
    json_t *f = file_at(res, 0);
    assert_string_equal(str_at(f, "virtual_path"), "/mnt/user-data/uploads/a b#?%\xc3\xa9~.txt");
    assert_string_equal(str_at(f, "artifact_url"),
                        "/api/threads/" TID
                        "/artifacts/mnt/user-data/uploads/a%20b%23%3F%25%C3%A9~.txt");
    json_decref(res);
    assert_file_text(x->upfd, "a b#?%\xc3\xa9~.txt", "u");
}

static void test_bad_thread_id(void **state) {
    fx *x = *state;
    upfile in[] = {{"a.txt", "a"}};
    json_t *res = NULL;
    upload_batch *b = NULL;
    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, in[0].name), 0);
    assert_int_equal(upload_file_end(b), 0);
    assert_int_equal(upload_batch_commit(b, &res, "../x"), FAWN_EINVAL);
    assert_null(res);
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 0);
    json_t *list = NULL;
    assert_int_equal(uploads_list(&list, x->upfd, "a/b"), FAWN_EINVAL);
    assert_int_equal(uploads_list(&list, x->upfd, NULL), FAWN_EINVAL);
}

/* ---- unsafe destinations ---- */

static void test_symlink_destination_skipped(void **state) {
    fx *x = *state;
    host_put(x->rootfd, "outside/target", OUTSIDE_TEXT);
    assert_int_equal(symlinkat("../outside/target", x->upfd, "s.txt"), 0);
    upfile in[] = {{"s.txt", "evil"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 1, &res), 0);
    assert_skipped(res, "s.txt");
    json_decref(res);
    assert_file_text(x->rootfd, "outside/target", OUTSIDE_TEXT);
    char link[64] = {0};
    assert_true(readlinkat(x->upfd, "s.txt", link, sizeof link - 1) > 0);
    assert_string_equal(link, "../outside/target");
    assert_no_staging(x);
}

static void test_dangling_symlink_skipped(void **state) {
    fx *x = *state;
    assert_int_equal(symlinkat("../outside/created", x->upfd, "d.txt"), 0);
    upfile in[] = {{"ok.txt", "fine"}, {"d.txt", "evil"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 2, &res), 0);
    assert_false(json_boolean_value(json_object_get(res, "success")));
    assert_int_equal(json_array_size(json_object_get(res, "files")), 1);
    assert_string_equal(str_at(file_at(res, 0), "filename"), "ok.txt");
    assert_string_equal(json_string_value(json_array_get(json_object_get(res, "skipped_files"), 0)),
                        "d.txt");
    assert_string_equal(str_at(res, "message"),
                        "Successfully uploaded 1 file(s); skipped 1 unsafe file(s)");
    json_decref(res);
    assert_false(host_exists(x->rootfd, "outside/created"));
    assert_file_text(x->upfd, "ok.txt", "fine");
    assert_no_staging(x);
}

static void test_hard_link_skipped(void **state) {
    fx *x = *state;
    host_put(x->rootfd, "outside/secret", OUTSIDE_TEXT);
    assert_int_equal(linkat(x->rootfd, "outside/secret", x->upfd, "h.txt", 0), 0);
    upfile in[] = {{"h.txt", "evil"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 1, &res), 0);
    assert_skipped(res, "h.txt");
    json_decref(res);
    assert_file_text(x->rootfd, "outside/secret", OUTSIDE_TEXT);
    assert_file_text(x->upfd, "h.txt", OUTSIDE_TEXT);
    assert_no_staging(x);
}

static void test_directory_destination_skipped(void **state) {
    fx *x = *state;
    assert_int_equal(mkdirat(x->upfd, "dir.txt", 0755), 0);
    upfile in[] = {{"dir.txt", "evil"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 1, &res), 0);
    assert_skipped(res, "dir.txt");
    json_decref(res);
    struct stat st;
    assert_int_equal(fstatat(x->upfd, "dir.txt", &st, AT_SYMLINK_NOFOLLOW), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_no_staging(x);
}

/* A symlink planted after the file arrived but before commit is still caught. */
static void test_symlink_planted_before_commit(void **state) {
    fx *x = *state;
    host_put(x->rootfd, "outside/target", OUTSIDE_TEXT);
    upload_batch *b = NULL;
    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, "late.txt"), 0);
    assert_int_equal(upload_file_write(b, "evil", 4), 0);
    assert_int_equal(upload_file_end(b), 0);
    assert_int_equal(symlinkat("../outside/target", x->upfd, "late.txt"), 0);
    json_t *res = NULL;
    assert_int_equal(upload_batch_commit(b, &res, TID), 0);
    assert_skipped(res, "late.txt");
    json_decref(res);
    assert_file_text(x->rootfd, "outside/target", OUTSIDE_TEXT);
    assert_no_staging(x);
}

/* A staging file swapped for a symlink is not moved into place. */
static void test_staging_swapped_skipped(void **state) {
    fx *x = *state;
    host_put(x->rootfd, "outside/target", OUTSIDE_TEXT);
    upload_batch *b = NULL;
    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, "swap.txt"), 0);
    assert_int_equal(upload_file_write(b, "data", 4), 0);
    assert_int_equal(upload_file_end(b), 0);
    char *staging = staging_name(x);
    assert_int_equal(unlinkat(x->upfd, staging, 0), 0);
    assert_int_equal(symlinkat("../outside/target", x->upfd, staging), 0);
    json_t *res = NULL;
    assert_int_equal(upload_batch_commit(b, &res, TID), 0);
    assert_skipped(res, "swap.txt");
    json_decref(res);
    free(staging);
    assert_false(host_exists(x->upfd, "swap.txt"));
    assert_file_text(x->rootfd, "outside/target", OUTSIDE_TEXT);
}

static void test_existing_file_overwritten(void **state) {
    fx *x = *state;
    host_put(x->upfd, "same.txt", "old bytes");
    upfile in[] = {{"same.txt", "new"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 1, &res), 0);
    assert_true(json_boolean_value(json_object_get(res, "success")));
    json_decref(res);
    assert_file_text(x->upfd, "same.txt", "new");
    assert_no_staging(x);
}

/* A replaced upload keeps the replaced file's permission bits and, as root,
 * its owner (the sandbox user that made it keeps access to it). */
static void test_existing_file_mode_and_owner_kept(void **state) {
    fx *x = *state;
    host_put(x->upfd, "theirs.txt", "old bytes");
    assert_int_equal(fchmodat(x->upfd, "theirs.txt", 0600, 0), 0);
    bool root = geteuid() == 0;
    if (root)
        assert_int_equal(fchownat(x->upfd, "theirs.txt", 65534, 65534, 0), 0);
    upfile in[] = {{"theirs.txt", "new"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &limits, in, 1, &res), 0);
    json_decref(res);
    assert_file_text(x->upfd, "theirs.txt", "new");
    struct stat st;
    assert_int_equal(fstatat(x->upfd, "theirs.txt", &st, 0), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    if (root)
        assert_int_equal(st.st_uid, 65534);
    assert_no_staging(x);
}

/* ---- limits ---- */

static void test_too_many_files(void **state) {
    fx *x = *state;
    upload_limits lim = limits;
    lim.max_files = 2;
    upfile in[] = {{"1.txt", "1"}, {"2.txt", "2"}, {"3.txt", "3"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &lim, in, 3, &res), FAWN_E2BIG);
    assert_string_equal(fawn_errmsg(), "Too many files: maximum is 2");
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 0);

    upfile many[TEST_MAX_FILES + 1];
    for (size_t i = 0; i < ARRAY_LEN(many); i++)
        many[i] = (upfile){"same", "x"};
    assert_int_equal(upload(x, &limits, many, TEST_MAX_FILES, &res), 0);
    json_decref(res);
    assert_int_equal(count_entries(x, &staging), TEST_MAX_FILES);
    assert_int_equal(upload(x, &limits, many, ARRAY_LEN(many), &res), FAWN_E2BIG);
    assert_string_equal(fawn_errmsg(), "Too many files: maximum is 10");
    assert_int_equal(count_entries(x, &staging), TEST_MAX_FILES);
    assert_int_equal(staging, 0);
}

static void test_file_too_large(void **state) {
    fx *x = *state;
    host_put(x->upfd, "big.txt", "old");
    upload_limits lim = limits;
    lim.max_file_size = 10;
    upfile in[] = {{"other.txt", "fine"}, {"big.txt", "0123456789A"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &lim, in, 2, &res), FAWN_E2BIG);
    assert_string_equal(fawn_errmsg(), "File too large: big.txt exceeds 10 bytes");
    assert_file_text(x->upfd, "big.txt", "old");
    assert_false(host_exists(x->upfd, "other.txt"));
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 1);

    upfile exact[] = {{"big.txt", "0123456789"}};
    assert_int_equal(upload(x, &lim, exact, 1, &res), 0);
    json_decref(res);
    assert_file_text(x->upfd, "big.txt", "0123456789");
}

static void test_total_too_large(void **state) {
    fx *x = *state;
    upload_limits lim = limits;
    lim.max_total_size = 10;
    upfile in[] = {{"a.txt", "123456"}, {"b.txt", "123456"}};
    json_t *res = NULL;
    assert_int_equal(upload(x, &lim, in, 2, &res), FAWN_E2BIG);
    assert_string_equal(fawn_errmsg(), "Total upload size too large: maximum is 10 bytes");
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 0);

    /* the failing call itself removes what the batch staged, before any abort */
    upload_batch *b = NULL;
    assert_int_equal(upload_batch_begin(&b, x->upfd, &lim), 0);
    assert_int_equal(upload_file_begin(b, "a.txt"), 0);
    assert_int_equal(upload_file_write(b, "123456", 6), 0);
    assert_int_equal(upload_file_end(b), 0);
    assert_int_equal(upload_file_begin(b, "b.txt"), 0);
    assert_int_equal(upload_file_write(b, "1234", 4), 0);
    assert_int_equal(count_entries(x, &staging), 2);
    assert_int_equal(upload_file_write(b, "5", 1), FAWN_E2BIG);
    assert_int_equal(count_entries(x, &staging), 0);
    assert_int_equal(upload_file_write(b, "5", 1), FAWN_E2BIG);
    assert_string_equal(fawn_errmsg(), "Total upload size too large: maximum is 10 bytes");
    assert_int_equal(upload_batch_commit(b, &res, TID), FAWN_E2BIG);
    assert_string_equal(fawn_errmsg(), "Total upload size too large: maximum is 10 bytes");
    assert_null(res);
}

/* ---- abort and misuse ---- */

static void test_abort_mid_file(void **state) {
    fx *x = *state;
    upload_batch *b = NULL;
    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, "done.txt"), 0);
    assert_int_equal(upload_file_write(b, "complete", 8), 0);
    assert_int_equal(upload_file_end(b), 0);
    assert_int_equal(upload_file_begin(b, "half.txt"), 0);
    assert_int_equal(upload_file_write(b, "hal", 3), 0);
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 2);
    assert_int_equal(staging, 2);
    upload_batch_abort(b);
    assert_int_equal(count_entries(x, &staging), 0);
    upload_batch_abort(NULL);
}

static void test_misuse(void **state) {
    fx *x = *state;
    upload_batch *b = NULL;
    json_t *res = NULL;
    assert_int_equal(upload_batch_begin(&b, -1, &limits), FAWN_EINVAL);
    assert_int_equal(upload_batch_begin(&b, x->upfd, NULL), FAWN_EINVAL);
    upload_limits unlimited = limits;
    unlimited.max_total_size = 0;
    assert_int_equal(upload_batch_begin(&b, x->upfd, &unlimited), FAWN_EINVAL);

    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_batch_commit(b, &res, TID), FAWN_EINVAL);
    assert_string_equal(fawn_errmsg(), "No files provided");

    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_write(b, "x", 1), FAWN_EINVAL);
    /* the batch is spent after an error */
    assert_int_equal(upload_file_begin(b, "a.txt"), FAWN_EINVAL);
    upload_batch_abort(b);

    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, "a.txt"), 0);
    assert_int_equal(upload_file_begin(b, "b.txt"), FAWN_EINVAL);
    upload_batch_abort(b);

    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, "open.txt"), 0);
    assert_int_equal(upload_file_write(b, "x", 1), 0);
    assert_int_equal(upload_batch_commit(b, &res, TID), FAWN_EINVAL);
    assert_null(res);
    size_t staging;
    assert_int_equal(count_entries(x, &staging), 0);

    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    assert_int_equal(upload_file_begin(b, ".."), FAWN_EINVAL);
    assert_int_equal(upload_batch_commit(b, &res, TID), FAWN_EINVAL);
    assert_null(res);
}

/* ---- sweep and listing ---- */

static void test_sweep_and_hidden(void **state) {
    fx *x = *state;
    host_put(x->upfd, ".upload-1234.part", "crash");
    host_put(x->upfd, ".upload-abcd.part", "crash");
    host_put(x->upfd, ".fawn-tmp-x", "box write");
    host_put(x->upfd, "keep.txt", "keep");
    host_put(x->upfd, "noext", "n");
    host_put(x->upfd, "bad\xff.txt", "not utf-8");
    host_put(x->rootfd, "outside/target", OUTSIDE_TEXT);
    assert_int_equal(symlinkat("../outside/target", x->upfd, "link.txt"), 0);
    assert_int_equal(symlinkat("../outside/target", x->upfd, ".upload-link.part"), 0);
    assert_int_equal(mkdirat(x->upfd, ".upload-dir.part", 0755), 0);
    assert_int_equal(mkdirat(x->upfd, "subdir", 0755), 0);
    assert_int_equal(mkfifoat(x->upfd, "fifo", 0644), 0);

    json_t *list = NULL;
    assert_int_equal(uploads_list(&list, x->upfd, TID), 0);
    assert_int_equal(json_integer_value(json_object_get(list, "count")), 2);
    assert_string_equal(str_at(file_at(list, 0), "filename"), "keep.txt");
    assert_string_equal(str_at(file_at(list, 1), "filename"), "noext");
    assert_string_equal(str_at(file_at(list, 1), "extension"), "");
    json_decref(list);

    size_t removed = 99;
    assert_int_equal(uploads_sweep_staging(x->upfd, &removed), 0);
    assert_int_equal(removed, 2);
    assert_false(host_exists(x->upfd, ".upload-1234.part"));
    assert_false(host_exists(x->upfd, ".upload-abcd.part"));
    assert_true(host_exists(x->upfd, ".fawn-tmp-x"));
    assert_true(host_exists(x->upfd, ".upload-dir.part"));
    assert_true(host_exists(x->upfd, ".upload-link.part"));
    assert_file_text(x->upfd, "keep.txt", "keep");
    assert_file_text(x->rootfd, "outside/target", OUTSIDE_TEXT);
    assert_int_equal(uploads_sweep_staging(x->upfd, &removed), 0);
    assert_int_equal(removed, 0);
}

static void test_list_empty(void **state) {
    fx *x = *state;
    json_t *list = NULL;
    assert_int_equal(uploads_list(&list, x->upfd, TID), 0);
    assert_int_equal(json_integer_value(json_object_get(list, "count")), 0);
    assert_int_equal(json_array_size(json_object_get(list, "files")), 0);
    json_decref(list);
}

/* A directory flooded with entries is read only up to the scan bound. */
static void test_list_bounded(void **state) {
    fx *x = *state;
    for (int i = 0; i < UPLOADS_SCAN_MAX_ENTRIES + 5; i++) {
        char name[32];
        snprintf(name, sizeof name, "f%05d", i);
        int fd = openat(x->upfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        assert_true(fd >= 0);
        close(fd);
    }
    json_t *list = NULL;
    assert_int_equal(uploads_list(&list, x->upfd, TID), 0);
    assert_true(json_is_true(json_object_get(list, "truncated")));
    json_int_t count = json_integer_value(json_object_get(list, "count"));
    assert_true(count > 0 && count <= UPLOADS_SCAN_MAX_ENTRIES);
    assert_int_equal(json_array_size(json_object_get(list, "files")), count);
    json_decref(list);
}

/* ---- delete ---- */

static void test_delete(void **state) {
    fx *x = *state;
    host_put(x->upfd, "gone.txt", "bye");
    assert_int_equal(uploads_delete(x->upfd, "gone.txt"), 0);
    assert_false(host_exists(x->upfd, "gone.txt"));

    assert_int_equal(uploads_delete(x->upfd, "gone.txt"), FAWN_ENOENT);
    assert_string_equal(fawn_errmsg(), "File not found: gone.txt");

    host_put(x->rootfd, "outside/target", OUTSIDE_TEXT);
    assert_int_equal(symlinkat("../outside/target", x->upfd, "link.txt"), 0);
    assert_int_equal(uploads_delete(x->upfd, "link.txt"), 0);
    assert_false(host_exists(x->upfd, "link.txt"));
    assert_file_text(x->rootfd, "outside/target", OUTSIDE_TEXT);

    host_put(x->upfd, "victim", "v");
    static const char *const bad[] = {
        "../outside/target", "sub/victim", "/victim", "..", ".", "", "a\\b", "v\x01",
        ".upload-x.part",    "\xff"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        if (uploads_delete(x->upfd, bad[i]) != FAWN_EINVAL)
            fail_msg("delete of bad name #%zu not refused", i);
    }
    assert_file_text(x->rootfd, "outside/target", OUTSIDE_TEXT);
    assert_file_text(x->upfd, "victim", "v");

    assert_int_equal(mkdirat(x->upfd, "adir", 0755), 0);
    assert_int_equal(uploads_delete(x->upfd, "adir"), FAWN_EINVAL);
    assert_true(host_exists(x->upfd, "adir"));
}

/* Refused calls still set what they hand out, so a caller that frees or
 * decrefs it afterwards acts on NULL. */
static void test_failures_leave_out_parameters_defined(void **state) {
    fx *x = *state;
    upload_batch *b;
    POISON(b);
    assert_int_equal(upload_batch_begin(&b, -1, &limits), FAWN_EINVAL);
    assert_null(b);
    upload_batch_abort(b);
    json_t *out;
    POISON(out);
    assert_int_equal(uploads_list(&out, x->upfd, "../t"), FAWN_EINVAL);
    assert_null(out);
    json_decref(out);
    POISON(out);
    assert_int_equal(upload_batch_commit(NULL, &out, TID), FAWN_EINVAL);
    assert_null(out);
    assert_int_equal(upload_batch_begin(&b, x->upfd, &limits), 0);
    POISON(out);
    assert_int_equal(upload_batch_commit(b, &out, TID), FAWN_EINVAL); /* no files */
    assert_null(out);
}

int main(void) {
    const struct CMUnitTest tests[] = {
#define T(f) cmocka_unit_test_setup_teardown(f, setup, teardown)
        T(test_two_files),
        T(test_chunked_writes),
        T(test_duplicate_names),
        T(test_duplicate_of_longest_name_refused),
        T(test_traversal_stored_inside),
        T(test_refused_names),
        T(test_unicode_name_and_url),
        T(test_bad_thread_id),
        T(test_symlink_destination_skipped),
        T(test_dangling_symlink_skipped),
        T(test_hard_link_skipped),
        T(test_directory_destination_skipped),
        T(test_symlink_planted_before_commit),
        T(test_staging_swapped_skipped),
        T(test_existing_file_overwritten),
        T(test_existing_file_mode_and_owner_kept),
        T(test_too_many_files),
        T(test_file_too_large),
        T(test_total_too_large),
        T(test_abort_mid_file),
        T(test_misuse),
        T(test_sweep_and_hidden),
        T(test_list_empty),
        T(test_list_bounded),
        T(test_delete),
        T(test_failures_leave_out_parameters_defined),
#undef T
    };
    return cmocka_run_group_tests_name("uploads", tests, NULL, NULL);
}
