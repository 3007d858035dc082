/* Image sizes; see image.h. */
#include "channel/image.h"

#include <elf.h>
#include <stdint.h>
#include <string.h>

struct fatbin_header {
    uint32_t magic;
    uint16_t version;
    uint16_t header_size;
    uint64_t fat_size; /* bytes after the header */
};

/* Bounds check: [off, off+len) within avail (avail 0 = unknown, trusted). */
static int fits(size_t off, size_t len, size_t avail)
{
    return avail == 0 || (off <= avail && len <= avail - off);
}

size_t chan_image_size(const void *image, size_t avail)
{
    const uint8_t *p = image;
    if (!p || !fits(0, 4, avail))
        return 0;
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == CHAN_FATBIN_MAGIC) {
        struct fatbin_header h;
        if (!fits(0, sizeof(h), avail))
            return 0;
        memcpy(&h, p, sizeof(h));
        size_t n = (size_t)h.header_size + h.fat_size;
        return fits(0, n, avail) ? n : 0;
    }
    if (memcmp(p, ELFMAG, SELFMAG) == 0) {
        Elf64_Ehdr e;
        if (!fits(0, sizeof(e), avail) || p[EI_CLASS] != ELFCLASS64)
            return 0;
        memcpy(&e, p, sizeof(e));
        size_t end = sizeof(e);
        size_t sh_end = e.e_shoff + (size_t)e.e_shnum * e.e_shentsize;
        size_t ph_end = e.e_phoff + (size_t)e.e_phnum * e.e_phentsize;
        if (e.e_shoff && sh_end > end)
            end = sh_end;
        if (e.e_phoff && ph_end > end)
            end = ph_end;
        if (!fits(0, end, avail) || (e.e_shoff && e.e_shentsize < sizeof(Elf64_Shdr)))
            return 0;
        for (unsigned i = 0; e.e_shoff && i < e.e_shnum; i++) {
            Elf64_Shdr s;
            memcpy(&s, p + e.e_shoff + (size_t)i * e.e_shentsize, sizeof(s));
            if (s.sh_type != SHT_NOBITS && s.sh_offset + s.sh_size > end)
                end = s.sh_offset + s.sh_size;
        }
        return fits(0, end, avail) ? end : 0;
    }
    /* PTX (text): up to and including the NUL. */
    if (avail == 0)
        return strlen((const char *)p) + 1;
    const void *nul = memchr(p, 0, avail);
    return nul ? (size_t)((const uint8_t *)nul - p) + 1 : 0;
}

enum chan_jit_kind chan_jit_kind(CUjit_option option)
{
    switch (option) {
    case CU_JIT_INFO_LOG_BUFFER: return CHAN_JIT_INFO_LOG;
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES: return CHAN_JIT_INFO_LOG_SIZE;
    case CU_JIT_ERROR_LOG_BUFFER: return CHAN_JIT_ERROR_LOG;
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES: return CHAN_JIT_ERROR_LOG_SIZE;
    case CU_JIT_WALL_TIME: return CHAN_JIT_WALL_TIME;
    case CU_JIT_GLOBAL_SYMBOL_NAMES:
    case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
    case CU_JIT_GLOBAL_SYMBOL_COUNT:
    case CU_JIT_REFERENCED_KERNEL_NAMES:
    case CU_JIT_REFERENCED_KERNEL_COUNT:
    case CU_JIT_REFERENCED_VARIABLE_NAMES:
    case CU_JIT_REFERENCED_VARIABLE_COUNT:
    case CU_JIT_OVERRIDE_DIRECTIVE_VALUES: return CHAN_JIT_POINTER;
    default: return CHAN_JIT_VALUE;
    }
}
