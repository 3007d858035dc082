/* Helpers shared by the test programs: see common.h for the output contract. */
#include "tests/progs/common.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <time.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

static const char *prog_name = "?";
static unsigned watchdog_secs;
/* The last check that passed, for the watchdog's message; written under out_lock, read
 * without it by the signal handler (a torn name is better than no hint). */
static char last_ok[160] = "(none)";
static pthread_mutex_t out_lock = PTHREAD_MUTEX_INITIALIZER;

static void put_str(char *buf, size_t cap, size_t *len, const char *s)
{
    while (*s && *len + 1 < cap)
        buf[(*len)++] = *s++;
    buf[*len] = 0;
}

/* SIGALRM: the program hung; say where it got to, with async-signal-safe calls only. */
static void on_watchdog(int sig)
{
    char buf[512], num[16];
    size_t len = 0;
    int n = 0;
    unsigned v = watchdog_secs;

    (void)sig;
    do {
        num[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v && n < 15);
    buf[0] = 0;
    put_str(buf, sizeof buf, &len, "FAIL ");
    put_str(buf, sizeof buf, &len, prog_name);
    put_str(buf, sizeof buf, &len, ": watchdog: still running after ");
    while (n > 0 && len + 1 < sizeof buf)
        buf[len++] = num[--n];
    buf[len] = 0;
    put_str(buf, sizeof buf, &len, " s; last ok: ");
    put_str(buf, sizeof buf, &len, last_ok);
    put_str(buf, sizeof buf, &len, "\n");
    if (write(STDOUT_FILENO, buf, len) < 0) {
        /* nothing more to do: exiting anyway */
    }
    _exit(1);
}

void t_init(const char *prog, unsigned watchdog_s)
{
    prog_name = prog;
    setvbuf(stdout, NULL, _IOLBF, 0);
    watchdog_secs = watchdog_s;
    if (watchdog_s) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_watchdog;
        sigaction(SIGALRM, &sa, NULL);
        alarm(watchdog_s);
    }
}

const char *t_prog(void)
{
    return prog_name;
}

const char *t_errname(CUresult r)
{
    const char *s = NULL;
    if (cuGetErrorName(r, &s) != CUDA_SUCCESS || !s) return "?";
    return s;
}

void t_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&out_lock);
    printf("FAIL %s: %s:%d: ", prog_name, file, line);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(1);
}

void t_check(CUresult r, const char *call, const char *file, int line)
{
    if (r != CUDA_SUCCESS) t_fail(file, line, "%s returned %s (%d)", call, t_errname(r), (int)r);
}

/* MPSSHIM_TEST_PROBE=1: an EXPECT that does not hold is reported on stderr and the program
 * goes on, so that one native run lists every result the real driver gives that a test
 * expected otherwise (how expectations are checked against a GPU; never in a test run). */
static int probe_mode(void)
{
    static int mode = -1;
    if (mode < 0) {
        const char *v = getenv("MPSSHIM_TEST_PROBE");
        mode = v && *v == '1';
    }
    return mode;
}

void t_expect(CUresult r, CUresult want, const char *call, const char *file, int line)
{
    if (r != want && probe_mode()) {
        fprintf(stderr, "PROBE %s:%d: %s returned %s (%d), expected %s (%d)\n", file, line, call,
                t_errname(r), (int)r, t_errname(want), (int)want);
        return;
    }
    if (r != want)
        t_fail(file, line, "%s returned %s (%d), expected %s (%d)", call, t_errname(r), (int)r,
               t_errname(want), (int)want);
}

CUresult t_expect_err(CUresult r, const char *call, const char *file, int line)
{
    if (r == CUDA_SUCCESS) t_fail(file, line, "%s returned CUDA_SUCCESS, expected an error", call);
    return r;
}

void t_ok(const char *fmt, ...)
{
    va_list ap;
    pthread_mutex_lock(&out_lock);
    va_start(ap, fmt);
    vsnprintf(last_ok, sizeof last_ok, fmt, ap);
    va_end(ap);
    printf("ok %s\n", last_ok);
    fflush(stdout);
    pthread_mutex_unlock(&out_lock);
}

void t_pass(void)
{
    printf("PASS %s\n", prog_name);
    fflush(stdout);
    exit(0);
}

void t_skip(const char *fmt, ...)
{
    va_list ap;
    printf("SKIP %s: ", prog_name);
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    printf("\n");
    fflush(stdout);
    exit(T_SKIP_EXIT);
}

int t_has_flag(int argc, char **argv, const char *flag)
{
    for (int i = 1; i < argc; i++)
        if (strcmp(argv[i], flag) == 0) return 1;
    return 0;
}

void t_setup(CUdevice *dev, CUcontext *ctx)
{
    CHECK(cuInit(0));
    CHECK(cuDeviceGet(dev, 0));
    CHECK(cuDevicePrimaryCtxRetain(ctx, *dev));
    CHECK(cuCtxSetCurrent(*ctx));
}

