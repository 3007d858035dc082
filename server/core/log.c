/* MPS-format logs: "[2026-11-22 02:48:20.653 Server 1180] Client process 1159 disconnected".
 * server.log has the server's life and its clients; control.log (MPS's control daemon log:
 * there is no separate daemon here, the server answers control commands itself) has
 * server start and exit and every control command with its result.
 * A log that cannot be written (unwritable directory, full disk, file size limit) never
 * stops or blocks a running server: each file says so once on stderr and the server goes
 * on (at start, mpsshim-control -d makes it a reason not to start: srv_log_open's result).
 * SIGHUP reopens both files by name (srv_log_reopen), for log rotation. A crash (SIGSEGV,
 * SIGBUS, SIGILL, SIGFPE, SIGABRT) is logged with its stack before the process dies, so that
 * a server that vanishes under load says where (on_crash). */
#define _GNU_SOURCE
#include "server/core/server.h"
#include "server/core/log.h"
#include "channel/prof.h"

#include <dirent.h>
#include <errno.h>
#include <execinfo.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

struct log_file {
    const char *who; /* "Server" or "Control" */
    const char *name;
    int fd;
    int failed_said; /* the one stderr notice was given */
    char path[600];
};

/* Guarded by log_lock. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_file files[2] = {{.who = "Server", .name = "server.log", .fd = -1},
                                   {.who = "Control", .name = "control.log", .fd = -1}};
static int log_stderr;
static char log_dir[512];

/* Opens one file; failure is said once and leaves that log to stderr alone. 0, or -1 with
 * errno. Under log_lock. */
static int open_one(struct log_file *f, const char *dir)
{
    snprintf(f->path, sizeof(f->path), "%s/%s", dir, f->name);
    /* O_NONBLOCK: a log path that is a FIFO nobody reads must not hang the server.
     * O_NOFOLLOW: a link planted there must not make the server write where it points. */
    f->fd =
        open(f->path,
             O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY | O_NONBLOCK | O_NOFOLLOW, 0600);
    if (f->fd < 0 && !f->failed_said) {
        int e = errno;
        f->failed_said = 1;
        fprintf(stderr, "mpsshim: cannot open log %s (%s); continuing without it\n", f->path,
                strerror(e));
        errno = e;
    }
    return f->fd < 0 ? -1 : 0;
}

static void on_exit_log(int status, void *arg)
{
    (void)arg;
    if (CHAN_PROFILING) {
        char prof[256];
        chan_prof_format(prof, sizeof(prof));
        srv_log("Server profile, all workers: %s", prof);
    }
    srv_clog("Server %d exited with status %d", (int)getpid(), status);
}

/* Appends the decimal (base 10) or hexadecimal (16) digits of v to b at *n. */
static void put_num(char *b, size_t *n, size_t cap, unsigned long v, unsigned base)
{
    char d[24];
    int k = 0;
    do {
        d[k++] = "0123456789abcdef"[v % base];
        v /= base;
    } while (v && k < (int)sizeof(d));
    while (k && *n < cap)
        b[(*n)++] = d[--k];
}

static void put_str(char *b, size_t *n, size_t cap, const char *s)
{
    while (*s && *n < cap)
        b[(*n)++] = *s++;
}

/* Async-signal-safe but for backtrace(), whose first call (below, at open) loads what it
 * needs: one line and the stack into server.log (and stderr in the foreground), then the
 * default action. */
static void on_crash(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    char b[200];
    size_t n = 0;
    put_str(b, &n, sizeof(b), "[crash Server ");
    put_num(b, &n, sizeof(b), (unsigned long)getpid(), 10);
    put_str(b, &n, sizeof(b), "] the server died: signal ");
    put_num(b, &n, sizeof(b), (unsigned long)sig, 10);
    put_str(b, &n, sizeof(b), " (");
    put_str(b, &n, sizeof(b), sigabbrev_np(sig) ? sigabbrev_np(sig) : "?");
    put_str(b, &n, sizeof(b), "), address 0x");
    put_num(b, &n, sizeof(b), (unsigned long)(uintptr_t)si->si_addr, 16);
    put_str(b, &n, sizeof(b), "; its stack:\n");
    void *frames[48];
    int nf = backtrace(frames, 48);
    int fds[2] = {files[0].fd, log_stderr ? 2 : -1};
    for (int i = 0; i < 2; i++)
        if (fds[i] >= 0) {
            if (write(fds[i], b, n) < 0) {
                /* nothing more to do */
            }
            backtrace_symbols_fd(frames, nf, fds[i]);
        }
    signal(sig, SIG_DFL);
    raise(sig);
}

