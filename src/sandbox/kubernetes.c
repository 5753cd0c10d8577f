/* The Kubernetes provider (see kubernetes.h): the operations over the REST
 * API (libcurl), the pod and its Secret, readiness, confirmed deletion,
 * attestation and the capability probe. */
#include <arpa/inet.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "paths/paths.h"
#include "sandbox/caps_cache.h"
#include "sandbox/client.h"
#include "sandbox/kube_api.h"
#include "sandbox/kubernetes.h"
#include "sandbox/placement.h"

/* Bytes of the server's URL (kube_config.c bounds configured strings so). */
#define KUBE_VALUE_MAX 1024

#define KUBE_ENDPOINT_PREFIX "tcp:"
/* Longest pause between polls of a starting or stopping pod. */
#define KUBE_BACKOFF_MAX_MS 500
/* One readiness or attestation request to a box. */
#define KUBE_BOX_ATTEMPT_MS 2000
/* A bearer token file: service account tokens are a few KiB at most. */
#define KUBE_TOKEN_MAX 16384
/* Pages of a listing followed: KUBE_LIST_PAGE pods each. */
#define KUBE_LIST_PAGES_MAX 400
/* A URL path with its query: a namespace, a name and an escaped continue
 * token fit many times over. */
#define KUBE_PATH_MAX 8192

typedef struct kube_provider {
    sbx_provider base;
    kube_provider_config cfg;
    uint8_t key[BOX_ATTEST_KEY_BYTES];
    caps_cache *caps;
} kube_provider;

/* An API reply: its HTTP status and body (bounded by KUBE_REPLY_MAX). */
typedef struct kube_reply {
    long status;
    fbuf body;
} kube_reply;

static void reply_free(kube_reply *r) { fbuf_free(&r->body); }

static size_t body_write(char *data, size_t size, size_t n, void *ud) {
    fbuf *b = ud;
    return fbuf_append(b, data, size * n) == 0 ? size * n : 0;
}

/* The bearer token: inline, or read from its file now. */
static int token_get(char **out, const kube_provider *kp) {
    *out = NULL;
    if (kp->cfg.token)
        return (*out = strdup(kp->cfg.token)) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (!kp->cfg.token_file)
        return 0;
    _cleanup_close_ int fd = open(kp->cfg.token_file, O_RDONLY | O_CLOEXEC);
    size_t len = 0;
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", kp->cfg.token_file);
    int r = fawn_read_all(out, &len, fd, KUBE_TOKEN_MAX);
    while (r == 0 && len > 0 && ((*out)[len - 1] == '\n' || (*out)[len - 1] == '\r'))
        (*out)[--len] = '\0';
    for (size_t i = 0; r == 0 && i < len; i++)
        if ((*out)[i] < 0x21 || (*out)[i] > 0x7e)
            r = fawn_err(FAWN_EIO, "%s does not hold a bearer token", kp->cfg.token_file);
    if (r < 0) {
        free(*out);
        *out = NULL;
    }
    return r;
}

static struct curl_slist *headers_build(const char *token, bool body) {
    struct curl_slist *h = curl_slist_append(NULL, "Accept: application/json");
    if (h && body)
        h = curl_slist_append(h, "Content-Type: application/json");
    if (h && token && *token) {
        size_t n = strlen(token) + 32;
        _cleanup_free_ char *line = malloc(n);
        if (!line)
            return h;
        snprintf(line, n, "Authorization: Bearer %s", token);
        struct curl_slist *t = curl_slist_append(h, line);
        sodium_memzero(line, n);
        h = t ? t : h;
    }
    return h;
}

static void curl_setup(CURL *c, const kube_provider *kp, const char *url, int timeout_ms) {
    bool tls = strncmp(kp->cfg.server, "https://", 8) == 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, tls ? "https" : "http");
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(c, CURLOPT_PROXY, ""); /* never the host's proxy settings */
    curl_easy_setopt(c, CURLOPT_NETRC, (long)CURL_NETRC_IGNORED);
    curl_easy_setopt(c, CURLOPT_TIMEOUT_MS, (long)timeout_ms);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYPEER, 1L);
    curl_easy_setopt(c, CURLOPT_SSL_VERIFYHOST, 2L);
    if (kp->cfg.ca_file)
        curl_easy_setopt(c, CURLOPT_CAINFO, kp->cfg.ca_file);
    if (kp->cfg.ca_pem) {
        struct curl_blob blob = {
            .data = kp->cfg.ca_pem, .len = strlen(kp->cfg.ca_pem), .flags = CURL_BLOB_COPY};
        curl_easy_setopt(c, CURLOPT_CAINFO_BLOB, &blob);
    }
}

/* One API request: 0 once an HTTP reply came (any status; *out has it);
 * FAWN_ETIMEDOUT or FAWN_EIO when none did, FAWN_EPROTO for a reply past
 * KUBE_REPLY_MAX. */
