/* base: buffers, reading with limits, ids, hashing, errors, UTF-8, the JSON
 * helpers that validate untrusted bodies, kernel-enforced confinement of
 * paths (fsx) against symlinks, ".." and absolute paths, and the
 * staging-file writer (modes, owners, crashes, planted symlinks, a full
 * disk). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <dirent.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "base/fsx.h"
#include "base/json.h"

#define REPLACEMENT "\xEF\xBF\xBD"

/* ---- fbuf ---- */

static void test_fbuf_append_and_limit(void **state) {
    fbuf b = {.limit = 8};
    assert_int_equal(fbuf_append(&b, "abcd", 4), 0);
    assert_int_equal(b.len, 4);
    assert_string_equal(b.data, "abcd");
    assert_int_equal(fbuf_append(&b, "efgh", 4), 0);
    assert_string_equal(b.data, "abcdefgh");
    /* One byte over the limit: refused, the buffer is unchanged. */
    assert_int_equal(fbuf_append(&b, "i", 1), FAWN_E2BIG);
    assert_int_equal(b.len, 8);
    assert_string_equal(b.data, "abcdefgh");
    assert_int_equal(fbuf_append(&b, "", 0), 0);
    assert_int_equal(fbuf_printf(&b, "%s", "x"), FAWN_E2BIG);
    assert_string_equal(b.data, "abcdefgh");
    fbuf_free(&b);
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.limit, 8);
    /* An append larger than the limit on an empty buffer, and a size that would overflow. */
    assert_int_equal(fbuf_append(&b, "0123456789", 10), FAWN_E2BIG);
    assert_int_equal(fbuf_append(&b, "x", SIZE_MAX), FAWN_E2BIG);
    assert_null(b.data);
    /* Binary data with NUL bytes is kept, and stays NUL-terminated. */
    fbuf bin = {0};
    assert_int_equal(fbuf_append(&bin, "a\0b", 3), 0);
    assert_int_equal(bin.len, 3);
    assert_memory_equal(bin.data, "a\0b\0", 4);
    fbuf_free(&bin);
}

static void test_fbuf_printf_and_growth(void **state) {
    fbuf b = {0};
    assert_int_equal(fbuf_printf(&b, "%d-%s", 42, "x"), 0);
    assert_int_equal(fbuf_printf(&b, "%c", '!'), 0);
    assert_string_equal(b.data, "42-x!");
    assert_int_equal(b.len, 5);
    assert_int_equal(fbuf_printf(&b, "%s", ""), 0);
    assert_int_equal(b.len, 5);
    /* Many appends grow the storage; the content is intact. */
    for (int i = 0; i < 5000; i++)
        assert_int_equal(fbuf_printf(&b, "%04d", i % 10000), 0);
    assert_int_equal(b.len, 5 + 5000 * 4);
    assert_memory_equal(b.data + 5 + 4999 * 4, "4999", 4);
    assert_true(b.cap > b.len);
    assert_int_equal(b.data[b.len], '\0');
    fbuf_free(&b);
    /* The printf limit counts the formatted length exactly. */
    fbuf lim = {.limit = 5};
    assert_int_equal(fbuf_printf(&lim, "%s", "12345"), 0);
    assert_int_equal(fbuf_printf(&lim, "%s", "6"), FAWN_E2BIG);
    assert_string_equal(lim.data, "12345");
    fbuf_free(&lim);
}

static void test_fbuf_steal(void **state) {
    fbuf b = {0};
    char *s = fbuf_steal(&b);
    assert_non_null(s);
    assert_string_equal(s, "");
    assert_null(b.data);
    free(s);
    assert_int_equal(fbuf_append(&b, "data", 4), 0);
    s = fbuf_steal(&b);
    assert_string_equal(s, "data");
    assert_null(b.data);
    assert_int_equal(b.len, 0);
    assert_int_equal(b.cap, 0);
    free(s);
    /* The buffer is usable again after a steal. */
    assert_int_equal(fbuf_append(&b, "again", 5), 0);
    assert_string_equal(b.data, "again");
    fbuf_free(&b);
    /* A buffer that refused its first append still steals as "". */
    fbuf tiny = {.limit = 1};
    assert_int_equal(fbuf_append(&tiny, "ab", 2), FAWN_E2BIG);
    s = fbuf_steal(&tiny);
    assert_non_null(s);
    assert_string_equal(s, "");
    free(s);
}

/* ---- fawn_read_all / fawn_write_all ---- */

/* A pipe holding n bytes of c, write end closed. */
static int pipe_with(size_t n, char c) {
    int p[2];
    assert_int_equal(pipe2(p, O_CLOEXEC), 0);
    assert_int_equal(fcntl(p[1], F_SETPIPE_SZ, 1 << 20) >= (int)n, 1);
    char *data = malloc(n ? n : 1);
    memset(data, c, n);
    assert_int_equal(fawn_write_all(p[1], data, n), 0);
    free(data);
    close(p[1]);
    return p[0];
}

static void test_read_all_limits(void **state) {
    char *out = NULL;
    size_t len = 99;
    int fd = pipe_with(0, 'x');
    assert_int_equal(fawn_read_all(&out, &len, fd, 10), 0);
    assert_int_equal(len, 0);
    assert_string_equal(out, "");
    free(out);
    close(fd);
    fd = pipe_with(100, 'y');
    assert_int_equal(fawn_read_all(&out, &len, fd, 100), 0);
    assert_int_equal(len, 100);
    assert_int_equal(strlen(out), 100);
    free(out);
    close(fd);
    /* One byte over: E2BIG, nothing handed out. */
    fd = pipe_with(101, 'z');
    out = NULL;
    assert_int_equal(fawn_read_all(&out, &len, fd, 100), FAWN_E2BIG);
    assert_null(out);
    close(fd);
    /* More than one read chunk. */
    fd = pipe_with(100000, 'w');
    assert_int_equal(fawn_read_all(&out, NULL, fd, 200000), 0);
    assert_int_equal(strlen(out), 100000);
    free(out);
    close(fd);
    fd = pipe_with(100000, 'v');
    assert_int_equal(fawn_read_all(&out, &len, fd, 99999), FAWN_E2BIG);
    close(fd);
    /* A descriptor that cannot be read. */
    assert_int_equal(fawn_read_all(&out, &len, -1, 10), FAWN_EIO);
    int wfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
    assert_int_equal(fawn_read_all(&out, &len, wfd, 10), FAWN_EIO);
    close(wfd);
    assert_int_equal(fawn_write_all(-1, "x", 1), FAWN_EIO);
}

/* ---- ids, hashing, random, errors ---- */

static void test_id_valid(void **state) {
    char longest[65], too_long[66];
    memset(longest, 'Z', 64);
    longest[64] = '\0';
    memset(too_long, '9', 65);
    too_long[65] = '\0';
    const char *const good[] = {"a", "A", "0", "-", "_", "--", "a-b_C9", longest};
    const char *const bad[] = {"",     ".",     "..",   "a.b", "a/b",   "../x",
                               "a b",  "a\tb",  "a\nb", "a:b", "a\\b",  "\xc3\xa9",
                               "a%2f", "a\x7f", "a+b",  "~",   too_long};
    for (size_t i = 0; i < ARRAY_LEN(good); i++)
        assert_true(fawn_id_valid(good[i]));
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        if (fawn_id_valid(bad[i]))
            fail_msg("\"%s\" must not be a valid id", bad[i]);
}

