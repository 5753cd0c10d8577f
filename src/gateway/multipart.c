#include "multipart.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/base.h"
#include "base/json.h"

#define MALFORMED "malformed multipart body: "

/* "\r\n--" in front of the boundary makes a delimiter. */
#define DELIM_PREFIX "\r\n--"
#define DELIM_PREFIX_LEN 4
/* Room for the stopping error's message, replayed by later calls. */
#define SAVED_ERRMSG_MAX 256

enum mp_state {
    ST_PREAMBLE,   /* discarding bytes until the first delimiter */
    ST_DELIM_END,  /* a delimiter just matched: "--", padding or CR follows */
    ST_CLOSE_DASH, /* read "-" after a boundary, the second "-" closes the body */
    ST_PADDING,    /* transport padding after a boundary */
    ST_DELIM_LF,   /* read CR after a boundary line, LF follows */
    ST_HEADERS,    /* buffering a part's header block */
    ST_BODY,       /* passing a part's content to part_data */
    ST_EPILOGUE,   /* the closing delimiter was read; the rest is ignored */
};

struct multipart_parser {
    multipart_callbacks cb;
    void *ctx;
    char delim[DELIM_PREFIX_LEN + MULTIPART_BOUNDARY_MAX + 1]; /* "\r\n--" boundary */
    size_t delim_len;
    enum mp_state state;
    size_t match;   /* bytes of delim matched so far (held back, equal to delim[0..match)) */
    size_t counted; /* bytes of preamble, padding or epilogue read in the current state */
    bool part_open; /* part_begin was called and part_end not yet */
    size_t parts;
    char hdr[MULTIPART_HEADER_BLOCK_MAX]; /* the current part's header block */
    size_t hdr_len;
    size_t line_start;
    size_t n_headers;
    /* Decoded name and filename: never longer than their raw form in hdr. */
    char vals[MULTIPART_HEADER_BLOCK_MAX + 2];
    int err; /* the code that stopped the parser, 0 while running */
    char errmsg[SAVED_ERRMSG_MAX];
};

/* ---- character classes and parameter syntax (RFC 7230 3.2.6, RFC 2046 5.1.1) ---- */

static bool char_is_ows(char c) { return c == ' ' || c == '\t'; }

static bool char_is_ctl(unsigned char c) { return c < 0x20 || c == 0x7f; }

static bool char_is_tchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

/* A byte of an unquoted parameter value: printable, no separator that would
 * end or open something else. */
static bool char_is_value(unsigned char c) {
    return !char_is_ctl(c) && c != ' ' && c != ';' && c != '"' && c != '\\';
}

static bool char_is_bchar(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("'()+_,-./:=? ", c) != NULL);
}

static bool boundary_valid(const char *b, size_t n) {
    if (n == 0 || n > MULTIPART_BOUNDARY_MAX || b[n - 1] == ' ')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!char_is_bchar((unsigned char)b[i]))
            return false;
    return true;
}

static const char *skip_ows(const char *s) {
    while (char_is_ows(*s))
        s++;
    return s;
}

static bool span_eq_nocase(const char *s, size_t n, const char *word) {
    return n == strlen(word) && strncasecmp(s, word, n) == 0;
}

/* One "name=value" parameter. value is raw: for a quoted-string, the bytes
 * between the quotes with backslash escapes still in. */
typedef struct mp_param {
    const char *name;
    size_t name_len;
    const char *value;
    size_t value_len;
    bool quoted;
} mp_param;

enum param_result { PARAM_END, PARAM_READ, PARAM_BAD };

/* Scans a quoted-string whose opening quote is at s; returns the position
 * of its closing quote, or NULL when it is unterminated or has a control
 * character other than HTAB. */
static const char *quoted_scan(const char *s) {
    for (s++; *s != '"'; s++) {
        if (*s == '\\')
            s++;
        if (*s == '\0' || (char_is_ctl((unsigned char)*s) && *s != '\t'))
            return NULL;
    }
    return s;
}

