"""The inner Jacobi of the blocked hyperbolic SVD and GSVD: congruences of small Gram matrices.

For the blocked one-sided algorithms (Novakovic-Singer GSVD section 2.3; Novakovic-Singer HSVD's block-oriented
variant) a step forms, for each pair of block columns, the 2w x 2w Gram matrix A = [G_i G_j]^T [G_i G_j] (and for
the GSVD also B from the second matrix), and needs a transformation V that makes V^T A V (and V^T B V) diagonal.
The one-sided formulas of a pivot pair use only the Gram entries a_pp, a_qq, a_pq (b_..), so they are
applied here two-sidedly to the Gram matrices, A <- M^T A M, B <- M^T B M, V <- V M, with the 2 x 2 M of
each pair of a chess-tournament step (Novakovic-Singer GSVD section 2.3: "a two-sided method can be applied
straightforwardly"; this replaces the Cholesky factor and its one-sided sweep, one factorization and
K - 1 barriers fewer per block):

- ``block_hyperbolic(A, sign, tol, sweeps)``: M trigonometric for pairs of equal sign, hyperbolic otherwise
  (``hsvd._hyperbolic_pair``, Novakovic-Singer HSVD eqs. 2.2-2.5), pivot blocks in their accurate form
  a_pp + hyp t a_pq, a_qq + t a_pq (eq. 2.6); then one Newton-Schulz step V <- V (3 I - J V^T J V) / 2 towards
  J-orthogonality, and the columns sorted within each sign (+ by the final diagonal descending, - ascending), so that
  the signature of the block's rows never changes. Returns (V, bad): bad counts the hyperbolic pairs whose
  columns were numerically dependent (|zeta| <= 1), which the caller reports.
- ``block_hz(A, B, tol, sweeps)``: M from the Hari-Zimmermann formulas (``gsvd.hz_transform``, Novakovic-Singer GSVD
  section 2.1.2, or 2.1.1 for Hermitian A, B: rescaling, exception, sorting swap; A <- M^H A M), the pivot
  blocks' off-diagonals set to zero; then the
  columns scaled by Theta = (a_jj + b_jj)^(-1/2) (section 2.4) and sorted by a_jj / b_jj descending.
  Returns (V, big): the big transformations (criterion C1) per matrix.

A pair is transformed only if it is not relatively orthogonal; the sweeps (at most ``sweeps``) stop when
nothing was transformed. numpy arrays run here (vectorized over the batch and the pairs of a step), CuPy
arrays in ``cuda/jacobi_congruence.cu`` (one thread block per matrix, the matrices in shared memory).
"""

from __future__ import annotations

import numpy as np

from .._backend import get_array_module
from ._shared import _hyperbolic_pair, hz_transform
from .block import SIZES, THREADS
from .orderings import round_robin

_CONFIGURED = set()


def block_hyperbolic(A, sign, tol, max_sweeps=30):
    """(V, bad) for the batch A (b, K, K) with the signs ``sign`` (b, K) of +-1 (module docstring)."""
    xp = get_array_module(A)
    _check(A)
    if xp is not np:
        return _gpu(A, None, sign, tol, max_sweeps)
    return _twin(A, None, np.asarray(sign), tol, max_sweeps)


def block_hz(A, B, tol, max_sweeps=30):
    """(V, big) for the batches A, B (b, K, K), B positive definite (module docstring)."""
    xp = get_array_module(A, B)
    _check(A)
    _check(B)
    if xp is not np:
        return _gpu(A, B, None, tol, max_sweeps)
    return _twin(A, B, None, tol, max_sweeps)


def _check(A):
    if A.ndim != 3 or A.shape[1] != A.shape[2]:
        raise ValueError(f"the Gram matrices must have shape (batch, K, K), got {A.shape}")


