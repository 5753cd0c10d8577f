/* dingtalk_internal.h: the DingTalk adapter's parts shared by its files
 * (dingtalk.c: config, HTTP API, sends, downloads; dingtalk_stream.c: the
 * Stream mode WebSocket; dingtalk_parse.c: the payload parsers, pure, also
 * used by the unit tests and the fuzz targets). */
#ifndef FAWN_DINGTALK_INTERNAL_H
#define FAWN_DINGTALK_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "channels/platform.h"
#include "research/research.h"

/* Largest Stream frame accepted (a bot message is a few KiB). */
#define DT_FRAME_MAX ((size_t)1 << 20)
/* The topic of robot messages in Stream mode. */
#define DT_TOPIC_ROBOT "/v1.0/im/bot/messages/get"

/* One Stream frame: {specVersion, type, headers: {topic, messageId, ...}, data}. */
typedef struct dt_frame {
    char type[16];                  /* SYSTEM | EVENT | CALLBACK */
    char topic[128];                /* headers.topic */
    char message_id[CH_ID_MAX + 1]; /* headers.messageId ("" when none) */
    json_t *headers;                /* the headers object (owned) */
    char *data;                     /* the data string (owned; "" when none) */
} dt_frame;

/* Parses one frame (len bytes of JSON). FAWN_EINVAL (FAWN_E2BIG past
 * DT_FRAME_MAX) for anything else. Clear with dt_frame_clear. */
FAWN_MUST_CHECK int dt_frame_parse(dt_frame *out, const char *text, size_t len);
void dt_frame_clear(dt_frame *f);

/* Parses a robot message callback's data (JSON text) into a normalized
 * message: text, picture, richText (text parts joined, inline pictures as
 * image attachments "image_<n>.png"), file (downloadCode, fileName);
 * other types become a short text saying the type is not read. reply_ctx
 * gets {"conversationId", "conversationType", "senderStaffId",
 * "robotCode"}. FAWN_EINVAL for a payload without its ids. */
FAWN_MUST_CHECK int dt_message_parse(ch_inbound **out, const char *data, size_t len);

/* The adapter's configuration (channels.dingtalk, runtime settings win). */
typedef struct dt_config {
    char *client_id, *client_secret, *robot_code, *card_template_id;
    char *api_base;               /* https://api.dingtalk.com */
    char *oapi_base;              /* https://oapi.dingtalk.com (media upload) */
    bool allow_insecure;          /* http:// bases and ws:// endpoints (tests on loopback) */
    net_allowlist download_allow; /* where download URLs may point besides public addresses */
} dt_config;

typedef struct dt dt;

/* The Stream connection (dingtalk_stream.c). */
typedef struct dt_stream dt_stream;
FAWN_MUST_CHECK int dt_stream_start(dt_stream **out, dt *d, const ch_sink *sink);
void dt_stream_stop(dt_stream *s);

/* For the stream: POST {api}/v1.0/gateway/connections/open → endpoint and
 * ticket (malloc'd). */
FAWN_MUST_CHECK int dt_connection_open(char **endpoint, char **ticket, dt *d);
const dt_config *dt_cfg(const dt *d);

#endif
