/* A /proc/PID/stat text's fields, read by both ends: the server of its clients (their
 * thread count and start time), the shim of its own process (its thread count). */
#ifndef MPSSHIM_CHANNEL_PROCSTAT_H
#define MPSSHIM_CHANNEL_PROCSTAT_H

/* Field `field` of a /proc/PID/stat text (3: the state; 20: the thread count; 22: the start
 * time), counted after the command name, which may hold spaces and parentheses (its last
 * ')'): the field's text, NULL when stat has fewer. */
const char *chan_stat_field(const char *stat, int field);
/* Field `field` of the /proc/PID/stat open on fd, read now from its start (pread: the fd can
 * be kept open and read again), as a number; -1 when it cannot be read or has fewer. */
long long chan_stat_read(int fd, int field);

#endif
