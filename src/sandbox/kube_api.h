/* Readers of the Kubernetes API's replies (the shapes the API reference
 * documents for core/v1 Pod, PodList and Status, and for /version), as the
 * Kubernetes provider uses them. Every body is untrusted bytes (len bytes,
 * not terminated), bounded by KUBE_REPLY_MAX before it gets here; a reader
 * refuses what it cannot vouch for with FAWN_EPROTO, and the provider
 * treats that as an unknown answer, never as "absent".
 *
 * Every out-parameter is set on every path (zeroed first). */
#ifndef FAWN_SANDBOX_KUBE_API_H
#define FAWN_SANDBOX_KUBE_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Largest reply read from the API server: a page of KUBE_LIST_PAGE pods of
 * a few KiB each, with room to spare. */
#define KUBE_REPLY_MAX ((size_t)16 << 20)
/* Pods asked for per page of a listing. */
#define KUBE_LIST_PAGE 250
/* A pod's name: "fawn-" and the sandbox id. */
#define KUBE_POD_NAME_MAX 63
/* The labels the provider puts on what it creates. */
#define KUBE_LABEL_MANAGED "app.kubernetes.io/managed-by"
#define KUBE_LABEL_SANDBOX "fawn.dev/sandbox-id"
/* The container that runs the box, and the port it names. */
#define KUBE_BOX_CONTAINER "box"
/* A continue token of a paged listing (opaque; bounded). */
#define KUBE_CONTINUE_MAX 1024

enum kube_phase {
    KUBE_PHASE_PENDING,
    KUBE_PHASE_RUNNING,
    KUBE_PHASE_SUCCEEDED,
    KUBE_PHASE_FAILED,
    KUBE_PHASE_UNKNOWN,
};

/* What the provider reads of a Pod. */
typedef struct kube_pod {
    char name[KUBE_POD_NAME_MAX + 1];
    char uid[37];        /* a lowercase UUID */
    char sandbox_id[17]; /* its KUBE_LABEL_SANDBOX label, "" when it has none */
    enum kube_phase phase;
    bool terminating;  /* metadata.deletionTimestamp is set */
    char pod_ip[46];   /* status.podIP, "" until assigned */
    uint16_t box_port; /* the box container's port named "box", 0 when none */
} kube_pod;

/* A Pod object. FAWN_EPROTO for anything but a Pod with a name, a UUID uid
 * and known types in the fields read. */
FAWN_MUST_CHECK int kube_pod_parse(kube_pod *out, const char *body, size_t len);

/* A PodList: every item is checked before each is called for any;
 * each's non-zero return stops the walk and is returned. next gets the
 * continue token ("" when this is the last page). */
FAWN_MUST_CHECK int kube_pod_list_parse(char next[KUBE_CONTINUE_MAX + 1], const char *body,
                                        size_t len,
                                        int (*each)(void *each_ctx, const kube_pod *pod),
                                        void *each_ctx);

/* True only for the API's answer that the named object does not exist: a
 * Status with code 404, reason NotFound, and details naming exactly
 * `name` of `kind` ("pods", "secrets"). A 404 from anything else (a proxy,
 * a wrong path, another name) is not absence. */
bool kube_status_not_found(const char *body, size_t len, const char *kind, const char *name);

/* A Status object's reason and message (each "" when absent). FAWN_EPROTO
 * when body is not a Status. */
FAWN_MUST_CHECK int kube_status_parse(char reason[64], char message[256], const char *body,
                                      size_t len);

/* /version's gitVersion ("v1.30.2"). FAWN_EPROTO when missing or not of
 * the form v<major>.<minor>[...]. */
FAWN_MUST_CHECK int kube_version_parse(char git_version[64], const char *body, size_t len);

#endif
