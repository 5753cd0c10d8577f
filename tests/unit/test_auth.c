/* Password hashing and session tokens, as an attacker would poke them. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth/auth.h"
#include "support.h"
#include "unit/test_store_open.h"

static const unsigned char secret[AUTH_SECRET_BYTES] = "0123456789abcdef0123456789abcde";

static void passwords(void **state) {
    char hash[AUTH_HASH_MAX], again[AUTH_HASH_MAX];
    assert_int_equal(auth_password_hash(hash, "correct horse"), 0);
    assert_non_null(strstr(hash, "$argon2id$"));
    assert_int_equal(auth_password_verify(hash, "correct horse"), 0);
    assert_int_equal(auth_password_verify(hash, "correct horsE"), FAWN_EPERM);
    assert_int_equal(auth_password_verify(hash, ""), FAWN_EPERM);
    assert_int_equal(auth_password_verify("not a hash", "correct horse"), FAWN_EPERM);
    /* Salted: the same password never hashes the same way twice. */
    assert_int_equal(auth_password_hash(again, "correct horse"), 0);
    assert_string_not_equal(hash, again);
    assert_int_equal(auth_password_hash(hash, "short"), FAWN_EINVAL);
    char *huge = malloc(AUTH_PASSWORD_MAX + 2);
    memset(huge, 'a', AUTH_PASSWORD_MAX + 1);
    huge[AUTH_PASSWORD_MAX + 1] = '\0';
    assert_int_equal(auth_password_hash(hash, huge), FAWN_EINVAL);
    free(huge);
}

static char *token_for(const auth_claims *c) {
    char *t = NULL;
    assert_int_equal(auth_jwt_sign(&t, secret, c), 0);
    return t;
}

static void tokens_round_trip_and_expire(void **state) {
    auth_claims c = {.user_id = 42, .token_version = 3, .issued_at = 1000, .expires_at = 2000}, got;
    char *t = token_for(&c);
    assert_int_equal(auth_jwt_verify(&got, secret, t, 1500), 0);
    assert_int_equal(got.user_id, 42);
    assert_int_equal(got.token_version, 3);
    assert_int_equal(got.expires_at, 2000);
    assert_int_equal(auth_jwt_verify(&got, secret, t, 2000), FAWN_ETIMEDOUT);
    unsigned char other[AUTH_SECRET_BYTES] = {1};
    assert_int_equal(auth_jwt_verify(&got, other, t, 1500), FAWN_EPERM);
    free(t);
}

