/* What a web client asks before it shows a page: which optional features
 * fawn has, and the settings pages' read routes (DeerFlow's shapes), each
 * answered as it is in this fawn. The memory routes are memory_routes.c's. */
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "gateway/internal.h"
#include "paths/paths.h"
#include "skills/skills.h"

/* Why the Lark integration answers "not installed". */
#define LARK_ABSENT "fawn has no Lark CLI integration"
/* A skill's PUT body is {"enabled": bool}. */
#define SKILL_PUT_BODY_MAX 1024
/* A custom skill's PUT body: {"content": SKILL.md of at most
 * SKILLS_HEAD_MAX bytes}, each byte escaped at most six times over. */
#define CUSTOM_PUT_BODY_MAX (6 * SKILLS_HEAD_MAX + 1024)
/* What an installable archive's name ends with. */
#define SKILLS_ARCHIVE_SUFFIX ".skill"

/* Optional features of DeerFlow's UI: custom agents, live browser control
 * and durable MCP tasks. fawn has none of them. */
static int route_features(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:{s:b}, s:{s:b}, s:{s:b}}", "agents_api", "enabled", 0,
                                     "browser_control", "enabled", 0, "mcp_tasks", "enabled", 0));
}

/* Follow-up suggestions after an answer: fawn makes none. */
static int route_suggestions_config(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK,
                           json_pack("{s:b, s:i}", "enabled", 0, "max_suggestions", 0));
}

/* ---- skills ----
 * The skills in the skills directory that the caller's role may use
 * (authorization skills rules: a skill the role is denied is "not found"
 * to it), as DeerFlow shows them; each is enabled unless an administrator
 * disabled it (PUT, skills:write), for every user. They are files in every
 * sandbox's /mnt/skills, read-only: no one edits them here (editable
 * false). */

/* The caller's catalog (skills_catalog: the skills directory's and the
 * caller's own) into *out. */
static int skills_of_caller(json_t **out, gw_request *rq) {
    *out = NULL;
    char user[24], custom[PATH_MAX];
    paths_user_dir_name(user, rq->who.user.id);
    json_t *states = NULL;
    int r = skills_user_dir(custom, rq->g->cfg->home, user);
    if (r == 0)
        r = store_skill_states(rq->g->st, &states);
    skills_dirs dirs = {.shared = rq->g->cfg->sandbox.skills_dir, .custom = custom};
    if (r == 0)
        r = skills_catalog(out, &dirs, states, app_policy(rq->g->app), rq->who.user.role);
    json_decref(states);
    return r;
}

int gw_skills_view_sync(gw_request *rq) {
    char user[24], custom[PATH_MAX];
    paths_user_dir_name(user, rq->who.user.id);
    json_t *states = NULL, *catalog = NULL;
    int r = skills_user_dir(custom, rq->g->cfg->home, user);
    skills_dirs dirs = {.shared = rq->g->cfg->sandbox.skills_dir, .custom = custom};
    if (r == 0 && dirs.shared)
        r = store_skill_states(rq->g->st, &states);
    if (r == 0 && dirs.shared)
        r = skills_catalog(&catalog, &dirs, states, app_policy(rq->g->app), rq->who.user.role);
    if (r == 0)
        r = skills_view_sync(rq->g->cfg->home, user, &dirs, catalog);
    json_decref(states);
    json_decref(catalog);
    return r;
}

static int route_skills(gw_request *rq) {
    json_t *catalog = NULL;
    int r = skills_of_caller(&catalog, rq);
    if (r < 0)
        return r;
    json_t *list = json_array();
    size_t i;
    json_t *skill;
    json_array_foreach(catalog, i, skill) {
        if (list)
            json_array_append_new(list, skills_view(skill));
    }
    json_decref(catalog);
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:o?}", "skills", list));
}

/* The skill the route names in the caller's catalog: *catalog (caller
 * decrefs) and *out borrowed from it; FAWN_ENOENT "Skill '...' not found". */
