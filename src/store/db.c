/* db.h's calls, dispatched to the connection's driver. */
#include "store/db_driver.h"

void sdb_close(sdb *db) {
    if (db)
        db->ops->close(db);
}

sdb_backend sdb_kind(const sdb *db) { return db->ops->kind; }
int sdb_exec(sdb *db, const char *sql) { return db->ops->exec(db, sql); }
int sdb_prepare(sdb *db, sdb_stmt **st, const char *sql) {
    *st = NULL;
    return db->ops->prepare(db, st, sql);
}
void sdb_bind_text(sdb_stmt *st, int i, const char *v) { st->ops->bind_text(st, i, v); }
void sdb_bind_int64(sdb_stmt *st, int i, int64_t v) { st->ops->bind_int64(st, i, v); }
void sdb_bind_double(sdb_stmt *st, int i, double v) { st->ops->bind_double(st, i, v); }
void sdb_bind_null(sdb_stmt *st, int i) { st->ops->bind_null(st, i); }
int sdb_bind_count(sdb_stmt *st) { return st->ops->bind_count(st); }
int sdb_step(sdb_stmt *st) { return st->ops->step(st); }
void sdb_reset(sdb_stmt *st) { st->ops->reset(st); }
void sdb_finalize(sdb_stmt *st) {
    if (st)
        st->ops->finalize(st);
}
const char *sdb_column_text(sdb_stmt *st, int col) { return st->ops->column_text(st, col); }
int64_t sdb_column_int64(sdb_stmt *st, int col) { return st->ops->column_int64(st, col); }
double sdb_column_double(sdb_stmt *st, int col) { return st->ops->column_double(st, col); }
bool sdb_column_is_null(sdb_stmt *st, int col) { return st->ops->column_is_null(st, col); }
int64_t sdb_changes(sdb *db) { return db->ops->changes(db); }
const char *sdb_errmsg(sdb *db) { return db->ops->errmsg(db); }
bool sdb_error_is_foreign_key(sdb *db) { return db->ops->error_is_foreign_key(db); }
bool sdb_notified(sdb *db) { return db->ops->notified(db); }

uint64_t sdb_sql_hash(const char *sql) {
    uint64_t h = 14695981039346656037ULL;
    for (const char *c = sql; *c; c++)
        h = (h ^ (unsigned char)*c) * 1099511628211ULL;
    return h;
}
