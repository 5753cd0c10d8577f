/* Authentication primitives: password hashing and session tokens.
 *
 * Every out-parameter is set on every path, failures included: each
 * function zeroes what it writes (a NULL token, empty claims, an empty hash,
 * a zero secret) before anything can fail. */
#ifndef FAWN_AUTH_H
#define FAWN_AUTH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store/store.h"
#include "base/base.h"

/* True for an acceptable username: 1 to STORE_NAME_MAX (254) bytes of
 * letters, digits and . _ @ + - (an email address or a plain name), not
 * ending in "@" AUTH_EMAIL_DOMAIN (regardless of case): those addresses
 * are the ones auth_user_email makes up for users without one. */
bool auth_username_valid(const char *name);

/* ---- e-mail addresses ----
 * A user's e-mail address is its username when that is one; fawn keeps no
 * other. A user whose username is not an address (the demo admin "admin",
 * "local-admin") is given one in AUTH_EMAIL_DOMAIN: a name under the
 * .invalid top-level domain, which RFC 2606 reserves so that it never
 * reaches anyone. Clients that require an address (DeerFlow's web UI)
 * then get a well-formed one that is plainly not deliverable. */
#define AUTH_EMAIL_DOMAIN "fawn.invalid"
/* Longest address made: a username, '@', the domain. */
#define AUTH_EMAIL_MAX (STORE_NAME_MAX + sizeof "@" AUTH_EMAIL_DOMAIN - 1)

/* Whether s has the shape of an e-mail address, as common client-side
 * checks (zod's email()) read it: a local part of ASCII letters, digits
 * and _ ' + - . (not starting with '.', not ending with '.' or '\''),
 * '@', then dot-separated labels of letters, digits and '-' (each starting
 * with a letter or digit) ending in a top-level label of two or more
 * letters; no ".." anywhere. */
bool auth_email_valid(const char *s);

/* The e-mail address of a user into out: username when auth_email_valid
 * says it is one; else username@AUTH_EMAIL_DOMAIN when that is one; else
 * user-<user_id>@AUTH_EMAIL_DOMAIN. */
void auth_user_email(char out[AUTH_EMAIL_MAX + 1], const char *username, int64_t user_id);

/* Password lengths accepted (bytes): short ones are guessable, long ones
 * only cost hashing time. */
#define AUTH_PASSWORD_MIN 8
#define AUTH_PASSWORD_MAX 1024
/* A stored hash (argon2id string form, parameters included) fits here. */
#define AUTH_HASH_MAX 128

/* Whether password may be chosen: AUTH_PASSWORD_MIN to AUTH_PASSWORD_MAX
 * bytes, and not one of the passwords every guessing list starts with.
 * 0, or FAWN_EINVAL with a message saying why. */
FAWN_MUST_CHECK int auth_password_check(const char *password);

/* Hashes password with argon2id (libsodium's interactive limits) into out.
 * FAWN_EINVAL for a password outside the accepted lengths, FAWN_ENOMEM when
 * the hashing memory cannot be had. */
FAWN_MUST_CHECK int auth_password_hash(char out[AUTH_HASH_MAX], const char *password);

/* 0 when password matches hash; FAWN_EPERM otherwise (a malformed hash
 * included). Takes the same time whether or not the user exists only if the
 * caller also verifies against a dummy hash for unknown users. */
FAWN_MUST_CHECK int auth_password_verify(const char *hash, const char *password);

/* Session tokens are HS256 JSON Web Tokens signed with a 32-byte secret. */
#define AUTH_SECRET_BYTES 32
/* Longest token accepted for verification. */
#define AUTH_TOKEN_MAX 4096

typedef struct auth_claims {
    int64_t user_id;       /* "sub", as a decimal string */
    int64_t token_version; /* "ver": must equal the user's to be valid */
    int64_t issued_at;     /* "iat", seconds since the epoch */
    int64_t expires_at;    /* "exp", seconds since the epoch */
} auth_claims;

/* Signs claims into a new token (malloc'd, caller frees). */
FAWN_MUST_CHECK int auth_jwt_sign(char **out, const unsigned char secret[AUTH_SECRET_BYTES],
                                  const auth_claims *c);

/* Checks token: exactly the header fawn issues (HS256; nothing else is
 * negotiable), a valid signature (compared in constant time), then claims of
 * the right types. FAWN_EPERM for any invalid token, FAWN_ETIMEDOUT for a
 * valid one whose "exp" is at or before now (seconds). */
FAWN_MUST_CHECK int auth_jwt_verify(auth_claims *out, const unsigned char secret[AUTH_SECRET_BYTES],
                                    const char *token, int64_t now);

/* The environment variable that may hold the session secret: at least 32
 * bytes, given as 64 or more hex digits. */
#define AUTH_SECRET_ENV "FAWN_JWT_SECRET"
#define AUTH_SECRET_FILE "jwt.secret"

/* Loads the session secret: from $FAWN_JWT_SECRET when set (the first 32
 * bytes of its hex), else from home/jwt.secret, which is created with 32
 * random bytes (mode 0600, atomically: concurrent starts agree on one
 * secret) when missing. A secret file that is a symlink, not a regular
 * file, not exactly 32 bytes, or readable by group or others is refused
 * (FAWN_EPERM / FAWN_EINVAL): the secret signs every session. */
FAWN_MUST_CHECK int auth_secret_load(unsigned char out[AUTH_SECRET_BYTES], const char *home);

