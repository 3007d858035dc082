/* A process's libraries and their kernels on each GPU's server it uses (route.c, issue 30).
 *
 * A library (cuLibraryLoad*: what the CUDA runtime loads a program's kernels as, and cuBLAS
 * its own) belongs to no context, and natively one handle serves every device. Here it is
 * loaded through one server, whose handle the program holds; another GPU's server knows
 * neither it nor its kernels. So where processes may hold a connection per GPU
 * (MPSSHIM_SERVER_PER_GPU_MOVE), each library's image is kept here (a copy: the program may
 * free its own), each kernel's library and name too, and a call that names them on another
 * GPU's server names that server's own: the library loaded there from the kept image, the
 * kernel looked up there by name, each once, when first needed (a call's handle arguments,
 * call.c; a launch, launch.c; a kernel or function lookup, module.c). The program keeps its
 * handles; values that come back from the other server (cuKernelGetLibrary there) are that
 * server's.
 *
 * An image that lies in a read-only segment of a loaded shared object or the executable (the
 * CUDA runtime's fatbins, in their libraries' .nv_fatbin: hundreds of MiB for PyTorch's) is
 * not copied: the image is kept by its address, and the object held open (dlopen with
 * RTLD_NOLOAD, closed when the library is forgotten) so that it cannot be unmapped under it.
 * Copied, every moving process of a framework would hold its own copy of them.
 *
 * A library loaded with JIT options is not kept (its replica could differ): a process that
 * has one gets no second GPU's server (conn.c). The copies live as long as the library: its
 * unload forgets them, and its replicas go with the process (each server unloads what a
 * departed client loaded). Guarded by lock, which is held while a replica is made (a load
 * through another server). */
#define _GNU_SOURCE
#include "interpose/shim.h"
#include "channel/settings.h"

#include <dlfcn.h>
#include <link.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <uthash.h>

struct lib {
    uint64_t h; /* the program's handle: the key */
    int slot;   /* the connection it was loaded through */
    void *image;
    size_t size;
    void *held; /* the object image lies in, held open; NULL: image is a copy of ours */
    uint64_t on[SHIM_CONNS]; /* its handle on each connection's server, 0 until made */
    UT_hash_handle hh;
};

struct kern {
    uint64_t k, lib; /* the program's handles; k the key */
    int slot;
    char *name;
    uint64_t on[SHIM_CONNS];
    UT_hash_handle hh;
};

/* Hashed: every launch of such a process asks (a framework has thousands of kernels). */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct lib *libs;
static struct kern *kerns;
static _Atomic int unkept; /* a library was loaded that is not kept here */
static _Atomic int any;    /* something is kept (read without the lock) */
/* module.c's: a library loaded from an image without options, and a library's kernel looked
 * up by name (recorded as `owner`'s), through the thread's route. */
static CUresult (*load_image)(const void *image, uint64_t *out);
static CUresult (*lookup)(uint64_t lib, const char *name, uint64_t owner, uint64_t *out);

void shim_replicas_use(CUresult (*load)(const void *, uint64_t *),
                       CUresult (*find)(uint64_t, const char *, uint64_t, uint64_t *))
{
    load_image = load;
    lookup = find;
}

/* Why the process may not hold a second connection (conn.c asks): what lives in one server
 * alone. Managed memory's and __managed__ variables' pushes, pulls and faults go through one
 * connection (migrate.c, mvars.c); a library loaded with JIT options is not kept here. */
static const char *split_refusal(void)
{
    if (shim_mvar_live() || shim_mig_live())
        return "it has managed memory or __managed__ variables";
    if (atomic_load(&unkept))
        return "it has loaded a library that is not kept for other servers (with JIT options, "
               "or out of host memory)";
    return NULL;
}

__attribute__((constructor)) static void hear_splits(void)
{
    shim_conn_on_split(split_refusal);
}

int shim_replicas_on(void)
{
    return shim_may_use_servers();
}

/* Whether [at, at + size) lies in one read-only loaded segment of an object: dl_iterate_phdr's
 * callback, the range in arg, the object's name out. */
struct seg_find {
    uintptr_t at, end;
    const char *name;
    int found;
};

static int find_segment(struct dl_phdr_info *info, size_t len, void *arg)
{
    (void)len;
    struct seg_find *f = arg;
    for (int i = 0; i < info->dlpi_phnum; i++) {
        const ElfW(Phdr) *p = &info->dlpi_phdr[i];
        if (p->p_type != PT_LOAD) continue;
        uintptr_t lo = info->dlpi_addr + p->p_vaddr, hi = lo + p->p_memsz;
        if (f->at < lo || f->end > hi) continue;
        f->found = !(p->p_flags & PF_W);
        f->name = info->dlpi_name;
        return 1;
    }
    return 0;
}

/* The object that holds image (size bytes) in a read-only segment, held open; NULL when it
 * lies elsewhere (the heap, a writable segment) or cannot be held. */
static void *hold_object(const void *image, size_t size)
{
    struct seg_find f = {.at = (uintptr_t)image, .end = (uintptr_t)image + size};
    if (!size || f.end < f.at || !dl_iterate_phdr(find_segment, &f) || !f.found) return NULL;
    /* "" names the executable, which dlopen(NULL) holds. */
    return dlopen(f.name && *f.name ? f.name : NULL, RTLD_NOW | RTLD_NOLOAD);
}

