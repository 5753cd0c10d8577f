/* Resource limits for one sandbox through cgroups (v2 preferred, v1 memory +
 * pids controllers otherwise). When neither can be used, callers fall back to
 * rlimits and cgroup_setup says so in a log line. */
#ifndef FAWN_SANDBOX_CGROUP_H
#define FAWN_SANDBOX_CGROUP_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum cgroup_mode { CGROUP_NONE, CGROUP_V1, CGROUP_V2 };

typedef struct cgroup_caps {
    enum cgroup_mode mode;
    bool memory; /* a usable memory controller */
    bool pids;   /* a usable pids controller */
    char detail[256]; /* why a controller is missing, for doctor and logs */
} cgroup_caps;

/* Probes what this host lets fawn do (creates and removes a test group). */
void cgroup_probe(cgroup_caps *out);

typedef struct cgroup_handle {
    enum cgroup_mode mode;
    char v2_path[512];     /* the sandbox's v2 group, or "" */
    char v1_memory[512];   /* the sandbox's v1 memory group, or "" */
    char v1_pids[512];     /* the sandbox's v1 pids group, or "" */
} cgroup_handle;

/* Creates the group "fawn/<name>" with the given limits (0 = no limit) and
 * moves pid into it. With pid 0 nothing is moved and an existing group of
 * that name is attached as it is (so cgroup_destroy can remove a group
 * another process created). A leftover empty group of the same name is
 * replaced; one that still has processes is FAWN_EEXIST. Returns 0 (h filled, possibly mode CGROUP_NONE with a
 * warning logged once per process when cgroups cannot be used) or a negative
 * FAWN_E* code when a group was created but could not be configured. */
int cgroup_setup(cgroup_handle *h, const char *name, pid_t pid, uint64_t memory_bytes,
                 uint64_t max_pids);

/* Kills every process left in the group and removes it. Safe on CGROUP_NONE. */
void cgroup_destroy(cgroup_handle *h);

#endif
