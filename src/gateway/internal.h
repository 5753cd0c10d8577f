/* What the gateway's files share: the request being served, the route
 * table's shape and the response helpers. No other module includes this.
 *
 * Every out-parameter is set on every path, failures included: a function
 * zeroes its out-parameters (records that their clear function accepts,
 * NULL, -1, "") before anything can fail, so a route clears what it got
 * whether or not the call succeeded. */
#ifndef FAWN_GATEWAY_INTERNAL_H
#define FAWN_GATEWAY_INTERNAL_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "app/app.h"
#include "auth/auth.h"
#include "model/model.h"
#include "gateway/gateway.h"
#include "store/store.h"
#include "base/base.h"

/* Path captures a route pattern may hold ("{}" and "{*}"). */
#define GW_PARAMS_MAX 4
/* Largest JSON body of most routes: thread metadata is capped at 64 KiB,
 * so 1 MiB leaves room for everything else a client sends. */
#define GW_JSON_BODY_MAX ((size_t)1 << 20)
/* Largest body of the sign-in routes: a name and two passwords. */
#define GW_AUTH_BODY_MAX ((size_t)16 << 10)
/* Messages of a thread state in one answer (GET state, one page of
 * history, a run's /wait and /join), newest first: past it the older ones
 * are left out and counted in values.messages_omitted. 4 MiB holds a
 * whole conversation of about a thousand messages of a few KiB, and bounds
 * what one answer costs the gateway: the state is read and spliced into
 * the answer, never parsed into a tree. */
#define GW_STATE_MESSAGES_MAX ((size_t)4 << 20)
/* Messages of the state in one values event of a run's stream: a follower
 * gets one after every step, so a smaller share of the state keeps a long
 * run with large tool results from streaming the whole conversation again
 * at each step; the step's new messages come whole in messages and
 * updates events, the whole state from /state. */
#define GW_VALUES_EVENT_MESSAGES_MAX ((size_t)1 << 20)

typedef struct gw_conns gw_conns;

/* Proxies whose X-Forwarded-For is believed: at most this many. */
#define GW_TRUSTED_PROXIES_MAX 32

struct gateway {
    struct MHD_Daemon *daemon;
    app *app;                                /* the services the routes serve */
    struct channels *channels;               /* the IM channels, or NULL (gateway_set_channels) */
    const fawn_config *cfg;                  /* app_config(app) */
    store *st;                               /* app_store(app) */
    unsigned char secret[AUTH_SECRET_BYTES]; /* signs session tokens */
    char dummy_hash[AUTH_HASH_MAX];          /* verified for unknown users: equal timing */
    int64_t local_admin_id;                  /* auth.disabled: everyone is this user */
    auth_cache *auth_cache;                  /* credentials verified a moment ago */
    gw_conns *conns;                         /* open connections: per-address cap, head deadline */
    char trusted_proxies[GW_TRUSTED_PROXIES_MAX][64]; /* canonical numeric addresses */
    size_t n_trusted_proxies;
    atomic_int in_flight;       /* requests begun and not completed */
    pthread_mutex_t setup_lock; /* makes "first admin" checks and creation one step */
};

/* How a request proved who it is. */
enum gw_via { GW_VIA_NONE, GW_VIA_COOKIE, GW_VIA_TOKEN, GW_VIA_DISABLED };

typedef struct gw_principal {
    store_user user;
    enum gw_via via;
    unsigned permissions; /* AUTHZ_* route permission bits, decided once per request */
} gw_principal;

typedef struct gw_request gw_request;

/* A route handler: queues a response (gw_respond_*) and returns 0, or
 * returns a FAWN_E* code that the server answers with gw_status_for(code)
 * and fawn_errmsg() as the detail. */
typedef int (*gw_handler)(gw_request *rq);

/* A route that reads its body as it arrives (uploads). open runs once the
 * request is authorized; feed gets every chunk; the handler runs at the
 * end; close always runs last, to release what open made. */
typedef struct gw_stream_ops {
    int (*open)(gw_request *rq);
    int (*feed)(gw_request *rq, const char *data, size_t len);
    void (*close)(gw_request *rq);
} gw_stream_ops;

/* Who may call a route: anyone, any signed-in user, or a signed-in user
 * holding these AUTHZ_* route permission bits. */
#define GW_PUBLIC UINT32_MAX
#define GW_SIGNED_IN 0u

enum gw_body { GW_BODY_NONE, GW_BODY_BUFFER, GW_BODY_STREAM };

