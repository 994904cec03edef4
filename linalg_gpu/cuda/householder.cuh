// Householder tridiagonalization (Abbas-Turki-Graillat, section 4, eqs. 8-14, the collaborative version of
// Algorithm 2), three ways: in registers with R rows per lane (tridiagonalize_rows: Householder +
// PCR, N <= 32 R; rolled loops for a warp per system, N > 32), in registers with one row per lane
// (screen_tridiagonalize_regs: the eigen kernels, N <= 32), or in registers with one row per thread
// of a block (tridiagonalize_row_regs: the eigen kernels, N > 32). Included by householder_pcr.cu and
// eigh_small.cu.
#pragma once

#include "common.cuh"

// The register-row reduction runs in rolled loops (rolled_hh_steps) for a warp per system and
// N > 16 (float64 17 <= N <= 32 has W = 32, R = 1: rolled since 2026-11-23 20:14, outputs bitwise equal,
// kernel 2^20 systems float64 N = 24 15.18 -> 14.12 ms, N = 32 19.06 -> 18.38; the unrolled code of
// N = 32 was 160 KB, rolled 50 KB; register caps of 3 blocks or none were slower: N = 32 21.1 and
// 27.5 ms); unrolled below. Measured on the H100 (Householder + PCR kernel, 2^18 systems, against the
// unrolled steps): float32 N = 40 9.86 -> 6.35 ms, 48 14.0 -> 8.62, 56 18.1 -> 10.5, 64 19.6 -> 11.0;
// float64 N = 40 14.0 -> 12.5, 48 22.4 -> 16.9, 56 45.5 -> 20.7, 64 67.0 -> 44.7. Phases of 8
// steps (4: float32 N = 64 11.0 ms, float64 48.2; 16: 11.1, 50.7) and Q^T / Q applied four steps
// per loop iteration (1: 11.7, 46.8; 2: 11.0, 45.7; 4: 10.8, 44.7).
template <int N, int W>
__host__ __device__ constexpr bool hh_rolled() { return W == 32 && N > 16; }
constexpr int HH_PHASE = 8, HH_APPLY_UNROLL = 4;

// The power of 2 that scales a matrix to max |A_ij| ~ 1 (no under/overflow in the squares of the
// reduction): 2^ex with ex from frexp(max |A_ij|), clamped so that 2^-ex and 2^ex are normal numbers
// (a float32 matrix below 2^-125 is scaled to about 2^-22, not to 1; one with max |A_ij| >= 2^126
// (float64 2^1022) to [1, 4): an unclamped 2^-127 is a float32 subnormal, which the multiplication
// flushed to 0 on an H100). The kernels multiply by 2^-ex: as exact as the division of the numpy
// twin, and one instruction instead of a division per entry.
template <typename T>
__device__ __forceinline__ int scale_exponent(T mx)
{
    int ex = 0;
    frexp((mx > T(0) && isfinite(mx)) ? mx : T(1), &ex);
    return min(max(ex, sizeof(T) == 4 ? -125 : -1021), sizeof(T) == 4 ? 126 : 1022);
}

// Sum over the lanes of one system, returned to every lane: shuffles inside a warp; for N a
// multiple of 32 (whole warps per system) shuffles in each warp, then the N / 32 partial sums in a
// fixed order through scratch; else through scratch[0..N] in shared memory. Every thread of the
// block must call it (it synchronizes). The warp-partial path replaced a serial sum over N = 64
// entries by thread 0: Householder + PCR at n = 64 133 -> 104 ms (float64, 2^18 systems, H100).
template <typename T, int N>
__device__ __forceinline__ T group_sum(T v, T* scratch, int i)
{
    if constexpr (Group<N>::WARP) {
#pragma unroll
        for (int o = Group<N>::W / 2; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o, Group<N>::W);
        return v;
    } else if constexpr (N % 32 == 0) {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v += __shfl_xor_sync(0xffffffffu, v, o);
        if ((i & 31) == 0) scratch[i / 32] = v;
        __syncthreads();
        T r = scratch[0];
#pragma unroll
        for (int w = 1; w < N / 32; ++w) r += scratch[w];
        __syncthreads();
        return r;
    } else {
        if (i < N) scratch[i] = v;
        __syncthreads();
        if (i == 0) {
            T s = 0;
            for (int k = 0; k < N; ++k) s += scratch[k];
            scratch[N] = s;
        }
        __syncthreads();
        T r = scratch[N];
        __syncthreads();
        return r;
    }
}

// Maximum over the lanes of one system, returned to every lane (as group_sum).
template <typename T, int N>
__device__ __forceinline__ T group_max(T v, T* scratch, int i)
{
    if constexpr (Group<N>::WARP) {
#pragma unroll
        for (int o = Group<N>::W / 2; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o, Group<N>::W));
        return v;
    } else if constexpr (N % 32 == 0) {
#pragma unroll
        for (int o = 16; o > 0; o /= 2) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, o));
        if ((i & 31) == 0) scratch[i / 32] = v;
        __syncthreads();
        T r = scratch[0];
#pragma unroll
        for (int w = 1; w < N / 32; ++w) r = fmax(r, scratch[w]);
        __syncthreads();
        return r;
    } else {
        if (i < N) scratch[i] = v;
        __syncthreads();
        if (i == 0) {
            T s = scratch[0];
            for (int k = 1; k < N; ++k) s = fmax(s, scratch[k]);
            scratch[N] = s;
        }
        __syncthreads();
        T r = scratch[N];
        __syncthreads();
        return r;
    }
}

