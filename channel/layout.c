/* See layout.h. */
#define _GNU_SOURCE
#include "channel/layout.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Tries each of rel from the directory of file. 0 when one is found (in out, without the
 * "bin/../lib" a relative step leaves, since it ends up in LD_PRELOAD and in messages). */
static int find_from(const char *file, const char *const *rel, int mode, char *out, size_t len)
{
    char dir[PATH_MAX];
    snprintf(dir, sizeof(dir), "%s", file);
    char *slash = strrchr(dir, '/');
    if (slash)
        *slash = '\0';
    else
        snprintf(dir, sizeof(dir), ".");
    for (int i = 0; rel[i]; i++)
        if ((size_t)snprintf(out, len, "%s/%s", dir, rel[i]) < len && access(out, mode) == 0) {
            char *real = realpath(out, NULL);
            if (real && strlen(real) < len) memcpy(out, real, strlen(real) + 1);
            free(real);
            return 0;
        }
    return -1;
}

int chan_find_near(const char *file, const char *const *rel, int mode, char *out, size_t len)
{
    if (find_from(file, rel, mode, out, len) == 0) return 0;
    /* A link to the shim (or a program) elsewhere: look around the file it names too. */
    char *real = realpath(file, NULL);
    int rc = real && strcmp(real, file) != 0 ? find_from(real, rel, mode, out, len) : -1;
    free(real);
    if (rc != 0) /* out names the first place looked, for the caller's message */
        find_from(file, (const char *const[]){rel[0], NULL}, F_OK, out, len);
    return rc;
}
