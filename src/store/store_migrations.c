/* The store's numbered migrations (store_internal.h), in one list: the
 * schema's whole history in SQLite's DDL. PostgreSQL runs what sq_pg_ddl
 * (store_ddl.c) makes of it: the same tables, columns, keys and indexes.
 * The few migrations the two must do differently (a primary key changed,
 * a data step in SQL, triggers) carry PostgreSQL's own DDL as well. */
#include "store/store_internal.h"

const sq_migration sq_migrations[] = {
    /* 1: users and threads */
    {.sql = "CREATE TABLE users ("
            "  id INTEGER PRIMARY KEY,"
            "  username TEXT NOT NULL UNIQUE,"
            "  password_hash TEXT NOT NULL,"
            "  role TEXT NOT NULL,"
            "  token_version INTEGER NOT NULL DEFAULT 0,"
            "  created_at_ms INTEGER NOT NULL);"
            "CREATE TABLE threads ("
            "  id TEXT PRIMARY KEY,"
            "  owner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
            "  status TEXT NOT NULL DEFAULT 'idle',"
            "  metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),"
            "  created_at_ms INTEGER NOT NULL,"
            "  updated_at_ms INTEGER NOT NULL);"
            "CREATE INDEX threads_by_owner ON threads(owner_id, updated_at_ms);"},
    /* 2: usernames unique regardless of case; API tokens */
    {.sql = "CREATE UNIQUE INDEX users_by_name_nocase ON users(username COLLATE NOCASE);"
            "CREATE TABLE api_tokens ("
            "  id INTEGER PRIMARY KEY,"
            "  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
            "  name TEXT NOT NULL,"
            "  token_hash TEXT NOT NULL UNIQUE,"
            "  created_at_ms INTEGER NOT NULL,"
            "  last_used_at_ms INTEGER);"
            "CREATE INDEX api_tokens_by_user ON api_tokens(user_id);"},
    /* 3: thread ids are unique per owner, so an id never tells whether
     * another user holds it */
    {"CREATE TABLE threads_by_owner_id ("
     "  id TEXT NOT NULL,"
     "  owner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
     "  status TEXT NOT NULL DEFAULT 'idle',"
     "  metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),"
     "  created_at_ms INTEGER NOT NULL,"
     "  updated_at_ms INTEGER NOT NULL,"
     "  PRIMARY KEY (owner_id, id));"
     "INSERT INTO threads_by_owner_id SELECT id, owner_id, status, metadata, created_at_ms,"
     "  updated_at_ms FROM threads;"
     "DROP TABLE threads;"
     "ALTER TABLE threads_by_owner_id RENAME TO threads;"
     "CREATE INDEX threads_by_owner ON threads(owner_id, updated_at_ms);",
     NULL,
     "ALTER TABLE threads DROP CONSTRAINT threads_pkey;"
     "ALTER TABLE threads ADD PRIMARY KEY (owner_id, id);"},
    /* 4: the sandbox manager's records: whose each box is, and fences */
    {.sql = "CREATE TABLE sandboxes ("
            "  sandbox_id TEXT PRIMARY KEY,"
            "  user TEXT NOT NULL,"
            "  thread TEXT NOT NULL,"
            "  generation TEXT NOT NULL,"
            "  endpoint TEXT NOT NULL,"
            "  token TEXT NOT NULL,"
            "  created_at_ms INTEGER NOT NULL);"
            "CREATE TABLE sandbox_fences ("
            "  scope TEXT NOT NULL,"
            "  sandbox_id TEXT NOT NULL,"
            "  generation TEXT NOT NULL,"
            "  reason TEXT NOT NULL,"
            "  created_at_ms INTEGER NOT NULL,"
            "  PRIMARY KEY (scope, sandbox_id, generation));"},
    /* 5: runs, their streamed events, thread checkpoints, tool receipts */
    {.sql =
         "CREATE TABLE runs ("
         "  run_id TEXT PRIMARY KEY,"
         "  owner_id INTEGER NOT NULL,"
         "  thread_id TEXT NOT NULL,"
         "  assistant_id TEXT NOT NULL,"
         "  status TEXT NOT NULL,"
         "  kwargs TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(kwargs)),"
         "  metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),"
         "  error TEXT,"
         "  created_at_ms INTEGER NOT NULL,"
         "  updated_at_ms INTEGER NOT NULL,"
         "  FOREIGN KEY (owner_id, thread_id) REFERENCES threads(owner_id, id) ON DELETE CASCADE);"
         "CREATE INDEX runs_by_thread ON runs(owner_id, thread_id, created_at_ms);"
         "CREATE INDEX runs_by_status ON runs(status);"
         "CREATE TABLE run_events ("
         "  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
         "  seq INTEGER NOT NULL,"
         "  event TEXT NOT NULL,"
         "  data TEXT NOT NULL,"
         "  PRIMARY KEY (run_id, seq)) WITHOUT ROWID;"
         "CREATE TABLE checkpoints ("
         "  owner_id INTEGER NOT NULL,"
         "  thread_id TEXT NOT NULL,"
         "  checkpoint_id TEXT NOT NULL,"
         "  parent_id TEXT NOT NULL,"
         "  run_id TEXT NOT NULL,"
         "  seq INTEGER NOT NULL,"
         "  state_values TEXT NOT NULL CHECK (json_valid(state_values)),"
         "  metadata TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(metadata)),"
         "  created_at_ms INTEGER NOT NULL,"
         "  PRIMARY KEY (owner_id, thread_id, checkpoint_id),"
         "  FOREIGN KEY (owner_id, thread_id) REFERENCES threads(owner_id, id) ON DELETE CASCADE);"
         "CREATE INDEX checkpoints_by_seq ON checkpoints(owner_id, thread_id, seq);"
         "CREATE TABLE receipts ("
         "  run_id TEXT NOT NULL REFERENCES runs(run_id) ON DELETE CASCADE,"
         "  tool_call_id TEXT NOT NULL,"
         "  tool_name TEXT NOT NULL,"
         "  status TEXT NOT NULL,"
         "  args_sha256 TEXT NOT NULL,"
         "  output_sha256 TEXT NOT NULL,"
         "  output_bytes INTEGER NOT NULL,"
         "  created_at_ms INTEGER NOT NULL,"
         "  PRIMARY KEY (run_id, tool_call_id));"},
    /* 6: each message of a thread stored once; checkpoints list their
     * messages as spans of the thread's rows, and stored values events
     * hold a reference to the state, not a copy (store_state.c) */
    {.sql =
         "ALTER TABLE checkpoints ADD COLUMN message_spans TEXT NOT NULL DEFAULT '[]';"
         "CREATE TABLE thread_messages ("
         "  owner_id INTEGER NOT NULL,"
         "  thread_id TEXT NOT NULL,"
         "  seq INTEGER NOT NULL,"
         "  digest TEXT NOT NULL,"
         "  bytes INTEGER NOT NULL,"
         "  body TEXT NOT NULL,"
         "  PRIMARY KEY (owner_id, thread_id, seq),"
         "  FOREIGN KEY (owner_id, thread_id) REFERENCES threads(owner_id, id) ON DELETE CASCADE);"
         "CREATE INDEX thread_messages_by_digest ON thread_messages(owner_id, thread_id, digest);",
     .data = sq_state_migrate_messages},
    /* 7: each message row records the run that wrote it ('' for a client's
     * update) and when: those of the oldest kept checkpoint that lists it,
     * for the rows already stored */
    {"ALTER TABLE thread_messages ADD COLUMN run_id TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE thread_messages ADD COLUMN created_at_ms INTEGER NOT NULL DEFAULT 0;"
     "UPDATE thread_messages SET (run_id, created_at_ms) = (SELECT c.run_id, c.created_at_ms "
     "  FROM checkpoints c, json_each(c.message_spans) s WHERE c.owner_id = "
     "  thread_messages.owner_id AND c.thread_id = thread_messages.thread_id AND "
     "  thread_messages.seq BETWEEN json_extract(s.value, '$[0]') AND "
     "  json_extract(s.value, '$[1]') ORDER BY c.seq LIMIT 1) WHERE EXISTS (SELECT 1 FROM "
     "  checkpoints c, json_each(c.message_spans) s WHERE c.owner_id = thread_messages.owner_id "
     "  AND c.thread_id = thread_messages.thread_id AND thread_messages.seq BETWEEN "
     "  json_extract(s.value, '$[0]') AND json_extract(s.value, '$[1]'));",
     NULL,
     "ALTER TABLE thread_messages ADD COLUMN run_id TEXT NOT NULL DEFAULT '';"
     "ALTER TABLE thread_messages ADD COLUMN created_at_ms BIGINT NOT NULL DEFAULT 0;"},
    /* 8: each user's memory facts (store_memory.c); content_key is the
     * content folded for deduplication */
    {.sql = "CREATE TABLE memory_facts ("
            "  id TEXT PRIMARY KEY,"
            "  owner_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
            "  content TEXT NOT NULL,"
            "  content_key TEXT NOT NULL,"
            "  category TEXT NOT NULL,"
            "  confidence REAL NOT NULL CHECK (confidence >= 0 AND confidence <= 1),"
            "  source TEXT NOT NULL,"
            "  created_at_ms INTEGER NOT NULL,"
            "  updated_at_ms INTEGER NOT NULL,"
            "  UNIQUE (owner_id, content_key));"
            "CREATE INDEX memory_facts_by_owner ON memory_facts(owner_id, created_at_ms);"},
    /* 9: skills an administrator enabled or disabled (a skill without a row
     * is enabled) */
    {.sql = "CREATE TABLE skill_states ("
            "  name TEXT PRIMARY KEY,"
            "  enabled INTEGER NOT NULL CHECK (enabled IN (0, 1)),"
            "  updated_at_ms INTEGER NOT NULL);"},
    /* 10: what each run's model calls cost: a list of {caller, model,
     * input_tokens, output_tokens, total_tokens, calls} */
    {.sql = "ALTER TABLE runs ADD COLUMN token_usage TEXT NOT NULL DEFAULT '[]' "
            "CHECK (json_valid(token_usage));"},
    /* 11: what a receipt's tool saw outside (a fetched page's URLs and hash) */
    {.sql = "ALTER TABLE receipts ADD COLUMN evidence TEXT "
            "CHECK (evidence IS NULL OR json_valid(evidence));"},
    /* 12: MCP tools pinned by an administrator's discovery, and the ones a
     * server has since listed differently (drift); OAuth refresh tokens an
     * MCP server's token endpoint rotated, with the hash of the configured
     * one they replace */
    {.sql = "CREATE TABLE mcp_tools ("
            "  server TEXT NOT NULL,"
            "  name TEXT NOT NULL,"
            "  description TEXT NOT NULL,"
            "  input_schema TEXT NOT NULL CHECK (json_valid(input_schema)),"
            "  hash TEXT NOT NULL,"
            "  discovered_at_ms INTEGER NOT NULL,"
            "  drift TEXT CHECK (drift IS NULL OR json_valid(drift)),"
            "  PRIMARY KEY (server, name));"
            "CREATE TABLE mcp_refresh_tokens ("
            "  server TEXT PRIMARY KEY,"
            "  configured_sha256 TEXT NOT NULL,"
            "  refresh_token TEXT NOT NULL,"
            "  updated_at_ms INTEGER NOT NULL);"},
    /* 13: scheduled tasks and their runs (store_schedules.c). A task's
     * claim_id names its claimed run not yet started; a scheduled
     * occurrence is run at most once (the unique index); a run's reported
     * status is its agent run's once started. */
    {.sql =
         "CREATE TABLE scheduled_tasks ("
         "  id TEXT PRIMARY KEY,"
         "  owner_id INTEGER NOT NULL,"
         "  title TEXT NOT NULL,"
         "  prompt TEXT NOT NULL,"
         "  schedule_type TEXT NOT NULL CHECK (schedule_type IN ('once', 'cron')),"
         "  schedule_spec TEXT NOT NULL,"
         "  timezone TEXT NOT NULL,"
         "  context_mode TEXT NOT NULL"
         "    CHECK (context_mode IN ('fresh_thread_per_run', 'reuse_thread')),"
         "  thread_id TEXT,"
         "  status TEXT NOT NULL CHECK (status IN ('enabled', 'paused', 'completed', 'stopped')),"
         "  stop_reason TEXT,"
         "  next_run_at_ms INTEGER,"
         "  claim_id TEXT,"
         "  lease_owner TEXT,"
         "  lease_until_ms INTEGER,"
         "  last_run_at_ms INTEGER,"
         "  last_run_id TEXT,"
         "  last_thread_id TEXT,"
         "  last_error TEXT,"
         "  run_count INTEGER NOT NULL DEFAULT 0,"
         "  created_at_ms INTEGER NOT NULL,"
         "  updated_at_ms INTEGER NOT NULL);"
         "CREATE INDEX scheduled_tasks_by_owner ON scheduled_tasks(owner_id, created_at_ms);"
         "CREATE INDEX scheduled_tasks_due ON scheduled_tasks(status, next_run_at_ms);"
         "CREATE TABLE scheduled_task_runs ("
         "  id TEXT PRIMARY KEY,"
         "  task_id TEXT NOT NULL REFERENCES scheduled_tasks(id) ON DELETE CASCADE,"
         "  owner_id INTEGER NOT NULL,"
         "  thread_id TEXT NOT NULL,"
         "  run_id TEXT,"
         "  scheduled_for_ms INTEGER NOT NULL,"
         "  trigger TEXT NOT NULL CHECK (trigger IN ('scheduled', 'manual')),"
         "  triggered_by INTEGER,"
         "  status TEXT NOT NULL CHECK (status IN ('claimed', 'started', 'skipped', 'failed')),"
         "  error TEXT,"
         "  started_at_ms INTEGER,"
         "  ended_at_ms INTEGER,"
         "  created_at_ms INTEGER NOT NULL);"
         "CREATE UNIQUE INDEX scheduled_task_runs_once ON scheduled_task_runs(task_id, "
         "  scheduled_for_ms) WHERE trigger = 'scheduled';"
         "CREATE INDEX scheduled_task_runs_by_task ON scheduled_task_runs(task_id, created_at_ms);"
         "CREATE INDEX scheduled_task_runs_by_status ON scheduled_task_runs(status);"},
    /* 14: the auth generation: a counter every change that can end or alter
     * an authentication bumps in the same transaction (a password, role,
     * username or token_version changed, a user or an API token gone), so
     * that a cache of verified credentials, in this process or another on
     * the same database, can tell that it must check again
     * (store_auth_generation). */
    {"CREATE TABLE auth_generation ("
     "  id INTEGER PRIMARY KEY CHECK (id = 1),"
     "  value INTEGER NOT NULL);"
     "INSERT INTO auth_generation (id, value) VALUES (1, 0);"
     "CREATE TRIGGER auth_user_changed AFTER UPDATE OF username, password_hash, role, "
     "  token_version ON users WHEN OLD.username IS NOT NEW.username "
     "  OR OLD.password_hash IS NOT NEW.password_hash OR OLD.role IS NOT NEW.role "
     "  OR OLD.token_version IS NOT NEW.token_version "
     "BEGIN UPDATE auth_generation SET value = value + 1 WHERE id = 1; END;"
     "CREATE TRIGGER auth_user_deleted AFTER DELETE ON users "
     "BEGIN UPDATE auth_generation SET value = value + 1 WHERE id = 1; END;"
     "CREATE TRIGGER auth_token_changed AFTER UPDATE OF user_id, token_hash ON api_tokens "
     "BEGIN UPDATE auth_generation SET value = value + 1 WHERE id = 1; END;"
     "CREATE TRIGGER auth_token_deleted AFTER DELETE ON api_tokens "
     "BEGIN UPDATE auth_generation SET value = value + 1 WHERE id = 1; END;",
     NULL,
     "CREATE TABLE auth_generation ("
     "  id BIGINT PRIMARY KEY CHECK (id = 1),"
     "  value BIGINT NOT NULL);"
     "INSERT INTO auth_generation (id, value) VALUES (1, 0);"
     /* The bump also tells every listening connection (NOTIFY, delivered
      * when the change commits): a store on PostgreSQL counts
      * store_auth_changes from it. */
     "CREATE FUNCTION fawn_auth_bump() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
     "  UPDATE auth_generation SET value = value + 1 WHERE id = 1;"
     "  PERFORM pg_notify('fawn_auth', ''); RETURN NULL; END $$;"
     "CREATE TRIGGER auth_user_changed AFTER UPDATE OF username, password_hash, role, "
     "  token_version ON users FOR EACH ROW WHEN (OLD.username IS DISTINCT FROM NEW.username "
     "  OR OLD.password_hash IS DISTINCT FROM NEW.password_hash OR OLD.role IS DISTINCT FROM "
     "  NEW.role OR OLD.token_version IS DISTINCT FROM NEW.token_version) "
     "  EXECUTE FUNCTION fawn_auth_bump();"
     "CREATE TRIGGER auth_user_deleted AFTER DELETE ON users FOR EACH ROW "
     "  EXECUTE FUNCTION fawn_auth_bump();"
     "CREATE TRIGGER auth_token_changed AFTER UPDATE OF user_id, token_hash ON api_tokens "
     "  FOR EACH ROW EXECUTE FUNCTION fawn_auth_bump();"
     "CREATE TRIGGER auth_token_deleted AFTER DELETE ON api_tokens FOR EACH ROW "
     "  EXECUTE FUNCTION fawn_auth_bump();"},
    /* 15: IM channels (store_channels.c): bindings, connect codes (their
     * hash), the thread of each conversation, the inbox (dedup record and
     * restart-safe queue), runtime settings. */
    {.sql = "CREATE TABLE channel_bindings ("
            "  id TEXT PRIMARY KEY,"
            "  provider TEXT NOT NULL,"
            "  platform_user_id TEXT NOT NULL,"
            "  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
            "  created_at_ms INTEGER NOT NULL,"
            "  UNIQUE (provider, platform_user_id));"
            "CREATE INDEX channel_bindings_by_user ON channel_bindings(user_id, created_at_ms);"
            "CREATE TABLE channel_connect_codes ("
            "  code_hash TEXT PRIMARY KEY,"
            "  provider TEXT NOT NULL,"
            "  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
            "  expires_at_ms INTEGER NOT NULL);"
            "CREATE TABLE channel_threads ("
            "  provider TEXT NOT NULL,"
            "  chat_key TEXT NOT NULL,"
            "  user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,"
            "  thread_id TEXT NOT NULL,"
            "  updated_at_ms INTEGER NOT NULL,"
            "  PRIMARY KEY (provider, chat_key, user_id));"
            "CREATE TABLE channel_inbox ("
            "  seq INTEGER PRIMARY KEY AUTOINCREMENT,"
            "  provider TEXT NOT NULL,"
            "  event_id TEXT NOT NULL,"
            "  chat_key TEXT NOT NULL,"
            "  message TEXT,"
            "  status TEXT NOT NULL CHECK (status IN ('queued', 'claimed', 'done')),"
            "  run_id TEXT,"
            "  created_at_ms INTEGER NOT NULL,"
            "  UNIQUE (provider, event_id));"
            "CREATE INDEX channel_inbox_by_status ON channel_inbox(status, seq);"
            "CREATE INDEX channel_inbox_by_chat ON channel_inbox(provider, chat_key, status);"
            "CREATE TABLE channel_settings ("
            "  provider TEXT PRIMARY KEY,"
            "  settings TEXT NOT NULL CHECK (json_valid(settings)),"
            "  updated_at_ms INTEGER NOT NULL);"},
    /* 16: several gateways on one store (store_gateways.c): the gateways
     * alive (each beats; one silent past its lease is reaped), the gateway
     * that owns each run ('' for runs older than this), a cancel asked for
     * through another gateway, and at most one unfinished run per thread,
     * which the store itself enforces (an older unfinished run of a thread
     * that has a newer one is ended first: no gateway can resume it). */
    {.sql = "CREATE TABLE gateways ("
            "  id TEXT PRIMARY KEY,"
            "  started_at_ms INTEGER NOT NULL,"
            "  beat_at_ms INTEGER NOT NULL);"
            "ALTER TABLE runs ADD COLUMN gateway_id TEXT NOT NULL DEFAULT '';"
            "ALTER TABLE runs ADD COLUMN cancel_requested INTEGER NOT NULL DEFAULT 0;"
            "UPDATE runs SET status = 'error', error = 'superseded by a newer run of its thread' "
            "  WHERE status IN ('pending', 'running') AND EXISTS (SELECT 1 FROM runs newer "
            "  WHERE newer.owner_id = runs.owner_id AND newer.thread_id = runs.thread_id "
            "  AND newer.status IN ('pending', 'running') AND newer.rowid > runs.rowid);"
            "CREATE UNIQUE INDEX runs_one_active_per_thread ON runs(owner_id, thread_id) "
            "  WHERE status IN ('pending', 'running');"
            "CREATE INDEX runs_by_gateway ON runs(gateway_id, status);"},
    /* 17: which gateway owns each sandbox, until when, and which gateway
     * asked it to let go (store_sandbox_owner_*) */
    {.sql = "CREATE TABLE sandbox_owners ("
            "  sandbox_id TEXT PRIMARY KEY,"
            "  user TEXT NOT NULL,"
            "  thread TEXT NOT NULL,"
            "  gateway TEXT NOT NULL,"
            "  lease_until_ms INTEGER NOT NULL,"
            "  release_asked_by TEXT NOT NULL DEFAULT '',"
            "  release_asked_at_ms INTEGER NOT NULL DEFAULT 0);"
            "CREATE INDEX sandbox_owners_by_gateway ON sandbox_owners(gateway);"},
    /* 18: sign-in attempts per client address (store_signin.c), shared by
     * every gateway on the database; at most the rule's addresses_max rows,
     * pruned oldest first by last_seen_s. And the auth generation each
     * store's watcher has seen (store_watch.c; used on PostgreSQL only),
     * one row per watcher connection, those of closed ones pruned. */
    {.sql = "CREATE TABLE signin_attempts ("
            "  address TEXT PRIMARY KEY,"
            "  attempts INTEGER NOT NULL,"
            "  window_start_s INTEGER NOT NULL,"
            "  locked_until_s INTEGER NOT NULL,"
            "  last_seen_s INTEGER NOT NULL);"
            "CREATE INDEX signin_attempts_by_age ON signin_attempts(last_seen_s);"
            "CREATE TABLE auth_watchers ("
            "  name TEXT PRIMARY KEY,"
            "  generation INTEGER NOT NULL,"
            "  seen_at_ms INTEGER NOT NULL);"},
};

const size_t sq_migrations_count = ARRAY_LEN(sq_migrations);
