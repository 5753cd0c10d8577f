/* The channel workers (ch_layer.h): each takes the oldest queued message
 * of a conversation no other worker is running, stores its attachments,
 * starts its run as the bound user, follows the run while replying, and
 * sends the artifacts the run presented.
 *
 * Once per message: an item is claimed in the store before anything is
 * done (a compare-and-swap from queued), its run carries the item's seq in
 * its metadata, and an item a dead process left claimed is recovered at
 * start: answered by its run when one was started (the run was ended by
 * the restart sweep), queued again when none was. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent.h"
#include "agent/runs.h"
#include "base/json.h"
#include "channels/ch_layer.h"
#include "gateway/uploads.h"
#include "paths/paths.h"

#define CH_LOG "channels"
/* Items one look at the inbox considers. */
#define CH_SCAN_MAX 64
/* Names tried for an attachment before it counts as failed. */
#define CH_UNIQUE_TRIES 100
/* Bytes copied from a download into the upload writer per call. */
#define CH_COPY_BLOCK ((size_t)64 << 10)
/* Tool lines a streamed reply shows (the latest). */
#define CH_PROGRESS_LINES 8
/* Events read from a run's log per call. */
#define CH_EVENTS_PER_FETCH 64
/* Artifacts of one run sent back at most. */
#define CH_ARTIFACTS_MAX 10

/* ---- attachments ---- */

/* Downloads a into a new anonymous file (*fd_out, caller closes) of
 * *size bytes. */
static int attachment_fetch(int *fd_out, uint64_t *size, ch_platform *p, const ch_inbound *m,
                            const ch_attachment *a) {
    *fd_out = -1;
    *size = 0;
    int fd = open(P_tmpdir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "cannot make a file for a download");
    int r = p->ops->download(p, m, a, fd, CH_ATTACHMENT_MAX, size);
    if (r == 0 && *size > CH_ATTACHMENT_MAX)
        r = fawn_err(FAWN_E2BIG, "larger than %llu bytes", (unsigned long long)CH_ATTACHMENT_MAX);
    if (r < 0) {
        close(fd);
        return r;
    }
    *fd_out = fd;
    return 0;
}

