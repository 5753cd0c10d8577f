/* fawn sandbox: run commands in a thread's sandbox from the shell. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "base/base.h"
#include "base/json.h"
#include "cli/cli.h"
#include "config/config.h"
#include "sandbox/client.h"
#include "sandbox/local.h"

/* A CLI-started box stays up this long after the last request so later
 * invocations (and their shell sessions) reuse it. */
#define CLI_IDLE_EXIT_S 600
/* Slack on top of the command's own timeout for the HTTP exchange. */
#define CALL_SLACK_MS 15000

static void usage(FILE *out) {
    fprintf(out, "usage: fawn sandbox exec --user U --thread T [--session S] [--timeout N]\n"
                 "                         [--config FILE] -- COMMAND...\n"
                 "       fawn sandbox stop --user U --thread T [--config FILE]\n"
                 "       fawn sandbox ls [--config FILE]\n\n"
                 "exec runs COMMAND (joined with spaces, run by bash) in the sandbox of thread T\n"
                 "of user U, starting the sandbox if needed, prints its output and exits with\n"
                 "its exit code (124 on timeout). With --session, cwd and exported variables\n"
                 "persist between invocations that name the same session. The thread's files\n"
                 "live under $FAWN_HOME/users/U/threads/T/user-data and persist.\n"
                 "stop shuts the thread's sandbox down (its files stay).\n"
                 "ls lists the sandboxes the running gateway holds (owner, thread, generation,\n"
                 "state, holders, idle time, fenced); with no gateway answering, the sandboxes\n"
                 "recorded on this host.\n");
}

typedef struct sandbox_args {
    const char *user, *thread, *session, *config;
    long timeout;
    char *command; /* malloc'd */
} sandbox_args;

static int join_command(sandbox_args *a, int argc, char **argv) {
    fbuf b = {.limit = 64 * 1024};
    for (int i = 0; i < argc; i++)
        if ((i && fbuf_append(&b, " ", 1) < 0) || fbuf_append(&b, argv[i], strlen(argv[i])) < 0)
            return fawn_err(FAWN_E2BIG, "the command is longer than 64 KiB");
    a->command = fbuf_steal(&b);
    return a->command ? 0 : FAWN_ENOMEM;
}

