/* Sizes of the code images the driver API passes without one (PTX text, ELF cubins, fat
 * binaries): the client needs it to upload an image, the server to check that an upload
 * holds the whole image before the driver reads it. */
#ifndef MPSSHIM_IMAGE_H
#define MPSSHIM_IMAGE_H

#include <stddef.h>

#define CHAN_FATBIN_MAGIC 0xBA55ED50u
#define CHAN_FATBIN_WRAPPER_MAGIC 0x466243b1u

/* The size of the image at `p`. With `avail` (bytes known readable), never reads past it
 * and returns 0 when the image would not fit; with avail 0, trusts the image. */
size_t chan_image_size(const void *p, size_t avail);

#endif
