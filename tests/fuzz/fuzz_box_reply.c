/* libFuzzer target for the sandbox manager's reader of box replies
 * (src/sandbox/client.c): everything a box sends comes from inside a
 * sandbox. Input: the bytes the "box" answers on the connection, which then
 * closes. Besides memory errors and undefined behaviour, it checks that
 * - a success hands out a JSON reply and an HTTP status of 100 … 599;
 * - a failure hands out no reply and status 0, and never claims the
 *   connection can carry another request. */
#include <stdint.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/base.h"
#include "sandbox/client.h"

/* Far past a socketpair's buffer would block the write below. */
#define FUZZ_INPUT_MAX (64 * 1024)
/* The reply is all there before the call: only a reader bug could wait. */
#define FUZZ_CALL_MS 5000

static void check(int ok) {
    if (!ok)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > FUZZ_INPUT_MAX)
        return 0;
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0)
        abort();
    check(fawn_write_all(sv[1], data, size) == 0);
    shutdown(sv[1], SHUT_WR);
    json_t *reply = (json_t *)1;
    int status = -1;
    bool keep_alive = true;
    int r = box_fd_call(&reply, &status, &keep_alive, sv[0], NULL, "GET", "/v1/sandbox", NULL,
                        fawn_now_ms() + FUZZ_CALL_MS);
    if (r == 0)
        check(reply != NULL && status >= 100 && status <= 599);
    else
        check(reply == NULL && status == 0 && !keep_alive);
    json_decref(reply);
    close(sv[0]);
    close(sv[1]);
    return 0;
}