/* base64url of a text, for forging tokens. */
static char *b64(const char *text) {
    size_t cap = sodium_base64_encoded_len(strlen(text), sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    char *out = malloc(cap);
    sodium_bin2base64(out, cap, (const unsigned char *)text, strlen(text),
                      sodium_base64_VARIANT_URLSAFE_NO_PADDING);
    return out;
}

static void forged_tokens_refused(void **state) {
    auth_claims c = {.user_id = 7, .token_version = 0, .issued_at = 1, .expires_at = 9999}, got;
    char t[1024];
    char *signed_token = token_for(&c);
    snprintf(t, sizeof t, "%s", signed_token);
    free(signed_token);
    const char *dot1 = strchr(t, '.'), *dot2 = strchr(dot1 + 1, '.');
    char forged[2048];
    /* alg "none" with the signature dropped, and with it kept. */
    char *none = b64("{\"alg\":\"none\",\"typ\":\"JWT\"}");
    snprintf(forged, sizeof forged, "%s%.*s.", none, (int)(dot2 - dot1), dot1);
    assert_int_equal(auth_jwt_verify(&got, secret, forged, 10), FAWN_EPERM);
    snprintf(forged, sizeof forged, "%s%s", none, dot1);
    assert_int_equal(auth_jwt_verify(&got, secret, forged, 10), FAWN_EPERM);
    free(none);
    /* Another user id in the payload, signature unchanged. */
    char *payload = b64("{\"sub\":\"1\",\"ver\":0,\"iat\":1,\"exp\":9999}");
    snprintf(forged, sizeof forged, "%.*s.%s%s", (int)(dot1 - t), t, payload, dot2);
    assert_int_equal(auth_jwt_verify(&got, secret, forged, 10), FAWN_EPERM);
    free(payload);
    /* A flipped signature character, a truncated token, extra parts. */
    snprintf(forged, sizeof forged, "%s", t);
    forged[strlen(forged) - 2] = forged[strlen(forged) - 2] == 'A' ? 'B' : 'A';
    assert_int_equal(auth_jwt_verify(&got, secret, forged, 10), FAWN_EPERM);
    snprintf(forged, sizeof forged, "%.*s", (int)(dot2 - t), t);
    assert_int_equal(auth_jwt_verify(&got, secret, forged, 10), FAWN_EPERM);
    snprintf(forged, sizeof forged, "%s.x", t);
    assert_int_equal(auth_jwt_verify(&got, secret, forged, 10), FAWN_EPERM);
    assert_int_equal(auth_jwt_verify(&got, secret, "", 10), FAWN_EPERM);
    assert_int_equal(auth_jwt_verify(&got, secret, "..", 10), FAWN_EPERM);
}

/* Correctly signed but malformed claims are refused too. */
static void bad_claims_refused(void **state) {
    const char *payloads[] = {
        "{\"sub\":42,\"ver\":0,\"iat\":1,\"exp\":9999}",     /* sub not a string */
        "{\"sub\":\"-1\",\"ver\":0,\"iat\":1,\"exp\":9999}", /* sub not positive */
        "{\"sub\":\"4x\",\"ver\":0,\"iat\":1,\"exp\":9999}", /* sub not a number */
        "{\"sub\":\"4\",\"iat\":1,\"exp\":9999}",            /* no ver */
        "{\"sub\":\"4\",\"ver\":0,\"iat\":1,\"exp\":\"9\"}", /* exp a string */
        "[1,2]",
        "not json",
    };
    char *header = b64("{\"alg\":\"HS256\",\"typ\":\"JWT\"}");
    for (size_t i = 0; i < sizeof payloads / sizeof payloads[0]; i++) {
        char *p = b64(payloads[i]), signing[1024], token[2048];
        snprintf(signing, sizeof signing, "%s.%s", header, p);
        unsigned char mac[crypto_auth_hmacsha256_BYTES];
        crypto_auth_hmacsha256_state st;
        crypto_auth_hmacsha256_init(&st, secret, AUTH_SECRET_BYTES);
        crypto_auth_hmacsha256_update(&st, (const unsigned char *)signing, strlen(signing));
        crypto_auth_hmacsha256_final(&st, mac);
        char sig[64];
        sodium_bin2base64(sig, sizeof sig, mac, sizeof mac,
                          sodium_base64_VARIANT_URLSAFE_NO_PADDING);
        snprintf(token, sizeof token, "%s.%s", signing, sig);
        auth_claims got;
        POISON(got);
        if (auth_jwt_verify(&got, secret, token, 10) != FAWN_EPERM)
            fail_msg("accepted claims %s", payloads[i]);
        /* Nothing of a refused token is left, not even the claims read before the bad one. */
        assert_int_equal(got.user_id, 0);
        assert_int_equal(got.token_version, 0);
        assert_int_equal(got.expires_at, 0);
        free(p);
    }
    free(header);
}

static void secret_file_created_once_and_checked(void **state) {
    char home[] = "/tmp/fawn-auth-XXXXXX";
    assert_non_null(mkdtemp(home));
    unsetenv(AUTH_SECRET_ENV);
    unsigned char a[AUTH_SECRET_BYTES], b[AUTH_SECRET_BYTES];
    assert_int_equal(auth_secret_load(a, home), 0);
    assert_int_equal(auth_secret_load(b, home), 0);
    assert_memory_equal(a, b, sizeof a); /* the second start reads the first's secret */
    char path[128], cmd[512];
    snprintf(path, sizeof path, "%s/%s", home, AUTH_SECRET_FILE);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 0777, 0600);
    /* Readable by others: refused. */
    assert_int_equal(chmod(path, 0644), 0);
    assert_int_equal(auth_secret_load(b, home), FAWN_EPERM);
    /* A symlink planted in its place: refused, never followed. */
    snprintf(cmd, sizeof cmd, "rm %s && ln -s /etc/hostname %s", path, path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(auth_secret_load(b, home), FAWN_EPERM);
    /* A home other users can write to (they could swap the file): refused. */
    snprintf(cmd, sizeof cmd, "rm %s", path);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(chmod(home, 0777), 0);
    assert_int_equal(auth_secret_load(b, home), FAWN_EPERM);
    assert_int_equal(chmod(home, 0700), 0);
    /* The environment wins, and is checked. */
    setenv(AUTH_SECRET_ENV, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
    assert_int_equal(auth_secret_load(b, home), 0);
    assert_int_equal(b[0], 0x00);
    assert_int_equal(b[31], 0xff);
    setenv(AUTH_SECRET_ENV, "abcd", 1);
    assert_int_equal(auth_secret_load(b, home), FAWN_EINVAL);
    unsetenv(AUTH_SECRET_ENV);
    snprintf(cmd, sizeof cmd, "rm -rf %s", home);
    assert_int_equal(system(cmd), 0);
}

/* A failing call still sets what it writes: an uninitialized token pointer
 * freed after a failure, or claims read after one, would act on garbage. */
static void failures_leave_out_parameters_defined(void **state) {
    auth_claims got;
    POISON(got);
    assert_int_equal(auth_jwt_verify(&got, secret, "", 10), FAWN_EPERM);
    assert_int_equal(got.user_id, 0);
    assert_int_equal(got.issued_at, 0);
    char hash[AUTH_HASH_MAX];
    POISON(hash);
    assert_int_equal(auth_password_hash(hash, "short"), FAWN_EINVAL);
    assert_string_equal(hash, "");
    unsigned char loaded[AUTH_SECRET_BYTES], zero[AUTH_SECRET_BYTES] = {0};
    POISON(loaded);
    setenv(AUTH_SECRET_ENV, "abcd", 1);
    assert_int_equal(auth_secret_load(loaded, "/nonexistent"), FAWN_EINVAL);
    unsetenv(AUTH_SECRET_ENV);
    assert_memory_equal(loaded, zero, sizeof zero);
}

/* Usernames: a plain name or an address, but not one in the domain whose
 * addresses are made up for users without one. */
static void usernames(void **state) {
    static const char *const good[] = {"admin", "local-admin", "alice@example.com", "a.b_c+d-e",
                                       "x@fawn.invalid.example.com"};
    static const char *const bad[] = {
        "", "a b", "o'neil", "caf\xc3\xa9", "a/b", "admin@fawn.invalid", "Admin@FAWN.Invalid"};
    for (size_t i = 0; i < ARRAY_LEN(good); i++)
        assert_true(auth_username_valid(good[i]));
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_false(auth_username_valid(bad[i]));
    char longest[STORE_NAME_MAX + 2];
    memset(longest, 'a', STORE_NAME_MAX);
    longest[STORE_NAME_MAX] = '\0';
    assert_true(auth_username_valid(longest));
    strcat(longest, "a");
    assert_false(auth_username_valid(longest));
}

/* The shape of an address, as zod's email() reads it (the vectors were
 * checked against zod 3.25). */
static void email_shapes(void **state) {
    static const char *const good[] = {
        "a@b.io", "o'neil@ex.com", "a.b+c_d-e@x-y.z.org", "A@B.CO", "user-7@fawn.invalid", "9@9.ab",
        "_@x.io", "a-@x.io"};
    static const char *const bad[] = {
        "admin",    "admin@local", "a.@x.io", ".a@x.io", "a..b@x.io", "a@x..io", "a@-x.io",
        "a@x.i",    "a@x.i0",      "a@.io",   "@x.io",   "a@b@c.io",  "a'@x.io", "a b@x.io",
        "a@x_y.io", "a@x.io.",     "",        "a@x.io-", "a@x-.io-"};
    for (size_t i = 0; i < ARRAY_LEN(good); i++)
        assert_true(auth_email_valid(good[i]));
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_false(auth_email_valid(bad[i]));
    assert_false(auth_email_valid(NULL));
}

/* A user's address: the username when it is one, else one made up in
 * fawn.invalid from the name, else from the id. */
static void user_emails(void **state) {
    static const struct {
        const char *username, *email;
    } cases[] = {
        {"alice@example.com", "alice@example.com"},
        {"admin", "admin@fawn.invalid"},
        {"local-admin", "local-admin@fawn.invalid"},
        {"a.b+c", "a.b+c@fawn.invalid"},
        {"a@b", "user-42@fawn.invalid"},
        {"a.", "user-42@fawn.invalid"},
        {".a", "user-42@fawn.invalid"},
        {"a..b", "user-42@fawn.invalid"},
        {"x@y.z", "user-42@fawn.invalid"},
    };
    char out[AUTH_EMAIL_MAX + 1];
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        auth_user_email(out, cases[i].username, 42);
        assert_string_equal(out, cases[i].email);
        assert_true(auth_email_valid(out));
    }
    char longest[STORE_NAME_MAX + 1];
    memset(longest, 'a', STORE_NAME_MAX);
    longest[STORE_NAME_MAX] = '\0';
    auth_user_email(out, longest, 1);
    assert_int_equal(strlen(out), AUTH_EMAIL_MAX);
    assert_true(auth_email_valid(out));
}

/* ---- the cache of verified credentials ---- */

typedef struct cache_fx {
    char home[64], path[128];
    store *st;
    auth_cache *c;
    store_user alice;
    store_token token;
} cache_fx;

static const char alice_token[] = "fawn_0123456789abcdef";

static int cache_setup(void **state) {
    cache_fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-auth-cache-XXXXXX");
    if (!mkdtemp(x->home))
        return -1;
    snprintf(x->path, sizeof x->path, "%s/fawn.db", x->home);
    char hash[65];
    fawn_sha256_hex(hash, alice_token, strlen(alice_token));
    if (test_store_open(&x->st, x->path) < 0 ||
        store_user_create(x->st, &x->alice, "alice", "$argon2id$not-a-real-hash", "user") < 0 ||
        store_token_create(x->st, &x->token, x->alice.id, "script", hash) < 0 ||
        auth_cache_new(&x->c, x->st) < 0)
        return -1;
    *state = x;
    return 0;
}

static int cache_teardown(void **state) {
    cache_fx *x = *state;
    auth_cache_free(x->c);
    store_close(x->st);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->home);
    int r = system(cmd);
    free(x);
    return r;
}

