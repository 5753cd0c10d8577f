/* The sandbox's view of the skills (/mnt/skills): copies of exactly the
 * enabled skills a user's role may use, the user's own under custom/,
 * nothing followed through a symlink, bounded, and emptied on any error. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "skills/skills.h"
#include "support.h"

typedef struct fixture {
    char home[40];
    char shared[PATH_MAX];
    char view[PATH_MAX];
    authz_policy *policy;
} fixture;

static void write_at(const char *dir, const char *rel, const char *text, mode_t mode) {
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    assert_int_equal(fchmod(fd, mode), 0);
    close(fd);
}

static void mkdir_at(const char *dir, const char *rel) {
    char path[PATH_MAX + 128];
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    assert_int_equal(mkdir(path, 0755), 0);
}

static bool exists_at(const char *dir, const char *rel) {
    char path[PATH_MAX + 128];
    struct stat st;
    snprintf(path, sizeof path, "%s/%s", dir, rel);
    return lstat(path, &st) == 0;
}

static const char *const doc_fmt = "---\nname: %s\ndescription: %s skill\n---\nDo it.\n";

static void skill_make(const char *dir, const char *name) {
    char doc[256], rel[128];
    mkdir_at(dir, name);
    snprintf(doc, sizeof doc, doc_fmt, name, name);
    snprintf(rel, sizeof rel, "%s/SKILL.md", name);
    write_at(dir, rel, doc, 0644);
}

/* A home with a skills directory holding open (a script, a nested file, a
 * symlink to a host secret, a symlinked directory, a FIFO), off, secret
 * and public/cat; alice's own skill mine and bob's own skill theirs. The
 * role "user" is denied secret. */
static int setup(void **state) {
    fixture *f = calloc(1, sizeof *f);
    strcpy(f->home, "/tmp/fawn-skills-view-XXXXXX");
    assert_non_null(mkdtemp(f->home));
    snprintf(f->shared, sizeof f->shared, "%s/skills", f->home);
    assert_int_equal(mkdir(f->shared, 0755), 0);
    skill_make(f->shared, "open");
    skill_make(f->shared, "off");
    skill_make(f->shared, "secret");
    mkdir_at(f->shared, "public");
    skill_make(f->shared, "public/cat");
    mkdir_at(f->shared, "open/scripts");
    write_at(f->shared, "open/scripts/run.sh", "echo run\n", 0755);
    write_at(f->home, "host-secret", "HOST-SECRET\n", 0600);
    char target[PATH_MAX + 32], link[PATH_MAX + 32];
    snprintf(target, sizeof target, "%s/host-secret", f->home);
    snprintf(link, sizeof link, "%s/open/leak", f->shared);
    assert_int_equal(symlink(target, link), 0);
    snprintf(link, sizeof link, "%s/open/leakdir", f->shared);
    assert_int_equal(symlink(f->home, link), 0);
    snprintf(link, sizeof link, "%s/open/pipe", f->shared);
    assert_int_equal(mkfifo(link, 0644), 0);
    const char *mine = "---\nname: mine\ndescription: Mine\n---\nMINE\n";
    const char *theirs = "---\nname: theirs\ndescription: Theirs\n---\nTHEIRS\n";
    assert_int_equal(skills_custom_write(f->home, "alice", "mine", mine, strlen(mine)), 0);
    assert_int_equal(skills_custom_write(f->home, "bob", "theirs", theirs, strlen(theirs)), 0);
    json_t *section = json_loads("{\"enabled\": true, \"roles\": {\"admin\": {}, \"user\": "
                                 "{\"skills\": {\"deny\": [\"secret\"]}}}}",
                                 0, NULL);
    assert_int_equal(authz_policy_load(&f->policy, section), 0);
    json_decref(section);
    assert_int_equal(skills_view_ensure(f->view, f->home, "alice"), 0);
    *state = f;
    return 0;
}

static int teardown(void **state) {
    fixture *f = *state;
    char cmd[128];
    snprintf(cmd, sizeof cmd, "chmod -R u+rwx %s; rm -rf %s", f->home, f->home);
    assert_int_equal(system(cmd), 0);
    authz_policy_free(f->policy);
    free(f);
    return 0;
}

/* Syncs user's view as a run of role does, with states (JSON text). */
static int sync_as(fixture *f, const char *user, const char *role, const char *states_text) {
    char custom[PATH_MAX];
    assert_int_equal(skills_user_dir(custom, f->home, user), 0);
    skills_dirs dirs = {.shared = f->shared, .custom = custom};
    json_t *states = json_loads(states_text, 0, NULL), *catalog = NULL;
    assert_int_equal(skills_catalog(&catalog, &dirs, states, f->policy, role), 0);
    int r = skills_view_sync(f->home, user, &dirs, catalog);
    json_decref(catalog);
    json_decref(states);
    return r;
}

static size_t entries(const char *dir) {
    char cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "test -z \"$(ls -A %s)\"", dir);
    return system(cmd) == 0 ? 0 : 1;
}

