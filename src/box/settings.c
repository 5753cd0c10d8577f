#include <string.h>

#include "base/json.h"
#include "box/box.h"
#include "box/env.h"
#include "config/config.h"

extern char **environ;

static json_t *env_to_json(char **env) {
    json_t *a = json_array();
    for (size_t i = 0; env && env[i]; i++)
        json_array_append_new(a, json_string(env[i]));
    return a;
}

json_t *box_settings_to_json(const box_settings *s) {
    const box_exec_config *e = &s->exec;
    const box_file_limits *f = &s->files;
    return json_pack(
        "{s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, "
        "s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I}, s:o, s:s, s:I, s:I, s:s, s:I}",
        "exec", "default_timeout_s", (json_int_t)e->default_timeout_s, "max_timeout_s",
        (json_int_t)e->max_timeout_s, "max_output_bytes", (json_int_t)e->max_output_bytes,
        "max_sessions", (json_int_t)e->max_sessions, "rlimit_nofile",
        (json_int_t)e->rlimit_nofile, "rlimit_fsize", (json_int_t)e->rlimit_fsize, "rlimit_nproc",
        (json_int_t)e->rlimit_nproc, "rlimit_as", (json_int_t)e->rlimit_as,
        "files", "read_max_bytes", (json_int_t)f->read_max_bytes, "write_max_bytes",
        (json_int_t)f->write_max_bytes, "upload_max_bytes", (json_int_t)f->upload_max_bytes,
        "download_max_bytes", (json_int_t)f->download_max_bytes, "list_max_entries",
        (json_int_t)f->list_max_entries, "glob_max_results", (json_int_t)f->glob_max_results,
        "grep_max_results", (json_int_t)f->grep_max_results,
        "env", env_to_json(s->env), "network", s->network, "memory_bytes",
        (json_int_t)s->memory_bytes, "pids_max", (json_int_t)s->pids_max, "cgroup", s->cgroup,
        "idle_exit_s", (json_int_t)s->idle_exit_s);
}

static int get_u64(uint64_t *out, const json_t *obj, const char *key, int64_t min, int64_t max) {
    int64_t v = 0;
    int r = fjson_get_int(&v, obj, key, true, min, max);
    *out = (uint64_t)v;
    return r;
}

static int parse_exec(box_exec_config *e, const json_t *o) {
    uint64_t v[4] = {0};
    int r = json_is_object(o) ? 0 : fawn_err(FAWN_EINVAL, "'exec' must be an object");
    if (r == 0) r = get_u64(&v[0], o, "default_timeout_s", 1, 86400);
    if (r == 0) r = get_u64(&v[1], o, "max_timeout_s", 1, 86400);
    if (r == 0) r = get_u64(&e->max_output_bytes, o, "max_output_bytes", BOX_OUTPUT_MIN, 1 << 26);
    if (r == 0) r = get_u64(&v[2], o, "max_sessions", 1, 256);
    if (r == 0) r = get_u64(&e->rlimit_nofile, o, "rlimit_nofile", 0, INT64_MAX);
    if (r == 0) r = get_u64(&e->rlimit_fsize, o, "rlimit_fsize", 0, INT64_MAX);
    if (r == 0) r = get_u64(&e->rlimit_nproc, o, "rlimit_nproc", 0, INT64_MAX);
    if (r == 0) r = get_u64(&e->rlimit_as, o, "rlimit_as", 0, INT64_MAX);
    e->default_timeout_s = (uint32_t)v[0];
    e->max_timeout_s = (uint32_t)v[1];
    e->max_sessions = (uint32_t)v[2];
    if (r == 0 && e->default_timeout_s > e->max_timeout_s)
        r = fawn_err(FAWN_EINVAL, "default_timeout_s exceeds max_timeout_s");
    return r;
}

static int parse_files(box_file_limits *f, const json_t *o) {
    uint64_t v[7] = {0};
    static const char *const keys[] = {"read_max_bytes", "write_max_bytes", "upload_max_bytes",
                                       "download_max_bytes", "list_max_entries",
                                       "glob_max_results", "grep_max_results"};
    int r = json_is_object(o) ? 0 : fawn_err(FAWN_EINVAL, "'files' must be an object");
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(keys); i++)
        r = get_u64(&v[i], o, keys[i], 1, INT64_MAX);
    *f = (box_file_limits){v[0], v[1], v[2], v[3], v[4], v[5], v[6]};
    return r;
}

