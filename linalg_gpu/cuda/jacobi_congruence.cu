// The inner Jacobi of the blocked hyperbolic SVD (MODE 1) and GSVD (MODE 2): one thread block per K x K
// Gram matrix A (and, MODE 2, B), held in shared memory with the transformation V. In each of the K - 1
// steps of a chess-tournament sweep the K/2 disjoint pairs (p, q) get a 2 x 2 transformation M
// (columns: x_p <- m11 x_p + m21 x_q, x_q <- m12 x_p + m22 x_q), and A <- M^T A M, B <- M^T B M, V <- V M;
// a thread owns the 2 x 2 block between two pairs. The numpy twin and the formulas are in
// linalg_gpu/jacobi/congruence.py:
// MODE 1: trigonometric M for equal signs, hyperbolic for opposite ones (Novakovic-Singer HSVD eqs. 2.2-2.6), pivot
//   blocks in their accurate form; at the end one step V (3 I - J V^T J V) / 2 and the columns sorted
//   within each sign (+ descending, - ascending by the final diagonal). stats[b] counts the hyperbolic
//   pairs with |zeta| <= 1 (numerically dependent columns), which are left alone.
// MODE 2: the Hari-Zimmermann M (Novakovic-Singer GSVD section 2.1.2; for T = cplx section 2.1.1 and A <- M^H A M),
//   with the rescaling by diag(B)^(-1/2), the exception of proportional pivot blocks and the sorting
//   swap; at the end the columns scaled by
//   (a_jj + b_jj)^(-1/2) (section 2.4) and sorted by a_jj / b_jj descending. stats[b] += the big
//   transformations (criterion C1, section 2.5).
// A pair is transformed only if it is not relatively orthogonal; sweeps stop when nothing moved.
// V is the identity if nothing moved.

#include "common.cuh"

template <typename T> __device__ __forceinline__ T sgn1(T x) { return x < 0 ? T(-1) : T(1); }

// MODE 1's M for one pair; returns false for a dependent hyperbolic pair.
template <typename T>
__device__ bool hyperbolic_pair(T app, T aqq, T apq, bool hyp, T& m11, T& m12, T& m21, T& m22, T& npp, T& nqq)
{
    T t;
    if (!hyp) {
        const T zeta = (aqq - app) / (2 * apq);
        t = sgn1(zeta) / (fabs(zeta) + hypot(T(1), zeta));
    } else {
        const T zeta = (app + aqq) / (2 * apq), az = fabs(zeta);
        if (!(az > 1)) return false;
        t = -sgn1(zeta) / (az + sqrt((az - 1) * (az + 1)));
    }
    const T c = rsqrt(hyp ? (1 - t) * (1 + t) : 1 + t * t), s = c * t;
    m11 = c; m12 = s; m21 = hyp ? s : -s; m22 = c;
    const T tg = t * apq;
    npp = app + (hyp ? tg : -tg);
    nqq = aqq + tg;
    return true;
}