static int skill_named(json_t **catalog, json_t **out, gw_request *rq) {
    *out = NULL;
    const char *name = rq->params[0];
    int r = skills_of_caller(catalog, rq);
    if (r == 0 && !(skills_name_valid(name) && (*out = skills_find(*catalog, name))))
        r = fawn_err(FAWN_ENOENT, "Skill '%.*s' not found", SKILLS_NAME_MAX,
                     skills_name_valid(name) ? name : "");
    return r;
}

static int route_skill_get(gw_request *rq) {
    json_t *catalog = NULL, *skill;
    int r = skill_named(&catalog, &skill, rq);
    json_t *view = r == 0 ? skills_view(skill) : NULL;
    json_decref(catalog);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, view);
}

/* {"enabled": bool}: the skill is enabled or disabled for every user. */
static int route_skill_put(gw_request *rq) {
    json_t *body = NULL, *catalog = NULL, *skill = NULL;
    int r = gw_body_json(&body, rq);
    const json_t *enabled = json_object_get(body, "enabled");
    if (r == 0 && !json_is_boolean(enabled))
        r = fawn_err(FAWN_EINVAL, "enabled must be true or false");
    if (r == 0)
        r = skill_named(&catalog, &skill, rq);
    if (r == 0)
        r = store_skill_state_set(rq->g->st, rq->params[0], json_is_true(enabled));
    if (r == 0)
        json_object_set(skill, "enabled", (json_t *)enabled);
    json_t *view = r == 0 ? skills_view(skill) : NULL;
    json_decref(body);
    json_decref(catalog);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, view);
}

/* ---- the caller's own skills (category custom) ----
 * Each user writes, reads and deletes their own, under their home directory
 * (SKILLS_USER_REL): no one sees another's. A name the role is denied
 * cannot be written; one the skills directory already has cannot either
 * (it is read-only). */

/* The caller's own skills, as GET /api/skills shows them. */
static int route_custom_list(gw_request *rq) {
    json_t *catalog = NULL;
    int r = skills_of_caller(&catalog, rq);
    if (r < 0)
        return r;
    json_t *list = json_array();
    size_t i;
    json_t *skill;
    json_array_foreach(catalog, i, skill) {
        if (list && json_is_true(json_object_get(skill, "custom")))
            json_array_append_new(list, skills_view(skill));
    }
    json_decref(catalog);
    return gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:o?}", "skills", list));
}

/* The caller's own skill the route names (borrowed from *catalog, which
 * the caller decrefs); FAWN_ENOENT "Custom skill '...' not found". */
static int custom_named(json_t **catalog, json_t **out, gw_request *rq) {
    int r = skill_named(catalog, out, rq);
    if (r == 0 && !json_is_true(json_object_get(*out, "custom")))
        r = FAWN_ENOENT;
    if (r == FAWN_ENOENT)
        r = fawn_err(FAWN_ENOENT, "Custom skill '%s' not found",
                     skills_name_valid(rq->params[0]) ? rq->params[0] : "");
    return r;
}

/* The skill as GET shows it, with its SKILL.md as content. */
static int respond_custom(gw_request *rq) {
    json_t *catalog = NULL, *skill = NULL;
    char *text = NULL;
    bool cut = false;
    char user[24], custom[PATH_MAX];
    paths_user_dir_name(user, rq->who.user.id);
    int r = skills_user_dir(custom, rq->g->cfg->home, user);
    skills_dirs dirs = {.shared = rq->g->cfg->sandbox.skills_dir, .custom = custom};
    if (r == 0)
        r = custom_named(&catalog, &skill, rq);
    if (r == 0)
        r = skills_doc_read(&text, &cut, &dirs, skill);
    json_t *view = r == 0 ? skills_view(skill) : NULL;
    if (view)
        json_object_set_new(view, "content", json_string(text));
    free(text);
    json_decref(catalog);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, view);
}

static int route_custom_get(gw_request *rq) { return respond_custom(rq); }

/* Whether the caller may write a skill of this name: a valid name their
 * role may use, not one of the skills directory's. */
