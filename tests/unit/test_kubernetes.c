/* The Kubernetes provider's pure parts: the attestation math (box/attest.h),
 * the readers of API replies (kube_api.h), the judgement of an attestation
 * answer, the capability cache on a fake clock (caps_cache.h), the
 * kubeconfig reader and sandbox.kubernetes, and the pod manifest. The
 * provider against an API server is tested end to end
 * (tests/e2e/kubernetes_provider.test.mjs). */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <pthread.h>
#include <sodium.h>

#include "base/json.h"
#include "box/attest.h"
#include "config/config.h"
#include "sandbox/caps_cache.h"
#include "sandbox/kube_api.h"
#include "sandbox/kubernetes.h"
#include "sandbox/launch_spec.h"

#define SID "0123456789abcdef"
#define USER "alice"
#define UID "0f8a2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5b"
#define NONCE "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static box_attest attest_fixture(void) {
    box_attest a = {0};
    for (size_t i = 0; i < sizeof a.secret; i++)
        a.secret[i] = (uint8_t)i;
    snprintf(a.sandbox_id, sizeof a.sandbox_id, SID);
    snprintf(a.user, sizeof a.user, USER);
    snprintf(a.pod_uid, sizeof a.pod_uid, UID);
    return a;
}

/* ---- attestation math ---- */

static void test_proof_is_hmac_of_the_binding(void **state) {
    box_attest a = attest_fixture();
    char proof[BOX_ATTEST_PROOF_HEX + 1];
    assert_int_equal(box_attest_proof(proof, &a, NONCE), 0);
    const char *msg = "fawn-attest-v1\n" NONCE "\n" SID "\n" USER "\n" UID;
    uint8_t mac[crypto_auth_hmacsha256_BYTES];
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, a.secret, sizeof a.secret);
    crypto_auth_hmacsha256_update(&st, (const uint8_t *)msg, strlen(msg));
    crypto_auth_hmacsha256_final(&st, mac);
    char expected[65];
    box_attest_hex(expected, mac, sizeof mac);
    assert_string_equal(proof, expected);
    assert_true(box_attest_proof_equal(proof, expected));
}

static void test_proof_changes_with_every_field(void **state) {
    box_attest a = attest_fixture();
    char base[65], other[65];
    assert_int_equal(box_attest_proof(base, &a, NONCE), 0);
    box_attest b = a;
    b.secret[0] ^= 1;
    assert_int_equal(box_attest_proof(other, &b, NONCE), 0);
    assert_false(box_attest_proof_equal(base, other));
    b = a;
    b.sandbox_id[15] = 'e';
    assert_int_equal(box_attest_proof(other, &b, NONCE), 0);
    assert_false(box_attest_proof_equal(base, other));
    b = a;
    snprintf(b.user, sizeof b.user, "alicf");
    assert_int_equal(box_attest_proof(other, &b, NONCE), 0);
    assert_false(box_attest_proof_equal(base, other));
    b = a;
    b.pod_uid[35] = 'c';
    assert_int_equal(box_attest_proof(other, &b, NONCE), 0);
    assert_false(box_attest_proof_equal(base, other));
    char nonce2[] = NONCE;
    nonce2[0] = '1';
    assert_int_equal(box_attest_proof(other, &a, nonce2), 0);
    assert_false(box_attest_proof_equal(base, other));
}

static void test_proof_refuses_bad_input(void **state) {
    box_attest a = attest_fixture();
    char proof[65];
    POISON(proof);
    assert_int_equal(box_attest_proof(proof, &a, "00ff"), FAWN_EINVAL);
    assert_string_equal(proof, "");
    char upper[] = NONCE;
    upper[0] = 'A';
    assert_int_equal(box_attest_proof(proof, &a, upper), FAWN_EINVAL);
    /* A separator in a field would let two bindings hash alike. */
    snprintf(a.user, sizeof a.user, "ali\nce");
    assert_int_equal(box_attest_proof(proof, &a, NONCE), FAWN_EINVAL);
    a = attest_fixture();
    snprintf(a.pod_uid, sizeof a.pod_uid, "0F8A2C34-5B6D-4E7F-8A9B-0C1D2E3F4A5B");
    assert_int_equal(box_attest_proof(proof, &a, NONCE), FAWN_EINVAL);
}