static int kube_request(kube_reply *out, const kube_provider *kp, const char *method,
                        const char *path, const json_t *body, int timeout_ms) {
    *out = (kube_reply){.body = {.limit = KUBE_REPLY_MAX}};
    _cleanup_free_ char *token = NULL, *text = body ? fjson_dump(body) : NULL;
    char url[KUBE_PATH_MAX + KUBE_VALUE_MAX + 16];
    int r = fawn_curl_init();
    if (r == 0)
        r = token_get(&token, kp);
    if (r < 0)
        return r;
    if (body && !text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    if (snprintf(url, sizeof url, "%s%s", kp->cfg.server, path) >= (int)sizeof url)
        return fawn_err(FAWN_EINVAL, "API path too long");
    CURL *c = curl_easy_init();
    struct curl_slist *h = headers_build(token, body != NULL);
    if (token)
        sodium_memzero(token, strlen(token));
    if (!c || !h) {
        curl_easy_cleanup(c);
        curl_slist_free_all(h);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    curl_setup(c, kp, url, timeout_ms);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_CUSTOMREQUEST, method);
    if (text) {
        curl_easy_setopt(c, CURLOPT_POSTFIELDS, text);
        curl_easy_setopt(c, CURLOPT_POSTFIELDSIZE, (long)strlen(text));
    }
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, body_write);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &out->body);
    CURLcode cr = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &out->status);
    curl_easy_cleanup(c);
    curl_slist_free_all(h);
    if (cr == CURLE_OK && fbuf_append(&out->body, "", 0) == 0)
        return 0;
    reply_free(out);
    out->status = 0;
    if (cr == CURLE_WRITE_ERROR)
        return fawn_err(FAWN_EPROTO, "the Kubernetes API's reply to %s %s is larger than %zu",
                        method, path, KUBE_REPLY_MAX);
    return fawn_err(cr == CURLE_OPERATION_TIMEDOUT ? FAWN_ETIMEDOUT : FAWN_EIO,
                    "Kubernetes API %s %s: %s", method, path, curl_easy_strerror(cr));
}

/* Re-raises the current error as code with context in front of it. */
static int err_wrap(int code, const char *context) {
    char why[512];
    snprintf(why, sizeof why, "%s", fawn_errmsg());
    return fawn_err(code, "%s: %s", context, why);
}

/* "reason: message" of a failed reply, for errors. */
static int api_err(int code, const kube_reply *rep, const char *what) {
    char reason[64], message[256];
    if (kube_status_parse(reason, message, rep->body.data ? rep->body.data : "", rep->body.len) < 0)
        snprintf(message, sizeof message, "(no Status)");
    return fawn_err(code, "Kubernetes API %s answered %ld %s: %s", what, rep->status, reason,
                    message);
}

static void pod_name(char out[KUBE_POD_NAME_MAX + 1], const char *sandbox_id) {
    snprintf(out, KUBE_POD_NAME_MAX + 1, "fawn-%s", sandbox_id);
}

static void pod_path(char *out, size_t n, const kube_provider *kp, const char *kind,
                     const char *name) {
    snprintf(out, n, "/api/v1/namespaces/%s/%s%s%s", kp->cfg.namespace_, kind, name ? "/" : "",
             name ? name : "");
}

/* ---- the pod as the API tells it ---- */

enum pod_seen { POD_PRESENT, POD_ABSENT, POD_UNKNOWN };

/* GETs sandbox_id's pod: POD_PRESENT with *pod, POD_ABSENT only for the
 * API's NotFound of that name, POD_UNKNOWN otherwise (the error set). */
static enum pod_seen pod_get(kube_pod *pod, const kube_provider *kp, const char *sandbox_id) {
    *pod = (kube_pod){.phase = KUBE_PHASE_UNKNOWN};
    char name[KUBE_POD_NAME_MAX + 1], path[KUBE_PATH_MAX];
    pod_name(name, sandbox_id);
    pod_path(path, sizeof path, kp, "pods", name);
    kube_reply rep;
    if (kube_request(&rep, kp, "GET", path, NULL, (int)kp->cfg.request_timeout_ms) < 0)
        return POD_UNKNOWN;
    enum pod_seen seen = POD_UNKNOWN;
    if (rep.status == 404 && kube_status_not_found(rep.body.data, rep.body.len, "pods", name))
        seen = POD_ABSENT;
    else if (rep.status != 200)
        api_err(FAWN_EIO, &rep, "GET pod");
    else if (kube_pod_parse(pod, rep.body.data, rep.body.len) == 0 && strcmp(pod->name, name) == 0)
        seen = POD_PRESENT;
    else
        fawn_err(FAWN_EPROTO, "the Kubernetes API answered another pod than %s", name);
    reply_free(&rep);
    return seen;
}

static enum sbx_presence presence_of(const kube_pod *pod) {
    if (pod->terminating)
        return SBX_TERMINATING;
    switch (pod->phase) {
    case KUBE_PHASE_PENDING: return SBX_PENDING;
    case KUBE_PHASE_RUNNING: return SBX_RUNNING;
    case KUBE_PHASE_SUCCEEDED:
    case KUBE_PHASE_FAILED: return SBX_STOPPED;
    default: return SBX_UNKNOWN;
    }
}

static int kube_probe(void *ctx, enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                      const char *sandbox_id) {
    *state = SBX_UNKNOWN;
    generation[0] = '\0';
    if (!placement_hex_valid(sandbox_id, 16))
        return fawn_err(FAWN_EINVAL, "invalid sandbox id");
    kube_pod pod;
    enum pod_seen seen = pod_get(&pod, ctx, sandbox_id);
    if (seen == POD_ABSENT)
        *state = SBX_ABSENT;
    else if (seen == POD_UNKNOWN)
        log_warn("sandbox", "sandbox %s: presence unknown: %s", sandbox_id, fawn_errmsg());
    else if ((*state = presence_of(&pod)) != SBX_UNKNOWN &&
             box_attest_generation(generation, pod.uid) < 0)
        *state = SBX_UNKNOWN;
    return 0;
}

/* ---- waiting ---- */

static int backoff(int *delay, int64_t deadline, const sbx_cancel *cancel) {
    int r = placement_pause(*delay, deadline, cancel);
    *delay = *delay * 2 > KUBE_BACKOFF_MAX_MS ? KUBE_BACKOFF_MAX_MS : *delay * 2;
    return r;
}

