/* libFuzzer target for what the Kubernetes provider reads from the API
 * server (src/sandbox/kube_api.c): a Pod, a PodList, a Status and /version.
 * Input: a reply body, read as each. Besides memory errors and undefined
 * behaviour, it checks that
 * - only FAWN_EPROTO refuses, and a refused pod leaves the out-parameter
 *   empty, a refused list calls back for nothing and has no continue token;
 * - what a pod reader accepts is what kube_api.h promises: a name that
 *   fits, a lowercase UUID, a sandbox label of 16 hex digits or none, a
 *   phase in range, an IP that parses, a box port 0..65535;
 * - a list calls back once per item (every one checked first), and a
 *   callback's code stops it;
 * - absence is only ever the NotFound Status naming the pod asked about. */
#include <arpa/inet.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "sandbox/kube_api.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536
#define STOP_CODE (-77)
#define NAME "fawn-0123456789abcdef"

static bool hex(const char *s, size_t len) {
    return strlen(s) == len && strspn(s, "0123456789abcdef") == len;
}

static void check_pod_fields(const kube_pod *p) {
    check(p->name[0] && strnlen(p->name, sizeof p->name) < sizeof p->name);
    check(strlen(p->uid) == 36 && strspn(p->uid, "0123456789abcdef-") == 36);
    check(!p->sandbox_id[0] || hex(p->sandbox_id, 16));
    check(p->phase <= KUBE_PHASE_UNKNOWN);
    unsigned char addr[16];
    check(!p->pod_ip[0] || inet_pton(AF_INET, p->pod_ip, addr) == 1 ||
          inet_pton(AF_INET6, p->pod_ip, addr) == 1);
}

static void check_pod(const char *text, size_t size) {
    kube_pod p;
    int r = kube_pod_parse(&p, text, size);
    if (r < 0) {
        check(r == FAWN_EPROTO && !p.name[0] && !p.uid[0] && !p.pod_ip[0] && !p.box_port);
        return;
    }
    check(r == 0);
    check_pod_fields(&p);
}

typedef struct walk {
    size_t calls, stop_at;
} walk;

static int on_pod(void *ctx, const kube_pod *p) {
    walk *w = ctx;
    check_pod_fields(p);
    return ++w->calls == w->stop_at ? STOP_CODE : 0;
}

static void check_list(const char *text, size_t size) {
    char next[KUBE_CONTINUE_MAX + 1];
    walk w = {0};
    int r = kube_pod_list_parse(next, text, size, on_pod, &w);
    if (r < 0) {
        check(r == FAWN_EPROTO && w.calls == 0 && !next[0]);
        return;
    }
    check(strlen(next) <= KUBE_CONTINUE_MAX);
    if (w.calls == 0)
        return;
    size_t n = w.calls;
    w = (walk){.stop_at = n / 2 + 1};
    check(kube_pod_list_parse(next, text, size, on_pod, &w) == STOP_CODE && w.calls == n / 2 + 1);
}

static void check_status(const char *text, size_t size) {
    char reason[64], message[256], version[64];
    int r = kube_status_parse(reason, message, text, size);
    check(r == 0 || (r == FAWN_EPROTO && !reason[0] && !message[0]));
    r = kube_version_parse(version, text, size);
    check(r == 0 ? version[0] == 'v' : (r == FAWN_EPROTO && !version[0]));
    if (kube_status_not_found(text, size, "pods", NAME))
        check(strstr(text, NAME) != NULL && !kube_status_not_found(text, size, "pods", "other") &&
              !kube_status_not_found(text, size, "secrets", NAME));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    check_pod(text, size);
    check_list(text, size);
    check_status(text, size);
    free(text);
    return 0;
}
