// Batched LDL^T factorization and solve without pivoting (paper 001, section 3, eq. 5).
//
// Layout: W lanes of a warp per system (W divides 32, so a warp holds 32 / W systems), and
// R = ceil(N / W) rows per lane: lane q owns rows q, q + W, ..., each in registers (its lower
// part). Only __syncwarp synchronizes. The column of step j is broadcast through shared memory,
// which plays the role of the paper's communicating threads (Algorithm 1); R > 1 rows per lane
// share the per-step work of a system (the paper's hybrid n* < n threads per system).
// 1. The warp copies its systems' matrices into their shared copies (cp.async, all loads in flight
//    at once), and every lane reads its rows into registers: every byte of A is read once.
// 2. Input screening on the copy: NaN/Inf, max|A - A^T| / max|A|, the pivot scale max|A_ii|.
// 3. Factorization (right-looking, eq. 5). A pivot that is not > N eps max|A_ii| (or not finite)
//    is a breakdown: the system is flagged and the pivot replaced by max|A_ii| so that nothing
//    non-finite is produced.
// 4. L is stored transposed into the (unused) upper triangle of the shared copy; L z = b by
//    shuffles of z_j from registers, D y = z, L^T x = y by shuffles of x_j and L^T from shared.
// 5. The relative residual ||Ax - b||_inf / (||A||_inf ||x||_inf + ||b||_inf) from the lower
//    triangle of the copy.
// Outputs: x (B, N, nrhs), D-ratio condition estimate, residual (max over right-hand sides), ok
// flag, and the input screening of solve_small: max|A - A^T| / max|A| and a NaN/Inf flag.
//
// W per (dtype, N) is chosen by small/_gpu.py (_ldlt_lanes). Measured on the H100, kernel time for
// 2^20 systems (2^18 at N = 64) against the former one-row-per-lane kernel (W = N, or W = 32 with
// two rows for N > 32): float32 N = 16 0.62 ms (W = 4) against 1.11 ms, N = 32 3.13 ms (W = 8)
// against 5.36 ms, N = 64 5.40 ms (W = 32) against 8.92 ms; float64 N = 16 1.55 ms (W = 4)
// against 2.36 ms, N = 32 8.6 ms (W = 16) against 11.0 ms, N = 64 24.1 ms against 34.0 ms.
// Most of the gain came from the bank layout of RowsLayout (PA, PC): with the systems' copies
// PER = 0 (mod 32) elements apart, the lanes of the 32 / W systems of a warp hit the same banks.

#include "common.cuh"

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

    // 1. the shared copy from global memory, then the rows into registers (their lower part);
    // NaN/Inf and max|A|
    at.copy_matrices(A, batch);
    T a[R][N];
    AbsMax<T> amax;
    bool fin = true;
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
            for (int c = 0; c < nrhs; ++c) fin = fin && isfinite(b[((size_t)sys * N + r) * nrhs + c]);
        }
    }
    // 2. max|A_rk - A_kr| over the strict lower triangle, scale = max|A_rr|
    AbsMax<T> dasym;
    T diag = 0;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int r = q + W * m;
        if (!own[m]) continue;
        diag = fmax(diag, fabs(sA[r * S + r]));
#pragma unroll
        for (int k = 0; k < L::len(m); ++k)
            if (k < r) dasym.add(a[m][k] - sA[k * S + r]);
    }
    if (!fin) amax.add(T(INFINITY));                 // a NaN/Inf right-hand side
    const T amx = amax.template seg<W>(), dsy = dasym.template seg<W>();
    const T scale = seg_max<T, W>(diag);
    if (valid && q == 0) {
        nonfinite[sys] = !isfinite(amx);
        asym[sys] = amx > T(0) ? dsy / amx : T(0);
    }
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
            bm[m] = own[m] ? b[((size_t)sys * N + q + W * m) * nrhs + c] : T(0);
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
#pragma unroll
        for (int m = 0; m < R; ++m)
            if (own[m]) sx[q + W * m] = z[m];
        __syncwarp();
        // 5. the relative residual from the lower triangle of the copy
        res_max = fmax(res_max, rows_residual<T, N, S, W, R>(sA, sx, bm, z, own, q, x + (size_t)sys * N * nrhs + c,
                                                             nrhs));
        __syncwarp();
    }
    if (valid && q == 0) {
        ok[sys] = good;
        cond[sys] = good ? dmax / dmin : T(INFINITY);
        resid[sys] = res_max;
    }
}
