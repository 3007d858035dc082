/* hold [seconds] [--all] [--copy]: an idle client, for counting contexts and memory. Initialises
 * CUDA, allocates 1 MiB (--copy: copies 1 MiB of pageable memory into it), sets it, prints
 * `ready`, sleeps (default an hour) and exits 0. With --all it
 * holds one of most kinds of object first (virtual memory reserved and mapped, a graph and
 * its exec, a graph whose launch left its graph memory allocated, stream-ordered memory, an
 * exported IPC allocation and interprocess event, a stream, a module, managed memory), for tests
 * that kill it and check the server lets go of everything. With --textures it holds textures over
 * its memory, an array and a mipmapped array's level and the mipmapped array itself, and a surface
 * over the array. */
#include "tests/progs/common.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Textures and a surface over d's first 4 KiB, an array, a mipmapped array and its level. */
static void hold_textures(CUdeviceptr d)
{
    CUDA_ARRAY3D_DESCRIPTOR ad = {.Width = 64,
                                  .Height = 64,
                                  .Format = CU_AD_FORMAT_FLOAT,
                                  .NumChannels = 1,
                                  .Flags = CUDA_ARRAY3D_SURFACE_LDST};
    CUarray arr, level;
    CUmipmappedArray mip;
    CHECK(cuArray3DCreate(&arr, &ad));
    ad.Flags = 0;
    CHECK(cuMipmappedArrayCreate(&mip, &ad, 3));
    CHECK(cuMipmappedArrayGetLevel(&level, mip, 1));
    CUDA_TEXTURE_DESC td = {.addressMode = {CU_TR_ADDRESS_MODE_CLAMP, CU_TR_ADDRESS_MODE_CLAMP},
                            .filterMode = CU_TR_FILTER_MODE_POINT};
    CUDA_RESOURCE_DESC rd = {.resType = CU_RESOURCE_TYPE_LINEAR};
    rd.res.linear.devPtr = d;
    rd.res.linear.format = CU_AD_FORMAT_FLOAT;
    rd.res.linear.numChannels = 1;
    rd.res.linear.sizeInBytes = 4096;
    CUtexObject t;
    CUsurfObject s;
    CHECK(cuTexObjectCreate(&t, &rd, &td, NULL));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_ARRAY;
    rd.res.array.hArray = arr;
    CHECK(cuTexObjectCreate(&t, &rd, &td, NULL));
    CHECK(cuSurfObjectCreate(&s, &rd));
    rd.res.array.hArray = level;
    CHECK(cuTexObjectCreate(&t, &rd, &td, NULL));
    memset(&rd, 0, sizeof rd);
    rd.resType = CU_RESOURCE_TYPE_MIPMAPPED_ARRAY;
    rd.res.mipmap.hMipmappedArray = mip;
    td.flags = CU_TRSF_NORMALIZED_COORDINATES;
    CHECK(cuTexObjectCreate(&t, &rd, &td, NULL));
}

int main(int argc, char **argv)
{
    t_init("hold", 0); /* no watchdog: it is meant to sit idle */
    long secs = argc > 1 ? atol(argv[1]) : 3600;
    REQUIRE(secs >= 0, "bad duration '%s'", argv[1]);
    CUdevice dev;
    CUcontext ctx;
    t_setup(&dev, &ctx);
    CUdeviceptr d;
    CHECK(cuMemAlloc(&d, 1 << 20));
    if (t_has_flag(argc, argv, "--copy")) { /* through the staging slots: more than inline */
        static unsigned char src[1 << 20];
        CHECK(cuMemcpyHtoD(d, src, sizeof(src)));
    }
    CHECK(cuMemsetD8(d, 0, 1 << 20));
    if (t_has_flag(argc, argv, "--all")) {
        CUstream s;
        CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
        CUmodule mod = t_load_module("kernels.ptx");
        (void)t_get_function(mod, "vec_add");
        CUmemAllocationProp prop = {.type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                    .location = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0},
                                    .requestedHandleTypes =
                                        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR};
        size_t g = 0;
        CHECK(cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
        CUmemGenericAllocationHandle h;
        CUdeviceptr va;
        CHECK(cuMemCreate(&h, 2 * g, &prop, 0));
        CHECK(cuMemAddressReserve(&va, 4 * g, 0, 0, 0));
        CHECK(cuMemMap(va, 2 * g, 0, h, 0));
        CUmemAccessDesc acc = {.location = prop.location,
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE};
        CHECK(cuMemSetAccess(va, 2 * g, &acc, 1));
        int fd;
        CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
        CUgraph graph;
        CUgraphNode node;
        CUgraphExec exec;
        CHECK(cuGraphCreate(&graph, 0));
        CUDA_MEMSET_NODE_PARAMS ms = {
            .dst = d, .pitch = 0, .value = 7, .elementSize = 1, .width = 4096, .height = 1};
        CHECK(cuGraphAddMemsetNode(&node, graph, NULL, 0, &ms, ctx));
        CHECK(cuGraphInstantiate(&exec, graph, 0));
        CHECK(cuGraphLaunch(exec, s));
        /* Graph memory: allocated by a launch, never freed. */
        CUgraph mgraph;
        CUgraphNode anode;
        CUgraphExec mexec;
        CUDA_MEM_ALLOC_NODE_PARAMS ap = {.bytesize = 1 << 16};
        ap.poolProps.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
        ap.poolProps.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        CHECK(cuGraphCreate(&mgraph, 0));
        CHECK(cuGraphAddMemAllocNode(&anode, mgraph, NULL, 0, &ap));
        CHECK(cuGraphInstantiate(&mexec, mgraph, 0));
        CHECK(cuGraphLaunch(mexec, s));
        CUdeviceptr pooled;
        CHECK(cuMemAllocAsync(&pooled, 1 << 16, s));
        CUipcMemHandle mh;
        CHECK(cuIpcGetMemHandle(&mh, d));
        CUevent ev;
        CUipcEventHandle eh;
        CHECK(cuEventCreate(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
        CHECK(cuIpcGetEventHandle(&eh, ev));
        /* Managed memory, advised and prefetched, with a kernel's work on it queued. */
        CUdeviceptr mg[3];
        CUmemLocation here = {.type = CU_MEM_LOCATION_TYPE_DEVICE, .id = 0};
        for (int i = 0; i < 3; i++) {
            CHECK(cuMemAllocManaged(&mg[i], (size_t)(i + 1) << 20, CU_MEM_ATTACH_GLOBAL));
            CHECK(cuMemAdvise(mg[i], 4096, CU_MEM_ADVISE_SET_READ_MOSTLY, here));
            CHECK(cuMemPrefetchAsync(mg[i], 4096, here, 0, s));
            CHECK(cuMemsetD32Async(mg[i], 5, 1024, s));
        }
        CHECK(cuStreamSynchronize(s));
    }
    if (t_has_flag(argc, argv, "--textures")) hold_textures(d);
    CHECK(cuCtxSynchronize());
    printf("ready\n");
    fflush(stdout);
    /* sleep() returns early on a signal; keep sleeping until the time is up. */
    for (unsigned left = (unsigned)secs; left;)
        left = sleep(left);
    CHECK(cuMemFree(d));
    CHECK(cuDevicePrimaryCtxRelease(dev));
    return 0;
}
