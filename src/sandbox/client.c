/* A minimal HTTP/1.1 client for the box API over a unix socket. Replies come
 * from inside a sandbox and are parsed as untrusted input. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/json.h"
#include "sandbox/client.h"

/* A reply head (status line + headers) is small; more is a broken box. */
#define REPLY_HEAD_MAX 16384

int box_connect(const char *socket_path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t len = strlen(socket_path);
    const char *slash = strrchr(socket_path, '/');
    _cleanup_close_ int dirfd = -1;
    if (len < sizeof addr.sun_path) {
        memcpy(addr.sun_path, socket_path, len + 1);
    } else {
        /* Long paths: reach the socket through its directory's fd. */
        char dir[PATH_MAX];
        size_t dir_len = slash ? (size_t)(slash - socket_path) : 0;
        if (!slash || dir_len == 0 || dir_len >= sizeof dir || strlen(slash + 1) > 64)
            return fawn_err(FAWN_EINVAL, "unusable socket path: %s", socket_path);
        memcpy(dir, socket_path, dir_len);
        dir[dir_len] = '\0';
        dirfd = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
            return fawn_err_sys(FAWN_EIO, errno, "open %s", dir);
        snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", dirfd, slash + 1);
    }
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "socket");
    if (connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int e = errno;
        close(fd);
        return fawn_err_sys(FAWN_EIO, e, "connect to box at %s", socket_path);
    }
    return fd;
}

static int wait_fd(int fd, short events, int64_t deadline_ms) {
    int64_t left = deadline_ms - fawn_now_ms();
    if (left <= 0)
        return fawn_err(FAWN_ETIMEDOUT, "the box did not answer in time");
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, (int)left);
    if (r == 0)
        return fawn_err(FAWN_ETIMEDOUT, "the box did not answer in time");
    return r < 0 && errno != EINTR ? fawn_err_sys(FAWN_EIO, errno, "poll") : 0;
}

/* Sends len bytes, waiting only when the socket is full. */
static int send_all(int fd, const char *data, size_t len, int64_t deadline) {
    int r = 0;
    for (size_t off = 0; r == 0 && off < len;) {
        ssize_t n = send(fd, data + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            off += (size_t)n;
        else if (n < 0 && errno == EAGAIN)
            r = wait_fd(fd, POLLOUT, deadline);
        else if (n < 0 && errno != EINTR)
            r = fawn_err_sys(FAWN_EIO, errno, "sending to the box");
    }
    return r;
}

/* Formats a request head (and appends body when it is not NULL) into req. */
static int request_format(fbuf *req, const char *method, const char *path, const char *headers,
                          const char *content_type, uint64_t length, const char *body) {
    int r = fbuf_printf(req,
                        "%s %s HTTP/1.1\r\nHost: box\r\n%s"
                        "Content-Type: %s\r\nContent-Length: %llu\r\n\r\n",
                        method, path, headers ? headers : "", content_type,
                        (unsigned long long)length);
    return r == 0 && body ? fbuf_append(req, body, (size_t)length) : r;
}

static int send_request(int fd, const char *method, const char *path, const char *headers,
                        const char *body, int64_t deadline) {
    fbuf req = {0};
    int r = request_format(&req, method, path, headers, "application/json", body ? strlen(body) : 0,
                           body);
    if (r == 0)
        r = send_all(fd, req.data, req.len, deadline);
    fbuf_free(&req);
    return r;
}

/* Chunk in which a file body is read and sent. */
#define FILE_CHUNK ((size_t)64 << 10)

/* Sends a request whose body is size bytes read from file_fd. */
static int send_file_request(int fd, const char *method, const char *path, const char *headers,
                             int file_fd, uint64_t size, int64_t deadline) {
    fbuf head = {0};
    int r = request_format(&head, method, path, headers, "application/octet-stream", size, NULL);
    if (r == 0)
        r = send_all(fd, head.data, head.len, deadline);
    fbuf_free(&head);
    _cleanup_free_ char *chunk = r == 0 ? malloc(FILE_CHUNK) : NULL;
    if (r == 0 && !chunk)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    for (uint64_t sent = 0; r == 0 && sent < size;) {
        size_t want = size - sent < FILE_CHUNK ? (size_t)(size - sent) : FILE_CHUNK;
        ssize_t n = read(file_fd, chunk, want);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) /* the file shrank: the box sees a short body and refuses it */
            return n < 0 ? fawn_err_sys(FAWN_EIO, errno, "read the file to send")
                         : fawn_err(FAWN_EIO, "the file shrank while it was sent");
        r = send_all(fd, chunk, (size_t)n, deadline);
        sent += (uint64_t)n;
    }
    return r;
}

