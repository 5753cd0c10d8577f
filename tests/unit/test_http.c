/* Unit tests for the box HTTP server: the request-head parser, query
 * decoding, and a real server on a unix socket driven by plain sockets. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "box/http.h"

/* ---- parser helpers ----------------------------------------------------- */

/* The last parsed copy: an exact-size heap buffer, so ASan catches any read
 * past its end; freed by the next parse and at exit. */
static char *parsed_buf;

static int parse_n(http_request *req, size_t *head_len, int *status, const char *data, size_t len) {
    free(parsed_buf);
    parsed_buf = malloc(len ? len : 1);
    assert_non_null(parsed_buf);
    memcpy(parsed_buf, data, len);
    *status = 0;
    *head_len = 0;
    return http_parse_head(req, head_len, status, parsed_buf, len);
}

static int parse(http_request *req, const char *text) {
    size_t head_len;
    int status;
    return parse_n(req, &head_len, &status, text, strlen(text));
}

static void expect_reject_n(const char *data, size_t len, int want_status) {
    http_request req;
    size_t head_len;
    int status;
    int rc = parse_n(&req, &head_len, &status, data, len);
    if (rc >= 0 || status != want_status)
        fail_msg("expected %d, got rc=%d status=%d for: %.*s", want_status, rc, status, (int)len,
                 data);
}

static void expect_reject(const char *text, int want_status) {
    expect_reject_n(text, strlen(text), want_status);
}

/* ---- parser: accepted heads --------------------------------------------- */

static void test_parse_valid_get(void **state) {
    http_request req;
    size_t head_len;
    int status;
    const char *text = "GET /files/a%20b?path=x&y=1 HTTP/1.1\r\n"
                       "Host: box\r\n"
                       "X-Spaces: \t padded value \t\r\n"
                       "Empty:\r\n"
                       "\r\n";
    assert_int_equal(parse_n(&req, &head_len, &status, text, strlen(text)), 0);
    assert_int_equal(head_len, strlen(text));
    assert_string_equal(req.method, "GET");
    assert_string_equal(req.path, "/files/a%20b");
    assert_string_equal(req.query, "path=x&y=1");
    assert_int_equal(req.n_headers, 3);
    assert_int_equal(req.version_minor, 1);
    assert_true(req.keep_alive);
    assert_int_equal(req.content_length, -1);
    assert_string_equal(http_header_get(&req, "host"), "box");
    assert_string_equal(http_header_get(&req, "X-SPACES"), "padded value");
    assert_string_equal(http_header_get(&req, "empty"), "");
    assert_null(http_header_get(&req, "Content-Length"));
}

static void test_parse_no_query(void **state) {
    http_request req;
    assert_int_equal(parse(&req, "DELETE /sessions/abc HTTP/1.1\r\n\r\n"), 0);
    assert_string_equal(req.method, "DELETE");
    assert_string_equal(req.path, "/sessions/abc");
    assert_null(req.query);
    assert_int_equal(parse(&req, "GET /x? HTTP/1.1\r\n\r\n"), 0);
    assert_string_equal(req.path, "/x");
    assert_string_equal(req.query, "");
}

static void test_parse_pipelined_head_len(void **state) {
    http_request req;
    size_t head_len;
    int status;
    const char *head = "POST /exec HTTP/1.1\r\nContent-Length: 5\r\n\r\n";
    char text[256];
    snprintf(text, sizeof text, "%shelloGET /next HTTP/1.1\r\n\r\n", head);
    assert_int_equal(parse_n(&req, &head_len, &status, text, strlen(text)), 0);
    assert_int_equal(head_len, strlen(head));
    assert_int_equal(req.content_length, 5);
    assert_memory_equal(parsed_buf + head_len, "hello", 5);
    /* The bytes after the head are untouched and parse as the next request. */
    http_request next;
    size_t next_len;
    assert_int_equal(http_parse_head(&next, &next_len, &status, parsed_buf + head_len + 5,
                                     strlen(text) - head_len - 5),
                     0);
    assert_string_equal(next.path, "/next");
}

static void test_parse_keep_alive_rules(void **state) {
    http_request req;
    assert_int_equal(parse(&req, "GET / HTTP/1.0\r\n\r\n"), 0);
    assert_int_equal(req.version_minor, 0);
    assert_false(req.keep_alive);
    assert_int_equal(parse(&req, "GET / HTTP/1.0\r\nConnection: Keep-Alive\r\n\r\n"), 0);
    assert_true(req.keep_alive);
    assert_int_equal(parse(&req, "GET / HTTP/1.1\r\nConnection: CLOSE\r\n\r\n"), 0);
    assert_false(req.keep_alive);
    assert_int_equal(parse(&req, "GET / HTTP/1.1\r\nConnection: upgrade ,  Close \r\n\r\n"), 0);
    assert_false(req.keep_alive);
    assert_int_equal(parse(&req, "GET / HTTP/1.1\r\nConnection: closed, keep-alive\r\n\r\n"), 0);
    assert_true(req.keep_alive);
    assert_int_equal(
        parse(&req, "GET / HTTP/1.0\r\nConnection: keep-alive\r\nConnection: close\r\n\r\n"), 0);
    assert_false(req.keep_alive);
}

