/* /api/threads: create (idempotent for an explicit id), search, read,
 * update and delete the signed-in user's threads. Another user's thread
 * answers 404, as a missing one does. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "base/fsx.h"
#include "base/json.h"
#include "gateway/internal.h"
#include "paths/paths.h"

/* Threads one search returns unless the client asks otherwise. */
#define SEARCH_DEFAULT_LIMIT 100
#define SEARCH_MAX_LIMIT 1000

/* Metadata keys the gateway owns; a client's values for them are dropped. */
static const char *const reserved_metadata_keys[] = {"owner_id", "user_id"};

static const char *const thread_statuses[] = {"idle", "busy", "interrupted", "error"};

static int unprocessable(gw_request *rq, const char *detail) {
    return gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, detail);
}

/* The thread object: its values carry the state's title (when it has
 * one), the rest of the state is at /state. */
static json_t *thread_json(const store_thread *t) {
    char created[40], updated[40], state_updated[40];
    gw_iso_time(created, t->created_at_ms);
    gw_iso_time(updated, t->updated_at_ms);
    gw_iso_time(state_updated, t->state_updated_at_ms ? t->state_updated_at_ms : t->created_at_ms);
    json_t *metadata = json_loads(t->metadata, 0, NULL);
    return json_pack("{s:s,s:s,s:s,s:s,s:o,s:s,s:{},s:{s:s*},s:{}}", "thread_id", t->id,
                     "created_at", created, "updated_at", updated, "state_updated_at",
                     state_updated, "metadata", metadata ? metadata : json_object(), "status",
                     t->status, "config", "values", "title", t->title, "interrupts");
}

static int respond_thread(gw_request *rq, unsigned status, store_thread *t) {
    json_t *body = thread_json(t);
    store_thread_clear(t);
    return gw_respond_json(rq, status, body);
}

/* The metadata a client sent (an object, or absent), as stored text with
 * the reserved keys removed. *out is malloc'd; NULL when absent. */
static int metadata_take(char **out, const json_t *body) {
    *out = NULL;
    json_t *m = json_object_get(body, "metadata");
    if (!m || json_is_null(m))
        return 0;
    if (!json_is_object(m))
        return fawn_err(FAWN_EINVAL, "metadata must be an object");
    json_t *copy = json_copy(m);
    for (size_t i = 0; copy && i < ARRAY_LEN(reserved_metadata_keys); i++)
        json_object_del(copy, reserved_metadata_keys[i]);
    *out = copy ? json_dumps(copy, JSON_COMPACT) : NULL;
    json_decref(copy);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* The owner directory name of the signed-in user. */
static void owner_dir(char out[24], const gw_request *rq) {
    paths_user_dir_name(out, rq->who.user.id);
}

int gw_thread_resolve(store_thread *out, gw_request *rq, bool create) {
    *out = (store_thread){0};
    const char *id = rq->params[0];
    bool existed = true;
    int r = create && fawn_id_valid(id)
                ? store_thread_create(rq->g->st, out, &existed, rq->who.user.id, id, NULL)
                : store_thread_get(rq->g->st, out, rq->who.user.id, id);
    if (r == FAWN_ENOENT) /* another user's thread looks missing, as it is to them */
        return fawn_err(FAWN_ENOENT, "Thread not found");
    return r;
}

int gw_thread_files_open(int *user_data_fd, gw_request *rq, const store_thread *t, bool create) {
    return app_thread_files_open(user_data_fd, rq->g->app, rq->who.user.id, t->id, create);
}

/* ---- create ---- */

typedef struct create_args {
    char id[65];
    bool raise_if_exists;
    char *metadata;
} create_args;

static int create_args_read(create_args *a, gw_request *rq) {
    static const char *const keys[] = {"thread_id", "assistant_id", "graph_id",
                                       "metadata",  "if_exists",    NULL};
    json_t *body = NULL;
    const char *id = NULL, *if_exists = NULL;
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0 && json_is_string(json_object_get(body, "thread_id")))
        r = fjson_get_string(&id, body, "thread_id", false);
    if (r == 0)
        r = fjson_get_string(&if_exists, body, "if_exists", false);
    if (r == 0 && if_exists && strcmp(if_exists, "raise") && strcmp(if_exists, "do_nothing"))
        r = fawn_err(FAWN_EINVAL, "if_exists must be raise or do_nothing");
    if (r == 0 && id && !fawn_id_valid(id))
        r = fawn_err(FAWN_EINVAL, "thread_id must match [A-Za-z0-9_-]{1,64}");
    if (r == 0 && !id && !json_is_null(json_object_get(body, "thread_id")) &&
        json_object_get(body, "thread_id"))
        r = fawn_err(FAWN_EINVAL, "thread_id must be a string");
    if (r == 0)
        r = metadata_take(&a->metadata, body);
    if (r == 0 && id)
        strcpy(a->id, id);
    else if (r == 0)
        fawn_random_uuid(a->id);
    a->raise_if_exists = if_exists && strcmp(if_exists, "raise") == 0;
    json_decref(body);
    return r;
}

