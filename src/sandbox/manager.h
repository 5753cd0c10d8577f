/* The sandbox manager: the one way anything gets a sandbox (tools, uploads
 * that sync into a sandbox, channels, schedules). It decides who may use a
 * sandbox, which one, for how long, and when one can no longer be trusted.
 *
 * Rules (each one enforced here, in one place):
 * - Gate: every acquisition checks sandbox:execute for its principal
 *   (authz_sandbox_execute), reuse of a held sandbox included; within one
 *   run the decision is made once (sbx_decision). A denial starts and
 *   touches nothing.
 * - Leases: acquisitions for one (user, thread) are serialized; different
 *   threads proceed in parallel. A sandbox stays active while any holder
 *   holds it; the last release parks it in the warm pool. A destroy while
 *   holders remain is deferred (and reported so); teardown waits for them.
 * - Warm pool: a parked sandbox is reused by the thread's next acquisition;
 *   it is torn down after idle_timeout_s; past `replicas` running sandboxes
 *   the oldest idle ones are torn down, never active ones. A teardown that
 *   fails is tried again after a doubling wait (1 s up to 5 min), so a
 *   failing provider costs one call per wait and never keeps a sandbox
 *   from its acquisitions.
 * - Generations: each started box has a generation id; every record (lease,
 *   session, fence) names the generation it is about, and an answer about
 *   another generation never acts on the current one.
 * - Keepalive: every box the manager holds hears from it (GET /v1/sandbox)
 *   SBX_KEEPALIVES_PER_TIMEOUT times per idle_timeout_s. Providers start
 *   boxes that exit once nothing has talked to them for idle_timeout_s, so
 *   a box whose manager is gone (stopped, crashed, its home deleted) ends
 *   instead of running on; a successor that starts in time adopts it.
 * - Health on reuse: a definite "dead" drops the sandbox and starts another;
 *   an unknown answer never counts as healthy (the generation is fenced).
 * - Attestation: with a provider that attests its boxes, a box is handed
 *   out (after create, or adopted after a restart) only once it proved it
 *   is the one started for that sandbox and user (box_attested); a box
 *   refused or of unknown attestation is fenced and destroyed, never used.
 * - Quarantine: an uncertain outcome fences the generation in a persistent
 *   record (store). One predicate, sbx_reusable, decides reuse on every
 *   path: in-process reuse, warm-pool reclaim, rediscovery after a restart,
 *   provider create responses, orphan reconciliation. A fenced sandbox is
 *   never handed out: the next acquisition destroys it and starts a fresh
 *   generation. A fence retires only when the provider confirms the fenced
 *   generation is absent; a failed destroy is the caller's error. A caller
 *   of the credential broker that fails attestation fences its sandbox's
 *   generation the same way (sbx_fence_generation).
 * - Broker: credentials are usable only while an execution lease holds the
 *   sandbox at the generation the broker serves (sbx_holding_find); the
 *   provider names the directory mounted for it and attests callers by the
 *   kernel's word (sbx_broker_dir, sbx_attest_peer), or, for boxes that
 *   reach the broker over the network, by the proof they send and its own
 *   records (sbx_attest_remote; src/broker/broker.h).
 * - Scopes: an acquisition with a scope ("run:agent") gets that scope's own
 *   persistent shell session in the sandbox; acquiring a scope again is
 *   idempotent; when its last lease is released its session ends, and only
 *   its session. Stopping a scope's commands (sbx_kill_scope) goes through
 *   the session its leases hold, never through another acquisition.
 * - Ownership (several gateways on one store and one home): a sandbox is
 *   run by one gateway at a time, the one whose lease the store records
 *   (store_sandbox_owner_*). Every acquisition claims it first
 *   (ownership_claim); the manager renews its leases every heartbeat_ms
 *   and gives them up when it tears a sandbox down and when it stops.
 *   Another gateway's sandbox is asked for: its owner lets go at its next
 *   heartbeat when nothing holds it (tearing its box down), and the asker
 *   waits at most one lease and a heartbeat for that, then FAWN_EBUSY
 *   naming the owner. A sandbox that changes hands (free, or its owner's
 *   lease expired) has its recorded generation fenced in the store before
 *   the new owner starts its own. The start sweep adopts or removes only
 *   boxes that are this gateway's, nobody's, or of an expired lease
 *   (removed); a live gateway's are left alone, and removed by the
 *   heartbeat if that gateway's lease runs out (it was dead after all).
 * - Fences are seen by every gateway at once: the reuse predicate reads
 *   the store's fence of the generation on every decision (sbx_reusable).
 *
 * Every function is safe to call from any thread. Every out-parameter (of
 * these functions and of the provider operations) is set on every path,
 * failures included: NULL, 0 or empty before anything can fail. */
