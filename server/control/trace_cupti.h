/* The part of CUPTI's activity API that the server's traces use (server/control/trace.c), declared
 * here so that the server builds without CUPTI's headers and loads the library only when a
 * trace is asked for. The CPU test driver's stand-in (tests/cpudrv/cupti.c) writes records
 * in the same layout.
 *
 * Records are CUPTI's packed structures; only their leading fields are declared. CUPTI adds
 * fields at the end of a record when it makes a new version of it, so the leading ones keep
 * their places across versions (tests/trace_abi.c checks them against the toolkit's
 * cupti_activity.h where one is installed: CUpti_ActivityKernel10, CUpti_ActivityMemcpy6,
 * CUpti_ActivityMemset4 and CUpti_ActivitySynchronization2 of CUPTI 13.0). */
#ifndef MPSSHIM_TRACE_CUPTI_H
#define MPSSHIM_TRACE_CUPTI_H

#include <cuda.h>
#include <stddef.h>
#include <stdint.h>

typedef int srv_cupti_result; /* CUptiResult: 0 is CUPTI_SUCCESS */
#define SRV_CUPTI_SUCCESS 0
#define SRV_CUPTI_ERROR_INVALID_PARAMETER 1
#define SRV_CUPTI_ERROR_INVALID_CONTEXT 3
#define SRV_CUPTI_ERROR_MAX_LIMIT_REACHED 12
#define SRV_CUPTI_ERROR_NOT_INITIALIZED 15
#define SRV_CUPTI_ERROR_INVALID_STREAM 20
#define SRV_CUPTI_ERROR_INVALID_KIND 21

/* CUpti_ActivityKind values. */
enum {
    SRV_CUPTI_KIND_MEMCPY = 1,
    SRV_CUPTI_KIND_MEMSET = 2,
    SRV_CUPTI_KIND_KERNEL = 3, /* serialises kernels: never enabled by the server */
    SRV_CUPTI_KIND_CONCURRENT_KERNEL = 10,
    SRV_CUPTI_KIND_SYNCHRONIZATION = 38,
};
#define SRV_CUPTI_FLUSH_FORCED 1u /* CUPTI_ACTIVITY_FLAG_FLUSH_FORCED */

/* CUpti_ActivityMemcpyKind values (copyKind). */
enum {
    SRV_CUPTI_MEMCPY_UNKNOWN = 0,
    SRV_CUPTI_MEMCPY_HTOD = 1,
    SRV_CUPTI_MEMCPY_DTOH = 2,
    SRV_CUPTI_MEMCPY_HTOA = 3,
    SRV_CUPTI_MEMCPY_ATOH = 4,
    SRV_CUPTI_MEMCPY_ATOA = 5,
    SRV_CUPTI_MEMCPY_ATOD = 6,
    SRV_CUPTI_MEMCPY_DTOA = 7,
    SRV_CUPTI_MEMCPY_DTOD = 8,
    SRV_CUPTI_MEMCPY_HTOH = 9,
    SRV_CUPTI_MEMCPY_PTOP = 10,
};

/* CUpti_ActivitySynchronizationType values. */
enum {
    SRV_CUPTI_SYNC_UNKNOWN = 0,
    SRV_CUPTI_SYNC_EVENT = 1,
    SRV_CUPTI_SYNC_STREAM_WAIT_EVENT = 2,
    SRV_CUPTI_SYNC_STREAM = 3,
    SRV_CUPTI_SYNC_CONTEXT = 4,
};

#define SRV_CUPTI_RECORD __attribute__((packed, aligned(8)))

/* Every record starts with its kind (CUpti_Activity). */
struct SRV_CUPTI_RECORD srv_cupti_activity {
    uint32_t kind;
};

