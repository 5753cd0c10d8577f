#include "base.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <curl/curl.h>
#include <pthread.h>
#include <sodium.h>

/* Error messages longer than this are cut; they are for humans. */
#define ERRMSG_MAX 512

static _Thread_local char errmsg[ERRMSG_MAX];

/* The message is formatted aside first: an argument may be fawn_errmsg()
 * itself (a message wrapped with more context). */
int fawn_err(int code, const char *fmt, ...) {
    char text[sizeof errmsg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(errmsg, text, sizeof errmsg);
    return code;
}

int fawn_err_sys(int code, int errno_value, const char *fmt, ...) {
    char text[sizeof errmsg];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n < sizeof text)
        snprintf(text + n, sizeof text - (size_t)n, ": %s", strerror(errno_value));
    memcpy(errmsg, text, sizeof errmsg);
    return code;
}

const char *fawn_errmsg(void) { return errmsg; }

const char *fawn_strerror(int code) {
    switch (code) {
    case FAWN_OK: return "ok";
    case FAWN_EINVAL: return "invalid";
    case FAWN_ENOMEM: return "no_memory";
    case FAWN_EIO: return "io_error";
    case FAWN_ENOENT: return "not_found";
    case FAWN_EEXIST: return "exists";
    case FAWN_EPERM: return "permission_denied";
    case FAWN_E2BIG: return "too_large";
    case FAWN_ETIMEDOUT: return "timeout";
    case FAWN_EBUSY: return "busy";
    case FAWN_EUNSUP: return "unsupported";
    case FAWN_EPROTO: return "protocol_error";
    case FAWN_ECONFIG: return "config_error";
    case FAWN_ESTALE: return "stale";
    case FAWN_ECANCELED: return "canceled";
    default: return "error";
    }
}

static enum fawn_log_level log_level = FAWN_LOG_INFO;
static const char *const level_names[] = {"debug", "info", "warn", "error"};

void fawn_log_set_level(enum fawn_log_level level) { log_level = level; }

int fawn_log_parse_level(enum fawn_log_level *out, const char *name) {
    *out = FAWN_LOG_INFO;
    for (size_t i = 0; i < ARRAY_LEN(level_names); i++) {
        if (strcmp(name, level_names[i]) == 0) {
            *out = (enum fawn_log_level)i;
            return 0;
        }
    }
    return fawn_err(FAWN_EINVAL, "unknown log level '%s' (debug|info|warn|error)", name);
}

void fawn_log(enum fawn_log_level level, const char *component, const char *fmt, ...) {
    if (level < log_level)
        return;
    char line[1024];
    int n = snprintf(line, sizeof line, "fawn %s %s: ", level_names[level], component);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One write per line keeps concurrent lines whole. */
    size_t len = strnlen(line, sizeof line - 2);
    line[len++] = '\n';
    (void)!write(STDERR_FILENO, line, len);
}

static size_t fbuf_limit(const fbuf *b) { return b->limit ? b->limit : FBUF_DEFAULT_LIMIT; }

static int fbuf_reserve(fbuf *b, size_t extra) {
    if (extra > fbuf_limit(b) - b->len)
        return fawn_err(FAWN_E2BIG, "buffer limit of %zu bytes exceeded", fbuf_limit(b));
    size_t need = b->len + extra + 1;
    if (need <= b->cap)
        return 0;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < need)
        cap *= 2;
    char *p = realloc(b->data, cap);
    if (!p)
        return fawn_err(FAWN_ENOMEM, "out of memory growing a buffer to %zu bytes", cap);
    b->data = p;
    b->cap = cap;
    return 0;
}

