/* admit.c: the main loop's accept of a client's or a control connection. */
#ifndef MPSSHIM_SERVER_ADMIT_H
#define MPSSHIM_SERVER_ADMIT_H

/* accept4 of a connection waiting on lfd (CLOEXEC): a client's, or with control a
 * control connection's. Out of descriptors (EMFILE, ENFILE), the connection waiting would
 * keep poll answering and the main loop spinning: it is taken with a spare descriptor kept
 * for that and refused, a client as one past the limit is, its message naming
 * descriptors, a control connection with that message as a failed command's answer (said
 * in the log once per run of them). -1 when none was accepted. */
int srv_admit_accept(int lfd, int control);
/* At start, before "ready": the spare descriptor taken, so that it counts among those the
 * server has open at start (a fresh start, recycle.c, must come back to that number). */
void srv_admit_init(void);

#endif
