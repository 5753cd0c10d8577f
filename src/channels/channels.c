/* The channel layer (channels.h): life cycle, the API's operations,
 * inbound events (dedup, bindings, commands, queueing). The workers that
 * run queued messages are in ch_run.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/runs.h"
#include "authz/authz.h"
#include "base/json.h"
#include "channels/ch_layer.h"
#include "model/model.h"

#define CH_LOG "channels"
/* Platforms replaced by runtime settings are stopped but kept until the
 * layer is freed (a worker may still be sending through one): at most
 * this many replacements per process. */
#define CH_RETIRED_MAX 32
/* Failed /connect attempts one chat account makes in a window at most
 * (a code is one of 2^40, valid for minutes: a handful of guesses never
 * finds one), and the accounts remembered (the oldest window is reused). */
#define CH_CONNECT_FAILS_MAX 5
#define CH_CONNECT_WINDOW_MS (10 * 60 * 1000)
#define CH_CONNECT_TRACKED 256
/* Bytes of one runtime setting's value. */
#define CH_SETTING_VALUE_MAX 4096

static ch_platform *retired[CH_RETIRED_MAX];
static size_t n_retired;
static pthread_mutex_t retired_mu = PTHREAD_MUTEX_INITIALIZER;

ch_entry *ch_entry_find(channels *c, const char *provider) {
    for (size_t i = 0; provider && i < c->n_entries; i++)
        if (strcmp(c->entries[i].prov->name, provider) == 0)
            return &c->entries[i];
    return NULL;
}

/* The platform of e now (it may be replaced later; the old one lives on). */
static ch_platform *entry_platform(ch_entry *e) {
    pthread_mutex_lock(&e->c->mu);
    ch_platform *p = e->p;
    pthread_mutex_unlock(&e->c->mu);
    return p;
}

void ch_reply(ch_entry *e, const ch_inbound *m, const char *text) {
    ch_platform *p = entry_platform(e);
    if (!p)
        return;
    ch_target to = {m->chat_id, m->is_group, m->sender_id, m->message_id, m->reply_ctx};
    if (p->ops->send_text(p, &to, text, false, false, NULL) < 0)
        log_warn(CH_LOG, "%s: reply to %s not sent: %s", e->prov->name, m->chat_id, fawn_errmsg());
}

/* ---- commands ---- */

static const char help_text[] = "Commands:\n"
                                "/new - start a new conversation\n"
                                "/status - this conversation's thread and whether a run is active\n"
                                "/models - the models you may use\n"
                                "/connect CODE - connect this chat account to your fawn account\n"
                                "/help - this text\n"
                                "Anything else (text, pictures, files) goes to the agent.";

typedef struct connect_fails {
    char key[65]; /* sha256 of provider and sender */
    int64_t since_ms;
    unsigned n;
} connect_fails;

static connect_fails fails[CH_CONNECT_TRACKED];
static pthread_mutex_t fails_mu = PTHREAD_MUTEX_INITIALIZER;

/* Counts a failed attempt of (provider, sender) with add; whether it may
 * try (again). */
static bool connect_allowed(const char *provider, const char *sender, bool add) {
    char both[2 * CH_ID_MAX + 2], key[65];
    snprintf(both, sizeof both, "%s\n%s", provider, sender);
    fawn_sha256_hex(key, both, strlen(both));
    int64_t now = fawn_now_ms();
    pthread_mutex_lock(&fails_mu);
    connect_fails *slot = NULL, *oldest = &fails[0];
    for (size_t i = 0; i < CH_CONNECT_TRACKED && !slot; i++) {
        if (strcmp(fails[i].key, key) == 0)
            slot = &fails[i];
        else if (fails[i].since_ms < oldest->since_ms)
            oldest = &fails[i];
    }
    if (slot && now - slot->since_ms >= CH_CONNECT_WINDOW_MS) {
        slot->n = 0;
        slot->since_ms = now;
    }
    if (!slot && add) {
        slot = oldest;
        snprintf(slot->key, sizeof slot->key, "%s", key);
        slot->since_ms = now;
        slot->n = 0;
    }
    if (slot && add)
        slot->n++;
    bool ok = !slot || slot->n < CH_CONNECT_FAILS_MAX + (add ? 1 : 0);
    pthread_mutex_unlock(&fails_mu);
    return ok;
}

