/* Skill states (store.h): which skills an administrator enabled or
 * disabled, one row per skill name. */
#include <string.h>

#include "store/store_internal.h"

int store_skill_state_set(store *s, const char *name, bool enabled) {
    if (!sq_text_ok(name, STORE_SKILL_NAME_MAX))
        return fawn_err(FAWN_EINVAL, "invalid skill name");
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(
        db, &st,
        "INSERT INTO skill_states (name, enabled, updated_at_ms) VALUES (?1, ?2, ?3) "
        "ON CONFLICT (name) DO UPDATE SET enabled = ?2, updated_at_ms = ?3");
    if (r == 0) {
        sdb_bind_text(st, 1, name);
        sdb_bind_int64(st, 2, enabled);
        sdb_bind_int64(st, 3, fawn_wall_ms());
        r = sq_step_done(db, st, false, "set skill state");
    }
    sq_write_end(s, db);
    return r;
}

/* Adds every row of st (name, enabled) to states. */
static int states_read(json_t *states, sdb *db, sdb_stmt *st) {
    int rc;
    while ((rc = sdb_step(st)) == SDB_ROW) {
        const char *name = (const char *)sdb_column_text(st, 0);
        if (name && json_object_set_new(states, name, json_boolean(sdb_column_int64(st, 1))) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return rc == SDB_DONE ? 0 : sq_err(db, rc, "read skill states");
}

int store_skill_states(store *s, json_t **out) {
    *out = NULL;
    json_t *states = json_object();
    if (!states)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st, "SELECT name, enabled FROM skill_states");
    if (r == 0) {
        r = states_read(states, db, st);
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0) {
        json_decref(states);
        return r;
    }
    *out = states;
    return 0;
}
