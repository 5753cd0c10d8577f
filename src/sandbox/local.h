/* The local provider: sandboxes as fresh Linux namespaces on this host,
 * their launch, their cgroups and their network namespace pool. Private to
 * the provider's files (local.c, local_provider.c, launch_spec.c, cgroup.c,
 * netns_pool.c) and to the CLI's sandbox commands and doctor; the rest of
 * fawn reaches the provider through sbx_provider (manager.h).
 *
 * Every out-parameter is set on every path, failures included: -1
 * descriptors, status 0, empty ids and boxes before anything can fail. */
#ifndef FAWN_SANDBOX_LOCAL_H
#define FAWN_SANDBOX_LOCAL_H

#include <limits.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "config/config.h"
#include "sandbox/manager.h"
#include "base/base.h"

/* Longest wait for a new box to report ready. */
#define SANDBOX_START_TIMEOUT_MS 10000

typedef struct local_box {
    char sandbox_id[17];        /* paths_sandbox_id(user, thread) */
    char socket_path[PATH_MAX]; /* the box API socket on the host */
    char generation[33];        /* the running box's generation id */
    bool started;               /* true when this call started it */
    pid_t pid;                  /* host pid when started by this call, else 0 */
    int egress_fd; /* network allowlist, when this call started it: the socket listening at
                      127.0.0.1:EGRESS_PROXY_PORT inside its network, for the caller to serve
                      (egress_proxy_add) or close; else -1 */
} local_box;

/* Network namespaces (loopback up) created ahead of need, so a sandbox with
 * network "none" does not wait for one while it starts (creating one is the
 * costliest part of a start). A long-running launcher fills the pool when it
 * has time (between starts); a start takes one if there is one. Needs root;
 * the namespaces belong to the host's user namespace, so commands cannot
 * reconfigure them. Each is handed out once. Not thread-safe: one launcher
 * thread owns a pool. */
typedef struct netns_pool netns_pool;

/* An empty pool that holds up to `size`. FAWN_EUNSUP when not root. */
FAWN_MUST_CHECK int netns_pool_new(netns_pool **out, size_t size);
/* Creates namespaces until the pool is full (this process's threads leave
 * the host's network namespace only for the instant of each creation, so
 * call it from a single-threaded launcher). */
FAWN_MUST_CHECK int netns_pool_fill(netns_pool *p);
/* A ready namespace's fd (the caller owns it), or -1 when the pool is empty. */
FAWN_MUST_CHECK int netns_pool_take(netns_pool *p);
/* Closes the namespaces not handed out. */
void netns_pool_free(netns_pool *p);

typedef struct local_spec {
    const fawn_config *cfg;
    const char *user;
    const char *thread;
    uint32_t idle_exit_s; /* the box exits after this long unused; 0 = never */
    netns_pool *netns;    /* optional: where network "none" sandboxes get their namespace */
    const char *fawn_bin; /* the fawn binary, for launches from multithreaded programs;
                             NULL = this program (right when it is fawn) */
} local_spec;

/* Returns the thread's running box, or starts one: creates the thread's
 * directories (as sbx_user_data_open in manager.h) and the user's skills
 * view (skills_view_ensure: mounted at /mnt/skills), then launches `fawn box`
 * in fresh namespaces (see box/box.h) with cgroup limits, and waits for it
 * to be ready; with network allowlist, in a namespace of egress_netns_new
 * whose proxy socket it hands back (out->egress_fd). Starts for one
 * sandbox are serialized with a lock file. */
FAWN_MUST_CHECK int local_box_ensure(local_box *out, const local_spec *spec);

/* What local_launch needs: one sandbox's box, serving on listen_fd. */
typedef struct local_launch_spec {
    const fawn_config *cfg;
    const char *sandbox_id; /* [A-Za-z0-9_-]{1,64}: names its host uid and cgroup */
    const char *user_data;  /* host directory holding workspace/, uploads/, outputs/ (created) */
    const char *skills;     /* host directory mounted read-only at /mnt/skills, or NULL */
    int listen_fd;          /* a listening socket the box serves on (borrowed) */
    int log_fd;             /* the box's stdout and stderr (borrowed) */
    const char *token;      /* bearer token every request must carry, or NULL */
    uint32_t idle_exit_s;   /* 0 = never */
    netns_pool *netns;      /* optional (see netns_pool) */
    int egress_netns;       /* network allowlist: the namespace egress_netns_new made, which the
                               box enters (borrowed; not a standard stream); else unused */
    const char *fawn_bin;   /* as in local_spec */
    bool die_with_launcher; /* the box is killed when its launcher dies (fawn box --listen) */
    const struct box_attest *attest; /* a pod's attestation (box/attest.h), or NULL */
    const char *generation;          /* the box's generation (32 lowercase hex), or NULL: random */
    const char *broker_dir; /* the sandbox's credential broker directory (local_broker_dir),
                               bound read-only at /mnt/broker; NULL: none */
} local_launch_spec;

