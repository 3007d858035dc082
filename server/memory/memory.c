/* Device memory in the shared context, and pinned host memory shared with clients.
 *
 * A client's device memory counts against its limit on the device it lands on (policy.c
 * resolves the limits): an allocation beyond it fails with CUDA_ERROR_OUT_OF_MEMORY before
 * the driver is asked. Pinned host memory and module globals do not count; managed memory
 * does (server/memory/managed.c says why).
 *
 * A pinned allocation is a sealed memfd that the server maps inside its own reserved
 * address range and registers with the driver; the client maps the same memfd at the same
 * address, so one pointer means the same pages in both processes and, under unified
 * addressing, on the device. The server picks the address (it must be free here, where the
 * driver also reserves ranges); if it is taken in the client, the client asks again. */
#define _GNU_SOURCE
#include "server/core/clientspace.h"
#include "server/core/server.h"
#include "server/memory/shmguard.h"
#include "server/memory/quietctx.h"
#include "server/core/streamrec.h"
#include "server/core/streams.h"
#include "server/core/registry.h"
#include "server/core/reply.h"
#include "server/limits/account.h"
#include "server/memory/managed.h"
#include "server/memory/memops.h"
#include "server/memory/migrate.h"
#include "server/core/window.h"
#include "server/limits/policy.h"
#include "channel/fdpass.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <sys/stat.h>
#include <stdlib.h>
#include <string.h>
#include <linux/magic.h>
#include <sys/mman.h>
#include <sys/statfs.h>
#include <unistd.h>

/* Pitched allocations: the description registers pitch x height once the driver picked
 * the pitch; before that, width x height must fit. */
static CUresult alloc_pitch_before(struct srv_client *c, struct srv_call *k)
{
    uint64_t want;
    if (__builtin_mul_overflow(k->a.val[2], k->a.val[3], &want)) want = UINT64_MAX;
    return srv_mem_fits(c, k->dev, want) ? CUDA_SUCCESS : CUDA_ERROR_OUT_OF_MEMORY;
}

const struct srv_hook srv_hook_mem_alloc_pitch = {.before = alloc_pitch_before};

/* A client with a limit on this device sees the limit as the total, and as free what the
 * limit leaves it, or less when the device itself has less. */
static CUresult mem_info_after(struct srv_client *c, struct srv_call *k)
{
    int dev = k->dev;
    if (!c->lim->mem[dev]) return CUDA_SUCCESS;
    size_t *f = k->a.ptr[0], *t = k->a.ptr[1];
    uint64_t lim = c->lim->mem[dev], used = srv_account_mem_used(c, dev);
    uint64_t left = used < lim ? lim - used : 0;
    if (f && *f > left) *f = (size_t)left;
    if (t) *t = (size_t)lim;
    return CUDA_SUCCESS;
}

