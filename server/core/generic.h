/* generic.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_GENERIC_H
#define MPSSHIM_SERVER_GENERIC_H

#include "server/core/server.h"

/* generic.c: replays a `sync`/`async` call from its descriptor. */
void srv_generic(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len);
/* Prepares libffi call interfaces; 0 on success. */
int srv_generic_init(void);

#endif
