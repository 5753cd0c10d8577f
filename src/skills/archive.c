/* .skill archives (skills.h): a zip read with libarchive from memory, every
 * entry checked and bounded before a byte is kept, then installed as one
 * of a user's own skills through a hidden staging directory renamed into
 * place. */
#include <archive.h>
#include <archive_entry.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fsx.h"
#include "base/json.h"
#include "skills/skills.h"

#define SKILL_FILE "SKILL.md"
/* Longest entry path kept (a skill's files sit a few directories deep). */
#define ENTRY_PATH_MAX 1024
/* Directories an archive's files may be nested in (and tree_remove goes). */
#define DEPTH_MAX 8

/* ---- entry names ---- */

/* A file ignored as DeerFlow ignores it: macOS metadata and dotfiles. */
static bool component_ignored(const char *c, size_t n) {
    return (n > 0 && c[0] == '.') || (n == 8 && memcmp(c, "__MACOSX", 8) == 0);
}

/* Whether path (an entry's name) is a relative path of at most DEPTH_MAX
 * components, each a plain name: not empty, ".", "..", hidden or control
 * characters, no backslash or colon (another system's separator or an
 * NTFS stream). A directory's trailing '/' is allowed. *ignored tells it
 * is to be skipped. */
static int entry_path_check(bool *ignored, const char *path) {
    *ignored = false;
    size_t len = path ? strlen(path) : 0;
    if (len == 0 || len > ENTRY_PATH_MAX || path[0] == '/' || !fawn_utf8_valid(path, len) ||
        strpbrk(path, "\\:"))
        return fawn_err(FAWN_EINVAL, "Archive contains an unsafe member path");
    size_t depth = 0;
    for (const char *c = path; *c;) {
        size_t n = strcspn(c, "/");
        bool dot = (n == 1 && c[0] == '.') || (n == 2 && memcmp(c, "..", 2) == 0);
        if (n == 0 || n > NAME_MAX || dot || ++depth > DEPTH_MAX)
            return fawn_err(FAWN_EINVAL, "Archive contains an unsafe member path");
        for (size_t i = 0; i < n; i++)
            if ((unsigned char)c[i] < 0x20 || c[i] == 0x7f)
                return fawn_err(FAWN_EINVAL, "Archive contains an unsafe member path");
        *ignored = *ignored || component_ignored(c, n);
        c += n;
        c += *c == '/';
    }
    return 0;
}

/* ---- reading ---- */

/* Executable binaries (ELF, PE, Mach-O) are refused, as DeerFlow does. */
static bool executable_magic(const char *data, size_t n) {
    static const char *const magics[] = {"\177ELF",          "MZ",
                                         "\xfe\xed\xfa\xce", "\xfe\xed\xfa\xcf",
                                         "\xce\xfa\xed\xfe", "\xcf\xfa\xed\xfe",
                                         "\xca\xfe\xba\xbe", "\xbe\xba\xfe\xca",
                                         "\xca\xfe\xba\xbf", "\xbf\xba\xfe\xca"};
    for (size_t i = 0; i < ARRAY_LEN(magics); i++) {
        size_t m = strlen(magics[i]);
        if (n >= m && memcmp(data, magics[i], m) == 0)
            return true;
    }
    return false;
}

/* What one read has taken so far, against the bounds. */
typedef struct reading {
    struct archive *ar;
    size_t archive_len;
    size_t total; /* uncompressed bytes of every file so far */
    size_t entries;
    skills_archive *out;
} reading;

/* The data of the current entry into *data (*n bytes, caller frees),
 * stopping at the first byte past a bound. */
