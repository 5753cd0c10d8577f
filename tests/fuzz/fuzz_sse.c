/* libFuzzer target for the incremental SSE parser. Besides memory errors, it
 * checks that
 * - only 0 and FAWN_E2BIG are returned;
 * - feeding the stream in one piece, byte by byte, or split at a position
 *   chosen by the first input byte yields the same events and the same
 *   result (the parser's output does not depend on chunking);
 * - dispatched data never contains a CR and respects SSE_EVENT_MAX. */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "base/base.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536

static void check(int ok) {
    if (!ok)
        abort();
}

/* A running digest of the events seen (type, length, data). */
typedef struct trace {
    uint64_t hash;
    size_t events;
} trace;

static uint64_t mix(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int on_event(void *ctx, const char *event, const char *data, size_t len) {
    trace *t = ctx;
    check(len <= SSE_EVENT_MAX);
    check(data[len] == '\0');
    check(memchr(data, '\r', len) == NULL);
    check(strlen(event) < SSE_EVENT_NAME_MAX);
    t->hash = mix(t->hash, event, strlen(event) + 1);
    t->hash = mix(t->hash, &len, sizeof len);
    t->hash = mix(t->hash, data, len);
    t->events++;
    return 0;
}

static int run(trace *t, const uint8_t *data, size_t size, size_t step) {
    sse_parser p;
    *t = (trace){.hash = 14695981039346656037ULL};
    sse_init(&p, on_event, t);
    int r = 0;
    for (size_t off = 0; off < size && r == 0; off += step) {
        size_t n = size - off < step ? size - off : step;
        r = sse_feed(&p, (const char *)data + off, n);
    }
    sse_free(&p);
    check(r == 0 || r == FAWN_E2BIG);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1 || size > FUZZ_INPUT_MAX)
        return 0;
    size_t split = data[0] % size + 1;
    data++;
    size--;
    trace whole, bytes, halves;
    int r1 = run(&whole, data, size, size ? size : 1);
    int r2 = run(&bytes, data, size, 1);
    int r3 = run(&halves, data, size, split);
    check(r1 == r2 && r2 == r3);
    check(whole.hash == bytes.hash && whole.hash == halves.hash);
    check(whole.events == bytes.events && whole.events == halves.events);
    return 0;
}