static void test_proof_equal_is_strict(void **state) {
    char a[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
    assert_true(box_attest_proof_equal(a, a));
    assert_false(box_attest_proof_equal(a, "aaaa"));
    assert_false(box_attest_proof_equal("", ""));
    assert_false(box_attest_proof_equal(NULL, a));
    assert_false(box_attest_proof_equal(a, NULL));
    char longer[70];
    snprintf(longer, sizeof longer, "%sa", a);
    assert_false(box_attest_proof_equal(longer, a));
}

static void test_pod_secret_and_token_are_bound(void **state) {
    uint8_t key[32] = {7}, s1[32], s2[32];
    char t1[65], t2[65];
    assert_int_equal(box_attest_pod_secret(s1, key, SID, USER, UID), 0);
    assert_int_equal(box_attest_pod_secret(s2, key, SID, "bob", UID), 0);
    assert_memory_not_equal(s1, s2, 32);
    assert_int_equal(
        box_attest_pod_secret(s2, key, SID, USER, "1f8a2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5b"), 0);
    assert_memory_not_equal(s1, s2, 32);
    key[1] = 1;
    assert_int_equal(box_attest_pod_secret(s2, key, SID, USER, UID), 0);
    assert_memory_not_equal(s1, s2, 32);
    assert_int_equal(box_attest_pod_token(t1, key, SID, USER, UID), 0);
    assert_int_equal(strlen(t1), 64);
    assert_int_equal(
        box_attest_pod_token(t2, key, SID, USER, "1f8a2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5b"), 0);
    assert_string_not_equal(t1, t2);
    assert_int_equal(box_attest_pod_token(t2, key, "not-a-sandbox", USER, UID), FAWN_EINVAL);
    assert_string_equal(t2, "");
}

static void test_generation_is_the_uid(void **state) {
    char gen[33];
    assert_int_equal(box_attest_generation(gen, UID), 0);
    assert_string_equal(gen, "0f8a2c345b6d4e7f8a9b0c1d2e3f4a5b");
    POISON(gen);
    assert_int_equal(box_attest_generation(gen, "0f8a2c34-5b6d-4e7f-8a9b-0c1d2e3f4a5"),
                     FAWN_EINVAL);
    assert_string_equal(gen, "");
    assert_int_equal(box_attest_generation(gen, "0f8a2c34x5b6d-4e7f-8a9b-0c1d2e3f4a5b"),
                     FAWN_EINVAL);
}

static void test_request_parse(void **state) {
    char nonce[65];
    const char *good = "{\"nonce\": \"" NONCE "\"}";
    assert_int_equal(box_attest_request_parse(nonce, good, strlen(good)), 0);
    assert_string_equal(nonce, NONCE);
    const char *bad[] = {"",
                         "{}",
                         "[]",
                         "{\"nonce\": 1}",
                         "{\"nonce\": \"00\"}",
                         "{\"nonce\": \"" NONCE "\", \"sandbox_id\": \"x\"}",
                         "{\"nonce\": \"" NONCE "0\"}",
                         "{\"nonce\": \"" NONCE};
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        POISON(nonce);
        assert_int_equal(box_attest_request_parse(nonce, bad[i], strlen(bad[i])), FAWN_EINVAL);
        assert_string_equal(nonce, "");
    }
    char big[BOX_ATTEST_BODY_MAX + 2];
    memset(big, ' ', sizeof big);
    assert_int_equal(box_attest_request_parse(nonce, big, sizeof big), FAWN_EINVAL);
    /* The bytes after len are not read. */
    assert_int_equal(box_attest_request_parse(nonce, good, strlen(good) - 1), FAWN_EINVAL);
}

static void test_attest_load(void **state) {
    char dir[] = "/tmp/fawn-attest-XXXXXX", path[64];
    assert_non_null(mkdtemp(dir));
    snprintf(path, sizeof path, "%s/attest", dir);
    FILE *f = fopen(path, "w");
    fprintf(f, "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f\n");
    fclose(f);
    box_attest a, want = attest_fixture();
    assert_int_equal(box_attest_load(&a, path, SID, USER, UID), 0);
    assert_memory_equal(a.secret, want.secret, 32);
    assert_int_equal(box_attest_load(&a, path, SID, USER, NULL), FAWN_EINVAL);
    f = fopen(path, "w");
    fprintf(f, "short\n");
    fclose(f);
    assert_int_equal(box_attest_load(&a, path, SID, USER, UID), FAWN_EINVAL);
    unlink(path);
    assert_int_equal(box_attest_load(&a, path, SID, USER, UID), FAWN_EIO);
    rmdir(dir);
}

/* ---- judging an answer ---- */

static void test_attest_judge(void **state) {
    char proof[65];
    box_attest a = attest_fixture();
    assert_int_equal(box_attest_proof(proof, &a, NONCE), 0);
    json_t *ok = json_pack("{s:s, s:s, s:s}", "proof", proof, "sandbox_id", SID, "pod_uid", UID);
    assert_int_equal(kube_attest_judge(200, ok, proof), SBX_ATTESTED);
    char other[65];
    snprintf(other, sizeof other, "%s", proof);
    other[0] = other[0] == 'a' ? 'b' : 'a';
    json_t *wrong = json_pack("{s:s, s:s, s:s}", "proof", other, "sandbox_id", SID, "pod_uid", UID);
    assert_int_equal(kube_attest_judge(200, wrong, proof), SBX_REFUSED);
    assert_int_equal(kube_attest_judge(404, NULL, proof), SBX_REFUSED);
    assert_int_equal(kube_attest_judge(500, ok, proof), SBX_ATTEST_UNKNOWN);
    assert_int_equal(kube_attest_judge(401, ok, proof), SBX_ATTEST_UNKNOWN);
    assert_int_equal(kube_attest_judge(200, NULL, proof), SBX_ATTEST_UNKNOWN);
    json_t *extra = json_pack("{s:s, s:b}", "proof", proof, "trust_me", 1);
    assert_int_equal(kube_attest_judge(200, extra, proof), SBX_ATTEST_UNKNOWN);
    json_t *short_proof = json_pack("{s:s}", "proof", "abcd");
    assert_int_equal(kube_attest_judge(200, short_proof, proof), SBX_ATTEST_UNKNOWN);
    json_decref(ok);
    json_decref(wrong);
    json_decref(extra);
    json_decref(short_proof);
}