/* Reads the parameter after *cursor, which points past the previous
 * parameter or the media/disposition type. Empty parameters (";;", a
 * trailing ";") are skipped. */
static enum param_result param_next(mp_param *out, const char **cursor) {
    const char *s = skip_ows(*cursor);
    for (;;) {
        if (*s == '\0')
            return PARAM_END;
        if (*s != ';')
            return PARAM_BAD;
        s = skip_ows(s + 1);
        if (*s != ';' && *s != '\0')
            break;
    }
    out->name = s;
    while (char_is_tchar((unsigned char)*s))
        s++;
    out->name_len = (size_t)(s - out->name);
    if (out->name_len == 0 || *s != '=')
        return PARAM_BAD;
    s++;
    out->quoted = *s == '"';
    if (out->quoted) {
        const char *close = quoted_scan(s);
        if (!close)
            return PARAM_BAD;
        out->value = s + 1;
        out->value_len = (size_t)(close - out->value);
        s = close + 1;
    } else {
        out->value = s;
        while (char_is_value((unsigned char)*s))
            s++;
        out->value_len = (size_t)(s - out->value);
        if (out->value_len == 0)
            return PARAM_BAD;
    }
    *cursor = s;
    return PARAM_READ;
}

/* Copies a parameter's value into out (capacity outsz, NUL-terminated),
 * removing the backslashes of quoted-pairs. False when it does not fit. */
static bool param_value_copy(char *out, size_t outsz, size_t *out_len, const mp_param *pm) {
    size_t n = 0;
    for (size_t i = 0; i < pm->value_len; i++) {
        if (pm->quoted && pm->value[i] == '\\')
            i++;
        if (n + 1 >= outsz)
            return false;
        out[n++] = pm->value[i];
    }
    out[n] = '\0';
    *out_len = n;
    return true;
}

/* Returns the end of the leading type of a header value (before the first
 * ';'), with trailing blanks dropped; *start is set past leading blanks. */
static size_t value_type_span(const char **start, const char *value) {
    const char *s = skip_ows(value);
    const char *end = strchrnul(s, ';');
    while (end > s && char_is_ows(end[-1]))
        end--;
    *start = s;
    return (size_t)(end - s);
}

/* ---- Content-Type of the request ---- */

/* multipart_boundary's work; on failure out may hold part of a boundary. */
static int boundary_find(char out[MULTIPART_BOUNDARY_MAX + 1], const char *content_type) {
    const char *type;
    size_t type_len = content_type ? value_type_span(&type, content_type) : 0;
    if (!content_type || !span_eq_nocase(type, type_len, "multipart/form-data"))
        return fawn_err(FAWN_EUNSUP, "unsupported media type: expected multipart/form-data");
    const char *cursor = type + type_len;
    bool found = false;
    mp_param pm;
    enum param_result pr;
    while ((pr = param_next(&pm, &cursor)) == PARAM_READ) {
        if (!span_eq_nocase(pm.name, pm.name_len, "boundary"))
            continue;
        if (found)
            return fawn_err(FAWN_EINVAL, "malformed Content-Type: boundary given twice");
        size_t n;
        if (!param_value_copy(out, MULTIPART_BOUNDARY_MAX + 1, &n, &pm))
            return fawn_err(FAWN_EINVAL, "malformed Content-Type: boundary longer than %d bytes",
                            MULTIPART_BOUNDARY_MAX);
        if (!boundary_valid(out, n))
            return fawn_err(FAWN_EINVAL, "malformed Content-Type: empty boundary or one with "
                                         "characters RFC 2046 does not allow");
        found = true;
    }
    if (pr == PARAM_BAD)
        return fawn_err(FAWN_EINVAL, "malformed Content-Type: bad parameter syntax");
    if (!found)
        return fawn_err(FAWN_EINVAL, "malformed Content-Type: no boundary parameter");
    return 0;
}