static void lib_free(struct lib *l)
{
    if (l->held)
        dlclose(l->held);
    else
        free(l->image);
    free(l);
}

void shim_replica_library(uint64_t h, const void *image, size_t size, int keep)
{
    if (!shim_replicas_on()) return;
    void *held = keep ? hold_object(image, size) : NULL;
    void *copy = keep && !held ? malloc(size ? size : 1) : NULL;
    struct lib *l = held || copy ? calloc(1, sizeof(*l)) : NULL;
    if (!l) {
        atomic_store(&unkept, 1);
        free(copy);
        if (held) dlclose(held);
        return;
    }
    if (copy) memcpy(copy, image, size);
    l->h = h;
    l->slot = shim_route_conn()->slot;
    l->image = held ? (void *)image : copy;
    l->held = held;
    l->size = size;
    l->on[l->slot] = h;
    struct lib *old = NULL;
    pthread_mutex_lock(&lock);
    HASH_FIND(hh, libs, &h, sizeof(h), old); /* an earlier library's handle, given again */
    if (old) HASH_DEL(libs, old);
    HASH_ADD(hh, libs, h, sizeof(l->h), l);
    atomic_store(&any, 1);
    pthread_mutex_unlock(&lock);
    if (old) lib_free(old);
}

void shim_replica_kernel(uint64_t k, uint64_t lib, const char *name)
{
    if (!shim_replicas_on() || !name) return;
    char *n = strdup(name);
    struct kern *x = n ? calloc(1, sizeof(*x)) : NULL, *old = NULL;
    if (!x) {
        free(n);
        return; /* not kept: the kernel stays its first server's */
    }
    x->k = k;
    x->lib = lib;
    x->slot = shim_route_conn()->slot;
    x->name = n;
    x->on[x->slot] = k;
    pthread_mutex_lock(&lock);
    HASH_FIND(hh, kerns, &k, sizeof(k), old); /* asked again: the driver gives it back */
    if (!old) HASH_ADD(hh, kerns, k, sizeof(x->k), x);
    pthread_mutex_unlock(&lock);
    if (old) {
        free(n);
        free(x);
    }
}

void shim_replica_forget(uint64_t lib)
{
    if (!atomic_load_explicit(&any, memory_order_acquire)) return;
    pthread_mutex_lock(&lock);
    struct kern *x, *tmp;
    HASH_ITER(hh, kerns, x, tmp) {
        if (x->lib != lib) continue;
        HASH_DEL(kerns, x);
        free(x->name);
        free(x);
    }
    struct lib *l = NULL;
    HASH_FIND(hh, libs, &lib, sizeof(lib), l);
    if (l) HASH_DEL(libs, l);
    pthread_mutex_unlock(&lock);
    /* After the lock: a dlclose that unloads the object runs its destructors, which may
     * unload libraries (the CUDA runtime's do), and so come here. */
    if (l) lib_free(l);
}

static struct lib *find_lib(uint64_t h)
{
    struct lib *l = NULL;
    HASH_FIND(hh, libs, &h, sizeof(h), l);
    return l;
}

static struct kern *find_kern(uint64_t k)
{
    struct kern *x = NULL;
    HASH_FIND(hh, kerns, &k, sizeof(k), x);
    return x;
}

/* Library l on the server of device dev (slot s), loaded there now if need be; lock held. */
static CUresult lib_on(struct lib *l, int dev, int s, uint64_t *out)
{
    if (!l->on[s]) {
        struct shim_route saved;
        shim_route_begin(&saved, dev, 0);
        CUresult r = load_image ? load_image(l->image, &l->on[s]) : CUDA_ERROR_NOT_SUPPORTED;
        shim_route_end(&saved);
        if (r != CUDA_SUCCESS) return r;
    }
    *out = l->on[s];
    return CUDA_SUCCESS;
}

CUresult shim_replica_for(uint64_t h, int dev, uint64_t *out)
{
    *out = h;
    if (!h || !atomic_load_explicit(&any, memory_order_acquire) ||
        !atomic_load_explicit(&shim_conns_extra, memory_order_acquire))
        return CUDA_SUCCESS;
    int s = shim_conn_of_device(dev)->slot;
    CUresult r = CUDA_SUCCESS;
    pthread_mutex_lock(&lock);
    struct lib *l = find_lib(h);
    struct kern *x = l ? NULL : find_kern(h);
    if (l && l->slot != s) {
        r = lib_on(l, dev, s, out);
    } else if (x && x->slot != s) {
        if (!x->on[s]) {
            struct lib *xl = find_lib(x->lib);
            uint64_t lib_there = 0;
            r = xl ? lib_on(xl, dev, s, &lib_there) : CUDA_ERROR_INVALID_HANDLE;
            if (r == CUDA_SUCCESS) {
                struct shim_route saved;
                shim_route_begin(&saved, dev, 0);
                r = lookup ? lookup(lib_there, x->name, x->lib, &x->on[s])
                           : CUDA_ERROR_NOT_SUPPORTED;
                shim_route_end(&saved);
            }
        }
        if (r == CUDA_SUCCESS) *out = x->on[s];
    }
    pthread_mutex_unlock(&lock);
    return r;
}
