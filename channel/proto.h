/* The wire protocol between libmpsshim.so (client) and mpsshim-server.
 *
 * One client process = one UNIX-socket connection + one shared-memory segment.
 *
 *  - The socket carries the handshake (chan_hello / chan_welcome), file descriptors
 *    (SCM_RIGHTS: the segment itself, pinned host allocations), and its hang-up is how the
 *    server learns that a client died, whatever the way it died.
 *  - The segment (created, sized and sealed by the server, so that a client can neither
 *    shrink it under the server nor map something else) holds:
 *      a request ring   client threads -> server worker, in order, variable-size records;
 *      reply lanes      one per waiting client thread, server -> that thread;
 *      staging slots    pipelined bulk data for pageable copies (registered as pinned
 *                       memory in the server, so the GPU copies straight out of / into them);
 *      devinfo          device properties, written once by the server.
 *
 * Every field the client can write is read by the server exactly once into a local and
 * checked there; records are copied out of the ring before they are parsed.
 * All integers are little-endian host order: both ends run on the same machine. */
#ifndef MPSSHIM_PROTO_H
#define MPSSHIM_PROTO_H

#include <stdatomic.h>
#include <stdint.h>
#include <cuda.h>

#define CHAN_MAGIC 0x5353504du /* "MPSS" */
#define CHAN_PROTO_MAJOR                                                                           \
    7 /* incompatible changes (5: visible_devices in the hello; 6: gpu_of and                      \
       gpu_ordinal in it; 7: the peer answers in chan_devinfo) */
/* Compatible additions (1: CHAN_OP_PROCADDR, 2: CHAN_OP_COND_NODE, 3: CHAN_OP_MVAR,
 * chan_shm.alert, which a client reads only from a server of minor 3 or more: an older one
 * never moves it, and chan_shm.spin_hint_us, whose 0 means no hint; 4: chan_shm.coalesce_us,
 * in what was padding, whose 0, all an older server ever leaves there, means "ring for every
 * record"; 5: replies from the GPU, chan_lane.gpu_seq in what was padding, which an older
 * server leaves 0: never the number a thread waits for but after 2^32 replies; 6:
 * CHAN_HOST_MIGRATE and CHAN_MVAR_MPUSH/MPULL, which an older server refuses as invalid: the
 * client then makes managed memory as before; 7: CHAN_MPULL_ON_STREAM, which an older
 * server refuses: the client then prefetches to the host with a pull it waits for; 8:
 * CHAN_IPC_OPEN_MIRROR, which an older server refuses as invalid: the client's peer access
 * between its GPUs' servers then fails). */
#define CHAN_PROTO_MINOR 8

#define CHAN_SOCKET_NAME "mpsshim.sock"
#define CHAN_CONTROL_NAME "control.sock"
#define CHAN_DEFAULT_PIPE_DIR "/tmp/mpsshim"

/* ---------------------------------------------------------------- handshake (socket) */

/* The first part of hello has kept its layout since protocol 1, so that a server can read
 * it from any client and refuse a mismatched one with both versions named; `size` (0 in
 * protocol 1) says how many bytes the whole hello has. */
struct chan_hello_head {
    uint32_t magic;
    uint16_t major, minor;
    uint64_t symbols_hash; /* SHIM_SYMBOLS_HASH: call ids must agree */
    int32_t pid;
    uint32_t size; /* sizeof(struct chan_hello) */
    char exe[64];  /* for logs and the control CLI */
};

/* The client's own limits, as its environment set them (MPSSHIM_* else CUDA_MPS_*), sent
 * as text: the server parses them (it knows the devices' UUIDs), applies the lowest of
 * these and the operator's settings, and refuses a malformed one with a message naming
 * the variable. Empty: not set. */
