/* What a driver of db.h provides (db_sqlite.c, db_pg.c): its connection
 * and statement structs begin with the common header below, and db.c
 * dispatches through its operations. */
#ifndef FAWN_STORE_DB_DRIVER_H
#define FAWN_STORE_DB_DRIVER_H

#include "store/db.h"

typedef struct sdb_ops {
    sdb_backend kind;
    void (*close)(sdb *db);
    int (*exec)(sdb *db, const char *sql);
    int (*prepare)(sdb *db, sdb_stmt **st, const char *sql);
    void (*bind_text)(sdb_stmt *st, int i, const char *v);
    void (*bind_int64)(sdb_stmt *st, int i, int64_t v);
    void (*bind_double)(sdb_stmt *st, int i, double v);
    void (*bind_null)(sdb_stmt *st, int i);
    int (*bind_count)(sdb_stmt *st);
    int (*step)(sdb_stmt *st);
    void (*reset)(sdb_stmt *st);
    void (*finalize)(sdb_stmt *st);
    const char *(*column_text)(sdb_stmt *st, int col);
    int64_t (*column_int64)(sdb_stmt *st, int col);
    double (*column_double)(sdb_stmt *st, int col);
    bool (*column_is_null)(sdb_stmt *st, int col);
    int64_t (*changes)(sdb *db);
    const char *(*errmsg)(sdb *db);
    bool (*error_is_foreign_key)(sdb *db);
    bool (*notified)(sdb *db);
} sdb_ops;

struct sdb {
    const sdb_ops *ops;
};

struct sdb_stmt {
    const sdb_ops *ops;
};

/* A hash of a statement's SQL (FNV-1a, 64 bits), for the drivers'
 * caches of prepared statements. */
uint64_t sdb_sql_hash(const char *sql);

#endif
