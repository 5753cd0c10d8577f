/* The container provider: one container per sandbox, placed through the
 * Docker Engine API on its unix socket (Docker, or Podman's compatible
 * service), each running `fawn box --listen unix:/run/fawn/box.sock` from
 * an image built by scripts/build-box-image.sh (docs/container.md).
 *
 * Rules (each enforced in one place):
 * - Hardening (container_create_body): every capability dropped,
 *   no-new-privileges, read-only root filesystem, a uid that is never root
 *   (sbx_host_uid: the uid the thread's user-data belongs to), no network
 *   (with sandbox.network host: sandbox.container.network), memory and pids from
 *   sandbox.limits, CPUs from sandbox.container.cpus, open files and
 *   processes as rlimits. The thread's user-data is bound at
 *   /mnt/user-data, the user's skills view read-only at /mnt/skills, and a
 *   per-generation host directory at /run/fawn, where the box makes its API
 *   socket (so the gateway reaches it with no network) and reads its token
 *   and configuration. Inside, the box builds the same sandbox as the local
 *   provider's for every command (its own namespaces, seccomp filter, no
 *   capabilities), which is why the engine's seccomp profile and /proc
 *   masks are lifted for the box (the box's filter is the stricter one).
 * - Names and labels: a container is named "fawn-<instance>-<sandbox id>",
 *   instance being 8 hex digits of the gateway's home, and labelled
 *   fawn.instance, fawn.sandbox and fawn.generation. Only containers of this
 *   instance are listed, inspected or removed.
 * - Generations: a generation is drawn at random for each container and
 *   travels in its label; a box answering on that generation's socket
 *   directory is that generation's.
 * - Exact absence (container_inspect_classify): only the engine's 404 "no such
 *   container" for the name is SBX_ABSENT. An engine that cannot be
 *   reached, does not answer within sandbox.container.request_timeout_s,
 *   or answers anything unexpected (another status, malformed JSON, a
 *   container under our name that lacks our labels) is SBX_UNKNOWN.
 * - The engine's replies are untrusted: bounded (CONTAINER_REPLY_MAX),
 *   parsed strictly, ids and labels checked before use.
 *
 * Every out-parameter is set on every path, failures included. */
#ifndef FAWN_SANDBOX_CONTAINER_H
#define FAWN_SANDBOX_CONTAINER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "config/config.h"
#include "sandbox/manager.h"
#include "base/base.h"

/* Largest engine reply read: an inspect is a few KiB, a filtered listing a
 * few hundred bytes per container; 4 MiB is thousands of containers. */
#define CONTAINER_REPLY_MAX ((size_t)4 << 20)
/* Containers one listing may report: past this the engine is broken. */
#define CONTAINER_LIST_MAX 4096
/* "fawn-" + 8 hex + "-" + 16 hex. */
#define CONTAINER_NAME_MAX 31
/* Where the box's per-generation directory is inside the container. */
#define CONTAINER_RUN_DIR "/run/fawn"

typedef struct container_provider_config {
    char socket[108];            /* the engine's unix socket (sun_path's size) */
    char image[256];             /* the image (name:tag or id) */
    char api_version[16];        /* "1.41": requests go to /v<api_version>/... */
    char network[65];            /* the engine network boxes join with sandbox.network host */
    uint32_t request_timeout_ms; /* one engine request */
    uint32_t start_timeout_ms;   /* a new box answering; a removed one confirmed gone */
    uint64_t nano_cpus;          /* CPU limit in 1e-9 CPUs (0 = none) */
    bool podman; /* the engine is Podman: /proc masks are lifted with SecurityOpt unmask=ALL
                    (Podman ignores HostConfig.MaskedPaths; Docker refuses unmask) */
    const fawn_config *cfg; /* home, limits, idle timeout, command environment (outlives) */
} container_provider_config;

/* Reads sandbox.container (tree: the section as config.h keeps it) into
 * out, cfg being the whole configuration (out->cfg). Keys: socket
 * (default /var/run/docker.sock), image (required), api_version (1.41),
 * network (bridge: used only with sandbox.network host), engine (docker |
 * podman), cpus (1; a decimal, 0 = no limit),
 * request_timeout_s (30), start_timeout_s (120). FAWN_ECONFIG naming the key for anything else. */
FAWN_MUST_CHECK int container_config_parse(container_provider_config *out, const json_t *tree,
                                           const fawn_config *cfg);

/* A container provider over cfg (copied; cfg->cfg must outlive it). Its
 * operations follow sbx_provider's contract (see the rules above). Free it
 * with container_provider_free, which leaves its containers running. */
FAWN_MUST_CHECK int container_provider_new(sbx_provider **out,
                                           const container_provider_config *cfg);
void container_provider_free(sbx_provider *p);

/* ---- the engine's replies, as the operations read them (tests, fuzzing) ---- */

/* What an inspect of sandbox_id's container under our name answered
 * (status, and len bytes of body) means: SBX_ABSENT only for a 404 whose
 * JSON says "no such container" (Docker's message "No such container: ...",
 * Podman's cause "no such container"); for a 200 whose labels are
 * fawn.sandbox = sandbox_id and fawn.generation = 32 lowercase hex digits
 * (into generation), the state of State.Status: running → SBX_RUNNING,
 * created, exited or dead → SBX_STOPPED, restarting → SBX_PENDING,
 * removing or paused → SBX_TERMINATING; SBX_UNKNOWN (generation "") for
 * anything else, with FAWN_EPROTO saying why. */
FAWN_MUST_CHECK int container_inspect_classify(enum sbx_presence *state,
                                               char generation[SBX_GENERATION_LEN + 1], long status,
                                               const char *body, size_t len,
                                               const char *sandbox_id);

/* A 201 create reply's container id (64 lowercase hex) into id; FAWN_EPROTO
 * (id "") for anything else. */
FAWN_MUST_CHECK int container_create_parse(char id[65], long status, const char *body, size_t len);

/* A 200 listing (an array of containers, each with Labels): calls each
 * with every entry's fawn.sandbox and fawn.generation labels once all have
 * been checked (16 and 32 lowercase hex digits; generation "" when the
 * label is missing); each's non-zero return stops the walk and is
 * returned. FAWN_EPROTO, before any call, for anything else (more than
 * CONTAINER_LIST_MAX entries included). */
FAWN_MUST_CHECK int container_list_parse(long status, const char *body, size_t len,
                                         int (*each)(void *each_ctx, const char *sandbox_id,
                                                     const char *generation),
                                         void *each_ctx);

#endif
