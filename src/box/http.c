/* HTTP/1.1 request-head parsing, query parsing, connection I/O and responses.
 * Parsing is pure; everything that touches a socket goes through
 * http_conn_recv / http_conn_send, which bound every wait with poll(). */
#include "box/http.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>

#include "base/json.h"
#include "box/http_internal.h"

/* Content-Length values of up to 18 digits always fit in an int64_t. */
#define HTTP_MAX_CONTENT_LENGTH_DIGITS 18
/* Content types are short ("application/json; charset=utf-8"). */
#define HTTP_MAX_CONTENT_TYPE 128
/* Status line, Content-Type and the fixed headers of a response fit in this. */
#define HTTP_RESPONSE_HEAD_MAX 512
/* Error details are one human-readable sentence; longer ones are cut. */
#define HTTP_ERROR_DETAIL_MAX 512
/* A chunk-size line: 16 hex digits, CRLF and a NUL. */
#define HTTP_CHUNK_LINE_MAX 24

/* ---- request head ---------------------------------------------------- */

/* Header fields with meaning for framing or the connection, seen so far. */
typedef struct head_state {
    bool seen_content_length;
    bool seen_host;
    bool conn_close;
    bool conn_keep_alive;
} head_state;

static bool is_digit(unsigned char ch) { return ch >= '0' && ch <= '9'; }

static bool is_ows(unsigned char ch) { return ch == ' ' || ch == '\t'; }

/* RFC 9110 tchar. */
static bool is_tchar(unsigned char ch) {
    if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || is_digit(ch))
        return true;
    return ch != '\0' && strchr("!#$%&'*+-.^_`|~", ch) != NULL;
}

/* A byte allowed inside a header value: visible ASCII, blanks, obs-text. */
static bool is_field_byte(unsigned char ch) { return ch == '\t' || (ch >= 0x20 && ch != 0x7f); }

/* A byte allowed in a request target: visible ASCII except '#'. */
static bool is_target_byte(unsigned char ch) { return ch > 0x20 && ch < 0x7f && ch != '#'; }

static int head_reject(int *status, int http_status, const char *what) {
    *status = http_status;
    int code = FAWN_EUNSUP;
    if (http_status == 400)
        code = FAWN_EPROTO;
    else if (http_status == 413 || http_status == 431)
        code = FAWN_E2BIG;
    return fawn_err(code, "bad request head: %s", what);
}

/* Finds the end of the head (just past CRLFCRLF) while refusing NUL, bare LF
 * and CR without LF. Returns 1 when more bytes are needed. */
static int head_find_end(size_t *end, int *status, const char *buf, size_t len) {
    size_t scan = len < HTTP_MAX_HEAD_BYTES ? len : HTTP_MAX_HEAD_BYTES;
    for (size_t i = 0; i < scan; i++) {
        char ch = buf[i];
        if (ch == '\0')
            return head_reject(status, 400, "NUL byte");
        if (ch == '\r' && i + 1 < len && buf[i + 1] != '\n')
            return head_reject(status, 400, "CR not followed by LF");
        if (ch != '\n')
            continue;
        if (i == 0 || buf[i - 1] != '\r')
            return head_reject(status, 400, "bare LF line ending (CRLF required)");
        if (i >= 3 && buf[i - 2] == '\n') {
            *end = i + 1;
            return 0;
        }
    }
    if (len >= HTTP_MAX_HEAD_BYTES)
        return head_reject(status, 431, "request head larger than 16384 bytes");
    return 1;
}

static int parse_version(http_request *req, int *status, const char *v, size_t n) {
    bool shaped = n == 8 && memcmp(v, "HTTP/", 5) == 0 && is_digit((unsigned char)v[5]) &&
                  v[6] == '.' && is_digit((unsigned char)v[7]);
    if (!shaped)
        return head_reject(status, 400, "malformed HTTP version");
    if (v[5] != '1' || (v[7] != '0' && v[7] != '1'))
        return head_reject(status, 505, "only HTTP/1.1 and HTTP/1.0 are supported");
    req->version_minor = v[7] - '0';
    return 0;
}

