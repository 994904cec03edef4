"""Shared plumbing of the small-system solvers: argument checks and the batch-last layout.

Public functions take numpy.linalg-style batches ``(..., n, n)``. The numpy cores work on
*batch-last* arrays: ``A`` becomes ``(n, n, B)`` with the systems along the last, contiguous
axis, so that every elementwise operation streams over the batch (the CPU analogue of the
paper's independent thread groups). Large batches are cut into chunks that stay in cache and
are run on a thread pool (numpy releases the GIL inside its loops). The GPU launchers
(``_gpu.py``) use the argument checks and flatten the batch the same way.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from functools import lru_cache

import numpy as np

from .._backend import as_array, check_dtype, common_dtype, get_array_module

__all__ = ["check_square_batch", "check_rhs", "check_symmetric", "check_finite_batch", "check_symmetric_input",
           "require_memory", "division_tree",
           "check_tridiagonal", "screening_flags", "raise_for_flags", "flatten_batch", "map_chunks", "chunk_size",
           "default_rtol", "real_number", "first_index", "require_numpy", "common_dtype", "SYMMETRY_RTOL"]

_MAX_WORKERS = max(1, min(8, os.cpu_count() or 1))


def first_index(flags, batch_shape):
    """Batch index (tuple) of the first True in the flat boolean array ``flags``."""
    i = int(np.flatnonzero(np.asarray(flags))[0])
    return tuple(int(k) for k in np.unravel_index(i, batch_shape)) if batch_shape else ()


def check_square_batch(A, name="A"):
    """``A`` as an array of shape ``(..., n, n)`` with n >= 1 and a float dtype."""
    A = as_array(A, name)
    check_dtype(A, name)
    if A.ndim < 2:
        raise ValueError(f"{name} must have shape (..., n, n); got {A.ndim}-dimensional shape {A.shape}")
    if A.shape[-1] != A.shape[-2]:
        raise ValueError(f"{name} must be square in its last two axes; got shape {A.shape}")
    if A.shape[-1] == 0:
        raise ValueError(f"{name} has n = 0: each system needs at least one unknown")
    return A


def check_symmetric_input(A, fname, check_finite, assume_symmetric):
    """The argument checks of the one-matrix CPU functions: (A, batch shape, n). The outputs' memory is
    checked first, before the checks read A (a broadcast batch can be far larger than its memory)."""
    A = check_square_batch(A, "A")
    require_numpy(A, fname)
    batch = A.shape[:-2]
    require_memory(fname, A.size * A.dtype.itemsize + A.size // max(A.shape[-1], 1) * A.dtype.itemsize)
    if check_finite:
        check_finite_batch([A], batch, ["A"])
    if not assume_symmetric:
        check_symmetric(A)
    return A, batch, A.shape[-1]


def require_memory(fname, nbytes):
    """A ``MemoryError`` naming ``fname`` and the size at once where ``nbytes`` of outputs cannot be allocated."""
    try:
        probe = np.empty(int(nbytes), dtype=np.uint8)
    except (MemoryError, ValueError):
        raise MemoryError(f"{fname}: the batch's outputs need {nbytes / 2**30:,.1f} GiB, more than this machine "
                          "can allocate; pass fewer systems at a time") from None
    del probe


#: Batches up to this many systems have their flags reduced on the host (see :func:`host_anys`);
#: larger ones on the device, where the copy would cost more than the reduction.
HOST_FLAGS_MAX = 1 << 16


def host_anys(*flags) -> tuple:
    """``tuple(bool(f.any()) for f in flags)``, read on the host in one transfer: cupy flags cost one
    synchronization for all of them. Batches up to ``HOST_FLAGS_MAX`` systems copy the flags (one
    byte per system) instead of running CuPy reductions: CuPy JIT-compiles its reduction kernels per
    launch configuration, and in bench_cva's first run at a new batch size (3259 systems) ten such
    compiles of 1.2 s each were 12 of its 13.5 s (measured on an H100 with an empty CuPy cache)."""
    if not flags or not hasattr(flags[0], "get"):
        return tuple(bool(np.asarray(f).any()) for f in flags)
    import cupy as cp

    if flags[0].size > HOST_FLAGS_MAX:
        return tuple(bool(v) for v in cp.stack([f.any() for f in flags]).get())
    allf = cp.concatenate([f.ravel() for f in flags]).get()
    return tuple(bool(p.any()) for p in np.split(allf, np.cumsum([f.size for f in flags])[:-1]))


def host_any(flags) -> bool:
    """``flags.any()`` on the host (:func:`host_anys`)."""
    return host_anys(flags)[0]


def screening_flags(nonfinite, asym, asym_max):
    """(some system has NaN/Inf input, some finite system has max|A - A^T| / max|A| > asym_max) from a
    kernel's per-system screening flags; the numpy twin of ``_gpu.screening_flags``."""
    nonfinite, asym = np.asarray(nonfinite), np.asarray(asym)
    return bool(nonfinite.any()), bool((~nonfinite & (asym > asym_max)).any())


