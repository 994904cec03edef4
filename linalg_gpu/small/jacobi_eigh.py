"""Batched two-sided Jacobi for tiny symmetric matrices: the numpy twin of ``cuda/eigh_jacobi.cu``.

``eigh_small`` runs this method on the GPU for n <= ``_gpu.EIGH_JACOBI_MAX_N`` (12 in float32, 10 in
float64), one thread per system with the matrix and the eigenvectors in registers (measured on the
H100 against the Householder + divide-and-conquer kernel: see the README and
``benchmarks/NOTES_small_gpu.md``).
The method is that of :func:`linalg_gpu.jacobi.klt.jacobi_eigh` (Torun et al.: eqs. 3-5, the
chess-tournament ordering of eq. 7, the parallel row / column updates of eqs. 8-10, the relative
rotation threshold of Demmel & Veselic with tol = eps), for a batch, with the kernel's details:

- the symmetric matrix of the lower triangle, scaled by the power of 2 of ``cuda/householder.cuh``'s
  scale_exponent (max |A_ij| to [1/2, 1); exact), the eigenvalues scaled back;
- the pairs of a step in seat order (seat k plays seat K - 1 - k); an entry between two pairs is
  computed with the rows of the earlier pair first (eq. 8), then the columns of the later (eq. 9),
  and stored on both sides;
- c, s, t of eq. 5 from d = a_jj - a_ii and u = 2 a_ij with two reciprocal square roots
  (``_rotations``; the kernel's jacobi_rotation);
- a system stops after a sweep that rotates nothing (at most ``MAX_SWEEPS``), the others go on.
"""

from __future__ import annotations

import numpy as np

MAX_SWEEPS = 30          # JACOBI_MAX_SWEEPS in cuda/eigh_jacobi.cu


def tournament_steps(n):
    """The steps of one sweep as lists of pairs (i, j), i < j, in seat order (the kernel's
    ``tournament_player``); a pair with the dummy player n of odd n is kept as (i, n)."""
    K = n + n % 2

    def player(s, k):
        return 0 if k == 0 else 1 + (k - 1 + K - 1 - s) % (K - 1)

    return [[tuple(sorted((player(s, k), player(s, K - 1 - k)))) for k in range(K // 2)] for s in range(K - 1)]


def _scale_exponent(amax, dtype):
    """scale_exponent of cuda/householder.cuh: frexp's exponent of max|A| (1 where 0 or not finite),
    clamped as there (2^-ex and 2^ex normal)."""
    m = np.where((amax > 0) & np.isfinite(amax), amax, 1)
    return np.clip(np.frexp(m)[1], -125 if dtype == np.float32 else -1021, np.finfo(dtype).maxexp - 2)


def _rotations(aii, ajj, aij, tol, abs_thr, active):
    """c, s, t, rot of eq. 5 for arrays of pivots (the identity below the threshold and where the
    system is no longer ``active``), in the kernel's form: d = a_jj - a_ii, u = 2 a_ij,
    r = sqrt(d^2 + u^2), w = |d| + r, c = w / sqrt(2 r w), s = sgn(d) u / sqrt(2 r w),
    t = s / c = sgn(d) u 2 r / (2 r w); d and u scaled by a power of 2 where d^2 + u^2 would not be
    a normal number."""
    dt = aii.dtype
    scale = np.sqrt(np.abs(aii)) * np.sqrt(np.abs(ajj))
    rot = (np.abs(aij) > np.where(scale > 0, tol * scale, abs_thr)) & active
    d, u = ajj - aii, 2 * aij
    m = np.maximum(np.abs(d), np.abs(u))
    small = (m < 2.0 ** (-60 if dt == np.float32 else -500)) & (m > 0)
    e = np.where(small, np.frexp(np.where(small, m, 1))[1], 0)
    d, u = np.ldexp(d, -e).astype(dt), np.ldexp(u, -e).astype(dt)
    q = np.where(rot, d * d + u * u, 1)
    r = np.sqrt(q)
    w = np.abs(d) + r
    rs = 1 / np.sqrt(np.where(rot, 2 * r * w, 1))
    su = np.where(d >= 0, u, -u)
    one, zero = dt.type(1), dt.type(0)
    return (np.where(rot, w * rs, one), np.where(rot, su * rs, zero), np.where(rot, su * (2 * r) * (rs * rs), zero),
            rot)


def eigh_jacobi(A):
    """w (B, n) ascending, V (B, n, n) eigenvectors in columns, of the symmetric matrices of the lower
    triangles of A (B, n, n), float32 or float64, finite. No argument checks: the caller screens."""
    A = np.asarray(A)
    dt = A.dtype
    B, n, _ = A.shape
    ex = _scale_exponent(np.abs(A).max(axis=(1, 2)) if A.size else np.zeros(B, dt), dt)      # (B,)
    S = np.tril(A) + np.tril(A, -1).transpose(0, 2, 1)
    S = np.ldexp(S, -ex[:, None, None]).astype(dt)
    V = np.broadcast_to(np.eye(n, dtype=dt), (B, n, n)).copy()
    tol = dt.type(np.finfo(dt).eps)
    abs_thr = (tol * np.sqrt((S * S).sum(axis=(1, 2)))).astype(dt)                        # (B,)
    active = np.ones(B, dtype=bool)
    steps = []                                                     # per step: P, Q of its pairs, each index's pair
    for pairs in tournament_steps(n):
        real = [(p, q) for p, q in pairs if q < n]
        if real:
            seat = np.array([next(k for k, pq in enumerate(pairs) if i in pq) for i in range(n)])
            steps.append((np.array([p for p, _ in real]), np.array([q for _, q in real]), seat))
    for _ in range(MAX_SWEEPS):
        if not active.any():
            break
        rotated = np.zeros(B, dtype=bool)
        for P, Q, seat in steps:
            aii, ajj, aij = S[:, P, P], S[:, Q, Q], S[:, P, Q]                                  # (B, H)
            c, s, t, rot = _rotations(aii, ajj, aij, tol, abs_thr[:, None], active[:, None])
            rotated |= rot.any(axis=1)
            cr, sr = c[:, :, None], s[:, :, None]
            X = S.copy()                                                                       # eq. 8: rows
            X[:, P], X[:, Q] = cr * S[:, P] - sr * S[:, Q], sr * S[:, P] + cr * S[:, Q]
            Y = X.copy()                                                                       # eq. 9: columns
            Y[:, :, P] = X[:, :, P] * c[:, None, :] - X[:, :, Q] * s[:, None, :]
            Y[:, :, Q] = X[:, :, P] * s[:, None, :] + X[:, :, Q] * c[:, None, :]
            S = np.where(seat[:, None] < seat[None, :], Y, Y.transpose(0, 2, 1))    # the earlier pair: rows first
            S[:, P, P] = aii - t * aij
            S[:, Q, Q] = ajj + t * aij
            S[:, P, Q] = S[:, Q, P] = np.where(rot, 0, aij)
            VP, VQ = V[:, :, P], V[:, :, Q]                                                    # eq. 10
            V[:, :, P], V[:, :, Q] = VP * c[:, None, :] - VQ * s[:, None, :], VP * s[:, None, :] + VQ * c[:, None, :]
        active &= rotated
    diag = np.diagonal(S, axis1=1, axis2=2)                                                    # (B, n)
    order = np.argsort(diag, axis=1, kind="stable")
    w = np.ldexp(np.take_along_axis(diag, order, axis=1), ex[:, None]).astype(dt)
    return w, np.take_along_axis(V, order[:, None, :], axis=2)
