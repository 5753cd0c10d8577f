/* The skills catalog: SKILL.md front matter read with libyaml (bounded,
 * strings only) and the walk of a skills directory (two levels, nothing
 * followed through a symlink, no FIFO opened for long). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "skills/skills.h"
#include "support.h"

/* The front matter of text as compact JSON text (static buffer), or the
 * error code as text ("ENOENT", "EINVAL"). */
static const char *matter(const char *text) {
    static char shown[4096];
    json_t *fm = (json_t *)"poison";
    int r = skills_front_matter(&fm, text, strlen(text));
    if (r < 0) {
        assert_null(fm);
        return r == FAWN_ENOENT ? "ENOENT" : r == FAWN_EINVAL ? "EINVAL" : "other";
    }
    char *dump = json_dumps(fm, JSON_COMPACT | JSON_SORT_KEYS);
    snprintf(shown, sizeof shown, "%s", dump);
    free(dump);
    json_decref(fm);
    return shown;
}

static void front_matter_gives_top_level_strings(void **state) {
    assert_string_equal(
        matter("---\nname: pdf\ndescription: Read PDFs\nlicense: MIT\n---\n# PDF\n"),
        "{\"description\":\"Read PDFs\",\"license\":\"MIT\",\"name\":\"pdf\"}");
    /* Nested values are skipped; a key seen twice keeps its first value;
     * scalars of any style are text. */
    assert_string_equal(matter("---\r\nmeta: {a: [1, {b: 2}]}\ndescription: >\n  folded\n  "
                               "text\ndescription: second\nversion: 2\nlist:\n  - x\n---\r\n"),
                        "{\"description\":\"folded text\\n\",\"version\":\"2\"}");
    assert_string_equal(matter("---\n---\nbody"), "{}");
    assert_string_equal(matter("# no front matter\n---\na: b\n---\n"), "ENOENT");
    assert_string_equal(matter("---\na: b\n"), "ENOENT"); /* never closed */
    assert_string_equal(matter("----\na: b\n---\n"), "ENOENT");
    assert_string_equal(matter("---\njust a scalar\n---\n"), "EINVAL");
    assert_string_equal(matter("---\n- a\n- b\n---\n"), "EINVAL");
    assert_string_equal(matter("---\na: [unclosed\n---\n"), "EINVAL");
    assert_string_equal(matter("---\na: &x 1\nb: *x\n? [complex, key]\n: v\nc: ok\n---\n"),
                        "{\"a\":\"1\",\"c\":\"ok\"}");
    /* A NUL leaves the value out (an escaped byte is a character); bytes
     * that are not UTF-8 are not YAML; a long value is cut on a character
     * boundary. */
    assert_string_equal(matter("---\na: \"x\\0y\"\nb: \"\\xff\"\nc: d\n---\n"),
                        "{\"b\":\"\xc3\xbf\",\"c\":\"d\"}");
    assert_string_equal(matter("---\na: \x80\n---\n"), "EINVAL");
    char text[SKILLS_TEXT_MAX + 64] = "---\nd: ";
    size_t at = strlen(text);
    memset(text + at, 'a', SKILLS_TEXT_MAX - 1);
    strcpy(text + at + SKILLS_TEXT_MAX - 1, "\xc3\xa9tail\n---\n");
    json_t *fm;
    assert_int_equal(skills_front_matter(&fm, text, strlen(text)), 0);
    const char *d = json_string_value(json_object_get(fm, "d"));
    assert_int_equal(strlen(d), SKILLS_TEXT_MAX - 1);
    json_decref(fm);
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void skills_are_listed_two_levels_deep_without_following_links(void **state) {
    char root[] = "/tmp/fawn-skills-XXXXXX", path[256];
    assert_non_null(mkdtemp(root));
    const char *dirs[] = {"alpha", "custom", "custom/beta",   "custom/beta/nested", "plain", "fifo",
                          ".git",  "linked", "custom/deeper", "custom/deeper/gamma"};
    for (size_t i = 0; i < ARRAY_LEN(dirs); i++) {
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    snprintf(path, sizeof path, "%s/alpha/SKILL.md", root);
    write_text(path, "---\nname: alpha\ndescription: First skill\nlicense: Apache-2.0\n---\n");
    snprintf(path, sizeof path, "%s/custom/beta/SKILL.md", root);
    write_text(path, "no front matter\n");
    snprintf(path, sizeof path, "%s/custom/deeper/gamma/SKILL.md", root); /* three deep */
    write_text(path, "---\ndescription: too deep\n---\n");
    snprintf(path, sizeof path, "%s/.git/SKILL.md", root);
    write_text(path, "---\ndescription: hidden\n---\n");
    snprintf(path, sizeof path, "%s/fifo/SKILL.md", root);
    assert_int_equal(mkfifo(path, 0644), 0);
    snprintf(path, sizeof path, "%s/linked/SKILL.md", root);
    assert_int_equal(symlink("/etc/passwd", path), 0);
    snprintf(path, sizeof path, "%s/outside", root);
    assert_int_equal(symlink("/etc", path), 0);
    json_t *list = (json_t *)"poison";
    assert_int_equal(skills_list(&list, root), 0);
    char *dump = json_dumps(list, JSON_COMPACT);
    assert_string_equal(dump, "[{\"name\":\"beta\",\"category\":\"custom\",\"description\":\"\","
                              "\"license\":\"\",\"path\":\"custom/beta\"},{\"name\":\"alpha\","
                              "\"category\":\"public\",\"description\":\"First skill\",\"license\":"
                              "\"Apache-2.0\",\"path\":\"alpha\"}]");
    free(dump);
    json_decref(list);
    /* A directory that does not exist has no skills; a file is not one. */
    snprintf(path, sizeof path, "%s/missing", root);
    assert_int_equal(skills_list(&list, path), 0);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);
    snprintf(path, sizeof path, "%s/alpha/SKILL.md", root);
    assert_int_equal(skills_list(&list, path), FAWN_EIO);
    assert_null(list);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

static void allowed_tools_are_a_bounded_list_of_names(void **state) {
    assert_string_equal(matter("---\nname: a\nallowed-tools: [bash, read_file]\n---\n"),
                        "{\"allowed-tools\":[\"bash\",\"read_file\"],\"name\":\"a\"}");
    assert_string_equal(matter("---\nallowed-tools: []\n---\n"), "{\"allowed-tools\":[]}");
    /* Any other shape is refused whole: a restriction that cannot be read
     * is not dropped silently. */
    assert_string_equal(matter("---\nallowed-tools: bash\n---\n"), "EINVAL");
    assert_string_equal(matter("---\nallowed-tools: {a: b}\n---\n"), "EINVAL");
    assert_string_equal(matter("---\nallowed-tools: [bash, [x]]\n---\n"), "EINVAL");
    assert_string_equal(matter("---\nallowed-tools: [bash, \"\"]\n---\n"), "EINVAL");
    char text[1024] = "---\nallowed-tools: [";
    for (int i = 0; i <= SKILLS_TOOLS_MAX; i++)
        strcat(text, i ? ", t" : "t");
    strcat(text, "]\n---\n");
    assert_string_equal(matter(text), "EINVAL");
}

static void skill_names_follow_the_hyphen_case_rule(void **state) {
    const char *good[] = {"a", "pdf", "deep-research", "x1-2y"};
    const char *bad[] = {"",    "-a",   "a-",  "a--b", "A",        "a_b",
                         "a.b", "../x", "a b", "a/b",  "\xc3\xa9", NULL};
    for (size_t i = 0; i < ARRAY_LEN(good); i++)
        assert_true(skills_name_valid(good[i]));
    for (size_t i = 0; i < ARRAY_LEN(bad); i++)
        assert_false(skills_name_valid(bad[i]));
    char longest[SKILLS_NAME_MAX + 2];
    memset(longest, 'a', SKILLS_NAME_MAX);
    longest[SKILLS_NAME_MAX] = '\0';
    assert_true(skills_name_valid(longest));
    strcat(longest, "a");
    assert_false(skills_name_valid(longest));
}

/* A skills directory with skills a (tools listed), b and broken (a front
 * matter that is not YAML); its path in root. */
static void catalog_dir(char root[32]) {
    char path[256];
    strcpy(root, "/tmp/fawn-skills-XXXXXX");
    assert_non_null(mkdtemp(root));
    const char *dirs[] = {"a", "b", "broken"};
    for (size_t i = 0; i < ARRAY_LEN(dirs); i++) {
        snprintf(path, sizeof path, "%s/%s", root, dirs[i]);
        assert_int_equal(mkdir(path, 0755), 0);
    }
    snprintf(path, sizeof path, "%s/a/SKILL.md", root);
    write_text(path, "---\nname: a\ndescription: A\nallowed-tools: [bash]\n---\nDo A.\n");
    snprintf(path, sizeof path, "%s/b/SKILL.md", root);
    write_text(path, "---\nname: b\ndescription: B\n---\nDo B.\n");
    snprintf(path, sizeof path, "%s/broken/SKILL.md", root);
    write_text(path, "---\nallowed-tools: bash\n---\n");
}

static void remove_dir(const char *root) {
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", root);
    assert_int_equal(system(cmd), 0);
}

static void catalog_hides_denied_skills_and_shows_states(void **state) {
    char root[32];
    catalog_dir(root);
    json_t *section = json_loads("{\"enabled\": true, \"roles\": {\"admin\": {}, \"user\": "
                                 "{\"skills\": {\"deny\": [\"a\"]}}}}",
                                 0, NULL);
    authz_policy *policy;
    assert_int_equal(authz_policy_load(&policy, section), 0);
    json_decref(section);
    json_t *states = json_loads("{\"b\": false}", 0, NULL), *list = (json_t *)"poison";
    skills_dirs dirs = {.shared = root};
    assert_int_equal(skills_catalog(&list, &dirs, states, policy, "admin"), 0);
    assert_int_equal(json_array_size(list), 2); /* broken is left out */
    json_t *a = skills_find(list, "a"), *b = skills_find(list, "b");
    assert_true(json_is_true(json_object_get(a, "enabled")));
    assert_true(json_is_false(json_object_get(b, "enabled")));
    assert_string_equal(json_string_value(json_array_get(json_object_get(a, "allowed_tools"), 0)),
                        "bash");
    assert_null(skills_find(list, "broken"));
    json_t *view = skills_view(a);
    char *dump = json_dumps(view, JSON_COMPACT | JSON_SORT_KEYS);
    assert_string_equal(dump, "{\"category\":\"public\",\"description\":\"A\",\"editable\":false,"
                              "\"enabled\":true,\"license\":\"\",\"name\":\"a\"}");
    free(dump);
    json_decref(view);
    json_decref(list);
    /* The user's role is denied a: it does not see it at all. */
    assert_int_equal(skills_catalog(&list, &dirs, states, policy, "user"), 0);
    assert_int_equal(json_array_size(list), 1);
    assert_null(skills_find(list, "a"));
    json_decref(list);
    json_decref(states);
    authz_policy_free(policy);
    remove_dir(root);
}

static void skill_text_is_bounded_and_never_read_through_a_link(void **state) {
    char root[32], path[256];
    catalog_dir(root);
    json_t *list;
    skills_dirs dirs = {.shared = root};
    /* Without a policy nothing can be decided: no skill is shown. */
    assert_int_equal(skills_catalog(&list, &dirs, NULL, NULL, NULL), 0);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);
    authz_policy *open_policy;
    assert_int_equal(authz_policy_load(&open_policy, NULL), 0);
    assert_int_equal(skills_catalog(&list, &dirs, NULL, open_policy, "user"), 0);
    char *text = (char *)"poison";
    bool cut = true;
    assert_int_equal(skills_doc_read(&text, &cut, &dirs, skills_find(list, "b")), 0);
    assert_string_equal(text, "---\nname: b\ndescription: B\n---\nDo B.\n");
    assert_false(cut);
    free(text);
    /* Longer than SKILLS_DOC_MAX: cut on a character boundary. */
    char *big = malloc(SKILLS_DOC_MAX + 16);
    memset(big, 'x', SKILLS_DOC_MAX - 1);
    strcpy(big + SKILLS_DOC_MAX - 1, "\xc3\xa9 more");
    snprintf(path, sizeof path, "%s/b/SKILL.md", root);
    write_text(path, big);
    free(big);
    assert_int_equal(skills_doc_read(&text, &cut, &dirs, skills_find(list, "b")), 0);
    assert_true(cut);
    assert_int_equal(strlen(text), SKILLS_DOC_MAX - 1);
    free(text);
    /* Replaced by a symlink after the listing: refused, nothing handed out. */
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink("/etc/passwd", path), 0);
    text = (char *)"poison";
    assert_true(skills_doc_read(&text, &cut, &dirs, skills_find(list, "b")) < 0);
    assert_null(text);
    json_decref(list);
    authz_policy_free(open_policy);
    remove_dir(root);
}