int multipart_boundary(char out[MULTIPART_BOUNDARY_MAX + 1], const char *content_type) {
    int r = boundary_find(out, content_type);
    if (r < 0)
        out[0] = '\0'; /* never half a boundary */
    return r;
}

/* ---- parser lifetime and stopping ---- */

int multipart_new(multipart_parser **out, const char *boundary, const multipart_callbacks *cb,
                  void *ctx) {
    *out = NULL;
    size_t blen = strnlen(boundary, MULTIPART_BOUNDARY_MAX + 1);
    if (!boundary_valid(boundary, blen))
        return fawn_err(FAWN_EINVAL, "invalid multipart boundary");
    multipart_parser *p = calloc(1, sizeof *p);
    if (!p)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    p->cb = *cb;
    p->ctx = ctx;
    memcpy(p->delim, DELIM_PREFIX, DELIM_PREFIX_LEN);
    memcpy(p->delim + DELIM_PREFIX_LEN, boundary, blen);
    p->delim_len = DELIM_PREFIX_LEN + blen;
    p->state = ST_PREAMBLE;
    /* The first delimiter may open the body without a CRLF before it. */
    p->match = 2;
    *out = p;
    return 0;
}

void multipart_free(multipart_parser *p) { free(p); }

/* Records r as the code that stops p, with the current message. */
static int parser_stop(multipart_parser *p, int r) {
    p->err = r;
    snprintf(p->errmsg, sizeof p->errmsg, "%s", fawn_errmsg());
    return r;
}

static int parser_stopped(const multipart_parser *p) { return fawn_err(p->err, "%s", p->errmsg); }

/* ---- callbacks ---- */

static int emit_data(multipart_parser *p, const char *data, size_t len) {
    if (p->state == ST_PREAMBLE) {
        p->counted += len;
        if (p->counted > MULTIPART_PREAMBLE_MAX)
            return fawn_err(FAWN_EINVAL, MALFORMED "no delimiter in the first %d bytes",
                            MULTIPART_PREAMBLE_MAX);
        return 0;
    }
    if (len == 0 || !p->cb.part_data)
        return 0;
    int r = p->cb.part_data(p->ctx, data, len);
    return r < 0 ? r : 0;
}

static int emit_end(multipart_parser *p) {
    if (!p->part_open)
        return 0;
    p->part_open = false;
    int r = p->cb.part_end ? p->cb.part_end(p->ctx) : 0;
    return r < 0 ? r : 0;
}

/* ---- part headers ---- */

typedef struct part_headers {
    const char *disposition;
    const char *content_type;
} part_headers;

/* Splits one NUL-terminated header line into name and value (value blanks
 * trimmed in place) and keeps the two headers form-data uses. */
static int header_line_parse(part_headers *h, char *line) {
    if (char_is_ows(line[0]))
        return fawn_err(FAWN_EINVAL, MALFORMED "folded header lines are not supported");
    char *s = line;
    while (char_is_tchar((unsigned char)*s))
        s++;
    size_t name_len = (size_t)(s - line);
    if (name_len == 0 || *s != ':')
        return fawn_err(FAWN_EINVAL, MALFORMED "bad part header line");
    char *value = (char *)skip_ows(s + 1);
    char *end = value + strlen(value);
    while (end > value && char_is_ows(end[-1]))
        end--;
    *end = '\0';
    const char **slot = NULL;
    if (span_eq_nocase(line, name_len, "content-disposition"))
        slot = &h->disposition;
    else if (span_eq_nocase(line, name_len, "content-type"))
        slot = &h->content_type;
    if (!slot)
        return 0;
    if (*slot)
        return fawn_err(FAWN_EINVAL, MALFORMED "part header given twice");
    *slot = value;
    return 0;
}

/* Splits the buffered block (lines ending in CRLF, the blank line excluded)
 * into its headers. */
