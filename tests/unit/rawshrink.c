/* The raw client's shrink mode (tests/unit/rawclient.c, run by tests/hostreg_shrink.sh):
 * cuMemHostRegister's protocol with what a hostile client may send: shared memory that can
 * shrink (an unsealed memfd, one sealed against growing only, a file when the pipe directory
 * is on tmpfs) is taken and guarded (server/memory/shmguard.c); a file on disk is refused; a
 * memfd sealed against shrinking is taken. Then it shrinks what it can of those taken, and
 * punches holes, while streams wait on them: the server must live on. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "channel/fdpass.h"
#include "tests/unit/rawclient.h"

/* cuMemHostRegister as the shim sends it: fd on the socket, then the record naming the
 * pages [addr, addr + bytes), which the server maps from fd at the same address. */
static CUresult register_fd(struct raw_session *x, int fd, uint64_t addr, uint64_t bytes)
{
    uint8_t one = 1;
    if (chan_send_fd(x->sock, &one, 1, fd) != 0) return CUDA_ERROR_UNKNOWN;
    struct chan_host_register m = {.what = CHAN_HR_REGISTER,
                                   .flags =
                                       CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP,
                                   .addr = addr,
                                   .bytes = bytes};
    return raw_request(x, CHAN_OP_HOST_REGISTER, &m, sizeof(m), NULL, 0);
}

/* A file of `bytes` on disk (or wherever the pipe directory is): unlinked, never sealable. */
static int disk_file(uint64_t bytes)
{
    const char *dir = getenv("MPSSHIM_PIPE_DIRECTORY");
    int fd = open(dir ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        char path[4096];
        snprintf(path, sizeof(path), "%s/rawclient-XXXXXX", dir ? dir : "/tmp");
        if ((fd = mkstemp(path)) >= 0) unlink(path);
    }
    if (fd >= 0 && ftruncate(fd, (off_t)bytes) != 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/* A memfd of `bytes` with `seals` added (none: made without MFD_ALLOW_SEALING). */
static int memfd(const char *name, uint64_t bytes, int seals)
{
    int fd = memfd_create(name, MFD_CLOEXEC | (seals ? MFD_ALLOW_SEALING : 0));
    if (fd >= 0 &&
        (ftruncate(fd, (off_t)bytes) != 0 || (seals && fcntl(fd, F_ADD_SEALS, seals) != 0))) {
        close(fd);
        fd = -1;
    }
    return fd;
}

int raw_shrink(void)
{
    struct raw_session x;
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    if (raw_session_open(&x) != 0 ||
        raw_request(&x, CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
        fprintf(stderr, "no session\n");
        return 1;
    }
    const uint64_t bytes = 64 << 10;
    struct {
        const char *what;
        int fd, want_taken, taken, may_shrink;
    } v[] = {
        {"an unsealed memfd (guarded)", memfd("rawclient-unsealed", bytes, 0), 1, 0, 1},
        {"a file", disk_file(bytes), 0, 0, 1},
        {"a memfd sealed against growing only (guarded)",
         memfd("rawclient-grow", bytes, F_SEAL_GROW), 1, 0, 1},
        {"a memfd sealed against shrinking",
         memfd("rawclient-sealed", bytes, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), 1, 0, 0},
    };
    const int n = (int)(sizeof(v) / sizeof(v[0]));
    /* The file is shared memory, taken and guarded, where the pipe directory is on tmpfs. */
    struct statfs fs;
    if (v[1].fd >= 0 && fstatfs(v[1].fd, &fs) == 0 && fs.f_type == TMPFS_MAGIC) {
        v[1].what = "a file on tmpfs (guarded)";
        v[1].want_taken = 1;
    } else {
        v[1].what = "a file on disk";
    }
    for (int i = 0; i < n; i++) {
        /* An address of this process's own, as the shim's would be (its pages stay here). */
        void *at = mmap(NULL, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (v[i].fd < 0 || at == MAP_FAILED) {
            fprintf(stderr, "cannot make %s: %s\n", v[i].what, strerror(errno));
            return 1;
        }
        char what[96];
        snprintf(what, sizeof(what), "cuMemHostRegister of %s", v[i].what);
        CUresult r = register_fd(&x, v[i].fd, (uint64_t)(uintptr_t)at, bytes);
        if (v[i].want_taken) {
            printf("%-58s %s\n", what, r == CUDA_SUCCESS ? "taken" : shim_error_name(r));
            raw_failures += r != CUDA_SUCCESS;
        } else {
            raw_expect_refused(what, r);
        }
        if (r != CUDA_SUCCESS) continue;
        v[i].taken = 1;
        /* Its stream waits on the first word: the server ends that wait with a store when
         * this client leaves (memops.c), and the CPU test driver polls the word till then. */
        CUstream st = NULL;
        CUdeviceptr a = (CUdeviceptr)(uintptr_t)at;
        cuuint32_t one = 1;
        unsigned eq = CU_STREAM_WAIT_VALUE_EQ;
        const void *wa[] = {&st, &a, &one, &eq};
        r = raw_call(&x, SHIM_ID_cuStreamWaitValue32_v2, wa, NULL, 0);
        printf("%-58s %s\n", "  a stream waits on its first word",
               r == CUDA_SUCCESS ? "ok" : shim_error_name(r));
        raw_failures += r != CUDA_SUCCESS;
    }
    for (int i = 0; i < n; i++) {
        if (!v[i].taken) continue;
        char what[96];
        snprintf(what, sizeof(what), "then shrinking %s to 0", v[i].what);
        int shrunk = ftruncate(v[i].fd, 0) == 0;
        printf("%-58s %s\n", what,
               shrunk ? (v[i].may_shrink ? "shrunk" : "SHRUNK") : strerror(errno));
        raw_failures += shrunk != v[i].may_shrink;
        /* A hole is allowed (only F_SEAL_WRITE forbids it, and the client's own writes with
         * it): the server's next touch of those pages finds new zeroed ones. */
        snprintf(what, sizeof(what), "then punching a hole in %s", v[i].what);
        int punched =
            fallocate(v[i].fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, 0, (off_t)bytes) == 0;
        printf("%-58s %s\n", what, punched ? "punched" : strerror(errno));
    }
    /* Leaves with the waits pending: the server stores into those pages as it lets them go. */
    close(x.sock);
    printf("left with its streams waiting\n");
    return raw_failures ? 1 : 0;
}
