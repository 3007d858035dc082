/* devices.c, devinfo.c: what the files that use the family need of it (server.h is the core). */
#ifndef MPSSHIM_SERVER_DEVICES_H
#define MPSSHIM_SERVER_DEVICES_H

#include "server/core/server.h"

/* Device d's UUID as nvidia-smi -L and MPS print it, "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx". */
void srv_dev_uuid(int d, char *out, size_t len);
/* devinfo.c */
int srv_devinfo_fill(struct chan_devinfo *d);
/* The client's devices from its hello's CUDA_VISIBLE_DEVICES (all when unset). */
void srv_devices_select(struct srv_client *c, const struct chan_hello *h);
/* Writes the devices it sees, in its order, into its segment's devinfo. */
void srv_devices_publish(struct srv_client *c);
/* A client's ordinal -> the server's, or -1 when it was not given that device. */
int srv_dev_in(const struct srv_client *c, int64_t dev);
/* A server ordinal -> the client's, or -1 when it does not see that device. */
int srv_dev_out(const struct srv_client *c, int64_t dev);
/* A device the client may use (its first), for calls that need one current. */
int srv_dev_any(const struct srv_client *c);
/* Maps the id of the CUmemLocation at loc when it names a device, in (client -> server)
 * or out; CUDA_ERROR_INVALID_DEVICE when the client does not have that device. */
CUresult srv_dev_location(const struct srv_client *c, uint8_t *loc, int in);

#endif
