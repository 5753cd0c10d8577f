/* Private to src/broker: running one call, and its audit line. */
#ifndef FAWN_BROKER_INTERNAL_H
#define FAWN_BROKER_INTERNAL_H

#include <stdatomic.h>

#include "broker/broker.h"

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
