/* Finding an embedded asset, and reading the two request headers that
 * decide how it is sent: Accept-Encoding and If-None-Match. Both parsers
 * walk the value once, left to right, and never write. */
#include <string.h>
#include <strings.h>

#include "web/web.h"

const web_asset *web_asset_find(const char *name) {
    for (size_t i = 0; name && i < web_assets_count; i++)
        if (strcmp(web_assets[i].name, name) == 0)
            return &web_assets[i];
    return NULL;
}

static bool is_ows(char c) { return c == ' ' || c == '\t'; }

/* [*s, *e) without the blanks around it. */
static void trim(const char **s, const char **e) {
    while (*s < *e && is_ows(**s))
        (*s)++;
    while (*e > *s && is_ows((*e)[-1]))
        (*e)--;
}

static bool token_is(const char *s, const char *e, const char *word) {
    size_t n = strlen(word);
    return (size_t)(e - s) == n && strncasecmp(s, word, n) == 0;
}

/* Whether [s, e) is a qvalue above zero: "0" ["." up to 3 digits] not all
 * zero, or "1" ["." up to 3 zeros]. */
static bool qvalue_positive(const char *s, const char *e) {
    if (s == e || (*s != '0' && *s != '1'))
        return false;
    bool one = *s == '1', positive = one;
    const char *p = s + 1;
    if (p < e && *p == '.') {
        p++;
        for (int n = 0; p < e && n < 3 && *p >= '0' && *p <= '9'; n++, p++) {
            if (one && *p != '0')
                return false;
            positive |= *p != '0';
        }
    }
    return p == e && positive;
}

/* Whether the parameters [s, e) of one Accept-Encoding element (each after
 * a ';') leave it acceptable: no q, or a q above zero. */
static bool element_acceptable(const char *s, const char *e) {
    while (s < e) {
        const char *end = memchr(s, ';', (size_t)(e - s));
        end = end ? end : e;
        const char *a = s, *b = end;
        trim(&a, &b);
        if (b - a >= 2 && (a[0] == 'q' || a[0] == 'Q') && a[1] == '=')
            return qvalue_positive(a + 2, b);
        s = end < e ? end + 1 : e;
    }
    return true;
}

bool web_accepts_gzip(const char *accept_encoding) {
    if (!accept_encoding)
        return false;
    int gzip = -1, any = -1; /* -1: not named; else whether acceptable */
    const char *s = accept_encoding, *end = s + strlen(s);
    while (s < end) {
        const char *e = memchr(s, ',', (size_t)(end - s));
        e = e ? e : end;
        const char *semi = memchr(s, ';', (size_t)(e - s));
        const char *c = s, *ce = semi ? semi : e;
        trim(&c, &ce);
        bool ok = element_acceptable(semi ? semi + 1 : e, e);
        if (token_is(c, ce, "gzip") || token_is(c, ce, "x-gzip"))
            gzip = gzip == 1 ? 1 : ok;
        else if (token_is(c, ce, "*"))
            any = any == 1 ? 1 : ok;
        s = e < end ? e + 1 : end;
    }
    return gzip >= 0 ? gzip == 1 : any == 1;
}

bool web_etag_match(const char *if_none_match, const char *etag) {
    if (!if_none_match || !etag)
        return false;
    size_t want = strlen(etag);
    const char *p = if_none_match;
    for (;;) {
        while (is_ows(*p) || *p == ',')
            p++;
        if (*p == '\0')
            return false;
        if (*p == '*')
            return true;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        if (*p != '"')
            return false;
        const char *close = strchr(p + 1, '"');
        if (!close)
            return false;
        size_t n = (size_t)(close - p) + 1;
        if (n == want && memcmp(p, etag, n) == 0)
            return true;
        p = close + 1;
    }
}
