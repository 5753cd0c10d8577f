/* libFuzzer target for the DingTalk Stream frame reader (dt_frame_parse).
 * Besides memory errors, it checks that
 * - only 0, FAWN_EINVAL and FAWN_E2BIG are returned, and nothing is kept
 *   on failure;
 * - an accepted frame has a type, a headers object, a data string, and
 *   ids within their bounds. */
#include <stdint.h>
#include <string.h>

#include "channels/dingtalk_internal.h"
#include "fuzz_support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dt_frame f;
    int r = dt_frame_parse(&f, (const char *)data, size);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_E2BIG);
    if (r < 0) {
        check(f.headers == NULL && f.data == NULL);
        return 0;
    }
    check(f.type[0] && json_is_object(f.headers) && f.data);
    check(strlen(f.message_id) <= CH_ID_MAX && strlen(f.topic) < sizeof f.topic);
    dt_frame_clear(&f);
    return 0;
}
