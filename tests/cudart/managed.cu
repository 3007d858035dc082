// managed: an OpenACC-style program through the runtime. Every array is cudaMallocManaged
// (no explicit copies), and the CPU and the GPU take turns updating them, many times, with
// prefetches and advice as such programs issue them; cudaPointerGetAttributes says managed.
#include "common.h"
#include "../kernels/kernels.cu"

int main(int argc, char **argv)
{
    t_init("managed", 300);
    int rounds = argc > 1 ? atoi(argv[1]) : 50;
    REQUIRE(rounds > 0, "bad round count '%s'", argv[1]);
    CHECK(cudaSetDevice(0));
    enum { ARRAYS = 6, LEN = 1 << 15 };
    unsigned *a[ARRAYS];
    for (int i = 0; i < ARRAYS; i++) {
        CHECK(cudaMallocManaged(&a[i], LEN * sizeof(unsigned)));
        for (int k = 0; k < LEN; k++)
            a[i][k] = (unsigned)k;
    }
    cudaPointerAttributes at;
    CHECK(cudaPointerGetAttributes(&at, a[0] + 7));
    REQUIRE(at.type == cudaMemoryTypeManaged, "type %d", (int)at.type);
    REQUIRE(at.devicePointer == a[0] + 7 && at.hostPointer == a[0] + 7, "pointers differ");
    t_ok("cudaMallocManaged: managed, one pointer for host and device");

    cudaStream_t s;
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaMemLocation gpu = {cudaMemLocationTypeDevice, 0};
    CHECK(cudaMemAdvise(a[0], LEN * sizeof(unsigned), cudaMemAdviseSetReadMostly, gpu));
    for (int r = 0; r < rounds; r++) {
        for (int i = 0; i < ARRAYS; i++) {
            if (r % 10 == 0) CHECK(cudaMemPrefetchAsync(a[i], LEN * sizeof(unsigned), gpu, 0, s));
            inc_u32<<<(LEN + 255) / 256, 256, 0, s>>>(a[i], LEN);
            CHECK(cudaGetLastError());
        }
        CHECK(cudaStreamSynchronize(s));
        for (int i = 0; i < ARRAYS; i++)
            for (int k = 0; k < LEN; k++) {
                unsigned want = (unsigned)k + 2u * (unsigned)r + 1u;
                REQUIRE(a[i][k] == want, "round %d array %d [%d] = %u, want %u", r, i, k, a[i][k],
                        want);
                a[i][k] += 1; // the CPU's turn
            }
    }
    t_ok("%d managed arrays, %d rounds of GPU and CPU updates, all coherent", ARRAYS, rounds);
    int rm = 0;
    CHECK(cudaMemRangeGetAttribute(&rm, sizeof(rm), cudaMemRangeAttributeReadMostly, a[0],
                                   LEN * sizeof(unsigned)));
    REQUIRE(rm == 1, "read mostly %d", rm);
    t_ok("advice read back");
    for (int i = 0; i < ARRAYS; i++)
        CHECK(cudaFree(a[i]));
    CHECK(cudaStreamDestroy(s));
    t_pass();
}
