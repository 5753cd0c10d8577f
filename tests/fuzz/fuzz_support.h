/* What the fuzz targets share: their invariant check and a scratch
 * directory of their own. */
#ifndef FAWN_FUZZ_SUPPORT_H
#define FAWN_FUZZ_SUPPORT_H

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Aborts, naming the invariant that does not hold. */
#define check(ok)                                                                                  \
    do {                                                                                           \
        if (!(ok)) {                                                                               \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #ok);                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Room for a scratch directory's path. */
#define FUZZ_DIR_MAX 64

/* Makes a new directory named fawn-fuzz-<name>-XXXXXX under $TMPDIR (when
 * short enough) or /tmp into dir. */
static inline void fuzz_scratch_dir(char dir[FUZZ_DIR_MAX], const char *name) {
    const char *tmp = getenv("TMPDIR");
    snprintf(dir, FUZZ_DIR_MAX, "%s/fawn-fuzz-%s-XXXXXX", tmp && strlen(tmp) < 32 ? tmp : "/tmp",
             name);
    check(mkdtemp(dir) != NULL);
}

static inline int fuzz_remove_entry(const char *path, const struct stat *sb, int flag,
                                    struct FTW *ftw) {
    return remove(path);
}

/* Removes dir and everything under it, without following symlinks. */
static inline void fuzz_remove_tree(const char *dir) {
    nftw(dir, fuzz_remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

#endif
