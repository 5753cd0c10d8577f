/* The schedule module on a fake clock: cron fields, the Vixie day rule,
 * time zones read from TZif files (checked against the C library's own
 * reading of the same files), DST both ways, Feb 29, once times, and bad
 * input of every kind. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "schedule/schedule.h"

/* UTC seconds of a calendar time. */
static int64_t utc(int y, int mo, int d, int h, int mi) {
    struct tm tm = {
        .tm_year = y - 1900, .tm_mon = mo - 1, .tm_mday = d, .tm_hour = h, .tm_min = mi};
    return (int64_t)timegm(&tm);
}

/* The next run of expr in zone after `after` (asserting it parses). */
static int64_t next_of(const char *expr, const char *zone, int64_t after) {
    sched_cron c;
    sched_zone *z;
    int64_t t;
    assert_int_equal(sched_cron_parse(&c, expr), 0);
    assert_int_equal(sched_zone_load(&z, zone), 0);
    assert_int_equal(sched_cron_next(&t, &c, z, after), 0);
    sched_zone_free(z);
    return t;
}

static void fields_lists_ranges_steps_and_names(void **state) {
    (void)state;
    sched_cron c;
    assert_int_equal(sched_cron_parse(&c, "5-10/2,30 9-17/4 * JAN-mar mon-FRI"), 0);
    assert_true(c.minutes == (1ull << 5 | 1ull << 7 | 1ull << 9 | 1ull << 30));
    assert_true(c.hours == (1u << 9 | 1u << 13 | 1u << 17));
    assert_true(c.days == 0xfffffffeu); /* 1..31 */
    assert_true(c.months == (1u << 1 | 1u << 2 | 1u << 3));
    assert_true(c.weekdays == 0x3e); /* Monday..Friday */
    assert_true(c.day_star);
    assert_false(c.weekday_star);
    assert_int_equal(sched_cron_parse(&c, "10/15 * * * 7"),
                     0); /* a/n runs to the end; 7 is Sunday */
    assert_true(c.minutes == (1ull << 10 | 1ull << 25 | 1ull << 40 | 1ull << 55));
    assert_true(c.weekdays == 1);
    assert_int_equal(sched_cron_parse(&c, "\t0  0\t1 * *  "), 0); /* spaces and tabs */
    char norm[SCHED_CRON_MAX + 1];
    assert_int_equal(sched_cron_normalize(norm, sizeof norm, "\t*/5  0\t1 * *  "), 0);
    assert_string_equal(norm, "*/5 0 1 * *");
}