struct chan_hello {
    struct chan_hello_head head;
    char active_thread_percentage[32]; /* ACTIVE_THREAD_PERCENTAGE, e.g. "25" */
    char pinned_mem_limit[512];        /* PINNED_DEVICE_MEM_LIMIT, e.g. "0=1G,1=512M" */
    char client_priority[32];          /* CLIENT_PRIORITY, "0" or "1" */
    /* The client's CUDA_VISIBLE_DEVICES, which selects and orders among the server's
     * devices (server/core/devices.c parses it); visible_set 0: unset (every device), as an
     * empty value is not (no device). A value too long is sent as one that selects none. */
    uint32_t visible_set;
    char visible_devices[1024];
    /* A client that moved to its GPU's own server at its first context
     * (MPSSHIM_SERVER_PER_GPU, interpose/conn.c): it sees gpu_of devices, as the pipe
     * directory's server described them (it keeps that description), and its ordinal
     * gpu_ordinal is this server's device 0; its other ordinals name no device here.
     * visible_set is then 0. gpu_of 0: not such a client. */
    int32_t gpu_of, gpu_ordinal;
};

/* A hello of this protocol, from process pid of the symbol set symbols_hash
 * (SHIM_SYMBOLS_HASH), its limits and devices empty and its exe to be filled in. */
static inline struct chan_hello chan_hello_make(uint64_t symbols_hash, int32_t pid)
{
    struct chan_hello h = {.head = {.magic = CHAN_MAGIC,
                                    .major = CHAN_PROTO_MAJOR,
                                    .minor = CHAN_PROTO_MINOR,
                                    .symbols_hash = symbols_hash,
                                    .pid = pid,
                                    .size = sizeof(struct chan_hello)}};
    return h;
}

enum chan_welcome_status {
    CHAN_WELCOME_OK = 0,
    CHAN_WELCOME_VERSION = 1, /* protocol or symbol set differs: message names both */
    CHAN_WELCOME_UID = 2,     /* client runs as another user */
    CHAN_WELCOME_FULL = 3,    /* server refuses more clients */
    CHAN_WELCOME_ERROR = 4,   /* server could not set the client up */
    CHAN_WELCOME_LIMITS = 5,  /* the client's limits are malformed: message says which */
};

/* Sent by the server; when status is OK the segment's fd travels with it (SCM_RIGHTS). */
struct chan_welcome {
    uint32_t magic;
    uint16_t major, minor;
    int32_t status;
    int32_t server_pid;
    uint64_t shm_size;
    uint32_t client_id;
    uint32_t flags;    /* CHAN_WELCOME_*: what this server asks of its clients (0 before) */
    char message[256]; /* why a client was refused, printed by the client */
};

/* The server is a pipe directory's own server of several GPUs whose clients move to their
 * GPUs' own servers at their first context (MPSSHIM_SERVER_PER_GPU's "auto": it made no
 * context yet, server/core/devctx.c); the client decides with its own settings
 * (interpose/conn.c). Why the server's word: it alone knows how many GPUs it holds and whether
 * it made their contexts already (a client moving away from a server that holds its GPU's
 * context would put a second context on that GPU). A server older than the flag sends 0:
 * no client moves unless its own settings say 1. */
#define CHAN_WELCOME_MOVES 1u

/* ---------------------------------------------------------------- shared segment */

#define CHAN_RING_SIZE (2u << 20) /* request ring bytes */
#define CHAN_NLANES 64            /* client threads that can wait for replies at once */
#define CHAN_LANE_SIZE (64u << 10)
#define CHAN_LANE_DATA (CHAN_LANE_SIZE - 64u)
#define CHAN_NSLOTS 4 /* staging slots: 4 keeps client memcpy and DMA overlapped */
#define CHAN_SLOT_SIZE (4u << 20)
#define CHAN_REC_MAX (CHAN_LANE_DATA) /* largest request record, header included */
#define CHAN_INLINE_MAX (32u << 10)   /* copies up to this travel inside records/replies */
#define CHAN_MAX_DEVICES 16
#define CHAN_CB_SLOTS 65536 /* host functions outstanding at once, per client */
#define CHAN_HN_SLOTS 4096  /* graph host nodes a client's graphs and execs hold at once */

/* A staging slot's two counters are chunk sequence numbers (see channel/copyplan.h). The
 * producer of chunk n waits until `freed` says the slot's previous chunk (n - NSLOTS) has
 * been consumed, fills the slot, then publishes `filled = n + 1`; the consumer waits for
 * `filled == n + 1`, consumes, then publishes `freed = n + 1`. Counting (not flags) makes a
 * late or repeated wake-up harmless. `status` carries a copy error for chunk `filled - 1`. */
