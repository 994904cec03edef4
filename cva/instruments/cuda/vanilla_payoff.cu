// The exercise values of one-asset calls and puts stacked in a batch, in one pass (numpy twin: the operations of
// cva/instruments/products.py, stacked_payoff): out[b, m, k] = max(+-(U[b, m, k] - K[b]), 0), + for a call, with U
// the asset's slice of the paths as it lies (strides in elements) and K the strike of row b rounded to U's type;
// out contiguous (B, M, N). NaN stays NaN (numpy's maximum). One launch where CuPy took four (two differences, a
// where and a maximum).
template <typename T>
__global__ void vanilla_payoff(const T* __restrict__ u, long long sb, long long sm, long long sk,
                               const T* __restrict__ strike, const bool* __restrict__ call, T* __restrict__ out,
                               long long B, long long M, long long N)
{
    const long long total = B * M * N;
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < total;
         t += (long long)gridDim.x * blockDim.x) {
        const long long k = t % N, m = (t / N) % M, b = t / (N * M);
        const T x = u[b * sb + m * sm + k * sk];
        const T d = call[b] ? x - strike[b] : strike[b] - x;
        out[t] = (d > T(0) || d != d) ? d : T(0);
    }
}