def raise_for_flags(A, arrays, names, nonfinite_found, asymmetric_found, hint="NaN results for these systems"):
    """Turn "some system has a NaN/Inf" and "some system is not symmetric" into the errors of the
    argument checks, which name the first offending system."""
    if nonfinite_found:
        check_finite_batch(arrays, A.shape[:-2], names, hint)
    if asymmetric_found:
        check_symmetric(A)


def check_tridiagonal(d, e, fname):
    """The argument checks of the tridiagonal functions: (d, e, batch shape, n, dtype)."""
    d = as_array(d, "d")
    e = as_array(e, "e")
    for arr, nm in ((d, "d"), (e, "e")):
        check_dtype(arr, nm)
        require_numpy(arr, fname)
    if d.ndim < 1 or d.shape[-1] == 0:
        raise ValueError(f"d must have shape (..., n) with n >= 1; got {d.shape}")
    batch, n = d.shape[:-1], d.shape[-1]
    if e.shape != batch + (n - 1,):
        raise ValueError(f"e must have shape {batch + (n - 1,)} to match d of shape {d.shape}; got {e.shape}")
    return d, e, batch, n, common_dtype(("d", d), ("e", e))


def check_rhs(b, A, name="b"):
    """``b`` as ``(..., n)`` (one right-hand side) or ``(..., n, k)``; returns (b, is_vector)."""
    xp = get_array_module(A)
    b = as_array(b, name, xp)
    check_dtype(b, name)
    batch, n = A.shape[:-2], A.shape[-1]
    if b.ndim == A.ndim - 1 and b.shape == A.shape[:-1]:
        return b, True
    if b.ndim == A.ndim and b.shape[:-2] == batch and b.shape[-2] == n:
        return b, False
    raise ValueError(
        f"{name} must have shape {batch + (n,)} or {batch + (n, 'k')} to match A of shape {A.shape}; "
        f"got {b.shape}"
    )


def check_finite_batch(arrays, batch_shape, names, hint="NaN results for these systems"):
    """Raise ValueError naming the first system (batch index) that holds a NaN or an Inf; ``hint``
    says what ``check_finite=False`` gives instead (None: nothing to suggest)."""
    B = int(np.prod(batch_shape, dtype=np.int64))
    bad = None
    for arr, nm in zip(arrays, names, strict=True):
        if B == 0 or arr.size == 0:
            continue
        xp = get_array_module(arr)
        f = ~xp.isfinite(arr.reshape(B, -1)).all(axis=1)
        if bool(f.any()):
            idx = first_index(f.get() if hasattr(f, "get") else f, batch_shape)
            bad = (nm, idx, int(f.sum()))
            break
    if bad is not None:
        nm, idx, count = bad
        raise ValueError(f"{nm} contains NaN or Inf in {count} system(s), the first at batch index {idx}"
                         + (f"; pass check_finite=False to get {hint} instead" if hint else ""))


SYMMETRY_RTOL = 100   # |A - A^T| <= SYMMETRY_RTOL * eps * max|A| counts as symmetric


def check_symmetric(A, name="A", tol=None):
    """Raise ValueError naming the first system with |A - A^T| > tol * max|A| (tol = 100 eps)."""
    xp = get_array_module(A)
    tol = SYMMETRY_RTOL * float(np.finfo(A.dtype).eps) if tol is None else tol
    batch, n = A.shape[:-2], A.shape[-1]
    B = int(np.prod(batch, dtype=np.int64))
    flat = A.reshape(B, n, n)
    asym, scale = xp.empty(B, dtype=A.dtype), xp.empty(B, dtype=A.dtype)
    step = chunk_size(n) * 4
    for s in range(0, B, step):                        # chunks stay in cache
        blk = flat[s:s + step]
        asym[s:s + step] = xp.abs(blk - blk.transpose(0, 2, 1)).max(axis=(1, 2))
        scale[s:s + step] = xp.abs(blk).max(axis=(1, 2))
    bad = asym > tol * scale
    if bool(bad.any()):
        badh = bad.get() if hasattr(bad, "get") else bad
        i = int(np.flatnonzero(badh)[0])
        raise ValueError(
            f"{name} is not symmetric: {int(badh.sum())} system(s) fail, the first at batch index "
            f"{first_index(badh, batch)} (max |A - A^T| = {float(asym[i]):.3g} vs max |A| = "
            f"{float(scale[i]):.3g}, tolerance {tol:.1e} relative); "
            "pass assume_symmetric=True to use the lower triangle without this check"
        )


