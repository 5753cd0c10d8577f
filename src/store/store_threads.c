/* Threads (store.h): a user's conversations, their status and metadata,
 * and the search over them. */
#include <stdio.h>
#include <string.h>

#include "base/json.h"
#include "store/store_internal.h"

/* Rows one search returns at most. */
#define STORE_SEARCH_MAX 1000

static const char *const thread_statuses[] = {"idle", "busy", "interrupted", "error"};

/* A column of the thread's newest checkpoint (checkpoints_by_seq finds it). */
#define NEWEST_CHECKPOINT(col)                                                                     \
    "(SELECT " col " FROM checkpoints c WHERE c.owner_id = threads.owner_id AND c.thread_id = "    \
    "threads.id ORDER BY c.seq DESC LIMIT 1)"
#define THREAD_COLUMNS_WITH(title)                                                                 \
    "id, owner_id, status, metadata, created_at_ms, updated_at_ms, " NEWEST_CHECKPOINT(            \
        title) ", " NEWEST_CHECKPOINT("c.created_at_ms")
/* The title of the state, when it is a string. */
#define LITE_TITLE                                                                                 \
    "CASE WHEN json_type(c.state_values, '$.title') = 'text' THEN "                                \
    "json_extract(c.state_values, '$.title') END"
#define PG_TITLE                                                                                   \
    "CASE WHEN jsonb_typeof(c.state_values::jsonb -> 'title') = 'string' THEN "                    \
    "c.state_values::jsonb ->> 'title' END"
/* A query on threads: "SELECT <thread columns> <rest>", in db's dialect. */
#define THREAD_QUERY(db, rest)                                                                     \
    sq_pick(db, "SELECT " THREAD_COLUMNS_WITH(LITE_TITLE) " " rest,                                \
            "SELECT " THREAD_COLUMNS_WITH(PG_TITLE) " " rest)

void store_thread_clear(store_thread *t) {
    free(t->metadata);
    free(t->title);
    memset(t, 0, sizeof *t);
}

static int read_thread(store_thread *t, sdb_stmt *st) {
    memset(t, 0, sizeof *t);
    sq_copy_col(t->id, sizeof t->id, st, 0);
    t->owner_id = sdb_column_int64(st, 1);
    sq_copy_col(t->status, sizeof t->status, st, 2);
    const char *m = sdb_column_text(st, 3);
    t->metadata = strdup(m ? (const char *)m : "{}");
    t->created_at_ms = sdb_column_int64(st, 4);
    t->updated_at_ms = sdb_column_int64(st, 5);
    bool titled = !sdb_column_is_null(st, 6);
    t->title = titled ? sq_dup_col(st, 6) : NULL;
    t->state_updated_at_ms = sdb_column_int64(st, 7);
    return t->metadata && (t->title || !titled) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Whether v nests at most levels objects and arrays deep (a scalar: 0). */
static bool json_nests_within(const json_t *v, int levels) {
    if (!json_is_object(v) && !json_is_array(v))
        return true;
    if (levels == 0)
        return false;
    const char *key;
    json_t *child;
    size_t i;
    json_object_foreach((json_t *)v, key, child) {
        if (!json_nests_within(child, levels - 1))
            return false;
    }
    json_array_foreach(v, i, child) {
        if (!json_nests_within(child, levels - 1))
            return false;
    }
    return true;
}

/* A metadata text must be a JSON object within STORE_METADATA_MAX and
 * STORE_JSON_DEPTH_MAX. */
static int check_metadata(const char *metadata) {
    if (!metadata)
        return 0;
    size_t n = strlen(metadata);
    if (n > STORE_METADATA_MAX)
        return fawn_err(FAWN_E2BIG, "metadata is larger than %d bytes", STORE_METADATA_MAX);
    json_t *o = NULL;
    int r = fjson_parse_object(&o, metadata, n);
    bool shallow = json_nests_within(o, STORE_JSON_DEPTH_MAX);
    json_decref(o);
    if (r < 0)
        return fawn_err(FAWN_EINVAL, "metadata must be a JSON object");
    return shallow
               ? 0
               : fawn_err(FAWN_E2BIG, "metadata nests deeper than %d levels", STORE_JSON_DEPTH_MAX);
}

static int check_thread_args(const char *id, const char *metadata) {
    if (!fawn_id_valid(id))
        return fawn_err(FAWN_EINVAL, "thread id must match [A-Za-z0-9_-]{1,64}");
    return check_metadata(metadata);
}

static int thread_get_on(sdb *db, store_thread *out, int64_t owner_id, const char *id) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st, THREAD_QUERY(db, "FROM threads WHERE id = ?1 AND owner_id = ?2"));
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, id);
    sdb_bind_int64(st, 2, owner_id);
    r = sq_step_row(db, st, "get thread", "no such thread: %s", id);
    if (r == 0)
        r = read_thread(out, st);
    sdb_finalize(st);
    return r;
}