/* Appends what the socket has to in (waiting until the deadline). 0 at EOF
 * is reported as FAWN_EPROTO: the box closed mid-reply. */
static int read_more(fbuf *in, int fd, int64_t deadline) {
    char chunk[65536];
    for (;;) {
        int r = wait_fd(fd, POLLIN, deadline);
        if (r < 0)
            return r;
        ssize_t n = recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
        if (n == 0)
            return fawn_err(FAWN_EPROTO, "the box closed the connection mid-reply");
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return fawn_err_sys(FAWN_EIO, errno, "reading from the box");
        if (fbuf_append(in, chunk, (size_t)n) < 0)
            return fawn_err(FAWN_EPROTO, "the box's reply exceeds %zu bytes", in->limit);
        return 0;
    }
}

typedef struct reply_head {
    int status;
    size_t head_len; /* including the blank line */
    bool chunked;
    long long content_length; /* -1 when absent */
    bool close;
} reply_head;

static int parse_head(reply_head *h, char *data, size_t len) {
    char *sep = data ? memmem(data, len, "\r\n\r\n", 4) : NULL;
    if (!sep)
        return len > REPLY_HEAD_MAX ? fawn_err(FAWN_EPROTO, "reply head too large") : 1;
    *sep = '\0';
    *h = (reply_head){.head_len = (size_t)(sep - data) + 4, .content_length = -1};
    if (sscanf(data, "HTTP/1.1 %3d ", &h->status) != 1 || h->status < 100 || h->status > 599)
        return fawn_err(FAWN_EPROTO, "malformed reply from the box");
    h->chunked = strcasestr(data, "\r\nTransfer-Encoding: chunked") != NULL;
    h->close = strcasestr(data, "\r\nConnection: close") != NULL;
    const char *cl = strcasestr(data, "\r\nContent-Length:");
    char *end;
    if (cl) {
        h->content_length = strtoll(cl + 17, &end, 10);
        if (h->content_length < 0 || (*end != '\r' && *end != '\0'))
            return fawn_err(FAWN_EPROTO, "bad Content-Length from the box");
    }
    *sep = '\r';
    if (!h->chunked && h->content_length < 0)
        return fawn_err(FAWN_EPROTO, "the box's reply has no length");
    return 0;
}

/* Index of the first CRLF in s[from..len), or len. */
static size_t find_crlf(const char *s, size_t from, size_t len) {
    for (size_t i = from; i + 1 < len; i++)
        if (s[i] == '\r' && s[i + 1] == '\n')
            return i;
    return len;
}

/* True once body[0..len) holds a complete chunked body. */
static bool chunked_complete(const char *body, size_t len) {
    size_t in = 0;
    for (;;) {
        size_t crlf = find_crlf(body, in, len);
        if (crlf == len)
            return false;
        unsigned long long n = strtoull(body + in, NULL, 16);
        in = crlf + 2;
        if (n == 0)
            return len >= in + 2;
        if (n > len || in + n + 2 > len)
            return false;
        in += n + 2;
    }
}

/* Decodes a chunked body in place. */
static int dechunk(char *body, size_t len, size_t *out_len) {
    size_t in = 0, out = 0;
    for (;;) {
        char *end;
        if (in >= len)
            return FAWN_EPROTO;
        unsigned long long n = strtoull(body + in, &end, 16);
        char *crlf = memmem(body + in, len - in, "\r\n", 2);
        if (!crlf || end == body + in || n > len)
            return FAWN_EPROTO;
        in = (size_t)(crlf - body) + 2;
        if (n == 0)
            break;
        if (in + n + 2 > len || memcmp(body + in + n, "\r\n", 2) != 0)
            return FAWN_EPROTO;
        memmove(body + out, body + in, n);
        out += n;
        in += n + 2;
    }
    *out_len = out;
    return 0;
}

