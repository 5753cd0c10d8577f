/* One MCP session over streamable HTTP (mcp_internal.h): every message is
 * a POST of one JSON-RPC message to the server's URL; the answer comes as
 * one application/json message, or as a text/event-stream whose events
 * are messages (the server's own requests and notifications among them,
 * read and passed over) until the one that answers. The session id the
 * server gives at initialize goes with every later message, and a DELETE
 * ends it.
 *
 * The server is configured by an operator, so its address is not held to
 * the research allow-list; but no redirect is followed, the host's proxy
 * settings and .netrc are never used, and every answer is bounded in bytes
 * (MCP_STREAM_MAX, MCP_MESSAGE_MAX an event) and time (the caller's
 * deadline). */
#include <ctype.h>
#include <curl/curl.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp_internal.h"
#include "model/model.h"

/* How long the goodbyes (notifications/cancelled, DELETE) may take. */
#define MCP_GOODBYE_TIMEOUT_MS 2000
#define MCP_USER_AGENT "fawn-mcp/1"

/* One POST in flight. */
typedef struct exchange {
    mcp_session *s;
    int64_t want_id; /* the request answered; 0: a notification */
    fbuf body;       /* an application/json answer */
    sse_parser sse;
    bool is_sse, sse_started;
    size_t bytes;
    mcp_msg answer;
    bool answered;
    int error; /* what stopped the transfer from inside */
    char session_id[256];
    char content_type[64];
} exchange;

static int progress_check(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    exchange *x = ctx;
    (void)dt, (void)dn, (void)ut, (void)un;
    return x->s->cancel && atomic_load(x->s->cancel);
}

/* Keeps the Mcp-Session-Id (visible ASCII, as the specification says) and
 * the Content-Type of the answer. */
static size_t header_read(char *buf, size_t size, size_t n, void *ctx) {
    exchange *x = ctx;
    size_t len = size * n;
    static const char sid[] = "mcp-session-id:", ctype[] = "content-type:";
    char *dst = NULL;
    size_t cap = 0, skip = 0;
    if (len > sizeof sid - 1 && strncasecmp(buf, sid, sizeof sid - 1) == 0)
        dst = x->session_id, cap = sizeof x->session_id, skip = sizeof sid - 1;
    else if (len > sizeof ctype - 1 && strncasecmp(buf, ctype, sizeof ctype - 1) == 0)
        dst = x->content_type, cap = sizeof x->content_type, skip = sizeof ctype - 1;
    if (!dst)
        return len;
    while (skip < len && (buf[skip] == ' ' || buf[skip] == '\t'))
        skip++;
    size_t k = 0;
    for (size_t i = skip; i < len && k < cap - 1; i++) {
        unsigned char c = (unsigned char)buf[i];
        if (c <= 0x20 || c >= 0x7f || (dst == x->content_type && c == ';'))
            break;
        dst[k++] = dst == x->content_type ? (char)tolower(c) : (char)c;
    }
    dst[k] = '\0';
    return len;
}

/* One message of the answer: the one that answers is kept, the server's
 * requests and notifications are passed over (fawn offers no sampling,
 * roots or elicitation). Returns 1 to stop once answered. */
static int message_take(exchange *x, const char *data, size_t len) {
    mcp_msg m;
    int r = mcp_msg_parse(&m, data, len);
    if (r < 0)
        return r;
    if (x->want_id && mcp_msg_answers(&m, x->want_id)) {
        x->answer = m;
        x->answered = true;
        return 1;
    }
    mcp_msg_clear(&m);
    return 0;
}

static int sse_event(void *ctx, const char *event, const char *data, size_t len) {
    exchange *x = ctx;
    if (strcmp(event, "message") != 0 || len == 0)
        return 0;
    return message_take(x, data, len);
}

static size_t body_write(char *buf, size_t size, size_t n, void *ctx) {
    exchange *x = ctx;
    size_t len = size * n;
    if ((x->bytes += len) > MCP_STREAM_MAX) {
        x->error = fawn_err(FAWN_E2BIG, "the server's answer is larger than %zu bytes",
                            MCP_STREAM_MAX);
        return 0;
    }
    if (!x->sse_started) {
        x->sse_started = true;
        x->is_sse = strcmp(x->content_type, "text/event-stream") == 0;
        if (x->is_sse)
            sse_init(&x->sse, sse_event, x);
        else
            x->body.limit = MCP_MESSAGE_MAX;
    }
    int r = x->is_sse ? sse_feed(&x->sse, buf, len) : fbuf_append(&x->body, buf, len);
    if (r == 0)
        return len;
    x->error = r == FAWN_E2BIG && x->is_sse
                   ? fawn_err(FAWN_E2BIG, "a message of the server is larger than %zu bytes",
                              MCP_MESSAGE_MAX)
               : r == FAWN_E2BIG ? fawn_err(FAWN_E2BIG,
                                            "the server's answer is larger than %zu "
                                            "bytes",
                                            MCP_MESSAGE_MAX)
                                 : r;
    return 0; /* stops the transfer: answered (r == 1), or the error */
}

