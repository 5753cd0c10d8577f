/* Escape tests of the disk quota: a command in a real sandbox tries to put
 * more than sandbox.limits.disk_mb into its thread's files, or to get out
 * from under the limit, and must fail.
 *
 * One group per mechanism, each with a home of its own: btrfs with quotas,
 * ext4 and XFS with project quotas (filesystems made and loop-mounted by
 * tests/quota_fs.h; a kind the host cannot mount is skipped with the
 * reason), and a plain directory where fawn only measures. Each group
 * starts one sandbox with the local provider and puts the static probe
 * (probe.c) into its workspace. */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include "support.h"
#include "quota_fs.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "base/fsx.h"
#include "base/json.h"
#include "config/config.h"
#include "paths/paths.h"
#include "sandbox/client.h"
#include "sandbox/local.h"
#include "sandbox/quota.h"

#define WS "/mnt/user-data/workspace"
#define PROBE WS "/probe"
#define MiB ((uint64_t)1 << 20)
/* The sandbox's disk limit: the smallest fawn accepts, so filling it is cheap. */
#define LIMIT_MB 16
#define LIMIT ((uint64_t)LIMIT_MB * MiB)
/* Per-file and /tmp limits far from the disk limit, so only it can stop a write. */
#define FILE_MB 256
#define TMP_MB 16
/* Commands here end at once or at the limit; this only catches a hang. */
#define COMMAND_S 60
#define CALL_SLACK_MS 30000
/* How long a stopped box may take to exit before it is killed: only a
 * hang reaches it. */
#define STOP_WAIT_MS 30000
/* Content of one file API write: more than the room a full thread has left. */
#define API_WRITE_BYTES (4 * MiB)

typedef struct quota_ctx {
    test_fs fs;     /* the kernel-quota filesystem, for those groups */
    char tmp[64];   /* a plain home's parent, for the measured group */
    char skip[256]; /* why the group cannot run here, or "" */
    fawn_config cfg;
    local_box box;
    char user_data[PATH_MAX];
    bool measured; /* the group where fawn only measures */
} quota_ctx;

/* ---- setup ---- */

static int copy_probe(const quota_ctx *c) {
    const char *bin = getenv("FAWN_ESCAPE_PROBE");
    if (!bin) {
        print_error("FAWN_ESCAPE_PROBE must name the built escape_probe\n");
        return -1;
    }
    return test_fs_sh("cp %s %s/workspace/probe && chmod 0755 %s/workspace/probe", bin,
                      c->user_data, c->user_data) == 0
               ? 0
               : -1;
}

static int start(quota_ctx *c, const char *home) {
    if (config_defaults(&c->cfg) < 0)
        return -1;
    free(c->cfg.home);
    free(c->cfg.sandbox.skills_dir);
    c->cfg.home = strdup(home);
    c->cfg.sandbox.skills_dir = strf("%s/skills", home);
    c->cfg.sandbox.limits.disk_mb = LIMIT_MB;
    c->cfg.sandbox.limits.file_size_mb = FILE_MB;
    c->cfg.sandbox.limits.tmp_size_mb = TMP_MB;
    local_spec spec = {
        .cfg = &c->cfg, .user = "mallory", .thread = "q1", .fawn_bin = getenv("FAWN_BIN")};
    if (local_box_ensure(&c->box, &spec) < 0) {
        print_error("starting the sandbox: %s\n", fawn_errmsg());
        return -1;
    }
    if (paths_user_data_dir(c->user_data, c->cfg.home, "mallory", "q1") < 0)
        return -1;
    return copy_probe(c);
}

/* The group's home on a filesystem of kind, with its sandbox; when this
 * host cannot make one, c->skip says why. */
static int setup_kernel(quota_ctx *c, enum test_fs_kind kind) {
    if (!test_fs_make(&c->fs, kind, c->skip, sizeof c->skip))
        return 0;
    char *home = strf("%s/home", c->fs.mnt);
    int r = start(c, home);
    free(home);
    return r;
}

/* The measured group's home: a plain directory under /tmp. */
static int setup_measured(quota_ctx *c) {
    c->measured = true;
    snprintf(c->tmp, sizeof c->tmp, "/tmp/fawn-escape-quota-XXXXXX");
    if (!mkdtemp(c->tmp)) {
        c->tmp[0] = '\0';
        return -1;
    }
    quota_fs fs;
    quota_probe_path(&fs, c->tmp);
    if (fs.mechanism != QUOTA_MEASURED) {
        snprintf(c->skip, sizeof c->skip, "/tmp has kernel quotas here: nothing is measured");
        return 0;
    }
    char *home = strf("%s/home", c->tmp);
    int r = start(c, home);
    free(home);
    return r;
}

