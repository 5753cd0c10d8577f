/* A small, strict HTTP/1.1 server for the box API.
 *
 * Scope: requests with an optional Content-Length body (chunked transfer
 * encoding is refused with 501, which also rules out request smuggling),
 * keep-alive, one thread per connection (bounded), responses with a known
 * length or streamed with chunked encoding. Every size and wait is bounded by
 * the constants below. The request-head parser is a pure function so it can
 * be unit tested and fuzzed on its own.
 *
 * Every out-parameter is set on every path, failures included (NULL, -1,
 * 0, "" before anything can fail). */
#ifndef FAWN_BOX_HTTP_H
#define FAWN_BOX_HTTP_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/base.h"

/* 16 KiB of request line + headers is far above what any box client sends. */
#define HTTP_MAX_HEAD_BYTES 16384
/* The box API uses a handful of headers; more is abuse. */
#define HTTP_MAX_HEADERS 32
/* Method names are short tokens (GET, POST, DELETE, ...). */
#define HTTP_MAX_METHOD 15

typedef struct http_header {
    const char *name;  /* as sent; compare case-insensitively */
    const char *value; /* leading/trailing blanks trimmed */
} http_header;

typedef struct http_request {
    char method[HTTP_MAX_METHOD + 1];
    const char *path;  /* target without the query, as sent (no decoding) */
    const char *query; /* text after '?', or NULL */
    http_header headers[HTTP_MAX_HEADERS];
    size_t n_headers;
    int64_t content_length; /* -1 when absent */
    bool keep_alive;        /* HTTP/1.1 default true; "Connection: close" false */
    int version_minor;      /* 1 for HTTP/1.1, 0 for HTTP/1.0 */
} http_request;

/* Parses a request head in buf[0..len). On success returns 0, fills *req with
 * pointers into buf (which it modifies in place, so buf must outlive req) and
 * sets *head_len to the bytes consumed including the final CRLFCRLF.
 * Returns 1 when the head is incomplete and more bytes are needed (and len is
 * still under HTTP_MAX_HEAD_BYTES). On a malformed head returns a negative
 * FAWN_E* code and sets *status to the HTTP status to answer with (400, 413,
 * 431, 501, 505). Never reads past buf[len-1]. */
FAWN_MUST_CHECK int http_parse_head(http_request *req, size_t *head_len, int *status, char *buf,
                                    size_t len);

/* Case-insensitive header lookup; NULL when absent. */
const char *http_header_get(const http_request *req, const char *name);

/* Value of query parameter `name` (percent-decoded once, '+' as space) copied
 * into out (size outsz). Returns 0, FAWN_ENOENT when absent, FAWN_EINVAL when
 * malformed, FAWN_E2BIG when it does not fit. NUL bytes are refused.
 * The whole query must be well formed, and a parameter given twice is
 * FAWN_EINVAL (no guessing which one the client meant). */
FAWN_MUST_CHECK int http_query_get(char *out, size_t outsz, const http_request *req,
                                   const char *name);

typedef struct http_conn http_conn;

/* Reads up to n bytes of the request body. Returns the count, 0 at the end of
 * the body, or a negative FAWN_E* code (peer gone, I/O timeout). A request
 * with "Expect: 100-continue" gets its "100 Continue" on the first read that
 * needs bytes from the peer; a handler that answers without reading the body
 * never sends it (the connection then closes after the response). */
ssize_t http_body_read(http_conn *c, void *buf, size_t n);

/* Reads the whole body into a malloc'd NUL-terminated buffer (caller frees).
 * FAWN_E2BIG when Content-Length exceeds limit (nothing is read then). */
FAWN_MUST_CHECK int http_body_read_all(char **out, size_t *out_len, http_conn *c, size_t limit);

/* The answers below return nothing: an answer's failure is the
 * connection's. One that cannot be built (out of memory, a bad status or
 * header) sends nothing, so http_responded stays false and the server
 * answers 500 for the handler; one that cannot be sent marks the connection
 * failed, and the server closes it. Either is logged at debug level. */

/* Sends a complete response. Content-Length is set from len. */
void http_respond(http_conn *c, int status, const char *content_type, const void *body, size_t len);

/* Sends v serialized as compact JSON (v is borrowed, not freed). */
void http_respond_json(http_conn *c, int status, const json_t *v);

/* Sends {"error": code, "detail": message} with the given status. */
void http_respond_error(http_conn *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

/* Answers a failed operation: the negative FAWN_E* code picks the status
 * (EINVAL and EPROTO 400, EPERM 403, ENOENT 404, EEXIST and EBUSY 409,
 * E2BIG 413, EUNSUP 501, anything else 500) and fawn_errmsg() is the detail. */
void http_respond_failure(http_conn *c, int code);

/* Starts a streamed response with the given status and headers (extra_headers
 * is NULL or complete "Name: value\r\n" lines). The body is then sent with
 * http_stream_write and ended with http_stream_end (chunked encoding). */
FAWN_MUST_CHECK int http_stream_begin(http_conn *c, int status, const char *content_type,
                                      const char *extra_headers);
FAWN_MUST_CHECK int http_stream_write(http_conn *c, const void *data, size_t n);
FAWN_MUST_CHECK int http_stream_end(http_conn *c);

/* True once a response (or its first bytes) has been sent on this request. */
bool http_responded(const http_conn *c);

/* Whether c's client still waits for the answer: false once it has closed
 * its end of the connection (its process died, say). Safe to call from
 * another thread while the request is in progress. */
bool http_client_waiting(const http_conn *c);

/* Called once per request. The handler must answer (a request left
 * unanswered gets a 500). Unread body bytes are discarded afterwards. */
typedef void (*http_handler)(http_conn *c, const http_request *req, void *ud);

typedef struct http_server_opts {
    int listen_fd;            /* a listening stream socket (unix or TCP), owned by caller */
    const char *bearer_token; /* if non-NULL, every request needs "Authorization: Bearer <token>" */
    size_t max_connections;   /* beyond this, new connections get 503 and are closed */
    int idle_timeout_ms;      /* keep-alive wait for the next request */
    int io_timeout_ms;        /* longest wait for any single read or write */
    http_handler handler;
    void *ud;
} http_server_opts;

/* Accepts and serves connections until http_server_stop() is called or the
 * listening socket fails. Each connection runs on its own thread. Before
 * returning, it lets requests in progress finish and waits for every
 * connection thread to end (idle keep-alive connections close at once).
 * Returns 0 after a stop, or a negative FAWN_E* code. */
FAWN_MUST_CHECK int http_serve(const http_server_opts *opts);

/* Asks a running http_serve to return (async-signal-safe). A stop requested
 * while no server runs makes the next http_serve return at once. */
void http_server_stop(void);

#endif
