/* fawn box --listen: serve the box API over TCP for remote placement (a
 * container, a pod, another host), or on a unix socket (a container with no
 * network, whose socket's directory the gateway binds into it). The box runs in a sandbox built
 * exactly like the local provider's (which serves the same API on a unix socket only fawn can
 * reach), over the given user-data directory. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sodium.h>

#include "base/base.h"
#include "box/attest.h"
#include "broker/broker.h"
#include "sandbox/local.h"
#include "config/config.h"
#include "cli/cli.h"

/* Bearer tokens shorter than this are refused: they must not be guessable. */
#define BOX_TOKEN_MIN 32
/* A token file holds one line. */
#define BOX_TOKEN_MAX 512

static void usage(FILE *out) {
    fprintf(out,
            "usage: fawn box --listen HOST:PORT|unix:SOCKET --token-file PATH [--user-data DIR]\n"
            "                [--skills-dir DIR] [--idle-exit SECONDS] [--config FILE]\n"
            "                [--attest-file PATH [--broker HOST:PORT --broker-clis NAMES]]\n\n"
            "Serves the box API (docs/box-api.md) over TCP for remote placement: as the\n"
            "entry point of a container, a pod or a VM, or on a plain host; with\n"
            "unix:SOCKET, on a unix socket made at that path (mode 0600) instead, for a\n"
            "container with no network (docs/container.md). The box runs\n"
            "in a fresh sandbox like the local provider's, with DIR (default\n"
            "/mnt/user-data) as its /mnt/user-data. Every request must carry the bearer\n"
            "token read from PATH (at least %d characters). Limits, network mode and the\n"
            "command environment come from the configuration (sandbox.*). SIGTERM stops it.\n"
            "With --idle-exit, it exits once no request has come for that long (give it\n"
            "the gateway's sandbox.idle_timeout_s: the gateway talks to the boxes it holds\n"
            "more often), and it exits at once when DIR's workspace, uploads or outputs\n"
            "directory is deleted. --skills-dir names the directory shown read-only at\n"
            "/mnt/skills (default sandbox.skills_dir): give it the FAWN_SKILLS_DIR the\n"
            "gateway passes to the create command, which holds only the skills the\n"
            "user's runs may see. --attest-file (a Kubernetes pod) names the pod's\n"
            "attestation secret: the box then answers POST /v1/attest for the sandbox\n"
            "$FAWN_SANDBOX_ID of $FAWN_USER in the pod $FAWN_POD_UID, whose UID is its\n"
            "generation (docs/kubernetes.md). With it, --broker and --broker-clis relay\n"
            "the commands' calls of the credential broker's CLIs NAMES (comma-separated)\n"
            "to the broker at HOST:PORT, each with a proof made from that secret.\n",
            BOX_TOKEN_MIN);
}

static int listen_tcp(const char *spec) {
    char host[64];
    const char *colon = strrchr(spec, ':');
    if (!colon || (size_t)(colon - spec) >= sizeof host)
        return fawn_err(FAWN_EINVAL, "--listen must be HOST:PORT");
    memcpy(host, spec, (size_t)(colon - spec));
    host[colon - spec] = '\0';
    char *end;
    long port = strtol(colon + 1, &end, 10);
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (*end || port < 1 || port > 65535 || inet_pton(AF_INET, host, &addr.sin_addr) != 1)
        return fawn_err(FAWN_EINVAL, "--listen must be IPv4:PORT, got '%s'", spec);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 128) < 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return fawn_err_sys(FAWN_EIO, e, "listen on %s", spec);
    }
    return fd;
}

/* A unix socket listening at path (a leftover socket there is replaced;
 * anything else is refused), only for its owner. */
