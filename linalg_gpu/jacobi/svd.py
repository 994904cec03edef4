"""One-sided (Hestenes) Jacobi SVD of a real matrix (Acosta-Quinonez, eqs. 8-14; Novakovic-Singer HSVD, eq. 2.3).

The columns of G (m x n, m >= n) are orthogonalized by plane rotations from the right,
G <- G J, V <- V J, until every pair is relatively orthogonal; then the column norms are the
singular values (eq. 12) and the normalized columns the left singular vectors (eq. 13). For a
pivot pair (i, j) (Acosta-Quinonez):

    alpha = g_i^T g_i,  beta = g_j^T g_j,  gamma = g_i^T g_j                          (eq. 8)
    zeta = (beta - alpha) / (2 gamma),  t = sgn(zeta) / (|zeta| + sqrt(1 + zeta^2))  (eqs. 9-10)
    c = 1 / sqrt(1 + t^2),  s = c t                                                   (eq. 11)
    g_i <- c g_i - s g_j,   g_j <- s g_i + c g_j                    (the same on v_i, v_j)

A sweep runs the steps of an ordering (``orderings.sweep``); the pairs of a step are disjoint,
so each step is one vectorized numpy update of all its pairs (fancy indexing over rows of the
transposed, row-major working copy; no Python loop over pairs). Cupy input goes to
``linalg_gpu.jacobi.blocked.jacobi_svd``, the blocked variant (the chess tournament over column
blocks, an inner Jacobi per block pair, QR of the row- and column-sorted matrix as preconditioner):
its singular values agree with this path to high relative accuracy, not to the last bit.

A pair is rotated only when it is not relatively orthogonal (Novakovic-Singer HSVD, eq. 2.3; Acosta-Quinonez,
eq. 14), |gamma| > tol * sqrt(alpha) sqrt(beta); a sweep that rotates nothing ends the
iteration. This test is scale-invariant per column, which is what makes one-sided Jacobi
accurate in the relative sense for graded matrices (Demmel & Veselic 1992).
"""

from __future__ import annotations

import math
import numbers

import numpy as np

from .._backend import as_array, boolean_flags, check_dtype, get_array_module, is_cupy_array
from ._shared import _row_norms
from .orderings import ORDERINGS, sweep

__all__ = ["jacobi_svd", "jacobi_svdvals", "PRECONDITIONERS"]

PRECONDITIONERS = (True, False, "qrcp", "qr")


# ---------------------------------------------------------------------------------------------
# argument checks (public boundary only)


def _check_options(ordering, tol, max_sweeps, precondition):
    """Validate the options; return the preconditioner's name ("qrcp", "qr" or "none")."""
    if not isinstance(ordering, str) or ordering not in ORDERINGS:
        raise ValueError(f"ordering must be one of {ORDERINGS}, got {ordering!r}")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, numbers.Real)
                            or not math.isfinite(tol) or not 0 < tol < 1):
        raise ValueError(f"tol must be a number in (0, 1) (or None for sqrt(m) * eps), got {tol!r}")
    if isinstance(max_sweeps, bool) or not isinstance(max_sweeps, numbers.Integral) or max_sweeps < 1:
        raise ValueError(f"max_sweeps must be a positive integer, got {max_sweeps!r}")
    if isinstance(precondition, (bool, np.bool_)):
        return "qrcp" if precondition else "none"
    if isinstance(precondition, str) and precondition in ("qrcp", "qr"):
        return precondition
    raise ValueError(f"precondition must be one of {PRECONDITIONERS}, got {precondition!r}")


def _check_matrix(A):
    """A as a 2-D float32/float64 numpy array with finite entries."""
    A = as_array(A, "A")
    if A.dtype.kind == "c":
        raise TypeError(f"A has complex dtype {A.dtype}: complex input is not supported yet")
    check_dtype(A, "A")
    if A.ndim > 2:
        raise ValueError(f"A must be a 2-D matrix (m, n), got shape {A.shape}: batched input (..., m, n) "
                         "is not supported by jacobi_svd; loop over the leading axes")
    if A.ndim != 2:
        raise ValueError(f"A must be a 2-D matrix (m, n), got shape {A.shape}")
    if not np.isfinite(A).all():
        raise ValueError("A must be finite: it contains NaN or Inf")
    return A


