// Eigen-decomposition of small symmetric matrices, A = N diag(w) N^T with N = Q O:
// Householder tridiagonalization (Algorithm 2) + divide and conquer (Algorithm 3), one system per
// group of N threads, and the truncated solve of the robust strategy (paper 001, section 5,
// step 3): x = N_k diag(1/w_k) N_k^T b over the eigenvalues w > w_max / cond_max.
// `tree` is the division scheme of Fig. 13 from the host: [nleaves, (start, size)...,
// nmerges, (start, n1, n2)...], merges deepest first.

#include "householder.cuh"
#include "tridiag_eigh.cuh"

template <typename T, int N>
struct EigLayout {
    static constexpr int S = N | 1;
    static constexpr int PER = 3 * N * S + 20 * N;            // W, Q, V and the vectors
};

template <typename T, int N>
__device__ void eig_setup(const T* A, long long sys0, int nsys, int spb, T* smem, int*& ibase,
                          T*& W, T*& d, T*& e, T*& beta, T*& tmp, T*& y, DCScratch<T>& sc, int local)
{
    constexpr int S = EigLayout<T, N>::S, PER = EigLayout<T, N>::PER;
    stage_matrices<T, N, S, PER>(A + sys0 * N * N, smem, nsys);
    W = smem + (size_t)local * PER;
    sc.Q = W + N * S;  sc.V = sc.Q + N * S;
    T* v = sc.V + N * S;
    d = v; e = v + N; beta = v + 2 * N; tmp = v + 3 * N; y = v + 5 * N;
    sc.lam = v + 6 * N; sc.dt = v + 7 * N; sc.dd = v + 8 * N; sc.z = v + 9 * N; sc.P = v + 10 * N;
    sc.Z = v + 11 * N; sc.O = v + 12 * N; sc.TAU = v + 13 * N; sc.sc = v + 14 * N;
    ibase = reinterpret_cast<int*>(smem + (size_t)spb * PER) + local * 3 * N;
    sc.perm = ibase; sc.idx = ibase + N; sc.defl = ibase + 2 * N;
}

// N <- Q_h N for the matrix of eigenvectors: thread c owns column c.
template <typename T, int N, int S>
__device__ void apply_q_columns(const T* W, const T* beta, T* M, int c, bool active)
{
    for (int r = 2; r < N; ++r) {
        if (active) {
            const T* u = W + r * S;
            T s = 0;
            for (int k = 0; k < r; ++k) s += u[k] * M[k * S + c];
            s *= beta[r];
            for (int k = 0; k < r; ++k) M[k * S + c] -= u[k] * s;
        }
    }
    gsync<N>();
}

template <typename T, int N>
__global__ void __launch_bounds__(Group<N>::WARP ? 128 : 256) eigh_small(const T* __restrict__ A, T* __restrict__ w, T* __restrict__ vecs,
                           int* __restrict__ nonfinite, T* __restrict__ asym,
                           const int* __restrict__ tree, int* __restrict__ hitcap, long long batch, int spb)
{
    constexpr int S = EigLayout<T, N>::S;
    extern __shared__ unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    constexpr int G = Group<N>::W;                             // lanes per system
    const int local = threadIdx.x / G, i = threadIdx.x % G;
    const long long sys0 = (long long)blockIdx.x * spb;
    const int nsys = (int)min((long long)spb, batch - sys0);
    const bool active = local < nsys && i < N;
    T *W, *d, *e, *beta, *tmp, *y;
    int* ib;
    DCScratch<T> sc;
    eig_setup<T, N>(A, sys0, nsys, spb, smem, ib, W, d, e, beta, tmp, y, sc, local);
    T none[1] = {T(0)};
    screen_and_symmetrize<T, N, S>(W, none, 0, tmp, i, active, nonfinite + sys0 + local, asym + sys0 + local);
    tridiagonalize<T, N, S>(W, d, e, beta, tmp, i, active);
    dc_tridiag_eigh<T, N, S>(d, e, sc, tree, i, active, hitcap);
    apply_q_columns<T, N, S>(W, beta, sc.Q, i, active);
    if (active) {
        long long s = sys0 + local;
        w[s * N + i] = sc.lam[i];
        for (int k = 0; k < N; ++k) vecs[(s * N + k) * N + i] = sc.Q[k * S + i];
    }
}