static int custom_writable(gw_request *rq, const char *name) {
    if (!skills_name_valid(name))
        return fawn_err(FAWN_EINVAL,
                        "Skill name must be hyphen-case using lowercase letters, "
                        "digits and hyphens only, at most %d characters",
                        SKILLS_NAME_MAX);
    if (authz_check(app_policy(rq->g->app), rq->who.user.role, AUTHZ_SKILLS, name) < 0)
        return fawn_err(FAWN_EPERM, "Permission denied: skill %s", name);
    json_t *shared = NULL;
    int r = skills_list(&shared, rq->g->cfg->sandbox.skills_dir);
    if (r == 0 && skills_find(shared, name))
        r = fawn_err(FAWN_EEXIST, "'%s' is a built-in skill: a custom skill needs another name",
                     name);
    json_decref(shared);
    return r;
}

/* Records a change of the caller's skill name in its history (DeerFlow's
 * entry; prev and next NULL for none, from_ts only for a rollback). The
 * change is made: a history that cannot be written is logged. */
static void history_record(gw_request *rq, const char *name, const char *action, const char *prev,
                           const char *next, const char *from_ts) {
    char user[24];
    paths_user_dir_name(user, rq->who.user.id);
    json_t *entry = json_pack("{s:s, s:s, s:n, s:s, s:s?, s:s?}", "action", action, "author",
                              "human", "thread_id", "file_path", "SKILL.md", "prev_content", prev,
                              "new_content", next);
    if (entry && from_ts)
        json_object_set_new(entry, "rollback_from_ts", json_string(from_ts));
    if (!entry || skills_history_append(rq->g->cfg->home, user, name, entry) < 0)
        log_warn("skills", "the history of %s's skill %s misses a change: %s", user, name,
                 entry ? fawn_errmsg() : "out of memory");
    json_decref(entry);
}

/* Whether the caller may see their skill name's history: a valid name
 * their role may use (FAWN_ENOENT, FAWN_EPERM). */
static int custom_allowed(gw_request *rq, const char *name) {
    if (!skills_name_valid(name))
        return fawn_err(FAWN_ENOENT, "Custom skill '' not found");
    return authz_check(app_policy(rq->g->app), rq->who.user.role, AUTHZ_SKILLS, name) < 0
               ? fawn_err(FAWN_EPERM, "Permission denied: skill %s", name)
               : 0;
}

/* {"content": SKILL.md}: writes the caller's skill (new or replaced),
 * validated as DeerFlow validates it (skills_doc_check). */
static int route_custom_put(gw_request *rq) {
    const char *name = rq->params[0];
    json_t *body = NULL;
    int r = gw_body_json(&body, rq);
    const json_t *content = json_object_get(body, "content");
    if (r == 0 && !json_is_string(content))
        r = fawn_err(FAWN_EINVAL, "content must be the SKILL.md text");
    if (r == 0)
        r = custom_writable(rq, name);
    if (r == 0)
        r = skills_doc_check(name, json_string_value(content), json_string_length(content));
    char user[24], *prev = NULL;
    paths_user_dir_name(user, rq->who.user.id);
    if (r == 0 && skills_custom_read(&prev, rq->g->cfg->home, user, name) < 0)
        prev = NULL; /* a new skill */
    if (r == 0)
        r = skills_custom_write(rq->g->cfg->home, user, name, json_string_value(content),
                                json_string_length(content));
    if (r == 0)
        history_record(rq, name, prev ? "human_edit" : "human_create", prev,
                       json_string_value(content), NULL);
    free(prev);
    json_decref(body);
    return r < 0 ? r : respond_custom(rq);
}

