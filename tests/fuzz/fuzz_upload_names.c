/* libFuzzer target for the file names a client gives its uploads and the
 * artifact paths they are served back under (gateway/uploads.c,
 * gateway/artifacts.c). A thread's user-data tree is made once in a
 * temporary directory (on tmpfs when there is one: every upload is
 * fsynced). Input: up to UPLOADS_MAX client file names separated by NUL
 * bytes (a multipart file name holds none), uploaded in one request, each
 * file's content being its client name; the first name is also tried as
 * an artifact URL tail. Besides memory errors and undefined behaviour, it
 * checks that
 * - a refused name fails the request with FAWN_EINVAL and leaves nothing
 *   behind; a name is refused only when its base name (after the last '/')
 *   is not a valid file name, is a staging name or is not UTF-8, or when
 *   numbering a duplicate would make it too long;
 * - an accepted request stores every file under a valid, distinct name:
 *   the base name, or stem_K.ext for a duplicate (original_filename then
 *   tells the base name); its virtual path and artifact URL name it;
 * - the artifact URL serves the file's bytes back, with header values that
 *   fit their bounds; the listing shows every file; deleting each by its
 *   name empties the directory. */
#include <dirent.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/json.h"
#include "gateway/artifacts.h"
#include "gateway/uploads.h"
#include "paths/paths.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 4096
/* Files per request: enough for duplicates of duplicates. */
#define UPLOADS_MAX 6
#define THREAD "fuzz-thread"
#define URL_PREFIX "/api/threads/" THREAD "/artifacts/"
#define UPLOADS_PATH VPATH_USER_DATA "/uploads/"

static char dir[64];
static int uploads_fd = -1;
static vpath_roots roots = {.user_data_fd = -1, .skills_fd = -1};

static void teardown(void) {
    close(uploads_fd);
    close(roots.user_data_fd);
    fuzz_remove_tree(dir);
}

static void setup(void) {
    struct stat st;
    const char *tmp = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) ? "/dev/shm" : "/tmp";
    snprintf(dir, sizeof dir, "%s/fawn-fuzz-uploads-XXXXXX", tmp);
    check(mkdtemp(dir) != NULL);
    atexit(teardown);
    char path[128];
    static const char *const subdirs[] = {"", "/workspace", "/uploads", "/outputs"};
    for (size_t i = 0; i < ARRAY_LEN(subdirs); i++) {
        snprintf(path, sizeof path, "%s/user-data%s", dir, subdirs[i]);
        check(mkdir(path, 0755) == 0);
    }
    snprintf(path, sizeof path, "%s/user-data", dir);
    roots.user_data_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    snprintf(path, sizeof path, "%s/user-data/uploads", dir);
    uploads_fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    check(roots.user_data_fd >= 0 && uploads_fd >= 0);
}

static size_t entries(void) {
    int fd = openat(uploads_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    DIR *d = fdopendir(fd);
    check(d != NULL);
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));)
        n += strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0;
    closedir(d);
    return n;
}

static const char *base_name(const char *client) {
    const char *slash = strrchr(client, '/');
    return slash ? slash + 1 : client;
}

/* Whether the uploads accept this base name (uploads.h). */
static bool acceptable(const char *base) {
    return vpath_name_valid(base) && !vpath_is_staging_name(base) &&
           fawn_utf8_valid(base, strlen(base));
}

/* Serves name back through its artifact URL and compares the bytes. */
static void check_served(const char *url, const char *content) {
    check(strncmp(url, URL_PREFIX, strlen(URL_PREFIX)) == 0);
    artifact_response a;
    check(artifact_get(&a, &roots, url + strlen(URL_PREFIX), NULL, false) == 0);
    check(a.status == 200 && a.fd >= 0 && a.size == strlen(content) && a.length == a.size);
    check(strnlen(a.content_type, sizeof a.content_type) < sizeof a.content_type);
    check(strnlen(a.content_disposition, sizeof a.content_disposition) <
          sizeof a.content_disposition);
    check(strncmp(a.content_disposition, "inline; ", 8) == 0 ||
          strncmp(a.content_disposition, "attachment; ", 12) == 0);
    char buf[FUZZ_INPUT_MAX + 1];
    size_t n = 0;
    check(artifact_body_read(&n, &a, 0, buf, sizeof buf) == 0 && n == a.length);
    check(memcmp(buf, content, n) == 0);
    close(a.fd);
}

