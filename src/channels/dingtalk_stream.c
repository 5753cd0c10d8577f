/* DingTalk Stream mode (dingtalk_internal.h): fawn opens a connection
 * ticket (POST /v1.0/gateway/connections/open), then a WebSocket to the
 * endpoint with that ticket, answers SYSTEM ping frames with their own
 * data, hands robot messages (CALLBACK frames of the robot topic) to the
 * layer and acknowledges each once the layer has recorded it ({code: 200,
 * headers: {messageId}}), and reconnects with a growing delay when the
 * connection drops or the platform asks it to (SYSTEM disconnect).
 *
 * One thread per connection runs libwebsockets' service loop; everything
 * the connection sends is made on that thread. */
#include <libwebsockets.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/json.h"
#include "channels/dingtalk_internal.h"

#define DT_LOG "dingtalk"
/* Reconnection delay: doubles from the first to the last after each
 * failure, back to the first once connected. */
#define DT_BACKOFF_FIRST_MS 1000
#define DT_BACKOFF_MAX_MS 30000
/* How long one service call waits for the socket (the stop flag is read
 * between calls). */
#define DT_SERVICE_MS 200
/* Frames waiting to be sent at most (acks and pongs, a few at a time). */
#define DT_OUT_MAX 64

struct dt_stream {
    dt *d;
    ch_sink sink;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stopping;
    /* service thread only: */
    struct lws_context *ctx;
    struct lws *wsi;
    bool closed, established, reconnect;
    fbuf rx;
    char *out[DT_OUT_MAX];
    size_t n_out;
};

static bool stopping(dt_stream *s) {
    pthread_mutex_lock(&s->mu);
    bool stop = s->stopping;
    pthread_mutex_unlock(&s->mu);
    return stop;
}

/* Queues a frame to send (takes text). */
static void out_push(dt_stream *s, char *text) {
    if (!text)
        return;
    if (s->n_out == DT_OUT_MAX) {
        log_warn(DT_LOG, "too many frames waiting to be sent: one dropped");
        free(text);
        return;
    }
    s->out[s->n_out++] = text;
    if (s->wsi)
        lws_callback_on_writable(s->wsi);
}

/* The answer to a frame: {code, headers, message, data}. */
static char *ack_make(const dt_frame *f, int code, const char *data) {
    json_t *headers = json_pack("{s:s, s:s}", "contentType", "application/json", "messageId",
                                f->message_id);
    json_t *o = headers ? json_pack("{s:i, s:o, s:s, s:s}", "code", code, "headers", headers,
                                    "message", code == 200 ? "OK" : "error", "data", data)
                        : NULL;
    char *text = o ? fjson_dump(o) : NULL;
    json_decref(o);
    return text;
}

static void frame_system(dt_stream *s, const dt_frame *f) {
    if (strcmp(f->topic, "ping") == 0) {
        json_t *o = json_pack("{s:i, s:O, s:s, s:s}", "code", 200, "headers", f->headers, "message",
                              "OK", "data", f->data);
        out_push(s, o ? fjson_dump(o) : NULL);
        json_decref(o);
    } else if (strcmp(f->topic, "disconnect") == 0) {
        log_info(DT_LOG, "the platform asked to reconnect");
        s->reconnect = true;
    }
}

static void frame_callback(dt_stream *s, const dt_frame *f) {
    if (strcmp(f->topic, DT_TOPIC_ROBOT) != 0) {
        out_push(s, ack_make(f, 200, "{\"response\":null}"));
        return;
    }
    ch_inbound *m = NULL;
    if (dt_message_parse(&m, f->data, strlen(f->data)) < 0) {
        log_warn(DT_LOG, "robot message %s unreadable (%s): acknowledged and dropped",
                 f->message_id, fawn_errmsg());
        out_push(s, ack_make(f, 200, "{\"response\":null}"));
        return;
    }
    if (s->sink.message(s->sink.ctx, m) < 0) {
        log_warn(DT_LOG, "robot message %s not recorded (%s): the platform will send it again",
                 f->message_id, fawn_errmsg());
        return;
    }
    out_push(s, ack_make(f, 200, "{\"response\":null}"));
}

static void frame_handle(dt_stream *s, const char *text, size_t len) {
    dt_frame f;
    if (dt_frame_parse(&f, text, len) < 0) {
        log_warn(DT_LOG, "a stream frame unreadable: %s", fawn_errmsg());
        return;
    }
    if (strcmp(f.type, "SYSTEM") == 0)
        frame_system(s, &f);
    else if (strcmp(f.type, "CALLBACK") == 0)
        frame_callback(s, &f);
    else if (strcmp(f.type, "EVENT") == 0)
        out_push(s, ack_make(&f, 200, "{\"status\":\"SUCCESS\",\"message\":\"success\"}"));
    dt_frame_clear(&f);
}

