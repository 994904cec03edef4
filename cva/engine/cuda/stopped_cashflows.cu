// The cashflows of one-asset calls and puts exercised at given dates (numpy twin: the loop of
// cva.engine.lsm.stopped_cashflows), one thread per path, grid-stride over the B x M paths:
//   v = max(+-(S_tau - K_s), 0), then v *= disc[j] for j = tau - 1, ..., 0,
// the payoff in the regressions' type R before the maturity (N - 1) and in the paths' type T at it, the strike
// rounded from double to that type, the discount factors applied one by one in that order: the operations of
// Longstaff-Schwartz's backward loop, so the same bits. S is one asset's slice (B, M, N) read through its
// strides; tau holds `depths` (B, M) arrays of exercise indices; out `depths` (B, M) arrays.

template <typename U>
__device__ __forceinline__ U vanilla(U x, U K, bool call)
{
    const U d = call ? x - K : K - x;
    return (d > U(0) || d != d) ? d : U(0);                  // numpy's maximum(d, 0): NaN stays NaN
}

template <typename T, typename R, typename P>
__global__ void stopped_cashflows(const T* __restrict__ S, long long s_set, long long s_path, long long s_date,
                                  const P* __restrict__ tau, int depths, const double* __restrict__ strike,
                                  const bool* __restrict__ call, const T* __restrict__ disc, int N,
                                  T* __restrict__ out, long long B, int M)
{
    const long long n = B * M;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const long long s = i / M, m = i - s * M;
        const bool c = call[s];
        const double K = strike[s];
        for (int k = 0; k < depths; ++k) {
            const int t = (int)tau[k * n + i];
            const T x = S[s * s_set + m * s_path + t * s_date];
            T v = t == N - 1 ? vanilla<T>(x, (T)K, c) : (T)vanilla<R>((R)x, (R)K, c);
            for (int j = t - 1; j >= 0; --j) v = v * disc[j];
            out[k * n + i] = v;
        }
    }
}
