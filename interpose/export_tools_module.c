/* TOOLS_MODULE (UUID 6e163fbe-b958-444d-835c-e182aff1991e): a table of 98 slots that cuFFT
 * asks for. The one slot seen called (tools/exptrace, cuFFT through CuPy; bench/NOTES.md,
 * "Export tables") is 7, which cuFFT uses to find the kernels of each module it loads:
 * (context, module, callback, user data, ...) calls callback(user data, function, name) once
 * per function of the module, in the module's order, and returns how many there were (a probe
 * on the real driver: 15 calls and 15 for a module of 15 kernels, the second argument each time
 * the CUfunction that cuModuleEnumerateFunctions gives, the third its name). Without the table
 * cuFFT fails with CUFFT_INTERNAL_ERROR; with this one CuPy's FFTs and torch.fft give the
 * native results. Here the same walk is made with public calls through the server. The other
 * slots say so once if called and return CUDA_ERROR_NOT_SUPPORTED. */
#include "interpose/export_tables.h"
#include "interpose/shim.h"

#include <stdlib.h>

typedef void (*module_visit_fn)(void *user, CUfunction function, const char *name);

/* Slot 7: the callback for each function of module, then their count (what the real
 * driver returned); an error of the walk is returned instead of a count. */
static uint64_t tools_module_functions(CUcontext ctx, CUmodule module, module_visit_fn visit,
                                       void *user)
{
    (void)ctx;
    unsigned n = 0;
    if (!visit) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = cuModuleGetFunctionCount(&n, module);
    if (r != CUDA_SUCCESS || n == 0) return r;
    CUfunction *fns = calloc(n, sizeof(*fns));
    if (!fns) return CUDA_ERROR_OUT_OF_MEMORY;
    r = cuModuleEnumerateFunctions(fns, n, module);
    for (unsigned i = 0; r == CUDA_SUCCESS && i < n; i++) {
        const char *name = NULL;
        r = cuFuncGetName(&name, fns[i]);
        if (r == CUDA_SUCCESS) visit(user, fns[i], name);
    }
    free(fns);
    return r == CUDA_SUCCESS ? n : r;
}

// clang-format off: rows of macro calls clang-format takes for one statement (and then
// puts one slot a line)
#define U(n) UNSERVED(tmod, "TOOLS_MODULE", n)
U(1) U(2) U(3) U(4) U(5) U(6) U(8) U(9) U(10) U(11) U(12) U(13) U(14) U(15) U(16) U(17)
U(18) U(19) U(20) U(21) U(22) U(23) U(24) U(25) U(26) U(27) U(28) U(29) U(30) U(31) U(32)
U(33) U(34) U(35) U(36) U(37) U(38) U(39) U(40) U(41) U(42) U(43) U(44) U(45) U(46) U(47)
U(48) U(49) U(50) U(51) U(52) U(53) U(54) U(55) U(56) U(57) U(58) U(59) U(60) U(61) U(62)
U(63) U(64) U(65) U(66) U(67) U(68) U(69) U(70) U(71) U(72) U(73) U(74) U(75) U(76) U(77)
U(78) U(79) U(80) U(81) U(82) U(83) U(84) U(85) U(86) U(87) U(88) U(89) U(90) U(91) U(92)
U(93) U(94) U(95) U(96) U(97) U(98)
#undef U

#define tmod_slot7 tools_module_functions
#define S(n) (const void *)tmod_slot##n
const void *const shim_export_tools_module[99] = {
    TABLE_BYTES(99), /* 792, as the 580 driver's */
    S(1), S(2), S(3), S(4), S(5), S(6), S(7), S(8), S(9), S(10), S(11), S(12), S(13), S(14),
    S(15), S(16), S(17), S(18), S(19), S(20), S(21), S(22), S(23), S(24), S(25), S(26), S(27),
    S(28), S(29), S(30), S(31), S(32), S(33), S(34), S(35), S(36), S(37), S(38), S(39), S(40),
    S(41), S(42), S(43), S(44), S(45), S(46), S(47), S(48), S(49), S(50), S(51), S(52), S(53),
    S(54), S(55), S(56), S(57), S(58), S(59), S(60), S(61), S(62), S(63), S(64), S(65), S(66),
    S(67), S(68), S(69), S(70), S(71), S(72), S(73), S(74), S(75), S(76), S(77), S(78), S(79),
    S(80), S(81), S(82), S(83), S(84), S(85), S(86), S(87), S(88), S(89), S(90), S(91), S(92),
    S(93), S(94), S(95), S(96), S(97), S(98),
};
#undef S
// clang-format on