/* Stops the box, waits for it, and removes the home (and its filesystem).
 * A box a failed stop leaves (said) is killed when the wait runs out. */
static void release(quota_ctx *c) {
    if (c->cfg.home) {
        if (local_box_stop(&c->cfg, "mallory", "q1") < 0)
            print_error("stopping the sandbox: %s\n", fawn_errmsg());
        for (int64_t deadline = fawn_now_ms() + STOP_WAIT_MS;
             c->box.pid > 0 && waitpid(c->box.pid, NULL, WNOHANG) == 0;) {
            if (fawn_now_ms() > deadline) {
                kill(c->box.pid, SIGKILL);
                waitpid(c->box.pid, NULL, 0);
                break;
            }
            usleep(10000);
        }
    }
    if (c->fs.mounted)
        test_fs_remove(&c->fs);
    if (c->tmp[0])
        test_fs_sh("rm -rf %s", c->tmp);
    config_free(&c->cfg);
}

/* ---- commands ---- */

/* Runs command in the sandbox; the box's reply (caller decrefs). */
static json_t *exec_in(const quota_ctx *c, const char *command) {
    json_t *body = json_pack("{s:s, s:i}", "command", command, "timeout_s", COMMAND_S);
    json_t *reply = NULL;
    int status = 0;
    int rc = box_call(&reply, &status, c->box.socket_path, "POST", "/v1/shell/exec", body,
                      COMMAND_S * 1000 + CALL_SLACK_MS);
    json_decref(body);
    if (rc < 0 || status != 200)
        fail_msg("exec of \"%s\": %s (HTTP %d)", command, rc < 0 ? fawn_errmsg() : "", status);
    return reply;
}

static int exit_code(const json_t *reply) {
    return (int)json_integer_value(json_object_get(reply, "exit_code"));
}

static const char *err_text(const json_t *reply) {
    return or_empty(json_string_value(json_object_get(reply, "stderr")));
}

/* Runs the probe with args: it must report the attack blocked, with expect. */
static void probe(const quota_ctx *c, const char *expect, const char *args) {
    char *cmd = strf(PROBE " %s", args);
    json_t *reply = exec_in(c, cmd);
    const char *out = json_string_value(json_object_get(reply, "stdout"));
    if (exit_code(reply) != 0)
        fail_msg("%s: the probe exited %d: %s%s", args, exit_code(reply), or_empty(out),
                 err_text(reply));
    check_contains(args, out, expect);
    check_lacks(args, out, "SUCCEEDED");
    json_decref(reply);
    free(cmd);
}

