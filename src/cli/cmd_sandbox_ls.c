/* fawn sandbox ls: the sandboxes the gateway's manager holds, as GET
 * /api/sandboxes shows them. The CLI, running on the gateway's host with
 * access to $FAWN_HOME, signs a short session for the first admin with the
 * gateway's secret and asks the gateway on server.host:port. When no
 * gateway answers, it shows what this host records instead: each recorded
 * sandbox, whether its box answers, and whether it is fenced. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "auth/auth.h"
#include "base/json.h"
#include "cli/cli.h"
#include "sandbox/manager.h"
#include "store/store.h"

/* The session the CLI signs lives this long: one request. */
#define LS_TOKEN_TTL_S 60
/* Largest answer read from the gateway. */
#define LS_REPLY_MAX ((size_t)16 << 20)
/* How long the gateway gets to answer. */
#define LS_TIMEOUT_S 10

#define LS_HEADER                                                                                  \
    "SANDBOX          USER             THREAD                           GENERATION STATE     "     \
    "EXEC UPLD FORK IDLE_S FENCED\n"

static void row_print(const char *sandbox_id, const char *user, const char *thread,
                      const char *generation, const char *state, const int holders[3],
                      long long idle_s, bool fenced) {
    printf("%-16s %-16.16s %-32.32s %-10.8s %-9s %4d %4d %4d %6lld %s\n", sandbox_id, user, thread,
           generation, state, holders[0], holders[1], holders[2], idle_s, fenced ? "yes" : "no");
}

static void rows_from_gateway(const json_t *answer) {
    json_t *list = json_object_get(answer, "sandboxes"), *s;
    size_t i;
    fputs(LS_HEADER, stdout);
    json_array_foreach(list, i, s) {
        json_t *h = json_object_get(s, "holders");
        int holders[3] = {(int)json_integer_value(json_object_get(h, "execution")),
                          (int)json_integer_value(json_object_get(h, "upload")),
                          (int)json_integer_value(json_object_get(h, "fork"))};
        row_print(json_string_value(json_object_get(s, "sandbox_id")) ?: "?",
                  json_string_value(json_object_get(s, "user_id")) ?: "?",
                  json_string_value(json_object_get(s, "thread_id")) ?: "?",
                  json_string_value(json_object_get(s, "generation")) ?: "",
                  json_string_value(json_object_get(s, "state")) ?: "?", holders,
                  (long long)(json_integer_value(json_object_get(s, "idle_ms")) / 1000),
                  json_is_true(json_object_get(s, "fenced")));
    }
}

/* A session token for the first admin, signed with the gateway's secret. */
static int admin_token(char **out, const fawn_config *cfg, store *st) {
    *out = NULL;
    store_user admin;
    unsigned char secret[AUTH_SECRET_BYTES];
    int r = store_user_get_by_role(st, &admin, AUTHZ_ADMIN_ROLE);
    if (r == 0)
        r = auth_secret_load(secret, cfg->home);
    if (r < 0)
        return r;
    int64_t now = fawn_wall_ms() / 1000;
    auth_claims c = {.user_id = admin.id,
                     .token_version = admin.token_version,
                     .issued_at = now,
                     .expires_at = now + LS_TOKEN_TTL_S};
    r = auth_jwt_sign(out, secret, &c);
    memset(secret, 0, sizeof secret);
    return r;
}

static int connect_gateway(int *out, const fawn_config *cfg) {
    struct sockaddr_in addr = {.sin_family = AF_INET,
                               .sin_port = htons((uint16_t)cfg->server.port)};
    if (inet_pton(AF_INET, cfg->server.host, &addr.sin_addr) != 1)
        return fawn_err(FAWN_EINVAL, "server.host must be an IPv4 address");
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {.tv_sec = LS_TIMEOUT_S};
    if (fd >= 0) {
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
    }
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) < 0) {
        int err = errno;
        if (fd >= 0)
            close(fd);
        return fawn_err_sys(FAWN_EIO, err, "no gateway at %s:%u", cfg->server.host,
                            cfg->server.port);
    }
    *out = fd;
    return 0;
}

/* GET /api/sandboxes from the gateway (HTTP/1.1, one request). */
static int gateway_get(json_t **answer, const fawn_config *cfg, const char *token) {
    _cleanup_close_ int fd = -1;
    int r = connect_gateway(&fd, cfg);
    _cleanup_free_ char *request = NULL;
    if (r == 0 && asprintf(&request,
                           "GET /api/sandboxes HTTP/1.1\r\nHost: %s:%u\r\nAuthorization: Bearer "
                           "%s\r\nConnection: close\r\n\r\n",
                           cfg->server.host, cfg->server.port, token) < 0)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = fawn_write_all(fd, request, strlen(request));
    _cleanup_free_ char *reply = NULL;
    size_t len = 0;
    if (r == 0)
        r = fawn_read_all(&reply, &len, fd, LS_REPLY_MAX);
    const char *body = r == 0 ? strstr(reply, "\r\n\r\n") : NULL;
    if (r == 0 && (!body || strncmp(reply, "HTTP/1.1 200", 12) != 0))
        r = fawn_err(FAWN_EPROTO, "the gateway refused: %.60s", reply);
    if (r == 0 && fjson_parse_object(answer, body + 4, len - (size_t)(body + 4 - reply)) < 0)
        r = fawn_err(FAWN_EPROTO, "the gateway's answer is not JSON");
    return r;
}

/* What this host records, for when no gateway answers. */
static int rows_from_host(const fawn_config *cfg, store *st) {
    store_sandbox *records = NULL;
    store_fence *fences = NULL;
    size_t n = 0, n_fences = 0;
    sbx_provider *local = NULL;
    int r = store_sandbox_list(st, &records, &n);
    if (r == 0)
        r = store_fence_list(st, &fences, &n_fences, NULL);
    if (r == 0)
        r = local_provider_new(&local, cfg, NULL);
    if (r == 0)
        fputs(LS_HEADER, stdout);
    for (size_t i = 0; r == 0 && i < n; i++) {
        const store_sandbox *sb = &records[i];
        enum sbx_presence state;
        char running[SBX_GENERATION_LEN + 1];
        local->probe(local->ctx, &state, running, sb->sandbox_id);
        bool fenced = false;
        for (size_t f = 0; f < n_fences; f++)
            fenced |= strcmp(fences[f].sandbox_id, sb->sandbox_id) == 0 &&
                      strcmp(fences[f].generation, sb->generation) == 0 && !fences[f].scope[0];
        bool same = state == SBX_RUNNING && strcmp(running, sb->generation) == 0;
        row_print(sb->sandbox_id, sb->user, sb->thread, sb->generation, same ? "running" : "absent",
                  (const int[3]){0, 0, 0}, 0, fenced);
    }
    local_provider_free(local);
    free(records);
    free(fences);
    return r;
}

int cli_sandbox_ls(const fawn_config *cfg) {
    store *st = NULL;
    int r = cli_store_open(&st, cfg);
    _cleanup_free_ char *token = NULL;
    json_t *answer = NULL;
    if (r == 0 && admin_token(&token, cfg, st) == 0 && gateway_get(&answer, cfg, token) == 0) {
        rows_from_gateway(answer);
        json_decref(answer);
    } else if (r == 0) {
        fprintf(stderr,
                "fawn sandbox ls: no gateway answered (%s); sandboxes recorded on this "
                "host:\n",
                fawn_errmsg());
        r = rows_from_host(cfg, st);
    }
    store_close(st);
    return r;
}
