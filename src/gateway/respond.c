/* Reading requests and writing responses: every answer is JSON with
 * DeerFlow's error shape, {"detail": ...}, and never cached or sniffed. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "base/json.h"
#include "gateway/internal.h"
#include "paths/paths.h"

const char *gw_header(const gw_request *rq, const char *name) {
    return MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, name);
}

const char *gw_cookie(const gw_request *rq, const char *name) {
    return MHD_lookup_connection_value(rq->conn, MHD_COOKIE_KIND, name);
}

const char *gw_query(const gw_request *rq, const char *name) {
    return MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, name);
}

int gw_decimal_parse(int64_t *out, const char *text, int64_t min, int64_t max) {
    *out = 0;
    int64_t n = 0;
    bool ok = text && *text && min >= 0 && min <= max;
    for (const char *p = text; ok && *p; p++) {
        int digit = *p - '0';
        ok = digit >= 0 && digit <= 9 && digit <= max && n <= (max - digit) / 10;
        n = ok ? n * 10 + digit : n;
    }
    if (!ok || n < min)
        return FAWN_EINVAL;
    *out = n;
    return 0;
}

int gw_query_int(int64_t *out, const gw_request *rq, const char *key, int64_t dflt, int64_t min,
                 int64_t max) {
    *out = 0;
    const char *v = gw_query(rq, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    return gw_decimal_parse(out, v, min, max) == 0
               ? 0
               : fawn_err(FAWN_EINVAL, "%s must be an integer from %lld to %lld", key,
                          (long long)min, (long long)max);
}

/* The canonical text of a numeric IPv4 or IPv6 address; false for
 * anything else. */
static bool address_canonical(char out[64], const char *text) {
    unsigned char bin[sizeof(struct in6_addr)];
    if (inet_pton(AF_INET, text, bin) == 1)
        return inet_ntop(AF_INET, bin, out, 64) != NULL;
    if (inet_pton(AF_INET6, text, bin) == 1)
        return inet_ntop(AF_INET6, bin, out, 64) != NULL;
    return false;
}

static bool address_trusted(const char *addr, char trusted[][64], size_t n) {
    for (size_t i = 0; i < n; i++)
        if (strcmp(addr, trusted[i]) == 0)
            return true;
    return false;
}

bool gw_proxy_trusted(const gateway *g, const char *addr) {
    return address_trusted(addr, (char(*)[64])g->trusted_proxies, g->n_trusted_proxies);
}

void gw_forwarded_client(char out[64], const char *peer, const char *forwarded_for,
                         char trusted[][64], size_t n) {
    snprintf(out, 64, "%s", peer);
    if (!forwarded_for || !address_trusted(peer, trusted, n))
        return;
    /* Walk the entries from the right, the leftmost (even empty) included:
     * each proxy appends the address it saw. */
    const char *end = forwarded_for + strlen(forwarded_for);
    for (;;) {
        const char *start = end;
        while (start > forwarded_for && start[-1] != ',')
            start--;
        char entry[64], addr[64];
        const char *a = start, *b = end;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        bool fits = (size_t)(b - a) < sizeof entry;
        if (fits) {
            memcpy(entry, a, (size_t)(b - a));
            entry[b - a] = '\0';
        }
        if (!fits || !address_canonical(addr, entry)) { /* not an address: believe none of it */
            snprintf(out, 64, "%s", peer);
            return;
        }
        snprintf(out, 64, "%s", addr);
        if (!address_trusted(addr, trusted, n) || start == forwarded_for)
            return;
        end = start - 1; /* the comma before this entry */
    }
}

