/* Running commands in the box: one-shot executions and persistent shell
 * sessions.
 *
 * Every execution runs under an "init": a small process the box forks into a
 * new PID and mount namespace, with its own /proc, no capabilities,
 * no_new_privs, the command seccomp filter and rlimits. The init starts the
 * command (bash -c, or a direct exec for plain words), reaps everything in its
 * namespace, and reports the command's exit status. Killing the init makes
 * the kernel kill every process in its namespace, so a timeout or a kill
 * provably ends the whole process tree, however it forked or daemonized.
 *
 * A one-shot execution gets a fresh init, which lingers after the reply only
 * while background processes it started are alive, and at most until the
 * command's deadline (timeout_s after it started): then it is killed with
 * them, so a one-shot command's process tree never outlives its timeout
 * (a fork bomb included). A session owns one init
 * for as long as it lives: its background processes persist between execs,
 * and its cwd and exported variables are carried from one exec to the next
 * (they are held by the box, never read back from the filesystem).
 *
 * Every out-parameter is set on every path, failures included (NULL, -1,
 * 0, "" before anything can fail). */
#ifndef FAWN_BOX_EXEC_H
#define FAWN_BOX_EXEC_H

#include <jansson.h>
#include <linux/filter.h>
#include <stdbool.h>
#include <stdint.h>
#include "base/base.h"

/* Longest command string accepted. */
#define BOX_COMMAND_MAX (64 * 1024)
/* Session ids: [A-Za-z0-9_-]{1,64}, like thread ids. */
#define BOX_SESSION_ID_MAX 64
/* Variables one request may set. */
#define BOX_REQUEST_ENV_MAX 64
/* A command's full environment, in bytes, including a session's saved state. */
#define BOX_ENV_BYTES_MAX (256 * 1024)
/* Smallest per-stream output cap a client may ask for. */
#define BOX_OUTPUT_MIN 1024
/* How long the box waits for the kernel to confirm a kill before it reports
 * the outcome as unknown. */
#define BOX_KILL_CONFIRM_MS 5000

typedef struct box_exec_config {
    uint32_t default_timeout_s;
    uint32_t max_timeout_s;
    uint64_t max_output_bytes; /* per stream, head + tail kept */
    uint32_t max_sessions;
    uint64_t rlimit_nofile;
    uint64_t rlimit_fsize; /* bytes */
    uint64_t rlimit_nproc;
    uint64_t rlimit_as; /* bytes; 0 = unlimited (a memory cgroup is in force) */
    char **base_env;    /* NAME=VALUE, NULL-terminated; borrowed for the ctx lifetime */
} box_exec_config;

typedef struct box_exec_ctx box_exec_ctx;

/* Creates the execution context (compiles the seccomp filter). Caller frees
 * with box_exec_free, which kills every session. */
FAWN_MUST_CHECK int box_exec_new(box_exec_ctx **out, const box_exec_config *cfg);
void box_exec_free(box_exec_ctx *ctx);

/* Compiles the command seccomp filter if that has not happened yet (the
 * first execution does it otherwise). Thread-safe. Returns 0 or FAWN_E*. */
FAWN_MUST_CHECK int box_exec_prepare(box_exec_ctx *ctx);

typedef struct box_exec_request {
    const char *command;
    const char *session_id; /* NULL for a one-shot execution */
    char **env;             /* NAME=VALUE extra variables, n_env of them */
    size_t n_env;
    const char *cwd;           /* NULL: the session's cwd, or /mnt/user-data/workspace */
    uint32_t timeout_s;        /* 0: default */
    uint64_t max_output_bytes; /* 0: configured maximum */
} box_exec_request;

/* Validates a /v1/shell/exec body into *req (strings borrowed from body;
 * req->env is malloc'd, free it). FAWN_EINVAL names the bad field. */
FAWN_MUST_CHECK int box_exec_request_parse(box_exec_request *req, const json_t *body,
                                           const box_exec_ctx *ctx);

/* Runs one command and stores the reply object in *out:
 * {status: completed|timeout|killed|error, exit_code, stdout, stderr,
 *  truncated, duration_ms, session_id?, error?}.
 * Returns FAWN_ENOENT (unknown session), FAWN_EBUSY (session already
 * running a command), FAWN_EINVAL, or FAWN_EIO when the command could not be
 * started. A started command always yields 0 and a reply. */
FAWN_MUST_CHECK int box_exec_run(json_t **out, box_exec_ctx *ctx, const box_exec_request *req);

/* Creates a session with id (or a random id when id is NULL). An existing id
 * is not an error: *existed is set. Stores the session's description in *out.
 * FAWN_E2BIG when max_sessions are live. */
FAWN_MUST_CHECK int box_session_create(json_t **out, box_exec_ctx *ctx, const char *id);

/* Kills every process of the session (its state is kept); a command still
 * starting is killed as it starts. FAWN_ENOENT if unknown. */
FAWN_MUST_CHECK int box_session_kill(box_exec_ctx *ctx, const char *id);

/* Kills the session's processes and forgets it. FAWN_ENOENT if unknown. */
FAWN_MUST_CHECK int box_session_delete(box_exec_ctx *ctx, const char *id);

/* {sessions: [{id, busy, cwd, running_init}]} */
json_t *box_session_list(box_exec_ctx *ctx);

/* Forgets lingering one-shot inits that have exited and kills those whose
 * command's deadline has passed. Called about once a second. */
void box_exec_reap(box_exec_ctx *ctx);

/* Ends the idle init kept for the next one-shot execution, if any (an idle
 * box should hold no process but itself). */
void box_exec_trim(box_exec_ctx *ctx);

/* The box is stopping: kills the init of every session, of every one-shot
 * execution in progress and of every lingering one (so each command in
 * progress ends at once, reported `killed`), and refuses commands from now
 * on (FAWN_EBUSY). Does not wait for the kills to be confirmed. */
void box_exec_stop(box_exec_ctx *ctx);

#endif