static void bad_expressions_name_the_field(void **state) {
    (void)state;
    static const struct {
        const char *expr, *says;
    } bad[] = {
        {"", "5 fields"},
        {"* * * *", "5 fields"},
        {"* * * * * *", "5 fields"},
        {"60 * * * *", "minute"},
        {"* 24 * * *", "hour"},
        {"* * 0 * *", "day-of-month"},
        {"* * 32 * *", "day-of-month"},
        {"* * * 13 *", "month"},
        {"* * * 0 *", "month"},
        {"* * * * 8", "day-of-week"},
        {"*/0 * * * *", "step"},
        {"*/61 * * * *", "step"},
        {"5-1 * * * *", "backwards"},
        {"1,,2 * * * *", "minute"},
        {"1, * * * *", "minute"},
        {"JAN * * * *", "minute"},
        {"* * * FOO *", "month"},
        {"* * * * MONDAY", "day-of-week"},
        {"1-2-3 * * * *", "minute"},
        {"0x10 * * * *", "minute"},
        {"0001 * * * *", "too long"},
        {"-1 * * * *", "minute"},
        {"\x01 * * * *", "minute"},
        {"* * * * *\x7f", "day-of-week"},
        {"** * * * *", "minute"},
        {"*/ * * * *", "step"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sched_cron c;
        assert_int_equal(sched_cron_parse(&c, bad[i].expr), FAWN_EINVAL);
        if (!strstr(fawn_errmsg(), bad[i].says))
            fail_msg("%s: \"%s\" does not say %s", bad[i].expr, fawn_errmsg(), bad[i].says);
    }
    char huge[SCHED_CRON_MAX + 8];
    memset(huge, '1', sizeof huge - 1);
    huge[sizeof huge - 1] = '\0';
    sched_cron c;
    assert_int_equal(sched_cron_parse(&c, huge), FAWN_EINVAL);
}

/* When both day fields are restricted either one matches; when one
 * starts with '*' (even "*" with a step) both must. */
static void day_of_month_and_week_follow_vixie(void **state) {
    (void)state;
    int64_t feb1 = utc(2026, 2, 1, 0, 0); /* a Sunday */
    assert_true(next_of("0 0 13 * 5", "UTC", feb1) == utc(2026, 2, 6, 0, 0));
    assert_true(next_of("0 0 13 * *", "UTC", feb1) == utc(2026, 2, 13, 0, 0));
    assert_true(next_of("0 0 * * 5", "UTC", feb1) == utc(2026, 2, 6, 0, 0));
    assert_true(next_of("0 0 */13 * 5", "UTC", feb1) == utc(2026, 2, 27, 0, 0));
    assert_true(next_of("0 0 13 * */5", "UTC", feb1) == utc(2026, 2, 13, 0, 0)); /* a Friday */
    assert_true(next_of("0 0 14 * */5", "UTC", feb1) == utc(2026, 6, 14, 0, 0)); /* a Sunday */
    assert_true(next_of("0 0 13 * 1", "UTC", feb1) == utc(2026, 2, 2, 0, 0));
}

static void steps_and_strictly_after(void **state) {
    (void)state;
    int64_t t = utc(2026, 5, 4, 10, 7);
    assert_true(next_of("*/15 * * * *", "UTC", t) == utc(2026, 5, 4, 10, 15));
    assert_true(next_of("*/15 * * * *", "UTC", utc(2026, 5, 4, 10, 15)) == utc(2026, 5, 4, 10, 30));
    assert_true(next_of("* * * * *", "UTC", utc(2026, 5, 4, 10, 15) + 59) ==
                utc(2026, 5, 4, 10, 16));
    assert_true(next_of("0 0 1 1 *", "UTC", t) == utc(2027, 1, 1, 0, 0));
    assert_true(next_of("59 23 31 12 *", "UTC", t) == utc(2026, 12, 31, 23, 59));
}

static void feb_29_and_never(void **state) {
    (void)state;
    assert_true(next_of("0 12 29 2 *", "UTC", utc(2026, 1, 1, 0, 0)) == utc(2028, 2, 29, 12, 0));
    assert_true(next_of("0 12 29 2 *", "UTC", utc(2028, 2, 29, 12, 0)) == utc(2032, 2, 29, 12, 0));
    /* 2100 is no leap year: eight years apart, within the bound */
    assert_true(next_of("0 0 29 2 *", "UTC", utc(2096, 3, 1, 0, 0)) == utc(2104, 2, 29, 0, 0));
    static const char *const never[] = {"0 0 30 2 *", "0 0 31 4,6,9,11 *", "0 0 31 2 *"};
    for (size_t i = 0; i < 3; i++) {
        sched_cron c;
        sched_zone *z;
        int64_t t;
        assert_int_equal(sched_cron_parse(&c, never[i]), 0);
        assert_int_equal(sched_zone_load(&z, "Europe/Berlin"), 0);
        assert_int_equal(sched_cron_next(&t, &c, z, utc(2026, 1, 1, 0, 0)), FAWN_EINVAL);
        assert_non_null(strstr(fawn_errmsg(), "never"));
        sched_zone_free(z);
    }
    int64_t next;
    assert_int_equal(
        sched_validate(&next, "cron", "0 0 30 2 *", "UTC", utc(2026, 1, 1, 0, 0) * 1000),
        FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "schedule_spec.cron"));
}

/* Spring forward: a skipped local time runs once, when the clock jumps;
 * fall back: a repeated one runs once, the first time. */
static void dst_new_york_both_ways(void **state) {
    (void)state;
    const char *ny = "America/New_York";
    /* 2026-03-08 02:00 EST -> 03:00 EDT at 07:00 UTC */
    assert_true(next_of("30 2 * * *", ny, utc(2026, 3, 7, 12, 0)) == utc(2026, 3, 8, 7, 0));
    assert_true(next_of("30 2 * * *", ny, utc(2026, 3, 8, 7, 0)) == utc(2026, 3, 9, 6, 30));
    assert_true(next_of("0 * * * *", ny, utc(2026, 3, 8, 6, 0)) == utc(2026, 3, 8, 7, 0));
    assert_true(next_of("0 * * * *", ny, utc(2026, 3, 8, 7, 0)) == utc(2026, 3, 8, 8, 0));
    assert_true(next_of("*/15 2 * * *", ny, utc(2026, 3, 8, 7, 0)) == utc(2026, 3, 9, 6, 0));
    /* 2026-11-01 02:00 EDT -> 01:00 EST at 06:00 UTC */
    assert_true(next_of("30 1 * * *", ny, utc(2026, 10, 31, 12, 0)) == utc(2026, 11, 1, 5, 30));
    assert_true(next_of("30 1 * * *", ny, utc(2026, 11, 1, 5, 30)) == utc(2026, 11, 2, 6, 30));
    assert_true(next_of("*/30 * * * *", ny, utc(2026, 11, 1, 5, 30)) == utc(2026, 11, 1, 7, 0));
    assert_true(next_of("0 9 * * *", ny, utc(2026, 11, 1, 12, 0)) == utc(2026, 11, 1, 14, 0));
}

