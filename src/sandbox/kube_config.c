/* sandbox.kubernetes → kube_provider_config, a kubeconfig's current
 * context, and the Pod the provider makes (see kubernetes.h and
 * docs/kubernetes.md). The section arrives as a JSON tree (config.h):
 * scalars are strings. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <yaml.h>

#include "base/json.h"
#include "sandbox/kube_api.h"
#include "sandbox/kubernetes.h"

#define KUBE_SECTION "sandbox.kubernetes"
/* A kubeconfig: a few KiB, with inline certificates a few more. */
#define KUBECONFIG_MAX ((size_t)1 << 20)
/* Nesting of a kubeconfig's YAML: it has four levels. */
#define KUBECONFIG_DEPTH_MAX 16
/* Bytes of a configured string (paths, names, URLs). */
#define KUBE_VALUE_MAX 1024
/* Bounds of the timeouts and lifetimes, seconds. */
#define KUBE_TIMEOUT_MAX_S 3600
#define KUBE_TTL_MAX_S 86400

static const char *const known_keys[] = {"server",
                                         "ca_file",
                                         "token_file",
                                         "kubeconfig",
                                         "namespace",
                                         "image",
                                         "runtime_class",
                                         "box_port",
                                         "attest_key_file",
                                         "request_timeout_s",
                                         "start_timeout_s",
                                         "delete_timeout_s",
                                         "probe_timeout_s",
                                         "capability_ttl_s",
                                         "capability_negative_ttl_s",
                                         "cpu_millis",
                                         "broker_address",
                                         NULL};

void kube_config_free(kube_provider_config *c) {
    char **strings[] = {&c->server,         &c->ca_file,    &c->ca_pem,        &c->token_file,
                        &c->namespace_,     &c->image,      &c->runtime_class, &c->attest_key_file,
                        &c->broker_address, &c->broker_clis};
    for (size_t i = 0; i < ARRAY_LEN(strings); i++) {
        free(*strings[i]);
        *strings[i] = NULL;
    }
    if (c->token)
        sodium_memzero(c->token, strlen(c->token));
    free(c->token);
    *c = (kube_provider_config){0};
}

