/* The pure parts of the channel layer (channels_internal.h): inbound
 * messages and their stored form, attachment names, commands. No I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "channels/channels_internal.h"
#include "paths/paths.h"

int ch_inbound_new(ch_inbound **out) {
    *out = calloc(1, sizeof **out);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

void ch_inbound_free(ch_inbound *msg) {
    if (!msg)
        return;
    free(msg->event_id);
    free(msg->message_id);
    free(msg->chat_id);
    free(msg->sender_id);
    free(msg->sender_name);
    free(msg->text);
    for (size_t i = 0; i < msg->n_attachments; i++) {
        free(msg->attachments[i].name);
        free(msg->attachments[i].ref);
    }
    free(msg->attachments);
    free(msg->reply_ctx);
    free(msg);
}

int ch_inbound_add_attachment(ch_inbound *msg, enum ch_attach_kind kind, const char *name,
                              const char *ref) {
    if (msg->n_attachments >= CH_ATTACHMENTS_MAX)
        return fawn_err(FAWN_E2BIG, "more than %d attachments", CH_ATTACHMENTS_MAX);
    if (!ref || !ref[0] || strlen(ref) > CH_ID_MAX)
        return fawn_err(FAWN_EINVAL, "an attachment without a valid reference");
    if (name && (!name[0] || strlen(name) > CH_NAME_MAX))
        name = NULL; /* the layer names it from its ref */
    ch_attachment *grown = realloc(msg->attachments,
                                   (msg->n_attachments + 1) * sizeof *msg->attachments);
    if (!grown)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    msg->attachments = grown;
    ch_attachment *a = &msg->attachments[msg->n_attachments];
    a->kind = kind;
    a->ref = strdup(ref);
    a->name = name ? strdup(name) : NULL;
    if (!a->ref || (name && !a->name)) {
        free(a->ref);
        free(a->name);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    msg->n_attachments++;
    return 0;
}

/* ---- stored form ---- */

static int set_opt(json_t *o, const char *key, const char *v) {
    return json_object_set_new(o, key, v ? json_string(v) : json_null());
}

