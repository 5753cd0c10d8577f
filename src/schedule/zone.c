/* Time zones from TZif files (RFC 8536), read by fawn itself: the C
 * library's localtime depends on the process-wide TZ, which a threaded
 * server must not change per call. The parser reads untrusted-shaped
 * input: every count is bounded before it is used, every read is within
 * the data, and the footer's POSIX TZ rule is parsed by a bounded
 * recursive-free scanner. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/fsx.h"
#include "schedule/schedule.h"
#include "schedule/schedule_internal.h"

/* RFC 8536 §3.2: a UT offset is within this range. */
#define ZONE_UTOFF_MIN (-89999)
#define ZONE_UTOFF_MAX 93599
/* A POSIX TZ rule's transition time is at most 167 hours (TZif v3). */
#define ZONE_RULE_TIME_MAX (167 * 3600)
/* A POSIX TZ zone abbreviation: tzdata's are 3 to 6 bytes. */
#define ZONE_ABBR_MAX 32
#define TZIF_HEADER 44

/* ---- the calendar ---- */

int64_t sched_floor_div(int64_t a, int64_t b) { return a / b - (a % b != 0 && (a < 0) != (b < 0)); }

bool sched_leap_year(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

int sched_month_days(int64_t y, int m) {
    static const int days[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && sched_leap_year(y) ? 29 : days[m - 1];
}

/* Howard Hinnant's days_from_civil. */
int64_t sched_days_from_civil(int64_t y, int m, int d) {
    y -= m <= 2;
    int64_t era = sched_floor_div(y, 400);
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

void sched_civil_from_days(int64_t days, int64_t *y, int *m, int *d) {
    days += 719468;
    int64_t era = sched_floor_div(days, 146097);
    int64_t doe = days - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

int sched_weekday(int64_t days) { return (int)(days - sched_floor_div(days + 4, 7) * 7 + 4); }

/* ---- zones ---- */

/* A POSIX TZ rule's date: Jn (1-365, Feb 29 never counted), n (0-365),
 * or Mm.w.d (month, week 1-5 where 5 is the last, weekday). */
typedef struct rule_date {
    char kind; /* 'J', 'N' or 'M' */
    int n, m, w, d;
    int32_t time; /* seconds after local midnight */
} rule_date;

typedef struct zone_rule {
    int32_t std_off, dst_off; /* seconds east of UTC */
    bool has_dst;
    rule_date start, end;
} zone_rule;

struct sched_zone {
    size_t n_trans;
    int64_t *at;   /* transition times, ascending */
    uint8_t *type; /* the local time type from at[i] on */
    size_t n_types;
    int32_t *utoff; /* each type's offset east of UTC */
    bool has_rule;  /* the footer's rule holds after the last transition */
    zone_rule rule;
};

void sched_zone_free(sched_zone *z) {
    if (!z)
        return;
    free(z->at);
    free(z->type);
    free(z->utoff);
    free(z);
}

static int64_t clamp_time(int64_t t) {
    return t < -SCHED_TIME_LIMIT ? -SCHED_TIME_LIMIT : t > SCHED_TIME_LIMIT ? SCHED_TIME_LIMIT : t;
}

/* The day number of a rule date in year y. */
static int64_t rule_day(const rule_date *r, int64_t y) {
    int64_t jan1 = sched_days_from_civil(y, 1, 1);
    if (r->kind == 'J')
        return jan1 + r->n - 1 + (r->n >= 60 && sched_leap_year(y));
    if (r->kind == 'N')
        return jan1 + r->n;
    int64_t first = sched_days_from_civil(y, r->m, 1);
    int64_t day = first + (r->d - sched_weekday(first) + 7) % 7 + 7 * (r->w - 1);
    while (day >= first + sched_month_days(y, r->m))
        day -= 7;
    return day;
}

/* The offset the footer's rule gives at UTC time t. */
static int32_t rule_offset(const zone_rule *r, int64_t t) {
    if (!r->has_dst)
        return r->std_off;
    int64_t y;
    int m, d;
    sched_civil_from_days(sched_floor_div(t + r->std_off, 86400), &y, &m, &d);
    int64_t start = rule_day(&r->start, y) * 86400 + r->start.time - r->std_off;
    int64_t end = rule_day(&r->end, y) * 86400 + r->end.time - r->dst_off;
    bool dst = start < end ? t >= start && t < end : !(t >= end && t < start);
    return dst ? r->dst_off : r->std_off;
}

int32_t sched_zone_offset(const sched_zone *z, int64_t t) {
    t = clamp_time(t);
    if (z->n_trans == 0 || t >= z->at[z->n_trans - 1]) {
        if (z->has_rule)
            return rule_offset(&z->rule, t);
        return z->utoff[z->n_trans ? z->type[z->n_trans - 1] : 0];
    }
    if (t < z->at[0])
        return z->utoff[0];
    size_t lo = 0, hi = z->n_trans - 1; /* at[lo] <= t < at[hi] */
    while (hi - lo > 1) {
        size_t mid = lo + (hi - lo) / 2;
        if (z->at[mid] <= t)
            lo = mid;
        else
            hi = mid;
    }
    return z->utoff[z->type[lo]];
}

int64_t sched_zone_utc_of(const sched_zone *z, int64_t local) {
    local = clamp_time(local);
    int32_t before = sched_zone_offset(z, local - 86400),
            after = sched_zone_offset(z, local + 86400);
    int64_t ta = local - before, tb = local - after;
    bool a_ok = sched_zone_offset(z, ta) == before, b_ok = sched_zone_offset(z, tb) == after;
    if (a_ok && b_ok)
        return ta < tb ? ta : tb; /* repeated: the first */
    if (a_ok || b_ok)
        return a_ok ? ta : tb;
    /* Skipped: the instant the clock jumps, between the two readings. */
    int64_t lo = ta < tb ? ta : tb, hi = ta < tb ? tb : ta;
    int32_t off_lo = sched_zone_offset(z, lo);
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (sched_zone_offset(z, mid) == off_lo)
            lo = mid;
        else
            hi = mid;
    }
    return hi;
}

/* ---- the POSIX TZ rule of a TZif footer ---- */

/* Steps past c at *p, if it is there. */
static bool rule_expect(const char **p, char c) {
    if (**p != c)
        return false;
    (*p)++;
    return true;
}

/* A number of at most max (and three digits) at *p. */
static bool rule_number(int *out, const char **p, int max) {
    int v = 0, digits = 0;
    for (; **p >= '0' && **p <= '9'; (*p)++)
        if (++digits > 3)
            return false;
        else
            v = v * 10 + (**p - '0');
    *out = v;
    return digits > 0 && v <= max;
}

/* [+-]hh[:mm[:ss]] with hh at most max_hours, in seconds. */
static bool rule_hms(int32_t *out, const char **p, int max_hours) {
    int sign = 1, h = 0, m = 0, s = 0;
    if (**p == '+' || **p == '-')
        sign = *(*p)++ == '-' ? -1 : 1;
    bool ok = rule_number(&h, p, max_hours);
    if (ok && rule_expect(p, ':')) {
        ok = rule_number(&m, p, 59);
        if (ok && rule_expect(p, ':'))
            ok = rule_number(&s, p, 59);
    }
    *out = sign * (h * 3600 + m * 60 + s);
    return ok;
}

/* An abbreviation: <[A-Za-z0-9+-]+> or [A-Za-z]{3,}. */
static bool rule_abbr(const char **p) {
    const char *s = *p;
    size_t n = 0;
    bool quoted = *s == '<';
    if (quoted) {
        for (s++; (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z') ||
                  (*s >= '0' && *s <= '9') || *s == '+' || *s == '-';
             s++)
            n++;
        if (*s != '>')
            return false;
        s++;
    } else
        for (; (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z'); s++)
            n++;
    *p = s;
    return n >= (quoted ? 1u : 3u) && n <= ZONE_ABBR_MAX;
}

static bool rule_date_parse(rule_date *r, const char **p) {
    *r = (rule_date){.time = 2 * 3600};
    bool ok;
    if (**p == 'M') {
        (*p)++;
        r->kind = 'M';
        ok = rule_number(&r->m, p, 12) && r->m >= 1 && rule_expect(p, '.') &&
             rule_number(&r->w, p, 5) && r->w >= 1 && rule_expect(p, '.') &&
             rule_number(&r->d, p, 6);
    } else if (**p == 'J') {
        (*p)++;
        r->kind = 'J';
        ok = rule_number(&r->n, p, 365) && r->n >= 1;
    } else {
        r->kind = 'N';
        ok = rule_number(&r->n, p, 365);
    }
    if (ok && rule_expect(p, '/'))
        ok = rule_hms(&r->time, p, 167);
    return ok;
}

/* Parses a POSIX TZ string (the footer, without its newlines). */
static int rule_parse(zone_rule *r, const char *s) {
    *r = (zone_rule){0};
    int32_t std_west, dst_west;
    if (!rule_abbr(&s) || !rule_hms(&std_west, &s, 24))
        return fawn_err(FAWN_EINVAL, "TZif footer: bad standard time");
    r->std_off = r->dst_off = -std_west;
    if (!*s)
        return 0;
    r->has_dst = true;
    if (!rule_abbr(&s))
        return fawn_err(FAWN_EINVAL, "TZif footer: bad daylight time name");
    dst_west = std_west - 3600;
    if (*s && *s != ',' && !rule_hms(&dst_west, &s, 24))
        return fawn_err(FAWN_EINVAL, "TZif footer: bad daylight offset");
    r->dst_off = -dst_west;
    const char *us = ",M3.2.0,M11.1.0"; /* POSIX's default: the US rule */
    const char *q = *s ? s : us;
    if (!rule_expect(&q, ',') || !rule_date_parse(&r->start, &q) || !rule_expect(&q, ',') ||
        !rule_date_parse(&r->end, &q) || *q)
        return fawn_err(FAWN_EINVAL, "TZif footer: bad daylight rule");
    return 0;
}

/* ---- TZif ---- */

typedef struct tzif_counts {
    uint32_t isut, isstd, leap, time, type, chars;
} tzif_counts;

static uint32_t be32(const unsigned char *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)((uint64_t)be32(p) << 32 | be32(p + 4));
}

/* Reads and bounds a header at data[0..len). */
static int header_read(tzif_counts *c, int *version, const unsigned char *data, size_t len) {
    *c = (tzif_counts){0};
    *version = 0;
    if (len < TZIF_HEADER || memcmp(data, "TZif", 4) != 0)
        return fawn_err(FAWN_EINVAL, "not a TZif file");
    *version = data[4] == 0 ? 1 : data[4] - '0';
    if (*version < 1 || *version > 4)
        return fawn_err(FAWN_EINVAL, "TZif: unknown version");
    *c = (tzif_counts){be32(data + 20), be32(data + 24), be32(data + 28),
                       be32(data + 32), be32(data + 36), be32(data + 40)};
    if (c->leap)
        return fawn_err(FAWN_EINVAL, "TZif: zones with leap seconds are not supported");
    if (c->type < 1 || c->type > SCHED_TYPES_MAX || c->time > SCHED_TRANSITIONS_MAX ||
        c->chars < 1 || c->chars > SCHED_TZIF_MAX || (c->isut && c->isut != c->type) ||
        (c->isstd && c->isstd != c->type))
        return fawn_err(FAWN_EINVAL, "TZif: counts out of range");
    return 0;
}

/* Bytes of a data block whose times take tsize bytes. */
static size_t block_size(const tzif_counts *c, size_t tsize) {
    return (size_t)c->time * (tsize + 1) + (size_t)c->type * 6 + c->chars +
           (size_t)c->leap * (tsize + 4) + c->isstd + c->isut;
}

/* Reads a data block (times of tsize bytes) into z. */
static int block_read(sched_zone *z, const tzif_counts *c, const unsigned char *p, size_t tsize) {
    z->n_trans = c->time;
    z->n_types = c->type;
    z->at = calloc(c->time + 1, sizeof *z->at);
    z->type = calloc(c->time + 1, 1);
    z->utoff = calloc(c->type, sizeof *z->utoff);
    if (!z->at || !z->type || !z->utoff)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; i < c->time; i++) {
        z->at[i] = tsize == 8 ? be64(p + i * 8) : (int32_t)be32(p + i * 4);
        if (i && z->at[i] <= z->at[i - 1])
            return fawn_err(FAWN_EINVAL, "TZif: transitions out of order");
    }
    p += (size_t)c->time * tsize;
    for (size_t i = 0; i < c->time; i++)
        if ((z->type[i] = p[i]) >= c->type)
            return fawn_err(FAWN_EINVAL, "TZif: transition type out of range");
    p += c->time;
    for (size_t i = 0; i < c->type; i++, p += 6) {
        int32_t off = (int32_t)be32(p);
        if (off < ZONE_UTOFF_MIN || off > ZONE_UTOFF_MAX || p[4] > 1 || p[5] >= c->chars)
            return fawn_err(FAWN_EINVAL, "TZif: local time type out of range");
        z->utoff[i] = off;
    }
    return 0;
}

/* The footer at data[0..len): "\n" TZ "\n". */
static int footer_read(sched_zone *z, const unsigned char *data, size_t len) {
    if (len < 2 || data[0] != '\n')
        return fawn_err(FAWN_EINVAL, "TZif: missing footer");
    const unsigned char *nl = memchr(data + 1, '\n', len - 1);
    if (!nl)
        return fawn_err(FAWN_EINVAL, "TZif: unterminated footer");
    size_t n = (size_t)(nl - data - 1);
    if (n == 0)
        return 0;
    char tz[128];
    if (n >= sizeof tz || memchr(data + 1, '\0', n))
        return fawn_err(FAWN_EINVAL, "TZif: bad footer");
    memcpy(tz, data + 1, n);
    tz[n] = '\0';
    int r = rule_parse(&z->rule, tz);
    z->has_rule = r == 0;
    return r;
}

static int zone_parse(sched_zone *z, const unsigned char *data, size_t len) {
    tzif_counts c;
    int version;
    int r = header_read(&c, &version, data, len);
    if (r < 0)
        return r;
    size_t v1 = block_size(&c, 4);
    if (len - TZIF_HEADER < v1)
        return fawn_err(FAWN_EINVAL, "TZif: truncated");
    if (version == 1)
        return block_read(z, &c, data + TZIF_HEADER, 4);
    data += TZIF_HEADER + v1;
    len -= TZIF_HEADER + v1;
    if ((r = header_read(&c, &version, data, len)) < 0)
        return r;
    size_t v2 = block_size(&c, 8);
    if (len - TZIF_HEADER < v2)
        return fawn_err(FAWN_EINVAL, "TZif: truncated");
    r = block_read(z, &c, data + TZIF_HEADER, 8);
    return r < 0 ? r : footer_read(z, data + TZIF_HEADER + v2, len - TZIF_HEADER - v2);
}

int sched_zone_parse(sched_zone **out, const unsigned char *data, size_t len) {
    *out = NULL;
    if (len > SCHED_TZIF_MAX)
        return fawn_err(FAWN_EINVAL, "TZif: larger than %d bytes", SCHED_TZIF_MAX);
    sched_zone *z = calloc(1, sizeof *z);
    if (!z)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = zone_parse(z, data, len);
    if (r < 0) {
        sched_zone_free(z);
        return r;
    }
    *out = z;
    return 0;
}

/* ---- loading a zone by name ---- */

bool sched_zone_name_ok(const char *name) {
    size_t len = strlen(name);
    if (len == 0 || len > SCHED_ZONE_NAME_MAX)
        return false;
    bool segment_start = true;
    for (const char *s = name; *s; s++) {
        bool letter = (*s >= 'A' && *s <= 'Z') || (*s >= 'a' && *s <= 'z');
        bool other = (*s >= '0' && *s <= '9') || *s == '_' || *s == '+' || *s == '-';
        if (segment_start && !letter)
            return false;
        if (*s == '/' ? segment_start || !s[1] : !letter && !other)
            return false;
        segment_start = *s == '/';
    }
    return true;
}

/* The built-in UTC zone. */
static int zone_utc(sched_zone **out) {
    sched_zone *z = calloc(1, sizeof *z);
    if (z && !(z->utoff = calloc(1, sizeof *z->utoff))) {
        free(z);
        z = NULL;
    }
    if (!z)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    z->n_types = 1;
    *out = z;
    return 0;
}

/* The TZif file of name (shape already checked) under the zone directory,
 * opened by the kernel's confinement (no symlink out of it). */
static int zone_read(char **data, size_t *len, const char *name) {
    *data = NULL;
    *len = 0;
    _cleanup_close_ int dir = open(SCHED_ZONEINFO_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dir < 0)
        return fawn_err_sys(FAWN_EIO, errno, "%s", SCHED_ZONEINFO_DIR);
    _cleanup_close_ int fd = fsx_open_beneath(dir, name, O_RDONLY, 0, FSX_SYMLINKS_BENEATH);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return FAWN_ENOENT;
    return fawn_read_all(data, len, fd, SCHED_TZIF_MAX);
}

int sched_zone_load(sched_zone **out, const char *name) {
    *out = NULL;
    if (!name || !sched_zone_name_ok(name))
        return fawn_err(FAWN_EINVAL, "unknown timezone: %s",
                        name && strlen(name) <= SCHED_ZONE_NAME_MAX ? name : "(bad name)");
    if (strcmp(name, "UTC") == 0 || strcmp(name, "Etc/UTC") == 0)
        return zone_utc(out);
    _cleanup_free_ char *data = NULL;
    size_t len;
    int r = zone_read(&data, &len, name);
    if (r == 0)
        r = sched_zone_parse(out, (const unsigned char *)data, len);
    if (r == FAWN_ENOMEM)
        return r;
    return r < 0 ? fawn_err(FAWN_EINVAL, "unknown timezone: %s", name) : 0;
}
