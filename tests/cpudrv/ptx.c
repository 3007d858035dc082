// PTX text: finds every `.entry` with its `.param` list (offsets and sizes laid out as
// the driver reports them) and every module-scope `.global` / `.const` variable.
#include "cpudrv.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct lex {
    const char *p;
    char tok[256];
    int line;
};

// Appends a formatted line to a log buffer (JIT logs).
void cpudrv_logf(char *log, size_t logsz, const char *fmt, ...)
{
    if (!log || !logsz) return;
    size_t used = strnlen(log, logsz);
    if (used >= logsz - 1) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(log + used, logsz - used, fmt, ap);
    va_end(ap);
}

static int ident_char(char c)
{
    return isalnum((unsigned char)c) || c == '_' || c == '$' || c == '%' || c == '.';
}

// Next token into l->tok (empty at the end). Comments and strings are skipped.
static const char *next(struct lex *l)
{
    for (;;) {
        while (isspace((unsigned char)*l->p)) {
            if (*l->p == '\n') l->line++;
            l->p++;
        }
        if (l->p[0] == '/' && l->p[1] == '/') {
            while (*l->p && *l->p != '\n')
                l->p++;
            continue;
        }
        if (l->p[0] == '/' && l->p[1] == '*') {
            const char *e = strstr(l->p + 2, "*/");
            l->p = e ? e + 2 : l->p + strlen(l->p);
            continue;
        }
        if (*l->p == '"') {
            const char *e = strchr(l->p + 1, '"');
            l->p = e ? e + 1 : l->p + strlen(l->p);
            continue;
        }
        break;
    }
    size_t n = 0;
    if (ident_char(*l->p)) {
        while (ident_char(*l->p) && n < sizeof l->tok - 1)
            l->tok[n++] = *l->p++;
        while (ident_char(*l->p))
            l->p++;
    } else if (*l->p) {
        l->tok[n++] = *l->p++;
    }
    l->tok[n] = 0;
    return l->tok;
}

static int is(const struct lex *l, const char *s)
{
    return strcmp(l->tok, s) == 0;
}

// Size in bytes of a PTX fundamental type token, 0 if it is not one.
static size_t type_size(const char *t)
{
    static const struct {
        const char *name;
        size_t size;
    } types[] = {
        {".b8", 1},     {".u8", 1},         {".s8", 1},      {".b16", 2},    {".u16", 2},
        {".s16", 2},    {".f16", 2},        {".bf16", 2},    {".b32", 4},    {".u32", 4},
        {".s32", 4},    {".f32", 4},        {".f16x2", 4},   {".bf16x2", 4}, {".tf32", 4},
        {".b64", 8},    {".u64", 8},        {".s64", 8},     {".f64", 8},    {".b128", 16},
        {".texref", 8}, {".samplerref", 8}, {".surfref", 8}, {".pred", 1},
    };
    for (size_t i = 0; i < sizeof types / sizeof types[0]; i++)
        if (strcmp(t, types[i].name) == 0) return types[i].size;
    return 0;
}

// A declaration's type part: [.attribute(.managed)] [.align A] [.v2|.v4]
// [.ptr .space [.align A]] .type name [N]... Leaves l->tok on the token after the declaration.
struct decl {
    size_t size, align;
    int managed; // .attribute(.managed): a __managed__ variable
    char name[256];
};

static int parse_decl(struct lex *l, struct decl *d)
{
    size_t align = 0, vec = 1, elem = 0;
    int ptr = 0;
    d->managed = 0;
    for (;;) {
        if (is(l, ".attribute")) {
            // .attribute(.managed) on a variable: nvcc's __managed__ (PTX ISA 4.0+).
            next(l);
            if (!is(l, "(")) continue; // the bare qualifier of a .ptr parameter
            for (next(l); l->tok[0] && !is(l, ")"); next(l))
                if (is(l, ".managed")) d->managed = 1;
            if (!is(l, ")")) return -1;
        } else if (is(l, ".align")) {
            next(l);
            size_t a = strtoul(l->tok, NULL, 0);
            if (!a || (a & (a - 1))) return -1;
            if (!ptr) // after .ptr it is the pointee's alignment, not the parameter's
                align = a;
        } else if (is(l, ".ptr")) {
            ptr = 1;
        } else if (is(l, ".v2") || is(l, ".v4") || is(l, ".v8")) {
            vec = strtoul(l->tok + 2, NULL, 10);
        } else if (is(l, ".global") || is(l, ".const") || is(l, ".local") || is(l, ".shared") ||
                   is(l, ".param")) {
            // state-space qualifiers of .ptr parameters: no effect on layout
        } else if (type_size(l->tok)) {
            elem = type_size(l->tok) * vec;
        } else {
            break;
        }
        next(l);
    }
    if (!elem || !(isalpha((unsigned char)l->tok[0]) || l->tok[0] == '_' || l->tok[0] == '$'))
        return -1;
    snprintf(d->name, sizeof d->name, "%s", l->tok);
    size_t count = 1;
    next(l);
    while (is(l, "[")) {
        next(l);
        if (is(l, "]")) {
            count = 0;
        } else {
            char *end;
            unsigned long long n = strtoull(l->tok, &end, 0);
            if (*end || n > (1ull << 40)) return -1;
            count *= n;
            next(l);
            if (!is(l, "]")) return -1;
        }
        next(l);
    }
    d->size = elem * count;
    d->align = align ? align : elem;
    return 0;
}

