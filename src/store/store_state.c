/* Thread state on SQLite (store.h, "thread state"): checkpoints, the
 * thread's message rows they list, reading a state through its reference,
 * and migration 6's move of stored states into message rows.
 *
 * Writing a state: its messages are dumped and hashed before the writer is
 * taken (messages_prepare); under the writer, each one is the thread's row
 * of the same digest or a new row (messages_store), the checkpoint lists
 * them as spans, older checkpoints are pruned and, when that leaves rows
 * no kept checkpoint lists, those are deleted (messages_collect). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "store/store_internal.h"

/* Rows [first, last] of a thread's messages, in a state's order. */
typedef struct span {
    int64_t first, last;
} span;

/* The messages of a state to write: each one's compact JSON and SHA-256. */
typedef struct msg_list {
    char **texts;
    char (*digests)[65];
    size_t n;
} msg_list;

static void msg_list_free(msg_list *l) {
    for (size_t i = 0; l->texts && i < l->n; i++)
        free(l->texts[i]);
    free(l->texts);
    free(l->digests);
    *l = (msg_list){0};
}

/* Dumps and hashes every element of list (a JSON array; NULL: none). */
static int messages_prepare(msg_list *out, const json_t *list) {
    *out = (msg_list){0};
    size_t n = json_array_size(list);
    if (n == 0)
        return 0;
    out->texts = calloc(n, sizeof *out->texts);
    out->digests = calloc(n, sizeof *out->digests);
    out->n = n;
    int r = out->texts && out->digests ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < n; i++) {
        out->texts[i] = json_dumps(json_array_get(list, i), JSON_COMPACT | JSON_ENCODE_ANY);
        if (!out->texts[i])
            r = fawn_err(FAWN_ENOMEM, "out of memory");
        else
            fawn_sha256_hex(out->digests[i], out->texts[i], strlen(out->texts[i]));
    }
    if (r < 0)
        msg_list_free(out);
    return r;
}

/* values split into its messages (prepared) and the rest (JSON text,
 * malloc'd). */
static int state_split(char **rest, msg_list *msgs, const json_t *values) {
    *rest = NULL;
    *msgs = (msg_list){0};
    const json_t *list = json_object_get(values, "messages");
    if (!json_is_object(values) || (list && !json_is_array(list)))
        return fawn_err(FAWN_EINVAL, "a state is an object whose messages are a list");
    json_t *copy = json_copy((json_t *)values);
    json_object_del(copy, "messages");
    *rest = copy ? json_dumps(copy, JSON_COMPACT) : NULL;
    json_decref(copy);
    int r = *rest ? messages_prepare(msgs, list) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        free(*rest);
        *rest = NULL;
    }
    return r;
}

/* ---- spans ---- */

/* Appends seq to the spans in *b (extending the last one when it follows). */
static int spans_add(fbuf *b, int64_t seq) {
    span *last = b->len ? (span *)(b->data + b->len - sizeof(span)) : NULL;
    if (last && last->last + 1 == seq) {
        last->last = seq;
        return 0;
    }
    return fbuf_append(b, &(span){seq, seq}, sizeof(span));
}

/* Spans as JSON text [[first,last],...] (malloc'd). */
static int spans_to_text(char **out, const span *sp, size_t n) {
    *out = NULL;
    fbuf b = {0};
    int r = fbuf_printf(&b, "[");
    for (size_t i = 0; r == 0 && i < n; i++)
        r = fbuf_printf(&b, "%s[%" PRId64 ",%" PRId64 "]", i ? "," : "", sp[i].first, sp[i].last);
    if (r == 0)
        r = fbuf_printf(&b, "]");
    if (r < 0) {
        fbuf_free(&b);
        return r;
    }
    *out = fbuf_steal(&b);
    return 0;
}

/* Appends the spans of list (JSON [[first,last],...], 1 <= first <= last)
 * to *b; *positions (may be NULL) gets how many rows they list. */
static int spans_parse(fbuf *b, uint64_t *positions, const json_t *list) {
    if (positions)
        *positions = 0;
    if (!json_is_array(list))
        return fawn_err(FAWN_EINVAL, "a state reference's messages are a list of spans");
    size_t i;
    json_t *pair;
    json_array_foreach(list, i, pair) {
        json_int_t first = json_integer_value(json_array_get(pair, 0));
        json_int_t last = json_integer_value(json_array_get(pair, 1));
        uint64_t count = (uint64_t)last - (uint64_t)first + 1;
        if (json_array_size(pair) != 2 || first < 1 || last < first ||
            (positions && __builtin_add_overflow(*positions, count, positions)))
            return fawn_err(FAWN_EINVAL, "a state reference's span %zu is malformed", i);
        int r = fbuf_append(b, &(span){first, last}, sizeof(span));
        if (r < 0)
            return r;
    }
    return 0;
}

static int span_cmp(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->first < y->first ? -1 : x->first > y->first;
}

/* Sorts spans and merges the ones that overlap or touch, in place; returns
 * how many are left and, in *rows, how many rows they cover. */
static size_t spans_union(span *sp, size_t n, uint64_t *rows) {
    *rows = 0;
    if (n == 0)
        return 0;
    qsort(sp, n, sizeof *sp, span_cmp);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (k && sp[i].first <= sp[k - 1].last + 1) {
            if (sp[i].last > sp[k - 1].last)
                sp[k - 1].last = sp[i].last;
        } else {
            sp[k++] = sp[i];
        }
    }
    for (size_t i = 0; i < k; i++)
        *rows += (uint64_t)(sp[i].last - sp[i].first + 1);
    return k;
}

/* ---- message rows ---- */

static void bind_thread(sdb_stmt *st, int64_t owner_id, const char *thread_id) {
    sdb_bind_int64(st, 1, owner_id);
    sdb_bind_text(st, 2, thread_id);
}

/* One int64 that `sql` (binding the thread to ?1, ?2) answers. */
static int thread_int(sdb *db, int64_t *out, const char *sql, int64_t owner_id,
                      const char *thread_id, const char *what) {
    *out = 0;
    sdb_stmt *st;
    int r = sq_prepare(db, &st, sql);
    if (r < 0)
        return r;
    bind_thread(st, owner_id, thread_id);
    r = sq_step_row(db, st, what, "no such thread: %s", thread_id);
    if (r == 0)
        *out = sdb_column_int64(st, 0);
    sdb_finalize(st);
    return r;
}

/* The row of message i of l: the thread's row with its digest, or a new
 * one numbered ++*next. find and insert bind the thread to ?1, ?2 (and
 * insert its origin to ?7, ?8 when it has those columns). */
