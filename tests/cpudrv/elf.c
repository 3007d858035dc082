// CUDA ELF (cubin): kernels are the entry-point function symbols, globals the object
// symbols in .nv.global* / .nv.constantN sections, and each kernel's parameter layout
// comes from the EIATTR_KPARAM_INFO records of its .nv.info.<kernel> section.
#include "cpudrv.h"

#include <elf.h>
#include <stdlib.h>
#include <string.h>

#ifndef EM_CUDA
#define EM_CUDA 190
#endif
#define STO_CUDA_ENTRY 0x10
/* A __managed__ variable's symbol in .nv.global (seen in nvcc 13.0's cubins, where a
 * __device__ variable beside it has 0). */
#define STO_CUDA_MANAGED 0x4
#define EIFMT_NVAL 1
#define EIFMT_BVAL 2
#define EIFMT_HVAL 3
#define EIFMT_SVAL 4
#define EIATTR_KPARAM_INFO 0x17
#define EIATTR_CBANK_PARAM_SIZE 0x19
#define MAX_IMAGE (1ull << 30)

struct elf {
    const unsigned char *p;
    size_t len;
    const Elf64_Shdr *sh;
    unsigned nsh;
    const char *shstr;
    size_t shstrlen;
};

static const char *sec_name(const struct elf *e, const Elf64_Shdr *s)
{
    if (s->sh_name >= e->shstrlen) return "";
    return e->shstr + s->sh_name;
}

static int in_image(const struct elf *e, uint64_t off, uint64_t n)
{
    return off <= e->len && n <= e->len - off;
}

// Reads the KPARAM_INFO records of one .nv.info.<kernel> section into k (a kernel without
// parameters has the section but no records); leaves k unknown if anything looks odd.
static void kparams(const struct elf *e, const Elf64_Shdr *s, struct cpudrv_img_kernel *k)
{
    const unsigned char *b = e->p + s->sh_offset;
    size_t n = s->sh_size, i = 0;
    struct cpudrv_param *ps = NULL;
    unsigned np = 0, total = 0;
    int ok = 1;
    while (ok && i + 4 <= n) {
        unsigned fmt = b[i], attr = b[i + 1];
        uint16_t v;
        memcpy(&v, b + i + 2, 2);
        if (fmt == EIFMT_NVAL || fmt == EIFMT_BVAL || fmt == EIFMT_HVAL) {
            // Records without a size field fill one 4-byte word.
            if (fmt == EIFMT_HVAL && attr == EIATTR_CBANK_PARAM_SIZE) total = v;
            i += 4;
        } else if (fmt == EIFMT_SVAL) {
            if (i + 4 + v > n) {
                ok = 0;
                break;
            }
            if (attr == EIATTR_KPARAM_INFO && v == 12) {
                uint16_t ord, off;
                uint32_t bits;
                memcpy(&ord, b + i + 8, 2);
                memcpy(&off, b + i + 10, 2);
                memcpy(&bits, b + i + 12, 4);
                if (ord >= 4096) {
                    ok = 0;
                    break;
                }
                if (ord >= np) {
                    struct cpudrv_param *q = realloc(ps, (ord + 1u) * sizeof *q);
                    if (!q) {
                        ok = 0;
                        break;
                    }
                    memset(q + np, 0xff, (ord + 1u - np) * sizeof *q);
                    ps = q;
                    np = ord + 1u;
                }
                ps[ord].off = off;
                ps[ord].size = (bits >> 18) & 0x3fff;
            }
            i += 4 + v;
        } else {
            ok = 0; // an unknown encoding: its length is unknown too
        }
    }
    // Every ordinal present once, in increasing, non-overlapping order, inside the bank.
    for (unsigned j = 0; ok && j < np; j++)
        if (ps[j].size == 0xffffffffu || (j && ps[j].off < ps[j - 1].off + ps[j - 1].size) ||
            (total && ps[j].off + ps[j].size > total))
            ok = 0;
    if (!ok) {
        free(ps);
        return;
    }
    k->params = ps;
    k->nparams = np;
    k->have_params = 1;
}

static int add_kernel(struct cpudrv_image *img, const char *name)
{
    struct cpudrv_img_kernel *k = realloc(img->k, (img->nk + 1) * sizeof *k);
    if (!k) return -1;
    img->k = k;
    memset(&img->k[img->nk], 0, sizeof *k);
    img->k[img->nk].name = strdup(name);
    if (!img->k[img->nk].name) return -1;
    img->nk++;
    return 0;
}

static int add_global(struct cpudrv_image *img, const char *name, size_t size,
                      const unsigned char *init, int managed)
{
    struct cpudrv_img_global *g = realloc(img->g, (img->ng + 1) * sizeof *g);
    if (!g) return -1;
    img->g = g;
    g = &img->g[img->ng];
    g->name = strdup(name);
    if (!g->name) return -1;
    g->size = size;
    g->align = size >= 16 ? 16 : size >= 8 ? 8 : size >= 4 ? 4 : size >= 2 ? 2 : 1;
    g->init = init;
    g->managed = managed;
    img->ng++;
    return 0;
}

static int global_section(const char *n)
{
    return strncmp(n, ".nv.global", 10) == 0 ||
           (strncmp(n, ".nv.constant", 12) == 0 && strncmp(n, ".nv.constant0", 13) != 0);
}

