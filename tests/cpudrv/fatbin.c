// Image formats: recognises PTX text, a cubin, a fat binary or a __fatBinC_Wrapper_t and
// hands the right part to the PTX or ELF reader.
//
// Fat binary layout (little endian): header {u32 magic 0xBA55ED50, u16 version, u16
// header size, u64 size of the entries}; then entries {u16 kind (1 PTX, 2 ELF), u16
// version, u32 header size, u64 payload size, u32 compressed size, ..., u64 flags at
// offset 40} each followed by its payload. Compressed entries are not supported.
#include "cpudrv.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define FATBIN_MAGIC 0xBA55ED50u
#define WRAPPER_MAGIC 0x466243b1u
#define KIND_PTX 1
#define KIND_ELF 2
#define FLAG_COMPRESSED 0x2000u
#define MAX_FATBIN (1ull << 30)

// 1 if [p, p+n) is mapped memory (images given without a length are checked with this).
int cpudrv_readable(const void *p, size_t n)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t lo = (uintptr_t)p & ~(page - 1);
    if (!p || (uintptr_t)p > UINTPTR_MAX - n) return 0;
    unsigned char vec[64];
    // mincore fails with ENOMEM on any unmapped page; check in chunks of 64 pages.
    for (uintptr_t a = lo; a < (uintptr_t)p + n; a += 64 * page) {
        size_t len = (uintptr_t)p + n - a < 64 * page ? (uintptr_t)p + n - a : 64 * page;
        if (mincore((void *)a, len, vec) != 0) return 0;
    }
    return 1;
}

// Length of a NUL-terminated string that may end at an unmapped page (-1 then).
static long safe_strlen(const char *p)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    size_t n = 0;
    for (;;) {
        uintptr_t a = (uintptr_t)(p + n);
        size_t room = page - (a & (page - 1));
        if (!cpudrv_readable(p + n, 1)) return -1;
        const char *z = memchr(p + n, 0, room);
        if (z) return (long)(z - p);
        n += room;
        if (n > MAX_FATBIN) return -1;
    }
}

// Frees what a parse allocated and empties the image.
void cpudrv_image_free(struct cpudrv_image *img)
{
    for (unsigned i = 0; i < img->nk; i++) {
        free(img->k[i].name);
        free(img->k[i].params);
    }
    for (unsigned i = 0; i < img->ng; i++)
        free(img->g[i].name);
    free(img->k);
    free(img->g);
    memset(img, 0, sizeof *img);
}

