/* Sockets, shims and framed messages shared by the broker (broker.c) and
 * a pod's relay (relay.c). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "broker/broker_internal.h"

static int write_shim(int dirfd, const char *name) {
    char tmp[96], text[256];
    snprintf(tmp, sizeof tmp, ".%s.%d", name, (int)gettid());
    int n = snprintf(text, sizeof text,
                     "#!/bin/sh\nexec " SBX_BROKER_MOUNT "/fawn broker-call %s \"$@\"\n", name);
    int fd = openat(dirfd, tmp, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0755);
    int r = fd < 0 ? fawn_err_sys(FAWN_EIO, errno, "create shim %s", name)
                   : fawn_write_all(fd, text, (size_t)n);
    if (fd >= 0 && fchmod(fd, 0755) < 0 && r == 0)
        r = fawn_err_sys(FAWN_EIO, errno, "chmod shim %s", name);
    if (fd >= 0)
        close(fd);
    if (r == 0 && renameat(dirfd, tmp, dirfd, name) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "install shim %s", name);
    if (r < 0)
        unlinkat(dirfd, tmp, 0);
    return r;
}

static bool listed(char *const *names, size_t n, const char *name) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(names[i], name) == 0)
            return true;
    return false;
}

/* Removes shims of CLIs no longer configured (a call through one would be
 * refused anyway; the sandbox's PATH should not offer it). */
static void remove_stale_shims(int dirfd, char *const *names, size_t n) {
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d) {
        if (fd >= 0)
            close(fd);
        return;
    }
    struct dirent *de;
    while ((de = readdir(d)))
        if (de->d_name[0] != '.' && !listed(names, n, de->d_name))
            unlinkat(dirfd, de->d_name, 0);
    closedir(d);
}

int broker_shims_write(const char *dir, char *const *names, size_t n) {
    char bin[PATH_MAX];
    if (snprintf(bin, sizeof bin, "%s/bin", dir) >= (int)sizeof bin)
        return fawn_err(FAWN_EINVAL, "path too long");
    if (mkdir(bin, 0755) < 0 && errno != EEXIST)
        return fawn_err_sys(FAWN_EIO, errno, "mkdir %s", bin);
    _cleanup_close_ int dirfd = open(bin, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", bin);
    remove_stale_shims(dirfd, names, n);
    for (size_t i = 0; i < n; i++) {
        int r = write_shim(dirfd, names[i]);
        if (r < 0)
            return r;
    }
    return 0;
}

int broker_socket_listen(int *out, const char *dir) {
    *out = -1;
    _cleanup_close_ int dirfd = open(dir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", dir);
    char tmp[64];
    snprintf(tmp, sizeof tmp, ".broker.%d.sock", (int)gettid());
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    snprintf(addr.sun_path, sizeof addr.sun_path, "/proc/self/fd/%d/%s", dirfd, tmp);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "socket");
    unlinkat(dirfd, tmp, 0);
    if (bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 64) < 0 ||
        fchmodat(dirfd, tmp, 0666, 0) < 0 || renameat(dirfd, tmp, dirfd, BROKER_SOCKET_NAME) < 0) {
        int e = errno;
        unlinkat(dirfd, tmp, 0);
        close(fd);
        return fawn_err_sys(FAWN_EIO, e, "listen in %s", dir);
    }
    *out = fd;
    return 0;
}

int broker_read_full(int fd, void *buf, size_t n, int64_t deadline) {
    size_t got = 0;
    while (got < n) {
        int64_t left = deadline - fawn_now_ms();
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (left <= 0 || poll(&p, 1, left > INT32_MAX ? INT32_MAX : (int)left) == 0)
            return fawn_err(FAWN_ETIMEDOUT, "the message did not arrive in time");
        ssize_t k = read(fd, (char *)buf + got, n - got);
        if (k < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (k <= 0)
            return fawn_err(FAWN_EPROTO, "the peer closed before its message was whole");
        got += (size_t)k;
    }
    return 0;
}

int broker_read_message(fbuf *out, int fd, size_t limit, int64_t deadline) {
    fbuf_free(out);
    uint8_t hdr[BROKER_HEADER_LEN];
    size_t len = 0;
    int r = broker_read_full(fd, hdr, sizeof hdr, deadline);
    if (r == 0)
        r = broker_header_parse(&len, hdr, limit);
    if (r < 0)
        return r;
    _cleanup_free_ uint8_t *body = malloc(len ? len : 1);
    r = body ? broker_read_full(fd, body, len, deadline) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = fbuf_append(out, hdr, sizeof hdr);
    if (r == 0)
        r = fbuf_append(out, body, len);
    if (r < 0)
        fbuf_free(out);
    return r;
}

int broker_send_all(int fd, const void *data, size_t len) {
    int flags = fcntl(fd, F_GETFL);
    if (flags >= 0)
        (void)fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
    for (size_t sent = 0; sent < len;) {
        ssize_t n = send(fd, (const char *)data + sent, len - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return fawn_err_sys(FAWN_EIO, errno, "send");
        sent += (size_t)n;
    }
    return 0;
}

void broker_send_reply(int fd, int code, unsigned flags, const char *out, size_t out_len,
                       const char *err, size_t err_len) {
    fbuf msg = {.limit = BROKER_REPLY_MAX + BROKER_HEADER_LEN};
    broker_reply rep = {.exit_code = code,
                        .flags = flags,
                        .out = out,
                        .out_len = out_len,
                        .err = err,
                        .err_len = err_len};
    int r = broker_reply_encode(&msg, &rep);
    if (r == 0)
        r = broker_send_all(fd, msg.data, msg.len);
    if (r < 0)
        log_debug("broker", "the reply was not delivered: %s", fawn_errmsg());
    fbuf_free(&msg);
}

void broker_send_refusal(int fd, int code, const char *why) {
    char text[512];
    int n = snprintf(text, sizeof text, "fawn broker: %s\n", why);
    broker_send_reply(fd, code, 0, NULL, 0, text,
                      (size_t)(n < (int)sizeof text ? n : (int)sizeof text - 1));
}