static int add_kernel(struct cpudrv_image *img, const char *name, struct cpudrv_param *params,
                      unsigned n)
{
    struct cpudrv_img_kernel *k = realloc(img->k, (img->nk + 1) * sizeof *k);
    if (!k) return -1;
    img->k = k;
    k = &img->k[img->nk];
    k->name = strdup(name);
    if (!k->name) return -1;
    k->nparams = n;
    k->params = params;
    k->have_params = 1;
    img->nk++;
    return 0;
}

static int add_global(struct cpudrv_image *img, const struct decl *d)
{
    struct cpudrv_img_global *g = realloc(img->g, (img->ng + 1) * sizeof *g);
    if (!g) return -1;
    img->g = g;
    g = &img->g[img->ng];
    g->name = strdup(d->name);
    if (!g->name) return -1;
    g->size = d->size;
    g->align = d->align;
    g->managed = d->managed;
    g->init = NULL;
    img->ng++;
    return 0;
}

// Skips a balanced {...} block; l->tok is "{" on entry, the token after "}" on exit.
static int skip_block(struct lex *l)
{
    int depth = 0;
    do {
        if (is(l, "{"))
            depth++;
        else if (is(l, "}"))
            depth--;
        else if (!l->tok[0])
            return -1;
        next(l);
    } while (depth > 0);
    return 0;
}

// `.entry NAME ( params ) directives { body }`; l->tok is ".entry" on entry.
static int parse_entry(struct lex *l, struct cpudrv_image *img, char *log, size_t logsz)
{
    char name[256];
    next(l);
    snprintf(name, sizeof name, "%s", l->tok);
    if (!isalpha((unsigned char)name[0]) && name[0] != '_' && name[0] != '$') {
        cpudrv_logf(log, logsz, "ptx line %d: bad .entry name '%s'\n", l->line, name);
        return -1;
    }
    struct cpudrv_param *params = NULL;
    unsigned n = 0;
    size_t off = 0;
    next(l);
    if (is(l, "(")) {
        next(l);
        while (!is(l, ")")) {
            struct decl d;
            if (!is(l, ".param") || (next(l), parse_decl(l, &d)) || (!is(l, ",") && !is(l, ")"))) {
                cpudrv_logf(log, logsz, "ptx line %d: bad parameter of .entry %s\n", l->line, name);
                free(params);
                return -1;
            }
            struct cpudrv_param *p = realloc(params, (n + 1) * sizeof *p);
            if (!p) {
                free(params);
                return -1;
            }
            params = p;
            off = (off + d.align - 1) / d.align * d.align;
            params[n].off = (uint32_t)off;
            params[n].size = (uint32_t)d.size;
            off += d.size;
            n++;
            if (is(l, ",")) next(l);
        }
        next(l);
    }
    // Performance directives (.maxntid 256, 1, 1 ...) until the body or a ';'.
    while (l->tok[0] && !is(l, "{") && !is(l, ";"))
        next(l);
    if (is(l, ";")) { // a prototype, not a definition
        free(params);
        next(l);
        return 0;
    }
    if (skip_block(l)) {
        free(params);
        cpudrv_logf(log, logsz, "ptx: unterminated body of .entry %s\n", name);
        return -1;
    }
    if (add_kernel(img, name, params, n)) {
        free(params);
        return -1;
    }
    return 0;
}

// `.global|.const decl [= init];` at module scope; l->tok is the state space on entry.
static int parse_var(struct lex *l, struct cpudrv_image *img, int external, char *log, size_t logsz)
{
    struct decl d;
    next(l);
    if (parse_decl(l, &d)) {
        cpudrv_logf(log, logsz, "ptx line %d: bad variable declaration\n", l->line);
        return -1;
    }
    // Initialisers are not evaluated: variables start zeroed (see the report).
    while (l->tok[0] && !is(l, ";"))
        next(l);
    next(l);
    if (external || !d.size) return 0;
    return add_global(img, &d);
}

// ptx.c: parses NUL-terminated PTX text.
CUresult cpudrv_ptx_parse(const char *text, struct cpudrv_image *img, char *log, size_t logsz)
{
    struct lex l = {text, {0}, 1};
    int version = 0, target = 0, external = 0;
    memset(img, 0, sizeof *img);
    img->ptx = 1;
    next(&l);
    while (l.tok[0]) {
        if (is(&l, ".version")) {
            version = 1;
            next(&l);
        } else if (is(&l, ".target")) {
            target = 1;
            next(&l);
        } else if (is(&l, ".extern")) {
            external = 1;
            next(&l);
            continue;
        } else if (is(&l, ".entry")) {
            if (external) { // declaration of a kernel defined elsewhere
                while (l.tok[0] && !is(&l, ";") && !is(&l, "{"))
                    next(&l);
                next(&l);
            } else if (parse_entry(&l, img, log, logsz)) {
                goto bad;
            }
        } else if (is(&l, ".global") || is(&l, ".const")) {
            if (parse_var(&l, img, external, log, logsz)) goto bad;
        } else if (is(&l, "{")) {
            if (skip_block(&l)) goto bad;
        } else {
            // Linking directives qualify the next declaration; anything else ends it.
            if (!is(&l, ".visible") && !is(&l, ".weak") && !is(&l, ".common")) external = 0;
            next(&l);
            continue;
        }
        external = 0;
    }
    if (!version || !target) {
        cpudrv_logf(log, logsz, "ptx: missing .version or .target directive\n");
        goto bad;
    }
    return CUDA_SUCCESS;
bad:
    cpudrv_image_free(img);
    return CUDA_ERROR_INVALID_PTX;
}