typedef struct gw_route {
    const char *method;
    const char *pattern; /* "/api/threads/{}": "{}" is one segment, "{*}" the rest (raw) */
    gw_handler handle;
    unsigned access; /* GW_PUBLIC, GW_SIGNED_IN or permission bits */
    enum gw_body body;
    size_t body_max; /* GW_BODY_BUFFER: larger bodies are 413 */
    const gw_stream_ops *stream;
} gw_route;

struct gw_request {
    gateway *g;
    struct MHD_Connection *conn;
    const gw_route *route;
    const char *method;
    char *params[GW_PARAMS_MAX]; /* raw captures of the route pattern, in order */
    gw_principal who;
    fbuf body;        /* GW_BODY_BUFFER */
    void *stream_ctx; /* GW_BODY_STREAM: the route's state */
    uint64_t drained; /* body bytes read and dropped */
    bool responded;   /* an answer is queued or pending */
    /* An answer decided while the client is still sending its body waits
     * until the body has been read (dropped), so the client sees it rather
     * than a connection reset: gw_queue keeps it here while deferring. */
    bool deferring;
    struct MHD_Response *pending;
    unsigned pending_status;
};

/* ---- routes (one file per family) ---- */

extern const gw_route gw_channel_routes[];
extern const size_t gw_channel_routes_count;
extern const gw_route gw_auth_routes[];
extern const size_t gw_auth_routes_count;
extern const gw_route gw_thread_routes[];
extern const size_t gw_thread_routes_count;
extern const gw_route gw_file_routes[];
extern const size_t gw_file_routes_count;
extern const gw_route gw_sandbox_routes[];
extern const size_t gw_sandbox_routes_count;
extern const gw_route gw_model_routes[];
extern const size_t gw_model_routes_count;
extern const gw_route gw_run_routes[];
extern const size_t gw_run_routes_count;
extern const gw_route gw_state_routes[];
extern const size_t gw_state_routes_count;
extern const gw_route gw_web_routes[];
extern const size_t gw_web_routes_count;
extern const gw_route gw_message_routes[];
extern const size_t gw_message_routes_count;
extern const gw_route gw_settings_routes[];
extern const size_t gw_settings_routes_count;
/* Brings the caller's sandbox view of the skills (/mnt/skills) up to date,
 * as a run of theirs does at its start (settings_routes.c). */
FAWN_MUST_CHECK int gw_skills_view_sync(gw_request *rq);
extern const gw_route gw_mcp_routes[];
extern const size_t gw_mcp_routes_count;
extern const gw_route gw_replay_routes[];
extern const size_t gw_replay_routes_count;
extern const gw_route gw_memory_routes[];
extern const size_t gw_memory_routes_count;
extern const gw_route gw_schedule_routes[];
extern const size_t gw_schedule_routes_count;

/* ---- requests (http.c) ---- */

/* A request header, cookie or query argument; NULL when absent. */
const char *gw_header(const gw_request *rq, const char *name);
const char *gw_cookie(const gw_request *rq, const char *name);
const char *gw_query(const gw_request *rq, const char *name);
/* A decimal of digits only (no sign, space or other character; leading
 * zeros allowed) whose value is min … max (0 <= min <= max) into *out.
 * FAWN_EINVAL, with no message, for anything else (NULL and "" included;
 * *out is 0 then). */
FAWN_MUST_CHECK int gw_decimal_parse(int64_t *out, const char *text, int64_t min, int64_t max);
/* Query argument key as gw_decimal_parse reads it, dflt when absent.
 * FAWN_EINVAL "<key> must be an integer from <min> to <max>" (*out 0). */
FAWN_MUST_CHECK int gw_query_int(int64_t *out, const gw_request *rq, const char *key, int64_t dflt,
                                 int64_t min, int64_t max);
/* The client's address as text ("127.0.0.1"), into out: the TCP peer, or,
 * when the peer is a trusted proxy, the address its X-Forwarded-For names
 * (see gw_forwarded_client). */
void gw_client_address(char out[64], const gw_request *rq);
/* The client behind a chain of proxies: the rightmost X-Forwarded-For entry
 * that is not itself a trusted proxy, when peer is one; peer otherwise, and
 * also when the header is absent or holds anything but addresses. trusted
 * is n numeric addresses. Writes at most 64 bytes to out. */
void gw_forwarded_client(char out[64], const char *peer, const char *forwarded_for,
                         char trusted[][64], size_t n);
/* The authority a client addressed, as host[:port] into out (outsz bytes):
 * when peer_trusted (the TCP peer is a trusted proxy) and forwarded_host
 * (X-Forwarded-Host) is present, its first comma-separated entry, trimmed;
 * else host (the Host header). "" when that is absent, empty or does not
 * fit. The first entry is the one the outermost proxy saw; a client could
 * have written it itself, but only a client that is not a browser page (a
 * page's cross-site request cannot carry the header without a CORS
 * preflight, which is never granted), and the Origin check guards against
 * pages only. */
