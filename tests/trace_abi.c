/* The server's own declarations of CUPTI's records (server/control/trace_cupti.h) against the
 * toolkit's cupti_activity.h: every field the server reads is where CUPTI writes it.
 * Compiled (never run) by tests/trace.sh where the header is installed. */
#include <cupti_activity.h>
#include <stddef.h>

#include "server/control/trace_cupti.h"

#define SAME(ours, theirs, a, b)                                                                   \
    _Static_assert(offsetof(ours, a) == offsetof(theirs, b) &&                                     \
                       sizeof(((ours *)0)->a) == sizeof(((theirs *)0)->b),                         \
                   #ours "." #a " is not where " #theirs "." #b " is")

SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, kind, kind);
SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, start, start);
SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, end, end);
SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, device_id, deviceId);
SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, context_id, contextId);
SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, stream_id, streamId);
SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, correlation_id, correlationId);
SAME(struct srv_cupti_kernel, CUpti_ActivityKernel10, name, name);

SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, kind, kind);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, copy_kind, copyKind);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, bytes, bytes);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, start, start);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, end, end);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, device_id, deviceId);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, context_id, contextId);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, stream_id, streamId);
SAME(struct srv_cupti_memcpy, CUpti_ActivityMemcpy6, correlation_id, correlationId);

SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, kind, kind);
SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, bytes, bytes);
SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, start, start);
SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, end, end);
SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, device_id, deviceId);
SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, context_id, contextId);
SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, stream_id, streamId);
SAME(struct srv_cupti_memset, CUpti_ActivityMemset4, correlation_id, correlationId);

SAME(struct srv_cupti_sync, CUpti_ActivitySynchronization2, kind, kind);
SAME(struct srv_cupti_sync, CUpti_ActivitySynchronization2, type, type);
SAME(struct srv_cupti_sync, CUpti_ActivitySynchronization2, start, start);
SAME(struct srv_cupti_sync, CUpti_ActivitySynchronization2, end, end);
SAME(struct srv_cupti_sync, CUpti_ActivitySynchronization2, correlation_id, correlationId);
SAME(struct srv_cupti_sync, CUpti_ActivitySynchronization2, context_id, contextId);
SAME(struct srv_cupti_sync, CUpti_ActivitySynchronization2, stream_id, streamId);

/* Enumerators of two different enums: compared as ints. */
#define SAME_VALUE(theirs, ours) _Static_assert((int)(theirs) == (int)(ours), #ours)
SAME_VALUE(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, SRV_CUPTI_KIND_CONCURRENT_KERNEL);
SAME_VALUE(CUPTI_ACTIVITY_KIND_KERNEL, SRV_CUPTI_KIND_KERNEL);
SAME_VALUE(CUPTI_ACTIVITY_KIND_MEMCPY, SRV_CUPTI_KIND_MEMCPY);
SAME_VALUE(CUPTI_ACTIVITY_KIND_MEMSET, SRV_CUPTI_KIND_MEMSET);
SAME_VALUE(CUPTI_ACTIVITY_KIND_SYNCHRONIZATION, SRV_CUPTI_KIND_SYNCHRONIZATION);
SAME_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, SRV_CUPTI_MEMCPY_HTOD);
SAME_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_DTOH, SRV_CUPTI_MEMCPY_DTOH);
SAME_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD, SRV_CUPTI_MEMCPY_DTOD);
SAME_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH, SRV_CUPTI_MEMCPY_HTOH);
SAME_VALUE(CUPTI_ACTIVITY_MEMCPY_KIND_PTOP, SRV_CUPTI_MEMCPY_PTOP);
SAME_VALUE(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_EVENT_SYNCHRONIZE, SRV_CUPTI_SYNC_EVENT);
SAME_VALUE(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_WAIT_EVENT, SRV_CUPTI_SYNC_STREAM_WAIT_EVENT);
SAME_VALUE(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_STREAM_SYNCHRONIZE, SRV_CUPTI_SYNC_STREAM);
SAME_VALUE(CUPTI_ACTIVITY_SYNCHRONIZATION_TYPE_CONTEXT_SYNCHRONIZE, SRV_CUPTI_SYNC_CONTEXT);
SAME_VALUE(CUPTI_SUCCESS, SRV_CUPTI_SUCCESS);
SAME_VALUE(CUPTI_ERROR_INVALID_PARAMETER, SRV_CUPTI_ERROR_INVALID_PARAMETER);
SAME_VALUE(CUPTI_ERROR_INVALID_CONTEXT, SRV_CUPTI_ERROR_INVALID_CONTEXT);
SAME_VALUE(CUPTI_ERROR_MAX_LIMIT_REACHED, SRV_CUPTI_ERROR_MAX_LIMIT_REACHED);
SAME_VALUE(CUPTI_ERROR_NOT_INITIALIZED, SRV_CUPTI_ERROR_NOT_INITIALIZED);
SAME_VALUE(CUPTI_ERROR_INVALID_STREAM, SRV_CUPTI_ERROR_INVALID_STREAM);
SAME_VALUE(CUPTI_ERROR_INVALID_KIND, SRV_CUPTI_ERROR_INVALID_KIND);
SAME_VALUE(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, SRV_CUPTI_FLUSH_FORCED);

/* The functions' types, as the server calls them. */
#define X(name, ret, args) _Static_assert(sizeof(ret) == sizeof(CUptiResult), #name);
SRV_CUPTI_FUNCTIONS(X)
#undef X
static void same_types(void)
{
    CUptiResult (*a)(CUpti_BuffersCallbackRequestFunc, CUpti_BuffersCallbackCompleteFunc) =
        cuptiActivityRegisterCallbacks;
    CUptiResult (*b)(CUcontext, CUstream, uint8_t, uint32_t *) = cuptiGetStreamIdEx;
    CUptiResult (*c)(CUcontext, uint32_t *) = cuptiGetContextId;
    CUptiResult (*d)(uint64_t *) = cuptiGetTimestamp;
    CUptiResult (*e)(uint32_t) = cuptiActivityFlushAll;
    (void)a, (void)b, (void)c, (void)d, (void)e;
}
void (*trace_abi_keep)(void) = same_types;