static CUresult mem_info_before(struct srv_client *c, struct srv_call *k)
{
    (void)k;
    return c->cur ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

const struct srv_hook srv_hook_mem_info = {.before = mem_info_before, .after = mem_info_after};

/* ---------------------------------------------------------------- pinned host memory */

void srv_op_host_alloc(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_host_alloc m; /* the payload is one (its %op row) */
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    uint64_t rep[2] = {0, 0};
    int fd = -1, taken = 0; /* taken: its pinned bytes are counted, not yet by a record */
    uint64_t addr = 0, size = 0;
    (void)len;
    if (!c->cur) {
        res = CUDA_ERROR_INVALID_CONTEXT;
        goto out;
    }
    memcpy(&m, p, sizeof(m));
    if (m.bytes == 0 || m.bytes > (1ull << 40)) goto out;
    /* Migrating managed memory is made by migrate.c. */
    if ((m.flags & (CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE)) ==
        (CHAN_HOST_MANAGED | CHAN_HOST_MIGRATE)) {
        srv_migrate_alloc(c, r, &m);
        return;
    }
    /* cuMemAllocManaged's memory is made the same way (server/memory/managed.c says why); it is
     * its own kind of range, and counts against the device memory limit too. */
    int managed = (m.flags & CHAN_HOST_MANAGED) != 0;
    uint32_t type = managed ? SHIM_HT_MEM_MANAGED : SHIM_HT_MEM_PINNED;
    int dev = c->cur->device;
    if (managed && !chan_managed_flags_ok(m.flags & ~CHAN_HOST_MANAGED)) goto out;
    size = (m.bytes + SRV_WINDOW_ALIGN - 1) & ~(SRV_WINDOW_ALIGN - 1);
    res = CUDA_ERROR_OUT_OF_MEMORY;
    if (managed && !srv_mem_fits(c, dev, m.bytes)) goto out;
    /* Pinned pages cannot be reclaimed: one client must not pin the machine's memory away
     * (the kernel would kill the server, the biggest process, and every client with it). */
    if (!srv_account_pinned_take(c, size)) /* the process's, across its connections */
        goto out;
    taken = 1;
    srv_quiet_start(c, managed ? "managed memory" : "pinned memory"); /* waited for just below */
    if ((fd = srv_window_share(size, m.avoid, &addr)) < 0) goto fail;
    struct srv_obj *o = srv_range_add(c, type, addr, m.bytes, 1, NULL);
    if (!o) {
        srv_host_unregister(c, (void *)(uintptr_t)addr);
        goto fail;
    }
    o->aux = size;
    taken = 0; /* the record's now: given back at its release */
    if (managed) srv_obj_count(c, o, dev, m.bytes);
    /* The fd goes first: the client reads it right after the reply. */
    uint8_t one = 0;
    if (chan_send_fd(c->sock, &one, 1, fd) != 0) {
        srv_obj_destroyed(c, o);
        taken = 1;
        srv_host_unregister(c, (void *)(uintptr_t)addr);
        res = CUDA_ERROR_OPERATING_SYSTEM;
        goto fail;
    }
    close(fd);
    rep[0] = addr;
    rep[1] = size;
    res = CUDA_SUCCESS;
    goto out;
fail:
    if (fd >= 0) close(fd);
    if (addr) srv_window_give(addr, size);
    if (taken) srv_account_pinned_give(c, size);
out:
    memcpy(srv_lane_data(c, r->lane), rep, sizeof(rep));
    srv_reply(c, r->lane, res, res == CUDA_SUCCESS ? sizeof(rep) : 0);
}

/* A pinned range's aux: the bytes the server mapped (below 2^48), this bit when the client's
 * own pages were registered (cuMemHostRegister) rather than allocated here (cuMemHostAlloc),
 * and for a registered shared file, its guard's slot + 1 (shmguard.c) in PINNED_GUARD. */
#define PINNED_REGISTERED (1ull << 63)
#define PINNED_GUARD_SHIFT 48
#define PINNED_GUARD (0x7fffull << PINNED_GUARD_SHIFT)

static uint64_t pinned_bytes(const struct srv_obj *o)
{
    return o->aux & ~(PINNED_REGISTERED | PINNED_GUARD);
}

/* The end of a pinned (or managed) allocation: unregistered and its addresses back in the
 * reservation (the client unmaps its own mapping). */
void srv_release_pinned(struct srv_client *c, struct srv_obj *o)
{
    srv_account_pinned_give(c, pinned_bytes(o));
    srv_memops_unmapping(c, o->key.value, pinned_bytes(o));
    srv_host_unregister(c, (void *)(uintptr_t)o->key.value);
    int guard = (int)((o->aux & PINNED_GUARD) >> PINNED_GUARD_SHIFT) - 1;
    if (guard >= 0) c->shm_guards--;
    if (guard >= 0 && srv_shmguard_drop(guard))
        srv_log("Client process %d: the shared file it registered at %#llx (%llu bytes) was "
                "truncated under the server; the server's view of it was anonymous memory "
                "from then on",
                (int)c->pid, (unsigned long long)o->key.value, (unsigned long long)pinned_bytes(o));
    if (o->aux & PINNED_REGISTERED)
        srv_clientspace_unmap(o->key.value, pinned_bytes(o));
    else
        srv_window_give(o->key.value, pinned_bytes(o));
}

void srv_op_host_free(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    uint64_t addr; /* the payload is one (its %op row) */
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    (void)len;
    memcpy(&addr, p, sizeof(addr));
    struct srv_obj *o = srv_obj_find(c, SHIM_HT_MEM_PINNED, addr);
    /* Also managed memory whose address the client could not map (memory.c). */
    if (!o) o = srv_obj_find(c, SHIM_HT_MEM_MANAGED, addr);
    if (o && !(o->aux & PINNED_REGISTERED)) { /* registered pages are unregistered */
        /* Its waits there end first (memops.c); copies may still read or write it:
         * wait for the client's work first. */
        srv_memops_end_range(c, o->key.value, o->size);
        res = CUDA_ERROR_NOT_READY; /* it left meanwhile: its release frees it */
        if (srv_streams_drain(c, 0) == 0) {
            srv_obj_release(c, o);
            res = CUDA_SUCCESS;
        }
    }
    srv_reply(c, r->lane, res, 0);
}

/* ---------------------------------------------------------------- registered host memory */

/* cuMemHostRegister: the client moved its pages into a memfd sealed against shrinking
 * (interpose/memory.c; anything else is refused: unsafe_backing); here it is mapped at the
 * same address, so that one address names the pages in both processes and on the GPU
 * (unified addressing), and registered: from then on the pages are pinned memory like
 * cuMemHostAlloc's, copied in place. The address is the client's: when it is taken in
 * this process (another client registered the same addresses, or the server uses them),
 * the registration is refused, said once per client with what holds the addresses. */
/* What of this process lies in [addr, end), for the log: the first mapping of
 * /proc/self/maps that overlaps it ("another client's registration" when that is what it
 * is), else why not known. A client's malloc'd buffer once met such a mapping in the GPU tier,
 * unexplained (bench/NOTES.md, "Registration overlap"). */
static void mapping_at(uint64_t addr, uint64_t end, char *out, size_t len)
{
    snprintf(out, len, "no mapping of the server's found there");
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f) return;
    char line[512];
    while (fgets(line, sizeof(line), f)) {
        unsigned long long lo, hi;
        char path[256] = "";
        if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %255s", &lo, &hi, path) < 2) continue;
        if (lo < end && hi > addr) {
            snprintf(out, len, "the server's mapping %llx-%llx %.100s", lo, hi,
                     path[0] ? path : "[anonymous]");
            break;
        }
    }
    fclose(f);
}