// Block-wide: copy the block's nsys matrices, as given, into padded shared storage (PER apart), by
// cp.async (every load in flight at once, none through registers). Kernel ms, 2^17 systems, H100,
// against the copy through registers: eigh_small float32 N = 32 8.30 against 8.71, N = 64 86.1
// against 90.6; float64 N = 32 21.5 against 23.0, N = 64 209 against 219.
template <typename T, int N, int S, int PER>
__device__ void stage_matrices(const T* Ablk, T* smem, int nsys)
{
    for (int t = threadIdx.x; t < nsys * N * N; t += blockDim.x) {
        int s = t / (N * N), r = (t / N) % N, c = t % N;
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                     :: "r"((unsigned)__cvta_generic_to_shared(smem + (size_t)s * PER + r * S + c)), "l"(Ablk + t),
                        "n"(sizeof(T)) : "memory");
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    __syncthreads();
}

// Per system: the input screening of solve_small (NaN/Inf in A or in the right-hand sides bi
// of this lane, max |A_ik - A_ki| / max |A|), then W made symmetric from its lower triangle, or
// zero where the input is not finite. Lane 0 writes the flags. Returns whether the input is finite.
// Every thread of the block calls this.
template <typename T, int N, int S>
__device__ bool screen_and_symmetrize(T* W, const T* bi, int nrhs, T* scratch, int i, bool active,
                                      bool* nonfinite, T* asym)
{
    T amax = 0, dasym = 0, bad = 0;
    if (active) {
        for (int k = 0; k < N; ++k) {
            T v = W[i * S + k];
            if (!isfinite(v)) bad = T(1);
            amax = fmax(amax, fabs(v));
            dasym = fmax(dasym, fabs(v - W[k * S + i]));
        }
        for (int r = 0; r < nrhs; ++r) if (!isfinite(bi[r])) bad = T(1);
    }
    amax = group_max<T, N>(amax, scratch, i);
    dasym = group_max<T, N>(dasym, scratch, i);
    bad = group_max<T, N>(bad, scratch, i);
    if (active && i == 0) {
        *nonfinite = bad > T(0);
        *asym = amax > T(0) ? dasym / amax : T(0);
    }
    gsync<N>();
    if (active) for (int k = i + 1; k < N; ++k) W[i * S + k] = W[k * S + i];
    gsync<N>();
    const bool fin = !(bad > T(0));
    if (active && !fin) for (int k = 0; k < N; ++k) W[i * S + k] = T(0);
    gsync<N>();
    return fin;
}

// Shared-memory layout of one system's vectors in the kernels with one row per lane: each starts on
// 16 bytes (VL apart), so that screen_tridiagonalize_regs can broadcast u and q by 16-byte loads; WL
// is the padded N x S matrix.
template <int N>
struct HHLayout {
    static constexpr int S = N | 1;                   // odd row stride: column reads without conflicts
    static constexpr int VL = (N + 3) / 4 * 4;        // vector stride (4 floats or 2 doubles per load)
    static constexpr int WL = (N * S + 3) / 4 * 4;    // matrix stride
};

// sigma and 1 / b of a reduction step (eq. 11) of tridiagonalize_rows, on the scaled matrix (entries
// about 1, 0 < x <= 2 N where they are used): the hardware approximations, without the IEEE
// slow-path branch of sqrt and of the division. float32: rsqrt and __fdividef (about 1 ulp; without
// -ftz, CuPy's default, they take subnormal arguments; __fdividef measured 5 % faster than
// rcp.approx at n = 32). float64: the 20-bit MUFU estimate of rsqrt, two Newton steps and one
// correction (Markstein), within about 1 ulp; the .ftz estimate needs a normal argument, so x below
// 2^-900 is scaled by 2^200 first; 1 / b is fast_rcp. x = 0 gives NaN (unused: a step with head2 = 0
// does not use sigma).
template <typename T> __device__ __forceinline__ T step_sqrt(T x)
{
    if constexpr (sizeof(T) == 4) {
        return x * rsqrtf(x);
    } else {
        const bool tiny = x < 0x1p-900;
        const double xs = tiny ? x * 0x1p+200 : x;
        double y;
        asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(xs));
        y = fma(0.5 * y, fma(-xs * y, y, 1.0), y);
        y = fma(0.5 * y, fma(-xs * y, y, 1.0), y);
        double s = xs * y;
        s = fma(fma(-s, s, xs), 0.5 * y, s);
        return tiny ? s * 0x1p-100 : s;
    }
}
template <typename T> __device__ __forceinline__ T step_rcp(T x)
{
    if constexpr (sizeof(T) == 4) return __fdividef(1.0f, x); else return fast_rcp(x);
}

// Register rows (householder_pcr_solve, N <= 32 R): as in ldlt.cu, lane q of a segment of W lanes
// (W a power of two dividing 32) owns rows i = q + W m, m < R, of one system; own[m]: row i exists
// (and so does the system). A row lives in registers, NV long (16-byte padded with zeros).

// The rows from the shared copy sA (row stride S, filled by RowsSlot::copy_matrices) into registers,
// and the input screening of solve_small (NaN/Inf in A or in bsys: N x nrhs, max |A_ik - A_ki| /
// max |A|; lane 0 writes the flags when the system exists). w gets the rows of the symmetric
// matrix defined by the lower triangle; sA keeps the input.
template <typename T, int N, int S, int W, int R, int NV>
__device__ void load_screen_rows(const T* __restrict__ bsys, int nrhs, const T* sA, T (&w)[R][NV], int q,
                                 const bool (&own)[R], bool valid, bool* nonfinite, T* asym)
{
    AbsMax<T> amax, dasym;
    bool fin = true;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int i = q + W * m;
#pragma unroll
        for (int k = 0; k < NV; ++k) w[m][k] = T(0);
        if (own[m]) {
#pragma unroll
            for (int k = 0; k < N; ++k) {
                w[m][k] = sA[i * S + k];
                amax.add(w[m][k]);
            }
            for (int c = 0; c < nrhs; ++c) fin = fin && isfinite(bsys[(size_t)i * nrhs + c]);
        }
    }
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int i = q + W * m;
#pragma unroll
        for (int k = 0; k < N; ++k) {
            if (own[m] && k > i) {                              // A_ki from the lower triangle
                const T c = sA[k * S + i];
                dasym.add(w[m][k] - c);
                w[m][k] = c;
            }
        }
    }
    write_screening<T, W>(amax, dasym, fin, q, valid, nonfinite, asym);
}

