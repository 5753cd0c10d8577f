/* The store: fawn's durable state behind one interface (DESIGN §4). This is
 * the contract of both its backends, SQLite and PostgreSQL; numbered
 * migrations bring any older database up to date when it is opened.
 *
 * Every function returns 0 or a negative FAWN_E*: FAWN_ENOENT when the row
 * does not exist (or belongs to another owner), FAWN_EEXIST on a unique key,
 * FAWN_EINVAL for bad input, FAWN_EBUSY when the database stayed locked past
 * the busy timeout, FAWN_EIO otherwise. A store handle may be used from
 * several threads at once.
 *
 * Every out-parameter is set on every path, failures included: a function
 * zeroes its out-parameters (NULL pointers, empty structs that their clear
 * function accepts, 0, false) before anything can fail. */
#ifndef FAWN_STORE_H
#define FAWN_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

#include "base/base.h"

typedef struct store store;

/* Opens (creating it and its directory when missing) the database at path,
 * in WAL mode, and applies the migrations it lacks in one transaction each.
 * FAWN_EINVAL when the database is newer than this fawn. Caller closes. */
FAWN_MUST_CHECK int store_open(store **out, const char *path);
/* Opens the store on a PostgreSQL database (conninfo: a libpq connection
 * string or URI) with a small pool of connections, and applies the
 * migrations it lacks, one write transaction each (gateways starting
 * together apply each once). The same contract as on SQLite; several
 * gateways may share the database. FAWN_EIO when it cannot connect.
 * Caller closes. */
FAWN_MUST_CHECK int store_open_postgres(store **out, const char *conninfo);
/* Whether several gateways may share the store at once (PostgreSQL). A
 * SQLite store is one host's file, used by one gateway at a time. */
bool store_shared(const store *s);
void store_close(store *s);

/* The schema version the database is at. */
FAWN_MUST_CHECK int store_schema_version(store *s, int *out);

/* ---- users ---- */

/* Longest username (an email address fits) and password hash accepted.
 * Usernames are unique regardless of case, and found regardless of case. */
#define STORE_NAME_MAX 254
#define STORE_HASH_MAX 256
#define STORE_ROLE_MAX 32

typedef struct store_user {
    int64_t id;
    char username[STORE_NAME_MAX + 1];
    char password_hash[STORE_HASH_MAX + 1];
    char role[STORE_ROLE_MAX + 1];
    int64_t token_version; /* bumped to revoke every session of the user */
    int64_t created_at_ms;
} store_user;

/* Creates a user; FAWN_EEXIST when the username is taken. */
FAWN_MUST_CHECK int store_user_create(store *s, store_user *out, const char *username,
                                      const char *password_hash, const char *role);
FAWN_MUST_CHECK int store_user_get(store *s, store_user *out, int64_t id);
FAWN_MUST_CHECK int store_user_get_by_name(store *s, store_user *out, const char *username);
/* The first user (lowest id) with role; FAWN_ENOENT when there is none. */
FAWN_MUST_CHECK int store_user_get_by_role(store *s, store_user *out, const char *role);
/* Number of users with role (all users when role is NULL). */
FAWN_MUST_CHECK int store_user_count(store *s, int64_t *out, const char *role);
/* Replaces the password hash and bumps token_version (revoking sessions). */
FAWN_MUST_CHECK int store_user_set_password(store *s, int64_t id, const char *password_hash);
/* Gives the user another role: every later check of the user reads it
 * (requests, and each tool call of a run already going). FAWN_ENOENT when
 * there is no such user. */
FAWN_MUST_CHECK int store_user_set_role(store *s, int64_t id, const char *role);
/* Bumps token_version alone (log out everywhere). */
FAWN_MUST_CHECK int store_user_revoke_sessions(store *s, int64_t id);

/* ---- the auth generation ----
 * What a cache of verified credentials (auth.h) checks to know that it
 * must ask again: every committed change that can end or alter an
 * authentication — a password, role, username or token_version changed, a
 * user or an API token deleted — bumps it, whatever code or process made
 * the change (the database's triggers do it in the same transaction). */

/* The database's generation, as every process on it sees it (one query).
 * FAWN_EIO / FAWN_EBUSY when it cannot be read. */
FAWN_MUST_CHECK int store_auth_generation(store *s, int64_t *out);
/* A number that moves with every committed change of the generation this
 * handle can see, and with nothing else: no query. A write through this
 * handle has moved it by the time the write returns, so this process sees
 * its own revocations at once. On PostgreSQL another process's change
 * moves it as soon as the database's notification of it arrives (a
 * connection of the store waits for them: store_internal.h,
 * sq_watch_start), and that process's write returns only after it has
 * (store_watch.c); while that connection is lost, every call answers a new
 * number, so a cache keyed on it keeps nothing. On SQLite another
 * process's changes do not move it (read store_auth_generation). */
uint64_t store_auth_changes(store *s);
/* How many operations (each takes a connection: one query or one
 * transaction) this handle has begun: what tests count to show that a
 * path does not reach the database. */
uint64_t store_operations(store *s);

/* ---- sign-in throttling (store_signin.c) ----
 * Sign-in attempts per client address, in the database, so that every
 * gateway on it counts the same attempts and honours the same lockouts.
 * An attempt is counted before its credentials are checked, in the same
 * write transaction as the lockout check: attempts racing on several
 * gateways cannot slip past the rule between a check and a count. */

/* Longest client address kept (a canonical IPv6 address is at most 45). */
#define STORE_SIGNIN_ADDRESS_MAX 63

typedef struct store_signin_rule {
    int64_t attempts;      /* attempts within window_s that lock the address out */
    int64_t window_s;      /* the counting window, and how long a lockout lasts */
    int64_t addresses_max; /* addresses kept at most: the bound on the table */
} store_signin_rule;

/* Counts an attempt from address at now_s (seconds since the epoch) under
 * rule, in one write transaction: *wait_s = the seconds left of the
 * address's lockout (the attempt is refused and not counted), or 0: the
 * attempt is counted (the rule's attempts-th within the window locks the
 * address out for window_s) and may proceed. The same transaction drops
 * addresses whose window and lockout are over, then, past addresses_max,
 * those seen longest ago (ones not locked out first; never address).
 * FAWN_EINVAL for an empty or too long address (*wait_s is 0 on every
 * error: the caller decides whether an unknown count refuses). */
FAWN_MUST_CHECK int store_signin_attempt(store *s, int64_t *wait_s, const char *address,
                                         int64_t now_s, const store_signin_rule *rule);
/* Forgets address's attempts (after a successful sign-in). */
FAWN_MUST_CHECK int store_signin_forget(store *s, const char *address);
/* How many addresses are kept (what tests read to check the bound). */
FAWN_MUST_CHECK int store_signin_addresses(store *s, int64_t *out);

/* ---- threads ---- */

