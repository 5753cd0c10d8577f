/* skills: the catalog of the skills in the skills directory (mounted
 * read-only at /mnt/skills in every sandbox).
 *
 * A skill is a directory holding a regular file SKILL.md, either directly in
 * the skills directory or in one category directory there (DeerFlow's
 * public/ and custom/ layout; category "public" for the first kind). Its
 * name is its directory's; its description and license come from the front
 * matter of SKILL.md: a YAML mapping between a first line "---" and the
 * next line "---". Nothing is followed through a symlink, and every walk
 * and read is bounded (skills_list). SKILL.md files are the operator's, but
 * are read as untrusted text: skills_front_matter is fuzzed.
 *
 * Every out-parameter is set on every path (NULL before anything can
 * fail). */
#ifndef FAWN_SKILLS_H
#define FAWN_SKILLS_H

#include <jansson.h>
#include <stddef.h>

#include "base/base.h"

/* Skills one listing returns, directory entries it looks at (both levels
 * together), and bytes of each SKILL.md it reads: the front matter is at
 * the top, and a catalog of thousands is not a listing. */
#define SKILLS_LIST_MAX 1000
#define SKILLS_ENTRIES_MAX 10000
#define SKILLS_HEAD_MAX ((size_t)64 << 10)
/* Longest description or license kept (longer ones are cut, on a UTF-8
 * character boundary). */
#define SKILLS_TEXT_MAX 1024

/* The top-level scalar values of the front matter at the start of text
 * (len bytes): an object of strings (nested values are skipped; a key seen
 * twice keeps its first value) into *out (caller decrefs). FAWN_ENOENT when
 * text does not start with a front matter block, FAWN_EINVAL when the block
 * is not a YAML mapping. */
FAWN_MUST_CHECK int skills_front_matter(json_t **out, const char *text, size_t len);

/* The skills under dir (a path; a directory that does not exist has none),
 * sorted by category then name: a new array of {"name", "category",
 * "description", "license"} (the last two "" when SKILL.md does not say)
 * into *out (caller decrefs). At most SKILLS_LIST_MAX; FAWN_EIO when dir
 * cannot be read. */
FAWN_MUST_CHECK int skills_list(json_t **out, const char *dir);

#endif
