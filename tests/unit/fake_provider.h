/* A fault-injecting sandbox provider for tests: boxes live in memory, keyed
 * by sandbox id, and every failure a real placement can show (slow or
 * failing creates, dead or silent boxes, partial destroys, unknown probes,
 * exchanges that break midway, boxes killed or left behind by another
 * process) can be switched on. It records what it was asked, so tests can
 * check what a caller did (how many creates, how many at once).
 *
 * The box API part (`call`) knows only what the sandbox manager uses:
 *   POST /v1/shell/sessions {"id": ...}  -> 200 {"id": ..., "existed": bool}
 *   GET /v1/shell/sessions               -> 200 {"sessions": [{"id": ...}]}
 *   DELETE /v1/shell/sessions/{id}       -> 200 {} (404 when unknown)
 *   POST /v1/shell/sessions/{id}/kill    -> 200 {"ok": true} (404 when unknown)
 *   GET /v1/sandbox                      -> 200 {"ready": true, "generation": ...}
 *   POST /v1/shell/exec                  -> see fake_set_exec_waits
 *   anything else                        -> 200 {}
 *
 * Every function is safe to call from any thread. */
#ifndef FAWN_TESTS_FAKE_PROVIDER_H
#define FAWN_TESTS_FAKE_PROVIDER_H

#include <stdbool.h>
#include <stddef.h>

#include "sandbox/manager.h"

/* Boxes the fake holds at once, and shell sessions per box: more than any
 * test starts; past them create and session creation fail with FAWN_E2BIG. */
#define FAKE_BOXES_MAX 128
#define FAKE_SESSIONS_MAX 16
/* Longest a waiting exec (fake_set_exec_waits) waits: past any test's own
 * ceiling, so a test never hangs on it. */
#define FAKE_EXEC_WAIT_MAX_MS 60000
/* Longest a held create (fake_hold_creates) waits to be released: past any
 * test's own ceiling. */
#define FAKE_HOLD_MAX_MS 60000

typedef struct fake_provider fake_provider;

/* A fake with no boxes and no faults. Free with fake_provider_free (after
 * whatever uses its provider is gone). */
fake_provider *fake_provider_new(void);
void fake_provider_free(fake_provider *f);

/* The sbx_provider operating on f (valid as long as f). */
sbx_provider *fake_provider_iface(fake_provider *f);

/* The sandbox id a (user, thread) gets: the first 16 hex digits of
 * sha256("user:thread"), as the local provider computes it. */
void fake_sandbox_id(char out[17], const char *user, const char *thread);

/* ---- faults (each stays set until changed, unless said otherwise) ---- */

/* Every create fails with code (0 = creates work again); nothing is left. */
void fake_set_create_error(fake_provider *f, int code);
/* Every create takes ms milliseconds before the box answers. With
 * honor_cancel it polls the cancel flag meanwhile and, once set, removes
 * what it began and returns FAWN_ECANCELED; without, it finishes the box
 * regardless (a provider that cannot be interrupted). */
void fake_set_create_delay(fake_provider *f, int ms, bool honor_cancel);
/* While held, every create that does not hand back a running box stops
 * where it would wait its delay and stays there until the creates are
 * released (with honor_cancel, or until its cancel flag is set; after
 * FAKE_HOLD_MAX_MS at most, so a test never hangs on it). A test puts an
 * event (a cancel, another acquisition, a destroy) inside a create this
 * way, at that exact step, however slow the host. */
void fake_hold_creates(fake_provider *f);
/* Every held create goes on; later creates are not held. */
void fake_release_creates(fake_provider *f);
/* Waits up to ms for n creates to be held at once; false when they were not. */
bool fake_wait_held_creates(fake_provider *f, int n, int ms);
/* The next create (only that one) starts its box with this generation. */
void fake_set_next_generation(fake_provider *f, const char *generation);
/* What health says about `generation` from now on: 0 = the truth (alive
 * while it runs), FAWN_ENOENT = dead, any other code = cannot tell. A box
 * whose health is not 0 does not answer, so create starts a new box over it. */
void fake_set_health(fake_provider *f, const char *generation, int code);
/* The next `times` destroys fail with code. With partial, each failure
 * removes the box's sessions and leaves it TERMINATING (what was done stays
 * done); without, the box is left as it was. times < 0 = until changed. */
