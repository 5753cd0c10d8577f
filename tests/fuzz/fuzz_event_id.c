/* libFuzzer target for the Last-Event-ID parser of run streams. Input: the
 * header value. Besides memory errors and undefined behaviour (an id past
 * INT64_MAX), it checks that
 * - only 0 and FAWN_EINVAL are returned, and a refusal leaves the id 0;
 * - an accepted value is "", "-1" or decimal digits only, and the id is the
 *   number they spell, within 0 … INT64_MAX (checked against a wider sum). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gateway/internal.h"

/* Longer inputs only repeat digits the bound already refuses. */
#define FUZZ_INPUT_MAX 256

static void check(int ok) {
    if (!ok)
        abort();
}

/* The number text spells, saturated at UINT64_MAX (digits only). */
static uint64_t spelled(const char *text) {
    unsigned __int128 n = 0;
    for (const char *p = text; *p; p++) {
        n = n * 10 + (unsigned)(*p - '0');
        if (n > UINT64_MAX)
            return UINT64_MAX;
    }
    return (uint64_t)n;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    char text[FUZZ_INPUT_MAX + 1];
    memcpy(text, data, size);
    text[size] = '\0';
    int64_t id = -1;
    int r = gw_event_id_parse(&id, text);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0) {
        check(id == 0);
        return 0;
    }
    check(id >= 0);
    if (text[0] == '\0' || strcmp(text, "-1") == 0) {
        check(id == 0);
        return 0;
    }
    check(strspn(text, "0123456789") == strlen(text));
    check(spelled(text) == (uint64_t)id);
    return 0;
}
