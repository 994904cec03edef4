// Batched LDL^T factorization and solve without pivoting (Abbas-Turki-Graillat, section 3, eq. 5).
//
// Layout: W lanes of a warp per system (W divides 32, so a warp holds 32 / W systems), and
// R = ceil(N / W) rows per lane: lane q owns rows q, q + W, ..., each in registers (its lower
// part). Only __syncwarp synchronizes. The column of step j is broadcast through shared memory,
// which plays the role of the paper's communicating threads (Algorithm 1); R > 1 rows per lane
// share the per-step work of a system (the paper's hybrid n* < n threads per system).
// 1. The warp copies its systems' matrices into their shared copies and the first right-hand side
//    into the solution vector (cp.async, all loads in flight at once), and every lane reads its rows
//    into registers: every byte of A is read once.
// 2. Input screening on the copy: NaN/Inf, max|A - A^T| / max|A|, the pivot scale max|A_ii|.
// 3. Factorization (right-looking, eq. 5). A pivot that is not > N eps max|A_ii| (or not finite)
//    is a breakdown: the system is flagged and the pivot replaced by max|A_ii| so that nothing
//    non-finite is produced.
// 4. L is stored transposed into the (unused) upper triangle of the shared copy; L z = b by
//    shuffles of z_j from registers (ldlt_solve_rolled: the first right-hand side's beside the
//    factorization), D y = z, L^T x = y by shuffles of x_j and L^T from shared.
// 5. The relative residual ||Ax - b||_inf / (||A||_inf ||x||_inf + ||b||_inf) from the lower
//    triangle of the copy.
// Outputs: x (B, N, nrhs), D-ratio condition estimate, residual (max over right-hand sides), ok
// flag, and the input screening of solve_small: max|A - A^T| / max|A| and a NaN/Inf flag.
//
// W per (dtype, N) is chosen by small/_gpu.py (_ldlt_lanes); above N = 48 (float64: 40) the launcher
// takes ldlt_solve_rolled (below) instead. Measured on the H100, kernel time for
// 2^20 systems (2^18 at N = 64) against the former one-row-per-lane kernel (W = N, or W = 32 with
// two rows for N > 32): float32 N = 16 0.62 ms (W = 4) against 1.11 ms, N = 32 3.13 ms (W = 8)
// against 5.36 ms, N = 64 5.40 ms (W = 32) against 8.92 ms; float64 N = 16 1.55 ms (W = 4)
// against 2.36 ms, N = 32 8.6 ms (W = 16) against 11.0 ms, N = 64 24.1 ms against 34.0 ms.
// Most of the gain came from the bank layout of RowsLayout (PA, PC): with the systems' copies
// PER = 0 (mod 32) elements apart, the lanes of the 32 / W systems of a warp hit the same banks.

#include "common.cuh"

// Steps 1 (after the copy) and 2 of ldlt_solve and ldlt_solve_rolled: lane q's rows r = q + W m
// from the shared copy sA into a[m][0 .. len(m)) (their lower part), the input screening of
// solve_small (NaN/Inf in A or, fin false, in the right-hand sides; max|A_rk - A_kr| / max|A| over
// the strict lower triangle; lane 0 writes the flags when the system exists). Returns the pivot
// scale max|A_rr| over the system's rows, to every lane.
template <typename T, int N, int W, int R>
__device__ __forceinline__ T load_screen_rows_ldlt(const T* sA, bool fin, T (&a)[R][N], int q, const bool (&own)[R],
                                                   bool valid, bool* nonfinite, T* asym)
{
    using L = RowsLayout<T, N, W>;
    constexpr int S = L::S;
    AbsMax<T> amax, dasym;
    T diag = 0;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int r = q + W * m;
#pragma unroll
        for (int k = 0; k < L::len(m); ++k) a[m][k] = T(0);
        if (own[m]) {
#pragma unroll
            for (int k = 0; k < N; ++k) {
                const T v = sA[r * S + k];
                amax.add(v);
                if (k < L::len(m)) a[m][k] = v;
            }
        }
    }
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int r = q + W * m;
        if (!own[m]) continue;
        diag = fmax(diag, fabs(sA[r * S + r]));
