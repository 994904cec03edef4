// Small helpers shared by the kernels of linalg_gpu (included by the .cu files).
#pragma once

template <typename T> __device__ __forceinline__ T eps();
template <> __device__ __forceinline__ float eps<float>() { return 1.1920929e-07f; }
template <> __device__ __forceinline__ double eps<double>() { return 2.220446049250313e-16; }

// NVRTC (CuPy's run-time compiler) has no <math.h>: the two constants the kernels use.
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

// The threads of one system: W lanes. For N <= 32 a system lives inside one warp (N lanes when N
// divides 32, else a whole warp with idle lanes) and synchronizes with __syncwarp; for N > 32 it
// is N threads of a block and synchronizes with __syncthreads.
template <int N>
struct Group {
    static constexpr bool WARP = N <= 32;
    static constexpr int W = WARP ? ((32 % N == 0) ? N : 32) : N;
};

template <int N>
__device__ __forceinline__ void gsync()
{
    if constexpr (Group<N>::WARP) __syncwarp(); else __syncthreads();
}
