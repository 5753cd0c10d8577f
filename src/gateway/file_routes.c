/* A thread's files over HTTP: uploads (multipart, streamed to staging
 * files, committed together) and artifacts (any file under
 * /mnt/user-data to read, files under outputs to edit). The rules live in
 * uploads.c, artifacts.c and src/paths; this file only connects them to
 * requests. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json.h"
#include "gateway/artifacts.h"
#include "gateway/internal.h"
#include "gateway/multipart.h"
#include "gateway/uploads.h"
#include "paths/paths.h"

/* Multipart framing allowed beyond the files' own bytes: part headers and
 * boundaries of at most max_files files, and small text fields. */
#define UPLOAD_FRAMING_MAX ((uint64_t)1 << 20)
/* A PUT body holds the content JSON-escaped: at worst six bytes per byte
 * (\u001f), plus the hash and the field names. */
#define ARTIFACT_PUT_BODY_MAX (6 * ARTIFACT_EDIT_MAX_BYTES + 4096)
/* The multipart field that carries files. */
#define UPLOAD_FIELD "files"

static upload_limits limits_from_config(const fawn_config *cfg) {
    return (upload_limits){.max_files = cfg->uploads.max_files,
                           .max_file_size = cfg->uploads.max_file_size_mb << 20,
                           .max_total_size = cfg->uploads.max_total_size_mb << 20};
}

/* Opens the thread's uploads directory without following a symlink the
 * sandbox may have put in its place (app_uploads_dir_open). */
static int uploads_dir_open(int *out, uint64_t *room, gw_request *rq, const store_thread *t,
                            bool create) {
    return app_uploads_dir_open(out, room, rq->g->app, rq->who.user.id, t->id, create);
}

/* ---- POST uploads: a streamed multipart body ---- */

typedef struct upload_request {
    store_thread thread;
    int dirfd;
    upload_batch *batch;
    multipart_parser *parser;
    bool in_file;      /* the current part is a file being staged */
    uint64_t received; /* body bytes so far */
    uint64_t body_max;
} upload_request;

static int on_part_begin(void *ctx, const multipart_part *part) {
    upload_request *u = ctx;
    u->in_file = part->filename && strcmp(part->name, UPLOAD_FIELD) == 0;
    return u->in_file ? upload_file_begin(u->batch, part->filename) : 0;
}

static int on_part_data(void *ctx, const char *data, size_t len) {
    upload_request *u = ctx;
    return u->in_file ? upload_file_write(u->batch, data, len) : 0;
}

static int on_part_end(void *ctx) {
    upload_request *u = ctx;
    bool was_file = u->in_file;
    u->in_file = false;
    return was_file ? upload_file_end(u->batch) : 0;
}

static const multipart_callbacks upload_callbacks = {on_part_begin, on_part_data, on_part_end};

static int upload_open(gw_request *rq) {
    upload_request *u = calloc(1, sizeof *u);
    if (!u)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    u->dirfd = -1;
    rq->stream_ctx = u;
    upload_limits lim = limits_from_config(rq->g->cfg);
    u->body_max = lim.max_total_size + UPLOAD_FRAMING_MAX;
    const char *length = gw_header(rq, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (length && strtoull(length, NULL, 10) > u->body_max)
        return fawn_err(FAWN_E2BIG, "Total upload size too large: maximum is %llu bytes",
                        (unsigned long long)lim.max_total_size);
    const char *type = gw_header(rq, MHD_HTTP_HEADER_CONTENT_TYPE);
    char boundary[MULTIPART_BOUNDARY_MAX + 1];
    int r = multipart_boundary(boundary, type ? type : "");
    if (r == 0)
        r = gw_thread_resolve(&u->thread, rq, true);
    if (r == 0)
        r = uploads_dir_open(&u->dirfd, &lim.disk_room, rq, &u->thread, true);
    if (r == 0)
        r = upload_batch_begin(&u->batch, u->dirfd, &lim);
    if (r == 0)
        r = multipart_new(&u->parser, boundary, &upload_callbacks, u);
    return r;
}

static int upload_feed(gw_request *rq, const char *data, size_t len) {
    upload_request *u = rq->stream_ctx;
    u->received += len;
    if (u->received > u->body_max)
        return fawn_err(FAWN_E2BIG, "Total upload size too large: maximum is %llu bytes",
                        (unsigned long long)(u->body_max - UPLOAD_FRAMING_MAX));
    return multipart_feed(u->parser, data, len);
}

static void upload_close(gw_request *rq) {
    upload_request *u = rq->stream_ctx;
    if (!u)
        return;
    upload_batch_abort(u->batch); /* NULL once committed */
    multipart_free(u->parser);
    if (u->dirfd >= 0)
        close(u->dirfd);
    store_thread_clear(&u->thread);
    free(u);
    rq->stream_ctx = NULL;
}

/* Where boxes do not see this host's thread directories (remote
 * placement), the uploaded files are copied into the thread's box
 * (app_uploads_sync). */
static int uploads_sync(gw_request *rq, const upload_request *u, const json_t *result) {
    bool copied;
    return app_uploads_sync(&copied, rq->g->app, &rq->who.user, u->thread.id, u->dirfd,
                            json_object_get(result, "files"));
}

static int route_upload(gw_request *rq) {
    upload_request *u = rq->stream_ctx;
    int r = multipart_finish(u->parser);
    json_t *result = NULL;
    if (r == 0)
        r = upload_batch_commit(steal_ptr(u->batch), &result, u->thread.id);
    if (r < 0)
        return r;
    if (uploads_sync(rq, u, result) < 0) {
        json_decref(result);
        char detail[600];
        snprintf(detail, sizeof detail, "Uploaded, but not copied into the sandbox: %s",
                 fawn_errmsg());
        return gw_respond_detail(rq, MHD_HTTP_BAD_GATEWAY, detail);
    }
    return gw_respond_json(rq, MHD_HTTP_OK, result);
}

static const gw_stream_ops upload_stream = {upload_open, upload_feed, upload_close};

/* ---- listing, limits, deletion ---- */

static int route_upload_list(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    _cleanup_close_ int dirfd = -1;
    json_t *list = NULL;
    r = uploads_dir_open(&dirfd, NULL, rq, &t, false);
    if (r == 0)
        r = uploads_list(&list, dirfd, t.id);
    else if (r == FAWN_ENOENT) /* nothing uploaded yet */
        r = (list = json_pack("{s:[],s:i}", "files", "count", 0)) ? 0 : FAWN_ENOMEM;
    store_thread_clear(&t);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, list);
}

