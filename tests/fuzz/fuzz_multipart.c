/* libFuzzer target for the multipart/form-data parser.
 *
 * Input framing: the bytes before the first '\n' are the request's
 * Content-Type value (the seeds use "multipart/form-data; boundary=..."),
 * everything after that '\n' is the body. Without a '\n' the whole input is
 * the Content-Type and the body is empty.
 *
 * The body is parsed three times: whole, in chunks whose sizes come from a
 * generator seeded with a hash of the input (each chunk in an exact-size heap
 * buffer, so a read past a chunk is caught by AddressSanitizer), and one byte
 * at a time. Besides memory errors, it checks that:
 *   - the callbacks nest (begin, data..., end; data never outside a part),
 *     every data slice is non-empty and the content handed on never exceeds
 *     the body's length;
 *   - all three feeds give the same callbacks with the same bytes (a hash of
 *     the event sequence) and the same result;
 *   - (whole feed) a part's content never contains its delimiter
 *     "\r\n--boundary", and content followed by the delimiter occurs in the
 *     body, in order, part after part;
 *   - a stopped parser keeps returning the code that stopped it, a callback's
 *     code comes back unchanged, and a successful parse ends every part;
 *   - a boundary that multipart_boundary accepts is valid and survives being
 *     quoted and parsed again.
 * For one input in eight (chosen by the hash), a callback fails at a part
 * chosen by the hash, to exercise the stopping path. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gateway/multipart.h"

/* Bodies past a few delimiters and headers add nothing but time. */
#define FUZZ_INPUT_MAX (1 << 17)
/* The code the injected callback failure returns; the parser never makes it. */
#define FUZZ_CALLBACK_CODE FAWN_EPERM
#define FNV_OFFSET 0xcbf29ce484222325ULL
#define FNV_PRIME 0x100000001b3ULL

static void check(int ok) {
    if (!ok)
        abort();
}

static uint64_t fnv_add(uint64_t h, const void *data, size_t len) {
    const unsigned char *s = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ s[i]) * FNV_PRIME;
    return h;
}

static uint64_t fnv_add_u64(uint64_t h, uint64_t v) { return fnv_add(h, &v, sizeof v); }

static uint64_t fnv_add_str(uint64_t h, const char *s) {
    if (!s)
        return fnv_add(h, "N", 1);
    size_t n = strlen(s);
    return fnv_add(fnv_add_u64(fnv_add(h, "S", 1), n), s, n);
}

typedef struct observer {
    uint64_t hash; /* of the event sequence */
    size_t begins, ends;
    size_t part_bytes;  /* content of the current part */
    size_t total_bytes; /* content of all parts */
    const char *body;
    size_t body_len;
    const char *delim; /* "\r\n--" boundary, for the content checks, or NULL */
    fbuf content;      /* the current part's content, when delim is set */
    size_t cursor;     /* where the next part's content + delimiter is searched from */
    long fail_begin;   /* index of the part_begin that fails, -1 for none */
    long fail_end;     /* index of the part_end that fails, -1 for none */
    bool failed;       /* a callback returned FUZZ_CALLBACK_CODE */
} observer;

static int obs_begin(void *ctx, const multipart_part *part) {
    observer *o = ctx;
    check(o->begins == o->ends && o->begins < MULTIPART_PARTS_MAX);
    check(part->name && part->name[0] && strlen(part->name) < MULTIPART_HEADER_BLOCK_MAX);
    check(!part->filename || strlen(part->filename) < MULTIPART_HEADER_BLOCK_MAX);
    check(!part->content_type || strlen(part->content_type) < MULTIPART_HEADER_BLOCK_MAX);
    o->hash = fnv_add(o->hash, "B", 1);
    o->hash = fnv_add_str(o->hash, part->name);
    o->hash = fnv_add_str(o->hash, part->filename);
    o->hash = fnv_add_str(o->hash, part->content_type);
    o->part_bytes = 0;
    o->content.len = 0;
    if ((long)o->begins++ == o->fail_begin) {
        o->failed = true;
        return fawn_err(FUZZ_CALLBACK_CODE, "begin callback stop");
    }
    return 0;
}

static int obs_data(void *ctx, const char *data, size_t len) {
    observer *o = ctx;
    check(o->begins == o->ends + 1 && len > 0);
    o->part_bytes += len;
    o->total_bytes += len;
    check(o->total_bytes <= o->body_len);
    o->hash = fnv_add(o->hash, data, len);
    if (o->delim)
        check(fbuf_append(&o->content, data, len) == 0);
    return 0;
}

/* The content just ended holds no delimiter and, with its delimiter, comes
 * next in the body. */
static void check_content(observer *o) {
    size_t dlen = strlen(o->delim);
    check(!o->content.len || !memmem(o->content.data, o->content.len, o->delim, dlen));
    check(fbuf_append(&o->content, o->delim, dlen) == 0);
    const char *at = memmem(o->body + o->cursor, o->body_len - o->cursor, o->content.data,
                            o->content.len);
    check(at != NULL);
    o->cursor = (size_t)(at - o->body) + o->content.len;
}

static int obs_end(void *ctx) {
    observer *o = ctx;
    check(o->begins == o->ends + 1);
    o->hash = fnv_add_u64(fnv_add(o->hash, "E", 1), o->part_bytes);
    if (o->delim)
        check_content(o);
    if ((long)o->ends++ == o->fail_end) {
        o->failed = true;
        return fawn_err(FUZZ_CALLBACK_CODE, "end callback stop");
    }
    return 0;
}

