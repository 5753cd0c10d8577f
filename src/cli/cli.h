/* Subcommands of the fawn binary. Each takes argv with argv[0] = its name and
 * returns the process exit status. */
#ifndef FAWN_CLI_H
#define FAWN_CLI_H

#include "config/config.h"
#include "base/base.h"
#include "store/store.h"

FAWN_MUST_CHECK int cli_sandbox(int argc, char **argv);
FAWN_MUST_CHECK int cli_box(int argc, char **argv);
/* The credential broker's shim inside a sandbox (broker/broker.h). */
FAWN_MUST_CHECK int cli_broker_call(int argc, char **argv);
FAWN_MUST_CHECK int cli_chat(int argc, char **argv);
FAWN_MUST_CHECK int cli_doctor(int argc, char **argv);
FAWN_MUST_CHECK int cli_serve(int argc, char **argv);
FAWN_MUST_CHECK int cli_user(int argc, char **argv);
/* fawn mcp discover|drift NAME: an MCP server's tools pinned, or their drift. */
FAWN_MUST_CHECK int cli_mcp(int argc, char **argv);

/* Opens the store the configuration names (store.backend): SQLite at
 * $home/fawn.db, or PostgreSQL at store.postgres.dsn (cli_store.c). The
 * one way a subcommand opens it. Caller closes. */
FAWN_MUST_CHECK int cli_store_open(store **out, const fawn_config *cfg);

/* `fawn sandbox ls` once its configuration is loaded (cmd_sandbox_ls.c). */
FAWN_MUST_CHECK int cli_sandbox_ls(const fawn_config *cfg);

#endif
