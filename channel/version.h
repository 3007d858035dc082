/* What a build of mpsshim is: the release (the VERSION file), the wire protocol it speaks,
 * and the git commit it was built from (when built from git). Every program prints it
 * for --version; the values come from the Makefile, for channel/version.c alone. */
#ifndef MPSSHIM_VERSION_H
#define MPSSHIM_VERSION_H

/* "0.1.0 (protocol 4.1, git 5c8245b1a2c3)": the release, then what identifies the build. */
const char *chan_version(void);

/* Prints "<program> <chan_version()>" on stdout, for --version. */
void chan_print_version(const char *program);

#endif
