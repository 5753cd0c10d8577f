/* libFuzzer target for the gateway's parsers of request header values: the
 * Last-Event-ID of run streams and the X-Forwarded-For chain of a trusted
 * proxy (which decides the client address that sign-in throttling and
 * connection caps count); and of decimal query arguments (before_seq and
 * limit of message pages, limit and offset of run lists). Input: one
 * value, given to each. Besides memory errors and undefined behaviour (an
 * id past INT64_MAX), it checks that
 * - Last-Event-ID: only 0 and FAWN_EINVAL are returned, and a refusal
 *   leaves the id 0; an accepted value is "", "-1" or decimal digits only,
 *   and the id is the number they spell, within 0 … INT64_MAX (checked
 *   against a wider sum);
 * - a query decimal: accepted only when it is digits only spelling a
 *   number within its bounds, which it then is; a refusal leaves 0;
 * - X-Forwarded-For: a peer that is not a trusted proxy is the client
 *   whatever the header says; otherwise the client is the peer or a
 *   canonical address, a trusted one only when every entry is a trusted
 *   proxy; a trusted proxy appended on the right changes nothing, and
 *   neither does anything prepended on the left of a client that is not a
 *   proxy (a client can forge only what lies left of it). */
#include <arpa/inet.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "gateway/internal.h"
#include "fuzz_support.h"

/* Longer values only repeat entries or digits the bounds already refuse. */
#define FUZZ_INPUT_MAX 1024
#define ADDRESS_MAX 64
/* A peer that is a trusted proxy, and one that is not. */
#define PROXY "10.0.0.1"
#define STRANGER "203.0.113.9"

static char trusted[][ADDRESS_MAX] = {PROXY, "::1", "192.168.1.2"};
#define TRUSTED ARRAY_LEN(trusted)

/* ---- Last-Event-ID ---- */

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

static void check_event_id(const char *text) {
    int64_t id = -1;
    int r = gw_event_id_parse(&id, text);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0) {
        check(id == 0);
        return;
    }
    check(id >= 0);
    if (text[0] == '\0' || strcmp(text, "-1") == 0) {
        check(id == 0);
        return;
    }
    check(strspn(text, "0123456789") == strlen(text));
    check(spelled(text) == (uint64_t)id);
}

/* ---- query decimals ---- */

static void check_decimal(const char *text) {
    static const int64_t bounds[][2] = {{1, 200}, {1, INT64_MAX}, {0, INT32_MAX}, {5, 5}};
    for (size_t i = 0; i < ARRAY_LEN(bounds); i++) {
        int64_t v = -1;
        int r = gw_decimal_parse(&v, text, bounds[i][0], bounds[i][1]);
        check(r == 0 || r == FAWN_EINVAL);
        bool digits = text[0] && strspn(text, "0123456789") == strlen(text);
        uint64_t want = digits ? spelled(text) : 0;
        bool within = digits && want >= (uint64_t)bounds[i][0] && want <= (uint64_t)bounds[i][1];
        check((r == 0) == within);
        check(r == 0 ? (uint64_t)v == want : v == 0);
    }
}

/* ---- X-Forwarded-For ---- */

static bool is_trusted(const char *addr) {
    for (size_t i = 0; i < TRUSTED; i++)
        if (strcmp(addr, trusted[i]) == 0)
            return true;
    return false;
}

/* Whether addr is a numeric address as inet_ntop writes it. */
static bool canonical(const char *addr) {
    unsigned char bin[16];
    char again[ADDRESS_MAX];
    int family = strchr(addr, ':') ? AF_INET6 : AF_INET;
    return inet_pton(family, addr, bin) == 1 && inet_ntop(family, bin, again, sizeof again) &&
           strcmp(again, addr) == 0;
}

/* Whether every comma-separated entry of header, blanks trimmed, is a
 * trusted proxy's address (in any spelling). */
static bool all_trusted(const char *header) {
    for (const char *p = header;; p++) {
        size_t n = strcspn(p, ",");
        char entry[ADDRESS_MAX], canon[ADDRESS_MAX];
        const char *a = p, *b = p + n;
        while (a < b && (*a == ' ' || *a == '\t'))
            a++;
        while (b > a && (b[-1] == ' ' || b[-1] == '\t'))
            b--;
        if ((size_t)(b - a) >= sizeof entry)
            return false;
        memcpy(entry, a, (size_t)(b - a));
        entry[b - a] = '\0';
        unsigned char bin[16];
        int family = strchr(entry, ':') ? AF_INET6 : AF_INET;
        if (inet_pton(family, entry, bin) != 1 || !inet_ntop(family, bin, canon, sizeof canon) ||
            !is_trusted(canon))
            return false;
        p += n;
        if (!*p)
            return true;
    }
}

static void client(char out[ADDRESS_MAX], const char *peer, const char *header) {
    memset(out, 'x', ADDRESS_MAX);
    gw_forwarded_client(out, peer, header, trusted, TRUSTED);
    check(strnlen(out, ADDRESS_MAX) < ADDRESS_MAX);
}

static void check_forwarded_for(const char *header) {
    char out[ADDRESS_MAX], again[ADDRESS_MAX];
    client(out, STRANGER, header);
    check(strcmp(out, STRANGER) == 0);
    client(out, PROXY, header);
    check(strcmp(out, PROXY) == 0 || canonical(out));
    check(strcmp(out, PROXY) == 0 || !is_trusted(out) || all_trusted(header));
    size_t n = strlen(header);
    char *longer = malloc(n + 64);
    check(longer != NULL);
    snprintf(longer, n + 64, "%s, %s", header, PROXY);
    client(again, PROXY, longer);
    check(strcmp(out, again) == 0);
    if (strcmp(out, PROXY) != 0 && !is_trusted(out)) {
        snprintf(longer, n + 64, "forged, 198.51.100.7,%s", header);
        client(again, PROXY, longer);
        check(strcmp(out, again) == 0);
    }
    free(longer);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    char text[FUZZ_INPUT_MAX + 1];
    memcpy(text, data, size);
    text[size] = '\0';
    check_event_id(text);
    check_decimal(text);
    check_forwarded_for(text);
    return 0;
}
