/* Regenerate and edit-and-rerun as DeerFlow's web UI asks for them
 * (replay.h): POST /api/threads/{id}/runs/regenerate/prepare and
 * .../runs/edit-regenerate/prepare. Each answers what the client then
 * starts a run with: the input to send again, the checkpoint to start
 * from (just before the question repeated) and the metadata that ties the
 * new run to the one it replaces. Nothing is written here; the run forks
 * the thread, and the replaced turn stays in its history. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "gateway/internal.h"
#include "gateway/replay.h"

/* DeerFlow's words for a turn whose start is not known. */
#define NO_BASE "Could not find an addressable checkpoint before the target user message"
#define NO_SOURCE_RUN "Could not find source run for assistant message"

/* What both routes read: the body, the caller's thread, its newest
 * checkpoint and the whole state it holds. */
typedef struct prep {
    json_t *body;
    store_thread t;
    store_checkpoint head;
    json_t *values;
    const json_t *messages; /* values' list */
} prep;

static void prep_clear(prep *p) {
    json_decref(p->body);
    json_decref(p->values);
    store_thread_clear(&p->t);
    store_checkpoint_clear(&p->head);
    *p = (prep){0};
}

/* The newest state of p's thread, whole, into p->values. */
static int prep_state(prep *p, gw_request *rq) {
    int r = store_checkpoint_latest(rq->g->st, &p->head, rq->who.user.id, p->t.id);
    if (r == FAWN_ENOENT)
        return fawn_err(FAWN_ENOENT, "Thread %s has no checkpoint", p->t.id);
    char *text = NULL;
    size_t omitted;
    if (r == 0)
        r = store_state_read(rq->g->st, &text, &omitted, rq->who.user.id, p->t.id, p->head.state,
                             SIZE_MAX);
    if (r == 0 && !(p->values = json_loads(text, 0, NULL)))
        r = fawn_err(FAWN_EIO, "thread %s: its state is not JSON", p->t.id);
    free(text);
    p->messages = json_object_get(p->values, "messages");
    return r;
}

/* The thread (404 when not the caller's), the body (only keys; FAWN_EINVAL
 * otherwise) and the state. */
static int prep_open(prep *p, gw_request *rq, const char *const *keys) {
    *p = (prep){0};
    int r = gw_thread_resolve(&p->t, rq, false);
    if (r == 0)
        r = gw_body_json(&p->body, rq);
    if (r == 0)
        r = fjson_check_keys(p->body, keys);
    return r == 0 ? prep_state(p, rq) : r;
}

/* A required field of the body: a string of some text. */
static int text_field(const char **out, const json_t *body, const char *key) {
    *out = NULL;
    int r = fjson_get_string(out, body, key, true);
    if (r == 0 && !(*out)[0])
        r = fawn_err(FAWN_EINVAL, "'%s' must not be empty", key);
    if (r < 0)
        *out = NULL;
    return r;
}

/* Where the message of id id came into the lineage of the newest state:
 * the run that added it (run_id, "" for a client) and the checkpoint
 * just before it (base, "" when there is none). FAWN_ENOENT when
 * unknown. */
static int origin(char run_id[STORE_RUN_ID_MAX + 1], char base[STORE_RUN_ID_MAX + 1],
                  gw_request *rq, const prep *p, const char *id) {
    store_checkpoint first;
    int r = store_checkpoint_origin(rq->g->st, &first, rq->who.user.id, p->t.id,
                                    p->head.checkpoint_id, id);
    snprintf(run_id, STORE_RUN_ID_MAX + 1, "%s", r == 0 ? first.run_id : "");
    snprintf(base, STORE_RUN_ID_MAX + 1, "%s", r == 0 ? first.parent_id : "");
    store_checkpoint_clear(&first);
    return r;
}

/* The checkpoint before the question of id id, into base: FAWN_EBUSY
 * (409) when there is none. */
static int question_base(char base[STORE_RUN_ID_MAX + 1], gw_request *rq, const prep *p,
                         const char *id) {
    char run[STORE_RUN_ID_MAX + 1];
    int r = origin(run, base, rq, p, id);
    if (r == FAWN_ENOENT || (r == 0 && !base[0])) {
        log_debug("gateway", "thread %s: no base before %s: %s", p->t.id, id,
                  r < 0 ? fawn_errmsg() : "the first checkpoint holds it");
        base[0] = '\0';
        return fawn_err(FAWN_EBUSY, NO_BASE);
    }
    return r;
}

/* The run that wrote the answer of id id, into run_id: FAWN_EBUSY (409)
 * when it is not known (or a client wrote it). */
static int answer_run(char run_id[STORE_RUN_ID_MAX + 1], gw_request *rq, const prep *p,
                      const char *id) {
    char base[STORE_RUN_ID_MAX + 1];
    int r = origin(run_id, base, rq, p, id);
    if (r == FAWN_ENOENT || (r == 0 && !run_id[0])) {
        run_id[0] = '\0';
        return fawn_err(FAWN_EBUSY, NO_SOURCE_RUN);
    }
    return r;
}

