// Householder tridiagonalization + parallel cyclic reduction: x = Q T^{-1} Q^T b
// (Abbas-Turki-Graillat, section 4: Algorithm 2 for A = Q T Q^T, eq. 10 for PCR in the stride form of the
// Fig. 9 eliminations).
// householder_pcr_solve<T, N, W>: W lanes of a warp per system and R = ceil(N / W) rows per lane,
// in registers (as ldlt.cu); lane q owns equations q + W m of the PCR. Only __syncwarp synchronizes.
// Outputs x (B, N, R), the PCR pivot ratio as condition estimate, the relative residual (from the
// shared copy of the input), ok (all of x finite) and the input screening.
// (A block kernel with one row per thread in shared memory served float64 N > 32 until the register
// rows overtook it: float64 N = 64, 2^18 systems, H100, 101 ms against 64-69 ms with W = 32.)

#include "householder.cuh"

// PCR (eq. 10) in the stride form: at step s equation i eliminates its couplings to equations
// i - h and i + h (h = 2^s); after ceil(log2 N) steps z_i = v_i / d_i. These are the eliminations of
// pcr.py's Fig. 9 order with the equations left in place (in numpy the two orders gave bitwise equal
// z and pivots for n = 1 ... 64, both dtypes), without the permutations; the ratios a / d of eq. (10)
// are taken as a (1 / d), one reciprocal per equation and step, shuffled in place of d.
// Register rows: lane q holds equations i = q + W m; the neighbours i -+ h come by shuffles for
// h < W (from the previous or next row block when they cross the ends of the segment), from the
// lane's own registers for h >= W. d, c: T_ii and T_i+1,i (c = 0 for the last equation), v: the
// right-hand side; on exit v = z and d the final pivots (the condition estimate).
template <typename T, int N, int W, int R>
__device__ __forceinline__ void pcr_rows(T (&d)[R], T (&c)[R], T (&v)[R], int q)
{
#pragma unroll
    for (int h = 1; h < N; h *= 2) {
        T rd[R], cl[R], dl[R], vl[R], cr[R], dr[R], vr[R];    // dl, dr: 1 / d of the neighbours
#pragma unroll
        for (int m = 0; m < R; ++m) rd[m] = fast_rcp(d[m]);
        if (h < W) {
            const int sl = (q - h) & (W - 1), sr = (q + h) & (W - 1);
            const bool wrap_l = q < h, wrap_r = q + h >= W;     // neighbour in the previous / next block
            T c0[R], d0[R], v0[R], c1[R], d1[R], v1[R];
#pragma unroll
            for (int m = 0; m < R; ++m) {
                c0[m] = __shfl_sync(0xffffffffu, c[m], sl, W);
                d0[m] = __shfl_sync(0xffffffffu, rd[m], sl, W);
                v0[m] = __shfl_sync(0xffffffffu, v[m], sl, W);
                c1[m] = __shfl_sync(0xffffffffu, c[m], sr, W);
                d1[m] = __shfl_sync(0xffffffffu, rd[m], sr, W);
                v1[m] = __shfl_sync(0xffffffffu, v[m], sr, W);
            }
#pragma unroll
            for (int m = 0; m < R; ++m) {                       // (selects: register indices stay constant)
                const int ml = m > 0 ? m - 1 : 0, mr = m + 1 < R ? m + 1 : m;
                cl[m] = wrap_l ? c0[ml] : c0[m]; dl[m] = wrap_l ? d0[ml] : d0[m]; vl[m] = wrap_l ? v0[ml] : v0[m];
                cr[m] = wrap_r ? c1[mr] : c1[m]; dr[m] = wrap_r ? d1[mr] : d1[m]; vr[m] = wrap_r ? v1[mr] : v1[m];
            }
        } else {
#pragma unroll
            for (int m = 0; m < R; ++m) {
                const int ml = m - h / W >= 0 ? m - h / W : 0, mr = m + h / W < R ? m + h / W : 0;
                cl[m] = c[ml]; dl[m] = rd[ml]; vl[m] = v[ml];
                cr[m] = c[mr]; dr[m] = rd[mr]; vr[m] = v[mr];
            }
        }
#pragma unroll
        for (int m = 0; m < R; ++m) {
            const int i = q + W * m;
            if (i < h) { cl[m] = T(0); dl[m] = T(1); vl[m] = T(0); }
            if (i + h >= N) { dr[m] = T(1); vr[m] = T(0); cr[m] = T(0); }
            const T al = cl[m] * dl[m], ga = c[m] * dr[m];
            v[m] = v[m] - al * vl[m] - ga * vr[m];             // eq. (10)
            d[m] = d[m] - al * cl[m] - ga * c[m];
            c[m] = -ga * cr[m];                                 // coupling of i and i + 2h
        }
    }
#pragma unroll
    for (int m = 0; m < R; ++m) v[m] *= fast_rcp(d[m]);
}

