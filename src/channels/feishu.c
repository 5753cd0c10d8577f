/* Feishu/Lark adapter for the channel layer (platform.h): event callbacks
 * in (feishu_event.c), the open platform's API out (feishu_api.c).
 *
 * handle_http: headers → feishu_callback_parse → an answer (the challenge,
 * 200, or 401/400/413) and at most one normalized message (message_to_inbound).
 * Replies: text as a text message, Markdown and streamed answers as an
 * interactive card (updated with PATCH while the run streams), files and
 * images uploaded then sent. */
#include <string.h>

#include "base/json.h"
#include "channels/feishu_internal.h"
#include "channels/platform.h"

/* A card's Markdown is cut here: the platform refuses cards past 30 KB of
 * JSON, and escaping grows the text. */
#define FEISHU_CARD_TEXT_MAX ((size_t)24 << 10)
/* A text message is cut here: the platform's limit is 150 KB of JSON. */
#define FEISHU_TEXT_MESSAGE_MAX ((size_t)100 << 10)
/* Shown under a card while its run streams. */
#define FEISHU_STREAMING_NOTE "working…"

typedef struct feishu_platform {
    feishu_settings set;
    feishu_client *client;
} feishu_platform;

static feishu_platform *impl_of(ch_platform *p) { return p->impl; }

/* ---- inbound ---- */

static const char *header_find(const ch_http_request *req, const char *name) {
    for (size_t i = 0; i < req->n_headers && i < CH_HTTP_HEADERS_MAX; i++)
        if (!strcmp(req->headers[i].name, name))
            return req->headers[i].value;
    return NULL;
}

static int respond(ch_http_response *resp, unsigned status, int code, const char *msg) {
    json_t *o = json_pack("{s:i,s:s}", "code", code, "msg", msg);
    resp->status = status;
    resp->body = o ? fjson_dump(o) : NULL;
    json_decref(o);
    resp->body_len = resp->body ? strlen(resp->body) : 0;
    return resp->body ? 0 : fawn_err(FAWN_ENOMEM, "out of memory answering a feishu callback");
}

/* text cut to at most max bytes, never inside a UTF-8 character. */
static char *text_cut(const char *text, size_t max) {
    size_t n = strlen(text);
    if (n > max)
        n = fawn_utf8_char_start(text, max);
    return strndup(text, n);
}

static int dup_into(char **field, const char *s) {
    *field = s ? strdup(s) : NULL;
    return !s || *field ? 0 : fawn_err(FAWN_ENOMEM, "out of memory reading a feishu message");
}

/* The text the agent reads: the message's, or a note for a type fawn does
 * not read (so it can answer that). */
static int inbound_text(ch_inbound *in, const feishu_message *m) {
    if (m->type != FEISHU_MSG_OTHER) {
        in->text = text_cut(m->text, CH_TEXT_MAX);
        return in->text ? 0 : fawn_err(FAWN_ENOMEM, "out of memory reading a feishu message");
    }
    if (asprintf(&in->text, "[a %s message, which this channel cannot read]", m->type_name) < 0) {
        in->text = NULL;
        return fawn_err(FAWN_ENOMEM, "out of memory reading a feishu message");
    }
    return 0;
}

static int message_to_inbound(ch_inbound **out, const feishu_message *m) {
    *out = NULL;
    ch_inbound *in = NULL;
    int r = ch_inbound_new(&in);
    if (r < 0)
        return r;
    in->is_group = m->chat_type == FEISHU_CHAT_GROUP;
    if ((r = dup_into(&in->event_id, m->event_id)) == 0 &&
        (r = dup_into(&in->message_id, m->message_id)) == 0 &&
        (r = dup_into(&in->chat_id, m->chat_id)) == 0 &&
        (r = dup_into(&in->sender_id, m->sender_open_id)) == 0)
        r = inbound_text(in, m);
    for (size_t i = 0; r == 0 && i < m->n_resources; i++) {
        const feishu_resource *res = &m->resources[i];
        r = ch_inbound_add_attachment(
            in, res->kind == FEISHU_RESOURCE_IMAGE ? CH_ATTACH_IMAGE : CH_ATTACH_FILE, res->name,
            res->key);
    }
    if (r < 0) {
        ch_inbound_free(in);
        return r;
    }
    *out = in;
    return 0;
}

/* The answer to a refused callback: 401 for anything unauthenticated, 413
 * past the size bound, 400 for an authentic body fawn cannot read. */
