/* libFuzzer target for the egress proxy's ClientHello reader (the first
 * bytes of a sandbox's TLS tunnel). Exact-size heap copy, as the others. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/egress.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    uint8_t *buf = malloc(size ? size : 1);
    if (!buf)
        return 0;
    memcpy(buf, data, size);
    char sni[NET_HOST_MAX + 1];
    memset(sni, 'x', sizeof sni);
    int e = egress_tls_sni(sni, buf, size);
    if (e != 0 && e != FAWN_EINVAL && e != FAWN_E2BIG)
        abort();
    if (e == FAWN_E2BIG && size >= EGRESS_HEAD_MAX)
        abort(); /* never awaits more than the cap */
    if (memchr(sni, '\0', sizeof sni) == NULL || (e != 0 && sni[0]))
        abort();
    for (const char *p = sni; *p; p++) /* a lowercase DNS name, nothing else */
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-' || *p == '.'))
            abort();
    free(buf);
    return 0;
}
