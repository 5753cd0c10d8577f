/* fawn user add | role: create a user in the store from the shell, or
 * give one another role. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "auth/auth.h"
#include "authz/authz.h"
#include "base/base.h"
#include "cli/cli.h"
#include "config/config.h"
#include "store/store.h"

static void usage(FILE *out) {
    fprintf(out, "usage: fawn user add --username NAME [--admin] [--config FILE]\n"
                 "       fawn user role --username NAME --role ROLE [--config FILE]\n\n"
                 "add creates a user in $FAWN_HOME/fawn.db (role admin with --admin, else user).\n"
                 "The password is read from the first line of standard input, so it never\n"
                 "appears in a command line or the shell's history.\n"
                 "role gives a user another role: the next request, and the next tool call of\n"
                 "a run already going, are decided by it.\n");
}

typedef struct user_args {
    const char *command, *username, *config, *role;
    bool admin;
} user_args;

static int parse_args(user_args *a, int argc, char **argv) {
    static const struct option opts[] = {
        {"username", required_argument, 0, 'u'}, {"admin", no_argument, 0, 'a'},
        {"role", required_argument, 0, 'r'},     {"config", required_argument, 0, 'c'},
        {"help", no_argument, 0, 'h'},           {0, 0, 0, 0}};
    *a = (user_args){0};
    if (argc < 2 || (strcmp(argv[1], "add") != 0 && strcmp(argv[1], "role") != 0))
        return fawn_err(FAWN_EINVAL, "expected 'add' or 'role'");
    a->command = argv[1];
    int c;
    optind = 2;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'u': a->username = optarg; break;
        case 'a': a->admin = true; break;
        case 'r': a->role = optarg; break;
        case 'c': a->config = optarg; break;
        case 'h': usage(stdout); exit(0);
        default: return fawn_err(FAWN_EINVAL, "unknown option");
        }
    }
    if (!a->username || !auth_username_valid(a->username))
        return fawn_err(FAWN_EINVAL, "--username must be 1 to %d letters, digits or . _ @ + -",
                        STORE_NAME_MAX);
    bool role = strcmp(a->command, "role") == 0;
    if (role && (!a->role || strlen(a->role) > STORE_ROLE_MAX || !fawn_id_valid(a->role)))
        return fawn_err(FAWN_EINVAL, "--role must be 1 to %d letters, digits, _ or -",
                        STORE_ROLE_MAX);
    if (!role && a->role)
        return fawn_err(FAWN_EINVAL, "--role is for 'fawn user role'");
    return 0;
}

/* The first line of standard input, without its newline. */
static int read_password(char *out, size_t outsz) {
    if (!fgets(out, (int)outsz, stdin))
        return fawn_err(FAWN_EINVAL, "no password on standard input");
    size_t n = strcspn(out, "\r\n");
    if (out[n] == '\0' && n == outsz - 1)
        return fawn_err(FAWN_EINVAL, "the password is longer than %d bytes", AUTH_PASSWORD_MAX);
    out[n] = '\0';
    return 0;
}

static int store_of(store **st, const fawn_config *cfg) { return cli_store_open(st, cfg); }

static int add_user(const user_args *a, const fawn_config *cfg) {
    char password[AUTH_PASSWORD_MAX + 2], hash[AUTH_HASH_MAX];
    int r = read_password(password, sizeof password);
    if (r == 0)
        r = auth_password_hash(hash, password);
    memset(password, 0, sizeof password);
    store *st = NULL;
    store_user u;
    if (r == 0 && (r = store_of(&st, cfg)) == 0)
        r = store_user_create(st, &u, a->username, hash, a->admin ? AUTHZ_ADMIN_ROLE : "user");
    store_close(st);
    if (r == 0)
        printf("created %s %s (id %lld)\n", u.role, u.username, (long long)u.id);
    return r;
}

static int set_role(const user_args *a, const fawn_config *cfg) {
    store *st = NULL;
    store_user u;
    int r = store_of(&st, cfg);
    if (r == 0)
        r = store_user_get_by_name(st, &u, a->username);
    if (r == 0)
        r = store_user_set_role(st, u.id, a->role);
    store_close(st);
    if (r == 0)
        printf("%s now has role %s\n", u.username, a->role);
    return r;
}

int cli_user(int argc, char **argv) {
    user_args a;
    fawn_config cfg = {0};
    int r = parse_args(&a, argc, argv);
    if (r < 0) {
        fprintf(stderr, "fawn user: %s\n", fawn_errmsg());
        usage(stderr);
        return 2;
    }
    r = config_load(&cfg, a.config);
    if (r == 0)
        r = strcmp(a.command, "add") == 0 ? add_user(&a, &cfg) : set_role(&a, &cfg);
    if (r < 0)
        fprintf(stderr, "fawn user: %s\n", fawn_errmsg());
    config_free(&cfg);
    return r < 0 ? 1 : 0;
}