# ---------------------------------------------------------------------------------------------
# the Jacobi core (trusts its input)


def _transform_pairs(W, I, J, Wi, Wj, m11, m12, m21, m22):
    """Rows I, J of W (their values Wi, Wj) <- [w_i w_j] M for each pair's 2 x 2 M (entries (r, 1)):
    w_i <- m11 w_i + m21 w_j, w_j <- m12 w_i + m22 w_j."""
    W[I] = m11 * Wi + m21 * Wj
    W[J] = m12 * Wi + m22 * Wj


def _hestenes(W, Vt, steps, tol, max_sweeps):
    """One-sided Jacobi on the rows of W (n, m), i.e. the columns of G = W^T, in place.

    ``Vt`` (n, n) or None accumulates the rotations in its rows (V = Vt^T). Returns
    (sweeps, converged, rotations, stop) with stop "no_rotation", "tangent" or "max_sweeps".
    """
    dt = W.dtype.type
    one = dt(1)
    tangent = math.sqrt(np.finfo(W.dtype).eps) / 2                   # T_eps of Novakovic-Singer HSVD, section 2
    rotations = 0
    for sweep_no in range(1, max_sweeps + 1):
        rotated = 0
        tau_max = 0.0
        for P in steps:
            I, J = P[:, 0], P[:, 1]                                      # (k,) pivot pairs
            Wi, Wj = W[I], W[J]                                          # (k, m) columns g_i, g_j
            alpha = (Wi * Wi).sum(axis=1)                                # (k,) eq. 8 (pairwise sums)
            beta = (Wj * Wj).sum(axis=1)                                 # (k,)
            gamma = (Wi * Wj).sum(axis=1)                                # (k,)
            rot = np.abs(gamma) > tol * np.sqrt(alpha) * np.sqrt(beta)   # (k,) eq. 2.3 of Novakovic-Singer HSVD
            if not rot.any():
                continue
            if not rot.all():
                I, J, Wi, Wj = I[rot], J[rot], Wi[rot], Wj[rot]
                alpha, beta, gamma = alpha[rot], beta[rot], gamma[rot]
            zeta = (beta - alpha) / (2 * gamma)                          # (r,) eq. 9
            t = np.copysign(one, zeta) / (np.abs(zeta) + np.hypot(one, zeta))   # (r,) eq. 10, no overflow
            c = one / np.sqrt(one + t * t)                               # (r,) eq. 11
            s = c * t                                                    # (r,)
            # the relative tangent: |t| times the ratio of the column norms bounds the relative
            # change of the shorter column; it is |t| for equal norms and ~ the relative
            # off-diagonal |gamma| / sqrt(alpha beta) for very different ones
            ratio = np.sqrt(np.maximum(alpha, beta) / np.minimum(alpha, beta))
            tau_max = max(tau_max, float((np.abs(t) * ratio).max()))
            c, s = c[:, None], s[:, None]                                # (r, 1)
            _transform_pairs(W, I, J, Wi, Wj, c, s, -s, c)
            if Vt is not None:
                _transform_pairs(Vt, I, J, Vt[I], Vt[J], c, s, -s, c)
            rotated += len(I)
        rotations += rotated
        if rotated == 0:
            return sweep_no, True, rotations, "no_rotation"
        if tau_max <= tangent:
            return sweep_no, True, rotations, "tangent"
    return max_sweeps, False, rotations, "max_sweeps"


