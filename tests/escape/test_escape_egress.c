/* Escape tests of sandbox.network allowlist: commands in a real sandbox
 * (started by the local provider, as the gateway starts them) try to reach
 * what the allow-list does not name, and each attempt must fail.
 *
 * The test's "internet" is a small HTTP server on the host's loopback
 * (kernel-given ports): the egress proxy connects from the gateway's
 * network namespace, this process's, so loopback targets are reachable
 * only through it, and only where the allow-list names them:
 *   web      127.0.0.1:<web>   listed as a range and by the name localhost
 *   rebind   127.0.0.1:<rebind> listed only as the name localhost, which
 *            resolves to a loopback address no range lists: the DNS
 *            rebinding case, deterministic without a DNS server
 *   other    127.0.0.1:<other> not listed (same host, another port)
 *   hold     127.0.0.1:<hold>  listed as a range; holds connections open
 * <web> is also a TLS port (sandbox.egress.tls_ports), so tunnels to it
 * must open with a ClientHello naming the CONNECT host. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/base.h"
#include "base/fsx.h"
#include "config/config.h"
#include "sandbox/manager.h"

/* Ceilings only a hang reaches (a loaded 2-core host under ASan). */
#define QUICK_S 60
#define CALL_SLACK_MS 30000
/* How long a fake server connection waits for bytes before it gives up. */
#define FAKE_READ_MS 60000
/* The sandbox's connection cap in this test: small, so the test is cheap. */
#define CAP 4

enum { WEB, REBIND, OTHER, HOLD, N_SERVERS };

typedef struct fake_web {
    int fd[N_SERVERS];
    uint16_t port[N_SERVERS];
    atomic_int accepted[N_SERVERS]; /* connections that arrived */
    atomic_int tls_hellos;          /* of them, ones that began with a TLS handshake */
    atomic_int open;                /* connection threads running */
    atomic_bool stop;
    pthread_t thread;
} fake_web;

typedef struct egress_ctx {
    char home[64];
    char user[32];
    fawn_config cfg;
    sbx_provider *provider;
    sbx_box box;
    fake_web web;
    char log_path[128];
    int saved_stderr, log_fd, tee_in;
    pthread_t tee;
    bool teeing;
} egress_ctx;

/* ---- the fake web ---- */

typedef struct fake_conn {
    fake_web *w;
    int fd;
    uint16_t port;
} fake_conn;

static void *fake_conn_main(void *arg) {
    fake_conn *c = arg;
    char buf[4096];
    size_t len = 0;
    bool answered = false;
    for (int64_t deadline = fawn_now_ms() + FAKE_READ_MS; !atomic_load(&c->w->stop);) {
        struct pollfd p = {.fd = c->fd, .events = POLLIN};
        if (fawn_now_ms() > deadline || poll(&p, 1, 100) < 0)
            break;
        if (!p.revents)
            continue;
        ssize_t n = recv(c->fd, buf + len, sizeof buf - 1 - len, 0);
        if (n <= 0)
            break;
        if (len == 0 && (unsigned char)buf[0] == 22) {
            atomic_fetch_add(&c->w->tls_hellos, 1);
            break; /* it speaks no TLS: the client ends at once */
        }
        len += (size_t)n;
        buf[len] = '\0';
        if (!answered && strncmp(buf, "GET ", 4) == 0 && strstr(buf, "\r\n\r\n")) {
            char reply[256];
            char body[64];
            snprintf(body, sizeof body, "hello-from-fake-web-%u\n", (unsigned)c->port);
            int m = snprintf(
                reply, sizeof reply,
                "HTTP/1.1 200 OK\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                strlen(body), body);
            (void)!send(c->fd, reply, (size_t)m, MSG_NOSIGNAL);
            answered = true;
            shutdown(c->fd, SHUT_WR);
        }
        if (len == sizeof buf - 1)
            len = 0;
    }
    close(c->fd);
    atomic_fetch_sub(&c->w->open, 1);
    free(c);
    return NULL;
}

static void *fake_web_main(void *arg) {
    fake_web *w = arg;
    while (!atomic_load(&w->stop)) {
        struct pollfd p[N_SERVERS];
        for (int i = 0; i < N_SERVERS; i++)
            p[i] = (struct pollfd){.fd = w->fd[i], .events = POLLIN};
        if (poll(p, N_SERVERS, 100) <= 0)
            continue;
        for (int i = 0; i < N_SERVERS; i++) {
            int fd = p[i].revents ? accept4(w->fd[i], NULL, NULL, SOCK_CLOEXEC) : -1;
            if (fd < 0)
                continue;
            atomic_fetch_add(&w->accepted[i], 1);
            fake_conn *c = malloc(sizeof *c);
            *c = (fake_conn){.w = w, .fd = fd, .port = w->port[i]};
            atomic_fetch_add(&w->open, 1);
            pthread_t t;
            if (pthread_create(&t, NULL, fake_conn_main, c) != 0) {
                close(fd);
                free(c);
                atomic_fetch_sub(&w->open, 1);
            } else {
                pthread_detach(t);
            }
        }
    }
    return NULL;
}

static int listen_loopback(uint16_t *port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 64) < 0 ||
        getsockname(fd, (struct sockaddr *)&a, &len) < 0)
        return -1;
    *port = ntohs(a.sin_port);
    return fd;
}

