// Exact log-normal paths from independent normals (cva/market/model.py, BlackScholes.paths; its numpy
// twin mixes the normals by a matrix product and takes the cumsum):
//   w[o, m, i, a] = sum_l z[o, m, i, l] * mix[a, l]   (l = 0 .. k - 1 in order; with mixed = 0, w = z[.., a])
//   S[o, m, j, a] = start[o, a] * exp( sum_{i <= j} ( w[o, m, i, a] * scale[a] * sqrt_h[i] + drift[i, a] ) )
// mix (d, k) is the correlation factor (or the factor loading) times the vols, and scale is then 1; for
// independent assets scale is the vols. One thread per (outer, inner, asset) runs the cumulative sum along the
// T steps in registers (the numpy cumsum along a middle axis was 90 % of the inner-path time on an H100), and
// mixes the normals itself in a fixed order: a batched matrix product (cuBLAS) chose its kernels, and so the
// rounding of the correlated normals, by the batch size, so paths depended on the chunk size in their last bits.

template <typename T> __device__ __forceinline__ T exp_(T x);
template <> __device__ __forceinline__ float exp_<float>(float x) { return expf(x); }
template <> __device__ __forceinline__ double exp_<double>(double x) { return exp(x); }

template <typename T>
__global__ void lognormal_paths(T* __restrict__ S, const T* __restrict__ z, const T* __restrict__ start,
                                const T* __restrict__ scale, const T* __restrict__ mix, const T* __restrict__ sqrt_h,
                                const T* __restrict__ drift, unsigned long long n_outer, unsigned long long n_inner,
                                int n_steps, int d, int k, int mixed)
{
    const unsigned long long total = n_outer * n_inner * d;
    const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
    for (unsigned long long t = static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x; t < total;
         t += stride) {
        const int a = static_cast<int>(t % d);
        const unsigned long long path = t / d;                        // o * n_inner + m
        const unsigned long long o = path / n_inner;
        const T s0 = start[o * d + a], sc = scale[a];
        const unsigned long long base = path * n_steps * d + a;
        const unsigned long long zbase = path * n_steps * k;
        T acc = 0;
        for (int j = 0; j < n_steps; ++j) {
            const T* zj = z + zbase + static_cast<unsigned long long>(j) * k;
            T w;
            if (mixed) {
                const T* row = mix + static_cast<long long>(a) * k;
                w = zj[0] * row[0];
                for (int l = 1; l < k; ++l)
                    w += zj[l] * row[l];
            } else {
                w = zj[a];
            }
            const unsigned long long i = base + static_cast<unsigned long long>(j) * d;
            acc += w * sc * sqrt_h[j] + drift[j * d + a];
            S[i] = s0 * exp_<T>(acc);
        }
    }
}
