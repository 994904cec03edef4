// Divide and conquer for a symmetric tridiagonal matrix in shared memory, one system per group
// of N threads (Abbas-Turki-Graillat, section 5, Algorithm 3; the numpy twin is small/tridiag_eigh.py and
// computes the same function with the same steps):
//  - scale to max |entry| = 1; tear by eq. (15) with rho = |c_m| (sign moved into the vector);
//  - leaves 1x1 and 2x2 (Jacobi rotation); merges bottom-up, all merges of one round (the host's
//    `tree`: merges whose children are done) at once, each thread working for the merge that
//    holds its index i (local index j = i - st);
//  - per merge: sort the poles (rank by counting), deflate small components and close poles
//    (Givens rotations, LAPACK dlaed2's test; the serial chain runs only where a close pair
//    exists), solve the secular equation (16) by Gragg's scheme, one thread per root, from
//    dlaed4's initial guess, safeguarded by a bracket and stopped by dlaed4's bound;
//    Gu-Eisenstat vector u~ (Loewner), eigenvectors by eq. (17), then diag(O1, O2) W.
#pragma once

#include "common.cuh"

template <typename T>
struct DCScratch {
    T *Q, *V;                     // eigenvectors (N x S, block diagonal per node); V of a merge (rows st..,
                                  // columns from st rounded down to a multiple of 4, row stride dc_v_stride)
    T *lam, *dt, *dd, *z, *P, *Z, *O, *TAU, *sc;   // N each (sc: scalars)
    int *perm, *idx, *defl, *close;                // N each (close: per merge, at its start, then the
                                                  // rows' nonzero columns of step i, merge_order)
};

// t + x for the root x of c0 + s / (a - x) + S_ / (b - x) = 0 (c0 + s / (a - x) = 0 where
// `single`) that lands inside the bracket (lo, hi), the nearer one if both do; else the
// bisection point (the twin's _model_step).
template <typename T>
__device__ __forceinline__ T model_step(T c0, T a, T b, T s, T S_, bool single, T t, T lo, T hi)
{
    const T qb = -(c0 * (a + b) + s + S_), qc = c0 * a * b + s * b + S_ * a;
    const T disc = sqrt(fmax(qb * qb - 4 * c0 * qc, T(0)));
    const T qq = -(qb + (qb >= T(0) ? disc : -disc)) / 2;
    const T x1 = c0 != T(0) ? (single ? a + s / c0 : qq / c0) : T(INFINITY);
    const T x2 = qq != T(0) ? qc / qq : T(INFINITY);
    const T t1 = t + x1, t2 = t + x2;
    const bool in1 = isfinite(t1) && t1 > lo && t1 < hi;
    const bool in2 = !single && isfinite(t2) && t2 > lo && t2 < hi;
    return (in1 && (!in2 || fabs(x1) <= fabs(x2))) ? t1 : (in2 ? t2 : (lo + hi) / 2);
}