static const multipart_callbacks obs_callbacks = {obs_begin, obs_data, obs_end};

/* Chunk sizes: xorshift64 seeded with the input's hash, scaled by a range
 * picked from the same state so that 1-byte, delimiter-sized and large
 * chunks all occur. */
static size_t chunk_next(uint64_t *state) {
    static const size_t ranges[] = {1, 3, 8, 80, 4096};
    uint64_t x = *state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *state = x;
    return 1 + (size_t)((x >> 8) % ranges[x % (sizeof ranges / sizeof ranges[0])]);
}

enum feed_mode { FEED_WHOLE, FEED_CHUNKS, FEED_BYTES };

/* Feeds body by mode; returns the first failure or multipart_finish's result
 * and checks that a stopped parser stays stopped. */
static int run(observer *o, const char *boundary, const char *body, size_t len, enum feed_mode mode,
               uint64_t seed) {
    multipart_parser *p = NULL;
    check(multipart_new(&p, boundary, &obs_callbacks, o) == 0);
    int r = 0;
    for (size_t pos = 0; pos < len && r == 0;) {
        size_t n = mode == FEED_WHOLE ? len : mode == FEED_BYTES ? 1 : chunk_next(&seed);
        if (n > len - pos)
            n = len - pos;
        if (mode == FEED_CHUNKS) {
            char *chunk = malloc(n);
            check(chunk != NULL);
            memcpy(chunk, body + pos, n);
            r = multipart_feed(p, chunk, n);
            free(chunk);
        } else {
            r = multipart_feed(p, body + pos, n);
        }
        pos += n;
    }
    if (r == 0)
        r = multipart_finish(p);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_E2BIG || (r == FUZZ_CALLBACK_CODE && o->failed));
    check(r != 0 || o->begins == o->ends);
    if (r != 0) {
        check(fawn_errmsg()[0] != '\0');
        size_t begins = o->begins, bytes = o->total_bytes;
        check(multipart_feed(p, body, len) == r && multipart_finish(p) == r);
        check(o->begins == begins && o->total_bytes == bytes);
    }
    multipart_free(p);
    o->hash = fnv_add_u64(o->hash, (uint64_t)(int64_t)r);
    return r;
}

static bool bchar_valid(char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c != '\0' && strchr("'()+_,-./:=? ", c) != NULL);
}

/* An accepted boundary is valid and comes back the same once quoted. */
static void check_boundary(const char *boundary) {
    size_t n = strlen(boundary);
    check(n >= 1 && n <= MULTIPART_BOUNDARY_MAX && boundary[n - 1] != ' ');
    for (size_t i = 0; i < n; i++)
        check(bchar_valid(boundary[i]));
    char again[sizeof "multipart/form-data; boundary=\"\"" + MULTIPART_BOUNDARY_MAX];
    snprintf(again, sizeof again, "multipart/form-data; boundary=\"%s\"", boundary);
    char out[MULTIPART_BOUNDARY_MAX + 1];
    check(multipart_boundary(out, again) == 0 && strcmp(out, boundary) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    const char *nl = memchr(data, '\n', size);
    size_t ct_len = nl ? (size_t)(nl - (const char *)data) : size;
    char *content_type = malloc(ct_len + 1);
    check(content_type != NULL);
    memcpy(content_type, data, ct_len);
    content_type[ct_len] = '\0';
    char boundary[MULTIPART_BOUNDARY_MAX + 1];
    int r = multipart_boundary(boundary, content_type);
    free(content_type);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_EUNSUP);
    if (r != 0)
        return 0;
    check_boundary(boundary);

    size_t body_len = nl ? size - ct_len - 1 : 0;
    char *body = malloc(body_len ? body_len : 1);
    check(body != NULL);
    memcpy(body, nl ? nl + 1 : "", body_len);
    uint64_t seed = fnv_add(FNV_OFFSET, data, size);
    long fail_at = seed % 8 == 0 ? (long)((seed >> 3) % 4) : -1;
    bool fail_in_end = (seed >> 5) & 1;
    char delim[sizeof "\r\n--" + MULTIPART_BOUNDARY_MAX];
    snprintf(delim, sizeof delim, "\r\n--%s", boundary);
    observer base = {
        .hash = FNV_OFFSET,
        .body = body,
        .body_len = body_len,
        .fail_begin = fail_in_end ? -1 : fail_at,
        .fail_end = fail_in_end ? fail_at : -1,
    };
    observer whole = base, chunks = base, bytes = base;
    whole.delim = delim;
    int r_whole = run(&whole, boundary, body, body_len, FEED_WHOLE, seed);
    int r_chunks = run(&chunks, boundary, body, body_len, FEED_CHUNKS, seed | 1);
    int r_bytes = run(&bytes, boundary, body, body_len, FEED_BYTES, seed);
    check(r_whole == r_chunks && r_whole == r_bytes);
    check(whole.hash == chunks.hash && whole.hash == bytes.hash);
    check(whole.total_bytes == chunks.total_bytes && whole.total_bytes == bytes.total_bytes);
    fbuf_free(&whole.content);
    free(body);
    return 0;
}
