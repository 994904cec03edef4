// Eigen-decomposition of tiny symmetric matrices (N <= 12), one thread per system: the two-sided
// parallel Jacobi method of Torun et al. (eqs. 3-5, 8-10) with the chess-tournament ordering (eq. 7),
// the matrix and the eigenvectors in registers. eigh_small takes it on the GPU for n <= 12 in float32
// and n <= 10 in float64 (_gpu.EIGH_JACOBI_MAX_N; the "thread per system for tiny n" of the kernel
// design); numpy twin: linalg_gpu/small/jacobi_eigh.py.
// At n = 8 one thread holds the 36 entries of the upper triangle and the 64 of V, and no step needs a
// shuffle or a barrier (eigh_small.cu gives a system N threads that meet in reductions at every step).
// Measured (H100, 2^17 systems, kernel, one process): float32 n = 8 0.182 ms against 0.404 for
// eigh_small.cu, float64 0.443 against 0.841 (2026-11-23 09:39); above n = 8 (2026-11-24 08:46, 128 threads per block,
// random and SPD matrices): float32 n = 9 0.293 against 1.898, n = 10 0.375 / 1.938, n = 11 0.783 / 2.100
// (255 registers and 136 bytes of spills), n = 12 1.025 / 2.441; float64 n = 9 1.146 / 3.704 (560 bytes of
// spills), n = 10 1.645 / 3.679, n = 11 4.436 / 4.371, n = 12 5.591 / 4.251. eigh_small.cu gives n = 9 ... 16
// a whole warp per system (32 is not a multiple of n), so its time barely moves from n = 9 to 16.
//
// Per system: the screening of eigh_small.cu (NaN/Inf in A, max |A_ik - A_ki| / max |A|), the
// symmetric matrix of the lower triangle scaled by a power of 2 to max |A_ij| ~ 1 (exact), then
// sweeps of N - 1 steps (N steps for odd N) of disjoint pairs (i, j), i < j:
//   rotate when |a_ij| > tol sqrt(|a_ii|) sqrt(|a_jj|), or, where a_ii a_jj = 0, |a_ij| > tol ||A||_F
//   (tol = eps: the relative test of Demmel & Veselic, as linalg_gpu.jacobi.klt);
//   theta = (a_jj - a_ii) / (2 a_ij), t = sgn(theta) / (|theta| + sqrt(theta^2 + 1)),
//   c = 1 / sqrt(1 + t^2), s = t c (eq. 5; computed as in jacobi_rotation); a_ii -= t a_ij,
//   a_jj += t a_ij, a_ij = 0;
//   the entries between two pairs: rows by J^T first (eq. 8), then columns by J (eq. 9); V <- V J (eq. 10);
// until a sweep rotates nothing (or JACOBI_MAX_SWEEPS). The eigenvalues are sorted ascending
// (stable, as numpy.argsort(kind="stable")) with their columns of V.
// The reciprocal square roots are the hardware approximations (float32: about 1 ulp; float64: the
// estimate and two Newton steps), and the threshold's square root is an estimate (about 2^-22
// relative): it only moves a rotation that sits on the threshold.

#include "householder.cuh"

// Systems (threads) per block; the launcher (small/_gpu.py, _jacobi_threads) uses the same. Measured
// (H100, 2^17 systems, n = 8, kernel ms on SPD / random matrices): float32 256 threads 0.166 / 0.154, 128
// 0.195 / 0.189 (both 128 registers, 16 warps per SM); float64 128 threads 0.511 / 0.462, 64 0.500 / 0.466,
// 256 0.518 / 0.511 (250 registers; capped at 168 it spilled 472 bytes: 0.878 / 0.999). float32 above
// N = 8: 128 (a cap of 255 registers: at 128, n = 9 spilled 2.4 KB).
template <typename T, int N> __host__ __device__ constexpr int jacobi_threads()
{
    return sizeof(T) == 4 && N <= 8 ? 256 : 128;
}
constexpr int JACOBI_MAX_SWEEPS = 30; // n = 8, random and SPD: 5-6 in float64, 4-5 in float32 (twin: MAX_SWEEPS)

// Pair k of step s of the tournament of K players (tournament_player, common.cuh) as (p, q), p < q
// (q = K - 1 >= N: the dummy's pair).
__host__ __device__ constexpr void tournament_pair(int K, int s, int k, int& p, int& q)
{
    const int a = tournament_player(K, s, k), b = tournament_player(K, s, K - 1 - k);
    p = a < b ? a : b;
    q = a < b ? b : a;
}

