/* Fetching a web page through the allow-list (research.h), and the one
 * HTTP request both a fetch and a search make (research_internal.h).
 * Redirects are followed here, not by libcurl, so each hop's URL is checked
 * (scheme, credentials) and its host is the one the allow-list reads. */
#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "research/research_internal.h"

/* The fetcher's name in requests. */
#define WEB_USER_AGENT "fawn-web-fetch/1 (+https://github.com/fawn)"

void web_page_clear(web_page *page) {
    free(page->final_url);
    free(page->body);
    memset(page, 0, sizeof *page);
}

typedef struct hop {
    const net_allowlist *al;
    char host[NET_HOST_MAX + 1]; /* the request URL's host, without brackets */
    bool refused;                /* an address was refused */
    web_http_reply *reply;
    size_t max_bytes;
    const atomic_bool *cancel;
} hop;

/* libcurl's socket opener: the one place a connection's address is decided. */
static curl_socket_t open_checked(void *ctx, curlsocktype purpose, struct curl_sockaddr *addr) {
    hop *h = ctx;
    (void)purpose;
    if (!net_connect_allowed(h->al, h->host, &addr->addr)) {
        h->refused = true;
        return CURL_SOCKET_BAD;
    }
    return socket(addr->family, addr->socktype | SOCK_CLOEXEC, addr->protocol);
}

static size_t body_write(char *data, size_t size, size_t n, void *ctx) {
    hop *h = ctx;
    web_http_reply *p = h->reply;
    size_t len = size * n, room = h->max_bytes - p->len;
    size_t take = len < room ? len : room;
    char *grown = realloc(p->body, p->len + take + 1);
    if (!grown)
        return 0;
    p->body = grown;
    memcpy(p->body + p->len, data, take);
    p->len += take;
    p->body[p->len] = '\0';
    if (take < len) {
        p->truncated = true;
        return 0; /* stops the transfer: the rest is not wanted */
    }
    return len;
}

int64_t web_retry_after_parse(const char *value, int64_t now_wall_ms) {
    while (*value == ' ' || *value == '\t')
        value++;
    if (isdigit((unsigned char)*value)) {
        int64_t seconds = 0;
        const char *p = value;
        for (; isdigit((unsigned char)*p); p++)
            if (seconds <= WEB_RETRY_AFTER_MAX_MS / 1000)
                seconds = seconds * 10 + (*p - '0');
        while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n')
            p++;
        if (*p)
            return -1;
        return seconds * 1000 < WEB_RETRY_AFTER_MAX_MS ? seconds * 1000 : WEB_RETRY_AFTER_MAX_MS;
    }
    time_t when = curl_getdate(value, NULL);
    if (when == (time_t)-1)
        return -1;
    int64_t ms = (int64_t)when * 1000 - now_wall_ms;
    return ms <= 0 ? 0 : ms < WEB_RETRY_AFTER_MAX_MS ? ms : WEB_RETRY_AFTER_MAX_MS;
}

/* Each header line of the answer: Retry-After is kept, the last answer's
 * (a "100 Continue" before it starts over). */
static size_t header_read(char *line, size_t size, size_t n, void *ctx) {
    hop *h = ctx;
    size_t len = size * n;
    static const char name[] = "retry-after:";
    if (len >= 5 && memcmp(line, "HTTP/", 5) == 0) {
        h->reply->retry_after_ms = -1;
    } else if (len > sizeof name - 1 && len < 256 &&
               strncasecmp(line, name, sizeof name - 1) == 0) {
        char value[256];
        memcpy(value, line + sizeof name - 1, len - (sizeof name - 1));
        value[len - (sizeof name - 1)] = '\0';
        h->reply->retry_after_ms = web_retry_after_parse(value, fawn_wall_ms());
    }
    return len;
}

static int progress_check(void *ctx, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un) {
    hop *h = ctx;
    (void)dt, (void)dn, (void)ut, (void)un;
    return h->cancel && atomic_load(h->cancel);
}

