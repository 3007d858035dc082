// cpudrv: a CPU implementation of the CUDA driver API, used as a test double for
// mpsshim-server on machines without a GPU. Internal header shared by tests/cpudrv/*.c
// (graph.h adds the structures of graphs and stream capture).
//
// Locking, in one place: one global mutex (cpudrv_big) protects every table (handles,
// allocations, contexts, modules, events, device accounting). Each stream has its own
// mutex for its queue and counters. Order: cpudrv_big before a stream mutex; never two
// stream mutexes at once. Stream workers run operations with no lock held.
#ifndef CPUDRV_H
#define CPUDRV_H

// Deprecated entry points (cuDeviceGetProperties...) are still exported by the driver.
#define CUDA_ENABLE_DEPRECATED 1
#include <cuda.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define CPUDRV_MAX_DEVICES 8
// Peer contexts one context may enable (CUDA_ERROR_TOO_MANY_PEERS past them).
#define CPUDRV_MAX_PEERS 16
#define CPUDRV_SM_COUNT 132
#define CPUDRV_SM_GRANULE 8
#define CPUDRV_SHMEM_DEFAULT 49152
#define CPUDRV_SHMEM_OPTIN 232448
#define CPUDRV_PRIO_LEAST 0
#define CPUDRV_PRIO_GREATEST (-5)
// Launch attribute ids that streams store (CU_LAUNCH_ATTRIBUTE_MAX is internal to cuda.h).
#define CPUDRV_STREAM_ATTRS 32

/* ---------------------------------------------------------------- init.c */

// Protects all tables (see the top of this file).
extern pthread_mutex_t cpudrv_big;
void cpudrv_lock(void);
void cpudrv_unlock(void);

// Fixed by cuInit, read-only afterwards.
extern int cpudrv_ndev;
// The first device this process sees (CUDA_VISIBLE_DEVICES naming one index; else 0): init.c.
extern int cpudrv_first;
extern size_t cpudrv_mem_bytes;
// MPSSHIM_CPUDRV_COPY_DELAY_US: every copy a stream runs first waits this long, a slow
// DMA engine, so that tests can catch a host buffer reused before its copy ran.
extern long cpudrv_copy_delay_us;
// MPSSHIM_CPUDRV_RELEASE_DELAY_MS: the last release of a primary context takes this long, as
// a GPU's does (0.7 s for a server's two H200s): a slow shutdown, which quit waits for
// (tests/control.sh).
extern long cpudrv_release_delay_ms;
// MPSSHIM_CPUDRV_CTX_DELAY_MS: each cuCtxCreate takes this long (a second context's making takes
// 0.6 s on an H200): a server's quiet context made late (tests/leave_beside.sh).
extern long cpudrv_ctx_delay_ms;

// Per-device accounting; protected by cpudrv_big.
struct cpudrv_device {
    size_t used;
    struct cpudrv_ctx *primary;
};
// A sticky fault in any context loses every device to this process, as with driver 580:
// every context of the process answers it from then on, on every device (an H200 pair:
// tests/progs/fault.c --device1), and cuDevicePrimaryCtxReset succeeds but the retain
// after it (and any new context anywhere) returns the fault (an H100). 0 while none, and
// never 0 again. MPSSHIM_CPUDRV_FAULTS_PER_CONTEXT=1 (cpudrv_faults_per_context) keeps
// faults to their context, which a reset or destroy clears: the self-test goes on after
// its faults.
extern int cpudrv_lost;
extern int cpudrv_faults_per_context;
// MPSSHIM_CPUDRV_FAULT_AFTER_STORE=N: the Nth cuEventRecord on the stream of the same
// thread's last cuStreamWriteValue32, with no event recorded between, faults that context
// (CUDA_ERROR_ILLEGAL_ADDRESS, sticky) and fails: the context dying between a server's reply
// store and the event behind it (server/core/waits.c gpu_reply), a window no kernel hits on
// purpose. 0: never. Counted under cpudrv_big (memop.c sets, event.c takes).
extern long cpudrv_fault_after_store;
// The stream of the calling thread's last cuStreamWriteValue32, until its next event record
// or stream memory operation (NULL then).
extern __thread struct cpudrv_stream *cpudrv_stored_on;
extern struct cpudrv_device cpudrv_devs[CPUDRV_MAX_DEVICES];

