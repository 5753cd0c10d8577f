/* libFuzzer target for web_search_parse: a search backend's reply,
 * untrusted, read into hits or a failure. Input: the first byte picks the
 * backend (its low two bits: searxng, tavily, brave, serper) and the HTTP
 * status (its other six, from `statuses`), the rest is the reply's body.
 * Besides memory errors and undefined behaviour, it checks what the tool
 * layer relies on: a known result code; hits bounded in number and size,
 * one line of valid UTF-8 each, their URLs http(s); a failure with no
 * hits, a message of valid UTF-8 that never holds the key. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "research/research.h"
#include "fuzz_support.h"

static const long statuses[16] = {200, 200, 200, 200, 400, 401, 402, 403,
                                  422, 429, 432, 433, 500, 503, 301, 404};
static const char secret[] = "fuzz-SECRET-key";

/* One line of valid UTF-8 of at most max bytes. */
static void check_text(const char *s, size_t max) {
    check(s && strlen(s) <= max);
    for (const char *p = s; *p; p++)
        check((unsigned char)*p >= 0x20 && *p != 0x7f);
    json_t *valid = json_string(s); /* jansson takes valid UTF-8 only */
    check(valid != NULL);
    json_decref(valid);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    enum web_search_backend b = (enum web_search_backend)(data[0] & 3);
    long status = statuses[(data[0] >> 2) & 15];
    web_search_result r;
    int rc = web_search_parse(&r, b, status, 7000, (const char *)data + 1, size - 1,
                              WEB_SEARCH_MAX_RESULTS, secret);
    if (rc < 0) {
        check(rc == FAWN_ENOMEM && r.n == 0 && !r.hits);
        return 0;
    }
    check(r.n <= WEB_SEARCH_MAX_RESULTS);
    for (size_t i = 0; i < r.n; i++) {
        check_text(r.hits[i].title, WEB_SEARCH_TITLE_MAX);
        check_text(r.hits[i].snippet, WEB_SEARCH_SNIPPET_MAX);
        check_text(r.hits[i].url, WEB_URL_MAX);
        check(strncasecmp(r.hits[i].url, "http://", 7) == 0 ||
              strncasecmp(r.hits[i].url, "https://", 8) == 0);
    }
    if (r.failure != WEB_SEARCH_OK) {
        check(r.n == 0 && r.message[0]);
        check_text(r.message, WEB_SEARCH_MESSAGE_MAX - 1);
        check(!strstr(r.message, secret));
    }
    check(status == 200 || r.failure != WEB_SEARCH_OK);
    web_search_result_clear(&r);
    return 0;
}
