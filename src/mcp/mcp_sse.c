/* The old HTTP+SSE transport (MCP revision 2024-11-05), mcp_internal.h.
 *
 * The client GETs the server's URL and keeps that event stream open for
 * the whole session. Its first event, `endpoint`, names the URL to POST
 * messages to (relative or absolute); every answer comes back on the
 * stream as a `message` event. A request is one POST (its answer, 202 or
 * 200, carries nothing fawn reads) and then the stream is read until the
 * message with its id.
 *
 * The endpoint is the server's word, so it is held to the configured URL's
 * origin (scheme, host and port): a server cannot send fawn's messages,
 * its headers and OAuth token included, anywhere else. As for streamable
 * HTTP, no redirect is followed, the host's proxy settings and .netrc are
 * never used, and everything is bounded: the stream's bytes
 * (MCP_STREAM_MAX), an event (SSE_EVENT_MAX, then MCP_MESSAGE_MAX), a
 * POST's answer (MCP_SSE_POST_REPLY_MAX), the endpoint's length
 * (MCP_SSE_ENDPOINT_MAX) and the time (the caller's deadline: the endpoint
 * must come within the session's init timeout).
 *
 * The stream and the POSTs are driven by one curl multi handle in the
 * caller's thread; nothing runs between two calls. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp_internal.h"
#include "model/model.h"

/* The endpoint event's URL: longer is no URL a server needs. */
#define MCP_SSE_ENDPOINT_MAX 2048
/* What a POST's answer may hold ("Accepted"; fawn reads none of it). */
#define MCP_SSE_POST_REPLY_MAX ((size_t)64 << 10)
/* How long one wait for the sockets may last: the cancel flag is looked
 * at this often. */
#define MCP_SSE_POLL_MS 100

struct mcp_sse_conn {
    mcp_session *s;
    CURLM *multi;
    CURL *get;
    struct curl_slist *get_headers;
    sse_parser sse;
    bool sse_started;
    char content_type[64];
    size_t bytes;
    char *endpoint;  /* the POST URL, checked (malloc'd), once the event came */
    int64_t want_id; /* the request whose answer is awaited (0: none) */
    mcp_msg answer;
    bool answered;
    bool ended; /* the stream ended */
    int error;  /* what stopped the stream from inside */
};

/* One POST in flight. */
typedef struct sse_post {
    size_t bytes;
    bool done;
    CURLcode result;
} sse_post;

static int url_part(char **out, CURLU *u, CURLUPart part, unsigned flags) {
    *out = NULL;
    CURLUcode uc = curl_url_get(u, part, out, flags);
    if (uc == CURLUE_OK)
        return 0;
    if (uc == CURLUE_OUT_OF_MEMORY)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return FAWN_ENOENT;
}

/* Whether a and b (lowercased by curl) are the same text, both absent
 * counting as the same. */
static bool same_part(const char *a, const char *b) {
    return (!a && !b) || (a && b && strcasecmp(a, b) == 0);
}

