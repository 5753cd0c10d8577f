/* Subcommands of the fawn binary. Each takes argv with argv[0] = its name and
 * returns the process exit status. */
#ifndef FAWN_CLI_H
#define FAWN_CLI_H

int cli_sandbox(int argc, char **argv);
int cli_box(int argc, char **argv);
int cli_doctor(int argc, char **argv);
int cli_serve(int argc, char **argv);
int cli_user(int argc, char **argv);

#endif