def _exponent(A):
    """e with max |entry| (of the real and imaginary parts) = f 2^e, f in [0.5, 1); 0 for a zero or empty A
    (numpy or cupy): A 2^-e, exact, has its largest entry in [0.5, 1) whatever the dtype's range."""
    if A.size == 0:
        return 0
    xp = get_array_module(A)
    amax = float(xp.abs(A.real).max())
    if A.dtype.kind == "c":
        amax = max(amax, float(xp.abs(A.imag).max()))
    return math.frexp(amax)[1]


def _ldexp_finite(x, e, overflow_message):
    """x 2^e (numpy or cupy; exact where normal); ``OverflowError(overflow_message)`` where a value is not
    representable in the dtype."""
    xp = get_array_module(x)
    with np.errstate(over="ignore"):
        x = xp.ldexp(x, e)
    if not bool(xp.isfinite(x).all()):
        raise OverflowError(overflow_message)
    return x


def _relative_off(W, s):
    """max |g_i^T g_j| / (||g_i|| ||g_j||) over the pairs of nonzero columns (0 if fewer than 2)."""
    nz = s > 0
    if nz.sum() < 2:
        return 0.0
    X = W[nz] / s[nz, None]                                              # (r, m) unit rows
    C = np.abs(X @ X.T)                                                  # (r, r)
    np.fill_diagonal(C, 0)
    return float(C.max())


def _householder_qrcp(A):
    """Householder QR with column pivoting of A (m, n), m >= n, its rows sorted first.

    A[rows][:, cols] = Q R. Returns R (n, n) upper triangular, rows (m,), cols (n,) and the
    reflectors (vs, taus): H_k = I - tau_k v_k v_k^H acting on rows k: (v_k has m - k entries).
    Sorting the rows by decreasing max-norm and pivoting the columns makes the factorization
    row-wise backward stable (Cox & Higham 1998), so that R inherits the grading of A.
    """
    m, n = A.shape
    rows = np.argsort(-np.abs(A).max(axis=1), kind="stable")            # (m,) decreasing row norms
    T = np.ascontiguousarray(A[rows].T)                                  # (n, m): row j = column j
    cols = np.arange(n)
    vs, taus = [], []
    for k in range(n):
        p = k + int(np.argmax(_scaled_norms(T[k:, k:])))                 # (n - k,) trailing column norms
        if p != k:
            T[[k, p]] = T[[p, k]]
            cols[[k, p]] = cols[[p, k]]
        x = T[k, k:].copy()                                              # (m - k,)
        nx = float(_scaled_norms(x[None, :])[0])
        if nx == 0:                                                      # the rest is zero: rank k
            break
        if not x[1:].any():                                              # nothing to eliminate: H_k = I
            vs.append(None)                                              # (like LAPACK's xLARFG, tau = 0)
            taus.append(0.0)
            continue
        x0 = x[0]
        alpha = -nx * (x0 / abs(x0) if x0 != 0 else 1)                # -sign(x0) ||x||, complex: the phase
        # xLARFG's form: v = x / (x0 - alpha) with v[0] = 1 and tau = (alpha - x0) / alpha in [1, 2]
        # (real also for complex x: H = I - tau v v^H is Hermitian): nothing squares the (possibly tiny
        # or huge) entries, so nothing under- or overflows
        v = x / (x0 - alpha)
        v[0] = 1.0
        tau = ((alpha - x0) / alpha).real
        T[k, k:] = 0
        T[k, k] = alpha
        if k + 1 < n:
            T[k + 1:, k:] -= (tau * (T[k + 1:, k:] @ v.conj()))[:, None] * v[None, :]
        vs.append(v)
        taus.append(tau)
    R = np.triu(T[:, :n].T)                                              # (n, n)
    return R, rows, cols, (vs, taus)


def _scaled_norms(X):
    """The 2-norms of the rows of X (r, m) without under- or overflow: max|x| * ||x / max|x|||."""
    mx = np.abs(X).max(axis=1)
    safe = np.where(mx > 0, mx, 1)
    return mx * np.sqrt((np.abs(X / safe[:, None]) ** 2).sum(axis=1))