static void dst_berlin_both_ways(void **state) {
    (void)state;
    const char *be = "Europe/Berlin";
    /* 2026-03-29 02:00 CET -> 03:00 CEST at 01:00 UTC */
    assert_true(next_of("30 2 * * *", be, utc(2026, 3, 28, 12, 0)) == utc(2026, 3, 29, 1, 0));
    assert_true(next_of("30 2 * * *", be, utc(2026, 3, 29, 1, 0)) == utc(2026, 3, 30, 0, 30));
    /* 2026-10-25 03:00 CEST -> 02:00 CET at 01:00 UTC */
    assert_true(next_of("30 2 * * *", be, utc(2026, 10, 24, 12, 0)) == utc(2026, 10, 25, 0, 30));
    assert_true(next_of("30 2 * * *", be, utc(2026, 10, 25, 0, 30)) == utc(2026, 10, 26, 1, 30));
    /* far past the file's transitions: the footer's rule (2090) */
    assert_true(next_of("30 2 * * *", be, utc(2090, 3, 25, 12, 0)) == utc(2090, 3, 26, 1, 0));
}

/* Our reading of each zone gives the offsets the C library gives, at
 * every few days for a century and a half, around every transition. */
static void offsets_agree_with_the_c_library(void **state) {
    (void)state;
    static const char *const zones[] = {
        "America/New_York",  "Europe/Berlin",   "Australia/Sydney",  "Asia/Kolkata",
        "America/Sao_Paulo", "Pacific/Chatham", "Africa/Casablanca", "America/St_Johns"};
    for (size_t i = 0; i < sizeof zones / sizeof zones[0]; i++) {
        sched_zone *z;
        assert_int_equal(sched_zone_load(&z, zones[i]), 0);
        setenv("TZ", zones[i], 1);
        tzset();
        for (int64_t t = utc(1971, 1, 1, 0, 0); t < utc(2120, 1, 1, 0, 0); t += 3 * 86400 + 3607) {
            time_t tt = (time_t)t;
            struct tm tm;
            localtime_r(&tt, &tm);
            if (sched_zone_offset(z, t) != tm.tm_gmtoff)
                fail_msg("%s at %lld: %d, libc %ld", zones[i], (long long)t,
                         sched_zone_offset(z, t), tm.tm_gmtoff);
        }
        sched_zone_free(z);
    }
    unsetenv("TZ");
}

static void zone_names_are_an_allow_list(void **state) {
    (void)state;
    static const char *const good[] = {"UTC", "America/New_York", "Etc/GMT+5",
                                       "America/Argentina/Buenos_Aires", "Europe/Berlin"};
    static const char *const bad[] = {"",
                                      "../etc/passwd",
                                      "/etc/localtime",
                                      "America/../UTC",
                                      "America//X",
                                      "America/",
                                      ".hidden",
                                      "zone.tab",
                                      "America/New York",
                                      "5Zone",
                                      "Nowhere/Nothing",
                                      "leapseconds",
                                      "America/New_York\n"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sched_zone *z;
        assert_int_equal(sched_zone_load(&z, good[i]), 0);
        sched_zone_free(z);
    }
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sched_zone *z = (sched_zone *)1;
        assert_int_equal(sched_zone_load(&z, bad[i]), FAWN_EINVAL);
        assert_null(z);
        assert_non_null(strstr(fawn_errmsg(), "unknown timezone"));
    }
    char longname[SCHED_ZONE_NAME_MAX + 2];
    memset(longname, 'A', sizeof longname - 1);
    longname[sizeof longname - 1] = '\0';
    assert_false(sched_zone_name_ok(longname));
}

/* Every prefix of a real TZif file, and a few corruptions, are refused
 * or read without reading past the data (ASan watches). */
