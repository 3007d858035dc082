// The compute-bound kernel of bench/throttle (SM shares). GPU only: the CPU test driver has
// no twin of it, and no test loads it.
//
// Every block does the same fixed FMA work, so a grid of many blocks fills whatever SMs the
// stream may use and its time scales with their number. Thread 0 of each block sets the
// bit of the SM it runs on (%smid) in `seen` (THROTTLE_SEEN_WORDS words, 1024 SMs).
#define THROTTLE_SEEN_WORDS 32

extern "C" __global__ void burn_fma(unsigned *seen, unsigned long long iters, float *sink)
{
    if (threadIdx.x == 0) {
        unsigned smid;
        asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
        if (smid < THROTTLE_SEEN_WORDS * 32) atomicOr(&seen[smid / 32], 1u << (smid % 32));
    }
    // Four independent chains keep the FMA pipes busy rather than waiting on one chain.
    float a0 = threadIdx.x, a1 = a0 + 1.0f, a2 = a0 + 2.0f, a3 = a0 + 3.0f;
    const float b = 0.999999f, c = 0.5f;
    for (unsigned long long i = 0; i < iters; i++) {
        a0 = fmaf(a0, b, c);
        a1 = fmaf(a1, b, c);
        a2 = fmaf(a2, b, c);
        a3 = fmaf(a3, b, c);
    }
    // Never true in practice; the store keeps the compiler from dropping the loop.
    if (a0 + a1 + a2 + a3 == -1.0f) sink[0] = a0;
}