def _apply_q(reflectors, Y):
    """Q Y for Q = H_0 H_1 ... from :func:`_householder_qrcp`; Y (m, p) is overwritten."""
    vs, taus = reflectors
    for k in range(len(vs) - 1, -1, -1):
        v = vs[k]                                                        # (m - k,) or None for H_k = I
        if v is None:
            continue
        Y[k:] -= (taus[k] * v)[:, None] * (v.conj() @ Y[k:])[None, :]
    return Y


def _complete(Q, p):
    """(k, p) orthonormal: the columns of Q (k, r), orthonormal, then p - r more orthogonal to them.

    The extra columns are H_0 ... H_{r-1} e_j, j = r .. p-1, from the Householder QR of Q
    (numpy's ``qr(mode="raw")``): they span the orthogonal complement of range(Q) to working
    precision, deterministically.
    """
    k, r = Q.shape
    if p <= r:
        return Q
    Y = np.zeros((k, p - r), dtype=Q.dtype)                              # (k, p - r)
    Y[np.arange(r, p), np.arange(p - r)] = 1
    if r:
        h, tau = np.linalg.qr(Q, mode="raw")                             # h (r, k): row j holds v_j below 1
        for j in range(r - 1, -1, -1):
            v = h[j, j:].copy()
            v[0] = 1
            Y[j:] -= (tau[j] * v)[:, None] * (v.conj() @ Y[j:])[None, :]
    return np.concatenate([Q, Y.astype(Q.dtype)], axis=1)


def _normalized_columns(W, s, p):
    """(k, p) orthonormal: the rows of W (n, k) divided by s, where s > 0, completed elsewhere and
    up to p columns (eq. 13, u_i = A v_i / sigma_i)."""
    n, k = W.shape
    nz = s > np.finfo(W.dtype).tiny                                      # below: zero to underflow
    U = np.empty((k, max(n, p)), dtype=W.dtype)
    done = (W[nz] / s[nz, None]).T                                       # (k, r)
    full = _complete(done, max(n, p))                                    # (k, max(n, p))
    U[:, np.flatnonzero(nz)] = done
    rest = np.concatenate([np.flatnonzero(~nz), np.arange(n, max(n, p))])
    U[:, rest] = full[:, done.shape[1]:]
    return U[:, :p]


# ---------------------------------------------------------------------------------------------
# the driver for m >= n


