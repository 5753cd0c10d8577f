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
#include <limits.h>
#include <stddef.h>
#include <stdint.h>

#include "authz/authz.h"
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
/* The front matter key that lists the tools a skill may use while it is
 * active, and how many it may name (the built-in tools are a dozen). */
#define SKILLS_KEY_TOOLS "allowed-tools"
#define SKILLS_TOOLS_MAX 64
/* Longest skill name (DeerFlow's rule: lowercase letters, digits and single
 * hyphens inside, at most 64). */
#define SKILLS_NAME_MAX 64
/* Bytes of a SKILL.md an activation puts in the model's context: a skill's
 * instructions fit in a few pages; the rest is cut (the agent can read the
 * file under /mnt/skills). */
#define SKILLS_DOC_MAX ((size_t)32 << 10)

/* The top-level scalar values of the front matter at the start of text
 * (len bytes): an object of strings (nested values are skipped; a key seen
 * twice keeps its first value) into *out (caller decrefs), except
 * allowed-tools (SKILLS_KEY_TOOLS): an array of 0..SKILLS_TOOLS_MAX
 * non-empty strings. FAWN_ENOENT when text does not start with a front
 * matter block, FAWN_EINVAL when the block is not a YAML mapping or
 * allowed-tools is anything but such a list. */
FAWN_MUST_CHECK int skills_front_matter(json_t **out, const char *text, size_t len);

/* The skills under dir (a path; a directory that does not exist has none),
 * sorted by category then name: a new array of {"name", "category",
 * "description", "license", "path", "allowed_tools"?} (description and
 * license "" when SKILL.md does not say; path the skill's directory
 * relative to dir; allowed_tools only when the front matter lists them)
 * into *out (caller decrefs). A skill whose front matter is malformed is
 * left out. At most SKILLS_LIST_MAX; FAWN_EIO when dir cannot be read. */
FAWN_MUST_CHECK int skills_list(json_t **out, const char *dir);

/* Whether name is a skill name DeerFlow accepts: 1..SKILLS_NAME_MAX bytes
 * of [a-z0-9-], no hyphen first, last or twice in a row. */
bool skills_name_valid(const char *name);

/* A user's own skills: directories holding SKILL.md directly in dir
 * (SKILLS_USER_REL under the home directory), category "custom"; otherwise
 * as skills_list. */
FAWN_MUST_CHECK int skills_custom_list(json_t **out, const char *dir);

/* Where a catalog's skills are: the skills directory, and the user's own
 * skills directory (NULL: none). */
typedef struct skills_dirs {
    const char *shared;
    const char *custom;
} skills_dirs;

/* The skills of dirs that `role` may use (authorization `skills` rules: a
 * skill the role is denied is not in it), as skills_list gives them (the
 * shared ones, then the user's own) plus "enabled" (false when states, an
 * object {name: bool} or NULL, holds false for its name), "editable" and
 * "custom" (true for the user's own) into *out (caller decrefs). Without a
 * policy nothing can be decided: the catalog is empty. */
FAWN_MUST_CHECK int skills_catalog(json_t **out, const skills_dirs *dirs, const json_t *states,
                                   const authz_policy *policy, const char *role);

/* Whether a catalog entry is offered to the runs the catalog was made for:
 * listed in their prompt, activated by /name, and copied into their
 * sandbox's /mnt/skills (skills_view_sync). The one rule: the catalog holds
 * what the role may use, and of those the enabled ones are offered. */
bool skills_offered(const json_t *skill);

/* The skill named name in catalog (borrowed), or NULL. */
json_t *skills_find(const json_t *catalog, const char *name);

/* A catalog entry as DeerFlow's API shows a skill: a new object {name,
 * description, license, category, enabled, editable}, NULL when memory ran
 * out. */
json_t *skills_view(const json_t *skill);

/* The text of a catalog entry's SKILL.md under dirs, at most SKILLS_DOC_MAX
 * bytes (cut on a character boundary, then *cut is true) into *out
 * (caller frees). Nothing is followed through a symlink. FAWN_ENOENT when
 * it is gone or not a regular file, FAWN_EINVAL when it is not UTF-8 text
 * (or holds a NUL). */
FAWN_MUST_CHECK int skills_doc_read(char **out, bool *cut, const skills_dirs *dirs,
                                    const json_t *skill);

/* ---- a user's own skills, written through the API ---- */

/* A user's skills directory under the home directory ("%s": the user's
 * directory name, paths_user_dir_name). */
#define SKILLS_USER_REL "users/%s/skills"

/* The path of user's skills directory under home into out; FAWN_EINVAL
 * (out "") when it does not fit. */
FAWN_MUST_CHECK int skills_user_dir(char out[PATH_MAX], const char *home, const char *user);