static int message_row(sdb *db, int64_t *seq, sdb_stmt *find, sdb_stmt *insert, const msg_list *l,
                       size_t i, int64_t *next) {
    *seq = 0;
    sdb_reset(find);
    sdb_bind_text(find, 3, l->digests[i]);
    int rc = sdb_step(find);
    if (rc == SDB_ROW) {
        *seq = sdb_column_int64(find, 0);
        return 0;
    }
    if (rc != SDB_DONE)
        return sq_err(db, rc, "find message");
    *seq = ++*next;
    sdb_reset(insert);
    sdb_bind_int64(insert, 3, *seq);
    sdb_bind_text(insert, 4, l->digests[i]);
    sdb_bind_int64(insert, 5, (int64_t)strlen(l->texts[i]));
    sdb_bind_text(insert, 6, l->texts[i]);
    rc = sdb_step(insert);
    return rc == SDB_DONE ? 0 : sq_err(db, rc, "write message");
}

/* A new row records the run that wrote it and when (the checkpoint's); a
 * migration older than those columns (6) writes rows without them. */
#define MESSAGE_INSERT                                                                             \
    "INSERT INTO thread_messages (owner_id, thread_id, seq, digest, bytes, body, run_id, "         \
    "created_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
#define MESSAGE_INSERT_V6                                                                          \
    "INSERT INTO thread_messages (owner_id, thread_id, seq, digest, bytes, body) VALUES (?1, ?2, " \
    "?3, ?4, ?5, ?6)"

/* Stores the messages of l for the thread (each one's row: found or new),
 * in a transaction on db: *spans_text gets their spans (JSON, malloc'd),
 * *rows how many distinct rows they list. New rows are written by origin
 * (its run id and time; NULL only for migration 6). */
static int messages_store(sdb *db, char **spans_text, uint64_t *rows, int64_t owner_id,
                          const char *thread_id, const msg_list *l,
                          const store_checkpoint *origin) {
    *spans_text = NULL;
    *rows = 0;
    int64_t next;
    sdb_stmt *find = NULL, *insert = NULL;
    fbuf spans = {0};
    int r = thread_int(db, &next,
                       "SELECT coalesce(max(seq), 0) FROM thread_messages "
                       "WHERE owner_id = ?1 AND thread_id = ?2",
                       owner_id, thread_id, "number messages");
    if (r == 0)
        r = sq_prepare(db, &find,
                       "SELECT seq FROM thread_messages WHERE owner_id = ?1 AND "
                       "thread_id = ?2 AND digest = ?3 LIMIT 1");
    if (r == 0)
        r = sq_prepare(db, &insert, origin ? MESSAGE_INSERT : MESSAGE_INSERT_V6);
    if (r == 0) {
        bind_thread(find, owner_id, thread_id);
        bind_thread(insert, owner_id, thread_id);
    }
    if (r == 0 && origin) {
        sdb_bind_text(insert, 7, origin->run_id);
        sdb_bind_int64(insert, 8, origin->created_at_ms);
    }
    for (size_t i = 0; r == 0 && i < l->n; i++) {
        int64_t seq;
        r = message_row(db, &seq, find, insert, l, i, &next);
        if (r == 0)
            r = spans_add(&spans, seq);
    }
    sdb_finalize(find);
    sdb_finalize(insert);
    size_t n = spans.len / sizeof(span);
    if (r == 0)
        r = spans_to_text(spans_text, (span *)spans.data, n);
    if (r == 0)
        spans_union((span *)spans.data, n, rows);
    fbuf_free(&spans);
    return r;
}

/* Deletes the thread's rows in [lo, hi]. */
static int rows_delete(sdb *db, int64_t owner_id, const char *thread_id, int64_t lo, int64_t hi) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "DELETE FROM thread_messages WHERE owner_id = ?1 AND "
                       "thread_id = ?2 AND seq BETWEEN ?3 AND ?4");
    if (r < 0)
        return r;
    bind_thread(st, owner_id, thread_id);
    sdb_bind_int64(st, 3, lo);
    sdb_bind_int64(st, 4, hi);
    return sq_step_done(db, st, false, "delete messages");
}

/* Appends the spans of every kept checkpoint of the thread to *all. */
static int kept_spans(sdb *db, fbuf *all, int64_t owner_id, const char *thread_id) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT message_spans FROM checkpoints WHERE owner_id = ?1 AND "
                       "thread_id = ?2");
    if (r < 0)
        return r;
    bind_thread(st, owner_id, thread_id);
    int rc;
    while (r == 0 && (rc = sdb_step(st)) == SDB_ROW) {
        json_t *list = json_loads((const char *)sdb_column_text(st, 0), 0, NULL);
        r = spans_parse(all, NULL, list);
        json_decref(list);
    }
    if (r == 0 && rc != SDB_DONE)
        r = sq_err(db, rc, "read checkpoint spans");
    sdb_finalize(st);
    return r;
}

/* Deletes the thread's rows that no kept checkpoint lists. The newest
 * checkpoint lists newest_rows rows: when the thread has no more than that,
 * every row is listed (the common case: nothing was replaced) and nothing
 * else is read. */
static int messages_collect(sdb *db, int64_t owner_id, const char *thread_id,
                            uint64_t newest_rows) {
    int64_t count;
    int r = thread_int(db, &count,
                       "SELECT count(*) FROM thread_messages WHERE owner_id = ?1 "
                       "AND thread_id = ?2",
                       owner_id, thread_id, "count messages");
    if (r < 0 || (uint64_t)count <= newest_rows)
        return r;
    fbuf all = {0};
    r = kept_spans(db, &all, owner_id, thread_id);
    uint64_t listed;
    size_t n = r == 0 ? spans_union((span *)all.data, all.len / sizeof(span), &listed) : 0;
    const span *u = (const span *)all.data;
    int64_t lo = 1;
    for (size_t i = 0; r == 0 && i <= n; i++) {
        int64_t hi = i < n ? u[i].first - 1 : INT64_MAX;
        if (hi >= lo)
            r = rows_delete(db, owner_id, thread_id, lo, hi);
        lo = i < n ? u[i].last + 1 : lo;
    }
    fbuf_free(&all);
    return r;
}

/* ---- checkpoints ---- */

void store_checkpoint_clear(store_checkpoint *c) {
    free(c->state);
    free(c->metadata);
    memset(c, 0, sizeof *c);
}

