/* web: fawn's web UI, a page and its scripts, style and icon, embedded in
 * the binary at build time (scripts/web-embed.py writes the table below
 * from src/web and Debian's libjs-marked and node-dompurify). The gateway
 * serves them (gateway/web_routes.c); every datum the page shows comes
 * from the signed-in API, so the files themselves are public.
 *
 * Rules:
 * - Only the files of the table are served, under the names the build gave
 *   them: web_asset_find compares a name exactly, never as a path.
 * - A representation is named by a strong ETag of its bytes: a client that
 *   holds it is answered 304 (web_etag_match), and the gzip copy, a
 *   different representation, has its own ETag.
 * - gzip is sent only to a client that accepts it (web_accepts_gzip); any
 *   doubt about the header serves the identity bytes, which every client
 *   reads. */
#ifndef FAWN_WEB_H
#define FAWN_WEB_H

#include <stdbool.h>
#include <stddef.h>

typedef struct web_asset {
    const char *name;         /* "index.html", "app.js": [a-z0-9.-], no slash */
    const char *content_type; /* with "; charset=utf-8" for text */
    const unsigned char *body;
    size_t len;
    const char *etag;               /* "\"<32 hex>\"": the first 128 bits of the SHA-256 of body */
    const unsigned char *gzip_body; /* NULL when compression saves too little */
    size_t gzip_len;
    const char *gzip_etag; /* of gzip_body; NULL with it */
} web_asset;

/* The table the build generates, in the order the build lists the files. */
extern const web_asset web_assets[];
extern const size_t web_assets_count;

/* The page every route of the UI starts from. */
#define WEB_INDEX "index.html"

/* The asset named exactly name (static storage), or NULL. */
const web_asset *web_asset_find(const char *name);

/* Whether an Accept-Encoding header value accepts gzip: "gzip" or
 * "x-gzip" (case-insensitive) with no q parameter or a q above zero, or,
 * when neither is named, "*" likewise. A malformed q counts as zero;
 * NULL (no header) accepts nothing but the identity. */
bool web_accepts_gzip(const char *accept_encoding);

/* Whether an If-None-Match header value names etag: "*", or a
 * comma-separated list of entity tags one of which, weak (W/) or not,
 * has etag's quoted text (the weak comparison RFC 9110 prescribes for
 * If-None-Match). A malformed list matches nothing past the point where
 * it breaks; NULL matches nothing. */
bool web_etag_match(const char *if_none_match, const char *etag);

#endif
