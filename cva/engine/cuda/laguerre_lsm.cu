// The Longstaff-Schwartz regression with the weighted Laguerre basis of one asset (cva/engine/basis.py),
// psi = (1, L0(x), L1(x), L2(x)[, h c]), x = S / scale, L0 = e^{-x/2}, L1 = L0 (1 - x), L2 = L0 (1 - 2x + x^2/2),
// evaluated from the date's prices where they lie instead of formed as a (B, M, P) array (numpy twins:
// cva.engine.basis.evaluate with cva.engine.lsm._normal_equations, and psi @ beta).
//
// laguerre_normal_equations: one block per set s of M paths, A = (1/M) sum_m w_m psi_m psi_m^T and
// b = (1/M) sum_m w_m psi_m v_m (w_m = mask or 1); A = I, b = 0 for a set with no regression path. Each thread
// sums its paths in order, then the warps' sums by shuffles and the block's in a fixed order: the same bits
// whatever the number of sets.
// laguerre_fitted: psi_m beta_s, one thread per path.
// S is read with a set stride and a path stride (a date's slice of the paths); h, v and mask are (B, M)
// contiguous.

template <typename T, int P>
__device__ __forceinline__ void laguerre_psi(T x, T hc, T (&psi)[P])
{
    const T w = exp(T(-0.5) * x);
    psi[0] = T(1);
    psi[1] = w;
    psi[2] = w * (T(1) - x);
    psi[3] = w * (T(1) - T(2) * x + T(0.5) * x * x);
    if constexpr (P == 5) psi[4] = hc;
}

template <typename T, int P>
__global__ void laguerre_normal_equations(const T* __restrict__ S, long long s_set, long long s_path,
                                          const T* __restrict__ h, const T* __restrict__ v,
                                          const bool* __restrict__ mask, T inv_scale, T inv_c,
                                          T* __restrict__ A, T* __restrict__ b, int M, T inv_m)
{
    constexpr int NA = P * (P + 1) / 2, NS = NA + P + 1;          // A's lower triangle, b, the path count
    constexpr int WARPS = 8;                                      // blockDim.x == 32 * WARPS
    __shared__ T part[WARPS][NS];
    const long long s = blockIdx.x;
    T acc[NS];
    for (int q = 0; q < NS; ++q) acc[q] = T(0);
    for (int m = threadIdx.x; m < M; m += blockDim.x) {
        const long long i = s * M + m;
        if (mask != nullptr && !mask[i]) continue;
        T psi[P];
        laguerre_psi<T, P>(S[s * s_set + m * s_path] * inv_scale, h[i] * inv_c, psi);
        const T vi = v[i];
        int q = 0;
        for (int r = 0; r < P; ++r)
            for (int c = 0; c <= r; ++c) acc[q++] += psi[r] * psi[c];
        for (int r = 0; r < P; ++r) acc[NA + r] += psi[r] * vi;
        acc[NS - 1] += T(1);
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int q = 0; q < NS; ++q) {
        T x = acc[q];
        for (int off = 16; off > 0; off >>= 1) x += __shfl_down_sync(0xffffffffu, x, off);
        if (lane == 0) part[warp][q] = x;
    }
    __syncthreads();
    if (threadIdx.x < NS) {
        const int q = threadIdx.x;
        T x = T(0);
        for (int w = 0; w < WARPS; ++w) x += part[w][q];
        part[0][q] = x;
    }
    __syncthreads();
    const bool empty = part[0][NS - 1] == T(0);
    for (int q = threadIdx.x; q < P * P + P; q += blockDim.x) {
        if (q < P * P) {
            const int r = q / P, c = q % P, hi = r > c ? r : c, lo = r > c ? c : r;
            A[s * P * P + q] = empty ? T(r == c) : part[0][hi * (hi + 1) / 2 + lo] * inv_m;
        } else {
            b[s * P + (q - P * P)] = empty ? T(0) : part[0][NA + q - P * P] * inv_m;
        }
    }
}

template <typename T, int P>
__global__ void laguerre_fitted(const T* __restrict__ S, long long s_set, long long s_path, const T* __restrict__ h,
                                const T* __restrict__ beta, T inv_scale, T inv_c, T* __restrict__ out,
                                long long B, int M)
{
    const long long total = B * M;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long s = i / M, m = i - s * M;
        T psi[P];
        laguerre_psi<T, P>(S[s * s_set + m * s_path] * inv_scale, h[i] * inv_c, psi);
        T c = T(0);
        for (int r = 0; r < P; ++r) c += psi[r] * beta[s * P + r];
        out[i] = c;
    }
}
