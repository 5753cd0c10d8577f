/* The network allow-list (research.h). */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "research/research.h"

/* An entry's text at most: "[" + an IPv6 address + "/128]:65535", or a name and port. */
#define ENTRY_TEXT_MAX (NET_HOST_MAX + 8)
/* A DNS label's longest. */
#define LABEL_MAX 63

/* ---- addresses as 16 bytes (IPv4 as ::ffff:a.b.c.d) ---- */

static const uint8_t mapped_prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

/* The address of sa in 16-byte form and its port; false for another family. */
static bool addr_of(uint8_t out[16], uint16_t *port, const struct sockaddr *sa) {
    if (sa && sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        memcpy(out, mapped_prefix, 12);
        memcpy(out + 12, &in->sin_addr, 4);
        *port = ntohs(in->sin_port);
        return true;
    }
    if (sa && sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        memcpy(out, &in6->sin6_addr, 16);
        *port = ntohs(in6->sin6_port);
        return true;
    }
    return false;
}

static bool prefix_match(const uint8_t *a, const uint8_t *b, unsigned bits) {
    unsigned whole = bits / 8, rest = bits % 8;
    if (memcmp(a, b, whole) != 0)
        return false;
    if (!rest)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (a[whole] & mask) == (b[whole] & mask);
}

typedef struct range {
    uint8_t addr[16];
    unsigned bits;
} range;

/* IPv4 ranges that are not globally reachable (the IANA special-purpose
 * registry; its few global exceptions inside them are refused too). */
static const range v4_special[] = {
    {{0, 0, 0, 0}, 8},       /* "this network" */
    {{10, 0, 0, 0}, 8},      /* private */
    {{100, 64, 0, 0}, 10},   /* shared (carrier-grade NAT) */
    {{127, 0, 0, 0}, 8},     /* loopback */
    {{169, 254, 0, 0}, 16},  /* link-local, cloud metadata */
    {{172, 16, 0, 0}, 12},   /* private */
    {{192, 0, 0, 0}, 24},    /* IETF protocol assignments */
    {{192, 0, 2, 0}, 24},    /* documentation */
    {{192, 88, 99, 0}, 24},  /* 6to4 relay anycast */
    {{192, 168, 0, 0}, 16},  /* private */
    {{198, 18, 0, 0}, 15},   /* benchmarking */
    {{198, 51, 100, 0}, 24}, /* documentation */
    {{203, 0, 113, 0}, 24},  /* documentation */
    {{224, 0, 0, 0}, 4},     /* multicast */
    {{240, 0, 0, 0}, 4},     /* reserved, broadcast */
};

static bool v4_public(const uint8_t a[4]) {
    for (size_t i = 0; i < ARRAY_LEN(v4_special); i++)
        if (prefix_match(a, v4_special[i].addr, v4_special[i].bits))
            return false;
    return true;
}

/* Inside global unicast (2000::/3), the ranges that are not. */
static const range v6_special[] = {
    {{0x20, 0x01, 0x00, 0x00}, 23}, /* IETF protocol assignments (Teredo included) */
    {{0x20, 0x01, 0x0d, 0xb8}, 32}, /* documentation */
    {{0x3f, 0xff, 0x00, 0x00}, 20}, /* documentation */
};

static bool addr16_public(const uint8_t a[16]) {
    if (memcmp(a, mapped_prefix, 12) == 0)
        return v4_public(a + 12);
    if (a[0] == 0x20 && a[1] == 0x02) /* 6to4: the IPv4 address it carries */
        return v4_public(a + 2);
    if ((a[0] & 0xe0) != 0x20) /* outside 2000::/3: loopback, ULA, link-local, NAT64, ... */
        return false;
    for (size_t i = 0; i < ARRAY_LEN(v6_special); i++)
        if (prefix_match(a, v6_special[i].addr, v6_special[i].bits))
            return false;
    return true;
}

bool net_addr_public(const struct sockaddr *sa) {
    uint8_t a[16];
    uint16_t port;
    return addr_of(a, &port, sa) && addr16_public(a);
}

/* ---- the allow-list ---- */

static bool entry_port_ok(const net_allow_entry *e, uint16_t port) {
    return e->port == 0 || e->port == port;
}

bool net_connect_allowed(const net_allowlist *al, const char *host, const struct sockaddr *sa) {
    uint8_t a[16];
    uint16_t port;
    if (!addr_of(a, &port, sa))
        return false;
    if (addr16_public(a))
        return true;
    for (size_t i = 0; al && i < al->n; i++) {
        const net_allow_entry *e = &al->entries[i];
        if (!entry_port_ok(e, port))
            continue;
        if (e->host[0] ? host && strcasecmp(e->host, host) == 0
                       : prefix_match(a, e->addr, e->prefix))
            return true;
    }
    return false;
}

bool net_range_listed(const net_allowlist *al, const struct sockaddr *sa) {
    uint8_t a[16];
    uint16_t port;
    if (!addr_of(a, &port, sa))
        return false;
    for (size_t i = 0; al && i < al->n; i++) {
        const net_allow_entry *e = &al->entries[i];
        if (!e->host[0] && entry_port_ok(e, port) && prefix_match(a, e->addr, e->prefix))
            return true;
    }
    return false;
}

