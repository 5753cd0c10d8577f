/* model: OpenAI-compatible chat completions, streamed over SSE, and the
 * configured models. Depends only on base.
 *
 * Layers, each file calling only files listed before it (never back up):
 *  - sse.c: sse_parser, an incremental Server-Sent Events parser (any chunking).
 *  - model_classify.c: failure classes, the classification of an error
 *    response (model_classify_http) and of Retry-After (model_parse_retry_after).
 *  - model_openai.c: model_attempt, one streamed HTTP attempt through libcurl,
 *    classified (calls sse.c and model_classify.c); model_response_read
 *    (model_internal.h) reads a whole response the same way, for tests.
 *  - model_retry.c: model_complete, attempts with per-class budgets (the retry
 *    policy table below), Retry-After, jitter, a circuit breaker and llm_retry
 *    notifications (calls model_openai.c and model_classify.c).
 *  - model_fixture.c: script, replay and record fixtures.
 *  - models.c: the configured models; model_entry_complete answers from a
 *    fixture or through model_complete (calls model_fixture.c and model_retry.c).
 *
 * Every out-parameter is set on every path, failures included: a function
 * zeroes its out-parameters (an empty reply that model_reply_clear accepts,
 * NULL, "") before anything can fail, and never reads or frees what they
 * held before (clear a reply before reusing its variable). */
#ifndef FAWN_MODEL_H
#define FAWN_MODEL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/base.h"

/* ---- SSE (sse.c) --------------------------------------------------------- */

/* 1 MiB: one line of a chat-completion stream is one JSON chunk, far smaller. */
#define SSE_LINE_MAX ((size_t)1 << 20)
/* 4 MiB: the data of one event (several data lines joined). */
#define SSE_EVENT_MAX ((size_t)4 << 20)
/* 64 bytes: event type names are short words ("message", "error"). */
#define SSE_EVENT_NAME_MAX 64

/* Called once per dispatched event. `event` is the type ("message" unless an
 * event: field said otherwise); `data` is the data lines joined by "\n",
 * NUL-terminated, data_len bytes (it may contain NUL bytes). Both are valid
 * only during the call. A nonzero return stops the parser: sse_feed returns
 * that value unchanged. */
typedef int (*sse_event_fn)(void *ctx, const char *event, const char *data, size_t data_len);

typedef struct sse_parser {
    sse_event_fn on_event;
    void *ctx;
    fbuf line; /* the current, unterminated line */
    fbuf data; /* data of the pending event */
    char event[SSE_EVENT_NAME_MAX];
    bool has_data;   /* a data field was seen for the pending event */
    bool after_cr;   /* the previous byte ended a line with CR (skip one LF) */
    bool first_line; /* a leading UTF-8 BOM is dropped from the first line */
} sse_parser;

/* Prepares p; nothing is allocated until bytes are fed. */
void sse_init(sse_parser *p, sse_event_fn on_event, void *ctx);

/* Feeds n bytes (any split of the stream). Lines end with CRLF, LF or CR;
 * lines starting with ':' are comments; an empty line dispatches the pending
 * event when it has data. Fields other than data and event are ignored.
 * Returns 0, the callback's nonzero value, FAWN_E2BIG when a line or an
 * event passes its limit, or FAWN_ENOMEM. After an error p is unusable except
 * for sse_free. */
FAWN_MUST_CHECK int sse_feed(sse_parser *p, const char *buf, size_t n);

/* Frees the buffers; an undispatched pending event is discarded (per the SSE
 * specification, an incomplete event at end of stream is not delivered). */
void sse_free(sse_parser *p);

/* ---- one attempt (model_openai.c; failure classes in model_classify.c) ------ */

