/* The fault-injecting sandbox provider (see fake_provider.h). */
#include "fake_provider.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/base.h"

/* Distinct generations with a health answer of their own, call faults set
 * at once, and box API requests remembered for counting: far more than any
 * test sets; past them new entries are ignored (counts then come out low,
 * which a test sees as a failure, never as a pass). */
#define FAKE_HEALTH_RULES_MAX 64
#define FAKE_CALL_FAULTS_MAX 16
#define FAKE_CALL_LOG_MAX 4096
/* How often a slow create looks at its cancel flag: fine enough that a
 * cancelled create ends within a few milliseconds. */
#define FAKE_CANCEL_POLL_MS 2
/* How often a waiting exec looks at its box. */
#define FAKE_EXEC_POLL_MS 5

enum fake_state { FAKE_RUNNING, FAKE_STOPPED, FAKE_TERMINATING, FAKE_PENDING };

typedef struct fake_box {
    bool used;
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
    enum fake_state state;
    char sessions[FAKE_SESSIONS_MAX][SBX_SESSION_ID_MAX + 1];
    int nsessions;
    unsigned stops; /* sessions killed or deleted so far: ends waiting execs */
} fake_box;

typedef struct health_rule {
    char generation[SBX_GENERATION_LEN + 1];
    int code;
} health_rule;

typedef struct call_fault {
    char method[16];
    char prefix[256];
    int times;
    int code;
} call_fault;

typedef struct call_record {
    char method[16];
    char path[256];
} call_record;

typedef struct inflight {
    char sandbox_id[17];
    int creates;
    int ops;
} inflight;

struct fake_provider {
    sbx_provider iface;
    pthread_mutex_t mu;
    pthread_cond_t changed; /* creates were held or released */
    fake_box boxes[FAKE_BOXES_MAX];

    int create_error;
    int create_delay_ms;
    bool honor_cancel;
    char next_generation[SBX_GENERATION_LEN + 1];
    health_rule health[FAKE_HEALTH_RULES_MAX];
    int nhealth;
    int destroy_fail_times;
    int destroy_fail_code;
    bool destroy_partial;
    bool probe_unknown;
    int list_error;
    call_fault faults[FAKE_CALL_FAULTS_MAX];
    int nfaults;
    bool exec_waits;
    enum sbx_attestation attestation; /* what every box answers, with attest set */
    bool hold;                        /* creates stop in create_wait until released */
    int held;                         /* creates stopped there now */

    fake_counts counts;
    call_record log[FAKE_CALL_LOG_MAX];
    int nlog;
    char last_session[SBX_SESSION_ID_MAX + 1];
    inflight running[FAKE_BOXES_MAX];
    int creates_now;
    int max_creates_id, max_creates_all, max_ops_id;
};

/* ---- helpers (called with f->mu held unless said otherwise) ---- */

static void sleep_ms(int ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0)
        ;
}

static fake_box *box_find(fake_provider *f, const char *sandbox_id) {
    for (size_t i = 0; i < FAKE_BOXES_MAX; i++)
        if (f->boxes[i].used && strcmp(f->boxes[i].sandbox_id, sandbox_id) == 0)
            return &f->boxes[i];
    return NULL;
}

/* sandbox_id's box, emptied and reset (a new one in a free slot when none). */
static fake_box *box_fresh(fake_provider *f, const char *sandbox_id) {
    fake_box *b = box_find(f, sandbox_id);
    for (size_t i = 0; !b && i < FAKE_BOXES_MAX; i++)
        if (!f->boxes[i].used)
            b = &f->boxes[i];
    if (!b)
        return NULL;
    memset(b, 0, sizeof *b);
    b->used = true;
    snprintf(b->sandbox_id, sizeof b->sandbox_id, "%s", sandbox_id);
    return b;
}