/* Bytes the thread's files take on the host (its blocks, walked). */
static uint64_t host_usage(const quota_ctx *c) {
    int fd = open(c->user_data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    assert_true(fd >= 0);
    uint64_t used = 0;
    assert_int_equal(quota_measure(&used, fd), 0);
    close(fd);
    return used;
}

/* Removes what a test wrote (the probe stays). */
static void clean(const quota_ctx *c) {
    json_t *reply = exec_in(c, "cd /mnt/user-data && find workspace uploads outputs -mindepth 1 "
                               "! -name probe -delete; sync");
    json_decref(reply);
}

static void check_refused_for_room(const json_t *reply, const char *what) {
    const char *err = err_text(reply);
    if (exit_code(reply) == 0)
        fail_msg("%s went past the disk limit", what);
    if (!strstr(err, "Disk quota exceeded") && !strstr(err, "No space left on device"))
        fail_msg("%s failed, but not for the disk limit: %s", what, err);
    assert_null(json_object_get(reply, "disk")); /* the kernel stopped it: nothing to report */
}

/* ---- the kernel holds the limit ---- */

static void write_past_the_limit_fails(void **state) {
    quota_ctx *c = *state;
    json_t *reply = exec_in(c, "dd if=/dev/zero of=" WS "/big bs=1M count=64");
    check_refused_for_room(reply, "dd of 64 MiB");
    json_decref(reply);
    assert_true(host_usage(c) <= LIMIT);
    clean(c);
}

static void the_three_directories_share_one_limit(void **state) {
    quota_ctx *c = *state;
    json_t *reply = exec_in(c, "set -e; for d in workspace uploads outputs; do "
                               "dd if=/dev/zero of=/mnt/user-data/$d/part bs=1M count=8; done");
    check_refused_for_room(reply, "8 MiB in each of the three directories");
    json_decref(reply);
    assert_true(host_usage(c) <= LIMIT);
    clean(c);
}

static void parallel_writers_share_it(void **state) {
    quota_ctx *c = *state;
    json_t *reply = exec_in(c, "for i in 1 2 3 4 5 6; do "
                               "dd if=/dev/zero of=" WS "/p$i bs=64k count=64 2>/dev/null & "
                               "done; wait; sync");
    json_decref(reply);
    assert_true(host_usage(c) <= LIMIT);
    clean(c);
}

static void many_small_files_stop_too(void **state) {
    quota_ctx *c = *state;
    /* 4 KiB each: 8192 of them are twice the limit. */
    json_t *reply = exec_in(c, "mkdir " WS "/small");
    json_decref(reply);
    probe(c, "many_files: errno=", "many_files " WS "/small 8192 4096");
    assert_true(host_usage(c) <= LIMIT);
    clean(c);
}

static void no_subvolume_or_snapshot(void **state) {
    quota_ctx *c = *state;
    /* A new subvolume would have a qgroup of its own; the filter refuses
     * the call on every filesystem, before the filesystem is asked. */
    probe(c, "btrfs_subvol: errno=1 ", "btrfs_subvol " WS " nested");
    json_t *reply = exec_in(c, "test ! -e " WS "/nested && test ! -e " WS "/nested-v2");
    assert_int_equal(exit_code(reply), 0);
    json_decref(reply);
}

/* The project of path (0 for none, or where there are no projects); a
 * directory that has one must pass it on to what is made in it. */
static uint32_t project_of(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    assert_true(fd >= 0);
    struct stat st;
    struct fsxattr fa;
    memset(&fa, 0, sizeof fa);
    int r = ioctl(fd, FS_IOC_FSGETXATTR, &fa);
    assert_int_equal(fstat(fd, &st), 0);
    close(fd);
    if (r == 0 && fa.fsx_projid && S_ISDIR(st.st_mode))
        assert_true(fa.fsx_xflags & FS_XFLAG_PROJINHERIT);
    return r == 0 ? fa.fsx_projid : 0;
}

static void no_project_change(void **state) {
    quota_ctx *c = *state;
    json_t *reply = exec_in(c, "echo x > " WS "/mine");
    json_decref(reply);
    char *mine = strf("%s/workspace/mine", c->user_data);
    uint32_t before = project_of(mine);
    /* Into no project (or another one), and the directory out of inheriting:
     * a change of project is refused in a user namespace. */
    char *args = strf("projid " WS "/mine %u", before == 0 ? 1u : 0u);
    probe(c, "projid: errno=22 ", args);
    free(args);
    probe(c, "projid: errno=22 ", before == 0 ? "projid " WS " 1" : "projid " WS " 0");
    if (before != 0) /* where there are projects: chattr -P's way too */
        probe(c, "projinherit_off: errno=22 ", "projinherit_off " WS);
    assert_int_equal(project_of(mine), before);
    char *ws = strf("%s/workspace", c->user_data);
    assert_int_equal(project_of(ws), before); /* still the thread's, still inherited */
    assert_int_equal(project_of(c->user_data), before);
    free(ws);
    free(mine);
    clean(c);
}

static void no_quota_calls(void **state) {
    quota_ctx *c = *state;
    probe(c, "quotactl_fd: errno=1 ", "quotactl_fd " WS " 0");
}

static void links_cannot_leave(void **state) {
    quota_ctx *c = *state;
    json_t *reply = exec_in(c, "echo x > " WS "/f");
    json_decref(reply);
    probe(c, "link: errno=18 ", "link " WS "/f /tmp/f");
    probe(c, "link: errno=18 ", "link " WS "/f /mnt/user-data/outputs/f");
    clean(c);
}

static void file_api_write_past_the_limit(void **state) {
    quota_ctx *c = *state;
    json_t *reply = exec_in(c, "dd if=/dev/zero of=" WS "/fill bs=1M count=64");
    json_decref(reply);
    char *content = malloc(API_WRITE_BYTES + 1);
    memset(content, 'x', API_WRITE_BYTES);
    content[API_WRITE_BYTES] = '\0';
    json_t *body = json_pack("{s:s, s:s}", "path", WS "/api.txt", "content", content);
    int status = 0;
    reply = NULL;
    assert_int_equal(box_call(&reply, &status, c->box.socket_path, "POST", "/v1/file/write", body,
                              COMMAND_S * 1000),
                     0);
    json_decref(body);
    free(content);
    char *text = fjson_dump(reply);
    if (status != 413)
        fail_msg("a write past the limit answered HTTP %d: %s", status, or_empty(text));
    free(text);
    json_decref(reply);
    char *ws = strf("%s/workspace", c->user_data);
    assert_int_not_equal(test_fs_sh("ls -a %s | grep -q '^\\.fawn-tmp-'", ws), 0);
    assert_int_not_equal(test_fs_sh("test -e %s/api.txt", ws), 0);
    assert_true(host_usage(c) <= LIMIT);
    free(ws);
    clean(c);
}

static void box_reports_its_disk_quota(void **state) {
    quota_ctx *c = *state;
    json_t *reply = NULL;
    int status = 0;
    assert_int_equal(
        box_call(&reply, &status, c->box.socket_path, "GET", "/v1/sandbox", NULL, CALL_SLACK_MS),
        0);
    json_t *caps = json_object_get(reply, "capabilities");
    assert_string_equal(json_string_value(json_object_get(caps, "disk_quota")),
                        c->measured ? "measured" : "kernel");
    assert_int_equal(
        json_integer_value(json_object_get(json_object_get(caps, "limits"), "disk_bytes")), LIMIT);
    json_decref(reply);
}

/* ---- where fawn only measures ---- */

static void command_past_the_limit_is_reported(void **state) {
    quota_ctx *c = *state;
    json_t *reply = exec_in(c, "dd if=/dev/zero of=" WS "/big bs=1M count=24");
    assert_int_equal(exit_code(reply), 0); /* nothing stops a command while it runs */
    json_t *disk = json_object_get(reply, "disk");
    if (!json_is_object(disk))
        fail_msg("no disk report after writing 24 MiB against a %d MiB limit", LIMIT_MB);
    assert_true((uint64_t)json_integer_value(json_object_get(disk, "used_bytes")) >= 24 * MiB);
    assert_int_equal(json_integer_value(json_object_get(disk, "limit_bytes")), LIMIT);
    assert_true(json_is_true(json_object_get(disk, "complete")));
    json_decref(reply);
    /* The gateway refuses uploads into it. */
    int fd = open(c->user_data, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    uint64_t room = 1;
    assert_int_equal(quota_room(&room, fd, LIMIT), 0);
    assert_int_equal(room, 0);
    close(fd);
    /* Back under the limit, commands carry no report. */
    clean(c);
    reply = exec_in(c, "true");
    assert_null(json_object_get(reply, "disk"));
    json_decref(reply);
}

/* The groups: one meson test per mechanism (tests/meson.build). */
static const struct quota_group {
    const char *name;
    enum test_fs_kind kind;
    bool measured;
} groups[] = {
    {"btrfs", TEST_FS_BTRFS_QUOTA, false},
    {"ext4", TEST_FS_EXT4_PROJECT, false},
    {"xfs", TEST_FS_XFS_PROJECT, false},
    {"measured", TEST_FS_BTRFS, true},
};

/* Runs group g's attacks against its sandbox; the whole group is skipped
 * (TAP "1..0 # SKIP") when this host cannot make its filesystem. */
static int run_group(const struct quota_group *g) {
    quota_ctx c = {0};
    int r = g->measured ? setup_measured(&c) : setup_kernel(&c, g->kind);
    if (r < 0 || c.skip[0]) {
        if (r == 0)
            printf("1..0 # SKIP %s\n", c.skip);
        release(&c);
        return r < 0 ? 1 : 0;
    }
    const struct CMUnitTest kernel[] = {
        cmocka_unit_test_prestate(write_past_the_limit_fails, &c),
        cmocka_unit_test_prestate(the_three_directories_share_one_limit, &c),
        cmocka_unit_test_prestate(parallel_writers_share_it, &c),
        cmocka_unit_test_prestate(many_small_files_stop_too, &c),
        cmocka_unit_test_prestate(no_subvolume_or_snapshot, &c),
        cmocka_unit_test_prestate(no_project_change, &c),
        cmocka_unit_test_prestate(no_quota_calls, &c),
        cmocka_unit_test_prestate(links_cannot_leave, &c),
        cmocka_unit_test_prestate(file_api_write_past_the_limit, &c),
        cmocka_unit_test_prestate(box_reports_its_disk_quota, &c),
    };
    const struct CMUnitTest measured[] = {
        cmocka_unit_test_prestate(command_past_the_limit_is_reported, &c),
        cmocka_unit_test_prestate(box_reports_its_disk_quota, &c),
    };
    char *name = strf("escape_quota_%s", g->name);
    int failed = g->measured ? cmocka_run_group_tests_name(name, measured, NULL, NULL)
                             : cmocka_run_group_tests_name(name, kernel, NULL, NULL);
    free(name);
    release(&c);
    return failed;
}

int main(int argc, char **argv) {
    for (size_t i = 0; argc == 2 && i < ARRAY_LEN(groups); i++)
        if (strcmp(argv[1], groups[i].name) == 0)
            return run_group(&groups[i]);
    fprintf(stderr, "usage: test_escape_quota btrfs|ext4|xfs|measured\n");
    return 2;
}