/* "METHOD SP origin-form SP HTTP/1.x" in line[0..n). */
static int parse_request_line(http_request *req, int *status, char *line, size_t n) {
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0)
        return head_reject(status, 400, "missing method");
    if (i > HTTP_MAX_METHOD)
        return head_reject(status, 501, "method name too long");
    if (i >= n || line[i] != ' ')
        return head_reject(status, 400, "method not followed by a single space");
    memcpy(req->method, line, i);
    req->method[i] = '\0';
    size_t start = ++i;
    if (start >= n || line[start] != '/')
        return head_reject(status, 400, "request target must start with '/'");
    while (i < n && line[i] != ' ') {
        if (!is_target_byte((unsigned char)line[i]))
            return head_reject(status, 400, "invalid byte in request target");
        i++;
    }
    if (i >= n)
        return head_reject(status, 400, "missing HTTP version");
    int r = parse_version(req, status, line + i + 1, n - i - 1);
    if (r < 0)
        return r;
    line[i] = '\0';
    req->path = line + start;
    char *q = memchr(line + start, '?', i - start);
    if (q) {
        *q = '\0';
        req->query = q + 1;
    }
    return 0;
}

static int parse_content_length(http_request *req, head_state *hs, int *status, const char *v) {
    if (hs->seen_content_length)
        return head_reject(status, 400, "duplicate Content-Length");
    hs->seen_content_length = true;
    size_t n = strlen(v);
    if (n == 0)
        return head_reject(status, 400, "empty Content-Length");
    for (size_t i = 0; i < n; i++)
        if (!is_digit((unsigned char)v[i]))
            return head_reject(status, 400, "Content-Length is not a decimal number");
    if (n > HTTP_MAX_CONTENT_LENGTH_DIGITS)
        return head_reject(status, 413, "Content-Length too large");
    int64_t value = 0;
    for (size_t i = 0; i < n; i++)
        value = value * 10 + (v[i] - '0');
    req->content_length = value;
    return 0;
}

/* Comma-separated Connection options, compared case-insensitively. */
static void parse_connection(head_state *hs, const char *v) {
    while (*v) {
        while (is_ows((unsigned char)*v) || *v == ',')
            v++;
        size_t n = strcspn(v, ",");
        size_t m = n;
        while (m > 0 && is_ows((unsigned char)v[m - 1]))
            m--;
        if (m == 5 && strncasecmp(v, "close", 5) == 0)
            hs->conn_close = true;
        else if (m == 10 && strncasecmp(v, "keep-alive", 10) == 0)
            hs->conn_keep_alive = true;
        v += n;
    }
}

static int apply_header(http_request *req, head_state *hs, int *status, const char *name,
                        const char *value) {
    if (strcasecmp(name, "Content-Length") == 0)
        return parse_content_length(req, hs, status, value);
    if (strcasecmp(name, "Transfer-Encoding") == 0)
        return head_reject(status, 501, "Transfer-Encoding is not supported in requests");
    if (strcasecmp(name, "Host") == 0) {
        if (hs->seen_host)
            return head_reject(status, 400, "duplicate Host");
        hs->seen_host = true;
    }
    if (strcasecmp(name, "Connection") == 0)
        parse_connection(hs, value);
    return 0;
}

