#include "box/box.h"

#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The new root is assembled on a tmpfs mounted over /tmp in the child's
 * private mount namespace (the host's /tmp is untouched). */
#define NEWROOT "/tmp"
/* The root tmpfs only holds directories, symlinks and a few small /etc files. */
#define ROOT_TMPFS_OPTS "mode=0755,size=2m,nr_inodes=4096"
#define DEV_TMPFS_OPTS "mode=0755,size=64k,nr_inodes=64"

/* System directories bound read-only when they are real directories on the
 * host, or recreated as the same symlink (merged /usr). */
static const char *const system_dirs[] = {"/usr",   "/bin",   "/sbin",  "/lib",
                                          "/lib64", "/lib32", "/libx32"};

static const char *const dev_nodes[] = {"null", "zero", "full", "random", "urandom", "tty"};

typedef struct iso {
    char *err;
    size_t errsz;
} iso;

static int fail(iso *s, const char *what, const char *arg) {
    snprintf(s->err, s->errsz, "%s %s: %s", what, arg ? arg : "", strerror(errno));
    return -1;
}

static int write_file(const char *path, const char *data) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t n = write(fd, data, strlen(data));
    int e = errno;
    close(fd);
    return n == (ssize_t)strlen(data) ? 0 : -(n < 0 ? e : EIO);
}

int box_write_id_maps(pid_t pid, uid_t outer_uid, gid_t outer_gid, bool deny_setgroups) {
    char path[64], line[64];
    const char *who = "self";
    char pidbuf[16];
    if (pid > 0) {
        snprintf(pidbuf, sizeof pidbuf, "%d", (int)pid);
        who = pidbuf;
    }
    snprintf(path, sizeof path, "/proc/%s/setgroups", who);
    int r = deny_setgroups ? write_file(path, "deny") : 0;
    if (r < 0 && r != -ENOENT)
        return r;
    snprintf(path, sizeof path, "/proc/%s/uid_map", who);
    snprintf(line, sizeof line, "0 %u 1\n", (unsigned)outer_uid);
    if ((r = write_file(path, line)) < 0)
        return r;
    snprintf(path, sizeof path, "/proc/%s/gid_map", who);
    snprintf(line, sizeof line, "0 %u 1\n", (unsigned)outer_gid);
    return write_file(path, line);
}

static int set_attr(const char *path, uint64_t set, bool recursive) {
    struct mount_attr attr = {.attr_set = set};
    return mount_setattr(AT_FDCWD, path, recursive ? AT_RECURSIVE : 0, &attr, sizeof attr);
}

/* Binds src onto dst (created as a dir or an empty file like src) and applies attrs. */
static int bind_path(iso *s, const char *src, const char *dst, uint64_t attrs, bool recursive) {
    struct stat st;
    if (stat(src, &st) < 0)
        return fail(s, "stat", src);
    if (S_ISDIR(st.st_mode)) {
        if (mkdir(dst, 0755) < 0 && errno != EEXIST)
            return fail(s, "mkdir", dst);
    } else {
        int fd = open(dst, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0)
            return fail(s, "create", dst);
        close(fd);
    }
    if (mount(src, dst, NULL, MS_BIND | (recursive ? MS_REC : 0), NULL) < 0)
        return fail(s, "bind", src);
    if (set_attr(dst, attrs, recursive) < 0)
        return fail(s, "mount_setattr", dst);
    return 0;
}

/* Recreates a host symlink or read-only-binds the host entry at root/path. */
static int mirror(iso *s, const char *host_path, const char *dst) {
    struct stat st;
    if (lstat(host_path, &st) < 0)
        return errno == ENOENT ? 0 : fail(s, "lstat", host_path);
    if (S_ISLNK(st.st_mode)) {
        char target[512];
        ssize_t n = readlink(host_path, target, sizeof target - 1);
        if (n < 0)
            return fail(s, "readlink", host_path);
        target[n] = '\0';
        return symlink(target, dst) < 0 ? fail(s, "symlink", dst) : 0;
    }
    const uint64_t ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    return bind_path(s, host_path, dst, ro, true);
}