/* A thread's metadata is a JSON object of at most this many bytes. */
#define STORE_METADATA_MAX (64 * 1024)
/* Levels of objects and arrays a metadata object (itself one) or a search's
 * match nests at most: SQLite's JSON functions refuse documents nested past
 * 2000 levels, which jansson accepts; real metadata nests a few. */
#define STORE_JSON_DEPTH_MAX 64

typedef struct store_thread {
    char id[65];
    int64_t owner_id;
    char status[16]; /* idle | busy | interrupted | error */
    char *metadata;  /* JSON object text, malloc'd (store_thread_clear frees it) */
    int64_t created_at_ms, updated_at_ms;
    /* From the thread's newest checkpoint: its state's title (a string;
     * NULL when the state has none, malloc'd) and when it was written (0
     * when the thread has no checkpoint yet). */
    char *title;
    int64_t state_updated_at_ms;
} store_thread;

void store_thread_clear(store_thread *t);

/* Creates thread id for owner with metadata (a JSON object text). An id that
 * already exists for the same owner is not an error: *existed is set and out
 * holds the stored thread. Ids are per owner: another owner's thread of
 * the same id is a different thread. */
FAWN_MUST_CHECK int store_thread_create(store *s, store_thread *out, bool *existed,
                                        int64_t owner_id, const char *id, const char *metadata);
/* The owner's thread (another owner's is FAWN_ENOENT). */
FAWN_MUST_CHECK int store_thread_get(store *s, store_thread *out, int64_t owner_id, const char *id);
/* Replaces the metadata and bumps updated_at. */
FAWN_MUST_CHECK int store_thread_set_metadata(store *s, int64_t owner_id, const char *id,
                                              const char *metadata);
FAWN_MUST_CHECK int store_thread_set_status(store *s, int64_t owner_id, const char *id,
                                            const char *status);
FAWN_MUST_CHECK int store_thread_delete(store *s, int64_t owner_id, const char *id);

/* A search's metadata match: at most this many keys and bytes (compact
 * JSON). Each key is a JSON lookup in every thread searched, so a search
 * costs keys × threads; real matches name one to a few keys (DeerFlow's UI:
 * graph_id, assistant_id), and 8 KiB holds any such value. */
#define STORE_MATCH_KEYS_MAX 32
#define STORE_MATCH_MAX (8 * 1024)

/* Thread ids one search may name (`ids`): as many as a search returns. */
#define STORE_SEARCH_IDS_MAX 1000

/* The owner's threads whose metadata contains every key/value of `match` (a
 * JSON object text, or NULL), whose status is `status` (or any when NULL)
 * and whose id is one of `ids` (a JSON array text of at most
 * STORE_SEARCH_IDS_MAX thread ids, or NULL for any), newest first. *out is
 * a malloc'd array of *n threads (free each with store_thread_clear, then
 * the array). limit is clamped to 1..1000. FAWN_E2BIG for a match beyond
 * STORE_MATCH_KEYS_MAX, STORE_MATCH_MAX or STORE_JSON_DEPTH_MAX, or more
 * ids than STORE_SEARCH_IDS_MAX; FAWN_EINVAL for ids that are not such a
 * list. */
FAWN_MUST_CHECK int store_thread_search(store *s, store_thread **out, size_t *n, int64_t owner_id,
                                        const char *match, const char *status, const char *ids,
                                        size_t limit, size_t offset);

/* ---- sandboxes and fences (the sandbox manager's durable records) ---- */

/* Which (user, thread) a running box belongs to, so that a restarted
 * gateway can tell its own boxes from strays. */
typedef struct store_sandbox {
    char sandbox_id[17];
    char user[65];
    char thread[65];
    char generation[33];
    char endpoint[4096]; /* where its box API answers */
    char token[128];     /* its bearer token ("" for local boxes) */
    int64_t created_at_ms;
} store_sandbox;

/* Records (or replaces) the box of sb->sandbox_id (created_at is now). */
FAWN_MUST_CHECK int store_sandbox_put(store *s, const store_sandbox *sb);
/* The record of sandbox_id (FAWN_ENOENT when none). */
FAWN_MUST_CHECK int store_sandbox_get(store *s, store_sandbox *out, const char *sandbox_id);
/* Every record, by sandbox id: *out is a malloc'd array of *n (caller
 * frees); at most STORE_SANDBOXES_MAX. */
#define STORE_SANDBOXES_MAX 100000
FAWN_MUST_CHECK int store_sandbox_list(store *s, store_sandbox **out, size_t *n);
/* Forgets sandbox_id's record if it names generation (any when ""). */
FAWN_MUST_CHECK int store_sandbox_forget(store *s, const char *sandbox_id, const char *generation);

/* A fence: (scope, sandbox id, generation) may not be reused. scope "" fences
 * the whole generation; a run:agent scope fences only that scope's session. */
typedef struct store_fence {
    char scope[130];
    char sandbox_id[17];
    char generation[33];
    char reason[256];
    int64_t created_at_ms;
} store_fence;

/* Adds a fence (an existing one is kept as it is). */
FAWN_MUST_CHECK int store_fence_add(store *s, const char *scope, const char *sandbox_id,
                                    const char *generation, const char *reason);
/* Whether the fence exists. */
FAWN_MUST_CHECK int store_fence_exists(store *s, bool *out, const char *scope,
                                       const char *sandbox_id, const char *generation);
/* Removes one fence (FAWN_ENOENT when it did not exist). */
FAWN_MUST_CHECK int store_fence_remove(store *s, const char *scope, const char *sandbox_id,
                                       const char *generation);
/* Every fence (of sandbox_id, or all when NULL), oldest first: *out is a
 * malloc'd array of *n (caller frees); at most STORE_FENCES_MAX. */
#define STORE_FENCES_MAX 10000
FAWN_MUST_CHECK int store_fence_list(store *s, store_fence **out, size_t *n,
                                     const char *sandbox_id);

/* ---- sandbox ownership (several gateways on one store) ----
 * Which gateway may run each sandbox, until when. A claim reads and writes
 * in one write transaction, so of gateways claiming at once one wins;
 * times are wall-clock milliseconds of the gateways (their clocks are
 * assumed to agree well within a lease). */

#define STORE_GATEWAY_MAX 64

typedef struct store_sandbox_owner {
    char sandbox_id[17];
    char user[65], thread[65];
    char gateway[STORE_GATEWAY_MAX + 1];
    int64_t lease_until_ms;
    char release_asked_by[STORE_GATEWAY_MAX + 1]; /* "" when no gateway asked for it */
    int64_t release_asked_at_ms;
} store_sandbox_owner;

typedef struct store_owner_claim_req {
    const char *sandbox_id, *user, *thread; /* the sandbox and the (user, thread) it is for */
    const char *gateway;                    /* the claimer, 1..STORE_GATEWAY_MAX bytes */
    int64_t now_ms, lease_ms;               /* claimed until now + lease */
} store_owner_claim_req;

