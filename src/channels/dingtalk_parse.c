/* DingTalk payload parsers (dingtalk_internal.h): Stream frames and robot
 * message callbacks, as the platform documents them. Everything here is
 * untrusted input: sizes bounded, types checked, nothing assumed. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "channels/dingtalk_internal.h"

/* Parts of a richText message read at most. */
#define DT_RICH_PARTS_MAX 64

void dt_frame_clear(dt_frame *f) {
    json_decref(f->headers);
    free(f->data);
    memset(f, 0, sizeof *f);
}

/* Copies a string member of o into dst (size bytes); "" when absent. */
static int copy_member(char *dst, size_t size, const json_t *o, const char *key) {
    dst[0] = '\0';
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v) || json_string_length(v) >= size ||
        strlen(json_string_value(v)) != json_string_length(v))
        return fawn_err(FAWN_EINVAL, "frame field %s is not a short string", key);
    memcpy(dst, json_string_value(v), json_string_length(v) + 1);
    return 0;
}

int dt_frame_parse(dt_frame *out, const char *text, size_t len) {
    memset(out, 0, sizeof *out);
    if (len > DT_FRAME_MAX)
        return fawn_err(FAWN_E2BIG, "a stream frame larger than %zu bytes", DT_FRAME_MAX);
    json_t *o = NULL;
    int r = fjson_parse_object(&o, text, len);
    if (r < 0)
        return r;
    const json_t *headers = json_object_get(o, "headers");
    const json_t *data = json_object_get(o, "data");
    if (!json_is_object(headers))
        r = fawn_err(FAWN_EINVAL, "a stream frame without headers");
    if (r == 0 && data && !json_is_string(data) && !json_is_null(data))
        r = fawn_err(FAWN_EINVAL, "a stream frame whose data is not a string");
    if (r == 0)
        r = copy_member(out->type, sizeof out->type, o, "type");
    if (r == 0)
        r = copy_member(out->topic, sizeof out->topic, headers, "topic");
    if (r == 0)
        r = copy_member(out->message_id, sizeof out->message_id, headers, "messageId");
    if (r == 0 && !out->type[0])
        r = fawn_err(FAWN_EINVAL, "a stream frame without a type");
    if (r == 0) {
        out->headers = json_incref((json_t *)headers);
        out->data = strdup(json_is_string(data) ? json_string_value(data) : "");
        if (!out->data)
            r = fawn_err(FAWN_ENOMEM, "out of memory");
    }
    json_decref(o);
    if (r < 0)
        dt_frame_clear(out);
    return r;
}

/* A string member of o, NULL unless a string of at most max bytes without NUL. */
static const char *str_member(const json_t *o, const char *key, size_t max) {
    const json_t *v = json_object_get(o, key);
    if (!json_is_string(v) || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v))
        return NULL;
    return json_string_value(v);
}

