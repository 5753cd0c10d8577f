/* fawn box --listen: serve the box API over TCP for remote placement (a
 * container, a pod, another host). The local provider runs the same box code
 * inside each sandbox it starts, on a unix socket only fawn can reach. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "base/base.h"
#include "box/box.h"
#include "config/config.h"
#include "cli/cli.h"

/* Bearer tokens shorter than this are refused: they must not be guessable. */
#define BOX_TOKEN_MIN 32
/* A token file holds one line. */
#define BOX_TOKEN_MAX 512

static void usage(FILE *out) {
    fprintf(out,
            "usage: fawn box --listen HOST:PORT --token-file PATH [--config FILE]\n\n"
            "Serves the box API (docs/box-api.md) over TCP for remote placement: run it\n"
            "as the entry point of a container, a pod or a VM, which provides the outer\n"
            "isolation; every command still runs in its own PID namespace without\n"
            "capabilities, under seccomp and rlimits. Every request must carry the\n"
            "bearer token read from PATH (at least %d characters). Limits and the\n"
            "command environment come from the configuration (sandbox.*).\n",
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
    const char *listen, *token_file, *config;
} box_args;

static int parse_args(box_args *a, int argc, char **argv) {
    static const struct option opts[] = {
        {"listen", required_argument, 0, 'l'}, {"token-file", required_argument, 0, 't'},
        {"config", required_argument, 0, 'c'}, {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *a = (box_args){0};
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'l': a->listen = optarg; break;
        case 't': a->token_file = optarg; break;
        case 'c': a->config = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: return fawn_err(FAWN_EINVAL, "unknown option");
        }
    }
    if (!a->listen || !a->token_file)
        return fawn_err(FAWN_EINVAL, "--listen and --token-file are required");
    return 0;
}

int cli_box(int argc, char **argv) {
    box_args a;
    char token[BOX_TOKEN_MAX + 1];
    box_settings settings = {0};
    fawn_config cfg = {0};
    int listen_fd = -1;
    int r = parse_args(&a, argc, argv);
    if (r == 0)
        r = read_token(token, a.token_file);
    if (r == 0)
        r = config_load(&cfg, a.config);
    if (r == 0)
        r = box_settings_from_config(&settings, &cfg, "none");
    if (r == 0)
        r = listen_fd = listen_tcp(a.listen);
    if (r < 0) {
        fprintf(stderr, "fawn box: %s\n", fawn_errmsg());
        if (r == FAWN_EINVAL)
            usage(stderr);
        box_settings_free(&settings);
        config_free(&cfg);
        return 2;
    }
    /* The box does not isolate the network here; its host does. */
    snprintf(settings.network, sizeof settings.network, "host");
    box_serve_opts o = {.listen_fd = listen_fd, .token = token, .status_fd = -1,
                        .settings = &settings};
    r = box_serve(&o);
    box_settings_free(&settings);
    config_free(&cfg);
    if (r < 0)
        fprintf(stderr, "fawn box: %s\n", fawn_errmsg());
    return r < 0 ? 1 : 0;
}