/* ---- API replies ---- */

#define POD_JSON(meta_extra, status)                                                               \
    "{\"kind\": \"Pod\", \"apiVersion\": \"v1\", \"metadata\": {\"name\": \"fawn-" SID             \
    "\", \"uid\": \"" UID "\", \"labels\": {\"fawn.dev/sandbox-id\": \"" SID "\"}" meta_extra      \
    "}, \"spec\": {\"containers\": [{\"name\": \"box\", \"ports\": [{\"name\": \"box\", "          \
    "\"containerPort\": 8080}]}]}, \"status\": " status "}"

static void test_pod_parse(void **state) {
    kube_pod p;
    const char *running = POD_JSON("", "{\"phase\": \"Running\", \"podIP\": \"10.1.2.3\"}");
    assert_int_equal(kube_pod_parse(&p, running, strlen(running)), 0);
    assert_string_equal(p.name, "fawn-" SID);
    assert_string_equal(p.uid, UID);
    assert_string_equal(p.sandbox_id, SID);
    assert_int_equal(p.phase, KUBE_PHASE_RUNNING);
    assert_string_equal(p.pod_ip, "10.1.2.3");
    assert_int_equal(p.box_port, 8080);
    assert_false(p.terminating);
    const char *deleting = POD_JSON(", \"deletionTimestamp\": \"2026-01-01T00:00:00Z\"",
                                    "{\"phase\": \"Running\"}");
    assert_int_equal(kube_pod_parse(&p, deleting, strlen(deleting)), 0);
    assert_true(p.terminating);
    const char *fresh = POD_JSON("", "{}");
    assert_int_equal(kube_pod_parse(&p, fresh, strlen(fresh)), 0);
    assert_int_equal(p.phase, KUBE_PHASE_PENDING);
    const char *v6 = POD_JSON("", "{\"phase\": \"Running\", \"podIP\": \"fd00::5\"}");
    assert_int_equal(kube_pod_parse(&p, v6, strlen(v6)), 0);
    assert_string_equal(p.pod_ip, "fd00::5");
}

static void test_pod_parse_refuses(void **state) {
    const char *bad[] = {
        "",
        "[]",
        "{\"kind\": \"Status\"}",
        POD_JSON("", "{\"phase\": \"Running\", \"podIP\": \"10.1.2.3; rm\"}"),
        POD_JSON("", "{\"phase\": 3}"),
        POD_JSON(", \"uid\": \"not-a-uuid\"", "{}"),
        "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"x\"}}",
        "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"x\", \"uid\": \"" UID
        "\", \"labels\": {\"fawn.dev/sandbox-id\": \"../../etc\"}}}",
        "{\"kind\": \"Pod\", \"metadata\": {\"name\": \"x\", \"uid\": \"" UID
        "\"}, \"spec\": {\"containers\": [{\"name\": \"box\", \"ports\": [{\"name\": \"box\", "
        "\"containerPort\": 70000}]}]}}",
    };
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        kube_pod p;
        POISON(p);
        assert_int_equal(kube_pod_parse(&p, bad[i], strlen(bad[i])), FAWN_EPROTO);
        assert_string_equal(p.name, "");
        assert_string_equal(p.uid, "");
    }
}

typedef struct walk {
    size_t calls;
} walk;

static int on_pod(void *ctx, const kube_pod *pod) {
    ((walk *)ctx)->calls++;
    return strcmp(pod->name, "stop") == 0 ? -77 : 0;
}

static void test_pod_list_parse(void **state) {
    char next[KUBE_CONTINUE_MAX + 1];
    const char *list = "{\"kind\": \"PodList\", \"metadata\": {\"continue\": \"abc=\"}, \"items\": "
                       "[" POD_JSON("", "{}") ", " POD_JSON("", "{\"phase\": \"Running\"}") "]}";
    walk w = {0};
    assert_int_equal(kube_pod_list_parse(next, list, strlen(list), on_pod, &w), 0);
    assert_int_equal(w.calls, 2);
    assert_string_equal(next, "abc=");
    /* One bad item: nothing is reported. */
    const char *bad = "{\"kind\": \"PodList\", \"items\": [" POD_JSON(
        "", "{}") ", {\"kind\": \"Pod\"}]}";
    w = (walk){0};
    POISON(next);
    assert_int_equal(kube_pod_list_parse(next, bad, strlen(bad), on_pod, &w), FAWN_EPROTO);
    assert_int_equal(w.calls, 0);
    assert_string_equal(next, "");
    const char *empty = "{\"kind\": \"PodList\", \"items\": []}";
    assert_int_equal(kube_pod_list_parse(next, empty, strlen(empty), on_pod, &w), 0);
    assert_string_equal(next, "");
    const char *no_items = "{\"kind\": \"PodList\"}";
    assert_int_equal(kube_pod_list_parse(next, no_items, strlen(no_items), on_pod, &w),
                     FAWN_EPROTO);
}

