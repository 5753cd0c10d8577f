/* fawn box: serve the box API. Started by the local provider with inherited
 * descriptors, or by hand / by a container for remote placement over TCP. */
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
#include "box/isolate.h"
#include "cli/cli.h"

/* Bearer tokens shorter than this are refused: they must not be guessable. */
#define BOX_TOKEN_MIN 32
/* A token file holds one line. */
#define BOX_TOKEN_MAX 512
/* Settings are a few KiB of JSON plus the command environment. */
#define SETTINGS_MAX (1024 * 1024)

static void usage(FILE *out) {
    fprintf(out,
            "usage: fawn box --fd N [--status-fd N] [--settings-fd N]\n"
            "       fawn box --listen HOST:PORT --token-file PATH\n\n"
            "Serves the box API (docs/box-api.md). The local provider starts it inside a\n"
            "fresh sandbox with inherited descriptors; for remote placement (a container,\n"
            "a pod, another host) it listens on TCP and requires the bearer token read\n"
            "from PATH (at least %d characters) on every request.\n",
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

static int load_settings(box_settings *s, int fd) {
    if (fd < 0)
        return box_settings_default(s);
    _cleanup_free_ char *json = NULL;
    size_t len = 0;
    int r = fawn_read_all(&json, &len, fd, SETTINGS_MAX);
    close(fd);
    return r < 0 ? r : box_settings_from_json(s, json, len);
}

typedef struct box_args {
    int listen_fd, status_fd, settings_fd;
    const char *listen, *token_file;
} box_args;

static int parse_fd(int *out, const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    if (*end || v < 3 || v > 1024)
        return fawn_err(FAWN_EINVAL, "bad descriptor number '%s'", s);
    *out = (int)v;
    return 0;
}

static int parse_args(box_args *a, int argc, char **argv) {
    static const struct option opts[] = {
        {"fd", required_argument, 0, 'f'},          {"status-fd", required_argument, 0, 's'},
        {"settings-fd", required_argument, 0, 'c'}, {"listen", required_argument, 0, 'l'},
        {"token-file", required_argument, 0, 't'},  {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    *a = (box_args){-1, -1, -1, NULL, NULL};
    int c, r = 0;
    while (r == 0 && (c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'f': r = parse_fd(&a->listen_fd, optarg); break;
        case 's': r = parse_fd(&a->status_fd, optarg); break;
        case 'c': r = parse_fd(&a->settings_fd, optarg); break;
        case 'l': a->listen = optarg; break;
        case 't': a->token_file = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: return fawn_err(FAWN_EINVAL, "unknown option");
        }
    }
    if (r == 0 && (a->listen_fd >= 0) == (a->listen != NULL))
        r = fawn_err(FAWN_EINVAL, "give exactly one of --fd and --listen");
    if (r == 0 && a->listen && !a->token_file)
        r = fawn_err(FAWN_EINVAL, "--listen requires --token-file");
    return r;
}

int cli_box(int argc, char **argv) {
    box_args a;
    char token[BOX_TOKEN_MAX + 1];
    box_settings settings;
    int r = parse_args(&a, argc, argv);
    if (r == 0 && a.listen && (r = read_token(token, a.token_file)) == 0)
        r = a.listen_fd = listen_tcp(a.listen);
    if (r >= 0)
        r = load_settings(&settings, a.settings_fd);
    if (r < 0) {
        fprintf(stderr, "fawn box: %s\n", fawn_errmsg());
        if (r == FAWN_EINVAL)
            usage(stderr);
        return 2;
    }
    if (a.listen_fd >= 0 && !a.listen)
        box_isolate_hide_exe(); /* started by the local provider */
    box_serve_opts o = {.listen_fd = a.listen_fd, .token = a.listen ? token : NULL,
                        .status_fd = a.status_fd, .settings = &settings};
    r = box_serve(&o);
    box_settings_free(&settings);
    if (r < 0)
        fprintf(stderr, "fawn box: %s\n", fawn_errmsg());
    return r < 0 ? 1 : 0;
}
