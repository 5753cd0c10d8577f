/* /api/memory: the caller's memory (DeerFlow's UserMemory document) and
 * its facts. Every route reads and changes the signed-in user's own facts
 * only: the store takes the owner with every call, so another user's fact
 * id is 404. fawn keeps facts, not DeerFlow's summaries: the document's
 * user and history sections are always empty. */
#include <stdio.h>
#include <string.h>

#include "gateway/internal.h"

/* An import body: STORE_FACTS_MAX facts of STORE_FACT_CONTENT_MAX bytes,
 * each up to twice as long escaped, with their other fields. */
#define MEMORY_IMPORT_BODY_MAX ((size_t)4 << 20)
/* A fact's id: "fact_" and 32 lowercase hex digits. */
#define FACT_ID_PREFIX "fact_"
#define FACT_ID_HEX 32

static json_t *summary_sections(const char *a, const char *b, const char *c) {
    return json_pack("{s:{s:s,s:s}, s:{s:s,s:s}, s:{s:s,s:s}}", a, "summary", "", "updatedAt", "",
                     b, "summary", "", "updatedAt", "", c, "summary", "", "updatedAt", "");
}

static json_t *fact_json(const store_fact *f) {
    char created[40], updated[40];
    gw_iso_time(created, f->created_at_ms);
    gw_iso_time(updated, f->updated_at_ms);
    return json_pack("{s:s, s:s, s:s, s:f, s:s, s:s, s:s}", "id", f->id, "content", f->content,
                     "category", f->category, "confidence", f->confidence, "createdAt", created,
                     "updatedAt", updated, "source", f->source);
}

/* The UserMemory document of facts[0..n): lastUpdated is the newest
 * change ("" when there are no facts). */
static json_t *memory_document(const store_fact *facts, size_t n) {
    int64_t last = 0;
    json_t *list = json_array();
    for (size_t i = 0; list && i < n; i++) {
        last = facts[i].updated_at_ms > last ? facts[i].updated_at_ms : last;
        json_array_append_new(list, fact_json(&facts[i]));
    }
    char when[40] = "";
    if (last)
        gw_iso_time(when, last);
    return json_pack("{s:s, s:s, s:o?, s:o?, s:o?}", "version", "1.0", "lastUpdated", when, "user",
                     summary_sections("workContext", "personalContext", "topOfMind"), "history",
                     summary_sections("recentMonths", "earlierContext", "longTermBackground"),
                     "facts", list);
}

/* The caller's document, new, into *out. */
static int document_of(json_t **out, gw_request *rq) {
    *out = NULL;
    store_fact *facts;
    size_t n;
    int r = store_fact_list(rq->g->st, &facts, &n, rq->who.user.id);
    if (r < 0)
        return r;
    *out = memory_document(facts, n);
    free(facts);
    return *out ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Answers the caller's document as it now is. */
static int respond_document(gw_request *rq) {
    json_t *doc;
    int r = document_of(&doc, rq);
    return r < 0 ? r : gw_respond_json(rq, MHD_HTTP_OK, doc);
}

static int route_memory_get(gw_request *rq) { return respond_document(rq); }

static int route_memory_clear(gw_request *rq) {
    int r = store_fact_replace(rq->g->st, rq->who.user.id, NULL, 0, 1);
    return r < 0 ? r : respond_document(rq);
}

/* A failed change answered as DeerFlow does: a duplicate or a full memory
 * is 409. */
static int change_failed(gw_request *rq, int r) {
    if (r == FAWN_EEXIST)
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, "A fact with the same content exists.");
    if (r == FAWN_E2BIG)
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, fawn_errmsg());
    return r;
}

/* Reads the optional fields of a fact body: content and category (strings)
 * and confidence (a number from 0 to 1; -1 when absent). FAWN_EINVAL
 * naming a field of another type. */
