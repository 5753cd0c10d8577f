/* Searching the web through one configured backend (research.h).
 *
 * A search is three steps, each its own part of this file:
 *   1. the request: the backend's URL, headers and body for the query
 *      (request_build), made by web_http_do (fetch.c), which connects only
 *      where the allow-list lets it and follows no redirect;
 *   2. the reply read apart from the network (web_search_parse): a 200's
 *      hits made plain and bounded, any other answer classified;
 *   3. the failure's message, in which the service's own words appear
 *      without the key (scrub_append).
 * Backends differ only in the table `backends` and in a few answers of
 * theirs (classify_special). */
#include <ctype.h>
#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/json.h"
#include "research/research_internal.h"

/* A base URL at most: room for the path and the query after it. */
#define SEARCH_BASE_URL_MAX 2048
/* A header name at most (key_header). */
#define SEARCH_HEADER_NAME_MAX 64
/* The service's own words kept in a message, in bytes. */
#define SEARCH_DETAIL_MAX 160

typedef struct backend_shape {
    const char *name;
    const char *default_url; /* NULL: the operator must give one */
    const char *list[2];     /* the hits' list: reply[list[0]][list[1]] (list[1] may be NULL) */
    const char *title, *url, *snippet; /* each hit's keys */
    bool markup;                       /* titles and snippets hold HTML tags and entities */
} backend_shape;

static const backend_shape backends[WEB_SEARCH_BACKENDS] = {
    [WEB_SEARCH_SEARXNG] = {"searxng", NULL, {"results", NULL}, "title", "url", "content", false},
    [WEB_SEARCH_TAVILY] =
        {"tavily", "https://api.tavily.com", {"results", NULL}, "title", "url", "content", false},
    [WEB_SEARCH_BRAVE] = {"brave",
                          "https://api.search.brave.com",
                          {"web", "results"},
                          "title",
                          "url",
                          "description",
                          true},
    [WEB_SEARCH_SERPER] = {"serper",
                           "https://google.serper.dev",
                           {"organic", NULL},
                           "title",
                           "link",
                           "snippet",
                           false},
};

const char *web_search_backend_name(enum web_search_backend b) {
    return (unsigned)b < WEB_SEARCH_BACKENDS ? backends[b].name : "unknown";
}

const char *web_search_failure_name(enum web_search_failure f) {
    switch (f) {
    case WEB_SEARCH_OK: return "ok";
    case WEB_SEARCH_AUTH: return "auth";
    case WEB_SEARCH_QUOTA: return "quota";
    case WEB_SEARCH_RATE_LIMITED: return "rate_limited";
    case WEB_SEARCH_TRANSIENT: return "transient";
    case WEB_SEARCH_INVALID: return "invalid";
    case WEB_SEARCH_REFUSED: return "refused";
    case WEB_SEARCH_BACKEND: return "backend";
    }
    return "backend";
}

void web_search_result_clear(web_search_result *r) {
    for (size_t i = 0; i < r->n; i++) {
        free(r->hits[i].title);
        free(r->hits[i].url);
        free(r->hits[i].snippet);
    }
    free(r->hits);
    memset(r, 0, sizeof *r);
    r->retry_after_ms = -1;
}

/* ---- text made plain: one line, bounded, tags and entities gone ---- */

typedef struct text_out {
    char *p;
    size_t n, max;
    bool space; /* a space is owed before the next character */
    bool full;  /* max is reached: what follows is cut */
} text_out;

static void text_put(text_out *t, const char *s, size_t len) {
    if (t->space && t->n > 0) {
        if (t->n + 1 >= t->max) {
            t->full = true;
            return;
        }
        t->p[t->n++] = ' ';
    }
    t->space = false;
    if (len > t->max - t->n) {
        t->full = true;
        len = t->max - t->n;
    }
    memcpy(t->p + t->n, s, len);
    t->n += len;
}