/* 64 tool calls: more than any sane single reply; bounds the accumulator. */
#define MODEL_TOOL_CALLS_MAX 64
/* 1 MiB: arguments of one tool call (file contents written by a tool). */
#define MODEL_TOOL_ARGS_MAX ((size_t)1 << 20)
/* 4 MiB: text content of one reply. */
#define MODEL_CONTENT_MAX ((size_t)4 << 20)
/* 32 MiB: all bytes of one streamed response, whatever they carry. */
#define MODEL_STREAM_MAX ((size_t)32 << 20)
/* 64 KiB: body of an error response; only its error object is read. */
#define MODEL_ERROR_BODY_MAX ((size_t)64 << 10)
/* 2^40: a token count of a reply's usage past every context window; a larger
 * (or negative) count is not believed, so sums of counts cannot overflow. */
#define MODEL_USAGE_TOKENS_MAX ((int64_t)1 << 40)

typedef struct model_config {
    const char *name;          /* configured name, used in messages (required) */
    const char *model;         /* provider model id sent as "model" */
    const char *base_url;      /* e.g. https://gateway.example/v1 (no trailing /chat/completions) */
    const char *api_key;       /* NULL or "" sends no Authorization header */
    uint32_t max_tokens;       /* 0 omits max_tokens */
    uint32_t stall_timeout_ms; /* no bytes for this long → stalled; 0 = 240 s */
    uint32_t total_timeout_ms; /* whole attempt; 0 = 15 min */
    const json_t *extra_body;  /* NULL or an object merged into the request body */
} model_config;

typedef struct model_reply {
    /* {"role":"assistant","content":"...","tool_calls":[{"id","type":"function",
     * "function":{"name","arguments"}}]} (tool_calls only when there are some). */
    json_t *message;
    char finish_reason[32];                   /* "" when the stream did not say */
    int64_t prompt_tokens, completion_tokens; /* 0 … MODEL_USAGE_TOKENS_MAX; -1 when not sent */
} model_reply;

/* Releases reply->message and resets the reply. Safe on a zeroed reply. */
void model_reply_clear(model_reply *reply);

/* Failure classes, decided from transport errors, HTTP status and the
 * error object's code/type fields (never from message text). */
enum model_failure {
    MODEL_OK,
    MODEL_FAIL_QUOTA,     /* billing or quota exhausted: not retried */
    MODEL_FAIL_AUTH,      /* credentials refused: not retried */
    MODEL_FAIL_BURST,     /* rate limited for now: retried (MODEL_RETRY_BURST_ATTEMPTS) */
    MODEL_FAIL_TRANSIENT, /* timeouts, connection errors, 408/409/425/5xx, broken streams:
                             retried (MODEL_RETRY_TRANSIENT_ATTEMPTS) */
    MODEL_FAIL_STALLED,   /* no bytes within the stall timeout: retried
                             (MODEL_RETRY_STALLED_ATTEMPTS) */
    MODEL_FAIL_CANCELLED, /* the caller's cancel flag was set: not retried */
    MODEL_FAIL_FATAL,     /* anything else (bad request, limits): not retried */
};

/* A short name for a failure class ("quota", "auth", "burst", ...). */
const char *model_failure_name(enum model_failure why);

/* Classifies an HTTP error response from its status and the OpenAI error
 * object's "code"/"type" (error_body may be NULL or not JSON). The table is
 * in model_classify.c. */
enum model_failure model_classify_http(long status, const char *error_body, size_t len);

/* Retry-After value (delta-seconds or an HTTP-date) as milliseconds from
 * now_wall_ms (wall clock, ms since the epoch). -1 when unparsable; 0 for a
 * date in the past. */
int64_t model_parse_retry_after(const char *value, int64_t now_wall_ms);

/* Streamed text of the reply, as it arrives (for token streaming). */
typedef void (*model_delta_fn)(void *ctx, const char *content_delta, size_t len);

/* Runs one streamed chat completion: POST {base_url}/chat/completions with
 * {"model","messages","tools"?,"stream":true,"stream_options":{"include_usage":
 * true},"max_tokens"?} plus cfg->extra_body's fields (which win on conflict).
 * messages is an array; tools is NULL or an array (omitted when empty).
 * On success fills *out (caller calls model_reply_clear) and sets *why to
 * MODEL_OK. On failure *out is left cleared, *why says the class,
 * *retry_after_ms is the server's Retry-After/retry-after-ms in ms (-1 when
 * absent), and the error message reads "model <name>: ...". Codes:
 * FAWN_ECANCELED (cancel flag set; in-flight requests abort within ~100 ms),
 * FAWN_ETIMEDOUT (stall or total timeout), FAWN_EPERM (auth/quota),
 * FAWN_EBUSY (rate limited), FAWN_EPROTO (bad stream), FAWN_E2BIG (a reply
 * limit above), FAWN_EIO (transport/HTTP errors), FAWN_EINVAL (bad config). */