static int entry_data(char **data, size_t *n, reading *rd) {
    fbuf b = {.limit = SKILLS_ARCHIVE_FILE_MAX + 1};
    char chunk[4096];
    int r = 0;
    for (;;) {
        la_ssize_t got = archive_read_data(rd->ar, chunk, sizeof chunk);
        if (got < 0) {
            r = fawn_err(FAWN_EINVAL, "Archive member cannot be read: %s",
                         archive_error_string(rd->ar) ?: "corrupt");
            break;
        }
        if (got == 0)
            break;
        rd->total += (size_t)got;
        if (b.len + (size_t)got > SKILLS_ARCHIVE_FILE_MAX || rd->total > SKILLS_ARCHIVE_TOTAL_MAX ||
            rd->total > SKILLS_ARCHIVE_RATIO_MAX * rd->archive_len) {
            r = fawn_err(FAWN_EINVAL,
                         "Skill archive is too large uncompressed (a member past "
                         "%zu bytes, %zu in all, or %d times the archive)",
                         SKILLS_ARCHIVE_FILE_MAX, SKILLS_ARCHIVE_TOTAL_MAX,
                         SKILLS_ARCHIVE_RATIO_MAX);
            break;
        }
        if ((r = fbuf_append(&b, chunk, (size_t)got)) < 0)
            break;
    }
    if (r == 0 && b.len && executable_magic(b.data, b.len))
        r = fawn_err(FAWN_EINVAL, "Skill archive contains an executable binary");
    if (r < 0) {
        fbuf_free(&b);
        return r;
    }
    *n = b.len;
    *data = b.data ? fbuf_steal(&b) : strdup("");
    return *data ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
}

/* Whether the archive read so far has a file at path. */
static bool file_known(const skills_archive *a, const char *path) {
    for (size_t i = 0; i < a->n; i++)
        if (strcmp(a->files[i].path, path) == 0)
            return true;
    return false;
}

/* Keeps the current entry, a regular file at path. */
static int file_keep(reading *rd, const char *path) {
    skills_archive *a = rd->out;
    if (file_known(a, path))
        return fawn_err(FAWN_EINVAL, "Archive contains a member twice: %s", path);
    skills_archive_file f = {.path = strdup(path)};
    int r = f.path ? entry_data(&f.data, &f.size, rd) : fawn_err(FAWN_ENOMEM, "out of memory");
    skills_archive_file *grown = r == 0 ? realloc(a->files, (a->n + 1) * sizeof *grown) : NULL;
    if (r == 0 && !grown)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r < 0) {
        free(f.path);
        free(f.data);
        return r;
    }
    a->files = grown;
    a->files[a->n++] = f;
    return 0;
}

/* One entry: a directory (implied by its files: skipped), an ignored file
 * (skipped), or a regular file (kept); anything else is refused. */
static int entry_read(reading *rd, struct archive_entry *e) {
    if (++rd->entries > SKILLS_ARCHIVE_ENTRIES_MAX)
        return fawn_err(FAWN_EINVAL, "Skill archive contains more than %d entries",
                        SKILLS_ARCHIVE_ENTRIES_MAX);
    const char *path = archive_entry_pathname(e);
    mode_t type = archive_entry_filetype(e);
    bool ignored = false;
    int r = entry_path_check(&ignored, path);
    if (r == 0 && (archive_entry_hardlink(e) || archive_entry_symlink(e) ||
                   (type != AE_IFREG && type != AE_IFDIR)))
        r = fawn_err(FAWN_EINVAL, "Archive contains a link or a special file: %s", path);
    if (r < 0 || type == AE_IFDIR || ignored)
        return r;
    return file_keep(rd, path);
}

/* The directory every kept file is in when there is exactly one and no
 * file beside it (DeerFlow's layouts: name/SKILL.md or SKILL.md), as a
 * prefix to strip ("" when none). */
static size_t root_prefix(const skills_archive *a) {
    const char *first = a->n ? a->files[0].path : "";
    size_t n = strcspn(first, "/");
    if (first[n] != '/')
        return 0;
    for (size_t i = 1; i < a->n; i++)
        if (strncmp(a->files[i].path, first, n + 1) != 0)
            return 0;
    return n + 1;
}

/* Strips the root directory from every path; finds SKILL.md and takes the
 * skill's name from its front matter, validated (skills_doc_check). */
static int layout_check(skills_archive *a) {
    if (a->n == 0)
        return fawn_err(FAWN_EINVAL, "Skill archive is empty");
    size_t strip = root_prefix(a);
    const skills_archive_file *doc = NULL;
    for (size_t i = 0; i < a->n; i++) {
        memmove(a->files[i].path, a->files[i].path + strip, strlen(a->files[i].path + strip) + 1);
        if (strcmp(a->files[i].path, SKILL_FILE) == 0)
            doc = &a->files[i];
    }
    if (!doc)
        return fawn_err(FAWN_EINVAL, "Skill archive has no " SKILL_FILE);
    json_t *fm = NULL;
    int r = skills_front_matter(&fm, doc->data, doc->size);
    const char *name = json_string_value(json_object_get(fm, "name"));
    if (r == 0 && !skills_name_valid(name))
        r = fawn_err(FAWN_EINVAL, "Missing or invalid 'name' in frontmatter");
    if (r == 0)
        snprintf(a->name, sizeof a->name, "%s", name);
    json_decref(fm);
    if (r == FAWN_ENOENT)
        r = fawn_err(FAWN_EINVAL, "No YAML frontmatter found");
    return r < 0 ? r : skills_doc_check(a->name, doc->data, doc->size);
}

