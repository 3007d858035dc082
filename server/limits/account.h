/* account.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_ACCOUNT_H
#define MPSSHIM_SERVER_ACCOUNT_H

#include "server/core/server.h"

/* What one client process may spend and spends, across its connections (account.c). */
/* What a client may use, fixed when it connects (policy.c). */
struct srv_limits {
    int pct;                        /* active thread percentage in force, 1..100 */
    unsigned sms[CHAN_MAX_DEVICES]; /* SMs its work may use on each device */
    int part[CHAN_MAX_DEVICES];     /* its green partition's index (green.c), -1: none */
    uint64_t mem[CHAN_MAX_DEVICES]; /* device memory it may hold, bytes; 0: no limit */
    int priority;                   /* 0 normal, 1 below normal */
};
#define SRV_ACCOUNT_CONNS 8 /* connections of one process at once */
struct srv_account {
    pid_t pid;
    unsigned long long start;   /* its start time: a reused pid is another process */
    unsigned conns;             /* its connections; under account.c's lock */
    struct srv_limits lim;      /* its first connection's, for all of them */
    int part[CHAN_MAX_DEVICES]; /* its green partition per device (-1: none); green_lock */
    _Atomic uint64_t mem[CHAN_MAX_DEVICES];      /* device bytes counted */
    _Atomic uint64_t reserved[CHAN_MAX_DEVICES]; /* allowed by a check, not yet counted */
    _Atomic uint64_t pinned;                     /* pinned host bytes */
    _Atomic uint64_t objects; /* registry records, when MPSSHIM_MAX_OBJECTS caps them */
    _Atomic uint64_t queued;  /* bytes held for its queued work (queue.c) */
    _Atomic int objects_said;
    struct srv_account *next;
};
/* At the handshake, once its limits are resolved: c joins its process's account and takes
 * its limits; -1 (why says) when the process has SRV_ACCOUNT_CONNS connections already. */
int srv_account_join(struct srv_client *c, char *why, size_t len);
/* Last in c's release: its account goes with the process's last connection. */
void srv_account_leave(struct srv_client *c);
/* 1 when `bytes` more device memory on dev stay within the process's limit, reserved until
 * srv_account_settle (after the record that asked); 0 otherwise. */
int srv_account_mem_fits(struct srv_client *c, int dev, uint64_t bytes);
void srv_account_settle(struct srv_client *c);
/* Device memory the process holds on dev; a change of it (srv_mem_count/uncount). */
uint64_t srv_account_mem_used(const struct srv_client *c, int dev);
void srv_account_mem_add(struct srv_client *c, int dev, int64_t bytes);
/* Pinned host bytes taken (1) within MPSSHIM_MAX_PINNED_MB for the process, or refused (0,
 * logged); and given back. */
int srv_account_pinned_take(struct srv_client *c, uint64_t bytes);
void srv_account_pinned_give(struct srv_client *c, uint64_t bytes);
/* One registry record more within MPSSHIM_MAX_OBJECTS (1), or refused (0, said once); and
 * one less. */
int srv_account_record_take(struct srv_client *c);
void srv_account_record_give(struct srv_client *c);
/* Bytes held for the process's queued work: a change, and the total (queue.c); own, the
 * connection's own, stands for it before the client has an account. */
void srv_account_queued_add(struct srv_client *c, int64_t bytes);
uint64_t srv_account_queued(const struct srv_client *c, uint64_t own);

/* account.c: 1 if `bytes` more on device dev stay within the client's limit; else 0, and
 * the refusal is logged (once until an allocation there succeeds again). */
int srv_mem_fits(struct srv_client *c, int dev, uint64_t bytes);

#endif
