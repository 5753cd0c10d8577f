/* The store a unit test opens (test_store_open.h). */
#include "unit/test_store_open.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"

const char *test_pg_server(void) {
    const char *s = getenv("FAWN_TEST_PG");
    return s && s[0] ? s : NULL;
}

/* Runs sql on the maintenance database. With exists_ok, a CREATE of what
 * exists (or is being created by another connection: its catalog row's
 * duplicate key) succeeds. */
static int pg_admin(const char *sql, bool exists_ok) {
    char conninfo[1024];
    if (snprintf(conninfo, sizeof conninfo, "%s dbname=postgres", test_pg_server()) >=
        (int)sizeof conninfo)
        return fawn_err(FAWN_EINVAL, "FAWN_TEST_PG too long");
    sdb *db;
    int r = sdb_pg_open(&db, conninfo);
    if (r < 0)
        return r;
    if (sdb_exec(db, sql) != SDB_OK && !(exists_ok && (strstr(sdb_errmsg(db), "already exists") ||
                                                       strstr(sdb_errmsg(db), "duplicate key")))) {
        fprintf(stderr, "%s: %s\n", sql, sdb_errmsg(db));
        r = fawn_err(FAWN_EIO, "%s: %s", sql, sdb_errmsg(db));
    }
    sdb_close(db);
    return r;
}

int test_pg_admin(const char *sql) { return pg_admin(sql, false) < 0 ? -1 : 0; }

/* FNV-1a of text: the database name of a path. */
static uint64_t fnv1a(const char *text) {
    uint64_t h = 0xcbf29ce484222325u;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++)
        h = (h ^ *p) * 0x100000001b3u;
    return h;
}

void test_store_database_name(char out[32], const char *path) {
    snprintf(out, 32, "unit_%016" PRIx64, fnv1a(path));
}

int test_store_open(store **out, const char *path) {
    *out = NULL;
    const char *server = test_pg_server();
    if (!server)
        return store_open(out, path);
    char name[32], sql[64], conninfo[1024];
    test_store_database_name(name, path);
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    int r = pg_admin(sql, true);
    if (r < 0)
        return r;
    if (snprintf(conninfo, sizeof conninfo, "%s dbname=%s", server, name) >= (int)sizeof conninfo)
        return fawn_err(FAWN_EINVAL, "FAWN_TEST_PG too long");
    return store_open_postgres(out, conninfo);
}
