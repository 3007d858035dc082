/* hostreg_shrink: through the shim only. Registers host memory, has a stream wait on it, then
 * tries what a hostile program can do to the memfd the shim moved those pages into (found in
 * /proc/self/fd as memfd:mpsshim-registered): shrink it to 0, which must fail (the shim seals
 * it: the server maps the same pages and stores into them to end that wait when the program
 * leaves, and a store past the end of a shrunk memfd is SIGBUS, for the whole server), and
 * punch a hole in it (allowed; the server's stores then land in fresh zeroed pages). Then it
 * kills itself with the wait pending; tests/hostreg_shrink.sh checks that the server lives. */
#define _GNU_SOURCE
#include "tests/progs/common.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BYTES (256u << 10)

/* The descriptor of this process's memfd named `name`, or -1. */
static int find_memfd(const char *name)
{
    DIR *d = opendir("/proc/self/fd");
    if (!d) return -1;
    char want[128], path[300], got[128];
    snprintf(want, sizeof(want), "/memfd:%s", name);
    int found = -1;
    struct dirent *e;
    while (found < 0 && (e = readdir(d))) {
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t n = readlink(path, got, sizeof(got) - 1);
        if (n <= 0) continue;
        got[n] = '\0';
        if (strncmp(got, want, strlen(want)) == 0) found = atoi(e->d_name);
    }
    closedir(d);
    return found;
}

int main(void)
{
    t_init("hostreg_shrink", 60);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    unsigned char *p = aligned_alloc(4096, BYTES);
    REQUIRE(p, "out of host memory");
    memset(p, 0, BYTES);
    CHECK(cuMemHostRegister(p, BYTES, CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP));
    CUstream s;
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamWaitValue32(s, (CUdeviceptr)(uintptr_t)p, 1, CU_STREAM_WAIT_VALUE_EQ));
    EXPECT(cuStreamQuery(s), CUDA_ERROR_NOT_READY);
    t_ok("a stream waits on registered host memory");
    int fd = find_memfd("mpsshim-registered");
    REQUIRE(fd >= 0, "no memfd:mpsshim-registered among this process's descriptors");
    int shrunk = ftruncate(fd, 0) == 0;
    REQUIRE(!shrunk, "the registered memory's memfd was shrunk to 0");
    REQUIRE(errno == EPERM, "shrinking it failed with %s, not EPERM", strerror(errno));
    t_ok("its memfd cannot be shrunk (EPERM)");
    REQUIRE(fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, BYTES) == 0,
            "punching a hole: %s", strerror(errno));
    t_ok("a hole punched in it; leaving (SIGKILL) with the stream waiting");
    fflush(stdout);
    kill(getpid(), SIGKILL);
    return 1;
}
