"""Two-sided parallel cyclic Jacobi eigensolver and the Karhunen-Loeve transform (Torun et al.).

The classical two-sided Jacobi method (Torun et al., eqs. 3-5): A <- J^T A J with plane rotations
J(p, q, theta) chosen to annihilate a_pq, repeated until A is diagonal; V = J_1 J_2 ... J_L
holds the eigenvectors (the KLT matrix). The parallel version groups the pairs of a sweep into
*steps* of disjoint pairs (the chess-tournament ordering of Torun et al., eq. 7 and section II.B;
``orderings.round_robin``), so that every rotation of a step can be applied at once:

1. the angles of all pairs of the step, from the current a_ii, a_jj, a_ij (eq. 5),
2. the ROW update of all pairs, X <- J^T A on rows i, j (eq. 8),
3. then the COLUMN update, A <- X J on columns i, j (eq. 9), and V <- V J (eq. 10).

Here a step is one vectorized numpy operation over its pairs (fancy indexing; no Python loop
over pairs): the numpy twin of the two kernels of Torun et al.. The GPU path is
``linalg_gpu.jacobi.blocked.jacobi_eigh`` (cupy input).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import as_array, boolean_flags, check_dtype, get_array_module, is_cupy_array
from ._shared import JacobiInfo
from .orderings import ORDERINGS, sweep
from .svd import _exponent, _ldexp_finite

__all__ = ["jacobi_eigh", "klt", "JacobiInfo"]

SYMMETRY_RTOL = 100        # |A - A^T| <= SYMMETRY_RTOL * eps * max|A| counts as symmetric


# ---------------------------------------------------------------------------------------------
# argument checks (public boundary only)


def _check_options(ordering, tol, max_sweeps, dtype):
    """Validate the options; return the threshold (the default for ``tol=None``)."""
    if not isinstance(ordering, str) or ordering not in ORDERINGS:
        raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, numbers.Integral) or max_sweeps < 1:
        raise ValueError(f"max_sweeps must be a positive integer, got {max_sweeps!r}")
    if tol is None:
        return _default_tol(dtype)
    if isinstance(tol, bool) or not isinstance(tol, numbers.Real) or not math.isfinite(tol) or not 0 < tol < 1:
        raise ValueError(f"tol must be a number in (0, 1) (or None for eps of the dtype), got {tol!r}")
    return float(tol)


def _default_tol(dtype):
    return float(np.finfo(dtype).eps)


def _check_matrix_meta(A, name):
    """Shape and dtype of a 2-D float array (numpy or cupy); complex -> TypeError 'not supported yet'."""
    if np.dtype(A.dtype).kind == "c":
        raise TypeError(f"{name} has complex dtype {A.dtype}: complex (Hermitian) input is not supported yet; "
                        "pass a real float32 or float64 array")
    check_dtype(A, name)                                       # integer, bool, float16, object -> TypeError
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array; got {A.ndim}-dimensional shape {A.shape} "
                         "(batches are not supported)")


def _check_finite(A, name):
    xp = get_array_module(A)
    if not bool(xp.isfinite(A).all()):
        bad = np.argwhere(~np.isfinite(A.get() if is_cupy_array(A) else A))[0]
        raise ValueError(f"{name} must be finite; found {A[tuple(bad)].item()!r} at index {tuple(int(b) for b in bad)}")


def _check_symmetric(A, name):
    """ValueError naming the worst entry where |A - A^T| > 100 eps max|A| (numpy or cupy)."""
    xp = get_array_module(A)
    D = xp.abs(A - A.T)
    i, j = divmod(int(xp.argmax(D)), A.shape[1])
    worst, scale = float(D[i, j]), float(xp.abs(A).max())
    tol = SYMMETRY_RTOL * float(np.finfo(A.dtype).eps)
    if worst > tol * scale:
        raise ValueError(
            f"{name} is not symmetric: the worst entry is {name}[{i}, {j}] = {float(A[i, j])!r} against "
            f"{name}[{j}, {i}] = {float(A[j, i])!r} (|difference| = {worst:.3g}, max |{name}| = {scale:.3g}, "
            f"tolerance {tol:.1e} relative); pass assume_symmetric=True to use the lower triangle"
        )


def _lower_symmetric(A):
    """The symmetric matrix of A's lower triangle (as numpy.linalg.eigh's UPLO='L'); exact."""
    xp = get_array_module(A)
    return xp.tril(A) + xp.tril(A, -1).T


# ---------------------------------------------------------------------------------------------
# the numpy core


def _jacobi_eigh_np(A, steps, tol, max_sweeps):
    """Two-sided Jacobi on an exactly symmetric (n, n) float array, overwritten; trusts its input.

    Returns (d, V, info): d the (unsorted) diagonal of the final A, V the accumulated rotations.
    """
    n = A.shape[0]
    W = np.eye(n, dtype=A.dtype)                                       # (n, n) V^T: row k = column k of V
    cols = np.arange(n)                                                # (n,)
    norm_a = _fro(A)                                                   # ||A||_F (no float32 overflow), invariant
    abs_thr = A.dtype.type(tol * norm_a)
    tol_t = A.dtype.type(tol)
    sweeps = rotations = 0
    converged = False
    while sweeps < max_sweeps:
        sweeps += 1
        rotated = 0
        for step in steps:                                             # (k, 2) disjoint pairs i < j
            i, j = step[:, 0], step[:, 1]                              # (k,)
            aii, ajj, aij = A[i, i], A[j, j], A[i, j]                  # (k,)
            scale = np.sqrt(np.abs(aii)) * np.sqrt(np.abs(ajj))        # sqrt|a_ii a_jj| without overflow
            rot = np.abs(aij) > np.where(scale > 0, tol_t * scale, abs_thr)
            if not rot.any():
                continue
            if not rot.all():
                i, j, aii, ajj, aij = i[rot], j[rot], aii[rot], ajj[rot], aij[rot]
            k = i.size
            rotated += k
            # eq. 5: t = tan of the angle, the root with |t| <= 1 (Golub & Van Loan, sym.schur2)
            theta = (ajj - aii) / (2 * aij)                            # (k,)
            t = np.copysign(1, theta) / (np.abs(theta) + np.hypot(theta, 1))
            c = 1 / np.sqrt(1 + t * t)                                 # (k,)
            s = t * c
            cr, sr = c[:, None], s[:, None]                            # (k, 1)
            # eq. 8: rows i, j of X = J^T A, all pairs of the step at once
            Ri, Rj = A[i], A[j]                                        # (k, n)
            A[i] = cr * Ri - sr * Rj
            A[j] = sr * Ri + cr * Rj
            # eq. 9: columns i, j of A = X J
            piv = np.concatenate([i, j])                               # (2k,)
            C = A.take(piv, axis=1)                                    # (n, 2k) columns i, j of X
            N = np.empty_like(C)                                       # (n, 2k) columns i, j of X J
            N[:, :k] = C[:, :k] * c - C[:, k:] * s
            N[:, k:] = C[:, :k] * s + C[:, k:] * c
            A[:, piv] = N
            if k > 1:
                # exact symmetry: an entry between two pivot pairs is rounded differently on its
                # two sides; the pivot rows take their lower part from the columns just written
                R = A[piv]                                             # (2k, n)
                np.copyto(R, N.T, where=cols < piv[:, None])
                A[piv] = R
            # the 2x2 pivot blocks: a_ij = a_ji = 0, the diagonal in its accurate form
            A[i, i] = aii - t * aij
            A[j, j] = ajj + t * aij
            A[i, j] = 0
            A[j, i] = 0
            # eq. 10: V = V J, i.e. rows i, j of V^T
            Ri, Rj = W[i], W[j]                                        # (k, n)
            W[i] = cr * Ri - sr * Rj
            W[j] = sr * Ri + cr * Rj
        rotations += rotated
        if rotated == 0:
            converged = True
            break
    d = np.diagonal(A).copy()                                          # (n,)
    np.fill_diagonal(A, 0)
    off = _fro(A)                                                      # ||offdiag(A)||_F
    info = JacobiInfo(sweeps=sweeps, converged=converged, rotations=rotations,
                      off_norm=off / norm_a if norm_a > 0 else 0.0, tol=tol)
    return d, W.T, info


# ---------------------------------------------------------------------------------------------
# public functions


def _fro(A) -> float:
    """||A||_F without overflow for entries near the dtype's range: max|a| * ||A / max|a|||_F."""
    A = np.asarray(A, dtype=np.float64)
    mx = float(np.abs(A).max()) if A.size else 0.0
    return mx * float(np.linalg.norm(A / mx)) if mx > 0 else 0.0


