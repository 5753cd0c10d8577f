/* The store of a configuration (cli.h). */
#include <stdio.h>

#include "cli/cli.h"

int cli_store_open(store **out, const fawn_config *cfg) {
    *out = NULL;
    if (cfg->store.backend == FAWN_STORE_POSTGRES)
        return store_open_postgres(out, cfg->store.postgres_dsn);
    char path[4096];
    if (snprintf(path, sizeof path, "%s/fawn.db", cfg->home) >= (int)sizeof path)
        return fawn_err(FAWN_EINVAL, "home path too long");
    return store_open(out, path);
}