static void test_parse_expect_and_content_length(void **state) {
    http_request req;
    assert_int_equal(parse(&req, "PUT /f HTTP/1.1\r\nExpect: 100-continue\r\n"
                                 "Content-Length: 000000000000000007\r\n\r\n"),
                     0);
    assert_int_equal(req.content_length, 7);
    assert_string_equal(http_header_get(&req, "expect"), "100-continue");
    assert_int_equal(parse(&req, "PUT /f HTTP/1.1\r\nContent-Length: 999999999999999999\r\n\r\n"),
                     0);
    assert_int_equal(req.content_length, 999999999999999999LL);
    assert_int_equal(parse(&req, "PUT /f HTTP/1.1\r\nContent-Length: 0\r\n\r\n"), 0);
    assert_int_equal(req.content_length, 0);
}

/* ---- parser: incomplete input ------------------------------------------- */

static void test_parse_incomplete(void **state) {
    http_request req;
    assert_int_equal(parse(&req, ""), 1);
    assert_int_equal(parse(&req, "GET / HTTP/1.1"), 1);
    assert_int_equal(parse(&req, "GET / HTTP/1.1\r\nHost: x\r\n"), 1);
    assert_int_equal(parse(&req, "GET / HTTP/1.1\r\nHost: x\r\n\r"), 1);
}

/* Every strict prefix of a valid head is incomplete, never an error, and the
 * exact-size copies let ASan catch a read past the end. */
static void test_parse_every_prefix(void **state) {
    const char *text = "POST /a?b=c HTTP/1.1\r\nHost: h\r\nContent-Length: 3\r\n"
                       "Connection: keep-alive\r\n\r\n";
    size_t n = strlen(text);
    http_request req;
    size_t head_len;
    int status;
    for (size_t len = 0; len < n; len++)
        assert_int_equal(parse_n(&req, &head_len, &status, text, len), 1);
    assert_int_equal(parse_n(&req, &head_len, &status, text, n), 0);
    assert_int_equal(head_len, n);
}

/* ---- parser: rejected request lines ------------------------------------- */

static void test_reject_request_line(void **state) {
    expect_reject("\r\n\r\n", 400);
    expect_reject("\r\nGET / HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET  / HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET /  HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1 \r\n\r\n", 400);
    expect_reject("GET /\r\n\r\n", 400);
    expect_reject("GET\r\n\r\n", 400);
    expect_reject(" GET / HTTP/1.1\r\n\r\n", 400);
    expect_reject("GE(T / HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET http://evil/ HTTP/1.1\r\n\r\n", 400);
    expect_reject("OPTIONS * HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET x/y HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET / http/1.1\r\n\r\n", 400);
    expect_reject("GET / HTTP/1\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.10\r\n\r\n", 400);
    expect_reject("GET / HTTP/2.0\r\n\r\n", 505);
    expect_reject("GET / HTTP/1.2\r\n\r\n", 505);
    expect_reject("GET / HTTP/0.9\r\n\r\n", 505);
    expect_reject("ABCDEFGHIJKLMNOP / HTTP/1.1\r\n\r\n", 501);
    http_request req;
    assert_int_equal(parse(&req, "ABCDEFGHIJKLMNO / HTTP/1.1\r\n\r\n"), 0);
    assert_string_equal(req.method, "ABCDEFGHIJKLMNO");
}

static void test_reject_target_bytes(void **state) {
    expect_reject_n("GET /a\0b HTTP/1.1\r\n\r\n", 21, 400);
    expect_reject_n("GET /a\0", 7, 400); /* refused before the head is complete */
    expect_reject("GET /a\tb HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET /a\x7f HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET /caf\xc3\xa9 HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET /a#frag HTTP/1.1\r\n\r\n", 400);
    expect_reject("GET /a\x01 HTTP/1.1\r\n\r\n", 400);
}

/* ---- parser: rejected header lines -------------------------------------- */

