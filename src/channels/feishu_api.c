/* Feishu/Lark open platform client over libcurl.
 *
 * Every call: build the URL from the configured base and ids already
 * checked with feishu_id_valid (call_url), send it with the tenant token
 * (authed_call: on a "token invalid" answer the token is fetched again and
 * the call made once more), read the answer bounded (answer_write), and map
 * it to 0 or a fawn_err (feishu_reply_check in feishu_reply.c). */
#include "channels/feishu_internal.h"

#include <errno.h>
#include <stdarg.h>
#include <strings.h>
#include <string.h>
#include <sys/stat.h>

#include <curl/curl.h>

#include "base/json.h"

#define FEISHU_USER_AGENT "fawn-feishu/1"
/* Longest URL built: the base (bounded below) and two ids. */
#define FEISHU_URL_MAX 1024
/* Longest api_base accepted. */
#define FEISHU_BASE_MAX 512

static void jsonp_decref(json_t **j) { json_decref(*j); }
#define _cleanup_json_ __attribute__((cleanup(jsonp_decref)))

/* ---- client ---- */

int feishu_client_new(feishu_client **out, const feishu_client_config *cfg) {
    *out = NULL;
    const char *base = cfg->api_base;
    if (!base || (strncmp(base, "http://", 7) != 0 && strncmp(base, "https://", 8) != 0) ||
        strlen(base) > FEISHU_BASE_MAX)
        return fawn_err(FAWN_EINVAL, "feishu: api_base must be an http(s) URL");
    if (!cfg->app_id || !*cfg->app_id || !cfg->app_secret || !*cfg->app_secret)
        return fawn_err(FAWN_EINVAL, "feishu: app_id and app_secret are required");
    feishu_client *c = calloc(1, sizeof *c);
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory creating the feishu client");
    pthread_mutex_init(&c->lock, NULL);
    size_t n = strlen(base);
    while (n > 0 && base[n - 1] == '/')
        n--;
    c->api_base = strndup(base, n);
    c->app_id = strdup(cfg->app_id);
    c->app_secret = strdup(cfg->app_secret);
    if (!c->api_base || !c->app_id || !c->app_secret) {
        feishu_client_free(c);
        return fawn_err(FAWN_ENOMEM, "out of memory creating the feishu client");
    }
    *out = c;
    return 0;
}

void feishu_client_free(feishu_client *c) {
    if (!c)
        return;
    free(c->api_base);
    free(c->app_id);
    free(c->app_secret);
    free(c->token);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- one HTTP exchange ---- */

typedef struct feishu_call {
    const char *what;   /* names the call in errors */
    const char *method; /* GET, POST, PATCH */
    const char *url;
    const char *token; /* Bearer token, or NULL */
    const char *json;  /* JSON body, or NULL */
    curl_mime *mime;   /* multipart body, or NULL */
    int fd;            /* >= 0: a 2xx body is streamed here */
    size_t max_bytes;  /* cap on what goes to fd */
} feishu_call;

typedef struct feishu_answer {
    CURL *curl;
    long status;
    fbuf body;      /* the JSON answer (or an error body of a download) */
    size_t written; /* bytes written to fd */
    int error;      /* why the write callback stopped the transfer */
    const feishu_call *call;
} feishu_answer;

static size_t answer_write(char *buf, size_t size, size_t n, void *ctx) {
    feishu_answer *a = ctx;
    size_t len = size * n;
    long status = 0;
    curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &status);
    if (a->call->fd < 0 || status < 200 || status >= 300) {
        if (fbuf_append(&a->body, buf, len) < 0) {
            a->error = fawn_err(FAWN_E2BIG, "feishu %s: answer larger than %zu bytes",
                                a->call->what, FEISHU_REPLY_MAX);
            return 0;
        }
        return len;
    }
    if (len > a->call->max_bytes - a->written) {
        a->error = fawn_err(FAWN_E2BIG, "feishu %s: larger than %zu bytes", a->call->what,
                            a->call->max_bytes);
        return 0;
    }
    int r = fawn_write_all(a->call->fd, buf, len);
    if (r < 0) {
        a->error = r;
        return 0;
    }
    a->written += len;
    return len;
}

