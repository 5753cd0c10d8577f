/* The web UI's files: GET / answers the page, GET /assets/{name} its
 * scripts, style and icon, all embedded in the binary (src/web). They are
 * public: the page holds no data, everything it shows comes from the API
 * once the user has signed in. The page routes itself with the URL's
 * fragment (#/t/<thread id>), so no other path needs to answer it; an
 * unknown path stays 404.
 *
 * Every answer carries the page's Content-Security-Policy: scripts and
 * styles only from this origin as files (no inline script or style, no
 * eval), nothing loaded from elsewhere, no plugin, no <base>, forms posted
 * only here, and the page never framed. A frame the page makes to preview
 * an HTML or SVG file inherits the policy, and the page makes it
 * sandboxed, without scripts. */
#include <string.h>

#include "gateway/internal.h"
#include "web/web.h"

#define WEB_CSP                                                                                    \
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; "                    \
    "connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "                 \
    "frame-ancestors 'none'"
/* Each load asks whether its copy is current: the ETag answers 304 when
 * it is, so a new binary's files are used at once and an unchanged one
 * costs a round trip without a body. */
#define WEB_CACHE_CONTROL "no-cache"

/* Answers asset a: 304 when the client holds this representation, else
 * its bytes (gzip when the client accepts it and a copy exists). */
static int web_respond(gw_request *rq, const web_asset *a) {
    bool gz = a->gzip_body && web_accepts_gzip(gw_header(rq, "Accept-Encoding"));
    const char *etag = gz ? a->gzip_etag : a->etag;
    bool fresh = web_etag_match(gw_header(rq, "If-None-Match"), etag);
    size_t len = fresh ? 0 : gz ? a->gzip_len : a->len;
    /* PERSISTENT: the bytes are static and never written through this. */
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, fresh ? "" : (void *)(gz ? a->gzip_body : a->body), MHD_RESPMEM_PERSISTENT);
    if (!r)
        return fawn_err(FAWN_ENOMEM, "out of memory building a response");
    if (!fresh)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
    if (gz && !fresh)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_ENCODING, "gzip");
    if (a->gzip_body)
        MHD_add_response_header(r, MHD_HTTP_HEADER_VARY, "Accept-Encoding");
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, WEB_CACHE_CONTROL);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy", WEB_CSP);
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    return gw_queue(rq, fresh ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK, r);
}

static int route_index(gw_request *rq) {
    const web_asset *a = web_asset_find(WEB_INDEX);
    return a ? web_respond(rq, a) : fawn_err(FAWN_EIO, "the web UI was built without its page");
}

static int route_asset(gw_request *rq) {
    const web_asset *a = web_asset_find(rq->params[0]);
    if (!a || strcmp(a->name, WEB_INDEX) == 0) /* the page is served at / only */
        return gw_respond_detail(rq, MHD_HTTP_NOT_FOUND, "Not Found");
    return web_respond(rq, a);
}

const gw_route gw_web_routes[] = {
    {"GET", "/", route_index, GW_PUBLIC, GW_BODY_NONE, 0, NULL},
    {"GET", "/assets/{}", route_asset, GW_PUBLIC, GW_BODY_NONE, 0, NULL},
};
const size_t gw_web_routes_count = ARRAY_LEN(gw_web_routes);