// Root j of 1/r + sum_k w_k^2 / (p_k - lam) = 0 (eq. 16, scaled; K poles p ascending) as
// lam = o + tau with o the nearer pole; at most MAX_IT iterations (the twin's _MAX_SECULAR_ITER).
template <typename T>
__device__ void secular_root(const T* p, const T* w, int K, int j, T r, T& o_out, T& tau_out)
{
    constexpr int MAX_IT = 64;
    const T eps_ = eps<T>();
    const T rinv = T(1) / r;
    const bool last = j == K - 1;
    const int jn = last ? j : j + 1;
    T zsum = 0;                                               // (the last root's bracket)
    if (last) for (int k = 0; k < K; ++k) zsum += w[k] * w[k];
    const T gap = last ? T(1) : p[jn] - p[j];
    // f at the middle of the bracket, origin p_j: of (p_j, p_j+1), or of the last root's (0, r |w|^2]
    const T mid = last ? r * zsum / 2 : gap / 2;
    T fm = rinv;
    for (int k = 0; k < K; ++k) fm += w[k] * w[k] * scaled_rcp((p[k] - p[j]) - mid);
    const bool left = last || fm >= T(0);                    // the nearer pole is the left one
    const T o = left ? p[j] : p[jn];
    T lo = left ? T(0) : -gap / 2;
    T hi = last ? r * zsum : (left ? gap / 2 : T(0));
    if (last && fm <= T(0)) lo = mid;                         // f increases past the last pole
    else if (last) hi = mid;
    const int ia = j;
    int ib = last ? j - 1 : j + 1;
    const bool single = ib < 0;
    if (single) ib = 0;
    // dlaed4's start: the two-pole model with the rest of f frozen at the middle (the last root: its
    // pole and the one before, dlaed4's case i = n)
    const T zj = w[j] * w[j], zn = w[jn] * w[jn];
    const T zb = single ? T(0) : w[ib] * w[ib], pb = single ? T(0) : p[ib] - p[j];
    T tau = last ? model_step(fm + zj / mid - zb / (pb - mid), T(0), pb, zj, zb, single, T(0), lo, hi)
                 : model_step(fm + (zj - zn) / (gap / 2), p[j] - o, p[jn] - o, zj, zn, false, T(0), lo, hi);
    for (int it = 0;; ++it) {
        T f = rinv, f1 = 0, f2 = 0, ab = 0;
        for (int k = 0; k < K; ++k) {
            const T rdl = scaled_rcp((p[k] - o) - tau);      // one reciprocal per term
            const T q = w[k] * w[k] * rdl;
            f += q; f1 += q * rdl; f2 += q * rdl * rdl; ab += fabs(q);
        }
        f2 *= T(2);
        const T bound = eps_ * (T(8) * ab + rinv + fabs(tau) * f1);
        if (f < T(0)) lo = fmax(lo, tau);
        if (f > T(0)) hi = fmin(hi, tau);
        if (!(fabs(f) > bound) || hi - lo <= T(2) * eps_ * fmax(fabs(lo), fabs(hi))) break;
        if (it == MAX_IT) break;
        const T a = (p[ia] - o) - tau, b = (p[ib] - o) - tau;
        T sv, Sv, c0;
        if (single) { sv = a * a * f1; Sv = 0; c0 = f - sv / a; }
        else if (last) {                                      // dlaed4's i = n: the last pole exact,
            sv = zj;                                          // the rest fitted to f' (Gragg's fit to
            Sv = b * b * (f1 - zj / (a * a));                 // f'' failed near a close pair)
            c0 = f - sv / a - Sv / b;
        } else {
            sv = a * a * a * (f1 - b * f2 / 2) / (a - b);
            Sv = b * b * b * (f1 - a * f2 / 2) / (b - a);
            c0 = f - sv / a - Sv / b;
        }
        tau = model_step(c0, a, b, sv, Sv, single, tau, lo, hi);
    }
    o_out = o;
    tau_out = tau;
}

// The row stride of V (N x dc_v_stride<N>() of storage): 16-byte rows for merge_row.
template <int N>
__host__ __device__ constexpr int dc_v_stride() { return (N + 3) / 4 * 4; }

// The old columns that row st + j of a merge (m = n1 + n2 rows) multiplies in step i, in ascending
// compressed order k, each as k | (its column of Q, from st) << 8, into ks[st ..]: the rows of each
// child are zero in the other child's columns (Q is diag(Q1, Q2) there), so child 1's rows take the n1
// positions whose column is below n1 (at ks[st ..]), child 2's the other n2 (at ks[st + n1 ..]); after
// a close pair's rotations (`mixed`: they mix the children's columns) every row takes all m, in order.
// Thread j writes position k = j. Returns the row's count and, in `base`, where its list starts.
__device__ __forceinline__ int merge_order(const int* perm, const int* idx, int* ks, int st, int j, int n1,
                                           int m, bool mixed, int& base)
{
    const int colj = perm[st + idx[st + j]];
    const bool first = colj < n1;
    int rank = 0;
    if (!mixed)
        for (int k = 0; k < j; ++k) rank += (perm[st + idx[st + k]] < n1) == first;
    ks[st + (mixed ? j : (first ? 0 : n1) + rank)] = j | colj << 8;
    base = mixed ? 0 : (j < n1 ? 0 : n1);
    return mixed ? m : (j < n1 ? n1 : m - n1);
}

