"""Hyperbolic SVD by one-sided hyperbolic Jacobi, and the symmetric indefinite eigenproblem (Novakovic-Singer HSVD).

``hyperbolic_svd(G, J)``: G (m x n, m >= n, full column rank) and a signature J = diag(j), j_i = +-1,
give G = U diag(sigma) V^T with U^T U = I, sigma > 0 and V^T J V = J (eq. 1.1). The columns of G are
orthogonalized from the right by J-orthogonal plane transformations (eq. 2.1), G <- G Z, W <- W Z;
for a pivot pair (i, j) with a_ii = g_i^T g_i, a_jj = g_j^T g_j, a_ij = g_i^T g_j:

- j_i = j_j, a trigonometric rotation (eqs. 2.2, 2.4): zeta = (a_jj - a_ii) / (2 a_ij),
  t = tan phi = sgn(zeta) / (|zeta| + sqrt(1 + zeta^2)), c = 1 / sqrt(1 + t^2),
  g_i <- c g_i - c t g_j, g_j <- c t g_i + c g_j;
- j_i != j_j, a hyperbolic one (eqs. 2.2, 2.5): zeta = (a_ii + a_jj) / (2 a_ij) (|zeta| > 1 for
  independent columns), t = tanh phi = -sgn(zeta) / (|zeta| + sqrt(zeta^2 - 1)), ch = 1 / sqrt(1 - t^2),
  g_i <- ch g_i + ch t g_j, g_j <- ch t g_i + ch g_j;

both making g_i^T g_j = 0, with a_ii' = a_ii + hyp t a_ij, a_jj' = a_jj + t a_ij (eq. 2.6). At the end
sigma_i = ||g_i||, U = G Sigma^-1 and V = J W J (V^T = W^-1, W being J-orthogonal).

The pairs of a quasi-sweep come from the modified modulus strategy (``orderings.modified_modulus``,
Fig. 1) over positions; a permutation maps positions to columns, so columns are never swapped. The
positions 0..p-1 hold the columns with j = +1, sorted by a_ii descending, and p..n-1 those with j = -1,
ascending (section 4, Fig. 3); the permutation is re-sorted after every step. A pair rotates only if
|a_ij| > tol sqrt(a_ii a_jj) (relative orthogonality, eq. 2.3); the iteration stops after a quasi-sweep
with no rotation, or one whose tangents are all below T_eps = sqrt(eps) / 2 (eq. 4.2). As in
``svd.py`` the tangent test uses the relative tangent |t| sqrt(max(a_ii, a_jj) / min(a_ii, a_jj)),
which bounds the relative change of the shorter column (|t| alone stops too early on graded matrices).

``eigh_indefinite(M)``: M = G J G^T by the Bunch-Parlett factorization with post-processing
(``indefinite.gjgt``, G of full column rank), then the hyperbolic SVD of G: M = U (Sigma^2 J) U^T, so
the eigenvalues are sigma_i^2 j_i, with high relative accuracy, and the eigenvectors are U (section 1).

numpy input runs the pointwise algorithm here (vectorized over the pairs of a step); CuPy input runs
the blocked variant (``blocked.hyperbolic_svd``).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import as_array, boolean_flags, check_dtype, get_array_module, is_cupy_array
from ._shared import _hyperbolic_pair, _output_slots, _sorted_positions  # noqa: F401
from .orderings import modified_modulus
from .svd import (
    _apply_q,
    _complete,
    _exponent,
    _householder_qrcp,
    _ldexp_finite,
    _relative_off,
    _row_norms,
    _transform_pairs,
)

__all__ = ["hyperbolic_svd", "eigh_indefinite"]


# ---------------------------------------------------------------------------------------------
# argument checks (public boundary only)


def _check_options(tol, max_sweeps):
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, numbers.Real)
                            or not math.isfinite(tol) or not 0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1) (or None for sqrt(m) * eps), got {tol!r}")
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, numbers.Integral) or max_sweeps < 1:
        raise ValueError(f"max_sweeps must be a positive integer, got {max_sweeps!r}")


def _check_matrix(A, name, xp=None, complex_ok=False):
    """A as a 2-D float32/float64 (or, ``complex_ok``, complex64/complex128) array (of the module ``xp``)
    with finite entries."""
    A = as_array(A, name, xp)
    if A.dtype.kind == "c":
        if not complex_ok:
            raise TypeError(f"{name} has complex dtype {A.dtype}: the hyperbolic SVD is real only")
        if A.dtype not in (np.complex64, np.complex128):
            raise TypeError(f"{name} has dtype {A.dtype}; only complex64 and complex128 are supported")
    else:
        check_dtype(A, name)
    if A.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix, got shape {A.shape}")
    if not bool(get_array_module(A).isfinite(A).all()):                 # (|a| overflows for finite complex a)
        raise ValueError(f"{name} must be finite: it contains NaN or Inf")
    return A


def _check_signature(J, n, dtype):
    """J as a numpy vector of +-1 of length n (in ``dtype``)."""
    J = np.asarray(J.get() if hasattr(J, "get") else J)
    if J.ndim != 1 or J.shape[0] != n:
        raise ValueError(f"J must be a vector of +1/-1 of length n = {n} (the columns of G), got shape {J.shape}")
    if J.dtype.kind not in "biuf" or not np.all((J == 1) | (J == -1)):
        raise ValueError("J must hold only +1 and -1 (the signature of G J G^T)")
    return J.astype(dtype)


def _check_full_rank(G, need):
    """G's columns, each scaled to unit norm, must be numerically independent; ``need`` says why
    (the hyperbolic rotations need |a_ij| < (a_ii + a_jj) / 2, the GSVD a positive definite G^T G)."""
    n = G.shape[1]
    G64 = np.asarray(G.get() if hasattr(G, "get") else G, dtype=np.result_type(G.dtype, np.float64))
    norms = _row_norms(np.ascontiguousarray(G64.T))
    if (norms == 0).any():
        raise np.linalg.LinAlgError(f"G is not of full column rank: column {int(np.argmin(norms))} is zero")
    s = np.linalg.svd(G64 / norms, compute_uv=False)
    if s[-1] <= n * np.finfo(G.dtype).eps * s[0]:
        raise np.linalg.LinAlgError(
            f"G is not of full column rank (numerically): its column-scaled condition number is "
            f"{s[0] / max(s[-1], np.finfo(np.float64).tiny):.1e}; {need}")


# ---------------------------------------------------------------------------------------------
# the Jacobi core (trusts its input)


def _hyperbolic_jacobi(W, Wt, sign, tol, max_sweeps):
    """One-sided hyperbolic Jacobi on the rows of W (n, m), the columns of G = W^T, in place.

    ``Wt`` (n, n) or None accumulates the transformations in its rows (W = Wt^T); ``sign`` (n,) is J.
    Returns (sweeps, converged, rotations, stop)."""
    n = W.shape[0]
    tangent = math.sqrt(np.finfo(W.dtype).eps) / 2                       # T_eps, eq. 4.2
    steps = modified_modulus(n)
    d = (W * W).sum(axis=1)                                              # (n,) a_ii
    perm = _sorted_positions(d, sign)
    rotations = 0
    for sweep_no in range(1, max_sweeps + 1):
        rotated, tau_max = 0, 0.0
        for P in steps:
            I, J = perm[P[:, 0]], perm[P[:, 1]]                          # (k,) columns of the pairs
            Wi, Wj = W[I], W[J]                                          # (k, m)
            alpha, beta = d[I], d[J]
            gamma = (Wi * Wj).sum(axis=1)                                # (k,) a_ij
            rot = np.abs(gamma) > tol * np.sqrt(alpha) * np.sqrt(beta)   # eq. 2.3
            if not rot.any():
                continue
            I, J, Wi, Wj = I[rot], J[rot], Wi[rot], Wj[rot]
            alpha, beta, gamma = alpha[rot], beta[rot], gamma[rot]
            hyp = sign[I] != sign[J]
            a, b, e, f, t, ok = _hyperbolic_pair(alpha, beta, gamma, hyp)
            if not ok.all():
                raise np.linalg.LinAlgError("G is not of full column rank (numerically): a hyperbolic pair of "
                                            "columns became dependent during the iteration")
            ratio = np.sqrt(np.maximum(alpha, beta) / np.minimum(alpha, beta))
            tau_max = max(tau_max, float((np.abs(t) * ratio).max()))
            a, b, e, f = a[:, None], b[:, None], e[:, None], f[:, None]
            _transform_pairs(W, I, J, Wi, Wj, a, b, e, f)
            if Wt is not None:
                _transform_pairs(Wt, I, J, Wt[I], Wt[J], a, b, e, f)
            d[I] = (W[I] * W[I]).sum(axis=1)                             # recomputed (Algorithm 4.5)
            d[J] = (W[J] * W[J]).sum(axis=1)
            perm = _sorted_positions(d, sign)                            # the diagonal kept sorted
            rotated += len(I)
        rotations += rotated
        if rotated == 0:
            return sweep_no, True, rotations, "no_rotation"
        if tau_max <= tangent:
            return sweep_no, True, rotations, "tangent"
    return max_sweeps, False, rotations, "max_sweeps"


def _hsvd_core(G, sign, compute_v, tol, max_sweeps):
    """(U, sigma, V, info) of a finite G (m, n), m >= n, full column rank, in the output order."""
    m, n = G.shape
    dt = G.dtype
    e = _exponent(G)
    G = np.ldexp(G, -e)                                                  # max |g_ij| in [0.5, 1), exact
    if m > n:                                                            # shortening, section 1
        R, rows, cols, refl = _householder_qrcp(G)                       # G[rows][:, cols] = Q R
        W = np.ascontiguousarray(R.T)                                    # (n, n) rows = columns of R
        sj = sign[cols]
    else:
        W, sj, rows, cols = np.ascontiguousarray(G.T), sign, None, np.arange(n)
    tol = math.sqrt(W.shape[1]) * float(np.finfo(dt).eps) if tol is None else float(tol)
    Wt = np.eye(n, dtype=dt) if compute_v else None
    sweeps, converged, rotations, stop = _hyperbolic_jacobi(W, Wt, sj, tol, max_sweeps)
    s = _row_norms(W)                                                    # (n,) sigma, by column of R
    info = {"sweeps": sweeps, "converged": converged, "rotations": rotations, "off_norm": _relative_off(W, s),
            "tol": tol, "stop": stop, "ordering": "modified_modulus"}
    pick = _output_slots(s, sj, sign)                                    # (n,) rows of W per slot
    sigma = s[pick]
    UR = (W[pick] / sigma[:, None]).T                                    # (n or m, n) eq. 13
    if rows is not None:
        Y = np.zeros((m, n), dtype=dt)
        Y[:n] = UR
        Us = _apply_q(refl, Y)                                           # Q U_R
        U = np.empty_like(Us)
        U[rows] = Us
    else:
        U = UR
    V = None
    if compute_v:                                                        # R = U_R S (J_R Z J_R)^T, Z = Wt^T
        Z = np.empty_like(Wt)
        Z[cols] = Wt.T                                                   # rows by G's columns (G = Q R P_c^T)
        V = sign[:, None] * Z[:, pick] * sign[None, :]
    return U, _unscale_sigma(sigma, e), V, info


def _unscale_sigma(sigma, e):
    """sigma 2^e (exact where normal); OverflowError where the largest sigma is not representable."""
    return _ldexp_finite(sigma, e, f"the largest hyperbolic singular value of G overflows {sigma.dtype} (it is at "
                                   f"most ||G||_2, here above {np.finfo(sigma.dtype).max:.4g})")


# ---------------------------------------------------------------------------------------------
# public functions


@boolean_flags("compute_v", "return_info")
def hyperbolic_svd(G, J, *, compute_v=True, tol=None, max_sweeps=60, return_info=False):
    """Hyperbolic SVD G = U diag(sigma) V^T with V^T diag(J) V = diag(J), by one-sided hyperbolic Jacobi.

    Parameters
    ----------
    G : (M, N) array_like, float32 or float64
        Of full column rank, M >= N. Taller matrices are shortened by a row-sorted, column-pivoted
        Householder QR first (Novakovic-Singer HSVD, section 1).
    J : (N,) array_like of +1 / -1
        The signature: the diagonal of J.
    compute_v : bool, optional
        Accumulate V (default True). Without it only U and sigma are returned (the eigenvector problem
        of G J G^T needs only U).
    tol : float in (0, 1), optional
        Relative orthogonality threshold of eq. 2.3; default sqrt(N') eps (N' the columns' length).
    max_sweeps : int, optional
        Quasi-sweeps allowed (default 60).
    return_info : bool, optional
        Also return a dict: sweeps, converged, rotations, off_norm, tol, stop, ordering.

    Returns
    -------
    U : (M, N) ndarray
        Orthonormal columns.
    sigma : (N,) ndarray
        The hyperbolic singular values, > 0. In the slots where J = +1 they are descending, where
        J = -1 ascending (the paper's sorted diagonal), so that V keeps the signature J as given.
    V : (N, N) ndarray
        J-orthogonal: V^T diag(J) V = diag(J). Only with ``compute_v``.

    Raises
    ------
    TypeError
        G complex or not float32/float64.
    ValueError
        G not 2-D, M < N, NaN/Inf; J not a vector of +-1 of length N; bad ``tol``/``max_sweeps``.
    numpy.linalg.LinAlgError
        G not of full column rank (numerically), or no convergence (with ``return_info`` the result
        is returned instead, ``info["converged"]`` False).
    OverflowError
        The largest sigma is not representable in the dtype.

    References
    ----------
    .. [1] V. Novakovic, S. Singer, "A GPU-based hyperbolic SVD algorithm", BIT 51 (2011) (Novakovic-Singer HSVD).
    """
    _check_options(tol, max_sweeps)
    if is_cupy_array(G):
        from . import blocked

        G = _check_matrix(G, "G")
        sign = _check_signature(J, G.shape[1] if G.ndim == 2 else -1, G.dtype)
        e = _exponent(G)                                                 # scaled as in _hsvd_core
        res = blocked.hyperbolic_svd(get_array_module(G).ldexp(G, -e), sign, compute_v=compute_v, tol=tol,
                                     max_sweeps=max_sweeps, return_info=return_info)
        return (res[0], _unscale_sigma(res[1], e)) + tuple(res[2:])
    G = _check_matrix(G, "G", np)
    m, n = G.shape
    if m < n:
        raise ValueError(f"G must have at least as many rows as columns (M >= N), got shape {G.shape}")
    sign = _check_signature(J, n, G.dtype)
    if n == 0:
        out = (np.zeros((m, 0), G.dtype), np.zeros(0, G.dtype)) + ((np.zeros((0, 0), G.dtype),) if compute_v else ())
        return out + ({"sweeps": 0, "converged": True, "rotations": 0, "off_norm": 0.0, "tol": tol, "stop": "trivial",
                       "ordering": "modified_modulus"},) if return_info else out
    _check_full_rank(G, "the hyperbolic SVD needs independent columns")
    U, sigma, V, info = _hsvd_core(G, sign, compute_v, tol, max_sweeps)
    if not info["converged"] and not return_info:
        raise np.linalg.LinAlgError(f"hyperbolic_svd did not converge in max_sweeps={max_sweeps} quasi-sweeps "
                                    f"(relative off-diagonal {info['off_norm']:.2e}); raise max_sweeps")
    out = (U, sigma) + ((V,) if compute_v else ())
    return out + (info,) if return_info else out


@boolean_flags("return_info")
def eigh_indefinite(M, *, tol=None, max_sweeps=60, return_info=False):
    """Eigenvalues and eigenvectors of a real symmetric (indefinite) M, with high relative accuracy.

    M = G J G^T (Bunch-Parlett with post-processing, ``indefinite.gjgt``; G of full column rank r),
    then the hyperbolic SVD G = U Sigma V^T: M = U (Sigma^2 J) U^T (Novakovic-Singer HSVD, section 1). A singular
    M (r < N) gets N - r zero eigenvalues with an orthonormal basis of its null space. M is scaled by a
    power of 2 (exact) to max |m_ij| in [0.5, 1) first and the eigenvalues back; an eigenvalue beyond the
    dtype's range raises OverflowError.

    Returns
    -------
    w : (N,) ndarray
        Eigenvalues, ascending (like ``numpy.linalg.eigh``).
    U : (N, N) ndarray
        Orthonormal eigenvectors, column i for w[i].
    info : dict
        Only with ``return_info``: the hyperbolic SVD's info, with ``rank`` and ``pivots`` of the factorization.

    CuPy input is factored on the host (the paper leaves a GPU indefinite factorization open) and the
    hyperbolic SVD runs on the GPU.
    """
    from .indefinite import _check_matrix as _check_symmetric
    from .indefinite import _gjgt

    _check_options(tol, max_sweeps)
    gpu = is_cupy_array(M)
    xp = get_array_module(M)
    M = _check_symmetric(M.get() if gpu else M)
    # M scaled by a power of 2 (exact) to max |m_ij| in [0.5, 1), so that sigma^2 of its factor neither over-
    # nor underflows (the GPU flushes subnormal float32 products to 0); the eigenvalues are scaled back
    e = _exponent(M)
    G, J, finfo = _gjgt(np.ldexp(M, -e), None)
    G, J = xp.asarray(G), xp.asarray(J)
    n, r = G.shape
    dt = G.dtype
    if r == 0:
        w, U, info = xp.zeros(n, dt), xp.eye(n, dtype=dt), {"sweeps": 0, "converged": True, "stop": "trivial"}
    else:
        res = hyperbolic_svd(G, J, compute_v=False, tol=tol, max_sweeps=max_sweeps, return_info=True)
        Ur, sigma, info = res
        w = _ldexp_finite(sigma * sigma * J, e, f"the eigenvalues of M overflow {dt}: the largest |eigenvalue| "
                                                f"is above {np.finfo(dt).max:.4g}")
        w = xp.concatenate([w, xp.zeros(n - r, dtype=dt)])
        U = Ur if r == n else xp.asarray(_complete(Ur.get() if gpu else Ur, n))
        order = xp.argsort(w)
        w, U = w[order], U[:, order]
    info = dict(info, rank=finfo["rank"], pivots=finfo["pivots"])
    if not info["converged"] and not return_info:
        raise np.linalg.LinAlgError("eigh_indefinite: the hyperbolic SVD did not converge; raise max_sweeps")
    return (w, U, info) if return_info else (w, U)
