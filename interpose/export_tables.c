/* cuGetExportTable: the hidden tables cudart asks the driver for, by UUID, before it makes
 * any public call that matters. The shim IS the driver in the client, so it serves them
 * itself: this file holds the dispatch and the small tables (CUDART_INTERFACE, TOOLS_TLS,
 * TOOLS_RUNTIME_CALLBACK_HOOKS, CONTEXT_CHECKS); context-local storage, the integrity
 * check and the tools context table have files of their own. What each slot must do comes from
 * shared/data/export-tables.md (observations on the 580 driver, and what replacement
 * drivers such as ZLUDA learned); slots nobody has described answer
 * shim_export_unserved(). Without a server the generated entry point sends
 * cuGetExportTable to the real driver, whose own tables then serve cudart. */
#include "interpose/export_tables.h"
#include "interpose/shim.h"

#include <dlfcn.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

/* The (table, slot) pairs already reported; guarded by unserved_lock. */
static pthread_mutex_t unserved_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    const char *table;
    int slot;
} unserved_seen[64];
static unsigned nunserved_seen;

CUresult shim_export_unserved(const char *table, int slot)
{
    int first = 1;
    pthread_mutex_lock(&unserved_lock);
    for (unsigned i = 0; i < nunserved_seen; i++)
        if (unserved_seen[i].table == table && unserved_seen[i].slot == slot) first = 0;
    if (first && nunserved_seen < sizeof(unserved_seen) / sizeof(unserved_seen[0])) {
        unserved_seen[nunserved_seen].table = table;
        unserved_seen[nunserved_seen++].slot = slot;
    }
    pthread_mutex_unlock(&unserved_lock);
    if (first)
        shim_log("export table %s: slot %d is not served: returning CUDA_ERROR_NOT_SUPPORTED",
                 table, slot);
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* ---------------------------------------------------------------- CUDART_INTERFACE */

/* Slot 1: loads the fat binary inside cudart's registration wrapper (__fatBinC_Wrapper_t);
 * cuModuleLoadFatBinary unwraps it. */
static CUresult cudart_load_wrapper(CUmodule *module, const void *wrapper)
{
    if (!module || !wrapper) return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadFatBinary(module, wrapper);
}

/* Slot 2: the primary context of a device, neither retained nor activated; a later
 * cuDevicePrimaryCtxRetain returns the same handle. */
static CUresult cudart_primary_ctx(CUcontext *pctx, CUdevice dev)
{
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    *pctx = shim_primary_ctx(dev);
    return *pctx ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

/* Slot 6: slot 1 with three more arguments, whose meaning is not public: only the form
 * without them (NULL, NULL, 0) is loaded, the rest refused. */
static CUresult cudart_load_wrapper_ex(CUmodule *module, const void *wrapper, void *arg3,
                                       void *arg4, unsigned arg5)
{
    if (arg3 || arg4 || arg5)
        return shim_refuse("CUDART_INTERFACE module load (slot 6) with extra arguments");
    return cudart_load_wrapper(module, wrapper);
}

/* Slot 7: what it tells the driver is not public; ZLUDA and the other replacement drivers
 * answer success without acting on it, and cudart runs on them. */
static CUresult cudart_slot7(size_t arg)
{
    (void)arg;
    return CUDA_SUCCESS;
}

/* Slot 8: like slot 6, but given the fat binary itself (no wrapper), module pointer second. */
static CUresult cudart_load_fatbin_ex(const void *fatbin, CUmodule *module, void *arg3, void *arg4,
                                      unsigned arg5)
{
    if (arg3 || arg4 || arg5)
        return shim_refuse("CUDART_INTERFACE module load (slot 8) with extra arguments");
    if (!module || !fatbin) return CUDA_ERROR_INVALID_VALUE;
    return cuModuleLoadFatBinary(module, fatbin);
}

/* Slot 12: known elsewhere as "load compilers": readies the JIT compiler, which lives in
 * the server's driver (images are compiled there), so the client has nothing to load. */
static CUresult cudart_slot12(void)
{
    return CUDA_SUCCESS;
}

UNSERVED(cudart, "CUDART_INTERFACE", 3)
UNSERVED(cudart, "CUDART_INTERFACE", 4)
UNSERVED(cudart, "CUDART_INTERFACE", 5)
UNSERVED(cudart, "CUDART_INTERFACE", 9)
UNSERVED(cudart, "CUDART_INTERFACE", 10)
UNSERVED(cudart, "CUDART_INTERFACE", 11)

const void *const shim_export_cudart[13] = {
    TABLE_BYTES(13), /* 104, as the 580 driver's */
    (const void *)cudart_load_wrapper,
    (const void *)cudart_primary_ctx,
    (const void *)cudart_slot3,
    (const void *)cudart_slot4,
    (const void *)cudart_slot5,
    (const void *)cudart_load_wrapper_ex,
    (const void *)cudart_slot7,
    (const void *)cudart_load_fatbin_ex,
    (const void *)cudart_slot9,
    (const void *)cudart_slot10,
    (const void *)cudart_slot11,
    (const void *)cudart_slot12,
};

/* ---------------------------------------------------------------- TOOLS_TLS */

/* Slot 1: sets the calling thread's current context (cuBLASLt relies on it being real). */
static CUresult tls_set_current(CUcontext ctx)
{
    return cuCtxSetCurrent(ctx);
}

/* Slot 2: the calling thread's current context. */
static CUresult tls_get_current(CUcontext *pctx)
{
    return cuCtxGetCurrent(pctx);
}

static const void *const tools_tls[3] = {
    TABLE_BYTES(3), /* 24 */
    (const void *)tls_set_current,
    (const void *)tls_get_current,
};

/* ---------------------------------------------------------------- TOOLS_RUNTIME_CALLBACK_HOOKS */

/* Where tools (CUPTI) would switch runtime callbacks on. Left zero: callbacks off, which is
 * what a process without a profiler attached sees. Sized for 8-byte elements whatever the
 * unit of the reported count (sources disagree). Written only by cudart, never by us. */
static uint64_t hooks_enable1[1024];
static uint64_t hooks_enable2[14];

/* Slot 2: pointer to and size of the first callback-enable buffer. */
static void hooks_buffer1(void **ptr, size_t *size)
{
    if (ptr) *ptr = hooks_enable1;
    if (size) *size = sizeof(hooks_enable1) / sizeof(hooks_enable1[0]);
}

/* Slot 6: the same for the second buffer. */
static void hooks_buffer2(void **ptr, size_t *size)
{
    if (ptr) *ptr = hooks_enable2;
    if (size) *size = sizeof(hooks_enable2) / sizeof(hooks_enable2[0]);
}

/* Slots 1 and 4: cudart calls them around its callback set-up; they only matter to an
 * attached tool, and with every callback off there is nothing to do. */
static CUresult hooks_noop(void)
{
    return CUDA_SUCCESS;
}

UNSERVED(hooks, "TOOLS_RUNTIME_CALLBACK_HOOKS", 3)
UNSERVED(hooks, "TOOLS_RUNTIME_CALLBACK_HOOKS", 5)

static const void *const tools_runtime_callback_hooks[7] = {
    TABLE_BYTES(7), /* 56 */
    (const void *)hooks_noop, (const void *)hooks_buffer1, (const void *)hooks_slot3,
    (const void *)hooks_noop, (const void *)hooks_slot5,   (const void *)hooks_buffer2,
};

/* ---------------------------------------------------------------- CONTEXT_CHECKS */

/* Slot 2: the kind of a context (ctx, &type, &second). Every context of a client is an
 * ordinary one: type 0. The second output is left as the caller set it: the real driver
 * was seen leaving it so, ZLUDA does the same, and cuBLAS fails when it is cleared. */
static CUresult checks_context_kind(CUcontext ctx, uint32_t *type, const void **second)
{
    (void)ctx;
    (void)second;
    if (type) *type = 0;
    return CUDA_SUCCESS;
}

/* Slot 3: a flag the real driver answers 0 to in every process observed. */
static uint32_t checks_flag(void)
{
    return 0;
}

UNSERVED(checks, "CONTEXT_CHECKS", 1)
UNSERVED(checks, "CONTEXT_CHECKS", 4)
UNSERVED(checks, "CONTEXT_CHECKS", 5)
UNSERVED(checks, "CONTEXT_CHECKS", 6)
UNSERVED(checks, "CONTEXT_CHECKS", 7)
UNSERVED(checks, "CONTEXT_CHECKS", 8)
UNSERVED(checks, "CONTEXT_CHECKS", 9)
UNSERVED(checks, "CONTEXT_CHECKS", 10)
UNSERVED(checks, "CONTEXT_CHECKS", 11)
UNSERVED(checks, "CONTEXT_CHECKS", 12)
UNSERVED(checks, "CONTEXT_CHECKS", 13)
UNSERVED(checks, "CONTEXT_CHECKS", 14)

static const void *const context_checks[15] = {
    TABLE_BYTES(15), /* 120 */
    (const void *)checks_slot1,
    (const void *)checks_context_kind,
    (const void *)checks_flag,
    (const void *)checks_slot4,
    (const void *)checks_slot5,
    (const void *)checks_slot6,
    (const void *)checks_slot7,
    (const void *)checks_slot8,
    (const void *)checks_slot9,
    (const void *)checks_slot10,
    (const void *)checks_slot11,
    (const void *)checks_slot12,
    (const void *)checks_slot13,
    (const void *)checks_slot14,
};

/* ---------------------------------------------------------------- dispatch */

/* Marks a table the real driver serves from inside this process (from_driver()). */
static const char FROM_DRIVER[1];

/* The tables, by UUID as its bytes read in memory order. A NULL table is refused quietly:
 * f8cff951 is asked for by every cudart program, which copes without it (as it does on
 * other replacement drivers); a line on each run would only be noise. Refused with a line
 * and coped with, seen (tools/exptrace; bench/NOTES.md, "Export tables"): 69a28e9f, asked by
 * NVML (libnvidia-ml) in every PyTorch process; da9151d3, asked by NVRTC, which compiles
 * without it. */
static const struct {
    const char *uuid;
    const void *table;
} tables[] = {
    {"6bd5fb6c5bf4e74a8987d93912fd9df9", shim_export_cudart}, /* CUDART_INTERFACE */
    {"42d85a8123f6cb478298f6e78a3aecdc", tools_tls},          /* TOOLS_TLS */
    {"a094798c2e742e7493f20800200c0a66", tools_runtime_callback_hooks},
    {"c693336e1121df11a8c368f355d89593", shim_export_cls},           /* CONTEXT_LOCAL_STORAGE_... */
    {"263e88607cd2614392f6bbd5006dfa7e", context_checks},            /* CONTEXT_CHECKS */
    {"d4082055bde6704b8d34ba123c66e1f2", shim_export_integrity},     /* INTEGRITY_CHECK */
    {"f8cff95121468b4eb9e2fb469e7c0dd9", NULL},                      /* no agreed name */
    {"21318c60971432488ca641ff7324c8f2", shim_export_tools_context}, /* TOOLS_CONTEXT */
    {"1734dc26800d47458726c0f1e7dd8bca", FROM_DRIVER}, /* cuBLASLt's: see from_driver() */
    {"6e163fbeb958444d835ce182aff1991e", shim_export_tools_module}, /* TOOLS_MODULE, cuFFT's */
};

/* Table 1734dc26 (17 slots), which cuBLASLt asks for before its first reduced-precision
 * GEMM (PyTorch's bf16/fp16 autocast, CuPy's fp16 matmul) and without which it crashes.
 * What cuBLASLt calls (slot 4 with pointers to two tables of its own, then slot 13, which
 * writes a 16-byte value into each of two objects slot 4 made) is computation between the
 * library and the driver inside the process: it names no context, stream or memory. So
 * the real driver, loaded into this process by absolute path and never initialised (no
 * cuInit: no device is opened, nothing of the GPU is held), serves it, and cuBLASLt's
 * kernels then run through the server as every other call does. The table is served before
 * cuInit natively, and PyTorch's AMP training and CuPy's fp16 matmul give the native results
 * through the shim (bench/NOTES.md, "Export tables"). Without a real driver here (the CI
 * machine) the table is refused like an unknown one. */
static CUresult from_driver(const void **pp, const CUuuid *id, const char *hex)
{
    void *h = shim_real_driver();
    CUresult (*get)(const void **, const CUuuid *) =
        h ? (CUresult(*)(const void **, const CUuuid *))dlsym(h, "cuGetExportTable") : NULL;
    CUresult r = get ? get(pp, id) : CUDA_ERROR_NOT_FOUND;
    static _Atomic int said; /* one line per process */
    if (r != CUDA_SUCCESS || !*pp) {
        *pp = NULL;
        if (!atomic_exchange(&said, 1))
            shim_log("cuGetExportTable: table %s needs the real driver in this process, and %s",
                     hex, h ? "it refused it" : "none was found: returning CUDA_ERROR_NOT_FOUND");
        return CUDA_ERROR_NOT_FOUND;
    }
    return CUDA_SUCCESS;
}

/* Unknown UUIDs already logged; guarded by unknown_lock. */
static pthread_mutex_t unknown_lock = PTHREAD_MUTEX_INITIALIZER;
static char unknown_seen[32][33];
static unsigned nunknown_seen;

/* Logs an unknown UUID the first time it is asked for. */
static void log_unknown(const char *hex)
{
    int first = 1;
    pthread_mutex_lock(&unknown_lock);
    for (unsigned i = 0; i < nunknown_seen; i++)
        if (strcmp(unknown_seen[i], hex) == 0) first = 0;
    if (first && nunknown_seen < sizeof(unknown_seen) / sizeof(unknown_seen[0]))
        memcpy(unknown_seen[nunknown_seen++], hex, 33);
    pthread_mutex_unlock(&unknown_lock);
    if (first) shim_log("cuGetExportTable: no table %s: returning CUDA_ERROR_NOT_FOUND", hex);
}

CUresult SHIM_IMPL(cuGetExportTable)(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (!ppExportTable || !pExportTableId) return CUDA_ERROR_INVALID_VALUE;
    /* An error must come with a NULL table: success with an unwritten pointer makes
     * cudart jump through garbage. */
    *ppExportTable = NULL;
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", (unsigned char)pExportTableId->bytes[i]);
    for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++)
        if (strcmp(tables[i].uuid, hex) == 0) {
            if (!tables[i].table) return CUDA_ERROR_NOT_FOUND;
            if (tables[i].table == FROM_DRIVER)
                return from_driver(ppExportTable, pExportTableId, hex);
            *ppExportTable = tables[i].table;
            return CUDA_SUCCESS;
        }
    log_unknown(hex);
    return CUDA_ERROR_NOT_FOUND;
}
