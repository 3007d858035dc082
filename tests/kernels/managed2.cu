// A second module of __managed__ variables for tests/cudart/managed_vars.cu (another
// translation unit is another module), with kernel names of its own. CPU twins:
// tests/cpudrv/twins.c.

__managed__ long long mv2_total; // what mv2_accumulate added up
__managed__ int mv2_scale = 3;   // its initial value comes from the image

// mv2_total += mv2_scale * (in[0] + ... + in[n - 1]), by one thread.
extern "C" __global__ void mv2_accumulate(const unsigned int *in, int n)
{
    if (blockIdx.x != 0 || threadIdx.x != 0) return;
    long long s = 0;
    for (int i = 0; i < n; i++)
        s += in[i];
    mv2_total += s * mv2_scale;
}

// The variables for another translation unit's host code (tests/cudart/managed_vars.cu):
// without relocatable device code a __managed__ variable is its own module's alone, and an
// extern declaration elsewhere would be a variable of that other module.
long long *mv2_total_at(void)
{
    return &mv2_total;
}

int *mv2_scale_at(void)
{
    return &mv2_scale;
}
