/* Streaming multipart/form-data parser (RFC 7578 over RFC 2046) for the
 * upload route.
 *
 * The body is fed in chunks of any size, split at any byte. A part's content
 * is never buffered: it goes straight to the part_data callback, except for
 * at most "\r\n--" plus boundary-length bytes held back while they could be
 * the start of a delimiter. A part's headers are buffered, bounded by
 * MULTIPART_HEADER_BLOCK_MAX.
 *
 * Syntax accepted (anything else is FAWN_EINVAL, "malformed multipart body:
 * ..."):
 *   - a preamble (at most MULTIPART_PREAMBLE_MAX bytes) before the first
 *     delimiter and an epilogue (at most MULTIPART_EPILOGUE_MAX bytes) after
 *     the closing one, both ignored;
 *   - spaces and tabs (transport padding) after a boundary before its CRLF;
 *   - lines end in CRLF, strictly: a bare LF or CR is refused, in part
 *     headers and after a boundary;
 *   - header names are case-insensitive; folded header lines, NUL and other
 *     control characters (except HTAB) in headers are refused;
 *   - every part has exactly one "Content-Disposition: form-data" header with
 *     a non-empty name= parameter; parameter values are tokens or
 *     quoted-strings with backslash escapes; a parameter given twice is
 *     refused; Content-Type may appear at most once; other headers are
 *     ignored;
 *   - "\r\n--boundary" followed by anything other than "--", padding or CRLF
 *     is refused (RFC 2046 forbids the boundary inside content).
 *
 * Limits exceeded are FAWN_E2BIG. Parsing is pure: no I/O, no global state.
 * Every out-parameter is set on every path, failures included (NULL, ""). */
#ifndef FAWN_GATEWAY_MULTIPART_H
#define FAWN_GATEWAY_MULTIPART_H

#include <stddef.h>
#include "base/base.h"

/* Longest boundary RFC 2046 allows. */
#define MULTIPART_BOUNDARY_MAX 70
/* 8 KiB of headers per part: browsers send two or three short lines. */
#define MULTIPART_HEADER_BLOCK_MAX 8192
/* Header lines per part: form-data parts carry at most a handful. */
#define MULTIPART_HEADERS_MAX 32
/* Parts per body: far above any form, low enough to stop part-flooding
 * (the caller bounds the number of files separately). */
#define MULTIPART_PARTS_MAX 1000
/* Bytes before the first delimiter: clients send none or a short note. */
#define MULTIPART_PREAMBLE_MAX 65536
/* Bytes after the closing delimiter: clients send none or a CRLF. */
#define MULTIPART_EPILOGUE_MAX 65536
/* Spaces and tabs after a boundary: RFC 2046 allows them, clients send none. */
#define MULTIPART_PADDING_MAX 256

/* Extracts the boundary parameter of a Content-Type value
 * "multipart/form-data; boundary=..." into out (NUL-terminated): quoted or
 * not, parameter names and the media type case-insensitive, other parameters
 * ignored. FAWN_EUNSUP when the media type is not multipart/form-data (or
 * content_type is NULL); FAWN_EINVAL for malformed parameters, a missing,
 * repeated, empty or over-long boundary, or one with characters RFC 2046
 * does not allow. */
FAWN_MUST_CHECK int multipart_boundary(char out[MULTIPART_BOUNDARY_MAX + 1],
                                       const char *content_type);

/* What part_begin learns about a part. The strings are NUL-terminated and
 * valid only during the call. */
typedef struct multipart_part {
    const char *name;         /* the form field name (Content-Disposition name=), non-empty */
    const char *filename;     /* filename= (or filename*=UTF-8''percent-encoded, which wins),
                                 raw bytes as sent, "" for an empty file input, NULL when
                                 absent; may contain anything but NUL, including "../" --
                                 the caller validates */
    const char *content_type; /* the part's Content-Type value, blanks trimmed, or NULL */
} multipart_part;

/* Callbacks, each may be NULL (not interested). A callback returning a
 * negative value stops the parser: multipart_feed returns that value
 * unchanged (with the callback's error message intact) and every later call
 * returns it too. part_data is called zero or more times between part_begin
 * and part_end with non-empty slices of the part's content; part_end is
 * called once the delimiter line that ends the part has been read in full. */
typedef struct multipart_callbacks {
    int (*part_begin)(void *ctx, const multipart_part *part);
    int (*part_data)(void *ctx, const char *data, size_t len);
    int (*part_end)(void *ctx);
} multipart_callbacks;

typedef struct multipart_parser multipart_parser;

/* Creates a parser for bodies delimited by boundary (as multipart_boundary
 * returns it; copied). cb is copied; ctx is borrowed and handed to every
 * callback. Free with multipart_free. FAWN_EINVAL for an invalid boundary,
 * FAWN_ENOMEM. */
FAWN_MUST_CHECK int multipart_new(multipart_parser **out, const char *boundary,
                                  const multipart_callbacks *cb, void *ctx);

/* Frees p (NULL is fine). */
void multipart_free(multipart_parser *p);

/* Parses the next len bytes of the body, calling the callbacks as parts
 * begin, carry content and end. Returns 0, FAWN_EINVAL (malformed body),
 * FAWN_E2BIG (a limit above), or a callback's negative value. After any
 * failure the parser is stopped: every later call returns the same code and
 * restores its message. */
FAWN_MUST_CHECK int multipart_feed(multipart_parser *p, const char *data, size_t len);

/* Call after the last chunk: 0 when the closing delimiter was seen,
 * otherwise FAWN_EINVAL (the body was cut short) or the code that stopped
 * the parser earlier. */
FAWN_MUST_CHECK int multipart_finish(multipart_parser *p);

#endif