/* The request's host from url, checking what a requested URL may be. */
static int url_check(hop *h, const char *url) {
    if (strlen(url) > WEB_URL_MAX)
        return fawn_err(FAWN_EINVAL, "the URL is longer than %d bytes", WEB_URL_MAX);
    CURLU *u = curl_url();
    char *scheme = NULL, *host = NULL, *user = NULL, *password = NULL;
    int r = u ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && curl_url_set(u, CURLUPART_URL, url, 0) != CURLUE_OK)
        r = fawn_err(FAWN_EINVAL, "not a URL: %.200s", url);
    if (r == 0 && (curl_url_get(u, CURLUPART_SCHEME, &scheme, 0) != CURLUE_OK ||
                   (strcmp(scheme, "http") != 0 && strcmp(scheme, "https") != 0)))
        r = fawn_err(FAWN_EINVAL, "only http and https URLs are fetched");
    if (r == 0 && (curl_url_get(u, CURLUPART_USER, &user, 0) == CURLUE_OK ||
                   curl_url_get(u, CURLUPART_PASSWORD, &password, 0) == CURLUE_OK))
        r = fawn_err(FAWN_EINVAL, "a URL with a user name or password is not fetched");
    if (r == 0 && curl_url_get(u, CURLUPART_HOST, &host, 0) != CURLUE_OK)
        r = fawn_err(FAWN_EINVAL, "the URL names no host");
    if (r == 0) {
        size_t n = strlen(host);
        bool bracketed = n >= 2 && host[0] == '[' && host[n - 1] == ']';
        if (n - (bracketed ? 2 : 0) > NET_HOST_MAX)
            r = fawn_err(FAWN_EINVAL, "the URL's host name is too long");
        else
            snprintf(h->host, sizeof h->host, "%.*s", (int)(n - (bracketed ? 2 : 0)),
                     host + (bracketed ? 1 : 0));
    }
    curl_free(scheme);
    curl_free(host);
    curl_free(user);
    curl_free(password);
    curl_url_cleanup(u);
    return r;
}

/* "text/HTML; charset=UTF-8" → content_type "text/html", charset "utf-8". */
static void content_type_split(web_http_reply *p, const char *value) {
    p->content_type[0] = p->charset[0] = '\0';
    if (!value)
        return;
    size_t n = strcspn(value, ";");
    while (n > 0 && isspace((unsigned char)value[n - 1]))
        n--;
    for (size_t i = 0; i < n && i < sizeof p->content_type - 1; i++)
        p->content_type[i] = (char)tolower((unsigned char)value[i]);
    p->content_type[n < sizeof p->content_type - 1 ? n : sizeof p->content_type - 1] = '\0';
    const char *cs = strcasestr(value, "charset=");
    if (!cs)
        return;
    cs += strlen("charset=");
    cs += *cs == '"';
    size_t k = 0;
    while (cs[k] && cs[k] != '"' && cs[k] != ';' && !isspace((unsigned char)cs[k]) &&
           k < sizeof p->charset - 1) {
        p->charset[k] = (char)tolower((unsigned char)cs[k]);
        k++;
    }
    p->charset[k] = '\0';
}

static int curl_failure(CURLcode c, const hop *h, const char *url) {
    if (h->refused)
        return fawn_err(FAWN_EPERM, "the address of %s is not one fawn may reach", h->host);
    if (c == CURLE_ABORTED_BY_CALLBACK)
        return fawn_err(FAWN_ECANCELED, "cancelled");
    if (c == CURLE_OPERATION_TIMEDOUT)
        return fawn_err(FAWN_ETIMEDOUT, "fetching %.200s timed out", url);
    if (c == CURLE_OUT_OF_MEMORY)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return fawn_err(FAWN_EIO, "fetching %.200s failed: %s", url, curl_easy_strerror(c));
}

static CURL *client_new(hop *h) {
    CURL *c = curl_easy_init();
    if (!c)
        return NULL;
    curl_easy_setopt(c, CURLOPT_OPENSOCKETFUNCTION, open_checked);
    curl_easy_setopt(c, CURLOPT_OPENSOCKETDATA, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, h);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, header_read);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, h);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, progress_check);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, h);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never the host's proxy settings */
    curl_easy_setopt(c, CURLOPT_ACCEPT_ENCODING, "");
    curl_easy_setopt(c, CURLOPT_USERAGENT, WEB_USER_AGENT);
    curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
    return c;
}

/* The request's header list: the caller's lines, and for a body its type
 * (without "Expect: 100-continue", which costs a round trip). */