// The scalars of reduction step r (eq. 11) from head2 = |x_0..r-2|^2 and xl = x_r-1: the reflector
// is the identity (act false: u = q = 0, inv_b = 0) when nothing below the subdiagonal is left.
template <typename T>
struct StepScalars {
    bool act;
    T alpha, inv_b, ul;                               // ul = u_r-1 = xl - alpha
};
template <typename T>
__device__ __forceinline__ StepScalars<T> step_scalars(T head2, T xl)
{
    const T sigma = step_sqrt(head2 + xl * xl);
    const bool act = head2 > T(0);
    const T alpha = !act ? T(0) : (xl >= T(0) ? -sigma : sigma);
    return {act, alpha, act ? step_rcp(sigma * sigma - alpha * xl) : T(0), xl - alpha};
}

// Eq. (12) of step r for the register rows of lane q, after p = W x: p = (W x - alpha W e_r-1) / b
// (wl: column r - 1 of the rows), u, q = p - B u with B = u.p / (2 b), and y <- H_r y (Y: the eigen
// kernels have no y); 0 for rows >= r.
template <typename T, int W, int R, bool Y>
__device__ __forceinline__ void step_vectors(const StepScalars<T>& st, T (&p)[R], const T (&x)[R], const T (&wl)[R],
                                             int r, int q, T (&u)[R], T (&qv)[R], T (&y)[R])
{
    T pu = 0, uy = 0;
#pragma unroll
    for (int m = 0; m < R; ++m) {
        const int i = q + W * m;
        p[m] = i < r ? fma(-st.alpha, wl[m], p[m]) * st.inv_b : T(0);
        u[m] = !st.act ? T(0) : (i < r - 1 ? x[m] : (i == r - 1 ? st.ul : T(0)));
        pu += p[m] * u[m];
    }
    if constexpr (Y) {
#pragma unroll
        for (int m = 0; m < R; ++m) uy += u[m] * y[m];
    }
    const T Bi = seg_sum<T, W>(pu) * st.inv_b / T(2);
    const T sy = Y ? seg_sum<T, W>(uy) * st.inv_b : T(0);
#pragma unroll
    for (int m = 0; m < R; ++m) {
        qv[m] = p[m] - Bi * u[m];
        if constexpr (Y) y[m] -= u[m] * sy;
    }
}

// The steps of tridiagonalize_rows in rolled loops, for a warp per system (W = 32, N > 16, R = 1 or
// 2; hh_rolled), and of screen_tridiagonalize_regs (R = 1, W lanes per system, Y false). Unrolled,
// the kernel of float32 N = 64 was 23.5k instructions and overflowed the instruction cache ("no
// instruction" was its largest stall, 2.7 of 7.1 cycles per instruction, Nsight Compute, H100);
// rolled, 8.8k. A rolled loop cannot index the registers by the step, so each
// row is kept reversed and shifted down one entry per step: at step r row i holds
// a[m][k] = W_i,r-k (k <= r), x of the step is a[m][0] and column r - 1 is a[m][1]. u and q are
// broadcast in the same order (su[k] = u_r-k, written by lane i at position r - i; the positions
// above r are kept 0, so the entries a row holds past r are only shifted). Steps J0 <= j < J1
// (r = N - 1 - j) of one phase; the loops run over the KMAX = N - J0 entries of its first step.
// The arithmetic is that of the unrolled steps, in the same order (W x summed over the columns
// ascending; the entries past r add exact zeros first), so both give the same T: the condition
// estimate of Householder + PCR, the ratio of the PCR pivots, moves with the last bits of T.
template <typename T, int N, int S, int W, int R, int NV, int J0, int J1, bool Y>
__device__ __forceinline__ void rolled_hh_steps(T (&a)[R][NV], T* sA, T* su, T* sq, T* beta, int q,
                                                const bool (&own)[R], T (&d)[R], T (&e)[R], T scale, T (&y)[R])
{
    constexpr int V = 16 / sizeof(T), COL = (N + 3) / 4 * 4, KMAX = N - J0, RMAX = N - 1 - J0;
#pragma unroll 1
    for (int j = J0; j < J1; ++j) {
        const int r = N - 1 - j;
        T x[R], u[R], p[R], qv[R], h = 0;
#pragma unroll
        for (int m = 0; m < R; ++m) {
            const int i = q + W * m;
            x[m] = i < r ? a[m][0] : T(0);
            h += i < r - 1 ? x[m] * x[m] : T(0);
            if (i <= r) su[r - i] = x[m];
            p[m] = T(0);
            if (i == r) d[m] = a[m][0] * scale;                // row r is final from step r on
        }
        if (q == 0 && r + 1 < COL) { su[r + 1] = T(0); sq[r + 1] = T(0); }
        __syncwarp();
        const T head2 = seg_sum<T, W>(h);
        T al = a[0][0];
#pragma unroll
        for (int m = 1; m < R; ++m) al = r - 1 >= W * m ? a[m][0] : al;
        const T xl = __shfl_sync(0xffffffffu, al, (r - 1) & (W - 1), W);
        const StepScalars<T> st = step_scalars(head2, xl);
#pragma unroll
        for (int k0 = (KMAX - 1) / V * V; k0 >= 0; k0 -= V) {  // W x, columns ascending (as unrolled:
            T c[V];                                             // the entries past r add exact zeros)
            load16(su + k0, c);
#pragma unroll
            for (int t = V - 1; t >= 0; --t)
#pragma unroll
                for (int m = 0; m < R; ++m)
                    if (k0 + t >= 1 && k0 + t < KMAX && W * m < RMAX) p[m] += a[m][k0 + t] * c[t];
        }
        T wl[R];
#pragma unroll
        for (int m = 0; m < R; ++m) wl[m] = a[m][1];
        step_vectors<T, W, R, Y>(st, p, x, wl, r, q, u, qv, y);
#pragma unroll
        for (int m = 0; m < R; ++m)
            if (q + W * m <= r) sq[r - q - W * m] = qv[m];
        __syncwarp();
#pragma unroll
        for (int k0 = 0; k0 < KMAX; k0 += V) {                 // eq. (13) and the shift
            T cu[V], cq[V];
            load16(su + k0, cu);
            load16(sq + k0, cq);
#pragma unroll
            for (int t = 0; t < V; ++t) {
                const int k = k0 + t;
                if (k < 1 || k >= KMAX) continue;
                const T ut = k == 1 ? st.ul : cu[t];
#pragma unroll
                for (int m = 0; m < R; ++m)
                    if (W * m < RMAX) a[m][k - 1] = fma(-qv[m], ut, fma(-u[m], cq[t], a[m][k]));
            }
        }
#pragma unroll
        for (int m = 0; m < R; ++m)                             // u_r in column r (for apply_q)
            if (own[m] && q + W * m < r) sA[(q + W * m) * S + r] = u[m];
        if (q == 0) beta[r] = st.inv_b;
#pragma unroll
        for (int m = 0; m < R; ++m)
            if (q + W * m == r - 1) e[m] = (st.act ? st.alpha : xl) * scale;
        __syncwarp();
    }
}

