/* libFuzzer target for the egress proxy's request-head parser (a
 * sandbox's bytes). The input is copied into an exact-size heap buffer so
 * that any read past its end is caught by AddressSanitizer. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/egress.h"

static void check_parsed(const egress_request *r, size_t size) {
    if (r->head_len < 4 || r->head_len > size || r->head_len > EGRESS_HEAD_MAX)
        abort();
    size_t n = strlen(r->host);
    if (n == 0 || n > NET_HOST_MAX || (r->connect && r->port == 0))
        abort();
    if (r->connect != (r->forward == NULL))
        abort();
    /* What goes upstream is one head: one blank line, at its end, and no
     * line break but CRLF (no smuggled second request or header). */
    if (r->forward) {
        const char *end = strstr(r->forward, "\r\n\r\n");
        if (strlen(r->forward) != r->forward_len || !end || end + 4 != r->forward + r->forward_len)
            abort();
        for (size_t i = 0; i < r->forward_len; i++)
            if ((r->forward[i] == '\n' && (i == 0 || r->forward[i - 1] != '\r')) ||
                (r->forward[i] == '\r' && r->forward[i + 1] != '\n'))
                abort();
        if (!strstr(r->forward, "\r\nConnection: close\r\n"))
            abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    egress_request r;
    int e = egress_request_parse(&r, buf, size);
    if (e == 0)
        check_parsed(&r, size);
    else if (e != FAWN_EINVAL && e != FAWN_E2BIG && e != FAWN_ENOMEM)
        abort();
    else if (e == FAWN_E2BIG && size >= EGRESS_HEAD_MAX)
        abort(); /* a head past the cap is refused, never awaited */
    egress_request_clear(&r);
    free(buf);
    return 0;
}
