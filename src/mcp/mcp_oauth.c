/* OAuth for MCP servers over HTTP (mcp_service.h): an access token from
 * the server's token endpoint (client_credentials or refresh_token grant,
 * DeerFlow's McpOAuthConfig), kept until refresh_skew_seconds before it
 * expires, then fetched again. extra_token_params go first and the grant's
 * own fields over them, so none of them can change the grant. A refresh
 * token the endpoint rotates is saved in the store and used from then on,
 * until the operator configures another one. */
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp_service.h"

/* 64 KiB: a token answer is a few hundred bytes; JWTs a few KiB. */
#define OAUTH_REPLY_MAX ((size_t)64 << 10)
/* 15 s for the token endpoint (DeerFlow's timeout). */
#define OAUTH_TIMEOUT_MS 15000
/* When the answer gives no usable lifetime (DeerFlow's default). */
#define OAUTH_EXPIRES_DEFAULT_S 3600

typedef struct token_reply {
    fbuf body;
    const atomic_bool *cancel;
} token_reply;

static size_t reply_write(char *buf, size_t size, size_t n, void *ctx) {
    token_reply *t = ctx;
    return fbuf_append(&t->body, buf, size * n) == 0 ? size * n : 0;
}

static int reply_progress(void *ctx, curl_off_t a, curl_off_t b, curl_off_t c, curl_off_t d) {
    token_reply *t = ctx;
    (void)a, (void)b, (void)c, (void)d;
    return t->cancel && atomic_load(t->cancel);
}

/* The form of the token request: extra params, then the grant's own. */
static int form_build(char **out, CURL *c, const mcp_oauth *o, const char *refresh) {
    *out = NULL;
    json_t *f = json_deep_copy(o->extra);
    const char *grant = o->grant == MCP_GRANT_REFRESH_TOKEN ? "refresh_token"
                                                            : "client_credentials";
    const struct {
        const char *key, *value;
    } own[] = {{"grant_type", grant},
               {"scope", o->scope},
               {"audience", o->audience},
               {"client_id", o->client_id},
               {"client_secret", o->client_secret},
               {"refresh_token", o->grant == MCP_GRANT_REFRESH_TOKEN ? refresh : NULL}};
    for (size_t i = 0; f && i < ARRAY_LEN(own); i++)
        if (own[i].value)
            json_object_set_new(f, own[i].key, json_string(own[i].value));
        else
            json_object_del(f, own[i].key);
    fbuf b = {0};
    int r = f ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    const char *key;
    json_t *v;
    json_object_foreach(r == 0 ? f : NULL, key, v) {
        char *k = curl_easy_escape(c, key, 0), *val = curl_easy_escape(c, json_string_value(v), 0);
        if (!k || !val || fbuf_printf(&b, "%s%s=%s", b.len ? "&" : "", k, val) < 0)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        curl_free(k);
        curl_free(val);
        if (r < 0)
            break;
    }
    json_decref(f);
    if (r == 0)
        *out = b.data ? fbuf_steal(&b) : strdup("");
    fbuf_free(&b);
    return r == 0 && !*out ? fawn_err(FAWN_ENOMEM, "out of memory") : r;
}

/* POSTs the form to the token endpoint; the answer's JSON object into *out. */
static int token_post(json_t **out, const mcp_server *srv, const char *refresh,
                      const atomic_bool *cancel) {
    *out = NULL;
    int r = fawn_curl_init();
    CURL *c = r == 0 ? curl_easy_init() : NULL;
    if (!c)
        return r < 0 ? r : fawn_err(FAWN_ENOMEM, "out of memory");
    token_reply t = {.body = {.limit = OAUTH_REPLY_MAX}, .cancel = cancel};
    char *form = NULL;
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if ((r = form_build(&form, c, srv->oauth, refresh)) == 0 && h) {
        curl_easy_setopt(c, CURLOPT_URL, srv->oauth->token_url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, form);
        curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, reply_write);
        curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
        curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, reply_progress);
        curl_easy_setopt(c, CURLOPT_XFERINFODATA, &t);
        curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(c, CURLOPT_PROXY, "");
        curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)OAUTH_TIMEOUT_MS);
        CURLcode cc = curl_easy_perform(c);
        long status = 0;
        curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
        if (cc == CURLE_ABORTED_BY_CALLBACK)
            r = fawn_err(FAWN_ECANCELED, "cancelled");
        else if (cc == CURLE_OPERATION_TIMEDOUT)
            r = fawn_err(FAWN_ETIMEDOUT, "the OAuth token endpoint of %s did not answer in time",
                         srv->name);
        else if (cc != CURLE_OK)
            r = fawn_err(FAWN_EIO, "the OAuth token endpoint of %s: %s", srv->name,
                         cc == CURLE_WRITE_ERROR ? "its answer is too large"
                                                 : curl_easy_strerror(cc));
        else if (status < 200 || status >= 300)
            r = fawn_err(FAWN_EIO, "the OAuth token endpoint of %s answered HTTP %ld", srv->name,
                         status);
        else if (!(*out = json_loadb(t.body.data ? t.body.data : "", t.body.len, 0, NULL)) ||
                 !json_is_object(*out))
            r = fawn_err(FAWN_EPROTO, "the OAuth token endpoint of %s answered no JSON object",
                         srv->name);
    } else if (r == 0) {
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    }
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    free(form);
    fbuf_free(&t.body);
    return r;
}