/* The status of the thread's run run_id into status ("" when unknown). */
static int run_status(char status[16], store_run *keep, gw_request *rq, const prep *p,
                      const char *run_id) {
    if (keep)
        *keep = (store_run){0};
    store_run run;
    int r = store_run_get(rq->g->st, &run, rq->who.user.id, p->t.id, run_id);
    snprintf(status, 16, "%s", r == 0 ? run.status : "");
    if (keep && r == 0)
        *keep = run;
    else
        store_run_clear(&run);
    return r == FAWN_ENOENT ? 0 : r;
}

/* {checkpoint_ns, checkpoint_id, checkpoint_map} of LangGraph's config. */
static json_t *checkpoint_json(const char *id) {
    return json_pack("{s:s, s:s, s:n}", "checkpoint_ns", "", "checkpoint_id", id, "checkpoint_map");
}

/* The state's title when it is some text, else NULL (borrowed). */
static const json_t *title_of(const json_t *values) {
    const json_t *title = json_object_get(values, "title");
    return json_is_string(title) && json_string_length(title) ? title : NULL;
}

/* Answers 200 with answer (taken), 422 for a bad body, else r. */
static int prep_respond(gw_request *rq, int r, json_t *answer) {
    if (r == 0 && !answer)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        json_decref(answer);
        return r == FAWN_EINVAL
                   ? gw_respond_detail(rq, MHD_HTTP_UNPROCESSABLE_CONTENT, fawn_errmsg())
                   : r;
    }
    return gw_respond_json(rq, MHD_HTTP_OK, answer);
}

/* ---- regenerate ---- */

/* The turn a regenerate of the message of id target repeats: its question
 * (index into *human), the run whose answer it replaces and the
 * checkpoint before the question. An answer cut short while the model
 * spoke never reached the state: then target is unknown, and the latest
 * question is repeated when the run that asked it was interrupted
 * (DeerFlow's rule). */
static int regenerate_turn(size_t *human, char run_id[STORE_RUN_ID_MAX + 1],
                           char base[STORE_RUN_ID_MAX + 1], gw_request *rq, const prep *p,
                           const char *target) {
    size_t ai;
    base[0] = run_id[0] = '\0';
    int r = gw_replay_pick_regenerate(&ai, human, p->messages, target);
    const char *question = json_string_value(
        json_object_get(json_array_get(p->messages, r == 0 ? *human : SIZE_MAX), "id"));
    if (r == 0 && (r = answer_run(run_id, rq, p, target)) == 0)
        return question_base(base, rq, p, question);
    if (r != FAWN_ENOENT)
        return r;
    char status[16] = "";
    if (gw_replay_latest_human(human, p->messages) == 0) {
        question = json_string_value(json_object_get(json_array_get(p->messages, *human), "id"));
        r = origin(run_id, base, rq, p, question);
        r = r == 0 && run_id[0] ? run_status(status, NULL, rq, p, run_id) : r;
        if (r < 0 && r != FAWN_ENOENT)
            return r;
    }
    if (strcmp(status, "interrupted") != 0)
        return fawn_err(FAWN_ENOENT, "Message %s not found", target);
    return question_base(base, rq, p, question);
}

static json_t *regenerate_answer(const prep *p, size_t human, const char *target,
                                 const char *run_id, const char *base) {
    json_t *again = gw_replay_human(json_array_get(p->messages, human), NULL, NULL);
    json_t *input = again ? json_pack("{s:[o], s:O*}", "messages", again, "title",
                                      title_of(p->values))
                          : NULL;
    json_t *cp = checkpoint_json(base);
    if (!input || !cp) {
        json_decref(input);
        json_decref(cp);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:{s:s, s:s, s:s}, s:s}", "input", input, "checkpoint", cp,
                     "metadata", "regenerate_from_message_id", target, "regenerate_from_run_id",
                     run_id, "regenerate_checkpoint_id", base, "target_run_id", run_id);
}

static int route_regenerate_prepare(gw_request *rq) {
    static const char *const keys[] = {"message_id", NULL};
    prep p;
    int r = prep_open(&p, rq, keys);
    const char *target = NULL;
    if (r == 0)
        r = text_field(&target, p.body, "message_id");
    size_t human = 0;
    char run_id[STORE_RUN_ID_MAX + 1] = "", base[STORE_RUN_ID_MAX + 1] = "";
    if (r == 0)
        r = regenerate_turn(&human, run_id, base, rq, &p, target);
    json_t *answer = r == 0 ? regenerate_answer(&p, human, target, run_id, base) : NULL;
    r = prep_respond(rq, r, answer);
    prep_clear(&p);
    return r;
}

/* ---- edit and rerun ---- */

/* What an edit replaces: its question and answer, the run that answered
 * (which must have succeeded) and the checkpoint before the question. */
typedef struct edit_turn {
    size_t human, ai;
    const char *human_id, *ai_id; /* borrowed from the state */
    char run_id[STORE_RUN_ID_MAX + 1];
    char base[STORE_RUN_ID_MAX + 1];
    json_t *source_meta; /* the replaced run's metadata, or NULL */
    const char *group;   /* edit_version_group_id (borrowed) */
} edit_turn;

