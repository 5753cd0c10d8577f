/* The auth watcher (store_internal.h, sq_watch_start): on PostgreSQL, a
 * connection of its own LISTENs on fawn_auth, which migration 14's trigger
 * notifies when a change of the auth generation commits, and a thread
 * waits on it and counts each notification another process sent. The
 * pool's connections listen too, and count a change of their own as it
 * commits (sq_read_end), but read others' only when they next run a
 * statement; this one reads them as they arrive.
 *
 * A notification is sent when the revoking transaction commits, and
 * travels (the server's listening process, the socket, this thread) while
 * the revoking transaction's caller goes on; a request reaching this
 * gateway meanwhile could still be answered from its cache (a few
 * milliseconds, measured on a loaded machine). So each watcher, once it has
 * counted a notification, records the generation it has seen in
 * auth_watchers under its connection's application_name, and the store
 * that made the change waits, before its write returns, until every
 * other watcher connection the server lists has recorded it
 * (sq_watch_acks_wait): by the time the revoking client has its answer,
 * every gateway refuses what it revoked. A watcher that does not answer
 * within STORE_WATCH_ACK_WAIT_MS (a stuck process) is given up on: its
 * cache still reads the generation every AUTH_CACHE_RECHECK_MS (1 s).
 * Watchers the server does not show to this store's role (gateways
 * connecting as other roles) are not waited for. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "store/store_internal.h"

/* How long a lost watch connection waits before it is opened again: the
 * cache answers nothing from memory meanwhile, so soon, but not a loop
 * against a server that is down. */
#define STORE_WATCH_RETRY_MS 1000
/* How long a change waits for the watchers: past an auth cache's recheck
 * (auth.h AUTH_CACHE_RECHECK_MS, 1 s), after which a gateway that did not
 * answer has read the generation itself; a watcher that works answers in
 * milliseconds. */
#define STORE_WATCH_ACK_WAIT_MS 1500
/* Between two looks at the watchers' records while waiting. */
#define STORE_WATCH_ACK_POLL_US 500
#define STORE_WATCH_NAME_PREFIX "fawn-auth-watch-"

struct sq_watch {
    store *s;
    char name[64]; /* application_name of its connection: its auth_watchers row */
    char *conninfo;
    sdb *db;     /* listening, or NULL while lost */
    int wake_fd; /* eventfd: written to stop the thread */
    /* The server processes of the store's pool: their notifications are
     * this store's own writes, which sq_read_end counts when they commit. */
    int own[STORE_POOL_MAX];
    size_t n_own;
    _Atomic bool stop;
    pthread_t thread;
};

/* Records in auth_watchers that this watcher has seen generation. */
static int watch_ack(struct sq_watch *w, sdb *db, int64_t generation) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO auth_watchers (name, generation, seen_at_ms) "
                       "VALUES (?1, ?2, ?3) ON CONFLICT (name) DO UPDATE SET "
                       "generation = excluded.generation, seen_at_ms = excluded.seen_at_ms");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, w->name);
    sdb_bind_int64(st, 2, generation);
    sdb_bind_int64(st, 3, fawn_wall_ms());
    return sq_step_done(db, st, false, "record the auth generation seen");
}

/* The generation as it is now, read on db. */
static int watch_generation(sdb *db, int64_t *out) {
    *out = 0;
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "SELECT value FROM auth_generation WHERE id = 1");
    if (r < 0)
        return r;
    int rc = sdb_step(st);
    r = rc == SDB_ROW ? 0 : sq_err(db, rc == SDB_DONE ? SDB_ERROR : rc, "auth generation");
    *out = r == 0 ? sdb_column_int64(st, 0) : 0;
    sdb_finalize(st);
    return r;
}

/* Counts a change another process made, and records what it has seen: the
 * generation read before the count, so every change it records committed
 * before the count, and a credential verified after the count saw them. */
static int watch_count(struct sq_watch *w) {
    int64_t generation;
    int r = watch_generation(w->db, &generation);
    sq_auth_changed(w->s);
    return r < 0 ? r : watch_ack(w, w->db, generation);
}

/* A new listening connection into *out, named w->name, its record made
 * and those of closed watcher connections dropped: 0, or the error. */
static int watch_connect(sdb **out, struct sq_watch *w) {
    char sql[128];
    snprintf(sql, sizeof sql, "SET application_name = '%s'; LISTEN fawn_auth", w->name);
    int r = sdb_pg_open(out, w->conninfo);
    if (r == 0)
        r = sq_exec(*out, sql, "listen for auth changes");
    if (r == 0)
        r = sq_exec(*out,
                    "DELETE FROM auth_watchers WHERE name NOT IN (SELECT application_name "
                    "FROM pg_stat_activity WHERE application_name IS NOT NULL)",
                    "drop closed watchers");
    /* Blind until watch_found: whatever this records, no cached
     * credential is answered before the count that follows it. */
    int64_t generation;
    if (r == 0)
        r = watch_generation(*out, &generation);
    if (r == 0)
        r = watch_ack(w, *out, generation);
    if (r < 0) {
        sdb_close(*out);
        *out = NULL;
    }
    return r;
}

