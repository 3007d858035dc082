/* Unit tests of the channel: the request ring across two processes (order, wrap-around,
 * pads, back-pressure), lanes, the staging plan, image sizes, and generic marshalling. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <elf.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "channel/chan.h"
#include "channel/copyplan.h"
#include "channel/image.h"
#include "channel/marshal.h"
#include "channel/procstat.h"
#include "channel/slice.h"

#include "tests/unit/check.h"

static const struct chan_wait spin = {.spin_ns = 1000000};

/* A child process produces records of varying sizes; the parent checks every byte. */
static void test_ring_processes(void)
{
    size_t size = chan_segment_size();
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED);
    struct chan c;
    chan_attach(&c, base);
    chan_init_header(&c);
    const int n = 20000;
    pid_t pid = fork();
    if (pid == 0) {
        struct chan p;
        chan_attach(&p, base);
        for (int i = 0; i < n; i++) {
            uint32_t len = 8 + (uint32_t)((i * 7919) % 60000);
            struct chan_rec *r = chan_ring_reserve(&p, (uint32_t)sizeof(*r) + len, &spin);
            if (!r) _exit(2);
            r->op = (uint16_t)(i & 0x7fff);
            r->ctx = (uint32_t)i;
            uint8_t *d = (uint8_t *)(r + 1);
            for (uint32_t k = 0; k < len; k++)
                d[k] = (uint8_t)(i + k);
            chan_ring_publish(&p, r);
        }
        _exit(0);
    }
    uint8_t *buf = malloc(CHAN_REC_MAX);
    int got = 0, bad = 0;
    while (got < n) {
        enum chan_next r = chan_ring_next(&c, buf);
        if (r == CHAN_NEXT_BAD) {
            bad++;
            break;
        }
        if (r == CHAN_NEXT_NONE) {
            chan_ring_sleep(&c, 1000000);
            continue;
        }
        struct chan_rec *rec = (struct chan_rec *)buf;
        uint32_t len = 8 + (uint32_t)((got * 7919) % 60000);
        if (rec->ctx != (uint32_t)got || rec->size < sizeof(*rec) + len) bad++;
        uint8_t *d = (uint8_t *)(rec + 1);
        for (uint32_t k = 0; k < len && !bad; k++)
            if (d[k] != (uint8_t)(got + k)) bad++;
        got++;
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    CHECK(bad == 0);
    CHECK(got == n);
    CHECK(!chan_ring_pending(&c));
    free(buf);
    munmap(base, size);
}

