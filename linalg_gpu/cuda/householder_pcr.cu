// Householder tridiagonalization + parallel cyclic reduction: x = Q T^{-1} Q^T b
// (paper 001, section 4: Algorithm 2 for A = Q T Q^T, eq. 10 for PCR in the stride form of the
// Fig. 9 eliminations).
// householder_pcr_solve<T, N, W>: W lanes of a warp per system and R = ceil(N / W) rows per lane,
// in registers (as ldlt.cu); lane q owns equations q + W m of the PCR. Only __syncwarp synchronizes.
// householder_pcr_block<T, N> (N > 32, where R rows per lane would not fit in registers): N threads
// per system, the matrix in shared memory, __syncthreads.
// Outputs x (B, N, R), the PCR pivot ratio as condition estimate, the relative residual (from the
// shared copy of the input, or from global memory in the block kernel), ok (all of x finite) and
// the input screening.

#include "householder.cuh"

// PCR (eq. 10) in the stride form: at step s equation i eliminates its couplings to equations
// i - h and i + h (h = 2^s); after ceil(log2 N) steps z_i = v_i / d_i. These are the eliminations of
// pcr.py's Fig. 9 order with the equations left in place: the same operations on the same
// operands (in numpy the two orders gave bitwise equal z and pivots for n = 1 ... 64, both dtypes),
// without the permutations. Register rows: lane q holds equations i = q + W m; the neighbours
// i -+ h come by shuffles for h < W (from the previous or next row block when they cross the ends of
// the segment), from the lane's own registers for h >= W. d, c: T_ii and T_i+1,i (c = 0 for the last
// equation), v: the right-hand side; on exit v = z and d the final pivots (the condition estimate).
template <typename T, int N, int W, int R>
__device__ __forceinline__ void pcr_rows(T (&d)[R], T (&c)[R], T (&v)[R], int q)
{
#pragma unroll
    for (int h = 1; h < N; h *= 2) {
        T cl[R], dl[R], vl[R], cr[R], dr[R], vr[R];
        if (h < W) {
            const int sl = (q - h) & (W - 1), sr = (q + h) & (W - 1);
            const bool wrap_l = q < h, wrap_r = q + h >= W;     // neighbour in the previous / next block
            T c0[R], d0[R], v0[R], c1[R], d1[R], v1[R];
#pragma unroll
            for (int m = 0; m < R; ++m) {
                c0[m] = __shfl_sync(0xffffffffu, c[m], sl, W);
                d0[m] = __shfl_sync(0xffffffffu, d[m], sl, W);
                v0[m] = __shfl_sync(0xffffffffu, v[m], sl, W);
                c1[m] = __shfl_sync(0xffffffffu, c[m], sr, W);
                d1[m] = __shfl_sync(0xffffffffu, d[m], sr, W);
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
                cl[m] = c[ml]; dl[m] = d[ml]; vl[m] = v[ml];
                cr[m] = c[mr]; dr[m] = d[mr]; vr[m] = v[mr];
            }
        }
#pragma unroll
        for (int m = 0; m < R; ++m) {
            const int i = q + W * m;
            if (i < h) { cl[m] = T(0); dl[m] = T(1); vl[m] = T(0); }
            if (i + h >= N) { dr[m] = T(1); vr[m] = T(0); cr[m] = T(0); }
            const T al = cl[m] / dl[m], ga = c[m] / dr[m];
            v[m] = v[m] - al * vl[m] - ga * vr[m];             // eq. (10)
            d[m] = d[m] - al * cl[m] - ga * c[m];
            c[m] = -ga * cr[m];                                 // coupling of i and i + 2h
        }
    }
#pragma unroll
    for (int m = 0; m < R; ++m) v[m] /= d[m];
}

// The same for the block kernel, one equation per thread, the neighbours through sd, sc, sv in
// shared memory. d0, e0: T; v: the right-hand side, overwritten by z; piv_out: the final pivots.
template <typename T, int N>
__device__ void pcr_solve_block(const T* d0, const T* e0, T* v, T* sd, T* sc, T* sv, T* piv_out, int i,
                                bool active)
{
    T d = active ? d0[i] : T(1), c = (active && i < N - 1) ? e0[i] : T(0), vi = active ? v[i] : T(0);
    for (int h = 1; h < N; h *= 2) {
        const bool okl = i >= h, okr = i + h < N;              // c: coupling of i and i + h
        if (active) { sd[i] = d; sc[i] = c; sv[i] = vi; }
        __syncthreads();
        const int l = okl ? i - h : i, r = okr ? i + h : i;
        T cl = sc[l], dl = sd[l], vl = sv[l], dr = sd[r], vr = sv[r], cr = sc[r];
        __syncthreads();
        if (!okl) { cl = T(0); dl = T(1); vl = T(0); }
        if (!okr) { dr = T(1); vr = T(0); cr = T(0); }
        const T al = cl / dl, ga = c / dr;
        vi = vi - al * vl - ga * vr;                            // eq. (10)
        d = d - al * cl - ga * c;
        c = -ga * cr;
    }
    if (active) { v[i] = vi / d; piv_out[i] = d; }
    __syncthreads();
}

