/* Connection state shared by http.c (I/O and responses) and server.c
 * (accept loop and request lifecycle). No other file includes this. */
#ifndef FAWN_BOX_HTTP_INTERNAL_H
#define FAWN_BOX_HTTP_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "box/http.h"
#include "base/base.h"

/* Unread request bodies up to 1 MiB are read and dropped to keep the
 * connection; beyond that closing is cheaper than draining. */
#define HTTP_DRAIN_MAX ((int64_t)1 << 20)

struct http_conn {
    int fd;            /* connected, non-blocking socket; owned by the server */
    int stop_fd;       /* readable once the server stops; -1 when none */
    int io_timeout_ms; /* longest wait for one read or write */
    char *buf;         /* HTTP_MAX_HEAD_BYTES bytes: the head, then pipelined bytes */
    size_t buf_len;    /* valid bytes in buf */
    size_t buf_pos;    /* first byte of buf not consumed yet */
    int64_t body_left; /* request body bytes not consumed yet */
    bool keep_alive;   /* before a response: may it offer keep-alive; after: did it */
    bool http10;       /* the request was HTTP/1.0 (no chunked responses) */
    bool head_method;  /* HEAD request: responses carry no body */
    bool expect_continue;
    bool continue_sent;
    bool responded;
    bool streaming; /* a streamed response has begun */
    bool chunked;   /* the stream uses chunked encoding (else ends with the connection) */
    bool stream_ended;
    bool failed;         /* an I/O error happened; the connection must close */
    bool single_request; /* serve one request, then close (no keep-alive) */
};

/* Receives up to n bytes, waiting until deadline_ms (fawn_now_ms clock).
 * Returns the count, 0 at end of stream, FAWN_ETIMEDOUT, FAWN_EBUSY when
 * watch_stop is set and the server is stopping, or FAWN_EIO. */
ssize_t http_conn_recv(http_conn *c, void *buf, size_t n, int64_t deadline_ms, bool watch_stop);

/* Sends every byte of iov (modified in place), waiting at most io_timeout_ms
 * for each write. On failure marks the connection failed and returns
 * FAWN_ETIMEDOUT or FAWN_EIO. */
FAWN_MUST_CHECK int http_conn_send(http_conn *c, struct iovec *iov, int iovcnt);

/* Like http_respond_error with a preformatted detail and extra header lines
 * (NULL or complete "Name: value\r\n" lines). */
void http_respond_error_headers(http_conn *c, int status, const char *extra_headers,
                                const char *code, const char *detail);

#endif