FAWN_MUST_CHECK int model_attempt(model_reply *out, enum model_failure *why,
                                  int64_t *retry_after_ms, const model_config *cfg,
                                  const json_t *messages, const json_t *tools,
                                  model_delta_fn on_delta, void *ctx, const atomic_bool *cancel);

/* ---- retry policy: every budget and delay of model_complete ---------------
 *
 * One table, read by model_retry.c alone. By failure class:
 *
 *   class      attempts in total               jitter base                  breaker
 *   transient  MODEL_RETRY_TRANSIENT_ATTEMPTS  MODEL_BACKOFF_BASE_MS        counts
 *   stalled    MODEL_RETRY_STALLED_ATTEMPTS    MODEL_BACKOFF_BASE_MS        counts
 *   burst      MODEL_RETRY_BURST_ATTEMPTS      MODEL_BACKOFF_BURST_BASE_MS  does not count
 *   quota, auth, cancelled, fatal: 1 attempt (asking again gets the same
 *   answer); they do not count toward the breaker either.
 *
 * The class of the latest failure decides whether another attempt is made.
 * A server's Retry-After replaces the jitter, up to MODEL_RETRY_AFTER_MAX_MS. */

/* 3 attempts for a transient failure: a dropped connection or a 5xx from an
 * overloaded server usually clears within a few seconds. */
#define MODEL_RETRY_TRANSIENT_ATTEMPTS 3
/* 2 attempts for a stalled stream: each attempt may wait a whole stall
 * timeout (minutes) before it is declared stalled. */
#define MODEL_RETRY_STALLED_ATTEMPTS 2
/* 2 attempts when rate limited: one wait for the limit to clear, then the run
 * hears of it rather than queueing behind the limit. */
#define MODEL_RETRY_BURST_ATTEMPTS 2
/* 1000 ms: base of the decorrelated jitter. */
#define MODEL_BACKOFF_BASE_MS 1000
/* 5000 ms: base for burst rate limits, which need longer to clear. */
#define MODEL_BACKOFF_BURST_BASE_MS 5000
/* 8000 ms: ceiling of the jitter. */
#define MODEL_BACKOFF_CAP_MS 8000
/* 3: decorrelated jitter draws the next wait up to 3 times the previous one. */
#define MODEL_BACKOFF_GROWTH 3
/* 120 s: a server asking for a longer wait fails the call instead of blocking a run. */
#define MODEL_RETRY_AFTER_MAX_MS 120000
/* 5 exhausted retriable failures in a row open the breaker. */
#define MODEL_BREAKER_THRESHOLD 5
/* 60 s open before one probe is let through. */
#define MODEL_BREAKER_OPEN_MS 60000

/* ---- retries and circuit breaker (model_retry.c) ------------------------------ */

/* Attempts allowed in total when failures are of this class (1 = no retry). */
FAWN_MUST_CHECK int model_attempt_budget(enum model_failure why);

/* Decorrelated jitter: uniform in [base, min(MODEL_BACKOFF_CAP_MS, max(base,
 * MODEL_BACKOFF_GROWTH * previous_ms))] where base is MODEL_BACKOFF_BURST_BASE_MS
 * for burst limits and MODEL_BACKOFF_BASE_MS otherwise. random is any
 * uniformly distributed 64-bit value. */
int64_t model_backoff_ms(enum model_failure why, int64_t previous_ms, uint64_t random);

enum model_breaker_state { MODEL_BREAKER_CLOSED, MODEL_BREAKER_OPEN, MODEL_BREAKER_HALF_OPEN };