static int route_thread_create(gw_request *rq) {
    create_args a = {0};
    int r = create_args_read(&a, rq);
    if (r < 0) {
        free(a.metadata);
        return unprocessable(rq, fawn_errmsg());
    }
    store_thread t;
    bool existed = false;
    r = store_thread_create(rq->g->st, &t, &existed, rq->who.user.id, a.id, a.metadata);
    free(a.metadata);
    if (r == 0 && existed && a.raise_if_exists) {
        store_thread_clear(&t);
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, "Thread already exists");
    }
    int fd = -1;
    if (r == 0 && (r = gw_thread_files_open(&fd, rq, &t, true)) < 0)
        store_thread_clear(&t);
    if (fd >= 0)
        close(fd);
    return r < 0 ? r : respond_thread(rq, MHD_HTTP_OK, &t);
}

/* ---- search ---- */

typedef struct search_args {
    char *match;
    char *ids;
    const char *status;
    int64_t limit, offset;
    gw_thread_view view;
} search_args;

static void search_args_clear(search_args *a) {
    free(a->match);
    free(a->ids);
    gw_thread_view_clear(&a->view);
}

static bool status_known(const char *status) {
    for (size_t i = 0; i < ARRAY_LEN(thread_statuses); i++)
        if (strcmp(status, thread_statuses[i]) == 0)
            return true;
    return false;
}

/* Sorting other than the store's (newest update first) is refused, not
 * silently ignored. */
static int search_order_check(const json_t *body) {
    const char *by = NULL, *order = NULL;
    int r = fjson_get_string(&by, body, "sort_by", false);
    if (r == 0)
        r = fjson_get_string(&order, body, "sort_order", false);
    if (r == 0 && ((by && strcmp(by, "updated_at")) || (order && strcmp(order, "desc"))))
        r = fawn_err(FAWN_EINVAL, "only sort_by updated_at, sort_order desc is supported");
    return r;
}

static int search_args_read(search_args *a, json_t *body) {
    static const char *const keys[] = {"metadata", "limit",   "offset",     "status",
                                       "values",   "sort_by", "sort_order", "ids",
                                       "select",   "extract", NULL};
    int r = fjson_check_keys(body, keys);
    if (r == 0)
        r = fjson_get_int(&a->limit, body, "limit", false, 1, SEARCH_MAX_LIMIT);
    if (r == 0)
        r = fjson_get_int(&a->offset, body, "offset", false, 0, INT32_MAX);
    if (r == 0)
        r = fjson_get_string(&a->status, body, "status", false);
    if (r == 0 && a->status && !status_known(a->status))
        r = fawn_err(FAWN_EINVAL, "status must be idle, busy, interrupted or error");
    json_t *values = json_object_get(body, "values");
    if (r == 0 && values && !json_is_null(values) && !json_is_object(values))
        r = fawn_err(FAWN_EINVAL, "values must be an object");
    if (r == 0 && json_object_size(values) > 0)
        r = fawn_err(FAWN_EINVAL, "searching by values is not supported");
    if (r == 0)
        r = search_order_check(body);
    json_t *m = json_object_get(body, "metadata");
    if (r == 0 && m && !json_is_null(m) && !json_is_object(m))
        r = fawn_err(FAWN_EINVAL, "metadata must be an object");
    if (r == 0 && json_is_object(m) && !(a->match = json_dumps(m, JSON_COMPACT)))
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = gw_thread_ids_parse(&a->ids, json_object_get(body, "ids"));
    if (r == 0)
        r = gw_thread_view_parse(&a->view, body);
    return r;
}

static int route_thread_search(gw_request *rq) {
    search_args a = {.limit = SEARCH_DEFAULT_LIMIT};
    json_t *body = NULL;
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = search_args_read(&a, body);
    store_thread *rows = NULL;
    size_t n = 0;
    if (r == 0)
        r = store_thread_search(rq->g->st, &rows, &n, rq->who.user.id, a.match, a.status, a.ids,
                                (size_t)a.limit, (size_t)a.offset);
    json_t *list = r == 0 ? json_array() : NULL;
    for (size_t i = 0; i < n; i++) {
        if (list)
            json_array_append_new(list, gw_thread_view_apply(thread_json(&rows[i]), &a.view));
        store_thread_clear(&rows[i]);
    }
    free(rows);
    search_args_clear(&a);
    json_decref(body);                       /* a.status pointed into it */
    if (r == FAWN_EINVAL || r == FAWN_E2BIG) /* E2BIG: the match is beyond the store's bounds */
        return unprocessable(rq, fawn_errmsg());
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, list);
}

/* ---- one thread ---- */

static int route_thread_get(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    return r < 0 ? r : respond_thread(rq, MHD_HTTP_OK, &t);
}

