/* db.h over PostgreSQL (libpq). A statement keeps its SQL, rewritten from
 * `?N` parameters to `$N`, and its bound values as text; its first step
 * runs it (text results) and later steps walk the result's rows. Every
 * parameter is sent with its type (int8, float8, text; a NULL of
 * sdb_bind_null untyped, so the server infers it from its place).
 *
 * Each connection prepares a statement once per SQL text and parameter
 * types, and runs it by name after that: the server parses and plans it
 * once instead of at every run. Statements past the cache's size run
 * unprepared (PQexecParams); the cache is emptied whenever the connection
 * is re-established, since the server's prepared statements go with it. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <libpq-fe.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "store/db_driver.h"

/* Parameters one statement may take (the store's largest takes ~25). */
#define PG_PARAMS_MAX 64
/* Type oids of pg_type.h (a server header libpq-dev does not ship). */
#define PG_INT8OID 20
#define PG_FLOAT8OID 701
#define PG_TEXTOID 25
/* Statements one connection keeps prepared (the store has about 300). */
#define PG_PREPARED_MAX 512

/* A statement prepared on the connection: key is its SQL followed by a
 * letter per parameter's type, name what the server knows it by. */
typedef struct pg_prepared {
    uint64_t hash;
    char *key;
    char name[24];
} pg_prepared;

typedef struct pgc {
    sdb base;
    PGconn *h;
    int64_t changes;
    char *err;
    bool err_fk;
    bool notified;      /* a NOTIFY arrived (sdb_notified) */
    bool notified_self; /* one this connection sent (sdb_pg_notified_self) */
    pg_prepared prepared[PG_PREPARED_MAX];
    size_t nprepared;
    uint64_t names_given; /* names are never reused on one connection */
} pgc;

typedef struct pg_stmt {
    sdb_stmt base;
    pgc *db;
    char *sql;
    int nparams;
    char *values[PG_PARAMS_MAX];
    unsigned types[PG_PARAMS_MAX];
    PGresult *res;
    int row;
} pg_stmt;

static const sdb_ops pg_ops;

static pgc *C(sdb *db) { return (pgc *)db; }
static pg_stmt *P(sdb_stmt *st) { return (pg_stmt *)st; }

static void pg_set_err(pgc *db, const char *msg) {
    free(db->err);
    db->err = strdup(msg ? msg : "unknown error");
    size_t n = db->err ? strlen(db->err) : 0;
    while (n > 0 && (db->err[n - 1] == '\n' || db->err[n - 1] == ' '))
        db->err[--n] = 0;
}

/* The class of a failed result, by SQLSTATE: integrity violations (23) and
 * values the schema refuses (22: a JSON column's text that is not JSON, as
 * SQLite's CHECK (json_valid) refuses it) are constraints; serialization
 * failures, deadlocks and lock timeouts are busy. */
static int pg_class(pgc *db, const PGresult *res) {
    const char *state = res ? PQresultErrorField(res, PG_DIAG_SQLSTATE) : NULL;
    pg_set_err(db, res ? PQresultErrorMessage(res) : PQerrorMessage(db->h));
    db->err_fk = state && strcmp(state, "23503") == 0;
    if (!state)
        return SDB_ERROR;
    if (strncmp(state, "23", 2) == 0 || strncmp(state, "22", 2) == 0)
        return SDB_CONSTRAINT;
    if (strcmp(state, "40001") == 0 || strcmp(state, "40P01") == 0 || strcmp(state, "55P03") == 0)
        return SDB_BUSY;
    return SDB_ERROR;
}

static void pg_forget_prepared(pgc *db) {
    for (size_t i = 0; i < db->nprepared; i++)
        free(db->prepared[i].key);
    db->nprepared = 0;
}

/* Re-establishes the connection; what it had prepared is gone. */
static void pg_reconnect(pgc *db) {
    PQreset(db->h);
    pg_forget_prepared(db);
}

