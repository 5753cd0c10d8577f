/* The credential broker: runs configured CLIs (broker.clis) with a user's
 * credentials for commands inside that user's sandbox, so the credentials
 * never enter the sandbox. A shim on the sandbox's PATH (SBX_BROKER_MOUNT
 * "/bin/<name>", running `fawn broker-call <name> ...`) forwards its
 * arguments and stdin over the sandbox's own socket and replays stdout,
 * stderr and the exit code; no cwd, no environment crosses.
 *
 * Rules (each enforced in one place):
 * - One socket per sandbox (broker_sandbox_bound), in the directory the
 *   provider mounts into that sandbox only (sbx_broker_dir): the socket a
 *   call arrives on names the sandbox.
 * - Attestation (serve_call -> sbx_attest_peer): the caller's kernel
 *   credentials must make it a process of that sandbox. Tri-state;
 *   unknown refuses; refused also fences the sandbox's generation
 *   persistently (sbx_fence_generation), so it is never used again.
 * - Leases (sbx_holding_find): a call runs only while an execution lease
 *   holds the sandbox at the socket's generation, and is killed
 *   (BROKER_EXIT_REVOKED) as soon as none does.
 * - Policy (broker_policy_check): allow-list of argument prefixes per CLI;
 *   the binary is fixed, run without a shell, with an environment made only
 *   of the CLI's configured entries (credentials read from
 *   $FAWN_HOME/users/<user>/credentials/<cli>/, which no sandbox mounts).
 * - Limits: request size, output per stream (truncated, flagged), timeout,
 *   calls at once per sandbox and in all (a busy answer), connections
 *   being served per sandbox (over TCP, per source address) and in all
 *   (accept_one, accept_remote).
 * - Audit: one line per call (broker_audit_line): user, thread, run scope,
 *   sandbox, CLI, the allow rule that matched (never other argument values,
 *   never the environment), exit code, duration and bytes; to the log and
 *   to $FAWN_HOME/audit/broker.log.
 *
 * With a provider whose boxes reach the broker over the network (a
 * Kubernetes pod, sbx_broker_remote), the socket is the box's own: the box
 * relays its commands' calls (broker_relay_start) to broker.listen over
 * TCP, each call preceded by a proof line (broker_proof) whose MAC of the
 * pod's secret covers the call's time, a fresh nonce, the sandbox, user and
 * pod UID and the request's hash. The broker then
 * - takes the sandbox and generation named only as keys: an execution
 *   lease must hold exactly that generation (sbx_holding_find), and the
 *   user bound into the MAC is the one the manager's record holds;
 * - attests by the provider's records (sbx_attest_remote: the MAC
 *   recomputed, compared in constant time, and the pod's UID and IP as the
 *   provider knows them); refused fences the generation as above, unknown
 *   refuses the call;
 * - takes a proof once: its time within BROKER_PROOF_WINDOW_S of the
 *   gateway's clock and its nonce not seen before (broker_nonce_seen
 *   before asking the provider, broker_nonce_admit once attested).
 * The rest (policy, limits, leases, audit) is the same path as a local call.
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_BROKER_H
#define FAWN_BROKER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "config/config.h"
#include "sandbox/manager.h"

/* ---- limits (defaults; broker.* may lower or raise the configurable ones) ---- */

/* A request (arguments and stdin) larger than this is refused: CLI
 * arguments are a few KiB, and 1 MiB of stdin covers a message or a
 * document body while bounding what one call makes the gateway hold. */
#define BROKER_REQUEST_MAX ((size_t)1 << 20)
/* Output kept per stream; the rest is read and dropped, and flagged: 4 MiB
 * holds any listing a model can use, and bounds a call's memory. */
#define BROKER_OUTPUT_MAX ((size_t)4 << 20)
/* Arguments one request carries at most: real invocations use a few dozen. */
#define BROKER_ARGS_MAX 1024
/* Words one allow rule has at most, and rules per CLI. */
#define BROKER_RULE_WORDS_MAX 8
#define BROKER_RULES_MAX 256
/* CLIs broker.clis lists at most, and environment entries per CLI. */
#define BROKER_CLIS_MAX 32
#define BROKER_ENV_MAX 32
/* One credential file at most: tokens and small config files are under a
 * few KiB. */
