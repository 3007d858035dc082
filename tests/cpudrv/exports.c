// Every symbol the real driver exports exists here too: those this driver does not
// implement as weak functions answering CUDA_ERROR_NOT_SUPPORTED (the implemented ones
// replace them when the library is linked). A real driver's cuGetProcAddress hands out only
// exported symbols, and so does this one's (procaddr.c), from this table.
//
// The generated name table of the shim (build/gen/shim_symtab.c) is compiled here with
// entries of our own: its header is skipped, and its macros make the weak functions.
#define MPSSHIM_SYMTAB_H
#include <stddef.h>

#include "cpudrv_exports.h"

#pragma GCC diagnostic ignored "-Wmissing-prototypes"
#define SHIM_SYMTAB_DECL(NAME)                                                                     \
    __attribute__((weak)) int NAME(void);                                                          \
    __attribute__((weak)) int NAME(void)                                                           \
    {                                                                                              \
        return 801; /* CUDA_ERROR_NOT_SUPPORTED */                                                 \
    }
#define SHIM_SYMTAB_ENTRY(NAME) {#NAME, (void *)NAME}
#define shim_symtab cpudrv_exports
#define shim_nsymtab cpudrv_nexports

#include "shim_symtab.c"
