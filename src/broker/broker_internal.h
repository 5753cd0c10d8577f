/* Private to src/broker: running one call, and its audit line. */
#ifndef FAWN_BROKER_INTERNAL_H
#define FAWN_BROKER_INTERNAL_H

#include <stdatomic.h>

#include "broker/broker.h"

/* The socket's name in a sandbox's broker directory. */
#define BROKER_SOCKET_NAME "broker.sock"

/* ---- io.c: shared by the broker and a pod's relay ---- */

/* Writes a shim (SBX_BROKER_MOUNT "/fawn broker-call <name>") for each of
 * the n names into dir/bin (made when missing), removing others. */
FAWN_MUST_CHECK int broker_shims_write(const char *dir, char *const *names, size_t n);

/* Listens (non-blocking) at dir/BROKER_SOCKET_NAME, bound under a
 * temporary name and renamed into place, connectable by any uid: only the
 * sandbox that mounts dir sees it. *out is -1 on failure. */
FAWN_MUST_CHECK int broker_socket_listen(int *out, const char *dir);

/* Reads exactly n bytes before deadline (fawn_now_ms): FAWN_ETIMEDOUT, or
 * FAWN_EPROTO at EOF. */
FAWN_MUST_CHECK int broker_read_full(int fd, void *buf, size_t n, int64_t deadline);

/* Reads one whole message (header and a body of at most limit bytes) into
 * out (emptied first; its limit must hold both). FAWN_E2BIG past limit,
 * FAWN_EPROTO for another magic, as broker_read_full otherwise. */
FAWN_MUST_CHECK int broker_read_message(fbuf *out, int fd, size_t limit, int64_t deadline);

/* Sends all of data (fd made blocking first). FAWN_EIO when it cannot. */
FAWN_MUST_CHECK int broker_send_all(int fd, const void *data, size_t len);

/* Sends a reply message; a failure is only logged (the caller is gone). */
void broker_send_reply(int fd, int code, unsigned flags, const char *out, size_t out_len,
                       const char *err, size_t err_len);

/* Sends a reply with no output, exit code and "fawn broker: <why>\n" on stderr. */
void broker_send_refusal(int fd, int code, const char *why);

/* How often a running call looks whether its lease still holds: a
 * released lease stops the CLI within this. */
#define BROKER_LEASE_POLL_MS 50

typedef struct run_ctx {
    sbx_manager *m;
    const char *home;
    const broker_cli *cli;
    const broker_request *req;
    const char *user; /* whose credentials */
    const char *sandbox_id, *generation;
    const atomic_bool *stop; /* the broker stops: kill the call */
} run_ctx;

typedef struct run_result {
    int exit_code;
    unsigned flags; /* BROKER_*_TRUNCATED */
    fbuf out, err;  /* what is replayed (at most BROKER_OUTPUT_MAX each) */
    size_t out_total, err_total;
    char refusal[256]; /* why it was not run or was killed, or "" */
} run_result;

/* Runs req with cli's binary and credentials; fills *out on every path
 * (BROKER_EXIT_REFUSED with a message on stderr when it could not run).
 * Free with run_result_free. */
void broker_run(run_result *out, const run_ctx *c);
void run_result_free(run_result *r);

typedef struct audit_record {
    const char *sandbox_id;
    const sbx_holding *who;
    const char *cli;         /* the requested name, or NULL */
    const broker_rule *rule; /* the allow rule matched, or NULL */
    size_t argc;
    int exit_code;
    unsigned flags;
    int64_t ms;
    size_t in_bytes, out_bytes, err_bytes;
    const char *refusal; /* why it was refused, or NULL */
} audit_record;

/* Logs one line for the call and appends it to audit_fd (-1: log only).
 * Names the matched rule, never other arguments or the environment. */
void broker_audit(int audit_fd, const audit_record *r);

#endif