#ifndef FAWN_SANDBOX_MANAGER_H
#define FAWN_SANDBOX_MANAGER_H

#include <jansson.h>
#include <limits.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "authz/authz.h"
#include "config/config.h"
#include "store/store.h"
#include "base/base.h"

/* A generation id: 32 hex digits. */
#define SBX_GENERATION_LEN 32
/* A scope names a run and an agent: "<run id>:<agent>", each [A-Za-z0-9_-]{1,64}. */
#define SBX_SCOPE_MAX 129
/* Box API shell session ids the manager creates: "scope-" + 32 hex. */
#define SBX_SESSION_ID_MAX 64
/* Keepalive requests each box the manager holds gets per idle timeout: a
 * late round or two never lets a box the manager wants exit. */
#define SBX_KEEPALIVES_PER_TIMEOUT 4

/* ---- providers ---- */

/* Where a box is and which generation runs there. */
typedef struct sbx_box {
    char sandbox_id[17]; /* paths_sandbox_id(user, thread) */
    char generation[SBX_GENERATION_LEN + 1];
    char endpoint[PATH_MAX]; /* "unix:/path" or "tcp:host:port" */
    char token[128];         /* bearer token for tcp endpoints, else "" */
} sbx_box;

/* What a provider knows of a sandbox. UNKNOWN is never ABSENT: a provider
 * that cannot tell (unreachable control plane, malformed answer) says UNKNOWN. */
enum sbx_presence {
    SBX_ABSENT,      /* definitely nothing: no box, no leftovers */
    SBX_PENDING,     /* being created, not answering yet */
    SBX_RUNNING,     /* answering; the generation is reported */
    SBX_STOPPED,     /* exited, leftovers not yet removed */
    SBX_TERMINATING, /* asked to stop, still there */
    SBX_UNKNOWN,
};

/* Where a sandbox sees the credential broker's directory (read-only): its
 * socket (SBX_BROKER_MOUNT "/broker.sock") and its shims (SBX_BROKER_MOUNT
 * "/bin", on every command's PATH). */
#define SBX_BROKER_MOUNT "/mnt/broker"

/* What the kernel reports of the process at the other end of a unix socket
 * (SO_PEERCRED, and SO_PEERPIDFD when the kernel has it: -1 otherwise). */
typedef struct sbx_peer {
    pid_t pid;
    uid_t uid;
    gid_t gid;
    int pidfd;
} sbx_peer;

/* A credential broker caller that came over the network (a pod's relay,
 * src/broker/relay.c): what it named and proved, and where it came from.
 * sandbox_id and generation are the manager's record's (an execution lease
 * holds them: sbx_holding_find), user the user that record holds it for. */
typedef struct sbx_remote_caller {
    const char *sandbox_id, *generation, *user;
    const char *address;        /* the caller's IP address, numeric text */
    int64_t timestamp;          /* seconds since the epoch, as the caller sent it */
    const char *nonce;          /* 64 lowercase hex */
    const char *mac;            /* what the caller sent: untrusted */
    const char *request_sha256; /* the hash of the request received, 64 lowercase hex */
} sbx_remote_caller;

/* Whether a box proved it is the one its provider started for the sandbox
 * (a Kubernetes pod's attestation, box/attest.h), or whether a broker peer
 * is a process of a given sandbox. UNKNOWN (no usable answer: a peer's /proc
 * could not be read, it exited, the host cannot tell) is never ATTESTED:
 * the box is not used, the peer is refused. */
enum sbx_attestation { SBX_ATTESTED, SBX_REFUSED, SBX_ATTEST_UNKNOWN };

/* Set by whoever gave up on an acquisition (client gone, run cancelled). */
typedef struct sbx_cancel {
    atomic_bool cancelled;
} sbx_cancel;

/* A placement of boxes: local namespaces, a remote control plane, or (in
 * tests) a fault-injecting fake. Every operation may be called from several
 * threads at once, never twice at once for one sandbox id. */