static int health_rule_of(fake_provider *f, const char *generation) {
    for (int i = 0; i < f->nhealth; i++)
        if (strcmp(f->health[i].generation, generation) == 0)
            return f->health[i].code;
    return 0;
}

static inflight *inflight_of(fake_provider *f, const char *sandbox_id) {
    inflight *free_slot = NULL;
    for (size_t i = 0; i < FAKE_BOXES_MAX; i++) {
        inflight *s = &f->running[i];
        if ((s->creates || s->ops) && strcmp(s->sandbox_id, sandbox_id) == 0)
            return s;
        if (!free_slot && !s->creates && !s->ops)
            free_slot = s;
    }
    if (free_slot)
        snprintf(free_slot->sandbox_id, sizeof free_slot->sandbox_id, "%s", sandbox_id);
    return free_slot;
}

static int max_int(int a, int b) { return a > b ? a : b; }

/* Takes the lock and records that a lifecycle operation on sandbox_id began. */
static void op_begin(fake_provider *f, const char *sandbox_id, bool is_create) {
    pthread_mutex_lock(&f->mu);
    inflight *s = inflight_of(f, sandbox_id);
    if (s) {
        s->ops++;
        f->max_ops_id = max_int(f->max_ops_id, s->ops);
        if (is_create) {
            s->creates++;
            f->max_creates_id = max_int(f->max_creates_id, s->creates);
        }
    }
    if (is_create) {
        f->creates_now++;
        f->max_creates_all = max_int(f->max_creates_all, f->creates_now);
    }
}

/* Records that it ended and drops the lock. */
static void op_end(fake_provider *f, const char *sandbox_id, bool is_create) {
    inflight *s = inflight_of(f, sandbox_id);
    if (s) {
        s->ops--;
        if (is_create)
            s->creates--;
    }
    if (is_create)
        f->creates_now--;
    pthread_mutex_unlock(&f->mu);
}

static bool cancelled(const sbx_cancel *cancel) {
    return cancel && atomic_load(&cancel->cancelled);
}

static void box_fill(sbx_box *out, const fake_box *b) {
    memset(out, 0, sizeof *out);
    snprintf(out->sandbox_id, sizeof out->sandbox_id, "%s", b->sandbox_id);
    snprintf(out->generation, sizeof out->generation, "%s", b->generation);
    snprintf(out->endpoint, sizeof out->endpoint, "unix:/nonexistent/fake-%s.sock", b->sandbox_id);
}

static void deadline_in(struct timespec *ts, int ms) {
    clock_gettime(CLOCK_MONOTONIC, ts);
    ts->tv_sec += ms / 1000;
    ts->tv_nsec += (long)(ms % 1000) * 1000000L;
    if (ts->tv_nsec >= 1000000000L) {
        ts->tv_sec++;
        ts->tv_nsec -= 1000000000L;
    }
}

/* While creates are held (fake_hold_creates): counts this one as held and
 * waits, lock held, until they are released or (when honored) cancel is
 * set. False when the cancel ended the wait. */
static bool create_hold(fake_provider *f, const sbx_cancel *cancel, bool honor) {
    if (!f->hold)
        return true;
    f->held++;
    pthread_cond_broadcast(&f->changed);
    int64_t deadline = fawn_now_ms() + FAKE_HOLD_MAX_MS;
    while (f->hold && !(honor && cancelled(cancel)) && fawn_now_ms() < deadline) {
        struct timespec until;
        deadline_in(&until, FAKE_CANCEL_POLL_MS);
        pthread_cond_timedwait(&f->changed, &f->mu, &until);
    }
    f->held--;
    return !(honor && cancelled(cancel));
}

/* Waits while creates are held, then the create delay without the lock (it
 * is held on entry and on return). False when the wait was cancelled and
 * honored. */