static int dup_into(char **dst, const char *s) {
    *dst = s ? strdup(s) : NULL;
    return !s || *dst ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Appends s to text (a growing fbuf), up to CH_TEXT_MAX (cut beyond). */
static int text_add(fbuf *text, const char *s) {
    if (!s || !s[0])
        return 0;
    size_t room = CH_TEXT_MAX > text->len ? CH_TEXT_MAX - text->len : 0;
    size_t n = strlen(s);
    if (n > room)
        n = fawn_utf8_char_start(s, room);
    return n ? fbuf_append(text, s, n) : 0;
}

/* The download code of a picture content object: downloadCode, or the
 * older pictureDownloadCode. */
static const char *picture_code(const json_t *content) {
    const char *code = str_member(content, "downloadCode", CH_ID_MAX);
    return code && code[0] ? code : str_member(content, "pictureDownloadCode", CH_ID_MAX);
}

static int parse_rich(ch_inbound *m, fbuf *text, const json_t *content) {
    const json_t *parts = json_object_get(content, "richText");
    if (!json_is_array(parts))
        return fawn_err(FAWN_EINVAL, "a richText message without its parts");
    size_t i, images = 0;
    const json_t *part;
    json_array_foreach(parts, i, part) {
        if (i >= DT_RICH_PARTS_MAX)
            break;
        if (!json_is_object(part))
            continue;
        const char *t = str_member(part, "text", DT_FRAME_MAX);
        const char *type = str_member(part, "type", 32);
        const char *code = picture_code(part);
        int r = 0;
        if (t)
            r = text_add(text, t);
        else if (code && code[0] && (!type || strcmp(type, "picture") == 0)) {
            char name[32];
            snprintf(name, sizeof name, "image_%zu.png", ++images);
            r = ch_inbound_add_attachment(m, CH_ATTACH_IMAGE, name, code);
            if (r == FAWN_E2BIG)
                r = 0; /* the rest are not taken */
        }
        if (r < 0)
            return r;
    }
    return 0;
}

/* Reads the content of m's type into text and attachments. */
static int parse_content(ch_inbound *m, fbuf *text, const json_t *o, const char *type) {
    const json_t *content = json_object_get(o, "content");
    if (strcmp(type, "text") == 0)
        return text_add(text, str_member(json_object_get(o, "text"), "content", DT_FRAME_MAX));
    if (strcmp(type, "picture") == 0) {
        const char *code = picture_code(content);
        if (!code || !code[0])
            return fawn_err(FAWN_EINVAL, "a picture message without its download code");
        return ch_inbound_add_attachment(m, CH_ATTACH_IMAGE, "image.png", code);
    }
    if (strcmp(type, "richText") == 0)
        return parse_rich(m, text, content);
    if (strcmp(type, "file") == 0) {
        const char *code = str_member(content, "downloadCode", CH_ID_MAX);
        const char *name = str_member(content, "fileName", CH_NAME_MAX);
        if (!code || !code[0])
            return fawn_err(FAWN_EINVAL, "a file message without its download code");
        return ch_inbound_add_attachment(m, CH_ATTACH_FILE, name && name[0] ? name : "file.bin",
                                         code);
    }
    char note[80];
    snprintf(note, sizeof note, "(a %.32s message, which this bot cannot read)", type);
    return text_add(text, note);
}

static int reply_ctx_make(ch_inbound *m, const json_t *o) {
    const char *robot = str_member(o, "robotCode", CH_ID_MAX);
    const char *staff = str_member(o, "senderStaffId", CH_ID_MAX);
    json_t *ctx = json_pack("{s:s, s:s, s:s?, s:s?}", "conversationId", m->chat_id,
                            "conversationType", m->is_group ? "2" : "1", "senderStaffId", staff,
                            "robotCode", robot);
    m->reply_ctx = ctx ? fjson_dump(ctx) : NULL;
    json_decref(ctx);
    return m->reply_ctx ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int parse_message(ch_inbound *m, const json_t *o) {
    const char *msg_id = str_member(o, "msgId", CH_ID_MAX);
    const char *conv = str_member(o, "conversationId", CH_ID_MAX);
    const char *conv_type = str_member(o, "conversationType", 8);
    const char *staff = str_member(o, "senderStaffId", CH_ID_MAX);
    const char *sender = staff && staff[0] ? staff : str_member(o, "senderId", CH_ID_MAX);
    const char *type = str_member(o, "msgtype", 32);
    if (!msg_id || !msg_id[0] || !conv || !conv[0] || !sender || !sender[0] || !type || !type[0])
        return fawn_err(FAWN_EINVAL, "a robot message without msgId, conversationId, sender "
                                     "or msgtype");
    m->is_group = conv_type && strcmp(conv_type, "2") == 0;
    int r = dup_into(&m->event_id, msg_id);
    if (r == 0)
        r = dup_into(&m->message_id, msg_id);
    if (r == 0)
        r = dup_into(&m->chat_id, conv);
    if (r == 0)
        r = dup_into(&m->sender_id, sender);
    if (r == 0)
        r = dup_into(&m->sender_name, str_member(o, "senderNick", CH_NAME_MAX));
    fbuf text = {.limit = CH_TEXT_MAX + 1};
    if (r == 0)
        r = parse_content(m, &text, o, type);
    if (r == 0) {
        m->text = text.data ? fbuf_steal(&text) : strdup("");
        r = m->text ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    }
    fbuf_free(&text);
    if (r == 0 && m->text[0] && !fawn_utf8_valid(m->text, strlen(m->text)))
        r = fawn_err(FAWN_EINVAL, "a robot message whose text is not UTF-8");
    if (r == 0)
        r = reply_ctx_make(m, o);
    return r;
}

int dt_message_parse(ch_inbound **out, const char *data, size_t len) {
    *out = NULL;
    if (len > DT_FRAME_MAX)
        return fawn_err(FAWN_E2BIG, "a robot message larger than %zu bytes", DT_FRAME_MAX);
    json_t *o = NULL;
    ch_inbound *m = NULL;
    int r = fjson_parse_object(&o, data, len);
    if (r == 0)
        r = ch_inbound_new(&m);
    if (r == 0)
        r = parse_message(m, o);
    json_decref(o);
    if (r < 0) {
        ch_inbound_free(m);
        return r;
    }
    *out = m;
    return 0;
}
