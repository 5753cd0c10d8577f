/* Sandbox egress by allow-list (sandbox.network: allowlist), private to
 * the local provider (local.c, local_provider.c) and its tests.
 *
 * Rules (each enforced in one place):
 * - Fail fast: a sandbox's network namespace holds only loopback (made by
 *   egress_netns_new, owned by the host, so commands cannot reconfigure
 *   it); a connection to any address but its own loopback fails at once
 *   (ENETUNREACH). Its one way out is a listening socket the gateway made
 *   inside it at 127.0.0.1:EGRESS_PROXY_PORT and serves from its own
 *   namespace (egress_proxy_add). The socket belongs to one sandbox, so the
 *   proxy knows which sandbox calls without believing anything it says.
 * - The target must be named (egress_target_listed): its host name (and
 *   port) in sandbox.egress.allow, or for an address literal a range there
 *   that holds it (and its port). A public address is not enough: only what
 *   the list names is reached — stricter than the web tools' rule.
 * - Every address the target resolves to must then pass net_connect_allowed
 *   without the name (a public address or a listed range): a listed name
 *   that resolves to a private, loopback or metadata address is refused
 *   unless that range is listed too. The proxy connects to the address it
 *   checked (no second lookup: no DNS rebinding window).
 * - CONNECT to a port of sandbox.egress.tls_ports (443 by default): the
 *   tunnel must open with a TLS ClientHello whose server name (SNI) is the
 *   CONNECT host (a name target) or that has none (an address target), so
 *   an allowed name cannot carry a TLS session meant for another host.
 * - Plain http: an absolute-form request (GET http://host/...) whose Host
 *   header, if any, names the URL's host and port; it is forwarded in
 *   origin form with "Connection: close", and the connection carries this
 *   one request (a body only with Content-Length, none chunked), so a
 *   second request cannot reach another virtual host of the same server.
 *   (Inside a TLS tunnel the proxy cannot see requests: a server that
 *   routes by the HTTP Host of a TLS session is out of its reach.)
 * - Limits per sandbox and per connection (egress_limits): connections at
 *   once, an idle timeout, bytes per connection, and bounded request heads
 *   and ClientHellos read within EGRESS_HEAD_TIMEOUT_MS.
 * - Audit: one log line ("egress") per decision, with the sandbox id, the
 *   target host:port, the address connected to and why a refusal was
 *   made; one more when an allowed connection closes, with the bytes each
 *   way.
 *
 * The proxy runs on threads of its own (one accepting, one per
 * connection), never on a caller's. Every out-parameter is set on every
 * path, failures included. */
#ifndef FAWN_SANDBOX_EGRESS_H
#define FAWN_SANDBOX_EGRESS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/base.h"
#include "box/box.h"
#include "config/config.h"
#include "research/research.h"

/* The proxy's address inside every allowlist sandbox: 127.0.0.1 and the
 * port squid made customary for HTTP proxies. Commands get HTTP_PROXY,
 * HTTPS_PROXY (and lowercase) naming it, and NO_PROXY=localhost,127.0.0.1. */
#define EGRESS_PROXY_PORT BOX_EGRESS_PROXY_PORT

/* A request head (request line and headers) or a ClientHello larger than
 * this is refused: real ones are well under 4 KiB (a post-quantum
 * ClientHello about 2 KiB), and it bounds what one connection makes the
 * gateway hold before it is checked. */
#define EGRESS_HEAD_MAX 8192
/* Headers one request may carry: real clients send about ten. */
#define EGRESS_HEADERS_MAX 64
/* Ports sandbox.egress.tls_ports may list. */
#define EGRESS_TLS_PORTS_MAX 16
/* A request head or ClientHello arrives at once from any real client; past
 * this a slow one is cut (it holds a thread and a slot). */
#define EGRESS_HEAD_TIMEOUT_MS 10000
/* A TCP connect to a reachable host takes well under a second; a target
 * that does not answer within 10 s is answered 504. */
#define EGRESS_CONNECT_TIMEOUT_MS 10000
/* Addresses of one name tried at most (a name has a few). */
#define EGRESS_ADDRS_MAX 16

typedef struct egress_limits {
    uint32_t max_connections; /* one sandbox's connections at once */
    int idle_timeout_ms;      /* no byte either way for this long: closed */
    uint64_t max_bytes;       /* one connection's bytes, both ways together */
} egress_limits;