/* {"values": rest, "messages": spans} (malloc'd). */
static int reference_compose(char **out, const char *rest, const char *spans) {
    *out = NULL;
    if (asprintf(out, "{\"values\":%s,\"messages\":%s}", rest, spans) < 0) {
        *out = NULL;
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return 0;
}

/* Inserts c (values rest, messages spans) with the thread's next sequence
 * number. */
static int checkpoint_insert(sdb *db, int64_t owner_id, const char *thread_id,
                             const store_checkpoint *c, const char *rest, const char *spans) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO checkpoints (owner_id, thread_id, checkpoint_id, parent_id, "
                       "run_id, seq, state_values, message_spans, metadata, created_at_ms) "
                       "VALUES (?1, ?2, ?3, ?4, ?5, (SELECT coalesce(max(seq), 0) + 1 FROM "
                       "checkpoints WHERE owner_id = ?1 AND thread_id = ?2), ?6, ?7, ?8, ?9)");
    if (r < 0)
        return r;
    bind_thread(st, owner_id, thread_id);
    sdb_bind_text(st, 3, c->checkpoint_id);
    sdb_bind_text(st, 4, c->parent_id);
    sdb_bind_text(st, 5, c->run_id);
    sdb_bind_text(st, 6, rest);
    sdb_bind_text(st, 7, spans);
    sdb_bind_text(st, 8, c->metadata ? c->metadata : "{}");
    sdb_bind_int64(st, 9, c->created_at_ms);
    return sq_step_done(db, st, false, "write checkpoint");
}

/* Keeps the newest STORE_CHECKPOINTS_KEPT checkpoints of the thread and,
 * when older ones went, the rows the kept ones list (the newest lists
 * newest_rows). */
static int checkpoints_prune(sdb *db, int64_t owner_id, const char *thread_id,
                             uint64_t newest_rows) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "DELETE FROM checkpoints WHERE owner_id = ?1 AND thread_id = ?2 AND seq <= "
                       "(SELECT max(seq) FROM checkpoints WHERE owner_id = ?1 AND thread_id = ?2) "
                       "- ?3");
    if (r < 0)
        return r;
    bind_thread(st, owner_id, thread_id);
    sdb_bind_int64(st, 3, STORE_CHECKPOINTS_KEPT);
    r = sq_step_done(db, st, false, "prune checkpoints");
    if (r == 0 && sdb_changes(db) > 0)
        r = messages_collect(db, owner_id, thread_id, newest_rows);
    return r;
}

/* The whole write of a checkpoint, in a transaction on the writer. */
static int checkpoint_write(sdb *db, char **state, int64_t owner_id, const char *thread_id,
                            const store_checkpoint *c, const char *rest, const msg_list *msgs) {
    char *spans = NULL;
    uint64_t rows = 0;
    int64_t exists;
    int r = thread_int(db, &exists, "SELECT 1 FROM threads WHERE owner_id = ?1 AND id = ?2",
                       owner_id, thread_id, "find thread");
    if (r == 0)
        r = messages_store(db, &spans, &rows, owner_id, thread_id, msgs, c);
    if (r == 0)
        r = checkpoint_insert(db, owner_id, thread_id, c, rest, spans);
    if (r == 0)
        r = checkpoints_prune(db, owner_id, thread_id, rows);
    if (r == 0 && state)
        r = reference_compose(state, rest, spans);
    free(spans);
    return r;
}

int store_checkpoint_put(store *s, char **state, int64_t owner_id, const char *thread_id,
                         const store_checkpoint *c, const json_t *values) {
    if (state)
        *state = NULL;
    if (!fawn_id_valid(thread_id) || !sq_text_ok(c->checkpoint_id, STORE_RUN_ID_MAX))
        return fawn_err(FAWN_EINVAL, "bad checkpoint");
    char *rest;
    msg_list msgs;
    int r = state_split(&rest, &msgs, values);
    if (r < 0)
        return r;
    store_checkpoint at = *c; /* its time, once: the checkpoint's and its new rows' */
    at.created_at_ms = c->created_at_ms ? c->created_at_ms : fawn_wall_ms();
    sdb *db = sq_write_begin(s);
    r = sq_begin_write(db, "begin");
    if (r == 0)
        r = checkpoint_write(db, state, owner_id, thread_id, &at, rest, &msgs);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    if (r < 0 && state) {
        free(*state);
        *state = NULL;
    }
    free(rest);
    msg_list_free(&msgs);
    return r;
}

#define CHECKPOINT_COLUMNS                                                                         \
    "checkpoint_id, parent_id, run_id, '{\"values\":' || state_values || ',\"messages\":' || "     \
    "message_spans || '}', metadata, created_at_ms"

static void read_checkpoint(void *row, sdb_stmt *st) {
    store_checkpoint *c = row;
    memset(c, 0, sizeof *c);
    sq_copy_col(c->checkpoint_id, sizeof c->checkpoint_id, st, 0);
    sq_copy_col(c->parent_id, sizeof c->parent_id, st, 1);
    sq_copy_col(c->run_id, sizeof c->run_id, st, 2);
    c->state = sq_dup_col(st, 3);
    c->metadata = sq_dup_col(st, 4);
    c->created_at_ms = sdb_column_int64(st, 5);
}

int store_checkpoint_list(store *s, store_checkpoint **out, size_t *n, int64_t owner_id,
                          const char *thread_id, const char *before_id, size_t limit) {
    *out = NULL;
    *n = 0;
    limit = limit < 1 ? 1 : limit > STORE_CHECKPOINTS_KEPT ? STORE_CHECKPOINTS_KEPT : limit;
    fbuf rows = {0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " CHECKPOINT_COLUMNS " FROM checkpoints WHERE owner_id = ?1 AND "
                       "thread_id = ?2 AND (?3 IS NULL OR seq < (SELECT seq FROM checkpoints "
                       "WHERE owner_id = ?1 AND thread_id = ?2 AND checkpoint_id = ?3)) "
                       "ORDER BY seq DESC LIMIT ?4");
    if (r == 0) {
        bind_thread(st, owner_id, thread_id);
        sdb_bind_text(st, 3, before_id);
        sdb_bind_int64(st, 4, (int64_t)limit);
        r = sq_rows_read(db, &rows, st, sizeof(store_checkpoint), read_checkpoint,
                         "list checkpoints");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    store_checkpoint *cs = (store_checkpoint *)rows.data;
    size_t count = rows.len / sizeof *cs;
    for (size_t i = 0; r == 0 && i < count; i++)
        if (!cs[i].state || !cs[i].metadata)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0)
        for (size_t i = 0; i < count; i++)
            store_checkpoint_clear(&cs[i]);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_checkpoint), r);
}