static bool header_add(struct curl_slist **list, const char *line) {
    struct curl_slist *next = curl_slist_append(*list, line);
    if (!next) {
        curl_slist_free_all(*list);
        *list = NULL;
        return false;
    }
    *list = next;
    return true;
}

static struct curl_slist *call_headers(const feishu_call *call) {
    struct curl_slist *list = NULL;
    bool ok = header_add(&list, "Expect:");
    if (ok && call->json)
        ok = header_add(&list, "Content-Type: application/json; charset=utf-8");
    if (ok && call->token) {
        char line[FEISHU_TOKEN_MAX + 32];
        snprintf(line, sizeof line, "Authorization: Bearer %s", call->token);
        ok = header_add(&list, line);
    }
    return ok ? list : NULL;
}

static void curl_setup(CURL *c, const feishu_call *call, feishu_answer *a,
                       struct curl_slist *headers) {
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never the host's proxy settings */
    curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
    curl_easy_setopt(c, CURLOPT_USERAGENT, FEISHU_USER_AGENT);
    curl_easy_setopt(c, CURLOPT_TIMEOUT, (long)FEISHU_CALL_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, (long)FEISHU_CONNECT_TIMEOUT_S);
    curl_easy_setopt(c, CURLOPT_URL, call->url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, answer_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, a);
    if (call->mime)
        curl_easy_setopt(c, CURLOPT_MIMEPOST, call->mime);
    else if (call->json) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(call->json));
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, call->json);
    }
    if (strcmp(call->method, "GET") != 0 && strcmp(call->method, "POST") != 0)
        curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, call->method);
}

static int curl_failure(CURLcode code, const feishu_answer *a) {
    if (a->error < 0)
        return a->error;
    if (code == CURLE_OPERATION_TIMEDOUT)
        return fawn_err(FAWN_ETIMEDOUT, "feishu %s: the platform did not answer in time",
                        a->call->what);
    if (code == CURLE_OUT_OF_MEMORY)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return fawn_err(FAWN_EIO, "feishu %s: the platform could not be reached: %s", a->call->what,
                    curl_easy_strerror(code));
}

/* Runs call; *a holds the status and the JSON answer (a->body, caller
 * frees) when the transfer completed. */
static int call_run(feishu_answer *a, const feishu_call *call) {
    *a = (feishu_answer){.call = call, .body = {.limit = FEISHU_REPLY_MAX}};
    int r = fawn_curl_init();
    if (r < 0)
        return r;
    struct curl_slist *headers = call_headers(call);
    a->curl = curl_easy_init();
    if (!headers || !a->curl) {
        curl_slist_free_all(headers);
        curl_easy_cleanup(a->curl);
        return fawn_err(FAWN_ENOMEM, "out of memory starting a feishu call");
    }
    curl_setup(a->curl, call, a, headers);
    CURLcode code = curl_easy_perform(a->curl);
    curl_easy_getinfo(a->curl, CURLINFO_RESPONSE_CODE, &a->status);
    curl_easy_cleanup(a->curl);
    a->curl = NULL;
    curl_slist_free_all(headers);
    if (code != CURLE_OK)
        return curl_failure(code, a);
    if (a->status >= 300 && a->status < 400)
        return fawn_err(FAWN_EPROTO,
                        "feishu %s: answered with a redirect (HTTP %ld), which "
                        "fawn does not follow",
                        call->what, a->status);
    return 0;
}

/* ---- token ---- */

