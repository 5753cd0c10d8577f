/* The store a unit test opens (test_store_open.h). */
#include "unit/test_store_open.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "store/db.h"

/* The server's conninfo (no dbname), or NULL: SQLite. */
static const char *pg_server(void) {
    const char *s = getenv("FAWN_TEST_PG");
    return s && s[0] ? s : NULL;
}

/* Creates the database name on the server unless it exists. */
static int pg_database_ensure(const char *server, const char *name) {
    char conninfo[1024], sql[128];
    if (snprintf(conninfo, sizeof conninfo, "%s dbname=postgres", server) >= (int)sizeof conninfo)
        return fawn_err(FAWN_EINVAL, "FAWN_TEST_PG too long");
    sdb *db;
    int r = sdb_pg_open(&db, conninfo);
    if (r < 0)
        return r;
    snprintf(sql, sizeof sql, "CREATE DATABASE %s", name);
    /* Another process may create it at the same moment. */
    if (sdb_exec(db, sql) != SDB_OK && !strstr(sdb_errmsg(db), "already exists") &&
        !strstr(sdb_errmsg(db), "duplicate key"))
        r = fawn_err(FAWN_EIO, "%s: %s", sql, sdb_errmsg(db));
    sdb_close(db);
    return r;
}

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
    const char *server = pg_server();
    if (!server)
        return store_open(out, path);
    char name[32], conninfo[1024];
    test_store_database_name(name, path);
    int r = pg_database_ensure(server, name);
    if (r < 0)
        return r;
    if (snprintf(conninfo, sizeof conninfo, "%s dbname=%s", server, name) >= (int)sizeof conninfo)
        return fawn_err(FAWN_EINVAL, "FAWN_TEST_PG too long");
    return store_open_postgres(out, conninfo);
}