static int ws_writable(dt_stream *s, struct lws *wsi) {
    if (s->n_out == 0)
        return s->reconnect ? -1 : 0;
    char *text = s->out[0];
    memmove(s->out, s->out + 1, (s->n_out - 1) * sizeof s->out[0]);
    s->n_out--;
    size_t len = strlen(text);
    unsigned char *buf = malloc(LWS_PRE + len);
    int r = 0;
    if (buf) {
        memcpy(buf + LWS_PRE, text, len);
        if (lws_write(wsi, buf + LWS_PRE, len, LWS_WRITE_TEXT) < (int)len)
            r = -1;
    }
    free(buf);
    free(text);
    if (s->n_out)
        lws_callback_on_writable(wsi);
    return r;
}

static int ws_callback(struct lws *wsi, enum lws_callback_reasons reason, void *user, void *in,
                       size_t len) {
    dt_stream *s = lws_context_user(lws_get_context(wsi));
    (void)user;
    switch (reason) {
    case LWS_CALLBACK_CLIENT_ESTABLISHED:
        s->established = true;
        s->sink.state(s->sink.ctx, "connected", "");
        log_info(DT_LOG, "stream connected");
        if (s->n_out)
            lws_callback_on_writable(wsi);
        break;
    case LWS_CALLBACK_CLIENT_RECEIVE:
        if (fbuf_append(&s->rx, in, len) < 0) {
            log_warn(DT_LOG, "a stream frame larger than %zu bytes: connection closed",
                     DT_FRAME_MAX);
            return -1;
        }
        if (lws_is_final_fragment(wsi) && !lws_remaining_packet_payload(wsi)) {
            frame_handle(s, s->rx.data ? s->rx.data : "", s->rx.len);
            fbuf_free(&s->rx);
            if (s->reconnect)
                lws_callback_on_writable(wsi);
        }
        break;
    case LWS_CALLBACK_CLIENT_WRITEABLE: return ws_writable(s, wsi);
    case LWS_CALLBACK_CLIENT_CONNECTION_ERROR:
        s->sink.state(s->sink.ctx, "error", "the stream connection failed");
        s->closed = true;
        s->wsi = NULL;
        break;
    case LWS_CALLBACK_CLIENT_CLOSED:
        s->closed = true;
        s->wsi = NULL;
        break;
    default: break;
    }
    return 0;
}

static const struct lws_protocols ws_protocols[] = {
    {"dingtalk-stream", ws_callback, 0, 64 * 1024, 0, NULL, 0},
    {NULL, NULL, 0, 0, 0, NULL, 0},
};

/* ticket percent-encoded for a query (malloc'd). */
static char *ticket_escape(const char *t) {
    size_t n = strlen(t);
    char *out = malloc(3 * n + 1), *o = out;
    for (size_t i = 0; out && i < n; i++) {
        unsigned char c = (unsigned char)t[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            c == '-' || c == '.' || c == '_' || c == '~')
            *o++ = (char)c;
        else
            o += sprintf(o, "%%%02X", c);
    }
    if (out)
        *o = '\0';
    return out;
}

/* Splits a ws(s) endpoint and connects to it with the ticket. */
static int ws_connect(dt_stream *s, const char *endpoint, const char *ticket) {
    bool tls = strncmp(endpoint, "wss://", 6) == 0;
    bool plain = strncmp(endpoint, "ws://", 5) == 0;
    if (!tls && !(plain && dt_cfg(s->d)->allow_insecure))
        return fawn_err(FAWN_EPROTO, "the stream endpoint is not a wss:// URL");
    const char *rest = endpoint + (tls ? 6 : 5);
    size_t hostport = strcspn(rest, "/?#");
    char host[256];
    if (hostport == 0 || hostport >= sizeof host)
        return fawn_err(FAWN_EPROTO, "the stream endpoint has no usable host");
    memcpy(host, rest, hostport);
    host[hostport] = '\0';
    int port = tls ? 443 : 80;
    char *colon = strrchr(host, ':');
    if (colon && !strchr(colon, ']')) {
        char *end = NULL;
        long v = strtol(colon + 1, &end, 10);
        if (!end || *end || v <= 0 || v > 65535)
            return fawn_err(FAWN_EPROTO, "the stream endpoint has a bad port");
        port = (int)v;
        *colon = '\0';
    }
    const char *path = rest + hostport;
    char *esc = ticket_escape(ticket);
    _cleanup_free_ char *full = NULL;
    int r = esc && asprintf(&full, "%s%sticket=%s", path[0] == '/' ? path : "/",
                            strchr(path, '?') ? "&" : "?", esc) >= 0
                ? 0
                : fawn_err(FAWN_ENOMEM, "out of memory");
    free(esc);
    if (r < 0)
        return r;
    struct lws_client_connect_info ci;
    memset(&ci, 0, sizeof ci);
    ci.context = s->ctx;
    ci.address = host;
    ci.port = port;
    ci.path = full;
    ci.host = host;
    ci.origin = host;
    ci.ssl_connection = tls ? LCCSCF_USE_SSL : 0;
    ci.protocol = NULL;
    ci.local_protocol_name = ws_protocols[0].name;
    ci.pwsi = &s->wsi;
    s->closed = s->established = s->reconnect = false;
    if (!lws_client_connect_via_info(&ci))
        return fawn_err(FAWN_EIO, "the stream connection could not be started");
    return 0;
}

