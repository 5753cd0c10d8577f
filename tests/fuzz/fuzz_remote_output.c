/* libFuzzer target for what the remote provider reads from its control
 * plane (src/sandbox/remote.c): the JSON object a create, status or list
 * command printed, and the box endpoint a create named (client_tcp.c).
 * Input: a command's output; it is read as each command's, and (up to its
 * first NUL) as an endpoint's HOST:PORT. Besides memory errors and
 * undefined behaviour, it checks that
 * - only FAWN_EPROTO (FAWN_EINVAL for an endpoint) refuses, and a refusal
 *   leaves status's state unknown with no generation, list's callback
 *   uncalled and the endpoint zeroed;
 * - what is accepted is what remote.h promises: a "tcp:" endpoint that
 *   fits, a token that box_tcp_token_valid accepts, generations of 32
 *   lowercase hex digits (or none: always for absent, never for running),
 *   sandbox ids of 16;
 * - list calls back once per entry, and a callback's code stops it;
 * - a parsed endpoint, written back as text, parses to the same address. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "sandbox/client.h"
#include "sandbox/remote.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536
/* What list's callback returns to stop the walk. */
#define STOP_CODE (-77)
#define SANDBOX_ID "0123456789abcdef"

static bool hex(const char *s, size_t len) {
    return strlen(s) == len && strspn(s, "0123456789abcdef") == len;
}

static void check_create(const json_t *o) {
    sbx_box box = {.sandbox_id = SANDBOX_ID};
    int r = remote_create_parse(&box, o);
    check(strcmp(box.sandbox_id, SANDBOX_ID) == 0);
    if (r < 0) {
        check(r == FAWN_EPROTO);
        return;
    }
    check(r == 0 && strncmp(box.endpoint, "tcp:", 4) == 0 && box.endpoint[4]);
    check(strnlen(box.endpoint, sizeof box.endpoint) < sizeof box.endpoint);
    check(box_tcp_token_valid(box.token));
    check(!box.generation[0] || hex(box.generation, SBX_GENERATION_LEN));
}

static void check_status(const json_t *o) {
    enum sbx_presence state;
    char generation[SBX_GENERATION_LEN + 1];
    int r = remote_status_parse(&state, generation, o);
    if (r < 0) {
        check(r == FAWN_EPROTO && state == SBX_UNKNOWN && !generation[0]);
        return;
    }
    check(r == 0 && state < SBX_UNKNOWN);
    check(!generation[0] || hex(generation, SBX_GENERATION_LEN));
    check(state != SBX_RUNNING || generation[0]);
    check(state != SBX_ABSENT || !generation[0]);
}

typedef struct walk {
    size_t calls, stop_at;
} walk;

static int on_entry(void *ctx, const char *sandbox_id, const char *generation) {
    walk *w = ctx;
    check(hex(sandbox_id, 16));
    check(!generation[0] || hex(generation, SBX_GENERATION_LEN));
    return ++w->calls == w->stop_at ? STOP_CODE : 0;
}

static void check_list(const json_t *o) {
    walk w = {0};
    int r = remote_list_parse(o, on_entry, &w);
    if (r < 0) {
        check(r == FAWN_EPROTO && w.calls == 0);
        return;
    }
    size_t n = json_array_size(json_object_get(o, "sandboxes"));
    check(r == 0 && w.calls == n);
    if (n == 0)
        return;
    w = (walk){.stop_at = n / 2 + 1};
    check(remote_list_parse(o, on_entry, &w) == STOP_CODE && w.calls == n / 2 + 1);
}

/* host_port written back from a parsed address. */
static void endpoint_text(char out[80], const struct sockaddr_storage *addr) {
    char host[INET6_ADDRSTRLEN];
    if (addr->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        check(inet_ntop(AF_INET, &a->sin_addr, host, sizeof host) != NULL);
        snprintf(out, 80, "%s:%u", host, ntohs(a->sin_port));
    } else {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        check(inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof host) != NULL);
        snprintf(out, 80, "[%s]:%u", host, ntohs(a->sin6_port));
    }
}

static void check_endpoint(const char *host_port) {
    struct sockaddr_storage addr, again;
    socklen_t len, len2;
    int r = box_tcp_endpoint_parse(&addr, &len, host_port);
    if (r < 0) {
        static const struct sockaddr_storage zero;
        check(r == FAWN_EINVAL && len == 0 && memcmp(&addr, &zero, sizeof zero) == 0);
        return;
    }
    bool v4 = addr.ss_family == AF_INET;
    check(r == 0 && (v4 || addr.ss_family == AF_INET6));
    check(len == (v4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)));
    check(((const struct sockaddr_in *)&addr)->sin_port != 0);
    char text[80];
    endpoint_text(text, &addr);
    check(box_tcp_endpoint_parse(&again, &len2, text) == 0);
    check(len2 == len && memcmp(&addr, &again, len) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    check_endpoint(text);
    json_error_t jerr;
    json_t *o = json_loadb(text, size, JSON_REJECT_DUPLICATES, &jerr);
    if (json_is_object(o)) {
        check_create(o);
        check_status(o);
        check_list(o);
        const char *endpoint = json_string_value(json_object_get(o, "endpoint"));
        if (endpoint && strncmp(endpoint, "tcp:", 4) == 0)
            check_endpoint(endpoint + 4);
    }
    json_decref(o);
    free(text);
    return 0;
}
