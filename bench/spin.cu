// Benchmark kernel (bench/overlap.c): thread 0 of EVERY block spins `ns` nanoseconds on the
// GPU's global timer, so that a grid of B blocks keeps B SMs busy for a known time whatever
// else runs. (tests' delay_set spins in block 0 only.) Built to PTX by bench/bench.mk.
extern "C" __global__ void spin_ns(unsigned long long ns)
{
    if (threadIdx.x == 0) {
        unsigned long long start, now;
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
        do {
            asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
        } while (now - start < ns);
    }
}
