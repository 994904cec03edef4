// Divide and conquer for a symmetric tridiagonal matrix in shared memory, one system per group
// of N threads (paper 001, section 5, Algorithm 3; the numpy twin is small/tridiag_eigh.py and
// computes the same function with the same steps):
//  - scale to max |entry| = 1; tear by eq. (15) with rho = |c_m| (sign moved into the vector);
//  - leaves 1x1 and 2x2 (Jacobi rotation); merges bottom-up in the host's order (deepest first);
//  - per merge: sort the poles (rank by counting), deflate small components and close poles
//    (Givens rotations, LAPACK dlaed2's test), solve the secular equation (16) by Gragg's
//    scheme, one thread per root, safeguarded by a bracket and stopped by dlaed4's bound;
//    Gu-Eisenstat vector u~ (Loewner), eigenvectors by eq. (17), then diag(O1, O2) W.
#pragma once

#include "common.cuh"

template <typename T>
struct DCScratch {
    T *Q, *V;                     // N x S each: eigenvectors (block diagonal per node), V of a merge
    T *lam, *dt, *dd, *z, *P, *Z, *O, *TAU, *sc;   // N each (sc: scalars)
    int *perm, *idx, *defl;       // N each
};

template <typename T, int N, int S>
__device__ void dc_tridiag_eigh(const T* d, const T* e, DCScratch<T> s, const int* tree,
                                int i, bool active, int* hitcap)
{
    const T eps_ = eps<T>();
    T* Q = s.Q;  T* V = s.V;
    // scale
    if (active && i == 0) {
        T m = 0;
        for (int k = 0; k < N; ++k) m = fmax(m, fabs(d[k]));
        for (int k = 0; k + 1 < N; ++k) m = fmax(m, fabs(e[k]));
        s.sc[0] = m > T(0) ? m : T(1);
    }
    gsync<N>();
    const T scale = s.sc[0];
    const int nleaves = tree[0];
    const int* leaves = tree + 1;
    const int nmerges = tree[1 + 2 * nleaves];
    const int* merges = tree + 2 + 2 * nleaves;
    if (active) {
        s.dt[i] = d[i] / scale;
        for (int k = 0; k < N; ++k) Q[i * S + k] = T(0);
    }
    gsync<N>();
    if (active && i == 0) {                                   // tears (eq. 15)
        for (int g = 0; g < nmerges; ++g) {
            int st = merges[3 * g], n1 = merges[3 * g + 1];
            T rho = fabs(e[st + n1 - 1]) / scale;
            s.dt[st + n1 - 1] -= rho;
            s.dt[st + n1] -= rho;
        }
    }
    gsync<N>();
    if (active && i < nleaves) {                              // leaves
        int st = leaves[2 * i], sz = leaves[2 * i + 1];
        if (sz == 1) {
            Q[st * S + st] = T(1);
            s.lam[st] = s.dt[st];
        } else {
            T a = s.dt[st], b = e[st] / scale, c = s.dt[st + 1];
            T t = 0;
            if (b != T(0)) {
                T tau = (c - a) / (T(2) * b);
                t = (tau >= T(0) ? T(1) : T(-1)) / (fabs(tau) + hypot(T(1), tau));
            }
            T cs = T(1) / sqrt(T(1) + t * t), sn = t * cs;
            T l1 = a - t * b, l2 = c + t * b;
            bool sw = l1 > l2;
            s.lam[st] = sw ? l2 : l1;
            s.lam[st + 1] = sw ? l1 : l2;
            // columns: v1 = (cs, -sn) for l1, v2 = (sn, cs) for l2
            Q[st * S + st] = sw ? sn : cs;        Q[(st + 1) * S + st] = sw ? cs : -sn;
            Q[st * S + st + 1] = sw ? cs : sn;    Q[(st + 1) * S + st + 1] = sw ? -sn : cs;
        }
    }
    gsync<N>();
    for (int g = 0; g < nmerges; ++g) {
        const int st = merges[3 * g], n1 = merges[3 * g + 1], n2 = merges[3 * g + 2];
        const int m = n1 + n2;
        const T beta = e[st + n1 - 1] / scale;
        const T rho = fabs(beta), sgn = beta >= T(0) ? T(1) : T(-1);
        // a. poles and the rank-one vector (rows of the children's eigenvectors)
        if (active && i < m) {
            s.dd[i] = s.lam[st + i];
            s.z[i] = i < n1 ? Q[(st + n1 - 1) * S + st + i] : sgn * Q[(st + n1) * S + st + i];
        }
        gsync<N>();
        // b. sort by rank: perm[rank] = original index (columns st + perm[r] of Q)
        if (active && i < m) {
            T di = s.dd[i];
            int rank = 0;
            for (int k = 0; k < m; ++k) rank += (s.dd[k] < di) || (s.dd[k] == di && k < i);
            s.perm[rank] = i;
        }
        gsync<N>();
        if (active && i < m) { s.P[i] = s.dd[s.perm[i]]; s.Z[i] = s.z[s.perm[i]]; }
        gsync<N>();
        // c-e. normalization, deflation (sequential, thread 0), compression
        if (active && i == 0) {
            T zn2 = 0, amax = 0;
            for (int k = 0; k < m; ++k) { zn2 += s.Z[k] * s.Z[k]; amax = fmax(amax, fabs(s.P[k])); }
            T zn = sqrt(zn2), r = rho * zn2;
            T tol = T(8) * eps_ * fmax(amax, r);
            for (int k = 0; k < m; ++k) { s.Z[k] /= zn; s.defl[k] = (r * fabs(s.Z[k]) <= tol); }
            int prev = -1;
            for (int k = 0; k < m; ++k) {
                if (s.defl[k]) continue;
                if (prev >= 0) {
                    T zp = s.Z[prev], zk = s.Z[k];
                    T tau = hypot(zp, zk), cs = zk / tau, sn = -zp / tau;
                    if (fabs((s.P[k] - s.P[prev]) * cs * sn) <= tol) {
                        int cp = st + s.perm[prev], ck = st + s.perm[k];
                        for (int row = st; row < st + m; ++row) {
                            T qp = Q[row * S + cp], qk = Q[row * S + ck];
                            Q[row * S + cp] = cs * qp + sn * qk;
                            Q[row * S + ck] = cs * qk - sn * qp;
                        }
                        T dp = s.P[prev], dk = s.P[k];
                        s.P[prev] = dp * cs * cs + dk * sn * sn;
                        s.P[k] = dp * sn * sn + dk * cs * cs;
                        s.Z[k] = tau; s.Z[prev] = T(0); s.defl[prev] = 1;
                    }
                }
                prev = k;
            }
            int K = 0;
            for (int k = 0; k < m; ++k) if (!s.defl[k]) s.idx[K++] = k;
            int q = K;
            for (int k = 0; k < m; ++k) if (s.defl[k]) s.idx[q++] = k;
            s.sc[1] = r > T(0) ? r : T(1);
            s.sc[2] = (T)K;
        }
        gsync<N>();
        const T r = s.sc[1];
        const int K = (int)s.sc[2];
        // compact undeflated poles and weights into dd / z (ascending)
        T pi_ = 0, zi_ = 0;
        if (active && i < K) { pi_ = s.P[s.idx[i]]; zi_ = s.Z[s.idx[i]]; }
        gsync<N>();
        if (active && i < K) { s.dd[i] = pi_; s.z[i] = zi_; }
        gsync<N>();
        // f. secular equation: thread j finds root j (Gragg's scheme, safeguarded)
        if (active && i < K) {
            const int j = i;
            const T* p = s.dd; const T* w = s.z;
            const T rinv = T(1) / r;
            const bool last = j == K - 1;
            T zsum = 0;
            for (int k = 0; k < K; ++k) zsum += w[k] * w[k];
            T gap = last ? T(1) : p[j + 1] - p[j];
            bool left = true;
            if (!last) {
                T fm = rinv;
                for (int k = 0; k < K; ++k) fm += w[k] * w[k] / ((p[k] - p[j]) - gap / 2);
                left = fm >= T(0);
            }
            const T o = left ? p[j] : p[j + 1];
            T lo = (last || left) ? T(0) : -gap / 2;
            T hi = last ? r * zsum : (left ? gap / 2 : T(0));
            T tau = (lo + hi) / 2;
            const int ia = j;
            int ib = last ? j - 1 : j + 1;
            const bool single = ib < 0;
            if (single) ib = 0;
            int it = 0;
            for (; it <= 64; ++it) {
                T f = rinv, f1 = 0, f2 = 0, ab = 0;
                for (int k = 0; k < K; ++k) {
                    const T rdl = T(1) / ((p[k] - o) - tau);      // one division per term
                    const T q = w[k] * w[k] * rdl;
                    f += q; f1 += q * rdl; f2 += q * rdl * rdl; ab += fabs(q);
                }
                f2 *= T(2);
                T bound = eps_ * (T(8) * ab + rinv + fabs(tau) * f1);
                if (f < T(0)) lo = fmax(lo, tau);
                if (f > T(0)) hi = fmin(hi, tau);
                if (!(fabs(f) > bound) || hi - lo <= T(2) * eps_ * fmax(fabs(lo), fabs(hi))) break;
                if (it == 64) break;
                T a = (p[ia] - o) - tau, b = (p[ib] - o) - tau;
                T sv, Sv, c0;
                if (single) { sv = a * a * f1; Sv = 0; c0 = f - sv / a; }
                else {
                    sv = a * a * a * (f1 - b * f2 / 2) / (a - b);
                    Sv = b * b * b * (f1 - a * f2 / 2) / (b - a);
                    c0 = f - sv / a - Sv / b;
                }
                T qb = -(c0 * (a + b) + sv + Sv), qc = c0 * a * b + sv * b + Sv * a;
                T disc = sqrt(fmax(qb * qb - 4 * c0 * qc, T(0)));
                T qq = -(qb + (qb >= T(0) ? disc : -disc)) / 2;
                T x1 = single ? (c0 != T(0) ? a + sv / c0 : T(INFINITY)) : (c0 != T(0) ? qq / c0 : T(INFINITY));
                T x2 = qq != T(0) ? qc / qq : T(INFINITY);
                T t1 = tau + x1, t2 = tau + x2;
                bool in1 = isfinite(t1) && t1 > lo && t1 < hi;
                bool in2 = !single && isfinite(t2) && t2 > lo && t2 < hi;
                tau = (in1 && (!in2 || fabs(x1) <= fabs(x2))) ? t1 : (in2 ? t2 : (lo + hi) / 2);
            }
            if (it > 64) atomicAdd(hitcap, 1);
            s.O[j] = o;
            s.TAU[j] = tau;
        }
        gsync<N>();
        // g. Gu-Eisenstat u~ (Loewner): thread i, into dt[i] (the torn diagonal is no longer used)
        if (active && i < K) {
            const T* p = s.dd;
            T wprod = (p[i] - s.O[i]) - s.TAU[i];
            for (int j = 0; j < K; ++j)
                if (j != i) wprod *= ((p[i] - s.O[j]) - s.TAU[j]) / (p[i] - p[j]);
            T zt = sqrt(fmax(-wprod, T(0)));
            s.dt[i] = s.z[i] >= T(0) ? zt : -zt;
        }
        gsync<N>();
        // h. V[:, j] = u~ / (p - lam_j), normalized (eq. 17); thread j writes column j
        if (active && i < K) {
            const T* p = s.dd;
            T nrm = 0;
            for (int k = 0; k < K; ++k) {
                T v = s.dt[k] / ((p[k] - s.O[i]) - s.TAU[i]);
                V[k * S + i] = v;
                nrm += v * v;
            }
            nrm = T(1) / sqrt(nrm);
            for (int k = 0; k < K; ++k) V[k * S + i] *= nrm;
        }
        // new eigenvalues in merge order (K secular roots, then deflated poles), then their ranks
        if (active && i < m) s.Z[i] = i < K ? s.O[i] + s.TAU[i] : s.P[s.idx[i]];
        gsync<N>();
        if (active && i < m) {
            T li = s.Z[i];
            int rank = 0;
            for (int k = 0; k < m; ++k) rank += (s.Z[k] < li) || (s.Z[k] == li && k < i);
            s.defl[i] = rank;                                   // reuse: final column of merge column i
            s.lam[st + rank] = li;
        }
        gsync<N>();
        // i. rows st..st+m-1: new row t = old row t (columns perm-ordered) times [V | I]
        if (active && i < m) {
            const int row = st + i;
            T old[N];                                           // local memory: m varies per merge
            for (int c = 0; c < m; ++c) old[c] = Q[row * S + st + s.perm[s.idx[c]]];
            for (int c = 0; c < m; ++c) {
                T v;
                if (c < K) { v = 0; for (int k = 0; k < K; ++k) v += old[k] * V[k * S + c]; }
                else v = old[c];
                Q[row * S + st + s.defl[c]] = v;
            }
        }
        gsync<N>();
    }
    if (active) s.lam[i] *= scale;
    gsync<N>();
}