static void test_not_found_is_exact(void **state) {
    const char *nf = "{\"kind\": \"Status\", \"apiVersion\": \"v1\", \"status\": \"Failure\", "
                     "\"reason\": \"NotFound\", \"code\": 404, \"details\": {\"name\": \"fawn-" SID
                     "\", \"kind\": \"pods\"}}";
    assert_true(kube_status_not_found(nf, strlen(nf), "pods", "fawn-" SID));
    assert_false(kube_status_not_found(nf, strlen(nf), "pods", "fawn-0000000000000000"));
    assert_false(kube_status_not_found(nf, strlen(nf), "secrets", "fawn-" SID));
    /* A proxy's 404 page, an empty body, a Status of another reason. */
    assert_false(kube_status_not_found("<html>404</html>", 16, "pods", "fawn-" SID));
    assert_false(kube_status_not_found("", 0, "pods", "fawn-" SID));
    const char *other = "{\"kind\": \"Status\", \"reason\": \"Forbidden\", \"code\": 404, "
                        "\"details\": {\"name\": \"fawn-" SID "\", \"kind\": \"pods\"}}";
    assert_false(kube_status_not_found(other, strlen(other), "pods", "fawn-" SID));
    assert_false(kube_status_not_found(NULL, 0, "pods", "fawn-" SID));
    kube_pod p;
    assert_int_equal(kube_pod_parse(&p, NULL, 0), FAWN_EPROTO);
    const char *no_details = "{\"kind\": \"Status\", \"reason\": \"NotFound\", \"code\": 404}";
    assert_false(kube_status_not_found(no_details, strlen(no_details), "pods", "fawn-" SID));
}

static void test_status_and_version(void **state) {
    char reason[64], message[256], v[64];
    const char *st = "{\"kind\": \"Status\", \"reason\": \"Forbidden\", \"message\": \"no\"}";
    assert_int_equal(kube_status_parse(reason, message, st, strlen(st)), 0);
    assert_string_equal(reason, "Forbidden");
    assert_string_equal(message, "no");
    assert_int_equal(kube_status_parse(reason, message, "{}", 2), FAWN_EPROTO);
    const char *ver = "{\"major\": \"1\", \"minor\": \"30\", \"gitVersion\": \"v1.30.2\"}";
    assert_int_equal(kube_version_parse(v, ver, strlen(ver)), 0);
    assert_string_equal(v, "v1.30.2");
    const char *bad = "{\"gitVersion\": \"1.30\"}";
    assert_int_equal(kube_version_parse(v, bad, strlen(bad)), FAWN_EPROTO);
    assert_string_equal(v, "");
}

/* ---- the capability cache on a fake clock ---- */

typedef struct fake_probe {
    int64_t now;
    int calls;
    int code; /* what the probe returns */
    bool answer;
    /* blocking probes */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool block, entered, release;
} fake_probe;

static int64_t fake_now(void *ctx) { return ((fake_probe *)ctx)->now; }

static int probe_fn(void *ctx, bool *supported, char detail[CAPS_DETAIL_MAX], int timeout_ms) {
    fake_probe *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->calls++;
    f->entered = true;
    pthread_cond_broadcast(&f->cv);
    while (f->block && !f->release)
        pthread_cond_wait(&f->cv, &f->mu);
    int code = f->code;
    *supported = f->answer;
    pthread_mutex_unlock(&f->mu);
    snprintf(detail, CAPS_DETAIL_MAX, "%s", f->answer ? "yes" : "no");
    return code < 0 ? fawn_err(code, "probe failed") : 0;
}

static caps_cache *cache_new(fake_probe *f, int probe_timeout_ms) {
    caps_cache_config cfg = {.positive_ttl_ms = 1000,
                             .negative_ttl_ms = 100,
                             .probe_timeout_ms = probe_timeout_ms,
                             .now_ms = fake_now,
                             .clock_ctx = f};
    caps_cache *c = NULL;
    assert_int_equal(caps_cache_new(&c, &cfg), 0);
    return c;
}

static void fake_init(fake_probe *f) {
    *f = (fake_probe){.now = 1000, .answer = true};
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->cv, NULL);
}

static int get(caps_cache *c, fake_probe *f, bool *yes, const char *id) {
    return caps_cache_get(c, yes, NULL, NULL, id, probe_fn, f);
}

static void test_caps_lifetimes(void **state) {
    fake_probe f;
    fake_init(&f);
    caps_cache *c = cache_new(&f, 5000);
    bool yes = false;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_true(yes);
    f.now += 999;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_int_equal(f.calls, 1); /* cached */
    f.now += 1;
    f.answer = false;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_false(yes);
    assert_int_equal(f.calls, 2); /* the positive answer expired */
    f.now += 99;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_int_equal(f.calls, 2); /* the negative one lives 100 ms */
    f.now += 1;
    f.answer = true;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_true(yes);
    assert_int_equal(f.calls, 3);
    /* Another identity is probed on its own. */
    assert_int_equal(get(c, &f, &yes, "B"), 0);
    assert_int_equal(f.calls, 4);
    caps_cache_free(c);
}

