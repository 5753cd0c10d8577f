/* channels: the IM front-ends of the application core. A message from a
 * chat starts a run through app_run_start exactly as the HTTP API does, as
 * the fawn user the chat user is bound to, with that user's role.
 *
 * The shared layer (channels.c) owns: bindings made with one-time connect
 * codes, the thread of each conversation (per chat; per chat and sender in
 * groups), the commands (/connect /new /status /models /help), the inbox
 * (every inbound event recorded once in the store: redeliveries are
 * dropped; messages wait there while their conversation's run is active
 * and survive a restart; each is claimed and run once), attachments
 * (downloaded with a cap, safely named, written with the upload writer,
 * copied into the sandbox where needed), replies streamed where the
 * platform can update a message, artifacts sent as files, and the
 * runtime credentials saved through the API. Each platform is an adapter
 * (platform.h).
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_CHANNELS_H
#define FAWN_CHANNELS_H

#include <jansson.h>

#include "app/app.h"
#include "base/base.h"
#include "channels/platform.h"

typedef struct channels channels;

/* Builds the layer over the app (borrowed; must outlive it): validates
 * the shared keys of the `channels` config section, and builds every
 * known adapter whose platform is configured (in config or by saved
 * runtime settings). Nothing connects yet. FAWN_ECONFIG naming the bad key. */
FAWN_MUST_CHECK int channels_open(channels **out, app *a);

/* Recovers the inbox a previous process left (an item claimed and not
 * finished: its run, when one started, is taken as its answer; else it is
 * queued again), starts the workers and every adapter. */
FAWN_MUST_CHECK int channels_start(channels *c);

/* Stops the adapters (no new message) and tells the workers to take no
 * new item; a worker following a run goes on until the run ends (stop the
 * app's runs, app_stop, to end them). Idempotent; does not wait. */
void channels_stop(channels *c);

/* channels_stop, waits for the workers, then frees everything. NULL is fine. */
void channels_free(channels *c);

/* ---- what the HTTP routes call ---- */

/* GET /api/channels/: {"channels": {NAME: {"configured", "enabled",
 * "running", "state", "detail", "settings": {KEY: value, or true for a
 * set secret}}}} for every known platform. Never a secret. */
FAWN_MUST_CHECK int channels_status(json_t **out, channels *c);

/* POST /api/channels/{provider}/connect: a new one-time connect code of
 * user for provider: {"code", "expires_in", "instruction"}. FAWN_ENOENT
 * for an unknown provider; FAWN_E2BIG when the user has too many codes
 * waiting. */
FAWN_MUST_CHECK int channels_connect_code(json_t **out, channels *c, const store_user *user,
                                          const char *provider);

/* GET /api/channels/connections: {"connections": [{"id", "provider",
 * "platform_user_id", "created_at"}]} of user. */
FAWN_MUST_CHECK int channels_connections(json_t **out, channels *c, const store_user *user);

/* DELETE /api/channels/connections/{id}: user's binding id.
 * FAWN_ENOENT for an id the user does not hold. */
FAWN_MUST_CHECK int channels_unbind(channels *c, const store_user *user, const char *id);

/* POST /api/channels/{provider}/runtime-config: saves the settings (only
 * the keys the platform lists, string values) and (re)starts the platform
 * with them; *out is its status as in channels_status (secrets shown as
 * set). DELETE (settings NULL): forgets them and restarts the platform
 * from config alone (stopped when that does not configure it).
 * FAWN_ENOENT for an unknown provider (or nothing saved, on DELETE),
 * FAWN_EINVAL naming a bad key or value, FAWN_ECONFIG when the platform
 * refuses them (nothing saved). */
FAWN_MUST_CHECK int channels_runtime_config(json_t **out, channels *c, const char *provider,
                                            const json_t *settings);

/* POST /api/channels/{provider}/events: hands the raw request to the
 * platform's adapter (handle_http), records and queues the messages it
 * yields, and fills *resp (caller frees its body and content_type).
 * FAWN_ENOENT when the platform is unknown, not running, or not one that
 * takes callbacks. */
FAWN_MUST_CHECK int channels_http_event(ch_http_response *resp, channels *c, const char *provider,
                                        const ch_http_request *req);

#endif
