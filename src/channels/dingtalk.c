/* The DingTalk adapter (platform.h), Stream mode: fawn connects out
 * (dingtalk_stream.c), so no public endpoint is needed. This file holds
 * its configuration, the OpenAPI calls (access token, file download,
 * robot sends, media upload, AI cards) and the ops table.
 *
 * Configuration, channels.dingtalk (runtime settings win over it):
 *   enabled           false turns the platform off (true)
 *   client_id         the app's ClientID (AppKey)            [runtime]
 *   client_secret     the app's ClientSecret (AppSecret)     [runtime, secret]
 *   robot_code        the robot's code (client_id)           [runtime]
 *   card_template_id  an AI card template: replies stream into a card [runtime]
 *   api_base          https://api.dingtalk.com
 *   oapi_base         https://oapi.dingtalk.com (media upload)
 *   allow_insecure    http:// bases and ws:// stream endpoints (false; tests)
 *   download_allow    addresses download URLs may have besides public ones,
 *                     as web.allow (none) */
#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "channels/dingtalk_internal.h"

#define DT_LOG "dingtalk"
/* Largest OpenAPI answer read (they are small JSON objects). */
#define DT_REPLY_MAX ((size_t)1 << 20)
/* One OpenAPI call's time, and a download's or an upload's. */
#define DT_CALL_TIMEOUT_S 30L
#define DT_TRANSFER_TIMEOUT_S 600L
/* Largest file sent (the media upload API's limit for files). */
#define DT_SEND_FILE_MAX ((uint64_t)20 << 20)
/* An access token is renewed this long before the platform says it expires. */
#define DT_TOKEN_MARGIN_MS (5 * 60 * 1000)
/* Redirects a download follows at most (each connection checked). */
#define DT_REDIRECTS_MAX 3L
/* Bytes of a config text value. */
#define DT_VALUE_MAX 4096

struct dt {
    dt_config cfg;
    pthread_mutex_t token_mu;
    char *token;
    int64_t token_expiry_ms; /* monotonic */
    dt_stream *stream;
};

const dt_config *dt_cfg(const dt *d) { return &d->cfg; }

/* ---- configuration ---- */

static const ch_setting dt_settings[] = {
    {"client_id", false},
    {"client_secret", true},
    {"robot_code", false},
    {"card_template_id", false},
};

static const char *const dt_keys[] = {
    "enabled",  "client_id", "client_secret",  "robot_code",     "card_template_id",
    "api_base", "oapi_base", "allow_insecure", "download_allow", NULL};

static void dt_config_free(dt_config *c) {
    free(c->client_id);
    free(c->client_secret);
    free(c->robot_code);
    free(c->card_template_id);
    free(c->api_base);
    free(c->oapi_base);
    net_allowlist_free(&c->download_allow);
    memset(c, 0, sizeof *c);
}