int store_thread_create(store *s, store_thread *out, bool *existed, int64_t owner_id,
                        const char *id, const char *metadata) {
    *out = (store_thread){0};
    *existed = false;
    int r = check_thread_args(id, metadata);
    if (r < 0)
        return r;
    sdb_stmt *st;
    int64_t now = fawn_wall_ms();
    sdb *db = sq_write_begin(s);
    r = sq_prepare(db, &st,
                   "INSERT INTO threads (id, owner_id, metadata, created_at_ms, updated_at_ms) "
                   "VALUES (?1, ?2, ?3, ?4, ?4) ON CONFLICT(owner_id, id) DO NOTHING");
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, owner_id);
        sdb_bind_text(st, 3, metadata ? metadata : "{}");
        sdb_bind_int64(st, 4, now);
        int rc = sdb_step(st);
        *existed = sdb_changes(db) == 0;
        sdb_finalize(st);
        r = rc == SDB_DONE ? 0 : sq_err(db, rc, "create thread");
    }
    if (r == 0)
        r = thread_get_on(db, out, owner_id, id);
    sq_write_end(s, db);
    return r;
}

int store_thread_get(store *s, store_thread *out, int64_t owner_id, const char *id) {
    *out = (store_thread){0};
    if (!fawn_id_valid(id))
        return fawn_err(FAWN_ENOENT, "no such thread");
    sdb *db = sq_read_begin(s);
    int r = thread_get_on(db, out, owner_id, id);
    sq_read_end(s, db);
    return r;
}

/* Updates one column of the owner's thread (and updated_at). */
static int thread_update(store *s, int64_t owner_id, const char *id, const char *sql,
                         const char *value, const char *what) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, sql);
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, owner_id);
        sdb_bind_text(st, 3, value);
        sdb_bind_int64(st, 4, fawn_wall_ms());
        r = sq_step_done(db, st, true, what);
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "no such thread: %s", id) : r;
}

int store_thread_set_metadata(store *s, int64_t owner_id, const char *id, const char *metadata) {
    int r = check_thread_args(id, metadata);
    if (r == 0 && !metadata)
        r = fawn_err(FAWN_EINVAL, "metadata is required");
    return r < 0 ? r
                 : thread_update(s, owner_id, id,
                                 "UPDATE threads SET metadata = ?3, updated_at_ms = ?4 "
                                 "WHERE id = ?1 AND owner_id = ?2",
                                 metadata, "set metadata");
}

int store_thread_set_status(store *s, int64_t owner_id, const char *id, const char *status) {
    bool known = false;
    for (size_t i = 0; status && i < ARRAY_LEN(thread_statuses) && !known; i++)
        known = strcmp(status, thread_statuses[i]) == 0;
    if (!known)
        return fawn_err(FAWN_EINVAL, "status must be idle, busy, interrupted or error");
    return thread_update(s, owner_id, id,
                         "UPDATE threads SET status = ?3, updated_at_ms = ?4 "
                         "WHERE id = ?1 AND owner_id = ?2",
                         status, "set status");
}

int store_thread_delete(store *s, int64_t owner_id, const char *id) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "DELETE FROM threads WHERE id = ?1 AND owner_id = ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, id);
        sdb_bind_int64(st, 2, owner_id);
        r = sq_step_done(db, st, true, "delete thread");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "no such thread: %s", id) : r;
}

/* A metadata match is bounded (store.h), and the keys it names go into a
 * JSON path, quoted: no quotes, backslashes or control characters. */
static int check_match(const char *match) {
    size_t len = strlen(match);
    if (len > STORE_MATCH_MAX)
        return fawn_err(FAWN_E2BIG, "the metadata to match is larger than %d bytes",
                        STORE_MATCH_MAX);
    json_t *o = NULL;
    int r = fjson_parse_object(&o, match, len);
    if (r == 0 && json_object_size(o) > STORE_MATCH_KEYS_MAX)
        r = fawn_err(FAWN_E2BIG, "the metadata to match names more than %d keys",
                     STORE_MATCH_KEYS_MAX);
    if (r == 0 && !json_nests_within(o, STORE_JSON_DEPTH_MAX))
        r = fawn_err(FAWN_E2BIG, "the metadata to match nests deeper than %d levels",
                     STORE_JSON_DEPTH_MAX);
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v) {
        (void)v;
        for (const char *c = key; r == 0 && *c; c++)
            if (*c == '"' || *c == '\\' || (unsigned char)*c < 0x20)
                r = fawn_err(FAWN_EINVAL, "metadata keys to match must not hold quotes, "
                                          "backslashes or control characters");
    }
    json_decref(o);
    return r;
}

