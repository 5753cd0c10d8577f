/* A thread's state as checkpoints hold it (agent.h, "thread state"). */
#include <stdio.h>
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

int agent_state_load(json_t **values, char checkpoint_id[STORE_RUN_ID_MAX + 1], store *st,
                     int64_t owner_id, const char *thread_id) {
    *values = NULL;
    checkpoint_id[0] = '\0';
    store_checkpoint cp;
    int r = store_checkpoint_latest(st, &cp, owner_id, thread_id);
    if (r < 0 && r != FAWN_ENOENT)
        return r;
    if (r == 0) {
        snprintf(checkpoint_id, STORE_RUN_ID_MAX + 1, "%s", cp.checkpoint_id);
        *values = json_loads(cp.values, 0, NULL);
        store_checkpoint_clear(&cp);
        if (!json_is_object(*values)) {
            json_decref(*values);
            *values = NULL;
            return fawn_err(FAWN_EIO, "thread %s: its stored state is not an object", thread_id);
        }
    } else if (!(*values = json_object())) {
        return fawn_err(FAWN_ENOMEM, "out of memory");
    }
    r = ensure_list(*values, "messages");
    if (r == 0)
        r = ensure_list(*values, "artifacts");
    if (r < 0) {
        json_decref(*values);
        *values = NULL;
    }
    return r;
}

int agent_state_save(char checkpoint_id[STORE_RUN_ID_MAX + 1], store *st, int64_t owner_id,
                     const char *thread_id, const char *parent_id, const char *run_id,
                     const char *values, const char *metadata) {
    store_checkpoint cp = {.values = (char *)values, .metadata = (char *)metadata};
    char id[40];
    fawn_random_uuid(id);
    snprintf(cp.checkpoint_id, sizeof cp.checkpoint_id, "%s", id);
    snprintf(cp.parent_id, sizeof cp.parent_id, "%s", parent_id ? parent_id : "");
    snprintf(cp.run_id, sizeof cp.run_id, "%s", run_id ? run_id : "");
    int r = values && metadata ? store_checkpoint_put(st, owner_id, thread_id, &cp)
                               : fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        snprintf(checkpoint_id, STORE_RUN_ID_MAX + 1, "%s", id);
    return r;
}

void agent_scope(char out[SBX_SCOPE_MAX + 1], const char *run_id) {
    snprintf(out, SBX_SCOPE_MAX + 1, "%s:%s", run_id, AGENT_ASSISTANT_ID);
}