/* Reads one reply into in; body and body_len locate the (decoded) body. */
static int read_reply(reply_head *h, char **body, size_t *body_len, fbuf *in, int fd,
                      int64_t deadline) {
    int r;
    while ((r = in->len ? parse_head(h, in->data, in->len) : 1) == 1)
        if ((r = read_more(in, fd, deadline)) < 0)
            return r;
    if (r < 0)
        return r;
    for (;;) {
        char *b = in->data + h->head_len;
        size_t have = in->len - h->head_len;
        if (!h->chunked && have >= (size_t)h->content_length) {
            if (have > (size_t)h->content_length)
                return fawn_err(FAWN_EPROTO, "the box sent more than its reply");
            *body = b;
            *body_len = have;
            return 0;
        }
        if (h->chunked && chunked_complete(b, have)) {
            *body = b;
            return dechunk(b, have, body_len) < 0
                       ? fawn_err(FAWN_EPROTO, "malformed chunked reply from the box")
                       : 0;
        }
        if ((r = read_more(in, fd, deadline)) < 0)
            return r;
    }
}

void box_conn_init(box_conn *c, const char *socket_path) {
    snprintf(c->socket_path, sizeof c->socket_path, "%s", socket_path);
    c->fd = -1;
}

void box_conn_close(box_conn *c) {
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* An idle keep-alive connection the box has closed reads as EOF (or an
 * error); it is replaced before anything is sent, never after. */
static int conn_ready(box_conn *c) {
    if (c->fd >= 0) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (poll(&p, 1, 0) != 0)
            box_conn_close(c);
    }
    if (c->fd < 0)
        c->fd = box_connect(c->socket_path);
    return c->fd < 0 ? c->fd : 0;
}

/* Reads and parses the box's JSON reply on fd. */
static int reply_read(json_t **reply, int *status, bool *keep_alive, int fd, int64_t deadline_ms) {
    fbuf in = {.limit = BOX_REPLY_MAX};
    reply_head h;
    char *data = NULL;
    size_t len = 0;
    int r = read_reply(&h, &data, &len, &in, fd, deadline_ms);
    if (r == 0) {
        json_error_t jerr;
        *reply = json_loadb(data, len, 0, &jerr);
        if (!json_is_object(*reply)) {
            json_decref(*reply);
            *reply = NULL;
            r = fawn_err(FAWN_EPROTO, "the box's reply is not a JSON object");
        }
    }
    if (r == 0)
        *status = h.status;
    if (r == 0 && keep_alive)
        *keep_alive = !h.close;
    fbuf_free(&in);
    return r;
}

int box_fd_call(json_t **reply, int *status, bool *keep_alive, int fd, const char *headers,
                const char *method, const char *path, const json_t *body, int64_t deadline_ms) {
    *reply = NULL;
    *status = 0;
    if (keep_alive)
        *keep_alive = false;
    _cleanup_free_ char *text = body ? fjson_dump(body) : NULL;
    if (body && !text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = send_request(fd, method, path, headers, text, deadline_ms);
    return r < 0 ? r : reply_read(reply, status, keep_alive, fd, deadline_ms);
}

int box_fd_call_file(json_t **reply, int *status, int fd, const char *headers, const char *method,
                     const char *path, int file_fd, uint64_t size, int64_t deadline_ms) {
    *reply = NULL;
    *status = 0;
    int r = send_file_request(fd, method, path, headers, file_fd, size, deadline_ms);
    return r < 0 ? r : reply_read(reply, status, NULL, fd, deadline_ms);
}

int box_conn_call(json_t **reply, int *status, box_conn *c, const char *method, const char *path,
                  const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    bool keep_alive = false;
    int r = conn_ready(c);
    if (r == 0)
        r = box_fd_call(reply, status, &keep_alive, c->fd, NULL, method, path, body, deadline);
    /* After any failure the connection's state is unknown: never reuse it. */
    if (r < 0 || !keep_alive)
        box_conn_close(c);
    return r;
}

int box_call(json_t **reply, int *status, const char *socket_path, const char *method,
             const char *path, const json_t *body, int timeout_ms) {
    box_conn c;
    box_conn_init(&c, socket_path);
    int r = box_conn_call(reply, status, &c, method, path, body, timeout_ms);
    box_conn_close(&c);
    return r;
}