int fbuf_append(fbuf *b, const void *data, size_t n) {
    int r = fbuf_reserve(b, n);
    if (r < 0)
        return r;
    if (n)
        memcpy(b->data + b->len, data, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int fbuf_printf(fbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return fawn_err(FAWN_EINVAL, "bad format");
    int r = fbuf_reserve(b, (size_t)n);
    if (r < 0)
        return r;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
    return 0;
}

void fbuf_free(fbuf *b) {
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

char *fbuf_steal(fbuf *b) {
    if (!b->data) {
        if (fbuf_reserve(b, 0) < 0)
            return NULL;
        b->data[0] = '\0';
    }
    char *p = b->data;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}

static int64_t clock_us(clockid_t id) {
    struct timespec ts;
    clock_gettime(id, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

int64_t fawn_now_us(void) { return clock_us(CLOCK_MONOTONIC); }
int64_t fawn_now_ms(void) { return clock_us(CLOCK_MONOTONIC) / 1000; }
int64_t fawn_wall_ms(void) { return clock_us(CLOCK_REALTIME) / 1000; }

int fawn_err_write(int errno_value, const char *what) {
    bool full = errno_value == EDQUOT || errno_value == ENOSPC;
    return fawn_err_sys(full ? FAWN_E2BIG : FAWN_EIO, errno_value, "%s", what);
}

int fawn_write_all(int fd, const void *data, size_t n) {
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return fawn_err_write(errno, "write");
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

int fawn_read_all(char **out, size_t *out_len, int fd, size_t limit) {
    *out = NULL;
    if (out_len)
        *out_len = 0;
    fbuf b = {.limit = limit};
    char chunk[16384];
    for (;;) {
        ssize_t n = read(fd, chunk, sizeof chunk);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            fbuf_free(&b);
            return fawn_err_sys(FAWN_EIO, errno, "read");
        }
        if (n == 0)
            break;
        int r = fbuf_append(&b, chunk, (size_t)n);
        if (r < 0) {
            fbuf_free(&b);
            return r;
        }
    }
    if (out_len)
        *out_len = b.len;
    *out = fbuf_steal(&b);
    return *out ? 0 : FAWN_ENOMEM;
}

bool fawn_id_valid(const char *s) {
    size_t n = 0;
    for (; s[n]; n++) {
        char c = s[n];
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                  c == '_' || c == '-';
        if (!ok || n >= 64)
            return false;
    }
    return n > 0;
}

static void hex_encode(char *out, const unsigned char *in, size_t n) {
    static const char digits[] = "0123456789abcdef";
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = digits[in[i] >> 4];
        out[2 * i + 1] = digits[in[i] & 15];
    }
    out[2 * n] = '\0';
}

void fawn_sha256_hex(char out[65], const void *data, size_t n) {
    unsigned char digest[crypto_hash_sha256_BYTES];
    crypto_hash_sha256(digest, data, n);
    hex_encode(out, digest, sizeof digest);
}

void fawn_random_bytes(void *buf, size_t n) { randombytes_buf(buf, n); }

int fawn_hex_digit(char c) {
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

void fawn_random_uuid(char out[37]) {
    unsigned char b[16];
    fawn_random_bytes(b, sizeof b);
    b[6] = (unsigned char)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (unsigned char)((b[8] & 0x3f) | 0x80); /* RFC 4122 variant */
    snprintf(out, 37, "%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", b[0],
             b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12], b[13],
             b[14], b[15]);
}

void fawn_random_hex(char *out, size_t n) {
    unsigned char raw[64];
    while (n > 0) {
        size_t k = n < sizeof raw ? n : sizeof raw;
        randombytes_buf(raw, k);
        hex_encode(out, raw, k);
        out += 2 * k;
        n -= k;
    }
}

/* Fields 48 and 49 of /proc/self/stat: where the argument strings live. */
static int cmdline_area(uintptr_t *start, uintptr_t *end) {
    char buf[2048];
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open /proc/self/stat");
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return fawn_err(FAWN_EIO, "read /proc/self/stat");
    buf[n] = '\0';
    char *p = strrchr(buf, ')'); /* the command name may hold spaces and ')' */
    int field = 2;
    unsigned long long v[2] = {0, 0};
    for (char *save = NULL, *tok = p ? strtok_r(p + 1, " ", &save) : NULL; tok;
         tok = strtok_r(NULL, " ", &save)) {
        if (++field == 48 || field == 49)
            v[field - 48] = strtoull(tok, NULL, 10);
    }
    if (v[0] == 0 || v[1] <= v[0])
        return fawn_err(FAWN_EIO, "no argument area in /proc/self/stat");
    *start = (uintptr_t)v[0];
    *end = (uintptr_t)v[1];
    return 0;
}

int fawn_set_cmdline(const char *title) {
    uintptr_t start, end;
    int r = cmdline_area(&start, &end);
    if (r < 0)
        return r;
    char *area = (char *)start;
    size_t size = end - start;
    size_t n = strlen(title) < size - 1 ? strlen(title) : size - 1;
    memcpy(area, title, n);
    memset(area + n, 0, size - n);
    return 0;
}

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_result;

static void curl_init_once(void) { curl_init_result = curl_global_init(CURL_GLOBAL_DEFAULT); }

int fawn_curl_init(void) {
    pthread_once(&curl_once, curl_init_once);
    return curl_init_result == CURLE_OK
               ? 0
               : fawn_err(FAWN_EIO, "HTTP client initialization failed: %s",
                          curl_easy_strerror(curl_init_result));
}