static void endpoint_of(sbx_box *box, const kube_pod *pod) {
    bool v6 = strchr(pod->pod_ip, ':') != NULL;
    snprintf(box->endpoint, sizeof box->endpoint, KUBE_ENDPOINT_PREFIX "%s%s%s:%u", v6 ? "[" : "",
             pod->pod_ip, v6 ? "]" : "", pod->box_port);
}

/* Waits until the pod of uid runs with an IP and its box port; fills
 * box->endpoint. A pod that ended, or was replaced, fails the start. */
static int pod_await_running(sbx_box *box, const kube_provider *kp, const char *uid,
                             int64_t deadline, const sbx_cancel *cancel) {
    for (int delay = PLACEMENT_SLICE_MS;;) {
        kube_pod pod;
        enum pod_seen seen = pod_get(&pod, kp, box->sandbox_id);
        if (seen == POD_ABSENT || (seen == POD_PRESENT && strcmp(pod.uid, uid) != 0))
            return fawn_err(FAWN_EIO, "the sandbox's pod went away while starting");
        if (seen == POD_PRESENT && (pod.terminating || pod.phase == KUBE_PHASE_FAILED ||
                                    pod.phase == KUBE_PHASE_SUCCEEDED))
            return fawn_err(FAWN_EIO, "the sandbox's pod ended while starting");
        if (seen == POD_PRESENT && pod.phase == KUBE_PHASE_RUNNING && pod.pod_ip[0] &&
            pod.box_port) {
            endpoint_of(box, &pod);
            return 0;
        }
        if (fawn_now_ms() >= deadline)
            return fawn_err(FAWN_ETIMEDOUT, "the sandbox's pod was not running within %u ms",
                            kp->cfg.start_timeout_ms);
        int r = backoff(&delay, deadline, cancel);
        if (r < 0)
            return r;
    }
}

/* The generation box's box answers with (see remote.c's box_identity):
 * FAWN_EIO while not ready, FAWN_EPROTO for a broken answer. */
static int box_identity(char generation[SBX_GENERATION_LEN + 1], const sbx_box *box,
                        int timeout_ms) {
    generation[0] = '\0';
    const char *host_port = box->endpoint + strlen(KUBE_ENDPOINT_PREFIX);
    json_t *reply = NULL;
    int status = 0;
    int r = box_call_tcp(&reply, &status, host_port, box->token, "GET", "/v1/sandbox", NULL,
                         timeout_ms);
    r = placement_box_answer(generation, r, status, reply);
    json_decref(reply);
    return r;
}

/* Waits until the box answers as box->generation. */
static int box_await(const sbx_box *box, int64_t deadline, const sbx_cancel *cancel) {
    for (int delay = PLACEMENT_SLICE_MS;;) {
        int64_t left = deadline - fawn_now_ms();
        if (left <= 0)
            return fawn_err(FAWN_ETIMEDOUT, "the sandbox's box did not answer in time");
        char gen[SBX_GENERATION_LEN + 1];
        int r = box_identity(gen, box,
                             left < KUBE_BOX_ATTEMPT_MS ? (int)left : KUBE_BOX_ATTEMPT_MS);
        if (r == 0 && strcmp(gen, box->generation) == 0)
            return 0;
        if (r < 0 && r != FAWN_ENOENT && r != FAWN_EIO && r != FAWN_ETIMEDOUT)
            return r;
        if ((r = backoff(&delay, deadline, cancel)) < 0)
            return r;
    }
}

/* ---- the Secret ---- */

static json_t *secret_manifest(const kube_provider *kp, const kube_pod *pod, const char *user) {
    uint8_t secret[BOX_ATTEST_KEY_BYTES];
    char secret_hex[2 * BOX_ATTEST_KEY_BYTES + 1], token[65];
    if (box_attest_pod_secret(secret, kp->key, pod->sandbox_id, user, pod->uid) < 0 ||
        box_attest_pod_token(token, kp->key, pod->sandbox_id, user, pod->uid) < 0)
        return NULL;
    box_attest_hex(secret_hex, secret, sizeof secret);
    json_t *m = json_pack(
        "{s:s, s:s, s:{s:s, s:s, s:{s:s, s:s}, s:[{s:s, s:s, s:s, s:s}]}, s:s, s:{s:s, s:s}}",
        "apiVersion", "v1", "kind", "Secret", "metadata", "name", pod->name, "namespace",
        kp->cfg.namespace_, "labels", KUBE_LABEL_MANAGED, "fawn", KUBE_LABEL_SANDBOX,
        pod->sandbox_id, "ownerReferences", "apiVersion", "v1", "kind", "Pod", "name", pod->name,
        "uid", pod->uid, "type", "Opaque", "stringData", "token", token, "attest", secret_hex);
    sodium_memzero(secret, sizeof secret);
    sodium_memzero(secret_hex, sizeof secret_hex);
    sodium_memzero(token, sizeof token);
    return m;
}

/* DELETEs the pod's Secret: 0 when it is gone (or never was). */
static int secret_delete(const kube_provider *kp, const char *name) {
    char path[KUBE_PATH_MAX];
    pod_path(path, sizeof path, kp, "secrets", name);
    kube_reply rep;
    int r = kube_request(&rep, kp, "DELETE", path, NULL, (int)kp->cfg.request_timeout_ms);
    if (r == 0 && rep.status != 200 && rep.status != 202 &&
        !(rep.status == 404 && kube_status_not_found(rep.body.data, rep.body.len, "secrets", name)))
        r = api_err(FAWN_EIO, &rep, "DELETE secret");
    reply_free(&rep);
    return r;
}

