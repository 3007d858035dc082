/* migrate.c and pager.c: migrating managed memory's table, shared by the two halves (the
 * table and the hooks; the fault handler and the pager). Not for the rest of the shim. */
#ifndef MPSSHIM_INTERPOSE_MIGRATE_H
#define MPSSHIM_INTERPOSE_MIGRATE_H

#include "interpose/shim.h"

#include <stdatomic.h>

#define CHUNK (64ull << 10)
#define RUN_MAX 32u /* chunks one fault brings at most: 2 MiB */
#define SEQS 8      /* sequences of faults followed per allocation */
#define BATCH 64    /* faults served by one pull at most */

enum { ST_DEV = 0, ST_CLEAN, ST_DIRTY };

struct mig {
    uint64_t base, size; /* the allocation: A and its bytes */
    uint32_t nchunks;
    uint32_t nhost; /* chunks not DEV */
    uint32_t ctx;   /* the context it was made in: its pulls name it */
    uint32_t pins;  /* pulls in flight on it: its end waits for them */
    /* Pulls of prefetches to the host in flight on it that their threads wait for: a host
     * write to one of its chunks waits for them (pager.c), as their bytes could land over it. */
    uint32_t prefetching;
    /* Sequences of faults followed (a thread's walk each, as in a parallel loop): the chunk
     * after the last run pulled, and that run's length; the slot a new sequence takes. */
    uint32_t seq_next[SEQS], seq_run[SEQS], seq_victim;
    int rw;     /* the host writes what it reads here: pulls come writable */
    int listed; /* in reach */
    uint8_t *st;
};

/* migrate.c: guards the table; signalled when a pull's pins go; device work begun
 * (shim_mig_work): a pull that saw it change was maybe overtaken. */
extern pthread_mutex_t shim_mig_lock;
extern pthread_cond_t shim_mig_unpinned;
extern atomic_ulong shim_mig_begun;

/* migrate.c, under shim_mig_lock: the allocation holding address a, or NULL; chunks [a, b)
 * of m still DEV become CLEAN, or DIRTY when write and no pull is in flight on m (a chunk is
 * made writable only when no transfer can land over what the host writes); chunks [a, b) get
 * protection prot; the bytes of chunks [a, b) within the allocation. */
struct mig *shim_mig_find_locked(uint64_t a);
void shim_mig_reach_locked(struct mig *m, uint32_t a, uint32_t b, int write);
void shim_mig_protect(const struct mig *m, uint32_t a, uint32_t b, int prot);
uint64_t shim_mig_span(const struct mig *m, uint32_t a, uint32_t b);
/* migrate.c: MPUSH or MPULL of n entries, in records that fit; reply: wait for each. */
CUresult shim_mig_move(unsigned what, const struct chan_mvar_ent *e, size_t n, uint64_t flags,
                       int reply);

/* migrate.c: every allocation lies within [shim_mig_lo, shim_mig_hi) (only ever widened): the
 * addresses the handler takes. */
extern atomic_ulong shim_mig_lo, shim_mig_hi;

/* What pager.c gives the table, set as the library loads (the table calls it, never the
 * other way: pager.c uses the table). Both under shim_mig_lock. start: the pager and the
 * handler, once (0, or -1 when the pager cannot start); check: ours is SIGSEGV's handler
 * again if a program's replaced it (where chunks become DEV); kick: see above. */
struct shim_mig_pager {
    int (*start)(void);
    void (*check)(void);
    void (*kick)(void); /* a prefetch's pull landed: faults that waited for it go on */
};
void shim_mig_set_pager(const struct shim_mig_pager *p);

#endif
