"""Generalized SVD of (F, G) by the implicit (one-sided) Hari-Zimmermann algorithm (Novakovic & Singer), real or
complex.

``gsvd(F, G)`` returns U, V, Z, alpha, beta with F Z = U diag(alpha), G Z = V diag(beta), U^H U = V^H V = I,
alpha^2 + beta^2 = 1 and beta > 0 (G of full column rank), sorted by alpha / beta descending: the
generalized singular values; Z's columns are the generalized eigenvectors of (A, B) = (F^T F, G^T G),
A Z = B Z diag(alpha / beta)^2 (section 1), A = F^H F, B = G^H G.

The columns of F and G are orthogonalized jointly from the right by non-orthogonal 2 x 2 transformations
(section 2.1). For a pivot pair (i, j): a_.. = f_.^T f_., b_.. = g_.^T g_. (the pivot blocks of A and B),
rescaled by D = diag(b_ii, b_jj)^(-1/2) so that diag(B') = I (the variant that recomputes the norms of G's
columns in every step, against the drift of diag(B)); with x = b'_ij, t = sqrt(1 - x^2) (section 2.1.2):

    xi = x / (sqrt(1 + x) + sqrt(1 - x)),   eta = x / ((1 + sqrt(1 + x)) (1 + sqrt(1 - x))),
    cot(2 theta) = t (a'_jj - a'_ii) / (2 a'_ij - (a'_ii + a'_jj) x),
    tan(theta) = sign(cot(2 theta)) / (|cot(2 theta)| + sqrt(1 + cot^2(2 theta))),
    cos(phi) = cos(theta) + xi (sin(theta) - eta cos(theta)),  cos(psi) = cos(theta) - xi (sin(theta) + eta cos(theta)),
    sin(phi) = sin(theta) - xi (cos(theta) + eta sin(theta)),  sin(psi) = sin(theta) + xi (cos(theta) - eta sin(theta)),
    Z' = [[cos(phi), sin(phi)], [-sin(psi), cos(psi)]] / t,   Z = D Z'.

Exception (cot(2 theta) = 0/0: the pivot blocks are proportional): Z' = [[1/sqrt(1+x), -1/sqrt(1-x)],
[1/sqrt(1+x), 1/sqrt(1-x)]] / sqrt(2). (The paper writes |x|; with the signed x, which is what makes
Z'^T B' Z' = I for x < 0 too, this is the same matrix for x >= 0.) Complex F, G use section 2.1.1's Z'
(``_hz_complex``); everything else is the same with ^T read as ^H.
A pair is left alone if |x| < eps sqrt(n) and |a'_ij| < sqrt(a'_ii a'_jj) eps sqrt(n) (relatively
orthogonal); the columns are swapped when that keeps diag(A) descending (the sorting of section 2.1).
A transformation is "small" when cos(phi) / t = cos(psi) / t = 1 to one rounding (2 eps; criterion C1,
section 2.5), else "big"; the sweeps stop after one with no big transformation. Afterwards (section 2.4)
Sigma_F, Sigma_G are the column norms of F and G, Theta = (Sigma_F^2 + Sigma_G^2)^(-1/2), alpha = Sigma_F Theta,
beta = Sigma_G Theta, U = F Sigma_F^-1, V = G Sigma_G^-1, Z = Z Theta.

Before the iteration, tall matrices are shortened (section 2): F P1 = Q_F R_F and (G P1) P2 = Q_G R_G by
column-pivoted Householder QR (rows sorted first), and the algorithm runs on (R_F P2, R_G), n x n.
numpy input runs the pointwise algorithm here, vectorized over the pairs of a step (modified modulus
ordering); CuPy input runs the blocked variant (``blocked.gsvd``). Every reduction has a fixed order, so
the same input gives the same output bits.
"""

from __future__ import annotations

import math

import numpy as np

from .._backend import boolean_flags, is_cupy_array
from ._shared import _hz_complex, _hz_real, frobenius, hz_transform, zero_threshold  # noqa: F401
from .hsvd import _check_full_rank, _check_matrix, _check_options
from .orderings import modified_modulus
from .svd import _apply_q, _complete, _exponent, _householder_qrcp, _row_norms, _transform_pairs  # noqa: F401

__all__ = ["gsvd", "hz_transform"]


