/* The sandbox's /etc: a directory the launcher prepares on the host once per
 * set of sources, bound read-only as /etc in every sandbox (one mount instead
 * of one per file), with a few host directories bound over it. */
#ifndef FAWN_BOX_ETC_H
#define FAWN_BOX_ETC_H

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>

/* Host /etc directories bound read-only over the prepared /etc (their
 * contents change too often, and too deep, to copy). */
extern const char *const box_etc_bound_dirs[];
extern const size_t box_etc_bound_dirs_count;

/* Makes sure run_dir holds the prepared /etc for the host's current files
 * and stores its path in out: copies of the host /etc files a sandbox needs
 * (only those any host user may read; never passwd, shadow, keys),
 * generated passwd, group, hostname and hosts, resolv.conf when the network
 * is shared, and empty mount points for box_etc_bound_dirs. Its name is a
 * fingerprint of its sources, so it is rebuilt exactly when one changes;
 * concurrent launchers build it at most once each and never see it half
 * written. Returns 0 or a negative FAWN_E* code. */
int box_etc_prepare(char out[PATH_MAX], const char *run_dir, bool network_none);

#endif
