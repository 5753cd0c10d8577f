/* Offline models: script and replay fixtures, and recording one
 * (model.h, "calling a configured model").
 *
 * A fixture is one JSON object:
 *   {"scenario": "...", "model": "...",
 *    "replies": [reply, ...],                          (script)
 *    "turns": [{"conversation_hash": "64 hex", "output": reply}, ...]}  (replay, record)
 * where a reply is {"content": "...", "tool_calls": [{"name", "args": {...}}],
 * "finish_reason"?: "stop" | "length" | "content_filter" | ...}. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model/model.h"
#include "base/json.h"

/* 64 MiB: a fixture is read whole; far past any recorded session. */
#define FIXTURE_FILE_MAX ((size_t)64 << 20)

struct model_fixture {
    enum model_provider provider;
    char *path; /* NULL for the built-in demo */
    json_t *doc;
    pthread_mutex_t lock; /* record appends */
};

/* The built-in demo: inspect the uploads, run a command, write a report to
 * outputs with it, present the report. */
#define DEMO_MEASURE                                                                               \
    "cd /mnt/user-data/uploads && for f in *; do [ -f \"$f\" ] && printf '%s: %s lines, %s "       \
    "bytes\\n' \"$f\" \"$(wc -l < \"$f\")\" \"$(wc -c < \"$f\")\"; done; uname -sr; id -u"
#define DEMO_REPORT                                                                                \
    "{ echo '# Upload report'; echo; cd /mnt/user-data/uploads && for f in *; do [ -f \"$f\" ] "   \
    "&& echo \"- $f: $(wc -l < \"$f\") lines, $(wc -c < \"$f\") bytes\"; done; echo; "             \
    "echo \"Made in a sandbox running $(uname -sr).\"; } > /mnt/user-data/outputs/report.md "      \
    "&& cat /mnt/user-data/outputs/report.md"
#define DEMO_REPORT_PATH "/mnt/user-data/outputs/report.md"

static json_t *demo_reply(const char *content, const char *tool, json_t *args) {
    if (!tool)
        return json_pack("{s:s}", "content", content);
    return json_pack("{s:s, s:[{s:s, s:o}]}", "content", content, "tool_calls", "name", tool,
                     "args", args);
}

static json_t *demo_doc(void) {
    return json_pack(
        "{s:s, s:[o, o, o, o, o]}", "scenario", "demo", "replies",
        demo_reply("Let me look at the files you uploaded.", "ls",
                   json_pack("{s:s, s:s}", "description", "list the uploads", "path",
                             "/mnt/user-data/uploads")),
        demo_reply("Now I will measure them inside the sandbox.", "bash",
                   json_pack("{s:s, s:s}", "description", "count lines and bytes", "command",
                             DEMO_MEASURE)),
        demo_reply(
            "I will save a report in outputs.", "bash",
            json_pack("{s:s, s:s}", "description", "write the report", "command", DEMO_REPORT)),
        demo_reply("Here is the report.", "present_files",
                   json_pack("{s:[s]}", "filepaths", DEMO_REPORT_PATH)),
        demo_reply("Done: I listed your uploads, measured each one in the sandbox and saved "
                   "the summary as " DEMO_REPORT_PATH ".",
                   NULL, NULL));
}

static int reply_check(const json_t *reply, const char *where, size_t i) {
    const json_t *content = json_object_get(reply, "content");
    const json_t *calls = json_object_get(reply, "tool_calls");
    bool ok = json_is_object(reply) && (!content || json_is_string(content)) &&
              (!calls || json_is_array(calls));
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c) {
        ok = ok && json_is_string(json_object_get(c, "name")) &&
             json_is_object(json_object_get(c, "args"));
    }
    return ok ? 0
              : fawn_err(FAWN_ECONFIG,
                         "fixture %s[%zu]: a reply is {content, tool_calls: "
                         "[{name, args}]}",
                         where, i);
}

