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

/* *end = off + n * size, or -1 when that does not fit in 64 bits: every offset and count
 * below comes from the image, which a client made up. */
static int table_end(uint64_t off, uint64_t n, uint64_t size, uint64_t *end)
{
    uint64_t bytes;
    return __builtin_mul_overflow(n, size, &bytes) || __builtin_add_overflow(off, bytes, end) ? -1
                                                                                              : 0;
}

/* The bytes an ELF image spans: its header, program and section header tables and every
 * section with contents; 0 when any of it overflows or lies beyond avail. */
static size_t elf_size(const uint8_t *p, size_t avail)
{
    Elf64_Ehdr e;
    if (!fits(0, sizeof(e), avail) || p[EI_CLASS] != ELFCLASS64) return 0;
    memcpy(&e, p, sizeof(e));
    uint64_t end = sizeof(e), sh_end = 0, ph_end = 0;
    if (e.e_shoff && (e.e_shentsize < sizeof(Elf64_Shdr) ||
                      table_end(e.e_shoff, e.e_shnum, e.e_shentsize, &sh_end) != 0))
        return 0;
    if (e.e_phoff && table_end(e.e_phoff, e.e_phnum, e.e_phentsize, &ph_end) != 0) return 0;
    end = sh_end > end ? sh_end : end;
    end = ph_end > end ? ph_end : end;
    if (end > SIZE_MAX || !fits(0, (size_t)end, avail)) return 0;
    for (unsigned i = 0; e.e_shoff && i < e.e_shnum; i++) {
        Elf64_Shdr s;
        memcpy(&s, p + e.e_shoff + (uint64_t)i * e.e_shentsize, sizeof(s));
        uint64_t s_end;
        if (s.sh_type == SHT_NOBITS) continue;
        if (__builtin_add_overflow(s.sh_offset, s.sh_size, &s_end)) return 0;
        end = s_end > end ? s_end : end;
    }
    return end <= SIZE_MAX && fits(0, (size_t)end, avail) ? (size_t)end : 0;
}

size_t chan_image_size(const void *image, size_t avail)
{
    const uint8_t *p = image;
    if (!p || !fits(0, 4, avail)) return 0;
    uint32_t magic;
    memcpy(&magic, p, 4);
    if (magic == CHAN_FATBIN_MAGIC) {
        struct fatbin_header h;
        uint64_t n;
        if (!fits(0, sizeof(h), avail)) return 0;
        memcpy(&h, p, sizeof(h));
        if (h.header_size < sizeof(h) || __builtin_add_overflow(h.header_size, h.fat_size, &n) ||
            n > SIZE_MAX)
            return 0;
        return fits(0, (size_t)n, avail) ? (size_t)n : 0;
    }
    if (memcmp(p, ELFMAG, SELFMAG) == 0) return elf_size(p, avail);
    /* PTX (text): up to and including the NUL. */
    if (avail == 0) return strlen((const char *)p) + 1;
    const void *nul = memchr(p, 0, avail);
    return nul ? (size_t)((const uint8_t *)nul - p) + 1 : 0;
}

enum chan_jit_kind chan_jit_kind(CUjit_option option)
{
    switch (option) {
    case CU_JIT_INFO_LOG_BUFFER:
        return CHAN_JIT_INFO_LOG;
    case CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES:
        return CHAN_JIT_INFO_LOG_SIZE;
    case CU_JIT_ERROR_LOG_BUFFER:
        return CHAN_JIT_ERROR_LOG;
    case CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES:
        return CHAN_JIT_ERROR_LOG_SIZE;
    case CU_JIT_WALL_TIME:
        return CHAN_JIT_WALL_TIME;
    case CU_JIT_GLOBAL_SYMBOL_NAMES:
    case CU_JIT_GLOBAL_SYMBOL_ADDRESSES:
    case CU_JIT_GLOBAL_SYMBOL_COUNT:
    case CU_JIT_REFERENCED_KERNEL_NAMES:
    case CU_JIT_REFERENCED_KERNEL_COUNT:
    case CU_JIT_REFERENCED_VARIABLE_NAMES:
    case CU_JIT_REFERENCED_VARIABLE_COUNT:
    case CU_JIT_OVERRIDE_DIRECTIVE_VALUES:
        return CHAN_JIT_POINTER;
    default:
        return CHAN_JIT_VALUE;
    }
}
