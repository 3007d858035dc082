/* The few MPI calls bench/mpi_steps.c makes, for bench/fakempi/fakempi.c: a stand-in of MPI
 * on one machine, so that bench/run.sh's MPI families run on the CPU test driver where no MPI
 * is installed (MPSSHIM_BENCH_CPU=1; bench/fakempi/mpirun starts the ranks). Not an MPI: one
 * communicator, two types, two operations, no messages. */
#ifndef MPSSHIM_BENCH_FAKEMPI_H
#define MPSSHIM_BENCH_FAKEMPI_H

typedef int MPI_Comm;
typedef int MPI_Datatype;
typedef int MPI_Op;

#define MPI_COMM_WORLD 0
#define MPI_DOUBLE 1
#define MPI_UNSIGNED_LONG_LONG 2
#define MPI_MAX 1
#define MPI_SUM 2

int MPI_Init(int *argc, char ***argv);
int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Barrier(MPI_Comm comm);
int MPI_Reduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op, int root,
               MPI_Comm comm);
int MPI_Allreduce(const void *in, void *out, int count, MPI_Datatype type, MPI_Op op,
                  MPI_Comm comm);
int MPI_Finalize(void);

#endif
