/* Assertions with context shared by the integration and escape suites.
 * Include after <cmocka.h>. */
#ifndef FAWN_TESTS_SUPPORT_H
#define FAWN_TESTS_SUPPORT_H

#include <errno.h>
#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/base.h"

static inline const char *or_empty(const char *s) { return s ? s : ""; }

/* Fills an out-parameter with bytes no function would write, as an
 * uninitialized stack variable may hold: a call that fails must still set
 * it, or the caller's clear/free/close afterwards acts on garbage. */
#define POISON(v) memset(&(v), 0xA5, sizeof(v))

/* Fails, showing the haystack, unless needle occurs in hay (NULL = ""). */
#define check_contains(what, hay, needle)                                                          \
    do {                                                                                           \
        const char *_h = or_empty(hay);                                                            \
        if (!strstr(_h, (needle)))                                                                 \
            fail_msg("%s: expected \"%s\" in:\n%s", (what), (needle), _h);                         \
    } while (0)

/* Fails, showing the haystack, when needle occurs in hay (NULL = ""). */
#define check_lacks(what, hay, needle)                                                             \
    do {                                                                                           \
        const char *_h = or_empty(hay);                                                            \
        if (strstr(_h, (needle)))                                                                  \
            fail_msg("%s: \"%s\" must not appear in:\n%s", (what), (needle), _h);                  \
    } while (0)

/* A malloc'd formatted string (the caller frees it). */
static inline char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline char *strf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    return s;
}

/* Counts the host's processes (other than this one) whose command line
 * contains marker; *last gets the pid of one of them (when not NULL). */
static inline int host_procs_with(const char *marker, pid_t *last) {
    DIR *d = opendir("/proc");
    assert_non_null(d);
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0]) || atoi(e->d_name) == getpid())
            continue;
        char path[sizeof e->d_name + 16], buf[4096];
        snprintf(path, sizeof path, "/proc/%s/cmdline", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n <= 0)
            continue;
        for (ssize_t i = 0; i < n; i++)
            if (buf[i] == '\0')
                buf[i] = ' ';
        buf[n] = '\0';
        if (strstr(buf, marker)) {
            count++;
            if (last)
                *last = atoi(e->d_name);
        }
    }
    closedir(d);
    return count;
}

/* A TCP port on loopback that was free a moment ago. */
static inline uint16_t loopback_free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof a), 0);
    getsockname(fd, (struct sockaddr *)&a, &len);
    close(fd);
    return ntohs(a.sin_port);
}

/* Sends one raw HTTP request to 127.0.0.1:port (retrying the connection for
 * up to connect_ms while a server starts) and reads to the end. Returns the
 * status (0 for an empty, unparsable or cut-off reply, -1 when nothing
 * listens); the
 * body goes to body (size bodysz) when not NULL. */
static inline int loopback_http(uint16_t port, const char *raw, char *body, size_t bodysz,
                                int connect_ms) {
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int64_t deadline = fawn_now_ms() + connect_ms;
    int fd;
    for (;;) {
        fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof a) == 0)
            break;
        close(fd);
        if (fawn_now_ms() >= deadline)
            return -1;
        usleep(20000);
    }
    char *reply = NULL;
    size_t len = 0;
    /* A server that closes or resets the connection mid-request (one that
     * is exiting) gave no reply: status 0. */
    bool sent = true; /* MSG_NOSIGNAL: a reset connection is an error, not SIGPIPE */
    for (size_t off = 0, n = strlen(raw); sent && off < n;) {
        ssize_t w = send(fd, raw + off, n - off, MSG_NOSIGNAL);
        sent = w > 0 || (w < 0 && errno == EINTR);
        off += w > 0 ? (size_t)w : 0;
    }
    if (!sent || fawn_read_all(&reply, &len, fd, 1 << 20) < 0) {
        close(fd);
        free(reply);
        return 0;
    }
    close(fd);
    int status = 0;
    sscanf(reply, "HTTP/1.1 %d", &status);
    const char *b = strstr(reply, "\r\n\r\n");
    if (body)
        snprintf(body, bodysz, "%s", b ? b + 4 : "");
    free(reply);
    return status;
}

#endif
