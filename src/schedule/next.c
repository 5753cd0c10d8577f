/* The next run of a schedule (schedule.h): cron occurrences found day by
 * day in the zone's wall-clock time, within SCHED_SEARCH_DAYS; once times
 * parsed from ISO 8601 text. */
#include <stdio.h>
#include <string.h>

#include "schedule/schedule.h"
#include "schedule/schedule_internal.h"

/* Years a run_at may name: from the epoch to the last four-digit year. */
#define SCHED_YEAR_MIN 1970
#define SCHED_YEAR_MAX 9999

/* The first matching minute of day (a day number) whose local time is at
 * least from and whose UTC time is after `after`; 0 when none. */
static bool day_next(int64_t *out, const sched_cron *c, const sched_zone *z, int64_t day,
                     int64_t from, int64_t after) {
    for (int h = 0; h < 24; h++) {
        if (!(c->hours >> h & 1) || day * 86400 + h * 3600 + 3599 < from)
            continue;
        for (int m = 0; m < 60; m++) {
            int64_t local = day * 86400 + h * 3600 + m * 60;
            if (!(c->minutes >> m & 1) || local < from)
                continue;
            int64_t t = sched_zone_utc_of(z, local);
            if (t > after) {
                *out = t;
                return true;
            }
        }
    }
    return false;
}

int sched_cron_next(int64_t *out, const sched_cron *c, const sched_zone *z, int64_t after) {
    *out = 0;
    if (after < -SCHED_TIME_LIMIT / 2 || after > SCHED_TIME_LIMIT / 2)
        return fawn_err(FAWN_EINVAL, "time out of range");
    /* Local times before after's own wall-clock minute map to UTC times
     * at or before it (the first of repeated times is taken). */
    int64_t from = sched_floor_div(after + sched_zone_offset(z, after), 60) * 60;
    int64_t first_day = sched_floor_div(from, 86400);
    for (int64_t day = first_day; day < first_day + SCHED_SEARCH_DAYS; day++) {
        int64_t y;
        int m, d;
        sched_civil_from_days(day, &y, &m, &d);
        if (sched_cron_matches_day(c, m, d, sched_weekday(day)) &&
            day_next(out, c, z, day, from, after))
            return 0;
    }
    return fawn_err(FAWN_EINVAL, "the cron schedule never runs");
}

/* Exactly n digits at *p as a number. */
static bool digits(int *out, const char **p, int n) {
    int v = 0;
    for (int i = 0; i < n; i++, (*p)++) {
        if (**p < '0' || **p > '9')
            return false;
        v = v * 10 + (**p - '0');
    }
    *out = v;
    return true;
}

static bool expect(const char **p, char c) {
    if (**p != c)
        return false;
    (*p)++;
    return true;
}

/* The fraction of a second after '.', in milliseconds (1 to 9 digits). */
static bool fraction(int *ms, const char **p) {
    *ms = 0;
    int n = 0;
    for (; **p >= '0' && **p <= '9'; (*p)++, n++)
        if (n < 3)
            *ms = *ms * 10 + (**p - '0');
    for (int i = n; i < 3; i++)
        *ms *= 10;
    return n >= 1 && n <= 9;
}

/* "Z", "±HH:MM", "±HHMM" or nothing, at *p: *has says which. */
static bool offset_read(int *off, bool *has, const char **p) {
    *off = 0;
    *has = **p != '\0';
    if (!*has)
        return true;
    if (**p == 'Z' || **p == 'z')
        return (*p)++, **p == '\0';
    int sign = **p == '-' ? -1 : 1, h, m;
    if (**p != '+' && **p != '-')
        return false;
    (*p)++;
    if (!digits(&h, p, 2) || h > 23)
        return false;
    expect(p, ':');
    if (!digits(&m, p, 2) || m > 59)
        return false;
    *off = sign * (h * 3600 + m * 60);
    return **p == '\0';
}