static void view_holds_exactly_the_enabled_skills_the_role_may_use(void **state) {
    fixture *f = *state;
    assert_int_equal(sync_as(f, "alice", "user", "{\"off\": false}"), 0);
    assert_true(exists_at(f->view, "open/SKILL.md"));
    assert_true(exists_at(f->view, "open/scripts/run.sh"));
    assert_true(exists_at(f->view, "public/cat/SKILL.md"));
    assert_true(exists_at(f->view, "custom/mine/SKILL.md"));
    assert_false(exists_at(f->view, "off"));           /* disabled */
    assert_false(exists_at(f->view, "secret"));        /* the role is denied it */
    assert_false(exists_at(f->view, "custom/theirs")); /* bob's own */
    /* Copies, not links: their own inodes, modes normalized. */
    char src[PATH_MAX + 32], dst[PATH_MAX + 32];
    struct stat a, b;
    snprintf(src, sizeof src, "%s/open/SKILL.md", f->shared);
    snprintf(dst, sizeof dst, "%s/open/SKILL.md", f->view);
    assert_int_equal(stat(src, &a), 0);
    assert_int_equal(stat(dst, &b), 0);
    assert_true(a.st_ino != b.st_ino);
    assert_int_equal(b.st_nlink, 1);
    assert_int_equal(b.st_mode & 07777, 0644);
    snprintf(dst, sizeof dst, "%s/open/scripts/run.sh", f->view);
    assert_int_equal(stat(dst, &b), 0);
    assert_int_equal(b.st_mode & 07777, 0755);
    /* The admin role sees secret; bob sees his own skill, never alice's. */
    assert_int_equal(sync_as(f, "alice", "admin", "{}"), 0);
    assert_true(exists_at(f->view, "secret/SKILL.md"));
    assert_true(exists_at(f->view, "off/SKILL.md"));
    char bobs[PATH_MAX];
    assert_int_equal(skills_view_ensure(bobs, f->home, "bob"), 0);
    assert_int_equal(sync_as(f, "bob", "user", "{}"), 0);
    assert_true(exists_at(bobs, "custom/theirs/SKILL.md"));
    assert_false(exists_at(bobs, "custom/mine"));
    assert_false(exists_at(f->view, "custom/theirs"));
}