/* A connection the server dropped (restart, failover) is re-established
 * before the next statement; the failed one has already answered its error. */
static void pg_revive(pgc *db) {
    if (PQstatus(db->h) == CONNECTION_BAD)
        pg_reconnect(db);
}

/* Reads what an idle connection received: true when the server closed
 * it. A notification is read once; a closed connection stays readable,
 * and the read after the server's last words meets its end. */
static bool pg_idle_closed(pgc *db) {
    for (int reads = 0; reads < 3; reads++) {
        struct pollfd p = {.fd = PQsocket(db->h), .events = POLLIN};
        if (p.fd < 0 || PQstatus(db->h) == CONNECTION_BAD)
            return true;
        if (poll(&p, 1, 0) != 1)
            return false;
        if (!PQconsumeInput(db->h))
            return true;
    }
    return PQstatus(db->h) == CONNECTION_BAD;
}

void sdb_pg_revive_idle(sdb *d) {
    pgc *db = C(d);
    if (pg_idle_closed(db))
        pg_reconnect(db);
}

/* Takes the notifications libpq read with the last result. */
static void pg_take_notifies(pgc *db) {
    PGnotify *n;
    while ((n = PQnotifies(db->h)) != NULL) {
        db->notified = true;
        db->notified_self = db->notified_self || n->be_pid == PQbackendPID(db->h);
        PQfreemem(n);
    }
}

/* Rows changed, for the commands that change rows (a SELECT's count is not
 * a change, as in SQLite). */
static void pg_note_changes(pgc *db, const PGresult *res) {
    const char *cmd = PQcmdStatus((PGresult *)res);
    if (strncmp(cmd, "INSERT", 6) == 0 || strncmp(cmd, "UPDATE", 6) == 0 ||
        strncmp(cmd, "DELETE", 6) == 0 || strncmp(cmd, "MERGE", 5) == 0)
        db->changes = strtoll(PQcmdTuples((PGresult *)res), NULL, 10);
}

static void pg_close(sdb *db) {
    pg_forget_prepared(C(db));
    PQfinish(C(db)->h);
    free(C(db)->err);
    free(db);
}

static int pg_exec(sdb *d, const char *sql) {
    pgc *db = C(d);
    pg_revive(db);
    PGresult *res = PQexec(db->h, sql);
    pg_take_notifies(db);
    ExecStatusType s = PQresultStatus(res);
    int rc = s == PGRES_COMMAND_OK || s == PGRES_TUPLES_OK ? SDB_OK : pg_class(db, res);
    if (rc == SDB_OK)
        pg_note_changes(db, res);
    PQclear(res);
    return rc;
}

/* Rewrites `?N` and `?` to `$N` outside quoted text and identifiers into a
 * new string; *n is the highest parameter number. */
static char *pg_rewrite(const char *sql, int *n) {
    size_t len = strlen(sql);
    char *out = malloc(len * 4 + 1); /* `?` → `$NN` at most triples a byte */
    if (!out)
        return NULL;
    char *o = out;
    int next = 0;
    *n = 0;
    char quote = 0;
    for (const char *c = sql; *c; c++) {
        if (quote) {
            *o++ = *c;
            if (*c == quote)
                quote = 0;
            continue;
        }
        if (*c == '\'' || *c == '"') {
            quote = *c;
            *o++ = *c;
            continue;
        }
        if (*c != '?') {
            *o++ = *c;
            continue;
        }
        int k;
        if (isdigit((unsigned char)c[1])) {
            char *end;
            k = (int)strtol(c + 1, &end, 10);
            c = end - 1;
        } else {
            k = ++next;
        }
        if (k > *n)
            *n = k;
        o += sprintf(o, "$%d", k);
    }
    *o = 0;
    return out;
}