struct chan_slot {
    _Alignas(64) _Atomic uint32_t filled;
    _Atomic uint32_t freed;
    _Atomic int32_t status;
    _Atomic uint32_t waiters; /* threads (either side) sleeping on this slot's counters */
};

/* A reply lane. One client thread owns it while it waits; the server writes `result`,
 * `len` and `data`, then advances `seq` by one (release) and wakes the thread if `waiting`.
 *
 * A reply from the GPU (minor 5): for a synchronisation of one stream the server writes
 * `result` and `len`, then has the stream itself store the next `seq` when it gets there
 * (cuStreamWriteValue32, behind the work synchronised with, the segment being registered
 * and device-mapped), so that no thread of the server need wake for the reply. It stores
 * that number in `gpu_seq` too, as a hint: while `gpu_seq` is the number the thread
 * waits for, the reply comes from the GPU and the thread may spin for it as a native
 * synchronisation spins (MPSSHIM_GPU_WAIT_SPIN_US). A thread that sleeps is woken by the
 * worker once it sees the stream there. The server never reads `seq` or `gpu_seq` back: it
 * numbers each lane's replies itself (a client that writes them fools only its own waits). */
struct chan_lane {
    _Alignas(64) _Atomic uint32_t seq;
    _Atomic uint32_t waiting;
    int32_t result;
    uint32_t len;
    _Atomic uint32_t gpu_seq;
    uint8_t pad[44];
    uint8_t data[CHAN_LANE_DATA];
};
_Static_assert(sizeof(struct chan_lane) == CHAN_LANE_SIZE, "lane layout");

/* Host functions (cuLaunchHostFunc, cuStreamAddCallback) run in the client, in stream
 * order. For the n-th one (n counts from 1) the server enqueues on the client's stream a
 * host function of its own, which posts n to `fired` (server -> client), and then a
 * cuStreamWaitValue32 on done[n % CHAN_CB_SLOTS] >= n (cyclic), which holds the stream
 * until the client's callback thread has run the function and stored n there. The GPU
 * polls `done`, so finishing costs the client no system call; the server's own host
 * function never blocks, so other clients' host functions are never held up.
 *
 * Graph host nodes (cuGraphAddHostNode, cuLaunchHostFunc in a capture) run many times, so
 * no number fixed when the graph is built can say "this run is done". Each is a slot: the
 * server's graph holds, for it, a host function of the server's that stores 0 in
 * hn_flag[slot] and posts CHAN_CB_NODE | slot, then a batch mem-op node waiting for
 * hn_flag[slot] == 1, which the client's callback thread stores after running
 * hn_fn[slot](hn_user[slot]). Slots are handed out by the server (server/graphs/hostfn.c); it
 * writes hn_fn and hn_user from the client's requests and copies them between slots, but
 * never calls nor trusts them (they are the client's own pointers, used only in the
 * client); it only ever writes hn_flag. */
#define CHAN_CB_NODE (1ull << 32) /* a fired entry for host node slot (entry & 0xffffffff) */
struct chan_callbacks {
    _Alignas(64) _Atomic uint32_t fired_tail; /* notifications posted (server) */
    _Atomic uint32_t fired_waiters;           /* the client's callback thread sleeps */
    _Alignas(64) _Atomic uint32_t fired_head; /* notifications taken (client) */
    uint64_t fired[CHAN_CB_SLOTS];            /* seq, or CHAN_CB_NODE | slot, of notification k */
    _Atomic uint32_t done[CHAN_CB_SLOTS];     /* last seq finished in each slot */
    _Atomic uint32_t hn_flag[CHAN_HN_SLOTS];  /* 1: the slot's function ran (client) */
    uint64_t hn_fn[CHAN_HN_SLOTS];            /* CUhostFn of each slot (server) */
    uint64_t hn_user[CHAN_HN_SLOTS];          /* its userData (server) */
};

struct chan_devinfo_dev {
    char name[256];
    CUuuid uuid;
    uint64_t total_mem;
    char pci_bus_id[32];
    int32_t attr[CU_DEVICE_ATTRIBUTE_MAX];
    int32_t attr_result[CU_DEVICE_ATTRIBUTE_MAX]; /* CUresult of each query */
};

