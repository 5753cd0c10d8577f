/* fawn box: the in-sandbox agent. It is PID 1 of its sandbox and serves the
 * box API (docs/box-api.md) on a listening socket it inherits from its
 * launcher, or on TCP with a bearer token for remote placement. */
#ifndef FAWN_BOX_H
#define FAWN_BOX_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "box/exec.h"
#include "box/files.h"
#include "config/config.h"

/* What a launcher tells a box: limits, the command environment, and facts
 * about its isolation that the box reports as capabilities. */
typedef struct box_settings {
    box_exec_config exec;   /* exec.base_env points at env below */
    box_file_limits files;
    char **env;             /* NAME=VALUE, NULL-terminated, malloc'd */
    char network[8];        /* "none" | "host" (reported) */
    uint64_t memory_bytes;  /* cgroup memory limit in force, 0 = none (reported) */
    uint64_t pids_max;      /* cgroup pids limit in force, 0 = none (reported) */
    char cgroup[8];         /* "v2" | "v1" | "none" (reported) */
    uint32_t idle_exit_s;   /* exit after this long without requests or sessions; 0 = never */
} box_settings;

/* Settings from configuration: limits, and the command environment (this
 * process's environment scrubbed of secrets, plus sandbox.environment).
 * cgroup names the limits actually in force ("v2", "v1" or "none"); with
 * "none", RLIMIT_AS stands in for the memory limit. Free with
 * box_settings_free. */
int box_settings_from_config(box_settings *out, const fawn_config *cfg, const char *cgroup);

void box_settings_free(box_settings *s);

typedef struct box_serve_opts {
    int listen_fd;          /* listening socket */
    const char *token;      /* bearer token required on every request, or NULL */
    int status_fd;          /* receives "ready <generation>\n" once serving, or -1 */
    const box_settings *settings;
} box_serve_opts;

/* Runs the box until shutdown (API, SIGTERM, or idle exit). Returns 0 or a
 * negative FAWN_E* code when it could not start. */
int box_serve(const box_serve_opts *opts);

#endif
