/* Where one request's time goes between a client's call and its reply (issue 29: the round
 * trip's cost over native), kept only in a build made with `make STAMPS=1`
 * (-DMPSSHIM_STAMPS); in every other build the calls compile to nothing.
 *
 * Each end notes the moments of each record it handles, by the record's position in its ring
 * (the same number at both ends) and the monotonic clock (the same clock in every process of
 * a machine): the client when it begins a request, when it publishes it and when its
 * reply came; the server's worker when it took the record from the ring and when it had
 * replayed it. The notes go to /tmp/mpsshim-stamps/PID.bin when the process ends (the server:
 * also each time a client leaves, since a fresh start replaces its image), 24 bytes each
 * (struct chan_stamp, the machine's byte order), and `bench/stamps.py` joins them. No timing is
 * read from them by any other code. */
#ifndef MPSSHIM_STAMP_H
#define MPSSHIM_STAMP_H

#include <stdint.h>

enum chan_stamp_kind {
    CHAN_STAMP_BEGUN,    /* client: the request begun (before it waits for the ring) */
    CHAN_STAMP_SENT,     /* client: about to publish (the tail's store, then the doorbell) */
    CHAN_STAMP_ANSWERED, /* client: its reply seen */
    CHAN_STAMP_TAKEN,    /* server: the worker took it from the ring */
    CHAN_STAMP_REPLAYED, /* server: the worker's handler returned */
};

struct chan_stamp {
    uint64_t ns;   /* chan_now_ns() */
    uint64_t pos;  /* the record's position in its ring */
    uint32_t pid;  /* the client process (as the server sees it, at the server's end) */
    uint16_t kind; /* enum chan_stamp_kind */
    uint16_t op;   /* the record's op */
};

#ifdef MPSSHIM_STAMPS
#define CHAN_STAMPING 1
void chan_stamp(enum chan_stamp_kind kind, uint32_t pid, uint16_t op, uint64_t pos, uint64_t ns);
/* Appends the stamps not yet written to the process's file (also done at its exit). */
void chan_stamp_flush(void);
#else
#define CHAN_STAMPING 0
static inline void chan_stamp(enum chan_stamp_kind kind, uint32_t pid, uint16_t op, uint64_t pos,
                              uint64_t ns)
{
    (void)kind;
    (void)pid;
    (void)op;
    (void)pos;
    (void)ns;
}
static inline void chan_stamp_flush(void) {}
#endif

#endif
