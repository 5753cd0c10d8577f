/* File tools: ls, read_file, write_file, str_replace, glob, grep. Each is
 * one or two box API file operations; the box confines every path. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "tools/tools_internal.h"

/* One box file operation (body is taken). On 200, *reply is the answer;
 * otherwise *reply is NULL and res holds the failure. Returns 0, or
 * FAWN_ENOMEM. */
static int file_call(json_t **reply, tool_result *res, tool_env *env, const char *path,
                     json_t *body) {
    *reply = NULL;
    if (!body)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int status = 0;
    json_t *answer = NULL;
    int r = tool_box_call(&answer, &status, env, "POST", path, body, TOOL_FILE_CALL_TIMEOUT_MS);
    json_decref(body);
    if (r < 0)
        return tool_sandbox_failure(res, r);
    if (status != 200) {
        r = tool_box_failure(res, status, answer);
        json_decref(answer);
        return r;
    }
    *reply = answer;
    return 0;
}

/* ---- ls ---- */

static int ls_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *path;
    int r = tool_arg_string(&path, res, args, "path", true);
    if (r != 0)
        return r < 0 ? r : 0;
    json_t *reply;
    r = file_call(&reply, res, env, "/v1/file/list",
                  json_pack("{s:s, s:i}", "path", path, "max_depth", 2));
    if (r < 0 || !reply)
        return r;
    fbuf b = {0};
    json_t *e;
    size_t i;
    json_array_foreach(json_object_get(reply, "entries"), i, e) {
        const char *p = json_string_value(json_object_get(e, "path"));
        const char *type = json_string_value(json_object_get(e, "type"));
        if (p && fbuf_printf(&b, "%s%s\n", p, type && strcmp(type, "dir") == 0 ? "/" : "") < 0)
            r = FAWN_ENOMEM;
    }
    if (r == 0 && b.len == 0)
        r = fbuf_printf(&b, "(empty)");
    res->status.truncated = json_is_true(json_object_get(reply, "truncated"));
    if (r == 0 && res->status.truncated)
        r = fbuf_printf(&b, "[listing truncated]");
    json_decref(reply);
    if (r < 0) {
        fbuf_free(&b);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return tool_succeed(res, fbuf_steal(&b));
}

/* ---- read_file ---- */

/* Offset of the start of line `line` (1-based) in text, or len past the end. */
static size_t line_offset(const char *text, size_t len, int64_t line) {
    size_t off = 0;
    for (int64_t l = 1; l < line && off < len; l++) {
        const char *nl = memchr(text + off, '\n', len - off);
        off = nl ? (size_t)(nl - text) + 1 : len;
    }
    return off;
}

static int read_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *path;
    int64_t start, end;
    int r;
    if ((r = tool_arg_string(&path, res, args, "path", true)) != 0 ||
        (r = tool_arg_int(&start, res, args, "start_line", 1, 1, INT32_MAX)) != 0 ||
        (r = tool_arg_int(&end, res, args, "end_line", 0, 1, INT32_MAX)) != 0)
        return r < 0 ? r : 0;
    if (end && end < start)
        return tool_fail(res, TOOL_ERROR, "invalid_arguments", true,
                         "Error: end_line must not be before start_line");
    json_t *reply;
    r = file_call(&reply, res, env, "/v1/file/read", json_pack("{s:s}", "path", path));
    if (r < 0 || !reply)
        return r;
    const char *content = json_string_value(json_object_get(reply, "content"));
    size_t len = json_string_length(json_object_get(reply, "content"));
    if (json_is_true(json_object_get(reply, "binary")) || !content) {
        json_decref(reply);
        return tool_fail(res, TOOL_ERROR, "binary", true,
                         "Error: %s is a binary file; inspect it with bash", path);
    }
    bool whole_file = !json_is_true(json_object_get(reply, "truncated"));
    size_t from = line_offset(content, len, start);
    size_t to = end ? line_offset(content, len, end + 1) : len;
    bool cut = false;
    _cleanup_free_ char *slice = strndup(content + from, to - from);
    char *text = slice ? tool_truncate_middle(slice, TOOL_READ_OUTPUT_MAX, &cut) : NULL;
    if (text && !text[0]) {
        free(text);
        text = strdup(from >= len && len ? "(no lines in that range)" : "(empty file)");
    }
    if (whole_file) {
        char sha[65];
        fawn_sha256_hex(sha, content, len);
        res->facts = json_pack("{s:s, s:s}", "read", path, "sha256", sha);
    }
    res->status.truncated = cut || !whole_file;
    json_decref(reply);
    return text ? tool_succeed(res, text) : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* ---- write_file, str_replace ---- */

