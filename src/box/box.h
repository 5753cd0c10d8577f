/* fawn box: the in-sandbox agent. It is PID 1 of its sandbox and serves the
 * box API (docs/box-api.md) on a listening socket it inherits from its
 * launcher, or on TCP with a bearer token for remote placement.
 *
 * Every out-parameter is set on every path, failures included (NULL, -1,
 * 0, "" before anything can fail). */
#ifndef FAWN_BOX_H
#define FAWN_BOX_H

#include <jansson.h>
#include <stdbool.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

#include "box/exec.h"
#include "box/files.h"
#include "config/config.h"
#include "base/base.h"

/* Where commands of a network allowlist sandbox find the gateway's egress
 * proxy (src/sandbox/egress.h): 127.0.0.1 of their own network namespace,
 * on the port squid made customary for HTTP proxies. */
#define BOX_EGRESS_PROXY_PORT 3128
#define BOX_EGRESS_PROXY_URL "http://127.0.0.1:3128"

/* "none", "host" or "allowlist". */
const char *box_network_name(enum fawn_network_mode mode);

/* What a launcher tells a box: limits, the command environment, and facts
 * about its isolation that the box reports as capabilities. */
typedef struct box_settings {
    box_exec_config exec; /* exec.base_env points at env below */
    box_file_limits files;
    char **env;            /* NAME=VALUE, NULL-terminated, malloc'd */
    char network[12];      /* "none" | "host" | "allowlist" (reported) */
    uint64_t memory_bytes; /* cgroup memory limit in force, 0 = none (reported) */
    uint64_t pids_max;     /* cgroup pids limit in force, 0 = none (reported) */
    char cgroup[8];        /* "v2" | "v1" | "none" (reported) */
    uint32_t idle_exit_s;  /* exit after this long without a request, whatever runs; 0 = never */
    uint64_t disk_limit_bytes; /* what /mnt/user-data may hold (sandbox.limits.disk_mb) */
    bool disk_measured;        /* no kernel quota holds it there: the box measures it after each
                                  command and reports it when over (set by the launcher) */
} box_settings;

/* Settings from configuration: limits, and the command environment (fixed
 * sandbox values plus sandbox.environment and sandbox.env_passthrough, and
 * for network allowlist the proxy variables; see box_env_build).
 * cgroup names the limits actually in force ("v2", "v1" or "none"); with
 * "none", RLIMIT_AS stands in for the memory limit. Free with
 * box_settings_free. */
FAWN_MUST_CHECK int box_settings_from_config(box_settings *out, const fawn_config *cfg,
                                             const char *cgroup);

void box_settings_free(box_settings *s);

typedef struct box_serve_opts {
    int listen_fd;     /* listening socket */
    const char *token; /* bearer token required on every request, or NULL */
    int status_fd;     /* receives "ready <generation>\n" once serving, or -1 */
    const box_settings *settings;
    const struct box_attest *attest; /* answers POST /v1/attest (box/attest.h), or NULL */
    const char *generation;          /* 32 lowercase hex (a pod's UID), or NULL: random */
} box_serve_opts;

/* Runs the box until shutdown (API, SIGTERM), idle exit (no request for
 * settings->idle_exit_s), or the deletion of one of its user-data
 * directories on the host; every command still running is killed as it
 * stops. Returns 0 or a negative FAWN_E* code when it could not start
 * (reporting ready on status_fd included: a launcher that was not told
 * gives the box up). */
FAWN_MUST_CHECK int box_serve(const box_serve_opts *opts);

/* ---- isolation: building a sandbox's world ----
 * Called by a launcher in a child freshly cloned into new user, mount, pid,
 * ipc, uts (and, for network "none", net) namespaces, before it becomes the
 * box. Only system calls run there, so it is safe right after clone(). */

typedef struct box_mount_plan {
    const char *workspace; /* host directories, opened in the child's mount namespace */
    const char *uploads;
    const char *outputs;
    const char *skills; /* missing: /mnt/skills stays an empty read-only dir */
    const char *etc;    /* the prepared /etc (box_etc_prepare) */
    bool network_none;  /* bring up loopback in the new net namespace; keep host resolv.conf out */
    uint64_t tmp_size_mb;
    const char *broker;      /* the credential broker's host directory, bound read-only at
                                /mnt/broker (it holds an empty file "fawn"), or NULL */
    const char *broker_shim; /* the fawn binary, bound read-only over /mnt/broker/fawn (the
                                shims run it as `fawn broker-call`); with broker only */
} box_mount_plan;

/* The plan's directories, opened by the child while it still has the
 * launcher's host identity (the sandbox's own uid may not be able to reach
 * them), before the root tmpfs covers /tmp (where $FAWN_HOME may live). */
typedef struct box_host_dirs {
    int workspace, uploads, outputs, skills; /* skills may be -1 */
    int etc;
    int broker, broker_shim; /* -1 without a broker */
} box_host_dirs;

/* Opens the plan's directories (no symlink as last component). Returns 0, or
 * -1 with a message in err. */
FAWN_MUST_CHECK int box_isolate_open_dirs(box_host_dirs *out, const box_mount_plan *plan, char *err,
                                          size_t errsz);

/* Turns the calling process (PID 1 of new namespaces, with its uid/gid maps
 * already written) into the sandbox: private mounts, a read-only tmpfs root
 * with read-only system directories, the prepared /etc, the thread's
 * user-data read-write (nosuid, nodev), skills read-only, the credential
 * broker's directory read-only (when planned), private /tmp and
 * /dev/shm, a fresh /proc, a minimal /dev, pivot_root, hostname "sandbox",
 * loopback up. On failure writes a message to err (size errsz) and returns
 * -1; the caller must then exit. */
FAWN_MUST_CHECK int box_isolate_enter(const box_mount_plan *plan, const box_host_dirs *dirs,
                                      char *err, size_t errsz);

/* Writes "0 outer 1" maps for pid. Called by a privileged parent mapping to
 * another uid (setgroups stays allowed so the child can drop the parent's
 * supplementary groups), or by an unprivileged child itself with pid 0
 * ("self"), which the kernel only allows with setgroups denied first.
 * Returns 0 or -errno. */
FAWN_MUST_CHECK int box_write_id_maps(pid_t pid, uid_t outer_uid, gid_t outer_gid,
                                      bool deny_setgroups);

/* Brings up the loopback interface of the calling thread's network
 * namespace (nothing to do when it is up). Returns 0 or -1 with errno. */
FAWN_MUST_CHECK int box_isolate_loopback_up(void);

/* ---- the sandbox's /etc ----
 * A directory the launcher prepares on the host once per set of sources,
 * bound read-only as /etc in every sandbox (one mount instead of one per
 * file), with a few host directories bound over it. */

/* Host /etc directories bound read-only over the prepared /etc (their
 * contents change too often, and too deep, to copy). */
extern const char *const box_etc_bound_dirs[];
extern const size_t box_etc_bound_dirs_count;

/* Makes sure run_dir holds the prepared /etc for the host's current files
 * and stores its path in out: copies of the host /etc files a sandbox needs
 * (only those any host user may read; never passwd, shadow, keys),
 * generated passwd, group, hostname and hosts, resolv.conf when the network
 * is shared, and empty mount points for box_etc_bound_dirs. Its name is a
 * fingerprint of its sources, so it is rebuilt exactly when one changes;
 * concurrent launchers build it at most once each and never see it half
 * written. Returns 0 or a negative FAWN_E* code. */
FAWN_MUST_CHECK int box_etc_prepare(char out[PATH_MAX], const char *run_dir, bool network_none);

#endif
