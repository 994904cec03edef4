"""Batched LDL^T factorization and solve without pivoting (Abbas-Turki-Graillat, section 3, eq. 5).

For a symmetric positive definite A = L D L^T, with L unit lower triangular and D diagonal:

    D_jj = A_jj - sum_{k<j} L_jk^2 D_kk
    L_ij = (A_ij - sum_{k<j} L_ik L_jk D_kk) / D_jj,   i > j            (eq. 5)

computed column after column (left-looking, as in Algorithm 1), all systems of the batch at
once. Only the lower triangle of A is used. A pivot that is not finite or not larger than
n * eps * max_i |A_ii| is a *breakdown*: the system is flagged, its pivot is replaced by
max_i |A_ii| so that the rest of the batch is not disturbed, and its solution must not be used.
"""

from __future__ import annotations

import numpy as np

from .._backend import boolean_flags
from . import _common as C

__all__ = ["ldlt_factor"]


def _ldlt_factor_bl(A):
    """Core of eq. (5) on a batch-last block. A: (n, n, c) -> L (n, n, c), D (n, c), ok (c,)."""
    n, _, c = A.shape
    eps = np.finfo(A.dtype).eps
    scale = np.abs(np.einsum("iic->ic", A)).max(axis=0)              # (c,)
    safe = np.where(scale > 0, scale, 1).astype(A.dtype)               # (c,)
    tol = n * eps * scale                                               # (c,)
    L = np.zeros_like(A)                                                # (n, n, c)
    D = np.empty((n, c), dtype=A.dtype)                                 # (n, c)
    ok = np.ones(c, dtype=bool)                                         # (c,)
    idx = np.arange(n)
    L[idx, idx] = 1
    for j in range(n):
        if j:                                                           # (no product over an empty k)
            w = L[j, :j] * D[:j]                                        # (j, c): L_jk D_kk
            v = A[j:, j] - np.einsum("mkc,kc->mc", L[j:, :j], w)        # (n-j, c); v[0] = D_jj
        else:
            v = A[:, 0].copy()
        dj = v[0]
        bad = ~(dj > tol)                                               # also catches NaN
        if bad.any():
            ok &= ~bad
            dj = np.where(bad, safe, dj)
        D[j] = dj
        L[j + 1:, j] = v[1:] * (1 / dj)
    return L, D, ok


def _ldlt_substitute_bl(L, D, b):
    """Solve L D L^T x = b for a batch-last block. L (n, n, c), D (n, c), b (n, r, c) -> x (n, r, c)."""
    n = L.shape[0]
    z = np.empty_like(b)
    z[0] = b[0]
    for j in range(1, n):                                               # L z = b
        z[j] = b[j] - np.einsum("kc,krc->rc", L[j, :j], z[:j])
    z /= D[:, None, :]                                                  # D y = z
    x = z
    for j in range(n - 2, -1, -1):                                      # L^T x = y
        x[j] -= np.einsum("kc,krc->rc", L[j + 1:, j], x[j + 1:])
    return x


def _ldlt_solve_bl(A, b):
    """Factor and solve one batch-last block: A (n, n, c), b (n, r, c) -> x, D, ok."""
    L, D, ok = _ldlt_factor_bl(A)
    return _ldlt_substitute_bl(L, D, b), D, ok


@boolean_flags("check_finite", "assume_symmetric")
def ldlt_factor(A, *, check_finite=True, assume_symmetric=False):
    """LDL^T factorization of a batch of symmetric matrices, without pivoting (eq. 5).

    Parameters
    ----------
    A : (..., n, n) array_like, float32 or float64
        Symmetric matrices; only the lower triangle is used (NaN or Inf anywhere in A counts).
    check_finite : bool, default True
        Raise ``ValueError`` naming the first system that holds a NaN or an Inf; with False such
        systems get NaN factors and ``ok`` False.
    assume_symmetric : bool, default False
        Skip the symmetry check (``|A - A^T| <= 100 eps max|A|``).

    Returns
    -------
    L : (..., n, n) unit lower triangular factors.
    D : (..., n) pivots.
    ok : (...) bool; False where the factorization broke down (see the module docstring).

    Examples
    --------
    >>> import numpy as np, linalg_gpu as lg
    >>> X = np.random.default_rng(0).standard_normal((4, 6, 6)); A = X @ X.transpose(0, 2, 1) + np.eye(6)
    >>> L, D, ok = lg.ldlt_factor(A)
    >>> bool(ok.all()) and np.allclose(L * D[..., None, :] @ L.transpose(0, 2, 1), A)
    True
    """
    A, batch, n = C.check_symmetric_input(A, "ldlt_factor", check_finite, assume_symmetric)
    L, D, ok = C.map_chunks(_ldlt_factor_bl, (C.flatten_batch(A, 2),), n, nbytes=2**23)
    return L.reshape(A.shape), D.reshape(batch + (n,)), ok.reshape(batch)