int mcp_sse_endpoint(char **out, const char *base, const char *data, size_t len) {
    *out = NULL;
    if (len == 0 || len > MCP_SSE_ENDPOINT_MAX)
        return fawn_err(FAWN_EPROTO, "the endpoint event is empty or longer than %d bytes",
                        MCP_SSE_ENDPOINT_MAX);
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)data[i] <= 0x20 || (unsigned char)data[i] >= 0x7f)
            return fawn_err(FAWN_EPROTO, "the endpoint event is not a URL");
    char *text = strndup(data, len);
    CURLU *b = curl_url(), *e = curl_url();
    int r = text && b && e ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && (curl_url_set(b, CURLUPART_URL, base, 0) != CURLUE_OK ||
                   curl_url_set(e, CURLUPART_URL, base, 0) != CURLUE_OK))
        r = fawn_err(FAWN_EINVAL, "the server's URL cannot be read");
    /* Set over the base URL, a relative reference is resolved against it. */
    if (r == 0 && curl_url_set(e, CURLUPART_URL, text, CURLU_NON_SUPPORT_SCHEME) != CURLUE_OK)
        r = fawn_err(FAWN_EPROTO, "the endpoint event is not a URL");
    char *bp[3] = {0}, *ep[3] = {0}, *user = NULL, *password = NULL;
    static const CURLUPart parts[3] = {CURLUPART_SCHEME, CURLUPART_HOST, CURLUPART_PORT};
    for (size_t i = 0; r == 0 && i < 3; i++) {
        int rb = url_part(&bp[i], b, parts[i], CURLU_DEFAULT_PORT);
        int re = url_part(&ep[i], e, parts[i], CURLU_DEFAULT_PORT);
        r = rb == FAWN_ENOMEM || re == FAWN_ENOMEM ? FAWN_ENOMEM : 0;
    }
    if (r == 0 && (url_part(&user, e, CURLUPART_USER, 0) == 0 ||
                   url_part(&password, e, CURLUPART_PASSWORD, 0) == 0))
        r = fawn_err(FAWN_EPROTO, "the endpoint event's URL carries credentials");
    if (r == 0 && !(same_part(bp[0], ep[0]) && same_part(bp[1], ep[1]) && same_part(bp[2], ep[2])))
        r = fawn_err(FAWN_EPROTO,
                     "the endpoint event names another origin than the server's URL "
                     "(%.16s://%.200s:%.8s), which fawn refuses",
                     ep[0] ? ep[0] : "?", ep[1] ? ep[1] : "?", ep[2] ? ep[2] : "?");
    if (r == 0 && url_part(out, e, CURLUPART_URL, 0) < 0)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < 3; i++) {
        curl_free(bp[i]);
        curl_free(ep[i]);
    }
    curl_free(user);
    curl_free(password);
    curl_url_cleanup(b);
    curl_url_cleanup(e);
    free(text);
    if (r < 0) {
        curl_free(*out);
        *out = NULL;
        return r;
    }
    char *copy = strdup(*out); /* the caller frees with free() */
    curl_free(*out);
    *out = copy;
    return copy ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* ---- the stream ---- */

static int stream_event(void *ctx, const char *event, const char *data, size_t len) {
    mcp_sse_conn *c = ctx;
    if (strcmp(event, "endpoint") == 0) {
        if (c->endpoint) /* the first one holds for the session */
            return 0;
        int r = mcp_sse_endpoint(&c->endpoint, c->s->srv->url, data, len);
        return r < 0 ? fawn_err(r, "the MCP server %s: %s", c->s->srv->name, fawn_errmsg()) : 0;
    }
    if (strcmp(event, "message") != 0 || len == 0)
        return 0;
    mcp_msg m;
    int r = mcp_msg_parse(&m, data, len);
    if (r < 0)
        return r;
    if (c->want_id && !c->answered && mcp_msg_answers(&m, c->want_id)) {
        c->answer = m;
        c->answered = true;
        return 0;
    }
    mcp_msg_clear(&m); /* its requests and notifications, and late answers */
    return 0;
}

static size_t stream_header(char *buf, size_t size, size_t n, void *ctx) {
    mcp_sse_conn *c = ctx;
    size_t len = size * n;
    static const char ctype[] = "content-type:";
    if (len <= sizeof ctype - 1 || strncasecmp(buf, ctype, sizeof ctype - 1) != 0)
        return len;
    size_t i = sizeof ctype - 1, k = 0;
    while (i < len && (buf[i] == ' ' || buf[i] == '\t'))
        i++;
    for (; i < len && k < sizeof c->content_type - 1; i++) {
        unsigned char ch = (unsigned char)buf[i];
        if (ch <= 0x20 || ch >= 0x7f || ch == ';')
            break;
        c->content_type[k++] = (char)tolower(ch);
    }
    c->content_type[k] = '\0';
    return len;
}

/* An HTTP status other than 200 for the stream: why it cannot be read. */
static int stream_status_error(mcp_sse_conn *c, long status) {
    if (status == 401 || status == 403) {
        c->s->refused = status;
        return fawn_err(FAWN_EPERM, "the MCP server %s refused the credentials (HTTP %ld)",
                        c->s->srv->name, status);
    }
    if (status >= 300 && status < 400)
        return fawn_err(FAWN_EIO,
                        "the MCP server %s answered with a redirect (HTTP %ld), which "
                        "fawn does not follow",
                        c->s->srv->name, status);
    return fawn_err(FAWN_EIO, "the MCP server %s answered its event stream with HTTP %ld",
                    c->s->srv->name, status);
}

