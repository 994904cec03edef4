// Small helpers shared by the kernels of linalg_gpu (included by the .cu files).
#pragma once

template <typename T> __device__ __forceinline__ T eps();
template <> __device__ __forceinline__ float eps<float>() { return 1.1920929e-07f; }
template <> __device__ __forceinline__ double eps<double>() { return 2.220446049250313e-16; }

// NVRTC (CuPy's run-time compiler) has no <math.h>: the two constants the kernels use.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

// 16 bytes of shared memory (16-byte aligned) into registers: 4 floats or 2 doubles.
__device__ __forceinline__ void load16(const float* p, float* c)
{
    float4 v = *reinterpret_cast<const float4*>(p);
    c[0] = v.x; c[1] = v.y; c[2] = v.z; c[3] = v.w;
}
__device__ __forceinline__ void load16(const double* p, double* c)
{
    double2 v = *reinterpret_cast<const double2*>(p);
    c[0] = v.x; c[1] = v.y;
}

// Two adjacent elements of shared memory, p aligned to their pair (8 bytes for float32, 16 for float64),
// in one load.
__device__ __forceinline__ void load_pair(const float* p, float& x, float& y)
{
    const float2 v = *reinterpret_cast<const float2*>(p);
    x = v.x; y = v.y;
}
__device__ __forceinline__ void load_pair(const double* p, double& x, double& y)
{
    const double2 v = *reinterpret_cast<const double2*>(p);
    x = v.x; y = v.y;
}

// At the end of chunk k0 of an unrolled loop of 16-byte loads over a row: a __syncwarp after every EVERY-th
// load, so that ptxas does not hoist the whole row's loads ahead of their FMAs (the reduction of
// float32 N = 64: 215 registers, spills in float64; merge_row of float64 N = 33: 167 registers, 120
// with it). Each costs four instructions (VOTE, R2UR, BRA.DIV, WARPSYNC): 6.8 % of those of
// eigh_small<double, 64> with a __syncwarp every fourth load (Nsight Compute).
template <typename T, int EVERY>
__device__ __forceinline__ void pace_loads(int k0)
{
    constexpr int V = 16 / sizeof(T);
    if (k0 % (EVERY * V) == (EVERY - 1) * V) __syncwarp(__activemask());
}

// The loads per pace_loads of the eigen kernels' loops over rows of N entries: 8 from N = 48 on, where
// the loops are long enough to pay for the registers. Measured on the H100 (eigh_small, 2^17 systems,
// kernel ms, every 4 -> every 8 loads, outputs bitwise equal): float32 N = 33 9.88 -> 9.73, 40 11.15 ->
// 12.26 (116 -> 132 registers: 3 systems per block instead of 4), 41 12.23 -> 13.44, 44 16.82 -> 16.21,
// 48 18.77 -> 17.71, 56 26.89 -> 26.01, 64 31.05 -> 30.00; float64 N = 33 18.63 -> 23.19 (135 -> 186
// registers: 7 systems resident instead of 9), 40 26.38 -> 25.65, 41 29.33 -> 28.22, 44 33.92 -> 37.66
// (168 -> 218 registers: 5 resident instead of 8), 48 41.99 -> 41.13, 56 78.65 -> 72.67, 64 90.00 ->
// 84.51; float64 N <= 32 within 1 %. eig_truncate_solve (2^16 systems): float64 N = 48 35.93 -> 35.06,
// 64 56.51 -> 54.64, float32 N = 48 12.60 -> 12.07, 64 21.10 -> 20.98.
template <int N>
__host__ __device__ constexpr int pace_every() { return N >= 48 ? 8 : 4; }

// 1 / x for x of a scaled computation, 2^-126 <= |x| (float32) or 2^-1022 <= |x| (float64): fast_rcp (below)
// without its range handling (the .ftz estimate; float64 two Newton steps). A smaller |x| gives inf
// (float32) or NaN (float64), as x = 0 does in fast_rcp. Used by the divide and conquer, whose
// matrix is scaled to max |entry| = 1 and whose pole differences are kept apart by the deflation
// (tridiag_eigh.cuh: the secular sums, Loewner products and eq. (17)): in float32 the range
// handling of rcp.approx was 6 of the about 20 instructions of a secular term (Nsight Compute,
// n = 32), in float64 that of fast_rcp 7 % of all instructions of eigh_small<double, 32>.
template <typename T> __device__ __forceinline__ T scaled_rcp(T x)
{
    if constexpr (sizeof(T) == 4) {
        float y;
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
        return y;
    } else {
        double y;
        asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(x));
        y = fma(y, fma(-x, y, 1.0), y);
        return fma(y, fma(-x, y, 1.0), y);
    }
}

