/* research: what the research tools (web search, web fetch) and the
 * sandbox's egress may reach on the network.
 *
 * The rule is an allow-list, decided on the address a connection is about
 * to be made to (after DNS, so no name can point fawn somewhere else
 * between the check and the connect): a globally reachable unicast address
 * (not private, loopback, link-local, shared, documentation, multicast or
 * otherwise special, in IPv4 or IPv6, IPv4-mapped and 6to4/Teredo forms
 * included), or one the operator allows by address range or by the host
 * name the URL names.
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_RESEARCH_H
#define FAWN_RESEARCH_H

#include <jansson.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include "base/base.h"
#include "config/config.h"

/* Entries one allow-list may hold, and the longest host name (DNS's). */
#define NET_ALLOW_MAX 256
#define NET_HOST_MAX 253

/* One operator entry: a host name, or an address range; a port or any. */
typedef struct net_allow_entry {
    char host[NET_HOST_MAX + 1]; /* lowercase DNS name, or "" for an address range */
    uint8_t addr[16];            /* the range's address (IPv4 as ::ffff:a.b.c.d) */
    unsigned prefix;             /* bits of addr that must match (0..128) */
    uint16_t port;               /* 0: any port */
} net_allow_entry;

typedef struct net_allowlist {
    net_allow_entry *entries;
    size_t n;
} net_allowlist;

/* Reads an allow-list from list (NULL: empty), an array of texts, each
 * "HOST", "HOST:PORT", "ADDR", "ADDR/BITS", "[V6ADDR]:PORT" or
 * "ADDR/BITS:PORT" (an IPv6 range with a port in brackets:
 * "[fd00::/8]:443"). where names the list in messages ("web.allow").
 * FAWN_ECONFIG naming the bad entry; *out is empty on failure. Free with
 * net_allowlist_free. */
FAWN_MUST_CHECK int net_allowlist_parse(net_allowlist *out, const json_t *list, const char *where);
void net_allowlist_free(net_allowlist *al);

/* Whether sa (AF_INET or AF_INET6) is a globally reachable unicast
 * address. An IPv4-mapped, 6to4 or Teredo IPv6 address is judged by the
 * IPv4 address it carries (Teredo's never counts). */
bool net_addr_public(const struct sockaddr *sa);

/* Whether a connection to sa may be made for a URL naming host (as the
 * URL has it, without brackets; may be NULL): a public address, an
 * address in a range of al (and its port, when the entry names one), or a
 * host al names (and its port). */
bool net_connect_allowed(const net_allowlist *al, const char *host, const struct sockaddr *sa);

/* Whether al holds an address range that holds sa (and its port, when the
 * entry names one); a public address counts only when a range holds it. */
bool net_range_listed(const net_allowlist *al, const struct sockaddr *sa);

/* Whether al names host (a DNS name, compared without case) for port. */
bool net_host_listed(const net_allowlist *al, const char *host, uint16_t port);

/* ---- fetching a page (fetch.c) ---- */

/* Redirects one fetch follows at most. */
#define WEB_REDIRECTS_MAX 5
/* The longest URL fetched (and each redirect's). */
#define WEB_URL_MAX 8192

typedef struct web_fetch_limits {
    size_t max_bytes; /* of the (decoded) body kept; past it the page is cut */
    int timeout_ms;   /* the whole fetch, redirects included */
} web_fetch_limits;

typedef struct web_page {
    char *final_url;        /* after redirects (malloc'd) */
    char content_type[128]; /* its media type, lowercase, without parameters ("" when none) */
    char charset[64];       /* the Content-Type's charset, lowercase ("" when none) */
    long status;            /* the last answer's HTTP status */
    char *body;             /* the body, NUL-terminated (malloc'd; may hold NULs) */
    size_t len;
    bool truncated; /* cut at max_bytes */
    int redirects;  /* followed */
} web_page;

void web_page_clear(web_page *page);

/* GETs url (http or https, no user name or password in it) without the
 * host's proxy settings, following at most WEB_REDIRECTS_MAX redirects,
 * each to http or https; every connection, the first and each redirect's,
 * is to an address net_connect_allowed lets through for the URL's host.
 * cancel (may be NULL) stops it. *out holds the last answer whatever its
 * status. FAWN_EINVAL for a URL that is not one of those (naming why),
 * FAWN_EPERM when an address was refused (naming the host), FAWN_ETIMEDOUT,
 * FAWN_ECANCELED, FAWN_EIO for the network and too many redirects. */
FAWN_MUST_CHECK int web_fetch(web_page *out, const char *url, const net_allowlist *al,
                              const web_fetch_limits *lim, const atomic_bool *cancel);

/* ---- a page as text (html.c) ---- */

/* The largest HTML page turned into text (bytes, as fetched). */
#define WEB_HTML_MAX (2 << 20)

