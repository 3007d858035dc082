// Devices: enumeration, names, attributes and properties of an H100/H200 SXM-like GPU.
#include "cpudrv.h"

#include <stdio.h>
#include <string.h>

static const int pci_bus[CPUDRV_MAX_DEVICES] = {0x19, 0x3b, 0x4c, 0x5d, 0x9b, 0xbb, 0xcb, 0xdb};

// Attribute values, indexed by CUdevice_attribute; unlisted ones are 0.
static const int attr_table[CU_DEVICE_ATTRIBUTE_MAX] = {
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y] = 1024,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z] = 64,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X] = 2147483647,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y] = 65535,
    [CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z] = 65535,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK] = CPUDRV_SHMEM_DEFAULT,
    [CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY] = 65536,
    [CU_DEVICE_ATTRIBUTE_WARP_SIZE] = 32,
    [CU_DEVICE_ATTRIBUTE_MAX_PITCH] = 2147483647,
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK] = 65536,
    [CU_DEVICE_ATTRIBUTE_CLOCK_RATE] = 1980000,
    [CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT] = 512,
    [CU_DEVICE_ATTRIBUTE_GPU_OVERLAP] = 1,
    [CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = CPUDRV_SM_COUNT,
    [CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY] = 1,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_HEIGHT] = 65536,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT] = 512,
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS] = 1,
    [CU_DEVICE_ATTRIBUTE_ECC_ENABLED] = 1,
    [CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE] = 2619000,
    [CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH] = 5120,
    [CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE] = 52428800,
    [CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR] = 2048,
    [CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT] = 3,
    [CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING] = 1,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_CAN_TEX2D_GATHER] = 1,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_GATHER_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_WIDTH_ALTERNATE] = 8192,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_HEIGHT_ALTERNATE] = 8192,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE3D_DEPTH_ALTERNATE] = 32768,
    [CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT] = 32,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURECUBEMAP_LAYERED_LAYERS] = 2046,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_HEIGHT] = 65536,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_WIDTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_HEIGHT] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE3D_DEPTH] = 16384,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE1D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACE2D_LAYERED_LAYERS] = 2048,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_SURFACECUBEMAP_LAYERED_LAYERS] = 2046,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_LINEAR_WIDTH] = 268435456,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_WIDTH] = 131072,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_HEIGHT] = 65000,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_LINEAR_PITCH] = 2097120,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE2D_MIPMAPPED_HEIGHT] = 32768,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 9,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = 0,
    [CU_DEVICE_ATTRIBUTE_MAXIMUM_TEXTURE1D_MIPMAPPED_WIDTH] = 32768,
    [CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR] = 233472,
    [CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR] = 65536,
    [CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY] = 1,
    [CU_DEVICE_ATTRIBUTE_SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO] = 2,
    [CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS] = 1,
    [CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM] = 1,
    [CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN] = CPUDRV_SHMEM_OPTIN,
    [CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR] = 32,
    [CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE] = 33554432,
    [CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE] = 134213632,
    [CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK] = 1024,
    [CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS] = 1,
    [CU_DEVICE_ATTRIBUTE_CAN_USE_STREAM_WAIT_VALUE_NOR] = 1,
    [CU_DEVICE_ATTRIBUTE_MEM_SYNC_DOMAIN_COUNT] = 4,
    [CU_DEVICE_ATTRIBUTE_TENSOR_MAP_ACCESS_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_NUMA_ID] = -1,
    [CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED] = 1,
    [CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED] = 1,
    // cuMemCreate's memory can be exported as a file descriptor (it is a memfd).
    [CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED] = 1,
    // Pools cannot be shared with other processes here (no IPC handle types).
    [CU_DEVICE_ATTRIBUTE_MEMPOOL_SUPPORTED_HANDLE_TYPES] = 0,
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID] = 0x233010de,
    [CU_DEVICE_ATTRIBUTE_GPU_PCI_SUBSYSTEM_ID] = 0x16c110de,
};

