/* A thread's user-data on this host, made as a sandbox start makes it: the
 * part of the sandbox core that sbx_user_data_open (manager.h) and the
 * local provider share. Private to src/sandbox (and its tests).
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_SANDBOX_USER_DATA_H
#define FAWN_SANDBOX_USER_DATA_H

#include <sys/types.h>

#include "config/config.h"
#include "sandbox/quota.h"
#include "base/base.h"

/* Host uids a root-run fawn maps sandboxes to: never host root, and
 * different threads get different uids (2^16 of them from this base). */
#define SANDBOX_UID_BASE 2000000000u
#define SANDBOX_UID_RANGE 65536u

/* The directories of a user-data that its sandbox writes, in this order:
 * workspace, uploads, outputs (/mnt/user-data/... inside the sandbox). */
#define SBX_USER_DATA_PARTS 3
extern const char *const sbx_user_data_parts[SBX_USER_DATA_PARTS];

/* The host uid the sandbox sandbox_id runs as: this process's uid unless it
 * is root, else SANDBOX_UID_BASE plus the id's first 8 hex digits modulo
 * SANDBOX_UID_RANGE. */
uid_t sbx_host_uid(const char *sandbox_id);

/* Creates the directory path (mode for what it creates), and its parents
 * only when they are missing. 0 when it exists already. */
FAWN_MUST_CHECK int sbx_dir_ensure(const char *path, mode_t mode);

/* Makes user_data, any host directory, as a start would: limited to
 * sandbox.limits.disk_mb from the moment it appears (sandbox/quota.h; an
 * existing one gets the configured limit again), its parents created, and
 * in it workspace/, uploads/ and outputs/, owned by uid when fawn runs as
 * root and they are new. *mechanism tells what limits it. */
FAWN_MUST_CHECK int sbx_user_data_make(enum quota_mechanism *mechanism, const fawn_config *cfg,
                                       const char *user_data, uid_t uid);

#endif
