/* The store's memory facts (store.h, "memory"). Every statement names the
 * owner, so no id reaches another owner's fact. Duplicates are refused by
 * the table's unique (owner, content_key): the key is the content with
 * ASCII letters lowered and runs of spaces made one space, trimmed. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "store/store_internal.h"

#define FACT_COLUMNS "id, content, category, confidence, source, created_at_ms, updated_at_ms"

static bool category_ok(const char *c) {
    size_t n = strlen(c);
    if (n == 0 || n > STORE_FACT_CATEGORY_MAX)
        return false;
    for (const char *p = c; *p; p++)
        if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '_' || *p == '-'))
            return false;
    return true;
}

/* Whether text is non-empty, bounded, valid UTF-8 and not only spaces. */
static bool content_ok(const char *text) {
    size_t n = strnlen(text, STORE_FACT_CONTENT_MAX + 1);
    if (n == 0 || n > STORE_FACT_CONTENT_MAX || !fawn_utf8_valid(text, n))
        return false;
    for (const char *p = text; *p; p++)
        if (!isspace((unsigned char)*p))
            return true;
    return false;
}

int store_fact_check(const store_fact *f) {
    if (!content_ok(f->content))
        return fawn_err(FAWN_EINVAL,
                        "a fact's content is 1 to %d bytes of UTF-8 text, not only spaces",
                        STORE_FACT_CONTENT_MAX);
    if (!category_ok(f->category))
        return fawn_err(FAWN_EINVAL, "a fact's category is 1 to %d of a-z, 0-9, _ and -",
                        STORE_FACT_CATEGORY_MAX);
    if (!(f->confidence >= 0 && f->confidence <= 1)) /* NaN fails too */
        return fawn_err(FAWN_EINVAL, "a fact's confidence is a number from 0 to 1");
    if (strnlen(f->source, sizeof f->source) > STORE_FACT_SOURCE_MAX)
        return fawn_err(FAWN_EINVAL, "a fact's source is at most %d bytes", STORE_FACT_SOURCE_MAX);
    return 0;
}

/* The deduplication key of content into key (as large as the content). */
static void content_key(char key[STORE_FACT_CONTENT_MAX + 1], const char *content) {
    size_t k = 0;
    bool space = false;
    for (const char *p = content; *p && k < STORE_FACT_CONTENT_MAX; p++) {
        if (isspace((unsigned char)*p)) {
            space = k > 0;
            continue;
        }
        if (space && k < STORE_FACT_CONTENT_MAX)
            key[k++] = ' ';
        space = false;
        if (k < STORE_FACT_CONTENT_MAX)
            key[k++] = (char)tolower((unsigned char)*p);
    }
    key[k] = '\0';
}

static size_t max_clamp(size_t max) {
    return max < 1 ? 1 : max > STORE_FACTS_MAX ? STORE_FACTS_MAX : max;
}

static void read_fact(void *row, sdb_stmt *st) {
    store_fact *f = row;
    sq_copy_col(f->id, sizeof f->id, st, 0);
    sq_copy_col(f->content, sizeof f->content, st, 1);
    sq_copy_col(f->category, sizeof f->category, st, 2);
    f->confidence = sdb_column_double(st, 3);
    sq_copy_col(f->source, sizeof f->source, st, 4);
    f->created_at_ms = sdb_column_int64(st, 5);
    f->updated_at_ms = sdb_column_int64(st, 6);
}

/* Inserts f for owner on db (the caller holds the writer) when the owner
 * holds fewer than max facts: the count and the insert are one statement.
 * out (may be NULL) gets the row. */