void fake_set_destroy_failures(fake_provider *f, int times, int code, bool partial);
/* Probe answers SBX_UNKNOWN for every sandbox while set. */
void fake_set_probe_unknown(fake_provider *f, bool unknown);
/* List fails with code while it is not 0. */
void fake_set_list_error(fake_provider *f, int code);
/* The next `times` calls whose method is `method` and whose path starts
 * with path_prefix fail with code after the box acted on them (the reply
 * was lost midway: the caller cannot know the outcome). */
void fake_fail_calls(fake_provider *f, const char *method, const char *path_prefix, int times,
                     int code);

/* From now on the provider attests its boxes (sbx_provider.attest), and
 * every box answers `a`; attests_enabled false removes the operation again
 * (the default: boxes need no proof). */
void fake_set_attestation(fake_provider *f, bool attests_enabled, enum sbx_attestation a);

/* While set, POST /v1/shell/exec with a session_id is a command that runs
 * until something stops it: it answers {"status": "killed", "exit_code":
 * 137} once a session of its box is killed or deleted, or the box stops
 * (after FAKE_EXEC_WAIT_MAX_MS at most, {"status": "timeout"}). Unset, every
 * exec answers 200 {} at once. */
void fake_set_exec_waits(fake_provider *f, bool waits);

/* ---- the world behind the caller's back ---- */

/* The box of sandbox_id stops (its process exited; leftovers stay): probe
 * says STOPPED, health FAWN_ENOENT, calls fail with FAWN_EIO. */
void fake_kill(fake_provider *f, const char *sandbox_id);
/* A running box for (user, thread) as a previous process left it, with a
 * fresh generation (into generation, when not NULL). Replaces any box of
 * that sandbox id. */
void fake_plant(fake_provider *f, char generation[SBX_GENERATION_LEN + 1], const char *user,
                const char *thread);
/* Like fake_plant, with the given generation. */
void fake_plant_as(fake_provider *f, const char *generation, const char *user, const char *thread);

/* ---- what happened ---- */

typedef struct fake_counts {
    int creates;       /* create calls, failed ones included */
    int creates_done;  /* creates that started a new box (not handing back a running one) */
    int destroys;      /* destroy calls */
    int destroys_done; /* destroys that removed a box */
    int health_checks;
    int probes;
    int lists;
    int calls;            /* box API requests */
    int sessions_created; /* POST /v1/shell/sessions that made a new session */
    int sessions_deleted; /* DELETE /v1/shell/sessions/{id} that removed one */
    int execs_waited;     /* execs that waited to be stopped (fake_set_exec_waits) */
    int attests;          /* attestation challenges (fake_set_attestation) */
} fake_counts;

fake_counts fake_get_counts(fake_provider *f);
/* Box API requests so far whose method matches and whose path starts with path_prefix. */
int fake_call_count(fake_provider *f, const char *method, const char *path_prefix);
/* Every provider operation so far (create, probe, health, destroy, list, call). */
int fake_total_ops(fake_provider *f);

/* Boxes in the RUNNING state. */
int fake_running_count(fake_provider *f);
/* Whether a box runs generation (RUNNING). */
bool fake_generation_running(fake_provider *f, const char *generation);
/* Whether any box (any state) holds generation. */
bool fake_generation_present(fake_provider *f, const char *generation);
/* Whether sandbox_id's box has the shell session id. */
bool fake_session_exists(fake_provider *f, const char *sandbox_id, const char *id);
/* The number of shell sessions sandbox_id's box has (0 without a box). */
int fake_session_count(fake_provider *f, const char *sandbox_id);
/* The id asked for by the last POST /v1/shell/sessions ("" when none), into out. */
void fake_last_session_request(fake_provider *f, char out[SBX_SESSION_ID_MAX + 1]);

/* The most creates seen running at once for one sandbox id, and across all. */
int fake_max_creates_per_id(fake_provider *f);
int fake_max_creates_overall(fake_provider *f);
/* The most lifecycle operations (create, probe, health, destroy) seen
 * running at once for one sandbox id: the provider contract allows one. */
int fake_max_ops_per_id(fake_provider *f);

#endif
