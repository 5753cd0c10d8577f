/* fawn doctor [--json]: reports this host's isolation features. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/base.h"
#include "cli/cli.h"
#include "cli/doctor.h"

/* Exit statuses: the local provider can run, cannot run, bad command line. */
enum { DOCTOR_EXIT_OK = 0, DOCTOR_EXIT_MISSING = 1, DOCTOR_EXIT_USAGE = 2 };

static void doctor_usage(FILE *out) {
    fprintf(out, "usage: fawn doctor [--json]\n"
                 "\n"
                 "Tries each isolation feature fawn uses (user, mount, pid, network, ipc and uts\n"
                 "namespaces, pivot_root, seccomp, no_new_privs, cgroups, openat2, pidfd_open)\n"
                 "and reports it as ok or missing, with what fawn does without it.\n"
                 "\n"
                 "options:\n"
                 "  --json      print one JSON object instead of text\n"
                 "  -h, --help  show this help\n"
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

int cli_doctor(int argc, char **argv) {
    bool json = false;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = true;
        } else if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            doctor_usage(stdout);
            return DOCTOR_EXIT_OK;
        } else {
            fprintf(stderr, "fawn doctor: unknown argument '%s'\n", argv[i]);
            doctor_usage(stderr);
            return DOCTOR_EXIT_USAGE;
        }
    }
    doctor_report report;
    int ready = doctor_probe(&report);
    if (json) {
        if (doctor_print_json(&report) < 0)
            return DOCTOR_EXIT_MISSING;
    } else {
        doctor_print(stdout, &report);
    }
    return ready == 0 ? DOCTOR_EXIT_OK : DOCTOR_EXIT_MISSING;
}
