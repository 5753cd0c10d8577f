/* The web UI's files: the table the build embeds, the two header parsers
 * that decide how a file is sent, and the gateway serving them at / and
 * /assets/ with the page's security headers, 304s and gzip. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "store/store.h"
#include "web/web.h"
#include "unit/test_store_open.h"

/* The policy every file of the UI is served with (web_routes.c). */
#define CSP                                                                                        \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "                 \
    "frame-ancestors 'none'"
/* Largest reply a test reads: the largest asset, with its headers. */
#define REPLY_MAX ((size_t)1 << 20)

typedef struct fx {
    char home[64];
    fawn_config cfg;
    store *st;
    app *a;
    gateway *g;
} fx;

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-web-XXXXXX");
    if (!x || !mkdtemp(x->home) || config_defaults(&x->cfg) < 0)
        return -1;
    free(x->cfg.home);
    if (!(x->cfg.home = strdup(x->home)))
        return -1;
    char path[128];
    snprintf(path, sizeof path, "%s/fawn.db", x->home);
    if (test_store_open(&x->st, path) < 0 || app_open(&x->a, &x->cfg, x->st) < 0)
        return -1;
    for (int attempt = 0; attempt < LOOPBACK_PORT_ATTEMPTS && !x->g; attempt++) {
        x->cfg.server.port = loopback_free_port();
        int r = gateway_start(&x->g, x->a);
        if (r < 0 && r != FAWN_EIO) /* FAWN_EIO: another process took the port */
            return -1;
    }
    if (!x->g)
        return -1;
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fx *x = *state;
    gateway_quiesce(x->g);
    app_stop(x->a);
    gateway_stop(x->g);
    app_close(x->a);
    store_close(x->st);
    config_free(&x->cfg);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->home);
    int r = system(cmd);
    free(x);
    return r;
}

/* One reply, whole: its status, its head (header lines, NUL-terminated)
 * and a pointer to its body within the same buffer. */
typedef struct reply {
    char *raw;
    size_t len;
    int status;
    const char *body;
    size_t body_len;
} reply;

static void reply_free(reply *r) { free(r->raw); }

/* GET path with the extra header lines (each ending in \r\n) on a fresh
 * connection, read to its close. */
static reply get(const fx *x, const char *method, const char *path, const char *headers) {
    char req[1024];
    snprintf(req, sizeof req, "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n%s\r\n", method,
             path, headers);
    struct sockaddr_in a = {.sin_family = AF_INET,
                            .sin_port = htons((uint16_t)x->cfg.server.port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof a), 0);
    struct timeval tv = {.tv_sec = LOOPBACK_REPLY_MS / 1000};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    assert_int_equal(send(fd, req, strlen(req), MSG_NOSIGNAL), (ssize_t)strlen(req));
    reply r = {.raw = malloc(REPLY_MAX + 1)};
    assert_non_null(r.raw);
    ssize_t n = 0;
    while (r.len < REPLY_MAX && (n = read(fd, r.raw + r.len, REPLY_MAX - r.len)) > 0)
        r.len += (size_t)n;
    loopback_check_io(n, (uint16_t)x->cfg.server.port);
    close(fd);
    r.raw[r.len] = '\0';
    assert_int_equal(sscanf(r.raw, "HTTP/1.1 %d", &r.status), 1);
    char *end = strstr(r.raw, "\r\n\r\n");
    assert_non_null(end);
    end[2] = '\0'; /* the head ends with its last header's \r\n */
    r.body = end + 4;
    r.body_len = r.len - (size_t)(r.body - r.raw);
    return r;
}

/* The value of header name in r's head (copied into out), or NULL. */
static const char *header(char out[512], const reply *r, const char *name) {
    size_t n = strlen(name);
    for (const char *line = strstr(r->raw, "\r\n"); line && line[2];
         line = strstr(line + 2, "\r\n")) {
        const char *h = line + 2;
        if (strncasecmp(h, name, n) == 0 && h[n] == ':') {
            const char *v = h + n + 1 + strspn(h + n + 1, " ");
            snprintf(out, 512, "%.*s", (int)strcspn(v, "\r"), v);
            return out;
        }
    }
    return NULL;
}

static void assert_header(const reply *r, const char *name, const char *want) {
    char v[512];
    if (!header(v, r, name))
        fail_msg("no %s header in:\n%s", name, r->raw);
    assert_string_equal(v, want);
}