static int string_key(char **out, const json_t *tree, const char *key, bool required) {
    const json_t *v = json_object_get(tree, key);
    const char *s = json_string_value(v);
    if (!v && !required)
        return 0;
    if (!s || !*s || strlen(s) > KUBE_VALUE_MAX)
        return fawn_err(FAWN_ECONFIG, KUBE_SECTION ".%s: %s a non-empty string of at most %d bytes",
                        key, v ? "must be" : "is required:", KUBE_VALUE_MAX);
    free(*out);
    return (*out = strdup(s)) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int number_key(uint64_t *out, const json_t *tree, const char *key, uint64_t def,
                      uint64_t min, uint64_t max) {
    const json_t *v = json_object_get(tree, key);
    const char *text = json_string_value(v);
    *out = def;
    if (!v)
        return 0;
    char *end = NULL;
    errno = 0;
    unsigned long long n = text && *text >= '0' && *text <= '9' ? strtoull(text, &end, 10) : 0;
    if (!text || !end || *end || errno || n < min || n > max)
        return fawn_err(FAWN_ECONFIG, KUBE_SECTION ".%s: must be an integer from %llu to %llu", key,
                        (unsigned long long)min, (unsigned long long)max);
    *out = n;
    return 0;
}

/* Only https, or http to a loopback address (a test's fake API server, or
 * `kubectl proxy` on this host): a bearer token never crosses a network
 * in clear. No path, query or credentials in the URL. */
static int server_check(const char *url) {
    bool tls = strncmp(url, "https://", 8) == 0, plain = strncmp(url, "http://", 7) == 0;
    const char *host = url + (tls ? 8 : 7);
    if ((!tls && !plain) || strpbrk(host, "/?#@ ") || !*host)
        return fawn_err(FAWN_ECONFIG, KUBE_SECTION ".server: must be https://HOST[:PORT] "
                                                   "(no path)");
    if (tls)
        return 0;
    char name[64];
    const char *end = host[0] == '[' ? strchr(host, ']') : strrchr(host, ':');
    size_t n = end ? (size_t)(end - host) : strlen(host);
    if (host[0] == '[')
        host++, n = end ? (size_t)(end - host) : 0;
    if (n == 0 || n >= sizeof name)
        return fawn_err(FAWN_ECONFIG, KUBE_SECTION ".server: malformed host");
    memcpy(name, host, n);
    name[n] = '\0';
    struct in_addr a4;
    struct in6_addr a6;
    bool loopback = (inet_pton(AF_INET, name, &a4) == 1 && (ntohl(a4.s_addr) >> 24) == 127) ||
                    (inet_pton(AF_INET6, name, &a6) == 1 && IN6_IS_ADDR_LOOPBACK(&a6));
    return loopback ? 0
                    : fawn_err(FAWN_ECONFIG, KUBE_SECTION ".server: http:// only to a loopback "
                                                          "address; use https:// for a cluster");
}

/* ---- kubeconfig (YAML) ---- */

static int yaml_node(json_t **out, yaml_parser_t *p, yaml_event_t *ev, int depth);

static int yaml_next(yaml_parser_t *p, yaml_event_t *ev) {
    return yaml_parser_parse(p, ev) ? 0 : fawn_err(FAWN_ECONFIG, "kubeconfig: not valid YAML");
}

static int yaml_collection(json_t *c, yaml_parser_t *p, int depth) {
    bool map = json_is_object(c);
    for (;;) {
        yaml_event_t ev;
        int r = yaml_next(p, &ev);
        if (r < 0)
            return r;
        if (ev.type == YAML_MAPPING_END_EVENT || ev.type == YAML_SEQUENCE_END_EVENT) {
            yaml_event_delete(&ev);
            return 0;
        }
        _cleanup_free_ char *key = NULL;
        if (map) {
            if (ev.type != YAML_SCALAR_EVENT) {
                yaml_event_delete(&ev);
                return fawn_err(FAWN_ECONFIG, "kubeconfig: mapping keys must be scalars");
            }
            key = strdup((const char *)ev.data.scalar.value);
            yaml_event_delete(&ev);
            if (!key || (r = yaml_next(p, &ev)) < 0)
                return key ? r : fawn_err(FAWN_ENOMEM, "out of memory");
        }
        json_t *v = NULL;
        r = yaml_node(&v, p, &ev, depth + 1);
        yaml_event_delete(&ev);
        if (r == 0 && (map ? json_object_set_new(c, key, v) : json_array_append_new(c, v)) < 0)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        if (r < 0)
            return r;
    }
}

/* One node starting at ev (scalars become strings; anchors are refused). */
static int yaml_node(json_t **out, yaml_parser_t *p, yaml_event_t *ev, int depth) {
    *out = NULL;
    if (depth > KUBECONFIG_DEPTH_MAX)
        return fawn_err(FAWN_ECONFIG, "kubeconfig: nested too deeply");
    if (ev->type == YAML_SCALAR_EVENT)
        return (*out = json_stringn((const char *)ev->data.scalar.value, ev->data.scalar.length))
                   ? 0
                   : fawn_err(FAWN_ECONFIG, "kubeconfig: a value is not UTF-8");
    if (ev->type != YAML_MAPPING_START_EVENT && ev->type != YAML_SEQUENCE_START_EVENT)
        return fawn_err(FAWN_ECONFIG, "kubeconfig: unsupported YAML (aliases, tags)");
    *out = ev->type == YAML_MAPPING_START_EVENT ? json_object() : json_array();
    int r = *out ? yaml_collection(*out, p, depth) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

static int yaml_to_json(json_t **out, const char *text, size_t len) {
    *out = NULL;
    yaml_parser_t p;
    if (!yaml_parser_initialize(&p))
        return fawn_err(FAWN_ENOMEM, "out of memory");
    yaml_parser_set_input_string(&p, (const unsigned char *)text, len);
    int r = 0;
    yaml_event_t ev;
    /* stream start, document start, then the root node */
    for (int i = 0; r == 0 && i < 3; i++) {
        if ((r = yaml_next(&p, &ev)) < 0)
            break;
        if (i == 2)
            r = yaml_node(out, &p, &ev, 0);
        yaml_event_delete(&ev);
    }
    yaml_parser_delete(&p);
    if (r == 0 && !json_is_object(*out))
        r = fawn_err(FAWN_ECONFIG, "kubeconfig: not a mapping");
    if (r < 0) {
        json_decref(*out);
        *out = NULL;
    }
    return r;
}

/* The entry of list (clusters, users, contexts) named name: its `field`. */
static const json_t *named(const json_t *root, const char *list, const char *name,
                           const char *field) {
    size_t i;
    const json_t *e;
    json_array_foreach(json_object_get(root, list), i, e) {
        const char *n = json_string_value(json_object_get(e, "name"));
        if (n && name && strcmp(n, name) == 0)
            return json_object_get(e, field);
    }
    return NULL;
}

static int take(char **out, const json_t *o, const char *key) {
    const char *s = json_string_value(json_object_get(o, key));
    if (!s || !*s)
        return 0;
    free(*out);
    return (*out = strdup(s)) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* certificate-authority-data: base64 of the PEM. */
static int ca_data(kube_provider_config *c, const json_t *cluster) {
    const char *b64 = json_string_value(json_object_get(cluster, "certificate-authority-data"));
    if (!b64)
        return take(&c->ca_file, cluster, "certificate-authority");
    size_t n = strlen(b64), len = 0;
    char *pem = malloc(n + 1);
    if (!pem)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (sodium_base642bin((unsigned char *)pem, n, b64, n, " \n\r", &len, NULL,
                          sodium_base64_VARIANT_ORIGINAL) != 0) {
        free(pem);
        return fawn_err(FAWN_ECONFIG, "kubeconfig: certificate-authority-data is not base64");
    }
    pem[len] = '\0';
    free(c->ca_pem);
    c->ca_pem = pem;
    return 0;
}

int kube_kubeconfig_parse(kube_provider_config *c, const char *text, size_t len) {
    json_t *root = NULL;
    int r = len > KUBECONFIG_MAX ? fawn_err(FAWN_ECONFIG, "kubeconfig: too large")
                                 : yaml_to_json(&root, text, len);
    const char *current = json_string_value(json_object_get(root, "current-context"));
    const json_t *ctx = r == 0 ? named(root, "contexts", current, "context") : NULL;
    const char *cluster_name = json_string_value(json_object_get(ctx, "cluster"));
    const char *user_name = json_string_value(json_object_get(ctx, "user"));
    const json_t *cluster = named(root, "clusters", cluster_name, "cluster");
    const json_t *user = named(root, "users", user_name, "user");
    if (r == 0 && (!json_is_object(cluster) || !json_is_object(user)))
        r = fawn_err(FAWN_ECONFIG, "kubeconfig: the current context names no cluster and user");
    if (r == 0)
        r = take(&c->server, cluster, "server");
    if (r == 0 && !c->server)
        r = fawn_err(FAWN_ECONFIG, "kubeconfig: the current cluster has no server");
    if (r == 0)
        r = ca_data(c, cluster);
    if (r == 0)
        r = take(&c->token, user, "token");
    if (r == 0)
        r = take(&c->token_file, user, "tokenFile");
    if (r == 0 && !c->token && !c->token_file)
        r = fawn_err(FAWN_ECONFIG, "kubeconfig: the current user has no bearer token "
                                   "(client certificates and exec plugins are not supported)");
    json_decref(root);
    return r;
}

static int kubeconfig_load(kube_provider_config *c, const char *path) {
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
    _cleanup_free_ char *text = NULL;
    size_t len = 0;
    if (fd < 0)
        return fawn_err_sys(FAWN_ECONFIG, errno, KUBE_SECTION ".kubeconfig: open %s", path);
    int r = fawn_read_all(&text, &len, fd, KUBECONFIG_MAX);
    if (r == 0)
        r = kube_kubeconfig_parse(c, text, len);
    if (text)
        sodium_memzero(text, len);
    return r;
}

/* The pod's own service account (KUBERNETES_SERVICE_HOST/PORT). */
static int in_cluster(kube_provider_config *c) {
    const char *host = getenv("KUBERNETES_SERVICE_HOST");
    const char *port = getenv("KUBERNETES_SERVICE_PORT");
    if (!host || !*host || !port || !*port)
        return fawn_err(FAWN_ECONFIG,
                        KUBE_SECTION ": give server and token_file, or kubeconfig, or run in a "
                                     "pod (KUBERNETES_SERVICE_HOST is not set)");
    char url[KUBE_VALUE_MAX];
    snprintf(url, sizeof url, strchr(host, ':') ? "https://[%s]:%s" : "https://%s:%s", host, port);
    c->server = strdup(url);
    c->token_file = strdup(KUBE_SA_DIR "/token");
    c->ca_file = strdup(KUBE_SA_DIR "/ca.crt");
    return c->server && c->token_file && c->ca_file ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int credentials(kube_provider_config *c, const json_t *tree) {
    _cleanup_free_ char *kubeconfig = NULL;
    int r = string_key(&c->server, tree, "server", false);
    if (r == 0)
        r = string_key(&c->ca_file, tree, "ca_file", false);
    if (r == 0)
        r = string_key(&c->token_file, tree, "token_file", false);
    if (r == 0)
        r = string_key(&kubeconfig, tree, "kubeconfig", false);
    if (r == 0 && kubeconfig && c->server)
        r = fawn_err(FAWN_ECONFIG, KUBE_SECTION ": give server or kubeconfig, not both");
    if (r == 0 && c->server && !c->token_file)
        r = fawn_err(FAWN_ECONFIG, KUBE_SECTION ".token_file: is required with server");
    if (r == 0 && kubeconfig)
        r = kubeconfig_load(c, kubeconfig);
    else if (r == 0 && !c->server)
        r = in_cluster(c);
    if (r == 0)
        r = server_check(c->server);
    return r;
}

static int keys_check(const json_t *tree) {
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)tree, key, v) {
        bool known = false;
        for (size_t i = 0; known_keys[i] && !known; i++)
            known = strcmp(key, known_keys[i]) == 0;
        if (!known)
            return fawn_err(FAWN_ECONFIG, "unknown key " KUBE_SECTION ".%.64s", key);
    }
    return 0;
}

/* A DNS-1123 label (namespace) or subdomain-like name (runtime class). */
static bool dns_name(const char *s, size_t max) {
    size_t n = s ? strlen(s) : 0;
    if (n == 0 || n > max || s[0] == '-' || s[n - 1] == '-')
        return false;
    for (size_t i = 0; i < n; i++)
        if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') || s[i] == '-'))
            return false;
    return true;
}

static int timeouts(kube_provider_config *c, const json_t *tree) {
    uint64_t v[7] = {0};
    int r = number_key(&v[0], tree, "request_timeout_s", 10, 1, KUBE_TIMEOUT_MAX_S);
    if (r == 0)
        r = number_key(&v[1], tree, "start_timeout_s", 120, 1, KUBE_TIMEOUT_MAX_S);
    if (r == 0)
        r = number_key(&v[2], tree, "delete_timeout_s", 60, 1, KUBE_TIMEOUT_MAX_S);
    if (r == 0)
        r = number_key(&v[3], tree, "probe_timeout_s", 5, 1, KUBE_TIMEOUT_MAX_S);
    if (r == 0)
        r = number_key(&v[4], tree, "capability_ttl_s", 300, 1, KUBE_TTL_MAX_S);
    if (r == 0)
        r = number_key(&v[5], tree, "capability_negative_ttl_s", 30, 1, KUBE_TTL_MAX_S);
    if (r == 0)
        r = number_key(&v[6], tree, "box_port", 8080, 1, 65535);
    c->request_timeout_ms = (uint32_t)v[0] * 1000;
    c->start_timeout_ms = (uint32_t)v[1] * 1000;
    c->delete_timeout_ms = (uint32_t)v[2] * 1000;
    c->probe_timeout_ms = (uint32_t)v[3] * 1000;
    c->caps_positive_ttl_ms = (int64_t)v[4] * 1000;
    c->caps_negative_ttl_ms = (int64_t)v[5] * 1000;
    c->box_port = (uint16_t)v[6];
    return r;
}

static int names(kube_provider_config *c, const json_t *tree, const fawn_config *cfg) {
    uint64_t cpu = 0;
    int r = string_key(&c->image, tree, "image", true);
    if (r == 0)
        r = string_key(&c->namespace_, tree, "namespace", false);
    if (r == 0 && !c->namespace_ && !(c->namespace_ = strdup("fawn-sandboxes")))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && !dns_name(c->namespace_, 63))
        r = fawn_err(FAWN_ECONFIG, KUBE_SECTION ".namespace: must be a DNS label");
    if (r == 0)
        r = string_key(&c->runtime_class, tree, "runtime_class", false);
    if (r == 0 && c->runtime_class && !dns_name(c->runtime_class, 253))
        r = fawn_err(FAWN_ECONFIG, KUBE_SECTION ".runtime_class: must be a DNS name");
    if (r == 0)
        r = string_key(&c->attest_key_file, tree, "attest_key_file", false);
    if (r == 0 && !c->attest_key_file) {
        char path[4096];
        snprintf(path, sizeof path, "%s/kubernetes-attest.key", cfg->home);
        if (!(c->attest_key_file = strdup(path)))
            r = fawn_err(FAWN_ENOMEM, "out of memory");
    }
    if (r == 0)
        r = number_key(&cpu, tree, "cpu_millis", 0, 0, 1024000);
    c->cpu_millis = (uint32_t)cpu;
    return r;
}

/* A broker CLI's name as broker.clis names them (src/broker/policy.c
 * refuses the section otherwise): it becomes a shim's file name in the pod. */
static bool cli_name(const char *s) {
    size_t n = s ? strlen(s) : 0;
    return n > 0 && n <= 64 && s[0] != '.' &&
           strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-") == n;
}

/* "HOST:PORT" that pods dial: a DNS name or an address, and a port. */
static bool dial_address(const char *s) {
    const char *colon = s ? strrchr(s, ':') : NULL;
    if (!colon || colon == s || strlen(colon + 1) == 0 || strlen(colon + 1) > 5 ||
        strspn(colon + 1, "0123456789") != strlen(colon + 1) || atoi(colon + 1) < 1 ||
        atoi(colon + 1) > 65535)
        return false;
    size_t host = (size_t)(colon - s);
    return strspn(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-:[]") >= host;
}

/* With broker.clis: where pods reach the broker (broker_address, required
 * then) and the names of its CLIs, joined by commas (the pods' shims). */
static int broker_settings(kube_provider_config *c, const json_t *tree, const fawn_config *cfg) {
    const json_t *clis = json_object_get(cfg->broker, "clis");
    int r = string_key(&c->broker_address, tree, "broker_address", false);
    if (r < 0 || json_array_size(clis) == 0)
        return r;
    if (!dial_address(c->broker_address))
        return fawn_err(FAWN_ECONFIG, KUBE_SECTION ".broker_address: HOST:PORT where pods reach "
                                                   "the credential broker is required with "
                                                   "broker.clis");
    fbuf names = {0};
    size_t i;
    const json_t *v;
    json_array_foreach(clis, i, v) {
        const char *name = json_string_value(json_object_get(v, "name"));
        if (r == 0 && !cli_name(name))
            r = fawn_err(FAWN_ECONFIG, "broker.clis[%zu].name must be a command name", i);
        if (r == 0)
            r = fbuf_printf(&names, "%s%s", i ? "," : "", name);
    }
    if (r == 0 && !(c->broker_clis = strdup(names.data)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    fbuf_free(&names);
    return r;
}

int kube_config_from(kube_provider_config *out, const fawn_config *cfg) {
    *out = (kube_provider_config){0};
    const json_t *tree = cfg->sandbox.kubernetes;
    int r = json_is_object(tree)
                ? keys_check(tree)
                : fawn_err(FAWN_ECONFIG, KUBE_SECTION ": required by sandbox.provider kubernetes");
    if (r == 0)
        r = names(out, tree, cfg);
    if (r == 0)
        r = timeouts(out, tree);
    if (r == 0)
        r = credentials(out, tree);
    if (r == 0)
        r = broker_settings(out, tree, cfg);
    out->idle_exit_s = cfg->sandbox.idle_timeout_s;
    out->memory_mb = cfg->sandbox.limits.memory_mb;
    out->disk_mb = cfg->sandbox.limits.disk_mb;
    out->tmp_mb = cfg->sandbox.limits.tmp_size_mb;
    if (r < 0)
        kube_config_free(out);
    return r;
}

/* ---- the pod ---- */

static json_t *container_security(void) {
    return json_pack("{s:b, s:b, s:b, s:b, s:I, s:{s:[s]}, s:{s:s}}", "allowPrivilegeEscalation", 0,
                     "privileged", 0, "readOnlyRootFilesystem", 1, "runAsNonRoot", 1, "runAsUser",
                     (json_int_t)KUBE_BOX_UID, "capabilities", "drop", "ALL", "seccompProfile",
                     "type", "RuntimeDefault");
}

static json_t *resources(const kube_provider_config *c) {
    char mem[32], disk[32];
    snprintf(mem, sizeof mem, "%lluMi", (unsigned long long)c->memory_mb);
    snprintf(disk, sizeof disk, "%lluMi", (unsigned long long)(c->disk_mb + c->tmp_mb));
    json_t *limits = json_pack("{s:s, s:s}", "memory", mem, "ephemeral-storage", disk);
    if (limits && c->cpu_millis) {
        char cpu[32];
        snprintf(cpu, sizeof cpu, "%um", c->cpu_millis);
        json_object_set_new(limits, "cpu", json_string(cpu));
    }
    return json_pack("{s:o, s:O}", "limits", limits, "requests", limits);
}

static json_t *box_args(const kube_provider_config *c) {
    char listen[32], idle[16];
    snprintf(listen, sizeof listen, "0.0.0.0:%u", c->box_port);
    snprintf(idle, sizeof idle, "%u", c->idle_exit_s);
    json_t *args = json_pack("[s, s, s, s, s, s, s, s, s, s, s, s]", "fawn", "box", "--listen",
                             listen, "--token-file", KUBE_SECRET_MOUNT "/token", "--attest-file",
                             KUBE_SECRET_MOUNT "/attest", "--user-data", "/mnt/user-data",
                             "--idle-exit", idle);
    if (args && c->broker_clis &&
        (json_array_append_new(args, json_string("--broker")) < 0 ||
         json_array_append_new(args, json_string(c->broker_address)) < 0 ||
         json_array_append_new(args, json_string("--broker-clis")) < 0 ||
         json_array_append_new(args, json_string(c->broker_clis)) < 0)) {
        json_decref(args);
        return NULL;
    }
    return args;
}

static json_t *box_env(const char *sandbox_id, const char *user) {
    return json_pack("[{s:s, s:s}, {s:s, s:s}, {s:s, s:{s:{s:s}}}, {s:s, s:s}]", "name",
                     "FAWN_SANDBOX_ID", "value", sandbox_id, "name", "FAWN_USER", "value", user,
                     "name", "FAWN_POD_UID", "valueFrom", "fieldRef", "fieldPath", "metadata.uid",
                     "name", "FAWN_HOME", "value", "/tmp/fawn");
}

static json_t *volumes(const kube_provider_config *c, const char *name) {
    char data[32], tmp[32];
    snprintf(data, sizeof data, "%lluMi", (unsigned long long)c->disk_mb);
    snprintf(tmp, sizeof tmp, "%lluMi", (unsigned long long)c->tmp_mb);
    return json_pack("[{s:s, s:{s:s, s:i}}, {s:s, s:{s:s}}, {s:s, s:{s:s}}]", "name", "fawn-secret",
                     "secret", "secretName", name, "defaultMode", 0400, "name", "user-data",
                     "emptyDir", "sizeLimit", data, "name", "tmp", "emptyDir", "sizeLimit", tmp);
}

static json_t *box_container(const kube_provider_config *c, const char *sandbox_id,
                             const char *user) {
    return json_pack(
        "{s:s, s:s, s:s, s:o, s:[{s:s, s:I, s:s}], s:o, s:o, s:o, s:[{s:s, s:s, s:b}, {s:s, s:s}, "
        "{s:s, s:s}]}",
        "name", KUBE_BOX_CONTAINER, "image", c->image, "imagePullPolicy", "IfNotPresent", "command",
        box_args(c), "ports", "name", "box", "containerPort", (json_int_t)c->box_port, "protocol",
        "TCP", "env", box_env(sandbox_id, user), "securityContext", container_security(),
        "resources", resources(c), "volumeMounts", "name", "fawn-secret", "mountPath",
        KUBE_SECRET_MOUNT, "readOnly", 1, "name", "user-data", "mountPath", "/mnt/user-data",
        "name", "tmp", "mountPath", "/tmp");
}

json_t *kube_pod_manifest(const kube_provider_config *c, const char *sandbox_id, const char *user,
                          const char *thread) {
    char name[KUBE_POD_NAME_MAX + 1];
    snprintf(name, sizeof name, "fawn-%s", sandbox_id);
    json_t *spec = json_pack("{s:b, s:b, s:s, s:{s:b, s:I, s:I, s:I, s:{s:s}}, s:[o], s:o}",
                             "automountServiceAccountToken", 0, "enableServiceLinks", 0,
                             "restartPolicy", "Never", "securityContext", "runAsNonRoot", 1,
                             "runAsUser", (json_int_t)KUBE_BOX_UID, "runAsGroup",
                             (json_int_t)KUBE_BOX_UID, "fsGroup", (json_int_t)KUBE_BOX_UID,
                             "seccompProfile", "type", "RuntimeDefault", "containers",
                             box_container(c, sandbox_id, user), "volumes", volumes(c, name));
    if (spec && c->runtime_class)
        json_object_set_new(spec, "runtimeClassName", json_string(c->runtime_class));
    return json_pack("{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}, s:{s:s, s:s}}, s:o}", "apiVersion",
                     "v1", "kind", "Pod", "metadata", "name", name, "namespace", c->namespace_,
                     "labels", KUBE_LABEL_MANAGED, "fawn", KUBE_LABEL_SANDBOX, sandbox_id,
                     "annotations", "fawn.dev/user", user, "fawn.dev/thread", thread, "spec", spec);
}
