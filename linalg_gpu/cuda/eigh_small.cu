// Eigen-decomposition of small symmetric matrices, A = N diag(w) N^T with N = Q O:
// Householder tridiagonalization (Algorithm 2) + divide and conquer (Algorithm 3), one system per
// group of N threads, and the truncated solve of the robust strategy (Abbas-Turki-Graillat, section 5,
// step 3): x = N_k diag(1/w_k) N_k^T b over the eigenvalues |w| > max |w| / cond_max but for the negative ones
// within sqrt(eps) max |w| (for the positive semidefinite normal equations of a regression the paper's w > w_max /
// cond_max, the negative eigenvalues of its rounding discarded; an indefinite system keeps its negative ones).
// A system whose input holds NaN or Inf (flagged by the screening) gets NaN outputs.
// `tree` is the division scheme of Fig. 13 from the host (_gpu._tree_device): [nleaves,
// (start, size)..., nmerges, (start, n1, n2)... deepest first, nrounds, per round: the largest
// merge size and, for each index, its merge packed as start | n1 << 8 | n2 << 16, or -1].

#include "householder.cuh"
#include "tridiag_eigh.cuh"

// Per system: MATS matrix slots ML apart (W and Q, N x S; V, N x dc_v_stride: for MATS = 3 its own
// slot, else W's), then VECS vectors VL apart: d, e, beta, tmp (2; the reduction above N = 32 takes
// the next two as well, lam and dt of the divide and conquer, unused until it starts, and at N = 64
// a third, dd), the divide and conquer's nine, and for eig_truncate_solve y and the group scratch
// of N + 1 after it.
// With MATS = 2 V shares W's storage: the reflectors wait in the output during the divide and
// conquer (move_reflectors), and 14 vectors. H100 (227 KB of shared memory per SM, 1 KB
// per block reserved): N = 64 float32 6 systems per SM (4 with three matrices), float64 3 (2).
// eigh_small takes MATS = 2 (eigh_mats) but for float32 16 < N <= 32, where more resident blocks were
// slower (the instruction cache, as in _gpu._systems_per_block). Kernel ms, 2^17 SPD systems, three ->
// two matrices, outputs bitwise equal: float32 N = 16 1.768 -> 1.721, 32 8.311 -> 8.954, 48 44.16 ->
// 33.77, 64 85.92 -> 76.34; float64 N = 16 3.268 -> 3.217, 32 21.50 -> 20.16, 48 108.3 -> 76.29, 64
// 208.8 -> 161.2.
template <typename T, int N>
__host__ __device__ constexpr int eigh_mats() { return sizeof(T) == 4 && N > 16 && N <= 32 ? 3 : 2; }

template <typename T, int N, int MATS>
struct EigLayout {
    static constexpr int S = HHLayout<N>::S, VL = HHLayout<N>::VL, VECS = MATS == 3 ? 20 : 14;
    static constexpr int ML = HHLayout<N>::WL > N * dc_v_stride<N>() ? HHLayout<N>::WL : N * dc_v_stride<N>();
    static constexpr int PER = MATS * ML + VECS * VL;
};

template <typename T, int N, int MATS>
__device__ void eig_setup(const T* A, long long sys0, int nsys, int spb, T* smem, int*& ibase,
                          T*& W, T*& d, T*& e, T*& beta, T*& tmp, T*& y, DCScratch<T>& sc, int local)
{
    using L = EigLayout<T, N, MATS>;
    constexpr int S = L::S, PER = L::PER, VL = L::VL, ML = L::ML;
    stage_matrices<T, N, S, PER>(A + sys0 * N * N, smem, nsys);
    W = smem + (size_t)local * PER;
    sc.Q = W + ML;
    sc.V = MATS == 3 ? sc.Q + ML : W;
    T* v = sc.Q + (MATS - 1) * ML;
    d = v; e = v + VL; beta = v + 2 * VL; tmp = v + 3 * VL;
    sc.lam = v + 5 * VL; sc.dt = v + 6 * VL; sc.dd = v + 7 * VL; sc.z = v + 8 * VL; sc.P = v + 9 * VL;
    sc.Z = v + 10 * VL; sc.O = v + 11 * VL; sc.TAU = v + 12 * VL; sc.sc = v + 13 * VL;
    y = MATS == 3 ? v + 14 * VL : nullptr;
    ibase = reinterpret_cast<int*>(smem + (size_t)spb * PER) + local * 4 * N;
    sc.perm = ibase; sc.idx = ibase + N; sc.defl = ibase + 2 * N; sc.close = ibase + 3 * N;
}

