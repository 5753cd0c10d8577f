/* The gateway's HTTP server: /health, JSON errors, and `fawn serve`
 * stopping cleanly on SIGTERM. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/base.h"
#include "config/config.h"
#include "gateway/gateway.h"
#include "store/store.h"

typedef struct fx {
    char home[64];
    fawn_config cfg;
    store *st;
    gateway *g;
} fx;

static int request(uint32_t port, const char *raw, char *body, size_t bodysz) {
    return loopback_http((uint16_t)port, raw, body, bodysz, 0);
}

static int setup(void **state) {
    fx *x = calloc(1, sizeof *x);
    snprintf(x->home, sizeof x->home, "/tmp/fawn-gateway-XXXXXX");
    if (!mkdtemp(x->home) || config_defaults(&x->cfg) < 0)
        return -1;
    x->cfg.server.port = loopback_free_port();
    char path[128];
    snprintf(path, sizeof path, "%s/fawn.db", x->home);
    if (store_open(&x->st, path) < 0 || gateway_start(&x->g, &x->cfg, x->st) < 0)
        return -1;
    *state = x;
    return 0;
}

static int teardown(void **state) {
    fx *x = *state;
    gateway_stop(x->g);
    store_close(x->st);
    config_free(&x->cfg);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf %s", x->home);
    int r = system(cmd);
    free(x);
    return r;
}

static void health_is_public(void **state) {
    fx *x = *state;
    char body[256];
    assert_int_equal(request(x->cfg.server.port, "GET /health HTTP/1.1\r\nHost: x\r\n"
                                                 "Connection: close\r\n\r\n", body, sizeof body),
                     200);
    assert_string_equal(body, "{\"status\":\"healthy\",\"service\":\"fawn\"}");
}

static void errors_have_a_detail(void **state) {
    fx *x = *state;
    char body[256];
    uint32_t port = x->cfg.server.port;
    assert_int_equal(request(port, "GET /nope HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                             body, sizeof body),
                     404);
    assert_string_equal(body, "{\"detail\":\"Not Found\"}");
    assert_int_equal(request(port,
                             "POST /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
                             "Content-Length: 5\r\n\r\nhello",
                             body, sizeof body),
                     405);
    assert_string_equal(body, "{\"detail\":\"Method Not Allowed\"}");
    /* Garbage is refused by the HTTP layer (an error or a closed connection,
     * never a 2xx); the server keeps serving. */
    int garbage = request(port, "NONSENSE\r\n\r\n", body, sizeof body);
    assert_true(garbage == 0 || garbage >= 400);
    assert_int_equal(request(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                             body, sizeof body),
                     200);
}

static void bad_address_refused(void **state) {
    fx *x = *state;
    fawn_config cfg = x->cfg;
    cfg.server.host = "localhost.example";
    gateway *g;
    assert_int_equal(gateway_start(&g, &cfg, x->st), FAWN_EINVAL);
}

/* `fawn serve`: answers, then stops on SIGTERM with exit status 0. */
static void serve_stops_on_sigterm(void **state) {
    fx *x = *state;
    uint32_t port = loopback_free_port();
    char config[128], home[128];
    snprintf(config, sizeof config, "%s/serve.yaml", x->home);
    snprintf(home, sizeof home, "%s/serve-home", x->home);
    FILE *f = fopen(config, "w");
    fprintf(f, "home: %s\nserver:\n  port: %u\n", home, port);
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) {
        execl(getenv("FAWN_BIN"), "fawn", "serve", "--config", config, (char *)NULL);
        _exit(127);
    }
    int status = -1;
    for (int64_t deadline = fawn_now_ms() + 10000; fawn_now_ms() < deadline;) {
        status = request(port, "GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                         NULL, 0);
        if (status == 200)
            break;
        usleep(20000);
    }
    assert_int_equal(status, 200);
    kill(pid, SIGTERM);
    int st;
    assert_int_equal(waitpid(pid, &st, 0), pid);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    char db[160];
    snprintf(db, sizeof db, "%s/fawn.db", home);
    struct stat sb;
    assert_int_equal(stat(db, &sb), 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(health_is_public),
        cmocka_unit_test(errors_have_a_detail),
        cmocka_unit_test(bad_address_refused),
        cmocka_unit_test(serve_stops_on_sigterm),
    };
    return cmocka_run_group_tests_name("gateway", tests, setup, teardown);
}