/* What the proxy enforces: sandbox.egress read and checked. */
typedef struct egress_policy {
    net_allowlist allow;
    uint16_t tls_ports[EGRESS_TLS_PORTS_MAX];
    size_t n_tls_ports;
    egress_limits limits;
} egress_policy;

/* Reads cfg->sandbox.egress into *out. FAWN_ECONFIG naming the key (a bad
 * allow entry, a tls_ports entry that is not a port 1..65535, more than
 * EGRESS_TLS_PORTS_MAX). Free with egress_policy_free. */
FAWN_MUST_CHECK int egress_policy_from_config(egress_policy *out, const fawn_config *cfg);
void egress_policy_free(egress_policy *p);

/* ---- parsing what a sandbox sends (egress_parse.c: untrusted input) ---- */

typedef struct egress_request {
    bool connect;                /* CONNECT host:port; else an absolute-form http request */
    char host[NET_HOST_MAX + 1]; /* lowercase name, or an address literal (IPv6 without []) */
    bool literal;                /* host is an address literal */
    uint16_t port;               /* the URL's, 80 when it names none */
    size_t head_len;             /* bytes of the head, its blank line included */
    uint64_t content_length;     /* plain http: the body's bytes (0 without one) */
    char *forward;               /* plain http: the head to send upstream (malloc'd), else NULL */
    size_t forward_len;
} egress_request;

/* Parses a request head from buf (len bytes, at most EGRESS_HEAD_MAX
 * looked at). FAWN_E2BIG while the head is incomplete within len (read
 * more; past EGRESS_HEAD_MAX it never will be); FAWN_EINVAL for a head
 * that is malformed or not allowed, naming why (a method other than
 * CONNECT with an origin-form target, a scheme but http, user info, a Host
 * header naming another host, Transfer-Encoding, duplicate Host or
 * Content-Length); FAWN_ENOMEM. Free with egress_request_clear. */
FAWN_MUST_CHECK int egress_request_parse(egress_request *out, const char *buf, size_t len);
void egress_request_clear(egress_request *r);

/* The server name of the TLS ClientHello at the start of buf (len bytes):
 * 0 with sni set (lowercase) or "" when the hello names none; FAWN_E2BIG
 * while the first record is incomplete within len; FAWN_EINVAL for
 * anything but one handshake record holding a whole ClientHello (a hello
 * split across records included), or a malformed or repeated server name. */
FAWN_MUST_CHECK int egress_tls_sni(char sni[NET_HOST_MAX + 1], const uint8_t *buf, size_t len);

/* Whether policy names the target: host (a name) for port, or the address
 * literal host for port in a range. */
bool egress_target_listed(const egress_policy *policy, const char *host, bool literal,
                          uint16_t port);

/* ---- the namespace and the proxy (egress.c) ---- */

/* Makes a network namespace with loopback up (on a short-lived thread, so
 * no thread of the caller ever leaves its own) and, inside it, a socket
 * listening on 127.0.0.1:EGRESS_PROXY_PORT. The caller owns both
 * descriptors (*netns_fd, to start the sandbox in; *listen_fd, for
 * egress_proxy_add). Needs root (CAP_SYS_ADMIN): FAWN_EUNSUP otherwise. */
FAWN_MUST_CHECK int egress_netns_new(int *netns_fd, int *listen_fd);

typedef struct egress_proxy egress_proxy;

/* Starts a proxy enforcing policy (taken over: *policy is left empty, also
 * on failure, when it is freed). */
FAWN_MUST_CHECK int egress_proxy_new(egress_proxy **out, egress_policy *policy);

/* Serves listen_fd (taken over, closed on failure too) as sandbox_id's
 * proxy; a listener sandbox_id had is removed first (as egress_proxy_remove). */
FAWN_MUST_CHECK int egress_proxy_add(egress_proxy *p, const char *sandbox_id, int listen_fd);

/* Whether sandbox_id has a listener here. */
bool egress_proxy_serves(egress_proxy *p, const char *sandbox_id);

/* Closes sandbox_id's listener and every connection it made, and returns
 * once they are all closed. Nothing when it has none. */
void egress_proxy_remove(egress_proxy *p, const char *sandbox_id);

/* Removes every sandbox, stops the proxy's threads and frees it (NULL is fine). */
void egress_proxy_free(egress_proxy *p);

#endif