typedef struct sbx_provider {
    const char *name;
    void *ctx;
    /* Starts a box for (user, thread) and waits until it answers; fills
     * out (sandbox_id, generation, endpoint, token). Polls cancel (may be
     * NULL): FAWN_ECANCELED when it was set, after removing what it began.
     * On any error nothing is left running that probe would not report. */
    int (*create)(void *ctx, sbx_box *out, const char *user, const char *thread,
                  const sbx_cancel *cancel);
    /* What the provider knows of sandbox_id: *state, and for SBX_RUNNING the
     * running generation. Returns 0 with SBX_UNKNOWN when it cannot tell. */
    int (*probe)(void *ctx, enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                 const char *sandbox_id);
    /* 0 when box answers and runs box->generation; FAWN_ENOENT when it
     * definitely does not (gone, or another generation answers); any other
     * error means unknown. */
    int (*health)(void *ctx, const sbx_box *box);
    /* Stops and removes sandbox_id's box when it runs `generation` (any
     * generation when ""). 0 only once the provider confirms the box is
     * absent; otherwise an error (what was removed stays removed: calling
     * again finishes the job). */
    int (*destroy)(void *ctx, const char *sandbox_id, const char *generation);
    /* Calls each for every box the provider has (any state but ABSENT),
     * with its sandbox id and generation ("" when unknown); stops at the
     * first non-zero return and returns it. */
    int (*list)(void *ctx,
                int (*each)(void *each_ctx, const char *sandbox_id, const char *generation),
                void *each_ctx);
    /* One box API request to box (see box_call for the contract). */
    int (*call)(void *ctx, json_t **reply, int *status, const sbx_box *box, const char *method,
                const char *path, const json_t *body, int timeout_ms);
    /* The same with size bytes of file_fd as the body (file uploads). */
    int (*call_file)(void *ctx, json_t **reply, int *status, const sbx_box *box, const char *method,
                     const char *path, int file_fd, uint64_t size, int timeout_ms);
    /* Asks box (started for user's sandbox) to prove it is the box the
     * provider created for it; NULL for providers whose boxes need no proof
     * (the manager then trusts create). SBX_REFUSED: it answered, and not as
     * that box; SBX_ATTEST_UNKNOWN: no usable answer. */
    int (*attest)(void *ctx, enum sbx_attestation *out, const sbx_box *box, const char *user);
    /* True when boxes see the host's thread directories (local namespaces):
     * files written there need no copy into the box. */
    bool shares_host_files;
    /* Credential broker support (src/broker), NULL when the provider has
     * none. broker_dir: the host directory the provider mounts read-only at
     * SBX_BROKER_MOUNT in sandbox_id's boxes (where the broker puts its
     * socket and shims). attest_peer: what the kernel says of a peer connected
     * to sandbox_id's broker socket (see sbx_attest_peer). */
    int (*broker_dir)(void *ctx, char out[PATH_MAX], const char *sandbox_id);
    int (*attest_peer)(void *ctx, enum sbx_attestation *out, const char *sandbox_id,
                       const struct sbx_peer *peer);
    /* Broker support over the network instead (no broker_dir): whether
     * caller is sandbox_id's box by the proof it sent (see
     * sbx_attest_remote); NULL when the provider has none. */
    int (*attest_remote)(void *ctx, enum sbx_attestation *out, const sbx_remote_caller *caller);
} sbx_provider;

/* The local provider: boxes in fresh namespaces on this host (local.c),
 * started through fawn_bin's launch helper when the caller is
 * multithreaded (NULL: this program), and with sandbox.network allowlist
 * the egress proxy their commands reach the network through (egress.h;
 * FAWN_EUNSUP when not root, FAWN_ECONFIG for a bad sandbox.egress). cfg
 * must outlive it. */
FAWN_MUST_CHECK int local_provider_new(sbx_provider **out, const fawn_config *cfg,
                                       const char *fawn_bin);
void local_provider_free(sbx_provider *p);

/* The provider config.yaml chooses (sandbox.provider: local, remote with
 * the commands of sandbox.remote, see remote.h, or container with the
 * engine and image of sandbox.container, see container.h); FAWN_ECONFIG
 * naming the key for a bad sandbox.remote or sandbox.container. Close it
 * with sbx_provider_close. */