void mcp_curl_defaults(CURL *c) {
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never the host's proxy settings */
    curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
    curl_easy_setopt(c, CURLOPT_USERAGENT, MCP_USER_AGENT);
}

static CURL *client_new(exchange *x) {
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    mcp_curl_defaults(c);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_read);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_check);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, x);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_URL, x->s->srv->url);
    return c;
}

/* Appends line to *list; false when out of memory (*list is then freed). */
static bool header_add(struct curl_slist **list, const char *line) {
    struct curl_slist *next = curl_slist_append(*list, line);
    if (!next) {
        curl_slist_free_all(*list);
        *list = NULL;
    }
    *list = next;
    return next != NULL;
}

struct curl_slist *mcp_curl_headers(const mcp_session *s, bool post, const char *accept) {
    struct curl_slist *list = NULL;
    bool ok = true;
    for (size_t i = 0; ok && s->srv->headers[i]; i++)
        ok = header_add(&list, s->srv->headers[i]);
    if (ok && s->authorization)
        ok = header_add(&list, s->authorization);
    ok = ok && (!post || header_add(&list, "Content-Type: application/json"));
    ok = ok && header_add(&list, accept ? accept : "Accept: application/json, text/event-stream");
    ok = ok && header_add(&list, "Expect:");
    ok = ok && header_add(&list, "MCP-Protocol-Version: " MCP_PROTOCOL_VERSION);
    if (ok && s->session_id[0]) {
        char line[320];
        snprintf(line, sizeof line, "Mcp-Session-Id: %s", s->session_id);
        ok = header_add(&list, line);
    }
    return list;
}

static int curl_failure(CURLcode c, const exchange *x) {
    if (x->error < 0)
        return x->error;
    if (c == CURLE_ABORTED_BY_CALLBACK)
        return fawn_err(FAWN_ECANCELED, "cancelled");
    if (c == CURLE_OPERATION_TIMEDOUT)
        return fawn_err(FAWN_ETIMEDOUT, "the MCP server %s did not answer in time",
                        x->s->srv->name);
    if (c == CURLE_OUT_OF_MEMORY)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return fawn_err(FAWN_EIO, "the MCP server %s could not be reached: %s", x->s->srv->name,
                    curl_easy_strerror(c));
}

/* What the transfer left: the answer read, or why there is none. */
static int exchange_finish(exchange *x, CURL *c) {
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 300 && status < 400)
        return fawn_err(FAWN_EIO,
                        "the MCP server %s answered with a redirect (HTTP %ld), which "
                        "fawn does not follow",
                        x->s->srv->name, status);
    if (status == 401 || status == 403) {
        x->s->refused = status;
        return fawn_err(FAWN_EPERM, "the MCP server %s refused the credentials (HTTP %ld)",
                        x->s->srv->name, status);
    }
    if (status < 200 || status >= 300)
        return fawn_err(FAWN_EIO, "the MCP server %s answered HTTP %ld", x->s->srv->name, status);
    if (!x->want_id || x->answered)
        return 0;
    if (!x->is_sse && x->body.len > 0) {
        int r = message_take(x, x->body.data, x->body.len);
        if (r < 0 || x->answered)
            return r < 0 ? r : 0;
        return fawn_err(FAWN_EPROTO, "the MCP server %s answered another request", x->s->srv->name);
    }
    return fawn_err(FAWN_EPROTO, "the MCP server %s ended its answer without one", x->s->srv->name);
}

/* POSTs text (or, with text NULL, DELETEs the session) and reads the
 * answer to want_id (0: none wanted) into *answer, until deadline_ms. */
static int exchange_run(mcp_msg *answer, mcp_session *s, const char *text, int64_t want_id,
                        int64_t deadline_ms) {
    memset(answer, 0, sizeof *answer);
    exchange x = {.s = s, .want_id = want_id};
    int r = fawn_curl_init();
    if (r < 0)
        return r;
    CURL *c = client_new(&x);
    struct curl_slist *headers = c ? mcp_curl_headers(s, text != NULL, NULL) : NULL;
    if (!c || !headers) {
        curl_easy_cleanup(c);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    int64_t left = deadline_ms - fawn_now_ms();
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, left > 0 ? (long)left : 1L);
    if (text) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
    } else {
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, "DELETE");
    }
    CURLcode cc = curl_easy_perform(c);
    if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && x.answered))
        r = curl_failure(cc, &x);
    else
        r = exchange_finish(&x, c);
    if (r == 0 && x.session_id[0] && !s->session_id[0])
        memcpy(s->session_id, x.session_id, sizeof s->session_id);
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
    if (x.sse_started && x.is_sse)
        sse_free(&x.sse);
    fbuf_free(&x.body);
    if (r == 0 && x.answered)
        *answer = x.answer;
    else
        mcp_msg_clear(&x.answer);
    return r;
}

