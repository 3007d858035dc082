// Virtual memory management: physical allocations (cuMemCreate), address reservations
// (cuMemAddressReserve), mappings (cuMemMap) and their access (cuMemSetAccess).
//
// Addresses are host addresses here, so the emulation is the host's own virtual memory.
// A physical allocation is a memfd, mapped once when it is made; a reservation is
// inaccessible anonymous memory; cuMemMap duplicates the allocation's mapping onto the
// reserved addresses (mremap with old size 0), so that every mapping of one allocation
// shares its pages, and records the mapping as a range of the allocation table. Kernels,
// copies and memsets reach it through that table like cuMemAlloc memory; mappings that
// meet without a gap form one span; a mapping no device has access to yet faults (see
// cpudrv_mem_check). cuMemUnmap puts private anonymous memory back where the mapping was,
// so that late work that raced with it writes to scratch rather than crashing the
// process. An allocation's memory goes when its last handle is released and its last
// mapping unmapped (the object's last reference).
#define _GNU_SOURCE
#include "cpudrv.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

// Minimum and recommended granularity, as on current GPUs.
#define GRANULE ((size_t)2 << 20)
// The memfd name, which also carries the device to an importing process.
#define MEMFD_PREFIX "cpudrv-vmm-dev"

struct reservation {
    uintptr_t base;
    size_t size;
};

// Live reservations, unordered; protected by cpudrv_big.
static struct reservation *resv;
static size_t nresv, capresv;

/* ---------------------------------------------------------------- properties */

// The device of a property structure's location: device locations only (host memory is
// NOT_SUPPORTED here); an unknown ordinal is bad_dev (cuMemCreate says INVALID_DEVICE).
static CUresult check_prop(const CUmemAllocationProp *prop, CUresult bad_dev, int *dev)
{
    if (!prop || prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
    case CU_MEM_LOCATION_TYPE_DEVICE:
        if (prop->location.id < 0 || prop->location.id >= cpudrv_ndev) return bad_dev;
        break;
    case CU_MEM_LOCATION_TYPE_HOST:
    case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        return CUDA_ERROR_NOT_SUPPORTED;
    default:
        return CUDA_ERROR_INVALID_VALUE;
    }
    unsigned known = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                     CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;
    if ((unsigned)prop->requestedHandleTypes & ~known) return CUDA_ERROR_INVALID_VALUE;
    // Only file descriptors can be exported here (Linux; no fabric).
    if (prop->requestedHandleTypes & ~CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return CUDA_ERROR_NOT_SUPPORTED;
    *dev = prop->location.id;
    return CUDA_SUCCESS;
}

// Minimum or recommended granularity: both 2 MiB for device memory.
CUresult cuMemGetAllocationGranularity(size_t *granularity, const CUmemAllocationProp *prop,
                                       CUmemAllocationGranularity_flags option)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!granularity || (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM &&
                         option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED))
        return TR(CUDA_ERROR_INVALID_VALUE);
    int dev;
    rc = check_prop(prop, CUDA_ERROR_INVALID_VALUE, &dev);
    if (!rc) *granularity = GRANULE;
    return TR(rc);
}

/* ---------------------------------------------------------------- physical memory */

// The last reference went: no handle and no mapping is left.
static void physmem_release(struct cpudrv_obj *o)
{
    struct cpudrv_physmem *m = (struct cpudrv_physmem *)o;
    munmap(m->pages, m->size);
    if (m->fd >= 0) close(m->fd);
    if (m->counted) cpudrv_mem_unreserve(m->dev, m->size);
    free(m);
}

