/* The per-client limit commands: active thread percentage, device memory limit and
 * priority, the server's own and the defaults for clients that connect from then on
 * (policy.c applies them at each handshake). Answers through control.c's. */
#include "server/control/cmd.h"
#include "server/core/devices.h"
#include "server/limits/policy.h"

#include <stdlib.h>
#include <string.h>

/* A percentage from 1 to 100 ("25" or "25.0": what get_* prints reads back). -1 if not. */
static int parse_pct(struct cmd *k, const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (end == s || *end || !(v >= 1 && v <= 100) || v != (double)(int)v) {
        ctl_fail(k, "Invalid active thread percentage \"%s\": a whole number from 1 to 100\n", s);
        return -1;
    }
    return (int)v;
}

/* A device ordinal or UUID (prefix); says so and returns -1 if there is none such. */
static int parse_dev(struct cmd *k, const char *s)
{
    int d = srv_device_by_name(s);
    if (d < 0)
        ctl_fail(k, "Invalid device \"%s\": an ordinal from 0 to %d or a UUID (GPU-...)\n", s,
                 srv.ndev - 1);
    return d;
}

/* A memory limit ("512M", "2G", bytes; 0 removes it); says so and returns -1 if bad. */
static int parse_mem(struct cmd *k, const char *s, uint64_t *v)
{
    if (srv_parse_size(s, v) == 0) return 0;
    ctl_fail(k, "Invalid memory limit \"%s\": a size such as 900M or 10G (0: no limit)\n", s);
    return -1;
}

static void put_pct(struct cmd *k, int pct)
{
    ctl_say(k, "%.1f\n", (double)pct);
}

static void put_mem(struct cmd *k, uint64_t v)
{
    char sz[32];
    srv_format_size(v, sz, sizeof(sz));
    ctl_say(k, "%s\n", sz);
}

/* The policy's settings are read and written under its lock (policy.c reads them as each
 * client connects). What a get_* shows: own, or dflt when own is NULL or not set (0). */
static int policy_int(const int *own, const int *dflt)
{
    pthread_mutex_lock(&srv_policy.lock);
    int v = own && *own ? *own : *dflt;
    pthread_mutex_unlock(&srv_policy.lock);
    return v;
}

/* The same for a memory limit. */
static uint64_t policy_mem(const uint64_t *own, const uint64_t *dflt)
{
    pthread_mutex_lock(&srv_policy.lock);
    uint64_t v = own && *own ? *own : *dflt;
    pthread_mutex_unlock(&srv_policy.lock);
    return v;
}

/* Stores v in a setting of the policy, under its lock. */
static void set_int(int *to, int v)
{
    pthread_mutex_lock(&srv_policy.lock);
    *to = v;
    pthread_mutex_unlock(&srv_policy.lock);
}

/* The same for a memory limit. */
static void set_mem(uint64_t *to, uint64_t v)
{
    pthread_mutex_lock(&srv_policy.lock);
    *to = v;
    pthread_mutex_unlock(&srv_policy.lock);
}

/* set_default_active_thread_percentage <percentage> */
void cmd_set_default_pct(struct cmd *k)
{
    int v = parse_pct(k, k->argv[1]);
    if (v <= 0) return;
    set_int(&srv_policy.default_pct, v);
    put_pct(k, v);
}

/* get_default_active_thread_percentage */
void cmd_get_default_pct(struct cmd *k)
{
    put_pct(k, policy_int(NULL, &srv_policy.default_pct));
}

/* set_active_thread_percentage <server pid> <percentage> */
void cmd_set_pct(struct cmd *k)
{
    int v;
    if (!ctl_this_server(k, k->argv[1]) || (v = parse_pct(k, k->argv[2])) <= 0) return;
    set_int(&srv_policy.server_pct, v);
    put_pct(k, v);
}

/* get_active_thread_percentage <server pid>: the server's, else the default. */
void cmd_get_pct(struct cmd *k)
{
    if (ctl_this_server(k, k->argv[1]))
        put_pct(k, policy_int(&srv_policy.server_pct, &srv_policy.default_pct));
}

/* set_default_device_pinned_mem_limit <device> <value> */
void cmd_set_default_mem(struct cmd *k)
{
    int d;
    uint64_t v;
    if ((d = parse_dev(k, k->argv[1])) >= 0 && parse_mem(k, k->argv[2], &v) == 0)
        set_mem(&srv_policy.default_mem[d], v);
}

/* get_default_device_pinned_mem_limit <device> */
void cmd_get_default_mem(struct cmd *k)
{
    int d = parse_dev(k, k->argv[1]);
    if (d >= 0) put_mem(k, policy_mem(NULL, &srv_policy.default_mem[d]));
}

/* set_device_pinned_mem_limit <server pid> <device> <value> */
void cmd_set_mem(struct cmd *k)
{
    int d;
    uint64_t v;
    if (ctl_this_server(k, k->argv[1]) && (d = parse_dev(k, k->argv[2])) >= 0 &&
        parse_mem(k, k->argv[3], &v) == 0)
        set_mem(&srv_policy.server_mem[d], v);
}

/* get_device_pinned_mem_limit <server pid> <device>: the server's, else the default. */
void cmd_get_mem(struct cmd *k)
{
    int d;
    if (ctl_this_server(k, k->argv[1]) && (d = parse_dev(k, k->argv[2])) >= 0)
        put_mem(k, policy_mem(&srv_policy.server_mem[d], &srv_policy.default_mem[d]));
}

/* set_default_client_priority <0|1> */
void cmd_set_priority(struct cmd *k)
{
    if (strcmp(k->argv[1], "0") != 0 && strcmp(k->argv[1], "1") != 0) {
        ctl_fail(k, "Invalid priority \"%s\": 0 (normal) or 1 (below normal)\n", k->argv[1]);
        return;
    }
    set_int(&srv_policy.default_priority, k->argv[1][0] - '0');
}

/* get_default_client_priority */
void cmd_get_priority(struct cmd *k)
{
    ctl_say(k, "%d\n", policy_int(NULL, &srv_policy.default_priority));
}
