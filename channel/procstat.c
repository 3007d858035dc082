/* A /proc/PID/stat text's fields (procstat.h). */
#include "channel/procstat.h"

#include <string.h>

const char *chan_stat_field(const char *stat, int field)
{
    const char *p = strrchr(stat, ')');
    for (int f = 2; p && f < field; f++)
        p = strchr(p + 1, ' ');
    return p && field > 2 ? p + 1 : NULL;
}