static void cmd_connect(ch_entry *e, const ch_inbound *m, const char *arg) {
    channels *c = e->c;
    if (!connect_allowed(e->prov->name, m->sender_id, false)) {
        ch_reply(e, m, "Too many connect attempts from this account; try again in a few minutes.");
        return;
    }
    char code[CH_CODE_LEN + 1], hash[65];
    int64_t user_id = 0;
    store_user user;
    store_ch_binding b;
    int r = ch_connect_code_parse(code, arg);
    if (r == 0) {
        fawn_sha256_hex(hash, code, strlen(code));
        r = store_ch_code_redeem(c->st, &user_id, hash, e->prov->name, fawn_wall_ms());
    }
    if (r == 0)
        r = store_user_get(c->st, &user, user_id);
    if (r == 0)
        r = store_ch_binding_put(c->st, &b, e->prov->name, m->sender_id, user_id);
    if (r == FAWN_ENOENT || r == FAWN_EINVAL)
        (void)connect_allowed(e->prov->name, m->sender_id, true);
    if (r < 0) {
        ch_reply(e, m,
                 r == FAWN_ENOENT || r == FAWN_EINVAL
                     ? "That connect code is not valid, was used already, or has expired. "
                       "Create a new one in fawn and send /connect CODE."
                     : "The connection could not be saved; please try again.");
        return;
    }
    char text[200];
    snprintf(text, sizeof text, "Connected: your messages here now run as the fawn user %.64s.",
             user.username);
    ch_reply(e, m, text);
}

static void cmd_status(ch_entry *e, const ch_inbound *m, const store_ch_binding *b) {
    char key[CH_CHAT_KEY_MAX + 1], tid[65], text[300];
    ch_chat_key(key, m);
    if (store_ch_thread_get(e->c->st, tid, e->prov->name, key, b->user_id) < 0) {
        ch_reply(e, m, "No conversation yet: your next message starts one.");
        return;
    }
    bool busy = runs_thread_busy(app_runs(e->c->a), b->user_id, tid);
    snprintf(text, sizeof text, "Thread %s: %s", tid,
             busy ? "a run is active; new messages wait for it." : "idle.");
    ch_reply(e, m, text);
}

static void cmd_new(ch_entry *e, const ch_inbound *m, const store_ch_binding *b) {
    char key[CH_CHAT_KEY_MAX + 1], tid[37];
    ch_chat_key(key, m);
    fawn_random_uuid(tid);
    if (store_ch_thread_set(e->c->st, e->prov->name, key, b->user_id, tid) < 0)
        ch_reply(e, m, "A new conversation could not be started; please try again.");
    else
        ch_reply(e, m, "Started a new conversation.");
}

static void cmd_models(ch_entry *e, const ch_inbound *m, const store_ch_binding *b) {
    store_user user;
    if (store_user_get(e->c->st, &user, b->user_id) < 0) {
        ch_reply(e, m, "Your fawn account could not be read.");
        return;
    }
    const model_registry *reg = app_models(e->c->a);
    fbuf out = {.limit = CH_REPLY_MAX};
    int r = fbuf_printf(&out, "Models you may use:");
    for (size_t i = 0; r == 0 && i < model_registry_count(reg); i++) {
        const model_entry *me = model_registry_at(reg, i);
        if (authz_check(app_policy(e->c->a), user.role, AUTHZ_MODELS, me->name) == 0)
            r = fbuf_printf(&out, "\n- %s%s", me->name, i == 0 ? " (default)" : "");
    }
    ch_reply(e, m, r == 0 && out.data ? out.data : "The model list is too long to show.");
    fbuf_free(&out);
}

static void command_run(ch_entry *e, const ch_inbound *m, enum ch_command cmd, const char *arg,
                        const store_ch_binding *b) {
    switch (cmd) {
    case CH_CMD_CONNECT: cmd_connect(e, m, arg); return;
    case CH_CMD_NEW: cmd_new(e, m, b); return;
    case CH_CMD_STATUS: cmd_status(e, m, b); return;
    case CH_CMD_MODELS: cmd_models(e, m, b); return;
    case CH_CMD_HELP: ch_reply(e, m, help_text); return;
    case CH_CMD_UNKNOWN:
    case CH_CMD_NONE: ch_reply(e, m, "Unknown command. Send /help for the commands."); return;
    }
}

/* ---- inbound ---- */

static bool id_ok(const char *s) { return s && s[0] && strlen(s) <= CH_ID_MAX; }

