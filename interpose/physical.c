/* Physical memory handles (CUmemGenericAllocationHandle) in a process moved to its GPUs'
 * servers (MPSSHIM_SERVER_PER_GPU_MOVE, conn.c; issue 30). A handle is its server's driver
 * value, known to that server alone, and two servers' drivers may give the same value. So here
 * every handle the process holds is kept with the connection that made it: calls naming it go
 * there (route.c), with that server's value; a value a second server gives that the process
 * already holds from another is handed out as one of our own (SYNTH), unique in the process.
 *
 * A mapping is made where its address space was reserved: the thread's server. NCCL's ranks
 * in one process map each other's buffers that way (p2pMap: the rank of device 1 reserves,
 * maps device 0's handle and grants device 1 access). A cuMemMap naming a handle of another
 * server maps an import of it instead: the handle exported by its server (CHAN_IPC_GET_VMM:
 * its creator must have asked for POSIX descriptors, as NCCL does), imported here
 * (CHAN_IPC_OPEN_VMM, which the two servers carry between them, server/memory/ipcpeer.c), and
 * released once mapped: the mapping holds the memory, as natively.
 *
 * Counts: the driver's reference count of a handle is the number of cuMemCreate, import and
 * retain answers less the releases; an entry lives while that is above 0 here (a retain
 * answers the value held). In a process that did not move no handle is kept.
 *
 * Handles exported as POSIX descriptors and imported from them (cuMemExportToShareableHandle,
 * cuMemImportFromShareableHandle: NCCL's ranks pass them) are this file's too, in any
 * process: the descriptor carries the server's handle bytes (below), and the allocation's
 * properties with its GPU's UUID, so that a moved process answers which of its devices
 * memory it imported from another GPU's server lies on: that server's driver cannot name a
 * GPU it does not hold (driver 580 answers CUDA_ERROR_INVALID_DEVICE on two H200s). */
#define _GNU_SOURCE
#include "interpose/shim.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <uthash.h>

/* Values handed out for a second server's handle whose value the process already holds:
 * a counter under a tag no driver handle was seen to carry; one found held is skipped. */
#define SYNTH 0x4d50530000000000ull

struct at {
    uint64_t slot, server; /* the connection's slot (rpc.c) and its server's value */
};