// Steps R0 <= r < R1 of apply_q_columns for N <= 32, a rolled loop over the column in registers: the
// entries k < r of the step, predicated, within the phase's bound R1.
template <typename T, int N, int S, int R0, int R1>
__device__ __forceinline__ void apply_q_phase(const T* W, const T* beta, T (&col)[N])
{
#pragma unroll 1
    for (int r = R0; r < R1; ++r) {
        T u[R1 - 1], s = 0;
#pragma unroll
        for (int k = 0; k < R1 - 1; ++k) {
            u[k] = k < r ? W[k * S + r] : T(0);
            s += u[k] * col[k];
        }
        s *= beta[r];
#pragma unroll
        for (int k = 0; k < R1 - 1; ++k) col[k] -= u[k] * s;
    }
    if constexpr (R1 < N) apply_q_phase<T, N, S, R1, (R1 + 8 < N ? R1 + 8 : N)>(W, beta, col);
}

// Above N = 32 the reflectors come back from the output as packed rows, u_r (r entries) at
// packed_row<T>(r), each row padded to a multiple of V = 16 / sizeof(T) entries (16-byte loads).
template <typename T>
__device__ __forceinline__ int packed_row(int r)
{
    constexpr int V = 16 / sizeof(T);
    const int g = r / V;                                       // rows gV .. gV + V - 1 are (g + 1) V long
    return V * V * g * (g + 1) / 2 + (r - g * V) * (g + 1) * V;
}

// Entries k0 .. k0 + V - 1 (V = 16 / sizeof(T)) of the packed row u of u_r, 0 from r on (one 16-byte
// load; past the row's end it reads the next rows).
template <typename T, int V>
__device__ __forceinline__ void load_reflector(const T* u, int k0, int r, T (&c)[V])
{
    load16(u + k0, c);
#pragma unroll
    for (int t = 0; t < V; ++t) c[t] = k0 + t < r ? c[t] : T(0);
}

// Steps R0 <= r < R1 of apply_q_columns for N > 32 (as apply_q_phase, u_r a packed row; four partial
// sums).
template <typename T, int N, int R0, int R1>
__device__ __forceinline__ void apply_q_packed_phase(const T* P, const T* beta, T (&col)[N])
{
    constexpr int V = 16 / sizeof(T), KV = (R1 - 1 + V - 1) / V * V;
#pragma unroll 1
    for (int r = R0; r < R1; ++r) {
        const T* u = P + packed_row<T>(r);
        T s4[4] = {T(0), T(0), T(0), T(0)};
#pragma unroll
        for (int k0 = 0; k0 < KV; k0 += V) {
            T c[V];
            load_reflector(u, k0, r, c);
#pragma unroll
            for (int t = 0; t < V; ++t)
                if (k0 + t < R1 - 1) s4[(k0 + t) % 4] += c[t] * col[k0 + t];
            pace_loads<T, pace_every<N>()>(k0);
        }
        const T s = ((s4[0] + s4[1]) + (s4[2] + s4[3])) * beta[r];
#pragma unroll
        for (int k0 = 0; k0 < KV; k0 += V) {
            T c[V];
            load_reflector(u, k0, r, c);
#pragma unroll
            for (int t = 0; t < V; ++t)
                if (k0 + t < R1 - 1) col[k0 + t] -= c[t] * s;
            pace_loads<T, pace_every<N>()>(k0);
        }
    }
    if constexpr (R1 < N) apply_q_packed_phase<T, N, R1, (R1 + 8 < N ? R1 + 8 : N)>(P, beta, col);
}

// Whether the back-transformation reads packed rows (above N = 32).
template <int N>
__host__ __device__ constexpr bool packed_reflectors() { return N > 32; }

