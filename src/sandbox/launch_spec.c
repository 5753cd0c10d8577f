/* The launch spec as JSON, for the launch helper a multithreaded launcher
 * execs (see local.c): what local_launch needs, minus its descriptors. */
#include <string.h>

#include <sodium.h>

#include "base/json.h"
#include "box/attest.h"
#include "box/box.h"
#include "sandbox/launch_spec.h"

/* A pod's attestation (its secret as hex), or null. */
static json_t *attest_to_json(const box_attest *a) {
    if (!a)
        return json_null();
    char secret[2 * BOX_ATTEST_KEY_BYTES + 1];
    box_attest_hex(secret, a->secret, sizeof a->secret);
    json_t *j = json_pack("{s:s, s:s, s:s, s:s}", "secret", secret, "sandbox_id", a->sandbox_id,
                          "user", a->user, "pod_uid", a->pod_uid);
    sodium_memzero(secret, sizeof secret);
    return j;
}

json_t *launch_spec_to_json(const local_launch_spec *s) {
    const fawn_sandbox_config *sc = &s->cfg->sandbox;
    const fawn_sandbox_limits *lim = &sc->limits;
    json_t *env = json_array();
    for (size_t i = 0; env && i < sc->n_env; i++)
        json_array_append_new(env, json_pack("[ss]", sc->env[i].name, sc->env[i].value));
    json_t *j = json_pack(
        "{s:s, s:s, s:s, s:s*, s:I, s:s, s:s*, s:o, s:{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}, "
        "s:I, s:I, s:I, s:I, s:b, s:s*}",
        "home", s->cfg->home, "sandbox_id", s->sandbox_id, "user_data", s->user_data, "token",
        s->token, "idle_exit_s", (json_int_t)s->idle_exit_s, "network",
        box_network_name(sc->network), "skills_dir", s->skills, "env", env, "limits", "memory_mb",
        (json_int_t)lim->memory_mb, "pids", (json_int_t)lim->pids, "nproc", (json_int_t)lim->nproc,
        "open_files", (json_int_t)lim->open_files, "file_size_mb", (json_int_t)lim->file_size_mb,
        "address_space_mb", (json_int_t)lim->address_space_mb, "tmp_size_mb",
        (json_int_t)lim->tmp_size_mb, "disk_mb", (json_int_t)lim->disk_mb, "exec_timeout_s",
        (json_int_t)sc->exec_timeout_s, "exec_max_timeout_s", (json_int_t)sc->exec_max_timeout_s,
        "exec_max_output_bytes", (json_int_t)sc->exec_max_output_bytes, "max_sessions",
        (json_int_t)sc->max_sessions, "die_with_launcher", s->die_with_launcher, "broker_dir",
        s->broker_dir);
    if (j && (json_object_set_new(j, "attest", attest_to_json(s->attest)) < 0 ||
              json_object_set_new(j, "generation",
                                  s->generation ? json_string(s->generation) : json_null()) < 0)) {
        json_decref(j);
        j = NULL;
    }
    return j;
}

/* The spec's attestation and generation, when it has them. */
static int parse_pod(launch_spec_copy *out, const json_t *o) {
    const json_t *a = json_object_get(o, "attest");
    const char *gen = json_string_value(json_object_get(o, "generation"));
    if (gen && (strlen(gen) != 32 || strspn(gen, "0123456789abcdef") != 32))
        return fawn_err(FAWN_EINVAL, "'generation' must be 32 lowercase hex digits");
    if (gen)
        memcpy(out->generation, gen, 33);
    if (!json_is_object(a))
        return 0;
    const char *secret = json_string_value(json_object_get(a, "secret"));
    const char *sid = json_string_value(json_object_get(a, "sandbox_id"));
    const char *user = json_string_value(json_object_get(a, "user"));
    const char *uid = json_string_value(json_object_get(a, "pod_uid"));
    if (!secret || box_attest_unhex(out->attest.secret, sizeof out->attest.secret, secret) < 0 ||
        !box_attest_binding_valid(sid, user, uid))
        return fawn_err(FAWN_EINVAL, "'attest' is malformed");
    snprintf(out->attest.sandbox_id, sizeof out->attest.sandbox_id, "%s", sid);
    snprintf(out->attest.user, sizeof out->attest.user, "%s", user);
    snprintf(out->attest.pod_uid, sizeof out->attest.pod_uid, "%s", uid);
    out->spec.attest = &out->attest;
    return 0;
}