static int pg_prepare(sdb *d, sdb_stmt **out, const char *sql) {
    pgc *db = C(d);
    pg_stmt *st = calloc(1, sizeof *st);
    if (!st) {
        pg_set_err(db, "out of memory");
        return SDB_ERROR;
    }
    st->sql = pg_rewrite(sql, &st->nparams);
    if (!st->sql || st->nparams > PG_PARAMS_MAX) {
        pg_set_err(db, st->sql ? "too many parameters" : "out of memory");
        free(st->sql);
        free(st);
        return SDB_ERROR;
    }
    st->base.ops = &pg_ops;
    st->db = db;
    st->row = -1;
    *out = &st->base;
    return SDB_OK;
}

static void pg_bind(sdb_stmt *s, int i, char *v, unsigned type) {
    pg_stmt *st = P(s);
    if (i < 1 || i > st->nparams) {
        free(v);
        return;
    }
    free(st->values[i - 1]);
    st->values[i - 1] = v;
    st->types[i - 1] = type;
}

static void pg_bind_text(sdb_stmt *st, int i, const char *v) {
    pg_bind(st, i, v ? strdup(v) : NULL, PG_TEXTOID);
}

static void pg_bind_int64(sdb_stmt *st, int i, int64_t v) {
    char buf[24];
    snprintf(buf, sizeof buf, "%" PRId64, v);
    pg_bind(st, i, strdup(buf), PG_INT8OID);
}

static void pg_bind_double(sdb_stmt *st, int i, double v) {
    char buf[40];
    snprintf(buf, sizeof buf, "%.17g", v);
    pg_bind(st, i, strdup(buf), PG_FLOAT8OID);
}

static void pg_bind_null(sdb_stmt *st, int i) { pg_bind(st, i, NULL, 0); }
static int pg_bind_count(sdb_stmt *st) { return P(st)->nparams; }

/* The statement's cache key: its SQL, a separator and a letter per
 * parameter type; NULL when out of memory. */
static char *pg_prepared_key(const pg_stmt *st, uint64_t *hash) {
    size_t len = strlen(st->sql);
    char *key = malloc(len + 2 + (size_t)st->nparams);
    if (!key)
        return NULL;
    memcpy(key, st->sql, len);
    key[len] = '\x01';
    for (int i = 0; i < st->nparams; i++)
        key[len + 1 + i] = st->types[i] == PG_INT8OID     ? 'i'
                           : st->types[i] == PG_FLOAT8OID ? 'f'
                           : st->types[i] == PG_TEXTOID   ? 't'
                                                          : 'n';
    key[len + 1 + st->nparams] = 0;
    *hash = sdb_sql_hash(key);
    return key;
}

/* The statement prepared on its connection, preparing it now if there is
 * room; NULL when it runs unprepared (cache full, out of memory, or the
 * server refused to prepare it: running it unprepared reports why). */
static const pg_prepared *pg_prepared_for(pg_stmt *st) {
    pgc *db = st->db;
    uint64_t hash;
    char *key = pg_prepared_key(st, &hash);
    if (!key)
        return NULL;
    for (size_t i = 0; i < db->nprepared; i++)
        if (db->prepared[i].hash == hash && strcmp(db->prepared[i].key, key) == 0) {
            free(key);
            return &db->prepared[i];
        }
    if (db->nprepared == PG_PREPARED_MAX) {
        free(key);
        return NULL;
    }
    pg_prepared *p = &db->prepared[db->nprepared];
    snprintf(p->name, sizeof p->name, "fawn_%" PRIu64, ++db->names_given);
    PGresult *res = PQprepare(db->h, p->name, st->sql, st->nparams, st->types);
    bool prepared = PQresultStatus(res) == PGRES_COMMAND_OK;
    PQclear(res);
    if (!prepared) {
        free(key);
        return NULL;
    }
    p->hash = hash;
    p->key = key;
    db->nprepared++;
    return p;
}

/* Whether res failed because the prepared statement is gone (26000) or
 * can no longer run as prepared (0A000: a table it reads changed shape). */