// The rare paths of the rotation (tiny pivots) out of line: inlined into the 28 rotations of a sweep they
// made eigh_jacobi<double, 8> 9416 instructions instead of 7840, and "no instruction" was a quarter of its
// stall samples (Nsight Compute, H100). Kernel (2^17 systems, n = 8, H100, one process): float64 0.450 ->
// 0.423 ms, float32 0.220 -> 0.212 ms; the outputs bitwise equal.
template <typename T> __device__ __noinline__ T threshold_scale_tiny(T x, T y, T p)
{
    return p == T(0) ? T(0) : sqrt(fabs(x)) * sqrt(fabs(y));
}
template <typename T> struct Pair { T d, u; };
template <typename T> __device__ __noinline__ Pair<T> scale_pair(T d, T u, T m)
{
    int e;
    frexp(m, &e);
    return {ldexp(d, -e), ldexp(u, -e)};
}

// sqrt(|x|) sqrt(|y|) to about 2^-22 relative, for the rotation threshold (0 where x y = 0). float64
// from the estimate of 1 / sqrt(|x y|) where x y is a normal number (the .ftz estimate needs one).
template <typename T> __device__ __forceinline__ T threshold_scale(T x, T y)
{
    if constexpr (sizeof(T) == 4) {
        const float ax = fabsf(x), ay = fabsf(y);
        return (ax > 0.f ? ax * rsqrtf(ax) : 0.f) * (ay > 0.f ? ay * rsqrtf(ay) : 0.f);
    } else {
        const double p = fabs(x * y);
        if (!(p >= 0x1p-1000)) return threshold_scale_tiny(x, y, p);                  // (rare)
        double r;
        asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(p));
        return p * r;
    }
}

// 1 / sqrt(x) for a normal x > 0: float32 rsqrtf; float64 the estimate and two Newton steps.
template <typename T> __device__ __forceinline__ T rotation_rsqrt(T x)
{
    if constexpr (sizeof(T) == 4) {
        return rsqrtf(x);
    } else {
        double y;
        asm("rsqrt.approx.ftz.f64 %0, %1;" : "=d"(y) : "d"(x));
        y = fma(0.5 * y, fma(-x * y, y, 1.0), y);
        return fma(0.5 * y, fma(-x * y, y, 1.0), y);
    }
}

// Whether the pair (i, j) rotates: |a_ij| > tol sqrt(|a_ii|) sqrt(|a_jj|), or |a_ij| > abs_thr where a_ii a_jj = 0
// (jacobi_step tests every pair of a step first and computes the angles only when a system of the warp rotates:
// the last sweep, which rotates nothing, and the late steps skip the reciprocal square roots of the angles).
// Measured (H100, 2^17 systems, kernel ms, one process, outputs bitwise equal) against the angles computed
// with the thresholds: float64 n = 8 0.386 -> 0.357, n = 6 0.143 -> 0.127, n = 4 0.047 -> 0.042; float32 n = 8
// 0.145 -> 0.138, n = 6 0.068 -> 0.066.
template <typename T>
__device__ __forceinline__ bool rotates(T aii, T ajj, T aij, T tol, T abs_thr)
{
    const T scale = threshold_scale(aii, ajj);
    return fabs(aij) > (scale > T(0) ? tol * scale : abs_thr);
}

// The rotation of the pair (i, j) from a_ii, a_jj, a_ij (eq. 5); the identity (c = 1, s = t = 0,
// rot false) where `rot` (rotates) is false. With d = a_jj - a_ii and u = 2 a_ij, eq. 5's root of
// t^2 + 2 theta t - 1 = 0 (theta = d / u, |t| <= 1) is t = sgn(d) u / w, w = |d| + r, r = sqrt(d^2 + u^2),
// and 1 + t^2 = 2 r / w, so that c = w / sqrt(2 r w), s = sgn(d) u / sqrt(2 r w) and 1 / w = 2 r / (2 r w):
// two reciprocal square roots, where theta = d / u, sqrt(theta^2 + 1), 1 / (|theta| + ...) and
// 1 / sqrt(1 + t^2) took four chains of estimate and Newton steps (sgn(0) = +1). d and u (at most 2 on
// the scaled matrix) are scaled by a power of 2 to max(|d|, |u|) in [1/2, 1) where d^2 + u^2 would not be
// a normal number (rare: tiny pivots of a graded matrix). Measured (H100, 2^17 random systems, n = 8,
// kernel) against the four chains: float64 0.443 against 0.466 ms (0.841 / 0.750 for the divide-and-
// conquer kernel in the same two processes), float32 0.182 against 0.174 (0.404 / 0.383).
template <typename T>
struct PlaneRotation {
    T c, s, t;
    bool rot;
};
template <typename T>
__device__ __forceinline__ PlaneRotation<T> jacobi_rotation(T aii, T ajj, T aij, bool rot)
{
    T d = ajj - aii, u = T(2) * aij;
    const T m = fmax(fabs(d), fabs(u));
    if (m < (sizeof(T) == 4 ? T(0x1p-60) : T(0x1p-500)) && m > T(0)) {
        const Pair<T> du = scale_pair(d, u, m);
        d = du.d;
        u = du.u;
    }
    const T q = fma(d, d, u * u);
    const T r = q * rotation_rsqrt(rot ? q : T(1));
    const T w = fabs(d) + r;
    const T rs = rotation_rsqrt(rot ? T(2) * r * w : T(1));
    const T su = d >= T(0) ? u : -u;                         // sgn(d) u
    if (!rot) return {T(1), T(0), T(0), false};
    return {w * rs, su * rs, su * (T(2) * r) * (rs * rs), true};
}