static void test_caps_unknown_is_not_negative(void **state) {
    fake_probe f;
    fake_init(&f);
    caps_cache *c = cache_new(&f, 5000);
    bool yes = true;
    char detail[CAPS_DETAIL_MAX];
    bool probed = false;
    f.code = FAWN_ETIMEDOUT;
    assert_int_equal(caps_cache_get(c, &yes, detail, &probed, "A", probe_fn, &f), FAWN_ETIMEDOUT);
    assert_false(yes);
    assert_true(probed);
    assert_int_equal(get(c, &f, &yes, "A"), FAWN_ETIMEDOUT);
    assert_int_equal(f.calls, 2); /* nothing kept: probed again */
    f.code = 0;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_true(yes);
    /* An unknown answer later does not replace a live confirmed one. */
    f.code = FAWN_EIO;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_int_equal(f.calls, 3);
    caps_cache_free(c);
}

static void test_caps_invalidate(void **state) {
    fake_probe f;
    fake_init(&f);
    caps_cache *c = cache_new(&f, 5000);
    bool yes;
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    caps_cache_invalidate(c, "A");
    caps_cache_invalidate(c, "never-seen");
    assert_int_equal(get(c, &f, &yes, "A"), 0);
    assert_int_equal(f.calls, 2);
    caps_cache_free(c);
}

typedef struct caller {
    caps_cache *c;
    fake_probe *f;
    int r;
    bool yes;
} caller;

static void *caller_main(void *arg) {
    caller *k = arg;
    k->r = get(k->c, k->f, &k->yes, "shared");
    return NULL;
}

/* Concurrent callers share one probe in flight and its answer. */
static void test_caps_single_flight(void **state) {
    fake_probe f;
    fake_init(&f);
    f.block = true;
    caps_cache *c = cache_new(&f, 60000);
    enum { N = 6 };
    caller k[N];
    pthread_t t[N];
    for (int i = 0; i < N; i++)
        k[i] = (caller){.c = c, .f = &f};
    pthread_create(&t[0], NULL, caller_main, &k[0]);
    pthread_mutex_lock(&f.mu);
    while (!f.entered)
        pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
    for (int i = 1; i < N; i++)
        pthread_create(&t[i], NULL, caller_main, &k[i]);
    /* Let the others reach the wait (they may also arrive after the answer:
     * then the cached answer serves them, still without a second probe). */
    usleep(100000);
    pthread_mutex_lock(&f.mu);
    f.release = true;
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    for (int i = 0; i < N; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(k[i].r, 0);
        assert_true(k[i].yes);
    }
    assert_int_equal(f.calls, 1);
    caps_cache_free(c);
}

/* A caller never waits for a shared probe longer than the probe timeout:
 * it gets an unknown answer, while the probe's own caller gets the answer. */
static void test_caps_wait_is_bounded(void **state) {
    fake_probe f;
    fake_init(&f);
    f.block = true;
    caps_cache *c = cache_new(&f, 50);
    caller first = {.c = c, .f = &f}, second = {.c = c, .f = &f};
    pthread_t t;
    pthread_create(&t, NULL, caller_main, &first);
    pthread_mutex_lock(&f.mu);
    while (!f.entered)
        pthread_cond_wait(&f.cv, &f.mu);
    pthread_mutex_unlock(&f.mu);
    caller_main(&second);
    assert_int_equal(second.r, FAWN_ETIMEDOUT);
    assert_false(second.yes);
    pthread_mutex_lock(&f.mu);
    f.release = true;
    pthread_cond_broadcast(&f.cv);
    pthread_mutex_unlock(&f.mu);
    pthread_join(t, NULL);
    assert_int_equal(first.r, 0);
    assert_true(first.yes);
    assert_int_equal(f.calls, 1);
    caps_cache_free(c);
}

static void test_caps_config(void **state) {
    caps_cache *c = (caps_cache *)1;
    caps_cache_config cfg = {.positive_ttl_ms = 0, .negative_ttl_ms = 1, .probe_timeout_ms = 1};
    assert_int_equal(caps_cache_new(&c, &cfg), FAWN_EINVAL);
    assert_null(c);
}

/* ---- configuration ---- */

static const char
    *KUBECONFIG = "apiVersion: v1\n"
                  "kind: Config\n"
                  "current-context: work\n"
                  "contexts:\n"
                  "- name: other\n"
                  "  context: {cluster: c2, user: u2}\n"
                  "- name: work\n"
                  "  context:\n"
                  "    cluster: c1\n"
                  "    user: u1\n"
                  "clusters:\n"
                  "- name: c1\n"
                  "  cluster:\n"
                  "    server: https://10.0.0.1:6443\n"
                  "    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==\n"
                  "- name: c2\n"
                  "  cluster: {server: https://wrong:6443}\n"
                  "users:\n"
                  "- name: u1\n"
                  "  user: {token: sekret-token}\n"
                  "- name: u2\n"
                  "  user: {token: wrong}\n";

