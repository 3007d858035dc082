/* Name -> entry point of every symbol the shim exports (generated: build/gen/shim_symtab.c),
 * so that cuGetProcAddress hands out the shim's own functions. */
#ifndef MPSSHIM_SYMTAB_H
#define MPSSHIM_SYMTAB_H

#include <stddef.h>

struct shim_sym {
    const char *name;
    void *fn;
};

extern const struct shim_sym shim_symtab[];
extern const size_t shim_nsymtab;

/* Looks a symbol up by exact name; NULL if the shim does not export it. */
void *shim_symtab_find(const char *name);

/* The generated table only needs each symbol declared; the prototype does not matter. */
#define SHIM_SYMTAB_DECL(NAME) extern char NAME##_shim_sym __asm__(#NAME);
#define SHIM_SYMTAB_ENTRY(NAME) {#NAME, (void *)&NAME##_shim_sym}

#endif