bool net_host_listed(const net_allowlist *al, const char *host, uint16_t port) {
    for (size_t i = 0; al && host && i < al->n; i++) {
        const net_allow_entry *e = &al->entries[i];
        if (e->host[0] && entry_port_ok(e, port) && strcasecmp(e->host, host) == 0)
            return true;
    }
    return false;
}

/* A DNS name: labels of letters, digits and hyphens (not at either end),
 * 1..63 bytes each, 253 in all; stored lowercase. */
static bool name_parse(char out[NET_HOST_MAX + 1], const char *s, size_t n) {
    if (n == 0 || n > NET_HOST_MAX)
        return false;
    size_t label = 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (c == '.') {
            if (label == 0 || s[i - 1] == '-')
                return false;
            label = 0;
        } else if (isalnum((unsigned char)c) || (c == '-' && label > 0)) {
            if (++label > LABEL_MAX)
                return false;
        } else {
            return false;
        }
        out[i] = (char)tolower((unsigned char)c);
    }
    out[n] = '\0';
    return label > 0 && s[n - 1] != '-';
}

/* "ADDR" or "ADDR/BITS" (IPv4 or IPv6) into e's range. */
static bool range_parse(net_allow_entry *e, const char *s, size_t n) {
    char text[INET6_ADDRSTRLEN + 8];
    if (n == 0 || n >= sizeof text)
        return false;
    memcpy(text, s, n);
    text[n] = '\0';
    char *slash = strchr(text, '/');
    long bits = -1;
    if (slash) {
        *slash = '\0';
        char *end;
        if (!isdigit((unsigned char)slash[1]) || (bits = strtol(slash + 1, &end, 10)) < 0 ||
            *end != '\0')
            return false;
    }
    struct in_addr v4;
    if (inet_pton(AF_INET, text, &v4) == 1) {
        if (bits > 32)
            return false;
        memcpy(e->addr, mapped_prefix, 12);
        memcpy(e->addr + 12, &v4, 4);
        e->prefix = 96 + (unsigned)(bits < 0 ? 32 : bits);
        return true;
    }
    if (inet_pton(AF_INET6, text, e->addr) != 1 || bits > 128)
        return false;
    e->prefix = (unsigned)(bits < 0 ? 128 : bits);
    return true;
}

static bool port_parse(uint16_t *out, const char *s) {
    char *end;
    long v = isdigit((unsigned char)*s) ? strtol(s, &end, 10) : -1;
    if (v < 1 || v > 65535 || *end != '\0')
        return false;
    *out = (uint16_t)v;
    return true;
}

/* One entry: [ADDR(/BITS)]:PORT, V6ADDR(/BITS), or HOST-or-V4(/BITS) with
 * an optional :PORT. */
static bool entry_parse(net_allow_entry *e, const char *s) {
    memset(e, 0, sizeof *e);
    size_t len = strlen(s);
    if (len == 0 || len > ENTRY_TEXT_MAX)
        return false;
    const char *where, *port = NULL;
    size_t n;
    if (s[0] == '[') {
        const char *close = strchr(s, ']');
        if (!close || (close[1] && close[1] != ':'))
            return false;
        where = s + 1;
        n = (size_t)(close - where);
        port = close[1] ? close + 2 : NULL;
        return range_parse(e, where, n) && (!port || port_parse(&e->port, port));
    }
    const char *colon = strrchr(s, ':');
    if (colon && colon != strchr(s, ':')) /* several: a bare IPv6 address, no port */
        return range_parse(e, s, len);
    where = s;
    n = colon ? (size_t)(colon - s) : len;
    if (colon && !port_parse(&e->port, colon + 1))
        return false;
    return range_parse(e, where, n) || name_parse(e->host, where, n);
}

int net_allowlist_parse(net_allowlist *out, const json_t *list, const char *where) {
    *out = (net_allowlist){0};
    if (!list)
        return 0;
    if (!json_is_array(list) || json_array_size(list) > NET_ALLOW_MAX)
        return fawn_err(FAWN_ECONFIG, "%s: must be a list of at most %d entries", where,
                        NET_ALLOW_MAX);
    size_t n = json_array_size(list);
    net_allow_entry *entries = calloc(n ? n : 1, sizeof *entries);
    if (!entries)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < n; i++) {
        const char *text = json_string_value(json_array_get(list, i));
        if (!text || !entry_parse(&entries[i], text)) {
            free(entries);
            return fawn_err(FAWN_ECONFIG,
                            "%s[%zu]: must be HOST[:PORT], ADDRESS[/BITS][:PORT] or "
                            "[IPV6[/BITS]]:PORT",
                            where, i);
        }
    }
    *out = (net_allowlist){.entries = entries, .n = n};
    return 0;
}

void net_allowlist_free(net_allowlist *al) {
    if (!al)
        return;
    free(al->entries);
    *al = (net_allowlist){0};
}