/* The kernel directory: $MPSSHIM_TEST_KERNELS, else the directory of this executable. */
static void kernel_dir(char *out, size_t cap)
{
    const char *env = getenv("MPSSHIM_TEST_KERNELS");
    if (env && *env) {
        snprintf(out, cap, "%s", env);
        return;
    }
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0) t_fail(__FILE__, __LINE__, "readlink /proc/self/exe: %s", strerror(errno));
    out[n] = 0;
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = 0;
    else
        snprintf(out, cap, ".");
}

void *t_read_kernel_file(const char *name, size_t *len)
{
    char dir[PATH_MAX], path[PATH_MAX + 256];
    kernel_dir(dir, sizeof dir);
    snprintf(path, sizeof path, "%s/%s", dir, name);

    FILE *f = fopen(path, "rb");
    if (!f)
        t_fail(__FILE__, __LINE__, "cannot open kernel file %s: %s (set MPSSHIM_TEST_KERNELS)",
               name, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    REQUIRE(buf, "out of host memory reading %s", name);
    for (;;) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        buf = realloc(buf, cap + 1);
        REQUIRE(buf, "out of host memory reading %s", name);
    }
    REQUIRE(!ferror(f), "cannot read kernel file %s", name);
    fclose(f);
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}

CUmodule t_load_module(const char *name)
{
    CUmodule mod;
    void *image = t_read_kernel_file(name, NULL);
    CHECK(cuModuleLoadData(&mod, image));
    free(image);
    return mod;
}

CUfunction t_get_function(CUmodule mod, const char *name)
{
    CUfunction f;
    CUresult r = cuModuleGetFunction(&f, mod, name);
    if (r != CUDA_SUCCESS)
        t_fail(__FILE__, __LINE__, "cuModuleGetFunction(%s) returned %s (%d)", name, t_errname(r),
               (int)r);
    return f;
}

unsigned t_blocks_for(uint64_t n, unsigned block)
{
    uint64_t b = (n + block - 1) / block;
    if (b < 1) b = 1;
    if (b > 1024) b = 1024;
    return (unsigned)b;
}

void t_fill_pattern(void *p, size_t bytes, uint32_t seed)
{
    uint8_t *b = p;
    size_t words = bytes / 4, i;
    for (i = 0; i < words; i++) {
        uint32_t v = t_pattern_at(seed, i);
        memcpy(b + 4 * i, &v, 4); /* little-endian host, as the GPU */
    }
    if (bytes % 4) {
        uint32_t v = t_pattern_at(seed, words);
        memcpy(b + 4 * words, &v, bytes % 4);
    }
}

size_t t_pattern_mismatch(const void *p, size_t bytes, uint32_t seed)
{
    const uint8_t *b = p;
    size_t words = bytes / 4, i;
    for (i = 0; i < words; i++) {
        uint32_t v = t_pattern_at(seed, i), got;
        memcpy(&got, b + 4 * i, 4);
        if (got != v) break;
    }
    for (size_t k = 4 * i; k < bytes; k++) {
        uint32_t v = t_pattern_at(seed, k / 4);
        if (b[k] != (uint8_t)(v >> (8 * (k % 4)))) return k;
    }
    return SIZE_MAX;
}

size_t t_bytes_mismatch(const void *p, size_t bytes, uint8_t value)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < bytes; i++)
        if (b[i] != value) return i;
    return SIZE_MAX;
}

void t_write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t w = write(fd, c, n);
        if (w < 0 && errno == EINTR) continue;
        REQUIRE(w > 0, "pipe write: %s", strerror(errno));
        c += w;
        n -= (size_t)w;
    }
}

int t_read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t r = read(fd, c, n);
        if (r < 0 && errno == EINTR) continue;
        REQUIRE(r >= 0, "pipe read: %s", strerror(errno));
        if (r == 0) return 0;
        c += r;
        n -= (size_t)r;
    }
    return 1;
}

void t_say(int fd, char c)
{
    t_write_all(fd, &c, 1);
}

void t_hear(int fd, char want, const char *who)
{
    char c = 0;
    REQUIRE(t_read_all(fd, &c, 1) && c == want, "%s: expected '%c' from the other side", who, want);
}

void t_send_fd(int sock, int fd)
{
    char byte = 'f';
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    memset(&u, 0, sizeof u);
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    REQUIRE(sendmsg(sock, &m, 0) == 1, "sendmsg: %s", strerror(errno));
}

int t_recv_fd(int sock)
{
    char byte;
    struct iovec iov = {.iov_base = &byte, .iov_len = 1};
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(int))];
    } u;
    struct msghdr m = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof u.buf};
    REQUIRE(recvmsg(sock, &m, 0) == 1, "recvmsg: %s", strerror(errno));
    struct cmsghdr *c = CMSG_FIRSTHDR(&m);
    REQUIRE(c && c->cmsg_type == SCM_RIGHTS, "no descriptor came");
    int fd;
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
    return fd;
}

double t_now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
