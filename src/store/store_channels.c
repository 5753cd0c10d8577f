/* IM channels (store.h, "IM channels"): bindings, connect codes, the
 * thread of each conversation, the inbox and runtime settings. */
#include <stdlib.h>
#include <string.h>

#include "store/store_internal.h"

/* Bindings one user lists at most: far more than chat accounts a person has. */
#define STORE_CH_BINDINGS_MAX 1000
/* Inbox items one list returns at most. */
#define STORE_CH_LIST_MAX 1000

static bool provider_ok(const char *p) {
    if (!sq_text_ok(p, STORE_CH_PROVIDER_MAX))
        return false;
    for (const char *c = p; *c; c++)
        if (*c < 'a' || *c > 'z')
            return false;
    return true;
}

static bool key_ok(const char *k) { return sq_text_ok(k, STORE_CH_KEY_MAX); }

/* ---- connect codes ---- */

int store_ch_code_add(store *s, const char *code_hash, const char *provider, int64_t user_id,
                      int64_t expires_at_ms, uint32_t max_live, int64_t now_ms) {
    if (!key_ok(code_hash) || !provider_ok(provider))
        return fawn_err(FAWN_EINVAL, "invalid connect code or provider");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st = NULL;
    int r = sq_begin_write(db, "begin connect code");
    if (r == 0)
        r = sq_prepare(db, &st, "DELETE FROM channel_connect_codes WHERE expires_at_ms <= ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, now_ms);
        r = sq_step_done(db, st, false, "expire connect codes");
    }
    if (r == 0)
        r = sq_prepare(db, &st, "SELECT count(*) FROM channel_connect_codes WHERE user_id = ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, user_id);
        int rc = sdb_step(st);
        if (rc != SDB_ROW)
            r = sq_err(db, rc, "count connect codes");
        else if (sdb_column_int64(st, 0) >= max_live)
            r = fawn_err(FAWN_E2BIG, "too many connect codes waiting: at most %u at once",
                         max_live);
        sdb_finalize(st);
    }
    if (r == 0)
        r = sq_prepare(db, &st,
                       "INSERT INTO channel_connect_codes (code_hash, provider, user_id, "
                       "expires_at_ms) VALUES (?1, ?2, ?3, ?4)");
    if (r == 0) {
        sdb_bind_text(st, 1, code_hash);
        sdb_bind_text(st, 2, provider);
        sdb_bind_int64(st, 3, user_id);
        sdb_bind_int64(st, 4, expires_at_ms);
        r = sq_step_done(db, st, true, "add connect code");
    }
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    return r;
}

int store_ch_code_redeem(store *s, int64_t *user_id, const char *code_hash, const char *provider,
                         int64_t now_ms) {
    *user_id = 0;
    if (!key_ok(code_hash) || !provider_ok(provider))
        return fawn_err(FAWN_ENOENT, "no such connect code");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "DELETE FROM channel_connect_codes WHERE code_hash = ?1 AND provider = ?2 "
                       "AND expires_at_ms > ?3 RETURNING user_id");
    if (r == 0) {
        sdb_bind_text(st, 1, code_hash);
        sdb_bind_text(st, 2, provider);
        sdb_bind_int64(st, 3, now_ms);
        r = sq_step_row(db, st, "redeem connect code", "no such connect code");
        if (r == 0)
            *user_id = sdb_column_int64(st, 0);
        sdb_finalize(st);
    }
    sq_write_end(s, db);
    return r;
}

/* ---- bindings ---- */

#define BINDING_COLUMNS "id, provider, platform_user_id, user_id, created_at_ms"

static void read_binding(void *row, sdb_stmt *st) {
    store_ch_binding *b = row;
    sq_copy_col(b->id, sizeof b->id, st, 0);
    sq_copy_col(b->provider, sizeof b->provider, st, 1);
    sq_copy_col(b->platform_user_id, sizeof b->platform_user_id, st, 2);
    b->user_id = sdb_column_int64(st, 3);
    b->created_at_ms = sdb_column_int64(st, 4);
}