/* code point cp as UTF-8 into out (U+FFFD for one that is not a character). */
static size_t utf8_encode(char out[4], unsigned long cp) {
    if (cp == 0 || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        cp = 0xfffd;
    if (cp < 0x80)
        return out[0] = (char)cp, 1;
    if (cp < 0x800)
        return out[0] = (char)(0xc0 | cp >> 6), out[1] = (char)(0x80 | (cp & 0x3f)), 2;
    if (cp < 0x10000)
        return out[0] = (char)(0xe0 | cp >> 12), out[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
               out[2] = (char)(0x80 | (cp & 0x3f)), 3;
    out[0] = (char)(0xf0 | cp >> 18), out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), out[3] = (char)(0x80 | (cp & 0x3f));
    return 4;
}

/* The entity at s ("&amp;", "&#x27;"...) into out; its length in s, or 0. */
static size_t entity_decode(char out[4], size_t *out_len, const char *s) {
    static const struct {
        const char *name;
        char c;
    } named[] = {{"&amp;", '&'},  {"&lt;", '<'},    {"&gt;", '>'},
                 {"&quot;", '"'}, {"&apos;", '\''}, {"&nbsp;", ' '}};
    for (size_t i = 0; i < ARRAY_LEN(named); i++)
        if (strncmp(s, named[i].name, strlen(named[i].name)) == 0) {
            out[0] = named[i].c;
            *out_len = 1;
            return strlen(named[i].name);
        }
    if (s[1] != '#')
        return 0;
    bool hex = s[2] == 'x' || s[2] == 'X';
    const char *d = s + (hex ? 3 : 2), *p = d;
    unsigned long cp = 0;
    while (p - d < 7 && (hex ? isxdigit((unsigned char)*p) : isdigit((unsigned char)*p)))
        cp = cp * (hex ? 16 : 10) + (unsigned long)(isdigit((unsigned char)*p)
                                                        ? *p - '0'
                                                        : (tolower((unsigned char)*p) - 'a' + 10)),
        p++;
    if (p == d || *p != ';')
        return 0;
    *out_len = utf8_encode(out, cp);
    return (size_t)(p + 1 - s);
}

/* A markup tag's length at s ("<strong>", "</b>"), or 0 when s is a '<' of text. */
static size_t tag_length(const char *s) {
    if (!(isalpha((unsigned char)s[1]) || (s[1] == '/' && isalpha((unsigned char)s[2]))))
        return 0;
    const char *end = strchr(s, '>');
    return end ? (size_t)(end + 1 - s) : 0;
}

/* s made one line of at most max bytes (cut at a character), control
 * characters and whitespace runs one space; with markup, tags dropped and
 * entities decoded. s is valid UTF-8 (jansson's). NULL on OOM. */
static char *text_plain(const char *s, size_t max, bool markup) {
    text_out t = {.p = malloc(max + 1), .max = max};
    if (!t.p)
        return NULL;
    for (size_t i = 0; s[i] && !t.full;) {
        unsigned char c = (unsigned char)s[i];
        size_t k = 0, len = 0;
        char dec[4];
        if (c < 0x20 || c == 0x7f || c == ' ') {
            t.space = true;
            i++;
        } else if (markup && c == '<' && (k = tag_length(s + i)) > 0) {
            i += k; /* a tag is no space, nor eats one */
        } else if (markup && c == '&' && (k = entity_decode(dec, &len, s + i)) > 0) {
            bool c0 = len == 1 && ((unsigned char)dec[0] <= ' ' || dec[0] == 0x7f);
            bool c1 = len == 2 && (unsigned char)dec[0] == 0xc2 && (unsigned char)dec[1] < 0xa0;
            if (c0 || c1) /* "&#10;", "&nbsp;", "&#133;": a space */
                t.space = true;
            else
                text_put(&t, dec, len);
            i += k;
        } else {
            text_put(&t, s + i, 1);
            i++;
        }
    }
    /* a character cut by the bound goes whole */
    size_t last = t.n ? fawn_utf8_char_start(t.p, t.n - 1) : 0;
    if (t.n && !fawn_utf8_valid(t.p + last, t.n - last))
        t.n = last;
    while (t.n > 0 && t.p[t.n - 1] == ' ')
        t.n--;
    t.p[t.n] = '\0';
    return t.p;
}

/* ---- hits ---- */

/* Whether u may be a hit's URL: http or https, a host, no spaces or
 * control characters, at most WEB_URL_MAX bytes. */
static bool hit_url_ok(const char *u) {
    size_t n = strlen(u);
    if (n == 0 || n > WEB_URL_MAX ||
        (strncasecmp(u, "http://", 7) != 0 && strncasecmp(u, "https://", 8) != 0))
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)u[i] <= ' ' || u[i] == 0x7f)
            return false;
    CURLU *cu = curl_url();
    char *host = NULL;
    bool ok = cu && curl_url_set(cu, CURLUPART_URL, u, 0) == CURLUE_OK &&
              curl_url_get(cu, CURLUPART_HOST, &host, 0) == CURLUE_OK && host[0];
    curl_free(host);
    curl_url_cleanup(cu);
    return ok;
}

