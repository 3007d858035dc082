/* Short scheduler slices for threads whose wake-up someone is waiting for.
 *
 * Why: an MPI job runs one rank per CPU and its ranks poll. A thread of ours that wakes then
 * (a server worker rung for a client's launches, a client thread handed its reply) finds
 * every CPU held by a poller. Linux's fair scheduler (EEVDF, 6.6 on) lets a woken thread
 * preempt the running one only if its virtual deadline is earlier, and protects the running
 * one's slice (about 3 ms on machines of 8 CPUs or more): so a hand-over between two of our
 * threads can cost a whole slice, and a cold 16-rank job on 16 CPUs paid about 2x native
 * MPS's time (bench/results/issue29-2026-11-28). Since 6.12 a thread may ask for its own,
 * shorter slice (sched_attr.sched_runtime, 0.1-100 ms, no privilege needed) and a shorter
 * slice preempts a longer one at wake-up (the kernel's PREEMPT_SHORT): what a thread that
 * runs a few µs per wake-up should ask for. It takes no more CPU: a short slice ends sooner.
 *
 * Kernels before 6.12 take the call and ignore sched_runtime for these policies (before 3.14
 * the call does not exist: ENOSYS, said by the return value): nothing changes there. */
#ifndef MPSSHIM_SLICE_H
#define MPSSHIM_SLICE_H

#include <stdint.h>

/* A thread's scheduling attributes as they were before chan_slice_set, to put back. */
struct chan_slice_saved {
    int valid; /* 0: nothing was changed, chan_slice_restore does nothing */
    uint32_t policy;
    int32_t nice;
    uint64_t runtime; /* its own slice request, 0: the kernel's default */
};

/* Asks the kernel for a slice of `ns` for the calling thread, keeping its policy and nice
 * value, and only for the fair policies (SCHED_OTHER, SCHED_BATCH): a real-time or idle
 * thread is left as it is. `saved` (may be NULL) receives what to restore. 0 when the
 * kernel took it, else an errno value (ENOSYS, EINVAL, EPERM) or -1 for "not a fair
 * thread". */
int chan_slice_set(uint64_t ns, struct chan_slice_saved *saved);

/* Puts back what chan_slice_set changed. */
void chan_slice_restore(const struct chan_slice_saved *saved);

#endif