static void test_reject_header_syntax(void **state) {
    expect_reject("GET / HTTP/1.1\r\nHost : x\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nHost\t: x\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nNoColon\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\n: value\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nBad(Name): v\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nX-A: one\r\n  folded\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nX-A: one\r\n\tfolded\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nX-A: bell\x07\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nX-A: del\x7f\r\n\r\n", 400);
    expect_reject_n("GET / HTTP/1.1\r\nX-A: n\0l\r\n\r\n", 28, 400);
    expect_reject("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400);
}

static void test_reject_line_endings(void **state) {
    expect_reject("GET / HTTP/1.1\n\n", 400);
    expect_reject("GET / HTTP/1.1\nHost: x\r\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nHost: x\n\r\n", 400);
    expect_reject("GET / HTTP/1.1\r\nHost: x\r\n\n", 400);
    /* Refused as soon as it is seen, without waiting for more bytes. */
    expect_reject("GET / HTTP/1.1\n", 400);
    expect_reject("GET / HTTP/1.1\rX", 400);
    expect_reject("GET / HTTP/1.1\r\nA: b\rc\r\n\r\n", 400);
}

static void test_reject_too_many_headers(void **state) {
    char text[4096];
    size_t n = (size_t)snprintf(text, sizeof text, "GET / HTTP/1.1\r\n");
    for (int i = 0; i < HTTP_MAX_HEADERS; i++)
        n += (size_t)snprintf(text + n, sizeof text - n, "X-H%d: v\r\n", i);
    snprintf(text + n, sizeof text - n, "\r\n");
    http_request req;
    assert_int_equal(parse(&req, text), 0);
    assert_int_equal(req.n_headers, HTTP_MAX_HEADERS);
    snprintf(text + n, sizeof text - n, "X-One-Too-Many: v\r\n\r\n");
    expect_reject(text, 431);
}

/* A head of `size` bytes: request line, one big header, CRLFCRLF. */
static char *make_head(size_t size) {
    const char *start = "GET / HTTP/1.1\r\nX-Big: ";
    char *text = malloc(size + 1);
    assert_non_null(text);
    size_t s = strlen(start);
    memcpy(text, start, s);
    memset(text + s, 'a', size - s - 4);
    memcpy(text + size - 4, "\r\n\r\n", 5);
    return text;
}

static void test_reject_huge_head(void **state) {
    http_request req;
    size_t head_len;
    int status;
    char *text = make_head(HTTP_MAX_HEAD_BYTES);
    assert_int_equal(parse_n(&req, &head_len, &status, text, HTTP_MAX_HEAD_BYTES), 0);
    assert_int_equal(head_len, HTTP_MAX_HEAD_BYTES);
    free(text);
    text = make_head(HTTP_MAX_HEAD_BYTES + 1);
    expect_reject_n(text, HTTP_MAX_HEAD_BYTES + 1, 431);
    /* Incomplete but already at the limit: no point waiting for more. */
    expect_reject_n(text, HTTP_MAX_HEAD_BYTES, 431);
    free(text);
}

static void test_reject_content_length(void **state) {
    const char *bad[] = {"+5", "-1", "5 5", "0x10", "", "5,5", "5;", "1e3", "\xd9\xa3"};
    char text[256];
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        snprintf(text, sizeof text, "POST / HTTP/1.1\r\nContent-Length: %s\r\n\r\n", bad[i]);
        expect_reject(text, 400);
    }
    expect_reject("POST / HTTP/1.1\r\nContent-Length:  5 5 \r\n\r\n", 400);
    expect_reject("POST / HTTP/1.1\r\nContent-Length: 1000000000000000000\r\n\r\n", 413);
    expect_reject("POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n", 413);
    expect_reject("POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 400);
    expect_reject("POST / HTTP/1.1\r\nContent-Length: 5\r\ncontent-length: 6\r\n\r\n", 400);
}

static void test_reject_transfer_encoding(void **state) {
    expect_reject("POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501);
    expect_reject("POST / HTTP/1.1\r\ntransfer-encoding: identity\r\n\r\n", 501);
    expect_reject("POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
                  501);
}

/* ---- query -------------------------------------------------------------- */

static int query(char *out, size_t outsz, const char *q, const char *name) {
    http_request req = {.query = q};
    return http_query_get(out, outsz, &req, name);
}

static void test_query_decoding(void **state) {
    char out[64];
    assert_int_equal(query(out, sizeof out, "path=%2e%2e%2Fetc%2fpasswd&x=1", "path"), 0);
    assert_string_equal(out, "../etc/passwd");
    assert_int_equal(query(out, sizeof out, "a=1&q=hello+world%21&b", "q"), 0);
    assert_string_equal(out, "hello world!");
    assert_int_equal(query(out, sizeof out, "a=1&flag&b=2", "flag"), 0);
    assert_string_equal(out, "");
    assert_int_equal(query(out, sizeof out, "%70ath=enc&&x=", "path"), 0);
    assert_string_equal(out, "enc");
    assert_int_equal(query(out, sizeof out, "p=a=b", "p"), 0);
    assert_string_equal(out, "a=b");
    /* Decoded exactly once. */
    assert_int_equal(query(out, sizeof out, "p=%252e%252e", "p"), 0);
    assert_string_equal(out, "%2e%2e");
    assert_int_equal(query(out, sizeof out, "p=%C3%A9", "p"), 0);
    assert_string_equal(out, "\xc3\xa9");
}

static void test_query_refusals(void **state) {
    char out[8];
    assert_int_equal(query(out, sizeof out, "p=a%00b", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "p%00=a", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "p=%", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "p=%2", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "p=%zz", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "p=%+1", "p"), FAWN_EINVAL);
    /* A malformed neighbour spoils the whole query. */
    assert_int_equal(query(out, sizeof out, "p=ok&q=%G0", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "p=1&p=2", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "p=1&%70=2", "p"), FAWN_EINVAL);
    assert_int_equal(query(out, sizeof out, "pp=1&p2=2", "p"), FAWN_ENOENT);
    assert_int_equal(query(out, sizeof out, "", "p"), FAWN_ENOENT);
    assert_int_equal(query(out, sizeof out, NULL, "p"), FAWN_ENOENT);
    assert_int_equal(query(out, sizeof out, "p=12345678", "p"), FAWN_E2BIG);
    assert_int_equal(query(out, sizeof out, "p=1234567", "p"), 0);
    assert_string_equal(out, "1234567");
    assert_int_equal(query(out, 0, "p=", "p"), FAWN_E2BIG);
}

static void test_query_from_parsed_target(void **state) {
    http_request req;
    assert_int_equal(
        parse(&req, "GET /read?path=%2Fmnt%2Fuser-data%2F..%2F..%2Fetc HTTP/1.1\r\n\r\n"), 0);
    char out[64];
    assert_int_equal(http_query_get(out, sizeof out, &req, "path"), 0);
    assert_string_equal(out, "/mnt/user-data/../../etc");
}

/* ---- server harness ----------------------------------------------------- */

/* Client reads give up after this long, so a server bug fails instead of hanging. */
/* Ceiling of a client's wait for what the server does on its own (answer,
 * close): only a hang reaches it, on a loaded host under ASan. */
#define CLIENT_TIMEOUT_MS 30000

typedef struct test_server {
    char dir[64];
    char sock_path[96];
    int listen_fd;
    pthread_t thread;
    int rc;
    http_server_opts opts;
} test_server;

/* The server of the test in progress, so that a failed assertion (which
 * leaves the test early) still gets its server stopped by the teardown. */
static test_server *running_server;

typedef struct response {
    int status;
    char head[4096];
    char body[65536];
    size_t body_len;
} response;

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

/* Echoes what it received as JSON; a few paths exercise other behaviours. */
static void echo_handler(http_conn *c, const http_request *req, void *ud) {
    if (strcmp(req->path, "/noreply") == 0)
        return;
    if (strcmp(req->path, "/ignore-body") == 0) {
        http_respond(c, 200, "text/plain", "ignored", 7);
        return;
    }
    if (strcmp(req->path, "/stream") == 0) {
        /* On this server thread a failure cannot fail the test: it cuts the
         * body short, which the client's assertions catch (unless the client
         * has left: test_server_peer_vanishes). */
        if (http_stream_begin(c, 200, "text/plain", "X-Test: yes\r\n") < 0 ||
            http_stream_write(c, "hello, ", 7) < 0 || http_stream_write(c, "", 0) < 0 ||
            http_stream_write(c, "streamed ", 9) < 0 || http_stream_write(c, "world", 5) < 0 ||
            http_stream_end(c) < 0)
            print_message("# stream cut short: %s\n", fawn_errmsg());
        return;
    }
    char *body;
    size_t n;
    if (http_body_read_all(&body, &n, c, 1 << 20) < 0) {
        http_respond_error(c, 413, "too_large", "%s", fawn_errmsg());
        return;
    }
    json_t *v = json_pack("{s:s, s:s, s:I, s:s%}", "method", req->method, "path", req->path,
                          "body_len", (json_int_t)n, "body", body, n);
    free(body);
    http_respond_json(c, 200, v);
    json_decref(v);
}

static void *serve_thread(void *arg) {
    test_server *ts = arg;
    ts->rc = http_serve(&ts->opts);
    return NULL;
}

static void server_start_with(test_server *ts, const char *token, size_t max_conn, int idle_ms,
                              int io_ms) {
    memset(ts, 0, sizeof *ts);
    snprintf(ts->dir, sizeof ts->dir, "/tmp/fawn-test-http-XXXXXX");
    assert_non_null(mkdtemp(ts->dir));
    snprintf(ts->sock_path, sizeof ts->sock_path, "%s/box.sock", ts->dir);
    ts->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(ts->listen_fd >= 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", ts->sock_path);
    assert_int_equal(bind(ts->listen_fd, (struct sockaddr *)&addr, sizeof addr), 0);
    assert_int_equal(listen(ts->listen_fd, 16), 0);
    ts->opts = (http_server_opts){.listen_fd = ts->listen_fd,
                                  .bearer_token = token,
                                  .max_connections = max_conn,
                                  .idle_timeout_ms = idle_ms,
                                  .io_timeout_ms = io_ms,
                                  .handler = echo_handler};
    assert_int_equal(pthread_create(&ts->thread, NULL, serve_thread, ts), 0);
    running_server = ts;
}

static void server_start(test_server *ts) { server_start_with(ts, NULL, 8, 10000, 2000); }

static void server_release(test_server *ts) {
    running_server = NULL;
    close(ts->listen_fd);
    unlink(ts->sock_path);
    rmdir(ts->dir);
}

static void server_stop(test_server *ts) {
    http_server_stop();
    assert_int_equal(pthread_join(ts->thread, NULL), 0);
    server_release(ts);
    assert_int_equal(ts->rc, 0);
}

static int server_teardown(void **state) {
    if (running_server) {
        http_server_stop();
        pthread_join(running_server->thread, NULL);
        server_release(running_server);
    }
    return 0;
}

static int client_connect(const test_server *ts) {
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "%s", ts->sock_path);
    assert_int_equal(connect(fd, (struct sockaddr *)&addr, sizeof addr), 0);
    return fd;
}

static void client_send_n(int fd, const char *data, size_t n) {
    while (n > 0) {
        ssize_t w = send(fd, data, n, MSG_NOSIGNAL);
        assert_true(w > 0);
        data += w;
        n -= (size_t)w;
    }
}

static void client_send(int fd, const char *text) { client_send_n(fd, text, strlen(text)); }

/* One byte, or -1 at end of stream, error or timeout. */
static int client_byte(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, CLIENT_TIMEOUT_MS) != 1)
        return -1;
    unsigned char ch;
    return recv(fd, &ch, 1, 0) == 1 ? ch : -1;
}

