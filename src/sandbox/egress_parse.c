/* What a sandbox sends its egress proxy, parsed (see egress.h): request
 * heads and TLS ClientHellos. Untrusted input: every read is bounded by
 * the bytes at hand and by EGRESS_HEAD_MAX. */
#include <arpa/inet.h>
#include <ctype.h>
#include <string.h>
#include <strings.h>

#include "sandbox/egress.h"

/* ---- host names and authorities ---- */

/* A host as a request may name it: an address literal (IPv6 in brackets
 * in an authority, passed here without them) or a DNS name of letters,
 * digits, hyphens and dots; stored lowercase. */
static bool host_take(char out[NET_HOST_MAX + 1], bool *literal, const char *s, size_t n, bool v6) {
    if (n == 0 || n > NET_HOST_MAX)
        return false;
    memcpy(out, s, n);
    out[n] = '\0';
    unsigned char addr[16];
    *literal = inet_pton(v6 ? AF_INET6 : AF_INET, out, addr) == 1;
    if (v6 || *literal)
        return *literal;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)out[i];
        if (!isalnum(c) && c != '-' && c != '.')
            return false;
        out[i] = (char)tolower(c);
    }
    return true;
}

static bool port_take(uint16_t *out, const char *s, size_t n) {
    unsigned v = 0;
    if (n == 0 || n > 5)
        return false;
    for (size_t i = 0; i < n; i++) {
        if (!isdigit((unsigned char)s[i]))
            return false;
        v = v * 10 + (unsigned)(s[i] - '0');
    }
    if (v == 0 || v > 65535)
        return false;
    *out = (uint16_t)v;
    return true;
}

/* "host", "host:port", "[v6]" or "[v6]:port" (port required when
 * need_port; else def). */
static bool authority_take(egress_request *r, const char *s, size_t n, bool need_port,
                           uint16_t def) {
    const char *host = s, *colon = NULL;
    size_t host_n;
    bool v6 = n > 0 && s[0] == '[';
    if (v6) {
        const char *close = memchr(s, ']', n);
        if (!close)
            return false;
        host = s + 1;
        host_n = (size_t)(close - host);
        if (close + 1 < s + n) {
            if (close[1] != ':')
                return false;
            colon = close + 1;
        }
    } else {
        colon = memchr(s, ':', n);
        host_n = colon ? (size_t)(colon - s) : n;
    }
    if (!host_take(r->host, &r->literal, host, host_n, v6))
        return false;
    if (!colon)
        r->port = def;
    else if (!port_take(&r->port, colon + 1, (size_t)(s + n - colon - 1)))
        return false;
    return colon || !need_port;
}

/* ---- the request head ---- */

typedef struct line {
    const char *s;
    size_t n;
} line;

/* Hop-by-hop and proxy headers, never forwarded (Host and Connection are
 * written anew). */
static const char *const dropped_headers[] = {
    "host",    "connection",          "proxy-connection",   "keep-alive",
    "te",      "proxy-authorization", "proxy-authenticate", "upgrade",
    "trailer",
};

static bool header_is(const line *h, size_t name_n, const char *name) {
    return strlen(name) == name_n && strncasecmp(h->s, name, name_n) == 0;
}