// MODE 2's M for one pair (gsvd.hz_transform): returns 0 (left alone), 1 (swap only), 2 (small), 3 (big).
// T real (section 2.1.2) or cplx (section 2.1.1, gsvd._hz_complex); the diagonals are real.
template <typename T, typename R = typename real_of<T>::type>
__device__ int hz_pair(R aii, R ajj, T aij, R bii, R bjj, T bij, R tol, T& z11, T& z12, T& z21, T& z22)
{
    const R di = rsqrt(bii), dj = rsqrt(bjj);
    const R a1 = aii * di * di, a2 = ajj * dj * dj;
    const T a12 = aij * di * dj, x0 = bij * di * dj;
    const bool rotate = absv(x0) >= tol || absv(a12) > sqrt(fabs(a1)) * sqrt(fabs(a2)) * tol;   // strict: zero F columns stay
    int kind = 0;
    if (rotate) {
        R t, cphi, cpsi;
        bool exception;
        if constexpr (real_of<T>::complex) {
            const R x = absv(x0);
            const T ph = x > 0 ? x0 / x : T(1);                             // e^{i zeta}
            const T z = a12 * cj(ph);
            const R u = z.re, v = z.im, h = a2 - a1, tau = h < 0 ? R(-1) : R(1);
            t = sqrt((1 - x) * (1 + x));
            exception = h == 0 && v == 0;
            if (exception) {
                const R r2 = rsqrt(R(2)), e1 = r2 / sqrt(1 + x), e2 = r2 / sqrt(1 - x);
                z11 = e1; z12 = -(ph * e2); z21 = cj(ph) * e1; z22 = e2;
            } else {
                const R tan2 = tau * (2 * u - (a1 + a2) * x) / (t * hypot(h, 2 * v));
                const R c2 = rsqrt(1 + tan2 * tan2), s2 = tan2 * c2;
                R cg = 0, sg = v < 0 ? R(-1) : R(1);                        // h = 0: gamma = +-pi/2
                if (h != 0) { const R tg = 2 * v / h; cg = rsqrt(1 + tg * tg); sg = tg * cg; }
                const R w = t * cg * c2, ws = t * sg * c2;
                cphi = sqrt((1 + x * s2 + w) / 2);
                cpsi = sqrt((1 - x * s2 + w) / 2);
                const T sphi = ph * T(s2 - x, ws) / (2 * cpsi), spsi = cj(ph) * T(s2 + x, -ws) / (2 * cphi);
                z11 = cphi / t; z12 = sphi / t; z21 = -spsi / t; z22 = cpsi / t;
            }
        } else {
            const T x = x0, sp = sqrt(1 + x), sm = sqrt(1 - x);
            t = sqrt((1 - x) * (1 + x));
            const T xi = x / (sp + sm), eta = x / ((1 + sp) * (1 + sm));
            const T num = t * (a2 - a1), den = 2 * a12 - (a1 + a2) * x;
            exception = num == 0 && den == 0;
            if (exception) {                                              // proportional pivot blocks
                const T r2 = rsqrt(T(2));
                z11 = r2 / sp; z12 = -r2 / sm; z21 = r2 / sp; z22 = r2 / sm;
            } else {
                T tn;
                if (den == 0) tn = 0;                                     // cot = +-inf
                else {
                    const T cot = num / den;
                    tn = cot == 0 ? T(1) : sgn1(cot) / (fabs(cot) + hypot(T(1), cot));
                }
                const T c = rsqrt(1 + tn * tn), s = tn * c;
                cphi = c + xi * (s - eta * c); cpsi = c - xi * (s + eta * c);
                const T sphi = s - xi * (c + eta * s), spsi = s + xi * (c - eta * s);
                z11 = cphi / t; z12 = sphi / t; z21 = -spsi / t; z22 = cpsi / t;
            }
        }
        // C1, to one rounding; the exception is big
        kind = (!exception && fabs(cphi / t - 1) <= 2 * eps<R>() && fabs(cpsi / t - 1) <= 2 * eps<R>()) ? 2 : 3;
    } else {
        z11 = R(1); z12 = R(0); z21 = R(0); z22 = R(1);
    }
    const R d1 = abs2(z11) * a1 + 2 * re(cj(z11) * z21 * a12) + abs2(z21) * a2;   // z^H A' z
    const R d2 = abs2(z12) * a1 + 2 * re(cj(z12) * z22 * a12) + abs2(z22) * a2;
    if (d1 < d2) {
        T s1 = z11; z11 = z12; z12 = s1;
        T s2 = z21; z21 = z22; z22 = s2;
        if (kind == 0) kind = 1;
    }
    if (rotate) { z11 *= di; z12 *= di; z21 *= dj; z22 *= dj; }
    return kind;
}