#define BROKER_CREDENTIAL_MAX ((size_t)64 << 10)
/* Default per-call timeout (broker.clis[].timeout_s): a CLI talking to a
 * remote API answers within seconds; 120 s leaves room for uploads. */
#define BROKER_TIMEOUT_S_DEFAULT 120
#define BROKER_TIMEOUT_S_MAX 3600
/* Calls running at once in all (broker.max_concurrent) and per sandbox
 * (broker.max_concurrent_per_sandbox): each is a process of the gateway's
 * host, so they are few; one sandbox cannot take all of them. */
#define BROKER_CONCURRENT_DEFAULT 8
#define BROKER_CONCURRENT_PER_SANDBOX_DEFAULT 2
#define BROKER_CONCURRENT_MAX 256
/* Exit codes the shim reports for the broker's own answers. */
#define BROKER_EXIT_TIMEOUT 124 /* the CLI ran past its timeout and was killed (as timeout(1)) */
#define BROKER_EXIT_REVOKED 125 /* the lease went while it ran: killed */
#define BROKER_EXIT_REFUSED 126 /* not run: refused (policy, attestation, lease, size) */
#define BROKER_EXIT_BUSY 75     /* not run: too many calls at once (EX_TEMPFAIL: try later) */

/* ---- the wire (wire.c: requests are untrusted input) ----
 * Every message: "FWB1", a 4-byte big-endian body length, the body.
 * Request body: u16 name length, name; u32 argc, then each argument as u32
 * length + bytes (no NUL); u32 stdin length + bytes. Reply body: i32 exit
 * code, u8 flags (BROKER_STDOUT_TRUNCATED, BROKER_STDERR_TRUNCATED), u32
 * length + stdout, u32 length + stderr. */
#define BROKER_MAGIC "FWB1"
#define BROKER_HEADER_LEN 8
#define BROKER_STDOUT_TRUNCATED 1u
#define BROKER_STDERR_TRUNCATED 2u
/* A reply body holds both streams and 13 bytes of fields. */
#define BROKER_REPLY_MAX (2 * BROKER_OUTPUT_MAX + 64)

typedef struct broker_request {
    char *name;  /* the CLI's name (malloc'd) */
    char **argv; /* argc arguments after the name (malloc'd, each NUL-terminated) */
    size_t argc;
    uint8_t *in; /* stdin bytes (malloc'd, may be NULL when in_len is 0) */
    size_t in_len;
} broker_request;

/* The body length a header announces: 0, or FAWN_EPROTO for another magic,
 * FAWN_E2BIG past limit. */
FAWN_MUST_CHECK int broker_header_parse(size_t *body_len, const uint8_t hdr[BROKER_HEADER_LEN],
                                        size_t limit);

/* Parses a request body (exactly len bytes). FAWN_EPROTO naming what is
 * malformed (a length past the end, trailing bytes, a NUL in an argument,
 * a bad name, more than BROKER_ARGS_MAX arguments). Free with
 * broker_request_clear. */
FAWN_MUST_CHECK int broker_request_parse(broker_request *out, const uint8_t *buf, size_t len);
void broker_request_clear(broker_request *r);

/* A whole request message (header included) into out (emptied first). */
FAWN_MUST_CHECK int broker_request_encode(fbuf *out, const char *name, char *const *argv,
                                          size_t argc, const void *in, size_t in_len);

typedef struct broker_reply {
    int exit_code;
    unsigned flags;
    const char *out; /* borrowed */
    size_t out_len;
    const char *err;
    size_t err_len;
} broker_reply;

/* A whole reply message (header included) into out (emptied first). */
FAWN_MUST_CHECK int broker_reply_encode(fbuf *out, const broker_reply *r);
/* Parses a reply body; out's streams point into buf. FAWN_EPROTO when malformed. */
FAWN_MUST_CHECK int broker_reply_parse(broker_reply *out, const uint8_t *buf, size_t len);