// Number of devices (MPSSHIM_CPUDRV_DEVICES, default 1).
CUresult cuDeviceGetCount(int *count)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!count) return TR(CUDA_ERROR_INVALID_VALUE);
    *count = cpudrv_ndev;
    return TR(CUDA_SUCCESS);
}

// Device handle for an ordinal (the handle is the ordinal).
CUresult cuDeviceGet(CUdevice *device, int ordinal)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!device) return TR(CUDA_ERROR_INVALID_VALUE);
    if (ordinal < 0 || ordinal >= cpudrv_ndev) return TR(CUDA_ERROR_INVALID_DEVICE);
    *device = ordinal;
    return TR(CUDA_SUCCESS);
}

// "mpsshim CPU test device", truncated to len.
CUresult cuDeviceGetName(char *name, int len, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!name || len <= 0) return TR(CUDA_ERROR_INVALID_VALUE);
    snprintf(name, (size_t)len, "%s", "mpsshim CPU test device");
    return TR(CUDA_SUCCESS);
}

// A stable UUID, distinct per device.
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!uuid) return TR(CUDA_ERROR_INVALID_VALUE);
    static const char stem[14] = {'m', 'p', 's', 's', 'h', 'i', 'm',
                                  '-', 'c', 'p', 'u', 'd', 'r', 'v'};
    memcpy(uuid->bytes, stem, sizeof stem);
    uuid->bytes[14] = 0;
    uuid->bytes[15] = (char)(dev + cpudrv_first);
    // Distinct early too, so that a short prefix names one device (CUDA_VISIBLE_DEVICES).
    uuid->bytes[3] = (char)(uuid->bytes[3] + dev + cpudrv_first);
    return TR(CUDA_SUCCESS);
}

// Windows only in the real driver.
CUresult cuDeviceGetLuid(char *luid, unsigned int *deviceNodeMask, CUdevice dev)
{
    (void)luid;
    (void)deviceNodeMask;
    CUresult rc = cpudrv_dev_check(dev);
    return TR(rc ? rc : CUDA_ERROR_NOT_SUPPORTED);
}

// MPSSHIM_CPUDRV_MEM_MB megabytes.
CUresult cuDeviceTotalMem(size_t *bytes, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!bytes) return TR(CUDA_ERROR_INVALID_VALUE);
    *bytes = cpudrv_mem_bytes;
    return TR(CUDA_SUCCESS);
}

// Every attribute below CU_DEVICE_ATTRIBUTE_MAX answers; others are INVALID_VALUE.
CUresult cuDeviceGetAttribute(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!pi || (int)attrib <= 0 || attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return TR(CUDA_ERROR_INVALID_VALUE);
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_PCI_BUS_ID:
        *pi = pci_bus[dev + cpudrv_first];
        break;
    case CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID:
        *pi = dev + cpudrv_first;
        break;
    case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        *pi = !cpudrv_no_vmm();
        break;
    default:
        *pi = attr_table[attrib];
    }
    return TR(CUDA_SUCCESS);
}

// Deprecated: compute capability 9.0.
CUresult cuDeviceComputeCapability(int *major, int *minor, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!major || !minor) return TR(CUDA_ERROR_INVALID_VALUE);
    *major = 9;
    *minor = 0;
    return TR(CUDA_SUCCESS);
}

// Deprecated: the same limits as the attributes.
CUresult cuDeviceGetProperties(CUdevprop *prop, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!prop) return TR(CUDA_ERROR_INVALID_VALUE);
    prop->maxThreadsPerBlock = attr_table[CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK];
    for (int i = 0; i < 3; i++) {
        prop->maxThreadsDim[i] = attr_table[CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X + i];
        prop->maxGridSize[i] = attr_table[CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X + i];
    }
    prop->sharedMemPerBlock = attr_table[CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK];
    prop->totalConstantMemory = attr_table[CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY];
    prop->SIMDWidth = attr_table[CU_DEVICE_ATTRIBUTE_WARP_SIZE];
    prop->memPitch = attr_table[CU_DEVICE_ATTRIBUTE_MAX_PITCH];
    prop->regsPerBlock = attr_table[CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK];
    prop->clockRate = attr_table[CU_DEVICE_ATTRIBUTE_CLOCK_RATE];
    prop->textureAlign = attr_table[CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT];
    return TR(CUDA_SUCCESS);
}

