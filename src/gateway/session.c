/* Who is asking, and whether a browser was tricked into asking: session
 * cookies (HS256 JWT, revocable through the user's token version), API
 * tokens, the CSRF double-submit check and the Origin check. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gateway/internal.h"

/* Random bytes of a CSRF token (shown as hex). */
#define GW_CSRF_BYTES 32

static int signed_in(gw_request *rq, const store_user *u, enum gw_via via) {
    rq->who.user = *u;
    rq->who.via = via;
    rq->who.permissions = authz_route_permissions(app_policy(rq->g->app), u->role);
    return 0;
}

static int local_admin(gw_request *rq) {
    store_user u;
    int r = store_user_get(rq->g->st, &u, rq->g->local_admin_id);
    return r < 0 ? r : signed_in(rq, &u, GW_VIA_DISABLED);
}

/* Answers 401 with code (the shape of authentication errors, whose code a
 * client acts on): FAWN_EPERM, or the failure to queue the answer (which
 * the server then answers). */
static int unauthorized(gw_request *rq, const char *code, const char *message) {
    int r = gw_respond_coded(rq, MHD_HTTP_UNAUTHORIZED, code, message);
    return r < 0 ? r : FAWN_EPERM;
}

static int api_token(gw_request *rq, const char *token) {
    char hash[65];
    fawn_sha256_hex(hash, token, strlen(token));
    store_user u;
    int64_t token_id;
    int r = store_token_authenticate(rq->g->st, &u, &token_id, hash);
    if (r == FAWN_ENOENT)
        return unauthorized(rq, "token_invalid", "Unknown or revoked API token");
    return r < 0 ? r : signed_in(rq, &u, GW_VIA_TOKEN);
}

static int session_token(gw_request *rq, const char *token, enum gw_via via) {
    auth_claims c;
    int r = auth_jwt_verify(&c, rq->g->secret, token, fawn_wall_ms() / 1000);
    if (r == FAWN_ETIMEDOUT)
        return unauthorized(rq, "token_expired", "The session has expired");
    store_user u;
    if (r == 0)
        r = store_user_get(rq->g->st, &u, c.user_id);
    if (r == 0 && u.token_version != c.token_version)
        r = FAWN_EPERM; /* revoked: signed out everywhere or the password changed */
    if (r == FAWN_EPERM || r == FAWN_ENOENT)
        return unauthorized(rq, "token_invalid", "The session is not valid");
    return r < 0 ? r : signed_in(rq, &u, via);
}

int gw_authenticate(gw_request *rq) {
    if (rq->g->cfg->auth.disabled)
        return local_admin(rq);
    const char *authorization = gw_header(rq, MHD_HTTP_HEADER_AUTHORIZATION);
    if (authorization && strncasecmp(authorization, "Bearer ", 7) == 0) {
        const char *token = authorization + 7;
        if (strncmp(token, GW_API_TOKEN_PREFIX, strlen(GW_API_TOKEN_PREFIX)) == 0)
            return api_token(rq, token);
        return session_token(rq, token, GW_VIA_TOKEN);
    }
    const char *cookie = gw_cookie(rq, GW_ACCESS_COOKIE);
    if (cookie)
        return session_token(rq, cookie, GW_VIA_COOKIE);
    return unauthorized(rq, "not_authenticated", "Sign in first");
}

static bool method_changes_state(const char *method) {
    return strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0 &&
           strcmp(method, "OPTIONS") != 0;
}

/* Answers 403 with detail: FAWN_EPERM, or the failure to queue it. */
static int forbidden(gw_request *rq, const char *detail) {
    int r = gw_respond_detail(rq, MHD_HTTP_FORBIDDEN, detail);
    return r < 0 ? r : FAWN_EPERM;
}

static int csrf_double_submit(gw_request *rq) {
    const char *header = gw_header(rq, GW_CSRF_HEADER);
    const char *cookie = gw_cookie(rq, GW_CSRF_COOKIE);
    if (!header || !cookie || !*header || !*cookie)
        return forbidden(rq, "CSRF token missing");
    size_t n = strlen(cookie);
    if (strlen(header) != n || sodium_memcmp(header, cookie, n) != 0)
        return forbidden(rq, "CSRF token mismatch");
    return 0;
}

int gw_check_csrf(gw_request *rq) {
    if (!method_changes_state(rq->method) || rq->who.via == GW_VIA_TOKEN)
        return 0;
    if (rq->who.via == GW_VIA_COOKIE)
        return csrf_double_submit(rq);
    /* Without a session (auth disabled), a page on another site must not
     * be able to drive the local admin through the browser. */
    return gw_check_origin(rq) == 0 ? 0 : forbidden(rq, fawn_errmsg());
}

int gw_check_origin(const gw_request *rq) {
    const char *origin = gw_header(rq, "Origin");
    if (!origin)
        return 0; /* not sent by a browser */
    char host[256];
    gw_request_host(host, sizeof host, rq);
    const char *authority = strstr(origin, "://");
    bool same = host[0] && authority && strcasecmp(authority + 3, host) == 0 &&
                (strncasecmp(origin, "http://", 7) == 0 || strncasecmp(origin, "https://", 8) == 0);
    return same ? 0 : fawn_err(FAWN_EPERM, "Cross-origin request refused");
}

static int cookie_add(struct MHD_Response *r, const gateway *g, const char *name, const char *value,
                      int64_t max_age, const char *attributes) {
    char *text = NULL;
    if (asprintf(&text, "%s=%s; Path=/; Max-Age=%lld; %s%s", name, value, (long long)max_age,
                 attributes, g->cfg->auth.cookie_secure ? "; Secure" : "") < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    enum MHD_Result ok = MHD_add_response_header(r, MHD_HTTP_HEADER_SET_COOKIE, text);
    free(text);
    return ok == MHD_YES ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int gw_session_cookies_set(struct MHD_Response *resp, const gateway *g, const store_user *user) {
    int64_t now = fawn_wall_ms() / 1000, ttl = g->cfg->auth.session_ttl_s;
    auth_claims c = {.user_id = user->id,
                     .token_version = user->token_version,
                     .issued_at = now,
                     .expires_at = now + ttl};
    _cleanup_free_ char *token = NULL;
    int r = auth_jwt_sign(&token, g->secret, &c);
    if (r < 0)
        return r;
    char csrf[2 * GW_CSRF_BYTES + 1];
    fawn_random_hex(csrf, GW_CSRF_BYTES);
    r = cookie_add(resp, g, GW_ACCESS_COOKIE, token, ttl, "HttpOnly; SameSite=Lax");
    return r < 0 ? r : cookie_add(resp, g, GW_CSRF_COOKIE, csrf, ttl, "SameSite=Strict");
}

int gw_session_cookies_clear(struct MHD_Response *resp, const gateway *g) {
    int r = cookie_add(resp, g, GW_ACCESS_COOKIE, "", 0, "HttpOnly; SameSite=Lax");
    return r < 0 ? r : cookie_add(resp, g, GW_CSRF_COOKIE, "", 0, "SameSite=Strict");
}
