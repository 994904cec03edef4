// The trades' per-path Euler contributions to their netting set's CVA (side +1) or DVA (side -1) from a chunk's
// value cube (numpy twin: cva.xva.desk.euler_contributions_twin), one thread per (path row, member):
//   out[r, members[i]] = sum_k w_k (side x[r, i, k]) 1{side P[r, k] > 0}
// with x (R, m, K) contiguous the members' values net of their collateral shares, P the netting set's values at
// the exposure dates (row r at P + r * p_row, date k at + k), w (K,) the exposure weights, and the sum over k in
// date order, every product and sum rounded on its own (the _rn intrinsics), as the twin's numpy operations: the
// same bits. One launch where the twin's products and sums took two per date.

#include "rounding.cuh"

template <typename T>
__global__ void euler_contributions(const T* __restrict__ x, const T* __restrict__ P, long long p_row,
                                    const T* __restrict__ w, T side, const long long* __restrict__ members, int m,
                                    int K, T* __restrict__ out, long long out_row, long long R)
{
    const long long total = R * m;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long r = t / m;
        const int i = (int)(t - r * m);
        const T* xi = x + t * K;
        const T* Pr = P + r * p_row;
        T acc = T(0);
        for (int k = 0; k < K; ++k) {
            const T positive = mul_rn<T>(side, Pr[k]) > T(0) ? T(1) : T(0);
            const T term = mul_rn<T>(mul_rn<T>(mul_rn<T>(side, xi[k]), positive), w[k]);
            acc = k == 0 ? term : add_rn<T>(acc, term);
        }
        out[r * out_row + members[i]] = acc;
    }
}
