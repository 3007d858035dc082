/* Shared files a client registered (cuMemHostRegister of a MAP_SHARED mapping of a tmpfs
 * file: /dev/shm, an unsealed memfd), as NCCL's shared-memory transport does: the server maps
 * the same file, and the client, or any process holding the file, can truncate it under the
 * server. A load or store of the server's (the driver's copies may be the CPU's; memops.c
 * stores) past the file's new end would then be SIGBUS, for every client of the server.
 *
 * So each such mapping is guarded: on SIGBUS inside one, the handler maps anonymous pages over
 * the whole mapping (MAP_FIXED) and the faulting load or store completes on them, as display
 * servers do with their clients' shared buffers. The truncating client's registration no
 * longer shares its pages with the server from then on (what it broke is its own), and the
 * server says so when the registration ends; no other client is touched. A SIGBUS outside
 * every guard goes to the handler there was before (log.c's, which logs the crash).
 *
 * The table is fixed (GUARDS entries) and read by the handler without a lock: an entry's
 * range is published whole (hi, then lo) and cleared before its mapping goes. */
#define _GNU_SOURCE
#include "server/memory/shmguard.h"
#include "server/core/server.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>

#define GUARDS SRV_SHMGUARDS

static struct {
    _Atomic uint64_t lo, hi; /* lo 0: free */
    _Atomic int hit;
} guards[GUARDS];

static pthread_mutex_t guard_lock = PTHREAD_MUTEX_INITIALIZER;
static struct sigaction before; /* the SIGBUS handler there was before ours */

static void on_bus(int sig, siginfo_t *si, void *uc)
{
    (void)sig;
    (void)uc;
    uint64_t a = (uint64_t)(uintptr_t)si->si_addr;
    for (int i = 0; i < GUARDS; i++) {
        uint64_t lo = atomic_load(&guards[i].lo), hi = atomic_load(&guards[i].hi);
        if (lo && a >= lo && a < hi &&
            mmap((void *)(uintptr_t)lo, hi - lo, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED) {
            atomic_store(&guards[i].hit, 1);
            return; /* the load or store is made again, on the anonymous pages */
        }
    }
    /* Not a guarded mapping: the handler before takes the fault when it comes again. */
    sigaction(SIGBUS, &before, NULL);
}

/* Ours is the SIGBUS handler (again: log.c may have installed its own since). guard_lock
 * held. */
static int install(void)
{
    struct sigaction cur;
    if (sigaction(SIGBUS, NULL, &cur) != 0) return -1;
    if ((cur.sa_flags & SA_SIGINFO) && cur.sa_sigaction == on_bus) return 0;
    struct sigaction sa = {.sa_sigaction = on_bus, .sa_flags = SA_SIGINFO | SA_NODEFER};
    sigemptyset(&sa.sa_mask);
    before = cur;
    return sigaction(SIGBUS, &sa, NULL);
}

int srv_shmguard_add(uint64_t addr, uint64_t bytes)
{
    int slot = -1;
    pthread_mutex_lock(&guard_lock);
    if (install() == 0)
        for (int i = 0; i < GUARDS && slot < 0; i++)
            if (!atomic_load(&guards[i].lo)) slot = i;
    if (slot >= 0) {
        atomic_store(&guards[slot].hit, 0);
        atomic_store(&guards[slot].hi, addr + bytes);
        atomic_store(&guards[slot].lo, addr);
    }
    pthread_mutex_unlock(&guard_lock);
    return slot;
}

int srv_shmguard_drop(int slot)
{
    if (slot < 0 || slot >= GUARDS) return 0;
    pthread_mutex_lock(&guard_lock);
    atomic_store(&guards[slot].lo, 0);
    atomic_store(&guards[slot].hi, 0);
    int hit = atomic_exchange(&guards[slot].hit, 0);
    pthread_mutex_unlock(&guard_lock);
    return hit;
}
