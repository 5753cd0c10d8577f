/* What the placing providers share (placement.h). */
#include "sandbox/placement.h"

#include <poll.h>
#include <stdatomic.h>
#include <string.h>

#include "base/base.h"

bool placement_cancelled(const sbx_cancel *cancel) {
    return cancel && atomic_load(&cancel->cancelled);
}

int placement_cancelled_err(void) {
    return fawn_err(FAWN_ECANCELED, "the sandbox start was cancelled");
}

bool placement_hex_valid(const char *s, size_t len) {
    return strlen(s) == len && strspn(s, "0123456789abcdef") == len;
}

int placement_pause(int ms, int64_t deadline, const sbx_cancel *cancel) {
    int64_t until = fawn_now_ms() + ms;
    if (until > deadline)
        until = deadline;
    for (int64_t now = fawn_now_ms(); now < until; now = fawn_now_ms()) {
        if (placement_cancelled(cancel))
            return placement_cancelled_err();
        int64_t left = until - now;
        poll(NULL, 0, left < PLACEMENT_SLICE_MS ? (int)left : PLACEMENT_SLICE_MS);
    }
    return placement_cancelled(cancel) ? placement_cancelled_err() : 0;
}

int placement_box_answer(char generation[SBX_GENERATION_LEN + 1], int r, int status,
                         const json_t *reply) {
    if (generation)
        generation[0] = '\0';
    if (r < 0)
        return r;
    const char *gen = json_string_value(json_object_get(reply, "generation"));
    if (status == 401)
        return fawn_err(FAWN_EPROTO, "the box refused the sandbox's token");
    if (status != 200)
        return fawn_err(FAWN_EIO, "the box answered %d", status);
    if (!json_is_true(json_object_get(reply, "ready")))
        return fawn_err(FAWN_EIO, "the box is not ready");
    if (!generation)
        return 0;
    if (!gen || !placement_hex_valid(gen, SBX_GENERATION_LEN))
        return fawn_err(FAWN_EPROTO, "the box did not tell its generation");
    memcpy(generation, gen, SBX_GENERATION_LEN + 1);
    return 0;
}