static int fake_web_start(fake_web *w) {
    for (int i = 0; i < N_SERVERS; i++)
        if ((w->fd[i] = listen_loopback(&w->port[i])) < 0)
            return -1;
    return pthread_create(&w->thread, NULL, fake_web_main, w) == 0 ? 0 : -1;
}

static void fake_web_stop(fake_web *w) {
    atomic_store(&w->stop, true);
    pthread_join(w->thread, NULL);
    for (int64_t end = fawn_now_ms() + FAKE_READ_MS;
         atomic_load(&w->open) > 0 && fawn_now_ms() < end;)
        usleep(10000);
    for (int i = 0; i < N_SERVERS; i++)
        if (w->fd[i] >= 0)
            close(w->fd[i]);
}

/* ---- commands ---- */

typedef struct run {
    int exit_code;
    char *out, *err;
} run;

static void run_free(run *r) {
    free(r->out);
    free(r->err);
}

static void runf(run *r, egress_ctx *c, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void runf(run *r, egress_ctx *c, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *cmd = NULL;
    assert_true(vasprintf(&cmd, fmt, ap) >= 0);
    va_end(ap);
    json_t *body = json_pack("{s:s, s:i}", "command", cmd, "timeout_s", QUICK_S);
    json_t *reply = NULL;
    int status = 0;
    int rc = c->provider->call(c->provider->ctx, &reply, &status, &c->box, "POST", "/v1/shell/exec",
                               body, QUICK_S * 1000 + CALL_SLACK_MS);
    json_decref(body);
    if (rc < 0 || status != 200)
        fail_msg("exec of \"%s\": %s (HTTP %d)", cmd, fawn_errmsg(), status);
    const char *st = json_string_value(json_object_get(reply, "status")) ?: "?";
    if (strcmp(st, "completed") != 0)
        fail_msg("exec of \"%s\": %s (exit code %d)", cmd, st,
                 (int)json_integer_value(json_object_get(reply, "exit_code")));
    r->exit_code = (int)json_integer_value(json_object_get(reply, "exit_code"));
    r->out = strdup(json_string_value(json_object_get(reply, "stdout")) ?: "");
    r->err = strdup(json_string_value(json_object_get(reply, "stderr")) ?: "");
    json_decref(reply);
    free(cmd);
}

/* curl through the proxy (as commands get it from their environment, but
 * for NO_PROXY: the test's web is on loopback addresses, which NO_PROXY
 * sends direct): prints the HTTP status of the answer and of a CONNECT
 * (000 when none), never fails. */
#define NO_NO_PROXY "env -u NO_PROXY -u no_proxy "
#define CURL                                                                                       \
    NO_NO_PROXY "curl -s -o /dev/null -w '%%{http_code} %%{http_connect}\\n' --max-time 30 "

static void check_curl(egress_ctx *c, const char *want, const char *url) {
    run r;
    runf(&r, c, CURL "'%s'", url);
    if (!strstr(r.out, want))
        fail_msg("curl %s: want '%s', got '%s' (stderr %s)", url, want, r.out, r.err);
    run_free(&r);
}

/* ---- the audit log: this process's stderr, captured ---- */

static char *log_text(egress_ctx *c) {
    char *text = NULL;
    size_t len = 0;
    int fd = open(c->log_path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    assert_int_equal(fawn_read_all(&text, &len, fd, 64 << 20), 0);
    close(fd);
    return text;
}

/* Waits (up to a hang-catching ceiling) for a line holding every needle. */
static void check_log_line(egress_ctx *c, const char *a, const char *b, const char *d) {
    for (int64_t end = fawn_now_ms() + QUICK_S * 1000;;) {
        char *text = log_text(c);
        for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
            if (strstr(line, "egress") && strstr(line, c->box.sandbox_id) && strstr(line, a) &&
                strstr(line, b) && strstr(line, d)) {
                free(text);
                return;
            }
        }
        free(text);
        if (fawn_now_ms() > end)
            fail_msg("no audit line with '%s', '%s', '%s'", a, b, d);
        usleep(20000);
    }
}

/* Sockets of this process bound to the proxy's port: the listener and the
 * connections it accepted. */
static int proxy_sockets(void) {
    DIR *d = opendir("/proc/self/fd");
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d))) {
        int fd = atoi(e->d_name);
        struct sockaddr_in a;
        socklen_t len = sizeof a;
        if (e->d_name[0] == '.' || fd == dirfd(d) ||
            getsockname(fd, (struct sockaddr *)&a, &len) < 0 || a.sin_family != AF_INET)
            continue;
        n += ntohs(a.sin_port) == 3128 && a.sin_addr.s_addr == htonl(INADDR_LOOPBACK);
    }
    if (d)
        closedir(d);
    return n;
}

