/* The Kubernetes provider (sandbox.provider: kubernetes): one Pod per
 * sandbox, made through the Kubernetes REST API, running `fawn box
 * --listen` (docs/box-api.md) and reached at the pod's IP. docs/kubernetes.md
 * has the manifests an operator applies and what each setting does.
 *
 * Rules (each enforced by the function named):
 * - Presence is exact: only the API's own NotFound Status for that pod's
 *   name is SBX_ABSENT (kube_status_not_found); a timeout, a 5xx, a reply
 *   that does not parse or a 404 of anything else is SBX_UNKNOWN, which the
 *   manager fences (kube_probe, kube_destroy).
 * - A destroy is confirmed: DELETE (only the generation named, through a
 *   UID precondition), then GET until the API says the pod does not exist
 *   (kube_destroy; FAWN_ETIMEDOUT while it lingers).
 * - A pod's generation is its UID (32 hex digits without dashes); its box
 *   reports the same one, so an answer from another pod at a reused IP is
 *   never taken for it (kube_health).
 * - Every pod has a Secret of its own, made once the pod's UID is known:
 *   the box's bearer token and the pod's attestation secret, both derived
 *   from the gateway's key and bound to (sandbox, user, pod UID)
 *   (box/attest.h). Nothing secret is stored by the gateway but its key.
 * - Attestation before use: a fresh nonce per challenge, the proof
 *   recomputed here and compared in constant time; attested, refused or
 *   unknown (kube_attest), and the manager fences the last two.
 * - Capabilities (the API reachable and this pod spec admitted, by a
 *   server-side dry-run create) are probed through the capability cache
 *   (caps_cache.h) before each create, per API server and credentials; an
 *   unknown answer fails the create, a negative one refuses it, and a
 *   create the API rejects drops the cached answer.
 * - Pods are hardened: non-root, no capabilities, no privilege escalation,
 *   read-only root, seccomp RuntimeDefault, no service account token, no
 *   service links; resources from sandbox.limits (kube_pod_manifest).
 * - Credential broker calls (with broker.clis): the pod's box relays its
 *   commands' calls to broker_address with a MAC of the pod's secret over
 *   the request (box_attest_call_mac); a call counts only when that MAC is
 *   right for the sandbox, user and pod UID the gateway's records hold and
 *   it came from the pod's IP as the API reports it (kube_caller_judge).
 * - Traffic goes only where the configuration says: the API server named
 *   (https, or http to a loopback address only) and pod IPs the API gives. */
#ifndef FAWN_SANDBOX_KUBERNETES_H
#define FAWN_SANDBOX_KUBERNETES_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "box/attest.h"
#include "config/config.h"
#include "sandbox/manager.h"
#include "base/base.h"

/* In-cluster credentials, where Kubernetes mounts a pod's service account. */
#define KUBE_SA_DIR "/var/run/secrets/kubernetes.io/serviceaccount"
/* Where a box pod finds its Secret (token and attestation secret). */
#define KUBE_SECRET_MOUNT "/var/run/fawn"
/* The uid and gid the box runs as in its pod (not root). */
#define KUBE_BOX_UID 65532

typedef struct kube_provider_config {
    char *server;                /* "https://host[:port]" (or "http://" to a loopback address) */
    char *ca_file;               /* PEM file trusted for the server, or NULL */
    char *ca_pem;                /* PEM bytes trusted for the server (kubeconfig data), or NULL */
    char *token_file;            /* bearer token, read for each request (tokens rotate), or NULL */
    char *token;                 /* bearer token given inline (kubeconfig), or NULL */
    char *namespace_;            /* where pods and secrets are made */
    char *image;                 /* the box image (its entry point runs fawn) */
    char *runtime_class;         /* spec.runtimeClassName, or NULL */
    char *attest_key_file;       /* the gateway's attestation key (created when missing) */
    uint16_t box_port;           /* the port the box listens on in its pod */
    uint32_t request_timeout_ms; /* one API request */
    uint32_t start_timeout_ms;   /* a pod running and its box answering */
    uint32_t delete_timeout_ms;  /* a deleted pod confirmed gone */
    uint32_t probe_timeout_ms;   /* a capability probe; also its callers' longest wait */
    int64_t caps_positive_ttl_ms, caps_negative_ttl_ms;
    uint32_t idle_exit_s;                /* the box's --idle-exit (sandbox.idle_timeout_s) */
    uint64_t memory_mb, disk_mb, tmp_mb; /* from sandbox.limits */
    uint32_t cpu_millis;                 /* limits.cpu in millicores; 0 = none */
    char *broker_address; /* "HOST:PORT" pods dial for the credential broker, or NULL */
    char *broker_clis;    /* the broker's CLI names joined by ",", or NULL: no broker */
} kube_provider_config;

/* sandbox.kubernetes of cfg → *out (FAWN_ECONFIG naming the key; see
 * docs/kubernetes.md for the keys). Credentials: server with token_file
 * (and ca_file), or kubeconfig (current context: server, CA, bearer
 * token), or, with neither, the pod's own service account
 * (KUBERNETES_SERVICE_HOST/PORT and KUBE_SA_DIR). Free with
 * kube_config_free. */
FAWN_MUST_CHECK int kube_config_from(kube_provider_config *out, const fawn_config *cfg);
void kube_config_free(kube_provider_config *c);

/* Parses a kubeconfig (YAML or JSON, len bytes) into c's server, ca_pem
 * (or ca_file) and token (or token_file) from its current context; for
 * tests and kube_config_from. FAWN_ECONFIG naming what is missing. */
FAWN_MUST_CHECK int kube_kubeconfig_parse(kube_provider_config *c, const char *text, size_t len);

/* A provider over cfg (copied). FAWN_ECONFIG when the attestation key
 * cannot be read or made. Free with kube_provider_free. */
FAWN_MUST_CHECK int kube_provider_new(sbx_provider **out, const kube_provider_config *cfg);
void kube_provider_free(sbx_provider *p);

/* The Pod made for (sandbox_id, user, thread) (a new reference), or NULL
 * when out of memory; exposed for tests. */
json_t *kube_pod_manifest(const kube_provider_config *cfg, const char *sandbox_id, const char *user,
                          const char *thread);

/* How an attestation answer reads: SBX_ATTESTED when the box answered 200
 * with a proof equal (constant time) to expected; SBX_REFUSED when it
 * answered 200 with another proof, or 404 (it has no attestation); else
 * SBX_ATTEST_UNKNOWN. reply may be NULL. Exposed for tests. */
enum sbx_attestation kube_attest_judge(int status, const json_t *reply, const char *expected);

/* Whether caller (a broker call, see sbx_remote_caller) is the pod of its
 * sandbox: its MAC recomputed from key for the record's sandbox, user and
 * pod UID (from caller->generation) and compared in constant time, and
 * pod_uid and pod_ip (the API's record of the sandbox's pod; NULL when
 * there is none) equal to that UID and to the caller's address.
 * SBX_ATTESTED when both hold; SBX_REFUSED when one does (the pod sent a
 * wrong proof, or its proof came from elsewhere); SBX_ATTEST_UNKNOWN when
 * neither (a stranger: nothing ties the call to the sandbox). Exposed for
 * tests. */
enum sbx_attestation kube_caller_judge(const uint8_t key[BOX_ATTEST_KEY_BYTES],
                                       const sbx_remote_caller *caller, const char *pod_uid,
                                       const char *pod_ip);

#endif
