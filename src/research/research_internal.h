/* research: what fetch.c and search.c share and nothing outside
 * src/research includes: one HTTP request through the allow-list. */
#ifndef FAWN_RESEARCH_INTERNAL_H
#define FAWN_RESEARCH_INTERNAL_H

#include "research/research.h"

/* The longest wait a Retry-After may ask for: an hour. A server asking
 * for more is answered as if it had asked for an hour, so a tool never
 * tells the model to wait a day on a proxy's word. */
#define WEB_RETRY_AFTER_MAX_MS (3600LL * 1000)

typedef struct web_http_request {
    const char *method;         /* "GET" or "POST" */
    const char *url;            /* http or https, no user name or password */
    const char *const *headers; /* extra "Name: value" lines, NULL-terminated (may be NULL) */
    const char *body;           /* POST's body, sent as application/json (may be NULL) */
    size_t max_bytes;           /* of the (decoded) body kept; past it the transfer stops */
    int64_t deadline_ms;        /* on fawn_now_ms()'s clock */
} web_http_request;

typedef struct web_http_reply {
    long status;
    int64_t retry_after_ms; /* the Retry-After header (seconds or a date) capped at
                               WEB_RETRY_AFTER_MAX_MS; -1 when none or unreadable */
    char content_type[128]; /* media type, lowercase, without parameters ("" when none) */
    char charset[64];       /* the Content-Type's charset, lowercase ("" when none) */
    char *location;         /* a 3xx's target, absolute (malloc'd), else NULL */
    char *body;             /* NUL-terminated (malloc'd; may hold NULs), NULL when empty */
    size_t len;
    bool truncated; /* cut at max_bytes */
} web_http_reply;

/* Makes one request and follows no redirect: a 3xx is answered with its
 * location. The connection, like every one fawn makes for research, goes
 * only to an address net_connect_allowed lets through for the URL's host;
 * never through the host's proxy settings or with .netrc credentials.
 * cancel (may be NULL) stops it. *out holds the answer whatever its status
 * (cleared on failure). FAWN_EINVAL for a URL that is not http(s) or has
 * credentials (naming why), FAWN_EPERM when an address was refused (naming
 * the host), FAWN_ETIMEDOUT, FAWN_ECANCELED, FAWN_EIO for the network,
 * FAWN_ENOMEM. Free *out with web_http_reply_clear. */
FAWN_MUST_CHECK int web_http_do(web_http_reply *out, const web_http_request *req,
                                const net_allowlist *al, const atomic_bool *cancel);
void web_http_reply_clear(web_http_reply *r);

/* A Retry-After value (delta-seconds or an HTTP date, relative to
 * now_wall_ms) in milliseconds, capped at WEB_RETRY_AFTER_MAX_MS; -1 when
 * it is neither. */
int64_t web_retry_after_parse(const char *value, int64_t now_wall_ms);

#endif
