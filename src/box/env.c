#include "box/env.h"

#include <ctype.h>
#include <string.h>

#include "base/base.h"

#define ENV_NAME_MAX 128

/* Values the sandbox always gets, whatever the host had. */
static const char *const fixed_env[] = {
    /* the credential broker's shims last: they never hide a system command */
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/mnt/broker/bin",
    "HOME=/tmp",
    "TMPDIR=/tmp",
    "SHELL=/bin/bash",
    "LANG=C.UTF-8",
    "USER=root",
    "LOGNAME=root",
    "TERM=xterm-256color",
};

bool box_env_name_valid(const char *name, size_t len) {
    if (len == 0 || len > ENV_NAME_MAX)
        return false;
    if (!(isalpha((unsigned char)name[0]) || name[0] == '_'))
        return false;
    for (size_t i = 1; i < len; i++)
        if (!(isalnum((unsigned char)name[i]) || name[i] == '_'))
            return false;
    return true;
}

static size_t name_len(const char *entry) {
    const char *eq = strchr(entry, '=');
    return eq ? (size_t)(eq - entry) : 0;
}

/* Index of the entry named like `entry` in env[0..n), or n. */
static size_t find_entry(char **env, size_t n, const char *entry) {
    size_t len = name_len(entry);
    for (size_t i = 0; i < n; i++)
        if (name_len(env[i]) == len && strncmp(env[i], entry, len) == 0)
            return i;
    return n;
}

/* Sets entry (copied) in env, replacing a same-named one. Returns new count or 0 on OOM. */
static size_t put_entry(char **env, size_t n, const char *entry) {
    size_t at = find_entry(env, n, entry);
    if (at == n && n >= BOX_ENV_MAX)
        return n;
    char *copy = strdup(entry);
    if (!copy)
        return 0;
    if (at < n)
        free(env[at]);
    env[at] = copy;
    return at == n ? n + 1 : n;
}

char **box_env_build(char *const *inject, size_t n_inject) {
    char **env = calloc(BOX_ENV_MAX + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < ARRAY_LEN(fixed_env); i++)
        if (!(n = put_entry(env, n, fixed_env[i])))
            goto oom;
    for (size_t i = 0; i < n_inject; i++) {
        size_t len = name_len(inject[i]);
        if (!box_env_name_valid(inject[i], len) || strlen(inject[i]) > BOX_ENV_ENTRY_MAX)
            continue;
        if (!(n = put_entry(env, n, inject[i])))
            goto oom;
    }
    return env;
oom:
    box_env_free(env);
    return NULL;
}

void box_env_free(char **env) {
    if (!env)
        return;
    for (size_t i = 0; env[i]; i++)
        free(env[i]);
    free(env);
}
