#include "box/env.h"

#include <ctype.h>
#include <string.h>

#include "base/base.h"

#define ENV_NAME_MAX 128

static const char *const secret_words[] = {
    "KEY", "SECRET", "TOKEN", "PASS", "CREDENTIAL", "DSN", "AUTH", "COOKIE", "SESSION", "PRIVATE",
};
static const char *const secret_names[] = {
    "DATABASE_URL", "REDIS_URL", "MYSQL_PWD", "PGPASSWORD", "GH_PAT", "MONGO_URL", "MONGODB_URI",
    "AMQP_URL", "SENTRY_DSN", "SSH_AUTH_SOCK", "KRB5CCNAME",
};
static const char *const secret_prefixes[] = {"LD_", "FAWN_"};

/* Values the sandbox always gets, whatever the host had. */
static const char *const fixed_env[] = {
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME=/tmp",
    "TMPDIR=/tmp",
    "SHELL=/bin/bash",
    "LANG=C.UTF-8",
    "USER=root",
    "LOGNAME=root",
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

static bool contains_word(const char *upper, const char *word) { return strstr(upper, word) != NULL; }

bool box_env_is_secret(const char *name, size_t len) {
    char upper[ENV_NAME_MAX + 1];
    if (len > ENV_NAME_MAX)
        return true;
    for (size_t i = 0; i < len; i++)
        upper[i] = (char)toupper((unsigned char)name[i]);
    upper[len] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(secret_words); i++)
        if (contains_word(upper, secret_words[i]))
            return true;
    for (size_t i = 0; i < ARRAY_LEN(secret_names); i++)
        if (strcmp(upper, secret_names[i]) == 0)
            return true;
    for (size_t i = 0; i < ARRAY_LEN(secret_prefixes); i++)
        if (strncmp(upper, secret_prefixes[i], strlen(secret_prefixes[i])) == 0)
            return true;
    return false;
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

char **box_env_build(char *const *host, char *const *inject, size_t n_inject) {
    char **env = calloc(BOX_ENV_MAX + 1, sizeof *env);
    if (!env)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; host && host[i] && i < 4 * BOX_ENV_MAX; i++) {
        size_t len = name_len(host[i]);
        if (!box_env_name_valid(host[i], len) || box_env_is_secret(host[i], len) ||
            strlen(host[i]) > BOX_ENV_ENTRY_MAX)
            continue;
        if (!(n = put_entry(env, n, host[i])))
            goto oom;
    }
    for (size_t i = 0; i < ARRAY_LEN(fixed_env); i++)
        if (!(n = put_entry(env, n, fixed_env[i])))
            goto oom;
    for (size_t i = 0; i < n_inject; i++) {
        size_t len = name_len(inject[i]);
        if (!box_env_name_valid(inject[i], len))
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