int sched_time_parse(int64_t *out, const char *text, const sched_zone *z) {
    *out = 0;
    const char *p = text;
    int y, mo, d, h, mi, s = 0, ms = 0, off;
    bool has_off;
    bool ok = strlen(text) <= SCHED_RUN_AT_MAX && digits(&y, &p, 4) && expect(&p, '-') &&
              digits(&mo, &p, 2) && expect(&p, '-') && digits(&d, &p, 2) &&
              (expect(&p, 'T') || expect(&p, 't') || expect(&p, ' ')) && digits(&h, &p, 2) &&
              expect(&p, ':') && digits(&mi, &p, 2);
    if (ok && expect(&p, ':'))
        ok = digits(&s, &p, 2) && (!expect(&p, '.') || fraction(&ms, &p));
    ok = ok && offset_read(&off, &has_off, &p);
    if (!ok)
        return fawn_err(FAWN_EINVAL, "expected an ISO 8601 time (YYYY-MM-DDTHH:MM[:SS][Z|+HH:MM])");
    if (y < SCHED_YEAR_MIN || y > SCHED_YEAR_MAX || mo < 1 || mo > 12 || d < 1 ||
        d > sched_month_days(y, mo) || h > 23 || mi > 59 || s > 59)
        return fawn_err(FAWN_EINVAL, "no such date or time");
    int64_t local = sched_days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + s;
    int64_t t = has_off ? local - off : sched_zone_utc_of(z, local);
    *out = t * 1000 + ms;
    return 0;
}

/* The next run after after_ms in the loaded zone. */
static int next_in(int64_t *next_ms, const char *kind, const char *spec, const sched_zone *z,
                   int64_t after_ms) {
    if (strcmp(kind, SCHED_KIND_ONCE) == 0) {
        int64_t at;
        int r = sched_time_parse(&at, spec, z);
        if (r < 0)
            return fawn_err(r, "schedule_spec.run_at: %s", fawn_errmsg());
        *next_ms = at > after_ms ? at : 0;
        return 0;
    }
    sched_cron c;
    int64_t t;
    int r = sched_cron_parse(&c, spec);
    if (r == 0)
        r = sched_cron_next(&t, &c, z, sched_floor_div(after_ms, 1000));
    if (r < 0)
        return fawn_err(r, "schedule_spec.cron: %s", fawn_errmsg());
    *next_ms = t * 1000;
    return 0;
}

int sched_next(int64_t *next_ms, const char *kind, const char *spec, const char *zone,
               int64_t after_ms) {
    *next_ms = 0;
    if (!kind || (strcmp(kind, SCHED_KIND_ONCE) != 0 && strcmp(kind, SCHED_KIND_CRON) != 0))
        return fawn_err(FAWN_EINVAL, "schedule_type must be once or cron");
    if (!spec)
        return fawn_err(FAWN_EINVAL, "schedule_spec.%s is required",
                        strcmp(kind, SCHED_KIND_ONCE) == 0 ? "run_at" : "cron");
    sched_zone *z;
    int r = sched_zone_load(&z, zone ? zone : "");
    if (r < 0)
        return r == FAWN_EINVAL ? fawn_err(r, "timezone: %s", fawn_errmsg()) : r;
    r = next_in(next_ms, kind, spec, z, after_ms);
    sched_zone_free(z);
    return r;
}

int sched_validate(int64_t *next_ms, const char *kind, const char *spec, const char *zone,
                   int64_t now_ms) {
    int r = sched_next(next_ms, kind, spec, zone, now_ms);
    if (r == 0 && strcmp(kind, SCHED_KIND_ONCE) == 0 &&
        (*next_ms == 0 || *next_ms - now_ms < SCHED_ONCE_MIN_DELAY_MS)) {
        *next_ms = 0;
        return fawn_err(FAWN_EINVAL, "schedule_spec.run_at must be at least %d seconds ahead",
                        SCHED_ONCE_MIN_DELAY_MS / 1000);
    }
    return r;
}
