// The per-system bookkeeping of solve_small (small/robust.py; numpy twins: first_stage_flags, scatter_stage,
// merge_later_stages and next_start_codes there), fused into one pass each: one launch (and a 4-byte transfer) instead of about
// twenty elementwise kernels, reductions and boolean-mask assignments (0.3-0.6 ms per call at 2^20
// systems, measured on the H100 before the first kernel; CuPy's x[~ok] = nan alone took 0.19 ms of
// host time at 2048 systems).
// first_stage_flags, after the first stage:
//   breakdown = LDL^T failed on finite input (only when the stage is LDL^T)
//   ok       &= the input is finite, and x = NaN where not ok (nr = n r entries per system)
//   codes     = the first stage's code `first`, or on non-finite input 3 ("none") with the residual and condition
//               estimate NaN
//   ndisc     = 0 where given (the first stage discards no eigenvalues: LDL^T, Householder + PCR), else null
//   redo      = finite input and (not ok, or residual > rtol, or sent on by a per-system memory)
//   any      |= 1 non-finite input, 2 |A - A^T| > asym_max max|A| on finite input, 4 not ok, 8 redo (null: not
//               wanted)
// The codes and zeros written here spare solve_small a memset each per call.
#include "common.cuh"

template <typename T>
__global__ void first_stage_flags(T* __restrict__ x, int nr, signed char* __restrict__ codes, signed char first,
                                  int* __restrict__ ndisc, T* __restrict__ resid, T* __restrict__ cond,
                                  bool* __restrict__ ok, const bool* __restrict__ nonfinite,
                                  const T* __restrict__ asym,
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
        if (!good) for (int k = 0; k < nr; ++k) x[s * nr + k] = T(NAN);
        codes[s] = nf ? 3 : first;
        if (ndisc) ndisc[s] = 0;
        if (nf) {
            resid[s] = T(NAN);
            cond[s] = T(NAN);
        }
        breakdown[s] = ldlt && !ok0 && !nf;
        redo[s] = re;
        bits |= (nf ? 1u : 0u) | (!nf && asym[s] > asym_max ? 2u : 0u) | (good ? 0u : 4u) | (re ? 8u : 0u);
    }
    if (any) {                                                        // (the same for every thread)
        bits = __reduce_or_sync(0xffffffffu, bits);
        if ((threadIdx.x & 31) == 0 && bits) atomicOr(any, bits);
    }
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

// scatter_stage, after a later stage of solve_small run on gathered systems: its results at rows
// idx[count + k] (k < count) go to the systems idx[k] of the batch, x as NaN where the stage's ok is
// false, and their method code becomes `code`. One thread per entry of x (nr per system); the first
// of a system also moves its scalars.
template <typename T>
__global__ void scatter_stage(const long long* __restrict__ idx, long long count, int nr, const T* __restrict__ xs,
                              const T* __restrict__ cs, const int* __restrict__ nds, const bool* __restrict__ oks,
                              const T* __restrict__ rs, signed char code, T* __restrict__ x, signed char* __restrict__ codes,
                              T* __restrict__ resid, T* __restrict__ cond, int* __restrict__ ndisc, bool* __restrict__ ok)
{
    for (long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x; t < count * nr;
         t += (long long)gridDim.x * blockDim.x) {
        const long long k = t / nr, s = idx[k], r = idx[count + k];
        const int e = (int)(t % nr);
        x[s * nr + e] = oks[r] ? xs[r * nr + e] : T(NAN);
        if (e == 0) {
            codes[s] = code;
            resid[s] = rs[r];
            cond[s] = cs[r];
            ndisc[s] = nds[r];
            ok[s] = oks[r];
        }
    }
}

// merge_later_stages, after the later stages of solve_small run on the whole batch (small n: no gathering, no read
// of counts by the host), in one pass: a system still `pending` takes the results of Householder + PCR (the middle
// stage, where it ran: xm non-null; code 1, no eigenvalue discarded) if it waits for no later stage (start code
// <= 1, with per-system codes) and that stage solved it (ok and residual <= rtol), else those of the eigen-solve
// (the last stage: code 2, its ok x finite); x as NaN where the stage's ok is false. With `next` non-null, every
// system's start code for next time as next_start_codes gives it (a per-system SolverMemory's record). One launch
// for what took five (two merges, the eigen-solve's ok in two, the record). One thread per system (nr entries of x
// each).
template <typename T>
__global__ void merge_later_stages(int nr, const T* __restrict__ xm, const T* __restrict__ cm,
                                   const bool* __restrict__ okm, const T* __restrict__ rm, const T* __restrict__ xl,
                                   const T* __restrict__ cl, const int* __restrict__ ndl, const T* __restrict__ rl,
                                   T rtol, const signed char* __restrict__ start_codes, int use_codes,
                                   const bool* __restrict__ pending, T* __restrict__ x,
                                   signed char* __restrict__ codes, T* __restrict__ resid, T* __restrict__ cond,
                                   int* __restrict__ ndisc, bool* __restrict__ ok, signed char* __restrict__ next,
                                   long long batch)
{
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < batch;
         s += (long long)gridDim.x * blockDim.x) {
        if (pending[s]) {
            const bool middle = xm && (!use_codes || start_codes[s] <= 1) && okm[s] && rm[s] <= rtol;
            const T* xs = (middle ? xm : xl) + s * nr;
            bool good = true;
            if (middle) {
                codes[s] = 1;
                resid[s] = rm[s];
                cond[s] = cm[s];
                ndisc[s] = 0;
            } else {
                for (int e = 0; e < nr; ++e) good = good && isfinite(xs[e]);
                codes[s] = 2;
                resid[s] = rl[s];
                cond[s] = cl[s];
                ndisc[s] = ndl[s];
            }
            for (int e = 0; e < nr; ++e) x[s * nr + e] = good ? xs[e] : T(NAN);
            ok[s] = good;
        }
        if (next) {
            const signed char c = codes[s];
            const bool need = c == 2 && (!use_codes || start_codes[s] < 2 || ndisc[s] > 0);
            next[s] = need ? 2 : (c == 1 ? 1 : 0);
        }
    }
}

// next_start_codes, a per-system SolverMemory's record: the stage each system starts at next time, 2 (the
// eigen-solve) where it needed it (method 2, and it started before it or discarded eigenvalues), 1 where
// Householder + PCR solved it, else 0; one launch instead of about eight elementwise kernels.
template <typename I>
__global__ void next_start_codes(const signed char* __restrict__ code, const I* __restrict__ ndisc,
                                 const signed char* __restrict__ start, int use_start,
                                 signed char* __restrict__ out, long long batch)
{
    for (long long s = (long long)blockIdx.x * blockDim.x + threadIdx.x; s < batch;
         s += (long long)gridDim.x * blockDim.x) {
        const bool eig = code[s] == 2;
        const bool need = eig && (!use_start || start[s] < 2 || ndisc[s] > 0);
        out[s] = need ? 2 : (code[s] == 1 ? 1 : 0);
    }
}