static int route_custom_delete(gw_request *rq) {
    char user[24];
    paths_user_dir_name(user, rq->who.user.id);
    json_t *catalog = NULL, *skill = NULL;
    int r = custom_named(&catalog, &skill, rq);
    json_decref(catalog);
    char *prev = NULL;
    if (r == 0 && skills_custom_read(&prev, rq->g->cfg->home, user, rq->params[0]) < 0)
        prev = NULL;
    if (r == 0)
        r = skills_custom_remove(rq->g->cfg->home, user, rq->params[0]);
    if (r == 0)
        history_record(rq, rq->params[0], "human_delete", prev, NULL, NULL);
    free(prev);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:b}", "success", 1));
}

/* GET: the history of the caller's own skill, oldest first: {"history":
 * [...]} ([] for a skill with none recorded). */
static int route_custom_history(gw_request *rq) {
    const char *name = rq->params[0];
    char user[24], *text = NULL;
    paths_user_dir_name(user, rq->who.user.id);
    json_t *history = NULL;
    int r = custom_allowed(rq, name);
    if (r == 0 &&
        (r = skills_history_read(&history, rq->g->cfg->home, user, name)) == FAWN_ENOENT) {
        r = skills_custom_read(&text, rq->g->cfg->home, user, name);
        history = r == 0 ? json_array() : NULL;
    }
    free(text);
    if (r == FAWN_ENOENT || r == FAWN_EPERM)
        r = fawn_err(FAWN_ENOENT, "Custom skill '%s' not found", name);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, json_pack("{s:o}", "history", history));
}

/* The entry of history that {"history_index": n} (default -1, the newest;
 * negative counts from the end) selects (borrowed) into *out. */
static int history_pick(const json_t **out, const json_t *history, const json_t *body) {
    *out = NULL;
    const json_t *index = json_object_get(body, "history_index");
    if (index && !json_is_integer(index))
        return fawn_err(FAWN_EINVAL, "history_index must be an integer");
    json_int_t i = index ? json_integer_value(index) : -1, n = (json_int_t)json_array_size(history);
    if (i < 0)
        i += n;
    if (i < 0 || i >= n)
        return fawn_err(FAWN_EINVAL, "history_index is out of range");
    *out = json_array_get(history, (size_t)i);
    return 0;
}

/* The history of the caller's skill name, which must hold an entry: into
 * *out (caller decrefs). */
static int history_of(json_t **out, gw_request *rq, const char *user, const char *name) {
    char *text = NULL;
    int r = skills_history_read(out, rq->g->cfg->home, user, name);
    if (r == FAWN_ENOENT && skills_custom_read(&text, rq->g->cfg->home, user, name) == 0)
        r = fawn_err(FAWN_EINVAL, "Custom skill '%s' has no history", name);
    else if (r == FAWN_ENOENT)
        r = fawn_err(FAWN_ENOENT, "Custom skill '%s' not found", name);
    else if (r == 0 && json_array_size(*out) == 0)
        r = fawn_err(FAWN_EINVAL, "Custom skill '%s' has no history", name);
    free(text);
    return r;
}

/* POST {"history_index"?}: the caller's skill written back as it was
 * before the selected change (its "prev_content"), validated again, and
 * recorded as a rollback; answered as GET answers. */
static int route_custom_rollback(gw_request *rq) {
    const char *name = rq->params[0];
    char user[24], *current = NULL;
    paths_user_dir_name(user, rq->who.user.id);
    json_t *body = NULL, *history = NULL;
    const json_t *entry = NULL;
    int r = custom_allowed(rq, name);
    if (r == FAWN_EPERM)
        r = fawn_err(FAWN_ENOENT, "Custom skill '%s' not found", name);
    if (r == 0)
        r = gw_body_json(&body, rq);
    if (r == 0)
        r = history_of(&history, rq, user, name);
    if (r == 0)
        r = history_pick(&entry, history, body);
    const char *target = json_string_value(json_object_get(entry, "prev_content"));
    if (r == 0 && !target)
        r = fawn_err(FAWN_EINVAL, "Selected history entry has no previous content to roll back to");
    if (r == 0)
        r = custom_writable(rq, name);
    if (r == 0)
        r = skills_doc_check(name, target, strlen(target));
    if (r == 0 && skills_custom_read(&current, rq->g->cfg->home, user, name) < 0)
        current = NULL;
    if (r == 0)
        r = skills_custom_write(rq->g->cfg->home, user, name, target, strlen(target));
    if (r == 0)
        history_record(rq, name, "rollback", current, target,
                       json_string_value(json_object_get(entry, "ts")));
    free(current);
    json_decref(history);
    json_decref(body);
    return r < 0 ? r : respond_custom(rq);
}

