/* Assertions with context shared by the integration and escape suites.
 * Include after <cmocka.h>. */
#ifndef FAWN_TESTS_SUPPORT_H
#define FAWN_TESTS_SUPPORT_H

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>

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

/* A number no other test on the host picks: 9 random digits, so that a
 * command line such as "sleep N" marks this test's process (a fixed width:
 * no other marker contains it). */
static inline unsigned unique_number(void) {
    uint32_t r;
    fawn_random_bytes(&r, sizeof r);
    return 100000000u + r % 900000000u;
}

/* How long host_procs_with rereads the empty command line of a live
 * process: one in the middle of an exec shows none until its new image has
 * its arguments (a ceiling that only a hang reaches). */
#define HOST_PROC_EXEC_MS 10000

/* Whether pid is a live user process (not a kernel thread, not a zombie):
 * read from /proc/pid/stat, whose command name may hold any byte. */
static inline bool host_proc_is_live_user(const char *pid) {
    char path[300], buf[1024];
    snprintf(path, sizeof path, "/proc/%s/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
    if (fd >= 0)
        close(fd);
    if (n <= 0)
        return false;
    buf[n] = '\0';
    char state = 0;
    unsigned long flags = 0; /* field 9; PF_KTHREAD marks a kernel thread */
    const char *rest = strrchr(buf, ')');
    if (!rest || sscanf(rest, ") %c %*d %*d %*d %*d %*d %lu", &state, &flags) != 2)
        return false;
    return state != 'Z' && state != 'X' && !(flags & 0x00200000ul);
}

/* The command line of pid with its NULs as spaces, in buf; its length, or
 * -1 when the process is gone. An empty one is reread while the process
 * lives (it is between images in an exec), up to HOST_PROC_EXEC_MS. */
static inline ssize_t host_proc_cmdline(char *buf, size_t size, const char *pid) {
    char path[300];
    snprintf(path, sizeof path, "/proc/%s/cmdline", pid);
    int64_t deadline = fawn_now_ms() + HOST_PROC_EXEC_MS;
    for (;;) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, buf, size - 1) : -1;
        if (fd >= 0)
            close(fd);
        if (n != 0 || !host_proc_is_live_user(pid) || fawn_now_ms() > deadline) {
            for (ssize_t i = 0; i < n; i++)
                if (buf[i] == '\0')
                    buf[i] = ' ';
            buf[n > 0 ? n : 0] = '\0';
            return n;
        }
        usleep(1000);
    }
}

/* Counts the host's processes (other than this one) whose command line
 * contains marker; *last gets the pid of one of them (when not NULL). A
 * process that has marker before an exec and after it is counted whenever
 * the scan reaches it, never missed in between. */
static inline int host_procs_with(const char *marker, pid_t *last) {
    DIR *d = opendir("/proc");
    assert_non_null(d);
    int count = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!isdigit((unsigned char)e->d_name[0]) || atoi(e->d_name) == getpid())
            continue;
        char buf[4096];
        if (host_proc_cmdline(buf, sizeof buf, e->d_name) > 0 && strstr(buf, marker)) {
            count++;
            if (last)
                *last = atoi(e->d_name);
        }
    }
    closedir(d);
    return count;
}

/* Waits until a host process carries marker (one just started may still be
 * between fork and exec), up to timeout_ms; true when one did. */
static inline bool host_procs_appear(const char *marker, int timeout_ms) {
    for (int64_t deadline = fawn_now_ms() + timeout_ms; host_procs_with(marker, NULL) == 0;) {
        if (fawn_now_ms() > deadline)
            return false;
        usleep(20000);
    }
    return true;
}

/* Waits until no host process carries marker, up to timeout_ms; true when
 * none did. */
static inline bool host_procs_gone(const char *marker, int timeout_ms) {
    for (int64_t deadline = fawn_now_ms() + timeout_ms; host_procs_with(marker, NULL) > 0;) {
        if (fawn_now_ms() > deadline)
            return false;
        usleep(20000);
    }
    return true;
}

/* Ceilings that only a hang reaches (a loaded 2-core host under ASan): a
 * server started by loopback_spawn listens within LOOPBACK_START_MS, a
 * reply to loopback_http ends within LOOPBACK_REPLY_MS. */
#define LOOPBACK_START_MS 60000
#define LOOPBACK_REPLY_MS 60000
/* Ports loopback_spawn tries when another process took the one it picked. */
#define LOOPBACK_PORT_ATTEMPTS 5

/* A TCP port on loopback bound by the kernel's choice; *fd keeps it bound
 * (not listening: a connection to it is refused, and no other process can
 * take it) until the caller closes it. */
