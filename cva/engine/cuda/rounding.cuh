// Sums, products and quotients each rounded on its own (the _rn intrinsics: never fused into a multiply-add), so
// that a kernel gives the bits of its numpy twin, or of the separate kernels it replaced.
#pragma once

template <typename U> __device__ __forceinline__ U add_rn(U a, U b);
template <> __device__ __forceinline__ float add_rn<float>(float a, float b) { return __fadd_rn(a, b); }
template <> __device__ __forceinline__ double add_rn<double>(double a, double b) { return __dadd_rn(a, b); }
template <typename U> __device__ __forceinline__ U mul_rn(U a, U b);
template <> __device__ __forceinline__ float mul_rn<float>(float a, float b) { return __fmul_rn(a, b); }
template <> __device__ __forceinline__ double mul_rn<double>(double a, double b) { return __dmul_rn(a, b); }
template <typename U> __device__ __forceinline__ U div_rn(U a, U b);
template <> __device__ __forceinline__ float div_rn<float>(float a, float b) { return __fdiv_rn(a, b); }
template <> __device__ __forceinline__ double div_rn<double>(double a, double b) { return __ddiv_rn(a, b); }