/* What a request does: the cache, else the store (kept when it agrees).
 * Returns whether the store was asked. */
static bool cache_verify(cache_fx *x, store_user *u, int *result, const char *token, int64_t now) {
    auth_cache_key key;
    auth_cache_stamp stamp;
    int64_t id;
    auth_cache_key_of(&key, x->c, AUTH_CREDENTIAL_API_TOKEN, token, strlen(token));
    if ((*result = auth_cache_get(x->c, u, &id, &stamp, &key, now)) == 0)
        return false;
    char hash[65];
    fawn_sha256_hex(hash, token, strlen(token));
    *result = store_token_authenticate(x->st, u, &id, hash);
    if (*result == 0)
        auth_cache_put(x->c, &key, &stamp, u, id, now);
    return true;
}

static void cache_answers_without_the_store_until_a_change(void **state) {
    cache_fx *x = *state;
    store_user u;
    int r;
    assert_true(cache_verify(x, &u, &r, alice_token, 0)); /* first use: the store */
    assert_int_equal(r, 0);
    uint64_t before = store_operations(x->st);
    for (int64_t t = 1; t < AUTH_CACHE_RECHECK_MS; t += 7) {
        assert_false(cache_verify(x, &u, &r, alice_token, t));
        assert_int_equal(r, 0);
    }
    assert_int_equal(store_operations(x->st), before); /* not one query */
    assert_int_equal(u.id, x->alice.id);
    assert_string_equal(u.role, "user");
    assert_string_equal(u.password_hash, ""); /* never kept */

    /* A role change through this handle: the very next lookup asks again. */
    assert_int_equal(store_user_set_role(x->st, x->alice.id, "admin"), 0);
    assert_true(cache_verify(x, &u, &r, alice_token, 100));
    assert_string_equal(u.role, "admin");
    assert_false(cache_verify(x, &u, &r, alice_token, 101));
    assert_string_equal(u.role, "admin");

    /* The token deleted: refused at once, and a refusal is never kept. */
    assert_int_equal(store_token_delete(x->st, x->alice.id, x->token.id), 0);
    assert_true(cache_verify(x, &u, &r, alice_token, 102));
    assert_int_equal(r, FAWN_ENOENT);
    assert_true(cache_verify(x, &u, &r, alice_token, 103));
    assert_int_equal(r, FAWN_ENOENT);
}

