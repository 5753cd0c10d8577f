/* research: the network allow-list the research tools connect through. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <string.h>

#include "research/research.h"
#include "unit/fake_http.h"

/* A socket address for text (IPv4 or IPv6) and port. */
static struct sockaddr_storage sockaddr_of(const char *text, uint16_t port) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *in = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, text, &in->sin_addr) == 1) {
        in->sin_family = AF_INET;
        in->sin_port = htons(port);
    } else if (inet_pton(AF_INET6, text, &in6->sin6_addr) == 1) {
        in6->sin6_family = AF_INET6;
        in6->sin6_port = htons(port);
    } else {
        fail_msg("not an address: %s", text);
    }
    return ss;
}

static bool public(const char *text) {
    struct sockaddr_storage ss = sockaddr_of(text, 80);
    return net_addr_public((struct sockaddr *)&ss);
}

static void only_globally_reachable_addresses_are_public(void **state) {
    (void)state;
    static const char *const global[] = {"8.8.8.8",
                                         "1.1.1.1",
                                         "93.184.216.34",
                                         "2606:4700::1111",
                                         "2a00:1450:4001::200e",
                                         "::ffff:8.8.8.8",
                                         "2002:808:808::1"};
    for (size_t i = 0; i < ARRAY_LEN(global); i++)
        if (!public(global[i]))
            fail_msg("%s must be public", global[i]);
    static const char *const special[] = {"127.0.0.1",
                                          "127.255.255.254",
                                          "0.0.0.0",
                                          "10.1.2.3",
                                          "172.16.0.1",
                                          "172.31.255.255",
                                          "192.168.1.1",
                                          "169.254.169.254",
                                          "169.254.0.1",
                                          "100.64.0.1",
                                          "100.127.255.255",
                                          "192.0.0.170",
                                          "192.0.2.1",
                                          "198.18.0.1",
                                          "198.51.100.7",
                                          "203.0.113.9",
                                          "224.0.0.1",
                                          "239.255.255.250",
                                          "240.0.0.1",
                                          "255.255.255.255",
                                          "::",
                                          "::1",
                                          "fe80::1",
                                          "fc00::1",
                                          "fd00:ec2::254",
                                          "ff02::1",
                                          "::ffff:127.0.0.1",
                                          "::ffff:169.254.169.254",
                                          "::ffff:10.0.0.1",
                                          "64:ff9b::7f00:1",
                                          "2002:7f00:1::",
                                          "2002:a9fe:a9fe::1",
                                          "2001::1",
                                          "2001:0:4136:e378:8000:63bf:3fff:fdd2",
                                          "2001:db8::1",
                                          "3fff::1",
                                          "100::1",
                                          "::127.0.0.1"};
    for (size_t i = 0; i < ARRAY_LEN(special); i++)
        if (public(special[i]))
            fail_msg("%s must not be public", special[i]);
    struct sockaddr unix_addr = {.sa_family = AF_UNIX};
    assert_false(net_addr_public(&unix_addr));
    assert_false(net_addr_public(NULL));
}

static bool allowed(const net_allowlist *al, const char *host, const char *addr, uint16_t port) {
    struct sockaddr_storage ss = sockaddr_of(addr, port);
    return net_connect_allowed(al, host, (struct sockaddr *)&ss);
}