/* ---- a call over the network (proof.c) ----
 * A TCP connection to broker.listen carries a proof line, then one request
 * message (as above); the reply is as above. The line is exactly
 * BROKER_PROOF_LEN bytes: "FWP1 <sandbox id: 16 hex> <pod UID> <time: 19
 * decimal digits, seconds since the epoch> <nonce: 64 hex> <MAC: 64 hex>\n",
 * the MAC being box_attest_call_mac's over the SHA-256 of the request
 * message, header included. */
#define BROKER_PROOF_MAGIC "FWP1"
#define BROKER_PROOF_LEN 209
/* How far a proof's time may be from the gateway's clock: a relay sends
 * its call at once, and 30 s tolerates clocks kept by NTP while bounding
 * how long a nonce must be remembered. */
#define BROKER_PROOF_WINDOW_S 30
/* Nonces remembered at once (each for 2 x BROKER_PROOF_WINDOW_S): calls
 * are processes started on the gateway's host, far fewer than 130 a
 * second; past this a call is refused as busy rather than a nonce forgotten. */
#define BROKER_NONCES_MAX 8192

typedef struct broker_proof {
    char sandbox_id[17];
    char pod_uid[37];
    int64_t timestamp;
    char nonce[65];
    char mac[65];
} broker_proof;

/* Parses a proof line (exactly BROKER_PROOF_LEN bytes, untrusted).
 * FAWN_EPROTO naming the field that is malformed (*out zeroed). */
FAWN_MUST_CHECK int broker_proof_parse(broker_proof *out, const char *line, size_t len);

/* The proof line for p (its fields well formed) into out, NUL-terminated.
 * FAWN_EINVAL for a malformed field (out ""). */
FAWN_MUST_CHECK int broker_proof_format(char out[BROKER_PROOF_LEN + 1], const broker_proof *p);

/* The nonces of proofs taken, each until its window has passed. */
typedef struct broker_nonces broker_nonces;
FAWN_MUST_CHECK int broker_nonces_new(broker_nonces **out);
void broker_nonces_free(broker_nonces *n);

/* Whether a proof's time is within BROKER_PROOF_WINDOW_S of now (seconds
 * since the epoch): the one test of a proof's time. */
bool broker_proof_current(int64_t timestamp, int64_t now);

/* Whether nonce was taken and is still remembered at now: a replay,
 * refused before anything is asked of the provider (a replayed proof
 * proves nothing of who sends it). Thread-safe. */
bool broker_nonce_seen(broker_nonces *n, const char *nonce, int64_t now);

/* Takes a proof's nonce at now (seconds since the epoch): 0 (remembered)
 * when timestamp is within BROKER_PROOF_WINDOW_S of now and the nonce was
 * not taken before; FAWN_ETIMEDOUT outside the window, FAWN_EEXIST for a
 * nonce seen (a replay), FAWN_EBUSY when BROKER_NONCES_MAX are remembered.
 * Call it only once the proof's MAC is verified, so that no stranger can
 * fill the table. Thread-safe. */
FAWN_MUST_CHECK int broker_nonce_admit(broker_nonces *n, const char *nonce, int64_t timestamp,
                                       int64_t now);

/* ---- configuration and policy (policy.c) ---- */

/* One environment entry of a CLI: a constant, the CLI's credential
 * directory, or the content of a file in it. */
enum broker_env_kind { BROKER_ENV_VALUE, BROKER_ENV_DIR, BROKER_ENV_FILE };
typedef struct broker_env {
    char *name;
    enum broker_env_kind kind;
    char *value; /* VALUE: the value; FILE: the file's name; DIR: NULL */
} broker_env;

typedef struct broker_rule {
    char *words[BROKER_RULE_WORDS_MAX];
    size_t n_words;
    char *text; /* the words joined by spaces: what the audit names */
} broker_rule;

