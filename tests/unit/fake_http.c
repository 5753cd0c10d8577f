/* The fake HTTP server (fake_http.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "support.h"
#include "unit/fake_http.h"

void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static size_t read_request(int fd, char *buf, size_t size) {
    size_t len = 0;
    size_t want = SIZE_MAX;
    while (len < size - 1 && len < want) {
        ssize_t n = read(fd, buf + len, size - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
        buf[len] = '\0';
        char *end = strstr(buf, "\r\n\r\n");
        if (end && want == SIZE_MAX) {
            char *cl = strcasestr(buf, "Content-Length:");
            want = (size_t)(end + 4 - buf) + (cl && cl < end ? strtoul(cl + 15, NULL, 10) : 0);
        }
    }
    buf[len] = '\0';
    return len;
}

static void wait_for_client_close(fake_server *s, int fd) {
    char junk[256];
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 20) > 0 && read(fd, junk, sizeof junk) <= 0)
            return;
    }
}

static void serve_one(fake_server *s, int fd) {
    char req[sizeof s->request];
    read_request(fd, req, sizeof req);
    pthread_mutex_lock(&s->lock);
    memcpy(s->request, req, sizeof req);
    pthread_mutex_unlock(&s->lock);
    int index = atomic_fetch_add(&s->served, 1);
    const response
        *r = &s->script[(size_t)index < s->script_len ? (size_t)index : s->script_len - 1];
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    char *head = strf("%s\r\nConnection: close\r\n\r\n", r->head);
    (void)!send(fd, head, strlen(head), MSG_NOSIGNAL);
    free(head);
    size_t len = r->body ? strlen(r->body) : 0, step = r->chunk ? r->chunk : len;
    for (size_t off = 0; off < len; off += step) {
        if (r->delay_ms)
            sleep_ms(r->delay_ms);
        if (send(fd, r->body + off, len - off < step ? len - off : step, MSG_NOSIGNAL) < 0) {
            atomic_store(&s->hung_up_midway, true);
            break;
        }
    }
    if (r->end == END_RESET) {
        struct linger lg = {1, 0};
        setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof lg);
    } else if (r->end == END_HANG) {
        wait_for_client_close(s, fd);
    }
    close(fd);
}

static void *server_main(void *arg) {
    fake_server *s = arg;
    while (!atomic_load(&s->stop)) {
        struct pollfd p = {.fd = s->fd, .events = POLLIN};
        if (poll(&p, 1, 20) <= 0)
            continue;
        int fd = accept(s->fd, NULL, NULL);
        if (fd >= 0)
            serve_one(s, fd);
    }
    return NULL;
}

fake_server *server_start(const response *script, size_t n) {
    fake_server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->script = script;
    s->script_len = n;
    pthread_mutex_init(&s->lock, NULL);
    s->fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(s->fd >= 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof a;
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->fd, 8), 0);
    assert_int_equal(getsockname(s->fd, (struct sockaddr *)&a, &alen), 0);
    s->port = ntohs(a.sin_port);
    assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
    return s;
}

fake_server *server_start_unix(const response *script, size_t n, const char *path) {
    fake_server *s = calloc(1, sizeof *s);
    assert_non_null(s);
    s->script = script;
    s->script_len = n;
    pthread_mutex_init(&s->lock, NULL);
    s->fd = socket(AF_UNIX, SOCK_STREAM, 0);
    assert_true(s->fd >= 0);
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    assert_true(strlen(path) < sizeof a.sun_path);
    strcpy(a.sun_path, path);
    unlink(path);
    assert_int_equal(bind(s->fd, (struct sockaddr *)&a, sizeof a), 0);
    assert_int_equal(listen(s->fd, 8), 0);
    assert_int_equal(pthread_create(&s->thread, NULL, server_main, s), 0);
    return s;
}

void server_stop(fake_server *s) {
    atomic_store(&s->stop, true);
    pthread_join(s->thread, NULL);
    close(s->fd);
    pthread_mutex_destroy(&s->lock);
    free(s);
}