/* Makes the pod's Secret (replacing one left from an earlier pod). */
static int secret_create(const kube_provider *kp, const kube_pod *pod, const char *user) {
    json_t *m = secret_manifest(kp, pod, user);
    if (!m)
        return fawn_err(FAWN_EINVAL, "cannot derive the pod's secrets");
    char path[KUBE_PATH_MAX];
    pod_path(path, sizeof path, kp, "secrets", NULL);
    int r = 0;
    for (int attempt = 0; r == 0 && attempt < 2; attempt++) {
        kube_reply rep;
        r = kube_request(&rep, kp, "POST", path, m, (int)kp->cfg.request_timeout_ms);
        long status = rep.status;
        if (r == 0 && status != 201 && status != 200 && status != 409)
            r = api_err(FAWN_EIO, &rep, "POST secret");
        reply_free(&rep);
        if (r == 0 && status != 409)
            break;
        if (r == 0 && (attempt == 1 || (r = secret_delete(kp, pod->name)) < 0))
            r = r < 0 ? r : fawn_err(FAWN_EIO, "the pod's secret could not be replaced");
    }
    json_decref(m);
    return r;
}

/* ---- capabilities ---- */

typedef struct caps_probe_ctx {
    const kube_provider *kp;
    const char *sandbox_id, *user, *thread;
} caps_probe_ctx;

/* The API reachable (GET /version) and this pod spec admitted (a
 * server-side dry-run create). A 4xx to the dry-run other than 409 is a
 * confirmed "no" (forbidden, invalid, refused by admission); no answer,
 * 5xx or a malformed one is unknown. */
static int caps_probe(void *ctx, bool *supported, char detail[CAPS_DETAIL_MAX], int timeout_ms) {
    const caps_probe_ctx *pc = ctx;
    const kube_provider *kp = pc->kp;
    int64_t deadline = fawn_now_ms() + timeout_ms;
    char version[64], path[KUBE_PATH_MAX];
    kube_reply rep;
    int r = kube_request(&rep, kp, "GET", "/version", NULL, timeout_ms);
    if (r == 0 && rep.status != 200)
        r = api_err(rep.status >= 500 ? FAWN_EIO : FAWN_EPROTO, &rep, "GET /version");
    if (r == 0)
        r = kube_version_parse(version, rep.body.data, rep.body.len);
    reply_free(&rep);
    if (r < 0)
        return r;
    json_t *pod = kube_pod_manifest(&kp->cfg, pc->sandbox_id, pc->user, pc->thread);
    pod_path(path, sizeof path, kp, "pods", NULL);
    strcat(path, "?dryRun=All");
    int left = (int)(deadline - fawn_now_ms());
    r = pod ? kube_request(&rep, kp, "POST", path, pod, left > 0 ? left : 1)
            : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(pod);
    if (r < 0)
        return r;
    char reason[64] = "", message[256] = "";
    if (kube_status_parse(reason, message, rep.body.data, rep.body.len) < 0)
        snprintf(reason, sizeof reason, "(no Status)");
    *supported = rep.status == 200 || rep.status == 201 || rep.status == 409;
    if (*supported)
        snprintf(detail, CAPS_DETAIL_MAX, "API %s admits the box pod", version);
    else if (rep.status >= 400 && rep.status < 500 && rep.status != 408 && rep.status != 429)
        snprintf(detail, CAPS_DETAIL_MAX, "API %s refuses the box pod (%ld %s: %.150s)", version,
                 rep.status, reason, message);
    else
        r = api_err(FAWN_EIO, &rep, "dry-run POST pod");
    reply_free(&rep);
    return r;
}

/* The provisioner's identity: the API server and a hash of the credentials
 * and of what the probe checks (namespace, image, runtime class). */
static void caps_identity(char out[CAPS_IDENTITY_MAX], const kube_provider *kp) {
    _cleanup_free_ char *token = NULL;
    fbuf b = {0};
    (void)token_get(&token, kp);
    if (fbuf_printf(&b, "%s\n%s\n%s\n%s\n%s", token ? token : "", kp->cfg.namespace_, kp->cfg.image,
                    kp->cfg.runtime_class ? kp->cfg.runtime_class : "",
                    kp->cfg.ca_file ? kp->cfg.ca_file : "") < 0)
        fbuf_free(&b);
    char hash[65];
    fawn_sha256_hex(hash, b.data ? b.data : "", b.len);
    if (b.data)
        sodium_memzero(b.data, b.len);
    if (token)
        sodium_memzero(token, strlen(token));
    fbuf_free(&b);
    snprintf(out, CAPS_IDENTITY_MAX, "%.400s#%.32s", kp->cfg.server, hash);
}

static int caps_check(const kube_provider *kp, const char *sandbox_id, const char *user,
                      const char *thread) {
    char identity[CAPS_IDENTITY_MAX], detail[CAPS_DETAIL_MAX];
    caps_identity(identity, kp);
    caps_probe_ctx pc = {.kp = kp, .sandbox_id = sandbox_id, .user = user, .thread = thread};
    bool yes = false, probed = false;
    int r = caps_cache_get(kp->caps, &yes, detail, &probed, identity, caps_probe, &pc);
    if (probed)
        log_info("sandbox", "kubernetes capabilities probed: %s", r < 0 ? "unknown" : detail);
    if (r < 0)
        return fawn_err(FAWN_EIO, "the Kubernetes cluster's capabilities are unknown: %s", detail);
    if (!yes)
        return fawn_err(FAWN_EUNSUP, "the Kubernetes cluster cannot run sandboxes: %s", detail);
    return 0;
}

/* ---- the operations ---- */