int ch_inbound_to_json(char **out, const ch_inbound *m) {
    *out = NULL;
    json_t *o = json_object(), *files = json_array();
    int bad = !o || !files;
    for (size_t i = 0; !bad && i < m->n_attachments; i++) {
        const ch_attachment *a = &m->attachments[i];
        json_t *f = json_object();
        bad |= !f || json_array_append_new(files, f) < 0;
        bad |= !f || json_object_set_new(
                         f, "kind", json_string(a->kind == CH_ATTACH_IMAGE ? "image" : "file")) < 0;
        bad |= !f || set_opt(f, "name", a->name) < 0 || set_opt(f, "ref", a->ref) < 0;
    }
    if (!bad) {
        bad |= set_opt(o, "event_id", m->event_id) < 0 || set_opt(o, "message_id", m->message_id);
        bad |= set_opt(o, "chat_id", m->chat_id) < 0 || set_opt(o, "sender_id", m->sender_id);
        bad |= set_opt(o, "sender_name", m->sender_name) < 0 || set_opt(o, "text", m->text) < 0;
        bad |= set_opt(o, "reply_ctx", m->reply_ctx) < 0;
        bad |= json_object_set_new(o, "is_group", json_boolean(m->is_group)) < 0;
        bad |= json_object_set(o, "attachments", files) < 0;
    }
    if (!bad)
        *out = fjson_dump(o);
    json_decref(o);
    json_decref(files);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Copies string field key of o into *dst (absent or null: NULL; required:
 * must be there). */
static int field_copy(char **dst, const json_t *o, const char *key, bool required, size_t max) {
    *dst = NULL;
    const json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return required ? fawn_err(FAWN_EINVAL, "stored message without %s", key) : 0;
    if (!json_is_string(v) || json_string_length(v) > max ||
        strlen(json_string_value(v)) != json_string_length(v))
        return fawn_err(FAWN_EINVAL, "stored message with a bad %s", key);
    *dst = strdup(json_string_value(v));
    return *dst ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int files_from_json(ch_inbound *m, const json_t *files) {
    if (files && !json_is_array(files))
        return fawn_err(FAWN_EINVAL, "stored message with bad attachments");
    size_t i;
    const json_t *f;
    json_array_foreach(files, i, f) {
        const char *kind = json_string_value(json_object_get(f, "kind"));
        const char *ref = json_string_value(json_object_get(f, "ref"));
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!kind || (strcmp(kind, "image") != 0 && strcmp(kind, "file") != 0))
            return fawn_err(FAWN_EINVAL, "stored attachment of a bad kind");
        int r = ch_inbound_add_attachment(m, kind[0] == 'i' ? CH_ATTACH_IMAGE : CH_ATTACH_FILE,
                                          name, ref);
        if (r < 0)
            return r;
    }
    return 0;
}

int ch_inbound_from_json(ch_inbound **out, const char *text, size_t len) {
    *out = NULL;
    json_t *o = NULL;
    int r = fjson_parse_object(&o, text, len);
    ch_inbound *m = NULL;
    if (r == 0)
        r = ch_inbound_new(&m);
    if (r == 0)
        r = field_copy(&m->event_id, o, "event_id", true, CH_ID_MAX);
    if (r == 0)
        r = field_copy(&m->message_id, o, "message_id", false, CH_ID_MAX);
    if (r == 0)
        r = field_copy(&m->chat_id, o, "chat_id", true, CH_ID_MAX);
    if (r == 0)
        r = field_copy(&m->sender_id, o, "sender_id", true, CH_ID_MAX);
    if (r == 0)
        r = field_copy(&m->sender_name, o, "sender_name", false, CH_NAME_MAX);
    if (r == 0)
        r = field_copy(&m->text, o, "text", false, CH_TEXT_MAX);
    if (r == 0)
        r = field_copy(&m->reply_ctx, o, "reply_ctx", false, CH_REPLY_CTX_MAX);
    if (r == 0 && !m->text)
        r = (m->text = strdup("")) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0) {
        m->is_group = json_is_true(json_object_get(o, "is_group"));
        r = files_from_json(m, json_object_get(o, "attachments"));
    }
    json_decref(o);
    if (r < 0) {
        ch_inbound_free(m);
        return r;
    }
    *out = m;
    return 0;
}

/* ---- attachment names ---- */

static bool ref_char_ok(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-';
}

/* The fallback name: "<platform>_<last CH_REF_NAME_CHARS allowed chars of
 * ref>.<png|bin>". */
static void fallback_name(char out[CH_FILE_NAME_MAX + 1], const char *platform,
                          const ch_attachment *a) {
    char tail[CH_REF_NAME_CHARS + 1];
    size_t n = 0, len = strlen(a->ref);
    /* the last allowed characters, in order */
    size_t start = len;
    for (size_t k = len; k > 0 && n < CH_REF_NAME_CHARS; k--)
        if (ref_char_ok(a->ref[k - 1])) {
            n++;
            start = k - 1;
        }
    n = 0;
    for (size_t k = start; k < len && n < CH_REF_NAME_CHARS; k++)
        if (ref_char_ok(a->ref[k]))
            tail[n++] = a->ref[k];
    tail[n] = '\0';
    snprintf(out, CH_FILE_NAME_MAX + 1, "%.32s_%s.%s", platform, n ? tail : "attachment",
             a->kind == CH_ATTACH_IMAGE ? "png" : "bin");
}