static int parse_env(char ***out, const json_t *a) {
    if (!json_is_array(a) || json_array_size(a) > BOX_ENV_MAX)
        return fawn_err(FAWN_EINVAL, "'env' must be an array of at most %d strings", BOX_ENV_MAX);
    char **env = calloc(json_array_size(a) + 1, sizeof *env);
    if (!env)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *out = env;
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v) {
        const char *s = json_string_value(v);
        if (!s || !strchr(s, '='))
            return fawn_err(FAWN_EINVAL, "'env' entries must be NAME=VALUE strings");
        if (!(env[i] = strdup(s)))
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

static int copy_word(char *out, size_t outsz, const json_t *o, const char *key,
                     const char *const *allowed) {
    const char *v = NULL;
    int r = fjson_get_string(&v, o, key, true);
    for (const char *const *a = allowed; r == 0 && *a; a++)
        if (strcmp(*a, v) == 0) {
            snprintf(out, outsz, "%s", v);
            return 0;
        }
    return r < 0 ? r : fawn_err(FAWN_EINVAL, "bad value for '%s'", key);
}

int box_settings_from_json(box_settings *out, const char *json, size_t len) {
    static const char *const keys[] = {"exec", "files", "env", "network", "memory_bytes",
                                       "pids_max", "cgroup", "idle_exit_s", NULL};
    static const char *const networks[] = {"none", "host", NULL};
    static const char *const cgroups[] = {"v1", "v2", "none", NULL};
    memset(out, 0, sizeof *out);
    json_t *o = NULL;
    uint64_t idle = 0;
    int r = fjson_parse_object(&o, json, len);
    if (r == 0) r = fjson_check_keys(o, keys);
    if (r == 0) r = parse_exec(&out->exec, json_object_get(o, "exec"));
    if (r == 0) r = parse_files(&out->files, json_object_get(o, "files"));
    if (r == 0) r = parse_env(&out->env, json_object_get(o, "env"));
    if (r == 0) r = copy_word(out->network, sizeof out->network, o, "network", networks);
    if (r == 0) r = copy_word(out->cgroup, sizeof out->cgroup, o, "cgroup", cgroups);
    if (r == 0) r = get_u64(&out->memory_bytes, o, "memory_bytes", 0, INT64_MAX);
    if (r == 0) r = get_u64(&out->pids_max, o, "pids_max", 0, INT64_MAX);
    if (r == 0) r = get_u64(&idle, o, "idle_exit_s", 0, 86400 * 365);
    out->idle_exit_s = (uint32_t)idle;
    out->exec.base_env = out->env;
    json_decref(o);
    if (r < 0)
        box_settings_free(out);
    return r;
}

int box_settings_default(box_settings *out) {
    fawn_config cfg;
    int r = config_defaults(&cfg);
    if (r < 0)
        return r;
    memset(out, 0, sizeof *out);
    const fawn_sandbox_config *sc = &cfg.sandbox;
    out->exec = (box_exec_config){
        .default_timeout_s = sc->exec_timeout_s,
        .max_timeout_s = sc->exec_max_timeout_s,
        .max_output_bytes = sc->exec_max_output_bytes,
        .max_sessions = sc->max_sessions,
        .rlimit_nofile = sc->limits.open_files,
        .rlimit_fsize = sc->limits.file_size_mb << 20,
        .rlimit_nproc = sc->limits.nproc,
        .rlimit_as = sc->limits.address_space_mb << 20,
    };
    out->files = box_file_limits_default();
    snprintf(out->network, sizeof out->network, "host");
    snprintf(out->cgroup, sizeof out->cgroup, "none");
    config_free(&cfg);
    out->env = box_env_build(environ, NULL, 0);
    out->exec.base_env = out->env;
    return out->env ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

void box_settings_free(box_settings *s) {
    box_env_free(s->env);
    memset(s, 0, sizeof *s);
}
