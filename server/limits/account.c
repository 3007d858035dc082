/* What one client process may spend and spends, whatever number of connections it makes.
 *
 * Why: limits were each connection's own, so a process that opened three connections under
 * a 4 MiB device memory limit held 12 MiB, and so with pinned memory and SM shares (issue 34,
 * S5). The shim makes one connection per process, but a client is untrusted and may speak
 * the protocol itself; a process that execs keeps its pid, and its new image connects while
 * the old image's connection is still being released. So every connection of one process
 * (its pid and its start time, which a reused pid does not share) joins one account:
 *  - its limits are those the process's first connection resolved, for good;
 *  - device memory (per device), pinned host memory, registry records and bytes held for
 *    queued work are counted here across its connections, and checked here;
 *  - its SM share is one green partition per device, whichever connection makes streams
 *    (green.c);
 *  - at most SRV_ACCOUNT_CONNS connections at once.
 * A check and the count it allows happen in one worker, but two connections' workers may
 * check at once: a device memory check therefore reserves what it allows until the record
 * that asked has been handled (srv_account_settle), so two connections can never both take
 * the last bytes; pinned memory and records are taken with a compare-and-swap.
 *
 * Accounts live in one list under accounts_lock (joined and left at handshakes and
 * releases only); their counters are atomics that every connection's worker, and the
 * control thread reading them, use without the lock. */
#include "server/core/server.h"
#include "server/core/clients.h"
#include "server/limits/account.h"
#include "server/limits/policy.h"
#include "channel/procstat.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Device memory a check allowed a client during the record being handled, not yet
 * counted (its reserve); the worker's own. */
struct srv_reserve {
    uint64_t dev[CHAN_MAX_DEVICES];
    int any;
};

static pthread_mutex_t accounts_lock = PTHREAD_MUTEX_INITIALIZER;
static struct srv_account *accounts;

/* The process's start time (clock ticks after boot, /proc/PID/stat field 22), 0 when it
 * cannot be read: a pid the kernel reused belongs to another process. */
static unsigned long long start_time(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    long long v = chan_stat_read(fd, 22);
    if (fd >= 0) close(fd);
    return v > 0 ? (unsigned long long)v : 0;
}

int srv_account_join(struct srv_client *c, char *why, size_t len)
{
    unsigned long long st = c->pid > 0 ? start_time(c->pid) : 0;
    pthread_mutex_lock(&accounts_lock);
    struct srv_account *a = accounts;
    /* pid 0: a peer in a PID namespace the server cannot see into; its connections cannot
     * be told apart, so each is an account of its own. */
    while (a && !(c->pid > 0 && a->pid == c->pid && a->start == st))
        a = a->next;
    if (a && a->conns >= SRV_ACCOUNT_CONNS) {
        pthread_mutex_unlock(&accounts_lock);
        snprintf(why, len, "process %d already has %u connections to this server", (int)c->pid,
                 SRV_ACCOUNT_CONNS);
        return -1;
    }
    if (!a) {
        if (!(a = calloc(1, sizeof(*a)))) {
            pthread_mutex_unlock(&accounts_lock);
            snprintf(why, len, "out of memory");
            return -1;
        }
        a->pid = c->pid;
        a->start = st;
        a->lim = *c->lim;
        for (int d = 0; d < CHAN_MAX_DEVICES; d++)
            a->part[d] = -1;
        a->next = accounts;
        accounts = a;
    } else if (memcmp(&a->lim, c->lim, sizeof(*c->lim)) != 0) {
        srv_log("Client process %d: a further connection asked for other limits than its "
                "first; the first's hold for the whole process",
                (int)c->pid);
    }
    *c->lim = a->lim; /* the process's limits, whichever connection asked */
    a->conns++;
    c->acct = a;
    pthread_mutex_unlock(&accounts_lock);
    return 0;
}

void srv_account_leave(struct srv_client *c)
{
    struct srv_account *a = c->acct;
    if (!a) return;
    c->acct = NULL;
    pthread_mutex_lock(&accounts_lock);
    if (--a->conns == 0) {
        struct srv_account **pp = &accounts;
        while (*pp && *pp != a)
            pp = &(*pp)->next;
        if (*pp) *pp = a->next;
        uint64_t left =
            atomic_load(&a->pinned) | atomic_load(&a->objects) | atomic_load(&a->queued);
        for (int d = 0; d < CHAN_MAX_DEVICES; d++)
            left |= atomic_load(&a->mem[d]) | atomic_load(&a->reserved[d]);
        if (left)
            srv_log("Client process %d: its account's counters were not zero when its last "
                    "connection left",
                    (int)a->pid);
        free(a);
    }
    pthread_mutex_unlock(&accounts_lock);
}

/* ---------------------------------------------------------------- device memory */

int srv_account_mem_fits(struct srv_client *c, int dev, uint64_t bytes)
{
    struct srv_account *a = c->acct;
    if (dev < 0 || dev >= CHAN_MAX_DEVICES || !c->lim->mem[dev]) return 1;
    uint64_t lim = c->lim->mem[dev];
    if (!a) /* a client that never joined holds nothing it could count */
        return bytes <= lim;
    uint64_t r = atomic_load(&a->reserved[dev]);
    for (;;) {
        uint64_t used = atomic_load(&a->mem[dev]), sum;
        if (__builtin_add_overflow(used, r, &sum) || sum > lim || bytes > lim - sum) return 0;
        if (atomic_compare_exchange_weak(&a->reserved[dev], &r, r + bytes)) break;
    }
    c->reserve->dev[dev] += bytes;
    c->reserve->any = 1;
    return 1;
}

