/* Unit test of the physical memory handles a process moved to its GPUs' servers keeps per
 * connection (interpose/physical.c), with the connections, routes and IPC round trips
 * stood in for here: two servers answering the same value each keep their own handle (the
 * second handed out as a value of the process's own), retains count, the last release
 * forgets, a mapping of another server's handle maps an import of it, any other call naming
 * one is refused, and a process that did not move keeps nothing. */
#include "interpose/shim.h"

#include <string.h>
#include <unistd.h>

#include "tests/unit/check.h"

static const struct shim_param map_params[] = {
    SHIM_P_VAL(CUdeviceptr),
    SHIM_P_VAL(size_t),
    SHIM_P_VAL(size_t),
    SHIM_P_HANDLE(CUmemGenericAllocationHandle, SHIM_HT_CUmemGenericAllocationHandle),
    SHIM_P_VAL(unsigned long long),
};
const struct shim_call shim_calls[SHIM_NCALLS] = {
    [SHIM_ID_cuMemMap] = {.name = "cuMemMap", .nparams = 5, .params = map_params, .destroys = -1},
};
static const struct shim_call release_call = {
    .name = "cuMemRelease", .nparams = 1, .params = &map_params[3], .destroys = 0};

/* ---------------------------------------------------------------- the stand-ins */

static struct shim_conn conns[2] = {{.slot = 0}, {.slot = 1}};
static int moved = 1, route_dev;       /* the thread's route: device 0 or 1 */
static uint64_t import_answer;         /* what device route_dev's server answers an import */
static uint64_t exported, exported_on; /* what the last export named, and where */

int shim_moved_ordinal(int *of)
{
    *of = 2;
    return moved ? 0 : -1;
}

struct shim_conn *shim_conn_of_device(int d)
{
    return &conns[d == 1];
}

int shim_route_device(void)
{
    return route_dev;
}

struct shim_conn *shim_route_conn(void)
{
    return shim_conn_of_device(route_dev);
}

void shim_route_begin(struct shim_route *saved, int device, uint32_t ctx)
{
    *saved = (struct shim_route){.set = 1, .device = route_dev, .ctx = ctx};
    route_dev = device;
}

void shim_route_end(const struct shim_route *saved)
{
    route_dev = saved->device;
}

uint32_t shim_ctx_of_device(int dev)
{
    return (uint32_t)dev + 1;
}

/* The IPC round trips, as the server the thread's route names answers them: an export names
 * its server's value in the handle's bytes; an import answers import_answer. */
CUresult shim_ipc_op(uint32_t what, uint32_t flags, uint64_t value, const void *handle,
                     struct chan_ipc_reply *out)
{
    (void)flags;
    (void)handle;
    memset(out, 0, sizeof(*out));
    if (what == CHAN_IPC_GET_VMM) {
        exported = value;
        exported_on = (uint64_t)route_dev;
        return CUDA_SUCCESS;
    }
    if (what == CHAN_IPC_OPEN_VMM) {
        out->value = import_answer;
        return CUDA_SUCCESS;
    }
    return CUDA_ERROR_NOT_SUPPORTED;
}

/* The process's devices (two, told apart by their UUIDs' first byte), and what a handle's
 * properties say through the shim's entry point: a device of prop_dev's. */
struct shim_conn shim_conn = {
    .dev = {.ndev = 2, .dev = {[0] = {.uuid = {.bytes = {10}}}, [1] = {.uuid = {.bytes = {11}}}}}};
static int prop_dev;

CUresult cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp *prop,
                                                CUmemGenericAllocationHandle handle)
{
    (void)handle;
    memset(prop, 0, sizeof(*prop));
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop->location = (CUmemLocation){.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = prop_dev};
    return CUDA_SUCCESS;
}

void shim_route_on_phys(int (*fn)(uint64_t client, int *dev))
{
    (void)fn;
}

CUresult shim_refuse_as(const char *what, CUresult err)
{
    (void)what;
    return err;
}

void shim_log(const char *fmt, ...)
{
    (void)fmt;
}

/* ---------------------------------------------------------------- the test */

/* A handle device dev's server answers `value` for: the process's value. */
static uint64_t made_on(int dev, uint64_t value)
{
    route_dev = dev;
    shim_phys_made(&value);
    return value;
}

