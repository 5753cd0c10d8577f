#include "gateway/uploads.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/base.h"
#include "base/fsx.h"
#include "base/json.h"
#include "paths/paths.h"

/* A file name percent-encoded: each byte at most "%XX". */
#define ENCODED_NAME_SIZE (3 * VPATH_NAME_MAX + 1)
/* "/api/threads/" + a thread id (at most 64) + "/artifacts" + the uploads virtual path. */
#define ARTIFACT_URL_SIZE (128 + sizeof VPATH_USER_DATA + ENCODED_NAME_SIZE)
/* An error message kept for repeating: a sentence and a file name fit. */
#define FAILED_MSG_SIZE (256 + VPATH_NAME_MAX)
/* "/mnt/user-data/uploads/" + a file name + NUL. */
#define VIRTUAL_PATH_SIZE (sizeof VPATH_USER_DATA + sizeof "/uploads/" + VPATH_NAME_MAX)

typedef struct staged_file {
    char name[VPATH_NAME_MAX + 1];     /* destination name */
    char original[VPATH_NAME_MAX + 1]; /* the client's name cut to its base name */
    fsx_staged stage;                  /* its staging file in the uploads directory */
    uint64_t size;
    bool skipped; /* left out at commit: unsafe destination or tampered staging file */
} staged_file;

struct upload_batch {
    int dirfd; /* borrowed */
    upload_limits lim;
    staged_file *files;
    size_t n, cap;
    bool open;                        /* the last file is being written */
    uint64_t total;                   /* bytes of every file so far */
    int failed;                       /* 0, or the code of the error that ended the batch */
    char failed_msg[FAILED_MSG_SIZE]; /* its message, repeated by every later call */
};

/* ---- names ---- */

/* What is wrong with name, or NULL when it is an acceptable upload name. The
 * verdict is vpath_name_valid's and vpath_is_staging_name's; the rest only
 * words it for the client. */
static const char *name_refusal(const char *name) {
    if (vpath_name_valid(name)) {
        if (vpath_is_staging_name(name))
            return "Filename is reserved for staging files";
        if (!fawn_utf8_valid(name, strlen(name)))
            return "Filename is not valid UTF-8";
        return NULL;
    }
    size_t n = strnlen(name, VPATH_NAME_MAX + 1);
    if (n == 0)
        return "Filename is empty";
    if (n > VPATH_NAME_MAX)
        return "Filename is too long: more than 255 bytes";
    if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
        return "Filename is unsafe: '.' and '..' are not file names";
    if (strchr(name, '/'))
        return "Filename contains a slash";
    if (strchr(name, '\\'))
        return "Filename contains a backslash";
    return "Filename contains a control character";
}

static int name_check(const char *name) {
    const char *why = name_refusal(name);
    return why ? fawn_err(FAWN_EINVAL, "%s", why) : 0;
}

/* Splits name like Python's pathlib: the suffix starts at the last '.' when
 * that dot is neither the first nor the last character. Returns the stem's length. */
static size_t name_stem_len(const char *name) {
    const char *dot = strrchr(name, '.');
    size_t n = strlen(name);
    if (dot && dot != name && (size_t)(dot - name) < n - 1)
        return (size_t)(dot - name);
    return n;
}

static bool batch_name_taken(const upload_batch *b, const char *name) {
    for (size_t i = 0; i < b->n; i++) {
        if (strcmp(b->files[i].name, name) == 0)
            return true;
    }
    return false;
}

/* Picks f->name: f->original, or "stem_K.ext" with the smallest K free in
 * this request. At most b->n names are taken, so some K <= b->n + 1 is free. */
static int batch_claim_name(upload_batch *b, staged_file *f) {
    if (!batch_name_taken(b, f->original)) {
        memcpy(f->name, f->original, sizeof f->name);
        return 0;
    }
    size_t stem = name_stem_len(f->original);
    for (size_t k = 1; k <= b->n + 1; k++) {
        char cand[VPATH_NAME_MAX + 2];
        int len = snprintf(cand, sizeof cand, "%.*s_%zu%s", (int)stem, f->original, k,
                           f->original + stem);
        if (len < 0 || (size_t)len >= sizeof cand || len > VPATH_NAME_MAX)
            return fawn_err(FAWN_EINVAL, "Filename is too long to number as a duplicate: %s",
                            f->original);
        if (batch_name_taken(b, cand))
            continue;
        int r = name_check(cand);
        if (r < 0)
            return r;
        memcpy(f->name, cand, (size_t)len + 1);
        return 0;
    }
    return fawn_err(FAWN_EINVAL, "No free name for duplicate file %s", f->original);
}