/* A fresh segment of chan_segment_size() bytes, with a producer and a consumer on it. */
static void *segment_pair(struct chan *prod, struct chan *cons)
{
    void *base =
        mmap(NULL, chan_segment_size(), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(base != MAP_FAILED);
    chan_attach(prod, base);
    chan_attach(cons, base);
    chan_init_header(prod);
    return base;
}

/* A record whose header lies about its size is refused, never followed. */
static void test_ring_rejects_garbage(void)
{
    size_t size = chan_segment_size();
    struct chan prod, cons;
    void *base = segment_pair(&prod, &cons);
    struct chan_rec *r = chan_ring_reserve(&prod, 64, &spin);
    chan_ring_publish(&prod, r);
    r->size = 0x7fffffff; /* forged after publishing */
    uint8_t *buf = malloc(CHAN_REC_MAX);
    CHECK(chan_ring_next(&cons, buf) == CHAN_NEXT_BAD);
    /* A tail that jumps beyond the ring is refused too. */
    atomic_store(&prod.shm->tail, (uint64_t)CHAN_RING_SIZE * 4);
    CHECK(chan_ring_next(&cons, buf) == CHAN_NEXT_BAD);
    free(buf);
    munmap(base, size);
}

/* Publishes one record of op with flags and says whether it rang. */
static int rang_flags(struct chan *prod, uint16_t op, uint16_t flags)
{
    uint32_t bell = atomic_load(&prod->shm->doorbell);
    struct chan_rec *r = chan_ring_reserve(prod, 64, &spin);
    r->op = op;
    r->flags = flags;
    chan_ring_publish(prod, r);
    return atomic_load(&prod->shm->doorbell) != bell;
}

/* Publishes one record of op (CHAN_RF_REPLY if reply) and says whether it rang. */
static int rang(struct chan *prod, uint16_t op, int reply)
{
    return rang_flags(prod, op, reply ? CHAN_RF_REPLY : 0);
}

/* Doorbell coalescing (proto.h, chan_shm.coalesce_us): while the server sleeps and lets
 * records wait, launches, copies marked as work for the GPU alone (CHAN_RF_GPU_WORK) and
 * generic calls that ask for no reply go unrung, up to
 * CHAN_COALESCE_MAX of them and no longer than the bound; a record that waits, or any other
 * operation, rings for them all; a server awake is never rung; without the hint every
 * record rings. */
static void test_coalescing(void)
{
    size_t size = chan_segment_size();
    struct chan prod, cons;
    void *base = segment_pair(&prod, &cons);
    uint8_t *buf = malloc(CHAN_REC_MAX);
    atomic_store(&prod.shm->server_sleeping, 1);
    CHECK(rang(&prod, CHAN_OP_LAUNCH, 0));         /* no hint: every record rings */
    atomic_store(&prod.shm->coalesce_us, 1000000); /* 1 s */
    CHECK(!rang(&prod, CHAN_OP_LAUNCH, 0));
    CHECK(!rang(&prod, 5, 0)); /* a generic call without a reply */
    CHECK(rang(&prod, 5, 1));  /* one that waits rings */
    CHECK(!rang(&prod, CHAN_OP_LAUNCH, 0));
    CHECK(!rang_flags(&prod, CHAN_OP_COPY, CHAN_RF_GPU_WORK)); /* a copy in place waits */
    CHECK(rang_flags(&prod, CHAN_OP_COPY, CHAN_RF_GPU_WORK | CHAN_RF_REPLY)); /* unless waited on */
    CHECK(rang(&prod, CHAN_OP_COPY, 0));      /* a copy through the slots, */
    CHECK(rang(&prod, CHAN_OP_HOST_FUNC, 0)); /* a host function, */
    CHECK(rang(&prod, CHAN_OP_BLOB, 0));      /* an image's bytes ring at once */
    unsigned n = 0;
    while (!rang(&prod, CHAN_OP_LAUNCH, 0) && n < 1000)
        n++;
    CHECK(n == CHAN_COALESCE_MAX);              /* the next past the bound rings */
    atomic_store(&prod.shm->coalesce_us, 1000); /* 1 ms */
    CHECK(!rang(&prod, CHAN_OP_LAUNCH, 0));
    usleep(3000);
    CHECK(rang(&prod, CHAN_OP_LAUNCH, 0)); /* the first one waited past the bound */
    atomic_store(&prod.shm->server_sleeping, 0);
    CHECK(!rang(&prod, CHAN_OP_LAUNCH, 0)); /* awake: never rung */
    atomic_store(&prod.shm->server_sleeping, 1);
    CHECK(!rang(&prod, CHAN_OP_LAUNCH, 0)); /* a fresh count after the server woke */
    /* Every record reaches the consumer in order, rung or not. */
    unsigned got = 0;
    while (chan_ring_next(&cons, buf) == CHAN_NEXT_REC)
        got++;
    CHECK(got == 1 + 9 + CHAN_COALESCE_MAX + 1 + 2 + 2);
    /* A full ring rings before its producer waits for space, whatever the hint. */
    atomic_store(&prod.shm->coalesce_us, 1000000);
    CHECK(!rang(&prod, CHAN_OP_LAUNCH, 0));
    uint32_t bell = atomic_load(&prod.shm->doorbell); /* before the child can be rung */
    pid_t pid = fork();
    if (pid == 0) {
        struct chan s;
        chan_attach(&s, base);
        s.pos = cons.pos;
        while (atomic_load(&s.shm->doorbell) == bell)
            usleep(100);
        while (chan_ring_next(&s, buf) == CHAN_NEXT_REC) /* drains as a woken server would */
            ;
        _exit(0);
    }
    /* Records so big that the ring fills before CHAN_COALESCE_MAX of them would ring. */
    _Static_assert(CHAN_RING_SIZE / 60000 < CHAN_COALESCE_MAX, "the ring fills first");
    for (unsigned i = 0; i < 2 * CHAN_RING_SIZE / 60000; i++) {
        struct chan_rec *r = chan_ring_reserve(&prod, 60000, &spin);
        CHECK(r != NULL);
        r->op = CHAN_OP_LAUNCH;
        chan_ring_publish(&prod, r);
        if (atomic_load(&prod.shm->head) != cons.pos) break; /* the child was rung and drained */
    }
    int st;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    free(buf);
    munmap(base, size);
}

static void test_lanes(void)
{
    size_t size = chan_segment_size();
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct chan c;
    chan_attach(&c, base);
    uint32_t seq0 = atomic_load(&c.lanes[3].seq);
    pid_t pid = fork();
    if (pid == 0) {
        struct chan s;
        chan_attach(&s, base);
        usleep(20000); /* the parent is asleep on the futex by now */
        memcpy(s.lanes[3].data, "hello", 6);
        chan_lane_post(&s, 3, CUDA_ERROR_NOT_READY, 6);
        _exit(0);
    }
    struct chan_wait w = {.spin_ns = 1000};
    CHECK(chan_lane_wait(&c, 3, seq0, &w) == 0);
    CHECK(c.lanes[3].result == CUDA_ERROR_NOT_READY);
    CHECK(c.lanes[3].len == 6 && strcmp((char *)c.lanes[3].data, "hello") == 0);
    waitpid(pid, NULL, 0);
    munmap(base, size);
}

/* A reply the GPU posts (proto.h, chan_lane.gpu_seq): a waiter told so keeps spinning past
 * its spin (its nudge, rung when it stops spinning for such a reply, is not called), and one
 * whose extension runs out nudges the worker once, then sleeps until the post. The post
 * stores the server's own number (chan_lane_post_at), whatever the lane holds. */
static int nudges;
static void count_nudge(void *arg)
{
    (void)arg;
    nudges++;
}

static void test_gpu_replies(void)
{
    size_t size = chan_segment_size();
    void *base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    struct chan c;
    chan_attach(&c, base);
    struct chan_lane *l = &c.lanes[5];
    for (int round = 0; round < 3; round++) {
        /* 0: told to spin 1 s, posted after 30 ms; 1: told to spin 5 ms, posted after
         * 60 ms; 2: not told (gpu_seq is another number), posted after 30 ms. */
        uint32_t seq0 = atomic_load(&l->seq);
        atomic_store(&l->gpu_seq, round == 2 ? seq0 + 7 : seq0 + 1);
        pid_t pid = fork();
        if (pid == 0) {
            struct chan s;
            chan_attach(&s, base);
            usleep(round == 1 ? 60000 : 30000);
            chan_lane_post_at(&s, 5, CUDA_SUCCESS, 0, seq0 + 1);
            _exit(0);
        }
        nudges = 0;
        struct chan_wait w = {.spin_ns = 1000,
                              .extend = &l->gpu_seq,
                              .extend_ns = round == 1 ? 5000000ull : 1000000000ull,
                              .nudge = count_nudge};
        CHECK(chan_wait_for(&l->seq, seq0 + 1, &l->waiting, &w) == 0);
        CHECK(atomic_load(&l->seq) == seq0 + 1);
        CHECK(nudges == (round == 1));
        CHECK(atomic_load(&l->waiting) == 0);
        waitpid(pid, NULL, 0);
    }
    /* The server's number is stored, not added to. */
    atomic_store(&l->seq, 100);
    chan_lane_post_at(&c, 5, CUDA_ERROR_NOT_READY, 0, 42);
    CHECK(atomic_load(&l->seq) == 42 && l->result == CUDA_ERROR_NOT_READY);
    munmap(base, size);
}

/* A short slice is asked for and given back (channel/slice.h); a kernel without custom
 * slices may refuse, which changes nothing. */
static void test_slice(void)
{
    struct chan_slice_saved a, b;
    int e = chan_slice_set(100000, &a);
    if (e != 0) {
        printf("(short slices: not on this kernel, error %d)\n", e);
        return;
    }
    CHECK(chan_slice_set(100000, &b) == 0 && !b.valid); /* already so: nothing to restore */
    chan_slice_restore(&a);
    CHECK(chan_slice_set(200000, &b) == 0);
    CHECK(!a.valid || (b.valid && b.runtime == a.runtime && b.nice == a.nice));
    chan_slice_restore(&b);
}

static int count_chunk(const struct chan_chunk *ch, void *arg)
{
    uint64_t *sum = arg;
    sum[0] += ch->nrows * ch->nbytes;
    sum[1]++;
    if (ch->nbytes * ch->nrows > 1000) sum[2]++;
    return 0;
}

static void test_copy_plan(void)
{
    uint64_t s[3] = {0, 0, 0};
    chan_copy_plan(10000, 1, 1, 1000, count_chunk, s);
    CHECK(s[0] == 10000 && s[1] == 10 && s[2] == 0);
    CHECK(chan_copy_nchunks(10000, 1, 1, 1000) == 10);
    memset(s, 0, sizeof(s));
    chan_copy_plan(300, 17, 3, 1000, count_chunk, s); /* 3 rows per chunk, per slice */
    CHECK(s[0] == 300 * 17 * 3 && s[2] == 0);
    CHECK(s[1] == chan_copy_nchunks(300, 17, 3, 1000) && s[1] == 3 * 6);
    memset(s, 0, sizeof(s));
    chan_copy_plan(2500, 2, 1, 1000, count_chunk, s); /* rows wider than a chunk */
    CHECK(s[0] == 5000 && s[1] == 6 && s[1] == chan_copy_nchunks(2500, 2, 1, 1000));
}

static void test_image_size(void)
{
    const char *ptx = ".version 8.0\n.target sm_90\n";
    CHECK(chan_image_size(ptx, 0) == strlen(ptx) + 1);
    CHECK(chan_image_size(ptx, strlen(ptx)) == 0); /* no NUL inside what was sent */
    uint8_t fat[64] = {0};
    uint32_t magic = CHAN_FATBIN_MAGIC;
    uint16_t hs = 16;
    uint64_t rest = 48;
    memcpy(fat, &magic, 4);
    memcpy(fat + 6, &hs, 2);
    memcpy(fat + 8, &rest, 8);
    CHECK(chan_image_size(fat, 0) == 64);
    CHECK(chan_image_size(fat, 64) == 64);
    CHECK(chan_image_size(fat, 63) == 0);
    rest = UINT64_MAX - 8; /* header_size + fat_size wraps to 7 */
    memcpy(fat + 8, &rest, 8);
    CHECK(chan_image_size(fat, 64) == 0 && chan_image_size(fat, 0) == 0);
    hs = 4; /* a header shorter than the header */
    rest = 60;
    memcpy(fat + 6, &hs, 2);
    memcpy(fat + 8, &rest, 8);
    CHECK(chan_image_size(fat, 64) == 0);

    /* ELF: a minimal valid image, then tables and sections whose ends wrap 64 bits. */
    union {
        uint8_t b[512];
        Elf64_Ehdr e;
    } elf;
    memset(&elf, 0, sizeof elf);
    memcpy(elf.b, ELFMAG, SELFMAG);
    elf.b[EI_CLASS] = ELFCLASS64;
    elf.e.e_shoff = 64;
    elf.e.e_shnum = 2;
    elf.e.e_shentsize = sizeof(Elf64_Shdr);
    Elf64_Shdr sh = {.sh_type = SHT_PROGBITS, .sh_offset = 192, .sh_size = 100};
    memcpy(elf.b + 64 + sizeof(Elf64_Shdr), &sh, sizeof sh);
    CHECK(chan_image_size(elf.b, sizeof elf.b) == 292);
    sh.sh_offset = UINT64_MAX - 50; /* offset + size wraps to 49 */
    memcpy(elf.b + 64 + sizeof(Elf64_Shdr), &sh, sizeof sh);
    CHECK(chan_image_size(elf.b, sizeof elf.b) == 0);
    sh.sh_offset = 192;
    memcpy(elf.b + 64 + sizeof(Elf64_Shdr), &sh, sizeof sh);
    elf.e.e_shoff = UINT64_MAX - 63; /* the section table's end wraps to 64 */
    elf.e.e_shnum = 2;
    CHECK(chan_image_size(elf.b, sizeof elf.b) == 0 && chan_image_size(elf.b, 0) == 0);
    elf.e.e_shoff = 64;
    elf.e.e_phoff = 8;
    elf.e.e_phnum = 0xffff;
    elf.e.e_phentsize = 0xffff; /* a program header table far beyond the image */
    CHECK(chan_image_size(elf.b, sizeof elf.b) == 0);
    elf.e.e_phoff = UINT64_MAX - 100; /* and one that wraps */
    elf.e.e_phnum = 1;
    elf.e.e_phentsize = 200;
    CHECK(chan_image_size(elf.b, sizeof elf.b) == 0);
}

/* Round trip of a generic call through its real descriptor. */
static void test_marshal(void)
{
    const struct shim_call *d = &shim_calls[SHIM_ID_cuDeviceGetHostAtomicCapabilities];
    CHECK(d->cls == SHIM_SYNC && d->nparams == 4);
    unsigned caps[3] = {0, 0, 0};
    CUatomicOperation ops[3] = {CU_ATOMIC_OPERATION_INTEGER_ADD, CU_ATOMIC_OPERATION_AND,
                                CU_ATOMIC_OPERATION_OR};
    unsigned *pcaps = caps, count = 3;
    const CUatomicOperation *pops = ops;
    CUdevice dev = 0;
    const void *argv[] = {&pcaps, &pops, &count, &dev};
    uint8_t buf[4096], out[4096];
    size_t rlen;
    CUresult err;
    size_t n = chan_pack_call(d, argv, buf, sizeof(buf), &rlen, &err);
    CHECK(n > 0 && err == CUDA_SUCCESS && rlen == 16);
    CHECK(chan_pack_call(d, argv, NULL, sizeof(buf), &rlen, &err) == n);
    struct chan_args a;
    CHECK(chan_unpack_call(d, buf, n, out, sizeof(out), &a) == CUDA_SUCCESS);
    CHECK(a.count[0] == 3 && a.count[1] == 3 && a.val[2] == 3 && a.val[3] == 0);
    CHECK(memcmp(a.ptr[1], ops, sizeof(ops)) == 0);
    ((unsigned *)a.ptr[0])[2] = 77; /* the "driver" answers */
    chan_unpack_reply(d, argv, out, a.out_len, NULL, 0);
    CHECK(caps[2] == 77);
    /* A count that does not match the buffer the request carries is refused. */
    memcpy(buf + 8 + 8 + 16, &(uint64_t){4}, 8); /* the count parameter */
    CHECK(chan_unpack_call(d, buf, n, out, sizeof(out), &a) != CUDA_SUCCESS);
    /* Truncated requests are refused. */
    CHECK(chan_unpack_call(d, buf, 12, out, sizeof(out), &a) != CUDA_SUCCESS);

    /* A count read from another argument's pointee (out:dependentNodes[*numDependentNodes]):
     * that argument sent with no element is refused before anything is read from it (it was
     * read past the reply area: fuzz_records, 2026-11-30); with one, the count must match. */
    d = &shim_calls[SHIM_ID_cuGraphNodeGetDependentNodes];
    CHECK(d->nparams == 3);
    uint8_t req[48];
    uint64_t node = 0x1234, two = 2;
    uint32_t nodes_hdr[2] = {1, 2}, none_hdr[2] = {1, 0}, one_hdr[2] = {1, 1};
    memcpy(req, &node, 8);
    memcpy(req + 8, nodes_hdr, 8);
    memcpy(req + 16, none_hdr, 8);
    CHECK(chan_unpack_call(d, req, 24, out, sizeof(out), &a) != CUDA_SUCCESS);
    memcpy(req + 16, one_hdr, 8);
    memcpy(req + 24, &two, 8);
    CHECK(chan_unpack_call(d, req, 32, out, sizeof(out), &a) == CUDA_SUCCESS);
    CHECK(a.count[1] == 2 && *(const uint64_t *)a.ptr[2] == 2);
    two = 3; /* a count the nodes' buffer does not have */
    memcpy(req + 24, &two, 8);
    CHECK(chan_unpack_call(d, req, 32, out, sizeof(out), &a) != CUDA_SUCCESS);
}

/* Every generic call can be replayed: no struct passed by value, pointer notes complete. */
static void test_descriptors(void)
{
    int generic = 0, derefs = 0;
    for (int i = 0; i < SHIM_NCALLS; i++) {
        const struct shim_call *d = &shim_calls[i];
        CHECK(d->name != NULL);
        if (d->cls != SHIM_SYNC && d->cls != SHIM_ASYNC) continue;
        generic++;
        for (int k = 0; k < d->nparams; k++) {
            const struct shim_param *p = &d->params[k];
            if (p->kind == SHIM_PK_VAL && p->vclass == SHIM_VC_STRUCT) {
                fprintf(stderr, "%s passes a struct by value\n", d->name);
                failures++;
            }
            /* A count read from another argument's pointee (chan_unpack_call refuses any
             * other element size): an integer the client always sends one of. */
            if (p->ckind == SHIM_CK_DEREF) {
                derefs++;
                const struct shim_param *cp = &d->params[p->count_arg];
                uint32_t e = cp->elem;
                int ptr =
                    cp->kind == SHIM_PK_IN || cp->kind == SHIM_PK_OUT || cp->kind == SHIM_PK_INOUT;
                if (!ptr || (e != 1 && e != 2 && e != 4 && e != 8)) {
                    fprintf(stderr,
                            "%s: parameter %d counted by parameter %d (kind %d, %u bytes)\n",
                            d->name, k, p->count_arg, cp->kind, e);
                    failures++;
                }
            }
        }
        /* An async call is enqueued on its stream, or (via:) as another call on the
         * caller's default stream. */
        if (d->cls == SHIM_ASYNC) CHECK(d->stream >= 0 || d->target != 0);
    }
    CHECK(generic > 50 && derefs > 0);
}

/* /proc/PID/stat fields: a command name with spaces and parentheses, a text too short, and
 * this process's own file read twice through one descriptor. */
static void test_procstat(void)
{
    const char *stat = "42 (a) b) (c) S 1 42 42 0 -1 4194560 5 0 0 0 0 0 0 0 20 0 3 0 777 0";
    CHECK(chan_stat_field(stat, 3) && chan_stat_field(stat, 3)[0] == 'S');
    CHECK(chan_stat_field(stat, 20) && atoi(chan_stat_field(stat, 20)) == 3);
    CHECK(chan_stat_field(stat, 22) && atoi(chan_stat_field(stat, 22)) == 777);
    CHECK(!chan_stat_field("42 (x) S 1", 20));
    CHECK(!chan_stat_field("no parenthesis", 3));
    int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
    CHECK(fd >= 0);
    CHECK(chan_stat_read(fd, 20) == 1); /* one thread: this test starts none */
    CHECK(chan_stat_read(fd, 20) == 1); /* read again from the start */
    CHECK(chan_stat_read(fd, 22) > 0);
    CHECK(chan_stat_read(fd, 200) == -1);
    close(fd);
    CHECK(chan_stat_read(-1, 20) == -1);
}

int main(void)
{
    test_ring_processes();
    test_ring_rejects_garbage();
    test_coalescing();
    test_lanes();
    test_gpu_replies();
    test_slice();
    test_copy_plan();
    test_image_size();
    test_marshal();
    test_descriptors();
    test_procstat();
    if (failures) {
        printf("FAIL channel_test: %d checks failed\n", failures);
        return 1;
    }
    printf("PASS channel_test\n");
    return 0;
}
