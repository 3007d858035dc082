/* The server in the fuzzing process (tests/fuzz/srvharness.c): its real operations, its
 * real handshake's state and its real release, behind the CPU test driver, with clients
 * that are records written into a real segment's ring by the fuzz target. */
#ifndef MPSSHIM_FUZZ_SRVHARNESS_H
#define MPSSHIM_FUZZ_SRVHARNESS_H

#include <stddef.h>
#include <stdint.h>
#include <cuda.h>

#include "channel/chan.h"

struct fh_client;

/* Starts the server as main() does (driver, devices, tables), without threads, sockets or
 * a fault thread; 0, or -1 with the reason on stderr. Once per process. */
int fh_init(void);
/* The CPU test driver's directory of test kernels (build/tests). */
const char *fh_kernels_dir(void);
/* A device address of the server's own, `bytes` long (1 MiB), zeroed at start: kernels
 * the target launches write only there, so that a launch can never fault the device. */
uint64_t fh_sink(void);

/* An input begins: the server's log starts afresh. */
void fh_begin(void);
/* The server's log lines of this input, on stderr (a finding's report). */
void fh_show_log(void);

/* A client as after its handshake: segment, devices, limits, callback thread. NULL when
 * the server could not set it up (the reason on stderr). */
struct fh_client *fh_connect(void);
/* The client's side of its segment (its ring, lanes, slots, callbacks). */
struct chan *fh_chan(struct fh_client *k);
/* The staging chunk number its next non-inline pageable copy must carry. */
uint32_t fh_chunk_seq(struct fh_client *k);
/* 1 once the server dropped it (a protocol error) or it left. */
int fh_gone(struct fh_client *k);

/* Writes one record into its ring and has the server take and replay it, as its worker
 * does (then polls its waits once). A staged copy's slots are fed as its client would
 * (all chunks of an HtoD copy filled before, a DtoH copy's chunks taken after: the
 * target keeps such copies within CHAN_NSLOTS chunks). *seq0 gets the lane's sequence
 * number before (for fh_reply). -1 when the record does not fit or the client is gone. */
int fh_record(struct fh_client *k, const struct chan_rec *h, const void *payload, uint32_t len,
              uint32_t *seq0);
/* Writes raw bytes into the ring at its tail and moves the tail by `advance` (a hostile
 * client's broken framing); the server takes what it finds. */
void fh_raw(struct fh_client *k, const void *bytes, uint32_t len, uint64_t advance);
/* Waits (polling the server's waits, at most `ms`) for the reply on `lane` after seq0:
 * 0 with its result and data, -1 when none came. */
int fh_reply(struct fh_client *k, uint16_t lane, uint32_t seq0, uint32_t ms, CUresult *res,
             const uint8_t **data, uint32_t *len);
/* Sends a descriptor on its socket (cuMemHostRegister's memfd), or a byte without one. */
int fh_send_fd(struct fh_client *k, int fd);
/* The client goes away (its socket hangs up, its callback thread with it); the server
 * releases everything it held, as after any departure. `terminated`: as by
 * terminate_client. */
void fh_leave(struct fh_client *k, int terminated);

/* Whether the server's tables give client k (NULL: none) an object of type SHIM_HT_* named
 * v, or a range holding address v: the isolation checks' ground truth. */
int fh_owns(struct fh_client *k, uint32_t type, uint64_t v);
int fh_owns_range(struct fh_client *k, uint64_t v);

/* After every client left: what must be back where it started (records, IPC shares,
 * device memory, descriptors, a context no fault touched). 0, or -1 with a message. */
int fh_check_idle(char *why, size_t len);

#endif