static int fact_fields(const json_t *body, const char **content, const char **category,
                       double *confidence) {
    const json_t *c = json_object_get(body, "content"), *k = json_object_get(body, "category"),
                 *v = json_object_get(body, "confidence");
    *content = json_string_value(c);
    *category = json_string_value(k);
    *confidence = v ? json_number_value(v) : -1;
    if ((c && !json_is_string(c)) || (k && !json_is_string(k)))
        return fawn_err(FAWN_EINVAL, "content and category are strings");
    if (v && (!json_is_number(v) || *confidence < 0 || *confidence > 1))
        return fawn_err(FAWN_EINVAL, "confidence is a number from 0 to 1");
    return 0;
}

/* Copies text into dst (size bytes); FAWN_EINVAL naming field when it does
 * not fit. */
static int field_copy(char *dst, size_t size, const char *text, const char *field) {
    if (strlen(text) >= size)
        return fawn_err(FAWN_EINVAL, "%s is at most %zu bytes", field, size - 1);
    memcpy(dst, text, strlen(text) + 1);
    return 0;
}

/* A new fact from a body's fields (content required; category "context"
 * and confidence 0.5 by default). */
static int fact_from(store_fact *f, const json_t *body, const char *source) {
    *f = (store_fact){.confidence = 0.5};
    const char *content, *category;
    double confidence;
    int r = fact_fields(body, &content, &category, &confidence);
    if (r == 0 && !content)
        r = fawn_err(FAWN_EINVAL, "content is required");
    if (r == 0)
        r = field_copy(f->content, sizeof f->content, content, "content");
    if (r == 0)
        r = field_copy(f->category, sizeof f->category, category ? category : "context",
                       "category");
    if (r == 0)
        r = field_copy(f->source, sizeof f->source, source, "source");
    if (confidence >= 0)
        f->confidence = confidence;
    return r == 0 ? store_fact_check(f) : r;
}

static int route_fact_create(gw_request *rq) {
    json_t *body;
    int r = gw_body_json(&body, rq);
    store_fact f;
    if (r == 0)
        r = fact_from(&f, body, "manual");
    json_decref(body);
    if (r == 0)
        r = store_fact_add(rq->g->st, NULL, rq->who.user.id, &f, rq->g->cfg->memory.max_facts);
    return r < 0 ? change_failed(rq, r) : respond_document(rq);
}

/* Whether id has the shape of a fact id (anything else names no fact). */
static bool fact_id_ok(const char *id) {
    size_t p = sizeof FACT_ID_PREFIX - 1;
    if (strlen(id) != p + FACT_ID_HEX || strncmp(id, FACT_ID_PREFIX, p) != 0)
        return false;
    return strspn(id + p, "0123456789abcdef") == FACT_ID_HEX;
}

static int route_fact_update(gw_request *rq) {
    const char *id = rq->params[0];
    if (!fact_id_ok(id))
        return fawn_err(FAWN_ENOENT, "no such fact");
    json_t *body;
    const char *content = NULL, *category = NULL;
    double confidence = -1;
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = fact_fields(body, &content, &category, &confidence);
    if (r == 0)
        r = store_fact_update(rq->g->st, NULL, rq->who.user.id, id, content, category, confidence);
    json_decref(body);
    return r < 0 ? change_failed(rq, r) : respond_document(rq);
}

static int route_fact_delete(gw_request *rq) {
    const char *id = rq->params[0];
    int r = fact_id_ok(id) ? store_fact_delete(rq->g->st, rq->who.user.id, id)
                           : fawn_err(FAWN_ENOENT, "no such fact");
    return r < 0 ? r : respond_document(rq);
}

/* The facts of an import body into *out (malloc'd array of *n): each
 * entry as a new fact (its source kept when it is a string, else
 * "import"). FAWN_EINVAL naming the first bad entry; FAWN_E2BIG past
 * STORE_FACTS_MAX. */