static int token_fetch(char **out, int64_t *expire_s, feishu_client *c) {
    char url[FEISHU_URL_MAX];
    snprintf(url, sizeof url, "%s/open-apis/auth/v3/tenant_access_token/internal", c->api_base);
    _cleanup_json_ json_t *req = json_pack("{s:s,s:s}", "app_id", c->app_id, "app_secret",
                                           c->app_secret);
    _cleanup_free_ char *body = req ? fjson_dump(req) : NULL;
    if (!body)
        return fawn_err(FAWN_ENOMEM, "out of memory asking for a feishu token");
    feishu_call call = {
        .what = "tenant_access_token", .method = "POST", .url = url, .json = body, .fd = -1};
    feishu_answer a;
    int r = call_run(&a, &call);
    if (r == 0)
        r = feishu_token_reply_parse(out, expire_s, a.status, a.body.data ? a.body.data : "",
                                     a.body.len);
    fbuf_free(&a.body);
    return r;
}

int feishu_token_get(char **out, feishu_client *c) {
    *out = NULL;
    pthread_mutex_lock(&c->lock);
    int r = 0;
    if (!c->token || fawn_now_ms() >= c->token_expires_ms) {
        char *token = NULL;
        int64_t expire_s = 0;
        r = token_fetch(&token, &expire_s, c);
        if (r == 0) {
            free(c->token);
            c->token = token;
            int64_t keep = expire_s > 2 * FEISHU_TOKEN_MARGIN_S ? expire_s - FEISHU_TOKEN_MARGIN_S
                                                                : expire_s / 2;
            c->token_expires_ms = fawn_now_ms() + keep * 1000;
        }
    }
    if (r == 0 && !(*out = strdup(c->token)))
        r = fawn_err(FAWN_ENOMEM, "out of memory copying a feishu token");
    pthread_mutex_unlock(&c->lock);
    return r;
}

void feishu_token_forget(feishu_client *c) {
    pthread_mutex_lock(&c->lock);
    free(c->token);
    c->token = NULL;
    c->token_expires_ms = 0;
    pthread_mutex_unlock(&c->lock);
}

/* ---- authenticated calls ---- */

/* True when the answer says the token is no longer valid. */
static bool answer_token_invalid(const feishu_answer *a) {
    if (!a->body.data)
        return false;
    json_error_t e;
    _cleanup_json_ json_t *o = json_loadb(a->body.data, a->body.len, 0, &e);
    const json_t *code = json_object_get(o, "code");
    return json_is_integer(code) && feishu_code_is_token_invalid(json_integer_value(code));
}

/* Runs call with the tenant token, once more with a fresh token when the
 * platform says the first is invalid (a download's partial output is the
 * caller's to discard: nothing is written before a 2xx). */
static int authed_call(feishu_answer *a, feishu_client *c, feishu_call *call) {
    for (int attempt = 0;; attempt++) {
        _cleanup_free_ char *token = NULL;
        int r = feishu_token_get(&token, c);
        if (r < 0) {
            *a = (feishu_answer){.call = call};
            return r;
        }
        call->token = token;
        r = call_run(a, call);
        call->token = NULL;
        if (r < 0 || attempt > 0 || !answer_token_invalid(a))
            return r;
        fbuf_free(&a->body);
        feishu_token_forget(c);
    }
}