def _jacobi_svd_tall(A, full_matrices, compute_uv, ordering, tol, max_sweeps, mode):
    """(U, s, V, info) of a finite, nonempty A (m, n) with m >= n; U is None without compute_uv."""
    m, n = A.shape
    dt = A.dtype
    eps = float(np.finfo(dt).eps)
    e = _exponent(A)
    A = np.ldexp(A, -e)                                                  # max |a_ij| in [0.5, 1), exact
    if mode == "none" or (mode == "qr" and m == n):
        mode = "none"
        W = np.ascontiguousarray(A.T)                                    # (n, m) rows = columns of A
    elif mode == "qr":
        Q, R = np.linalg.qr(A)                                           # (m, n), (n, n)
        W = np.ascontiguousarray(R.T)                                    # Jacobi on R
    else:
        R, rows, cols, refl = _householder_qrcp(A)                       # A[rows][:, cols] = Q R
        W = R                                                            # Jacobi on R^T: rows of W = columns of R^T
    tol = math.sqrt(W.shape[1]) * eps if tol is None else float(tol)
    Vt = np.eye(n, dtype=dt) if compute_uv else None                     # (n, n) rows = columns of V_J
    steps = sweep(n, ordering)
    sweeps, converged, rotations, stop = _hestenes(W, Vt, steps, tol, max_sweeps)
    sj = _row_norms(W)                                                   # (n,) eq. 12
    order = np.argsort(-sj, kind="stable")
    s = sj[order]                                                        # (n,) descending
    info = {"sweeps": sweeps, "converged": converged, "rotations": rotations, "ordering": ordering,
            "off_norm": _relative_off(W, sj), "tol": tol, "precondition": mode, "stop": stop}
    with np.errstate(over="ignore"):
        s_out = np.ldexp(s, e)                                           # inf where not representable
    if not compute_uv:
        return None, s_out, None, info
    W, Vt = W[order], Vt[order]                                          # sorted rows
    p = m if full_matrices else n
    if mode == "none":
        U = _normalized_columns(W, s, p)                                 # (m, p) eq. 13
        V = Vt.T                                                         # (n, n)
    elif mode == "qr":
        UR = _normalized_columns(W, s, n)                                # (n, n) R = UR S V^T
        U = Q @ UR                                                       # (m, n)
        if full_matrices:
            U = _complete(U, m)                                          # (m, m)
        V = Vt.T
    else:
        # R^T V_J = W^T = U_G S  =>  R = V_J S U_G^T  =>  A[rows][:, cols] = (Q V_J) S U_G^T
        Y = np.zeros((m, p), dtype=dt)                                   # (m, p)
        Y[:n, :n] = Vt.T                                                 # V_J
        if p > n:
            Y[np.arange(n, p), np.arange(n, p)] = 1
        Us = _apply_q(refl, Y)                                           # (m, p) = Q_full [V_J 0; 0 I]
        U = np.empty_like(Us)
        U[rows] = Us                                                     # undo the row sorting
        UG = _normalized_columns(W, s, n)                                # (n, n) U_G
        V = np.empty_like(UG)
        V[cols] = UG                                                     # undo the column pivoting
    return U, s_out, V, info


# ---------------------------------------------------------------------------------------------
# public function


