/* What clients answer locally: every attribute of every device, read once at start. */
#include "server/core/server.h"
#include "server/core/devices.h"

#include <stdio.h>
#include <string.h>

int srv_devinfo_fill(struct chan_devinfo *d)
{
    memset(d, 0, sizeof(*d));
    if (DRV(cuDriverGetVersion)(&d->driver_version) != CUDA_SUCCESS) return -1;
    int n = 0;
    if (DRV(cuDeviceGetCount)(&n) != CUDA_SUCCESS) return -1;
    if (n > CHAN_MAX_DEVICES) n = CHAN_MAX_DEVICES;
    d->ndev = n;
    for (int i = 0; i < n; i++) {
        struct chan_devinfo_dev *x = &d->dev[i];
        CUdevice dev;
        if (DRV(cuDeviceGet)(&dev, i) != CUDA_SUCCESS) return -1;
        DRV(cuDeviceGetName)(x->name, sizeof(x->name), dev);
        DRV(cuDeviceGetUuid_v2)(&x->uuid, dev);
        size_t total = 0;
        DRV(cuDeviceTotalMem_v2)(&total, dev);
        x->total_mem = total;
        DRV(cuDeviceGetPCIBusId)(x->pci_bus_id, sizeof(x->pci_bus_id), dev);
        for (int a = 1; a < CU_DEVICE_ATTRIBUTE_MAX; a++)
            x->attr_result[a] = DRV(cuDeviceGetAttribute)(&x->attr[a], (CUdevice_attribute)a, dev);
        x->attr_result[0] = CUDA_ERROR_INVALID_VALUE;
        /* What a client may do with managed and pageable memory through the server, not
         * what this process may: a __managed__ variable's host copy in the client meets the
         * device's only at synchronisations (interpose/mvars.c), so the host may not touch
         * managed memory while the device runs (cuMemAllocManaged's memory, shared pinned
         * memory, is coherent anyway); and the client's pageable memory is another
         * process's, which no kernel here can reach. */
        x->attr[CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 0;
        x->attr[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS] = 0;
        x->attr[CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES] = 0;
        /* Nor what clients cannot have here: multicast objects (cuMulticast* are refused)
         * and fabric handles (export and import take POSIX descriptors only). NCCL asks both
         * and, told yes, builds NVLS and fabric-shared memory on calls that would fail;
         * told no, it uses what is served (issue 30). */
        x->attr[CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED] = 0;
        x->attr[CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED] = 0;
    }
    for (CUdevice a = 0; a < n; a++)
        for (CUdevice b = 0; b < n; b++) {
            struct chan_devinfo_peer *p = &d->peer[a][b];
            if (a == b) continue;
            p->can_ok = DRV(cuDeviceCanAccessPeer)(&p->can, a, b) == CUDA_SUCCESS;
            for (int k = 0; k < CHAN_P2P_ATTRS; k++)
                p->p2p_ok[k] =
                    DRV(cuDeviceGetP2PAttribute)(&p->p2p[k], (CUdevice_P2PAttribute)(k + 1), a,
                                                 b) == CUDA_SUCCESS;
        }
    return 0;
}
