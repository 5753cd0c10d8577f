#include "box/box.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"

/* Bumped whenever what goes into a prepared /etc changes. */
#define ETC_FORMAT "fawn-etc-1"
/* Host files larger than this are not copied (ld.so.cache is ~50 KiB). */
#define ETC_FILE_MAX (4 << 20)

const char *const box_etc_bound_dirs[] = {"ld.so.conf.d", "alternatives", "ssl", "ca-certificates",
                                          "python3"};
const size_t box_etc_bound_dirs_count = ARRAY_LEN(box_etc_bound_dirs);

/* Host files copied: what the dynamic loader, TLS, time zones and common
 * tools read. */
static const char *const copied_files[] = {
    "ld.so.cache",   "ld.so.conf",     "ca-certificates.conf",
    "localtime",     "timezone",       "mime.types",
    "nsswitch.conf", "protocols",      "services",
    "host.conf",     "gai.conf",       "bash.bashrc",
    "profile",       "inputrc",        "magic",
    "magic.mime",    "debian_version", "os-release",
    "lsb-release",   "gitconfig",
};
/* Copied too when the sandbox shares the host's network. */
static const char *const network_files[] = {"resolv.conf"};

static const struct {
    const char *name, *content;
} generated_files[] = {
    {"passwd", "root:x:0:0:sandbox:/tmp:/bin/bash\n"
               "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"},
    {"group", "root:x:0:\nnogroup:x:65534:\n"},
    {"hostname", "sandbox\n"},
    {"hosts", "127.0.0.1\tlocalhost sandbox\n::1\tlocalhost\n"},
};

static int fingerprint_add(fbuf *fp, const char *name) {
    char path[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "/etc/%s", name);
    if (lstat(path, &st) < 0)
        return fbuf_printf(fp, "%s:-\n", name);
    return fbuf_printf(fp, "%s:%o:%lld:%lld.%ld:%llu:%llu\n", name, (unsigned)st.st_mode,
                       (long long)st.st_size, (long long)st.st_mtim.tv_sec, st.st_mtim.tv_nsec,
                       (unsigned long long)st.st_ino, (unsigned long long)st.st_dev);
}

static int fingerprint(char out[17], bool network_none) {
    fbuf fp = {0};
    int r = fbuf_printf(&fp, "%s:%d\n", ETC_FORMAT, network_none);
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(copied_files); i++)
        r = fingerprint_add(&fp, copied_files[i]);
    for (size_t i = 0; r == 0 && !network_none && i < ARRAY_LEN(network_files); i++)
        r = fingerprint_add(&fp, network_files[i]);
    if (r < 0) {
        fbuf_free(&fp);
        return r;
    }
    char hex[65];
    fawn_sha256_hex(hex, fp.data, fp.len);
    memcpy(out, hex, 16);
    out[16] = '\0';
    fbuf_free(&fp);
    return 0;
}

static int write_file_at(int dirfd, const char *name, const char *data, size_t n) {
    _cleanup_close_ int fd = openat(dirfd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "create %s", name);
    return fawn_write_all(fd, data, n);
}

/* Copies /etc/name into dirfd: a symlink as a symlink, a regular file that
 * any user may read as a 0644 copy; anything else (or nothing) is skipped. */
static int copy_entry(int dirfd, const char *name) {
    char path[PATH_MAX], target[PATH_MAX];
    struct stat st;
    snprintf(path, sizeof path, "/etc/%s", name);
    if (lstat(path, &st) < 0)
        return errno == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, errno, "lstat %s", path);
    if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlink(path, target, sizeof target - 1);
        if (n < 0)
            return fawn_err_sys(FAWN_EIO, errno, "readlink %s", path);
        target[n] = '\0';
        return symlinkat(target, dirfd, name) < 0
                   ? fawn_err_sys(FAWN_EIO, errno, "symlink %s", name)
                   : 0;
    }
    if (!S_ISREG(st.st_mode) || !(st.st_mode & S_IROTH) || st.st_size > ETC_FILE_MAX)
        return 0;
    _cleanup_close_ int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
    _cleanup_free_ char *data = NULL;
    size_t len = 0;
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", path);
    int r = fawn_read_all(&data, &len, fd, ETC_FILE_MAX);
    return r < 0 ? r : write_file_at(dirfd, name, data, len);
}

static int populate(int dirfd, bool network_none) {
    int r = 0;
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(copied_files); i++)
        r = copy_entry(dirfd, copied_files[i]);
    for (size_t i = 0; r == 0 && !network_none && i < ARRAY_LEN(network_files); i++)
        r = copy_entry(dirfd, network_files[i]);
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(generated_files); i++)
        r = write_file_at(dirfd, generated_files[i].name, generated_files[i].content,
                          strlen(generated_files[i].content));
    for (size_t i = 0; r == 0 && i < box_etc_bound_dirs_count; i++)
        if (mkdirat(dirfd, box_etc_bound_dirs[i], 0755) < 0)
            r = fawn_err_sys(FAWN_EIO, errno, "mkdir %s", box_etc_bound_dirs[i]);
    return r;
}

/* Removes a directory holding only files, symlinks and empty directories. */
static void remove_flat(const char *path) {
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        if (unlinkat(dirfd(d), e->d_name, 0) < 0)
            unlinkat(dirfd(d), e->d_name, AT_REMOVEDIR);
    }
    if (d)
        closedir(d);
    rmdir(path);
}

static int build(const char *final, const char *run_dir, bool network_none) {
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof tmp, "%s/.etc-build-XXXXXX", run_dir) >= (int)sizeof tmp)
        return fawn_err(FAWN_EINVAL, "path too long");
    if (!mkdtemp(tmp))
        return fawn_err_sys(FAWN_EIO, errno, "mkdtemp %s", tmp);
    _cleanup_close_ int dirfd = open(tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    int r = dirfd < 0 ? fawn_err_sys(FAWN_EIO, errno, "open %s", tmp)
                      : populate(dirfd, network_none);
    if (r == 0 && fchmod(dirfd, 0755) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "chmod %s", tmp);
    /* Another launcher may have built the same one meanwhile: theirs stays. */
    if (r == 0 && rename(tmp, final) < 0 && errno != EEXIST && errno != ENOTEMPTY)
        r = fawn_err_sys(FAWN_EIO, errno, "rename %s", tmp);
    remove_flat(tmp); /* a no-op after a successful rename */
    return r;
}

int box_etc_prepare(char out[PATH_MAX], const char *run_dir, bool network_none) {
    out[0] = '\0';
    char fp[17];
    int r = fingerprint(fp, network_none);
    if (r < 0)
        return r;
    if (snprintf(out, PATH_MAX, "%s/etc-%s", run_dir, fp) >= PATH_MAX)
        return fawn_err(FAWN_EINVAL, "path too long");
    struct stat st;
    if (lstat(out, &st) == 0 && S_ISDIR(st.st_mode))
        return 0;
    return build(out, run_dir, network_none);
}