/* Reads a line ending in CRLF (kept) into out. */
static int client_line(int fd, char *out, size_t outsz) {
    size_t n = 0;
    while (n + 1 < outsz) {
        int ch = client_byte(fd);
        if (ch < 0)
            return -1;
        out[n++] = (char)ch;
        if (n >= 2 && out[n - 2] == '\r' && out[n - 1] == '\n')
            break;
    }
    out[n] = '\0';
    return 0;
}

static int client_exact(int fd, char *out, size_t n) {
    for (size_t i = 0; i < n; i++) {
        int ch = client_byte(fd);
        if (ch < 0)
            return -1;
        out[i] = (char)ch;
    }
    return 0;
}

static const char *head_value(const response *r, const char *name) {
    static char value[256];
    char key[64];
    snprintf(key, sizeof key, "\r\n%s: ", name);
    const char *p = strcasestr(r->head, key);
    if (!p)
        return NULL;
    p += strlen(key);
    size_t n = strcspn(p, "\r");
    snprintf(value, sizeof value, "%.*s", (int)n, p);
    return value;
}

static int client_chunked_body(int fd, response *r) {
    for (int chunks = 0; chunks < 1000; chunks++) {
        char line[64];
        if (client_line(fd, line, sizeof line) < 0)
            return -1;
        size_t size = strtoul(line, NULL, 16);
        if (size == 0)
            return client_line(fd, line, sizeof line);
        if (r->body_len + size >= sizeof r->body ||
            client_exact(fd, r->body + r->body_len, size) < 0 ||
            client_line(fd, line, sizeof line) < 0 || strcmp(line, "\r\n") != 0)
            return -1;
        r->body_len += size;
    }
    return -1;
}