typedef struct broker_cli {
    char *name;   /* [A-Za-z0-9_-][A-Za-z0-9._-]{0,63}: the command inside the sandbox */
    char *binary; /* absolute host path, run directly (no shell) */
    broker_rule rules[BROKER_RULES_MAX];
    size_t n_rules;
    broker_env env[BROKER_ENV_MAX];
    size_t n_env;
    uint32_t timeout_s;
} broker_cli;

typedef struct broker_config {
    broker_cli clis[BROKER_CLIS_MAX];
    size_t n_clis;
    char *listen; /* broker.listen: "IP:PORT" for boxes that call over the network, or NULL */
    uint32_t max_concurrent;
    uint32_t max_concurrent_per_sandbox;
} broker_config;

/* Reads the broker section (NULL: no CLIs) into *out. FAWN_ECONFIG naming
 * the key: a name or binary that is not allowed, an empty or malformed
 * allow list, an env entry that is not "value:<v>", "dir" or
 * "file:<name>", a limit out of range. Free with broker_config_free. */
FAWN_MUST_CHECK int broker_config_parse(broker_config *out, const json_t *section);
void broker_config_free(broker_config *c);

/* The CLI named name, or NULL. */
const broker_cli *broker_config_find(const broker_config *c, const char *name);

/* The allow rule argv (argc arguments after the CLI's name) starts with,
 * word for word; NULL when none does: the call is refused. */
const broker_rule *broker_policy_check(const broker_cli *cli, char *const *argv, size_t argc);

/* ---- the broker (broker.c) ---- */

typedef struct broker broker;

/* Starts a broker for cfg->broker over m (borrowed; must outlive it) and
 * registers it with m (sbx_manager_on_bound), so each sandbox gets its
 * socket and shims when a run first leases it. *out stays NULL (and 0 is
 * returned) when no CLI is configured. FAWN_ECONFIG for a bad section, or
 * when m's provider cannot host the broker (sbx_broker_supported). */
FAWN_MUST_CHECK int broker_new(broker **out, const fawn_config *cfg, sbx_manager *m);

/* Prepares sandbox box->sandbox_id for calls (its socket and shims, made
 * again for a new generation). What sbx_manager_on_bound calls; failures
 * are logged (the sandbox then has no broker). */
void broker_sandbox_bound(void *broker_ctx, const char *user, const char *thread,
                          const sbx_box *box);

/* Stops accepting, kills the calls in progress, waits for them, frees (NULL is fine). */
void broker_free(broker *b);

/* ---- a pod's relay (relay.c: the box's side of the shim) ---- */

typedef struct broker_relay_config {
    const char *dir;         /* its socket and shims, mounted at SBX_BROKER_MOUNT in the box */
    const char *address;     /* the broker's "HOST:PORT" */
    const char *clis;        /* the CLIs' names joined by "," */
    const char *attest_file; /* the pod's secret, read again for each call */
    const char *sandbox_id, *user, *pod_uid;
} broker_relay_config;

typedef struct broker_relay broker_relay;

/* Writes shims for cfg->clis into cfg->dir, listens at its socket and
 * relays each call to cfg->address with its proof (a thread of the
 * caller's; start it once the process is otherwise single-threaded work
 * done). FAWN_EINVAL for a malformed name list or address, FAWN_EIO when
 * the directory or socket cannot be made. Stop with broker_relay_stop. */
FAWN_MUST_CHECK int broker_relay_start(broker_relay **out, const broker_relay_config *cfg);

/* Stops accepting, waits for calls being relayed, frees (NULL is fine). */
void broker_relay_stop(broker_relay *r);

/* ---- the shim (what `fawn broker-call` runs inside a sandbox) ---- */

/* Sends name, argv and stdin (when it is not a terminal) to the socket at
 * socket_path and writes the reply's streams to out_fd and err_fd; returns
 * the exit code to exit with (BROKER_EXIT_REFUSED, with a message on
 * err_fd, when the broker cannot be reached or answers malformed). */
int broker_shim_main(const char *socket_path, const char *name, char *const *argv, size_t argc,
                     int in_fd, int out_fd, int err_fd);

#endif
