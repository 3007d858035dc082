// Kernels that set the value of a conditional node's handle (CUDA graph conditional nodes:
// tests/progs/graph_cond.c, tests/cudart/graph_cond.cu). A module of their own, so that the
// function counts other tests check of kernels.ptx stay as they are.
//
// cudaGraphSetConditional is a __cudart_builtin__ device function: ptxas resolves it, so
// these build without -rdc. CPU twins: tests/cpudrv/twins.c. Change both together.

// Sets h to *value (one thread; the value is read from device memory, so a graph's launches
// can take different branches without an update).
extern "C" __global__ void set_cond(cudaGraphConditionalHandle h, const unsigned int *value)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, *value);
}

// A WHILE loop's counter: takes one from *counter (while it is not 0) and sets h to whether
// anything is left, so the loop runs its body *counter times (at least once).
extern "C" __global__ void countdown(cudaGraphConditionalHandle h, unsigned int *counter)
{
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        unsigned int c = *counter;
        if (c) c--;
        *counter = c;
        cudaGraphSetConditional(h, c != 0);
    }
}