template <typename T, int N, int S, int W, int R, int NV, int J0, bool Y>
__device__ __forceinline__ void rolled_hh_phases(T (&a)[R][NV], T* sA, T* su, T* sq, T* beta, int q,
                                                 const bool (&own)[R], T (&d)[R], T (&e)[R], T scale, T (&y)[R])
{
    if constexpr (J0 < N - 2) {
        constexpr int J1 = J0 + HH_PHASE < N - 2 ? J0 + HH_PHASE : N - 2;
        rolled_hh_steps<T, N, S, W, R, NV, J0, J1, Y>(a, sA, su, sq, beta, q, own, d, e, scale, y);
        rolled_hh_phases<T, N, S, W, R, NV, J1, Y>(a, sA, su, sq, beta, q, own, d, e, scale, y);
    }
}

// The reduction of tridiagonalize_rows in rolled loops, on its scaled rows w (overwritten), and of
// screen_tridiagonalize_regs (R = 1, Y false): the rows reversed for rolled_hh_phases, its steps, then
// d and e of rows 0 and 1, which no step makes final.
template <typename T, int N, int S, int W, int R, int NV, bool Y>
__device__ __forceinline__ void rolled_tridiagonalize_rows(T (&w)[R][NV], T* sA, T* su, T* sq, T* beta, int q,
                                                           const bool (&own)[R], T (&d)[R], T (&e)[R], T scale,
                                                           T (&y)[R])
{
#pragma unroll
    for (int m = 0; m < R; ++m) {                               // reversed (register renaming)
        T t[NV];
#pragma unroll
        for (int k = 0; k < NV; ++k) t[k] = w[m][k];
#pragma unroll
        for (int k = 0; k < NV; ++k) w[m][k] = k < N ? t[N - 1 - k] : T(0);
    }
    rolled_hh_phases<T, N, S, W, R, NV, 0, Y>(w, sA, su, sq, beta, q, own, d, e, scale, y);
    if constexpr (N == 1) {
        d[0] = w[0][0] * scale;
    } else {                                                    // after the last step w[m][k] = W_i,1-k
        if (q == 0) { d[0] = w[0][1] * scale; e[0] = w[0][0] * scale; }
        if (q == 1) d[0] = w[0][0] * scale;
    }
}

