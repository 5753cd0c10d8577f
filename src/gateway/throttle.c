/* Sign-in throttling (internal.h): the rule and where its counts live.
 * The counts are in the store (store_signin_attempt), shared by every
 * gateway on the database, so attempts spread over several gateways add up
 * to one count and a lockout holds on all of them at once. Nothing is kept
 * in memory: a sign-in already costs a password hash (tens of
 * milliseconds), next to which one write transaction is small, and a local
 * copy could answer "not locked" for an address another gateway locked. */
#include "gateway/internal.h"

/* Addresses kept at once, over all gateways: far more than the clients
 * that fail to sign in within five minutes on any real deployment; bounds
 * the table an attacker cycling addresses can grow. */
#define THROTTLE_ADDRESSES_MAX 4096

static const store_signin_rule throttle_rule = {
    .attempts = GW_THROTTLE_FAILURES,
    .window_s = GW_THROTTLE_LOCKOUT_S,
    .addresses_max = THROTTLE_ADDRESSES_MAX,
};

int gw_throttle_attempt(int64_t *wait_s, store *st, const char *addr, int64_t now_s) {
    return store_signin_attempt(st, wait_s, addr, now_s, &throttle_rule);
}

void gw_throttle_succeed(store *st, const char *addr) {
    if (store_signin_forget(st, addr) < 0)
        log_warn("gateway", "sign-in attempts of %s not forgotten: %s", addr, fawn_errmsg());
}
