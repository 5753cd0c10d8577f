#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "gateway/multipart.h"
#include "support.h"

#define BOUNDARY "fawn-b0undary'x"
#define CT "multipart/form-data; boundary=" BOUNDARY

/* Records the callbacks as text: "[begin name|filename|type]", "[data]"
 * followed by the content (consecutive data calls merge), "[end]". */
typedef struct recorder {
    fbuf log;
    bool in_data;
    size_t begins, ends, data_bytes;
    int fail_code;       /* returned by the callback chosen below, 0 for none */
    const char *fail_in; /* "begin", "data" or "end" */
} recorder;

static int fail_if(recorder *rec, const char *where) {
    if (rec->fail_code && strcmp(rec->fail_in, where) == 0)
        return fawn_err(rec->fail_code, "stopped by the %s callback", where);
    return 0;
}

static int rec_begin(void *ctx, const multipart_part *part) {
    recorder *rec = ctx;
    rec->begins++;
    rec->in_data = false;
    assert_int_equal(fbuf_printf(&rec->log, "[begin %s|%s|%s]", part->name,
                                 part->filename ? part->filename : "(none)",
                                 part->content_type ? part->content_type : "(none)"),
                     0);
    return fail_if(rec, "begin");
}

static int rec_data(void *ctx, const char *data, size_t len) {
    recorder *rec = ctx;
    assert_true(len > 0);
    assert_int_equal(rec->begins, rec->ends + 1);
    if (!rec->in_data)
        assert_int_equal(fbuf_append(&rec->log, "[data]", 6), 0);
    rec->in_data = true;
    rec->data_bytes += len;
    assert_int_equal(fbuf_append(&rec->log, data, len), 0);
    return fail_if(rec, "data");
}

static int rec_end(void *ctx) {
    recorder *rec = ctx;
    rec->ends++;
    rec->in_data = false;
    assert_int_equal(rec->begins, rec->ends);
    assert_int_equal(fbuf_append(&rec->log, "[end]", 5), 0);
    return fail_if(rec, "end");
}

static const multipart_callbacks rec_callbacks = {rec_begin, rec_data, rec_end};

static multipart_parser *parser_new(recorder *rec, const char *boundary) {
    multipart_parser *p = NULL;
    int r = multipart_new(&p, boundary, &rec_callbacks, rec);
    if (r != 0)
        fail_msg("multipart_new: %s", fawn_errmsg());
    return p;
}

/* Feeds body[0..len) in chunks ending at the offsets in cuts (ascending,
 * then len), each copied into an exact-size buffer so that a read past a
 * chunk is caught by AddressSanitizer. Returns the first failure or
 * multipart_finish's result. */
static int feed_cut(recorder *rec, const char *boundary, const char *body, size_t len,
                    const size_t *cuts, size_t n_cuts) {
    multipart_parser *p = parser_new(rec, boundary);
    size_t start = 0;
    int r = 0;
    for (size_t i = 0; i <= n_cuts && r == 0; i++) {
        size_t end = i < n_cuts ? cuts[i] : len;
        char *chunk = malloc(end - start + 1);
        assert_non_null(chunk);
        memcpy(chunk, body + start, end - start);
        r = multipart_feed(p, chunk, end - start);
        free(chunk);
        start = end;
    }
    if (r == 0)
        r = multipart_finish(p);
    multipart_free(p);
    return r;
}

static int feed_whole(recorder *rec, const char *boundary, const char *body, size_t len) {
    return feed_cut(rec, boundary, body, len, NULL, 0);
}

static int feed_bytewise(recorder *rec, const char *boundary, const char *body, size_t len) {
    size_t *cuts = calloc(len ? len : 1, sizeof *cuts);
    assert_non_null(cuts);
    for (size_t i = 0; i + 1 < len; i++)
        cuts[i] = i + 1;
    int r = feed_cut(rec, boundary, body, len, cuts, len ? len - 1 : 0);
    free(cuts);
    return r;
}

static void assert_log(const recorder *rec, const char *expected, size_t expected_len) {
    if (rec->log.len != expected_len ||
        (expected_len > 0 && memcmp(rec->log.data, expected, expected_len) != 0))
        fail_msg("callbacks differ:\n got: %.*s\nwant: %.*s", (int)rec->log.len,
                 rec->log.data ? rec->log.data : "", (int)expected_len, expected);
}