// cpudrv_big held: makes the object for the memfd fd (taken over, even on failure) of
// size bytes; keep_fd: the fd stays open for export.
static CUresult physmem_new(int fd, size_t size, int dev, const CUmemAllocationProp *prop,
                            int keep_fd, struct cpudrv_physmem **out)
{
    struct cpudrv_physmem *m = calloc(1, sizeof *m);
    void *pages = m ? cpudrv_far_map(size, 0, PROT_READ | PROT_WRITE, MAP_SHARED, fd) : NULL;
    if (m && !pages) pages = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (!m) pages = MAP_FAILED;
    if (pages == MAP_FAILED) {
        free(m);
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    if (!keep_fd) {
        close(fd);
        fd = -1;
    }
    cpudrv_obj_init(&m->o, CPUDRV_K_PHYSMEM, NULL, physmem_release);
    m->dev = dev;
    m->size = size;
    m->handles = 1;
    m->fd = fd;
    m->pages = pages;
    m->prop = *prop;
    m->prop.win32HandleMetaData = NULL;
    m->prop.allocFlags.compressionType = CU_MEM_ALLOCATION_COMP_NONE; // never compressed
    *out = m;
    return CUDA_SUCCESS;
}

// The live physical allocation whose handle is h, or NULL.
static struct cpudrv_physmem *physmem_find(CUmemGenericAllocationHandle h)
{
    return cpudrv_obj_find((const void *)(uintptr_t)h, CPUDRV_K_PHYSMEM);
}

// Creates size bytes (a multiple of the granularity) of device memory, not yet mapped.
CUresult cuMemCreate(CUmemGenericAllocationHandle *handle, size_t size,
                     const CUmemAllocationProp *prop, unsigned long long flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (cpudrv_no_vmm()) return TR(CUDA_ERROR_NOT_SUPPORTED);
    if (!handle || !size || size % GRANULE || flags) return TR(CUDA_ERROR_INVALID_VALUE);
    int dev;
    rc = check_prop(prop, CUDA_ERROR_INVALID_DEVICE, &dev);
    if (rc) return TR(rc);
    char name[32];
    snprintf(name, sizeof name, MEMFD_PREFIX "%d", dev + cpudrv_first); // the machine's
    int fd = memfd_create(name, MFD_CLOEXEC);
    if (fd < 0) return TR(CUDA_ERROR_OUT_OF_MEMORY);
    if (size > (size_t)LLONG_MAX || ftruncate(fd, (off_t)size)) {
        close(fd);
        return TR(CUDA_ERROR_OUT_OF_MEMORY);
    }
    int keep = (prop->requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) != 0;
    struct cpudrv_physmem *m = NULL;
    cpudrv_lock();
    rc = cpudrv_mem_reserve(dev, size);
    if (rc)
        close(fd);
    else if ((rc = physmem_new(fd, size, dev, prop, keep, &m)))
        cpudrv_mem_unreserve(dev, size);
    if (!rc) {
        m->counted = 1;
        cpudrv_obj_publish(&m->o);
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m;
    }
    cpudrv_unlock();
    return TR(rc);
}

// Releases a handle; the memory lives on while it is mapped (or retained).
CUresult cuMemRelease(CUmemGenericAllocationHandle handle)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    struct cpudrv_physmem *m = physmem_find(handle);
    if (!m)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (--m->handles == 0)
        cpudrv_obj_unpublish(&m->o); // may release m
    cpudrv_unlock();
    return TR(rc);
}

// The handle of the memory mapped at addr, retained once more (the same handle value).
CUresult cuMemRetainAllocationHandle(CUmemGenericAllocationHandle *handle, void *addr)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!handle) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    const struct cpudrv_range *r = cpudrv_mem_find((uintptr_t)addr);
    if (!r || r->type != CPUDRV_MEM_MAPPED || r->freeing) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        // A released handle comes back to life: the mapping kept the object alive.
        if (r->phys->handles++ == 0) {
            cpudrv_obj_ref(&r->phys->o);
            cpudrv_obj_publish(&r->phys->o);
        }
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)r->phys;
    }
    cpudrv_unlock();
    return TR(rc);
}

// The properties the allocation was made with (never compressed here).
CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!prop) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    const struct cpudrv_physmem *m = physmem_find(handle);
    if (!m)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if (m->unseen)
        rc = CUDA_ERROR_INVALID_DEVICE; // driver 580, two H200s: no ordinal names it here
    else
        *prop = m->prop;
    cpudrv_unlock();
    return TR(rc);
}

// A new file descriptor (an int, the caller's to close) for memory created with
// CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR among its requested handle types.
CUresult cuMemExportToShareableHandle(void *shareableHandle, CUmemGenericAllocationHandle handle,
                                      CUmemAllocationHandleType handleType,
                                      unsigned long long flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!shareableHandle || flags) return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    const struct cpudrv_physmem *m = physmem_find(handle);
    int fd = -1;
    if (!m || handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR || m->fd < 0)
        rc = CUDA_ERROR_INVALID_VALUE;
    else if ((fd = fcntl(m->fd, F_DUPFD_CLOEXEC, 0)) < 0)
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    cpudrv_unlock();
    if (!rc) *(int *)shareableHandle = fd;
    return TR(rc);
}