/* The limits are the configuration's, the same for every thread: they are
 * answered for any well-formed id, before its thread exists (a new chat
 * asks before its first message creates it), so the answer tells nothing
 * about whether the caller, or anyone, has that thread. */
static int route_upload_limits(gw_request *rq) {
    if (!fawn_id_valid(rq->params[0]))
        return fawn_err(FAWN_ENOENT, "Thread not found");
    upload_limits lim = limits_from_config(rq->g->cfg);
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:i,s:I,s:I}", "max_files", (int)lim.max_files,
                                     "max_file_size", (json_int_t)lim.max_file_size,
                                     "max_total_size", (json_int_t)lim.max_total_size));
}

static int route_upload_delete(gw_request *rq) {
    char name[VPATH_NAME_MAX + 1];
    int r = vpath_percent_decode(name, sizeof name, rq->params[1]);
    store_thread t = {0};
    if (r == 0)
        r = gw_thread_resolve(&t, rq, false);
    _cleanup_close_ int dirfd = -1;
    if (r == 0)
        r = uploads_dir_open(&dirfd, NULL, rq, &t, false);
    if (r == 0)
        r = uploads_delete(dirfd, name);
    store_thread_clear(&t);
    if (r < 0)
        return r;
    char message[VPATH_NAME_MAX + 16];
    snprintf(message, sizeof message, "Deleted %s", name);
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:b,s:s}", "success", 1, "message", message));
}

/* ---- artifacts ---- */

/* The thread's roots for the artifact rules: its user-data directory. */
static int artifact_roots(vpath_roots *roots, gw_request *rq, bool for_write) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    if (for_write && strcmp(t.status, "busy") == 0)
        r = fawn_err(FAWN_EBUSY, "Thread %s has a run in progress", t.id);
    else if ((r = gw_thread_files_open(&roots->user_data_fd, rq, &t, false)) == FAWN_ENOENT)
        r = fawn_err(FAWN_ENOENT, "Artifact not found"); /* the thread has no files yet */
    store_thread_clear(&t);
    return r;
}

/* The response that sends a's body straight from its file: libmicrohttpd
 * hands the open fd to sendfile(2) at a->offset, so the bytes go from the
 * page cache to the socket without being copied through the gateway (it
 * falls back to pread where sendfile cannot be used: TLS, an fd sendfile
 * refuses). The response owns a->fd from here (closed even when this
 * fails: NULL, out of memory). A file truncated while it is sent would
 * leave the client waiting: the connection watcher ends such a download
 * short (gw_conns_file_sending). */
static struct MHD_Response *artifact_body_response(const artifact_response *a) {
    struct MHD_Response *resp = MHD_create_response_from_fd_at_offset64(a->length, a->fd,
                                                                        a->offset);
    if (!resp)
        close(a->fd);
    return resp;
}

