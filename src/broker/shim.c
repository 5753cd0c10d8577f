/* The shim's side of the wire: what `fawn broker-call` runs in a sandbox. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker/broker.h"

static int fail(int err_fd, const char *what) {
    dprintf(err_fd, "fawn broker: %s\n", what);
    return BROKER_EXIT_REFUSED;
}

/* Reads stdin up to BROKER_REQUEST_MAX + 1 bytes (more is refused by the
 * broker anyway); nothing from a terminal. */
static int read_stdin(fbuf *in, int in_fd, bool *oversize) {
    *oversize = false;
    if (isatty(in_fd))
        return 0;
    char buf[65536];
    for (;;) {
        ssize_t n = read(in_fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return 0;
        if (in->len + (size_t)n > BROKER_REQUEST_MAX) {
            *oversize = true;
            return 0;
        }
        if (fbuf_append(in, buf, (size_t)n) < 0)
            return -1;
    }
}

static int connect_to(const char *path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path)
        return -1;
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

static int read_exact(int fd, void *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        got += (size_t)k;
    }
    return 0;
}

/* Sends the request (just a header announcing its size when stdin was too
 * large: the broker refuses it) and replays the reply. */
static int exchange(int fd, const fbuf *req, bool oversize, int out_fd, int err_fd) {
    if (oversize) {
        uint8_t hdr[BROKER_HEADER_LEN] = {'F', 'W', 'B', '1', 0xff, 0xff, 0xff, 0xff};
        if (fawn_write_all(fd, hdr, sizeof hdr) < 0)
            return fail(err_fd, "cannot send the request to the broker");
    } else if (fawn_write_all(fd, req->data, req->len) < 0) {
        return fail(err_fd, "cannot send the request to the broker");
    }
    uint8_t hdr[BROKER_HEADER_LEN];
    size_t len = 0;
    if (read_exact(fd, hdr, sizeof hdr) < 0 || broker_header_parse(&len, hdr, BROKER_REPLY_MAX) < 0)
        return fail(err_fd, "no answer from the broker");
    _cleanup_free_ uint8_t *body = malloc(len ? len : 1);
    broker_reply rep;
    if (!body || read_exact(fd, body, len) < 0 || broker_reply_parse(&rep, body, len) < 0)
        return fail(err_fd, "a malformed answer from the broker");
    if (fawn_write_all(out_fd, rep.out, rep.out_len) < 0 ||
        fawn_write_all(err_fd, rep.err, rep.err_len) < 0)
        return BROKER_EXIT_REFUSED;
    if (rep.flags & BROKER_STDOUT_TRUNCATED)
        dprintf(err_fd, "fawn broker: stdout was truncated at %zu bytes\n", BROKER_OUTPUT_MAX);
    if (rep.flags & BROKER_STDERR_TRUNCATED)
        dprintf(err_fd, "fawn broker: stderr was truncated at %zu bytes\n", BROKER_OUTPUT_MAX);
    return rep.exit_code >= 0 && rep.exit_code <= 255 ? rep.exit_code : BROKER_EXIT_REFUSED;
}

int broker_shim_main(const char *socket_path, const char *name, char *const *argv, size_t argc,
                     int in_fd, int out_fd, int err_fd) {
    fbuf in = {.limit = BROKER_REQUEST_MAX}, req = {.limit = 2 * BROKER_REQUEST_MAX};
    bool oversize = false;
    int code;
    if (read_stdin(&in, in_fd, &oversize) < 0)
        code = fail(err_fd, "cannot read stdin");
    else if (!oversize && broker_request_encode(&req, name, argv, argc, in.data, in.len) < 0)
        code = fail(err_fd, "the request is too large");
    else {
        int fd = connect_to(socket_path);
        code = fd < 0 ? fail(err_fd, "the credential broker is not available in this sandbox")
                      : exchange(fd, &req, oversize, out_fd, err_fd);
        if (fd >= 0)
            close(fd);
    }
    fbuf_free(&in);
    fbuf_free(&req);
    return code;
}