static int write_content(tool_result *res, tool_env *env, const char *path, const char *content,
                         bool append) {
    json_t *reply;
    int r = file_call(
        &reply, res, env, "/v1/file/write",
        json_pack("{s:s, s:s, s:b}", "path", path, "content", content, "append", append));
    if (r < 0 || !reply)
        return r;
    json_decref(reply);
    char sha[65];
    fawn_sha256_hex(sha, content, strlen(content));
    res->facts = append ? json_pack("{s:s}", "written", path)
                        : json_pack("{s:s, s:s}", "written", path, "sha256", sha);
    char *text;
    if (asprintf(&text, "OK: wrote %zu bytes to %s", strlen(content), path) < 0)
        text = NULL;
    return tool_succeed(res, text);
}

static int write_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *path, *content;
    bool append;
    int r;
    if ((r = tool_arg_string(&path, res, args, "path", true)) != 0 ||
        (r = tool_arg_string(&content, res, args, "content", true)) != 0 ||
        (r = tool_arg_bool(&append, res, args, "append")) != 0)
        return r < 0 ? r : 0;
    if (strlen(content) > TOOL_WRITE_MAX)
        return tool_fail(res, TOOL_ERROR, "too_large", true,
                         "Error: content is larger than %d bytes; write it in parts with "
                         "append",
                         TOOL_WRITE_MAX);
    return write_content(res, env, path, content, append);
}

/* Occurrences of needle in hay (non-overlapping). */
static size_t count_occurrences(const char *hay, const char *needle) {
    size_t n = 0, step = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + step, needle))
        n++;
    return n;
}

/* hay with every (or the first) needle replaced by with; NULL on ENOMEM. */
static char *replace(const char *hay, const char *needle, const char *with, bool all) {
    fbuf b = {0};
    size_t step = strlen(needle);
    const char *p = hay, *hit;
    int r = 0;
    while (r == 0 && (hit = strstr(p, needle))) {
        r = fbuf_append(&b, p, (size_t)(hit - p));
        r = r ? r : fbuf_append(&b, with, strlen(with));
        p = hit + step;
        if (!all)
            break;
    }
    r = r ? r : fbuf_append(&b, p, strlen(p) + 1);
    if (r < 0) {
        fbuf_free(&b);
        return NULL;
    }
    return fbuf_steal(&b);
}

static int str_replace_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *path, *old_str, *new_str;
    bool all;
    int r;
    if ((r = tool_arg_string(&path, res, args, "path", true)) != 0 ||
        (r = tool_arg_string(&old_str, res, args, "old_str", true)) != 0 ||
        (r = tool_arg_string(&new_str, res, args, "new_str", true)) != 0 ||
        (r = tool_arg_bool(&all, res, args, "replace_all")) != 0)
        return r < 0 ? r : 0;
    if (!old_str[0])
        return tool_fail(res, TOOL_ERROR, "invalid_arguments", true, "Error: old_str is empty");
    json_t *reply;
    r = file_call(&reply, res, env, "/v1/file/read", json_pack("{s:s}", "path", path));
    if (r < 0 || !reply)
        return r;
    const char *content = json_string_value(json_object_get(reply, "content"));
    if (!content || json_is_true(json_object_get(reply, "binary")) ||
        json_is_true(json_object_get(reply, "truncated"))) {
        json_decref(reply);
        return tool_fail(res, TOOL_ERROR, "too_large", true,
                         "Error: %s is binary or too large to edit with str_replace", path);
    }
    size_t n = count_occurrences(content, old_str);
    if (n == 0 || (n > 1 && !all)) {
        json_decref(reply);
        return n == 0 ? tool_fail(res, TOOL_ERROR, "not_found", true,
                                  "Error: String to replace not found in file: %s", path)
                      : tool_fail(res, TOOL_ERROR, "ambiguous", true,
                                  "Error: old_str appears %zu times in %s; include more "
                                  "context or set replace_all",
                                  n, path);
    }
    _cleanup_free_ char *updated = replace(content, old_str, new_str, all);
    json_decref(reply);
    if (!updated)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    return write_content(res, env, path, updated, false);
}

