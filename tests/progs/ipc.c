/* ipc [--shim]: memory and events shared between two processes through IPC handles.
 *
 * The process forks before any CUDA call; A (the parent) exports, B (the child) opens.
 * Default: what the driver promises, so the output is the same natively and through the
 * shim: A's data reaches B through the opened address, B's writes reach A, ordered by an
 * interprocess event; opening twice gives the same address, closing is counted; A cannot
 * open its own handle; handles of pool memory and of events that are not interprocess
 * are refused.
 * --kill: B is killed while it holds A's memory and event open; A's still work and go
 * when A frees them (the CI tier checks the server's memory afterwards).
 * --shim: what only the shim promises (natively it is undefined or the driver's business):
 * a forged handle is refused; memory A frees while B holds it stays B's until B closes it,
 * and no new open of it succeeds; when A leaves, B's grant ends (calls naming the memory
 * fail), and closing it still succeeds. The CI tier checks afterwards that the server's
 * memory is back where it started. */
#include "tests/progs/common.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define BYTES (1 << 20)
#define SEED_A 0xa0a0a
#define SEED_B 0xb0b0b

struct msg {
    CUipcMemHandle mem, mem2;
    CUipcEventHandle ev;
};

static int shim_mode, kill_mode;
static int to_a[2], to_b[2]; /* pipes: B -> A, A -> B */

static CUdeviceptr alloc_pattern(uint32_t seed, void *host)
{
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    t_fill_pattern(host, BYTES, seed);
    CHECK(cuMemcpyHtoD(d, host, BYTES));
    /* From pageable memory the copy may still be on its way when cuMemcpyHtoD returns:
     * another process sees the bytes only after a synchronisation. */
    CHECK(cuCtxSynchronize());
    return d;
}

static void check_pattern(CUdeviceptr d, uint32_t seed, void *host, const char *what)
{
    memset(host, 0, BYTES);
    CHECK(cuMemcpyDtoH(host, d, BYTES));
    size_t bad = t_pattern_mismatch(host, BYTES, seed);
    REQUIRE(bad == SIZE_MAX, "%s: byte %zu differs", what, bad);
}

/* ---------------------------------------------------------------- B: opens */

