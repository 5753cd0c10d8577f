#include <string.h>

#include "box/box.h"
#include "box/env.h"

/* With network allowlist, commands reach the network only through the
 * gateway's egress proxy in their namespace (src/sandbox/egress.h): these
 * name it to curl, apt, pip, npm and the like (after sandbox.environment,
 * so they win). Local addresses stay direct. */
static const char *const proxy_env[] = {
    "HTTP_PROXY=" BOX_EGRESS_PROXY_URL, "HTTPS_PROXY=" BOX_EGRESS_PROXY_URL,
    "http_proxy=" BOX_EGRESS_PROXY_URL, "https_proxy=" BOX_EGRESS_PROXY_URL,
    "NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
};

const char *box_network_name(enum fawn_network_mode mode) {
    return mode == FAWN_NET_HOST ? "host" : mode == FAWN_NET_ALLOWLIST ? "allowlist" : "none";
}

/* NAME=VALUE strings of sandbox.environment (values already resolved),
 * then the proxy's for network allowlist; *n is their count. */
static char **configured_env(size_t *n, const fawn_sandbox_config *sc) {
    size_t extra = sc->network == FAWN_NET_ALLOWLIST ? ARRAY_LEN(proxy_env) : 0;
    char **list = calloc(sc->n_env + extra + 1, sizeof *list);
    *n = 0;
    for (size_t i = 0; list && i < sc->n_env + extra; i++) {
        int r = i < sc->n_env ? asprintf(&list[i], "%s=%s", sc->env[i].name, sc->env[i].value)
                              : ((list[i] = strdup(proxy_env[i - sc->n_env])) ? 0 : -1);
        if (r < 0) {
            box_env_free(list);
            return NULL;
        }
        *n = i + 1;
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
    snprintf(out->network, sizeof out->network, "%s", box_network_name(sc->network));
    snprintf(out->cgroup, sizeof out->cgroup, "%s", cgroup);
    size_t n_inject;
    char **inject = configured_env(&n_inject, sc);
    out->env = inject ? box_env_build(inject, n_inject) : NULL;
    box_env_free(inject);
    out->exec.base_env = out->env;
    return out->env ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

void box_settings_free(box_settings *s) {
    box_env_free(s->env);
    memset(s, 0, sizeof *s);
}