FAWN_MUST_CHECK int sbx_provider_open(sbx_provider **out, const fawn_config *cfg,
                                      const char *fawn_bin);
void sbx_provider_close(sbx_provider *p);

/* ---- the manager ---- */

typedef struct sbx_manager_config {
    uint32_t idle_timeout_s;  /* a parked sandbox is torn down after this (600), and boxes hear
                                 from the manager 4 times as often; 0 = never, no keepalive */
    uint32_t replicas;        /* running sandboxes kept at most by evicting idle ones; 0 = no cap */
    uint32_t call_timeout_ms; /* health checks and session requests (5000) */
    const char *gateway_id;   /* this gateway among those sharing the store (copied;
                                 NULL: SBX_GATEWAY_DEFAULT) */
    uint32_t heartbeat_ms;    /* ownership leases are renewed this often (0: 2000) */
    uint32_t lease_ms;        /* and last this long (0: 10000) */
} sbx_manager_config;

/* The gateway id of a manager configured without one. */
#define SBX_GATEWAY_DEFAULT "local"

typedef struct sbx_manager sbx_manager;

/* Creates the manager over provider (borrowed, like st and policy; all must
 * outlive it), then reconciles what the provider already has. A box another
 * live gateway owns is left alone; one whose owner's lease expired is
 * fenced and destroyed; of the rest (this gateway's or nobody's), a box the
 * store records for a (user, thread) at that generation, not fenced and
 * healthy, is adopted into the warm pool once every shell session in it is
 * ended (no scope is live yet: they are the sessions of runs that died with
 * the previous process, and their processes end with them); any other box,
 * or one whose sessions could not be ended, is destroyed; fences of
 * generations the provider confirms absent retire. Failures to destroy
 * are logged and left for the next start (the fences stay). Starts the
 * reaper that tears down idle sandboxes and the heartbeat that renews the
 * ownership leases and honors other gateways' requests. FAWN_EINVAL for a
 * gateway id the store cannot hold. */
FAWN_MUST_CHECK int sbx_manager_new(sbx_manager **out, const sbx_manager_config *cfg,
                                    sbx_provider *provider, store *st, const authz_policy *policy);
/* Stops the reaper, the keepalive and the heartbeat, gives up this
 * gateway's ownership of its sandboxes and frees the manager. Every lease
 * must have been released. Parked sandboxes are left running for the next
 * start to rediscover (their store records stay: this gateway adopts them
 * if nobody claimed them meanwhile; another gateway that needs one fences
 * and replaces it); with no manager talking to them, they exit after
 * idle_timeout_s. */
void sbx_manager_free(sbx_manager *m);

/* What holds a sandbox. */
enum sbx_holder { SBX_HOLD_EXECUTION, SBX_HOLD_UPLOAD, SBX_HOLD_FORK, SBX_HOLD_KINDS };

/* Who acquires: the user (owner directory name, [A-Za-z0-9_-]{1,64}) and
 * the RBAC role read when the run started. */
typedef struct sbx_principal {
    const char *user;
    const char *role;
} sbx_principal;

/* A run's sandbox:execute decision: zero-initialize it at the start of the
 * run; the first acquisition decides, later ones reuse the decision. */
typedef struct sbx_decision {
    bool made;
    int result; /* 0 or FAWN_EPERM */
} sbx_decision;

typedef struct sbx_request {
    sbx_principal who;
    const char *thread; /* [A-Za-z0-9_-]{1,64} */
    enum sbx_holder kind;
    const char *scope;        /* a shell session of its own, or NULL */
    sbx_decision *decision;   /* the run's, or NULL to decide for this acquisition alone */
    const sbx_cancel *cancel; /* NULL when it cannot be cancelled */
} sbx_request;

typedef struct sbx_entry sbx_entry;

/* A hold on a sandbox. The box (and session) fields are the caller's to
 * read; the rest belongs to the manager. */
typedef struct sbx_lease {
    sbx_box box;
    char session[SBX_SESSION_ID_MAX + 1]; /* the scope's shell session id, "" without scope */
    sbx_manager *m;
    sbx_entry *entry;
    enum sbx_holder kind;
    char scope[SBX_SCOPE_MAX + 1];
} sbx_lease;

