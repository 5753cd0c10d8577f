/* libFuzzer target for the web UI's parsers of request header values:
 * Accept-Encoding (whether gzip may be sent) and If-None-Match (whether
 * the client holds the current copy). Input: one header value, given to
 * both. Besides memory errors and undefined behaviour, it checks that
 * - gzip is accepted only by a value that names gzip or "*";
 * - appending ", gzip;q=0" refuses gzip whatever came before, unless the
 *   value already named gzip acceptably (the first acceptable element
 *   wins);
 * - an If-None-Match match needs "*" or the tag's quoted text in the
 *   value;
 * - the tag itself, and W/ plus the tag, always match. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "web/web.h"
#include "fuzz_support.h"

/* Longer values only repeat elements. */
#define FUZZ_INPUT_MAX 1024
#define TAG "\"0123456789abcdef0123456789abcdef\""

static void check_accept_encoding(const char *value) {
    bool gzip = web_accepts_gzip(value);
    if (gzip)
        check(strcasestr(value, "gzip") || strchr(value, '*'));
    char refused[FUZZ_INPUT_MAX + 16];
    snprintf(refused, sizeof refused, "%s, gzip;q=0", value);
    bool named_before = strcasestr(value, "gzip") != NULL;
    if (!named_before)
        check(!web_accepts_gzip(refused));
}

static void check_if_none_match(const char *value) {
    if (web_etag_match(value, TAG))
        check(strchr(value, '*') || strstr(value, TAG));
    check(web_etag_match(TAG, TAG));
    check(web_etag_match("W/" TAG, TAG));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    char value[FUZZ_INPUT_MAX + 1];
    memcpy(value, data, size);
    value[size] = '\0';
    check_accept_encoding(value);
    check_if_none_match(value);
    return 0;
}