def _check_pair(F, G, xp=None):
    F = _check_matrix(F, "F", xp, complex_ok=True)
    G = _check_matrix(G, "G", xp, complex_ok=True)
    if F.dtype != G.dtype:
        raise TypeError(f"F and G must have the same dtype, got {F.dtype} and {G.dtype}")
    if F.shape[1] != G.shape[1]:
        raise ValueError(f"F and G must have the same number of columns, got F {F.shape} and G {G.shape}")
    n = F.shape[1]
    if G.shape[0] < n:
        raise ValueError(f"G must have at least as many rows as columns (full column rank), got shape {G.shape}")
    if F.shape[0] < n:
        raise ValueError(f"F must have at least as many rows as columns, got shape {F.shape}; "
                         "pad F with zero rows")
    return F, G


def _norm2(X):
    """f^H f of each row f of X (real)."""
    return (X * X).sum(axis=1) if X.dtype.kind != "c" else (X.real * X.real + X.imag * X.imag).sum(axis=1)


def _hari_zimmermann(WF, WG, WZ, tol, max_sweeps):
    """The pointwise implicit Hari-Zimmermann iteration on the rows of WF, WG, WZ (columns of F, G, Z),
    in place. Returns (sweeps, converged, transformations, big)."""
    n = WF.shape[0]
    steps = modified_modulus(n)
    total = total_big = 0
    for sweep_no in range(1, max_sweeps + 1):
        moved = big_count = 0
        for P in steps:
            I, J = P[:, 0], P[:, 1]
            Fi, Fj, Gi, Gj = WF[I], WF[J], WG[I], WG[J]
            z11, z12, z21, z22, rotate, big = hz_transform(                # a_ij = f_i^H f_j
                _norm2(Fi), _norm2(Fj), (Fi.conj() * Fj).sum(axis=1),
                _norm2(Gi), _norm2(Gj), (Gi.conj() * Gj).sum(axis=1), tol)
            z11, z12, z21, z22 = z11[:, None], z12[:, None], z21[:, None], z22[:, None]
            for W, Xi, Xj in ((WF, Fi, Fj), (WG, Gi, Gj), (WZ, WZ[I], WZ[J])):
                _transform_pairs(W, I, J, Xi, Xj, z11, z12, z21, z22)
            moved += int(rotate.sum())
            big_count += int(big.sum())
        total += moved
        total_big += big_count
        if big_count == 0:
            return sweep_no, True, total, total_big
    return max_sweeps, False, total, total_big


def _shorten(F, G):
    """Section 2's shortening: F[rF][:, c1] = Q_F R_F, G[:, c1][rG][:, c2] = Q_G R_G. Returns
    (R_F[:, c2], R_G, cols = c1[c2], (rF, reflF), (rG, reflG))."""
    RF, rF, c1, reflF = _householder_qrcp(F)
    RG, rG, c2, reflG = _householder_qrcp(G[:, c1])
    return RF[:, c2], RG, c1[c2], (rF, reflF), (rG, reflG)


def _unshorten(Xs, m, rows_refl):
    """Q Xs with the rows unsorted: the left vectors of the shortened problem, back in R^m."""
    rows, refl = rows_refl
    Y = np.zeros((m, Xs.shape[1]), dtype=Xs.dtype)
    Y[: Xs.shape[0]] = Xs
    Y = _apply_q(refl, Y)
    out = np.empty_like(Y)
    out[rows] = Y
    return out


def _finish(WF, WG, WZ, fnorm, return_x):
    """Section 2.4's rescaling and the sort by alpha / beta: (U_s, V_s, Z, alpha, beta, X) from the rows;
    fnorm = ||F||_F."""
    sF, sG = _row_norms(WF), _row_norms(WG)                              # Sigma_F, Sigma_G
    theta = 1 / np.hypot(sF, sG)
    alpha, beta = sF * theta, sG * theta
    order = np.lexsort((np.arange(len(alpha)), -alpha / beta))           # alpha / beta descending, stable
    alpha, beta, sF, sG, theta = alpha[order], beta[order], sF[order], sG[order], theta[order]
    WF, WG, WZ = WF[order], WG[order], WZ[order]
    nz = zero_threshold(sF, WZ, fnorm, np)
    alpha = np.where(nz, alpha, 0)
    U = np.zeros((WF.shape[1], len(order)), dtype=WF.dtype)
    U[:, nz] = (WF[nz] / sF[nz, None]).T
    if not nz.all():                                                     # alpha = 0: complete U (n x n)
        U[:, ~nz] = _complete(U[:, nz], U.shape[1])[:, int(nz.sum()):]
    V = (WG / sG[:, None]).T
    Z = WZ.T * theta
    X = np.linalg.solve(Z, np.eye(len(order), dtype=Z.dtype)) if return_x else None
    return U, V, Z, alpha, beta, X


