/* libFuzzer target for the virtual-path parser and the percent decoder.
 * Besides memory errors, it checks the parser's invariants: a parsed rel is
 * normalized (no leading or doubled '/', no "." or ".." segment, no refused
 * byte), parsing its own output gives the same result, and a valid file
 * name is a single normalized segment. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "paths/paths.h"

/* Inputs longer than two maximal paths only exercise the length check. */
#define FUZZ_INPUT_MAX (2 * VPATH_MAX)

static void check(int ok) {
    if (!ok)
        abort();
}

static void check_rel_normalized(const char *rel) {
    size_t n = strlen(rel);
    check(n < VPATH_MAX);
    if (n == 0)
        return;
    check(rel[0] != '/' && rel[n - 1] != '/');
    const char *seg = rel;
    for (;;) {
        const char *end = strchrnul(seg, '/');
        size_t len = (size_t)(end - seg);
        check(len > 0 && len <= VPATH_NAME_MAX);
        check(!(len == 1 && seg[0] == '.') && !(len == 2 && seg[0] == '.' && seg[1] == '.'));
        for (size_t i = 0; i < len; i++) {
            unsigned char c = (unsigned char)seg[i];
            check(c >= 0x20 && c != 0x7f && c != '\\');
        }
        if (!*end)
            break;
        seg = end + 1;
    }
}

static void check_parse(const char *in) {
    vpath p;
    if (vpath_parse(&p, in) != 0)
        return;
    check_rel_normalized(p.rel);
    char again[VPATH_MAX + 32];
    snprintf(again, sizeof again, "%s%s%s",
             p.root == VPATH_ROOT_SKILLS ? VPATH_SKILLS : VPATH_USER_DATA, p.rel[0] ? "/" : "",
             p.rel);
    vpath q;
    check(vpath_parse(&q, again) == 0);
    check(q.root == p.root && strcmp(q.rel, p.rel) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    char in[FUZZ_INPUT_MAX + 1];
    memcpy(in, data, size);
    in[size] = '\0';
    check_parse(in);
    char decoded[VPATH_MAX];
    if (vpath_percent_decode(decoded, sizeof decoded, in) == 0) {
        check(strlen(decoded) < sizeof decoded);
        check_parse(decoded);
    }
    /* A valid name is one normalized segment. */
    if (vpath_name_valid(in))
        check_rel_normalized(in);
    (void)vpath_is_staging_name(in);
    return 0;
}