/* A name not used in the directory: base, then stem_1.ext, stem_2.ext... */
static int name_claim(char out[CH_FILE_NAME_MAX + 8], int dirfd, const char *base) {
    const char *dot = strrchr(base, '.');
    size_t stem = dot && dot != base ? (size_t)(dot - base) : strlen(base);
    for (int i = 0; i < CH_UNIQUE_TRIES; i++) {
        if (i == 0)
            snprintf(out, CH_FILE_NAME_MAX + 8, "%s", base);
        else
            snprintf(out, CH_FILE_NAME_MAX + 8, "%.*s_%d%s", (int)stem, base, i, base + stem);
        struct stat st;
        if (fstatat(dirfd, out, &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT)
            return 0;
    }
    return fawn_err(FAWN_EEXIST, "no free name for %s", base);
}

/* Writes the download (fd, size bytes) into the uploads directory as
 * name through the upload writer; *result is the writer's answer. */
static int attachment_store(json_t **result, int dirfd, uint64_t room, const char *name, int fd,
                            uint64_t size, const char *thread_id) {
    *result = NULL;
    upload_limits lim = {.max_files = 1,
                         .max_file_size = CH_ATTACHMENT_MAX,
                         .max_total_size = CH_ATTACHMENT_MAX,
                         .disk_room = room};
    upload_batch *b = NULL;
    int r = upload_batch_begin(&b, dirfd, &lim);
    if (r == 0)
        r = upload_file_begin(b, name);
    _cleanup_free_ char *buf = r == 0 ? malloc(CH_COPY_BLOCK) : NULL;
    if (r == 0 && !buf)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    for (uint64_t off = 0; r == 0 && off < size;) {
        ssize_t got = pread(fd, buf, CH_COPY_BLOCK, (off_t)off);
        if (got <= 0)
            r = fawn_err(FAWN_EIO, "the download could not be read back");
        else {
            r = upload_file_write(b, buf, (size_t)got);
            off += (uint64_t)got;
        }
    }
    if (r == 0)
        r = upload_file_end(b);
    if (r < 0) {
        upload_batch_abort(b);
        return r;
    }
    r = upload_batch_commit(b, result, thread_id);
    if (r == 0 && !json_is_true(json_object_get(*result, "success"))) {
        json_decref(*result);
        *result = NULL;
        r = fawn_err(FAWN_EPERM, "the destination is not a plain file");
    }
    return r;
}

/* Stores one attachment; on success appends its file entry to files. */
static int attachment_one(json_t *files, ch_entry *e, ch_platform *p, const ch_inbound *m,
                          const ch_attachment *a, int dirfd, uint64_t room, const char *thread_id) {
    _cleanup_close_ int fd = -1;
    uint64_t size = 0;
    int r = attachment_fetch(&fd, &size, p, m, a);
    if (r < 0)
        return r;
    char base[CH_FILE_NAME_MAX + 1], name[CH_FILE_NAME_MAX + 8];
    ch_attachment_name(base, e->prov->name, a);
    json_t *result = NULL;
    pthread_mutex_lock(&e->c->files_mu);
    r = name_claim(name, dirfd, base);
    if (r == 0)
        r = attachment_store(&result, dirfd, room, name, fd, size, thread_id);
    pthread_mutex_unlock(&e->c->files_mu);
    if (r == 0)
        r = json_array_extend(files, json_object_get(result, "files")) < 0 ? FAWN_ENOMEM : 0;
    json_decref(result);
    return r;
}

/* Stores every attachment of m in the thread's uploads, copies them into
 * its sandbox where needed, and writes the lines the agent reads about
 * them into lines. */
static void attachments_store(fbuf *lines, json_t *files, ch_entry *e, ch_platform *p,
                              const ch_inbound *m, const store_user *user, const char *thread_id) {
    _cleanup_close_ int dirfd = -1;
    uint64_t room = 0;
    int dr = app_uploads_dir_open(&dirfd, &room, e->c->a, user->id, thread_id, true);
    for (size_t i = 0; i < m->n_attachments; i++) {
        const ch_attachment *a = &m->attachments[i];
        size_t before = json_array_size(files);
        int r = dr < 0 ? dr : attachment_one(files, e, p, m, a, dirfd, room, thread_id);
        if (r == 0 && json_array_size(files) > before) {
            const char *vp = json_string_value(
                json_object_get(json_array_get(files, before), "virtual_path"));
            if (fbuf_printf(lines, "%s\n", vp ? vp : "") < 0)
                log_warn(CH_LOG, "file lines cut");
            continue;
        }
        char shown[CH_MARKER_NAME_MAX + 1];
        ch_marker_name(shown, a->name ? a->name : "attachment");
        log_warn(CH_LOG, "%s: attachment %zu of %s not stored: %s", e->prov->name, i, m->event_id,
                 fawn_errmsg());
        if (fbuf_printf(lines, "[failed to load %s: %s]\n",
                        a->kind == CH_ATTACH_IMAGE ? "image" : "file", shown) < 0)
            log_warn(CH_LOG, "file lines cut");
    }
    bool copied = false;
    if (dirfd >= 0 && app_uploads_sync(&copied, e->c->a, user, thread_id, dirfd, files) < 0) {
        log_warn(CH_LOG, "%s: attachments of %s not copied into the sandbox: %s", e->prov->name,
                 m->event_id, fawn_errmsg());
        if (fbuf_printf(lines, "[the files above could not be copied into the sandbox]\n") < 0)
            log_warn(CH_LOG, "file lines cut");
    }
}

/* ---- the run ---- */

/* The thread of the conversation for user, made when there is none. */
static int chat_thread(char tid[65], ch_entry *e, const ch_inbound *m, int64_t user_id) {
    char key[CH_CHAT_KEY_MAX + 1];
    ch_chat_key(key, m);
    int r = store_ch_thread_get(e->c->st, tid, e->prov->name, key, user_id);
    if (r == FAWN_ENOENT) {
        fawn_random_uuid(tid);
        r = store_ch_thread_set(e->c->st, e->prov->name, key, user_id, tid);
    }
    if (r < 0)
        return r;
    store_thread t;
    bool existed;
    char meta[80];
    snprintf(meta, sizeof meta, "{\"channel\":\"%s\"}", e->prov->name);
    r = store_thread_create(e->c->st, &t, &existed, user_id, tid, meta);
    store_thread_clear(&t);
    return r;
}

/* The artifacts (virtual paths) of the thread's newest state: a new array. */
static json_t *thread_artifacts(channels *c, int64_t user_id, const char *tid) {
    store_checkpoint cp = {0};
    size_t omitted = 0;
    _cleanup_free_ char *text = NULL;
    json_t *state = NULL, *out = NULL;
    if (store_checkpoint_latest(c->st, &cp, user_id, tid) == 0 &&
        store_state_read(c->st, &text, &omitted, user_id, tid, cp.state, 0) == 0)
        if (fjson_parse_object(&state, text, strlen(text)) < 0)
            state = NULL; /* no artifacts known */
    store_checkpoint_clear(&cp);
    json_t *list = json_object_get(state, "artifacts");
    out = json_is_array(list) ? json_deep_copy(list) : json_array();
    json_decref(state);
    return out;
}

typedef struct follow {
    ch_entry *e;
    ch_platform *p;
    const ch_target *to;
    char *ref;    /* the updatable reply, or NULL */
    char *answer; /* the latest AI text */
    char *error;  /* the run's error */
    char progress[CH_PROGRESS_LINES][96];
    size_t n_progress;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    bool woken;
} follow;

static void set_text(char **dst, const char *s) {
    char *copy = s ? strdup(s) : NULL;
    if (copy) {
        free(*dst);
        *dst = copy;
    }
}

static void progress_add(follow *f, const char *what, const char *name) {
    if (f->n_progress == CH_PROGRESS_LINES) {
        memmove(f->progress[0], f->progress[1], sizeof f->progress[0] * (CH_PROGRESS_LINES - 1));
        f->n_progress--;
    }
    snprintf(f->progress[f->n_progress++], sizeof f->progress[0], "- %.60s %s", name, what);
}

/* What one message of an updates event says. */
static void message_seen(follow *f, const json_t *msg) {
    const char *type = json_string_value(json_object_get(msg, "type"));
    if (type && strcmp(type, "ai") == 0) {
        const json_t *content = json_object_get(msg, "content");
        if (json_is_string(content) && json_string_length(content) > 0)
            set_text(&f->answer, json_string_value(content));
        size_t i;
        const json_t *call;
        json_array_foreach(json_object_get(msg, "tool_calls"), i, call) {
            const char *name = json_string_value(json_object_get(call, "name"));
            progress_add(f, "running", name ? name : "a tool");
        }
    } else if (type && strcmp(type, "tool") == 0) {
        const char *name = json_string_value(json_object_get(msg, "name"));
        const char *status = json_string_value(json_object_get(msg, "status"));
        progress_add(f, status && strcmp(status, "error") == 0 ? "failed" : "done",
                     name ? name : "a tool");
    }
}

/* The reply as it stands: progress, then the answer. */
static char *reply_text(const follow *f, bool final) {
    fbuf out = {.limit = CH_REPLY_MAX};
    int r = 0;
    if (!final && f->n_progress) {
        r = fbuf_printf(&out, "Working:\n");
        for (size_t i = 0; r == 0 && i < f->n_progress; i++)
            r = fbuf_printf(&out, "%s\n", f->progress[i]);
    }
    if (r == 0 && f->error)
        r = fbuf_printf(&out, "%sThe run failed: %s", out.len ? "\n" : "", f->error);
    else if (r == 0 && f->answer)
        r = fbuf_printf(&out, "%s%s", out.len ? "\n" : "", f->answer);
    else if (r == 0 && !out.len)
        r = fbuf_printf(&out, final ? "(The agent gave no answer.)" : "Working...");
    if (r < 0 && !out.data) /* past CH_REPLY_MAX: what fits */
        return strdup("(The answer is too long to show here.)");
    return fbuf_steal(&out);
}

static void follow_event(follow *f, const store_event *ev) {
    json_t *data = json_loads(ev->data ? ev->data : "null", JSON_DECODE_ANY, NULL);
    if (strcmp(ev->event, "updates") == 0) {
        const char *node;
        json_t *v;
        json_object_foreach(data, node, v) {
            size_t i;
            json_t *msg;
            json_array_foreach(json_object_get(v, "messages"), i, msg) message_seen(f, msg);
        }
        if (f->ref && f->p->ops->update_text) {
            _cleanup_free_ char *text = reply_text(f, false);
            if (text && f->p->ops->update_text(f->p, f->to, f->ref, text, false) < 0)
                log_warn(CH_LOG, "%s: reply not updated: %s", f->e->prov->name, fawn_errmsg());
        }
    } else if (strcmp(ev->event, "error") == 0) {
        const char *msg = json_string_value(json_object_get(data, "message"));
        set_text(&f->error, msg ? msg : "unknown error");
    }
    json_decref(data);
}

static void follow_wake(void *ctx) {
    follow *f = ctx;
    pthread_mutex_lock(&f->mu);
    f->woken = true;
    pthread_cond_signal(&f->cv);
    pthread_mutex_unlock(&f->mu);
}

static void follow_suspend(void *ctx) { (void)ctx; }

/* Reads the run's events until it ends. */
static void follow_run(follow *f, const char *run_id) {
    run_log *l = runs_log_open(app_runs(f->e->c->a), run_id);
    int64_t after = 0;
    bool done = !l;
    while (!done) {
        store_event *ev = NULL;
        size_t n = 0;
        int64_t first = 0;
        if (run_log_fetch(&ev, &n, &done, &first, l, after, CH_EVENTS_PER_FETCH) < 0)
            break;
        for (size_t i = 0; i < n; i++) {
            follow_event(f, &ev[i]);
            after = ev[i].seq;
            free(ev[i].data);
        }
        free(ev);
        if (done || n)
            continue;
        pthread_mutex_lock(&f->mu);
        f->woken = false;
        pthread_mutex_unlock(&f->mu);
        if (run_log_wait(l, after, follow_wake, follow_suspend, f)) {
            pthread_mutex_lock(&f->mu);
            while (!f->woken)
                pthread_cond_wait(&f->cv, &f->mu);
            pthread_mutex_unlock(&f->mu);
        }
    }
    if (l) {
        run_log_unwait(l, f);
        run_log_close(l);
    }
}

/* Sends text to the conversation (errors logged). */
static void target_say(ch_platform *p, const ch_target *to, const char *text) {
    if (p->ops->send_text(p, to, text, false, false, NULL) < 0)
        log_warn(CH_LOG, "reply to %s not sent: %s", to->chat_id, fawn_errmsg());
}

static bool image_name(const char *name) {
    static const char *const exts[] = {".png", ".jpg", ".jpeg", ".gif", ".webp"};
    size_t n = strlen(name);
    for (size_t i = 0; i < ARRAY_LEN(exts); i++) {
        size_t k = strlen(exts[i]);
        if (n > k && strcasecmp(name + n - k, exts[i]) == 0)
            return true;
    }
    return false;
}

/* Sends each artifact of after that before does not list (outputs only). */
static void artifacts_send(ch_entry *e, ch_platform *p, const ch_target *to, int64_t user_id,
                           const char *tid, const json_t *before, const json_t *after) {
    _cleanup_close_ int root = -1;
    if (app_thread_files_open(&root, e->c->a, user_id, tid, false) < 0)
        return;
    size_t i, sent = 0;
    const json_t *path;
    json_array_foreach(after, i, path) {
        bool known = false;
        size_t k;
        const json_t *old;
        json_array_foreach(before, k, old) { known |= json_equal(old, path); }
        if (known || !json_is_string(path) || sent == CH_ARTIFACTS_MAX)
            continue;
        vpath_roots roots = {.user_data_fd = root, .skills_fd = -1};
        vpath_target t;
        _cleanup_close_ int fd = -1;
        struct stat st;
        int r = vpath_resolve(&t, &roots, json_string_value(path), false);
        if (r == 0 && !vpath_in_dir(&t.vp, "outputs"))
            r = fawn_err(FAWN_EPERM, "not an output");
        if (r == 0)
            r = vpath_open_regular(&fd, &st, &t);
        const char *name = r == 0 ? vpath_target_name(&t) : "";
        if (r == 0)
            r = p->ops->send_file(p, to, image_name(name) ? CH_ATTACH_IMAGE : CH_ATTACH_FILE, name,
                                  fd, (uint64_t)st.st_size);
        if (r == 0) {
            sent++;
            continue;
        }
        char shown[CH_MARKER_NAME_MAX + 1], text[300];
        ch_marker_name(shown, json_string_value(path));
        snprintf(text, sizeof text, "The file %s could not be sent: %.150s", shown, fawn_errmsg());
        target_say(p, to, text);
    }
}

/* The human message the run adds: the file lines, then the text. */
static int run_input(json_t **out, const char *lines, const char *text, const json_t *files) {
    *out = NULL;
    fbuf content = {.limit = CH_TEXT_MAX + 64 * 1024};
    int r = fbuf_printf(&content, "%s%s%s", lines, lines[0] && text[0] ? "\n" : "", text);
    if (r == 0 && !content.len)
        r = fbuf_printf(&content, "(empty message)");
    json_t *kw = json_array();
    size_t i;
    const json_t *f;
    json_array_foreach(files, i, f) {
        if (i < AGENT_MESSAGE_FILES_MAX)
            json_array_append_new(kw, json_pack("{s:O, s:O, s:O}", "filename",
                                                json_object_get(f, "filename"), "size",
                                                json_object_get(f, "size"), "path",
                                                json_object_get(f, "virtual_path")));
    }
    json_t *msgs = r == 0 ? json_pack("[{s:s, s:s, s:{s:o}}]", "type", "human", "content",
                                      content.data, "additional_kwargs", "files", kw)
                          : (json_decref(kw), NULL);
    fbuf_free(&content);
    if (r == 0 && !msgs)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = agent_input_messages(out, msgs);
    json_decref(msgs);
    return r;
}

/* What became of an item. */
enum item_end { ITEM_DONE, ITEM_REQUEUE };

/* Starts the run of m as user on tid; FAWN_EBUSY while the thread runs another. */
static int item_start(char run_id[37], ch_entry *e, ch_platform *p, const ch_inbound *m,
                      const store_user *user, const char *tid, int64_t seq) {
    fbuf lines = {.limit = 64 * 1024};
    json_t *files = json_array();
    if (m->n_attachments)
        attachments_store(&lines, files, e, p, m, user, tid);
    json_t *input = NULL;
    int r = run_input(&input, lines.data ? lines.data : "", m->text ? m->text : "", files);
    fbuf_free(&lines);
    json_decref(files);
    char metadata[160];
    snprintf(metadata, sizeof metadata, "{\"channel\":\"%s\",\"channel_inbox_seq\":%lld}",
             e->prov->name, (long long)seq);
    app_run_spec spec = {.thread_id = tid,
                         .recursion_limit = AGENT_RECURSION_DEFAULT,
                         .input = input,
                         .kwargs = "{}",
                         .metadata = metadata,
                         .no_clarification = true};
    if (r == 0)
        r = app_run_start(run_id, e->c->a, user, &spec);
    json_decref(input);
    return r;
}

/* Runs one claimed item to its end. */
static enum item_end item_run(ch_entry *e, const store_ch_item *it) {
    channels *c = e->c;
    ch_inbound *m = NULL;
    if (ch_inbound_from_json(&m, it->message ? it->message : "",
                             strlen(it->message ? it->message : "")) < 0) {
        log_warn(CH_LOG, "%s: stored message %lld unreadable: dropped", e->prov->name,
                 (long long)it->seq);
        return ITEM_DONE;
    }
    pthread_mutex_lock(&c->mu);
    ch_platform *p = e->p;
    pthread_mutex_unlock(&c->mu);
    if (!p) { /* its platform was unconfigured since: kept for when it is back */
        ch_inbound_free(m);
        return ITEM_REQUEUE;
    }
    enum item_end end = ITEM_DONE;
    store_ch_binding b;
    store_user user;
    char tid[65], run_id[37] = "";
    ch_target to = {m->chat_id, m->is_group, m->sender_id, m->message_id, m->reply_ctx};
    int r = store_ch_binding_find(c->st, &b, e->prov->name, m->sender_id);
    if (r == 0)
        r = store_user_get(c->st, &user, b.user_id);
    if (r == FAWN_ENOENT) {
        target_say(p, &to,
                   "This chat account is no longer connected to a fawn account; "
                   "nothing was run.");
        goto out;
    }
    if (r == 0)
        r = chat_thread(tid, e, m, b.user_id);
    json_t *before = r == 0 ? thread_artifacts(c, b.user_id, tid) : NULL;
    if (r == 0 && runs_thread_busy(app_runs(c->a), b.user_id, tid))
        r = fawn_err(FAWN_EBUSY, "the thread is busy");
    if (r == 0)
        r = item_start(run_id, e, p, m, &user, tid, it->seq);
    if (r == 0 && store_ch_inbox_set_run(c->st, it->seq, run_id) < 0)
        log_warn(CH_LOG, "%s: run %s of %lld not recorded: %s", e->prov->name, run_id,
                 (long long)it->seq, fawn_errmsg());
    if (r == FAWN_EBUSY && !c->stopping) {
        end = ITEM_REQUEUE; /* the thread runs something else: wait for it */
    } else if (r < 0 && c->stopping) {
        end = ITEM_REQUEUE;
    } else if (r < 0) {
        char text[400];
        snprintf(text, sizeof text, "The message could not be run: %.300s", fawn_errmsg());
        target_say(p, &to, text);
    } else {
        follow f = {.e = e, .p = p, .to = &to};
        pthread_mutex_init(&f.mu, NULL);
        pthread_cond_init(&f.cv, NULL);
        if (p->ops->update_text && p->ops->send_text(p, &to, "Working...", true, true, &f.ref) < 0)
            f.ref = NULL;
        follow_run(&f, run_id);
        _cleanup_free_ char *text = reply_text(&f, true);
        bool sent = false;
        if (f.ref && text)
            sent = p->ops->update_text(p, &to, f.ref, text, true) == 0;
        if (!sent && text && p->ops->send_text(p, &to, text, true, false, NULL) < 0)
            log_warn(CH_LOG, "%s: answer to %s not sent: %s", e->prov->name, m->chat_id,
                     fawn_errmsg());
        json_t *after = thread_artifacts(c, b.user_id, tid);
        artifacts_send(e, p, &to, b.user_id, tid, before, after);
        json_decref(after);
        free(f.ref);
        free(f.answer);
        free(f.error);
        pthread_cond_destroy(&f.cv);
        pthread_mutex_destroy(&f.mu);
    }
    json_decref(before);
out:
    ch_inbound_free(m);
    return end;
}

/* ---- the workers ---- */

/* Takes the oldest queued item whose conversation is free, marking it
 * busy in slot; false when there is none. Called with c->mu held. */
static bool item_take(channels *c, store_ch_item *out, size_t slot) {
    store_ch_item *items = NULL;
    size_t n = 0;
    bool taken = false;
    pthread_mutex_unlock(&c->mu);
    int r = store_ch_inbox_list(c->st, &items, &n, "queued", CH_SCAN_MAX);
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; r == 0 && i < n && !taken; i++) {
        char key[sizeof c->busy[0]];
        snprintf(key, sizeof key, "%s/%s", items[i].provider, items[i].chat_key);
        bool busy = false;
        for (size_t k = 0; k < CH_WORKERS; k++)
            busy |= strcmp(c->busy[k], key) == 0;
        ch_entry *e = ch_entry_find(c, items[i].provider);
        if (busy || !e || !e->p)
            continue;
        bool claimed = false;
        if (store_ch_inbox_claim(c->st, &claimed, items[i].seq) < 0 || !claimed)
            continue;
        snprintf(c->busy[slot], sizeof c->busy[slot], "%s", key);
        *out = items[i];
        items[i].message = NULL;
        taken = true;
    }
    for (size_t i = 0; i < n; i++)
        store_ch_item_clear(&items[i]);
    free(items);
    return taken;
}

