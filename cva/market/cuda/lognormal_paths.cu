// Exact log-normal paths from correlated normals (cva/market/model.py, BlackScholes.paths; its numpy
// twin is the cumsum form there):
//   S[o, m, j, a] = start[o, a] * exp( sum_{i <= j} ( w[o, m, i, a] * scale[a] * sqrt_h[i] + drift[i, a] ) )
// w (n_outer, n_inner, T, d) are the normals already mixed by the correlation factor (or raw
// normals with scale = vol for independent assets). One thread per (outer, inner, asset) runs
// the cumulative sum along the T steps in registers: the numpy cumsum along a middle axis was
// 90 % of the inner-path time on an H100 (144 ms of 163 ms for 2048 x 1024 x 9 x 29 float32).

template <typename T> __device__ __forceinline__ T exp_(T x);
template <> __device__ __forceinline__ float exp_<float>(float x) { return expf(x); }
template <> __device__ __forceinline__ double exp_<double>(double x) { return exp(x); }

template <typename T>
__global__ void lognormal_paths(T* __restrict__ S, const T* __restrict__ w, const T* __restrict__ start,
                                const T* __restrict__ scale, const T* __restrict__ sqrt_h,
                                const T* __restrict__ drift, unsigned long long n_outer, unsigned long long n_inner,
                                int n_steps, int d)
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
        T acc = 0;
        for (int j = 0; j < n_steps; ++j) {
            const unsigned long long k = base + static_cast<unsigned long long>(j) * d;
            acc += w[k] * sc * sqrt_h[j] + drift[j * d + a];
            S[k] = s0 * exp_<T>(acc);
        }
    }
}