/* Why the server must not map fd's pages, or NULL when it may: they must be shared memory
 * (tmpfs: a memfd, /dev/shm). The server loads and stores there (srv_memops_let_go ends a
 * departed client's stream waits with a store; the driver's copies may be the CPU's), and a
 * load or store past the end of a file the client shrank is SIGBUS, for the whole server.
 * A memfd sealed against shrinking is proof that cannot happen, since seals are never
 * removed; any other file on tmpfs (*guard set) can be truncated through another descriptor
 * or its path, so its mapping is guarded (shmguard.c). Not a file on disk (its pages come
 * and go with the disk, and a write-back error is SIGBUS too), nor hugetlbfs: there a page
 * refaulted after a hole the client punched may find the pool empty, SIGBUS again (on
 * shared memory it is a new zeroed page). */
static const char *unsafe_backing(int fd, int *guard)
{
    int seals = fcntl(fd, F_GET_SEALS);
    struct statfs fs;
    *guard = seals < 0 || !(seals & F_SEAL_SHRINK);
    if (fstatfs(fd, &fs) != 0 || fs.f_type != TMPFS_MAGIC)
        return seals < 0 ? "a file that is not shared memory (tmpfs, a memfd)"
                         : "a memfd of huge pages (hugetlbfs)";
    return NULL;
}