@boolean_flags("assume_symmetric", "return_info")
def jacobi_eigh(A, *, ordering="round_robin", tol=None, max_sweeps=60, assume_symmetric=False, return_info=False):
    """Eigenvalues and eigenvectors of a real symmetric matrix by the two-sided parallel Jacobi method.

    Each sweep runs the steps of ``ordering`` (``orderings.sweep``); a step's pairs are disjoint,
    so all its rotations are applied together: the angles from the current a_ii, a_jj, a_ij,
    then the row update of all pairs (Torun et al., eq. 8), then the column update and V <- V J
    (eqs. 9, 10). With theta = (a_jj - a_ii) / (2 a_ij), t = sgn(theta) / (|theta| +
    sqrt(theta^2 + 1)), c = 1 / sqrt(1 + t^2), s = t c, the annihilated entries a_ij = a_ji are
    set to exactly 0 and the new diagonal to a_ii - t a_ij, a_jj + t a_ij (the accurate form of
    eq. 5). A stays exactly symmetric.

    A pair is rotated only when |a_ij| > tol * sqrt(|a_ii a_jj|) (the relative test of Demmel &
    Veselic), or, where a_ii a_jj == 0, when |a_ij| > tol * ||A||_F. The iteration stops after
    the first sweep that rotates nothing. The relative test is what gives positive definite
    matrices their relative accuracy: eigenvalues of a graded matrix D B D are found to about
    n eps cond(B) relative error, however wide the range of D. A is scaled by a power of 2 first
    (exact), to max |a_ij| in [0.5, 1), and the eigenvalues back, so that no difference a_jj - a_ii
    or rotated entry overflows.

    numpy input runs the numpy code here (the twin of the kernels). cupy input is checked here
    (shape, dtype, finite, symmetric) and then handed to ``linalg_gpu.jacobi.blocked.jacobi_eigh``
    (a blocked chess tournament on the GPU) with ``tol``, ``max_sweeps``, ``assume_symmetric``
    and ``return_info`` as given; its stopping rule, its default ``tol`` and its ``info``
    are described there.

    Parameters
    ----------
    A : (n, n) array_like, float32 or float64
        Real symmetric matrix (numpy or cupy; no batch dimensions). float32 is computed in float32.
    ordering : {"round_robin", "modified_modulus", "row_cyclic"}, default "round_robin"
        Pivot ordering of a sweep: the chess tournament of Torun et al. (eq. 7) by default;
        see :mod:`linalg_gpu.jacobi.orderings`. The GPU path uses ``"round_robin"`` only.
    tol : float in (0, 1), optional
        Rotation threshold, relative as above. Default ``eps`` of the dtype (2.2e-16 for
        float64, 1.2e-7 for float32): one rotation already makes rounding errors of eps relative
        to the same scale sqrt(|a_ii a_jj|), so a smaller tol buys no accuracy, while n eps
        would loosen the relative-accuracy bound by a factor n; convergence is quadratic, so the
        choice changes the sweep count by at most one (measured: the same count for a random
        256 x 256 float64 matrix, one more for float32).
    max_sweeps : int, default 60
        Sweeps allowed, including the final one that finds nothing to rotate.
    assume_symmetric : bool, default False
        Unless set, raise ``ValueError`` naming the worst entry where |A - A^T| > 100 eps max|A| (the
        spelling of :func:`linalg_gpu.solve_small`). Either way only the lower triangle of A is used (as
        ``numpy.linalg.eigh``).
    return_info : bool, default False
        Also return a :class:`JacobiInfo`; a run that does not converge then returns its result
        with ``info.converged`` False instead of raising.

    Returns
    -------
    w : (n,) ndarray
        Eigenvalues, ascending (as ``numpy.linalg.eigh``), the dtype of A.
    V : (n, n) ndarray
        Orthonormal eigenvectors, column ``V[:, k]`` for ``w[k]``: A = V diag(w) V^T.
    info : JacobiInfo
        Only with ``return_info=True``: sweeps, converged, rotations, off_norm, tol.

    Raises
    ------
    ValueError
        A not 2-D, not square, empty, not finite or not symmetric; an unknown ``ordering``;
        ``tol`` not in (0, 1); ``max_sweeps`` not a positive integer.
    TypeError
        A complex (not supported yet), integer, bool or another non-float dtype.
    numpy.linalg.LinAlgError
        No convergence in ``max_sweeps`` sweeps (without ``return_info``).
    OverflowError
        An eigenvalue is not representable in the dtype (|eigenvalue| above its largest number).

    References
    ----------
    .. [1] M. U. Torun, O. Yilmaz, A. N. Akansu, Torun et al.: two-sided Jacobi (eqs. 3-5), the
       chess-tournament ordering (eq. 7) and the parallel row / column updates (eqs. 8-10).
    .. [2] Acosta-Quinonez, section II (two-sided Jacobi, the Brent-Luk parallel ordering).
    .. [3] J. Demmel, K. Veselic, "Jacobi's method is more accurate than QR", SIAM J. Matrix
       Anal. Appl. 13 (1992): the relative stopping test and the accuracy on graded matrices.
    .. [4] G. H. Golub, C. F. Van Loan, Matrix Computations, section 8.5 (sym.schur2).

    Examples
    --------
    >>> import numpy as np
    >>> from linalg_gpu.jacobi.klt import jacobi_eigh
    >>> X = np.random.default_rng(0).standard_normal((6, 6)); A = X + X.T
    >>> w, V = jacobi_eigh(A)
    >>> bool(np.allclose(A @ V, V * w) and np.allclose(w, np.linalg.eigvalsh(A)))
    True
    """
    gpu = is_cupy_array(A)
    A = as_array(A, "A")
    _check_matrix_meta(A, "A")
    if A.shape[0] != A.shape[1]:
        raise ValueError(f"A must be square; got shape {A.shape}")
    if A.shape[0] == 0:
        raise ValueError("A is empty (shape (0, 0)); it needs n >= 1")
    thr = _check_options(ordering, tol, max_sweeps, A.dtype)
    _check_finite(A, "A")
    if not assume_symmetric:
        _check_symmetric(A, "A")
    if gpu and ordering != "round_robin":
        raise ValueError(f"ordering={ordering!r} is not available for cupy input; the GPU kernels "
                         "use 'round_robin' (the chess tournament)")
    xp = get_array_module(A)
    # A scaled by a power of 2 (exact) to max |a_ij| in [0.5, 1) (of the lower triangle, the part used), so
    # that neither a_jj - a_ii nor the rotated entries overflow; the eigenvalues are scaled back
    e = _exponent(xp.tril(A))
    A = xp.ldexp(A, -e)
    if gpu:
        from . import blocked

        res = blocked.jacobi_eigh(A, tol=tol, max_sweeps=max_sweeps, assume_symmetric=assume_symmetric,
                                  return_info=return_info)
        return (_unscale_eigenvalues(res[0], e, "A"),) + tuple(res[1:])
    n = A.shape[0]
    d, V, info = _jacobi_eigh_np(_lower_symmetric(A), sweep(n, ordering), thr, int(max_sweeps))
    if not info.converged and not return_info:
        raise np.linalg.LinAlgError(
            f"jacobi_eigh did not converge in max_sweeps={info.sweeps} sweeps (off(A)/||A||_F = "
            f"{info.off_norm:.2e} left, tol = {thr:.2e}); raise max_sweeps or tol, or pass "
            "return_info=True to get the unconverged result"
        )
    order = np.argsort(d, kind="stable")                                # ascending, as numpy.linalg.eigh
    w, V = _unscale_eigenvalues(d[order], e, "A"), np.ascontiguousarray(V[:, order])
    return (w, V, info) if return_info else (w, V)


