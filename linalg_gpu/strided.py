"""Batched products of arrays whose rows are strided, such as one date's slice ``S[:, :, j]`` of
paths (B, M, N, d), without copying them.

CuPy's ``matmul`` copies a non-contiguous operand first. cuBLAS's strided-batched GEMM
(``cublas<t>gemmStridedBatched``) takes the distance between rows as the leading dimension
instead, so the slice is read where it lies. On numpy arrays both functions are numpy's
``matmul`` (their twin). Measured on the H100 with cuBLAS for every product, one Longstaff-Schwartz date of
``benchmarks/bench_cva.py`` (3259 sets of 1024 paths, 29 assets, float32), ms: the basket's
``S_j @ w`` 0.70 -> 0.37; with the affine basis of ``cva.lsm`` (no regressors formed), the date's
payoff, normal equations and continuation values 3.26 -> 1.46 (float64, 1630 sets: 2.45 -> 1.10).
Matrix-vector products have since gone to ``cuda/strided_gemv.cu`` (not timed alone), whose sums have a
fixed order: cuBLAS's choice of kernel by batch count made the values depend on the chunk size.
"""

from __future__ import annotations

import numpy as np

from ._backend import get_array_module


def _rows(a):
    """(leading dimension, batch stride) in elements of a 3-D view whose last axis is contiguous
    and whose other strides are non-negative multiples of the item size; None if cuBLAS cannot
    read it as it lies."""
    B, M, k = a.shape
    it = a.itemsize
    sB, sM, sk = a.strides
    if (k > 1 and sk != it) or sB < 0 or sM < 0 or sB % it or sM % it:
        return None
    ld = sM // it if M > 1 else k
    if ld < k:
        return None
    return ld, (sB // it if B > 1 else 0)


def _gemm(dtype, ta, tb, m, n, k, A, lda, sA, B, ldb, sB, C, ldc, sC, batch, alpha=1.0):
    """C = alpha op(A) op(B) for each of ``batch`` column-major matrices (cuBLAS, on the current stream)."""
    import cupy as cp
    from cupy.cuda import cublas

    h = cp.cuda.device.get_cublas_handle()
    cublas.setStream(h, cp.cuda.get_current_stream().ptr)
    mode = cublas.getPointerMode(h)
    cublas.setPointerMode(h, cublas.CUBLAS_POINTER_MODE_HOST)
    a_host, zero = np.full(1, alpha, dtype), np.zeros(1, dtype)
    fn = cublas.sgemmStridedBatched if dtype == np.float32 else cublas.dgemmStridedBatched
    try:
        fn(h, ta, tb, m, n, k, a_host.ctypes.data, A, lda, sA, B, ldb, sB, zero.ctypes.data, C, ldc, sC, batch)
    finally:
        cublas.setPointerMode(h, mode)


def _strided_rows(xp, *arrays):
    """(leading dimension, batch stride) of each 3-D array, if cuBLAS can take them all as they lie:
    cupy arrays of one float dtype, none empty; else None (numpy's matmul, or cupy's, does the work)."""
    dt = arrays[0].dtype
    if (xp is np or dt not in (np.float32, np.float64)
            or any(x.ndim != 3 or x.dtype != dt or x.size == 0 for x in arrays)):
        return None
    rows = [_rows(x) for x in arrays]
    return None if None in rows else rows


def matmul(a, b):
    """``a @ b`` for ``a`` (B, M, k) and ``b`` (k,), (k, n) shared by the sets, or (B, k, n).

    Returns (B, M) for a vector ``b``, else (B, M, n). On the GPU ``a`` is read as it lies when
    its last axis is contiguous (any row and set strides); ``b`` is made contiguous.
    """
    xp = get_array_module(a, b)
    rows = _strided_rows(xp, a) if b.ndim in (1, 2, 3) and b.dtype == a.dtype and b.size else None
    if rows is None or b.shape[-2 if b.ndim > 1 else 0] != a.shape[2] or (b.ndim == 3 and b.shape[0] != a.shape[0]):
        return a @ b                                          # (numpy's error for mismatched shapes)
    from cupy.cuda import cublas

    B, M, k = a.shape
    (lda, sa), = rows
    n = 1 if b.ndim == 1 else b.shape[-1]
    bc = xp.ascontiguousarray(b)
    sb = k * n if b.ndim == 3 else 0
    out = xp.empty((B, M) if b.ndim == 1 else (B, M, n), dtype=a.dtype)
    if n == 1:   # one thread per row, the sum in a fixed order: the same bits whatever B (cuBLAS's are not)
        from ._kernels import get_function, grid_blocks

        get_function("strided_gemv.cu", "strided_gemv", a.dtype)(
            (grid_blocks(B * M),), (256,), (np.uint64(a.data.ptr), np.int64(lda), np.int64(sa), bc, np.int64(sb), out,
                                    np.int64(B), np.int64(M), np.int32(k)))
    else:        # out^T (n x M) = b_b^T a_b^T, both read column-major as they lie
        _gemm(a.dtype.type, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, M, k, bc.data.ptr, n, sb, a.data.ptr, lda, sa,
              out.data.ptr, n, M * n, B)
    return out


def gram(a, c, *, alpha=1.0, out=None):
    """``alpha a^T c`` per set: (B, k, f) for ``a`` (B, M, k) and ``c`` (B, M, f).

    On the GPU both are read as they lie when their last axes are contiguous (any row and set
    strides); with ``c is a``, the Gram matrices a_b^T a_b. ``out`` (B, k, f) receives the result
    (on the GPU written in place when its last axis is contiguous, e.g. a block of a larger matrix).
    """
    xp = get_array_module(a, c)
    rows = None
    if xp is not np and a.ndim == c.ndim == 3 and a.shape[:2] == c.shape[:2]:
        shape = (a.shape[0], a.shape[2], c.shape[2])
        out = xp.empty(shape, dtype=a.dtype) if out is None else out
        rows = _strided_rows(xp, a, c, out) if out.shape == shape else None
    if rows is None:
        r = (a.transpose(0, 2, 1) @ c) * a.dtype.type(alpha)
        if out is None:
            return r
        out[...] = r
        return out
    from cupy.cuda import cublas

    B, M, k = a.shape
    f = c.shape[2]
    (lda, sa), (ldc, sc), (ldo, so) = rows
    # out as it lies is the column-major f x k matrix c_b^T a_b: c_b^T and a_b^T lie column-major
    _gemm(a.dtype.type, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_T, f, k, M, c.data.ptr, ldc, sc, a.data.ptr, lda, sa,
          out.data.ptr, ldo, so, B, alpha)
    return out
