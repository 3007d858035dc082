// Name -> function of every symbol this driver exports (exports.c), sorted by name.
#ifndef CPUDRV_EXPORTS_H
#define CPUDRV_EXPORTS_H

#include <stddef.h>

struct shim_sym {
    const char *name;
    void *fn;
};

extern const struct shim_sym cpudrv_exports[];
extern const size_t cpudrv_nexports;

#endif