static int header_block_parse(part_headers *h, multipart_parser *p) {
    size_t end = p->hdr_len - 2;
    for (size_t pos = 0; pos < end;) {
        char *cr = memchr(p->hdr + pos, '\r', end - pos);
        *cr = '\0';
        int r = header_line_parse(h, p->hdr + pos);
        if (r < 0)
            return r;
        pos = (size_t)(cr - p->hdr) + 2;
    }
    return 0;
}

/* Decodes an RFC 5987 ext-value "UTF-8'lang'percent-encoded" in place. */
static int ext_value_decode(char *s, size_t *len) {
    char *q1 = memchr(s, '\'', *len);
    char *q2 = q1 ? memchr(q1 + 1, '\'', *len - (size_t)(q1 + 1 - s)) : NULL;
    if (!q2 || !span_eq_nocase(s, (size_t)(q1 - s), "utf-8"))
        return fawn_err(FAWN_EINVAL, MALFORMED "filename* must be UTF-8''percent-encoded");
    const char *in = q2 + 1, *in_end = s + *len;
    size_t n = 0;
    while (in < in_end) {
        if (*in != '%') {
            s[n++] = *in++;
            continue;
        }
        int hi = in_end - in < 3 ? -1 : fawn_hex_digit(in[1]);
        int lo = in_end - in < 3 ? -1 : fawn_hex_digit(in[2]);
        if (hi < 0 || lo < 0)
            return fawn_err(FAWN_EINVAL, MALFORMED "bad percent-escape in filename*");
        int byte = hi * 16 + lo;
        if (byte == 0)
            return fawn_err(FAWN_EINVAL, MALFORMED "NUL byte in filename*");
        s[n++] = (char)byte;
        in += 3;
    }
    s[n] = '\0';
    *len = n;
    if (!fawn_utf8_valid(s, n))
        return fawn_err(FAWN_EINVAL, MALFORMED "filename* is not valid UTF-8");
    return 0;
}

/* Copies a disposition parameter's value into vals at *used. */
static int vals_store(multipart_parser *p, size_t *used, const char **out, const mp_param *pm,
                      bool ext) {
    char *dst = p->vals + *used;
    size_t n;
    if (!param_value_copy(dst, sizeof p->vals - *used, &n, pm))
        return fawn_err(FAWN_E2BIG, "multipart part headers exceed %d bytes",
                        MULTIPART_HEADER_BLOCK_MAX);
    int r = ext ? ext_value_decode(dst, &n) : 0;
    if (r < 0)
        return r;
    *used += n + 1;
    *out = dst;
    return 0;
}

enum { DISP_NAME, DISP_FILENAME, DISP_FILENAME_EXT, DISP_PARAMS };
static const char *const disposition_params[DISP_PARAMS] = {"name", "filename", "filename*"};

/* Reads a Content-Disposition value into part->name and part->filename. */
static int disposition_parse(multipart_part *part, multipart_parser *p, const char *value) {
    const char *type;
    size_t type_len = value_type_span(&type, value);
    if (!span_eq_nocase(type, type_len, "form-data"))
        return fawn_err(FAWN_EINVAL, MALFORMED "part Content-Disposition is not form-data");
    const char *cursor = type + type_len;
    const char *found[DISP_PARAMS] = {NULL, NULL, NULL};
    size_t used = 0;
    mp_param pm;
    enum param_result pr;
    while ((pr = param_next(&pm, &cursor)) == PARAM_READ) {
        size_t k = 0;
        while (k < DISP_PARAMS && !span_eq_nocase(pm.name, pm.name_len, disposition_params[k]))
            k++;
        if (k == DISP_PARAMS)
            continue;
        if (found[k])
            return fawn_err(FAWN_EINVAL, MALFORMED "Content-Disposition parameter %s given twice",
                            disposition_params[k]);
        int r = vals_store(p, &used, &found[k], &pm, k == DISP_FILENAME_EXT);
        if (r < 0)
            return r;
    }
    if (pr == PARAM_BAD)
        return fawn_err(FAWN_EINVAL, MALFORMED "bad Content-Disposition parameter syntax");
    if (!found[DISP_NAME] || !found[DISP_NAME][0])
        return fawn_err(FAWN_EINVAL, MALFORMED "part without a name");
    part->name = found[DISP_NAME];
    part->filename = found[DISP_FILENAME_EXT] ? found[DISP_FILENAME_EXT] : found[DISP_FILENAME];
    return 0;
}