// The reduction A = Q T Q^T (eqs. 8-14, the collaborative Algorithm 2) of the register rows w (from
// load_screen_rows). At step r (N-1 down to 2) x = row r left of the diagonal, which lane i holds
// as its own column r (symmetry); u and q are broadcast through the shared su, sq (16-byte aligned,
// COL = 4 ceil(N / 4) long, read by 16-byte loads that run past r into entries that are 0) and
// the rank-2 update (eq. 13) touches registers only; each broadcast and each shuffle serves the R
// rows of a lane. The matrix is scaled by a power of 2 to max |A_ij| ~ 1 (exact; no under/overflow
// in the squares). On exit: d[m] = T_ii and e[m] = T_i+1,i for row i = q + W m (0 past the end),
// u_r in column r of sA above the diagonal (the lower triangle is left as it was),
// beta[r] = 1 / b_r (0 where H_r = I) for r >= 2, and y <- Q^T y (eq. 14, the reflectors applied to
// one right-hand side as they are made: its sums run beside those of the step; as apply_q_rows).
template <typename T, int N, int S, int W, int R, int NV>
__device__ void tridiagonalize_rows(T (&w)[R][NV], T* sA, T* su, T* sq, T* beta, int q,
                                    const bool (&own)[R], T (&d)[R], T (&e)[R], T (&y)[R])
{
    constexpr int V = 16 / sizeof(T), COL = (N + 3) / 4 * 4;
    AbsMax<T> amax;
#pragma unroll
    for (int m = 0; m < R; ++m)
#pragma unroll
        for (int k = 0; k < N; ++k) amax.add(w[m][k]);
    const int ex = scale_exponent(amax.template seg<W>());      // (its exponent is exact)
    const T scale = ldexp(T(1), ex), unscale = ldexp(T(1), -ex);
#pragma unroll
    for (int m = 0; m < R; ++m) {
        d[m] = T(0);
        e[m] = T(0);
#pragma unroll
        for (int k = 0; k < N; ++k) w[m][k] *= unscale;
    }
    for (int k = q; k < COL; k += W) { su[k] = T(0); sq[k] = T(0); }   // entries past W R stay 0
    __syncwarp();
    if constexpr (hh_rolled<N, W>()) {
        rolled_tridiagonalize_rows<T, N, S, W, R, NV, true>(w, sA, su, sq, beta, q, own, d, e, scale, y);
    } else {
#pragma unroll
        for (int r = N - 1; r >= 2; --r) {
            // p = W u / b with u = x - alpha e_{r-1} (eq. 11) is computed as (W x - alpha W e_{r-1}) / b:
            // the product W x does not wait for head2, sigma and 1 / b, which are computed beside it.
            T x[R], u[R], p[R], qv[R], h = 0;
#pragma unroll
            for (int m = 0; m < R; ++m) {
                const int i = q + W * m;
                x[m] = i < r ? w[m][r] : T(0);                      // W[r][i] = W[i][r], x_{r-1} = xl
                h += i < r - 1 ? x[m] * x[m] : T(0);
                if (i < COL) su[i] = x[m];
                p[m] = T(0);
            }
            __syncwarp();
            const T head2 = seg_sum<T, W>(h);
            const T xl = __shfl_sync(0xffffffffu, w[(r - 1) / W][r], (r - 1) % W, W);
            const StepScalars<T> st = step_scalars(head2, xl);
#pragma unroll
            for (int k0 = 0; k0 < r; k0 += V) {                     // W x
                T c[V];
                load16(su + k0, c);
#pragma unroll
                for (int t = 0; t < V; ++t)
#pragma unroll
                    for (int m = 0; m < R; ++m) p[m] += w[m][k0 + t] * c[t];
            }
            T wl[R];
#pragma unroll
            for (int m = 0; m < R; ++m) wl[m] = w[m][r - 1];
            step_vectors<T, W, R, true>(st, p, x, wl, r, q, u, qv, y);
#pragma unroll
            for (int m = 0; m < R; ++m)
                if (q + W * m < COL) sq[q + W * m] = qv[m];
            __syncwarp();
#pragma unroll
            for (int k0 = 0; k0 < r; k0 += V) {                     // eq. (13), rows < r; su holds x,
                T cu[V], cq[V];                                     // u differs from it in entry r - 1
                load16(su + k0, cu);
                load16(sq + k0, cq);
#pragma unroll
                for (int t = 0; t < V; ++t) {
                    const T ut = k0 + t == r - 1 ? st.ul : cu[t];   // (where !act, u = q = 0 in registers)
#pragma unroll
                    for (int m = 0; m < R; ++m)
                        if (W * m < r) w[m][k0 + t] = fma(-qv[m], ut, fma(-u[m], cq[t], w[m][k0 + t]));
                }
            }
#pragma unroll
            for (int m = 0; m < R; ++m)                             // u_r in column r (for apply_q)
                if (W * m < r && own[m] && q + W * m < r) sA[(q + W * m) * S + r] = u[m];
            if (q == 0) beta[r] = st.inv_b;
            if (q == (r - 1) % W) e[(r - 1) / W] = (st.act ? st.alpha : xl) * scale;
            if (q == r % W) d[r / W] = w[r / W][r] * scale;        // row r is final from step r on
            __syncwarp();
        }
        if (q == 0) d[0] = w[0][0] * scale;
        if (N > 1 && q == 1 % W) d[1 / W] = w[1 / W][1 < NV ? 1 : 0] * scale;
        if (N > 1 && q == 0) e[0] = w[0][1 < NV ? 1 : 0] * scale;
    }
}

// w[LO + o] for 0 <= o < LEN (a power of two) and a run-time o: a tree of LEN - 1 selects on the bits
// of o (registers cannot be indexed at run time; entries past NV are never selected).
template <typename T, int NV, int LO, int LEN>
__device__ __forceinline__ T entry_at(const T (&w)[NV], int o)
{
    if constexpr (LEN == 1) return w[LO < NV ? LO : NV - 1];
    else {
        const T a = entry_at<T, NV, LO, LEN / 2>(w, o), b = entry_at<T, NV, LO + LEN / 2, LEN / 2>(w, o);
        return (o & (LEN / 2)) ? b : a;
    }
}

