/* fawn chat: sends one message to the lead agent of a running gateway and
 * prints the run as it streams: the agent's words, each tool call and its
 * structured status with the start of its output. Signs in with an API
 * token (--token or $FAWN_API_TOKEN). */
#include <curl/curl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/model.h"
#include "base/json.h"
#include "cli/cli.h"
#include "config/config.h"

/* Lines of a tool's output shown, and the longest line. */
#define CHAT_OUTPUT_LINES 8
#define CHAT_LINE_MAX 160
/* Largest answer of the thread request. */
#define CHAT_REPLY_MAX ((size_t)1 << 20)

static void usage(FILE *out) {
    fprintf(out,
            "usage: fawn chat [--thread ID] [--model NAME] [--url URL] [--token TOKEN]\n"
            "                 [--config FILE] MESSAGE\n\n"
            "Sends MESSAGE to the lead agent of the gateway at URL (default: server.host and\n"
            "server.port of the configuration) and streams the run: replies, tool calls and\n"
            "their status. Without --thread a new thread is started; its id is printed so the\n"
            "conversation can go on. The API token comes from --token or $FAWN_API_TOKEN\n"
            "(create one with POST /api/auth/tokens).\n");
}

typedef struct chat_args {
    const char *thread, *model, *url, *token, *config, *message;
} chat_args;

static int parse_args(chat_args *a, int argc, char **argv) {
    static const struct option opts[] = {{"thread", required_argument, 0, 't'},
                                         {"model", required_argument, 0, 'm'},
                                         {"url", required_argument, 0, 'u'},
                                         {"token", required_argument, 0, 'k'},
                                         {"config", required_argument, 0, 'c'},
                                         {"help", no_argument, 0, 'h'},
                                         {0, 0, 0, 0}};
    *a = (chat_args){.token = getenv("FAWN_API_TOKEN")};
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't': a->thread = optarg; break;
        case 'm': a->model = optarg; break;
        case 'u': a->url = optarg; break;
        case 'k': a->token = optarg; break;
        case 'c': a->config = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: return fawn_err(FAWN_EINVAL, "unknown option");
        }
    }
    if (optind != argc - 1 || !argv[optind][0])
        return fawn_err(FAWN_EINVAL, "give one message");
    a->message = argv[optind];
    if (!a->token || !a->token[0])
        return fawn_err(FAWN_EINVAL, "no API token: pass --token or set FAWN_API_TOKEN");
    if (a->thread && !fawn_id_valid(a->thread))
        return fawn_err(FAWN_EINVAL, "--thread must match [A-Za-z0-9_-]{1,64}");
    return 0;
}

/* ---- printing the stream ---- */

typedef struct chat_view {
    sse_parser sse;
    bool failed;       /* an error event came */
    bool ended;        /* the end event came */
    char streamed[64]; /* id of the reply whose text was printed as it streamed */
} chat_view;

/* The first CHAT_OUTPUT_LINES lines of text, indented. */
static void print_output(const char *text) {
    int lines = 0;
    for (const char *p = text; *p && lines < CHAT_OUTPUT_LINES; lines++) {
        size_t n = strcspn(p, "\n");
        printf("    %.*s%s\n", (int)(n > CHAT_LINE_MAX ? CHAT_LINE_MAX : n), p,
               n > CHAT_LINE_MAX ? "..." : "");
        p += n + (p[n] == '\n');
        if (lines == CHAT_OUTPUT_LINES - 1 && *p)
            printf("    ...\n");
    }
}

static void print_tool_call(const json_t *c) {
    const json_t *args = json_object_get(c, "args");
    const char *command = json_string_value(json_object_get(args, "command"));
    char *text = command ? NULL : json_dumps(args, JSON_COMPACT);
    printf("  -> %s %s\n", json_string_value(json_object_get(c, "name")) ?: "?",
           command ? command
           : text  ? text
                   : "");
    free(text);
}

/* A piece of a reply's text as the model streams it (messages-tuple). */
static void print_chunk(chat_view *v, const json_t *chunk) {
    const char *id = json_string_value(json_object_get(chunk, "id"));
    const char *text = json_string_value(json_object_get(chunk, "content"));
    if (!id || !text || !text[0])
        return;
    if (strcmp(v->streamed, id) != 0) {
        snprintf(v->streamed, sizeof v->streamed, "%s", id);
        printf("agent: ");
    }
    fputs(text, stdout);
}