/* Every store change that can end a session invalidates: sign-out
 * everywhere, a new password. */
static void cache_sessions_revoked_at_once(void **state) {
    cache_fx *x = *state;
    auth_cache_key key;
    auth_cache_stamp stamp;
    store_user u;
    int64_t id;
    for (int round = 0; round < 2; round++) {
        auth_cache_key_of(&key, x->c, AUTH_CREDENTIAL_SESSION, "a.jwt.token", 11);
        assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 0), FAWN_ENOENT);
        auth_cache_put(x->c, &key, &stamp, &x->alice, 0, 0);
        assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 1), 0);
        if (round == 0)
            assert_int_equal(store_user_revoke_sessions(x->st, x->alice.id), 0);
        else
            assert_int_equal(store_user_set_password(x->st, x->alice.id, "$argon2id$other"), 0);
        assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 2), FAWN_ENOENT);
    }
    /* Signing out drops the entry. */
    auth_cache_put(x->c, &key, &stamp, &x->alice, 0, 3);
    assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 4), 0);
    auth_cache_forget(x->c, &key);
    assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 5), FAWN_ENOENT);
    /* A stamp taken before a change keeps nothing fresh: the change was
     * committed while the store was being asked. */
    assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 6), FAWN_ENOENT);
    assert_int_equal(store_user_set_role(x->st, x->alice.id, "viewer"), 0);
    auth_cache_put(x->c, &key, &stamp, &x->alice, 0, 7);
    assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 8), FAWN_ENOENT);
}