/* Sends text over the session's transport, its answer to want_id (0:
 * none) into *answer. */
static int transport_send(mcp_msg *answer, mcp_session *s, const char *text, int64_t want_id,
                          int64_t deadline_ms) {
    return s->srv->type == MCP_SSE ? mcp_sse_exchange(answer, s, text, want_id, deadline_ms)
                                   : exchange_run(answer, s, text, want_id, deadline_ms);
}

/* Tells the server request id is given up (best effort, its own short
 * deadline: the call's has passed). */
static void cancelled_notify(mcp_session *s, int64_t id, const char *reason) {
    json_t *params = json_pack("{s:I, s:s}", "requestId", (json_int_t)id, "reason", reason);
    char *text = params ? mcp_notification_text("notifications/cancelled", params) : NULL;
    json_decref(params);
    mcp_msg none;
    const atomic_bool *cancel = s->cancel;
    s->cancel = NULL; /* the goodbye goes out even though the run is cancelled */
    if (text && transport_send(&none, s, text, 0, fawn_now_ms() + MCP_GOODBYE_TIMEOUT_MS) < 0)
        log_info("mcp", "%s: notifications/cancelled not delivered: %s", s->srv->name,
                 fawn_errmsg());
    s->cancel = cancel;
    free(text);
}

int mcp_session_request(mcp_msg *out, mcp_session *s, const char *method, const json_t *params,
                        int64_t deadline_ms) {
    memset(out, 0, sizeof *out);
    int64_t id = ++s->next_id;
    char *text = mcp_request_text(id, method, params);
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = transport_send(out, s, text, id, deadline_ms);
    free(text);
    if ((r == FAWN_ETIMEDOUT || r == FAWN_ECANCELED) && strcmp(method, "initialize") != 0) {
        char keep[512];
        snprintf(keep, sizeof keep, "%s", fawn_errmsg());
        cancelled_notify(s, id, r == FAWN_ETIMEDOUT ? "timeout" : "cancelled by the user");
        fawn_err(r, "%s", keep);
    }
    return r;
}

/* initialize's answer: a result naming a protocol revision. */
static int initialize_check(const mcp_msg *m, const mcp_server *srv) {
    if (m->kind == MCP_MSG_ERROR)
        return fawn_err(FAWN_EPROTO, "the MCP server %s refused initialize: %.200s", srv->name,
                        m->error_msg);
    if (!json_is_string(json_object_get(m->result, "protocolVersion")))
        return fawn_err(FAWN_EPROTO,
                        "the MCP server %s answered initialize without a protocol "
                        "version",
                        srv->name);
    return 0;
}

int mcp_session_open(mcp_session *s, const mcp_server *srv, const char *authorization,
                     const atomic_bool *cancel) {
    *s = (mcp_session){.srv = srv, .authorization = authorization, .cancel = cancel};
    if (srv->type == MCP_STDIO)
        return fawn_err(FAWN_EUNSUP, "the MCP server %s runs over stdio, in a sandbox", srv->name);
    int64_t deadline = fawn_now_ms() + (int64_t)srv->init_timeout_s * 1000;
    if (srv->type == MCP_SSE) {
        int r = mcp_sse_connect(s, deadline);
        if (r < 0)
            return r;
    }
    json_t *params = json_pack("{s:s, s:{}, s:{s:s, s:s}}", "protocolVersion", MCP_PROTOCOL_VERSION,
                               "capabilities", "clientInfo", "name", "fawn", "version", "1");
    mcp_msg m;
    int r = params ? mcp_session_request(&m, s, "initialize", params, deadline)
                   : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(params);
    if (r == 0)
        r = initialize_check(&m, srv);
    mcp_msg_clear(&m);
    s->open = r == 0 || s->session_id[0];
    char *note = r == 0 ? mcp_notification_text("notifications/initialized", NULL) : NULL;
    if (r == 0 && !note)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = transport_send(&m, s, note, 0, deadline);
    free(note);
    return r;
}

void mcp_session_close(mcp_session *s) {
    if (s->sse) { /* the old transport: the session ends with its stream */
        mcp_sse_close(s);
        s->open = false;
        return;
    }
    if (!s->open || !s->session_id[0])
        return;
    mcp_msg none;
    s->cancel = NULL;
    if (exchange_run(&none, s, NULL, 0, fawn_now_ms() + MCP_GOODBYE_TIMEOUT_MS) < 0)
        log_info("mcp", "%s: the session was not ended: %s", s->srv->name, fawn_errmsg());
    s->open = false;
}
