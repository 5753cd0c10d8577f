/* schedule: when a scheduled task runs. Pure computation over untrusted
 * text (a client's cron expression, time zone name and run_at time) and
 * the host's time zone database; no global state, no clock of its own:
 * every function takes "now" from its caller, so tests run on a fake clock.
 *
 * Rules, each with the function that enforces it:
 * - A cron expression is five fields (minute hour day-of-month month
 *   day-of-week) of `*`, values, ranges a-b, steps "*" or a-b followed by /n, and
 *   lists of those; months JAN-DEC and days SUN-SAT by name; 7 is Sunday
 *   too. Day-of-month and day-of-week are combined as Vixie cron does: when
 *   either field starts with `*`, both must match; otherwise either one
 *   does (sched_cron_parse, sched_cron_matches_day).
 * - A time zone is an IANA name of the allow-list pattern
 *   `[A-Za-z][A-Za-z0-9_+-]*` segments joined by '/' (no "..", no absolute
 *   path, at most SCHED_ZONE_NAME_MAX bytes), read from its TZif file under
 *   SCHED_ZONEINFO_DIR by a bounded parser (sched_zone_load,
 *   sched_zone_parse); "UTC" and "Etc/UTC" need no file. Zones are
 *   immutable once loaded: any number of threads may use one. The
 *   process's TZ and localtime are never used.
 * - Local times the clock skips (spring forward) run once, at the instant
 *   the clock jumps, as Vixie cron runs jobs of the skipped interval
 *   "immediately" after the change; local times the clock repeats (fall
 *   back) run once, at their first occurrence (sched_zone_utc_of).
 * - The search for the next occurrence is bounded (SCHED_SEARCH_DAYS): an
 *   expression that never matches (Feb 30) is an error, not a loop
 *   (sched_cron_next).
 * - A `once` task runs at an absolute time at least
 *   SCHED_ONCE_MIN_DELAY_MS after it is created or changed
 *   (sched_next, with now).
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_SCHEDULE_H
#define FAWN_SCHEDULE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* Longest cron expression accepted: five fields of lists fit in far less;
 * it bounds the parser's work. */
#define SCHED_CRON_MAX 256
/* Longest zone name: the longest IANA name is 32 bytes. */
#define SCHED_ZONE_NAME_MAX 64
/* Longest run_at text: "2026-01-31T23:59:59.999999+14:00" is 32 bytes. */
#define SCHED_RUN_AT_MAX 48
/* Largest TZif file read: the largest in tzdata (fat, with 64-bit data
 * and a century of transitions) is under 4 KiB. */
#define SCHED_TZIF_MAX (64 * 1024)
/* Transitions and local time types one zone holds at most: tzdata's
 * largest zone has a few hundred transitions and a dozen types. */
#define SCHED_TRANSITIONS_MAX 4096
#define SCHED_TYPES_MAX 256
/* Days searched for the next occurrence: a Feb 29 (with any day of the
 * week) recurs within 8 years (2096 to 2104 skips 2100); 9 years of days
 * bound the search of any expression that matches at all. */
#define SCHED_SEARCH_DAYS (9 * 366)
/* A once task's time must be at least this far ahead (DeerFlow's
 * min_once_delay_seconds, 60). */
#define SCHED_ONCE_MIN_DELAY_MS 60000
/* Where the host's time zone files are (Debian's tzdata). */
#define SCHED_ZONEINFO_DIR "/usr/share/zoneinfo"

/* A parsed cron expression: the set of values each field allows. */
typedef struct sched_cron {
    uint64_t minutes; /* bit m: minute m (0-59) */
    uint32_t hours;   /* bit h: hour h (0-23) */
    uint32_t days;    /* bit d: day of month d (1-31) */
    uint16_t months;  /* bit m: month m (1-12) */
    uint8_t weekdays; /* bit d: day of week d (0 = Sunday … 6) */
    bool day_star;    /* the day-of-month field starts with '*' */
    bool weekday_star;
} sched_cron;

