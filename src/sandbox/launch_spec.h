/* A local_launch_spec crossing an exec, as JSON (private to src/sandbox and
 * the launch helper subcommand). */
#ifndef FAWN_SANDBOX_LAUNCH_SPEC_H
#define FAWN_SANDBOX_LAUNCH_SPEC_H

#include <jansson.h>

#include "box/attest.h"
#include "sandbox/local.h"
#include "base/base.h"

/* The spec with the storage its pointers refer to. */
typedef struct launch_spec_copy {
    local_launch_spec spec;
    fawn_config cfg;
    char *sandbox_id, *user_data, *token, *broker_dir;
    box_attest attest; /* spec.attest points here when the spec had one */
    char generation[33];
} launch_spec_copy;

/* Everything of s but its descriptors and netns pool (new reference). */
json_t *launch_spec_to_json(const local_launch_spec *s);

/* Rebuilds a spec (descriptors left 0: the caller sets them). FAWN_EINVAL on
 * a malformed text. Free with launch_spec_free. */
FAWN_MUST_CHECK int launch_spec_from_json(launch_spec_copy *out, const char *json, size_t len);

void launch_spec_free(launch_spec_copy *s);

#endif