// Steps R1 >= r >= R0 of tridiagonalize_row_regs, a rolled loop. Step r's vector x (row r of W) is
// column r by symmetry: thread i takes x_i = W_ir from its own row (entry_at) and publishes it in sx
// with x_r-1 left out (sx: x_k for k < r - 1, zero from r - 1 on), and thread r - 1 publishes its row
// in sn (W_k,r-1 for p, and x_r-1 = W_r-1,r). Every thread then forms head2 = |sx|^2 and the step's
// scalars itself (the same sum in the same order on every thread), in the loop of p = W u / b =
// (W sx + W_:,r-1 u_r-1) / b (eq. 12), and publishes u_i, p_i in su, sp for u.p and the rank-2
// update. (The owner of row r formed x and head2 alone while the block waited: Nsight Compute,
// eigh_small<float, 64>, 16 % of the warps' stall samples on or behind it.) Two barriers per step: sx
// and sn are read only between them, su and sp only after the second. Columns k >= r of a step are
// untouched (u_k = p_k = 0 there), so the loops stop at KV = R1 rounded up to V: the columns the
// phase's first step has (row_regs_phases). P: loads per pace_loads. NW > 0 (N = 32 NW: every warp
// holds threads of one system): u.p by a butterfly over each warp (all lanes get the same sum), the NW
// warp sums through sw, instead of every thread's loop over su and sp (H100, 2^17 systems, kernel ms:
// eigh_small float32 N = 64 29.90 -> 28.92, float64 83.61 -> 80.48; eigenvalues within 2.5 eps |A|).
template <typename T, int S, int NV, int R1, int R0, int P, int NW>
__device__ __forceinline__ void row_regs_steps(T (&w)[NV], T* W, T* e, T* beta, T* sx, T* sn, T* su, T* sp, T* sw,
                                               int i, bool active)
{
    constexpr int V = 16 / sizeof(T), KV = (R1 + V - 1) / V * V, KN = (R1 + V) / V * V;
#pragma unroll 1
    for (int r = R1; r >= R0; --r) {
        const T xi = entry_at<T, NV, R0, pow2_ceil(R1 - R0 + 1)>(w, r - R0);
        const bool in = active && i < r;
        sx[i] = in && i < r - 1 ? xi : T(0);
        if (active && i == r - 1) {                      // row r - 1 through column r
#pragma unroll
            for (int k = 0; k < KN; ++k) sn[k] = w[k];
        }
        __syncthreads();
        T ui = 0, pi = 0, inv_b = 0;
        if (in) {
            T h4[4] = {T(0), T(0), T(0), T(0)};         // head2 in four partial sums
#pragma unroll
            for (int k0 = 0; k0 < KV; k0 += V) {
                T c[V];
                load16(sx + k0, c);
#pragma unroll
                for (int t = 0; t < V; ++t) {
                    h4[(k0 + t) % 4] += c[t] * c[t];
                    pi += w[k0 + t] * c[t];
                }
                pace_loads<T, P>(k0);
            }
            const T xl = sn[r];
            const StepScalars<T> st = step_scalars((h4[0] + h4[1]) + (h4[2] + h4[3]), xl);
            const T ul = st.act ? st.ul : T(0);          // (act false: x_k = 0 for k < r - 1, so u = 0)
            ui = i < r - 1 ? xi : ul;
            inv_b = st.inv_b;
            pi = fma(sn[i], ul, pi) * inv_b;
            W[i * S + r] = ui;                           // u_r in column r (for apply_q)
            if (i == r - 1) {
                beta[r] = st.inv_b;
                e[r - 1] = st.act ? st.alpha : xl;
            }
        }
        su[i] = ui;
        sp[i] = pi;
        T up = 0;                                        // u.p
        if constexpr (NW > 0) {
            T part = ui * pi;
#pragma unroll
            for (int o = 16; o > 0; o /= 2) part += __shfl_xor_sync(0xffffffffu, part, o);
            if (i % 32 == 0) sw[i / 32] = part;
            __syncthreads();
#pragma unroll
            for (int q = 0; q < NW; ++q) up += sw[q];
        } else {
            __syncthreads();
#pragma unroll
            for (int k0 = 0; k0 < KV; k0 += V) {
                T c[V], g[V];
                load16(su + k0, c);
                load16(sp + k0, g);
#pragma unroll
                for (int t = 0; t < V; ++t) up += c[t] * g[t];
                pace_loads<T, P>(k0);
            }
        }
        // W -= q u^T + u q^T (eq. 13) with q = p - B u, B = u.p / (2b): row i -= (p_i - 2 B u_i) u^T + u_i p^T
        const T ci = pi - up * inv_b * ui;
        if (ui != T(0) || ci != T(0)) {
#pragma unroll
            for (int k0 = 0; k0 < KV; k0 += V) {
                T c[V], g[V];
                load16(su + k0, c);
                load16(sp + k0, g);
#pragma unroll
                for (int t = 0; t < V; ++t) w[k0 + t] -= ci * c[t] + ui * g[t];
                pace_loads<T, P>(k0);
            }
        }
    }
}

// Steps per phase of tridiagonalize_row_regs. Each phase is another copy of the loops, and the
// eigen kernels above N = 32 wait on the instruction cache (Nsight Compute, eigh_small<float, 64>, one
// system per block: "no instruction" 16.5 % of the stall samples with one full-width loop, 24.4 % with
// phases of 32); shorter phases stop their loops sooner and select x_i from fewer entries. Measured on
// the H100 (eigh_small, 2^17 systems, at _gpu._systems_per_block's blocks; kernel ms, phases of 8 / 16
// / 32): N = 33 9.92 / 10.20 / 9.49, N = 40 11.13 / 11.37 / 12.03, N = 48 18.82 / 18.79 / 18.94,
// N = 56 26.94 / 26.81 / 27.66, N = 64 31.34 / 30.97 / 31.68.
template <int N>
__host__ __device__ constexpr int row_regs_phase() { return N > 40 ? 16 : 8; }

// The steps of tridiagonalize_row_regs from r = R1 down to 2, in phases of row_regs_phase steps.
template <typename T, int N, int S, int NV, int R1>
__device__ __forceinline__ void row_regs_phases(T (&w)[NV], T* W, T* e, T* beta, T* sx, T* sn, T* su, T* sp, T* sw,
                                                int i, bool active)
{
    if constexpr (R1 >= 2) {
        constexpr int R0 = R1 - row_regs_phase<N>() + 1 > 2 ? R1 - row_regs_phase<N>() + 1 : 2;
        row_regs_steps<T, S, NV, R1, R0, pace_every<N>(), N % 32 == 0 ? N / 32 : 0>(w, W, e, beta, sx, sn, su, sp,
                                                                                   sw, i, active);
        row_regs_phases<T, N, S, NV, R0 - 1>(w, W, e, beta, sx, sn, su, sp, sw, i, active);
    }
}

