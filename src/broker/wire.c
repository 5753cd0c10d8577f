/* The broker's wire format (broker.h): what a sandbox sends is untrusted
 * input, parsed with every length checked against what is left. */
#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"

/* A CLI name on the wire: as broker.clis names them (policy.c checks the
 * configured ones the same way). */
#define BROKER_NAME_MAX 64

typedef struct reader {
    const uint8_t *p;
    size_t left;
} reader;

static bool take(reader *r, const uint8_t **at, size_t n) {
    if (n > r->left)
        return false;
    *at = r->p;
    r->p += n;
    r->left -= n;
    return true;
}

static bool take_u32(reader *r, uint32_t *v) {
    const uint8_t *b;
    if (!take(r, &b, 4))
        return false;
    *v = (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
    return true;
}

static bool take_u16(reader *r, uint16_t *v) {
    const uint8_t *b;
    if (!take(r, &b, 2))
        return false;
    *v = (uint16_t)(b[0] << 8 | b[1]);
    return true;
}

static void put_u32(uint8_t b[4], uint32_t v) {
    b[0] = (uint8_t)(v >> 24);
    b[1] = (uint8_t)(v >> 16);
    b[2] = (uint8_t)(v >> 8);
    b[3] = (uint8_t)v;
}

static int append_u32(fbuf *b, uint32_t v) {
    uint8_t w[4];
    put_u32(w, v);
    return fbuf_append(b, w, 4);
}

int broker_header_parse(size_t *body_len, const uint8_t hdr[BROKER_HEADER_LEN], size_t limit) {
    *body_len = 0;
    if (memcmp(hdr, BROKER_MAGIC, 4) != 0)
        return fawn_err(FAWN_EPROTO, "not a broker message");
    uint32_t n = (uint32_t)hdr[4] << 24 | (uint32_t)hdr[5] << 16 | (uint32_t)hdr[6] << 8 | hdr[7];
    if (n > limit)
        return fawn_err(FAWN_E2BIG, "the request is larger than %zu bytes", limit);
    *body_len = n;
    return 0;
}

static bool name_valid(const uint8_t *s, size_t n) {
    if (n == 0 || n > BROKER_NAME_MAX || s[0] == '.')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= 'A' && s[i] <= 'Z') ||
              (s[i] >= '0' && s[i] <= '9') || s[i] == '_' || s[i] == '-' || s[i] == '.'))
            return false;
    return true;
}