static int parse_args(sandbox_args *a, int argc, char **argv, bool want_command) {
    static const struct option opts[] = {
        {"user", required_argument, 0, 'u'},
        {"thread", required_argument, 0, 't'},
        {"session", required_argument, 0, 's'},
        {"timeout", required_argument, 0, 'T'},
        {"config", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *a = (sandbox_args){0};
    int c;
    char *end;
    while ((c = getopt_long(argc, argv, "+", opts, NULL)) != -1) {
        switch (c) {
        case 'u': a->user = optarg; break;
        case 't': a->thread = optarg; break;
        case 's': a->session = optarg; break;
        case 'c': a->config = optarg; break;
        case 'T':
            a->timeout = strtol(optarg, &end, 10);
            if (*end || a->timeout < 1 || a->timeout > 86400)
                return fawn_err(FAWN_EINVAL, "--timeout must be 1..86400 seconds");
            break;
        case 'h': usage(stdout); exit(0);
        default: return fawn_err(FAWN_EINVAL, "unknown option");
        }
    }
    if (!a->user || !a->thread)
        return fawn_err(FAWN_EINVAL, "--user and --thread are required");
    if (want_command && optind >= argc)
        return fawn_err(FAWN_EINVAL, "no command given (put it after --)");
    return want_command ? join_command(a, argc - optind, argv + optind) : 0;
}

static int create_session(const local_box *b, const char *session) {
    json_t *reply = NULL, *body = json_pack("{s:s}", "id", session);
    int status = 0;
    int r = box_call(&reply, &status, b->socket_path, "POST", "/v1/shell/sessions", body, 10000);
    if (r == 0 && status != 200)
        r = fawn_err(FAWN_EINVAL, "creating session: %s",
                     json_string_value(json_object_get(reply, "detail")) ?: "failed");
    json_decref(body);
    json_decref(reply);
    return r;
}

/* Prints the command's output and returns its exit code. */
static int print_result(const json_t *reply, long timeout) {
    const char *out = json_string_value(json_object_get(reply, "stdout"));
    const char *err = json_string_value(json_object_get(reply, "stderr"));
    const char *status = json_string_value(json_object_get(reply, "status"));
    json_t *code = json_object_get(reply, "exit_code");
    if (out)
        fputs(out, stdout);
    if (err)
        fputs(err, stderr);
    fflush(stdout);
    if (!status || !json_is_integer(code)) {
        fprintf(stderr, "fawn: malformed reply from the sandbox\n");
        return 1;
    }
    const json_t *disk = json_object_get(reply, "disk");
    if (json_is_object(disk))
        fprintf(stderr,
                "fawn: the thread's files use %s%lld MiB, more than their limit of %lld MiB\n",
                json_is_true(json_object_get(disk, "complete")) ? "" : "at least ",
                (long long)(json_integer_value(json_object_get(disk, "used_bytes")) >> 20),
                (long long)(json_integer_value(json_object_get(disk, "limit_bytes")) >> 20));
    if (strcmp(status, "timeout") == 0)
        fprintf(stderr, "fawn: command timed out after %ld second(s) and was terminated\n",
                timeout);
    else if (strcmp(status, "error") == 0)
        fprintf(stderr, "fawn: %s\n",
                json_string_value(json_object_get(reply, "error")) ?: "error");
    return (int)json_integer_value(code);
}

static int run_exec(const sandbox_args *a, const fawn_config *cfg) {
    local_box b;
    local_spec spec = {
        .cfg = cfg, .user = a->user, .thread = a->thread, .idle_exit_s = CLI_IDLE_EXIT_S};
    int r = local_box_ensure(&b, &spec);
    /* Only a gateway serves the egress proxy: from here an allowlist
     * sandbox's commands have no way out (a gateway restarts the box). */
    if (r == 0 && b.egress_fd >= 0)
        close(b.egress_fd);
    if (r == 0 && a->session)
        r = create_session(&b, a->session);
    if (r < 0)
        return r;
    long timeout = a->timeout ? a->timeout : (long)cfg->sandbox.exec_timeout_s;
    json_t *body = json_pack("{s:s, s:I}", "command", a->command, "timeout_s", (json_int_t)timeout);
    if (a->session)
        json_object_set_new(body, "session_id", json_string(a->session));
    json_t *reply = NULL;
    int status = 0;
    r = box_call(&reply, &status, b.socket_path, "POST", "/v1/shell/exec", body,
                 (int)(timeout * 1000 + CALL_SLACK_MS));
    json_decref(body);
    if (r == 0 && status != 200)
        r = fawn_err(FAWN_EINVAL, "%s",
                     json_string_value(json_object_get(reply, "detail")) ?: "failed");
    if (r == 0)
        r = print_result(reply, timeout);
    json_decref(reply);
    return r;
}

/* fawn sandbox ls [--config FILE] */
static int run_ls(int argc, char **argv) {
    const char *config = NULL;
    if (argc == 3 && strcmp(argv[1], "--config") == 0)
        config = argv[2];
    else if (argc != 1) {
        usage(stderr);
        return 2;
    }
    fawn_config cfg = {0};
    int r = config_load(&cfg, config);
    if (r == 0)
        r = cli_sandbox_ls(&cfg);
    if (r < 0)
        fprintf(stderr, "fawn sandbox ls: %s\n", fawn_errmsg());
    config_free(&cfg);
    return r < 0 ? 1 : 0;
}

int cli_sandbox(int argc, char **argv) {
    if (argc >= 2 && argc <= 3 && strcmp(argv[1], "launch-helper") == 0)
        return local_launch_helper_main(argc == 3 && strcmp(argv[2], "netns") == 0);
    if (argc >= 2 && strcmp(argv[1], "ls") == 0)
        return run_ls(argc - 1, argv + 1);
    if (argc < 2 || (strcmp(argv[1], "exec") != 0 && strcmp(argv[1], "stop") != 0)) {
        usage(argc < 2 ? stderr : (strcmp(argv[1], "--help") == 0 ? stdout : stderr));
        return argc >= 2 && strcmp(argv[1], "--help") == 0 ? 0 : 2;
    }
    bool exec = strcmp(argv[1], "exec") == 0;
    sandbox_args a;
    fawn_config cfg = {0};
    int r = parse_args(&a, argc - 1, argv + 1, exec);
    if (r < 0) {
        fprintf(stderr, "fawn sandbox: %s\n", fawn_errmsg());
        usage(stderr);
        free(a.command);
        return 2;
    }
    r = config_load(&cfg, a.config);
    if (r == 0)
        r = exec ? run_exec(&a, &cfg) : local_box_stop(&cfg, a.user, a.thread);
    if (r < 0)
        fprintf(stderr, "fawn sandbox: %s\n", fawn_errmsg());
    free(a.command);
    config_free(&cfg);
    return r < 0 ? 1 : r;
}