/* The readable text of an HTML page: parsed as browsers do (gumbo), from
 * charset (the Content-Type's; NULL or "": the page's own <meta> charset,
 * else UTF-8; bytes that are not valid in it become U+FFFD). Its title,
 * then its main content (<main>, else the first <article>, else <body>)
 * as Markdown-like text: headings as #, list items as -, <pre> fenced,
 * links with an http(s) or relative target as [text](target), table cells
 * separated by |; scripts, styles, forms, navigation, asides, footers and
 * embedded objects left out. *out is valid UTF-8 (malloc'd). FAWN_E2BIG
 * past WEB_HTML_MAX, FAWN_EUNSUP for a charset glibc does not know,
 * FAWN_ENOMEM. */
FAWN_MUST_CHECK int web_html_text(char **out, const char *html, size_t len, const char *charset);

/* text[0..len) in UTF-8 (malloc'd, NUL-terminated, *out_len bytes), from
 * charset (NULL or "": UTF-8; bytes not valid in it become U+FFFD).
 * FAWN_EUNSUP for a charset glibc does not know, FAWN_ENOMEM. */
FAWN_MUST_CHECK int web_text_utf8(char **out, size_t *out_len, const char *text, size_t len,
                                  const char *charset);

/* ---- searching (search.c) ---- */

/* The search backends. Each has its own request and reply shape; all are
 * answered as the same hits:
 *   searxng  GET  {url}/search?q=..&format=json&pageno=1   (self-hosted, no key)
 *   tavily   POST {url}/search  {"query","max_results",..}, Authorization: Bearer KEY
 *   brave    GET  {url}/res/v1/web/search?q=..&count=N,    X-Subscription-Token: KEY
 *   serper   POST {url}/search  {"q","num"},               X-API-KEY: KEY */
enum web_search_backend {
    WEB_SEARCH_SEARXNG,
    WEB_SEARCH_TAVILY,
    WEB_SEARCH_BRAVE,
    WEB_SEARCH_SERPER,
};
#define WEB_SEARCH_BACKENDS 4

/* Hits one search answers with at most (Brave's own cap on count). */
#define WEB_SEARCH_MAX_RESULTS 20
/* The longest query, in bytes (DeerFlow's clients cut theirs at 400). */
#define WEB_SEARCH_QUERY_MAX 400
/* A hit's title and snippet at most, in bytes (cut at a character). */
#define WEB_SEARCH_TITLE_MAX 512
#define WEB_SEARCH_SNIPPET_MAX 2048
/* The largest reply read: Brave's full answer (web, news, videos,
 * discussions) for 20 hits is a few hundred KiB; past this it is an error. */
#define WEB_SEARCH_REPLY_MAX (2 << 20)
/* A backend's API key at most (bytes). */
#define WEB_SEARCH_KEY_MAX 512
/* Timeout (seconds) of one search by default and at most. */
#define WEB_SEARCH_TIMEOUT_DEFAULT_S 20
#define WEB_SEARCH_TIMEOUT_MAX_S 120
/* Hits asked for when the caller does not say. */
#define WEB_SEARCH_RESULTS_DEFAULT 5

typedef struct web_search_config {
    enum web_search_backend backend;
    char *url;        /* base URL, no trailing '/' (malloc'd) */
    char *api_key;    /* (malloc'd) NULL for a SearXNG without one */
    char *key_header; /* SearXNG only: the header that carries api_key bare
                         (malloc'd); NULL: "Authorization: Bearer KEY" */
    int timeout_s;
    unsigned max_results;
} web_search_config;

/* Reads one backend from obj, {"backend": "searxng"|"tavily"|"brave"|
 * "serper", "url": base URL (http or https, no credentials, query or
 * fragment; required for searxng, else the service's own), "api_key":
 * text (required but for searxng; printable ASCII, at most
 * WEB_SEARCH_KEY_MAX bytes), "key_header": header name (searxng only),
 * "timeout_s": 1..WEB_SEARCH_TIMEOUT_MAX_S (WEB_SEARCH_TIMEOUT_DEFAULT_S),
 * "max_results": 1..WEB_SEARCH_MAX_RESULTS (WEB_SEARCH_RESULTS_DEFAULT)}.
 * FAWN_ECONFIG naming the key (where + ".api_key") for an unknown key, a
 * wrong type or value, a missing one; *out is empty on failure. The
 * message never holds the key's value. Free with web_search_config_free. */
FAWN_MUST_CHECK int web_search_config_parse(web_search_config *out, const json_t *obj,
                                            const char *where);
void web_search_config_free(web_search_config *cfg);

/* "searxng", "tavily", "brave", "serper". */
const char *web_search_backend_name(enum web_search_backend b);

/* What a failed search was, for the tool's status:
 *   auth          the key was refused (401, 403, Brave's SUBSCRIPTION_TOKEN_INVALID)
 *   quota         the plan or credit is used up (402, Tavily's 432/433, Brave's
 *                 429 at its monthly quota, Serper's "Not enough credits")
 *   rate_limited  too many requests now (429); retry_after_ms says how long
 *   transient     5xx, 408, a timeout, a connection that failed, a reply
 *                 that is not the service's JSON or is too large: try again
 *   invalid       the query was refused (400, 422) or is not one fawn sends
 *   refused       the backend's address is not one the allow-list opens
 *   backend       the backend answered something else (a redirect, 404):
 *                 its configuration needs a look */