/* The entry of the i-th file, client is the name the client gave. */
static void check_entry(const json_t *e, const char *client, json_t *seen) {
    const char *name = json_string_value(json_object_get(e, "filename"));
    const char *original = json_string_value(json_object_get(e, "original_filename"));
    check(name && acceptable(name));
    check(!json_object_get(seen, name));
    json_object_set_new(seen, name, json_true());
    const char *base = base_name(client);
    check(original ? strcmp(original, base) == 0 && strcmp(name, base) != 0
                   : strcmp(name, base) == 0);
    char vp[sizeof UPLOADS_PATH + VPATH_NAME_MAX];
    snprintf(vp, sizeof vp, "%s%s", UPLOADS_PATH, name);
    check(strcmp(json_string_value(json_object_get(e, "virtual_path")), vp) == 0);
    check(json_integer_value(json_object_get(e, "size")) == (json_int_t)strlen(client));
    check_served(json_string_value(json_object_get(e, "artifact_url")), client);
}

/* Uploads names[0..n), each with its own name as content. 0, or the code
 * that refused the request. */
static int upload(json_t **result, char **names, size_t n) {
    const upload_limits lim = {.max_files = UPLOADS_MAX,
                               .max_file_size = FUZZ_INPUT_MAX,
                               .max_total_size = FUZZ_INPUT_MAX,
                               .disk_room = UINT64_MAX};
    upload_batch *b = NULL;
    int r = upload_batch_begin(&b, uploads_fd, &lim);
    for (size_t i = 0; r == 0 && i < n; i++) {
        r = upload_file_begin(b, names[i]);
        if (r == 0)
            r = upload_file_write(b, names[i], strlen(names[i]));
        if (r == 0)
            r = upload_file_end(b);
    }
    if (r < 0) {
        upload_batch_abort(b);
        *result = NULL;
        return r;
    }
    return upload_batch_commit(b, result, THREAD);
}

static void check_refused(int r, char **names, size_t n) {
    check(r == FAWN_EINVAL);
    check(entries() == 0);
    bool explained = false;
    for (size_t i = 0; i < n && !explained; i++) {
        explained = !acceptable(base_name(names[i]));
        for (size_t k = 0; k < i && !explained; k++)
            explained = strcmp(base_name(names[k]), base_name(names[i])) == 0;
    }
    check(explained);
}

static void check_uploads(char **names, size_t n) {
    json_t *result = NULL;
    int r = upload(&result, names, n);
    if (r < 0) {
        check_refused(r, names, n);
        return;
    }
    check(json_is_true(json_object_get(result, "success")));
    const json_t *files = json_object_get(result, "files");
    check(json_array_size(files) == n && entries() == n);
    json_t *seen = json_object();
    for (size_t i = 0; i < n; i++)
        check_entry(json_array_get(files, i), names[i], seen);
    json_t *listing = NULL;
    check(uploads_list(&listing, uploads_fd, THREAD) == 0);
    check(json_integer_value(json_object_get(listing, "count")) == (json_int_t)n);
    json_decref(listing);
    /* Whatever the first name means as an artifact path, the tree answers. */
    artifact_response a;
    r = artifact_get(&a, &roots, names[0], NULL, false);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_EPERM || r == FAWN_ENOENT);
    if (r == 0)
        close(a.fd);
    const char *name;
    json_t *v;
    json_object_foreach(seen, name, v) { check(uploads_delete(uploads_fd, name) == 0); }
    check(entries() == 0);
    json_decref(seen);
    json_decref(result);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    if (uploads_fd < 0)
        setup();
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    char *names[UPLOADS_MAX];
    size_t n = 0;
    for (char *p = text; n < UPLOADS_MAX && p <= text + size; p += strlen(p) + 1)
        names[n++] = p;
    check_uploads(names, n);
    free(text);
    return 0;
}
