/* The history of a user's own skills (skills.h): one JSON array per skill
 * in the user's skills directory, rewritten whole through the staging
 * writer, bounded in entries and bytes. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/fsx.h"
#include "base/json.h"
#include "skills/skills.h"

#define SKILL_FILE "SKILL.md"
/* A history file's name: the skill's name and this suffix. */
#define HISTORY_SUFFIX ".json"
/* DeerFlow's timestamp: ISO 8601 in UTC with microseconds. */
#define TS_LEN sizeof "2026-01-01T00:00:00.000000+00:00"

/* The directory under home holding user's skill histories (made when
 * create), O_DIRECTORY, never through a symlink; FAWN_ENOENT when it is
 * not there, FAWN_EINVAL for a bad user or skill name. */
static int history_dir_open(const char *home, const char *user, const char *name, bool create) {
    if (!skills_name_valid(name) || !fawn_id_valid(user))
        return fawn_err(FAWN_EINVAL, "invalid skill name");
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, SKILLS_HISTORY_REL, user);
    _cleanup_close_ int homefd = open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (homefd < 0)
        return fawn_err_sys(FAWN_EIO, errno, "open the home directory");
    return create ? fsx_mkdirs_beneath(homefd, rel)
                  : fsx_open_beneath(homefd, rel, O_RDONLY | O_DIRECTORY, 0, FSX_NO_SYMLINKS);
}

int skills_custom_read(char **out, const char *home, const char *user, const char *name) {
    *out = NULL;
    bool valid = skills_name_valid(name) && fawn_id_valid(user);
    char rel[PATH_MAX];
    snprintf(rel, sizeof rel, SKILLS_USER_REL "/%s/" SKILL_FILE, valid ? user : "-",
             valid ? name : "-");
    _cleanup_close_ int homefd = valid ? open(home, O_RDONLY | O_DIRECTORY | O_CLOEXEC) : -1;
    _cleanup_close_ int fd = homefd < 0
                                 ? -1
                                 : fsx_open_beneath(homefd, rel, O_RDONLY | O_NONBLOCK | O_NOCTTY,
                                                    0, FSX_NO_SYMLINKS);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
        return fawn_err(FAWN_ENOENT, "Custom skill '%s' not found", valid ? name : "");
    char *text = NULL;
    size_t n = 0;
    int r = fawn_read_all(&text, &n, fd, SKILLS_HEAD_MAX);
    if (r == 0 && memchr(text, '\0', n)) {
        free(text);
        r = fawn_err(FAWN_EINVAL, SKILL_FILE " is not text");
    }
    if (r == 0)
        *out = text;
    return r;
}

/* The history file's name of skill name. */
static void history_name(char out[SKILLS_NAME_MAX + sizeof HISTORY_SUFFIX], const char *name) {
    snprintf(out, SKILLS_NAME_MAX + sizeof HISTORY_SUFFIX, "%s" HISTORY_SUFFIX, name);
}

/* The history in dirfd (the history directory) of skill name. */
static int history_load(json_t **out, int dirfd, const char *name) {
    *out = NULL;
    char file[SKILLS_NAME_MAX + sizeof HISTORY_SUFFIX];
    history_name(file, name);
    _cleanup_close_ int fd = fsx_open_beneath(dirfd, file, O_RDONLY | O_NONBLOCK | O_NOCTTY, 0,
                                              FSX_NO_SYMLINKS);
    if (fd < 0)
        return fd == FAWN_ENOENT ? fd : fawn_err(FAWN_EIO, "the history of %s is unreadable", name);
    char *text = NULL;
    size_t n = 0;
    int r = fawn_read_all(&text, &n, fd, SKILLS_HISTORY_BYTES_MAX);
    json_t *list = r == 0 ? json_loadb(text, n, JSON_REJECT_DUPLICATES, NULL) : NULL;
    free(text);
    if (!json_is_array(list)) {
        json_decref(list);
        return fawn_err(FAWN_EIO, "the history of %s is unreadable", name);
    }
    *out = list;
    return 0;
}

