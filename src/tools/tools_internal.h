/* What the tool files share; no other module includes this. */
#ifndef FAWN_TOOLS_INTERNAL_H
#define FAWN_TOOLS_INTERNAL_H

#include "tools/tools.h"
#include "base/base.h"

extern const tool_def tool_bash, tool_ls, tool_read_file, tool_write_file, tool_str_replace,
    tool_glob, tool_grep, tool_present_files, tool_ask_clarification, tool_web_search,
    tool_web_fetch;

/* 30 s: a file operation of the box; commands have their own timeout. */
#define TOOL_FILE_CALL_TIMEOUT_MS 30000

/* r for a sandbox that could not be reached or used (code from the manager
 * or the lease): denied, cancelled, timeout or a sandbox error. */
FAWN_MUST_CHECK int tool_sandbox_failure(tool_result *r, int code);
/* r for a box API refusal (status 4xx/5xx, reply {"error","detail"}). */
FAWN_MUST_CHECK int tool_box_failure(tool_result *r, int http_status, const json_t *reply);
/* Reads string argument key. Returns 0 (with *out NULL when absent and not
 * required), 1 after filling res with a recoverable error (the tool then
 * returns 0: res is its answer), or FAWN_ENOMEM when even that failed. */
FAWN_MUST_CHECK int tool_arg_string(const char **out, tool_result *res, const json_t *args,
                                    const char *key, bool required);
/* Optional integer argument key in [min, max] (dflt when absent); 0, or 1
 * or FAWN_ENOMEM as above. */
FAWN_MUST_CHECK int tool_arg_int(int64_t *out, tool_result *res, const json_t *args,
                                 const char *key, int64_t dflt, int64_t min, int64_t max);
/* Optional boolean argument key (false when absent); 0, or 1 or FAWN_ENOMEM
 * as above. */
FAWN_MUST_CHECK int tool_arg_bool(bool *out, tool_result *res, const json_t *args, const char *key);

#endif