/* Another process on the same database (here another handle, whose
 * writes this handle does not count): seen once the generation is read
 * again, AUTH_CACHE_RECHECK_MS after the last read at most. */
static void cache_sees_another_process_within_the_recheck(void **state) {
    cache_fx *x = *state;
    store *other;
    assert_int_equal(test_store_open(&other, x->path), 0);
    store_user u;
    int r;
    auth_cache_stats before, after;
    assert_true(cache_verify(x, &u, &r, alice_token, 0));
    auth_cache_stats_get(&before, x->c);
    assert_int_equal(store_user_set_role(other, x->alice.id, "viewer"), 0);
    assert_int_equal(store_auth_changes(x->st), 0); /* not this handle's write */
    /* Within the documented bound the entry may still answer... */
    assert_false(cache_verify(x, &u, &r, alice_token, AUTH_CACHE_RECHECK_MS - 1));
    assert_string_equal(u.role, "user");
    /* ...and not past it. */
    assert_true(cache_verify(x, &u, &r, alice_token, AUTH_CACHE_RECHECK_MS));
    assert_string_equal(u.role, "viewer");
    auth_cache_stats_get(&after, x->c);
    assert_int_equal(after.generation_reads, before.generation_reads + 1);
    /* The same for a token deleted elsewhere. */
    assert_int_equal(store_token_delete(other, x->alice.id, x->token.id), 0);
    assert_true(cache_verify(x, &u, &r, alice_token, 3 * AUTH_CACHE_RECHECK_MS));
    assert_int_equal(r, FAWN_ENOENT);
    store_close(other);
}

static void cache_entries_expire(void **state) {
    cache_fx *x = *state;
    store_user u;
    int r;
    assert_true(cache_verify(x, &u, &r, alice_token, 0));
    assert_false(cache_verify(x, &u, &r, alice_token, AUTH_CACHE_MAX_AGE_MS - 1));
    assert_true(cache_verify(x, &u, &r, alice_token, AUTH_CACHE_MAX_AGE_MS));
    assert_int_equal(r, 0);
}

