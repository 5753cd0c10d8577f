/* Network namespaces created ahead of need (see sandbox.h). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "box/isolate.h"
#include "sandbox/sandbox.h"

/* More ready namespaces than this would only hold kernel memory. */
#define NETNS_POOL_MAX 64

struct netns_pool {
    pthread_mutex_t mu;
    pthread_cond_t wake; /* the filler waits here while the pool is full */
    pthread_t filler;
    int fds[NETNS_POOL_MAX];
    size_t count, size;
    bool stopping, failed;
};

/* Creates one namespace from this thread, which returns to `home` after. */
static int create_one(int home) {
    if (unshare(CLONE_NEWNET) < 0)
        return -1;
    int fd = box_isolate_loopback_up() == 0 ? open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC) : -1;
    if (setns(home, CLONE_NEWNET) < 0) {
        /* This thread is stranded in the new namespace; it creates no more. */
        if (fd >= 0)
            close(fd);
        return -2;
    }
    return fd;
}

static void *fill(void *arg) {
    netns_pool *p = arg;
    _cleanup_close_ int home = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    pthread_mutex_lock(&p->mu);
    while (!p->stopping && home >= 0) {
        if (p->count >= p->size) {
            pthread_cond_wait(&p->wake, &p->mu);
            continue;
        }
        pthread_mutex_unlock(&p->mu);
        int fd = create_one(home);
        pthread_mutex_lock(&p->mu);
        if (fd < 0) {
            p->failed = true;
            log_warn("sandbox", "network namespace pool stopped: %s", strerror(errno));
            break;
        }
        p->fds[p->count++] = fd;
    }
    pthread_mutex_unlock(&p->mu);
    return NULL;
}

int netns_pool_new(netns_pool **out, size_t size) {
    if (geteuid() != 0)
        return fawn_err(FAWN_EUNSUP, "a network namespace pool needs root");
    if (size == 0 || size > NETNS_POOL_MAX)
        return fawn_err(FAWN_EINVAL, "pool size must be 1..%d", NETNS_POOL_MAX);
    netns_pool *p = calloc(1, sizeof *p);
    if (!p)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    p->size = size;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->wake, NULL);
    int e = pthread_create(&p->filler, NULL, fill, p);
    if (e) {
        free(p);
        return fawn_err_sys(FAWN_EIO, e, "pthread_create");
    }
    *out = p;
    return 0;
}

int netns_pool_take(netns_pool *p) {
    pthread_mutex_lock(&p->mu);
    int fd = p->count ? p->fds[--p->count] : -1;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
    return fd;
}

void netns_pool_free(netns_pool *p) {
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    p->stopping = true;
    pthread_cond_signal(&p->wake);
    pthread_mutex_unlock(&p->mu);
    pthread_join(p->filler, NULL);
    for (size_t i = 0; i < p->count; i++)
        close(p->fds[i]);
    pthread_cond_destroy(&p->wake);
    pthread_mutex_destroy(&p->mu);
    free(p);
}