// N <- Q_h N for the matrix of eigenvectors: thread c owns column c, in registers, the steps in rolled
// phases of 8 (unrolled, they were 1.4k instructions of straight code at N = 32). u_r: column r of W
// (rows < r), or the packed rows of move_reflectors. (A loop over W and M in shared memory was bound
// by its shared-memory traffic in float32: H100, 2^17 systems, N = 64: about 27 ms with the
// reflectors' way back; float64 ran it until 2026-11-24 05:44, see tridiagonalize_row_regs.)
template <typename T, int N, int S>
__device__ void apply_q_columns(const T* W, const T* beta, T* M, int c, bool active)
{
    if (active) {
        T col[N];
#pragma unroll
        for (int k = 0; k < N; ++k) col[k] = M[k * S + c];
        if constexpr (N > 32) apply_q_packed_phase<T, N, 2, 10>(W, beta, col);
        else if constexpr (N > 2) apply_q_phase<T, N, S, 2, (10 < N ? 10 : N)>(W, beta, col);
#pragma unroll
        for (int k = 0; k < N; ++k) M[k * S + c] = col[k];
    }
    gsync<N>();
}

// The reflectors u_r (column r of W above the diagonal, r >= 2) to the system's N x N output (TO_OUT),
// u_r into row r, or back: into column r of W, or as the packed rows of apply_q_columns
// (packed_reflectors; by cp.async, all in flight at once). Thread c moves entry c of each; every
// thread of the block calls this (it synchronizes).
template <typename T, int N, int S, bool TO_OUT>
__device__ void move_reflectors(T* W, T* out, int c, bool active)
{
    gsync<N>();
    if (active) {
#pragma unroll 8
        for (int r = max(c + 1, 2); r < N; ++r) {
            if constexpr (TO_OUT) out[r * N + c] = W[c * S + r];
            else if constexpr (!packed_reflectors<N>()) W[c * S + r] = out[r * N + c];
            else asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                              :: "r"((unsigned)__cvta_generic_to_shared(W + packed_row<T>(r) + c)),
                                 "l"(out + r * N + c), "n"(sizeof(T)) : "memory");
        }
        if constexpr (!TO_OUT && packed_reflectors<N>()) asm volatile("cp.async.wait_all;" ::: "memory");
    }
    gsync<N>();
}

// The most threads per block of eigh_small (_gpu.EIGH_BLOCK_ABOVE_32). float32 above N = 32: 192, and
// two blocks per SM in __launch_bounds__, a cap of 170 registers, which keeps the register rows of the
// reduction and of the back-transformation from spilling (uncapped, ptxas gave N = 33 and 48 64-80
// registers with spills). float64: 256 and one block, a cap of 255 (N = 64 takes about 200).
template <typename T, int N>
__host__ __device__ constexpr int eigh_block_threads() { return Group<N>::WARP ? 128 : (sizeof(T) == 4 ? 192 : 256); }

template <typename T, int N>
__global__ void __launch_bounds__(eigh_block_threads<T, N>(), !Group<N>::WARP && sizeof(T) == 4 ? 2 : 1)
eigh_small(const T* __restrict__ A, T* __restrict__ w, T* __restrict__ vecs, bool* __restrict__ nonfinite,
           T* __restrict__ asym, const int* __restrict__ tree, long long batch, int spb)
{
    constexpr int S = EigLayout<T, N, eigh_mats<T, N>()>::S;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    constexpr int G = Group<N>::W;                             // lanes per system
    const int local = threadIdx.x / G, i = threadIdx.x % G;
    const long long sys0 = (long long)blockIdx.x * spb;
    const int nsys = (int)min((long long)spb, batch - sys0);
    const bool active = local < nsys && i < N;
    T *W, *d, *e, *beta, *tmp, *y;
    int* ib;
    DCScratch<T> sc;
    constexpr int MATS = eigh_mats<T, N>();
    eig_setup<T, N, MATS>(A, sys0, nsys, spb, smem, ib, W, d, e, beta, tmp, y, sc, local);
    const long long s = sys0 + local;
    const bool fin = screen_and_tridiagonalize<T, N, S>(A, 0, W, d, e, beta, tmp, i, active, nonfinite + s,
                                                        asym + s);
    if constexpr (MATS == 2) move_reflectors<T, N, S, true>(W, vecs + s * N * N, i, active);
    dc_tridiag_eigh<T, N, S>(d, e, sc, tree, i, active);
    if constexpr (MATS == 2) move_reflectors<T, N, S, false>(W, vecs + s * N * N, i, active);
    apply_q_columns<T, N, S>(W, beta, sc.Q, i, active);
    if (active) {                                             // NaN for input that is not finite
        w[s * N + i] = fin ? sc.lam[i] : T(NAN);
        for (int k = 0; k < N; ++k) vecs[(s * N + k) * N + i] = fin ? sc.Q[k * S + i] : T(NAN);
    }
}

