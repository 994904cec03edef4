// The inner Jacobi of the blocked Jacobi SVD / eigen (papers 003 section 2.3 and 004): one thread
// block per K x K symmetric matrix G (a Gram matrix [A_i A_j]^T [A_i A_j] of a block-column pair,
// or a 2w x 2w diagonal block of a symmetric matrix), held with its eigenvector matrix V in shared
// memory. Cyclic two-sided Jacobi with the chess-tournament ordering (Torun et al.): in each of the
// K - 1 steps of a sweep the K/2 disjoint pairs (p, q) get their rotation from
// theta = (g_qq - g_pp) / (2 g_pq), t = sgn(theta) / (|theta| + sqrt(theta^2 + 1)),
// c = 1 / sqrt(1 + t^2), s = t c (eqs. 8-10); then G <- J^T G J and V <- V J. A thread owns the
// 2 x 2 block of G between two pairs and applies the row rotation, then the column rotation to it
// (the rounding of a row-then-column update, one barrier fewer); the pivot blocks become
// g_pp - t g_pq, g_qq + t g_pq and zeros (their accurate form).
// A pair rotates only if |g_pq| > tol sqrt(|g_pp g_qq|) (relative orthogonality, eq. 2.3 of
// Novakovic-Singer HSVD); sweeps stop when none rotated, after max_sweeps at most.
// Out: V after one Newton-Schulz step V <- V (3 I - V^T V) / 2 (the rotations' rounding drifts the
// column norms coherently, by 70-95 eps after an inner solve to convergence at K = 64, which the
// outer iteration would multiply by its hundreds of steps; the step leaves 3-4 eps), its columns
// sorted by the final diagonal, descending; the identity if nothing rotated.
// The numpy twin is linalg_gpu.jacobi.block.block_eigh.

#include "common.cuh"

// |theta| above which theta^2 + 1 would overflow: t = 1 / (2 theta) there, to working precision.
template <typename T> __device__ __forceinline__ T theta_big();
template <> __device__ __forceinline__ float theta_big<float>() { return 1e18f; }
template <> __device__ __forceinline__ double theta_big<double>() { return 1e150; }

// acc[i][l] += sum_j x(j, R + Q i) y(j, C + Q l) over a 4 x 4 tile, from registers: half a shared
// load per multiply-add. x(j, c) = x[j XJ + c XC]; y(j, c) = y[j S + c].
template <typename T, int K, int Q, int S, int XJ, int XC>
__device__ __forceinline__ void tile_product(const T* x, const T* y, int R, int C, T (&acc)[4][4])
{
    for (int j = 0; j < K; ++j) {
        T xv[4], yv[4];
        #pragma unroll
        for (int i = 0; i < 4; ++i) { xv[i] = x[j * XJ + (R + Q * i) * XC]; yv[i] = y[j * S + C + Q * i]; }
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            #pragma unroll
            for (int l = 0; l < 4; ++l) acc[i][l] = fma(xv[i], yv[l], acc[i][l]);
    }
}

