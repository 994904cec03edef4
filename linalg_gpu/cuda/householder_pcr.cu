// Householder tridiagonalization + parallel cyclic reduction: x = Q T^{-1} Q^T b
// (paper 001, section 4: Algorithm 2 for A = Q T Q^T, eq. 10 for PCR in the stride form of the
// Fig. 9 eliminations). N threads per system, several systems per block; thread p owns equation p
// of the PCR.
// Outputs x (B, N, R), the PCR pivot ratio as condition estimate, the relative residual
// (residual_row: from the shared copy for N <= 32), ok (all of x finite) and the input screening.

#include "householder.cuh"

// PCR (eq. 10) in the stride form: at step s equation i eliminates its couplings to equations
// i - h and i + h (h = 2^s); after ceil(log2 N) steps z_i = v_i / d_i. These are the eliminations of
// pcr.py's Fig. 9 order with the equations left in place: the same operations on the same
// operands (in numpy the two orders gave bitwise equal z and pivots for n = 1 ... 64, both dtypes),
// without the permutations. N <= 32: the neighbours by shuffles, registers only; above, through
// sd, sc, sv in shared memory. d0, e0: T; v: the right-hand side, overwritten by z; piv_out: the
// final pivots d_i (the condition estimate).
template <typename T, int N>
__device__ void pcr_solve(const T* d0, const T* e0, T* v, T* sd, T* sc, T* sv, T* piv_out, int i, bool active)
{
    T d = active ? d0[i] : T(1), c = (active && i < N - 1) ? e0[i] : T(0), vi = active ? v[i] : T(0);
    const int base = (threadIdx.x & 31) - i;                    // lane of equation 0 (N <= 32)
#pragma unroll
    for (int h = 1; h < N; h *= 2) {
        const bool okl = i >= h, okr = i + h < N;              // c: coupling of i and i + h
        T cl, dl, vl, dr, vr, cr;
        if constexpr (Group<N>::WARP) {
            const int l = base + (okl ? i - h : i), r = base + (okr ? i + h : i);
            cl = __shfl_sync(0xffffffffu, c, l);
            dl = __shfl_sync(0xffffffffu, d, l);
            vl = __shfl_sync(0xffffffffu, vi, l);
            dr = __shfl_sync(0xffffffffu, d, r);
            vr = __shfl_sync(0xffffffffu, vi, r);
            cr = __shfl_sync(0xffffffffu, c, r);
        } else {
            if (active) { sd[i] = d; sc[i] = c; sv[i] = vi; }
            __syncthreads();
            const int l = okl ? i - h : i, r = okr ? i + h : i;
            cl = sc[l]; dl = sd[l]; vl = sv[l]; dr = sd[r]; vr = sv[r]; cr = sc[r];
            __syncthreads();
        }
        if (!okl) { cl = T(0); dl = T(1); vl = T(0); }
        if (!okr) { dr = T(1); vr = T(0); cr = T(0); }
        const T al = cl / dl, ga = c / dr;
        vi = vi - al * vl - ga * vr;                            // eq. (10)
        d = d - al * cl - ga * c;
        c = -ga * cr;                                           // coupling of i and i + 2h
    }
    if (active) { v[i] = vi / d; piv_out[i] = d; }
    gsync<N>();
}

// Blocks per SM for __launch_bounds__, that is a register cap. Swept on the H100 over 1, 4, 6, 8 blocks
// of 128 threads (2^20 systems, kernel): float32 64 registers (8 blocks; n = 32 20.7 ms uncapped,
// 14.2 ms); float64 64 registers for n <= 8 (1.34 -> 1.21 ms), 80 for n <= 16 (6.5 -> 5.0 ms), 128 for
// n <= 32 (38.8 -> 31.3 ms). n > 32 (256 threads) uncapped: every cap was slower.
template <typename T, int N>
constexpr int hh_min_blocks()
{
    if constexpr (N > 32) return 1;
    else if constexpr (sizeof(T) == 4) return 8;
    else return N <= 8 ? 8 : (N <= 16 ? 6 : 4);
}

template <typename T, int N>
__global__ void __launch_bounds__(Group<N>::WARP ? 128 : 256, hh_min_blocks<T, N>()) householder_pcr_solve(const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x,
                                      T* __restrict__ cond, T* __restrict__ resid, int* __restrict__ ok,
                                      int* __restrict__ nonfinite, T* __restrict__ asym,
                                      long long batch, int nrhs, int spb)
{
    using L = HHLayout<N>;
    constexpr int S = L::S, VL = L::VL;
    constexpr int PER = L::WL + 12 * VL;                        // shared elements per system
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    constexpr int G = Group<N>::W;                             // lanes per system
    const int local = threadIdx.x / G, i = threadIdx.x % G;
    const long long sys0 = (long long)blockIdx.x * spb;
    const int nsys = (int)min((long long)spb, batch - sys0);
    const bool active = local < nsys && i < N;
    T* W = smem + (size_t)local * PER;
    T* d = W + L::WL;  T* e = d + VL;  T* beta = e + VL;  T* tmp = beta + VL;   // tmp: 2 VL
    T* y = tmp + 2 * VL;  T* sd = y + VL;  T* sc = sd + VL;  T* sv = sc + VL;  T* piv = sv + VL;
    T* red = piv + VL;                                          // 2 VL: scratch of group_max

    stage_matrices<T, N, S, PER>(A + sys0 * N * N, smem, nsys);
    T bi_all[1] = {T(0)};
    const T* bi = active ? b + ((sys0 + local) * N + i) * nrhs : bi_all;
    screen_and_tridiagonalize<T, N, S>(W, bi, active ? nrhs : 1, d, e, beta, tmp, i, active,
                                       nonfinite + sys0 + local, asym + sys0 + local);

    const T* As = A + (sys0 + local) * N * N;
    T res_max = 0, cmax = 0;
    bool good = true;
    for (int r = 0; r < nrhs; ++r) {
        const T br = active ? b[((sys0 + local) * N + i) * nrhs + r] : T(0);
        if (active) y[i] = br;
        gsync<N>();
        apply_q<T, N, S>(W, beta, y, tmp, true, i, active);             // Q^T b
        pcr_solve<T, N>(d, e, y, sd, sc, sv, piv, i, active);
        apply_q<T, N, S>(W, beta, y, tmp, false, i, active);            // x = Q z
        // ||A x - b||_inf / (||A||_inf ||x||_inf + ||b||_inf), max and min |PCR pivot|: the maxima
        // over the lanes by shuffles (group_max); a non-finite x_i counts as |x_i| = inf
        T ri = -br, rs = 0, xa = 0, pa = 0, pb = -T(INFINITY);
        if (active) {
            const T xi = y[i];
            residual_row<T, N, S>(W, As, y, i, ri, rs);
            x[((sys0 + local) * N + i) * nrhs + r] = xi;
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
        gsync<N>();
    }
    if (active && i == 0) {
        long long s = sys0 + local;
        ok[s] = good ? 1 : 0;
        cond[s] = good ? cmax : T(INFINITY);
        resid[s] = res_max;
    }
}