static int headers_build(struct curl_slist **out, const web_http_request *req) {
    struct curl_slist *list = NULL;
    for (size_t i = 0; req->headers && req->headers[i]; i++)
        if (!(list = curl_slist_append(list, req->headers[i])))
            return fawn_err(FAWN_ENOMEM, "out of memory");
    if (req->body && (!(list = curl_slist_append(list, "Content-Type: application/json")) ||
                      !(list = curl_slist_append(list, "Expect:"))))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *out = list;
    return 0;
}

void web_http_reply_clear(web_http_reply *r) {
    free(r->location);
    free(r->body);
    memset(r, 0, sizeof *r);
    r->retry_after_ms = -1;
}

/* The answer's status, type and redirect target, once it is all read. */
static int reply_finish(web_http_reply *p, CURL *c) {
    char *ctype = NULL, *redirect = NULL;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &p->status);
    curl_easy_getinfo(c, CURLINFO_CONTENT_TYPE, &ctype);
    content_type_split(p, ctype);
    if (p->status >= 300 && p->status < 400 &&
        curl_easy_getinfo(c, CURLINFO_REDIRECT_URL, &redirect) == CURLE_OK && redirect &&
        !(p->location = strdup(redirect)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return 0;
}

int web_http_do(web_http_reply *out, const web_http_request *req, const net_allowlist *al,
                const atomic_bool *cancel) {
    memset(out, 0, sizeof *out);
    out->retry_after_ms = -1;
    hop h = {.al = al, .reply = out, .max_bytes = req->max_bytes, .cancel = cancel};
    int r = fawn_curl_init();
    if (r < 0 || (r = url_check(&h, req->url)) < 0)
        return r;
    struct curl_slist *headers = NULL;
    CURL *c = client_new(&h);
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if ((r = headers_build(&headers, req)) == 0) {
        int64_t left = req->deadline_ms - fawn_now_ms();
        curl_easy_setopt(c, CURLOPT_URL, req->url);
        curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
        curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, left > 0 ? (long)left : 1L);
        if (strcmp(req->method, "POST") == 0) {
            curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)(req->body ? strlen(req->body) : 0));
            curl_easy_setopt(c, CURLOPT_POSTFIELDS, req->body ? req->body : "");
        }
        CURLcode cc = curl_easy_perform(c);
        if (cc != CURLE_OK && !(cc == CURLE_WRITE_ERROR && out->truncated))
            r = curl_failure(cc, &h, req->url);
        else
            r = reply_finish(out, c);
    }
    curl_slist_free_all(headers);
    curl_easy_cleanup(c);
    if (r < 0)
        web_http_reply_clear(out);
    return r;
}

/* A hop's answer becomes the page (its body moved over). */
static int page_take(web_page *p, web_http_reply *rep, const char *url) {
    free(p->body);
    free(p->final_url);
    p->body = steal_ptr(rep->body);
    p->len = rep->len;
    p->truncated = rep->truncated;
    p->status = rep->status;
    memcpy(p->content_type, rep->content_type, sizeof p->content_type);
    memcpy(p->charset, rep->charset, sizeof p->charset);
    p->final_url = strdup(url);
    return p->final_url ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int web_fetch(web_page *out, const char *url, const net_allowlist *al, const web_fetch_limits *lim,
              const atomic_bool *cancel) {
    memset(out, 0, sizeof *out);
    int64_t deadline = fawn_now_ms() + lim->timeout_ms;
    char *current = strdup(url);
    int r = current ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    while (r == 0) {
        web_http_request req = {
            .method = "GET", .url = current, .max_bytes = lim->max_bytes, .deadline_ms = deadline};
        web_http_reply rep;
        char *next = NULL;
        r = web_http_do(&rep, &req, al, cancel);
        if (r == 0 && (r = page_take(out, &rep, current)) == 0)
            next = steal_ptr(rep.location);
        web_http_reply_clear(&rep);
        free(current);
        current = next;
        if (r < 0 || !next)
            break;
        if (++out->redirects > WEB_REDIRECTS_MAX)
            r = fawn_err(FAWN_EIO, "more than %d redirects", WEB_REDIRECTS_MAX);
    }
    if (r < 0) { /* as before a hop: no body of a hop that failed */
        free(out->body);
        out->body = NULL;
        out->len = 0;
        out->truncated = false;
    }
    free(current);
    return r;
}