// 1 / x without the IEEE slow-path branch of a division (any x): in float64 the hardware estimate
// and two Newton steps, within about 1 ulp (|x| outside [2^-900, 2^900] is scaled by 2^-+200 so that
// the .ftz estimate sees a normal number and returns one); in float32 rcp.approx (1 ulp, subnormals
// kept). 1 / 0 is NaN in float64 (inf in float32). Used where the reciprocal sits on a chain of
// dependent steps: the float64 Householder steps and the PCR (householder.cuh, householder_pcr.cu),
// the LDL^T pivots (ldlt.cu, N > 48).
template <typename T> __device__ __forceinline__ T fast_rcp(T x)
{
    if constexpr (sizeof(T) == 4) {
        float y;
        asm("rcp.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
        return y;
    } else {
        const double ax = fabs(x);
        const double s = ax < 0x1p-900 ? 0x1p+200 : (ax > 0x1p+900 ? 0x1p-200 : 1.0);
        return scaled_rcp(x * s) * s;
    }
}

// Maximum and sum over the W lanes of a segment (W a power of two dividing 32), to every lane.
template <typename T, int W>
__device__ __forceinline__ T seg_max(T v)
{
#pragma unroll
    for (int o = W / 2; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o, W));
    return v;
}
template <typename T, int W>
__device__ __forceinline__ T seg_sum(T v)
{
#pragma unroll
    for (int o = W / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o, W);
    return v;
}

// Running max |v| of the input screening, non-finite once a NaN or an Inf was added (it serves as
// the NaN/Inf flag as well). float32: max.NaN, one instruction per entry. float64: the high words
// compared as integers, two instructions against about eight for fmax on doubles (its NaN rules take
// selects and moves); the maximum is then |v| with the low word cleared, 2^-20 relative below the
// exact one: enough for the asymmetry ratio and exact in the exponent (the power-of-2 scale).
// seg<W>() reduces it over the W lanes of a segment.
template <typename T> struct AbsMax;
template <> struct AbsMax<float> {
    float m = 0;
    __device__ __forceinline__ void add(float v) { asm("max.NaN.f32 %0, %0, %1;" : "+f"(m) : "f"(fabsf(v))); }
    template <int W> __device__ __forceinline__ float seg() const
    {
        float r = m;
#pragma unroll
        for (int o = W / 2; o > 0; o /= 2) {
            const float t = __shfl_xor_sync(0xffffffffu, r, o, W);
            asm("max.NaN.f32 %0, %0, %1;" : "+f"(r) : "f"(t));
        }
        return r;
    }
};
template <> struct AbsMax<double> {
    int hi = 0;
    __device__ __forceinline__ void add(double v) { hi = max(hi, __double2hiint(v) & 0x7fffffff); }
    template <int W> __device__ __forceinline__ double seg() const
    {
        int r = hi;
#pragma unroll
        for (int o = W / 2; o > 0; o /= 2) r = max(r, __shfl_xor_sync(0xffffffffu, r, o, W));
        return __hiloint2double(r, 0);
    }
};

// The first right-hand side of the lane's rows q + W m into sb[q + W m] by cp.async, issued before
// RowsSlot::copy_matrices, whose wait covers it: these loads are in flight with the copy of A and
// hold no register. Used by ldlt.cu: read after the copy, b took a second round trip to memory (5 %
// of the stall samples of ldlt_solve_rolled<double, 64>). householder_pcr.cu keeps its order: there
// the same change cost float64 N = 32 15 % (more spills at its 128-register cap).
template <typename T, int W, int R>
__device__ __forceinline__ void copy_rhs0(const T* __restrict__ bsys, int nrhs, const bool (&own)[R], int q, T* sb)
{
#pragma unroll
    for (int m = 0; m < R; ++m)
        if (own[m] && nrhs > 0)
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                         :: "r"((unsigned)__cvta_generic_to_shared(sb + q + W * m)),
                            "l"(bsys + (size_t)(q + W * m) * nrhs), "n"(sizeof(T)) : "memory");
}

// Whether the right-hand sides of the lane's rows are finite: the first from sb (copy_rhs0), the
// others from bsys.
template <typename T, int W, int R>
__device__ __forceinline__ bool rhs_finite(const T* __restrict__ bsys, int nrhs, const bool (&own)[R], int q,
                                           const T* sb)
{
    bool fin = true;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        if (!own[m] || nrhs == 0) continue;
        fin = fin && isfinite(sb[q + W * m]);
        for (int c = 1; c < nrhs; ++c) fin = fin && isfinite(bsys[(size_t)(q + W * m) * nrhs + c]);
    }
    return fin;
}