static int take_string(char **out, const json_t *o, const char *key) {
    const char *v = NULL;
    int r = fjson_get_string(&v, o, key, true);
    if (r == 0 && !(*out = strdup(v)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    return r;
}

static int parse_env(fawn_sandbox_config *sc, const json_t *a) {
    if (!json_is_array(a) || json_array_size(a) > CONFIG_MAX_ENV)
        return fawn_err(FAWN_EINVAL, "'env' must be an array of at most %d pairs", CONFIG_MAX_ENV);
    size_t i;
    json_t *pair;
    json_array_foreach(a, i, pair) {
        const char *name = json_string_value(json_array_get(pair, 0));
        const char *value = json_string_value(json_array_get(pair, 1));
        if (!name || !value)
            return fawn_err(FAWN_EINVAL, "'env' entries must be [name, value]");
        sc->env[i].name = strdup(name);
        sc->env[i].value = strdup(value);
        sc->n_env = i + 1;
        if (!sc->env[i].name || !sc->env[i].value)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

static int get_u64(uint64_t *out, const json_t *o, const char *key) {
    int64_t v = 0;
    int r = fjson_get_int(&v, o, key, true, 0, INT64_MAX);
    *out = (uint64_t)v;
    return r;
}

static int parse_numbers(fawn_sandbox_config *sc, uint32_t *idle, const json_t *o) {
    const json_t *lim = json_object_get(o, "limits");
    uint64_t v[5] = {0};
    fawn_sandbox_limits *l = &sc->limits;
    int r = json_is_object(lim) ? 0 : fawn_err(FAWN_EINVAL, "'limits' must be an object");
    if (r == 0)
        r = get_u64(&l->memory_mb, lim, "memory_mb");
    if (r == 0)
        r = get_u64(&l->pids, lim, "pids");
    if (r == 0)
        r = get_u64(&l->nproc, lim, "nproc");
    if (r == 0)
        r = get_u64(&l->open_files, lim, "open_files");
    if (r == 0)
        r = get_u64(&l->file_size_mb, lim, "file_size_mb");
    if (r == 0)
        r = get_u64(&l->address_space_mb, lim, "address_space_mb");
    if (r == 0)
        r = get_u64(&l->tmp_size_mb, lim, "tmp_size_mb");
    if (r == 0)
        r = get_u64(&l->disk_mb, lim, "disk_mb");
    if (r == 0)
        r = get_u64(&v[0], o, "exec_timeout_s");
    if (r == 0)
        r = get_u64(&v[1], o, "exec_max_timeout_s");
    if (r == 0)
        r = get_u64(&sc->exec_max_output_bytes, o, "exec_max_output_bytes");
    if (r == 0)
        r = get_u64(&v[2], o, "max_sessions");
    if (r == 0)
        r = get_u64(&v[3], o, "idle_exit_s");
    sc->exec_timeout_s = (uint32_t)v[0];
    sc->exec_max_timeout_s = (uint32_t)v[1];
    sc->max_sessions = (uint32_t)v[2];
    *idle = (uint32_t)v[3];
    return r;
}

int launch_spec_from_json(launch_spec_copy *out, const char *json, size_t len) {
    memset(out, 0, sizeof *out);
    json_t *o = NULL;
    const char *network = NULL;
    fawn_config *cfg = &out->cfg;
    int r = fjson_parse_object(&o, json, len);
    if (r == 0)
        r = config_defaults(cfg);
    if (r == 0) {
        free(cfg->home);
        free(cfg->sandbox.skills_dir);
        cfg->home = cfg->sandbox.skills_dir = NULL;
        r = take_string(&cfg->home, o, "home");
    }
    if (r == 0 && json_is_string(json_object_get(o, "skills_dir")))
        r = take_string(&cfg->sandbox.skills_dir, o, "skills_dir");
    if (r == 0)
        r = take_string(&out->sandbox_id, o, "sandbox_id");
    if (r == 0)
        r = take_string(&out->user_data, o, "user_data");
    if (r == 0 && json_is_string(json_object_get(o, "token")))
        r = take_string(&out->token, o, "token");
    if (r == 0 && json_is_string(json_object_get(o, "broker_dir")))
        r = take_string(&out->broker_dir, o, "broker_dir");
    if (r == 0)
        r = fjson_get_string(&network, o, "network", true);
    if (r == 0)
        cfg->sandbox.network = strcmp(network, "host") == 0        ? FAWN_NET_HOST
                               : strcmp(network, "allowlist") == 0 ? FAWN_NET_ALLOWLIST
                                                                   : FAWN_NET_NONE;
    if (r == 0)
        r = parse_env(&cfg->sandbox, json_object_get(o, "env"));
    if (r == 0)
        r = parse_numbers(&cfg->sandbox, &out->spec.idle_exit_s, o);
    if (r == 0)
        r = fjson_get_bool(&out->spec.die_with_launcher, o, "die_with_launcher", true);
    if (r == 0)
        r = parse_pod(out, o);
    json_decref(o);
    out->spec.cfg = cfg;
    out->spec.sandbox_id = out->sandbox_id;
    out->spec.user_data = out->user_data;
    out->spec.skills = cfg->sandbox.skills_dir;
    out->spec.token = out->token;
    out->spec.generation = out->generation[0] ? out->generation : NULL;
    out->spec.broker_dir = out->broker_dir;
    if (r < 0)
        launch_spec_free(out);
    return r;
}

void launch_spec_free(launch_spec_copy *s) {
    config_free(&s->cfg);
    free(s->sandbox_id);
    free(s->user_data);
    free(s->token);
    free(s->broker_dir);
    sodium_memzero(s, sizeof *s);
}