static int hit_add(web_search_result *out, const backend_shape *shape, const json_t *item) {
    const char *url = json_string_value(json_object_get(item, shape->url));
    if (!url || !hit_url_ok(url))
        return 0;
    const char *title = json_string_value(json_object_get(item, shape->title));
    const char *snippet = json_string_value(json_object_get(item, shape->snippet));
    web_search_hit h = {
        .title = text_plain(title ? title : "", WEB_SEARCH_TITLE_MAX, shape->markup),
        .url = strdup(url),
        .snippet = text_plain(snippet ? snippet : "", WEB_SEARCH_SNIPPET_MAX, shape->markup)};
    if (!h.title || !h.url || !h.snippet) {
        free(h.title), free(h.url), free(h.snippet);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    out->hits[out->n++] = h;
    return 0;
}

/* ---- failures ---- */

/* The length of the UTF-8 character at s (at most left bytes), 0 when
 * the bytes there are not one. */
static size_t utf8_char_len(const char *s, size_t left) {
    for (size_t k = 1; k <= 4 && k <= left; k++)
        if (fawn_utf8_valid(s, k))
            return k;
    return 0;
}

/* Appends src to dst (of size, holding a string) without ever writing
 * secret: each occurrence becomes "[key]"; control characters become
 * spaces and bytes that are not UTF-8 '?'; at most max bytes of src's,
 * never a character cut. */
static void scrub_append(char *dst, size_t size, const char *src, size_t max, const char *secret) {
    size_t n = strlen(dst), slen = secret ? strlen(secret) : 0, start = n, left = strlen(src);
    for (size_t i = 0; i < left && n - start < max;) {
        const char *piece = src + i;
        size_t take = 1, used = 1, k;
        if (slen && strncmp(src + i, secret, slen) == 0)
            piece = "[key]", take = 5, used = slen;
        else if ((unsigned char)src[i] < 0x20 || src[i] == 0x7f)
            piece = " ";
        else if ((unsigned char)src[i] >= 0x80 && (k = utf8_char_len(src + i, left - i)) > 0)
            take = used = k;
        else if ((unsigned char)src[i] >= 0x80)
            piece = "?";
        if (n + take >= size)
            break;
        memcpy(dst + n, piece, take);
        n += take;
        i += used;
    }
    dst[n] = '\0';
}

static void fail(web_search_result *out, enum web_search_failure f, enum web_search_backend b,
                 const char *what, long status, const char *detail, const char *secret) {
    size_t n;
    out->failure = f;
    snprintf(out->message, sizeof out->message, "%s: ", backends[b].name);
    scrub_append(out->message, sizeof out->message, what, sizeof out->message, secret);
    if (status > 0 && (n = strlen(out->message)) < sizeof out->message - 1)
        snprintf(out->message + n, sizeof out->message - n, " (HTTP %ld)", status);
    if (detail && *detail) {
        scrub_append(out->message, sizeof out->message, ": ", 2, NULL);
        scrub_append(out->message, sizeof out->message, detail, SEARCH_DETAIL_MAX, secret);
    }
}

/* The service's own words about an error, where it puts them. */
static const char *error_detail(enum web_search_backend b, const json_t *doc) {
    const json_t *v = NULL;
    switch (b) {
    case WEB_SEARCH_TAVILY: /* {"detail": {"error": "..."}} or {"detail": "..."} */
        v = json_object_get(doc, "detail");
        if (json_is_object(v))
            v = json_object_get(v, "error");
        break;
    case WEB_SEARCH_BRAVE: /* {"type": "ErrorResponse", "error": {"code", "detail", ...}} */
        v = json_object_get(json_object_get(doc, "error"), "detail");
        break;
    case WEB_SEARCH_SERPER: /* {"message": "...", "statusCode": 403} */
        v = json_object_get(doc, "message");
        break;
    case WEB_SEARCH_SEARXNG: break;
    }
    return json_string_value(v);
}

/* Answers that a backend documents apart from the common table. */
static enum web_search_failure classify_special(enum web_search_backend b, long status,
                                                const json_t *doc, const char *detail) {
    const json_t *err = json_object_get(doc, "error");
    const char *code = json_string_value(json_object_get(err, "code"));
    if (b == WEB_SEARCH_TAVILY && (status == 432 || status == 433))
        return WEB_SEARCH_QUOTA; /* key or plan limit; pay-as-you-go limit */
    if (b == WEB_SEARCH_BRAVE && status == 422 && code &&
        strcmp(code, "SUBSCRIPTION_TOKEN_INVALID") == 0)
        return WEB_SEARCH_AUTH;
    if (b == WEB_SEARCH_BRAVE && status == 429) { /* the monthly quota, not the rate, is used up */
        const json_t *meta = json_object_get(err, "meta");
        json_int_t limit = json_integer_value(json_object_get(meta, "quota_limit"));
        json_int_t used = json_integer_value(json_object_get(meta, "quota_current"));
        if (limit > 0 && used >= limit)
            return WEB_SEARCH_QUOTA;
    }
    if (b == WEB_SEARCH_SERPER && status == 400 && detail && strcasestr(detail, "credits"))
        return WEB_SEARCH_QUOTA; /* "Not enough credits" */
    return WEB_SEARCH_OK;
}

/* Every backend's answers, first matching row wins:
 *   a backend's own (classify_special)  as it says
 *   300..399                            backend (a redirect is not followed)
 *   401, 403                            auth
 *   402                                 quota
 *   429                                 rate_limited
 *   400, 422                            invalid
 *   408, 500..599                       transient
 *   anything else                       backend */
static enum web_search_failure classify(long status) {
    if (status >= 300 && status < 400)
        return WEB_SEARCH_BACKEND;
    if (status == 401 || status == 403)
        return WEB_SEARCH_AUTH;
    if (status == 402)
        return WEB_SEARCH_QUOTA;
    if (status == 429)
        return WEB_SEARCH_RATE_LIMITED;
    if (status == 400 || status == 422)
        return WEB_SEARCH_INVALID;
    if (status == 408 || (status >= 500 && status <= 599))
        return WEB_SEARCH_TRANSIENT;
    return WEB_SEARCH_BACKEND;
}

static const char *failure_words(enum web_search_failure f, enum web_search_backend b,
                                 long status) {
    switch (f) {
    case WEB_SEARCH_AUTH:
        return b == WEB_SEARCH_SEARXNG ? "the instance refused the request (is \"json\" among its "
                                         "search.formats, and the key right?)"
                                       : "the API key was refused";
    case WEB_SEARCH_QUOTA: return "the plan's quota or credit is used up";
    case WEB_SEARCH_RATE_LIMITED: return "too many requests";
    case WEB_SEARCH_INVALID: return "the query was refused";
    case WEB_SEARCH_TRANSIENT: return "the service failed";
    case WEB_SEARCH_BACKEND:
        return status >= 300 && status < 400
                   ? "answered with a redirect, which is not followed (set url to its target)"
                   : "answered with an unexpected status";
    default: return "failed";
    }
}

static void classify_answer(web_search_result *out, enum web_search_backend b, long status,
                            const json_t *doc, const char *secret) {
    const char *detail = error_detail(b, doc);
    enum web_search_failure f = classify_special(b, status, doc, detail);
    if (f == WEB_SEARCH_OK)
        f = classify(status);
    fail(out, f, b, failure_words(f, b, status), status, detail, secret);
}

/* The hits' list of a 200's reply; false when the reply is not the
 * backend's shape (a missing list is no hits). */
static bool hits_list(const json_t **list, const backend_shape *shape, const json_t *doc) {
    *list = NULL;
    if (!json_is_object(doc))
        return false;
    const json_t *v = json_object_get(doc, shape->list[0]);
    if (v && shape->list[1]) {
        if (!json_is_object(v))
            return false;
        v = json_object_get(v, shape->list[1]);
    }
    *list = v;
    return !v || json_is_array(v) || json_is_null(v);
}

static int hits_read(web_search_result *out, enum web_search_backend b, const json_t *doc,
                     unsigned max_results, const char *secret) {
    const backend_shape *shape = &backends[b];
    const json_t *list;
    if (!hits_list(&list, shape, doc)) {
        char what[96];
        snprintf(what, sizeof what, "the reply has no \"%s\" list of hits", shape->list[0]);
        fail(out, WEB_SEARCH_TRANSIENT, b, what, 0, NULL, secret);
        return 0;
    }
    size_t want = max_results < WEB_SEARCH_MAX_RESULTS ? max_results : WEB_SEARCH_MAX_RESULTS;
    if (want == 0 || json_array_size(list) == 0)
        return 0;
    if (!(out->hits = calloc(want, sizeof *out->hits)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < json_array_size(list) && out->n < want; i++) {
        const json_t *item = json_array_get(list, i);
        int r = json_is_object(item) ? hit_add(out, shape, item) : 0;
        if (r < 0)
            return r;
    }
    return 0;
}

int web_search_parse(web_search_result *out, enum web_search_backend b, long status,
                     int64_t retry_after_ms, const char *body, size_t len, unsigned max_results,
                     const char *secret) {
    memset(out, 0, sizeof *out);
    out->retry_after_ms = -1;
    json_error_t jerr;
    json_t *doc = body && len ? json_loadb(body, len, JSON_DECODE_ANY, &jerr) : NULL;
    int r = 0;
    if (status == 200 && !doc) {
        char what[200];
        snprintf(what, sizeof what, "the reply is not JSON in UTF-8 (%s)",
                 body && len ? jerr.text : "it is empty");
        fail(out, WEB_SEARCH_TRANSIENT, b, what, 0, NULL, secret);
    } else if (status == 200) {
        r = hits_read(out, b, doc, max_results, secret);
    } else {
        classify_answer(out, b, status, doc, secret);
        out->retry_after_ms = retry_after_ms;
    }
    json_decref(doc);
    if (r < 0)
        web_search_result_clear(out);
    return r;
}

/* ---- configuration ---- */

void web_search_config_free(web_search_config *cfg) {
    if (!cfg)
        return;
    free(cfg->url);
    free(cfg->api_key);
    free(cfg->key_header);
    memset(cfg, 0, sizeof *cfg);
}

/* A base URL: http or https, a host, no credentials, query or fragment. */
static bool base_url_ok(const char *s) {
    if (strlen(s) > SEARCH_BASE_URL_MAX || !hit_url_ok(s))
        return false;
    CURLU *u = curl_url();
    char *user = NULL, *password = NULL, *query = NULL, *fragment = NULL;
    bool ok = u && curl_url_set(u, CURLUPART_URL, s, 0) == CURLUE_OK &&
              curl_url_get(u, CURLUPART_USER, &user, 0) != CURLUE_OK &&
              curl_url_get(u, CURLUPART_PASSWORD, &password, 0) != CURLUE_OK &&
              curl_url_get(u, CURLUPART_QUERY, &query, 0) != CURLUE_OK &&
              curl_url_get(u, CURLUPART_FRAGMENT, &fragment, 0) != CURLUE_OK;
    curl_free(user), curl_free(password), curl_free(query), curl_free(fragment);
    curl_url_cleanup(u);
    return ok;
}

/* An API key: 1..WEB_SEARCH_KEY_MAX printable ASCII bytes without spaces
 * (it goes into a header line). */
static bool key_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > WEB_SEARCH_KEY_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (s[i] <= ' ' || s[i] > '~')
            return false;
    return true;
}

/* A header name: letters, digits and '-'. */
static bool header_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n == 0 || n > SEARCH_HEADER_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)s[i]) && s[i] != '-')
            return false;
    return true;
}