struct phys {
    uint64_t client; /* the value the process knows */
    struct at at;
    int dev;       /* a device that connection serves: where a route goes (-1: shim_conn) */
    uint32_t refs; /* the driver's references the process holds */
    /* An import whose descriptor carried its allocation's properties (below), the location
     * named by this process's ordinal of its GPU: answered here (carried 1). */
    int carried;
    CUmemAllocationProp prop;
    UT_hash_handle hc, hs;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct phys *by_client, *by_server; /* under lock */
static uint64_t next_synth;                /* under lock */

int shim_phys_live(void)
{
    int of;
    return shim_moved_ordinal(&of) >= 0;
}

/* lock held: the entry of the process's value v, or NULL. */
static struct phys *find(uint64_t v)
{
    struct phys *e = NULL;
    HASH_FIND(hc, by_client, &v, sizeof(v), e);
    return e;
}

int shim_phys_device(uint64_t client, int *dev)
{
    if (!shim_phys_live()) return 0;
    pthread_mutex_lock(&lock);
    struct phys *e = find(client);
    if (e) *dev = e->dev;
    pthread_mutex_unlock(&lock);
    return e != NULL;
}

/* The server's value of client's handle on connection `to` (*server), or what it is when
 * the process does not hold it (the server refuses it as the driver would): 0. -1 when it is
 * another connection's (*dev: a device of that one). */
static int server_value(uint64_t client, const struct shim_conn *to, uint64_t *server, int *dev)
{
    int rc = 0;
    pthread_mutex_lock(&lock);
    struct phys *e = find(client);
    *server = client;
    if (e && e->at.slot == (uint64_t)to->slot) {
        *server = e->at.server;
    } else if (e) {
        *dev = e->dev;
        rc = -1;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

void shim_phys_made(uint64_t *value)
{
    if (!shim_phys_live() || !*value) return;
    struct shim_conn *c = shim_route_conn();
    struct at at = {.slot = (uint64_t)c->slot, .server = *value};
    pthread_mutex_lock(&lock);
    struct phys *e = NULL;
    HASH_FIND(hs, by_server, &at, sizeof(at), e);
    if (e) { /* a retain, or an import the driver answered with a handle held already */
        e->refs++;
        *value = e->client;
        pthread_mutex_unlock(&lock);
        return;
    }
    if (!(e = calloc(1, sizeof(*e)))) {
        /* Not kept: its calls go to the thread's server, as in a process of one. */
        pthread_mutex_unlock(&lock);
        shim_log("physical memory handle %#llx: no memory to keep it (said each time)",
                 (unsigned long long)*value);
        return;
    }
    uint64_t client = *value;
    int of, dev = shim_route_device();
    if (dev < 0) dev = shim_moved_ordinal(&of); /* shim_conn's device */
    while (find(client))
        client = SYNTH | (++next_synth & 0xffffffffffull);
    *e = (struct phys){.client = client, .at = at, .dev = dev, .refs = 1};
    HASH_ADD(hc, by_client, client, sizeof(e->client), e);
    HASH_ADD(hs, by_server, at, sizeof(e->at), e);
    *value = client;
    pthread_mutex_unlock(&lock);
}

void shim_phys_released(uint64_t client)
{
    if (!shim_phys_live()) return;
    pthread_mutex_lock(&lock);
    struct phys *e = find(client);
    if (e && --e->refs == 0) {
        HASH_DELETE(hc, by_client, e);
        HASH_DELETE(hs, by_server, e);
        free(e);
    }
    pthread_mutex_unlock(&lock);
}

static CUresult import_bytes(const uint8_t bytes[CU_IPC_HANDLE_SIZE], uint64_t *handle);

__attribute__((constructor)) static void tell_route(void)
{
    shim_route_on_phys(shim_phys_device);
}

/* client's handle, of device dev's server, imported in the server the thread's requests go to
 * (*here: the process's value of the import, which the caller releases). */
static CUresult import(uint64_t client, int dev, uint64_t *here)
{
    uint8_t bytes[CU_IPC_HANDLE_SIZE];
    struct shim_route saved;
    shim_route_begin(&saved, dev, shim_ctx_of_device(dev));
    CUresult r = shim_phys_handle_bytes(client, bytes);
    shim_route_end(&saved);
    if (r != CUDA_SUCCESS) {
        static _Atomic int said;
        if (!atomic_exchange(&said, 1))
            shim_log("cuMemMap of physical memory another GPU's server of this process holds: "
                     "it cannot be carried there (not made exportable as a POSIX descriptor)"
                     ": the driver's error (said once)");
        return r;
    }
    return import_bytes(bytes, here);
}

CUresult shim_phys_args(const struct shim_call *d, uint64_t *val, uint64_t *spare,
                        const void **args, uint64_t *imported)
{
    *imported = 0;
    if (!shim_phys_live()) return CUDA_SUCCESS;
    struct shim_conn *to = shim_route_conn();
    for (int i = 0; i < d->nparams; i++) {
        const struct shim_param *p = &d->params[i];
        if (p->kind != SHIM_PK_HANDLE || p->htype != SHIM_HT_CUmemGenericAllocationHandle) continue;
        uint64_t there;
        int dev = -1;
        if (server_value(val[i], to, &there, &dev) != 0) {
            /* Another server's: only a mapping comes here with it (route.c sends the rest
             * to its server). */
            if (d != &shim_calls[SHIM_ID_cuMemMap]) return CUDA_ERROR_INVALID_VALUE;
            CUresult r = import(val[i], dev, imported);
            if (r != CUDA_SUCCESS) return r;
            if (server_value(*imported, to, &there, &dev) != 0) return CUDA_ERROR_UNKNOWN;
        }
        val[i] = spare[i] = there;
        args[i] = &spare[i];
    }
    return CUDA_SUCCESS;
}

int shim_phys_route(uint64_t client, struct shim_route *saved)
{
    int dev;
    if (!shim_phys_device(client, &dev) || shim_conn_of_device(dev) == shim_route_conn()) return 0;
    shim_route_begin(saved, dev, shim_ctx_of_device(dev));
    return 1;
}

CUresult shim_phys_server(uint64_t client, uint64_t *server)
{
    int dev = -1;
    if (!shim_phys_live()) {
        *server = client;
        return CUDA_SUCCESS;
    }
    return server_value(client, shim_route_conn(), server, &dev) == 0 ? CUDA_SUCCESS
                                                                      : CUDA_ERROR_INVALID_VALUE;
}

/* ---------------------------------------------------------------- as POSIX descriptors */

/* The descriptor of an exported physical allocation is a sealed memfd holding the server's
 * handle bytes: any process may receive it (SCM_RIGHTS, pidfd_getfd) and import it, and
 * what it names is decided by the server from those bytes alone. */
#define VMM_FD_NAME "mpsshim-vmm-handle"

/* What follows the handle bytes in the descriptor: the allocation's properties as its
 * exporter saw them, its location's device named by UUID (the exporter's ordinals are its
 * own). Read by the importer as untrusted bytes: only the importer's own answers about the
 * memory depend on them (a forged one misleads only a process that took the descriptor from
 * its forger); a descriptor without them (an older shim's) is imported as before. */
#define CARRIED_MAGIC 0x31504f5250535050ull /* "PPSPROP1" */
struct carried {
    uint64_t magic;
    uint32_t size;      /* sizeof(struct carried) */
    uint32_t on_device; /* 1: prop's location is a device, the one of `uuid` */
    CUuuid uuid;
    CUmemAllocationProp prop; /* its win32HandleMetaData NULL */
};

/* The properties of client's handle to carry, as the process's entry point answers them
 * (routed to its server): 0, or -1 when they cannot be had (nothing is carried). */
static int carry_of(CUmemGenericAllocationHandle client, struct carried *out)
{
    memset(out, 0, sizeof(*out));
    if (cuMemGetAllocationPropertiesFromHandle(&out->prop, client) != CUDA_SUCCESS) return -1;
    out->prop.win32HandleMetaData = NULL;
    out->magic = CARRIED_MAGIC;
    out->size = sizeof(*out);
    const CUmemLocation *l = &out->prop.location;
    if (l->type == CU_MEM_LOCATION_TYPE_DEVICE) {
        if (l->id < 0 || l->id >= shim_conn.dev.ndev || l->id >= CHAN_MAX_DEVICES) return -1;
        out->on_device = 1;
        out->uuid = shim_conn.dev.dev[l->id].uuid;
    }
    return 0;
}

/* lock not held: client's import keeps the carried properties c, read from its descriptor,
 * its device named by this process's ordinal of the UUID; none when this process does not
 * see that GPU (its server's answer, the driver's refusal, stands). */
static void carried_keep(uint64_t client, const struct carried *c)
{
    CUmemAllocationProp prop = c->prop;
    prop.win32HandleMetaData = NULL;
    if (c->on_device) {
        int k = 0;
        while (k < shim_conn.dev.ndev && k < CHAN_MAX_DEVICES &&
               memcmp(&shim_conn.dev.dev[k].uuid, &c->uuid, sizeof(c->uuid)) != 0)
            k++;
        if (k >= shim_conn.dev.ndev || k >= CHAN_MAX_DEVICES) return;
        prop.location.id = k;
    }
    pthread_mutex_lock(&lock);
    struct phys *e = find(client);
    if (e) {
        e->prop = prop;
        e->carried = 1;
    }
    pthread_mutex_unlock(&lock);
}

/* cuMemGetAllocationPropertiesFromHandle (its `client:` hook): the carried properties of an
 * import, where its descriptor had them; else the server answers. args name the server's
 * value of the handle on the connection the call goes to (shim_phys_args). */
static int props_known(const void *const *args)
{
    CUmemAllocationProp *prop = *(CUmemAllocationProp *const *)args[0];
    uint64_t there = (uint64_t)*(const CUmemGenericAllocationHandle *)args[1];
    if (!prop || !shim_phys_live()) return 0;
    struct at at = {.slot = (uint64_t)shim_route_conn()->slot, .server = there};
    int known = 0;
    pthread_mutex_lock(&lock);
    struct phys *e = NULL;
    HASH_FIND(hs, by_server, &at, sizeof(at), e);
    if (e && e->carried) {
        *prop = e->prop;
        known = 1;
    }
    pthread_mutex_unlock(&lock);
    return known;
}

const struct shim_hook shim_hook_phys_props = {.known = props_known};

CUresult shim_phys_handle_bytes(uint64_t client, uint8_t out[CU_IPC_HANDLE_SIZE])
{
    struct chan_ipc_reply rep;
    uint64_t there;
    CUresult r = shim_phys_server(client, &there);
    if (r != CUDA_SUCCESS) return r;
    r = shim_ipc_op(CHAN_IPC_GET_VMM, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, there, NULL, &rep);
    if (r == CUDA_SUCCESS) memcpy(out, rep.handle, CU_IPC_HANDLE_SIZE);
    return r;
}

/* Handle bytes imported through the server the thread's requests go to: *handle, the
 * process's value of the import. */
static CUresult import_bytes(const uint8_t bytes[CU_IPC_HANDLE_SIZE], uint64_t *handle)
{
    struct chan_ipc_reply out;
    CUresult r = shim_ipc_op(CHAN_IPC_OPEN_VMM, 0, 0, bytes, &out);
    if (r != CUDA_SUCCESS) return r;
    *handle = out.value;
    shim_phys_made(handle);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuMemExportToShareableHandle)(void *shareableHandle,
                                                 CUmemGenericAllocationHandle handle,
                                                 CUmemAllocationHandleType handleType,
                                                 unsigned long long flags)
{
    if (!shareableHandle || flags) return CUDA_ERROR_INVALID_VALUE;
    if (handleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return shim_refuse_as("cuMemExportToShareableHandle of a handle type other than "
                              "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                              CUDA_ERROR_NOT_SUPPORTED);
    /* At the server that holds it, as it names it. */
    struct shim_route saved;
    uint8_t bytes[CU_IPC_HANDLE_SIZE];
    int routed = shim_phys_route(handle, &saved);
    CUresult r = shim_phys_handle_bytes(handle, bytes);
    if (routed) shim_route_end(&saved);
    if (r != CUDA_SUCCESS) return r;
    struct carried c;
    int carry = carry_of(handle, &c) == 0;
    int fd = memfd_create(VMM_FD_NAME, MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (pwrite(fd, bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes) ||
        (carry && pwrite(fd, &c, sizeof(c), sizeof(bytes)) != (ssize_t)sizeof(c)) ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) != 0) {
        close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    *(int *)shareableHandle = fd;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuMemImportFromShareableHandle)(CUmemGenericAllocationHandle *handle,
                                                   void *osHandle,
                                                   CUmemAllocationHandleType shHandleType)
{
    uint8_t bytes[CU_IPC_HANDLE_SIZE];
    if (!handle) return CUDA_ERROR_INVALID_VALUE;
    if (shHandleType != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR)
        return shim_refuse_as("cuMemImportFromShareableHandle of a handle type other than "
                              "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR",
                              CUDA_ERROR_NOT_SUPPORTED);
    /* A descriptor that is not one of ours (another server's clients export the same way;
     * a process running on the driver itself exports its own kind) reads as a bad one. */
    int fd = (int)(intptr_t)osHandle;
    if (pread(fd, bytes, sizeof(bytes), 0) != (ssize_t)sizeof(bytes))
        return CUDA_ERROR_INVALID_VALUE;
    uint64_t value = 0;
    CUresult r = import_bytes(bytes, &value);
    if (r != CUDA_SUCCESS) return r;
    *handle = (CUmemGenericAllocationHandle)value;
    struct carried c;
    if (shim_phys_live() && pread(fd, &c, sizeof(c), sizeof(bytes)) == (ssize_t)sizeof(c) &&
        c.magic == CARRIED_MAGIC && c.size == sizeof(c))
        carried_keep(value, &c);
    return CUDA_SUCCESS;
}
