/* The gateway: fawn's HTTP API (docs/http-api.md), served with
 * libmicrohttpd (epoll, a pool of threads). gateway_start sets *out on
 * every path (NULL when it fails). */
#ifndef FAWN_GATEWAY_H
#define FAWN_GATEWAY_H

#include "config/config.h"
#include "store/store.h"

typedef struct gateway gateway;

/* Starts serving on cfg->server.host:port with cfg->server.threads threads.
 * cfg and st are borrowed and must outlive the gateway. Returns 0 or
 * FAWN_EINVAL (bad address), FAWN_EIO (cannot listen). Stop with gateway_stop. */
int gateway_start(gateway **out, const fawn_config *cfg, store *st);

/* Stops accepting connections, lets requests in progress finish, frees g. */
void gateway_stop(gateway *g);

#endif