def _gsvd_np(F, G, return_x, tol, max_sweeps):
    """The pointwise GSVD of checked numpy F, G (n >= 1): (U, V, Z, alpha, beta, X or None, info)."""
    n = F.shape[1]
    dt = F.dtype
    _check_full_rank(G, "the GSVD needs B = G^T G positive definite")
    Fs, Gs, cols, qF, qG = _shorten(F, G)
    WF, WG = np.ascontiguousarray(Fs.T), np.ascontiguousarray(Gs.T)      # (n, n) rows = columns
    fnorm = frobenius(Fs)
    WZ = np.eye(n, dtype=dt)
    gnorm = _row_norms(WG)                                               # Z_0 = diag(1 / ||g_j||)
    WF /= gnorm[:, None]
    WG /= gnorm[:, None]
    WZ /= gnorm[:, None]
    sweeps, converged, total, big = _hari_zimmermann(WF, WG, WZ, np.finfo(dt).dtype.type(tol), max_sweeps)
    Us, Vs, Zs, alpha, beta, Xs = _finish(WF, WG, WZ, fnorm, return_x)
    U, V = _unshorten(Us, F.shape[0], qF), _unshorten(Vs, G.shape[0], qG)
    Z = np.empty_like(Zs)
    Z[cols] = Zs                                                         # Z = P'' Z''
    X = None
    if return_x:
        X = np.empty_like(Xs)
        X[:, cols] = Xs                                                  # X = Z^-1 = X'' P''^T
    info = {"sweeps": sweeps, "converged": converged, "transformations": total, "big": big, "tol": tol}
    return U, V, Z, alpha, beta, X, info


def _ldexp(X, e, xp):
    """X 2^e, real or complex, e an integer or an integer array broadcasting against X: exact where the
    result is normal."""
    if X.dtype.kind != "c":
        return xp.ldexp(X, e)
    return (xp.ldexp(X.real, e) + 1j * xp.ldexp(X.imag, e)).astype(X.dtype)


def _unscale(alpha, beta, Z, X, ef, eg, xp):
    """The GSVD of (2^ef F, 2^eg G) from (alpha, beta, Z, X) of (F, G): column j of Z times
    c_j = 1 / hypot(2^ef alpha_j, 2^eg beta_j), alpha_j and beta_j times 2^ef c_j and 2^eg c_j, row j of
    X = Z^-1 times 1 / c_j (U and V do not change). The exponent k_j of the larger of 2^ef alpha_j,
    2^eg beta_j is taken out first, so that only what the result cannot represent over- or underflows."""
    ka, kb = xp.frexp(alpha)[1] + ef, xp.frexp(beta)[1] + eg            # beta > 0; alpha may be 0
    k = xp.where(alpha > 0, xp.maximum(ka, kb), kb)
    a, b = xp.ldexp(alpha, ef - k), xp.ldexp(beta, eg - k)               # the larger of the two in [0.5, 1)
    h = xp.hypot(a, b)
    with np.errstate(over="ignore", under="ignore"):
        Z = _ldexp(Z / h, -k, xp)
        X = None if X is None else _ldexp(X * h[:, None], k[:, None], xp)
    return a / h, b / h, Z, X