/* ---- the cache of verified credentials ----
 * A request that proves who it is with a credential verified a moment ago
 * is answered from memory, not from the store (the session's token_version,
 * the API token's row, the user's role). Rules, each enforced by the
 * function named:
 * - Keyed by a keyed hash of the credential, never the credential itself
 *   (auth_cache_key_of: BLAKE2b under a random key of this cache).
 * - Bounded: AUTH_CACHE_ENTRIES_MAX entries, allocated once; a new entry
 *   replaces the oldest of its set (auth_cache_put). Only successes are
 *   kept: a refused credential goes to the store every time.
 * - An entry lives AUTH_CACHE_MAX_AGE_MS at most (auth_cache_get).
 * - A change made through this process's store handle that can end or
 *   alter an authentication (store.h, "the auth generation": password,
 *   role, token_version, a user or token deleted, whatever code made it)
 *   invalidates every entry before the write returns: auth_cache_get
 *   compares each entry's stamp with store_auth_changes, no query.
 * - A change made by another process on the same store (`fawn user role`,
 *   another gateway) is seen within AUTH_CACHE_RECHECK_MS: auth_cache_get
 *   reads store_auth_generation at most that often (one query for the
 *   whole cache, not one per request). On PostgreSQL the store pushes such
 *   changes too: the database's notification moves store_auth_changes
 *   before the other process's write returns (store.h), so the same stamp
 *   comparison drops every entry then; the recheck stays as the bound for
 *   a gateway that could not be waited for (store_watch.c).
 * - Fail closed: while the generation cannot be read, nothing is answered
 *   from memory. */

/* AUTH_CACHE_SETS sets of AUTH_CACHE_WAYS entries: the key chooses the set,
 * and a new entry replaces the oldest of a full set. 4096 entries of ~700 bytes are under 3 MiB; a
 * gateway with more credentials in use within AUTH_CACHE_MAX_AGE_MS than that pays a query for some
 * of them, as it did without a cache. */
#define AUTH_CACHE_WAYS 4
#define AUTH_CACHE_SETS 1024
#define AUTH_CACHE_ENTRIES_MAX (AUTH_CACHE_WAYS * AUTH_CACHE_SETS)
/* Longest an entry is trusted: short enough that anything the generation
 * does not cover (a database restored from a backup, edited with triggers
 * dropped) lasts seconds, long enough that a client polling every second
 * costs one query in ten; an API token's last use is still recorded
 * within a minute (STORE_TOKEN_USE_RESOLUTION_MS). */
#define AUTH_CACHE_MAX_AGE_MS 10000
/* How often the store's auth generation is read: the longest another
 * process's revocation goes unseen here (plus that one query). One query a
 * second costs nothing next to one per request. */
#define AUTH_CACHE_RECHECK_MS 1000
#define AUTH_CACHE_KEY_BYTES 32

/* What a credential is: part of its key, so that equal text of two kinds
 * never shares an entry. */
enum auth_credential {
    AUTH_CREDENTIAL_SESSION = 1, /* a session token (JWT), from a cookie or a bearer */
    AUTH_CREDENTIAL_API_TOKEN,   /* an API token */
    AUTH_CREDENTIAL_LOCAL,       /* auth.disabled: the local admin's id, as text */
};

typedef struct auth_cache auth_cache;
typedef struct auth_cache_key {
    unsigned char bytes[AUTH_CACHE_KEY_BYTES];
} auth_cache_key;
/* What the cache knew of the store when a verification began. */
typedef struct auth_cache_stamp {
    uint64_t changes;   /* store_auth_changes */
    int64_t generation; /* store_auth_generation as last read; -1 unknown */
} auth_cache_stamp;
typedef struct auth_cache_stats {
    uint64_t hits, misses;
    uint64_t generation_reads; /* store_auth_generation queries made */
    size_t entries;            /* at most AUTH_CACHE_ENTRIES_MAX */
} auth_cache_stats;

/* A new, empty cache over st (borrowed: it must outlive the cache). Caller
 * frees with auth_cache_free. FAWN_ENOMEM. */
FAWN_MUST_CHECK int auth_cache_new(auth_cache **out, store *st);
/* Wipes and frees c (NULL is fine). */
void auth_cache_free(auth_cache *c);

/* The key of credential (len bytes) of kind, for this cache. */
void auth_cache_key_of(auth_cache_key *out, const auth_cache *c, enum auth_credential kind,
                       const char *credential, size_t len);

/* Looks key up at now_ms (a monotonic clock: fawn_now_ms). 0 with *user
 * (its password_hash empty) and *token_id (0 for sessions) when an entry
 * is fresh; FAWN_ENOENT (*user, *token_id zeroed) when the caller must
 * verify with the store. *stamp is set on every path: pass it to
 * auth_cache_put after that verification, so that a change committed while
 * it ran makes the entry stale at once. May read the store's generation
 * (see AUTH_CACHE_RECHECK_MS); safe from any thread. */
FAWN_MUST_CHECK int auth_cache_get(auth_cache *c, store_user *user, int64_t *token_id,
                                   auth_cache_stamp *stamp, const auth_cache_key *key,
                                   int64_t now_ms);
/* Keeps user (and token_id) as verified for key at now_ms under stamp (from
 * the auth_cache_get that missed). Never keeps the password hash; keeps
 * nothing when the stamp's generation is unknown. */
void auth_cache_put(auth_cache *c, const auth_cache_key *key, const auth_cache_stamp *stamp,
                    const store_user *user, int64_t token_id, int64_t now_ms);
/* Drops key's entry, if any (signing out). */
void auth_cache_forget(auth_cache *c, const auth_cache_key *key);
/* The counters so far, and the entries held. */
void auth_cache_stats_get(auth_cache_stats *out, auth_cache *c);

#endif