static bool token_char(unsigned char c) {
    return isalnum(c) || (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* The value of header h (after "Name:"), without surrounding blanks. */
static line header_value(const line *h, size_t name_n) {
    line v = {h->s + name_n + 1, h->n - name_n - 1};
    while (v.n && (v.s[0] == ' ' || v.s[0] == '\t'))
        v.s++, v.n--;
    while (v.n && (v.s[v.n - 1] == ' ' || v.s[v.n - 1] == '\t'))
        v.n--;
    return v;
}

static bool decimal_take(uint64_t *out, const line *v) {
    uint64_t n = 0;
    if (v->n == 0 || v->n > 15)
        return false;
    for (size_t i = 0; i < v->n; i++) {
        if (!isdigit((unsigned char)v->s[i]))
            return false;
        n = n * 10 + (uint64_t)(v->s[i] - '0');
    }
    *out = n;
    return true;
}

/* Whether the Host header value names the request's host and port. */
static bool host_matches(const egress_request *r, const line *v) {
    egress_request h = {0};
    return authority_take(&h, v->s, v->n, false, 80) && h.port == r->port &&
           strcmp(h.host, r->host) == 0;
}

/* Checks one header line of a plain request and appends it to fwd unless
 * it is one of dropped_headers. */
static int header_take(egress_request *r, fbuf *fwd, const line *h, bool *seen_host,
                       bool *seen_length) {
    size_t name_n = 0;
    while (name_n < h->n && token_char((unsigned char)h->s[name_n]))
        name_n++;
    if (name_n == 0 || name_n == h->n || h->s[name_n] != ':')
        return fawn_err(FAWN_EINVAL, "a malformed header line");
    line v = header_value(h, name_n);
    for (size_t i = 0; i < v.n; i++)
        if ((unsigned char)v.s[i] < 0x20 && v.s[i] != '\t')
            return fawn_err(FAWN_EINVAL, "a control character in a header");
    if (header_is(h, name_n, "transfer-encoding"))
        return fawn_err(FAWN_EINVAL, "Transfer-Encoding in a request is not forwarded");
    if (header_is(h, name_n, "host")) {
        if (*seen_host || !host_matches(r, &v))
            return fawn_err(FAWN_EINVAL, "the Host header must name the URL's host once");
        *seen_host = true;
    }
    if (header_is(h, name_n, "content-length")) {
        if (*seen_length || !decimal_take(&r->content_length, &v))
            return fawn_err(FAWN_EINVAL, "a bad or repeated Content-Length");
        *seen_length = true;
    }
    for (size_t i = 0; i < ARRAY_LEN(dropped_headers); i++)
        if (header_is(h, name_n, dropped_headers[i]))
            return 0;
    int e = fbuf_append(fwd, h->s, h->n);
    return e == 0 ? fbuf_append(fwd, "\r\n", 2) : e;
}

/* The next CRLF-ended line of the head at *at (before end). */
static bool line_next(line *out, const char **at, const char *end) {
    const char *s = *at;
    *out = (line){s, 0};
    for (const char *p = s; p + 1 < end; p++) {
        if (p[0] == '\r' && p[1] == '\n') {
            *out = (line){s, (size_t)(p - s)};
            *at = p + 2;
            return true;
        }
        if (p[0] == '\0' || p[0] == '\n' || p[0] == '\r')
            return false;
    }
    return false;
}

/* "http://authority[/path]" into r and the origin-form target. */
static int absolute_target(egress_request *r, line *path, const line *target) {
    static const char scheme[] = "http://";
    size_t sn = sizeof scheme - 1;
    *path = (line){"", 0};
    if (target->n <= sn || strncasecmp(target->s, scheme, sn) != 0)
        return fawn_err(FAWN_EINVAL, "only CONNECT and absolute http:// requests are proxied");
    const char *auth = target->s + sn, *end = target->s + target->n;
    const char *stop = auth;
    while (stop < end && *stop != '/' && *stop != '?' && *stop != '#')
        stop++;
    if (memchr(auth, '@', (size_t)(stop - auth)))
        return fawn_err(FAWN_EINVAL, "user information in a URL is not proxied");
    if (!authority_take(r, auth, (size_t)(stop - auth), false, 80))
        return fawn_err(FAWN_EINVAL, "a bad host or port in the URL");
    *path = (line){stop, (size_t)(end - stop)};
    for (size_t i = 0; i < path->n; i++)
        if ((unsigned char)path->s[i] <= 0x20 || path->s[i] == '#' || path->s[i] == 0x7f)
            return fawn_err(FAWN_EINVAL, "a bad character in the URL");
    return 0;
}

/* The request line: METHOD SP target SP HTTP/1.x. */
static int request_line(egress_request *r, line *method, line *target, const line *l) {
    *method = *target = (line){"", 0};
    const char *sp1 = memchr(l->s, ' ', l->n);
    const char *sp2 = sp1 ? memchr(sp1 + 1, ' ', (size_t)(l->s + l->n - sp1 - 1)) : NULL;
    if (!sp2 || sp1 == l->s || sp2 == sp1 + 1)
        return fawn_err(FAWN_EINVAL, "a malformed request line");
    *method = (line){l->s, (size_t)(sp1 - l->s)};
    *target = (line){sp1 + 1, (size_t)(sp2 - sp1 - 1)};
    line version = {sp2 + 1, (size_t)(l->s + l->n - sp2 - 1)};
    if (version.n != 8 || strncmp(version.s, "HTTP/1.", 7) != 0 ||
        (version.s[7] != '0' && version.s[7] != '1'))
        return fawn_err(FAWN_EINVAL, "only HTTP/1.0 and HTTP/1.1 are proxied");
    for (size_t i = 0; i < method->n; i++)
        if (!isupper((unsigned char)method->s[i]) || i >= 16)
            return fawn_err(FAWN_EINVAL, "a malformed method");
    r->connect = method->n == 7 && memcmp(method->s, "CONNECT", 7) == 0;
    if (r->connect && !authority_take(r, target->s, target->n, true, 0))
        return fawn_err(FAWN_EINVAL, "CONNECT needs host:port");
    return 0;
}

static int plain_head(egress_request *r, const line *method, const line *target, const char *at,
                      const char *end) {
    line path, h;
    int e = absolute_target(r, &path, target);
    fbuf fwd = {.limit = EGRESS_HEAD_MAX + 256};
    if (e == 0)
        e = fbuf_printf(&fwd, "%.*s %s%.*s HTTP/1.1\r\n", (int)method->n, method->s,
                        path.n && path.s[0] == '/' ? "" : "/", (int)path.n, path.s);
    bool seen_host = false, seen_length = false;
    size_t count = 0;
    while (e == 0) {
        if (!line_next(&h, &at, end))
            e = fawn_err(FAWN_EINVAL, "a malformed header line");
        else if (h.n == 0)
            break;
        else if (++count > EGRESS_HEADERS_MAX)
            e = fawn_err(FAWN_EINVAL, "more than %d headers", EGRESS_HEADERS_MAX);
        else
            e = header_take(r, &fwd, &h, &seen_host, &seen_length);
    }
    const char *colon = strchr(r->host, ':');
    if (e == 0)
        e = fbuf_printf(&fwd, "Host: %s%s%s:%u\r\nConnection: close\r\n\r\n", colon ? "[" : "",
                        r->host, colon ? "]" : "", (unsigned)r->port);
    if (e < 0) {
        fbuf_free(&fwd);
        return e == FAWN_E2BIG ? fawn_err(FAWN_EINVAL, "the request head is too large") : e;
    }
    r->forward_len = fwd.len;
    r->forward = fbuf_steal(&fwd);
    return 0;
}

/* Headers of a CONNECT are read and dropped (within the same bounds). */
static int connect_head(const char *at, const char *end) {
    line h;
    size_t count = 0;
    for (;;) {
        if (!line_next(&h, &at, end))
            return fawn_err(FAWN_EINVAL, "a malformed header line");
        if (h.n == 0)
            return 0;
        if (++count > EGRESS_HEADERS_MAX)
            return fawn_err(FAWN_EINVAL, "more than %d headers", EGRESS_HEADERS_MAX);
    }
}

int egress_request_parse(egress_request *out, const char *buf, size_t len) {
    memset(out, 0, sizeof *out);
    size_t n = len < EGRESS_HEAD_MAX ? len : EGRESS_HEAD_MAX;
    const char *end = memmem(buf, n, "\r\n\r\n", 4);
    if (!end)
        return len >= EGRESS_HEAD_MAX
                   ? fawn_err(FAWN_EINVAL, "a request head over %d bytes", EGRESS_HEAD_MAX)
                   : fawn_err(FAWN_E2BIG, "the request head is incomplete");
    end += 4;
    const char *at = buf;
    line first, method, target;
    if (!line_next(&first, &at, end))
        return fawn_err(FAWN_EINVAL, "a malformed request line");
    int e = request_line(out, &method, &target, &first);
    if (e == 0)
        e = out->connect ? connect_head(at, end) : plain_head(out, &method, &target, at, end);
    if (e < 0) {
        egress_request_clear(out);
        return e;
    }
    out->head_len = (size_t)(end - buf);
    return 0;
}

void egress_request_clear(egress_request *r) {
    free(r->forward);
    memset(r, 0, sizeof *r);
}

/* ---- the TLS ClientHello ---- */

/* A bounded reader over untrusted bytes. */
typedef struct reader {
    const uint8_t *p;
    size_t n;
    bool bad;
} reader;

static size_t take_uint(reader *r, size_t width) {
    size_t v = 0;
    if (r->bad || r->n < width) {
        r->bad = true;
        return 0;
    }
    for (size_t i = 0; i < width; i++)
        v = v << 8 | r->p[i];
    r->p += width;
    r->n -= width;
    return v;
}

/* The next n bytes as a reader of their own. */
static reader take_sub(reader *r, size_t n) {
    reader sub = {.p = r->p, .n = n, .bad = r->bad || r->n < n};
    if (sub.bad) {
        r->bad = true;
        return sub;
    }
    r->p += n;
    r->n -= n;
    return sub;
}

/* A server_name extension's body: one host_name entry. */
static int sni_take(char sni[NET_HOST_MAX + 1], reader ext) {
    reader list = take_sub(&ext, take_uint(&ext, 2));
    bool found = false;
    while (!list.bad && list.n > 0) {
        size_t type = take_uint(&list, 1);
        reader name = take_sub(&list, take_uint(&list, 2));
        if (list.bad || type != 0)
            continue;
        bool literal;
        if (found || !host_take(sni, &literal, (const char *)name.p, name.n, false) || literal)
            return fawn_err(FAWN_EINVAL, "a bad or repeated server name in the ClientHello");
        found = true;
    }
    if (list.bad || ext.bad || ext.n || !found)
        return fawn_err(FAWN_EINVAL, "a malformed server_name extension");
    return 0;
}

static int hello_take(char sni[NET_HOST_MAX + 1], reader hello) {
    take_uint(&hello, 2);                   /* legacy version */
    take_sub(&hello, 32);                   /* random */
    take_sub(&hello, take_uint(&hello, 1)); /* session id */
    take_sub(&hello, take_uint(&hello, 2)); /* cipher suites */
    take_sub(&hello, take_uint(&hello, 1)); /* compression methods */
    if (hello.bad)
        return fawn_err(FAWN_EINVAL, "a truncated ClientHello");
    if (hello.n == 0)
        return 0; /* no extensions, so no server name */
    reader exts = take_sub(&hello, take_uint(&hello, 2));
    bool seen = false;
    while (!exts.bad && exts.n > 0) {
        size_t type = take_uint(&exts, 2);
        reader ext = take_sub(&exts, take_uint(&exts, 2));
        if (exts.bad || type != 0)
            continue;
        if (seen)
            return fawn_err(FAWN_EINVAL, "two server_name extensions");
        seen = true;
        int e = sni_take(sni, ext);
        if (e < 0)
            return e;
    }
    return exts.bad || hello.bad || hello.n ? fawn_err(FAWN_EINVAL, "malformed extensions") : 0;
}

/* TLS record: content type 22 (handshake), version 3.x, length; handshake
 * type 1 (ClientHello) with a 3-byte length. The largest record is 16 KiB. */
#define TLS_RECORD_HEAD 5
#define TLS_RECORD_MAX 16384

int egress_tls_sni(char sni[NET_HOST_MAX + 1], const uint8_t *buf, size_t len) {
    sni[0] = '\0';
    if (len >= 1 && buf[0] != 22)
        return fawn_err(FAWN_EINVAL, "not a TLS handshake");
    if (len >= 2 && buf[1] != 3)
        return fawn_err(FAWN_EINVAL, "not a TLS record");
    if (len < TLS_RECORD_HEAD)
        return fawn_err(FAWN_E2BIG, "the ClientHello is incomplete");
    size_t rlen = (size_t)buf[3] << 8 | buf[4];
    if (rlen > TLS_RECORD_MAX || TLS_RECORD_HEAD + rlen > EGRESS_HEAD_MAX)
        return fawn_err(FAWN_EINVAL, "a ClientHello record over %d bytes", EGRESS_HEAD_MAX);
    if (len < TLS_RECORD_HEAD + rlen)
        return fawn_err(FAWN_E2BIG, "the ClientHello is incomplete");
    reader rec = {.p = buf + TLS_RECORD_HEAD, .n = rlen};
    size_t type = take_uint(&rec, 1), hlen = take_uint(&rec, 3);
    if (rec.bad || type != 1)
        return fawn_err(FAWN_EINVAL, "not a ClientHello");
    if (hlen != rec.n)
        return fawn_err(FAWN_EINVAL, "a ClientHello that is not one whole record");
    int e = hello_take(sni, rec);
    if (e < 0)
        sni[0] = '\0';
    return e;
}

/* ---- the decision on the target ---- */

bool egress_target_listed(const egress_policy *policy, const char *host, bool literal,
                          uint16_t port) {
    if (!literal)
        return net_host_listed(&policy->allow, host, port);
    struct sockaddr_storage ss = {0};
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, host, &v4->sin_addr) == 1) {
        v4->sin_family = AF_INET;
        v4->sin_port = htons(port);
    } else if (inet_pton(AF_INET6, host, &v6->sin6_addr) == 1) {
        v6->sin6_family = AF_INET6;
        v6->sin6_port = htons(port);
    } else {
        return false;
    }
    return net_range_listed(&policy->allow, (struct sockaddr *)&ss);
}
