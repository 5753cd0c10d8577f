/* libFuzzer target for the Range header parser of artifact downloads.
 * Input: the first 8 bytes are the representation size (little-endian),
 * the rest is the header value. Besides memory errors, it checks that
 * - only 0, FAWN_ENOENT and FAWN_E2BIG are returned;
 * - a satisfiable range is non-empty and inside the representation;
 * - whether a header is ignored depends on its text alone, not on the size;
 * - a range satisfiable for one size stays so, unchanged in start, for a
 *   larger size when it names its end or start explicitly ("A-B", "A-"). */
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gateway/artifacts.h"

/* Longer inputs only exercise the header length check. */
#define FUZZ_INPUT_MAX 1024
#define SIZE_BYTES 8

static void check(int ok) {
    if (!ok)
        abort();
}

static uint64_t read_size(const uint8_t *data) {
    uint64_t size = 0;
    for (int i = SIZE_BYTES - 1; i >= 0; i--)
        size = size << 8 | data[i];
    return size;
}

static int parse_checked(uint64_t *start, uint64_t *len, const char *header, uint64_t size) {
    int r = artifact_range_parse(start, len, header, size);
    check(r == 0 || r == FAWN_ENOENT || r == FAWN_E2BIG);
    if (r == 0) {
        check(*len > 0);
        check(*start < size);
        check(*len <= size - *start);
    }
    return r;
}

/* True for "bytes=-N" (a parsed header starts with the unit, then optional spaces). */
static bool is_suffix_range(const char *header) {
    const char *spec = header + strlen("bytes=");
    return spec[strspn(spec, " \t")] == '-';
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < SIZE_BYTES || size > FUZZ_INPUT_MAX)
        return 0;
    uint64_t rep = read_size(data);
    char header[FUZZ_INPUT_MAX + 1];
    memcpy(header, data + SIZE_BYTES, size - SIZE_BYTES);
    header[size - SIZE_BYTES] = '\0';

    uint64_t start = 0, len = 0;
    int r = parse_checked(&start, &len, header, rep);
    static const uint64_t other_sizes[] = {0, 1, 100, UINT64_MAX};
    for (size_t i = 0; i < ARRAY_LEN(other_sizes); i++) {
        uint64_t s2 = 0, l2 = 0;
        int r2 = parse_checked(&s2, &l2, header, other_sizes[i]);
        check((r == FAWN_ENOENT) == (r2 == FAWN_ENOENT));
    }
    /* A range with an explicit first position keeps its start as the file grows. */
    if (r == 0 && !is_suffix_range(header) && rep < UINT64_MAX) {
        uint64_t s2 = 0, l2 = 0;
        check(parse_checked(&s2, &l2, header, rep + 1) == 0);
        check(s2 == start && l2 >= len);
    }
    return 0;
}
