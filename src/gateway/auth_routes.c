/* /api/v1/auth: the first admin, registration, signing in and out, the
 * signed-in user, password changes, and API tokens. Sign-in failures are
 * throttled per client address; errors a client acts on carry a code. */
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "gateway/internal.h"

/* Random bytes of an API token (shown as hex after GW_API_TOKEN_PREFIX). */
#define API_TOKEN_BYTES 32

typedef struct credentials {
    char username[STORE_NAME_MAX + 1];
    char password[AUTH_PASSWORD_MAX + 1];
} credentials;

static bool body_is_form(const gw_request *rq) {
    const char *type = gw_header(rq, MHD_HTTP_HEADER_CONTENT_TYPE);
    return type && strncasecmp(type, "application/x-www-form-urlencoded", 33) == 0;
}

static int copy_field(char *out, size_t size, const char *value, const char *what) {
    if (strlen(value) >= size)
        return fawn_err(FAWN_EINVAL, "%s is too long", what);
    strcpy(out, value);
    return 0;
}

static int credentials_from_json(credentials *c, const gw_request *rq) {
    static const char *const keys[] = {"email", "username", "password", "remember_me", NULL};
    json_t *body = NULL;
    const char *name = NULL, *email = NULL, *password = NULL;
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = fjson_get_string(&email, body, "email", false);
    if (r == 0)
        r = fjson_get_string(&name, body, "username", !email);
    if (r == 0)
        r = fjson_get_string(&password, body, "password", true);
    if (r == 0)
        r = copy_field(c->username, sizeof c->username, email ? email : name, "username");
    if (r == 0)
        r = copy_field(c->password, sizeof c->password, password, "password");
    json_decref(body);
    return r;
}

static int credentials_from_form(credentials *c, const gw_request *rq) {
    int r = gw_form_field(c->username, sizeof c->username, rq->body.data, rq->body.len, "username");
    if (r == FAWN_ENOENT)
        r = gw_form_field(c->username, sizeof c->username, rq->body.data, rq->body.len, "email");
    if (r == FAWN_ENOENT)
        return fawn_err(FAWN_EINVAL, "username is required");
    if (r == 0)
        r = gw_form_field(c->password, sizeof c->password, rq->body.data, rq->body.len, "password");
    return r == FAWN_ENOENT ? fawn_err(FAWN_EINVAL, "password is required") : r;
}

/* A username and password from a form (fields username, password) or a
 * JSON body ({email or username, password}). */
static int credentials_read(credentials *c, const gw_request *rq) {
    return body_is_form(rq) ? credentials_from_form(c, rq) : credentials_from_json(c, rq);
}

static void credentials_wipe(credentials *c) { sodium_memzero(c, sizeof *c); }

/* Answers with user's JSON and fresh session cookies. */
static int respond_signed_in(gw_request *rq, unsigned status, json_t *body, const store_user *u) {
    struct MHD_Response *resp = gw_json_response(body);
    int r = resp ? gw_session_cookies_set(resp, rq->g, u) : FAWN_ENOMEM;
    if (r < 0) {
        if (resp)
            MHD_destroy_response(resp);
        return r;
    }
    return gw_queue(rq, status, resp);
}

static int user_create(store_user *out, gw_request *rq, const credentials *c, const char *role) {
    if (!auth_username_valid(c->username))
        return fawn_err(FAWN_EINVAL, "a username has 1 to %d letters, digits or . _ @ + -",
                        STORE_NAME_MAX);
    char hash[AUTH_HASH_MAX];
    int r = auth_password_check(c->password);
    if (r == 0)
        r = auth_password_hash(hash, c->password);
    if (r == 0)
        r = store_user_create(rq->g->st, out, c->username, hash, role);
    if (r == FAWN_EEXIST)
        return gw_respond_coded(rq, MHD_HTTP_BAD_REQUEST, "email_already_exists",
                                "This username is already registered");
    return r;
}

/* A sign-in route: the Origin check, then the credentials. */
static int signin_prepare(credentials *c, gw_request *rq) {
    int r = gw_check_origin(rq);
    return r < 0 ? r : credentials_read(c, rq);
}

