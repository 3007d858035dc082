// Where this driver puts its own mappings (device storage, reserved device addresses, the
// host view of physical memory): far from where processes' own mappings land, as the real
// driver keeps its address ranges apart. In a server every client's cuMemHostRegister maps
// the client's pages at the client's own address; a mapping of ours placed where the kernel
// likes (mmap(NULL): below the stack, randomised over a TiB, as the clients' own heaps and
// mmaps are) could sit on those addresses by chance, and the client's registration was then
// refused (seen in CI: codegate's whole_wait, CUDA_ERROR_NOT_SUPPORTED, once in hundreds of
// runs). The region only grows (a test driver's life is short); past its end, or where
// something else holds an address, the kernel places the mapping as before.
#include "cpudrv.h"

#include <errno.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#define FAR_BASE 0x300000000000ull /* 48 TiB: below the server's window (0x6000...) */
#define FAR_END 0x400000000000ull

static pthread_mutex_t far_lock = PTHREAD_MUTEX_INITIALIZER;
static uintptr_t far_next = FAR_BASE;

void *cpudrv_far_map(size_t len, size_t align, int prot, int flags, int fd)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    if (align < page) align = page;
    for (int tries = 0; tries < 16; tries++) {
        pthread_mutex_lock(&far_lock);
        uintptr_t at = (far_next + align - 1) & ~(uintptr_t)(align - 1);
        int room = at >= far_next && at < FAR_END && len < FAR_END - at - page;
        if (room) far_next = at + len + page; /* a gap: one past the end is no mapping */
        pthread_mutex_unlock(&far_lock);
        if (!room) break;
        void *p = mmap((void *)at, len, prot, flags | MAP_FIXED_NOREPLACE, fd, 0);
        if (p == (void *)at) return p;
        if (p != MAP_FAILED)
            munmap(p, len); // an old kernel took the address as a hint
        else if (errno != EEXIST)
            break;
    }
    return NULL;
}