static int listen_unix(const char *path) {
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof addr.sun_path || path[0] != '/')
        return fawn_err(FAWN_EINVAL, "--listen unix: needs an absolute path under %zu bytes",
                        sizeof addr.sun_path);
    memcpy(addr.sun_path, path, n + 1);
    struct stat st;
    if (lstat(path, &st) == 0 && (!S_ISSOCK(st.st_mode) || unlink(path) < 0))
        return fawn_err(FAWN_EEXIST, "%s exists and is not a socket that can be replaced", path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    mode_t old = umask(0177);
    int e = fd < 0 || bind(fd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(fd, 128) < 0
                ? errno
                : 0;
    umask(old);
    if (e) {
        if (fd >= 0)
            close(fd);
        return fawn_err_sys(FAWN_EIO, e, "listen on unix:%s", path);
    }
    return fd;
}

/* The listening socket --listen names. */
static int listen_on(const char *spec) {
    return strncmp(spec, "unix:", 5) == 0 ? listen_unix(spec + 5) : listen_tcp(spec);
}

static int read_token(char *out, const char *path) {
    _cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open %s", path);
    ssize_t n = read(fd, out, BOX_TOKEN_MAX);
    if (n < 0)
        return fawn_err_sys(FAWN_EIO, errno, "read %s", path);
    while (n > 0 && (out[n - 1] == '\n' || out[n - 1] == '\r'))
        n--;
    out[n] = '\0';
    if (n < BOX_TOKEN_MIN || strlen(out) != (size_t)n)
        return fawn_err(FAWN_EINVAL, "the token in %s must be at least %d characters", path,
                        BOX_TOKEN_MIN);
    return 0;
}

typedef struct box_args {
    const char *listen, *token_file, *config, *user_data;
    const char *attest_file;          /* NULL: no attestation */
    const char *broker, *broker_clis; /* the broker relay's address and CLIs, or NULL */
    const char *skills_dir;           /* NULL: sandbox.skills_dir */
    uint32_t idle_exit_s;             /* 0 = never */
} box_args;

/* The longest --idle-exit: sandbox.idle_timeout_s's own bound (a week). */
#define BOX_IDLE_EXIT_MAX_S 604800

static int parse_idle_exit(uint32_t *out, const char *text) {
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || end == text || v < 0 || v > BOX_IDLE_EXIT_MAX_S)
        return fawn_err(FAWN_EINVAL, "--idle-exit must be 0..%d seconds", BOX_IDLE_EXIT_MAX_S);
    *out = (uint32_t)v;
    return 0;
}

static int parse_args(box_args *a, int argc, char **argv) {
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'},
        {"token-file", required_argument, 0, 't'},
        {"config", required_argument, 0, 'c'},
        {"user-data", required_argument, 0, 'u'},
        {"idle-exit", required_argument, 0, 'i'},
        {"skills-dir", required_argument, 0, 's'},
        {"attest-file", required_argument, 0, 'a'},
        {"broker", required_argument, 0, 'b'},
        {"broker-clis", required_argument, 0, 'n'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *a = (box_args){.user_data = "/mnt/user-data"};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': a->listen = optarg; break;
        case 't': a->token_file = optarg; break;
        case 'c': a->config = optarg; break;
        case 'u': a->user_data = optarg; break;
        case 's': a->skills_dir = optarg; break;
        case 'a': a->attest_file = optarg; break;
        case 'b': a->broker = optarg; break;
        case 'n': a->broker_clis = optarg; break;
        case 'i':
            if (parse_idle_exit(&a->idle_exit_s, optarg) < 0)
                return FAWN_EINVAL;
            break;
        case 'h': usage(stdout); exit(0);
        default: return fawn_err(FAWN_EINVAL, "unknown option");
        }
    }
    if (!a->listen || !a->token_file)
        return fawn_err(FAWN_EINVAL, "--listen and --token-file are required");
    if ((a->broker || a->broker_clis) && !(a->broker && a->broker_clis && a->attest_file))
        return fawn_err(FAWN_EINVAL, "--broker needs --broker-clis and --attest-file");
    return 0;
}

static volatile sig_atomic_t stop_signal;
static void on_stop(int sig) { stop_signal = sig; }

