/* ch_layer.h: the channel layer's state, shared by channels.c (life
 * cycle, API, inbound events, commands) and ch_run.c (the workers: a
 * queued message's attachments, its run and its replies). */
#ifndef FAWN_CH_LAYER_H
#define FAWN_CH_LAYER_H

#include <pthread.h>

#include "channels/channels.h"
#include "channels/channels_internal.h"

/* Platforms the layer knows at most. */
#define CH_PROVIDERS_MAX 8
/* Workers: conversations whose messages are run at once. */
#define CH_WORKERS 4
/* Messages of one conversation queued or running at most; past it the
 * sender is told to wait. */
#define CH_QUEUE_PER_CHAT 8
/* How often the workers look at the inbox when nothing wakes them
 * (an item queued by another process, one a full worker set left). */
#define CH_POLL_MS 1000
/* How long a connect code is valid, and how many one user holds at once. */
#define CH_CODE_TTL_MS (10 * 60 * 1000)
#define CH_CODES_PER_USER 5
/* How long inbound events are remembered for dedup: platforms redeliver
 * within minutes; a week covers any retry schedule. */
#define CH_DEDUP_WINDOW_MS ((int64_t)7 * 24 * 3600 * 1000)
/* Largest attachment downloaded. */
#define CH_ATTACHMENT_MAX ((uint64_t)50 << 20)
/* Bytes of one reply text (the platforms cut longer ones anyway). */
#define CH_REPLY_MAX (32 * 1024)

typedef struct channels channels;

typedef struct ch_entry {
    channels *c;
    const ch_provider *prov;
    ch_platform *p; /* NULL when not configured */
    bool running;
    char state[16];   /* not_configured | stopped | connecting | connected | error */
    char detail[256]; /* why, for error */
    json_t *runtime;  /* saved runtime settings, or NULL */
} ch_entry;

struct channels {
    app *a;
    store *st;
    const fawn_config *cfg;
    pthread_mutex_t mu;
    pthread_cond_t wake;
    bool stopping, started;
    ch_entry entries[CH_PROVIDERS_MAX];
    size_t n_entries;
    pthread_t workers[CH_WORKERS];
    size_t n_workers;
    char busy[CH_WORKERS][STORE_CH_PROVIDER_MAX + STORE_CH_KEY_MAX + 2]; /* "" when free */
    pthread_mutex_t files_mu; /* one attachment at a time claims a name and commits */
};

/* The adapters, NULL-terminated (providers.c). */
extern const ch_provider *const ch_providers[];

/* The entry of a provider name, or NULL. */
ch_entry *ch_entry_find(channels *c, const char *provider);

/* Sends text as a reply to m's conversation (errors logged). */
void ch_reply(ch_entry *e, const ch_inbound *m, const char *text);

/* The workers (ch_run.c). */
void *ch_worker_main(void *arg);
/* Recovers the items a previous process claimed and did not finish. */
void ch_inbox_recover(channels *c);

#endif
