/* libFuzzer target for a scheduled task's schedule, client input: a cron
 * expression (sched_cron_parse, sched_cron_normalize) and a once time
 * (sched_time_parse). Input: the text (not NUL-terminated). Besides
 * memory errors and undefined behaviour, it checks that
 * - an expression is parsed (0) or refused (FAWN_EINVAL), a refusal
 *   leaving an empty set;
 * - one that parses normalizes to an expression that parses to the same
 *   sets;
 * - its next run, in UTC and in a zone with DST, is found or refused
 *   within the bounded search, and is later than the time it follows;
 * - a once time parses or is refused, nothing else. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "schedule/schedule.h"
#include "fuzz_support.h"

/* 2026-03-08T06:30:00Z: half an hour before New York springs forward. */
#define AFTER 1772951400

static sched_zone *new_york;

static void next_check(const sched_cron *c, const sched_zone *z) {
    int64_t t;
    int r = sched_cron_next(&t, c, z, AFTER);
    check(r == 0 || r == FAWN_EINVAL);
    check(r < 0 || t > AFTER);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!new_york)
        check(sched_zone_load(&new_york, "America/New_York") == 0);
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    sched_cron c;
    int r = sched_cron_parse(&c, text);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0)
        check(c.minutes == 0 && c.hours == 0 && c.days == 0 && c.months == 0);
    char norm[SCHED_CRON_MAX + 1];
    if (r == 0 && sched_cron_normalize(norm, sizeof norm, text) == 0) {
        sched_cron again;
        check(sched_cron_parse(&again, norm) == 0);
        check(memcmp(&again, &c, sizeof c) == 0);
    }
    if (r == 0 && size < 64) { /* the search is bounded, but slow inputs waste the fuzzer's time */
        sched_zone *utc;
        check(sched_zone_load(&utc, "UTC") == 0);
        next_check(&c, utc);
        next_check(&c, new_york);
        sched_zone_free(utc);
    }
    int64_t at;
    r = sched_time_parse(&at, text, new_york);
    check(r == 0 || r == FAWN_EINVAL);
    free(text);
    return 0;
}
