/* The raw protocol client (tests/unit/rawclient.c lists its modes): what its parts share,
 * the connection, session and request helpers of rawsession.c, and each mode's entry. */
#ifndef MPSSHIM_RAWCLIENT_H
#define MPSSHIM_RAWCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "channel/chan.h"
#include "channel/desc.h"

/* One connection past its handshake: the socket and the mapped segment. */
struct raw_session {
    int sock;
    void *base;
    size_t size;
    struct chan c;
};

/* Checks that went otherwise so far, counted by raw_expect*() and the modes. */
extern int raw_failures;

/* Ring and lane waits give up at this time (chan_now_ns()): a record may have parked the
 * server's worker on a staging wait that this client never feeds. raw_before_deadline is
 * the waits' `alive`. */
extern uint64_t raw_give_up_at;
int raw_before_deadline(void *arg);

/* A socket connected to the server ($MPSSHIM_PIPE_DIRECTORY), or -1. */
int raw_connect(void);
/* The same, or exit 2 with a message. */
int raw_dial(void);
/* The server's welcome on s, and its segment's descriptor in *fd (-1: none); 0, or -1. */
int raw_recv_welcome(int s, struct chan_welcome *w, int *fd);
/* A hello of this build's protocol, as the shim would send it. */
struct chan_hello raw_hello(void);

/* Handshake with hello h and map the segment: 0, or -1 when refused or unmapped. */
int raw_session_open_hello(struct raw_session *x, const struct chan_hello *h);
/* The same with CUDA_VISIBLE_DEVICES `visible` (NULL: unset). */
int raw_session_open_visible(struct raw_session *x, const char *visible);
/* The same with the shim's hello. */
int raw_session_open(struct raw_session *x);
/* The same, and context 1 made on device 0 (its primary): 0, or -1 (said on stderr). */
int raw_session_with_ctx(struct raw_session *x);

/* One request on lane 0 with context 1, its reply's result (and data in out);
 * CUDA_ERROR_UNKNOWN when no answer came in 10 s. */
CUresult raw_request(struct raw_session *x, unsigned op, const void *payload, size_t len, void *out,
                     size_t cap);
/* A described call packed as the shim would, without the shim's own checks. */
CUresult raw_call(struct raw_session *x, int id, const void *const *argv, void *out, size_t cap);
/* n bytes as CHAN_OP_BLOB records of context 1 (a module image before its load): 0, or -1
 * when the ring had no room in 10 s. */
int raw_blob(struct raw_session *x, const void *data, size_t n);

/* A line for the check `what`: it must have been refused (not accepted, not unanswered). */
void raw_expect_refused(const char *what, CUresult r);
/* A line for the check `what`: it must have answered `want`. */
void raw_expect(const char *what, CUresult got, CUresult want);

/* The modes (exit status: 0 when the server behaved as it must), by file. */
int raw_version(void); /* rawconnect.c */
int raw_garbage(void);
int raw_silent(void);
int raw_trickle(void);
int raw_crowd(int n, int secs);
int raw_hostile(void); /* rawhostile.c, with rawmvars.c and rawbatches.c */
void raw_hostile_mvars(struct raw_session *x, CUdeviceptr dev);
void raw_hostile_batches(struct raw_session *x, CUdeviceptr d);
void raw_hostile_waits(struct raw_session *x, CUdeviceptr d);
int raw_payloads(void);              /* rawpayloads.c */
int raw_scribble(void);              /* rawscribble.c */
int raw_fuzz(uint64_t seed, long n); /* rawfuzz.c */
int raw_shrink(void);                /* rawshrink.c */
int raw_accounts(void);              /* rawaccounts.c */
int raw_devices(void);               /* rawdevices.c */
int raw_mirror(const char *hex);     /* rawmirror.c */

#endif
