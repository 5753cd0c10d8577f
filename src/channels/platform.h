/* channels/platform.h: what an IM platform adapter implements for the
 * shared channel layer (channels.c), and the few helpers the layer gives
 * adapters. Not a public header of the module: only adapters
 * (channels/<platform>.c) and the shared layer include it.
 *
 * An adapter speaks one platform's wire protocol and nothing else: it turns
 * the platform's events into normalized inbound messages (ch_inbound), and
 * the layer's replies into the platform's send calls. Bindings, threads,
 * commands, dedup, queueing, runs, file naming and storage are the layer's.
 *
 * Everything an adapter receives from the platform is untrusted: it parses
 * it defensively, bounds every size, and passes names and texts on as
 * received (the layer sanitizes names and refuses nothing for content).
 *
 * Threads: start/stop/destroy are called from one thread (the layer's).
 * handle_http is called from gateway request threads, download/send_text/
 * update_text/send_file from run and worker threads, all concurrently:
 * an adapter guards its own shared state (token cache, connection).
 *
 * Every out-parameter is set on every path, failures included (NULL, 0
 * before anything can fail). Errors are FAWN_E* codes with fawn_err. */
#ifndef FAWN_CHANNELS_PLATFORM_H
#define FAWN_CHANNELS_PLATFORM_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "config/config.h"

/* Bounds on what one inbound message may carry; an adapter refuses (or
 * cuts, for text) anything past them while parsing. */
#define CH_TEXT_MAX (64 * 1024)      /* bytes of text: far more than a chat message */
#define CH_ATTACHMENTS_MAX 16        /* attachments of one message */
#define CH_ID_MAX 256                /* bytes of any platform id or ref */
#define CH_NAME_MAX 1024             /* bytes of an untrusted file or sender name as received */
#define CH_REPLY_CTX_MAX (16 * 1024) /* bytes of reply_ctx */

/* ---- inbound ---- */

enum ch_attach_kind { CH_ATTACH_IMAGE, CH_ATTACH_FILE };

typedef struct ch_attachment {
    enum ch_attach_kind kind;
    char *name; /* the platform's file name: untrusted, may be NULL or anything */
    char *ref;  /* what download needs to fetch it (a download code, a file key);
                   [^\0]{1,CH_ID_MAX}; the layer derives a fallback name from it */
} ch_attachment;

/* One normalized inbound message. Every string is owned by the message
 * (malloc'd) and freed by ch_inbound_free. The layer may persist a message
 * (queued across restarts), so everything an adapter needs later to reply
 * or to download must be in these fields, reply_ctx included. */
typedef struct ch_inbound {
    char *event_id;    /* unique per delivery of this message by this platform (its
                          message id or event id); redeliveries carry the same id:
                          the layer's persistent dedup key. Required. */
    char *message_id;  /* the platform's id of the message (may equal event_id; NULL) */
    char *chat_id;     /* the conversation (a group or a direct chat). Required. */
    bool is_group;     /* a group chat (threads are per chat and sender there) */
    char *sender_id;   /* the platform's stable id of the sender. Required. */
    char *sender_name; /* display name, untrusted, may be NULL */
    char *text;        /* the text, "" when none (a message with only files) */
    ch_attachment *attachments;
    size_t n_attachments; /* <= CH_ATTACHMENTS_MAX */
    char *reply_ctx;      /* adapter-private JSON object text (a session webhook, a
                             robot code, ...), or NULL; given back in ch_target */
} ch_inbound;

/* A new, empty message (every pointer NULL, text NULL). FAWN_ENOMEM. */
FAWN_MUST_CHECK int ch_inbound_new(ch_inbound **out);

/* Frees msg and everything in it. NULL is fine. */
void ch_inbound_free(ch_inbound *msg);

/* Appends an attachment (name may be NULL; both copied). FAWN_E2BIG past
 * CH_ATTACHMENTS_MAX, FAWN_EINVAL for an empty or oversize ref or name,
 * FAWN_ENOMEM. */
FAWN_MUST_CHECK int ch_inbound_add_attachment(ch_inbound *msg, enum ch_attach_kind kind,
                                              const char *name, const char *ref);

/* Where a reply goes: the conversation of an inbound message. Borrowed. */
typedef struct ch_target {
    const char *chat_id;
    bool is_group;
    const char *sender_id;  /* the sender being answered (may be mentioned) */
    const char *message_id; /* the message being answered, or NULL */
    const char *reply_ctx;  /* the inbound message's reply_ctx, or NULL */
} ch_target;

/* Where an adapter started with `start` delivers what it receives. */
typedef struct ch_sink {
    /* Takes ownership of msg (always: also on a layer error). Returns when
     * the message is persisted or answered, so the adapter may ack the
     * platform afterwards; quick (no run waits for it). 0, or an error the
     * adapter should treat as "not accepted" (do not ack; the platform will
     * redeliver). */
    int (*message)(void *ctx, ch_inbound *msg);
    /* The connection's state changed: "connecting", "connected", or "error"
     * with a detail (no secret in it) shown by GET /api/channels/. */
    void (*state)(void *ctx, const char *state, const char *detail);
    void *ctx;
} ch_sink;

/* ---- HTTP callback (platforms that call fawn) ----
 * POST /api/channels/{provider}/events reaches handle_http with the raw
 * request; the gateway has already capped the body (CH_HTTP_BODY_MAX). */
