/* The provider config.yaml names (sandbox.provider), and sandbox.remote →
 * remote_provider_config. That section arrives as a JSON tree (config.h):
 * sequences are arrays, scalars strings. */
#include <stdio.h>
#include <string.h>

#include "sandbox/container.h"
#include "sandbox/kubernetes.h"
#include "sandbox/remote.h"

#define REMOTE_SECTION "sandbox.remote"
/* Words of one command and bytes of one word: far past any real command line. */
#define REMOTE_ARGV_MAX 64
#define REMOTE_WORD_MAX 4096
/* Defaults and bounds of the timeouts, seconds. */
#define REMOTE_COMMAND_TIMEOUT_DEFAULT_S 30
#define REMOTE_START_TIMEOUT_DEFAULT_S 120
#define REMOTE_TIMEOUT_MAX_S 3600
/* Host variables passed through to the commands, and bytes of a name. */
#define REMOTE_PASSTHROUGH_MAX 64
#define REMOTE_ENV_NAME_MAX 128

static const char *const command_keys[] = {"create_command", "status_command", "destroy_command",
                                           "list_command"};

static int argv_from_json(char ***out, const json_t *list, const char *key) {
    size_t n = json_array_size(list);
    if (!json_is_array(list) || n == 0 || n > REMOTE_ARGV_MAX)
        return fawn_err(FAWN_ECONFIG, REMOTE_SECTION ".%s: must be a list of 1 to %d words", key,
                        REMOTE_ARGV_MAX);
    char **argv = calloc(n + 1, sizeof *argv);
    if (!argv)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *out = argv;
    for (size_t i = 0; i < n; i++) {
        const char *word = json_string_value(json_array_get(list, i));
        if (!word || !*word || strlen(word) > REMOTE_WORD_MAX)
            return fawn_err(FAWN_ECONFIG,
                            REMOTE_SECTION ".%s[%zu]: must be a non-empty word of "
                                           "at most %d bytes",
                            key, i, REMOTE_WORD_MAX);
        if (!(argv[i] = strdup(word)))
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

static bool env_name_ok(const char *name) {
    size_t n = name ? strlen(name) : 0;
    if (n == 0 || n > REMOTE_ENV_NAME_MAX || (name[0] >= '0' && name[0] <= '9'))
        return false;
    for (size_t i = 0; i < n; i++)
        if (!(name[i] == '_' || (name[i] >= 'A' && name[i] <= 'Z') ||
              (name[i] >= 'a' && name[i] <= 'z') || (name[i] >= '0' && name[i] <= '9')))
            return false;
    return true;
}

/* sandbox.remote.env_passthrough: a list of variable names (absent: none). */
static int passthrough_from_json(char ***out, const json_t *list) {
    *out = NULL;
    size_t n = json_array_size(list);
    if (!list)
        return 0;
    if (!json_is_array(list) || n > REMOTE_PASSTHROUGH_MAX)
        return fawn_err(FAWN_ECONFIG,
                        REMOTE_SECTION ".env_passthrough: must be a list of at most "
                                       "%d variable names",
                        REMOTE_PASSTHROUGH_MAX);
    char **names = calloc(n + 1, sizeof *names);
    if (!names)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    *out = names;
    for (size_t i = 0; i < n; i++) {
        const char *name = json_string_value(json_array_get(list, i));
        if (!env_name_ok(name))
            return fawn_err(FAWN_ECONFIG,
                            REMOTE_SECTION ".env_passthrough[%zu]: not a valid "
                                           "variable name ([A-Za-z_][A-Za-z0-9_]*)",
                            i);
        if (!(names[i] = strdup(name)))
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

static int seconds_from_json(uint32_t *out_ms, const json_t *tree, const char *key,
                             uint32_t def_s) {
    const json_t *v = json_object_get(tree, key);
    const char *text = json_string_value(v);
    if (!v) {
        *out_ms = def_s * 1000;
        return 0;
    }
    char *end = NULL;
    unsigned long s = text && *text >= '1' && *text <= '9' ? strtoul(text, &end, 10) : 0;
    if (!s || *end || s > REMOTE_TIMEOUT_MAX_S)
        return fawn_err(FAWN_ECONFIG, REMOTE_SECTION ".%s: must be an integer between 1 and %d",
                        key, REMOTE_TIMEOUT_MAX_S);
    *out_ms = (uint32_t)s * 1000;
    return 0;
}

static int keys_check(const json_t *tree) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)tree, key, v) {
        bool known = !strcmp(key, "command_timeout_s") || !strcmp(key, "start_timeout_s") ||
                     !strcmp(key, "env_passthrough");
        for (size_t i = 0; i < ARRAY_LEN(command_keys) && !known; i++)
            known = strcmp(key, command_keys[i]) == 0;
        if (!known)
            return fawn_err(FAWN_ECONFIG, "unknown key " REMOTE_SECTION ".%.64s", key);
    }
    return 0;
}

static void argv_free(char **argv) {
    for (size_t i = 0; argv && argv[i]; i++)
        free(argv[i]);
    free(argv);
}

static void remote_config_free(remote_provider_config *cfg) {
    argv_free(cfg->create_argv);
    argv_free(cfg->status_argv);
    argv_free(cfg->destroy_argv);
    argv_free(cfg->list_argv);
    argv_free(cfg->env_passthrough);
    *cfg = (remote_provider_config){0};
}

static int remote_config_from_json(remote_provider_config *out, const json_t *tree) {
    *out = (remote_provider_config){0};
    if (!json_is_object(tree))
        return fawn_err(FAWN_ECONFIG, REMOTE_SECTION ": required by sandbox.provider remote");
    char ***argvs[] = {&out->create_argv, &out->status_argv, &out->destroy_argv, &out->list_argv};
    int r = keys_check(tree);
    for (size_t i = 0; r == 0 && i < ARRAY_LEN(command_keys); i++)
        r = argv_from_json(argvs[i], json_object_get(tree, command_keys[i]), command_keys[i]);
    if (r == 0)
        r = seconds_from_json(&out->command_timeout_ms, tree, "command_timeout_s",
                              REMOTE_COMMAND_TIMEOUT_DEFAULT_S);
    if (r == 0)
        r = seconds_from_json(&out->start_timeout_ms, tree, "start_timeout_s",
                              REMOTE_START_TIMEOUT_DEFAULT_S);
    if (r == 0)
        r = passthrough_from_json(&out->env_passthrough, json_object_get(tree, "env_passthrough"));
    if (r < 0)
        remote_config_free(out);
    return r;
}

int sbx_provider_open(sbx_provider **out, const fawn_config *cfg, const char *fawn_bin) {
    *out = NULL;
    if (cfg->sandbox.provider == FAWN_PROVIDER_LOCAL)
        return local_provider_new(out, cfg, fawn_bin);
    if (cfg->sandbox.provider == FAWN_PROVIDER_CONTAINER) {
        container_provider_config cc;
        int r = container_config_parse(&cc, cfg->sandbox.container, cfg);
        return r < 0 ? r : container_provider_new(out, &cc);
    }
    if (cfg->sandbox.provider == FAWN_PROVIDER_KUBERNETES) {
        kube_provider_config kc;
        int r = kube_config_from(&kc, cfg);
        if (r == 0)
            r = kube_provider_new(out, &kc);
        kube_config_free(&kc);
        return r;
    }
    remote_provider_config rc;
    int r = remote_config_from_json(&rc, cfg->sandbox.remote);
    rc.home = cfg->home;
    if (r == 0)
        r = remote_provider_new(out, &rc);
    remote_config_free(&rc);
    return r;
}

void sbx_provider_close(sbx_provider *p) {
    if (p && strcmp(p->name, "remote") == 0)
        remote_provider_free(p);
    else if (p && strcmp(p->name, "kubernetes") == 0)
        kube_provider_free(p);
    else if (p && strcmp(p->name, "container") == 0)
        container_provider_free(p);
    else
        local_provider_free(p);
}
