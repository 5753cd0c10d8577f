/* libFuzzer target for what a client sends as a run's input, and what the
 * replay model hashes. The input is taken as JSON (any text); when it parses,
 * it goes through agent_input_messages (a list of human messages, or a
 * refusal) and model_conversation_hash (the normalizer of stored
 * conversations: UUIDs, dates, timestamps). Besides memory errors, it checks
 * that
 * - agent_input_messages returns 0 with a list of human messages as long as
 *   the input list, or FAWN_EINVAL with no list;
 * - the hash is 64 lowercase hex digits, and the same for the input and for
 *   the messages made from it when every message was kept (ids and keys
 *   other than type and content are not hashed). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536

static void check(int ok) {
    if (!ok)
        abort();
}

static void check_hash(const char hash[65]) {
    check(strlen(hash) == 64);
    check(strspn(hash, "0123456789abcdef") == 64);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    json_t *in = json_loadb((const char *)data, size, JSON_DECODE_ANY, NULL);
    if (!in)
        return 0;
    json_t *out = NULL;
    int r = agent_input_messages(&out, in);
    check(r == 0 || r == FAWN_EINVAL || r == FAWN_ENOMEM);
    char a[65], b[65];
    if (r == 0) {
        check(json_is_array(out));
        check(json_array_size(out) == json_array_size(in));
        size_t i;
        json_t *m;
        json_array_foreach(out, i, m) {
            check(strcmp(json_string_value(json_object_get(m, "type")), "human") == 0);
        }
        check(model_conversation_hash(a, out) == 0);
        check_hash(a);
    } else {
        check(out == NULL);
    }
    if (json_is_array(in) && model_conversation_hash(b, in) == 0)
        check_hash(b);
    json_decref(out);
    json_decref(in);
    return 0;
}
