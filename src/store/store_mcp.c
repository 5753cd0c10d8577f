/* MCP tools pinned by discovery (store.h): one row per (server, tool),
 * replaced as a whole by each discovery; drift flags a row until then. */
#include <string.h>

#include "store/store_internal.h"

/* Inserts one pinned tool. */
static int tool_insert(sdb *db, const char *server, const json_t *t, int64_t now) {
    const char *name = json_string_value(json_object_get(t, "name"));
    const char *desc = json_string_value(json_object_get(t, "description"));
    const char *hash = json_string_value(json_object_get(t, "hash"));
    const json_t *schema = json_object_get(t, "input_schema");
    if (!sq_text_ok(name, STORE_MCP_NAME_MAX) || !desc || !sq_text_ok(hash, 64) ||
        !json_is_object(schema))
        return fawn_err(FAWN_EINVAL, "an MCP tool needs a name, description, hash and schema");
    char *schema_text = json_dumps(schema, JSON_COMPACT | JSON_SORT_KEYS);
    if (!schema_text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO mcp_tools (server, name, description, input_schema, hash, "
                       "discovered_at_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6)");
    if (r == 0) {
        sdb_bind_text(st, 1, server);
        sdb_bind_text(st, 2, name);
        sdb_bind_text(st, 3, desc);
        sdb_bind_text(st, 4, schema_text);
        sdb_bind_text(st, 5, hash);
        sdb_bind_int64(st, 6, now);
        r = sq_step_done(db, st, false, "pin an MCP tool");
    }
    free(schema_text);
    return r;
}

int store_mcp_tools_replace(store *s, const char *server, const json_t *tools) {
    if (!sq_text_ok(server, STORE_MCP_NAME_MAX) || !json_is_array(tools))
        return fawn_err(FAWN_EINVAL, "invalid MCP server name or tool list");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_begin_write(db, "begin");
    if (r == 0 && (r = sq_prepare(db, &st, "DELETE FROM mcp_tools WHERE server = ?1")) == 0) {
        sdb_bind_text(st, 1, server);
        r = sq_step_done(db, st, false, "unpin MCP tools");
    }
    int64_t now = fawn_wall_ms();
    for (size_t i = 0; r == 0 && i < json_array_size(tools); i++)
        r = tool_insert(db, server, json_array_get(tools, i), now);
    r = sq_end_transaction(db, r);
    sq_write_end(s, db);
    return r;
}

/* A JSON column, parsed (NULL when NULL or unreadable). */
static json_t *json_col(sdb_stmt *st, int col) {
    const char *text = (const char *)sdb_column_text(st, col);
    return text ? json_loads(text, 0, NULL) : NULL;
}

static int tools_read(json_t *list, sdb *db, sdb_stmt *st) {
    int rc;
    while ((rc = sdb_step(st)) == SDB_ROW) {
        json_t *drift = json_col(st, 5);
        json_t *row = json_pack(
            "{s:s, s:s, s:o, s:s, s:I, s:o}", "name", (const char *)sdb_column_text(st, 0),
            "description", (const char *)sdb_column_text(st, 1), "input_schema",
            json_col(st, 2) ?: json_object(), "hash", (const char *)sdb_column_text(st, 3),
            "discovered_at_ms", (json_int_t)sdb_column_int64(st, 4), "drift",
            drift ? drift : json_null());
        if (!row || json_array_append_new(list, row) < 0)
            return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return rc == SDB_DONE ? 0 : sq_err(db, rc, "read MCP tools");
}

int store_mcp_tools(store *s, const char *server, json_t **out) {
    *out = NULL;
    json_t *list = json_array();
    if (!list)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT name, description, input_schema, hash, discovered_at_ms, drift "
                       "FROM mcp_tools WHERE server = ?1 ORDER BY name");
    if (r == 0) {
        sdb_bind_text(st, 1, server);
        r = tools_read(list, db, st);
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    if (r < 0) {
        json_decref(list);
        return r;
    }
    *out = list;
    return 0;
}

int store_mcp_drift_set(store *s, const char *server, const char *name, const json_t *drift) {
    char *text = json_is_object(drift) ? json_dumps(drift, JSON_COMPACT | JSON_SORT_KEYS) : NULL;
    if (!text)
        return fawn_err(json_is_object(drift) ? FAWN_ENOMEM : FAWN_EINVAL,
                        "an MCP tool's drift is an object");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st, "UPDATE mcp_tools SET drift = ?3 WHERE server = ?1 AND name = ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, server);
        sdb_bind_text(st, 2, name);
        sdb_bind_text(st, 3, text);
        r = sq_step_done(db, st, true, "flag an MCP tool");
    }
    sq_write_end(s, db);
    free(text);
    return r;
}

int store_mcp_refresh_get(store *s, char **out, const char *server, const char *configured_sha256) {
    *out = NULL;
    sdb_stmt *st;
    sdb *db = sq_read_begin(s);
    int r = sq_prepare(db, &st,
                       "SELECT refresh_token FROM mcp_refresh_tokens "
                       "WHERE server = ?1 AND configured_sha256 = ?2");
    if (r == 0) {
        sdb_bind_text(st, 1, server);
        sdb_bind_text(st, 2, configured_sha256);
        int rc = sdb_step(st);
        if (rc == SDB_ROW)
            r = (*out = sq_dup_col(st, 0)) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
        else
            r = rc == SDB_DONE ? FAWN_ENOENT : sq_err(db, rc, "read a refresh token");
        sdb_finalize(st);
    }
    sq_read_end(s, db);
    return r;
}

int store_mcp_refresh_set(store *s, const char *server, const char *configured_sha256,
                          const char *token) {
    if (!sq_text_ok(server, STORE_MCP_NAME_MAX) || !sq_text_ok(token, STORE_MCP_TOKEN_MAX) ||
        !sq_text_ok(configured_sha256, 64))
        return fawn_err(FAWN_EINVAL, "invalid refresh token");
    sdb *db = sq_write_begin(s);
    sdb_stmt *st;
    int r = sq_prepare(db, &st,
                       "INSERT INTO mcp_refresh_tokens (server, configured_sha256, "
                       "refresh_token, updated_at_ms) VALUES (?1, ?2, ?3, ?4) "
                       "ON CONFLICT (server) DO UPDATE SET configured_sha256 = ?2, "
                       "refresh_token = ?3, updated_at_ms = ?4");
    if (r == 0) {
        sdb_bind_text(st, 1, server);
        sdb_bind_text(st, 2, configured_sha256);
        sdb_bind_text(st, 3, token);
        sdb_bind_int64(st, 4, fawn_wall_ms());
        r = sq_step_done(db, st, false, "save a refresh token");
    }
    sq_write_end(s, db);
    return r;
}