/* Starts a box as PID 1 of fresh user, mount, pid, ipc, uts (and, for
 * network none, net) namespaces with the sandbox's mounts (box/box.h),
 * its cgroup, and a host uid that is never root; waits until it is ready.
 * user_data is made as sbx_user_data_open makes it (disk limit included);
 * where no kernel quota holds it, the box is told to measure it. Logs a
 * warning when the kernel could but the directory predates quotas.
 * Stores its host pid (a child of the caller, who reaps it) and generation.
 * A small single-threaded caller (like the CLI) runs the box in a clone of
 * itself, which is fast; any other goes through a freshly exec'd launch
 * helper, so the box never inherits another thread's locks or a big
 * caller's memory. */
FAWN_MUST_CHECK int local_launch(pid_t *pid, char generation[33], const local_launch_spec *spec);

/* The launch helper (`fawn sandbox launch-helper`, run by local_launch from
 * multithreaded programs): reads a spec and descriptors at fixed numbers,
 * launches, reports. Returns the process exit status. */
FAWN_MUST_CHECK int local_launch_helper_main(bool have_netns);

/* Removes what a launched box leaves on the host after it exited (its cgroup). */
void local_launch_cleanup(const fawn_config *cfg, const char *sandbox_id);

/* Asks the thread's box to shut down and removes its socket and cgroup.
 * Returns 0 also when no box was running. */
FAWN_MUST_CHECK int local_box_stop(const fawn_config *cfg, const char *user, const char *thread);
/* The same, by sandbox id (16 hex digits). */
FAWN_MUST_CHECK int local_box_stop_id(const fawn_config *cfg, const char *sandbox_id);
/* The host path of sandbox_id's box API socket into out. */
FAWN_MUST_CHECK int local_socket_path(char out[PATH_MAX], const fawn_config *cfg,
                                      const char *sandbox_id);

/* ---- the credential broker (src/broker) ----
 * With broker.clis configured, every box gets its sandbox's broker
 * directory, $FAWN_HOME/run/broker/<sandbox id>/ (never another sandbox's),
 * bound read-only at SBX_BROKER_MOUNT, and the fawn binary over its "fawn". */

/* Whether config.yaml lists credential broker CLIs (broker.clis). */
bool local_broker_configured(const fawn_config *cfg);

/* The host path of sandbox_id's broker directory into out, created (0755)
 * with its parent when missing. FAWN_EINVAL for a bad id. */
FAWN_MUST_CHECK int local_broker_dir(char out[PATH_MAX], const fawn_config *cfg,
                                     const char *sandbox_id);

/* Whether the kernel's word on a peer (manager.h's sbx_peer) makes it a
 * process of sandbox_id's box: in a pid namespace below this process's,
 * with the sandbox's host uid, in the sandbox's cgroup, and (with a pidfd)
 * still alive after all was read, so its pid was not reused meanwhile.
 * REFUSED when a fact contradicts it; UNKNOWN when one cannot be read
 * (no cgroup for the sandbox on this host included). */
void local_attest_peer(enum sbx_attestation *out, const fawn_config *cfg, const char *sandbox_id,
                       const sbx_peer *peer);

/* ---- resource limits: cgroups (v2, else v1 memory + pids) ----
 * When neither can be used, callers fall back to rlimits and cgroup_setup
 * says so in a log line. */

enum cgroup_mode { CGROUP_NONE, CGROUP_V1, CGROUP_V2 };

typedef struct cgroup_caps {
    enum cgroup_mode mode;
    bool memory;      /* a usable memory controller */
    bool pids;        /* a usable pids controller */
    char detail[256]; /* why a controller is missing, for doctor and logs */
} cgroup_caps;

/* Probes what this host lets fawn do (creates and removes a test group). */
void cgroup_probe(cgroup_caps *out);

typedef struct cgroup_handle {
    enum cgroup_mode mode;
    char v2_path[512];   /* the sandbox's v2 group, or "" */
    char v1_memory[512]; /* the sandbox's v1 memory group, or "" */
    char v1_pids[512];   /* the sandbox's v1 pids group, or "" */
} cgroup_handle;

/* Creates the group "fawn/<name>" with the given limits (0 = no limit) and
 * moves pid into it. With pid 0 nothing is moved and an existing group of
 * that name is attached as it is (so cgroup_destroy can remove a group
 * another process created). A leftover empty group of the same name is
 * replaced; one that still has processes is FAWN_EEXIST. Returns 0 (h
 * filled, possibly mode CGROUP_NONE with a warning logged once per process
 * when cgroups cannot be used) or a negative FAWN_E* code when a group was
 * created but could not be configured. */
FAWN_MUST_CHECK int cgroup_setup(cgroup_handle *h, const char *name, pid_t pid,
                                 uint64_t memory_bytes, uint64_t max_pids);

/* Kills every process left in the group and removes it. Safe on CGROUP_NONE. */
void cgroup_destroy(cgroup_handle *h);

#endif