/* Validates text (len bytes) as the SKILL.md of the skill named name, as
 * DeerFlow does: at most SKILLS_HEAD_MAX bytes of UTF-8 without NUL, a
 * front matter (skills_front_matter) whose keys are among name,
 * description, license, allowed-tools, required-secrets,
 * secrets-autonomous, metadata, compatibility, version and author; name
 * present, text, a valid skill name equal to name; description present,
 * text of at most SKILLS_TEXT_MAX bytes without '<' or '>';
 * required-secrets a list and secrets-autonomous a boolean when present.
 * 0, or FAWN_EINVAL with the reason. */
FAWN_MUST_CHECK int skills_doc_check(const char *name, const char *text, size_t len);

/* Writes text (len bytes, checked by the caller) as the SKILL.md of user's
 * skill name under home, creating its directories (never through a
 * symlink) and replacing the file whole through the staging writer
 * (fsx_staged_*). FAWN_EINVAL for a bad name or user; fsx errors. */
FAWN_MUST_CHECK int skills_custom_write(const char *home, const char *user, const char *name,
                                        const char *text, size_t len);

/* Removes user's skill name under home (its SKILL.md, then its directory
 * when that is empty), never through a symlink. FAWN_ENOENT "Custom skill
 * 'NAME' not found" when it has none. */
FAWN_MUST_CHECK int skills_custom_remove(const char *home, const char *user, const char *name);

/* ---- a user's own skills: their history (DeerFlow's shapes) ----
 * Each change of a user's skill through the API is recorded in a history
 * of that skill, kept beside the user's skills (SKILLS_HISTORY_REL under
 * the home directory; it outlives a deleted skill), one file NAME.json per
 * skill: a JSON array of entries
 * {"ts", "action", "author", "thread_id", "file_path", "prev_content",
 * "new_content"} (plus "rollback_from_ts" for a rollback), oldest first.
 * The file is rewritten whole through the staging writer (a crash leaves
 * the old history or the new one), appends of one user are serialized,
 * and it keeps the newest SKILLS_HISTORY_ENTRIES_MAX entries within
 * SKILLS_HISTORY_BYTES_MAX bytes (older ones are dropped). */

#define SKILLS_HISTORY_REL "users/%s/skills-history"
/* Entries kept per skill, and bytes of one skill's history: a SKILL.md is
 * at most SKILLS_HEAD_MAX bytes and an entry holds two of them. */
#define SKILLS_HISTORY_ENTRIES_MAX 50
#define SKILLS_HISTORY_BYTES_MAX ((size_t)4 << 20)

/* The current SKILL.md of user's skill name under home (at most
 * SKILLS_HEAD_MAX bytes, NUL-terminated) into *out (caller frees), never
 * through a symlink. FAWN_ENOENT when the user has no such skill. */
FAWN_MUST_CHECK int skills_custom_read(char **out, const char *home, const char *user,
                                       const char *name);

/* The history of user's skill name under home (a new array, oldest first)
 * into *out (caller decrefs). FAWN_ENOENT when it has none recorded;
 * FAWN_EIO when the file is unreadable or not such an array. */
FAWN_MUST_CHECK int skills_history_read(json_t **out, const char *home, const char *user,
                                        const char *name);

/* Appends entry (an object, borrowed; its "ts" set to now) to the history
 * of user's skill name under home, dropping the oldest entries past the
 * bounds. FAWN_EINVAL for a bad name or user, or an entry that alone
 * passes SKILLS_HISTORY_BYTES_MAX; fsx errors. */
FAWN_MUST_CHECK int skills_history_append(const char *home, const char *user, const char *name,
                                          const json_t *entry);

/* ---- the sandbox's view: what /mnt/skills shows a user's runs ----
 * A directory per user (SKILLS_VIEW_REL under the home directory) that
 * sandboxes mount read-only at /mnt/skills. It holds copies (never links:
 * a write through one could reach the source) of exactly the enabled
 * skills of the user's catalog (skills_catalog: what the role may use),
 * each at its skills_view_path; nothing else. Only regular files and
 * directories are copied (a symlink, FIFO or device in a skill's tree is
 * left out, never followed), within the bounds below. */

#define SKILLS_VIEW_REL "users/%s/skills-view"
/* Where the user's own skills appear in the view (DeerFlow's
 * /mnt/skills/custom/NAME). */
#define SKILLS_VIEW_CUSTOM "custom"
/* Files and directories copied (all skills together), their bytes, and the
 * depth of a skill's tree: a skill is instructions with a few scripts and
 * references, and a view past these bounds is not built (it is emptied). */