static size_t stream_write(char *buf, size_t size, size_t n, void *ctx) {
    mcp_sse_conn *c = ctx;
    size_t len = size * n;
    if ((c->bytes += len) > MCP_STREAM_MAX) {
        c->error = fawn_err(FAWN_E2BIG, "the MCP server %s sent more than %zu bytes in a session",
                            c->s->srv->name, MCP_STREAM_MAX);
        return 0;
    }
    if (!c->sse_started) {
        long status = 0;
        curl_easy_getinfo(c->get, CURLINFO_RESPONSE_CODE, &status);
        if (status != 200) {
            c->error = stream_status_error(c, status);
            return 0;
        }
        if (strcmp(c->content_type, "text/event-stream") != 0) {
            c->error = fawn_err(FAWN_EPROTO,
                                "the MCP server %s answered %.60s, not an event stream",
                                c->s->srv->name, c->content_type[0] ? c->content_type : "no type");
            return 0;
        }
        c->sse_started = true;
        sse_init(&c->sse, stream_event, c);
    }
    int r = sse_feed(&c->sse, buf, len);
    if (r == 0)
        return len;
    c->error = r == FAWN_E2BIG ? fawn_err(FAWN_E2BIG,
                                          "a message of the MCP server %s is larger "
                                          "than %zu bytes",
                                          c->s->srv->name, (size_t)SSE_EVENT_MAX)
                               : r;
    return 0;
}

static size_t post_write(char *buf, size_t size, size_t n, void *ctx) {
    sse_post *p = ctx;
    (void)buf;
    size_t len = size * n;
    return (p->bytes += len) > MCP_SSE_POST_REPLY_MAX ? 0 : len;
}

static CURL *handle_new(const char *url) {
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    mcp_curl_defaults(h);
    curl_easy_setopt(h, CURLOPT_URL, url);
    return h;
}

/* Reads what the multi handle says has ended: the stream, or post. */
static void ended_read(mcp_sse_conn *c, CURL *post, sse_post *p) {
    CURLMsg *msg;
    int left;
    while ((msg = curl_multi_info_read(c->multi, &left))) {
        if (msg->msg != CURLMSG_DONE)
            continue;
        if (msg->easy_handle == c->get && !c->ended) {
            c->ended = true;
            long status = 0;
            curl_easy_getinfo(c->get, CURLINFO_RESPONSE_CODE, &status);
            if (c->error == 0 && status != 200)
                c->error = stream_status_error(c, status);
            if (c->error == 0)
                c->error = msg->data.result == CURLE_OK
                               ? fawn_err(FAWN_EIO, "the MCP server %s ended its event stream",
                                          c->s->srv->name)
                               : fawn_err(FAWN_EIO, "the MCP server %s's event stream broke: %s",
                                          c->s->srv->name, curl_easy_strerror(msg->data.result));
        } else if (post && msg->easy_handle == post) {
            p->done = true;
            p->result = msg->data.result;
        }
    }
}

/* Drives the stream (and post, when not NULL) until done says so, an
 * error, the cancel flag or deadline_ms. */
static int drive(mcp_sse_conn *c, CURL *post, sse_post *p, bool (*done)(const mcp_sse_conn *c),
                 int64_t deadline_ms) {
    for (;;) {
        int running = 0;
        CURLMcode mc = curl_multi_perform(c->multi, &running);
        if (mc != CURLM_OK)
            return fawn_err(FAWN_EIO, "curl: %s", curl_multi_strerror(mc));
        ended_read(c, post, p);
        if (done(c) && (!post || p->done))
            return 0;
        if (c->error < 0 && !done(c)) /* an answer already read stands */
            return c->error;
        if (c->s->cancel && atomic_load(c->s->cancel))
            return fawn_err(FAWN_ECANCELED, "cancelled");
        int64_t left = deadline_ms - fawn_now_ms();
        if (left <= 0)
            return fawn_err(FAWN_ETIMEDOUT, "the MCP server %s did not answer in time",
                            c->s->srv->name);
        mc = curl_multi_poll(c->multi, NULL, 0,
                             (int)(left < MCP_SSE_POLL_MS ? left : MCP_SSE_POLL_MS), NULL);
        if (mc != CURLM_OK)
            return fawn_err(FAWN_EIO, "curl: %s", curl_multi_strerror(mc));
    }
}

static bool has_endpoint(const mcp_sse_conn *c) { return c->endpoint != NULL; }
static bool has_answer(const mcp_sse_conn *c) { return c->want_id == 0 || c->answered; }