void gw_forwarded_host(char *out, size_t outsz, const char *host, const char *forwarded_host,
                       bool peer_trusted);
/* gw_forwarded_host for rq: its Host and X-Forwarded-Host headers, and
 * whether its TCP peer is one of server.trusted_proxies. */
void gw_request_host(char *out, size_t outsz, const gw_request *rq);
/* Validates server.trusted_proxies into g (FAWN_ECONFIG naming the entry). */
FAWN_MUST_CHECK int gw_trusted_proxies_load(gateway *g, const json_t *list);
/* Whether addr (canonical text, as inet_ntop writes it) is a trusted proxy. */
bool gw_proxy_trusted(const gateway *g, const char *addr);
/* The value of field key in an application/x-www-form-urlencoded body,
 * decoded ('+' is a space, %XX escapes once) into out. FAWN_ENOENT when
 * absent; FAWN_EINVAL for a malformed escape, %00, or a value longer than
 * outsz - 1. */
FAWN_MUST_CHECK int gw_form_field(char *out, size_t outsz, const char *body, size_t len,
                                  const char *key);
/* The body as a JSON object (*out is new; caller decrefs); an empty body is
 * {}. FAWN_EINVAL for anything else than one JSON object. */
FAWN_MUST_CHECK int gw_body_json(json_t **out, const gw_request *rq);

/* ---- responses (http.c) ---- */

/* The HTTP status for a FAWN_E* code (FAWN_EINVAL 400, EPERM 403, ENOENT
 * 404, EEXIST/EBUSY 409, ESTALE 412, E2BIG 413, EUNSUP 415, else 500). */
unsigned gw_status_for(int code);
/* A JSON response object for body (stolen), with the headers every answer
 * carries; NULL when out of memory. Callers may add headers, then gw_queue. */
struct MHD_Response *gw_json_response(json_t *body);
/* The same for body already as JSON text (malloc'd, taken; NULL: out of
 * memory), for answers spliced from stored JSON without parsing it. */
struct MHD_Response *gw_json_text_response(char *text);
/* Queues r with status (or keeps it pending, see gw_request.deferring) and
 * releases the caller's reference; FAWN_EIO if MHD refuses. */
FAWN_MUST_CHECK int gw_queue(gw_request *rq, unsigned status, struct MHD_Response *r);
/* Queues body (stolen) as JSON with status. */
FAWN_MUST_CHECK int gw_respond_json(gw_request *rq, unsigned status, json_t *body);
/* Queues {"detail": detail} with status. */
FAWN_MUST_CHECK int gw_respond_detail(gw_request *rq, unsigned status, const char *detail);
/* Queues {"detail": {"code": code, "message": message}} with status: the
 * shape of authentication errors, whose code a client acts on. */
FAWN_MUST_CHECK int gw_respond_coded(gw_request *rq, unsigned status, const char *code,
                                     const char *message);

/* ---- sessions (session.c) ---- */

/* Names of the session cookies. */
#define GW_ACCESS_COOKIE "access_token"
#define GW_CSRF_COOKIE "csrf_token"
#define GW_CSRF_HEADER "X-CSRF-Token"
/* API tokens start with this, which tells them apart from session tokens
 * sent as a bearer. */
#define GW_API_TOKEN_PREFIX "fawn_"

/* Establishes rq->who from an API token, the session cookie or the
 * disabled-auth mode. 0 when signed in; FAWN_EPERM when a 401 has been
 * queued; other codes (the store failed, or the 401 could not be queued)
 * are not answered yet. */
FAWN_MUST_CHECK int gw_authenticate(gw_request *rq);
/* For state-changing methods: a cookie session must echo its csrf_token
 * cookie in X-CSRF-Token (constant-time compare); API tokens are exempt;
 * requests without a session must come from no browser origin or our own.
 * 0, or a 403 has been queued and FAWN_EPERM is returned (another code, not
 * answered yet, when it could not be queued). */
FAWN_MUST_CHECK int gw_check_csrf(gw_request *rq);
/* The sign-in routes' defense: an Origin header, when present, must name
 * this server: the authority gw_request_host finds. 0, or FAWN_EPERM with a
 * message. */
FAWN_MUST_CHECK int gw_check_origin(const gw_request *rq);
/* Adds fresh session cookies for user to r (a new csrf_token too). */
FAWN_MUST_CHECK int gw_session_cookies_set(struct MHD_Response *r, const gateway *g,
                                           const store_user *user);