static void cache_is_bounded(void **state) {
    cache_fx *x = *state;
    auth_cache_key key;
    auth_cache_stamp stamp;
    store_user u;
    int64_t id;
    size_t n = 2 * AUTH_CACHE_ENTRIES_MAX, hits = 0;
    for (size_t i = 0; i < n; i++) {
        char credential[32];
        int len = snprintf(credential, sizeof credential, "fawn_%zu", i);
        auth_cache_key_of(&key, x->c, AUTH_CREDENTIAL_API_TOKEN, credential, (size_t)len);
        assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 1), FAWN_ENOENT);
        auth_cache_put(x->c, &key, &stamp, &x->alice, (int64_t)i, 1);
        assert_int_equal(auth_cache_get(x->c, &u, &id, &stamp, &key, 1), 0); /* the newest stays */
        assert_int_equal(id, (int64_t)i);
    }
    auth_cache_stats stats;
    auth_cache_stats_get(&stats, x->c);
    assert_true(stats.entries <= AUTH_CACHE_ENTRIES_MAX);
    assert_true(stats.entries > AUTH_CACHE_ENTRIES_MAX / 2);
    for (size_t i = 0; i < n; i++) {
        char credential[32];
        int len = snprintf(credential, sizeof credential, "fawn_%zu", i);
        auth_cache_key_of(&key, x->c, AUTH_CREDENTIAL_API_TOKEN, credential, (size_t)len);
        hits += auth_cache_get(x->c, &u, &id, &stamp, &key, 2) == 0;
    }
    assert_true(hits <= AUTH_CACHE_ENTRIES_MAX);
}

/* Keys are keyed hashes: never the credential, never the same in two
 * caches, never shared by two kinds of credential. */
static void cache_keys_hide_the_credential(void **state) {
    cache_fx *x = *state;
    auth_cache *second;
    assert_int_equal(auth_cache_new(&second, x->st), 0);
    auth_cache_key a, b, c;
    auth_cache_key_of(&a, x->c, AUTH_CREDENTIAL_API_TOKEN, alice_token, strlen(alice_token));
    auth_cache_key_of(&b, second, AUTH_CREDENTIAL_API_TOKEN, alice_token, strlen(alice_token));
    auth_cache_key_of(&c, x->c, AUTH_CREDENTIAL_SESSION, alice_token, strlen(alice_token));
    assert_memory_not_equal(a.bytes, b.bytes, sizeof a.bytes);
    assert_memory_not_equal(a.bytes, c.bytes, sizeof a.bytes);
    assert_null(memmem(a.bytes, sizeof a.bytes, "fawn_", 5));
    /* A stamp whose generation is unknown (the store could not be read)
     * keeps nothing. */
    auth_cache_stamp unknown = {.changes = 0, .generation = -1};
    auth_cache_put(second, &a, &unknown, &x->alice, 1, 0);
    auth_cache_stats stats;
    auth_cache_stats_get(&stats, second);
    assert_int_equal(stats.entries, 0);
    auth_cache_free(second);
}

/* PostgreSQL: a token deleted through another gateway's handle is refused
 * here on the very next lookup: the deletion returns only once this
 * store's watcher has counted its notification. No query here, and long
 * before the cache would read the generation again. */
static void cache_sees_another_gateway_at_once(void **state) {
    cache_fx *x = *state;
    store *other;
    assert_int_equal(test_store_open(&other, x->path), 0); /* another gateway */
    store_user u;
    int r;
    assert_true(cache_verify(x, &u, &r, alice_token, 0));
    assert_false(cache_verify(x, &u, &r, alice_token, 1));
    uint64_t before = store_auth_changes(x->st);
    assert_int_equal(store_token_delete(other, x->alice.id, x->token.id), 0);
    assert_true(store_auth_changes(x->st) != before);
    assert_true(cache_verify(x, &u, &r, alice_token, 2)); /* long before the recheck */
    assert_int_equal(r, FAWN_ENOENT);
    auth_cache_stats stats;
    auth_cache_stats_get(&stats, x->c);
    assert_int_equal(stats.generation_reads, 1); /* the first lookup's, no other */
    store_close(other);
}

