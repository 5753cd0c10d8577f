/* fawn mcp discover | drift: an administrator's explicit discovery of an
 * MCP server's tools from the shell (what POST
 * /api/mcp/servers/{name}/discover does), and the drift a server showed
 * since. Writes to the store the gateway uses; a running gateway offers
 * the new pins from its next run. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "config/config.h"
#include "mcp/mcp.h"
#include "store/store.h"

static void usage(FILE *out) {
    fprintf(out, "usage: fawn mcp discover NAME [--config FILE]\n"
                 "       fawn mcp drift NAME [--config FILE]\n\n"
                 "discover runs initialize and tools/list on the MCP server NAME and pins what\n"
                 "it lists (name, description, input schema and their hash): runs offer only\n"
                 "pinned tools, and withhold one its server later lists differently.\n"
                 "drift shows the pinned tools and what changed since.\n"
                 "A stdio server runs in a sandbox, which only the gateway has: discover\n"
                 "it with POST /api/mcp/servers/NAME/discover.\n");
}

static int mcp_run(const char *command, const char *name, const fawn_config *cfg) {
    store *st = NULL;
    mcp_service *svc = NULL;
    json_t *out = NULL;
    int r = cli_store_open(&st, cfg);
    if (r == 0)
        r = mcp_service_open(&svc, cfg->mcp, st, cfg->home);
    if (r == 0)
        r = strcmp(command, "discover") == 0 ? mcp_discover(&out, svc, name, NULL)
                                             : mcp_drift(&out, svc, name);
    if (r == 0) {
        char *text = json_dumps(out, JSON_INDENT(2));
        printf("%s\n", text ? text : "");
        free(text);
    }
    json_decref(out);
    mcp_service_free(svc);
    store_close(st);
    return r;
}

int cli_mcp(int argc, char **argv) {
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    const char *config = NULL;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c != 'c') {
            usage(stderr);
            return 2;
        }
        config = optarg;
    }
    if (argc - optind < 2 ||
        (strcmp(argv[optind], "discover") != 0 && strcmp(argv[optind], "drift") != 0)) {
        usage(stderr);
        return 2;
    }
    const char *command = argv[optind], *name = argv[optind + 1];
    for (optind += 2; optind < argc; optind++) {
        if (strcmp(argv[optind], "--config") == 0 && optind + 1 < argc)
            config = argv[++optind];
        else {
            usage(stderr);
            return 2;
        }
    }
    fawn_config cfg = {0};
    int r = config_load(&cfg, config);
    if (r == 0)
        r = mcp_run(command, name, &cfg);
    if (r < 0)
        fprintf(stderr, "fawn mcp: %s\n", fawn_errmsg());
    config_free(&cfg);
    return r < 0 ? 1 : 0;
}
