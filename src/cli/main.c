/* fawn: dispatches to one subcommand; each lives in its own file. */
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "cli/cli.h"

static const struct {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
} commands[] = {
    {"serve", cli_serve, "run the gateway: the HTTP API (docs/http-api.md)"},
    {"chat", cli_chat, "talk to the lead agent of a running gateway, streaming its run"},
    {"user", cli_user, "manage users (add)"},
    {"mcp", cli_mcp, "pin an MCP server's tools (discover) or show their drift"},
    {"sandbox", cli_sandbox, "run commands in a thread's sandbox (exec, stop)"},
    {"box", cli_box, "serve the box API over TCP, in its own sandbox (remote placement)"},
    {"broker-call", cli_broker_call, "inside a sandbox: run a brokered CLI (broker.clis)"},
    {"doctor", cli_doctor, "report which isolation features this host supports"},
};

static void usage(FILE *out) {
    fprintf(out, "usage: fawn <command> [options]\n\ncommands:\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        fprintf(out, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(out, "\nRun 'fawn <command> --help' for a command's options.\n");
}

int main(int argc, char **argv) {
    if (sodium_init() < 0) {
        fprintf(stderr, "fawn: libsodium could not be initialized\n");
        return 1;
    }
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "fawn: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return 2;
}
