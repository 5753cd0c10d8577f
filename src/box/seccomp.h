/* The seccomp filter every command runs under. */
#ifndef FAWN_BOX_SECCOMP_H
#define FAWN_BOX_SECCOMP_H

#include <linux/filter.h>
#include "base/base.h"

/* Builds the command filter once into *prog (caller frees prog->filter).
 * It denies (EPERM) the mount family, pivot_root, chroot, ptrace and
 * process_vm_*, kexec and module calls, bpf, perf_event_open, keyctl and
 * friends, userfaultfd, io_uring, unshare, setns, clone with namespace flags,
 * TIOCSTI/TIOCLINUX ioctls, personality changes, open_by_handle_at, and
 * host-administration calls; clone3 fails with ENOSYS so libc falls back to
 * the filtered clone. Syscalls of foreign architectures kill the process. */
FAWN_MUST_CHECK int box_seccomp_build(struct sock_fprog *prog);

/* Installs prog in the calling thread (no_new_privs must be set first).
 * Async-signal-safe: usable between fork and exec. Returns 0 or -errno. */
FAWN_MUST_CHECK int box_seccomp_install(const struct sock_fprog *prog);

#endif
