/* Assertions with context shared by the integration and escape suites.
 * Include after <cmocka.h>. */
#ifndef FAWN_TESTS_SUPPORT_H
#define FAWN_TESTS_SUPPORT_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline const char *or_empty(const char *s) { return s ? s : ""; }

/* Fails, showing the haystack, unless needle occurs in hay (NULL = ""). */
#define check_contains(what, hay, needle)                                                          \
    do {                                                                                           \
        const char *_h = or_empty(hay);                                                            \
        if (!strstr(_h, (needle)))                                                                 \
            fail_msg("%s: expected \"%s\" in:\n%s", (what), (needle), _h);                         \
    } while (0)

/* Fails, showing the haystack, when needle occurs in hay (NULL = ""). */
#define check_lacks(what, hay, needle)                                                             \
    do {                                                                                           \
        const char *_h = or_empty(hay);                                                            \
        if (strstr(_h, (needle)))                                                                  \
            fail_msg("%s: \"%s\" must not appear in:\n%s", (what), (needle), _h);                  \
    } while (0)

/* A malloc'd formatted string (the caller frees it). */
static inline char *strf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static inline char *strf(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *s = NULL;
    int n = vasprintf(&s, fmt, ap);
    va_end(ap);
    assert_true(n >= 0);
    return s;
}

#endif