static void tzif_truncated_and_corrupted(void **state) {
    (void)state;
    FILE *f = fopen(SCHED_ZONEINFO_DIR "/America/New_York", "rb");
    assert_non_null(f);
    unsigned char data[SCHED_TZIF_MAX];
    size_t len = fread(data, 1, sizeof data, f);
    fclose(f);
    assert_true(len > 100);
    for (size_t n = 0; n < len; n++) {
        unsigned char *copy = malloc(n ? n : 1);
        memcpy(copy, data, n);
        sched_zone *z = NULL;
        if (sched_zone_parse(&z, copy, n) == 0) {
            (void)sched_zone_offset(z, utc(2026, 1, 1, 0, 0));
            sched_zone_free(z);
        }
        free(copy);
    }
    sched_zone *z;
    assert_int_equal(sched_zone_parse(&z, data, len), 0);
    sched_zone_free(z);
    unsigned char bad[SCHED_TZIF_MAX];
    memcpy(bad, data, len);
    bad[28] = 1; /* a leap second record in the v1 header */
    assert_int_equal(sched_zone_parse(&z, bad, len), FAWN_EINVAL);
    memcpy(bad, data, len);
    bad[36] = bad[37] = 0xff; /* typecnt huge */
    assert_int_equal(sched_zone_parse(&z, bad, len), FAWN_EINVAL);
    memcpy(bad, data, len);
    unsigned char *rule = memmem(bad, len, "M3.2.0", 6);
    assert_non_null(rule);
    rule[3] = '9'; /* the footer's rule: no week 9 */
    assert_int_equal(sched_zone_parse(&z, bad, len), FAWN_EINVAL);
}

static void once_times(void **state) {
    (void)state;
    int64_t now = utc(2026, 6, 30, 12, 0) * 1000, next;
    const char *ny = "America/New_York";
    assert_int_equal(sched_validate(&next, "once", "2026-07-01T09:00:00", ny, now), 0);
    assert_true(next == utc(2026, 7, 1, 13, 0) * 1000);
    assert_int_equal(sched_validate(&next, "once", "2026-07-01T09:00:00.250+02:00", ny, now), 0);
    assert_true(next == utc(2026, 7, 1, 7, 0) * 1000 + 250);
    assert_int_equal(sched_validate(&next, "once", "2026-07-01 09:00Z", ny, now), 0);
    assert_true(next == utc(2026, 7, 1, 9, 0) * 1000);
    /* at least a minute ahead */
    assert_int_equal(sched_validate(&next, "once", "2026-06-30T12:00:30Z", ny, now), FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "schedule_spec.run_at"));
    assert_int_equal(sched_validate(&next, "once", "2026-06-30T12:01:00Z", ny, now), 0);
    assert_int_equal(sched_validate(&next, "once", "2025-01-01T00:00:00Z", ny, now), FAWN_EINVAL);
    /* a skipped local time: when the clock jumps */
    assert_int_equal(sched_validate(&next, "once", "2027-03-14T02:30:00", ny, now), 0);
    assert_true(next == utc(2027, 3, 14, 7, 0) * 1000);
    static const char *const bad[] = {"2026-02-30T00:00:00",
                                      "tomorrow",
                                      "2026-07-01",
                                      "2026-07-01T25:00:00",
                                      "2026-07-01T09:00:00+24:00",
                                      "2026-07-01T09:00:00Zjunk",
                                      "2026-7-1T09:00:00",
                                      "12026-07-01T09:00:00",
                                      "2026-07-01T09:00:00.",
                                      "2026-07-01T09:00:00.1234567890"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(sched_validate(&next, "once", bad[i], ny, now), FAWN_EINVAL);
        assert_non_null(strstr(fawn_errmsg(), "run_at"));
    }
    assert_int_equal(sched_validate(&next, "weekly", "x", ny, now), FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "schedule_type"));
    assert_int_equal(sched_validate(&next, "cron", "* * * * *", "Mars/Olympus", now), FAWN_EINVAL);
    assert_non_null(strstr(fawn_errmsg(), "timezone"));
    assert_int_equal(sched_validate(&next, "cron", "* * * * *", "../../etc/passwd", now),
                     FAWN_EINVAL);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(fields_lists_ranges_steps_and_names),
        cmocka_unit_test(bad_expressions_name_the_field),
        cmocka_unit_test(day_of_month_and_week_follow_vixie),
        cmocka_unit_test(steps_and_strictly_after),
        cmocka_unit_test(feb_29_and_never),
        cmocka_unit_test(dst_new_york_both_ways),
        cmocka_unit_test(dst_berlin_both_ways),
        cmocka_unit_test(offsets_agree_with_the_c_library),
        cmocka_unit_test(zone_names_are_an_allow_list),
        cmocka_unit_test(tzif_truncated_and_corrupted),
        cmocka_unit_test(once_times),
    };
    return cmocka_run_group_tests_name("schedule", tests, NULL, NULL);
}