static int url_build(char out[FEISHU_URL_MAX], const feishu_client *c, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int url_build(char out[FEISHU_URL_MAX], const feishu_client *c, const char *fmt, ...) {
    int n = snprintf(out, FEISHU_URL_MAX, "%s", c->api_base);
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(out + n, FEISHU_URL_MAX - (size_t)n, fmt, ap);
    va_end(ap);
    if (m < 0 || (size_t)(n + m) >= FEISHU_URL_MAX)
        return fawn_err(FAWN_EINVAL, "feishu: URL too long");
    return 0;
}

static int ids_check(const char *a, const char *b) {
    if (!feishu_id_valid(a) || (b && !feishu_id_valid(b)))
        return fawn_err(FAWN_EINVAL, "feishu: not a valid id or key");
    return 0;
}

/* A JSON call whose answer carries data.<field> (or nothing: field NULL). */
static int json_call(char **out_id, feishu_client *c, feishu_call *call, const char *field) {
    if (out_id)
        *out_id = NULL;
    feishu_answer a;
    int r = authed_call(&a, c, call);
    const char *body = a.body.data ? a.body.data : "";
    if (r == 0 && field)
        r = feishu_data_id_parse(out_id, call->what, field, a.status, body, a.body.len);
    else if (r == 0)
        r = feishu_reply_check(NULL, call->what, a.status, body, a.body.len);
    fbuf_free(&a.body);
    return r;
}

int feishu_resource_download(size_t *out_bytes, feishu_client *c, const char *message_id,
                             const char *key, enum feishu_resource_kind kind, int fd,
                             size_t max_bytes) {
    *out_bytes = 0;
    char url[FEISHU_URL_MAX];
    int r = ids_check(message_id, key);
    if (r == 0)
        r = url_build(url, c, "/open-apis/im/v1/messages/%s/resources/%s?type=%s", message_id, key,
                      kind == FEISHU_RESOURCE_IMAGE ? "image" : "file");
    if (r < 0)
        return r;
    feishu_call call = {
        .what = "resource download", .method = "GET", .url = url, .fd = fd, .max_bytes = max_bytes};
    feishu_answer a;
    r = authed_call(&a, c, &call);
    if (r == 0 && (a.status < 200 || a.status >= 300))
        r = feishu_reply_check(NULL, call.what, a.status, a.body.data ? a.body.data : "",
                               a.body.len);
    if (r == 0 && a.status >= 200 && a.status < 300)
        *out_bytes = a.written;
    fbuf_free(&a.body);
    return r;
}

static int message_body(char **out, const char *id_key, const char *id, const char *msg_type,
                        const char *content) {
    _cleanup_json_ json_t *o = id_key ? json_pack("{s:s,s:s,s:s}", id_key, id, "msg_type", msg_type,
                                                  "content", content)
                                      : json_pack("{s:s,s:s}", "msg_type", msg_type, "content",
                                                  content);
    *out = o ? fjson_dump(o) : NULL;
    return *out ? 0
                : fawn_err(FAWN_ENOMEM,
                           "feishu: a message that is not valid UTF-8, or out of memory");
}

int feishu_message_send(char **out_message_id, feishu_client *c, const char *chat_id,
                        const char *msg_type, const char *content) {
    *out_message_id = NULL;
    char url[FEISHU_URL_MAX];
    _cleanup_free_ char *body = NULL;
    int r = ids_check(chat_id, msg_type);
    if (r == 0)
        r = url_build(url, c, "/open-apis/im/v1/messages?receive_id_type=chat_id");
    if (r == 0)
        r = message_body(&body, "receive_id", chat_id, msg_type, content);
    if (r < 0)
        return r;
    feishu_call call = {
        .what = "message send", .method = "POST", .url = url, .json = body, .fd = -1};
    return json_call(out_message_id, c, &call, "message_id");
}

int feishu_message_reply(char **out_message_id, feishu_client *c, const char *message_id,
                         const char *msg_type, const char *content) {
    *out_message_id = NULL;
    char url[FEISHU_URL_MAX];
    _cleanup_free_ char *body = NULL;
    int r = ids_check(message_id, msg_type);
    if (r == 0)
        r = url_build(url, c, "/open-apis/im/v1/messages/%s/reply", message_id);
    if (r == 0)
        r = message_body(&body, NULL, NULL, msg_type, content);
    if (r < 0)
        return r;
    feishu_call call = {
        .what = "message reply", .method = "POST", .url = url, .json = body, .fd = -1};
    return json_call(out_message_id, c, &call, "message_id");
}

int feishu_card_update(feishu_client *c, const char *message_id, const char *card) {
    char url[FEISHU_URL_MAX];
    int r = ids_check(message_id, NULL);
    if (r == 0)
        r = url_build(url, c, "/open-apis/im/v1/messages/%s", message_id);
    if (r < 0)
        return r;
    _cleanup_json_ json_t *o = json_pack("{s:s}", "content", card);
    _cleanup_free_ char *body = o ? fjson_dump(o) : NULL;
    if (!body)
        return fawn_err(FAWN_ENOMEM, "out of memory building a feishu card update");
    feishu_call call = {
        .what = "card update", .method = "PATCH", .url = url, .json = body, .fd = -1};
    return json_call(NULL, c, &call, NULL);
}

/* ---- uploads ---- */

typedef struct upload_src {
    int fd;
    off_t at;
    off_t size;
} upload_src;

static size_t upload_read(char *buf, size_t size, size_t n, void *ctx) {
    upload_src *s = ctx;
    size_t want = size * n;
    if ((off_t)want > s->size - s->at)
        want = (size_t)(s->size - s->at);
    ssize_t got;
    do
        got = pread(s->fd, buf, want, s->at);
    while (got < 0 && errno == EINTR);
    if (got < 0)
        return CURL_READFUNC_ABORT;
    s->at += got;
    return (size_t)got;
}

static int upload_seek(void *ctx, curl_off_t offset, int origin) {
    upload_src *s = ctx;
    if (origin != SEEK_SET || offset < 0 || offset > s->size)
        return CURL_SEEKFUNC_CANTSEEK;
    s->at = (off_t)offset;
    return CURL_SEEKFUNC_OK;
}

/* A name that can go into a multipart header: 1..255 bytes, no control
 * characters, quotes or backslashes, no directory. */
static bool upload_name_valid(const char *name) {
    size_t n = name ? strnlen(name, FEISHU_NAME_MAX + 1) : 0;
    if (n == 0 || n > FEISHU_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)name[i];
        if (ch < ' ' || ch == 0x7f || ch == '"' || ch == '\\' || ch == '/')
            return false;
    }
    return true;
}

