/* mpsshim-run [--] command [args...]: runs a command through mpsshim, with the shim that
 * belongs with this program (beside it, or installed in ../lib/mpsshim) first in LD_PRELOAD. Works
 * as the command of an MPI launch: mpirun -np 8 build/mpsshim-run ./app The first client starts a
 * server when none runs (unless MPSSHIM_AUTOSTART=0). */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channel/layout.h"
#include "channel/version.h"

static void usage(FILE *f)
{
    fprintf(f, "usage: mpsshim-run [--] command [args...]\n"
               "       mpsshim-run --version | --help\n"
               "  runs the command with libmpsshim.so preloaded; the server is the one\n"
               "  of $MPSSHIM_PIPE_DIRECTORY (or $CUDA_MPS_PIPE_DIRECTORY, or\n"
               "  /tmp/mpsshim-<uid>), started on demand\n");
}

int main(int argc, char **argv)
{
    int first = 1;
    if (first < argc && (strcmp(argv[first], "-h") == 0 || strcmp(argv[first], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (first < argc && strcmp(argv[first], "--version") == 0) {
        chan_print_version("mpsshim-run");
        return 0;
    }
    if (first < argc && strcmp(argv[first], "--") == 0) first++;
    if (first >= argc) {
        usage(stderr);
        return 2;
    }
    /* Beside this program in a build tree, in ../lib/mpsshim when installed. */
    static const char *const near[] = CHAN_SHIM_NEAR_PROGRAMS;
    char self[PATH_MAX], shim[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        fprintf(stderr, "mpsshim-run: cannot find where it is installed: %s\n", strerror(errno));
        return 1;
    }
    self[n] = '\0';
    if (chan_find_near(self, near, R_OK, shim, sizeof(shim)) != 0) {
        fprintf(stderr, "mpsshim-run: no libmpsshim.so at %s, nor in ../lib/mpsshim from there\n",
                shim);
        return 1;
    }
    /* First in LD_PRELOAD, keeping whatever else the user preloads. */
    const char *old = getenv("LD_PRELOAD");
    if (!old || !strstr(old, shim)) {
        size_t len = strlen(shim) + (old ? strlen(old) + 1 : 0) + 1;
        char *val = malloc(len);
        if (!val) return 1;
        snprintf(val, len, "%s%s%s", shim, old && *old ? ":" : "", old ? old : "");
        setenv("LD_PRELOAD", val, 1);
        free(val);
    }
    execvp(argv[first], &argv[first]);
    fprintf(stderr, "mpsshim-run: %s: %s\n", argv[first], strerror(errno));
    return 127;
}