int skills_history_read(json_t **out, const char *home, const char *user, const char *name) {
    *out = NULL;
    _cleanup_close_ int dirfd = history_dir_open(home, user, name, false);
    if (dirfd < 0)
        return dirfd == FAWN_ENOENT || dirfd == FAWN_EINVAL ? fawn_err(FAWN_ENOENT, "no history")
                                                            : dirfd;
    return history_load(out, dirfd, name);
}

/* Now as DeerFlow writes a history timestamp. */
static void ts_now(char out[TS_LEN]) {
    struct timespec now;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &now);
    gmtime_r(&now.tv_sec, &tm);
    size_t n = strftime(out, TS_LEN, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(out + n, TS_LEN - n, ".%06u+00:00", (unsigned)(now.tv_nsec / 1000) % 1000000u);
}

/* list as JSON text within the bounds: its oldest entries dropped until it
 * fits; FAWN_EINVAL when not even its newest entry does. */
static int history_dump(char **out, json_t *list) {
    *out = NULL;
    while (json_array_size(list) > SKILLS_HISTORY_ENTRIES_MAX)
        json_array_remove(list, 0);
    for (;;) {
        char *text = json_dumps(list, JSON_COMPACT | JSON_ENSURE_ASCII);
        if (!text)
            return fawn_err(FAWN_ENOMEM, "out of memory");
        if (strlen(text) <= SKILLS_HISTORY_BYTES_MAX) {
            *out = text;
            return 0;
        }
        free(text);
        if (json_array_size(list) <= 1)
            return fawn_err(FAWN_EINVAL, "a history entry is larger than %zu bytes",
                            SKILLS_HISTORY_BYTES_MAX);
        json_array_remove(list, 0);
    }
}

/* Writes list (bounded) as skill name's history in dirfd. */
static int history_store(int dirfd, const char *name, json_t *list) {
    char *text = NULL, file[SKILLS_NAME_MAX + sizeof HISTORY_SUFFIX];
    history_name(file, name);
    int r = history_dump(&text, list);
    fsx_staged s = {0};
    struct stat st;
    if (r == 0)
        r = fsx_staged_open(&s, dirfd, FSX_STAGING_WRITE, FSX_USER_FILE_MODE);
    if (r == 0)
        r = fsx_staged_write(&s, text, strlen(text));
    if (r == 0)
        r = fsx_staged_commit(&st, &s, file, FSX_COMMIT_REPLACE, file);
    fsx_staged_abort(&s);
    free(text);
    return r;
}

int skills_history_append(const char *home, const char *user, const char *name,
                          const json_t *entry) {
    if (!json_is_object(entry))
        return fawn_err(FAWN_EINVAL, "a history entry is an object");
    _cleanup_close_ int dirfd = history_dir_open(home, user, name, true);
    if (dirfd < 0)
        return dirfd;
    while (flock(dirfd, LOCK_EX) < 0) /* released when dirfd closes */
        if (errno != EINTR)
            return fawn_err_sys(FAWN_EIO, errno, "lock the skill history");
    json_t *list = NULL;
    int r = history_load(&list, dirfd, name);
    if (r == FAWN_ENOENT)
        r = (list = json_array()) ? 0 : fawn_err(FAWN_ENOMEM, "out of memory");
    char ts[TS_LEN];
    ts_now(ts);
    json_t *record = r == 0 ? json_pack("{s:s}", "ts", ts) : NULL;
    if (r == 0 && (!record || json_object_update_missing(record, (json_t *)entry) < 0)) {
        json_decref(record);
        record = NULL;
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    }
    if (r == 0 && json_array_append_new(list, record) < 0)
        r = fawn_err(FAWN_ENOMEM, "out of memory");
    if (r == 0)
        r = history_store(dirfd, name, list);
    json_decref(list);
    return r;
}
