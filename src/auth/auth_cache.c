/* The cache of verified credentials (auth.h): a fixed table of sets, one
 * mutex, and a stamp per entry that tells whether the store has changed an
 * authentication since the entry was verified. */
#include <pthread.h>
#include <sodium.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "auth/auth.h"

/* The stamp's generation while the store's cannot be read (or before it
 * was first read): matches no entry, and no entry is kept under it. */
#define GENERATION_UNKNOWN INT64_C(-1)

typedef struct entry {
    bool used;
    auth_cache_key key;
    auth_cache_stamp stamp;
    int64_t verified_at_ms;
    int64_t token_id;
    store_user user; /* password_hash always empty */
} entry;

struct auth_cache {
    store *st;
    unsigned char hash_key[crypto_generichash_KEYBYTES];
    _Atomic int64_t generation;   /* the store's, as last read */
    _Atomic int64_t next_read_ms; /* when it is read again */
    _Atomic uint64_t hits, misses, generation_reads;
    pthread_mutex_t mu; /* guards sets and entries */
    size_t entries;
    entry sets[AUTH_CACHE_SETS][AUTH_CACHE_WAYS];
};

int auth_cache_new(auth_cache **out, store *st) {
    *out = NULL;
    auth_cache *c = calloc(1, sizeof *c);
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    c->st = st;
    randombytes_buf(c->hash_key, sizeof c->hash_key);
    atomic_init(&c->generation, GENERATION_UNKNOWN);
    atomic_init(&c->next_read_ms, INT64_MIN);
    pthread_mutex_init(&c->mu, NULL);
    *out = c;
    return 0;
}

void auth_cache_free(auth_cache *c) {
    if (!c)
        return;
    pthread_mutex_destroy(&c->mu);
    sodium_memzero(c, sizeof *c);
    free(c);
}

void auth_cache_key_of(auth_cache_key *out, const auth_cache *c, enum auth_credential kind,
                       const char *credential, size_t len) {
    crypto_generichash_state h;
    unsigned char k = (unsigned char)kind;
    crypto_generichash_init(&h, c->hash_key, sizeof c->hash_key, sizeof out->bytes);
    crypto_generichash_update(&h, &k, 1);
    crypto_generichash_update(&h, (const unsigned char *)credential, len);
    crypto_generichash_final(&h, out->bytes, sizeof out->bytes);
}

/* Reads the store's generation when AUTH_CACHE_RECHECK_MS have passed since
 * the last read: one caller wins the turn, the others go on with the
 * generation they have. A failed read makes it unknown (nothing is
 * answered from memory) until a later read succeeds. */
static void generation_refresh(auth_cache *c, int64_t now_ms) {
    int64_t due = atomic_load(&c->next_read_ms);
    if (now_ms < due ||
        !atomic_compare_exchange_strong(&c->next_read_ms, &due, now_ms + AUTH_CACHE_RECHECK_MS))
        return;
    int64_t generation = GENERATION_UNKNOWN;
    if (store_auth_generation(c->st, &generation) < 0)
        generation = GENERATION_UNKNOWN;
    atomic_store(&c->generation, generation);
    atomic_fetch_add(&c->generation_reads, 1);
}

static entry *set_of(auth_cache *c, const auth_cache_key *key) {
    uint32_t index;
    memcpy(&index, key->bytes, sizeof index);
    return c->sets[index % AUTH_CACHE_SETS];
}

/* key's entry in its set (c->mu held), or NULL. */
static entry *entry_find(auth_cache *c, const auth_cache_key *key) {
    entry *set = set_of(c, key);
    for (size_t i = 0; i < AUTH_CACHE_WAYS; i++)
        if (set[i].used && sodium_memcmp(set[i].key.bytes, key->bytes, sizeof key->bytes) == 0)
            return &set[i];
    return NULL;
}

static void entry_clear(auth_cache *c, entry *e) {
    sodium_memzero(e, sizeof *e);
    c->entries--;
}

static bool entry_fresh(const entry *e, const auth_cache_stamp *now, int64_t now_ms) {
    return e->stamp.changes == now->changes && e->stamp.generation == now->generation &&
           now_ms >= e->verified_at_ms && now_ms - e->verified_at_ms < AUTH_CACHE_MAX_AGE_MS;
}

int auth_cache_get(auth_cache *c, store_user *user, int64_t *token_id, auth_cache_stamp *stamp,
                   const auth_cache_key *key, int64_t now_ms) {
    *user = (store_user){0};
    *token_id = 0;
    generation_refresh(c, now_ms);
    /* Read before the caller asks the store: a change committed after this
     * moves one of them, and the entry put under this stamp is stale. */
    *stamp = (auth_cache_stamp){.changes = store_auth_changes(c->st),
                                .generation = atomic_load(&c->generation)};
    bool hit = false;
    pthread_mutex_lock(&c->mu);
    entry *e = stamp->generation == GENERATION_UNKNOWN ? NULL : entry_find(c, key);
    if (e && entry_fresh(e, stamp, now_ms)) {
        *user = e->user;
        *token_id = e->token_id;
        hit = true;
    } else if (e) {
        entry_clear(c, e);
    }
    pthread_mutex_unlock(&c->mu);
    atomic_fetch_add(hit ? &c->hits : &c->misses, 1);
    return hit ? 0 : FAWN_ENOENT;
}

/* Where key goes in its set (c->mu held): its own entry, a free one, or
 * the oldest. */
static entry *entry_slot(auth_cache *c, const auth_cache_key *key) {
    entry *own = entry_find(c, key);
    if (own)
        return own;
    entry *set = set_of(c, key), *oldest = &set[0];
    for (size_t i = 0; i < AUTH_CACHE_WAYS; i++) {
        if (!set[i].used)
            return &set[i];
        if (set[i].verified_at_ms < oldest->verified_at_ms)
            oldest = &set[i];
    }
    return oldest;
}

void auth_cache_put(auth_cache *c, const auth_cache_key *key, const auth_cache_stamp *stamp,
                    const store_user *user, int64_t token_id, int64_t now_ms) {
    if (stamp->generation == GENERATION_UNKNOWN)
        return;
    pthread_mutex_lock(&c->mu);
    entry *e = entry_slot(c, key);
    if (!e->used)
        c->entries++;
    *e = (entry){.used = true,
                 .key = *key,
                 .stamp = *stamp,
                 .verified_at_ms = now_ms,
                 .token_id = token_id,
                 .user = *user};
    sodium_memzero(e->user.password_hash, sizeof e->user.password_hash);
    pthread_mutex_unlock(&c->mu);
}

void auth_cache_forget(auth_cache *c, const auth_cache_key *key) {
    pthread_mutex_lock(&c->mu);
    entry *e = entry_find(c, key);
    if (e)
        entry_clear(c, e);
    pthread_mutex_unlock(&c->mu);
}

void auth_cache_stats_get(auth_cache_stats *out, auth_cache *c) {
    pthread_mutex_lock(&c->mu);
    *out = (auth_cache_stats){.hits = atomic_load(&c->hits),
                              .misses = atomic_load(&c->misses),
                              .generation_reads = atomic_load(&c->generation_reads),
                              .entries = c->entries};
    pthread_mutex_unlock(&c->mu);
}