static size_t worker_slot(channels *c) {
    static size_t next; /* under c->mu */
    return next++ % CH_WORKERS;
}

void *ch_worker_main(void *arg) {
    channels *c = arg;
    pthread_mutex_lock(&c->mu);
    size_t slot = worker_slot(c);
    while (!c->stopping) {
        store_ch_item it;
        if (!item_take(c, &it, slot)) {
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += CH_POLL_MS / 1000;
            pthread_cond_timedwait(&c->wake, &c->mu, &until);
            continue;
        }
        ch_entry *e = ch_entry_find(c, it.provider);
        pthread_mutex_unlock(&c->mu);
        enum item_end end = item_run(e, &it);
        if (store_ch_inbox_finish(c->st, it.seq, end == ITEM_REQUEUE) < 0)
            log_warn(CH_LOG, "inbox item %lld not finished: %s", (long long)it.seq, fawn_errmsg());
        store_ch_item_clear(&it);
        pthread_mutex_lock(&c->mu);
        c->busy[slot][0] = '\0';
        pthread_cond_broadcast(&c->wake);
        if (end == ITEM_REQUEUE && !c->stopping) { /* give the thread's run time to end */
            struct timespec until;
            clock_gettime(CLOCK_MONOTONIC, &until);
            until.tv_sec += CH_POLL_MS / 1000;
            pthread_cond_timedwait(&c->wake, &c->mu, &until);
        }
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

void ch_inbox_recover(channels *c) {
    store_ch_item *items = NULL;
    size_t n = 0;
    if (store_ch_inbox_list(c->st, &items, &n, "claimed", CH_SCAN_MAX * 16) < 0) {
        log_warn(CH_LOG, "claimed messages not recovered: %s", fawn_errmsg());
        return;
    }
    for (size_t i = 0; i < n; i++) {
        char run_id[37] = "";
        if (store_ch_inbox_find_run(c->st, run_id, items[i].seq) < 0) {
            store_ch_item_clear(&items[i]);
            continue; /* left claimed: looked at again at the next start */
        }
        ch_entry *e = ch_entry_find(c, items[i].provider);
        ch_inbound *m = NULL;
        if (run_id[0] && e && e->p && items[i].message &&
            ch_inbound_from_json(&m, items[i].message, strlen(items[i].message)) == 0) {
            ch_target to = {m->chat_id, m->is_group, m->sender_id, m->message_id, m->reply_ctx};
            target_say(e->p, &to,
                       "fawn restarted while answering this message; the answer was cut short.");
        }
        ch_inbound_free(m);
        if (store_ch_inbox_finish(c->st, items[i].seq, !run_id[0]) < 0)
            log_warn(CH_LOG, "inbox item %lld not recovered: %s", (long long)items[i].seq,
                     fawn_errmsg());
        else
            log_info(CH_LOG, "inbox item %lld: %s", (long long)items[i].seq,
                     run_id[0] ? "its run had started; done" : "queued again");
        store_ch_item_clear(&items[i]);
    }
    free(items);
}
