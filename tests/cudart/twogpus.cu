// twogpus: a CUDA runtime program using two devices apart (a model per GPU): on each, with
// cudaSetDevice, a __device__ table written with cudaMemcpyToSymbol (each device's own copy),
// globals_read and vec_add on a stream of its own, an event behind them; then each device's
// results read with the other device current (cudaStreamSynchronize and an async copy on its
// stream, cudaEventQuery of its event), and its memory freed so. Prints one line per device.
// Skips (77) with fewer than two devices.
//
// The runtime loads the kernels as libraries: through mpsshim with MPSSHIM_SERVER_PER_GPU_MOVE=1
// each device is served by its own GPU's server, which loads them again from the image the
// shim kept (interpose/replicas.c): tests/server_per_gpu.sh.
#include "common.h"
#include "../kernels/kernels.cu"

#define N 4096

struct dev {
    cudaStream_t s;
    cudaEvent_t done;
    float *a, *b, *c, *g;
    float out[N], gout[256];
};

int main()
{
    t_init("twogpus", 120);
    int ndev = 0;
    CHECK(cudaGetDeviceCount(&ndev));
    if (ndev < 2) t_skip("needs two devices, found %d", ndev);
    static struct dev g[2];
    static float ha[N], hb[N], table[256];
    for (int i = 0; i < N; i++) {
        ha[i] = (float)(i % 100);
        hb[i] = (float)(i % 9) * 0.5f;
    }
    for (int d = 0; d < 2; d++) {
        CHECK(cudaSetDevice(d));
        for (int i = 0; i < 256; i++)
            table[i] = (float)(i + 10 * d);
        float offset = 0.25f * (float)(d + 1);
        CHECK(cudaMemcpyToSymbol(g_table, table, sizeof(table)));
        CHECK(cudaMemcpyToSymbol(g_offset, &offset, sizeof(offset)));
        CHECK(cudaStreamCreate(&g[d].s));
        CHECK(cudaEventCreateWithFlags(&g[d].done, cudaEventDisableTiming));
        CHECK(cudaMalloc(&g[d].a, N * sizeof(float)));
        CHECK(cudaMalloc(&g[d].b, N * sizeof(float)));
        CHECK(cudaMalloc(&g[d].c, N * sizeof(float)));
        CHECK(cudaMalloc(&g[d].g, 256 * sizeof(float)));
        CHECK(cudaMemcpyAsync(g[d].a, ha, sizeof(ha), cudaMemcpyHostToDevice, g[d].s));
        CHECK(cudaMemcpyAsync(g[d].b, hb, sizeof(hb), cudaMemcpyHostToDevice, g[d].s));
        vec_add<<<N / 256, 256, 0, g[d].s>>>(g[d].a, g[d].b, g[d].c, N);
        CHECK_LAUNCH();
        globals_read<<<1, 256, 0, g[d].s>>>(g[d].g, 256);
        CHECK_LAUNCH();
        CHECK(cudaEventRecord(g[d].done, g[d].s));
        // Done before the next device writes its table: the CPU test driver keeps one
        // instance of a library's __device__ variables for every context (the real driver
        // one per context), so the next write would reach this device's kernel there.
        CHECK(cudaEventSynchronize(g[d].done));
    }
    t_ok("both devices started");
    for (int d = 0; d < 2; d++) {
        CHECK(cudaSetDevice(1 - d)); // the other device current
        CHECK(cudaStreamSynchronize(g[d].s));
        CHECK(cudaEventQuery(g[d].done));
        CHECK(cudaMemcpyAsync(g[d].out, g[d].c, N * sizeof(float), cudaMemcpyDeviceToHost, g[d].s));
        CHECK(
            cudaMemcpyAsync(g[d].gout, g[d].g, sizeof(g[d].gout), cudaMemcpyDeviceToHost, g[d].s));
        CHECK(cudaStreamSynchronize(g[d].s));
        double sum = 0, gsum = 0;
        for (int i = 0; i < N; i++) {
            REQUIRE(g[d].out[i] == ha[i] + hb[i], "device %d: c[%d] = %g", d, i,
                    (double)g[d].out[i]);
            sum += g[d].out[i];
        }
        for (int i = 0; i < 256; i++) {
            float want = (float)(i + 10 * d) * 2.0f + 0.25f * (float)(d + 1);
            REQUIRE(g[d].gout[i] == want, "device %d: globals_read[%d] = %g, expected %g", d, i,
                    (double)g[d].gout[i], (double)want);
            gsum += g[d].gout[i];
        }
        printf("device %d: vec_add %.2f, its own table %.2f\n", d, sum, gsum);
    }
    t_ok("each device's results, read with the other current");
    for (int d = 0; d < 2; d++) {
        CHECK(cudaSetDevice(1 - d));
        CHECK(cudaFree(g[d].a));
        CHECK(cudaFree(g[d].b));
        CHECK(cudaFree(g[d].c));
        CHECK(cudaFree(g[d].g));
        CHECK(cudaSetDevice(d)); // the runtime destroys streams and events in their device
        CHECK(cudaStreamDestroy(g[d].s));
        CHECK(cudaEventDestroy(g[d].done));
    }
    t_pass();
}