/* ---- POST /api/skills/install: a .skill archive from a thread's outputs ---- */

/* The archive at the virtual path (with or without its leading '/') in the
 * caller's thread: a regular file ending in .skill under
 * /mnt/user-data/outputs, at most SKILLS_ARCHIVE_MAX bytes, into *data. */
static int archive_load(char **data, size_t *len, gw_request *rq, const char *thread_id,
                        const char *path) {
    *data = NULL;
    *len = 0;
    store_thread t = {0};
    char full[VPATH_MAX + 2];
    snprintf(full, sizeof full, "%s%s", path[0] == '/' ? "" : "/", path);
    size_t n = strlen(full);
    if (n < sizeof SKILLS_ARCHIVE_SUFFIX ||
        strcmp(full + n - strlen(SKILLS_ARCHIVE_SUFFIX), SKILLS_ARCHIVE_SUFFIX) != 0)
        return fawn_err(FAWN_EINVAL, "Only " SKILLS_ARCHIVE_SUFFIX " files can be installed");
    int r = store_thread_get(rq->g->st, &t, rq->who.user.id, thread_id);
    if (r == FAWN_ENOENT)
        r = fawn_err(FAWN_ENOENT, "Thread not found");
    _cleanup_close_ int user_data = -1, fd = -1;
    if (r == 0)
        r = gw_thread_files_open(&user_data, rq, &t, false);
    store_thread_clear(&t);
    vpath_roots roots = {.user_data_fd = user_data, .skills_fd = -1};
    vpath_target target;
    struct stat st;
    if (r == 0 && (r = vpath_resolve(&target, &roots, full, false)) == 0 &&
        !vpath_in_dir(&target.vp, "outputs"))
        r = fawn_err(FAWN_EINVAL, "Only files under /mnt/user-data/outputs can be installed");
    if (r == 0)
        r = vpath_open_regular(&fd, &st, &target);
    if (r == 0 && (r = fawn_read_all(data, len, fd, SKILLS_ARCHIVE_MAX)) == FAWN_E2BIG)
        r = fawn_err(FAWN_EINVAL, "Skill archive is larger than %zu bytes", SKILLS_ARCHIVE_MAX);
    if (r < 0) {
        free(*data);
        *data = NULL;
    }
    return r;
}

/* {"thread_id", "path"}: installs the archive as one of the caller's own
 * skills (a name their role may use, not one of the skills directory's). */
static int route_skill_install(gw_request *rq) {
    json_t *body = NULL;
    char *data = NULL;
    size_t len = 0;
    skills_archive a = {0};
    int r = gw_body_json(&body, rq);
    const char *thread_id = json_string_value(json_object_get(body, "thread_id"));
    const char *path = json_string_value(json_object_get(body, "path"));
    if (r == 0 && (!thread_id || !fawn_id_valid(thread_id) || !path || strlen(path) > VPATH_MAX))
        r = fawn_err(FAWN_EINVAL, "thread_id and path are required");
    if (r == 0)
        r = archive_load(&data, &len, rq, thread_id, path);
    if (r == 0)
        r = skills_archive_read(&a, data, len);
    free(data);
    if (r == 0)
        r = custom_writable(rq, a.name);
    char user[24];
    paths_user_dir_name(user, rq->who.user.id);
    if (r == 0)
        r = skills_archive_install(rq->g->cfg->home, user, &a);
    char *doc = NULL;
    if (r == 0 && skills_custom_read(&doc, rq->g->cfg->home, user, a.name) == 0)
        history_record(rq, a.name, "human_install", NULL, doc, NULL);
    free(doc);
    json_t *answer = r == 0 ? json_pack("{s:b, s:s, s:s+}", "success", 1, "skill_name", a.name,
                                        "message", a.name, " installed")
                            : NULL;
    skills_archive_clear(&a);
    json_decref(body);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, answer);
}

