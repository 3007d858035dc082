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
 * its environment, unless the variable is set already (the user's choice wins),
 * MPSSHIM_MPI_YIELD=0, or the shim was loaded after the process started threads. A rank's
 * yield costs a system call per idle poll when nothing else wants the CPU. Other MPIs do not
 * read the variable; nothing else is changed. */
#include "interpose/shim.h"
#include "channel/settings.h"

#include <dirent.h>
#include <stdlib.h>

/* 1 when this process has one thread: setenv is then safe (another thread's getenv may read
 * the environment while setenv changes it). */
static int one_thread(void)
{
    DIR *d = opendir("/proc/self/task");
    if (!d) return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(d)) != NULL && n < 2;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n == 1;
}

__attribute__((constructor)) static void mpi_ranks_yield(void)
{
    /* Set for its ranks by Open MPI's mpirun (OMPI_COMM_WORLD_SIZE), or by a PMIx (srun
     * --mpi=pmix, prterun) or PMI launcher. */
    int on = (int)chan_setting_num(CHAN_SET_MPI_YIELD); /* read always: a bad value is said */
    if (!getenv("OMPI_COMM_WORLD_SIZE") && !getenv("PMIX_RANK") && !getenv("PMI_RANK")) return;
    if (!on || getenv("OMPI_MCA_mpi_yield_when_idle")) return;
    /* Preloaded, this runs before main, on the only thread. Loaded later (found as
     * libcuda.so.1 and opened by the CUDA runtime, perhaps after MPI_Init has started MPI's
     * own threads), it changes nothing: the variable would come too late, and setenv beside
     * another thread's getenv is not safe. */
    if (!one_thread()) return;
    setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
}
