/* libFuzzer target for the Feishu/Lark open platform's answers
 * (feishu_reply_check, feishu_token_reply_parse, feishu_data_id_parse):
 * untrusted bytes from the platform (or whatever answers at api_base).
 * Input: the first byte picks the parser (low two bits) and the HTTP status
 * (the next four, from `statuses`); the rest is the body. Besides memory
 * errors and undefined behaviour, it checks: a known error code; nothing
 * handed out on failure; on success a token that can go into a header (no
 * control characters, bounded) and ids that pass feishu_id_valid. */
#include <jansson.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "channels/feishu_internal.h"
#include "fuzz_support.h"

static const long statuses[16] = {200, 200, 200, 201, 400, 401, 403, 404,
                                  413, 429, 500, 502, 503, 302, 0,   204};

static void check_code(int r) {
    check(r == 0 || r == FAWN_EPERM || r == FAWN_EBUSY || r == FAWN_E2BIG || r == FAWN_ENOENT ||
          r == FAWN_EPROTO || r == FAWN_ENOMEM);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1)
        return 0;
    long status = statuses[(data[0] >> 2) & 15];
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    int r = 0;
    switch (data[0] & 3) {
    case 0: {
        json_t *o = NULL;
        r = feishu_reply_check(&o, "fuzz", status, body, len);
        check(r == 0 ? json_is_object(o) : o == NULL);
        json_decref(o);
        break;
    }
    case 1: {
        char *token = NULL;
        int64_t expire = -1;
        r = feishu_token_reply_parse(&token, &expire, status, body, len);
        if (r == 0) {
            check(token && *token && expire > 0);
            for (const char *p = token; *p; p++)
                check((unsigned char)*p > ' ' && (unsigned char)*p < 0x7f);
        } else {
            check(!token && expire == 0);
        }
        free(token);
        break;
    }
    default: {
        char *id = NULL;
        r = feishu_data_id_parse(&id, "fuzz", (data[0] & 3) == 2 ? "message_id" : "file_key",
                                 status, body, len);
        check(r == 0 ? feishu_id_valid(id) : id == NULL);
        free(id);
        break;
    }
    }
    check_code(r);
    return 0;
}