#pragma unroll
        for (int k = 0; k < L::len(m); ++k)
            if (k < r) dasym.add(a[m][k] - sA[k * S + r]);
    }
    write_screening<T, W>(amax, dasym, fin, q, valid, nonfinite, asym);
    return seg_max<T, W>(diag);
}

// Step 5 of ldlt_solve and ldlt_solve_rolled for one right-hand side: the lanes' solution z into sx,
// then the relative residual from the lower triangle of the copy sA (rows_residual, which also writes
// z to the output column xout).
template <typename T, int N, int S, int W, int R>
__device__ __forceinline__ T store_solution_residual(const T* sA, T* sx, const T (&bm)[R], const T (&z)[R],
                                                     const bool (&own)[R], int q, T* xout, int nrhs)
{
#pragma unroll
    for (int m = 0; m < R; ++m)
        if (own[m]) sx[q + W * m] = z[m];
    __syncwarp();
    const T rel = rows_residual<T, N, S, W, R>(sA, sx, bm, z, own, q, xout, nrhs);
    __syncwarp();
    return rel;
}

template <typename T, int N, int W>
__global__ void __launch_bounds__(128) ldlt_solve(
    const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x, T* __restrict__ cond,
    T* __restrict__ resid, bool* __restrict__ ok, T* __restrict__ asym, bool* __restrict__ nonfinite,
    long long batch, int nrhs)
{
    using L = RowsLayout<T, N, W>;
    constexpr int R = L::R, S = L::S, V = L::V;
    extern __shared__ unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const RowsSlot<T, N, W> at(smem, batch);
    const int q = at.q, seg = (threadIdx.x & 31) / W;
    const long long sys = at.sys;
    const bool valid = at.valid;
    T* sA = at.sA;                                    // original rows (padded)
    T* col = at.vec;                                  // published column
    T* sx = col + L::COL;                             // solution
    bool own[R];                                      // row q + W m exists (and the system does)
#pragma unroll
    for (int m = 0; m < R; ++m) own[m] = valid && (W * R == N || q + W * m < N);

    // 1.-2. the shared copy (and the first right-hand side into sx, free until the solves), the rows into
    // registers, the screening
    const T* bs = b + (size_t)sys * N * nrhs;
    T a[R][N];
    copy_rhs0<T, W, R>(bs, nrhs, own, q, sx);
    at.copy_matrices(A, batch);
    const T scale = load_screen_rows_ldlt<T, N, W, R>(sA, rhs_finite<T, W, R>(bs, nrhs, own, q, sx), a, q, own, valid,
                                                      nonfinite + sys, asym + sys);
    // 3. the factorization, right-looking: at step j the rows r >= j publish a_rj (unscaled) in
    // the column buffer, every lane reads D_jj = a_jj and the column back (16-byte broadcasts) and
    // updates its rows, a_rk -= L_rj a_kj for k > j with L_rj = a_rj / D_jj. The updates run over
    // the whole row block (not only k <= r): the entries right of the diagonal are never read, and
    // a predicate k <= r would cost an instruction per update.
    const T tol = T(N) * eps<T>() * scale;
    const T safe = scale > T(0) ? scale : T(1);
    bool good = true;
    T dmax = 0, dmin = 0, dpiv[R];
#pragma unroll
    for (int m = 0; m < R; ++m) dpiv[m] = T(1);
#pragma unroll
    for (int j = 0; j < N; ++j) {
#pragma unroll
        for (int m = 0; m < R; ++m)                   // a_rj of the rows r >= j
            if (W * (m + 1) > j && own[m]) col[q + W * m] = a[m][j];
        __syncwarp();
        T d = col[j];
        if (!(d > tol)) { good = false; d = safe; }   // breakdown (NaN included)
        dmax = j == 0 || d > dmax ? d : dmax;         // (d is never NaN: compare and select)
        dmin = j == 0 || d < dmin ? d : dmin;
        if (q == j % W) dpiv[j / W] = d;
        const T rd = T(1) / d;                        // one reciprocal per step, as the twin
        T l[R];
#pragma unroll
        for (int m = 0; m < R; ++m) l[m] = W * (m + 1) > j ? a[m][j] * rd : T(0);
#pragma unroll
        for (int k0 = (j + 1) / V * V; k0 < N; k0 += V) {
            T c[V];
            load16(col + k0, c);
#pragma unroll
            for (int t = 0; t < V; ++t) {
                const int k = k0 + t;
#pragma unroll
                for (int m = 0; m < R; ++m)
                    if (k > j && k < L::len(m)) a[m][k] -= l[m] * c[t];
            }
        }
#pragma unroll
        for (int m = 0; m < R; ++m)
            if (W * (m + 1) > j && q + W * m > j) a[m][j] = l[m];
        __syncwarp();
    }
    // 4. L_rk (k < r) to the upper triangle of the shared copy, sA[k][r]: the back substitution
    // reads row r of L^T there; the lower triangle keeps A for the residual.
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int r = q + W * m;
#pragma unroll
        for (int k = 0; k < L::len(m); ++k)
            if (own[m] && k < r) sA[k * S + r] = a[m][k];
    }
    __syncwarp();
    T res_max = 0;
    for (int c = 0; c < nrhs; ++c) {
        T z[R], bm[R];
#pragma unroll
        for (int m = 0; m < R; ++m) {
            bm[m] = own[m] ? (c == 0 ? sx[q + W * m] : bs[(size_t)(q + W * m) * nrhs + c]) : T(0);
            z[m] = bm[m];
        }
        // L z = b: z_j broadcast at step j
#pragma unroll
        for (int j = 0; j < N - 1; ++j) {
            const T zj = __shfl_sync(0xffffffffu, z[j / W], seg * W + j % W);
#pragma unroll
            for (int m = 0; m < R; ++m)
                if (j < L::len(m) && q + W * m > j) z[m] -= a[m][j < L::len(m) ? j : 0] * zj;
        }
        // D y = z, then L^T x = y: x_j final at step j (descending), L_jr = sA[r][j]
#pragma unroll
        for (int m = 0; m < R; ++m) z[m] /= dpiv[m];
#pragma unroll
        for (int j = N - 1; j > 0; --j) {
            const T xj = __shfl_sync(0xffffffffu, z[j / W], seg * W + j % W);
#pragma unroll
            for (int m = 0; m < R; ++m)
                if (W * m < j && own[m] && q + W * m < j) z[m] -= sA[(q + W * m) * S + j] * xj;
        }
        // 5. the relative residual from the lower triangle of the copy
        res_max = fmax(res_max, store_solution_residual<T, N, S, W, R>(sA, sx, bm, z, own, q,
                                                                       x + (size_t)sys * N * nrhs + c, nrhs));
    }
    if (valid && q == 0) {
        ok[sys] = good;
        cond[sys] = good ? dmax / dmin : T(INFINITY);
        resid[sys] = res_max;
    }
}

