/* Who is asking, and whether a browser was tricked into asking: session
 * cookies (HS256 JWT, revocable through the user's token version), API
 * tokens, the CSRF double-submit check and the Origin check. A credential
 * verified a moment ago is answered from the cache of verified credentials
 * (auth.h), which every revocation in the store invalidates. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "gateway/internal.h"

/* Random bytes of a CSRF token (shown as hex). */
#define GW_CSRF_BYTES 32

/* The user is who the request acts as; the password hash is never
 * needed past authentication (nor kept by the cache). */
static int signed_in(gw_request *rq, const store_user *u, enum gw_via via) {
    rq->who.user = *u;
    sodium_memzero(rq->who.user.password_hash, sizeof rq->who.user.password_hash);
    rq->who.via = via;
    rq->who.permissions = authz_route_permissions(app_policy(rq->g->app), u->role);
    return 0;
}

/* Asks the store who a credential is: into *u (and *token_id); FAWN_ENOENT
 * or FAWN_EPERM when it is refused. */
typedef int (*credential_verify)(store_user *u, int64_t *token_id, gateway *g, const void *arg);

/* Who credential (of kind) is: from the cache when it was verified a
 * moment ago and nothing changed since (auth.h), else from verify, whose
 * success is then kept. */
static int credential_user(store_user *u, int64_t *token_id, gateway *g, enum auth_credential kind,
                           const char *credential, credential_verify verify, const void *arg) {
    auth_cache_key key;
    auth_cache_stamp stamp;
    int64_t now = fawn_now_ms();
    auth_cache_key_of(&key, g->auth_cache, kind, credential, strlen(credential));
    if (auth_cache_get(g->auth_cache, u, token_id, &stamp, &key, now) == 0)
        return 0;
    int r = verify(u, token_id, g, arg);
    if (r == 0)
        auth_cache_put(g->auth_cache, &key, &stamp, u, *token_id, now);
    return r;
}

static int local_admin_verify(store_user *u, int64_t *token_id, gateway *g, const void *arg) {
    (void)arg;
    *token_id = 0;
    return store_user_get(g->st, u, g->local_admin_id);
}

static int local_admin(gw_request *rq) {
    char id[24];
    snprintf(id, sizeof id, "%lld", (long long)rq->g->local_admin_id);
    store_user u;
    int64_t token_id;
    int r = credential_user(&u, &token_id, rq->g, AUTH_CREDENTIAL_LOCAL, id, local_admin_verify,
                            NULL);
    return r < 0 ? r : signed_in(rq, &u, GW_VIA_DISABLED);
}

/* Answers 401 with code (the shape of authentication errors, whose code a
 * client acts on): FAWN_EPERM, or the failure to queue the answer (which
 * the server then answers). */
static int unauthorized(gw_request *rq, const char *code, const char *message) {
    int r = gw_respond_coded(rq, MHD_HTTP_UNAUTHORIZED, code, message);
    return r < 0 ? r : FAWN_EPERM;
}

static int api_token_verify(store_user *u, int64_t *token_id, gateway *g, const void *token) {
    char hash[65];
    fawn_sha256_hex(hash, token, strlen(token));
    return store_token_authenticate(g->st, u, token_id, hash);
}

static int api_token(gw_request *rq, const char *token) {
    store_user u;
    int64_t token_id;
    int r = credential_user(&u, &token_id, rq->g, AUTH_CREDENTIAL_API_TOKEN, token,
                            api_token_verify, token);
    if (r == FAWN_ENOENT)
        return unauthorized(rq, "token_invalid", "Unknown or revoked API token");
    return r < 0 ? r : signed_in(rq, &u, GW_VIA_TOKEN);
}

/* The session's user, whose token_version must still be the claims'. */
static int session_verify(store_user *u, int64_t *token_id, gateway *g, const void *claims) {
    const auth_claims *c = claims;
    *token_id = 0;
    int r = store_user_get(g->st, u, c->user_id);
    if (r == 0 && u->token_version != c->token_version)
        r = FAWN_EPERM; /* revoked: signed out everywhere or the password changed */
    return r;
}

/* The signature and expiry are checked on every request (no store): the
 * cache only spares asking the store whether the session was revoked. */
static int session_token(gw_request *rq, const char *token, enum gw_via via) {
    auth_claims c;
    int r = auth_jwt_verify(&c, rq->g->secret, token, fawn_wall_ms() / 1000);
    if (r == FAWN_ETIMEDOUT)
        return unauthorized(rq, "token_expired", "The session has expired");
    store_user u;
    int64_t token_id;
    if (r == 0)
        r = credential_user(&u, &token_id, rq->g, AUTH_CREDENTIAL_SESSION, token, session_verify,
                            &c);
    if (r == FAWN_EPERM || r == FAWN_ENOENT)
        return unauthorized(rq, "token_invalid", "The session is not valid");
    return r < 0 ? r : signed_in(rq, &u, via);
}

void gw_session_forget(gw_request *rq) {
    const char *authorization = gw_header(rq, MHD_HTTP_HEADER_AUTHORIZATION);
    const char *cookie = gw_cookie(rq, GW_ACCESS_COOKIE);
    auth_cache_key key;
    if (authorization && strncasecmp(authorization, "Bearer ", 7) == 0 &&
        strncmp(authorization + 7, GW_API_TOKEN_PREFIX, strlen(GW_API_TOKEN_PREFIX)) != 0) {
        auth_cache_key_of(&key, rq->g->auth_cache, AUTH_CREDENTIAL_SESSION, authorization + 7,
                          strlen(authorization + 7));
        auth_cache_forget(rq->g->auth_cache, &key);
    }
    if (cookie) {
        auth_cache_key_of(&key, rq->g->auth_cache, AUTH_CREDENTIAL_SESSION, cookie, strlen(cookie));
        auth_cache_forget(rq->g->auth_cache, &key);
    }
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