static int pod_delete(const kube_provider *kp, const char *name, const char *uid) {
    char path[KUBE_PATH_MAX];
    pod_path(path, sizeof path, kp, "pods", name);
    json_t *opts = json_pack("{s:s, s:s, s:I, s:{s:s}}", "apiVersion", "v1", "kind",
                             "DeleteOptions", "gracePeriodSeconds", (json_int_t)5, "preconditions",
                             "uid", uid);
    kube_reply rep;
    int r = opts ? kube_request(&rep, kp, "DELETE", path, opts, (int)kp->cfg.request_timeout_ms)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(opts);
    if (r < 0)
        return r;
    /* 409: the precondition failed, another generation is there; 404: gone. */
    if (rep.status != 200 && rep.status != 202 && rep.status != 409 &&
        !(rep.status == 404 && kube_status_not_found(rep.body.data, rep.body.len, "pods", name)))
        r = api_err(FAWN_EIO, &rep, "DELETE pod");
    reply_free(&rep);
    return r;
}

/* Whether generation (any when "") is gone, given the pod seen. */
static bool gone(enum pod_seen seen, const kube_pod *pod, const char *generation) {
    char gen[SBX_GENERATION_LEN + 1] = "";
    if (seen == POD_ABSENT)
        return true;
    return seen == POD_PRESENT && generation[0] && box_attest_generation(gen, pod->uid) == 0 &&
           strcmp(gen, generation) != 0;
}

static int kube_destroy(void *ctx, const char *sandbox_id, const char *generation) {
    const kube_provider *kp = ctx;
    if (!placement_hex_valid(sandbox_id, 16) ||
        (generation[0] && !placement_hex_valid(generation, SBX_GENERATION_LEN)))
        return fawn_err(FAWN_EINVAL, "invalid sandbox id or generation");
    char name[KUBE_POD_NAME_MAX + 1];
    pod_name(name, sandbox_id);
    int64_t deadline = fawn_now_ms() + kp->cfg.delete_timeout_ms;
    bool asked = false;
    for (int delay = PLACEMENT_SLICE_MS;;) {
        kube_pod pod;
        enum pod_seen seen = pod_get(&pod, kp, sandbox_id);
        if (gone(seen, &pod, generation))
            return seen == POD_ABSENT ? secret_delete(kp, name) : 0;
        if (seen == POD_PRESENT && !asked) {
            int r = pod_delete(kp, name, pod.uid);
            if (r < 0)
                return r;
            asked = true;
            log_info("sandbox", "sandbox %s: pod %s deleted, awaiting confirmation", sandbox_id,
                     pod.uid);
        }
        if (fawn_now_ms() >= deadline)
            return fawn_err(FAWN_ETIMEDOUT,
                            "the sandbox's pod was not confirmed gone within %u ms%s%s",
                            kp->cfg.delete_timeout_ms, seen == POD_UNKNOWN ? ": " : "",
                            seen == POD_UNKNOWN ? fawn_errmsg() : "");
        (void)backoff(&delay, deadline, NULL);
    }
}

/* POSTs sandbox's pod, or finds the one there: *pod the pod to start. A pod
 * of another sandbox under the name, or one terminating, fails. */
static int pod_ensure(kube_pod *pod, const kube_provider *kp, const char *sandbox_id,
                      const char *user, const char *thread) {
    enum pod_seen seen = pod_get(pod, kp, sandbox_id);
    if (seen == POD_ABSENT) {
        char path[KUBE_PATH_MAX];
        pod_path(path, sizeof path, kp, "pods", NULL);
        json_t *m = kube_pod_manifest(&kp->cfg, sandbox_id, user, thread);
        kube_reply rep;
        int r = m ? kube_request(&rep, kp, "POST", path, m, (int)kp->cfg.request_timeout_ms)
                  : fawn_err(FAWN_ENOMEM, "out of memory");
        json_decref(m);
        if (r < 0)
            return r;
        if (rep.status == 201 || rep.status == 200)
            r = kube_pod_parse(pod, rep.body.data, rep.body.len);
        else if (rep.status != 409)
            r = api_err(rep.status >= 400 && rep.status < 500 ? FAWN_EUNSUP : FAWN_EIO, &rep,
                        "POST pod");
        reply_free(&rep);
        if (r < 0 || rep.status == 201 || rep.status == 200)
            return r;
        seen = pod_get(pod, kp, sandbox_id); /* 409: made meanwhile */
    }
    if (seen == POD_ABSENT)
        return fawn_err(FAWN_EIO, "the sandbox's pod vanished");
    if (seen == POD_UNKNOWN)
        return err_wrap(FAWN_EIO, "the sandbox's pod is in an unknown state");
    if (strcmp(pod->sandbox_id, sandbox_id) != 0)
        return fawn_err(FAWN_EPROTO, "the pod %s is not labelled as sandbox %s", pod->name,
                        sandbox_id);
    if (pod->terminating)
        return fawn_err(FAWN_EBUSY, "the sandbox's previous pod is still terminating");
    return 0;
}

/* After a failed start: removes the pod it made, keeping the error r. */
static int create_undo(const kube_provider *kp, const sbx_box *box, int r) {
    char why[512];
    snprintf(why, sizeof why, "%s", fawn_errmsg());
    if (box->generation[0] && kube_destroy((void *)kp, box->sandbox_id, box->generation) < 0)
        log_warn("sandbox", "sandbox %s: removing a failed start: %s", box->sandbox_id,
                 fawn_errmsg());
    return fawn_err(r, "%s", why);
}