/* ---- glob, grep ---- */

/* "path\n" per match of reply's matches (strings, or objects with path,
 * line, text), then a truncation note; "No matches" when there are none. */
static int matches_text(tool_result *res, const json_t *reply) {
    fbuf b = {0};
    json_t *m;
    size_t i;
    int r = 0;
    json_array_foreach(json_object_get(reply, "matches"), i, m) {
        if (json_is_string(m))
            r = fbuf_printf(&b, "%s\n", json_string_value(m));
        else
            r = fbuf_printf(&b, "%s:%lld: %s\n",
                            json_string_value(json_object_get(m, "path")) ?: "?",
                            (long long)json_integer_value(json_object_get(m, "line")),
                            json_string_value(json_object_get(m, "text")) ?: "");
        if (r < 0)
            break;
    }
    res->status.truncated = json_is_true(json_object_get(reply, "truncated"));
    if (r == 0 && b.len == 0)
        r = fbuf_printf(&b, "No matches");
    if (r == 0 && res->status.truncated)
        r = fbuf_printf(&b, "[results truncated; narrow the search]");
    if (r < 0) {
        fbuf_free(&b);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    return tool_succeed(res, fbuf_steal(&b));
}

static int glob_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *pattern, *path;
    bool dirs;
    int64_t max;
    int r;
    if ((r = tool_arg_string(&pattern, res, args, "pattern", true)) != 0 ||
        (r = tool_arg_string(&path, res, args, "path", true)) != 0 ||
        (r = tool_arg_bool(&dirs, res, args, "include_dirs")) != 0 ||
        (r = tool_arg_int(&max, res, args, "max_results", TOOL_GLOB_DEFAULT, 1, TOOL_GLOB_MAX)) !=
            0)
        return r < 0 ? r : 0;
    json_t *reply;
    r = file_call(&reply, res, env, "/v1/file/find",
                  json_pack("{s:s, s:s, s:b, s:I}", "path", path, "pattern", pattern,
                            "include_dirs", dirs, "max_results", (json_int_t)max));
    if (r < 0 || !reply)
        return r;
    r = matches_text(res, reply);
    json_decref(reply);
    return r;
}

static int grep_run(tool_result *res, tool_env *env, const json_t *args) {
    const char *pattern, *path, *glob;
    bool literal, case_sensitive;
    int64_t max;
    int r;
    if ((r = tool_arg_string(&pattern, res, args, "pattern", true)) != 0 ||
        (r = tool_arg_string(&path, res, args, "path", true)) != 0 ||
        (r = tool_arg_string(&glob, res, args, "glob", false)) != 0 ||
        (r = tool_arg_bool(&literal, res, args, "literal")) != 0 ||
        (r = tool_arg_bool(&case_sensitive, res, args, "case_sensitive")) != 0 ||
        (r = tool_arg_int(&max, res, args, "max_results", TOOL_GREP_DEFAULT, 1, TOOL_GREP_MAX)) !=
            0)
        return r < 0 ? r : 0;
    json_t *body = json_pack("{s:s, s:s, s:b, s:b, s:I}", "path", path, "pattern", pattern,
                             "literal", literal, "case_sensitive", case_sensitive, "max_results",
                             (json_int_t)max);
    if (body && glob)
        json_object_set_new(body, "glob", json_string(glob));
    json_t *reply;
    r = file_call(&reply, res, env, "/v1/file/grep", body);
    if (r < 0 || !reply)
        return r;
    r = matches_text(res, reply);
    json_decref(reply);
    return r;
}