/* PATCH merges the sent metadata into the stored one. */
static int metadata_merge(char **out, const store_thread *t, const char *patch) {
    json_t *stored = json_loads(t->metadata, 0, NULL), *update = json_loads(patch, 0, NULL);
    int r = stored && update && json_object_update(stored, update) == 0
                ? 0
                : fawn_err(FAWN_ENOMEM, "out of memory");
    *out = r == 0 ? json_dumps(stored, JSON_COMPACT) : NULL;
    json_decref(stored);
    json_decref(update);
    return r == 0 && !*out ? fawn_err(FAWN_ENOMEM, "out of memory") : r;
}

static int route_thread_patch(gw_request *rq) {
    static const char *const keys[] = {"metadata", NULL};
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    json_t *body = NULL;
    char *patch = NULL, *merged = NULL;
    r = gw_body_json(&body, rq);
    if (r == 0)
        r = fjson_check_keys(body, keys);
    if (r == 0)
        r = metadata_take(&patch, body);
    json_decref(body);
    if (r == 0 && patch)
        r = metadata_merge(&merged, &t, patch);
    if (r == 0 && merged)
        r = store_thread_set_metadata(rq->g->st, rq->who.user.id, t.id, merged);
    free(patch);
    free(merged);
    if (r == 0) {
        store_thread_clear(&t);
        r = gw_thread_resolve(&t, rq, false);
        return r < 0 ? r : respond_thread(rq, MHD_HTTP_OK, &t);
    }
    store_thread_clear(&t);
    return r == FAWN_EINVAL ? unprocessable(rq, fawn_errmsg()) : r;
}

/* Moves the thread's directory aside (one rename: the files vanish at
 * once) and removes it; the caller forgets the thread only after that. A
 * removal that fails puts what is left back in place (so the thread, still
 * known, can be deleted again) and is an error. A crash between the steps
 * leaves a GW_DELETED_PREFIX directory that the next start removes. */
static int thread_files_delete(gw_request *rq, const char *id) {
    char owner[24], path[4096], trash[128];
    owner_dir(owner, rq);
    snprintf(path, sizeof path, "%s/users/%s/threads", rq->g->cfg->home, owner);
    _cleanup_close_ int threads = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (threads < 0)
        return errno == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, errno, "open %s", path);
    char suffix[17];
    fawn_random_hex(suffix, 8);
    snprintf(trash, sizeof trash, "%s%s-%s", GW_DELETED_PREFIX, id, suffix);
    if (renameat(threads, id, threads, trash) < 0)
        return errno == ENOENT ? 0 : fawn_err_sys(FAWN_EIO, errno, "move thread %s aside", id);
    int r = fsx_remove_tree(threads, trash);
    if (r == 0)
        return 0;
    char why[512];
    snprintf(why, sizeof why, "%s", fawn_errmsg());
    if (renameat(threads, trash, threads, id) < 0)
        log_error("gateway",
                  "thread %s: what is left of its files stays in %s (removed at the "
                  "next start): %s",
                  id, trash, strerror(errno));
    return fawn_err(FAWN_EIO, "Thread %s's files could not be removed: %s", id, why);
}

static int route_thread_delete(gw_request *rq) {
    store_thread t;
    int r = gw_thread_resolve(&t, rq, false);
    if (r < 0)
        return r;
    bool busy = strcmp(t.status, "busy") == 0;
    char id[65], owner[24];
    strcpy(id, t.id);
    store_thread_clear(&t);
    if (busy)
        return fawn_err(FAWN_EBUSY, "Thread %s has a run in progress", id);
    owner_dir(owner, rq);
    enum sbx_destroy_outcome outcome;
    r = sbx_destroy(&outcome, app_sandboxes(rq->g->app), owner, id);
    if (r == 0 && outcome == SBX_DESTROY_DEFERRED)
        return fawn_err(FAWN_EBUSY, "Thread %s's sandbox is in use; it stops when released", id);
    if (r == 0)
        r = thread_files_delete(rq, id);
    if (r == 0)
        r = store_thread_delete(rq->g->st, rq->who.user.id, id);
    if (r < 0)
        return r;
    char message[96];
    snprintf(message, sizeof message, "Thread %s deleted", id);
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:b,s:s}", "success", 1, "message", message));
}

const gw_route gw_thread_routes[] = {
    {"POST", "/api/threads", route_thread_create, GW_SIGNED_IN, GW_BODY_BUFFER, GW_JSON_BODY_MAX,
     NULL},
    {"POST", "/api/threads/search", route_thread_search, GW_SIGNED_IN, GW_BODY_BUFFER,
     GW_JSON_BODY_MAX, NULL},
    {"GET", "/api/threads/{}", route_thread_get, AUTHZ_THREADS_READ, GW_BODY_NONE, 0, NULL},
    {"PATCH", "/api/threads/{}", route_thread_patch, AUTHZ_THREADS_WRITE, GW_BODY_BUFFER,
     GW_JSON_BODY_MAX, NULL},
    {"DELETE", "/api/threads/{}", route_thread_delete, AUTHZ_THREADS_DELETE, GW_BODY_NONE, 0, NULL},
};
const size_t gw_thread_routes_count = ARRAY_LEN(gw_thread_routes);