#define CHAN_P2P_ATTRS 5 /* CUdevice_P2PAttribute 1 .. 5 */

/* What the driver answers about two devices: cuDeviceCanAccessPeer and each P2P attribute,
 * with whether it answered (ok 1) or refused. */
struct chan_devinfo_peer {
    int32_t can, can_ok;
    int32_t p2p[CHAN_P2P_ATTRS], p2p_ok[CHAN_P2P_ATTRS];
};

struct chan_devinfo {
    int32_t driver_version;
    int32_t ndev;
    struct chan_devinfo_dev dev[CHAN_MAX_DEVICES];
    /* peer[i][j], i != j, in the client's ordinals: read at start. A client moved to its
     * GPU's server keeps its first server's (interpose/moved.c answers from it). */
    struct chan_devinfo_peer peer[CHAN_MAX_DEVICES][CHAN_MAX_DEVICES];
};

struct chan_shm {
    /* Written by the server before the client maps the segment; the server never reads
     * these back (it keeps its own copy), the client trusts them. */
    uint32_t magic;
    uint16_t major, minor;
    uint64_t size;
    uint64_t ring_off, ring_size;
    uint64_t lanes_off;
    uint32_t nlanes, lane_size;
    uint64_t staging_off;
    uint32_t nslots, slot_size;
    uint64_t devinfo_off;

    /* Request ring positions: byte counts since the start, never wrapped (64-bit). */
    _Alignas(64) _Atomic uint64_t tail; /* written by the client (producer) */
    _Atomic uint32_t doorbell;          /* bumped by the client when the server sleeps */
    _Alignas(64) _Atomic uint64_t head; /* written by the server (consumer) */
    _Atomic uint32_t server_sleeping;   /* the worker is (about to be) asleep on doorbell */
    _Atomic uint32_t space_bell;        /* bumped by the server when space waiters exist */
    _Atomic uint32_t space_waiters;     /* client threads waiting for ring space */
    /* Set by the server when this client was terminated or the server is going away:
     * the client stops waiting and returns errors (CHAN_DEAD_*). */
    _Alignas(64) _Atomic uint32_t dead;
    /* Moved by the server (to a value it has not stored before) whenever an answer the
     * client may keep can change with no record of its own: a fault of the shared context,
     * terminate_client, an asynchronous error deferred to the next synchronisation. The
     * client keeps "idle" answers only while it stays put (interpose/idle.c); the server
     * only stores it, from a counter of its own, and never reads it, so a client that
     * writes it only fools itself. On the line of `dead`: both are read on every such
     * answer. */
    _Atomic uint32_t alert;
    /* Server -> client, a hint: how many µs a thread waiting for a reply should spin
     * before it sleeps, plus one; 0: no hint (the client's own MPSSHIM_SPIN_US). The server
     * lowers it while it has more busy clients than its CPUs can spin for (server/core/spin.c);
     * a client never spins longer than its own setting. The server never reads it back. */
    _Atomic uint32_t spin_hint_us;
    /* Server -> client, a hint: 0, ring the doorbell for every record published while the
     * worker sleeps; else the client may leave a record that asks for no reply unrung for up
     * to this many µs (and CHAN_COALESCE_MAX records), ringing with its next record that
     * waits, before it waits for anything, or once that long has passed; the server wakes a
     * worker whose ring holds records it was not rung for within about as long
     * (server/core/coalesce.c). The server sets it only while its CPUs are all wanted, where each
     * wake-up costs a client's step time; it never reads it back: a client that ignores it
     * only rings more, or waits longer for its own work. */
    _Atomic uint32_t coalesce_us;

    struct chan_slot slots[CHAN_NSLOTS];
};

/* At most this many records a client leaves unrung (chan_shm.coalesce_us). */
#define CHAN_COALESCE_MAX 64u

#define CHAN_DEAD_GONE 1u /* the server is gone or quitting: CUDA_ERROR_MPS_SERVER_NOT_READY */
#define CHAN_DEAD_TERMINATED 2u /* terminate_client: CUDA_ERROR_MPS_CLIENT_TERMINATED, sticky */