/* Whether the conversation has a message being run now. */
static bool chat_busy(channels *c, const char *provider, const char *key) {
    char want[sizeof c->busy[0]];
    snprintf(want, sizeof want, "%s/%s", provider, key);
    bool busy = false;
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < CH_WORKERS; i++)
        busy |= strcmp(c->busy[i], want) == 0;
    pthread_mutex_unlock(&c->mu);
    return busy;
}

/* Records m once and queues it for its run. */
static int accept_queued(ch_entry *e, const ch_inbound *m, const char *key) {
    channels *c = e->c;
    _cleanup_free_ char *stored = NULL;
    int r = ch_inbound_to_json(&stored, m);
    enum store_ch_inbox_add how = STORE_CH_DUPLICATE;
    store_ch_inbox_req q = {.provider = e->prov->name,
                            .event_id = m->event_id,
                            .chat_key = key,
                            .message = stored,
                            .queue = true,
                            .max_queued = CH_QUEUE_PER_CHAT,
                            .now_ms = fawn_wall_ms()};
    if (r == 0)
        r = store_ch_inbox_add(c->st, &how, &q);
    if (r < 0)
        return r;
    if (how == STORE_CH_DUPLICATE) {
        log_info(CH_LOG, "%s: event %s delivered again: dropped", e->prov->name, m->event_id);
        return 0;
    }
    if (how == STORE_CH_FULL) {
        char text[160];
        snprintf(text, sizeof text,
                 "Too many messages are waiting in this conversation (at most %d). This one "
                 "was not taken; send it again once the agent has answered.",
                 CH_QUEUE_PER_CHAT);
        ch_reply(e, m, text);
        return 0;
    }
    if (chat_busy(c, e->prov->name, key))
        ch_reply(e, m, "Queued: the agent answers this after its current run.");
    pthread_mutex_lock(&c->mu);
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->mu);
    return 0;
}

/* Handles one inbound message (owned): dedup, binding, command or queue. */
static int accept_message(ch_entry *e, ch_inbound *m) {
    channels *c = e->c;
    if (!id_ok(m->event_id) || !id_ok(m->chat_id) || !id_ok(m->sender_id)) {
        log_warn(CH_LOG, "%s: an inbound message without its ids: dropped", e->prov->name);
        ch_inbound_free(m);
        return 0;
    }
    if (!m->text && !(m->text = strdup(""))) {
        ch_inbound_free(m);
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    char key[CH_CHAT_KEY_MAX + 1];
    ch_chat_key(key, m);
    const char *arg;
    enum ch_command cmd = ch_command_parse(&arg, m->text);
    store_ch_binding b;
    int r = store_ch_binding_find(c->st, &b, e->prov->name, m->sender_id);
    bool bound = r == 0;
    if (r < 0 && r != FAWN_ENOENT) {
        ch_inbound_free(m);
        return r;
    }
    bool empty = cmd == CH_CMD_NONE && !m->text[0] && m->n_attachments == 0;
    if (bound && cmd == CH_CMD_NONE && !empty) {
        r = accept_queued(e, m, key);
        ch_inbound_free(m);
        return r;
    }
    /* Not run: recorded once so a redelivery is not answered twice. */
    enum store_ch_inbox_add how = STORE_CH_DUPLICATE;
    store_ch_inbox_req q = {.provider = e->prov->name,
                            .event_id = m->event_id,
                            .chat_key = key,
                            .queue = false,
                            .now_ms = fawn_wall_ms()};
    r = store_ch_inbox_add(c->st, &how, &q);
    if (r == 0 && how != STORE_CH_DUPLICATE) {
        if (cmd == CH_CMD_CONNECT)
            cmd_connect(e, m, arg);
        else if (!bound) {
            char text[300];
            snprintf(text, sizeof text,
                     "This chat account is not connected to a fawn account, so nothing was run. "
                     "In fawn, create a connect code for %s, then send /connect CODE here.",
                     e->prov->name);
            ch_reply(e, m, text);
        } else if (empty)
            ch_reply(e, m, "The message was empty. Send /help for the commands.");
        else
            command_run(e, m, cmd, arg, &b);
    }
    ch_inbound_free(m);
    return r;
}

static int sink_message(void *ctx, ch_inbound *msg) { return accept_message(ctx, msg); }

static void sink_state(void *ctx, const char *state, const char *detail) {
    ch_entry *e = ctx;
    pthread_mutex_lock(&e->c->mu);
    snprintf(e->state, sizeof e->state, "%s", state ? state : "error");
    snprintf(e->detail, sizeof e->detail, "%s", detail ? detail : "");
    pthread_mutex_unlock(&e->c->mu);
}

/* ---- life cycle ---- */

static int config_check(const fawn_config *cfg, const ch_provider *const *provs, size_t n) {
    const json_t *sec = cfg->channels;
    if (!sec)
        return 0;
    if (!json_is_object(sec))
        return fawn_err(FAWN_ECONFIG, "channels: must be a mapping");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)sec, key, v) {
        bool known = strcmp(key, "enabled") == 0;
        for (size_t i = 0; !known && i < n; i++)
            known = strcmp(key, provs[i]->name) == 0;
        if (!known)
            return fawn_err(FAWN_ECONFIG, "channels.%s: unknown key", key);
        if (strcmp(key, "enabled") == 0 && !json_is_boolean(v))
            return fawn_err(FAWN_ECONFIG, "channels.enabled: must be true or false");
    }
    return 0;
}