/* The header block is complete: parse it, announce the part, read content. */
static int part_start(multipart_parser *p) {
    part_headers h = {NULL, NULL};
    int r = header_block_parse(&h, p);
    if (r < 0)
        return r;
    if (!h.disposition)
        return fawn_err(FAWN_EINVAL, MALFORMED "part without Content-Disposition");
    multipart_part part = {.content_type = h.content_type};
    r = disposition_parse(&part, p, h.disposition);
    if (r < 0)
        return r;
    p->hdr_len = p->line_start = p->n_headers = 0;
    p->state = ST_BODY;
    p->match = 0;
    p->part_open = true;
    r = p->cb.part_begin ? p->cb.part_begin(p->ctx, &part) : 0;
    return r < 0 ? r : 0;
}

/* Checks and buffers one header byte; at the end of a line, counts it. */
static int header_byte(multipart_parser *p, unsigned char c) {
    char prev = p->hdr_len > p->line_start ? p->hdr[p->hdr_len - 1] : '\0';
    if (c == '\0')
        return fawn_err(FAWN_EINVAL, MALFORMED "NUL byte in part headers");
    if ((prev == '\r') != (c == '\n'))
        return fawn_err(FAWN_EINVAL, MALFORMED "part header line not ended by CRLF");
    if (char_is_ctl(c) && c != '\t' && c != '\r' && c != '\n')
        return fawn_err(FAWN_EINVAL, MALFORMED "control character in part headers");
    if (p->hdr_len == sizeof p->hdr)
        return fawn_err(FAWN_E2BIG, "multipart part headers exceed %d bytes",
                        MULTIPART_HEADER_BLOCK_MAX);
    p->hdr[p->hdr_len++] = (char)c;
    if (c == '\n' && p->hdr_len - p->line_start > 2) {
        if (++p->n_headers > MULTIPART_HEADERS_MAX)
            return fawn_err(FAWN_E2BIG, "multipart part has more than %d headers",
                            MULTIPART_HEADERS_MAX);
        p->line_start = p->hdr_len;
    }
    return 0;
}

static int headers_consume(multipart_parser *p, const char *data, size_t len, size_t *used) {
    for (size_t i = 0; i < len; i++) {
        int r = header_byte(p, (unsigned char)data[i]);
        if (r < 0)
            return r;
        if (p->hdr_len - p->line_start == 2 && data[i] == '\n') {
            *used = i + 1;
            return part_start(p);
        }
    }
    *used = len;
    return 0;
}

/* ---- content and delimiters ---- */

/* Passes content (or preamble) bytes on until a delimiter completes or the
 * chunk ends. Bytes that match a prefix of the delimiter are held back (as
 * p->match) until a mismatch shows they were content. A mismatch can only
 * restart a match at a CR, because CR occurs in the delimiter only at its
 * start, so no other backtracking is needed. */
static int content_consume(multipart_parser *p, const char *data, size_t len, size_t *used) {
    size_t i = 0;
    while (i < len) {
        if (p->match == 0) {
            const char *cr = memchr(data + i, '\r', len - i);
            size_t run = cr ? (size_t)(cr - (data + i)) : len - i;
            int r = emit_data(p, data + i, run);
            if (r < 0)
                return r;
            i += run + (cr != NULL);
            p->match = cr != NULL;
            continue;
        }
        if (data[i] == p->delim[p->match]) {
            i++;
            if (++p->match == p->delim_len) {
                p->match = 0;
                p->state = ST_DELIM_END;
                break;
            }
            continue;
        }
        int r = emit_data(p, p->delim, p->match);
        if (r < 0)
            return r;
        p->match = 0;
    }
    *used = i;
    return 0;
}

