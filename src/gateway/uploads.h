/* Thread uploads: the transport-independent core of
 * POST/GET/DELETE /api/threads/{tid}/uploads.
 *
 * A request is a batch. Each file streams into its own staging file
 * ".upload-<random>.part" in the uploads directory itself; nothing is renamed
 * into place until the whole request has arrived within its limits. Commit
 * then checks each destination and renames the staging file over it (a new
 * file is mode 0644; a replaced one keeps its permission bits and, where the
 * gateway may set it, its owner: base/fsx.h's staging-file writer), so a
 * request that fails (bad name, limit, client gone) leaves nothing behind and
 * existing files keep their bytes. A destination that is a symlink (live or
 * dangling), not a regular file, or has several hard links is never written:
 * the file is reported in "skipped_files".
 *
 * Every function takes the O_DIRECTORY fd of one thread's uploads directory
 * (borrowed; never closed here) and touches nothing outside it. Names are
 * single file names: the client's name is cut to the part after its last
 * '/', then refused (FAWN_EINVAL, whole request) when empty, "." or "..",
 * longer than VPATH_NAME_MAX bytes, not valid UTF-8, a staging name, or when
 * it holds a backslash or a control character. The caller passes names as C
 * strings, so a name with an embedded NUL must be refused by the caller.
 *
 * Every out-parameter is set on every path, failures included (NULL, 0
 * before anything can fail). */
#ifndef FAWN_GATEWAY_UPLOADS_H
#define FAWN_GATEWAY_UPLOADS_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include "base/base.h"

/* Per-request limits (from config uploads.*, and the thread's disk limit);
 * every field is required. */
typedef struct upload_limits {
    uint32_t max_files;      /* files in one request */
    uint64_t max_file_size;  /* bytes of one file */
    uint64_t max_total_size; /* bytes of all files of one request */
    uint64_t disk_room;      /* bytes the thread's files may still grow by (quota_room; may
                                be 0; UINT64_MAX when the kernel holds the limit itself) */
} upload_limits;

/* Directory entries a listing or a sweep examines: far more than uploads a
 * thread gathers, few enough that one request stays cheap. */
#define UPLOADS_SCAN_MAX_ENTRIES 10000

typedef struct upload_batch upload_batch;

/* Starts a request's batch in *out. uploads_dirfd is borrowed (O_DIRECTORY
 * fd of the thread's uploads directory) and must stay open until commit or
 * abort. lim is copied. FAWN_EINVAL for a negative fd or a missing or
 * zero limit, FAWN_ENOMEM. Free with upload_batch_commit or
 * upload_batch_abort.
 *
 * The upload_file_* functions below are called in the order a multipart body
 * presents its files: begin, any number of writes, end. When one of them
 * fails, the batch has already removed every staging file it made and every
 * later call (commit included) fails with the same code and message; the
 * caller still frees it with upload_batch_abort (or commit). */
FAWN_MUST_CHECK int upload_batch_begin(upload_batch **out, int uploads_dirfd,
                                       const upload_limits *lim);

/* Starts the next file, named by the client's file name (an empty name, a
 * part with no file chosen, is refused like any bad name). Creates its
 * staging file (mode 0600 until the commit). A name already used in this
 * request becomes "stem_1.ext", "stem_2.ext", ... Errors: FAWN_E2BIG "Too
 * many files: maximum is N", or no room on the disk or in its quota;
 * FAWN_EINVAL naming what is wrong with the name (without echoing it) or
 * when a file is already open; FAWN_EPERM when the kernel refuses the
 * staging file; FAWN_EIO. */
FAWN_MUST_CHECK int upload_file_begin(upload_batch *b, const char *client_filename);

/* Appends len bytes to the open file. FAWN_E2BIG ("File too large: NAME
 * exceeds N bytes", "Total upload size too large: maximum is N bytes", "The
 * thread's files would exceed their disk limit...") before any byte past a
 * limit is written, and also when the kernel refuses a write for the
 * thread's disk quota or a full disk (EDQUOT, ENOSPC); FAWN_EINVAL when no
 * file is open; FAWN_EIO. */
FAWN_MUST_CHECK int upload_file_write(upload_batch *b, const void *data, size_t len);

/* Ends the open file: flushes its staging file to disk (fsync) and closes
 * it. FAWN_EINVAL when no file is open; FAWN_E2BIG for a quota or a full
 * disk as above; FAWN_EIO. */
FAWN_MUST_CHECK int upload_file_end(upload_batch *b);

/* Completes the request: checks each destination again right before
 * renaming its staging file over it, fsyncs the directory, and stores the
 * response body in *result (caller json_decref()s):
 *   {"success": bool, "files": [...], "message": "...", "skipped_files": [NAME, ...]}
 * with each file entry
 *   {"filename", "size", "path" (the virtual path), "virtual_path":
 *    "/mnt/user-data/uploads/NAME", "artifact_url":
 *    "/api/threads/THREAD/artifacts/mnt/user-data/uploads/PERCENT-ENCODED-NAME",
 *    "original_filename" (only for a renamed duplicate)}.
 * success is false when a file was skipped (its staging file is removed).
 * thread_id is used for artifact_url only. Frees b in all cases. Errors, all
 * before anything is renamed and with every staging file removed: the
 * batch's own earlier error; FAWN_EINVAL for "No files provided", a file not
 * ended, or a bad thread_id; FAWN_ENOMEM. */
FAWN_MUST_CHECK int upload_batch_commit(upload_batch *b, json_t **result, const char *thread_id);

/* Removes everything the batch staged and frees b. NULL is fine. */
void upload_batch_abort(upload_batch *b);

/* Lists the uploads directory into *out (caller json_decref()s):
 *   {"files": [{"filename", "size", "path", "virtual_path", "artifact_url",
 *               "extension" (".ext" as written, or ""), "modified" (seconds,
 *               fractional)}], "count": n}
 * sorted by name. Only regular files are listed (not symlinks, directories
 * or others), and only those with a valid name; staging files are hidden.
 * At most UPLOADS_SCAN_MAX_ENTRIES directory entries are examined; past
 * that the listing is cut and carries "truncated": true. FAWN_EINVAL for a
 * bad thread_id; FAWN_EIO; FAWN_ENOMEM. */
FAWN_MUST_CHECK int uploads_list(json_t **out, int uploads_dirfd, const char *thread_id);

/* Deletes one uploaded file by name. A symlink is removed itself, never its
 * target. FAWN_EINVAL for a refused name (as above, and any '/') or a
 * directory or other non-file; FAWN_ENOENT "File not found: NAME"; FAWN_EIO. */
FAWN_MUST_CHECK int uploads_delete(int uploads_dirfd, const char *filename);

/* Removes the upload staging files (regular files named ".upload-*.part")
 * a crash left in the directory and stores how many in *removed. Call it
 * when no upload into the directory is in progress (at start). Examines at
 * most UPLOADS_SCAN_MAX_ENTRIES entries. FAWN_EIO when the directory cannot
 * be read. */
FAWN_MUST_CHECK int uploads_sweep_staging(int uploads_dirfd, size_t *removed);

#endif
