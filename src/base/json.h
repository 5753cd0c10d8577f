/* JSON helpers over jansson for validating untrusted request bodies.
 * Every getter names the offending key in its error message.
 *
 * fjson_parse_object sets *out on every path (NULL when it fails); the typed
 * getters alone keep *out as it was (the caller's default) unless they read
 * a value, so their caller initializes it. */
#ifndef FAWN_JSON_H
#define FAWN_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "base.h"
#include "base/base.h"

/* Parses at most len bytes as one JSON object. FAWN_EINVAL (message has the
 * parser's position) for anything else. Caller json_decref()s *out. */
FAWN_MUST_CHECK int fjson_parse_object(json_t **out, const char *data, size_t len);

/* Optional/required typed getters. When the key is absent and required is
 * false, *out keeps its previous value (the caller's default) and 0 is returned.
 * A present key of the wrong type, or out of [min, max], is FAWN_EINVAL. */
FAWN_MUST_CHECK int fjson_get_string(const char **out, const json_t *obj, const char *key,
                                     bool required);
FAWN_MUST_CHECK int fjson_get_int(int64_t *out, const json_t *obj, const char *key, bool required,
                                  int64_t min, int64_t max);
FAWN_MUST_CHECK int fjson_get_bool(bool *out, const json_t *obj, const char *key, bool required);

/* Fails with FAWN_EINVAL naming the first key of obj that is not in `allowed`
 * (a NULL-terminated list). Unknown fields are refused, not ignored. */
FAWN_MUST_CHECK int fjson_check_keys(const json_t *obj, const char *const *allowed);

/* Serializes v compactly into a malloc'd string (caller frees); NULL on OOM. */
char *fjson_dump(const json_t *v);

/* True when the n bytes are valid UTF-8 (no overlongs, no surrogates). */
bool fawn_utf8_valid(const char *s, size_t n);

/* Where the UTF-8 character that byte i of s belongs to starts: i, or the
 * nearest earlier byte that is not a continuation byte (0 at the least).
 * Cutting text there never splits a character. */
size_t fawn_utf8_char_start(const char *s, size_t i);

/* Appends s[0..n) to out with every invalid UTF-8 sequence replaced by
 * U+FFFD, so arbitrary bytes (command output) can go into JSON strings. */
FAWN_MUST_CHECK int fawn_utf8_sanitize(fbuf *out, const char *s, size_t n);

#endif