// Blocks of 128 threads per SM for __launch_bounds__ of householder_pcr_solve, that is a register cap:
// 4 (128 registers), but 2 (255) where a lane's R = ceil(N / W) rows take 448 bytes or more (float64
// N = 14-16 and 19-24 at the lanes of _hh_lanes), none for float32 N <= 8 and for N > 32, and 3 (168) for
// float32 N > 40. Swept on the H100 (2^20 systems, kernel ms, 2026-11-24 08:46), cap 255 / 128: float64 N = 16
// (W = 4, 512 bytes) 2.24 / 3.39, N = 14 (W = 4, 448) 2.12 / 2.23, N = 13 (W = 4, 416) 1.95 / 1.75, N = 12
// (W = 4) 1.66 / 1.27, N = 10 (W = 4) 1.00 / 0.84, N = 8 (W = 2) 0.45 / 0.40, N = 18 (W = 8, 432) 4.78 /
// 4.36, N = 20 (W = 8, 480) 5.72 / 6.18, N = 22 (W = 8) 6.52 / 12.63, N = 24 (W = 8) 9.95 / 22.7, N = 32
// (W = 32) 20.0 / 18.3; float32 N = 16 (W = 4) 1.07 / 1.00, N = 22 (W = 8) 3.72 / 3.17, N = 24 (W = 8) 4.39
// / 3.87, N = 32 (W = 16) 8.33 / 7.16. Earlier sweeps (over 1, 3, 4, 5, 6, 8 blocks): float32 N <= 8
// (W = 2) 0.31 ms uncapped, 0.34 ms at 4; with the rolled reduction (N > 32, 2^18 systems): float32 N = 64
// 13.7 ms uncapped (252 registers), 11.0 at 3 blocks; N = 56 13.3 -> 10.5, N = 48 11.0 -> 8.6, N = 40 6.35
// uncapped (146 registers) against 6.55.
template <typename T, int N, int W>
constexpr int hh_min_blocks()
{
    constexpr int row_bytes = (N + W - 1) / W * N * (int)sizeof(T);
    return (sizeof(T) == 4 && N > 40) ? 3 : ((N > 32 || (sizeof(T) == 4 && N <= 8)) ? 1 : (row_bytes >= 448 ? 2 : 4));
}

template <typename T, int N, int W>
__global__ void __launch_bounds__(128, hh_min_blocks<T, N, W>()) householder_pcr_solve(
    const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x, T* __restrict__ cond,
    T* __restrict__ resid, bool* __restrict__ ok, bool* __restrict__ nonfinite, T* __restrict__ asym,
    long long batch, int nrhs)
{
    using L = RowsLayout<T, N, W>;
    constexpr int R = L::R, S = L::S, V = L::V, NV = (N + V - 1) / V * V;
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const RowsSlot<T, N, W> at(smem, batch);
    const int q = at.q;
    const long long sys = at.sys;
    const bool valid = at.valid;
    T* sA = at.sA;                                             // the input (lower triangle), u_r above
    T* su = at.vec;                                            // u, then x
    T* sq = su + L::COL;
    T* beta = sq + L::COL;
    bool own[R];
#pragma unroll
    for (int m = 0; m < R; ++m) own[m] = valid && q + W * m < N;
    const T* bs = b + (size_t)sys * N * nrhs;

    T w[R][NV], d[R], e[R];
    at.copy_matrices(A, batch);
    load_screen_rows<T, N, S, W, R, NV>(bs, nrhs, sA, w, q, own, valid, nonfinite + sys, asym + sys);
    T y0[R];                                                   // the first right-hand side, Q^T b in the reduction
#pragma unroll
    for (int m = 0; m < R; ++m) y0[m] = own[m] && nrhs > 0 ? bs[(size_t)(q + W * m) * nrhs] : T(0);
    tridiagonalize_rows<T, N, S, W, R, NV>(w, sA, su, sq, beta, q, own, d, e, y0);   // (ends synchronized)
    T res_max = 0, cmax = 0;
    bool good = true;
    for (int c = 0; c < nrhs; ++c) {
        T y[R], bm[R], pd[R], pc[R];
#pragma unroll
        for (int m = 0; m < R; ++m) {
            bm[m] = own[m] ? bs[(size_t)(q + W * m) * nrhs + c] : T(0);
            y[m] = c == 0 ? y0[m] : bm[m];
            pd[m] = own[m] ? d[m] : T(1);
            pc[m] = own[m] ? e[m] : T(0);
        }
        if (c > 0) apply_q_rows<true, T, N, S, W, R>(sA, beta, y, q, own);  // Q^T b
        pcr_rows<T, N, W, R>(pd, pc, y, q);                                // T z = Q^T b
        apply_q_rows<false, T, N, S, W, R>(sA, beta, y, q, own);           // x = Q z
#pragma unroll
        for (int m = 0; m < R; ++m)
            if (own[m]) su[q + W * m] = y[m];
        __syncwarp();
        // the relative residual (infinite where x is not finite), max and min |PCR pivot|
        const T rel = rows_residual<T, N, S, W, R>(sA, su, bm, y, own, q, x + (size_t)sys * N * nrhs + c, nrhs);
        T pmax = 0, pmin = T(INFINITY);
#pragma unroll
        for (int m = 0; m < R; ++m) {
            if (!own[m]) continue;
            pmax = fmax(pmax, fabs(pd[m]));
            pmin = fmin(pmin, fabs(pd[m]));
        }
        pmax = seg_max<T, W>(pmax);
        pmin = -seg_max<T, W>(-pmin);
        good = good && isfinite(rel);
        res_max = fmax(res_max, rel);
        cmax = fmax(cmax, pmax / pmin);
        __syncwarp();
    }
    if (valid && q == 0) {
        ok[sys] = good;
        cond[sys] = good ? cmax : T(INFINITY);
        resid[sys] = res_max;
    }
}