/* What a claim found, and did. */
enum store_owner_claim {
    STORE_OWNER_KEPT,    /* the claimer owned it: its lease is renewed (a request stays) */
    STORE_OWNER_FREE,    /* nobody owned it: now the claimer's */
    STORE_OWNER_EXPIRED, /* another gateway's lease had expired: now the claimer's */
    STORE_OWNER_HELD,    /* another gateway holds a live lease: nothing changed */
};

/* Claims req->sandbox_id for req->gateway unless another gateway's lease
 * is live (*out says which case; HELD on every error). *was is the row as
 * it was (zeroed when none). FAWN_EINVAL for bad arguments. */
FAWN_MUST_CHECK int store_sandbox_owner_claim(store *s, enum store_owner_claim *out,
                                              store_sandbox_owner *was,
                                              const store_owner_claim_req *req);
/* Extends every lease gateway holds to now + lease, in one statement. */
FAWN_MUST_CHECK int store_sandbox_owner_renew(store *s, const char *gateway, int64_t now_ms,
                                              int64_t lease_ms);
/* Gives up gateway's ownership of sandbox_id (0 when it held none). */
FAWN_MUST_CHECK int store_sandbox_owner_release(store *s, const char *sandbox_id,
                                                const char *gateway);
/* Gives up every sandbox gateway owns. */
FAWN_MUST_CHECK int store_sandbox_owner_release_all(store *s, const char *gateway);
/* Records that asker wants sandbox_id, which another gateway owns;
 * FAWN_ENOENT when no other gateway owns it. */
FAWN_MUST_CHECK int store_sandbox_owner_ask(store *s, const char *sandbox_id, const char *asker,
                                            int64_t now_ms);
/* The sandboxes gateway owns that another gateway asked for at or after
 * since_ms, by sandbox id: *out is a malloc'd array of *n (caller frees);
 * at most STORE_SANDBOXES_MAX. */
FAWN_MUST_CHECK int store_sandbox_owner_asked(store *s, store_sandbox_owner **out, size_t *n,
                                              const char *gateway, int64_t since_ms);
/* The ownership row of sandbox_id (FAWN_ENOENT when nobody owns it). */
FAWN_MUST_CHECK int store_sandbox_owner_get(store *s, store_sandbox_owner *out,
                                            const char *sandbox_id);

/* ---- API tokens ----
 * A token is shown to its owner once; the store keeps only its SHA-256. */

/* Longest token name, and tokens one user may hold: enough for every
 * script and service a person runs; bounds what a listing returns. */
#define STORE_TOKEN_NAME_MAX 128
#define STORE_TOKENS_PER_USER_MAX 100

typedef struct store_token {
    int64_t id;
    int64_t user_id;
    char name[STORE_TOKEN_NAME_MAX + 1];
    int64_t created_at_ms;
    int64_t last_used_at_ms; /* 0 = never used */
} store_token;

/* Records a token (token_hash: 64 hex digits) named name for user_id.
 * FAWN_E2BIG when the user already holds STORE_TOKENS_PER_USER_MAX. */
FAWN_MUST_CHECK int store_token_create(store *s, store_token *out, int64_t user_id,
                                       const char *name, const char *token_hash);
/* The user's tokens, oldest first: *out is a malloc'd array of *n (caller frees). */
FAWN_MUST_CHECK int store_token_list(store *s, store_token **out, size_t *n, int64_t user_id);
/* Revokes the user's token id (another user's is FAWN_ENOENT). */
FAWN_MUST_CHECK int store_token_delete(store *s, int64_t user_id, int64_t id);
/* A token's last use is recorded at most this often: a minute tells when a
 * token was last used well enough, and spares a write per request. */
#define STORE_TOKEN_USE_RESOLUTION_MS 60000

/* The user holding the token whose hash is token_hash (FAWN_ENOENT when
 * none), recording its use (see STORE_TOKEN_USE_RESOLUTION_MS). */
FAWN_MUST_CHECK int store_token_authenticate(store *s, store_user *user, int64_t *token_id,
                                             const char *token_hash);

/* ---- runs, their events, thread checkpoints and tool receipts ----
 * A run belongs to one owner's thread; deleting the thread deletes them. */

#define STORE_RUN_ID_MAX 64
/* Runs one listing returns at most. */
#define STORE_RUNS_LIST_MAX 1000
/* A gateway's id (config.h's CONFIG_GATEWAY_ID_MAX). */
#define STORE_GATEWAY_ID_MAX 64

/* Entries of a run's token_usage: (caller, model) pairs one run makes are
 * a few; 64 bounds what one row holds. */
#define STORE_USAGE_BUCKETS_MAX 64

typedef struct store_run {
    char run_id[STORE_RUN_ID_MAX + 1];
    int64_t owner_id;
    char thread_id[65];
    char assistant_id[65];
    char status[16]; /* pending | running | success | error | timeout | interrupted */
    char *kwargs;    /* JSON object: the run's accepted options (malloc'd) */
    char *metadata;  /* JSON object (malloc'd) */
    char *error;     /* NULL, or why the run failed (malloc'd) */
    int64_t created_at_ms, updated_at_ms;
    /* JSON list of what its model calls cost (malloc'd; "[]" until the run
     * ends): {caller, model, input_tokens, output_tokens, total_tokens,
     * calls} per caller ("lead", "subagent:<type>", "middleware:<what>")
     * and model. store_run_create ignores it. */
    char *token_usage;
    char gateway_id[STORE_GATEWAY_ID_MAX + 1]; /* the gateway that runs it ("": none known) */
    bool cancel_requested;                     /* a cancel was asked for through another gateway */
} store_run;

void store_run_clear(store_run *r);

/* Records a new run (status pending unless run->status says otherwise;
 * kwargs and metadata default to {}), owned by run->gateway_id. A thread
 * has at most one unfinished (pending or running) run, whichever gateway
 * runs it: FAWN_EBUSY when it has one already. FAWN_EEXIST for a run id in
 * use; FAWN_ENOENT when the owner has no such thread. */
FAWN_MUST_CHECK int store_run_create(store *s, const store_run *run);
/* The owner's run of thread (another thread's run is FAWN_ENOENT). */
FAWN_MUST_CHECK int store_run_get(store *s, store_run *out, int64_t owner_id, const char *thread_id,
                                  const char *run_id);
/* The thread's runs, newest first; *out is a malloc'd array of *n (clear each,
 * then free it). limit is clamped to 1..STORE_RUNS_LIST_MAX. */
FAWN_MUST_CHECK int store_run_list(store *s, store_run **out, size_t *n, int64_t owner_id,
                                   const char *thread_id, size_t limit, size_t offset);
/* Sets a run's status and error (NULL clears it). */
FAWN_MUST_CHECK int store_run_set_status(store *s, const char *run_id, const char *status,
                                         const char *error);