/* The reason skills_doc_check gives for text as the SKILL.md of name, or
 * "ok". */
static const char *doc_verdict(const char *name, const char *text) {
    static char shown[512];
    int r = skills_doc_check(name, text, strlen(text));
    snprintf(shown, sizeof shown, "%s", r == 0 ? "ok" : r == FAWN_EINVAL ? fawn_errmsg() : "other");
    return shown;
}

static void written_skills_are_validated_as_deerflow_does(void **state) {
    assert_string_equal(doc_verdict("my-skill", "---\nname: my-skill\ndescription: Does a "
                                                "thing\nlicense: MIT\nallowed-tools: [bash]\n"
                                                "metadata: {a: 1}\n---\n# Body\n"),
                        "ok");
    const char *const refused[][3] = {
        {"x", "no front matter\n", "No YAML frontmatter found"},
        {"x", "---\nname: x\n---\n", "Missing 'description' in frontmatter"},
        {"x", "---\ndescription: d\n---\n", "Missing 'name' in frontmatter"},
        {"x", "---\nname: y\ndescription: d\n---\n", "Frontmatter name 'y' must match"},
        {"x", "---\nname: [x]\ndescription: d\n---\n", "Name must be a string"},
        {"x", "---\nname: X_1\ndescription: d\n---\n", "Name should be hyphen-case"},
        {"x", "---\nname: x\ndescription: <b>d</b>\n---\n", "angle brackets"},
        {"x", "---\nname: x\ndescription: {a: b}\n---\n", "Description must be a string"},
        {"x", "---\nname: x\ndescription: d\nevil: 1\n---\n", "Unexpected key"},
        {"x", "---\nname: x\ndescription: d\nallowed-tools: bash\n---\n", "allowed-tools"},
        {"x", "---\nname: x\ndescription: d\nrequired-secrets: K\n---\n", "must be a list"},
        {"x", "---\nname: x\ndescription: d\nsecrets-autonomous: maybe\n---\n", "boolean"},
        {"x", "---\nname: x\ndescription: [unclosed\n---\n", "not YAML"},
    };
    for (size_t i = 0; i < ARRAY_LEN(refused); i++)
        check_contains(refused[i][1], doc_verdict(refused[i][0], refused[i][1]), refused[i][2]);
    /* Sizes: a description past SKILLS_TEXT_MAX, a file past SKILLS_HEAD_MAX,
     * a NUL, bytes that are not UTF-8. */
    char *text = malloc(SKILLS_HEAD_MAX + 64);
    snprintf(text, 64, "---\nname: x\ndescription: ");
    size_t at = strlen(text);
    memset(text + at, 'd', SKILLS_TEXT_MAX + 1);
    strcpy(text + at + SKILLS_TEXT_MAX + 1, "\n---\n");
    check_contains("long", doc_verdict("x", text), "Description is too long");
    memset(text, 'a', SKILLS_HEAD_MAX + 1);
    memcpy(text, "---\nname: x\ndescription: d\n---\n", 31);
    assert_int_equal(skills_doc_check("x", text, SKILLS_HEAD_MAX + 1), FAWN_EINVAL);
    assert_int_equal(skills_doc_check("x", text, SKILLS_HEAD_MAX), 0);
    free(text);
    assert_int_equal(skills_doc_check("x", "---\nname: x\ndescription: d\n---\n\0", 33),
                     FAWN_EINVAL);
    check_contains("utf8", doc_verdict("x", "---\nname: x\ndescription: d\n---\n\xff"), "UTF-8");
}