/* ---- URLs ---- */

/* Percent-encodes name like Python's quote(name, safe=''): everything but
 * ASCII letters, digits and "_.-~". out has ENCODED_NAME_SIZE bytes. */
static void name_percent_encode(char out[ENCODED_NAME_SIZE], const char *name) {
    static const char hex[] = "0123456789ABCDEF";
    size_t o = 0;
    for (size_t i = 0; name[i] && i < VPATH_NAME_MAX; i++) {
        unsigned char c = (unsigned char)name[i];
        if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
            strchr("_.-~", c)) {
            out[o++] = (char)c;
        } else {
            out[o++] = '%';
            out[o++] = hex[c >> 4];
            out[o++] = hex[c & 15];
        }
    }
    out[o] = '\0';
}

static int thread_id_check(const char *thread_id) {
    if (!thread_id || !fawn_id_valid(thread_id))
        return fawn_err(FAWN_EINVAL, "invalid thread id");
    return 0;
}

/* The fields every file entry has: filename, size, path, virtual_path, artifact_url. */
static json_t *file_entry_new(const char *name, uint64_t size, const char *thread_id) {
    char vpath_buf[VIRTUAL_PATH_SIZE], enc[ENCODED_NAME_SIZE], url[ARTIFACT_URL_SIZE];
    snprintf(vpath_buf, sizeof vpath_buf, "%s/uploads/%s", VPATH_USER_DATA, name);
    name_percent_encode(enc, name);
    snprintf(url, sizeof url, "/api/threads/%s/artifacts%s/uploads/%s", thread_id, VPATH_USER_DATA,
             enc);
    return json_pack("{s:s, s:I, s:s, s:s, s:s}", "filename", name, "size", (json_int_t)size,
                     "path", vpath_buf, "virtual_path", vpath_buf, "artifact_url", url);
}

/* ---- staging ---- */

/* Removes every staging file of the batch (closing the open one). */
static void batch_discard(upload_batch *b) {
    for (size_t i = 0; i < b->n; i++)
        fsx_staged_abort(&b->files[i].stage);
    b->n = 0;
    b->open = false;
}

/* Ends the batch with error r (already recorded): nothing it staged remains. */
static int batch_fail(upload_batch *b, int r) {
    batch_discard(b);
    b->failed = r;
    snprintf(b->failed_msg, sizeof b->failed_msg, "%s", fawn_errmsg());
    return r;
}

static int batch_usable(const upload_batch *b) {
    if (!b)
        return fawn_err(FAWN_EINVAL, "no upload in progress");
    if (b->failed)
        return fawn_err(b->failed, "%s", b->failed_msg);
    return 0;
}

/* A write refused for the thread's disk quota or a full disk, in words
 * for the client. */
static int no_room(int r) {
    if (r != FAWN_E2BIG)
        return r;
    return fawn_err(FAWN_E2BIG, "No room for the upload: the thread's files reached their disk "
                                "limit, or the disk is full");
}

/* ---- batch ---- */

int upload_batch_begin(upload_batch **out, int uploads_dirfd, const upload_limits *lim) {
    *out = NULL;
    if (uploads_dirfd < 0)
        return fawn_err(FAWN_EINVAL, "no uploads directory");
    if (!lim || !lim->max_files || !lim->max_file_size || !lim->max_total_size)
        return fawn_err(FAWN_EINVAL, "upload limits are required");
    upload_batch *b = calloc(1, sizeof *b);
    if (!b)
        return fawn_err(FAWN_ENOMEM, "out of memory starting an upload");
    b->dirfd = uploads_dirfd;
    b->lim = *lim;
    *out = b;
    return 0;
}

/* A new slot at the end of b->files (not yet counted in b->n). */
static staged_file *batch_slot(upload_batch *b) {
    if (b->n == b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 4;
        staged_file *v = realloc(b->files, cap * sizeof *v);
        if (!v)
            return NULL;
        b->files = v;
        b->cap = cap;
    }
    staged_file *f = &b->files[b->n];
    *f = (staged_file){0};
    return f;
}

