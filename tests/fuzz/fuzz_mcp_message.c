/* libFuzzer target for the MCP JSON-RPC reader (mcp_msg_parse). Besides
 * memory errors, it checks that
 * - only 0, FAWN_EPROTO and FAWN_E2BIG are returned, and nothing is kept
 *   on failure;
 * - an accepted message has exactly the shape its kind says (an integer
 *   or string id where one is needed, a result object, an error's message);
 * - an accepted message written back and read again is the same kind. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "mcp/mcp.h"
#include "base/base.h"

static void check(int ok) {
    if (!ok)
        abort();
}

static void check_shape(const mcp_msg *m) {
    switch (m->kind) {
    case MCP_MSG_REQUEST:
        check(m->method && *m->method && (json_is_integer(m->id) || json_is_string(m->id)));
        break;
    case MCP_MSG_NOTIFICATION: check(m->method && *m->method && !m->id); break;
    case MCP_MSG_RESULT: check(json_is_object(m->result) && m->id); break;
    case MCP_MSG_ERROR: check(m->error_msg && m->id && !m->result); break;
    default: check(0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mcp_msg m;
    int r = mcp_msg_parse(&m, (const char *)data, size);
    check(r == 0 || r == FAWN_EPROTO || r == FAWN_E2BIG);
    if (r < 0) {
        check(m.root == NULL);
        return 0;
    }
    check_shape(&m);
    char *again = json_dumps(m.root, JSON_COMPACT);
    check(again != NULL);
    mcp_msg m2;
    check(mcp_msg_parse(&m2, again, strlen(again)) == 0);
    check(m2.kind == m.kind);
    mcp_msg_clear(&m2);
    free(again);
    mcp_msg_clear(&m);
    return 0;
}