static int kube_create(void *ctx, sbx_box *out, const char *user, const char *thread,
                       const sbx_cancel *cancel) {
    *out = (sbx_box){0};
    kube_provider *kp = ctx;
    sbx_box box = {0};
    kube_pod pod;
    int r = paths_sandbox_id(box.sandbox_id, user, thread);
    if (r == 0 && placement_cancelled(cancel))
        r = placement_cancelled_err();
    if (r == 0)
        r = caps_check(kp, box.sandbox_id, user, thread);
    if (r == 0 && (r = pod_ensure(&pod, kp, box.sandbox_id, user, thread)) == FAWN_EUNSUP) {
        char identity[CAPS_IDENTITY_MAX];
        caps_identity(identity, kp); /* the cached "yes" was wrong */
        caps_cache_invalidate(kp->caps, identity);
    }
    if (r < 0)
        return r;
    int64_t deadline = fawn_now_ms() + kp->cfg.start_timeout_ms;
    r = box_attest_generation(box.generation, pod.uid);
    if (r == 0)
        r = box_attest_pod_token(box.token, kp->key, box.sandbox_id, user, pod.uid);
    if (r == 0)
        r = secret_create(kp, &pod, user);
    if (r == 0)
        r = pod_await_running(&box, kp, pod.uid, deadline, cancel);
    if (r == 0)
        r = box_await(&box, deadline, cancel);
    if (r < 0)
        return create_undo(kp, &box, r);
    *out = box;
    return 0;
}

static int kube_health(void *ctx, const sbx_box *box) {
    const kube_provider *kp = ctx;
    char gen[SBX_GENERATION_LEN + 1];
    if (strncmp(box->endpoint, KUBE_ENDPOINT_PREFIX, strlen(KUBE_ENDPOINT_PREFIX)) != 0)
        return fawn_err(FAWN_EINVAL, "not a Kubernetes sandbox endpoint");
    int r = box_identity(gen, box, (int)kp->cfg.request_timeout_ms);
    if (r < 0)
        return r;
    return strcmp(gen, box->generation) == 0
               ? 0
               : fawn_err(FAWN_ENOENT, "another generation of the sandbox answers");
}

typedef struct list_walk {
    int (*each)(void *each_ctx, const char *sandbox_id, const char *generation);
    void *each_ctx;
} list_walk;

static int list_one(void *ctx, const kube_pod *pod) {
    const list_walk *w = ctx;
    char gen[SBX_GENERATION_LEN + 1];
    if (!pod->sandbox_id[0] || box_attest_generation(gen, pod->uid) < 0)
        return 0; /* not one of ours: the label selector says it is, its label does not */
    return w->each(w->each_ctx, pod->sandbox_id, gen);
}

static int kube_list(void *ctx,
                     int (*each)(void *each_ctx, const char *sandbox_id, const char *generation),
                     void *each_ctx) {
    const kube_provider *kp = ctx;
    list_walk w = {.each = each, .each_ctx = each_ctx};
    char next[KUBE_CONTINUE_MAX + 1] = "", base[256], path[KUBE_PATH_MAX];
    pod_path(base, sizeof base, kp, "pods", NULL);
    for (int page = 0; page < KUBE_LIST_PAGES_MAX; page++) {
        char *cont = next[0] ? curl_easy_escape(NULL, next, 0) : NULL;
        int n = snprintf(path, sizeof path, "%s?labelSelector=%s%%3Dfawn&limit=%d%s%s", base,
                         "app.kubernetes.io%2Fmanaged-by", KUBE_LIST_PAGE, cont ? "&continue=" : "",
                         cont ? cont : "");
        curl_free(cont);
        if (n < 0 || (size_t)n >= sizeof path)
            return fawn_err(FAWN_EPROTO, "the pod listing's continue token is too long");
        kube_reply rep;
        int r = kube_request(&rep, kp, "GET", path, NULL, (int)kp->cfg.request_timeout_ms);
        if (r == 0 && rep.status != 200)
            r = api_err(FAWN_EIO, &rep, "GET pods");
        if (r == 0)
            r = kube_pod_list_parse(next, rep.body.data, rep.body.len, list_one, &w);
        reply_free(&rep);
        if (r < 0 || !next[0])
            return r;
    }
    return fawn_err(FAWN_EPROTO, "the pod listing has more than %d pages", KUBE_LIST_PAGES_MAX);
}

static int kube_call(void *ctx, json_t **reply, int *status, const sbx_box *box, const char *method,
                     const char *path, const json_t *body, int timeout_ms) {
    *reply = NULL;
    *status = 0;
    if (strncmp(box->endpoint, KUBE_ENDPOINT_PREFIX, strlen(KUBE_ENDPOINT_PREFIX)) != 0)
        return fawn_err(FAWN_EINVAL, "not a Kubernetes sandbox endpoint");
    int r = box_call_tcp(reply, status, box->endpoint + strlen(KUBE_ENDPOINT_PREFIX), box->token,
                         method, path, body, timeout_ms);
    return r == FAWN_ENOENT ? fawn_err(FAWN_EIO, "the sandbox is unreachable") : r;
}

static int kube_call_file(void *ctx, json_t **reply, int *status, const sbx_box *box,
                          const char *method, const char *path, int file_fd, uint64_t size,
                          int timeout_ms) {
    *reply = NULL;
    *status = 0;
    if (strncmp(box->endpoint, KUBE_ENDPOINT_PREFIX, strlen(KUBE_ENDPOINT_PREFIX)) != 0)
        return fawn_err(FAWN_EINVAL, "not a Kubernetes sandbox endpoint");
    int r = box_call_file_tcp(reply, status, box->endpoint + strlen(KUBE_ENDPOINT_PREFIX),
                              box->token, method, path, file_fd, size, timeout_ms);
    return r == FAWN_ENOENT ? fawn_err(FAWN_EIO, "the sandbox is unreachable") : r;
}