static void print_message(chat_view *v, const json_t *m) {
    const char *type = json_string_value(json_object_get(m, "type"));
    const char *content = json_string_value(json_object_get(m, "content"));
    const char *id = json_string_value(json_object_get(m, "id"));
    if (type && strcmp(type, "ai") == 0) {
        if (id && strcmp(v->streamed, id) == 0)
            printf("\n"); /* its text is out already */
        else if (content && content[0])
            printf("agent: %s\n", content);
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(m, "tool_calls"), i, c) { print_tool_call(c); }
    } else if (type && strcmp(type, "tool") == 0) {
        const json_t *st = json_object_get(json_object_get(m, "additional_kwargs"), "tool_status");
        const json_t *code = json_object_get(st, "exit_code");
        printf("  <- %s [%s%s%s", json_string_value(json_object_get(m, "name")) ?: "?",
               json_string_value(json_object_get(st, "status")) ?: "?",
               json_string_value(json_object_get(st, "error_type")) ? ": " : "",
               json_string_value(json_object_get(st, "error_type")) ?: "");
        if (json_is_integer(code))
            printf(", exit %lld", (long long)json_integer_value(code));
        printf(", %lld ms]\n", (long long)json_integer_value(json_object_get(st, "duration_ms")));
        print_output(content ? content : "");
    }
}

static int on_event(void *ctx, const char *event, const char *data, size_t len) {
    chat_view *v = ctx;
    json_t *d = json_loadb(data, len, JSON_DECODE_ANY, NULL);
    if (strcmp(event, "updates") == 0) {
        const char *node;
        json_t *update;
        json_object_foreach(d, node, update) {
            size_t i;
            json_t *m;
            json_array_foreach(json_object_get(update, "messages"), i, m) {
                if (strcmp(node, "input") != 0)
                    print_message(v, m);
            }
        }
    } else if (strcmp(event, "messages") == 0) {
        const json_t *chunk = json_array_get(d, 0);
        const char *type = json_string_value(json_object_get(chunk, "type"));
        if (type && strcmp(type, "AIMessageChunk") == 0)
            print_chunk(v, chunk);
    } else if (strcmp(event, "custom") == 0) {
        const char *type = json_string_value(json_object_get(d, "type"));
        if (type && strcmp(type, "llm_retry") == 0 && v->streamed[0]) {
            printf("\n"); /* the retry streams its reply again, on a line of its own */
            v->streamed[0] = '\0';
        }
        if (type && strcmp(type, "llm_retry") == 0)
            printf("  (model retry after attempt %lld: %s, waiting %lld ms)\n",
                   (long long)json_integer_value(json_object_get(d, "attempt")),
                   json_string_value(json_object_get(d, "reason")) ?: "?",
                   (long long)json_integer_value(json_object_get(d, "wait_ms")));
        else if (type && strcmp(type, "run_stopped") == 0)
            printf("  (stopped: %s)\n",
                   json_string_value(json_object_get(d, "stop_reason")) ?: "?");
    } else if (strcmp(event, "error") == 0) {
        fprintf(stderr, "error: %s\n", json_string_value(json_object_get(d, "message")) ?: data);
        v->failed = true;
    } else if (strcmp(event, "end") == 0) {
        v->ended = true;
    }
    fflush(stdout);
    json_decref(d);
    return 0;
}

static size_t on_stream_bytes(char *p, size_t size, size_t n, void *ctx) {
    chat_view *v = ctx;
    return sse_feed(&v->sse, p, size * n) == 0 ? size * n : 0;
}

/* ---- requests ---- */

static size_t on_reply_bytes(char *p, size_t size, size_t n, void *ctx) {
    fbuf *b = ctx;
    if (b->len + size * n > CHAT_REPLY_MAX || fbuf_append(b, p, size * n) < 0)
        return 0;
    return size * n;
}

