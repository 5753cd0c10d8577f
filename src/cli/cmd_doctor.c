/* fawn doctor [--json]: reports this host's isolation features. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "cli/doctor.h"
#include "config/config.h"

/* Exit statuses: the local provider can run, cannot run, bad command line. */
enum { DOCTOR_EXIT_OK = 0, DOCTOR_EXIT_MISSING = 1, DOCTOR_EXIT_USAGE = 2 };

static void doctor_usage(FILE *out) {
    fprintf(out, "usage: fawn doctor [--json] [--config FILE]\n"
                 "\n"
                 "Tries each isolation feature fawn uses (user, mount, pid, network, ipc and uts\n"
                 "namespaces, pivot_root, seccomp, no_new_privs, cgroups, openat2, pidfd_open)\n"
                 "and reports it as ok or missing, with what fawn does without it; and which\n"
                 "disk quota holds a thread's files under the configuration's home (btrfs\n"
                 "qgroups, ext4/XFS project quotas, or measured by fawn).\n"
                 "\n"
                 "options:\n"
                 "  --json         print one JSON object instead of text\n"
                 "  --config FILE  the configuration (else $FAWN_CONFIG, ./config.yaml)\n"
                 "  -h, --help     show this help\n"
                 "\n"
                 "exit status: 0 when the local provider can start sandboxes here, 1 when\n"
                 "something it needs is missing, 2 on a usage error.\n");
}

static int doctor_print_json(const doctor_report *r) {
    json_t *obj = NULL;
    if (doctor_to_json(&obj, r) < 0) {
        fprintf(stderr, "fawn doctor: %s\n", fawn_errmsg());
        return -1;
    }
    char *text = json_dumps(obj, JSON_INDENT(2));
    json_decref(obj);
    if (!text) {
        fprintf(stderr, "fawn doctor: out of memory writing JSON\n");
        return -1;
    }
    printf("%s\n", text);
    free(text);
    return 0;
}

/* Reads the command line: --json, --config FILE. */
static int doctor_args(bool *json, const char **config, int argc, char **argv) {
    *json = false;
    *config = NULL;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0)
            *json = true;
        else if (strcmp(argv[i], "--config") == 0 && i + 1 < argc)
            *config = argv[++i];
        else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0)
            return 1;
        else
            return fawn_err(FAWN_EINVAL, "unknown argument '%s'", argv[i]);
    }
    return 0;
}

int cli_doctor(int argc, char **argv) {
    bool json;
    const char *config_path;
    int r = doctor_args(&json, &config_path, argc, argv);
    if (r != 0) {
        if (r < 0)
            fprintf(stderr, "fawn doctor: %s\n", fawn_errmsg());
        doctor_usage(r < 0 ? stderr : stdout);
        return r < 0 ? DOCTOR_EXIT_USAGE : DOCTOR_EXIT_OK;
    }
    fawn_config cfg = {0};
    if (config_load(&cfg, config_path) < 0) {
        fprintf(stderr, "fawn doctor: %s\n", fawn_errmsg());
        return DOCTOR_EXIT_USAGE;
    }
    doctor_report report;
    int ready = doctor_probe(&report, cfg.home);
    config_free(&cfg);
    if (json) {
        if (doctor_print_json(&report) < 0)
            return DOCTOR_EXIT_MISSING;
    } else {
        doctor_print(stdout, &report);
    }
    return ready == 0 ? DOCTOR_EXIT_OK : DOCTOR_EXIT_MISSING;
}
