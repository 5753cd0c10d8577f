/* libFuzzer target for the front matter of a skill's SKILL.md, which
 * GET /api/skills reads from every skill in the skills directory. Input:
 * the head of a SKILL.md. Besides memory errors and undefined behaviour, it
 * checks that
 * - the answer is an object, FAWN_ENOENT (no front matter) or FAWN_EINVAL
 *   (not a YAML mapping), and a refusal hands out nothing;
 * - only text that starts with a line "---" has front matter;
 * - every value is a string of valid UTF-8 without NUL, at most
 *   SKILLS_TEXT_MAX bytes, but allowed-tools: a list of at most
 *   SKILLS_TOOLS_MAX such strings, none empty;
 * - the validation of a SKILL.md written through the API
 *   (skills_doc_check) accepts or refuses with FAWN_EINVAL, nothing else. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "skills/skills.h"
#include "fuzz_support.h"

/* v is a string of valid UTF-8 without NUL, at most SKILLS_TEXT_MAX bytes. */
static void text_check(const json_t *v) {
    check(json_is_string(v));
    const char *s = json_string_value(v);
    size_t n = json_string_length(v);
    check(n <= SKILLS_TEXT_MAX && strlen(s) == n && fawn_utf8_valid(s, n));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size > SKILLS_HEAD_MAX)
        return 0;
    const char *text = (const char *)data;
    int checked = skills_doc_check("fuzz", text, size);
    check(checked == 0 || checked == FAWN_EINVAL);
    json_t *fm = (json_t *)data;
    int r = skills_front_matter(&fm, text, size);
    check(r == 0 || r == FAWN_ENOENT || r == FAWN_EINVAL);
    if (r < 0) {
        check(fm == NULL);
        return 0;
    }
    check(size >= 3 && memcmp(text, "---", 3) == 0);
    check(json_is_object(fm));
    const char *key;
    json_t *v;
    json_object_foreach(fm, key, v) {
        check(fawn_utf8_valid(key, strlen(key)));
        if (strcmp(key, SKILLS_KEY_TOOLS) == 0) {
            check(json_is_array(v) && json_array_size(v) <= SKILLS_TOOLS_MAX);
            size_t i;
            json_t *item;
            json_array_foreach(v, i, item) {
                check(json_is_string(item) && json_string_length(item) > 0);
                text_check(item);
            }
            continue;
        }
        text_check(v);
    }
    json_decref(fm);
    return 0;
}