/* Acquires the thread's sandbox for req->who, starting one when none is
 * running (or the running one is fenced, dead or of unknown health).
 * *out is the caller's until sbx_release. Errors:
 *   FAWN_EPERM    "Sandbox execution is not permitted for your role": nothing
 *                 was started or touched;
 *   FAWN_EINVAL   bad user, thread or scope;
 *   FAWN_ECANCELED req->cancel was set; a sandbox started for this
 *                 acquisition is parked (not bound) unless another holder
 *                 took it meanwhile;
 *   FAWN_EBUSY    a destroy of this sandbox is waiting for its holders, or
 *                 another gateway kept it past the wait (the message names it);
 *   provider errors (a failed create; a fenced or dead generation that
 *                 could not be destroyed: the fence stays). */
FAWN_MUST_CHECK int sbx_acquire(sbx_lease **out, sbx_manager *m, const sbx_request *req);

/* Ends a hold (NULL is fine). The last holder of a scope ends its session;
 * the last holder of the sandbox parks it in the warm pool, or tears it
 * down when a destroy was deferred or its generation is fenced. */
void sbx_release(sbx_lease *l);

/* Records that an outcome on l's box is uncertain (it stopped answering
 * during a command, a kill could not be confirmed): fences its generation
 * persistently. With scope_only, fences only l's scope (its session is
 * abandoned; the next acquisition of the scope gets a new one). */
FAWN_MUST_CHECK int sbx_fence(sbx_lease *l, bool scope_only, const char *reason);

/* One box API request on l's box. A failure mid-exchange (FAWN_EIO,
 * FAWN_ETIMEDOUT, FAWN_EPROTO: the outcome is unknown) fences the
 * generation before it is returned. */
FAWN_MUST_CHECK int sbx_call(json_t **reply, int *status, sbx_lease *l, const char *method,
                             const char *path, const json_t *body, int timeout_ms);
/* The same with size bytes of file_fd as the body (the box API's file
 * upload); FAWN_EUNSUP when the provider cannot send files. */
FAWN_MUST_CHECK int sbx_call_file(json_t **reply, int *status, sbx_lease *l, const char *method,
                                  const char *path, int file_fd, uint64_t size, int timeout_ms);

/* Kills the commands of scope's shell session in the (user, thread)
 * sandbox while a lease of that scope holds it: how a cancelled run's
 * command is stopped. It acquires nothing, so it passes no gate (it only
 * stops what an acquisition let start) and waits for no other operation on
 * the sandbox. 0 once the box confirmed the kill; FAWN_ENOENT when no lease
 * holds the scope, or the box has no such session (none of its commands
 * can be running). An outcome left
 * unknown (the exchange broke, the box could not confirm) fences the scope:
 * its session is abandoned, the next acquisition of it gets a new one. */
FAWN_MUST_CHECK int sbx_kill_scope(sbx_manager *m, const char *user, const char *thread,
                                   const char *scope, int timeout_ms);

enum sbx_destroy_outcome { SBX_DESTROYED, SBX_DESTROY_DEFERRED };

/* Tears down the (user, thread) sandbox now, or, while holders remain,
 * once the last one releases it (*outcome says which), and gives up its
 * ownership. A sandbox this manager does not know is claimed first (as an
 * acquisition claims it: FAWN_EBUSY when another gateway keeps it), so a
 * box another gateway runs is never removed under it. Provider failures
 * are returned (and a later call retries). */
FAWN_MUST_CHECK int sbx_destroy(enum sbx_destroy_outcome *outcome, sbx_manager *m, const char *user,
                                const char *thread);

/* ---- what the credential broker needs (src/broker) ---- */

/* Tells fn (with ctx) every time an execution lease on a box is handed out,
 * before sbx_acquire returns it (so what fn prepares for the box is there
 * before its first command). fn must not call back into the manager's
 * acquisition or release. Set once, before the first acquisition. */
typedef void (*sbx_bound_fn)(void *ctx, const char *user, const char *thread, const sbx_box *box);
void sbx_manager_on_bound(sbx_manager *m, sbx_bound_fn fn, void *ctx);

/* Who holds sandbox_id's box at generation with an execution lease now. */
typedef struct sbx_holding {
    char user[65], thread[65];
    char scope[SBX_SCOPE_MAX + 1]; /* one holding lease's scope ("<run>:<agent>"), or "" */
} sbx_holding;

