// Kernels over texture and surface objects (tests/progs/texsurf.c, tests/cudart/texture.cu).
// CPU twins: tests/cpudrv/twins.c, with texture access from tests/cpudrv/texture.c, which
// models point sampling with unnormalized coordinates, clamp addressing and 1-channel float
// data only. Every value the tests use is a small integer, so float sums are exact.

// 2D 5-point stencil: out(x, y) = left + right + up + down - 4 * centre, read through a
// texture (clamped at the edges) and written through a surface. Texel centres are at
// (x + 0.5, y + 0.5) in unnormalized coordinates.
extern "C" __global__ void tex_stencil(cudaTextureObject_t src, cudaSurfaceObject_t dst, int w,
                                       int h)
{
    int x = blockIdx.x * blockDim.x + threadIdx.x;
    int y = blockIdx.y * blockDim.y + threadIdx.y;
    if (x >= w || y >= h) return;
    float fx = x + 0.5f, fy = y + 0.5f;
    float c = tex2D<float>(src, fx, fy);
    float l = tex2D<float>(src, fx - 1.0f, fy);
    float r = tex2D<float>(src, fx + 1.0f, fy);
    float u = tex2D<float>(src, fx, fy - 1.0f);
    float d = tex2D<float>(src, fx, fy + 1.0f);
    surf2Dwrite(l + r + u + d - 4.0f * c, dst, x * (int)sizeof(float), y);
}

// out[i] = 2 * element i of a linear texture (tex1Dfetch: 0 outside it).
extern "C" __global__ void tex_fetch_double(cudaTextureObject_t src, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = 2.0f * tex1Dfetch<float>(src, i);
}
