/* Sign-in throttling: GW_THROTTLE_FAILURES failed sign-ins from one address
 * within GW_THROTTLE_LOCKOUT_S lock that address out for
 * GW_THROTTLE_LOCKOUT_S. The table is fixed-size: when it is full, the
 * entry seen longest ago gives way, preferring one that is not locked. */
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gateway/internal.h"

/* Addresses tracked at once: far more than the clients that fail to sign
 * in within five minutes on any real deployment; bounds the memory an
 * attacker cycling addresses can take. */
#define THROTTLE_SLOTS 4096

typedef struct throttle_slot {
    char addr[64];
    unsigned failures;
    int64_t first_failure_s; /* start of the current counting window */
    int64_t locked_until_s;
    int64_t last_seen_s;
} throttle_slot;

struct gw_throttle {
    pthread_mutex_t mu;
    throttle_slot slots[THROTTLE_SLOTS];
};

int gw_throttle_new(gw_throttle **out) {
    *out = NULL;
    gw_throttle *t = calloc(1, sizeof *t);
    if (!t)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    pthread_mutex_init(&t->mu, NULL);
    *out = t;
    return 0;
}

void gw_throttle_free(gw_throttle *t) {
    if (!t)
        return;
    pthread_mutex_destroy(&t->mu);
    free(t);
}

static throttle_slot *slot_find(gw_throttle *t, const char *addr) {
    for (size_t i = 0; i < THROTTLE_SLOTS; i++)
        if (t->slots[i].addr[0] && strcmp(t->slots[i].addr, addr) == 0)
            return &t->slots[i];
    return NULL;
}

/* An empty slot, else the one seen longest ago (unlocked ones first). */
static throttle_slot *slot_claim(gw_throttle *t, int64_t now_s) {
    throttle_slot *oldest = NULL, *oldest_unlocked = NULL;
    for (size_t i = 0; i < THROTTLE_SLOTS; i++) {
        throttle_slot *s = &t->slots[i];
        if (!s->addr[0])
            return s;
        if (!oldest || s->last_seen_s < oldest->last_seen_s)
            oldest = s;
        if (s->locked_until_s <= now_s &&
            (!oldest_unlocked || s->last_seen_s < oldest_unlocked->last_seen_s))
            oldest_unlocked = s;
    }
    return oldest_unlocked ? oldest_unlocked : oldest;
}

int64_t gw_throttle_wait_s(gw_throttle *t, const char *addr, int64_t now_s) {
    pthread_mutex_lock(&t->mu);
    throttle_slot *s = slot_find(t, addr);
    int64_t wait = s && s->locked_until_s > now_s ? s->locked_until_s - now_s : 0;
    pthread_mutex_unlock(&t->mu);
    return wait;
}

void gw_throttle_fail(gw_throttle *t, const char *addr, int64_t now_s) {
    pthread_mutex_lock(&t->mu);
    throttle_slot *s = slot_find(t, addr);
    if (!s) {
        s = slot_claim(t, now_s);
        memset(s, 0, sizeof *s);
        snprintf(s->addr, sizeof s->addr, "%s", addr);
    }
    if (s->failures == 0 || now_s - s->first_failure_s >= GW_THROTTLE_LOCKOUT_S) {
        s->failures = 0;
        s->first_failure_s = now_s;
    }
    s->last_seen_s = now_s;
    if (++s->failures >= GW_THROTTLE_FAILURES) {
        s->locked_until_s = now_s + GW_THROTTLE_LOCKOUT_S;
        s->failures = 0;
    }
    pthread_mutex_unlock(&t->mu);
}

void gw_throttle_succeed(gw_throttle *t, const char *addr) {
    pthread_mutex_lock(&t->mu);
    throttle_slot *s = slot_find(t, addr);
    if (s)
        memset(s, 0, sizeof *s);
    pthread_mutex_unlock(&t->mu);
}
