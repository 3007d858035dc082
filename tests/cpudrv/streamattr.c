// Stream attributes (stored and reported back; the CPU has nothing to tune).
#include "cpudrv.h"

static int stream_attr(CUstreamAttrID id)
{
    switch (id) {
    case CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW:
    case CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY:
    case CU_LAUNCH_ATTRIBUTE_PRIORITY:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP:
    case CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN:
    case CU_LAUNCH_ATTRIBUTE_NVLINK_UTIL_CENTRIC_SCHEDULING:
        return 1;
    default:
        return 0;
    }
}

// Locks and resolves a stream; on success cpudrv_big is HELD.
static CUresult find(CUstream h, struct cpudrv_stream **s)
{
    CUresult rc = cpudrv_ready();
    if (rc) return rc;
    cpudrv_lock();
    rc = cpudrv_stream_get(h, cpudrv_ctx_current(), s);
    if (rc) cpudrv_unlock();
    return rc;
}

// A stream attribute (priority, synchronisation policy, access policy window, domains).
CUresult cuStreamGetAttribute(CUstream hStream, CUstreamAttrID attr, CUstreamAttrValue *value_out)
{
    if (!value_out || !stream_attr(attr)) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    CUresult rc = find(hStream, &s);
    if (rc) return TR(rc);
    *value_out = s->attr[attr];
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY) value_out->priority = s->prio;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Sets a stream attribute (a priority is clamped to [-5, 0]).
CUresult cuStreamSetAttribute(CUstream hStream, CUstreamAttrID attr, const CUstreamAttrValue *value)
{
    if (!value || !stream_attr(attr)) return TR(CUDA_ERROR_INVALID_VALUE);
    struct cpudrv_stream *s;
    CUresult rc = find(hStream, &s);
    if (rc) return TR(rc);
    s->attr[attr] = *value;
    if (attr == CU_LAUNCH_ATTRIBUTE_PRIORITY)
        s->prio = value->priority < CPUDRV_PRIO_GREATEST ? CPUDRV_PRIO_GREATEST
                  : value->priority > CPUDRV_PRIO_LEAST  ? CPUDRV_PRIO_LEAST
                                                         : value->priority;
    cpudrv_unlock();
    return TR(CUDA_SUCCESS);
}

// Copies every attribute of src to dst.
CUresult cuStreamCopyAttributes(CUstream dst, CUstream src)
{
    struct cpudrv_stream *s, *d;
    CUresult rc = find(src, &s);
    if (rc) return TR(rc);
    rc = cpudrv_stream_get(dst, cpudrv_ctx_current(), &d);
    if (!rc) {
        for (int i = 0; i < CPUDRV_STREAM_ATTRS; i++)
            d->attr[i] = s->attr[i];
        d->prio = s->prio;
    }
    cpudrv_unlock();
    return TR(rc);
}
