/* A thread's user-data on this host (user_data.h, and sbx_user_data_open in
 * manager.h): where it is comes from paths/, how it is made is the same for
 * an upload that precedes the thread's first run and for a sandbox start. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fsx.h"
#include "paths/paths.h"
#include "sandbox/manager.h"
#include "sandbox/user_data.h"

const char *const sbx_user_data_parts[SBX_USER_DATA_PARTS] = {"workspace", "uploads", "outputs"};

uid_t sbx_host_uid(const char *sandbox_id) {
    if (geteuid() != 0)
        return geteuid();
    char first[9];
    snprintf(first, sizeof first, "%.8s", sandbox_id);
    return (uid_t)(SANDBOX_UID_BASE + strtoul(first, NULL, 16) % SANDBOX_UID_RANGE);
}

int sbx_dir_ensure(const char *path, mode_t mode) {
    if (mkdir(path, mode) == 0 || errno == EEXIST)
        return 0;
    return errno == ENOENT ? fsx_mkdir_p(path, mode)
                           : fawn_err_sys(FAWN_EIO, errno, "mkdir %s", path);
}

/* Splits path into its parent directory and its last name. */
static int split_path(char parent[PATH_MAX], char name[NAME_MAX + 1], const char *path) {
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/')
        n--;
    const char *slash = memrchr(path, '/', n);
    size_t start = slash ? (size_t)(slash - path) + 1 : 0;
    if (n >= PATH_MAX || n == start || n - start > NAME_MAX)
        return fawn_err(FAWN_EINVAL, "bad user-data directory: %s", path);
    memcpy(name, path + start, n - start);
    name[n - start] = '\0';
    size_t parent_len = !slash ? 0 : slash == path ? 1 : (size_t)(slash - path);
    memcpy(parent, parent_len ? path : ".", parent_len ? parent_len : 1);
    parent[parent_len ? parent_len : 1] = '\0';
    return 0;
}

/* Makes user_data a directory limited to sandbox.limits.disk_mb (see
 * sandbox/quota.h), creating its parents; *mechanism tells what limits it. */
static int make_limited(enum quota_mechanism *mechanism, const fawn_config *cfg,
                        const char *user_data) {
    *mechanism = QUOTA_MEASURED;
    char parent[PATH_MAX], name[NAME_MAX + 1];
    int r = split_path(parent, name, user_data);
    if (r == 0)
        r = sbx_dir_ensure(parent, 0755);
    if (r < 0)
        return r;
    _cleanup_close_ int fd = open(parent, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", parent);
    return quota_dir_ensure(mechanism, fd, name, cfg->sandbox.limits.disk_mb << 20);
}

int sbx_user_data_make(enum quota_mechanism *mechanism, const fawn_config *cfg,
                       const char *user_data, uid_t uid) {
    int r = make_limited(mechanism, cfg, user_data);
    if (r < 0)
        return r;
    _cleanup_close_ int dirfd = open(user_data, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (dirfd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", user_data);
    for (size_t i = 0; i < SBX_USER_DATA_PARTS; i++) {
        const char *part = sbx_user_data_parts[i];
        if (mkdirat(dirfd, part, 0755) < 0) {
            if (errno != EEXIST)
                return fawn_err_sys(FAWN_EIO, errno, "mkdir %s/%s", user_data, part);
        } else if (geteuid() == 0 && fchownat(dirfd, part, uid, uid, AT_SYMLINK_NOFOLLOW) < 0) {
            return fawn_err_sys(FAWN_EIO, errno, "chown %s/%s", user_data, part);
        }
    }
    return 0;
}

int sbx_user_data_open(int *fd_out, const fawn_config *cfg, const char *user, const char *thread,
                       bool create) {
    *fd_out = -1;
    char user_data[PATH_MAX], sandbox_id[PATHS_SANDBOX_ID_LEN + 1];
    int r = paths_user_data_dir(user_data, cfg->home, user, thread);
    if (r == 0)
        r = paths_sandbox_id(sandbox_id, user, thread);
    enum quota_mechanism mechanism;
    if (r == 0 && create)
        r = sbx_user_data_make(&mechanism, cfg, user_data, sbx_host_uid(sandbox_id));
    if (r < 0)
        return r;
    int fd = open(user_data, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT ? fawn_err(FAWN_ENOENT, "the thread has no files yet")
                               : fawn_err_sys(FAWN_EIO, errno, "open %s", user_data);
    *fd_out = fd;
    return 0;
}