static void custom_skills_live_under_their_user_and_never_through_links(void **state) {
    char home[] = "/tmp/fawn-skills-home-XXXXXX", dir[PATH_MAX], path[PATH_MAX + 64];
    assert_non_null(mkdtemp(home));
    const char *text = "---\nname: mine\ndescription: Mine\n---\nbody\n";
    assert_int_equal(skills_custom_write(home, "7", "mine", text, strlen(text)), 0);
    assert_int_equal(skills_custom_write(home, "7", "../x", text, strlen(text)), FAWN_EINVAL);
    assert_int_equal(skills_custom_write(home, "../7", "mine", text, strlen(text)), FAWN_EINVAL);
    assert_int_equal(skills_user_dir(dir, home, "7"), 0);
    json_t *list = NULL;
    assert_int_equal(skills_custom_list(&list, dir), 0);
    char *dump = json_dumps(list, JSON_COMPACT);
    assert_string_equal(dump, "[{\"name\":\"mine\",\"category\":\"custom\",\"description\":"
                              "\"Mine\",\"license\":\"\",\"path\":\"mine\"}]");
    free(dump);
    json_decref(list);
    /* Another user's directory holds none of them. */
    assert_int_equal(skills_user_dir(dir, home, "8"), 0);
    assert_int_equal(skills_custom_list(&list, dir), 0);
    assert_int_equal(json_array_size(list), 0);
    json_decref(list);
    assert_int_equal(skills_custom_remove(home, "8", "mine"), FAWN_ENOENT);
    /* A user's skills directory replaced by a symlink is never written
     * through nor removed from. */
    snprintf(path, sizeof path, "%s/users/9", home);
    assert_int_equal(mkdir(path, 0755), 0);
    snprintf(path, sizeof path, "%s/users/9/skills", home);
    snprintf(dir, sizeof dir, "%s/users/7/skills", home);
    assert_int_equal(symlink(dir, path), 0);
    assert_true(skills_custom_write(home, "9", "mine", text, strlen(text)) < 0);
    assert_int_equal(skills_custom_remove(home, "9", "mine"), FAWN_ENOENT);
    /* Replaced whole, then removed with its directory. */
    const char *next = "---\nname: mine\ndescription: Changed\n---\n";
    assert_int_equal(skills_custom_write(home, "7", "mine", next, strlen(next)), 0);
    snprintf(path, sizeof path, "%s/users/7/skills/mine/SKILL.md", home);
    FILE *f = fopen(path, "r");
    char got[128] = "";
    assert_non_null(f);
    assert_true(fread(got, 1, sizeof got - 1, f) > 0);
    fclose(f);
    assert_string_equal(got, next);
    assert_int_equal(skills_custom_remove(home, "7", "mine"), 0);
    snprintf(path, sizeof path, "%s/users/7/skills/mine", home);
    assert_int_equal(access(path, F_OK), -1);
    assert_int_equal(skills_custom_remove(home, "7", "mine"), FAWN_ENOENT);
    remove_dir(home);
}