/* ---------------------------------------------------------------- request records */

/* Every record starts with this header. `size` is the exact byte count, header included;
 * the record occupies `size` rounded up to 8 bytes, so that every header is aligned. A
 * record never wraps: when it does not fit before the end of the ring, the client writes a
 * PAD record (or nothing, if fewer than 16 bytes remain) and starts at offset 0. */
struct chan_rec {
    uint32_t size;
    uint16_t op;     /* < SHIM_NCALLS: generic call with that id; else enum chan_op */
    uint16_t flags;  /* CHAN_RF_* */
    uint16_t lane;   /* reply lane, when CHAN_RF_REPLY */
    uint16_t thread; /* client thread number: selects the per-thread default stream */
    uint32_t ctx;    /* client context current for the call; 0 = none */
};
_Static_assert(sizeof(struct chan_rec) == 16, "record header layout");

/* Bytes a record of `size` occupies in the ring. */
#define CHAN_REC_SPAN(size) (((uint64_t)(size) + 7u) & ~(uint64_t)7u)

#define CHAN_RF_REPLY 0x1u /* the sender waits on `lane` for the result */
#define CHAN_RF_PTDS 0x2u  /* the NULL stream means the per-thread default stream */
/* Work for the GPU alone that the client may leave unrung a while (chan_shm.coalesce_us,
 * channel/chan.c), as it may a launch: an asynchronous copy whose data is in place (device or
 * pinned memory) or in the record, which nothing of the client's waits on. Read by the client
 * only (chan_ring_publish); the server ignores it, as any older one does. */
#define CHAN_RF_GPU_WORK 0x4u

/* Hand-written operations (the `manual` families): enum chan_op, CHAN_OP_*, generated from
 * the %op rows of cuda_symbols.txt, and the structs of their payloads and replies, from its
 * %payload lines (which say each one's members, and what the server checks of them: the
 * enums below that a member holds are ranges there, first..last, moved when one is added). */
#include "chan_ops.h"
#include "chan_payloads.h"

/* chan_host_register.what: cuMemHostRegister / cuMemHostUnregister. */
enum chan_host_register_what {
    CHAN_HR_REGISTER = 1,
    CHAN_HR_UNREGISTER,
};
/* chan_host_alloc.flags: cuMemAllocManaged's memory (the other bits are then its
 * CU_MEM_ATTACH_* flags); without it, cuMemHostAlloc's CU_MEMHOSTALLOC_* flags. */
#define CHAN_HOST_MANAGED 0x80000000u
/* cuMemAllocManaged's flags: one of the two it takes. */
static inline int chan_managed_flags_ok(unsigned flags)
{
    return flags == CU_MEM_ATTACH_GLOBAL || flags == CU_MEM_ATTACH_HOST;
}
/* With CHAN_HOST_MANAGED: migrating managed memory (interpose/migrate.c,
 * server/memory/migrate.c). The reply's address is device memory of the server's, the fd's
 * pages are its host view, which the client maps at that same address and the server
 * elsewhere; bytes move between the two only when the client asks (MPUSH, MPULL). */
#define CHAN_HOST_MIGRATE 0x40000000u

/* One side of a copy. */
enum chan_mem {
    CHAN_MEM_DEVICE = 1, /* device address of the client's */
    CHAN_MEM_ARRAY,      /* CUarray of the client's */
    CHAN_MEM_PINNED,     /* host address inside a pinned allocation shared with the server */
    CHAN_MEM_STAGED,     /* client pageable memory: data travels inline or through slots */
};

#define CHAN_CF_ASYNC 0x1u     /* the API call was an ...Async one (orders on `stream`) */
#define CHAN_CF_INLINE 0x2u    /* STAGED data travels in the record (HtoD) or reply (DtoH) */
#define CHAN_CF_UNALIGNED 0x4u /* cuMemcpy2DUnaligned semantics */
#define CHAN_CF_COMPLETE 0x8u  /* reply only once the copy has completed (else once queued) */
#define CHAN_CF_PEER 0x10u     /* sides name their devices (cuMemcpyPeer, cuMemcpy3DPeer) */
/* A staged copy into pageable memory that the server may refuse with CHAN_COPY_SETTLE when its
 * stream still has work queued and the client's process has other threads: the server's
 * thread would wait for that work in the copy, and the other threads' requests, which the
 * work may wait for, unread behind it (server/memory/copy.c). The client then waits for the
 * stream's work as a synchronisation does and asks again without the flag (at most once). */
