/* The per-execution init process (see exec.h). Private to box/exec.c and
 * box/init.c: the wire format between the box and an init, and the init's
 * entry point. */
#ifndef FAWN_BOX_INIT_H
#define FAWN_BOX_INIT_H

#include <linux/filter.h>
#include <stdint.h>
#include <sys/types.h>

#define INIT_MSG_MAGIC 0x66617769u /* "fawi" */

/* Command launch modes. */
enum init_mode {
    INIT_RUN_SHELL = 1,   /* payload argv is ignored: bash -c (or sh -c) the command */
    INIT_RUN_SESSION = 2, /* bash -c with the session prelude; fd 3 receives the state */
    INIT_RUN_DIRECT = 3,  /* execvp argv directly (plain words, no shell syntax) */
};

/* Payloads up to this size travel in the message itself; larger ones in a
 * memfd passed along (a datagram this size fits any socket buffer). */
#define INIT_INLINE_MAX (32 * 1024)

/* box -> init, with SCM_RIGHTS fds: stdout, stderr, [state,] [payload memfd].
 * An inline payload follows this header in the same datagram. */
typedef struct init_exec_msg {
    uint32_t magic;
    uint32_t mode;
    uint32_t n_fds; /* 2 to 4 */
    uint32_t payload_len;
    uint32_t inline_payload; /* 1: the payload follows; 0: it is in the last fd */
    uint32_t has_state;      /* 1: the third fd receives the session's state */
} init_exec_msg;
/* Payload: cwd '\0' command '\0' then argv words each '\0', an empty string,
 * then NAME=VALUE entries each '\0', an empty string. */

/* init -> box when the command's first process exits. */
typedef struct init_status_msg {
    uint32_t magic;
    int32_t wait_status;     /* as from waitpid */
    int32_t spawn_errno;     /* non-zero when the command could not be started */
    int32_t namespace_empty; /* 1: no process but the init is left in its namespace */
} init_status_msg;

typedef struct box_init_setup {
    const struct sock_fprog *seccomp;
    int cap_last; /* highest capability number on this kernel */
    uint64_t rlimit_nofile, rlimit_fsize, rlimit_nproc, rlimit_as; /* 0 = leave as is */
} box_init_setup;

/* Entry point of an init, run in a child just forked as PID 1 of a new PID
 * namespace. Never returns. Serves exec messages on ctl_fd until it is
 * closed, then lingers while any process of its namespace is alive. */
_Noreturn void box_init_main(const box_init_setup *setup, int ctl_fd);

#endif