int store_checkpoint_latest(store *s, store_checkpoint *out, int64_t owner_id,
                            const char *thread_id) {
    *out = (store_checkpoint){0};
    store_checkpoint *list;
    size_t n;
    int r = store_checkpoint_list(s, &list, &n, owner_id, thread_id, NULL, 1);
    if (r < 0)
        return r;
    if (n == 0) {
        free(list);
        return fawn_err(FAWN_ENOENT, "thread %s has no state yet", thread_id);
    }
    *out = list[0];
    free(list);
    return 0;
}

/* ---- one checkpoint, and where a message came into a lineage ---- */

/* A checkpoint of the thread (?1, ?2) by its id (?3), and its spans. */
#define CHECKPOINT_BY_ID                                                                           \
    "SELECT " CHECKPOINT_COLUMNS ", message_spans FROM checkpoints WHERE owner_id = ?1 AND "       \
    "thread_id = ?2 AND checkpoint_id = ?3"

/* The checkpoint id of the thread st (CHECKPOINT_BY_ID, the thread bound)
 * reads into *out, its spans appended to *spans when that is not NULL.
 * FAWN_ENOENT when there is none. */
static int checkpoint_row(sdb *db, store_checkpoint *out, fbuf *spans, sdb_stmt *st,
                          const char *id) {
    *out = (store_checkpoint){0};
    sdb_reset(st);
    sdb_bind_text(st, 3, id);
    int rc = sdb_step(st);
    if (rc == SDB_DONE)
        return fawn_err(FAWN_ENOENT, "Checkpoint %s not found", id);
    if (rc != SDB_ROW)
        return sq_err(db, rc, "read checkpoint");
    read_checkpoint(out, st);
    int r = out->state && out->metadata ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && spans) {
        json_t *list = json_loads((const char *)sdb_column_text(st, 6), 0, NULL);
        r = spans_parse(spans, NULL, list);
        json_decref(list);
    }
    if (r < 0)
        store_checkpoint_clear(out);
    return r;
}

int store_checkpoint_get(store *s, store_checkpoint *out, int64_t owner_id, const char *thread_id,
                         const char *checkpoint_id) {
    *out = (store_checkpoint){0};
    if (!fawn_id_valid(thread_id) || !sq_text_ok(checkpoint_id, STORE_RUN_ID_MAX))
        return fawn_err(FAWN_ENOENT, "Checkpoint not found");
    sdb *db = sq_read_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st, CHECKPOINT_BY_ID);
    if (r == 0) {
        bind_thread(st, owner_id, thread_id);
        r = checkpoint_row(db, out, NULL, st, checkpoint_id);
    }
    sdb_finalize(st);
    sq_read_end(s, db);
    return r;
}

/* The seqs (int64_t) of the thread's rows that hold a message of id id. */
static int rows_of_id(sdb *db, fbuf *seqs, int64_t owner_id, const char *thread_id,
                      const char *id) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       sq_pick(db,
                               "SELECT seq FROM thread_messages WHERE owner_id = ?1 AND "
                               "thread_id = ?2 AND json_extract(body, '$.id') = ?3",
                               "SELECT seq FROM thread_messages WHERE owner_id = ?1 AND "
                               "thread_id = ?2 AND body::jsonb ->> 'id' = ?3"));
    if (r < 0)
        return r;
    bind_thread(st, owner_id, thread_id);
    sdb_bind_text(st, 3, id);
    int rc;
    while (r == 0 && (rc = sdb_step(st)) == SDB_ROW)
        r = fbuf_append(seqs, &(int64_t){sdb_column_int64(st, 0)}, sizeof(int64_t));
    if (r == 0 && rc != SDB_DONE)
        r = sq_err(db, rc, "find message rows");
    sdb_finalize(st);
    return r;
}

/* Whether spans (span) list one of seqs (int64_t). */
static bool spans_list_any(const fbuf *spans, const fbuf *seqs) {
    const span *sp = (const span *)spans->data;
    const int64_t *q = (const int64_t *)seqs->data;
    for (size_t i = 0; i < spans->len / sizeof *sp; i++)
        for (size_t k = 0; k < seqs->len / sizeof *q; k++)
            if (q[k] >= sp[i].first && q[k] <= sp[i].last)
                return true;
    return false;
}

/* store_checkpoint_origin's walk, st reading the thread's checkpoints by
 * id and seqs the rows of message_id: at most one step per kept
 * checkpoint (a longer lineage would be a cycle). */
static int lineage_walk(sdb *db, store_checkpoint *first, sdb_stmt *st, const fbuf *seqs,
                        const char *head_id, const char *message_id) {
    char id[STORE_RUN_ID_MAX + 1];
    snprintf(id, sizeof id, "%s", head_id);
    for (size_t step = 0; step <= STORE_CHECKPOINTS_KEPT; step++) {
        store_checkpoint cp;
        fbuf spans = {0};
        int r = checkpoint_row(db, &cp, &spans, st, id);
        bool lists = r == 0 && spans_list_any(&spans, seqs);
        fbuf_free(&spans);
        if (r == FAWN_ENOENT && step > 0)
            return fawn_err(FAWN_ENOENT, "The checkpoint before message %s is no longer kept",
                            message_id);
        if (r < 0)
            return r;
        if (!lists) {
            store_checkpoint_clear(&cp);
            return step > 0 ? 0
                            : fawn_err(FAWN_ENOENT, "Checkpoint %s holds no message %s", head_id,
                                       message_id);
        }
        store_checkpoint_clear(first);
        *first = cp;
        if (!first->parent_id[0])
            return 0;
        snprintf(id, sizeof id, "%s", first->parent_id);
    }
    return fawn_err(FAWN_EIO, "The lineage of checkpoint %s is longer than the checkpoints kept",
                    head_id);
}

int store_checkpoint_origin(store *s, store_checkpoint *first, int64_t owner_id,
                            const char *thread_id, const char *head_id, const char *message_id) {
    *first = (store_checkpoint){0};
    if (!fawn_id_valid(thread_id) || !sq_text_ok(head_id, STORE_RUN_ID_MAX) || !message_id)
        return fawn_err(FAWN_ENOENT, "Checkpoint not found");
    sdb *db = sq_read_begin(s);
    sdb_stmt *st = NULL;
    fbuf seqs = {0};
    int r = sq_begin_read(db, "begin");
    if (r == 0)
        r = rows_of_id(db, &seqs, owner_id, thread_id, message_id);
    if (r == 0)
        r = sq_prepare(db, &st, CHECKPOINT_BY_ID);
    if (r == 0) {
        bind_thread(st, owner_id, thread_id);
        r = lineage_walk(db, first, st, &seqs, head_id, message_id);
    }
    sdb_finalize(st);
    r = sq_end_transaction(db, r);
    sq_read_end(s, db);
    fbuf_free(&seqs);
    if (r < 0)
        store_checkpoint_clear(first);
    return r;
}

