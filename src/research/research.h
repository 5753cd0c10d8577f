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

#endif
