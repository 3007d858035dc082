/* shmreg [--truncate]: host memory shared between two processes through a /dev/shm file and
 * registered with cuMemHostRegister by both, as NCCL's shared-memory transport does
 * (misc/shmutils.cc: a file in /dev/shm, mapped shared, registered portable and mapped).
 *
 * The parent makes the file and both map it (at addresses of their own) before any CUDA
 * call. Each registers the whole
 * mapping (CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP) and asks its device
 * pointer. A fills device memory with a pattern and copies it into the shared pages; B, told
 * so, reads the pattern with the CPU from its own mapping, then copies it from its
 * registration to the device and back, and checks it; A, told so, reads B's mark. The output
 * is the same natively and through the shim.
 *
 * --truncate (through the shim: natively a truncated mapping is the process's own SIGBUS):
 * A alone registers the file, truncates it to nothing, and copies from the device into the
 * registered range, which the server's view of the file no longer covers. The copy may
 * succeed or fail; the server must live on: A's later calls are answered, and its
 * registration ends (server/memory/shmguard.c).
 *
 * --cap N (through the shim): N + 1 mappings of the file, a page each, registered one by one:
 * the first N are taken and the last is refused (CUDA_ERROR_NOT_SUPPORTED), a client's share
 * of the server's guards being N; once one is unregistered, the last is taken. */
#include "tests/progs/common.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#define BYTES (4u << 20)
/* The file and what is mapped and registered: 4 bytes more, ending inside a page, as NCCL's
 * shmSize + sizeof(int) does (its reference count lies there). */
#define FILE_BYTES (BYTES + 4u)
#define SEED 0x5e9a
#define MARK 0x6b

static int to_a[2], to_b[2];

static void setup(void)
{
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
}

static void reg(void *p, const char *who)
{
    CHECK(cuMemHostRegister(p, FILE_BYTES,
                            CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    CUdeviceptr dp = 0;
    CHECK(cuMemHostGetDevicePointer(&dp, p, 0));
    REQUIRE(dp, "%s: no device pointer", who);
    t_ok("%s: the shared mapping registered, with a device pointer", who);
}

static void b_side(int fd, unsigned char *inherited)
{
    close(to_a[0]);
    close(to_b[1]);
    /* A mapping of its own, elsewhere (made while the inherited one still holds A's
     * address): two processes rarely map a file at one address. */
    unsigned char *p = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED, "B: mmap: %s", strerror(errno));
    munmap(inherited, FILE_BYTES);
    t_hear(to_b[0], 'r', "B");
    setup();
    reg(p, "B");
    t_say(to_a[1], 'r');
    t_hear(to_b[0], 'w', "B");
    size_t bad = t_pattern_mismatch(p, BYTES, SEED);
    REQUIRE(bad == SIZE_MAX, "B: byte %zu of what A's device wrote differs", bad);
    t_ok("B: what the device wrote through A's registration read in its own mapping");
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    CHECK(cuMemcpyHtoD(d, p, BYTES));
    unsigned char *back = malloc(BYTES);
    REQUIRE(back, "out of host memory");
    CHECK(cuMemcpyDtoH(back, d, BYTES));
    REQUIRE(t_pattern_mismatch(back, BYTES, SEED) == SIZE_MAX, "B: the round trip differs");
    t_ok("B: copied from its registration to the device and back");
    p[0] = MARK;
    CHECK(cuMemHostUnregister(p));
    CHECK(cuMemFree(d));
    free(back);
    munmap(p, FILE_BYTES);
    t_say(to_a[1], 'd');
    fflush(stdout);
    _exit(0);
}

static void truncate_mode(int fd, unsigned char *p)
{
    setup();
    reg(p, "A");
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    CHECK(cuMemsetD8(d, 0x33, BYTES));
    REQUIRE(ftruncate(fd, 0) == 0, "ftruncate: %s", strerror(errno));
    CUresult r = cuMemcpyDtoH(p, d, BYTES);
    printf("A: the copy into the truncated registration: %s\n", t_errname(r));
    /* The server lives on: a new allocation and a round trip through private memory. */
    CUdeviceptr e;
    unsigned char *q = malloc(BYTES);
    REQUIRE(q, "out of host memory");
    CHECK(cuMemAlloc(&e, BYTES));
    CHECK(cuMemsetD8(e, 0x44, BYTES));
    CHECK(cuMemcpyDtoH(q, e, BYTES));
    REQUIRE(q[0] == 0x44 && q[BYTES - 1] == 0x44, "A: the server's answers after the truncation");
    t_ok("A: the server answered after the file was truncated under it");
    CHECK(cuMemHostUnregister(p));
    CHECK(cuMemFree(d));
    CHECK(cuMemFree(e));
    free(q);
    t_pass();
}

static void cap_mode(int fd, int n)
{
    setup();
    const size_t page = 4096;
    unsigned char **m = calloc((size_t)n + 1, sizeof(*m));
    REQUIRE(m, "out of host memory");
    for (int i = 0; i <= n; i++) {
        m[i] = mmap(NULL, page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)(i % 16) * 4096);
        REQUIRE(m[i] != MAP_FAILED, "mmap: %s", strerror(errno));
    }
    for (int i = 0; i < n; i++)
        CHECK(cuMemHostRegister(m[i], page, 0));
    t_ok("%d mappings of the shared file registered", n);
    EXPECT(cuMemHostRegister(m[n], page, 0), CUDA_ERROR_NOT_SUPPORTED);
    t_ok("one more refused: a client's share of the server's guards is %d", n);
    CHECK(cuMemHostUnregister(m[0]));
    CHECK(cuMemHostRegister(m[n], page, 0));
    t_ok("taken once one of them was unregistered");
    for (int i = 1; i <= n; i++)
        CHECK(cuMemHostUnregister(m[i]));
    free(m);
    t_pass();
}

