/* libFuzzer target for the channel layer's stored message reader
 * (ch_inbound_from_json: what the inbox holds across restarts) and its
 * command parser. Besides memory errors, it checks that only 0 and
 * FAWN_EINVAL are returned, that an accepted message has its ids and
 * bounded attachments, and that a connect code, when one is read, is
 * CH_CODE_LEN characters of its alphabet. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "channels/channels_internal.h"
#include "fuzz_support.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    ch_inbound *m = NULL;
    int r = ch_inbound_from_json(&m, (const char *)data, size);
    check(r == 0 || r == FAWN_EINVAL);
    if (r == 0) {
        check(m->event_id && m->chat_id && m->sender_id && m->text);
        check(m->n_attachments <= CH_ATTACHMENTS_MAX);
        ch_inbound_free(m);
    }
    char *text = malloc(size + 1);
    check(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';
    const char *arg;
    enum ch_command cmd = ch_command_parse(&arg, text);
    check(cmd >= CH_CMD_NONE && cmd <= CH_CMD_HELP && arg);
    char code[CH_CODE_LEN + 1];
    if (ch_connect_code_parse(code, arg) == 0)
        check(strlen(code) == CH_CODE_LEN && strspn(code, CH_CODE_ALPHABET) == CH_CODE_LEN);
    free(text);
    return 0;
}
