/* The gateway: fawn's HTTP API (docs/http-api.md), served with
 * libmicrohttpd (epoll, a pool of threads). gateway_start sets *out on
 * every path (NULL when it fails). */
#ifndef FAWN_GATEWAY_H
#define FAWN_GATEWAY_H

#include "app/app.h"
#include "base/base.h"

typedef struct gateway gateway;

/* Starts serving the app's HTTP API on server.host:port of its
 * configuration, with server.threads threads. The app is borrowed and
 * must outlive the gateway. Returns 0 or FAWN_EINVAL (bad address),
 * FAWN_EIO (cannot listen), FAWN_ECONFIG (bad server or auth settings).
 * Stop with gateway_quiesce, then gateway_stop. */
FAWN_MUST_CHECK int gateway_start(gateway **out, app *a);

/* Serves /api/channels from ch (borrowed; NULL: those routes answer 404).
 * Call it before requests can reach them, or with no request in flight. */
struct channels;
void gateway_set_channels(gateway *g, struct channels *ch);

/* Stops accepting connections; requests in progress go on. Stopping the
 * app's runs next (app_stop) ends the streams that follow them. NULL is
 * fine. */
void gateway_quiesce(gateway *g);

/* Waits for the requests in progress (at most 30 s),
 * stops serving and frees g (NULL is fine). */
void gateway_stop(gateway *g);

#endif
