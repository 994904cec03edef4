"""Blocked Jacobi on the GPU: one-sided SVD and two-sided symmetric eigen (KLT), in CuPy.

The columns (and, two-sided, the rows) are cut into blocks of ``BLOCK`` = 32; a step of the
chess-tournament ordering over the blocks (``orderings.round_robin``) pairs them disjointly, and
for all pairs of the step at once (papers 003 section 2.3 and 000, the block-oriented variant):

- one-sided SVD: the 2w x 2w Gram matrices G = [A_i A_j]^T [A_i A_j] by one batched matrix
  product, their eigenvectors W (G = W diag W^T), then [A_i A_j] <- [A_i A_j] W and
  [V_i V_j] <- [V_i V_j] W by batched products (tensor cores for float64 on an H100);
- two-sided eigen: the 2w x 2w diagonal blocks [[A_ii A_ij] [A_ji A_jj]], their eigenvectors W,
  then the row update A[P, :] <- W^T A[P, :] and the column update A[:, P] <- A[:, P] W of all
  pairs (paper 004's row-then-column order, by blocks), and V[:, P] <- V[:, P] W.

The inner 64 x 64 eigenproblems are solved by ``linalg_gpu.eigh_small``'s CUDA kernels
(Householder + divide and conquer) instead of an inner Jacobi: they are this library's batched
small-matrix eigensolver, and one call per step serves all pairs. The price is accuracy: the
eigenvectors of a Gram matrix orthogonalize its columns only to about eps * cond^2, so the
singular values are accurate normwise (like LAPACK's), not to high relative accuracy as the
numpy path's pointwise one-sided Jacobi, and U is orthogonal to about eps * cond(A)^2 (measured
on the CPU twin of this code: 4e-12 for a random 130 x 130 matrix). An inner one-sided Jacobi on
the Cholesky factor of each Gram block (paper 003's full-block variant) would remove that limit.
Sizes that are not a multiple of 2w are padded with a block diag(c I), c above the spectrum,
whose entries never mix with the matrix beyond rounding and are dropped at the end.
Sweeps stop when the largest relative off-diagonal |g_ij| / sqrt(g_ii g_jj) of the full Gram
matrix (one-sided) or |a_ij| / sqrt(|a_ii a_jj|) (two-sided) is at most ``tol``, or when it has
reached the rounding level (below sqrt(eps)) and a sweep no longer halves it: rotations from the
eigenvectors of a Gram matrix orthogonalize only to about eps * cond, and the relative test
cannot be met where a diagonal entry is zero to rounding (rank deficiency); Jacobi's quadratic
convergence makes the stagnation point the rounding floor.
"""

from __future__ import annotations

import numpy as np

from ..small import eigh_small
from .orderings import round_robin

BLOCK = 32