/* POST /api/skills/reload (DeerFlow's answer): fawn keeps no skills
 * cache, every run reads the skills directory again; the reload checks
 * that it can be read. */
static int route_skills_reload(gw_request *rq) {
    json_t *shared = NULL;
    int r = skills_list(&shared, rq->g->cfg->sandbox.skills_dir);
    json_decref(shared);
    return r < 0 ? r
                 : gw_respond_json(rq, MHD_HTTP_OK,
                                   json_pack("{s:b, s:s, s:s}", "success", 1, "scope", "process",
                                             "message",
                                             "Skills are read at the start of each run: "
                                             "subsequent runs see the latest skills."));
}

/* The Lark/Feishu CLI integration: not installed, not configured. */
static int route_lark_status(gw_request *rq) {
    return gw_respond_json(
        rq, MHD_HTTP_OK,
        json_pack("{s:b, s:s, s:n, s:n, s:b, s:b, s:n, s:n, s:i, s:i, s:[], s:[], s:s,"
                  " s:{s:b, s:n, s:n, s:s}, s:{s:s, s:s, s:n, s:b}, s:s, s:b, s:s}",
                  "installed", 0, "version", "", "manifest_version", "latest_available_version",
                  "runtime_version_mismatch", 0, "app_configured", 0, "app_id", "app_brand",
                  "skills_expected", 0, "skills_installed", 0, "installed_skills", "enabled_skills",
                  "install_path", "", "cli", "available", 0, "path", "version", "error",
                  LARK_ABSENT, "auth", "status", "not_configured", "message", LARK_ABSENT, "user",
                  "verified", 0, "sandbox_runtime_mode", "none", "sandbox_runtime_ready", 0,
                  "sandbox_runtime_detail", LARK_ABSENT));
}

#define READ_ROUTE(path, fn)                                                                       \
    { "GET", path, fn, GW_SIGNED_IN, GW_BODY_NONE, 0, NULL }

const gw_route gw_settings_routes[] = {
    READ_ROUTE("/api/features", route_features),
    READ_ROUTE("/api/suggestions/config", route_suggestions_config),
    READ_ROUTE("/api/skills", route_skills),
    READ_ROUTE("/api/skills/custom", route_custom_list),
    READ_ROUTE("/api/skills/custom/{}", route_custom_get),
    {"PUT", "/api/skills/custom/{}", route_custom_put, GW_SIGNED_IN, GW_BODY_BUFFER,
     CUSTOM_PUT_BODY_MAX, NULL},
    {"DELETE", "/api/skills/custom/{}", route_custom_delete, GW_SIGNED_IN, GW_BODY_NONE, 0, NULL},
    READ_ROUTE("/api/skills/custom/{}/history", route_custom_history),
    {"POST", "/api/skills/custom/{}/rollback", route_custom_rollback, GW_SIGNED_IN, GW_BODY_BUFFER,
     SKILL_PUT_BODY_MAX, NULL},
    {"POST", "/api/skills/reload", route_skills_reload, AUTHZ_SKILLS_WRITE, GW_BODY_NONE, 0, NULL},
    {"POST", "/api/skills/install", route_skill_install, AUTHZ_THREADS_READ, GW_BODY_BUFFER,
     SKILL_PUT_BODY_MAX + VPATH_MAX, NULL},
    READ_ROUTE("/api/skills/{}", route_skill_get),
    {"PUT", "/api/skills/{}", route_skill_put, AUTHZ_SKILLS_WRITE, GW_BODY_BUFFER,
     SKILL_PUT_BODY_MAX, NULL},
    READ_ROUTE("/api/integrations/lark/status", route_lark_status),
};
const size_t gw_settings_routes_count = ARRAY_LEN(gw_settings_routes);
