/* libFuzzer target for what the container provider reads from its engine
 * (src/sandbox/container_engine.c): an inspect, a create and a listing
 * reply. Input: the first byte picks the HTTP status the body came with
 * (200, 201, 404, 500 or another); the rest is the body, read as each
 * reply's. Besides memory errors and undefined behaviour, it checks that
 * - only FAWN_EPROTO refuses, and a refusal leaves an unknown state with no
 *   generation, no container id, and the list callback uncalled;
 * - SBX_ABSENT comes only with status 404;
 * - what is accepted is what container.h promises: a known state with a
 *   generation of 32 lowercase hex digits, an id of 64, sandbox ids of 16;
 * - list calls back once per entry, and a callback's code stops it. */
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "sandbox/container.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536
/* What list's callback returns to stop the walk. */
#define STOP_CODE (-77)
#define SANDBOX_ID "0123456789abcdef"

static bool hex(const char *s, size_t len) {
    return strlen(s) == len && strspn(s, "0123456789abcdef") == len;
}

static void check_inspect(long status, const char *body, size_t len) {
    enum sbx_presence state;
    char gen[SBX_GENERATION_LEN + 1];
    memset(gen, 'x', sizeof gen);
    int r = container_inspect_classify(&state, gen, status, body, len, SANDBOX_ID);
    if (r < 0) {
        check(r == FAWN_EPROTO && state == SBX_UNKNOWN && gen[0] == '\0');
        return;
    }
    check(r == 0);
    if (state == SBX_ABSENT) {
        check(status == 404 && gen[0] == '\0');
        return;
    }
    check(status == 200 && state != SBX_UNKNOWN && hex(gen, SBX_GENERATION_LEN));
}

static void check_create(long status, const char *body, size_t len) {
    char id[65];
    memset(id, 'x', sizeof id);
    int r = container_create_parse(id, status, body, len);
    check(r == 0 ? status == 201 && hex(id, 64) : r == FAWN_EPROTO && id[0] == '\0');
}

typedef struct walk {
    int calls, stop_at;
} walk;

static int each(void *ctx, const char *sandbox_id, const char *generation) {
    walk *w = ctx;
    check(hex(sandbox_id, 16));
    check(!generation[0] || hex(generation, SBX_GENERATION_LEN));
    return ++w->calls == w->stop_at ? STOP_CODE : 0;
}

static void check_list(long status, const char *body, size_t len) {
    walk w = {0};
    int r = container_list_parse(status, body, len, each, &w);
    if (r < 0) {
        check(r == FAWN_EPROTO && w.calls == 0);
        return;
    }
    check(status == 200 && w.calls <= CONTAINER_LIST_MAX);
    if (w.calls > 0) { /* again, stopped at the last entry */
        walk stop = {.stop_at = w.calls};
        check(container_list_parse(status, body, len, each, &stop) == STOP_CODE);
        check(stop.calls == w.calls);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    static const long statuses[] = {200, 201, 404, 500, 409};
    if (size < 1 || size > FUZZ_INPUT_MAX)
        return 0;
    long status = statuses[data[0] % 5];
    size_t len = size - 1;
    char *body = malloc(len + 1);
    check(body != NULL);
    memcpy(body, data + 1, len);
    body[len] = '\0';
    check_inspect(status, body, len);
    check_create(status, body, len);
    check_list(status, body, len);
    free(body);
    return 0;
}
