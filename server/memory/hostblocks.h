/* hostblocks.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_HOSTBLOCKS_H
#define MPSSHIM_SERVER_HOSTBLOCKS_H

#include "server/core/server.h"

/* hostblocks.c: pinned memory for the data of inline copies. n bytes on s, valid until the
 * GPU has run what s holds after the copy issued next; NULL when none can be had. */
void *srv_hblock_take(struct srv_client *c, struct srv_stream *s, size_t n);
/* Closes s's open block behind the work s holds now (before a capture begins on s). */
void srv_hblock_close(struct srv_client *c, struct srv_stream *s);
/* s goes: its open block is closed behind its work, or forgotten with its dead context. */
void srv_hblock_stream_gone(struct srv_client *c, struct srv_stream *s, int dead);
/* dev's context died: blocks whose copies or registration were there are forgotten. */
void srv_hblock_forget_device(struct srv_client *c, int dev);
/* The client leaves: its blocks are unpinned (kept if its work was left running). */
void srv_hblock_release(struct srv_client *c);

#endif