/* A token, a type or a refresh token fit to send: text without CR/LF,
 * at most STORE_MCP_TOKEN_MAX bytes. */
static const char *field_text(const json_t *answer, const char *key) {
    const char *t = json_string_value(json_object_get(answer, key));
    return t && *t && strlen(t) <= STORE_MCP_TOKEN_MAX && !strpbrk(t, "\r\n") ? t : NULL;
}

static int64_t lifetime_s(const json_t *answer, const char *key) {
    const json_t *v = json_object_get(answer, key);
    const char *t = json_string_value(v);
    long long n = json_is_integer(v) ? json_integer_value(v) : t ? strtoll(t, NULL, 10) : 0;
    return n > 0 ? n : (v ? 1 : OAUTH_EXPIRES_DEFAULT_S);
}

/* Fetches a token for srv: its header line and when it expires into the cache. */
static int token_fetch(json_t **entry, mcp_service *s, const mcp_server *srv,
                       const atomic_bool *cancel) {
    *entry = NULL;
    const mcp_oauth *o = srv->oauth;
    char *saved = NULL;
    if (o->grant == MCP_GRANT_REFRESH_TOKEN &&
        store_mcp_refresh_get(s->st, &saved, srv->name, o->refresh_sha256) < 0)
        saved = NULL;
    json_t *answer = NULL;
    int r = token_post(&answer, srv, saved ? saved : o->refresh_token, cancel);
    free(saved);
    const char *token = r == 0 ? field_text(answer, o->token_field) : NULL;
    if (r == 0 && !token)
        r = fawn_err(FAWN_EPROTO, "the OAuth token endpoint of %s answered without %s", srv->name,
                     o->token_field);
    const char *rotated = r == 0 ? field_text(answer, "refresh_token") : NULL;
    if (rotated && o->grant == MCP_GRANT_REFRESH_TOKEN &&
        store_mcp_refresh_set(s->st, srv->name, o->refresh_sha256, rotated) < 0)
        log_warn("mcp", "%s: the rotated refresh token was not saved: %s", srv->name,
                 fawn_errmsg());
    char *line = NULL;
    if (r == 0 &&
        asprintf(&line, "Authorization: %s %s",
                 field_text(answer, o->token_type_field) ?: o->default_token_type, token) < 0)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    int64_t expires = fawn_wall_ms() + lifetime_s(answer, o->expires_in_field) * 1000;
    if (r == 0 &&
        !(*entry = json_pack("{s:s, s:I}", "header", line, "expires_at_ms", (json_int_t)expires)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    free(line);
    json_decref(answer);
    return r;
}

int mcp_oauth_header(char **out, mcp_service *s, const mcp_server *srv, const atomic_bool *cancel) {
    *out = NULL;
    if (!srv->oauth)
        return 0;
    pthread_mutex_lock(&s->oauth_lock); /* one fetch at a time: a rotated token is used once */
    json_t *entry = json_incref(json_object_get(s->tokens, srv->name));
    int64_t skew_ms = (int64_t)srv->oauth->refresh_skew_s * 1000;
    int r = 0;
    if (!entry ||
        json_integer_value(json_object_get(entry, "expires_at_ms")) - skew_ms <= fawn_wall_ms()) {
        json_decref(entry);
        entry = NULL;
        if ((r = token_fetch(&entry, s, srv, cancel)) == 0)
            json_object_set(s->tokens, srv->name, entry);
    }
    pthread_mutex_unlock(&s->oauth_lock);
    if (r == 0 && !(*out = strdup(json_string_value(json_object_get(entry, "header")))))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(entry);
    return r;
}

void mcp_oauth_forget(mcp_service *s, const char *server) {
    pthread_mutex_lock(&s->oauth_lock);
    if (server)
        json_object_del(s->tokens, server);
    else
        json_object_clear(s->tokens);
    pthread_mutex_unlock(&s->oauth_lock);
}
