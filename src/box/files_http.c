/* HTTP face of the streamed file operations: query parsing, status codes,
 * and the glue between box/http.h and the transport-free core in files.c. */
#include <string.h>

#include "box/files.h"
#include "box/files_internal.h"
#include "paths/paths.h"

/* The required ?path= parameter, decoded once by http_query_get. */
static int query_path(char *out, size_t outsz, const http_request *req) {
    int r = http_query_get(out, outsz, req, "path");
    if (r == FAWN_ENOENT)
        return fawn_err(FAWN_EINVAL, "query parameter 'path' is required");
    if (r == FAWN_E2BIG)
        return fawn_err(FAWN_EINVAL, "query parameter 'path' is longer than %zu bytes", outsz - 1);
    return r;
}

/* ?overwrite=true|false (absent: false). */
static int query_overwrite(bool *out, const http_request *req) {
    char value[8];
    int r = http_query_get(value, sizeof value, req, "overwrite");
    *out = false;
    if (r == FAWN_ENOENT)
        return 0;
    if (r == 0 && (strcmp(value, "true") == 0 || strcmp(value, "false") == 0)) {
        *out = value[0] == 't';
        return 0;
    }
    return fawn_err(FAWN_EINVAL, "query parameter 'overwrite' must be true or false");
}

static ssize_t body_read(void *ctx, void *buf, size_t n) { return http_body_read(ctx, buf, n); }

static int stream_write(void *ctx, const void *data, size_t n) {
    return http_stream_write(ctx, data, n);
}

void box_file_upload(http_conn *c, const http_request *req, const box_files *f) {
    char path[VPATH_MAX];
    bool overwrite = false;
    int r;
    if ((r = query_path(path, sizeof path, req)) < 0 ||
        (r = query_overwrite(&overwrite, req)) < 0) {
        http_respond_failure(c, r);
        return;
    }
    if (req->content_length < 0) {
        http_respond_error(c, 411, "length_required", "an upload needs a Content-Length header");
        return;
    }
    json_t *reply = NULL;
    r = box_file_upload_stream(&reply, f, path, overwrite, req->content_length, body_read, c);
    if (r < 0) {
        http_respond_failure(c, r);
        return;
    }
    http_respond_json(c, 200, reply);
    json_decref(reply);
}

void box_file_download(http_conn *c, const http_request *req, const box_files *f) {
    char path[VPATH_MAX];
    _cleanup_close_ int fd = -1;
    uint64_t size = 0;
    int r;
    if ((r = query_path(path, sizeof path, req)) < 0 ||
        (r = box_file_download_open(&fd, &size, f, path)) < 0) {
        http_respond_failure(c, r);
        return;
    }
    if (http_stream_begin(c, 200, "application/octet-stream", NULL) < 0)
        return;
    r = box_file_download_copy(fd, size, stream_write, c);
    /* Without the final chunk the client sees a truncated body, not a short file. */
    if (r == 0)
        r = http_stream_end(c);
    if (r < 0)
        log_warn("files", "download of %s cut short: %s", path, fawn_errmsg());
}
