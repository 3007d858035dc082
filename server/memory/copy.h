/* copy.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_COPY_H
#define MPSSHIM_SERVER_COPY_H

#include "server/core/server.h"

/* A checked side of a copy, ready for the driver. */
struct srv_copy_side {
    CUmemorytype type;
    uint64_t addr; /* device address, host address or array handle */
    uint64_t pitch, height, x, y, z;
    int device;
};

/* Checks one side of a w x h x d copy (w in bytes) against c's tables into *out: the error
 * the copy answers with, or CUDA_SUCCESS (a STAGED side's address is the caller's to fill). */
CUresult srv_copy_check_side(struct srv_client *c, const struct chan_copy_side *s, uint64_t w,
                             uint64_t h, uint64_t d, struct srv_copy_side *out);
/* One driver copy of a w x h x d extent between two checked sides, on stream st. */
CUresult srv_copy_issue(const struct srv_copy_side *src, const struct srv_copy_side *dst,
                        uint64_t w, uint64_t h, uint64_t d, CUstream st);

void srv_copy_forget_device(struct srv_client *c, int dev); /* copy.c */

/* copybatch.c, for both batch operations. A batch's stream (r's, PTDS as it says), checked:
 * the error the batch answers with, or CUDA_SUCCESS. */
CUresult srv_batch_stream(struct srv_client *c, const struct chan_rec *r, uint64_t stream,
                          struct srv_stream **sp);
/* Answers a batch: deferred when r asks no reply, else at once or, with staged destinations
 * (out bytes in r's reply lane), once s has run them. */
void srv_batch_answer(struct srv_client *c, const struct chan_rec *r, struct srv_stream *s,
                      CUresult res, uint64_t out, const char *what);

/* The staging chunk number c's next staged copy must start at (channel/copyplan.h). */
uint32_t srv_copy_chunk_seq(const struct srv_client *c);

#endif