static inline uint16_t loopback_reserved_port(int *fd) {
    *fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    assert_true(*fd >= 0);
    assert_int_equal(bind(*fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(getsockname(*fd, (struct sockaddr *)&a, &len), 0);
    return ntohs(a.sin_port);
}

/* A TCP port on loopback that was free a moment ago: another process may
 * take it before the caller binds it (loopback_spawn handles that). */
static inline uint16_t loopback_free_port(void) {
    int fd;
    uint16_t port = loopback_reserved_port(&fd);
    close(fd);
    return port;
}

/* The inode of the socket listening on 127.0.0.1:port (0 when none). */
static inline unsigned long loopback_listener_inode(uint16_t port) {
    FILE *f = fopen("/proc/net/tcp", "re");
    assert_non_null(f);
    char line[512], local[64], want[16];
    snprintf(want, sizeof want, "0100007F:%04X", port);
    unsigned long inode = 0, found = 0;
    unsigned st = 0;
    while (!found && fgets(line, sizeof line, f))
        if (sscanf(line, "%*s %63s %*s %x %*s %*s %*s %*s %*s %lu", local, &st, &inode) == 3 &&
            strcmp(local, want) == 0 && st == 0x0A /* TCP_LISTEN */)
            found = inode;
    fclose(f);
    return found;
}

/* Whether process pid holds the socket listening on 127.0.0.1:port: the
 * server the test started answers there, not another process. */
static inline bool loopback_port_held_by(uint16_t port, pid_t pid) {
    unsigned long inode = loopback_listener_inode(port);
    char dir[64], want[64];
    snprintf(dir, sizeof dir, "/proc/%d/fd", (int)pid);
    snprintf(want, sizeof want, "socket:[%lu]", inode);
    DIR *d = inode ? opendir(dir) : NULL;
    bool held = false;
    for (struct dirent *e; d && !held && (e = readdir(d));) {
        char target[64];
        ssize_t n = readlinkat(dirfd(d), e->d_name, target, sizeof target - 1);
        if (n > 0) {
            target[n] = '\0';
            held = strcmp(target, want) == 0;
        }
    }
    if (d)
        closedir(d);
    return held;
}

/* Waits up to ms for child pid to exit (*status gets its wait status); past
 * ms it is killed (SIGKILL) and reaped, and false is returned. */
static inline bool reap_within(int *status, pid_t pid, int ms) {
    int64_t deadline = fawn_now_ms() + ms;
    for (;;) {
        pid_t r = waitpid(pid, status, WNOHANG);
        if (r == pid)
            return true;
        assert_int_equal(r, 0); /* pid is this process's child, not reaped yet */
        if (fawn_now_ms() >= deadline)
            break;
        usleep(20000);
    }
    kill(pid, SIGKILL);
    waitpid(pid, status, 0);
    return false;
}

/* What a child of loopback_spawn runs: exec a server listening on port. */
typedef void (*loopback_exec_fn)(uint16_t port, void *ctx);

/* Starts a server on a loopback port of its own: a port the kernel picks
 * is given to exec_server in a child, which holds its listening socket
 * within LOOPBACK_START_MS. A port another process took meanwhile (the
 * child exits, or another process listens there) is given up for another.
 * Returns the child's pid, with its port in *port; fails the test when no
 * attempt worked. The child's stderr is the test's, so its log shows. */
static inline pid_t loopback_spawn(uint16_t *port, loopback_exec_fn exec_server, void *ctx) {
    int status = 0;
    for (int attempt = 1; attempt <= LOOPBACK_PORT_ATTEMPTS; attempt++) {
        *port = loopback_free_port();
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (pid == 0) {
            exec_server(*port, ctx);
            _exit(127);
        }
        int64_t deadline = fawn_now_ms() + LOOPBACK_START_MS;
        bool held = false, exited = false;
        while (!(held = loopback_port_held_by(*port, pid)) &&
               !(exited = waitpid(pid, &status, WNOHANG) == pid) && fawn_now_ms() < deadline)
            usleep(20000);
        if (held)
            return pid;
        if (!exited) {
            kill(pid, SIGKILL);
            waitpid(pid, NULL, 0);
            fail_msg("the server on port %u did not listen within %d ms (killed)", *port,
                     LOOPBACK_START_MS);
        }
    }
    fail_msg("the server exited (wait status %d) on each of the %d ports it was given", status,
             LOOPBACK_PORT_ATTEMPTS);
    return -1;
}

/* Past LOOPBACK_REPLY_MS without progress (SO_RCVTIMEO, SO_SNDTIMEO), a
 * loopback exchange fails the test: a server that hangs is not an answer. */
static inline void loopback_check_io(ssize_t n, uint16_t port) {
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
        fail_msg("127.0.0.1:%u: no progress within %d ms", port, LOOPBACK_REPLY_MS);
}

/* Sends one raw HTTP request to 127.0.0.1:port (retrying the connection for
 * up to connect_ms while a server starts) and reads to the end. Returns the
 * status (0 for an empty or unparsable reply, or a connection the server
 * reset: it may have been exiting; -1 when nothing listens); the body goes
 * to body (size bodysz) when not NULL. */
static inline int loopback_http(uint16_t port, const char *raw, char *body, size_t bodysz,
                                int connect_ms) {
    struct sockaddr_in a = {
        .sin_family = AF_INET, .sin_port = htons(port), .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
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
    struct timeval tv = {.tv_sec = LOOPBACK_REPLY_MS / 1000};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv), 0);
    size_t len = strlen(raw), done = 0;
    ssize_t n = 1;
    while (done < len && (n = send(fd, raw + done, len - done, MSG_NOSIGNAL)) > 0)
        done += (size_t)n;
    loopback_check_io(n, port);
    size_t cap = (size_t)1 << 20, got = 0;
    char *reply = malloc(cap + 1);
    assert_non_null(reply);
    while (done == len && got < cap && (n = read(fd, reply + got, cap - got)) > 0)
        got += (size_t)n;
    loopback_check_io(n, port);
    reply[got] = '\0';
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