/* One connection: ticket, WebSocket, service until it closes. */
static int stream_once(dt_stream *s) {
    _cleanup_free_ char *endpoint = NULL, *ticket = NULL;
    s->sink.state(s->sink.ctx, "connecting", "");
    int r = dt_connection_open(&endpoint, &ticket, s->d);
    if (r == 0)
        r = ws_connect(s, endpoint, ticket);
    if (r < 0) {
        s->sink.state(s->sink.ctx, "error", fawn_errmsg());
        log_warn(DT_LOG, "stream: %s", fawn_errmsg());
        return r;
    }
    while (!s->closed && !stopping(s))
        lws_service(s->ctx, DT_SERVICE_MS);
    if (!s->closed && s->wsi) { /* stopping: close it and let it finish */
        s->reconnect = true;
        lws_callback_on_writable(s->wsi);
        for (int i = 0; i < 10 && !s->closed; i++)
            lws_service(s->ctx, DT_SERVICE_MS);
    }
    fbuf_free(&s->rx);
    for (size_t i = 0; i < s->n_out; i++)
        free(s->out[i]);
    s->n_out = 0;
    return s->established ? 0 : fawn_err(FAWN_EIO, "the stream closed before it was established");
}

static void *stream_main(void *arg) {
    dt_stream *s = arg;
    int delay = DT_BACKOFF_FIRST_MS;
    while (!stopping(s)) {
        if (stream_once(s) == 0)
            delay = DT_BACKOFF_FIRST_MS;
        else
            delay = delay * 2 > DT_BACKOFF_MAX_MS ? DT_BACKOFF_MAX_MS : delay * 2;
        pthread_mutex_lock(&s->mu);
        struct timespec until;
        clock_gettime(CLOCK_MONOTONIC, &until);
        until.tv_sec += delay / 1000;
        until.tv_nsec += (long)(delay % 1000) * 1000000L;
        if (until.tv_nsec >= 1000000000L) {
            until.tv_sec++;
            until.tv_nsec -= 1000000000L;
        }
        while (!s->stopping && pthread_cond_timedwait(&s->wake, &s->mu, &until) == 0)
            ;
        pthread_mutex_unlock(&s->mu);
    }
    if (!stopping(s))
        return NULL;
    s->sink.state(s->sink.ctx, "stopped", "");
    return NULL;
}

int dt_stream_start(dt_stream **out, dt *d, const ch_sink *sink) {
    *out = NULL;
    dt_stream *s = calloc(1, sizeof *s);
    if (!s)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    s->d = d;
    s->sink = *sink;
    s->rx.limit = DT_FRAME_MAX;
    pthread_mutex_init(&s->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&s->wake, &ca);
    pthread_condattr_destroy(&ca);
    lws_set_log_level(LLL_ERR, NULL);
    struct lws_context_creation_info info;
    memset(&info, 0, sizeof info);
    info.port = CONTEXT_PORT_NO_LISTEN;
    info.protocols = ws_protocols;
    info.options = LWS_SERVER_OPTION_DO_SSL_GLOBAL_INIT;
    info.user = s;
    info.gid = -1;
    info.uid = -1;
    s->ctx = lws_create_context(&info);
    if (!s->ctx || pthread_create(&s->thread, NULL, stream_main, s) != 0) {
        if (s->ctx)
            lws_context_destroy(s->ctx);
        pthread_cond_destroy(&s->wake);
        pthread_mutex_destroy(&s->mu);
        free(s);
        return fawn_err(FAWN_EIO, "cannot start the DingTalk stream");
    }
    *out = s;
    return 0;
}

void dt_stream_stop(dt_stream *s) {
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    s->stopping = true;
    pthread_cond_broadcast(&s->wake);
    pthread_mutex_unlock(&s->mu);
    lws_cancel_service(s->ctx);
    pthread_join(s->thread, NULL);
    lws_context_destroy(s->ctx);
    pthread_cond_destroy(&s->wake);
    pthread_mutex_destroy(&s->mu);
    free(s);
}