/* Parses body whole, byte by byte and at every split into two chunks; each
 * must succeed with exactly the expected callbacks. */
static void assert_parses_everywhere(const char *boundary, const char *body, size_t len,
                                     const char *expected, size_t expected_len) {
    recorder rec = {0};
    if (feed_whole(&rec, boundary, body, len) != 0)
        fail_msg("whole: %s", fawn_errmsg());
    assert_log(&rec, expected, expected_len);
    fbuf_free(&rec.log);

    recorder bytes = {0};
    if (feed_bytewise(&bytes, boundary, body, len) != 0)
        fail_msg("bytewise: %s", fawn_errmsg());
    assert_log(&bytes, expected, expected_len);
    fbuf_free(&bytes.log);

    for (size_t cut = 0; cut <= len; cut++) {
        recorder split = {0};
        if (feed_cut(&split, boundary, body, len, &cut, 1) != 0)
            fail_msg("split at %zu: %s", cut, fawn_errmsg());
        assert_log(&split, expected, expected_len);
        fbuf_free(&split.log);
    }
}

/* Two files and a text field, with a preamble, transport padding, content
 * that looks like delimiters, binary content and an epilogue. */
static const char three_parts_body[] =
    "This is the preamble.\r\n"
    "--" BOUNDARY "\r\n"
    "Content-Disposition: form-data; name=\"note\"\r\n"
    "\r\n"
    "hello\r\nworld"
    "\r\n--" BOUNDARY " \t \r\n"
    "content-disposition: FORM-DATA; Name=\"files\"; filename=\"a.txt\"\r\n"
    "Content-Type: text/plain\r\n"
    "X-Ignored: yes\r\n"
    "\r\n"
    "line1\r\n--fawn-b0und\r\n\r\r\n-\r\n--fawn-b0undary'X-not-quite\r\n"
    "\r\n--" BOUNDARY "\r\n"
    "Content-Disposition: form-data; name=files; filename=\"b.bin\"\r\n"
    "CONTENT-TYPE:application/octet-stream  \r\n"
    "\r\n"
    "\x00\x01\xff binary --" BOUNDARY "\r"
    "\r\n--" BOUNDARY "--\r\n"
    "epilogue, ignored\r\n--" BOUNDARY "\r\n";

static const char three_parts_events[] =
    "[begin note|(none)|(none)][data]hello\r\nworld[end]"
    "[begin files|a.txt|text/plain][data]line1\r\n--fawn-b0und\r\n\r\r\n-\r\n--fawn-b0undary'X"
    "-not-quite\r\n[end]"
    "[begin files|b.bin|application/octet-stream][data]\x00\x01\xff binary --" BOUNDARY "\r"
    "[end]";

static void test_three_parts_any_split(void **state) {
    char boundary[MULTIPART_BOUNDARY_MAX + 1];
    assert_int_equal(multipart_boundary(boundary, CT), 0);
    assert_string_equal(boundary, BOUNDARY);
    assert_parses_everywhere(boundary, three_parts_body, sizeof three_parts_body - 1,
                             three_parts_events, sizeof three_parts_events - 1);
}

/* Content holding "\r\n--" and every proper prefix of the boundary, each
 * followed by a byte that breaks the match, comes out exactly. */
static void test_partial_delimiters_are_content(void **state) {
    fbuf content = {0}, body = {0}, want = {0};
    static const char breakers[] = {'X', '\r', '\n', '-'};
    const char *delim = "\r\n--" BOUNDARY;
    size_t delim_len = strlen(delim);
    for (size_t n = 1; n < delim_len; n++)
        for (size_t b = 0; b < sizeof breakers; b++) {
            assert_int_equal(fbuf_append(&content, delim, n), 0);
            assert_int_equal(fbuf_append(&content, &breakers[b], 1), 0);
        }
    assert_int_equal(
        fbuf_printf(&body, "--%s\r\nContent-Disposition: form-data; name=\"f\"\r\n\r\n", BOUNDARY),
        0);
    assert_int_equal(fbuf_append(&body, content.data, content.len), 0);
    assert_int_equal(fbuf_printf(&body, "\r\n--%s--", BOUNDARY), 0);
    assert_int_equal(fbuf_append(&want, "[begin f|(none)|(none)][data]", 29), 0);
    assert_int_equal(fbuf_append(&want, content.data, content.len), 0);
    assert_int_equal(fbuf_append(&want, "[end]", 5), 0);
    assert_parses_everywhere(BOUNDARY, body.data, body.len, want.data, want.len);
    fbuf_free(&content);
    fbuf_free(&body);
    fbuf_free(&want);
}