@boolean_flags("full_matrices", "compute_uv", "return_info")
def jacobi_svd(A, full_matrices=False, compute_uv=True, *, ordering="round_robin", tol=None, max_sweeps=60,
               precondition=True, return_info=False):
    """Singular value decomposition A = U diag(s) Vh by the one-sided (Hestenes) Jacobi method.

    Parameters
    ----------
    A : (M, N) array_like, float32 or float64
        A real matrix; float32 is computed in float32. Stacks (..., M, N) are not supported.
        For M < N the SVD of A^T is computed and U and V swapped.
    full_matrices : bool, optional
        If True, U is (M, M) and Vh (N, N), the extra columns an orthonormal completion; else
        U is (M, K) and Vh (K, N), K = min(M, N). Default False (unlike numpy.linalg.svd).
    compute_uv : bool, optional
        Compute U and Vh (accumulate the rotations) or only s. Default True.
    ordering : {"round_robin", "modified_modulus", "row_cyclic"}, optional
        The pivot ordering of a sweep (``linalg_gpu.jacobi.orderings``). Default "round_robin"
        (Brent-Luk, Acosta-Quinonez). Only the numpy path honours it.
    tol : float in (0, 1), optional
        A pair is rotated only when |gamma| > tol sqrt(alpha beta) (Novakovic-Singer HSVD eq. 2.3, Acosta-Quinonez
        eq. 14). Default sqrt(m') * eps(dtype), m' the length of the columns being
        orthogonalized (N after preconditioning, M without), as LAPACK's xGESVJ: a computed
        inner product of m' terms carries an error of about sqrt(m') eps ||g_i|| ||g_j||, so a
        smaller threshold would chase rounding noise, and a larger one would leave U and V less
        orthogonal.
    max_sweeps : int, optional
        Sweeps allowed before giving up. Default 60 (10-20 are typical for n <= 1000).
    precondition : {True, False, "qrcp", "qr"}, optional
        True or "qrcp" (default): sort the rows of A by decreasing max-norm, factor
        A[rows][:, cols] = Q R by Householder QR with column pivoting (implemented here; numpy
        has no pivoted QR) and run Jacobi on R^T (Drmac & Veselic 2008), then U = Q V_J and V the
        normalized columns of R^T V_J. Applied for M >= N, square included: it is row-wise
        backward stable, keeps the relative accuracy on graded matrices D1 B D2 (measured: max
        relative error ~1e-14 for n = 30, D1, D2 spanning 1e-12..1) and needs fewer sweeps (about
        6 instead of 10-20). "qr": numpy.linalg.qr without pivoting, Jacobi on R, U = Q U_R, only
        for M > N (the variant of the GPU path); it preserves column scaling but not row
        scaling: on the same graded matrices it loses up to 1e-5 relative accuracy. False:
        Jacobi directly on A.
    return_info : bool, optional
        Also return a dict ``info`` (see Returns).

    Returns
    -------
    U : (M, M) or (M, K) ndarray
        Left singular vectors, orthonormal also for zero singular values (completed). Not
        returned when ``compute_uv`` is False.
    s : (K,) ndarray
        Singular values, descending, the column norms of A V (Acosta-Quinonez eq. 12).
    Vh : (N, N) or (K, N) ndarray
        Right singular vectors as rows. Not returned when ``compute_uv`` is False.
    info : dict
        Only with ``return_info``: ``sweeps`` (run, including the last), ``converged`` (bool),
        ``rotations`` (applied), ``ordering``, ``off_norm`` (max |g_i^T g_j| / (||g_i|| ||g_j||)
        of the final columns, eq. 14), ``tol``, ``precondition`` ("qrcp", "qr" or "none") and
        ``stop`` ("no_rotation", "tangent", "max_sweeps" or "trivial").

    Raises
    ------
    TypeError
        A is complex or not float32/float64 (integers included: pass ``A.astype(float)``).
    ValueError
        A is not 2-D or not finite; ``ordering``, ``tol``, ``max_sweeps`` or ``precondition``
        is invalid.
    numpy.linalg.LinAlgError
        No convergence in ``max_sweeps`` sweeps (with ``return_info`` the result is returned
        instead, with ``info["converged"]`` False).
    OverflowError
        The largest singular value is not representable in the dtype (||A||_2 above its largest number).

    Notes
    -----
    Convergence: a sweep that rotates no pair (Novakovic-Singer HSVD, section 2). The paper also stops early
    when every tangent of a sweep is below T_eps = sqrt(eps) / 2 (the next sweep's tangents are
    then O(eps) and change nothing). Here that early stop uses the relative tangent
    |t| * sqrt(max(alpha, beta) / min(alpha, beta)) of each applied rotation instead of |t|: for
    columns of very different norms |t| is tiny even when the short column is far from converged
    (the rotation still changes it by ~|gamma| / sqrt(alpha beta)), so the plain |t| test would
    stop too early on graded matrices; the relative tangent bounds the relative change of the
    shorter column's norm by its square, which is the paper's eq. (2.6) argument made relative.
    A rotation is never skipped for having a small tangent (that would leave U and V orthogonal
    only to sqrt(eps)).

    Zero singular values: their columns of U (and of V under "qrcp") are completed to an
    orthonormal basis (Householder QR of the nonzero ones); A is scaled by a power of two first
    so that the squared norms neither overflow nor lose the small columns to underflow needlessly.

    References
    ----------
    .. [1] R. I. Acosta-Quinonez, D. Torres-Roman, R. Rodriguez-Avila, D. Robles-Valdez, "A
       parallel implementation of one-sided Jacobi SVD for non-symmetric squared matrices on a
       high-performance GPU" (Acosta-Quinonez), eqs. (8)-(14).
    .. [2] V. Novakovic, S. Singer, "A GPU-based hyperbolic SVD algorithm", BIT 51 (2011)
       (Novakovic-Singer HSVD), eq. (2.3), the tangent threshold and the modified modulus strategy.
    .. [3] J. Demmel, K. Veselic, "Jacobi's method is more accurate than QR", SIAM J. Matrix Anal.
       Appl. 13 (1992). Z. Drmac, K. Veselic, "New fast and accurate Jacobi SVD algorithm I",
       SIAM J. Matrix Anal. Appl. 29 (2008).

    Examples
    --------
    >>> import numpy as np
    >>> from linalg_gpu.jacobi.svd import jacobi_svd
    >>> A = np.random.default_rng(0).standard_normal((6, 4))
    >>> U, s, Vh = jacobi_svd(A)
    >>> np.allclose(U * s @ Vh, A), np.allclose(s, np.linalg.svd(A, compute_uv=False))
    (True, True)
    """
    mode = _check_options(ordering, tol, max_sweeps, precondition)
    if is_cupy_array(A):
        from . import blocked

        return blocked.jacobi_svd(A, full_matrices, compute_uv, tol=tol, max_sweeps=max_sweeps,
                                  precondition=precondition, return_info=return_info)
    A = _check_matrix(A)
    dt = A.dtype
    m, n = A.shape
    if m == 0 or n == 0:                                                  # like numpy.linalg.svd
        info = {"sweeps": 0, "converged": True, "rotations": 0, "ordering": ordering, "off_norm": 0.0,
                "tol": float(tol) if tol is not None else math.sqrt(max(m, n)) * float(np.finfo(dt).eps),
                "precondition": mode, "stop": "trivial"}
        s = np.zeros(0, dtype=dt)
        if not compute_uv:
            return (s, info) if return_info else s
        U = np.eye(m, dtype=dt) if full_matrices else np.zeros((m, 0), dtype=dt)
        Vh = np.eye(n, dtype=dt) if full_matrices else np.zeros((0, n), dtype=dt)
        return (U, s, Vh, info) if return_info else (U, s, Vh)
    if m >= n:
        U, s, V, info = _jacobi_svd_tall(A, full_matrices, compute_uv, ordering, tol, max_sweeps, mode)
    else:                                                                 # A^T = V s U^T
        V, s, U, info = _jacobi_svd_tall(A.T, full_matrices, compute_uv, ordering, tol, max_sweeps, mode)
    if np.isposinf(s).any():                                              # A was scaled by a power of 2
        raise OverflowError(f"the largest singular value of A overflows {dt}: ||A||_2 > {np.finfo(dt).max:.4g}")
    # backstops for dynamic ranges the sums of squares of eq. 8 cannot represent (columns more than
    # ~1e150 apart in float64, ~1e19 in float32): never a silent NaN or a false "converged"
    if not (np.all(np.isfinite(s)) and (not compute_uv or (np.all(np.isfinite(U)) and np.all(np.isfinite(V))))):
        raise np.linalg.LinAlgError("jacobi_svd produced non-finite values: the column norms of A span more than "
                                    f"{A.dtype} can square (about 1e150 in float64, 1e19 in float32)")
    if not np.isfinite(info["off_norm"]) or info["off_norm"] > 1e-2:
        info["converged"] = False
    if not info["converged"] and not return_info:
        raise np.linalg.LinAlgError(
            f"jacobi_svd did not converge in max_sweeps={max_sweeps} sweeps (largest relative "
            f"off-diagonal {info['off_norm']:.2e} > tol {info['tol']:.2e}); raise max_sweeps")
    if not compute_uv:
        return (s, info) if return_info else s
    out = (U, s, np.ascontiguousarray(V.T))
    return out + (info,) if return_info else out