#define CHAN_CF_MAY_SETTLE 0x20u
/* The answer of such a refused copy (never the driver's: CUresult's values stay far below). */
#define CHAN_COPY_SETTLE ((CUresult)0x7ffff001)

/* __managed__ variables (interpose/mvars.c, server/memory/managed.c). Such a variable is the
 * driver's managed memory in the server, which a client cannot map; the client keeps a host
 * copy at the same address and moves bytes between the two at the points CUDA's rules for
 * managed memory without concurrent access allow. Every entry names bytes of one variable
 * the client looked up itself: [dptr, dptr + len) inside one of its global ranges that the
 * driver says is managed.
 *  - INFO (sync, n = 1): whether dptr is such a variable; reply u32 CHAN_MVAR_MANAGED or 0.
 *  - READ (sync): the entries' bytes, at most CHAN_LANE_DATA together, packed in the reply;
 *    with no context current too (the runtime looks its variables up before it has one):
 *    a new variable's first contents.
 *  - PUSH (async): the entries' bytes follow them, packed in order; they reach the device
 *    before any work the client enqueues afterwards, on any of its streams.
 *  - PULL (sync): each variable's bytes are copied into the client's pinned memory at buf +
 *    off, after every push; the reply comes once they are there.
 *  - MPUSH (async, or sync when a reply is asked: it comes once the bytes are there): the
 *    entries name bytes of migrating managed allocations of the client's (CHAN_HOST_MIGRATE);
 *    each goes from the host view to the device memory, ordered as PUSH is. No bytes follow.
 *  - MPULL (sync): the same ranges the other way, after every push; with
 *    CHAN_MPULL_AFTER_WORK in buf, also after all the client's work queued so far on any of
 *    its streams (a host thread's touch; a host function's does not wait: its own stream
 *    waits for it). The reply comes once the bytes are there. With CHAN_MPULL_ON_STREAM too
 *    (protocol 5.7; a prefetch to the host), it may be async: each entry's off names the
 *    same stream of the client's (a handle, the NULL stream under CHAN_RF_PTDS the thread's),
 *    which waits for the pull; an error waits for the client's next synchronisation.
 * A sync one replies with its own result only: an error of the client's async work waits
 * for its own synchronisation. */
enum chan_mvar_what {
    CHAN_MVAR_INFO = 1,
    CHAN_MVAR_READ,
    CHAN_MVAR_PUSH,
    CHAN_MVAR_PULL,
    CHAN_MVAR_MPUSH,
    CHAN_MVAR_MPULL,
};
#define CHAN_MPULL_AFTER_WORK 0x1u
#define CHAN_MPULL_ON_STREAM 0x2u
#define CHAN_MVAR_MANAGED 0x1u

enum chan_image_kind {
    CHAN_IMAGE_MODULE = 1, /* cuModuleLoadDataEx */
    CHAN_IMAGE_FATBIN,     /* cuModuleLoadFatBinary */
    CHAN_IMAGE_LIBRARY,    /* cuLibraryLoadData */
};

enum chan_handle_kind {
    CHAN_H_MODULE = 1,
    CHAN_H_LIBRARY,
    CHAN_H_FUNCTION,
    CHAN_H_KERNEL,
};

#define CHAN_MAX_PARAMS 1024

/* Launch attributes travel as plain values, except these, which name events or graph nodes
 * of the caller's: mapping them is not done, so both ends refuse them (the client first,
 * naming the call; the server again, as it checks everything a client sends). */
static inline int chan_launch_attr_unmapped(CUlaunchAttributeID id)
{
    return id == CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT ||
           id == CU_LAUNCH_ATTRIBUTE_LAUNCH_COMPLETION_EVENT ||
           id == CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
}

/* A graph's kernel node (struct chan_kernel_node): added, its parameters set (in the graph,
 * or in an exec of it) or read. The client packs the kernel's parameters by the function's
 * layout, as for a launch. */