/* Builds e's platform from config and saved settings. */
static void entry_open(ch_entry *e) {
    channels *c = e->c;
    _cleanup_free_ char *saved = NULL;
    json_decref(e->runtime);
    e->runtime = NULL;
    if (store_ch_settings_get(c->st, &saved, e->prov->name) == 0 &&
        fjson_parse_object(&e->runtime, saved, strlen(saved)) < 0)
        log_warn(CH_LOG, "%s: saved runtime settings unreadable: ignored", e->prov->name);
    bool enabled = !json_is_false(json_object_get(c->cfg->channels, "enabled"));
    int r = enabled ? e->prov->open(&e->p, c->cfg, e->runtime)
                    : fawn_err(FAWN_ENOENT, "channels are disabled");
    if (r == 0)
        snprintf(e->state, sizeof e->state, "stopped");
    else if (r == FAWN_ENOENT)
        snprintf(e->state, sizeof e->state, "not_configured");
    else {
        snprintf(e->state, sizeof e->state, "error");
        snprintf(e->detail, sizeof e->detail, "%s", fawn_errmsg());
        log_warn(CH_LOG, "%s: %s", e->prov->name, e->detail);
    }
}

static void entry_start(ch_entry *e) {
    if (!e->p || e->running)
        return;
    ch_sink sink = {sink_message, sink_state, e};
    int r = e->p->ops->start ? e->p->ops->start(e->p, &sink) : 0;
    if (r < 0) {
        sink_state(e, "error", fawn_errmsg());
        return;
    }
    e->running = true;
    if (!e->p->ops->start)
        sink_state(e, "running", "");
    log_info(CH_LOG, "%s: started", e->prov->name);
}

static void entry_stop(ch_entry *e) {
    if (e->p && e->running && e->p->ops->stop)
        e->p->ops->stop(e->p);
    e->running = false;
}

int channels_open(channels **out, app *a) {
    *out = NULL;
    const ch_provider *have[CH_PROVIDERS_MAX];
    size_t n = 0;
    for (size_t i = 0; ch_providers[i] && n < CH_PROVIDERS_MAX; i++)
        have[n++] = ch_providers[i];
    int r = config_check(app_config(a), have, n);
    if (r < 0)
        return r;
    channels *c = calloc(1, sizeof *c);
    if (!c)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    c->a = a;
    c->st = app_store(a);
    c->cfg = app_config(a);
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->files_mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c->wake, &ca);
    pthread_condattr_destroy(&ca);
    for (size_t i = 0; i < n; i++) {
        ch_entry *e = &c->entries[c->n_entries++];
        e->c = c;
        e->prov = have[i];
        entry_open(e);
    }
    if (store_ch_inbox_prune(c->st, fawn_wall_ms() - CH_DEDUP_WINDOW_MS) < 0)
        log_warn(CH_LOG, "old inbound events not pruned: %s", fawn_errmsg());
    *out = c;
    return 0;
}

int channels_start(channels *c) {
    ch_inbox_recover(c);
    pthread_mutex_lock(&c->mu);
    c->started = true;
    pthread_mutex_unlock(&c->mu);
    for (size_t i = 0; i < CH_WORKERS; i++) {
        if (pthread_create(&c->workers[i], NULL, ch_worker_main, c) != 0) {
            channels_stop(c); /* channels_free joins the ones started */
            return fawn_err(FAWN_EIO, "cannot start the channel workers");
        }
        c->n_workers++;
    }
    for (size_t i = 0; i < c->n_entries; i++)
        entry_start(&c->entries[i]);
    return 0;
}