static CUresult symbols(const struct elf *e, struct cpudrv_image *img, char *log, size_t logsz)
{
    for (unsigned i = 0; i < e->nsh; i++) {
        const Elf64_Shdr *st = &e->sh[i];
        if (st->sh_type != SHT_SYMTAB) continue;
        if (st->sh_link >= e->nsh || st->sh_entsize != sizeof(Elf64_Sym)) goto bad;
        const Elf64_Shdr *strs = &e->sh[st->sh_link];
        if (strs->sh_type == SHT_NOBITS || strs->sh_type == SHT_NULL) goto bad;
        const char *str = (const char *)e->p + strs->sh_offset;
        size_t nsym = st->sh_size / sizeof(Elf64_Sym);
        for (size_t j = 0; j < nsym; j++) {
            Elf64_Sym sym;
            memcpy(&sym, e->p + st->sh_offset + j * sizeof sym, sizeof sym);
            if (sym.st_name >= strs->sh_size ||
                !memchr(str + sym.st_name, 0, strs->sh_size - sym.st_name))
                goto bad;
            const char *name = str + sym.st_name;
            int type = ELF64_ST_TYPE(sym.st_info);
            if (type == STT_FUNC && (sym.st_other & STO_CUDA_ENTRY)) {
                if (add_kernel(img, name)) return CUDA_ERROR_OUT_OF_MEMORY;
            } else if (type == STT_OBJECT && sym.st_size && sym.st_shndx != SHN_UNDEF &&
                       sym.st_shndx < e->nsh && global_section(sec_name(e, &e->sh[sym.st_shndx]))) {
                const Elf64_Shdr *gs = &e->sh[sym.st_shndx];
                const unsigned char *init = NULL;
                if (gs->sh_type == SHT_NULL) goto bad;
                if (gs->sh_type != SHT_NOBITS) {
                    if (sym.st_value > gs->sh_size || sym.st_size > gs->sh_size - sym.st_value)
                        goto bad;
                    init = e->p + gs->sh_offset + sym.st_value;
                }
                if (add_global(img, name, sym.st_size, init,
                               (sym.st_other & STO_CUDA_MANAGED) != 0))
                    return CUDA_ERROR_OUT_OF_MEMORY;
            }
        }
    }
    for (unsigned i = 0; i < e->nsh; i++) {
        const char *n = sec_name(e, &e->sh[i]);
        if (strncmp(n, ".nv.info.", 9) != 0 || e->sh[i].sh_type == SHT_NOBITS ||
            e->sh[i].sh_type == SHT_NULL)
            continue;
        for (unsigned k = 0; k < img->nk; k++)
            if (strcmp(img->k[k].name, n + 9) == 0 && !img->k[k].have_params)
                kparams(e, &e->sh[i], &img->k[k]);
    }
    return CUDA_SUCCESS;
bad:
    cpudrv_logf(log, logsz, "cubin: corrupt symbol table\n");
    return CUDA_ERROR_INVALID_IMAGE;
}

// elf.c: parses a cubin of len bytes (0: take the size from its headers).
CUresult cpudrv_elf_parse(const unsigned char *p, size_t len, struct cpudrv_image *img, char *log,
                          size_t logsz)
{
    memset(img, 0, sizeof *img);
    Elf64_Ehdr eh;
    if ((len && len < sizeof eh) || (!len && !cpudrv_readable(p, sizeof eh)))
        return CUDA_ERROR_INVALID_IMAGE;
    memcpy(&eh, p, sizeof eh);
    if (eh.e_ident[EI_CLASS] != ELFCLASS64 || eh.e_ident[EI_DATA] != ELFDATA2LSB ||
        eh.e_machine != EM_CUDA || eh.e_shentsize != sizeof(Elf64_Shdr) || !eh.e_shnum ||
        eh.e_shstrndx >= eh.e_shnum) {
        cpudrv_logf(log, logsz, "cubin: not a 64-bit CUDA ELF image\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    uint64_t end = eh.e_shoff + (uint64_t)eh.e_shnum * sizeof(Elf64_Shdr);
    if (eh.e_phnum && eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize > end)
        end = eh.e_phoff + (uint64_t)eh.e_phnum * eh.e_phentsize;
    if (eh.e_shoff > MAX_IMAGE || end > MAX_IMAGE || (len && end > len) ||
        (!len && !cpudrv_readable(p, end))) {
        cpudrv_logf(log, logsz, "cubin: section headers outside the image\n");
        return CUDA_ERROR_INVALID_IMAGE;
    }
    struct elf e = {
        p, len ? len : end, (const Elf64_Shdr *)(const void *)(p + eh.e_shoff), eh.e_shnum, NULL,
        0};
    if (eh.e_shoff % 8) return CUDA_ERROR_INVALID_IMAGE;
    for (unsigned i = 0; i < e.nsh; i++)
        if (e.sh[i].sh_type != SHT_NOBITS && e.sh[i].sh_type != SHT_NULL &&
            !in_image(&e, e.sh[i].sh_offset, e.sh[i].sh_size)) {
            cpudrv_logf(log, logsz, "cubin: section %u outside the image\n", i);
            return CUDA_ERROR_INVALID_IMAGE;
        }
    const Elf64_Shdr *ss = &e.sh[eh.e_shstrndx];
    if (ss->sh_type == SHT_NOBITS || ss->sh_type == SHT_NULL) return CUDA_ERROR_INVALID_IMAGE;
    e.shstr = (const char *)p + ss->sh_offset;
    e.shstrlen = ss->sh_size;
    if (!e.shstrlen || e.shstr[e.shstrlen - 1]) return CUDA_ERROR_INVALID_IMAGE;
    CUresult rc = symbols(&e, img, log, logsz);
    if (rc) cpudrv_image_free(img);
    return rc;
}
