"""Matrix builders and reference helpers for the CPU tests of ``linalg_gpu.small``.

Re-exported by ``tests/conftest.py``. Test modules import them from here
(``from small_testlib import ...``) rather than from ``conftest``: ``tests/gpu`` has its own
conftest module, and two top-level modules named ``conftest`` cannot both be imported by name.
"""

from __future__ import annotations

import math

import numpy as np

import linalg_gpu as lg

SIZES = (1, 2, 3, 5, 8, 16, 31, 32, 33, 64)
BATCHES = ((), (7,), (3, 4))
DTYPES = (np.float32, np.float64)


# ---------------------------------------------------------------------------------------------
# small numeric helpers


def eps(dtype) -> float:
    return float(np.finfo(dtype).eps)


def hi(X):
    """X in float64 (complex128 for complex X)."""
    return X.astype(np.result_type(X.dtype, np.float64))


def randn(rng, shape, dtype):
    """Standard normal entries in ``dtype`` (real and imaginary parts for a complex dtype)."""
    X = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        X = X + 1j * rng.standard_normal(shape)
    return X.astype(dtype)


def mT(X):
    """Transpose of the last two axes."""
    return np.swapaxes(X, -1, -2)


def matvec(A, x):
    """A @ x for x of shape (..., n) or (..., n, k) with A (..., n, n)."""
    if x.ndim == A.ndim - 1:
        return np.einsum("...ij,...j->...i", A, x)
    return A @ x


def tridiag_dense(d, e):
    """Dense symmetric tridiagonal matrices (..., n, n) from d (..., n) and e (..., n-1)."""
    d = np.asarray(d)
    e = np.asarray(e)
    n = d.shape[-1]
    T = np.zeros(d.shape + (n,), dtype=np.result_type(d, e))
    i = np.arange(n)
    T[..., i, i] = d
    if n > 1:
        T[..., i[1:], i[:-1]] = e
        T[..., i[:-1], i[1:]] = e
    return T


def random_orthogonal(rng, n, batch=()):
    """Haar-distributed orthogonal matrices (..., n, n) in float64 (QR with sign fix)."""
    X = rng.standard_normal(tuple(batch) + (n, n))
    Q, R = np.linalg.qr(X)
    s = np.sign(np.diagonal(R, axis1=-2, axis2=-1))
    s = np.where(s == 0, 1.0, s)
    return Q * s[..., None, :]


def sym_from_eigs(rng, w):
    """Q diag(w) Q^T in float64 for eigenvalues w (..., n), Q random orthogonal; exactly symmetric."""
    w = np.asarray(w, dtype=np.float64)
    Q = random_orthogonal(rng, w.shape[-1], w.shape[:-1])
    A = (Q * w[..., None, :]) @ mT(Q)
    return (A + mT(A)) / 2


def spd_with_cond(rng, n, cond, batch=(), dtype=np.float64):
    """SPD matrices Q diag(lambda) Q^T with lambda log-spaced in [1/cond, 1] (random order)."""
    batch = tuple(batch)
    if n == 1:
        lam = np.ones(batch + (1,))
    else:
        lam = np.logspace(0.0, -math.log10(cond), n)
        lam = np.broadcast_to(lam, batch + (n,)).copy()
        lam = rng.permuted(lam, axis=-1)
    return sym_from_eigs(rng, lam).astype(dtype)                       # rounding keeps symmetry


def cond2(A):
    """2-norm condition numbers of (..., n, n) in float64."""
    return np.linalg.cond(np.asarray(A, dtype=np.float64))


# ---------------------------------------------------------------------------------------------
# the paper's test matrices


def xi_rho(n, rho):
    """Xi_rho = (1 - rho) I + rho 1 1^T (section 3.3)."""
    return (1.0 - rho) * np.eye(n) + rho * np.ones((n, n))


def householder_q_of(A):
    """The orthogonal Q of the Householder tridiagonalization of A (float64, via lg.tridiagonalize)."""
    _, _, Q = lg.tridiagonalize(np.asarray(A, dtype=np.float64))
    return Q


def random_dominant_tridiag(rng, n, batch=(), dominance=2.0):
    """Random symmetric tridiagonal (d, e): uniform entries, diagonal scaled to dominate."""
    batch = tuple(batch)
    e = rng.uniform(-1.0, 1.0, batch + (max(n - 1, 0),))
    rowsum = np.zeros(batch + (n,))
    if n > 1:
        rowsum[..., :-1] += np.abs(e)
        rowsum[..., 1:] += np.abs(e)
    d = (rowsum + 1.0) * dominance * rng.uniform(1.0, 2.0, batch + (n,))
    return d, e


