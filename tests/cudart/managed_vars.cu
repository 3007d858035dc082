// managed_vars: __managed__ variables through the runtime, as legacy HPC codes use them. The
// runtime looks its variables up itself (cuLibraryGetManaged, before it has a context) and
// the host reads and writes them by name. Two translation units, so two modules, each with
// variables of its own (tests/kernels/managed.cu included here, managed2.cu beside it): the
// image's initial values; host writes that kernels read; kernel writes the host reads after
// a device, stream or event synchronisation; one kernel writing and the next reading without
// a synchronisation; one module's kernel reading another's variable through a pointer;
// symbol copies; prefetches, stream attachment and the pointer type; the batch prefetch.
#include "common.h"
#include "../kernels/managed.cu"

// managed2.cu's variables, at the addresses its host code gives (its module's own).
long long *mv2_total_at(void);
int *mv2_scale_at(void);
extern "C" __global__ void mv2_accumulate(const unsigned int *in, int n);
#define mv2_total (*mv2_total_at())
#define mv2_scale (*mv2_scale_at())

static void check_arr(unsigned base, unsigned step, const char *when)
{
    for (unsigned i = 0; i < MV_LEN; i++)
        REQUIRE(mv_arr[i] == base + step * i, "%s: mv_arr[%u] = %u, want %u", when, i, mv_arr[i],
                base + step * i);
}