static void links_and_special_files_in_a_skill_are_never_followed(void **state) {
    fixture *f = *state;
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    assert_true(exists_at(f->view, "open/SKILL.md"));
    assert_false(exists_at(f->view, "open/leak"));
    assert_false(exists_at(f->view, "open/leakdir"));
    assert_false(exists_at(f->view, "open/pipe"));
    /* A skill directory swapped for a symlink (to a host directory) after
     * the catalog was made is not copied through: the view is emptied. */
    char custom[PATH_MAX], dir[PATH_MAX + 32], cmd[PATH_MAX + 64];
    assert_int_equal(skills_user_dir(custom, f->home, "alice"), 0);
    skills_dirs dirs = {.shared = f->shared, .custom = custom};
    json_t *catalog = NULL;
    assert_int_equal(skills_catalog(&catalog, &dirs, NULL, f->policy, "user"), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s/public/cat", f->shared);
    assert_int_equal(system(cmd), 0);
    snprintf(dir, sizeof dir, "%s/public/cat", f->shared);
    char hostdir[PATH_MAX + 32];
    snprintf(hostdir, sizeof hostdir, "%s/hostdir", f->home);
    assert_int_equal(mkdir(hostdir, 0755), 0);
    write_at(hostdir, "SKILL.md", "HOST-SECRET\n", 0644);
    assert_int_equal(symlink(hostdir, dir), 0);
    assert_true(skills_view_sync(f->home, "alice", &dirs, catalog) < 0);
    json_decref(catalog);
    assert_int_equal(entries(f->view), 0);
}

static void a_change_applies_at_the_next_sync_in_the_same_directory(void **state) {
    fixture *f = *state;
    struct stat before, after;
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    assert_int_equal(stat(f->view, &before), 0);
    assert_true(exists_at(f->view, "open/SKILL.md"));
    assert_int_equal(sync_as(f, "alice", "user", "{\"open\": false, \"mine\": false}"), 0);
    assert_false(exists_at(f->view, "open"));
    assert_false(exists_at(f->view, "custom/mine"));
    assert_true(exists_at(f->view, "public/cat/SKILL.md"));
    /* The same directory (a running sandbox's mount sees the change). */
    assert_int_equal(stat(f->view, &after), 0);
    assert_int_equal(before.st_ino, after.st_ino);
    /* No staging directory is left beside it. */
    char staging[PATH_MAX];
    snprintf(staging, sizeof staging, "%s/users/alice", f->home);
    assert_false(exists_at(staging, ".skills-view.staging"));
    /* A NULL catalog: nothing. */
    assert_int_equal(skills_view_sync(f->home, "alice", &(skills_dirs){0}, NULL), 0);
    assert_int_equal(entries(f->view), 0);
}

static void an_unchanged_view_is_not_rebuilt_and_an_edit_is_seen(void **state) {
    fixture *f = *state;
    char dst[PATH_MAX + 32];
    struct stat first, again;
    snprintf(dst, sizeof dst, "%s/open/SKILL.md", f->view);
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    assert_int_equal(stat(dst, &first), 0);
    /* Same sources: the same copy stays (nothing was rebuilt). */
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    assert_int_equal(stat(dst, &again), 0);
    assert_int_equal(first.st_ino, again.st_ino);
    /* A file edited in place (same size) is seen at the next sync. */
    write_at(f->shared, "open/SKILL.md", "---\nname: open\ndescription: open skill\n---\nDo IT.\n",
             0644);
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    FILE *in = fopen(dst, "r");
    char got[128] = "";
    assert_non_null(in);
    assert_true(fread(got, 1, sizeof got - 1, in) > 0);
    fclose(in);
    assert_non_null(strstr(got, "Do IT."));
    /* A file added deep in a skill's tree, and the user's own skill
     * rewritten by fawn, too. */
    write_at(f->shared, "open/scripts/new.sh", "echo new\n", 0644);
    const char *mine = "---\nname: mine\ndescription: Mine\n---\nMINE 2\n";
    assert_int_equal(skills_custom_write(f->home, "alice", "mine", mine, strlen(mine)), 0);
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    assert_true(exists_at(f->view, "open/scripts/new.sh"));
    snprintf(dst, sizeof dst, "%s/custom/mine/SKILL.md", f->view);
    in = fopen(dst, "r");
    memset(got, 0, sizeof got);
    assert_non_null(in);
    assert_true(fread(got, 1, sizeof got - 1, in) > 0);
    fclose(in);
    assert_non_null(strstr(got, "MINE 2"));
}

static void an_error_leaves_nothing_stale_visible(void **state) {
    fixture *f = *state;
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    assert_true(exists_at(f->view, "open/SKILL.md"));
    /* A skill's tree deeper than the bound: the view is emptied. */
    char rel[PATH_MAX] = "open";
    for (int i = 0; i < SKILLS_VIEW_DEPTH_MAX + 1; i++) {
        strcat(rel, "/d");
        mkdir_at(f->shared, rel);
    }
    assert_int_equal(sync_as(f, "alice", "user", "{}"), FAWN_E2BIG);
    assert_int_equal(entries(f->view), 0);
    /* A skill that cannot be read (gone since the catalog was made). */
    char custom[PATH_MAX], cmd[PATH_MAX + 64];
    snprintf(cmd, sizeof cmd, "rm -rf %s/open", f->shared);
    assert_int_equal(system(cmd), 0);
    assert_int_equal(sync_as(f, "alice", "user", "{}"), 0);
    assert_true(exists_at(f->view, "custom/mine/SKILL.md"));
    assert_int_equal(skills_user_dir(custom, f->home, "alice"), 0);
    skills_dirs dirs = {.shared = f->shared, .custom = custom};
    json_t *catalog = NULL;
    assert_int_equal(skills_catalog(&catalog, &dirs, NULL, f->policy, "user"), 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s/public/cat", f->shared);
    assert_int_equal(system(cmd), 0);
    assert_true(skills_view_sync(f->home, "alice", &dirs, catalog) < 0);
    json_decref(catalog);
    assert_int_equal(entries(f->view), 0);
    /* Bad users are refused. */
    assert_int_equal(skills_view_sync(f->home, "../alice", &dirs, NULL), FAWN_EINVAL);
    char out[PATH_MAX];
    assert_int_equal(skills_view_ensure(out, f->home, "a/b"), FAWN_EINVAL);
    assert_string_equal(out, "");
}

static void view_paths_keep_the_skills_directory_layout(void **state) {
    char out[PATH_MAX];
    json_t *shared = json_pack("{s:s, s:s}", "name", "cat", "path", "public/cat");
    json_t *own = json_pack("{s:s, s:s, s:b}", "name", "mine", "path", "mine", "custom", 1);
    json_t *bad = json_pack("{s:s, s:s}", "name", "x", "path", "../x");
    assert_int_equal(skills_view_path(out, shared), 0);
    assert_string_equal(out, "public/cat");
    assert_int_equal(skills_view_path(out, own), 0);
    assert_string_equal(out, "custom/mine");
    assert_int_equal(skills_view_path(out, bad), FAWN_EINVAL);
    assert_string_equal(out, "");
    json_decref(shared);
    json_decref(own);
    json_decref(bad);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(view_holds_exactly_the_enabled_skills_the_role_may_use,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(links_and_special_files_in_a_skill_are_never_followed,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(a_change_applies_at_the_next_sync_in_the_same_directory,
                                        setup, teardown),
        cmocka_unit_test_setup_teardown(an_unchanged_view_is_not_rebuilt_and_an_edit_is_seen, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(an_error_leaves_nothing_stale_visible, setup, teardown),
        cmocka_unit_test(view_paths_keep_the_skills_directory_layout),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