static void test_sha256_vectors(void **state) {
    char hex[65];
    fawn_sha256_hex(hex, "", 0);
    assert_string_equal(hex, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    fawn_sha256_hex(hex, "abc", 3);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    static const char two_blocks[] = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    fawn_sha256_hex(hex, two_blocks, strlen(two_blocks));
    assert_string_equal(hex, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    /* Bytes after the length do not count; NUL bytes inside do. */
    fawn_sha256_hex(hex, "abcdef", 3);
    assert_string_equal(hex, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    char with_nul[65];
    fawn_sha256_hex(with_nul, "ab\0c", 4);
    assert_string_not_equal(with_nul, hex);
}

static void test_random_hex(void **state) {
    char a[201], b[201];
    a[200] = b[200] = '#';
    fawn_random_hex(a, 100);
    fawn_random_hex(b, 100);
    assert_int_equal(strlen(a), 200);
    assert_string_not_equal(a, b);
    for (size_t i = 0; i < 200; i++)
        assert_non_null(strchr("0123456789abcdef", a[i]));
    char one[3];
    fawn_random_hex(one, 1);
    assert_int_equal(strlen(one), 2);
}

static void test_hex_digit_and_uuid(void **state) {
    assert_int_equal(fawn_hex_digit('0'), 0);
    assert_int_equal(fawn_hex_digit('9'), 9);
    assert_int_equal(fawn_hex_digit('a'), 10);
    assert_int_equal(fawn_hex_digit('F'), 15);
    assert_int_equal(fawn_hex_digit('g'), -1);
    assert_int_equal(fawn_hex_digit('\0'), -1);
    assert_int_equal(fawn_hex_digit((char)0xe9), -1);
    char a[37], b[37];
    fawn_random_uuid(a);
    fawn_random_uuid(b);
    assert_int_equal(strlen(a), 36);
    assert_string_not_equal(a, b);
    assert_true(a[8] == '-' && a[13] == '-' && a[18] == '-' && a[23] == '-');
    assert_int_equal(a[14], '4');           /* version 4 */
    assert_non_null(strchr("89ab", a[19])); /* RFC 4122 variant */
    assert_true(fawn_id_valid(a));          /* usable as a thread id */
}

static void test_errors(void **state) {
    assert_int_equal(fawn_err(FAWN_EINVAL, "bad %s %d", "thing", 7), FAWN_EINVAL);
    assert_string_equal(fawn_errmsg(), "bad thing 7");
    assert_int_equal(fawn_err_sys(FAWN_EIO, ENOENT, "open %s", "/x"), FAWN_EIO);
    char want[128];
    snprintf(want, sizeof want, "open /x: %s", strerror(ENOENT));
    assert_string_equal(fawn_errmsg(), want);
    /* A very long message is cut, not overflowed. */
    char big[4096];
    memset(big, 'm', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    fawn_err(FAWN_EINVAL, "%s", big);
    assert_true(strlen(fawn_errmsg()) < sizeof big - 1);
    assert_true(strlen(fawn_errmsg()) > 100);
    fawn_err_sys(FAWN_EIO, EACCES, "%s", big);
    assert_true(strlen(fawn_errmsg()) < sizeof big - 1);
    assert_string_equal(fawn_strerror(FAWN_EINVAL), "invalid");
    assert_string_equal(fawn_strerror(FAWN_ENOENT), "not_found");
    assert_string_equal(fawn_strerror(FAWN_E2BIG), "too_large");
    assert_string_equal(fawn_strerror(FAWN_EBUSY), "busy");
    assert_string_equal(fawn_strerror(FAWN_OK), "ok");
    assert_string_equal(fawn_strerror(-1000), "error");
    enum fawn_log_level level;
    assert_int_equal(fawn_log_parse_level(&level, "warn"), 0);
    assert_int_equal(level, FAWN_LOG_WARN);
    assert_int_equal(fawn_log_parse_level(&level, "WARN"), FAWN_EINVAL);
    assert_int_equal(fawn_log_parse_level(&level, ""), FAWN_EINVAL);
}

static void test_clocks(void **state) {
    int64_t a = fawn_now_ms(), ua = fawn_now_us();
    usleep(20 * 1000);
    int64_t b = fawn_now_ms(), ub = fawn_now_us();
    assert_true(b - a >= 19);
    assert_true(ub - ua >= 19000);
    assert_true(fawn_wall_ms() > 1600000000000LL);
}

/* ---- UTF-8 ---- */

static void test_utf8_valid(void **state) {
    static const struct {
        const char *s;
        size_t n;
        bool valid;
    } cases[] = {
        {"", 0, true},
        {"plain ascii", 11, true},
        {"\x00", 1, true},                      /* NUL is valid UTF-8 */
        {"\xc3\xa9", 2, true},                  /* é */
        {"\xe2\x82\xac", 3, true},              /* € */
        {"\xf0\x9f\x90\xb1", 4, true},          /* U+1F431 */
        {"\xf4\x8f\xbf\xbf", 4, true},          /* U+10FFFF */
        {"\xef\xbf\xbd", 3, true},              /* U+FFFD */
        {"\xed\x9f\xbf", 3, true},              /* U+D7FF, just below the surrogates */
        {"\xee\x80\x80", 3, true},              /* U+E000, just above */
        {"\xc0\x80", 2, false},                 /* overlong NUL */
        {"\xc1\xbf", 2, false},                 /* overlong */
        {"\xe0\x80\xaf", 3, false},             /* overlong '/' */
        {"\xe0\x9f\xbf", 3, false},             /* overlong, 3 bytes */
        {"\xf0\x80\x80\xaf", 4, false},         /* overlong '/', 4 bytes */
        {"\xf0\x8f\xbf\xbf", 4, false},         /* overlong U+FFFF */
        {"\xed\xa0\x80", 3, false},             /* U+D800 */
        {"\xed\xbf\xbf", 3, false},             /* U+DFFF */
        {"\xed\xa0\xbd\xed\xb2\xa9", 6, false}, /* CESU-8 surrogate pair */
        {"\xf4\x90\x80\x80", 4, false},         /* U+110000 */
        {"\xf5\x80\x80\x80", 4, false},
        {"\xf8\x88\x80\x80\x80", 5, false}, /* 5-byte form */
        {"\xfe", 1, false},
        {"\xff", 1, false},
        {"\x80", 1, false}, /* stray continuation */
        {"a\xbf", 2, false},
        {"\xc3", 1, false}, /* truncated */
        {"\xe2\x82", 2, false},
        {"\xf0\x9f\x90", 3, false},
        {"\xc3\x28", 2, false}, /* bad continuation */
        {"\xe2\x28\xa1", 3, false},
        {"\xf0\x9f\x90\x28", 4, false},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        if (fawn_utf8_valid(cases[i].s, cases[i].n) != cases[i].valid)
            fail_msg("case %zu: expected %s", i, cases[i].valid ? "valid" : "invalid");
    /* The length is what counts: a truncated view of a valid string is invalid. */
    assert_false(fawn_utf8_valid("\xe2\x82\xac", 2));
    assert_true(fawn_utf8_valid("ab\xe2\x82\xac", 2));
}

static void sanitize_is(const char *in, size_t n, const char *want, size_t want_len) {
    fbuf out = {0};
    assert_int_equal(fawn_utf8_sanitize(&out, in, n), 0);
    assert_int_equal(out.len, want_len);
    if (want_len)
        assert_memory_equal(out.data, want, want_len);
    assert_true(fawn_utf8_valid(out.data ? out.data : "", out.len));
    assert_null(memchr(out.data ? out.data : "", '\0', out.len));
    fbuf_free(&out);
}

#define SANITIZE_IS(in, want) sanitize_is(in, sizeof(in) - 1, want, sizeof(want) - 1)

static void test_utf8_sanitize(void **state) {
    SANITIZE_IS("", "");
    SANITIZE_IS("hello", "hello");
    SANITIZE_IS("h\xc3\xa9 \xf0\x9f\x90\xb1", "h\xc3\xa9 \xf0\x9f\x90\xb1");
    /* NUL becomes U+FFFD too: the result can go into a C string. */
    SANITIZE_IS("a\0b", "a" REPLACEMENT "b");
    SANITIZE_IS("\xff", REPLACEMENT);
    SANITIZE_IS("a\xffz", "a" REPLACEMENT "z");
    /* Each byte of an invalid sequence is replaced. */
    SANITIZE_IS("\xc0\x80", REPLACEMENT REPLACEMENT);
    SANITIZE_IS("\xed\xa0\x80", REPLACEMENT REPLACEMENT REPLACEMENT);
    SANITIZE_IS("x\xe2\x82", "x" REPLACEMENT REPLACEMENT);
    /* A valid character right after a bad lead byte survives. */
    SANITIZE_IS("\xe2\xc3\xa9", REPLACEMENT "\xc3\xa9");
    SANITIZE_IS("\xf0\x9f\x90"
                "A",
                REPLACEMENT REPLACEMENT REPLACEMENT "A");
    /* Appends to what the buffer holds. */
    fbuf out = {0};
    assert_int_equal(fbuf_append(&out, "pre:", 4), 0);
    assert_int_equal(fawn_utf8_sanitize(&out, "\x80ok", 3), 0);
    assert_string_equal(out.data, "pre:" REPLACEMENT "ok");
    fbuf_free(&out);
    /* The buffer limit holds: three bytes of garbage need nine of output. */
    fbuf small = {.limit = 8};
    assert_int_equal(fawn_utf8_sanitize(&small, "\xff\xff\xff", 3), FAWN_E2BIG);
    fbuf_free(&small);
    /* Every byte value, alone and in a run: the output is always valid. */
    char all[256];
    for (int i = 0; i < 256; i++) {
        char one = (char)i;
        fbuf o = {0};
        assert_int_equal(fawn_utf8_sanitize(&o, &one, 1), 0);
        assert_true(fawn_utf8_valid(o.data, o.len));
        assert_int_equal(o.len, i > 0 && i < 0x80 ? 1 : 3);
        fbuf_free(&o);
        all[i] = (char)i;
    }
    fbuf o = {0};
    assert_int_equal(fawn_utf8_sanitize(&o, all, sizeof all), 0);
    assert_true(fawn_utf8_valid(o.data, o.len));
    fbuf_free(&o);
}

/* ---- JSON helpers ---- */

static json_t *parse_ok(const char *text) {
    json_t *v = NULL;
    if (fjson_parse_object(&v, text, strlen(text)) < 0)
        fail_msg("%s: %s", text, fawn_errmsg());
    return v;
}

static void test_fjson_parse_object(void **state) {
    json_t *v = parse_ok("{\"a\": 1, \"b\": [true, null]}");
    assert_int_equal(json_object_size(v), 2);
    json_decref(v);
    static const char *const bad[] = {
        "",
        "   ",
        "[]",
        "[{}]",
        "1",
        "\"str\"",
        "null",
        "true",
        "{",
        "{\"a\":}",
        "{\"a\" 1}",
        "{'a': 1}",
        "{\"a\": 1,}",
        "{\"a\": 1} {\"b\": 2}",
        "{\"a\": 1} x",
        "{\"a\": 1, \"a\": 2}",
        "{\"a\": \"\xff\"}",
        "{\"a\": NaN}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        v = NULL;
        if (fjson_parse_object(&v, bad[i], strlen(bad[i])) != FAWN_EINVAL)
            fail_msg("%s must be refused", bad[i]);
        assert_null(v);
        assert_true(strlen(fawn_errmsg()) > 0);
    }
    /* Only len bytes are read: what follows is not part of the body. */
    static const char text[] = "{\"k\": \"v\"}GARBAGE";
    assert_int_equal(fjson_parse_object(&v, text, 10), 0);
    assert_string_equal(json_string_value(json_object_get(v, "k")), "v");
    json_decref(v);
    assert_int_equal(fjson_parse_object(&v, text, 9), FAWN_EINVAL);
    /* An embedded NUL inside the length ends nothing early: it is an error. */
    static const char nul[] = "{\"k\": 1}\0{\"x\": 2}";
    assert_int_equal(fjson_parse_object(&v, nul, sizeof nul - 1), FAWN_EINVAL);
    /* Escaped NUL in a string is refused by the parser. */
    static const char esc_nul[] = "{\"k\": \"a\\u0000b\"}";
    assert_int_equal(fjson_parse_object(&v, esc_nul, sizeof esc_nul - 1), FAWN_EINVAL);
    /* The error names where the parser stopped. */
    assert_int_equal(fjson_parse_object(&v, "{\n\"a\": ?}", 9), FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "line 2"));
}

static void test_fjson_getters(void **state) {
    json_t *o = parse_ok("{\"s\": \"text\", \"n\": 42, \"neg\": -5, \"f\": 1.5, \"b\": true, "
                         "\"z\": null, \"big\": 9223372036854775807, \"arr\": [], "
                         "\"obj\": {}}");
    /* jansson keeps a NUL inside a string when built (or parsed with JSON_ALLOW_NUL). */
    json_object_set_new(o, "nul", json_stringn("a\0b", 3));
    const char *s = "default";
    assert_int_equal(fjson_get_string(&s, o, "missing", false), 0);
    assert_string_equal(s, "default");
    assert_int_equal(fjson_get_string(&s, o, "z", false), 0); /* null reads as absent */
    assert_string_equal(s, "default");
    assert_int_equal(fjson_get_string(&s, o, "missing", true), FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "'missing'"));
    assert_int_equal(fjson_get_string(&s, o, "z", true), FAWN_EINVAL);
    assert_int_equal(fjson_get_string(&s, o, "s", true), 0);
    assert_string_equal(s, "text");
    static const char *const not_strings[] = {"n", "f", "b", "arr", "obj"};
    for (size_t i = 0; i < ARRAY_LEN(not_strings); i++) {
        assert_int_equal(fjson_get_string(&s, o, not_strings[i], false), FAWN_EINVAL);
        assert_non_null(strstr(fawn_errmsg(), not_strings[i]));
    }
    s = "keep";
    assert_int_equal(fjson_get_string(&s, o, "nul", false), FAWN_EINVAL);
    assert_string_equal(s, "keep");

    int64_t n = 7;
    assert_int_equal(fjson_get_int(&n, o, "missing", false, 0, 10), 0);
    assert_int_equal(n, 7);
    assert_int_equal(fjson_get_int(&n, o, "missing", true, 0, 10), FAWN_EINVAL);
    assert_int_equal(fjson_get_int(&n, o, "n", true, 0, 100), 0);
    assert_int_equal(n, 42);
    assert_int_equal(fjson_get_int(&n, o, "n", true, 42, 42), 0);
    assert_int_equal(fjson_get_int(&n, o, "n", true, 43, 100), FAWN_EINVAL);
    assert_int_equal(fjson_get_int(&n, o, "n", true, 0, 41), FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "'n'"));
    assert_int_equal(fjson_get_int(&n, o, "neg", true, 0, 100), FAWN_EINVAL);
    assert_int_equal(fjson_get_int(&n, o, "neg", true, -5, 0), 0);
    assert_int_equal(n, -5);
    assert_int_equal(fjson_get_int(&n, o, "big", true, INT64_MIN, INT64_MAX), 0);
    assert_true(n == INT64_MAX);
    n = 3;
    static const char *const not_ints[] = {"s", "f", "b", "arr", "obj", "nul"};
    for (size_t i = 0; i < ARRAY_LEN(not_ints); i++)
        assert_int_equal(fjson_get_int(&n, o, not_ints[i], false, INT64_MIN, INT64_MAX),
                         FAWN_EINVAL);
    assert_int_equal(n, 3);

    bool b = false;
    assert_int_equal(fjson_get_bool(&b, o, "b", true), 0);
    assert_true(b);
    b = false;
    assert_int_equal(fjson_get_bool(&b, o, "missing", false), 0);
    assert_false(b);
    assert_int_equal(fjson_get_bool(&b, o, "missing", true), FAWN_EINVAL);
    assert_int_equal(fjson_get_bool(&b, o, "n", false), FAWN_EINVAL);
    assert_int_equal(fjson_get_bool(&b, o, "s", false), FAWN_EINVAL);
    json_decref(o);
}

static void test_fjson_check_keys(void **state) {
    static const char *const allowed[] = {"path", "content", "append", NULL};
    static const char *const none[] = {NULL};
    json_t *o = parse_ok("{\"path\": \"/x\", \"append\": true}");
    assert_int_equal(fjson_check_keys(o, allowed), 0);
    assert_int_equal(fjson_check_keys(o, none), FAWN_EINVAL);
    json_decref(o);
    o = parse_ok("{}");
    assert_int_equal(fjson_check_keys(o, allowed), 0);
    assert_int_equal(fjson_check_keys(o, none), 0);
    json_decref(o);
    static const char *const bad[] = {
        "{\"path\": \"/x\", \"Path\": \"/y\"}",
        "{\"pathx\": 1}",
        "{\"pat\": 1}",
        "{\"\": 1}",
        "{\"content \": 1}",
        "{\"append\": 1, \"x\": 2}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        o = parse_ok(bad[i]);
        if (fjson_check_keys(o, allowed) != FAWN_EINVAL)
            fail_msg("%s must be refused", bad[i]);
        assert_non_null(strstr(fawn_errmsg(), "unknown field"));
        json_decref(o);
    }
    /* The message names the key, cut to a sane length. */
    char long_key[400];
    memset(long_key, 'k', sizeof long_key - 1);
    long_key[sizeof long_key - 1] = '\0';
    o = json_pack("{s:i}", long_key, 1);
    assert_int_equal(fjson_check_keys(o, allowed), FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "kkkk"));
    assert_true(strlen(fawn_errmsg()) < 200);
    json_decref(o);
    o = json_pack("{s:s, s:i}", "a", "x\"y", "b", 1);
    char *text = fjson_dump(o);
    assert_true(strcmp(text, "{\"a\":\"x\\\"y\",\"b\":1}") == 0 ||
                strcmp(text, "{\"b\":1,\"a\":\"x\\\"y\"}") == 0);
    free(text);
    json_decref(o);
}

/* ---- fsx: confinement by the kernel ---- */

typedef struct tree {
    char root[64];  /* mkdtemp; holds "outside" and "jail" */
    char jail[128]; /* the directory everything is opened beneath */
    int jail_fd;
} tree;

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    return remove(path);
}