static bool create_wait(fake_provider *f, const sbx_cancel *cancel) {
    int delay = f->create_delay_ms;
    bool honor = f->honor_cancel;
    if (!create_hold(f, cancel, honor))
        return false;
    pthread_mutex_unlock(&f->mu);
    bool completed = true;
    for (int waited = 0; waited < delay; waited += FAKE_CANCEL_POLL_MS) {
        if (honor && cancelled(cancel)) {
            completed = false;
            break;
        }
        sleep_ms(FAKE_CANCEL_POLL_MS);
    }
    if (completed && honor && cancelled(cancel))
        completed = false;
    pthread_mutex_lock(&f->mu);
    return completed;
}

/* ---- the provider operations ---- */

static int fake_create(void *ctx, sbx_box *out, const char *user, const char *thread,
                       const sbx_cancel *cancel) {
    fake_provider *f = ctx;
    if (!fawn_id_valid(user) || !fawn_id_valid(thread))
        return fawn_err(FAWN_EINVAL, "fake create: bad user or thread");
    char id[17];
    fake_sandbox_id(id, user, thread);
    op_begin(f, id, true);
    f->counts.creates++;
    fake_box *b = box_find(f, id);
    if (b && b->state == FAKE_RUNNING && health_rule_of(f, b->generation) == 0) {
        box_fill(out, b); /* it already answers: handed back as it is */
        op_end(f, id, true);
        return 0;
    }
    if (f->create_error) {
        int code = f->create_error;
        bool completed = create_wait(f, cancel);
        op_end(f, id, true);
        if (!completed)
            return fawn_err(FAWN_ECANCELED, "fake create cancelled");
        return fawn_err(code, "fake create failed");
    }
    if (!(b = box_fresh(f, id))) {
        op_end(f, id, true);
        return fawn_err(FAWN_E2BIG, "fake provider full");
    }
    if (f->next_generation[0]) {
        snprintf(b->generation, sizeof b->generation, "%s", f->next_generation);
        f->next_generation[0] = '\0';
    } else {
        fawn_random_hex(b->generation, SBX_GENERATION_LEN / 2);
    }
    b->state = FAKE_PENDING;
    char generation[SBX_GENERATION_LEN + 1];
    snprintf(generation, sizeof generation, "%s", b->generation);
    bool completed = create_wait(f, cancel);
    b = box_find(f, id);
    bool ours = b && strcmp(b->generation, generation) == 0;
    if (!completed) {
        if (ours)
            b->used = false;
        op_end(f, id, true);
        return fawn_err(FAWN_ECANCELED, "fake create cancelled");
    }
    if (!ours || b->state != FAKE_PENDING) {
        op_end(f, id, true);
        return fawn_err(FAWN_EIO, "fake box vanished while starting");
    }
    b->state = FAKE_RUNNING;
    f->counts.creates_done++;
    box_fill(out, b);
    op_end(f, id, true);
    return 0;
}

static int fake_probe(void *ctx, enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                      const char *sandbox_id) {
    fake_provider *f = ctx;
    op_begin(f, sandbox_id, false);
    f->counts.probes++;
    generation[0] = '\0';
    fake_box *b = box_find(f, sandbox_id);
    if (f->probe_unknown)
        *state = SBX_UNKNOWN;
    else if (!b)
        *state = SBX_ABSENT;
    else if (b->state == FAKE_RUNNING) {
        *state = SBX_RUNNING;
        snprintf(generation, SBX_GENERATION_LEN + 1, "%s", b->generation);
    } else {
        *state = b->state == FAKE_STOPPED       ? SBX_STOPPED
                 : b->state == FAKE_TERMINATING ? SBX_TERMINATING
                                                : SBX_PENDING;
    }
    op_end(f, sandbox_id, false);
    return 0;
}