int main(void)
{
    int dev = -1;
    uint64_t there = 0;
    /* Device 0's server's handle keeps its value; device 1's server's same value is another. */
    uint64_t a = made_on(0, 0x1000);
    CHECK(a == 0x1000);
    uint64_t b = made_on(1, 0x1000);
    CHECK(b != 0x1000 && b != 0);
    CHECK(shim_phys_device(a, &dev) && dev == 0);
    CHECK(shim_phys_device(b, &dev) && dev == 1);
    route_dev = 1;
    CHECK(shim_phys_server(b, &there) == CUDA_SUCCESS && there == 0x1000);
    CHECK(shim_phys_server(a, &there) == CUDA_ERROR_INVALID_VALUE);
    route_dev = 0;
    CHECK(shim_phys_server(a, &there) == CUDA_SUCCESS && there == 0x1000);
    /* A handle the process does not hold goes as it is (its server refuses it). */
    CHECK(shim_phys_server(0x5000, &there) == CUDA_SUCCESS && there == 0x5000);
    CHECK(!shim_phys_device(0x5000, &dev));
    /* A second value device 1 answers gets a value of its own too. */
    uint64_t c = made_on(0, 0x2000), d = made_on(1, 0x2000);
    CHECK(c == 0x2000 && d != c && d != b && d != a);

    /* A retain answers the handle held: the same value, one reference more. */
    CHECK(made_on(1, 0x1000) == b);
    shim_phys_released(b);
    CHECK(shim_phys_device(b, &dev) && dev == 1);
    shim_phys_released(b);
    CHECK(!shim_phys_device(b, &dev));
    /* Then device 1's 0x1000 is no longer held: its next answer of it may keep it. */
    CHECK(made_on(1, 0x1000) != a);

    /* A mapping on device 1 of device 0's handle maps an import of it there. */
    uint64_t val[5] = {0x7000, 0x200000, 0, a, 0}, spare[5] = {0};
    const void *args[5] = {NULL};
    uint64_t imported = 0;
    route_dev = 1;
    import_answer = 0x3000;
    CHECK(shim_phys_args(&shim_calls[SHIM_ID_cuMemMap], val, spare, args, &imported) ==
          CUDA_SUCCESS);
    CHECK(exported == 0x1000 && exported_on == 0); /* asked of device 0's server */
    CHECK(imported == 0x3000 && val[3] == 0x3000 && args[3] == &spare[3]);
    CHECK(shim_phys_device(imported, &dev) && dev == 1 && route_dev == 1);
    /* On device 0, the same call names it as it is. */
    route_dev = 0;
    val[3] = a;
    CHECK(shim_phys_args(&shim_calls[SHIM_ID_cuMemMap], val, spare, args, &imported) ==
          CUDA_SUCCESS);
    CHECK(imported == 0 && val[3] == 0x1000);
    /* Any other call naming another server's handle is refused (route.c sends it there). */
    route_dev = 1;
    val[0] = a;
    CHECK(shim_phys_args(&release_call, val, spare, args, &imported) == CUDA_ERROR_INVALID_VALUE);

    /* A descriptor carries its allocation's properties, its device by UUID: device 1's
     * memory, imported through device 0's server, is said to lie on device 1 without asking
     * that server (whose driver cannot name it); an import without them asks. */
    route_dev = 1;
    prop_dev = 1;
    uint64_t own1 = made_on(1, 0x4000);
    int fd = -1;
    CHECK(SHIM_IMPL(cuMemExportToShareableHandle)(&fd, (CUmemGenericAllocationHandle)own1,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                  0) == CUDA_SUCCESS &&
          fd >= 0);
    route_dev = 0;
    prop_dev = 0; /* what device 0's server would say, were it asked */
    import_answer = 0x5000;
    CUmemGenericAllocationHandle imp = 0;
    CHECK(SHIM_IMPL(cuMemImportFromShareableHandle)(&imp, (void *)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_SUCCESS);
    CUmemAllocationProp got;
    CUmemGenericAllocationHandle asked = (CUmemGenericAllocationHandle)0x5000;
    CUmemAllocationProp *gotp = &got;
    const void *pargs[2] = {&gotp, &asked};
    memset(&got, 0, sizeof(got));
    CHECK(shim_hook_phys_props.known(pargs) && got.location.id == 1 &&
          got.location.type == CU_MEM_LOCATION_TYPE_DEVICE &&
          got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    /* A handle not imported so (this process's own) is asked of its server. */
    asked = (CUmemGenericAllocationHandle)0x2000;
    CHECK(!shim_hook_phys_props.known(pargs));
    /* A GPU the process does not see: nothing carried, its server answers. */
    close(fd);
    route_dev = 1;
    prop_dev = 1;
    shim_conn.dev.dev[1].uuid.bytes[0] = 12; /* the exporter's device 1 is another GPU */
    CHECK(SHIM_IMPL(cuMemExportToShareableHandle)(&fd, (CUmemGenericAllocationHandle)own1,
                                                  CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                  0) == CUDA_SUCCESS);
    shim_conn.dev.dev[1].uuid.bytes[0] = 11;
    route_dev = 0;
    import_answer = 0x6000;
    CHECK(SHIM_IMPL(cuMemImportFromShareableHandle)(&imp, (void *)(intptr_t)fd,
                                                    CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) ==
          CUDA_SUCCESS);
    asked = (CUmemGenericAllocationHandle)0x6000;
    CHECK(!shim_hook_phys_props.known(pargs));
    close(fd);

    /* A process that did not move keeps nothing. */
    moved = 0;
    CHECK(made_on(1, 0x9000) == 0x9000);
    CHECK(!shim_phys_device(0x9000, &dev));
    if (failures) return 1;
    printf("PASS physical handles per connection\n");
    return 0;
}
