/* memops.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_MEMOPS_H
#define MPSSHIM_SERVER_MEMOPS_H

#include "server/core/server.h"

/* memops.c: writes into every word a stream of the client waits on (in context ctx, 0 =
 * all) a value that ends the wait, while the word is still the client's: before a release
 * waits for its streams. */
void srv_memops_unblock(struct srv_client *c, uint32_t ctx);
/* The same, with no driver call, for the waits on its host-mapped memory (pinned, registered,
 * managed: mapped at the same address here): the main loop's, for a client it finds gone
 * (srv_clients_watch). The number of words written. */
size_t srv_memops_let_go(struct srv_client *c);
/* [addr, addr + bytes) of the client's host memory is about to be unmapped: its waits there
 * are ended (srv_memops_end_range), so that srv_memops_let_go stores there no more. */
void srv_memops_unmapping(struct srv_client *c, uint64_t addr, uint64_t bytes);
/* Memory [base, base + size) of the client's is about to be freed: the waits on words in it
 * are ended first, while it is still the client's (afterwards nothing could end them, and a
 * stream waiting for ever holds every client's code loads: found by fuzz_server). */
void srv_memops_end_range(struct srv_client *c, uint64_t base, uint64_t size);

/* A stream of each shared context, made at start (main.c), for writes that release a
 * departed client's waits on values in its device memory; NULL where it could not be made. */
extern CUstream srv_memops_release_streams[CHAN_MAX_DEVICES];

#endif
