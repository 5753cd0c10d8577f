/* What the model's files share with its tests and fuzz targets; no other
 * module includes this. */
#ifndef FAWN_MODEL_INTERNAL_H
#define FAWN_MODEL_INTERNAL_H

#include "model/model.h"

/* A response as the server sent it: its status, its header lines (the
 * status line first, each ending in LF or CRLF) and its body. */
typedef struct model_response {
    long status;
    const char *head;
    size_t head_len;
    const char *body;
    size_t body_len;
} model_response;

/* What model_attempt makes of resp once it has arrived whole, without the
 * network: the header lines and the body go through the same callbacks a
 * transfer feeds (Retry-After, retry-after-ms, the error body of a failed
 * status, the SSE stream of chat-completion chunks of a successful one),
 * and the outcome is decided the same way. The contract of model_attempt
 * applies to out, why and retry_after_ms; on_delta (may be NULL) gets the
 * streamed text. cfg needs only its name. */
FAWN_MUST_CHECK int model_response_read(model_reply *out, enum model_failure *why,
                                        int64_t *retry_after_ms, const model_config *cfg,
                                        const model_response *resp, model_delta_fn on_delta,
                                        void *ctx);

#endif