static int fixture_check(const json_t *doc, enum model_provider provider) {
    if (!json_is_object(doc))
        return fawn_err(FAWN_ECONFIG, "fixture: must be a JSON object");
    const json_t *replies = json_object_get(doc, "replies");
    const json_t *turns = json_object_get(doc, "turns");
    if (provider == MODEL_SCRIPT && !json_is_array(replies))
        return fawn_err(FAWN_ECONFIG, "fixture: a script needs a list of replies");
    if (provider != MODEL_SCRIPT && !json_is_array(turns))
        return fawn_err(FAWN_ECONFIG, "fixture: replay needs a list of turns");
    size_t i;
    json_t *v;
    int r = 0;
    json_array_foreach(replies, i, v) {
        if (r == 0)
            r = reply_check(v, "replies", i);
    }
    json_array_foreach(turns, i, v) {
        const char *hash = json_string_value(json_object_get(v, "conversation_hash"));
        if (r == 0 && (!hash || strlen(hash) != 64))
            r = fawn_err(FAWN_ECONFIG, "fixture turns[%zu]: conversation_hash must be 64 hex", i);
        if (r == 0)
            r = reply_check(json_object_get(v, "output"), "turns", i);
    }
    return r;
}

static int fixture_new(model_fixture **out, json_t *doc, const char *path,
                       enum model_provider provider) {
    int r = fixture_check(doc, provider);
    model_fixture *f = r == 0 ? calloc(1, sizeof *f) : NULL;
    if (r == 0 && !f)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0 && path && !(f->path = strdup(path)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        free(f);
        json_decref(doc);
        return r;
    }
    f->provider = provider;
    f->doc = doc;
    pthread_mutex_init(&f->lock, NULL);
    *out = f;
    return 0;
}

int model_fixture_demo(model_fixture **out) {
    *out = NULL;
    json_t *doc = demo_doc();
    return doc ? fixture_new(out, doc, NULL, MODEL_SCRIPT) : fawn_err(FAWN_ENOMEM, "out of memory");
}

int model_fixture_load(model_fixture **out, const char *path, enum model_provider provider) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0 && provider == MODEL_RECORD && errno == ENOENT)
        return fixture_new(out, json_pack("{s:[]}", "turns"), path, provider);
    if (fd < 0)
        return fawn_err_sys(FAWN_ECONFIG, errno, "fixture %s", path);
    char *text = NULL;
    size_t len = 0;
    int r = fawn_read_all(&text, &len, fd, FIXTURE_FILE_MAX);
    close(fd);
    if (r < 0)
        return fawn_err(FAWN_ECONFIG, "fixture %s: %s", path, fawn_errmsg());
    json_error_t jerr;
    json_t *doc = json_loadb(text, len, 0, &jerr);
    free(text);
    if (!doc)
        return fawn_err(FAWN_ECONFIG, "fixture %s: line %d: %s", path, jerr.line, jerr.text);
    r = fixture_new(out, doc, path, provider);
    return r == FAWN_ECONFIG ? fawn_err(FAWN_ECONFIG, "%s (%s)", fawn_errmsg(), path) : r;
}

void model_fixture_free(model_fixture *f) {
    if (!f)
        return;
    json_decref(f->doc);
    free(f->path);
    pthread_mutex_destroy(&f->lock);
    free(f);
}

/* ---- conversation hashes ---- */

static bool digits(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (!isdigit((unsigned char)s[i]))
            return false;
    return true;
}

/* Length of a UUID at s (36), or 0. */
static size_t uuid_at(const char *s) {
    static const char shape[] = "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx";
    for (size_t i = 0; i < sizeof shape - 1; i++)
        if (shape[i] == '-' ? s[i] != '-' : !isxdigit((unsigned char)s[i]))
            return 0;
    return sizeof shape - 1;
}

/* Length of a YYYY-MM-DD date at s, with a time (THH:MM:SS[.fff][Z|±HH:MM])
 * when one follows; 0 when none. *timestamp says which. */