/* Per-model circuit breaker, shared between threads. */
typedef struct model_breaker {
    pthread_mutex_t lock;
    enum model_breaker_state state;
    int failures; /* consecutive exhausted retriable failures */
    int64_t opened_at_ms;
    bool probe_in_flight;
} model_breaker;

/* Initializes a closed breaker. */
void model_breaker_init(model_breaker *b);
/* Destroys the lock. */
void model_breaker_destroy(model_breaker *b);

/* Asks to start a request at monotonic time now_ms. 0 = go (in half-open
 * state this caller is the single probe and must report with
 * model_breaker_record); FAWN_EBUSY while open or while another probe runs
 * (*wait_ms = ms until the breaker would let a probe through, 0 if unknown). */
FAWN_MUST_CHECK int model_breaker_admit(model_breaker *b, int64_t *wait_ms, int64_t now_ms);

/* Reports the final outcome of an admitted request: MODEL_OK closes the
 * breaker; an exhausted transient or stalled failure counts (and reopens a
 * half-open breaker); burst, non-retriable and cancelled outcomes do not
 * count but end a probe. */
void model_breaker_record(model_breaker *b, enum model_failure outcome, int64_t now_ms);

/* What each retry reports (the llm_retry custom event). */
typedef struct model_retry_info {
    int attempt;         /* the attempt that failed, from 1 */
    int max_attempts;    /* budget of its failure class */
    int64_t wait_ms;     /* delay before the next attempt */
    const char *reason;  /* model_failure_name of the failure */
    const char *message; /* the failure's error message */
} model_retry_info;

typedef void (*model_retry_fn)(void *ctx, const model_retry_info *info);

/* Optional hooks; any NULL member takes the default (real clocks, a
 * cancellable sleep in 50 ms slices, fawn_random_bytes). */
typedef struct model_hooks {
    model_delta_fn on_delta; /* streamed text; text of a failed attempt may already have been sent:
                                an on_retry call means "discard what was streamed" */
    model_retry_fn on_retry;
    void *ctx; /* passed to on_delta and on_retry */
    /* Sleeps ms or until *cancel; returns true when cancelled. */
    bool (*sleep_ms)(void *clock_ctx, int64_t ms, const atomic_bool *cancel);
    int64_t (*now_ms)(void *clock_ctx); /* monotonic */
    uint64_t (*random)(void *clock_ctx);
    void *clock_ctx;
} model_hooks;

/* Runs model_attempt until success or until the failure class's budget is
 * used up: waits Retry-After exactly when given (up to
 * MODEL_RETRY_AFTER_MAX_MS), otherwise decorrelated jitter; calls
 * hooks->on_retry before each wait. breaker may be NULL. On success *out is
 * filled (caller clears it). On failure returns the last attempt's code and
 * message (or FAWN_EBUSY when the breaker is open, FAWN_ECANCELED when
 * cancelled while waiting) and *why (may be NULL) has the final class. */
FAWN_MUST_CHECK int model_complete(model_reply *out, enum model_failure *why,
                                   const model_config *cfg, const json_t *messages,
                                   const json_t *tools, model_breaker *breaker,
                                   const model_hooks *hooks, const atomic_bool *cancel);

/* ---- configured models (config.yaml: models; models.c) ---- */

/* Models one configuration may list, and the longest name: far past any
 * real list; names go in URLs and RBAC lists. */
#define MODEL_REGISTRY_MAX 256
#define MODEL_NAME_MAX 64

/* Where a model's replies come from: an OpenAI-compatible endpoint, or a
 * fixture file: `script` plays its replies in order (the n-th model call of
 * a run gets the n-th reply); `replay` answers each conversation with the
 * reply recorded for its hash (a miss is an error naming the hash);
 * `record` calls the endpoint and appends each answer to the fixture. */
enum model_provider { MODEL_OPENAI, MODEL_SCRIPT, MODEL_REPLAY, MODEL_RECORD };

typedef struct model_fixture model_fixture;

