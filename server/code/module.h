/* module.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_MODULE_H
#define MPSSHIM_SERVER_MODULE_H

#include "server/core/server.h"

/* Fills a chan_function and its layout for a function or kernel at `out` (room bytes);
 * returns bytes written, 0 on failure with *err (module.c). */
uint32_t srv_func_describe(struct srv_client *c, uint64_t h, int is_kernel, uint8_t *out,
                           uint32_t room, CUresult *err);

#endif