static int fact_insert(sdb *db, store_fact *out, int64_t owner_id, const store_fact *f,
                       size_t max) {
    int r = store_fact_check(f);
    char id[40], key[STORE_FACT_CONTENT_MAX + 1];
    sdb_stmt *st = NULL;
    if (r == 0)
        r = sq_prepare(db, &st,
                       "INSERT INTO memory_facts (id, owner_id, content, content_key, category, "
                       "confidence, source, created_at_ms, updated_at_ms) SELECT ?1, ?2, ?3, ?4, "
                       "?5, ?6, ?7, ?8, ?9 WHERE (SELECT count(*) FROM memory_facts WHERE "
                       "owner_id = ?2) < ?10 RETURNING " FACT_COLUMNS);
    if (r < 0)
        return r;
    char hex[33];
    fawn_random_hex(hex, 16);
    snprintf(id, sizeof id, "fact_%s", hex);
    content_key(key, f->content);
    int64_t now = fawn_wall_ms();
    sdb_bind_text(st, 1, id);
    sdb_bind_int64(st, 2, owner_id);
    sdb_bind_text(st, 3, f->content);
    sdb_bind_text(st, 4, key);
    sdb_bind_text(st, 5, f->category);
    sdb_bind_double(st, 6, f->confidence);
    sdb_bind_text(st, 7, f->source);
    sdb_bind_int64(st, 8, f->created_at_ms > 0 ? f->created_at_ms : now);
    sdb_bind_int64(st, 9, now);
    sdb_bind_int64(st, 10, (int64_t)max_clamp(max));
    int rc = sdb_step(st);
    r = rc == SDB_ROW    ? 0
        : rc == SDB_DONE ? fawn_err(FAWN_E2BIG, "memory holds at most %zu facts", max_clamp(max))
        : rc == SDB_CONSTRAINT ? fawn_err(FAWN_EEXIST, "a fact with the same content exists")
                               : sq_err(db, rc, "add fact");
    if (r == 0 && out)
        read_fact(out, st);
    sdb_finalize(st);
    return r;
}

int store_fact_add(store *s, store_fact *out, int64_t owner_id, const store_fact *f, size_t max) {
    if (out)
        *out = (store_fact){0};
    sdb *db = sq_write_begin(s);
    /* In a write transaction: the cap's count sees every committed fact,
     * on PostgreSQL too, where concurrent inserts would otherwise pass it
     * together. */
    int r = sq_begin_write(db, "begin add fact");
    if (r == 0)
        r = sq_end_transaction(db, fact_insert(db, out, owner_id, f, max));
    sq_write_end(s, db);
    return r;
}

int store_fact_list(store *s, store_fact **out, size_t *n, int64_t owner_id) {
    *out = NULL;
    *n = 0;
    fbuf rows = {0};
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT " FACT_COLUMNS " FROM memory_facts WHERE owner_id = ?1 "
                       "ORDER BY created_at_ms, rowid LIMIT ?2");
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        sdb_bind_int64(st, 2, STORE_FACTS_MAX);
        r = sq_rows_read(db, &rows, st, sizeof(store_fact), read_fact, "list facts");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return sq_rows_hand_out((void **)out, n, &rows, sizeof(store_fact), r);
}

/* The owner's fact id on db into f (FAWN_ENOENT when none). */
static int fact_get(sdb *db, store_fact *f, int64_t owner_id, const char *id) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "SELECT " FACT_COLUMNS " FROM memory_facts WHERE owner_id = ?1 AND id = ?2");
    if (r < 0)
        return r;
    sdb_bind_int64(st, 1, owner_id);
    sdb_bind_text(st, 2, id);
    r = sq_step_row(db, st, "get fact", "no such fact");
    if (r == 0)
        read_fact(f, st);
    sdb_finalize(st);
    return r;
}