def _twin(A, B, sign, tol, max_sweeps):

    b, K, _ = A.shape
    dt = A.dtype.type
    a = (A + A.transpose(0, 2, 1).conj()) / 2
    bm = (B + B.transpose(0, 2, 1).conj()) / 2 if B is not None else None
    v = np.broadcast_to(np.eye(K, dtype=A.dtype), (b, K, K)).copy()
    rows = np.arange(b)[:, None]
    stats = np.zeros(b, dtype=np.int64)
    any_moved = np.zeros(b, dtype=bool)
    tol = np.finfo(A.dtype).dtype.type(tol)
    for _ in range(max_sweeps):
        moved = np.zeros(b, dtype=bool)
        for step in round_robin(K):
            p, q = step[:, 0], step[:, 1]
            app, aqq, apq = a[:, p, p], a[:, q, q], a[:, p, q]                     # (b, H)
            if bm is None:
                rot = np.abs(apq) > tol * np.sqrt(np.abs(app)) * np.sqrt(np.abs(aqq))
                hyp = sign[:, p] != sign[:, q]
                with np.errstate(divide="ignore", invalid="ignore"):
                    m11, m12, m21, m22, t, ok = _hyperbolic_pair(app, aqq, np.where(rot, apq, 1), hyp)
                stats += (rot & ~ok).sum(axis=1)
                rot &= ok
                act = rot
            else:
                bpp, bqq, bpq = bm[:, p, p], bm[:, q, q], bm[:, p, q]
                m11, m12, m21, m22, rot, big = hz_transform(app.real, aqq.real, apq, bpp.real, bqq.real, bpq, tol)
                stats += big.sum(axis=1)
                act = rot | (m11 == 0)                                             # a swap moves too
            one, zero = dt(1), dt(0)
            m11, m12 = np.where(act, m11, one), np.where(act, m12, zero)              # M (complex: M^H X M)
            m21, m22 = np.where(act, m21, zero), np.where(act, m22, one)
            moved |= act.any(axis=1)
            for X in (a, bm) if bm is not None else (a,):
                x, y = X[:, p, :], X[:, q, :]                                      # rows: M^H X
                r11, r12, r21, r22 = (z.conj()[..., None] for z in (m11, m12, m21, m22))
                X[:, p, :], X[:, q, :] = r11 * x + r21 * y, r12 * x + r22 * y
                x, y = X[:, :, p], X[:, :, q]                                      # columns: (M^T X) M
                X[:, :, p], X[:, :, q] = x * m11[:, None] + y * m21[:, None], x * m12[:, None] + y * m22[:, None]
                X[rows, p, q] = np.where(rot, 0, X[rows, p, q])
                X[rows, q, p] = np.where(rot, 0, X[rows, q, p])
            if bm is None:                                                         # eq. 2.6, accurate pivots
                tg = np.where(rot, t * apq, 0)
                a[rows, p, p] = np.where(rot, app + np.where(hyp, tg, -tg), a[rows, p, p])
                a[rows, q, q] = np.where(rot, aqq + tg, a[rows, q, q])
            x, y = v[:, :, p], v[:, :, q]                                          # V M
            v[:, :, p], v[:, :, q] = x * m11[:, None] + y * m21[:, None], x * m12[:, None] + y * m22[:, None]
        any_moved |= moved
        if not moved.any():
            break
    diag = np.diagonal(a, axis1=1, axis2=2).real
    if bm is None:
        s = sign.astype(A.dtype)
        P = v.transpose(0, 2, 1) @ (s[:, :, None] * v)                             # V^T J V
        v = v @ (1.5 * np.eye(K, dtype=A.dtype) - 0.5 * s[:, :, None] * P)          # Newton-Schulz
        slots = np.empty((b, K), dtype=np.int64)                                   # column c -> its slot
        for i in range(b):
            for sg, key in ((1, -diag[i]), (-1, diag[i])):
                idx = np.flatnonzero(sign[i] == sg)
                slots[i, idx[np.argsort(key[idx], kind="stable")]] = idx
    else:
                                                                                   # Theta, section 2.4
        bdiag = np.diagonal(bm, axis1=1, axis2=2).real
        v = v / np.sqrt(diag + bdiag)[:, None, :]
        order = np.argsort(-(diag / bdiag), axis=1, kind="stable")
        slots = np.empty((b, K), dtype=np.int64)
        np.put_along_axis(slots, order, np.broadcast_to(np.arange(K), (b, K)), axis=1)
    out = np.empty_like(v)
    np.put_along_axis(out, np.broadcast_to(slots[:, None, :], (b, K, K)), v, axis=2)
    out[~any_moved] = np.eye(K, dtype=A.dtype)
    return out, stats


def _gpu(A, B, sign, tol, max_sweeps):
    import cupy as cp

    from .._kernels import get_function

    b, K, _ = A.shape
    if K not in SIZES:
        raise ValueError(f"the congruence kernel takes K in {SIZES}, got K = {K}")
    A = cp.ascontiguousarray(A)
    B = cp.ascontiguousarray(B) if B is not None else None
    rdt = np.finfo(A.dtype).dtype
    V = cp.empty((b, K, K), dtype=A.dtype)
    stats = cp.zeros(b, dtype=cp.int32)
    if b == 0:
        return V, stats
    mode = 1 if B is None else 2
    nt = THREADS[K]
    fn = get_function("jacobi_congruence.cu", "block_congruence", A.dtype, K, nt, mode)
    shared = ((3 if mode == 2 else 2) * K * (K + 1) + 6 * (K // 2)) * A.itemsize
    if fn not in _CONFIGURED:
        fn.max_dynamic_shared_size_bytes = shared
        _CONFIGURED.add(fn)
    sgn = cp.ascontiguousarray(sign, dtype=cp.int8) if sign is not None else cp.zeros(1, dtype=cp.int8)
    fn((b,), (nt,), (A, B if B is not None else A, sgn, V, stats, rdt.type(tol), np.int32(max_sweeps)),
       shared_mem=shared)
    return V, stats
