/* Feishu/Lark: the platform's two halves, private to src/channels.
 *
 * Rules, and the function that keeps each:
 * - No event leaves the parser before it is proven to come from the
 *   platform: a signed request must carry a signature that matches
 *   (X-Lark-Signature = sha256 hex of timestamp + nonce + encrypt_key + raw
 *   body, compared in constant time) inside FEISHU_SIGNATURE_WINDOW_S; with an
 *   encrypt key configured, a body that is not encrypted is refused; and the
 *   verification token inside the payload must match (feishu_callback_parse).
 * - A decrypted body is AES-256-CBC with key SHA-256(encrypt_key), the IV in
 *   its first 16 bytes and PKCS#7 padding that must be exact
 *   (feishu_decrypt).
 * - Every id that later goes into an API path (message ids, chat ids, file
 *   keys, open ids) is checked against an allow-list of characters when the
 *   event is read, not when it is used (feishu_id_valid).
 * - Every answer of the open platform is `{code, msg, ...}`; code 0 is
 *   success and every other code becomes a fawn_err naming the call, the
 *   code and the platform's message (feishu_reply_check). The client never
 *   follows redirects and bounds every answer it reads.
 * - A downloaded resource is written to the caller's descriptor and stops
 *   with FAWN_E2BIG at the caller's cap (feishu_resource_download). */
#ifndef FAWN_CHANNELS_FEISHU_INTERNAL_H
#define FAWN_CHANNELS_FEISHU_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"

/* An event callback is a few KiB (a message's text is at most 150 KiB on the
 * platform, base64 and JSON escaping add a half); 512 KiB leaves room and
 * bounds what an unauthenticated client makes fawn hash and decrypt. */
#define FEISHU_CALLBACK_MAX ((size_t)512 << 10)
/* A signed request older or newer than this is refused: clock skew plus the
 * platform's delivery delay is seconds; a captured request replayed later is
 * refused here before the dedup record is even consulted. */
#define FEISHU_SIGNATURE_WINDOW_S 300
/* Ids and keys are short ASCII (om_…, oc_…, ou_…, img_v3_…, file_v3_…); 128
 * bounds what goes into a URL path. */
#define FEISHU_ID_MAX 128
/* A tenant access token ("t-" and some 40 characters) at most: it goes into
 * an Authorization header. */
#define FEISHU_TOKEN_MAX 512
/* Attachments read from one message: a post (rich text) may inline several
 * images; more than this is not a message a person typed. */
#define FEISHU_MAX_RESOURCES 16
/* Characters of message text passed on: the platform's own text limit is
 * 150 KiB; the layer bounds the prompt again. */
#define FEISHU_TEXT_MAX ((size_t)150 << 10)
/* A file name as sent in a file message; the upload writer renames it safely. */
#define FEISHU_NAME_MAX 255
/* Mentions read from one message: a group message may @ many people; the
 * text is only cleaned of the first this many placeholders. */
#define FEISHU_MAX_MENTIONS 64
/* Elements of a rich-text (post) message read: lines times elements. */
#define FEISHU_MAX_POST_ELEMENTS 1024

/* ---- settings (feishu_settings.c) ---- */

#define FEISHU_DEFAULT_API_BASE "https://open.feishu.cn"

/* channels.feishu, merged with the runtime config saved through the API. */
typedef struct feishu_settings {
    char *app_id;             /* app_id (cli_...) */
    char *app_secret;         /* app_secret (secret) */
    char *verification_token; /* verification_token: checked in every callback (secret) */
    char *encrypt_key;        /* encrypt_key: callbacks signed and encrypted (secret; NULL: none) */
    char *api_base;           /* api_base: https://open.feishu.cn (default), Lark's
                                 https://open.larksuite.com, or a test's loopback server */
    bool stream_cards;        /* stream_cards: answers are a card updated while the run
                                 streams (default true); false: one text reply at the end */
    bool allow_insecure;      /* allow_insecure: an http:// api_base is accepted (tests only;
                                 default false) */
} feishu_settings;