/* Writes f's content, category and confidence over the owner's row. */
static int fact_write(sdb *db, store_fact *f, int64_t owner_id) {
    char key[STORE_FACT_CONTENT_MAX + 1];
    content_key(key, f->content);
    f->updated_at_ms = fawn_wall_ms();
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "UPDATE memory_facts SET content = ?3, content_key = ?4, category = ?5, "
                       "confidence = ?6, updated_at_ms = ?7 WHERE owner_id = ?1 AND id = ?2");
    if (r < 0)
        return r;
    sdb_bind_int64(st, 1, owner_id);
    sdb_bind_text(st, 2, f->id);
    sdb_bind_text(st, 3, f->content);
    sdb_bind_text(st, 4, key);
    sdb_bind_text(st, 5, f->category);
    sdb_bind_double(st, 6, f->confidence);
    sdb_bind_int64(st, 7, f->updated_at_ms);
    r = sq_step_done(db, st, true, "update fact");
    return r == FAWN_EEXIST ? fawn_err(FAWN_EEXIST, "a fact with the same content exists") : r;
}

/* f with the changes store_fact_update names applied (content and
 * category when not NULL, confidence when >= 0), checked. */
static int fact_change(store_fact *f, const char *content, const char *category,
                       double confidence) {
    if ((content && strlen(content) > STORE_FACT_CONTENT_MAX) ||
        (category && strlen(category) > STORE_FACT_CATEGORY_MAX))
        return fawn_err(FAWN_EINVAL, "a fact's content is at most %d bytes, its category %d",
                        STORE_FACT_CONTENT_MAX, STORE_FACT_CATEGORY_MAX);
    if (content)
        snprintf(f->content, sizeof f->content, "%s", content);
    if (category)
        snprintf(f->category, sizeof f->category, "%s", category);
    if (confidence >= 0)
        f->confidence = confidence;
    return store_fact_check(f);
}

int store_fact_update(store *s, store_fact *out, int64_t owner_id, const char *id,
                      const char *content, const char *category, double confidence) {
    if (out)
        *out = (store_fact){0};
    store_fact f = {0};
    sdb *db = sq_write_begin(s);
    /* Read, change, write: one write transaction (on PostgreSQL another
     * gateway's update could land between the read and the write). */
    int r = sq_begin_write(db, "begin update fact");
    if (r == 0)
        r = fact_get(db, &f, owner_id, id);
    if (r == 0)
        r = fact_change(&f, content, category, confidence);
    if (r == 0)
        r = fact_write(db, &f, owner_id);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    if (r == 0 && out)
        *out = f;
    return r;
}

int store_fact_delete(store *s, int64_t owner_id, const char *id) {
    sdb_stmt *st;
    sdb *db = sq_write_begin(s);
    int r = sq_prepare(db, &st, "DELETE FROM memory_facts WHERE owner_id = ?1 AND id = ?2");
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        sdb_bind_text(st, 2, id);
        r = sq_step_done(db, st, true, "delete fact");
    }
    sq_write_end(s, db);
    return r == FAWN_ENOENT ? fawn_err(FAWN_ENOENT, "no such fact") : r;
}

/* Deletes every fact of owner on db. */
static int facts_clear(sdb *db, int64_t owner_id) {
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "DELETE FROM memory_facts WHERE owner_id = ?1");
    if (r == 0) {
        sdb_bind_int64(st, 1, owner_id);
        r = sq_step_done(db, st, false, "clear facts");
    }
    return r;
}

int store_fact_replace(store *s, int64_t owner_id, const store_fact *facts, size_t n, size_t max) {
    if (n > max_clamp(max))
        return fawn_err(FAWN_E2BIG, "memory holds at most %zu facts", max_clamp(max));
    for (size_t i = 0; i < n; i++)
        if (store_fact_check(&facts[i]) < 0)
            return fawn_err(FAWN_EINVAL, "facts[%zu]: %s", i, fawn_errmsg());
    sdb *db = sq_write_begin(s);
    int r = sq_begin_write(db, "begin replace facts");
    if (r == 0) {
        r = facts_clear(db, owner_id);
        for (size_t i = 0; r == 0 && i < n; i++)
            if ((r = fact_insert(db, NULL, owner_id, &facts[i], max)) == FAWN_EEXIST)
                r = fawn_err(FAWN_EEXIST, "facts[%zu]: a fact of the same content comes before it",
                             i);
        r = sq_end_transaction(db, r);
    }
    sq_write_end(s, db);
    return r;
}