#define CH_HTTP_BODY_MAX (1024 * 1024)
#define CH_HTTP_HEADERS_MAX 64

typedef struct ch_http_header {
    const char *name; /* lower-case */
    const char *value;
} ch_http_header;

typedef struct ch_http_request {
    const char *method;
    const ch_http_header *headers;
    size_t n_headers;
    const char *body; /* not NUL-terminated; may hold NULs */
    size_t body_len;
} ch_http_request;

typedef struct ch_http_response {
    unsigned status;    /* HTTP status */
    char *content_type; /* malloc'd, or NULL for application/json */
    char *body;         /* malloc'd, or NULL for an empty body */
    size_t body_len;
} ch_http_response;

/* ---- the adapter ---- */

typedef struct ch_platform ch_platform;

typedef struct ch_platform_ops {
    /* Starts receiving: a connect-out platform opens its connection (and
     * keeps it, reconnecting with backoff) on a thread of its own and
     * delivers each inbound message to sink->message; a callback platform
     * just keeps the sink (NULL op allowed). sink is copied. Errors only for
     * what cannot work at all (FAWN_ECONFIG); a connection failure is
     * reported through sink->state and retried. */
    int (*start)(ch_platform *p, const ch_sink *sink);

    /* Stops receiving and returns once no sink call is in progress and none
     * will follow. Sends may still be in flight on other threads and must
     * finish or fail promptly. Idempotent. NULL allowed with start NULL. */
    void (*stop)(ch_platform *p);

    /* Callback platforms: verifies (signature, token), decrypts and parses
     * the raw request, fills *resp (the answer the gateway sends as is:
     * a URL-verification challenge, 200 ack, 401 for a bad signature) and
     * *msgs_out with zero or more inbound messages (array and each message
     * owned by the caller; the layer persists and dedups them before the
     * gateway answers). Returns 0 when resp is filled (even an error
     * answer), an error when it could not be (the gateway answers 500).
     * NULL for connect-out platforms (the route answers 404). */
    int (*handle_http)(ch_platform *p, const ch_http_request *req, ch_http_response *resp,
                       ch_inbound ***msgs_out, size_t *n_msgs_out);

    /* Downloads attachment a of msg into fd (a fresh regular file opened
     * for writing at offset 0), writing at most cap bytes: FAWN_E2BIG (and
     * stops reading) as soon as the file is longer than cap, FAWN_EPERM when
     * a download URL is refused by the address policy, FAWN_EPROTO for a
     * bad platform answer, FAWN_EIO. *size_out gets the bytes written on
     * success. The layer discards fd's content on failure. */
    int (*download)(ch_platform *p, const ch_inbound *msg, const ch_attachment *a, int fd,
                    uint64_t cap, uint64_t *size_out);

    /* Sends text to the conversation; markdown says the text is Markdown
     * (the adapter falls back to plain text where the platform cannot).
     * With updatable, the caller will update the message while a run
     * streams: the adapter sends an editable message or card where it can
     * and gives its handle in *ref_out (malloc'd, caller frees); *ref_out is
     * NULL when the message cannot be updated (the caller then sends one
     * final reply instead). ref_out may be NULL when not updatable. */
    int (*send_text)(ch_platform *p, const ch_target *to, const char *text, bool markdown,
                     bool updatable, char **ref_out);

    /* Replaces the content of the message ref (from send_text) with text;
     * final says it is the last update (a card leaves its streaming state).
     * NULL when the platform cannot update messages. */
    int (*update_text)(ch_platform *p, const ch_target *to, const char *ref, const char *text,
                       bool final);

    /* Sends the regular file open on fd (size bytes, read from offset 0)
     * as an image or a file named name (a safe single file name).
     * FAWN_E2BIG when size is over the platform's cap (nothing sent). */
    int (*send_file)(ch_platform *p, const ch_target *to, enum ch_attach_kind kind,
                     const char *name, int fd, uint64_t size);

    /* stop, then frees everything. NULL is fine for p. */
    void (*destroy)(ch_platform *p);
} ch_platform_ops;

/* An adapter instance: ops plus the adapter's own state. */
struct ch_platform {
    const ch_platform_ops *ops;
    void *impl;
};

/* A key POST /api/channels/{provider}/runtime-config accepts (the layer
 * refuses any other). A secret one is stored but never returned by any API
 * answer (GET shows only that it is set). */
typedef struct ch_setting {
    const char *key;
    bool secret;
} ch_setting;

/* A platform the layer knows: one constant per adapter file
 * (ch_provider_dingtalk in dingtalk.c, ch_provider_feishu in feishu.c). */
typedef struct ch_provider {
    const char *name; /* the {provider} of the routes: [a-z]{1,32} */
    const ch_setting *settings;
    size_t n_settings;
    /* Builds the adapter from cfg (its channels.<name> section) and the
     * runtime config saved through the API (a JSON object of settings, or
     * NULL; its values win over the config's). Does not connect yet.
     * FAWN_ENOENT when the platform is not configured (disabled, or no
     * credentials from either source), FAWN_ECONFIG naming the bad key. */
    int (*open)(ch_platform **out, const fawn_config *cfg, const json_t *runtime);
} ch_provider;

/* The adapters. The layer knows them from the list in providers.c (one
 * line per adapter: a static library links only what is named). */
extern const ch_provider ch_provider_dingtalk;
extern const ch_provider ch_provider_feishu;

#endif