/* Parses expr (five fields separated by spaces or tabs). FAWN_EINVAL
 * naming the field and what is wrong ("cron hour: 24 is out of range
 * 0-23"). */
FAWN_MUST_CHECK int sched_cron_parse(sched_cron *out, const char *expr);

/* Writes expr's fields joined by single spaces into out (size bytes), as
 * a task keeps it. FAWN_EINVAL as sched_cron_parse. */
FAWN_MUST_CHECK int sched_cron_normalize(char *out, size_t size, const char *expr);

/* Whether the local date (year, month 1-12, day 1-31, weekday 0-6)
 * matches the expression's date fields (the Vixie rule above). */
bool sched_cron_matches_day(const sched_cron *c, int month, int day, int weekday);

typedef struct sched_zone sched_zone;

/* Whether name has the allow-list shape of a zone name (above). */
bool sched_zone_name_ok(const char *name);

/* Loads zone name from SCHED_ZONEINFO_DIR (UTC built in). FAWN_EINVAL
 * "unknown timezone: NAME" for a name of another shape, a missing file,
 * one that is not a TZif file or is malformed. Caller frees with
 * sched_zone_free. */
FAWN_MUST_CHECK int sched_zone_load(sched_zone **out, const char *name);

/* Parses the TZif data[0..len) (RFC 8536, versions 1 to 4, its footer's
 * POSIX TZ rule included). FAWN_EINVAL naming what is malformed; zones
 * with leap second records are refused. */
FAWN_MUST_CHECK int sched_zone_parse(sched_zone **out, const unsigned char *data, size_t len);

void sched_zone_free(sched_zone *z);

/* The zone's offset from UTC, in seconds, at UTC time t (seconds since
 * the epoch). */
int32_t sched_zone_offset(const sched_zone *z, int64_t t);

/* The UTC time of local wall-clock time local (seconds since the epoch as
 * if the wall clock were UTC): the first of two when the clock repeats
 * it, the instant the clock jumps when it skips it. */
int64_t sched_zone_utc_of(const sched_zone *z, int64_t local);

/* The first time (UTC seconds) after `after` at which c fires in zone z.
 * FAWN_EINVAL "the cron schedule never runs" when none is found within
 * SCHED_SEARCH_DAYS. */
FAWN_MUST_CHECK int sched_cron_next(int64_t *out, const sched_cron *c, const sched_zone *z,
                                    int64_t after);

/* Parses an ISO 8601 time "YYYY-MM-DDTHH:MM[:SS[.frac]]" with an optional
 * "Z" or "±HH:MM" (a space may stand for the T); without an offset it is
 * wall-clock time in zone z. *out: UTC milliseconds. FAWN_EINVAL naming
 * what is wrong. */
FAWN_MUST_CHECK int sched_time_parse(int64_t *out, const char *text, const sched_zone *z);

/* The schedule kinds. */
#define SCHED_KIND_ONCE "once"
#define SCHED_KIND_CRON "cron"

/* The next run (UTC milliseconds) of a schedule strictly after after_ms:
 * kind "once" with spec its run_at text, or "cron" with spec its
 * expression, in zone `zone`. *next_ms is 0 when there is none (a once
 * time already past). FAWN_EINVAL naming the bad part (kind, timezone,
 * cron field, run_at). */
FAWN_MUST_CHECK int sched_next(int64_t *next_ms, const char *kind, const char *spec,
                               const char *zone, int64_t after_ms);

/* Checks a schedule a client gives at now_ms: what sched_next checks,
 * and that it runs at least once; a once time must be at least
 * SCHED_ONCE_MIN_DELAY_MS ahead. *next_ms: its first run. */
FAWN_MUST_CHECK int sched_validate(int64_t *next_ms, const char *kind, const char *spec,
                                   const char *zone, int64_t now_ms);

#endif
