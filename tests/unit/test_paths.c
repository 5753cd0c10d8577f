#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "paths/paths.h"
#include "support.h"

typedef struct parse_case {
    const char *in;
    enum vpath_root root;
    const char *rel;
} parse_case;

static void test_parse_normalizes(void **state) {
    static const parse_case cases[] = {
        {"/mnt/user-data", VPATH_ROOT_USER_DATA, ""},
        {"/mnt/user-data/", VPATH_ROOT_USER_DATA, ""},
        {"/mnt/user-data/workspace", VPATH_ROOT_USER_DATA, "workspace"},
        {"/mnt/user-data/workspace/a/b.txt", VPATH_ROOT_USER_DATA, "workspace/a/b.txt"},
        {"//mnt///user-data//workspace//a//", VPATH_ROOT_USER_DATA, "workspace/a"},
        {"/mnt/./user-data/./workspace/./a", VPATH_ROOT_USER_DATA, "workspace/a"},
        {"/./mnt/user-data/workspace", VPATH_ROOT_USER_DATA, "workspace"},
        {"/mnt/user-data/workspace/a/../b", VPATH_ROOT_USER_DATA, "workspace/b"},
        {"/mnt/user-data/workspace/a/b/../../c", VPATH_ROOT_USER_DATA, "workspace/c"},
        {"/mnt/user-data/workspace/..", VPATH_ROOT_USER_DATA, ""},
        {"/mnt/user-data/workspace/../outputs/x", VPATH_ROOT_USER_DATA, "outputs/x"},
        {"/mnt/user-data/workspace/.hidden", VPATH_ROOT_USER_DATA, "workspace/.hidden"},
        {"/mnt/user-data/workspace/...", VPATH_ROOT_USER_DATA, "workspace/..."},
        {"/mnt/user-data/workspace/..a", VPATH_ROOT_USER_DATA, "workspace/..a"},
        {"/mnt/user-data/workspace/%2e%2e", VPATH_ROOT_USER_DATA, "workspace/%2e%2e"},
        {"/mnt/user-data/workspace/caf\xc3\xa9 \xe2\x9c\x93", VPATH_ROOT_USER_DATA,
         "workspace/caf\xc3\xa9 \xe2\x9c\x93"},
        {"/mnt/skills", VPATH_ROOT_SKILLS, ""},
        {"/mnt/skills/public/pdf/SKILL.md", VPATH_ROOT_SKILLS, "public/pdf/SKILL.md"},
        {"/mnt/skills/a/../b", VPATH_ROOT_SKILLS, "b"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        vpath p;
        int r = vpath_parse(&p, cases[i].in);
        if (r != 0)
            fail_msg("%s: %s", cases[i].in, fawn_errmsg());
        assert_int_equal(p.root, cases[i].root);
        assert_string_equal(p.rel, cases[i].rel);
    }
}

typedef struct refuse_case {
    const char *in;
    int code;
} refuse_case;

static void test_parse_refuses(void **state) {
    static const refuse_case cases[] = {
        {"", FAWN_EINVAL},
        {"mnt/user-data/workspace", FAWN_EINVAL},
        {"workspace/a", FAWN_EINVAL},
        {"/mnt/user-data/../etc/passwd", FAWN_EINVAL},
        {"/mnt/user-data/workspace/../../etc/passwd", FAWN_EINVAL},
        {"/mnt/user-data/workspace/../../../../../../etc/passwd", FAWN_EINVAL},
        {"/mnt/user-data/..", FAWN_EINVAL},
        {"/mnt/skills/..", FAWN_EINVAL},
        {"/mnt/skills/../user-data/workspace", FAWN_EINVAL},
        {"/mnt/user-data/a/../../skills", FAWN_EINVAL},
        {"/", FAWN_EPERM},
        {"/etc/passwd", FAWN_EPERM},
        {"/mnt", FAWN_EPERM},
        {"/mnt/", FAWN_EPERM},
        {"/mnt/other", FAWN_EPERM},
        {"/mnt/user-dataX", FAWN_EPERM},
        {"/mnt/user-dataX/workspace", FAWN_EPERM},
        {"/mnt/user-dat", FAWN_EPERM},
        {"/mnt/skillsX", FAWN_EPERM},
        {"/mnt/USER-DATA/workspace", FAWN_EPERM},
        {"/mnt/../mnt/user-data/workspace", FAWN_EPERM},
        {"/../mnt/user-data/workspace", FAWN_EPERM},
        {"/tmp/mnt/user-data", FAWN_EPERM},
        {"/mnt/user-data/workspace/a\\..\\..\\b", FAWN_EINVAL},
        {"/mnt/user-data/workspace/a\nb", FAWN_EINVAL},
        {"/mnt/user-data/workspace/a\rb", FAWN_EINVAL},
        {"/mnt/user-data/workspace/a\tb", FAWN_EINVAL},
        {"/mnt/user-data/workspace/a\x01", FAWN_EINVAL},
        {"/mnt/user-data/workspace/a\x1f", FAWN_EINVAL},
        {"/mnt/user-data/workspace/a\x7f", FAWN_EINVAL},
        {"/mnt/user-data\\workspace", FAWN_EINVAL},
        {"/etc/\npasswd", FAWN_EINVAL},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        vpath p;
        int r = vpath_parse(&p, cases[i].in);
        if (r != cases[i].code)
            fail_msg("case %zu: got %d, want %d (%s)", i, r, cases[i].code, fawn_errmsg());
        assert_true(fawn_errmsg()[0] != '\0');
    }
}

static void test_parse_nul_truncates_nothing(void **state) {
    /* A C string ends at the NUL, so an embedded NUL cannot smuggle a suffix. */
    static const char raw[] = "/mnt/user-data/workspace/a\0/../../../etc/passwd";
    vpath p;
    assert_int_equal(vpath_parse(&p, raw), 0);
    assert_string_equal(p.rel, "workspace/a");
}

static void fill(char *buf, size_t n, char c) {
    memset(buf, c, n);
    buf[n] = '\0';
}

static void test_parse_lengths(void **state) {
    char name[VPATH_NAME_MAX + 2];
    char path[VPATH_MAX + 64];
    vpath p;
    fill(name, VPATH_NAME_MAX, 'n');
    snprintf(path, sizeof path, "/mnt/user-data/workspace/%s", name);
    assert_int_equal(vpath_parse(&p, path), 0);
    fill(name, VPATH_NAME_MAX + 1, 'n');
    snprintf(path, sizeof path, "/mnt/user-data/workspace/%s", name);
    assert_int_equal(vpath_parse(&p, path), FAWN_EINVAL);

    /* Longest accepted path: VPATH_MAX - 1 bytes. */
    size_t len = 0;
    len += (size_t)snprintf(path, sizeof path, "/mnt/user-data/workspace");
    while (len + 101 <= VPATH_MAX - 1)
        len += (size_t)snprintf(path + len, sizeof path - len, "/%0100d", 0);
    while (len < VPATH_MAX - 1)
        path[len++] = 'x';
    path[len] = '\0';
    assert_int_equal(strlen(path), VPATH_MAX - 1);
    assert_int_equal(vpath_parse(&p, path), 0);
    path[len++] = 'y';
    path[len] = '\0';
    assert_int_equal(vpath_parse(&p, path), FAWN_EINVAL);

    /* A huge input of "/." segments is refused by length, not walked. */
    static char huge[1 << 20];
    memset(huge, '/', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    assert_int_equal(vpath_parse(&p, huge), FAWN_EINVAL);
}

static void test_parse_many_dotdots(void **state) {
    char path[VPATH_MAX];
    size_t len = (size_t)snprintf(path, sizeof path, "/mnt/user-data/workspace");
    for (int i = 0; i < 100; i++)
        len += (size_t)snprintf(path + len, sizeof path - len, "/d");
    for (int i = 0; i < 100; i++)
        len += (size_t)snprintf(path + len, sizeof path - len, "/..");
    vpath p;
    assert_int_equal(vpath_parse(&p, path), 0);
    assert_string_equal(p.rel, "workspace");
    snprintf(path + len, sizeof path - len, "/../..");
    assert_int_equal(vpath_parse(&p, path), FAWN_EINVAL);
}

typedef struct decode_case {
    const char *in;
    const char *out; /* NULL: refused */
} decode_case;

static void test_percent_decode(void **state) {
    static const decode_case cases[] = {
        {"", ""},
        {"plain", "plain"},
        {"%2e%2e", ".."},
        {"%2E%2e%2F", "../"},
        {"%252e", "%2e"},
        {"%25", "%"},
        {"a%20b", "a b"},
        {"a+b", "a+b"},
        {"%c3%a9", "\xc3\xa9"},
        {"%0a", "\n"},
        {"%00", NULL},
        {"a%00b", NULL},
        {"%", NULL},
        {"%2", NULL},
        {"%2g", NULL},
        {"%g2", NULL},
        {"abc%", NULL},
        {"%%", NULL},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char out[64];
        int r = vpath_percent_decode(out, sizeof out, cases[i].in);
        if (cases[i].out) {
            if (r != 0)
                fail_msg("%s: %s", cases[i].in, fawn_errmsg());
            assert_string_equal(out, cases[i].out);
        } else if (r != FAWN_EINVAL) {
            fail_msg("%s: accepted", cases[i].in);
        }
    }
}

static void test_percent_decode_then_parse(void **state) {
    /* Decoding happens once; parsing then sees the dot segments and refuses. */
    char out[VPATH_MAX];
    vpath p;
    assert_int_equal(vpath_percent_decode(out, sizeof out, "/mnt/user-data/%2e%2e/etc/passwd"), 0);
    assert_int_equal(vpath_parse(&p, out), FAWN_EINVAL);
    /* Double-encoded dots stay literal names after one decode. */
    assert_int_equal(vpath_percent_decode(out, sizeof out, "/mnt/user-data/workspace/%252e%252e"),
                     0);
    assert_int_equal(vpath_parse(&p, out), 0);
    assert_string_equal(p.rel, "workspace/%2e%2e");
    assert_int_equal(vpath_percent_decode(out, sizeof out, "/mnt/user-data/workspace/a%5cb"), 0);
    assert_int_equal(vpath_parse(&p, out), FAWN_EINVAL);
    assert_int_equal(vpath_percent_decode(out, sizeof out, "/mnt/user-data/workspace/a%0ab"), 0);
    assert_int_equal(vpath_parse(&p, out), FAWN_EINVAL);
}

static void test_percent_decode_sizes(void **state) {
    char out[4];
    assert_int_equal(vpath_percent_decode(out, sizeof out, "abc"), 0);
    assert_string_equal(out, "abc");
    assert_int_equal(vpath_percent_decode(out, sizeof out, "abcd"), FAWN_EINVAL);
    assert_int_equal(vpath_percent_decode(out, sizeof out, "%41%42%43"), 0);
    assert_string_equal(out, "ABC");
    assert_int_equal(vpath_percent_decode(out, sizeof out, "%41%42%43%44"), FAWN_EINVAL);
    assert_int_equal(vpath_percent_decode(out, 0, ""), FAWN_EINVAL);
    assert_int_equal(vpath_percent_decode(out, 1, ""), 0);
    assert_string_equal(out, "");
}

static void test_in_dir(void **state) {
    vpath p;
    assert_int_equal(vpath_parse(&p, "/mnt/user-data/workspace/a"), 0);
    assert_true(vpath_in_dir(&p, "workspace"));
    assert_false(vpath_in_dir(&p, "outputs"));
    assert_false(vpath_in_dir(&p, "work"));
    assert_false(vpath_in_dir(&p, ""));
    assert_int_equal(vpath_parse(&p, "/mnt/user-data/workspace"), 0);
    assert_true(vpath_in_dir(&p, "workspace"));
    assert_int_equal(vpath_parse(&p, "/mnt/user-data/workspace2/a"), 0);
    assert_false(vpath_in_dir(&p, "workspace"));
    assert_int_equal(vpath_parse(&p, "/mnt/user-data/outputs/../workspace/x"), 0);
    assert_true(vpath_in_dir(&p, "workspace"));
    assert_int_equal(vpath_parse(&p, "/mnt/user-data"), 0);
    assert_false(vpath_in_dir(&p, "workspace"));
    assert_int_equal(vpath_parse(&p, "/mnt/skills/workspace"), 0);
    assert_false(vpath_in_dir(&p, "workspace"));
}

static void test_name_valid(void **state) {
    assert_true(vpath_name_valid("a.txt"));
    assert_true(vpath_name_valid(".hidden"));
    assert_true(vpath_name_valid("..."));
    assert_true(vpath_name_valid("caf\xc3\xa9"));
    assert_false(vpath_name_valid(""));
    assert_false(vpath_name_valid("."));
    assert_false(vpath_name_valid(".."));
    assert_false(vpath_name_valid("a/b"));
    assert_false(vpath_name_valid("a\\b"));
    assert_false(vpath_name_valid("a\nb"));
    assert_false(vpath_name_valid("a\x7f"));
    assert_false(vpath_name_valid("\x1b[31m"));
    char name[VPATH_NAME_MAX + 2];
    fill(name, VPATH_NAME_MAX, 'a');
    assert_true(vpath_name_valid(name));
    fill(name, VPATH_NAME_MAX + 1, 'a');
    assert_false(vpath_name_valid(name));
}

static void test_staging_names(void **state) {
    assert_true(vpath_is_staging_name(".fawn-tmp-0123abcd"));
    assert_true(vpath_is_staging_name(".fawn-tmp-"));
    assert_true(vpath_is_staging_name(".upload-0123.part"));
    assert_true(vpath_is_staging_name(".upload-.part"));
    assert_false(vpath_is_staging_name(".upload-0123"));
    assert_false(vpath_is_staging_name(".upload.part"));
    assert_false(vpath_is_staging_name("upload-1.part"));
    assert_false(vpath_is_staging_name("x.fawn-tmp-1"));
    assert_false(vpath_is_staging_name(".fawn-tmp"));
    assert_false(vpath_is_staging_name("notes.part"));
    assert_false(vpath_is_staging_name(""));
}

/* Failing calls still set their out-parameters: a caller that closes the
 * descriptor or reads the path it got after a failure acts on -1 and "". */
static void failures_leave_out_parameters_defined(void **state) {
    char home[] = "/tmp/fawn-paths-XXXXXX";
    assert_non_null(mkdtemp(home));
    vpath_roots roots = {.user_data_fd = open(home, O_RDONLY | O_DIRECTORY), .skills_fd = -1};
    assert_true(roots.user_data_fd >= 0);
    vpath_target t;
    POISON(t);
    assert_int_equal(vpath_resolve(&t, &roots, "relative/path", false), FAWN_EINVAL);
    assert_int_equal(t.rootfd, -1);
    assert_string_equal(t.vp.rel, "");
    assert_int_equal(vpath_resolve(&t, &roots, "/mnt/user-data/workspace/missing", false), 0);
    int fd;
    struct stat st;
    POISON(fd);
    POISON(st);
    assert_int_equal(vpath_open_regular(&fd, &st, &t), FAWN_ENOENT);
    assert_int_equal(fd, -1);
    assert_int_equal(st.st_size, 0);
    POISON(fd);
    assert_int_equal(vpath_open_dir(&fd, &t), FAWN_ENOENT);
    assert_int_equal(fd, -1);
    POISON(st);
    assert_int_equal(vpath_stat(&st, &t), FAWN_ENOENT);
    assert_int_equal(st.st_mode, 0);
    char decoded[32];
    POISON(decoded);
    assert_int_equal(vpath_percent_decode(decoded, sizeof decoded, "a%zz"), FAWN_EINVAL);
    assert_string_equal(decoded, "");
    vpath vp;
    POISON(vp);
    assert_int_equal(vpath_parse(&vp, "/etc/passwd"), FAWN_EPERM);
    assert_string_equal(vp.rel, "");
    assert_int_equal(vpath_parse(&vp, "/mnt/user-data/workspace/a/../../.."), FAWN_EINVAL);
    assert_string_equal(vp.rel, "");
    close(roots.user_data_fd);
    rmdir(home);
}

/* ---- host layout ---- */

static void test_sandbox_id(void **state) {
    char id[PATHS_SANDBOX_ID_LEN + 1];
    /* sha256("alice:t1") = b076b51a7d6fe4e2... */
    assert_int_equal(paths_sandbox_id(id, "alice", "t1"), 0);
    assert_string_equal(id, "b076b51a7d6fe4e2");
    /* The pair matters in order: "t1:alice" is another sandbox. */
    char other[PATHS_SANDBOX_ID_LEN + 1];
    assert_int_equal(paths_sandbox_id(other, "t1", "alice"), 0);
    assert_string_not_equal(id, other);
    char longest[65], too_long[66];
    memset(longest, 'a', 64);
    longest[64] = '\0';
    memset(too_long, 'a', 65);
    too_long[65] = '\0';
    assert_int_equal(paths_sandbox_id(id, longest, "-_"), 0);
    const char *const bad[] = {"",    "../x", "a/b",  "a b",      ".",     "..",
                               "a:b", "a\\b", "a\nb", "\xc3\xa9", too_long};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        POISON(id);
        assert_int_equal(paths_sandbox_id(id, bad[i], "t"), FAWN_EINVAL);
        assert_string_equal(id, "");
        assert_int_equal(paths_sandbox_id(id, "u", bad[i]), FAWN_EINVAL);
        assert_string_equal(id, "");
    }
}

static void test_user_data_dir(void **state) {
    char dir[PATH_MAX];
    assert_int_equal(paths_user_data_dir(dir, "/srv/fawn", "alice", "t1"), 0);
    assert_string_equal(dir, "/srv/fawn/users/alice/threads/t1/user-data");
    static const char *const bad[] = {"", "../x", "a/b", "..", "x\ny"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        POISON(dir);
        assert_int_equal(paths_user_data_dir(dir, "/srv/fawn", "u", bad[i]), FAWN_EINVAL);
        assert_string_equal(dir, "");
        POISON(dir);
        assert_int_equal(paths_user_data_dir(dir, "/srv/fawn", bad[i], "t"), FAWN_EINVAL);
        assert_string_equal(dir, "");
    }
    /* A home so long that the directory would not fit is refused, not cut. */
    char home[PATH_MAX];
    memset(home, 'h', sizeof home - 1);
    home[0] = '/';
    home[sizeof home - 1] = '\0';
    POISON(dir);
    assert_int_equal(paths_user_data_dir(dir, home, "u", "t"), FAWN_EINVAL);
    assert_string_equal(dir, "");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_normalizes),
        cmocka_unit_test(test_parse_refuses),
        cmocka_unit_test(test_parse_nul_truncates_nothing),
        cmocka_unit_test(test_parse_lengths),
        cmocka_unit_test(test_parse_many_dotdots),
        cmocka_unit_test(test_percent_decode),
        cmocka_unit_test(test_percent_decode_then_parse),
        cmocka_unit_test(test_percent_decode_sizes),
        cmocka_unit_test(test_in_dir),
        cmocka_unit_test(test_name_valid),
        cmocka_unit_test(test_staging_names),
        cmocka_unit_test(failures_leave_out_parameters_defined),
        cmocka_unit_test(test_sandbox_id),
        cmocka_unit_test(test_user_data_dir),
    };
    return cmocka_run_group_tests_name("paths", tests, NULL, NULL);
}