static size_t date_at(const char *s, bool *timestamp) {
    if (!digits(s, 4) || s[4] != '-' || !digits(s + 5, 2) || s[7] != '-' || !digits(s + 8, 2))
        return 0;
    size_t n = 10;
    *timestamp = (s[n] == 'T' || s[n] == ' ') && digits(s + n + 1, 2) && s[n + 3] == ':' &&
                 digits(s + n + 4, 2) && s[n + 6] == ':' && digits(s + n + 7, 2);
    if (!*timestamp)
        return n;
    n += 9;
    if (s[n] == '.')
        for (n++; isdigit((unsigned char)s[n]); n++) {
        }
    if (s[n] == 'Z')
        n++;
    else if ((s[n] == '+' || s[n] == '-') && digits(s + n + 1, 2) && s[n + 3] == ':' &&
             digits(s + n + 4, 2))
        n += 6;
    return n;
}

/* text with UUIDs, timestamps and dates replaced by placeholders. */
static json_t *normalized_text(const char *text) {
    fbuf b = {0};
    int r = 0;
    for (const char *p = text; r == 0 && *p;) {
        bool ts = false;
        size_t n;
        bool boundary = p == text || !isalnum((unsigned char)p[-1]);
        if (boundary && (n = uuid_at(p)) && !isalnum((unsigned char)p[n])) {
            r = fbuf_printf(&b, "<uuid>");
        } else if (boundary && (n = date_at(p, &ts)) && !isdigit((unsigned char)p[n])) {
            r = fbuf_printf(&b, ts ? "<timestamp>" : "<date>");
        } else {
            n = 1;
            r = fbuf_append(&b, p, 1);
        }
        p += n;
    }
    json_t *out = r == 0 ? json_stringn(b.data ? b.data : "", b.len) : NULL;
    fbuf_free(&b);
    return out;
}

/* The hashed form of one stored message, or NULL for system messages. */
static json_t *hashed_message(const json_t *m) {
    const char *type = json_string_value(json_object_get(m, "type"));
    if (!type || strcmp(type, "system") == 0)
        return NULL;
    const json_t *content = json_object_get(m, "content");
    json_t *o = json_pack("{s:s, s:o}", "type", type, "content",
                          json_is_string(content)
                              ? normalized_text(json_string_value(content))
                              : json_deep_copy(content ? content : json_null()));
    const char *name = json_string_value(json_object_get(m, "name"));
    if (o && name)
        json_object_set_new(o, "name", json_string(name));
    const json_t *calls = json_object_get(m, "tool_calls");
    if (o && json_array_size(calls) > 0) {
        json_t *list = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(calls, i, c) {
            json_array_append_new(list,
                                  json_pack("{s:O?, s:O?}", "name", json_object_get(c, "name"),
                                            "args", json_object_get(c, "args")));
        }
        json_object_set_new(o, "tool_calls", list);
    }
    return o;
}

int model_conversation_hash(char out[65], const json_t *conversation) {
    out[0] = '\0';
    json_t *list = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(conversation, i, m) {
        json_t *h = hashed_message(m);
        if (h)
            json_array_append_new(list, h);
    }
    char *text = list ? json_dumps(list, JSON_SORT_KEYS | JSON_COMPACT | JSON_ENSURE_ASCII) : NULL;
    json_decref(list);
    if (!text)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    fawn_sha256_hex(out, text, strlen(text));
    free(text);
    return 0;
}

/* ---- answers ---- */

