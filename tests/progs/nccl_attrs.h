/* NCCL's launch attributes (enqueue.cc, ncclLaunchKernel on sm_90 with a CUDA 12 driver): a
 * cluster of `cluster` blocks (the grid a multiple of it), scheduled spread, and the remote
 * memory synchronisation domain. Shared by tests/progs/ncclish.c and tests/cudart/ncclsmem.cu,
 * the driver API and the runtime making the same launch. Fills a[0..2]; returns 3. */
#ifndef MPSSHIM_TESTS_PROGS_NCCL_ATTRS_H
#define MPSSHIM_TESTS_PROGS_NCCL_ATTRS_H

#include <string.h>
#include <cuda.h>

static inline unsigned nccl_launch_attrs(CUlaunchAttribute a[3], unsigned cluster)
{
    memset(a, 0, 3 * sizeof(*a));
    a[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    a[0].value.clusterDim.x = cluster;
    a[0].value.clusterDim.y = 1;
    a[0].value.clusterDim.z = 1;
    a[1].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE;
    a[1].value.clusterSchedulingPolicyPreference = CU_CLUSTER_SCHEDULING_POLICY_SPREAD;
    a[2].id = CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN;
    a[2].value.memSyncDomain = CU_LAUNCH_MEM_SYNC_DOMAIN_REMOTE;
    return 3;
}

#endif