static int fake_health(void *ctx, const sbx_box *box) {
    fake_provider *f = ctx;
    op_begin(f, box->sandbox_id, false);
    f->counts.health_checks++;
    int rule = health_rule_of(f, box->generation);
    fake_box *b = box_find(f, box->sandbox_id);
    bool alive = b && b->state == FAKE_RUNNING && strcmp(b->generation, box->generation) == 0;
    op_end(f, box->sandbox_id, false);
    if (rule == FAWN_ENOENT || (rule == 0 && !alive))
        return fawn_err(FAWN_ENOENT, "fake box does not answer");
    if (rule)
        return fawn_err(rule, "fake health check failed");
    return 0;
}

static int fake_destroy(void *ctx, const char *sandbox_id, const char *generation) {
    fake_provider *f = ctx;
    op_begin(f, sandbox_id, false);
    f->counts.destroys++;
    fake_box *b = box_find(f, sandbox_id);
    bool match = b && (!generation[0] || strcmp(b->generation, generation) == 0);
    if (f->destroy_fail_times != 0) {
        if (f->destroy_fail_times > 0)
            f->destroy_fail_times--;
        int code = f->destroy_fail_code;
        if (match && f->destroy_partial) {
            b->state = FAKE_TERMINATING;
            b->nsessions = 0;
        }
        op_end(f, sandbox_id, false);
        return fawn_err(code, "fake destroy failed");
    }
    if (match) {
        b->used = false;
        f->counts.destroys_done++;
    }
    op_end(f, sandbox_id, false);
    return 0;
}

typedef struct listed {
    char sandbox_id[17];
    char generation[SBX_GENERATION_LEN + 1];
} listed;

static int fake_list(void *ctx,
                     int (*each)(void *each_ctx, const char *sandbox_id, const char *generation),
                     void *each_ctx) {
    fake_provider *f = ctx;
    listed *all = calloc(FAKE_BOXES_MAX, sizeof *all);
    if (!all)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    size_t n = 0;
    pthread_mutex_lock(&f->mu);
    f->counts.lists++;
    int err = f->list_error;
    for (size_t i = 0; !err && i < FAKE_BOXES_MAX; i++) {
        if (!f->boxes[i].used)
            continue;
        memcpy(all[n].sandbox_id, f->boxes[i].sandbox_id, sizeof all[n].sandbox_id);
        memcpy(all[n].generation, f->boxes[i].generation, sizeof all[n].generation);
        n++;
    }
    pthread_mutex_unlock(&f->mu);
    int r = err ? fawn_err(err, "fake list failed") : 0;
    for (size_t i = 0; !r && i < n; i++)
        r = each(each_ctx, all[i].sandbox_id, all[i].generation);
    free(all);
    return r;
}

static call_fault *call_fault_of(fake_provider *f, const char *method, const char *path) {
    for (int i = 0; i < f->nfaults; i++) {
        call_fault *c = &f->faults[i];
        if (c->times > 0 && strcmp(c->method, method) == 0 &&
            strncmp(path, c->prefix, strlen(c->prefix)) == 0)
            return c;
    }
    return NULL;
}

static json_t *session_create(fake_provider *f, fake_box *b, const json_t *body, int *status) {
    const char *id = json_string_value(json_object_get(body, "id"));
    char generated[SBX_SESSION_ID_MAX + 1];
    if (!id) {
        snprintf(generated, sizeof generated, "s-");
        fawn_random_hex(generated + 2, 8);
        id = generated;
    }
    snprintf(f->last_session, sizeof f->last_session, "%s", id);
    for (int i = 0; i < b->nsessions; i++)
        if (strcmp(b->sessions[i], id) == 0) {
            *status = 200;
            return json_pack("{s:s, s:b}", "id", id, "existed", 1);
        }
    if (b->nsessions == FAKE_SESSIONS_MAX || strlen(id) > SBX_SESSION_ID_MAX) {
        *status = 413;
        return json_pack("{s:s}", "error", "too_large");
    }
    snprintf(b->sessions[b->nsessions++], SBX_SESSION_ID_MAX + 1, "%s", id);
    f->counts.sessions_created++;
    *status = 200;
    return json_pack("{s:s, s:b}", "id", id, "existed", 0);
}

