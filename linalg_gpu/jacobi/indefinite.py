"""Symmetric indefinite factorization M = G diag(J) G^T, G of full column rank (the input of the hyperbolic SVD).

A real symmetric, possibly indefinite and possibly singular M (n x n) of numerical rank r is
factored as M = G diag(J) G^T with G (n, r) of full column rank and J (r,) holding +1 / -1: the
"Hermitian indefinite factorization with post-processing", which always gives G of full column
rank (Novakovic-Singer HSVD, Novakovic & Singer, "A GPU-based hyperbolic SVD algorithm", section 1; the
post-processing is Slapnicar's, Novakovic-Singer HSVD's reference [22]). The hyperbolic SVD of G then gives
the eigen-decomposition of M.

The factorization is Bunch-Parlett with complete pivoting: P^T M P = L D L^T, L unit lower
triangular, D block diagonal with 1x1 and 2x2 blocks. On the current Schur complement S, with
alpha = (1 + sqrt(17)) / 8,

    mu0 = max |s_ij|,  mu1 = max |s_ii|
    mu1 >= alpha mu0:  1x1 pivot at the largest diagonal entry
    otherwise:         2x2 pivot at (p, q), |s_pq| = mu0 (then a c - b^2 < 0 for the block)

brought to the front by symmetric row / column swaps, followed by the rank-1 or rank-2 update of
the trailing submatrix (one vectorized numpy operation per pivot step). The elimination stops
when mu0 <= tol * max|M| * growth (growth: the largest Schur complement entry so far over max|M|,
which the elimination's rounding noise scales with) and mu0 <= sqrt(tol) * max|M_ij| over the
remaining rows and columns i, j; the order left over is the null part. Post-processing: a 1x1 pivot d
gives the column L_k sqrt|d| and the sign sgn(d); a 2x2 block D_k = Q_k diag(l1, l2) Q_k^T,
diagonalized by one Jacobi rotation, gives L_k Q_k diag(sqrt|l1|, sqrt|l2|) and sgn(l1), sgn(l2).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import as_array, check_dtype, get_array_module, is_cupy_array

__all__ = ["gjgt"]

ALPHA = (1 + math.sqrt(17)) / 8     # Bunch-Parlett: equalizes the growth bounds of a 1x1 and a 2x2 step
SYMMETRY_RTOL = 100                 # |M - M^T| <= SYMMETRY_RTOL * n * eps * max|M| counts as symmetric


# ---------------------------------------------------------------------------------------------
# argument checks (public boundary only)


def _check_tol(tol):
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, numbers.Real)
                            or not math.isfinite(tol) or not 0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1) (or None for n * eps), got {tol!r}")


def _check_matrix(M):
    """M as a square 2-D float32/float64 numpy array, finite and symmetric."""
    M = as_array(M, "M")
    if M.dtype.kind == "c":
        raise TypeError(f"M has complex dtype {M.dtype}: complex input is not supported yet")
    check_dtype(M, "M")
    if M.ndim != 2 or M.shape[0] != M.shape[1]:
        raise ValueError(f"M must be a square 2-D matrix (n, n), got shape {M.shape}")
    if not np.isfinite(M).all():
        bad = tuple(int(b) for b in np.argwhere(~np.isfinite(M))[0])
        raise ValueError(f"M must be finite; found {M[bad].item()!r} at index {bad}")
    n = M.shape[0]
    if n:
        D = np.abs(M - M.T)                                              # (n, n)
        i, j = divmod(int(np.argmax(D)), n)
        worst, scale = float(D[i, j]), float(np.abs(M).max())
        rtol = SYMMETRY_RTOL * n * float(np.finfo(M.dtype).eps)
        if worst > rtol * scale:
            raise ValueError(f"M is not symmetric: M[{i}, {j}] = {float(M[i, j])!r} against M[{j}, {i}] = "
                             f"{float(M[j, i])!r} (|difference| = {worst:.3g}, max |M| = {scale:.3g}, "
                             f"tolerance {rtol:.1e} relative)")
    return M


# ---------------------------------------------------------------------------------------------
# the Bunch-Parlett core (trusts its input)


def _bunch_parlett(A, tol):
    """Bunch-Parlett with complete pivoting on A (n, n), exactly symmetric, overwritten.

    Returns (perm, pivots, d, growth): A[perm][:, perm] = L D L^T + (negligible rest), L stored
    below the diagonal blocks of the first r = sum(pivots) columns of A (a 2x2 pivot at k has
    its multipliers in A[k+2:, k:k+2]), d the list of the pivots (a float, or (a, b, c) for
    [[a, b], [b, c]]), growth = max |s_ij| over the Schur complements / max |a_ij|.
    """
    n = A.shape[0]
    dt = A.dtype.type
    perm = np.arange(n)
    absM = np.abs(A)                                                     # |M|, for the rank test
    amax = float(absM.max())
    smax = amax
    pivots, d = [], []
    buf = np.empty(n * n, dtype=A.dtype)                                 # |S| without reallocation
    k = 0
    while k < n:
        m = n - k
        S = A[k:, k:]                                                    # (m, m) Schur complement (view)
        absS = np.abs(S, out=buf[:m * m].reshape(m, m))                  # (m, m)
        ij = int(absS.argmax())
        mu0 = float(absS.flat[ij])
        # the null part: negligible against the largest Schur complement entry so far, max|M| times the
        # growth (the elimination's rounding noise is absolute and grows with it; max|M| alone failed
        # 2 % of random rank-60 matrices of order 64), and
        # not comparable to M's own entries in the remaining rows and columns (the small but exact
        # pivots of a graded matrix are; a threshold on max|M| alone returned its tiny eigenvalues
        # as zeros)
        if mu0 <= tol * smax and mu0 <= math.sqrt(tol) * float(absM[np.ix_(perm[k:], perm[k:])].max()):
            break
        smax = max(smax, mu0)
        diag = np.diagonal(absS)                                         # (m,)
        i1 = int(diag.argmax())
        if float(diag[i1]) >= ALPHA * mu0:
            _swap(A, perm, k, k + i1)
            w = A[k + 1:, k].copy()                                      # (m - 1,) column below the pivot
            piv = float(A[k, k])
            l = w / dt(piv)                                              # (m - 1,) multipliers
            A[k + 1:, k + 1:] -= np.outer(l, w)                          # (m - 1, m - 1) rank-1 update
            A[k + 1:, k] = l
            pivots.append(1)
            d.append(piv)
            k += 1
            continue
        p, q = sorted(divmod(ij, m))                                     # p < q: |s_pq| = mu0
        _swap(A, perm, k, k + p)
        _swap(A, perm, k + 1, k + q)
        a, b, c = float(A[k, k]), float(A[k + 1, k]), float(A[k + 1, k + 1])
        ab, cb = a / b, c / b
        den = b * (ab * cb - 1)                                          # det / b, |ab cb| < alpha^2
        C = A[k + 2:, k:k + 2].copy()                                    # (m - 2, 2)
        # W = C E^{-1}, E^{-1} = [[c, -b], [-b, a]] / det, in LAPACK xSYTF2's scaled form
        Einv = np.array([[cb, -1.0], [-1.0, ab]], dtype=A.dtype) / dt(den)   # (2, 2)
        W = C @ Einv                                                     # (m - 2, 2)
        A[k + 2:, k + 2:] -= W @ C.T                                     # (m - 2, m - 2) rank-2 update
        A[k + 2:, k:k + 2] = W
        pivots.append(2)
        d.append((a, b, c))
        k += 2
    return perm, pivots, d, (smax / amax if amax > 0 else 1.0)


def _swap(A, perm, i, j):
    """Symmetric interchange of rows / columns i <= j of the trailing part; the rows of L move along."""
    if i == j:
        return
    A[[i, j]] = A[[j, i]]                                                # (2, n) whole rows: L and S
    A[i:, [i, j]] = A[i:, [j, i]]                                        # (n - i, 2) columns of S only
    perm[[i, j]] = perm[[j, i]]


def _eig2(a, b, c):
    """Q, (l1, l2) with [[a, b], [b, c]] = Q diag(l1, l2) Q^T, b != 0, by one Jacobi rotation."""
    theta = (c - a) / (2 * b)
    t = math.copysign(1.0, theta) / (abs(theta) + math.hypot(1.0, theta))
    cs = 1 / math.sqrt(1 + t * t)
    sn = t * cs
    return np.array([[cs, sn], [-sn, cs]]), (a - t * b, c + t * b)


def _post_process(A, perm, pivots, d):
    """G (n, r) and J (r,) from the factors of :func:`_bunch_parlett`, columns in pivot order."""
    n = A.shape[0]
    r = sum(pivots)
    GL = np.zeros((n, r), dtype=A.dtype)                                 # (n, r) rows in pivoted order
    J = np.empty(r, dtype=A.dtype)                                       # (r,)
    k = 0
    for size, dk in zip(pivots, d, strict=True):
        if size == 1:
            GL[k, k] = 1
            GL[k + 1:, k] = A[k + 1:, k]
            GL[k:, k] *= A.dtype.type(math.sqrt(abs(dk)))
            J[k] = math.copysign(1.0, dk)
        else:
            Q, lam = _eig2(*dk)                                          # (2, 2), (l1, l2)
            F = (Q * np.sqrt(np.abs(lam))).astype(A.dtype)               # (2, 2) Q_k diag(sqrt|l|)
            GL[k:k + 2, k:k + 2] = F                                     # the unit diagonal block of L_k
            GL[k + 2:, k:k + 2] = A[k + 2:, k:k + 2] @ F                 # (n - k - 2, 2)
            J[k:k + 2] = np.sign(lam)
        k += size
    G = np.empty_like(GL)
    G[perm] = GL                                                         # undo P: M = P L D L^T P^T
    return G, J


# ---------------------------------------------------------------------------------------------
# public function


def gjgt(M, *, tol=None):
    """Factor a real symmetric (possibly indefinite, possibly singular) M (n x n) as M = G diag(J) G^T.

    Bunch-Parlett with complete pivoting, P^T M P = L D L^T, then the post-processing of the
    1x1 and 2x2 blocks of D into signs (see the module docstring). G has full column rank r,
    the numerical rank of M; the number of +1 / -1 in J is the inertia of M (Sylvester).

    Parameters
    ----------
    M : (n, n) array_like, float32 or float64
        Real symmetric matrix; no batch dimensions. float32 is computed in float32. A cupy array
        is copied to the host, factored there and the factors returned as cupy arrays: the GPU
        has no good indefinite factorization (Novakovic-Singer HSVD, sections 1 and 6 leave it open).
    tol : float in (0, 1), optional
        The elimination stops when every entry of the Schur complement is <= tol * max|M| times the
        growth so far (the largest entry of the earlier Schur complements over max|M|) and
        <= sqrt(tol) times the largest |M_ij| over its rows and columns (M's own entries there, so
        that the small but exact pivots of a graded matrix are kept); the remaining order is the
        null part. Default n * eps(dtype).

    Returns
    -------
    G : (n, r) ndarray
        Full column rank, the dtype of M, with M = G diag(J) G^T to about n eps growth max|M|.
    J : (r,) ndarray
        +1.0 / -1.0, the dtype of M: all +1 columns first, then the -1 ones (each group in pivot
        order).
    info : dict
        ``rank`` (r), ``pivots`` (the list of pivot sizes 1 / 2, in order) and ``growth`` (max
        |entry| of the Schur complements seen / max |M|, >= 1; 1 for M = 0 or n = 0).

    Raises
    ------
    TypeError
        M is complex (not supported yet), integer, bool or another non-float dtype.
    ValueError
        M is not a square 2-D matrix, not finite or not symmetric (|M - M^T| > 100 n eps max|M|;
        only the lower triangle is used); ``tol`` is not in (0, 1).

    References
    ----------
    .. [1] J. R. Bunch, B. N. Parlett, "Direct methods for solving symmetric indefinite systems
       of linear equations", SIAM J. Numer. Anal. 8 (1971).
    .. [2] V. Novakovic, S. Singer, "A GPU-based hyperbolic SVD algorithm", BIT 51 (2011)
       (Novakovic-Singer HSVD), section 1: G from the Hermitian indefinite factorization with
       post-processing has full column rank.
    .. [3] I. Slapnicar, "Componentwise analysis of direct factorization of real symmetric and
       Hermitian matrices", Linear Algebra Appl. 272 (1998).

    Examples
    --------
    >>> import numpy as np
    >>> from linalg_gpu.jacobi.indefinite import gjgt
    >>> M = np.array([[0.0, 1.0, 2.0], [1.0, 0.0, 3.0], [2.0, 3.0, -1.0]])
    >>> G, J, info = gjgt(M)
    >>> bool(np.allclose(G * J @ G.T, M)), J.tolist(), info["rank"]
    (True, [1.0, -1.0, -1.0], 3)
    """
    _check_tol(tol)
    if is_cupy_array(M):
        xp = get_array_module(M)
        G, J, info = gjgt(M.get(), tol=tol)
        return xp.asarray(G), xp.asarray(J), info
    return _gjgt(_check_matrix(M), tol)


def _gjgt(M, tol):
    """:func:`gjgt` of a checked numpy M."""
    n = M.shape[0]
    tol = n * float(np.finfo(M.dtype).eps) if tol is None else float(tol)
    # M scaled by 4^-k (exact) to max |m_ij| in [0.25, 1), so that no pivot, multiplier or square root
    # over- or underflows (subnormal M broke the pivoting); then G = 2^k G' for M' = G' J G'^T
    k = (math.frexp(float(np.abs(M).max()) if n else 0.0)[1] + 1) // 2
    A = np.ldexp(np.tril(M) + np.tril(M, -1).T, -2 * k)                  # (n, n) exactly symmetric work copy
    perm, pivots, d, growth = _bunch_parlett(A, tol) if n else (np.arange(0), [], [], 1.0)
    G, J = _post_process(A, perm, pivots, d)
    G = np.ldexp(G, k)
    order = np.argsort(J < 0, kind="stable")                             # (r,) +1 first, stable
    info = {"rank": int(G.shape[1]), "pivots": pivots, "growth": float(growth)}
    return np.ascontiguousarray(G[:, order]), J[order], info