/* A delimiter needs the CRLF in front of it, except the very first one. */
static void test_delimiter_needs_crlf(void **state) {
    static const char body[] = "\r\n--b\r\nContent-Disposition: form-data; name=a\r\n\r\n"
                               "x--b\n--b\r--b"
                               "\r\n--b--";
    static const char want[] = "[begin a|(none)|(none)][data]x--b\n--b\r--b[end]";
    assert_parses_everywhere("b", body, sizeof body - 1, want, sizeof want - 1);

    static const char empty[] = "--b--";
    assert_parses_everywhere("b", empty, sizeof empty - 1, "", 0);

    static const char empty_part[] = "--b\r\nContent-Disposition: form-data; name=a\r\n\r\n"
                                     "\r\n--b--";
    static const char empty_want[] = "[begin a|(none)|(none)][end]";
    assert_parses_everywhere("b", empty_part, sizeof empty_part - 1, empty_want,
                             sizeof empty_want - 1);
}

/* Content is handed on as it arrives: only bytes that may start a delimiter
 * are held back, never more than the delimiter's length. */
static void test_content_streams(void **state) {
    recorder rec = {0};
    multipart_parser *p = parser_new(&rec, BOUNDARY);
    static const char head[] = "--" BOUNDARY "\r\nContent-Disposition: form-data; name=\"f\"; "
                               "filename=\"big\"\r\n\r\n";
    assert_int_equal(multipart_feed(p, head, sizeof head - 1), 0);
    char chunk[1000];
    memset(chunk, 'z', sizeof chunk);
    size_t fed = 0;
    for (int i = 0; i < 200; i++) {
        assert_int_equal(multipart_feed(p, chunk, sizeof chunk), 0);
        fed += sizeof chunk;
        assert_int_equal(rec.data_bytes, fed);
    }
    static const char partial[] = "\r\n--" BOUNDARY;
    assert_int_equal(multipart_feed(p, partial, sizeof partial - 2), 0);
    assert_int_equal(rec.data_bytes, fed);
    /* The delimiter completes; the part ends only when its line does. */
    assert_int_equal(multipart_feed(p, partial + sizeof partial - 2, 1), 0);
    assert_int_equal(rec.ends, 0);
    assert_int_equal(multipart_feed(p, "-", 1), 0);
    assert_int_equal(rec.ends, 0);
    assert_int_equal(multipart_feed(p, "-", 1), 0);
    assert_int_equal(rec.ends, 1);
    assert_int_equal(multipart_finish(p), 0);
    assert_int_equal(rec.data_bytes, fed);
    multipart_free(p);
    fbuf_free(&rec.log);
}

typedef struct filename_case {
    const char *disposition;
    const char *want; /* the begin event */
} filename_case;

