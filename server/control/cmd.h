/* The control commands' private interface (control.c answers; limitcmds.c holds the
 * per-client limit commands): one command being answered, and how it answers. */
#ifndef MPSSHIM_SERVER_CMD_H
#define MPSSHIM_SERVER_CMD_H

#include "server/core/server.h"
#include "server/control/answer.h"

#define MAXARGS 8

/* One command being answered: its words and the answer built so far. */
struct cmd {
    int argc;
    char *argv[MAXARGS];
    struct srv_answer *out;
    int failed; /* the answer says why the command did nothing */
};

/* Appends to the answer; ctl_fail also marks the command failed. */
void ctl_say(struct cmd *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ctl_fail(struct cmd *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* "Usage: ..." when the command has not exactly lo..hi arguments. 0 when it has. */
int ctl_usage(struct cmd *k, int lo, int hi, const char *args);
/* The pid argument names this server; otherwise says so. 1 when it does. */
int ctl_this_server(struct cmd *k, const char *arg);

/* limitcmds.c: the commands of the same names (set_/get_[default_]active_thread_percentage,
 * set_/get_[default_]device_pinned_mem_limit, set_/get_default_client_priority). */
void cmd_set_default_pct(struct cmd *k);
void cmd_get_default_pct(struct cmd *k);
void cmd_set_pct(struct cmd *k);
void cmd_get_pct(struct cmd *k);
void cmd_set_default_mem(struct cmd *k);
void cmd_get_default_mem(struct cmd *k);
void cmd_set_mem(struct cmd *k);
void cmd_get_mem(struct cmd *k);
void cmd_set_priority(struct cmd *k);
void cmd_get_priority(struct cmd *k);

#endif
