/* What the schedule module's files share: the proleptic Gregorian
 * calendar on day numbers (days since 1970-01-01). No other module
 * includes this. */
#ifndef FAWN_SCHEDULE_INTERNAL_H
#define FAWN_SCHEDULE_INTERNAL_H

#include <stdbool.h>
#include <stdint.h>

/* Times the zone functions take are clamped to ±SCHED_TIME_LIMIT seconds
 * (about 31,000 years): far past any schedule, and far from overflow in
 * the day and second arithmetic below. */
#define SCHED_TIME_LIMIT ((int64_t)1000000000000)

int64_t sched_days_from_civil(int64_t y, int m, int d);
void sched_civil_from_days(int64_t days, int64_t *y, int *m, int *d);
/* 0 = Sunday … 6. */
int sched_weekday(int64_t days);
bool sched_leap_year(int64_t y);
int sched_month_days(int64_t y, int m);
/* Floor division and remainder by a positive divisor. */
int64_t sched_floor_div(int64_t a, int64_t b);

#endif