static void history_is_per_user_bounded_and_rewritten_whole(void **state) {
    char home[] = "/tmp/fawn-skills-hist-XXXXXX", path[PATH_MAX];
    assert_non_null(mkdtemp(home));
    json_t *list = (json_t *)"poison";
    assert_int_equal(skills_history_read(&list, home, "7", "mine"), FAWN_ENOENT);
    assert_null(list);
    char *text = (char *)"poison";
    assert_int_equal(skills_custom_read(&text, home, "7", "mine"), FAWN_ENOENT);
    assert_null(text);
    for (int i = 0; i < SKILLS_HISTORY_ENTRIES_MAX + 5; i++) {
        json_t *entry = json_pack("{s:s, s:i, s:s}", "action", "human_edit", "n", i, "ts", "x");
        assert_int_equal(skills_history_append(home, "7", "mine", entry), 0);
        json_decref(entry);
    }
    assert_int_equal(skills_history_read(&list, home, "7", "mine"), 0);
    assert_int_equal(json_array_size(list), SKILLS_HISTORY_ENTRIES_MAX); /* oldest dropped */
    json_t *first = json_array_get(list, 0);
    assert_int_equal(json_integer_value(json_object_get(first, "n")), 5);
    const char *ts = json_string_value(json_object_get(first, "ts"));
    assert_int_equal(strlen(ts), strlen("2026-01-01T00:00:00.000000+00:00")); /* set here */
    json_decref(list);
    /* Another user has none of it; bad names and users are refused. */
    assert_int_equal(skills_history_read(&list, home, "8", "mine"), FAWN_ENOENT);
    assert_int_equal(skills_history_read(&list, home, "7", "../7/mine"), FAWN_ENOENT);
    json_t *small = json_pack("{s:s}", "action", "x");
    assert_int_equal(skills_history_append(home, "../8", "mine", small), FAWN_EINVAL);
    assert_int_equal(skills_history_append(home, "7", "Mine", small), FAWN_EINVAL);
    /* Bytes: entries of 1 MiB each keep the history within its bound. */
    char *big = malloc((size_t)1 << 20);
    memset(big, 'a', ((size_t)1 << 20) - 1);
    big[((size_t)1 << 20) - 1] = '\0';
    json_t *large = json_pack("{s:s, s:s}", "action", "human_edit", "prev_content", big);
    for (int i = 0; i < 6; i++)
        assert_int_equal(skills_history_append(home, "7", "big", large), 0);
    snprintf(path, sizeof path, "%s/users/7/skills-history/big.json", home);
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true((size_t)st.st_size <= SKILLS_HISTORY_BYTES_MAX);
    assert_int_equal(skills_history_read(&list, home, "7", "big"), 0);
    assert_int_equal(json_array_size(list), 3);
    json_decref(list);
    /* An entry larger than the bound alone is refused; the history stays. */
    char *huge = malloc(SKILLS_HISTORY_BYTES_MAX + 2);
    memset(huge, 'b', SKILLS_HISTORY_BYTES_MAX + 1);
    huge[SKILLS_HISTORY_BYTES_MAX + 1] = '\0';
    json_t *too = json_pack("{s:s}", "prev_content", huge);
    assert_int_equal(skills_history_append(home, "7", "big", too), FAWN_EINVAL);
    assert_int_equal(skills_history_read(&list, home, "7", "big"), 0);
    assert_int_equal(json_array_size(list), 3);
    json_decref(list);
    /* No staging file is left in the history directory. */
    snprintf(path, sizeof path, "test $(ls -A %s/users/7/skills-history | wc -l) -eq 2", home);
    assert_int_equal(system(path), 0);
    /* A history file replaced by a symlink is not read through. */
    char target[PATH_MAX];
    snprintf(path, sizeof path, "%s/users/7/skills-history/mine.json", home);
    snprintf(target, sizeof target, "%s/users/7/skills-history/big.json", home);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(symlink(target, path), 0);
    assert_true(skills_history_read(&list, home, "7", "mine") < 0);
    assert_null(list);
    json_decref(too);
    json_decref(large);
    json_decref(small);
    free(huge);
    free(big);
    remove_dir(home);
}

