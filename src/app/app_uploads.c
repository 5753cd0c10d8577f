/* A thread's uploads for every front-end (app.h, "uploads"): its uploads
 * directory opened safely, and the copy of newly uploaded files into the
 * thread's sandbox where the provider does not share the host's thread
 * files. The HTTP upload route and the IM channels both use these. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/app_internal.h"
#include "paths/paths.h"
#include "sandbox/quota.h"

/* How long copying one uploaded file into a remote box may take. */
#define APP_UPLOAD_SYNC_TIMEOUT_MS (10 * 60 * 1000)

int app_uploads_dir_open(int *out, uint64_t *room, const app *a, int64_t user_id,
                         const char *thread_id, bool create) {
    *out = -1;
    if (room)
        *room = 0;
    _cleanup_close_ int user_data = -1;
    int r = app_thread_files_open(&user_data, a, user_id, thread_id, create);
    if (r == 0 && room)
        r = quota_room(room, user_data, a->cfg->sandbox.limits.disk_mb << 20);
    if (r < 0)
        return r;
    *out = openat(user_data, "uploads", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (*out >= 0)
        return 0;
    return errno == ENOENT ? fawn_err(FAWN_ENOENT, "the thread has no uploads directory")
                           : fawn_err(FAWN_EINVAL, "the thread's uploads directory is not usable");
}

/* Copies one uploaded file into the box, at the virtual path its
 * artifact_url names (already percent-encoded). */
static int upload_copy(sbx_lease *l, int dirfd, const json_t *file) {
    const char *name = json_string_value(json_object_get(file, "filename"));
    const char *url = json_string_value(json_object_get(file, "artifact_url"));
    const char *tail = url ? strstr(url, "/artifacts/") : NULL;
    if (!name || !tail)
        return fawn_err(FAWN_EIO, "an upload result without its names");
    _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return fawn_err(FAWN_EIO, "%s changed before it was copied into the sandbox", name);
    _cleanup_free_ char *path = NULL;
    if (asprintf(&path, "/v1/file/upload?path=%s&overwrite=true", tail + strlen("/artifacts")) < 0)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    json_t *reply = NULL;
    int status = 0;
    int r = sbx_call_file(&reply, &status, l, "POST", path, fd, (uint64_t)st.st_size,
                          APP_UPLOAD_SYNC_TIMEOUT_MS);
    if (r == 0 && status != 200 && status != 201)
        r = fawn_err(FAWN_EIO, "the sandbox refused %s: %s", name,
                     json_string_value(json_object_get(reply, "detail")) ?: "no reason given");
    json_decref(reply);
    return r;
}

int app_uploads_sync(bool *copied, app *a, const store_user *user, const char *thread_id,
                     int uploads_dirfd, const json_t *files) {
    *copied = false;
    if (a->provider->shares_host_files || json_array_size(files) == 0)
        return 0;
    char owner[24];
    paths_user_dir_name(owner, user->id);
    sbx_request req = {
        .who = {.user = owner, .role = user->role}, .thread = thread_id, .kind = SBX_HOLD_UPLOAD};
    sbx_lease *l = NULL;
    int r = sbx_acquire(&l, a->sandboxes, &req);
    if (r == FAWN_EPERM) /* no command of this user runs in a sandbox to read them */
        return 0;
    for (size_t i = 0; r == 0 && i < json_array_size(files); i++)
        r = upload_copy(l, uploads_dirfd, json_array_get(files, i));
    sbx_release(l);
    *copied = r == 0;
    return r;
}