/* Reads one response; head_request means no body follows. */
static int client_response_ex(int fd, response *r, bool head_request) {
    memset(r, 0, sizeof *r);
    size_t n = 0;
    while (n < 4 || memcmp(r->head + n - 4, "\r\n\r\n", 4) != 0) {
        int ch = client_byte(fd);
        if (ch < 0 || n + 1 >= sizeof r->head)
            return -1;
        r->head[n++] = (char)ch;
    }
    if (sscanf(r->head, "HTTP/1.1 %d ", &r->status) != 1)
        return -1;
    if (head_request || r->status < 200 || r->status == 204 || r->status == 304)
        return 0;
    const char *te = head_value(r, "Transfer-Encoding");
    if (te && strcmp(te, "chunked") == 0)
        return client_chunked_body(fd, r);
    const char *cl = head_value(r, "Content-Length");
    if (!cl)
        return -1;
    r->body_len = strtoul(cl, NULL, 10);
    if (r->body_len >= sizeof r->body)
        return -1;
    return client_exact(fd, r->body, r->body_len);
}

static void client_response(int fd, response *r) {
    assert_int_equal(client_response_ex(fd, r, false), 0);
}

/* Asserts the server closed the connection (EOF or reset) within timeout_ms;
 * returns how long that took. */
static int64_t expect_closed(int fd, int timeout_ms) {
    int64_t t0 = now_ms();
    struct pollfd p = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&p, 1, timeout_ms), 1);
    char ch;
    ssize_t n = recv(fd, &ch, 1, 0);
    assert_true(n == 0 || (n < 0 && errno == ECONNRESET));
    return now_ms() - t0;
}

static void expect_json_field(const response *r, const char *key, const char *want) {
    json_error_t err;
    json_t *v = json_loadb(r->body, r->body_len, 0, &err);
    assert_non_null(v);
    json_t *field = json_object_get(v, key);
    assert_non_null(field);
    if (json_is_integer(field)) {
        char num[32];
        snprintf(num, sizeof num, "%" JSON_INTEGER_FORMAT, json_integer_value(field));
        assert_string_equal(num, want);
    } else {
        assert_string_equal(json_string_value(field), want);
    }
    json_decref(v);
}

/* ---- server tests ------------------------------------------------------- */

