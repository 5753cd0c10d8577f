/* libFuzzer target for the TZif reader (sched_zone_parse): the host's
 * zone files are trusted more than a client, but the reader is bounded
 * as if they were not. Input: a TZif file. Besides memory errors and
 * undefined behaviour, it checks that
 * - a file is read (0) or refused (FAWN_EINVAL), a refusal handing out
 *   nothing;
 * - a zone read gives offsets within a day and a half of UTC at any
 *   time, and maps every local time back to a UTC time whose offset
 *   puts it within a few hours of that local time. */
#include <stdint.h>
#include <stdlib.h>

#include "schedule/schedule.h"
#include "fuzz_support.h"

/* Offsets TZif allows (RFC 8536: -89999 to 93599 seconds), and two DST
 * jumps of them between the two readings of a skipped time. */
#define OFFSET_MAX 93600
/* Local times mapped back: within the zone functions' range (year 9999). */
#define SCHED_FUZZ_LOCAL_MAX 253402300800LL

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    sched_zone *z = (sched_zone *)1;
    int r = sched_zone_parse(&z, data, size);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_ENOMEM);
    if (r < 0) {
        check(z == NULL);
        return 0;
    }
    static const int64_t times[] = {INT64_MIN,      -2208988800,  0,
                                    1772951400,     2147483648LL, 4102444800LL,
                                    253402300799LL, INT64_MAX};
    for (size_t i = 0; i < sizeof times / sizeof times[0]; i++) {
        int32_t off = sched_zone_offset(z, times[i]);
        check(off > -OFFSET_MAX && off < OFFSET_MAX);
        if (times[i] < -SCHED_FUZZ_LOCAL_MAX || times[i] > SCHED_FUZZ_LOCAL_MAX)
            continue;
        int64_t local = times[i];
        int64_t t = sched_zone_utc_of(z, local);
        check(t - local < 3 * OFFSET_MAX && local - t < 3 * OFFSET_MAX);
    }
    sched_zone_free(z);
    return 0;
}