static int route_initialize(gw_request *rq) {
    credentials c = {0};
    int r = signin_prepare(&c, rq);
    int64_t admins = 0;
    store_user u = {0};
    pthread_mutex_lock(&rq->g->setup_lock);
    if (r == 0)
        r = store_user_count(rq->g->st, &admins, AUTHZ_ADMIN_ROLE);
    if (r == 0 && admins > 0)
        r = gw_respond_coded(rq, MHD_HTTP_CONFLICT, "system_already_initialized",
                             "An admin already exists");
    else if (r == 0)
        r = user_create(&u, rq, &c, AUTHZ_ADMIN_ROLE);
    pthread_mutex_unlock(&rq->g->setup_lock);
    credentials_wipe(&c);
    if (r == 0 && !rq->responded)
        r = respond_signed_in(rq, MHD_HTTP_CREATED, gw_user_json(&u), &u);
    return r;
}

static int route_register(gw_request *rq) {
    if (!rq->g->cfg->auth.registration_enabled)
        return gw_respond_coded(rq, MHD_HTTP_FORBIDDEN, "registration_disabled",
                                "Registration is disabled");
    credentials c = {0};
    store_user u = {0};
    int r = signin_prepare(&c, rq);
    if (r == 0)
        r = user_create(&u, rq, &c, "user");
    credentials_wipe(&c);
    if (r == 0 && !rq->responded)
        r = respond_signed_in(rq, MHD_HTTP_CREATED, gw_user_json(&u), &u);
    return r;
}

/* Checks c against the store; unknown users cost the same hashing time as
 * known ones, so timing does not tell which usernames exist. */
static int credentials_verify(store_user *u, gateway *g, const credentials *c) {
    int r = store_user_get_by_name(g->st, u, c->username);
    if (r == FAWN_ENOENT) {
        /* Checked for its time alone: matching the dummy signs in no one. */
        r = auth_password_verify(g->dummy_hash, c->password);
        return r == 0 ? fawn_err(FAWN_EPERM, "wrong password") : r;
    }
    return r < 0 ? r : auth_password_verify(u->password_hash, c->password);
}

/* Counts a sign-in attempt from addr; a locked-out address gets 429 with
 * Retry-After, and FAWN_EPERM is returned then. */
static int throttle_attempt(gw_request *rq, const char *addr) {
    int64_t wait;
    int r = gw_throttle_attempt(&wait, rq->g->st, addr, fawn_wall_ms() / 1000);
    if (r < 0 || wait == 0)
        return r;
    struct MHD_Response *resp = gw_json_response(
        json_pack("{s:s}", "detail", "Too many failed sign-in attempts; try again later"));
    char seconds[24];
    snprintf(seconds, sizeof seconds, "%lld", (long long)wait);
    if (resp)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, seconds);
    r = gw_queue(rq, MHD_HTTP_TOO_MANY_REQUESTS, resp);
    return r < 0 ? r : FAWN_EPERM;
}

/* Verifies c for a sign-in from addr: 0, FAWN_EPERM with the answer
 * queued (bad credentials, or locked out), or another error. The attempt
 * is counted before the check, so attempts racing on several gateways
 * cannot pass the limit together; a success forgets the count. */
static int signin_verify(store_user *u, gw_request *rq, const credentials *c, unsigned status) {
    char addr[64];
    gw_client_address(addr, rq);
    int r = throttle_attempt(rq, addr);
    if (r < 0)
        return r;
    r = credentials_verify(u, rq->g, c);
    if (r == 0) {
        gw_throttle_succeed(rq->g->st, addr);
        return 0;
    }
    if (r != FAWN_EPERM)
        return r;
    r = gw_respond_coded(rq, status, "invalid_credentials", "Wrong username or password");
    return r < 0 ? r : FAWN_EPERM;
}