static void put(const char *path, const char *content) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    assert_true(fd >= 0);
    assert_int_equal(fawn_write_all(fd, content, strlen(content)), 0);
    close(fd);
}

static void at(char *out, size_t n, const tree *t, const char *rel) {
    snprintf(out, n, "%s/%s", t->jail, rel);
}

static int tree_setup(void **state) {
    tree *t = calloc(1, sizeof *t);
    snprintf(t->root, sizeof t->root, "/tmp/fawn-base-XXXXXX");
    if (!t || !mkdtemp(t->root))
        return -1;
    char p[256];
    snprintf(p, sizeof p, "%s/outside", t->root);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/outside/secret", t->root);
    put(p, "secret");
    snprintf(t->jail, sizeof t->jail, "%s/jail", t->root);
    mkdir(t->jail, 0755);
    at(p, sizeof p, t, "dir");
    mkdir(p, 0755);
    at(p, sizeof p, t, "dir/file");
    put(p, "inside");
    char target[256];
    snprintf(target, sizeof target, "%s/outside", t->root);
    at(p, sizeof p, t, "abs_out");
    if (symlink(target, p) < 0) /* absolute, leaves the jail */
        return -1;
    at(p, sizeof p, t, "rel_out");
    if (symlink("../outside", p) < 0)
        return -1;
    at(p, sizeof p, t, "dir/deep_out");
    if (symlink("../../outside/secret", p) < 0)
        return -1;
    at(p, sizeof p, t, "in_link");
    if (symlink("dir/file", p) < 0) /* stays inside */
        return -1;
    at(p, sizeof p, t, "dir_link");
    if (symlink("dir", p) < 0)
        return -1;
    at(p, sizeof p, t, "proc_link");
    if (symlink("/proc/self/root", p) < 0)
        return -1;
    at(p, sizeof p, t, "loop");
    if (symlink("loop", p) < 0)
        return -1;
    t->jail_fd = open(t->jail, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    *state = t;
    return t->jail_fd < 0 ? -1 : 0;
}

static int tree_teardown(void **state) {
    tree *t = *state;
    close(t->jail_fd);
    nftw(t->root, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(t);
    return 0;
}

static char *read_fd(int fd) {
    char *data = NULL;
    assert_int_equal(fawn_read_all(&data, NULL, fd, 4096), 0);
    close(fd);
    return data;
}

static void test_fsx_open_inside(void **state) {
    tree *t = *state;
    int fd = fsx_open_beneath(t->jail_fd, "dir/file", O_RDONLY, 0, FSX_NO_SYMLINKS);
    assert_true(fd >= 0);
    char *data = read_fd(fd);
    assert_string_equal(data, "inside");
    free(data);
    /* "" and "." are the directory itself. */
    fd = fsx_open_beneath(t->jail_fd, "", O_RDONLY | O_DIRECTORY, 0, FSX_NO_SYMLINKS);
    assert_true(fd >= 0);
    close(fd);
    fd = fsx_open_beneath(t->jail_fd, ".", O_RDONLY | O_DIRECTORY, 0, FSX_NO_SYMLINKS);
    assert_true(fd >= 0);
    close(fd);
    /* A symlink that stays inside is followed only when allowed. */
    fd = fsx_open_beneath(t->jail_fd, "in_link", O_RDONLY, 0, FSX_SYMLINKS_BENEATH);
    assert_true(fd >= 0);
    data = read_fd(fd);
    assert_string_equal(data, "inside");
    free(data);
    assert_int_equal(fsx_open_beneath(t->jail_fd, "in_link", O_RDONLY, 0, FSX_NO_SYMLINKS),
                     FAWN_EPERM);
    assert_int_equal(fsx_open_beneath(t->jail_fd, "dir_link/file", O_RDONLY, 0, FSX_NO_SYMLINKS),
                     FAWN_EPERM);
    fd = fsx_open_beneath(t->jail_fd, "dir_link/file", O_RDONLY, 0, FSX_SYMLINKS_BENEATH);
    assert_true(fd >= 0);
    close(fd);
    /* Creating a file. */
    fd = fsx_open_beneath(t->jail_fd, "dir/new", O_WRONLY | O_CREAT | O_EXCL, 0600,
                          FSX_NO_SYMLINKS);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(
        fsx_open_beneath(t->jail_fd, "dir/new", O_WRONLY | O_CREAT | O_EXCL, 0600, FSX_NO_SYMLINKS),
        FAWN_EEXIST);
    assert_int_equal(fsx_open_beneath(t->jail_fd, "missing", O_RDONLY, 0, FSX_NO_SYMLINKS),
                     FAWN_ENOENT);
    assert_int_equal(fsx_open_beneath(t->jail_fd, "dir/file/x", O_RDONLY, 0, FSX_NO_SYMLINKS),
                     FAWN_ENOENT);
}

static void test_fsx_open_escapes_refused(void **state) {
    tree *t = *state;
    static const char *const escapes[] = {
        "..",
        "../outside/secret",
        "dir/../../outside/secret",
        "abs_out/secret",
        "rel_out/secret",
        "dir/deep_out",
        "proc_link/etc/passwd",
        "proc_link",
        "loop",
    };
    enum fsx_follow modes[] = {FSX_NO_SYMLINKS, FSX_SYMLINKS_BENEATH};
    for (size_t m = 0; m < ARRAY_LEN(modes); m++) {
        for (size_t i = 0; i < ARRAY_LEN(escapes); i++) {
            int fd = fsx_open_beneath(t->jail_fd, escapes[i], O_RDONLY, 0, modes[m]);
            if (fd >= 0) {
                close(fd);
                fail_msg("%s (mode %d) escaped", escapes[i], (int)modes[m]);
            }
            if (fd != FAWN_EPERM)
                fail_msg("%s (mode %d): %d %s", escapes[i], (int)modes[m], fd, fawn_errmsg());
        }
    }
    /* Absolute paths are refused outright, even ones inside the jail. */
    char abs_inside[256];
    at(abs_inside, sizeof abs_inside, t, "dir/file");
    assert_int_equal(fsx_open_beneath(t->jail_fd, abs_inside, O_RDONLY, 0, FSX_SYMLINKS_BENEATH),
                     FAWN_EINVAL);
    assert_int_equal(fsx_open_beneath(t->jail_fd, "/etc/passwd", O_RDONLY, 0, FSX_SYMLINKS_BENEATH),
                     FAWN_EINVAL);
    /* Creating through a symlink that leaves is refused and creates nothing. */
    assert_int_equal(fsx_open_beneath(t->jail_fd, "abs_out/planted", O_WRONLY | O_CREAT, 0644,
                                      FSX_SYMLINKS_BENEATH),
                     FAWN_EPERM);
    assert_int_equal(
        fsx_open_beneath(t->jail_fd, "rel_out/planted", O_WRONLY | O_CREAT, 0644, FSX_NO_SYMLINKS),
        FAWN_EPERM);
    char planted[256];
    snprintf(planted, sizeof planted, "%s/outside/planted", t->root);
    assert_int_equal(access(planted, F_OK), -1);
    /* A path of PATH_MAX bytes or more is refused before any lookup. */
    char *long_path = malloc(PATH_MAX + 1);
    memset(long_path, 'a', PATH_MAX);
    long_path[PATH_MAX] = '\0';
    assert_int_equal(fsx_open_beneath(t->jail_fd, long_path, O_RDONLY, 0, FSX_NO_SYMLINKS),
                     FAWN_EINVAL);
    free(long_path);
}

static void test_fsx_mkdirs_beneath(void **state) {
    tree *t = *state;
    int fd = fsx_mkdirs_beneath(t->jail_fd, "made/a/b");
    assert_true(fd >= 0);
    /* The fd is the last directory. */
    int f = openat(fd, "x", O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    assert_true(f >= 0);
    close(f);
    close(fd);
    char p[256];
    at(p, sizeof p, t, "made/a/b/x");
    assert_int_equal(access(p, F_OK), 0);
    /* Existing directories are fine; repeated slashes are skipped. */
    fd = fsx_mkdirs_beneath(t->jail_fd, "made//a/b/");
    assert_true(fd >= 0);
    close(fd);
    /* Through a symlink, even one that stays inside: refused. */
    assert_int_equal(fsx_mkdirs_beneath(t->jail_fd, "dir_link/sub"), FAWN_EPERM);
    at(p, sizeof p, t, "dir/sub");
    assert_int_equal(access(p, F_OK), -1);
    assert_int_equal(fsx_mkdirs_beneath(t->jail_fd, "abs_out/sub"), FAWN_EPERM);
    assert_int_equal(fsx_mkdirs_beneath(t->jail_fd, "rel_out/sub/deeper"), FAWN_EPERM);
    snprintf(p, sizeof p, "%s/outside/sub", t->root);
    assert_int_equal(access(p, F_OK), -1);
    /* Dot segments are refused. */
    assert_int_equal(fsx_mkdirs_beneath(t->jail_fd, "../escape"), FAWN_EPERM);
    assert_int_equal(fsx_mkdirs_beneath(t->jail_fd, "made/../../escape"), FAWN_EPERM);
    assert_int_equal(fsx_mkdirs_beneath(t->jail_fd, "made/./x"), FAWN_EPERM);
    snprintf(p, sizeof p, "%s/escape", t->root);
    assert_int_equal(access(p, F_OK), -1);
    /* A file in the way. */
    assert_true(fsx_mkdirs_beneath(t->jail_fd, "dir/file/sub") < 0);
}

static void test_fsx_mkdir_p(void **state) {
    tree *t = *state;
    char p[256];
    at(p, sizeof p, t, "p/q/r");
    assert_int_equal(fsx_mkdir_p(p, 0700), 0);
    struct stat st;
    assert_int_equal(stat(p, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(fsx_mkdir_p(p, 0700), 0);
    assert_int_equal(fsx_mkdir_p("", 0700), FAWN_EINVAL);
    at(p, sizeof p, t, "dir/file/x");
    assert_int_equal(fsx_mkdir_p(p, 0700), FAWN_EIO);
}

/* The jail holds symlinks to the outside, to itself and to /proc: removing
 * it removes the links, never what they point to. */
static void test_fsx_remove_tree(void **state) {
    tree *t = *state;
    char p[256];
    at(p, sizeof p, t, "dir/sub");
    mkdir(p, 0755);
    at(p, sizeof p, t, "dir/sub/f");
    put(p, "x");
    int rootfd = open(t->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(rootfd >= 0);
    assert_int_equal(fsx_remove_tree(rootfd, "jail"), 0);
    struct stat st;
    assert_int_equal(stat(t->jail, &st), -1);
    snprintf(p, sizeof p, "%s/outside/secret", t->root);
    assert_int_equal(stat(p, &st), 0);
    assert_int_equal(fsx_remove_tree(rootfd, "jail"), FAWN_ENOENT);
    /* A plain file and a symlink at the top are removed themselves. */
    snprintf(p, sizeof p, "%s/link", t->root);
    assert_int_equal(symlink("outside", p), 0);
    assert_int_equal(fsx_remove_tree(rootfd, "link"), 0);
    snprintf(p, sizeof p, "%s/outside", t->root);
    assert_int_equal(stat(p, &st), 0);
    close(rootfd);
}

/* Depth of the tree below: far past any fixed bound on open directories or
 * on recursion, and a few seconds at most to build and remove. */
#define DEEP_TREE_LEVELS 1000

/* Builds DEEP_TREE_LEVELS nested directories under name in dirfd, each
 * holding a file and a sibling directory with a file. */
static void make_deep_tree(int dirfd, const char *name) {
    assert_int_equal(mkdirat(dirfd, name, 0755), 0);
    int fd = openat(dirfd, name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    for (int i = 0; i < DEEP_TREE_LEVELS && fd >= 0; i++) {
        int f = openat(fd, "secret.txt", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(f >= 0 && write(f, "x", 1) == 1);
        close(f);
        assert_int_equal(mkdirat(fd, "side", 0755), 0);
        assert_int_equal(mkdirat(fd, "d", 0755), 0);
        f = openat(fd, "side/f", O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
        assert_true(f >= 0);
        close(f);
        int next = openat(fd, "d", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        close(fd);
        fd = next;
    }
    assert_true(fd >= 0);
    close(fd);
}

/* A tree of any depth is removed whole, with few descriptors: the limit on
 * open files is lowered to a few dozen above those already open. */
static void test_fsx_remove_deep_tree(void **state) {
    tree *t = *state;
    int rootfd = open(t->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(rootfd >= 0);
    make_deep_tree(rootfd, "deep");
    struct rlimit was, low;
    assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
    low = was;
    low.rlim_cur = (rlim_t)rootfd + 48;
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
    int r = fsx_remove_tree(rootfd, "deep");
    assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
    assert_int_equal(r, 0);
    struct stat st;
    assert_int_equal(fstatat(rootfd, "deep", &st, AT_SYMLINK_NOFOLLOW), -1);
    assert_int_equal(errno, ENOENT);
    close(rootfd);
}

/* ---- fsx: the staging-file writer ---- */

#define OUTSIDE_SECRET "secret" /* what tree_setup puts in outside/secret */

/* A fresh directory "stage" in the jail; returns its fd. */
static int stage_dir(const tree *t) {
    assert_int_equal(mkdirat(t->jail_fd, "stage", 0755), 0);
    int fd = openat(t->jail_fd, "stage", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    return fd;
}

static void put_at(int dirfd, const char *name, const char *content, mode_t mode) {
    int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
    assert_true(fd >= 0);
    assert_int_equal(fawn_write_all(fd, content, strlen(content)), 0);
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void assert_text_at(int dirfd, const char *name, const char *want) {
    int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    assert_true(fd >= 0);
    char *data = read_fd(fd);
    assert_string_equal(data, want);
    free(data);
}

static void assert_secret_untouched(const tree *t) {
    char p[256];
    snprintf(p, sizeof p, "%s/outside/secret", t->root);
    int fd = open(p, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    char *data = read_fd(fd);
    assert_string_equal(data, OUTSIDE_SECRET);
    free(data);
}

/* Entries of dirfd with a staging name (SIZE_MAX when it cannot be read). */
static size_t staging_count(int dirfd) {
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d)
        return SIZE_MAX;
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)))
        n += fsx_is_staging_name(e->d_name);
    closedir(d);
    return n;
}

static mode_t mode_at(int dirfd, const char *name) {
    struct stat st;
    assert_int_equal(fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW), 0);
    return st.st_mode & 07777;
}

/* Writes content through a staging file and commits it as name. */
static int stage_write(int dirfd, const char *name, const char *content, unsigned flags) {
    fsx_staged s = {0};
    struct stat st;
    int r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, FSX_USER_FILE_MODE);
    if (r == 0)
        r = fsx_staged_write(&s, content, strlen(content));
    if (r == 0)
        r = fsx_staged_commit(&st, &s, name, flags, name);
    if (r == 0)
        assert_int_equal(st.st_size, (off_t)strlen(content));
    fsx_staged_abort(&s);
    return r;
}

static void test_fsx_staging_names(void **state) {
    assert_true(fsx_staging_name_is(".fawn-tmp-0123abcd", FSX_STAGING_WRITE));
    assert_true(fsx_staging_name_is(".fawn-tmp-", FSX_STAGING_WRITE));
    assert_false(fsx_staging_name_is(".fawn-tmp-0123abcd", FSX_STAGING_UPLOAD));
    assert_true(fsx_staging_name_is(".upload-0123.part", FSX_STAGING_UPLOAD));
    assert_true(fsx_staging_name_is(".upload-.part", FSX_STAGING_UPLOAD));
    assert_false(fsx_staging_name_is(".upload-0123.part", FSX_STAGING_WRITE));
    assert_false(fsx_is_staging_name(".upload-0123"));
    assert_false(fsx_is_staging_name(".upload.part"));
    assert_false(fsx_is_staging_name("x.fawn-tmp-1"));
    assert_false(fsx_is_staging_name(".fawn-tmp"));
    assert_false(fsx_is_staging_name(""));
}

/* The names the writer makes are the ones the rule recognizes, of the kind
 * asked for; a staging file is private until its commit. */
static void test_fsx_staged_names_made(void **state) {
    tree *t = *state;
    int dirfd = stage_dir(t);
    enum fsx_staging_kind kinds[] = {FSX_STAGING_WRITE, FSX_STAGING_UPLOAD};
    for (size_t i = 0; i < ARRAY_LEN(kinds); i++) {
        fsx_staged s = {0};
        assert_int_equal(fsx_staged_open(&s, dirfd, kinds[i], 0644), 0);
        assert_true(fsx_staging_name_is(s.name, kinds[i]));
        assert_false(fsx_staging_name_is(s.name, kinds[1 - i]));
        assert_true(strlen(s.name) > 16 && strlen(s.name) < FSX_STAGING_NAME_SIZE);
        assert_int_equal(mode_at(dirfd, s.name), 0600);
        fsx_staged_abort(&s);
        assert_int_equal(s.name[0], '\0');
        fsx_staged_abort(&s); /* again: nothing to do */
    }
    assert_int_equal(staging_count(dirfd), 0);
    close(dirfd);
}

/* A new file gets exactly the mode given, whatever the umask; the
 * process owns it. */
static void test_fsx_staged_new_file_mode(void **state) {
    tree *t = *state;
    int dirfd = stage_dir(t);
    mode_t was = umask(077);
    int r = stage_write(dirfd, "new.txt", "hello", 0);
    umask(was);
    assert_int_equal(r, 0);
    assert_text_at(dirfd, "new.txt", "hello");
    assert_int_equal(mode_at(dirfd, "new.txt"), FSX_USER_FILE_MODE);
    struct stat st;
    assert_int_equal(fstatat(dirfd, "new.txt", &st, 0), 0);
    assert_int_equal(st.st_uid, geteuid());
    assert_int_equal(staging_count(dirfd), 0);
    close(dirfd);
}

/* A replaced file's permission bits are kept; set-id bits are not carried
 * over to new bytes. */
static void test_fsx_staged_replace_keeps_mode(void **state) {
    tree *t = *state;
    int dirfd = stage_dir(t);
    put_at(dirfd, "run.sh", "old", 0751);
    put_at(dirfd, "private.txt", "old", 0600);
    put_at(dirfd, "setuid", "old", 04755);
    assert_int_equal(stage_write(dirfd, "run.sh", "new run", FSX_COMMIT_REPLACE), 0);
    assert_int_equal(stage_write(dirfd, "private.txt", "new private", FSX_COMMIT_REPLACE), 0);
    assert_int_equal(stage_write(dirfd, "setuid", "new setuid", FSX_COMMIT_REPLACE), 0);
    assert_text_at(dirfd, "run.sh", "new run");
    assert_int_equal(mode_at(dirfd, "run.sh"), 0751);
    assert_int_equal(mode_at(dirfd, "private.txt"), 0600);
    assert_int_equal(mode_at(dirfd, "setuid"), 0755);
    assert_int_equal(staging_count(dirfd), 0);
    close(dirfd);
}

/* As root, a replaced file keeps its owner and group (a sandbox user keeps
 * access to the file it had). */
static void test_fsx_staged_replace_keeps_owner(void **state) {
    tree *t = *state;
    if (geteuid() != 0)
        skip();
    int dirfd = stage_dir(t);
    put_at(dirfd, "theirs.txt", "old", 0640);
    assert_int_equal(fchownat(dirfd, "theirs.txt", 65534, 65534, AT_SYMLINK_NOFOLLOW), 0);
    assert_int_equal(stage_write(dirfd, "theirs.txt", "new", FSX_COMMIT_REPLACE), 0);
    struct stat st;
    assert_int_equal(fstatat(dirfd, "theirs.txt", &st, AT_SYMLINK_NOFOLLOW), 0);
    assert_int_equal(st.st_uid, 65534);
    assert_int_equal(st.st_gid, 65534);
    assert_int_equal(st.st_mode & 07777, 0640);
    assert_text_at(dirfd, "theirs.txt", "new");
    close(dirfd);
}

/* Until the commit the old file is untouched: an abort, a refused commit and
 * a writer that dies halfway all leave it as it was, and only the crash
 * leaves a staging file (under a name the rule hides). */
static void test_fsx_staged_abort_keeps_old(void **state) {
    tree *t = *state;
    int dirfd = stage_dir(t);
    put_at(dirfd, "data", "old", 0644);
    fsx_staged s = {0};
    assert_int_equal(fsx_staged_open(&s, dirfd, FSX_STAGING_UPLOAD, 0644), 0);
    assert_int_equal(fsx_staged_write(&s, "new partial", 11), 0);
    assert_int_equal(staging_count(dirfd), 1);
    fsx_staged_abort(&s);
    assert_text_at(dirfd, "data", "old");
    assert_int_equal(staging_count(dirfd), 0);

    assert_int_equal(stage_write(dirfd, "data", "new", 0), FAWN_EEXIST);
    assert_text_at(dirfd, "data", "old");
    assert_int_equal(staging_count(dirfd), 0);

    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        fsx_staged c = {0};
        _exit(fsx_staged_open(&c, dirfd, FSX_STAGING_WRITE, 0644) == 0 &&
                      fsx_staged_write(&c, "new", 3) == 0
                  ? 0
                  : 1);
    }
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    assert_text_at(dirfd, "data", "old");
    assert_int_equal(staging_count(dirfd), 1);
    close(dirfd);
}

/* A symlink (live or dangling), a hard-linked file or a directory at the
 * final name is never written through nor replaced. */
static void test_fsx_staged_final_name_refused(void **state) {
    tree *t = *state;
    int dirfd = stage_dir(t);
    assert_int_equal(symlinkat("../../outside/secret", dirfd, "link"), 0);
    assert_int_equal(symlinkat("../../outside/none", dirfd, "dangling"), 0);
    put_at(dirfd, "one", "one", 0644);
    assert_int_equal(linkat(dirfd, "one", dirfd, "two", 0), 0);
    assert_int_equal(mkdirat(dirfd, "sub", 0755), 0);
    assert_int_equal(stage_write(dirfd, "link", "evil", FSX_COMMIT_REPLACE), FAWN_EPERM);
    assert_int_equal(stage_write(dirfd, "dangling", "evil", FSX_COMMIT_REPLACE), FAWN_EPERM);
    assert_int_equal(stage_write(dirfd, "two", "evil", FSX_COMMIT_REPLACE), FAWN_EPERM);
    assert_int_equal(stage_write(dirfd, "sub", "evil", FSX_COMMIT_REPLACE), FAWN_EINVAL);
    assert_int_equal(stage_write(dirfd, "link", "evil", 0), FAWN_EEXIST);
    assert_int_equal(stage_write(dirfd, "dangling", "evil", 0), FAWN_EEXIST);
    assert_secret_untouched(t);
    struct stat st;
    assert_int_equal(fstatat(dirfd, "link", &st, AT_SYMLINK_NOFOLLOW), 0);
    assert_true(S_ISLNK(st.st_mode));
    assert_int_equal(fstatat(dirfd, "dangling", &st, AT_SYMLINK_NOFOLLOW), 0);
    assert_true(S_ISLNK(st.st_mode));
    char p[256];
    snprintf(p, sizeof p, "%s/outside/none", t->root);
    assert_int_equal(access(p, F_OK), -1);
    assert_text_at(dirfd, "one", "one");
    assert_int_equal(staging_count(dirfd), 0);
    close(dirfd);
}

/* The staging name swapped for a symlink or a FIFO (by anything else that
 * writes the directory) is never put in place nor followed, and an abort
 * removes the planted entry itself, not its target. The batch path is used:
 * flushed and closed first, opened again by the commit. */
static void test_fsx_staged_staging_name_swapped(void **state) {
    tree *t = *state;
    int dirfd = stage_dir(t);
    for (int fifo = 0; fifo <= 1; fifo++) {
        fsx_staged s = {0};
        assert_int_equal(fsx_staged_open(&s, dirfd, FSX_STAGING_UPLOAD, 0644), 0);
        assert_int_equal(fsx_staged_write(&s, "data", 4), 0);
        assert_int_equal(fsx_staged_flush(&s), 0);
        assert_int_equal(fsx_staged_write(&s, "more", 4), FAWN_EINVAL);
        assert_int_equal(unlinkat(dirfd, s.name, 0), 0);
        if (fifo)
            assert_int_equal(mkfifoat(dirfd, s.name, 0644), 0);
        else
            assert_int_equal(symlinkat("../../outside/secret", dirfd, s.name), 0);
        struct stat st;
        assert_int_equal(fsx_staged_commit(&st, &s, "swap.txt", FSX_COMMIT_REPLACE, "swap.txt"),
                         FAWN_EBUSY);
        assert_int_equal(faccessat(dirfd, "swap.txt", F_OK, AT_SYMLINK_NOFOLLOW), -1);
        fsx_staged_abort(&s);
        assert_int_equal(staging_count(dirfd), 0);
    }
    assert_secret_untouched(t);
    /* Unswapped, the same path puts the file in place. */
    fsx_staged s = {0};
    struct stat st;
    assert_int_equal(fsx_staged_open(&s, dirfd, FSX_STAGING_UPLOAD, 0644), 0);
    assert_int_equal(fsx_staged_write(&s, "data", 4), 0);
    assert_int_equal(fsx_staged_flush(&s), 0);
    assert_int_equal(fsx_staged_commit(&st, &s, "ok.txt",
                                       FSX_COMMIT_REPLACE | FSX_COMMIT_DEFER_DIR_SYNC, "ok.txt"),
                     0);
    fsx_dir_sync(dirfd, "ok.txt");
    fsx_staged_abort(&s);
    assert_text_at(dirfd, "ok.txt", "data");
    assert_int_equal(mode_at(dirfd, "ok.txt"), 0644);
    close(dirfd);
}

/* A directory removed under the writer is FAWN_ENOENT. */
static void test_fsx_staged_directory_gone(void **state) {
    tree *t = *state;
    int dirfd = stage_dir(t);
    assert_int_equal(unlinkat(t->jail_fd, "stage", AT_REMOVEDIR), 0);
    fsx_staged s = {0};
    assert_int_equal(fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, 0644), FAWN_ENOENT);
    assert_int_equal(s.name[0], '\0');
    fsx_staged_abort(&s);
    close(dirfd);
}

/* Runs check(dir) in a child process (it may change its credentials or its
 * mounts) and returns its exit status: 0 passed, 77 cannot be tried here. */
static int in_child(int (*check)(const char *dir), const char *dir) {
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0)
        _exit(check(dir));
    int status = 0;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
}

/* Creates a staging file in dir and returns what that answered (1: dir
 * cannot be opened). */
static int stage_open_in(const char *dir) {
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0)
        return 1;
    fsx_staged s = {0};
    int r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, 0644);
    fsx_staged_abort(&s);
    close(dirfd);
    return r;
}

/* A directory this user may not write: EACCES is FAWN_EPERM. Root gives up
 * its privileges first (the directory is opened before: its parents are
 * private to root). */
static int check_access_refused(const char *dir) {
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd < 0 || fchmod(dirfd, 0555) < 0)
        return 2;
    if (geteuid() == 0 &&
        (setresgid(65534, 65534, 65534) < 0 || setresuid(65534, 65534, 65534) < 0))
        return 77;
    fsx_staged s = {0};
    int r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, 0644);
    fsx_staged_abort(&s);
    return r == FAWN_EPERM ? 0 : 3;
}

static void test_fsx_staged_access_refused(void **state) {
    tree *t = *state;
    close(stage_dir(t));
    char dir[256];
    at(dir, sizeof dir, t, "stage");
    int rc = in_child(check_access_refused, dir);
    if (rc == 77)
        skip();
    assert_int_equal(rc, 0);
}

/* Size of the tmpfs the full-disk case fills, and what it tries to write there. */
#define SMALL_FS_OPTIONS "size=64k"
#define SMALL_FS_WRITE (256 * 1024)

/* In a private mount namespace (gone with the child): a full filesystem
 * refuses a write with FAWN_E2BIG and the abort leaves nothing; one out of
 * inodes refuses the staging file with FAWN_E2BIG; a read-only one with
 * FAWN_EPERM. 77 where mounts cannot be made (not root). */
static int check_full_disk(const char *dir) {
    if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return 77;
    if (mount("fawn-test", dir, "tmpfs", 0, SMALL_FS_OPTIONS) < 0)
        return 77;
    int dirfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    static char big[SMALL_FS_WRITE];
    fsx_staged s = {0};
    if (dirfd < 0 || fsx_staged_open(&s, dirfd, FSX_STAGING_UPLOAD, 0644) != 0)
        return 2;
    int r = fsx_staged_write(&s, big, sizeof big);
    if (r == 0)
        r = fsx_staged_flush(&s);
    fsx_staged_abort(&s);
    if (r != FAWN_E2BIG || staging_count(dirfd) != 0)
        return 3;
    close(dirfd);
    if (umount(dir) < 0 || mount("fawn-test", dir, "tmpfs", 0, "nr_inodes=1") < 0)
        return 4;
    if (stage_open_in(dir) != FAWN_E2BIG)
        return 5;
    if (umount(dir) < 0 || mount("fawn-test", dir, "tmpfs", MS_RDONLY, NULL) < 0)
        return 6;
    return stage_open_in(dir) == FAWN_EPERM ? 0 : 7;
}

static void test_fsx_staged_full_disk(void **state) {
    tree *t = *state;
    close(stage_dir(t));
    char dir[256];
    at(dir, sizeof dir, t, "stage");
    int rc = in_child(check_full_disk, dir);
    if (rc == 77)
        skip();
    assert_int_equal(rc, 0);
}

/* A test in a fresh tree (tree_setup). */
#define IN_TREE(f) cmocka_unit_test_setup_teardown(f, tree_setup, tree_teardown)

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fbuf_append_and_limit),
        cmocka_unit_test(test_fbuf_printf_and_growth),
        cmocka_unit_test(test_fbuf_steal),
        cmocka_unit_test(test_read_all_limits),
        cmocka_unit_test(test_id_valid),
        cmocka_unit_test(test_sha256_vectors),
        cmocka_unit_test(test_random_hex),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_clocks),
        cmocka_unit_test(test_hex_digit_and_uuid),
        cmocka_unit_test(test_utf8_valid),
        cmocka_unit_test(test_utf8_sanitize),
        cmocka_unit_test(test_fjson_parse_object),
        cmocka_unit_test(test_fjson_getters),
        cmocka_unit_test(test_fjson_check_keys),
        cmocka_unit_test_setup_teardown(test_fsx_open_inside, tree_setup, tree_teardown),
        cmocka_unit_test_setup_teardown(test_fsx_open_escapes_refused, tree_setup, tree_teardown),
        cmocka_unit_test_setup_teardown(test_fsx_mkdirs_beneath, tree_setup, tree_teardown),
        cmocka_unit_test_setup_teardown(test_fsx_mkdir_p, tree_setup, tree_teardown),
        cmocka_unit_test_setup_teardown(test_fsx_remove_tree, tree_setup, tree_teardown),
        cmocka_unit_test_setup_teardown(test_fsx_remove_deep_tree, tree_setup, tree_teardown),
        cmocka_unit_test(test_fsx_staging_names),
        IN_TREE(test_fsx_staged_names_made),
        IN_TREE(test_fsx_staged_new_file_mode),
        IN_TREE(test_fsx_staged_replace_keeps_mode),
        IN_TREE(test_fsx_staged_replace_keeps_owner),
        IN_TREE(test_fsx_staged_abort_keeps_old),
        IN_TREE(test_fsx_staged_final_name_refused),
        IN_TREE(test_fsx_staged_staging_name_swapped),
        IN_TREE(test_fsx_staged_directory_gone),
        IN_TREE(test_fsx_staged_access_refused),
        IN_TREE(test_fsx_staged_full_disk),
    };
    return cmocka_run_group_tests_name("base", tests, NULL, NULL);
}