/* "name: value" in line[0..n); line[n] is the CR, overwritable. */
static int parse_header_line(http_request *req, head_state *hs, int *status, char *line, size_t n) {
    if (is_ows((unsigned char)line[0]))
        return head_reject(status, 400, "obsolete header line folding");
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)line[i]))
        i++;
    if (i == 0 || i >= n || line[i] != ':')
        return head_reject(status, 400, "malformed header name");
    if (req->n_headers == HTTP_MAX_HEADERS)
        return head_reject(status, 431, "more than 32 headers");
    size_t start = i + 1, end = n;
    while (start < end && is_ows((unsigned char)line[start]))
        start++;
    while (end > start && is_ows((unsigned char)line[end - 1]))
        end--;
    for (size_t k = start; k < end; k++)
        if (!is_field_byte((unsigned char)line[k]))
            return head_reject(status, 400, "control character in header value");
    line[i] = '\0';
    line[end] = '\0';
    http_header *h = &req->headers[req->n_headers++];
    h->name = line;
    h->value = line + start;
    return apply_header(req, hs, status, h->name, h->value);
}

int http_parse_head(http_request *req, size_t *head_len, int *status, char *buf, size_t len) {
    memset(req, 0, sizeof *req);
    req->content_length = -1;
    *head_len = 0;
    *status = 0;
    size_t end = 0;
    int r = head_find_end(&end, status, buf, len);
    if (r != 0)
        return r;
    /* Every CR in buf[0..end) starts a CRLF, and the head ends with an empty line. */
    size_t eol = (size_t)((char *)memchr(buf, '\r', end) - buf);
    if (eol == 0)
        return head_reject(status, 400, "empty request line");
    r = parse_request_line(req, status, buf, eol);
    head_state hs = {0};
    for (size_t pos = eol + 2; r == 0 && pos < end - 2; pos = eol + 2) {
        eol = (size_t)((char *)memchr(buf + pos, '\r', end - pos) - buf);
        r = parse_header_line(req, &hs, status, buf + pos, eol - pos);
    }
    if (r < 0)
        return r;
    if (req->version_minor == 0)
        req->keep_alive = hs.conn_keep_alive && !hs.conn_close;
    else
        req->keep_alive = !hs.conn_close;
    *head_len = end;
    return 0;
}

const char *http_header_get(const http_request *req, const char *name) {
    for (size_t i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0)
            return req->headers[i].value;
    return NULL;
}

/* ---- query string ------------------------------------------------------ */

/* Decodes the byte at *p (< end): "%XY", '+' (a space) or itself. */
static int query_next_byte(unsigned char *out, const char **p, const char *end) {
    const char *s = *p;
    if (*s != '%') {
        *out = *s == '+' ? ' ' : (unsigned char)*s;
        *p = s + 1;
        return 0;
    }
    if (end - s < 3 || fawn_hex_digit(s[1]) < 0 || fawn_hex_digit(s[2]) < 0)
        return fawn_err(FAWN_EINVAL, "malformed percent-escape in query");
    *out = (unsigned char)(fawn_hex_digit(s[1]) * 16 + fawn_hex_digit(s[2]));
    if (*out == '\0')
        return fawn_err(FAWN_EINVAL, "NUL byte (%%00) in query");
    *p = s + 3;
    return 0;
}

/* Decodes [p, end) and compares it with name. */
static int query_key_matches(bool *match, const char *p, const char *end, const char *name) {
    size_t i = 0;
    bool same = true;
    while (p < end) {
        unsigned char b;
        int r = query_next_byte(&b, &p, end);
        if (r < 0)
            return r;
        if (same && name[i] != '\0' && (unsigned char)name[i] == b)
            i++;
        else
            same = false;
    }
    *match = same && name[i] == '\0';
    return 0;
}

/* Decodes [p, end) into out (NUL-terminated); only validates when out is NULL. */
static int query_decode(char *out, size_t outsz, const char *p, const char *end) {
    size_t k = 0;
    while (p < end) {
        unsigned char b;
        int r = query_next_byte(&b, &p, end);
        if (r < 0)
            return r;
        if (!out)
            continue;
        if (k + 1 >= outsz)
            return fawn_err(FAWN_E2BIG, "query parameter longer than %zu bytes", outsz - 1);
        out[k++] = (char)b;
    }
    if (out)
        out[k] = '\0';
    return 0;
}