// "DDDD:BB:DD.F" in upper-case hex (13 bytes with the NUL), truncated to len.
CUresult cuDeviceGetPCIBusId(char *pciBusId, int len, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!pciBusId || len <= 0) return TR(CUDA_ERROR_INVALID_VALUE);
    snprintf(pciBusId, (size_t)len, "%04X:%02X:%02X.0", 0, pci_bus[dev + cpudrv_first], 0);
    return TR(CUDA_SUCCESS);
}

// Accepts "bus:dev.fn" with an optional domain of up to 8 hex digits, any case.
CUresult cuDeviceGetByPCIBusId(CUdevice *dev, const char *pciBusId)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (!dev || !pciBusId) return TR(CUDA_ERROR_INVALID_VALUE);
    unsigned dom = 0, bus = 0, d = 0, fn = 0;
    char tail;
    if (sscanf(pciBusId, "%x:%x:%x.%x%c", &dom, &bus, &d, &fn, &tail) != 4) {
        dom = 0;
        if (sscanf(pciBusId, "%x:%x.%x%c", &bus, &d, &fn, &tail) != 3)
            return TR(CUDA_ERROR_INVALID_VALUE);
    }
    for (int i = 0; i < cpudrv_ndev; i++)
        if (dom == 0 && bus == (unsigned)pci_bus[i + cpudrv_first] && d == 0 && fn == 0) {
            *dev = i;
            return TR(CUDA_SUCCESS);
        }
    return TR(CUDA_ERROR_INVALID_DEVICE);
}

// Distinct devices can reach each other (as over NVLink); a device is not its own peer.
CUresult cuDeviceCanAccessPeer(int *canAccessPeer, CUdevice dev, CUdevice peerDev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (!rc) rc = cpudrv_dev_check(peerDev);
    if (rc) return TR(rc);
    if (!canAccessPeer) return TR(CUDA_ERROR_INVALID_VALUE);
    *canAccessPeer = dev != peerDev;
    return TR(CUDA_SUCCESS);
}

// Peer attributes between two distinct devices.
CUresult cuDeviceGetP2PAttribute(int *value, CUdevice_P2PAttribute attrib, CUdevice srcDevice,
                                 CUdevice dstDevice)
{
    CUresult rc = cpudrv_dev_check(srcDevice);
    if (!rc) rc = cpudrv_dev_check(dstDevice);
    if (rc) return TR(rc);
    if (!value) return TR(CUDA_ERROR_INVALID_VALUE);
    if (srcDevice == dstDevice) return TR(CUDA_ERROR_INVALID_DEVICE);
    switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK:
        *value = 0;
        break;
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED:
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED:
        *value = 1;
        break;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
        *value = 0;
        break;
    default:
        return TR(CUDA_ERROR_INVALID_VALUE);
    }
    return TR(CUDA_SUCCESS);
}

