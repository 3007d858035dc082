// hostfn: host functions in stream order through the runtime. cudaLaunchHostFunc and
// cudaStreamAddCallback between kernels and copies on two streams: each host function sees
// the results of the work queued before it (read from pinned memory), runs before the work
// queued after it, and the host functions of one stream run in the order they were queued.
#include "common.h"
#include "../kernels/kernels.cu"

#define STEPS 8

struct step {
    int stream, index;
    const unsigned *seen; // pinned word the host function reads
    unsigned want;        // what it must hold when the function runs
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int next_index[2]; // guarded by lock: the index each stream's next function must have
static int failures;      // guarded by lock
static unsigned observed[2][STEPS]; // guarded by lock

static void CUDART_CB host_fn(void *arg)
{
    struct step *s = (struct step *)arg;
    pthread_mutex_lock(&lock);
    observed[s->stream][s->index] = *(volatile const unsigned *)s->seen;
    if (next_index[s->stream]++ != s->index || observed[s->stream][s->index] != s->want) failures++;
    pthread_mutex_unlock(&lock);
}

static void CUDART_CB callback(cudaStream_t stream, cudaError_t status, void *arg)
{
    (void)stream;
    if (status != cudaSuccess) {
        pthread_mutex_lock(&lock);
        failures++;
        pthread_mutex_unlock(&lock);
    }
    host_fn(arg);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    t_init("hostfn", 300);
    CHECK(cudaSetDevice(0));
    cudaStream_t st[2];
    CHECK(cudaStreamCreate(&st[0]));
    CHECK(cudaStreamCreateWithFlags(&st[1], cudaStreamNonBlocking));
    unsigned *dev[2], *pin[2];
    static struct step steps[2][STEPS];
    for (int s = 0; s < 2; s++) {
        CHECK(cudaMalloc(&dev[s], sizeof(unsigned)));
        CHECK(cudaMallocHost(&pin[s], sizeof(unsigned)));
        *pin[s] = 0;
        CHECK(cudaMemsetAsync(dev[s], 0, sizeof(unsigned), st[s]));
    }
    // Per step on each stream: a kernel bumps the device word, a copy brings it to pinned
    // memory, then a host function (odd steps: a stream callback) checks the value.
    for (int i = 0; i < STEPS; i++)
        for (int s = 0; s < 2; s++) {
            inc_u32<<<1, 32, 0, st[s]>>>(dev[s], 1ull);
            CHECK_LAUNCH();
            CHECK(cudaMemcpyAsync(pin[s], dev[s], sizeof(unsigned), cudaMemcpyDeviceToHost, st[s]));
            steps[s][i] = (struct step){s, i, pin[s], (unsigned)(i + 1)};
            if (i % 2)
                CHECK(cudaStreamAddCallback(st[s], callback, &steps[s][i], 0));
            else
                CHECK(cudaLaunchHostFunc(st[s], host_fn, &steps[s][i]));
        }
    for (int s = 0; s < 2; s++)
        CHECK(cudaStreamSynchronize(st[s]));
    pthread_mutex_lock(&lock);
    int fails = failures, ran0 = next_index[0], ran1 = next_index[1];
    pthread_mutex_unlock(&lock);
    REQUIRE(ran0 == STEPS && ran1 == STEPS, "host functions run: %d and %d of %d", ran0, ran1,
            STEPS);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < STEPS; i++)
            REQUIRE(observed[s][i] == (unsigned)(i + 1), "stream %d step %d saw %u, expected %d", s,
                    i, observed[s][i], i + 1);
    REQUIRE(fails == 0, "%d host functions ran out of order or saw a wrong value", fails);
    t_ok("%d host functions per stream, in order, after the work before them", STEPS);

    // Work queued after a host function waits for it: the function sets a pinned word that
    // a copy queued after it carries to the device.
    unsigned *gate;
    CHECK(cudaMallocHost(&gate, sizeof(unsigned)));
    *gate = 0;
    struct setter {
        static void CUDART_CB run(void *p)
        {
            *(volatile unsigned *)p = 4242u;
        }
    };
    CHECK(cudaLaunchHostFunc(st[1], setter::run, gate));
    CHECK(cudaMemcpyAsync(dev[1], gate, sizeof(unsigned), cudaMemcpyHostToDevice, st[1]));
    unsigned back = 0;
    CHECK(cudaStreamSynchronize(st[1]));
    CHECK(cudaMemcpy(&back, dev[1], sizeof(back), cudaMemcpyDeviceToHost));
    REQUIRE(back == 4242u, "the copy after the host function carried %u", back);
    t_ok("work after a host function waits for it");

    for (int s = 0; s < 2; s++) {
        CHECK(cudaStreamDestroy(st[s]));
        CHECK(cudaFree(dev[s]));
        CHECK(cudaFreeHost(pin[s]));
    }
    CHECK(cudaFreeHost(gate));
    t_pass();
}