/* The text of key: runtime's, else the section's, else dflt (NULL: none). */
static int text_pick(char **out, const json_t *sec, const json_t *runtime, const char *key,
                     const char *dflt) {
    *out = NULL;
    const json_t *v = json_object_get(runtime, key);
    if (!v)
        v = json_object_get(sec, key);
    if (v && !json_is_string(v))
        return fawn_err(FAWN_ECONFIG, "channels.dingtalk.%s: must be a string", key);
    const char *s = v ? json_string_value(v) : dflt;
    if (s && (strlen(s) > DT_VALUE_MAX || strlen(s) != (v ? json_string_length(v) : strlen(s))))
        return fawn_err(FAWN_ECONFIG, "channels.dingtalk.%s: too long", key);
    if (s && s[0] && !(*out = strdup(s)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return 0;
}

static int base_check(const char *url, bool insecure, const char *key) {
    bool https = strncmp(url, "https://", 8) == 0, http = strncmp(url, "http://", 7) == 0;
    if (!https && !(http && insecure))
        return fawn_err(FAWN_ECONFIG, "channels.dingtalk.%s: must be an https:// URL%s", key,
                        http ? " (http:// only with allow_insecure)" : "");
    return 0;
}

static int dt_config_read(dt_config *c, const json_t *sec, const json_t *runtime) {
    memset(c, 0, sizeof *c);
    if (sec && !json_is_object(sec))
        return fawn_err(FAWN_ECONFIG, "channels.dingtalk: must be a mapping");
    int r = sec ? fjson_check_keys(sec, dt_keys) : 0;
    if (r < 0)
        return fawn_err(FAWN_ECONFIG, "channels.dingtalk: %s", fawn_errmsg());
    const json_t *insecure = json_object_get(sec, "allow_insecure");
    if (insecure && !json_is_boolean(insecure))
        return fawn_err(FAWN_ECONFIG, "channels.dingtalk.allow_insecure: must be true or false");
    c->allow_insecure = json_is_true(insecure);
    r = text_pick(&c->client_id, sec, runtime, "client_id", NULL);
    if (r == 0)
        r = text_pick(&c->client_secret, sec, runtime, "client_secret", NULL);
    if (r == 0)
        r = text_pick(&c->robot_code, sec, runtime, "robot_code", c->client_id);
    if (r == 0)
        r = text_pick(&c->card_template_id, sec, runtime, "card_template_id", NULL);
    if (r == 0)
        r = text_pick(&c->api_base, sec, NULL, "api_base", "https://api.dingtalk.com");
    if (r == 0)
        r = text_pick(&c->oapi_base, sec, NULL, "oapi_base", "https://oapi.dingtalk.com");
    if (r == 0)
        r = base_check(c->api_base ? c->api_base : "", c->allow_insecure, "api_base");
    if (r == 0)
        r = base_check(c->oapi_base ? c->oapi_base : "", c->allow_insecure, "oapi_base");
    if (r == 0)
        r = net_allowlist_parse(&c->download_allow, json_object_get(sec, "download_allow"),
                                "channels.dingtalk.download_allow");
    if (r == 0 && (!c->client_id || !c->client_secret))
        r = fawn_err(FAWN_ENOENT, "DingTalk has no client_id and client_secret");
    if (r < 0)
        dt_config_free(c);
    return r;
}

/* ---- HTTP ---- */

typedef struct dt_reply {
    fbuf body;
} dt_reply;

static size_t reply_write(char *data, size_t size, size_t n, void *ctx) {
    dt_reply *rp = ctx;
    return fbuf_append(&rp->body, data, size * n) == 0 ? size * n : 0;
}

/* A curl handle for the platform's API (its bases are the operator's). */
static CURL *api_client(const dt *d, long timeout_s) {
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, timeout_s);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, d->cfg.allow_insecure ? "http,https" : "https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_USERAGENT, "fawn-dingtalk");
    return c;
}

/* Performs c and parses its answer as a JSON object into *out; an HTTP
 * status other than 2xx is FAWN_EPROTO naming what and the platform's
 * message. */
static int api_perform(json_t **out, CURL *c, dt_reply *rp, const char *what) {
    *out = NULL;
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, reply_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, rp);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (cc != CURLE_OK)
        return fawn_err(FAWN_EIO, "DingTalk %s: %s", what, curl_easy_strerror(cc));
    json_t *o = NULL;
    int r = fjson_parse_object(&o, rp->body.data ? rp->body.data : "", rp->body.len);
    if (status < 200 || status > 299) {
        const char *msg = json_string_value(json_object_get(o, "message"));
        json_decref(o);
        return fawn_err(FAWN_EPROTO, "DingTalk %s: HTTP %ld%s%.200s", what, status, msg ? ": " : "",
                        msg ? msg : "");
    }
    if (r < 0)
        return fawn_err(FAWN_EPROTO, "DingTalk %s: the answer is not a JSON object", what);
    *out = o;
    return 0;
}

