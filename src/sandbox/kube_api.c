/* Readers of the Kubernetes API's replies (see kube_api.h). Fields the
 * provider does not read are left alone (the API adds fields over time);
 * the ones it reads must have the documented types. */
#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "sandbox/kube_api.h"

static int proto(const char *what) {
    return fawn_err(FAWN_EPROTO, "the Kubernetes API answered %s", what);
}

static bool uuid_lower(const char *s) {
    if (strlen(s) != 36)
        return false;
    for (size_t i = 0; i < 36; i++) {
        bool dash = i == 8 || i == 13 || i == 18 || i == 23;
        bool hex = (s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f');
        if (dash ? s[i] != '-' : !hex)
            return false;
    }
    return true;
}

static bool sandbox_id_valid(const char *s) {
    if (strlen(s) != 16)
        return false;
    for (size_t i = 0; i < 16; i++)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return true;
}

/* An optional string member: NULL when absent or null; false when of another type. */
static bool opt_string(const char **out, const json_t *o, const char *key) {
    const json_t *v = json_object_get(o, key);
    *out = json_string_value(v);
    return !v || json_is_null(v) || json_is_string(v);
}

static int metadata_read(kube_pod *out, const json_t *meta) {
    const char *name = NULL, *uid = NULL, *deleted = NULL, *sid = NULL;
    const json_t *labels = json_object_get(meta, "labels");
    if (!json_is_object(meta) || !opt_string(&name, meta, "name") ||
        !opt_string(&uid, meta, "uid") || !opt_string(&deleted, meta, "deletionTimestamp") ||
        (labels && !json_is_object(labels) && !json_is_null(labels)) ||
        !opt_string(&sid, labels, KUBE_LABEL_SANDBOX))
        return proto("a pod whose metadata is malformed");
    if (!name || !*name || strlen(name) > KUBE_POD_NAME_MAX)
        return proto("a pod without a valid name");
    if (!uid || !uuid_lower(uid))
        return proto("a pod without a valid uid");
    if (sid && !sandbox_id_valid(sid))
        return proto("a pod whose sandbox label is malformed");
    snprintf(out->name, sizeof out->name, "%s", name);
    memcpy(out->uid, uid, 37);
    snprintf(out->sandbox_id, sizeof out->sandbox_id, "%s", sid ? sid : "");
    out->terminating = deleted != NULL;
    return 0;
}

/* The box container's port named "box" (0 when there is none). */
static int box_port_read(uint16_t *port, const json_t *spec) {
    const json_t *containers = json_object_get(spec, "containers");
    if (spec && !json_is_object(spec))
        return proto("a pod whose spec is not an object");
    if (containers && !json_is_array(containers))
        return proto("a pod whose containers are not a list");
    size_t i, j;
    const json_t *c, *p;
    json_array_foreach(containers, i, c) {
        const char *name = json_string_value(json_object_get(c, "name"));
        const json_t *ports = json_object_get(c, "ports");
        if (!name || strcmp(name, KUBE_BOX_CONTAINER) != 0)
            continue;
        if (ports && !json_is_array(ports))
            return proto("a pod whose ports are not a list");
        json_array_foreach(ports, j, p) {
            const char *pname = json_string_value(json_object_get(p, "name"));
            json_int_t n = json_integer_value(json_object_get(p, "containerPort"));
            if (!pname || strcmp(pname, "box") != 0)
                continue;
            if (!json_is_integer(json_object_get(p, "containerPort")) || n < 1 || n > 65535)
                return proto("a pod whose box port is malformed");
            *port = (uint16_t)n;
        }
    }
    return 0;
}

static int status_read(kube_pod *out, const json_t *status) {
    const char *phase = NULL, *ip = NULL;
    if (status && !json_is_object(status))
        return proto("a pod whose status is not an object");
    if (!opt_string(&phase, status, "phase") || !opt_string(&ip, status, "podIP"))
        return proto("a pod whose status is malformed");
    static const char *const phases[] = {[KUBE_PHASE_PENDING] = "Pending",
                                         [KUBE_PHASE_RUNNING] = "Running",
                                         [KUBE_PHASE_SUCCEEDED] = "Succeeded",
                                         [KUBE_PHASE_FAILED] = "Failed",
                                         [KUBE_PHASE_UNKNOWN] = "Unknown"};
    /* A pod just created may have no phase yet: it is pending. */
    out->phase = phase ? KUBE_PHASE_UNKNOWN : KUBE_PHASE_PENDING;
    for (size_t i = 0; phase && i < ARRAY_LEN(phases); i++)
        if (strcmp(phase, phases[i]) == 0)
            out->phase = (enum kube_phase)i;
    if (ip && *ip) {
        unsigned char addr[16];
        if (strlen(ip) >= sizeof out->pod_ip ||
            (inet_pton(AF_INET, ip, addr) != 1 && inet_pton(AF_INET6, ip, addr) != 1))
            return proto("a pod whose IP is malformed");
        snprintf(out->pod_ip, sizeof out->pod_ip, "%s", ip);
    }
    return 0;
}

static int pod_from_json(kube_pod *out, const json_t *o) {
    *out = (kube_pod){.phase = KUBE_PHASE_UNKNOWN};
    const char *kind = json_string_value(json_object_get(o, "kind"));
    int r = !json_is_object(o) || (kind && strcmp(kind, "Pod") != 0) ? proto("something not a pod")
                                                                     : 0;
    if (r == 0)
        r = metadata_read(out, json_object_get(o, "metadata"));
    if (r == 0)
        r = box_port_read(&out->box_port, json_object_get(o, "spec"));
    if (r == 0)
        r = status_read(out, json_object_get(o, "status"));
    if (r < 0)
        *out = (kube_pod){.phase = KUBE_PHASE_UNKNOWN};
    return r;
}

static int parse(json_t **o, const char *body, size_t len) {
    *o = NULL;
    if (!body)
        return proto("an empty reply");
    if (len > KUBE_REPLY_MAX)
        return proto("a reply that is too large");
    return fjson_parse_object(o, body, len) < 0 ? proto("something that is not a JSON object") : 0;
}

int kube_pod_parse(kube_pod *out, const char *body, size_t len) {
    *out = (kube_pod){.phase = KUBE_PHASE_UNKNOWN};
    json_t *o;
    int r = parse(&o, body, len);
    if (r == 0)
        r = pod_from_json(out, o);
    json_decref(o);
    return r;
}

static int list_meta(char next[KUBE_CONTINUE_MAX + 1], const json_t *o) {
    const char *kind = json_string_value(json_object_get(o, "kind"));
    const json_t *meta = json_object_get(o, "metadata");
    const char *cont = NULL;
    if ((kind && strcmp(kind, "PodList") != 0) || !json_is_array(json_object_get(o, "items")))
        return proto("something not a pod list");
    if ((meta && !json_is_object(meta)) || !opt_string(&cont, meta, "continue"))
        return proto("a pod list whose metadata is malformed");
    if (cont && strlen(cont) > KUBE_CONTINUE_MAX)
        return proto("a pod list whose continue token is too long");
    for (const char *p = cont; p && *p; p++)
        if (*p < 0x21 || *p > 0x7e)
            return proto("a pod list whose continue token is malformed");
    snprintf(next, KUBE_CONTINUE_MAX + 1, "%s", cont ? cont : "");
    return 0;
}

int kube_pod_list_parse(char next[KUBE_CONTINUE_MAX + 1], const char *body, size_t len,
                        int (*each)(void *each_ctx, const kube_pod *pod), void *each_ctx) {
    next[0] = '\0';
    json_t *o;
    int r = parse(&o, body, len);
    if (r == 0)
        r = list_meta(next, o);
    const json_t *items = json_object_get(o, "items");
    kube_pod pod;
    /* Every item is checked before any is reported. */
    for (size_t i = 0; r == 0 && i < json_array_size(items); i++)
        r = pod_from_json(&pod, json_array_get(items, i));
    for (size_t i = 0; r == 0 && i < json_array_size(items); i++)
        if (pod_from_json(&pod, json_array_get(items, i)) == 0)
            r = each(each_ctx, &pod);
    if (r < 0)
        next[0] = '\0';
    json_decref(o);
    return r;
}

bool kube_status_not_found(const char *body, size_t len, const char *kind, const char *name) {
    json_t *o;
    if (parse(&o, body, len) < 0)
        return false;
    const json_t *details = json_object_get(o, "details");
    const char *k = json_string_value(json_object_get(o, "kind"));
    const char *reason = json_string_value(json_object_get(o, "reason"));
    const char *dname = json_string_value(json_object_get(details, "name"));
    const char *dkind = json_string_value(json_object_get(details, "kind"));
    const json_t *code = json_object_get(o, "code");
    bool yes = k && strcmp(k, "Status") == 0 && reason && strcmp(reason, "NotFound") == 0 &&
               json_is_integer(code) && json_integer_value(code) == 404 && dname &&
               strcmp(dname, name) == 0 && dkind && strcmp(dkind, kind) == 0;
    json_decref(o);
    return yes;
}

int kube_status_parse(char reason[64], char message[256], const char *body, size_t len) {
    reason[0] = message[0] = '\0';
    json_t *o;
    int r = parse(&o, body, len);
    const char *k = json_string_value(json_object_get(o, "kind"));
    const char *why = NULL, *msg = NULL;
    if (r == 0 && (!k || strcmp(k, "Status") != 0 || !opt_string(&why, o, "reason") ||
                   !opt_string(&msg, o, "message")))
        r = proto("something that is not a Status");
    if (r == 0) {
        snprintf(reason, 64, "%s", why ? why : "");
        snprintf(message, 256, "%s", msg ? msg : "");
    }
    json_decref(o);
    return r;
}

int kube_version_parse(char git_version[64], const char *body, size_t len) {
    git_version[0] = '\0';
    json_t *o;
    int r = parse(&o, body, len);
    const char *v = json_string_value(json_object_get(o, "gitVersion"));
    unsigned major = 0, minor = 0;
    if (r == 0 && (!v || strlen(v) >= 64 || sscanf(v, "v%u.%u", &major, &minor) != 2))
        r = proto("a version without a gitVersion");
    for (const char *p = v; r == 0 && *p; p++)
        if (*p < 0x21 || *p > 0x7e)
            r = proto("a version with a malformed gitVersion");
    if (r == 0)
        snprintf(git_version, 64, "%s", v);
    json_decref(o);
    return r;
}