int gw_trusted_proxies_load(gateway *g, const json_t *list) {
    size_t n = json_array_size(list);
    if (n > GW_TRUSTED_PROXIES_MAX)
        return fawn_err(FAWN_ECONFIG, "server.trusted_proxies: at most %d addresses",
                        GW_TRUSTED_PROXIES_MAX);
    for (size_t i = 0; i < n; i++) {
        const char *text = json_string_value(json_array_get(list, i));
        if (!text || !address_canonical(g->trusted_proxies[i], text))
            return fawn_err(FAWN_ECONFIG,
                            "server.trusted_proxies[%zu]: must be a numeric IPv4 "
                            "or IPv6 address",
                            i);
    }
    g->n_trusted_proxies = n;
    return 0;
}

/* The TCP peer's address as canonical text, "unknown" when it has none. */
static void peer_address(char out[64], const gw_request *rq) {
    const union MHD_ConnectionInfo *info = MHD_get_connection_info(
        rq->conn, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    snprintf(out, 64, "unknown");
    const struct sockaddr *sa = info ? info->client_addr : NULL;
    if (sa && sa->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, out, 64);
    else if (sa && sa->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, out, 64);
}

void gw_client_address(char out[64], const gw_request *rq) {
    char peer[64];
    peer_address(peer, rq);
    gw_forwarded_client(out, peer, gw_header(rq, "X-Forwarded-For"), rq->g->trusted_proxies,
                        rq->g->n_trusted_proxies);
}

void gw_forwarded_host(char *out, size_t outsz, const char *host, const char *forwarded_host,
                       bool peer_trusted) {
    out[0] = '\0';
    const char *from = host;
    size_t n = from ? strlen(from) : 0;
    if (peer_trusted && forwarded_host) {
        from = forwarded_host;
        while (*from == ' ' || *from == '\t')
            from++;
        n = strcspn(from, ",");
        while (n > 0 && (from[n - 1] == ' ' || from[n - 1] == '\t'))
            n--;
    }
    if (from && n > 0 && n < outsz) {
        memcpy(out, from, n);
        out[n] = '\0';
    }
}

void gw_request_host(char *out, size_t outsz, const gw_request *rq) {
    char peer[64];
    peer_address(peer, rq);
    gw_forwarded_host(out, outsz, gw_header(rq, MHD_HTTP_HEADER_HOST),
                      gw_header(rq, "X-Forwarded-Host"), gw_proxy_trusted(rq->g, peer));
}

/* Decodes one form component [s, end) into out; FAWN_EINVAL as above. */
static int form_decode(char *out, size_t outsz, const char *s, const char *end) {
    size_t n = 0;
    for (; s < end; s++) {
        int c = (unsigned char)*s;
        if (c == '+') {
            c = ' ';
        } else if (c == '%') {
            int hi = end - s > 2 ? fawn_hex_digit(s[1]) : -1,
                lo = end - s > 2 ? fawn_hex_digit(s[2]) : -1;
            if (hi < 0 || lo < 0 || (hi | lo) == 0)
                return fawn_err(FAWN_EINVAL, "malformed form field");
            c = hi << 4 | lo;
            s += 2;
        }
        if (n + 1 >= outsz)
            return fawn_err(FAWN_EINVAL, "form field too long");
        out[n++] = (char)c;
    }
    out[n] = '\0';
    return 0;
}

/* gw_form_field's work; on failure out may hold part of the value. */
static int form_field_find(char *out, size_t outsz, const char *body, size_t len, const char *key) {
    if (!body)
        return fawn_err(FAWN_ENOENT, "%s is required", key);
    const char *end = body + len;
    for (const char *pair = body; pair < end;) {
        const char *pair_end = memchr(pair, '&', (size_t)(end - pair));
        pair_end = pair_end ? pair_end : end;
        const char *eq = memchr(pair, '=', (size_t)(pair_end - pair));
        char name[64];
        if (eq && form_decode(name, sizeof name, pair, eq) == 0 && strcmp(name, key) == 0)
            return form_decode(out, outsz, eq + 1, pair_end);
        pair = pair_end + 1;
    }
    return fawn_err(FAWN_ENOENT, "%s is required", key);
}

int gw_form_field(char *out, size_t outsz, const char *body, size_t len, const char *key) {
    int r = form_field_find(out, outsz, body, len, key);
    if (r < 0 && outsz > 0)
        out[0] = '\0'; /* never half a value */
    return r;
}

int gw_body_json(json_t **out, const gw_request *rq) {
    *out = NULL;
    if (rq->body.len == 0) {
        *out = json_object();
        return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return fjson_parse_object(out, rq->body.data, rq->body.len);
}

unsigned gw_status_for(int code) {
    switch (code) {
    case FAWN_EINVAL:
    case FAWN_EPROTO: return MHD_HTTP_BAD_REQUEST;
    case FAWN_EPERM: return MHD_HTTP_FORBIDDEN;
    case FAWN_ENOENT: return MHD_HTTP_NOT_FOUND;
    case FAWN_EEXIST:
    case FAWN_EBUSY: return MHD_HTTP_CONFLICT;
    case FAWN_ESTALE: return MHD_HTTP_PRECONDITION_FAILED;
    case FAWN_E2BIG: return MHD_HTTP_CONTENT_TOO_LARGE;
    case FAWN_EUNSUP: return MHD_HTTP_UNSUPPORTED_MEDIA_TYPE;
    case FAWN_ETIMEDOUT: return MHD_HTTP_GATEWAY_TIMEOUT;
    default: return MHD_HTTP_INTERNAL_SERVER_ERROR;
    }
}

struct MHD_Response *gw_json_response(json_t *body) {
    char *text = body ? fjson_dump(body) : NULL;
    json_decref(body);
    return gw_json_text_response(text);
}

struct MHD_Response *gw_json_text_response(char *text) {
    if (!text)
        return NULL;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(text), text,
                                                             MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return NULL;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    return r;
}

int gw_queue(gw_request *rq, unsigned status, struct MHD_Response *r) {
    if (!r)
        return fawn_err(FAWN_ENOMEM, "out of memory building a response");
    if (rq->deferring) {
        rq->pending = r;
        rq->pending_status = status;
        rq->responded = true;
        return 0;
    }
    enum MHD_Result ok = MHD_queue_response(rq->conn, status, r);
    MHD_destroy_response(r);
    if (ok != MHD_YES)
        return fawn_err(FAWN_EIO, "the response could not be queued");
    rq->responded = true;
    return 0;
}

int gw_respond_json(gw_request *rq, unsigned status, json_t *body) {
    return gw_queue(rq, status, gw_json_response(body));
}

/* Messages can quote what a client sent, cut at a byte limit: they are
 * made valid UTF-8 before they become JSON. */
int gw_respond_detail(gw_request *rq, unsigned status, const char *detail) {
    fbuf text = {0};
    int r = fawn_utf8_sanitize(&text, detail, strlen(detail));
    if (r == 0)
        r = gw_respond_json(rq, status, json_pack("{s:s}", "detail", text.data ? text.data : ""));
    fbuf_free(&text);
    return r;
}

int gw_respond_coded(gw_request *rq, unsigned status, const char *code, const char *message) {
    return gw_respond_json(rq, status,
                           json_pack("{s:{s:s,s:s}}", "detail", "code", code, "message", message));
}

json_t *gw_user_json(const store_user *u) {
    char id[24], email[AUTH_EMAIL_MAX + 1];
    paths_user_dir_name(id, u->id);
    auth_user_email(email, u->username, u->id);
    return json_pack("{s:s,s:s,s:s,s:s,s:b}", "id", id, "email", email, "username", u->username,
                     "system_role", u->role, "needs_setup", 0);
}

void gw_iso_time(char out[40], int64_t ms) {
    time_t s = (time_t)(ms / 1000);
    struct tm tm;
    gmtime_r(&s, &tm);
    char date[24];
    strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out, 40, "%s.%03d000+00:00", date, (int)(ms % 1000));
}