static void test_server_keep_alive(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "GET /one HTTP/1.1\r\nHost: box\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(head_value(&r, "Connection"), "keep-alive");
    assert_string_equal(head_value(&r, "Cache-Control"), "no-store");
    assert_string_equal(head_value(&r, "Content-Type"), "application/json");
    expect_json_field(&r, "path", "/one");
    client_send(fd, "POST /two HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    expect_json_field(&r, "method", "POST");
    expect_json_field(&r, "path", "/two");
    expect_json_field(&r, "body", "abc");
    close(fd);
    server_stop(&ts);
}

static void test_server_pipelined(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    client_send(fd, "POST /a HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello"
                    "GET /b HTTP/1.1\r\n\r\n"
                    "POST /ignore-body HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyz"
                    "GET /c HTTP/1.1\r\nConnection: close\r\n\r\n");
    response r;
    client_response(fd, &r);
    expect_json_field(&r, "path", "/a");
    expect_json_field(&r, "body", "hello");
    client_response(fd, &r);
    expect_json_field(&r, "path", "/b");
    expect_json_field(&r, "body_len", "0");
    client_response(fd, &r);
    assert_memory_equal(r.body, "ignored", 7);
    client_response(fd, &r);
    expect_json_field(&r, "path", "/c");
    assert_string_equal(head_value(&r, "Connection"), "close");
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    server_stop(&ts);
}

static void test_server_body_in_pieces(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    client_send(fd, "PUT /up HTTP/1.1\r\nContent-Length: 10\r\n\r\n01");
    sleep_ms(50);
    client_send(fd, "2345");
    sleep_ms(50);
    client_send(fd, "6789");
    response r;
    client_response(fd, &r);
    expect_json_field(&r, "body", "0123456789");
    close(fd);
    server_stop(&ts);
}

static void test_server_bearer_token(void **state) {
    test_server ts;
    server_start_with(&ts, "s3cret-token", 8, 10000, 2000);
    int fd = client_connect(&ts);
    const char *refused[] = {
        "",
        "Authorization: Bearer s3cret-tokeN\r\n",
        "Authorization: Bearer s3cret-token-longer\r\n",
        "Authorization: Bearer s3cret\r\n",
        "Authorization: Basic s3cret-token\r\n",
        "Authorization: s3cret-token\r\n",
    };
    response r;
    char req[256];
    for (size_t i = 0; i < ARRAY_LEN(refused); i++) {
        snprintf(req, sizeof req, "POST /x HTTP/1.1\r\n%sContent-Length: 2\r\n\r\nhi", refused[i]);
        client_send(fd, req);
        client_response(fd, &r);
        assert_int_equal(r.status, 401);
        assert_string_equal(head_value(&r, "WWW-Authenticate"), "Bearer");
        expect_json_field(&r, "error", "unauthorized");
    }
    client_send(fd, "GET /ok HTTP/1.1\r\nAuthorization: Bearer s3cret-token\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    expect_json_field(&r, "path", "/ok");
    client_send(fd, "GET /ok HTTP/1.1\r\nauthorization: bearer  s3cret-token\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    close(fd);
    server_stop(&ts);
}

static void test_server_connection_limit(void **state) {
    test_server ts;
    server_start_with(&ts, NULL, 2, 10000, 2000);
    int held[2];
    response r;
    for (int i = 0; i < 2; i++) {
        held[i] = client_connect(&ts);
        client_send(held[i], "GET /hold HTTP/1.1\r\n\r\n");
        client_response(held[i], &r);
        assert_int_equal(r.status, 200);
    }
    int extra = client_connect(&ts);
    client_response(extra, &r);
    assert_int_equal(r.status, 503);
    expect_json_field(&r, "error", "busy");
    assert_string_equal(head_value(&r, "Connection"), "close");
    expect_closed(extra, CLIENT_TIMEOUT_MS);
    close(extra);
    /* Once a held connection ends, its slot is reused. */
    close(held[0]);
    int status = 0;
    for (int tries = 0; tries < 100 && status != 200; tries++) {
        int fd = client_connect(&ts);
        /* A 503 may close the connection before the request is written. */
        const char *again = "GET /again HTTP/1.1\r\n\r\n";
        (void)send(fd, again, strlen(again), MSG_NOSIGNAL);
        client_response(fd, &r);
        status = r.status;
        close(fd);
        if (status != 200)
            sleep_ms(20);
    }
    assert_int_equal(status, 200);
    close(held[1]);
    server_stop(&ts);
}

static void test_server_idle_timeout(void **state) {
    test_server ts;
    server_start_with(&ts, NULL, 8, 200, 2000);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "GET / HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    int64_t waited = expect_closed(fd, CLIENT_TIMEOUT_MS);
    assert_true(waited >= 100);
    close(fd);
    /* Without any request at all. */
    fd = client_connect(&ts);
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    server_stop(&ts);
}

/* A head that trickles in, each byte well within the io timeout, is still
 * cut off once the whole head took longer than the io timeout: the server
 * answers while bytes still come (timing each byte alone, it would wait for
 * as long as they come). */
static void test_server_slowloris(void **state) {
    test_server ts;
    server_start_with(&ts, NULL, 8, 10000, 300);
    int fd = client_connect(&ts);
    int64_t t0 = now_ms();
    client_send(fd, "GET / HTTP/1.1\r\nX-Slow: ");
    /* Trickle a byte every 100 ms until the server answers. */
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (now_ms() - t0 < CLIENT_TIMEOUT_MS && poll(&p, 1, 0) == 0) {
        sleep_ms(100);
        (void)send(fd, "a", 1, MSG_NOSIGNAL);
    }
    int64_t answered_after = now_ms() - t0;
    if (poll(&p, 1, 0) != 1)
        fail_msg("the server kept reading a head that trickled in for %d ms", CLIENT_TIMEOUT_MS);
    assert_true(answered_after >= 250);
    response r;
    client_response(fd, &r);
    assert_int_equal(r.status, 408);
    expect_json_field(&r, "error", "timeout");
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    /* A head that simply stops. */
    fd = client_connect(&ts);
    client_send(fd, "GET / HTTP/1.1\r\nHost: x\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 408);
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    server_stop(&ts);
}

static void test_server_oversized_head(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    char *text = make_head(HTTP_MAX_HEAD_BYTES + 1000);
    client_send(fd, text);
    free(text);
    response r;
    client_response(fd, &r);
    assert_int_equal(r.status, 431);
    assert_string_equal(head_value(&r, "Connection"), "close");
    expect_json_field(&r, "error", "too_large");
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    server_stop(&ts);
}

static void test_server_malformed_heads(void **state) {
    const struct {
        const char *text;
        int status;
    } cases[] = {
        {"GET / HTTP/1.1\nHost: x\n\n", 400},
        {"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 501},
        {"GET / HTTP/2.0\r\n\r\n", 505},
        {"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx", 400},
    };
    test_server ts;
    server_start(&ts);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        int fd = client_connect(&ts);
        client_send(fd, cases[i].text);
        response r;
        client_response(fd, &r);
        assert_int_equal(r.status, cases[i].status);
        assert_string_equal(head_value(&r, "Connection"), "close");
        expect_closed(fd, CLIENT_TIMEOUT_MS);
        close(fd);
    }
    server_stop(&ts);
}

/* A bad head after a good one on the same connection still gets its answer,
 * and the state of the earlier request (HEAD: no body) does not leak into it. */
static void test_server_error_after_keep_alive(void **state) {
    test_server ts;
    server_start_with(&ts, NULL, 8, 10000, 300);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "HEAD /h HTTP/1.1\r\n\r\nGET /bad\tpath HTTP/1.1\r\n\r\n");
    assert_int_equal(client_response_ex(fd, &r, true), 0);
    assert_int_equal(r.status, 200);
    client_response(fd, &r);
    assert_int_equal(r.status, 400);
    expect_json_field(&r, "error", "bad_request");
    assert_string_equal(head_value(&r, "Connection"), "close");
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    fd = client_connect(&ts);
    client_send(fd, "GET /first HTTP/1.1\r\n\r\nGET /never-finished HTTP/1.1\r\n");
    client_response(fd, &r);
    expect_json_field(&r, "path", "/first");
    client_response(fd, &r);
    assert_int_equal(r.status, 408);
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    server_stop(&ts);
}

static void test_server_handler_without_response(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "GET /noreply HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 500);
    expect_json_field(&r, "error", "internal");
    client_send(fd, "GET /after HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    close(fd);
    server_stop(&ts);
}

static void test_server_stream(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "GET /stream HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(head_value(&r, "Transfer-Encoding"), "chunked");
    assert_string_equal(head_value(&r, "X-Test"), "yes");
    assert_null(head_value(&r, "Content-Length"));
    assert_int_equal(r.body_len, 21);
    assert_memory_equal(r.body, "hello, streamed world", 21);
    client_send(fd, "GET /after HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    expect_json_field(&r, "path", "/after");
    close(fd);
    server_stop(&ts);
}

static void test_server_http10(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "GET /stream HTTP/1.0\r\n\r\n");
    assert_int_equal(client_response_ex(fd, &r, true), 0);
    assert_int_equal(r.status, 200);
    assert_null(head_value(&r, "Transfer-Encoding"));
    assert_string_equal(head_value(&r, "Connection"), "close");
    char body[64] = "";
    assert_int_equal(client_exact(fd, body, 21), 0);
    assert_memory_equal(body, "hello, streamed world", 21);
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    fd = client_connect(&ts);
    client_send(fd, "GET /k HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
    client_response(fd, &r);
    assert_string_equal(head_value(&r, "Connection"), "keep-alive");
    client_send(fd, "GET /k2 HTTP/1.0\r\n\r\n");
    client_response(fd, &r);
    expect_json_field(&r, "path", "/k2");
    assert_string_equal(head_value(&r, "Connection"), "close");
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    server_stop(&ts);
}

static void test_server_head_method(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "HEAD /h HTTP/1.1\r\n\r\nGET /next HTTP/1.1\r\n\r\n");
    assert_int_equal(client_response_ex(fd, &r, true), 0);
    assert_int_equal(r.status, 200);
    assert_non_null(head_value(&r, "Content-Length"));
    client_response(fd, &r);
    expect_json_field(&r, "path", "/next");
    close(fd);
    server_stop(&ts);
}

static void test_server_expect_continue(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "PUT /f HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 100);
    client_send(fd, "12345");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    expect_json_field(&r, "body", "12345");
    assert_string_equal(head_value(&r, "Connection"), "keep-alive");
    /* Answered without reading: no 100, and the connection closes since the
     * client cannot know whether to send the body. */
    client_send(fd,
                "PUT /ignore-body HTTP/1.1\r\nExpect: 100-Continue\r\nContent-Length: 5\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(head_value(&r, "Connection"), "close");
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    server_stop(&ts);
}

static void test_server_large_unread_body_closes(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    client_send(fd, "POST /ignore-body HTTP/1.1\r\nContent-Length: 2000000\r\n\r\nsome");
    response r;
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    assert_string_equal(head_value(&r, "Connection"), "close");
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
    /* A smaller unread body is drained and the connection kept. */
    fd = client_connect(&ts);
    char *body = malloc(100000);
    assert_non_null(body);
    memset(body, 'b', 100000);
    client_send(fd, "POST /ignore-body HTTP/1.1\r\nContent-Length: 100000\r\n\r\n");
    client_send_n(fd, body, 100000);
    free(body);
    client_response(fd, &r);
    assert_string_equal(head_value(&r, "Connection"), "keep-alive");
    client_send(fd, "GET /next HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    expect_json_field(&r, "path", "/next");
    close(fd);
    server_stop(&ts);
}

static void test_server_body_over_handler_limit(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    client_send(fd, "POST /big HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n");
    response r;
    client_response(fd, &r);
    assert_int_equal(r.status, 413);
    expect_json_field(&r, "error", "too_large");
    assert_string_equal(head_value(&r, "Connection"), "close");
    close(fd);
    server_stop(&ts);
}

static void test_server_peer_vanishes(void **state) {
    test_server ts;
    server_start(&ts);
    int fd = client_connect(&ts);
    client_send(fd, "POST /x HTTP/1.1\r\nContent-Length: 100\r\n\r\nonly-part");
    close(fd);
    fd = client_connect(&ts);
    client_send(fd, "GET /stream HTTP/1.1\r\n\r\n");
    close(fd);
    fd = client_connect(&ts);
    response r;
    client_send(fd, "GET /alive HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    expect_json_field(&r, "path", "/alive");
    close(fd);
    server_stop(&ts);
}

/* Stopping does not wait for idle keep-alive connections to time out: with
 * an idle timeout of an hour, the stop still ends (within a ceiling only
 * such a wait reaches). */
static void test_server_stop_with_idle_connection(void **state) {
    test_server ts;
    server_start_with(&ts, NULL, 8, 3600 * 1000, 2000);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "GET / HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    http_server_stop();
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += CLIENT_TIMEOUT_MS / 1000;
    if (pthread_timedjoin_np(ts.thread, NULL, &until) != 0)
        fail_msg("the server did not stop within %d ms: it waits for its idle connection",
                 CLIENT_TIMEOUT_MS);
    server_release(&ts);
    assert_int_equal(ts.rc, 0);
    expect_closed(fd, CLIENT_TIMEOUT_MS);
    close(fd);
}

static void test_server_stop_before_serve(void **state) {
    http_server_stop();
    test_server ts;
    server_start(&ts);
    assert_int_equal(pthread_join(ts.thread, NULL), 0);
    server_release(&ts);
    assert_int_equal(ts.rc, 0);
    /* The stop was consumed: the next server runs until stopped. */
    server_start(&ts);
    int fd = client_connect(&ts);
    response r;
    client_send(fd, "GET /running HTTP/1.1\r\n\r\n");
    client_response(fd, &r);
    assert_int_equal(r.status, 200);
    close(fd);
    server_stop(&ts);
}

static void test_server_bad_opts(void **state) {
    http_server_opts opts = {.listen_fd = -1,
                             .max_connections = 1,
                             .idle_timeout_ms = 1,
                             .io_timeout_ms = 1,
                             .handler = echo_handler};
    assert_int_equal(http_serve(&opts), FAWN_EINVAL);
    opts.listen_fd = 0;
    opts.max_connections = 0;
    assert_int_equal(http_serve(&opts), FAWN_EINVAL);
    opts.max_connections = 1;
    opts.bearer_token = "";
    assert_int_equal(http_serve(&opts), FAWN_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_valid_get),
        cmocka_unit_test(test_parse_no_query),
        cmocka_unit_test(test_parse_pipelined_head_len),
        cmocka_unit_test(test_parse_keep_alive_rules),
        cmocka_unit_test(test_parse_expect_and_content_length),
        cmocka_unit_test(test_parse_incomplete),
        cmocka_unit_test(test_parse_every_prefix),
        cmocka_unit_test(test_reject_request_line),
        cmocka_unit_test(test_reject_target_bytes),
        cmocka_unit_test(test_reject_header_syntax),
        cmocka_unit_test(test_reject_line_endings),
        cmocka_unit_test(test_reject_too_many_headers),
        cmocka_unit_test(test_reject_huge_head),
        cmocka_unit_test(test_reject_content_length),
        cmocka_unit_test(test_reject_transfer_encoding),
        cmocka_unit_test(test_query_decoding),
        cmocka_unit_test(test_query_refusals),
        cmocka_unit_test(test_query_from_parsed_target),
        cmocka_unit_test_teardown(test_server_keep_alive, server_teardown),
        cmocka_unit_test_teardown(test_server_pipelined, server_teardown),
        cmocka_unit_test_teardown(test_server_body_in_pieces, server_teardown),
        cmocka_unit_test_teardown(test_server_bearer_token, server_teardown),
        cmocka_unit_test_teardown(test_server_connection_limit, server_teardown),
        cmocka_unit_test_teardown(test_server_idle_timeout, server_teardown),
        cmocka_unit_test_teardown(test_server_slowloris, server_teardown),
        cmocka_unit_test_teardown(test_server_oversized_head, server_teardown),
        cmocka_unit_test_teardown(test_server_malformed_heads, server_teardown),
        cmocka_unit_test_teardown(test_server_error_after_keep_alive, server_teardown),
        cmocka_unit_test_teardown(test_server_handler_without_response, server_teardown),
        cmocka_unit_test_teardown(test_server_stream, server_teardown),
        cmocka_unit_test_teardown(test_server_http10, server_teardown),
        cmocka_unit_test_teardown(test_server_head_method, server_teardown),
        cmocka_unit_test_teardown(test_server_expect_continue, server_teardown),
        cmocka_unit_test_teardown(test_server_large_unread_body_closes, server_teardown),
        cmocka_unit_test_teardown(test_server_body_over_handler_limit, server_teardown),
        cmocka_unit_test_teardown(test_server_peer_vanishes, server_teardown),
        cmocka_unit_test_teardown(test_server_stop_with_idle_connection, server_teardown),
        cmocka_unit_test_teardown(test_server_stop_before_serve, server_teardown),
        cmocka_unit_test_teardown(test_server_bad_opts, server_teardown),
    };
    int rc = cmocka_run_group_tests_name("http", tests, NULL, NULL);
    free(parsed_buf);
    return rc;
}
