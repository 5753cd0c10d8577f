/* fawn broker-call <name> [args...]: the credential broker's shim, run by
 * SBX_BROKER_MOUNT/bin/<name> inside a sandbox (src/broker/broker.h). */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "broker/broker.h"
#include "cli/cli.h"

int cli_broker_call(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fawn broker-call <command> [arguments...]\n");
        return 2;
    }
    int code = broker_shim_main(SBX_BROKER_MOUNT "/broker.sock", argv[1], argv + 2,
                                (size_t)(argc - 2), STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO);
    /* Ends without exit handlers: everything went out through write(2), and
     * an exit-time check (a sanitizer's leak check, which needs ptrace) must
     * not change the code the CLI's caller reads. */
    _exit(code);
}