// The end of the input screening of the register-row kernels (ldlt.cu, householder_pcr.cu): a
// NaN/Inf right-hand side (fin false) counts as an infinite entry, the maxima over the W lanes of the
// segment, and lane 0 writes the flags of solve_small when the system exists: NaN/Inf in the input,
// and max|A_ik - A_ki| / max|A|.
template <typename T, int W>
__device__ __forceinline__ void write_screening(AbsMax<T> amax, const AbsMax<T>& dasym, bool fin, int q, bool valid,
                                                bool* nonfinite, T* asym)
{
    if (!fin) amax.add(T(INFINITY));
    const T amx = amax.template seg<W>(), dsy = dasym.template seg<W>();
    if (valid && q == 0) {
        *nonfinite = !isfinite(amx);
        *asym = amx > T(0) ? dsy / amx : T(0);
    }
}

template <typename T, int N, int W>
struct RowsLayout {
    static_assert(32 % W == 0 && N <= 64, "W divides 32, N <= 64");
    static constexpr int R = (N + W - 1) / W;                 // rows per lane
    static constexpr int SPW = 32 / W;                        // systems per warp
    static constexpr int S = N | 1;                           // odd row stride
    static constexpr int V = 16 / sizeof(T);                  // elements per 16 bytes
    static constexpr int NB = 128 / sizeof(T);                // elements per 32 banks
    static constexpr int COL = (N + 3) / 4 * 4;               // column buffer, 16-byte padded
    // Shared memory: the copies of A of all systems of the block (PA elements each), then three
    // vectors of COL per system (PC each, 16-byte aligned; ldlt.cu: column, solution;
    // householder_pcr.cu: u (then x), q, beta). PA = W S (mod NB)
    // puts lane l's row on bank l S of the warp across its systems, and PC = V (mod 2 V) puts the
    // 16-byte column reads of the (up to 8) systems of a quarter warp on distinct banks.
    static constexpr int PA = N * S + ((W * S - N * S) % NB + NB) % NB;
    static constexpr int PC = 3 * COL + (V - 3 * COL % (2 * V) + 2 * V) % (2 * V);
    __host__ __device__ static constexpr int len(int m) { return W * (m + 1) < N ? W * (m + 1) : N; }  // entries of row block m
};