static int entries_read(reading *rd) {
    for (;;) {
        struct archive_entry *e;
        int st = archive_read_next_header(rd->ar, &e);
        if (st == ARCHIVE_EOF)
            return 0;
        if (st != ARCHIVE_OK)
            return fawn_err(FAWN_EINVAL, "Not a valid skill archive: %s",
                            archive_error_string(rd->ar) ?: "unreadable");
        int r = entry_read(rd, e);
        if (r < 0)
            return r;
    }
}

int skills_archive_read(skills_archive *out, const void *data, size_t len) {
    memset(out, 0, sizeof *out);
    if (len > SKILLS_ARCHIVE_MAX)
        return fawn_err(FAWN_EINVAL, "Skill archive is larger than %zu bytes", SKILLS_ARCHIVE_MAX);
    reading rd = {.ar = archive_read_new(), .archive_len = len, .out = out};
    if (!rd.ar)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = archive_read_support_format_zip(rd.ar) == ARCHIVE_OK &&
                    archive_read_open_memory(rd.ar, data, len) == ARCHIVE_OK
                ? entries_read(&rd)
                : fawn_err(FAWN_EINVAL, "Not a valid skill archive: %s",
                           archive_error_string(rd.ar) ?: "unreadable");
    archive_read_free(rd.ar);
    if (r == 0)
        r = layout_check(out);
    if (r < 0)
        skills_archive_clear(out);
    return r;
}

/* Whether the entry at path is member: the same path, or member in the
 * archive's top directory (DeerFlow's name/SKILL.md layout). */
static bool member_is(const char *path, const char *member) {
    if (strcmp(path, member) == 0)
        return true;
    size_t top = strcspn(path, "/");
    return path[top] == '/' && strcmp(path + top + 1, member) == 0;
}

/* Reads entries until member, which is kept in rd->out as its one file;
 * the others are skipped unread but counted. */
static int member_find(reading *rd, const char *member) {
    for (;;) {
        struct archive_entry *e;
        int st = archive_read_next_header(rd->ar, &e);
        if (st == ARCHIVE_EOF)
            return fawn_err(FAWN_ENOENT, "File '%s' not found in skill archive", member);
        if (st != ARCHIVE_OK)
            return fawn_err(FAWN_EINVAL, "Not a valid skill archive: %s",
                            archive_error_string(rd->ar) ?: "unreadable");
        if (++rd->entries > SKILLS_ARCHIVE_ENTRIES_MAX)
            return fawn_err(FAWN_EINVAL, "Skill archive contains more than %d entries",
                            SKILLS_ARCHIVE_ENTRIES_MAX);
        const char *path = archive_entry_pathname(e);
        bool ignored = false;
        if (!path || entry_path_check(&ignored, path) < 0 || ignored || !member_is(path, member))
            continue;
        if (archive_entry_filetype(e) != AE_IFREG || archive_entry_hardlink(e) ||
            archive_entry_symlink(e))
            return fawn_err(FAWN_ENOENT, "File '%s' not found in skill archive", member);
        return file_keep(rd, path);
    }
}

int skills_archive_member(char **out, size_t *n, const void *data, size_t len, const char *member) {
    *out = NULL;
    *n = 0;
    bool ignored = false;
    if (len > SKILLS_ARCHIVE_MAX)
        return fawn_err(FAWN_EINVAL, "Skill archive is larger than %zu bytes", SKILLS_ARCHIVE_MAX);
    if (entry_path_check(&ignored, member) < 0 || ignored)
        return fawn_err(FAWN_ENOENT, "File not found in skill archive");
    skills_archive a = {0};
    reading rd = {.ar = archive_read_new(), .archive_len = len, .out = &a};
    if (!rd.ar)
        return fawn_err(FAWN_ENOMEM, "out of memory");
    int r = archive_read_support_format_zip(rd.ar) == ARCHIVE_OK &&
                    archive_read_open_memory(rd.ar, data, len) == ARCHIVE_OK
                ? member_find(&rd, member)
                : fawn_err(FAWN_EINVAL, "Not a valid skill archive: %s",
                           archive_error_string(rd.ar) ?: "unreadable");
    archive_read_free(rd.ar);
    if (r == 0) {
        *out = steal_ptr(a.files[0].data);
        *n = a.files[0].size;
    }
    skills_archive_clear(&a);
    return r;
}