static int upload_source(upload_src *src, int fd, size_t cap, const char *what) {
    struct stat st;
    if (fstat(fd, &st) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "feishu %s", what);
    if (!S_ISREG(st.st_mode))
        return fawn_err(FAWN_EINVAL, "feishu %s: not a regular file", what);
    if ((uint64_t)st.st_size > cap)
        return fawn_err(FAWN_E2BIG, "feishu %s: %lld bytes, the platform takes at most %zu", what,
                        (long long)st.st_size, cap);
    if (st.st_size == 0)
        return fawn_err(FAWN_EINVAL, "feishu %s: the file is empty", what);
    *src = (upload_src){.fd = fd, .size = st.st_size};
    return 0;
}

static bool mime_field(curl_mime *m, const char *name, const char *value) {
    curl_mimepart *p = curl_mime_addpart(m);
    return p && curl_mime_name(p, name) == CURLE_OK &&
           curl_mime_data(p, value, CURL_ZERO_TERMINATED) == CURLE_OK;
}

static bool mime_file(curl_mime *m, const char *field, const char *name, upload_src *src) {
    curl_mimepart *p = curl_mime_addpart(m);
    return p && curl_mime_name(p, field) == CURLE_OK && curl_mime_filename(p, name) == CURLE_OK &&
           curl_mime_data_cb(p, (curl_off_t)src->size, upload_read, upload_seek, NULL, src) ==
               CURLE_OK;
}

