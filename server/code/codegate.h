/* codegate.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_CODEGATE_H
#define MPSSHIM_SERVER_CODEGATE_H

#include "server/core/server.h"

/* Code loading and client-held waits (codegate.c). srv_codegate_enter: before a driver
 * call that loads code or sets a context limit on dev (`what`, for the log), by a thread
 * serving c; CUDA_SUCCESS once no client-held wait is pending there (pair with
 * srv_codegate_leave), else c left while it waited. srv_codegate_wait_begin/_end: around
 * enqueueing on stream st anything only a client can end (a wait on a value in its memory,
 * a host function, a launch of an exec with host nodes; enqueued: the driver took it). */
void srv_codegate_init(void);
int srv_codegate_call_begin(struct srv_client *c, struct srv_call *k, CUresult *res);
void srv_codegate_call_end(int dev);
CUresult srv_codegate_enter(struct srv_client *c, int dev, const char *what);
void srv_codegate_leave(int dev);
void srv_codegate_wait_begin(int dev);
/* What a watched wait is, for the log and get_client_info. */
enum srv_wait_kind { SRV_WAIT_VALUE, SRV_WAIT_HOSTFN, SRV_WAIT_HOSTNODE, SRV_WAIT_KINDS };
void srv_codegate_wait_end(struct srv_client *c, int dev, CUstream st, int enqueued,
                           enum srv_wait_kind kind);
/* Into buf: the waits of client process pid still pending on the GPU, by device and kind
 * ("device 1: 1 host function"), or "none". Any thread. */
void srv_codegate_pending_of(pid_t pid, char *buf, size_t len);
/* c left with its work running (its release gave up): its waits still pending no longer hold
 * other clients' frees and unregistrations, only code loads (codegate.c). */
void srv_codegate_abandon(struct srv_client *c);
/* Around a driver call that waits for every stream of the context (freeing or unregistering
 * memory), by a thread serving c (or releasing it): waits, outside the driver, until no
 * client-held wait is pending on any device; the devices whose gates it holds, for
 * srv_codegate_whole_end. A departed client's release waits at most MPSSHIM_RELEASE_TIMEOUT,
 * then goes on without the gates it could not take. */
uint64_t srv_codegate_whole_begin(struct srv_client *c, const char *what);
void srv_codegate_whole_end(uint64_t entered);
/* cuMemHostUnregister and cuMemFree_v2 between those two. */
CUresult srv_gated_unregister(struct srv_client *c, void *p);
CUresult srv_gated_free(struct srv_client *c, CUdeviceptr p);

#endif