/* ---- reading a state ---- */

/* What a state read gathers, newest message first. */
typedef struct state_pick {
    fbuf texts;      /* char *, one per message taken */
    size_t bytes;    /* their JSON, with the commas between them */
    uint64_t passed; /* positions gone through (taken, or no longer stored) */
    bool full;       /* the next message did not fit */
} state_pick;

static void state_pick_free(state_pick *p) {
    char **t = (char **)p->texts.data;
    for (size_t i = 0; i < p->texts.len / sizeof *t; i++)
        free(t[i]);
    fbuf_free(&p->texts);
}

/* Takes the rows of sp, newest first, while they fit in max_bytes. st
 * selects (bytes, body) of the thread's rows in [?3, ?4], newest first. */
static int span_pick(sdb *db, state_pick *p, sdb_stmt *st, const span *sp, size_t max_bytes) {
    sdb_reset(st);
    sdb_bind_int64(st, 3, sp->first);
    sdb_bind_int64(st, 4, sp->last);
    int rc;
    while ((rc = sdb_step(st)) == SDB_ROW) {
        size_t need = (size_t)sdb_column_int64(st, 0) + (p->texts.len ? 1 : 0);
        if (need > max_bytes - p->bytes) {
            p->full = true;
            p->passed += (uint64_t)(sp->last - sdb_column_int64(st, 2));
            return 0;
        }
        char *text = sq_dup_col(st, 1);
        int r = text ? fbuf_append(&p->texts, &text, sizeof text)
                     : fawn_err(FAWN_ENOMEM, "out of memory");
        if (r < 0) {
            free(text);
            return r;
        }
        p->bytes += need;
    }
    p->passed += (uint64_t)(sp->last - sp->first + 1);
    return rc == SDB_DONE ? 0 : sq_err(db, rc, "read messages");
}

/* Takes the messages of spans sp[0..n), newest first, within max_bytes, in
 * one read transaction. */
static int state_pick_rows(store *s, state_pick *p, int64_t owner_id, const char *thread_id,
                           const span *sp, size_t n, size_t max_bytes) {
    sdb *db = sq_read_begin(s);
    sdb_stmt *st = NULL;
    int r = sq_begin_read(db, "begin");
    if (r == 0)
        r = sq_prepare(db, &st,
                       "SELECT bytes, body, seq FROM thread_messages WHERE owner_id = ?1 "
                       "AND thread_id = ?2 AND seq BETWEEN ?3 AND ?4 ORDER BY seq DESC");
    if (r == 0)
        bind_thread(st, owner_id, thread_id);
    for (size_t i = n; r == 0 && i-- > 0 && !p->full;)
        r = span_pick(db, p, st, &sp[i], max_bytes);
    sdb_finalize(st);
    r = sq_end_transaction(db, r);
    sq_read_end(s, db);
    return r;
}

/* Copies n bytes of src to *at and moves *at past them. */
static void put(char **at, const char *src, size_t n) {
    memcpy(*at, src, n);
    *at += n;
}

/* values (without messages) and the messages taken, oldest first, as one
 * JSON object text, allocated once at its size (a state may be megabytes). */
static int state_compose(char **out, json_t *values, const state_pick *p, uint64_t omitted) {
    *out = NULL;
    json_object_del(values, "messages");
    json_object_del(values, "messages_omitted");
    char *head = json_dumps(values, JSON_COMPACT);
    char tail[64];
    int tail_len = omitted
                       ? snprintf(tail, sizeof tail, "],\"messages_omitted\":%" PRIu64 "}", omitted)
                       : snprintf(tail, sizeof tail, "]}");
    static const char key[] = "\"messages\":[";
    size_t head_len = head ? strlen(head) - 1 : 0; /* without its closing brace */
    bool comma = head_len > 1;
    char *const *texts = (char *const *)p->texts.data;
    size_t n = p->texts.len / sizeof *texts,
           size = head_len + comma + sizeof key + (size_t)tail_len;
    for (size_t i = 0; i < n; i++)
        size += strlen(texts[i]) + 1;
    char *text = head ? malloc(size) : NULL;
    if (!text) {
        free(head);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    char *at = text;
    put(&at, head, head_len);
    put(&at, ",", comma);
    put(&at, key, sizeof key - 1);
    for (size_t i = n; i-- > 0;) {
        put(&at, texts[i], strlen(texts[i]));
        put(&at, ",", i > 0);
    }
    put(&at, tail, (size_t)tail_len);
    *at = '\0';
    free(head);
    *out = text;
    return 0;
}

int store_state_read(store *s, char **out, size_t *omitted, int64_t owner_id, const char *thread_id,
                     const char *state, size_t max_bytes) {
    *out = NULL;
    *omitted = 0;
    json_t *ref = state ? json_loads(state, 0, NULL) : NULL;
    json_t *values = json_object_get(ref, "values");
    fbuf spans = {0};
    uint64_t positions = 0;
    int r = json_is_object(values)
                ? spans_parse(&spans, &positions, json_object_get(ref, "messages"))
                : fawn_err(FAWN_EINVAL, "not a state reference");
    state_pick p = {0};
    if (r == 0)
        r = state_pick_rows(s, &p, owner_id, thread_id, (const span *)spans.data,
                            spans.len / sizeof(span), max_bytes);
    uint64_t left = p.full ? positions - p.passed : 0;
    if (r == 0)
        r = state_compose(out, values, &p, left);
    if (r == 0)
        *omitted = (size_t)left;
    state_pick_free(&p);
    fbuf_free(&spans);
    json_decref(ref);
    return r;
}

/* ---- a page of the thread's messages ---- */

void store_message_clear(store_message *m) {
    free(m->body);
    memset(m, 0, sizeof *m);
}

/* What a page gathers, newest first. */
typedef struct page_pick {
    fbuf rows; /* store_message */
    size_t bytes, limit, max_bytes;
    bool more; /* a row that did not fit remains */
} page_pick;

static void page_pick_free(page_pick *p) {
    store_message *m = (store_message *)p->rows.data;
    for (size_t i = 0; i < p->rows.len / sizeof *m; i++)
        store_message_clear(&m[i]);
    fbuf_free(&p->rows);
}

/* The spans of the thread's newest checkpoint, sorted and merged, into
 * *spans (none when it has no checkpoint). FAWN_ENOENT: no such thread. */
static int newest_spans(sdb *db, fbuf *spans, int64_t owner_id, const char *thread_id) {
    int64_t exists;
    int r = thread_int(db, &exists, "SELECT 1 FROM threads WHERE owner_id = ?1 AND id = ?2",
                       owner_id, thread_id, "find thread");
    sdb_stmt *st = NULL;
    if (r == 0)
        r = sq_prepare(db, &st,
                       "SELECT message_spans FROM checkpoints WHERE owner_id = ?1 AND "
                       "thread_id = ?2 ORDER BY seq DESC LIMIT 1");
    if (r < 0)
        return r;
    bind_thread(st, owner_id, thread_id);
    int rc = sdb_step(st);
    if (rc == SDB_ROW) {
        json_t *list = json_loads((const char *)sdb_column_text(st, 0), 0, NULL);
        r = spans_parse(spans, NULL, list);
        json_decref(list);
    } else if (rc != SDB_DONE) {
        r = sq_err(db, rc, "read checkpoint spans");
    }
    sdb_finalize(st);
    uint64_t rows;
    if (r == 0)
        spans->len = spans_union((span *)spans->data, spans->len / sizeof(span), &rows) *
                     sizeof(span);
    return r;
}

/* Appends the row st is on to the page, unless it is full (then marks
 * more). */
static int page_take(page_pick *p, sdb_stmt *st) {
    size_t bytes = (size_t)sdb_column_int64(st, 3), count = p->rows.len / sizeof(store_message);
    bool fits = count == 0 || (p->bytes < p->max_bytes && bytes <= p->max_bytes - p->bytes);
    if (count == p->limit || !fits) {
        p->more = true;
        return 0;
    }
    store_message m = {.seq = sdb_column_int64(st, 0),
                       .created_at_ms = sdb_column_int64(st, 2),
                       .body = sq_dup_col(st, 4)};
    sq_copy_col(m.run_id, sizeof m.run_id, st, 1);
    int r = m.body ? fbuf_append(&p->rows, &m, sizeof m) : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0)
        free(m.body);
    p->bytes += bytes;
    return r;
}