static bool pg_prepared_stale(const PGresult *res) {
    const char *state = PQresultErrorField(res, PG_DIAG_SQLSTATE);
    return state && (strcmp(state, "26000") == 0 || strcmp(state, "0A000") == 0);
}

static void pg_prepared_drop(pgc *db, const pg_prepared *p) {
    size_t i = (size_t)(p - db->prepared);
    free(db->prepared[i].key);
    db->prepared[i] = db->prepared[--db->nprepared];
}

/* Runs the statement with its bound values, by name when prepared. A
 * prepared statement gone stale is dropped and prepared again; outside a
 * transaction its run is repeated at once, inside one the transaction has
 * failed and the caller's error stands. */
static PGresult *pg_run(pg_stmt *st) {
    const char *const *values = (const char *const *)st->values;
    bool in_transaction = PQtransactionStatus(st->db->h) != PQTRANS_IDLE;
    PGresult *res = NULL;
    for (int attempt = 0; attempt < 2; attempt++) {
        const pg_prepared *p = pg_prepared_for(st);
        PQclear(res);
        if (!p)
            return PQexecParams(st->db->h, st->sql, st->nparams, st->types, values, NULL, NULL, 0);
        res = PQexecPrepared(st->db->h, p->name, st->nparams, values, NULL, NULL, 0);
        if (!pg_prepared_stale(res))
            break;
        pg_prepared_drop(st->db, p);
        if (in_transaction)
            break;
    }
    return res;
}

static int pg_step(sdb_stmt *s) {
    pg_stmt *st = P(s);
    if (!st->res) {
        pg_revive(st->db);
        st->res = pg_run(st);
        pg_take_notifies(st->db);
        ExecStatusType status = PQresultStatus(st->res);
        if (status != PGRES_TUPLES_OK && status != PGRES_COMMAND_OK) {
            int rc = pg_class(st->db, st->res);
            PQclear(st->res);
            st->res = NULL;
            return rc;
        }
        pg_note_changes(st->db, st->res);
        st->row = -1;
    }
    if (st->row + 1 < PQntuples(st->res)) {
        st->row++;
        return SDB_ROW;
    }
    st->row = PQntuples(st->res);
    return SDB_DONE;
}

static void pg_reset(sdb_stmt *s) {
    PQclear(P(s)->res);
    P(s)->res = NULL;
    P(s)->row = -1;
}

static void pg_finalize(sdb_stmt *s) {
    pg_stmt *st = P(s);
    PQclear(st->res);
    for (int i = 0; i < st->nparams; i++)
        free(st->values[i]);
    free(st->sql);
    free(st);
}

static bool pg_on_row(pg_stmt *st, int col) {
    return st->res && st->row >= 0 && st->row < PQntuples(st->res) && col >= 0 &&
           col < PQnfields(st->res);
}

static bool pg_column_is_null(sdb_stmt *s, int col) {
    pg_stmt *st = P(s);
    return !pg_on_row(st, col) || PQgetisnull(st->res, st->row, col);
}

static const char *pg_column_text(sdb_stmt *s, int col) {
    pg_stmt *st = P(s);
    return pg_column_is_null(s, col) ? NULL : PQgetvalue(st->res, st->row, col);
}

static int64_t pg_column_int64(sdb_stmt *s, int col) {
    const char *v = pg_column_text(s, col);
    if (!v)
        return 0;
    if (strcmp(v, "t") == 0 || strcmp(v, "f") == 0)
        return v[0] == 't';
    return strtoll(v, NULL, 10);
}

static double pg_column_double(sdb_stmt *s, int col) {
    const char *v = pg_column_text(s, col);
    return v ? strtod(v, NULL) : 0;
}

static int64_t pg_changes(sdb *db) { return C(db)->changes; }
static const char *pg_errmsg(sdb *db) { return C(db)->err ? C(db)->err : "no error"; }
static bool pg_error_is_foreign_key(sdb *db) { return C(db)->err_fk; }
static bool pg_notified(sdb *db) {
    bool n = C(db)->notified;
    C(db)->notified = false;
    return n;
}

