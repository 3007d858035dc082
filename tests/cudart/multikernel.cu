// multikernel: many kernels of one module (every kernel of tests/kernels/kernels.cu) and a
// second module (tests/kernels/kernels2.cu, linked in as its own translation unit), through
// <<<>>> launches, cudaLaunchKernel and cudaLaunchKernelExC: parameters of every size and
// alignment, a struct by value, dynamic shared memory, __device__ variables written and read
// with cudaMemcpyToSymbol/FromSymbol, function attributes.
#include "common.h"
#include "../kernels/kernels.cu"

// Defined in tests/kernels/kernels2.cu: another fat binary, so another module.
extern "C" __global__ void negate_i32(int *p, int n);

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    t_init("multikernel", 300);
    CHECK(cudaSetDevice(0));
    const int n = 4096;
    unsigned block = 128, grid = (n + block - 1) / block;

    empty_kernel<<<1, 1>>>();
    CHECK_LAUNCH();
    CHECK(cudaDeviceSynchronize());
    t_ok("empty_kernel");

    // fill_u32, inc_u32, copy_u8, write_pattern, check_pattern on one buffer.
    unsigned *u, *errors;
    unsigned char *bytes2;
    CHECK(cudaMalloc(&u, n * sizeof(unsigned)));
    CHECK(cudaMalloc(&bytes2, n * sizeof(unsigned)));
    CHECK(cudaMalloc(&errors, sizeof(unsigned)));
    fill_u32<<<grid, block>>>(u, 40u, n);
    inc_u32<<<grid, block>>>(u, n);
    inc_u32<<<grid, block>>>(u, n);
    CHECK_LAUNCH();
    static unsigned hu[n];
    CHECK(cudaMemcpy(hu, u, sizeof(hu), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        REQUIRE(hu[i] == 42u, "u[%d] = %u, expected 42", i, hu[i]);
    t_ok("fill_u32 then inc_u32 twice");
    write_pattern<<<grid, block>>>(u, n, 0xc0ffeeu);
    copy_u8<<<grid, block>>>((const unsigned char *)u, bytes2, n * sizeof(unsigned));
    CHECK(cudaMemset(errors, 0, sizeof(unsigned)));
    check_pattern<<<grid, block>>>((const unsigned *)bytes2, n, 0xc0ffeeu, errors);
    CHECK_LAUNCH();
    unsigned nerr = 1;
    CHECK(cudaMemcpy(&nerr, errors, sizeof(nerr), cudaMemcpyDeviceToHost));
    REQUIRE(nerr == 0, "check_pattern found %u wrong words after copy_u8", nerr);
    t_ok("write_pattern, copy_u8, check_pattern");

    // Parameters of every size and alignment, and a struct by value.
    double *dout, hout[6];
    CHECK(cudaMalloc(&dout, sizeof(hout)));
    param_mix<<<1, 32>>>((char)-5, 2.5, (short)-300, 123456, 0x123456789ull, 0.75f, dout);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(hout, dout, sizeof(hout), cudaMemcpyDeviceToHost));
    const double want_mix[6] = {-5, 2.5, -300, 123456, (double)0x123456789ull, 0.75};
    for (int i = 0; i < 6; i++)
        REQUIRE(hout[i] == want_mix[i], "param_mix out[%d] = %g, expected %g", i, hout[i],
                want_mix[i]);
    struct mix m = {'x', -1.25, {7, -8, 9}};
    struct_param<<<1, 1>>>(m, dout);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(hout, dout, 5 * sizeof(double), cudaMemcpyDeviceToHost));
    const double want_struct[5] = {'x', -1.25, 7, -8, 9};
    for (int i = 0; i < 5; i++)
        REQUIRE(hout[i] == want_struct[i], "struct_param out[%d] = %g, expected %g", i, hout[i],
                want_struct[i]);
    t_ok("param_mix and struct_param");

    // __device__ variables: written with cudaMemcpyToSymbol, read by kernels and back.
    float table[256], offset = 0.5f, fout[256];
    for (int i = 0; i < 256; i++)
        table[i] = (float)i;
    CHECK(cudaMemcpyToSymbol(g_table, table, sizeof(table)));
    CHECK(cudaMemcpyToSymbol(g_offset, &offset, sizeof(offset)));
    size_t gsize = 0;
    CHECK(cudaGetSymbolSize(&gsize, g_table));
    REQUIRE(gsize == sizeof(table), "g_table is %zu bytes", gsize);
    float *dfout;
    CHECK(cudaMalloc(&dfout, sizeof(fout)));
    globals_read<<<2, 128>>>(dfout, 256);
    CHECK_LAUNCH();
    CHECK(cudaMemcpy(fout, dfout, sizeof(fout), cudaMemcpyDeviceToHost));
    for (int i = 0; i < 256; i++)
        REQUIRE(fout[i] == table[i] * 2.0f + offset, "globals_read out[%d] = %g", i,
                (double)fout[i]);
    unsigned zero = 0, counter = 0;
    CHECK(cudaMemcpyToSymbol(g_counter, &zero, sizeof(zero)));
    global_counter_bump<<<4, 64>>>();
    CHECK_LAUNCH();
    CHECK(cudaMemcpyFromSymbol(&counter, g_counter, sizeof(counter)));
    REQUIRE(counter == 256u, "g_counter = %u, expected 256", counter);
    t_ok("__device__ variables through the symbol API");

    // Dynamic shared memory, launched with cudaLaunchKernel.
    int *din;
    long long *dsum, hsum[32];
    static int hin[n];
    for (int i = 0; i < n; i++)
        hin[i] = i % 97 - 40;
    CHECK(cudaMalloc(&din, sizeof(hin)));
    CHECK(cudaMalloc(&dsum, sizeof(hsum)));
    CHECK(cudaMemcpy(din, hin, sizeof(hin), cudaMemcpyHostToDevice));
    int nn = n;
    void *args[] = {&din, &dsum, &nn};
    CHECK(cudaLaunchKernel((const void *)block_sum, dim3(n / 128), dim3(128), args,
                           128 * sizeof(long long), 0));
    CHECK(cudaMemcpy(hsum, dsum, sizeof(hsum), cudaMemcpyDeviceToHost));
    for (int b = 0; b < n / 128; b++) {
        long long want = 0;
        for (int i = b * 128; i < (b + 1) * 128; i++)
            want += hin[i];
        REQUIRE(hsum[b] == want, "block_sum[%d] = %lld, expected %lld", b, hsum[b], want);
    }
    t_ok("block_sum with dynamic shared memory via cudaLaunchKernel");

    // The second module, launched with cudaLaunchKernelExC (no attributes).
    void *nargs[] = {&din, &nn};
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(block);
    CHECK(cudaLaunchKernelExC(&cfg, (const void *)negate_i32, nargs));
    CHECK(cudaMemcpy(hin, din, sizeof(hin), cudaMemcpyDeviceToHost));
    for (int i = 0; i < n; i++)
        REQUIRE(hin[i] == -(i % 97 - 40), "negate_i32 [%d] = %d", i, hin[i]);
    saxpy<<<grid, block>>>(1.0f, dfout, dfout, 256); // a kernel of the first module again
    CHECK_LAUNCH();
    CHECK(cudaDeviceSynchronize());
    t_ok("a kernel of a second module via cudaLaunchKernelExC");

    // Function attributes come from the loaded module.
    cudaFuncAttributes fa;
    CHECK(cudaFuncGetAttributes(&fa, (const void *)block_sum));
    REQUIRE(fa.maxThreadsPerBlock > 0, "block_sum: maxThreadsPerBlock %d", fa.maxThreadsPerBlock);
    CHECK(cudaFuncGetAttributes(&fa, (const void *)negate_i32));
    REQUIRE(fa.maxThreadsPerBlock > 0, "negate_i32: maxThreadsPerBlock %d", fa.maxThreadsPerBlock);
    t_ok("cudaFuncGetAttributes of both modules");

    CHECK(cudaFree(u));
    CHECK(cudaFree(bytes2));
    CHECK(cudaFree(errors));
    CHECK(cudaFree(dout));
    CHECK(cudaFree(dfout));
    CHECK(cudaFree(din));
    CHECK(cudaFree(dsum));
    t_ok("freed");
    t_pass();
}