/* ---- archives ---- */

typedef struct zip_entry {
    const char *path;
    mode_t type; /* AE_IFREG, AE_IFDIR, AE_IFLNK, AE_IFCHR */
    const char *data;
    size_t size; /* of data, or of zeros when data is NULL */
} zip_entry;

/* A zip (deflated) of entries into a new buffer (*len bytes; caller frees). */
static char *zip_make(size_t *len, const zip_entry *entries, size_t n) {
    size_t cap = (size_t)1 << 20;
    char *buf = malloc(cap);
    struct archive *w = archive_write_new();
    assert_int_equal(archive_write_set_format_zip(w), ARCHIVE_OK);
    assert_int_equal(archive_write_set_options(w, "zip:compression=deflate"), ARCHIVE_OK);
    assert_int_equal(archive_write_open_memory(w, buf, cap, len), ARCHIVE_OK);
    for (size_t i = 0; i < n; i++) {
        struct archive_entry *e = archive_entry_new();
        archive_entry_set_pathname(e, entries[i].path);
        archive_entry_set_filetype(e, entries[i].type);
        archive_entry_set_perm(e, 0644);
        if (entries[i].type == AE_IFLNK)
            archive_entry_set_symlink(e, "/etc/passwd");
        bool data = entries[i].type == AE_IFREG;
        archive_entry_set_size(e, data ? (la_int64_t)entries[i].size : 0);
        assert_int_equal(archive_write_header(w, e), ARCHIVE_OK);
        char *zeros = data && !entries[i].data ? calloc(1, entries[i].size + 1) : NULL;
        if (data)
            assert_int_equal(
                archive_write_data(w, entries[i].data ? entries[i].data : zeros, entries[i].size),
                (la_ssize_t)entries[i].size);
        free(zeros);
        archive_entry_free(e);
    }
    assert_int_equal(archive_write_close(w), ARCHIVE_OK);
    archive_write_free(w);
    return buf;
}