static int session_index(const fake_box *b, const char *id, size_t id_len) {
    for (int i = 0; i < b->nsessions; i++)
        if (strlen(b->sessions[i]) == id_len && strncmp(b->sessions[i], id, id_len) == 0)
            return i;
    return -1;
}

static json_t *not_found(int *status) {
    *status = 404;
    return json_pack("{s:s}", "error", "not_found");
}

static json_t *session_delete(fake_provider *f, fake_box *b, const char *id, int *status) {
    int i = session_index(b, id, strlen(id));
    if (i < 0)
        return not_found(status);
    memmove(b->sessions[i], b->sessions[b->nsessions - 1], sizeof b->sessions[i]);
    b->nsessions--;
    b->stops++;
    f->counts.sessions_deleted++;
    *status = 200;
    return json_object();
}

/* POST /v1/shell/sessions/{id}/kill (rest = "{id}/kill") */
static json_t *session_kill(fake_box *b, const char *rest, int *status) {
    const char *slash = strchr(rest, '/');
    if (!slash || strcmp(slash, "/kill") != 0 || session_index(b, rest, slash - rest) < 0)
        return not_found(status);
    b->stops++;
    *status = 200;
    return json_pack("{s:b}", "ok", 1);
}

static json_t *session_list(const fake_box *b, int *status) {
    json_t *list = json_array();
    for (int i = 0; i < b->nsessions; i++)
        json_array_append_new(list, json_pack("{s:s}", "id", b->sessions[i]));
    *status = 200;
    return json_pack("{s:o}", "sessions", list);
}

static json_t *box_answer(fake_provider *f, fake_box *b, const char *method, const char *path,
                          const json_t *body, int *status) {
    static const char sessions[] = "/v1/shell/sessions";
    size_t n = strlen(sessions);
    bool one = strncmp(path, sessions, n) == 0 && path[n] == '/';
    if (strcmp(method, "POST") == 0 && strcmp(path, sessions) == 0)
        return session_create(f, b, body, status);
    if (strcmp(method, "GET") == 0 && strcmp(path, sessions) == 0)
        return session_list(b, status);
    if (strcmp(method, "DELETE") == 0 && one)
        return session_delete(f, b, path + n + 1, status);
    if (strcmp(method, "POST") == 0 && one)
        return session_kill(b, path + n + 1, status);
    *status = 200;
    if (strcmp(method, "GET") == 0 && strcmp(path, "/v1/sandbox") == 0)
        return json_pack("{s:b, s:s}", "ready", 1, "generation", b->generation);
    return json_object();
}

/* A waiting exec (fake_set_exec_waits): polls, without the lock (held on
 * entry and on return), until a session of sandbox_id's box is stopped or
 * the box is gone. */
static json_t *exec_wait(fake_provider *f, const char *sandbox_id, int *status) {
    fake_box *b = box_find(f, sandbox_id);
    char generation[SBX_GENERATION_LEN + 1];
    snprintf(generation, sizeof generation, "%s", b->generation);
    unsigned stops = b->stops;
    bool stopped = false;
    f->counts.execs_waited++;
    for (int waited = 0; !stopped && waited < FAKE_EXEC_WAIT_MAX_MS; waited += FAKE_EXEC_POLL_MS) {
        pthread_mutex_unlock(&f->mu);
        sleep_ms(FAKE_EXEC_POLL_MS);
        pthread_mutex_lock(&f->mu);
        b = box_find(f, sandbox_id);
        stopped = !b || b->state != FAKE_RUNNING || strcmp(b->generation, generation) != 0 ||
                  b->stops != stops;
    }
    *status = 200;
    return json_pack("{s:s, s:i, s:s, s:s}", "status", stopped ? "killed" : "timeout", "exit_code",
                     stopped ? 137 : 124, "stdout", "", "stderr", "");
}

