/* The skills catalog: SKILL.md front matter read with libyaml (bounded,
 * strings only) and the walk of a skills directory (two levels, nothing
 * followed through a symlink, no FIFO opened for long). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <fcntl.h>
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
                              "\"license\":\"\"},{\"name\":\"alpha\",\"category\":\"public\","
                              "\"description\":\"First skill\",\"license\":\"Apache-2.0\"}]");
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

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(front_matter_gives_top_level_strings),
        cmocka_unit_test(skills_are_listed_two_levels_deep_without_following_links),
    };
    return cmocka_run_group_tests_name("skills", tests, NULL, NULL);
}