/* SIGUSR2: every thread's stack into server.log, for a server that no longer answers
 * (tests/soak.sh's stall report; there is no debugger on every machine). Sent to the
 * process, the thread that takes it passes it to each other thread (tgkill), which writes
 * its own. For diagnosis only: /proc is read with opendir, which is not async-signal-safe. */
static atomic_flag stack_writing = ATOMIC_FLAG_INIT;

static void on_stack_request(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    char b[120];
    size_t n = 0;
    put_str(b, &n, sizeof(b), "[stack Server ");
    put_num(b, &n, sizeof(b), (unsigned long)getpid(), 10);
    put_str(b, &n, sizeof(b), " thread ");
    put_num(b, &n, sizeof(b), (unsigned long)gettid(), 10);
    /* The thread's name says whose calls a client thread serves ("client 12345"). */
    char comm[17] = "";
    if (prctl(PR_GET_NAME, comm) == 0 && comm[0]) {
        put_str(b, &n, sizeof(b) - 2, " ");
        put_str(b, &n, sizeof(b) - 2, comm);
    }
    put_str(b, &n, sizeof(b), "]\n");
    void *frames[48];
    int nf = backtrace(frames, 48);
    /* One thread's stack after another: every thread runs this at once, and
     * backtrace_symbols_fd writes a line at a time. The flag is taken only here, by
     * handlers that run with SIGUSR2 blocked, so none waits on itself. */
    while (atomic_flag_test_and_set_explicit(&stack_writing, memory_order_acquire))
        sched_yield();
    if (files[0].fd >= 0) {
        if (write(files[0].fd, b, n) < 0) {
            /* nothing more to do */
        }
        backtrace_symbols_fd(frames, nf, files[0].fd);
    }
    atomic_flag_clear_explicit(&stack_writing, memory_order_release);
    if (si->si_code != SI_USER) return; /* passed on by another thread */
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d && (e = readdir(d))) {
        long tid = strtol(e->d_name, NULL, 10);
        if (tid > 0 && tid != gettid()) syscall(SYS_tgkill, getpid(), (pid_t)tid, sig);
    }
    if (d) closedir(d);
}

static void catch_crashes(void)
{
    void *warm[2];
    backtrace(warm, 2);
    struct sigaction sa = {.sa_sigaction = on_crash, .sa_flags = SA_SIGINFO | SA_RESETHAND};
    int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++)
        sigaction(sigs[i], &sa, NULL);
    struct sigaction st = {.sa_sigaction = on_stack_request, .sa_flags = SA_SIGINFO | SA_RESTART};
    sigaction(SIGUSR2, &st, NULL);
}

int srv_log_open(const char *dir, const char *file, const char *who, int to_stderr, char *why,
                 size_t len)
{
    /* A full file system or a file size limit must make writes fail, never kill us. */
    signal(SIGXFSZ, SIG_IGN);
    pthread_mutex_lock(&log_lock);
    files[0].name = file;
    files[0].who = who;
    log_stderr = to_stderr;
    snprintf(log_dir, sizeof(log_dir), "%s", dir);
    int rc = 0;
    for (int i = 0; i < 2; i++)
        if (open_one(&files[i], dir) != 0 && rc == 0) {
            snprintf(why, len, "cannot open the log %s: %s", files[i].path, strerror(errno));
            rc = -1;
        }
    pthread_mutex_unlock(&log_lock);
    srv_clog("Starting new server %d for user %u", (int)getpid(), (unsigned)getuid());
    on_exit(on_exit_log, NULL);
    catch_crashes();
    return rc;
}

void srv_log_reopen(void)
{
    pthread_mutex_lock(&log_lock);
    for (int i = 0; i < 2; i++) {
        if (files[i].fd >= 0) close(files[i].fd);
        files[i].failed_said = 0; /* a new file: a new failure is said again */
        open_one(&files[i], log_dir);
    }
    pthread_mutex_unlock(&log_lock);
    srv_log("Reopened the log files (SIGHUP)");
    srv_clog("Reopened the log files (SIGHUP)");
}

