/* The hidden export tables of cuGetExportTable, which cudart (and the libraries built on it)
 * asks the driver for by 16-byte UUID. Each family lives in a file of its own
 * (export_tables.c: the dispatch and the small tables; export_cls.c: context-local storage;
 * export_integrity.c: the integrity check; export_tools_context.c: the tools context table
 * of cuBLAS and friends; export_tools_module.c: cuFFT's module walk); this header is what they
 * share. shared/data/export-tables.md lists the tables, their first words and what must work. */
#ifndef MPSSHIM_EXPORT_TABLES_H
#define MPSSHIM_EXPORT_TABLES_H

#include <cuda.h>
#include <stdint.h>

/* Tables are arrays of words: most start with their own size in bytes, then the function
 * slots, numbered from 1. Read-only after load: nothing guards them. */
extern const void *const shim_export_cudart[];    /* CUDART_INTERFACE, export_tables.c */
extern const void *const shim_export_cls[];       /* CONTEXT_LOCAL_STORAGE, export_cls.c */
extern const void *const shim_export_integrity[]; /* INTEGRITY_CHECK, export_integrity.c */

extern const void *const shim_export_tools_context[]; /* TOOLS_CONTEXT, export_tools_context.c */
extern const void *const shim_export_tools_module[];  /* TOOLS_MODULE, export_tools_module.c */

/* What a slot whose purpose nobody has published does when called: logs "<table> slot
 * <slot>" once and returns CUDA_ERROR_NOT_SUPPORTED (safer than a NULL slot, which crashes
 * the caller, or a success that leaves its outputs unwritten). */
CUresult shim_export_unserved(const char *table, int slot);

/* The first word of most tables: their size in bytes. */
#define TABLE_BYTES(nwords) ((const void *)(uintptr_t)((nwords) * sizeof(void *)))

/* Defines the function of a slot whose purpose is not known: it says so once if called. */
#define UNSERVED(prefix, table, slot)                                                              \
    static CUresult prefix##_slot##slot(void)                                                      \
    {                                                                                              \
        return shim_export_unserved(table, slot);                                                  \
    }

#endif