static void test_kubeconfig(void **state) {
    kube_provider_config c = {0};
    assert_int_equal(kube_kubeconfig_parse(&c, KUBECONFIG, strlen(KUBECONFIG)), 0);
    assert_string_equal(c.server, "https://10.0.0.1:6443");
    assert_string_equal(c.token, "sekret-token");
    assert_string_equal(c.ca_pem, "-----BEGIN CERTIFICATE-----\n");
    kube_config_free(&c);
    const char *no_user = "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: "
                          "u}\nclusters:\n- name: c\n  cluster: {server: https://x}\nusers: []\n";
    assert_int_equal(kube_kubeconfig_parse(&c, no_user, strlen(no_user)), FAWN_ECONFIG);
    kube_config_free(&c);
    const char *certs = "current-context: a\ncontexts:\n- name: a\n  context: {cluster: c, user: "
                        "u}\nclusters:\n- name: c\n  cluster: {server: https://x}\nusers:\n- name: "
                        "u\n  user: {client-certificate: /x}\n";
    assert_int_equal(kube_kubeconfig_parse(&c, certs, strlen(certs)), FAWN_ECONFIG);
    kube_config_free(&c);
    const char *alias = "a: &x {b: 1}\nc: *x\n";
    assert_int_equal(kube_kubeconfig_parse(&c, alias, strlen(alias)), FAWN_ECONFIG);
    kube_config_free(&c);
}

static int config_with(kube_provider_config *kc, const char *section) {
    char yaml[2048];
    snprintf(yaml, sizeof yaml, "sandbox:\n  provider: kubernetes\n  kubernetes:\n%s", section);
    fawn_config cfg = {0};
    int r = config_load_string(&cfg, yaml, strlen(yaml));
    if (r == 0)
        r = kube_config_from(kc, &cfg);
    config_free(&cfg);
    return r;
}

static void test_config_section(void **state) {
    kube_provider_config kc;
    assert_int_equal(config_with(&kc, "    server: http://127.0.0.1:6443\n"
                                      "    token_file: /t\n"
                                      "    image: fawn-box:1\n"
                                      "    namespace: sandboxes\n"
                                      "    capability_ttl_s: 7\n"),
                     0);
    assert_string_equal(kc.namespace_, "sandboxes");
    assert_int_equal(kc.caps_positive_ttl_ms, 7000);
    assert_int_equal(kc.caps_negative_ttl_ms, 30000);
    assert_int_equal(kc.box_port, 8080);
    kube_config_free(&kc);
    /* A bearer token never goes in clear to a non-loopback address. */
    assert_int_equal(config_with(&kc, "    server: http://10.0.0.1:6443\n    token_file: /t\n"
                                      "    image: i\n"),
                     FAWN_ECONFIG);
    assert_int_equal(config_with(&kc, "    server: https://api/path\n    token_file: /t\n"
                                      "    image: i\n"),
                     FAWN_ECONFIG);
    assert_int_equal(config_with(&kc, "    server: https://api\n    token_file: /t\n"),
                     FAWN_ECONFIG); /* no image */
    assert_int_equal(config_with(&kc, "    server: https://api\n    token_file: /t\n    image: i\n"
                                      "    namespace: Bad_Name\n"),
                     FAWN_ECONFIG);
    assert_int_equal(config_with(&kc, "    server: https://api\n    token_file: /t\n    image: i\n"
                                      "    colour: blue\n"),
                     FAWN_ECONFIG);
    assert_int_equal(config_with(&kc, "    server: https://api\n    image: i\n"), FAWN_ECONFIG);
}

static void test_manifest_is_hardened(void **state) {
    kube_provider_config kc = {.namespace_ = "ns",
                               .image = "img",
                               .box_port = 8080,
                               .memory_mb = 512,
                               .disk_mb = 1024,
                               .tmp_mb = 64,
                               .idle_exit_s = 600,
                               .runtime_class = "gvisor"};
    json_t *pod = kube_pod_manifest(&kc, SID, USER, "t1");
    assert_non_null(pod);
    const json_t *spec = json_object_get(pod, "spec");
    const json_t *c = json_array_get(json_object_get(spec, "containers"), 0);
    const json_t *sc = json_object_get(c, "securityContext");
    assert_true(json_is_false(json_object_get(spec, "automountServiceAccountToken")));
    assert_true(json_is_false(json_object_get(spec, "enableServiceLinks")));
    assert_string_equal(json_string_value(json_object_get(spec, "runtimeClassName")), "gvisor");
    assert_true(
        json_is_true(json_object_get(json_object_get(spec, "securityContext"), "runAsNonRoot")));
    assert_true(json_is_false(json_object_get(sc, "allowPrivilegeEscalation")));
    assert_true(json_is_true(json_object_get(sc, "readOnlyRootFilesystem")));
    assert_true(json_is_false(json_object_get(sc, "privileged")));
    assert_string_equal(json_string_value(json_array_get(
                            json_object_get(json_object_get(sc, "capabilities"), "drop"), 0)),
                        "ALL");
    assert_string_equal(
        json_string_value(json_object_get(json_object_get(sc, "seccompProfile"), "type")),
        "RuntimeDefault");
    const json_t *limits = json_object_get(json_object_get(c, "resources"), "limits");
    assert_string_equal(json_string_value(json_object_get(limits, "memory")), "512Mi");
    assert_string_equal(json_string_value(json_object_get(limits, "ephemeral-storage")), "1088Mi");
    _cleanup_free_ char *text = fjson_dump(pod);
    check_contains("manifest", text, "\"fieldPath\":\"metadata.uid\"");
    check_contains("manifest", text, "\"--attest-file\",\"/var/run/fawn/attest\"");
    check_contains("manifest", text, "\"fawn.dev/sandbox-id\":\"" SID "\"");
    json_decref(pod);
}