/* Fills f's names from the client's file name: the part after its last '/'. */
static int file_name_take(upload_batch *b, staged_file *f, const char *client_filename) {
    const char *slash = strrchr(client_filename, '/');
    const char *base = slash ? slash + 1 : client_filename;
    int r = name_check(base);
    if (r < 0)
        return r;
    memcpy(f->original, base, strlen(base) + 1);
    return batch_claim_name(b, f);
}

static int file_begin(upload_batch *b, const char *client_filename) {
    if (b->open)
        return fawn_err(FAWN_EINVAL, "a file is already being uploaded");
    if (b->n >= b->lim.max_files)
        return fawn_err(FAWN_E2BIG, "Too many files: maximum is %" PRIu32, b->lim.max_files);
    if (!client_filename)
        return fawn_err(FAWN_EINVAL, "Filename is empty");
    staged_file *f = batch_slot(b);
    if (!f)
        return fawn_err(FAWN_ENOMEM, "out of memory starting a file");
    int r = file_name_take(b, f, client_filename);
    if (r == 0)
        r = no_room(fsx_staged_open(&f->stage, b->dirfd, FSX_STAGING_UPLOAD, FSX_USER_FILE_MODE));
    if (r < 0)
        return r;
    b->n++; /* counted now, so discarding removes its staging file */
    b->open = true;
    return 0;
}

int upload_file_begin(upload_batch *b, const char *client_filename) {
    int r = batch_usable(b);
    if (r < 0)
        return r;
    r = file_begin(b, client_filename);
    return r < 0 ? batch_fail(b, r) : 0;
}

static int file_write(upload_batch *b, const void *data, size_t len) {
    if (!b->open)
        return fawn_err(FAWN_EINVAL, "no file is being uploaded");
    staged_file *f = &b->files[b->n - 1];
    if (len > b->lim.max_file_size - f->size)
        return fawn_err(FAWN_E2BIG, "File too large: %s exceeds %" PRIu64 " bytes", f->name,
                        b->lim.max_file_size);
    if (len > b->lim.max_total_size - b->total)
        return fawn_err(FAWN_E2BIG, "Total upload size too large: maximum is %" PRIu64 " bytes",
                        b->lim.max_total_size);
    if (len > b->lim.disk_room - b->total)
        return fawn_err(FAWN_E2BIG,
                        "The thread's files would exceed their disk limit: %" PRIu64
                        " more bytes fit",
                        b->lim.disk_room);
    int r = no_room(fsx_staged_write(&f->stage, data, len));
    if (r < 0)
        return r;
    f->size += len;
    b->total += len;
    return 0;
}

int upload_file_write(upload_batch *b, const void *data, size_t len) {
    int r = batch_usable(b);
    if (r < 0)
        return r;
    r = file_write(b, data, len);
    return r < 0 ? batch_fail(b, r) : 0;
}

static int file_end(upload_batch *b) {
    if (!b->open)
        return fawn_err(FAWN_EINVAL, "no file is being uploaded");
    b->open = false;
    return no_room(fsx_staged_flush(&b->files[b->n - 1].stage));
}

int upload_file_end(upload_batch *b) {
    int r = batch_usable(b);
    if (r < 0)
        return r;
    r = file_end(b);
    return r < 0 ? batch_fail(b, r) : 0;
}

void upload_batch_abort(upload_batch *b) {
    if (!b)
        return;
    batch_discard(b);
    free(b->files);
    free(b);
}

/* ---- commit ---- */

/* Moves f into place, or marks it skipped (its staging file removed): a
 * destination that is a symlink (live or dangling), not a regular file, or
 * has several hard links, and a staging file something else replaced, are
 * refused by fsx_staged_commit. Its check and rename race with whatever else
 * writes the directory (a sandbox mounts it), but renameat only ever
 * replaces the directory entry: a symlink swapped in after the check is
 * itself replaced, not followed, and a hard link's other names keep their
 * inode untouched, so nothing outside the uploads directory can be written
 * through this. */