/* ---- attestation ---- */

enum sbx_attestation kube_attest_judge(int status, const json_t *reply, const char *expected) {
    static const char *const keys[] = {"proof", "sandbox_id", "pod_uid", NULL};
    if (status == 404)
        return SBX_REFUSED; /* it has no attestation: not a pod this gateway made */
    if (status != 200 || !json_is_object(reply) || fjson_check_keys(reply, keys) < 0)
        return SBX_ATTEST_UNKNOWN;
    const char *proof = json_string_value(json_object_get(reply, "proof"));
    if (!proof || strlen(proof) != BOX_ATTEST_PROOF_HEX ||
        !placement_hex_valid(proof, BOX_ATTEST_PROOF_HEX))
        return SBX_ATTEST_UNKNOWN;
    return box_attest_proof_equal(proof, expected) ? SBX_ATTESTED : SBX_REFUSED;
}

/* The UUID a generation was made from (dashes put back). */
static void uid_of(char out[37], const char *generation) {
    snprintf(out, 37, "%.8s-%.4s-%.4s-%.4s-%.12s", generation, generation + 8, generation + 12,
             generation + 16, generation + 20);
}

static int kube_attest(void *ctx, enum sbx_attestation *out, const sbx_box *box, const char *user) {
    *out = SBX_ATTEST_UNKNOWN;
    const kube_provider *kp = ctx;
    if (!placement_hex_valid(box->generation, SBX_GENERATION_LEN))
        return fawn_err(FAWN_EINVAL, "invalid generation");
    box_attest expect = {0};
    char nonce[BOX_ATTEST_NONCE_HEX + 1], proof[BOX_ATTEST_PROOF_HEX + 1];
    snprintf(expect.sandbox_id, sizeof expect.sandbox_id, "%s", box->sandbox_id);
    snprintf(expect.user, sizeof expect.user, "%s", user);
    uid_of(expect.pod_uid, box->generation);
    fawn_random_hex(nonce, BOX_ATTEST_NONCE_HEX / 2);
    int r = box_attest_pod_secret(expect.secret, kp->key, expect.sandbox_id, user, expect.pod_uid);
    if (r == 0)
        r = box_attest_proof(proof, &expect, nonce);
    sodium_memzero(expect.secret, sizeof expect.secret);
    json_t *body = json_pack("{s:s}", "nonce", nonce), *reply = NULL;
    int status = 0;
    if (r == 0)
        r = kube_call(ctx, &reply, &status, box, "POST", "/v1/attest", body,
                      (int)kp->cfg.request_timeout_ms);
    if (r == 0)
        *out = kube_attest_judge(status, reply, proof);
    log_info("sandbox", "sandbox %s pod %s attestation: %s", box->sandbox_id, expect.pod_uid,
             *out == SBX_ATTESTED  ? "attested"
             : *out == SBX_REFUSED ? "refused"
                                   : "unknown");
    json_decref(body);
    json_decref(reply);
    return r;
}

/* ---- broker callers ---- */

/* Whether two numeric addresses are the same (IPv4 or IPv6, any spelling). */
static bool address_equal(const char *a, const char *b) {
    uint8_t x[16], y[16];
    if (!a || !b)
        return false;
    if (inet_pton(AF_INET, a, x) == 1)
        return inet_pton(AF_INET, b, y) == 1 && memcmp(x, y, 4) == 0;
    return inet_pton(AF_INET6, a, x) == 1 && inet_pton(AF_INET6, b, y) == 1 &&
           memcmp(x, y, 16) == 0;
}

enum sbx_attestation kube_caller_judge(const uint8_t key[BOX_ATTEST_KEY_BYTES],
                                       const sbx_remote_caller *c, const char *pod_uid,
                                       const char *pod_ip) {
    box_attest expect = {0};
    char mac[BOX_ATTEST_PROOF_HEX + 1] = "";
    snprintf(expect.sandbox_id, sizeof expect.sandbox_id, "%s", c->sandbox_id);
    snprintf(expect.user, sizeof expect.user, "%s", c->user);
    if (placement_hex_valid(c->generation, SBX_GENERATION_LEN))
        uid_of(expect.pod_uid, c->generation);
    bool mac_ok = box_attest_pod_secret(expect.secret, key, expect.sandbox_id, c->user,
                                        expect.pod_uid) == 0 &&
                  box_attest_call_mac(mac, &expect, c->timestamp, c->nonce, c->request_sha256) ==
                      0 &&
                  box_attest_proof_equal(c->mac, mac);
    sodium_memzero(&expect.secret, sizeof expect.secret);
    sodium_memzero(mac, sizeof mac);
    bool from_pod = expect.pod_uid[0] && pod_uid && strcmp(pod_uid, expect.pod_uid) == 0 &&
                    address_equal(pod_ip, c->address);
    if (mac_ok && from_pod)
        return SBX_ATTESTED;
    return mac_ok || from_pod ? SBX_REFUSED : SBX_ATTEST_UNKNOWN;
}

/* The API's record of the caller's sandbox's pod (a GET now: its UID and
 * IP as they are), then kube_caller_judge. No answer from the API is
 * unknown. */