def _pad(n, block=BLOCK):
    p = 2 * block
    return -(-n // p) * p - n


def _step_columns(cp, steps, block=BLOCK):
    """Per step: (k, 2w) column indices of its k block pairs."""
    out = []
    for s in steps:
        blocks = np.concatenate([s[:, :1], s[:, 1:]], axis=1)                       # (k, 2)
        cols = (blocks[:, :, None] * block + np.arange(block)).reshape(len(s), 2 * block)
        out.append(cp.asarray(cols))
    return out


def _relative_offdiag(cp, G, floor):
    """max |g_ij| / sqrt(|g_ii g_jj|) over i != j, ignoring entries |g_ij| <= floor (zero to rounding:
    the columns of a rank-deficient matrix that are rounding noise are never relatively orthogonal)."""
    d = cp.sqrt(cp.abs(cp.diagonal(G)))
    scale = d[:, None] * d[None, :]
    absG = cp.abs(G)
    off = cp.where(absG > floor, absG / cp.where(scale > 0, scale, 1), 0)
    cp.fill_diagonal(off, 0)
    return float(off.max()) if off.size else 0.0


def _stopped(off, last, tol, eps):
    """Converged: at most ``tol``, or at the rounding floor and no longer halving (module docstring)."""
    return off <= tol or (off < np.sqrt(eps) and off > 0.5 * last)


def _one_sided(cp, W, tol, max_sweeps, block, want_v):
    """Blocked one-sided Jacobi on the columns of W (rows x n): (columns, V, sweeps, converged, off)."""
    dt = W.dtype
    eps = float(np.finfo(dt).eps)
    rows, n = W.shape
    npad = _pad(n, block)
    c = 2.0 * float(cp.linalg.norm(W)) + 1.0
    work = cp.zeros((rows + npad, n + npad), dtype=dt)
    work[:rows, :n] = W
    work[rows:, n:] = cp.eye(npad, dtype=dt) * c
    N = n + npad
    V = cp.eye(N, dtype=dt) if want_v else None
    steps = _step_columns(cp, round_robin(N // block), block)
    sweeps, converged, off, last = 0, False, np.inf, np.inf
    while sweeps <= max_sweeps:
        G = work.T @ work
        off, last = _relative_offdiag(cp, G, eps * float(cp.abs(cp.diagonal(G)).max())), off
        if _stopped(off, last, tol, eps):
            converged = True
            break
        if sweeps == max_sweeps:
            break
        sweeps += 1
        for cols in steps:
            Ap = work[:, cols].transpose(1, 0, 2)                                   # (k, rows, 2w)
            G = Ap.transpose(0, 2, 1) @ Ap                                          # (k, 2w, 2w)
            _, Wv = eigh_small(G, assume_symmetric=True)
            Wv = Wv[:, :, ::-1]                                                     # larger norms first
            work[:, cols] = (Ap @ Wv).transpose(1, 0, 2)
            if V is not None:
                V[:, cols] = (V[:, cols].transpose(1, 0, 2) @ Wv).transpose(1, 0, 2)
    norms = cp.linalg.norm(work, axis=0)                                            # (N,) eq. 12
    real = cp.argsort(norms)[:n] if npad else cp.arange(N)                          # the pad has norm c
    real = real[cp.argsort(-norms[real])]
    cols = work[:rows][:, real]
    return cols, norms[real], (V[:n][:, real] if V is not None else None), sweeps, converged, off


def jacobi_svd(A, full_matrices=False, compute_uv=True, *, tol=None, max_sweeps=60, precondition=True,
               return_info=False, block=BLOCK):
    """The GPU twin of :func:`linalg_gpu.jacobi.svd.jacobi_svd` (blocked; see the module docstring).

    With ``precondition`` the Jacobi iteration runs on R^T of A = QR (cuSOLVER's Householder QR,
    no column pivoting): R^T's columns are closer to orthogonal, which took the sweeps of random
    float64 matrices from 10-16 to fewer (Drmac & Veselic's preconditioner; the numpy twin also
    pivots). Then A = Q R = (Q V_w) S U_w^T for R^T = U_w S V_w^T.
    """
    import cupy as cp

    A = cp.asarray(A)
    dt = A.dtype
    m, n = A.shape
    if m < n:
        res = jacobi_svd(A.T, full_matrices, compute_uv, tol=tol, max_sweeps=max_sweeps, precondition=precondition,
                         return_info=return_info, block=block)
        if not compute_uv:
            return res
        U, s, Vh = res[:3]
        out = (Vh.T, s, U.T)
        return out + res[3:] if return_info else out
    eps = float(np.finfo(dt).eps)
    tol = float(np.sqrt(m) * eps) if tol is None else float(tol)
    if precondition:
        Q, R = cp.linalg.qr(A)                                                      # A = Q R, R (n x n)
        W = cp.ascontiguousarray(R.T)
    else:
        Q, W = None, A
    cols, s, Vw, sweeps, converged, off = _one_sided(cp, W, tol, max_sweeps, block, compute_uv)
    info = {"sweeps": sweeps, "converged": converged, "off_norm": off, "ordering": "round_robin (blocks)",
            "block": block, "precondition": bool(precondition)}
    if not converged and not return_info:
        raise np.linalg.LinAlgError(f"jacobi_svd did not converge in max_sweeps={max_sweeps} sweeps "
                                    f"(relative off-diagonal {off:.2e} > tol {tol:.2e})")
    if not compute_uv:
        return (s, info) if return_info else s
    rows = W.shape[0]
    nz = s > s[0] * max(m, n) * eps
    Uw = cp.zeros((rows, n), dtype=dt)
    Uw[:, nz] = cols[:, nz] / s[nz]                                                 # eq. 13
    if Q is None:                                                                   # A = Uw S Vw^T
        U = _complete(cp, Uw, nz, full_matrices and m > n, m if full_matrices else n, dt)
        V = Vw
    else:                                                                           # R^T = Uw S Vw^T
        V = _complete(cp, Uw, nz, False, n, dt)
        U = Q @ Vw
        if full_matrices and m > n:
            U = _complete(cp, U, cp.ones(n, dtype=bool), True, m, dt)
    out = (U, s, V.T)
    return out + (info,) if return_info else out


def _complete(cp, U, nz, full, cols, dt):
    """U with its columns outside ``nz`` (and, if ``full``, extra columns up to ``cols``) made an
    orthonormal completion of the columns in ``nz``."""
    m = U.shape[0]
    keep = U[:, nz]
    need = int((~nz).sum()) + (cols - U.shape[1] if full else 0)
    if need == 0:
        return U
    rng = cp.random.default_rng(0)
    X = rng.standard_normal((m, need)).astype(dt)
    for _ in range(2):                                                              # project out twice
        X -= keep @ (keep.T @ X)
    Qx, _ = cp.linalg.qr(X)
    for _ in range(2):
        Qx -= keep @ (keep.T @ Qx)
        Qx, _ = cp.linalg.qr(Qx)
    out = cp.zeros((m, cols if full else U.shape[1]), dtype=dt)
    idx = cp.flatnonzero(nz)
    out[:, idx] = keep
    rest = cp.flatnonzero(~nz)
    out[:, rest] = Qx[:, : rest.size]
    if full and cols > U.shape[1]:
        out[:, U.shape[1]:] = Qx[:, rest.size:]
    return out


def jacobi_eigh(A, *, tol=None, max_sweeps=60, check_symmetric=True, return_info=False, block=BLOCK):
    """The GPU twin of :func:`linalg_gpu.jacobi.klt.jacobi_eigh` (blocked; see the module docstring)."""
    import cupy as cp

    A = cp.asarray(A)
    dt = A.dtype
    n = A.shape[0]
    eps = float(np.finfo(dt).eps)
    tol = float(n * eps) if tol is None else float(tol)
    npad = _pad(n, block)
    c = 2.0 * float(cp.linalg.norm(A)) + 1.0
    N = n + npad
    work = cp.zeros((N, N), dtype=dt)
    work[:n, :n] = A
    work[n:, n:] = cp.eye(npad, dtype=dt) * c
    V = cp.eye(N, dtype=dt)
    steps = _step_columns(cp, round_robin(N // block), block)
    sweeps, converged, off, last = 0, False, np.inf, np.inf
    while sweeps <= max_sweeps:
        off, last = _relative_offdiag(cp, work, eps * float(cp.linalg.norm(work))), off
        if _stopped(off, last, tol, eps):
            converged = True
            break
        if sweeps == max_sweeps:
            break
        sweeps += 1
        for cols in steps:
            k = cols.shape[0]
            D = work[cols[:, :, None], cols[:, None, :]]                             # (k, 2w, 2w) diagonal blocks
            _, Wv = eigh_small(0.5 * (D + D.transpose(0, 2, 1)), assume_symmetric=True)
            flat = cols.reshape(-1)
            w2 = 2 * block
            R = work[flat].reshape(k, w2, N)                                         # the rows of the pairs
            work[flat] = (Wv.transpose(0, 2, 1) @ R).reshape(k * w2, N)              # row update
            C = work[:, flat].reshape(N, k, w2).transpose(1, 0, 2)                   # (k, N, 2w)
            work[:, flat] = (C @ Wv).transpose(1, 0, 2).reshape(N, k * w2)          # column update
            Vc = V[:, flat].reshape(N, k, w2).transpose(1, 0, 2)
            V[:, flat] = (Vc @ Wv).transpose(1, 0, 2).reshape(N, k * w2)
    from .klt import JacobiInfo

    info = JacobiInfo(sweeps=sweeps, converged=converged, rotations=sweeps * sum(len(c) for c in steps),
                      off_norm=off, tol=tol)
    if not converged and not return_info:
        raise np.linalg.LinAlgError(f"jacobi_eigh did not converge in max_sweeps={max_sweeps} sweeps "
                                    f"(relative off-diagonal {off:.2e} > tol {tol:.2e})")
    w = cp.diagonal(work).copy()
    order = cp.argsort(w)[:n]                                                       # the pad (c) is largest
    out = (w[order], V[:n][:, order])
    return out + (info,) if return_info else out