/* Sets the unix mode the central directory of zip records for name (the
 * zip writer makes no device entries; a hostile archive can). */
static void zip_set_mode(char *zip, size_t len, const char *name, uint32_t mode) {
    size_t n = strlen(name);
    for (size_t i = 0; i + 46 + n <= len; i++)
        if (memcmp(zip + i, "PK\x01\x02", 4) == 0 && memcmp(zip + i + 46, name, n) == 0) {
            uint32_t attr = mode << 16;
            for (int k = 0; k < 4; k++)
                zip[i + 38 + k] = (char)(attr >> (8 * k));
            return;
        }
    fail_msg("no central directory entry for %s", name);
}

#define DOC "---\nname: zipped\ndescription: From a zip\n---\nBody\n"
#define FILE_OF(p, text)                                                                           \
    { p, AE_IFREG, text, sizeof text - 1 }

/* skills_archive_read's verdict on a zip of entries: "ok NAME n" or the
 * reason. */
static const char *archive_verdict(const zip_entry *entries, size_t n) {
    static char shown[512];
    size_t len = 0;
    char *zip = zip_make(&len, entries, n);
    skills_archive a;
    POISON(a);
    int r = skills_archive_read(&a, zip, len);
    if (r == 0)
        snprintf(shown, sizeof shown, "ok %s %zu", a.name, a.n);
    else
        snprintf(shown, sizeof shown, "%s", r == FAWN_EINVAL ? fawn_errmsg() : "other");
    if (r < 0)
        assert_int_equal(a.n, 0);
    skills_archive_clear(&a);
    free(zip);
    return shown;
}

