/* What the providers that place boxes outside this process's namespaces
 * share (remote.c, container.c, kubernetes.c): watching a start's cancel
 * while waiting, and judging a box's answer to GET /v1/sandbox. Internal to
 * src/sandbox. */
#ifndef FAWN_SANDBOX_PLACEMENT_H
#define FAWN_SANDBOX_PLACEMENT_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sandbox/manager.h"

/* How often a wait looks at its cancel flag: a cancelled start stops
 * within this, and a waiting thread wakes 20 times a second at most. */
#define PLACEMENT_SLICE_MS 50

/* True when cancel (may be NULL) is set. */
bool placement_cancelled(const sbx_cancel *cancel);

/* Sets and returns FAWN_ECANCELED for a start that was cancelled. */
int placement_cancelled_err(void);

/* s is exactly len lowercase hex digits. */
bool placement_hex_valid(const char *s, size_t len);

/* Sleeps ms, never past deadline (fawn_now_ms), watching cancel (may be
 * NULL): FAWN_ECANCELED once it is set, else 0. */
int placement_pause(int ms, int64_t deadline, const sbx_cancel *cancel);

/* Judges a box's answer to GET /v1/sandbox: r and status as box_call gave
 * them, reply its body (NULL is fine). 0 when the box is ready, and then,
 * when generation is not NULL, the generation it tells is copied there;
 * FAWN_EPROTO when it refused the token or told no valid generation (asked
 * for); FAWN_EIO when it answered another status or is not ready; r itself
 * when the call failed. generation (when not NULL) is "" on every error. */
int placement_box_answer(char generation[SBX_GENERATION_LEN + 1], int r, int status,
                         const json_t *reply);

#endif