// Where a lane of a register-row kernel works (blocks of whole warps, 32 / W systems per warp): lane
// q of its segment, the system sys (valid: sys < batch), the system's shared copy sA (PA elements)
// and its three vectors vec (PC + XV elements, 16-byte aligned, after the copies of the block's
// systems; XV: room a kernel needs beyond the three vectors, a multiple of V).
template <typename T, int N, int W, int XV = 0>
struct RowsSlot {
    int q;
    long long sys;
    bool valid;
    T* sA;
    T* vec;
    __device__ __forceinline__ RowsSlot(T* smem, long long batch)
    {
        using L = RowsLayout<T, N, W>;
        const int lane = threadIdx.x & 31, slot = (threadIdx.x >> 5) * L::SPW + lane / W;
        const int slots = (blockDim.x / 32) * L::SPW;              // systems per block
        q = lane % W;
        sys = (long long)blockIdx.x * slots + slot;
        valid = sys < batch;
        sA = smem + (size_t)slot * L::PA;
        vec = smem + ((size_t)slots * L::PA + L::V - 1) / L::V * L::V + (size_t)slot * (L::PC + XV);
    }
    // The matrices of the warp's systems (those below batch; contiguous in A) into their shared
    // copies, by cp.async (sm_80+): every load of the warp is in flight at once and holds no
    // register (the loads into registers left the kernels waiting on HBM with few loads in flight).
    // Lane l copies entries l, l + 32, ... of the warp's block, so that each copy instruction moves
    // 32 contiguous entries. Until 2026-11-24 09:58 a lane copied whole rows where N neither divides 32 nor
    // is a multiple of it (32 rows per instruction); measured on the H100 against that (kernel ms,
    // 2^20 systems up to n = 24, else 2^18, outputs bitwise equal): LDL^T float64 n = 20 3.02 -> 2.57,
    // 24 4.20 -> 2.90, 40 4.62 -> 3.91, 48 6.29 -> 5.01, 56 7.34 -> 6.12, 60 7.92 -> 7.40; float32
    // n = 24 2.01 -> 1.63, 40 1.99 -> 1.56, 48 3.26 -> 2.39, 56 4.32 -> 3.43; Householder + PCR
    // float64 n = 24 9.58 -> 8.62, 48 15.7 -> 15.0; float32 n = 24 3.83 -> 3.27, 48 7.89 -> 7.15.
    // Returns with the copies complete and the warp synchronized.
    __device__ __forceinline__ void copy_matrices(const T* __restrict__ A, long long batch) const
    {
        using L = RowsLayout<T, N, W>;
        constexpr int NN = N * N;
        const int lane = threadIdx.x & 31;
        const long long first = sys - lane / W;
        const int nsys = (int)(batch - first < L::SPW ? batch - first : L::SPW);
        T* dst0 = sA - (lane / W) * L::PA;
        if constexpr ((32 % N == 0 || N % 32 == 0) && NN % 32 == 0) {
            // entry 32 k + lane of a matrix: row 32 k / N + lane / N, column 32 k % N + lane % N, so
            // one register offset per lane and constant offsets per k
            const T* src = A + (size_t)first * NN + lane;
            const unsigned dst = (unsigned)__cvta_generic_to_shared(dst0 + lane / N * L::S + lane % N);
            for (int sy = 0; sy < nsys; ++sy) {
#pragma unroll
                for (int k = 0; k < NN / 32; ++k)
                    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                                 :: "r"(dst + (unsigned)((sy * L::PA + 32 * k / N * L::S + 32 * k % N) * sizeof(T))),
                                    "l"(src + sy * NN + 32 * k), "n"(sizeof(T)) : "memory");
            }
        } else {
            // other N: entry e = 32 k + lane of the warp's block, its system, row and column stepped by
            // 32 entries (A32 rows and B32 columns, then the carries) instead of divided
            constexpr int A32 = 32 / N, B32 = 32 % N, K = (L::SPW * NN + 31) / 32;
            const T* src = A + (size_t)first * NN + lane;
            const unsigned dst = (unsigned)__cvta_generic_to_shared(dst0);
            const int total = nsys * NN;
            int s = lane / NN, row = lane % NN / N, c = lane % N;
#pragma unroll 8
            for (int k = 0; k < K; ++k) {
                if (32 * k + lane < total)
                    asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                                 :: "r"(dst + (unsigned)((s * L::PA + row * L::S + c) * sizeof(T))),
                                    "l"(src + 32 * k), "n"(sizeof(T)) : "memory");
                c += B32;
                row += A32;
                if (c >= N) { c -= N; ++row; }
                while (row >= N) { row -= N; ++s; }
            }
        }
        asm volatile("cp.async.wait_all;" ::: "memory");
        __syncwarp();
    }
};

// Row r of a symmetric matrix times x, from the lower triangle of its shared copy (row stride S):
// ri += sum_k A_rk x_k, rs += sum_k |A_rk|. x: shared, 16-byte aligned, padded to 16 bytes, read
// by 16-byte broadcasts. Used by the residual checks of ldlt.cu and householder.cuh.
template <typename T, int N, int S>
__device__ __forceinline__ void lower_row_dot(const T* sA, const T* x, int r, T& ri, T& rs)
{
    constexpr int V = 16 / sizeof(T);
#pragma unroll
    for (int k0 = 0; k0 < N; k0 += V) {
        T c[V];
        load16(x + k0, c);
#pragma unroll
        for (int t = 0; t < V; ++t) {
            const int k = k0 + t;
            if (k >= N) continue;
            const T v = sA[k <= r ? r * S + k : k * S + r];
            ri += v * c[t];
            rs += fabs(v);
        }
    }
}

// The relative residual ||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf) of one right-hand side of
// a system held as register rows (lane q of a segment of W owns rows q + W m; own[m]: the row
// exists): A from the lower triangle of its shared copy sA, x by 16-byte broadcasts from sx, where
// the caller put the lanes' xv and synchronized. Also writes xv to the output column xout (row stride
// nrhs). Returned to every lane of the segment; infinite where x or the quotient is not finite.
// Used by ldlt.cu and householder_pcr.cu.
template <typename T, int N, int S, int W, int R>
__device__ __forceinline__ T rows_residual(const T* sA, const T* sx, const T (&bm)[R], const T (&xv)[R],
                                           const bool (&own)[R], int q, T* xout, int nrhs)
{
    T rn = 0, an = 0, xn = 0, bn = 0;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        if (!own[m]) continue;
        const int i = q + W * m;
        T ri = -bm[m], rs = 0;
        lower_row_dot<T, N, S>(sA, sx, i, ri, rs);
        rn = fmax(rn, fabs(ri));
        an = fmax(an, rs);
        bn = fmax(bn, fabs(bm[m]));
        xn = fmax(xn, isfinite(xv[m]) ? fabs(xv[m]) : T(INFINITY));
        xout[(size_t)i * nrhs] = xv[m];
    }
    rn = seg_max<T, W>(rn);
    an = seg_max<T, W>(an);
    xn = seg_max<T, W>(xn);
    bn = seg_max<T, W>(bn);
    const T rel = rn == T(0) ? T(0) : rn / (an * xn + bn);
    return isfinite(xn) && isfinite(rel) ? rel : T(INFINITY);
}

