/* Internals of the box's file operations, shared by src/box/files.c (paths,
 * read, write, list, streamed upload and download), files_search.c (glob,
 * grep) and files_http.c (the HTTP face); their tests include it too. The
 * rest of fawn uses box/files.h. */
#ifndef FAWN_BOX_FILES_INTERNAL_H
#define FAWN_BOX_FILES_INTERNAL_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <sys/stat.h>

#include "box/files.h"
#include "paths/paths.h"
#include "base/base.h"

/* A NUL byte in this many leading bytes marks a file as binary (git's and grep's heuristic). */
#define FILES_SNIFF_BYTES 8192

typedef bool (*name_filter)(const char *name);

typedef struct names {
    char **v;
    size_t n, cap;
} names;

/* Stores v in *out, or FAWN_ENOMEM when v is NULL. */
FAWN_MUST_CHECK int files_reply_set(json_t **out, json_t *v);
/* Length of the valid UTF-8 character at s (at most n bytes), or 0. */
size_t files_utf8_char_at(const char *s, size_t n);
/* Characters in s[0..n) (each invalid byte counts as one). */
size_t files_utf8_count_chars(const char *s, size_t n);
/* Frees the names and empties nm. */
void files_names_free(names *nm);
/* Names the API can address and show: valid UTF-8 file names, not staging files. */
bool files_name_addressable(const char *name);
/* Reads the names in dirfd that keep() accepts, sorted. Every name read is
 * charged to *budget; when it runs out *cut is set and reading stops. */
FAWN_MUST_CHECK int files_names_read(names *out, int dirfd, size_t *budget, bool *cut,
                                     name_filter keep);
/* Room for a path below a directory shown as `shown` so that the full
 * virtual path still parses (shorter than VPATH_MAX). */
size_t files_rel_room(const char *shown);
/* Directory entries one list, glob or grep looks at before stopping with truncated=true. */
#define WALK_MAX_VISITS 100000

/* Reads up to n body bytes into buf: the count, 0 at the end of the body, or
 * a negative FAWN_E* code (with its message set). */
typedef ssize_t (*box_body_read_fn)(void *ctx, void *buf, size_t n);

/* Sends n bytes onward: 0 or a negative FAWN_E* code. */
typedef int (*box_chunk_write_fn)(void *ctx, const void *data, size_t n);

/* Stores exactly content_length bytes from read_body at the virtual path
 * `path` (under /mnt/user-data/{workspace,uploads,outputs} only). The bytes
 * go to a ".upload-*.part" staging file in the target directory that is
 * renamed into place once complete (base/fsx.h's staging-file writer: a new
 * file is mode 0644, a replaced one keeps its mode and, where the box may
 * set it, its owner); an existing target is replaced only when overwrite is
 * true (and only if it is a regular file with one link, not a symlink). On
 * any failure, including a body shorter than content_length (FAWN_EPROTO),
 * nothing is left behind. On success *out is a new {path, size, sha256}
 * object (caller decrefs). Errors: FAWN_EINVAL, FAWN_EPERM, FAWN_ENOENT,
 * FAWN_EEXIST (target exists, no overwrite), FAWN_E2BIG (content_length
 * over limits.upload_max_bytes, checked before anything is read; or a full
 * disk or quota), FAWN_EBUSY (the staging file was replaced meanwhile),
 * FAWN_EPROTO, FAWN_EIO, or the reader's own code. */
FAWN_MUST_CHECK int box_file_upload_stream(json_t **out, const box_files *f, const char *path,
                                           bool overwrite, int64_t content_length,
                                           box_body_read_fn read_body, void *ctx);

/* Opens the regular file at virtual path `path` for a download (symlinks
 * followed only beneath their root, never blocking on a FIFO). Stores the fd
 * (caller closes) and the size to send. Errors: FAWN_EINVAL (not a regular
 * file, bad path), FAWN_EPERM, FAWN_ENOENT, FAWN_E2BIG (larger than
 * limits.download_max_bytes), FAWN_EIO. */
FAWN_MUST_CHECK int box_file_download_open(int *fd_out, uint64_t *size_out, const box_files *f,
                                           const char *path);

/* Sends exactly `size` bytes of fd through write_chunk with a fixed buffer.
 * FAWN_EIO when the file ends early (it shrank while being sent), or the
 * writer's code. Never sends more than size bytes, even if the file grew. */
FAWN_MUST_CHECK int box_file_download_copy(int fd, uint64_t size, box_chunk_write_fn write_chunk,
                                           void *ctx);

#endif
