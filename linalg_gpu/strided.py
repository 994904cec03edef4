"""Batched products of arrays whose rows are strided, such as one date's slice ``S[:, :, j]`` of
paths (B, M, N, d), without copying them.

CuPy's ``matmul`` copies a non-contiguous operand first. cuBLAS's strided-batched GEMM
(``cublas<t>gemmStridedBatched``) takes the distance between rows as the leading dimension
instead, so the slice is read where it lies. On numpy arrays both functions are numpy's
``matmul`` (their twin). Measured on the H100 with cuBLAS for every product, one Longstaff-Schwartz date of
``benchmarks/bench_cva.py`` (3259 sets of 1024 paths, 29 assets, float32), ms: the basket's
``S_j @ w`` 0.70 -> 0.37; with the affine basis of ``cva.lsm`` (no regressors formed), the date's
payoff, normal equations and continuation values 3.26 -> 1.46 (float64, 1630 sets: 2.45 -> 1.10).
Products with a few vectors and the Gram matrices of the regressions have since gone to kernels of our own
(``cuda/strided_gemv.cu``, ``cuda/strided_gram.cu``), whose sums have a fixed order: cuBLAS's choice of kernel
by batch count made the values depend on the chunk size. On the H100, :func:`concat_gram` of 8192 strided sets of
512 paths (d = 29 and three further columns, float32) took 1.05 ms, cupy's batched X^T X of the same sets made
contiguous 2.60 ms.
"""

from __future__ import annotations

import numpy as np

from ._backend import get_array_module

#: Matrix products with up to this many columns in ``b`` go to ``cuda/strided_gemv.cu`` (sums in a fixed order).
FIXED_ORDER_COLUMNS = 4
#: Gram matrices of up to this many columns (n = d + e) take a warp per set (``concat_gram_small``), more take
#: 32 x 32 tiles per block (``concat_gram``).
SMALL_GRAM_COLUMNS = 6


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


def _strided_rows(xp, a):
    """(leading dimension, batch stride) of the 3-D array ``a`` if our kernels (or cuBLAS) can read it as it lies:
    a non-empty cupy float32 or float64 array; else None (numpy's matmul, or cupy's, does the work)."""
    if xp is np or a.dtype not in (np.float32, np.float64) or a.ndim != 3 or a.size == 0:
        return None
    return _rows(a)


def matmul(a, b):
    """``a @ b`` for ``a`` (B, M, k) and ``b`` (k,), (k, n) shared by the sets, or (B, k, n).

    Returns (B, M) for a vector ``b``, else (B, M, n). On the GPU ``a`` is read as it lies when
    its last axis is contiguous (any row and set strides); ``b`` is made contiguous. Up to
    :data:`FIXED_ORDER_COLUMNS` columns the sums have a fixed order (``cuda/strided_gemv.cu``): the same bits
    whatever B.
    """
    xp = get_array_module(a, b)
    rows = _strided_rows(xp, a) if b.ndim in (1, 2, 3) and b.dtype == a.dtype and b.size else None
    if rows is None or b.shape[-2 if b.ndim > 1 else 0] != a.shape[2] or (b.ndim == 3 and b.shape[0] != a.shape[0]):
        return a @ b                                          # (numpy's error for mismatched shapes)
    from cupy.cuda import cublas

    B, M, k = a.shape
    lda, sa = rows
    n = 1 if b.ndim == 1 else b.shape[-1]
    bc = xp.ascontiguousarray(b)
    sb = k * n if b.ndim == 3 else 0
    out = xp.empty((B, M) if b.ndim == 1 else (B, M, n), dtype=a.dtype)
    if n <= FIXED_ORDER_COLUMNS:
        from ._kernels import get_function, grid_blocks

        get_function("strided_gemv.cu", "strided_gemv", a.dtype, n)(
            (grid_blocks(B * M, 128),), (128,), (np.uint64(a.data.ptr), np.int64(lda), np.int64(sa), bc, np.int64(sb),
                                            out, np.int64(B), np.int64(M), np.int32(k)))
    else:        # out^T (n x M) = b_b^T a_b^T, both read column-major as they lie
        _gemm(a.dtype.type, cublas.CUBLAS_OP_N, cublas.CUBLAS_OP_N, n, M, k, bc.data.ptr, n, sb, a.data.ptr, lda, sa,
              out.data.ptr, n, M * n, B)
    return out