static int import_facts(store_fact **out, size_t *n, const json_t *body) {
    *out = NULL;
    *n = 0;
    const json_t *list = json_object_get(body, "facts");
    if (list && !json_is_array(list))
        return fawn_err(FAWN_EINVAL, "facts is a list");
    if (json_array_size(list) > STORE_FACTS_MAX)
        return fawn_err(FAWN_E2BIG, "memory holds at most %d facts", STORE_FACTS_MAX);
    store_fact *facts = calloc(json_array_size(list) + 1, sizeof *facts);
    int r = facts ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    for (size_t i = 0; r == 0 && i < json_array_size(list); i++) {
        const json_t *e = json_array_get(list, i);
        const char *source = json_string_value(json_object_get(e, "source"));
        r = json_is_object(e) ? fact_from(&facts[i], e, source ? source : "import")
                              : fawn_err(FAWN_EINVAL, "not an object");
        if (r < 0)
            r = fawn_err(r, "facts[%zu]: %s", i, fawn_errmsg());
    }
    if (r < 0) {
        free(facts);
        return r;
    }
    *out = facts;
    *n = json_array_size(list);
    return 0;
}

static int route_memory_import(gw_request *rq) {
    json_t *body;
    store_fact *facts = NULL;
    size_t n = 0;
    int r = gw_body_json(&body, rq);
    if (r == 0)
        r = import_facts(&facts, &n, body);
    json_decref(body);
    if (r == 0)
        r = store_fact_replace(rq->g->st, rq->who.user.id, facts, n, rq->g->cfg->memory.max_facts);
    free(facts);
    if (r == FAWN_EEXIST)
        return gw_respond_detail(rq, MHD_HTTP_CONFLICT, fawn_errmsg());
    return r < 0 ? r : respond_document(rq);
}

/* The memory configuration in DeerFlow's shape; fawn's own limits are its
 * backend_config. */
static json_t *memory_config(const fawn_memory_config *m) {
    return json_pack("{s:b, s:s, s:b, s:f, s:s, s:{s:i, s:i, s:i, s:i}}", "enabled", m->enabled,
                     "mode", "middleware", "injection_enabled", m->injection_enabled,
                     "shutdown_flush_timeout_seconds", 0.0, "manager_class", "fawn",
                     "backend_config", "max_facts", (int)m->max_facts, "max_injection_tokens",
                     (int)m->max_injection_tokens, "fact_content_max", STORE_FACT_CONTENT_MAX,
                     "fact_category_max", STORE_FACT_CATEGORY_MAX);
}

static int route_memory_config(gw_request *rq) {
    return gw_respond_json(rq, MHD_HTTP_OK, memory_config(&rq->g->cfg->memory));
}

static int route_memory_status(gw_request *rq) {
    json_t *doc;
    int r = document_of(&doc, rq);
    if (r < 0)
        return r;
    return gw_respond_json(
        rq, MHD_HTTP_OK,
        json_pack("{s:o?, s:o}", "config", memory_config(&rq->g->cfg->memory), "data", doc));
}

#define MEMORY_ROUTE(method, path, fn, body, max)                                                  \
    { method, path, fn, GW_SIGNED_IN, body, max, NULL }

const gw_route gw_memory_routes[] = {
    MEMORY_ROUTE("GET", "/api/memory", route_memory_get, GW_BODY_NONE, 0),
    MEMORY_ROUTE("DELETE", "/api/memory", route_memory_clear, GW_BODY_NONE, 0),
    MEMORY_ROUTE("POST", "/api/memory/reload", route_memory_get, GW_BODY_NONE, 0),
    MEMORY_ROUTE("GET", "/api/memory/export", route_memory_get, GW_BODY_NONE, 0),
    MEMORY_ROUTE("POST", "/api/memory/import", route_memory_import, GW_BODY_BUFFER,
                 MEMORY_IMPORT_BODY_MAX),
    MEMORY_ROUTE("GET", "/api/memory/config", route_memory_config, GW_BODY_NONE, 0),
    MEMORY_ROUTE("GET", "/api/memory/status", route_memory_status, GW_BODY_NONE, 0),
    MEMORY_ROUTE("POST", "/api/memory/facts", route_fact_create, GW_BODY_BUFFER, GW_JSON_BODY_MAX),
    MEMORY_ROUTE("PATCH", "/api/memory/facts/{}", route_fact_update, GW_BODY_BUFFER,
                 GW_JSON_BODY_MAX),
    MEMORY_ROUTE("DELETE", "/api/memory/facts/{}", route_fact_delete, GW_BODY_NONE, 0),
};
const size_t gw_memory_routes_count = ARRAY_LEN(gw_memory_routes);