static int config_string(char **out, const json_t *obj, const char *key, const char *where,
                         bool (*ok)(const char *), const char *must) {
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_string(v) || !ok(json_string_value(v)))
        return fawn_err(FAWN_ECONFIG, "%s.%s: must be %s", where, key, must);
    if (!(*out = strdup(json_string_value(v))))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return 0;
}

static int config_int(long long *out, const json_t *obj, const char *key, const char *where,
                      long long min, long long max) {
    const json_t *v = json_object_get(obj, key);
    if (!v)
        return 0;
    if (!json_is_integer(v) || json_integer_value(v) < min || json_integer_value(v) > max)
        return fawn_err(FAWN_ECONFIG, "%s.%s: must be a whole number from %lld to %lld", where, key,
                        min, max);
    *out = json_integer_value(v);
    return 0;
}

static int config_backend(web_search_config *out, const json_t *obj, const char *where) {
    const char *name = json_string_value(json_object_get(obj, "backend"));
    for (int b = 0; name && b < WEB_SEARCH_BACKENDS; b++)
        if (strcmp(name, backends[b].name) == 0) {
            out->backend = (enum web_search_backend)b;
            return 0;
        }
    return fawn_err(FAWN_ECONFIG,
                    "%s.backend: must be \"searxng\", \"tavily\", \"brave\" or "
                    "\"serper\"",
                    where);
}