enum web_search_failure {
    WEB_SEARCH_OK = 0,
    WEB_SEARCH_AUTH,
    WEB_SEARCH_QUOTA,
    WEB_SEARCH_RATE_LIMITED,
    WEB_SEARCH_TRANSIENT,
    WEB_SEARCH_INVALID,
    WEB_SEARCH_REFUSED,
    WEB_SEARCH_BACKEND,
};

/* "ok", "auth", "quota", "rate_limited", "transient", "invalid",
 * "refused", "backend". */
const char *web_search_failure_name(enum web_search_failure f);

/* A message's room, in bytes with its NUL. */
#define WEB_SEARCH_MESSAGE_MAX 256

typedef struct web_search_hit {
    char *title;   /* plain UTF-8, one line, at most WEB_SEARCH_TITLE_MAX bytes */
    char *url;     /* http or https, at most WEB_URL_MAX bytes */
    char *snippet; /* plain UTF-8, one line, at most WEB_SEARCH_SNIPPET_MAX bytes */
} web_search_hit;

typedef struct web_search_result {
    web_search_hit *hits; /* malloc'd, n of them (NULL when none) */
    size_t n;
    enum web_search_failure failure;      /* WEB_SEARCH_OK: hits is the answer */
    int64_t retry_after_ms;               /* the backend's Retry-After (capped at an hour) or -1 */
    char message[WEB_SEARCH_MESSAGE_MAX]; /* for a failure: what happened, in a line of
                                             UTF-8, naming the backend, never the key */
} web_search_result;

void web_search_result_clear(web_search_result *r);

/* Reads a backend's answer, apart from the network (so it can be fuzzed):
 * status and retry_after_ms (-1: none) as the HTTP answer had them, body
 * (len bytes, NUL-terminated or not). On a 200 the hits, at most
 * max_results (capped at WEB_SEARCH_MAX_RESULTS), each with a title and
 * snippet made plain (Brave's tags stripped, whitespace runs one space) and
 * bounded, and those whose URL is not http(s) left out; otherwise the
 * failure, its message holding the service's own words without any
 * occurrence of secret (may be NULL). Returns 0 (the answer, a failure
 * included, in *out) or FAWN_ENOMEM (*out empty). */
FAWN_MUST_CHECK int web_search_parse(web_search_result *out, enum web_search_backend b, long status,
                                     int64_t retry_after_ms, const char *body, size_t len,
                                     unsigned max_results, const char *secret);

/* Searches the web through cfg's backend for query (non-empty, at most
 * WEB_SEARCH_QUERY_MAX bytes of UTF-8 without control characters) for at
 * most max_results hits (0: cfg's max_results; capped at
 * WEB_SEARCH_MAX_RESULTS), connecting only where al lets it (decided on
 * the resolved address, as web_fetch does; never the host's proxy), following no redirect,
 * reading at most WEB_SEARCH_REPLY_MAX bytes within cfg's timeout. cancel
 * (may be NULL) stops it.
 *
 * Returns 0 when the search ran to an answer: out->failure is WEB_SEARCH_OK
 * with out->hits (maybe none), or the failure with its message (a bad
 * query is WEB_SEARCH_INVALID, without a request). FAWN_ECANCELED when
 * cancel stopped it, FAWN_ENOMEM; *out is then empty. Free *out with
 * web_search_result_clear. */
FAWN_MUST_CHECK int web_search(web_search_result *out, const web_search_config *cfg,
                               const char *query, unsigned max_results, const net_allowlist *al,
                               const atomic_bool *cancel);

/* ---- the research tools' service (service.c) ----
 * What the web tools share in one gateway: the configuration (web.*) read
 * once, and each user's rate limit. */

/* Users whose rate is tracked at once; past it the one idle longest is
 * forgotten (its next call starts with a full allowance). 4096 users a
 * minute is past what one gateway serves. */
#define WEB_RATE_USERS_MAX 4096

typedef struct web_service web_service;

/* Builds the service from web.* (the allow-list and the search backend
 * checked here: FAWN_ECONFIG naming the bad key). Free with
 * web_service_free. */
FAWN_MUST_CHECK int web_service_open(web_service **out, const fawn_web_config *cfg);
void web_service_free(web_service *s);

/* Whether web_fetch is offered (s may be NULL: no). */
bool web_service_fetch_enabled(const web_service *s);
/* The search backend web_search uses, or NULL when none is configured (or
 * s is NULL): then web_search is not offered. */
const web_search_config *web_service_search(const web_service *s);
/* The allow-list and limits every fetch uses. */
const net_allowlist *web_service_allow(const web_service *s);
web_fetch_limits web_service_fetch_limits(const web_service *s);

/* Takes one call from user's allowance (web.rate_limit_per_minute, refilled
 * evenly over the minute). 0, or FAWN_EBUSY with *retry_after_ms the wait
 * until the next call is allowed. Thread-safe. */
FAWN_MUST_CHECK int web_service_admit(int64_t *retry_after_ms, web_service *s, const char *user);

#endif