/* Sets a run's token_usage (store_run) to usage, a JSON list of at most
 * STORE_USAGE_BUCKETS_MAX objects. FAWN_EINVAL for other text;
 * FAWN_ENOENT for an unknown run. */
FAWN_MUST_CHECK int store_run_set_usage(store *s, const char *run_id, const char *usage);
/* Sets the status (and error; NULL clears it) of a run that gateway_id
 * owns and that has not ended, and with thread_status (not NULL) its
 * thread's status, in one transaction. FAWN_ENOENT when there is no such
 * run: it has ended, or its gateway was taken for dead and another ended
 * it (store_gateway_reap) — a run is never overwritten by its old owner.
 * FAWN_EINVAL for an unknown status. */
FAWN_MUST_CHECK int store_run_own_set_status(store *s, const char *run_id, const char *gateway_id,
                                             const char *status, const char *error,
                                             const char *thread_status);
/* Ends the runs gateway_id (NULL: every gateway) left pending or running
 * (a restart of that gateway): status error with reason, an error event
 * and an end event after the last stored one (a follower through any
 * gateway finishes), their threads idle. *n (may be NULL) is how many.
 * Other gateways' runs are left alone. */
FAWN_MUST_CHECK int store_run_abandon_unfinished(store *s, size_t *n, const char *gateway_id,
                                                 const char *reason);
/* The unfinished run of the owner's thread, whichever gateway runs it:
 * its id and gateway in *out (cleared by the caller), FAWN_ENOENT when
 * the thread has none. */
FAWN_MUST_CHECK int store_run_active(store *s, store_run *out, int64_t owner_id,
                                     const char *thread_id);
/* Asks for the cancel of the owner's run of thread that has not ended
 * (the gateway that runs it sees the request: store_run_cancel_requests).
 * FAWN_ENOENT when there is no such unfinished run of this owner (another
 * user's run included). */
FAWN_MUST_CHECK int store_run_request_cancel(store *s, int64_t owner_id, const char *thread_id,
                                             const char *run_id);
/* Runs of gateway_id not ended and whose cancel was asked for: *out is a
 * malloc'd array of *n ids (free it). */
FAWN_MUST_CHECK int store_run_cancel_requests(store *s, char (**out)[37], size_t *n,
                                              const char *gateway_id);

/* ---- gateways sharing the store ----
 * Each gateway has a row while it lives, renewed every heartbeat; one
 * whose row is older than the lease is taken for dead by any other, which
 * ends its unfinished runs. A gateway whose row is gone has lost its lease
 * and must stop every run it has (it may register again). */

/* Registers gateway_id as alive from now_ms (started and beaten now;
 * replaces a row of the same id). */
FAWN_MUST_CHECK int store_gateway_register(store *s, const char *gateway_id, int64_t now_ms);
/* Renews gateway_id's lease at now_ms: FAWN_ESTALE when its row is gone
 * (reaped: its runs were ended by another gateway). */
FAWN_MUST_CHECK int store_gateway_beat(store *s, const char *gateway_id, int64_t now_ms);
/* In one transaction: removes the gateways (other than self) not beaten
 * since now_ms - lease_ms, and ends the unfinished runs that no gateway
 * alive owns (theirs, and runs of no known gateway), as
 * store_run_abandon_unfinished does, with reason. *gateways and *runs
 * (may be NULL) say how many. */
FAWN_MUST_CHECK int store_gateway_reap(store *s, size_t *gateways, size_t *runs, const char *self,
                                       int64_t now_ms, int64_t lease_ms, const char *reason);
/* Removes gateway_id's row (a gateway stopping cleanly; no row: nothing). */
FAWN_MUST_CHECK int store_gateway_remove(store *s, const char *gateway_id);

/* One event of a run's stream, as SSE sends it. */
typedef struct store_event {
    int64_t seq; /* 1, 2, ... within the run */
    char event[64];
    char *data; /* JSON text (malloc'd) */
} store_event;

/* Appends events (seq increasing, above every stored one) in one
 * transaction. FAWN_ESTALE, nothing written, once the stored stream has
 * ended (its last event is `end`: another gateway may have ended the run);
 * FAWN_EEXIST for a seq stored already. */
FAWN_MUST_CHECK int store_event_append(store *s, const char *run_id, const store_event *events,
                                       size_t n);
/* Up to limit events with seq > after, in order; *out is a malloc'd array of
 * *n (free each data, then the array). */
FAWN_MUST_CHECK int store_event_read(store *s, store_event **out, size_t *n, const char *run_id,
                                     int64_t after, size_t limit);
/* The lowest and highest stored seq (both 0 when none). */
FAWN_MUST_CHECK int store_event_bounds(store *s, int64_t *first, int64_t *last, const char *run_id);
/* Keeps only the newest keep events of the run. */
FAWN_MUST_CHECK int store_event_prune(store *s, const char *run_id, int64_t keep);

/* ---- thread state: checkpoints and the messages they hold ----
 * A thread's state is the JSON object LangGraph clients read (messages,
 * title, artifacts). Its messages are stored once each, as the thread's
 * message rows (numbered 1, 2, ... in the order first written); a
 * checkpoint holds the rest of the state and its list of messages as spans
 * of rows. A message a checkpoint keeps from an earlier one (the same JSON
 * text) is that row again, so a thread stores each message once however
 * many checkpoints list it; a message replaced (POST state) is a new row,
 * and a row no kept checkpoint lists any more is deleted when checkpoints
 * are pruned. A state is read through its reference, the JSON text
 *     {"values": {the state without "messages"}, "messages": [[first, last], ...]}
 * that its checkpoint carries and a run's values events hold
 * (store_state_read). */

typedef struct store_checkpoint {
    char checkpoint_id[STORE_RUN_ID_MAX + 1];
    char parent_id[STORE_RUN_ID_MAX + 1]; /* "" for the first */
    char run_id[STORE_RUN_ID_MAX + 1];    /* "" when not written by a run */
    char *state;                          /* the state's reference (malloc'd) */
    char *metadata;                       /* JSON object (malloc'd) */
    int64_t created_at_ms;
} store_checkpoint;

void store_checkpoint_clear(store_checkpoint *c);

/* Checkpoints kept per thread: the newest; older ones are pruned as new
 * ones are written (the latest always holds the whole conversation). */
#define STORE_CHECKPOINTS_KEPT 200

/* Writes a checkpoint of the owner's thread (ids, metadata and time from c;
 * c->state is not read) whose state is values, a JSON object whose
 * "messages", when present, is a list. *state (may be NULL) gets the new
 * checkpoint's state reference (malloc'd). FAWN_ENOENT when no such thread,
 * FAWN_EINVAL for values of another shape. */
FAWN_MUST_CHECK int store_checkpoint_put(store *s, char **state, int64_t owner_id,
                                         const char *thread_id, const store_checkpoint *c,
                                         const json_t *values);
