/* TOOLS_CONTEXT (UUID 21318c60-9714-3248-8ca6-41ff7324c8f2): a table of 92 slots that
 * cuBLAS, cuBLASLt and cuFFT ask for. Without it cuBLAS's GEMMs fail with
 * CUBLAS_STATUS_NOT_SUPPORTED (PyTorch's `x @ x`). Three slots were seen called (tools/exptrace
 * under PyTorch, CuPy and cuSOLVER; bench/NOTES.md, "Export tables"): 4, the context's id (what
 * cuCtxGetId answers); 51 and 39, which cuBLAS calls in turn for a handle on the NULL stream
 * (CuPy's default): 51 resolves a stream handle to the driver's stream object and 39 reads that
 * object's id, which the real driver answered with cuStreamGetId's value (7 for the NULL stream
 * of a fresh process, both ways). With 51 refused, CuPy's first matmul and cuSOLVER's solve
 * failed with INTERNAL_ERROR. No published description of the other slots exists
 * (shared/data/export-tables.md): each says so once if called and returns
 * CUDA_ERROR_NOT_SUPPORTED, which a caller checking results can handle. */
#include "interpose/export_tables.h"
#include "interpose/shim.h"

/* Slot 4: (context, &id); a NULL context is the calling thread's current one. */
static CUresult tools_context_id(CUcontext ctx, unsigned long long *id)
{
    if (!id) return CUDA_ERROR_INVALID_VALUE;
    return cuCtxGetId(ctx, id);
}

/* Slot 51: (context, stream, &object): the driver's object behind a stream handle, which
 * slot 39 takes. The real driver answers an object other than the handle, refuses a NULL
 * context and a handle that is no stream with CUDA_ERROR_INVALID_HANDLE, and takes NULL
 * as the legacy stream (the object's id was cuStreamGetId(NULL)'s). Here the object is a
 * stream handle the public calls accept: NULL becomes CU_STREAM_LEGACY, others stay
 * themselves, checked with cuStreamGetId (one round trip; cuBLAS asks once per handle
 * and stream, not per call). */
static CUresult tools_context_stream(CUcontext ctx, CUstream stream, CUstream *object)
{
    unsigned long long id;
    if (!object) return CUDA_ERROR_INVALID_VALUE;
    if (!ctx) return CUDA_ERROR_INVALID_HANDLE;
    CUstream s = stream ? stream : CU_STREAM_LEGACY;
    CUresult r = cuStreamGetId(s, &id);
    if (r == CUDA_SUCCESS) *object = s;
    return r;
}

/* Slot 39: (context, object from slot 51, &id): the stream's id, as cuStreamGetId answers
 * (13, 14, 15 for three streams made in turn, both ways); the real driver refused a NULL object
 * with CUDA_ERROR_INVALID_VALUE. */
static CUresult tools_context_stream_id(CUcontext ctx, CUstream object, unsigned long long *id)
{
    (void)ctx;
    if (!object || !id) return CUDA_ERROR_INVALID_VALUE;
    return cuStreamGetId(object, id);
}

// clang-format off: rows of macro calls clang-format takes for one statement (and then
// puts one slot a line)
#define U(n) UNSERVED(tctx, "TOOLS_CONTEXT", n)
U(1) U(2) U(3) U(5) U(6) U(7) U(8) U(9) U(10) U(11) U(12) U(13) U(14) U(15) U(16) U(17)
U(18) U(19) U(20) U(21) U(22) U(23) U(24) U(25) U(26) U(27) U(28) U(29) U(30) U(31) U(32)
U(33) U(34) U(35) U(36) U(37) U(38) U(40) U(41) U(42) U(43) U(44) U(45) U(46) U(47)
U(48) U(49) U(50) U(52) U(53) U(54) U(55) U(56) U(57) U(58) U(59) U(60) U(61) U(62)
U(63) U(64) U(65) U(66) U(67) U(68) U(69) U(70) U(71) U(72) U(73) U(74) U(75) U(76) U(77)
U(78) U(79) U(80) U(81) U(82) U(83) U(84) U(85) U(86) U(87) U(88) U(89) U(90) U(91) U(92)
#undef U

#define tctx_slot4 tools_context_id
#define tctx_slot39 tools_context_stream_id
#define tctx_slot51 tools_context_stream
#define S(n) (const void *)tctx_slot##n
const void *const shim_export_tools_context[93] = {
    TABLE_BYTES(93), /* 744 */
    S(1), S(2), S(3), S(4), S(5), S(6), S(7), S(8), S(9), S(10), S(11), S(12), S(13), S(14),
    S(15), S(16), S(17), S(18), S(19), S(20), S(21), S(22), S(23), S(24), S(25), S(26), S(27),
    S(28), S(29), S(30), S(31), S(32), S(33), S(34), S(35), S(36), S(37), S(38), S(39), S(40),
    S(41), S(42), S(43), S(44), S(45), S(46), S(47), S(48), S(49), S(50), S(51), S(52), S(53),
    S(54), S(55), S(56), S(57), S(58), S(59), S(60), S(61), S(62), S(63), S(64), S(65), S(66),
    S(67), S(68), S(69), S(70), S(71), S(72), S(73), S(74), S(75), S(76), S(77), S(78), S(79),
    S(80), S(81), S(82), S(83), S(84), S(85), S(86), S(87), S(88), S(89), S(90), S(91), S(92),
};
#undef S
// clang-format on