def jacobi_svdvals(A, *, tol=None, max_sweeps=60):
    """The singular values of every matrix of a stack A (..., m, n), by one-sided Jacobi on all of them at once.

    Per matrix: scaled by a power of two, R of Householder QR (``numpy.linalg.qr``, batched; column-wise backward
    stable, so a scaling of the columns costs no relative accuracy), then the round-robin sweeps of Hestenes
    rotations on R^T's columns (Drmac & Veselic's Jacobi on R^T, without their pivoting), each step's pairs
    rotated in every matrix at once where they are not relatively orthogonal (|gamma| > tol sqrt(alpha beta), the
    test of :func:`jacobi_svd`). A Python step costs about the same for one matrix or a thousand, which is what a
    sample of many small design matrices needs; :func:`jacobi_svd` (with column pivoting) is the one-matrix
    function.

    Parameters
    ----------
    A : (..., m, n) array_like, float32 or float64, finite; numpy only.
    tol : float in (0, 1), optional
        Default sqrt(min(m, n)) * eps(dtype).
    max_sweeps : int, optional
        Sweeps allowed; the column norms are returned as they are after the last one.

    Returns
    -------
    s : (..., min(m, n)) descending, in A's dtype.
    """
    A = as_array(A, "A")
    if is_cupy_array(A):
        raise TypeError("jacobi_svdvals takes numpy arrays (the stacked sweeps run on the CPU)")
    check_dtype(A, "A")
    if A.dtype.kind == "c":
        raise TypeError(f"A has complex dtype {A.dtype}: complex input is not supported yet")
    if A.ndim < 2:
        raise ValueError(f"A must be a stack of matrices (..., m, n), got shape {A.shape}")
    _check_options("round_robin", tol, max_sweeps, False)
    if not np.isfinite(A).all():
        raise ValueError("A must be finite: it contains NaN or Inf")
    if A.shape[-2] < A.shape[-1]:
        A = np.swapaxes(A, -1, -2)
    batch, (m, n) = A.shape[:-2], A.shape[-2:]
    dt = A.dtype
    if n == 0 or A.size == 0:
        return np.zeros(batch + (n,), dtype=dt)
    X = A.reshape((-1, m, n))
    amax = np.abs(X).max(axis=(1, 2))
    e = np.frexp(np.where(amax > 0, amax, 1))[1]                        # (K,) max |x| = f 2^e, f in [0.5, 1)
    X = np.ldexp(X, -e[:, None, None].astype(np.int32)).astype(dt, copy=False)
    W = np.ascontiguousarray(np.linalg.qr(X, mode="r"))                 # (K, n, n): rows of W = columns of R^T
    tol = math.sqrt(n) * float(np.finfo(dt).eps) if tol is None else float(tol)
    one, tangent = dt.type(1), math.sqrt(np.finfo(dt).eps) / 2
    steps = sweep(n, "round_robin")
    for _ in range(max_sweeps):
        rotated, tau_max = False, 0.0
        for P in steps:
            I, J = P[:, 0], P[:, 1]
            Wi, Wj = W[:, I], W[:, J]                                    # (K, k, n)
            alpha, beta, gamma = (Wi * Wi).sum(axis=2), (Wj * Wj).sum(axis=2), (Wi * Wj).sum(axis=2)   # (K, k)
            rot = np.abs(gamma) > tol * np.sqrt(alpha) * np.sqrt(beta)
            if not rot.any():
                continue
            rotated = True
            zeta = (beta - alpha) / (2 * np.where(rot, gamma, one))
            t = np.where(rot, np.copysign(one, zeta) / (np.abs(zeta) + np.hypot(one, zeta)), 0).astype(dt)
            c = one / np.sqrt(one + t * t)
            sn = c * t
            with np.errstate(divide="ignore", invalid="ignore"):         # (a zero column is never rotated)
                ratio = np.sqrt(np.maximum(alpha, beta) / np.minimum(alpha, beta))
                tau_max = max(tau_max, float(np.max(np.where(rot, np.abs(t) * ratio, 0))))
            c, sn = c[..., None], sn[..., None]
            W[:, I] = c * Wi - sn * Wj
            W[:, J] = sn * Wi + c * Wj
        if not rotated or tau_max <= tangent:
            break
    s = -np.sort(-_row_norms(W), axis=1)                                 # (K, n) descending
    with np.errstate(over="ignore"):
        s = np.ldexp(s, e[:, None].astype(np.int32))
    return s.reshape(batch + (n,)).astype(dt, copy=False)