int http_query_get(char *out, size_t outsz, const http_request *req, const char *name) {
    if (outsz > 0)
        out[0] = '\0';
    if (outsz == 0)
        return fawn_err(FAWN_E2BIG, "no room for query parameter '%s'", name);
    const char *q = req->query;
    const char *qend = q ? q + strlen(q) : NULL;
    bool found = false;
    while (q) {
        const char *amp = memchr(q, '&', (size_t)(qend - q));
        const char *pend = amp ? amp : qend;
        const char *eq = memchr(q, '=', (size_t)(pend - q));
        const char *kend = eq ? eq : pend;
        const char *val = eq ? eq + 1 : pend;
        bool match = false;
        int r = q < pend ? query_key_matches(&match, q, kend, name) : 0;
        if (r == 0 && match && found)
            r = fawn_err(FAWN_EINVAL, "query parameter '%s' given twice", name);
        if (r == 0 && q < pend)
            r = query_decode(match ? out : NULL, outsz, val, pend);
        if (r < 0)
            return r;
        found = found || match;
        q = amp ? amp + 1 : NULL;
    }
    if (!found)
        return fawn_err(FAWN_ENOENT, "query parameter '%s' is absent", name);
    return 0;
}

/* ---- connection I/O ---------------------------------------------------- */

/* Waits for `events` on c->fd until deadline_ms; with watch_stop, also
 * returns FAWN_EBUSY once c->stop_fd becomes readable. */
static int conn_wait(http_conn *c, short events, int64_t deadline_ms, bool watch_stop) {
    struct pollfd p[2] = {{.fd = c->fd, .events = events},
                          {.fd = watch_stop ? c->stop_fd : -1, .events = POLLIN}};
    for (;;) {
        int64_t left = deadline_ms - fawn_now_ms();
        if (left <= 0)
            return fawn_err(FAWN_ETIMEDOUT, "connection timed out");
        int n = poll(p, 2, left > INT32_MAX ? INT32_MAX : (int)left);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return fawn_err_sys(FAWN_EIO, errno, "poll");
        if (p[1].revents)
            return fawn_err(FAWN_EBUSY, "server is stopping");
        if (n > 0)
            return 0;
    }
}

ssize_t http_conn_recv(http_conn *c, void *buf, size_t n, int64_t deadline_ms, bool watch_stop) {
    for (;;) {
        ssize_t got = recv(c->fd, buf, n, 0);
        if (got >= 0)
            return got;
        if (errno == EINTR)
            continue;
        if (errno != EAGAIN && errno != EWOULDBLOCK) {
            c->failed = true;
            return fawn_err_sys(FAWN_EIO, errno, "recv");
        }
        int r = conn_wait(c, POLLIN, deadline_ms, watch_stop);
        if (r < 0)
            return r;
    }
}

static void iov_advance(struct iovec **iov, int *iovcnt, size_t done) {
    while (*iovcnt > 0 && done >= (*iov)->iov_len) {
        done -= (*iov)->iov_len;
        (*iov)++;
        (*iovcnt)--;
    }
    if (*iovcnt > 0) {
        (*iov)->iov_base = (char *)(*iov)->iov_base + done;
        (*iov)->iov_len -= done;
    }
}

int http_conn_send(http_conn *c, struct iovec *iov, int iovcnt) {
    if (c->failed)
        return fawn_err(FAWN_EIO, "connection already failed");
    iov_advance(&iov, &iovcnt, 0);
    while (iovcnt > 0) {
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)iovcnt};
        ssize_t w = sendmsg(c->fd, &m, MSG_NOSIGNAL);
        int r = 0;
        if (w >= 0)
            iov_advance(&iov, &iovcnt, (size_t)w);
        else if (errno == EAGAIN || errno == EWOULDBLOCK)
            r = conn_wait(c, POLLOUT, fawn_now_ms() + c->io_timeout_ms, false);
        else if (errno != EINTR)
            r = fawn_err_sys(FAWN_EIO, errno, "send");
        if (r < 0) {
            c->failed = true;
            return r;
        }
    }
    return 0;
}

