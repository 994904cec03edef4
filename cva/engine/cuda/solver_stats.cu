// The statistics of one solver report of a chunk's Longstaff-Schwartz call (numpy twin:
// cva.engine.nested.solver_stats_twin), accumulated into out (7 unsigned 64-bit words, zeroed before the call's
// first report): the number of systems solved by each method code 0..3 (out[0..3]), the eigenvalues discarded
// (out[4]), the systems not ok (out[5]), and the largest finite residual (out[6], the bits of a non-negative double,
// so that an integer maximum is the maximum of the residuals; 0 where none is finite). Integer sums and a maximum:
// the same numbers in any order. One launch per report where the CuPy operations took about twenty per call.

template <typename T>
__global__ void solver_stats(const T* __restrict__ residual, const signed char* __restrict__ code,
                             const int* __restrict__ discarded, const bool* __restrict__ ok, long long n,
                             unsigned long long* __restrict__ out)
{
    unsigned long long counts[4] = {0, 0, 0, 0};
    unsigned long long lost = 0, failed = 0, worst = 0;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = code[i];
        if (c >= 0 && c < 4) counts[c] += 1;
        lost += (unsigned long long)discarded[i];
        failed += ok[i] ? 0ull : 1ull;
        const double r = (double)residual[i];
        if (isfinite(r)) {
            const unsigned long long bits = (unsigned long long)__double_as_longlong(r > 0.0 ? r : 0.0);
            worst = bits > worst ? bits : worst;
        }
    }
    for (int offset = 16; offset > 0; offset >>= 1) {
        for (int k = 0; k < 4; ++k) counts[k] += __shfl_down_sync(0xffffffffu, counts[k], offset);
        lost += __shfl_down_sync(0xffffffffu, lost, offset);
        failed += __shfl_down_sync(0xffffffffu, failed, offset);
        const unsigned long long other = __shfl_down_sync(0xffffffffu, worst, offset);
        worst = other > worst ? other : worst;
    }
    if ((threadIdx.x & 31) == 0) {
        for (int k = 0; k < 4; ++k)
            if (counts[k]) atomicAdd(out + k, counts[k]);
        if (lost) atomicAdd(out + 4, lost);
        if (failed) atomicAdd(out + 5, failed);
        if (worst) atomicMax(out + 6, worst);
    }
}