/* One configured model: what model_config needs, plus what clients see. */
typedef struct model_entry {
    char *name;         /* [A-Za-z0-9._-]{1,64}, unique */
    char *display_name; /* defaults to name */
    model_config cfg;   /* its strings point into this entry */
    bool supports_thinking, supports_vision;
    uint32_t context_window; /* tokens the model reads; 0: not configured */
    json_t *extra_body;      /* owned; cfg.extra_body points to it */
    enum model_provider provider;
    model_fixture *fixture; /* script, replay, record */
    model_breaker *breaker; /* openai, record: shared by every run */
} model_entry;

typedef struct model_registry model_registry;

/* The model used when config.yaml lists none: `demo`, a script that lists
 * the uploads, runs a command, writes a report to outputs and presents it. */
#define MODEL_DEMO_NAME "demo"

/* Validates the models list (config.h: an array of objects whose scalars
 * are strings or booleans): keys name, display_name, provider (openai,
 * script, replay, record), fixture, model, base_url, api_key, max_tokens,
 * context_window,
 * stall_timeout_s, total_timeout_s, supports_thinking, supports_vision,
 * extra_body. name is required; model and base_url (http or https) for
 * openai and record; fixture (a JSON file, read now; record creates it) for
 * the others. An empty or absent list holds the built-in demo model. FAWN_ECONFIG naming the key
 * ("models[1].base_url: ...") for anything else, unknown keys and duplicate names included. list
 * may be NULL: no models. Free with model_registry_free. */
FAWN_MUST_CHECK int model_registry_load(model_registry **out, const json_t *list);
void model_registry_free(model_registry *r);
/* How many models, and the i-th in configuration order. */
size_t model_registry_count(const model_registry *r);
const model_entry *model_registry_at(const model_registry *r, size_t i);
/* The model named name, or NULL. */
const model_entry *model_registry_get(const model_registry *r, const char *name);
/* The model named name; an unknown name (or NULL) falls back to the first
 * model, with a log line naming both. NULL only when there are no models. */
const model_entry *model_registry_resolve(const model_registry *r, const char *name);

/* ---- calling a configured model ---- */

/* Canonical hash of a conversation (stored LangChain-shaped messages):
 * sha256 of sorted-key JSON of each non-system message's type, content,
 * tool calls (name and args) and name, with input markers removed and
 * UUIDs, ISO timestamps and dates replaced by placeholders, so a recorded
 * session replays exactly. out gets 64 hex digits. */
FAWN_MUST_CHECK int model_conversation_hash(char out[65], const json_t *conversation);

typedef struct model_request {
    const json_t *conversation; /* stored messages (replay and record key on them) */
    const json_t *messages;     /* the OpenAI request messages */
    const json_t *tools;        /* NULL or an array of tool schemas */
    unsigned call_index;        /* model calls made before this one in the run */
} model_request;

/* One completion from e, whatever its provider: model_complete for openai
 * (with e's breaker), the fixture for the others (record does both). The
 * contract of model_complete applies; fixture misses are FAWN_ENOENT with
 * MODEL_FAIL_FATAL. */
FAWN_MUST_CHECK int model_entry_complete(model_reply *out, enum model_failure *why,
                                         const model_entry *e, const model_request *req,
                                         const model_hooks *hooks, const atomic_bool *cancel);

/* Fixtures (model_fixture.c): load a fixture file for provider (record: a
 * missing file is an empty fixture), free it. */
FAWN_MUST_CHECK int model_fixture_load(model_fixture **out, const char *path,
                                       enum model_provider provider);
/* The built-in demo script. */
FAWN_MUST_CHECK int model_fixture_demo(model_fixture **out);
void model_fixture_free(model_fixture *f);
/* The reply for req from a script or replay fixture, into out. */
FAWN_MUST_CHECK int model_fixture_answer(model_reply *out, model_fixture *f, const char *model_name,
                                         const model_request *req);
/* Appends (hash of req's conversation, reply) to a record fixture and
 * rewrites its file atomically. */
FAWN_MUST_CHECK int model_fixture_record(model_fixture *f, const model_request *req,
                                         const model_reply *reply);

#endif
