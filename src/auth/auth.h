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

#endif