static int kube_attest_remote(void *ctx, enum sbx_attestation *out, const sbx_remote_caller *c) {
    *out = SBX_ATTEST_UNKNOWN;
    const kube_provider *kp = ctx;
    if (!placement_hex_valid(c->sandbox_id, 16))
        return fawn_err(FAWN_EINVAL, "invalid sandbox id");
    kube_pod pod;
    enum pod_seen seen = pod_get(&pod, kp, c->sandbox_id);
    if (seen == POD_UNKNOWN)
        return err_wrap(FAWN_EIO, "the sandbox's pod could not be looked up");
    bool present = seen == POD_PRESENT;
    const char *pod_ip = present ? pod.pod_ip : "";
    *out = kube_caller_judge(kp->key, c, present ? pod.uid : NULL, present ? pod_ip : NULL);
    /* Which check failed, for the operator: a source address rewritten on
     * the way (masquerading) refuses every call of a pod. */
    const char *why = *out == SBX_ATTESTED                ? ""
                      : !present                          ? " (the API has no such pod)"
                      : address_equal(pod_ip, c->address) ? " (a wrong proof from its pod)"
                                                          : " (not from the pod's IP)";
    log_info("sandbox", "sandbox %s broker caller at %s: %s%s; the pod's IP is %s", c->sandbox_id,
             c->address,
             *out == SBX_ATTESTED  ? "attested"
             : *out == SBX_REFUSED ? "refused"
                                   : "not its pod",
             why, pod_ip[0] ? pod_ip : "-");
    return 0;
}

/* ---- the provider ---- */

/* Reads the gateway's attestation key, making it (0600, random) when the
 * file does not exist. */
static int key_load(uint8_t key[BOX_ATTEST_KEY_BYTES], const char *path) {
    char hex[2 * BOX_ATTEST_KEY_BYTES + 1];
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0 && errno == ENOENT) {
        /* Written whole under another name, then linked in: a gateway
         * starting at the same moment reads either no key or all of it. */
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
        int w = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
        fawn_random_hex(hex, BOX_ATTEST_KEY_BYTES);
        int r = w < 0 || fawn_write_all(w, hex, strlen(hex)) < 0 || fsync(w) < 0 ? -1 : 0;
        if (w >= 0)
            close(w);
        if (r == 0 && link(tmp, path) < 0 && errno != EEXIST)
            r = -1;
        unlink(tmp);
        if (r < 0)
            return fawn_err(FAWN_ECONFIG, "cannot make the attestation key %s", path);
        fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    }
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0)
        return fawn_err(FAWN_ECONFIG, "cannot read the attestation key %s", path);
    if (st.st_mode & 077)
        return fawn_err(FAWN_ECONFIG, "the attestation key %s must not be readable by others",
                        path);
    ssize_t n = read(fd, hex, sizeof hex - 1);
    hex[n > 0 ? n : 0] = '\0';
    hex[strcspn(hex, "\r\n")] = '\0';
    int r = box_attest_unhex(key, BOX_ATTEST_KEY_BYTES, hex);
    sodium_memzero(hex, sizeof hex);
    return r < 0 ? fawn_err(FAWN_ECONFIG, "%s must hold %d hex digits", path,
                            2 * BOX_ATTEST_KEY_BYTES)
                 : 0;
}

static char *dup_or_null(const char *s, bool *ok) {
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *ok = false;
    return d;
}

static int config_copy(kube_provider_config *out, const kube_provider_config *in) {
    bool ok = true;
    *out = *in;
    out->server = dup_or_null(in->server, &ok);
    out->ca_file = dup_or_null(in->ca_file, &ok);
    out->ca_pem = dup_or_null(in->ca_pem, &ok);
    out->token_file = dup_or_null(in->token_file, &ok);
    out->token = dup_or_null(in->token, &ok);
    out->namespace_ = dup_or_null(in->namespace_, &ok);
    out->image = dup_or_null(in->image, &ok);
    out->runtime_class = dup_or_null(in->runtime_class, &ok);
    out->attest_key_file = dup_or_null(in->attest_key_file, &ok);
    out->broker_address = dup_or_null(in->broker_address, &ok);
    out->broker_clis = dup_or_null(in->broker_clis, &ok);
    return ok ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int kube_provider_new(sbx_provider **out, const kube_provider_config *cfg) {
    *out = NULL;
    if (!cfg->server || !cfg->namespace_ || !cfg->image || !cfg->attest_key_file ||
        !cfg->box_port || !cfg->request_timeout_ms || !cfg->start_timeout_ms ||
        !cfg->delete_timeout_ms)
        return fawn_err(FAWN_EINVAL, "incomplete Kubernetes provider configuration");
    kube_provider *kp = calloc(1, sizeof *kp);
    if (!kp)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    caps_cache_config cc = {.positive_ttl_ms = cfg->caps_positive_ttl_ms,
                            .negative_ttl_ms = cfg->caps_negative_ttl_ms,
                            .probe_timeout_ms = (int)cfg->probe_timeout_ms};
    int r = config_copy(&kp->cfg, cfg);
    if (r == 0)
        r = key_load(kp->key, cfg->attest_key_file);
    if (r == 0)
        r = caps_cache_new(&kp->caps, &cc);
    if (r < 0) {
        kube_provider_free(&kp->base);
        return r;
    }
    kp->base = (sbx_provider){.name = "kubernetes",
                              .ctx = kp,
                              .create = kube_create,
                              .probe = kube_probe,
                              .health = kube_health,
                              .destroy = kube_destroy,
                              .list = kube_list,
                              .call = kube_call,
                              .call_file = kube_call_file,
                              .attest = kube_attest,
                              .attest_remote = cfg->broker_clis ? kube_attest_remote : NULL};
    *out = &kp->base;
    return 0;
}

void kube_provider_free(sbx_provider *p) {
    if (!p)
        return;
    kube_provider *kp = (kube_provider *)p; /* base is the first member */
    caps_cache_free(kp->caps);
    kube_config_free(&kp->cfg);
    sodium_memzero(kp->key, sizeof kp->key);
    free(kp);
}