@boolean_flags("return_x", "return_info")
def gsvd(F, G, return_x=False, *, tol=None, max_sweeps=60, return_info=False):
    """Generalized SVD of (F, G): F Z = U diag(alpha), G Z = V diag(beta), alpha^2 + beta^2 = 1.

    Parameters
    ----------
    F : (MF, N) array_like, float32, float64, complex64 or complex128
        MF >= N (pad with zero rows otherwise).
    G : (MG, N) array_like, the dtype of F
        Of full column rank (MG >= N).
    return_x : bool, optional
        Also return X = Z^-1 (the right generalized singular vectors: F = U diag(alpha) X,
        G = V diag(beta) X).
    tol : float in (0, 1), optional
        Relative orthogonality threshold; default eps sqrt(N) (section 2.1).
    max_sweeps : int, optional
        Sweeps allowed (default 60).
    return_info : bool, optional
        Also return a dict: sweeps, converged, transformations, big (the big ones, criterion C1), tol.

    Returns
    -------
    U : (MF, N), V : (MG, N)
        Orthonormal columns (U's columns for alpha = 0 are an orthonormal completion).
    Z : (N, N)
        Nonsingular; its columns are the generalized eigenvectors of (F^T F, G^T G).
    alpha, beta : (N,), real
        alpha^2 + beta^2 = 1, beta > 0, sorted by alpha / beta descending. alpha_j is 0 where
        ||F z_j|| <= N eps ||F||_F ||z_j|| (F rank deficient in that direction, to rounding).
    X : (N, N)
        Only with ``return_x``.

    Raises
    ------
    TypeError
        F or G not float32/float64/complex64/complex128, or of different dtypes.
    ValueError
        Not 2-D, different column counts, fewer rows than columns, NaN/Inf, bad options.
    numpy.linalg.LinAlgError
        G not of full column rank (numerically); no convergence (unless ``return_info``).
    OverflowError
        The result is not representable in the dtype: some beta underflows (alpha / beta beyond its
        range), or Z or X overflows.

    Notes
    -----
    F and G are scaled apart by powers of 2 (exact) to entries of at most 1 before the iteration, so that
    their Gram entries neither over- nor underflow; alpha, beta, Z and X are scaled back (``_unscale``).

    References
    ----------
    .. [1] V. Novakovic, S. Singer, "Implicit Hari-Zimmermann algorithm for the generalized SVD on
       the GPUs" (Novakovic-Singer GSVD), sections 2.1.1, 2.1.2, 2.3-2.5.
    """
    _check_options(tol, max_sweeps)
    gpu = is_cupy_array(F) or is_cupy_array(G)
    if gpu:
        import cupy as xp
    else:
        xp = np
    F, G = _check_pair(F, G, xp)
    n = F.shape[1]
    dt = F.dtype
    ef, eg = _exponent(F), _exponent(G)
    F, G = _ldexp(F, -ef, xp), _ldexp(G, -eg, xp)                       # max |entry| in [0.5, 1), exact
    if gpu:
        from . import blocked

        res = blocked.gsvd(F, G, return_x, tol=tol, max_sweeps=max_sweeps, return_info=True)
        U, V, Z, alpha, beta = res[:5]
        X, info = (res[5] if return_x else None), res[-1]
    elif n == 0:
        tol = float(np.finfo(dt).eps) if tol is None else float(tol)
        U, V, Z = np.zeros((F.shape[0], 0), dt), np.zeros((G.shape[0], 0), dt), np.zeros((0, 0), dt)
        alpha = beta = np.zeros(0, np.finfo(dt).dtype)
        X = Z if return_x else None
        info = {"sweeps": 0, "converged": True, "transformations": 0, "big": 0, "tol": tol}
    else:
        tol = float(np.finfo(dt).eps) * math.sqrt(n) if tol is None else float(tol)
        U, V, Z, alpha, beta, X, info = _gsvd_np(F, G, return_x, tol, max_sweeps)
    if not info["converged"] and not return_info:
        raise np.linalg.LinAlgError(f"gsvd did not converge in max_sweeps={max_sweeps} sweeps; raise max_sweeps")
    if not (bool(xp.isfinite(alpha).all()) and bool(xp.isfinite(beta).all()) and bool(xp.isfinite(Z).all())):
        raise np.linalg.LinAlgError("gsvd produced non-finite values: G is not of full column rank (numerically)")
    alpha, beta, Z, X = _unscale(alpha, beta, Z, X, ef, eg, xp)
    if not (bool((beta > 0).all()) and bool(xp.isfinite(Z).all()) and (X is None or bool(xp.isfinite(X).all()))):
        raise OverflowError(f"the GSVD of (F, G) is not representable in {dt}: max |F| ~ 2^{ef} and max |G| ~ 2^{eg} "
                            "give some alpha / beta beyond its range (beta underflows) or Z or X = Z^-1 overflows")
    out = (U, V, Z, alpha, beta) + ((X,) if return_x else ())
    return out + (info,) if return_info else out
