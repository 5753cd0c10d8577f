/* libFuzzer target for web_html_text: a fetched web page, untrusted, turned
 * into the text the model reads. Input: the first byte picks the charset
 * the page is said to have (none, UTF-8, windows-1252, Shift_JIS), the
 * rest is the page. Besides memory errors, undefined behaviour and time
 * (a nested page must not cost quadratic time), it checks that the text
 * is read or refused with a known code, and that what comes out is valid
 * UTF-8. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "research/research.h"
#include "fuzz_support.h"

static const char *const charsets[] = {NULL, "utf-8", "windows-1252", "shift_jis"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    const char *charset = charsets[data[0] % (sizeof charsets / sizeof *charsets)];
    char *out = NULL;
    int r = web_html_text(&out, (const char *)data + 1, size - 1, charset);
    if (r < 0) {
        check(!out && (r == FAWN_E2BIG || r == FAWN_ENOMEM || r == FAWN_EUNSUP));
        return 0;
    }
    json_t *valid = json_string(out); /* jansson takes valid UTF-8 only */
    check(valid != NULL);
    json_decref(valid);
    free(out);
    return 0;
}