void srv_account_settle(struct srv_client *c)
{
    if (!c->reserve->any) return;
    c->reserve->any = 0;
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        if (c->reserve->dev[d]) {
            if (c->acct) atomic_fetch_sub(&c->acct->reserved[d], c->reserve->dev[d]);
            c->reserve->dev[d] = 0;
        }
}

uint64_t srv_account_mem_used(const struct srv_client *c, int dev)
{
    if (dev < 0 || dev >= CHAN_MAX_DEVICES) return 0;
    return c->acct ? atomic_load(&c->acct->mem[dev]) : atomic_load(&c->stats.mem_dev[dev]);
}

void srv_account_mem_add(struct srv_client *c, int dev, int64_t bytes)
{
    if (c->acct && dev >= 0 && dev < CHAN_MAX_DEVICES)
        atomic_fetch_add(&c->acct->mem[dev], (uint64_t)bytes);
}

/* ---------------------------------------------------------------- pinned memory, records */

/* *counter + bytes within cap: taken (1), else nothing (0). */
static int take(_Atomic uint64_t *counter, uint64_t bytes, uint64_t cap)
{
    uint64_t v = atomic_load(counter);
    do {
        if (v > cap || bytes > cap - v) return 0;
    } while (!atomic_compare_exchange_weak(counter, &v, v + bytes));
    return 1;
}

int srv_account_pinned_take(struct srv_client *c, uint64_t bytes)
{
    if (c->acct && !take(&c->acct->pinned, bytes, srv.max_pinned)) {
        srv_log("Client process %d: pinned host memory limit (%llu MiB) reached", (int)c->pid,
                (unsigned long long)(srv.max_pinned >> 20));
        return 0;
    }
    atomic_fetch_add(&c->stats.pinned, bytes);
    return 1;
}

void srv_account_pinned_give(struct srv_client *c, uint64_t bytes)
{
    atomic_fetch_sub(&c->stats.pinned, bytes);
    if (c->acct) atomic_fetch_sub(&c->acct->pinned, bytes);
}

int srv_account_record_take(struct srv_client *c)
{
    struct srv_account *a = c->acct;
    if (!a || !srv.max_objects) return 1;
    if (take(&a->objects, 1, srv.max_objects)) return 1;
    if (!atomic_exchange(&a->objects_said, 1))
        srv_log("Client process %d: it holds MPSSHIM_MAX_OBJECTS (%llu) objects; what it makes "
                "past that fails with CUDA_ERROR_OUT_OF_MEMORY (said once)",
                (int)c->pid, (unsigned long long)srv.max_objects);
    return 0;
}

void srv_account_record_give(struct srv_client *c)
{
    if (c->acct && srv.max_objects) atomic_fetch_sub(&c->acct->objects, 1);
}

/* ---------------------------------------------------------------- queued work */

void srv_account_queued_add(struct srv_client *c, int64_t bytes)
{
    if (c->acct) atomic_fetch_add(&c->acct->queued, (uint64_t)bytes);
}

uint64_t srv_account_queued(const struct srv_client *c, uint64_t own)
{
    return c->acct ? atomic_load(&c->acct->queued) : own;
}

/* Last of the client's release (family.c): everything it counted has been given back. */
/* Its limits (no green partition until the handshake gives one) and its reserve. */
static int account_init(struct srv_client *c)
{
    c->lim = calloc(1, sizeof(*c->lim));
    c->reserve = calloc(1, sizeof(*c->reserve));
    if (!c->lim || !c->reserve) return -1;
    for (int d = 0; d < CHAN_MAX_DEVICES; d++)
        c->lim->part[d] = -1;
    return 0;
}

static void account_free(struct srv_client *c)
{
    free(c->lim);
    free(c->reserve);
}

const struct srv_family srv_family_account = {.name = "account",
                                              .client_init = account_init,
                                              .client_free = account_free,
                                              .client_fini = srv_account_leave};

int srv_mem_fits(struct srv_client *c, int dev, uint64_t bytes)
{
    if (dev < 0 || dev >= CHAN_MAX_DEVICES || !c->lim->mem[dev]) return 1;
    /* The process's, whatever number of connections it makes (account.c). */
    if (srv_account_mem_fits(c, dev, bytes)) return 1;
    uint64_t lim = c->lim->mem[dev], used = srv_account_mem_used(c, dev);
    /* One line per episode: a program probing how much it can get is not a log flood. */
    if (!c->mem_refused[dev]) {
        char l[32], u[32], b[32];
        srv_format_size(lim, l, sizeof(l));
        srv_format_size(used, u, sizeof(u));
        srv_format_size(bytes, b, sizeof(b));
        srv_log("Client process %d: device memory limit %s on device %d reached (holds %s, "
                "asked for %s more)",
                (int)c->pid, l, dev, u, b);
        c->mem_refused[dev] = 1;
    }
    return 0;
}