// ldlt_solve_rolled<T, N>, 32 < N <= 64 (used for N > 48, float64 N > 40): the steps of ldlt_solve
// with one warp per system, lane q owning rows q and q + 32, and the factorization and the solves in
// rolled loops.
// Unrolled, the steps of N = 64 (8.8k instructions in float32) overflowed the instruction cache:
// "no instruction" was the main stall of ldlt_solve<float, 64, 32> (Nsight Compute, H100). Rolled,
// the rows cannot be indexed by the step: they are shifted down by one entry per step instead, and
// L goes to the upper triangle of the shared copy, where the solves read it.
// Measured (kernel, 2^18 systems, H100) against ldlt_solve: float32 N = 64 3.92 against 5.43 ms,
// N = 56 4.56 against 5.02, N = 48 4.05 against 3.37; float64 N = 64 10.7 against 18.6, N = 56 8.14
// against 13.8, N = 48 7.04 against 7.41. Two warps per system (one row per thread, a named barrier
// per step) gave float64 N = 64 10.5 ms, N = 56 11.0: not kept. 2026-11-23 08:48 (one warp per block, the
// first right-hand side by cp.async with A, the pivot's reciprocal from next_pivot): float64 N = 64
// 7.52 ms, float32 3.56 ms (one process against the same kernel before these changes, 32 threads per
// block: 7.99 and 3.88 ms; with 128 threads 10.4 and 3.99 ms).