// K x K matrices, NT threads per matrix.
template <typename T, int K, int NT>
__global__ void __launch_bounds__(NT)
block_eigh(const T* __restrict__ G, long long stride, int ld, T* __restrict__ V, T tol, int max_sweeps)
{
    constexpr int S = K + 1;                  // padded row stride of the shared matrices
    constexpr int H = K / 2;                  // pairs per step
    extern __shared__ unsigned char smem_raw[];
    T* a = reinterpret_cast<T*>(smem_raw);    // K x S
    T* v = a + K * S;                         // K x S
    T* cs = v + K * S;                        // c, s, new g_pp, new g_qq of the H pairs
    __shared__ unsigned char seat[K - 1][K];  // the pairs of each step: (seat[s][2t], seat[s][2t + 1])
    __shared__ int pq[K];
    __shared__ int rotated;
    const int tid = threadIdx.x;
    const T* g = G + blockIdx.x * stride;

    for (int i = tid; i < K * K; i += NT) {
        const int r = i / K, c = i % K;
        a[r * S + c] = (g[(long long)r * ld + c] + g[(long long)c * ld + r]) / 2;   // symmetric part
        v[r * S + c] = (r == c) ? T(1) : T(0);
    }
    tournament_seats<K, NT>(seat);
    bool any = false;
    for (int sweep = 0; sweep < max_sweeps; ++sweep) {
        if (tid == 0) rotated = 0;
        __syncthreads();
        for (int step = 0; step < K - 1; ++step) {
            if (tid < H) {
                const int p = seat[step][2 * tid], q = seat[step][2 * tid + 1];
                const T gpq = a[p * S + q], gpp = a[p * S + p], gqq = a[q * S + q];
                T c = 1, s = 0, tg = 0;
                if (fabs(gpq) > tol * sqrt(fabs(gpp)) * sqrt(fabs(gqq))) {
                    const T theta = (gqq - gpp) / (2 * gpq);
                    const T t = fabs(theta) < theta_big<T>()
                        ? copysign(T(1), theta) / (fabs(theta) + sqrt(fma(theta, theta, T(1)))) : 1 / (2 * theta);
                    c = rsqrt(1 + t * t);
                    s = t * c;
                    tg = t * gpq;
                    rotated = 1;
                }
                pq[2 * tid] = p; pq[2 * tid + 1] = q;
                cs[tid] = c; cs[H + tid] = s;
                cs[2 * H + tid] = gpp - tg; cs[3 * H + tid] = gqq + tg;
            }
            __syncthreads();
            for (int i = tid; i < H * H; i += NT) {          // the 2 x 2 block (pair t rows, pair u columns)
                const int t = i / H, u = i % H;
                const T st = cs[H + t], su = cs[H + u];
                if (st == 0 && su == 0) continue;
                const int p = pq[2 * t], q = pq[2 * t + 1], r = pq[2 * u], w = pq[2 * u + 1];
                if (t == u) {
                    a[p * S + p] = cs[2 * H + t]; a[p * S + q] = 0;
                    a[q * S + p] = 0;             a[q * S + q] = cs[3 * H + t];
                    continue;
                }
                const T ct = cs[t], cu = cs[u];
                const T m00 = a[p * S + r], m01 = a[p * S + w], m10 = a[q * S + r], m11 = a[q * S + w];
                const T x00 = ct * m00 - st * m10, x01 = ct * m01 - st * m11;        // rows: J^T G
                const T x10 = st * m00 + ct * m10, x11 = st * m01 + ct * m11;
                a[p * S + r] = cu * x00 - su * x01; a[p * S + w] = su * x00 + cu * x01;   // columns: (J^T G) J
                a[q * S + r] = cu * x10 - su * x11; a[q * S + w] = su * x10 + cu * x11;
            }
            for (int i = tid; i < H * K; i += NT) {          // V J
                const int u = i / K, j = i % K;
                const T su = cs[H + u];
                if (su == 0) continue;
                const int r = pq[2 * u], w = pq[2 * u + 1];
                const T cu = cs[u], x = v[j * S + r], y = v[j * S + w];
                v[j * S + r] = cu * x - su * y;
                v[j * S + w] = su * x + cu * y;
            }
            __syncthreads();
        }
        const bool again = rotated;
        __syncthreads();                                     // all read `rotated` before it is reset
        if (!again) break;
        any = true;
    }

    T* out = V + (long long)blockIdx.x * K * K;
    if (!any) {
        for (int i = tid; i < K * K; i += NT) out[i] = (i / K == i % K) ? T(1) : T(0);
        return;
    }
    if (tid < K) {                                           // rank of column tid, descending diagonal
        const T d = a[tid * S + tid];
        int r = 0;
        for (int j = 0; j < K; ++j) {
            const T e = a[j * S + j];
            r += (e > d) || (e == d && j < tid);
        }
        pq[tid] = r;
    }
    __syncthreads();
    // P = V^T V over G, then V (3 I - V^T V) / 2: each of the first (K/4)^2 threads computes a
    // 4 x 4 tile (rows R + Q i, columns C + Q l) from registers, half a shared load per multiply-add
    // (one thread per entry took two: the step was a quarter of the kernel's time at K = 64).
    constexpr int Q = K / 4;
    const int R = tid / Q, C = tid % Q;
    if (tid < Q * Q) {
        T acc[4][4] = {};
        tile_product<T, K, Q, S, S, 1>(v, v, R, C, acc);                       // V^T V
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            #pragma unroll
            for (int l = 0; l < 4; ++l) a[(R + Q * i) * S + C + Q * l] = acc[i][l];
    }
    __syncthreads();
    if (tid < Q * Q) {
        T acc[4][4] = {};
        tile_product<T, K, Q, S, 1, S>(v, a, R, C, acc);                       // V P
        #pragma unroll
        for (int i = 0; i < 4; ++i)
            #pragma unroll
            for (int l = 0; l < 4; ++l) {
                const int r = R + Q * i, c = C + Q * l;
                out[r * K + pq[c]] = T(1.5) * v[r * S + c] - T(0.5) * acc[i][l];
            }
    }
}

// The layout moves of linalg_gpu/jacobi/blocked.py: out[i, j] = A[e[i], j] (rows), or, with
// both = 1, out[i, j] = A[e[i], e[j]] (rows and columns of a square A). A is rows x cols.
template <typename T>
__global__ void gather(const T* __restrict__ A, const long long* __restrict__ e, T* __restrict__ out,
                       int rows, int cols, int both)
{
    const long long total = (long long)rows * cols;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / cols, c = i % cols;
        out[i] = A[e[r] * cols + (both ? e[c] : c)];
    }
}
