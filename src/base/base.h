/* base: errors, logging, buffers, cleanup helpers, time.
 *
 * Error convention: functions return int (0 on success, a negative FAWN_E*
 * code on failure) and write results through out-parameters placed first.
 * On failure they record a human-readable message with fawn_err(); the caller
 * may read it with fawn_errmsg() or propagate the code unchanged.
 *
 * Every out-parameter is set on every path, failures included: a function
 * zeroes its out-parameters (NULL pointers, -1 descriptors, 0, false, "")
 * before anything can fail, so a caller may free what it got either way. */
#ifndef FAWN_BASE_H
#define FAWN_BASE_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <unistd.h>

enum {
    FAWN_OK = 0,
    FAWN_EINVAL = -1,     /* bad input from a caller or a client */
    FAWN_ENOMEM = -2,     /* allocation failed */
    FAWN_EIO = -3,        /* a system call failed */
    FAWN_ENOENT = -4,     /* no such file, session or object */
    FAWN_EEXIST = -5,     /* already exists */
    FAWN_EPERM = -6,      /* refused by policy or by the kernel */
    FAWN_E2BIG = -7,      /* a size limit was exceeded */
    FAWN_ETIMEDOUT = -8,  /* a deadline passed */
    FAWN_EBUSY = -9,      /* the object is in use */
    FAWN_EUNSUP = -10,    /* not supported on this host or in this mode */
    FAWN_EPROTO = -11,    /* a peer broke the protocol */
    FAWN_ECONFIG = -12,   /* configuration error */
    FAWN_ESTALE = -13,    /* a precondition the caller stated no longer holds */
    FAWN_ECANCELED = -14, /* the caller gave up on the operation */
};

/* Marks a function whose result is an error code (or a descriptor): the
 * build fails where a caller drops it. Every such function in a header
 * carries it; a caller that has nothing to do on failure says why. */
#define FAWN_MUST_CHECK __attribute__((warn_unused_result))

/* Records `fmt` as this thread's error message and returns `code`, so that
 * `return fawn_err(FAWN_EINVAL, "bad %s", x);` reads naturally. */
int fawn_err(int code, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Like fawn_err, appending ": strerror(errno_value)". */
int fawn_err_sys(int code, int errno_value, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* The error of a failed write or flush of a file named by what: FAWN_E2BIG
 * when the kernel refused it for a disk quota or a full disk (EDQUOT;
 * ENOSPC, which XFS project quotas also answer), else FAWN_EIO. */
int fawn_err_write(int errno_value, const char *what);

/* This thread's last error message ("" if none). Valid until the next fawn_err. */
const char *fawn_errmsg(void);

/* A short constant name for a FAWN_E* code ("invalid", "not_found", ...). */
const char *fawn_strerror(int code);

/* Logging to stderr, one line per call: "LEVEL component: message". */
enum fawn_log_level { FAWN_LOG_DEBUG, FAWN_LOG_INFO, FAWN_LOG_WARN, FAWN_LOG_ERROR };
void fawn_log_set_level(enum fawn_log_level level);
/* Parses "debug|info|warn|error"; returns FAWN_EINVAL on anything else. */
FAWN_MUST_CHECK int fawn_log_parse_level(enum fawn_log_level *out, const char *name);
void fawn_log(enum fawn_log_level level, const char *component, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
#define log_debug(comp, ...) fawn_log(FAWN_LOG_DEBUG, comp, __VA_ARGS__)
#define log_info(comp, ...) fawn_log(FAWN_LOG_INFO, comp, __VA_ARGS__)
#define log_warn(comp, ...) fawn_log(FAWN_LOG_WARN, comp, __VA_ARGS__)
#define log_error(comp, ...) fawn_log(FAWN_LOG_ERROR, comp, __VA_ARGS__)

/* Cleanup helpers for locals. */
static inline void fawn_freep(void *p) { free(*(void **)p); }
static inline void fawn_closep(int *fd) {
    if (*fd >= 0)
        close(*fd);
}
#define _cleanup_free_ __attribute__((cleanup(fawn_freep)))
#define _cleanup_close_ __attribute__((cleanup(fawn_closep)))
#define steal_ptr(p)                                                                               \
    ({                                                                                             \
        __typeof__(p) _s = (p);                                                                    \
        (p) = NULL;                                                                                \
        _s;                                                                                        \
    })
#define steal_fd(fd)                                                                               \
    ({                                                                                             \
        int _s = (fd);                                                                             \
        (fd) = -1;                                                                                 \
        _s;                                                                                        \
    })
#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A growable byte buffer with a hard capacity limit. Always NUL-terminated
 * after a successful append (the NUL is not counted in len). */
typedef struct fbuf {
    char *data;
    size_t len;
    size_t cap;
    size_t limit; /* maximum len; 0 means FBUF_DEFAULT_LIMIT */
} fbuf;
/* 64 MiB: no buffer in fawn legitimately holds more than this in memory. */
#define FBUF_DEFAULT_LIMIT ((size_t)64 << 20)

/* Appends n bytes; FAWN_E2BIG (buffer unchanged) when len would pass limit. */
FAWN_MUST_CHECK int fbuf_append(fbuf *b, const void *data, size_t n);
/* Appends a formatted string; FAWN_E2BIG when it would pass the limit. */
FAWN_MUST_CHECK int fbuf_printf(fbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Frees the storage and resets the buffer to empty (limit is kept). */
void fbuf_free(fbuf *b);
/* Hands the NUL-terminated storage to the caller (free() it); buffer becomes empty. */
char *fbuf_steal(fbuf *b);

/* Monotonic clock in milliseconds / microseconds. */
int64_t fawn_now_ms(void);
int64_t fawn_now_us(void);
/* Wall clock in milliseconds since the epoch. */
int64_t fawn_wall_ms(void);

/* Writes all n bytes to fd, retrying on EINTR and short writes. Errors as
 * fawn_err_write. */
FAWN_MUST_CHECK int fawn_write_all(int fd, const void *data, size_t n);
/* Reads until EOF into *out (caller frees), failing with FAWN_E2BIG past limit bytes. */
FAWN_MUST_CHECK int fawn_read_all(char **out, size_t *out_len, int fd, size_t limit);

/* True when s consists only of [A-Za-z0-9_-] and has length 1..64 (user and thread ids). */
bool fawn_id_valid(const char *s);

/* Lowercase hex SHA-256 of data into out (65 bytes incl. NUL). */
void fawn_sha256_hex(char out[65], const void *data, size_t n);

/* Fills buf with n cryptographically random bytes. */
void fawn_random_bytes(void *buf, size_t n);

/* Lowercase hex of n random bytes into out (2n+1 bytes). */
void fawn_random_hex(char *out, size_t n);

/* The value of one hexadecimal digit (either case), or -1. */
FAWN_MUST_CHECK int fawn_hex_digit(char c);

/* A random (version 4) UUID in its 36-character text form into out. */
void fawn_random_uuid(char out[37]);

/* Replaces what /proc/self/cmdline shows with title (cut to fit the
 * original argument area), by overwriting that area. Only for a process that
 * no longer uses its argv (a freshly cloned child). Returns 0 or FAWN_EIO. */
FAWN_MUST_CHECK int fawn_set_cmdline(const char *title);

/* libcurl's global initialization, done once for the process whoever asks
 * first (the model client, the research tools). FAWN_EIO when it failed. */
FAWN_MUST_CHECK int fawn_curl_init(void);

#endif