/* CUpti_ActivityKernel* (CONCURRENT_KERNEL), up to its name. */
struct SRV_CUPTI_RECORD srv_cupti_kernel {
    uint32_t kind;
    uint8_t cache_config;
    uint8_t shared_memory_config;
    uint16_t registers_per_thread;
    uint32_t partitioned_cache_requested;
    uint32_t partitioned_cache_executed;
    uint64_t start;
    uint64_t end;
    uint64_t completed;
    uint32_t device_id;
    uint32_t context_id;
    uint32_t stream_id;
    int32_t grid[3];
    int32_t block[3];
    int32_t static_shared_memory;
    int32_t dynamic_shared_memory;
    uint32_t local_memory_per_thread;
    uint32_t local_memory_total;
    uint32_t correlation_id;
    int64_t grid_id;
    const char *name;
};

/* CUpti_ActivityMemcpy*, up to its correlation id. */
struct SRV_CUPTI_RECORD srv_cupti_memcpy {
    uint32_t kind;
    uint8_t copy_kind;
    uint8_t src_kind;
    uint8_t dst_kind;
    uint8_t flags;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t device_id;
    uint32_t context_id;
    uint32_t stream_id;
    uint32_t correlation_id;
};

/* CUpti_ActivityMemset*, up to its correlation id. */
struct SRV_CUPTI_RECORD srv_cupti_memset {
    uint32_t kind;
    uint32_t value;
    uint64_t bytes;
    uint64_t start;
    uint64_t end;
    uint32_t device_id;
    uint32_t context_id;
    uint32_t stream_id;
    uint32_t correlation_id;
};

/* CUpti_ActivitySynchronization*, up to its event id. */
struct SRV_CUPTI_RECORD srv_cupti_sync {
    uint32_t kind;
    uint32_t type;
    uint64_t start;
    uint64_t end;
    uint32_t correlation_id;
    uint32_t context_id;
    uint32_t stream_id;
    uint32_t cuda_event_id;
};

/* The buffer callbacks (CUpti_BuffersCallbackRequestFunc, ...CompleteFunc). */
typedef void (*srv_cupti_buffer_request)(uint8_t **buffer, size_t *size, size_t *max_records);
typedef void (*srv_cupti_buffer_complete)(CUcontext ctx, uint32_t stream_id, uint8_t *buffer,
                                          size_t size, size_t valid);

/* The functions the server resolves, by these names, in the library it loads. */
/* clang-format off */
#define SRV_CUPTI_FUNCTIONS(X)                                                                     \
    X(cuptiActivityRegisterCallbacks, srv_cupti_result,                                            \
      (srv_cupti_buffer_request request, srv_cupti_buffer_complete complete))                     \
    X(cuptiActivityEnable, srv_cupti_result, (uint32_t kind))                                      \
    X(cuptiActivityDisable, srv_cupti_result, (uint32_t kind))                                     \
    X(cuptiActivityFlushAll, srv_cupti_result, (uint32_t flag))                                    \
    X(cuptiActivityGetNextRecord, srv_cupti_result,                                                \
      (uint8_t *buffer, size_t valid, struct srv_cupti_activity **record))                         \
    X(cuptiGetTimestamp, srv_cupti_result, (uint64_t *timestamp))                                  \
    X(cuptiGetStreamIdEx, srv_cupti_result,                                                        \
      (CUcontext ctx, CUstream stream, uint8_t per_thread, uint32_t *stream_id))                   \
    X(cuptiGetContextId, srv_cupti_result, (CUcontext ctx, uint32_t *context_id))
/* clang-format on */

/* CUPTI as loaded (server/control/trace_cupti.c; the functions, once resolved, are called from any
 * thread). Loaded, registered and path are trace.c's, under its ctl_lock. */
struct srv_cupti_lib {
    void *handle;
    char path[512];
#define X(name, ret, args) ret(*name) args;
    SRV_CUPTI_FUNCTIONS(X)
#undef X
    srv_cupti_result (*result_string)(srv_cupti_result r, const char **s); /* optional */
    srv_cupti_result (*finalize)(void);                                    /* optional */
    int registered; /* the buffer callbacks are registered */
};
extern struct srv_cupti_lib srv_cupti;
/* Loads CUPTI once (trace.c's ctl_lock held); 0, or -1 with why (a line for the operator). */
int srv_cupti_load(char *why, size_t len);
/* CUPTI's words for r, or its number. */
const char *srv_cupti_error(srv_cupti_result r);

#endif