static char *dup_bytes(const uint8_t *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int parse_args(broker_request *out, reader *r) {
    uint32_t argc;
    if (!take_u32(r, &argc))
        return fawn_err(FAWN_EPROTO, "the request ends before its argument count");
    if (argc > BROKER_ARGS_MAX)
        return fawn_err(FAWN_EPROTO, "more than %d arguments", BROKER_ARGS_MAX);
    out->argv = calloc((size_t)argc + 1, sizeof *out->argv);
    if (!out->argv)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (uint32_t i = 0; i < argc; i++) {
        uint32_t n;
        const uint8_t *s;
        if (!take_u32(r, &n) || !take(r, &s, n))
            return fawn_err(FAWN_EPROTO, "argument %u runs past the request", i + 1);
        if (memchr(s, '\0', n))
            return fawn_err(FAWN_EPROTO, "argument %u holds a NUL byte", i + 1);
        if (!(out->argv[i] = dup_bytes(s, n)))
            return fawn_err(FAWN_ENOMEM, "out of memory");
        out->argc = i + 1;
    }
    return 0;
}

static int parse_request(broker_request *out, reader *r) {
    uint16_t name_len;
    const uint8_t *name;
    if (!take_u16(r, &name_len) || !take(r, &name, name_len))
        return fawn_err(FAWN_EPROTO, "the request ends within its command name");
    if (!name_valid(name, name_len))
        return fawn_err(FAWN_EPROTO, "the command name is not a valid name");
    if (!(out->name = dup_bytes(name, name_len)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int e = parse_args(out, r);
    if (e < 0)
        return e;
    uint32_t in_len;
    const uint8_t *in;
    if (!take_u32(r, &in_len) || !take(r, &in, in_len))
        return fawn_err(FAWN_EPROTO, "stdin runs past the request");
    if (r->left)
        return fawn_err(FAWN_EPROTO, "%zu bytes after the request", r->left);
    if (in_len && !(out->in = malloc(in_len)))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (in_len)
        memcpy(out->in, in, in_len);
    out->in_len = in_len;
    return 0;
}

int broker_request_parse(broker_request *out, const uint8_t *buf, size_t len) {
    memset(out, 0, sizeof *out);
    reader r = {.p = buf, .left = len};
    int e = parse_request(out, &r);
    if (e < 0)
        broker_request_clear(out);
    return e;
}

void broker_request_clear(broker_request *r) {
    for (size_t i = 0; r->argv && i < r->argc; i++)
        free(r->argv[i]);
    free(r->argv);
    free(r->name);
    free(r->in);
    memset(r, 0, sizeof *r);
}

/* Writes the header for a body of the bytes appended after header_at. */
static int finish(fbuf *out) {
    size_t body = out->len - BROKER_HEADER_LEN;
    if (body > UINT32_MAX)
        return fawn_err(FAWN_E2BIG, "the message is too large");
    put_u32((uint8_t *)out->data + 4, (uint32_t)body);
    return 0;
}

int broker_request_encode(fbuf *out, const char *name, char *const *argv, size_t argc,
                          const void *in, size_t in_len) {
    fbuf_free(out);
    size_t name_len = strlen(name);
    if (name_len > UINT16_MAX || argc > UINT32_MAX || in_len > UINT32_MAX)
        return fawn_err(FAWN_E2BIG, "the request is too large");
    uint8_t n16[2] = {(uint8_t)(name_len >> 8), (uint8_t)name_len};
    int e = fbuf_append(out, BROKER_MAGIC "\0\0\0\0", BROKER_HEADER_LEN);
    if (e == 0)
        e = fbuf_append(out, n16, 2);
    if (e == 0)
        e = fbuf_append(out, name, name_len);
    if (e == 0)
        e = append_u32(out, (uint32_t)argc);
    for (size_t i = 0; e == 0 && i < argc; i++) {
        size_t n = strlen(argv[i]);
        e = n > UINT32_MAX ? fawn_err(FAWN_E2BIG, "an argument is too large")
                           : append_u32(out, (uint32_t)n);
        if (e == 0)
            e = fbuf_append(out, argv[i], n);
    }
    if (e == 0)
        e = append_u32(out, (uint32_t)in_len);
    if (e == 0 && in_len)
        e = fbuf_append(out, in, in_len);
    return e < 0 ? e : finish(out);
}

int broker_reply_encode(fbuf *out, const broker_reply *r) {
    fbuf_free(out);
    uint8_t flags = (uint8_t)r->flags;
    int e = fbuf_append(out, BROKER_MAGIC "\0\0\0\0", BROKER_HEADER_LEN);
    if (e == 0)
        e = append_u32(out, (uint32_t)r->exit_code);
    if (e == 0)
        e = fbuf_append(out, &flags, 1);
    if (e == 0)
        e = append_u32(out, (uint32_t)r->out_len);
    if (e == 0 && r->out_len)
        e = fbuf_append(out, r->out, r->out_len);
    if (e == 0)
        e = append_u32(out, (uint32_t)r->err_len);
    if (e == 0 && r->err_len)
        e = fbuf_append(out, r->err, r->err_len);
    return e < 0 ? e : finish(out);
}

int broker_reply_parse(broker_reply *out, const uint8_t *buf, size_t len) {
    memset(out, 0, sizeof *out);
    reader r = {.p = buf, .left = len};
    uint32_t code, out_len, err_len;
    const uint8_t *flags, *o, *e;
    if (!take_u32(&r, &code) || !take(&r, &flags, 1) || !take_u32(&r, &out_len) ||
        !take(&r, &o, out_len) || !take_u32(&r, &err_len) || !take(&r, &e, err_len) || r.left)
        return fawn_err(FAWN_EPROTO, "malformed reply from the broker");
    *out = (broker_reply){.exit_code = (int32_t)code,
                          .flags = flags[0],
                          .out = (const char *)o,
                          .out_len = out_len,
                          .err = (const char *)e,
                          .err_len = err_len};
    return 0;
}