/* Drops the session this request presents (cookie or bearer) from the
 * cache of verified credentials: signing out leaves none behind. */
void gw_session_forget(gw_request *rq);
/* Adds cookies that clear the session to r. */
FAWN_MUST_CHECK int gw_session_cookies_clear(struct MHD_Response *r, const gateway *g);

/* ---- sign-in throttling (throttle.c) ---- */

/* Attempts from one address within GW_THROTTLE_LOCKOUT_S that lock it out,
 * and for how long; every gateway on the store shares the counts. */
#define GW_THROTTLE_FAILURES 5
#define GW_THROTTLE_LOCKOUT_S 300

/* Counts a sign-in attempt from addr at now_s (seconds since the epoch)
 * in st, before its credentials are checked: 0 with *wait_s the seconds
 * addr must still wait (the attempt is refused), or 0 when it may go on
 * (the GW_THROTTLE_FAILURES-th attempt of a window locks the address out
 * after it). A store error is returned (*wait_s 0): the caller refuses the
 * attempt, as the count is unknown. */
FAWN_MUST_CHECK int gw_throttle_attempt(int64_t *wait_s, store *st, const char *addr,
                                        int64_t now_s);
/* Forgets addr's attempts after a successful sign-in (logged when the
 * store fails: the count then stays until its window ends). */
void gw_throttle_succeed(store *st, const char *addr);

/* ---- connections (connections.c) ---- */

/* The table of open connections of g's server, with its watcher thread,
 * which closes those whose request head is late (see connections.c for the
 * rules). g must be prepared (cfg and trusted proxies loaded) and outlive
 * it. 0, or FAWN_ENOMEM / FAWN_EIO (no thread); free with gw_conns_free,
 * after the server has stopped. */
FAWN_MUST_CHECK int gw_conns_new(gw_conns **out, const gateway *g);
void gw_conns_free(gw_conns *t);
/* For MHD_OPTION_ACCEPT_POLICY_CALLBACK (cls: the table): MHD_NO when the
 * peer's address already holds its most connections. */
enum MHD_Result gw_conns_admit(void *cls, const struct sockaddr *addr, socklen_t addrlen);
/* For MHD_OPTION_NOTIFY_CONNECTION (cls: the table): records a connection
 * when it starts (shutting it down when its address is over its cap) and
 * forgets it when it closes. */
void gw_conns_notify(void *cls, struct MHD_Connection *c, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);
/* The head of a request on c has arrived: no deadline applies until it
 * completes. */
void gw_conns_head_arrived(gw_conns *t, struct MHD_Connection *c);
/* A request on c has completed: the next head is due within the deadline
 * (and its file, if any, is no longer watched). */
void gw_conns_head_awaited(gw_conns *t, struct MHD_Connection *c);
/* The response on c sends bytes of the file open as fd (borrowed: the
 * response owns it; it is looked at only while it still names the same
 * file) up to end with sendfile: should the file shrink below end, c is
 * shut down within CONNS_FILE_CHECK_MS rather than left waiting. Until the
 * request completes. 0, or FAWN_EIO (fd cannot be looked at). */
FAWN_MUST_CHECK int gw_conns_file_sending(gw_conns *t, struct MHD_Connection *c, int fd,
                                          uint64_t end);

/* ---- shared by route families ---- */

/* A deleted thread's directory is first renamed to this prefix plus its
 * id and a random suffix, then removed; leftovers are removed at start. */
#define GW_DELETED_PREFIX ".deleted-"

/* The thread named by the route's first capture among the signed-in
 * user's threads (caller clears *out); FAWN_ENOENT "Thread not found".
 * Thread ids are per user. With create, a missing thread is created for the
 * user first (uploads may precede the thread's first run). */
FAWN_MUST_CHECK int gw_thread_resolve(store_thread *out, gw_request *rq, bool create);
/* Opens t's user-data directory (app_thread_files_open for the signed-in
 * user); caller closes. */
FAWN_MUST_CHECK int gw_thread_files_open(int *user_data_fd, gw_request *rq, const store_thread *t,
                                         bool create);

/* {"id","email","username","system_role","needs_setup"} for u (new ref);
 * email is auth_user_email's. */
json_t *gw_user_json(const store_user *u);
/* ISO 8601 UTC text of a wall-clock time in ms, into out. */
void gw_iso_time(char out[40], int64_t ms);

