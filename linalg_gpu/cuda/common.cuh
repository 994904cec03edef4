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
