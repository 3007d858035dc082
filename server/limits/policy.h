/* policy.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_POLICY_H
#define MPSSHIM_SERVER_POLICY_H

#include "server/core/server.h"

/* policy.c: resolving each client's limits. */
void srv_policy_init(void);
/* The client's limits from its hello and the operator's settings: 0, or -1 with a message
 * for the client in why. */
int srv_policy_resolve(const struct chan_hello *h, struct srv_limits *out, char *why, size_t len);
/* SMs an active thread percentage gives on device dev, at the partition granularity. */
unsigned srv_policy_sms(int dev, int pct);
/* The priority a client's stream on device dev is made with when it asks for `requested`. */
int srv_policy_stream_priority(const struct srv_client *c, int dev, int requested);
/* The operator's settings as text for the server process that carries on from this one,
 * and back (handover.c, recycle.c): 0, or -1 (does not fit; malformed: nothing taken). */
int srv_policy_encode(char *b, size_t n);
int srv_policy_decode(const char *s);
/* n unsigned decimal numbers, each after one space or at *s: 0 with *s past them, or -1. */
int srv_parse_nums(const char **s, unsigned long long *v, int n);
/* "4096", "512M", "2G" (K/M/G/T, powers of 1024, optional B): 0, or -1 if malformed. */
int srv_parse_size(const char *s, uint64_t *out);
/* Bytes in the largest unit that divides them exactly: "2G", "512M", "1000". */
void srv_format_size(uint64_t v, char *out, size_t len);
/* The device an ordinal or a UUID (or its prefix, "GPU-8e2b...") names; -1 if none. */
int srv_device_by_name(const char *s);

/* Operator settings from the control commands (policy.c); guarded by lock. */
struct srv_policy {
    pthread_mutex_t lock;
    int default_pct;                        /* set_default_active_thread_percentage: 100 */
    int server_pct;                         /* set_active_thread_percentage; 0: not set */
    uint64_t default_mem[CHAN_MAX_DEVICES]; /* set_default_device_pinned_mem_limit; 0: none */
    uint64_t server_mem[CHAN_MAX_DEVICES];  /* set_device_pinned_mem_limit; 0: not set */
    int default_priority;                   /* set_default_client_priority: 0 */
};
extern struct srv_policy srv_policy;
/* The stream priority range of the shared contexts (main.c finds it at start). */
extern int srv_prio_least, srv_prio_greatest;

/* A device's SMs as green contexts can divide them (green.c). */
struct srv_sm_info {
    unsigned total; /* SMs of the device */
    unsigned align; /* partitions are multiples of this; 0: no partitions possible */
    unsigned min;   /* smallest partition */
};
/* Each device's, found at start (green.c, which makes the partitions; policy.c turns a
 * percentage into SMs by it). */
extern struct srv_sm_info srv_sm[CHAN_MAX_DEVICES];

#endif