def randomized_xi_rho(rng, n, batch=(), rho=None, dtype=np.float64):
    """A = Q R Q^T: Q from the Householder tridiagonalization of Xi_rho, R random dominant tridiagonal.

    Returns (A, rho) with A of shape batch + (n, n) in ``dtype`` (exactly symmetric).
    """
    batch = tuple(batch)
    if rho is None:
        rho = float(rng.uniform(0.05, 0.95))
    Q = householder_q_of(xi_rho(n, rho))
    d, e = random_dominant_tridiag(rng, n, batch)
    R = tridiag_dense(d, e)
    A = Q @ R @ Q.T
    return ((A + mT(A)) / 2).astype(dtype), rho


def black_scholes_system(rng, M, batch=(), d=29, sigma=0.1, mu=0.1, t=0.1, S0=1.0):
    """Regression normal equations of Fig. 2, formed in float32.

    psi = (1, S^1..S^d) with S^i = S0 exp((mu - sigma^2/2) t + sigma sqrt(t) Z_i) independent,
    M samples per system; A = (1/M) sum psi psi^T, b = (1/M) sum psi y for random y.
    """
    batch = tuple(batch)
    Z = rng.standard_normal(batch + (M, d))
    S = S0 * np.exp((mu - sigma**2 / 2) * t + sigma * math.sqrt(t) * Z)
    psi = np.concatenate([np.ones(batch + (M, 1)), S], axis=-1).astype(np.float32)
    y = rng.standard_normal(batch + (M,)).astype(np.float32)
    Mf = np.float32(M)
    A = (np.einsum("...mi,...mj->...ij", psi, psi) / Mf).astype(np.float32)
    A = np.tril(A) + mT(np.tril(A, -1))                                 # exactly symmetric
    b = (np.einsum("...mi,...m->...i", psi, y) / Mf).astype(np.float32)
    return A, b


def wilkinson(n):
    """Wilkinson's W_n^+ as (d, e): d_i = |i - (n-1)/2|, e = 1."""
    m = (n - 1) / 2
    return np.abs(np.arange(n) - m), np.ones(max(n - 1, 0))


def glued_wilkinson(blocks, size, glue):
    """``blocks`` copies of W_size^+ glued by off-diagonals ``glue``: tight clusters of eigenvalues."""
    dw, ew = wilkinson(size)
    d = np.tile(dw, blocks)
    e = []
    for k in range(blocks):
        e.extend(ew)
        if k + 1 < blocks:
            e.append(glue)
    return d, np.array(e, dtype=np.float64)


def truncated_solution(A, b, cond_max, keep_count=None):
    """Independent eig_truncate in float64 with numpy.linalg.eigh.

    Keeps eigenvalues |w| > max |w| / cond_max but the negative ones within sqrt(eps) max |w| of A's dtype (or the
    ``keep_count`` largest in magnitude). Returns (x, n_discarded, w, keep_mask) for one system A (n, n), b (n,)
    or (n, k).
    """
    root_eps = np.sqrt(np.finfo(np.asarray(A).dtype).eps)
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    w, N = np.linalg.eigh(A)
    if keep_count is None:
        top = np.abs(w).max()
        keep = (np.abs(w) > top / cond_max) & ~((w < 0) & (np.abs(w) <= root_eps * top))
    else:
        keep = np.zeros(w.shape, dtype=bool)
        if keep_count:
            keep[np.argsort(np.abs(w))[-keep_count:]] = True
    Nk = N[:, keep]
    c = Nk.T @ b
    c = c / (w[keep] if b.ndim == 1 else w[keep][:, None])
    return Nk @ c, int((~keep).sum()), w, keep


def ref_solve(A, b):
    """LAPACK (numpy.linalg.solve, gesv) reference in float64; b (..., n) or (..., n, k)."""
    A = np.asarray(A, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if b.ndim == A.ndim - 1:
        return np.linalg.solve(A, b[..., None])[..., 0]
    return np.linalg.solve(A, b)


def rel_err(x, xref, vec_axis=-1):
    """Per-vector relative 2-norm error ||x - xref|| / ||xref|| along ``vec_axis`` (float64)."""
    x = np.asarray(x, dtype=np.float64)
    xref = np.asarray(xref, dtype=np.float64)
    num = np.linalg.norm(x - xref, axis=vec_axis)
    den = np.linalg.norm(xref, axis=vec_axis)
    return num / np.where(den > 0, den, 1.0)
