/* Thread artifacts: the transport-independent core of
 *   GET /api/threads/{tid}/artifacts/{path}   (serve a file of the thread)
 *   PUT /api/threads/{tid}/artifacts/{path}   (save an edited text file)
 *
 * The caller (the HTTP layer) passes the thread's roots, the URL text after
 * ".../artifacts/" exactly as received (still percent-encoded) and the
 * request headers it needs. Here that text is decoded exactly once, given a
 * leading '/', and resolved by src/paths against roots->user_data_fd only:
 * roots->skills_fd is never used, /mnt/skills holds no artifacts.
 *
 * Every error carries a message a client may read (virtual paths only, never
 * host paths). Path errors shared by GET and PUT:
 *   FAWN_EINVAL  malformed percent escape, %00, a decoded path that is not
 *                UTF-8, control characters or backslashes, an overlong path;
 *   FAWN_EPERM   "Access denied: path traversal detected": a ".." that leaves
 *                /mnt/user-data, or a symlink whose target lies outside it.
 *
 * Every out-parameter is set on every path, failures included (fd -1,
 * empty results, zero ranges before anything can fail). */
#ifndef FAWN_GATEWAY_ARTIFACTS_H
#define FAWN_GATEWAY_ARTIFACTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "paths/paths.h"
#include "base/base.h"

/* Longest Content-Type value: the longest table entry (an Office type) with "; charset=utf-8". */
#define ARTIFACT_CONTENT_TYPE_MAX 96
/* "attachment" with both names of a VPATH_NAME_MAX-byte file: the ASCII
 * fallback takes one byte per name byte, the RFC 5987 form up to three. */
#define ARTIFACT_DISPOSITION_MAX                                                                   \
    (sizeof "attachment; filename=\"\"; filename*=UTF-8''" + 4 * VPATH_NAME_MAX)
/* "bytes A-B/N" with three 20-digit numbers fits with room to spare. */
#define ARTIFACT_CONTENT_RANGE_MAX 96
/* Edits are of text files a person reads in a side panel (as DeerFlow's limit). */
#define ARTIFACT_EDIT_MAX_BYTES ((size_t)2 << 20)

typedef struct artifact_response {
    int fd;          /* open regular file, read-only; the caller closes it; -1 for 416 */
    uint64_t size;   /* file size when it was opened */
    uint64_t offset; /* first byte to send */
    uint64_t length; /* bytes to send (0 for 416) */
    unsigned status; /* 200, 206 or 416 */
    char content_type[ARTIFACT_CONTENT_TYPE_MAX];
    char content_disposition[ARTIFACT_DISPOSITION_MAX]; /* full header value */
    char content_range[ARTIFACT_CONTENT_RANGE_MAX];     /* "" for 200 */
} artifact_response;

/* Opens a thread file for GET. The decoded path must name a regular file in
 * /mnt/user-data/workspace, uploads or outputs; symlinks are followed only
 * while they stay beneath /mnt/user-data; staging files are never served.
 *
 * Fills *out: Content-Type from the file name's extension (a fixed table;
 * text types carry "; charset=utf-8"; unknown ones are
 * application/octet-stream); Content-Disposition "inline" or "attachment"
 * with filename="ASCII fallback" and filename*=UTF-8''percent-encoded name.
 * HTML, XHTML, SVG and every XML type are always "attachment" (they must not
 * run in the application's origin); download=true makes any file
 * "attachment". The caller should also send X-Content-Type-Options: nosniff.
 *
 * range_header is the Range value, or NULL when absent; pass NULL as well
 * when the request has If-Range (no validators are offered). One satisfiable
 * range gives status 206 with content_range "bytes A-B/N"; an unsatisfiable
 * one gives status 416, fd -1, content_range "bytes *\/N" and return value 0;
 * any other Range (malformed, several ranges, another unit) is ignored
 * (status 200, the whole file). The HTTP layer sends out->length bytes of
 * out->fd from out->offset with sendfile (file_routes.c, which also ends a
 * download whose file shrinks); artifact_body_read reads the same bytes for
 * any other sender, and tells a file that shrank while it was being sent.
 *
 * A path that goes on past a file whose name ends in ".skill" (x.skill/M)
 * names M inside that zip archive (skills_archive_member: M itself or
 * M in its top directory, read within the archive bounds), served from
 * memory as a file is: its media type by its name, ranges, disposition.
 *
 * Returns 0 with out filled, or (out->fd = -1) the path errors above and:
 *   FAWN_EINVAL "Path must start with /mnt/user-data" for any other path,
 *               an archive that cannot be read or passes a bound,
 *               "Path is not a file: P" for a directory or special file;
 *   FAWN_ENOENT "Artifact not found: P" for a missing file, a staging file,
 *               anything under /mnt/skills, and /mnt/user-data entries other
 *               than its three directories; "File 'M' not found in skill
 *               archive" for an archive without M;
 *   FAWN_EIO. */