static int make_dirs(iso *s) {
    static const char *const dirs[] = {
        NEWROOT "/etc",
        NEWROOT "/dev",
        NEWROOT "/proc",
        NEWROOT "/tmp",
        NEWROOT "/mnt",
        NEWROOT "/mnt/user-data",
        NEWROOT "/mnt/user-data/workspace",
        NEWROOT "/mnt/user-data/uploads",
        NEWROOT "/mnt/user-data/outputs",
        NEWROOT "/mnt/skills",
        NEWROOT "/run",
        NEWROOT "/var",
        NEWROOT "/home",
        NEWROOT "/root",
        NEWROOT "/opt",
    };
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++)
        if (mkdir(dirs[i], 0755) < 0)
            return fail(s, "mkdir", dirs[i]);
    if (symlink("../tmp", NEWROOT "/var/tmp") < 0)
        return fail(s, "symlink", "/var/tmp");
    return 0;
}

static int make_system(iso *s) {
    char dst[256];
    for (size_t i = 0; i < sizeof system_dirs / sizeof system_dirs[0]; i++) {
        snprintf(dst, sizeof dst, NEWROOT "%s", system_dirs[i]);
        if (mirror(s, system_dirs[i], dst) < 0)
            return -1;
    }
    return 0;
}

static int bind_fd(iso *s, int fd, const char *dst, uint64_t attrs) {
    char src[64];
    snprintf(src, sizeof src, "/proc/self/fd/%d", fd);
    if (mount(src, dst, NULL, MS_BIND, NULL) < 0)
        return fail(s, "bind", dst);
    return set_attr(dst, attrs, false) < 0 ? fail(s, "mount_setattr", dst) : 0;
}

/* The prepared /etc (box/etc.h), then the host directories bound over it. */
static int make_etc(iso *s, const box_host_dirs *d) {
    const uint64_t ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (bind_fd(s, d->etc, NEWROOT "/etc", ro) < 0)
        return -1;
    char src[128], dst[256];
    for (size_t i = 0; i < box_etc_bound_dirs_count; i++) {
        snprintf(src, sizeof src, "/etc/%s", box_etc_bound_dirs[i]);
        snprintf(dst, sizeof dst, NEWROOT "/etc/%s", box_etc_bound_dirs[i]);
        struct stat st;
        if (lstat(src, &st) == 0 && S_ISDIR(st.st_mode) && bind_path(s, src, dst, ro, true) < 0)
            return -1;
    }
    return 0;
}

