/* libFuzzer target for the tools (src/tools): the arguments a model gives
 * a tool call, and the box's answers to the tool's requests (an exec's
 * status and output, a file read's content, listings, matches, refusals),
 * which come from inside a sandbox. The tools run through a real sandbox
 * manager (store and policy made once in a temporary directory) over a
 * provider whose box answers every request with the input's reply.
 *
 * Input: the first byte picks the tool, the second the HTTP status of the
 * box's answers; then the arguments' JSON text, a NUL byte, and the reply's
 * JSON object (when there is no NUL byte, the reply is {}). Besides memory
 * errors and undefined behaviour, it checks that every call ends with
 * - a result text that is valid UTF-8 (it becomes a JSON string of the
 *   conversation), and that the agent can store as a tool message;
 * - a status whose error type is empty exactly on success, and bash and
 *   read_file output within their limits; bash's error type one of its own
 *   words, never a word of the box's choosing;
 * - facts, when any, that are an object (read_file: the path and a
 *   sha256 of 64 hex digits). */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "base/base.h"
#include "base/json.h"
#include "tools/tools.h"
#include "fuzz_support.h"

/* Longer inputs only repeat what shorter ones exercise. */
#define FUZZ_INPUT_MAX 65536
/* Room for the marker tool_truncate_middle puts in a cut text. */
#define TRUNCATION_MARKER_MAX 128
#define USER "fuzz"
#define THREAD "thread"

static const int statuses[] = {200, 200, 200, 200, 200, 200, 400, 403, 404, 409, 413, 500};

static char dir[FUZZ_DIR_MAX];
static store *st;
static authz_policy *policy;
static sbx_manager *manager;
static tool_env env;
/* The box's answer to every request of the current input. */
static int reply_status;
static const json_t *reply_body;

/* ---- the provider: one box, answering with the input's reply ---- */

static int fz_create(void *ctx, sbx_box *out, const char *user, const char *thread,
                     const sbx_cancel *cancel) {
    *out = (sbx_box){0};
    char key[160], hex[65];
    int n = snprintf(key, sizeof key, "%s:%s", user, thread);
    fawn_sha256_hex(hex, key, (size_t)n);
    memcpy(out->sandbox_id, hex, 16);
    memset(out->generation, 'a', SBX_GENERATION_LEN);
    snprintf(out->endpoint, sizeof out->endpoint, "unix:/nonexistent/fuzz.sock");
    return 0;
}

static int fz_probe(void *ctx, enum sbx_presence *state, char generation[SBX_GENERATION_LEN + 1],
                    const char *sandbox_id) {
    *state = SBX_ABSENT;
    generation[0] = '\0';
    return 0;
}

static int fz_health(void *ctx, const sbx_box *box) { return 0; }

static int fz_destroy(void *ctx, const char *sandbox_id, const char *generation) { return 0; }

static int fz_list(void *ctx, int (*each)(void *, const char *, const char *), void *each_ctx) {
    return 0;
}