/* An assistant message in OpenAI shape from a fixture reply. */
static int reply_from(model_reply *out, const json_t *reply) {
    memset(out, 0, sizeof *out);
    out->prompt_tokens = out->completion_tokens = -1;
    const json_t *content = json_object_get(reply, "content");
    json_t *msg = json_pack("{s:s, s:s}", "role", "assistant", "content",
                            json_is_string(content) ? json_string_value(content) : "");
    const json_t *calls = json_object_get(reply, "tool_calls");
    json_t *list = json_array_size(calls) ? json_array() : NULL;
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c) {
        char id[32] = "call_";
        fawn_random_hex(id + 5, 12); /* 24 hex digits */
        char *args = json_dumps(json_object_get(c, "args"), JSON_COMPACT);
        json_array_append_new(
            list, json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function",
                            "name", json_object_get(c, "name"), "arguments", args ? args : "{}"));
        free(args);
    }
    if (msg && list)
        json_object_set_new(msg, "tool_calls", list);
    const char *finish = json_string_value(json_object_get(reply, "finish_reason"));
    snprintf(out->finish_reason, sizeof out->finish_reason, "%s",
             finish ? finish
             : list ? "tool_calls"
                    : "stop");
    out->message = msg;
    return msg ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int model_fixture_answer(model_reply *out, model_fixture *f, const char *model_name,
                         const model_request *req) {
    *out = (model_reply){.prompt_tokens = -1, .completion_tokens = -1};
    if (f->provider == MODEL_SCRIPT) {
        const json_t *replies = json_object_get(f->doc, "replies");
        if (req->call_index >= json_array_size(replies))
            return fawn_err(FAWN_ENOENT, "model %s: the script has no reply %u (it has %zu)",
                            model_name, req->call_index + 1, json_array_size(replies));
        return reply_from(out, json_array_get(replies, req->call_index));
    }
    char hash[65];
    int r = model_conversation_hash(hash, req->conversation);
    if (r < 0)
        return r;
    pthread_mutex_lock(&f->lock);
    size_t i;
    json_t *t;
    const json_t *found = NULL;
    json_array_foreach(json_object_get(f->doc, "turns"), i, t) {
        const char *h = json_string_value(json_object_get(t, "conversation_hash"));
        if (!found && h && strcmp(h, hash) == 0)
            found = json_object_get(t, "output");
    }
    r = found ? reply_from(out, found)
              : fawn_err(FAWN_ENOENT, "model %s: no recorded reply for conversation %s", model_name,
                         hash);
    pthread_mutex_unlock(&f->lock);
    return r;
}

/* A fixture reply {content, tool_calls: [{name, args}], finish_reason}
 * from a model's answer. */
static json_t *reply_to_fixture(const model_reply *reply) {
    const json_t *msg = reply->message;
    json_t *out = json_pack("{s:s, s:s}", "content",
                            json_string_value(json_object_get(msg, "content")) ?: "",
                            "finish_reason", reply->finish_reason);
    json_t *calls = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(json_object_get(msg, "tool_calls"), i, c) {
        const json_t *fn = json_object_get(c, "function");
        const char *args = json_string_value(json_object_get(fn, "arguments"));
        json_t *parsed = args ? json_loads(args, 0, NULL) : NULL;
        json_array_append_new(calls, json_pack("{s:O, s:o}", "name", json_object_get(fn, "name"),
                                               "args", parsed ? parsed : json_object()));
    }
    if (out && json_array_size(calls))
        json_object_set(out, "tool_calls", calls);
    json_decref(calls);
    return out;
}

/* Writes doc to path through a temporary file and a rename. */
static int write_atomically(const char *path, const json_t *doc) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int r = json_dump_file(doc, tmp, JSON_INDENT(1) | JSON_SORT_KEYS) == 0
                ? 0
                : fawn_err(FAWN_EIO, "cannot write %s", tmp);
    int fd = r == 0 ? open(tmp, O_RDONLY | O_CLOEXEC) : -1;
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
    if (r == 0 && rename(tmp, path) < 0)
        r = fawn_err_sys(FAWN_EIO, errno, "rename %s", tmp);
    return r;
}

int model_fixture_record(model_fixture *f, const model_request *req, const model_reply *reply) {
    char hash[65];
    int r = model_conversation_hash(hash, req->conversation);
    json_t *turn = r == 0 ? json_pack("{s:s, s:o}", "conversation_hash", hash, "output",
                                      reply_to_fixture(reply))
                          : NULL;
    if (r == 0 && !turn)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0)
        return r;
    pthread_mutex_lock(&f->lock);
    json_array_append_new(json_object_get(f->doc, "turns"), turn);
    r = write_atomically(f->path, f->doc);
    pthread_mutex_unlock(&f->lock);
    return r;
}