/* Takes the rows of sp below before (0: all), newest first, until the page
 * is full. st selects (seq, run_id, created_at_ms, bytes, body) of the
 * thread's rows in [?3, ?4], newest first. */
static int page_span(sdb *db, page_pick *p, sdb_stmt *st, const span *sp, int64_t before) {
    int64_t hi = before > 0 && before - 1 < sp->last ? before - 1 : sp->last;
    if (hi < sp->first)
        return 0;
    sdb_reset(st);
    sdb_bind_int64(st, 3, sp->first);
    sdb_bind_int64(st, 4, hi);
    int rc, r = 0;
    while (r == 0 && !p->more && (rc = sdb_step(st)) == SDB_ROW)
        r = page_take(p, st);
    return r < 0 || p->more || rc == SDB_DONE ? r : sq_err(db, rc, "read messages");
}

/* The page, newest first, in one read transaction. */
static int page_read(store *s, page_pick *p, int64_t owner_id, const char *thread_id,
                     int64_t before) {
    sdb *db = sq_read_begin(s);
    sdb_stmt *st = NULL;
    fbuf spans = {0};
    int r = sq_begin_read(db, "begin");
    if (r == 0)
        r = newest_spans(db, &spans, owner_id, thread_id);
    if (r == 0)
        r = sq_prepare(db, &st,
                       "SELECT seq, run_id, created_at_ms, bytes, body FROM thread_messages "
                       "WHERE owner_id = ?1 AND thread_id = ?2 AND seq BETWEEN ?3 AND ?4 "
                       "ORDER BY seq DESC");
    if (r == 0)
        bind_thread(st, owner_id, thread_id);
    const span *sp = (const span *)spans.data;
    for (size_t i = spans.len / sizeof *sp; r == 0 && i-- > 0 && !p->more;)
        r = page_span(db, p, st, &sp[i], before);
    sdb_finalize(st);
    r = sq_end_transaction(db, r);
    sq_read_end(s, db);
    fbuf_free(&spans);
    return r;
}

int store_message_page(store *s, store_message **out, size_t *n, bool *has_more, int64_t owner_id,
                       const char *thread_id, int64_t before_seq, size_t limit, size_t max_bytes) {
    *out = NULL;
    *n = 0;
    *has_more = false;
    if (!fawn_id_valid(thread_id))
        return fawn_err(FAWN_ENOENT, "no such thread");
    page_pick p = {.limit = limit < 1                         ? 1
                            : limit > STORE_MESSAGES_PAGE_MAX ? STORE_MESSAGES_PAGE_MAX
                                                              : limit,
                   .max_bytes = max_bytes};
    int r = page_read(s, &p, owner_id, thread_id, before_seq);
    if (r < 0) {
        page_pick_free(&p);
        return r;
    }
    store_message *m = (store_message *)p.rows.data;
    size_t count = p.rows.len / sizeof *m;
    for (size_t i = 0; i < count / 2; i++) { /* oldest first */
        store_message t = m[i];
        m[i] = m[count - 1 - i];
        m[count - 1 - i] = t;
    }
    *has_more = p.more;
    return sq_rows_hand_out((void **)out, n, &p.rows, sizeof(store_message), 0);
}

/* ---- token usage ---- */

/* The totals row first (model NULL), then one row per model, costliest
 * first: model, runs, input, output, total tokens; the totals row then has
 * the lead agent's, the sub-agents' and middleware's total tokens. The
 * lead agent's answers are counted from the messages the runs wrote; the
 * other callers' from the runs' token_usage. */