template <typename T, int N>
__global__ void __launch_bounds__(Group<N>::WARP ? 128 : 256) eig_truncate_solve(const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x,
                                   T* __restrict__ cond, T* __restrict__ resid, int* __restrict__ ndisc,
                                   int* __restrict__ nonfinite, T* __restrict__ asym,
                                   const int* __restrict__ tree, int* __restrict__ hitcap, T cond_max,
                                   long long batch, int nrhs, int spb)
{
    constexpr int S = EigLayout<T, N>::S;
    extern __shared__ unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    constexpr int G = Group<N>::W;                             // lanes per system
    const int local = threadIdx.x / G, i = threadIdx.x % G;
    const long long sys0 = (long long)blockIdx.x * spb;
    const int nsys = (int)min((long long)spb, batch - sys0);
    const bool active = local < nsys && i < N;
    T *W, *d, *e, *beta, *tmp, *y;
    int* ib;
    DCScratch<T> sc;
    eig_setup<T, N>(A, sys0, nsys, spb, smem, ib, W, d, e, beta, tmp, y, sc, local);
    T none[1] = {T(0)};
    const T* bi = active ? b + ((sys0 + local) * N + i) * nrhs : none;
    screen_and_symmetrize<T, N, S>(W, bi, active ? nrhs : 1, tmp, i, active, nonfinite + sys0 + local,
                                   asym + sys0 + local);
    tridiagonalize<T, N, S>(W, d, e, beta, tmp, i, active);
    dc_tridiag_eigh<T, N, S>(d, e, sc, tree, i, active, hitcap);
    const T* O = sc.Q;
    T* red = sc.dd;                                           // scratch after the eigensolver
    const T lmax = sc.lam[N - 1];
    T lmin_abs = INFINITY;
    for (int k = 0; k < N; ++k) lmin_abs = fmin(lmin_abs, fabs(sc.lam[k]));
    const T lmax_abs = fmax(fabs(sc.lam[0]), fabs(sc.lam[N - 1]));
    const bool keep = sc.lam[i] > lmax / cond_max;            // non-positive ones are dropped too
    const T* As = A + (sys0 + local) * N * N;
    T res_max = 0;
    for (int r = 0; r < nrhs; ++r) {
        if (active) y[i] = b[((sys0 + local) * N + i) * nrhs + r];
        gsync<N>();
        apply_q<T, N, S>(W, beta, y, tmp, true, i, active);     // Q^T b
        T c = 0;
        if (active) {                                           // (O^T y)_i / lambda_i, kept only
            for (int k = 0; k < N; ++k) c += O[k * S + i] * y[k];
            c = keep ? c / sc.lam[i] : T(0);
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
        if (active) {
            T bi = b[((sys0 + local) * N + i) * nrhs + r];
            T ri = -bi, rs = 0;
            for (int k = 0; k < N; ++k) {
                T aik = (k <= i) ? As[i * N + k] : As[k * N + i];
                ri += aik * y[k];
                rs += fabs(aik);
            }
            red[i] = fabs(ri);
            sc.P[i] = rs;
            sc.Z[i] = fabs(bi);
            x[((sys0 + local) * N + i) * nrhs + r] = y[i];
        }
        gsync<N>();
        if (active && i == 0) {
            T rn = 0, an = 0, xn = 0, bn = 0;
            for (int k = 0; k < N; ++k) {
                rn = fmax(rn, red[k]); an = fmax(an, sc.P[k]); bn = fmax(bn, sc.Z[k]); xn = fmax(xn, fabs(y[k]));
            }
            T rel = rn == T(0) ? T(0) : rn / (an * xn + bn);
            res_max = fmax(res_max, isfinite(rel) ? rel : T(INFINITY));
        }
        gsync<N>();
    }
    if (active && i == 0) {
        long long s = sys0 + local;
        int nd = 0;
        for (int k = 0; k < N; ++k) nd += !(sc.lam[k] > lmax / cond_max);
        ndisc[s] = nd;
        cond[s] = lmax_abs / lmin_abs;
        resid[s] = res_max;
    }
}