def chunk_size(n, nbytes=2**22):
    """Systems per chunk so that one n x n float64 block of the chunk holds about ``nbytes``.

    4 MB suits the Householder and eigen cores; LDL^T, with fewer operations per element,
    does best with 8 MB (measured on 2 cores: smaller chunks pay numpy's per-call overhead
    more often, larger ones leave the caches).
    """
    return int(max(16, min(4096, nbytes // (8 * n * n))))


def contiguous_batch(xp, X, dtype, n_trailing):
    """``X`` as a C-contiguous ``(B, *t)`` array of ``dtype``; ``X`` itself when it is one already
    (every cupy call costs microseconds of host time before the kernel launch)."""
    if X.dtype != dtype:
        X = X.astype(dtype)
    if X.ndim != n_trailing + 1:
        X = flatten_batch(X, n_trailing)
    return X if X.flags.c_contiguous else xp.ascontiguousarray(X)


def flatten_batch(X, n_trailing):
    """(..., *t) -> (B, *t) without copying when possible."""
    lead = X.shape[:X.ndim - n_trailing]
    return X.reshape((math.prod(lead),) + X.shape[X.ndim - n_trailing:])


def map_chunks(fn, arrays, n, nbytes=2**22):
    """Run a batch-last core over chunks of a batch-first batch, on a thread pool.

    ``arrays`` are (B, ...) arrays; each chunk is transposed to (..., c) (in cache), passed to
    ``fn``, and each array that ``fn`` returns, (..., c), is transposed back into a (B, ...)
    result. Every system is computed independently, so results do not depend on the chunking.
    """
    B = arrays[0].shape[0]
    c = chunk_size(n, nbytes)
    starts = list(range(0, B, c)) or [0]
    outs = []

    def one(s):
        # B = 0: one dummy system gives the output shapes and dtypes
        blocks = [a[s:s + c] if B else np.ones((1,) + a.shape[1:], a.dtype) for a in arrays]
        chunk = [np.ascontiguousarray(np.moveaxis(blk, 0, -1)) for blk in blocks]
        res = fn(*chunk)
        if not outs:
            outs.extend(np.empty((B,) + r.shape[:-1], dtype=r.dtype) for r in res)
        for o, r in zip(outs, res, strict=True):
            o[s:s + c] = np.moveaxis(r, -1, 0)

    one(starts[0])                                      # allocates the outputs
    rest = starts[1:]
    workers = min(_MAX_WORKERS, len(rest))
    if workers > 1:
        with ThreadPoolExecutor(workers) as ex:
            list(ex.map(one, rest))
    else:
        for s in rest:
            one(s)
    return tuple(outs)


def require_numpy(A, fname):
    """The GPU launchers are not wired into this function: refuse cupy input clearly."""
    if not isinstance(A, np.ndarray):
        raise TypeError(f"{fname}: pass a numpy array (the GPU path of this function is not available)")


def real_number(value, name):
    """``float(value)`` for an option, with a ``TypeError`` naming it where ``value`` is not a real number."""
    if isinstance(value, (str, bytes)) or np.ndim(value) != 0:
        raise TypeError(f"{name} must be a real number; got {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number; got {value!r}") from None


def default_rtol(n, dtype):
    """Residual threshold of the robust strategy: 8 * n * eps of the dtype."""
    return 8.0 * n * float(np.finfo(dtype).eps)


@lru_cache(maxsize=None)
def division_tree(n):
    """The divide and conquer of the tridiagonal eigensolver (Abbas-Turki-Graillat, Fig. 13): leaves (start, size
    in {1, 2}) and merges grouped by level (deepest first); shared by the numpy path and the CUDA launcher."""
    leaves, merges = [], []

    def split(start, size, depth):
        if size <= 2:
            leaves.append((start, size))
            return
        m = size // 2
        split(start, m, depth + 1)
        split(start + m, size - m, depth + 1)
        merges.append((depth, start, m, size - m))

    split(0, n, 0)
    groups = defaultdict(list)
    for depth, start, n1, n2 in merges:
        groups[(depth, n1, n2)].append(start)
    levels = sorted(groups.items(), key=lambda kv: -kv[0][0])
    return tuple(leaves), tuple((n1, n2, tuple(starts)) for (_, n1, n2), starts in levels)
