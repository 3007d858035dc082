/* See mpi.h. The ranks of one job share a file ($FAKEMPI_DIR/shm, made by bench/fakempi/mpirun)
 * mapped in each: an arrival counter for barriers and one 8-byte slot per rank for
 * reductions. Rank and size come from $FAKEMPI_RANK and $FAKEMPI_SIZE. Any failure ends the
 * rank (exit 1), which ends the job: this only runs the bench's own program. */
#define _GNU_SOURCE
#include "mpi.h"

#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define FAKEMPI_MAX 256

struct fakempi_shm {
    _Atomic uint64_t arrived;
    uint64_t slot[FAKEMPI_MAX];
};

static struct fakempi_shm *shm;
static int me, ranks;
static uint64_t rounds; /* barriers this rank has passed */

static void die(const char *what)
{
    printf("FAIL fakempi: rank %d: %s\n", me, what);
    fflush(stdout);
    exit(1);
}

int MPI_Init(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    const char *dir = getenv("FAKEMPI_DIR"), *r = getenv("FAKEMPI_RANK"),
               *n = getenv("FAKEMPI_SIZE");
    if (!dir || !r || !n) die("FAKEMPI_DIR, FAKEMPI_RANK or FAKEMPI_SIZE unset (use its mpirun)");
    me = atoi(r);
    ranks = atoi(n);
    if (ranks < 1 || ranks > FAKEMPI_MAX || me < 0 || me >= ranks) die("bad rank or size");
    char path[4096];
    snprintf(path, sizeof path, "%s/shm", dir);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) die("cannot open $FAKEMPI_DIR/shm");
    void *m = mmap(NULL, sizeof *shm, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) die("cannot map $FAKEMPI_DIR/shm");
    shm = m;
    return 0;
}

int MPI_Comm_rank(MPI_Comm comm, int *rank)
{
    (void)comm;
    *rank = me;
    return 0;
}

int MPI_Comm_size(MPI_Comm comm, int *size)
{
    (void)comm;
    *size = ranks;
    return 0;
}

/* Round k ends when k * ranks arrivals are counted; waiters sleep 20 us between looks. */
int MPI_Barrier(MPI_Comm comm)
{
    (void)comm;
    uint64_t want = ++rounds * (uint64_t)ranks;
    atomic_fetch_add(&shm->arrived, 1);
    for (long i = 0; atomic_load(&shm->arrived) < want; i++) {
        if (i > 3000000) die("barrier: the other ranks did not come in 60 s");
        struct timespec ts = {.tv_nsec = 20000};
        nanosleep(&ts, NULL);
    }
    return 0;
}

/* Every rank's value of one element into `out`: slots written, a barrier, all read, a
 * barrier (so that no slot is written again before every rank read it). */
static int reduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op)
{
    if (count != 1 || (type != MPI_DOUBLE && type != MPI_UNSIGNED_LONG_LONG) ||
        (op != MPI_MAX && op != MPI_SUM))
        die("reduce: only one double or unsigned long long, MPI_MAX or MPI_SUM");
    memcpy(&shm->slot[me], in, 8);
    MPI_Barrier(MPI_COMM_WORLD);
    double d = 0;
    unsigned long long u = 0;
    for (int i = 0; i < ranks; i++) {
        double dv;
        unsigned long long uv;
        memcpy(&dv, &shm->slot[i], 8);
        memcpy(&uv, &shm->slot[i], 8);
        if (op == MPI_SUM) {
            d += dv;
            u += uv;
        } else {
            d = i == 0 || dv > d ? dv : d;
            u = i == 0 || uv > u ? uv : u;
        }
    }
    if (out) {
        if (type == MPI_DOUBLE)
            memcpy(out, &d, 8);
        else
            memcpy(out, &u, 8);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    return 0;
}

int MPI_Reduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, int root,
               MPI_Comm comm)
{
    (void)comm;
    return reduce(in, me == root ? out : NULL, count, type, op);
}

int MPI_Allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, MPI_Comm comm)
{
    (void)comm;
    return reduce(in, out, count, type, op);
}

int MPI_Finalize(void)
{
    return 0;
}