static void staged_commit(staged_file *f) {
    struct stat st;
    int r = fsx_staged_commit(&st, &f->stage, f->name,
                              FSX_COMMIT_REPLACE | FSX_COMMIT_DEFER_DIR_SYNC, f->name);
    f->skipped = r < 0;
    if (r < 0 && r != FAWN_EPERM && r != FAWN_EINVAL && r != FAWN_EBUSY)
        log_warn("uploads", "putting an upload in place: %s", fawn_errmsg());
    fsx_staged_abort(&f->stage);
}

/* The response body for the committed batch. */
static json_t *commit_result(const upload_batch *b, const char *thread_id) {
    json_t *files = json_array(), *skipped = json_array();
    size_t n_ok = 0, n_skipped = 0;
    bool ok = files && skipped;
    for (size_t i = 0; ok && i < b->n; i++) {
        const staged_file *f = &b->files[i];
        if (f->skipped) {
            ok = json_array_append_new(skipped, json_string(f->name)) == 0;
            n_skipped++;
            continue;
        }
        json_t *e = file_entry_new(f->name, f->size, thread_id);
        if (e && strcmp(f->name, f->original) != 0 &&
            json_object_set_new(e, "original_filename", json_string(f->original)) < 0) {
            json_decref(e);
            e = NULL;
        }
        ok = json_array_append_new(files, e) == 0;
        n_ok++;
    }
    char message[128];
    int len = snprintf(message, sizeof message, "Successfully uploaded %zu file(s)", n_ok);
    if (n_skipped && len > 0)
        snprintf(message + len, sizeof message - (size_t)len, "; skipped %zu unsafe file(s)",
                 n_skipped);
    if (!ok) {
        json_decref(files);
        json_decref(skipped);
        return NULL;
    }
    return json_pack("{s:b, s:o, s:s, s:o}", "success", n_skipped == 0, "files", files, "message",
                     message, "skipped_files", skipped);
}

static int commit_check(const upload_batch *b, const char *thread_id) {
    if (b->open)
        return fawn_err(FAWN_EINVAL, "the upload ended in the middle of a file");
    if (b->n == 0)
        return fawn_err(FAWN_EINVAL, "No files provided");
    return thread_id_check(thread_id);
}

static int batch_commit(upload_batch *b, json_t **result, const char *thread_id) {
    int r = batch_usable(b);
    if (r == 0)
        r = commit_check(b, thread_id);
    if (r < 0) {
        batch_discard(b);
        return r;
    }
    for (size_t i = 0; i < b->n; i++)
        staged_commit(&b->files[i]);
    fsx_dir_sync(b->dirfd, "the uploaded files");
    json_t *res = commit_result(b, thread_id);
    b->n = 0; /* every staging file is renamed or removed */
    if (!res)
        return fawn_err(FAWN_ENOMEM, "out of memory building the upload response");
    *result = res;
    return 0;
}

int upload_batch_commit(upload_batch *b, json_t **result, const char *thread_id) {
    *result = NULL;
    if (!b)
        return fawn_err(FAWN_EINVAL, "no upload in progress");
    int r = batch_commit(b, result, thread_id);
    upload_batch_abort(b);
    return r;
}

/* ---- directory scans ---- */

/* Opens a fresh stream over dirfd's directory (dirfd itself is left alone). */
static DIR *dir_stream_open(int dirfd) {
    int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
    if (!d && fd >= 0)
        close(fd);
    return d;
}

int uploads_sweep_staging(int uploads_dirfd, size_t *removed) {
    *removed = 0;
    DIR *d = dir_stream_open(uploads_dirfd);
    if (!d)
        return fawn_err_sys(FAWN_EIO, errno, "reading the uploads directory");
    struct dirent *e;
    for (size_t seen = 0; seen < UPLOADS_SCAN_MAX_ENTRIES && (e = readdir(d)); seen++) {
        struct stat st;
        if (!fsx_staging_name_is(e->d_name, FSX_STAGING_UPLOAD) ||
            fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode))
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) == 0)
            (*removed)++;
        else if (errno != ENOENT)
            log_warn("uploads", "removing a stale staging file: %s", strerror(errno));
    }
    closedir(d);
    return 0;
}

typedef struct listed_file {
    char *name;
    struct stat st;
} listed_file;

typedef struct listing {
    listed_file *v;
    size_t n, cap;
    bool cut; /* UPLOADS_SCAN_MAX_ENTRIES reached */
} listing;

static void listing_free(listing *l) {
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].name);
    free(l->v);
}