/* Reads section (cfg->channels.feishu, may be NULL) and runtime (the saved
 * runtime config, may be NULL; its values win) into *out (zeroed first; free
 * with feishu_settings_free on every path). FAWN_ENOENT when the channel is
 * off (enabled: false) or neither source names app_id and app_secret;
 * FAWN_ECONFIG naming channels.feishu.<key> for an unknown key, a value of
 * the wrong type, a bad api_base, or credentials without a verification
 * token (fail closed: no token, no callbacks). */
FAWN_MUST_CHECK int feishu_settings_read(feishu_settings *out, const json_t *section,
                                         const json_t *runtime);
void feishu_settings_free(feishu_settings *s);

/* ---- event callback (feishu_event.c) ---- */

enum feishu_chat_type { FEISHU_CHAT_P2P, FEISHU_CHAT_GROUP };
enum feishu_msg_type {
    FEISHU_MSG_TEXT,
    FEISHU_MSG_IMAGE,
    FEISHU_MSG_FILE,
    FEISHU_MSG_POST,
    FEISHU_MSG_OTHER /* a type fawn does not read (audio, sticker, ...): answered as such */
};
enum feishu_resource_kind { FEISHU_RESOURCE_IMAGE, FEISHU_RESOURCE_FILE };

typedef struct feishu_resource {
    enum feishu_resource_kind kind;
    char *key;  /* image_key or file_key (feishu_id_valid) */
    char *name; /* file name as sent (file messages), or NULL: untrusted, the
                   upload writer names the file */
} feishu_resource;

typedef struct feishu_message {
    char *event_id;       /* header.event_id: the dedup key of the delivery */
    char *sender_open_id; /* event.sender.sender_id.open_id */
    char *chat_id;
    enum feishu_chat_type chat_type;
    char *message_id;
    enum feishu_msg_type type;
    char *type_name; /* message_type as sent (for the "not supported" answer) */
    char *text;      /* text with @-mention placeholders removed and trimmed; "" if none */
    feishu_resource resources[FEISHU_MAX_RESOURCES];
    size_t n_resources;
} feishu_message;

enum feishu_callback_kind {
    FEISHU_CALLBACK_CHALLENGE, /* url_verification: answer {"challenge": challenge} */
    FEISHU_CALLBACK_MESSAGE,   /* im.message.receive_v1 from a user: msg */
    FEISHU_CALLBACK_IGNORED,   /* another event, or a message sent by a bot: answer 200 */
};

typedef struct feishu_callback {
    enum feishu_callback_kind kind;
    char *challenge;  /* FEISHU_CALLBACK_CHALLENGE */
    char *event_type; /* header.event_type when the body had one */
    feishu_message msg;
} feishu_callback;

/* What proves a callback came from the platform. verification_token is
 * required; encrypt_key may be NULL or "" (the app has none). */
typedef struct feishu_secrets {
    const char *verification_token;
    const char *encrypt_key;
} feishu_secrets;

/* One HTTP request to the callback route. Header values are NULL when absent. */
typedef struct feishu_request {
    const char *timestamp; /* X-Lark-Request-Timestamp (seconds) */
    const char *nonce;     /* X-Lark-Request-Nonce */
    const char *signature; /* X-Lark-Signature */
    const char *body;
    size_t body_len;
    int64_t now_s; /* wall clock, seconds since the epoch */
} feishu_request;

/* True when s is 1..FEISHU_ID_MAX characters of [A-Za-z0-9_-]. */
bool feishu_id_valid(const char *s);

/* Checks X-Lark-Signature over the raw body with encrypt_key: 0 when it
 * matches and the timestamp is within FEISHU_SIGNATURE_WINDOW_S of now;
 * FAWN_EPERM otherwise (missing headers included). */
FAWN_MUST_CHECK int feishu_signature_check(const feishu_request *req, const char *encrypt_key);