// The machine's index of the device an exported memfd names ("/memfd:cpudrv-vmm-devN
// (deleted)"), or -1 for a descriptor that is not one.
static int memfd_device(int fd)
{
    char path[64], target[128];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(path, target, sizeof target - 1);
    if (n < 0) return -1;
    target[n] = 0;
    const char *pre = "/memfd:" MEMFD_PREFIX;
    if (strncmp(target, pre, strlen(pre)) != 0) return -1;
    char *end;
    long dev = strtol(target + strlen(pre), &end, 10);
    return end != target + strlen(pre) && (*end == ' ' || !*end) && dev >= 0 ? (int)dev : -1;
}

// A handle for memory exported by cuMemExportToShareableHandle (in this process or
// another); osHandle is the file descriptor itself, which stays the caller's. The memory
// counts against the exporter's device, not again here. The descriptor's name carries the
// machine's index of that device: memory of a device this process does not see (another
// GPU's server, started with CUDA_VISIBLE_DEVICES) is imported and mapped as its own device
// 0's would be, the peer mapping NCCL makes, but no ordinal here names where it lies: its
// properties answer CUDA_ERROR_INVALID_DEVICE, as driver 580 answers on two H200s.
CUresult cuMemImportFromShareableHandle(CUmemGenericAllocationHandle *handle, void *osHandle,
                                        CUmemAllocationHandleType shHandleType)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!handle || shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return TR(CUDA_ERROR_INVALID_VALUE);
    int fd = (int)(intptr_t)osHandle, dev = memfd_device(fd) - cpudrv_first, unseen = 0;
    struct stat st;
    if (dev + cpudrv_first < 0 || fstat(fd, &st) || st.st_size <= 0 || (size_t)st.st_size % GRANULE)
        return TR(CUDA_ERROR_INVALID_VALUE);
    if (dev < 0 || dev >= cpudrv_ndev) {
        unseen = 1;
        dev = 0;
    }
    int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) return TR(CUDA_ERROR_OUT_OF_MEMORY);
    CUmemAllocationProp prop = {0};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = dev;
    struct cpudrv_physmem *m;
    cpudrv_lock();
    rc = physmem_new(own, (size_t)st.st_size, dev, &prop, 1, &m);
    if (!rc) {
        m->unseen = unseen;
        cpudrv_obj_publish(&m->o);
        *handle = (CUmemGenericAllocationHandle)(uintptr_t)m;
    }
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- reservations */

// cpudrv_big held: 1 and the reservation containing p, else 0.
int cpudrv_vmm_reservation(uintptr_t p, uintptr_t *base, size_t *size)
{
    for (size_t i = 0; i < nresv; i++)
        if (p - resv[i].base < resv[i].size) {
            *base = resv[i].base;
            *size = resv[i].size;
            return 1;
        }
    return 0;
}

// Inaccessible, uncommitted address space of size bytes aligned to align, at hint when
// that is aligned and free; NULL if there is none.
static void *reserve_va(size_t size, size_t align, uintptr_t hint)
{
    int fl = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;
    if (hint && hint % align == 0) {
        void *p = mmap((void *)hint, size, PROT_NONE, fl | MAP_FIXED_NOREPLACE, -1, 0);
        if (p == (void *)hint) return p;
        if (p != MAP_FAILED) munmap(p, size); // a kernel that took it as a mere hint
    }
    void *far = cpudrv_far_map(size, align, PROT_NONE, fl, -1);
    if (far) return far;
    if (size > SIZE_MAX - align) return NULL;
    unsigned char *p = mmap(NULL, size + align, PROT_NONE, fl, -1, 0);
    if (p == MAP_FAILED) return NULL;
    size_t head = (align - (uintptr_t)p % align) % align;
    if (head) munmap(p, head);
    if (align - head) munmap(p + head + size, align - head);
    return p + head;
}

// Reserves size bytes of addresses (a multiple of the granularity), aligned to alignment
// (0 or a power of two; at least the granularity is used); addr is a hint.
CUresult cuMemAddressReserve(CUdeviceptr *ptr, size_t size, size_t alignment, CUdeviceptr addr,
                             unsigned long long flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!ptr || !size || size % GRANULE || flags || (alignment & (alignment - 1)))
        return TR(CUDA_ERROR_INVALID_VALUE);
    size_t align = alignment > GRANULE ? alignment : GRANULE;
    cpudrv_lock();
    if (nresv == capresv) {
        size_t cap = capresv ? capresv * 2 : 16;
        struct reservation *n = realloc(resv, cap * sizeof *n);
        if (n) {
            resv = n;
            capresv = cap;
        }
    }
    void *p = nresv < capresv ? reserve_va(size, align, (uintptr_t)addr) : NULL;
    if (p) {
        resv[nresv].base = (uintptr_t)p;
        resv[nresv].size = size;
        nresv++;
        *ptr = (CUdeviceptr)(uintptr_t)p;
    } else {
        rc = CUDA_ERROR_OUT_OF_MEMORY;
    }
    cpudrv_unlock();
    return TR(rc);
}