// Step 4 for the row st + j of a merge: the row's old entries (columns in sorted, compressed order k)
// times V = [V_K 0; 0 I] (step h), written back in eigenvalue order. Above M = 32 (merges over more
// than a warp's rows) only the `cnt` positions of merge_order (from ks) are taken: the others hold
// exact zeros, which added nothing (the rows are bitwise those of the loop over all m; the top merge's
// FMAs halve). Below, all m: the two children of a warp then load different rows of V, and the lists
// were slower (H100, 2^17 systems, kernel ms, all m -> lists from M = 16: float32 N = 24 4.75 -> 4.85,
// 32 6.40 -> 6.50, float64 N = 24 8.94 -> 9.37; above 32 rows: float32 N = 48 18.84 -> 18.92, 56 28.64
// -> 27.65, 64 32.98 -> 31.67, float64 N = 33 23.43 -> 22.99, 48 55.30 -> 54.30, 64 114.6 -> 110.7).
// M >= m bounds the merge size of the round: the row's new entries are M sums in registers, and each
// row of V is read by 16-byte loads that the threads at the same position share (the loop over the
// rows of V outside: one load per 4 (float32) or 2 (float64) FMAs; with the columns outside, each FMA
// waited for a load of its own, and the loads were 13 % of the instructions of eigh_small<float, 32>).
// The sums run over the rows in ascending order. Loads past the merge's m columns read the next row
// or, from V's last rows, the storage after V (Q's slot, or the vectors with three matrices: the
// system's own); those sums are not stored. P: loads per pace_loads.
template <typename T, int S, int VS, int M, int P>
__device__ __forceinline__ void merge_row(const DCScratch<T>& s, int st, int j, int m, int base, int cnt)
{
    constexpr int V = 16 / sizeof(T);
    constexpr bool LISTS = M > 32;
    const int row = st + j;
    const T* vr = s.V + st * VS + (st & ~3);
    T acc[M];
#pragma unroll
    for (int c = 0; c < M; ++c) acc[c] = T(0);
    T* q = s.Q + row * S + st;                                   // the row, from the merge's start
    const int* ks = s.close + st + base;
    const int* col = s.perm + st;
    const int* ord = s.idx + st;
    const int n = LISTS ? cnt : m;
    int e = LISTS && n > 0 ? ks[0] : 0;                         // (lists: position | column << 8)
    T old = n > 0 ? q[LISTS ? e >> 8 : col[ord[0]]] : T(0);
#pragma unroll 1
    for (int t = 0; t < n; ++t) {
        const int en = LISTS && t + 1 < n ? ks[t + 1] : 0;
        const T next = t + 1 < n ? q[LISTS ? en >> 8 : col[ord[t + 1]]] : T(0);   // (its loads beside the FMAs)
        const T* v0 = vr + (LISTS ? e & 255 : t) * VS;
#pragma unroll
        for (int c0 = 0; c0 < M; c0 += V) {
            T v[V];
            load16(v0 + c0, v);
#pragma unroll
            for (int t2 = 0; t2 < V; ++t2)
                if (c0 + t2 < M) acc[c0 + t2] = fma(old, v[t2], acc[c0 + t2]);
            pace_loads<T, P>(c0);
        }
        old = next;
        e = en;
    }
#pragma unroll
    for (int c = 0; c < M; ++c)
        if (c < m) q[s.defl[st + c]] = acc[c];
}

// merge_row with the least bound M of 4, 8, 16, ... (N at most) that holds the round's merges.
template <typename T, int N, int S, int M = 4>
__device__ __forceinline__ void merge_row_bounded(const DCScratch<T>& s, int st, int j, int m, int mmax, int base,
                                                  int cnt)
{
    constexpr int VS = dc_v_stride<N>();
    if constexpr (M >= N) merge_row<T, S, VS, N, pace_every<N>()>(s, st, j, m, base, cnt);
    else if (mmax <= M) merge_row<T, S, VS, M, pace_every<N>()>(s, st, j, m, base, cnt);
    else merge_row_bounded<T, N, S, 2 * M>(s, st, j, m, mmax, base, cnt);
}