static void archives_are_read_within_bounds(void **state) {
    /* DeerFlow's two layouts; dotfiles and __MACOSX skipped. */
    zip_entry top[] = {FILE_OF("SKILL.md", DOC), FILE_OF("scripts/run.sh", "echo hi\n"),
                       FILE_OF(".DS_Store", "x"), FILE_OF("__MACOSX/._SKILL.md", "x")};
    assert_string_equal(archive_verdict(top, ARRAY_LEN(top)), "ok zipped 2");
    zip_entry nested[] = {{"zipped/", AE_IFDIR, NULL, 0},
                          FILE_OF("zipped/SKILL.md", DOC),
                          FILE_OF("zipped/references/a.md", "a")};
    assert_string_equal(archive_verdict(nested, ARRAY_LEN(nested)), "ok zipped 2");
    /* Hostile entries, each refused whole. */
    const struct {
        zip_entry e;
        const char *why;
    } hostile[] = {
        {FILE_OF("../evil", "x"), "unsafe member path"},
        {FILE_OF("/etc/evil", "x"), "unsafe member path"},
        {FILE_OF("a/../../evil", "x"), "unsafe member path"},
        {FILE_OF("a\\..\\evil", "x"), "unsafe member path"},
        {FILE_OF("run.sh:stream", "x"), "unsafe member path"},
        {FILE_OF("a//b", "x"), "unsafe member path"},
        {FILE_OF("a/b/c/d/e/f/g/h/i", "x"), "unsafe member path"},
        {{"link", AE_IFLNK, NULL, 0}, "link or a special file"},
        {FILE_OF("tool", "\177ELF\x02\x01"), "executable binary"},
        {FILE_OF("SKILL.md", "---\nname: x\n---\n"), "Missing 'description'"},
    };
    for (size_t i = 0; i < ARRAY_LEN(hostile); i++) {
        zip_entry two[] = {FILE_OF("SKILL.md", DOC), hostile[i].e};
        bool doc = strcmp(hostile[i].e.path, "SKILL.md") == 0;
        check_contains(hostile[i].e.path, archive_verdict(doc ? two + 1 : two, doc ? 1 : 2),
                       hostile[i].why);
    }
    /* A device entry (its mode set in the central directory). */
    zip_entry dev[] = {FILE_OF("SKILL.md", DOC), FILE_OF("dev", "x")};
    size_t len = 0;
    char *zip = zip_make(&len, dev, 2);
    zip_set_mode(zip, len, "dev", S_IFCHR | 0644);
    skills_archive a;
    assert_int_equal(skills_archive_read(&a, zip, len), FAWN_EINVAL);
    check_contains("device", fawn_errmsg(), "link or a special file");
    free(zip);
    zip_entry none[] = {FILE_OF("README.md", "x")};
    check_contains("no doc", archive_verdict(none, 1), "no SKILL.md");
    zip_entry dup[] = {FILE_OF("SKILL.md", DOC), FILE_OF("SKILL.md", DOC)};
    check_contains("twice", archive_verdict(dup, 2), "twice");
    /* A bomb: megabytes of zeros that deflate to a few KiB stop at the ratio. */
    zip_entry bomb[] = {FILE_OF("SKILL.md", DOC), {"zeros", AE_IFREG, NULL, (size_t)2 << 20}};
    check_contains("bomb", archive_verdict(bomb, 2), "too large uncompressed");
    /* Too many entries. */
    zip_entry *many = calloc(SKILLS_ARCHIVE_ENTRIES_MAX + 1, sizeof *many);
    char(*names)[16] = calloc(SKILLS_ARCHIVE_ENTRIES_MAX + 1, sizeof *names);
    for (size_t i = 0; i <= SKILLS_ARCHIVE_ENTRIES_MAX; i++) {
        snprintf(names[i], sizeof names[i], i ? "f%zu" : "SKILL.md", i);
        many[i] = (zip_entry){names[i], AE_IFREG, i ? "x" : DOC, i ? 1 : sizeof DOC - 1};
    }
    check_contains("many", archive_verdict(many, SKILLS_ARCHIVE_ENTRIES_MAX + 1), "more than");
    free(many);
    free(names);
    /* Not a zip at all, and an archive past SKILLS_ARCHIVE_MAX unread. */
    assert_int_equal(skills_archive_read(&a, "not a zip", 9), FAWN_EINVAL);
    assert_int_equal(skills_archive_read(&a, "", SKILLS_ARCHIVE_MAX + 1), FAWN_EINVAL);
}