template <typename T, int N>
__global__ void __launch_bounds__(Group<N>::WARP ? 128 : 256) eig_truncate_solve(const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x,
                                   T* __restrict__ cond, T* __restrict__ resid, int* __restrict__ ndisc,
                                   bool* __restrict__ nonfinite, T* __restrict__ asym,
                                   const int* __restrict__ tree, T cond_max,
                                   long long batch, int nrhs, int spb)
{
    constexpr int S = EigLayout<T, N, 3>::S;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    constexpr int G = Group<N>::W;                             // lanes per system
    const int local = threadIdx.x / G, i = threadIdx.x % G;
    const long long sys0 = (long long)blockIdx.x * spb;
    const int nsys = (int)min((long long)spb, batch - sys0);
    const bool active = local < nsys && i < N;
    T *W, *d, *e, *beta, *tmp, *y;
    int* ib;
    DCScratch<T> sc;
    eig_setup<T, N, 3>(A, sys0, nsys, spb, smem, ib, W, d, e, beta, tmp, y, sc, local);
    const long long s = sys0 + local;
    const bool fin = screen_and_tridiagonalize<T, N, S>(b + s * N * nrhs, nrhs, W, d, e, beta, tmp, i, active,
                                                        nonfinite + s, asym + s);
    dc_tridiag_eigh<T, N, S>(d, e, sc, tree, i, active);
    const T* O = sc.Q;
    T* red = y + EigLayout<T, N, 3>::VL;                      // group_max scratch (block version)
    const T li = active ? sc.lam[i] : T(0);
    const T lmax_abs = fmax(fabs(sc.lam[0]), fabs(sc.lam[N - 1]));     // (ascending: the largest |w| is an end)
    // by magnitude (an indefinite system keeps its w < 0), less the negative ones of rounding size (sqrt(eps)
    // max |w|): a positive semidefinite matrix formed in floating point has them, and they are its zeros
    const bool keep = fabs(li) > lmax_abs / cond_max && !(li < T(0) && -li <= sqrt(eps<T>()) * lmax_abs);
    const T lmin_abs = -group_max<T, N>(active ? -fabs(li) : -T(INFINITY), red, i);
    const int nd = (int)group_sum<T, N>(active && !keep ? T(1) : T(0), red, i);
    const T* As = A + s * N * N;
    T res_max = 0;
    for (int r = 0; r < nrhs; ++r) {
        const T br = active ? b[(s * N + i) * nrhs + r] : T(0);
        if (active) y[i] = br;
        gsync<N>();
        apply_q<T, N, S>(W, beta, y, tmp, true, i, active);     // Q^T b
        T c = 0;
        if (active) {                                           // (O^T y)_i / lambda_i, kept only
            for (int k = 0; k < N; ++k) c += O[k * S + i] * y[k];
            c = keep ? c / li : T(0);
        }
        gsync<N>();
        if (active) sc.z[i] = c;
        gsync<N>();
        T yi = 0;
        if (active) for (int k = 0; k < N; ++k) yi += O[i * S + k] * sc.z[k];
        gsync<N>();
        if (active) y[i] = yi;
        gsync<N>();
        apply_q<T, N, S>(W, beta, y, tmp, false, i, active);    // x = Q O D_k^-1 O^T Q^T b
        // ||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf): maxima over the lanes by group_max
        T ri = -br, rs = 0, xa = 0;
        if (active) {
            residual_row<T, N, S>(W, As, y, i, ri, rs);
            xa = fabs(y[i]);
            x[(s * N + i) * nrhs + r] = fin ? y[i] : T(NAN);
        }
        const T rn = group_max<T, N>(fabs(ri), red, i), an = group_max<T, N>(rs, red, i);
        const T bn = group_max<T, N>(fabs(br), red, i), xn = group_max<T, N>(xa, red, i);
        const T rel = rn == T(0) ? T(0) : rn / (an * xn + bn);
        res_max = fmax(res_max, isfinite(rel) ? rel : T(INFINITY));
        gsync<N>();
    }
    if (active && i == 0) {
        ndisc[s] = nd;
        cond[s] = lmax_abs / lmin_abs;
        resid[s] = res_max;
    }
}