/* The thread's newest checkpoint (FAWN_ENOENT when it has none). */
FAWN_MUST_CHECK int store_checkpoint_latest(store *s, store_checkpoint *out, int64_t owner_id,
                                            const char *thread_id);
/* Up to limit checkpoints, newest first, older than before_id when it is
 * non-NULL; *out is a malloc'd array of *n (clear each, then free it). */
FAWN_MUST_CHECK int store_checkpoint_list(store *s, store_checkpoint **out, size_t *n,
                                          int64_t owner_id, const char *thread_id,
                                          const char *before_id, size_t limit);
/* The owner's thread's checkpoint checkpoint_id (caller clears *out).
 * FAWN_ENOENT when the thread has none of that id (another thread's or
 * another owner's checkpoint is none), or no longer keeps it. */
FAWN_MUST_CHECK int store_checkpoint_get(store *s, store_checkpoint *out, int64_t owner_id,
                                         const char *thread_id, const char *checkpoint_id);
/* Where the message of id message_id came into the lineage of checkpoint
 * head_id (the owner's thread's): walking back from head, parent by
 * parent, while the checkpoint lists a message of that id, *first gets
 * the oldest that does (caller clears it): the checkpoint that added the
 * message, whose run_id wrote it and whose parent_id is the state just
 * before it ("" when the message is in the thread's first checkpoint).
 * FAWN_ENOENT when head is not the thread's or does not list the message,
 * or when a parent on the way is no longer kept (where the message came in
 * is then unknown). The walk takes at most STORE_CHECKPOINTS_KEPT steps,
 * in one read transaction. */
FAWN_MUST_CHECK int store_checkpoint_origin(store *s, store_checkpoint *first, int64_t owner_id,
                                            const char *thread_id, const char *head_id,
                                            const char *message_id);

/* The state that reference `state` names, of the owner's thread, as JSON
 * object text (malloc'd): its values with "messages", the newest of its
 * messages whose JSON texts take at most max_bytes together (SIZE_MAX: all
 * of them), in order. When older ones were left out, *omitted (and the
 * state's "messages_omitted") says how many; a row deleted since the
 * reference was made (a message replaced, and no kept checkpoint lists it)
 * is left out silently. FAWN_EINVAL for a malformed reference. */
FAWN_MUST_CHECK int store_state_read(store *s, char **out, size_t *omitted, int64_t owner_id,
                                     const char *thread_id, const char *state, size_t max_bytes);

/* ---- what a thread's model answers cost ---- */

/* Models a usage answer names at most: the costliest. */
#define STORE_USAGE_MODELS_MAX 32

typedef struct store_model_usage {
    char model[128]; /* response_metadata.model_name ("" when absent) */
    int64_t tokens;  /* total tokens of its answers */
    int64_t runs;    /* runs it answered in */
} store_model_usage;

typedef struct store_token_usage {
    int64_t input_tokens, output_tokens, total_tokens;
    /* total_tokens by caller: the lead agent, sub-agents, middleware */
    int64_t lead_agent_tokens, subagent_tokens, middleware_tokens;
    int64_t runs; /* runs that wrote the answers */
    store_model_usage models[STORE_USAGE_MODELS_MAX];
    size_t n_models; /* costliest first */
} store_token_usage;

/* The token counts of the owner's thread: the sums of the usage_metadata
 * of every AI message row a run wrote (every branch the thread kept,
 * regenerated answers included; a count that is not a positive integer is
 * 0, a sum past INT64_MAX is INT64_MAX), the lead agent's, and of the
 * entries of its runs' token_usage whose caller is not "lead" (sub-agents
 * and middleware, whose answers are not the thread's messages), and per
 * model. All zeros for a
 * thread without such rows, or that is not the owner's. */
FAWN_MUST_CHECK int store_thread_token_usage(store *s, store_token_usage *out, int64_t owner_id,
                                             const char *thread_id);

/* ---- the thread's messages, one page at a time ----
 * The conversation of a thread's newest state, by its message rows: each
 * row's seq numbers it among all the thread's messages ever written
 * (thread-global, increasing in the order they were first written; a
 * message replaced by a state update is a new row, after the others). */

typedef struct store_message {
    int64_t seq;
    char run_id[STORE_RUN_ID_MAX + 1]; /* the run that wrote it; "" for a client's update */
    int64_t created_at_ms;
    char *body; /* the message, JSON object text (malloc'd) */
} store_message;

void store_message_clear(store_message *m);

/* Messages one page holds at most (DeerFlow's bound). */
#define STORE_MESSAGES_PAGE_MAX 200

/* The newest `limit` (clamped to 1..STORE_MESSAGES_PAGE_MAX) messages of
 * the owner's thread's newest state whose seq is below before_seq (0: no
 * bound), as long as their JSON takes at most max_bytes together (the
 * newest one always), oldest first: *out is a malloc'd array of *n (clear
 * each, then free it). *has_more tells whether older ones remain. A thread
 * without a state has none. FAWN_ENOENT when the owner has no such thread. */
FAWN_MUST_CHECK int store_message_page(store *s, store_message **out, size_t *n, bool *has_more,
                                       int64_t owner_id, const char *thread_id, int64_t before_seq,
                                       size_t limit, size_t max_bytes);

/* Evidence of one tool call. */
typedef struct store_receipt {
    char run_id[STORE_RUN_ID_MAX + 1];
    char tool_call_id[129];
    char tool_name[65];
    char status[16];
    char args_sha256[65];
    char output_sha256[65];
    int64_t output_bytes;
    int64_t created_at_ms;
    /* What the tool saw outside, as a JSON object's text (a fetched page's
     * URL, final URL and content hash), or NULL; malloc'd in a list. */
    char *evidence;
} store_receipt;

/* Records a receipt (a tool call id already recorded for the run is FAWN_EEXIST). */
FAWN_MUST_CHECK int store_receipt_add(store *s, const store_receipt *rc);
/* The run's receipts in the order they were written (free with
 * store_receipts_free). */
FAWN_MUST_CHECK int store_receipt_list(store *s, store_receipt **out, size_t *n,
                                       const char *run_id);
/* Frees a list store_receipt_list gave (rcs may be NULL). */
void store_receipts_free(store_receipt *rcs, size_t n);

/* ---- memory: facts about a user, kept across threads ----
 * A fact belongs to one owner: every function takes the owner and never
 * reads or changes another owner's facts (their ids are FAWN_ENOENT). */

/* Longest fact (bytes): a sentence or two about the user; the injected
 * context holds many of them within its budget. */
#define STORE_FACT_CONTENT_MAX 1000
/* A category: [a-z0-9_-]{1,32} (DeerFlow's are preference, knowledge,
 * context, behavior, goal, correction). */
#define STORE_FACT_CATEGORY_MAX 32
/* Facts one owner may hold whatever the configuration says
 * (memory.max_facts is at most this): bounds every listing and import. */
