/* libholes.so: a hole between a process's libraries before the shim's constructor runs
 * (tests/clientspace.sh). Preloaded after the shim (LD_PRELOAD="shim libholes.so": glibc
 * runs preloaded objects' constructors last-loaded first), its constructor maps 8 MiB and
 * gives back the middle 2 MiB, as a library's loading can leave one (seen on Ubuntu 24.04).
 * At exit it says whether the hole was filled with a reservation (interpose/spread.c does
 * that where addresses are not randomised) or is still open, in which case a large malloc of
 * every identical process would have gone there, at one address. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#define SPAN (8u << 20)
#define HOLE (2u << 20)

static uintptr_t hole;

__attribute__((constructor)) static void make_hole(void)
{
    char *p = mmap(NULL, SPAN, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return;
    if (munmap(p + HOLE, HOLE) == 0) hole = (uintptr_t)(p + HOLE);
}

__attribute__((destructor)) static void say_hole(void)
{
    if (!hole) {
        fprintf(stderr, "holes: none made\n");
        return;
    }
    FILE *f = fopen("/proc/self/maps", "re");
    char line[512];
    int filled = 0;
    while (f && fgets(line, sizeof line, f)) {
        unsigned long long a, b;
        char perms[8];
        if (sscanf(line, "%llx-%llx %7s", &a, &b, perms) != 3) continue;
        if (a <= hole && b >= hole + HOLE && !strcmp(perms, "---p")) filled = 1;
    }
    if (f) fclose(f);
    fprintf(stderr, "holes: %s at %#llx\n", filled ? "filled" : "open", (unsigned long long)hole);
}
