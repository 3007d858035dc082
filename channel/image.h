/* Sizes of the code images the driver API passes without one (PTX text, ELF cubins, fat
 * binaries): the client needs it to upload an image, the server to check that an upload
 * holds the whole image before the driver reads it. */
#ifndef MPSSHIM_IMAGE_H
#define MPSSHIM_IMAGE_H

#include <stddef.h>
#include <cuda.h>

#define CHAN_FATBIN_MAGIC 0xBA55ED50u
#define CHAN_FATBIN_WRAPPER_MAGIC 0x466243b1u

/* The size of the image at `p`. With `avail` (bytes known readable), never reads past it
 * and returns 0 when the image would not fit; with avail 0, trusts the image. */
size_t chan_image_size(const void *p, size_t avail);

/* How a JIT option of a module or library load travels. Most options are plain values
 * (ints, enums, floats in the pointer's bits); the log buffers are the caller's memory, so
 * the server loads with buffers of its own, of the sizes the caller gave, and the client
 * copies the logs back; the wall time is an output; the rest carry pointers into the
 * caller's memory (symbol tables, directive values, with their counts), which the server
 * never follows: the client refuses them, the server drops them. */
enum chan_jit_kind {
    CHAN_JIT_VALUE = 0,
    CHAN_JIT_INFO_LOG,       /* CU_JIT_INFO_LOG_BUFFER */
    CHAN_JIT_INFO_LOG_SIZE,  /* CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES */
    CHAN_JIT_ERROR_LOG,      /* CU_JIT_ERROR_LOG_BUFFER */
    CHAN_JIT_ERROR_LOG_SIZE, /* CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES */
    CHAN_JIT_WALL_TIME,      /* CU_JIT_WALL_TIME */
    CHAN_JIT_POINTER,        /* anything else that points into the caller */
};
enum chan_jit_kind chan_jit_kind(CUjit_option option);

#endif
