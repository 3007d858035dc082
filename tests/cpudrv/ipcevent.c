// Interprocess events (cuIpcGetEventHandle / cuIpcOpenEventHandle) between processes, as
// two mpsshim servers of one pipe directory use them (MPSSHIM_SERVER_PER_GPU: the importing
// client's server opens the real handle of the exporting client's server's event).
//
// An exported event gets a shared page (a memfd) holding the generation of its latest record
// and that of the latest record executed; the exporter's records keep both (event.c). The
// handle names the page as /proc/<pid>/fd/<fd> of the exporter, with a random nonce the page
// also holds (a descriptor number reused after the exporter's event went names another
// page). An opened event is an event of the importer's context that only reads the page: a
// query compares the two generations, a synchronisation and a stream's wait poll until the
// executed one reaches the generation recorded when they were asked. A test double's limits:
// an opened event cannot be recorded nor waited in a capture (CUDA_ERROR_NOT_SUPPORTED), and
// it lives only while the exporting process does.
#define _GNU_SOURCE
#include "cpudrv.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <unistd.h>

#define IPCEV_MAGIC 0x7665637069726463ull /* "cdripcev" */

struct cpudrv_ipcev {
    uint64_t magic, nonce;
    _Atomic uint64_t recorded, executed;
};

struct ipcev_handle {
    char tag[8]; /* "cpudrvEV" */
    int32_t pid, fd;
    uint64_t nonce;
};
_Static_assert(sizeof(struct ipcev_handle) <= CU_IPC_HANDLE_SIZE, "IPC event handle too large");

void cpudrv_ipcev_recorded(struct cpudrv_event *e)
{
    if (e->ipc) atomic_store_explicit(&e->ipc->recorded, e->gen, memory_order_release);
}

void cpudrv_ipcev_executed(struct cpudrv_event *e, unsigned long long gen)
{
    if (!e->ipc) return;
    uint64_t was = atomic_load_explicit(&e->ipc->executed, memory_order_relaxed);
    while (was < gen &&
           !atomic_compare_exchange_weak_explicit(&e->ipc->executed, &was, gen,
                                                  memory_order_release, memory_order_relaxed))
        ;
}

void cpudrv_ipcev_release(struct cpudrv_event *e)
{
    if (e->ipc) munmap(e->ipc, sizeof(*e->ipc));
    if (e->ipc_fd >= 0) close(e->ipc_fd);
    e->ipc = NULL;
    e->ipc_fd = -1;
}

uint64_t cpudrv_ipcev_target(const struct cpudrv_event *e)
{
    return atomic_load_explicit(&e->ipc->recorded, memory_order_acquire);
}

int cpudrv_ipcev_reached(const struct cpudrv_event *e, uint64_t target)
{
    return atomic_load_explicit(&e->ipc->executed, memory_order_acquire) >= target;
}

// Polls, backing off to 1 ms, until e's page says target executed, or *dying is set.
void cpudrv_ipcev_wait(const struct cpudrv_event *e, uint64_t target, const int *dying)
{
    long ns = 0;
    while (!cpudrv_ipcev_reached(e, target)) {
        if (dying && __atomic_load_n(dying, __ATOMIC_ACQUIRE)) return;
        cpudrv_poll_pause(&ns);
    }
}

CUresult cuIpcGetEventHandle(CUipcEventHandle *pHandle, CUevent event)
{
    if (!pHandle) return TR(CUDA_ERROR_INVALID_VALUE);
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_event *e = cpudrv_event_find(event);
    if (!e) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_INVALID_HANDLE);
    }
    if (!(e->flags & CU_EVENT_INTERPROCESS) || e->imported) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_INVALID_VALUE);
    }
    if (!e->ipc) {
        int fd = memfd_create("cpudrv-ipc-event", MFD_CLOEXEC);
        struct cpudrv_ipcev *p = MAP_FAILED;
        uint64_t nonce = 0;
        if (fd >= 0 && ftruncate(fd, sizeof(*p)) == 0 &&
            getrandom(&nonce, sizeof(nonce), 0) == (ssize_t)sizeof(nonce))
            p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        if (p == MAP_FAILED) {
            if (fd >= 0) close(fd);
            cpudrv_unlock();
            return TR(CUDA_ERROR_OUT_OF_MEMORY);
        }
        p->magic = IPCEV_MAGIC;
        p->nonce = nonce;
        atomic_store(&p->recorded, e->gen);
        atomic_store(&p->executed, e->t_gen);
        e->ipc = p;
        e->ipc_fd = fd;
    }
    struct ipcev_handle h = {
        .tag = "cpudrvEV", .pid = getpid(), .fd = e->ipc_fd, .nonce = e->ipc->nonce};
    memset(pHandle, 0, sizeof(*pHandle));
    memcpy(pHandle->reserved, &h, sizeof(h));
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

CUresult cuIpcOpenEventHandle(CUevent *phEvent, CUipcEventHandle handle)
{
    if (!phEvent) return TR(CUDA_ERROR_INVALID_VALUE);
    struct ipcev_handle h;
    memcpy(&h, handle.reserved, sizeof(h));
    if (memcmp(h.tag, "cpudrvEV", sizeof(h.tag)) != 0 || h.pid <= 0 || h.fd < 0)
        return TR(CUDA_ERROR_INVALID_VALUE);
    if (h.pid == getpid()) return TR(CUDA_ERROR_INVALID_CONTEXT); /* the exporter's own */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)h.pid, (int)h.fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_ipcev *p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return TR(CUDA_ERROR_INVALID_VALUE);
    if (p->magic != IPCEV_MAGIC || p->nonce != h.nonce) {
        munmap(p, sizeof(*p));
        return TR(CUDA_ERROR_INVALID_VALUE);
    }
    struct cpudrv_ctx *c;
    CUresult rc = cpudrv_enter(&c);
    if (rc) {
        munmap(p, sizeof(*p));
        return TR(rc);
    }
    struct cpudrv_event *e = cpudrv_event_new(c, CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS);
    if (!e) {
        cpudrv_unlock();
        munmap(p, sizeof(*p));
        return TR(CUDA_ERROR_OUT_OF_MEMORY);
    }
    e->ipc = p;
    e->imported = 1;
    cpudrv_obj_publish(&e->o);
    cpudrv_unlock();
    *phEvent = (CUevent)e;
    return TR(CUDA_SUCCESS);
}