static int config_keys(const json_t *obj, const char *where) {
    static const char *const known[] = {"backend",   "url",         "api_key", "key_header",
                                        "timeout_s", "max_results", NULL};
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)obj, key, v) {
        size_t i = 0;
        while (known[i] && strcmp(known[i], key) != 0)
            i++;
        if (!known[i])
            return fawn_err(FAWN_ECONFIG, "%s.%.64s: not a key of a search backend", where, key);
    }
    return 0;
}

/* What one backend needs that the keys alone do not say. */
static int config_complete(web_search_config *out, const char *where) {
    bool searxng = out->backend == WEB_SEARCH_SEARXNG;
    if (!out->url && searxng)
        return fawn_err(FAWN_ECONFIG, "%s.url: required for searxng (the instance's address)",
                        where);
    if (!out->api_key && !searxng)
        return fawn_err(FAWN_ECONFIG, "%s.api_key: required for %s", where,
                        backends[out->backend].name);
    if (out->key_header && (!searxng || !out->api_key))
        return fawn_err(FAWN_ECONFIG, "%s.key_header: only for searxng, with an api_key", where);
    if (!out->url && !(out->url = strdup(backends[out->backend].default_url)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    size_t n = strlen(out->url);
    while (n > 0 && out->url[n - 1] == '/')
        out->url[--n] = '\0';
    return 0;
}

int web_search_config_parse(web_search_config *out, const json_t *obj, const char *where) {
    *out = (web_search_config){.timeout_s = WEB_SEARCH_TIMEOUT_DEFAULT_S,
                               .max_results = WEB_SEARCH_RESULTS_DEFAULT};
    if (!json_is_object(obj))
        return fawn_err(FAWN_ECONFIG, "%s: must be an object naming a backend", where);
    long long timeout = out->timeout_s, results = out->max_results;
    int r;
    if ((r = config_keys(obj, where)) < 0 || (r = config_backend(out, obj, where)) < 0 ||
        (r = config_string(&out->url, obj, "url", where, base_url_ok,
                           "an http(s) URL without credentials, query or fragment")) < 0 ||
        (r = config_string(&out->api_key, obj, "api_key", where, key_ok,
                           "1 to 512 printable ASCII characters without spaces")) < 0 ||
        (r = config_string(&out->key_header, obj, "key_header", where, header_name_ok,
                           "a header name (letters, digits and '-')")) < 0 ||
        (r = config_int(&timeout, obj, "timeout_s", where, 1, WEB_SEARCH_TIMEOUT_MAX_S)) < 0 ||
        (r = config_int(&results, obj, "max_results", where, 1, WEB_SEARCH_MAX_RESULTS)) < 0 ||
        (r = config_complete(out, where)) < 0) {
        web_search_config_free(out);
        return r;
    }
    out->timeout_s = (int)timeout;
    out->max_results = (unsigned)results;
    return 0;
}

/* ---- the request ---- */

typedef struct search_request {
    char *url;
    char *body;
    char *headers[4]; /* NULL-terminated */
} search_request;

static void search_request_free(search_request *q) {
    free(q->url);
    free(q->body);
    for (size_t i = 0; i < ARRAY_LEN(q->headers); i++)
        free(q->headers[i]);
}

/* Why query is not one fawn sends, or NULL. */
static const char *query_fault(const char *query) {
    size_t n = strlen(query), blank = 0;
    if (n > WEB_SEARCH_QUERY_MAX)
        return "the query is longer than 400 bytes";
    if (!fawn_utf8_valid(query, n))
        return "the query is not valid UTF-8";
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)query[i];
        if (c < 0x20 || c == 0x7f)
            return "the query holds a control character";
        blank += c == ' ';
    }
    return blank == n ? "the query is empty" : NULL;
}