static void accept_encoding_negotiates_gzip(void **state) {
    static const struct {
        const char *header;
        bool gzip;
    } cases[] = {
        {NULL, false},
        {"", false},
        {"gzip", true},
        {"GZip", true},
        {"x-gzip", true},
        {"gzip, deflate, br", true},
        {"deflate, br, zstd", false},
        {" br ,  gzip ; q=0.5 ", true},
        {"gzip;q=1", true},
        {"gzip;q=1.000", true},
        {"gzip;q=0.001", true},
        {"gzip;Q=0.8", true},
        {"gzip;level=9;q=0.2", true},
        {"gzip;q=0", false},
        {"gzip;q=0.000", false},
        {"gzip;q=0.0000", false}, /* four decimals: malformed, so zero */
        {"gzip;q=1.5", false},
        {"gzip;q=2", false},
        {"gzip;q=", false},
        {"gzip;q=abc", false},
        {"gzip;q=-1", false},
        {"*", true},
        {"*;q=0", false},
        {"*, gzip;q=0", false}, /* named wins over the wildcard */
        {"gzip;q=0, *", false},
        {"identity, *;q=0.1", true},
        {"gzipx", false},
        {"xgzip", false},
        {",,,", false},
        {";;;q=1", false},
        {"gzip;q=0, gzip", true},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        if (web_accepts_gzip(cases[i].header) != cases[i].gzip)
            fail_msg("Accept-Encoding: '%s' should %saccept gzip", or_empty(cases[i].header),
                     cases[i].gzip ? "" : "not ");
}

static void if_none_match_uses_weak_comparison(void **state) {
    const char *tag = "\"0123456789abcdef0123456789abcdef\"";
    static const struct {
        const char *header;
        bool match;
    } cases[] = {
        {NULL, false},
        {"", false},
        {"*", true},
        {"\"0123456789abcdef0123456789abcdef\"", true},
        {"W/\"0123456789abcdef0123456789abcdef\"", true},
        {"\"other\", \"0123456789abcdef0123456789abcdef\"", true},
        {" \"a\" ,W/\"0123456789abcdef0123456789abcdef\" ", true},
        {"\"0123456789abcdef0123456789abcde\"", false},
        {"\"0123456789abcdef0123456789abcdef0\"", false},
        {"0123456789abcdef0123456789abcdef", false},
        {"\"0123456789abcdef0123456789abcdef", false},
        {"w/\"0123456789abcdef0123456789abcdef\"", false},
        {"junk, \"0123456789abcdef0123456789abcdef\"", false}, /* broken before the tag */
        {"\"a\"\"0123456789abcdef0123456789abcdef\"", true},
        {",,,", false},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++)
        if (web_etag_match(cases[i].header, tag) != cases[i].match)
            fail_msg("If-None-Match: '%s' should %smatch", or_empty(cases[i].header),
                     cases[i].match ? "" : "not ");
    assert_false(web_etag_match("*", NULL));
}

static bool etag_valid(const char *etag) {
    if (!etag || strlen(etag) != 34 || etag[0] != '"' || etag[33] != '"')
        return false;
    for (int i = 1; i < 33; i++)
        if (!strchr("0123456789abcdef", etag[i]))
            return false;
    return true;
}

/* Every embedded file: a plain name, a type from the allow-list, a strong
 * ETag, and a gzip copy (when there is one) that is smaller and tagged
 * apart. The page and the two libraries from Debian are there. */
static void embedded_table_is_whole(void **state) {
    static const char *const types[] = {"text/html; charset=utf-8",
                                        "text/javascript; charset=utf-8", "text/css; charset=utf-8",
                                        "image/svg+xml"};
    assert_true(web_assets_count >= 4);
    for (size_t i = 0; i < web_assets_count; i++) {
        const web_asset *a = &web_assets[i];
        assert_int_equal(strspn(a->name, "abcdefghijklmnopqrstuvwxyz0123456789.-"),
                         strlen(a->name));
        bool known = false;
        for (size_t t = 0; t < ARRAY_LEN(types); t++)
            known |= strcmp(a->content_type, types[t]) == 0;
        assert_true(known);
        assert_true(a->len > 0);
        assert_true(etag_valid(a->etag));
        assert_ptr_equal(web_asset_find(a->name), a);
        if (a->gzip_body) {
            assert_true(a->gzip_len < a->len);
            assert_true(etag_valid(a->gzip_etag));
            assert_string_not_equal(a->gzip_etag, a->etag);
        } else {
            assert_null(a->gzip_etag);
        }
    }
    assert_non_null(web_asset_find(WEB_INDEX));
    assert_non_null(web_asset_find("marked.min.js"));
    assert_non_null(web_asset_find("purify.min.js"));
    assert_null(web_asset_find("../index.html"));
    assert_null(web_asset_find("INDEX.HTML"));
    assert_null(web_asset_find(""));
    assert_null(web_asset_find(NULL));
}

static void assert_web_headers(const reply *r, const web_asset *a) {
    assert_header(r, "Content-Security-Policy", CSP);
    assert_header(r, "X-Content-Type-Options", "nosniff");
    assert_header(r, "Cache-Control", "no-cache");
    assert_header(r, "Referrer-Policy", "no-referrer");
    assert_header(r, "Content-Type", a->content_type);
}

/* GET / is the page, public, with its policy; /assets/<name> each file. */
static void page_and_assets_served_with_policy(void **state) {
    fx *x = *state;
    const web_asset *page = web_asset_find(WEB_INDEX);
    reply r = get(x, "GET", "/", "");
    assert_int_equal(r.status, 200);
    assert_web_headers(&r, page);
    assert_header(&r, "ETag", page->etag);
    assert_int_equal(r.body_len, page->len);
    assert_memory_equal(r.body, page->body, page->len);
    reply_free(&r);
    for (size_t i = 0; i < web_assets_count; i++) {
        const web_asset *a = &web_assets[i];
        if (a == page)
            continue;
        char path[128];
        snprintf(path, sizeof path, "/assets/%s", a->name);
        r = get(x, "GET", path, "");
        assert_int_equal(r.status, 200);
        assert_web_headers(&r, a);
        assert_header(&r, "ETag", a->etag);
        assert_int_equal(r.body_len, a->len);
        assert_memory_equal(r.body, a->body, a->len);
        reply_free(&r);
    }
}

/* A client holding the current copy gets 304 without a body; another
 * ETag, or a gzip tag for the identity copy, gets the file. */
static void current_copy_answered_304(void **state) {
    fx *x = *state;
    const web_asset *a = web_asset_find("marked.min.js");
    assert_non_null(a->gzip_body);
    char h[256];
    snprintf(h, sizeof h, "If-None-Match: \"x\", %s\r\n", a->etag);
    reply r = get(x, "GET", "/assets/marked.min.js", h);
    assert_int_equal(r.status, 304);
    assert_int_equal(r.body_len, 0);
    assert_header(&r, "ETag", a->etag);
    assert_header(&r, "Content-Security-Policy", CSP);
    reply_free(&r);
    snprintf(h, sizeof h, "If-None-Match: %s\r\n", a->gzip_etag);
    r = get(x, "GET", "/assets/marked.min.js", h);
    assert_int_equal(r.status, 200);
    assert_int_equal(r.body_len, a->len);
    reply_free(&r);
    snprintf(h, sizeof h, "Accept-Encoding: gzip\r\nIf-None-Match: W/%s\r\n", a->gzip_etag);
    r = get(x, "GET", "/assets/marked.min.js", h);
    assert_int_equal(r.status, 304);
    reply_free(&r);
}

/* gzip only to a client that accepts it, tagged as its own representation. */
static void gzip_sent_when_accepted(void **state) {
    fx *x = *state;
    const web_asset *a = web_asset_find("marked.min.js");
    reply r = get(x, "GET", "/assets/marked.min.js", "Accept-Encoding: br, gzip\r\n");
    assert_int_equal(r.status, 200);
    assert_header(&r, "Content-Encoding", "gzip");
    assert_header(&r, "Vary", "Accept-Encoding");
    assert_header(&r, "ETag", a->gzip_etag);
    assert_int_equal(r.body_len, a->gzip_len);
    assert_memory_equal(r.body, a->gzip_body, a->gzip_len);
    reply_free(&r);
    r = get(x, "GET", "/assets/marked.min.js", "Accept-Encoding: gzip;q=0\r\n");
    assert_int_equal(r.status, 200);
    char v[512];
    assert_null(header(v, &r, "Content-Encoding"));
    assert_int_equal(r.body_len, a->len);
    reply_free(&r);
}

/* Only the table's names are files: the page is not an asset, no path
 * leads elsewhere, and every other path keeps its answer (404 outside
 * /api, 401 inside it, 405 for another method). */
static void other_paths_are_not_the_page(void **state) {
    fx *x = *state;
    static const struct {
        const char *method, *path;
        int status;
    } cases[] = {
        {"GET", "/assets/index.html", 404},
        {"GET", "/assets/nope.js", 404},
        {"GET", "/assets/..%2findex.html", 404},
        {"GET", "/assets/../etc/passwd", 404},
        {"GET", "/assets/", 404},
        {"GET", "/assets/app.js/x", 404},
        {"GET", "/index.html", 404},
        {"GET", "/t/abc", 404},
        {"GET", "/favicon.ico", 404},
        {"GET", "/api/nope", 401},
        {"POST", "/", 405},
        {"PUT", "/assets/app.js", 405},
    };
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        reply r = get(x, cases[i].method, cases[i].path, "Content-Length: 0\r\n");
        if (r.status != cases[i].status)
            fail_msg("%s %s: %d, want %d", cases[i].method, cases[i].path, r.status,
                     cases[i].status);
        reply_free(&r);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(accept_encoding_negotiates_gzip),
        cmocka_unit_test(if_none_match_uses_weak_comparison),
        cmocka_unit_test(embedded_table_is_whole),
        cmocka_unit_test_setup_teardown(page_and_assets_served_with_policy, setup, teardown),
        cmocka_unit_test_setup_teardown(current_copy_answered_304, setup, teardown),
        cmocka_unit_test_setup_teardown(gzip_sent_when_accepted, setup, teardown),
        cmocka_unit_test_setup_teardown(other_paths_are_not_the_page, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