/* POSTs body to base + path with the token; the answer's status into *status. */
static int post(long *status, const char *base, const char *path, const char *token,
                const char *body, curl_write_callback on_bytes, void *ctx) {
    CURL *c = curl_easy_init();
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    char url[2048], auth[1024];
    snprintf(url, sizeof url, "%s%s", base, path);
    snprintf(auth, sizeof auth, "Authorization: Bearer %s", token);
    struct curl_slist *h = curl_slist_append(NULL, auth);
    h = curl_slist_append(h, "Content-Type: application/json");
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_bytes);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, ctx);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    CURLcode rc = curl_easy_perform(c);
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, status);
    curl_slist_free_all(h);
    curl_easy_cleanup(c);
    return rc == CURLE_OK || rc == CURLE_WRITE_ERROR
               ? 0
               : fawn_err(FAWN_EIO, "%s: %s", url, curl_easy_strerror(rc));
}

/* Creates thread id (a new one when NULL; an existing id is kept). */
static int thread_open(char out[65], const chat_args *a, const char *base) {
    json_t *body = a->thread ? json_pack("{s:s}", "thread_id", a->thread) : json_object();
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    fbuf reply = {0};
    long status = 0;
    int r = text ? post(&status, base, "/api/threads", a->token, text, on_reply_bytes, &reply)
                 : fawn_err(FAWN_ENOMEM, "out of memory");
    free(text);
    json_t *t = r == 0 ? json_loadb(reply.data ? reply.data : "", reply.len, 0, NULL) : NULL;
    const char *id = json_string_value(json_object_get(t, "thread_id"));
    if (r == 0 && (status != 200 || !id))
        r = fawn_err(FAWN_EIO, "creating the thread failed (HTTP %ld): %.*s", status,
                     (int)(reply.len > 300 ? 300 : reply.len), reply.data ? reply.data : "");
    if (r == 0)
        snprintf(out, 65, "%s", id);
    json_decref(t);
    fbuf_free(&reply);
    return r;
}

static int chat(const chat_args *a, const char *base) {
    char thread[65];
    int r = thread_open(thread, a, base);
    if (r < 0)
        return r;
    printf("thread %s (go on with: fawn chat --thread %s ...)\n", thread, thread);
    json_t *body = json_pack("{s:s, s:{s:[{s:s, s:s}]}, s:[s, s, s], s:{s:s?}}", "assistant_id",
                             "lead_agent", "input", "messages", "type", "human", "content",
                             a->message, "stream_mode", "updates", "custom", "messages-tuple",
                             "context", "model_name", a->model);
    char *text = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    char path[128];
    snprintf(path, sizeof path, "/api/threads/%s/runs/stream", thread);
    chat_view v = {0};
    sse_init(&v.sse, on_event, &v);
    long status = 0;
    r = text ? post(&status, base, path, a->token, text, on_stream_bytes, &v)
             : fawn_err(FAWN_ENOMEM, "out of memory");
    free(text);
    sse_free(&v.sse);
    if (r == 0 && status != 200)
        r = fawn_err(FAWN_EIO, "the gateway refused the run (HTTP %ld)", status);
    if (r == 0 && !v.ended)
        r = fawn_err(FAWN_EIO, "the stream ended before the run did");
    if (r == 0 && v.failed)
        r = fawn_err(FAWN_EIO, "the run failed");
    return r;
}

int cli_chat(int argc, char **argv) {
    chat_args a;
    int r = parse_args(&a, argc, argv);
    if (r < 0) {
        fprintf(stderr, "fawn chat: %s\n", fawn_errmsg());
        usage(stderr);
        return 2;
    }
    fawn_config cfg = {0};
    char base[1024];
    if (!a.url && (r = config_load(&cfg, a.config)) == 0)
        snprintf(base, sizeof base, "http://%s:%u", cfg.server.host, cfg.server.port);
    else if (a.url)
        snprintf(base, sizeof base, "%s", a.url);
    size_t n = strlen(base);
    while (r == 0 && n > 0 && base[n - 1] == '/')
        base[--n] = '\0';
    if (r == 0)
        r = chat(&a, base);
    if (r < 0)
        fprintf(stderr, "fawn chat: %s\n", fawn_errmsg());
    config_free(&cfg);
    return r < 0 ? 1 : 0;
}