// Entry (i, j) of the symmetric matrix held as its upper triangle.
template <typename T, int N>
__device__ __forceinline__ T& sym(T (&a)[N][N], int i, int j)
{
    return i <= j ? a[i][j] : a[j][i];
}

// One step of a sweep: the rotations of the disjoint pairs of step S, applied together.
template <typename T, int N, int S>
__device__ __forceinline__ bool jacobi_step(T (&a)[N][N], T (&v)[N][N], T tol, T abs_thr)
{
    constexpr int K = N + (N & 1), H = K / 2;                 // players (a dummy N for odd N), pairs
    bool rot[H], any = false;
#pragma unroll
    for (int k = 0; k < H; ++k) {                             // the thresholds, from the entries before the step
        int p = 0, q = 0;
        tournament_pair(K, S, k, p, q);
        rot[k] = q < N && rotates(a[p][p], a[q][q], a[p][q], tol, abs_thr);
        any = any || rot[k];
    }
    if (!__any_sync(0xffffffffu, any)) return false;         // (identity rotations change nothing)
    PlaneRotation<T> r[H];
#pragma unroll
    for (int k = 0; k < H; ++k) {                             // the angles
        int p = 0, q = 0;
        tournament_pair(K, S, k, p, q);
        r[k] = q < N ? jacobi_rotation(a[p][p], a[q][q], a[p][q], rot[k]) : PlaneRotation<T>{T(1), T(0), T(0), false};
    }
#pragma unroll
    for (int k = 0; k < H; ++k) {                             // the entries between pair k and pair l > k
        int p = 0, q = 0;
        tournament_pair(K, S, k, p, q);
#pragma unroll
        for (int l = k + 1; l < H; ++l) {
            int pl = 0, ql = 0;
            tournament_pair(K, S, l, pl, ql);
            if (q >= N && ql >= N) continue;
            // rows p, q by J_k^T (where pair k is real), then columns pl, ql by J_l (where pair l is real):
            // a pair with the dummy player is a single index, rotated by the other pair only
            if (q < N && ql < N) {
                const T b00 = sym(a, p, pl), b01 = sym(a, p, ql), b10 = sym(a, q, pl), b11 = sym(a, q, ql);
                const T x00 = r[k].c * b00 - r[k].s * b10, x01 = r[k].c * b01 - r[k].s * b11;
                const T x10 = r[k].s * b00 + r[k].c * b10, x11 = r[k].s * b01 + r[k].c * b11;
                sym(a, p, pl) = x00 * r[l].c - x01 * r[l].s;
                sym(a, p, ql) = x00 * r[l].s + x01 * r[l].c;
                sym(a, q, pl) = x10 * r[l].c - x11 * r[l].s;
                sym(a, q, ql) = x10 * r[l].s + x11 * r[l].c;
            } else if (q < N) {                               // pl is the single index of step S
                const T b0 = sym(a, p, pl), b1 = sym(a, q, pl);
                sym(a, p, pl) = r[k].c * b0 - r[k].s * b1;
                sym(a, q, pl) = r[k].s * b0 + r[k].c * b1;
            } else {                                          // p is the single index
                const T b0 = sym(a, p, pl), b1 = sym(a, p, ql);
                sym(a, p, pl) = b0 * r[l].c - b1 * r[l].s;
                sym(a, p, ql) = b0 * r[l].s + b1 * r[l].c;
            }
        }
    }
#pragma unroll
    for (int k = 0; k < H; ++k) {                             // the pivot blocks and V <- V J
        int p = 0, q = 0;
        tournament_pair(K, S, k, p, q);
        if (q >= N) continue;
        const T aij = a[p][q];
        a[p][p] = fma(-r[k].t, aij, a[p][p]);
        a[q][q] = fma(r[k].t, aij, a[q][q]);
        a[p][q] = r[k].rot ? T(0) : aij;
#pragma unroll
        for (int m = 0; m < N; ++m) {
            const T vp = v[m][p], vq = v[m][q];
            v[m][p] = r[k].c * vp - r[k].s * vq;
            v[m][q] = r[k].s * vp + r[k].c * vq;
        }
    }
    return any;
}

