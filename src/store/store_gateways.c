/* The gateways sharing one store (store.h): a row each while it lives,
 * renewed by its heartbeat, and the reaping of the silent ones. */
#include "store/store_internal.h"

int store_gateway_register(store *s, const char *gateway_id, int64_t now_ms) {
    if (!sq_text_ok(gateway_id, STORE_GATEWAY_ID_MAX))
        return fawn_err(FAWN_EINVAL, "bad gateway id");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st,
                       "INSERT INTO gateways (id, started_at_ms, beat_at_ms) VALUES (?1, ?2, ?2) "
                       "ON CONFLICT (id) DO UPDATE SET started_at_ms = excluded.started_at_ms, "
                       "beat_at_ms = excluded.beat_at_ms");
    if (r == 0) {
        sdb_bind_text(st, 1, gateway_id);
        sdb_bind_int64(st, 2, now_ms);
        r = sq_step_done(db, st, false, "register gateway");
    }
    sq_write_end(s, db);
    return r;
}

int store_gateway_beat(store *s, const char *gateway_id, int64_t now_ms) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "UPDATE gateways SET beat_at_ms = ?2 WHERE id = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, gateway_id);
        sdb_bind_int64(st, 2, now_ms);
        r = sq_step_done(db, st, true, "gateway heartbeat");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ESTALE, "gateway %s lost its lease", gateway_id) : r;
}

/* Removes the gateways other than self not beaten since cutoff. */
static int gateways_remove_silent(sdb *db, size_t *n, const char *self, int64_t cutoff) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "DELETE FROM gateways WHERE id <> ?1 AND beat_at_ms < ?2");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, self);
    sdb_bind_int64(st, 2, cutoff);
    int rc = sdb_step(st);
    *n = rc == SDB_DONE ? (size_t)sdb_changes(db) : 0;
    sdb_finalize(st);
    return rc == SDB_DONE ? 0 : sq_err(db, rc, "reap gateways");
}

int store_gateway_reap(store *s, size_t *gateways, size_t *runs, const char *self, int64_t now_ms,
                       int64_t lease_ms, const char *reason) {
    size_t gone = 0, ended = 0;
    if (gateways)
        *gateways = 0;
    if (runs)
        *runs = 0;
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin");
    if (r == 0)
        r = gateways_remove_silent(db, &gone, self, now_ms - lease_ms);
    if (r == 0)
        r = sq_runs_end(db, &ended,
                        "gateway_id <> ?1 AND gateway_id NOT IN (SELECT id FROM gateways)", self,
                        reason);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    if (r == 0 && gateways)
        *gateways = gone;
    if (r == 0 && runs)
        *runs = ended;
    return r;
}

int store_gateway_remove(store *s, const char *gateway_id) {
    const char *texts[] = {gateway_id};
    return sq_exec_texts(s, "DELETE FROM gateways WHERE id = ?1", texts, 1, false,
                         "remove gateway");
}
