/* A thread's state as checkpoints hold it (agent.h, "thread state"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "agent/agent.h"

/* Makes sure key of values is a list. */
static int ensure_list(json_t *values, const char *key) {
    if (json_is_array(json_object_get(values, key)))
        return 0;
    return json_object_set_new(values, key, json_array()) == 0
               ? 0
               : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* The whole state that checkpoint cp names, parsed. */
static int state_whole(json_t **values, store *st, int64_t owner_id, const char *thread_id,
                       const store_checkpoint *cp) {
    *values = NULL;
    char *text;
    size_t omitted;
    int r = store_state_read(st, &text, &omitted, owner_id, thread_id, cp->state, SIZE_MAX);
    if (r < 0)
        return r;
    *values = json_loads(text, 0, NULL);
    free(text);
    if (json_is_object(*values))
        return 0;
    json_decref(*values);
    *values = NULL;
    return fawn_err(FAWN_EIO, "thread %s: its stored state is not an object", thread_id);
}

int agent_state_load_at(json_t **values, char checkpoint_id[STORE_RUN_ID_MAX + 1], store *st,
                        int64_t owner_id, const char *thread_id, const char *at) {
    *values = NULL;
    checkpoint_id[0] = '\0';
    store_checkpoint cp;
    int r = at && at[0] ? store_checkpoint_get(st, &cp, owner_id, thread_id, at)
                        : store_checkpoint_latest(st, &cp, owner_id, thread_id);
    if (r < 0 && (r != FAWN_ENOENT || (at && at[0])))
        return r;
    if (r == 0) {
        snprintf(checkpoint_id, STORE_RUN_ID_MAX + 1, "%s", cp.checkpoint_id);
        r = state_whole(values, st, owner_id, thread_id, &cp);
        store_checkpoint_clear(&cp);
    } else if (!(*values = json_object())) {
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    } else {
        r = 0;
    }
    if (r == 0)
        r = ensure_list(*values, "messages");
    if (r == 0)
        r = ensure_list(*values, "artifacts");
    if (r < 0) {
        json_decref(*values);
        *values = NULL;
        checkpoint_id[0] = '\0';
    }
    return r;
}

int agent_state_load(json_t **values, char checkpoint_id[STORE_RUN_ID_MAX + 1], store *st,
                     int64_t owner_id, const char *thread_id) {
    return agent_state_load_at(values, checkpoint_id, st, owner_id, thread_id, NULL);
}

int agent_state_save(char checkpoint_id[STORE_RUN_ID_MAX + 1], char **state, store *st,
                     int64_t owner_id, const char *thread_id, const char *parent_id,
                     const char *run_id, const json_t *values, const char *metadata) {
    if (state)
        *state = NULL;
    store_checkpoint cp = {.metadata = (char *)metadata};
    char id[40];
    fawn_random_uuid(id);
    snprintf(cp.checkpoint_id, sizeof cp.checkpoint_id, "%s", id);
    snprintf(cp.parent_id, sizeof cp.parent_id, "%s", parent_id ? parent_id : "");
    snprintf(cp.run_id, sizeof cp.run_id, "%s", run_id ? run_id : "");
    int r = metadata ? store_checkpoint_put(st, state, owner_id, thread_id, &cp, values)
                     : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        snprintf(checkpoint_id, STORE_RUN_ID_MAX + 1, "%s", id);
    return r;
}

void agent_scope(char out[SBX_SCOPE_MAX + 1], const char *run_id) {
    snprintf(out, SBX_SCOPE_MAX + 1, "%s:%s", run_id, AGENT_ASSISTANT_ID);
}

void agent_task_scope(char out[SBX_SCOPE_MAX + 1], const char *run_id, unsigned n) {
    snprintf(out, SBX_SCOPE_MAX + 1, "%s:task-%u", run_id, n);
}
