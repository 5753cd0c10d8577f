/* The environment commands see: fixed sandbox values, then configured ones.
 * Nothing of the host's environment reaches a sandbox unless configuration
 * names it (sandbox.env_passthrough). */
#ifndef FAWN_BOX_ENV_H
#define FAWN_BOX_ENV_H

#include <stdbool.h>
#include <stddef.h>

/* Most variables a command environment may hold. */
#define BOX_ENV_MAX 512
/* Longest NAME=VALUE entry kept (longer entries are dropped). */
#define BOX_ENV_ENTRY_MAX 32768

/* True for a valid variable name: ^[A-Za-z_][A-Za-z0-9_]*$, at most 128 bytes. */
bool box_env_name_valid(const char *name, size_t len);

/* Builds a command environment by allow-list, never from the host's: the
 * fixed sandbox values (PATH, HOME, TMPDIR, SHELL, LANG, USER, LOGNAME,
 * TERM), then each of `inject` (n_inject NAME=VALUE strings: the configured
 * sandbox.environment and sandbox.env_passthrough) replacing any entry of the
 * same name; entries with invalid names or longer than BOX_ENV_ENTRY_MAX are
 * dropped. Returns a NULL-terminated malloc'd array of malloc'd strings (free
 * with box_env_free), or NULL on OOM. Entries beyond BOX_ENV_MAX are dropped. */
char **box_env_build(char *const *inject, size_t n_inject);

/* Frees an array from box_env_build. */
void box_env_free(char **env);

#endif