#define SKILLS_VIEW_ENTRIES_MAX 10000
#define SKILLS_VIEW_BYTES_MAX ((uint64_t)256 << 20)
#define SKILLS_VIEW_DEPTH_MAX 16

/* The path below /mnt/skills of a catalog entry's directory into out:
 * "custom/NAME" for the user's own, its "path" for the skills directory's.
 * FAWN_EINVAL (out "") when the entry has no valid path. */
FAWN_MUST_CHECK int skills_view_path(char out[PATH_MAX], const json_t *skill);

/* The path of user's view under home into out, created (mode 0755, never
 * through a symlink) when missing: what a sandbox mounts at /mnt/skills.
 * FAWN_EINVAL (out "") for a bad user or a path that does not fit. */
FAWN_MUST_CHECK int skills_view_ensure(char out[PATH_MAX], const char *home, const char *user);

/* Makes user's view hold exactly the enabled skills of catalog (as
 * skills_catalog built it over dirs; NULL: none), copied from dirs: built whole in a
 * hidden staging directory beside it, then swapped in entry by entry (the
 * view directory itself stays, so running sandboxes see the change).
 * Syncs of one user are serialized (a lock file beside the view). A sync
 * whose sources (the catalog's view paths, and what stat says of every
 * entry of their trees) are those the view was last built from does
 * nothing. Fails
 * closed: on any error (a bound passed, a source unreadable) the view is
 * emptied, or when even that fails, made unreadable (mode 0) until a sync
 * succeeds; the error is returned. A skill whose view path another holds
 * already (a user's own skill named as a shared one in "custom/") is left
 * out. */
FAWN_MUST_CHECK int skills_view_sync(const char *home, const char *user, const skills_dirs *dirs,
                                     const json_t *catalog);

/* ---- .skill archives: a skill as a zip, installed as a user's own ----
 * An archive is hostile input: it is read from memory, at most
 * SKILLS_ARCHIVE_MAX bytes; at most SKILLS_ARCHIVE_ENTRIES_MAX entries;
 * each file at most SKILLS_ARCHIVE_FILE_MAX bytes uncompressed, all of them
 * at most SKILLS_ARCHIVE_TOTAL_MAX and at most SKILLS_ARCHIVE_RATIO_MAX
 * times the archive (a zip bomb stops at the first byte past a bound,
 * whatever its headers claim). Entry names are relative paths of plain
 * names (no "..", ".", empty component, backslash, colon or control
 * character; at most 8 deep); links, devices and other special entries
 * are refused; dotfiles and __MACOSX are skipped; executable binaries
 * (ELF, PE, Mach-O) are refused. */

#define SKILLS_ARCHIVE_MAX ((size_t)8 << 20)
#define SKILLS_ARCHIVE_ENTRIES_MAX 512
#define SKILLS_ARCHIVE_FILE_MAX ((size_t)4 << 20)
#define SKILLS_ARCHIVE_TOTAL_MAX ((size_t)16 << 20)
/* Text compresses about tenfold; a hundredfold is a bomb. */
#define SKILLS_ARCHIVE_RATIO_MAX 100

typedef struct skills_archive_file {
    char *path; /* relative to the skill's directory */
    char *data;
    size_t size;
} skills_archive_file;

typedef struct skills_archive {
    char name[SKILLS_NAME_MAX + 1]; /* from SKILL.md's front matter */
    skills_archive_file *files;
    size_t n;
} skills_archive;

/* Reads the zip archive data (len bytes) into *out (cleared first; the
 * caller clears it with skills_archive_clear). The skill is the archive's
 * only top directory, or its top when files sit there; it must hold a
 * SKILL.md that skills_doc_check accepts under the name its front matter
 * gives. FAWN_EINVAL with the reason for anything else (nothing is kept). */
FAWN_MUST_CHECK int skills_archive_read(skills_archive *out, const void *data, size_t len);

void skills_archive_clear(skills_archive *a);

/* The file member (a relative path, as an entry name must be) of the zip
 * archive data (len bytes): the entry of that path, or of that path in the
 * archive's top directory, read within the bounds above, into *out (*n
 * bytes; caller frees). FAWN_ENOENT "File 'MEMBER' not found in skill
 * archive" when there is no such regular file, FAWN_EINVAL for an archive
 * that cannot be read or passes a bound. */
FAWN_MUST_CHECK int skills_archive_member(char **out, size_t *n, const void *data, size_t len,
                                          const char *member);

/* Installs a as user's own skill under home: written whole into a hidden
 * staging directory (never through a symlink), then renamed into place.
 * FAWN_EEXIST "Skill 'NAME' already exists" when the user has one of that
 * name; fsx errors (nothing is left). */
FAWN_MUST_CHECK int skills_archive_install(const char *home, const char *user,
                                           const skills_archive *a);

#endif