FAWN_MUST_CHECK int artifact_get(artifact_response *out, const vpath_roots *roots,
                                 const char *encoded_tail, const char *range_header, bool download);

/* Reads the body of a (filled by artifact_get) at pos, counted from the
 * first byte to send (a->offset in the file): up to max bytes into buf, *n
 * the count. *n is 0 only once all a->length bytes have been read. Returns 0,
 * or FAWN_EIO (*n = 0) when the file ends before a->length bytes (it was
 * truncated while being sent) or cannot be read: the sender must then end
 * the response short, never wait for bytes that will not come. */
FAWN_MUST_CHECK int artifact_body_read(size_t *n, const artifact_response *a, uint64_t pos,
                                       char *buf, size_t max);

/* Parses one Range header value against a representation of size bytes.
 * Returns 0 with *start and *len (> 0, start + len <= size) for a single
 * satisfiable byte range ("bytes=A-B", "bytes=A-", "bytes=-N"; a last
 * position past the end is cut to it; the unit is case-insensitive, spaces
 * or tabs may surround the range). FAWN_E2BIG when that range is
 * unsatisfiable (A >= size, a suffix of 0, any range of an empty file).
 * FAWN_ENOENT when the header must be ignored: another unit, several ranges,
 * B < A, anything but plain decimal digits, a number above UINT64_MAX, or a
 * value longer than a single range can be. *start and *len stay 0 unless it
 * returns 0. header may be NULL (FAWN_ENOENT). */
FAWN_MUST_CHECK int artifact_range_parse(uint64_t *start, uint64_t *len, const char *header,
                                         uint64_t size);

typedef struct artifact_put_result {
    char path[VPATH_SHOWN_MAX]; /* the normalized virtual path */
    char sha256[65];            /* lowercase hex of the bytes now stored */
    uint64_t size;              /* bytes now stored */
} artifact_put_result;

/* Replaces an existing text file in /mnt/user-data/outputs with content
 * (content_len bytes, not NUL-terminated), provided the file still holds the
 * bytes whose SHA-256 the client saw (expected_sha256, 64 lowercase hex).
 *
 * The path is decoded once and its dot segments collapsed before the check,
 * and must lie strictly under outputs. No symlink is followed: not in the
 * file's directories, not the file itself. The file must exist and be a
 * regular file with a single link; its current bytes are read through the
 * descriptor that is then replaced, and must be UTF-8 text within
 * ARTIFACT_EDIT_MAX_BYTES. The replacement is atomic and durable: a staging
 * file ".fawn-tmp-<random>" in the same directory with the file's
 * permission bits (and owner, when the process may set it), written,
 * fsynced, renamed over the file, then the directory fsynced.
 *
 * Concurrency: the check and the rename run under an exclusive flock() on
 * the opened original, taken without waiting, and the name is checked to
 * still refer to that file once the lock is held. Of concurrent PUTs with the
 * same expected_sha256 (from any thread or process of fawn) at most one
 * succeeds; the others get FAWN_EBUSY or FAWN_ESTALE. Writers that take no
 * lock (an agent's tools) are kept out by the caller refusing edits while the
 * thread has an active run.
 *
 * Returns 0 with *out filled, or the path errors above and:
 *   FAWN_EINVAL malformed expected_sha256; "Only files under
 *               /mnt/user-data/outputs are allowed" (any other path, outputs
 *               itself, /mnt/skills); a symlink inside /mnt/user-data;
 *               "Path is not a file: P" (directory or special file);
 *   FAWN_EPERM  a file with several hard links (as vpath_check_writable);
 *   FAWN_ENOENT "Artifact not found: P" (also for a staging file);
 *   FAWN_EUNSUP content or the current file holds NUL or is not UTF-8;
 *   FAWN_E2BIG  content or the current file is over ARTIFACT_EDIT_MAX_BYTES, or
 *               the new bytes do not fit the thread's disk quota (or the disk);
 *   FAWN_ESTALE "Artifact changed since it was opened" (file unchanged);
 *   FAWN_EBUSY  another save of the same file is in progress;
 *   FAWN_EIO. The request body is checked before the file system is touched. */
FAWN_MUST_CHECK int artifact_put(artifact_put_result *out, const vpath_roots *roots,
                                 const char *encoded_tail, const char *content, size_t content_len,
                                 const char *expected_sha256);

#endif