/* ---- thread search views (thread_view.c) ----
 * A search body's select (which fields of each thread come back), extract
 * (alias: path pairs whose values come back in each thread's "extracted")
 * and ids (which threads), as LangGraph defines them. An extract path is
 * keys joined by '.', each optionally followed by list indexes "[n]" or
 * "[-n]" (from the end), e.g. "metadata.tags[-1]"; it starts at a field
 * of the thread object, and of values names only values.title. */

/* Fields one select names (repeats included): twice the thread's fields. */
#define GW_SELECT_FIELDS_MAX 20
/* Paths one search extracts (LangGraph's bound), the longest path and
 * alias, the steps of a path and the digits of an index: enough for any
 * path into a thread object, and each path costs one walk per thread. */
#define GW_EXTRACT_PATHS_MAX 10
#define GW_EXTRACT_PATH_MAX 256
#define GW_EXTRACT_ALIAS_MAX 64
#define GW_EXTRACT_STEPS_MAX 16
#define GW_EXTRACT_INDEX_DIGITS_MAX 9

typedef struct gw_thread_view {
    unsigned fields; /* bits of the selected fields; 0 when select was absent or empty (all) */
    json_t *extract; /* {alias: path}, every path checked; NULL when absent */
} gw_thread_view;

/* Reads select and extract of a search body into *out (clear it with
 * gw_thread_view_clear, on every path). FAWN_EINVAL naming what is wrong:
 * a field that is not one of the thread object's (or "context", which fawn
 * threads lack), more than GW_SELECT_FIELDS_MAX names, more than
 * GW_EXTRACT_PATHS_MAX paths, an alias that is empty, longer than
 * GW_EXTRACT_ALIAS_MAX or holds control characters, a bad path. */
FAWN_MUST_CHECK int gw_thread_view_parse(gw_thread_view *out, const json_t *body);
void gw_thread_view_clear(gw_thread_view *v);
/* Shapes thread (a thread object, changed in place and returned; NULL
 * stays NULL): adds "extracted" {alias: the value at its path, or null}
 * when v extracts, then drops the fields v does not select. */
json_t *gw_thread_view_apply(json_t *thread, const gw_thread_view *v);
/* 0 when path is an extract path (see above); FAWN_EINVAL saying why not
 * (also for NULL, and for paths over GW_EXTRACT_PATH_MAX bytes or
 * GW_EXTRACT_STEPS_MAX steps). */
FAWN_MUST_CHECK int gw_extract_path_check(const char *path);
/* The value at path in obj (borrowed), or NULL when the path is not valid
 * or leads nowhere. */
const json_t *gw_extract_value(const json_t *obj, const char *path);
/* The ids of a search body as the store takes them (JSON array text,
 * malloc'd into *out), or NULL when ids is absent, null or empty.
 * FAWN_EINVAL for anything but a list of at most STORE_SEARCH_IDS_MAX
 * thread ids. */
FAWN_MUST_CHECK int gw_thread_ids_parse(char **out, const json_t *ids);

/* ---- following a run (run_stream.c) ---- */

/* Which of a run's events a follower sends. */
enum {
    GW_MODE_ALWAYS = 1u << 0, /* metadata, error, end */
    GW_MODE_VALUES = 1u << 1,
    GW_MODE_MESSAGES = 1u << 2,
    GW_MODE_UPDATES = 1u << 3,
    GW_MODE_CUSTOM = 1u << 4,
};

/* The mode bits of a request's stream_mode (a name or a list; absent:
 * values). FAWN_EINVAL "unsupported_stream_mode: <name>" for anything but
 * values, messages-tuple (or messages), updates and custom. */
FAWN_MUST_CHECK int gw_stream_modes(unsigned *out, const json_t *stream_mode);

/* The event id a Last-Event-ID value names, the last one the client has:
 * 0 (from the first event) for NULL, "" and "-1" (LangGraph clients send it
 * to replay everything); else a decimal of digits only, 0 … INT64_MAX.
 * FAWN_EINVAL for anything else (a sign, spaces, other characters, a larger
 * number); *out is 0 then. */
FAWN_MUST_CHECK int gw_event_id_parse(int64_t *out, const char *text);

typedef struct gw_follow_spec {
    const char *run_id;
    const char *thread_id;
    int64_t owner_id;
    unsigned modes;               /* GW_MODE_* bits */
    int64_t after;                /* the last event id the client has (Last-Event-ID) */
    bool sse;                     /* SSE frames; else /wait's final JSON */
    bool cancel_on_disconnect;    /* on_disconnect: cancel */
    const char *content_location; /* header value, or NULL */
} gw_follow_spec;

/* Answers 200 with a response that follows the run (see run_stream.c). */
FAWN_MUST_CHECK int gw_respond_follow(gw_request *rq, const gw_follow_spec *spec);

#endif
