/* The devices a client sees: its CUDA_VISIBLE_DEVICES (sent in the hello) selects and
 * orders among the server's devices, as the driver does among the machine's. A client's
 * CUdevice values are its own ordinals (what programs assume: CUdevice == ordinal); the
 * server maps every one it receives (parameters, CUmemLocation ids, contexts, copy sides)
 * to its own ordinal, refusing a device the client was not given with
 * CUDA_ERROR_INVALID_DEVICE, and maps every one it returns back. The map is decided here
 * at the handshake, kept in the client's record (never in shared memory) and never
 * changes. A client moved here from the pipe directory's server (MPSSHIM_SERVER_PER_GPU)
 * keeps its ordinals, of which one is this server's device: its map has holes. */
#include "server/core/server.h"
#include "server/limits/account.h"
#include "server/core/devices.h"

#include <ctype.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

/* The devices a client sees (devices.c), fixed at the handshake (read-only after): its ordinal i is
 * the server's to_srv[i]; to_cli[d] is the client's ordinal of the server's device d, or -1. */
struct srv_devmap {
    int n;
    int8_t to_srv[CHAN_MAX_DEVICES];
    int8_t to_cli[CHAN_MAX_DEVICES];
    int moved;             /* a client moved here (gpu_of): its other ordinals are holes */
    _Atomic int hole_said; /* a call naming a hole was refused and said (once per client) */
};

