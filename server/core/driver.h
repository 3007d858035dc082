/* The real driver, loaded by absolute path (or the loader's search) into the server only.
 * Every exported driver function is resolved by name into a table indexed by call id, so
 * the server's hand-written code calls them type-checked against cuda.h:
 *     DRV(cuMemAlloc_v2)(&p, n)
 * and a function the loaded driver lacks answers CUDA_ERROR_NOT_SUPPORTED. */
#ifndef MPSSHIM_DRIVER_H
#define MPSSHIM_DRIVER_H

#include "channel/desc.h"

extern void *srv_drv_fns[SHIM_NCALLS];

/* Stands in for any function the loaded driver does not export. All driver functions
 * return CUresult and the ABIs we run on let the caller clean up the arguments. */
CUresult srv_drv_missing(void);

#define DRV(NAME)                                                                                  \
    ((__typeof__(&NAME))(srv_drv_fns[SHIM_ID_##NAME] ? srv_drv_fns[SHIM_ID_##NAME]                 \
                                                     : (void *)srv_drv_missing))

/* The loaded driver's dlopen handle (NULL before srv_drv_load succeeded). */
extern void *srv_drv_handle;

/* Loads the driver: `path` if given, else "libcuda.so.1" through the loader's search.
 * Fills `resolved` with the file actually loaded. 0 on success. */
int srv_drv_load(const char *path, char *resolved, size_t len);

/* Name of an error for logs. */
const char *srv_errname(CUresult r);

/* Sets the server's context for device `dev` current on the calling thread, made first if
 * it is not yet (devctx.c, as the three below). */
CUresult srv_use_device(int dev);
/* Pushes the server's context for device dev (< CHAN_MAX_DEVICES, not checked) over the
 * thread's current one, for what must be made or freed there whatever the call being
 * replayed runs in (another device's context, a green one); srv_pop_device, after a push
 * that succeeded, makes the thread's own current again (so srv_use_device's note of it
 * stays true). */
CUresult srv_push_device(int dev);
void srv_pop_device(void);
/* The whole device's memory in use as the driver counts it (other processes' included),
 * from the calling thread, made current in the device's context: 0, or -1 (also when that
 * context is not made yet: it is not made for this). */
int srv_device_used(int dev, size_t *used);

#endif