#define STORE_FACTS_MAX 1000
/* Where a fact came from: the thread id of the turn it was read from, or
 * "manual" / "import". */
#define STORE_FACT_SOURCE_MAX 64

typedef struct store_fact {
    char id[40]; /* "fact_" and 32 hex digits */
    char content[STORE_FACT_CONTENT_MAX + 1];
    char category[STORE_FACT_CATEGORY_MAX + 1];
    double confidence; /* 0 … 1 */
    char source[STORE_FACT_SOURCE_MAX + 1];
    int64_t created_at_ms, updated_at_ms;
} store_fact;

/* Whether f's content (1 … STORE_FACT_CONTENT_MAX bytes of UTF-8 text, not
 * only spaces), category ([a-z0-9_-]{1,STORE_FACT_CATEGORY_MAX}),
 * confidence (0 … 1) and source (at most STORE_FACT_SOURCE_MAX bytes) are
 * valid. FAWN_EINVAL naming what is not. */
FAWN_MUST_CHECK int store_fact_check(const store_fact *f);
/* Adds f (its content, category, confidence and source) as a new fact of
 * owner, unless the owner holds max facts already (FAWN_E2BIG, max is
 * clamped to 1 … STORE_FACTS_MAX) or a fact of the same content (letter
 * case and runs of spaces aside: FAWN_EEXIST). *out (may be NULL) gets the
 * stored fact, with its new id and times. FAWN_EINVAL as store_fact_check. */
FAWN_MUST_CHECK int store_fact_add(store *s, store_fact *out, int64_t owner_id, const store_fact *f,
                                   size_t max);
/* The owner's facts, oldest first: *out is a malloc'd array of *n (at most
 * STORE_FACTS_MAX; caller frees). */
FAWN_MUST_CHECK int store_fact_list(store *s, store_fact **out, size_t *n, int64_t owner_id);
/* Changes the owner's fact id: content and category when not NULL,
 * confidence when >= 0; updated_at becomes now. *out (may be NULL) gets
 * the fact as stored. FAWN_ENOENT when the owner has no such fact,
 * FAWN_EEXIST when another of its facts has the new content, FAWN_EINVAL
 * as store_fact_check. */
FAWN_MUST_CHECK int store_fact_update(store *s, store_fact *out, int64_t owner_id, const char *id,
                                      const char *content, const char *category, double confidence);
/* Deletes the owner's fact id (FAWN_ENOENT when it has none). */
FAWN_MUST_CHECK int store_fact_delete(store *s, int64_t owner_id, const char *id);
/* Replaces all of the owner's facts by facts[0..n) (none: clears them), in
 * one transaction: on any failure nothing changed. Each fact gets a new id
 * and keeps its created_at (now when 0). FAWN_E2BIG when n > max (clamped
 * as in store_fact_add), FAWN_EINVAL naming the first invalid fact,
 * FAWN_EEXIST naming a duplicate content. */
FAWN_MUST_CHECK int store_fact_replace(store *s, int64_t owner_id, const store_fact *facts,
                                       size_t n, size_t max);
/* ---- scheduled tasks (store_schedules.c) ----
 * A task belongs to one owner: every function a client's request reaches
 * takes the owner, and another owner's task id is FAWN_ENOENT. The
 * scheduler's functions (due, claim, start, fail, reclaim) take no owner:
 * they act on the task as stored and run it as its owner.
 *
 * Claims: an occurrence is claimed in one transaction that checks the
 * task is still due for exactly that occurrence (its next_run_at), not
 * leased, and not running another run; inserts the task run ("claimed",
 * unique per (task, scheduled occurrence)); advances next_run_at; and
 * leases the task to the claimer. Whoever loses that compare-and-swap
 * (another thread, another gateway on the same database) claims nothing.
 * A claimer that dies before it starts the run leaves the claim and its
 * lease: once the lease has expired another claimer takes the claim over
 * (store_task_reclaim), finds whether the run was started after all
 * (store_task_claim_find_run) and records or starts it — so a claimed
 * occurrence is neither lost nor started twice. */

#define STORE_TASK_ID_MAX 48
/* DeerFlow's column sizes: a title of 255 bytes; a prompt is one
 * message, 32 KiB holds any a person writes for a recurring task. */
#define STORE_TASK_TITLE_MAX 255
#define STORE_TASK_PROMPT_MAX (32 * 1024)
/* A schedule's text (a cron expression or a run_at time) and zone name. */
#define STORE_TASK_SPEC_MAX 256
#define STORE_TASK_ZONE_MAX 64
/* Tasks one owner may hold: bounds every listing and what the
 * scheduler scans for one user. */
#define STORE_TASKS_PER_OWNER_MAX 200
/* Task runs one listing returns at most (DeerFlow's limit). */
#define STORE_TASK_RUNS_LIST_MAX 200
/* Longest stop reason or error kept with a task or run. */
#define STORE_TASK_ERROR_MAX 1024

typedef struct store_task {
    char id[STORE_TASK_ID_MAX + 1];
    int64_t owner_id;
    char *title, *prompt;                        /* malloc'd */
    char schedule_type[8];                       /* once | cron */
    char schedule_spec[STORE_TASK_SPEC_MAX + 1]; /* run_at text, or the cron expression */
    char timezone[STORE_TASK_ZONE_MAX + 1];
    char context_mode[24];                /* fresh_thread_per_run | reuse_thread */
    char thread_id[65];                   /* reuse_thread's thread ("" none) */
    char status[16];                      /* enabled | paused | completed | stopped */
    char *stop_reason;                    /* why stopped (malloc'd, or NULL) */
    int64_t next_run_at_ms;               /* 0: none */
    char claim_id[STORE_TASK_ID_MAX + 1]; /* a claimed run not yet started ("" none) */
    char lease_owner[80];                 /* "" none */
    int64_t lease_until_ms;
    int64_t last_run_at_ms; /* 0: never */
    char last_run_id[37], last_thread_id[65];
    char *last_error;  /* malloc'd, or NULL */
    int64_t run_count; /* runs started */
    int64_t created_at_ms, updated_at_ms;
} store_task;

void store_task_clear(store_task *t);

/* Records t as a new task (id, owner and every field a client sets, its
 * status and next_run_at; the rest start empty, times are now).
 * FAWN_EINVAL naming a field out of its bounds; FAWN_EEXIST for an id in
 * use; FAWN_E2BIG when the owner has STORE_TASKS_PER_OWNER_MAX tasks. */
FAWN_MUST_CHECK int store_task_create(store *s, const store_task *t);
/* The owner's task id (caller clears *out). */
FAWN_MUST_CHECK int store_task_get(store *s, store_task *out, int64_t owner_id, const char *id);
/* The owner's tasks (those of thread_id only, when not NULL), newest
 * first: *out is a malloc'd array of *n (clear each, then free it). */
FAWN_MUST_CHECK int store_task_list(store *s, store_task **out, size_t *n, int64_t owner_id,
                                    const char *thread_id);