/* With broker.clis, pods get the relay's address and the CLIs' names. */
static void test_config_broker(void **state) {
    (void)state;
    const char *base = "sandbox:\n  provider: kubernetes\n  kubernetes:\n"
                       "    server: http://127.0.0.1:6443\n    token_file: /t\n    image: i\n";
    const char *clis = "broker:\n  listen: 0.0.0.0:7070\n  clis:\n"
                       "  - {name: lark-cli, binary: /bin/true, allow: [a]}\n"
                       "  - {name: gh, binary: /bin/true, allow: [a]}\n";
    kube_provider_config kc;
    fawn_config cfg = {0};
    char *yaml = strf("%s%s", base, clis);
    assert_int_equal(config_load_string(&cfg, yaml, strlen(yaml)), 0);
    assert_int_equal(kube_config_from(&kc, &cfg), FAWN_ECONFIG); /* where do pods dial? */
    check_contains("message", fawn_errmsg(), "broker_address");
    config_free(&cfg);
    free(yaml);
    yaml = strf("%s    broker_address: fawn-broker.fawn.svc:7070\n%s", base, clis);
    assert_int_equal(config_load_string(&cfg, yaml, strlen(yaml)), 0);
    assert_int_equal(kube_config_from(&kc, &cfg), 0);
    assert_string_equal(kc.broker_clis, "lark-cli,gh");
    json_t *pod = kube_pod_manifest(&kc, SID, USER, "t1");
    _cleanup_free_ char *text = fjson_dump(pod);
    check_contains("manifest", text,
                   "\"--broker\",\"fawn-broker.fawn.svc:7070\",\"--broker-clis\",\"lark-cli,gh\"");
    json_decref(pod);
    kube_config_free(&kc);
    config_free(&cfg);
    free(yaml);
    /* Without broker.clis, no relay. */
    assert_int_equal(config_load_string(&cfg, base, strlen(base)), 0);
    assert_int_equal(kube_config_from(&kc, &cfg), 0);
    assert_null(kc.broker_clis);
    kube_config_free(&kc);
    config_free(&cfg);
}

#define SHA "5d41402abc4b2a76b9719d911017c592aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
#define SHA2 "5d41402abc4b2a76b9719d911017c592bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"
#define GEN "0f8a2c345b6d4e7f8a9b0c1d2e3f4a5b"
#define POD_IP "10.1.2.3"

/* A broker call's MAC as a pod's relay makes it, from the secret key
 * derives for (sandbox_id, user, pod_uid). */
static void call_mac(char out[65], uint8_t key_byte, const char *sandbox_id, const char *user,
                     const char *pod_uid, int64_t timestamp) {
    uint8_t key[BOX_ATTEST_KEY_BYTES];
    memset(key, key_byte, sizeof key);
    box_attest a = {0};
    snprintf(a.sandbox_id, sizeof a.sandbox_id, "%s", sandbox_id);
    snprintf(a.user, sizeof a.user, "%s", user);
    snprintf(a.pod_uid, sizeof a.pod_uid, "%s", pod_uid);
    assert_int_equal(box_attest_pod_secret(a.secret, key, sandbox_id, user, pod_uid), 0);
    assert_int_equal(box_attest_call_mac(out, &a, timestamp, NONCE, SHA), 0);
}

/* The broker's judgement of a pod's call: the MAC must be the one this
 * gateway's key gives for the record's sandbox, user and pod, over this
 * request at this time, and come from the pod's IP. */
