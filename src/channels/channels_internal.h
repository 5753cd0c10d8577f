/* channels_internal.h: the pure parts of the channel layer (inbound.c),
 * shared by channels.c, its unit tests and its fuzz targets. */
#ifndef FAWN_CHANNELS_INTERNAL_H
#define FAWN_CHANNELS_INTERNAL_H

#include "channels/platform.h"

/* A stored attachment's name at most: the upload rules' limit is larger,
 * this one keeps the agent's message short. */
#define CH_FILE_NAME_MAX 120
/* Characters of an attachment's ref its fallback name keeps (the end of a
 * download code: enough to tell two apart). */
#define CH_REF_NAME_CHARS 12
/* Bytes of a name in a "[failed to load file: NAME]" marker. */
#define CH_MARKER_NAME_MAX 80
/* A conversation's key: "d:CHAT" or "g:CHAT:SENDER". */
#define CH_CHAT_KEY_MAX (2 * CH_ID_MAX + 4)
/* Connect codes: 8 characters of an alphabet without look-alikes
 * (32^8 = 2^40 codes, each valid CH_CODE_TTL_MS and single use). */
#define CH_CODE_LEN 8
#define CH_CODE_ALPHABET "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"

/* The message's stored form (JSON object text, malloc'd) and back.
 * from_json refuses (FAWN_EINVAL) anything but what to_json writes:
 * required ids, sizes within the CH_* bounds. */
FAWN_MUST_CHECK int ch_inbound_to_json(char **out, const ch_inbound *m);
FAWN_MUST_CHECK int ch_inbound_from_json(ch_inbound **out, const char *text, size_t len);

/* The name an attachment is stored under (before it is made unique): the
 * platform's name cut after its last '/' or '\', when that is a valid
 * upload name (vpath_name_valid, not hidden, no control character, at
 * most CH_FILE_NAME_MAX bytes); else "<platform>_<last
 * CH_REF_NAME_CHARS characters of the ref in [A-Za-z0-9_-]>.png|.bin". */
void ch_attachment_name(char out[CH_FILE_NAME_MAX + 1], const char *platform,
                        const ch_attachment *a);

/* name made safe to show in a marker: control characters, brackets and
 * invalid UTF-8 become '_', cut to CH_MARKER_NAME_MAX bytes on a
 * character boundary. */
void ch_marker_name(char out[CH_MARKER_NAME_MAX + 1], const char *name);

enum ch_command {
    CH_CMD_NONE, /* not a command: a message for the agent */
    CH_CMD_UNKNOWN,
    CH_CMD_CONNECT,
    CH_CMD_NEW,
    CH_CMD_STATUS,
    CH_CMD_MODELS,
    CH_CMD_HELP,
};

/* The command text starts with (after blanks), and in *arg what follows
 * it (blanks skipped; "" when nothing). */
enum ch_command ch_command_parse(const char **arg, const char *text);

/* The connect code in arg (its first word, case-folded to upper case):
 * FAWN_EINVAL unless it is CH_CODE_LEN characters of CH_CODE_ALPHABET. */
FAWN_MUST_CHECK int ch_connect_code_parse(char out[CH_CODE_LEN + 1], const char *arg);

/* The conversation m belongs to: per chat, and per sender in a group. */
void ch_chat_key(char out[CH_CHAT_KEY_MAX + 1], const ch_inbound *m);

#endif
