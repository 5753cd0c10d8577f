/* Network namespaces created ahead of need (see local.h). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <string.h>

#include "box/box.h"
#include "sandbox/local.h"

/* More ready namespaces than this would only hold kernel memory. */
#define NETNS_POOL_MAX 64

struct netns_pool {
    int fds[NETNS_POOL_MAX];
    size_t count, size;
};

int netns_pool_new(netns_pool **out, size_t size) {
    *out = NULL;
    if (geteuid() != 0)
        return fawn_err(FAWN_EUNSUP, "a network namespace pool needs root");
    if (size == 0 || size > NETNS_POOL_MAX)
        return fawn_err(FAWN_EINVAL, "pool size must be 1..%d", NETNS_POOL_MAX);
    netns_pool *p = calloc(1, sizeof *p);
    if (!p)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    p->size = size;
    *out = p;
    return 0;
}

/* Creates one namespace with loopback up; the caller returns to `home`. */
static int create_one(int home) {
    if (unshare(CLONE_NEWNET) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "unshare(CLONE_NEWNET)");
    int fd = box_isolate_loopback_up() == 0 ? open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)
                                            : -1;
    int e = errno;
    if (setns(home, CLONE_NEWNET) < 0) {
        /* This process would go on in the new namespace: nothing sane is left. */
        log_error("sandbox", "cannot return to the host network namespace: %s", strerror(errno));
        abort();
    }
    return fd >= 0 ? fd : fawn_err_sys(FAWN_EIO, e, "preparing a network namespace");
}

int netns_pool_fill(netns_pool *p) {
    _cleanup_close_ int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    if (home < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open /proc/thread-self/ns/net");
    while (p->count < p->size) {
        int fd = create_one(home);
        if (fd < 0)
            return fd;
        p->fds[p->count++] = fd;
    }
    return 0;
}

int netns_pool_take(netns_pool *p) { return p->count ? p->fds[--p->count] : -1; }

void netns_pool_free(netns_pool *p) {
    if (!p)
        return;
    for (size_t i = 0; i < p->count; i++)
        close(p->fds[i]);
    free(p);
}