int store_ch_binding_put(store *s, store_ch_binding *out, const char *provider,
                         const char *platform_user_id, int64_t user_id) {
    memset(out, 0, sizeof *out);
    if (!provider_ok(provider) || !key_ok(platform_user_id))
        return fawn_err(FAWN_EINVAL, "invalid provider or platform user");
    char id[37];
    fawn_random_uuid(id);
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO channel_bindings (id, provider, platform_user_id, user_id, "
                       "created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5) "
                       "ON CONFLICT (provider, platform_user_id) DO UPDATE SET id = ?1, "
                       "user_id = ?4, created_at_ms = ?5 RETURNING " BINDING_COLUMNS);
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_text(st, 2, provider);
        sdb_bind_text(st, 3, platform_user_id);
        sdb_bind_int64(st, 4, user_id);
        sdb_bind_int64(st, 5, fawn_wall_ms());
        int rc = sdb_step(st);
        if (rc == SDB_ROW)
            read_binding(out, st);
        else
            r = sq_err(db, rc, "bind platform user");
        sdb_finalize(st);
    }
    sq_write_end(s, db);
    return r;
}

int store_ch_binding_find(store *s, store_ch_binding *out, const char *provider,
                          const char *platform_user_id) {
    memset(out, 0, sizeof *out);
    if (!provider_ok(provider) || !key_ok(platform_user_id))
        return fawn_err(FAWN_ENOENT, "not bound");
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT " BINDING_COLUMNS " FROM channel_bindings WHERE provider = ?1 AND "
                       "platform_user_id = ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, provider);
        sdb_bind_text(st, 2, platform_user_id);
        r = sq_step_row(db, st, "find binding", "not bound");
        if (r == 0)
            read_binding(out, st);
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_ch_binding_list(store *s, store_ch_binding **out, size_t *n, int64_t user_id) {
    *out = NULL;
    *n = 0;
    fbuf rows = {.limit = STORE_CH_BINDINGS_MAX * sizeof(store_ch_binding)};
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT " BINDING_COLUMNS " FROM channel_bindings WHERE user_id = ?1 "
                       "ORDER BY created_at_ms, id LIMIT ?2");
    if (r == 0) {
        sdb_bind_int64(st, 1, user_id);
        sdb_bind_int64(st, 2, STORE_CH_BINDINGS_MAX);
        r = sq_rows_read(db, &rows, st, sizeof(store_ch_binding), read_binding, "list bindings");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_ch_binding), r);
}

int store_ch_binding_delete(store *s, int64_t user_id, const char *id) {
    if (!sq_text_ok(id, 36))
        return fawn_err(FAWN_ENOENT, "Connection not found");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "DELETE FROM channel_bindings WHERE id = ?1 AND user_id = ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, user_id);
        r = sq_step_done(db, st, true, "delete binding");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "Connection not found") : r;
}

/* ---- conversation threads ---- */

int store_ch_thread_get(store *s, char thread_id[65], const char *provider, const char *chat_key,
                        int64_t user_id) {
    thread_id[0] = '\0';
    if (!provider_ok(provider) || !key_ok(chat_key))
        return fawn_err(FAWN_EINVAL, "invalid provider or conversation");
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT thread_id FROM channel_threads WHERE provider = ?1 AND "
                       "chat_key = ?2 AND user_id = ?3");
    if (r == 0) {
        sdb_bind_text(st, 1, provider);
        sdb_bind_text(st, 2, chat_key);
        sdb_bind_int64(st, 3, user_id);
        r = sq_step_row(db, st, "find conversation thread", "no thread yet");
        if (r == 0)
            sq_copy_col(thread_id, 65, st, 0);
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_ch_thread_set(store *s, const char *provider, const char *chat_key, int64_t user_id,
                        const char *thread_id) {
    if (!provider_ok(provider) || !key_ok(chat_key) || !fawn_id_valid(thread_id))
        return fawn_err(FAWN_EINVAL, "invalid provider, conversation or thread");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO channel_threads (provider, chat_key, user_id, thread_id, "
                       "updated_at_ms) VALUES (?1, ?2, ?3, ?4, ?5) ON CONFLICT (provider, "
                       "chat_key, user_id) DO UPDATE SET thread_id = ?4, updated_at_ms = ?5");
    if (r == 0) {
        sdb_bind_text(st, 1, provider);
        sdb_bind_text(st, 2, chat_key);
        sdb_bind_int64(st, 3, user_id);
        sdb_bind_text(st, 4, thread_id);
        sdb_bind_int64(st, 5, fawn_wall_ms());
        r = sq_step_done(db, st, false, "set conversation thread");
    }
    sq_write_end(s, db);
    return r;
}

/* ---- inbox ---- */

/* Whether the event is recorded already (a row read inside the writer's
 * transaction). */
static int inbox_seen(bool *seen, sdb *db, const store_ch_inbox_req *q) {
    *seen = false;
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT 1 FROM channel_inbox WHERE provider = ?1 AND event_id = ?2");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, q->provider);
    sdb_bind_text(st, 2, q->event_id);
    int rc = sdb_step(st);
    *seen = rc == SDB_ROW;
    if (rc != SDB_ROW && rc != SDB_DONE)
        r = sq_err(db, rc, "find inbound event");
    sdb_finalize(st);
    return r;
}

/* Items of the conversation queued or running. */
static int inbox_pending(int64_t *n, sdb *db, const store_ch_inbox_req *q) {
    *n = 0;
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT count(*) FROM channel_inbox WHERE provider = ?1 AND chat_key = ?2 "
                       "AND status IN ('queued', 'claimed')");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, q->provider);
    sdb_bind_text(st, 2, q->chat_key);
    int rc = sdb_step(st);
    if (rc == SDB_ROW)
        *n = sdb_column_int64(st, 0);
    else
        r = sq_err(db, rc, "count queued messages");
    sdb_finalize(st);
    return r;
}