/* A boundary line ended in CRLF: the previous part (if any) ends, a new one
 * begins with its headers. */
static int delimiter_line_done(multipart_parser *p) {
    int r = emit_end(p);
    if (r < 0)
        return r;
    if (++p->parts > MULTIPART_PARTS_MAX)
        return fawn_err(FAWN_E2BIG, "multipart body has more than %d parts", MULTIPART_PARTS_MAX);
    p->state = ST_HEADERS;
    return 0;
}

/* One byte of what follows a boundary: "--", transport padding, CRLF. */
static int delimiter_byte(multipart_parser *p, char c) {
    switch (p->state) {
    case ST_DELIM_END:
    case ST_PADDING:
        if (c == '\r') {
            p->state = ST_DELIM_LF;
            return 0;
        }
        if (c == '-' && p->state == ST_DELIM_END) {
            p->state = ST_CLOSE_DASH;
            return 0;
        }
        if (c == '\n')
            return fawn_err(FAWN_EINVAL, MALFORMED "boundary line not ended by CRLF");
        if (!char_is_ows(c))
            return fawn_err(FAWN_EINVAL, MALFORMED "unexpected bytes after a boundary");
        if (p->state == ST_DELIM_END)
            p->counted = 0;
        p->state = ST_PADDING;
        if (++p->counted > MULTIPART_PADDING_MAX)
            return fawn_err(FAWN_EINVAL, MALFORMED "more than %d bytes of padding after a boundary",
                            MULTIPART_PADDING_MAX);
        return 0;
    case ST_CLOSE_DASH:
        if (c != '-')
            return fawn_err(FAWN_EINVAL, MALFORMED "unexpected bytes after a boundary");
        p->state = ST_EPILOGUE;
        p->counted = 0;
        return emit_end(p);
    default: /* ST_DELIM_LF */
        if (c != '\n')
            return fawn_err(FAWN_EINVAL, MALFORMED "boundary line not ended by CRLF");
        return delimiter_line_done(p);
    }
}

static int epilogue_consume(multipart_parser *p, size_t len) {
    p->counted += len;
    if (p->counted > MULTIPART_EPILOGUE_MAX)
        return fawn_err(FAWN_EINVAL, MALFORMED "more than %d bytes after the closing delimiter",
                        MULTIPART_EPILOGUE_MAX);
    return 0;
}

/* Consumes at least one byte of data (len > 0) in the current state. */
static int parser_step(multipart_parser *p, const char *data, size_t len, size_t *used) {
    switch (p->state) {
    case ST_PREAMBLE:
    case ST_BODY: return content_consume(p, data, len, used);
    case ST_HEADERS: return headers_consume(p, data, len, used);
    case ST_EPILOGUE: *used = len; return epilogue_consume(p, len);
    default: *used = 1; return delimiter_byte(p, data[0]);
    }
}

int multipart_feed(multipart_parser *p, const char *data, size_t len) {
    if (p->err)
        return parser_stopped(p);
    size_t pos = 0;
    while (pos < len) {
        size_t used = 0;
        int r = parser_step(p, data + pos, len - pos, &used);
        if (r < 0)
            return parser_stop(p, r);
        pos += used;
    }
    return 0;
}

int multipart_finish(multipart_parser *p) {
    if (p->err)
        return parser_stopped(p);
    if (p->state != ST_EPILOGUE)
        return parser_stop(p, fawn_err(FAWN_EINVAL, MALFORMED "missing closing delimiter"));
    return 0;
}
