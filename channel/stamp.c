/* See stamp.h. */
#include "channel/stamp.h"

#ifdef MPSSHIM_STAMPS
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

/* 2^21 stamps (48 MiB of address space, touched as they are written): a benchmark's
 * hundreds of thousands of round trips; later ones are dropped, never waited for. */
#define STAMPS_MAX (1u << 21)

static struct chan_stamp *stamps;
static _Atomic uint32_t taken; /* slots handed out */
/* Slots written. A flush writes the first `filled`: a stamp another thread is writing at
 * that moment (a worker of another client, in the server) may be left out or half there. */
static _Atomic uint32_t filled;
static uint32_t written; /* slots in the file, under flush_lock */
static pthread_mutex_t flush_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void map(void)
{
    void *p = mmap(NULL, (size_t)STAMPS_MAX * sizeof(struct chan_stamp), PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    stamps = p == MAP_FAILED ? NULL : p;
}

void chan_stamp(enum chan_stamp_kind kind, uint32_t pid, uint16_t op, uint64_t pos, uint64_t ns)
{
    pthread_once(&once, map);
    uint32_t i = atomic_fetch_add_explicit(&taken, 1, memory_order_relaxed);
    if (!stamps || i >= STAMPS_MAX) return;
    stamps[i] =
        (struct chan_stamp){.ns = ns, .pos = pos, .pid = pid, .kind = (uint16_t)kind, .op = op};
    atomic_fetch_add_explicit(&filled, 1, memory_order_release);
}

void chan_stamp_flush(void)
{
    pthread_mutex_lock(&flush_lock);
    uint32_t n = atomic_load_explicit(&filled, memory_order_acquire);
    uint32_t t = atomic_load_explicit(&taken, memory_order_relaxed);
    if (n > t) n = t;
    if (n > STAMPS_MAX) n = STAMPS_MAX;
    if (stamps && n > written) {
        char path[96];
        (void)mkdir("/tmp/mpsshim-stamps", 0777);
        snprintf(path, sizeof(path), "/tmp/mpsshim-stamps/%d.bin", (int)getpid());
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd >= 0) {
            const char *p = (const char *)(stamps + written);
            size_t left = (size_t)(n - written) * sizeof(struct chan_stamp);
            while (left) {
                ssize_t w = write(fd, p, left);
                if (w <= 0) break;
                p += w;
                left -= (size_t)w;
            }
            close(fd);
            written = n;
        }
    }
    pthread_mutex_unlock(&flush_lock);
}

__attribute__((destructor)) static void flush_at_exit(void)
{
    chan_stamp_flush();
}
#endif