#define LITE_USAGE_SQL                                                                             \
    "WITH ai AS (SELECT run_id, 'lead' AS c, "                                                     \
    "  json_extract(body, '$.response_metadata.model_name') AS m, "                                \
    "  json_extract(body, '$.usage_metadata.input_tokens') AS i, "                                 \
    "  json_extract(body, '$.usage_metadata.output_tokens') AS o, "                                \
    "  json_extract(body, '$.usage_metadata.total_tokens') AS t FROM thread_messages "             \
    "  WHERE owner_id = ?1 AND thread_id = ?2 AND run_id != '' "                                   \
    "  AND json_extract(body, '$.type') = 'ai' "                                                   \
    "  UNION ALL SELECT runs.run_id, json_extract(u.value, '$.caller'), "                          \
    "  json_extract(u.value, '$.model'), json_extract(u.value, '$.input_tokens'), "                \
    "  json_extract(u.value, '$.output_tokens'), json_extract(u.value, '$.total_tokens') "         \
    "  FROM runs, json_each(runs.token_usage) AS u WHERE runs.owner_id = ?1 "                      \
    "  AND runs.thread_id = ?2 AND json_extract(u.value, '$.caller') != 'lead'), "                 \
    "counted AS (SELECT run_id, CASE WHEN c = 'lead' THEN 0 "                                      \
    "  WHEN typeof(c) = 'text' AND c LIKE 'subagent:%' THEN 1 ELSE 2 END AS c, "                   \
    "  CASE WHEN typeof(m) = 'text' THEN m ELSE '' END AS m, "                                     \
    "  CASE WHEN typeof(i) = 'integer' AND i > 0 THEN i ELSE 0 END AS i, "                         \
    "  CASE WHEN typeof(o) = 'integer' AND o > 0 THEN o ELSE 0 END AS o, "                         \
    "  CASE WHEN typeof(t) = 'integer' AND t > 0 THEN t ELSE 0 END AS t FROM ai) "                 \
    "SELECT NULL, COUNT(DISTINCT run_id), TOTAL(i), TOTAL(o), TOTAL(t), "                          \
    "  TOTAL(CASE WHEN c = 0 THEN t END), TOTAL(CASE WHEN c = 1 THEN t END), "                     \
    "  TOTAL(CASE WHEN c = 2 THEN t END) FROM counted "                                            \
    "UNION ALL SELECT * FROM (SELECT m, COUNT(DISTINCT run_id), TOTAL(i), TOTAL(o), "              \
    "  TOTAL(t) AS tokens, 0, 0, 0 FROM counted GROUP BY m ORDER BY tokens DESC LIMIT ?3)"
/* The same on PostgreSQL: the JSON values stay jsonb until counted, and a
 * count is a positive JSON integer (as SQLite's typeof 'integer'). */
#define PG_JSON_COUNT(v)                                                                           \
    "CASE WHEN jsonb_typeof(" v ") = 'number' AND (" v " #>> '{}') ~ '^[0-9]{1,19}$' AND "         \
    "(" v " #>> '{}')::numeric <= 9223372036854775807 THEN (" v " #>> '{}')::numeric ELSE 0 END"
#define PG_TOTAL(v) "coalesce(sum(" v "), 0)::float8"
#define PG_USAGE_SQL                                                                                                                                              \
    "WITH ai AS (SELECT run_id, to_jsonb('lead'::text) AS c, "                                                                                                    \
    "  b -> 'response_metadata' -> 'model_name' AS m, b -> 'usage_metadata' -> 'input_tokens' "                                                                   \
    "  AS i, b -> 'usage_metadata' -> 'output_tokens' AS o, "                                                                                                     \
    "  b -> 'usage_metadata' -> 'total_tokens' AS t FROM (SELECT run_id, body::jsonb AS b "                                                                       \
    "  FROM thread_messages WHERE owner_id = ?1 AND thread_id = ?2 AND run_id != '') AS msg "                                                                     \
    "  WHERE b ->> 'type' = 'ai' "                                                                                                                                \
    "  UNION ALL SELECT runs.run_id, u.value -> 'caller', u.value -> 'model', "                                                                                   \
    "  u.value -> 'input_tokens', u.value -> 'output_tokens', u.value -> 'total_tokens' "                                                                         \
    "  FROM runs, jsonb_array_elements(runs.token_usage::jsonb) AS u(value) "                                                                                     \
    "  WHERE runs.owner_id = ?1 AND runs.thread_id = ?2 AND u.value ->> 'caller' <> 'lead'), "                                                                    \
    "counted AS (SELECT run_id, CASE WHEN c = to_jsonb('lead'::text) THEN 0 "                                                                                     \
    "  WHEN jsonb_typeof(c) = 'string' AND (c #>> '{}') LIKE 'subagent:%' THEN 1 ELSE 2 END AS "                                                                  \
    "c, "                                                                                                                                                         \
    "  CASE WHEN jsonb_typeof(m) = 'string' THEN m #>> '{}' ELSE '' END AS m, "                                                                                   \
    "  " PG_JSON_COUNT("i") " AS i, " PG_JSON_COUNT("o") " AS o, " PG_JSON_COUNT(                                                                                 \
        "t") " AS t "                                                                                                                                             \
             "  FROM ai) "                                                                                                                                        \
             "SELECT NULL::text, count(DISTINCT run_id), " PG_TOTAL("i") ", " PG_TOTAL(                                                                           \
                 "o") ", "                                                                                                                                        \
                      "  " PG_TOTAL("t") ", " PG_TOTAL(                                                                                                           \
                          "CASE WHEN c = 0 THEN t END") ", "                                                                                                      \
                                                        "  " PG_TOTAL(                                                                                            \
                                                            "CASE WHEN c = 1 THEN t "                                                                             \
                                                            "END") ", " PG_TOTAL("CASE WHEN c = "                                                                 \
                                                                                 "2 THEN t END") " "                                                              \
                                                                                                 "  "                                                             \
                                                                                                 "FROM "                                                          \
                                                                                                 "counte"                                                         \
                                                                                                 "d "                                                             \
                                                                                                 "UNION "                                                         \
                                                                                                 "ALL "                                                           \
                                                                                                 "SELECT"                                                         \
                                                                                                 " * "                                                            \
                                                                                                 "FROM "                                                          \
                                                                                                 "(SELEC"                                                         \
                                                                                                 "T m, "                                                          \
                                                                                                 "count("                                                         \
                                                                                                 "DISTIN"                                                         \
                                                                                                 "CT "                                                            \
                                                                                                 "run_"                                                           \
                                                                                                 "id), "                                                          \
                                                                                                 " "                                                              \
                                                                                                 " " PG_TOTAL("i") ", " PG_TOTAL(                                 \
                                                                                                     "o") ", " PG_TOTAL("t") " AS tokens, 0::float8, 0::float8, " \
                                                                                                                             "  0::float8 FROM counted GROUP BY m ORDER BY tokens DESC LIMIT ?3) AS per_model"

/* A TOTAL() column as a count: clamped to 0 … INT64_MAX. */
static int64_t total_col(sdb_stmt *st, int col) {
    double v = sdb_column_double(st, col);
    return v <= 0 ? 0 : v >= 9.2e18 ? INT64_MAX : (int64_t)v;
}

static void usage_row(store_token_usage *out, sdb_stmt *st) {
    if (sdb_column_is_null(st, 0)) {
        out->runs = sdb_column_int64(st, 1);
        out->input_tokens = total_col(st, 2);
        out->output_tokens = total_col(st, 3);
        out->total_tokens = total_col(st, 4);
        out->lead_agent_tokens = total_col(st, 5);
        out->subagent_tokens = total_col(st, 6);
        out->middleware_tokens = total_col(st, 7);
    } else if (out->n_models < STORE_USAGE_MODELS_MAX) {
        store_model_usage *m = &out->models[out->n_models++];
        sq_copy_col(m->model, sizeof m->model, st, 0);
        m->runs = sdb_column_int64(st, 1);
        m->tokens = total_col(st, 4);
    }
}