/* ---- request body ------------------------------------------------------- */

static int body_send_continue(http_conn *c) {
    if (!c->expect_continue || c->continue_sent || c->responded)
        return 0;
    c->continue_sent = true;
    static const char line[] = "HTTP/1.1 100 Continue\r\n\r\n";
    struct iovec iov = {.iov_base = (void *)line, .iov_len = sizeof line - 1};
    return http_conn_send(c, &iov, 1);
}

ssize_t http_body_read(http_conn *c, void *buf, size_t n) {
    if (c->body_left <= 0 || n == 0)
        return 0;
    if ((uint64_t)n > (uint64_t)c->body_left)
        n = (size_t)c->body_left;
    size_t buffered = c->buf_len - c->buf_pos;
    if (buffered > 0) {
        size_t take = n < buffered ? n : buffered;
        memcpy(buf, c->buf + c->buf_pos, take);
        c->buf_pos += take;
        c->body_left -= (int64_t)take;
        return (ssize_t)take;
    }
    if (c->failed)
        return fawn_err(FAWN_EIO, "connection already failed");
    int r = body_send_continue(c);
    if (r < 0)
        return r;
    ssize_t got = http_conn_recv(c, buf, n, fawn_now_ms() + c->io_timeout_ms, false);
    if (got == 0) {
        c->failed = true;
        return fawn_err(FAWN_EPROTO, "peer closed the connection before the end of the body");
    }
    if (got < 0) {
        c->failed = true;
        return got;
    }
    c->body_left -= got;
    return got;
}

int http_body_read_all(char **out, size_t *out_len, http_conn *c, size_t limit) {
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if ((uint64_t)c->body_left > (uint64_t)limit)
        return fawn_err(FAWN_E2BIG, "request body of %lld bytes exceeds the limit of %zu",
                        (long long)c->body_left, limit);
    size_t total = (size_t)c->body_left;
    char *data = malloc(total + 1);
    if (!data)
        return fawn_err(FAWN_ENOMEM, "out of memory for a %zu-byte body", total);
    for (size_t got = 0; got < total;) {
        ssize_t n = http_body_read(c, data + got, total - got);
        if (n <= 0) {
            free(data);
            return n < 0 ? (int)n : fawn_err(FAWN_EPROTO, "request body ended early");
        }
        got += (size_t)n;
    }
    data[total] = '\0';
    if (out_len)
        *out_len = total;
    *out = data;
    return 0;
}

/* ---- responses ---------------------------------------------------------- */

static const char *http_reason(int status) {
    switch (status) {
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 206: return "Partial Content";
    case 301: return "Moved Permanently";
    case 302: return "Found";
    case 304: return "Not Modified";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 410: return "Gone";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 415: return "Unsupported Media Type";
    case 416: return "Range Not Satisfiable";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Status";
    }
}

static bool status_has_no_body(int status) { return status == 204 || status == 304; }

/* Complete "Name: value\r\n" lines without stray control characters. */
static bool extra_headers_valid(const char *s) {
    while (*s) {
        size_t name = 0;
        while (is_tchar((unsigned char)s[name]))
            name++;
        if (name == 0 || s[name] != ':')
            return false;
        const char *v = s + name + 1;
        while (is_field_byte((unsigned char)*v))
            v++;
        if (v[0] != '\r' || v[1] != '\n')
            return false;
        s = v + 2;
    }
    return true;
}