/* Waits for the box, passing SIGTERM/SIGINT on to it. Returns its exit status. */
static int wait_box(pid_t pid) {
    struct sigaction sa = {.sa_handler = on_stop};
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    for (;;) {
        int st;
        if (waitpid(pid, &st, 0) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
        if (errno != EINTR)
            return 1;
        if (stop_signal)
            kill(pid, SIGTERM);
    }
}

/* The pod's attestation and generation, from --attest-file and the
 * environment its manifest sets (docs/kubernetes.md). */
static int pod_attest_load(box_attest *out, char generation[33], const char *attest_file) {
    int r = box_attest_load(out, attest_file, getenv("FAWN_SANDBOX_ID"), getenv("FAWN_USER"),
                            getenv("FAWN_POD_UID"));
    if (r == 0)
        r = box_attest_generation(generation, out->pod_uid);
    return r;
}

/* The credential broker's relay for the box's commands (started once the
 * box runs); when it cannot start, the box is stopped: a pod whose broker
 * CLIs fail silently is worse than one that does not start. */
static int relay_start(broker_relay **out, const box_args *a, const char *dir,
                       const box_attest *attest, pid_t box) {
    broker_relay_config rc = {.dir = dir,
                              .address = a->broker,
                              .clis = a->broker_clis,
                              .attest_file = a->attest_file,
                              .sandbox_id = attest->sandbox_id,
                              .user = attest->user,
                              .pod_uid = attest->pod_uid};
    int r = broker_relay_start(out, &rc);
    if (r < 0) {
        kill(box, SIGKILL);
        (void)wait_box(box);
    }
    return r;
}

static int serve_tcp(const box_args *a, const fawn_config *cfg, const char *token) {
    char hex[65], sandbox_id[17];
    fawn_sha256_hex(hex, a->user_data, strlen(a->user_data));
    snprintf(sandbox_id, sizeof sandbox_id, "%.16s", hex);
    box_attest attest;
    char pod_generation[33] = "";
    int r = a->attest_file ? pod_attest_load(&attest, pod_generation, a->attest_file) : 0;
    if (r < 0)
        return r;
    _cleanup_close_ int fd = listen_on(a->listen);
    if (fd < 0)
        return fd;
    local_launch_spec spec = {.cfg = cfg,
                              .sandbox_id = sandbox_id,
                              .user_data = a->user_data,
                              .skills = a->skills_dir ? a->skills_dir : cfg->sandbox.skills_dir,
                              .listen_fd = fd,
                              .log_fd = STDERR_FILENO,
                              .token = token,
                              .idle_exit_s = a->idle_exit_s,
                              .die_with_launcher = true,
                              .attest = a->attest_file ? &attest : NULL,
                              .generation = a->attest_file ? pod_generation : NULL};
    char broker_dir[PATH_MAX] = "";
    if (a->broker && (r = local_broker_dir(broker_dir, cfg, sandbox_id)) < 0)
        return r;
    spec.broker_dir = a->broker ? broker_dir : NULL;
    pid_t pid;
    char generation[33];
    r = local_launch(&pid, generation, &spec);
    broker_relay *relay = NULL;
    if (r == 0 && a->broker && (r = relay_start(&relay, a, broker_dir, &attest, pid)) < 0)
        local_launch_cleanup(cfg, sandbox_id);
    sodium_memzero(&attest, sizeof attest);
    if (r < 0)
        return r;
    log_info("box", "serving on %s (generation %s)", a->listen, generation);
    r = wait_box(pid);
    broker_relay_stop(relay);
    local_launch_cleanup(cfg, sandbox_id);
    return r;
}

int cli_box(int argc, char **argv) {
    box_args a;
    char token[BOX_TOKEN_MAX + 1];
    fawn_config cfg = {0};
    int r = parse_args(&a, argc, argv);
    if (r == 0)
        r = read_token(token, a.token_file);
    if (r == 0)
        r = config_load(&cfg, a.config);
    if (r == 0 && cfg.sandbox.network == FAWN_NET_ALLOWLIST)
        r = fawn_err(FAWN_ECONFIG, "sandbox.network allowlist is served by a gateway's local "
                                   "provider, not by a box on its own: use none or host");
    if (r < 0) {
        fprintf(stderr, "fawn box: %s\n", fawn_errmsg());
        if (r == FAWN_EINVAL)
            usage(stderr);
        config_free(&cfg);
        return 2;
    }
    r = serve_tcp(&a, &cfg, token);
    if (r < 0)
        fprintf(stderr, "fawn box: %s\n", fawn_errmsg());
    config_free(&cfg);
    return r < 0 ? 1 : r;
}
