/* sandbox.container → container_provider_config (container.h). The section
 * arrives as a JSON tree (config.h): scalars are strings. */
#include <stdio.h>
#include <string.h>

#include "sandbox/container.h"

#define SECTION "sandbox.container"
#define SOCKET_DEFAULT "/var/run/docker.sock"
/* The Engine API version Docker 20.10 and Podman 4 both serve. */
#define API_VERSION_DEFAULT "1.41"
/* The engine network boxes join with sandbox.network host (none: no network). */
#define NETWORK_DEFAULT "bridge"
/* One CPU keeps a runaway command from taking the host; 256 is past any host. */
#define CPUS_DEFAULT_NANO 1000000000ull
#define CPUS_MAX 256
/* Defaults and bound of the timeouts, seconds. */
#define REQUEST_TIMEOUT_DEFAULT_S 30
#define START_TIMEOUT_DEFAULT_S 120
#define TIMEOUT_MAX_S 3600

static const char *const keys[] = {"socket", "image",  "api_version",       "network",
                                   "cpus",   "engine", "request_timeout_s", "start_timeout_s"};

static int keys_check(const json_t *tree) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)tree, key, v) {
        bool known = false;
        for (size_t i = 0; i < ARRAY_LEN(keys) && !known; i++)
            known = strcmp(key, keys[i]) == 0;
        if (!known)
            return fawn_err(FAWN_ECONFIG, "unknown key " SECTION ".%.64s", key);
        if (!json_is_string(v))
            return fawn_err(FAWN_ECONFIG, SECTION ".%s: must be a scalar", key);
    }
    return 0;
}

/* Copies key's value (or def) into out when every byte is in allowed and
 * it fits; an empty value is refused. */
static int text_get(char *out, size_t size, const json_t *tree, const char *key, const char *def,
                    const char *allowed, const char *what) {
    const char *v = json_string_value(json_object_get(tree, key));
    if (!v)
        v = def;
    if (!v)
        return fawn_err(FAWN_ECONFIG, SECTION ".%s: is required", key);
    size_t n = strlen(v);
    if (n == 0 || n >= size || strspn(v, allowed) != n)
        return fawn_err(FAWN_ECONFIG, SECTION ".%s: must be %s (at most %zu bytes)", key, what,
                        size - 1);
    memcpy(out, v, n + 1);
    return 0;
}

#define ALNUM "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"

static int socket_get(container_provider_config *out, const json_t *tree) {
    int r = text_get(out->socket, sizeof out->socket, tree, "socket", SOCKET_DEFAULT,
                     ALNUM "/._-+@", "an absolute path of a unix socket");
    if (r == 0 && out->socket[0] != '/')
        r = fawn_err(FAWN_ECONFIG, SECTION ".socket: must be an absolute path");
    return r;
}

/* "MAJOR.MINOR", each 1 to 3 digits. */
static int api_version_get(container_provider_config *out, const json_t *tree) {
    int r = text_get(out->api_version, sizeof out->api_version, tree, "api_version",
                     API_VERSION_DEFAULT, "0123456789.", "a version such as 1.41");
    unsigned major, minor;
    int used = 0;
    if (r == 0 && (sscanf(out->api_version, "%3u.%3u%n", &major, &minor, &used) != 2 ||
                   (size_t)used != strlen(out->api_version)))
        r = fawn_err(FAWN_ECONFIG, SECTION ".api_version: must be a version such as 1.41");
    return r;
}

/* A decimal with up to 9 fractional digits, 0 to CPUS_MAX, into nano-CPUs. */
static int cpus_get(uint64_t *out, const json_t *tree) {
    const char *v = json_string_value(json_object_get(tree, "cpus"));
    *out = CPUS_DEFAULT_NANO;
    if (!v)
        return 0;
    uint64_t whole = 0, frac = 0, scale = 1000000000ull;
    const char *s = v;
    for (; *s >= '0' && *s <= '9' && whole <= CPUS_MAX; s++)
        whole = whole * 10 + (uint64_t)(*s - '0');
    bool ok = s != v && whole <= CPUS_MAX;
    if (ok && *s == '.') {
        const char *f = ++s;
        for (; *s >= '0' && *s <= '9' && s - f < 9; s++) {
            scale /= 10;
            frac += (uint64_t)(*s - '0') * scale;
        }
        ok = s != f;
    }
    *out = whole * 1000000000ull + frac;
    if (!ok || *s || *out > (uint64_t)CPUS_MAX * 1000000000ull)
        return fawn_err(FAWN_ECONFIG,
                        SECTION ".cpus: must be a number of CPUs from 0 to %d "
                                "(0: no limit)",
                        CPUS_MAX);
    return 0;
}

static int seconds_get(uint32_t *out_ms, const json_t *tree, const char *key, uint32_t def_s) {
    const char *text = json_string_value(json_object_get(tree, key));
    *out_ms = def_s * 1000;
    if (!text)
        return 0;
    char *end = NULL;
    unsigned long s = *text >= '1' && *text <= '9' ? strtoul(text, &end, 10) : 0;
    if (!s || *end || s > TIMEOUT_MAX_S)
        return fawn_err(FAWN_ECONFIG, SECTION ".%s: must be an integer between 1 and %d", key,
                        TIMEOUT_MAX_S);
    *out_ms = (uint32_t)s * 1000;
    return 0;
}

/* docker (default) or podman: how /proc masks are lifted differs. */
static int engine_get(bool *podman, const json_t *tree) {
    const char *v = json_string_value(json_object_get(tree, "engine"));
    *podman = v && strcmp(v, "podman") == 0;
    if (v && !*podman && strcmp(v, "docker") != 0)
        return fawn_err(FAWN_ECONFIG, SECTION ".engine: must be docker or podman");
    return 0;
}

int container_config_parse(container_provider_config *out, const json_t *tree,
                           const fawn_config *cfg) {
    *out = (container_provider_config){.cfg = cfg};
    if (!json_is_object(tree))
        return fawn_err(FAWN_ECONFIG, SECTION ": required by sandbox.provider container");
    int r = keys_check(tree);
    if (r == 0)
        r = socket_get(out, tree);
    if (r == 0)
        r = text_get(out->image, sizeof out->image, tree, "image", NULL, ALNUM "/:._-@",
                     "an image name, name:tag or digest");
    if (r == 0)
        r = api_version_get(out, tree);
    if (r == 0)
        r = text_get(out->network, sizeof out->network, tree, "network", NETWORK_DEFAULT,
                     ALNUM "._-", "an engine network's name");
    if (r == 0)
        r = cpus_get(&out->nano_cpus, tree);
    if (r == 0)
        r = engine_get(&out->podman, tree);
    if (r == 0)
        r = seconds_get(&out->request_timeout_ms, tree, "request_timeout_s",
                        REQUEST_TIMEOUT_DEFAULT_S);
    if (r == 0)
        r = seconds_get(&out->start_timeout_ms, tree, "start_timeout_s", START_TIMEOUT_DEFAULT_S);
    return r;
}
