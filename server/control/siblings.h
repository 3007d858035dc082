/* siblings.c: the other servers of this server's pipe directory (MPSSHIM_SERVER_PER_GPU). */
#ifndef MPSSHIM_SERVER_SIBLINGS_H
#define MPSSHIM_SERVER_SIBLINGS_H

#include <stddef.h>

/* The pipe directory of the family: this server's own, or its parent when this is a GPU's
 * server (a folder gpu-*). 1 when it is a GPU's server, else 0. */
int srv_siblings_top(char *top, size_t len);

/* Whether path is a sibling's folder: a directory itself (not a link to one), not this
 * server's. */
int srv_siblings_is_dir(const char *path);

/* Sends one control command line (ending in a newline) to the server whose control socket
 * is in dir, of this server's user only, and reads its answer, every wait bounded (5 s in
 * all). The answer's text, NUL-terminated and cut to len, in text; a descriptor sent with
 * its end in *fd when fd is not NULL (else closed; -1 when none came). 0 when it answered
 * without failing, 1 when it answered a failure, -1 when no whole answer came. */
int srv_siblings_ask(const char *dir, const char *line, char *text, size_t len, int *fd);

/* A GPU's server starting fresh takes the defaults of its pipe directory's own server (the
 * active thread percentage, the client priority, its device's memory limit), as if they had
 * been set here: a limit set with mpsshim-control before the GPU's server existed holds for
 * its clients too. Nothing when there is no such server, or it does not answer. */
void srv_siblings_inherit(void);

#endif
