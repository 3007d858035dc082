/* libFuzzer target: the image parsers (ELF, fat binary, PTX) that size what a client
 * uploads before the driver reads it. Whatever the bytes, the size found must lie within
 * them, and finding it must read nothing outside them. */
#include "channel/image.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0; /* avail 0 means "trusted, unknown size": the client's own images only */
    uint8_t *copy = malloc(size);
    if (!copy) return 0;
    memcpy(copy, data, size);
    size_t n = chan_image_size(copy, size);
    if (n > size) abort(); /* an image larger than what was sent would be read past its end */
    free(copy);
    return 0;
}
