/* Short scheduler slices; see slice.h. */
#define _GNU_SOURCE
#include "channel/slice.h"

#include <errno.h>
#include <sched.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's struct sched_attr up to sched_period (SCHED_ATTR_SIZE_VER0): glibc has no
 * wrapper. The utilisation clamps after it are left out, so the kernel never reads them. */
struct kattr {
    uint32_t size;
    uint32_t policy;
    uint64_t flags;
    int32_t nice;
    uint32_t priority;
    uint64_t runtime;
    uint64_t deadline;
    uint64_t period;
};
_Static_assert(sizeof(struct kattr) == 48, "SCHED_ATTR_SIZE_VER0");

static int get(struct kattr *a)
{
#ifdef SYS_sched_getattr
    memset(a, 0, sizeof(*a));
    return syscall(SYS_sched_getattr, 0, a, (unsigned)sizeof(*a), 0) == 0 ? 0 : errno;
#else
    (void)a;
    return ENOSYS;
#endif
}

static int put(uint32_t policy, int32_t nice, uint64_t runtime)
{
#ifdef SYS_sched_setattr
    struct kattr a = {.size = sizeof(a), .policy = policy, .nice = nice, .runtime = runtime};
    return syscall(SYS_sched_setattr, 0, &a, 0) == 0 ? 0 : errno;
#else
    (void)policy, (void)nice, (void)runtime;
    return ENOSYS;
#endif
}

int chan_slice_set(uint64_t ns, struct chan_slice_saved *saved)
{
    struct kattr a;
    int e;
    if (saved) saved->valid = 0;
    if ((e = get(&a)) != 0) return e;
    if (a.policy != SCHED_OTHER && a.policy != SCHED_BATCH) return -1;
    if (a.runtime == ns) return 0;
    if ((e = put(a.policy, a.nice, ns)) != 0) return e;
    if (saved) *saved = (struct chan_slice_saved){1, a.policy, a.nice, a.runtime};
    return 0;
}

void chan_slice_restore(const struct chan_slice_saved *saved)
{
    if (saved && saved->valid) (void)put(saved->policy, saved->nice, saved->runtime);
}