static int fake_call(void *ctx, json_t **reply, int *status, const sbx_box *box, const char *method,
                     const char *path, const json_t *body, int timeout_ms) {
    fake_provider *f = ctx;
    *reply = NULL;
    *status = 0;
    pthread_mutex_lock(&f->mu);
    f->counts.calls++;
    if (f->nlog < FAKE_CALL_LOG_MAX) {
        snprintf(f->log[f->nlog].method, sizeof f->log[f->nlog].method, "%s", method);
        snprintf(f->log[f->nlog].path, sizeof f->log[f->nlog].path, "%s", path);
        f->nlog++;
    }
    fake_box *b = box_find(f, box->sandbox_id);
    if (!b || b->state != FAKE_RUNNING) {
        pthread_mutex_unlock(&f->mu);
        return fawn_err(FAWN_EIO, "fake box unreachable");
    }
    int st = 0;
    bool waits = f->exec_waits && strcmp(method, "POST") == 0 &&
                 strcmp(path, "/v1/shell/exec") == 0 && json_object_get(body, "session_id");
    json_t *answer = waits ? exec_wait(f, box->sandbox_id, &st)
                           : box_answer(f, b, method, path, body, &st);
    call_fault *fault = call_fault_of(f, method, path);
    int code = fault ? fault->code : 0;
    if (fault)
        fault->times--;
    pthread_mutex_unlock(&f->mu);
    if (code) {
        json_decref(answer);
        return fawn_err(code, "fake exchange broke midway");
    }
    *reply = answer;
    *status = st;
    return 0;
}

static int fake_attest(void *ctx, enum sbx_attestation *out, const sbx_box *box, const char *user) {
    fake_provider *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->counts.attests++;
    *out = f->attestation;
    pthread_mutex_unlock(&f->mu);
    return 0;
}

/* ---- life ---- */

fake_provider *fake_provider_new(void) {
    fake_provider *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    pthread_mutex_init(&f->mu, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&f->changed, &attr);
    pthread_condattr_destroy(&attr);
    f->honor_cancel = true;
    f->iface = (sbx_provider){.name = "fake",
                              .ctx = f,
                              .create = fake_create,
                              .probe = fake_probe,
                              .health = fake_health,
                              .destroy = fake_destroy,
                              .list = fake_list,
                              .call = fake_call};
    return f;
}

void fake_provider_free(fake_provider *f) {
    if (!f)
        return;
    pthread_cond_destroy(&f->changed);
    pthread_mutex_destroy(&f->mu);
    free(f);
}

sbx_provider *fake_provider_iface(fake_provider *f) { return &f->iface; }

void fake_sandbox_id(char out[17], const char *user, const char *thread) {
    char key[160], hex[65];
    int n = snprintf(key, sizeof key, "%s:%s", user, thread);
    fawn_sha256_hex(hex, key, n > 0 && (size_t)n < sizeof key ? (size_t)n : 0);
    memcpy(out, hex, 16);
    out[16] = '\0';
}

/* ---- faults ---- */

void fake_set_attestation(fake_provider *f, bool attests_enabled, enum sbx_attestation a) {
    pthread_mutex_lock(&f->mu);
    f->attestation = a;
    f->iface.attest = attests_enabled ? fake_attest : NULL;
    pthread_mutex_unlock(&f->mu);
}

void fake_set_create_error(fake_provider *f, int code) {
    pthread_mutex_lock(&f->mu);
    f->create_error = code;
    pthread_mutex_unlock(&f->mu);
}

void fake_set_create_delay(fake_provider *f, int ms, bool honor_cancel) {
    pthread_mutex_lock(&f->mu);
    f->create_delay_ms = ms;
    f->honor_cancel = honor_cancel;
    pthread_mutex_unlock(&f->mu);
}

void fake_hold_creates(fake_provider *f) {
    pthread_mutex_lock(&f->mu);
    f->hold = true;
    pthread_mutex_unlock(&f->mu);
}