static void the_allow_list_opens_named_hosts_ranges_and_ports_only(void **state) {
    (void)state;
    json_t *list = json_loads(
        "[\"127.0.0.1:8123\", \"Intranet.Example\", \"wiki.example:8443\","
        " \"10.20.0.0/16\", \"[fd00::/8]:443\", \"fd12::7\", \"192.168.5.5\"]",
        0, NULL);
    net_allowlist al;
    assert_int_equal(net_allowlist_parse(&al, list, "web.allow"), 0);
    json_decref(list);
    assert_int_equal(al.n, 7);

    assert_true(allowed(&al, "127.0.0.1", "127.0.0.1", 8123));
    assert_false(allowed(&al, "127.0.0.1", "127.0.0.1", 8124)); /* another port */
    assert_false(allowed(&al, "localhost", "127.0.0.2", 8123)); /* another address */
    assert_true(allowed(&al, "intranet.example", "10.9.9.9", 80));
    assert_true(allowed(&al, "INTRANET.example", "192.168.0.3", 443));
    assert_false(allowed(&al, "intranet.example.evil", "10.9.9.9", 80));
    assert_true(allowed(&al, "wiki.example", "10.0.0.5", 8443));
    assert_false(allowed(&al, "wiki.example", "10.0.0.5", 443));
    assert_true(allowed(&al, "any.example", "10.20.3.4", 80));
    assert_false(allowed(&al, "any.example", "10.21.3.4", 80));
    assert_true(allowed(&al, NULL, "fd00::1", 443));
    assert_false(allowed(&al, NULL, "fd00::1", 80));
    assert_true(allowed(&al, NULL, "fd12::7", 22));
    assert_true(allowed(&al, NULL, "::ffff:192.168.5.5", 80));
    /* The metadata address is reachable only when named. */
    assert_false(allowed(&al, "intranet.example.", "169.254.169.254", 80));
    assert_false(allowed(&al, NULL, "169.254.169.254", 80));
    /* A public address needs no entry. */
    assert_true(allowed(&al, "example.com", "93.184.216.34", 443));
    assert_true(allowed(NULL, NULL, "93.184.216.34", 443));
    assert_false(allowed(NULL, "localhost", "127.0.0.1", 80));
    net_allowlist_free(&al);

    static const char *const bad[] = {
        "[\"\"]",
        "[\"host:0\"]",
        "[\"host:65536\"]",
        "[\"host:\"]",
        "[\"-host\"]",
        "[\"host-.example\"]",
        "[\"a..b\"]",
        "[\"10.0.0.0/33\"]",
        "[\"fd00::/129\"]",
        "[\"[fd00::1]x\"]",
        "[\"[fd00::1\"]",
        "[\"ho st\"]",
        "[\"10.0.0.1/-1\"]",
        "[\"10.0.0.1/\"]",
        "[42]",
        "{\"a\": 1}",
        "[\"host:+80\"]",
        "[\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa.example\"]"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        json_t *b = json_loads(bad[i], JSON_DECODE_ANY, NULL);
        assert_non_null(b);
        al.n = 99;
        assert_int_equal(net_allowlist_parse(&al, b, "web.allow"), FAWN_ECONFIG);
        assert_int_equal(al.n, 0);
        assert_null(al.entries);
        json_decref(b);
    }
    assert_int_equal(net_allowlist_parse(&al, NULL, "web.allow"), 0);
    assert_int_equal(al.n, 0);
}

/* ---- web_fetch against a fake web on loopback ---- */

static const web_fetch_limits small = {.max_bytes = 64, .timeout_ms = 60000};

/* An allow-list naming the fake server's port on 127.0.0.1 only. */
static net_allowlist allow_port(uint16_t port) {
    char entry[64];
    snprintf(entry, sizeof entry, "[\"127.0.0.1:%u\"]", port);
    json_t *list = json_loads(entry, 0, NULL);
    net_allowlist al;
    assert_int_equal(net_allowlist_parse(&al, list, "web.allow"), 0);
    json_decref(list);
    return al;
}

static char *url_of(const fake_server *s, const char *path) {
    return strf("http://127.0.0.1:%u%s", s->port, path);
}

