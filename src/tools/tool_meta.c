/* Tools that talk to the user rather than the files: present_files hands
 * files in outputs to the user; ask_clarification asks a question (the run
 * stops there and waits for the answer). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "paths/paths.h"
#include "tools/tools_internal.h"

/* Files one present_files call may hand over. */
#define PRESENT_FILES_MAX 50

/* Checks one presented path: under outputs (after collapsing dot segments)
 * and a regular file the box can read. Appends the normalized path to
 * presented. Returns 0, 1 after filling res (the tool's answer), or
 * FAWN_ENOMEM. */
static int present_one(tool_result *res, tool_env *env, json_t *presented, const char *path) {
    vpath vp;
    int r;
    if (vpath_parse(&vp, path) < 0 || vp.root != VPATH_ROOT_USER_DATA ||
        !vpath_in_dir(&vp, "outputs") || strcmp(vp.rel, "outputs") == 0) {
        r = tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                      "Error: Only files under /mnt/user-data/outputs are allowed: %s", path);
        return r < 0 ? r : 1;
    }
    char shown[VPATH_MAX + 32];
    snprintf(shown, sizeof shown, "%s/%s", VPATH_USER_DATA, vp.rel);
    json_t *body = json_pack("{s:s, s:i}", "path", shown, "max_bytes", 1);
    json_t *reply = NULL;
    int status = 0;
    r = body ? tool_box_call(&reply, &status, env, "POST", "/v1/file/read", body,
                             TOOL_FILE_CALL_TIMEOUT_MS)
             : fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(body);
    bool refused = r < 0 || status != 200;
    if (r < 0)
        r = tool_sandbox_failure(res, r);
    else if (status != 200)
        r = tool_box_failure(res, status, reply);
    else if (json_array_append_new(presented, json_string(shown)) < 0)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    json_decref(reply);
    return refused && r == 0 ? 1 : r;
}

static int present_run(tool_result *res, tool_env *env, const json_t *args) {
    json_t *paths = json_object_get(args, "filepaths");
    if (!json_is_array(paths) || json_array_size(paths) == 0 ||
        json_array_size(paths) > PRESENT_FILES_MAX)
        return tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                         "Error: filepaths must be a list of 1 to %d paths", PRESENT_FILES_MAX);
    json_t *presented = json_array();
    if (!presented)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    size_t i;
    json_t *p;
    json_array_foreach(paths, i, p) {
        if (!json_is_string(p)) {
            json_decref(presented);
            return tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                             "Error: filepaths must hold strings");
        }
        int r = present_one(res, env, presented, json_string_value(p));
        if (r != 0) {
            json_decref(presented);
            return r < 0 ? r : 0;
        }
    }
    res->facts = json_pack("{s:o}", "presented", presented);
    char *text;
    if (asprintf(&text, "Successfully presented %zu file%s", json_array_size(paths),
                 json_array_size(paths) == 1 ? "" : "s") < 0)
        text = NULL;
    return tool_succeed(res, text);
}

static int clarify_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *question, *context;
    int r;
    if ((r = tool_arg_string(&question, res, args, "question", true)) != 0 ||
        (r = tool_arg_string(&context, res, args, "context", false)) != 0)
        return r < 0 ? r : 0;
    fbuf b = {0};
    r = context && context[0] ? fbuf_printf(&b, "%s\n\n", context) : 0;
    r = r ? r : fbuf_printf(&b, "%s", question);
    json_t *options = json_object_get(args, "options");
    size_t i;
    json_t *o;
    json_array_foreach(options, i, o) {
        if (r == 0 && json_is_string(o))
            r = fbuf_printf(&b, "\n  %zu. %s", i + 1, json_string_value(o));
    }
    if (r < 0) {
        fbuf_free(&b);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return tool_succeed(res, fbuf_steal(&b));
}

const tool_def tool_present_files = {
    .name = "present_files",
    .sandbox = true,
    .description = "Hand files to the user. Every file you create under /mnt/user-data/outputs "
                   "must be presented before you finish.",
    .parameters = "{\"type\":\"object\",\"properties\":{\"filepaths\":{\"type\":\"array\","
                  "\"items\":{\"type\":\"string\"},\"description\":\"Absolute paths under "
                  "/mnt/user-data/outputs.\"}},\"required\":[\"filepaths\"]}",
    .run = present_run,
};

const tool_def tool_ask_clarification = {
    .name = "ask_clarification",
    .description = "Ask the user a question when the request is ambiguous or missing "
                   "something you need. The run stops until the user answers.",
    .parameters = "{\"type\":\"object\",\"properties\":{\"question\":{\"type\":\"string\"},"
                  "\"clarification_type\":{\"type\":\"string\",\"enum\":[\"missing_info\","
                  "\"ambiguous_requirement\",\"approach_choice\",\"risk_confirmation\","
                  "\"suggestion\"]},\"context\":{\"type\":\"string\"},"
                  "\"options\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}}},"
                  "\"required\":[\"question\"]}",
    .run = clarify_run,
};
