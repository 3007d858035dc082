/* log.c: the server's log files beyond srv_log (server.h), for the files that open, rotate or
 * write them. */
#ifndef MPSSHIM_SERVER_LOG_H
#define MPSSHIM_SERVER_LOG_H

#include <stddef.h>

/* Opens the log files in dir (to_stderr: every line on stderr too). A file that cannot be
 * opened is said once on stderr and its lines are dropped; -1 then, with the first reason in
 * why, for a caller that would rather not start (the server goes on either way). */
int srv_log_open(const char *dir, const char *file, const char *who, int to_stderr, char *why,
                 size_t len);
/* Closes and opens both files again by name (SIGHUP: a rotated log starts anew). */
void srv_log_reopen(void);
/* Appends "[date time Control pid] message" to control.log (commands and their results). */
void srv_clog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A client's text (its executable's name, its command line) made safe to show in a log
 * line or a control answer: control bytes, bytes that are no shown UTF-8 character and
 * backslashes escaped (\xNN, \\), cut at cap bytes between whole escapes. Returns out. */
const char *srv_log_escape(const char *s, char *out, size_t cap);

#endif
