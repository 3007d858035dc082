/* Devices, answered locally from what the server published once at connection (PyTorch
 * alone asks hundreds of attributes), plus cuInit, versions and error strings. */
#include "interpose/shim.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

CUresult SHIM_IMPL(cuInit)(unsigned int Flags)
{
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUresult r = shim_connect();
    if (r != CUDA_SUCCESS) return r;
    if (shim_conn.dev.ndev == 0) return CUDA_ERROR_NO_DEVICE;
    shim_set_initialized();
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDriverGetVersion)(int *driverVersion)
{
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    /* Without a server, report the API this shim was built for. */
    *driverVersion = shim_connect() == CUDA_SUCCESS ? shim_conn.dev.driver_version : CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult shim_check_device(CUdevice dev)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    return dev >= 0 && dev < shim_conn.dev.ndev ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult SHIM_IMPL(cuDeviceGetCount)(int *count)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    *count = shim_conn.dev.ndev;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGet)(CUdevice *device, int ordinal)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (ordinal < 0 || ordinal >= shim_conn.dev.ndev) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGetName)(char *name, int len, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(name, (size_t)len, "%s", shim_conn.dev.dev[dev].name);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGetUuid_v2)(CUuuid *uuid, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!uuid) return CUDA_ERROR_INVALID_VALUE;
    *uuid = shim_conn.dev.dev[dev].uuid;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGetUuid)(CUuuid *uuid, CUdevice dev)
{
    return cuDeviceGetUuid_v2(uuid, dev);
}

CUresult SHIM_IMPL(cuDeviceTotalMem_v2)(size_t *bytes, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    *bytes = shim_conn.dev.dev[dev].total_mem;
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGetAttribute)(int *pi, CUdevice_attribute attrib, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!pi || (int)attrib <= 0 || (int)attrib >= CU_DEVICE_ATTRIBUTE_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    const struct chan_devinfo_dev *d = &shim_conn.dev.dev[dev];
    if (d->attr_result[attrib] != CUDA_SUCCESS) return (CUresult)d->attr_result[attrib];
    *pi = d->attr[attrib];
    return CUDA_SUCCESS;
}

static int attr(CUdevice dev, CUdevice_attribute a)
{
    return shim_conn.dev.dev[dev].attr[a];
}

CUresult SHIM_IMPL(cuDeviceComputeCapability)(int *major, int *minor, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!major || !minor) return CUDA_ERROR_INVALID_VALUE;
    *major = attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
    *minor = attr(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGetProperties)(CUdevprop *prop, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!prop) return CUDA_ERROR_INVALID_VALUE;
    prop->maxThreadsPerBlock = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
    prop->maxThreadsDim[0] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X);
    prop->maxThreadsDim[1] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y);
    prop->maxThreadsDim[2] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z);
    prop->maxGridSize[0] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X);
    prop->maxGridSize[1] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y);
    prop->maxGridSize[2] = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z);
    prop->sharedMemPerBlock = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
    prop->totalConstantMemory = attr(dev, CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY);
    prop->SIMDWidth = attr(dev, CU_DEVICE_ATTRIBUTE_WARP_SIZE);
    prop->memPitch = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_PITCH);
    prop->regsPerBlock = attr(dev, CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
    prop->clockRate = attr(dev, CU_DEVICE_ATTRIBUTE_CLOCK_RATE);
    prop->textureAlign = attr(dev, CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGetPCIBusId)(char *pciBusId, int len, CUdevice dev)
{
    CUresult r = shim_check_device(dev);
    if (r != CUDA_SUCCESS) return r;
    if (!pciBusId || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    snprintf(pciBusId, (size_t)len, "%s", shim_conn.dev.dev[dev].pci_bus_id);
    return CUDA_SUCCESS;
}

CUresult SHIM_IMPL(cuDeviceGetByPCIBusId)(CUdevice *dev, const char *pciBusId)
{
    CUresult r = shim_ready();
    if (r != CUDA_SUCCESS) return r;
    if (!dev || !pciBusId) return CUDA_ERROR_INVALID_VALUE;
    unsigned dom = 0, bus = 0, d = 0, fn = 0;
    /* Accepted forms, as the driver's: [domain]:[bus]:[device].[function], or without
     * the domain. */
    if (sscanf(pciBusId, "%x:%x:%x.%x", &dom, &bus, &d, &fn) != 4) {
        dom = 0;
        if (sscanf(pciBusId, "%x:%x.%x", &bus, &d, &fn) != 3) return CUDA_ERROR_INVALID_VALUE;
    }
    for (int i = 0; i < shim_conn.dev.ndev; i++)
        if ((unsigned)attr(i, CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID) == dom &&
            (unsigned)attr(i, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID) == bus &&
            (unsigned)attr(i, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID) == d) {
            *dev = i;
            return CUDA_SUCCESS;
        }
    return CUDA_ERROR_INVALID_DEVICE;
}

/* ---------------------------------------------------------------- errors */

CUresult SHIM_IMPL(cuGetErrorName)(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    *pStr = shim_error_name(error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

/* The real driver's descriptions, fetched from the server once per code and kept for the
 * life of the process (callers keep the pointers). Guarded by strings_lock. */
static pthread_mutex_t strings_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
    int code;
    char *text;
} strings[256];
static unsigned nstrings;

CUresult SHIM_IMPL(cuGetErrorString)(CUresult error, const char **pStr)
{
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    const char *name = shim_error_name(error);
    if (!name) {
        *pStr = NULL;
        return CUDA_ERROR_INVALID_VALUE;
    }
    pthread_mutex_lock(&strings_lock);
    for (unsigned i = 0; i < nstrings; i++)
        if (strings[i].code == (int)error) {
            *pStr = strings[i].text;
            pthread_mutex_unlock(&strings_lock);
            return CUDA_SUCCESS;
        }
    pthread_mutex_unlock(&strings_lock);
    char text[512] = "";
    int32_t code = (int32_t)error;
    uint32_t n = 0;
    /* Without a server (or before cuInit) the name is the best description there is. */
    if (shim_connect() != CUDA_SUCCESS ||
        shim_rpc(CHAN_OP_ERROR_STRING, &code, sizeof(code), text, sizeof(text) - 1, &n) !=
            CUDA_SUCCESS ||
        n == 0)
        snprintf(text, sizeof(text), "%s", name);
    text[sizeof(text) - 1] = '\0';
    pthread_mutex_lock(&strings_lock);
    char *kept = NULL;
    for (unsigned i = 0; i < nstrings; i++)
        if (strings[i].code == (int)error) kept = strings[i].text;
    if (!kept && nstrings < sizeof(strings) / sizeof(strings[0]) && (kept = strdup(text))) {
        strings[nstrings].code = (int)error;
        strings[nstrings++].text = kept;
    }
    pthread_mutex_unlock(&strings_lock);
    *pStr = kept ? kept : name;
    return CUDA_SUCCESS;
}