template <typename T, int K, int NT, int MODE>
__global__ void __launch_bounds__(NT)
block_congruence(const T* __restrict__ A, const T* __restrict__ B, const signed char* __restrict__ sign,
                 T* __restrict__ V, int* __restrict__ stats, typename real_of<T>::type tol, int max_sweeps)
{
    using R = typename real_of<T>::type;
    static_assert(MODE == 2 || !real_of<T>::complex, "the hyperbolic SVD is real");
    constexpr int S = K + 1, H = K / 2;
    extern __shared__ unsigned char smem_raw[];
    T* a = reinterpret_cast<T*>(smem_raw);                      // K x S
    T* v = a + K * S;                                           // K x S
    T* b = v + K * S;                                           // K x S (MODE 2)
    T* m = b + (MODE == 2 ? K * S : 0);                         // m11, m12, m21, m22, new a_pp, new a_qq
    __shared__ unsigned char seat[K - 1][K];
    __shared__ int pq[K];
    __shared__ signed char sg[K];
    __shared__ unsigned char act[H], zero[H];
    __shared__ int moved, count;
    const int tid = threadIdx.x;
    const T* ga = A + (long long)blockIdx.x * K * K;
    const T* gb = B + (long long)blockIdx.x * K * K;

    for (int i = tid; i < K * K; i += NT) {
        const int r = i / K, c = i % K;
        a[r * S + c] = (ga[r * K + c] + cj(ga[c * K + r])) / R(2);           // Hermitian part
        if (MODE == 2) b[r * S + c] = (gb[r * K + c] + cj(gb[c * K + r])) / R(2);
        v[r * S + c] = (r == c) ? T(1) : T(0);
    }
    if (MODE == 1 && tid < K) sg[tid] = sign[(long long)blockIdx.x * K + tid];
    tournament_seats<K, NT>(seat);
    if (tid == 0) count = 0;
    bool any = false;
    for (int sweep = 0; sweep < max_sweeps; ++sweep) {
        if (tid == 0) moved = 0;
        __syncthreads();
        for (int step = 0; step < K - 1; ++step) {
            if (tid < H) {
                // p < q, as in the twin's steps: the sorting swap keeps the larger a_pp in the lower index
                const int s0 = seat[step][2 * tid], s1 = seat[step][2 * tid + 1];
                const int p = min(s0, s1), q = max(s0, s1);
                T m11 = R(1), m12 = R(0), m21 = R(0), m22 = R(1), npp = R(0), nqq = R(0);
                bool move = false, rot = false;
                if constexpr (MODE == 1) {
                    const T app = a[p * S + p], aqq = a[q * S + q], apq = a[p * S + q];
                    if (fabs(apq) > tol * sqrt(fabs(app)) * sqrt(fabs(aqq))) {
                        if (hyperbolic_pair(app, aqq, apq, sg[p] != sg[q], m11, m12, m21, m22, npp, nqq))
                            move = rot = true;
                        else
                            atomicAdd(&count, 1);
                    }
                } else {
                    const int kind = hz_pair(re(a[p * S + p]), re(a[q * S + q]), a[p * S + q], re(b[p * S + p]),
                                             re(b[q * S + q]), b[p * S + q], tol, m11, m12, m21, m22);
                    move = kind > 0;
                    rot = kind > 1;
                    if (kind == 3) atomicAdd(&count, 1);
                }
                if (move) moved = 1;
                pq[2 * tid] = p; pq[2 * tid + 1] = q;
                act[tid] = move; zero[tid] = rot;
                m[tid] = m11; m[H + tid] = m12; m[2 * H + tid] = m21; m[3 * H + tid] = m22;
                m[4 * H + tid] = npp; m[5 * H + tid] = nqq;
            }
            __syncthreads();
            for (int i = tid; i < H * H; i += NT) {         // the 2 x 2 block (pair t rows, pair u columns)
                const int t = i / H, u = i % H;
                if (!act[t] && !act[u]) continue;
                const int p = pq[2 * t], q = pq[2 * t + 1], r = pq[2 * u], w = pq[2 * u + 1];
                if constexpr (MODE == 1) {
                    if (t == u) {                           // the pivot block, accurately (eq. 2.6)
                        a[p * S + p] = m[4 * H + t]; a[p * S + q] = 0;
                        a[q * S + p] = 0;             a[q * S + q] = m[5 * H + t];
                        continue;
                    }
                }
                const T t11 = m[t], t12 = m[H + t], t21 = m[2 * H + t], t22 = m[3 * H + t];
                const T u11 = m[u], u12 = m[H + u], u21 = m[2 * H + u], u22 = m[3 * H + u];
                #pragma unroll
                for (int k = 0; k < (MODE == 2 ? 2 : 1); ++k) {
                    T* x = k == 0 ? a : b;
                    const T b00 = x[p * S + r], b01 = x[p * S + w], b10 = x[q * S + r], b11 = x[q * S + w];
                    const T y00 = cj(t11) * b00 + cj(t21) * b10, y01 = cj(t11) * b01 + cj(t21) * b11;   // rows: M_t^H X
                    const T y10 = cj(t12) * b00 + cj(t22) * b10, y11 = cj(t12) * b01 + cj(t22) * b11;
                    x[p * S + r] = y00 * u11 + y01 * u21; x[p * S + w] = y00 * u12 + y01 * u22;   // columns
                    x[q * S + r] = y10 * u11 + y11 * u21; x[q * S + w] = y10 * u12 + y11 * u22;
                    if (t == u && zero[t]) { x[p * S + w] = R(0); x[q * S + r] = R(0); }
                }
            }
            for (int i = tid; i < H * K; i += NT) {         // V M
                const int u = i / K, j = i % K;
                if (!act[u]) continue;
                const int r = pq[2 * u], w = pq[2 * u + 1];
                const T x = v[j * S + r], y = v[j * S + w];
                v[j * S + r] = x * m[u] + y * m[2 * H + u];
                v[j * S + w] = x * m[H + u] + y * m[3 * H + u];
            }
            __syncthreads();
        }
        const bool again = moved;
        __syncthreads();
        if (!again) break;
        any = true;
    }
    if (tid == 0) stats[blockIdx.x] += count;

    T* out = V + (long long)blockIdx.x * K * K;
    if (!any) {
        for (int i = tid; i < K * K; i += NT) out[i] = (i / K == i % K) ? T(1) : T(0);
        return;
    }
    if (tid < K) {                                          // the slot of column tid
        const R d = MODE == 2 ? re(a[tid * S + tid]) / re(b[tid * S + tid]) : re(a[tid * S + tid]);
        const bool desc = MODE == 2 || sg[tid] > 0;
        int r = 0;
        for (int j = 0; j < K; ++j) {
            if (MODE == 1 && sg[j] != sg[tid]) continue;
            const R e = MODE == 2 ? re(a[j * S + j]) / re(b[j * S + j]) : re(a[j * S + j]);
            r += (desc ? e > d : e < d) || (e == d && j < tid);
        }
        int slot = r;                                       // MODE 1: the r-th position of this sign
        if (MODE == 1) {
            for (int j = 0; j < K; ++j) {
                if (sg[j] != sg[tid]) continue;
                if (r-- == 0) { slot = j; break; }
            }
        }
        pq[tid] = slot;
    }
    if constexpr (MODE == 2) {
        __syncthreads();
        for (int i = tid; i < K * K; i += NT) {             // Theta = (a_jj + b_jj)^(-1/2), section 2.4
            const int r = i / K, c = i % K;
            out[r * K + pq[c]] = v[r * S + c] * rsqrt(re(a[c * S + c]) + re(b[c * S + c]));
        }
        return;
    } else {                                                // MODE 1: Newton-Schulz, then the slots
        __syncthreads();
        for (int i = tid; i < K * K; i += NT) {             // P = J V^T J V (over A)
            const int r = i / K, c = i % K;
            T x = 0;
            for (int j = 0; j < K; ++j) x += v[j * S + r] * (sg[j] > 0 ? v[j * S + c] : -v[j * S + c]);
            a[r * S + c] = sg[r] > 0 ? x : -x;
        }
        __syncthreads();
        for (int i = tid; i < K * K; i += NT) {             // V (3 I - P) / 2
            const int r = i / K, c = i % K;
            T x = 0;
            for (int j = 0; j < K; ++j) x += v[r * S + j] * a[j * S + c];
            out[r * K + pq[c]] = T(1.5) * v[r * S + c] - T(0.5) * x;
        }
    }
}