int mcp_sse_connect(mcp_session *s, int64_t deadline_ms) {
    s->sse = NULL;
    int r = fawn_curl_init();
    if (r < 0)
        return r;
    mcp_sse_conn *c = calloc(1, sizeof *c);
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    c->s = s;
    s->sse = c;
    c->multi = curl_multi_init();
    c->get = c->multi ? handle_new(s->srv->url) : NULL;
    c->get_headers = c->get ? mcp_curl_headers(s, false, "Accept: text/event-stream") : NULL;
    if (!c->get_headers)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    curl_easy_setopt(c->get, CURLOPT_HTTPHEADER, c->get_headers);
    curl_easy_setopt(c->get, CURLOPT_WRITEFUNCTION, stream_write);
    curl_easy_setopt(c->get, CURLOPT_WRITEDATA, c);
    curl_easy_setopt(c->get, CURLOPT_HEADERFUNCTION, stream_header);
    curl_easy_setopt(c->get, CURLOPT_HEADERDATA, c);
    if (curl_multi_add_handle(c->multi, c->get) != CURLM_OK)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    r = drive(c, NULL, NULL, has_endpoint, deadline_ms);
    if (r == FAWN_ETIMEDOUT)
        r = fawn_err(FAWN_ETIMEDOUT, "the MCP server %s sent no endpoint event in time",
                     s->srv->name);
    return r;
}

int mcp_sse_exchange(mcp_msg *answer, mcp_session *s, const char *text, int64_t want_id,
                     int64_t deadline_ms) {
    memset(answer, 0, sizeof *answer);
    mcp_sse_conn *c = s->sse;
    if (!c || !c->endpoint)
        return fawn_err(FAWN_EPROTO, "the MCP server %s has no session", s->srv->name);
    if (c->error < 0) /* its message was told when it happened */
        return fawn_err(c->error, "the MCP server %s's event stream can no longer be read",
                        s->srv->name);
    mcp_msg_clear(&c->answer);
    c->answered = false;
    c->want_id = want_id;
    sse_post p = {0};
    CURL *post = handle_new(c->endpoint);
    struct curl_slist *headers = post ? mcp_curl_headers(s, true, NULL) : NULL;
    int r = headers ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0) {
        int64_t left = deadline_ms - fawn_now_ms();
        curl_easy_setopt(post, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(post, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
        curl_easy_setopt(post, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(post, CURLOPT_WRITEFUNCTION, post_write);
        curl_easy_setopt(post, CURLOPT_WRITEDATA, &p);
        curl_easy_setopt(post, CURLOPT_TIMEOUT_MS, left > 0 ? (long)left : 1L);
        r = curl_multi_add_handle(c->multi, post) == CURLM_OK
                ? drive(c, post, &p, has_answer, deadline_ms)
                : fawn_err(FAWN_ENOMEM, "out of memory");
    }
    long status = 0;
    if (post)
        curl_easy_getinfo(post, CURLINFO_RESPONSE_CODE, &status);
    if (r == 0 && (status == 401 || status == 403)) {
        s->refused = status;
        r = fawn_err(FAWN_EPERM, "the MCP server %s refused the credentials (HTTP %ld)",
                     s->srv->name, status);
    } else if (r == 0 && (p.result != CURLE_OK || status < 200 || status >= 300)) {
        r = p.result == CURLE_WRITE_ERROR
                ? fawn_err(FAWN_E2BIG,
                           "the MCP server %s answered a message with more than %zu "
                           "bytes",
                           s->srv->name, MCP_SSE_POST_REPLY_MAX)
            : p.result != CURLE_OK
                ? fawn_err(FAWN_EIO, "the MCP server %s could not be reached: %s", s->srv->name,
                           curl_easy_strerror(p.result))
                : fawn_err(FAWN_EIO, "the MCP server %s answered a message with HTTP %ld",
                           s->srv->name, status);
    }
    if (post) {
        curl_multi_remove_handle(c->multi, post);
        curl_easy_cleanup(post);
    }
    curl_slist_free_all(headers);
    c->want_id = 0;
    if (r == 0 && want_id) {
        *answer = c->answer;
        memset(&c->answer, 0, sizeof c->answer);
        c->answered = false;
    }
    return r;
}

void mcp_sse_close(mcp_session *s) {
    mcp_sse_conn *c = s->sse;
    if (!c)
        return;
    if (c->get) {
        if (c->multi)
            curl_multi_remove_handle(c->multi, c->get);
        curl_easy_cleanup(c->get);
    }
    curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->get_headers);
    if (c->sse_started)
        sse_free(&c->sse);
    mcp_msg_clear(&c->answer);
    free(c->endpoint);
    free(c);
    s->sse = NULL;
}