/* method (POST or PUT) a JSON body to base+path, with the access token when
 * given; *out the answer object. */
static int api_call(json_t **out, const dt *d, const char *method, const char *base,
                    const char *path, const char *token, const json_t *body, const char *what) {
    *out = NULL;
    _cleanup_free_ char *url = NULL, *text = fjson_dump(body), *auth = NULL;
    if (!text || asprintf(&url, "%s%s", base, path) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (token && asprintf(&auth, "x-acs-dingtalk-access-token: %s", token) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    CURL *c = api_client(d, DT_CALL_TIMEOUT_S);
    struct curl_slist *h = curl_slist_append(NULL, "Content-Type: application/json");
    if (auth)
        h = curl_slist_append(h, auth);
    dt_reply rp = {.body = {.limit = DT_REPLY_MAX}};
    int r = c && h ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0) {
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
        r = api_perform(out, c, &rp, what);
    }
    fbuf_free(&rp.body);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return r;
}

/* ---- access token ---- */

/* The cached access token, renewed when near its expiry (into out, malloc'd). */
static int token_get(char **out, dt *d) {
    *out = NULL;
    pthread_mutex_lock(&d->token_mu);
    int r = 0;
    if (!d->token || fawn_now_ms() >= d->token_expiry_ms) {
        json_t *body = json_pack("{s:s, s:s}", "appKey", d->cfg.client_id, "appSecret",
                                 d->cfg.client_secret);
        json_t *reply = NULL;
        r = body ? api_call(&reply, d, "POST", d->cfg.api_base, "/v1.0/oauth2/accessToken", NULL,
                            body, "access token")
                 : fawn_err(FAWN_ENOMEM, "out of memory");
        json_decref(body);
        const char *tok = json_string_value(json_object_get(reply, "accessToken"));
        json_int_t ttl = json_integer_value(json_object_get(reply, "expireIn"));
        if (r == 0 && (!tok || !tok[0] || strlen(tok) > CH_ID_MAX * 4 || ttl <= 0))
            r = fawn_err(FAWN_EPROTO, "DingTalk access token: no accessToken/expireIn");
        if (r == 0) {
            free(d->token);
            d->token = strdup(tok);
            int64_t ms = (int64_t)(ttl > 86400 * 30 ? 86400 * 30 : ttl) * 1000;
            d->token_expiry_ms = fawn_now_ms() +
                                 (ms > 2 * DT_TOKEN_MARGIN_MS ? ms - DT_TOKEN_MARGIN_MS : ms / 2);
        }
        json_decref(reply);
    }
    if (r == 0 && !(*out = d->token ? strdup(d->token) : NULL))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    pthread_mutex_unlock(&d->token_mu);
    return r;
}

int dt_connection_open(char **endpoint, char **ticket, dt *d) {
    *endpoint = *ticket = NULL;
    json_t *body = json_pack("{s:s, s:s, s:[{s:s, s:s}], s:s, s:s}", "clientId", d->cfg.client_id,
                             "clientSecret", d->cfg.client_secret, "subscriptions", "type",
                             "CALLBACK", "topic", DT_TOPIC_ROBOT, "ua", "fawn", "localIp", "");
    json_t *reply = NULL;
    int r = body ? api_call(&reply, d, "POST", d->cfg.api_base, "/v1.0/gateway/connections/open",
                            NULL, body, "stream connection")
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    const char *ep = json_string_value(json_object_get(reply, "endpoint"));
    const char *tk = json_string_value(json_object_get(reply, "ticket"));
    if (r == 0 && (!ep || !tk || strlen(ep) > 2048 || strlen(tk) > 1024 || !tk[0]))
        r = fawn_err(FAWN_EPROTO, "DingTalk stream connection: no endpoint and ticket");
    if (r == 0 && !(*endpoint = strdup(ep)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && !(*ticket = strdup(tk)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(reply);
    if (r < 0) {
        free(*endpoint);
        *endpoint = NULL;
    }
    return r;
}

/* ---- downloads ---- */

typedef struct dl {
    const dt *d;
    int fd;
    uint64_t cap, written;
    bool over, refused, write_failed;
    char host[NET_HOST_MAX + 1];
} dl;

/* The one place a download's connection address is decided (web_fetch's rule). */
static curl_socket_t dl_open_socket(void *ctx, curlsocktype purpose, struct curl_sockaddr *addr) {
    dl *x = ctx;
    (void)purpose;
    if (!net_connect_allowed(&x->d->cfg.download_allow, x->host, &addr->addr)) {
        x->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

static size_t dl_write(char *data, size_t size, size_t n, void *ctx) {
    dl *x = ctx;
    size_t len = size * n;
    if (x->written + len > x->cap) {
        x->over = true;
        return 0;
    }
    if (fawn_write_all(x->fd, data, len) < 0) {
        x->write_failed = true;
        return 0;
    }
    x->written += len;
    return len;
}

/* The host of an http(s) URL (without brackets), for the address policy. */
static int url_host(char out[NET_HOST_MAX + 1], const char *url) {
    out[0] = '\0';
    CURLU *u = curl_url();
    char *host = NULL, *scheme = NULL;
    int r = u && curl_url_set(u, CURLUPART_URL, url, 0) == CURLUE_OK &&
                    curl_url_get(u, CURLUPART_HOST, &host, 0) == CURLUE_OK &&
                    curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) == CURLUE_OK
                ? 0
                : fawn_err(FAWN_EPROTO, "DingTalk gave a download URL that is not a URL");
    if (r == 0 && strcmp(scheme, "https") != 0 && strcmp(scheme, "http") != 0)
        r = fawn_err(FAWN_EPROTO, "DingTalk gave a download URL that is not http(s)");
    if (r == 0) {
        const char *h = host;
        size_t len = strlen(h);
        if (len >= 2 && h[0] == '[' && h[len - 1] == ']') {
            h++;
            len -= 2;
        }
        if (len > NET_HOST_MAX)
            r = fawn_err(FAWN_EPROTO, "DingTalk gave a download URL with a long host");
        else
            snprintf(out, NET_HOST_MAX + 1, "%.*s", (int)len, h);
    }
    curl_free(host);
    curl_free(scheme);
    curl_url_cleanup(u);
    return r;
}

static int dl_get(const dt *d, const char *url, int fd, uint64_t cap, uint64_t *size) {
    dl x = {.d = d, .fd = fd, .cap = cap};
    int r = url_host(x.host, url);
    if (r < 0)
        return r;
    CURL *c = curl_easy_init();
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, DT_TRANSFER_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION,
                     0L); /* a redirect's host is not re-checked by name */
    curl_easy_setopt(c, CURLOPT_PROXY, "");
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, dl_open_socket);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, &x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, dl_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &x);
    curl_easy_setopt(c, CURLOPT_MAXFILESIZE_LARGE, (curl_off_t)cap);
    CURLcode cc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(c);
    if (x.refused)
        return fawn_err(FAWN_EPERM, "the download URL's address is not one fawn may reach");
    if (x.over || cc == CURLE_FILESIZE_EXCEEDED)
        return fawn_err(FAWN_E2BIG, "the file is larger than %llu bytes", (unsigned long long)cap);
    if (x.write_failed)
        return fawn_err(FAWN_EIO, "the download could not be written");
    if (cc != CURLE_OK)
        return fawn_err(FAWN_EIO, "download failed: %s", curl_easy_strerror(cc));
    if (status != 200)
        return fawn_err(FAWN_EPROTO, "download failed: HTTP %ld", status);
    *size = x.written;
    return 0;
}

static int dt_download(ch_platform *p, const ch_inbound *msg, const ch_attachment *a, int fd,
                       uint64_t cap, uint64_t *size_out) {
    *size_out = 0;
    dt *d = p->impl;
    (void)msg;
    _cleanup_free_ char *token = NULL;
    int r = token_get(&token, d);
    json_t *body = r == 0 ? json_pack("{s:s, s:s}", "downloadCode", a->ref, "robotCode",
                                      d->cfg.robot_code)
                          : NULL;
    json_t *reply = NULL;
    if (r == 0)
        r = body ? api_call(&reply, d, "POST", d->cfg.api_base, "/v1.0/robot/messageFiles/download",
                            token, body, "file download")
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    const char *url = json_string_value(json_object_get(reply, "downloadUrl"));
    if (r == 0 && (!url || !url[0] || strlen(url) > 8192))
        r = fawn_err(FAWN_EPROTO, "DingTalk file download: no downloadUrl");
    if (r == 0)
        r = dl_get(d, url, fd, cap, size_out);
    json_decref(reply);
    return r;
}

/* ---- sends ---- */

/* The reply context of a target, checked. */
static int target_read(json_t **ctx, const ch_target *to) {
    *ctx = NULL;
    if (!to->reply_ctx || fjson_parse_object(ctx, to->reply_ctx, strlen(to->reply_ctx)) < 0)
        return fawn_err(FAWN_EINVAL, "a DingTalk reply without its context");
    return 0;
}

/* Sends a robot message (msgKey, msgParam object) to the target's chat:
 * the group send API in a group, the one-to-one API otherwise. */
static int robot_send(dt *d, const ch_target *to, const char *key, json_t *param) {
    _cleanup_free_ char *token = NULL, *ptext = fjson_dump(param);
    json_decref(param);
    json_t *ctx = NULL;
    int r = ptext ? target_read(&ctx, to) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = token_get(&token, d);
    const char *staff = json_string_value(json_object_get(ctx, "senderStaffId"));
    json_t *body = NULL;
    if (r == 0 && to->is_group)
        body = json_pack("{s:s, s:s, s:s, s:s}", "robotCode", d->cfg.robot_code,
                         "openConversationId", to->chat_id, "msgKey", key, "msgParam", ptext);
    else if (r == 0)
        body = json_pack("{s:s, s:[s], s:s, s:s}", "robotCode", d->cfg.robot_code, "userIds",
                         staff ? staff : to->sender_id, "msgKey", key, "msgParam", ptext);
    json_t *reply = NULL;
    if (r == 0)
        r = body ? api_call(&reply, d, "POST", d->cfg.api_base,
                            to->is_group ? "/v1.0/robot/groupMessages/send"
                                         : "/v1.0/robot/oToMessages/batchSend",
                            token, body, "send")
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    json_decref(reply);
    json_decref(ctx);
    return r;
}

/* Creates and delivers an AI card whose content streams; *ref its outTrackId. */
static int card_create(char **ref, dt *d, const ch_target *to, const char *text) {
    *ref = NULL;
    char track[37];
    fawn_random_uuid(track);
    _cleanup_free_ char *token = NULL, *space = NULL;
    json_t *ctx = NULL;
    int r = target_read(&ctx, to);
    const char *staff = json_string_value(json_object_get(ctx, "senderStaffId"));
    if (r == 0 && asprintf(&space, "dtv1.card//%s.%s", to->is_group ? "IM_GROUP" : "IM_ROBOT",
                           to->is_group ? to->chat_id : (staff ? staff : to->sender_id)) < 0)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = token_get(&token, d);
    json_t *body = r == 0
                       ? json_pack("{s:s, s:s, s:{s:{s:s}}, s:s, s:s, s:{s:b}, s:{s:b}, "
                                   "s:{s:s}, s:{s:s}}",
                                   "cardTemplateId", d->cfg.card_template_id, "outTrackId", track,
                                   "cardData", "cardParamMap", "content", text, "callbackType",
                                   "STREAM", "openSpaceId", space, "imGroupOpenSpaceModel",
                                   "supportForward", 1, "imRobotOpenSpaceModel", "supportForward",
                                   1, "imGroupOpenDeliverModel", "robotCode", d->cfg.robot_code,
                                   "imRobotOpenDeliverModel", "spaceType", "IM_ROBOT")
                       : NULL;
    json_t *reply = NULL;
    if (r == 0)
        r = body ? api_call(&reply, d, "POST", d->cfg.api_base,
                            "/v1.0/card/instances/createAndDeliver", token, body, "card")
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    json_decref(reply);
    json_decref(ctx);
    if (r == 0 && !(*ref = strdup(track)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    return r;
}

static int dt_send_text(ch_platform *p, const ch_target *to, const char *text, bool markdown,
                        bool updatable, char **ref_out) {
    if (ref_out)
        *ref_out = NULL;
    dt *d = p->impl;
    if (updatable && ref_out && d->cfg.card_template_id)
        return card_create(ref_out, d, to, text);
    json_t *param = markdown ? json_pack("{s:s, s:s}", "title", "fawn", "text", text)
                             : json_pack("{s:s}", "content", text);
    if (!param)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return robot_send(d, to, markdown ? "sampleMarkdown" : "sampleText", param);
}

static int dt_update_text(ch_platform *p, const ch_target *to, const char *ref, const char *text,
                          bool final) {
    dt *d = p->impl;
    (void)to;
    char guid[37];
    fawn_random_uuid(guid);
    _cleanup_free_ char *token = NULL;
    int r = token_get(&token, d);
    json_t *body = json_pack("{s:s, s:s, s:s, s:s, s:b, s:b, s:b}", "outTrackId", ref, "guid", guid,
                             "key", "content", "content", text, "isFull", 1, "isFinalize", final,
                             "isError", 0);
    json_t *reply = NULL;
    if (r == 0)
        r = body ? api_call(&reply, d, "PUT", d->cfg.api_base, "/v1.0/card/streaming", token, body,
                            "card update")
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    json_decref(reply);
    return r;
}

/* Uploads the file as media: *media_id (malloc'd). */
static int media_upload(char **media_id, dt *d, bool image, const char *name, int fd,
                        uint64_t size) {
    *media_id = NULL;
    _cleanup_free_ char *token = NULL, *url = NULL;
    int r = token_get(&token, d);
    FILE *f = NULL;
    if (r == 0) {
        int dup_fd = dup(fd);
        f = dup_fd >= 0 ? fdopen(dup_fd, "rb") : NULL;
        if (!f) {
            if (dup_fd >= 0)
                close(dup_fd);
            r = fawn_err_sys(FAWN_EIO, errno, "cannot read the file to send");
        }
    }
    CURL *c = r == 0 ? api_client(d, DT_TRANSFER_TIMEOUT_S) : NULL;
    char *esc = c ? curl_easy_escape(c, token, 0) : NULL;
    if (r == 0 && (!c || !esc ||
                   asprintf(&url, "%s/media/upload?access_token=%s&type=%s", d->cfg.oapi_base, esc,
                            image ? "image" : "file") < 0))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    curl_free(esc);
    curl_mime *mime = c ? curl_mime_init(c) : NULL;
    if (r == 0) {
        rewind(f);
        curl_mimepart *part = curl_mime_addpart(mime);
        curl_mime_name(part, "media");
        curl_mime_filename(part, name);
        curl_mime_data_cb(part, (curl_off_t)size, (curl_read_callback)fread, NULL, NULL, f);
        curl_easy_setopt(c, CURLOPT_URL, url);
        curl_easy_setopt(c, CURLOPT_MIMEPOST, mime);
    }
    dt_reply rp = {.body = {.limit = DT_REPLY_MAX}};
    json_t *reply = NULL;
    if (r == 0)
        r = api_perform(&reply, c, &rp, "media upload");
    const char *id = json_string_value(json_object_get(reply, "media_id"));
    json_int_t err = json_integer_value(json_object_get(reply, "errcode"));
    if (r == 0 && (err != 0 || !id || !id[0]))
        r = fawn_err(FAWN_EPROTO, "DingTalk media upload refused the file (errcode %lld)",
                     (long long)err);
    if (r == 0 && !(*media_id = strdup(id)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(reply);
    fbuf_free(&rp.body);
    curl_mime_free(mime);
    curl_easy_cleanup(c);
    if (f)
        fclose(f);
    return r;
}

static int dt_send_file(ch_platform *p, const ch_target *to, enum ch_attach_kind kind,
                        const char *name, int fd, uint64_t size) {
    dt *d = p->impl;
    if (size > DT_SEND_FILE_MAX)
        return fawn_err(FAWN_E2BIG, "%s is larger than the %llu bytes DingTalk takes", name,
                        (unsigned long long)DT_SEND_FILE_MAX);
    _cleanup_free_ char *media = NULL;
    bool image = kind == CH_ATTACH_IMAGE;
    int r = media_upload(&media, d, image, name, fd, size);
    if (r < 0)
        return r;
    const char *dot = strrchr(name, '.');
    json_t *param = image ? json_pack("{s:s}", "photoURL", media)
                          : json_pack("{s:s, s:s, s:s}", "mediaId", media, "fileName", name,
                                      "fileType", dot && dot[1] ? dot + 1 : "bin");
    if (!param)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return robot_send(d, to, image ? "sampleImageMsg" : "sampleFile", param);
}

/* ---- life cycle ---- */

static int dt_start(ch_platform *p, const ch_sink *sink) {
    dt *d = p->impl;
    if (d->stream)
        return 0;
    return dt_stream_start(&d->stream, d, sink);
}

static void dt_stop(ch_platform *p) {
    dt *d = p->impl;
    dt_stream_stop(d->stream);
    d->stream = NULL;
}

static void dt_destroy(ch_platform *p) {
    if (!p)
        return;
    dt *d = p->impl;
    dt_stop(p);
    dt_config_free(&d->cfg);
    free(d->token);
    pthread_mutex_destroy(&d->token_mu);
    free(d);
    free(p);
}

static const ch_platform_ops dt_ops = {
    .start = dt_start,
    .stop = dt_stop,
    .handle_http = NULL,
    .download = dt_download,
    .send_text = dt_send_text,
    .update_text = dt_update_text,
    .send_file = dt_send_file,
    .destroy = dt_destroy,
};

static int dt_open(ch_platform **out, const fawn_config *cfg, const json_t *runtime) {
    *out = NULL;
    const json_t *sec = json_object_get(cfg->channels, "dingtalk");
    if (!sec && !runtime)
        return fawn_err(FAWN_ENOENT, "DingTalk is not configured");
    if (json_is_false(json_object_get(sec, "enabled")))
        return fawn_err(FAWN_ENOENT, "DingTalk is disabled");
    const json_t *en = json_object_get(sec, "enabled");
    if (en && !json_is_boolean(en))
        return fawn_err(FAWN_ECONFIG, "channels.dingtalk.enabled: must be true or false");
    dt *d = calloc(1, sizeof *d);
    ch_platform *p = calloc(1, sizeof *p);
    int r = d && p ? dt_config_read(&d->cfg, sec, runtime) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        free(d);
        free(p);
        return r;
    }
    pthread_mutex_init(&d->token_mu, NULL);
    p->ops = &dt_ops;
    p->impl = d;
    *out = p;
    return 0;
}

const ch_provider ch_provider_dingtalk = {
    .name = "dingtalk",
    .settings = dt_settings,
    .n_settings = ARRAY_LEN(dt_settings),
    .open = dt_open,
};
