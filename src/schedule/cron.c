/* Cron expressions: five fields parsed into bit sets (schedule.h). The
 * parser reads untrusted text: it walks each byte once, accepts numbers of
 * at most three digits, and never allocates. */
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "schedule/schedule.h"

/* One field's name, range and value names (NULL: numbers only). */
typedef struct cron_field {
    const char *name;
    int lo, hi;
    const char *const *names; /* names[i] is the value lo + i */
    int n_names;
} cron_field;

static const char *const month_names[] = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN",
                                          "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
static const char *const day_names[] = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

/* Day of week 7 is Sunday again (as Vixie cron), folded to 0 below. */
static const cron_field fields[5] = {
    {"minute", 0, 59, NULL, 0},
    {"hour", 0, 23, NULL, 0},
    {"day-of-month", 1, 31, NULL, 0},
    {"month", 1, 12, month_names, (int)ARRAY_LEN(month_names)},
    {"day-of-week", 0, 7, day_names, (int)ARRAY_LEN(day_names)},
};

/* Reads a value (a number, or a name of the field) at *p. */
static int value_read(int *out, const char **p, const cron_field *f) {
    *out = 0;
    const char *s = *p;
    if (*s >= '0' && *s <= '9') {
        int v = 0, digits = 0;
        for (; *s >= '0' && *s <= '9'; s++)
            if (++digits > 3)
                return fawn_err(FAWN_EINVAL, "%s field: number too long", f->name);
            else
                v = v * 10 + (*s - '0');
        if (v < f->lo || v > f->hi)
            return fawn_err(FAWN_EINVAL, "%s field: %d is out of range %d-%d", f->name, v, f->lo,
                            f->hi);
        *out = v;
        *p = s;
        return 0;
    }
    for (int i = 0; i < f->n_names; i++)
        if (strncasecmp(s, f->names[i], 3) == 0) {
            *out = f->lo + i;
            *p = s + 3;
            return 0;
        }
    return fawn_err(FAWN_EINVAL, "%s field: expected a number%s", f->name,
                    f->names ? " or a name" : "");
}

/* Reads one list element (*, a, a-b, each with an optional /step) at *p
 * and sets its values in *bits. */
static int element_read(uint64_t *bits, const char **p, const cron_field *f) {
    int lo = f->lo, hi = f->hi, step = 1, r = 0;
    bool star = **p == '*';
    if (star)
        (*p)++;
    else if ((r = value_read(&lo, p, f)) == 0 && **p == '-') {
        (*p)++;
        r = value_read(&hi, p, f);
    } else
        hi = lo;
    if (r == 0 && **p == '/') {
        (*p)++;
        const char *s = *p;
        int v = 0, digits = 0;
        for (; *s >= '0' && *s <= '9' && digits < 4; s++, digits++)
            v = v * 10 + (*s - '0');
        if (digits == 0 || digits > 3 || v < 1 || v > f->hi)
            return fawn_err(FAWN_EINVAL, "%s field: step must be 1-%d", f->name, f->hi);
        step = v;
        *p = s;
        if (!star && hi == lo)
            hi = f->hi; /* "a/n": from a to the end, as Vixie cron */
    }
    if (r == 0 && lo > hi)
        r = fawn_err(FAWN_EINVAL, "%s field: range %d-%d runs backwards", f->name, lo, hi);
    for (int v = lo; r == 0 && v <= hi; v += step)
        *bits |= (uint64_t)1 << v;
    return r;
}

/* Parses the field text [s, end) into *bits. */
static int field_parse(uint64_t *bits, const char *s, const char *end, const cron_field *f) {
    *bits = 0;
    for (;;) {
        int r = element_read(bits, &s, f);
        if (r < 0)
            return r;
        if (s == end)
            return 0;
        if (*s != ',' || s + 1 == end)
            return fawn_err(FAWN_EINVAL, "%s field: unexpected '%c'", f->name, *s);
        s++;
    }
}

/* The five fields of expr as [start, end) pairs. */
static int fields_split(const char *start[5], const char *end[5], const char *expr) {
    if (strlen(expr) > SCHED_CRON_MAX)
        return fawn_err(FAWN_EINVAL, "longer than %d bytes", SCHED_CRON_MAX);
    size_t n = 0;
    for (const char *s = expr; *s;) {
        if (*s == ' ' || *s == '\t') {
            s++;
            continue;
        }
        if (n == 5)
            return fawn_err(FAWN_EINVAL, "must have exactly 5 fields");
        start[n] = s;
        while (*s && *s != ' ' && *s != '\t')
            s++;
        end[n++] = s;
    }
    return n == 5 ? 0 : fawn_err(FAWN_EINVAL, "must have exactly 5 fields");
}

int sched_cron_parse(sched_cron *out, const char *expr) {
    *out = (sched_cron){0};
    const char *start[5], *end[5];
    int r = fields_split(start, end, expr);
    uint64_t bits[5] = {0};
    for (size_t i = 0; r == 0 && i < 5; i++) {
        for (const char *c = start[i]; r == 0 && c < end[i]; c++)
            if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f)
                r = fawn_err(FAWN_EINVAL, "%s field: unexpected character", fields[i].name);
        if (r == 0)
            r = field_parse(&bits[i], start[i], end[i], &fields[i]);
    }
    if (r < 0)
        return r;
    uint64_t weekdays = bits[4] | (bits[4] >> 7 & 1); /* 7 is Sunday */
    *out = (sched_cron){.minutes = bits[0],
                        .hours = (uint32_t)bits[1],
                        .days = (uint32_t)bits[2],
                        .months = (uint16_t)bits[3],
                        .weekdays = (uint8_t)(weekdays & 0x7f),
                        .day_star = *start[2] == '*',
                        .weekday_star = *start[4] == '*'};
    return 0;
}

int sched_cron_normalize(char *out, size_t size, const char *expr) {
    out[0] = '\0';
    sched_cron c;
    const char *start[5], *end[5];
    int r = sched_cron_parse(&c, expr);
    if (r == 0)
        r = fields_split(start, end, expr);
    size_t len = 0;
    for (size_t i = 0; r == 0 && i < 5; i++) {
        int n = snprintf(out + len, size - len, "%s%.*s", i ? " " : "", (int)(end[i] - start[i]),
                         start[i]);
        if (n < 0 || (size_t)n >= size - len)
            r = fawn_err(FAWN_EINVAL, "longer than %zu bytes", size - 1);
        else
            len += (size_t)n;
    }
    if (r < 0)
        out[0] = '\0';
    return r;
}

bool sched_cron_matches_day(const sched_cron *c, int month, int day, int weekday) {
    if (!(c->months >> month & 1))
        return false;
    bool dom = c->days >> day & 1, dow = c->weekdays >> weekday & 1;
    return c->day_star || c->weekday_star ? dom && dow : dom || dow;
}