/* 0 with *out filled when an execution lease holds sandbox_id running
 * generation and the generation is not fenced; FAWN_ENOENT otherwise (no
 * lease, released, another generation, fenced). */
FAWN_MUST_CHECK int sbx_holding_find(sbx_holding *out, sbx_manager *m, const char *sandbox_id,
                                     const char *generation);

/* Fences (sandbox_id, generation) persistently, as sbx_fence does, without
 * a lease (a sandbox whose broker caller failed attestation). Returns the
 * store's answer; the fence holds in this process in any case. */
FAWN_MUST_CHECK int sbx_fence_generation(sbx_manager *m, const char *sandbox_id,
                                         const char *generation, const char *reason);

/* Whether the provider can host the broker (broker_dir and attest_peer,
 * or attest_remote). */
bool sbx_broker_supported(const sbx_manager *m);

/* Whether the provider's boxes reach the broker over the network
 * (attest_remote) rather than through a directory it mounts. */
bool sbx_broker_remote(const sbx_manager *m);

/* The provider's broker directory for sandbox_id (see sbx_provider);
 * FAWN_EUNSUP when the provider has no broker support. */
FAWN_MUST_CHECK int sbx_broker_dir(char out[PATH_MAX], sbx_manager *m, const char *sandbox_id);

/* Whether peer is a process of sandbox_id, by the kernel's word only (the
 * provider's attest): *out is SBX_ATTEST_UNKNOWN on every failure, and
 * FAWN_EUNSUP when the provider cannot attest. */
FAWN_MUST_CHECK int sbx_attest_peer(enum sbx_attestation *out, sbx_manager *m,
                                    const char *sandbox_id, const sbx_peer *peer);

/* Whether caller is the box of caller->sandbox_id at caller->generation,
 * by its proof and the provider's own records (the provider's
 * attest_remote): SBX_REFUSED when the sandbox's box sent a wrong proof or
 * its proof came from elsewhere; SBX_ATTEST_UNKNOWN when nothing could be
 * checked or the caller cannot be told from a stranger (*out on every
 * failure; FAWN_EUNSUP when the provider has no such attestation). */
FAWN_MUST_CHECK int sbx_attest_remote(enum sbx_attestation *out, sbx_manager *m,
                                      const sbx_remote_caller *caller);

/* The one reuse predicate: false when (sandbox_id, generation) is fenced
 * (or cannot be checked). */
bool sbx_reusable(sbx_manager *m, const char *sandbox_id, const char *generation);

enum sbx_state { SBX_STATE_STARTING, SBX_STATE_ACTIVE, SBX_STATE_IDLE, SBX_STATE_STOPPING };

/* One sandbox as GET /api/sandboxes and `fawn sandbox ls` show it. */
typedef struct sbx_info {
    char user[65], thread[65], sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
    enum sbx_state state;
    unsigned holders[SBX_HOLD_KINDS];
    int64_t idle_ms; /* how long it has been parked; 0 when active */
    bool fenced;
    bool destroy_deferred;
    unsigned teardown_failures;  /* idle teardowns that failed in a row */
    int64_t teardown_backoff_ms; /* the reaper's wait after the last of them (0: none) */
} sbx_info;

/* The sandboxes the manager knows (malloc'd array in *out, caller frees). */
FAWN_MUST_CHECK int sbx_list(sbx_info **out, size_t *n, sbx_manager *m);
/* "starting", "active", "idle", "stopping"; and "execution", "upload", "fork". */
const char *sbx_state_name(enum sbx_state s);
const char *sbx_holder_name(enum sbx_holder k);

/* ---- a thread's files on this host ---- */

/* Opens the thread's user-data directory, where paths_user_data_dir puts it
 * under cfg->home (O_DIRECTORY; caller closes *fd_out). With create, first
 * makes it as a sandbox start makes it: limited to sandbox.limits.disk_mb
 * from the moment it appears (sandbox/quota.h; an existing one gets the
 * configured limit again), with workspace/, uploads/ and outputs/ owned by
 * the sandbox's host uid; without, FAWN_ENOENT when it does not exist.
 * FAWN_EINVAL for invalid ids. */
FAWN_MUST_CHECK int sbx_user_data_open(int *fd_out, const fawn_config *cfg, const char *user,
                                       const char *thread, bool create);

#endif