template <typename T, int N, int S>
__device__ void dc_tridiag_eigh(const T* d, const T* e, DCScratch<T> s, const int* tree, int i, bool active)
{
    const T eps_ = eps<T>();
    constexpr int VS = dc_v_stride<N>();
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
    const int nrounds = merges[3 * nmerges];
    const int* rounds = merges + 3 * nmerges + 1;           // per round: max m, then N packed merges
    if (active) {
        s.dt[i] = d[i] / scale;
        for (int k = 0; k < N; ++k) Q[i * S + k] = T(0);
    }
    gsync<N>();
    if (active && i == 0) {                                   // tears (eq. 15), deepest first
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
    for (int g = 0; g < nrounds; ++g) {
        const int* rt = rounds + g * (N + 1);
        const int mmax = rt[0];
        const int info = active ? rt[1 + i] : -1;
        const bool in = info >= 0;                            // index i is in a merge of this round
        const int st = info & 255, n1 = (info >> 8) & 255, m = n1 + ((info >> 16) & 255), j = i - st;
        const T beta = in ? e[st + n1 - 1] / scale : T(0);
        const T rho = fabs(beta), sgn = beta >= T(0) ? T(1) : T(-1);
        // a. poles and the rank-one vector (rows of the children's eigenvectors)
        if (in) {
            s.dd[i] = s.lam[i];
            s.z[i] = j < n1 ? Q[(st + n1 - 1) * S + i] : sgn * Q[(st + n1) * S + i];
            if (j == 0) s.close[st] = 0;
        }
        gsync<N>();
        // b. sort by rank: perm[st + rank] = j (columns st + perm of Q)
        if (in) {
            const T di = s.dd[i];
            int rank = 0;
            for (int k = 0; k < m; ++k) rank += (s.dd[st + k] < di) || (s.dd[st + k] == di && k < j);
            s.perm[st + rank] = j;
        }
        gsync<N>();
        if (in) { s.P[i] = s.dd[st + s.perm[i]]; s.Z[i] = s.z[st + s.perm[i]]; }
        gsync<N>();
        // c. normalization and deflation of small components
        T r = 0, tol = 0, zi = 0;
        if (in) {
            T zn2 = 0, amax = 0;
            for (int k = 0; k < m; ++k) { zn2 += s.Z[st + k] * s.Z[st + k]; amax = fmax(amax, fabs(s.P[st + k])); }
            r = rho * zn2;
            tol = T(8) * eps_ * fmax(amax, r);
            zi = s.Z[i] / sqrt(zn2);
        }
        gsync<N>();
        if (in) { s.Z[i] = zi; s.defl[i] = r * fabs(zi) <= tol; }
        gsync<N>();
        // d. close poles: each undeflated pole tests its undeflated predecessor; a merge with a
        // close pair runs dlaed2's serial chain (rotations change the later tests)
        if (in && !s.defl[i]) {
            int k = j - 1;
            while (k >= 0 && s.defl[st + k]) --k;
            if (k >= 0) {
                const T zp = s.Z[st + k], tau = hypot(zp, zi), cs = zi / tau, sn = -zp / tau;
                if (fabs((s.P[i] - s.P[st + k]) * cs * sn) <= tol) s.close[st] = 1;
            }
        }
        gsync<N>();
        if (in && j == 0 && s.close[st]) {
            int prev = -1;
            for (int k = 0; k < m; ++k) {
                if (s.defl[st + k]) continue;
                if (prev >= 0) {
                    T zp = s.Z[st + prev], zk = s.Z[st + k];
                    T tau = hypot(zp, zk), cs = zk / tau, sn = -zp / tau;
                    if (fabs((s.P[st + k] - s.P[st + prev]) * cs * sn) <= tol) {
                        int cp = st + s.perm[st + prev], ck = st + s.perm[st + k];
                        for (int row = st; row < st + m; ++row) {
                            T qp = Q[row * S + cp], qk = Q[row * S + ck];
                            Q[row * S + cp] = cs * qp + sn * qk;
                            Q[row * S + ck] = cs * qk - sn * qp;
                        }
                        T dp = s.P[st + prev], dk = s.P[st + k];
                        s.P[st + prev] = dp * cs * cs + dk * sn * sn;
                        s.P[st + k] = dp * sn * sn + dk * cs * cs;
                        s.Z[st + k] = tau; s.Z[st + prev] = T(0); s.defl[st + prev] = 1;
                    }
                }
                prev = k;
            }
        }
        gsync<N>();
        // e. compression: undeflated poles first (ascending), deflated after; K of them
        int K = 0;
        if (in) {
            int before = 0, before_d = 0;
            for (int k = 0; k < m; ++k) {
                const int dk = s.defl[st + k];
                K += !dk;
                if (k < j) { before += !dk; before_d += dk; }
            }
            s.idx[st + (s.defl[i] ? K + before_d : before)] = j;
        }
        r = r > T(0) ? r : T(1);
        gsync<N>();
        T pi_ = 0, zi_ = 0;
        if (in && j < K) { pi_ = s.P[st + s.idx[i]]; zi_ = s.Z[st + s.idx[i]]; }
        gsync<N>();
        if (in && j < K) { s.dd[i] = pi_; s.z[i] = zi_; }
        gsync<N>();
        // f. secular equation: thread j finds root j
        if (in && j < K) {
            T o, tau;
            secular_root(s.dd + st, s.z + st, K, j, r, o, tau);
            s.O[i] = o;
            s.TAU[i] = tau;
        }
        gsync<N>();
        // g. Gu-Eisenstat u~ (Loewner): thread i, into dt[i] (the torn diagonal is no longer used)
        if (in && j < K) {
            const T* p = s.dd + st;
            T wprod = (p[j] - s.O[i]) - s.TAU[i];
            for (int q = 0; q < K; ++q)
                if (q != j) wprod *= ((p[j] - s.O[st + q]) - s.TAU[st + q]) * scaled_rcp(p[j] - p[q]);
            T zt = sqrt(fmax(-wprod, T(0)));
            s.dt[i] = s.z[i] >= T(0) ? zt : -zt;
        }
        gsync<N>();
        // h. V = [V_K 0; 0 I] (m x m), its first K columns by eq. (17): V[:, j] = u~ / (p - lam_j),
        // normalized; thread j writes column j. A merge's columns start at st rounded down to a
        // multiple of 4: 16-byte aligned rows for merge_row, and the merges of a warp on other banks.
        if (in) {
            T* vc = V + st * VS + (st & ~3) + j;
            if (j < K) {
                const T* p = s.dd + st;
                T nrm = 0;
                for (int k = 0; k < K; ++k) {
                    T v = s.dt[st + k] * scaled_rcp((p[k] - s.O[i]) - s.TAU[i]);
                    vc[k * VS] = v;
                    nrm += v * v;
                }
                nrm = T(1) / sqrt(nrm);
                for (int k = 0; k < K; ++k) vc[k * VS] *= nrm;
            }
            for (int k = j < K ? K : 0; k < m; ++k) vc[k * VS] = k == j ? T(1) : T(0);
        }
        // new eigenvalues in merge order (K secular roots, then deflated poles), then their ranks
        if (in) s.Z[i] = j < K ? s.O[i] + s.TAU[i] : s.P[st + s.idx[i]];
        const bool mixed = N > 32 && in && s.close[st];
        gsync<N>();
        int base = 0, cnt = 0;
        if (in) {
            if (N > 32 && mmax > 32)                        // merge_row's lists (M > 32)
                cnt = merge_order(s.perm, s.idx, s.close, st, j, n1, m, mixed, base);
            const T li = s.Z[i];
            int rank = 0;
            for (int k = 0; k < m; ++k) rank += (s.Z[st + k] < li) || (s.Z[st + k] == li && k < j);
            s.defl[i] = rank;                                   // reuse: final column of merge column j
            s.lam[st + rank] = li;
        }
        gsync<N>();
        // i. rows st..st+m-1: new row = old row (columns perm-ordered) times V
        if (in) merge_row_bounded<T, N, S>(s, st, j, m, mmax, base, cnt);
        gsync<N>();
    }
    if (active) s.lam[i] *= scale;
    gsync<N>();
}