// Frees a whole reservation (exactly as reserved) that nothing is mapped in any more;
// its addresses return to the system once work queued before has run.
CUresult cuMemAddressFree(CUdeviceptr ptr, size_t size)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    cpudrv_lock();
    size_t i = 0;
    while (i < nresv && resv[i].base != (uintptr_t)ptr)
        i++;
    // cuda.h does not say what a reservation with mappings left gives: refused.
    if (i == nresv || resv[i].size != size || cpudrv_mem_overlap(resv[i].base, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        cpudrv_mem_unmap_later((void *)resv[i].base, size);
        resv[i] = resv[--nresv];
    }
    cpudrv_unlock();
    return TR(rc);
}

/* ---------------------------------------------------------------- mappings */

// Puts private anonymous memory at [p, p+n): addresses that are no mapping any more.
static void blank(uintptr_t p, size_t n)
{
    mmap((void *)p, n, PROT_READ | PROT_WRITE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
}

// Maps size bytes of the allocation (from its start) at ptr, inside one reservation and
// over no other mapping; nothing can access it until cuMemSetAccess.
CUresult cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                  unsigned long long flags)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    uintptr_t p = (uintptr_t)ptr, rbase;
    size_t rsize;
    // The real driver also takes offset 0 only ("currently must be zero").
    if (!size || size % GRANULE || p % GRANULE || offset || flags)
        return TR(CUDA_ERROR_INVALID_VALUE);
    cpudrv_lock();
    struct cpudrv_physmem *m = physmem_find(handle);
    if (!m || size > m->size || !cpudrv_vmm_reservation(p, &rbase, &rsize) ||
        size > rsize - (p - rbase) || cpudrv_mem_overlap(p, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
        goto out;
    }
    if (mremap(m->pages, 0, size, MREMAP_MAYMOVE | MREMAP_FIXED, (void *)p) == MAP_FAILED) {
        blank(p, size);
        rc = CUDA_ERROR_OUT_OF_MEMORY;
        goto out;
    }
    struct cpudrv_range r = {0};
    r.base = p;
    r.size = size;
    r.type = CPUDRV_MEM_MAPPED;
    r.dev = m->dev;
    r.id = cpudrv_next_id();
    r.phys = m;
    rc = cpudrv_mem_add(&r);
    if (rc)
        blank(p, size);
    else
        cpudrv_obj_ref(&m->o); // the mapping's
out:
    cpudrv_unlock();
    return TR(rc);
}

// cpudrv_big held: the number of mappings that cover [p, p+n) exactly, one after the
// other with no gap; 0 if they do not.
static size_t whole_mappings(uintptr_t p, size_t n)
{
    size_t count = 0;
    uintptr_t at = p;
    while (n && at - p < n) {
        const struct cpudrv_range *r = cpudrv_mem_at(at);
        if (!r || r->type != CPUDRV_MEM_MAPPED || r->freeing || r->size > n - (at - p)) return 0;
        at += r->size;
        count++;
    }
    return count;
}

// Unmaps whole mappings covering [ptr, ptr+size) exactly (one, or several that follow
// each other). Synchronous, as cuda.h notes: work queued before that may use them runs
// first. An allocation released and mapped nowhere else goes with its last mapping.
// cpudrv_big held: 1 if [p, p+n) lies in one reservation and no mapping touches it.
static int reserved_unmapped(uintptr_t p, size_t n)
{
    int inside = 0;
    for (size_t i = 0; i < nresv && !inside; i++)
        inside = p >= resv[i].base && n <= resv[i].size && p - resv[i].base <= resv[i].size - n;
    if (!inside || n % GRANULE || p % GRANULE) return 0;
    for (uintptr_t at = p; at - p < n; at += GRANULE)
        if (cpudrv_mem_find(at)) return 0;
    return 1;
}

