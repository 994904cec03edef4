// The per-system bookkeeping of solve_small after its first stage (small/robust.py,
// first_stage_flags is the numpy twin), fused into one pass: one launch and a 4-byte transfer
// instead of about twenty elementwise kernels and reductions (0.3-0.6 ms per call at 2^20 systems,
// measured on the H100 before this kernel).
//   breakdown = LDL^T failed on finite input (only when the stage is LDL^T)
//   ok       &= the input is finite
//   redo      = finite input and (not ok, or residual > rtol, or sent on by a per-system memory)
//   any      |= 1 non-finite input, 2 |A - A^T| > asym_max max|A| on finite input, 4 not ok, 8 redo
#include "common.cuh"

template <typename T>
__global__ void first_stage_flags(bool* __restrict__ ok, const bool* __restrict__ nonfinite,
                                  const T* __restrict__ resid, const T* __restrict__ asym,
                                  const signed char* __restrict__ start_codes, int use_codes, T rtol,
                                  T asym_max, int ldlt, bool* __restrict__ breakdown, bool* __restrict__ redo,
                                  unsigned int* __restrict__ any, long long batch)
{
    unsigned int bits = 0;
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < batch;
         s += (long long)gridDim.x * blockDim.x) {
        const bool nf = nonfinite[s], ok0 = ok[s], good = ok0 && !nf;
        const bool later = use_codes && start_codes[s] > 0;
        const bool re = !nf && (!(good && resid[s] <= rtol) || later);
        ok[s] = good;
        breakdown[s] = ldlt && !ok0 && !nf;
        redo[s] = re;
        bits |= (nf ? 1u : 0u) | (!nf && asym[s] > asym_max ? 2u : 0u) | (good ? 0u : 4u) | (re ? 8u : 0u);
    }
    bits = __reduce_or_sync(0xffffffffu, bits);
    if ((threadIdx.x & 31) == 0 && bits) atomicOr(any, bits);
}

// The input screening of eigh_small (cuda/eigh_jacobi.cu, cuda/eigh_small.cu) reduced the same way to
// bits 1 and 2 above (numpy twin: small/_common.py, screening_flags): one launch and a 4-byte transfer
// instead of five CuPy kernels.
template <typename T>
__global__ void screening_flags(const bool* __restrict__ nonfinite, const T* __restrict__ asym, T asym_max,
                                unsigned int* __restrict__ any, long long batch)
{
    unsigned int bits = 0;
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < batch;
         s += (long long)gridDim.x * blockDim.x) {
        const bool nf = nonfinite[s];
        bits |= (nf ? 1u : 0u) | (!nf && asym[s] > asym_max ? 2u : 0u);
    }
    bits = __reduce_or_sync(0xffffffffu, bits);
    if ((threadIdx.x & 31) == 0 && bits) atomicOr(any, bits);
}
