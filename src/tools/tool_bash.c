/* bash: a command in the run's shell session of the sandbox. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tools/tools_internal.h"

/* "\n" when b holds text that does not end a line. */
static const char *line_break(const fbuf *b) {
    return b->len && b->data[b->len - 1] != '\n' ? "\n" : "";
}

/* The box's note (docs/box-api.md, "disk") that the thread's files hold
 * more than their disk limit, where no kernel quota stops them sooner. */
static int disk_note(fbuf *b, const json_t *disk) {
    json_int_t used = json_integer_value(json_object_get(disk, "used_bytes"));
    json_int_t limit = json_integer_value(json_object_get(disk, "limit_bytes"));
    bool complete = json_is_true(json_object_get(disk, "complete"));
    return fbuf_printf(b,
                       "%sDisk: the thread's files use %s%lld MiB, more than their limit of %lld "
                       "MiB; delete files that are not needed (uploads are refused until then)",
                       line_break(b), complete ? "" : "at least ", (long long)(used >> 20),
                       (long long)(limit >> 20));
}

/* The text the model sees: stdout, then stderr, a failing exit code and
 * the disk note. */
static char *bash_text(const char *out, const char *err, int exit_code, bool completed,
                       const json_t *disk) {
    fbuf b = {0};
    int r = fbuf_printf(&b, "%s", out);
    if (r == 0 && err[0])
        r = fbuf_printf(&b, "%sStd Error:\n%s", line_break(&b), err);
    if (r == 0 && completed && exit_code != 0)
        r = fbuf_printf(&b, "%sExit Code: %d", line_break(&b), exit_code);
    if (r == 0 && json_is_object(disk))
        r = disk_note(&b, disk);
    if (r == 0 && b.len == 0)
        r = fbuf_printf(&b, "(no output)");
    if (r < 0) {
        fbuf_free(&b);
        return NULL;
    }
    return fbuf_steal(&b);
}

/* Fills res from the box's exec reply. */
/* The statuses an exec reply may carry (docs/box-api.md); a box is
 * untrusted, so any other is a malformed reply, never an error type. */
static bool exec_status_known(const char *status) {
    static const char *const known[] = {"completed", "timeout", "killed", "error"};
    for (size_t i = 0; status && i < ARRAY_LEN(known); i++)
        if (strcmp(status, known[i]) == 0)
            return true;
    return false;
}

static int bash_outcome(tool_result *res, const json_t *reply) {
    const char *status = json_string_value(json_object_get(reply, "status"));
    const char *out = json_string_value(json_object_get(reply, "stdout"));
    const char *err = json_string_value(json_object_get(reply, "stderr"));
    json_t *code = json_object_get(reply, "exit_code");
    if (!exec_status_known(status) || !out || !err || !json_is_integer(code))
        return tool_fail(res, TOOL_ERROR, "sandbox", false,
                         "Error: malformed reply from the sandbox");
    int exit_code = (int)json_integer_value(code);
    bool completed = strcmp(status, "completed") == 0;
    _cleanup_free_ char *full = bash_text(out, err, exit_code, completed,
                                          json_object_get(reply, "disk"));
    bool cut = false;
    char *text = full ? tool_truncate_middle(full, TOOL_BASH_OUTPUT_MAX, &cut) : NULL;
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    res->status.truncated = cut || json_is_true(json_object_get(reply, "truncated"));
    res->status.exit_code = exit_code;
    int r = tool_succeed(res, text);
    if (strcmp(status, "timeout") == 0) {
        res->status.outcome = TOOL_TIMEOUT;
        snprintf(res->status.error_type, sizeof res->status.error_type, "timeout");
        res->status.recoverable = true;
    } else if (!completed || exit_code != 0) {
        res->status.outcome = TOOL_ERROR;
        snprintf(res->status.error_type, sizeof res->status.error_type, "%s",
                 completed ? "exit_code" : status);
        res->status.recoverable = completed;
    }
    return r;
}

static int bash_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *command;
    int r = tool_arg_string(&command, res, args, "command", true);
    if (r != 0)
        return r < 0 ? r : 0;
    if (!command[0])
        return tool_fail(res, TOOL_ERROR, "invalid_arguments", true, "Error: the command is empty");
    sbx_lease *lease;
    r = tool_env_lease(&lease, env);
    if (r < 0)
        return tool_sandbox_failure(res, r);
    uint32_t timeout_s = env->command_timeout_s;
    json_t *body = json_pack("{s:s, s:I}", "command", command, "timeout_s", (json_int_t)timeout_s);
    if (body && lease->session[0])
        json_object_set_new(body, "session_id", json_string(lease->session));
    json_t *reply = NULL;
    int status = 0;
    r = body ? sbx_call(&reply, &status, lease, "POST", "/v1/shell/exec", body,
                        (int)(timeout_s + TOOL_BASH_REPLY_MARGIN_S) * 1000)
             : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    if (r == 0)
        r = status == 200 ? bash_outcome(res, reply) : tool_box_failure(res, status, reply);
    else
        r = tool_sandbox_failure(res, r);
    json_decref(reply);
    return r;
}

const tool_def tool_bash = {
    .name = "bash",
    .sandbox = true,
    .description =
        "Execute a bash command in a Linux sandbox. The thread's files are under "
        "/mnt/user-data: workspace (scratch), uploads (the user's files) and outputs (files "
        "to hand back). Use absolute paths. The shell session keeps its working directory and "
        "exported variables between calls.",
    .parameters =
        "{\"type\":\"object\",\"properties\":{"
        "\"description\":{\"type\":\"string\",\"description\":\"Why you run this, in a few "
        "words.\"},"
        "\"command\":{\"type\":\"string\",\"description\":\"The bash command to execute.\"}},"
        "\"required\":[\"description\",\"command\"]}",
    .run = bash_run,
};