void fake_release_creates(fake_provider *f) {
    pthread_mutex_lock(&f->mu);
    f->hold = false;
    pthread_cond_broadcast(&f->changed);
    pthread_mutex_unlock(&f->mu);
}

bool fake_wait_held_creates(fake_provider *f, int n, int ms) {
    struct timespec until;
    deadline_in(&until, ms);
    pthread_mutex_lock(&f->mu);
    int r = 0;
    while (f->held < n && r != ETIMEDOUT)
        r = pthread_cond_timedwait(&f->changed, &f->mu, &until);
    bool reached = f->held >= n;
    pthread_mutex_unlock(&f->mu);
    return reached;
}

void fake_set_next_generation(fake_provider *f, const char *generation) {
    pthread_mutex_lock(&f->mu);
    snprintf(f->next_generation, sizeof f->next_generation, "%s", generation);
    pthread_mutex_unlock(&f->mu);
}

void fake_set_health(fake_provider *f, const char *generation, int code) {
    pthread_mutex_lock(&f->mu);
    int i = 0;
    while (i < f->nhealth && strcmp(f->health[i].generation, generation) != 0)
        i++;
    if (i < FAKE_HEALTH_RULES_MAX) {
        snprintf(f->health[i].generation, sizeof f->health[i].generation, "%s", generation);
        f->health[i].code = code;
        if (i == f->nhealth)
            f->nhealth++;
    }
    pthread_mutex_unlock(&f->mu);
}

void fake_set_destroy_failures(fake_provider *f, int times, int code, bool partial) {
    pthread_mutex_lock(&f->mu);
    f->destroy_fail_times = times;
    f->destroy_fail_code = code;
    f->destroy_partial = partial;
    pthread_mutex_unlock(&f->mu);
}

void fake_set_probe_unknown(fake_provider *f, bool unknown) {
    pthread_mutex_lock(&f->mu);
    f->probe_unknown = unknown;
    pthread_mutex_unlock(&f->mu);
}

void fake_set_list_error(fake_provider *f, int code) {
    pthread_mutex_lock(&f->mu);
    f->list_error = code;
    pthread_mutex_unlock(&f->mu);
}

void fake_fail_calls(fake_provider *f, const char *method, const char *path_prefix, int times,
                     int code) {
    pthread_mutex_lock(&f->mu);
    if (f->nfaults < FAKE_CALL_FAULTS_MAX) {
        call_fault *c = &f->faults[f->nfaults++];
        snprintf(c->method, sizeof c->method, "%s", method);
        snprintf(c->prefix, sizeof c->prefix, "%s", path_prefix);
        c->times = times;
        c->code = code;
    }
    pthread_mutex_unlock(&f->mu);
}

void fake_set_exec_waits(fake_provider *f, bool waits) {
    pthread_mutex_lock(&f->mu);
    f->exec_waits = waits;
    pthread_mutex_unlock(&f->mu);
}

/* ---- the world behind the caller's back ---- */

void fake_kill(fake_provider *f, const char *sandbox_id) {
    pthread_mutex_lock(&f->mu);
    fake_box *b = box_find(f, sandbox_id);
    if (b) {
        b->state = FAKE_STOPPED;
        b->nsessions = 0;
    }
    pthread_mutex_unlock(&f->mu);
}

static void plant(fake_provider *f, char generation[SBX_GENERATION_LEN + 1], const char *wanted,
                  const char *user, const char *thread) {
    char id[17];
    fake_sandbox_id(id, user, thread);
    pthread_mutex_lock(&f->mu);
    fake_box *b = box_fresh(f, id);
    if (b) {
        if (wanted)
            snprintf(b->generation, sizeof b->generation, "%s", wanted);
        else
            fawn_random_hex(b->generation, SBX_GENERATION_LEN / 2);
        b->state = FAKE_RUNNING;
    }
    if (generation)
        snprintf(generation, SBX_GENERATION_LEN + 1, "%s", b ? b->generation : "");
    pthread_mutex_unlock(&f->mu);
}