static CUresult host_register(struct srv_client *c, const struct chan_host_register *m, int fd)
{
    static const uint64_t page = 4096;
    struct stat st;
    uint64_t end;
    uint64_t file_end;
    if (fd < 0 || !m->addr || !m->bytes || m->addr % page || m->bytes % page || m->offset % page ||
        m->bytes > (1ull << 40) || __builtin_add_overflow(m->addr, m->bytes, &end) ||
        __builtin_add_overflow(m->offset, m->bytes, &file_end) || file_end > INT64_MAX)
        return CUDA_ERROR_INVALID_VALUE;
    /* The seals before the size: a size read first could have shrunk before the seal. */
    int guarded = 0;
    const char *why = unsafe_backing(fd, &guarded);
    if (why) {
        srv_log("Client process %d: cuMemHostRegister of %#llx (%llu bytes) refused: its pages "
                "came in %s, which the client could take from under the server",
                (int)c->pid, (unsigned long long)m->addr, (unsigned long long)m->bytes, why);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    /* The file may end inside the last page, as a mapping of it may (NCCL registers its
     * /dev/shm file of shmSize + 4 bytes whole): those bytes read as zeros, no SIGBUS. A
     * page wholly past the end would be SIGBUS at the driver's registration. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (uint64_t)st.st_size + page <= file_end)
        return CUDA_ERROR_INVALID_VALUE;
    if (m->flags & ~(unsigned)(CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                               CU_MEMHOSTREGISTER_READ_ONLY))
        return CUDA_ERROR_INVALID_VALUE;
    if (srv_range_find(c, m->addr, 1) || srv_range_find(c, end - 1, 1))
        return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
    if (!srv_account_pinned_take(c, m->bytes)) return CUDA_ERROR_OUT_OF_MEMORY;
    void *want = (void *)(uintptr_t)m->addr;
    int err = srv_clientspace_map(m->addr, m->bytes, PROT_READ | PROT_WRITE, fd, (off_t)m->offset);
    if (err) {
        if (!c->hostreg_said++) {
            char who[160];
            mapping_at(m->addr, end, who, sizeof(who));
            srv_log("Client process %d: cuMemHostRegister of %#llx (%llu bytes) refused: the "
                    "server cannot map those addresses (%s; %s); said once for this client",
                    (int)c->pid, (unsigned long long)m->addr, (unsigned long long)m->bytes,
                    strerror(err), who);
        }
        srv_account_pinned_give(c, m->bytes);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    /* Guarded before anything touches it (the driver's registration does). */
    int slot = guarded && c->shm_guards < SRV_SHMGUARDS_PER_CLIENT
                   ? srv_shmguard_add(m->addr, m->bytes)
                   : -1;
    if (guarded && slot < 0) {
        srv_clientspace_unmap(m->addr, m->bytes);
        srv_account_pinned_give(c, m->bytes);
        srv_log("Client process %d: cuMemHostRegister of a shared file refused: the server "
                "guards %d such registrations at most, %d of one client",
                (int)c->pid, SRV_SHMGUARDS, SRV_SHMGUARDS_PER_CLIENT);
        return CUDA_ERROR_NOT_SUPPORTED;
    }
    unsigned fl = CU_MEMHOSTREGISTER_PORTABLE | CU_MEMHOSTREGISTER_DEVICEMAP |
                  (m->flags & CU_MEMHOSTREGISTER_READ_ONLY);
    srv_quiet_start(c, "a registration of its memory"); /* waited for just below */
    CUresult r = srv_host_register(want, m->bytes, fl);
    if (r != CUDA_SUCCESS) {
        srv_shmguard_drop(slot);
        srv_clientspace_unmap(m->addr, m->bytes);
        srv_account_pinned_give(c, m->bytes);
        return r;
    }
    struct srv_obj *o = srv_range_add(c, SHIM_HT_MEM_PINNED, m->addr, m->bytes, 1, NULL);
    if (!o) {
        srv_host_unregister(c, want);
        srv_shmguard_drop(slot);
        srv_clientspace_unmap(m->addr, m->bytes);
        srv_account_pinned_give(c, m->bytes);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    /* Its pinned bytes, given back at its release, and its guard, dropped then. */
    o->aux = m->bytes | PINNED_REGISTERED | ((uint64_t)(slot + 1) << PINNED_GUARD_SHIFT);
    if (slot >= 0) c->shm_guards++; /* counted down at its release */
    return CUDA_SUCCESS;
}

void srv_op_host_register(struct srv_client *c, const struct chan_rec *r, uint8_t *p, uint32_t len)
{
    struct chan_host_register m; /* the payload is one (its %op row) */
    CUresult res = CUDA_ERROR_INVALID_VALUE;
    (void)len;
    memcpy(&m, p, sizeof(m));
    if (m.what == CHAN_HR_UNREGISTER) {
        struct srv_obj *o = srv_obj_find(c, SHIM_HT_MEM_PINNED, m.addr);
        res = CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
        if (o && (o->aux & PINNED_REGISTERED)) {
            srv_memops_end_range(c, o->key.value, o->size); /* its waits there first */
            res = CUDA_ERROR_NOT_READY;         /* it left meanwhile: its release unregisters it */
            if (srv_streams_drain(c, 0) == 0) { /* copies may still read or write it */
                srv_obj_release(c, o);
                res = CUDA_SUCCESS;
            }
        }
    } else { /* CHAN_HR_REGISTER: what is one of the two (its %payload line) */
        /* Its memfd came on the socket just before the record. Bounded wait: a client that
         * sent the record without it must not hold this worker. */
        struct pollfd pf = {.fd = c->sock, .events = POLLIN};
        uint8_t one;
        int fd = -1;
        if (poll(&pf, 1, 1000) == 1 && chan_recv_fd(c->sock, &one, 1, &fd) == 0 && fd >= 0) {
            res = c->cur ? host_register(c, &m, fd) : CUDA_ERROR_INVALID_CONTEXT;
            close(fd);
        } else {
            atomic_store(&c->dead, 1); /* out of step with its socket: nothing can follow */
            srv_log("Client process %d registered host memory without its descriptor; "
                    "disconnecting it",
                    (int)c->pid);
        }
    }
    srv_reply(c, r->lane, res, 0);
}
