/* A fake HTTP server on loopback for unit tests: it answers each
 * connection with the next response of a script (the last one again once
 * the script is used up), sent whole or in timed pieces, then closes,
 * resets or holds the connection. */
#ifndef FAWN_TEST_FAKE_HTTP_H
#define FAWN_TEST_FAKE_HTTP_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum end_mode { END_CLOSE, END_RESET, END_HANG };

typedef struct response {
    const char *head; /* status line and headers, without the blank line */
    const char *body;
    size_t chunk; /* body is written in pieces of this size (0 = whole) */
    int delay_ms; /* pause before each piece */
    enum end_mode end;
} response;

typedef struct fake_server {
    int fd;
    uint16_t port;
    pthread_t thread;
    const response *script;
    size_t script_len;
    atomic_int served;
    atomic_bool hung_up_midway; /* the client went before a body was all sent */
    atomic_bool stop;
    pthread_mutex_t lock;
    char request[1 << 18]; /* the last request, head and body */
} fake_server;

/* Sleeps ms milliseconds. */
void sleep_ms(int ms);
/* Starts a server of script[0..n) on 127.0.0.1 (a port from the kernel). */
fake_server *server_start(const response *script, size_t n);
/* The same on a unix socket at path (replaced when it exists). */
fake_server *server_start_unix(const response *script, size_t n, const char *path);
/* Stops it and frees it. */
void server_stop(fake_server *s);

#endif
