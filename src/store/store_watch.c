/* The auth watcher (store_internal.h, sq_watch_start): on PostgreSQL, a
 * connection of its own LISTENs on fawn_auth, which migration 14's trigger
 * notifies when a change of the auth generation commits, and a thread
 * waits on it and counts each notification another process sent. The
 * pool's connections listen too, and count a change of their own as it
 * commits (sq_read_end), but read others' only when they next run a
 * statement; this one reads them as they arrive.
 *
 * What it cannot close: a notification is sent when the revoking
 * transaction commits, and travels (the server's listening backend, the
 * socket, this thread) while the revoking client already has its answer; a
 * request reaching this gateway in that interval (well under a millisecond
 * on a quiet network) can still be answered from the cache. The cache's
 * own read of the generation (AUTH_CACHE_RECHECK_MS) bounds it whatever
 * happens to the notification. */
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

struct sq_watch {
    store *s;
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

/* A new listening connection into *out: 0, or the error of connecting. */
static int watch_connect(sdb **out, const char *conninfo) {
    int r = sdb_pg_open(out, conninfo);
    if (r == 0 && (r = sq_exec(*out, "LISTEN fawn_auth", "listen for auth changes")) < 0) {
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
            if (watch_connect(&db, w->conninfo) == 0)
                watch_found(w, db);
            else
                poll(&(struct pollfd){.fd = w->wake_fd, .events = POLLIN}, 1, STORE_WATCH_RETRY_MS);
            continue;
        }
        int r = sdb_pg_wait(w->db, w->own, w->n_own, w->wake_fd, -1);
        if (r > 0)
            sq_auth_changed(w->s);
        else if (r < 0)
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
    for (size_t i = 0; i < s->pool_size; i++)
        w->own[w->n_own++] = sdb_pg_backend_pid(s->readers[i]);
    w->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    w->conninfo = strdup(conninfo);
    int r = w->wake_fd < 0 || !w->conninfo
                ? fawn_err(FAWN_ENOMEM, "auth watch: %s", strerror(errno))
                : 0;
    if (r == 0)
        r = watch_connect(&w->db, conninfo);
    if (r == 0 && (errno = pthread_create(&w->thread, NULL, watch_run, w)) != 0)
        r = fawn_err(FAWN_EIO, "auth watch thread: %s", strerror(errno));
    if (r < 0) {
        watch_free(w);
        return r;
    }
    s->watch = w;
    return 0;
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