static int refusal(ch_http_response *resp, int err) {
    if (err == FAWN_ENOMEM)
        return err;
    unsigned status = err == FAWN_EPERM ? 401 : err == FAWN_E2BIG ? 413 : 400;
    log_warn("feishu", "callback refused (%u): %s", status, fawn_errmsg());
    return respond(resp, status, (int)status,
                   status == 401   ? "unauthorized"
                   : status == 413 ? "too large"
                                   : "bad request");
}

/* 200, and the message for the layer (which records it before the answer
 * leaves: a platform that gets no 200 delivers again). */
static int message_answer(ch_http_response *resp, ch_inbound ***msgs_out, size_t *n_msgs_out,
                          const feishu_message *m) {
    ch_inbound **msgs = calloc(1, sizeof *msgs);
    int r = msgs ? message_to_inbound(&msgs[0], m)
                 : fawn_err(FAWN_ENOMEM, "out of memory reading a feishu message");
    if (r == 0 && (r = respond(resp, 200, 0, "ok")) == 0) {
        *msgs_out = msgs;
        *n_msgs_out = 1;
        return 0;
    }
    if (msgs)
        ch_inbound_free(msgs[0]);
    free(msgs);
    return r;
}

static int feishu_handle_http(ch_platform *p, const ch_http_request *req, ch_http_response *resp,
                              ch_inbound ***msgs_out, size_t *n_msgs_out) {
    *msgs_out = NULL;
    *n_msgs_out = 0;
    memset(resp, 0, sizeof *resp);
    feishu_platform *f = impl_of(p);
    if (strcmp(req->method, "POST") != 0)
        return respond(resp, 405, 405, "method not allowed");
    feishu_request fr = {.timestamp = header_find(req, "x-lark-request-timestamp"),
                         .nonce = header_find(req, "x-lark-request-nonce"),
                         .signature = header_find(req, "x-lark-signature"),
                         .body = req->body,
                         .body_len = req->body_len,
                         .now_s = fawn_wall_ms() / 1000};
    feishu_secrets secrets = {.verification_token = f->set.verification_token,
                              .encrypt_key = f->set.encrypt_key};
    feishu_callback cb;
    int r = feishu_callback_parse(&cb, &secrets, &fr);
    if (r < 0)
        return refusal(resp, r);
    if (cb.kind == FEISHU_CALLBACK_CHALLENGE) {
        resp->status = 200;
        r = feishu_challenge_answer(&resp->body, cb.challenge);
        resp->body_len = resp->body ? strlen(resp->body) : 0;
    } else if (cb.kind == FEISHU_CALLBACK_MESSAGE) {
        r = message_answer(resp, msgs_out, n_msgs_out, &cb.msg);
    } else {
        r = respond(resp, 200, 0, "ok");
    }
    feishu_callback_free(&cb);
    return r;
}

static int feishu_download(ch_platform *p, const ch_inbound *msg, const ch_attachment *a, int fd,
                           uint64_t cap, uint64_t *size_out) {
    *size_out = 0;
    size_t written = 0;
    size_t max = cap < FEISHU_DOWNLOAD_MAX ? (size_t)cap : FEISHU_DOWNLOAD_MAX;
    int r = feishu_resource_download(
        &written, impl_of(p)->client, msg->message_id, a->ref,
        a->kind == CH_ATTACH_IMAGE ? FEISHU_RESOURCE_IMAGE : FEISHU_RESOURCE_FILE, fd, max);
    if (r == 0)
        *size_out = written;
    return r;
}

/* ---- outbound ---- */

/* Sends content of msg_type as a reply to the message answered, or into
 * the chat when there is none. */
static int deliver(char **out_id, feishu_platform *f, const ch_target *to, const char *msg_type,
                   const char *content) {
    if (to->message_id)
        return feishu_message_reply(out_id, f->client, to->message_id, msg_type, content);
    return feishu_message_send(out_id, f->client, to->chat_id, msg_type, content);
}

static int card_of(char **out, const char *text, bool streaming) {
    _cleanup_free_ char *cut = text_cut(text, FEISHU_CARD_TEXT_MAX);
    if (!cut) {
        *out = NULL;
        return fawn_err(FAWN_ENOMEM, "out of memory building a feishu card");
    }
    return feishu_card_content(out, cut, streaming ? FEISHU_STREAMING_NOTE : NULL);
}