CUresult cuMemUnmap(CUdeviceptr ptr, size_t size)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    uintptr_t p = (uintptr_t)ptr, lo = p;
    cpudrv_lock();
    // Reserved addresses with nothing mapped: nothing to do, and no error (driver 580).
    if (size && reserved_unmapped(p, size)) {
        cpudrv_unlock();
        return TR(CUDA_SUCCESS);
    }
    if (!whole_mappings(p, size)) {
        cpudrv_unlock();
        return TR(CUDA_ERROR_INVALID_VALUE);
    }
    // The mappings stay usable until queued work is done, but no other VMM call may take
    // them meanwhile.
    for (uintptr_t at = p; at - p < size; at += cpudrv_mem_at(at)->size)
        cpudrv_mem_at(at)->freeing = 1;
    // Work may reach them from a mapping just before them (one span): it counts too.
    const struct cpudrv_range *prev;
    while ((prev = cpudrv_mem_find(lo - 1)) && prev->type == CPUDRV_MEM_MAPPED &&
           prev->base + prev->size == lo)
        lo = prev->base;
    struct cpudrv_dep *deps = NULL;
    unsigned n = 0, cap = 0;
    int err = cpudrv_stream_snapshot_touching(lo, p + size, &deps, &n, &cap);
    cpudrv_unlock();
    cpudrv_deps_wait_release(deps, n);
    cpudrv_lock();
    for (uintptr_t at = p; at - p < size;) {
        struct cpudrv_range *r = cpudrv_mem_at(at);
        struct cpudrv_physmem *m = r->phys;
        size_t len = r->size;
        blank(at, len);
        cpudrv_mem_remove(at);
        cpudrv_obj_put(&m->o); // may release m
        at += len;
    }
    cpudrv_unlock();
    // Without room to note all the work (out of memory) the unmap happened regardless.
    return TR(err ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS);
}

// INVALID_DEVICE unless loc is a device of this machine; INVALID_VALUE for a host.
static CUresult device_location(const CUmemLocation *loc)
{
    if (loc->type != CU_MEM_LOCATION_TYPE_DEVICE) return CUDA_ERROR_INVALID_VALUE;
    if (loc->id < 0 || loc->id >= cpudrv_ndev) return CUDA_ERROR_INVALID_DEVICE;
    return CUDA_SUCCESS;
}

// Sets the access of devices to whole mappings covering [ptr, ptr+size) (all the list or
// nothing). Read-only access is recorded and reported, but lets kernels write.
CUresult cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc *desc, size_t count)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!desc || !count) return TR(CUDA_ERROR_INVALID_VALUE);
    for (size_t i = 0; i < count && !rc; i++) {
        rc = device_location(&desc[i].location);
        if (!rc && desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_NONE &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            rc = CUDA_ERROR_INVALID_VALUE;
    }
    if (rc) return TR(rc);
    uintptr_t p = (uintptr_t)ptr;
    cpudrv_lock();
    if (!whole_mappings(p, size)) {
        rc = CUDA_ERROR_INVALID_VALUE;
    } else {
        for (uintptr_t at = p; at - p < size;) {
            struct cpudrv_range *r = cpudrv_mem_at(at);
            for (size_t i = 0; i < count; i++)
                r->access[desc[i].location.id] = (unsigned char)desc[i].flags;
            at += r->size;
        }
    }
    cpudrv_unlock();
    return TR(rc);
}

// The access a device has to the mapping containing ptr.
CUresult cuMemGetAccess(unsigned long long *flags, const CUmemLocation *location, CUdeviceptr ptr)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!flags || !location) return TR(CUDA_ERROR_INVALID_VALUE);
    rc = device_location(location);
    if (rc) return TR(rc);
    cpudrv_lock();
    const struct cpudrv_range *r = cpudrv_mem_find((uintptr_t)ptr);
    if (!r || r->type != CPUDRV_MEM_MAPPED || r->freeing)
        rc = CUDA_ERROR_INVALID_VALUE;
    else
        *flags = r->access[location->id];
    cpudrv_unlock();
    return TR(rc);
}

// MPSSHIM_CPUDRV_NO_VMM=1: a device without the virtual memory calls (as some GPUs and
// drivers are): its attribute reads 0 and cuMemCreate answers CUDA_ERROR_NOT_SUPPORTED.
int cpudrv_no_vmm(void)
{
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("MPSSHIM_CPUDRV_NO_VMM");
        v = e && atoi(e) != 0;
    }
    return v;
}