// Steps per phase of the factorization of ldlt_solve_rolled (rolled_phases).
constexpr int LDLT_PHASE = 8;

// The state of the pivots of ldlt_solve_rolled, per lane: no breakdown among the pivots of the lane's
// rows so far, D_rr of its two rows, and rn = 1 / D_jj for the next pivot j where the lane holds row j.
template <typename T>
struct RolledPivots {
    bool good;
    T d[2], rn;
};

// The pivot of step j (> J0 - 1) of ldlt_solve_rolled, A_jj after step j - 1 (in a[j / 32][0] of lane
// j % 32), prepared by that lane right after its update of step j - 1, so that its reciprocal is no
// longer on the chain of the step (the other lanes compute the same for their rows, unused). A
// pivot that is not > tol (or not finite) is a breakdown, replaced by safe.
template <typename T, int N, int J0>
__device__ __forceinline__ void next_pivot(const T (&a)[2][N], int j, int q, T tol, T safe, RolledPivots<T>& pv)
{
    const bool lower = J0 + LDLT_PHASE >= 32 && j >= 32;    // row j in the second row block
    T d = lower ? a[1][0] : a[0][0];
    const bool owner = q == j % 32;
    if (!(d > tol)) {
        if (owner) pv.good = false;
        d = safe;
    }
    if (owner) {
        if (lower) pv.d[1] = d; else pv.d[0] = d;
    }
    pv.rn = fast_rcp(d);
}

// Steps J0 <= j < J1 of the factorization of ldlt_solve_rolled, a rolled loop. Row r = q + 32 m holds
// a[m][k] = A_r,j+k, shifted down by one entry per step: K_m = min(32 (m + 1), N) - J0 entries hold
// every column the row still has (none once K_m <= 0). The rows r >= j publish a[m][0] at
// col[V - 1 + r - j] (two buffers of COL + V alternate: one __syncwarp per step), where the pivot row
// publishes 1 / D_jj instead (from next_pivot), so that column j below the pivot starts 16-byte
// aligned at col + V; L_rj goes to the upper triangle of the copy, sA[j][r]. The forward
// substitution L z = b of the first right-hand side runs beside the steps: the pivot row publishes
// z_j at col[V - 2] (read with 1 / D_jj in one load) and the rows r > j take z_r -= L_rj z_j, the
// terms and the order of the substitution from sA, without its chain of shuffles after the
// factorization. Measured (kernel, 2^18 systems, H100, outputs bitwise equal): float64 N = 64 7.53 ->
// 7.23 ms, N = 49 5.69 -> 5.44, N = 41 4.61 -> 4.41; float32 N = 64 3.51 -> 3.54, N = 49 3.16 -> 3.15.
// (In ldlt_solve the same, z_j by a shuffle in each step, gave float32 N = 32 2.62 -> 2.47 ms but
// float64 N = 16 1.12 -> 1.15 and N = 32 5.47 -> 5.59, 2^20 systems: not there.)
template <typename T, int N, int J0, int J1>
__device__ __forceinline__ void rolled_steps(T (&a)[2][N], T (&z)[2], int q, const bool (&own)[2], T* vec, T* sA,
                                             T tol, T safe, RolledPivots<T>& pv)
{
    constexpr int V = 16 / sizeof(T), COL = (N + 3) / 4 * 4, S = N | 1;
    constexpr int KMAX = N - J0;                      // the longest row: the last one
#pragma unroll 1
    for (int j = J0; j < J1; ++j) {
        T* col = vec + (j & 1) * (COL + V);
#pragma unroll
        for (int m = 0; m < 2; ++m)
            if (32 * (m + 1) > J0 && own[m] && q + 32 * m >= j)
                col[V - 1 + q + 32 * m - j] = q + 32 * m == j ? pv.rn : a[m][0];
        if (q == j % 32) col[V - 2] = J0 + LDLT_PHASE > 32 && j >= 32 ? z[1] : z[0];
        __syncwarp();
        T zj, rd;
        load_pair(col + V - 2, zj, rd);
        T l[2];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            l[m] = a[m][0] * rd;
            if (32 * (m + 1) > J0 && own[m] && q + 32 * m > j) {
                sA[j * S + q + 32 * m] = l[m];
                z[m] -= l[m] * zj;
            }
        }
#pragma unroll
        for (int k0 = 0; k0 < KMAX - 1; k0 += V) {
            T c[V];
            load16(col + V + k0, c);
#pragma unroll
            for (int u = 0; u < V; ++u)
#pragma unroll
                for (int m = 0; m < 2; ++m) {
                    const int k = k0 + u, K = (32 * (m + 1) < N ? 32 * (m + 1) : N) - J0;
                    if (k < K - 1) a[m][k] = fma(-l[m], c[u], a[m][k + 1]);
                }
        }
        if (j + 1 < N) next_pivot<T, N, J0>(a, j + 1, q, tol, safe, pv);
    }
}

