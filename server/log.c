/* MPS-format logs: "[2026-11-22 02:48:20.653 Server 1180] Client process 1159 disconnected".
 * A log that cannot be written (unwritable directory, full disk) never stops the server:
 * it says so once on stderr and goes on. */
#include "server/server.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

/* Guarded by log_lock. */
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static int log_fd = -1;
static int log_stderr;
static int log_failed_said;
static char log_who[16] = "Server";

void srv_log_open(const char *dir, const char *file, const char *who, int to_stderr)
{
    char path[600];
    pthread_mutex_lock(&log_lock);
    snprintf(log_who, sizeof(log_who), "%s", who);
    log_stderr = to_stderr;
    snprintf(path, sizeof(path), "%s/%s", dir, file);
    log_fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
    if (log_fd < 0 && !log_failed_said) {
        log_failed_said = 1;
        fprintf(stderr, "mpsshim: cannot open log %s (%s); logging to stderr only\n", path,
                strerror(errno));
        log_stderr = 1;
    }
    pthread_mutex_unlock(&log_lock);
}

void srv_log(const char *fmt, ...)
{
    char line[1200];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    int n = snprintf(line, sizeof(line), "[%04d-%02d-%02d %02d:%02d:%02d.%03d %s %d] ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, (int)(tv.tv_usec / 1000), log_who, (int)getpid());
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (m < 0)
        return;
    size_t len = (size_t)n + (size_t)m;
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    pthread_mutex_lock(&log_lock);
    if (log_fd >= 0 && write(log_fd, line, len) != (ssize_t)len && !log_failed_said) {
        log_failed_said = 1;
        fprintf(stderr, "mpsshim: cannot write the log (%s); continuing without it\n",
                strerror(errno));
    }
    if (log_stderr && write(2, line, len) < 0) {
        /* nothing more to do */
    }
    pthread_mutex_unlock(&log_lock);
}
