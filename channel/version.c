/* See version.h. MPSSHIM_RELEASE and MPSSHIM_COMMIT are given on this file's command line
 * only (Makefile), so that a new commit rebuilds this file and relinks, nothing more. */
#include "channel/version.h"
#include "channel/proto.h"

#include <stdio.h>

#ifndef MPSSHIM_RELEASE
#error "MPSSHIM_RELEASE comes from the VERSION file, through the Makefile"
#endif
#ifndef MPSSHIM_COMMIT
#define MPSSHIM_COMMIT "" /* not built from git */
#endif

#define STR_(x) #x
#define STR(x) STR_(x)
#define PROTOCOL "protocol " STR(CHAN_PROTO_MAJOR) "." STR(CHAN_PROTO_MINOR)

const char *chan_version(void)
{
    return sizeof(MPSSHIM_COMMIT) > 1 ? MPSSHIM_RELEASE " (" PROTOCOL ", git " MPSSHIM_COMMIT ")"
                                      : MPSSHIM_RELEASE " (" PROTOCOL ")";
}

void chan_print_version(const char *program)
{
    printf("%s %s\n", program, chan_version());
}