// CUDA_SUCCESS once cuInit succeeded, CUDA_ERROR_NOT_INITIALIZED before.
CUresult cpudrv_ready(void);
// A test setting MPSSHIM_CPUDRV_*: the value of environment variable name when it starts with
// a digit from 1 to max, else 0; read once into *cache (-1 before the first read).
int cpudrv_env_level(const char *name, int max, int *cache);
// CUDA_ERROR_INVALID_DEVICE unless dev is a valid ordinal (driver initialised).
CUresult cpudrv_dev_check(CUdevice dev);
// 1 when MPSSHIM_CPUDRV_NO_VMM=1 takes the virtual memory calls away (vmm.c).
int cpudrv_no_vmm(void);
// Prints "name -> result" on stderr when MPSSHIM_CPUDRV_TRACE=1; returns rc.
CUresult cpudrv_trace(const char *fn, CUresult rc);
#define TR(rc) cpudrv_trace(__func__, (rc))
// Prints one line on stderr when MPSSHIM_CPUDRV_TRACE=1 (what a call really did).
void cpudrv_note(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// Monotonic clock in nanoseconds.
uint64_t cpudrv_now_ns(void);
// Process-wide unique, never reused ids (contexts, streams, buffers).
unsigned long long cpudrv_next_id(void);
// Prints one line on stderr, always (load failures name the kernel they failed on).
void cpudrv_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

// Counters for tests of the server ("one real context"); protected by cpudrv_big.
struct cpudrv_stats {
    unsigned long ctx_created, ctx_live, ctx_live_max;
    unsigned long prim_activations, prim_active;
    unsigned long green_created, green_live;
};
extern struct cpudrv_stats cpudrv_stats;
// Rewrites $MPSSHIM_CPUDRV_STATS after a counter changed; cpudrv_big held.
void cpudrv_stats_changed(void);

/* ---------------------------------------------------------------- errors.c */

// Enum name of rc, or NULL for an unknown code.
const char *cpudrv_errname(CUresult rc);

/* ---------------------------------------------------------------- registry.c */

enum cpudrv_kind {
    CPUDRV_K_CTX = 1,
    CPUDRV_K_STREAM,
    CPUDRV_K_EVENT,
    CPUDRV_K_MODULE,
    CPUDRV_K_FUNC,
    CPUDRV_K_LIBRARY,
    CPUDRV_K_ARRAY,
    CPUDRV_K_GREEN,
    CPUDRV_K_DESC,
    CPUDRV_K_KERNEL,
    CPUDRV_K_POOL,
    CPUDRV_K_PHYSMEM,
    CPUDRV_K_GRAPH,
    CPUDRV_K_GNODE,
    CPUDRV_K_GEXEC,
    CPUDRV_K_MIPMAP,
    CPUDRV_K_TEX,
    CPUDRV_K_SURF,
};

// Header of every driver object. The handle given to callers is the object's address;
// handles are only dereferenced after cpudrv_obj_find() found them live.
struct cpudrv_obj {
    int kind;
    int refs;
    int live;
    struct cpudrv_ctx *ctx;
    struct cpudrv_obj *hnext;
    struct cpudrv_obj *prev, *next;
    void (*release)(struct cpudrv_obj *);
};

// All below: cpudrv_big held.
// Starts an object with one reference (the caller's), not yet visible as a handle.
void cpudrv_obj_init(struct cpudrv_obj *o, int kind, struct cpudrv_ctx *ctx,
                     void (*release)(struct cpudrv_obj *));
// Makes the object a live handle; the handle table takes over the caller's reference.
void cpudrv_obj_publish(struct cpudrv_obj *o);
// The live object of that kind whose handle is h, or NULL (never dereferences h).
void *cpudrv_obj_find(const void *h, int kind);
// Ends the handle's life: removes it from the table and drops the table's reference.
void cpudrv_obj_unpublish(struct cpudrv_obj *o);
void cpudrv_obj_ref(struct cpudrv_obj *o);
// Drops one reference; the last one calls o->release.
void cpudrv_obj_put(struct cpudrv_obj *o);
// Collects up to max live objects of a kind (0 = any) owned by ctx (NULL = any), each
// with a reference taken; returns how many exist (may exceed max).
size_t cpudrv_obj_collect(int kind, struct cpudrv_ctx *ctx, struct cpudrv_obj **out, size_t max);

/* ---------------------------------------------------------------- context.c */

struct cpudrv_green;

struct cpudrv_ctx {
    struct cpudrv_obj o;
    int dev;
    unsigned flags;
    int primary;
    unsigned prim_refs;
    int active; // primary: retained at least once since the last reset/release
    int dying;  // teardown in progress: new work is refused
    int sticky; // CUresult of a fault in a kernel; read by workers without the lock
    unsigned long long id;
    size_t limits[CU_LIMIT_MAX];
    CUfunc_cache cache;
    struct cpudrv_stream *legacy;
    struct cpudrv_stream *streams; // every stream of this context, via ctx_next
    struct cpudrv_green *green;    // set when this is a green context's context
    // Peer access (peer.c): this life's number (new at each activation, so that a reset
    // context is a new peer), and the lives of the peer contexts it enabled.
    unsigned long long life;
    unsigned long long peers[CPUDRV_MAX_PEERS];
    unsigned npeers;
};

// Checks init and the calling thread's current context (live, not faulted). On success
// returns CUDA_SUCCESS with cpudrv_big HELD and *out set; on failure the lock is not held.
CUresult cpudrv_enter(struct cpudrv_ctx **out);
// As cpudrv_enter, but a faulted (sticky) context is accepted.
CUresult cpudrv_enter_any(struct cpudrv_ctx **out);
// cpudrv_big held: the current context if live and active, else NULL.
struct cpudrv_ctx *cpudrv_ctx_current(void);
// cpudrv_big held: CUDA_SUCCESS, the context's sticky error, or INVALID_CONTEXT if dead.
CUresult cpudrv_ctx_usable(struct cpudrv_ctx *c);
// Records a fault raised by a kernel: sticky for the context, and for every context of the
// process (cpudrv_lost) unless MPSSHIM_CPUDRV_FAULTS_PER_CONTEXT=1, as on a GPU.
void cpudrv_ctx_fault(struct cpudrv_ctx *c, CUresult err);
// The context's sticky error: its own fault, or the one that lost the process its devices
// (cpudrv_lost); CUDA_SUCCESS while neither. Read without the lock (stream workers).
static inline CUresult cpudrv_ctx_sticky(const struct cpudrv_ctx *c)
{
    int own = __atomic_load_n(&c->sticky, __ATOMIC_ACQUIRE);
    return (CUresult)(own ? own : __atomic_load_n(&cpudrv_lost, __ATOMIC_ACQUIRE));
}
// The context that owns memory and modules created while c is current (a green
// context's resources belong to its device's primary context).
struct cpudrv_ctx *cpudrv_ctx_owner(struct cpudrv_ctx *c);
// cpudrv_big held: creates a context object (not current anywhere) on dev; kind is
// 0 for cuCtxCreate, 1 for a primary context (inactive), 2 for a green context's.
CUresult cpudrv_ctx_new(int dev, unsigned flags, int kind, struct cpudrv_ctx **out);
// cpudrv_big held on entry and exit (dropped inside): waits for the context's work,
// destroys its streams, events, modules, arrays and memory.
void cpudrv_ctx_teardown(struct cpudrv_ctx *c);
// cpudrv_big held: pops c from the calling thread's stack if it is there.
void cpudrv_ctx_forget_current(struct cpudrv_ctx *c);
// INVALID_VALUE unless flags are valid context creation flags.
CUresult cpudrv_ctx_check_flags(unsigned flags);
// cpudrv_big held: counts a context coming (1) or going (-1).
void cpudrv_ctx_stats_live(long delta);
// cpudrv_big held: resets a context's settings and gives it a legacy stream.
CUresult cpudrv_ctx_activate(struct cpudrv_ctx *c);
// cpudrv_big held: a live context handle (INVALID_CONTEXT otherwise).
CUresult cpudrv_ctx_find(CUcontext ctx, struct cpudrv_ctx **out);
// Retains/releases dev's primary context (also used by green contexts).
CUresult cpudrv_primary_retain(int dev, struct cpudrv_ctx **out);
void cpudrv_primary_release(int dev);

/* ---------------------------------------------------------------- stream.c */

struct cpudrv_stream;
struct cpudrv_capture;

// A set of graph nodes with the data of the edges to them: what a capturing stream's next
// node will depend on, or what a captured event record stands for.
struct cpudrv_nodeset {
    CUgraphNode *node;
    CUgraphEdgeData *edge;
    size_t n, cap;
};

struct cpudrv_dep {
    struct cpudrv_stream *s; // a reference is held
    uint64_t seq;
};

// What a traced operation is (cupti.c), set by whoever queues it: a kernel (its function's
// name), a copy (bytes, SRV_CUPTI_MEMCPY_* kind) or a set (bytes).
enum { CPUDRV_ACT_KERNEL = 1, CPUDRV_ACT_MEMCPY, CPUDRV_ACT_MEMSET };
struct cpudrv_act {
    int kind;
    int copy_kind;
    uint64_t bytes;
    const char *name;
};

struct cpudrv_op {
    struct cpudrv_op *next;
    struct cpudrv_stream *stream;
    uint64_t seq;
    // Executes on the stream's worker with no lock held; an error becomes the
    // context's sticky error (kernel faults).
    CUresult (*run)(struct cpudrv_op *op);
    // Releases the payload (cpudrv_big held); may be NULL.
    void (*fini)(struct cpudrv_op *op);
    // 1 if the operation may access [lo, hi) (host memory being unregistered); may be NULL.
    int (*touches)(const struct cpudrv_op *op, uintptr_t lo, uintptr_t hi);
    unsigned ndeps, capdeps;
    struct cpudrv_dep *deps;
    struct cpudrv_act act; // what an activity record says of it (cupti.c); zero: nothing
    _Alignas(16) unsigned char data[];
};

// Runs op on its stream's worker (op->run), timed for an activity record while CUPTI's
// stand-in records its kind (cupti.c).
CUresult cpudrv_op_run(struct cpudrv_op *op);
// The activity record's copy kind of a copy between sides (enum cpudrv_side).
int cpudrv_copy_kind(int src_side, int dst_side);

struct cpudrv_stream {
    struct cpudrv_obj o;
    unsigned flags;
    int prio;
    int legacy;    // the context's NULL stream
    int perthread; // a per-thread default stream
    unsigned long long id;
    CUstreamAttrValue attr[CPUDRV_STREAM_ATTRS]; // cpudrv_big; stored, not enforced
    struct cpudrv_stream *ctx_prev, *ctx_next;   // cpudrv_big
    struct cpudrv_stream *all_prev, *all_next;   // cpudrv_big
    pthread_mutex_t mu;                          // protects the fields below
    pthread_cond_t cv;                           // broadcast on every completion and on dying
    struct cpudrv_op *head, *tail;
    uint64_t submitted, completed;
    int worker; // a worker thread is running
    int dying;  // destroyed: the worker exits once the queue is empty
    // Stream capture (capture.c), protected by cpudrv_big: the capture this stream takes
    // part in (NULL: work runs), and the nodes its next captured work depends on.
    struct cpudrv_capture *cap;
    struct cpudrv_nodeset capdeps;
};

// Allocates an operation with a zeroed payload of n bytes.
struct cpudrv_op *cpudrv_op_new(size_t n);
// Adds a dependency (takes a reference on s); cpudrv_big held.
int cpudrv_op_dep(struct cpudrv_op *op, struct cpudrv_stream *s, uint64_t seq);
// Frees an operation that was never submitted.
void cpudrv_op_discard(struct cpudrv_op *op);
// cpudrv_big held: resolves a stream handle (NULL, CU_STREAM_LEGACY, CU_STREAM_PER_THREAD
// or a created stream) for a caller whose current context is cur (may be NULL).
CUresult cpudrv_stream_get(CUstream h, struct cpudrv_ctx *cur, struct cpudrv_stream **out);
// cpudrv_big held: adds the legacy-stream dependencies and queues op (owned by the
// stream from now on). Returns the op's sequence number.
uint64_t cpudrv_stream_submit(struct cpudrv_stream *s, struct cpudrv_op *op);
// No lock held, a reference on s held: waits until op seq of s has completed.
void cpudrv_stream_wait(struct cpudrv_stream *s, uint64_t seq);
// cpudrv_big held: 1 if op seq of s has completed.
int cpudrv_stream_reached(struct cpudrv_stream *s, uint64_t seq);
// cpudrv_big held: submits op, then waits (dropping and retaking cpudrv_big) until
// it ran; returns the context's sticky error if the work faulted.
CUresult cpudrv_stream_run_sync(struct cpudrv_stream *s, struct cpudrv_op *op);
// Which streams a snapshot covers.
enum cpudrv_snap {
    CPUDRV_SNAP_CTX = 1,  // every stream of a context
    CPUDRV_SNAP_ALL,      // every stream of the process
    CPUDRV_SNAP_BLOCKING, // a context's legacy stream and its blocking streams
};
// cpudrv_big held: appends to deps (refs taken) the point each covered stream with
// pending work has been submitted to.
int cpudrv_stream_snapshot(struct cpudrv_ctx *ctx, enum cpudrv_snap which, struct cpudrv_dep **deps,
                           unsigned *n, unsigned *cap);
// cpudrv_big held: appends to deps, per stream, the last queued operation that may
// access [lo, hi).
int cpudrv_stream_snapshot_touching(uintptr_t lo, uintptr_t hi, struct cpudrv_dep **deps,
                                    unsigned *n, unsigned *cap);
// No lock held: waits for a snapshot, then drops its references (takes cpudrv_big).
void cpudrv_deps_wait_release(struct cpudrv_dep *deps, unsigned n);
// cpudrv_big held: 1 if every dependency has been reached.
int cpudrv_deps_reached(const struct cpudrv_dep *deps, unsigned n);
// cpudrv_big held: drops the references of a dependency list and frees it.
void cpudrv_deps_release(struct cpudrv_dep *deps, unsigned n);
// cpudrv_big held: creates a stream in ctx.
CUresult cpudrv_stream_new(struct cpudrv_ctx *ctx, unsigned flags, int prio, int legacy,
                           struct cpudrv_stream **out);
// cpudrv_big held: ends a stream's handle; its queued work still runs.
void cpudrv_stream_destroy(struct cpudrv_stream *s);
// No lock held, reference on s held: waits until its queue is empty.
void cpudrv_stream_drain(struct cpudrv_stream *s);

/* ---------------------------------------------------------------- memory.c */

enum cpudrv_mem_type {
    CPUDRV_MEM_DEVICE = 1, // cuMemAlloc, cuMemAllocPitch, pools; arrays are not here
    CPUDRV_MEM_HOST,       // cuMemHostAlloc / cuMemAllocHost: pinned, device-mapped
    CPUDRV_MEM_REGISTERED, // cuMemHostRegister: pinned, caller's memory
    CPUDRV_MEM_GLOBAL,     // a module's __device__ variables
    CPUDRV_MEM_MAPPED,     // cuMemMap: physical memory mapped into a reservation
    CPUDRV_MEM_MANAGED,    // cuMemAllocManaged: host memory every device reaches (managed.c)
};

struct cpudrv_pool;
struct cpudrv_physmem;
struct cpudrv_gmem;
struct chan_advice;

struct cpudrv_range {
    uintptr_t base;
    size_t size;
    int type;
    unsigned flags;
    int dev;
    struct cpudrv_ctx *ctx; // NULL for pool allocations (they belong to no context)
    unsigned long long id;
    void *map; // what to munmap (DEVICE/HOST); NULL otherwise
    size_t maplen;
    struct cpudrv_pool *pool;    // a pool allocation (DEVICE): its pool, a reference held
    int freeing;                 // a stream-ordered free is queued; MAPPED: cuMemUnmap under way
    struct cpudrv_physmem *phys; // MAPPED: the memory mapped, a reference held
    // MAPPED: the CUmemAccess_flags each device was given (none until cuMemSetAccess).
    unsigned char access[CPUDRV_MAX_DEVICES];
    struct chan_advice *adv;  // MANAGED: its advice and prefetch record (managed.c)
    struct cpudrv_gmem *gmem; // DEVICE: graph memory of an allocation node (graphmem.c)
};

// cpudrv_big held: frees a managed range's advice (managed.c).
void cpudrv_managed_drop(struct cpudrv_range *r);
// cpudrv_big held: n bytes (page-rounded into *maplen) where this driver puts the managed
// memory of modules, or NULL (managed.c).
void *cpudrv_managed_map(size_t n, size_t *maplen);
// A range's flag: the managed memory of a module's __managed__ variables, which goes with
// its module (cuMemFree refuses it, a context's teardown leaves it to the module).
#define CPUDRV_RANGE_MODULE 0x10000u

// All below: cpudrv_big held.
// The range containing p, or NULL.
const struct cpudrv_range *cpudrv_mem_find(uintptr_t p);
// SUCCESS if [p, p+n) lies inside one range a kernel or copy engine may address
// (device memory, globals, pinned host memory) or inside adjacent mappings of virtual
// memory that some device has access to; else CUDA_ERROR_INVALID_VALUE.
CUresult cpudrv_mem_check(uintptr_t p, size_t n);
// 1 if [p, p+n) lies in pinned (allocated or registered) host memory.
int cpudrv_mem_pinned(const void *p, size_t n);
// 1 if p lies in any device-side range (device memory, globals, mappings).
int cpudrv_mem_is_device(uintptr_t p);
// Adds a range (module globals, mappings); SUCCESS, OUT_OF_MEMORY, or INVALID_VALUE if
// it overlaps one.
CUresult cpudrv_mem_add(const struct cpudrv_range *r);
// Removes the range starting exactly at base, if any.
void cpudrv_mem_remove(uintptr_t base);
// The first range overlapping [p, p+n) (n > 0), or NULL.
const struct cpudrv_range *cpudrv_mem_overlap(uintptr_t p, size_t n);
// The range of any type starting exactly at base, or NULL; valid until the table next
// changes.
struct cpudrv_range *cpudrv_mem_at(uintptr_t base);
// Frees every range owned by ctx (context teardown).
void cpudrv_mem_free_ctx(struct cpudrv_ctx *ctx);
// The device memory range (cuMemAlloc or a pool) starting exactly at p, or NULL; valid
// until the table next changes.
struct cpudrv_range *cpudrv_mem_device_at(uintptr_t p);
size_t cpudrv_mem_pool_outstanding(const struct cpudrv_pool *p);
// cpudrv_big held (let go while waiting): waits for all work queued in context c so far
// (captures aside, which cuCtxSynchronize refuses to run in; ctxprops.c).
CUresult cpudrv_ctx_wait_all(struct cpudrv_ctx *c);
// cpudrv_big held: under MPSSHIM_CPUDRV_CREATE_WAITS=1, waits (releasing it meanwhile) until
// no cpudrv_ctx_wait_all goes on, as a real driver's stream creation does.
void cpudrv_stream_create_gate(void);
// cpudrv_big held: under MPSSHIM_CPUDRV_LOAD_WAITS=1, a module load's wait for every stream
// of c (releasing the lock meanwhile), during which cpudrv_submit_gate holds launches and
// stream memory operations back, as a real driver does; under MPSSHIM_CPUDRV_FREE_WAITS=2,
// launches (`launch` 1) are held back during a free's or unregistration's wait too.
CUresult cpudrv_ctx_wait_for_load(struct cpudrv_ctx *c);
void cpudrv_submit_gate(int launch);
// MPSSHIM_CPUDRV_FREE_WAITS's level (memory.c): 0, 1 (frees wait for the context's work) or
// 2 (and hold launches meanwhile).
int cpudrv_free_waits(void);
// Frees the range starting at base if it is still allocation id (a stream-ordered free
// that the stream reached).
void cpudrv_mem_free_id(uintptr_t base, unsigned long long id);
// Maps anonymous, not-yet-committed memory for device storage; NULL on failure.
void *cpudrv_mem_map(size_t n, size_t *maplen);
// farmap.c: a mapping of len bytes aligned to align (at least a page) in this driver's own
// region, far from processes' own mappings (mmap's prot, flags and fd); NULL when the region
// has no room or the kernel refuses: the caller then maps where the kernel likes.
void *cpudrv_far_map(size_t len, size_t align, int prot, int flags, int fd);
// Unmaps storage once every stream on the machine passed its current point.
void cpudrv_mem_unmap_later(void *map, size_t maplen);
// Returns device bytes to the accounting / reserves them (OUT_OF_MEMORY if over).
CUresult cpudrv_mem_reserve(int dev, size_t n);
void cpudrv_mem_unreserve(int dev, size_t n);

/* ---------------------------------------------------------------- mempool.c */

// cpudrv_big held: takes back the block of a pool allocation whose range was just
// removed, and drops the allocation's reference on the pool.
void cpudrv_pool_give_back(struct cpudrv_pool *p, uintptr_t base);

/* ---------------------------------------------------------------- vmm.c */

// A physical allocation (cuMemCreate or an import; its handle is the object's address):
// a memfd, so that every mapping of it shares the same pages.
struct cpudrv_physmem {
    struct cpudrv_obj o;
    int dev;
    size_t size;
    unsigned handles; // creations, imports and retains not yet paired with cuMemRelease
    int counted;      // counts against the device's memory (imports do not)
    int fd;           // for export (POSIX file descriptor handles requested), else -1
    void *pages;      // a shared mapping of all of it: every cuMemMap duplicates it
    CUmemAllocationProp prop;
    int unseen; // imported from a device this process does not see (CUDA_VISIBLE_DEVICES)
};

// cpudrv_big held: 1 and the reservation (cuMemAddressReserve) containing p, else 0.
int cpudrv_vmm_reservation(uintptr_t p, uintptr_t *base, size_t *size);

/* ---------------------------------------------------------------- copy.c */

// A strided copy in host addresses (every CUDA address is a host address here).
struct cpudrv_xfer {
    unsigned char *dst;
    const unsigned char *src;
    size_t width, height, depth; // bytes, rows, slices
    size_t dpitch, dslice, spitch, sslice;
};

// How a side of a copy was classified.
enum cpudrv_side { CPUDRV_SIDE_DEVICE = 1, CPUDRV_SIDE_PINNED, CPUDRV_SIDE_PAGEABLE };
// cpudrv_big held: classifies a unified address, device range (checked) or host memory
// (copy.c; copybatch.c).
CUresult cpudrv_unified_side(uintptr_t p, size_t n, int *side);

// cpudrv_big held: copies x on stream s. async == 0: the call completes the copy
// before returning (legacy-stream ordering); async == 1: stream-ordered with the real
// driver's pageable-memory rules, given the host sides' classification. hold0 / hold1 are
// the destination's / source's array, kept alive until the copy ran, or NULL. On a
// capturing stream the copy becomes a node. Drops and retakes cpudrv_big.
CUresult cpudrv_copy_submit(struct cpudrv_stream *s, const struct cpudrv_xfer *x, int async,
                            int src_side, int dst_side, struct cpudrv_obj *hold0,
                            struct cpudrv_obj *hold1);
// cpudrv_big held: classifies a host pointer used by a copy.
int cpudrv_host_side(const void *p, size_t n);
// Performs x now (worker side).
void cpudrv_xfer_run(const struct cpudrv_xfer *x);
// Bytes spanned by one side of a transfer.
size_t cpudrv_xfer_span(size_t width, size_t height, size_t depth, size_t pitch, size_t slice);

/* ---------------------------------------------------------------- array.c */

struct cpudrv_array {
    struct cpudrv_obj o;
    CUDA_ARRAY3D_DESCRIPTOR desc;
    size_t elsize;
    size_t wbytes, h, d; // row bytes, rows, slices (h, d at least 1)
    unsigned char *mem;
    void *map;
    size_t maplen;
    int level; // a mipmapped array's level (texture.c): not destroyed on its own
};

// cpudrv_big held: validates d as cuArray3DCreate does and makes a live array owned by c's
// owner context.
CUresult cpudrv_array_new(const CUDA_ARRAY3D_DESCRIPTOR *d, struct cpudrv_ctx *c,
                          struct cpudrv_array **out);
// Bytes of one channel of an element of format f; 0 for formats this driver does not model.
size_t cpudrv_format_size(CUarray_format f);

/* ---------------------------------------------------------------- tensormap.c */

// A tiled tensor map as this driver encoded it, for a kernel twin that loads through it.
struct cpudrv_tmap {
    uint64_t addr;
    unsigned dt, rank, esize; // esize: bytes of an element (0 for the packed types)
    uint64_t dims[5], strides[4];
    unsigned box[5];
};
// Reads map m: 0, or -1 when it is no tiled map of this driver's.
int cpudrv_tmap_read(const void *m, struct cpudrv_tmap *out);

/* ---------------------------------------------------------------- texture.c */

// Kernel access to texture and surface objects (twins.c), each taking cpudrv_big itself.
// Point sampling of texel (x, y) with unnormalized coordinates, clamped to the edges, of
// a 1-channel float texture; CUDA_ERROR_ILLEGAL_ADDRESS for a handle that is not a live
// texture, memory no longer there, or a texture the twins do not model (another format,
// layered, 3D).
CUresult cpudrv_tex_read_f32(uint64_t tex, int64_t x, int64_t y, float *out);
// tex1Dfetch of element i of a linear 1-channel float texture (0 outside it).
CUresult cpudrv_tex_fetch_f32(uint64_t tex, int64_t i, float *out);
// surf2Dwrite of a float at byte column xbytes, row y (out of range: illegal address, the
// default trap mode).
CUresult cpudrv_surf_write_f32(uint64_t surf, int64_t xbytes, int64_t y, float v);

/* ---------------------------------------------------------------- module.c */

struct cpudrv_param {
    uint32_t off, size;
};

struct cpudrv_twin;
struct cpudrv_module;
struct cpudrv_library;

struct cpudrv_func {
    struct cpudrv_obj o;
    struct cpudrv_module *mod;
    char *name;
    const struct cpudrv_twin *twin;
    unsigned nparams;
    struct cpudrv_param *params;
    uint32_t argbytes;
    int max_dyn_shmem;
    int carveout;
    int cluster[3];
    int nonportable_cluster;
    int cluster_policy;
    CUfunc_cache cache;
};

struct cpudrv_global {
    char *name;
    size_t off, size;
    int managed; // a __managed__ variable: off is in the module's managed segment
};

// A library kernel (CUkernel): a handle of its own that names a function.
struct cpudrv_kernel {
    struct cpudrv_obj o;
    struct cpudrv_func *f;
    // Contexts its code was loaded in (MPSSHIM_CPUDRV_LOAD_WAITS or FREE_WAITS=2; past 8,
    // every one).
    struct cpudrv_ctx *loaded[8];
    unsigned nloaded;
};

struct cpudrv_module {
    struct cpudrv_obj o;
    struct cpudrv_library *lib;
    unsigned nfuncs;
    struct cpudrv_func **funcs;
    struct cpudrv_kernel **kernels; // library modules: one per function
    unsigned nglobals;
    struct cpudrv_global *globals;
    unsigned char *gmem;
    size_t gsize, gmaplen;
    // __managed__ variables: managed memory of their own (a CPUDRV_MEM_MANAGED range
    // marked CPUDRV_RANGE_MODULE), placed where managed memory goes (cpudrv_managed_map).
    unsigned char *mmem;
    size_t msize, mmaplen;
    int ptx; // loaded from PTX (else from a cubin)
};

struct cpudrv_library {
    struct cpudrv_obj o;
    struct cpudrv_module *mod;
    // Contexts its module was loaded in (MPSSHIM_CPUDRV_LOAD_WAITS or FREE_WAITS=2; past 8,
    // every one).
    struct cpudrv_ctx *loaded[8];
    unsigned nloaded;
};

// What an image declares, before it becomes a module.
struct cpudrv_img_kernel {
    char *name;
    unsigned nparams;
    struct cpudrv_param *params;
    int have_params; // layout known (PTX, or cubin .nv.info)
};
struct cpudrv_img_global {
    char *name;
    size_t size, align;
    const unsigned char *init; // initial bytes inside the image (cubin), or NULL
    int managed;               // a __managed__ variable
};
struct cpudrv_image {
    unsigned nk, ng;
    struct cpudrv_img_kernel *k;
    struct cpudrv_img_global *g;
    int ptx;
};

// ptx.c: parses NUL-terminated PTX text.
CUresult cpudrv_ptx_parse(const char *text, struct cpudrv_image *img, char *log, size_t logsz);
// elf.c: parses a cubin of len bytes (0: take the size from its headers).
CUresult cpudrv_elf_parse(const unsigned char *p, size_t len, struct cpudrv_image *img, char *log,
                          size_t logsz);
// fatbin.c: parses any image the driver accepts (PTX, cubin, fatbin, fatbin wrapper).
CUresult cpudrv_image_parse(const void *image, size_t len, struct cpudrv_image *img, char *log,
                            size_t logsz);
void cpudrv_image_free(struct cpudrv_image *img);
// 1 if [p, p+n) is mapped memory (images given without a length are checked with this).
int cpudrv_readable(const void *p, size_t n);
// Appends a formatted line to a log buffer (JIT logs).
void cpudrv_logf(char *log, size_t logsz, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

// cpudrv_big held: makes a module (with twins and globals) from a parsed image.
CUresult cpudrv_module_create(const struct cpudrv_image *img, struct cpudrv_ctx *ctx,
                              struct cpudrv_library *lib, struct cpudrv_module **out, char *log,
                              size_t logsz);
// cpudrv_big held: unloads (handles die now, storage when the last launch finished).
void cpudrv_module_destroy(struct cpudrv_module *m);
// A module global's storage, or NULL (size in *size).
unsigned char *cpudrv_module_global(const struct cpudrv_module *m, const char *name, size_t *size);
// cpudrv_big held: the function called name, or NULL.
struct cpudrv_func *cpudrv_module_func(const struct cpudrv_module *m, const char *name);
// cpudrv_big held: address and size of a module global (NOT_FOUND if none); either
// output may be NULL.
CUresult cpudrv_module_global_info(const struct cpudrv_module *m, const char *name,
                                   CUdeviceptr *dptr, size_t *bytes);
// INVALID_VALUE for a malformed JIT option list.
CUresult cpudrv_jit_check(unsigned n, const CUjit_option *opt, void **val);
// cpudrv_big held: a function handle, or a library kernel handle (CUkernel), or NULL.
struct cpudrv_func *cpudrv_func_find(const void *h);
// cpudrv_big held: the live library kernel whose handle is h, or NULL.
struct cpudrv_kernel *cpudrv_kernel_find(const void *h);
// Under MPSSHIM_CPUDRV_LOAD_WAITS=1: if h is a library kernel whose code, or a library whose
// module, was not yet loaded in the current context, loading it waits as a module load does
// (cpudrv_ctx_wait_for_load), once per context, as on an H200 the real driver's first
// cuKernelGetFunction, launch, graph kernel node, cuKernelSetAttribute or occupancy query of
// a CUkernel, and cuLibraryGetGlobal of a library, did. cpudrv_big NOT held. Else, or for
// any other handle: CUDA_SUCCESS at once (the call's own checks report a bad handle).
CUresult cpudrv_code_load_wait(const void *h);
// cuLibraryUnload's wait where its code was loaded (MPSSHIM_CPUDRV_FREE_WAITS=2; ctxprops.c).
CUresult cpudrv_library_unload_wait(struct cpudrv_library *l);
// The same for the function a kernel node's parameters name (p may be NULL).
CUresult cpudrv_node_load_wait(const CUDA_KERNEL_NODE_PARAMS *p);
// Reads a whole file; CUDA_ERROR_FILE_NOT_FOUND if it cannot.
CUresult cpudrv_read_file(const char *path, unsigned char **data, size_t *len);
// Applies JIT options (log buffers, wall time) after a load with result rc.
CUresult cpudrv_jit_options(unsigned n, const CUjit_option *opt, void **val, CUresult rc,
                            const char *log);

// func.c: resident blocks per SM for a block size and dynamic shared memory.
int cpudrv_occupancy(int block, size_t shmem);

/* ---------------------------------------------------------------- twins.c */

struct cpudrv_launch {
    const struct cpudrv_func *f;
    struct cpudrv_module *mod;
    unsigned grid[3], block[3];
    unsigned shmem;
    const unsigned char *args;
    const int *dying; // the stream's context is being torn down: stop waiting
};

struct cpudrv_twin {
    const char *name;
    unsigned nparams;
    uint32_t size[8], align[8];
    CUresult (*run)(const struct cpudrv_launch *L);
};

// cudaGraphSetConditional of a kernel: sets handle h in the graph launch the calling
// worker runs (graphexec.c); outside a graph launch it does nothing.
void cpudrv_cond_set(CUgraphConditionalHandle h, unsigned value);
// The CPU twin of a kernel, or NULL.
const struct cpudrv_twin *cpudrv_twin_find(const char *name);

/* ---------------------------------------------------------------- green.c */

struct cpudrv_green {
    struct cpudrv_obj o;
    struct cpudrv_ctx *ctx;
    int dev;
    unsigned sms;
    unsigned long long id;
};

/* ---------------------------------------------------------------- copy3d.c */

// cpudrv_big held: resolves a CUDA_MEMCPY3D (host, device, unified or array sides) into a
// transfer, classifying each side; *sa / *da are the arrays addressed (no reference
// taken), or NULL. Zero extents resolve to an empty transfer.
CUresult cpudrv_copy3d_resolve(const CUDA_MEMCPY3D *p, struct cpudrv_xfer *x, int *scls, int *dcls,
                               struct cpudrv_array **sa, struct cpudrv_array **da);

/* ---------------------------------------------------------------- memop.c */

// cpudrv_big held: SUCCESS if ops[0..n) are valid batch memory operations on memory the
// device may access (batch mem-op graph nodes), else INVALID_VALUE.
CUresult cpudrv_memops_check(const CUstreamBatchMemOpParams *ops, unsigned n);
// Performs one checked operation now (worker side); a wait gives up once *dying is set.
void cpudrv_memop_run(const CUstreamBatchMemOpParams *o, const int *dying);

/* ---------------------------------------------------------------- memset.c */

// A memset of width elements of elsize bytes on each of height rows, pitch bytes apart.
struct cpudrv_fill {
    unsigned char *dst;
    size_t pitch, width, height;
    unsigned elsize;
    uint32_t value;
};

// Performs f now (worker side).
void cpudrv_fill_run(const struct cpudrv_fill *f);
// Bytes a fill spans from its first byte.
size_t cpudrv_fill_span(const struct cpudrv_fill *f);
// cpudrv_big held: SUCCESS if f is aligned and lies in device-accessible memory (a fill of
// no elements always is), else INVALID_VALUE.
CUresult cpudrv_fill_check(const struct cpudrv_fill *f);

/* ---------------------------------------------------------------- launch.c */

// Validates a launch's dimensions against f (coop: all blocks resident at once).
CUresult cpudrv_launch_check(const struct cpudrv_func *f, const unsigned g[3], const unsigned b[3],
                             unsigned shmem, int coop);
// Copies f's arguments into args (f->argbytes) from kernelParams or an `extra` buffer.
CUresult cpudrv_launch_pack(const struct cpudrv_func *f, void **params, void **extra,
                            unsigned char *args);

/* ---------------------------------------------------------------- event.c */

struct cpudrv_event {
    struct cpudrv_obj o;
    unsigned flags;
    // All protected by cpudrv_big.
    unsigned long long gen;  // number of records so far
    struct cpudrv_stream *s; // stream of the latest record (reference held), or NULL
    uint64_t seq;            // its sequence number on s
    uint64_t t_ns;           // when the record with generation t_gen executed
    unsigned long long t_gen;
    // The latest record was captured: the capture (reference held) and what it recorded.
    struct cpudrv_capture *cap;
    struct cpudrv_nodeset capnodes;
    // Interprocess (ipcevent.c): the shared page of an exported or opened event, or NULL;
    // the exporter's descriptor of it (-1 otherwise); 1 for an event opened from a handle.
    struct cpudrv_ipcev *ipc;
    int ipc_fd;
    int imported;
};

// Sleeps before the next look of a poll (memop.c): 20 us the first time (*ns 0), doubling up
// to 1 ms.
void cpudrv_poll_pause(long *ns);

// cpudrv_big held: a new event of ctx with flags, not yet published.
struct cpudrv_event *cpudrv_event_new(struct cpudrv_ctx *ctx, unsigned flags);
// Interprocess events (ipcevent.c), cpudrv_big held for the first three: the page of an
// exported event follows its records and their execution; its release unmaps it.
void cpudrv_ipcev_recorded(struct cpudrv_event *e);
void cpudrv_ipcev_executed(struct cpudrv_event *e, unsigned long long gen);
void cpudrv_ipcev_release(struct cpudrv_event *e);
// Of an opened event: the generation recorded now; whether it has executed; a wait until it
// has (or *dying, when given, is set).
uint64_t cpudrv_ipcev_target(const struct cpudrv_event *e);
int cpudrv_ipcev_reached(const struct cpudrv_event *e, uint64_t target);
void cpudrv_ipcev_wait(const struct cpudrv_event *e, uint64_t target, const int *dying);

// cpudrv_big held: the live event whose handle is h, or NULL.
struct cpudrv_event *cpudrv_event_find(CUevent h);
// cpudrv_big held: queues a record of e on s (not capturing), as cuEventRecord does.
CUresult cpudrv_event_record_on(struct cpudrv_event *e, struct cpudrv_stream *s);
// cpudrv_big held: makes op wait for e's latest record (none: no dependency).
int cpudrv_event_dep(const struct cpudrv_event *e, struct cpudrv_op *op);

/* ---------------------------------------------------------------- capture.c */

// All below: cpudrv_big held.
// Before work is queued on s: IMPLICIT if s is a legacy stream while a blocking stream of
// its context captures (that capture is invalidated), INVALIDATED if s takes part in an
// invalidated capture; otherwise SUCCESS, with *capturing set if the work must become a
// node of s's capture instead of running.
CUresult cpudrv_capture_check(struct cpudrv_stream *s, int *capturing);
// As cpudrv_capture_check for work that cannot be captured: on a capturing stream the
// capture is invalidated and `why` returned.
CUresult cpudrv_capture_uncapturable(struct cpudrv_stream *s, CUresult why);
// Before a wait for or a query of s: as cpudrv_capture_check, and a capturing stream is
// refused (UNSUPPORTED, its capture invalidated).
CUresult cpudrv_capture_sync(struct cpudrv_stream *s);
// Before a call that waits for all of c (cuCtxSynchronize): UNSUPPORTED, and the captures
// invalidated, if a stream of c captures.
CUresult cpudrv_capture_ctx_sync(struct cpudrv_ctx *c);
// Before a "potentially unsafe" call (cuMemAlloc, cuMemFree, cuEventQuery...): UNSUPPORTED,
// and the conflicting captures invalidated, when the calling thread's capture mode forbids
// it (see cuThreadExchangeStreamCaptureMode).
CUresult cpudrv_capture_unsafe(void);
// Captured work on a stream for which cpudrv_capture_check set *capturing: adds a node.
CUresult cpudrv_capture_kernel(struct cpudrv_stream *s, const struct cpudrv_launch *L,
                               const void *handle);
CUresult cpudrv_capture_copy(struct cpudrv_stream *s, const struct cpudrv_xfer *x, int src_side,
                             int dst_side, struct cpudrv_obj *dst_array,
                             struct cpudrv_obj *src_array);
CUresult cpudrv_capture_fill(struct cpudrv_stream *s, const struct cpudrv_fill *f);
CUresult cpudrv_capture_host(struct cpudrv_stream *s, CUhostFn fn, void *data);
// A stream-ordered allocation of bytes (> 0) with a pool's properties: a memory allocation
// node, whose fixed address goes to *dptr. A stream-ordered free: a memory free node of
// dptr, which must be a graph allocation's address not freed in this graph yet.
CUresult cpudrv_capture_alloc(struct cpudrv_stream *s, size_t bytes, const CUmemPoolProps *props,
                              CUdeviceptr *dptr);
CUresult cpudrv_capture_free(struct cpudrv_stream *s, CUdeviceptr dptr);
// A record of e on capturing s: e now stands for s's current point in the capture
// (CU_EVENT_RECORD_EXTERNAL: an event record node is added too).
CUresult cpudrv_capture_record(struct cpudrv_stream *s, struct cpudrv_event *e, unsigned flags);
// cuStreamWaitEvent's capture rules (join, fork, merge, isolation, external waits). Sets
// *handled unless the wait is an ordinary one that the caller queues itself.
CUresult cpudrv_capture_wait(struct cpudrv_stream *s, struct cpudrv_event *e, unsigned flags,
                             int *handled);
// 1 if e's latest record belongs to a capture still in progress.
int cpudrv_capture_event_live(const struct cpudrv_event *e);
// Forgets e's captured record (a new record, or e's release).
void cpudrv_capture_event_clear(struct cpudrv_event *e);
// s is being destroyed: its capture is invalidated (ended, if s began it).
void cpudrv_capture_stream_gone(struct cpudrv_stream *s);

#endif