#define DESCRIPTION_PARAM                                                                          \
    "\"description\":{\"type\":\"string\",\"description\":\"Why, in a few words.\"}"

const tool_def tool_ls = {
    .name = "ls",
    .sandbox = true,
    .description = "List the files and directories under a path, two levels deep.",
    .parameters =
        "{\"type\":\"object\",\"properties\":{" DESCRIPTION_PARAM ","
        "\"path\":{\"type\":\"string\",\"description\":\"Absolute path of a directory.\"}},"
        "\"required\":[\"description\",\"path\"]}",
    .run = ls_run,
};

const tool_def tool_read_file = {
    .name = "read_file",
    .sandbox = true,
    .description = "Read a text file, optionally a range of lines (1-based, inclusive).",
    .parameters = "{\"type\":\"object\",\"properties\":{" DESCRIPTION_PARAM ","
                  "\"path\":{\"type\":\"string\"},"
                  "\"start_line\":{\"type\":\"integer\"},\"end_line\":{\"type\":\"integer\"}},"
                  "\"required\":[\"description\",\"path\"]}",
    .run = read_run,
};

const tool_def tool_write_file = {
    .name = "write_file",
    .sandbox = true,
    .description = "Write text to a file (created with its directories, or replaced; "
                   "append adds to its end). An existing file must be read first.",
    .parameters = "{\"type\":\"object\",\"properties\":{" DESCRIPTION_PARAM ","
                  "\"path\":{\"type\":\"string\"},\"content\":{\"type\":\"string\"},"
                  "\"append\":{\"type\":\"boolean\"}},"
                  "\"required\":[\"description\",\"path\",\"content\"]}",
    .run = write_run,
};

const tool_def tool_str_replace = {
    .name = "str_replace",
    .sandbox = true,
    .description = "Replace a unique string in a file (or every occurrence with replace_all). "
                   "The file must be read first.",
    .parameters = "{\"type\":\"object\",\"properties\":{" DESCRIPTION_PARAM ","
                  "\"path\":{\"type\":\"string\"},\"old_str\":{\"type\":\"string\"},"
                  "\"new_str\":{\"type\":\"string\"},\"replace_all\":{\"type\":\"boolean\"}},"
                  "\"required\":[\"description\",\"path\",\"old_str\",\"new_str\"]}",
    .run = str_replace_run,
};

const tool_def tool_glob = {
    .name = "glob",
    .sandbox = true,
    .description = "Find files whose path below a directory matches a glob pattern "
                   "(** spans directories).",
    .parameters = "{\"type\":\"object\",\"properties\":{" DESCRIPTION_PARAM ","
                  "\"pattern\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"},"
                  "\"include_dirs\":{\"type\":\"boolean\"},"
                  "\"max_results\":{\"type\":\"integer\",\"maximum\":1000}},"
                  "\"required\":[\"description\",\"pattern\",\"path\"]}",
    .run = glob_run,
};

const tool_def tool_grep = {
    .name = "grep",
    .sandbox = true,
    .description = "Search file contents below a path for a regular expression (or a literal "
                   "string); glob filters the files.",
    .parameters = "{\"type\":\"object\",\"properties\":{" DESCRIPTION_PARAM ","
                  "\"pattern\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"},"
                  "\"glob\":{\"type\":\"string\"},\"literal\":{\"type\":\"boolean\"},"
                  "\"case_sensitive\":{\"type\":\"boolean\"},"
                  "\"max_results\":{\"type\":\"integer\",\"maximum\":500}},"
                  "\"required\":[\"description\",\"pattern\",\"path\"]}",
    .run = grep_run,
};
