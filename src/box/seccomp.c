#include "box/seccomp.h"

#include <errno.h>
#include <sched.h>
#include <linux/btrfs.h>
#include <linux/seccomp.h>
#include <seccomp.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <linux/sched.h>

#include "base/base.h"

/* A BPF program is at most 4096 instructions (BPF_MAXINSNS). */
#define FILTER_MAX_BYTES (4096 * sizeof(struct sock_filter))

/* Calls that have no business in an agent's command. */
static const char *const denied_calls[] = {
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "init_module",
    "finit_module",
    "delete_module",
    "bpf",
    "perf_event_open",
    "keyctl",
    "add_key",
    "request_key",
    "userfaultfd",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "unshare",
    "setns",
    "open_by_handle_at",
    "name_to_handle_at",
    "acct",
    "swapon",
    "swapoff",
    "reboot",
    "syslog",
    "quotactl",
    "quotactl_fd",
    "lookup_dcookie",
    "iopl",
    "ioperm",
    "vhangup",
    "uselib",
    "nfsservctl",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "pidfd_getfd",
    "kcmp",
    "fanotify_init",
    "migrate_pages",
    "move_pages",
    "mbind",
    "set_mempolicy",
};

/* clone flags that would create a namespace. */
static const unsigned long namespace_flags[] = {
    CLONE_NEWUSER, CLONE_NEWNS,  CLONE_NEWPID,    CLONE_NEWNET,
    CLONE_NEWIPC,  CLONE_NEWUTS, CLONE_NEWCGROUP, CLONE_NEWTIME,
};

/* Terminal ioctls that inject input or reach the console; and the btrfs
 * ioctls that make or remove a subvolume or snapshot (any user may make one
 * in a directory it can write, and a new subvolume gets a qgroup of its own,
 * outside the disk limit of the thread's; see sandbox/quota.h). */
static const unsigned long denied_ioctls[] = {
    TIOCSTI,
    TIOCLINUX,
    BTRFS_IOC_SUBVOL_CREATE,
    BTRFS_IOC_SUBVOL_CREATE_V2,
    BTRFS_IOC_SNAP_CREATE,
    BTRFS_IOC_SNAP_CREATE_V2,
    BTRFS_IOC_SNAP_DESTROY,
    BTRFS_IOC_SNAP_DESTROY_V2,
};

/* personality() flags that weaken the address space (ASLR off, page zero,
 * executable data, legacy layouts). Setting any of them is refused; this
 * also refuses the all-bits "query" call, which nothing common needs. */
static const unsigned long denied_persona_flags[] = {
    ADDR_NO_RANDOMIZE, MMAP_PAGE_ZERO, ADDR_COMPAT_LAYOUT, READ_IMPLIES_EXEC, ADDR_LIMIT_32BIT,
    ADDR_LIMIT_3GB,    SHORT_INODE,    WHOLE_SECONDS,      STICKY_TIMEOUTS,
};

static int deny_names(scmp_filter_ctx ctx) {
    for (size_t i = 0; i < ARRAY_LEN(denied_calls); i++) {
        int nr = seccomp_syscall_resolve_name(denied_calls[i]);
        if (nr == __NR_SCMP_ERROR)
            continue;
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), nr, 0);
        if (r < 0)
            return r;
    }
    return 0;
}

static int deny_namespaces(scmp_filter_ctx ctx) {
    for (size_t i = 0; i < ARRAY_LEN(namespace_flags); i++) {
        unsigned long f = namespace_flags[i];
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(clone), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
        if (r < 0)
            return r;
    }
    /* clone3 passes its flags in memory a filter cannot read: make libc fall back. */
    return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
}

static int deny_ioctls_and_personality(scmp_filter_ctx ctx) {
    for (size_t i = 0; i < ARRAY_LEN(denied_ioctls); i++) {
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(ioctl), 1,
                                 SCMP_A1(SCMP_CMP_MASKED_EQ, 0xffffffffUL, denied_ioctls[i]));
        if (r < 0)
            return r;
    }
    for (size_t i = 0; i < ARRAY_LEN(denied_persona_flags); i++) {
        unsigned long f = denied_persona_flags[i];
        int r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                                 SCMP_A0(SCMP_CMP_MASKED_EQ, f, f));
        if (r < 0)
            return r;
    }
    /* Other execution domains (PER_BSD, PER_SVR4, ...) live in the low byte. */
    return seccomp_rule_add(ctx, SCMP_ACT_ERRNO(EPERM), SCMP_SYS(personality), 1,
                            SCMP_A0(SCMP_CMP_MASKED_EQ, 0xffUL, 0xffUL));
}

/* Exports the compiled program through a memfd into a malloc'd buffer. */
static int export_program(struct sock_fprog *prog, scmp_filter_ctx ctx) {
    _cleanup_close_ int fd = memfd_create("fawn-seccomp", MFD_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "memfd_create");
    int r = seccomp_export_bpf(ctx, fd);
    if (r < 0)
        return fawn_err_sys(FAWN_EIO, -r, "seccomp_export_bpf");
    if (lseek(fd, 0, SEEK_SET) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "lseek");
    char *data = NULL;
    size_t len = 0;
    r = fawn_read_all(&data, &len, fd, FILTER_MAX_BYTES);
    if (r < 0)
        return r;
    if (len == 0 || len % sizeof(struct sock_filter) != 0) {
        free(data);
        return fawn_err(FAWN_EIO, "seccomp program has a bad size (%zu bytes)", len);
    }
    prog->filter = (struct sock_filter *)data;
    prog->len = (unsigned short)(len / sizeof(struct sock_filter));
    return 0;
}

int box_seccomp_build(struct sock_fprog *prog) {
    *prog = (struct sock_fprog){0};
    scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
    if (!ctx)
        return fawn_err(FAWN_ENOMEM, "seccomp_init failed");
    int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
    if (r == 0)
        r = deny_names(ctx);
    if (r == 0)
        r = deny_namespaces(ctx);
    if (r == 0)
        r = deny_ioctls_and_personality(ctx);
    if (r < 0) {
        seccomp_release(ctx);
        return fawn_err_sys(FAWN_EIO, -r, "building the seccomp filter");
    }
    r = export_program(prog, ctx);
    seccomp_release(ctx);
    return r;
}

int box_seccomp_install(const struct sock_fprog *prog) {
    if (syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, prog) < 0)
        return -errno;
    return 0;
}