void skills_archive_clear(skills_archive *a) {
    for (size_t i = 0; i < a->n; i++) {
        free(a->files[i].path);
        free(a->files[i].data);
    }
    free(a->files);
    memset(a, 0, sizeof *a);
}

/* ---- installing ---- */

/* Removes name beneath parent, a directory tree at most DEPTH_MAX deep
 * that fawn made, never following a symlink. */
static void tree_remove(int parent, const char *name, int depth) {
    int fd = fsx_open_beneath(parent, name, O_RDONLY | O_DIRECTORY, 0, FSX_NO_SYMLINKS);
    DIR *d = fd >= 0 && depth <= DEPTH_MAX ? fdopendir(dup(fd)) : NULL;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0 &&
            unlinkat(fd, e->d_name, 0) < 0 && errno == EISDIR)
            tree_remove(fd, e->d_name, depth + 1);
    if (d)
        closedir(d);
    if (fd >= 0)
        close(fd);
    unlinkat(parent, name, AT_REMOVEDIR);
}

/* Writes one file beneath the staging directory (its directories made
 * first), through the staging writer. */
static int file_write(int stagefd, const skills_archive_file *f) {
    char dir[ENTRY_PATH_MAX + 1];
    const char *slash = strrchr(f->path, '/');
    snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - f->path) : 0, f->path);
    _cleanup_close_ int fd = slash ? fsx_mkdirs_beneath(stagefd, dir) : dup(stagefd);
    if (fd < 0)
        return slash ? fd : fawn_err_sys(FAWN_EIO, errno, "open the staging directory");
    fsx_staged s = {0};
    struct stat st;
    int r = fsx_staged_open(&s, fd, FSX_STAGING_WRITE, FSX_USER_FILE_MODE);
    if (r == 0)
        r = fsx_staged_write(&s, f->data, f->size);
    if (r == 0)
        r = fsx_staged_commit(&st, &s, slash ? slash + 1 : f->path, 0, f->path);
    fsx_staged_abort(&s);
    return r;
}

/* Every file into a new hidden directory of skillsfd, then that directory
 * renamed to the skill's name (never over an existing one). */
static int staged_install(int skillsfd, const skills_archive *a) {
    char staging[32] = ".install-";
    fawn_random_hex(staging + strlen(staging), 8);
    if (mkdirat(skillsfd, staging, 0755) < 0)
        return fawn_err_sys(FAWN_EIO, errno, "create the staging directory");
    _cleanup_close_ int stagefd = fsx_open_beneath(skillsfd, staging, O_RDONLY | O_DIRECTORY, 0,
                                                   FSX_NO_SYMLINKS);
    int r = stagefd >= 0 ? 0 : stagefd;
    for (size_t i = 0; r == 0 && i < a->n; i++)
        r = file_write(stagefd, &a->files[i]);
    if (r == 0 && renameat2(skillsfd, staging, skillsfd, a->name, RENAME_NOREPLACE) < 0)
        r = errno == EEXIST ? fawn_err(FAWN_EEXIST, "Skill '%s' already exists", a->name)
                            : fawn_err_sys(FAWN_EIO, errno, "install the skill");
    if (r < 0)
        tree_remove(skillsfd, staging, 0);
    return r;
}

int skills_archive_install(const char *home, const char *user, const skills_archive *a) {
    if (!fawn_id_valid(user) || !skills_name_valid(a->name))
        return fawn_err(FAWN_EINVAL, "invalid skill name");
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, SKILLS_USER_REL, user);
    _cleanup_close_ int homefd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (homefd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open the home directory");
    _cleanup_close_ int skillsfd = fsx_mkdirs_beneath(homefd, rel);
    if (skillsfd < 0)
        return skillsfd;
    struct stat st;
    if (fstatat(skillsfd, a->name, &st, AT_SYMLINK_NOFOLLOW) == 0)
        return fawn_err(FAWN_EEXIST, "Skill '%s' already exists", a->name);
    return staged_install(skillsfd, a);
}
