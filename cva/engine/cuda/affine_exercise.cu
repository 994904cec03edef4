// One date of Longstaff-Schwartz's backward loop with the affine basis psi = (1, S / scale[, h / c]) (numpy twin:
// cva.engine.lsm.affine_exercise_twin), one thread per path, grid-stride over the B x M paths of one date's slice S
// (B, M, d), read through its strides. For each depth k < depths (the sets' 2^k equal parts of consecutive paths,
// the part's coefficients beta the row B (2^k - 1) + b 2^k + m / (M / 2^k) of the solver's x):
//   C = sum_a S_a (beta_{1+a} inv_a) + beta_0 [+ beta_{d+1} (h / c)]         (inv, c: the set's group's)
//   ex = h > 0 and h >= C,   V_k = (ex ? h : V_k) [* disc],   stop_k = ex ? j : stop_k,   ex_out = ex of depth 0
// with the operations and roundings of lsm._affine_fitted, the exercise and the next date's discount as they were
// separate kernels, so the same bits: the sum over the assets from 0 written as strided_gemv's (acc += x * w, which
// both compile to the same fused multiply-adds), every other product, quotient and sum rounded on its own (the _rn
// intrinsics: never fused). One launch where they took about thirty. With `count` (B,) non-null the exercises of depth 0
// are counted per set into it (one atomic per set and warp) instead of written to ex_out (then null): the LSM call's
// exercise shares without a (B, M) array per date, their stack and its sum.

#include "rounding.cuh"

template <typename T, typename R, typename ST>
__global__ void affine_exercise(const T* __restrict__ S, long long s_set, long long s_path, int d,
                                const R* __restrict__ h, const R* __restrict__ beta, int p,
                                const R* __restrict__ inv, const R* __restrict__ c, int groups, int payoff_regressor,
                                int depths, T* __restrict__ V, ST* __restrict__ stop, ST j, T disc, int discount,
                                bool* __restrict__ ex_out, unsigned long long* __restrict__ count, long long B,
                                int M)
{
    const long long n = B * M;
    const long long per_group = B / groups;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long b = i / M;
        const int m = (int)(i - b * M);
        const long long g = b / per_group;
        const T* x = S + b * s_set + m * s_path;
        const R hv = h[i];
        const R pc = payoff_regressor ? div_rn<R>(hv, c[g]) : R(0);
        bool ex0 = false;
        for (int k = 0; k < depths; ++k) {
            const long long row = B * ((1LL << k) - 1) + (b << k) + m / (M >> k);
            const R* bk = beta + row * p;
            R acc = R(0);
            for (int a = 0; a < d; ++a) {
                const R xa = (R)x[a];
                acc += xa * mul_rn<R>(bk[1 + a], inv[g * d + a]);
            }
            R C = add_rn<R>(acc, bk[0]);
            if (payoff_regressor) C = add_rn<R>(C, mul_rn<R>(bk[d + 1], pc));
            const bool ex = (hv > R(0)) && (hv >= C);
            T v = ex ? (T)hv : V[k * n + i];
            if (discount) v = mul_rn<T>(v, disc);
            V[k * n + i] = v;
            if (stop != nullptr && ex) stop[k * n + i] = j;
            if (k == 0) ex0 = ex;
        }
        if (ex_out != nullptr) ex_out[i] = ex0;
        if (count != nullptr) {                             // the warp's lanes of one set: one atomic for them
            const unsigned active = __activemask();
            const unsigned peers = __match_any_sync(active, (unsigned long long)b);
            const unsigned votes = __ballot_sync(active, ex0) & peers;
            if ((int)(threadIdx.x & 31) == __ffs(peers) - 1 && votes != 0u)
                atomicAdd(count + b, (unsigned long long)__popc(votes));
        }
    }
}
