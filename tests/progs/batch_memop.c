/* batch_memop: cuStreamBatchMemOp (_v2: the driver refuses the first version, and so does
 * the shim, as an unsupported call), an array of tagged unions (CUstreamBatchMemOpParams:
 * the operation says which members hold an address). A batch writes 32 and 64-bit values (and a
 * barrier); a batch waits on one stream for a value another stream writes, then writes behind the
 * wait; a misaligned address is refused as the driver refuses it. With --shim (through the shim
 * only: a driver need not check where an address lies): an address outside the caller's memory is
 * refused by the server's check of the member the operation makes live. */
#include "tests/progs/common.h"

#include <string.h>

static CUstreamBatchMemOpParams op_write(CUstreamBatchMemOpType t, CUdeviceptr a, uint64_t v)
{
    CUstreamBatchMemOpParams o;
    memset(&o, 0, sizeof(o));
    o.writeValue.operation = t;
    o.writeValue.address = a;
    if (t == CU_STREAM_MEM_OP_WRITE_VALUE_64)
        o.writeValue.value64 = v;
    else
        o.writeValue.value = (cuuint32_t)v;
    return o;
}

static CUstreamBatchMemOpParams op_plain(CUstreamBatchMemOpType t)
{
    CUstreamBatchMemOpParams o;
    memset(&o, 0, sizeof(o));
    o.operation = t;
    return o;
}

static void writes(CUstream s, CUdeviceptr buf)
{
    /* A barrier between them: the second version's (a flush of remote writes, which the
     * first also has, is not on every device). */
    CUstreamBatchMemOpParams ops[3] = {
        op_write(CU_STREAM_MEM_OP_WRITE_VALUE_32, buf, 7),
        op_write(CU_STREAM_MEM_OP_WRITE_VALUE_64, buf + 8, 0x1122334455667788ull),
        op_plain(CU_STREAM_MEM_OP_BARRIER),
    };
    uint32_t got[4] = {0};
    /* Zeroed in the batch's stream order: a non-blocking stream is unordered with the
     * default stream a plain memset runs on. */
    CHECK(cuMemsetD32Async(buf, 0, 4, s));
    CHECK(cuStreamBatchMemOp(s, 3, ops, 0));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemcpyDtoH(got, buf, sizeof(got)));
    uint64_t wide;
    memcpy(&wide, &got[2], sizeof(wide));
    REQUIRE(got[0] == 7 && wide == 0x1122334455667788ull, "got %u and %#llx", got[0],
            (unsigned long long)wide);
    t_ok("a batch with a barrier writes 32 and 64-bit values");
}

/* The waiting batch's stream runs its write only once another stream has written the
 * value waited for. */
static void wait_then_write(CUstream waiter, CUstream writer, CUdeviceptr buf)
{
    CUstreamBatchMemOpParams ops[2];
    memset(ops, 0, sizeof(ops));
    ops[0].waitValue.operation = CU_STREAM_MEM_OP_WAIT_VALUE_32;
    ops[0].waitValue.address = buf + 16;
    ops[0].waitValue.value = 3;
    ops[0].waitValue.flags = CU_STREAM_WAIT_VALUE_GEQ;
    ops[1] = op_write(CU_STREAM_MEM_OP_WRITE_VALUE_32, buf + 20, 9);
    uint32_t got = 0;
    CHECK(cuMemsetD32Async(buf + 16, 0, 2, waiter));
    CHECK(cuStreamSynchronize(waiter)); /* zero before the writer may write */
    CHECK(cuStreamBatchMemOp(waiter, 2, ops, 0));
    CHECK(cuStreamWriteValue32(writer, buf + 16, 3, 0));
    CHECK(cuStreamSynchronize(waiter));
    CHECK(cuMemcpyDtoH(&got, buf + 20, sizeof(got)));
    REQUIRE(got == 9, "got %u, want 9", got);
    t_ok("a batch waits for another stream's write, then writes");
}

static void refused(CUstream s, CUdeviceptr buf, int shim)
{
    CUstreamBatchMemOpParams o = op_write(CU_STREAM_MEM_OP_WRITE_VALUE_32, buf + 2, 1);
    EXPECT(cuStreamBatchMemOp(s, 1, &o, 0), CUDA_ERROR_INVALID_VALUE);
    t_ok("a misaligned address is refused");
    if (!shim) return;
    CUdeviceptr gone;
    CHECK(cuMemAlloc(&gone, 4096));
    CHECK(cuMemFree(gone));
    o = op_write(CU_STREAM_MEM_OP_WRITE_VALUE_64, gone, 1);
    EXPECT(cuStreamBatchMemOp(s, 1, &o, 0), CUDA_ERROR_INVALID_VALUE);
    t_ok("an address of memory freed is refused");
}

int main(int argc, char **argv)
{
    CUdevice dev;
    CUcontext ctx;
    t_init("batch_memop", 60);
    t_setup(&dev, &ctx);
    CUstream a, b;
    CUdeviceptr buf;
    CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&buf, 64));
    writes(a, buf);
    wait_then_write(a, b, buf);
    refused(a, buf, t_has_flag(argc, argv, "--shim"));
    CHECK(cuMemFree(buf));
    CHECK(cuStreamDestroy(a));
    CHECK(cuStreamDestroy(b));
    t_pass();
}