/* Terminates the server process of every watcher connection (store.h,
 * store_auth_changes) of the case's database. */
static void pg_terminate_watchers(cache_fx *x) {
    char sql[512], database[32];
    test_store_database_name(database, x->path);
    snprintf(sql, sizeof sql,
             "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '%s' "
             "AND application_name LIKE 'fawn-auth-watch-%%'",
             database);
    assert_int_equal(test_pg_admin(sql), 0);
}

/* PostgreSQL: while the connection that waits for notifications is lost,
 * nothing is answered from memory (a revocation could go unseen); once it
 * is back, the cache answers again. */
static void cache_unused_while_the_watch_is_lost(void **state) {
    cache_fx *x = *state;
    store_user u;
    int r;
    assert_true(cache_verify(x, &u, &r, alice_token, 0));
    assert_false(cache_verify(x, &u, &r, alice_token, 1));
    pg_terminate_watchers(x);
    /* Lost: every answer of store_auth_changes is new. */
    bool blind = false;
    for (int i = 0; i < 10000 && !blind; i++) {
        uint64_t a = store_auth_changes(x->st);
        blind = store_auth_changes(x->st) != a;
        if (!blind)
            usleep(1000);
    }
    assert_true(blind);
    assert_true(cache_verify(x, &u, &r, alice_token, 2));
    assert_true(cache_verify(x, &u, &r, alice_token, 3));
    assert_int_equal(r, 0);
    /* Back (the watcher reconnects within a second): cached again. */
    bool back = false;
    for (int i = 0; i < 10000 && !back; i++) {
        uint64_t a = store_auth_changes(x->st);
        back = store_auth_changes(x->st) == a;
        if (!back)
            usleep(1000);
    }
    assert_true(back);
    assert_true(cache_verify(x, &u, &r, alice_token, 4));
    assert_false(cache_verify(x, &u, &r, alice_token, 5));
}

int main(void) {
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(passwords),
        cmocka_unit_test(usernames),
        cmocka_unit_test(email_shapes),
        cmocka_unit_test(user_emails),
        cmocka_unit_test(tokens_round_trip_and_expire),
        cmocka_unit_test(forged_tokens_refused),
        cmocka_unit_test(bad_claims_refused),
        cmocka_unit_test(secret_file_created_once_and_checked),
        cmocka_unit_test(failures_leave_out_parameters_defined),
        cmocka_unit_test_setup_teardown(cache_answers_without_the_store_until_a_change, cache_setup,
                                        cache_teardown),
        cmocka_unit_test_setup_teardown(cache_sessions_revoked_at_once, cache_setup,
                                        cache_teardown),
        cmocka_unit_test_setup_teardown(cache_sees_another_process_within_the_recheck, cache_setup,
                                        cache_teardown),
        cmocka_unit_test_setup_teardown(cache_entries_expire, cache_setup, cache_teardown),
        cmocka_unit_test_setup_teardown(cache_is_bounded, cache_setup, cache_teardown),
        cmocka_unit_test_setup_teardown(cache_keys_hide_the_credential, cache_setup,
                                        cache_teardown),
    };
    const struct CMUnitTest on_postgres[] = {
        cmocka_unit_test_setup_teardown(cache_answers_without_the_store_until_a_change, cache_setup,
                                        cache_teardown),
        cmocka_unit_test_setup_teardown(cache_sessions_revoked_at_once, cache_setup,
                                        cache_teardown),
        cmocka_unit_test_setup_teardown(cache_sees_another_gateway_at_once, cache_setup,
                                        cache_teardown),
        cmocka_unit_test_setup_teardown(cache_unused_while_the_watch_is_lost, cache_setup,
                                        cache_teardown),
    };
    /* On PostgreSQL (scripts/pg-test-server.sh run ...) the cache's cases,
     * with two that only it has. */
    if (test_pg_server())
        return cmocka_run_group_tests_name("auth cache on PostgreSQL", on_postgres, NULL, NULL);
    return cmocka_run_group_tests_name("auth", tests, NULL, NULL);
}
