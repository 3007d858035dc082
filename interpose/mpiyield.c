/* MPI ranks that give their CPU away while they poll.
 *
 * Why: an MPI job runs a rank per CPU, and a rank waiting in MPI (a barrier, a receive) polls,
 * holding its CPU. Under native MPS that costs nothing more: each rank launches its own work.
 * Through mpsshim a rank's synchronisations and launches are carried out by a server thread,
 * which then needs a CPU that a polling rank holds: at every synchronize + barrier of a cold
 * 16-rank job on 16 CPUs the GPU stood idle for 0.8-4 ms while those threads waited for one
 * (bench/results/issue29-2026-11-28/README.md). Open MPI's own remedy for a machine with more
 * runnable threads than CPUs is to yield the CPU in its idle polling loop
 * (mpi_yield_when_idle), which it turns on by itself only when it knows the node is
 * oversubscribed; it cannot know that the server's threads share the CPUs. With it, the cold
 * 16-rank job ran in MPS's time on an H200 (bench/NOTES.md, "MPI ranks that yield").
 *
 * How: before main (and so before MPI_Init reads its parameters), a process that Open MPI's
 * launcher or a PMIx/PMI launcher started as a rank gets OMPI_MCA_mpi_yield_when_idle=1 in
 * its environment, unless the variable is set already (the user's choice wins) or
 * MPSSHIM_MPI_YIELD=0. A rank's yield costs a system call per idle poll when nothing else
 * wants the CPU. Other MPIs do not read the variable; nothing else is changed. */
#include "interpose/shim.h"
#include "channel/settings.h"

#include <stdlib.h>

__attribute__((constructor)) static void mpi_ranks_yield(void)
{
    /* Set for its ranks by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), or by a PMIx (srun
     * --mpi=pmix, prterun) or PMI launcher. */
    int on = (int)chan_setting_num(CHAN_SET_MPI_YIELD); /* read always: a bad value is said */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_RANK")) return;
    if (!on || getenv("OMPI_MCA_mpi_yield_when_idle")) return;
    /* Before main: no other thread of the program reads the environment yet. */
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
}