void ch_attachment_name(char out[CH_FILE_NAME_MAX + 1], const char *platform,
                        const ch_attachment *a) {
    const char *name = a->name ? a->name : "";
    const char *slash = strrchr(name, '/');
    const char *bslash = strrchr(name, '\\');
    if (slash)
        name = slash + 1;
    if (bslash && bslash + 1 > name)
        name = bslash + 1;
    size_t len = strlen(name);
    bool ok = len > 0 && len <= CH_FILE_NAME_MAX && strcmp(name, ".") != 0 &&
              strcmp(name, "..") != 0 && name[0] != '.' && vpath_name_valid(name) &&
              !vpath_is_staging_name(name);
    for (size_t i = 0; ok && i < len; i++)
        ok = (unsigned char)name[i] >= 0x20 && name[i] != 0x7f;
    if (ok)
        snprintf(out, CH_FILE_NAME_MAX + 1, "%s", name);
    else
        fallback_name(out, platform, a);
}

void ch_marker_name(char out[CH_MARKER_NAME_MAX + 1], const char *name) {
    size_t n = 0;
    for (size_t i = 0; name && name[i] && n < CH_MARKER_NAME_MAX;) {
        unsigned char c = (unsigned char)name[i];
        if (c < 0x20 || c == 0x7f || c == '[' || c == ']') {
            out[n++] = '_';
            i++;
            continue;
        }
        /* a whole UTF-8 character, or '_' for an invalid sequence */
        size_t clen = c < 0x80 ? 1 : c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 0;
        if (!clen || !fawn_utf8_valid(name + i, strnlen(name + i, clen)) ||
            strnlen(name + i, clen) < clen) {
            out[n++] = '_';
            i++;
            continue;
        }
        if (n + clen > CH_MARKER_NAME_MAX)
            break;
        memcpy(out + n, name + i, clen);
        n += clen;
        i += clen;
    }
    out[n] = '\0';
}

/* ---- commands ---- */

enum ch_command ch_command_parse(const char **arg, const char *text) {
    *arg = "";
    while (*text == ' ' || *text == '\t' || *text == '\n' || *text == '\r')
        text++;
    if (*text != '/')
        return CH_CMD_NONE;
    static const struct {
        const char *name;
        enum ch_command cmd;
    } table[] = {{"connect", CH_CMD_CONNECT}, {"new", CH_CMD_NEW},   {"status", CH_CMD_STATUS},
                 {"models", CH_CMD_MODELS},   {"help", CH_CMD_HELP}, {"start", CH_CMD_HELP}};
    const char *word = text + 1;
    size_t wlen = strcspn(word, " \t\r\n");
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++) {
        if (strlen(table[i].name) == wlen && strncmp(word, table[i].name, wlen) == 0) {
            const char *rest = word + wlen;
            while (*rest == ' ' || *rest == '\t' || *rest == '\n' || *rest == '\r')
                rest++;
            *arg = rest;
            return table[i].cmd;
        }
    }
    return CH_CMD_UNKNOWN;
}

int ch_connect_code_parse(char out[CH_CODE_LEN + 1], const char *arg) {
    out[0] = '\0';
    size_t n = 0;
    for (const char *c = arg; *c && *c != ' ' && *c != '\t' && *c != '\r' && *c != '\n'; c++) {
        char u = *c >= 'a' && *c <= 'z' ? (char)(*c - 'a' + 'A') : *c;
        if (!strchr(CH_CODE_ALPHABET, u) || n >= CH_CODE_LEN) {
            out[0] = '\0';
            return fawn_err(FAWN_EINVAL, "not a connect code");
        }
        out[n++] = u;
    }
    out[n] = '\0';
    if (n != CH_CODE_LEN) {
        out[0] = '\0';
        return fawn_err(FAWN_EINVAL, "not a connect code");
    }
    return 0;
}

void ch_chat_key(char out[CH_CHAT_KEY_MAX + 1], const ch_inbound *m) {
    if (m->is_group)
        snprintf(out, CH_CHAT_KEY_MAX + 1, "g:%s:%s", m->chat_id, m->sender_id);
    else
        snprintf(out, CH_CHAT_KEY_MAX + 1, "d:%s", m->chat_id);
}