static int response_check(const http_conn *c, int status, const char *content_type,
                          const char *extra_headers) {
    if (c->responded)
        return fawn_err(FAWN_EINVAL, "a response was already sent for this request");
    if (status < 200 || status > 599)
        return fawn_err(FAWN_EINVAL, "status %d is not a final HTTP status", status);
    if (content_type &&
        (strlen(content_type) > HTTP_MAX_CONTENT_TYPE || strpbrk(content_type, "\r\n") != NULL))
        return fawn_err(FAWN_EINVAL, "content type too long or with line breaks");
    if (extra_headers && !extra_headers_valid(extra_headers))
        return fawn_err(FAWN_EINVAL, "extra headers must be complete \"Name: value\\r\\n\" lines");
    return 0;
}

/* Whether the response may offer keep-alive: the body left unread must be
 * small enough to drain, and a client waiting for "100 Continue" must not be
 * left in doubt about whether to send its body. */
static bool response_keep_alive(const http_conn *c) {
    if (!c->keep_alive || c->failed || c->body_left > HTTP_DRAIN_MAX)
        return false;
    return !(c->body_left > 0 && c->expect_continue && !c->continue_sent);
}

/* Formats the status line and fixed headers (without the final CRLF) into
 * head. framing is a complete header line or "". */
static int response_head(char *head, size_t headsz, size_t *head_len, http_conn *c, int status,
                         const char *content_type, const char *framing) {
    c->keep_alive = response_keep_alive(c);
    int n = snprintf(head, headsz,
                     "HTTP/1.1 %d %s\r\n%s%s%s%sConnection: %s\r\nCache-Control: no-store\r\n",
                     status, http_reason(status), content_type ? "Content-Type: " : "",
                     content_type ? content_type : "", content_type ? "\r\n" : "", framing,
                     c->keep_alive ? "keep-alive" : "close");
    if (n < 0 || (size_t)n >= headsz)
        return fawn_err(FAWN_EINVAL, "response head too long");
    *head_len = (size_t)n;
    return 0;
}

static int respond_full(http_conn *c, int status, const char *content_type,
                        const char *extra_headers, const void *body, size_t len) {
    int r = response_check(c, status, content_type, extra_headers);
    if (r < 0)
        return r;
    bool no_body = status_has_no_body(status);
    if (no_body && len > 0)
        return fawn_err(FAWN_EINVAL, "status %d cannot carry a body", status);
    char framing[48] = "";
    if (!no_body)
        snprintf(framing, sizeof framing, "Content-Length: %zu\r\n", len);
    char head[HTTP_RESPONSE_HEAD_MAX];
    size_t head_len;
    r = response_head(head, sizeof head, &head_len, c, status, no_body ? NULL : content_type,
                      framing);
    if (r < 0)
        return r;
    c->responded = true;
    struct iovec iov[4] = {
        {.iov_base = head, .iov_len = head_len},
        {.iov_base = (void *)(extra_headers ? extra_headers : ""),
         .iov_len = extra_headers ? strlen(extra_headers) : 0},
        {.iov_base = (void *)"\r\n", .iov_len = 2},
        {.iov_base = (void *)body, .iov_len = c->head_method ? 0 : len},
    };
    return http_conn_send(c, iov, 4);
}

/* The end of every answer: its failure stays on c (http.h). */
static void answered(int status, int r) {
    if (r < 0)
        log_debug("http", "the %d answer was not sent: %s", status, fawn_errmsg());
}

void http_respond(http_conn *c, int status, const char *content_type, const void *body,
                  size_t len) {
    answered(status, respond_full(c, status, content_type, NULL, body, len));
}

static int respond_json_headers(http_conn *c, int status, const char *extra_headers,
                                const json_t *v) {
    char *text = fjson_dump(v);
    if (!text)
        return fawn_err(FAWN_ENOMEM, "cannot serialize the JSON response");
    int r = respond_full(c, status, "application/json", extra_headers, text, strlen(text));
    free(text);
    return r;
}

void http_respond_json(http_conn *c, int status, const json_t *v) {
    answered(status, respond_json_headers(c, status, NULL, v));
}

