/* Seeds for fuzz_images: one well-formed image of each kind the parser sizes (channel/
 * image.c), small enough for the fuzzer's 4 KiB inputs: an ELF64 image with a section
 * header table of three sections (one with contents past the tables, one NOBITS whose size
 * must not count, one empty) and a program header, a fat binary header with its payload,
 * and a PTX text with its NUL. Random bytes rarely make an ELF whose section table fits, so
 * without these the fuzzer never reached the section loop, where a wrapping sum once let a
 * crafted image read 4 GiB below its buffer (issue 11).
 * Usage: seed_images DIR */
#include "channel/image.h"

#include <elf.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

static int put(const char *dir, const char *name, const void *p, size_t n)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    int ok = f && fwrite(p, 1, n, f) == n;
    if (f && fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "seed_images: cannot write %s\n", path);
    return ok;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: seed_images DIR\n");
        return 2;
    }
    static uint8_t elf[1024];
    Elf64_Ehdr e = {0};
    memcpy(e.e_ident, ELFMAG, SELFMAG);
    e.e_ident[EI_CLASS] = ELFCLASS64;
    e.e_ident[EI_DATA] = ELFDATA2LSB;
    e.e_ident[EI_VERSION] = EV_CURRENT;
    e.e_type = ET_EXEC;
    e.e_version = EV_CURRENT;
    e.e_ehsize = sizeof(Elf64_Ehdr);
    e.e_phoff = sizeof(Elf64_Ehdr);
    e.e_phentsize = sizeof(Elf64_Phdr);
    e.e_phnum = 1;
    e.e_shoff = e.e_phoff + sizeof(Elf64_Phdr);
    e.e_shentsize = sizeof(Elf64_Shdr);
    e.e_shnum = 3;
    memcpy(elf, &e, sizeof(e));
    Elf64_Phdr ph = {.p_type = PT_LOAD, .p_offset = 0, .p_filesz = 64, .p_memsz = 64};
    memcpy(elf + e.e_phoff, &ph, sizeof(ph));
    uint64_t data = e.e_shoff + 3 * sizeof(Elf64_Shdr); /* contents after the tables */
    Elf64_Shdr sh[3] = {
        {.sh_type = SHT_NULL},
        {.sh_type = SHT_PROGBITS, .sh_offset = data, .sh_size = 100},
        {.sh_type = SHT_NOBITS, .sh_offset = data, .sh_size = 1 << 20},
    };
    memcpy(elf + e.e_shoff, sh, sizeof(sh));
    size_t elf_len = (size_t)data + 100;
    memset(elf + data, 0x5a, 100);

    static uint8_t fat[256];
    uint32_t magic = CHAN_FATBIN_MAGIC;
    uint16_t version = 1, header_size = 16;
    uint64_t fat_size = 200;
    memcpy(fat, &magic, 4);
    memcpy(fat + 4, &version, 2);
    memcpy(fat + 6, &header_size, 2);
    memcpy(fat + 8, &fat_size, 8);

    static const char ptx[] = ".version 8.0\n.target sm_90\n.address_size 64\n"
                              ".visible .entry k()\n{\n\tret;\n}\n";
    int ok = put(argv[1], "elf", elf, elf_len) && put(argv[1], "fatbin", fat, 16 + 200) &&
             put(argv[1], "ptx", ptx, sizeof(ptx));
    return ok ? 0 : 1;
}
