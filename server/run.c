/* mpsshim-run [--] command [args...]: runs a command through mpsshim, with the shim that
 * sits next to this program first in LD_PRELOAD. Works as the command of an MPI launch:
 *     mpirun -np 8 build/mpsshim-run ./app
 * The first client starts a server when none runs (unless MPSSHIM_AUTOSTART=0). */
#define _GNU_SOURCE
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    int first = 1;
    if (first < argc && strcmp(argv[first], "--") == 0)
        first++;
    if (first >= argc || strcmp(argv[first], "-h") == 0 || strcmp(argv[first], "--help") == 0) {
        fprintf(stderr, "usage: mpsshim-run [--] command [args...]\n"
                        "  runs the command with libmpsshim.so preloaded; the server is the one\n"
                        "  of $MPSSHIM_PIPE_DIRECTORY (or $CUDA_MPS_PIPE_DIRECTORY, or\n"
                        "  /tmp/mpsshim), started on demand\n");
        return 2;
    }
    char self[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0) {
        fprintf(stderr, "mpsshim-run: cannot find where it is installed: %s\n", strerror(errno));
        return 1;
    }
    self[n] = '\0';
    char shim[PATH_MAX + 32];
    snprintf(shim, sizeof(shim), "%s/libmpsshim.so", dirname(self));
    if (access(shim, R_OK) != 0) {
        fprintf(stderr, "mpsshim-run: %s: %s\n", shim, strerror(errno));
        return 1;
    }
    /* First in LD_PRELOAD, keeping whatever else the user preloads. */
    const char *old = getenv("LD_PRELOAD");
    if (!old || !strstr(old, shim)) {
        size_t len = strlen(shim) + (old ? strlen(old) + 1 : 0) + 1;
        char *val = malloc(len);
        if (!val)
            return 1;
        snprintf(val, len, "%s%s%s", shim, old && *old ? ":" : "", old ? old : "");
        setenv("LD_PRELOAD", val, 1);
        free(val);
    }
    execvp(argv[first], &argv[first]);
    fprintf(stderr, "mpsshim-run: %s: %s\n", argv[first], strerror(errno));
    return 127;
}