static void artifact_headers(struct MHD_Response *resp, const artifact_response *a) {
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, a->content_type);
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, a->content_disposition);
    MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
    /* Served files never run as part of this origin, even when inline. */
    MHD_add_response_header(resp, "Content-Security-Policy", "sandbox");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_ACCEPT_RANGES, "bytes");
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    if (a->content_range[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, a->content_range);
}

static int respond_unsatisfiable(gw_request *rq, const artifact_response *a) {
    struct MHD_Response *resp = gw_json_response(
        json_pack("{s:s}", "detail", "Requested range not satisfiable"));
    if (resp)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_RANGE, a->content_range);
    return gw_queue(rq, MHD_HTTP_RANGE_NOT_SATISFIABLE, resp);
}

static int route_artifact_get(gw_request *rq) {
    vpath_roots roots = {.user_data_fd = -1, .skills_fd = -1};
    int r = artifact_roots(&roots, rq, false);
    const char *download = gw_query(rq, "download");
    bool attach = download && (strcmp(download, "true") == 0 || strcmp(download, "1") == 0);
    /* No validators are offered, so a conditional range gets the whole file. */
    const char *range = gw_header(rq, MHD_HTTP_HEADER_IF_RANGE)
                            ? NULL
                            : gw_header(rq, MHD_HTTP_HEADER_RANGE);
    artifact_response a = {.fd = -1};
    if (r == 0)
        r = artifact_get(&a, &roots, rq->params[1], range, attach);
    if (roots.user_data_fd >= 0)
        close(roots.user_data_fd);
    if (r < 0)
        return r;
    if (a.status == MHD_HTTP_RANGE_NOT_SATISFIABLE)
        return respond_unsatisfiable(rq, &a);
    r = gw_conns_file_sending(rq->g->conns, rq->conn, a.fd, a.offset + a.length);
    if (r < 0) {
        close(a.fd);
        return r;
    }
    struct MHD_Response *resp = artifact_body_response(&a);
    if (!resp)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    artifact_headers(resp, &a);
    return gw_queue(rq, a.status, resp);
}

static int put_body_read(json_t **body, const char **content, size_t *len, const char **sha,
                         const gw_request *rq) {
    static const char *const keys[] = {"content", "expected_sha256", NULL};
    /* NUL is allowed through JSON so that the content rules, not the
     * parser, refuse it (415, not 400). */
    *body = json_loadb(rq->body.data ? rq->body.data : "", rq->body.len,
                       JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(*body))
        return fawn_err(FAWN_EINVAL, "the body must be a JSON object");
    int r = fjson_check_keys(*body, keys);
    if (r == 0)
        r = fjson_get_string(sha, *body, "expected_sha256", true);
    json_t *c = json_object_get(*body, "content");
    if (r == 0 && !json_is_string(c))
        r = fawn_err(FAWN_EINVAL, "content must be a string");
    if (r == 0) {
        *content = json_string_value(c);
        *len = json_string_length(c);
    }
    return r;
}

static int route_artifact_put(gw_request *rq) {
    json_t *body = NULL;
    const char *content = NULL, *sha = NULL;
    size_t len = 0;
    vpath_roots roots = {.user_data_fd = -1, .skills_fd = -1};
    int r = put_body_read(&body, &content, &len, &sha, rq);
    if (r == 0)
        r = artifact_roots(&roots, rq, true);
    artifact_put_result out;
    if (r == 0)
        r = artifact_put(&out, &roots, rq->params[1], content, len, sha);
    if (roots.user_data_fd >= 0)
        close(roots.user_data_fd);
    json_decref(body);
    if (r < 0)
        return r;
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:s,s:s,s:I}", "path", out.path, "sha256", out.sha256,
                                     "size", (json_int_t)out.size));
}

const gw_route gw_file_routes[] = {
    {"POST", "/api/threads/{}/uploads", route_upload, AUTHZ_THREADS_WRITE, GW_BODY_STREAM, 0,
     &upload_stream},
    {"GET", "/api/threads/{}/uploads/list", route_upload_list, AUTHZ_THREADS_READ, GW_BODY_NONE, 0,
     NULL},
    {"GET", "/api/threads/{}/uploads/limits", route_upload_limits, AUTHZ_THREADS_READ, GW_BODY_NONE,
     0, NULL},
    {"DELETE", "/api/threads/{}/uploads/{}", route_upload_delete, AUTHZ_THREADS_DELETE,
     GW_BODY_NONE, 0, NULL},
    {"GET", "/api/threads/{}/artifacts/{*}", route_artifact_get, AUTHZ_THREADS_READ, GW_BODY_NONE,
     0, NULL},
    {"PUT", "/api/threads/{}/artifacts/{*}", route_artifact_put, AUTHZ_THREADS_WRITE,
     GW_BODY_BUFFER, ARTIFACT_PUT_BODY_MAX, NULL},
};
const size_t gw_file_routes_count = ARRAY_LEN(gw_file_routes);