int store_thread_token_usage(store *s, store_token_usage *out, int64_t owner_id,
                             const char *thread_id) {
    memset(out, 0, sizeof *out);
    sdb *db = sq_read_begin(s);
    sdb_stmt *st = NULL;
    int r = sq_prepare(db, &st, sq_pick(db, LITE_USAGE_SQL, PG_USAGE_SQL));
    if (r == 0) {
        bind_thread(st, owner_id, thread_id);
        sdb_bind_int64(st, 3, STORE_USAGE_MODELS_MAX);
        int rc;
        while ((rc = sdb_step(st)) == SDB_ROW)
            usage_row(out, st);
        if (rc != SDB_DONE)
            r = sq_err(db, rc, "token usage");
    }
    sdb_finalize(st);
    sq_read_end(s, db);
    if (r < 0)
        memset(out, 0, sizeof *out);
    return r;
}

/* ---- migration 6: states into message rows ---- */

/* A stored state to move: the thread, and its row. */
typedef struct moved {
    int64_t owner_id;
    char thread_id[65];
    char run_id[STORE_RUN_ID_MAX + 1]; /* values events: the event's key */
    int64_t key;                       /* checkpoints: rowid; values events: seq */
} moved;

static void read_moved(void *row, sdb_stmt *st) {
    moved *m = row;
    memset(m, 0, sizeof *m);
    m->owner_id = sdb_column_int64(st, 0);
    sq_copy_col(m->thread_id, sizeof m->thread_id, st, 1);
    sq_copy_col(m->run_id, sizeof m->run_id, st, 2);
    m->key = sdb_column_int64(st, 3);
}

/* A whole state's text split for storage: *rest, its values without
 * messages, and *spans, its messages stored as rows of the thread (both
 * NULL, and 0, for text that is not a state object). */
static int state_move(sdb *db, char **rest, char **spans, const moved *m, const char *text) {
    *rest = *spans = NULL;
    json_t *values = text ? json_loads(text, 0, NULL) : NULL;
    msg_list msgs = {0};
    uint64_t rows;
    int r = json_is_object(values) ? state_split(rest, &msgs, values) : FAWN_EINVAL;
    if (r == 0)
        r = messages_store(db, spans, &rows, m->owner_id, m->thread_id, &msgs, NULL);
    msg_list_free(&msgs);
    json_decref(values);
    if (r < 0) {
        free(*rest);
        *rest = NULL;
    }
    return r == FAWN_EINVAL ? 0 : r;
}

/* Moves one stored state: select reads its text (?1 run_id, ?2 key of m),
 * update writes ?1 = its values without messages (or its reference, when
 * whole_ref) and ?2 = its spans to the row (?3 run_id, ?4 key). */
static int state_row_move(sdb *db, const moved *m, const char *select, const char *update,
                          bool whole_ref) {
    sdb_stmt *st;
    char *rest = NULL, *spans = NULL, *ref = NULL;
    int r = sq_prepare(db, &st, select);
    if (r < 0)
        return r;
    sdb_bind_text(st, 1, m->run_id);
    sdb_bind_int64(st, 2, m->key);
    int rc = sdb_step(st);
    r = rc == SDB_ROW ? state_move(db, &rest, &spans, m, (const char *)sdb_column_text(st, 0))
                      : sq_err(db, rc, "read a state to move");
    sdb_finalize(st);
    if (r == 0 && rest && whole_ref)
        r = reference_compose(&ref, rest, spans);
    if (r == 0 && rest && (r = sq_prepare(db, &st, update)) == 0) {
        sdb_bind_text(st, 1, whole_ref ? ref : rest);
        sdb_bind_text(st, 2, spans);
        sdb_bind_text(st, 3, m->run_id);
        sdb_bind_int64(st, 4, m->key);
        r = sq_step_done(db, st, true, "move a state");
    }
    free(rest);
    free(spans);
    free(ref);
    return r;
}

/* Rows listed per batch: the keys of a batch are read before its rows are
 * changed, and a batch at a time keeps that list small however many states
 * a database holds. */
#define MIGRATE_BATCH 512

/* Every row that list names (owner_id, thread_id, run_id, key; after ?1
 * run_id and ?2 key, at most ?3, in key order), moved. */
static int states_move(sdb *db, const char *list, const char *select, const char *update,
                       bool whole_ref) {
    moved last = {0};
    size_t n;
    int r = 0;
    do {
        fbuf rows = {0};
        sdb_stmt *st;
        r = sq_prepare(db, &st, list);
        if (r == 0) {
            sdb_bind_text(st, 1, last.run_id);
            sdb_bind_int64(st, 2, last.key);
            sdb_bind_int64(st, 3, MIGRATE_BATCH);
            r = sq_rows_read(db, &rows, st, sizeof(moved), read_moved, "list states to move");
            sdb_finalize(st);
        }
        const moved *m = (const moved *)rows.data;
        n = rows.len / sizeof *m;
        for (size_t i = 0; r == 0 && i < n; i++)
            r = state_row_move(db, &m[i], select, update, whole_ref);
        if (n)
            last = m[n - 1];
        fbuf_free(&rows);
    } while (r == 0 && n == MIGRATE_BATCH);
    return r;
}

int sq_state_migrate_messages(sdb *db) {
    int r = states_move(db,
                        "SELECT owner_id, thread_id, '', rowid FROM checkpoints "
                        "WHERE rowid > ?2 ORDER BY rowid LIMIT ?3",
                        "SELECT state_values FROM checkpoints WHERE rowid = ?2",
                        "UPDATE checkpoints SET state_values = ?1, message_spans = ?2 "
                        "WHERE rowid = ?4",
                        false);
    if (r == 0)
        r = states_move(db,
                        "SELECT r.owner_id, r.thread_id, e.run_id, e.seq FROM run_events e "
                        "JOIN runs r ON r.run_id = e.run_id WHERE e.event = 'values' AND "
                        "(e.run_id, e.seq) > (?1, ?2) ORDER BY e.run_id, e.seq LIMIT ?3",
                        "SELECT data FROM run_events WHERE run_id = ?1 AND seq = ?2",
                        "UPDATE run_events SET data = ?1 WHERE run_id = ?3 AND seq = ?4", true);
    return r;
}
