// Householder tridiagonalization + parallel cyclic reduction: x = Q T^{-1} Q^T b
// (paper 001, section 4: Algorithm 2 for A = Q T Q^T, eq. 10 and the Fig. 9 permutations for PCR).
// N threads per system, several systems per block; thread p owns equation p of the PCR.
// The permutation schedule (perm, link per step) comes from the host (pcr_schedule), flattened:
// sched[s * 2N + q] = perm[q], sched[s * 2N + N + q] = link[q] (link[N-1] = 0).
// Outputs x (B, N, R), the PCR pivot ratio as condition estimate, the relative residual
// (A re-read from global memory, lower triangle), ok (all of x finite) and the input screening.

#include "householder.cuh"

template <typename T, int N, int S>
__device__ void pcr_solve(const T* d0, const T* e0, T* v, T* sd, T* sc, T* sv2, int* spos,
                          const int* sched, int nsteps, T* piv_out, int i, bool active)
{
    // state: sd (diag), sc (coupling p <-> p+1), v (rhs), spos (original index) in current order
    if (active) {
        sd[i] = d0[i];
        sc[i] = (i < N - 1) ? e0[i] : T(0);
        spos[i] = i;
    }
    gsync<N>();
    for (int st = 0; st < nsteps; ++st) {
        const int* perm = sched + st * 2 * N;
        const int* link = perm + N;
        T dn = 0, vn = 0, c2 = 0;
        int pos = 0;
        if (active) {
            T cl = i > 0 ? sc[i - 1] : T(0), cr = sc[i];
            T dl = i > 0 ? sd[i - 1] : T(1), dr = i < N - 1 ? sd[i + 1] : T(1);
            T al = cl / dl, ga = cr / dr;
            T vl = i > 0 ? v[i - 1] : T(0), vr = i < N - 1 ? v[i + 1] : T(0);
            vn = v[i] - al * vl - ga * vr;                       // eq. (10)
            dn = sd[i] - al * cl - ga * cr;
            c2 = (i < N - 2) ? -ga * sc[i + 1] : T(0);           // coupling p <-> p+2
            pos = spos[i];
        }
        gsync<N>();
        if (active) { sd[i] = dn; v[i] = vn; spos[i] = pos; sv2[i] = c2; }   // publish the step
        gsync<N>();
        T dq = 0, vq = 0, cq = 0;
        int pq = 0;
        if (active) {
            int from = perm[i];
            dq = sd[from]; vq = v[from]; pq = spos[from];
            cq = link[i] ? sv2[from] : T(0);
        }
        gsync<N>();
        if (active) { sd[i] = dq; v[i] = vq; spos[i] = pq; sc[i] = cq; }
        gsync<N>();
    }
    T z = 0;
    int pos = 0;
    if (active) { z = v[i] / sd[i]; pos = spos[i]; piv_out[pos] = sd[i]; }
    gsync<N>();
    if (active) v[pos] = z;                                     // back to the original order
    gsync<N>();
}

template <typename T, int N>
__global__ void __launch_bounds__(Group<N>::WARP ? 128 : 256) householder_pcr_solve(const T* __restrict__ A, const T* __restrict__ b, T* __restrict__ x,
                                      T* __restrict__ cond, T* __restrict__ resid, int* __restrict__ ok,
                                      int* __restrict__ nonfinite, T* __restrict__ asym,
                                      const int* __restrict__ sched, int nsteps,
                                      long long batch, int nrhs, int spb)
{
    constexpr int S = N | 1;
    constexpr int PER = N * S + 12 * N;                         // shared elements per system
    extern __shared__ unsigned char smem_raw[];
    T* smem = reinterpret_cast<T*>(smem_raw);
    constexpr int G = Group<N>::W;                             // lanes per system
    const int local = threadIdx.x / G, i = threadIdx.x % G;
    const long long sys0 = (long long)blockIdx.x * spb;
    const int nsys = (int)min((long long)spb, batch - sys0);
    const bool active = local < nsys && i < N;
    T* W = smem + (size_t)local * PER;
    T* d = W + N * S;  T* e = d + N;  T* beta = e + N;  T* tmp = beta + N;   // tmp: 2N
    T* y = tmp + 2 * N;  T* sd = y + N;  T* sc = sd + N;  T* sv2 = sc + N;  T* piv = sv2 + N;
    T* red = piv + N;
    int* spos = reinterpret_cast<int*>(smem + (size_t)spb * PER) + local * N;

    stage_matrices<T, N, S, PER>(A + sys0 * N * N, smem, nsys);
    T bi_all[1] = {T(0)};
    const T* bi = active ? b + ((sys0 + local) * N + i) * nrhs : bi_all;
    screen_and_symmetrize<T, N, S>(W, bi, active ? nrhs : 1, tmp, i, active,
                                   nonfinite + sys0 + local, asym + sys0 + local);
    tridiagonalize<T, N, S>(W, d, e, beta, tmp, i, active);

    const T* As = A + (sys0 + local) * N * N;
    T res_max = 0, cmax = 0;
    bool good = true;
    for (int r = 0; r < nrhs; ++r) {
        if (active) y[i] = b[((sys0 + local) * N + i) * nrhs + r];
        gsync<N>();
        apply_q<T, N, S>(W, beta, y, tmp, true, i, active);             // Q^T b
        pcr_solve<T, N, S>(d, e, y, sd, sc, sv2, spos, sched, nsteps, piv, i, active);
        apply_q<T, N, S>(W, beta, y, tmp, false, i, active);            // x = Q z
        T ri = 0, rs = 0, bi = 0;
        if (active) {
            bi = b[((sys0 + local) * N + i) * nrhs + r];
            ri = -bi;
            for (int k = 0; k < N; ++k) {
                T aik = (k <= i) ? As[i * N + k] : As[k * N + i];
                ri += aik * y[k];
                rs += fabs(aik);
            }
            red[i] = fabs(ri);
            tmp[i] = rs;
            sv2[i] = fabs(bi);
            x[((sys0 + local) * N + i) * nrhs + r] = y[i];
        }
        gsync<N>();
        if (active && i == 0) {
            T rn = 0, an = 0, xn = 0, bn = 0, pmax = 0, pmin = INFINITY;
            bool fin = true;
            for (int k = 0; k < N; ++k) {
                rn = fmax(rn, red[k]); an = fmax(an, tmp[k]); bn = fmax(bn, sv2[k]);
                xn = fmax(xn, fabs(y[k])); fin = fin && isfinite(y[k]);
                pmax = fmax(pmax, fabs(piv[k])); pmin = fmin(pmin, fabs(piv[k]));
            }
            T rel = rn == T(0) ? T(0) : rn / (an * xn + bn);
            if (!fin || !isfinite(rel)) { rel = INFINITY; good = false; }
            res_max = fmax(res_max, rel);
            cmax = fmax(cmax, pmax / pmin);
        }
        gsync<N>();
    }
    if (active && i == 0) {
        long long s = sys0 + local;
        ok[s] = good ? 1 : 0;
        cond[s] = good ? cmax : T(INFINITY);
        resid[s] = res_max;
    }
}
