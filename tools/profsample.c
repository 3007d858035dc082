/* libprofsample.so: a sampling profiler to preload (LD_PRELOAD), for the GPU machine, which
 * has no perf, gdb or strace. With PROFSAMPLE_DIR set, every tick of the process's CPU time
 * (ITIMER_PROF: the kernel checks CPU timers at its tick, 4 ms on the H200 machines) records
 * the interrupted instruction pointer, up to DEPTH - 1 return addresses found by following
 * the frame-pointer chain, a CLOCK_MONOTONIC time and the thread; DIR/PID.ips (one sample a
 * line: ip time tid caller...) and DIR/PID.maps (/proc/self/maps) are written every second
 * and at exit. tools/profsum.py reads them. Nothing of mpsshim runs with it.
 *
 * Why frame pointers: Ubuntu 24.04 builds its libraries with them, so a sample in libc's
 * futex or lock code names the caller that waited (mpsshim's own code with them too when
 * built with CFLAGS="-O2 -g -fno-omit-frame-pointer"). Every word of the chain is read with
 * process_vm_readv on the process itself, which answers EFAULT where a plain read of a
 * bad frame pointer (code built without them keeps anything in RBP) would crash. A leaf that
 * keeps no frame of its own (libc's system-call wrappers: syscall, sched_yield) is followed by
 * its caller's caller: the function that called it is not in the chain.
 *
 * Why the handler is installed from a thread of its own: Python puts SIGPROF back to its
 * default early in its start, after this library's constructor, and a tick then ends the
 * process. The thread installs it again whenever it finds it gone, and starts the timer only
 * after its first look. */
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <sys/uio.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>

#define MAX_SAMPLES (1u << 20) /* 4 ms ticks: over an hour of one CPU's time */
#define DEPTH 6

struct sample {
    uint64_t ip[DEPTH]; /* ip[0]: where the tick found the thread; then its callers, 0: none */
    uint64_t t;
    uint32_t tid;
};

static struct sample *buf;
static _Atomic uint32_t taken;
static char dir[512];

/* 16 bytes at p (a frame: the caller's frame pointer and the return address), or -1 where p
 * is not readable. */
static int peek(uint64_t p, uint64_t out[2])
{
    struct iovec local = {out, 16}, remote = {(void *)p, 16};
    return process_vm_readv(getpid(), &local, 1, &remote, 1, 0) == 16 ? 0 : -1;
}

static void on_tick(int sig, siginfo_t *si, void *ucv)
{
    (void)sig;
    (void)si;
    uint32_t i = atomic_fetch_add(&taken, 1);
    if (i >= MAX_SAMPLES) return;
    const ucontext_t *uc = ucv;
    struct sample *s = &buf[i];
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    s->t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
    s->tid = (uint32_t)gettid();
    s->ip[0] = (uint64_t)uc->uc_mcontext.gregs[REG_RIP];
    uint64_t bp = (uint64_t)uc->uc_mcontext.gregs[REG_RBP];
    uint64_t sp = (uint64_t)uc->uc_mcontext.gregs[REG_RSP];
    for (int k = 1; k < DEPTH; k++) {
        uint64_t frame[2];
        /* A frame lies above the stack pointer, within 1 MiB of the last one, aligned; the
         * chain only goes up the stack. */
        if (!bp || bp < sp || bp - sp > (1u << 20) || (bp & 7) || peek(bp, frame)) {
            s->ip[k] = 0;
            bp = 0;
            continue;
        }
        s->ip[k] = frame[1];
        sp = bp;
        bp = frame[0] > bp ? frame[0] : 0;
    }
}

static void dump(void)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%d.ips", dir, (int)getpid());
    FILE *f = fopen(path, "w");
    if (!f) return;
    uint32_t n = atomic_load(&taken);
    if (n > MAX_SAMPLES) n = MAX_SAMPLES;
    for (uint32_t i = 0; i < n; i++) {
        fprintf(f, "%lx %lu %u", (unsigned long)buf[i].ip[0], (unsigned long)buf[i].t, buf[i].tid);
        for (int k = 1; k < DEPTH; k++)
            fprintf(f, " %lx", (unsigned long)buf[i].ip[k]);
        fputc('\n', f);
    }
    fclose(f);
    snprintf(path, sizeof(path), "%s/%d.maps", dir, (int)getpid());
    FILE *out = fopen(path, "w"), *in = fopen("/proc/self/maps", "r");
    char line[1024];
    while (out && in && fgets(line, sizeof(line), in))
        fputs(line, out);
    if (out) fclose(out);
    if (in) fclose(in);
}

static void *watcher(void *arg)
{
    (void)arg;
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, NULL); /* ticks go to the program's threads */
    for (unsigned k = 0;; k++) {
        struct sigaction cur;
        sigaction(SIGPROF, NULL, &cur);
        if (!(cur.sa_flags & SA_SIGINFO) || cur.sa_sigaction != on_tick) {
            struct sigaction sa = {0};
            sa.sa_sigaction = on_tick;
            sa.sa_flags = SA_SIGINFO | SA_RESTART;
            sigaction(SIGPROF, &sa, NULL);
        }
        if (k == 1) {
            struct itimerval every = {{0, 1000}, {0, 1000}};
            setitimer(ITIMER_PROF, &every, NULL);
        }
        usleep(100 * 1000);
        if (k % 10 == 9) dump();
    }
    return NULL;
}

static void last_dump(void)
{
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_PROF, &off, NULL);
    signal(SIGPROF, SIG_IGN);
    dump();
}

__attribute__((constructor)) static void start(void)
{
    const char *d = getenv("PROFSAMPLE_DIR");
    if (!d || !*d) return;
    snprintf(dir, sizeof(dir), "%s", d);
    if (!(buf = calloc(MAX_SAMPLES, sizeof(*buf)))) return;
    pthread_t t;
    if (pthread_create(&t, NULL, watcher, NULL) != 0) return;
    pthread_detach(t);
    atexit(last_dump);
}