#define CHAN_MAX_DEPS 256          /* dependencies of one added node */
#define CHAN_MAX_PARAM_BYTES 32764 /* the largest parameter buffer of a CUDA 12.1+ kernel */
enum chan_kernel_node_what {
    CHAN_KN_ADD = 1,  /* cuGraphAddKernelNode: graph, deps -> the new node */
    CHAN_KN_SET,      /* cuGraphKernelNodeSetParams: node */
    CHAN_KN_EXEC_SET, /* cuGraphExecKernelNodeSetParams: graph = the exec, node */
    CHAN_KN_GET,      /* cuGraphKernelNodeGetParams: node -> struct chan_kernel_node_got */
};

/* A graph's conditional node (struct chan_cond_node: cuGraphAddNode of
 * CU_GRAPH_NODE_TYPE_CONDITIONAL, no typed call stands for it). The driver makes the node's
 * body graphs and keeps their array; the reply carries them, and the client keeps an array of
 * its own for the node (interpose/graphnode.c). */
#define CHAN_MAX_COND_BODIES 256 /* bodies of one SWITCH node the channel carries */

/* chan_ipc.what: IPC between clients of one server (server/memory/ipc.c). */
enum chan_ipc_what {
    CHAN_IPC_GET_MEM = 1, /* value = device address -> handle */
    CHAN_IPC_OPEN_MEM,    /* handle, flags -> value = base, size */
    CHAN_IPC_CLOSE_MEM,   /* value = base -> opens = the caller's opens left */
    CHAN_IPC_GET_EVENT,   /* value = event -> handle */
    CHAN_IPC_OPEN_EVENT,  /* handle -> value = event */
    CHAN_IPC_GET_VMM,     /* value = CUmemGenericAllocationHandle, flags = handle type -> handle
                             (the client hands it on in a memfd: cuMemExportToShareableHandle) */
    CHAN_IPC_OPEN_VMM,    /* handle -> value = CUmemGenericAllocationHandle */
    /* another GPU's server's CHAN_IPC_GET_MEM handle of this process's memory -> value = base,
       size, opens: mapped at its own address (server/memory/mirror.c); closed as opened
       memory is (CHAN_IPC_CLOSE_MEM) */
    CHAN_IPC_OPEN_MIRROR,
};
_Static_assert(sizeof(((struct chan_ipc *)0)->handle) == CU_IPC_HANDLE_SIZE, "IPC handle bytes");

/* A graph's host node (struct chan_host_node; see struct chan_callbacks): added, its function
 * read or set (in the graph, or in an exec of it), or a host function captured by a capturing
 * stream. */
enum chan_host_node_what {
    CHAN_HN_ADD = 1,  /* cuGraphAddHostNode: graph, fn, user, deps -> the new node */
    CHAN_HN_GET,      /* cuGraphHostNodeGetParams: node -> fn, user */
    CHAN_HN_SET,      /* cuGraphHostNodeSetParams: node, fn, user */
    CHAN_HN_EXEC_SET, /* cuGraphExecHostNodeSetParams: graph = the exec, node, fn, user */
    CHAN_HN_CAPTURE,  /* cuLaunchHostFunc in a capture: graph = the stream, fn, user;
                         CUDA_ERROR_NOT_READY if the stream is not capturing after all */
};

/* The server's driver's cuGetProcAddress answers (server/code/procaddr.c), probed once at
 * start; a client (of a server of minor 1 or more: protocol 5.1, once 4.3) reads them page
 * by page right after the handshake and answers cuGetProcAddress from them
 * (interpose/procaddr.c), checking everything.
 * The table: a chan_procaddr_head, nrows chan_procaddr_row, then `strings` bytes of
 * NUL-terminated names the rows point into. A row answers (name, flags) from `version` on,
 * until the next row of the same (name, flags): the symbol, or when there is none
 * (CHAN_PROCADDR_NONE) the result and query status (-1: not written) the driver gave. */
#define CHAN_PROCADDR_MAX (2u << 20)    /* bytes of a table a client accepts */
#define CHAN_PROCADDR_MAGIC 0x52444150u /* "PADR" */
#define CHAN_PROCADDR_NONE 0xffffffffu

#endif
