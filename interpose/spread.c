/* A client whose address space is not randomised spreads its own mappings.
 *
 * Why: the server maps a client's cuMemHostRegister at the client's own address (one
 * pointer, one meaning under unified addressing: server/memory/memory.c), and one address of
 * the server can hold one client's pages. Where the kernel does not randomise processes'
 * addresses (setarch -R, a debugger, randomize_va_space 0), identical processes (an MPI
 * job's ranks) make identical mappings, and the second rank's registration finds the first
 * one's at its address: refused (CUDA_ERROR_NOT_SUPPORTED). Seen on the CPU test driver with
 * two whole_wait clients under setarch -R.
 *
 * How: before main, such a process reserves (no access, no memory) a random 256-768 GiB just
 * below its libraries, where its next mappings would go; they go below it instead, each
 * process at an offset of its own. Large allocations (malloc's above 128 KiB, files mapped,
 * NCCL's shared segments) move; what lies above it does not: the libraries, the brk heap
 * (small malloc blocks) and the main thread's stack stay where every such process has them.
 * Nothing happens where addresses are randomised, where the address space is limited
 * (RLIMIT_AS would count the reservation), or with MPSSHIM_SPREAD_MAPPINGS=0. The server's
 * own mappings are kept out of the clients' way by MPSSHIM_KEEP_CLIENT_SPACE
 * (server/core/clientspace.c), which covers this offset too. */
#include "interpose/shim.h"
#include "channel/settings.h"

#include <stdio.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/random.h>
#include <sys/resource.h>

#define SPREAD_MIN (256ull << 30)
#define SPREAD_RANGE (512ull << 30)
#define SPREAD_ALIGN (2ull << 20)

/* 1 when the kernel does not randomise this process's mappings. */
static int not_randomised(void)
{
    int p = personality(0xffffffff);
    if (p != -1 && (p & ADDR_NO_RANDOMIZE)) return 1;
    FILE *f = fopen("/proc/sys/kernel/randomize_va_space", "re");
    if (!f) return 0;
    int v = -1;
    if (fscanf(f, "%d", &v) != 1) v = -1;
    fclose(f);
    return v == 0;
}

__attribute__((constructor)) static void spread_mappings(void)
{
    int on = (int)chan_setting_num(CHAN_SET_SPREAD_MAPPINGS); /* read always: a bad value is said */
    if (!on || !not_randomised()) return;
    struct rlimit rl;
    if (getrlimit(RLIMIT_AS, &rl) != 0 || rl.rlim_cur != RLIM_INFINITY) return;
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r)) return;
    uint64_t size = SPREAD_MIN + (r % SPREAD_RANGE & ~(SPREAD_ALIGN - 1));
    /* Where the kernel puts it: the highest gap that fits, below the libraries. Kept for
     * the life of the process. */
    (void)mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
}
