/* The box API client with a bearer token: over TCP (remote placement), or
 * over a unix socket (the container provider). The
 * exchange itself is box_fd_call's (client.c): this file connects and adds
 * the Authorization header. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "base/base.h"
#include "sandbox/client.h"

/* "[" + an IPv6 address (INET6_ADDRSTRLEN) + "]:" + 5 digits, with room. */
#define TCP_HOST_PORT_MAX 64

int box_tcp_endpoint_parse(struct sockaddr_storage *addr, socklen_t *len, const char *host_port) {
    memset(addr, 0, sizeof *addr);
    *len = 0;
    char host[TCP_HOST_PORT_MAX];
    size_t n = strlen(host_port);
    const char *colon = strrchr(host_port, ':');
    if (n >= sizeof host || !colon || colon == host_port)
        return fawn_err(FAWN_EINVAL, "a box endpoint is IPv4:PORT or [IPv6]:PORT");
    bool v6 = host_port[0] == '[';
    size_t hlen = (size_t)(colon - host_port);
    if (v6 && (hlen < 3 || colon[-1] != ']'))
        return fawn_err(FAWN_EINVAL, "a box endpoint is IPv4:PORT or [IPv6]:PORT");
    memcpy(host, host_port + v6, hlen - 2 * v6);
    host[hlen - 2 * v6] = '\0';
    char *end;
    errno = 0;
    long port = strtol(colon + 1, &end, 10);
    if (colon[1] < '0' || colon[1] > '9' || *end || errno || port < 1 || port > 65535)
        return fawn_err(FAWN_EINVAL, "a box endpoint needs a port from 1 to 65535");
    struct sockaddr_in *a4 = (struct sockaddr_in *)addr;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)addr;
    if (!v6 && inet_pton(AF_INET, host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)port);
        *len = sizeof *a4;
        return 0;
    }
    if (v6 && inet_pton(AF_INET6, host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)port);
        *len = sizeof *a6;
        return 0;
    }
    return fawn_err(FAWN_EINVAL, "a box endpoint's host must be a numeric IP address");
}

/* Connects to host_port before deadline. Returns the (non-blocking) fd,
 * FAWN_ENOENT when refused, FAWN_ETIMEDOUT, or FAWN_EIO. */
static int tcp_connect(const char *host_port, int64_t deadline) {
    struct sockaddr_storage addr;
    socklen_t len = 0;
    int r = box_tcp_endpoint_parse(&addr, &len, host_port);
    if (r < 0)
        return r;
    _cleanup_close_ int fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "socket");
    int err = connect(fd, (struct sockaddr *)&addr, len) == 0 ? 0 : errno;
    while (err == EINPROGRESS || err == EINTR) {
        int64_t left = deadline - fawn_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLOUT};
        int n = left > 0 ? poll(&p, 1, (int)left) : 0;
        if (n == 0)
            return fawn_err(FAWN_ETIMEDOUT, "the box did not accept a connection in time");
        socklen_t elen = sizeof err;
        if (n < 0)
            err = errno == EINTR ? EINPROGRESS : errno;
        else if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &elen) < 0)
            err = errno;
    }
    if (err == ECONNREFUSED)
        return fawn_err(FAWN_ENOENT, "nothing listens at the box's endpoint");
    if (err)
        return fawn_err_sys(FAWN_EIO, err, "cannot connect to the box");
    return steal_fd(fd);
}

bool box_tcp_token_valid(const char *token) {
    size_t n = strlen(token);
    for (size_t i = 0; i < n; i++)
        if (token[i] < 0x21 || token[i] > 0x7e)
            return false;
    return n >= 1 && n <= BOX_TCP_TOKEN_MAX;
}

#define AUTH_HEADER_SIZE (sizeof "Authorization: Bearer \r\n" + BOX_TCP_TOKEN_MAX)

/* The Authorization header line for token into header ("" without one). */
static int auth_header(char header[AUTH_HEADER_SIZE], const char *token) {
    header[0] = '\0';
    if (token && !box_tcp_token_valid(token))
        return fawn_err(FAWN_EINVAL, "a box token is 1 to %d visible ASCII characters",
                        BOX_TCP_TOKEN_MAX);
    if (token)
        snprintf(header, AUTH_HEADER_SIZE, "Authorization: Bearer %s\r\n", token);
    return 0;
}

/* The Authorization header for token and a connection to host_port:
 * the fd (caller closes) or an error. */
static int tcp_open(char header[AUTH_HEADER_SIZE], const char *host_port, const char *token,
                    int64_t deadline) {
    int r = auth_header(header, token);
    return r < 0 ? r : tcp_connect(host_port, deadline);
}

int box_call_tcp(json_t **reply, int *status, const char *host_port, const char *token,
                 const char *method, const char *path, const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    char header[AUTH_HEADER_SIZE];
    _cleanup_close_ int fd = tcp_open(header, host_port, token, deadline);
    return fd < 0 ? fd : box_fd_call(reply, status, NULL, fd, header, method, path, body, deadline);
}

int box_call_file_tcp(json_t **reply, int *status, const char *host_port, const char *token,
                      const char *method, const char *path, int file_fd, uint64_t size,
                      int timeout_ms) {
    *reply = NULL;
    *status = 0;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    char header[AUTH_HEADER_SIZE];
    _cleanup_close_ int fd = tcp_open(header, host_port, token, deadline);
    return fd < 0
               ? fd
               : box_fd_call_file(reply, status, fd, header, method, path, file_fd, size, deadline);
}

/* ---- over a unix socket with a bearer token (the container provider) ---- */

/* The Authorization header for token and a non-blocking connection to
 * socket_path: the fd (caller closes) or an error. */
static int unix_open(char header[AUTH_HEADER_SIZE], const char *socket_path, const char *token) {
    int r = auth_header(header, token);
    if (r < 0)
        return r;
    int fd = box_connect(socket_path);
    if (fd >= 0 && fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) < 0) {
        r = fawn_err_sys(FAWN_EIO, errno, "fcntl");
        close(fd);
        return r;
    }
    return fd;
}

int box_call_unix(json_t **reply, int *status, const char *socket_path, const char *token,
                  const char *method, const char *path, const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    char header[AUTH_HEADER_SIZE];
    _cleanup_close_ int fd = unix_open(header, socket_path, token);
    return fd < 0 ? fd : box_fd_call(reply, status, NULL, fd, header, method, path, body, deadline);
}

int box_call_file_unix(json_t **reply, int *status, const char *socket_path, const char *token,
                       const char *method, const char *path, int file_fd, uint64_t size,
                       int timeout_ms) {
    *reply = NULL;
    *status = 0;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    char header[AUTH_HEADER_SIZE];
    _cleanup_close_ int fd = unix_open(header, socket_path, token);
    return fd < 0
               ? fd
               : box_fd_call_file(reply, status, fd, header, method, path, file_fd, size, deadline);
}
