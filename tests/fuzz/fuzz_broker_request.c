/* libFuzzer target for the credential broker's request parser (what a
 * sandbox sends: a header, then a body). The input is copied into an
 * exact-size heap buffer so that any read past its end is caught by
 * AddressSanitizer; a parsed request must encode back to the same bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "broker/broker.h"

static void check_parsed(const broker_request *r, const uint8_t *body, size_t size) {
    if (!r->name || r->argc > BROKER_ARGS_MAX || (r->in_len && !r->in) || r->in_len > size)
        abort();
    for (size_t i = 0; i < r->argc; i++)
        if (!r->argv[i])
            abort();
    if (r->argv[r->argc])
        abort();
    fbuf again = {0};
    if (broker_request_encode(&again, r->name, r->argv, r->argc, r->in, r->in_len) != 0)
        abort();
    if (again.len != size + BROKER_HEADER_LEN ||
        memcmp(again.data + BROKER_HEADER_LEN, body, size) != 0)
        abort();
    fbuf_free(&again);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t len = 0;
    if (size >= BROKER_HEADER_LEN) {
        int e = broker_header_parse(&len, data, BROKER_REQUEST_MAX);
        if (e == 0 && len > BROKER_REQUEST_MAX)
            abort();
        if (e != 0 && e != FAWN_EPROTO && e != FAWN_E2BIG)
            abort();
    }
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    broker_request r;
    int e = broker_request_parse(&r, buf, size);
    if (e == 0)
        check_parsed(&r, buf, size);
    else if (e != FAWN_EPROTO && e != FAWN_ENOMEM)
        abort();
    broker_request_clear(&r);
    free(buf);
    return 0;
}
