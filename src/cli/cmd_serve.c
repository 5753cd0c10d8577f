/* fawn serve: the application core on its store, and the gateway in front
 * of it, until SIGTERM or SIGINT. */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "app/app.h"
#include "channels/channels.h"
#include "base/base.h"
#include "cli/cli.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "store/store.h"

static void usage(FILE *out) {
    fprintf(out, "usage: fawn serve [--config FILE]\n\n"
                 "Runs the gateway on server.host:server.port (default 127.0.0.1:8001) with\n"
                 "its store at $FAWN_HOME/fawn.db (or on PostgreSQL: store.backend). SIGTERM\n"
                 "or SIGINT stops it once the requests in progress have finished.\n");
}

static int parse_args(const char **config, int argc, char **argv) {
    static const struct option opts[] = {
        {"config", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    *config = NULL;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': *config = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: return fawn_err(FAWN_EINVAL, "unknown option");
        }
    }
    return optind == argc ? 0 : fawn_err(FAWN_EINVAL, "unexpected argument '%s'", argv[optind]);
}

/* Serves until a stop signal arrives. The signals are blocked before any
 * thread starts, so only this sigwait ever sees them. */
static int serve(const fawn_config *cfg) {
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGTERM);
    sigaddset(&stop, SIGINT);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    store *st = NULL;
    app *a = NULL;
    gateway *g = NULL;
    channels *ch = NULL;
    int r = cli_store_open(&st, cfg);
    if (r == 0)
        r = app_open(&a, cfg, st);
    if (r == 0)
        r = channels_open(&ch, a);
    if (r == 0)
        r = gateway_start(&g, a);
    if (r == 0) {
        gateway_set_channels(g, ch);
        r = channels_start(ch);
    }
    if (r == 0) {
        log_info("serve", "listening on http://%s:%u", cfg->server.host, cfg->server.port);
        int sig;
        sigwait(&stop, &sig);
        log_info("serve", "stopping (%s)", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    }
    gateway_quiesce(g); /* no new requests */
    channels_stop(ch);  /* no new chat message */
    app_stop(a);        /* runs end as interrupted; their followers get their last events */
    gateway_stop(g);    /* the requests in progress finish */
    channels_free(ch);  /* its workers have followed their runs to the end */
    app_close(a);
    store_close(st);
    return r;
}

int cli_serve(int argc, char **argv) {
    const char *config_path;
    fawn_config cfg = {0};
    int r = parse_args(&config_path, argc, argv);
    if (r < 0) {
        fprintf(stderr, "fawn serve: %s\n", fawn_errmsg());
        usage(stderr);
        return 2;
    }
    r = config_load(&cfg, config_path);
    if (r == 0)
        r = serve(&cfg);
    if (r < 0)
        fprintf(stderr, "fawn serve: %s\n", fawn_errmsg());
    config_free(&cfg);
    return r < 0 ? 1 : 0;
}