int main(int argc, char **argv)
{
    t_init("shmreg", 120);
    char name[64];
    snprintf(name, sizeof(name), "/dev/shm/mpsshim-shmreg-%d", (int)getpid());
    int fd = open(name, O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    REQUIRE(fd >= 0, "%s: %s", name, strerror(errno));
    unlink(name);
    REQUIRE(ftruncate(fd, FILE_BYTES) == 0, "ftruncate: %s", strerror(errno));
    unsigned char *p = mmap(NULL, FILE_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    REQUIRE(p != MAP_FAILED, "mmap: %s", strerror(errno));
    if (t_has_flag(argc, argv, "--truncate")) truncate_mode(fd, p);
    for (int i = 1; i + 1 < argc; i++)
        if (strcmp(argv[i], "--cap") == 0) cap_mode(fd, atoi(argv[i + 1]));
    REQUIRE(pipe(to_a) == 0 && pipe(to_b) == 0, "pipe: %s", strerror(errno));
    fflush(stdout);
    pid_t b = fork();
    REQUIRE(b >= 0, "fork: %s", strerror(errno));
    if (b == 0) b_side(fd, p);
    close(to_a[1]);
    close(to_b[0]);
    setup();
    reg(p, "A");
    t_say(to_b[1], 'r');
    t_hear(to_a[0], 'r', "A");
    void *pattern = malloc(BYTES);
    REQUIRE(pattern, "out of host memory");
    t_fill_pattern(pattern, BYTES, SEED);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, BYTES));
    CHECK(cuMemcpyHtoD(d, pattern, BYTES));
    CHECK(cuMemcpyDtoH(p, d, BYTES));
    t_ok("A: the device's bytes copied into the shared registration");
    t_say(to_b[1], 'w');
    t_hear(to_a[0], 'd', "A");
    int st = 0;
    REQUIRE(waitpid(b, &st, 0) == b && WIFEXITED(st) && WEXITSTATUS(st) == 0, "B failed (%d)", st);
    REQUIRE(p[0] == MARK, "A: B's mark not seen");
    t_ok("A: B's mark seen in the shared pages");
    CHECK(cuMemHostUnregister(p));
    CHECK(cuMemFree(d));
    free(pattern);
    t_pass();
}