// W: N x S working copy of the symmetric matrix (full), reduced to tridiagonal form (eq. 11-13) with
// thread i holding row i in registers (above N = 32: the system's N threads meeting at __syncthreads).
// Step r: thread i < r takes x_i (column r of its row), forms u (eq. 11) and p_i = (W u)_i / b
// (eq. 12) and broadcasts u_i, p_i through tmp, tmp + VL (row_regs_steps); every thread takes u.p from the two
// vectors (for N a multiple of 32 from warp sums), then its row's rank-2 update W -= q u^T + u q^T with q = p -
// (u.p / 2b) u (eq. 13) touches registers only; the steps run in phases (row_regs_phases). (The version with W in
// shared memory was bound by its shared-memory traffic: H100, 2^17 systems, float32 N = 64 19.7 ms for
// the load, screening and reduction, float64 51.7 ms. float64 kept it until the owner's step was gone;
// eigh_small float64, kernel ms, shared -> register rows: N = 33 22.99 -> 18.64, 40 36.60 -> 26.47,
// 48 54.28 -> 42.05, 56 101.2 -> 79.05, 64 111.1 -> 89.60.) On exit: d[k] = T_kk, e[k] = T_k+1,k,
// column r of W (rows < r) holds u_r and beta[r] = 1/b_r (0 where H_r = I); the rest of W is left as
// it was. tmp: 4 VL scratch (x and row r - 1 in the last two; for N a multiple of 32 a fifth for the
// warp sums of u.p), 16-byte aligned. All threads of the block call this.
template <typename T, int N, int S>
__device__ void tridiagonalize_row_regs(T* W, T* d, T* e, T* beta, T* tmp, int i, bool active)
{
    constexpr int V = 16 / sizeof(T), NV = (N + V - 1) / V * V, VL = HHLayout<N>::VL;
    T* su = tmp;          // u, zero from r on (first the rows' maxima)
    T* sp = tmp + VL;     // p, zero from r on
    T* sx = tmp + 2 * VL; // x without x_r-1, zero from r - 1 on
    T* sn = tmp + 3 * VL; // row r - 1
    T* sw = tmp + 4 * VL; // the warps' sums of u.p (N = 32 NW)
    T w[NV], m = 0;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        w[k] = active && k < N ? W[i * S + k] : T(0);
        m = fmax(m, fabs(w[k]));
    }
    su[i] = active ? m : T(0);
    if (i == 0)
        for (int k = N; k < NV; ++k) { su[k] = T(0); sp[k] = T(0); sx[k] = T(0); }   // (never written again)
    __syncthreads();
    // scale by a power of 2 to max |W_ij| ~ 1 (the reflectors do not depend on it): no under/overflow in squares
    m = 0;
#pragma unroll
    for (int k0 = 0; k0 < NV; k0 += V) {
        T c[V];
        load16(su + k0, c);
#pragma unroll
        for (int t = 0; t < V; ++t) m = fmax(m, c[t]);
    }
    const int ex = scale_exponent(m);
    const T scale = ldexp(T(1), ex), unscale = ldexp(T(1), -ex);
#pragma unroll
    for (int k = 0; k < NV; ++k) w[k] *= unscale;
    row_regs_phases<T, N, S, NV, N - 1>(w, W, e, beta, sx, sn, su, sp, sw, i, active);
    __syncthreads();
    if (active) {
        T di = 0;
#pragma unroll
        for (int k = 0; k < NV; ++k) di = k == i ? w[k] : di;
        d[i] = di * scale;
        if (i == 0) {
            beta[0] = 0;
            if (N > 1) beta[1] = 0;
        }
        if (i == 1) e[0] = w[0];
    }
    __syncthreads();
    if (active && i + 1 < N) e[i] *= scale;
    __syncthreads();
}

// Row i of the residual: ri += (A y)_i and rs += sum_k |A_ik|, A the symmetric matrix defined by the
// lower triangle of the input. N <= 32: from the shared copy, whose lower triangle
// screen_tridiagonalize_regs leaves unchanged, by lower_row_dot (y 16-byte aligned, VL long); above,
// from global memory (the block version overwrites the copy), a plain loop (unrolled, its global
// loads took 128 registers against 40-80).
template <typename T, int N, int S>
__device__ __forceinline__ void residual_row(const T* Ws, const T* Ag, const T* y, int i, T& ri, T& rs)
{
    if constexpr (Group<N>::WARP) {
        lower_row_dot<T, N, S>(Ws, y, i, ri, rs);
    } else {
#pragma unroll 1
        for (int k = 0; k < N; ++k) {
            const T aik = k <= i ? Ag[i * N + k] : Ag[k * N + i];
            ri += aik * y[k];
            rs += fabs(aik);
        }
    }
}