static void importer(void)
{
    struct msg m;
    REQUIRE(t_read_all(to_b[0], &m, sizeof m), "B: A sent no handles");
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    void *host = malloc(BYTES);
    REQUIRE(host, "out of host memory");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    CUdeviceptr p, again;
    CHECK(cuIpcOpenMemHandle(&p, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    check_pattern(p, SEED_A, host, "B: A's data through the opened address");
    t_ok("B: A's data through the opened address");
    CHECK(cuIpcOpenMemHandle(&again, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    REQUIRE(again == p, "B: a second open gave another address");
    t_ok("B: a second open gives the same address");
    CUdeviceptr base;
    size_t size;
    CHECK(cuMemGetAddressRange(&base, &size, p + 100));
    REQUIRE(base == p && size == BYTES, "B: address range %zu bytes", size);
    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, p));
    REQUIRE(type == CU_MEMORYTYPE_DEVICE, "B: memory type %u", type);
    t_ok("B: the opened memory is device memory of %d bytes", BYTES);

    if (shim_mode) {
        CUipcMemHandle forged = m.mem;
        CUdeviceptr q;
        for (int i = 0; i < CU_IPC_HANDLE_SIZE; i += 8) {
            forged = m.mem;
            forged.reserved[i] ^= 0x40;
            CUresult r = cuIpcOpenMemHandle(&q, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
            /* A changed byte the handle does not use may still open the same memory. */
            REQUIRE(r == CUDA_ERROR_INVALID_VALUE || (r == CUDA_SUCCESS && q == p),
                    "B: forged handle (byte %d) gave %s", i, t_errname(r));
            if (r == CUDA_SUCCESS) CHECK(cuIpcCloseMemHandle(q));
        }
        memset(&forged, 0, sizeof forged);
        EXPECT(cuIpcOpenMemHandle(&q, forged, 0), CUDA_ERROR_INVALID_VALUE);
        EXPECT(cuIpcOpenMemHandle(&q, m.mem, 7), CUDA_ERROR_INVALID_VALUE);
        t_ok("B: forged handles and bad flags refused");
    }

    CUevent ev;
    CHECK(cuIpcOpenEventHandle(&ev, m.ev));
    t_fill_pattern(host, BYTES, SEED_B);
    CHECK(cuMemcpyHtoDAsync(p, host, BYTES, s));
    CHECK(cuEventRecord(ev, s));
    t_ok("B: wrote its data and recorded the interprocess event");
    t_say(to_a[1], 'w');
    if (kill_mode) {
        t_hear(to_b[0], 'k', "B");
        kill(getpid(), SIGKILL);
    }

    if (shim_mode) {
        CUdeviceptr p2;
        CHECK(cuIpcOpenMemHandle(&p2, m.mem2, 0));
        t_hear(to_b[0], 'f', "B");
        /* A freed its allocation and destroyed its event: B's opens still hold them. */
        check_pattern(p, SEED_B, host, "B: memory A freed, still open here");
        CHECK(cuEventRecord(ev, s));
        CHECK(cuEventSynchronize(ev));
        CUdeviceptr q;
        EXPECT(cuIpcOpenMemHandle(&q, m.mem, 0), CUDA_ERROR_INVALID_VALUE);
        t_ok("B: what A let go stays usable here until closed; no new open of it");
        CHECK(cuIpcCloseMemHandle(p));
        CHECK(cuIpcCloseMemHandle(p));
        EXPECT_ERR(cuIpcCloseMemHandle(p));
        t_say(to_a[1], 'c');
        /* A leaves with its second allocation still open here: the grant ends. */
        char c;
        REQUIRE(!t_read_all(to_b[0], &c, 1), "B: A said more than expected");
        CUresult r = CUDA_SUCCESS;
        for (int i = 0; i < 500 && r == CUDA_SUCCESS; i++) {
            r = cuMemcpyDtoH(host, p2, 16);
            if (r == CUDA_SUCCESS) {
                struct timespec ts = {0, 10 * 1000 * 1000};
                nanosleep(&ts, NULL);
            }
        }
        REQUIRE(r != CUDA_SUCCESS, "B: memory of a departed exporter still usable");
        CHECK(cuIpcCloseMemHandle(p2));
        CHECK(cuEventRecord(ev, s)); /* destroyed by A before it left: still B's */
        CHECK(cuEventDestroy(ev));
        t_ok("B: the grant ended when A left; closing it still works");
    } else {
        t_hear(to_b[0], 'r', "B");
        CHECK(cuIpcCloseMemHandle(p));
        check_pattern(p, SEED_B, host, "B: still open once");
        CHECK(cuIpcCloseMemHandle(p));
        EXPECT_ERR(cuIpcCloseMemHandle(p));
        t_ok("B: each open is closed once");
        CHECK(cuEventDestroy(ev));
    }
    CHECK(cuStreamDestroy(s));
    free(host);
    t_pass();
}

/* ---------------------------------------------------------------- A: exports */

static void exporter(pid_t b)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    void *host = malloc(BYTES);
    REQUIRE(host, "out of host memory");
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));

    struct msg m;
    memset(&m, 0, sizeof m);
    CUdeviceptr d = alloc_pattern(SEED_A, host), d2 = 0;
    CUipcMemHandle h2;
    CHECK(cuIpcGetMemHandle(&m.mem, d));
    CHECK(cuIpcGetMemHandle(&h2, d));
    REQUIRE(memcmp(&m.mem, &h2, sizeof h2) == 0, "A: two handles of one allocation differ");
    t_ok("A: one allocation, one handle");
    CUdeviceptr own;
    EXPECT(cuIpcOpenMemHandle(&own, m.mem, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS),
           CUDA_ERROR_INVALID_CONTEXT);
    t_ok("A: its own handle cannot be opened here");
    CUdeviceptr pooled;
    CHECK(cuMemAllocAsync(&pooled, 4096, s));
    EXPECT_ERR(cuIpcGetMemHandle(&h2, pooled));
    CHECK(cuMemFreeAsync(pooled, s));
    t_ok("A: no handle for stream-ordered memory");

    CUevent timed, plain, ev;
    EXPECT(cuEventCreate(&timed, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
    CUipcEventHandle eh;
    EXPECT_ERR(cuIpcGetEventHandle(&eh, plain));
    CHECK(cuEventDestroy(plain));
    CHECK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CHECK(cuIpcGetEventHandle(&m.ev, ev));
    t_ok("A: only interprocess events without timing have handles");
    if (shim_mode) {
        d2 = alloc_pattern(SEED_A, host);
        CHECK(cuIpcGetMemHandle(&m.mem2, d2));
    }
    t_write_all(to_b[1], &m, sizeof m);

    t_hear(to_a[0], 'w', "A");
    CHECK(cuStreamWaitEvent(s, ev, 0));
    CHECK(cuMemcpyDtoHAsync(host, d, BYTES, s));
    CHECK(cuStreamSynchronize(s));
    size_t bad = t_pattern_mismatch(host, BYTES, SEED_B);
    REQUIRE(bad == SIZE_MAX, "A: B's data, byte %zu differs", bad);
    t_ok("A: B's data, ordered by the interprocess event");

    if (shim_mode) {
        CHECK(cuMemFree(d));
        CHECK(cuEventDestroy(ev));
        CUdeviceptr d3;
        CHECK(cuMemAlloc(&d3, BYTES));
        REQUIRE(d3 != d, "A: the address B still holds was handed out again");
        CHECK(cuMemFree(d3));
        t_ok("A: freed what B holds; its address is not reused meanwhile");
        t_say(to_b[1], 'f');
        t_hear(to_a[0], 'c', "A");
        /* Leaves with d2 exported and open in B. */
        close(to_b[1]);
        exit(0);
    }
    int status = 0;
    if (kill_mode) {
        t_say(to_b[1], 'k');
        REQUIRE(waitpid(b, &status, 0) == b, "waitpid: %s", strerror(errno));
        REQUIRE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL, "B was not killed");
        check_pattern(d, SEED_B, host, "A: its memory after B was killed");
        CHECK(cuEventRecord(ev, s));
        CHECK(cuEventSynchronize(ev));
        t_ok("A: its memory and event work after B was killed holding them");
    } else {
        t_say(to_b[1], 'r');
        REQUIRE(waitpid(b, &status, 0) == b, "waitpid: %s", strerror(errno));
        REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "B failed (status %d)", status);
    }
    CHECK(cuMemFree(d));
    CHECK(cuEventDestroy(ev));
    CHECK(cuStreamDestroy(s));
    free(host);
    t_pass();
}

int main(int argc, char **argv)
{
    t_init("ipc", 120);
    shim_mode = t_has_flag(argc, argv, "--shim");
    kill_mode = t_has_flag(argc, argv, "--kill");
    REQUIRE(pipe(to_a) == 0 && pipe(to_b) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) {
        close(to_a[0]);
        close(to_b[1]);
        importer();
    }
    close(to_a[1]);
    close(to_b[0]);
    if (!shim_mode) {
        exporter(b);
    }
    /* --shim: A leaves early on purpose, so the parent's role runs in a second child and
     * the parent only collects both. */
    pid_t a = fork();
    REQUIRE(a >= 0, "fork: %s", strerror(errno));
    if (a == 0) exporter(b);
    close(to_a[0]);
    close(to_b[1]);
    int sa = 0, sb = 0;
    REQUIRE(waitpid(a, &sa, 0) == a && waitpid(b, &sb, 0) == b, "waitpid: %s", strerror(errno));
    REQUIRE(WIFEXITED(sa) && WEXITSTATUS(sa) == 0, "A failed (status %d)", sa);
    REQUIRE(WIFEXITED(sb) && WEXITSTATUS(sb) == 0, "B failed (status %d)", sb);
    t_pass();
}
