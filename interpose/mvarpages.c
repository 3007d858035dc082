/* The host copies of __managed__ variables (mvars.c says why they exist): private pages
 * mapped here at each variable's device address, MAP_FIXED_NOREPLACE, so that an address
 * already taken in this process refuses the variable. Variables on one page share it; its
 * pages go with the last variable on them. Callers hold mvars.c's lock, which guards the
 * pages too. */
#define _GNU_SOURCE
#include "interpose/shim.h"

#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

/* Pages of host copies mapped here: variables on one page share it. refs: the variables
 * that overlap it; its pages go with the last. */
struct shadow {
    uint64_t start, end;
    unsigned refs;
};

static struct shadow *shadows;
static size_t nshadows, capshadows;

static uint64_t page_size(void)
{
    static uint64_t pg;
    if (!pg) pg = (uint64_t)sysconf(_SC_PAGESIZE);
    return pg;
}

/* The pages [*start, *end) holding [base, base + size); -1 if they wrap. */
static int span_pages(uint64_t base, uint64_t size, uint64_t *start, uint64_t *end)
{
    uint64_t pg = page_size(), stop;
    if (__builtin_add_overflow(base, size, &stop) || __builtin_add_overflow(stop, pg - 1, &stop))
        return -1;
    *start = base & ~(pg - 1);
    *end = stop & ~(pg - 1);
    return 0;
}

static void drop_shadow(size_t i)
{
    munmap((void *)(uintptr_t)shadows[i].start, shadows[i].end - shadows[i].start);
    shadows[i] = shadows[--nshadows];
}

/* Maps whatever of [start, end) no host copy maps yet and counts one more variable on all
 * of it; -1 (nothing changed) when an address is taken here or memory runs out. */
static int map_span(uint64_t start, uint64_t end)
{
    size_t first_new = nshadows;
    for (uint64_t at = start; at < end;) {
        /* The next mapped piece at or after `at`. */
        uint64_t next = end;
        int inside = 0;
        for (size_t i = 0; i < first_new; i++) {
            if (shadows[i].start <= at && at < shadows[i].end) {
                at = shadows[i].end;
                inside = 1;
                break;
            }
            if (shadows[i].start > at && shadows[i].start < next) next = shadows[i].start;
        }
        if (inside) continue;
        void *want = (void *)(uintptr_t)at;
        if (shim_grow((void **)&shadows, &capshadows, nshadows, sizeof(*shadows)) != 0) goto undo;
        void *p = mmap(want, next - at, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
        if (p != want) {
            if (p != MAP_FAILED)
                munmap(p, next - at); /* an old kernel took the address as a hint */
            goto undo;
        }
        shadows[nshadows++] = (struct shadow){.start = at, .end = next};
        at = next;
    }
    for (size_t i = 0; i < nshadows; i++)
        if (shadows[i].start < end && start < shadows[i].end) shadows[i].refs++;
    return 0;
undo:
    while (nshadows > first_new)
        drop_shadow(nshadows - 1);
    return -1;
}

/* One variable less on [start, end): pieces no variable overlaps any more are unmapped. */
static void unmap_span(uint64_t start, uint64_t end)
{
    for (size_t i = nshadows; i-- > 0;)
        if (shadows[i].start < end && start < shadows[i].end && --shadows[i].refs == 0)
            drop_shadow(i);
}

int shim_mvar_map(uint64_t base, uint64_t size)
{
    uint64_t start, end;
    return span_pages(base, size, &start, &end) == 0 ? map_span(start, end) : -1;
}

void shim_mvar_unmap(uint64_t base, uint64_t size)
{
    uint64_t start, end;
    if (span_pages(base, size, &start, &end) == 0) unmap_span(start, end);
}
