/* The remote provider: boxes placed by an operator's control plane (docker,
 * kubectl, ssh, a process on this host) and reached over TCP, where each one
 * is a `fawn box --listen HOST:PORT --token-file F` that wants a bearer token
 * (docs/box-api.md). One protocol, any placement: the control plane is four
 * commands the operator configures, each a small script. Started with
 * `--idle-exit` set to sandbox.idle_timeout_s, a box exits once no gateway
 * holds it (the manager keeps the boxes it holds alive with requests).
 *
 * Commands. Each is an argv, run without a shell (argv[0] is looked up in
 * PATH), stdin /dev/null, in a process group of its own, with this
 * process's environment plus:
 *   FAWN_SANDBOX_ID  the sandbox (16 hex digits)       create, status, destroy
 *   FAWN_USER, FAWN_THREAD  whose sandbox it is         create
 *   FAWN_SKILLS_DIR  the user's skills view on this host  create, with home
 *                    (skills_view_ensure): what the box should show read-only
 *                    at /mnt/skills (`fawn box --skills-dir`). It holds
 *                    exactly the skills the user's runs may see, refreshed at
 *                    each run's start; a box on a host that does not share
 *                    this directory shows what its own --skills-dir holds.
 *   FAWN_GENERATION  the generation to remove           destroy, when known
 * (inherited variables of those names are removed). A command succeeds when
 * it exits 0 within command_timeout_ms having printed one JSON object (at
 * most REMOTE_COMMAND_OUTPUT_MAX bytes) with exactly the fields below;
 * anything else is a failure. A command still running at its deadline
 * (create's also when the start is cancelled) is killed with its process
 * group, so a box meant to outlive its create command starts in a session
 * of its own (setsid); destroy runs after a failed or cancelled create.
 * Output is read until the command exits: processes it leaves in the
 * background do not hold it, but must not write to its stdout. The first
 * line of what a failing command wrote to stderr is logged.
 *
 *   create   starts the sandbox's box (or reports the one running) and prints
 *            {"endpoint": "tcp:HOST:PORT", "token": "...", "generation": "..."}
 *            HOST a numeric IPv4 or [IPv6] address; token 1-127 visible ASCII
 *            characters; generation (32 lowercase hex) may be left out, and
 *            is then read from the box. The provider waits (start_timeout_ms)
 *            until the box answers GET /v1/sandbox with the token as that
 *            generation.
 *   status   prints {"state": "absent"|"pending"|"running"|"stopped"|
 *            "terminating", "generation": "...", "endpoint": "...",
 *            "token": "..."}: generation is required when running and
 *            optional otherwise; endpoint and token are optional (the
 *            manager keeps them from create). "absent" must mean nothing is
 *            left: a control plane that cannot tell fails instead.
 *   destroy  asks for the sandbox's box (FAWN_GENERATION's only, when set) to
 *            be stopped and removed; prints {}. It may return before the box
 *            is gone: the provider then runs status until it says absent.
 *   list     prints {"sandboxes": [{"sandbox_id": "...", "generation": "..."}]}
 *            for every sandbox not absent (generation "" when unknown).
 */
#ifndef FAWN_SANDBOX_REMOTE_H
#define FAWN_SANDBOX_REMOTE_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandbox/manager.h"
#include "base/base.h"

/* A command's stdout: a few hundred bytes per sandbox in a listing; more is
 * a broken control plane. */
#define REMOTE_COMMAND_OUTPUT_MAX ((size_t)64 << 10)
/* How long a health check waits for the box when health_timeout_ms is 0. */
#define REMOTE_HEALTH_TIMEOUT_MS 5000

typedef struct remote_provider_config {
    /* NULL-terminated argv of each command (see above); all four required. */
    char **create_argv, **status_argv, **destroy_argv, **list_argv;
    uint32_t command_timeout_ms; /* one command run, killed after this (> 0) */
    uint32_t start_timeout_ms;   /* a new box answering; a destroyed one confirmed absent (> 0) */
    uint32_t health_timeout_ms;  /* a health check's request; 0 = REMOTE_HEALTH_TIMEOUT_MS */
    /* NULL-terminated names of host variables the commands also get (or NULL):
     * besides these, a command's environment holds only the host's PATH, HOME,
     * LANG, LC_ALL, TZ and TMPDIR and the variables the provider sets. */
    char **env_passthrough;
    /* $FAWN_HOME, whose users' skills views create names in FAWN_SKILLS_DIR
     * (NULL: the variable is not set). */
    const char *home;
} remote_provider_config;

/* A remote provider over cfg's commands (copied: cfg may go away). The
 * operations follow sbx_provider's contract:
 * - create runs create, then waits for the box; on failure or cancel it
 *   runs destroy for what it started (FAWN_ECANCELED when cancelled).
 * - probe runs status: SBX_UNKNOWN (never SBX_ABSENT) when the command fails.
 * - health asks the box for its generation: FAWN_ENOENT when the connection
 *   is refused or another generation answers; FAWN_ETIMEDOUT, FAWN_EIO or
 *   FAWN_EPROTO when it cannot tell.
 * - destroy runs status first (a sandbox absent, or running another
 *   generation than the one named, is done), then destroy, then status
 *   until absent (start_timeout_ms): FAWN_ETIMEDOUT when it never says so.
 * - list runs list; call is box_call_tcp (client.h; a refused connection is
 *   FAWN_EIO, as for box_call).
 * Free it with remote_provider_free. FAWN_EINVAL for a missing or empty
 * argv or a zero timeout. */
FAWN_MUST_CHECK int remote_provider_new(sbx_provider **out, const remote_provider_config *cfg);

/* Frees a provider from remote_provider_new (NULL is fine). Leaves its
 * boxes running. */
void remote_provider_free(sbx_provider *p);

/* The readers of what the commands print (each o is the JSON object a
 * command printed), as the operations use them; exposed for tests. Each
 * refuses anything but the fields above, with FAWN_EPROTO naming what is
 * wrong:
 * - create's into box's endpoint, token and generation ("" when left out;
 *   all three "" first); its sandbox_id is left alone;
 * - status's into *state and generation (SBX_UNKNOWN and "" first, and on
 *   failure; "" when absent);
 * - list's: every entry is checked before each is called for any, with
 *   its sandbox id and generation ("" when unknown); each's non-zero
 *   return stops the walk and is returned. */
FAWN_MUST_CHECK int remote_create_parse(sbx_box *box, const json_t *o);
FAWN_MUST_CHECK int remote_status_parse(enum sbx_presence *state,
                                        char generation[SBX_GENERATION_LEN + 1], const json_t *o);
FAWN_MUST_CHECK int remote_list_parse(const json_t *o,
                                      int (*each)(void *each_ctx, const char *sandbox_id,
                                                  const char *generation),
                                      void *each_ctx);

#endif