static int feishu_send_text(ch_platform *p, const ch_target *to, const char *text, bool markdown,
                            bool updatable, char **ref_out) {
    if (ref_out)
        *ref_out = NULL;
    feishu_platform *f = impl_of(p);
    bool card = markdown || (updatable && f->set.stream_cards);
    _cleanup_free_ char *content = NULL;
    _cleanup_free_ char *cut = NULL;
    int r = 0;
    if (card)
        r = card_of(&content, text, updatable && f->set.stream_cards);
    else if (!(cut = text_cut(text, FEISHU_TEXT_MESSAGE_MAX)))
        r = fawn_err(FAWN_ENOMEM, "out of memory building a feishu message");
    else
        r = feishu_text_content(&content, cut);
    if (r < 0)
        return r;
    _cleanup_free_ char *id = NULL;
    r = deliver(&id, f, to, card ? "interactive" : "text", content);
    if (r == 0 && ref_out && updatable && card && f->set.stream_cards)
        *ref_out = steal_ptr(id);
    return r;
}

static int feishu_update_text(ch_platform *p, const ch_target *to, const char *ref,
                              const char *text, bool final) {
    (void)to;
    _cleanup_free_ char *content = NULL;
    int r = card_of(&content, text, !final);
    return r < 0 ? r : feishu_card_update(impl_of(p)->client, ref, content);
}

static int feishu_send_file(ch_platform *p, const ch_target *to, enum ch_attach_kind kind,
                            const char *name, int fd, uint64_t size) {
    feishu_platform *f = impl_of(p);
    /* An image past the platform's image cap still goes, as a file. */
    bool image = kind == CH_ATTACH_IMAGE && size <= FEISHU_IMAGE_UPLOAD_MAX;
    if (size > FEISHU_FILE_UPLOAD_MAX)
        return fawn_err(FAWN_E2BIG, "feishu: %s is %llu bytes, the platform takes at most %zu",
                        name, (unsigned long long)size, FEISHU_FILE_UPLOAD_MAX);
    _cleanup_free_ char *key = NULL;
    _cleanup_free_ char *content = NULL;
    _cleanup_free_ char *id = NULL;
    int r = image ? feishu_image_upload(&key, f->client, fd, name)
                  : feishu_file_upload(&key, f->client, fd, name);
    if (r == 0)
        r = feishu_key_content(&content, image ? FEISHU_RESOURCE_IMAGE : FEISHU_RESOURCE_FILE, key);
    if (r == 0)
        r = deliver(&id, f, to, image ? "image" : "file", content);
    return r;
}

/* ---- lifecycle ---- */

static int feishu_start(ch_platform *p, const ch_sink *sink) {
    (void)p;
    /* Events arrive through handle_http; there is no connection to keep. */
    if (sink->state)
        sink->state(sink->ctx, "connected", "waiting for event callbacks");
    return 0;
}

static void feishu_stop(ch_platform *p) { (void)p; }

static void feishu_destroy(ch_platform *p) {
    if (!p)
        return;
    feishu_platform *f = p->impl;
    if (f) {
        feishu_client_free(f->client);
        feishu_settings_free(&f->set);
        free(f);
    }
    free(p);
}

static const ch_platform_ops feishu_ops = {
    .start = feishu_start,
    .stop = feishu_stop,
    .handle_http = feishu_handle_http,
    .download = feishu_download,
    .send_text = feishu_send_text,
    .update_text = feishu_update_text,
    .send_file = feishu_send_file,
    .destroy = feishu_destroy,
};

static int feishu_open(ch_platform **out, const fawn_config *cfg, const json_t *runtime) {
    *out = NULL;
    ch_platform *p = calloc(1, sizeof *p);
    feishu_platform *f = calloc(1, sizeof *f);
    if (!p || !f) {
        free(p);
        free(f);
        return fawn_err(FAWN_ENOMEM, "out of memory opening the feishu channel");
    }
    p->ops = &feishu_ops;
    p->impl = f;
    int r = feishu_settings_read(&f->set, json_object_get(cfg->channels, "feishu"), runtime);
    if (r == 0)
        r = feishu_client_new(&f->client, &(feishu_client_config){.api_base = f->set.api_base,
                                                                  .app_id = f->set.app_id,
                                                                  .app_secret = f->set.app_secret});
    if (r < 0) {
        feishu_destroy(p);
        return r;
    }
    *out = p;
    return 0;
}

static const ch_setting feishu_settings_list[] = {
    {"app_id", false},     {"app_secret", true}, {"verification_token", true},
    {"encrypt_key", true}, {"api_base", false},
};

const ch_provider ch_provider_feishu = {
    .name = "feishu",
    .settings = feishu_settings_list,
    .n_settings = ARRAY_LEN(feishu_settings_list),
    .open = feishu_open,
};