/* Blind (auth_changes odd) until a new connection listens; then, as
 * whatever changed meanwhile was not seen, one change is counted. */
static void watch_lost(struct sq_watch *w) {
    log_warn("store", "auth watch lost, cached credentials unused until it is back: %s",
             fawn_errmsg());
    sdb_close(w->db);
    w->db = NULL;
    atomic_fetch_add(&w->s->auth_changes, 1);
}

static void watch_found(struct sq_watch *w, sdb *db) {
    w->db = db;
    atomic_fetch_add(&w->s->auth_changes, 1);
    log_info("store", "auth watch back");
}

static void *watch_run(void *arg) {
    struct sq_watch *w = arg;
    while (!atomic_load(&w->stop)) {
        if (!w->db) {
            sdb *db;
            if (watch_connect(&db, w) == 0)
                watch_found(w, db);
            else
                poll(&(struct pollfd){.fd = w->wake_fd, .events = POLLIN}, 1, STORE_WATCH_RETRY_MS);
            continue;
        }
        int r = sdb_pg_wait(w->db, w->own, w->n_own, w->wake_fd, -1);
        if (r > 0)
            r = watch_count(w);
        if (r < 0)
            watch_lost(w);
    }
    return NULL;
}

static void watch_free(struct sq_watch *w) {
    sdb_close(w->db);
    if (w->wake_fd >= 0)
        close(w->wake_fd);
    free(w->conninfo);
    free(w);
}

int sq_watch_start(store *s, const char *conninfo) {
    struct sq_watch *w = calloc(1, sizeof *w);
    if (!w)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    w->s = s;
    char id[17];
    fawn_random_hex(id, 8);
    snprintf(w->name, sizeof w->name, STORE_WATCH_NAME_PREFIX "%s", id);
    for (size_t i = 0; i < s->pool_size; i++)
        w->own[w->n_own++] = sdb_pg_backend_pid(s->readers[i]);
    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    w->conninfo = strdup(conninfo);
    int r = w->wake_fd < 0 || !w->conninfo
                ? fawn_err(FAWN_ENOMEM, "auth watch: %s", strerror(errno))
                : 0;
    if (r == 0)
        r = watch_connect(&w->db, w);
    if (r == 0 && (errno = pthread_create(&w->thread, NULL, watch_run, w)) != 0)
        r = fawn_err(FAWN_EIO, "auth watch thread: %s", strerror(errno));
    if (r < 0) {
        watch_free(w);
        return r;
    }
    s->watch = w;
    return 0;
}

/* How many watchers other than own (open connections the server lists)
 * have not recorded the generation as it is now, into *out. */
static int acks_missing(sdb *db, int64_t *out, const char *own) {
    *out = 0;
    sdb_stmt *st;
    int r = sq_prepare(
        db, &st,
        "SELECT count(*) FROM pg_stat_activity a WHERE a.datname = current_database() "
        "AND a.application_name LIKE '" STORE_WATCH_NAME_PREFIX "%' AND a.application_name <> ?1 "
        "AND NOT EXISTS (SELECT 1 FROM auth_watchers w WHERE w.name = a.application_name "
        "AND w.generation >= (SELECT value FROM auth_generation WHERE id = 1))");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, own);
    int rc = sdb_step(st);
    r = rc == SDB_ROW ? 0 : sq_err(db, rc == SDB_DONE ? SDB_ERROR : rc, "count watchers behind");
    *out = r == 0 ? sdb_column_int64(st, 0) : 0;
    sdb_finalize(st);
    return r;
}

void sq_watch_acks_wait(store *s) {
    if (!s->watch)
        return;
    int64_t deadline = fawn_now_ms() + STORE_WATCH_ACK_WAIT_MS, missing = 0;
    for (;;) {
        sdb *db = sq_read_begin(s);
        int r = acks_missing(db, &missing, s->watch->name);
        sq_read_end(s, db);
        if (r < 0) {
            log_warn("store", "auth change: watchers not checked: %s", fawn_errmsg());
            return;
        }
        if (missing == 0)
            return;
        if (fawn_now_ms() >= deadline)
            break;
        usleep(STORE_WATCH_ACK_POLL_US);
    }
    log_warn("store", "auth change: %lld watcher(s) did not see it within %d ms",
             (long long)missing, STORE_WATCH_ACK_WAIT_MS);
}

void sq_watch_stop(store *s) {
    struct sq_watch *w = s->watch;
    if (!w)
        return;
    atomic_store(&w->stop, true);
    uint64_t one = 1;
    if (write(w->wake_fd, &one, sizeof one) < 0)
        log_warn("store", "auth watch: wake: %s", strerror(errno));
    pthread_join(w->thread, NULL);
    watch_free(w);
    s->watch = NULL;
}