/* ---------------------------------------------------------------- client text */

/* The length of the UTF-8 sequence at u (at most n bytes) when it is one whole character
 * that is safe to show as it is; 0 when it is not: malformed, overlong, a surrogate, a C1
 * control (U+0080..U+009F: some terminals obey them as escape sequences), a line or
 * paragraph separator (U+2028, U+2029: some viewers break lines there) or a bidirectional
 * override or isolate (U+202A..U+202E, U+2066..U+2069: they make text read other than it
 * is stored). */
static size_t utf8_shown(const unsigned char *u, size_t n)
{
    size_t len = u[0] >= 0xc2 && u[0] <= 0xdf   ? 2
                 : u[0] >= 0xe0 && u[0] <= 0xef ? 3
                 : u[0] >= 0xf0 && u[0] <= 0xf4 ? 4
                                                : 0;
    if (!len || len > n) return 0;
    uint32_t cp = u[0] & (0x7f >> len);
    for (size_t i = 1; i < len; i++) {
        if ((u[i] & 0xc0) != 0x80) return 0;
        cp = cp << 6 | (u[i] & 0x3f);
    }
    static const uint32_t least[5] = {0, 0, 0xa0, 0x800, 0x10000};
    if (cp < least[len] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff) ||
        (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2066 && cp <= 0x2069))
        return 0;
    return len;
}

/* Copies s into out (cap bytes, NUL-terminated, cut only between whole characters): every
 * byte below 0x20, 0x7f and every byte >= 0x80 that is not part of a character utf8_shown
 * lets through becomes \xNN; with `backslash`, a backslash becomes \\ (so that the text
 * reads back exactly). The length written. */
static size_t escape(const char *s, char *out, size_t cap, int backslash)
{
    size_t o = 0;
    if (!cap) return 0;
    for (const unsigned char *u = (const unsigned char *)s; *u;) {
        char tmp[8];
        size_t take = 1, put;
        if (*u == '\\' && backslash) {
            memcpy(tmp, "\\\\", put = 2);
        } else if (*u >= 0x20 && *u < 0x7f) {
            tmp[0] = (char)*u;
            put = 1;
        } else if ((take = utf8_shown(u, strnlen((const char *)u, 4))) > 0) {
            memcpy(tmp, u, put = take);
        } else {
            take = 1;
            put = (size_t)snprintf(tmp, sizeof(tmp), "\\x%02x", *u);
        }
        if (o + put >= cap) break;
        memcpy(out + o, tmp, put);
        o += put;
        u += take;
    }
    out[o] = '\0';
    return o;
}

const char *srv_log_escape(const char *s, char *out, size_t cap)
{
    escape(s, out, cap, 1);
    return out;
}

/* Formats "[date time Who pid] message\n" and appends it to log `which`. Whatever the
 * message holds, it is one line: a control byte that reached it (a client's text that a
 * caller passed on as it came, say) is written as \xNN. Client text that srv_log_escape
 * made safe passes unchanged (its backslashes are not doubled again). */
static void vlog(int which, const char *fmt, va_list ap)
{
    struct log_file *f = &files[which];
    char msg[1200], line[1400];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "[%04d-%02d-%02d %02d:%02d:%02d.%03d %s %d] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     (int)(tv.tv_usec / 1000), f->who, (int)getpid());
    if (n < 0 || vsnprintf(msg, sizeof(msg), fmt, ap) < 0) return;
    size_t len = (size_t)n + escape(msg, line + n, sizeof(line) - (size_t)n - 1, 0);
    line[len++] = '\n';
    pthread_mutex_lock(&log_lock);
    if (f->fd >= 0 && write(f->fd, line, len) != (ssize_t)len && !f->failed_said) {
        f->failed_said = 1;
        fprintf(stderr, "mpsshim: cannot write the log %s (%s); continuing without it\n", f->path,
                errno ? strerror(errno) : "short write");
    }
    if (log_stderr && write(2, line, len) < 0) {
        /* nothing more to do */
    }
    pthread_mutex_unlock(&log_lock);
}

void srv_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(0, fmt, ap);
    va_end(ap);
}

void srv_clog(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vlog(1, fmt, ap);
    va_end(ap);
}