static int inbox_insert(sdb *db, const store_ch_inbox_req *q, bool queued) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO channel_inbox (provider, event_id, chat_key, message, status, "
                       "created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, q->provider);
    sdb_bind_text(st, 2, q->event_id);
    sdb_bind_text(st, 3, q->chat_key);
    if (queued)
        sdb_bind_text(st, 4, q->message);
    else
        sdb_bind_null(st, 4);
    sdb_bind_text(st, 5, queued ? "queued" : "done");
    sdb_bind_int64(st, 6, q->now_ms);
    return sq_step_done(db, st, true, "record inbound event");
}

int store_ch_inbox_add(store *s, enum store_ch_inbox_add *out, const store_ch_inbox_req *q) {
    *out = STORE_CH_DUPLICATE;
    if (!provider_ok(q->provider) || !key_ok(q->event_id) || !key_ok(q->chat_key) ||
        (q->queue && !q->message))
        return fawn_err(FAWN_EINVAL, "invalid inbound event");
    sdb *db = sq_write_begin(s);
    bool seen = false;
    int64_t pending = 0;
    int r = sq_begin_write(db, "begin inbound event");
    if (r == 0)
        r = inbox_seen(&seen, db, q);
    if (r == 0 && !seen && q->queue)
        r = inbox_pending(&pending, db, q);
    bool full = q->queue && pending >= q->max_queued;
    if (r == 0 && !seen)
        r = inbox_insert(db, q, q->queue && !full);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    if (r == 0)
        *out = seen ? STORE_CH_DUPLICATE : full ? STORE_CH_FULL : STORE_CH_ADDED;
    return r;
}

void store_ch_item_clear(store_ch_item *it) {
    if (!it)
        return;
    free(it->message);
    it->message = NULL;
}

static void read_item(void *row, sdb_stmt *st) {
    store_ch_item *it = row;
    memset(it, 0, sizeof *it);
    it->seq = sdb_column_int64(st, 0);
    sq_copy_col(it->provider, sizeof it->provider, st, 1);
    sq_copy_col(it->event_id, sizeof it->event_id, st, 2);
    sq_copy_col(it->chat_key, sizeof it->chat_key, st, 3);
    sq_copy_col(it->status, sizeof it->status, st, 4);
    sq_copy_col(it->run_id, sizeof it->run_id, st, 5);
    it->message = sq_dup_col(st, 6);
}

int store_ch_inbox_list(store *s, store_ch_item **out, size_t *n, const char *status,
                        size_t limit) {
    *out = NULL;
    *n = 0;
    if (strcmp(status, "queued") != 0 && strcmp(status, "claimed") != 0)
        return fawn_err(FAWN_EINVAL, "invalid inbox status");
    if (limit > STORE_CH_LIST_MAX)
        limit = STORE_CH_LIST_MAX;
    fbuf rows = {.limit = STORE_CH_LIST_MAX * sizeof(store_ch_item)};
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT seq, provider, event_id, chat_key, status, run_id, message FROM "
                       "channel_inbox WHERE status = ?1 ORDER BY seq LIMIT ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, status);
        sdb_bind_int64(st, 2, (int64_t)limit);
        r = sq_rows_read(db, &rows, st, sizeof(store_ch_item), read_item, "list inbox");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0) {
        store_ch_item *items = (store_ch_item *)rows.data;
        for (size_t i = 0; i < rows.len / sizeof *items; i++)
            store_ch_item_clear(&items[i]);
    }
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_ch_item), r);
}

