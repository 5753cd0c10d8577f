/* The environment commands see: the host's environment scrubbed of anything
 * that looks like a credential, fixed sandbox values, then configured values. */
#ifndef FAWN_BOX_ENV_H
#define FAWN_BOX_ENV_H

#include <stdbool.h>
#include <stddef.h>

/* Most variables a command environment may hold. */
#define BOX_ENV_MAX 512
/* Longest NAME=VALUE entry kept (longer host entries are dropped). */
#define BOX_ENV_ENTRY_MAX 32768

/* True for a valid variable name: ^[A-Za-z_][A-Za-z0-9_]*$, at most 128 bytes. */
bool box_env_name_valid(const char *name, size_t len);

/* True when a host variable must never reach a sandbox: names containing
 * KEY, SECRET, TOKEN, PASS, CREDENTIAL, DSN, AUTH, COOKIE, SESSION or PRIVATE
 * (case-insensitive), well-known connection strings (DATABASE_URL, ...),
 * loader and fawn-internal variables (LD_*, FAWN_*). */
bool box_env_is_secret(const char *name, size_t len);

/* Builds a command environment: `host` (NAME=VALUE strings, NULL-terminated)
 * minus secrets and invalid entries, with PATH, HOME, LANG, TMPDIR and
 * SHELL set to sandbox values, then each of `inject` (n_inject NAME=VALUE
 * strings) replacing any entry of the same name. Returns a NULL-terminated
 * malloc'd array of malloc'd strings (free with box_env_free), or NULL on
 * OOM. Entries beyond BOX_ENV_MAX are dropped. */
char **box_env_build(char *const *host, char *const *inject, size_t n_inject);

/* Frees an array from box_env_build. */
void box_env_free(char **env);

#endif
