/* fawn broker-call <name> [args...]: the credential broker's shim, run by
 * SBX_BROKER_MOUNT/bin/<name> inside a sandbox (src/broker/broker.h). */
#include <stdio.h>
#include <unistd.h>

#include "broker/broker.h"
#include "cli/cli.h"

int cli_broker_call(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: fawn broker-call <command> [arguments...]\n");
        return 2;
    }
    return broker_shim_main(SBX_BROKER_MOUNT "/broker.sock", argv[1], argv + 2,
                            (size_t)(argc - 2), STDIN_FILENO, STDOUT_FILENO, STDERR_FILENO);
}