void fake_plant(fake_provider *f, char generation[SBX_GENERATION_LEN + 1], const char *user,
                const char *thread) {
    plant(f, generation, NULL, user, thread);
}

void fake_plant_as(fake_provider *f, const char *generation, const char *user, const char *thread) {
    plant(f, NULL, generation, user, thread);
}

/* ---- what happened ---- */

fake_counts fake_get_counts(fake_provider *f) {
    pthread_mutex_lock(&f->mu);
    fake_counts c = f->counts;
    pthread_mutex_unlock(&f->mu);
    return c;
}

int fake_call_count(fake_provider *f, const char *method, const char *path_prefix) {
    pthread_mutex_lock(&f->mu);
    int n = 0;
    for (int i = 0; i < f->nlog; i++)
        if (strcmp(f->log[i].method, method) == 0 &&
            strncmp(f->log[i].path, path_prefix, strlen(path_prefix)) == 0)
            n++;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int fake_total_ops(fake_provider *f) {
    fake_counts c = fake_get_counts(f);
    return c.creates + c.probes + c.health_checks + c.destroys + c.lists + c.calls;
}

int fake_running_count(fake_provider *f) {
    pthread_mutex_lock(&f->mu);
    int n = 0;
    for (size_t i = 0; i < FAKE_BOXES_MAX; i++)
        n += f->boxes[i].used && f->boxes[i].state == FAKE_RUNNING;
    pthread_mutex_unlock(&f->mu);
    return n;
}

static bool generation_in_state(fake_provider *f, const char *generation, bool running_only) {
    pthread_mutex_lock(&f->mu);
    bool found = false;
    for (size_t i = 0; !found && i < FAKE_BOXES_MAX; i++)
        found = f->boxes[i].used && strcmp(f->boxes[i].generation, generation) == 0 &&
                (!running_only || f->boxes[i].state == FAKE_RUNNING);
    pthread_mutex_unlock(&f->mu);
    return found;
}

bool fake_generation_running(fake_provider *f, const char *generation) {
    return generation_in_state(f, generation, true);
}

bool fake_generation_present(fake_provider *f, const char *generation) {
    return generation_in_state(f, generation, false);
}

bool fake_session_exists(fake_provider *f, const char *sandbox_id, const char *id) {
    pthread_mutex_lock(&f->mu);
    fake_box *b = box_find(f, sandbox_id);
    bool found = false;
    for (int i = 0; b && !found && i < b->nsessions; i++)
        found = strcmp(b->sessions[i], id) == 0;
    pthread_mutex_unlock(&f->mu);
    return found;
}

int fake_session_count(fake_provider *f, const char *sandbox_id) {
    pthread_mutex_lock(&f->mu);
    fake_box *b = box_find(f, sandbox_id);
    int n = b ? b->nsessions : 0;
    pthread_mutex_unlock(&f->mu);
    return n;
}

void fake_last_session_request(fake_provider *f, char out[SBX_SESSION_ID_MAX + 1]) {
    pthread_mutex_lock(&f->mu);
    snprintf(out, SBX_SESSION_ID_MAX + 1, "%s", f->last_session);
    pthread_mutex_unlock(&f->mu);
}

int fake_max_creates_per_id(fake_provider *f) {
    pthread_mutex_lock(&f->mu);
    int n = f->max_creates_id;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int fake_max_creates_overall(fake_provider *f) {
    pthread_mutex_lock(&f->mu);
    int n = f->max_creates_all;
    pthread_mutex_unlock(&f->mu);
    return n;
}

int fake_max_ops_per_id(fake_provider *f) {
    pthread_mutex_lock(&f->mu);
    int n = f->max_ops_id;
    pthread_mutex_unlock(&f->mu);
    return n;
}