// Blocks of 128 threads per SM for __launch_bounds__ of householder_pcr_solve, that is a register cap:
// 4 (128 registers), except float32 N <= 8 and N > 32 (uncapped). Swept on the H100 over 1, 3, 4, 5,
// 6, 8 blocks for the lanes of _hh_lanes (2^20 systems, kernel): float32 N = 32 (W = 16) 13.8 ms
// uncapped (163 registers), 11.1 ms at 4; float64 N = 16 (W = 8) 5.2 -> 4.0 ms, N = 8 (W = 2)
// 0.67 -> 0.61 ms, N = 32 (W = 32) 50.7 -> 28.7 ms; float32 N = 8 (W = 2) 0.31 ms uncapped, 0.34 ms
// at 4; N = 64 (W = 32): every cap spilled more and was slower (26.4 ms uncapped, 42 ms at 4).
template <typename T, int N, int W>
constexpr int hh_min_blocks()
{
    return (N > 32 || (sizeof(T) == 4 && N <= 8)) ? 1 : 4;
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
    tridiagonalize_rows<T, N, S, W, R, NV>(w, sA, su, sq, beta, q, own, d, e);   // (ends synchronized)
    T res_max = 0, cmax = 0;
    bool good = true;
    for (int c = 0; c < nrhs; ++c) {
        T y[R], bm[R], pd[R], pc[R];
#pragma unroll
        for (int m = 0; m < R; ++m) {
            bm[m] = own[m] ? bs[(size_t)(q + W * m) * nrhs + c] : T(0);
            y[m] = bm[m];
            pd[m] = own[m] ? d[m] : T(1);
            pc[m] = own[m] ? e[m] : T(0);
        }
        apply_q_rows<true, T, N, S, W, R>(sA, beta, y, q, own);            // Q^T b
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

template <typename T, int N>
__global__ void __launch_bounds__(256) householder_pcr_block(
    const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x, T* __restrict__ cond,
    T* __restrict__ resid, bool* __restrict__ ok, bool* __restrict__ nonfinite, T* __restrict__ asym,
    long long batch, int nrhs, int spb)
{
    static_assert(N > 32, "N <= 32: householder_pcr_solve");
    using L = HHLayout<N>;
    constexpr int S = L::S, VL = L::VL;
    constexpr int PER = L::WL + 12 * VL;                        // shared elements per system
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    const int local = threadIdx.x / N, i = threadIdx.x % N;
    const long long sys0 = (long long)blockIdx.x * spb;
    const int nsys = (int)min((long long)spb, batch - sys0);
    const bool active = local < nsys;
    T* W = smem + (size_t)local * PER;
    T* d = W + L::WL;  T* e = d + VL;  T* beta = e + VL;  T* tmp = beta + VL;   // tmp: 2 VL
    T* y = tmp + 2 * VL;  T* sd = y + VL;  T* sc = sd + VL;  T* sv = sc + VL;  T* piv = sv + VL;
    T* red = piv + VL;                                          // 2 VL: scratch of group_max

    stage_matrices<T, N, S, PER>(A + sys0 * N * N, smem, nsys);
    const long long s = sys0 + local;
    const T* As = A + s * N * N;
    const T* bs = b + s * N * nrhs;
    screen_and_tridiagonalize<T, N, S>(bs, nrhs, W, d, e, beta, tmp, i, active, nonfinite + s, asym + s);
    T res_max = 0, cmax = 0;
    bool good = true;
    for (int r = 0; r < nrhs; ++r) {
        const T br = active ? bs[i * nrhs + r] : T(0);
        if (active) y[i] = br;
        __syncthreads();
        apply_q<T, N, S>(W, beta, y, tmp, true, i, active);             // Q^T b
        pcr_solve_block<T, N>(d, e, y, sd, sc, sv, piv, i, active);
        apply_q<T, N, S>(W, beta, y, tmp, false, i, active);            // x = Q z
        T ri = -br, rs = 0, xa = 0, pa = 0, pb = -T(INFINITY);
        if (active) {
            const T xi = y[i];
            residual_row<T, N, S>(W, As, y, i, ri, rs);
            x[(s * N + i) * nrhs + r] = xi;
            xa = isfinite(xi) ? fabs(xi) : T(INFINITY);
            pa = fabs(piv[i]);
            pb = -pa;
        }
        const T rn = group_max<T, N>(fabs(ri), red, i), an = group_max<T, N>(rs, red, i);
        const T bn = group_max<T, N>(fabs(br), red, i), xn = group_max<T, N>(xa, red, i);
        const T pmax = group_max<T, N>(pa, red, i), pmin = -group_max<T, N>(pb, red, i);
        T rel = rn == T(0) ? T(0) : rn / (an * xn + bn);
        if (!isfinite(xn) || !isfinite(rel)) { rel = INFINITY; good = false; }
        res_max = fmax(res_max, rel);
        cmax = fmax(cmax, pmax / pmin);
        __syncthreads();
    }
    if (active && i == 0) {
        ok[s] = good;
        cond[s] = good ? cmax : T(INFINITY);
        resid[s] = res_max;
    }
}
