#include <string.h>

#include "box/box.h"
#include "box/env.h"

/* NAME=VALUE strings of sandbox.environment (values already resolved). */
static char **configured_env(const fawn_sandbox_config *sc) {
    char **list = calloc(sc->n_env + 1, sizeof *list);
    for (size_t i = 0; list && i < sc->n_env; i++) {
        if (asprintf(&list[i], "%s=%s", sc->env[i].name, sc->env[i].value) < 0) {
            box_env_free(list);
            return NULL;
        }
    }
    return list;
}

int box_settings_from_config(box_settings *out, const fawn_config *cfg, const char *cgroup) {
    const fawn_sandbox_config *sc = &cfg->sandbox;
    bool limited = strcmp(cgroup, "none") != 0;
    memset(out, 0, sizeof *out);
    out->exec = (box_exec_config){
        .default_timeout_s = sc->exec_timeout_s,
        .max_timeout_s = sc->exec_max_timeout_s,
        .max_output_bytes = sc->exec_max_output_bytes,
        .max_sessions = sc->max_sessions,
        .rlimit_nofile = sc->limits.open_files,
        .rlimit_fsize = sc->limits.file_size_mb << 20,
        .rlimit_nproc = sc->limits.nproc,
        /* Without a memory cgroup, the address-space limit is the fallback. */
        .rlimit_as = limited ? 0 : sc->limits.address_space_mb << 20,
    };
    out->files = box_file_limits_default();
    out->memory_bytes = limited ? sc->limits.memory_mb << 20 : 0;
    out->pids_max = limited ? sc->limits.pids : 0;
    out->disk_limit_bytes = sc->limits.disk_mb << 20;
    snprintf(out->network, sizeof out->network, "%s",
             sc->network == FAWN_NET_NONE ? "none" : "host");
    snprintf(out->cgroup, sizeof out->cgroup, "%s", cgroup);
    char **inject = configured_env(sc);
    out->env = inject ? box_env_build(inject, sc->n_env) : NULL;
    box_env_free(inject);
    out->exec.base_env = out->env;
    return out->env ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

void box_settings_free(box_settings *s) {
    box_env_free(s->env);
    memset(s, 0, sizeof *s);
}