template <typename T, int N, int S>
__device__ __forceinline__ bool jacobi_steps(T (&a)[N][N], T (&v)[N][N], T tol, T abs_thr)
{
    if constexpr (S < N + (N & 1) - 1) {
        const bool any = jacobi_step<T, N, S>(a, v, tol, abs_thr);
        return jacobi_steps<T, N, S + 1>(a, v, tol, abs_thr) || any;
    } else {
        return false;
    }
}

// A (B, N, N) -> w (B, N) ascending, V (B, N, N) eigenvectors in columns; the flags of eigh_small.cu.
// The block's matrices pass through shared memory (N N + 1 apart: no bank conflicts) both ways, so
// that the global loads and stores are coalesced.
template <typename T, int N>
__global__ void __launch_bounds__(jacobi_threads<T, N>(), 2) eigh_jacobi(
    const T* __restrict__ A, T* __restrict__ w, T* __restrict__ vecs, bool* __restrict__ nonfinite,
    T* __restrict__ asym, long long batch)
{
    static_assert(N >= 1 && N <= 12, "1 <= N <= 12");
    constexpr int NN = N * N, P = NN + 1, JACOBI_THREADS = jacobi_threads<T, N>();
    extern __shared__ __align__(16) unsigned char smem_raw[];
    T* sm = reinterpret_cast<T*>(smem_raw);                   // JACOBI_THREADS x P
    const long long sys0 = (long long)blockIdx.x * JACOBI_THREADS;
    const int nsys = (int)min((long long)JACOBI_THREADS, batch - sys0);
    const T* Ab = A + sys0 * NN;
    for (int e = threadIdx.x; e < nsys * NN; e += JACOBI_THREADS) sm[(e / NN) * P + e % NN] = Ab[e];
    __syncthreads();
    const int t = threadIdx.x;
    const bool valid = t < nsys;
    T a[N][N], v[N][N];
    T amax = 0, dasym = 0;
    bool fin = true;
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = 0; j < N; ++j) {
            const T x = valid ? sm[t * P + i * N + j] : T(0), y = valid ? sm[t * P + j * N + i] : T(0);
            fin = fin && isfinite(x);
            amax = fmax(amax, fabs(x));
            dasym = fmax(dasym, fabs(x - y));
            if (i <= j) a[i][j] = y;                          // the lower triangle, A_ji
            v[i][j] = T(i == j);
        }
    if (valid) {
        nonfinite[sys0 + t] = !fin;
        asym[sys0 + t] = amax > T(0) ? dasym / amax : T(0);
    }
    const int ex = scale_exponent(amax);
    const T unscale = ldexp(T(1), -ex);
    T fro2 = 0;
#pragma unroll
    for (int i = 0; i < N; ++i)
#pragma unroll
        for (int j = i; j < N; ++j) {
            a[i][j] = fin ? a[i][j] * unscale : T(0);
            fro2 += (i == j ? T(1) : T(2)) * a[i][j] * a[i][j];
        }
    const T tol = eps<T>(), abs_thr = tol * sqrt(fro2);
    // the sweeps, until one rotates nothing in the whole warp (a system that is done rotates nothing
    // in the later sweeps of its warp: its matrix no longer changes)
    for (int sweep = 0; sweep < JACOBI_MAX_SWEEPS; ++sweep)
        if (!__any_sync(0xffffffffu, jacobi_steps<T, N, 0>(a, v, tol, abs_thr))) break;
    // ranks of the eigenvalues (stable ascending), then w and the columns of V by rank through shared
    const T scale = ldexp(T(1), ex);
    int rank[N];
#pragma unroll
    for (int i = 0; i < N; ++i) {
        rank[i] = 0;
#pragma unroll
        for (int j = 0; j < N; ++j) rank[i] += (a[j][j] < a[i][i] || (a[j][j] == a[i][i] && j < i)) ? 1 : 0;
    }
    __syncthreads();                                          // (every thread has read its matrix)
    if (valid) {
#pragma unroll
        for (int i = 0; i < N; ++i)
#pragma unroll
            for (int m = 0; m < N; ++m) sm[t * P + m * N + rank[i]] = fin ? v[m][i] : T(NAN);
    }
    T* sw = sm + JACOBI_THREADS * P;                          // JACOBI_THREADS x N
    if (valid) {
#pragma unroll
        for (int i = 0; i < N; ++i) sw[t * N + rank[i]] = fin ? a[i][i] * scale : T(NAN);
    }
    __syncthreads();
    T* Vb = vecs + sys0 * NN;
    for (int e = threadIdx.x; e < nsys * NN; e += JACOBI_THREADS) Vb[e] = sm[(e / NN) * P + e % NN];
    T* wb = w + sys0 * N;
    for (int e = threadIdx.x; e < nsys * N; e += JACOBI_THREADS) wb[e] = sw[e];
}
