// The normal equations of every depth from one weighted Gram matrix of the finest parts (numpy twin:
// cva.engine.lsm.gram_equations_twin), one thread per entry of the output [A | b], grid-stride over the
// B (2^(s+1) - 1) systems (depth 0's B, then depth 1's 2B, ...; a depth-k system q is the part q of the sets' 2^k
// equal parts, the mean of the finest parts q 2^(s-k) .. (q + 1) 2^(s-k) - 1):
//   A_ic = mean_u G[u, idx_i, idx_c] (f_i f_c),   b_i = mean_u G[u, idx_i, v0 + k] f_i
// with G (B 2^s, rows, cols) contiguous (linalg_gpu.strided.concat_gram's), idx psi's order among G's rows, f the
// system's group's row of ``scale`` (groups, p) (none: 1), and with ``empty_where_zero`` A = I, b = 0 for a system
// whose A_00 (the part's weight) is 0. The mean is the sum in the parts' order, then divided by their count, every
// operation rounded on its own (the _rn intrinsics), as the twin's numpy mean and products: the same bits. One
// launch where the twin's gathers, means, products and selections took about ten.

#include "rounding.cuh"

template <typename T>
__device__ __forceinline__ T part_mean(const T* __restrict__ G, long long first, int m, int rows, int cols, int r,
                                       int c)
{
    T v = G[(first * rows + r) * cols + c];
    for (int u = 1; u < m; ++u) v = add_rn<T>(v, G[((first + u) * rows + r) * cols + c]);
    return m > 1 ? div_rn<T>(v, (T)m) : v;
}

template <typename T>
__global__ void gram_equations(const T* __restrict__ G, int rows, int cols, const int* __restrict__ idx, int p,
                               int v0, int s, const T* __restrict__ scale, int groups, int empty_where_zero,
                               T* __restrict__ A, T* __restrict__ b, long long B)
{
    const long long systems = B * ((2LL << s) - 1);
    const int per = p * (p + 1);
    const long long total = systems * per;
    const long long per_group = B / groups;
    for (long long t = blockIdx.x * (long long)blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long r = t / per;
        const int e = (int)(t - r * per);
        const int i = e / (p + 1), c = e - i * (p + 1);
        int k = 0;
        while (r >= B * ((2LL << k) - 1)) ++k;                           // the system's depth
        const long long q = r - B * ((1LL << k) - 1);                    // its part among the depth's B 2^k
        const int m = 1 << (s - k);                                      // finest parts per part
        const long long g = (q >> k) / per_group;                        // its set's group
        const T* f = scale == nullptr ? nullptr : scale + g * p;
        T v = part_mean<T>(G, q * m, m, rows, cols, idx[i], c < p ? idx[c] : v0 + k);
        if (f != nullptr) v = c < p ? mul_rn<T>(v, mul_rn<T>(f[i], f[c])) : mul_rn<T>(v, f[i]);
        if (empty_where_zero) {
            T a00 = part_mean<T>(G, q * m, m, rows, cols, idx[0], idx[0]);
            if (f != nullptr) a00 = mul_rn<T>(a00, mul_rn<T>(f[0], f[0]));
            if (a00 == T(0)) v = (c == i) ? T(1) : T(0);                 // (c == p: b's column, 0)
        }
        if (c < p) A[(r * p + i) * p + c] = v;
        else b[r * p + i] = v;
    }
}
