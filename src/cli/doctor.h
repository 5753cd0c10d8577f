/* fawn doctor: which isolation features this host gives fawn, and what fawn
 * does without each one. Every feature is tried for real (a namespace is
 * entered, a filter loaded, a group created, the filesystem of the home
 * asked for its quotas) in a forked child that is killed after a timeout
 * and always reaped, so a hanging probe never blocks. */
#ifndef FAWN_CLI_DOCTOR_H
#define FAWN_CLI_DOCTOR_H

#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>

#include "sandbox/local.h"
#include "sandbox/quota.h"
#include "base/base.h"

enum doctor_feature {
    DOCTOR_USER_NS,
    DOCTOR_MOUNT_NS,
    DOCTOR_PID_NS,
    DOCTOR_NET_NS,
    DOCTOR_IPC_NS,
    DOCTOR_UTS_NS,
    DOCTOR_PIVOT_ROOT,
    DOCTOR_SECCOMP,
    DOCTOR_NO_NEW_PRIVS,
    DOCTOR_CGROUPS,
    DOCTOR_OPENAT2,
    DOCTOR_PIDFD_OPEN,
    DOCTOR_DISK_QUOTA,
    DOCTOR_N_FEATURES
};

/* What a probe observed: an errno text, where the cgroups are. */
#define DOCTOR_DETAIL_MAX 256

typedef struct doctor_check {
    const char *name;               /* stable identifier, e.g. "user_namespace" (static) */
    const char *title;              /* for people, e.g. "user namespaces" (static) */
    bool required;                  /* the local provider cannot start sandboxes without it */
    bool ok;                        /* the probe succeeded */
    char detail[DOCTOR_DETAIL_MAX]; /* why it failed, or where it works; may be "" */
    const char *without;            /* one line: what fawn does when it is missing (static) */
} doctor_check;

typedef struct doctor_report {
    doctor_check checks[DOCTOR_N_FEATURES]; /* indexed by enum doctor_feature */
    cgroup_caps cgroup;                     /* cgroup_probe's answer */
    quota_fs quota;                         /* quota_probe_path's answer for the home */
    bool local_ready;                       /* every required feature is present */
} doctor_report;

/* Probes every feature of this host into *out (fully overwritten), the disk
 * quota for a FAWN_HOME at home (which need not exist yet). Returns 0
 * when everything the local provider needs is present (user, mount, pid, ipc
 * and uts namespaces, pivot_root, no_new_privs, seccomp), else FAWN_EUNSUP
 * with a message naming what is missing; *out is complete in both cases. */
FAWN_MUST_CHECK int doctor_probe(doctor_report *out, const char *home);

/* Writes the report for people: one line per feature, the fallback line under
 * each missing one, and whether the local provider can run. */
void doctor_print(FILE *out, const doctor_report *r);

/* Builds the report as one JSON object:
 *   {"local_provider_ready": bool,
 *    "features": {"<name>": {"status": "ok"|"missing", "required": bool,
 *                            "detail": str, "without": str}, ...},
 *    "cgroup": {"mode": "none"|"v1"|"v2", "memory": bool, "pids": bool, "detail": str},
 *    "disk_quota": {"mechanism": "btrfs"|"project"|"measured", "detail": str}}
 * *out is new (caller json_decref()s it). FAWN_ENOMEM when jansson cannot allocate. */
FAWN_MUST_CHECK int doctor_to_json(json_t **out, const doctor_report *r);

#endif