static int fz_call(void *ctx, json_t **reply, int *status, const sbx_box *box, const char *method,
                   const char *path, const json_t *body, int timeout_ms) {
    *reply = json_deep_copy(reply_body);
    *status = reply_status;
    return *reply ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

static int fz_call_file(void *ctx, json_t **reply, int *status, const sbx_box *box,
                        const char *method, const char *path, int file_fd, uint64_t size,
                        int timeout_ms) {
    *reply = NULL;
    *status = 0;
    return fawn_err(FAWN_EUNSUP, "no file uploads");
}

static sbx_provider provider = {.name = "fuzz",
                                .create = fz_create,
                                .probe = fz_probe,
                                .health = fz_health,
                                .destroy = fz_destroy,
                                .list = fz_list,
                                .call = fz_call,
                                .call_file = fz_call_file};

/* ---- setup ---- */

static void teardown(void) {
    tool_env_end(&env);
    sbx_manager_free(manager);
    authz_policy_free(policy);
    store_close(st);
    fuzz_remove_tree(dir);
}

static void setup(void) {
    fuzz_scratch_dir(dir, "tools");
    char path[128];
    snprintf(path, sizeof path, "%s/fawn.db", dir);
    check(store_open(&st, path) == 0);
    check(authz_policy_load(&policy, NULL) == 0);
    const sbx_manager_config mc = {.call_timeout_ms = 1000};
    check(sbx_manager_new(&manager, &mc, &provider, st, policy) == 0);
    atexit(teardown);
    env = (tool_env){.sandboxes = manager,
                     .req = {.who = {.user = USER, .role = "admin"},
                             .thread = THREAD,
                             .kind = SBX_HOLD_EXECUTION},
                     .command_timeout_s = 10};
}

/* ---- checks ---- */

static void check_facts(const tool_def *t, const json_t *facts) {
    if (!facts)
        return;
    check(json_is_object(facts));
    const char *sha = json_string_value(json_object_get(facts, "sha256"));
    check(!sha || (strlen(sha) == 64 && strspn(sha, "0123456789abcdef") == 64));
    if (strcmp(t->name, "read_file") == 0)
        check(json_is_string(json_object_get(facts, "read")) && sha);
}

static void check_result(const tool_def *t, const json_t *args, tool_result *res) {
    const char *text = res->text;
    check(text != NULL && fawn_utf8_valid(text, strlen(text)));
    tool_status *s = &res->status;
    check(s->outcome <= TOOL_CANCELLED && s->duration_ms >= 0);
    check(strnlen(s->error_type, sizeof s->error_type) < sizeof s->error_type);
    check((s->outcome == TOOL_SUCCESS) == (s->error_type[0] == '\0'));
    size_t n = strlen(text);
    if (s->outcome == TOOL_SUCCESS && strcmp(t->name, "read_file") == 0)
        check(n <= TOOL_READ_OUTPUT_MAX + TRUNCATION_MARKER_MAX);
    static const char *const bash_types[] = {
        "",        "timeout",   "exit_code", "killed",    "error",
        "sandbox", "not_found", "too_large", "ambiguous", "invalid_arguments"};
    bool bash_type_known = false;
    for (size_t i = 0; i < ARRAY_LEN(bash_types); i++)
        bash_type_known = bash_type_known || strcmp(s->error_type, bash_types[i]) == 0;
    check(strcmp(t->name, "bash") != 0 || reply_status != 200 || bash_type_known);
    bool bash_output = s->outcome == TOOL_SUCCESS || strcmp(s->error_type, "exit_code") == 0;
    if (strcmp(t->name, "bash") == 0 && bash_output)
        check(n <= TOOL_BASH_OUTPUT_MAX + TRUNCATION_MARKER_MAX);
    check_facts(t, res->facts);
    agent_tool_call call = {.id = "call_fuzz", .name = t->name, .args = args, .result = *res};
    json_t *message = agent_tool_message(&call);
    check(message != NULL);
    json_decref(message);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2 || size > FUZZ_INPUT_MAX)
        return 0;
    const tool_def *t = tool_at(data[0] % tool_count());
    reply_status = statuses[data[1] % ARRAY_LEN(statuses)];
    const char *rest = (const char *)data + 2;
    size_t len = size - 2;
    const char *nul = memchr(rest, '\0', len);
    size_t args_len = nul ? (size_t)(nul - rest) : len;
    json_t *reply = nul ? json_loadb(nul + 1, len - args_len - 1, 0, NULL) : json_object();
    if (!json_is_object(reply)) { /* the box's client refuses anything else */
        json_decref(reply);
        return 0;
    }
    if (!manager)
        setup();
    reply_body = reply;
    json_t *args = json_loadb(rest, args_len, JSON_DECODE_ANY, NULL);
    tool_result res;
    int r = tool_run(&res, &env, t->name, args);
    check(r == 0);
    check_result(t, args, &res);
    tool_result_clear(&res);
    json_decref(args);
    json_decref(reply);
    return 0;
}