void http_respond_error_headers(http_conn *c, int status, const char *extra_headers,
                                const char *code, const char *detail) {
    if (!fawn_utf8_valid(detail, strlen(detail)))
        detail = "(detail is not valid UTF-8)";
    json_t *v = json_pack("{s:s, s:s}", "error", code, "detail", detail);
    answered(status, v ? respond_json_headers(c, status, extra_headers, v)
                       : fawn_err(FAWN_ENOMEM, "cannot build the error response"));
    json_decref(v);
}

void http_respond_error(http_conn *c, int status, const char *code, const char *fmt, ...) {
    char detail[HTTP_ERROR_DETAIL_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(detail, sizeof detail, fmt, ap);
    va_end(ap);
    http_respond_error_headers(c, status, NULL, code, detail);
}

int http_stream_begin(http_conn *c, int status, const char *content_type,
                      const char *extra_headers) {
    int r = response_check(c, status, content_type, extra_headers);
    if (r < 0)
        return r;
    if (status_has_no_body(status))
        return fawn_err(FAWN_EINVAL, "status %d cannot carry a streamed body", status);
    /* HTTP/1.0 has no chunked encoding: the body ends when the connection does. */
    c->chunked = !c->http10;
    if (!c->chunked)
        c->keep_alive = false;
    char head[HTTP_RESPONSE_HEAD_MAX];
    size_t head_len;
    r = response_head(head, sizeof head, &head_len, c, status, content_type,
                      c->chunked ? "Transfer-Encoding: chunked\r\n" : "");
    if (r < 0)
        return r;
    c->responded = c->streaming = true;
    struct iovec iov[3] = {
        {.iov_base = head, .iov_len = head_len},
        {.iov_base = (void *)(extra_headers ? extra_headers : ""),
         .iov_len = extra_headers ? strlen(extra_headers) : 0},
        {.iov_base = (void *)"\r\n", .iov_len = 2},
    };
    return http_conn_send(c, iov, 3);
}

int http_stream_write(http_conn *c, const void *data, size_t n) {
    if (!c->streaming || c->stream_ended)
        return fawn_err(FAWN_EINVAL, "no streamed response in progress");
    if (n == 0 || c->head_method)
        return 0;
    char size_line[HTTP_CHUNK_LINE_MAX];
    int k = c->chunked ? snprintf(size_line, sizeof size_line, "%zx\r\n", n) : 0;
    struct iovec iov[3] = {
        {.iov_base = size_line, .iov_len = (size_t)k},
        {.iov_base = (void *)data, .iov_len = n},
        {.iov_base = (void *)"\r\n", .iov_len = c->chunked ? 2 : 0},
    };
    return http_conn_send(c, iov, 3);
}

int http_stream_end(http_conn *c) {
    if (!c->streaming || c->stream_ended)
        return fawn_err(FAWN_EINVAL, "no streamed response in progress");
    c->stream_ended = true;
    if (!c->chunked || c->head_method)
        return 0;
    struct iovec iov = {.iov_base = (void *)"0\r\n\r\n", .iov_len = 5};
    return http_conn_send(c, &iov, 1);
}

bool http_responded(const http_conn *c) { return c->responded; }

bool http_client_waiting(const http_conn *c) {
    struct pollfd p = {.fd = c->fd, .events = POLLRDHUP};
    return poll(&p, 1, 0) == 0;
}

static int status_for_code(int code) {
    switch (code) {
    case FAWN_EINVAL:
    case FAWN_EPROTO: return 400;
    case FAWN_EPERM: return 403;
    case FAWN_ENOENT: return 404;
    case FAWN_EEXIST:
    case FAWN_EBUSY: return 409;
    case FAWN_E2BIG: return 413;
    case FAWN_EUNSUP: return 501;
    default: return 500;
    }
}

void http_respond_failure(http_conn *c, int code) {
    http_respond_error(c, status_for_code(code), fawn_strerror(code), "%s", fawn_errmsg());
}