/* The group of versions an edit belongs to: the source run's, else the
 * question's id (the first edit of it). */
static void edit_group(edit_turn *e, const store_run *source) {
    e->source_meta = json_loads(source->metadata ? source->metadata : "{}", 0, NULL);
    e->group = json_string_value(json_object_get(e->source_meta, "edit_version_group_id"));
    if (!e->group || !e->group[0])
        e->group = e->human_id;
}

static int edit_sources(edit_turn *e, gw_request *rq, const prep *p) {
    int r = question_base(e->base, rq, p, e->human_id);
    if (r == 0)
        r = answer_run(e->run_id, rq, p, e->ai_id);
    char status[16] = "";
    store_run source = {0};
    if (r == 0)
        r = run_status(status, &source, rq, p, e->run_id);
    if (r == 0 && !status[0])
        r = fawn_err(FAWN_EBUSY, NO_SOURCE_RUN);
    if (r == 0 && strcmp(status, "success") != 0)
        r = fawn_err(FAWN_EBUSY, "Only successful assistant runs can be edited and rerun");
    if (r == 0)
        edit_group(e, &source);
    store_run_clear(&source);
    return r;
}

/* Whether the edited turn's base has a title: only then is the current
 * title kept (an untitled base names the edited turn afresh). */
static bool base_titled(gw_request *rq, const prep *p, const char *base) {
    store_checkpoint cp;
    bool titled = false;
    if (store_checkpoint_get(rq->g->st, &cp, rq->who.user.id, p->t.id, base) == 0) {
        json_t *ref = json_loads(cp.state, 0, NULL);
        titled = title_of(json_object_get(ref, "values")) != NULL;
        json_decref(ref);
    }
    store_checkpoint_clear(&cp);
    return titled;
}

/* The ids of the messages the edit replaces: its question to its answer. */
static json_t *replaced_ids(const prep *p, const edit_turn *e) {
    json_t *ids = json_array();
    for (size_t i = e->human; ids && i <= e->ai; i++) {
        json_t *id = json_object_get(json_array_get(p->messages, i), "id");
        if (json_is_string(id))
            json_array_append(ids, id);
    }
    return ids;
}

static json_t *edit_answer(gw_request *rq, const prep *p, const edit_turn *e, const char *text) {
    char id[40];
    agent_message_id(id);
    const json_t *title = base_titled(rq, p, e->base) ? title_of(p->values) : NULL;
    json_t *again = gw_replay_human(json_array_get(p->messages, e->human), id, text);
    json_t *input = again ? json_pack("{s:[o], s:O*}", "messages", again, "title", title) : NULL;
    json_t *cp = checkpoint_json(e->base), *ids = replaced_ids(p, e);
    if (!input || !cp || !ids) {
        json_decref(input);
        json_decref(cp);
        json_decref(ids);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:{s:s, s:s, s:s, s:s, s:s, s:s, s:s}, s:s, s:s, s:o}", "input",
                     input, "checkpoint", cp, "metadata", "replay_kind", "edit",
                     "regenerate_from_message_id", e->ai_id, "regenerate_from_run_id", e->run_id,
                     "regenerate_checkpoint_id", e->base, "edit_from_message_id", e->human_id,
                     "edit_message_id", id, "edit_version_group_id", e->group, "target_run_id",
                     e->run_id, "replacement_human_message_id", id, "source_message_ids", ids);
}

static int route_edit_prepare(gw_request *rq) {
    static const char *const keys[] = {"human_message_id", "replacement_text", NULL};
    prep p;
    int r = prep_open(&p, rq, keys);
    edit_turn e = {0};
    const char *replacement = NULL;
    char *text = NULL;
    if (r == 0)
        r = text_field(&e.human_id, p.body, "human_message_id");
    if (r == 0)
        r = text_field(&replacement, p.body, "replacement_text");
    if (r == 0)
        r = gw_replay_edit_text(&text, replacement);
    if (r == 0)
        r = gw_replay_pick_edit(&e.human, &e.ai, p.messages, e.human_id, text);
    if (r == 0) {
        e.ai_id = json_string_value(json_object_get(json_array_get(p.messages, e.ai), "id"));
        r = edit_sources(&e, rq, &p);
    }
    json_t *answer = r == 0 ? edit_answer(rq, &p, &e, text) : NULL;
    r = prep_respond(rq, r, answer);
    json_decref(e.source_meta);
    free(text);
    prep_clear(&p);
    return r;
}

#define PREPARE_BODY GW_BODY_BUFFER, GW_JSON_BODY_MAX, NULL

const gw_route gw_replay_routes[] = {
    {"POST", "/api/threads/{}/runs/regenerate/prepare", route_regenerate_prepare, AUTHZ_RUNS_CREATE,
     PREPARE_BODY},
    {"POST", "/api/threads/{}/runs/edit-regenerate/prepare", route_edit_prepare, AUTHZ_RUNS_CREATE,
     PREPARE_BODY},
};
const size_t gw_replay_routes_count = ARRAY_LEN(gw_replay_routes);
