/* File operations of the box API, under the sandbox's virtual paths.
 *
 * Every path goes through vpath_parse() and is opened with fsx_open_beneath()
 * against the root's directory fd, so nothing a command planted (symlinks,
 * hard links, FIFOs, device nodes) can redirect an operation outside its root.
 * Writes never follow a symlink in any component; reads follow only symlinks
 * that stay beneath the root. /mnt/skills is read-only.
 *
 * Every out-parameter is set on every path, failures included (NULL, -1,
 * 0, "" before anything can fail). */
#ifndef FAWN_BOX_FILES_H
#define FAWN_BOX_FILES_H

#include <jansson.h>
#include <stddef.h>

#include "box/http.h"
#include "paths/paths.h"
#include "base/base.h"

typedef struct box_file_limits {
    size_t read_max_bytes;     /* bytes of content a read returns before cutting (default 1 MiB) */
    size_t write_max_bytes;    /* largest content one write accepts (default 10 MiB) */
    size_t upload_max_bytes;   /* largest upload body (default 100 MiB) */
    size_t download_max_bytes; /* largest file a download serves (default 100 MiB) */
    size_t list_max_entries;   /* entries a list returns before truncating (default 1000) */
    size_t glob_max_results;   /* hard cap on glob results (default 1000) */
    size_t grep_max_results;   /* hard cap on grep matches (default 500) */
} box_file_limits;

/* The defaults above, in one place. */
box_file_limits box_file_limits_default(void);

typedef struct box_files {
    vpath_roots roots; /* /mnt/user-data and /mnt/skills (or -1) */
    box_file_limits limits;
} box_files;

/* JSON operations. Each validates `req` (unknown fields refused), performs
 * the operation and stores a new reply object in *out (caller decrefs).
 * Errors are negative FAWN_E* codes with fawn_err() messages:
 * FAWN_EINVAL 400, FAWN_EPERM 403, FAWN_ENOENT 404, FAWN_EEXIST 409,
 * FAWN_E2BIG 413, anything else 500. See docs/box-api.md for the schemas. */
FAWN_MUST_CHECK int box_file_read(json_t **out, const json_t *req, const box_files *f);
FAWN_MUST_CHECK int box_file_write(json_t **out, const json_t *req, const box_files *f);
FAWN_MUST_CHECK int box_file_list(json_t **out, const json_t *req, const box_files *f);
FAWN_MUST_CHECK int box_file_glob(json_t **out, const json_t *req, const box_files *f);
FAWN_MUST_CHECK int box_file_grep(json_t **out, const json_t *req, const box_files *f);

/* Streamed operations; they answer on c themselves.
 * upload:   POST /v1/file/upload?path=P[&overwrite=true] with the raw bytes as body.
 * download: GET  /v1/file/download?path=P streams the file. */
void box_file_upload(http_conn *c, const http_request *req, const box_files *f);
void box_file_download(http_conn *c, const http_request *req, const box_files *f);

#endif
