/* libFuzzer target for .skill archives, which POST /api/skills/install reads
 * from a thread's outputs (a file the agent or the user made). Input: the
 * archive's bytes. Besides memory errors and undefined behaviour, it checks
 * that
 * - the answer is a skill or FAWN_EINVAL, and a refusal keeps nothing;
 * - a skill has a valid name, at most SKILLS_ARCHIVE_ENTRIES_MAX files,
 *   each at most SKILLS_ARCHIVE_FILE_MAX bytes, SKILLS_ARCHIVE_TOTAL_MAX in
 *   all, and relative paths with no "..", empty or hidden component;
 * - it holds a SKILL.md;
 * - one member (as artifact GET reads x.skill/SKILL.md) is a file of at most
 *   SKILLS_ARCHIVE_FILE_MAX bytes, FAWN_ENOENT or FAWN_EINVAL. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "skills/skills.h"
#include "fuzz_support.h"

/* Whether path is relative and made of plain, visible names. */
static bool path_plain(const char *path) {
    if (path[0] == '\0' || path[0] == '/')
        return false;
    for (const char *c = path; *c;) {
        size_t n = strcspn(c, "/");
        if (n == 0 || c[0] == '.')
            return false;
        c += n;
        c += *c == '/';
    }
    return true;
}

/* The member read of skills_archive_member keeps its contract. */
static void member_check(const uint8_t *data, size_t size) {
    char *text = (char *)data;
    size_t n = 1;
    int r = skills_archive_member(&text, &n, data, size, "SKILL.md");
    check(r == 0 || r == FAWN_ENOENT || r == FAWN_EINVAL);
    check(r == 0 ? n <= SKILLS_ARCHIVE_FILE_MAX && text != NULL : text == NULL && n == 0);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    member_check(data, size);
    skills_archive a;
    memset(&a, 0xA5, sizeof a);
    int r = skills_archive_read(&a, data, size);
    check(r == 0 || r == FAWN_EINVAL);
    if (r < 0) {
        check(a.n == 0 && a.files == NULL);
        return 0;
    }
    check(skills_name_valid(a.name));
    check(a.n <= SKILLS_ARCHIVE_ENTRIES_MAX);
    size_t total = 0;
    bool doc = false;
    for (size_t i = 0; i < a.n; i++) {
        check(a.files[i].size <= SKILLS_ARCHIVE_FILE_MAX);
        check(path_plain(a.files[i].path));
        total += a.files[i].size;
        doc = doc || strcmp(a.files[i].path, "SKILL.md") == 0;
    }
    check(total <= SKILLS_ARCHIVE_TOTAL_MAX && doc);
    skills_archive_clear(&a);
    return 0;
}