void srv_dev_uuid(int d, char *out, size_t len)
{
    const unsigned char *u = (const unsigned char *)srv.devinfo.dev[d].uuid.bytes;
    snprintf(out, len, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

/* The one device whose UUID starts with `item` ("GPU-" included, any case), or -1 when
 * none or several do. */
static int by_uuid(const char *item)
{
    int found = -1;
    size_t n = strlen(item);
    for (int d = 0; d < srv.ndev; d++) {
        char name[64];
        srv_dev_uuid(d, name, sizeof(name));
        if (n > 4 && n <= strlen(name) && strncasecmp(name, item, n) == 0) {
            if (found >= 0) return -1; /* ambiguous: the driver takes it as invalid */
            found = d;
        }
    }
    return found;
}

/* An index as the driver reads one (like strtoul: blanks, a sign, then digits up to the
 * first other character, so "1gpu" is 1); -1 when there are no digits or it is negative. */
static int by_index(const char *item)
{
    while (isspace((unsigned char)*item))
        item++;
    int neg = *item == '-';
    if (*item == '-' || *item == '+') item++;
    if (!isdigit((unsigned char)*item)) return -1;
    long v = 0;
    while (isdigit((unsigned char)*item) && v <= CHAN_MAX_DEVICES)
        v = v * 10 + (*item++ - '0');
    return neg ? -1 : (int)v;
}

/* Parses CUDA_VISIBLE_DEVICES with the driver's rules (as PyTorch's
 * torch.cuda._parse_visible_devices models them): entries are indices, or UUIDs (full or
 * a unique prefix, "GPU-" included) when the first one is; the first entry that names no
 * device (malformed, negative, out of range, an ambiguous prefix, or a UUID in a list of
 * indices) ends the list; a device named twice empties it; an empty value selects none.
 * MIG instances are not devices of this server: none, said once in the log. */
static int parse_visible(const char *spec, int8_t *to_srv, pid_t pid)
{
    if (strncasecmp(spec, "MIG-", 4) == 0) {
        srv_log("Client process %d: CUDA_VISIBLE_DEVICES=%.64s names MIG instances, which "
                "this server does not serve: the client sees no device",
                (int)pid, spec);
        return 0;
    }
    int uuids = strncasecmp(spec, "GPU-", 4) == 0;
    char buf[sizeof(((struct chan_hello *)0)->visible_devices)];
    snprintf(buf, sizeof(buf), "%s", spec);
    int n = 0;
    char *rest = buf;
    for (char *item = strsep(&rest, ","); item; item = strsep(&rest, ",")) {
        int d = uuids ? (strncasecmp(item, "GPU-", 4) == 0 ? by_uuid(item) : -1) : by_index(item);
        if (d < 0 || d >= srv.ndev) break;
        for (int i = 0; i < n; i++)
            if (to_srv[i] == d) return 0;
        if (n == CHAN_MAX_DEVICES) break;
        to_srv[n++] = (int8_t)d;
    }
    return n;
}

void srv_devices_select(struct srv_client *c, const struct chan_hello *h)
{
    struct srv_devmap *m = c->devs;
    memset(m->to_cli, -1, sizeof(m->to_cli));
    memset(m->to_srv, -1, sizeof(m->to_srv));
    if (h->gpu_of > 0) {
        /* Moved here at its first context (interpose/conn.c): its ordinal gpu_ordinal is our
         * device 0, its others none of ours (holes, refused as devices it was not given). A
         * pair out of range gives it no device. */
        int ok = h->gpu_of <= CHAN_MAX_DEVICES && h->gpu_ordinal >= 0 &&
                 h->gpu_ordinal < h->gpu_of && srv.ndev > 0;
        m->n = ok ? h->gpu_of : 0;
        if (ok) m->to_srv[h->gpu_ordinal] = 0;
        m->moved = 1;
        srv_log("Client process %d: served here for its device %d of %d, moved from the pipe "
                "directory's server at its first context (MPSSHIM_SERVER_PER_GPU)%s",
                (int)c->pid, (int)h->gpu_ordinal, (int)h->gpu_of,
                ok ? "" : ": out of range, no device given");
    } else if (!h->visible_set) {
        m->n = srv.ndev;
        for (int d = 0; d < srv.ndev; d++)
            m->to_srv[d] = (int8_t)d;
    } else {
        m->n = parse_visible(h->visible_devices, m->to_srv, c->pid);
    }
    for (int i = 0; i < m->n; i++)
        if (m->to_srv[i] >= 0) m->to_cli[m->to_srv[i]] = (int8_t)i;
    if (h->visible_set)
        srv_log("Client process %d: CUDA_VISIBLE_DEVICES=%.64s gives it %d of %d devices",
                (int)c->pid, h->visible_devices, m->n, srv.ndev);
}

void srv_devices_publish(struct srv_client *c)
{
    struct chan_devinfo *to = c->ch.devinfo;
    to->driver_version = srv.devinfo.driver_version;
    to->ndev = c->devs->n;
    for (int i = 0; i < c->devs->n; i++) {
        int d = c->devs->to_srv[i];
        if (d < 0) { /* a hole: the client keeps the other server's description */
            memset(&to->dev[i], 0, sizeof(to->dev[i]));
            continue;
        }
        to->dev[i] = srv.devinfo.dev[d];
        /* The client sees its share as the device's SM count, as under MPS. */
        to->dev[i].attr[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = (int32_t)c->lim->sms[d];
    }
    for (int i = c->devs->n; i < CHAN_MAX_DEVICES; i++)
        memset(&to->dev[i], 0, sizeof(to->dev[i]));
    /* Between two of its devices that are ours; a hole's pairs not answered here. */
    memset(to->peer, 0, sizeof(to->peer));
    for (int i = 0; i < c->devs->n; i++)
        for (int j = 0; j < c->devs->n; j++)
            if (i != j && c->devs->to_srv[i] >= 0 && c->devs->to_srv[j] >= 0)
                to->peer[i][j] = srv.devinfo.peer[c->devs->to_srv[i]][c->devs->to_srv[j]];
}

int srv_dev_in(const struct srv_client *c, int64_t dev)
{
    int d = dev >= 0 && dev < c->devs->n ? c->devs->to_srv[dev] : -1;
    /* A moved client's other GPU is another server's: what names it here (a pool's access
     * for it, say) is refused as a device not given, and said, once. */
    if (d < 0 && c->devs->moved && dev >= 0 && dev < c->devs->n &&
        !atomic_exchange(&c->devs->hole_said, 1))
        srv_log("Client process %d: a call named its device %d, which is another GPU's "
                "server's: CUDA_ERROR_INVALID_DEVICE (what lives in one server is not carried "
                "to another: MPSSHIM_SERVER_PER_GPU=0 serves it, one server for every GPU; "
                "said once)",
                (int)c->pid, (int)dev);
    return d;
}

int srv_dev_out(const struct srv_client *c, int64_t dev)
{
    return dev >= 0 && dev < CHAN_MAX_DEVICES ? c->devs->to_cli[dev] : -1;
}

int srv_dev_any(const struct srv_client *c)
{
    for (int i = 0; i < c->devs->n; i++)
        if (c->devs->to_srv[i] >= 0) return c->devs->to_srv[i];
    return 0;
}

CUresult srv_dev_location(const struct srv_client *c, uint8_t *loc, int in)
{
    CUmemLocation l;
    memcpy(&l, loc, sizeof(l));
    if (l.type != CU_MEM_LOCATION_TYPE_DEVICE)
        return CUDA_SUCCESS; /* host and NUMA ids are no device's */
    int d = in ? srv_dev_in(c, l.id) : srv_dev_out(c, l.id);
    if (d < 0) return CUDA_ERROR_INVALID_DEVICE;
    l.id = d;
    memcpy(loc, &l, sizeof(l));
    return CUDA_SUCCESS;
}

SRV_CLIENT_STATE(devmap, devs)

const struct srv_family srv_family_devices = {.name = "devices", SRV_CLIENT_STATE_HOOKS(devmap)};
