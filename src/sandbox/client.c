/* A minimal HTTP/1.1 client for the box API over a unix socket. Replies come
 * from inside a sandbox and are parsed as untrusted input. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "base/json.h"
#include "sandbox/sandbox.h"

/* A reply head (status line + headers) is small; more is a broken box. */
#define REPLY_HEAD_MAX 16384

int box_connect(const char *socket_path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    char dir[PATH_MAX], base[PATH_MAX];
    if (strlen(socket_path) >= sizeof dir)
        return fawn_err(FAWN_EINVAL, "socket path too long");
    snprintf(dir, sizeof dir, "%s", socket_path);
    snprintf(base, sizeof base, "%s", socket_path);
    _cleanup_close_ int dirfd = -1;
    if (strlen(socket_path) < sizeof addr.sun_path) {
        snprintf(addr.sun_path, sizeof addr.sun_path, "%s", socket_path);
    } else {
        /* Long paths: reach the socket through its directory's fd. */
        dirfd = open(dirname(dir), O_PATH | O_DIRECTORY | O_CLOEXEC);
        if (dirfd < 0)
            return fawn_err_sys(FAWN_EIO, errno, "open %s", dir);
        snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", dirfd,
                 basename(base));
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

static int send_request(int fd, const char *method, const char *path, const char *body,
                        int64_t deadline) {
    fbuf req = {0};
    size_t blen = body ? strlen(body) : 0;
    int r = fbuf_printf(&req,
                        "%s %s HTTP/1.1\r\nHost: box\r\nConnection: close\r\n"
                        "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
                        method, path, blen);
    if (r == 0 && body)
        r = fbuf_append(&req, body, blen);
    for (size_t off = 0; r == 0 && off < req.len;) {
        if ((r = wait_fd(fd, POLLOUT, deadline)) < 0)
            break;
        ssize_t n = send(fd, req.data + off, req.len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            r = fawn_err_sys(FAWN_EIO, errno, "sending to the box");
        else if (n > 0)
            off += (size_t)n;
    }
    fbuf_free(&req);
    return r;
}

/* Reads until EOF (the request said Connection: close), bounded. */
static int read_reply(fbuf *out, int fd, int64_t deadline) {
    char chunk[65536];
    for (;;) {
        int r = wait_fd(fd, POLLIN, deadline);
        if (r < 0)
            return r;
        ssize_t n = recv(fd, chunk, sizeof chunk, MSG_DONTWAIT);
        if (n == 0)
            return 0;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
            continue;
        if (n < 0)
            return fawn_err_sys(FAWN_EIO, errno, "reading from the box");
        if ((r = fbuf_append(out, chunk, (size_t)n)) < 0)
            return fawn_err(FAWN_EPROTO, "the box's reply exceeds %zu bytes", out->limit);
    }
}

/* Decodes a chunked body in place; returns its length or < 0. */
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

static int parse_reply(json_t **reply, int *status, fbuf *raw) {
    char *sep = raw->data ? memmem(raw->data, raw->len < REPLY_HEAD_MAX ? raw->len : REPLY_HEAD_MAX,
                                   "\r\n\r\n", 4) : NULL;
    if (!sep || sscanf(raw->data, "HTTP/1.1 %3d ", status) != 1 || *status < 100 || *status > 599)
        return fawn_err(FAWN_EPROTO, "malformed reply from the box");
    *sep = '\0';
    char *body = sep + 4;
    size_t blen = raw->len - (size_t)(body - raw->data);
    bool chunked = strcasestr(raw->data, "\r\nTransfer-Encoding: chunked") != NULL;
    if (chunked && dechunk(body, blen, &blen) < 0)
        return fawn_err(FAWN_EPROTO, "malformed chunked reply from the box");
    json_error_t jerr;
    *reply = json_loadb(body, blen, 0, &jerr);
    if (!*reply || !json_is_object(*reply)) {
        json_decref(*reply);
        *reply = NULL;
        return fawn_err(FAWN_EPROTO, "the box's reply is not a JSON object");
    }
    return 0;
}

int box_call(json_t **reply, int *status, const char *socket_path, const char *method,
             const char *path, const json_t *body, int timeout_ms) {
    *reply = NULL;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    _cleanup_free_ char *text = body ? fjson_dump(body) : NULL;
    if (body && !text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    _cleanup_close_ int fd = box_connect(socket_path);
    if (fd < 0)
        return fd;
    int r = send_request(fd, method, path, text, deadline);
    fbuf raw = {.limit = BOX_REPLY_MAX};
    if (r == 0)
        r = read_reply(&raw, fd, deadline);
    if (r == 0)
        r = parse_reply(reply, status, &raw);
    fbuf_free(&raw);
    return r;
}