static void fetch_reads_a_page_and_cuts_it_at_the_cap(void **state) {
    (void)state;
    const response page[] = {
        {.head = "HTTP/1.1 200 OK\r\nContent-Type: Text/HTML; Charset=\"ISO-8859-1\"",
         .body = "<html><body><p>hello</p></body></html>"}};
    fake_server *s = server_start(page, ARRAY_LEN(page));
    net_allowlist al = allow_port(s->port);
    char *url = url_of(s, "/a");
    web_page p;
    assert_int_equal(web_fetch(&p, url, &al, &small, NULL), 0);
    assert_int_equal(p.status, 200);
    assert_string_equal(p.content_type, "text/html");
    assert_string_equal(p.charset, "iso-8859-1");
    assert_string_equal(p.body, "<html><body><p>hello</p></body></html>");
    assert_false(p.truncated);
    assert_string_equal(p.final_url, url);
    check_contains("request", s->request, "GET /a HTTP/1.1");
    web_page_clear(&p);
    server_stop(s);

    static char big[100000];
    memset(big, 'x', sizeof big - 1);
    const response huge[] = {
        {.head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain", .body = big, .chunk = 4096}};
    s = server_start(huge, ARRAY_LEN(huge));
    net_allowlist_free(&al);
    al = allow_port(s->port);
    free(url);
    url = url_of(s, "/big");
    assert_int_equal(web_fetch(&p, url, &al, &small, NULL), 0);
    assert_true(p.truncated);
    assert_int_equal(p.len, small.max_bytes);
    assert_int_equal(strlen(p.body), small.max_bytes);
    web_page_clear(&p);
    server_stop(s);
    net_allowlist_free(&al);
    free(url);
}

static void fetch_refuses_what_the_allow_list_does_not_open(void **state) {
    (void)state;
    const response ok[] = {
        {.head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain", .body = "secret"}};
    fake_server *s = server_start(ok, ARRAY_LEN(ok));
    char *url = url_of(s, "/");
    web_page p;
    /* Loopback without an entry, by address, by name, and in other spellings. */
    assert_int_equal(web_fetch(&p, url, NULL, &small, NULL), FAWN_EPERM);
    assert_null(p.body);
    char *forms[] = {strf("http://localhost:%u/", s->port), strf("http://2130706433:%u/", s->port),
                     strf("http://0x7f.1:%u/", s->port),
                     strf("http://[::ffff:127.0.0.1]:%u/", s->port)};
    for (size_t i = 0; i < ARRAY_LEN(forms); i++) {
        int r = web_fetch(&p, forms[i], NULL, &small, NULL);
        if (r != FAWN_EPERM && r != FAWN_EINVAL)
            fail_msg("%s: %d (%s)", forms[i], r, fawn_errmsg());
        web_page_clear(&p);
        free(forms[i]);
    }
    assert_int_equal(atomic_load(&s->served), 0);

    /* Not http(s), or with credentials. */
    const char *bad[] = {"file:///etc/passwd",          "ftp://example.com/", "gopher://127.0.0.1/",
                         "http://user:pw@example.com/", "not a url",          "http://"};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        assert_int_equal(web_fetch(&p, bad[i], NULL, &small, NULL), FAWN_EINVAL);
        web_page_clear(&p);
    }
    server_stop(s);
    free(url);
}

static void each_redirect_is_checked_again(void **state) {
    (void)state;
    /* An allowed server that redirects to loopback on another port, to the
     * metadata address, and to a file URL: each refused; a redirect to
     * itself is followed. */
    fake_server *target = server_start(
        (const response[]){
            {.head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain", .body = "inside"}},
        1);
    char *to_target = strf("HTTP/1.1 302 Found\r\nLocation: http://127.0.0.1:%u/", target->port);
    const response hops[] = {
        {.head = to_target, .body = ""},
        {.head = "HTTP/1.1 301 Moved\r\nLocation: http://169.254.169.254/latest/meta-data/",
         .body = ""},
        {.head = "HTTP/1.1 302 Found\r\nLocation: file:///etc/passwd", .body = ""},
        {.head = "HTTP/1.1 302 Found\r\nLocation: /final", .body = ""},
        {.head = "HTTP/1.1 200 OK\r\nContent-Type: text/plain", .body = "landed"},
    };
    fake_server *s = server_start(hops, ARRAY_LEN(hops));
    net_allowlist al = allow_port(s->port);
    char *url = url_of(s, "/start");
    web_page p;
    assert_int_equal(web_fetch(&p, url, &al, &small, NULL), FAWN_EPERM);
    web_page_clear(&p);
    assert_int_equal(web_fetch(&p, url, &al, &small, NULL), FAWN_EPERM);
    check_contains("refusal", fawn_errmsg(), "169.254.169.254");
    web_page_clear(&p);
    assert_int_equal(web_fetch(&p, url, &al, &small, NULL), FAWN_EINVAL);
    web_page_clear(&p);
    assert_int_equal(web_fetch(&p, url, &al, &small, NULL), 0);
    assert_string_equal(p.body, "landed");
    assert_int_equal(p.redirects, 1);
    char *final = url_of(s, "/final");
    assert_string_equal(p.final_url, final);
    web_page_clear(&p);
    assert_int_equal(atomic_load(&target->served), 0);
    server_stop(s);
    server_stop(target);
    net_allowlist_free(&al);
    free(url);
    free(final);
    free(to_target);

    /* A redirect loop ends after WEB_REDIRECTS_MAX. */
    const response loop[] = {{.head = "HTTP/1.1 302 Found\r\nLocation: /again", .body = ""}};
    s = server_start(loop, ARRAY_LEN(loop));
    al = allow_port(s->port);
    url = url_of(s, "/again");
    assert_int_equal(web_fetch(&p, url, &al, &small, NULL), FAWN_EIO);
    check_contains("loop", fawn_errmsg(), "redirects");
    assert_int_equal(atomic_load(&s->served), WEB_REDIRECTS_MAX + 1);
    web_page_clear(&p);
    server_stop(s);
    net_allowlist_free(&al);
    free(url);
}

static void a_slow_page_times_out_and_a_cancel_stops_it(void **state) {
    (void)state;
    const response slow[] = {
        {"HTTP/1.1 200 OK\r\nContent-Type: text/plain", "abc", 1, 0, END_HANG}};
    fake_server *s = server_start(slow, ARRAY_LEN(slow));
    net_allowlist al = allow_port(s->port);
    char *url = url_of(s, "/slow");
    const web_fetch_limits quick = {.max_bytes = 64, .timeout_ms = 200};
    web_page p;
    assert_int_equal(web_fetch(&p, url, &al, &quick, NULL), FAWN_ETIMEDOUT);
    web_page_clear(&p);
    atomic_bool cancel = true;
    assert_int_equal(web_fetch(&p, url, &al, &small, &cancel), FAWN_ECANCELED);
    web_page_clear(&p);
    server_stop(s);
    net_allowlist_free(&al);
    free(url);
}

/* ---- web_html_text ---- */

static char *page_text(const char *html, const char *charset) {
    char *out = NULL;
    int r = web_html_text(&out, html, strlen(html), charset);
    if (r < 0)
        fail_msg("web_html_text: %d (%s)", r, fawn_errmsg());
    return out;
}

static void html_becomes_the_main_contents_text(void **state) {
    (void)state;
    char *t = page_text(
        "<!doctype html><html><head><title> The  Title </title><style>p{color:red}</style>"
        "<script>alert('x')</script></head><body><nav><a href=/home>Home</a></nav>"
        "<main><h1>Big   heading</h1><p>First <b>bold</b>\n paragraph with a "
        "<a href=\"https://example.com/x\">link</a> and <a href=\"javascript:evil()\">no link</a>."
        "</p><ul><li>one</li><li>two<ul><li>nested</li></ul></li></ul>"
        "<pre>  keep\n    spacing</pre><table><tr><td>a</td><td>b</td></tr></table>"
        "<form><input value=secret></form><p>line<br>break</p></main>"
        "<footer>copyright</footer></body></html>",
        NULL);
    assert_string_equal(t,
                        "Title: The Title\n\n"
                        "# Big heading\n\n"
                        "First bold paragraph with a [link](https://example.com/x) and no link.\n\n"
                        "- one\n- two\n  - nested\n\n"
                        "```\n  keep\n    spacing\n```\n\n"
                        "a | b |\n\n"
                        "line\nbreak");
    free(t);
    /* Without <main>: the article; without either: the body. */
    t = page_text("<body><div>menu</div><article><p>story</p></article></body>", NULL);
    assert_string_equal(t, "story");
    free(t);
    t = page_text("just text, no tags", NULL);
    assert_string_equal(t, "just text, no tags");
    free(t);
}

static void charsets_and_broken_bytes_end_as_valid_utf8(void **state) {
    (void)state;
    char *t = page_text("<p>caf\xe9</p>", "iso-8859-1");
    assert_string_equal(t, "caf\xc3\xa9");
    free(t);
    t = page_text("<meta charset=\"windows-1252\"><p>\x93quoted\x94</p>", NULL);
    assert_string_equal(t, "\xe2\x80\x9cquoted\xe2\x80\x9d");
    free(t);
    t = page_text("<p>bad \xff\xfe utf-8 \xe2\x82</p>", "utf-8");
    json_t *valid = json_string(t); /* jansson accepts valid UTF-8 only */
    assert_non_null(valid);
    json_decref(valid);
    check_contains("replaced", t, "bad \xef\xbf\xbd\xef\xbf\xbd utf-8");
    free(t);
    char *out = (char *)1;
    assert_int_equal(web_html_text(&out, "<p>x</p>", 8, "no-such-charset"), FAWN_EUNSUP);
    assert_null(out);
}

static void deep_and_huge_pages_are_bounded(void **state) {
    (void)state;
    /* 300 000 nested elements: quadratic for an HTML5 parser, and past any
     * stack for one that recurses; the tags past the bound are dropped. */
    size_t depth = 300000;
    fbuf b = {0};
    for (size_t i = 0; i < depth; i++)
        assert_int_equal(fbuf_append(&b, "<div>", 5), 0);
    assert_int_equal(fbuf_append(&b, "deep", 4), 0);
    char *out = NULL;
    assert_int_equal(web_html_text(&out, b.data, b.len, NULL), 0);
    assert_string_equal(out, "deep");
    free(out);
    fbuf_free(&b);
    /* Unclosed elements count as open: past the bound their tags go, never their text. */
    for (size_t i = 0; i < 1000; i++)
        assert_int_equal(fbuf_printf(&b, "<p class='a>b'>p%zu", i), 0);
    assert_int_equal(web_html_text(&out, b.data, b.len, NULL), 0);
    check_contains("first", out, "p0\n\np1\n\n");
    check_contains("last", out, "p998 p999");
    check_lacks("attribute", out, "b'");
    free(out);
    fbuf_free(&b);
    static char big[WEB_HTML_MAX + 1];
    memset(big, 'a', sizeof big);
    out = (char *)1;
    assert_int_equal(web_html_text(&out, big, sizeof big, NULL), FAWN_E2BIG);
    assert_null(out);
}

/* Each user has web.rate_limit_per_minute calls a minute, refilled evenly:
 * past it a call is refused with the wait until the next; other users are
 * not touched, and the table of users stays bounded. */
static void each_user_has_a_rate_limit(void **state) {
    fawn_web_config cfg = {
        .fetch_enabled = true, .fetch_timeout_s = 5, .fetch_max_kb = 64, .rate_per_minute = 2};
    web_service *s;
    assert_int_equal(web_service_open(&s, &cfg), 0);
    int64_t wait = -1;
    assert_int_equal(web_service_admit(&wait, s, "alice"), 0);
    assert_int_equal(wait, 0);
    assert_int_equal(web_service_admit(&wait, s, "alice"), 0);
    assert_int_equal(web_service_admit(&wait, s, "alice"), FAWN_EBUSY);
    /* One call comes back every 30 s. */
    assert_true(wait > 0 && wait <= 30000);
    assert_int_equal(web_service_admit(&wait, s, "bob"), 0);
    /* Many other users push alice out of the table only when it is full,
     * and then she starts again with a full allowance. */
    char user[32];
    for (int i = 0; i < WEB_RATE_USERS_MAX; i++) {
        snprintf(user, sizeof user, "u%d", i);
        assert_int_equal(web_service_admit(&wait, s, user), 0);
    }
    assert_int_equal(web_service_admit(&wait, s, "alice"), 0);
    web_service_free(s);
    /* An allow-list that does not parse is refused at open. */
    cfg.allow = json_pack("[s]", "not a host!");
    s = (web_service *)1;
    assert_int_equal(web_service_open(&s, &cfg), FAWN_ECONFIG);
    assert_null(s);
    json_decref(cfg.allow);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(only_globally_reachable_addresses_are_public),
        cmocka_unit_test(the_allow_list_opens_named_hosts_ranges_and_ports_only),
        cmocka_unit_test(fetch_reads_a_page_and_cuts_it_at_the_cap),
        cmocka_unit_test(fetch_refuses_what_the_allow_list_does_not_open),
        cmocka_unit_test(each_redirect_is_checked_again),
        cmocka_unit_test(a_slow_page_times_out_and_a_cancel_stops_it),
        cmocka_unit_test(html_becomes_the_main_contents_text),
        cmocka_unit_test(charsets_and_broken_bytes_end_as_valid_utf8),
        cmocka_unit_test(deep_and_huge_pages_are_bounded),
        cmocka_unit_test(each_user_has_a_rate_limit),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