// The factorization of ldlt_solve_rolled: rolled_steps in phases of LDLT_PHASE steps, from step J0
// on. Each phase updates only the registers that still hold entries; shorter phases waste fewer
// updates and take more code (8 steps: 2848 updates per lane at N = 64, W = 32, against 2512 fully
// unrolled and 3232 with 16 steps; float32 N = 64 3.92 against 4.28 ms with 16 and the IEEE
// division).
template <typename T, int N, int J0>
__device__ __forceinline__ void rolled_phases(T (&a)[2][N], T (&z)[2], int q, const bool (&own)[2], T* vec, T* sA,
                                              T tol, T safe, RolledPivots<T>& pv)
{
    if constexpr (J0 < N) {
        constexpr int J1 = J0 + LDLT_PHASE < N ? J0 + LDLT_PHASE : N;
        rolled_steps<T, N, J0, J1>(a, z, q, own, vec, sA, tol, safe, pv);
        rolled_phases<T, N, J1>(a, z, q, own, vec, sA, tol, safe, pv);
    }
}

// Registers: float32 capped at 128 (4 blocks per SM; 3.92 ms against 3.80 uncapped at N = 64, but
// 4.56 against 4.80 at N = 56), float64 uncapped (255, no spills; capped at 168 it spilled 376 bytes).
template <typename T, int N>
__global__ void __launch_bounds__(128, sizeof(T) == 4 ? 4 : 1) ldlt_solve_rolled(
    const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x, T* __restrict__ cond,
    T* __restrict__ resid, bool* __restrict__ ok, T* __restrict__ asym, bool* __restrict__ nonfinite,
    long long batch, int nrhs)
{
    static_assert(N > 32 && N <= 64, "32 < N <= 64");
    using L = RowsLayout<T, N, 32>;
    constexpr int S = L::S, V = L::V, COL = L::COL;
    extern __shared__ unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const RowsSlot<T, N, 32, 2 * V> at(smem, batch);  // (two column buffers of COL + V)
    const int q = at.q;
    const long long sys = at.sys;
    const bool valid = at.valid;
    const bool own[2] = {valid, valid && q + 32 < N};
    T* sA = at.sA;
    T* vec = at.vec;
    T* sx = vec + 2 * (COL + V);                      // the solution

    // 1.-2. the shared copy (and the first right-hand side into sx, free until the solves), the rows into
    // registers, the screening
    const T* bs = b + (size_t)sys * N * nrhs;
    T a[2][N];
    copy_rhs0<T, 32, 2>(bs, nrhs, own, q, sx);
    at.copy_matrices(A, batch);
    const T scale = load_screen_rows_ldlt<T, N, 32, 2>(sA, rhs_finite<T, 32, 2>(bs, nrhs, own, q, sx), a, q, own, valid,
                                                       nonfinite + sys, asym + sys);
    // 3. the factorization
    const T tol = T(N) * eps<T>() * scale;
    const T safe = scale > T(0) ? scale : T(1);
    RolledPivots<T> pv{true, {T(1), T(1)}, T(0)};
    T z0[2];                                          // L z = b of the first right-hand side, in the steps
#pragma unroll
    for (int m = 0; m < 2; ++m) z0[m] = own[m] && nrhs > 0 ? sx[q + 32 * m] : T(0);
    next_pivot<T, N, 0>(a, 0, q, tol, safe, pv);
    rolled_phases<T, N, 0>(a, z0, q, own, vec, sA, tol, safe, pv);
    // the pivots' range over the lanes (d is never NaN: compare and select)
    const bool good = __all_sync(0xffffffffu, pv.good);
    const T d1 = own[1] ? pv.d[1] : pv.d[0];
    const T dmax = seg_max<T, 32>(pv.d[0] > d1 ? pv.d[0] : d1), dmin = -seg_max<T, 32>(-(pv.d[0] < d1 ? pv.d[0] : d1));
    // 4. the pivots to the column buffer that the last step did not use (L is in the upper triangle)
    T* piv = vec + (N & 1) * (COL + V);
#pragma unroll
    for (int m = 0; m < 2; ++m)
        if (own[m]) piv[q + 32 * m] = pv.d[m];
    __syncwarp();
    // 5. the solves and the residual
    T res_max = 0;
    for (int c = 0; c < nrhs; ++c) {
        T z[2], bm[2];
#pragma unroll
        for (int m = 0; m < 2; ++m) {
            bm[m] = own[m] ? (c == 0 ? sx[q + 32 * m] : bs[(size_t)(q + 32 * m) * nrhs + c]) : T(0);
            z[m] = c == 0 ? z0[m] : bm[m];
        }
        // L z = b (L_rj = sA[j][r]; the first right-hand side's is z0, from the steps), D y = z, L^T x = y
        // (L_jr = sA[r][j]); z_j from row block j / 32 (rolled loops, as the factorization)
        if (c > 0) {
#pragma unroll 4
            for (int j = 0; j < 32; ++j) {
                const T zj = __shfl_sync(0xffffffffu, z[0], j);
                if (own[0] && q > j) z[0] -= sA[j * S + q] * zj;
                if (own[1]) z[1] -= sA[j * S + q + 32] * zj;
            }
#pragma unroll 4
            for (int j = 32; j < N - 1; ++j) {
                const T zj = __shfl_sync(0xffffffffu, z[1], j - 32);
                if (own[1] && q + 32 > j) z[1] -= sA[j * S + q + 32] * zj;
            }
        }
#pragma unroll
        for (int m = 0; m < 2; ++m) z[m] /= own[m] ? piv[q + 32 * m] : T(1);
#pragma unroll 4
        for (int j = N - 1; j >= 32; --j) {
            const T xj = __shfl_sync(0xffffffffu, z[1], j - 32);
            if (own[0]) z[0] -= sA[q * S + j] * xj;
            if (own[1] && q + 32 < j) z[1] -= sA[(q + 32) * S + j] * xj;
        }
#pragma unroll 4
        for (int j = 31; j > 0; --j) {
            const T xj = __shfl_sync(0xffffffffu, z[0], j);
            if (own[0] && q < j) z[0] -= sA[q * S + j] * xj;
        }
        res_max = fmax(res_max, store_solution_residual<T, N, S, 32, 2>(sA, sx, bm, z, own, q,
                                                                        x + (size_t)sys * N * nrhs + c, nrhs));
    }
    if (valid && q == 0) {
        ok[sys] = good;
        cond[sys] = good ? dmax / dmin : T(INFINITY);
        resid[sys] = res_max;
    }
}
