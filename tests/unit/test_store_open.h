/* The store a unit test opens, on the backend the environment chooses: a
 * SQLite file, or, when FAWN_TEST_PG holds the conninfo of a server
 * (scripts/pg-test-server.sh run ...), a PostgreSQL database of the test's
 * own on it. So one program runs on either backend unchanged. */
#ifndef FAWN_TEST_STORE_OPEN_H
#define FAWN_TEST_STORE_OPEN_H

#include "store/store.h"

/* The conninfo (without dbname) of the server FAWN_TEST_PG names, or NULL:
 * the tests run on SQLite. */
const char *test_pg_server(void);

/* Runs sql on the test server's maintenance database (CREATE DATABASE, a
 * backend's termination): 0, or -1 with the server's message on stderr. */
int test_pg_admin(const char *sql);

/* Opens the store of path: on SQLite the file at path (as store_open); on
 * PostgreSQL a database named after path, created the first time path is
 * opened, so opening path again (another handle, a restart, another
 * process) reaches the same data. Errors as store_open and
 * store_open_postgres. Caller closes. */
FAWN_MUST_CHECK int test_store_open(store **out, const char *path);

/* Writes to out the name of the PostgreSQL database test_store_open opens
 * for path. */
void test_store_database_name(char out[32], const char *path);

#endif