static char *json_body(enum web_search_backend b, const char *query, unsigned n) {
    json_t *doc = b == WEB_SEARCH_TAVILY
                      ? json_pack("{s:s, s:I, s:s, s:b, s:b, s:b}", "query", query, "max_results",
                                  (json_int_t)n, "search_depth", "basic", "include_answer", 0,
                                  "include_raw_content", 0, "include_images", 0)
                      : json_pack("{s:s, s:I}", "q", query, "num", (json_int_t)n);
    char *s = doc ? fjson_dump(doc) : NULL;
    json_decref(doc);
    return s;
}

/* The request for query to cfg's backend, for n hits. */
static int request_build(search_request *q, const web_search_config *cfg, const char *query,
                         unsigned n) {
    memset(q, 0, sizeof *q);
    char *esc = curl_easy_escape(NULL, query, (int)strlen(query));
    int ok = esc != NULL, h = 0;
    switch (cfg->backend) {
    case WEB_SEARCH_SEARXNG:
        ok = ok && asprintf(&q->url, "%s/search?q=%s&format=json&pageno=1", cfg->url, esc) >= 0;
        if (ok && cfg->api_key)
            ok = cfg->key_header
                     ? asprintf(&q->headers[h++], "%s: %s", cfg->key_header, cfg->api_key) >= 0
                     : asprintf(&q->headers[h++], "Authorization: Bearer %s", cfg->api_key) >= 0;
        break;
    case WEB_SEARCH_TAVILY:
        ok = ok && asprintf(&q->url, "%s/search", cfg->url) >= 0 &&
             asprintf(&q->headers[h++], "Authorization: Bearer %s", cfg->api_key) >= 0;
        break;
    case WEB_SEARCH_BRAVE:
        ok = ok && asprintf(&q->url, "%s/res/v1/web/search?q=%s&count=%u", cfg->url, esc, n) >= 0 &&
             asprintf(&q->headers[h++], "X-Subscription-Token: %s", cfg->api_key) >= 0;
        break;
    case WEB_SEARCH_SERPER:
        ok = ok && asprintf(&q->url, "%s/search", cfg->url) >= 0 &&
             asprintf(&q->headers[h++], "X-API-KEY: %s", cfg->api_key) >= 0;
        break;
    }
    ok = ok && (q->headers[h++] = strdup("Accept: application/json")) != NULL;
    if (ok && (cfg->backend == WEB_SEARCH_TAVILY || cfg->backend == WEB_SEARCH_SERPER))
        ok = (q->body = json_body(cfg->backend, query, n)) != NULL;
    curl_free(esc);
    if (!ok) {
        search_request_free(q);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

/* A request that got no answer, as the search's failure. */
static int transport_failure(web_search_result *out, const web_search_config *cfg, int r) {
    char what[WEB_SEARCH_MESSAGE_MAX];
    if (r == FAWN_ENOMEM || r == FAWN_ECANCELED)
        return r;
    if (r == FAWN_ETIMEDOUT)
        snprintf(what, sizeof what, "no answer within %d s", cfg->timeout_s);
    else
        snprintf(what, sizeof what, "%s", fawn_errmsg());
    fail(out,
         r == FAWN_EPERM    ? WEB_SEARCH_REFUSED
         : r == FAWN_EINVAL ? WEB_SEARCH_BACKEND
                            : WEB_SEARCH_TRANSIENT,
         cfg->backend, what, 0, NULL, NULL);
    return 0;
}

int web_search(web_search_result *out, const web_search_config *cfg, const char *query,
               unsigned max_results, const net_allowlist *al, const atomic_bool *cancel) {
    memset(out, 0, sizeof *out);
    out->retry_after_ms = -1;
    const char *fault = query_fault(query);
    if (fault) {
        fail(out, WEB_SEARCH_INVALID, cfg->backend, fault, 0, NULL, NULL);
        return 0;
    }
    unsigned n = max_results ? max_results : cfg->max_results;
    n = n < WEB_SEARCH_MAX_RESULTS ? n : WEB_SEARCH_MAX_RESULTS;
    search_request q;
    int r = request_build(&q, cfg, query, n);
    if (r < 0)
        return r;
    web_http_request req = {.method = q.body ? "POST" : "GET",
                            .url = q.url,
                            .headers = (const char *const *)q.headers,
                            .body = q.body,
                            .max_bytes = WEB_SEARCH_REPLY_MAX,
                            .deadline_ms = fawn_now_ms() + (int64_t)cfg->timeout_s * 1000};
    web_http_reply rep;
    r = web_http_do(&rep, &req, al, cancel);
    search_request_free(&q);
    if (r < 0)
        return transport_failure(out, cfg, r);
    if (rep.truncated)
        fail(out, WEB_SEARCH_TRANSIENT, cfg->backend, "the reply is larger than 2 MiB", 0, NULL,
             NULL);
    else
        r = web_search_parse(out, cfg->backend, rep.status, rep.retry_after_ms, rep.body, rep.len,
                             n, cfg->api_key);
    web_http_reply_clear(&rep);
    return r;
}