static uint32_t rd32(const unsigned char *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static uint64_t rd64(const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return v;
}

static CUresult ptx_bytes(const unsigned char *p, size_t n, struct cpudrv_image *img, char *log,
                          size_t logsz)
{
    char *text = malloc(n + 1);
    if (!text) return CUDA_ERROR_OUT_OF_MEMORY;
    memcpy(text, p, n);
    text[n] = 0;
    CUresult rc = cpudrv_ptx_parse(text, img, log, logsz);
    free(text);
    return rc;
}

static CUresult fatbin(const unsigned char *p, size_t len, struct cpudrv_image *img, char *log,
                       size_t logsz)
{
    uint16_t hsize;
    if ((len && len < 16) || (!len && !cpudrv_readable(p, 16))) return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&hsize, p + 6, 2);
    uint64_t size = rd64(p + 8);
    if (hsize < 16 || size > MAX_FATBIN || (len && hsize + size > len) ||
        (!len && !cpudrv_readable(p, hsize + size))) {
        cpudrv_logf(log, logsz, "fatbin: bad header\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    const unsigned char *elf = NULL, *ptx = NULL;
    uint64_t elflen = 0, ptxlen = 0;
    int compressed = 0;
    for (uint64_t off = hsize; off + 16 <= hsize + size;) {
        const unsigned char *e = p + off;
        uint16_t kind;
        memcpy(&kind, e, 2);
        uint32_t ehs = rd32(e + 4);
        uint64_t plen = rd64(e + 8);
        if (ehs < 16 || ehs > size || plen > size || off + ehs + plen > hsize + size) {
            cpudrv_logf(log, logsz, "fatbin: bad entry at offset %llu\n", (unsigned long long)off);
            return CUDA_ERROR_INVALID_IMAGE;
        }
        int comp = ehs >= 48 && (rd64(e + 40) & FLAG_COMPRESSED);
        if (comp)
            compressed = 1;
        else if (kind == KIND_ELF && !elf)
            elf = e + ehs, elflen = plen;
        else if (kind == KIND_PTX && !ptx)
            ptx = e + ehs, ptxlen = plen;
        off += ehs + plen;
    }
    // As the driver does for a matching GPU, prefer the cubin; fall back to the PTX.
    CUresult rc = CUDA_ERROR_INVALID_IMAGE;
    if (elf && elflen >= sizeof(uint32_t) && memcmp(elf, "\177ELF", 4) == 0)
        rc = cpudrv_elf_parse(elf, elflen, img, log, logsz);
    if (rc && ptx) rc = ptx_bytes(ptx, ptxlen, img, log, logsz);
    if (rc && !elf && !ptx)
        cpudrv_logf(log, logsz,
                    compressed ? "fatbin: compressed entries are not supported\n"
                               : "fatbin: no PTX or cubin entry\n");
    return rc;
}

static int looks_like_text(const unsigned char *p)
{
    for (int i = 0; i < 4; i++) {
        if (!p[i]) return i > 0;
        if (!isprint(p[i]) && !isspace(p[i])) return 0;
    }
    return 1;
}

// fatbin.c: parses any image the driver accepts (PTX, cubin, fatbin, fatbin wrapper).
CUresult cpudrv_image_parse(const void *image, size_t len, struct cpudrv_image *img, char *log,
                            size_t logsz)
{
    const unsigned char *p = image;
    memset(img, 0, sizeof *img);
    if (!p) return CUDA_ERROR_INVALID_VALUE;
    // Without a length, an image is trusted only as far as it is mapped.
    if (!len && !cpudrv_readable(p, 4)) {
        cpudrv_logf(log, logsz, "image address is not mapped\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    // Every binary magic is 4 non-zero bytes: a NUL among them means a short string.
    size_t head = 0;
    while (head < 4 && (!len || head < len) && p[head])
        head++;
    if (head < 4) {
        if (head == 0 || !looks_like_text(p)) {
            cpudrv_logf(log, logsz, "image too short\n");
            return CUDA_ERROR_INVALID_IMAGE;
        }
        return ptx_bytes(p, head, img, log, logsz);
    }
    uint32_t magic = rd32(p);
    if (magic == WRAPPER_MAGIC) {
        const void *data;
        if ((len && len < 16) || (!len && !cpudrv_readable(p, 16))) return CUDA_ERROR_INVALID_IMAGE;
        memcpy(&data, p + 8, sizeof data);
        if (!data || data == image) return CUDA_ERROR_INVALID_IMAGE;
        return cpudrv_image_parse(data, 0, img, log, logsz);
    }
    if (magic == FATBIN_MAGIC) return fatbin(p, len, img, log, logsz);
    if (memcmp(p, "\177ELF", 4) == 0) return cpudrv_elf_parse(p, len, img, log, logsz);
    if (looks_like_text(p)) {
        long n = len ? (long)strnlen((const char *)p, len) : safe_strlen((const char *)p);
        if (n < 0) {
            cpudrv_logf(log, logsz, "PTX text is not NUL-terminated\n");
            return CUDA_ERROR_INVALID_PTX;
        }
        return ptx_bytes(p, (size_t)n, img, log, logsz);
    }
    cpudrv_logf(log, logsz, "unrecognised image format\n");
    return CUDA_ERROR_INVALID_IMAGE;
}

// Reads a whole file; CUDA_ERROR_FILE_NOT_FOUND if it cannot.
CUresult cpudrv_read_file(const char *path, unsigned char **data, size_t *len)
{
    FILE *f = path ? fopen(path, "rb") : NULL;
    if (!f) return CUDA_ERROR_FILE_NOT_FOUND;
    unsigned char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? cap * 2 : 65536;
            unsigned char *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf);
                fclose(f);
                return CUDA_ERROR_OUT_OF_MEMORY;
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    int err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return CUDA_ERROR_FILE_NOT_FOUND;
    }
    buf[n] = 0;
    *data = buf;
    *len = n;
    return CUDA_SUCCESS;
}
