/* The raw client's accounts mode (tests/unit/rawclient.c, run by tests/accounts.sh): device
 * memory, pinned memory and record limits hold for a client process across its connections,
 * and a process has 8 connections at most. */
#include <stdio.h>
#include <sys/socket.h>
#include <unistd.h>

#include "channel/fdpass.h"
#include "tests/unit/rawclient.h"

/* cuMemAlloc_v2 of `bytes` in x's context 1: its result, the address in *d. */
static CUresult acct_alloc(struct raw_session *x, size_t bytes, CUdeviceptr *d)
{
    CUdeviceptr *pd = d;
    const void *a[] = {&pd, &bytes};
    return raw_call(x, SHIM_ID_cuMemAlloc_v2, a, d, sizeof(*d));
}

/* `bytes` of pinned host memory (cuMemHostAlloc's protocol): its result. */
static CUresult acct_pinned(struct raw_session *x, uint64_t bytes)
{
    struct chan_host_alloc m = {.bytes = bytes};
    uint64_t rep[2];
    CUresult r = raw_request(x, CHAN_OP_HOST_ALLOC, &m, sizeof(m), rep, sizeof(rep));
    if (r == CUDA_SUCCESS) { /* its memfd came on the socket first: taken, unused */
        uint8_t b;
        int fd = -1;
        if (chan_recv_fd(x->sock, &b, 1, &fd) >= 0 && fd >= 0) close(fd);
    }
    return r;
}

int raw_accounts(void)
{
    struct raw_session x[9];
    struct chan_ctx cx = {.id = 1, .device = 0, .primary = 1};
    for (int i = 0; i < 3; i++) {
        struct chan_hello h = raw_hello();
        snprintf(h.pinned_mem_limit, sizeof(h.pinned_mem_limit), "0=4M");
        if (raw_session_open_hello(&x[i], &h) != 0) {
            fprintf(stderr, "connection %d refused\n", i);
            return 1;
        }
        if (raw_request(&x[i], CHAN_OP_CTX_CREATE, &cx, sizeof(cx), NULL, 0) != CUDA_SUCCESS) {
            fprintf(stderr, "no context in connection %d\n", i);
            return 1;
        }
    }
    CUdeviceptr d;
    raw_expect("3 MiB in connection 1 (limit 4M)", acct_alloc(&x[0], 3u << 20, &d), CUDA_SUCCESS);
    raw_expect("3 MiB more in connection 2", acct_alloc(&x[1], 3u << 20, &d),
               CUDA_ERROR_OUT_OF_MEMORY);
    raw_expect("1 MiB in connection 3", acct_alloc(&x[2], 1u << 20, &d), CUDA_SUCCESS);
    raw_expect("1 byte more in connection 2", acct_alloc(&x[1], 1, &d), CUDA_ERROR_OUT_OF_MEMORY);
    /* Pinned memory is mapped in 2 MiB steps. */
    raw_expect("2 MiB pinned in connection 1 (cap 4 MiB)", acct_pinned(&x[0], 2u << 20),
               CUDA_SUCCESS);
    raw_expect("4 MiB pinned more in connection 2", acct_pinned(&x[1], 4u << 20),
               CUDA_ERROR_OUT_OF_MEMORY);
    raw_expect("2 MiB pinned in connection 3", acct_pinned(&x[2], 2u << 20), CUDA_SUCCESS);
    raw_expect("1 byte pinned more in connection 2", acct_pinned(&x[1], 1),
               CUDA_ERROR_OUT_OF_MEMORY);
    /* Records: events until the cap, from the three connections in turn. */
    unsigned made = 0;
    CUevent last = NULL;
    CUresult r = CUDA_SUCCESS;
    for (int i = 0; i < 1000 && r == CUDA_SUCCESS; i++) {
        CUevent e = NULL, *pe = &e;
        unsigned fl = 0;
        const void *a[] = {&pe, &fl};
        r = raw_call(&x[i % 3], SHIM_ID_cuEventCreate, a, &e, sizeof(e));
        if (r == CUDA_SUCCESS) {
            made++;
            last = e;
        }
    }
    printf("%-58s %u made, then %d\n", "events across 3 connections (cap 300 records)", made,
           (int)r);
    raw_failures += !(made > 200 && made < 300 && r == CUDA_ERROR_OUT_OF_MEMORY);
    {
        int who = (int)((made - 1) % 3);
        const void *a[] = {&last};
        raw_expect("one destroyed", raw_call(&x[who], SHIM_ID_cuEventDestroy_v2, a, NULL, 0),
                   CUDA_SUCCESS);
        CUevent e = NULL, *pe = &e;
        unsigned fl = 0;
        const void *b[] = {&pe, &fl};
        raw_expect("then one more made", raw_call(&x[0], SHIM_ID_cuEventCreate, b, &e, sizeof(e)),
                   CUDA_SUCCESS);
        raw_expect("and no further one", raw_call(&x[1], SHIM_ID_cuEventCreate, b, &e, sizeof(e)),
                   CUDA_ERROR_OUT_OF_MEMORY);
    }
    /* Connections: 8 at once at most. */
    int open_ok = 3;
    for (int i = 3; i < 9; i++) {
        x[i].sock = raw_dial();
        struct chan_hello h = raw_hello();
        struct chan_welcome w;
        int fd = -1;
        int ok = send(x[i].sock, &h, sizeof(h), 0) == sizeof(h) &&
                 raw_recv_welcome(x[i].sock, &w, &fd) == 0 && w.status == CHAN_WELCOME_OK;
        if (fd >= 0) close(fd);
        open_ok += ok;
    }
    printf("%-58s %d\n", "connections of one process taken (of 9)", open_ok);
    raw_failures += open_ok != 8;
    printf("%s\n", raw_failures ? "FAIL accounts" : "PASS accounts");
    return raw_failures != 0;
}