/* The platform's file_type for a name: its few known kinds, else stream. */
static const char *file_type_for(const char *name) {
    static const struct {
        const char *ext, *type;
    } kinds[] = {{".pdf", "pdf"},  {".doc", "doc"},  {".docx", "doc"},
                 {".xls", "xls"},  {".xlsx", "xls"}, {".ppt", "ppt"},
                 {".pptx", "ppt"}, {".mp4", "mp4"},  {".opus", "opus"}};
    const char *dot = strrchr(name, '.');
    for (size_t i = 0; dot && i < ARRAY_LEN(kinds); i++)
        if (!strcasecmp(dot, kinds[i].ext))
            return kinds[i].type;
    return "stream";
}

static int upload_run(char **out_key, feishu_client *c, const char *what, const char *path,
                      curl_mime *mime, const char *field) {
    char url[FEISHU_URL_MAX];
    int r = url_build(url, c, "%s", path);
    if (r < 0)
        return r;
    feishu_call call = {.what = what, .method = "POST", .url = url, .mime = mime, .fd = -1};
    return json_call(out_key, c, &call, field);
}

int feishu_image_upload(char **out_key, feishu_client *c, int fd, const char *name) {
    *out_key = NULL;
    upload_src src;
    int r = upload_source(&src, fd, FEISHU_IMAGE_UPLOAD_MAX, "image upload");
    if (r < 0)
        return r;
    if (!upload_name_valid(name))
        return fawn_err(FAWN_EINVAL, "feishu image upload: a file name fawn will not send");
    curl_mime *mime = curl_mime_init(NULL);
    if (!mime || !mime_field(mime, "image_type", "message") ||
        !mime_file(mime, "image", name, &src))
        r = fawn_err(FAWN_ENOMEM, "out of memory building a feishu upload");
    if (r == 0)
        r = upload_run(out_key, c, "image upload", "/open-apis/im/v1/images", mime, "image_key");
    curl_mime_free(mime);
    return r;
}

int feishu_file_upload(char **out_key, feishu_client *c, int fd, const char *name) {
    *out_key = NULL;
    upload_src src;
    int r = upload_source(&src, fd, FEISHU_FILE_UPLOAD_MAX, "file upload");
    if (r < 0)
        return r;
    if (!upload_name_valid(name))
        return fawn_err(FAWN_EINVAL, "feishu file upload: a file name fawn will not send");
    curl_mime *mime = curl_mime_init(NULL);
    if (!mime || !mime_field(mime, "file_type", file_type_for(name)) ||
        !mime_field(mime, "file_name", name) || !mime_file(mime, "file", name, &src))
        r = fawn_err(FAWN_ENOMEM, "out of memory building a feishu upload");
    if (r == 0)
        r = upload_run(out_key, c, "file upload", "/open-apis/im/v1/files", mime, "file_key");
    curl_mime_free(mime);
    return r;
}

/* ---- message content ---- */

static int content_dump(char **out, json_t *o) {
    *out = o ? fjson_dump(o) : NULL;
    json_decref(o);
    return *out ? 0
                : fawn_err(FAWN_ENOMEM,
                           "feishu: a message that is not valid UTF-8, or out of memory");
}

int feishu_text_content(char **out, const char *text) {
    return content_dump(out, json_pack("{s:s}", "text", text));
}

int feishu_key_content(char **out, enum feishu_resource_kind kind, const char *key) {
    return content_dump(
        out, json_pack("{s:s}", kind == FEISHU_RESOURCE_IMAGE ? "image_key" : "file_key", key));
}

int feishu_card_content(char **out, const char *markdown, const char *note) {
    json_t *elements = json_pack("[{s:s,s:s}]", "tag", "markdown", "content",
                                 *markdown ? markdown : " ");
    if (elements && note)
        json_array_append_new(elements, json_pack("{s:s,s:[{s:s,s:s}]}", "tag", "note", "elements",
                                                  "tag", "plain_text", "content", note));
    json_t *card = elements ? json_pack("{s:{s:b,s:b},s:o}", "config", "wide_screen_mode", 1,
                                        "update_multi", 1, "elements", elements)
                            : NULL;
    return content_dump(out, card);
}