/* Every key of the match object equals the thread's value (JSON types
 * too). The match is parsed once per search (the materialized m), not once
 * per thread. */
#define LITE_MATCH_CTE "WITH m AS MATERIALIZED (SELECT key, value, type FROM json_each(?2)) "
#define LITE_MATCH_CLAUSE                                                                          \
    "NOT EXISTS (SELECT 1 FROM m WHERE "                                                           \
    "json_extract(threads.metadata, '$.\"' || m.key || '\"') IS NOT m.value "                      \
    "OR json_type(threads.metadata, '$.\"' || m.key || '\"') IS NOT m.type)"
#define PG_MATCH_CTE "WITH m AS MATERIALIZED (SELECT key, value FROM jsonb_each(?2::jsonb)) "
#define PG_MATCH_CLAUSE                                                                            \
    "NOT EXISTS (SELECT 1 FROM m WHERE "                                                           \
    "(threads.metadata::jsonb -> m.key) IS DISTINCT FROM m.value)"

/* A search's ids are a JSON array of at most STORE_SEARCH_IDS_MAX thread ids. */
static int check_ids(const char *ids) {
    json_t *list = json_loads(ids, 0, NULL);
    int r = json_is_array(list) ? 0 : fawn_err(FAWN_EINVAL, "the ids to search are not a list");
    if (r == 0 && json_array_size(list) > STORE_SEARCH_IDS_MAX)
        r = fawn_err(FAWN_E2BIG, "a search names at most %d ids", STORE_SEARCH_IDS_MAX);
    size_t i;
    json_t *id;
    json_array_foreach(r == 0 ? list : NULL, i, id) {
        if (!json_is_string(id) || !fawn_id_valid(json_string_value(id)))
            r = fawn_err(FAWN_EINVAL, "thread ids to search must match [A-Za-z0-9_-]{1,64}");
    }
    json_decref(list);
    return r;
}

int store_thread_search(store *s, store_thread **out, size_t *n, int64_t owner_id,
                        const char *match, const char *status, const char *ids, size_t limit,
                        size_t offset) {
    *out = NULL;
    *n = 0;
    int r = match ? check_match(match) : 0;
    if (r == 0 && ids)
        r = check_ids(ids);
    if (r < 0)
        return r;
    limit = limit < 1 ? 1 : limit > STORE_SEARCH_MAX ? STORE_SEARCH_MAX : limit;
    store_thread *rows = calloc(limit, sizeof *rows);
    if (!rows)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    r = sq_prepare(
        db, &st,
        sq_pick(
            db,
            LITE_MATCH_CTE "SELECT " THREAD_COLUMNS_WITH(
                LITE_TITLE) " FROM threads WHERE "
                            "owner_id = ?1 AND (?3 IS NULL OR status = ?3) AND (?2 IS NULL "
                            "OR " LITE_MATCH_CLAUSE ") AND (?6 IS NULL OR id IN (SELECT value FROM "
                            "json_each(?6))) ORDER BY updated_at_ms DESC, id LIMIT ?4 OFFSET ?5",
            PG_MATCH_CTE "SELECT " THREAD_COLUMNS_WITH(
                PG_TITLE) " FROM threads WHERE "
                          "owner_id = ?1 AND (?3::text IS NULL OR status = ?3) AND (?2::jsonb "
                          "IS NULL OR " PG_MATCH_CLAUSE ") AND (?6::jsonb IS NULL OR id IN "
                          "(SELECT jsonb_array_elements_text(?6::jsonb))) "
                          "ORDER BY updated_at_ms DESC, id LIMIT ?4 OFFSET ?5"));
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        sdb_bind_text(st, 2, match);
        sdb_bind_text(st, 3, status);
        sdb_bind_int64(st, 4, (int64_t)limit);
        sdb_bind_int64(st, 5, (int64_t)offset);
        sdb_bind_text(st, 6, ids);
        int rc;
        while (r == 0 && (rc = sdb_step(st)) == SDB_ROW && *n < limit)
            r = read_thread(&rows[(*n)++], st);
        if (r == 0 && rc != SDB_DONE && rc != SDB_ROW)
            r = sq_err(db, rc, "search threads");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0) {
        for (size_t i = 0; i < *n; i++)
            store_thread_clear(&rows[i]);
        free(rows);
        *n = 0;
        return r;
    }
    *out = rows;
    return 0;
}
