/* libFuzzer target for the DingTalk robot message reader
 * (dt_message_parse: text, picture, richText, file) and the layer's stored
 * form of the message it yields (ch_inbound_to_json / from_json). Besides
 * memory errors, it checks that
 * - only 0, FAWN_EINVAL and FAWN_E2BIG are returned;
 * - an accepted message has its ids, UTF-8 text within CH_TEXT_MAX, at
 *   most CH_ATTACHMENTS_MAX attachments each with a ref, and the name the
 *   layer would store each under is a safe single file name;
 * - its stored form reads back to the same message. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "channels/channels_internal.h"
#include "channels/dingtalk_internal.h"
#include "fuzz_support.h"
#include "paths/paths.h"

static void check_same(const ch_inbound *a, const ch_inbound *b) {
    check(strcmp(a->event_id, b->event_id) == 0 && strcmp(a->chat_id, b->chat_id) == 0);
    check(strcmp(a->sender_id, b->sender_id) == 0 && strcmp(a->text, b->text) == 0);
    check(a->is_group == b->is_group && a->n_attachments == b->n_attachments);
    for (size_t i = 0; i < a->n_attachments; i++) {
        check(a->attachments[i].kind == b->attachments[i].kind);
        check(strcmp(a->attachments[i].ref, b->attachments[i].ref) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ch_inbound *m = NULL;
    int r = dt_message_parse(&m, (const char *)data, size);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_E2BIG);
    if (r < 0) {
        check(m == NULL);
        return 0;
    }
    check(m->event_id && m->chat_id && m->sender_id && m->text && m->reply_ctx);
    check(strlen(m->text) <= CH_TEXT_MAX && fawn_utf8_valid(m->text, strlen(m->text)));
    check(m->n_attachments <= CH_ATTACHMENTS_MAX);
    for (size_t i = 0; i < m->n_attachments; i++) {
        char name[CH_FILE_NAME_MAX + 1];
        check(m->attachments[i].ref && m->attachments[i].ref[0]);
        ch_attachment_name(name, "dingtalk", &m->attachments[i]);
        check(vpath_name_valid(name) && name[0] != '.' && !strchr(name, '/'));
        char marker[CH_MARKER_NAME_MAX + 1];
        ch_marker_name(marker, m->attachments[i].name);
        check(!strpbrk(marker, "[]\n\r"));
    }
    char *stored = NULL;
    check(ch_inbound_to_json(&stored, m) == 0);
    ch_inbound *back = NULL;
    check(ch_inbound_from_json(&back, stored, strlen(stored)) == 0);
    check_same(m, back);
    ch_inbound_free(back);
    free(stored);
    ch_inbound_free(m);
    return 0;
}