/* Runs an UPDATE of one item by seq (?1), with text ?2 when given. */
static int inbox_update(store *s, bool *changed, const char *sql, int64_t seq, const char *text) {
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st, sql);
    if (r == 0) {
        sdb_bind_int64(st, 1, seq);
        if (text)
            sdb_bind_text(st, 2, text);
        r = sq_step_done(db, st, false, "update inbox item");
        if (r == 0 && changed)
            *changed = sdb_changes(db) > 0;
    }
    sq_write_end(s, db);
    return r;
}

int store_ch_inbox_claim(store *s, bool *claimed, int64_t seq) {
    *claimed = false;
    return inbox_update(s, claimed,
                        "UPDATE channel_inbox SET status = 'claimed' WHERE seq = ?1 AND "
                        "status = 'queued'",
                        seq, NULL);
}

int store_ch_inbox_set_run(store *s, int64_t seq, const char *run_id) {
    if (!sq_text_ok(run_id, 36))
        return fawn_err(FAWN_EINVAL, "invalid run id");
    return inbox_update(s, NULL, "UPDATE channel_inbox SET run_id = ?2 WHERE seq = ?1", seq,
                        run_id);
}

int store_ch_inbox_finish(store *s, int64_t seq, bool requeue) {
    return inbox_update(s, NULL,
                        requeue ? "UPDATE channel_inbox SET status = 'queued' WHERE seq = ?1"
                                : "UPDATE channel_inbox SET status = 'done', message = NULL "
                                  "WHERE seq = ?1",
                        seq, NULL);
}

int store_ch_inbox_find_run(store *s, char run_id[37], int64_t seq) {
    run_id[0] = '\0';
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       sq_pick(db,
                               "SELECT run_id FROM runs WHERE json_extract(metadata, "
                               "'$.channel_inbox_seq') = ?1 LIMIT 1",
                               "SELECT run_id FROM runs WHERE metadata::jsonb -> "
                               "'channel_inbox_seq' = to_jsonb(?1) LIMIT 1"));
    if (r == 0) {
        sdb_bind_int64(st, 1, seq);
        int rc = sdb_step(st);
        if (rc == SDB_ROW)
            sq_copy_col(run_id, 37, st, 0);
        r = rc == SDB_ROW || rc == SDB_DONE ? 0 : sq_err(db, rc, "find inbox run");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_ch_inbox_prune(store *s, int64_t before_ms) {
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "DELETE FROM channel_inbox WHERE status = 'done' AND created_at_ms < ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, before_ms);
        r = sq_step_done(db, st, false, "prune inbox");
    }
    sq_write_end(s, db);
    return r;
}

/* ---- runtime settings ---- */

int store_ch_settings_get(store *s, char **out, const char *provider) {
    *out = NULL;
    if (!provider_ok(provider))
        return fawn_err(FAWN_ENOENT, "no settings");
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "SELECT settings FROM channel_settings WHERE provider = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, provider);
        r = sq_step_row(db, st, "read channel settings", "no settings");
        if (r == 0) {
            *out = sq_dup_col(st, 0);
            if (!*out)
                r = fawn_err(FAWN_ENOMEM, "out of memory");
        }
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_ch_settings_set(store *s, const char *provider, const char *settings) {
    if (!provider_ok(provider))
        return fawn_err(FAWN_EINVAL, "invalid provider");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       settings ? "INSERT INTO channel_settings (provider, settings, "
                                  "updated_at_ms) VALUES (?1, ?2, ?3) ON CONFLICT (provider) "
                                  "DO UPDATE SET settings = ?2, updated_at_ms = ?3"
                                : "DELETE FROM channel_settings WHERE provider = ?1");
    if (r == 0) {
        sdb_bind_text(st, 1, provider);
        if (settings) {
            sdb_bind_text(st, 2, settings);
            sdb_bind_int64(st, 3, fawn_wall_ms());
        }
        r = sq_step_done(db, st, !settings, "save channel settings");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "no runtime config saved") : r;
}