def _unscale_eigenvalues(w, e, what):
    """w 2^e (exact where normal); OverflowError where an eigenvalue of ``what`` is not representable."""
    return _ldexp_finite(w, e, f"the eigenvalues of {what} overflow {w.dtype}: the largest |eigenvalue| is above "
                               f"{np.finfo(w.dtype).max:.4g}")


@boolean_flags("return_info")
def klt(X, *, ordering="round_robin", tol=None, max_sweeps=60, return_info=False):
    """Karhunen-Loeve transform of data rows: the decorrelating rotation of their covariance.

    The columns of X (features) are centred, C = Xc^T Xc / (samples - 1) is their sample
    covariance, C = V diag(w) V^T by :func:`jacobi_eigh`, and Y = Xc V are the decorrelated
    data: their sample covariance is diag(w), and X = Y V^T + mean. numpy input is computed on
    the CPU; cupy input does the centring and C with cupy and the eigen-solve on the GPU.

    Parameters
    ----------
    X : (samples, features) array_like, float32 or float64
        Data, one observation per row; samples >= 2.
    ordering, tol, max_sweeps, return_info
        As in :func:`jacobi_eigh` (C is symmetric by construction and is not checked).

    Returns
    -------
    Y : (samples, features) ndarray
        Xc V, the transform coefficients; column k has sample variance w[k].
    w : (features,) ndarray
        Eigenvalues of the covariance, ascending (as ``numpy.linalg.eigh``; the principal
        component of largest variance is the LAST column).
    V : (features, features) ndarray
        The KLT matrix: orthonormal eigenvectors of C in columns.
    info : JacobiInfo
        Only with ``return_info=True``.

    Raises
    ------
    ValueError
        X not 2-D, fewer than 2 samples, no features, not finite; bad options as in
        :func:`jacobi_eigh`.
    TypeError
        X complex (not supported yet), integer or another non-float dtype.
    numpy.linalg.LinAlgError
        No convergence in ``max_sweeps`` sweeps (without ``return_info``).
    OverflowError
        The covariance's eigenvalues (or Y) are not representable in the dtype.

    References
    ----------
    .. [1] Torun et al., section II: the KLT matrix V of eq. (1) by parallel Jacobi (eqs. 8-10).

    Examples
    --------
    >>> import numpy as np
    >>> from linalg_gpu.jacobi.klt import klt
    >>> X = np.random.default_rng(0).standard_normal((200, 4)) @ np.triu(np.ones((4, 4)))
    >>> Y, w, V = klt(X)
    >>> bool(np.allclose(np.cov(Y, rowvar=False), np.diag(w)) and np.allclose(Y @ V.T + X.mean(0), X))
    True
    """
    X = as_array(X, "X")
    _check_matrix_meta(X, "X")
    m, f = X.shape
    if m < 2:
        raise ValueError(f"X must have at least 2 samples (rows) for a covariance; got shape {X.shape}")
    if f < 1:
        raise ValueError(f"X must have at least 1 feature (column); got shape {X.shape}")
    _check_options(ordering, tol, max_sweeps, X.dtype)
    _check_finite(X, "X")
    xp = get_array_module(X)
    # scaled by powers of 2 (exact): X to max |x| in [0.5, 1), so that the mean cannot overflow, then Xc to
    # max |xc| in [0.5, 1), so that C neither over- nor underflows; w and Y are scaled back
    e = _exponent(X)
    Xc = xp.ldexp(X, -e)
    Xc = Xc - Xc.mean(axis=0, keepdims=True)                           # (samples, features)
    ec = _exponent(Xc)
    Xc = xp.ldexp(Xc, -ec)
    e += ec
    C = _lower_symmetric((Xc.T @ Xc) / (m - 1))                        # (features, features), exactly symmetric
    out = jacobi_eigh(C, ordering=ordering, tol=tol, max_sweeps=max_sweeps, assume_symmetric=True,
                      return_info=return_info)
    w = _unscale_eigenvalues(out[0], 2 * e, "the covariance of X")
    with np.errstate(over="ignore"):
        Y = xp.ldexp(Xc @ out[1], e)                                   # (samples, features)
    if not bool(xp.isfinite(Y).all()):
        raise OverflowError(f"the KLT coefficients Y = Xc V of X overflow {Y.dtype}")
    return (Y, w) + tuple(out[1:])
