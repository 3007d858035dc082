// uvm_phases: an OpenACC-style (-gpu=managed) or Kokkos-UVM-style program through the runtime
// (issue 31): six cudaMallocManaged arrays of MIB MiB each, no explicit copies. The host
// initialises them, then 2000 launches of five kernels over them (an axpy, a shift, a
// two-point stencil sum, two integer updates); every 200 launches a cudaDeviceSynchronize,
// a host check of a few elements of every array and a host pass over one array (the host's
// turn, as such codes take it between phases); at the end a full host verification and a
// checksum, which must be the same natively and through the shim. With --time it also prints
// `metric uvm_total_s <s> s` for the whole run (after the checksum; left out by default
// because the test tiers compare outputs, and a time differs from run to run).
//   uvm_phases [MIB [--time]]   (MIB: default 16)
#include "common.h"
#include "../kernels/kernels.cu"

#include <time.h>

enum { KERNELS = 5, LAUNCHES = 2000, CHECK_EVERY = 200 };

struct arrays {
    float *x, *y, *z, *w; // x the host's; y += x; z[i] = x[i + 1]; w = y + z
    int *p;               // p = p * 1 + 3 every step
    unsigned *c;          // c += 1 every step, and the host adds 1 at every check
};

// What element i of each array holds after `steps` steps and `checks` host passes.
static float want_x(size_t i)
{
    return (float)(i % 16);
}

static void expect(const struct arrays *a, size_t n, size_t i, unsigned steps, unsigned checks)
{
    float x1 = i + 1 < n ? want_x(i + 1) : 0.0f, y = (float)steps * want_x(i);
    int p = (int)(i % 100) + 3 * (int)steps;
    unsigned c = (unsigned)(i % 1000) + steps + checks;
    REQUIRE(a->x[i] == want_x(i) && a->y[i] == y, "step %u: x[%zu] %g y %g, want %g %g", steps, i,
            a->x[i], a->y[i], want_x(i), y);
    REQUIRE(steps == 0 || (a->z[i] == x1 && a->w[i] == y + x1), "step %u: z[%zu] %g w %g", steps, i,
            a->z[i], a->w[i]);
    REQUIRE(a->p[i] == p && a->c[i] == c, "step %u: p[%zu] %d c %u, want %d %u", steps, i, a->p[i],
            a->c[i], p, c);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
    t_init("uvm_phases", 600);
    int mib = argc > 1 ? atoi(argv[1]) : 16;
    REQUIRE(mib >= 1 && mib <= 4096, "bad size '%s' (MiB)", argv[1]);
    int timed = argc > 2 && strcmp(argv[2], "--time") == 0;
    double t0 = now_s();
    CHECK(cudaSetDevice(0));
    size_t n = ((size_t)mib << 20) / 4;
    struct arrays a;
    CHECK(cudaMallocManaged(&a.x, n * 4));
    CHECK(cudaMallocManaged(&a.y, n * 4));
    CHECK(cudaMallocManaged(&a.z, n * 4));
    CHECK(cudaMallocManaged(&a.w, n * 4));
    CHECK(cudaMallocManaged(&a.p, n * 4));
    CHECK(cudaMallocManaged(&a.c, n * 4));
    for (size_t i = 0; i < n; i++) { // the host initialises everything
        a.x[i] = want_x(i);
        a.y[i] = 0.0f;
        a.z[i] = a.w[i] = 0.0f;
        a.p[i] = (int)(i % 100);
        a.c[i] = (unsigned)(i % 1000);
    }
    t_ok("six managed arrays of %d MiB initialised by the host", mib);

    unsigned blocks = (unsigned)((n + 255) / 256), steps = 0, checks = 0;
    for (unsigned l = 0; l < LAUNCHES; l += KERNELS) {
        saxpy<<<blocks, 256>>>(1.0f, a.x, a.y, (int)n);
        copy_u8<<<t_blocks_for(n * 4, 256), 256>>>((const unsigned char *)(a.x + 1),
                                                   (unsigned char *)a.z, (n - 1) * 4);
        vec_add<<<blocks, 256>>>(a.y, a.z, a.w, (int)n);
        mul_add_i32<<<t_blocks_for(n, 256), 256>>>(a.p, 1, 3, n);
        inc_u32<<<t_blocks_for(n, 256), 256>>>(a.c, n);
        CHECK_LAUNCH();
        steps++;
        if ((l + KERNELS) % CHECK_EVERY) continue;
        CHECK(cudaDeviceSynchronize());
        for (size_t k = 0; k < 8; k++) // a few elements of every array
            expect(&a, n, (k * 2654435761u + steps) % n, steps, checks);
        expect(&a, n, n - 1, steps, checks);
        for (size_t i = 0; i < n; i++) // the host's pass over one array
            a.c[i] += 1;
        checks++;
    }
    CHECK(cudaDeviceSynchronize());
    t_ok("%d launches of %d kernels, a host check and pass every %d", LAUNCHES, KERNELS,
         CHECK_EVERY);

    unsigned long long sum = 0;
    for (size_t i = 0; i < n; i++) { // the full verification
        expect(&a, n, i, steps, checks);
        sum = sum * 31 + (unsigned long long)a.y[i] + (unsigned long long)a.w[i] +
              (unsigned)a.p[i] + a.c[i];
    }
    t_ok("every element of every array verified by the host");
    printf("uvm_phases: %d MiB, %u steps, checksum %016llx\n", mib, steps, sum);
    void *all[] = {a.x, a.y, a.z, a.w, a.p, a.c};
    for (void *p : all)
        CHECK(cudaFree(p));
    if (timed) printf("metric uvm_total_s %.3f s\n", now_s() - t0);
    t_pass();
}