// The eigen kernels, N <= 32: the input screening of screen_and_symmetrize and the reduction of
// tridiagonalize with lane i holding row i in registers: the rolled steps of tridiagonalize_rows
// (rolled_tridiagonalize_rows, R = 1, Group<N>::W lanes per system, no right-hand side), u and q
// broadcast by 16-byte loads from tmp (2 VL long). The lane reads row and column i of the staged
// copy W once: they give the screening and the row of the matrix defined by the lower triangle; a
// system whose input is not finite is reduced as zero. On exit, as tridiagonalize_row_regs: d, e, beta,
// u_r in column r of W above the diagonal; the lower triangle of W is the input. bi: the nrhs
// right-hand sides of row i. Returns whether the input is finite.
// Unrolled (until 2026-11-23 20:14), the reduction was 5.6k of the 13.2k instructions of
// eigh_small<float, 32>, straight code run once per system, and "no instruction" (instruction cache
// misses) was 44 % of the kernel's stall samples; float64 N = 32: 16.8k instructions, 58 %. With the
// rolled steps, the rolled back-transformation (apply_q_columns) and two merge_row bounds: 5.4k and
// 7.8k instructions, 6 % (Nsight Compute, H100). Kernel ms, 2^17 systems, before -> after (with the
// systems per block of _gpu._systems_per_block, before the cp.async copy of stage_matrices): float32
// N = 16 1.91 -> 1.81, N = 24 8.38 -> 6.87, N = 32 11.99 -> 8.71; float64 N = 16 3.72 -> 3.40, N = 24
// 15.9 -> 11.7, N = 32 33.9 -> 23.0.
template <typename T, int N, int S>
__device__ bool screen_tridiagonalize_regs(T* W, const T* bi, int nrhs, T* d, T* e, T* beta, T* tmp,
                                           int i, bool active, bool* nonfinite, T* asym)
{
    constexpr int V = 16 / sizeof(T);
    constexpr int NV = (N + V - 1) / V * V;           // row length in registers, 16-byte padded
    T w[NV];
    T amax = 0, dasym = 0, bad = 0;
#pragma unroll
    for (int k = 0; k < NV; ++k) {
        const T vr = (active && k < N) ? W[i * S + k] : T(0), vc = (active && k < N) ? W[k * S + i] : T(0);
        if (!isfinite(vr)) bad = T(1);
        amax = fmax(amax, fabs(vr));
        dasym = fmax(dasym, fabs(vr - vc));
        w[k] = k <= i ? vr : vc;
    }
    if (active) for (int r = 0; r < nrhs; ++r) if (!isfinite(bi[r])) bad = T(1);
    amax = group_max<T, N>(amax, tmp, i);
    dasym = group_max<T, N>(dasym, tmp, i);
    bad = group_max<T, N>(bad, tmp, i);
    if (active && i == 0) {
        *nonfinite = bad > T(0);
        *asym = amax > T(0) ? dasym / amax : T(0);
    }
    const bool fin = !(bad > T(0));
#pragma unroll
    for (int k = 0; k < NV; ++k) w[k] = fin ? w[k] : T(0);
    T m = 0;
#pragma unroll
    for (int k = 0; k < N; ++k) m = fmax(m, fabs(w[k]));
    m = group_max<T, N>(m, tmp, i);
    const int ex = scale_exponent(m);
    const T scale = ldexp(T(1), ex), unscale = ldexp(T(1), -ex);
#pragma unroll
    for (int k = 0; k < N; ++k) w[k] *= unscale;
    // the reduction in rolled loops
    constexpr int G = Group<N>::W;
    T* su = tmp;                                      // broadcast buffers: u, then q (VL each)
    T* sq = tmp + HHLayout<N>::VL;
    for (int k = i; k < HHLayout<N>::VL; k += G) { su[k] = T(0); sq[k] = T(0); }
    __syncwarp();
    T a[1][NV], dr[1] = {T(0)}, er[1] = {T(0)}, y[1] = {T(0)};
    const bool own[1] = {active};
#pragma unroll
    for (int k = 0; k < NV; ++k) a[0][k] = w[k];
    rolled_tridiagonalize_rows<T, N, S, G, 1, NV, false>(a, W, su, sq, beta, i, own, dr, er, scale, y);
    if (active) d[i] = dr[0];
    if (active && i + 1 < N) e[i] = er[0];
    if (active && i == 0) { beta[0] = 0; if (N > 1) beta[1] = 0; }
    __syncwarp();
    return fin;
}

// The input screening and the reduction to tridiagonal form with one row per lane (the eigen
// kernels), one system per group of Group<N>::W lanes, on the matrix that stage_matrices put into
// W. N <= 32: screen_tridiagonalize_regs; above: screen_and_symmetrize and tridiagonalize_row_regs. bsys:
// the system's nrhs right-hand sides in global memory; active: the system exists and lane i has a row.
// A system whose input is not finite is reduced as the zero matrix (NaN would derail the index
// arithmetic of the divide and conquer); returns whether the input is finite. Every thread of the
// block calls this.
template <typename T, int N, int S>
__device__ bool screen_and_tridiagonalize(const T* bsys, int nrhs, T* W, T* d, T* e, T* beta, T* tmp, int i,
                                          bool active, bool* nonfinite, T* asym)
{
    if constexpr (Group<N>::WARP) {
        return screen_tridiagonalize_regs<T, N, S>(W, bsys + (size_t)i * nrhs, nrhs, d, e, beta, tmp, i, active,
                                                   nonfinite, asym);
    } else {
        const bool fin = screen_and_symmetrize<T, N, S>(W, bsys + (size_t)i * nrhs, nrhs, tmp, i, active,
                                                        nonfinite, asym);
        tridiagonalize_row_regs<T, N, S>(W, d, e, beta, tmp, i, active);
        return fin;
    }
}

// y <- Q^T y (transpose) or Q y, Q = H_{N-1} ... H_2, u_r in column r of W (rows < r).
// Lane i only ever touches y[i]; the lanes meet in the reductions.
template <typename T, int N, int S>
__device__ void apply_q(const T* W, const T* beta, T* y, T* tmp, bool transpose, int i, bool active)
{
    for (int t = 2; t < N; ++t) {
        const int r = transpose ? N + 1 - t : t;         // Q^T: r = N-1 .. 2; Q: r = 2 .. N-1
        const T ur = (active && i < r) ? W[i * S + r] : T(0);
        const T s = group_sum<T, N>(active ? ur * y[i] : T(0), tmp, i) * beta[r];
        if (active && i < r) y[i] -= ur * s;             // beta_r = 0: H_r = I
    }
    gsync<N>();
}

// y <- Q^T y (TRANSPOSE) or Q y for the register rows: lane q holds y_i of its rows i = q + W m.
// Q = H_{N-1} ... H_2 with u_r in column r of sA (rows < r) and beta[r] = 1 / b_r (eq. 14).
template <bool TRANSPOSE, typename T, int N, int S, int W, int R>
__device__ __forceinline__ void apply_q_rows(const T* sA, const T* beta, T (&y)[R], int q, const bool (&own)[R])
{
    constexpr int UNROLL = hh_rolled<N, W>() ? HH_APPLY_UNROLL : N;
#pragma unroll UNROLL
    for (int t = 2; t < N; ++t) {
        const int r = TRANSPOSE ? N + 1 - t : t;
        T u[R], s = 0;
#pragma unroll
        for (int m = 0; m < R; ++m) {
            u[m] = (W * m < r && own[m] && q + W * m < r) ? sA[(q + W * m) * S + r] : T(0);
            s += u[m] * y[m];
        }
        s = seg_sum<T, W>(s) * beta[r];
#pragma unroll
        for (int m = 0; m < R; ++m) y[m] -= u[m] * s;
    }
}