void channels_stop(channels *c) {
    if (!c)
        return;
    for (size_t i = 0; i < c->n_entries; i++)
        entry_stop(&c->entries[i]);
    pthread_mutex_lock(&c->mu);
    c->stopping = true;
    pthread_cond_broadcast(&c->wake);
    pthread_mutex_unlock(&c->mu);
}

void channels_free(channels *c) {
    if (!c)
        return;
    channels_stop(c);
    for (size_t i = 0; i < c->n_workers; i++)
        pthread_join(c->workers[i], NULL);
    c->n_workers = 0;
    for (size_t i = 0; i < c->n_entries; i++) {
        if (c->entries[i].p)
            c->entries[i].p->ops->destroy(c->entries[i].p);
        json_decref(c->entries[i].runtime);
    }
    pthread_mutex_lock(&retired_mu);
    for (size_t i = 0; i < n_retired; i++)
        retired[i]->ops->destroy(retired[i]);
    n_retired = 0;
    pthread_mutex_unlock(&retired_mu);
    pthread_cond_destroy(&c->wake);
    pthread_mutex_destroy(&c->files_mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
}

/* ---- API ---- */

static json_t *entry_settings_shown(const ch_entry *e) {
    json_t *o = json_object();
    for (size_t i = 0; o && i < e->prov->n_settings; i++) {
        const ch_setting *s = &e->prov->settings[i];
        const json_t *v = json_object_get(e->runtime, s->key);
        if (json_is_string(v))
            json_object_set_new(o, s->key, s->secret ? json_true() : json_copy((json_t *)v));
    }
    return o;
}

static json_t *entry_status(ch_entry *e) {
    pthread_mutex_lock(&e->c->mu);
    json_t *o = json_pack("{s:b, s:b, s:b, s:s, s:s, s:o}", "configured", e->p != NULL, "enabled",
                          e->p != NULL, "running", e->running, "state", e->state, "detail",
                          e->detail, "runtime_settings", entry_settings_shown(e));
    pthread_mutex_unlock(&e->c->mu);
    return o;
}

int channels_status(json_t **out, channels *c) {
    *out = NULL;
    json_t *all = json_object();
    for (size_t i = 0; all && i < c->n_entries; i++)
        if (json_object_set_new(all, c->entries[i].prov->name, entry_status(&c->entries[i])) < 0) {
            json_decref(all);
            all = NULL;
        }
    *out = all ? json_pack("{s:o}", "channels", all) : NULL;
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int channels_connect_code(json_t **out, channels *c, const store_user *user, const char *provider) {
    *out = NULL;
    if (!ch_entry_find(c, provider))
        return fawn_err(FAWN_ENOENT, "Unknown channel provider");
    char code[CH_CODE_LEN + 1], hash[65];
    unsigned char raw[CH_CODE_LEN];
    fawn_random_bytes(raw, sizeof raw);
    for (size_t i = 0; i < CH_CODE_LEN; i++) /* 32 letters: no modulo bias */
        code[i] = CH_CODE_ALPHABET[raw[i] % (sizeof CH_CODE_ALPHABET - 1)];
    code[CH_CODE_LEN] = '\0';
    fawn_sha256_hex(hash, code, strlen(code));
    int64_t now = fawn_wall_ms();
    int r = store_ch_code_add(c->st, hash, provider, user->id, now + CH_CODE_TTL_MS,
                              CH_CODES_PER_USER, now);
    if (r < 0)
        return r;
    char instruction[120];
    snprintf(instruction, sizeof instruction, "Send \"/connect %s\" to the bot", code);
    *out = json_pack("{s:s, s:s, s:i, s:s}", "provider", provider, "code", code, "expires_in",
                     CH_CODE_TTL_MS / 1000, "instruction", instruction);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int channels_connections(json_t **out, channels *c, const store_user *user) {
    *out = NULL;
    store_ch_binding *b = NULL;
    size_t n = 0;
    int r = store_ch_binding_list(c->st, &b, &n, user->id);
    json_t *list = r == 0 ? json_array() : NULL;
    for (size_t i = 0; list && i < n; i++)
        json_array_append_new(list,
                              json_pack("{s:s, s:s, s:s, s:I}", "id", b[i].id, "provider",
                                        b[i].provider, "platform_user_id", b[i].platform_user_id,
                                        "created_at", (json_int_t)(b[i].created_at_ms / 1000)));
    free(b);
    if (r < 0)
        return r;
    *out = list ? json_pack("{s:o}", "connections", list) : NULL;
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int channels_unbind(channels *c, const store_user *user, const char *id) {
    return store_ch_binding_delete(c->st, user->id, id);
}

/* Checks settings against the provider's keys: an object of strings. */
static int settings_check(const ch_provider *p, const json_t *settings) {
    if (!json_is_object(settings) || json_object_size(settings) == 0)
        return fawn_err(FAWN_EINVAL, "settings must be a non-empty object");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)settings, key, v) {
        bool known = false;
        for (size_t i = 0; !known && i < p->n_settings; i++)
            known = strcmp(p->settings[i].key, key) == 0;
        if (!known)
            return fawn_err(FAWN_EINVAL, "unknown setting for %s: %.64s", p->name, key);
        if (!json_is_string(v) || json_string_length(v) == 0 ||
            json_string_length(v) > CH_SETTING_VALUE_MAX ||
            strlen(json_string_value(v)) != json_string_length(v))
            return fawn_err(FAWN_EINVAL,
                            "setting %s must be a non-empty string of at most %d bytes", key,
                            CH_SETTING_VALUE_MAX);
    }
    return 0;
}

int channels_runtime_config(json_t **out, channels *c, const char *provider,
                            const json_t *settings) {
    *out = NULL;
    ch_entry *e = ch_entry_find(c, provider);
    if (!e)
        return fawn_err(FAWN_ENOENT, "Unknown channel provider");
    int r = settings ? settings_check(e->prov, settings) : 0;
    ch_platform *fresh = NULL;
    bool enabled = !json_is_false(json_object_get(c->cfg->channels, "enabled"));
    if (r == 0 && enabled) {
        r = e->prov->open(&fresh, c->cfg, settings);
        if (r == FAWN_ENOENT)
            r = 0; /* saved; the platform stays unconfigured */
    }
    pthread_mutex_lock(&retired_mu);
    if (r == 0 && n_retired >= CH_RETIRED_MAX)
        r = fawn_err(FAWN_EBUSY, "too many restarts of channels in this process; restart fawn");
    pthread_mutex_unlock(&retired_mu);
    _cleanup_free_ char *text = settings && r == 0 ? fjson_dump(settings) : NULL;
    if (r == 0 && settings && !text)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = store_ch_settings_set(c->st, provider, text);
    if (r < 0) {
        if (fresh)
            fresh->ops->destroy(fresh);
        return r;
    }
    entry_stop(e);
    pthread_mutex_lock(&c->mu);
    ch_platform *old = e->p;
    e->p = fresh;
    json_decref(e->runtime);
    e->runtime = settings ? json_deep_copy(settings) : NULL;
    snprintf(e->state, sizeof e->state, "%s", fresh ? "stopped" : "not_configured");
    e->detail[0] = '\0';
    pthread_mutex_unlock(&c->mu);
    if (old) {
        pthread_mutex_lock(&retired_mu);
        retired[n_retired++] = old;
        pthread_mutex_unlock(&retired_mu);
    }
    if (c->started)
        entry_start(e);
    *out = entry_status(e);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

int channels_http_event(ch_http_response *resp, channels *c, const char *provider,
                        const ch_http_request *req) {
    memset(resp, 0, sizeof *resp);
    ch_entry *e = ch_entry_find(c, provider);
    ch_platform *p = e ? entry_platform(e) : NULL;
    if (!p || !p->ops->handle_http || !e->running)
        return fawn_err(FAWN_ENOENT, "No channel takes events here");
    ch_inbound **msgs = NULL;
    size_t n = 0;
    int r = p->ops->handle_http(p, req, resp, &msgs, &n);
    for (size_t i = 0; i < n; i++) {
        int ar = r == 0 ? accept_message(e, msgs[i]) : (ch_inbound_free(msgs[i]), 0);
        if (ar < 0 && r == 0) {
            r = ar; /* not recorded: the platform must deliver it again */
            free(resp->body);
            free(resp->content_type);
            memset(resp, 0, sizeof *resp);
        }
    }
    free(msgs);
    return r;
}