static void archive_members_are_read_one_at_a_time(void **state) {
    zip_entry files[] = {FILE_OF("zipped/SKILL.md", DOC),
                         FILE_OF("zipped/refs/a.md", "A\n"),
                         {"zipped/link", AE_IFLNK, NULL, 0}};
    size_t len = 0, n = 99;
    char *zip = zip_make(&len, files, ARRAY_LEN(files)), *data = (char *)"poison";
    assert_int_equal(skills_archive_member(&data, &n, zip, len, "SKILL.md"), 0);
    assert_int_equal(n, sizeof DOC - 1);
    assert_memory_equal(data, DOC, n);
    free(data);
    assert_int_equal(skills_archive_member(&data, &n, zip, len, "zipped/refs/a.md"), 0);
    assert_memory_equal(data, "A\n", 2);
    free(data);
    const char *missing[] = {"nope", "link", "../SKILL.md", "/SKILL.md", ".hidden", "refs//a.md"};
    for (size_t i = 0; i < ARRAY_LEN(missing); i++) {
        data = (char *)"poison";
        assert_int_equal(skills_archive_member(&data, &n, zip, len, missing[i]), FAWN_ENOENT);
        assert_null(data);
        assert_int_equal(n, 0);
    }
    free(zip);
    zip_entry bomb[] = {{"zeros", AE_IFREG, NULL, (size_t)2 << 20}};
    zip = zip_make(&len, bomb, 1);
    assert_int_equal(skills_archive_member(&data, &n, zip, len, "zeros"), FAWN_EINVAL);
    free(zip);
    assert_int_equal(skills_archive_member(&data, &n, "junk", 4, "SKILL.md"), FAWN_EINVAL);
}

static void archives_install_once_through_a_staging_directory(void **state) {
    char home[] = "/tmp/fawn-skills-arch-XXXXXX", path[PATH_MAX];
    assert_non_null(mkdtemp(home));
    zip_entry files[] = {FILE_OF("zipped/SKILL.md", DOC), FILE_OF("zipped/scripts/run.sh", "x\n")};
    size_t len = 0;
    char *zip = zip_make(&len, files, ARRAY_LEN(files));
    skills_archive a;
    assert_int_equal(skills_archive_read(&a, zip, len), 0);
    free(zip);
    assert_int_equal(skills_archive_install(home, "7", &a), 0);
    snprintf(path, sizeof path, "%s/users/7/skills/zipped/scripts/run.sh", home);
    assert_int_equal(access(path, R_OK), 0);
    assert_int_equal(skills_archive_install(home, "7", &a), FAWN_EEXIST);
    /* Nothing is left behind by the refusal: only the installed skill. */
    snprintf(path, sizeof path, "%s/users/7/skills", home);
    DIR *d = opendir(path);
    size_t entries = 0;
    for (struct dirent *e; (e = readdir(d));)
        entries += e->d_name[0] != '.';
    closedir(d);
    assert_int_equal(entries, 1);
    skills_archive_clear(&a);
    remove_dir(home);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(front_matter_gives_top_level_strings),
        cmocka_unit_test(skills_are_listed_two_levels_deep_without_following_links),
        cmocka_unit_test(allowed_tools_are_a_bounded_list_of_names),
        cmocka_unit_test(skill_names_follow_the_hyphen_case_rule),
        cmocka_unit_test(catalog_hides_denied_skills_and_shows_states),
        cmocka_unit_test(skill_text_is_bounded_and_never_read_through_a_link),
        cmocka_unit_test(written_skills_are_validated_as_deerflow_does),
        cmocka_unit_test(custom_skills_live_under_their_user_and_never_through_links),
        cmocka_unit_test(history_is_per_user_bounded_and_rewritten_whole),
        cmocka_unit_test(archives_are_read_within_bounds),
        cmocka_unit_test(archive_members_are_read_one_at_a_time),
        cmocka_unit_test(archives_install_once_through_a_staging_directory),
    };
    return cmocka_run_group_tests_name("skills", tests, NULL, NULL);
}