static int route_login(gw_request *rq) {
    credentials c = {0};
    store_user u;
    int r = signin_prepare(&c, rq);
    if (r == 0)
        r = signin_verify(&u, rq, &c, MHD_HTTP_UNAUTHORIZED);
    credentials_wipe(&c);
    if (r == 0)
        r = respond_signed_in(rq, MHD_HTTP_OK,
                              json_pack("{s:I,s:b}", "expires_in",
                                        (json_int_t)rq->g->cfg->auth.session_ttl_s, "needs_setup",
                                        0),
                              &u);
    return rq->responded ? 0 : r;
}

static int route_logout(gw_request *rq) {
    int r = gw_check_origin(rq);
    if (r < 0)
        return r;
    gw_session_forget(rq);
    struct MHD_Response *resp = gw_json_response(json_pack("{s:s}", "message", "Signed out"));
    r = resp ? gw_session_cookies_clear(resp, rq->g) : FAWN_ENOMEM;
    if (r < 0) {
        if (resp)
            MHD_destroy_response(resp);
        return r;
    }
    return gw_queue(rq, MHD_HTTP_OK, resp);
}

static int route_me(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK, gw_user_json(&rq->who.user));
}

/* The single sign-on providers the sign-in page offers: none; fawn signs
 * in with a username and password (login/local) only. */
static int route_providers(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:[]}", "providers"));
}

static int route_setup_status(gw_request *rq) {
    int64_t admins = 0;
    int r = store_user_count(rq->g->st, &admins, AUTHZ_ADMIN_ROLE);
    if (r < 0)
        return r;
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:b,s:b}", "needs_setup", admins == 0,
                                     "registration_enabled",
                                     rq->g->cfg->auth.registration_enabled));
}

static int password_change_read(credentials *current, char *next, gw_request *rq) {
    /* remember_me is accepted, as from the other sign-in forms, and has no effect. */
    static const char *const keys[] = {"current_password", "new_password", "remember_me", NULL};
    json_t *body = NULL;
    const char *old_pw = NULL, *new_pw = NULL;
    int r = gw_body_json(&body, rq);
    if (r == 0 && json_object_get(body, "new_email"))
        r = fawn_err(FAWN_EINVAL, "changing the username is not supported");
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = fjson_get_string(&old_pw, body, "current_password", true);
    if (r == 0)
        r = fjson_get_string(&new_pw, body, "new_password", true);
    if (r == 0)
        r = copy_field(current->password, sizeof current->password, old_pw, "current_password");
    if (r == 0)
        r = copy_field(next, AUTH_PASSWORD_MAX + 1, new_pw, "new_password");
    if (r == 0)
        r = auth_password_check(next);
    json_decref(body);
    return r;
}

/* Replaces the password (which signs the user out everywhere) and hands
 * this client a fresh session. */
static int route_change_password(gw_request *rq) {
    credentials current = {0};
    char next[AUTH_PASSWORD_MAX + 1] = "", hash[AUTH_HASH_MAX];
    snprintf(current.username, sizeof current.username, "%s", rq->who.user.username);
    store_user u;
    int r = password_change_read(&current, next, rq);
    if (r == 0)
        r = signin_verify(&u, rq, &current, MHD_HTTP_BAD_REQUEST);
    if (r == 0)
        r = auth_password_hash(hash, next);
    if (r == 0)
        r = store_user_set_password(rq->g->st, u.id, hash);
    if (r == 0)
        r = store_user_get(rq->g->st, &u, u.id);
    credentials_wipe(&current);
    sodium_memzero(next, sizeof next);
    if (r == 0)
        r = respond_signed_in(rq, MHD_HTTP_OK, json_pack("{s:s}", "message", "Password changed"),
                              &u);
    return rq->responded ? 0 : r;
}

/* ---- API tokens ---- */

static json_t *token_json(const store_token *t) {
    char created[40], used[40];
    gw_iso_time(created, t->created_at_ms);
    gw_iso_time(used, t->last_used_at_ms);
    return json_pack("{s:I,s:s,s:s,s:s?}", "id", (json_int_t)t->id, "name", t->name, "created_at",
                     created, "last_used_at", t->last_used_at_ms ? used : NULL);
}