static int make_dev(iso *s, uint64_t tmp_size_mb) {
    if (mount("tmpfs", NEWROOT "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, DEV_TMPFS_OPTS) < 0)
        return fail(s, "mount", "/dev");
    char src[64], dst[128];
    for (size_t i = 0; i < sizeof dev_nodes / sizeof dev_nodes[0]; i++) {
        snprintf(src, sizeof src, "/dev/%s", dev_nodes[i]);
        snprintf(dst, sizeof dst, NEWROOT "/dev/%s", dev_nodes[i]);
        if (bind_path(s, src, dst, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, false) < 0)
            return -1;
    }
    static const char *const links[][2] = {
        {"/proc/self/fd", NEWROOT "/dev/fd"},
        {"/proc/self/fd/0", NEWROOT "/dev/stdin"},
        {"/proc/self/fd/1", NEWROOT "/dev/stdout"},
        {"/proc/self/fd/2", NEWROOT "/dev/stderr"},
    };
    for (size_t i = 0; i < sizeof links / sizeof links[0]; i++)
        if (symlink(links[i][0], links[i][1]) < 0)
            return fail(s, "symlink", links[i][1]);
    char opts[64];
    snprintf(opts, sizeof opts, "mode=1777,size=%llum", (unsigned long long)tmp_size_mb);
    if (mkdir(NEWROOT "/dev/shm", 01777) < 0 ||
        mount("tmpfs", NEWROOT "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, opts) < 0)
        return fail(s, "mount", "/dev/shm");
    if (set_attr(NEWROOT "/dev", MOUNT_ATTR_RDONLY, false) < 0)
        return fail(s, "mount_setattr", "/dev");
    return 0;
}

int box_isolate_open_dirs(box_host_dirs *d, const box_mount_plan *p, char *err, size_t errsz) {
    iso s = {.err = err, .errsz = errsz};
    const int flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
    d->workspace = open(p->workspace, flags);
    d->uploads = open(p->uploads, flags);
    d->outputs = open(p->outputs, flags);
    d->skills = p->skills ? open(p->skills, flags) : -1;
    d->etc = open(p->etc, flags);
    d->broker = p->broker ? open(p->broker, flags) : -1;
    d->broker_shim = p->broker ? open(p->broker_shim, O_PATH | O_CLOEXEC) : -1;
    if (p->broker && (d->broker < 0 || d->broker_shim < 0))
        return fail(&s, "open", "the credential broker's directory or shim");
    if (d->etc < 0)
        return fail(&s, "open", p->etc);
    if (d->workspace < 0 || d->uploads < 0 || d->outputs < 0)
        return fail(&s, "open", "user-data directories");
    return 0;
}

/* The broker's directory read-only at /mnt/broker, and the fawn binary over
 * its (empty) /mnt/broker/fawn: what its shims run. */
static int make_broker(iso *s, const box_host_dirs *d) {
    const uint64_t ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (mkdir(NEWROOT "/mnt/broker", 0755) < 0)
        return fail(s, "mkdir", "/mnt/broker");
    if (bind_fd(s, d->broker, NEWROOT "/mnt/broker", ro) < 0)
        return -1;
    return bind_fd(s, d->broker_shim, NEWROOT "/mnt/broker/fawn", ro);
}

static int make_user_data(iso *s, const box_host_dirs *d, uint64_t tmp_size_mb) {
    const uint64_t rw = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    if (bind_fd(s, d->workspace, NEWROOT "/mnt/user-data/workspace", rw) < 0 ||
        bind_fd(s, d->uploads, NEWROOT "/mnt/user-data/uploads", rw) < 0 ||
        bind_fd(s, d->outputs, NEWROOT "/mnt/user-data/outputs", rw) < 0)
        return -1;
    if (d->skills >= 0 && bind_fd(s, d->skills, NEWROOT "/mnt/skills", rw | MOUNT_ATTR_RDONLY) < 0)
        return -1;
    if (d->broker >= 0 && make_broker(s, d) < 0)
        return -1;
    char opts[64];
    snprintf(opts, sizeof opts, "mode=1777,size=%llum", (unsigned long long)tmp_size_mb);
    if (mount("tmpfs", NEWROOT "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
        return fail(s, "mount", "/tmp");
    return 0;
}

int box_isolate_loopback_up(void) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    struct ifreq ifr = {0};
    strcpy(ifr.ifr_name, "lo");
    int r = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (r == 0 && !(ifr.ifr_flags & IFF_UP)) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        r = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    int e = errno;
    close(fd);
    errno = e;
    return r;
}

static int enter_root(iso *s) {
    if (set_attr(NEWROOT, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV, false) < 0)
        return fail(s, "mount_setattr", "/");
    if (chdir(NEWROOT) < 0)
        return fail(s, "chdir", NEWROOT);
    if (syscall(SYS_pivot_root, ".", ".") < 0)
        return fail(s, "pivot_root", NULL);
    if (umount2(".", MNT_DETACH) < 0)
        return fail(s, "umount", "old root");
    return chdir("/") < 0 ? fail(s, "chdir", "/") : 0;
}

int box_isolate_enter(const box_mount_plan *plan, const box_host_dirs *dirs, char *err,
                      size_t errsz) {
    iso s = {.err = err, .errsz = errsz};
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return fail(&s, "make-rprivate", "/");
    if (mount("tmpfs", NEWROOT, "tmpfs", MS_NOSUID | MS_NODEV, ROOT_TMPFS_OPTS) < 0)
        return fail(&s, "mount", "root tmpfs");
    if (make_dirs(&s) < 0 || make_system(&s) < 0 || make_etc(&s, dirs) < 0 ||
        make_dev(&s, plan->tmp_size_mb) < 0 || make_user_data(&s, dirs, plan->tmp_size_mb) < 0)
        return -1;
    if (mount("proc", NEWROOT "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
        return fail(&s, "mount", "/proc");
    if (sethostname("sandbox", 7) < 0)
        return fail(&s, "sethostname", NULL);
    if (plan->network_none && box_isolate_loopback_up() < 0)
        return fail(&s, "ifup", "lo");
    return enter_root(&s);
}