static void test_filenames(void **state) {
    static const filename_case cases[] = {
        {"form-data; name=\"f\"; filename=\"a \\\"quoted\\\" \\\\ name.txt\"",
         "[begin f|a \"quoted\" \\ name.txt|(none)]"},
        {"form-data; name=\"f\"; filename=\"\"", "[begin f||(none)]"},
        {"form-data; name=\"f\"; filename=\"../../etc/passwd\"",
         "[begin f|../../etc/passwd|(none)]"},
        {"form-data; name=\"f\"; filename=\"caf\xc3\xa9;x=1.txt\"",
         "[begin f|caf\xc3\xa9;x=1.txt|(none)]"},
        {"form-data; name=\"f\"; filename*=UTF-8''%E4%BD%A0.txt",
         "[begin f|\xe4\xbd\xa0.txt|(none)]"},
        {"form-data; name=\"f\"; filename=\"fallback.txt\"; filename*=utf-8'zh'%E4%BD%A0.txt",
         "[begin f|\xe4\xbd\xa0.txt|(none)]"},
        {"form-data; filename*=UTF-8''%2e%2e%2Fx; name=\"f\"", "[begin f|../x|(none)]"},
        {"form-data; FILENAME=plain.txt; NAME=f; size=3", "[begin f|plain.txt|(none)]"},
        {"form-data ; name=\"a b\" ;filename=\"x\";", "[begin a b|x|(none)]"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        fbuf body = {0};
        assert_int_equal(fbuf_printf(&body, "--b\r\nContent-Disposition: %s\r\n\r\n\r\n--b--",
                                     cases[i].disposition),
                         0);
        fbuf want = {0};
        assert_int_equal(fbuf_printf(&want, "%s[end]", cases[i].want), 0);
        recorder rec = {0};
        if (feed_whole(&rec, "b", body.data, body.len) != 0)
            fail_msg("%s: %s", cases[i].disposition, fawn_errmsg());
        assert_log(&rec, want.data, want.len);
        fbuf_free(&rec.log);
        fbuf_free(&body);
        fbuf_free(&want);
    }
}

/* Parses body whole and byte by byte: both must fail with code, after the
 * same callbacks, with a message that contains why. */
static void assert_refused(const char *body, size_t len, int code, const char *why) {
    recorder rec = {0};
    int r = feed_whole(&rec, "b", body, len);
    if (r != code || !strstr(fawn_errmsg(), why))
        fail_msg("%.*s: got %d (%s), want %d (%s)", (int)(len < 200 ? len : 200), body, r,
                 fawn_errmsg(), code, why);
    assert_true(strncmp(fawn_errmsg(),
                        code == FAWN_EINVAL ? "malformed multipart body: " : "multipart ",
                        code == FAWN_EINVAL ? 26 : 10) == 0);
    recorder bytes = {0};
    assert_int_equal(feed_bytewise(&bytes, "b", body, len), code);
    assert_non_null(strstr(fawn_errmsg(), why));
    assert_log(&bytes, rec.log.data, rec.log.len);
    fbuf_free(&rec.log);
    fbuf_free(&bytes.log);
}

typedef struct refuse_case {
    const char *body; /* parsed with boundary "b" */
    const char *why;  /* part of the error message */
} refuse_case;

#define CD "Content-Disposition: form-data; name=\"f\"\r\n"
#define DISP(params) "--b\r\nContent-Disposition: form-data" params "\r\n\r\n\r\n--b--"

/* Malformed bodies, each complete but for the one defect. */
static void test_malformed_bodies(void **state) {
    static const refuse_case cases[] = {
        {"--b\r\n\r\ncontent\r\n--b--", "without Content-Disposition"},
        {"--b\r\nContent-Type: text/plain\r\n\r\n\r\n--b--", "without Content-Disposition"},
        {"--b\r\nContent-Disposition: attachment; name=\"f\"\r\n\r\n\r\n--b--", "not form-data"},
        {"--b\r\nContent-Disposition: form-data-x; name=\"f\"\r\n\r\n\r\n--b--", "not form-data"},
        {"--b\r\nContent-Disposition:\r\n\r\n\r\n--b--", "not form-data"},
        {DISP(""), "without a name"},
        {DISP("; filename=\"a.txt\""), "without a name"},
        {DISP("; name=\"\""), "without a name"},
        {DISP("; name=a; name=b"), "name given twice"},
        {DISP("; name=a; NAME=a"), "name given twice"},
        {DISP("; name=a; filename=x; filename=y"), "filename given twice"},
        {DISP("; name=a; filename*=UTF-8''x; filename*=UTF-8''x"), "filename* given twice"},
        {"--b\r\n" CD CD "\r\n\r\n--b--", "header given twice"},
        {"--b\r\n" CD "Content-Type: a/b\r\ncontent-type: c/d\r\n\r\n\r\n--b--",
         "header given twice"},
        {DISP("; name=a b"), "parameter syntax"},
        {DISP("; name=\"a"), "parameter syntax"},
        {DISP("; name =a"), "parameter syntax"},
        {DISP("; name= a"), "parameter syntax"},
        {DISP("; name="), "parameter syntax"},
        {DISP("; name=a\\b"), "parameter syntax"},
        {DISP(" name=a"), "not form-data"},
        {DISP("; name=\"a\x01\""), "control character"},
        {DISP("; name=\"a\x7f\""), "control character"},
        {"--b\r\nContent-Disposition: form-data; name=\"a\"\n\r\n\r\n--b--", "not ended by CRLF"},
        {"--b\r\nContent-Disposition: form-data; name=\"a\"\r\r\n\r\n\r\n--b--",
         "not ended by CRLF"},
        {"--b\r\n" CD "\n\r\n--b--", "not ended by CRLF"},
        {"--b\r\nContent-Disposition: form-data;\r\n name=\"a\"\r\n\r\n\r\n--b--", "folded"},
        {"--b\r\nContent-Disposition : form-data; name=a\r\n\r\n\r\n--b--", "bad part header"},
        {"--b\r\nno colon here\r\n" CD "\r\n\r\n--b--", "bad part header"},
        {"--b\r\n: empty name\r\n" CD "\r\n\r\n--b--", "bad part header"},
        {DISP("; name=f; filename*=ISO-8859-1''a.txt"), "UTF-8''"},
        {DISP("; name=f; filename*=a.txt"), "UTF-8''"},
        {DISP("; name=f; filename*=UTF-8'a.txt"), "UTF-8''"},
        {DISP("; name=f; filename*=UTF-8''a%00.txt"), "NUL"},
        {DISP("; name=f; filename*=UTF-8''a%4"), "percent-escape"},
        {DISP("; name=f; filename*=UTF-8''a%4g"), "percent-escape"},
        {DISP("; name=f; filename*=UTF-8''a%+5"), "percent-escape"},
        {DISP("; name=f; filename*=UTF-8''%FF.txt"), "not valid UTF-8"},
        {DISP("; name=f; filename*=UTF-8''%C0%AE"), "not valid UTF-8"},
        {"--bx\r\n" CD "\r\n\r\n--b--", "unexpected bytes after a boundary"},
        {"--b\n" CD "\r\n\r\n--b--", "not ended by CRLF"},
        {"--b \t x\r\n" CD "\r\n\r\n--b--", "unexpected bytes after a boundary"},
        {"--b\r\n" CD "\r\ndata\r\n--b-x", "unexpected bytes after a boundary"},
        {"--b\r\n" CD "\r\ndata\r\n--b --", "unexpected bytes after a boundary"},
        {"--b\r\n" CD "\r\ndata\r\n--bb\r\n--b--", "unexpected bytes after a boundary"},
        {"--b\r\n" CD "\r\ndata\r\n--b\rx", "not ended by CRLF"},
        {"--b\r\n" CD "\r\ndata\r\n--b\r\r\n", "not ended by CRLF"},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        assert_refused(cases[i].body, strlen(cases[i].body), FAWN_EINVAL, cases[i].why);

    static const char nul_header[] = "--b\r\nContent-Disposition: form-data; name=\"a\0b\"\r\n\r\n"
                                     "\r\n--b--";
    assert_refused(nul_header, sizeof nul_header - 1, FAWN_EINVAL, "NUL byte in part headers");
}

/* Bodies cut short are refused by multipart_finish. */
static void test_missing_close_delimiter(void **state) {
    static const char *const cases[] = {
        "",
        "no delimiter at all",
        "--b",
        "--b\r\n",
        "--b\r\n" CD,
        "--b\r\n" CD "\r\ndata",
        "--b\r\n" CD "\r\ndata\r\n--",
        "--b\r\n" CD "\r\ndata\r\n--b",
        "--b\r\n" CD "\r\ndata\r\n--b-",
        "--b\r\n" CD "\r\ndata\r\n--b\r\n",
        "--b\r\n" CD "\r\ndata\r\n--b \r",
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        assert_refused(cases[i], strlen(cases[i]), FAWN_EINVAL, "missing closing delimiter");
}

#undef DISP
#undef CD

static void test_preamble_padding_epilogue_bounded(void **state) {
    fbuf body = {0};
    for (int i = 0; i < MULTIPART_PREAMBLE_MAX; i++)
        assert_int_equal(fbuf_append(&body, "p", 1), 0);
    assert_int_equal(fbuf_printf(&body, "\r\n--b--"), 0);
    assert_refused(body.data, body.len, FAWN_EINVAL, "no delimiter in the first");
    /* A preamble just under the limit is fine. */
    recorder rec = {0};
    assert_int_equal(feed_whole(&rec, "b", body.data + 8, body.len - 8), 0);
    fbuf_free(&body);

    assert_int_equal(fbuf_printf(&body, "--b"), 0);
    for (int i = 0; i < MULTIPART_PADDING_MAX; i++)
        assert_int_equal(fbuf_append(&body, " ", 1), 0);
    assert_int_equal(fbuf_printf(&body, "\r\n\r\n--b--"), 0);
    /* The padding is fine; the part has no headers. */
    assert_refused(body.data, body.len, FAWN_EINVAL, "without Content-Disposition");
    fbuf_free(&body);
    assert_int_equal(fbuf_printf(&body, "--b "), 0);
    for (int i = 0; i < MULTIPART_PADDING_MAX; i++)
        assert_int_equal(fbuf_append(&body, "\t", 1), 0);
    assert_int_equal(fbuf_printf(&body, "\r\n"), 0);
    assert_refused(body.data, body.len, FAWN_EINVAL, "padding");
    fbuf_free(&body);

    assert_int_equal(fbuf_printf(&body, "--b--"), 0);
    for (int i = 0; i <= MULTIPART_EPILOGUE_MAX; i++)
        assert_int_equal(fbuf_append(&body, "e", 1), 0);
    assert_refused(body.data, body.len, FAWN_EINVAL, "after the closing delimiter");
    fbuf_free(&body);
}

/* Builds a part whose header block is exactly block_len bytes long. */
static void header_block_body(fbuf *body, size_t block_len) {
    static const char cd[] = "Content-Disposition: form-data; name=\"f\"\r\nX-Pad: ";
    assert_true(block_len >= sizeof cd - 1 + 4);
    assert_int_equal(fbuf_printf(body, "--b\r\n%s", cd), 0);
    for (size_t i = sizeof cd - 1 + 4; i < block_len; i++)
        assert_int_equal(fbuf_append(body, "x", 1), 0);
    assert_int_equal(fbuf_printf(body, "\r\n\r\nbody\r\n--b--"), 0);
}

static void test_oversize_headers(void **state) {
    fbuf body = {0};
    header_block_body(&body, MULTIPART_HEADER_BLOCK_MAX);
    recorder rec = {0};
    if (feed_whole(&rec, "b", body.data, body.len) != 0)
        fail_msg("%s", fawn_errmsg());
    assert_int_equal(rec.begins, 1);
    fbuf_free(&rec.log);
    fbuf_free(&body);

    header_block_body(&body, MULTIPART_HEADER_BLOCK_MAX + 1);
    assert_refused(body.data, body.len, FAWN_E2BIG, "headers exceed");
    fbuf_free(&body);

    for (int n = MULTIPART_HEADERS_MAX; n <= MULTIPART_HEADERS_MAX + 1; n++) {
        assert_int_equal(fbuf_printf(&body, "--b\r\nContent-Disposition: form-data; name=f\r\n"),
                         0);
        for (int i = 1; i < n; i++)
            assert_int_equal(fbuf_printf(&body, "X-H%d: v\r\n", i), 0);
        assert_int_equal(fbuf_printf(&body, "\r\n\r\n--b--"), 0);
        recorder count = {0};
        int r = feed_whole(&count, "b", body.data, body.len);
        assert_int_equal(r, n > MULTIPART_HEADERS_MAX ? FAWN_E2BIG : 0);
        fbuf_free(&count.log);
        fbuf_free(&body);
    }
}

static void test_too_many_parts(void **state) {
    for (int n = MULTIPART_PARTS_MAX; n <= MULTIPART_PARTS_MAX + 1; n++) {
        fbuf body = {0};
        for (int i = 0; i < n; i++)
            assert_int_equal(
                fbuf_printf(&body, "--b\r\nContent-Disposition: form-data; name=f%d\r\n\r\nv\r\n",
                            i),
                0);
        assert_int_equal(fbuf_printf(&body, "--b--"), 0);
        recorder rec = {0};
        int r = feed_whole(&rec, "b", body.data, body.len);
        if (n > MULTIPART_PARTS_MAX) {
            assert_int_equal(r, FAWN_E2BIG);
            assert_int_equal(rec.begins, MULTIPART_PARTS_MAX);
            assert_int_equal(rec.ends, MULTIPART_PARTS_MAX);
        } else {
            assert_int_equal(r, 0);
            assert_int_equal(rec.begins, n);
        }
        fbuf_free(&rec.log);
        fbuf_free(&body);
    }
}

static void test_callback_error_propagates(void **state) {
    static const char *const where[] = {"begin", "data", "end"};
    for (size_t i = 0; i < ARRAY_LEN(where); i++) {
        recorder rec = {.fail_code = FAWN_EPERM, .fail_in = where[i]};
        multipart_parser *p = parser_new(&rec, BOUNDARY);
        int r = multipart_feed(p, three_parts_body, sizeof three_parts_body - 1);
        assert_int_equal(r, FAWN_EPERM);
        char want[64];
        snprintf(want, sizeof want, "stopped by the %s callback", where[i]);
        assert_string_equal(fawn_errmsg(), want);
        /* Stopped: no more callbacks, the same code and message every time. */
        size_t begins = rec.begins, bytes = rec.data_bytes;
        fawn_err(FAWN_EIO, "something else");
        assert_int_equal(multipart_feed(p, three_parts_body, sizeof three_parts_body - 1),
                         FAWN_EPERM);
        assert_string_equal(fawn_errmsg(), want);
        fawn_err(FAWN_EIO, "something else");
        assert_int_equal(multipart_finish(p), FAWN_EPERM);
        assert_string_equal(fawn_errmsg(), want);
        assert_int_equal(rec.begins, begins);
        assert_int_equal(rec.data_bytes, bytes);
        multipart_free(p);
        fbuf_free(&rec.log);
    }
}

static void test_parse_error_is_sticky(void **state) {
    recorder rec = {0};
    multipart_parser *p = parser_new(&rec, "b");
    static const char bad[] = "--b\r\nContent-Disposition: form-data; name=f\r\n\n";
    assert_int_equal(multipart_feed(p, bad, sizeof bad - 1), FAWN_EINVAL);
    char msg[256];
    snprintf(msg, sizeof msg, "%s", fawn_errmsg());
    assert_int_equal(multipart_feed(p, "\r\n--b--", 7), FAWN_EINVAL);
    assert_string_equal(fawn_errmsg(), msg);
    assert_int_equal(multipart_finish(p), FAWN_EINVAL);
    assert_int_equal(rec.begins, 0);
    multipart_free(p);

    /* finish before the closing delimiter, twice. */
    p = parser_new(&rec, "b");
    static const char cut_short[] = "--b\r\nContent-Disposition: form-data; name=f\r\n\r\nx";
    assert_int_equal(multipart_feed(p, cut_short, sizeof cut_short - 1), 0);
    assert_int_equal(multipart_finish(p), FAWN_EINVAL);
    assert_string_equal(fawn_errmsg(), "malformed multipart body: missing closing delimiter");
    assert_int_equal(multipart_finish(p), FAWN_EINVAL);
    multipart_free(p);
    fbuf_free(&rec.log);
}

static void test_null_callbacks(void **state) {
    multipart_callbacks none = {NULL, NULL, NULL};
    multipart_parser *p = NULL;
    assert_int_equal(multipart_new(&p, BOUNDARY, &none, NULL), 0);
    assert_int_equal(multipart_feed(p, three_parts_body, sizeof three_parts_body - 1), 0);
    assert_int_equal(multipart_finish(p), 0);
    multipart_free(p);
    multipart_free(NULL);
}

static void test_new_refuses_bad_boundary(void **state) {
    static const char *const bad[] = {
        "",
        "a\r\nb",
        "trailing ",
        "a@b",
        "0123456789012345678901234567890123456789012345678901234567890123456789X",
    };
    recorder rec = {0};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        multipart_parser *p;
        POISON(p); /* a refusal sets it anyway */
        assert_int_equal(multipart_new(&p, bad[i], &rec_callbacks, &rec), FAWN_EINVAL);
        assert_null(p);
    }
}

typedef struct boundary_case {
    const char *content_type;
    int code;
    const char *boundary;
} boundary_case;

static void test_boundary_from_content_type(void **state) {
    static const boundary_case cases[] = {
        {"multipart/form-data; boundary=abc", 0, "abc"},
        {"multipart/form-data;boundary=abc", 0, "abc"},
        {"  Multipart/Form-Data ; BOUNDARY=abc  ", 0, "abc"},
        {"multipart/form-data; charset=utf-8; boundary=----WebKitFormBoundary7MA4YWxkTrZu0gW", 0,
         "----WebKitFormBoundary7MA4YWxkTrZu0gW"},
        {"multipart/form-data; boundary=\"a b'()+_,-./:=?\"", 0, "a b'()+_,-./:=?"},
        {"multipart/form-data; boundary=\"a\\\"b\"", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=\"esc\\aped\"", 0, "escaped"},
        {"multipart/form-data; boundary=a=b;", 0, "a=b"},
        {"multipart/form-data; boundary="
         "\"0123456789012345678901234567890123456789012345678901234567890123456789\"",
         0, "0123456789012345678901234567890123456789012345678901234567890123456789"},
        {"multipart/form-data; boundary="
         "0123456789012345678901234567890123456789012345678901234567890123456789X",
         FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=\"\"", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=\"ends in space \"", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=a@b", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=\"a\rb\"", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=\"abc", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=a; boundary=a", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary=a b", FAWN_EINVAL, NULL},
        {"multipart/form-data; boundary", FAWN_EINVAL, NULL},
        {"multipart/form-data", FAWN_EINVAL, NULL},
        {"multipart/form-data; charset=utf-8", FAWN_EINVAL, NULL},
        {"multipart/form-data; xboundary=abc", FAWN_EINVAL, NULL},
        {"text/plain; boundary=abc", FAWN_EUNSUP, NULL},
        {"multipart/mixed; boundary=abc", FAWN_EUNSUP, NULL},
        {"multipart/form-data-x; boundary=abc", FAWN_EUNSUP, NULL},
        {"application/x-www-form-urlencoded", FAWN_EUNSUP, NULL},
        {"", FAWN_EUNSUP, NULL},
        {NULL, FAWN_EUNSUP, NULL},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char out[MULTIPART_BOUNDARY_MAX + 1];
        POISON(out);
        int r = multipart_boundary(out, cases[i].content_type);
        if (r != cases[i].code)
            fail_msg("%s: got %d (%s), want %d",
                     cases[i].content_type ? cases[i].content_type : "NULL", r, fawn_errmsg(),
                     cases[i].code);
        if (r == 0) {
            assert_string_equal(out, cases[i].boundary);
        } else {
            assert_true(fawn_errmsg()[0] != '\0');
            assert_string_equal(out, ""); /* never half a boundary */
        }
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_three_parts_any_split),
        cmocka_unit_test(test_partial_delimiters_are_content),
        cmocka_unit_test(test_delimiter_needs_crlf),
        cmocka_unit_test(test_content_streams),
        cmocka_unit_test(test_filenames),
        cmocka_unit_test(test_malformed_bodies),
        cmocka_unit_test(test_missing_close_delimiter),
        cmocka_unit_test(test_preamble_padding_epilogue_bounded),
        cmocka_unit_test(test_oversize_headers),
        cmocka_unit_test(test_too_many_parts),
        cmocka_unit_test(test_callback_error_propagates),
        cmocka_unit_test(test_parse_error_is_sticky),
        cmocka_unit_test(test_null_callbacks),
        cmocka_unit_test(test_new_refuses_bad_boundary),
        cmocka_unit_test(test_boundary_from_content_type),
    };
    return cmocka_run_group_tests_name("multipart", tests, NULL, NULL);
}