/* Token names are shown in lists: printable UTF-8, no control characters. */
static bool token_name_valid(const char *name) {
    size_t n = strlen(name);
    if (n == 0 || n > STORE_TOKEN_NAME_MAX || !fawn_utf8_valid(name, n))
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)name[i] < 0x20 || name[i] == 0x7f)
            return false;
    return true;
}

static int route_token_create(gw_request *rq) {
    static const char *const keys[] = {"name", NULL};
    json_t *body = NULL;
    const char *name = NULL;
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = fjson_get_string(&name, body, "name", true);
    if (r == 0 && !token_name_valid(name))
        r = fawn_err(FAWN_EINVAL, "a token name is 1 to %d bytes of printable text",
                     STORE_TOKEN_NAME_MAX);
    char token[sizeof GW_API_TOKEN_PREFIX + 2 * API_TOKEN_BYTES], hash[65];
    strcpy(token, GW_API_TOKEN_PREFIX);
    fawn_random_hex(token + strlen(GW_API_TOKEN_PREFIX), API_TOKEN_BYTES);
    fawn_sha256_hex(hash, token, strlen(token));
    store_token t;
    if (r == 0)
        r = store_token_create(rq->g->st, &t, rq->who.user.id, name, hash);
    json_decref(body);
    json_t *shown = r == 0 ? token_json(&t) : NULL;
    if (shown) /* the only time the token itself is shown */
        json_object_set_new(shown, "token", json_string(token));
    sodium_memzero(token, sizeof token);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_CREATED, shown);
}

static int route_token_list(gw_request *rq) {
    store_token *tokens = NULL;
    size_t n = 0;
    int r = store_token_list(rq->g->st, &tokens, &n, rq->who.user.id);
    if (r < 0)
        return r;
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++)
        json_array_append_new(list, token_json(&tokens[i]));
    free(tokens);
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:o?}", "tokens", list));
}

static int route_token_delete(gw_request *rq) {
    const char *text = rq->params[0];
    size_t digits = strspn(text, "0123456789");
    long long id = digits && digits <= 18 && !text[digits] ? strtoll(text, NULL, 10) : 0;
    if (id <= 0)
        return fawn_err(FAWN_ENOENT, "no such token");
    int r = store_token_delete(rq->g->st, rq->who.user.id, id);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:b}", "success", 1));
}

#define AUTH_ROUTE(m, p, fn, access, max)                                                          \
    { m, "/api/v1/auth/" p, fn, access, (max) ? GW_BODY_BUFFER : GW_BODY_NONE, max, NULL }

const gw_route gw_auth_routes[] = {
    AUTH_ROUTE("POST", "initialize", route_initialize, GW_PUBLIC, GW_AUTH_BODY_MAX),
    AUTH_ROUTE("POST", "register", route_register, GW_PUBLIC, GW_AUTH_BODY_MAX),
    AUTH_ROUTE("POST", "login/local", route_login, GW_PUBLIC, GW_AUTH_BODY_MAX),
    AUTH_ROUTE("POST", "logout", route_logout, GW_PUBLIC, 0),
    AUTH_ROUTE("GET", "setup-status", route_setup_status, GW_PUBLIC, 0),
    AUTH_ROUTE("GET", "providers", route_providers, GW_PUBLIC, 0),
    AUTH_ROUTE("GET", "me", route_me, GW_SIGNED_IN, 0),
    AUTH_ROUTE("POST", "change-password", route_change_password, GW_SIGNED_IN, GW_AUTH_BODY_MAX),
    AUTH_ROUTE("POST", "tokens", route_token_create, GW_SIGNED_IN, GW_AUTH_BODY_MAX),
    AUTH_ROUTE("GET", "tokens", route_token_list, GW_SIGNED_IN, 0),
    AUTH_ROUTE("DELETE", "tokens/{}", route_token_delete, GW_SIGNED_IN, 0),
};
const size_t gw_auth_routes_count = ARRAY_LEN(gw_auth_routes);