// The threads of one system: W lanes. For N <= 32 a system lives inside one warp (N lanes when N
// divides 32, else a whole warp with idle lanes) and synchronizes with __syncwarp; for N > 32 it
// is N threads of a block and synchronizes with __syncthreads.
template <int N>
struct Group {
    static constexpr bool WARP = N <= 32;
    static constexpr int W = WARP ? ((32 % N == 0) ? N : 32) : N;
};

// The least power of two >= n.
__host__ __device__ constexpr int pow2_ceil(int n) { return n <= 1 ? 1 : 2 * pow2_ceil((n + 1) / 2); }

template <int N>
__device__ __forceinline__ void gsync()
{
    if constexpr (Group<N>::WARP) __syncwarp(); else __syncthreads();
}

// The chess-tournament steps of K players (papers 003, 004; orderings.round_robin): in step s seat k
// plays seat K-1-k, seat 0 stays and the others move one seat per step. tournament_player: the player
// in seat k of step s (constexpr: eigh_jacobi.cu unrolls the steps); tournament_seats: the table of a
// sweep, pair t of step s is (seat[s][2t], seat[s][2t + 1]), filled by the NT threads of a block.
__host__ __device__ constexpr int tournament_player(int K, int s, int k)
{
    return k == 0 ? 0 : 1 + (k - 1 + K - 1 - s) % (K - 1);
}
template <int K, int NT>
__device__ __forceinline__ void tournament_seats(unsigned char (*seat)[K])
{
    constexpr int H = K / 2;
    for (int i = threadIdx.x; i < (K - 1) * H; i += NT) {
        const int step = i / H, k1 = i % H;
        seat[step][2 * k1] = tournament_player(K, step, k1);
        seat[step][2 * k1 + 1] = tournament_player(K, step, K - 1 - k1);
    }
}

// Complex numbers for the kernels that take complex64/complex128 (the type name _kernels.py gives
// them): a plain pair, so that arrays of it load and store like numpy's, with the few operations the
// Hari-Zimmermann kernel needs. re, cj, abs2 also take real T, so one template serves both.
template <typename R>
struct cplx {
    R re, im;
    cplx() = default;
    __device__ __forceinline__ cplx(R r) : re(r), im(0) {}
    __device__ __forceinline__ cplx(R r, R i) : re(r), im(i) {}
};
template <typename R> __device__ __forceinline__ cplx<R> operator+(cplx<R> a, cplx<R> b) { return {a.re + b.re, a.im + b.im}; }
template <typename R> __device__ __forceinline__ cplx<R> operator-(cplx<R> a) { return {-a.re, -a.im}; }
template <typename R> __device__ __forceinline__ cplx<R> operator*(cplx<R> a, cplx<R> b)
{
    return {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};
}
template <typename R> __device__ __forceinline__ cplx<R> operator*(cplx<R> a, R s) { return {a.re * s, a.im * s}; }
template <typename R> __device__ __forceinline__ cplx<R> operator/(cplx<R> a, R s) { return {a.re / s, a.im / s}; }
template <typename R> __device__ __forceinline__ cplx<R>& operator*=(cplx<R>& a, R s) { a.re *= s; a.im *= s; return a; }

template <typename T> struct real_of { using type = T; static constexpr bool complex = false; };
template <typename R> struct real_of<cplx<R>> { using type = R; static constexpr bool complex = true; };

template <typename T> __device__ __forceinline__ T re(T x) { return x; }
template <typename R> __device__ __forceinline__ R re(cplx<R> x) { return x.re; }
template <typename T> __device__ __forceinline__ T cj(T x) { return x; }
template <typename R> __device__ __forceinline__ cplx<R> cj(cplx<R> x) { return {x.re, -x.im}; }
template <typename T> __device__ __forceinline__ T abs2(T x) { return x * x; }
template <typename R> __device__ __forceinline__ R abs2(cplx<R> x) { return x.re * x.re + x.im * x.im; }
template <typename T> __device__ __forceinline__ T absv(T x) { return fabs(x); }
template <typename R> __device__ __forceinline__ R absv(cplx<R> x) { return hypot(x.re, x.im); }