// Largest 1D linear texture, in elements (2^28 bytes' worth, as on Hopper).
CUresult cuDeviceGetTexture1DLinearMaxWidth(size_t *maxWidthInElements, CUarray_format format,
                                            unsigned numChannels, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    size_t fs = format == CU_AD_FORMAT_UNSIGNED_INT8 || format == CU_AD_FORMAT_SIGNED_INT8 ? 1
                : format == CU_AD_FORMAT_UNSIGNED_INT16 || format == CU_AD_FORMAT_SIGNED_INT16 ||
                        format == CU_AD_FORMAT_HALF
                    ? 2
                : format == CU_AD_FORMAT_UNSIGNED_INT32 || format == CU_AD_FORMAT_SIGNED_INT32 ||
                        format == CU_AD_FORMAT_FLOAT
                    ? 4
                    : 0;
    if (!maxWidthInElements || !fs || (numChannels != 1 && numChannels != 2 && numChannels != 4))
        return TR(CUDA_ERROR_INVALID_VALUE);
    *maxWidthInElements = ((size_t)1 << 28) / (fs * numChannels);
    return TR(CUDA_SUCCESS);
}

// Contexts with an SM-count affinity are not supported here (green contexts are).
CUresult cuDeviceGetExecAffinitySupport(int *pi, CUexecAffinityType type, CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!pi || type != CU_EXEC_AFFINITY_TYPE_SM_COUNT) return TR(CUDA_ERROR_INVALID_VALUE);
    *pi = 0;
    return TR(CUDA_SUCCESS);
}

// No native atomics with the host (HOST_NATIVE_ATOMIC_SUPPORTED is 0).
CUresult cuDeviceGetHostAtomicCapabilities(unsigned int *capabilities,
                                           const CUatomicOperation *operations, unsigned int count,
                                           CUdevice dev)
{
    CUresult rc = cpudrv_dev_check(dev);
    if (rc) return TR(rc);
    if (!capabilities || !operations || !count) return TR(CUDA_ERROR_INVALID_VALUE);
    for (unsigned i = 0; i < count; i++) {
        if ((unsigned)operations[i] >= CU_ATOMIC_OPERATION_MAX) return TR(CUDA_ERROR_INVALID_VALUE);
        capabilities[i] = 0;
    }
    return TR(CUDA_SUCCESS);
}

// All atomics over the (pretend) peer link, as NATIVE_ATOMIC_SUPPORTED says.
CUresult cuDeviceGetP2PAtomicCapabilities(unsigned int *capabilities,
                                          const CUatomicOperation *operations, unsigned int count,
                                          CUdevice srcDevice, CUdevice dstDevice)
{
    CUresult rc = cpudrv_dev_check(srcDevice);
    if (!rc) rc = cpudrv_dev_check(dstDevice);
    if (rc) return TR(rc);
    if (!capabilities || !operations || !count) return TR(CUDA_ERROR_INVALID_VALUE);
    if (srcDevice == dstDevice) return TR(CUDA_ERROR_INVALID_DEVICE);
    for (unsigned i = 0; i < count; i++) {
        if ((unsigned)operations[i] >= CU_ATOMIC_OPERATION_MAX) return TR(CUDA_ERROR_INVALID_VALUE);
        capabilities[i] = CU_ATOMIC_CAPABILITY_SIGNED | CU_ATOMIC_CAPABILITY_UNSIGNED |
                          CU_ATOMIC_CAPABILITY_REDUCTION | CU_ATOMIC_CAPABILITY_SCALAR_32 |
                          CU_ATOMIC_CAPABILITY_SCALAR_64;
    }
    return TR(CUDA_SUCCESS);
}

// No graph memory pool to trim.
CUresult cuDeviceGraphMemTrim(CUdevice device)
{
    return TR(cpudrv_dev_check(device));
}

// Remote writes are always visible here.
CUresult cuFlushGPUDirectRDMAWrites(CUflushGPUDirectRDMAWritesTarget target,
                                    CUflushGPUDirectRDMAWritesScope scope)
{
    CUresult rc = cpudrv_ready();
    if (rc) return TR(rc);
    if (target != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TARGET_CURRENT_CTX ||
        (scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_OWNER &&
         scope != CU_FLUSH_GPU_DIRECT_RDMA_WRITES_TO_ALL_DEVICES))
        return TR(CUDA_ERROR_INVALID_VALUE);
    return TR(CUDA_SUCCESS);
}