def concat_gram(s, f=None, weights=None, *, alpha=1.0, rows=None):
    """``alpha sum_m w_m z_m z_m^T`` per set, z_m = (s[b, m], f[b, m]): (B, n, n), n = d + e, or with ``rows``
    its first rows only, (B, rows, n).

    ``s`` (B, M, d), on the GPU read as it lies when its last axis is contiguous (one date's slice of the paths),
    ``f`` (B, M, e) optional further columns (on the GPU read as they lie, any strides: e.g. planes (e, B, M)
    transposed), ``weights`` (B, M) optional (default ones; a boolean mask is read as 0 and 1, on the GPU without
    a cast). On the GPU the sums have a fixed order (``cuda/strided_gram.cu``): the same bits whatever B, unlike
    cuBLAS's batched products.
    """
    xp = get_array_module(s)
    if s.ndim != 3 or s.dtype not in (np.float32, np.float64):
        raise ValueError(f"s must be a float32 or float64 array (B, M, d), got {s.dtype} {s.shape}")
    B, M, d = s.shape
    if f is not None and (f.ndim != 3 or f.shape[:2] != (B, M)):
        raise ValueError(f"f must have shape ({B}, {M}, e), got {f.shape}")
    if weights is not None and weights.shape != (B, M):
        raise ValueError(f"weights must have shape ({B}, {M}), got {weights.shape}")
    e = 0 if f is None else f.shape[2]
    n = d + e
    rows = n if rows is None else int(rows)
    if not 0 < rows <= n:
        raise ValueError(f"rows must be in 1 .. {n}, got {rows}")
    strides = _strided_rows(xp, s)
    if strides is None:
        z = s if f is None else xp.concatenate([s, f.astype(s.dtype, copy=False)], axis=2)
        zw = z if weights is None else z * weights.astype(s.dtype, copy=False)[..., None]
        return (zw[..., :rows].transpose(0, 2, 1) @ z) * s.dtype.type(alpha)
    from ._kernels import get_function, grid_blocks

    lds, ss = strides
    out = xp.empty((B, rows, n), dtype=s.dtype)
    fc = None if f is None else f.astype(s.dtype, copy=False)                   # read as it lies (any strides)
    f_ptr, f_strides = (0, (0, 0, 0)) if fc is None else (fc.data.ptr, [st // fc.itemsize for st in fc.strides])
    f_args = (np.uint64(f_ptr), *map(np.int64, f_strides), np.int32(e))
    mask = weights is not None and weights.dtype == np.bool_                   # (read as 0 and 1 by the kernels)
    wc = None if weights is None else xp.ascontiguousarray(weights, dtype=None if mask else s.dtype)
    w_type = ("bool",) if mask else ()
    if n <= SMALL_GRAM_COLUMNS:                                        # a warp per set
        get_function("strided_gram.cu", "concat_gram_small", s.dtype, n, *w_type)(
            (grid_blocks(32 * B, 256),), (256,), (np.uint64(s.data.ptr), np.int64(lds), np.int64(ss), np.int32(d),
                                                  *f_args, np.uint64(0) if wc is None else wc, out,
                                                  np.int64(B), np.int32(M), np.int32(rows), s.dtype.type(alpha)))
        return out
    tiles = -(-n // 32)
    get_function("strided_gram.cu", "concat_gram", s.dtype, *w_type)(
        (B, -(-rows // 32) * tiles), (256,), (np.uint64(s.data.ptr), np.int64(lds), np.int64(ss), np.int32(d),
                                              *f_args, np.uint64(0) if wc is None else wc, out, np.int32(M),
                                              np.int32(rows), s.dtype.type(alpha)))
    return out