int sdb_pg_backend_pid(sdb *db) { return PQbackendPID(C(db)->h); }

bool sdb_pg_notified_self(sdb *d) {
    pgc *db = C(d);
    bool n = db->notified_self;
    db->notified_self = false;
    return n;
}

/* Takes the notifications libpq has read: whether one came from a sender
 * not among ignore[0..n). */
static bool pg_take_notifies_from_others(pgc *db, const int *ignore, size_t n) {
    bool others = false;
    PGnotify *note;
    while ((note = PQnotifies(db->h)) != NULL) {
        bool ignored = false;
        for (size_t i = 0; i < n && !ignored; i++)
            ignored = note->be_pid == ignore[i];
        others = others || !ignored;
        PQfreemem(note);
    }
    return others;
}

int sdb_pg_wait(sdb *d, const int *ignore, size_t n, int wake_fd, int timeout_ms) {
    pgc *db = C(d);
    /* Taken with a statement's result, sender unknown: counted. */
    bool earlier = pg_notified(d);
    if (pg_take_notifies_from_others(db, ignore, n) || earlier)
        return 1;
    struct pollfd fds[] = {{.fd = PQsocket(db->h), .events = POLLIN},
                           {.fd = wake_fd, .events = POLLIN}};
    if (fds[0].fd < 0 || PQstatus(db->h) != CONNECTION_OK)
        return fawn_err(FAWN_EIO, "PostgreSQL connection lost");
    int ready = poll(fds, ARRAY_LEN(fds), timeout_ms);
    if (ready < 0 && errno != EINTR)
        return fawn_err(FAWN_EIO, "poll: %s", strerror(errno));
    if (ready <= 0 || fds[0].revents == 0)
        return 0;
    if (!PQconsumeInput(db->h) || PQstatus(db->h) != CONNECTION_OK) {
        pg_set_err(db, PQerrorMessage(db->h));
        return fawn_err(FAWN_EIO, "PostgreSQL connection lost: %s", db->err ? db->err : "?");
    }
    return pg_take_notifies_from_others(db, ignore, n) ? 1 : 0;
}

static const sdb_ops pg_ops = {
    .kind = SDB_POSTGRES,
    .close = pg_close,
    .exec = pg_exec,
    .prepare = pg_prepare,
    .bind_text = pg_bind_text,
    .bind_int64 = pg_bind_int64,
    .bind_double = pg_bind_double,
    .bind_null = pg_bind_null,
    .bind_count = pg_bind_count,
    .step = pg_step,
    .reset = pg_reset,
    .finalize = pg_finalize,
    .column_text = pg_column_text,
    .column_int64 = pg_column_int64,
    .column_double = pg_column_double,
    .column_is_null = pg_column_is_null,
    .changes = pg_changes,
    .errmsg = pg_errmsg,
    .error_is_foreign_key = pg_error_is_foreign_key,
    .notified = pg_notified,
};

/* Server notices (e.g. "there is no transaction in progress") are not
 * errors; they are not printed. */
static void pg_quiet(void *arg, const char *message) {
    (void)arg;
    (void)message;
}

int sdb_pg_open(sdb **out, const char *conninfo) {
    *out = NULL;
    pgc *db = calloc(1, sizeof *db);
    if (!db)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    db->base.ops = &pg_ops;
    db->h = PQconnectdb(conninfo);
    if (PQstatus(db->h) != CONNECTION_OK) {
        pg_set_err(db, PQerrorMessage(db->h));
        int r = fawn_err(FAWN_EIO, "connect to PostgreSQL: %s", db->err ? db->err : "?");
        pg_close(&db->base);
        return r;
    }
    PQsetNoticeProcessor(db->h, pg_quiet, NULL);
    *out = &db->base;
    return 0;
}
