/* Where mpsshim's pieces find each other. In a build tree they sit side by side; `make
 * install` puts the programs in PREFIX/bin and the shim in PREFIX/lib/mpsshim (Makefile,
 * install:), and a packager may put the shim in PREFIX/lib. Each list is where to look,
 * relative to the directory of the one looking, in order. */
#ifndef MPSSHIM_LAYOUT_H
#define MPSSHIM_LAYOUT_H

#include <stddef.h>

/* The server, from the shim's directory (MPSSHIM_SERVER, when set, is used instead). */
#define CHAN_SERVER_NEAR_SHIM                                                                      \
    {"mpsshim-server", "../../bin/mpsshim-server", "../bin/mpsshim-server", NULL}
/* The shim, from mpsshim-run's directory. */
#define CHAN_SHIM_NEAR_PROGRAMS {"libmpsshim.so", "../lib/mpsshim/libmpsshim.so", NULL}

/* The first of `rel` (NULL-terminated) that `access(mode)` allows, relative to the directory
 * of `file`: as it was named, then with its links resolved. 0 with the path in out, or -1
 * with out naming the first place looked. */
int chan_find_near(const char *file, const char *const *rel, int mode, char *out, size_t len);

#endif
