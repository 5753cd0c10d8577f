/* libFuzzer target for the request-head parser and the query decoder.
 * The input is copied into an exact-size heap buffer so that any read past
 * its end is caught by AddressSanitizer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "box/http.h"

/* Larger than the default so E2BIG and success paths are both reached. */
#define FUZZ_QUERY_OUT 64

static void check_parsed(const http_request *req, size_t head_len, size_t size) {
    if (head_len == 0 || head_len > size || head_len > HTTP_MAX_HEAD_BYTES)
        abort();
    if (req->path[0] != '/' || req->n_headers > HTTP_MAX_HEADERS)
        abort();
    if (strlen(req->method) == 0 || strlen(req->method) > HTTP_MAX_METHOD)
        abort();
    for (size_t i = 0; i < req->n_headers; i++)
        if (http_header_get(req, req->headers[i].name) == NULL)
            abort();
    if (req->content_length < -1 || (req->version_minor != 0 && req->version_minor != 1))
        abort();
    static const char *const names[] = {"path", "a", "", "p q", "%"};
    char out[FUZZ_QUERY_OUT];
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        int r = http_query_get(out, sizeof out, req, names[i]);
        if (r == 0 && strlen(out) >= sizeof out)
            abort();
        if (r != 0 && r != FAWN_ENOENT && r != FAWN_EINVAL && r != FAWN_E2BIG)
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    http_request req;
    size_t head_len = 0;
    int status = 0;
    int r = http_parse_head(&req, &head_len, &status, buf, size);
    if (r == 0)
        check_parsed(&req, head_len, size);
    else if (r == 1 && size >= HTTP_MAX_HEAD_BYTES)
        abort();
    else if (r < 0 && status != 400 && status != 413 && status != 431 && status != 501 &&
             status != 505)
        abort();
    free(buf);
    return 0;
}