/* Writes the fields a client may change (title, prompt, schedule_type,
 * schedule_spec, timezone, context_mode, thread_id, status, stop_reason,
 * next_run_at) of the owner's task t->id; updated_at becomes now. */
FAWN_MUST_CHECK int store_task_update(store *s, const store_task *t);
/* Deletes the owner's task and its run history. */
FAWN_MUST_CHECK int store_task_delete(store *s, int64_t owner_id, const char *id);

/* What a task run is (store_task_run.status): a claim not yet started,
 * an agent run (whose own record gives the status reported), or an
 * occurrence that never became a run. */
typedef struct store_task_run {
    char id[STORE_TASK_ID_MAX + 1];
    char task_id[STORE_TASK_ID_MAX + 1];
    int64_t owner_id;
    char thread_id[65];
    char run_id[37]; /* the agent run ("" until started) */
    int64_t scheduled_for_ms;
    char trigger[16];     /* scheduled | manual */
    int64_t triggered_by; /* the user who triggered a manual run (0: the scheduler) */
    /* queued (claimed) | running | success | failed | interrupted | skipped,
     * read through the agent run's status once started */
    char status[16];
    char *error;                                       /* malloc'd, or NULL */
    int64_t started_at_ms, ended_at_ms, created_at_ms; /* 0: not yet */
} store_task_run;

void store_task_run_clear(store_task_run *r);

/* The task's runs, newest first, limit clamped to
 * 1..STORE_TASK_RUNS_LIST_MAX (caller clears each, frees the array).
 * FAWN_ENOENT when the owner has no such task. */
FAWN_MUST_CHECK int store_task_run_list(store *s, store_task_run **out, size_t *n, int64_t owner_id,
                                        const char *task_id, size_t limit, size_t offset);
/* Scheduled-task runs active now, all tasks together: claimed, or
 * started and whose agent run is pending or running. */
FAWN_MUST_CHECK int store_task_runs_active(store *s, int64_t *out);

/* Enabled tasks whose next_run_at is at or before now, unclaimed and not
 * leased, and tasks whose claim's lease has expired (claim_id set),
 * oldest due first, at most limit (1..STORE_TASKS_PER_OWNER_MAX). */
FAWN_MUST_CHECK int store_task_due(store *s, store_task **out, size_t *n, int64_t now_ms,
                                   size_t limit);

/* What a claim did. */
enum store_claim {
    STORE_CLAIM_TAKEN,   /* the run is claimed: start it */
    STORE_CLAIM_SKIPPED, /* a previous run is active: the occurrence is recorded skipped */
    STORE_CLAIM_FULL,    /* max_active runs are active: nothing changed */
    STORE_CLAIM_ACTIVE,  /* (manual) a previous run is active: nothing changed */
    STORE_CLAIM_LOST,    /* someone else claimed it, or it changed: nothing changed */
};

typedef struct store_claim_req {
    const char *task_id;
    int64_t owner_id;      /* manual: the owner the caller authenticated (0: any) */
    const char *trigger;   /* scheduled | manual */
    int64_t triggered_by;  /* manual: who */
    int64_t due_ms;        /* scheduled: the next_run_at the caller read (the occurrence) */
    int64_t next_ms;       /* scheduled: the next occurrence after it (0: none) */
    const char *claim_id;  /* the new task run's id */
    const char *thread_id; /* the thread the run will go to */
    const char *lease_owner;
    int64_t now_ms, lease_ms;
    int64_t max_active; /* scheduled-task runs active at once, all tasks */
} store_claim_req;

/* Claims one run of a task as said above; *out says what happened and
 * *task (may be NULL; caller clears it) gets the task as it now is. FAWN_ENOENT when no
 * such task (of owner_id, when given). */
FAWN_MUST_CHECK int store_task_claim(store *s, enum store_claim *out, store_task *task,
                                     const store_claim_req *req);
/* Takes over a claim whose lease expired: the task keeps claim_id and is
 * leased to lease_owner until now + lease. FAWN_ESTALE when the claim is
 * no longer that one or its lease is still held. */
FAWN_MUST_CHECK int store_task_reclaim(store *s, const char *task_id, const char *claim_id,
                                       const char *lease_owner, int64_t now_ms, int64_t lease_ms);
/* The task run of claim claim_id (caller clears *out). */
FAWN_MUST_CHECK int store_task_claim_get(store *s, store_task_run *out, const char *claim_id);
/* The agent run started for claim claim_id on the owner's thread, if one
 * was (run_id "" when none). */
FAWN_MUST_CHECK int store_task_claim_find_run(store *s, char run_id[37], int64_t owner_id,
                                              const char *thread_id, const char *claim_id);
/* Records that claim claim_id of task_id became agent run run_id at
 * now: the run is started, the task's claim and lease are released,
 * last_run_* are set and run_count grows; a once task whose scheduled
 * occurrence this was is completed. FAWN_ESTALE when the task no longer
 * holds that claim (the run is still recorded). */
FAWN_MUST_CHECK int store_task_claim_started(store *s, const char *task_id, const char *claim_id,
                                             const char *run_id, int64_t now_ms);
/* Records that claim claim_id of task_id could not start: the run fails
 * with error, the claim and lease are released and last_error is set;
 * with stop_reason (not NULL) the task is stopped with it. */
FAWN_MUST_CHECK int store_task_claim_failed(store *s, const char *task_id, const char *claim_id,
                                            const char *error, const char *stop_reason,
                                            int64_t now_ms);

/* ---- skill states (store_skills.c) ---- */

/* Longest skill name kept (DeerFlow's limit on a skill's name). */
#define STORE_SKILL_NAME_MAX 64

/* Records that skill `name` (1..STORE_SKILL_NAME_MAX bytes) is enabled or
 * not, for every user. FAWN_EINVAL for a bad name. */
FAWN_MUST_CHECK int store_skill_state_set(store *s, const char *name, bool enabled);

/* The recorded states: a new object {name: true|false} into *out (caller
 * decrefs); a skill it does not name has no recorded state. */
FAWN_MUST_CHECK int store_skill_states(store *s, json_t **out);

/* ---- MCP tools pinned by discovery (store_mcp.c) ---- */

/* Longest MCP server and tool names kept. */
#define STORE_MCP_NAME_MAX 128

/* Replaces server's pinned tools with tools (an array of {name,
 * description, input_schema (an object), hash}), every drift cleared, in
 * one transaction. FAWN_EINVAL naming the first bad entry. */
FAWN_MUST_CHECK int store_mcp_tools_replace(store *s, const char *server, const json_t *tools);

/* server's pinned tools, by name: a new array of {name, description,
 * input_schema, hash, discovered_at_ms, drift (null, or what the server
 * listed instead)} into *out (caller decrefs). */
FAWN_MUST_CHECK int store_mcp_tools(store *s, const char *server, json_t **out);

