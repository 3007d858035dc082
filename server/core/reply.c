/* Answers to a client: its reply lanes, and the first error of its asynchronous work, kept
 * for its next synchronisation. Below every family, which all answer through these. */
#include "server/core/server.h"
#include "server/core/streamrec.h"
#include "server/core/clients.h"
#include "server/core/reply.h"
#include "server/core/fault.h"
#include "server/limits/account.h"

uint8_t *srv_lane_data(struct srv_client *c, int lane)
{
    /* A record sent without a reply lane still gets its answer written somewhere. */
    if (lane < 0 || lane >= CHAN_NLANES) return c->scratch;
    return c->ch.lanes[lane].data;
}

void srv_reply(struct srv_client *c, int lane, CUresult r, uint32_t len)
{
    if (lane < 0 || lane >= CHAN_NLANES) return;
    /* A terminated client's calls fail, even those whose work had finished. */
    if (atomic_load_explicit(&c->terminated, memory_order_relaxed)) {
        r = CUDA_ERROR_MPS_CLIENT_TERMINATED;
        len = 0;
    }
    /* A sticky error has the fault thread look at the device (a dead context's own
     * answers need not). */
    if (r != CUDA_SUCCESS && !(c->cur && c->cur->fault))
        srv_fault_note(c->cur ? c->cur->device : -1, r);
    /* What the record's checks reserved of the process's memory limit is settled before the
     * answer, not after it: it is counted as memory by now, or was not taken, and the
     * client's next call may come on another connection of the same process, whose check
     * would otherwise still see it reserved (account.c). */
    srv_account_settle(c);
    chan_lane_post_at(&c->ch, (uint32_t)lane, r, len, ++c->lane_seq[lane]);
}

void srv_defer(struct srv_client *c, CUresult r, const char *what)
{
    if (r == CUDA_SUCCESS) return;
    if (!(c->cur && c->cur->fault)) srv_fault_note(c->cur ? c->cur->device : -1, r);
    if (c->deferred == CUDA_SUCCESS) {
        c->deferred = r;
        srv_client_alert(c); /* the client's next synchronisation must come and take it */
        srv_log("Client process %d: asynchronous %s failed with %s; reported at its next "
                "synchronisation",
                (int)c->pid, what, srv_errname(r));
    }
}

CUresult srv_take_deferred(struct srv_client *c)
{
    CUresult r = c->deferred;
    c->deferred = CUDA_SUCCESS;
    return r;
}