static int listing_push(listing *l, const char *name, const struct stat *st) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        listed_file *v = realloc(l->v, cap * sizeof *v);
        if (!v)
            return fawn_err(FAWN_ENOMEM, "out of memory listing uploads");
        l->v = v;
        l->cap = cap;
    }
    if (!(l->v[l->n].name = strdup(name)))
        return fawn_err(FAWN_ENOMEM, "out of memory listing uploads");
    l->v[l->n++].st = *st;
    return 0;
}

/* Collects the regular files with acceptable names. */
static int listing_read(listing *l, int uploads_dirfd) {
    DIR *d = dir_stream_open(uploads_dirfd);
    if (!d)
        return fawn_err_sys(FAWN_EIO, errno, "reading the uploads directory");
    int r = 0;
    size_t seen = 0;
    struct dirent *e;
    while (r == 0 && (e = readdir(d))) {
        if (seen++ == UPLOADS_SCAN_MAX_ENTRIES) {
            l->cut = true;
            break;
        }
        struct stat st;
        if (name_refusal(e->d_name) || fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
            !S_ISREG(st.st_mode))
            continue;
        r = listing_push(l, e->d_name, &st);
    }
    closedir(d);
    return r;
}

static int listed_cmp(const void *a, const void *b) {
    return strcmp(((const listed_file *)a)->name, ((const listed_file *)b)->name);
}

static json_t *listed_entry(const listed_file *f, const char *thread_id) {
    json_t *e = file_entry_new(f->name, (uint64_t)f->st.st_size, thread_id);
    size_t stem = name_stem_len(f->name);
    double modified = (double)f->st.st_mtim.tv_sec + (double)f->st.st_mtim.tv_nsec / 1e9;
    if (e && (json_object_set_new(e, "extension", json_string(f->name + stem)) < 0 ||
              json_object_set_new(e, "modified", json_real(modified)) < 0)) {
        json_decref(e);
        return NULL;
    }
    return e;
}

static json_t *listing_json(const listing *l, const char *thread_id) {
    json_t *files = json_array();
    for (size_t i = 0; files && i < l->n; i++) {
        if (json_array_append_new(files, listed_entry(&l->v[i], thread_id)) < 0) {
            json_decref(files);
            return NULL;
        }
    }
    json_t *out = json_pack("{s:o, s:I}", "files", files, "count", (json_int_t)l->n);
    if (out && l->cut && json_object_set_new(out, "truncated", json_true()) < 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

int uploads_list(json_t **out, int uploads_dirfd, const char *thread_id) {
    *out = NULL;
    int r = thread_id_check(thread_id);
    if (r < 0)
        return r;
    listing l = {0};
    r = listing_read(&l, uploads_dirfd);
    if (r == 0) {
        if (l.n > 1)
            qsort(l.v, l.n, sizeof *l.v, listed_cmp);
        json_t *res = listing_json(&l, thread_id);
        if (res)
            *out = res;
        else
            r = fawn_err(FAWN_ENOMEM, "out of memory listing uploads");
    }
    listing_free(&l);
    return r;
}

/* ---- delete ---- */

int uploads_delete(int uploads_dirfd, const char *filename) {
    int r = name_check(filename);
    if (r < 0)
        return r;
    struct stat st;
    if (fstatat(uploads_dirfd, filename, &st, AT_SYMLINK_NOFOLLOW) < 0) {
        if (errno == ENOENT)
            return fawn_err(FAWN_ENOENT, "File not found: %s", filename);
        return fawn_err_sys(FAWN_EIO, errno, "deleting %s", filename);
    }
    if (S_ISDIR(st.st_mode))
        return fawn_err(FAWN_EINVAL, "Not a file: %s is a directory", filename);
    if (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode))
        return fawn_err(FAWN_EINVAL, "Not a regular file: %s", filename);
    /* unlinkat removes the entry itself: a symlink goes, its target stays. */
    if (unlinkat(uploads_dirfd, filename, 0) == 0)
        return 0;
    if (errno == ENOENT)
        return fawn_err(FAWN_ENOENT, "File not found: %s", filename);
    if (errno == EISDIR)
        return fawn_err(FAWN_EINVAL, "Not a file: %s is a directory", filename);
    return fawn_err_sys(FAWN_EIO, errno, "deleting %s", filename);
}