static void test_broker_caller_judge(void **state) {
    (void)state;
    uint8_t key[BOX_ATTEST_KEY_BYTES];
    memset(key, 7, sizeof key);
    char mac[65], bad[65];
    call_mac(mac, 7, SID, USER, UID, 1000);
    sbx_remote_caller c = {.sandbox_id = SID,
                           .generation = GEN,
                           .user = USER,
                           .address = POD_IP,
                           .timestamp = 1000,
                           .nonce = NONCE,
                           .mac = mac,
                           .request_sha256 = SHA};
    assert_int_equal(kube_caller_judge(key, &c, UID, POD_IP), SBX_ATTESTED);
    /* From the pod's address, every wrong binding is refused: the pod lied. */
    const struct {
        uint8_t key;
        const char *sandbox_id, *user, *pod_uid;
    } wrong[] = {
        {8, SID, USER, UID},                                    /* another secret */
        {7, "fedcba9876543210", USER, UID},                     /* another sandbox */
        {7, SID, "mallory", UID},                               /* another user */
        {7, SID, USER, "11111111-2222-4333-8444-555555555555"}, /* another pod UID */
    };
    for (size_t i = 0; i < ARRAY_LEN(wrong); i++) {
        call_mac(bad, wrong[i].key, wrong[i].sandbox_id, wrong[i].user, wrong[i].pod_uid, 1000);
        c.mac = bad;
        assert_int_equal(kube_caller_judge(key, &c, UID, POD_IP), SBX_REFUSED);
    }
    /* The right MAC for another request or another time proves nothing. */
    c.mac = mac;
    c.request_sha256 = SHA2;
    assert_int_equal(kube_caller_judge(key, &c, UID, POD_IP), SBX_REFUSED);
    c.request_sha256 = SHA;
    c.timestamp = 1001;
    assert_int_equal(kube_caller_judge(key, &c, UID, POD_IP), SBX_REFUSED);
    c.timestamp = 1000;
    /* Malformed MACs, from the pod: refused. */
    const char *malformed[] = {"", "00", "zz", NULL};
    for (size_t i = 0; malformed[i]; i++) {
        c.mac = malformed[i];
        assert_int_equal(kube_caller_judge(key, &c, UID, POD_IP), SBX_REFUSED);
    }
    c.mac = mac;
    /* The pod's proof from elsewhere (its secret left the pod), or for a
     * pod the API no longer has under that UID: refused. */
    assert_int_equal(kube_caller_judge(key, &c, UID, "10.1.2.4"), SBX_REFUSED);
    assert_int_equal(kube_caller_judge(key, &c, "11111111-2222-4333-8444-555555555555", POD_IP),
                     SBX_REFUSED);
    assert_int_equal(kube_caller_judge(key, &c, NULL, NULL), SBX_REFUSED);
    /* The same address spelled as IPv6 maps to the pod's. */
    c.address = "::ffff:10.1.2.3";
    assert_int_equal(kube_caller_judge(key, &c, UID, "::ffff:10.1.2.3"), SBX_ATTESTED);
    /* A wrong proof from another address ties the call to no sandbox. */
    c.address = "10.9.9.9";
    c.mac = bad;
    assert_int_equal(kube_caller_judge(key, &c, UID, POD_IP), SBX_ATTEST_UNKNOWN);
    /* A malformed generation in a record never attests. */
    c.address = POD_IP;
    c.mac = mac;
    c.generation = "not-a-generation";
    assert_int_not_equal(kube_caller_judge(key, &c, UID, POD_IP), SBX_ATTESTED);
}

/* A pod's attestation and generation cross the launch helper's exec. */
static void test_launch_spec_carries_attestation(void **state) {
    fawn_config cfg = {0};
    assert_int_equal(config_defaults(&cfg), 0);
    box_attest a = attest_fixture();
    local_launch_spec spec = {.cfg = &cfg,
                              .sandbox_id = SID,
                              .user_data = "/tmp/x",
                              .token = "t",
                              .attest = &a,
                              .generation = "0f8a2c345b6d4e7f8a9b0c1d2e3f4a5b"};
    json_t *j = launch_spec_to_json(&spec);
    _cleanup_free_ char *text = fjson_dump(j);
    launch_spec_copy copy;
    assert_int_equal(launch_spec_from_json(&copy, text, strlen(text)), 0);
    assert_non_null(copy.spec.attest);
    assert_memory_equal(copy.spec.attest->secret, a.secret, sizeof a.secret);
    assert_string_equal(copy.spec.attest->pod_uid, UID);
    assert_string_equal(copy.spec.generation, "0f8a2c345b6d4e7f8a9b0c1d2e3f4a5b");
    launch_spec_free(&copy);
    /* Without: none, and a random generation. */
    spec.attest = NULL;
    spec.generation = NULL;
    json_decref(j);
    j = launch_spec_to_json(&spec);
    free(text);
    text = fjson_dump(j);
    assert_int_equal(launch_spec_from_json(&copy, text, strlen(text)), 0);
    assert_null(copy.spec.attest);
    assert_null(copy.spec.generation);
    launch_spec_free(&copy);
    /* A malformed one is refused. */
    json_object_set_new(j, "generation", json_string("../../etc/passwd"));
    free(text);
    text = fjson_dump(j);
    assert_int_equal(launch_spec_from_json(&copy, text, strlen(text)), FAWN_EINVAL);
    json_decref(j);
    config_free(&cfg);
}

int main(void) {
    if (sodium_init() < 0)
        return 1;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_proof_is_hmac_of_the_binding),
        cmocka_unit_test(test_proof_changes_with_every_field),
        cmocka_unit_test(test_proof_refuses_bad_input),
        cmocka_unit_test(test_proof_equal_is_strict),
        cmocka_unit_test(test_pod_secret_and_token_are_bound),
        cmocka_unit_test(test_generation_is_the_uid),
        cmocka_unit_test(test_request_parse),
        cmocka_unit_test(test_attest_load),
        cmocka_unit_test(test_attest_judge),
        cmocka_unit_test(test_pod_parse),
        cmocka_unit_test(test_pod_parse_refuses),
        cmocka_unit_test(test_pod_list_parse),
        cmocka_unit_test(test_not_found_is_exact),
        cmocka_unit_test(test_status_and_version),
        cmocka_unit_test(test_caps_lifetimes),
        cmocka_unit_test(test_caps_unknown_is_not_negative),
        cmocka_unit_test(test_caps_invalidate),
        cmocka_unit_test(test_caps_single_flight),
        cmocka_unit_test(test_caps_wait_is_bounded),
        cmocka_unit_test(test_caps_config),
        cmocka_unit_test(test_kubeconfig),
        cmocka_unit_test(test_config_section),
        cmocka_unit_test(test_manifest_is_hardened),
        cmocka_unit_test(test_launch_spec_carries_attestation),
        cmocka_unit_test(test_config_broker),
        cmocka_unit_test(test_broker_caller_judge),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