/* Decrypts the base64 text of an `encrypt` field with encrypt_key into
 * *out (NUL-terminated, *out_len bytes; caller frees). FAWN_EPERM for
 * anything that does not decrypt exactly (bad base64, a length that is not
 * IV + whole blocks, a wrong key, padding that is not PKCS#7); FAWN_E2BIG
 * past FEISHU_CALLBACK_MAX. */
FAWN_MUST_CHECK int feishu_decrypt(char **out, size_t *out_len, const char *encrypt_key,
                                   const char *b64);

/* Authenticates and reads one event callback: signature (when the request
 * is signed, or the app has an encrypt key and the body is not a URL
 * verification), decryption (required when an encrypt key is configured),
 * the verification token, then the event. *out is zeroed first and freed
 * with feishu_callback_free on every path. Errors: FAWN_EPERM for anything
 * that fails authentication (the route answers 401 and nothing runs),
 * FAWN_EINVAL for an authentic body fawn cannot read, FAWN_E2BIG past
 * FEISHU_CALLBACK_MAX. */
FAWN_MUST_CHECK int feishu_callback_parse(feishu_callback *out, const feishu_secrets *secrets,
                                          const feishu_request *req);

/* Reads a plaintext event body (JSON) into *out, with no check of origin:
 * the part of feishu_callback_parse after signature and decryption. *token
 * (caller frees) is the verification token the body carries (header.token,
 * or token for a URL verification), NULL when it has none; the caller
 * compares it before trusting *out. Errors as feishu_callback_parse. */
FAWN_MUST_CHECK int feishu_event_read(feishu_callback *out, char **token, const char *json,
                                      size_t len);

/* Frees what *cb holds and zeroes it. */
void feishu_callback_free(feishu_callback *cb);

/* The body of the answer to a URL verification ({"challenge": ...}), malloc'd. */
FAWN_MUST_CHECK int feishu_challenge_answer(char **out, const char *challenge);

/* ---- API client (feishu_api.c) ---- */

/* The open platform's answer size bounds: a JSON answer is a few hundred
 * bytes; 1 MiB bounds a broken or hostile server. */
#define FEISHU_REPLY_MAX ((size_t)1 << 20)
/* Inbound resources (images, files) kept at most: the 50 MiB cap. */
#define FEISHU_DOWNLOAD_MAX ((size_t)50 << 20)
/* The platform's own upload limits: 10 MiB for an image, 30 MiB for a file. */
#define FEISHU_IMAGE_UPLOAD_MAX ((size_t)10 << 20)
#define FEISHU_FILE_UPLOAD_MAX ((size_t)30 << 20)
/* A token is refreshed this long before the platform says it expires, so a
 * request never leaves with one that dies on the way. */
#define FEISHU_TOKEN_MARGIN_S 300
/* One API call, upload or download included: the largest file at a slow
 * 1 MiB/s is under a minute. */
#define FEISHU_CALL_TIMEOUT_S 120
/* Connecting to the platform takes a round trip or two. */
#define FEISHU_CONNECT_TIMEOUT_S 10

typedef struct feishu_client_config {
    const char *api_base; /* https://open.feishu.cn, https://open.larksuite.com, or a test's */
    const char *app_id;
    const char *app_secret;
} feishu_client_config;

typedef struct feishu_client {
    char *api_base; /* without a trailing slash */
    char *app_id;
    char *app_secret;
    pthread_mutex_t lock; /* guards token and token_expires_ms */
    char *token;
    int64_t token_expires_ms; /* monotonic */
} feishu_client;

/* A client for one app; nothing is sent until a call needs it. The strings
 * are copied. FAWN_EINVAL when api_base is not an http(s) URL or an id is
 * missing. Free with feishu_client_free. */
FAWN_MUST_CHECK int feishu_client_new(feishu_client **out, const feishu_client_config *cfg);
void feishu_client_free(feishu_client *c);

/* The tenant access token (malloc'd copy), fetched from
 * /open-apis/auth/v3/tenant_access_token/internal when none is cached or the
 * cached one is within FEISHU_TOKEN_MARGIN_S of expiry. FAWN_EPERM when the
 * platform refuses the app's credentials. */
