/* The box API client: requests to a box over a unix socket (the local
 * provider), over TCP with a bearer token (the remote provider), or over
 * any connected stream. Replies come from inside a sandbox and are parsed
 * as untrusted input, bounded by BOX_REPLY_MAX. Shared by the providers
 * (and the CLI); the rest of fawn calls a box through sbx_call (manager.h).
 *
 * Every out-parameter is set on every path, failures included: NULL
 * replies and status 0 before anything can fail. */
#ifndef FAWN_SANDBOX_CLIENT_H
#define FAWN_SANDBOX_CLIENT_H

#include <jansson.h>
#include <sys/socket.h>
#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include "base/base.h"

/* Largest reply accepted from a box: commands' output is capped by the box,
 * but a box is untrusted, so its replies are capped here too. */
#define BOX_REPLY_MAX ((size_t)256 << 20)

/* A keep-alive connection to one box. */
typedef struct box_conn {
    char socket_path[PATH_MAX];
    int fd; /* -1 when not connected */
} box_conn;

/* Prepares c for the box at socket_path (connects lazily). */
void box_conn_init(box_conn *c, const char *socket_path);
/* Closes the connection (c can be used again: it reconnects). */
void box_conn_close(box_conn *c);

/* Sends one request on c, reusing its connection when the box kept it open,
 * and parses the JSON reply. A request is never re-sent: when the exchange
 * fails midway its outcome is unknown to the caller, and c is closed.
 * Results and errors as for box_call. */
FAWN_MUST_CHECK int box_conn_call(json_t **reply, int *status, box_conn *c, const char *method,
                                  const char *path, const json_t *body, int timeout_ms);

/* Sends one request on fd, a connected stream to a box, and parses the JSON
 * reply: the exchange box_conn_call and box_call make, for callers that
 * connect another way (TCP). headers (NULL for none) are complete header
 * lines, each ending in "\r\n", that the caller has checked hold no other
 * CR or LF. deadline_ms (fawn_now_ms clock) bounds the exchange. When
 * keep_alive is not NULL it tells whether fd may carry another request
 * (false after any error). Results and errors as for box_call. */
FAWN_MUST_CHECK int box_fd_call(json_t **reply, int *status, bool *keep_alive, int fd,
                                const char *headers, const char *method, const char *path,
                                const json_t *body, int64_t deadline_ms);

/* The same with a body of size bytes read from file_fd (from its current
 * offset), sent as application/octet-stream: file uploads. */
FAWN_MUST_CHECK int box_fd_call_file(json_t **reply, int *status, int fd, const char *headers,
                                     const char *method, const char *path, int file_fd,
                                     uint64_t size, int64_t deadline_ms);

/* Sends one request on a new connection to the box at socket_path and
 * parses the JSON reply. body may be NULL. *status gets the HTTP status;
 * *reply (caller decrefs) the parsed object (for non-2xx too, when JSON).
 * timeout_ms bounds the whole exchange. FAWN_EPROTO for a malformed reply,
 * FAWN_ETIMEDOUT, FAWN_EIO when the box is unreachable. */
FAWN_MUST_CHECK int box_call(json_t **reply, int *status, const char *socket_path,
                             const char *method, const char *path, const json_t *body,
                             int timeout_ms);

/* Connects to a unix socket path of any length. Returns fd or < 0. */
FAWN_MUST_CHECK int box_connect(const char *socket_path);

/* ---- over TCP (client_tcp.c) ---- */

/* Longest bearer token: what sbx_box.token holds. */
#define BOX_TCP_TOKEN_MAX 127

/* True when token can go in an Authorization header: 1 to
 * BOX_TCP_TOKEN_MAX visible ASCII characters (no space, CR, LF or NUL). */
bool box_tcp_token_valid(const char *token);

/* Parses a box endpoint's host_port ("IPv4:PORT" or "[IPv6]:PORT", numeric,
 * port 1 to 65535) into addr and *len (zeroed first); FAWN_EINVAL for
 * anything else. */
FAWN_MUST_CHECK int box_tcp_endpoint_parse(struct sockaddr_storage *addr, socklen_t *len,
                                           const char *host_port);

/* Sends one box API request to the box at host_port ("IPv4:PORT" or
 * "[IPv6]:PORT", numeric: a name lookup could not be bounded by the
 * deadline) on a new connection, with "Authorization: Bearer <token>"
 * unless token is NULL, and parses the JSON reply. Results and errors as
 * for box_call (reply bounded by BOX_REPLY_MAX; FAWN_EPROTO for a malformed
 * reply, FAWN_ETIMEDOUT once timeout_ms passed, FAWN_EIO when the box
 * cannot be reached), except that a refused connection is FAWN_ENOENT:
 * nothing listens there, so the request was certainly not delivered.
 * FAWN_EINVAL for a malformed host_port or a token that box_tcp_token_valid
 * refuses (nothing is sent). */
FAWN_MUST_CHECK int box_call_tcp(json_t **reply, int *status, const char *host_port,
                                 const char *token, const char *method, const char *path,
                                 const json_t *body, int timeout_ms);

/* The same with a body of size bytes read from file_fd, sent as
 * application/octet-stream (file uploads). */
FAWN_MUST_CHECK int box_call_file_tcp(json_t **reply, int *status, const char *host_port,
                                      const char *token, const char *method, const char *path,
                                      int file_fd, uint64_t size, int timeout_ms);

/* ---- over a unix socket with a bearer token (client_tcp.c) ---- */

/* box_call to the box at socket_path with "Authorization: Bearer <token>"
 * (unless token is NULL): how the container provider reaches a box whose
 * socket is in a directory bound into its container. Results and errors as
 * for box_call (FAWN_EIO when nothing can be reached there); FAWN_EINVAL for
 * a token that box_tcp_token_valid refuses (nothing is sent). */
FAWN_MUST_CHECK int box_call_unix(json_t **reply, int *status, const char *socket_path,
                                  const char *token, const char *method, const char *path,
                                  const json_t *body, int timeout_ms);

/* The same with a body of size bytes read from file_fd (file uploads). */
FAWN_MUST_CHECK int box_call_file_unix(json_t **reply, int *status, const char *socket_path,
                                       const char *token, const char *method, const char *path,
                                       int file_fd, uint64_t size, int timeout_ms);

#endif