int main(int argc, char **argv)
{
    t_init("managed_vars", 120);
    int rounds = argc > 1 ? atoi(argv[1]) : 30;
    REQUIRE(rounds > 0, "bad round count '%s'", argv[1]);

    // The image's values, read by the host before any CUDA call of the program's own.
    printf("managed_vars: initial mv_init %d, mv2_scale %d, mv_count %d, mv2_total %lld\n", mv_init,
           mv2_scale, mv_count, mv2_total);
    t_ok("initial values of two modules' variables");

    // The host writes, a kernel reads.
    unsigned *out;
    CHECK(cudaMalloc(&out, (MV_LEN + 2) * sizeof(unsigned)));
    for (unsigned i = 0; i < MV_LEN; i++)
        mv_arr[i] = 2 * i;
    mv_count = 3;
    mv_read<<<2, 64>>>(out);
    CHECK(cudaGetLastError());
    unsigned h[MV_LEN + 2];
    CHECK(cudaMemcpy(h, out, sizeof(h), cudaMemcpyDeviceToHost));
    for (unsigned i = 0; i < MV_LEN; i++)
        REQUIRE(h[i] == 2 * i + 3, "read back [%u] = %u", i, h[i]);
    REQUIRE(h[MV_LEN] == 1234 && h[MV_LEN + 1] == 0, "mv_init %u mv_plain %u", h[MV_LEN],
            h[MV_LEN + 1]);
    t_ok("the host writes, a kernel reads");

    // A kernel writes, the host reads after cudaDeviceSynchronize.
    mv_add<<<2, 64>>>(5);
    CHECK(cudaDeviceSynchronize());
    REQUIRE(mv_count == 8, "mv_count %d", mv_count);
    check_arr(5, 3, "after mv_add");
    t_ok("a kernel writes, the host reads after cudaDeviceSynchronize");

    // Kernel 1 writes, kernel 2 (another module's) reads, no synchronisation between; the
    // second reads the first module's array through a pointer.
    mv_add<<<1, 32>>>(1);
    mv2_accumulate<<<1, 1>>>(mv_arr, MV_LEN);
    CHECK(cudaDeviceSynchronize());
    long long sum = 0;
    for (unsigned i = 0; i < MV_LEN; i++)
        sum += 6 + 4 * i;
    REQUIRE(mv2_total == 3 * sum, "mv2_total %lld, want %lld", mv2_total, 3 * sum);
    check_arr(6, 4, "after the second mv_add");
    t_ok("one kernel writes, the next reads without a synchronisation, across modules");

    // Streams and events.
    cudaStream_t s;
    cudaEvent_t ev;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
    mv2_scale = 1;
    mv2_total = 0;
    mv2_accumulate<<<1, 1, 0, s>>>(mv_arr, 4);
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(mv2_total == 6 + 10 + 14 + 18, "after the stream: %lld", mv2_total);
    mv_add<<<1, 64, 0, s>>>(-6);
    CHECK(cudaEventRecord(ev, s));
    CHECK(cudaEventSynchronize(ev));
    check_arr(0, 5, "after the event");
    REQUIRE(mv_count == 3, "mv_count %d", mv_count);
    t_ok("stream and event synchronisations bring the device's writes");

    // Symbol copies name the variables.
    int c = 0, v = 41;
    CHECK(cudaMemcpyFromSymbol(&c, mv_count, sizeof(c)));
    REQUIRE(c == 3, "from the symbol: %d", c);
    CHECK(cudaMemcpyToSymbol(mv_count, &v, sizeof(v)));
    REQUIRE(mv_count == 41, "after a copy to the symbol: %d", mv_count);
    mv_count = 42;
    CHECK(cudaMemcpyFromSymbol(&c, mv_count, sizeof(c)));
    REQUIRE(c == 42, "from the symbol after a host write: %d", c);
    void *sym = NULL;
    CHECK(cudaGetSymbolAddress(&sym, mv_arr));
    REQUIRE(sym == (void *)mv_arr, "the symbol's address is not the variable's");
    t_ok("symbol copies and addresses");

    // Pointer type, prefetch, attachment.
    cudaPointerAttributes at;
    CHECK(cudaPointerGetAttributes(&at, &mv_arr[3]));
    REQUIRE(at.type == cudaMemoryTypeManaged, "type %d", (int)at.type);
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0};
    CHECK(cudaMemPrefetchAsync(mv_arr, sizeof(mv_arr), gpu, 0, s));
    CHECK(cudaStreamAttachMemAsync(s, &mv_count, 0, cudaMemAttachSingle));
    mv_add<<<1, 64, 0, s>>>(1);
    CHECK(cudaStreamSynchronize(s));
    REQUIRE(mv_count == 43, "attached: %d", mv_count);
    CHECK(cudaStreamAttachMemAsync(s, &mv_count, 0, cudaMemAttachGlobal));
    void *ptrs[2] = {mv_arr, &mv2_total};
    size_t sizes[2] = {sizeof(mv_arr), sizeof(mv2_total)};
    size_t idx = 0;
    CHECK(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, &gpu, &idx, 1, 0, s));
    int last = 9;
    CHECK(cudaMemRangeGetAttribute(&last, sizeof(last), cudaMemRangeAttributeLastPrefetchLocation,
                                   mv_arr, sizeof(mv_arr)));
    REQUIRE(last == 0, "last prefetch %d", last);
    REQUIRE(cudaMemPrefetchBatchAsync(ptrs, sizes, 2, &gpu, &idx, 1, 0, 0) == cudaErrorInvalidValue,
            "a batch on the legacy stream");
    (void)cudaGetLastError();
    t_ok("managed pointer type, prefetches and stream attachment of variables");

    // Many rounds of host and device turns.
    for (int r = 0; r < rounds; r++) {
        for (unsigned i = 0; i < MV_LEN; i++)
            mv_arr[i] += 1; // the host's turn
        mv_add<<<2, 64, 0, r % 2 ? s : 0>>>(2);
        CHECK(r % 2 ? cudaStreamSynchronize(s) : cudaDeviceSynchronize());
        REQUIRE(mv_count == 43 + 2 * (r + 1), "round %d: mv_count %d", r, mv_count);
        for (unsigned i = 0; i < MV_LEN; i++)
            REQUIRE(mv_arr[i] == 6 * i + 1 + (unsigned)(r + 1) * (3 + i),
                    "round %d: mv_arr[%u] = %u", r, i, mv_arr[i]);
    }
    t_ok("%d rounds of host and device turns, all coherent", rounds);

    CHECK(cudaFree(out));
    CHECK(cudaEventDestroy(ev));
    CHECK(cudaStreamDestroy(s));
    t_pass();
}