/* ---- setup ---- */

static int rm_entry(const char *path, const struct stat *st, int type, struct FTW *f) {
    return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int setup_config(egress_ctx *c) {
    if (config_defaults(&c->cfg) < 0)
        return -1;
    free(c->cfg.home);
    free(c->cfg.sandbox.skills_dir);
    c->cfg.home = strdup(c->home);
    c->cfg.sandbox.skills_dir = strf("%s/skills", c->home);
    c->cfg.sandbox.network = FAWN_NET_ALLOWLIST;
    c->cfg.sandbox.limits.memory_mb = 256;
    c->cfg.sandbox.exec_timeout_s = QUICK_S;
    uint16_t *p = c->web.port;
    char entries[4][64], tls[8];
    snprintf(entries[0], sizeof entries[0], "127.0.0.1:%u", (unsigned)p[WEB]);
    snprintf(entries[1], sizeof entries[1], "localhost:%u", (unsigned)p[WEB]);
    snprintf(entries[2], sizeof entries[2], "localhost:%u", (unsigned)p[REBIND]);
    snprintf(entries[3], sizeof entries[3], "127.0.0.1/32:%u", (unsigned)p[HOLD]);
    snprintf(tls, sizeof tls, "%u", (unsigned)p[WEB]);
    c->cfg.sandbox.egress.allow = json_pack("[s, s, s, s]", entries[0], entries[1], entries[2],
                                            entries[3]);
    c->cfg.sandbox.egress.tls_ports = json_pack("[s]", tls);
    c->cfg.sandbox.egress.max_connections = CAP;
    return c->cfg.home && c->cfg.sandbox.egress.allow ? 0 : -1;
}

/* Copies what this process writes to stderr into a file the tests read,
 * and on to the real stderr. */
static void *tee_main(void *arg) {
    egress_ctx *c = arg;
    char buf[4096];
    ssize_t n;
    while ((n = read(c->tee_in, buf, sizeof buf)) > 0) {
        (void)!write(c->log_fd, buf, (size_t)n);
        (void)!write(c->saved_stderr, buf, (size_t)n);
    }
    return NULL;
}

static int capture_stderr(egress_ctx *c) {
    snprintf(c->log_path, sizeof c->log_path, "%s/stderr.log", c->home);
    c->log_fd = open(c->log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    c->saved_stderr = fcntl(STDERR_FILENO, F_DUPFD_CLOEXEC, 3);
    int p[2];
    if (c->log_fd < 0 || c->saved_stderr < 0 || pipe2(p, O_CLOEXEC) < 0)
        return -1;
    c->tee_in = p[0];
    if (dup2(p[1], STDERR_FILENO) < 0 || pthread_create(&c->tee, NULL, tee_main, c) != 0)
        return -1;
    close(p[1]);
    c->teeing = true;
    return 0;
}

static int setup_all(egress_ctx *c) {
    snprintf(c->home, sizeof c->home, "/tmp/fawn-egress.XXXXXX");
    if (!mkdtemp(c->home)) {
        c->home[0] = '\0';
        return -1;
    }
    char hex[13];
    fawn_random_hex(hex, 6);
    snprintf(c->user, sizeof c->user, "eve-%s", hex);
    if (fake_web_start(&c->web) < 0 || setup_config(c) < 0 || capture_stderr(c) < 0)
        return -1;
    if (local_provider_new(&c->provider, &c->cfg, getenv("FAWN_BIN")) < 0 ||
        c->provider->create(c->provider->ctx, &c->box, c->user, "t1", NULL) < 0) {
        dprintf(c->saved_stderr, "starting the sandbox: %s\n", fawn_errmsg());
        return -1;
    }
    return 0;
}

static void release(egress_ctx *c) {
    if (c->provider) {
        if (c->box.sandbox_id[0] &&
            c->provider->destroy(c->provider->ctx, c->box.sandbox_id, "") < 0)
            print_error("destroying the sandbox: %s\n", fawn_errmsg());
        local_provider_free(c->provider);
    }
    if (c->saved_stderr > 0)
        dup2(c->saved_stderr, STDERR_FILENO); /* ends the tee's pipe */
    if (c->teeing)
        pthread_join(c->tee, NULL);
    int fds[] = {c->saved_stderr, c->tee_in, c->log_fd};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        if (fds[i] > 0)
            close(fds[i]);
    fake_web_stop(&c->web);
    if (c->home[0])
        nftw(c->home, rm_entry, 32, FTW_DEPTH | FTW_PHYS);
    config_free(&c->cfg);
    free(c);
}

static int group_setup(void **state) {
    egress_ctx *c = calloc(1, sizeof *c);
    if (!c)
        return -1;
    for (int i = 0; i < N_SERVERS; i++)
        c->web.fd[i] = -1;
    c->saved_stderr = c->log_fd = c->tee_in = -1;
    if (setup_all(c) < 0) {
        release(c);
        return -1;
    }
    *state = c;
    return 0;
}

static int group_teardown(void **state) {
    release(*state);
    return 0;
}

/* ---- the tests ---- */

static void test_commands_are_told_the_proxy(void **state) {
    egress_ctx *c = *state;
    run r;
    runf(&r, c, "echo $HTTP_PROXY $https_proxy $NO_PROXY");
    assert_string_equal(r.out,
                        "http://127.0.0.1:3128 http://127.0.0.1:3128 localhost,127.0.0.1,::1\n");
    run_free(&r);
}

static void test_allowed_host_reachable(void **state) {
    egress_ctx *c = *state;
    run r;
    int before = atomic_load(&c->web.accepted[WEB]);
    runf(&r, c, NO_NO_PROXY "curl -sS --max-time 30 http://127.0.0.1:%u/x",
         (unsigned)c->web.port[WEB]);
    assert_int_equal(r.exit_code, 0);
    check_contains("body", r.out, "hello-from-fake-web-");
    run_free(&r);
    /* By its listed name too: localhost resolves (on the gateway's side) to
     * 127.0.0.1, which the range entry holds for this port. */
    runf(&r, c, NO_NO_PROXY "curl -sS --max-time 30 http://localhost:%u/y",
         (unsigned)c->web.port[WEB]);
    assert_int_equal(r.exit_code, 0);
    check_contains("body", r.out, "hello-from-fake-web-");
    run_free(&r);
    assert_int_equal(atomic_load(&c->web.accepted[WEB]), before + 2);
    check_log_line(c, "http 127.0.0.1:", "via 127.0.0.1:", ": allowed");
    check_log_line(c, "http localhost:", "closed (", "bytes sent");
}

static void test_unlisted_targets_refused(void **state) {
    egress_ctx *c = *state;
    unsigned web = c->web.port[WEB], other = c->web.port[OTHER];
    int before = atomic_load(&c->web.accepted[OTHER]);
    char *url;
    /* Another port of the same host. */
    check_curl(c, "403", url = strf("http://127.0.0.1:%u/", other));
    free(url);
    check_curl(c, "403", url = strf("https://127.0.0.1:%u/", other));
    free(url);
    /* Another loopback address, the metadata address, a public address. */
    check_curl(c, "403", url = strf("http://127.0.0.2:%u/", web));
    free(url);
    check_curl(c, "403", "http://169.254.169.254/latest/meta-data/");
    check_curl(c, "403", "https://169.254.169.254/");
    check_curl(c, "403", "http://[::ffff:169.254.169.254]/");
    check_curl(c, "403", "http://93.184.216.34/");
    check_curl(c, "403", "https://1.1.1.1/");
    /* A name the list does not hold (never resolved: refused first). */
    check_curl(c, "403", url = strf("http://evil.example:%u/", web));
    free(url);
    assert_int_equal(atomic_load(&c->web.accepted[OTHER]), before);
    check_log_line(c, "http 169.254.169.254:80", "refused", "not in sandbox.egress.allow");
}

static void test_listed_name_resolving_to_private_address_refused(void **state) {
    egress_ctx *c = *state;
    unsigned rebind = c->web.port[REBIND];
    int before = atomic_load(&c->web.accepted[REBIND]);
    char *url;
    check_curl(c, "403", url = strf("http://localhost:%u/", rebind));
    free(url);
    check_curl(c, "403", url = strf("https://localhost:%u/", rebind));
    free(url);
    /* Its address, written as one, is not listed either. */
    check_curl(c, "403", url = strf("http://127.0.0.1:%u/", rebind));
    free(url);
    assert_int_equal(atomic_load(&c->web.accepted[REBIND]), before);
    check_log_line(c, "localhost:", "refused", "neither public nor in a listed range");
}

static void test_host_header_must_match(void **state) {
    egress_ctx *c = *state;
    char *url = strf("http://127.0.0.1:%u/", (unsigned)c->web.port[WEB]);
    run r;
    runf(&r, c, CURL "-H 'Host: metadata.google.internal' '%s'", url);
    check_contains("status", r.out, "400");
    run_free(&r);
    free(url);
}

static void test_tls_server_name_must_be_the_connect_host(void **state) {
    egress_ctx *c = *state;
    unsigned web = c->web.port[WEB];
    int hellos = atomic_load(&c->web.tls_hellos);
    run r;
    /* Positive control: the ClientHello names localhost, the CONNECT host;
     * it reaches the fake server (which then says nothing TLS). */
    runf(&r, c,
         "timeout 20 openssl s_client -proxy 127.0.0.1:3128 -connect localhost:%u "
         "-servername localhost </dev/null >/dev/null 2>&1; echo done",
         web);
    run_free(&r);
    for (int64_t end = fawn_now_ms() + QUICK_S * 1000;
         atomic_load(&c->web.tls_hellos) == hellos && fawn_now_ms() < end;)
        usleep(20000);
    assert_int_equal(atomic_load(&c->web.tls_hellos), hellos + 1);
    /* Another name through an allowed tunnel: cut before a byte goes on. */
    runf(&r, c,
         "timeout 20 openssl s_client -proxy 127.0.0.1:3128 -connect localhost:%u "
         "-servername metadata.google.internal </dev/null >/dev/null 2>&1; echo done",
         web);
    run_free(&r);
    check_log_line(c, "CONNECT localhost:", "refused",
                   "TLS server name 'metadata.google.internal' is not the CONNECT host");
    /* An address target takes no name; curl sends none for an address. */
    runf(&r, c,
         "timeout 20 openssl s_client -proxy 127.0.0.1:3128 -connect 127.0.0.1:%u "
         "-servername localhost </dev/null >/dev/null 2>&1; echo done",
         web);
    run_free(&r);
    check_log_line(c, "CONNECT 127.0.0.1:", "refused", "TLS server name 'localhost'");
    /* Something that is not TLS on a TLS port. */
    runf(&r, c,
         "exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT localhost:%u HTTP/1.1\\r\\n\\r\\n"
         "GET / HTTP/1.1\\r\\n\\r\\n' >&3; cat <&3",
         web);
    run_free(&r);
    check_log_line(c, "CONNECT localhost:", "refused", "not a TLS ClientHello");
    assert_int_equal(atomic_load(&c->web.tls_hellos), hellos + 1);
}

static void test_direct_connections_fail_fast(void **state) {
    egress_ctx *c = *state;
    run r;
    /* Without the proxy: no route from the sandbox's namespace, at once. */
    runf(&r, c, "curl -sS --noproxy '*' --max-time 30 http://169.254.169.254/ 2>&1; echo rc=$?");
    check_contains("curl", r.out, "rc=7");
    run_free(&r);
    runf(&r, c, "bash -c 'exec 3<>/dev/tcp/169.254.169.254/80' 2>&1; echo rc=$?");
    check_contains("bash", r.out, "Network is unreachable");
    run_free(&r);
    runf(&r, c, "bash -c 'exec 3<>/dev/tcp/93.184.216.34/443' 2>&1; echo rc=$?");
    check_contains("bash", r.out, "Network is unreachable");
    run_free(&r);
    /* The host's loopback is not the sandbox's: the allowed server itself
     * is unreachable directly. */
    runf(&r, c, "bash -c 'exec 3<>/dev/tcp/127.0.0.1/%u' 2>&1; echo rc=$?",
         (unsigned)c->web.port[WEB]);
    check_contains("bash", r.out, "Connection refused");
    run_free(&r);
    runf(&r, c, "cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '");
    assert_string_equal(r.out, "lo\n");
    run_free(&r);
}

static void test_connection_cap(void **state) {
    egress_ctx *c = *state;
    unsigned hold = c->web.port[HOLD];
    run r;
    /* The earlier tests' connections count until their threads end them. */
    for (int64_t end = fawn_now_ms() + QUICK_S * 1000; proxy_sockets() > 1;) {
        if (fawn_now_ms() > end)
            fail_msg("%d proxy sockets left by earlier tests", proxy_sockets());
        usleep(20000);
    }
    /* CAP tunnels held open, then one more: answered 503 by the proxy,
     * which may close it before the request is written (SIGPIPE ignored:
     * the answer is still read). */
    runf(&r, c,
         "trap '' PIPE; for i in $(seq 1 %d); do exec {fd}<>/dev/tcp/127.0.0.1/3128; "
         "printf 'CONNECT 127.0.0.1:%u HTTP/1.1\\r\\n\\r\\n' >&$fd; read -r line <&$fd; "
         "echo \"$line\"; done; exec {x}<>/dev/tcp/127.0.0.1/3128; "
         "printf 'CONNECT 127.0.0.1:%u HTTP/1.1\\r\\n\\r\\n' >&$x; read -r line <&$x; "
         "echo \"last $line\"",
         CAP, hold, hold);
    for (int i = 0; i < CAP; i++)
        check_contains("tunnel", r.out, "HTTP/1.1 200 Connection established");
    check_contains("over the cap", r.out, "last HTTP/1.1 503");
    run_free(&r);
    check_log_line(c, "connection: refused", "max_connections", "");
    /* They were closed with the command: the cap is free again. */
    for (int64_t end = fawn_now_ms() + QUICK_S * 1000; proxy_sockets() > 1;) {
        if (fawn_now_ms() > end)
            fail_msg("%d proxy sockets left", proxy_sockets());
        usleep(20000);
    }
    char *url = strf("http://127.0.0.1:%u/", hold);
    check_curl(c, "200", url);
    free(url);
}

static void test_listener_gone_with_the_sandbox(void **state) {
    egress_ctx *c = *state;
    run r;
    /* A tunnel left open by a background process. */
    runf(&r, c,
         "(exec 3<>/dev/tcp/127.0.0.1/3128; printf 'CONNECT 127.0.0.1:%u HTTP/1.1\\r\\n\\r\\n' "
         ">&3; sleep 600 <&3) >/dev/null 2>&1 & sleep 0.2; echo started",
         (unsigned)c->web.port[HOLD]);
    run_free(&r);
    for (int64_t end = fawn_now_ms() + QUICK_S * 1000; proxy_sockets() < 2;) {
        if (fawn_now_ms() > end)
            fail_msg("the tunnel never opened (%d proxy sockets)", proxy_sockets());
        usleep(20000);
    }
    assert_int_equal(c->provider->destroy(c->provider->ctx, c->box.sandbox_id, ""), 0);
    /* destroy returns once the listener and every connection are closed. */
    assert_int_equal(proxy_sockets(), 0);
    c->box.sandbox_id[0] = '\0';
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commands_are_told_the_proxy),
        cmocka_unit_test(test_allowed_host_reachable),
        cmocka_unit_test(test_unlisted_targets_refused),
        cmocka_unit_test(test_listed_name_resolving_to_private_address_refused),
        cmocka_unit_test(test_host_header_must_match),
        cmocka_unit_test(test_tls_server_name_must_be_the_connect_host),
        cmocka_unit_test(test_direct_connections_fail_fast),
        cmocka_unit_test(test_connection_cap),
        cmocka_unit_test(test_listener_gone_with_the_sandbox),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
