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
 * Holes among the mappings above it (between libraries: seen on Ubuntu 24.04, where a
 * client's 1 MiB of malloc went between its libraries, at one address in both of two
 * identical processes) would still take the mappings that fit them: they are filled with
 * reservations too (plug_holes), except the gap below the main stack, which the stack grows
 * into.
 * Nothing happens where addresses are randomised, where the address space is limited
 * (RLIMIT_AS would count the reservation), or with MPSSHIM_SPREAD_MAPPINGS=0. The server's
 * own mappings are kept out of the clients' way by MPSSHIM_KEEP_CLIENT_SPACE
 * (server/core/clientspace.c), which covers this offset too. */
#include "interpose/shim.h"
#include "channel/settings.h"

#include <stdio.h>
#include <string.h>
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

/* Reserves every hole between two mappings that lie at or above LOW, up to the main
 * stack's gap (left: the stack grows into it), so that later mappings, which the kernel
 * puts in the highest hole that fits, go below LOW. Read from /proc/self/maps; a line it
 * cannot read ends the filling (the holes left are what there was before). */
static void plug_holes(uint64_t low)
{
    FILE *f = fopen("/proc/self/maps", "re");
    if (!f) return;
    char line[4352]; /* a mapped file's path: PATH_MAX at most */
    uint64_t prev_end = 0;
    while (fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        if (sscanf(line, "%llx-%llx", &a, &b) != 2) break;
        if (strstr(line, "[stack]")) break; /* the hole below it is the stack's */
        if (a < low) continue;
        if (prev_end && a > prev_end) {
            void *want = (void *)(uintptr_t)prev_end;
            void *got =
                mmap(want, a - prev_end, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
            /* A kernel before 4.17 takes the flag for a hint and may map elsewhere. */
            if (got != MAP_FAILED && got != want) munmap(got, a - prev_end);
        }
        prev_end = b;
    }
    fclose(f);
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
    void *kept = mmap(NULL, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (kept != MAP_FAILED) plug_holes((uint64_t)(uintptr_t)kept);
}