FAWN_MUST_CHECK int feishu_token_get(char **out, feishu_client *c);

/* Forgets the cached token (the platform said it is no longer valid). */
void feishu_token_forget(feishu_client *c);

/* Streams the resource key of message message_id into fd, at most max_bytes
 * (FAWN_E2BIG beyond, with what was written left to the caller to discard).
 * *out_bytes is the count written. Ids must be feishu_id_valid. */
FAWN_MUST_CHECK int feishu_resource_download(size_t *out_bytes, feishu_client *c,
                                             const char *message_id, const char *key,
                                             enum feishu_resource_kind kind, int fd,
                                             size_t max_bytes);

/* Sends a message of msg_type ("text", "interactive", "image", "file") with
 * content (the JSON text the platform wants as a string) to chat_id.
 * *out_message_id (caller frees) is the new message's id. */
FAWN_MUST_CHECK int feishu_message_send(char **out_message_id, feishu_client *c,
                                        const char *chat_id, const char *msg_type,
                                        const char *content);

/* Replies to message_id in its chat; otherwise as feishu_message_send. */
FAWN_MUST_CHECK int feishu_message_reply(char **out_message_id, feishu_client *c,
                                         const char *message_id, const char *msg_type,
                                         const char *content);

/* Replaces the interactive card of message_id (sent by this app) with card. */
FAWN_MUST_CHECK int feishu_card_update(feishu_client *c, const char *message_id, const char *card);

/* Uploads the regular file open at fd as an image for messages; *out_key
 * (caller frees) is its image_key. FAWN_E2BIG past FEISHU_IMAGE_UPLOAD_MAX. */
FAWN_MUST_CHECK int feishu_image_upload(char **out_key, feishu_client *c, int fd, const char *name);

/* Uploads the regular file open at fd under name; *out_key (caller frees) is
 * its file_key. FAWN_E2BIG past FEISHU_FILE_UPLOAD_MAX. */
FAWN_MUST_CHECK int feishu_file_upload(char **out_key, feishu_client *c, int fd, const char *name);

/* ---- message content (feishu_api.c) ---- */

/* {"text": text} as the string a text message's content is. */
FAWN_MUST_CHECK int feishu_text_content(char **out, const char *text);
/* An interactive card with one Markdown element (and a note line when note is
 * not NULL: "working…", a tool's progress). */
FAWN_MUST_CHECK int feishu_card_content(char **out, const char *markdown, const char *note);
/* {"image_key": key} / {"file_key": key}. */
FAWN_MUST_CHECK int feishu_key_content(char **out, enum feishu_resource_kind kind, const char *key);

/* ---- answer parsers (feishu_reply.c): untrusted bytes from the platform ---- */

/* Checks one JSON answer of the call named what: *out_obj (caller
 * json_decref()s, may be NULL to not keep it) is the whole answer when code
 * is 0. Else: FAWN_EPERM for the codes that mean the token or the app's
 * credentials or permissions are refused, FAWN_EBUSY for rate limits,
 * FAWN_E2BIG for size refusals, FAWN_ENOENT for a message or resource that is
 * gone, FAWN_EPROTO for everything else; the message names what, the code
 * and the platform's msg. http_status is folded in when the body says
 * nothing. */
FAWN_MUST_CHECK int feishu_reply_check(json_t **out_obj, const char *what, long http_status,
                                       const char *body, size_t len);

/* True when code means "the access token is invalid or expired": the
 * caller refreshes it and tries once more. */
bool feishu_code_is_token_invalid(int64_t code);

/* Reads the token answer: tenant_access_token and expire (seconds). */
FAWN_MUST_CHECK int feishu_token_reply_parse(char **out_token, int64_t *out_expire_s,
                                             long http_status, const char *body, size_t len);

/* Reads data.<field> (message_id, image_key, file_key) of a successful
 * answer, checked with feishu_id_valid. */
FAWN_MUST_CHECK int feishu_data_id_parse(char **out, const char *what, const char *field,
                                         long http_status, const char *body, size_t len);

#endif