/* Flags tool name of server as drifted (drift: an object, kept as given)
 * until the next store_mcp_tools_replace. FAWN_ENOENT when it is not
 * pinned. */
FAWN_MUST_CHECK int store_mcp_drift_set(store *s, const char *server, const char *name,
                                        const json_t *drift);

/* Longest OAuth refresh token kept. */
#define STORE_MCP_TOKEN_MAX 8192

/* The refresh token server's token endpoint last rotated to, when it
 * replaced the configured one whose sha256 (hex) is configured_sha256:
 * *out malloc'd; FAWN_ENOENT when none was saved, or it replaced another
 * configured token (the operator has set a new one since). */
FAWN_MUST_CHECK int store_mcp_refresh_get(store *s, char **out, const char *server,
                                          const char *configured_sha256);
/* Saves token as server's rotated refresh token (replacing the one
 * before). FAWN_EINVAL for an empty or too long token. */
FAWN_MUST_CHECK int store_mcp_refresh_set(store *s, const char *server,
                                          const char *configured_sha256, const char *token);

/* ---- IM channels (store_channels.c) ----
 * Bindings of platform users to fawn users, one-time connect codes (kept
 * only as their hash), the thread of each conversation, the inbox (every
 * inbound event once: the persistent dedup record and the queue of
 * messages waiting to run, which survives a restart) and the runtime
 * settings saved through the API. Providers are [a-z]{1,32}; ids and keys
 * at most STORE_CH_KEY_MAX bytes. */
#define STORE_CH_PROVIDER_MAX 32
#define STORE_CH_KEY_MAX 600

typedef struct store_ch_binding {
    char id[37];
    char provider[STORE_CH_PROVIDER_MAX + 1];
    char platform_user_id[STORE_CH_KEY_MAX + 1];
    int64_t user_id;
    int64_t created_at_ms;
} store_ch_binding;

/* Records a connect code's hash for user on provider, valid until
 * expires_at_ms; removes every expired code first. FAWN_E2BIG when the
 * user already holds max_live unexpired codes; FAWN_EEXIST for a hash in use. */
FAWN_MUST_CHECK int store_ch_code_add(store *s, const char *code_hash, const char *provider,
                                      int64_t user_id, int64_t expires_at_ms, uint32_t max_live,
                                      int64_t now_ms);
/* Consumes a code: *user_id gets its user and the code is deleted (single
 * use). FAWN_ENOENT when no such unexpired code of that provider. */
FAWN_MUST_CHECK int store_ch_code_redeem(store *s, int64_t *user_id, const char *code_hash,
                                         const char *provider, int64_t now_ms);
/* Binds the platform user to user_id (replacing the platform user's
 * binding, if any) and fills *out. */
FAWN_MUST_CHECK int store_ch_binding_put(store *s, store_ch_binding *out, const char *provider,
                                         const char *platform_user_id, int64_t user_id);
/* The platform user's binding. FAWN_ENOENT when unbound. */
FAWN_MUST_CHECK int store_ch_binding_find(store *s, store_ch_binding *out, const char *provider,
                                          const char *platform_user_id);
/* The user's bindings, oldest first; *out malloc'd array of *n. */
FAWN_MUST_CHECK int store_ch_binding_list(store *s, store_ch_binding **out, size_t *n,
                                          int64_t user_id);
/* Deletes the user's binding id. FAWN_ENOENT when the user has none of that id. */
FAWN_MUST_CHECK int store_ch_binding_delete(store *s, int64_t user_id, const char *id);

/* The thread of a conversation (chat_key) for user. FAWN_ENOENT when none. */
FAWN_MUST_CHECK int store_ch_thread_get(store *s, char thread_id[65], const char *provider,
                                        const char *chat_key, int64_t user_id);
/* Sets (or replaces: /new) the conversation's thread. */
FAWN_MUST_CHECK int store_ch_thread_set(store *s, const char *provider, const char *chat_key,
                                        int64_t user_id, const char *thread_id);

/* What store_ch_inbox_add did with an event. */
enum store_ch_inbox_add {
    STORE_CH_ADDED,     /* recorded (queued, or done when not queued) */
    STORE_CH_DUPLICATE, /* the event was seen before: nothing changed */
    STORE_CH_FULL,      /* recorded done, not queued: the conversation's queue is full */
};

typedef struct store_ch_inbox_req {
    const char *provider, *event_id;
    const char *chat_key; /* the queue: one conversation's messages run in order */
    const char *message;  /* JSON text of the message (kept while queued) */
    bool queue;           /* false: only record it (a command, a refusal) */
    uint32_t max_queued;  /* queued or running items of chat_key at most */
    int64_t now_ms;
} store_ch_inbox_req;

/* Records an inbound event once (provider, event_id unique), in one
 * transaction: STORE_CH_DUPLICATE when already recorded. */
FAWN_MUST_CHECK int store_ch_inbox_add(store *s, enum store_ch_inbox_add *out,
                                       const store_ch_inbox_req *q);

typedef struct store_ch_item {
    int64_t seq;
    char provider[STORE_CH_PROVIDER_MAX + 1];
    char event_id[STORE_CH_KEY_MAX + 1];
    char chat_key[STORE_CH_KEY_MAX + 1];
    char status[8]; /* queued | claimed | done */
    char run_id[37];
    char *message; /* malloc'd */
} store_ch_item;
void store_ch_item_clear(store_ch_item *it);

/* Up to limit items of status ("queued" or "claimed"), oldest first. */
FAWN_MUST_CHECK int store_ch_inbox_list(store *s, store_ch_item **out, size_t *n,
                                        const char *status, size_t limit);
/* queued -> claimed; *claimed false when it was not queued any more. */
FAWN_MUST_CHECK int store_ch_inbox_claim(store *s, bool *claimed, int64_t seq);
/* Records the run a claimed item started. */
FAWN_MUST_CHECK int store_ch_inbox_set_run(store *s, int64_t seq, const char *run_id);
/* claimed -> done, or claimed -> queued with requeue. */
FAWN_MUST_CHECK int store_ch_inbox_finish(store *s, int64_t seq, bool requeue);
/* The run whose metadata names inbox item seq (channel_inbox_seq), if any
 * (run_id "" when none). */
FAWN_MUST_CHECK int store_ch_inbox_find_run(store *s, char run_id[37], int64_t seq);
/* Deletes done items recorded before before_ms (the dedup window). */
FAWN_MUST_CHECK int store_ch_inbox_prune(store *s, int64_t before_ms);

/* A provider's runtime settings (JSON object text, malloc'd). FAWN_ENOENT when none. */
FAWN_MUST_CHECK int store_ch_settings_get(store *s, char **out, const char *provider);
/* Saves them (settings NULL: deletes; FAWN_ENOENT when there were none). */
FAWN_MUST_CHECK int store_ch_settings_set(store *s, const char *provider, const char *settings);

#endif
